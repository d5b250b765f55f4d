"""Prometheus metrics: what the loop services observe, plus inventory gauges read at scrape time."""

from __future__ import annotations

from datetime import timedelta
from typing import Callable, ContextManager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.store.db.models import LEADER, Cluster, Event, Job, Lease, Queue, as_utc, utcnow

REGISTRY = CollectorRegistry(auto_describe=True)

SCHEDULER_CYCLE_SECONDS = Histogram(
    "archipelago_scheduler_cycle_seconds", "Time of one scheduling cycle (read, decide, commit)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=REGISTRY)
PLACEMENTS_PER_CYCLE = Gauge("archipelago_scheduler_placements_last_cycle",
                             "Placements committed by the last scheduling cycle", registry=REGISTRY)
PLACEMENTS_TOTAL = Counter("archipelago_scheduler_placements", "Placements committed", registry=REGISTRY)
CYCLES_DROPPED = Counter("archipelago_scheduler_cycles_dropped",
                         "Scheduling cycles whose decisions were dropped, all of them or those of the slices not yet "
                         "committed (another scheduler committed since the read)",
                         registry=REGISTRY)
LEASE_HELD = Gauge("archipelago_leader_lease_held", "1 while this replica holds the leader lease and runs the loops",
                   registry=REGISTRY)
MEMBER_LANES_HELD = Gauge("archipelago_member_lanes_held", "Members whose lease this replica holds (its lanes)",
                          registry=REGISTRY)
LEASES_LOST = Counter("archipelago_leader_leases_lost", "Times this replica lost the leader lease while holding it",
                      registry=REGISTRY)
MEMBER_ERRORS = Counter("archipelago_member_errors", "Failed requests to member clusters", ["cluster"],
                        registry=REGISTRY)
STATUS_LAG_SECONDS = Histogram(
    "archipelago_status_lag_seconds", "Time from a status change on a member to the broker's inventory",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY)
API_REQUEST_SECONDS = Histogram(
    "archipelago_api_request_seconds", "Time from a request's arrival to its answer's start, by route and status class",
    ["method", "route", "code"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=REGISTRY)
AUDIT_ANONYMOUS_DROPPED = Counter("archipelago_audit_anonymous_dropped",
                                  "Requests with no known token not written to the audit trail (over its bound)",
                                  registry=REGISTRY)


class InventoryCollector:
    """Queue depth, jobs by state and clusters by state, counted in SQL when Prometheus scrapes."""

    def __init__(self) -> None:
        self.sessions: Callable[[], ContextManager[Session]] | None = None  # `Database.read`
        self.queue_names = False  # queues by id unless the names may be shown (they are tenants' words)

    def collect(self):
        jobs = GaugeMetricFamily("archipelago_jobs", "Jobs by state", labels=["state"])
        depth = GaugeMetricFamily("archipelago_queue_pending_jobs", "Queued jobs per queue (its id, or its name "
                                  "with ARCHIPELAGO_METRICS_QUEUE_NAMES)", labels=["queue"])
        clusters = GaugeMetricFamily("archipelago_clusters", "Member clusters by state", labels=["state"])
        token = GaugeMetricFamily("archipelago_leader_fencing_token", "The leader lease's fencing token: it grows by "
                                  "one with every new leader, whichever replica is scraped")
        waited = GaugeMetricFamily("archipelago_queue_oldest_wait_seconds", "How long the oldest Queued job of each "
                                   "queue has waited (its id, or its name as for the depth)", labels=["queue"])
        member = GaugeMetricFamily("archipelago_cluster_state", "1 for each member cluster's state",
                                   labels=["cluster", "state"])
        evictions = GaugeMetricFamily("archipelago_startup_evictions_last_hour", "Placements evicted in the last hour "
                                      "because their pods were not all ready within the startup timeout")
        if self.sessions is not None:
            with self.sessions() as session:
                for state, count in session.execute(select(Job.state, func.count()).group_by(Job.state)):
                    jobs.add_metric([state], count)
                label = Queue.name if self.queue_names else Queue.id
                for queue, count in session.execute(select(label, func.count(Job.id))
                                                    .outerjoin(Job, (Job.queue_id == Queue.id) &
                                                               (Job.state == "Queued")).group_by(label)):
                    depth.add_metric([str(queue)], count)
                for state, count in session.execute(select(Cluster.state, func.count()).group_by(Cluster.state)):
                    clusters.add_metric([state], count)
                token.add_metric([], session.scalar(select(Lease.token).where(Lease.name == LEADER)) or 0)
                now = utcnow()
                for queue, oldest in session.execute(select(label, func.min(Job.submitted_at)).join(
                        Job, (Job.queue_id == Queue.id) & (Job.state == "Queued")).group_by(label)):
                    waited.add_metric([str(queue)], max(0.0, (now - as_utc(oldest)).total_seconds()))
                for name, state in session.execute(select(Cluster.name, Cluster.state)):
                    member.add_metric([name, state], 1)
                evictions.add_metric([], session.scalar(select(func.count(Event.id)).where(
                    Event.kind == "job", Event.reason == "Evicted", Event.time >= now - timedelta(hours=1))) or 0)
        yield from (jobs, depth, clusters, token, waited, member, evictions)


INVENTORY = InventoryCollector()
REGISTRY.register(INVENTORY)


class MemberLaneLag:
    """Per member this replica carries in its lanes, how far behind its lane is (`lags`, computed when Prometheus
    scrapes, by broker.services.lanes): a member carried by no replica has no series on any of them."""

    def __init__(self) -> None:
        self.lags: Callable[[], dict[str, float]] = dict  # cluster name -> seconds

    def collect(self):
        lag = GaugeMetricFamily("archipelago_member_lane_lag_seconds", "Seconds since this replica's lane of the "
                                "member last completed a pass of each of its services (inventory sync, status, "
                                "dispatch) over it, counted from when the lane took the member", labels=["cluster"])
        for cluster, seconds in sorted(self.lags().items()):
            lag.add_metric([cluster], seconds)
        yield lag


MEMBER_LANE_LAG = MemberLaneLag()
REGISTRY.register(MEMBER_LANE_LAG)


def exposition(sessions: Callable[[], ContextManager[Session]], *, queue_names: bool = False) -> bytes:
    INVENTORY.sessions, INVENTORY.queue_names = sessions, queue_names
    return generate_latest(REGISTRY)
