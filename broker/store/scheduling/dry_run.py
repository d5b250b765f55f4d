"""Dry run: where a JobSet would go now and why, over a fresh snapshot, nothing written."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.engine.jobset import JobSetError, on_control_planes, parse_jobset
from broker.engine.placement import DryRun, PendingJob, dry_run
from broker.process.settings import Settings
from broker.store.db.models import Queue as QueueRow, Tenant as TenantRow
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
    spec = parse_jobset(manifest)
    priority_class = spec.priority_class or settings.default_priority_class
    if priority_class not in settings.priority_classes:
        raise JobSetError("metadata.labels['kueue.x-k8s.io/priority-class']",
                          f"unknown priority class {priority_class!r}; one of {', '.join(settings.priority_classes)}")
    clock = datetime.now(timezone.utc).timestamp() if now is None else now
    inventory = read_inventory(session, now=clock, with_pending=False)
    queues = select(QueueRow.name, TenantRow.name, TenantRow.pod_security).join(TenantRow)
    label = "metadata.labels['kueue.x-k8s.io/queue-name']"
    if spec.queue is None:
        found = session.execute(queues.where(TenantRow.name == tenant_name, QueueRow.is_default)).first()
        if found is None:
            raise JobSetError(label, "name a queue: the tenant has no default queue")
    else:
        found = session.execute(queues.where(QueueRow.name == spec.queue)).first()
        if found is None or (tenant_name is not None and found[1] != tenant_name):
            raise JobSetError(label, f"queue {spec.queue!r} does not exist{' for this tenant' if found else ''}")
    queue_name, owner, pod_security = found
    refused = template_refusal(manifest, pod_security)
    if refused:
        raise JobSetError(*refused)
    if pod_security == "privileged":
        spec = on_control_planes(spec)
    job = PendingJob("dry-run", owner, queue_name, settings.priority_classes[priority_class], clock, spec)
    answer = dry_run(inventory.snapshot, job, engine_config(settings))
    if not as_tenant:
        return answer
    return replace(answer, preemptions=tuple(
        replace(p, job_id="", part=None, message=victim_words(inventory, p.job_id, p.rule))
        if p.rule == "FairSharing" else p for p in answer.preemptions))
