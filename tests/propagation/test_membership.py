"""Members leaving or registered twice never leave two live copies of one placement."""

from __future__ import annotations

import threading

import pytest
import yaml

from sqlalchemy import select

from broker.process.testing import SCENARIO, jobset
from broker.services import dispatcher
from broker.store.db.models import Cluster
from broker.store.inventory import admin
from broker.store.outbox import fail_over
from tests.locks import until_waiting_for_a_lock

LONG = {"sim.archipelago.io/duration": "1h"}


def test_a_forced_removal_deletes_the_copies_on_a_member_that_still_answers(federation):
    job = federation.submit(jobset("train", annotations=LONG))
    gone = federation.until_state(job, "Running")["placements"][0]["cluster"]
    assert federation.api.delete(f"/api/v1/clusters/{gone}").status_code == 409  # live placements: not unforced
    assert federation.api.delete(f"/api/v1/clusters/{gone}", params={"force": "true"}).status_code == 204
    assert federation.copies(job, cluster=gone) == []  # deleted before the row went
    federation.run_until(lambda: len(federation.job(job)["placements"]) == 2 and federation.state(job) == "Running")
    old, new = federation.job(job)["placements"]
    assert (old["cluster"], old["state"]) == (gone, "Deleted")
    assert new["cluster"] != gone and new["state"] == "Running"
    assert [c["cluster"] for c in federation.copies(job)] == [new["cluster"]]
    removed = federation.api.get("/api/v1/events", params={"kind": "cluster", "object": gone}).json()["items"][-1]
    assert removed["reason"] == "Removed" and "its 1 copy on the member deleted" in removed["message"]


def test_one_member_cannot_be_registered_under_two_names(federation):
    again = federation.api.post("/api/v1/clusters", json={"name": "eu-west-twin",
                                                         "kubeconfig": federation.sim.kubeconfig("eu-west")})
    assert again.status_code == 409
    assert "is already registered as cluster 'eu-west'" in again.json()["detail"]


WITH_SECOND_ADDRESS = {**SCENARIO, "clusters": [{"name": "eu-west", "labels": {"region": "eu"}, "aliases": ["eu-west-lb"]},
                                                 {"name": "us-east", "labels": {"region": "us"}}]}


@pytest.mark.parametrize("scenario", [WITH_SECOND_ADDRESS])
def test_one_member_behind_a_second_address_is_known_by_its_kube_system_uid(federation):
    """No spelling of the URL links eu-west-lb to eu-west; the member's own identity does (Karmada's cluster ID)."""
    again = federation.api.post("/api/v1/clusters", json={"name": "eu-west-lb",
                                                         "kubeconfig": federation.sim.kubeconfig("eu-west-lb")})
    assert again.status_code == 409, again.text
    assert "is cluster 'eu-west' (the same kube-system namespace uid" in again.json()["detail"]
    assert sorted(c["name"] for c in federation.api.get("/api/v1/clusters").json()) == ["eu-west", "us-east"]


def test_members_of_their_own_are_told_apart_by_uid(federation):
    with federation.db.sessions() as session:
        uids = dict(session.execute(select(Cluster.name, Cluster.uid)).all())
    assert set(uids) == {"eu-west", "us-east"} and None not in uids.values()
    assert uids["eu-west"] != uids["us-east"]


@pytest.mark.parametrize("respell", [lambda s: s + "/", lambda s: s.replace("/clusters/", "/./clusters/"),
                                     lambda s: s.replace("127.0.0.1", "LOCALHOST"),
                                     lambda s: s.replace("eu-west", "e%75-west"),
                                     lambda s: s.replace("https", "HTTPS")],
                         ids=["trailing slash", "dot segment", "localhost", "percent-encoded", "scheme case"])
def test_one_member_under_another_spelling_of_its_url_is_the_same_member(federation, respell):
    kubeconfig = yaml.safe_load(federation.sim.kubeconfig("eu-west"))
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    kubeconfig["clusters"][0]["cluster"]["server"] = respell(server)
    again = federation.api.post("/api/v1/clusters", json={"name": "eu-west-twin",
                                                         "kubeconfig": yaml.safe_dump(kubeconfig)})
    assert again.status_code == 409, again.text
    assert "is already registered as cluster 'eu-west'" in again.json()["detail"]


