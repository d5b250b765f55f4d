"""Dynamic Resource Allocation (`resource.k8s.io/v1`) as a tenant writes it: ResourceClaimTemplates, checked as the
API server checks them, and the device requests a pod's claims make; and the CEL that selects devices, evaluated by
a well-kept library (cel-python), never by a hand-written subset.

A device as CEL sees it is what the kube-scheduler gives its selectors: `device.driver`, `device.attributes[domain]`
and `device.capacity[domain]` (a name without a domain is the driver's), with `quantity("40Gi")` and the quantity
methods `compareTo`, `isGreaterThan`, `isLessThan`. An expression that fails on a device (a missing attribute, a
result that is not a boolean) does not select it, as a `has()` guard would have said.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import celpy
import celpy.celtypes as celtypes

from clusters.rules.labels import is_dns_label, is_qualified_name
from clusters.rules.quantity import to_milli
from clusters.rules.taints import toleration_error

API_VERSION = "resource.k8s.io/v1"
TEMPLATE_KIND = "ResourceClaimTemplate"
ALLOCATION_MODES = ("ExactCount", "All")
MAX_REQUESTS = 32  # per claim, as the API server allows
MAX_SUBREQUESTS = 8  # firstAvailable alternatives
MAX_SELECTORS = 32
MAX_COUNT = 128  # devices of one request: beyond any node's
UNIT = 1000  # one pod of a demand, or one device, in milli-units as the engine counts
DEMAND_PREFIX = "claims.archipelago.io/"  # the resources pods' device demands are counted by (`DeviceDemand.key`)
CLASS_PREFIX = "devices.archipelago.io/"  # and their devices, per class (`class_key`)


class ClaimError(ValueError):
    """A claim template or a pod's claims the broker cannot accept: `path` names the field, `message` what to fix."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


@dataclass(frozen=True, slots=True)
class Alternative:
    """One way to satisfy a request: `count` devices of `device_class` matching every selector (`all`: every such
    device of the node), each device's taints tolerated."""

    device_class: str
    selectors: tuple[str, ...] = ()
    count: int = 1
    all: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    name: str = ""  # a firstAvailable subrequest's name ("" for `exactly`)

    def describe(self) -> str:
        what = "every" if self.all else f"{self.count} ×"
        return f"{what} {self.device_class}" + (" (selected)" if self.selectors else "")


@dataclass(frozen=True, slots=True)
class Request:
    """A device request of a claim: `exactly` is one alternative; `firstAvailable` several, the first that fits."""

    claim: str  # the pod's name for the claim
    name: str
    alternatives: tuple[Alternative, ...]


@dataclass(frozen=True, slots=True)
class DeviceDemand:
    """Every device request a pod's claims make, and the attributes their devices must share (`matchAttribute`)."""

    requests: tuple[Request, ...]
    match_attributes: tuple[tuple[tuple[str, ...], str], ...] = ()  # (request names or () for all, attribute)

    @property
    def key(self) -> str:
        """The resource name pods of this demand are counted by on a node: equal for equal demands."""
        digest = hashlib.sha256(json.dumps(demand_record(self), sort_keys=True).encode()).hexdigest()[:12]
        return f"{DEMAND_PREFIX}{digest}"

    def describe(self) -> str:
        return " and ".join(" or ".join(a.describe() for a in r.alternatives) for r in self.requests)

    def classes(self) -> dict[str, int]:
        """Devices per class, by each request's first alternative (what its quota is charged; `All`: one)."""
        out: dict[str, int] = {}
        for request in self.requests:
            first = request.alternatives[0]
            out[first.device_class] = out.get(first.device_class, 0) + (1 if first.all else first.count)
        return out

    def class_counts(self) -> dict[str, int]:
        """Devices per class it takes for sure (its `exactly` requests of a count): what every pod of any demand
        takes from one per-class count on a node, so that pods of different demands never count one device twice."""
        out: dict[str, int] = {}
        for request in self.requests:
            if len(request.alternatives) == 1 and not request.alternatives[0].all:
                only = request.alternatives[0]
                out[only.device_class] = out.get(only.device_class, 0) + only.count
        return out

    def counted(self) -> dict[str, DeviceDemand]:
        """Every resource the inventory counts for it: its own key, and the per-class count of each class it takes."""
        return {self.key: self, **{class_key(c): one_of(c) for c in self.class_counts()}}


