"""The ResourceClaimTemplates a submission sends beside its JobSets (a `kind: List` or a YAML stream): checked once
per body, applied to each JobSet whose pods name them (`broker.engine.claims`), stored with the job that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from broker.engine.claims import claim_templates, with_device_demands
from broker.engine.jobset import JobSetError, JobSpec
from broker.store.errors import Invalid
from clusters.rules.dra import TEMPLATE_KIND, DeviceDemand


@dataclass(frozen=True)
class DeviceDemands:
    """What one JobSet's pods claim: their demands, and the templates (as sent) it takes to its member."""

    demands: tuple[DeviceDemand, ...] = ()
    templates: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SentClaims:
    templates: dict[str, tuple[dict, DeviceDemand]] = field(default_factory=dict)
    positions: frozenset[int] = frozenset()  # the templates' places in the body
    mappings: Callable[[], dict[str, list[str]]] = dict
    _mapped: dict[str, list[str]] | None = None

    @classmethod
    def of(cls, documents: list[Any], batch: bool,
           mappings: Callable[[], dict[str, list[str]]] = dict) -> SentClaims:
        positions = [i for i, d in enumerate(documents) if isinstance(d, Mapping) and d.get("kind") == TEMPLATE_KIND]
        if not positions:
            return NO_CLAIMS
        try:
            templates = claim_templates([documents[i] for i in positions])
        except JobSetError as exc:  # its path starts with its place among the templates: name its place in the body
            index, _, rest = exc.path[1:].partition("]")
            raise Invalid(f"[{positions[int(index)]}]{rest}" if batch else rest.lstrip("."), exc.message) from None
        return cls(templates, frozenset(positions), mappings)

    def apply(self, spec: JobSpec, manifest: Mapping[str, Any], where: str) -> tuple[JobSpec, DeviceDemands]:
        if not self.templates and not _claims_anything(manifest):
            return spec, DeviceDemands()
        if self._mapped is None and self.templates:
            self._mapped = self.mappings()
        try:
            spec, demands, used = with_device_demands(spec, manifest, {n: d for n, (_, d) in self.templates.items()},
                                                      self._mapped or {})
        except JobSetError as exc:
            raise Invalid(f"{where}{exc.path}", exc.message) from None
        return spec, DeviceDemands(tuple(demands), [self.templates[name][0] for name in used])

    def check_all_used(self, accepted: list) -> None:
        used = {t["metadata"]["name"] for *_, devices in accepted for t in devices.templates}
        unused = sorted(set(self.templates) - used)
        if unused:
            raise Invalid("", f"no JobSet's pods name the ResourceClaimTemplates {', '.join(unused)}: name them in "
                              "spec.resourceClaims[].resourceClaimTemplateName of a pod template, or leave them out")


NO_CLAIMS = SentClaims()


def _claims_anything(manifest: Mapping[str, Any]) -> bool:
    for raw in (manifest.get("spec") or {}).get("replicatedJobs") or ():
        pod = ((((raw or {}).get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        if isinstance(pod, Mapping) and pod.get("resourceClaims"):
            return True
    return False
