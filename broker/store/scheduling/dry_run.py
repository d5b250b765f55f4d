"""Dry run: where a JobSet would go now and why, over a fresh snapshot, nothing written."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.forecast.runtime import deadline, declared_runtime
from broker.engine.jobset import EXPECTED_RUNTIME_ANNOTATION, JobSetError, on_control_planes, parse_jobset
from broker.engine.placement import DryRun, PendingJob, dry_run, shape_of
from broker.process.settings import Settings
from broker.store.db.models import Queue as QueueRow, Tenant as TenantRow
from broker.store.forecast import RuntimeFacts
from broker.store.scheduling.read import read_inventory
from broker.store.scheduling.records import victim_words
from broker.store.scheduling.records import engine_config
from clusters.rules.pod_security import template_refusal


def dry_run_manifest(session: Session, manifest: dict, tenant_name: str | None, settings: Settings,
                     *, now: float | None = None, as_tenant: bool = False) -> DryRun:
    """Where would this JobSet go now, and why: the engine's answer over a fresh snapshot, nothing written.

    The queue is the manifest's `kueue.x-k8s.io/queue-name` label, else the tenant's default queue;
    the priority comes from its priority class. Raises JobSetError for a manifest, a queue or a
    priority class the tenant could not submit. Call on a fresh `Database.read()` session. `as_tenant`: the answer
    for the tenant's eyes, another tenant's job it would preempt named by its priority and size alone (`job_id`
    empty, its words in `message`).
    """
    clock = datetime.now(timezone.utc).timestamp() if now is None else now
    inventory = read_inventory(session, now=clock, with_pending=False)
    job, _ = probe(session, manifest, tenant_name, settings, clock)
    answer = dry_run(inventory.snapshot, job, engine_config(settings))
    if not as_tenant:
        return answer
    return replace(answer, preemptions=tuple(
        replace(p, job_id="", part=None, message=victim_words(inventory, p.job_id, p.rule))
        if p.rule == "FairSharing" else p for p in answer.preemptions))


def probe(session: Session, manifest: dict, tenant_name: str | None, settings: Settings,
          clock: float) -> tuple[PendingJob, RuntimeFacts]:
    """The JobSet as the job it would be, submitted at `clock` (id "dry-run"), and what its runtime is made of (for
    the forecast: `broker.store.fleet_forecast`). Raises JobSetError as `dry_run_manifest` says."""
    spec = parse_jobset(manifest)
    priority_class = spec.priority_class or settings.default_priority_class
    if priority_class not in settings.priority_classes:
        raise JobSetError("metadata.labels['kueue.x-k8s.io/priority-class']",
                          f"unknown priority class {priority_class!r}; one of {', '.join(settings.priority_classes)}")
    queues = select(QueueRow.name, TenantRow.name, TenantRow.pod_security, QueueRow.id, TenantRow.id).join(TenantRow)
    label = "metadata.labels['kueue.x-k8s.io/queue-name']"
    if spec.queue is None:
        found = session.execute(queues.where(TenantRow.name == tenant_name, QueueRow.is_default)).first()
        if found is None:
            raise JobSetError(label, "name a queue: the tenant has no default queue")
    else:
        found = session.execute(queues.where(QueueRow.name == spec.queue)).first()
        if found is None or (tenant_name is not None and found[1] != tenant_name):
            raise JobSetError(label, f"queue {spec.queue!r} does not exist{' for this tenant' if found else ''}")
    queue_name, owner, pod_security, queue_id, tenant_id = found
    refused = template_refusal(manifest, pod_security)
    if refused:
        raise JobSetError(*refused)
    if pod_security == "privileged":
        spec = on_control_planes(spec)
    try:
        declared = declared_runtime(manifest)
    except ValueError as exc:
        raise JobSetError(f"metadata.annotations['{EXPECTED_RUNTIME_ANNOTATION}']", str(exc)) from None
    bound = deadline(manifest)
    job = PendingJob("dry-run", owner, queue_name, settings.priority_classes[priority_class], clock, spec,
                     shape=shape_of(spec), runtime=declared or bound)
    return job, RuntimeFacts(tenant_id, queue_id, None, declared, bound)
