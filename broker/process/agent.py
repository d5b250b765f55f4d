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

from broker.cli.client import ApiClient, ClientError
from broker.services.outcomes import RETRY_BASE
from broker.services.mirror import member_objects
from clusters import jobsets
from clusters.claim_templates import apply_templates
from clusters.member import JOBSET_GROUP, JOBSET_VERSION, MemberClient, MemberError

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
        self._labelled: dict[str, dict] = {}  # namespace → the labels this agent last made sure it carries

    def run_once(self) -> dict:
        """One heartbeat, the inventory if it changed, the work assigned, the copies' status; what the broker
        answered to the heartbeat."""
        served = self.member.serves(JOBSET_GROUP, JOBSET_VERSION, "jobsets")
        answer = self.broker.post("/api/v1/agent/heartbeat",
                                  json={"version": self.member.version(), "jobset_crd": served})
        self.report_inventory()
        self.reconcile()
        self.report_status()
        return answer

    def reconcile(self) -> list[dict]:
        """Sweep, delete, apply as the broker's dispatcher would on a push member; the outcomes reported.

        Only copies of the placements the broker lists as kept here stay: a copy of any other (failed over
        while this member was cut off, cancelled, moved) is deleted before anything is applied."""
        work = self.broker.post("/api/v1/agent/work")
        kept = set(work["kept"])
        jobsets.delete_owned(self.member, lambda placement_ids: placement_ids & kept)
        outcomes = [self._delete(item) for item in work["delete"]]
        refused = self.label(work.get("namespaces") or [])
        if work["apply"] and all(o["kind"] == "done" for o in outcomes):  # capacity freed before it is reused
            existing = {namespace: {o["metadata"]["name"]: o for o in jobsets.list_in(self.member, namespace)}
                        for namespace in sorted({item["namespace"] for item in work["apply"]} - set(refused))}
            outcomes += [{"placement_id": item["placement_id"], "action": "apply", "kind": "refuse",
                          "error": refused[item["namespace"]]} if item["namespace"] in refused else
                         self._apply(item, existing[item["namespace"]].get(item["name"]), kept)
                         for item in work["apply"]]
        if outcomes:
            self.broker.post("/api/v1/agent/outcomes", json={"outcomes": outcomes})
        return outcomes

    def label(self, namespaces: list[dict]) -> dict[str, str]:
        """The broker's namespaces here, made or relabelled with their tenant's labels (its Pod Security level); those
        that exist and are not the broker's, with why they are refused."""
        refused = {}
        for namespace in namespaces:
            name = namespace["name"]
            if self._labelled.get(name) == namespace["labels"]:
                continue  # made sure of already: no request each pass
            try:
                jobsets.ensure_namespace(self.member, name, namespace["labels"],
                                         adoptable=namespace["adoptable"], cluster="this member")
                self._labelled[name] = namespace["labels"]
            except jobsets.NotOurs as exc:
                refused[name] = str(exc)
        return refused

    def report_status(self) -> int:
        """Every copy of the broker's here, listed, for the broker to follow; how many."""
        items, version = jobsets.list_owned(self.member, from_cache=True)
        self.broker.post("/api/v1/agent/status", json={"items": items, "resourceVersion": version})
        return len(items)

    def _apply(self, item: dict, found: dict | None, kept: set[int]) -> dict:
        outcome = {"placement_id": item["placement_id"], "action": "apply"}
        try:
            adopted = found is not None and jobsets.placement_id_of(found) == str(item["placement_id"])
            if found is not None and not adopted:
                owner = jobsets.placement_id_of(found)
                what = f"{item['namespace']}/{item['name']}"
                if owner is None or not owner.isdigit():
                    return {**outcome, "kind": "fail", "error": f"a JobSet {what} that Archipelago did not create "
                                                                 "exists there"}
                if int(owner) in kept:
                    return {**outcome, "kind": "retry", "error": f"{what} is still held by placement {owner}"}
                jobsets.delete(self.member, item["namespace"], item["name"], found["metadata"]["uid"])
                if jobsets.get(self.member, item["namespace"], item["name"]) is not None:
                    return {**outcome, "kind": "retry",
                            "error": f"waiting for the stale copy {what} (placement {owner}) to be deleted"}
            templates = item.get("claim_templates") or []
            apply_templates(self.member, templates)  # before the JobSet, then owned by it (as a push member's)
            applied = jobsets.apply(self.member, item["jobset"])
            apply_templates(self.member, templates, owner=applied)
            return {**outcome, "kind": "done", "jobset": applied, "adopted": adopted}
        except MemberError as exc:  # permanent: this member will not take it, another may
            if exc.reason == "NotFound":
                self._labelled.pop(item["namespace"], None)  # the namespace may be gone: made again next pass
            return {**outcome, "kind": "refuse" if jobsets.is_permanent(exc) else "retry", "error": str(exc)}

    def _delete(self, item: dict) -> dict:
        outcome = {"placement_id": item["placement_id"], "action": "delete"}
        try:
            if not jobsets.delete_copy(self.member, item["namespace"], item["name"], item["placement_id"],
                                       item["uid"]):
                return {**outcome, "kind": "retry", "error": "waiting for the member to finish deleting it",
                        "delay": RETRY_BASE}
            return {**outcome, "kind": "done"}
        except MemberError as exc:
            return {**outcome, "kind": "retry", "error": str(exc)}

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
