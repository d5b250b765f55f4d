"""CLI for tenants and operators talking to a running broker: submit, jobs, queues, tenants, tokens."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Optional

import typer

from broker.cli.client import ApiClient
from broker.cli.output import (Output, OutputOption, ServerOption, TokenOption, calling, client, cut, emit, key_values,
                               read_file, usage_error)

jobs_app = typer.Typer(no_args_is_help=True, help="Follow and cancel jobs.")
queues_app = typer.Typer(no_args_is_help=True, help="Queues: weights, quotas, borrowing, preemption.")
tenants_app = typer.Typer(no_args_is_help=True, help="Tenants and the namespaces they own.")
tokens_app = typer.Typer(no_args_is_help=True, help="API tokens (minted directly in the broker's database).")

JOB_COLUMNS = [("ID", lambda j: j["id"]), ("NAME", lambda j: f"{j['namespace']}/{j['name']}"),
               ("TENANT", lambda j: j["tenant"]), ("QUEUE", lambda j: j["queue"]), ("STATE", lambda j: j["state"]),
               ("PRIORITY", lambda j: j["priority_class"]), ("CLUSTERS", lambda j: ",".join(j["clusters"])),
               ("ESTIMATED START", lambda j: estimated_start(j)), ("REASON", cut(lambda j: j["reason"] or "", 60))]
def estimated_start(job: dict) -> str:
    """squeue --start's column: a waiting job's expected start (UTC, to the minute), "never", or "> T"."""
    if job.get("expected_start"):
        return job["expected_start"][:16].replace("T", " ") + "Z"
    expected = job.get("expected") or ""
    if expected.startswith("never"):
        return "never"
    if expected.startswith("not before "):
        return "> " + expected.removeprefix("not before ")[:16].replace("T", " ") + "Z"
    return ""


QUEUE_COLUMNS = [("NAME", lambda q: q["name"]), ("TENANT", lambda q: q["tenant"]), ("WEIGHT", lambda q: q["weight"]),
                 ("PRIORITY", lambda q: q["priority"]),
                 ("QUOTA", lambda q: ", ".join(f"{k}={v}" for k, v in q["nominal_quota"].items())),
                 ("USAGE", lambda q: ", ".join(f"{k}={v}" for k, v in q["usage"].items())),
                 ("PENDING", lambda q: q["pending"]), ("RUNNING", lambda q: q["running"]),
                 ("FAIR SHARE", lambda q: f"{q['fair_share']:.0%}"), ("SHARE", lambda q: f"{q['dominant_share']:.0%}")]
PLACEMENT_COLUMNS = [("PART", lambda p: p["part"] or "(whole)"), ("CLUSTER", lambda p: p["cluster"]),
                     ("HYPERNODE", lambda p: p["hypernode"] or "(several)"), ("TIER", lambda p: p["tier"]),
                     ("OVERRIDES", lambda p: ",".join(p["overrides"]))]
FINISHED = ("Succeeded", "Failed", "Cancelled")
EVENT_COLUMNS = [("TIME", lambda e: e["time"][:19]), ("TYPE", lambda e: e["type"]), ("REASON", lambda e: e["reason"]),
                 ("MESSAGE", lambda e: e["message"])]


def submit(files: list[Path] = typer.Argument(..., help="JobSet YAML or JSON files"),
           queue: Optional[str] = typer.Option(None, help="queue for all of them (else their label, else the "
                                                          "tenant's default queue)"),
           tenant: Optional[str] = typer.Option(None, help="the tenant to submit for (admin tokens only)"),
           dry_run: bool = typer.Option(False, "--dry-run", help="say where each would go now; submit nothing"),
           output: Output = OutputOption, server: Optional[str] = ServerOption,
           token: Optional[str] = TokenOption) -> None:
    """Submit JobSets (or ask where they would go with --dry-run)."""
    api = client(server, token)
    params = {k: v for k, v in {"queue": queue, "tenant": tenant}.items() if v}
    for path in files:
        content = read_file(path)
        content_type = "application/json" if path.suffix == ".json" else "application/yaml"
        headers = {"Content-Type": content_type}
        if dry_run:
            answer = calling(lambda: api.post("/api/v1/jobs:dry-run", content=content, headers=headers,
                                              params=params))
            if output is not Output.table:
                emit(answer, output)
            elif answer["fits"]:
                typer.echo(f"{path}: would run now")
                emit(answer["placements"], output, PLACEMENT_COLUMNS)
                for placement in answer["placements"]:
                    if placement["override_error"]:
                        typer.echo(f"  would fail on {placement['cluster']}: {placement['override_error']}")
                if any(p["overrides"] for p in answer["placements"]):
                    typer.echo("  (-o yaml shows the JobSet each member would receive)")
                for victim in answer["preemptions"]:  # another tenant's job: no id, its priority and size in words
                    who = f"job {victim['job']}: " if victim["job"] else ""
                    typer.echo(f"  preempting on {victim['cluster']}: {who}{victim['reason']}")
            else:
                typer.echo(f"{path}: would wait: {answer['reason']}")
                for cluster, reason in sorted(answer["waiting_reasons"].items()):
                    typer.echo(f"  {cluster}: {reason}")
                echo_expected(answer)
            continue
        answer = calling(lambda: api.post("/api/v1/jobs", content=content, headers=headers, params=params))
        emit(answer["items"], output, JOB_COLUMNS)


def echo_expected(job: dict) -> None:
    """The forecast's line of a waiting job, or of a dry run's JobSet that would wait."""
    if job.get("expected"):
        typer.echo(f"expected start: {estimated_start(job)}: {job['expected']}" if job.get("expected_start")
                   else f"expected start: {job['expected']}")


@jobs_app.command("list")
def jobs_list(state: list[str] = typer.Option([], help="Queued, Admitted, Running, Succeeded, …"),
              queue: Optional[str] = None, tenant: Optional[str] = None, cluster: Optional[str] = None,
              selector: Optional[str] = typer.Option(None, "-l", "--selector", help="label selector"),
              limit: int = 50, output: Output = OutputOption, server: Optional[str] = ServerOption,
              token: Optional[str] = TokenOption) -> None:
    """List jobs, newest first."""
    params = {k: v for k, v in {"state": state, "queue": queue, "tenant": tenant, "cluster": cluster,
                                "selector": selector, "limit": limit}.items() if v}
    emit(calling(lambda: client(server, token).get("/api/v1/jobs", params=params))["items"], output, JOB_COLUMNS)


JobArgument = typer.Argument(..., metavar="JOB", help="the job's id, or its JobSet's NAMESPACE/NAME or NAME")


def job_id(api: ApiClient, ref: str) -> int:
    """The id of the job `ref` names: an id, or NAMESPACE/NAME or NAME (its live job, else its newest)."""
    if ref.isdigit():
        return int(ref)
    namespace, _, name = ref.rpartition("/")
    found = [j for j in calling(lambda: api.get("/api/v1/jobs", params={"name": name, "limit": 100}))["items"]
             if not namespace or j["namespace"] == namespace]
    if not found:
        usage_error(f"no job named {ref} (name a job by its id, NAMESPACE/NAME or NAME)")
    live = [j for j in found if j["state"] not in FINISHED]
    if len(live) > 1:
        named = ", ".join(f"{j['namespace']}/{j['name']}: {j['id']}" for j in live)
        usage_error(f"{ref} names {len(live)} live jobs ({named}): name one by NAMESPACE/NAME or id")
    return (live or found)[0]["id"]


@jobs_app.command("get")
def jobs_get(ref: str = JobArgument, output: Output = OutputOption, server: Optional[str] = ServerOption,
             token: Optional[str] = TokenOption) -> None:
    """A job: its placements, status, and why it waits, in full."""
    api = client(server, token)
    job = calling(lambda: api.get(f"/api/v1/jobs/{job_id(api, ref)}"))
    if output not in (Output.table, Output.wide):
        emit(job, output)
        return
    emit(job, output, JOB_COLUMNS[:-1])
    if job["position"]:
        typer.echo(f"position: {job['position']} in queue {job['queue']} (by priority, then submission)")
    if job["reason"]:
        typer.echo(f"reason: {job['reason']}")
    echo_expected(job)
    if job["placements"]:
        emit(job["placements"], output, [*PLACEMENT_COLUMNS, ("STATE", lambda p: p["state"]),
                                         ("GENERATION", lambda p: p["generation"])], title="placements")
    for cluster, reason in (job["waiting_reasons"] or {}).items():
        typer.echo(f"waits on {cluster}: {reason}")


@jobs_app.command("cancel")
def jobs_cancel(ref: str = JobArgument, output: Output = OutputOption, server: Optional[str] = ServerOption,
                token: Optional[str] = TokenOption) -> None:
    """Cancel a job: it is removed from every member."""
    api = client(server, token)
    emit(calling(lambda: api.delete(f"/api/v1/jobs/{job_id(api, ref)}")), output, JOB_COLUMNS)


@jobs_app.command("events")
def jobs_events(ref: str = JobArgument, output: Output = OutputOption, server: Optional[str] = ServerOption,
                token: Optional[str] = TokenOption) -> None:
    """A job's event timeline."""
    api = client(server, token)
    events = calling(lambda: api.get("/api/v1/events", params={"kind": "job", "object": str(job_id(api, ref))}))
    emit(events["items"], output, EVENT_COLUMNS)


