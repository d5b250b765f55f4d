"""Objects written on a simulated member by someone other than the broker."""

from __future__ import annotations

from clusters.system import MANAGED_BY
from clusters.sim.resources import JOBSETS, NAMESPACES


def put_jobset(federation, cluster: str, body: dict) -> None:
    """Create the JobSet `body` on the member, as kubectl would, in its namespace there: if missing, made as the
    broker makes its tenants' (its mark: the broker may use it)."""
    namespace = body["metadata"]["namespace"]
    member = federation.sim.cluster(cluster)
    with member.lock:
        if not member.list(NAMESPACES, None, None, f"metadata.name={namespace}")[0]:
            member.create(NAMESPACES, "", {"metadata": {"name": namespace, "labels": dict(MANAGED_BY)}},
                          "archipelago")
        member.create(JOBSETS, namespace, body, "kubectl")
