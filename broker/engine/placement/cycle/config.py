"""What the settings layer controls of the engine: which filters run, the scores' weights, and the switches."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from broker.engine.placement.plugins import FILTERS, SCORES


DEFAULT_FILTERS = ("ClusterState", "JobSetCRD", "RecentEviction", "MemberAdmission", "ClusterSelector",
                   "TaintToleration", "NodeEligibility", "Reservation", "Capacity", "ExclusiveTopology",
                   "TopologyBound")
DEFAULT_SCORE_WEIGHTS = MappingProxyType({"TightestTier": 4.0, "BinPacking": 2.0, "Spread": 0.0, "Locality": 1.0})


@dataclass(frozen=True)
class Config:
    """What the settings layer controls. Filter and score names are those of `plugins.FILTERS`/`SCORES`."""

    filters: tuple[str, ...] = DEFAULT_FILTERS
    score_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_SCORE_WEIGHTS)
    max_candidates_per_tier: int = 16  # HyperNodes tried per tier before moving up (bounds fragmented tiers)
    starvation_after_s: float = 900.0  # a job waiting longer goes first and may hold the nodes it needs
    # the oldest this many starving jobs that do not fit get a hold each cycle (Slurm's backfill reservation
    # depth): every hold idles nodes, and looking for one costs a pass over every HyperNode
    max_holds: int = 32
    preemption: bool = True  # master switch over the queues' LowerPriority policies
    # tenants whose declared runtimes ran over too often (`broker.engine.forecast.runtime.trusted`): their jobs do
    # not backfill on held nodes, whatever they declare
    untrusted_tenants: frozenset[str] = frozenset()

    def __post_init__(self):
        unknown = [n for n in (*self.filters, *self.score_weights) if n not in FILTERS and n not in SCORES]
        if unknown:
            raise ValueError(f"unknown placement plugins {unknown}; known: {sorted(FILTERS) + sorted(SCORES)}")
