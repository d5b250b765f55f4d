"""The simulated kube-scheduler's DRA plugin and the resourceclaim controller: a pod whose claims name
ResourceClaimTemplates binds only to a node whose devices satisfy every request at once (`clusters.rules.allocation`,
the allocator the broker's inventory counts with), and binding makes its ResourceClaims — owned by the pod, labelled
as the template says, allocated and reserved for it. A pod that ends gives its claims back (they are deleted, as the
resourceclaim controller does for claims it generated); a pod deleted takes them with it (garbage collection)."""

from __future__ import annotations

from typing import Any

from clusters.rules.devices import device_inventory
from clusters.rules.allocation import Device, NodeDevices, counters_of, device_of
from clusters.rules.dra import ClaimError, DeviceDemand, check_template, pod_demand
from clusters.sim.resources import DEVICECLASSES, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES, RESOURCESLICES

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def demand_of(store: Any, pod: dict) -> tuple[DeviceDemand | None, str]:
    """The pod's device demand from the templates in its namespace, or why it cannot be scheduled yet."""
    claims = pod["spec"].get("resourceClaims") or ()
    if not claims:
        return None, ""
    namespace, templates = pod["metadata"]["namespace"], {}
    for claim in claims:
        name = claim.get("resourceClaimTemplateName")
        if not name:
            return None, f'pod claim "{claim.get("name")}": only claims from templates are simulated'
        template = store.get(RESOURCECLAIMTEMPLATES.key, namespace, name)
        if template is None:
            return None, f'resourceclaimtemplate "{name}" not found'
        try:
            templates[name] = check_template(template, name)
        except ClaimError as exc:
            return None, f'resourceclaimtemplate "{name}": {exc}'
    try:
        return pod_demand(pod["spec"], templates, "spec"), ""
    except ClaimError as exc:
        return None, str(exc)


class DeviceIndex:
    """One scheduling pass's view of every node's devices and which are held (by claims of pods not done)."""

    def __init__(self, store: Any) -> None:
        slices = store.items(RESOURCESLICES.key)
        classes = store.items(DEVICECLASSES.key)
        inventory = device_inventory(slices, store.items(RESOURCECLAIMS.key), classes)
        counters = counters_of(inventory.counter_sets)
        selectors = {name: tuple(row["selectors"]) for name, row in inventory.classes.items()}
        by_node: dict[str, list[Device]] = {}
        held: dict[str, list[str]] = {}
        for row in inventory.devices.values():
            device = device_of(row)
            by_node.setdefault(row.get("node") or "", []).append(device)
            if row["allocated_by"]:
                held.setdefault(row.get("node") or "", []).append(device.id)
        self.nodes = {node: NodeDevices(devices, {s: c for s, c in counters.items()
                                                  if any(s == name for d in devices for name, _ in d.consumes)},
                                        selectors, held.get(node, ()))
                      for node, devices in by_node.items()}

    def allocate(self, node: str, demand: DeviceDemand) -> list[tuple[str, Device]] | None:
        devices = self.nodes.get(node)
        return None if devices is None else devices.allocate(demand)


def make_claims(cluster: Any, store: Any, pod: dict, allocation: list[tuple[str, Device]]) -> None:
    """The pod's ResourceClaims, allocated and reserved for it, as the resourceclaim controller and the scheduler
    leave them once the pod is bound."""
    meta = pod["metadata"]
    namespace = meta["namespace"]
    for claim in pod["spec"].get("resourceClaims") or ():
        template = store.get(RESOURCECLAIMTEMPLATES.key, namespace, claim["resourceClaimTemplateName"]) or {}
        template_meta = (template.get("spec") or {}).get("metadata") or {}
        prefix = f"{claim['name']}/"
        results = [{"request": request_id.partition("/")[2], "driver": device.driver,
                    "pool": device.id.split("/")[1], "device": device.id.rsplit("/", 1)[1]}
                   for request_id, device in allocation if request_id.startswith(prefix)]
        name = f"{meta['name']}-{claim['name']}"[:240] + "-" + meta["uid"][:5]
        cluster.create_internal(RESOURCECLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(template_meta.get("labels") or {}),
                         "annotations": {**(template_meta.get("annotations") or {}),
                                         POD_CLAIM_ANNOTATION: claim["name"]},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": (template.get("spec") or {}).get("spec") or {},
            "status": {"allocation": {"devices": {"results": results}},
                       "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]}})


def release_claims(cluster: Any, store: Any, pod: dict) -> None:
    """A pod that ended gives its generated claims back: they are deleted, their devices free."""
    uid = pod["metadata"]["uid"]
    for key, namespace, name in sorted(store.owned.get(uid, ())):
        if key == RESOURCECLAIMS.key and store.get(key, namespace, name) is not None:
            cluster.delete_object(RESOURCECLAIMS, namespace, name, "Background")
