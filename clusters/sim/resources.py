"""The kinds a simulated cluster serves, their discovery documents and their `kubectl get` columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

READ_VERBS = ["get", "list", "watch"]
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = True
    generation: bool = False  # whether metadata.generation is tracked
    columns: tuple[tuple[str, str, Callable[[dict], object] | None], ...] = field(default=(), compare=False)

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def resource(self) -> dict:
        """The APIResource entry of discovery."""
        entry = {"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                 "kind": self.kind, "verbs": list(self.verbs)}
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        return entry


AGE = ("Age", "string", None)  # computed from creationTimestamp against the simulated clock


def _get(obj: dict, *path: str, default=None):
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return default
        obj = obj[part]
    return obj


def _node_status(node: dict) -> str:
    ready = next((c for c in _get(node, "status", "conditions", default=()) if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    return text + (",SchedulingDisabled" if _get(node, "spec", "unschedulable") else "")


def _node_roles(node: dict) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in _get(node, "metadata", "labels", default={}) if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _pod_ready(pod: dict) -> str:
    statuses = _get(pod, "status", "containerStatuses", default=[])
    total = len(_get(pod, "spec", "containers", default=[]))
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _completed(js: dict) -> str:
    return next((c["status"] for c in _get(js, "status", "conditions", default=()) if c.get("type") == "Completed"), "")


def _job_status(job: dict) -> str:
    for cond in _get(job, "status", "conditions", default=()):
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed", "Suspended"):
            return cond["type"]
    return "Running"


NAMESPACES = Kind("", "v1", "Namespace", "namespaces", "namespace", False, short_names=("ns",),
                  columns=(("Status", "string", lambda o: _get(o, "status", "phase", default="")), AGE))
NODES = Kind("", "v1", "Node", "nodes", "node", False, short_names=("no",),
             columns=(("Status", "string", _node_status), ("Roles", "string", _node_roles), AGE,
                      ("Version", "string", lambda o: _get(o, "status", "nodeInfo", "kubeletVersion", default=""))))
PODS = Kind("", "v1", "Pod", "pods", "pod", True, short_names=("po",), categories=("all",),
            columns=(("Ready", "string", _pod_ready),
                     ("Status", "string", lambda o: _get(o, "status", "reason") or _get(o, "status", "phase", default="")),
                     AGE, ("Node", "string", lambda o: _get(o, "spec", "nodeName", default="<none>"))))
SERVICES = Kind("", "v1", "Service", "services", "service", True, short_names=("svc",), categories=("all",),
                columns=(("Type", "string", lambda o: _get(o, "spec", "type", default="ClusterIP")),
                         ("Cluster-IP", "string", lambda o: _get(o, "spec", "clusterIP", default="")), AGE))
JOBS = Kind("batch", "v1", "Job", "jobs", "job", True, categories=("all",), generation=True,
            columns=(("Status", "string", _job_status),
                     ("Completions", "string", lambda o: f"{_get(o, 'status', 'succeeded', default=0)}/"
                                                         f"{_get(o, 'spec', 'completions', default=1)}"), AGE))
JOBSETS = Kind("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "jobset", True, generation=True,
               columns=(("TerminalState", "string", lambda o: _get(o, "status", "terminalState", default="")),
                        ("Restarts", "string", lambda o: str(_get(o, "status", "restarts", default=0))),
                        ("Completed", "string", _completed),
                        ("Suspended", "string", lambda o: str(_get(o, "spec", "suspend", default="")).lower()), AGE))
HYPERNODES = Kind("topology.volcano.sh", "v1alpha1", "HyperNode", "hypernodes", "hypernode", False,
                  short_names=("hn",), generation=True,
                  columns=(("Tier", "string", lambda o: str(_get(o, "spec", "tier", default=""))),
                           ("TierName", "string", lambda o: _get(o, "spec", "tierName", default="")),
                           ("NodeCount", "integer", lambda o: _get(o, "status", "nodeCount", default=0)), AGE))
CRDS = Kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
            "customresourcedefinition", False, verbs=tuple(READ_VERBS), short_names=("crd", "crds"),
            generation=True, columns=(("Created At", "date", lambda o: o["metadata"].get("creationTimestamp", "")),))

SERVICEACCOUNTS = Kind("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", True, short_names=("sa",),
                       status_subresource=False, columns=(AGE,))
SECRETS = Kind("", "v1", "Secret", "secrets", "secret", True, status_subresource=False,
               columns=(("Type", "string", lambda o: o.get("type", "Opaque")),
                        ("Data", "integer", lambda o: len(o.get("data") or {})), AGE))
_RBAC = "rbac.authorization.k8s.io"
CLUSTERROLES = Kind(_RBAC, "v1", "ClusterRole", "clusterroles", "clusterrole", False, status_subresource=False,
                    columns=(AGE,))
CLUSTERROLEBINDINGS = Kind(_RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", False,
                           status_subresource=False,
                           columns=(("Role", "string", lambda o: f"{_get(o, 'roleRef', 'kind', default='')}/"
                                                                 f"{_get(o, 'roleRef', 'name', default='')}"), AGE))
ROLES = Kind(_RBAC, "v1", "Role", "roles", "role", True, status_subresource=False, columns=(AGE,))
ROLEBINDINGS = Kind(_RBAC, "v1", "RoleBinding", "rolebindings", "rolebinding", True, status_subresource=False,
                    columns=CLUSTERROLEBINDINGS.columns)
RBAC_KINDS = (SERVICEACCOUNTS, SECRETS, CLUSTERROLES, CLUSTERROLEBINDINGS, ROLES, ROLEBINDINGS)
# Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34): a member older than that serves none
RESOURCESLICES = Kind("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", "resourceslice", False,
                      status_subresource=False, generation=True,
                      columns=(("Node", "string", lambda o: _get(o, "spec", "nodeName", default="")),
                               ("Driver", "string", lambda o: _get(o, "spec", "driver", default="")),
                               ("Pool", "string", lambda o: _get(o, "spec", "pool", "name", default="")), AGE))
DEVICECLASSES = Kind("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", "deviceclass", False,
                     status_subresource=False, generation=True, columns=(AGE,))
RESOURCECLAIMS = Kind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", "resourceclaim", True,
                      columns=(AGE,))
RESOURCECLAIMTEMPLATES = Kind("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates",
                              "resourceclaimtemplate", True, status_subresource=False, columns=(AGE,))
DRA_KINDS = (RESOURCESLICES, DEVICECLASSES, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES)


def crd_object(kind: Kind, printer_columns: list[dict]) -> dict:
    """A CustomResourceDefinition saying `kind` is installed (schema left open: we validate ourselves)."""
    names = {"kind": kind.kind, "listKind": kind.kind + "List", "plural": kind.plural, "singular": kind.singular}
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.key},
        "spec": {"group": kind.group, "names": names,
                 "scope": "Namespaced" if kind.namespaced else "Cluster",
                 "versions": [{"name": kind.version, "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "additionalPrinterColumns": printer_columns,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
        "status": {"acceptedNames": names, "storedVersions": [kind.version],
                   "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                                   "message": "no conflicts found"},
                                  {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                                   "message": "the initial names have been accepted"}]},
    }


JOBSET_PRINTER_COLUMNS = [
    {"name": "TerminalState", "type": "string", "jsonPath": ".status.terminalState", "description": "Final state of JobSet"},
    {"name": "Restarts", "type": "string", "jsonPath": ".status.restarts", "description": "Number of restarts"},
    {"name": "Completed", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Completed")].status'},
    {"name": "Suspended", "type": "string", "jsonPath": ".spec.suspend", "description": "JobSet suspended"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
HYPERNODE_PRINTER_COLUMNS = [
    {"name": "Tier", "type": "string", "jsonPath": ".spec.tier"},
    {"name": "TierName", "type": "string", "jsonPath": ".spec.tierName"},
    {"name": "NodeCount", "type": "integer", "jsonPath": ".status.nodeCount"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


class Catalog:
    """Which kinds one cluster serves (JobSet and HyperNode are optional, as CRDs are; DRA as its version has it)."""

    def __init__(self, jobset: bool, hypernodes: bool, dra: bool = False) -> None:
        kinds = [NAMESPACES, NODES, PODS, SERVICES, JOBS, CRDS, *RBAC_KINDS, *(DRA_KINDS if dra else ())]
        if jobset:
            kinds.append(JOBSETS)
        if hypernodes:
            kinds.append(HYPERNODES)
        self.kinds = kinds
        self.by_path = {(k.group, k.version, k.plural): k for k in kinds}
        self.versions: dict[str, list[str]] = {}
        for k in kinds:
            if k.version not in self.versions.setdefault(k.group, []):
                self.versions[k.group].append(k.version)

    def lookup(self, group: str, version: str, plural: str) -> Kind | None:
        return self.by_path.get((group, version, plural))

    def api_versions(self) -> dict:
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}

    def _group(self, group: str) -> dict:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.versions[group]]
        return {"name": group, "versions": versions, "preferredVersion": versions[0]}

    def group_list(self) -> dict:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group(g) for g in self.versions if g]}

    def group(self, group: str) -> dict | None:
        if not group or group not in self.versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group(group)}

    def resource_list(self, group: str, version: str) -> dict | None:
        kinds = [k for k in self.kinds if k.group == group and k.version == version]
        if not kinds:
            return None
        resources = []
        for k in kinds:
            resources.append(k.resource())
            if k.status_subresource and k is not CRDS:
                resources.append({"name": f"{k.plural}/status", "singularName": "", "namespaced": k.namespaced,
                                  "kind": k.kind, "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
