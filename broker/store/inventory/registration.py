"""Member clusters in the inventory: registration, what a sync writes, health, cordon and drain,
and the capacity views. Functions take a session and leave committing to the caller.

A member's Kubernetes objects become rows here: `member_inventory` turns nodes, pods and
HyperNodes into node rows (allocatable, used) and a resolved HyperNode tree; `write_inventory`
writes only what differs from the rows already stored.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from broker import events
from broker.db.crypto import KubeconfigCipher
from broker.db.models import (PLACEMENT_LIVE_STATES, PLACEMENT_UNSTARTED_STATES, Cluster, HyperNode, Node, Placement,
                              as_utc, inventory_changed)
from broker.dispatch import lock_job_rows
from broker.errors import Conflict, Invalid, NotFound
from broker.settings import Settings
from broker.tenancy import check_name, hash_token
from clusters import access, jobsets
from clusters.budget import RequestBudget
from clusters.kubeconfig import KubeconfigError, KubeconfigPolicy, server_identity
from clusters.labels import check_labels
from clusters.member import MemberClient, MemberError, MemberFacts
from clusters.pods import effective_requests
from clusters.quantity import add_into, format_quantity, to_milli
from clusters.topology import Topology, derive_from_labels, resolve_hypernodes

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class RegistrationError(Exception):
    """The member cannot be registered; `status` and `title` are what the API answers."""

    def __init__(self, status: int, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.extra = status, title, detail, extra


def kubeconfig_policy(settings: Settings) -> KubeconfigPolicy:
    return KubeconfigPolicy(allow_exec=settings.allow_kubeconfig_exec, allow_files=settings.allow_kubeconfig_files,
                            allow_insecure_tls=settings.allow_insecure_tls,
                            allow_proxy=settings.allow_kubeconfig_proxy)


def connect(settings: Settings, kubeconfig: str, context: str | None = None) -> MemberClient:
    """A client for a member; KubeconfigError if the kubeconfig is unusable or refused."""
    return MemberClient.from_kubeconfig(kubeconfig, context, policy=kubeconfig_policy(settings),
                                        timeout=settings.member_timeout,
                                        budget=RequestBudget(settings.member_qps, settings.member_burst))


# A write that reads a cluster's row to change it locks it first (FOR NO KEY UPDATE: placements inserted meanwhile may
# still name it), or it could write back what it read over what another replica committed in between (a cordon).
FOR_CLUSTER_WRITE = {"key_share": True}


def cluster_to_change(session: Session, cluster_id: int) -> Cluster | None:
    """The cluster's row, locked for a write that changes it (`FOR_CLUSTER_WRITE`); None if it was removed."""
    return session.get(Cluster, cluster_id, with_for_update=FOR_CLUSTER_WRITE, populate_existing=True)


def get_cluster(session: Session, name: str, *, for_update: bool = False) -> Cluster:
    query = select(Cluster).where(Cluster.name == name)
    cluster = session.scalar(query.with_for_update(**FOR_CLUSTER_WRITE) if for_update else query,
                             execution_options={"populate_existing": True} if for_update else {})
    if cluster is None:
        raise NotFound(f"cluster {name!r} is not registered")
    return cluster


def _check_labels(labels: Mapping[str, Any], path: str = "labels") -> dict[str, str]:
    try:
        check_labels(labels)
    except ValueError as exc:
        raise Invalid(path, str(exc)) from None
    return dict(labels)


