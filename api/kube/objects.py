"""Jobs as JobSet objects: the manifest the tenant sent, the broker's metadata and the federated status.

resourceVersion is the id of the newest event of the job (every state change writes one, in the same
transaction). A list carries the event id below which every event is committed (`watermark`), so a watch
started from it misses nothing even when transactions commit out of id order (PostgreSQL).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, undefer

from api.kube.resource import API_VERSION, KIND
from api.views import jobs_out
from broker.store.db.models import JOB_FINISHED_STATES, Event, Job, as_utc, utcnow
from broker.store.jobs import BROKER_PREFIX
from clusters.rules.times import rfc3339

BROKER_MANAGER = "archipelago"  # the field manager of every field a JobSet was submitted with
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# The broker's fields of a job, shown as annotations of its JobSet (and dropped from what a client sends back).
STATUS_ANNOTATIONS = tuple(BROKER_PREFIX + key for key in ("job-id", "queue", "state", "clusters", "hypernodes",
                                                           "reason", "expected-start"))
# How long a transaction may hold an event id before it commits; older gaps in the ids are rollbacks.
COMMIT_SLACK = timedelta(seconds=30)
_UID_NAMESPACE = uuid.UUID("6f1d8a52-5b1e-4d8e-9d55-1f3c0e3b7a10")
TABLE_COLUMNS = [("Name", "string", "name", "the JobSet's name"), ("Queue", "string", "", "the broker queue"),
                 ("State", "string", "", "Queued, Admitted, Dispatching, Starting, Running, Succeeded, Failed"),
                 ("Clusters", "string", "", "the members it runs on"),
                 ("HyperNodes", "string", "", "the HyperNodes it was placed in"),
                 ("Expected Start", "string", "", "a waiting job's forecast start (UTC), or never"),
                 ("Age", "string", "", "since it was submitted")]


def uid_of(job_id: int) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"job/{job_id}"))


def resource_versions(session: Session, job_ids: list[int]) -> dict[int, int]:
    """Each job's newest event id."""
    if not job_ids:
        return {}
    rows = session.execute(select(Event.object_id, func.max(Event.id)).where(
        Event.kind == "job", Event.object_id.in_([str(i) for i in job_ids])).group_by(Event.object_id))
    return {int(object_id): newest for object_id, newest in rows}


def watermark(session: Session) -> int:
    """The newest event id at or below which every event is visible: below the first gap among the ids of
    the last COMMIT_SLACK (an event still being committed), else the newest id."""
    cutoff = utcnow() - COMMIT_SLACK
    expected = (session.scalar(select(func.max(Event.id)).where(Event.time < cutoff)) or 0) + 1
    for event_id in session.scalars(select(Event.id).where(Event.id >= expected).order_by(Event.id)):
        if event_id != expected:
            return expected - 1
        expected += 1
    return expected - 1


def shown(job: Job) -> bool:
    """As broker.store.jobs.SHOWN_AS_JOBSETS decides in SQL."""
    return job.state not in JOB_FINISHED_STATES or job.cancel_requested_at is None


def render(session: Session, jobs: list[Job]) -> list[dict[str, Any]]:
    """JobSet objects of these jobs; manifests a listing left unread are read in one query."""
    ids = [j.id for j in jobs]
    if ids:
        session.scalars(select(Job).where(Job.id.in_(ids)).options(undefer(Job.manifest))).all()
    versions = resource_versions(session, ids)
    return [jobset(job, summary.model_dump(), versions.get(job.id, 0))
            for job, summary in zip(jobs, jobs_out(session, jobs))]


def jobset(job: Job, summary: dict[str, Any], resource_version: int) -> dict[str, Any]:
    manifest = job.manifest
    metadata = {**(manifest.get("metadata") or {}), "name": job.name, "namespace": job.namespace,
                "uid": uid_of(job.id), "resourceVersion": str(resource_version), "generation": 1,
                "creationTimestamp": rfc3339(job.submitted_at),
                "managedFields": managed_fields(manifest, job.submitted_at)}
    if job.cancel_requested_at is not None:
        metadata["deletionTimestamp"] = rfc3339(job.cancel_requested_at)
    broker_fields = [str(job.id), summary["queue"], job.state, ",".join(summary["clusters"]),
                     ",".join(summary["hypernodes"]), job.reason or "", _expected_start(summary)]
    metadata["annotations"] = {**(metadata.get("annotations") or {}),
                               **{key: value for key, value in zip(STATUS_ANNOTATIONS, broker_fields) if value}}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": manifest.get("spec") or {},
            "status": _status(job, summary)}