RESOURCE_AMOUNT = "RESOURCE=AMOUNT (e.g. nvidia.com/gpu=64)"
QuotaOption = typer.Option([], "--quota", help="RESOURCE=AMOUNT, repeatable")
BorrowingOption = typer.Option([], "--borrowing-limit", help="RESOURCE=AMOUNT, repeatable")
PreemptionOption = typer.Option(None, "--preemption", help="within the queue: Never or LowerPriority")
ReclaimOption = typer.Option(None, "--reclaim", help="what the tenant's other queues borrowed, for a job within "
                                                     "the queue's nominal quota: Never, LowerPriority or Any")
DefaultQueueOption = typer.Option(None, "--default/--no-default", help="the tenant's queue for unlabelled JobSets")
RuntimeOption = typer.Option(None, "--default-runtime", help="how long its jobs are expected to run when nothing "
                                                              "else says (e.g. 2h): the forecast's last resort")


def _queue_fields(weight, priority, quota, borrow, preemption, reclaim, default, runtime) -> dict:
    fields = {"weight": weight, "priority": priority,
              "nominal_quota": key_values(quota, "--quota", RESOURCE_AMOUNT) or None,
              "borrowing_limit": key_values(borrow, "--borrowing-limit", RESOURCE_AMOUNT) or None,
              "preemption_policy": preemption, "reclaim_within_cohort": reclaim,
              "default": default, "default_runtime": runtime}
    return {k: v for k, v in fields.items() if v is not None}


