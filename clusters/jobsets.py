"""JobSets on a member cluster: the copy the broker renders for one placement, and the calls that
apply, read, list, watch and delete it (server-side apply, field manager `archipelago`).

`member_copy` and `stamp` are pure: the tenant's manifest and one placement's decision in, the member's
JobSet out (cluster overrides rewrite it between the two).
Every copy carries the broker's labels, so the broker finds its copies by label, never by name alone.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Callable, Iterable, Mapping

from clusters.member import (JOBSET_GROUP, JOBSET_VERSION, JOBSETS, NAMESPACES, PODS, MemberClient, MemberError,
                             WatchStream)
from clusters.rules.labels import pin_to_nodes
from clusters.rules.pod_security import namespace_labels as pod_security_labels
from clusters.rules.devices import PLACEMENT_ID_LABEL
from clusters.system import MANAGED_BY

JOB_ID_LABEL = "archipelago.io/job-id"
GENERATION_LABEL = "archipelago.io/generation"
PART_LABEL = "archipelago.io/part"
OWNER_ANNOTATION = "archipelago.io/owner"
TENANT_LABEL = "archipelago.io/tenant"  # on a tenant's namespace on a member
FIELD_MANAGER = "archipelago"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# The broker admitted the JobSet already: a member's own Kueue must not queue it a second time.
DROPPED_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")
TTL_FIELD = "ttlSecondsAfterFinished"  # the tenant's; the broker keeps it (`member_copy`)
WATCH_SECONDS = 300
# Member answers that another try will not change: the placement fails with the member's message.
PERMANENT_STATUSES = frozenset({400, 403, 405, 413, 415, 422})


def member_name(name: str, part: str) -> str:
    """The whole JobSet keeps its name; a part of a split JobSet is `<name>-<part>`."""
    return f"{name}-{part}" if part else name


def ttl_after_finished(manifest: Mapping[str, Any]) -> int | None:
    """How long the tenant wants a finished copy kept on its member (seconds; None: until the job is forgotten)."""
    ttl = (manifest.get("spec") or {}).get(TTL_FIELD)
    return ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 else None


def is_permanent(error: MemberError) -> bool:
    """Invalid or forbidden: the member's answer will be the same next time."""
    return error.status in PERMANENT_STATUSES


