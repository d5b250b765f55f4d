"""Run the simulator inside a test process: `with running_simulator(scenario) as sim: ...`.

The server runs in a background thread on a free 127.0.0.1 port; the context manager returns
once the app has started (a real readiness signal: the lifespan startup plus the listening socket).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import yaml
from kubernetes import client, config

from clusters.sim.cluster import SimCluster
from clusters.sim.server import SimServer
from clusters.sim.traffic import Request

STARTUP_TIMEOUT = 30.0


class SimHandle:
    """What a test holds: URLs, kubeconfigs, faults, time, and the clusters' in-memory state."""

    def __init__(self, server: SimServer) -> None:
        self._server = server
        self.app = server.app

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def cluster_names(self) -> list[str]:
        return list(self.app.clusters)

    @property
    def admin_token(self) -> str:
        return self.app.admin_token

    def cluster_url(self, name: str) -> str:
        return self._server.cluster_url(name)

    def kubeconfig(self, name: str) -> str:
        """Kubeconfig YAML for one cluster: inline bearer token, inline CA data when TLS is on."""
        return self._server.kubeconfig(name)

    def write_kubeconfigs(self, directory: Path) -> list[Path]:
        return self._server.write_kubeconfigs(Path(directory))

    def cluster(self, name: str) -> SimCluster:
        return self.app.clusters[name]

    def others_pods(self, name: str, requests: dict[str, str], nodes: int | None = None) -> None:
        """Someone else's long-running pod on each node (the first `nodes` of them), made through the
        cluster's API with the official client as a user would: they hold their nodes as on any cluster."""
        with config.new_client_from_config_dict(yaml.safe_load(self.kubeconfig(name))) as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "others"}})
            for node in core.list_node().items[:nodes]:
                core.create_namespaced_pod("others", {
                    "metadata": {"name": f"theirs-{node.metadata.name}",
                                 "annotations": {"sim.archipelago.io/duration": "100h"}},
                    "spec": {"nodeName": node.metadata.name, "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": requests}}]}})

    def service_account(self, name: str, account: str, rules: list[dict], *,
                        role_binding_namespace: str | None = None) -> str:
        """A kubeconfig for a new ServiceAccount `account` (in a namespace of that name) allowed `rules`, made
        through the cluster's API with the official client as an admin would: a ClusterRole bound cluster-wide
        (or by a RoleBinding in one namespace) and a token Secret, filled by the token controller."""
        with config.new_client_from_config_dict(yaml.safe_load(self.kubeconfig(name))) as api:
            core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
            core.create_namespace({"metadata": {"name": account}})
            core.create_namespaced_service_account(account, {"metadata": {"name": account}})
            rbac.create_cluster_role({"metadata": {"name": account}, "rules": rules})
            binding = {"metadata": {"name": account},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
                       "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account}]}
            if role_binding_namespace:
                rbac.create_namespaced_role_binding(role_binding_namespace, binding)
            else:
                rbac.create_cluster_role_binding(binding)
            core.create_namespaced_secret(account, {"metadata": {"name": "token", "annotations": {
                "kubernetes.io/service-account.name": account}}, "type": "kubernetes.io/service-account-token"})
            self.settle()  # the token controller has filled it
            token = base64.b64decode(core.read_namespaced_secret("token", account).data["token"]).decode()
        kubeconfig = yaml.safe_load(self.kubeconfig(name))
        kubeconfig["users"][0]["user"] = {"token": token}
        return yaml.safe_dump(kubeconfig)

    # faults (see clusters.sim.app for what "unreachable" does on the wire)
    def make_unreachable(self, name: str) -> None:
        self.app.set_fault(name, "unreachable")

    def make_slow(self, name: str, seconds: float) -> None:
        self.app.set_fault(name, "slow", seconds)

    def make_failing(self, name: str, status: int = 503) -> None:
        self.app.set_fault(name, "failing", status=status)

    def heal(self, name: str) -> None:
        self.app.set_fault(name, None)

    def throttle(self, name: str, retry_after: int, seconds: float) -> None:
        """For `seconds`, the cluster answers every request 429 Too Many Requests, `Retry-After: retry_after`."""
        self.app.traffic[name].throttle(retry_after, seconds)

    def requests(self, name: str) -> list[Request]:
        """Every request the cluster received (at most the last 20,000), oldest first."""
        return self.app.traffic[name].requests()

    # time
    @property
    def speed(self) -> float:
        return self._server.clock.speed

    def now(self) -> float:
        return self._server.clock.now()

    def advance(self, seconds: float) -> None:
        """Move simulated time forward; every controller has acted on it when this returns."""
        self.app.advance(seconds)

    def settle(self) -> None:
        """Let the controllers act on everything already written, without moving time."""
        self.app.step_all()


@contextlib.contextmanager
def running_simulator(scenario: dict | str | Path, *, speed: float = 1.0, tls: bool = True) -> Iterator[SimHandle]:
    server = SimServer(scenario, host="127.0.0.1", port=0, speed=speed, tls=tls)
    uv = server.uvicorn_server()
    loop_holder: dict = {}
    failure: list[BaseException] = []

    def serve() -> None:
        loop = asyncio.new_event_loop()
        loop_holder["loop"] = loop
        try:
            loop.run_until_complete(uv.serve(sockets=[server.sock]))
        except BaseException as exc:  # reported to the waiting test thread
            failure.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=serve, name="archipelago-sim", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.app.started.wait(0.05):
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"simulator failed to start: {failure[0] if failure else 'timed out'}")
        yield SimHandle(server)
    finally:
        loop = loop_holder.get("loop")
        if loop is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(uv.handle_exit, signal.SIGTERM, None)
        thread.join(STARTUP_TIMEOUT)
        server.close()
