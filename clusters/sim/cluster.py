"""One simulated member cluster: its API semantics (admission, versions, deletion) and the handles
tests use to change it underneath the API (nodes, pods, faults)."""

from __future__ import annotations

import copy
import threading
import uuid
from typing import Any, Callable

from clusters.rules.labels import parse_selector
from clusters.rules.patches import merge_patch, strategic_merge_patch
from clusters.sim import patch as patches
from clusters.sim.clock import SimClock, rfc3339
from clusters.sim.controller import Controller
from clusters.sim.deletion import Deletion, not_found
from clusters.sim.objects import name_suffix
from clusters.sim.rbac import Rbac
from clusters.sim.resources import (CRDS, DEVICECLASSES, HYPERNODES, HYPERNODE_PRINTER_COLUMNS, JOBS, JOBSETS,
                                    JOBSET_PRINTER_COLUMNS, NAMESPACES, NODES, PODS, RESOURCESLICES, SERVICES, Catalog,
                                    Kind, crd_object)
from clusters.sim.scenario import ClusterSpec
from clusters.sim.store import ApiError, Filter, Store
from clusters.sim.validation import (DNS1035_LABEL, DNS1123_LABEL, Errors, check_name, default_job, default_jobset,
                                     qos_class, validate_hypernode, validate_jobset)
from clusters.sim.webhooks import check_jobset_features, check_pod_security

_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_CUSTOM = (JOBSETS, HYPERNODES)


