"""A JobSet's pods with DRA claims, in the engine's terms: each pod's device requests (from the ResourceClaimTemplates
sent with the JobSet) become one resource its pod asks 1 of, the demand's key, which the inventory counts per node
(`clusters.device_use`); and the devices it surely takes per class (`devices.archipelago.io/<class>`), counted per node
too, so that pods of two demands placed in one cycle never take one device twice; plus the quota resources its device
classes are mapped to.

Pods without claims are untouched; a pod whose claims name a template not sent, or a named ResourceClaim, is refused
with the field to fix.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from broker.engine.jobset import JobSetError, JobSpec
from clusters.rules.dra import UNIT, ClaimError, class_key, DeviceDemand, check_template, pod_demand, quota_demand, template_name

_POD_PATH = "template.spec.template.spec"


def claim_templates(documents: Iterable[Any], path: str = "") -> dict[str, tuple[dict, DeviceDemand]]:
    """ResourceClaimTemplates by name, each checked as the API server would; JobSetError names the one to fix."""
    out: dict[str, tuple[dict, DeviceDemand]] = {}
    for i, template in enumerate(documents):
        where = f"{path}[{i}]"
        try:
            name = template_name(template, where)
            demand = check_template(template, where)
        except ClaimError as exc:
            raise JobSetError(exc.path, exc.message) from None
        if name in out:
            raise JobSetError(f"{where}.metadata.name", f"ResourceClaimTemplate {name!r} is sent twice")
        out[name] = (dict(template), demand)
    return out


def with_device_demands(spec: JobSpec, manifest: Mapping[str, Any], templates: Mapping[str, DeviceDemand],
                        mappings: Mapping[str, Sequence[str]]) -> tuple[JobSpec, list[DeviceDemand], list[str]]:
    """The spec with each part's pod device demand added to its pod requests; the demands made, and the names of
    the templates its pods use (only those go to the member)."""
    raw_parts = (manifest.get("spec") or {}).get("replicatedJobs") or []
    demands, used, parts = [], [], []
    for i, (part, raw) in enumerate(zip(spec.parts, raw_parts)):
        pod_spec = (((raw.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        path = f"spec.replicatedJobs[{i}].{_POD_PATH}"
        try:
            demand = pod_demand(pod_spec, templates, path)
        except ClaimError as exc:
            raise JobSetError(exc.path, exc.message) from None
        if demand is None:
            parts.append(part)
            continue
        demands.append(demand)
        used += [c["resourceClaimTemplateName"] for c in pod_spec.get("resourceClaims") or ()
                 if c["resourceClaimTemplateName"] not in used]
        requests = {**part.pod_requests, demand.key: UNIT}
        for device_class, count in demand.class_counts().items():
            requests[class_key(device_class)] = count * UNIT
        for resource, amount in quota_demand(demand, mappings).items():
            requests[resource] = requests.get(resource, 0) + amount
        parts.append(replace(part, pod_requests=MappingProxyType(requests), devices=demand.describe()))
    return replace(spec, parts=tuple(parts)), demands, used
