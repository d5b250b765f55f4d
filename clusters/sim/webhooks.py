"""Admission webhooks a member may run, as its scenario asks: the JobSet controller's validating webhook with
feature gates off refuses the JobSets that use those features, in its own words, and so does a real API server's
answer to an apply or a dry run of one (403, "admission webhook ... denied the request")."""

from __future__ import annotations

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