@pytest.mark.parametrize("failed_over", [True, False], ids=["failed over meanwhile", "not failed over yet"])
def test_a_copy_applied_while_its_member_was_force_removed_is_deleted_from_that_member(federation, monkeypatch,
                                                                                       failed_over):
    """The removal deletes the copies it finds; an apply already under way lands after it, on a member the broker
    no longer follows, while the job is placed again elsewhere: the dispatcher that made the copy deletes it."""
    job = federation.submit(jobset("late-copy", annotations=LONG))
    federation.scheduler.run_once()
    [decided] = federation.placements(job)
    gone = decided.cluster_name

    def remove_then_fail_over() -> None:
        answer = federation.api.delete(f"/api/v1/clusters/{gone}", params={"force": "true"})
        assert answer.status_code == 204, answer.text
        if failed_over:  # the leader's pass, in another replica, fails the placement over
            with federation.db.write() as session:
                fail_over(session, federation.now(), 0.0)

    def crash_point(step: str) -> None:
        if step == "applying":
            remove_then_fail_over()
    monkeypatch.setattr(dispatcher, "crash_point", crash_point)
    federation.dispatcher.run_once()
    assert federation.copies(job, cluster=gone) == []
    said = [e for e in federation.api.get("/api/v1/events", params={"kind": "cluster", "object": gone}).json()[
        "items"] if e["reason"] in ("CopyOrphaned", "StaleCopyDeleted")]
    assert [e["reason"] for e in said] == ["CopyOrphaned", "StaleCopyDeleted"]
    assert all(f"placement {decided.id}" in e["message"] for e in said)
    monkeypatch.undo()
    federation.run_until(lambda: federation.state(job) == "Running")
    assert [c["cluster"] for c in federation.copies(job)] != [gone]
    assert len(federation.copies(job)) == 1


def test_an_orphaned_copy_the_member_refuses_to_delete_is_named_for_deletion_by_hand(federation, monkeypatch):
    """The member removed answers 503 to the deletion of the copy that landed after the removal: nothing follows
    that member any more, so the event says what is left there and where, instead of saying it was deleted."""
    job = federation.submit(jobset("kept-copy", annotations=LONG))
    federation.scheduler.run_once()
    [decided] = federation.placements(job)
    gone = decided.cluster_name

    def crash_point(step: str) -> None:
        if step == "applying":
            assert federation.api.delete(f"/api/v1/clusters/{gone}", params={"force": "true"}).status_code == 204
        elif step == "applied-on-member":
            federation.sim.make_failing(gone)
    monkeypatch.setattr(dispatcher, "crash_point", crash_point)
    federation.dispatcher.run_once()
    federation.sim.heal(gone)
    [left] = federation.copies(job, cluster=gone)
    said = {e["reason"]: e for e in federation.api.get("/api/v1/events", params={"kind": "cluster", "object": gone})
            .json()["items"]}
    assert "StaleCopyDeleted" not in said
    message = said["StaleCopyLeft"]["message"]
    meta = left["metadata"]
    assert f"{meta['namespace']}/{meta['name']} (placement {decided.id})" in message
    assert message.endswith("delete it there") and "503" in message


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_a_copy_applied_while_the_removal_deletes_the_members_copies_is_deleted_too(federation, monkeypatch):
    """On PostgreSQL the removal and the dispatcher's record of an apply run at once: the copy lands after the
    removal listed the member's copies and before it committed. Its record waits for the removal (which holds the
    job), then finds the member gone and deletes the copy; recorded first, it would have been left running there."""
    job = federation.submit(jobset("racing-copy", annotations=LONG))
    federation.scheduler.run_once()
    [decided] = federation.placements(job)
    gone = decided.cluster_name
    listed, landed, removed = threading.Event(), threading.Event(), []
    deleting_copies = admin._delete_copies

    def delete_copies_then_wait(settings, cluster) -> str:
        said = deleting_copies(settings, cluster)
        listed.set()
        assert landed.wait(30), "the apply never landed"
        return said

    def remove() -> None:
        removed.append(federation.api.delete(f"/api/v1/clusters/{gone}", params={"force": "true"}).status_code)

    remover = threading.Thread(target=remove)

    def crash_point(step: str) -> None:
        if step == "applying":  # Applying committed: the removal starts, and lists the member's copies (none yet)
            remover.start()
            assert listed.wait(30), "the removal never listed the copies"
        elif step == "applied-on-member":  # the copy is on the member; its record is next
            threading.Thread(target=lambda: (until_waiting_for_a_lock(federation.db, "no wait"), landed.set()),
                             daemon=True).start()
    monkeypatch.setattr(admin, "_delete_copies", delete_copies_then_wait)
    monkeypatch.setattr(dispatcher, "crash_point", crash_point)
    try:
        federation.dispatcher.run_once()
    finally:
        landed.set()  # the record did not wait for the removal: let the removal end
        remover.join(30)
    assert removed == [204]
    assert federation.copies(job, cluster=gone) == []
