"""Three `archipelago serve` replicas on one PostgreSQL and the simulator: one leads (scheduling), each holds a lane
of the members (their inventory, status and dispatch). A stream of JobSets; the leader SIGKILLed three times and
another replica (a lane holder) once, each started again; the long jobs cancelled in one burst through one replica.
At the end every job reached exactly one terminal state, no job ever had two live copies on the members, no job or
event was duplicated, and the members hold exactly the copies of the placements that finished, but for those whose
JobSets ask `ttlSecondsAfterFinished: 0`, which the broker deleted once it had recorded their end: as the members'
lanes move, the replica that takes one over lists its copies, and a copy that ended meanwhile is there to be read
(issue #45)."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from typing import Iterator

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, func, select

from broker.process.testing import SCENARIO, TENANTS, Broker, copies, jobset, leader_pid, wait_for
from broker.store.db.models import JOB_FINISHED_STATES, LEADER, Event, Job, Lease, Placement
from clusters.jobsets import JOB_ID_LABEL, PLACEMENT_ID_LABEL
from clusters.sim.testing import SimHandle, running_simulator

REPLICAS = 3
JOBS = 45
LEADER_KILLS = 3
# A short lease keeps the test short: a dead leader is replaced within 2.5 s.
LEASE = {"ARCHIPELAGO_LEASE_DURATION": "2", "ARCHIPELAGO_LEASE_RENEW_PERIOD": "0.5", "ARCHIPELAGO_LOG_FORMAT": "json"}
TERMINAL_EVENTS = set(JOB_FINISHED_STATES)
# Events that say what happened once to one placement (their messages name it): any repetition is a duplicate.
ONCE_PER_PLACEMENT = {"Admitted", "Applied", "Deleted", *TERMINAL_EVENTS}


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with running_simulator(SCENARIO, speed=20) as handle:  # a 30 s job runs 1.5 s
        yield handle


class CopyWatch(threading.Thread):
    """Samples the members' copies until stopped; remembers any job seen with two live copies at once."""

    def __init__(self, sim: SimHandle) -> None:
        super().__init__(daemon=True)
        self.sim, self.doubled, self.samples, self.errors = sim, [], 0, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.02):
            try:
                listed = copies(self.sim)
            except Exception:  # a busy simulator's answer missed: sample again, the thread must not die
                self.errors += 1
                continue
            live = Counter(c["metadata"]["labels"][JOB_ID_LABEL] for c in listed
                           if not c["metadata"].get("deletionTimestamp"))
            self.doubled += [job for job, n in live.items() if n > 1]
            self.samples += 1


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_replicas_whose_leader_is_killed_again_and_again_end_every_job_once(sim, settings, tmp_path):
    database_url, secret = settings.database_url, Fernet.generate_key().decode()
    replicas = [Broker(tmp_path, database_url=database_url, secret_key=secret, env=LEASE, name=f"replica-{i}")
                for i in range(REPLICAS)]
    engine = create_engine(database_url)
    watch = CopyWatch(sim)
    chance = random.Random(14)
    try:
        for replica in replicas:
            replica.start(wait=False)
        for replica in replicas:
            wait_for(replica.ready, f"{replica.name} to answer")
        first = replicas[0].api
        tenant, queue = TENANTS[0]
        first.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).raise_for_status()
        first.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).raise_for_status()
        for name in sim.cluster_names:
            first.post("/api/v1/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name)}).raise_for_status()
        watch.start()

        def live_replica() -> Broker:
            answering: list[Broker] = []
            wait_for(lambda: answering.extend(r for r in replicas if r.ready()) or answering, "a replica to answer")
            return chance.choice(answering)

        def replica_of(chosen, what: str) -> Broker:
            """A replica `chosen(pid, leader's pid)` picks, against one reading of the leader (leadership may move)."""
            found: list[Broker] = []

            def pick() -> bool:
                leader = leader_pid(engine)
                found[:] = [r for r in replicas if leader is not None and chosen(r.process.pid, leader)]
                return bool(found)

            wait_for(pick, what)
            return found[0]

        def kill(victim: Broker) -> None:
            victim.kill()
            wait_for(lambda: leader_pid(engine) not in (None, victim.process.pid), "another replica to lead")
            victim.start(wait=False)

        names, token_before = [], _token(engine)
        kills = {JOBS * (k + 1) // (LEADER_KILLS + 1): "leader" for k in range(LEADER_KILLS)}
        kills[JOBS // 2 + 1] = "follower"
        for n in range(JOBS):
            names.append(f"chaos-{n}")
            manifest = jobset(names[-1], parts=(("workers", 1, 8, 8),),  # 8 of the 32 nodes
                              annotations={"sim.archipelago.io/duration": duration(names[-1])})
            if ttl_of(names[-1]) is not None:
                manifest["spec"]["ttlSecondsAfterFinished"] = ttl_of(names[-1])
            submit_once(live_replica, manifest)
            if kills.get(n) == "leader":
                kill(replica_of(lambda pid, leader: pid == leader, "the leader"))
            elif kills.get(n) == "follower":
                kill(replica_of(lambda pid, leader: pid != leader, "a follower"))
        with engine.connect() as connection:  # the long ones, running or waiting, cancelled in one burst
            long_ones = connection.scalars(select(Job.id).where(Job.name.in_(
                [name for name in names if duration(name) == "1h"]))).all()
        through = live_replica()
        for job_id in long_ones:
            assert through.api.delete(f"/api/v1/jobs/{job_id}").status_code == 202
        wait_for(lambda: _all_finished(engine, len(names)), "every job to end", deadline=45.0)
        wait_for(lambda: not [c for c in copies(sim) if ttl_of(c["metadata"]["name"]) is not None],
                 "the finished copies their tenant wanted gone to go")
        watch.stopping.set()
        watch.join()

        with engine.connect() as connection:
            jobs = connection.execute(select(Job.id, Job.name, Job.state)).all()
            terminal = Counter(connection.execute(select(Event.object_id, Event.reason).where(
                Event.kind == "job", Event.reason.in_(TERMINAL_EVENTS))).all())
            once = Counter(connection.execute(select(Event.object_id, Event.reason, Event.message).where(
                Event.kind == "job", Event.reason.in_(ONCE_PER_PLACEMENT))).all())
            reasons = connection.execute(select(Event.object_id, Event.reason, Event.message).where(
                Event.kind == "job").order_by(Event.id)).all()
            finished = {pid for pid, name in connection.execute(
                select(Placement.id, Job.name).join(Job, Job.id == Placement.job_id)
                .where(Placement.state.in_(("Succeeded", "Failed")))) if ttl_of(name) is None}
        assert sorted(name for _, name, _ in jobs) == sorted(names)  # each job once, none lost
        for job_id, name, state in jobs:
            expected = "Cancelled" if duration(name) == "1h" else "Succeeded"
            assert state == expected, (name, state)
            assert [reason for (obj, reason), n in terminal.items() if obj == str(job_id) for _ in range(n)] == [state]
        assert [key for key, n in once.items() if n > 1] == []  # no event written twice
        last: dict[str, tuple[str, str]] = {}
        for job_id, reason, message in reasons:  # a waiting reason is written when it changes, never twice in a row
            assert last.get(job_id) != (reason, message) or reason != "Waiting", (job_id, message)
            last[job_id] = (reason, message)
        assert watch.doubled == []  # never two live copies of one job, in every sample taken all along
        assert watch.samples > 10 * watch.errors and watch.samples >= 100, (watch.samples, watch.errors)
        on_members = sorted(int(c["metadata"]["labels"][PLACEMENT_ID_LABEL]) for c in copies(sim))
        assert on_members == sorted(finished)  # one copy per finished placement kept, none of a cancelled job
        assert _token(engine) >= token_before + LEADER_KILLS  # each kill made a new leader
        logged = [json.loads(line)["message"] for replica in replicas
                  for line in (tmp_path / f"{replica.name}.log").read_text().splitlines() if line.startswith("{")]
        assert sum(m.startswith("lease: acquired") for m in logged) >= LEADER_KILLS + 1  # JSON logs say who led
    finally:
        watch.stopping.set()
        for replica in replicas:
            replica.stop()
        engine.dispose()


def _token(engine) -> int:
    with engine.connect() as connection:
        return connection.scalar(select(Lease.token).where(Lease.name == LEADER)) or 0


def _all_finished(engine, count: int) -> bool:
    with engine.connect() as connection:
        return connection.scalar(select(func.count()).select_from(Job).where(Job.state.in_(JOB_FINISHED_STATES))) \
            == count


def duration(name: str) -> str:
    """Every third job would run an hour: it is cancelled; the others run 30 s (1.5 s at the simulator's speed)."""
    return "1h" if int(name.split("-")[1]) % 3 == 2 else "30s"


def ttl_of(name: str) -> int | None:
    """Every other short job asks its copy deleted as soon as it ends."""
    return 0 if duration(name) == "30s" and int(name.split("-")[1]) % 2 else None


def submit_once(live_replica, manifest: dict) -> None:
    """Through any live replica; a replica killed mid-request may have committed it: a retry then gets 409."""
    for _ in range(10):
        try:
            answer = live_replica().api.post("/api/v1/jobs", json=manifest, params={"tenant": "team-a"})
        except httpx.TransportError:
            continue
        if answer.status_code in (201, 409):
            return
        answer.raise_for_status()
    raise AssertionError(f"{manifest['metadata']['name']} could not be submitted")
