"""Status rules, pure: a member's JobSet status → a placement's status; placements → the job's.

- `member_status`: what the broker keeps of a member JobSet (per ReplicatedJob counts, conditions with their
  reasons and when the broker first saw each, restarts and those that count toward maxRestarts, terminal state, and
  the object's uid, generation and resourceVersion).
- `placement_state`: Starting (on the member, its pods not all ready), Running (every ReplicatedJob's Jobs
  ready or done, Kueue's PodsReady), Succeeded or Failed.
- `aggregate`: `whole` — the one placement's status is the job's; `split` — counts summed over the
  current placement of each part for display, Succeeded once the JobSet's success policy holds over
  the parts' verdicts (a part succeeded when its member's JobSet did).
- `part_failure`: whether a failed part of a split JobSet is restarted (re-placed), per the JobSet's
  failure policy and a federation-level maxRestarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Collection, Iterable, Mapping

from broker.engine.jobset import MAX_RESTARTS_ANNOTATION
from clusters.rules.times import rfc3339

COUNTS = ("ready", "active", "succeeded", "failed", "suspended")
LIVE_COUNTS = ("ready", "active", "suspended")  # what a part whose copy went without a verdict shows no more of
GONE_STATES = ("Deleting", "Deleted")
_TERMINAL = {"Completed": "Succeeded", "Failed": "Failed"}
_IGNORING_MAX = ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts")


def member_status(jobset: Mapping[str, Any], seen: Mapping[str, Any] | None = None, now: datetime | None = None
                  ) -> dict[str, Any]:
    """The placement's status from the member's JobSet object; `seen`, what was kept of it before, and `now`, the
    broker's time, date each condition as the broker first saw it (`observedTime`, see `_observed`)."""
    metadata, status = jobset.get("metadata") or {}, jobset.get("status") or {}
    counts = {r["name"]: {k: int(r.get(k) or 0) for k in COUNTS} for r in status.get("replicatedJobsStatus") or ()}
    expected = {r["name"]: {"replicas": int(r.get("replicas", 1)),
                            "dependsOn": [{"name": d["name"], "status": d.get("status", "Ready")}
                                          for d in r.get("dependsOn") or ()]}
                for r in (jobset.get("spec") or {}).get("replicatedJobs") or ()}
    conditions = _observed([{k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
                            for c in status.get("conditions") or ()], (seen or {}).get("conditions") or (), now)
    terminal = status.get("terminalState")
    if not terminal:
        terminal = next((c["type"] for c in conditions if c.get("type") in _TERMINAL and c.get("status") == "True"),
                        None)
    counted = status.get("restartsCountTowardsMax")  # JobSet ≥ v0.8; None from an older controller
    return {"replicatedJobs": counts, "expected": expected, "conditions": conditions,
            "restarts": int(status.get("restarts") or 0),
            "restartsCountTowardsMax": None if counted is None else int(counted),
            "terminalState": terminal, "uid": metadata.get("uid"), "generation": metadata.get("generation"),
            "resourceVersion": metadata.get("resourceVersion")}


def _observed(conditions: list[dict[str, Any]], before: Iterable[Mapping[str, Any]], now: datetime | None
              ) -> list[dict[str, Any]]:
    """Each condition with `observedTime`: when the broker first saw it so (its type, status and member's time), by
    the broker's clock. A member's `lastTransitionTime` is its own clock's — skewed on one, running fast on a
    simulated one — and a dashboard that shows times beside the broker's own events needs one clock."""
    kept = {(c.get("type"), c.get("status"), c.get("lastTransitionTime")): c.get("observedTime") for c in before}
    stamp = now and rfc3339(now)
    for condition in conditions:
        observed = kept.get((condition.get("type"), condition.get("status"), condition.get("lastTransitionTime")))
        if observed or stamp:
            condition["observedTime"] = observed or stamp
    return conditions


def counted_restarts(status: Mapping[str, Any]) -> int:
    """The restarts that count toward the JobSet's maxRestarts, as its member's controller counts them (restarts
    by a rule that ignores maxRestarts do not); all its restarts where the controller does not say."""
    counted = status.get("restartsCountTowardsMax")
    return int(status.get("restarts") or 0) if counted is None else int(counted)


def placement_state(status: Mapping[str, Any]) -> str:
    """The member's verdict; else Running once every ReplicatedJob has all its Jobs ready or succeeded
    (one waiting on a dependsOn not met yet is not expected to be); else Starting."""
    if status.get("terminalState") in _TERMINAL:
        return _TERMINAL[status["terminalState"]]
    counts, expected = status.get("replicatedJobs") or {}, status.get("expected") or {}
    up = {name: counts.get(name, {}).get("ready", 0) + counts.get(name, {}).get("succeeded", 0)
          for name in expected}
    done = {name: counts.get(name, {}).get("succeeded", 0) for name in expected}

    def due(name: str) -> bool:
        return all((done if d["status"] == "Complete" else up).get(d["name"], 0)
                   >= expected.get(d["name"], {}).get("replicas", 1) for d in expected[name]["dependsOn"])

    ready = bool(expected) and all(up[name] >= spec["replicas"] for name, spec in expected.items() if due(name))
    return "Running" if ready else "Starting"


def not_ready(status: Mapping[str, Any]) -> str:
    """`2 of 4 Jobs of workers ready`: what the member reports missing, for people."""
    counts, missing = status.get("replicatedJobs") or {}, []
    for name, spec in (status.get("expected") or {}).items():
        up = counts.get(name, {}).get("ready", 0) + counts.get(name, {}).get("succeeded", 0)
        if up < spec["replicas"]:
            missing.append(f"{up} of {spec['replicas']} Jobs of {name} ready")
    return ", ".join(missing) or "the member reports no ready counts"


def newer(status: Mapping[str, Any], seen: Mapping[str, Any]) -> bool:
    """Whether `status` was read after `seen` (resourceVersions are etcd revisions: integers in practice)."""
    try:
        return int(status.get("resourceVersion") or 0) > int(seen.get("resourceVersion") or 0)
    except ValueError:
        return status.get("resourceVersion") != seen.get("resourceVersion")


def failure_message(status: Mapping[str, Any]) -> str:
    failed = next((c for c in status.get("conditions") or () if c.get("type") == "Failed"), {})
    return failed.get("message") or failed.get("reason") or "failed"


@dataclass(frozen=True)
class Policy:
    """What the JobSet's manifest says about success and failure, as the aggregation needs it."""

    mode: str  # whole | split
    replicas: Mapping[str, int]  # ReplicatedJob -> replicas, in manifest order
    success_operator: str = "All"
    success_targets: tuple[str, ...] = ()
    failure_policy: Mapping[str, Any] | None = None
    max_restarts: int = 0

    @classmethod
    def of(cls, manifest: Mapping[str, Any], mode: str) -> Policy:
        spec = manifest.get("spec") or {}
        replicas = {r["name"]: int(r.get("replicas", 1)) for r in spec.get("replicatedJobs") or ()}
        success = spec.get("successPolicy") or {}
        failure = spec.get("failurePolicy")
        annotations = (manifest.get("metadata") or {}).get("annotations") or {}
        if MAX_RESTARTS_ANNOTATION in annotations and failure is None:
            failure = {}  # asking the broker for restarts is a failure policy of default actions
        max_restarts = annotations.get(MAX_RESTARTS_ANNOTATION, (failure or {}).get("maxRestarts", 0))
        return cls(mode, replicas, success.get("operator", "All"),
                   tuple(success.get("targetReplicatedJobs") or replicas), failure, int(max_restarts))

    def succeeded(self, finished: Collection[str]) -> bool:
        """The success policy over the parts that succeeded: All — every target part; Any — one of them.

        A part's verdict is its member's: the member's JobSet controller judged the policy narrowed to
        that part (`clusters.jobsets`), so counts, which may be missing or one update behind, never decide."""
        if self.success_operator == "Any":
            return any(name in finished for name in self.success_targets)
        return all(name in finished for name in self.success_targets)


@dataclass(frozen=True)
class PartView:
    """The current (newest) placement of one part."""

    part: str
    cluster: str
    state: str
    status: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Aggregate:
    state: str | None  # Succeeded or Failed once decided; else None (the job goes on)
    status: dict[str, Any]
    message: str = ""


def aggregate(policy: Policy, parts: Iterable[PartView], federation_restarts: int = 0) -> Aggregate:
    """The job's status from its parts' current placements."""
    parts = sorted(parts, key=lambda p: list(policy.replicas).index(p.part) if p.part in policy.replicas else -1)
    summed = {name: dict.fromkeys(COUNTS, 0) for name in policy.replicas}
    conditions, restarts, counted = [], federation_restarts, federation_restarts
    for view in parts:
        gone = view.state in GONE_STATES  # its pods are gone with its copy: none ready or active any more
        for name, counts in (view.status.get("replicatedJobs") or {}).items():
            for key in COUNTS:
                if not (gone and key in LIVE_COUNTS):
                    summed.setdefault(name, dict.fromkeys(COUNTS, 0))[key] += counts.get(key, 0)
        restarts += int(view.status.get("restarts") or 0)
        counted += counted_restarts(view.status)
        for condition in view.status.get("conditions") or ():
            conditions.append({**condition, **({"part": view.part, "cluster": view.cluster} if view.part else
                                               {"cluster": view.cluster})})
    status = {"replicatedJobsStatus": [{"name": name, **counts} for name, counts in summed.items()],
              "conditions": conditions, "restarts": restarts, "restartsCountTowardsMax": counted,
              "parts": [{"part": v.part, "cluster": v.cluster, "state": v.state} for v in parts]}
    if policy.mode == "whole":
        view = parts[0] if parts else None
        if view is not None and view.state in ("Succeeded", "Failed"):
            status["terminalState"] = "Completed" if view.state == "Succeeded" else "Failed"
            message = (f"completed on {view.cluster}" if view.state == "Succeeded"
                       else f"failed on {view.cluster}: {failure_message(view.status)}")
            return Aggregate(view.state, status, message)
        return Aggregate(None, status)
    if policy.succeeded({v.part for v in parts if v.state == "Succeeded"}):
        status["terminalState"] = "Completed"
        where = ", ".join(sorted({v.cluster for v in parts}))
        return Aggregate("Succeeded", status, f"success policy ({policy.success_operator}) holds over its parts on "
                                              f"{where}")
    return Aggregate(None, status)


@dataclass(frozen=True)
class PartFailure:
    restart: bool
    counted: bool
    message: str


def part_failure(policy: Policy, part: str, restarts: int, max_restarts: int | None = None) -> PartFailure:
    """A part of a split JobSet failed on its member: restart it elsewhere, or fail the job?

    The JobSet's failure policy decides as it would on one cluster: none — the job fails; the first
    rule that targets the part (rules that name failure reasons are the member's to judge and are
    skipped here) picks the action; restarts count toward `max_restarts` (by default the policy's
    maxRestarts) unless the action ignores it.
    """
    if policy.failure_policy is None:
        return PartFailure(False, False, f"{part} failed and the JobSet has no failure policy")
    limit = policy.max_restarts if max_restarts is None else max_restarts
    action = "RestartJobSet"
    for rule in policy.failure_policy.get("rules") or ():
        if rule.get("onJobFailureReasons") or (rule.get("targetReplicatedJobs") and
                                                part not in rule["targetReplicatedJobs"]):
            continue
        action = rule.get("action", action)
        break
    if action == "FailJobSet":
        return PartFailure(False, False, f"{part} failed and the failure policy says FailJobSet")
    counted = action not in _IGNORING_MAX
    if counted and restarts >= limit:
        return PartFailure(False, False, f"{part} failed beyond its restarts ({restarts} of {limit})")
    return PartFailure(True, counted, f"{part} failed; restarting it alone"
                                      + (f" (restart {restarts + 1} of {limit})" if counted else ""))
