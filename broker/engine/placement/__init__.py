"""The placement engine: pure functions over a snapshot of the inventory.

Build a `Snapshot` from `Cluster`/`Queue`/`Tenant`/`RunningPlacement` records, call
`schedule(snapshot, pending, config)` for a cycle or `dry_run(snapshot, job, config)` for one
question. Imports nothing that does I/O.
"""

from broker.engine.placement.cycle import DEFAULT_FILTERS, DEFAULT_SCORE_WEIGHTS, Config, dry_run, schedule
from broker.engine.placement.decisions import (ClusterVerdict, CycleResult, DryRun, Hold, NodeAssignment, Parked,
                                               Placement, Preemption, Waiting)
from broker.engine.placement.model import (CLUSTER_STATES, FAIR_SHARE_PREEMPTION_POLICIES, GPU, PREEMPTION_POLICIES,
                                           RECLAIM_POLICIES, Backlog, Cluster, HyperNode, Node, PendingJob, Queue,
                                           Resources, RunningPlacement, Tenant, shape_of)
from broker.engine.placement.plugins import FILTERS, SCORES
from broker.engine.placement.snapshot import Snapshot

__all__ = [
    "CLUSTER_STATES", "DEFAULT_FILTERS", "DEFAULT_SCORE_WEIGHTS", "FAIR_SHARE_PREEMPTION_POLICIES", "FILTERS", "GPU",
    "PREEMPTION_POLICIES", "RECLAIM_POLICIES", "SCORES",
    "Backlog", "Cluster", "ClusterVerdict", "Config", "CycleResult", "DryRun", "Hold", "HyperNode", "Node",
    "NodeAssignment", "Parked", "PendingJob", "Placement", "Preemption", "Queue", "Resources", "RunningPlacement",
    "Snapshot", "Tenant", "Waiting", "dry_run", "schedule", "shape_of",
]