def _check_taints(taints: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    checked = []
    for i, taint in enumerate(taints):
        key, value, effect = taint.get("key"), taint.get("value") or "", taint.get("effect")
        if effect not in TAINT_EFFECTS:
            raise Invalid(f"taints[{i}].effect", f"must be one of {', '.join(TAINT_EFFECTS)}")
        _check_labels({key: value} if isinstance(key, str) else {"": ""}, f"taints[{i}]")
        checked.append({"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect})
    return checked


# Registration ------------------------------------------------------------------------------------

_MEMBER_PROBLEMS = {"Unreachable": (502, "Member unreachable"), "Timeout": (504, "Member timed out"),
                    "TLS": (502, "Member TLS failure"), "Unauthorized": (422, "Member rejected the credentials"),
                    "Forbidden": (422, "Member forbids it")}


def inspect_member(client: MemberClient) -> tuple[MemberFacts, bool, str | None]:
    """What registration requires of a member: its facts, whether the broker's permissions could be checked
    (False: the member has no SelfSubjectAccessReview API) and its uid. RegistrationError saying what is missing."""
    try:
        facts = client.facts()
        if not facts.jobset_crd:
            raise RegistrationError(422, "JobSet not installed",
                                    f"{client.api_server} does not serve jobsets.jobset.x-k8s.io/v1alpha2; install "
                                    "JobSet (https://jobset.sigs.k8s.io) on the member first")
        absent = access.missing(client, hypernodes=facts.hypernode_crd)
        uid = client.cluster_uid() if not absent else None
    except MemberError as exc:
        status, title = _MEMBER_PROBLEMS.get(exc.reason, (502, "Member error"))
        raise RegistrationError(status, title, str(exc)) from None
    if absent:
        raise RegistrationError(422, "Member forbids it",
                                f"the kubeconfig's identity may not, cluster-wide on {client.api_server}: "
                                f"{access.describe(absent)} (SelfSubjectAccessReview); grant it the ClusterRole of "
                                "deploy/member-rbac.yaml, or let `archipelago clusters join` make the identity",
                                missing=[{"verb": p.verb, "group": p.group, "resource": p.resource} for p in absent])
    return facts, absent is not None, uid


def register_cluster(session: Session, settings: Settings, *, name: str, kubeconfig: str,
                     context: str | None = None, labels: Mapping[str, str] | None = None) -> tuple[Cluster, MemberClient]:
    """Check the kubeconfig and the member, then store the cluster (Pending until its first sync), in one session.

    Nothing is stored unless every check passes. Returns the new row and the connected client,
    which the caller owns (the first sync uses it).
    """
    return store_registration(session, check_registration(session, settings, name=name, kubeconfig=kubeconfig,
                                                           context=context, labels=labels))


@dataclass
class Registration:
    """A member that passed registration's checks, ready to store: the client is the caller's to close."""

    cluster: Cluster
    client: MemberClient
    facts: MemberFacts
    checked: bool


def check_registration(session: Session, settings: Settings, *, name: str, kubeconfig: str,
                       context: str | None = None, labels: Mapping[str, str] | None = None) -> Registration:
    """Registration's checks: reads only, and the member's answers (in a read session: no write lock is held
    while the member is asked). A cluster registered meanwhile is refused by `store_registration`."""
    check_name(name)
    labels = _check_labels(labels or {})
    if session.scalar(select(Cluster.id).where(Cluster.name == name)) is not None:
        raise Conflict(f"a cluster named {name!r} is already registered")
    try:
        client = connect(settings, kubeconfig, context)
    except KubeconfigError as exc:
        raise Invalid("kubeconfig", str(exc)) from None
    identity = server_identity(client.api_server)
    twin = next((other for other, server in session.execute(select(Cluster.name, Cluster.api_server)
                                                            .where(Cluster.mode == "push"))
                 if server_identity(server) == identity), None)
    if twin is not None:
        client.close()
        raise Conflict(f"{client.api_server} is already registered as cluster {twin!r}; one member under two "
                       "names would get two brokers' worth of work")
    try:
        facts, checked, uid = inspect_member(client)
        twin = session.scalar(select(Cluster.name).where(Cluster.uid == uid)) if uid else None
        if twin is not None:
            raise Conflict(f"{client.api_server} is cluster {twin!r} (the same kube-system namespace uid {uid}), "
                           "already registered under another address; one member under two names would get two "
                           "brokers' worth of work")
    except BaseException:
        client.close()
        raise
    cluster = Cluster(name=name, api_server=client.api_server, context=client.context, labels=labels, taints=[],
                      kubeconfig_encrypted=KubeconfigCipher(settings.fernet_key()).encrypt(kubeconfig),
                      state="Pending", kubernetes_version=facts.version, jobset_crd=facts.jobset_crd,
                      hypernode_source="crd" if facts.hypernode_crd else None, warnings=[], uid=uid)
    return Registration(cluster, client, facts, checked)


def store_registration(session: Session, registration: Registration) -> tuple[Cluster, MemberClient]:
    """Store a checked member, with its event (closes the client if it cannot be stored)."""
    cluster, client, facts = registration.cluster, registration.client, registration.facts
    try:
        session.add(cluster)
        session.flush()
    except IntegrityError:
        client.close()
        raise Conflict(f"a cluster named {cluster.name!r}, or this member under another name, was registered at the "
                       "same moment") from None
    except BaseException:
        client.close()
        raise
    events.record(session, "cluster", cluster.name, "Registered",
                  f"registered {client.api_server} (Kubernetes {facts.version}, JobSet CRD present"
                  f"{', HyperNode CRD present' if facts.hypernode_crd else ''}"
                  f"{'' if registration.checked else '; permissions not checked: no SelfSubjectAccessReview API'})")
    return cluster, client


def register_pull_cluster(session: Session, *, name: str,
                          labels: Mapping[str, str] | None = None) -> tuple[Cluster, str]:
    """Store a member whose agent will call in (Pending until its agent reports), and mint the agent's token:
    returned once, kept only hashed. The broker never calls a pull member, so there is nothing to check there."""
    check_name(name)
    labels = _check_labels(labels or {})
    if session.scalar(select(Cluster.id).where(Cluster.name == name)) is not None:
        raise Conflict(f"a cluster named {name!r} is already registered")
    secret = f"apa_{secrets.token_urlsafe(32)}"
    cluster = Cluster(name=name, mode="pull", api_server="", kubeconfig_encrypted=b"", labels=labels, taints=[],
                      state="Pending", agent_token_hash=hash_token(secret), warnings=[])
    session.add(cluster)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"a cluster named {name!r} was registered at the same moment") from None
    events.record(session, "cluster", name, "Registered", "registered in pull mode: waiting for its agent")
    return cluster, secret


def agent_cluster(session: Session, token: str) -> Cluster | None:
    """The pull member a bearer token is the agent of (None for any other token)."""
    return session.scalar(select(Cluster).where(Cluster.mode == "pull", Cluster.agent_token_hash == hash_token(token)))


# From member objects to rows ----------------------------------------------------------------------

def node_row(node: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of one node, from its Kubernetes object."""
    metadata, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    taints = [{k: t[k] for k in ("key", "value", "effect") if t.get(k)} for t in spec.get("taints") or ()]
    return {"labels": dict(metadata.get("labels") or {}), "taints": taints,
            "unschedulable": bool(spec.get("unschedulable")), "ready": ready,
            "allocatable": {r: to_milli(str(q)) for r, q in (status.get("allocatable") or {}).items()}}


class PodHold(NamedTuple):
    """What one pod holds on its node, and the broker's placement it belongs to (None: someone else's)."""

    node: str
    requests: dict[str, int]  # milli-units, one `pods` slot included
    placement: str | None


def pod_usage(pod: Mapping[str, Any]) -> PodHold | None:
    """The hold of a pod bound to a node that has not finished (Pending on its node holds as Running does)."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    total = effective_requests(spec)
    total["pods"] = total.get("pods", 0) + 1000
    return PodHold(spec["nodeName"], total, (metadata.get("labels") or {}).get(jobsets.PLACEMENT_ID_LABEL))


@dataclass
class MemberInventory:
    """What a member holds, as the inventory stores it."""

    nodes: dict[str, dict[str, Any]]  # name -> node_row(...) plus "used"
    topology: Topology
    hypernode_source: str  # crd, labels or none


def resolve_topology(node_labels: Mapping[str, Mapping[str, str]], hypernodes: Iterable[Mapping] | None,
                     tier_labels: Sequence[Sequence[str]]) -> tuple[Topology, str]:
    """The member's HyperNode tree and where it came from: its HyperNode objects when it has any
    (`crd`), else its node labels (`labels`), else `none`."""
    hypernodes = list(hypernodes or ())
    if hypernodes:
        return resolve_hypernodes(hypernodes, node_labels), "crd"
    topology = derive_from_labels(node_labels, tier_labels)
    return topology, "labels" if topology.hypernodes else "none"


def member_inventory(nodes: Mapping[str, dict[str, Any]], holds: Iterable[PodHold],
                     topology: Topology, source: str) -> MemberInventory:
    """Rows from a member's nodes (name -> node_row) and its pods' holds (pod_usage): `used` by every
    pod, and `placement_used` the part of it held by the pods of each of the broker's placements."""
    rows = {name: {**row, "used": {}, "placement_used": {}} for name, row in nodes.items()}
    for hold in holds:
        if hold.node in rows:
            add_into(rows[hold.node]["used"], hold.requests)
            if hold.placement is not None:
                add_into(rows[hold.node]["placement_used"].setdefault(hold.placement, {}), hold.requests)
    return MemberInventory(rows, topology, source)


_NODE_FIELDS = ("labels", "taints", "unschedulable", "ready", "allocatable", "used", "placement_used")


@dataclass
class WriteResult:
    nodes_added: int = 0
    nodes_changed: int = 0
    nodes_removed: int = 0
    hypernodes_changed: int = 0
    new_warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.nodes_added or self.nodes_changed or self.nodes_removed or self.hypernodes_changed)


def _write_rows(session: Session, model: type[Node] | type[HyperNode], cluster_id: int,
                wanted: Mapping[str, Mapping[str, Any]], fields: Sequence[str]) -> tuple[int, int, int]:
    """Make a cluster's rows of `model` equal `wanted` (name -> field values); (added, changed, removed)."""
    stored = {row.name: row for row in session.execute(
        select(model.id, model.name, *(getattr(model, f) for f in fields)).where(model.cluster_id == cluster_id))}
    added, changed = [], []
    for name, values in wanted.items():
        old = stored.pop(name, None)
        if old is None:
            added.append({"cluster_id": cluster_id, "name": name, **values})
        elif any(getattr(old, f) != values[f] for f in fields):
            changed.append({"id": old.id, **values})
    if added:
        session.execute(insert(model), added)
    if changed:
        session.execute(update(model), changed)
    if stored:
        session.execute(delete(model).where(model.id.in_([row.id for row in stored.values()])))
    return len(added), len(changed), len(stored)


def write_inventory(session: Session, cluster: Cluster, inventory: MemberInventory, now: datetime) -> WriteResult:
    """Make the stored nodes and HyperNodes of `cluster` equal `inventory`, writing only the differences."""
    result = WriteResult()
    result.nodes_added, result.nodes_changed, result.nodes_removed = _write_rows(
        session, Node, cluster.id, inventory.nodes, _NODE_FIELDS)
    tree = {h.name: {"tier": h.tier, "parent": h.parent, "nodes": list(h.nodes)} for h in inventory.topology.hypernodes}
    result.hypernodes_changed = sum(_write_rows(session, HyperNode, cluster.id, tree, ("tier", "parent", "nodes")))
    if result.changed:
        session.execute(inventory_changed(cluster.id))

    warnings = inventory.topology.warnings
    result.new_warnings = [w for w in warnings if w not in (cluster.warnings or [])]
    if result.new_warnings:
        events.record(session, "cluster", cluster.name, "TopologyInvalid", "; ".join(result.new_warnings),
                      warning=True)
    if cluster.warnings != warnings:
        cluster.warnings = warnings
    if cluster.hypernode_source != inventory.hypernode_source:
        cluster.hypernode_source = inventory.hypernode_source
    if cluster.state == "Pending":
        cluster.state = cluster.cordon or "Ready"
        events.record(session, "cluster", cluster.name, "Synced",
                      f"first inventory: {len(inventory.nodes)} nodes, {len(inventory.topology.hypernodes)} "
                      f"HyperNodes ({inventory.hypernode_source})")
    cluster.synced_at = now
    return result


def record_sync_error(session: Session, cluster: Cluster, error: str) -> None:
    """A failed sync: said once (an event when the error changes), kept in last_error."""
    if cluster.last_error != error:
        cluster.last_error = error
        events.record(session, "cluster", cluster.name, "SyncFailed", error, warning=True)


# Health, cordon, drain, remove -------------------------------------------------------------------

def record_probe(session: Session, cluster: Cluster, *, now: datetime, grace: float,
                 version: str | None = None, error: str | None = None) -> None:
    """One health probe's outcome (for a pull member: its agent's heartbeat, or its silence). A member is
    NotReady once it has not answered for `grace` seconds since its last heartbeat, and goes back to its admin
    state when it answers again."""
    if error is None:
        cluster.last_heartbeat = now
        if version and cluster.kubernetes_version != version:
            cluster.kubernetes_version = version
        if cluster.unreachable_since is not None:
            cluster.unreachable_since = None
            cluster.last_error = None
        if cluster.state == "NotReady":
            cluster.state = cluster.cordon or ("Ready" if cluster.synced_at else "Pending")
            events.record(session, "cluster", cluster.name, "MemberReady",
                          f"{cluster.api_server or 'its agent'} answers again")
        return
    if cluster.unreachable_since is None:
        cluster.unreachable_since = now
    if cluster.last_error != error:
        cluster.last_error = error
    # a pull member's agent has had the grace since registration to call in for the first time
    silent_since = as_utc(cluster.last_heartbeat or (cluster.created_at if cluster.mode == "pull"
                                                      else cluster.unreachable_since))
    if cluster.state != "NotReady" and (now - silent_since).total_seconds() >= grace:
        cluster.state = "NotReady"
        events.record(session, "cluster", cluster.name, "MemberNotReady",
                      f"no answer for {grace:g}s: {error}", warning=True)


def _set_admin_state(session: Session, cluster: Cluster, cordon: str | None, reason: str, message: str) -> None:
    cluster.cordon = cordon
    if cluster.state not in ("NotReady", "Pending"):
        cluster.state = cordon or "Ready"
    events.record(session, "cluster", cluster.name, reason, message)


def cordon_cluster(session: Session, name: str) -> Cluster:
    """No new placements on the cluster; what runs there stays."""
    cluster = get_cluster(session, name, for_update=True)
    _set_admin_state(session, cluster, "Cordoned", "Cordoned", "no new placements")
    return cluster


def uncordon_cluster(session: Session, name: str) -> Cluster:
    cluster = get_cluster(session, name, for_update=True)
    _set_admin_state(session, cluster, None, "Uncordoned", "placements allowed again")
    return cluster


def drain_cluster(session: Session, name: str) -> tuple[Cluster, int]:
    """Cordon, and ask the placement layer to move what has not started: while a cluster is
    Draining, its placements in PLACEMENT_UNSTARTED_STATES are to be placed elsewhere. Returns their count."""
    cluster = get_cluster(session, name, for_update=True)
    waiting = session.scalar(select(func.count()).select_from(Placement).where(
        Placement.cluster_id == cluster.id, Placement.state.in_(PLACEMENT_UNSTARTED_STATES))) or 0
    _set_admin_state(session, cluster, "Draining", "Draining",
                     f"no new placements; {waiting} placement(s) not yet started to be moved elsewhere")
    return cluster, waiting


def live_placements(session: Session, cluster_id: int) -> int:
    return session.scalar(select(func.count()).select_from(Placement).where(
        Placement.cluster_id == cluster_id, Placement.state.in_(PLACEMENT_LIVE_STATES))) or 0


def remove_cluster(session: Session, name: str, *, force: bool = False, settings: Settings | None = None) -> None:
    """Forget a cluster and its inventory; refused while placements live there, unless forced.

    Forced, the broker first deletes its copies on the member if it still answers (the jobs are placed
    elsewhere, and two live copies must never run); if it does not, the event says what may be left."""
    cluster = get_cluster(session, name, for_update=True)
    live = live_placements(session, cluster.id)
    if live and not force:
        raise Conflict(f"cluster {name!r} has {live} live placement(s); drain it and wait, or remove it with force")
    # its jobs locked before its copies are listed: an apply still under way records its copy only once the
    # removal is committed, and so finds its member gone and deletes the copy (`finish_apply`)
    _lock_jobs_placed_on(session, cluster)
    left_behind = ""
    if live and cluster.mode == "pull":
        left_behind = (f"; its agent is cut off with its copies on the member: delete JobSets labelled "
                       f"{jobsets.JOB_ID_LABEL} there")
    elif live and settings is not None:
        left_behind = _delete_copies(settings, cluster)
    session.delete(cluster)
    message = f"removed{f' with {live} live placement(s) (forced)' if live else ''}{left_behind}"
    events.record(session, "cluster", name, "Removed", message, warning=bool(live))


def _lock_jobs_placed_on(session: Session, cluster: Cluster) -> None:
    """The placements that name the cluster lose it with its row (ON DELETE SET NULL): their jobs are locked first,
    ids ascending, as every batch locks them, or that UPDATE could lock a placement whose job another transaction
    holds while it waits for one of ours. A placement the scheduler committed there while we waited for a lock
    would be unlinked without its job's: then the removal is refused, to be asked again."""
    placed = select(Placement.job_id).where(Placement.cluster_id == cluster.id)
    jobs = set(session.scalars(placed))
    lock_job_rows(session, jobs)
    if session.get_bind().dialect.name == "postgresql" and not set(session.scalars(placed)) <= jobs:
        raise Conflict(f"cluster {cluster.name!r} got a placement while it was being removed; cordon it, then "
                       f"remove it again")


def _delete_copies(settings: Settings, cluster: Cluster) -> str:
    """Delete every copy of the broker's on the member; what the event should add if that failed."""
    try:
        client = connect(settings, KubeconfigCipher(settings.fernet_key()).decrypt(cluster.kubeconfig_encrypted),
                         cluster.context)
    except (KubeconfigError, MemberError, ValueError) as exc:
        return f"; its copies could not be deleted ({exc}): delete JobSets labelled {jobsets.JOB_ID_LABEL} there"
    try:
        items = jobsets.delete_owned(client, kept=lambda placement_ids: set())
    except MemberError as exc:
        return f"; its copies could not be deleted ({exc}): delete JobSets labelled {jobsets.JOB_ID_LABEL} there"
    finally:
        client.close()
    return f"; its {len(items)} cop{'y' if len(items) == 1 else 'ies'} on the member deleted"


def update_cluster(session: Session, name: str, *, labels: Mapping[str, str | None] | None = None,
                   taints: Sequence[Mapping[str, Any]] | None = None) -> Cluster:
    """Labels merge (a None value removes the label); taints, when given, replace the old ones."""
    cluster = get_cluster(session, name, for_update=True)
    if labels is not None:
        merged = {**cluster.labels, **{k: v for k, v in labels.items() if v is not None}}
        for key in (k for k, v in labels.items() if v is None):
            merged.pop(key, None)
        cluster.labels = _check_labels(merged)
    if taints is not None:
        cluster.taints = _check_taints(taints)
    events.record(session, "cluster", name, "Updated", "labels or taints changed")
    return cluster


# Capacity ----------------------------------------------------------------------------------------

@dataclass
class Capacity:
    """Allocatable, used and free milli-units of one node or one HyperNode (sums over its nodes).
    Free counts only nodes that take pods (ready, not cordoned), never below zero per node."""

    cluster_id: int
    kind: str  # node | hypernode
    name: str
    tier: int | None = None
    parent: str | None = None
    nodes: int = 1
    allocatable: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)


