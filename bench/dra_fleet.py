"""The placement benchmark's fleet described by DRA (bench/placement.py, its DRA row): each node's 8 GPUs published as
partitionable devices (MIG profiles 1g.10gb, 3g.40gb and 7g.80gb sharing each GPU's counters, as the simulator's
ResourceSlices have them), and each pod's GPUs asked through a ResourceClaimTemplate (n × mig-7g.80gb, a whole GPU)
instead of `nvidia.com/gpu: n`: the same fleet, the same jobs, counted the DRA way."""

from __future__ import annotations

import copy
import time
from typing import Any

from broker.engine.claims import claim_templates, with_device_demands
from broker.engine.jobset import JobSpec, parse_jobset
from clusters.device_use import device_use
from clusters.rules.devices import device_inventory
from clusters.sim.scenario import device_classes, resource_slice

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
WHOLE = f"mig-7g.80gb.{DRIVER}"
DEVICES = {"driver": DRIVER, "count": 8, "mig": ["1g.10gb", "3g.40gb", "7g.80gb"]}


def without_gpus(allocatable: dict[str, int]) -> dict[str, int]:
    return {r: q for r, q in allocatable.items() if r != GPU}


def cluster_devices(nodes: list[str]):
    """Every node's ResourceSlice, as the member's inventory reads them (`clusters.rules.devices`)."""
    slices = [resource_slice(node, DEVICES) for node in nodes]
    return device_inventory(slices, [], device_classes(slices[:1]))


def claimed(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The JobSet with each pod's GPUs asked through a claim template (n × mig-7g.80gb), and the templates."""
    body = copy.deepcopy(body)
    templates = {}
    for rjob in body["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        resources = pod["containers"][0]["resources"]
        gpus = int(resources["limits"].pop(GPU))
        name = f"gpus-{gpus}"
        templates[name] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                           "metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [
                               {"name": "gpu", "exactly": {"deviceClassName": WHOLE, "count": gpus}}]}}}}
        pod["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": name}]
        resources["claims"] = [{"name": "gpus"}]
    return body, list(templates.values())


def claimed_spec(body: dict[str, Any]) -> tuple[JobSpec, list]:
    """The JobSet's spec with its pods' device demands (as a submission makes it), and those demands."""
    manifest, templates = claimed(body)
    spec, demands, _ = with_device_demands(parse_jobset(manifest), manifest,
                                           {n: d for n, (_, d) in claim_templates(templates).items()}, {})
    return spec, demands


COUNTING = []  # seconds each member's count took (`fleet_use`), its slices' making left out


def fleet_use(nodes: list[str], shapes: dict) -> dict[str, dict[str, Any]]:
    """What each node's devices hold of every demand (the inventory's count: `clusters.device_use`)."""
    found = cluster_devices(nodes)
    started = time.perf_counter()
    use = device_use(found.devices, found.counter_sets, found.classes, shapes, {})
    COUNTING.append(time.perf_counter() - started)
    return use
