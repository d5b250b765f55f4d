"""Member lanes at scale: simulated members shared by three `archipelago serve` replicas on PostgreSQL; members per
replica once settled, and how long a SIGKILLed replica's members go uncarried.

    python bench/lanes.py [--members 300] [--nodes 2] [--kills 3] [--logs DIR]

1. One simulator process serves `--members` members of `--nodes` nodes each (bench/inventory.py's); three replicas
   (default lease: 10 s renewed every 2 s; default loop intervals) start on a throw-away database
   (ARCHIPELAGO_TEST_POSTGRES_URL or 127.0.0.1:5432) once the members are registered (through an API-only replica:
   registered under running lanes, each new member joins a replica's lane: it alone is listed, watched and swept).
   Settled: every member carried by exactly one replica (the clusters of its `archipelago_member_lane_lag_seconds`,
   scraped from each replica's /metrics), no replica's count changed for a lease duration and a renew period, and
   every lane caught up (every lag at most twice the longest lane interval: 10 s).
2. `--kills` times, a replica that does not hold the leader lease is SIGKILLed (so that only lanes move): seconds
   until each of its members is carried by one of the two others, until every member's lane has completed its
   passes since (the survivors' lanes carry on: only the members they take are listed, watched and swept), and
   the highest lane lag the survivors export meanwhile; the replica is then started again and the
   lanes settle again.
Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from cryptography.fernet import Fernet
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from table import print_table  # noqa: E402

from bench.api import database, prepare  # noqa: E402
from bench.inventory import start_simulator  # noqa: E402
from broker.process.settings import Settings  # noqa: E402
from broker.process.testing import DEFAULT_LOOPS, Broker, leader_pid  # noqa: E402

POLL = 0.25
LAG = "archipelago_member_lane_lag_seconds"
SETTLE = Settings.model_fields["lease_duration"].default + Settings.model_fields["lease_renew_period"].default
CAUGHT_UP = 2 * Settings.model_fields["status_poll_interval"].default  # the longest lane interval, twice


def lane_lags(replica: Broker) -> dict[str, float]:
    """The members a replica carries, with their lane lag (nothing from a replica that does not answer)."""
    try:
        answer = replica.api.get("/metrics")
    except httpx.TransportError:  # killed, or not serving yet
        return {}
    if answer.status_code != 200:
        return {}
    return {sample.labels["cluster"]: sample.value for family in text_string_to_metric_families(answer.text)
            if family.name == LAG for sample in family.samples}


def settle(replicas: list[Broker], members: int, deadline: float = 300) -> tuple[list[int], float, list[float]]:
    """Wait until every member is carried by exactly one replica, the counts held still for SETTLE seconds and every
    lane has caught up; the counts per replica, when they were reached, and every member's lag as sampled since."""
    started, counts, since, lags = time.monotonic(), None, time.monotonic(), []
    while True:
        assert time.monotonic() - started < deadline, f"lanes did not settle in {deadline} s: {counts}"
        carried = [lane_lags(r) for r in replicas]
        now = sorted(len(c) for c in carried)
        whole = sum(now) == members and len(set().union(*carried)) == members
        if not whole or now != counts:
            counts, since, lags = now, time.monotonic(), []
        sample = [lag for c in carried for lag in c.values()]
        lags += sample
        if whole and time.monotonic() - since >= SETTLE and max(sample) <= CAUGHT_UP:
            return counts, since, lags
        time.sleep(POLL)