_CAPACITY_SQL = {
    "sqlite": """
WITH per_node AS (
  SELECT n.cluster_id, n.name, r.key AS resource, CAST(r.value AS INTEGER) AS allocatable,
         CAST(COALESCE(json_extract(n.used, '$."' || r.key || '"'), 0) AS INTEGER) AS used,
         n.unschedulable OR NOT n.ready AS blocked
  FROM nodes n, json_each(n.allocatable) r {where_node}
), node_free AS (
  SELECT *, CASE WHEN blocked THEN 0 ELSE MAX(allocatable - used, 0) END AS free FROM per_node
)
SELECT cluster_id, 'node' AS kind, name, NULL AS tier, NULL AS parent, 1 AS nodes, resource, allocatable, used, free
FROM node_free
UNION ALL
SELECT h.cluster_id, 'hypernode', h.name, h.tier, h.parent, json_array_length(h.nodes), p.resource,
       SUM(p.allocatable), SUM(p.used), SUM(p.free)
FROM hypernodes h LEFT JOIN json_each(h.nodes) m ON 1 = 1
     LEFT JOIN node_free p ON p.cluster_id = h.cluster_id AND p.name = m.value {where_hypernode}
GROUP BY h.id, p.resource
""",
    "postgresql": """
WITH per_node AS (
  SELECT n.cluster_id, n.name, r.key AS resource, r.value::bigint AS allocatable,
         COALESCE((n.used ->> r.key)::bigint, 0) AS used, n.unschedulable OR NOT n.ready AS blocked
  FROM nodes n CROSS JOIN LATERAL jsonb_each_text(n.allocatable) r {where_node}
), node_free AS (
  SELECT *, CASE WHEN blocked THEN 0 ELSE GREATEST(allocatable - used, 0) END AS free FROM per_node
)
SELECT cluster_id, 'node' AS kind, name, NULL::integer AS tier, NULL AS parent, 1 AS nodes, resource,
       allocatable, used, free
FROM node_free
UNION ALL
SELECT h.cluster_id, 'hypernode', h.name, h.tier, h.parent, jsonb_array_length(h.nodes), p.resource,
       SUM(p.allocatable), SUM(p.used), SUM(p.free)
FROM hypernodes h LEFT JOIN LATERAL jsonb_array_elements_text(h.nodes) m(value) ON true
     LEFT JOIN node_free p ON p.cluster_id = h.cluster_id AND p.name = m.value {where_hypernode}
GROUP BY h.id, p.resource
""",
}


