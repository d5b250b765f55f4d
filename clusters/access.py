"""Least privilege on a member: the permissions the broker needs there, checked at registration with
SelfSubjectAccessReviews, and the RBAC objects that grant exactly those (`archipelago clusters join`
applies them with an admin credential that never leaves the CLI; deploy/member-rbac.yaml is their
rendering for people who apply them by hand, checked against `member_objects()` by a test).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

import yaml

from clusters.kubeconfig import LoadedKubeconfig
from clusters.member import DRA_GROUP, HYPERNODE_GROUP, JOBSET_GROUP, MemberClient, MemberError, Resource
from clusters.system import MANAGED_BY, SYSTEM_NAMESPACE
from clusters.topology_writeback import remove_ours

NAME = "archipelago-broker"
DEFAULT_NAMESPACE = SYSTEM_NAMESPACE
TOKEN_SECRET = f"{NAME}-token"
FIELD_MANAGER = "archipelago-join"
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
TOKEN_WAIT = 30.0

# What the broker does on a member, cluster-wide: the tenants' namespaces are the broker's to choose.
_NEEDED = (
    # dispatch: server-side apply of the tenant's namespace creates it; registration reads kube-system's uid
    ("", "namespaces", ("create", "get", "patch")),
    ("", "nodes", ("list", "watch")),  # the inventory
    ("", "pods", ("list", "watch")),  # the inventory; why a placement's pods are not ready
    (JOBSET_GROUP, "jobsets", ("create", "delete", "get", "list", "patch", "watch")),  # dispatch and status
    (HYPERNODE_GROUP, "hypernodes", ("list", "watch")),  # the topology, where the member has the CRD
    # its devices, where it serves Dynamic Resource Allocation (Kubernetes 1.34 and later)
    (DRA_GROUP, "resourceslices", ("list", "watch")),
    (DRA_GROUP, "deviceclasses", ("list", "watch")),
    (DRA_GROUP, "resourceclaims", ("list", "watch")),
    # dispatch: a job's claim templates, applied before its JobSet (clusters.claim_templates); they go with it (GC)
    (DRA_GROUP, "resourceclaimtemplates", ("create", "patch")),
)
# Only where a cluster has its discovered tree written back to it as HyperNodes (`topology_write_back`), in a
# ClusterRole of its own: the broker's grows only where a cluster opts in.
_WRITE_BACK = (
    (HYPERNODE_GROUP, "hypernodes", ("create", "delete", "patch")),
    (HYPERNODE_GROUP, "hypernodes/status", ("patch",)),
)
TOPOLOGY_NAME = f"{NAME}-topology"


@dataclass(frozen=True)
class Permission:
    verb: str
    group: str
    resource: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}.{self.group}" if self.group else f"{self.verb} {self.resource}"


def required(hypernodes: bool, dra: bool = False, write_back: bool = False) -> list[Permission]:
    """Every permission the broker uses on a member; HyperNodes and devices only where the member serves them,
    writing HyperNodes only where the cluster's tree is written back."""
    return [Permission(verb, group, resource) for group, resource, verbs in _NEEDED + (_WRITE_BACK if write_back else ())
            for verb in verbs if (hypernodes or group != HYPERNODE_GROUP) and (dra or group != DRA_GROUP)]


def missing(client: MemberClient, hypernodes: bool, dra: bool = False,
            write_back: bool = False) -> list[Permission] | None:
    """The required permissions the client's identity lacks, cluster-wide; None where the member has no
    SelfSubjectAccessReview API (nothing can be checked). Raises MemberError."""
    absent = []
    for permission in required(hypernodes, dra, write_back):
        allowed = client.may(permission.verb, permission.group, permission.resource)
        if allowed is None:
            return None
        if not allowed:
            absent.append(permission)
    return absent


def describe(permissions: list[Permission]) -> str:
    return "; ".join(str(p) for p in permissions)


# The objects that grant them ---------------------------------------------------------------------

def cluster_role_rules() -> list[dict]:
    return [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)} for group, resource, verbs in _NEEDED]


def member_objects(namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
    """Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding and the ServiceAccount's token Secret,
    in the order they are created."""
    meta = {"labels": dict(MANAGED_BY)}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, **meta}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": namespace, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NAME, **meta},
         "rules": cluster_role_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NAME, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "Secret", "type": SERVICE_ACCOUNT_TOKEN,
         "metadata": {"name": TOKEN_SECRET, "namespace": namespace, **meta,
                      "annotations": {"kubernetes.io/service-account.name": NAME}}},
    ]


def topology_objects(namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
    """The ClusterRole and binding that let the broker's identity write its HyperNodes: only for a cluster that opts
    in to topology write-back."""
    meta = {"labels": dict(MANAGED_BY)}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": TOPOLOGY_NAME, **meta},
         "rules": [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
                   for group, resource, verbs in _WRITE_BACK]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": TOPOLOGY_NAME, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TOPOLOGY_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
    ]


def member_topology_rbac_yaml(namespace: str = DEFAULT_NAMESPACE) -> str:
    header = ("# Only for a member whose HyperNode tree the broker writes back (a cluster registered with\n"
              "# topology_write_back; clusters/access.py renders this file, `archipelago clusters join\n"
              "# --topology-write-back` applies the same objects): beside deploy/member-rbac.yaml, it lets the broker's\n"
              "# identity create, change and delete the HyperNodes it makes, and set their status.\n")
    return header + yaml.safe_dump_all(topology_objects(namespace), sort_keys=False)