@queues_app.command("list")
def queues_list(tenant: Optional[str] = None, output: Output = OutputOption, server: Optional[str] = ServerOption,
                token: Optional[str] = TokenOption) -> None:
    """Queues with usage, pending depth and fair share."""
    params = {"tenant": tenant} if tenant else {}
    emit(calling(lambda: client(server, token).get("/api/v1/queues", params=params)), output, QUEUE_COLUMNS)


@queues_app.command("create")
def queues_create(name: str, tenant: str = typer.Option(..., help="the tenant that owns it"),
                  weight: Optional[float] = None, priority: Optional[int] = None,
                  quota: list[str] = QuotaOption, borrowing_limit: list[str] = BorrowingOption,
                  preemption: Optional[str] = PreemptionOption, reclaim: Optional[str] = ReclaimOption,
                  default: Optional[bool] = DefaultQueueOption, default_runtime: Optional[str] = RuntimeOption,
                  output: Output = OutputOption, server: Optional[str] = ServerOption,
                  token: Optional[str] = TokenOption) -> None:
    """Create a queue."""
    body = {"name": name, "tenant": tenant, **_queue_fields(weight, priority, quota, borrowing_limit, preemption,
                                                             reclaim, default, default_runtime)}
    emit(calling(lambda: client(server, token).post("/api/v1/queues", json=body)), output, QUEUE_COLUMNS)


@queues_app.command("update")
def queues_update(name: str, weight: Optional[float] = None, priority: Optional[int] = None,
                  quota: list[str] = QuotaOption, borrowing_limit: list[str] = BorrowingOption,
                  preemption: Optional[str] = PreemptionOption, reclaim: Optional[str] = ReclaimOption,
                  default: Optional[bool] = DefaultQueueOption, default_runtime: Optional[str] = RuntimeOption,
                  output: Output = OutputOption, server: Optional[str] = ServerOption,
                  token: Optional[str] = TokenOption) -> None:
    """Change a queue's settings."""
    body = _queue_fields(weight, priority, quota, borrowing_limit, preemption, reclaim, default, default_runtime)
    emit(calling(lambda: client(server, token).patch(f"/api/v1/queues/{name}", json=body)), output, QUEUE_COLUMNS)


TENANT_COLUMNS = [("NAME", lambda t: t["name"]), ("NAMESPACES", lambda t: ",".join(t["namespaces"])),
                  ("WEIGHT", lambda t: f"{t['weight']:g}"), ("FAIR SHARE", lambda t: f"{t['fair_share']:.0%}"),
                  ("SHARE", lambda t: f"{t['dominant_share']:.0%}"), ("POD SECURITY", lambda t: t["pod_security"]),
                  ("QUEUES", lambda t: ",".join(t["queues"]))]