def cluster_capacity(session: Session, cluster_id: int | None = None) -> list[Capacity]:
    """Free capacity per node and per HyperNode (of one cluster, or all), in one query."""
    sql = _CAPACITY_SQL[session.get_bind().dialect.name].format(
        where_node="WHERE n.cluster_id = :cluster_id" if cluster_id is not None else "",
        where_hypernode="WHERE h.cluster_id = :cluster_id" if cluster_id is not None else "")
    entries: dict[tuple[int, str, str], Capacity] = {}
    for row in session.execute(text(sql), {"cluster_id": cluster_id} if cluster_id is not None else {}):
        key = (row.cluster_id, row.kind, row.name)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = Capacity(row.cluster_id, row.kind, row.name, row.tier, row.parent, row.nodes)
        if row.resource is not None:
            entry.allocatable[row.resource] = int(row.allocatable)
            entry.used[row.resource] = int(row.used)
            entry.free[row.resource] = int(row.free)
    return list(entries.values())


# Views -------------------------------------------------------------------------------------------

def _amounts(allocatable: Mapping[str, int], used: Mapping[str, int], free: Mapping[str, int]) -> dict[str, dict]:
    """Per resource: milli-units for programs, and the same in Kubernetes units for people."""
    out = {}
    for resource in sorted(allocatable):
        values = {"allocatable": allocatable[resource], "used": used.get(resource, 0), "free": free.get(resource, 0)}
        out[resource] = {**{f"{k}_milli": v for k, v in values.items()},
                         **{k: format_quantity(v, resource) for k, v in values.items()}}
    return out


