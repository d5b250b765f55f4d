"""A waiting job's headline holds while what it waits for holds: no `Waiting` event for the same cause in other
amounts, nor when its queue's usage rises and falls around its quota while no cluster could take it anyway."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from broker.services.scheduler import SchedulerService

from broker.store.db.models import Job, Node, Placement, Queue
from tests.placement.fixtures import GPU
from tests.scheduler.conftest import add_cluster, add_queue, job_events, submit


@pytest.fixture
def scheduler(db, settings) -> SchedulerService:
    """Jobs here were submitted long ago (the fixtures' epoch): no holds, which a starving job would take."""
    return SchedulerService(db, settings.model_copy(update={"placement_max_holds": 0}))


def finish(session, job_id: int) -> None:
    session.execute(update(Placement).where(Placement.job_id == job_id).values(state="Succeeded"))
    session.get(Job, job_id).state = "Succeeded"


def others_use(session, gpus: int, cpus: int = 0) -> None:
    """Someone else's pods on every node: `gpus` GPUs each (and `cpus`, which changes the cluster, and no fit)."""
    for node in session.scalars(select(Node)):
        node.used = {GPU: gpus * 1000, "cpu": cpus * 1000}


def headline(db, job_id: int) -> tuple[str, int]:
    with db.sessions() as session:
        return session.get(Job, job_id).reason, len(job_events(session, job_id, "Waiting"))


def test_a_big_job_waits_for_room_while_small_ones_fill_its_quota_and_leave(db, setup, scheduler):
    """Eight 8-GPU nodes, each with 3 GPUs free (others' pods): 24 free in all, but not 8 on one node. Queue q (16
    GPUs of quota) holds two 8-GPU pods at its head: no cluster can take it. Its 2-GPU jobs behind run and end, one
    after the other, so its quota is used up and free again by turns. Its headline stays 'no cluster can take it
    now', with one event; when the room comes back and only its quota holds it, that is news, once: the room gone
    again is what it was told already."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=1, nodes_per_leaf=8)
        others_use(session, 5)
        queue = add_queue(session, quota_gpus=16)
        big = submit(session, queue, "big", pods=2)
        small = submit(session, queue, "small-0", gpus=2)
    assert scheduler.run_once().admitted == [small.id]
    seen = [headline(db, big.id)]
    for turn in range(1, 4):
        with setup() as session:  # others' pods come and go: the cluster changed, it is decided again
            others_use(session, 5, cpus=turn)
        scheduler.run_once()  # its queue at quota: 2 + 16 > 16
        seen.append(headline(db, big.id))
        with setup() as session:
            finish(session, small.id)
            small = submit(session, session.get(Queue, queue.id), f"small-{turn}", gpus=2)
        assert scheduler.run_once().admitted == [small.id]  # its quota free again: the room is what it lacks
        seen.append(headline(db, big.id))
    assert [count for _, count in seen] == [1] * len(seen), seen
    assert all(reason.startswith("no cluster can take it now") for reason, _ in seen), seen
    assert any(", and queue q is at its quota of 16 GPUs" in reason for reason, _ in seen), seen

    with setup() as session:
        others_use(session, 0)
    scheduler.run_once()
    reason, events = headline(db, big.id)
    assert reason.startswith("queue q is at its quota of 16 GPUs") and events == 2
    with setup() as session:
        others_use(session, 5, cpus=9)
    scheduler.run_once()
    reason, events = headline(db, big.id)
    assert reason.startswith("no cluster can take it now, and queue q") and events == 2


def test_the_same_cause_in_other_amounts_is_no_news(db, setup, scheduler):
    """Queue q's quota of 16 GPUs: its head needs 16 while 8, then 0 then 8 again are in use by turns behind it on
    another leaf with room for all: the amount it is short changes, the cause (its quota) does not."""
    with setup() as session:
        add_cluster(session, "eu-west", leaves=2)
        queue = add_queue(session, quota_gpus=24)
        submit(session, queue, "first", pods=2)  # 16 of 24
    scheduler.run_once()
    with setup() as session:
        big = submit(session, session.get(Queue, queue.id), "big", pods=2)
    scheduler.run_once()
    before = headline(db, big.id)
    with setup() as session:
        submit(session, session.get(Queue, queue.id), "second", pods=1, priority=2000)  # 24 of 24
    scheduler.run_once()
    with setup() as session:
        others_use(session, 0, cpus=1)  # the cluster changed: it is decided again
    scheduler.run_once()
    after = headline(db, big.id)
    assert before[0] != after[0] and "needs 8 GPUs more" in before[0] and "needs 16 GPUs more" in after[0]
    assert before[1] == after[1] == 1
