"""How long a job is expected to run, from what is known of it, best first (after Slurm's time limits and
Armada's and Kueue's wait-time discussions):

1. its tenant's declaration, the `archipelago.io/expected-runtime` annotation — unless the tenant's recent
   declarations ran over and the broker learned a longer runtime for jobs like it (the learned one wins);
2. what the broker learned of finished jobs of the same tenant, queue and shape (a high quantile of the recent
   runtimes: a forecast that promises too early is worse than one that promises late), within:
3. the Jobs' `activeDeadlineSeconds` (an upper bound: the member's Job controller ends a Job past it);
4. its queue's default, set by an admin; else the broker's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from broker.engine.jobset import EXPECTED_RUNTIME_ANNOTATION
from clusters.rules.durations import parse_duration

LEARNED_FROM = 3  # finished jobs before their runtimes are a statistic
LEARNED_WINDOW = 20  # the most recent runtimes read
LEARNED_QUANTILE = 0.9
OVERRUN = 1.2  # a finished job that ran this many times its declaration overran it
TRUSTED_OVERRUNS = 0.2  # at most this share of a tenant's recent declarations overran: it is trusted


@dataclass(frozen=True, slots=True)
class Runtime:
    seconds: float
    source: str  # declared | learned | deadline | queue default | default


def declared_runtime(manifest: Mapping[str, Any]) -> float | None:
    """The tenant's declaration; ValueError for one that is not a positive duration (submission refuses it)."""
    text = ((manifest.get("metadata") or {}).get("annotations") or {}).get(EXPECTED_RUNTIME_ANNOTATION)
    if text is None:
        return None
    seconds = parse_duration(text)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{EXPECTED_RUNTIME_ANNOTATION} must be a positive duration, not {text!r}")
    return seconds


def deadline(manifest: Mapping[str, Any]) -> float | None:
    """The longest the JobSet's Jobs may run, when every ReplicatedJob's Jobs have an `activeDeadlineSeconds` (they
    run side by side); None when one has none."""
    bounds = []
    for rjob in (manifest.get("spec") or {}).get("replicatedJobs") or ():
        seconds = (((rjob.get("template") or {}).get("spec") or {}).get("activeDeadlineSeconds"))
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
            return None
        bounds.append(float(seconds))
    return max(bounds) if bounds else None


def learned(runtimes: Sequence[float]) -> float | None:
    """The `LEARNED_QUANTILE` (nearest rank) of the most recent runtimes (newest first), once there are enough."""
    recent = sorted(runtimes[:LEARNED_WINDOW])
    if len(recent) < LEARNED_FROM:
        return None
    return recent[min(len(recent) - 1, math.ceil(LEARNED_QUANTILE * len(recent)) - 1)]


def trusted(declarations: Sequence[tuple[float, float]]) -> bool:
    """Are a tenant's declarations trusted, by its recent finished jobs' (declared, actual) runtimes?"""
    recent = declarations[:LEARNED_WINDOW]
    overran = sum(1 for declared, actual in recent if actual > declared * OVERRUN)
    return overran <= TRUSTED_OVERRUNS * len(recent)


def expected_runtime(*, declared: float | None, bound: float | None, learnt: float | None,
                     queue_default: float | None, default: float, declarations_trusted: bool = True) -> Runtime:
    """The rules of this module's docstring, in their order."""
    if declared is not None:
        if declarations_trusted or learnt is None or learnt <= declared:
            return Runtime(declared, "declared")
        return Runtime(learnt, "learned")
    if learnt is not None:
        return Runtime(learnt if bound is None else min(learnt, bound), "learned")
    if bound is not None:
        return Runtime(bound, "deadline")
    if queue_default is not None:
        return Runtime(queue_default, "queue default")
    return Runtime(default, "default")


OVERDUE_S = 60.0  # the least time left to a running job past its expected end


def expected_end(started: float, runtime: float, now: float) -> float:
    """When a running job is expected to end: its start plus its runtime; one already past it, soon — within a tenth
    of its runtime more (at least `OVERDUE_S`), and so on each forecast until it does."""
    end = started + runtime
    return end if end > now else now + max(OVERDUE_S, 0.1 * runtime)