def cluster_view(session: Session, cluster: Cluster, *, tree: bool = True,
                 capacity: list[Capacity] | None = None) -> dict[str, Any]:
    """What the API answers about a cluster: state, errors, capacity totals, the HyperNode tree.
    Never the kubeconfig."""
    entries = capacity if capacity is not None else cluster_capacity(session, cluster.id)
    nodes = [e for e in entries if e.kind == "node"]
    allocatable: dict[str, int] = {}
    used: dict[str, int] = {}
    free: dict[str, int] = {}
    for entry in nodes:
        add_into(allocatable, entry.allocatable)
        add_into(used, entry.used)
        add_into(free, entry.free)
    view = {
        "name": cluster.name, "mode": cluster.mode, "api_server": cluster.api_server or None,
        "context": cluster.context,
        "labels": cluster.labels, "taints": cluster.taints, "state": cluster.state,
        "kubernetes_version": cluster.kubernetes_version, "jobset_crd": cluster.jobset_crd,
        "hypernode_source": cluster.hypernode_source,
        "last_heartbeat": cluster.last_heartbeat and as_utc(cluster.last_heartbeat),
        "unreachable_since": cluster.unreachable_since and as_utc(cluster.unreachable_since),
        "last_error": cluster.last_error, "warnings": cluster.warnings or [],
        "synced_at": cluster.synced_at and as_utc(cluster.synced_at),
        "created_at": as_utc(cluster.created_at),
        "nodes": len(nodes),
        "capacity": _amounts(allocatable, used, free),
    }
    if tree:
        view["hypernodes"] = hypernode_tree([e for e in entries if e.kind == "hypernode"])
    return view


