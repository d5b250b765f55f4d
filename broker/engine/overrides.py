"""Cluster overrides, Karmada's OverridePolicy for the federation: rules an admin writes that rewrite a JobSet
on its way to the members they select (a registry mirror, the fabric's NCCL settings, GPU node labels).

Pure: `parse_rule` checks a rule as written (RuleError names the field); `apply_overrides` takes the rules, a
cluster's name and labels and the member's JobSet before the broker stamps its labels and node pins, and
returns the rewritten JobSet with the names of the rules that applied. Rules apply in (`order`, name) order;
within one rule, its changes in FIELDS order. After each rule the JobSet must still be one the broker would
accept, with the demand placement reserved for it: otherwise OverrideError names the rule, and nothing of
any rule is applied (the placement fails; it never goes out half rewritten).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import jsonpatch
import jsonpointer

from broker.engine.jobset import JobSetError, parse_jobset
from clusters.rules.labels import Selector, check_annotations, check_labels, node_requirement, parse_selector
from clusters.rules.pod_security import template_refusal

BROKER_PREFIX = "archipelago.io/"
PATCH_ROOT = "/spec/replicatedJobs"
# The changes a rule may hold, in the order one rule applies them.
FIELDS = ("image", "env", "nodeSelector", "nodeAffinity", "tolerations", "labels", "annotations", "podLabels",
          "podAnnotations", "jsonPatch")
DOCKER_HUB = "docker.io"

# distribution/reference's grammar (what a container runtime pulls)
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
_REFERENCE = re.compile(rf"({_NAME})(?::[\w][\w.-]{{0,127}})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*"
                        r":[0-9a-fA-F]{32,})?")
_REGISTRY = re.compile(_DOMAIN)
_PREFIX = re.compile(rf"{_DOMAIN}(?:/{_PATH_PART})*")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")  # IsEnvVarName
_CONTAINER = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RULE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_POD = ("template", "spec", "template")  # from a ReplicatedJob to its pod template


class RuleError(ValueError):
    """A rule that cannot be stored: `path` names the field (`env[1].name`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


class OverrideError(ValueError):
    """A rule that would make the JobSet one the broker cannot send: the placement fails with it."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"override rule {rule!r}: {message}")
        self.rule, self.message = rule, message


@dataclass(frozen=True)
class OverrideRule:
    """One admin rule: where it applies (one cluster by name, or the clusters a label selector picks) and
    what it changes (`changes`: FIELDS, as `parse_rule` checked them)."""

    name: str
    order: int
    cluster: str | None
    selector: Selector | None
    changes: Mapping[str, Any]

    def targets(self, cluster: str, labels: Mapping[str, str]) -> bool:
        if self.cluster is not None:
            return self.cluster == cluster
        return self.selector is not None and self.selector.matches(labels)


def parse_rule(raw: Mapping[str, Any]) -> OverrideRule:
    """A rule as the API takes it (`name`, `order`, `cluster` or `selector`, and one or more of FIELDS),
    checked; RuleError says which field is wrong and how."""
    name = raw.get("name")
    if not isinstance(name, str) or len(name) > 63 or not _RULE_NAME.fullmatch(name):
        raise RuleError("name", f"{name!r:.80} is not a DNS-1123 label (lower-case alphanumerics and '-', at most 63)")
    order = raw.get("order", 0)
    if isinstance(order, bool) or not isinstance(order, int) or not -2**31 <= order < 2**31:
        raise RuleError("order", f"must be a whole number (an int32), got {order!r:.40}")
    cluster, selector_text = raw.get("cluster"), raw.get("selector")
    if (cluster is None) == (selector_text is None):
        raise RuleError("cluster", "name exactly one target: `cluster` (a cluster's name) or `selector` (a label "
                                   "selector over cluster labels, e.g. region=eu; \"\" selects every cluster)")
    selector = None
    if cluster is not None and (not isinstance(cluster, str) or not _RULE_NAME.fullmatch(cluster)):
        raise RuleError("cluster", f"{cluster!r:.80} is not a cluster name")
    if selector_text is not None:
        if not isinstance(selector_text, str):
            raise RuleError("selector", "must be a string such as `region in (eu, us),gpu=h100`")
        try:
            selector = parse_selector(selector_text)
        except ValueError as exc:
            raise RuleError("selector", str(exc)) from None
    unknown = sorted(set(raw) - {"name", "order", "cluster", "selector", "description", *FIELDS})
    if unknown:
        raise RuleError(unknown[0], f"unknown field; a rule may hold {', '.join(FIELDS)}")
    changes = {field: raw[field] for field in FIELDS if raw.get(field) not in (None, {}, [])}
    if not changes:
        raise RuleError("", f"the rule changes nothing: give one or more of {', '.join(FIELDS)}")
    for field, value in changes.items():
        _CHECKS[field](value, field)
    return OverrideRule(name, order, cluster, selector, changes)


def rules_for(rules: Iterable[OverrideRule], cluster: str, labels: Mapping[str, str]) -> list[OverrideRule]:
    """The rules that apply on this cluster, in the order they apply."""
    return sorted((r for r in rules if r.targets(cluster, labels)), key=lambda r: (r.order, r.name))


def apply_overrides(rules: Iterable[OverrideRule], cluster: str, labels: Mapping[str, str],
                    jobset: Mapping[str, Any], pod_security: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The JobSet this cluster receives, and the names of the rules that applied, in order; OverrideError
    for the first rule that would make it invalid, change its demand, or make its pods break the tenant's Pod
    Security level (nothing is applied then): a rule cannot make a copy privileged."""
    applying = rules_for(rules, cluster, labels)
    if not applying:
        return dict(jobset), ()
    try:
        before = _demand(jobset)
    except JobSetError as exc:  # stored by an earlier broker that took what this one refuses
        raise OverrideError(applying[0].name, f"the JobSet it would rewrite is invalid: {exc.path}: {exc.message}"
                            ) from None
    result = copy.deepcopy(dict(jobset))
    for rule in applying:
        images = dict(_images(result))
        for field, value in rule.changes.items():
            try:
                result = _APPLY[field](result, value)
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                raise OverrideError(rule.name, f"jsonPatch: {exc}") from None
            except (TypeError, AttributeError):  # the JobSet holds something else where the rule writes
                raise OverrideError(rule.name, f"{field}: the JobSet's fields there are not of the kind Kubernetes "
                                               "defines (e.g. env is not a list)") from None
        _check_result(rule.name, result, images, before)
        refused = template_refusal(result, pod_security)
        if refused:
            raise OverrideError(rule.name, f"it would make {refused[0]} break the tenant's Pod Security level "
                                           f"({pod_security}): {refused[1]}")
    return result, tuple(r.name for r in applying)


# Checking a rule as written --------------------------------------------------------------------------

def _mapping(value: Any, path: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise RuleError(path, f"must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise RuleError(path, f"must be a list, got {type(value).__name__}")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise RuleError(path, f"must be a string, got {type(value).__name__}")
    return value


def _check_image(value: Any, path: str) -> None:
    image = _mapping(value, path)
    unknown = sorted(set(image) - {"registry", "from", "prefix"})
    if unknown:
        raise RuleError(f"{path}.{unknown[0]}", "unknown field; use registry (with from) or prefix")
    if ("registry" in image) == ("prefix" in image):
        raise RuleError(path, "give `registry` (replace the registry of each image, e.g. mirror.example:5000; "
                              "`from` limits it to images of one registry) or `prefix` (put before each image)")
    if "prefix" in image:
        if "from" in image:
            raise RuleError(f"{path}.from", "`from` goes with `registry`, not `prefix`")
        if not _PREFIX.fullmatch(_string(image["prefix"], f"{path}.prefix")):
            raise RuleError(f"{path}.prefix", f"{image['prefix']!r:.80} is not a registry and path such as "
                                              "harbor.example/dockerhub-cache")
        return
    for key in ("registry", "from"):
        if key in image and not _REGISTRY.fullmatch(_string(image[key], f"{path}.{key}")):
            raise RuleError(f"{path}.{key}", f"{image[key]!r:.80} is not a registry host (and port), such as "
                                             "mirror.example:5000")


def _check_env(value: Any, path: str) -> None:
    for i, entry in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        entry = _mapping(entry, where)
        unknown = sorted(set(entry) - {"name", "value", "container"})
        if unknown:
            raise RuleError(f"{where}.{unknown[0]}", "unknown field; an entry has name, value and container")
        if not _ENV_NAME.fullmatch(_string(entry.get("name"), f"{where}.name")):
            raise RuleError(f"{where}.name", f"{entry['name']!r:.80} is not an environment variable name (letters, "
                                             "digits, '_', '-' and '.', not starting with a digit)")
        _string(entry.get("value", ""), f"{where}.value")
        container = entry.get("container")
        if container is not None and not _CONTAINER.fullmatch(_string(container, f"{where}.container")):
            raise RuleError(f"{where}.container", f"{container!r:.80} is not a container name")


def _key_values(check: Callable[[Mapping[str, str]], None]) -> Callable[[Any, str], None]:
    """Labels (`check_labels`) or annotations (`check_annotations`), none of the broker's keys among them."""
    def checked(value: Any, path: str) -> None:
        entries = _mapping(value, path)
        _no_broker_keys(entries, path)
        try:
            check(entries)
        except ValueError as exc:
            raise RuleError(path, str(exc)) from None
        for key, text in entries.items():
            _string(text, f"{path}[{key!r}]")
    return checked


def _no_broker_keys(mapping: Mapping, path: str) -> None:
    for key in mapping:
        if isinstance(key, str) and key.lower().startswith(BROKER_PREFIX):
            raise RuleError(f"{path}[{key!r}]", f"keys under {BROKER_PREFIX} are the broker's")


def _check_affinity(value: Any, path: str) -> None:
    for i, expr in enumerate(_list(value, path)):
        try:
            node_requirement(expr, field=False)
        except ValueError as exc:
            raise RuleError(f"{path}[{i}]", str(exc)) from None


def _check_tolerations(value: Any, path: str) -> None:
    for i, raw in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        toleration = _mapping(raw, where)
        unknown = sorted(set(toleration) - {"key", "operator", "value", "effect", "tolerationSeconds"})
        if unknown:
            raise RuleError(f"{where}.{unknown[0]}", "unknown field of a toleration")
        operator = toleration.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise RuleError(f"{where}.operator", f"{operator!r:.40} is not one of Equal, Exists")
        key = toleration.get("key", "")
        if key:
            try:
                check_labels({_string(key, f"{where}.key"): ""})
            except ValueError:
                raise RuleError(f"{where}.key", f"{key!r:.80} is not a qualified name") from None
        elif operator != "Exists":
            raise RuleError(f"{where}.key", "an empty key tolerates every taint: only with operator Exists")
        value_text = toleration.get("value", "")
        if operator == "Exists" and value_text:
            raise RuleError(f"{where}.value", "operator Exists takes no value")
        try:
            check_labels({"k": _string(value_text, f"{where}.value")})
        except ValueError:
            raise RuleError(f"{where}.value", f"{value_text!r:.80} is not a label value") from None
        effect = toleration.get("effect", "")
        if effect not in _EFFECTS:
            raise RuleError(f"{where}.effect", f"{effect!r:.40} is not one of NoSchedule, PreferNoSchedule, NoExecute")
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None and (effect != "NoExecute" or isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise RuleError(f"{where}.tolerationSeconds", "a whole number of seconds, only with effect NoExecute")


def _check_patch(value: Any, path: str) -> None:
    operations = _list(value, path)
    for i, operation in enumerate(operations):
        where = f"{path}[{i}]"
        operation = _mapping(operation, where)
        for key in ("path", "from"):
            if key not in operation and (key == "path" or operation.get("op") in ("move", "copy")):
                raise RuleError(f"{where}.{key}", "missing")
            if key in operation:
                pointer = _string(operation[key], f"{where}.{key}")
                if pointer != PATCH_ROOT and not pointer.startswith(PATCH_ROOT + "/"):
                    raise RuleError(f"{where}.{key}", f"{pointer!r:.80} is outside {PATCH_ROOT}: a JSON patch may "
                                                      "change the ReplicatedJobs only")
        if operation.get("op") in ("add", "replace", "test") and "value" not in operation:
            raise RuleError(f"{where}.value", f"missing: {operation['op']} needs a value")
    try:
        jsonpatch.JsonPatch(operations)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise RuleError(path, f"not an RFC 6902 JSON patch: {exc}") from None


_CHECKS = {"image": _check_image, "env": _check_env, "nodeSelector": _key_values(check_labels),
           "nodeAffinity": _check_affinity, "tolerations": _check_tolerations, "labels": _key_values(check_labels),
           "annotations": _key_values(check_annotations), "podLabels": _key_values(check_labels),
           "podAnnotations": _key_values(check_annotations), "jsonPatch": _check_patch}


# Applying a rule ---------------------------------------------------------------------------------------

def _pod_templates(jobset: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or ():
        if isinstance(rjob, dict):
            pod = rjob
            for key in _POD:
                pod = pod.setdefault(key, {})
            yield pod


def _containers_of(pod: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        yield from (c for c in spec.get(kind) or () if isinstance(c, dict))


def _containers(jobset: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for pod in _pod_templates(jobset):
        yield from _containers_of(pod)


def split_image(image: str) -> tuple[str, str]:
    """(registry, the rest) as a container runtime reads an image: `ubuntu` is docker.io's library/ubuntu,
    the first component is a registry when it has a '.' or ':' or is localhost."""
    first, slash, rest = image.partition("/")
    if not slash or (not any(c in first for c in ".:") and first != "localhost" and first.lower() == first):
        return DOCKER_HUB, image if slash else f"library/{image}"
    return first, rest


def _image(jobset: dict[str, Any], rule: Mapping[str, Any]) -> dict[str, Any]:
    for container in _containers(jobset):
        image = container.get("image")
        if not isinstance(image, str) or not image:
            continue
        if "prefix" in rule:
            container["image"] = f"{rule['prefix']}/{image}"
            continue
        registry, rest = split_image(image)
        if rule.get("from", registry) == registry:
            container["image"] = f"{rule['registry']}/{rest}"
    return jobset


def _env(jobset: dict[str, Any], entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    for container in _containers(jobset):
        for entry in entries:
            if entry.get("container") not in (None, container.get("name")):
                continue
            variable = {"name": entry["name"], "value": entry.get("value", "")}
            env = container.setdefault("env", [])
            at = next((i for i, e in enumerate(env) if isinstance(e, dict) and e.get("name") == entry["name"]), None)
            if at is None:
                env.append(variable)
            else:
                env[at] = variable  # a valueFrom it had goes: the rule's value is the one it gets
    return jobset


def _pod_spec(pod: dict[str, Any]) -> dict[str, Any]:
    return pod.setdefault("spec", {})


def _node_selector(jobset: dict[str, Any], entries: Mapping[str, str]) -> dict[str, Any]:
    for pod in _pod_templates(jobset):
        spec = _pod_spec(pod)
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **entries}
    return jobset


def _node_affinity(jobset: dict[str, Any], expressions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """ANDed into each of the pod's required node selector terms (one new term if it has none): a node must
    meet them as well as what the pod asked for, never instead of it."""
    for pod in _pod_templates(jobset):
        affinity = _pod_spec(pod).setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        required["nodeSelectorTerms"] = [{**term, "matchExpressions": [*(term.get("matchExpressions") or ()),
                                                                       *copy.deepcopy(list(expressions))]}
                                         for term in terms]
    return jobset


def _tolerations(jobset: dict[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    for pod in _pod_templates(jobset):
        own = _pod_spec(pod).setdefault("tolerations", [])
        own.extend(dict(t) for t in tolerations if t not in own)
    return jobset


def _metadata_map(key: str, pods: bool):
    def apply(jobset: dict[str, Any], entries: Mapping[str, str]) -> dict[str, Any]:
        for holder in (_pod_templates(jobset) if pods else [jobset]):
            metadata = holder.setdefault("metadata", {})
            metadata[key] = {**(metadata.get(key) or {}), **entries}
        return jobset
    return apply


def _json_patch(jobset: dict[str, Any], operations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return jsonpatch.apply_patch(jobset, list(operations), in_place=True)


_APPLY = {"image": _image, "env": _env, "nodeSelector": _node_selector, "nodeAffinity": _node_affinity,
          "tolerations": _tolerations, "labels": _metadata_map("labels", False),
          "annotations": _metadata_map("annotations", False), "podLabels": _metadata_map("labels", True),
          "podAnnotations": _metadata_map("annotations", True), "jsonPatch": _json_patch}


# Checking what a rule made ---------------------------------------------------------------------------

def _images(jobset: dict[str, Any]) -> Iterator[tuple[tuple[int, str], Any]]:
    for i, pod in enumerate(_pod_templates(jobset)):
        for container in _containers_of(pod):
            yield (i, str(container.get("name"))), container.get("image")


def _demand(jobset: Mapping[str, Any]) -> tuple:
    """What placement reserved the JobSet by: its ReplicatedJobs' names, counts and pod requests."""
    spec = parse_jobset(jobset)
    return tuple((p.name, p.replicas, p.parallelism, dict(p.pod_requests), p.exclusive_topology) for p in spec.parts)


def _check_result(rule: str, jobset: dict[str, Any], images_before: Mapping, demand_before: tuple) -> None:
    for where, image in _images(jobset):
        if image != images_before.get(where) and not (isinstance(image, str) and _valid_reference(image)):
            raise OverrideError(rule, f"the image of container {where[1]} would be {image!r:.200}, not a valid "
                                      "image reference")
    try:
        demand = _demand(jobset)
    except JobSetError as exc:
        raise OverrideError(rule, f"the JobSet would be invalid: {exc.path}: {exc.message}") from None
    if demand != demand_before:
        raise OverrideError(rule, "it would change the ReplicatedJobs' names, replicas, parallelism or resource "
                                  "requests, which placement reserved nodes for")


def _valid_reference(image: str) -> bool:
    match = _REFERENCE.fullmatch(image)
    return match is not None and len(match[1]) <= 255