def placement_id_of(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(PLACEMENT_ID_LABEL)


# Rendering ---------------------------------------------------------------------------------------

def member_copy(manifest: Mapping[str, Any], *, namespace: str, part: str) -> dict[str, Any]:
    """What the member is sent of the tenant's JobSet, before the broker's labels and node pins (cluster
    overrides rewrite it in between, so that they can neither drop a pin nor a broker label).

    `part` "" is the whole JobSet; otherwise only that ReplicatedJob, with the success policy narrowed
    to it and no failure policy (a failed part is the broker's to restart: it re-places it).

    The copy carries no `ttlSecondsAfterFinished`: the broker owns its lifetime. A member's TTL controller would
    delete a finished copy before the broker may have read its end (the broker away, its watch relisting, a pull
    member's agent between two lists), and a copy gone without its end known is never run again; so the broker
    records the verdict, then deletes the copy itself that many seconds later (broker.store.outbox).
    """
    metadata = manifest.get("metadata") or {}
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in DROPPED_LABELS}
    # Only what this placement sends is copied (its pod templates get the broker's labels and node pins):
    # a part of a split job of many costs that part, not the whole JobSet.
    spec = _part_spec(manifest.get("spec") or {}, part) if part else {
        **(manifest.get("spec") or {}), "replicatedJobs": copy.deepcopy((manifest.get("spec") or {}).get(
            "replicatedJobs") or [])}
    spec.pop(TTL_FIELD, None)
    return {"apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}", "kind": "JobSet",
            "metadata": {"name": member_name(metadata["name"], part), "namespace": namespace, "labels": labels,
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": spec}


def stamp(jobset: dict[str, Any], *, job_id: int, placement_id: int, generation: int, part: str,
          assignments: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The broker's labels on the member copy and its pods, and each ReplicatedJob's pods bound by required
    node affinity to the nodes the engine chose for it (changes `jobset` in place)."""
    metadata = jobset["metadata"]
    metadata["labels"] = {**(metadata.get("labels") or {}), JOB_ID_LABEL: str(job_id),
                          PLACEMENT_ID_LABEL: str(placement_id), GENERATION_LABEL: str(generation)}
    if part:
        metadata["labels"][PART_LABEL] = part
    metadata["annotations"] = {**(metadata.get("annotations") or {}), OWNER_ANNOTATION: f"archipelago/jobs/{job_id}"}
    nodes: dict[str, set[str]] = {}
    for assignment in assignments:
        nodes.setdefault(assignment["replicatedJob"], set()).add(assignment["node"])
    for rjob in jobset["spec"].get("replicatedJobs") or ():
        _label_pods(rjob, {JOB_ID_LABEL: str(job_id), PLACEMENT_ID_LABEL: str(placement_id)})
        if rjob.get("name") in nodes:
            _require_nodes(rjob, sorted(nodes[rjob["name"]]))
    return jobset


def _part_spec(spec: dict[str, Any], part: str) -> dict[str, Any]:
    """One ReplicatedJob of a split JobSet as a JobSet of its own that means what the whole means for it."""
    spec = dict(spec)
    rjobs = [copy.deepcopy(r) for r in spec.get("replicatedJobs") or () if r.get("name") == part]
    for rjob in rjobs:
        rjob.pop("dependsOn", None)  # the ReplicatedJobs it waited for run elsewhere
    spec["replicatedJobs"] = rjobs
    success = spec.get("successPolicy") or {}
    targets = success.get("targetReplicatedJobs") or []
    # A part the whole's policy targets succeeds as the policy says; any other part simply runs to completion.
    operator = success.get("operator", "All") if not targets or part in targets else "All"
    spec["successPolicy"] = {"operator": operator, "targetReplicatedJobs": [part]}
    spec.pop("failurePolicy", None)
    if (spec.get("coordinator") or {}).get("replicatedJob") not in (None, part):
        spec.pop("coordinator")
    return spec


def _label_pods(rjob: dict[str, Any], labels: Mapping[str, str]) -> None:
    """The broker's labels on every pod of the ReplicatedJob: the inventory tells its pods from others' by them."""
    pod = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
    pod["metadata"] = {**(pod.get("metadata") or {})}
    pod["metadata"]["labels"] = {**(pod["metadata"].get("labels") or {}), **labels}


def _require_nodes(rjob: dict[str, Any], nodes: list[str]) -> None:
    """Pin the pod template to these nodes by name, within its own required node affinity (labels.pin_to_nodes)."""
    pod = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    node_affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    node_affinity[_REQUIRED] = pin_to_nodes(node_affinity.get(_REQUIRED), nodes)


# Member calls ------------------------------------------------------------------------------------

class NotOurs(Exception):
    """A tenant's namespace exists on a member, and the broker neither made it nor may adopt it."""

    def __init__(self, namespace: str, cluster: str, tenant: str) -> None:
        super().__init__(f"namespace {namespace} exists on {cluster} and Archipelago did not create it: the broker "
                         f"uses only namespaces it made; an admin may let tenant {tenant} use it "
                         f"(archipelago tenants update {tenant} --adopt {namespace})")


def namespace_labels(tenant: str, pod_security: str) -> dict[str, str]:
    """What the broker sets on a tenant's namespace: its mark, the tenant, and the tenant's Pod Security level, which
    the member's PodSecurity admission then enforces on every pod there."""
    return {**MANAGED_BY, TENANT_LABEL: tenant, **pod_security_labels(pod_security)}


def ensure_namespace(client: MemberClient, namespace: str, labels: Mapping[str, str], *, adoptable: bool,
                     cluster: str) -> None:
    """The tenant's namespace, carrying `labels`: created if missing; relabelled if the broker made it (its mark),
    it holds copies of the broker's (made by a release before the mark) or an admin marked it adoptable; else
    NotOurs — whatever else exists there (another team's Secrets, a system's service accounts) stays out of reach."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": dict(labels)}}
    try:
        found = client.read(NAMESPACES, namespace)
    except MemberError as exc:
        if exc.reason != "NotFound":
            raise
        try:
            client.create(NAMESPACES, body)
            return
        except MemberError as again:
            if again.reason != "AlreadyExists":
                raise
            found = client.read(NAMESPACES, namespace)
    current = found["metadata"].get("labels") or {}
    if not (adoptable or MANAGED_BY.items() <= current.items()
            or client.list(JOBSETS, namespace, label_selector=JOB_ID_LABEL)[0]):
        raise NotOurs(namespace, cluster, labels[TENANT_LABEL])
    if any(current.get(key) != value for key, value in labels.items()):
        client.apply(NAMESPACES, body, FIELD_MANAGER)


def apply(client: MemberClient, jobset: dict[str, Any], *, dry_run: bool = False) -> dict:
    """Server-side apply with force: the broker owns the fields it sets, whoever touched them since. `dry_run`: the
    member's validation and admission asked, nothing stored."""
    return client.apply(JOBSETS, jobset, FIELD_MANAGER, dry_run=dry_run)


def admission_key(jobset: Mapping[str, Any]) -> str:
    """What a member's admission judges of a copy, as a digest: its namespace, labels, annotations and spec, before
    the broker's labels and node pins (`stamp`). Copies of one template in one namespace share it, so one dry run
    answers for all of them."""
    metadata = jobset.get("metadata") or {}
    judged = {"namespace": metadata.get("namespace"), "labels": metadata.get("labels") or {},
              "annotations": metadata.get("annotations") or {}, "spec": jobset.get("spec") or {}}
    return hashlib.sha256(json.dumps(judged, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def get(client: MemberClient, namespace: str, name: str) -> dict | None:
    try:
        return client.read(JOBSETS, name, namespace)
    except MemberError as exc:
        if exc.reason == "NotFound":
            return None
        raise


def delete(client: MemberClient, namespace: str, name: str, uid: str) -> None:
    """Delete that object (by uid) with foreground propagation; already gone is fine."""
    try:
        client.delete(JOBSETS, name, namespace, propagation="Foreground", uid=uid)
    except MemberError as exc:
        if exc.reason == "NotFound" or exc.status == 409:  # gone, or a different object by that name now
            return
        raise


def delete_copy(client: MemberClient, namespace: str, name: str, placement_id: int | str, uid: str | None) -> bool:
    """Delete a placement's copy (by uid; by its placement label when no uid was recorded: applied, but the
    outcome was lost); whether it is gone (a foreground deletion keeps it while its children go first)."""
    if uid is None:
        found = get(client, namespace, name)
        if found is None or placement_id_of(found) != str(placement_id):
            return True
        uid = found["metadata"]["uid"]
    delete(client, namespace, name, uid)
    found = get(client, namespace, name)
    return found is None or found["metadata"]["uid"] != uid


def list_in(client: MemberClient, namespace: str) -> list[dict]:
    """Every JobSet in a namespace, the broker's or not: the names a new copy must not take over."""
    return client.list(JOBSETS, namespace)[0]


def list_owned(client: MemberClient, from_cache: bool = False) -> tuple[list[dict], str]:
    """Every JobSet of the broker on the member, and the resourceVersion to watch from (`from_cache`:
    from the API server's watch cache, for the status relist that a watch then follows)."""
    return client.list(JOBSETS, label_selector=JOB_ID_LABEL, from_cache=from_cache)


def delete_owned(client: MemberClient, kept: Callable[[set[int]], set[int]]) -> tuple[list[dict], list[dict]]:
    """Delete the broker's copies on the member except those whose placement ids `kept` keeps (asked
    after the list, so a copy applied meanwhile is never missed); returns the copies deleted, and those kept."""
    items, _ = list_owned(client)
    owner = {id(obj): int(pid) if (pid := placement_id_of(obj) or "").isdigit() else None for obj in items}
    keep = kept({pid for pid in owner.values() if pid is not None})
    stale = [obj for obj in items if owner[id(obj)] not in keep]
    for obj in stale:
        meta = obj["metadata"]
        delete(client, meta["namespace"], meta["name"], meta["uid"])
    return stale, [obj for obj in items if owner[id(obj)] in keep]


def watch_owned(client: MemberClient, resource_version: str) -> WatchStream:
    return client.watch(JOBSETS, resource_version, label_selector=JOB_ID_LABEL, timeout_seconds=WATCH_SECONDS)


def pods_of(client: MemberClient, namespace: str, placement_id: int) -> list[dict]:
    """The pods of one placement's copy (the broker's label on its pod templates), as the member has them."""
    return client.list(PODS, namespace, label_selector=f"{PLACEMENT_ID_LABEL}={placement_id}")[0]
