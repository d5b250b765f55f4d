"""Request and response models: the OpenAPI document is generated from these."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

Quantity = str | int | float
MAX_ID = 2**63 - 1  # the largest id either database can hold
ObjectId = Annotated[int, Path(ge=1, le=MAX_ID, description="the object's id")]


class Problem(BaseModel):
    """application/problem+json (RFC 9457)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = None


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entry documenting problem+json errors of a route."""
    return {code: {"model": Problem, "content": {"application/problem+json": {}}} for code in codes}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Tenants and queues

TENANT_WEIGHT = "the tenant's share of the federation relative to the other tenants' (its queues share its part)"
FAIR_SHARE_PREEMPTION = ("LessThanOrEqualToFinalShare: its jobs may preempt other tenants' work while it ends within "
                         "its fair share and they end at or above theirs")
FairSharePreemption = Literal["Never", "LessThanOrEqualToFinalShare"]
PodSecurityLevel = Literal["privileged", "baseline", "restricted"]
POD_SECURITY = ("the Pod Security Standard its pods are held to, at submission and in its namespaces on the members; "
                "only privileged lets them onto control-plane nodes")
ADOPTABLE = ("its namespaces the broker may use on a member although it did not create them there (by default it "
             "uses only those it created)")


class TenantIn(Strict):
    name: str = Field(description="DNS-1123 label")
    namespaces: list[str] | None = Field(None, description="namespaces the tenant's JobSets run in on every "
                                                           "member; defaults to one named after the tenant")
    weight: float = Field(1.0, gt=0, le=1e6, description=TENANT_WEIGHT)
    fair_share_preemption: FairSharePreemption = Field("Never", description=FAIR_SHARE_PREEMPTION)
    pod_security: PodSecurityLevel = Field("baseline", description=POD_SECURITY)
    adoptable_namespaces: list[str] = Field([], description=ADOPTABLE)


class TenantPatch(Strict):
    namespaces: list[str] | None = None
    weight: float | None = Field(None, gt=0, le=1e6, description=TENANT_WEIGHT)
    fair_share_preemption: FairSharePreemption | None = Field(None, description=FAIR_SHARE_PREEMPTION)
    pod_security: PodSecurityLevel | None = Field(None, description=POD_SECURITY)
    adoptable_namespaces: list[str] | None = Field(None, description=ADOPTABLE)


class TenantOut(BaseModel):
    name: str
    namespaces: list[str]
    weight: float
    fair_share_preemption: str
    pod_security: str
    adoptable_namespaces: list[str]
    queues: list[str]
    created_at: datetime
    fair_share: float = Field(description="the share of the federation its weight entitles it to, among the "
                                          "tenants that have work")
    dominant_share: float = Field(description="its largest share of any resource of the federation now")


class QueueSettings(Strict):
    weight: float | None = Field(None, gt=0, le=1e6, description="fair-share weight")
    priority: int | None = Field(None, ge=-(2**31), lt=2**31, description="queue priority; breaks ties after "
                                                                         "fair share")
    nominal_quota: dict[str, Quantity] | None = Field(None, description='per resource, e.g. {"nvidia.com/gpu": "64"}')
    borrowing_limit: dict[str, Quantity] | None = Field(None, description="how much above its quota the queue may "
                                                                          "borrow from its tenant's other queues")
    preemption_policy: Literal["Never", "LowerPriority"] | None = Field(
        None, description="LowerPriority: a job may preempt the queue's own work of lower priority")
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] | None = Field(
        None, description="a job within the queue's nominal quota may preempt what the tenant's other queues "
                          "borrowed: LowerPriority, their lower-priority work; Any, any of it")
    default: bool | None = Field(None, description="the queue for the tenant's JobSets that name none")
    default_runtime: str | None = Field(None, max_length=32, description="how long its jobs are expected to run when "
                                        "nothing else says (their declaration, what finished jobs like them took, "
                                        "their Jobs' deadlines): a duration, e.g. 2h or 90m")


class QueueIn(QueueSettings):
    name: str
    tenant: str


class QueueOut(BaseModel):
    name: str
    tenant: str
    weight: float
    priority: int
    nominal_quota: dict[str, str]
    borrowing_limit: dict[str, str] | None
    preemption_policy: str
    reclaim_within_cohort: str
    default: bool
    default_runtime: float | None = Field(None, description="seconds (see QueueSettings)")
    usage: dict[str, str]
    lent: dict[str, str] = Field(description="what the tenant's other queues use of its unused nominal quota "
                                             "(what they borrow, in proportion to each lender's unused quota)")
    pending: int
    running: int
    oldest_pending_at: datetime | None
    next_expected_start: datetime | None = Field(None, description="the earliest expected start of its waiting jobs "
                                                                   "(the forecast); null: none forecast")
    fair_share: float = Field(description="the share of the federation its weight entitles it to, among the "
                                          "queues that have work")
    dominant_share: float = Field(description="its largest share of any resource it uses, 0..1")


# Tokens

class TokenIn(Strict):
    role: Literal["admin", "tenant"] = "tenant"
    tenant: str | None = None
    description: str | None = None
    expires_in_days: float | None = Field(None, gt=0, le=36500)


class TokenOut(BaseModel):
    id: int
    role: str
    tenant: str | None
    description: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="the secret; shown only in this answer")


# Jobs, placements, events

class JobOut(BaseModel):
    id: int
    name: str
    namespace: str
    tenant: str
    queue: str
    state: str
    priority_class: str
    priority: int
    placement_mode: str
    reason: str | None
    clusters: list[str]
    hypernodes: list[str] = Field(description="the HyperNodes its placements are bound to")
    restart_count: int
    submitted_at: datetime
    admitted_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool
    expected_start: datetime | None = Field(None, description="a waiting job's expected start (the forecast); null: "
                                                               "not forecast, or not within its horizon")
    expected: str | None = Field(None, description="the forecast in words: when, where, after what")


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None
    history_from: datetime | None = Field(None, description="finished jobs and events from before this moment are "
                                                           "deleted (ARCHIPELAGO_RETENTION_DAYS); null: kept forever")


class SubmitResult(BaseModel):
    items: list[JobOut]


class PlacementOut(BaseModel):
    id: int
    job_id: int
    part: str
    cluster: str
    hypernode: str | None
    tier: int | None
    state: str
    generation: int
    nodes: list[str]
    resources: dict[str, str]
    status: dict[str, Any]
    last_error: str | None
    overrides: list[str] = Field(description="the cluster override rules its copy was rendered with, in order")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class PlacementPage(BaseModel):
    items: list[PlacementOut]
    next_cursor: str | None


class EventOut(BaseModel):
    id: int
    time: datetime
    kind: str
    object_id: str
    type: str
    reason: str
    message: str


class EventPage(BaseModel):
    items: list[EventOut]
    next_cursor: str | None
    history_from: datetime | None = Field(None, description="finished jobs and events from before this moment are "
                                                           "deleted (ARCHIPELAGO_RETENTION_DAYS); null: kept forever")


class JobDetail(JobOut):
    position: int | None = Field(None, description="its place among its queue's waiting jobs (1: next), by priority "
                                                   "then submission; none unless Queued")
    forecast: dict[str, Any] | None = Field(None, description="the forecast loop's last word on a waiting job: start, "
                                                              "cluster, hypernode, after (job ids), later_than or "
                                                              "never, runtime (s) and runtime_source, at")
    manifest: dict[str, Any]
    demand: dict[str, str]
    waiting_reasons: dict[str, str]
    status: dict[str, Any]
    placements: list[PlacementOut]
    events: list[EventOut]


class DryRunPlacement(BaseModel):
    part: str
    cluster: str
    hypernode: str | None
    tier: int | None
    nodes: list[str]
    overrides: list[str] = Field(description="the cluster override rules that would rewrite its copy, in order")
    manifest: dict[str, Any] | None = Field(description="the JobSet that member would receive, before the broker's "
                                                        "labels and node pins; null when an override fails")
    override_error: str | None = Field(description="the override rule that would make it invalid, and why: the "
                                                   "placement would fail")


class DryRunCluster(BaseModel):
    cluster: str
    score: float | None
    reason: str | None
    overrides: list[str] = Field(description="the cluster override rules that apply there, in order")


class DryRunPreemption(BaseModel):
    job: str | None = Field(description="the running job it would preempt; none for another tenant's job (its "
                                        "priority and size are in `reason`), but for an admin")
    part: str
    cluster: str
    rule: str = Field(description="WithinQueue, ReclaimWithinCohort or FairSharing")
    reason: str


class DryRunOut(BaseModel):
    fits: bool
    placements: list[DryRunPlacement]
    preemptions: list[DryRunPreemption] = Field(description="the running work it would take the place of, and why")
    clusters: list[DryRunCluster]
    reason: str | None
    waiting_reasons: dict[str, str]
    expected_start: datetime | None = Field(None, description="when it would start, submitted now (the forecast); "
                                                               "null: it fits now, or not within the forecast")
    expected: str | None = Field(None, description="the forecast in words: when, where, after what")