@tenants_app.command("list")
def tenants_list(output: Output = OutputOption, server: Optional[str] = ServerOption,
                 token: Optional[str] = TokenOption) -> None:
    """Tenants."""
    emit(calling(lambda: client(server, token).get("/api/v1/tenants")), output, TENANT_COLUMNS)


TENANT_WEIGHT_HELP = "its share of the federation relative to the other tenants' (its queues share its part)"
FAIR_SHARE_HELP = ("LessThanOrEqualToFinalShare: its jobs may preempt other tenants' work while it ends within its "
                   "fair share and they end at or above theirs; Never (the default) to stop")
POD_SECURITY_HELP = ("the Pod Security Standard its pods are held to: privileged, baseline (the default) or "
                     "restricted; only privileged may use host namespaces, hostPath volumes and control-plane nodes")
ADOPT_HELP = ("one of its namespaces the broker may use on a member although it did not create it there; "
              "repeatable")


@tenants_app.command("create")
def tenants_create(name: str, namespace: list[str] = typer.Option([], help="repeatable; default: NAME"),
                   weight: float = typer.Option(1.0, help=TENANT_WEIGHT_HELP),
                   fair_share_preemption: str = typer.Option("Never", help=FAIR_SHARE_HELP),
                   pod_security: str = typer.Option("baseline", help=POD_SECURITY_HELP),
                   adopt: list[str] = typer.Option([], help=ADOPT_HELP),
                   output: Output = OutputOption, server: Optional[str] = ServerOption,
                   token: Optional[str] = TokenOption) -> None:
    """Create a tenant owning namespaces."""
    body = {"name": name, "weight": weight, "fair_share_preemption": fair_share_preemption,
            "pod_security": pod_security, "adoptable_namespaces": adopt,
            **({"namespaces": namespace} if namespace else {})}
    emit(calling(lambda: client(server, token).post("/api/v1/tenants", json=body)), output, TENANT_COLUMNS)


@tenants_app.command("update")
def tenants_update(name: str, namespace: list[str] = typer.Option([], help="the full list, repeatable"),
                   weight: Optional[float] = typer.Option(None, help=TENANT_WEIGHT_HELP),
                   fair_share_preemption: Optional[str] = typer.Option(None, help=FAIR_SHARE_HELP),
                   pod_security: Optional[str] = typer.Option(None, help=POD_SECURITY_HELP),
                   adopt: list[str] = typer.Option([], help=ADOPT_HELP + " (the full list)"),
                   adopt_none: bool = typer.Option(False, "--adopt-none", help="adopt no namespace the broker did "
                                                                              "not create"),
                   output: Output = OutputOption, server: Optional[str] = ServerOption,
                   token: Optional[str] = TokenOption) -> None:
    """Set the namespaces a tenant owns, its weight, fair-share preemption, Pod Security level or adoptable
    namespaces."""
    fields = {"namespaces": namespace or None, "weight": weight, "fair_share_preemption": fair_share_preemption,
              "pod_security": pod_security, "adoptable_namespaces": [] if adopt_none else (adopt or None)}
    body = {key: value for key, value in fields.items() if value is not None}
    emit(calling(lambda: client(server, token).patch(f"/api/v1/tenants/{name}", json=body)), output, TENANT_COLUMNS)


@tenants_app.command("delete")
def tenants_delete(name: str, server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Delete a tenant that has no queues or jobs."""
    calling(lambda: client(server, token).delete(f"/api/v1/tenants/{name}"))
    typer.echo(f"tenant {name} deleted")


@tokens_app.command("create")
def tokens_create(tenant: Optional[str] = typer.Option(None, help="the tenant it speaks for"),
                  role: str = typer.Option("tenant", help="tenant or admin"),
                  description: Optional[str] = None,
                  expires_in_days: Optional[float] = typer.Option(None, help="default: never")) -> None:
    """Mint a token in the broker's database and print it (it is shown only once)."""
    from broker.cli.local import database_session
    from broker.store.tenancy import create_token

    with database_session() as session:
        _, secret = create_token(session, role, tenant, description,
                                 timedelta(days=expires_in_days) if expires_in_days else None)
    typer.echo(secret)


@tokens_app.command("revoke")
def tokens_revoke(token_id: int) -> None:
    """Revoke a token by id."""
    from broker.cli.local import database_session
    from broker.store.tenancy import revoke_token

    with database_session() as session:
        revoke_token(session, token_id)
    typer.echo(f"token {token_id} revoked")