class SimCluster(Deletion):
    def __init__(self, spec: ClusterSpec, clock: SimClock, wake: Callable[[], None] = lambda: None) -> None:
        self.name, self.labels, self.token = spec.name, spec.labels, spec.token
        self.version, self.default_duration = spec.version, spec.duration
        self.jobset_counts, self.controller_lag = spec.jobset_counts, spec.controller_lag
        self.pod_termination, self.jobset_refuses = spec.pod_termination, spec.jobset_refuses
        self.unpullable_images = spec.unpullable_images
        self.clock = clock
        self._wake = wake
        self.lock = threading.RLock()
        self.catalog = Catalog(jobset=spec.jobset, hypernodes=spec.hypernode_mode in ("crd", "empty"), dra=spec.dra)
        self.kinds = {k.key: k for k in self.catalog.kinds}
        self.store = Store(spec.watch_history)
        self.foreground: set[tuple[str, str, str]] = set()  # (kind key, namespace, name) deleted in the foreground
        self.rbac = Rbac(self, spec.token, spec.access_reviews)
        self.controller = Controller(self)
        self.pod_ip_seq = 0
        self.fault: str | None = None  # None, "unreachable", "slow", "failing"
        self.latency = 0.0
        self.fail_status = 503
        with self.lock:
            for ns in _SYSTEM_NAMESPACES:
                self.create_internal(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            if spec.jobset:
                self.create_internal(CRDS, crd_object(JOBSETS, JOBSET_PRINTER_COLUMNS))
            if spec.hypernode_mode in ("crd", "empty"):
                self.create_internal(CRDS, crd_object(HYPERNODES, HYPERNODE_PRINTER_COLUMNS))
            for node in spec.nodes:
                self.create_internal(NODES, node)
            for hypernode in spec.hypernodes:
                self.create_internal(HYPERNODES, hypernode)
            for device_class in spec.device_classes:
                self.create_internal(DEVICECLASSES, device_class)
            for resource_slice in spec.resource_slices:
                self.create_internal(RESOURCESLICES, resource_slice)

    def wake(self) -> None:
        self._wake()

    def now(self) -> str:
        return rfc3339(self.clock.now())

    def step(self) -> None:
        with self.lock:
            self.controller.step(self.clock.now())

    # writes that bypass the API (controllers, seeding, tests) -------------------------------------
    def create_internal(self, kind: Kind, obj: dict) -> dict:
        """A controller's create: admitted by Pod Security as the API would (ApiError 403 for a pod it forbids)."""
        if kind is PODS:
            check_pod_security(obj, self.store.get(NAMESPACES.key, "", obj["metadata"].get("namespace", "")))
        meta = dict(obj["metadata"])
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=self.now())
        if kind.generation:
            meta["generation"] = 1
        obj = self._defaults({**obj, "metadata": meta}, kind, None)
        return self.store.put(kind.key, obj)

    def write(self, kind: Kind, obj: dict, bump: bool = False) -> dict:
        """Store a new version of an existing object (a controller's update)."""
        if bump and kind.generation:
            obj = {**obj, "metadata": {**obj["metadata"], "generation": obj["metadata"].get("generation", 1) + 1}}
        return self.store.put(kind.key, obj)

    # API operations ------------------------------------------------------------------------------
    def get(self, kind: Kind, namespace: str, name: str) -> dict:
        obj = self.store.get(kind.key, namespace, name)
        if obj is None:
            raise not_found(kind, name)
        return obj

    def list(self, kind: Kind, namespace: str | None, labels: str | None, fields: str | None,
             limit: int = 0, token: str | None = None):
        return self.store.list(kind.key, Filter(namespace, labels, fields), limit, token)

    def _check_identity(self, kind: Kind, body: Any, namespace: str, name: str | None) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON or YAML object")
        api_version, body_kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != kind.api_version:
            raise ApiError(400, "BadRequest", f"the API version in the data ({api_version}) does not match the "
                           f"expected API version ({kind.api_version})")
        if body_kind and body_kind != kind.kind:
            raise ApiError(400, "BadRequest", f"the kind in the data ({body_kind}) does not match the expected "
                           f"kind ({kind.kind})")
        meta = body.get("metadata") or {}
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if kind.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                           "sent on the request")
        if name is not None and meta.get("name") and meta["name"] != name:
            raise ApiError(400, "BadRequest", f"the name of the object ({meta['name']}) does not match the name "
                           f"on the URL ({name})")
        meta = {**meta}
        if kind.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None:
            meta["name"] = name
        return {**body, "apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}

    def _check_namespace(self, kind: Kind, namespace: str) -> None:
        if not kind.namespaced:
            return
        ns = self.store.get(NAMESPACES.key, "", namespace)
        if ns is None:
            raise not_found(NAMESPACES, namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f'{kind.key} is forbidden: unable to create new content in namespace '
                           f'{namespace} because it is being terminated',
                           {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                                        "message": f"namespace {namespace} is being terminated"}]})

    def create(self, kind: Kind, namespace: str, body: Any, manager: str, dry_run: bool = False,
               managed: list | None = None) -> dict:
        if "create" not in kind.verbs:
            raise ApiError(405, "MethodNotAllowed", f"create is not supported on {kind.key}")
        obj = self._check_identity(kind, body, namespace, None)
        meta = obj["metadata"]
        if not meta.get("name"):
            if not meta.get("generateName"):
                errors = Errors()
                errors.add("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")
                errors.raise_if_any(kind, "")
            meta["name"] = meta["generateName"] + name_suffix()
        name = meta["name"]
        self._check_namespace(kind, namespace)
        existing = self.store.get(kind.key, namespace if kind.namespaced else "", name)
        if existing is not None:
            going = "object is being deleted: " if existing["metadata"].get("deletionTimestamp") else ""
            raise ApiError(409, "AlreadyExists", f'{going}{kind.key} "{name}" already exists',
                           {"name": name, "group": kind.group, "kind": kind.plural})
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(transient, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=self.now())
        if kind.generation:
            meta["generation"] = 1
        obj = self._admit(kind, obj, None)
        if kind is PODS:
            check_pod_security(obj, self.store.get(NAMESPACES.key, "", namespace))
        obj["metadata"]["managedFields"] = managed if managed is not None else \
            patches.record_update(None, obj, manager, self.now())
        if dry_run:
            return obj
        return self.store.put(kind.key, obj)

    def update(self, kind: Kind, namespace: str, name: str, body: Any, manager: str, subresource: str = "",
               dry_run: bool = False) -> dict:
        if "update" not in kind.verbs:
            raise ApiError(405, "MethodNotAllowed", f"update is not supported on {kind.key}")
        old = self.get(kind, namespace, name)
        new = self._check_identity(kind, body, namespace, name)
        wanted = new["metadata"].get("resourceVersion")
        if not wanted and kind in _CUSTOM:
            errors = Errors()
            errors.invalid("metadata.resourceVersion", 0, "must be specified for an update")
            errors.raise_if_any(kind, name)
        return self._replace(kind, old, new, manager, subresource, dry_run)

    def patch(self, kind: Kind, namespace: str, name: str, patch_type: str, body: Any, manager: str,
              force: bool = False, subresource: str = "", dry_run: bool = False) -> dict:
        if "patch" not in kind.verbs:
            raise ApiError(405, "MethodNotAllowed", f"patch is not supported on {kind.key}")
        old = self.store.get(kind.key, namespace if kind.namespaced else "", name)
        if patch_type == "apply":
            applied = self._check_identity(kind, body, namespace, name)
            if old is None:
                if subresource:
                    raise not_found(kind, name)
                merged = patches.server_side_apply(None, applied, manager, force, self.now())
                return self.create(kind, namespace, merged, manager, dry_run, merged["metadata"]["managedFields"])
            merged = patches.server_side_apply(old, applied, manager, force, self.now())
            return self._replace(kind, old, merged, manager, subresource, dry_run, merged["metadata"]["managedFields"])
        if old is None:
            raise not_found(kind, name)
        if patch_type == "json":
            new = patches.json_patch(old, body)
        elif patch_type == "strategic":
            if kind in _CUSTOM:
                raise ApiError(415, "UnsupportedMediaType", "strategic merge patch is not supported for custom "
                               "resources; use a JSON merge patch or server-side apply")
            new = strategic_merge_patch(old, body)
        else:
            new = merge_patch(old, body)
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patch does not yield an object")
        new = self._check_identity(kind, new, namespace, name)
        return self._replace(kind, old, new, manager, subresource, dry_run)

    def _replace(self, kind: Kind, old: dict, new: dict, manager: str, subresource: str, dry_run: bool,
                 managed: list | None = None) -> dict:
        old_meta, meta = old["metadata"], dict(new["metadata"])
        wanted = meta.get("resourceVersion")
        if wanted and wanted != old_meta["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.key} "{old_meta["name"]}": the '
                           "object has been modified; please apply your changes to the latest version and try again",
                           {"name": old_meta["name"], "group": kind.group, "kind": kind.plural})
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {meta['uid']}, "
                           f"UID in object meta: {old_meta['uid']}")
        if subresource == "status":
            new = {**old, "status": new.get("status")}
            if new["status"] is None:
                new.pop("status")
            meta = dict(old_meta)
        elif kind.status_subresource and kind is not NAMESPACES:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = old["status"]
        for fixed in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                      "namespace", "name"):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new = {**new, "metadata": meta}
        if subresource != "status":
            new = self._admit(kind, new, old)
            if kind.generation and _spec_of(new) != _spec_of(old):
                new["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        new["metadata"]["managedFields"] = managed if managed is not None else \
            patches.record_update(old, new, manager, self.now(), subresource)
        if not new["metadata"]["managedFields"]:
            new["metadata"].pop("managedFields")
        if new == old or dry_run:
            return old if new == old else new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.store.put(kind.key, new)
            return self._remove(kind, new, "Background")
        return self.store.put(kind.key, new)


    # admission -----------------------------------------------------------------------------------
    def _admit(self, kind: Kind, obj: dict, old: dict | None) -> dict:
        """Defaulting plus validation, like the admission chain and the CRD schemas."""
        if kind is JOBSETS:
            obj = default_jobset(obj)
            validate_jobset(kind, obj, old)
            check_jobset_features(obj, self.jobset_refuses)
            return obj
        if kind is HYPERNODES:
            validate_hypernode(kind, obj, old)
            return obj
        errors = Errors()
        pattern, limit = {NAMESPACES.key: (DNS1123_LABEL, 63), SERVICES.key: (DNS1035_LABEL, 63)}.get(
            kind.key, (None, 253))
        if pattern is not None:
            check_name(errors, obj["metadata"].get("name"), pattern, limit)
        else:
            check_name(errors, obj["metadata"].get("name"))
        if kind is PODS and not ((obj.get("spec") or {}).get("containers")):
            errors.required("spec.containers")
        if kind is JOBS and not (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers"):
            errors.required("spec.template.spec.containers")
        errors.raise_if_any(kind, obj["metadata"].get("name", ""))
        for key, value in (obj["metadata"].get("labels") or {}).items():
            try:
                parse_selector(f"{key}={value}")
            except ValueError as exc:
                errors.invalid("metadata.labels", f"{key}={value}", str(exc))
        errors.raise_if_any(kind, obj["metadata"].get("name", ""))
        return self._defaults(obj, kind, old)

    def _defaults(self, obj: dict, kind: Kind, old: dict | None) -> dict:
        if old is not None:
            return obj
        if kind is NAMESPACES:
            meta = obj["metadata"]
            labels = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
            return {**obj, "metadata": {**meta, "labels": labels}, "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"}}
        if kind is PODS:
            spec = {"restartPolicy": "Always", "schedulerName": "default-scheduler", "dnsPolicy": "ClusterFirst",
                    "terminationGracePeriodSeconds": 30, "serviceAccountName": "default", "priority": 0,
                    "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority", **obj.get("spec", {})}
            return {**obj, "spec": spec, "status": {"phase": "Pending", "qosClass": qos_class(spec)}}
        if kind is JOBS:
            return default_job(obj)
        if kind is SERVICES:
            spec = {"type": "ClusterIP", "sessionAffinity": "None", **obj.get("spec", {})}
            if not spec.get("clusterIP"):
                self.pod_ip_seq += 1
                spec["clusterIP"] = f"10.96.{(self.pod_ip_seq >> 8) % 256}.{self.pod_ip_seq % 256}"
                spec["clusterIPs"] = [spec["clusterIP"]]
            return {**obj, "spec": spec, "status": {"loadBalancer": {}}}
        return obj

    # handles for tests ---------------------------------------------------------------------------
    def node_names(self) -> list[str]:
        with self.lock:
            return sorted(n["metadata"]["name"] for n in self.store.items(NODES.key))

    def node(self, name: str) -> dict:
        with self.lock:
            return self.get(NODES, "", name)

    def _edit_node(self, name: str, edit: Callable[[dict], dict]) -> dict:
        with self.lock:
            node = self.get(NODES, "", name)
            return self.write(NODES, edit(copy.deepcopy(node)))

    def add_node(self, name: str, resources: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                 taints: list[dict] | None = None) -> dict:
        from clusters.sim.scenario import build_cluster

        template = build_cluster({"name": "x", "nodes": [{"name": name, "resources": resources, "taints": taints,
                                                           "labels": labels}],
                                  "hypernodes": "none", "version": self.version}).nodes[0]
        with self.lock:
            if self.store.get(NODES.key, "", name) is not None:
                raise ValueError(f"node {name} exists")
            return self.create_internal(NODES, template)

    def remove_node(self, name: str) -> None:
        """Delete a node; pods bound to it fail (NodeLost), as after a node loss."""
        with self.lock:
            self.delete_object(NODES, "", name, "Background")

    def cordon(self, name: str, unschedulable: bool = True) -> dict:
        def edit(node: dict) -> dict:
            node["spec"]["unschedulable"] = unschedulable
            if not unschedulable:
                node["spec"].pop("unschedulable")
            return node
        return self._edit_node(name, edit)

    def uncordon(self, name: str) -> dict:
        return self.cordon(name, False)

    def label_node(self, name: str, labels: dict[str, str | None]) -> dict:
        """Set labels; a None value removes the label."""
        def edit(node: dict) -> dict:
            current = node["metadata"].setdefault("labels", {})
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = str(value)
            return node
        return self._edit_node(name, edit)

    def taint_node(self, name: str, taints: list[dict]) -> dict:
        def edit(node: dict) -> dict:
            node["spec"]["taints"] = list(taints)
            if not taints:
                node["spec"].pop("taints")
            return node
        return self._edit_node(name, edit)

    def set_node_ready(self, name: str, ready: bool) -> dict:
        """Flip the Ready condition; a node going NotReady fails the pods on it."""
        def edit(node: dict) -> dict:
            node["status"]["conditions"] = [
                {**c, "status": "True" if ready else "Unknown", "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                 "lastTransitionTime": self.now()} if c["type"] == "Ready" else c
                for c in node["status"]["conditions"]]
            return node
        with self.lock:
            node = self._edit_node(name, edit)
            if not ready:
                self.controller._fail_pods_on(name, "NodeLost", f"node {name} is not ready")
            return node

    def pods(self, namespace: str | None = None, selector: str = "") -> list[dict]:
        with self.lock:
            return self.list(PODS, namespace, selector, None)[0]

    def finish_pods(self, namespace: str | None = None, selector: str = "", succeeded: bool = True) -> int:
        """End the matching running pods now, successfully or not; returns how many."""
        with self.lock:
            count = self.controller.finish_pods(self.list(PODS, namespace, selector, None)[0], succeeded)
            self.controller.step(self.clock.now())
            return count

    def jobset(self, namespace: str, name: str) -> dict:
        with self.lock:
            return self.get(JOBSETS, namespace, name)

    def usage(self) -> dict[str, dict[str, int]]:
        """Requested milli-units per node of the pods bound there and not finished."""
        with self.lock:
            return {name: dict(used) for name, used in self.controller.used.items() if any(used.values())}

    def compact(self) -> None:
        """Drop watch history: watches and continue tokens from before now get 410 Gone."""
        with self.lock:
            self.store.compact()


def _spec_of(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}
