"""The device demands jobs make and the device-class quota mappings admins set, and what each node's devices hold of
them (`clusters.device_use`), kept in the node rows' `device_use` beside the node's own resources.

A demand is registered when a job first makes it (`register_shapes`, in the submission's transaction); the scheduler
counts every member with devices again before its next cycle (`count_new_shapes`), so that the job's first cycle
sees which nodes can take it — not the submission, which would wait on every member's count. A mapping changed counts
every member again at once (an admin's rare change). A member's sync counts its own nodes (`node_device_use`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from broker.store.db.models import (CounterSet, Device, DeviceClass, DeviceClassMapping, DeviceShape, Node,
                                    inventory_changed)
from broker.store.errors import Invalid, NotFound
from clusters.device_use import device_use
from clusters.rules.devices import DeviceInventory
from clusters.rules.dra import DeviceDemand, demand_from_record, demand_record
from clusters.rules.labels import is_qualified_name

_DEVICE_COLUMNS = ("driver", "pool", "device", "node", "attributes", "capacity", "consumes", "taints", "allocated_by",
                   "held_for")


def demand_shapes(session: Session) -> dict[str, DeviceDemand]:
    return {row.key: demand_from_record(row.demand) for row in session.execute(select(DeviceShape.key,
                                                                                       DeviceShape.demand))}


def class_mappings(session: Session) -> dict[str, list[str]]:
    return {row.resource: list(row.device_classes) for row in session.execute(select(DeviceClassMapping))
            .scalars()}


def device_descriptions(session: Session) -> dict[str, str]:
    """Each demand key's words ("2 × mig-3g.40gb and 1 × mig-1g.10gb"), for reasons and views."""
    return dict(session.execute(select(DeviceShape.key, DeviceShape.description)).all())


def node_device_use(session: Session, devices: DeviceInventory) -> dict[str, dict[str, Any]]:
    """What a member's devices hold of every registered demand and mapping, per node (a sync's)."""
    if not devices.devices:
        return {}
    shapes, mappings = demand_shapes(session), class_mappings(session)
    if not shapes and not mappings:  # no job has claimed devices yet: nothing to count
        return {}
    return device_use(devices.devices, devices.counter_sets, devices.classes, shapes, mappings)


def register_shapes(session: Session, demands: Iterable[DeviceDemand]) -> None:
    """Register the demands the inventory is to count (each pod demand, and a count per class it takes)."""
    wanted = {key: counted for d in demands for key, counted in d.counted().items()}
    if not wanted:
        return
    known = set(session.scalars(select(DeviceShape.key).where(DeviceShape.key.in_(list(wanted)))))
    new = [(key, d) for key, d in wanted.items() if key not in known]
    if not new:
        return
    for key, demand in new:  # a race with another submission of the same demand is harmless: the row is the same
        session.merge(DeviceShape(key=key, demand=demand_record(demand), description=demand.describe(),
                                  counted=False))
    session.flush()


def has_uncounted_shapes(session: Session) -> bool:
    return session.scalar(select(DeviceShape.key).where(DeviceShape.counted.is_(False)).limit(1)) is not None


def count_new_shapes(session: Session) -> None:
    """Count every member's devices again for the demands registered since the last count (the scheduler's)."""
    new = list(session.scalars(select(DeviceShape.key).where(DeviceShape.counted.is_(False)).with_for_update()))
    if new:
        recount_devices(session)
        session.execute(update(DeviceShape).where(DeviceShape.key.in_(new)).values(counted=True))


def recount_devices(session: Session, cluster_ids: Sequence[int] | None = None) -> None:
    """Count again, from the stored device rows, what each node's devices hold (clusters with devices only)."""
    shapes, mappings = demand_shapes(session), class_mappings(session)
    query = select(Device.cluster_id).distinct()
    if cluster_ids is not None:
        query = query.where(Device.cluster_id.in_(list(cluster_ids)))
    for cluster_id in sorted(session.scalars(query)):
        rows = {row.name: dict(zip(_DEVICE_COLUMNS, row[1:])) for row in session.execute(
            select(Device.name, *(getattr(Device, c) for c in _DEVICE_COLUMNS)).where(Device.cluster_id == cluster_id))}
        sets = {row.name: {"counters": row.counters} for row in session.execute(
            select(CounterSet.name, CounterSet.counters).where(CounterSet.cluster_id == cluster_id))}
        classes = {row.name: {"selectors": row.selectors} for row in session.execute(
            select(DeviceClass.name, DeviceClass.selectors).where(DeviceClass.cluster_id == cluster_id))}
        use = device_use(rows, sets, classes, shapes, mappings)
        changed = [{"id": row.id, "device_use": use.get(row.name, {})} for row in session.execute(
            select(Node.id, Node.name, Node.device_use).where(Node.cluster_id == cluster_id))
            if (row.device_use or {}) != use.get(row.name, {})]
        if changed:
            session.execute(update(Node), changed)
            session.execute(inventory_changed(cluster_id))


def set_mapping(session: Session, resource: str, device_classes: list[str]) -> dict[str, Any]:
    """Devices of these classes count as `resource` in quotas (Kueue's deviceClassMappings)."""
    if not is_qualified_name(resource) or "/" not in resource:
        raise Invalid("resource", f"{resource!r:.80} is not a resource name: use domain/name, e.g. nvidia.com/mig-1g")
    if resource in ("cpu", "memory", "pods") or not device_classes or \
            any(not isinstance(c, str) or not c for c in device_classes):
        raise Invalid("deviceClasses", "name one device class or more")
    taken = {row.resource: row.device_classes for row in session.scalars(select(DeviceClassMapping))
             if row.resource != resource}
    for other, classes in taken.items():
        both = set(classes) & set(device_classes)
        if both:
            raise Invalid("deviceClasses", f"{', '.join(sorted(both))} already count as {other}: a class counts as "
                                           "one resource")
    session.merge(DeviceClassMapping(resource=resource, device_classes=sorted(set(device_classes))))
    session.flush()
    recount_devices(session)
    return {"resource": resource, "deviceClasses": sorted(set(device_classes))}


def delete_mapping(session: Session, resource: str) -> None:
    if session.execute(delete(DeviceClassMapping).where(DeviceClassMapping.resource == resource)).rowcount == 0:
        raise NotFound(f"no device class mapping for {resource!r}")
    recount_devices(session)


def list_mappings(session: Session) -> list[dict[str, Any]]:
    return [{"resource": resource, "deviceClasses": classes} for resource, classes in sorted(
        class_mappings(session).items())]