def failover(engine, replicas: list[Broker], members: int) -> tuple[float, float, float]:
    """SIGKILL a replica that is not the leader: seconds until all its members are carried by the others, until
    every member's lane has completed its passes since (the survivors' lanes start again on their new share: each
    member relisted, watched again and swept; a lag below the time since the takeover says so), and the highest
    lane lag the survivors export meanwhile."""
    victim = next(r for r in replicas if r.process.pid != leader_pid(engine))
    survivors = [r for r in replicas if r is not victim]
    orphans = set(lane_lags(victim))
    killed = time.monotonic()
    victim.kill()
    highest, carried_at, caught_up = 0.0, None, set()
    while len(caught_up) < members:
        assert time.monotonic() - killed < 180, "the dead replica's members were not taken and caught up in 180 s"
        carried = {name: lag for c in (lane_lags(r) for r in survivors) for name, lag in c.items()}
        now = time.monotonic()
        highest = max([highest, *carried.values()])
        if carried_at is None and orphans <= set(carried):
            carried_at = now
        if carried_at is not None:
            caught_up |= {name for name, lag in carried.items() if lag < now - carried_at - POLL}
        time.sleep(POLL)
    victim.start()
    settle(replicas, members)
    return carried_at - killed, now - killed, highest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=2, help="nodes per member")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--logs", type=Path, default=None, help="a folder to keep the replicas' logs in")
    args = parser.parse_args()

    with database("postgres") as url, tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        simulator = start_simulator(work, args.members, args.nodes)
        prepare(url, backlog=0)
        engine = create_engine(url)
        secret = Fernet.generate_key().decode()
        env = {**DEFAULT_LOOPS, "ARCHIPELAGO_LOG_LEVEL": "WARNING"}
        api_only = Broker(work, database_url=url, secret_key=secret, name="api-only",
                          env={**env, "ARCHIPELAGO_RUN_LOOPS": "false"})
        replicas = [Broker(work, database_url=url, secret_key=secret, env=env, name=f"replica-{i}") for i in range(3)]
        try:
            api_only.start()
            registering = time.monotonic()
            for i in range(args.members):
                name = f"c{i:03d}"
                answer = api_only.api.post("/api/v1/clusters", json={"name": name, "kubeconfig": (
                    work / f"{name}.kubeconfig").read_text()}, timeout=60)
                assert answer.status_code == 201, f"registering {name}: {answer.text}"
            registered = time.monotonic() - registering
            starting = time.monotonic()
            for replica in replicas:
                replica.start(wait=False)
            counts, split, settled_lags = settle(replicas, args.members)
            settled = split - starting
            outcomes = [failover(engine, replicas, args.members) for _ in range(args.kills)]
        finally:
            for replica in (api_only, *replicas):
                replica.stop()
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                for log in work.glob("*.log"):
                    shutil.copy(log, args.logs)
            engine.dispose()
            simulator.terminate()
            simulator.wait(30)

    taken, caught_up, highest = zip(*outcomes)
    figures = {"members": args.members, "nodes_per_member": args.nodes, "registration_s": round(registered, 1),
               "settled_after_s": round(settled, 1), "members_per_replica_min": counts[0],
               "members_per_replica_max": counts[-1], "settled_lag_p50_s": round(statistics.median(settled_lags), 1),
               "settled_lag_max_s": round(max(settled_lags), 1), "kills": args.kills,
               "taken_p50_s": round(statistics.median(taken), 1), "taken_max_s": round(max(taken), 1),
               "caught_up_p50_s": round(statistics.median(caught_up), 1), "caught_up_max_s": round(max(caught_up), 1),
               "lag_during_takeover_max_s": round(max(highest), 1)}
    print_table([
        (f"{args.members} members registered through the API", f"{figures['registration_s']} s", ""),
        ("from the three replicas' start to the final split", f"{figures['settled_after_s']} s", ""),
        ("members per replica once settled (min / max)", f"{counts[0]} / {counts[-1]}", "about a third each"),
        ("lane lag once settled, p50 / max (members x samples)",
         f"{figures['settled_lag_p50_s']} / {figures['settled_lag_max_s']} s", ""),
        (f"a SIGKILLed replica's members all carried by the others, p50 / max ({args.kills} kills)",
         f"{figures['taken_p50_s']} / {figures['taken_max_s']} s", ""),
        ("... and every member's lane through its passes since, p50 / max",
         f"{figures['caught_up_p50_s']} / {figures['caught_up_max_s']} s", ""),
        ("lane lag on the survivors from the kill until then, max", f"{figures['lag_during_takeover_max_s']} s",
         ""),
    ], figures)


if __name__ == "__main__":
    main()