def hypernode_tree(entries: list[Capacity]) -> list[dict[str, Any]]:
    """Nested HyperNodes, highest tier first, each with its free capacity."""
    names = {e.name for e in entries}
    children: dict[str | None, list[Capacity]] = {}
    for entry in sorted(entries, key=lambda e: (-(e.tier or 0), e.name)):
        children.setdefault(entry.parent if entry.parent in names else None, []).append(entry)

    def nest(entry: Capacity) -> dict[str, Any]:
        return {"name": entry.name, "tier": entry.tier, "nodes": entry.nodes,
                "free": {r: format_quantity(v, r) for r, v in sorted(entry.free.items())},
                "free_milli": dict(sorted(entry.free.items())),
                "children": [nest(child) for child in children.get(entry.name, ())]}

    return [nest(root) for root in children.get(None, ())]


def list_views(session: Session) -> list[dict[str, Any]]:
    clusters = session.scalars(select(Cluster).order_by(Cluster.name)).all()
    by_cluster: dict[int, list[Capacity]] = {}
    for entry in cluster_capacity(session):
        if entry.kind == "node":
            by_cluster.setdefault(entry.cluster_id, []).append(entry)
    return [cluster_view(session, c, tree=False, capacity=by_cluster.get(c.id, [])) for c in clusters]


