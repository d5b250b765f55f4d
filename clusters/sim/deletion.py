"""Deletion as kube-apiserver and its garbage collector do it: preconditions, propagation (orphan, background,
foreground with the `foregroundDeletion` finalizer held until the dependents are gone), finalizers, a running pod's
grace period, and a namespace's end."""

from __future__ import annotations

from clusters.sim.resources import NAMESPACES, PODS, Kind
from clusters.sim.store import ApiError

FOREGROUND = "foregroundDeletion"  # the finalizer a foreground deletion holds its object with


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind.key} "{name}" not found',
                    {"name": name, "group": kind.group, "kind": kind.plural})


class Deletion:
    """A part of `SimCluster`, whose `__init__` sets the state it reads."""

    def delete(self, kind: Kind, namespace: str, name: str, propagation: str | None = None,
               preconditions: dict | None = None, dry_run: bool = False) -> dict:
        if "delete" not in kind.verbs:
            raise ApiError(405, "MethodNotAllowed", f"delete is not supported on {kind.key}")
        obj = self.get(kind, namespace, name)
        pre = preconditions or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.key} "{name}": the '
                           "ResourceVersion in the precondition does not match the ResourceVersion in record")
        if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.key} "{name}": the UID in the '
                           "precondition does not match the UID in record")
        if propagation not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(400, "BadRequest", f"unsupported propagationPolicy {propagation!r}")
        if dry_run:
            return obj
        return self.delete_object(kind, namespace, name, propagation or "Background")

    def delete_object(self, kind: Kind, namespace: str, name: str, propagation: str) -> dict:
        """Delete with garbage collection of dependents; objects with finalizers only get a deletionTimestamp.

        A foreground deletion of an object that has dependents keeps it, with a deletionTimestamp and the
        `foregroundDeletion` finalizer, while the garbage collector deletes its dependents (foreground too); the
        collector removes it once they are gone (`collect_garbage`), as kube's does: a new object of the same name
        must wait for it. Dependents that go at once (pods without a grace period to wait out, `pod_termination`)
        leave it gone when the request returns: what the simulator does then never depends on how fast it ran."""
        obj = self.store.get(kind.key, namespace if kind.namespaced else "", name)
        if obj is None:
            raise not_found(kind, name)
        if propagation == "Foreground" and kind is not NAMESPACES and self.store.owned.get(obj["metadata"]["uid"]):
            meta = obj["metadata"]
            if FOREGROUND not in (meta.get("finalizers") or ()):
                obj = self.store.put(kind.key, {**obj, "metadata": {
                    **meta, "finalizers": [*(meta.get("finalizers") or ()), FOREGROUND],
                    "deletionTimestamp": meta.get("deletionTimestamp") or self.now(), "deletionGracePeriodSeconds": 0}})
            self._delete_dependents(obj, "Foreground")
            self.foreground.add((kind.key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"]))
            self.collect_garbage()  # dependents that went at once (no grace period to wait out) leave nothing to hold
            self.wake()
            return self.store.get(kind.key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"]) or obj
        if kind is PODS and self.pod_termination and obj.get("spec", {}).get("nodeName") and \
                obj.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            return self._terminate(obj)
        if kind is NAMESPACES or obj["metadata"].get("finalizers"):
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            meta = {**obj["metadata"], "deletionTimestamp": self.now(), "deletionGracePeriodSeconds": 0}
            marked = {**obj, "metadata": meta}
            if kind is NAMESPACES:
                marked["status"] = {**obj.get("status", {}), "phase": "Terminating"}
            return self.store.put(kind.key, marked)
        return self._remove(kind, obj, propagation)

    def _terminate(self, pod: dict) -> dict:
        """A running pod deleted: Terminating for its grace period (`pod_termination`), then its kubelet lets it go."""
        if pod["metadata"].get("deletionTimestamp"):
            return pod
        meta = {**pod["metadata"], "deletionTimestamp": self.now(),
                "deletionGracePeriodSeconds": int(self.pod_termination)}
        self.controller.terminating_pod(pod, self.clock.now() + self.pod_termination)
        return self.store.put(PODS.key, {**pod, "metadata": meta})

    def remove_terminated(self, pod: dict) -> None:
        """Its kubelet is done with a pod whose grace period ended: it goes."""
        self._remove(PODS, pod, "Background")

    def collect_garbage(self) -> None:
        """Finish the foreground deletions whose dependents are gone: the `foregroundDeletion` finalizer comes off,
        and an object left with no finalizer goes."""
        for key, namespace, name in sorted(self.foreground):
            obj = self.store.get(key, namespace, name)
            if obj is None:
                self.foreground.discard((key, namespace, name))
            elif not self.store.owned.get(obj["metadata"]["uid"]):
                self.foreground.discard((key, namespace, name))
                meta = obj["metadata"]
                finalizers = [f for f in meta.get("finalizers") or () if f != FOREGROUND]
                if finalizers:
                    self.store.put(key, {**obj, "metadata": {**meta, "finalizers": finalizers}})
                else:
                    self._remove(self.kinds[key], obj, "Background")

    def _delete_dependents(self, obj: dict, propagation: str) -> None:
        for child_key, ns, child in sorted(self.store.owned.get(obj["metadata"]["uid"], ())):
            if self.store.get(child_key, ns, child) is not None:
                self.delete_object(self.kinds[child_key], ns, child, propagation)

    def _remove(self, kind: Kind, obj: dict, propagation: str) -> dict:
        uid = obj["metadata"]["uid"]
        for child_key, ns, child in sorted(self.store.owned.get(uid, ())):
            child_kind = self.kinds[child_key]
            current = self.store.get(child_key, ns, child)
            if current is None:
                continue
            if propagation == "Orphan":
                refs = [r for r in current["metadata"].get("ownerReferences") or () if r.get("uid") != uid]
                meta = {**current["metadata"], "ownerReferences": refs}
                if not refs:
                    meta.pop("ownerReferences")
                self.store.put(child_key, {**current, "metadata": meta})
            else:
                self.delete_object(child_kind, ns, child, "Background")
        meta = obj["metadata"]
        return self.store.delete(kind.key, meta.get("namespace") or "", meta["name"]) or obj

    def purge_namespace(self, namespace: str) -> None:
        for kind in self.catalog.kinds:
            if kind.namespaced:
                for obj in list(self.store.items(kind.key)):
                    if obj["metadata"]["namespace"] == namespace and \
                            self.store.get(kind.key, namespace, obj["metadata"]["name"]) is not None:
                        self._remove(kind, obj, "Background")
        ns = self.store.get(NAMESPACES.key, "", namespace)
        if ns is not None:
            self.store.delete(NAMESPACES.key, "", namespace)