def class_key(device_class: str) -> str:
    """The resource a node's devices of one class are counted by (one device: 1000)."""
    return f"{CLASS_PREFIX}{device_class}"


def one_of(device_class: str) -> DeviceDemand:
    """One device of a class, tainted or not: a node's room for it is how many of the class it can give at once (a
    request's tolerations are its own demand's to count)."""
    return DeviceDemand((Request("", "device", (Alternative(device_class, tolerations=(_ANY_TAINT,)),)),))


_ANY_TAINT = MappingProxyType({"operator": "Exists"})


# -- CEL ------------------------------------------------------------------------------------------

def _quantity(text: Any) -> celtypes.IntType:
    try:
        return celtypes.IntType(to_milli(str(text)))
    except ValueError as e:
        raise ValueError(f"quantity({text!r}): {e}") from None


def _compare(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


_FUNCTIONS = {"quantity": _quantity, "compareTo": _compare,
              "isGreaterThan": lambda a, b: celtypes.BoolType(a > b),
              "isLessThan": lambda a, b: celtypes.BoolType(a < b)}


class Selectors:
    """Compiled CEL programs, and each one's verdict per device shape (devices of one model repeat by thousands).
    Safe to share between threads."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}
        self._verdicts: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()

    def error(self, expression: str) -> str | None:
        """Why the library cannot evaluate `expression`, or None."""
        if not isinstance(expression, str) or not expression.strip():
            return "is empty: write a CEL expression over `device`"
        if len(expression) > 10_240:
            return "is longer than 10 KiB"
        try:
            self._program(expression)
        except Exception as e:  # the library's parse errors carry the position
            return f"is not CEL the broker can evaluate: {' '.join(str(e).split())[:400]}"
        return None

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            program = self._env.program(self._env.compile(expression), functions=_FUNCTIONS)
            with self._lock:
                self._programs[expression] = program
        return program

    def matches(self, expression: str, device: CelDevice) -> bool:
        verdict = self._verdicts.get((expression, device.shape))
        if verdict is None:
            try:
                result = self._program(expression).evaluate({"device": device.cel})
                verdict = isinstance(result, celtypes.BoolType) and bool(result)
            except Exception:  # noqa: BLE001 - a failing expression selects nothing, as a has() guard would
                verdict = False
            with self._lock:
                self._verdicts[(expression, device.shape)] = verdict
        return verdict


SELECTORS = Selectors()  # the process's: programs and verdicts are pure functions of their text


@dataclass(frozen=True, slots=True)
class CelDevice:
    """A device as selectors see it, and a fingerprint of what they may read (`shape`)."""

    shape: str
    cel: Any

    @classmethod
    def of(cls, driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, str]) -> CelDevice:
        domains: dict[str, dict[str, Any]] = {}
        for name, value in attributes.items():
            domain, _, short = name.rpartition("/")
            domains.setdefault(domain or driver, {})[short] = value
        amounts: dict[str, dict[str, int]] = {}
        for name, value in capacity.items():
            domain, _, short = name.rpartition("/")
            try:
                amounts.setdefault(domain or driver, {})[short] = to_milli(value)
            except ValueError:
                continue
        raw = {"driver": driver, "attributes": domains, "capacity": amounts}
        return cls(json.dumps(raw, sort_keys=True, default=str), celpy.json_to_cel(raw))


# -- claim templates -------------------------------------------------------------------------------

def template_name(template: Any, path: str) -> str:
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not _is_subdomain(name):
        raise ClaimError(f"{path}.metadata.name", "must be a DNS subdomain name (lower case, '-' and '.')")
    return name


def check_template(template: Any, path: str, selectors: Selectors = SELECTORS) -> DeviceDemand:
    """A ResourceClaimTemplate as the API server validates it, and the requests of the claim it makes."""
    if not isinstance(template, Mapping) or template.get("kind") != TEMPLATE_KIND \
            or template.get("apiVersion") != API_VERSION:
        raise ClaimError(path, f"must be a {TEMPLATE_KIND} of {API_VERSION}")
    template_name(template, path)
    spec = _mapping(_mapping(template.get("spec"), f"{path}.spec").get("spec"), f"{path}.spec.spec")
    devices = _mapping(spec.get("devices"), f"{path}.spec.spec.devices")
    raw_requests = devices.get("requests")
    if not isinstance(raw_requests, list) or not 1 <= len(raw_requests) <= MAX_REQUESTS:
        raise ClaimError(f"{path}.spec.spec.devices.requests", f"must list 1 to {MAX_REQUESTS} device requests")
    requests, names = [], set()
    for i, raw in enumerate(raw_requests):
        where = f"{path}.spec.spec.devices.requests[{i}]"
        request = _request(raw, where, selectors)
        if request.name in names:
            raise ClaimError(f"{where}.name", f"{request.name!r} is used twice: request names are unique")
        names.add(request.name)
        requests.append(request)
    matches = []
    for i, raw in enumerate(devices.get("constraints") or []):
        where = f"{path}.spec.spec.devices.constraints[{i}]"
        raw = _mapping(raw, where)
        attribute = raw.get("matchAttribute")
        if not is_qualified_name(attribute) or "/" not in attribute:
            raise ClaimError(f"{where}.matchAttribute", "must be a fully qualified attribute name (domain/name); "
                                                        "only matchAttribute constraints are supported")
        only = raw.get("requests") or []
        if not isinstance(only, list) or any(r not in names for r in only):
            raise ClaimError(f"{where}.requests", f"must name requests of this claim ({', '.join(sorted(names))})")
        matches.append((tuple(only), attribute))
    return DeviceDemand(tuple(requests), tuple(matches))


def _request(raw: Any, path: str, selectors: Selectors) -> Request:
    raw = _mapping(raw, path)
    name = raw.get("name")
    if not is_dns_label(name):
        raise ClaimError(f"{path}.name", "must be a DNS label (lower case letters, digits and '-')")
    exactly, first = raw.get("exactly"), raw.get("firstAvailable")
    if (exactly is None) == (first is None):
        raise ClaimError(path, "must have exactly one of exactly and firstAvailable")
    if exactly is not None:
        return Request("", name, (_alternative(exactly, f"{path}.exactly", selectors),))
    if not isinstance(first, list) or not 1 <= len(first) <= MAX_SUBREQUESTS:
        raise ClaimError(f"{path}.firstAvailable", f"must list 1 to {MAX_SUBREQUESTS} alternatives")
    seen = set()
    for i, sub in enumerate(first):
        sub_name = _mapping(sub, f"{path}.firstAvailable[{i}]").get("name")
        if not is_dns_label(sub_name) or sub_name in seen:
            raise ClaimError(f"{path}.firstAvailable[{i}].name", "must be a DNS label, unique in the request")
        seen.add(sub_name)
    return Request("", name, tuple(replace(_alternative(sub, f"{path}.firstAvailable[{i}]", selectors), name=sub["name"])
                                   for i, sub in enumerate(first)))


def _alternative(raw: Any, path: str, selectors: Selectors) -> Alternative:
    raw = _mapping(raw, path)
    device_class = raw.get("deviceClassName")
    if not _is_subdomain(device_class):
        raise ClaimError(f"{path}.deviceClassName", "must name a DeviceClass (a DNS subdomain name)")
    if raw.get("adminAccess"):
        raise ClaimError(f"{path}.adminAccess", "admin access to devices in use is not brokered: drop it")
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ALLOCATION_MODES:
        raise ClaimError(f"{path}.allocationMode", f"{mode!r:.40} is not ExactCount or All")
    count = raw.get("count")
    if mode == "All" and count is not None:
        raise ClaimError(f"{path}.count", "must be unset with allocationMode All")
    count = 1 if count is None else count
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ClaimError(f"{path}.count", f"must be a whole number from 1 to {MAX_COUNT}")
    raw_selectors = raw.get("selectors") or []
    if not isinstance(raw_selectors, list) or len(raw_selectors) > MAX_SELECTORS:
        raise ClaimError(f"{path}.selectors", f"must be a list of at most {MAX_SELECTORS} selectors")
    expressions = []
    for i, selector in enumerate(raw_selectors):
        expression = _mapping(_mapping(selector, f"{path}.selectors[{i}]").get("cel"),
                              f"{path}.selectors[{i}].cel").get("expression")
        why = selectors.error(expression)
        if why:
            raise ClaimError(f"{path}.selectors[{i}].cel.expression", why)
        expressions.append(expression)
    tolerations = raw.get("tolerations") or []
    if not isinstance(tolerations, list):
        raise ClaimError(f"{path}.tolerations", "must be a list of tolerations")
    for i, toleration in enumerate(tolerations):
        problem = toleration_error(_mapping(toleration, f"{path}.tolerations[{i}]"))
        if problem:
            raise ClaimError(f"{path}.tolerations[{i}].{problem[0]}", problem[1])
    return Alternative(device_class, tuple(expressions), count, mode == "All",
                       tuple(dict(t) for t in tolerations))


def pod_demand(pod_spec: Mapping, templates: Mapping[str, DeviceDemand], path: str) -> DeviceDemand | None:
    """What devices a pod's claims (`spec.resourceClaims`) ask for; None when it has none. Only claims made from a
    template sent with the JobSet can be brokered: a named ResourceClaim lives on one member, not on all."""
    requests, matches = [], []
    claims = pod_spec.get("resourceClaims") or []
    if not isinstance(claims, list):
        raise ClaimError(f"{path}.resourceClaims", "must be a list")
    for i, claim in enumerate(claims):
        where = f"{path}.resourceClaims[{i}]"
        claim = _mapping(claim, where)
        if claim.get("resourceClaimName"):
            raise ClaimError(f"{where}.resourceClaimName", "a ResourceClaim exists on one member only: use "
                                                           "resourceClaimTemplateName and send the template")
        name = claim.get("resourceClaimTemplateName")
        if name not in templates:
            raise ClaimError(f"{where}.resourceClaimTemplateName",
                             f"{name!r:.80} is not among the ResourceClaimTemplates sent with the JobSet "
                             "(send them in one kind: List or YAML stream)")
        demand = templates[name]
        requests += [Request(str(claim.get("name")), r.name, r.alternatives) for r in demand.requests]
        matches += [(tuple(f"{claim.get('name')}/{r}" for r in only) or (f"{claim.get('name')}/",), attribute)
                    for only, attribute in demand.match_attributes]
    return DeviceDemand(tuple(requests), tuple(matches)) if requests else None


def quota_demand(demand: DeviceDemand, mappings: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """What one pod of `demand` is charged in quota resources: its devices of each mapped class (milli-units)."""
    out: dict[str, int] = {}
    for device_class, count in demand.classes().items():
        for resource, names in mappings.items():
            if device_class in names:
                out[resource] = out.get(resource, 0) + count * UNIT
    return out


# -- records ----------------------------------------------------------------------------------------

def demand_record(demand: DeviceDemand) -> dict[str, Any]:
    """A demand as JSON (stored with a job, and the shape registry the inventory counts by)."""
    return {"requests": [{"claim": r.claim, "name": r.name, "alternatives": [
        {"class": a.device_class, "selectors": list(a.selectors), "count": a.count, "all": a.all,
         "tolerations": [dict(t) for t in a.tolerations], "name": a.name} for a in r.alternatives]}
                         for r in demand.requests],
            "match": [[list(only), attribute] for only, attribute in demand.match_attributes]}


def demand_from_record(record: Mapping[str, Any]) -> DeviceDemand:
    return DeviceDemand(
        tuple(Request(r["claim"], r["name"], tuple(Alternative(a["class"], tuple(a["selectors"]), a["count"], a["all"],
                                                               tuple(a["tolerations"]), a.get("name", ""))
                                                   for a in r["alternatives"]))
              for r in record["requests"]),
        tuple((tuple(only), attribute) for only, attribute in record.get("match", [])))


def _mapping(value: Any, path: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise ClaimError(path, "must be an object")
    return value


def _is_subdomain(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 253 and all(is_dns_label(p) for p in value.split("."))
