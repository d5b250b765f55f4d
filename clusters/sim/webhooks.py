"""Admission a member runs: the JobSet controller's validating webhook, as its scenario asks (with feature gates off
it refuses the JobSets that use those features, in its own words, as a real API server answers an apply or a dry run
of one: 403, "admission webhook ... denied the request"); and PodSecurity admission, in every namespace, by the
namespace's `pod-security.kubernetes.io/enforce` label."""

from __future__ import annotations

from clusters.rules.pod_security import ENFORCE_LABEL, LEVELS, refusal
from clusters.sim.store import ApiError

JOBSET_WEBHOOK = "vjobset.kb.io"
# JobSet features behind feature gates, and where a JobSet uses them
FEATURES = ("RestartJob", "InPlaceRestart", "VolumeClaimPolicies")


def check_jobset_features(jobset: dict, refused: tuple[str, ...]) -> None:
    """Raise the webhook's denial for the first refused feature the JobSet uses."""
    policy = (jobset.get("spec") or {}).get("failurePolicy") or {}
    if "RestartJob" in refused:
        for i, rule in enumerate(policy.get("rules") or ()):
            if rule.get("action") in ("RestartJob", "RestartJobAndIgnoreMaxRestarts"):
                _deny(f'spec.failurePolicy.rules[{i}].action: Invalid value: "{rule["action"]}": the RestartJob '
                      "feature gate is disabled")
    if "VolumeClaimPolicies" in refused and (jobset.get("spec") or {}).get("volumeClaimPolicies"):
        _deny("spec.volumeClaimPolicies: Forbidden: the VolumeClaimPolicies feature gate is disabled")
    if "InPlaceRestart" in refused and policy.get("restartStrategy") == "InPlaceRestart":
        _deny('spec.failurePolicy.restartStrategy: Invalid value: "InPlaceRestart": the InPlaceRestart feature gate '
              "is disabled")


def _deny(message: str) -> None:
    raise ApiError(403, "Forbidden", f'admission webhook "{JOBSET_WEBHOOK}" denied the request: {message}')


def check_pod_security(pod: dict, namespace: dict | None) -> None:
    """Refuse a pod its namespace's enforced Pod Security level forbids, as the API server does (403, the pod is
    not created; a Job controller creating it records the refusal and tries again later). The checks are the
    Kubernetes Standards' as clusters/rules/pod_security.py writes them, tested there case by case against the
    documentation's words."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE_LABEL)
    if level not in LEVELS:
        return
    words = refusal(level, pod.get("metadata") or {}, pod.get("spec") or {})
    if words:
        raise ApiError(403, "Forbidden", f'pods "{pod["metadata"].get("name", "")}" is forbidden: {words}')
