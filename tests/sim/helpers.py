"""Helpers shared by the simulator tests."""

from __future__ import annotations

import time

import yaml
from kubernetes import client, config

SCENARIO = {
    "clusters": [
        {"name": "eu-west", "labels": {"region": "eu", "gpu": "h100"}, "nodes": 16,
         "node": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
         "topology": {"leaf": 4, "spine": 2}, "hypernodes": "crd",
         "pools": [{"name_prefix": "cpu", "nodes": 2, "node": {"cpu": "32", "memory": "128Gi"},
                    "node_labels": {"pool": "cpu"},
                    "taints": [{"key": "dedicated", "value": "cpu", "effect": "NoSchedule"}]}]},
        {"name": "us-east", "labels": {"region": "us"}, "nodes": 4, "hypernodes": "labels", "jobset": False},
    ],
}


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01):
    """Poll a condition with a bounded deadline; returns its first truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def api_client(sim, name: str) -> client.ApiClient:
    return config.new_client_from_config_dict(yaml.safe_load(sim.kubeconfig(name)))


def jobset(name: str, replicated: list[tuple[str, int, int]] | None = None, **spec) -> dict:
    """A JobSet with ReplicatedJobs given as (name, replicas, parallelism); 1 CPU per pod."""
    rjobs = []
    for rname, replicas, parallelism in replicated or [("workers", 2, 2)]:
        rjobs.append({"name": rname, "replicas": replicas, "template": {"spec": {
            "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}})
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": rjobs, **spec}}
