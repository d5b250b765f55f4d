"""Amounts and reasons in words a tenant understands ("16 GPUs", "64 CPUs", "200Gi of memory")."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache

from broker.engine.placement.model import GPU, Resources
from clusters.rules.dra import CLASS_PREFIX, DEMAND_PREFIX
from clusters.rules.quantity import format_quantity


@lru_cache(maxsize=4096)  # reasons quote the same few amounts for every cluster a job does not fit
def amount(resource: str, milli: int) -> str:
    if resource == GPU:
        count = milli / 1000
        return f"{count:g} GPU{'' if count == 1 else 's'}"
    if resource == "cpu":
        return f"{format_quantity(milli, 'cpu')} CPU{'' if milli == 1000 else 's'}"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return f"{format_quantity(milli, resource)} of {resource}"
    return f"{milli / 1000:g} {resource}"


@lru_cache(maxsize=1024)  # demands come in a few shapes: sort each once
def _gpus_first(resources: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(resources, key=lambda r: (r != GPU, r)))


def shortfall(demand: Resources, free: Resources) -> tuple[str, int, int] | None:
    """The first resource (GPUs first) the free amounts cannot cover: (resource, needed, free)."""
    for resource in _gpus_first(tuple(demand)):
        if free.get(resource, 0) < demand[resource]:
            return resource, demand[resource], max(0, free.get(resource, 0))
    return None


def pods_phrase(count: int, pod: Resources, scarce: str | None = None, devices: str | None = None) -> str:
    """"4 pods of 8 GPUs" — the shape a gang's pods need on one node: its GPUs, and the resource the nodes are
    short of (`scarce`) when that is another ("4 pods of 1 GPU and 40 CPUs"); with DRA claims, what each pod claims
    ("2 pods of 1 CPU claiming 2 × mig-3g.40gb and 1 × mig-1g.10gb")."""
    if scarce is not None and scarce.startswith((DEMAND_PREFIX, CLASS_PREFIX)):
        scarce = None  # its words are `devices`
    named = [resource for resource in (GPU, scarce) if resource in pod] or [r for r in ("cpu",) if r in pod]
    shape = " and ".join(amount(resource, pod[resource]) for resource in dict.fromkeys(named)) or "no requests"
    claiming = f" claiming {devices}" if devices else ""
    return f"{count} pod{'' if count == 1 else 's'} of {shape}{claiming}"


def moment(seconds: float) -> str:
    """"2026-12-07 14:20Z": a time on the snapshot's clock (seconds since the epoch), to the minute, in UTC."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%MZ")


def duration(seconds: float) -> str:
    """"15 min", "2 h", "90 s": the largest unit that divides it."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def another_tenants_job(priority: int, demand: Resources) -> str:
    """How a tenant is told of another tenant's job: "a job of another tenant (priority 1000, 16 GPUs)" — its priority
    and size, never its id, name, tenant or queue."""
    main = next((r for r in _gpus_first(tuple(demand)) if r in (GPU, "cpu")), None)
    size = f", {amount(main, demand[main])}" if main else ""
    return f"a job of another tenant (priority {priority}{size})"
