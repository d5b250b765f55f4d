"""What an admin does to a registered cluster: cordon, uncordon, drain, relabel and retaint, remove."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.process.settings import Settings
from broker.store import events
from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.models import PLACEMENT_LIVE_STATES, PLACEMENT_UNSTARTED_STATES, Cluster, Node, Placement
from broker.store.errors import Conflict, Invalid
from broker.store.inventory.recipes import check_choice, discovery_of
from broker.store.inventory.registration import check_cluster_labels, check_cluster_taints, connect, get_cluster
from broker.store.inventory.sync import write_topology
from broker.store.outbox import lock_job_rows
from clusters import jobsets
from clusters.kubeconfig import KubeconfigError
from clusters.member import MemberError
from clusters.system import MANAGED_BY
from clusters.topology_writeback import remove_ours

MANAGED_LABEL = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


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
    if cluster.topology_write_back and cluster.mode == "push" and settings is not None:
        left_behind += _delete_written_tree(settings, cluster)
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
    """Delete every copy of the broker's on the member; what the event should add."""
    def delete(client) -> str:
        items, _ = jobsets.delete_owned(client, kept=lambda placement_ids: set())
        return f"; its {len(items)} cop{'y' if len(items) == 1 else 'ies'} on the member deleted"
    return _on_member(settings, cluster, delete, lambda exc: f"; its copies could not be deleted ({exc}): delete "
                                                             f"JobSets labelled {jobsets.JOB_ID_LABEL} there")


def _delete_written_tree(settings: Settings, cluster: Cluster) -> str:
    """Delete the HyperNodes written back to the member (nothing would keep them true); what the event should add."""
    return _on_member(settings, cluster, lambda client: f"; the {remove_ours(client)} HyperNodes written back deleted",
                      lambda exc: f"; the HyperNodes written back could not be deleted ({exc}): delete those "
                                  f"labelled {MANAGED_LABEL} there")


def _on_member(settings: Settings, cluster: Cluster, act: Callable[[Any], str],
               failed: Callable[[Exception], str]) -> str:
    """`act` with a client of the member, or what `failed` says when it cannot be reached or refuses."""
    try:
        client = connect(settings, KubeconfigCipher(settings.fernet_key()).decrypt(cluster.kubeconfig_encrypted),
                         cluster.context)
    except (KubeconfigError, MemberError, ValueError) as exc:
        return failed(exc)
    try:
        return act(client)
    except MemberError as exc:
        return failed(exc)
    finally:
        client.close()


def update_cluster(session: Session, name: str, *, labels: Mapping[str, str | None] | None = None,
                   taints: Sequence[Mapping[str, Any]] | None = None, topology_recipe: str | None = None,
                   topology_write_back: bool | None = None, global_tiers: Sequence[Sequence[str]] = ()) -> Cluster:
    """Labels merge (a None value removes the label); taints, when given, replace the old ones. A new topology recipe
    finds the tree again from the stored node labels at once (the member's next node event would too); `global_tiers`:
    the federation's global list (`ARCHIPELAGO_TOPOLOGY_TIER_LABELS`), the last resort of `auto`."""
    cluster = get_cluster(session, name, for_update=True)
    changed = " or ".join(what for what, value in (("labels", labels), ("taints", taints)) if value is not None)
    if topology_recipe is not None and topology_recipe != cluster.topology_recipe:
        cluster.topology_recipe = check_choice(session, topology_recipe)
        events.record(session, "cluster", name, "Updated", f"topology recipe {topology_recipe}")
        if cluster.hypernode_source != "crd":  # its own HyperNode objects win, whatever the recipe
            labels_of = dict(session.execute(select(Node.name, Node.labels).where(Node.cluster_id == cluster.id)).all())
            write_topology(session, cluster, *discovery_of(session, cluster, global_tiers).discover(labels_of))
    if topology_write_back is not None and topology_write_back != cluster.topology_write_back:
        if topology_write_back and cluster.mode == "pull":
            raise Invalid("topology_write_back", "a pull member is never called by the broker: its tree cannot be "
                                                 "written back to it")
        cluster.topology_write_back = topology_write_back  # its next sync writes (or deletes) the HyperNodes
        events.record(session, "cluster", name, "Updated",
                      f"topology write-back {'on' if topology_write_back else 'off'}")
    if labels is not None:
        merged = {**cluster.labels, **{k: v for k, v in labels.items() if v is not None}}
        for key in (k for k, v in labels.items() if v is None):
            merged.pop(key, None)
        cluster.labels = check_cluster_labels(merged)
    if taints is not None:
        cluster.taints = check_cluster_taints(taints)
    if changed:
        events.record(session, "cluster", name, "Updated", f"{changed} changed")
    return cluster
