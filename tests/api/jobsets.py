"""JobSet manifests for API tests, built the way tenants write them."""

from __future__ import annotations

import copy


def jobset(name: str = "train", *, queue: str | None = None, replicas: int = 2, gpus: int = 8,
           namespace: str | None = None, labels: dict | None = None, annotations: dict | None = None,
           priority_class: str | None = None) -> dict:
    metadata: dict = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if queue:
        metadata["labels"]["kueue.x-k8s.io/queue-name"] = queue
    if priority_class:
        metadata["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    if namespace:
        metadata["namespace"] = namespace
    container = {"name": "trainer", "image": "ghcr.io/example/trainer:1",
                 "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)},
                               "limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata,
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}}]},
    }



def with_change(manifest: dict, path: str, value) -> dict:
    """A copy with one field set; `path` is dotted, list indexes as numbers."""
    changed = copy.deepcopy(manifest)
    *parents, last = path.split(".")
    target = changed
    for key in parents:
        target = target[int(key)] if key.isdigit() else target.setdefault(key, {})
    if last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return changed
