"""Admission for the simulated cluster: the defaulting and validation that the JobSet webhook, the
JobSet/HyperNode CRD schemas and the core name rules apply, as far as a client can notice them.

Errors become 422 Invalid with one `cause` per field, as kube-apiserver reports them.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from clusters.sim.resources import Kind
from clusters.sim.store import ApiError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")  # \Z: not before a final newline, as Go's
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
JOBSET_CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"


class Errors:
    """Field errors collected for one object, raised together as 422 Invalid."""

    def __init__(self) -> None:
        self.causes: list[dict] = []

    def add(self, reason: str, field: str, message: str) -> None:
        self.causes.append({"reason": reason, "message": message, "field": field})

    def required(self, field: str) -> None:
        self.add("FieldValueRequired", field, "Required value")

    def invalid(self, field: str, value: Any, detail: str) -> None:
        self.add("FieldValueInvalid", field, f"Invalid value: {json.dumps(value, default=str)}: {detail}")

    def not_supported(self, field: str, value: Any, allowed: tuple[str, ...]) -> None:
        supported = ", ".join(f'"{a}"' for a in allowed)
        self.add("FieldValueNotSupported", field,
                 f"Unsupported value: {json.dumps(value)}: supported values: {supported}")

    def raise_if_any(self, kind: Kind, name: str) -> None:
        if not self.causes:
            return
        qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
        summary = ", ".join(f"{c['field']}: {c['message']}" for c in self.causes)
        raise ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: [{summary}]'
                       if len(self.causes) > 1 else f'{qualified} "{name}" is invalid: {summary}',
                       {"name": name, "group": kind.group, "kind": kind.kind, "causes": self.causes})


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _typed(errors: Errors, field: str, value: Any, expected: str) -> bool:
    """Schema type check; ints exclude bools as JSON does."""
    ok = (isinstance(value, int) and not isinstance(value, bool)) if expected == "integer" \
        else isinstance(value, _TYPES[expected])
    if not ok:
        errors.add("FieldValueTypeInvalid", field,
                   f"Invalid value: {json.dumps(value, default=str)}: {field} in body must be of type {expected}")
    return ok


def check_name(errors: Errors, name: Any, pattern: re.Pattern = DNS1123_SUBDOMAIN, limit: int = 253,
               field: str = "metadata.name") -> None:
    if not isinstance(name, str) or not name:
        errors.required(field)
    elif len(name) > limit:
        errors.invalid(field, name, f"must be no more than {limit} characters")
    elif not pattern.match(name):
        what = {DNS1123_LABEL: "a lowercase RFC 1123 label", DNS1035_LABEL: "a DNS-1035 label"}.get(
            pattern, "a lowercase RFC 1123 subdomain")
        errors.invalid(field, name, f"{what} must consist of lower case alphanumeric characters, '-' or '.', "
                       "and must start and end with an alphanumeric character")


# JobSet -----------------------------------------------------------------------------------------

def default_jobset(js: dict) -> dict:
    """What the JobSet webhook and CRD defaults add, on a private copy."""
    js = copy.deepcopy(js)
    spec = js.get("spec")
    if not isinstance(spec, dict):
        return js
    if isinstance(spec.get("replicatedJobs"), list):
        for rjob in spec["replicatedJobs"]:
            if not isinstance(rjob, dict):
                continue
            rjob.setdefault("replicas", 1)
            rjob.setdefault("groupName", "default")
            job_spec = rjob.get("template", {}).get("spec") if isinstance(rjob.get("template"), dict) else None
            if isinstance(job_spec, dict):
                job_spec.setdefault("completionMode", "Indexed")
                pod_spec = job_spec.get("template", {}).get("spec") if isinstance(job_spec.get("template"), dict) else None
                if isinstance(pod_spec, dict):
                    pod_spec.setdefault("restartPolicy", "OnFailure")
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    network = spec.setdefault("network", {})
    if isinstance(network, dict):
        network.setdefault("enableDNSHostnames", True)
        network.setdefault("publishNotReadyAddresses", True)
    if isinstance(spec.get("failurePolicy"), dict):
        spec["failurePolicy"].setdefault("restartStrategy", "Recreate")
    spec.setdefault("managedBy", JOBSET_CONTROLLER)
    return js


_RULE_ACTIONS = ("FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                 "RestartJobAndIgnoreMaxRestarts")


def validate_jobset(kind: Kind, js: dict, old: dict | None = None) -> None:
    errors = Errors()
    name = js.get("metadata", {}).get("name", "")
    check_name(errors, name, DNS1123_LABEL, 63)
    spec = js.get("spec")
    if spec is None:
        errors.required("spec")
    elif _typed(errors, "spec", spec, "object"):
        _validate_jobset_spec(errors, name, spec)
        if old is not None:
            _validate_jobset_update(errors, spec, old.get("spec") or {})
    errors.raise_if_any(kind, name)


def _validate_jobset_spec(errors: Errors, name: str, spec: dict) -> None:
    rjobs = spec.get("replicatedJobs")
    names: list[str] = []
    if not rjobs:
        errors.required("spec.replicatedJobs")
    elif _typed(errors, "spec.replicatedJobs", rjobs, "array"):
        for i, rjob in enumerate(rjobs):
            path = f"spec.replicatedJobs[{i}]"
            if not _typed(errors, path, rjob, "object"):
                continue
            rname = rjob.get("name")
            check_name(errors, rname, DNS1123_LABEL, 63, f"{path}.name")
            if rname in names:
                errors.add("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{rname}"')
            names.append(rname)
            replicas = rjob.get("replicas", 1)
            if _typed(errors, f"{path}.replicas", replicas, "integer") and replicas < 0:
                errors.invalid(f"{path}.replicas", replicas, "must be greater than or equal to 0")
            elif isinstance(rname, str) and isinstance(name, str) and isinstance(replicas, int):
                longest = f"{name}-{rname}-{max(replicas - 1, 0)}"
                if len(longest) > 63:
                    errors.invalid("metadata.name", name, "JobSet name is too long, job names generated for "
                                   "this JobSet will exceed 63 characters")
            template = rjob.get("template")
            if template is None:
                errors.required(f"{path}.template")
            elif _typed(errors, f"{path}.template", template, "object"):
                _validate_job_template(errors, f"{path}.template", template)
            depends = rjob.get("dependsOn")
            if depends is not None and _typed(errors, f"{path}.dependsOn", depends, "array"):
                for j, dep in enumerate(depends):
                    if not isinstance(dep, dict) or dep.get("name") not in names[:-1]:
                        errors.invalid(f"{path}.dependsOn[{j}].name", dep.get("name") if isinstance(dep, dict) else dep,
                                       "must name a ReplicatedJob that comes earlier")
                    elif dep.get("status") not in ("Ready", "Complete"):
                        errors.not_supported(f"{path}.dependsOn[{j}].status", dep.get("status"), ("Ready", "Complete"))
    success = spec.get("successPolicy")
    if success is not None and _typed(errors, "spec.successPolicy", success, "object"):
        if success.get("operator") not in ("All", "Any"):
            errors.not_supported("spec.successPolicy.operator", success.get("operator"), ("All", "Any"))
        _check_targets(errors, "spec.successPolicy.targetReplicatedJobs", success.get("targetReplicatedJobs"), names)
    failure = spec.get("failurePolicy")
    if failure is not None and _typed(errors, "spec.failurePolicy", failure, "object"):
        restarts = failure.get("maxRestarts", 0)
        if _typed(errors, "spec.failurePolicy.maxRestarts", restarts, "integer") and restarts < 0:
            errors.invalid("spec.failurePolicy.maxRestarts", restarts, "must be greater than or equal to 0")
        strategy = failure.get("restartStrategy", "Recreate")
        if strategy not in ("Recreate", "BlockingRecreate", "InPlaceRestart"):
            errors.not_supported("spec.failurePolicy.restartStrategy", strategy,
                                 ("Recreate", "BlockingRecreate", "InPlaceRestart"))
        for i, rule in enumerate(failure.get("rules") or []):
            path = f"spec.failurePolicy.rules[{i}]"
            if not _typed(errors, path, rule, "object"):
                continue
            if not rule.get("name"):
                errors.required(f"{path}.name")
            if rule.get("action") not in _RULE_ACTIONS:
                errors.not_supported(f"{path}.action", rule.get("action"), _RULE_ACTIONS)
            _check_targets(errors, f"{path}.targetReplicatedJobs", rule.get("targetReplicatedJobs"), names)
    startup = spec.get("startupPolicy")
    if startup is not None and _typed(errors, "spec.startupPolicy", startup, "object"):
        order = startup.get("startupPolicyOrder")
        if order not in ("AnyOrder", "InOrder"):
            errors.not_supported("spec.startupPolicy.startupPolicyOrder", order, ("AnyOrder", "InOrder"))
        if order == "InOrder" and isinstance(rjobs, list) and any(isinstance(r, dict) and r.get("dependsOn") for r in rjobs):
            errors.invalid("spec", "object", "StartupPolicy and DependsOn APIs are mutually exclusive")
    for field, expected in (("suspend", "boolean"), ("ttlSecondsAfterFinished", "integer"), ("managedBy", "string"),
                            ("network", "object"), ("coordinator", "object")):
        if spec.get(field) is not None:
            _typed(errors, f"spec.{field}", spec[field], expected)
    ttl = spec.get("ttlSecondsAfterFinished")
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl < 0:
        errors.invalid("spec.ttlSecondsAfterFinished", ttl, "must be greater than or equal to 0")
    coordinator = spec.get("coordinator")
    if isinstance(coordinator, dict) and coordinator.get("replicatedJob") not in names:
        errors.invalid("spec.coordinator.replicatedJob", coordinator.get("replicatedJob"),
                       "must name one of the ReplicatedJobs")


def _check_targets(errors: Errors, field: str, targets: Any, names: list[str]) -> None:
    if targets is None or not _typed(errors, field, targets, "array"):
        return
    for target in targets:
        if target not in names:
            errors.invalid(field, target, "does not name a ReplicatedJob of this JobSet")


def _validate_job_template(errors: Errors, path: str, template: dict) -> None:
    spec = template.get("spec")
    if spec is None:
        errors.required(f"{path}.spec")
        return
    if not _typed(errors, f"{path}.spec", spec, "object"):
        return
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if value is not None and _typed(errors, f"{path}.spec.{field}", value, "integer") and value < 0:
            errors.invalid(f"{path}.spec.{field}", value, "must be greater than or equal to 0")
    pod = spec.get("template")
    if pod is None:
        errors.required(f"{path}.spec.template")
    elif _typed(errors, f"{path}.spec.template", pod, "object"):
        containers = (pod.get("spec") or {}).get("containers") if isinstance(pod.get("spec"), dict) else None
        if not containers or not isinstance(containers, list):
            errors.required(f"{path}.spec.template.spec.containers")


_MUTABLE_WHILE_SUSPENDED = (("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector"),
                            ("spec", "tolerations"), ("spec", "schedulingGates"), ("spec", "affinity"))


def _without_suspend_mutable(rjobs: Any) -> Any:
    if not isinstance(rjobs, list):
        return rjobs
    result = []
    for rjob in copy.deepcopy(rjobs):
        pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") if isinstance(rjob, dict) else None
        if isinstance(pod, dict):
            for section, field in _MUTABLE_WHILE_SUSPENDED:
                if isinstance(pod.get(section), dict):
                    pod[section].pop(field, None)
        result.append(rjob)
    return result


def _validate_jobset_update(errors: Errors, spec: dict, old: dict) -> None:
    for field in ("successPolicy", "failurePolicy", "startupPolicy", "network", "managedBy", "coordinator"):
        if spec.get(field) != old.get(field):
            errors.invalid(f"spec.{field}", spec.get(field), "field is immutable")
    new_rjobs, old_rjobs = spec.get("replicatedJobs"), old.get("replicatedJobs")
    if old.get("suspend"):
        new_rjobs, old_rjobs = _without_suspend_mutable(new_rjobs), _without_suspend_mutable(old_rjobs)
    if new_rjobs != old_rjobs:
        errors.invalid("spec.replicatedJobs", "array", "field is immutable")


# HyperNode ------------------------------------------------------------------------------------

def validate_hypernode(kind: Kind, hn: dict, old: dict | None = None) -> None:
    errors = Errors()
    name = hn.get("metadata", {}).get("name", "")
    check_name(errors, name)
    spec = hn.get("spec")
    if spec is None:
        errors.required("spec")
    elif _typed(errors, "spec", spec, "object"):
        tier = spec.get("tier")
        if tier is None:
            errors.required("spec.tier")
        elif _typed(errors, "spec.tier", tier, "integer") and tier < 0:
            errors.invalid("spec.tier", tier, "spec.tier in body should be greater than or equal to 0")
        if spec.get("tierName") is not None and _typed(errors, "spec.tierName", spec["tierName"], "string") \
                and len(spec["tierName"]) > 253:
            errors.invalid("spec.tierName", spec["tierName"], "may not be more than 253 characters")
        members = spec.get("members")
        if members is not None and _typed(errors, "spec.members", members, "array"):
            if not members:
                errors.invalid("spec.members", members, "spec.members in body should have at least 1 items")
            for i, member in enumerate(members):
                _validate_member(errors, f"spec.members[{i}]", member)
    errors.raise_if_any(kind, name)


def _validate_member(errors: Errors, path: str, member: Any) -> None:
    if not _typed(errors, path, member, "object"):
        return
    if member.get("type") not in ("Node", "HyperNode"):
        errors.not_supported(f"{path}.type", member.get("type"), ("Node", "HyperNode"))
    selector = member.get("selector")
    if selector is None:
        return
    if not _typed(errors, f"{path}.selector", selector, "object"):
        return
    given = [k for k in ("exactMatch", "regexMatch", "labelMatch") if k in selector]
    if not given:
        errors.invalid(f"{path}.selector", "object", "Either ExactMatch or RegexMatch or LabelMatch must be specified")
    elif len(given) > 1:
        errors.invalid(f"{path}.selector", "object", "Only one of ExactMatch, RegexMatch, or LabelMatch can be specified")
    exact = selector.get("exactMatch")
    if isinstance(exact, dict):
        check_name(errors, exact.get("name"), field=f"{path}.selector.exactMatch.name")
    regex = selector.get("regexMatch")
    if isinstance(regex, dict):
        pattern = regex.get("pattern")
        if not pattern or not isinstance(pattern, str):
            errors.required(f"{path}.selector.regexMatch.pattern")
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                errors.invalid(f"{path}.selector.regexMatch.pattern", pattern, f"not a regular expression: {exc}")
    if "labelMatch" in selector:
        _typed(errors, f"{path}.selector.labelMatch", selector["labelMatch"], "object")


def qos_class(spec: dict) -> str:
    containers = spec.get("containers") or ()
    if not any((c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
               for c in containers):
        return "BestEffort"
    guaranteed = all((c.get("resources") or {}).get("limits") and
                     all(str((c["resources"].get("requests") or c["resources"]["limits"]).get(r))
                         == str(v) for r, v in c["resources"]["limits"].items())
                     and set(c["resources"]["limits"]) >= {"cpu", "memory"}
                     for c in containers)
    return "Guaranteed" if guaranteed else "Burstable"


def default_job(job: dict) -> dict:
    spec = dict(job.get("spec") or {})
    meta = job["metadata"]
    if spec.get("parallelism") is None and spec.get("completions") is None:
        spec["completions"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    uid_labels = {"batch.kubernetes.io/controller-uid": meta["uid"], "controller-uid": meta["uid"]}
    spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}})
    template = dict(spec.get("template") or {})
    tmeta = dict(template.get("metadata") or {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **uid_labels,
                       "batch.kubernetes.io/job-name": meta["name"], "job-name": meta["name"]}
    template["metadata"] = tmeta
    spec["template"] = template
    return {**job, "spec": spec, "status": {}}
