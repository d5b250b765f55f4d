"""`archipelago agent`: runs inside a member the broker cannot reach (behind NAT or a firewall) and calls
out to the broker instead, with the token minted when the member was registered in pull mode.

It talks to its own cluster with the same `MemberClient` the broker uses for push members (in-cluster
ServiceAccount by default, `--kubeconfig` beside the cluster), and to the broker over HTTP(S) with the
CLI's `ApiClient`. Each pass (`run_once`) heartbeats with the member's version, so the broker's health
loop sees the member alive exactly while the agent both reaches its cluster and reaches the broker, then
reports the objects the inventory is made of (as the broker would have listed them: the broker writes the
same rows from them as from a push member's lists), when they changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from broker.client import ApiClient, ClientError
from broker.services.inventory import member_objects
from clusters.member import MemberClient, MemberError

log = logging.getLogger("archipelago.agent")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster_kubeconfig(service_account: Path = SERVICE_ACCOUNT) -> str:
    """The pod's ServiceAccount as an inline kubeconfig (no file paths: the same rules as any other)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ValueError("not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig")
    ca = base64.b64encode((service_account / "ca.crt").read_bytes()).decode()
    token = (service_account / "token").read_text().strip()
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return (f"apiVersion: v1\nkind: Config\ncurrent-context: in-cluster\n"
            f"clusters: [{{name: in-cluster, cluster: {{server: '{server}', certificate-authority-data: {ca}}}}}]\n"
            f"users: [{{name: agent, user: {{token: '{token}'}}}}]\n"
            f"contexts: [{{name: in-cluster, context: {{cluster: in-cluster, user: agent}}}}]\n")


class Agent:
    """One pull member's agent: its own cluster's client and the broker's."""

    def __init__(self, broker: ApiClient, member: MemberClient) -> None:
        self.broker, self.member = broker, member
        self._reported: str | None = None  # the digest of the inventory the broker last took

    def run_once(self) -> dict:
        """One heartbeat, then the inventory if it changed; what the broker answered to the heartbeat."""
        answer = self.broker.post("/api/v1/agent/heartbeat", json={"version": self.member.version()})
        self.report_inventory()
        return answer

    def report_inventory(self) -> bool:
        """Send the member's nodes, pods and HyperNodes unless the broker has them already; whether sent."""
        objects = member_objects(self.member)
        digest = hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()
        if digest == self._reported:
            return False
        self.broker.post("/api/v1/agent/inventory", json=objects)
        self._reported = digest
        return True

    def run(self, interval: float, stop: threading.Event) -> None:
        """Pass after pass until `stop`; a failing pass is logged and the next one tries again (the broker
        marks the member NotReady if they keep failing past its grace)."""
        while not stop.is_set():
            try:
                self.run_once()
            except (ClientError, MemberError) as exc:
                log.warning("agent pass failed: %s", exc)
            stop.wait(interval)
