"""What the simulated controllers share about the objects they read and write: the real JobSet controller's labels
and annotations, the simulator's own knobs, and small readings of nodes, Jobs and conditions."""

from __future__ import annotations

import random

from clusters.rules.quantity import to_milli


# Labels and annotations of the real JobSet controller (sigs.k8s.io/jobset api/jobset/v1alpha2).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# Simulator knobs, on the JobSet or on a pod template.
DURATION = "sim.archipelago.io/duration"
FAIL = "sim.archipelago.io/fail"
FAIL_ATTEMPTS = "sim.archipelago.io/fail-attempts"

TERMINAL = ("Succeeded", "Failed")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def node_allocatable(node: dict) -> dict[str, int]:
    alloc = {k: to_milli(str(v)) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
    alloc.setdefault("pods", 110_000)
    return alloc


def condition(conditions: list[dict], type_: str) -> dict | None:
    return next((c for c in conditions or () if c.get("type") == type_), None)


def job_finished(job: dict) -> str:
    for cond in job.get("status", {}).get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return ""


def name_suffix() -> str:
    return "".join(random.choices(_NAME_CHARS, k=5))