def _expected_start(summary: dict[str, Any]) -> str:
    """`archipelago jobs list`'s ESTIMATED START for kubectl: the forecast start, "never", or nothing."""
    if summary.get("expected_start"):
        return rfc3339(summary["expected_start"])
    return "never" if (summary.get("expected") or "").startswith("never") else ""


def _status(job: Job, summary: dict[str, Any]) -> dict[str, Any]:
    """JobSet's status shape, aggregated over the placements, and a Placed condition saying where or why not."""
    federated = job.status or {}
    placed = job.admitted_at is not None and job.state != "Queued"
    where = ", ".join(summary["clusters"]) + (f" ({', '.join(summary['hypernodes'])})" if summary["hypernodes"] else "")
    conditions = [{"type": "Placed", "status": "True" if placed else "False",
                   "reason": job.state, "message": (f"on {where}" if placed and where else job.reason or job.state),
                   "lastTransitionTime": rfc3339(job.admitted_at if placed else job.submitted_at)}]
    conditions += [{**condition, "lastTransitionTime": condition.get("lastTransitionTime") or rfc3339(job.submitted_at)}
                   for condition in federated.get("conditions") or ()]
    status: dict[str, Any] = {"replicatedJobsStatus": federated.get("replicatedJobsStatus") or [],
                              "conditions": conditions, "restarts": int(federated.get("restarts") or job.restart_count)}
    if federated.get("terminalState"):
        status["terminalState"] = federated["terminalState"]
    return status


def table(objects: list[dict[str, Any]], list_meta: dict[str, Any]) -> dict[str, Any]:
    """The server-side printing `kubectl get` asks for (Accept: ...;as=Table)."""
    now = utcnow()
    rows = []
    for obj in objects:
        metadata, annotations = obj["metadata"], obj["metadata"].get("annotations") or {}
        created = datetime.strptime(metadata["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        cells = [metadata["name"]] + [annotations.get(key, "") for key in (*STATUS_ANNOTATIONS[1:5],
                                                                            STATUS_ANNOTATIONS[6])]
        partial = {k: v for k, v in metadata.items() if k != "managedFields"}
        rows.append({"cells": cells + [_age(now - as_utc(created))],
                     "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": partial}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows,
            "columnDefinitions": [{"name": name, "type": kind, "format": fmt, "description": text, "priority": 0}
                                  for name, kind, fmt, text in TABLE_COLUMNS]}


def _age(elapsed: timedelta) -> str:
    seconds = max(0, int(elapsed.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def core_event(event: Event, job: Job) -> dict[str, Any]:
    """One of the broker's events of a job as a core/v1 Event about its JobSet."""
    at = rfc3339(event.time)
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{job.name}.{event.id}", "namespace": job.namespace, "uid": uid_of(-event.id),
                         "resourceVersion": str(event.id), "creationTimestamp": at},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": job.name, "namespace": job.namespace,
                               "uid": uid_of(job.id)},
            "reason": event.reason, "message": event.message, "type": event.type, "count": 1,
            "firstTimestamp": at, "lastTimestamp": at, "source": {"component": "archipelago"},
            "reportingComponent": "archipelago"}


def tenant_annotations(annotations: dict | None) -> dict[str, Any]:
    """Annotations as the tenant wrote them: without the broker's fields or kubectl's record of the last apply."""
    return {key: value for key, value in (annotations or {}).items()
            if key != LAST_APPLIED and key not in STATUS_ANNOTATIONS}


def submitted_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """What a submitter writes and the broker keeps as it was: the spec, labels and annotations."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return {"spec": obj.get("spec") or {}, "metadata": {"labels": metadata.get("labels") or {},
                                                       "annotations": tenant_annotations(metadata.get("annotations"))}}


def _fields_v1(value: Any) -> dict[str, Any]:
    """The FieldsV1 set of a value: its keys, nested; lists and scalars as leaves."""
    return {f"f:{key}": _fields_v1(item) for key, item in value.items()} if isinstance(value, dict) else {}


def managed_fields(manifest: dict[str, Any], submitted: datetime) -> list[dict[str, Any]]:
    return [{"manager": BROKER_MANAGER, "operation": "Update", "apiVersion": API_VERSION, "time": rfc3339(submitted),
             "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(submitted_fields(manifest))}]
