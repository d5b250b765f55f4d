"""The ResourceClaimTemplates a job brought, as its member gets them: named after the member copy (two jobs of one
namespace may each send a template called `gpu`), the copy's pods pointed at those names, and marked with the job and
placement (on the template, and in its claims' metadata, so that the claims the member makes from it say whose they
are: `clusters.rules.devices`). They are applied before the JobSet, so that its first pods find them, and then owned by it,
so that they go when it goes."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

from clusters.jobsets import FIELD_MANAGER, JOB_ID_LABEL, PLACEMENT_ID_LABEL
from clusters.member import RESOURCECLAIMTEMPLATES, MemberClient


def member_template_name(copy_name: str, template: str) -> str:
    name = f"{copy_name}-{template}"
    if len(name) <= 253:
        return name
    return f"{name[:240]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def member_templates(templates: Iterable[Mapping[str, Any]], jobset: dict[str, Any], *, job_id: int,
                     placement_id: int) -> list[dict[str, Any]]:
    """The templates the stamped copy `jobset` uses, renamed for it; its pods' claims are pointed at them (in place)."""
    meta = jobset["metadata"]
    labels = {JOB_ID_LABEL: str(job_id), PLACEMENT_ID_LABEL: str(placement_id)}
    renamed = {}
    out = []
    for template in templates:
        original = template["metadata"]["name"]
        name = renamed[original] = member_template_name(meta["name"], original)
        spec = dict(template.get("spec") or {})
        claim_meta = dict(spec.get("metadata") or {})
        claim_meta["labels"] = {**(claim_meta.get("labels") or {}), **labels}
        out.append({"apiVersion": template["apiVersion"], "kind": template["kind"],
                    "metadata": {"name": name, "namespace": meta["namespace"],
                                 "labels": {**(template["metadata"].get("labels") or {}), **labels}},
                    "spec": {**spec, "metadata": claim_meta}})
    for rjob in jobset["spec"].get("replicatedJobs") or ():
        pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        for claim in pod.get("resourceClaims") or ():
            if claim.get("resourceClaimTemplateName") in renamed:
                claim["resourceClaimTemplateName"] = renamed[claim["resourceClaimTemplateName"]]
    return out


def apply_templates(client: MemberClient, templates: Iterable[dict[str, Any]], owner: Mapping[str, Any] | None = None
                    ) -> None:
    """Server-side apply each template; with `owner` (the applied JobSet), owned by it: deleted when it is."""
    for template in templates:
        body = template
        if owner is not None:
            meta = owner["metadata"]
            body = {**template, "metadata": {**template["metadata"], "ownerReferences": [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
                "controller": True, "blockOwnerDeletion": True}]}}
        client.apply(RESOURCECLAIMTEMPLATES, body, FIELD_MANAGER)