def topology_view(session: Session, cluster: str) -> dict[str, Any]:
    """A cluster's nodes and HyperNodes with allocatable, used and free capacity (the dashboard's topology)."""
    row = get_cluster(session, cluster)
    capacity = cluster_capacity(session, row.id)
    members = dict(session.execute(select(HyperNode.name, HyperNode.nodes).where(HyperNode.cluster_id == row.id)).all())
    tiers = {entry.name: entry.tier for entry in capacity if entry.kind == "hypernode"}
    leaf_of: dict[str, str] = {}
    for name in sorted(tiers, key=lambda n: (-tiers[n], n)):  # the lowest tier holding a node wins
        for node in members.get(name) or []:
            leaf_of[node] = name
    health = {name: (ready, unschedulable) for name, ready, unschedulable in session.execute(
        select(Node.name, Node.ready, Node.unschedulable).where(Node.cluster_id == row.id))}

    def amounts(entry: Capacity) -> dict:
        return {"allocatable_milli": entry.allocatable, "used_milli": entry.used, "free_milli": entry.free}

    return {
        "cluster": row.name,
        "hypernodes": [{"name": e.name, "tier": e.tier, "parent": e.parent, "nodes": e.nodes, **amounts(e)}
                       for e in sorted(capacity, key=lambda e: (-(e.tier or 0), e.name)) if e.kind == "hypernode"],
        "nodes": [{"name": e.name, "hypernode": leaf_of.get(e.name), "ready": health.get(e.name, (True, False))[0],
                   "unschedulable": health.get(e.name, (True, False))[1], **amounts(e)}
                  for e in sorted(capacity, key=lambda e: e.name) if e.kind == "node"],
    }