def member_rbac_yaml(namespace: str = DEFAULT_NAMESPACE) -> str:
    header = ("# What the broker needs on a member cluster, and nothing more (clusters/access.py renders this file;\n"
              "# `archipelago clusters join` applies the same objects). Apply it, read the token from the Secret\n"
              "# and register a kubeconfig holding that token: `archipelago clusters add`.\n")
    return header + yaml.safe_dump_all(member_objects(namespace), sort_keys=False)


AGENT = "archipelago-agent"
AGENT_IMAGE = "ghcr.io/example/archipelago:0.1.0"


def agent_objects(broker_url: str = "https://archipelago.example.com",
                  namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
    """A pull member's agent in its own cluster: the same permissions as the broker's identity on a push member
    (the agent does there what the broker would), bound to its ServiceAccount; its token in a Secret; one
    replica, replaced only after the old one stopped, so that two agents never sweep each other's applies."""
    meta = {"labels": dict(MANAGED_BY)}
    labels = {"app.kubernetes.io/name": AGENT}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, **meta}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT, "namespace": namespace, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": AGENT, **meta},
         "rules": cluster_role_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": AGENT, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT, "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": AGENT, "namespace": namespace, **meta},
         "stringData": {"token": "REPLACE: the token `archipelago clusters add NAME --mode pull` printed"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": AGENT, "namespace": namespace, **meta},
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": AGENT,
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                          "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{
                          "name": "agent", "image": AGENT_IMAGE,
                          "args": ["archipelago", "agent", "--broker", broker_url],
                          "env": [{"name": "ARCHIPELAGO_AGENT_TOKEN",
                                   "valueFrom": {"secretKeyRef": {"name": AGENT, "key": "token"}}}],
                          "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}},
                          "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                        "limits": {"memory": "512Mi"}},
                          "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],  # the client's CA file
                      "volumes": [{"name": "tmp", "emptyDir": {}}]}}}},
    ]


def agent_yaml() -> str:
    header = ("# A pull member's agent (clusters/access.py renders this file): it calls out to the broker, which\n"
              "# never calls this cluster. Put the token `archipelago clusters add NAME --mode pull` printed in the\n"
              "# Secret and the broker's URL in the Deployment's args, then apply it in the member.\n")
    return header + yaml.safe_dump_all(agent_objects(), sort_keys=False)


# Join and unjoin, with an admin credential, from the CLI ------------------------------------------

class JoinError(Exception):
    """One line for the user."""


def _resource(obj: dict) -> Resource:
    group, _, version = obj["apiVersion"].rpartition("/")
    return Resource(group, version, f"{obj['kind'].lower()}s", obj["kind"], "namespace" in obj["metadata"])


def _what(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta['namespace'] + '/' if 'namespace' in meta else ''}{meta['name']}"


def _refused(action: str, obj: dict, exc: MemberError) -> JoinError:
    if exc.reason == "Forbidden":
        return JoinError(f"the admin kubeconfig's identity may not {action} {_what(obj)}: {exc}")
    return JoinError(str(exc))


def join(client: MemberClient, namespace: str, token_wait: float = TOKEN_WAIT, *, write_back: bool = False) -> str:
    """Create (or bring up to date) the broker's objects on the member and wait for the token;
    returns the ServiceAccount's bearer token. `write_back`: the topology write-back role too. Idempotent."""
    for obj in member_objects(namespace) + (topology_objects(namespace) if write_back else []):
        try:
            client.apply(_resource(obj), obj, FIELD_MANAGER)
        except MemberError as exc:
            raise _refused("create", obj, exc) from None
    secret = member_objects(namespace)[-1]
    deadline = time.monotonic() + token_wait
    while True:
        token = (client.read(_resource(secret), TOKEN_SECRET, namespace).get("data") or {}).get("token")
        if token:
            return base64.b64decode(token).decode()
        if time.monotonic() > deadline:
            raise JoinError(f"{client.api_server} did not fill {_what(secret)} with a token within {token_wait:g} s: "
                            "is the token controller (kube-controller-manager) running?")
        time.sleep(0.2)


def unjoin(client: MemberClient, namespace: str) -> None:
    """Delete the broker's objects from the member (the namespace takes the ServiceAccount and its token), and the
    HyperNodes it wrote back there; those already gone are fine."""
    try:  # the HyperNodes it wrote back: nothing keeps them true now
        remove_ours(client)
    except MemberError as exc:
        raise JoinError(f"the HyperNodes the broker wrote on {client.api_server} could not be deleted: {exc}") from None
    objects = member_objects(namespace)
    for obj in [*reversed(topology_objects(namespace)), objects[3], objects[2], objects[0]]:
        try:
            client.delete(_resource(obj), obj["metadata"]["name"], obj["metadata"].get("namespace"))
        except MemberError as exc:
            if exc.reason != "NotFound":
                raise _refused("delete", obj, exc) from None


def token_kubeconfig(loaded: LoadedKubeconfig, cluster: str, token: str) -> str:
    """A kubeconfig for the broker's identity only: the admin kubeconfig's server and CA, the token."""
    configuration = loaded.configuration
    server: dict = {"server": loaded.server}
    if configuration.ca_cert_data:
        server["certificate-authority-data"] = base64.b64encode(configuration.ca_cert_data.encode()).decode()
    if getattr(configuration, "tls_server_name", None):
        server["tls-server-name"] = configuration.tls_server_name
    if not configuration.verify_ssl:
        server["insecure-skip-tls-verify"] = True
    if configuration.proxy:
        server["proxy-url"] = configuration.proxy
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": server}],
        "users": [{"name": NAME, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": NAME}}],
    }, sort_keys=False)
