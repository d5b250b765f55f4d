"""The dispatcher's sweep: on its first pass over a member, the broker's copies that no placement owns go,
and nothing else does."""

from __future__ import annotations

from broker.process.testing import jobset
from broker.services.dispatcher import DispatcherService
from clusters.jobsets import JOB_ID_LABEL, PLACEMENT_ID_LABEL
from clusters.sim.resources import JOBSETS
from tests.propagation.members import put_jobset

LONG = {"sim.archipelago.io/duration": "1h"}


def _put(federation, cluster: str, copy: dict, name: str, labels: dict[str, str]) -> None:
    """A JobSet like `copy`, named `name` and labelled `labels`, written on the member by someone else."""
    meta = copy["metadata"]
    put_jobset(federation, cluster, {
        "apiVersion": copy["apiVersion"], "kind": copy["kind"], "spec": copy["spec"],
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                     "annotations": meta.get("annotations", {})}})


def test_a_member_holding_copies_no_placement_owns_is_swept_on_the_dispatchers_first_pass(federation, settings, db):
    kept = federation.submit(jobset("kept", annotations=LONG))
    [running] = federation.until_state(kept, "Running")["placements"]
    cancelled = federation.submit(jobset("cancelled", annotations=LONG))
    [old] = federation.until_state(cancelled, "Running")["placements"]
    [old_copy] = federation.copies(cancelled)
    assert federation.api.delete(f"/api/v1/jobs/{cancelled}").status_code == 202
    assert [p["state"] for p in federation.until_state(cancelled, "Cancelled")["placements"]] == ["Deleted"]
    other = next(name for name in federation.sim.cluster_names if name != old["cluster"])

    # copies the broker's database no longer owns: a deleted placement's, back from a member's backup;
    # one of a placement the database never had; one whose placement label is not a number
    _put(federation, old["cluster"], old_copy, "cancelled", old_copy["metadata"]["labels"])
    _put(federation, other, old_copy, "unknown", {JOB_ID_LABEL: "999999", PLACEMENT_ID_LABEL: "999999"})
    _put(federation, other, old_copy, "garbled", {JOB_ID_LABEL: "999999", PLACEMENT_ID_LABEL: "x"})
    _put(federation, other, old_copy, "foreign", {"app": "not-the-brokers"})  # no job-id label: not the broker's

    restarted = DispatcherService(db, settings, federation.members, now=federation.now)  # a new broker process
    try:
        restarted.run_once()
    finally:
        restarted.stop()

    assert sorted((c["cluster"], c["metadata"]["name"]) for c in federation.copies()) == [
        (running["cluster"], "kept")]
    assert [o["metadata"]["name"] for o in federation.sim.cluster(other).list(JOBSETS, "team-a", None, None)[0]] == [
        "foreign"]
    events = federation.api.get("/api/v1/events", params={"kind": "cluster"}).json()["items"]
    assert sorted((e["object_id"], e["message"]) for e in events if e["reason"] == "StaleCopyDeleted") == sorted([
        (old["cluster"], f"deleted team-a/cancelled (placement {old['id']}), a copy the broker no longer owns"),
        (other, "deleted team-a/unknown (placement 999999), a copy the broker no longer owns"),
        (other, "deleted team-a/garbled (placement x), a copy the broker no longer owns")])
    assert federation.state(kept) == "Running"
