"""Registration: a member cluster's kubeconfig and the member itself checked (reachable, JobSet installed, every
permission the broker uses granted), then stored, its kubeconfig encrypted; pull members and their agents' tokens."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from broker.process.settings import Settings
from broker.store import events
from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.models import Cluster
from broker.store.errors import Conflict, Invalid, NotFound
from broker.store.inventory.recipes import check_choice
from broker.store.tenancy import check_name, hash_token
from clusters import access
from clusters.budget import RequestBudget
from clusters.kubeconfig import KubeconfigError, KubeconfigPolicy, server_identity
from clusters.member import MemberClient, MemberError, MemberFacts
from clusters.recipes import AUTO
from clusters.rules.labels import check_labels

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class RegistrationError(Exception):
    """The member cannot be registered; `status` and `title` are what the API answers."""

    def __init__(self, status: int, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.extra = status, title, detail, extra


def kubeconfig_policy(settings: Settings) -> KubeconfigPolicy:
    return KubeconfigPolicy(allow_exec=settings.allow_kubeconfig_exec, allow_files=settings.allow_kubeconfig_files,
                            allow_insecure_tls=settings.allow_insecure_tls,
                            allow_proxy=settings.allow_kubeconfig_proxy)


def connect(settings: Settings, kubeconfig: str, context: str | None = None) -> MemberClient:
    """A client for a member; KubeconfigError if the kubeconfig is unusable or refused."""
    return MemberClient.from_kubeconfig(kubeconfig, context, policy=kubeconfig_policy(settings),
                                        timeout=settings.member_timeout,
                                        budget=RequestBudget(settings.member_qps, settings.member_burst))


# A write that reads a cluster's row to change it locks it first (FOR NO KEY UPDATE: placements inserted meanwhile may
# still name it), or it could write back what it read over what another replica committed in between (a cordon).
FOR_CLUSTER_WRITE = {"key_share": True}


def cluster_to_change(session: Session, cluster_id: int) -> Cluster | None:
    """The cluster's row, locked for a write that changes it (`FOR_CLUSTER_WRITE`); None if it was removed."""
    return session.get(Cluster, cluster_id, with_for_update=FOR_CLUSTER_WRITE, populate_existing=True)


def get_cluster(session: Session, name: str, *, for_update: bool = False) -> Cluster:
    query = select(Cluster).where(Cluster.name == name)
    cluster = session.scalar(query.with_for_update(**FOR_CLUSTER_WRITE) if for_update else query,
                             execution_options={"populate_existing": True} if for_update else {})
    if cluster is None:
        raise NotFound(f"cluster {name!r} is not registered")
    return cluster


def check_cluster_labels(labels: Mapping[str, Any], path: str = "labels") -> dict[str, str]:
    try:
        check_labels(labels)
    except ValueError as exc:
        raise Invalid(path, str(exc)) from None
    return dict(labels)


def check_cluster_taints(taints: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    checked = []
    for i, taint in enumerate(taints):
        key, value, effect = taint.get("key"), taint.get("value") or "", taint.get("effect")
        if effect not in TAINT_EFFECTS:
            raise Invalid(f"taints[{i}].effect", f"must be one of {', '.join(TAINT_EFFECTS)}")
        check_cluster_labels({key: value} if isinstance(key, str) else {"": ""}, f"taints[{i}]")
        checked.append({"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect})
    return checked


# Registration ------------------------------------------------------------------------------------

_MEMBER_PROBLEMS = {"Unreachable": (502, "Member unreachable"), "Timeout": (504, "Member timed out"),
                    "TLS": (502, "Member TLS failure"), "Unauthorized": (422, "Member rejected the credentials"),
                    "Forbidden": (422, "Member forbids it")}


def inspect_member(client: MemberClient, write_back: bool = False) -> tuple[MemberFacts, bool, str | None]:
    """What registration requires of a member: its facts, whether the broker's permissions could be checked
    (False: the member has no SelfSubjectAccessReview API) and its uid. RegistrationError saying what is missing.
    `write_back`: its tree is to be written back to it as HyperNodes (it must serve them, and let the broker)."""
    try:
        facts = client.facts()
        if not facts.jobset_crd:
            raise RegistrationError(422, "JobSet not installed",
                                    f"{client.api_server} does not serve jobsets.jobset.x-k8s.io/v1alpha2; install "
                                    "JobSet (https://jobset.sigs.k8s.io) on the member first")
        if write_back and not facts.hypernode_crd:
            raise RegistrationError(422, "HyperNodes not installed",
                                    f"{client.api_server} does not serve hypernodes.topology.volcano.sh/v1alpha1, so "
                                    "its tree cannot be written back to it; install Volcano's HyperNode CRD, or "
                                    "leave topology_write_back off")
        absent = access.missing(client, hypernodes=facts.hypernode_crd, dra=facts.dra, write_back=write_back)
        uid = client.cluster_uid() if not absent else None
    except MemberError as exc:
        status, title = _MEMBER_PROBLEMS.get(exc.reason, (502, "Member error"))
        raise RegistrationError(status, title, str(exc)) from None
    if absent:
        raise RegistrationError(422, "Member forbids it",
                                f"the kubeconfig's identity may not, cluster-wide on {client.api_server}: "
                                f"{access.describe(absent)} (SelfSubjectAccessReview); grant it the ClusterRole of "
                                "deploy/member-rbac.yaml (and, to write its tree back, deploy/member-topology-rbac"
                                ".yaml), or let `archipelago clusters join` make the identity",
                                missing=[{"verb": p.verb, "group": p.group, "resource": p.resource} for p in absent])
    return facts, absent is not None, uid


def register_cluster(session: Session, settings: Settings, *, name: str, kubeconfig: str,
                     context: str | None = None, labels: Mapping[str, str] | None = None) -> tuple[Cluster, MemberClient]:
    """Check the kubeconfig and the member, then store the cluster (Pending until its first sync), in one session.

    Nothing is stored unless every check passes. Returns the new row and the connected client,
    which the caller owns (the first sync uses it).
    """
    return store_registration(session, check_registration(session, settings, name=name, kubeconfig=kubeconfig,
                                                           context=context, labels=labels))


@dataclass
class Registration:
    """A member that passed registration's checks, ready to store: the client is the caller's to close."""

    cluster: Cluster
    client: MemberClient
    facts: MemberFacts
    checked: bool


def check_registration(session: Session, settings: Settings, *, name: str, kubeconfig: str,
                       context: str | None = None, labels: Mapping[str, str] | None = None,
                       topology_recipe: str = AUTO, topology_write_back: bool = False) -> Registration:
    """Registration's checks: reads only, and the member's answers (in a read session: no write lock is held
    while the member is asked). A cluster registered meanwhile is refused by `store_registration`."""
    check_name(name)
    labels = check_cluster_labels(labels or {})
    check_choice(session, topology_recipe)
    if session.scalar(select(Cluster.id).where(Cluster.name == name)) is not None:
        raise Conflict(f"a cluster named {name!r} is already registered")
    try:
        client = connect(settings, kubeconfig, context)
    except KubeconfigError as exc:
        raise Invalid("kubeconfig", str(exc)) from None
    identity = server_identity(client.api_server)
    twin = next((other for other, server in session.execute(select(Cluster.name, Cluster.api_server)
                                                            .where(Cluster.mode == "push"))
                 if server_identity(server) == identity), None)
    if twin is not None:
        client.close()
        raise Conflict(f"{client.api_server} is already registered as cluster {twin!r}; one member under two "
                       "names would get two brokers' worth of work")
    try:
        facts, checked, uid = inspect_member(client, topology_write_back)
        twin = session.scalar(select(Cluster.name).where(Cluster.uid == uid)) if uid else None
        if twin is not None:
            raise Conflict(f"{client.api_server} is cluster {twin!r} (the same kube-system namespace uid {uid}), "
                           "already registered under another address; one member under two names would get two "
                           "brokers' worth of work")
    except BaseException:
        client.close()
        raise
    cluster = Cluster(name=name, api_server=client.api_server, context=client.context, labels=labels, taints=[],
                      kubeconfig_encrypted=KubeconfigCipher(settings.fernet_key()).encrypt(kubeconfig),
                      state="Pending", kubernetes_version=facts.version, jobset_crd=facts.jobset_crd,
                      hypernode_source="crd" if facts.hypernode_crd else None, warnings=[], uid=uid,
                      topology_recipe=topology_recipe, topology_write_back=topology_write_back)
    return Registration(cluster, client, facts, checked)


def store_registration(session: Session, registration: Registration) -> tuple[Cluster, MemberClient]:
    """Store a checked member, with its event (closes the client if it cannot be stored)."""
    cluster, client, facts = registration.cluster, registration.client, registration.facts
    try:
        session.add(cluster)
        session.flush()
    except IntegrityError:
        client.close()
        raise Conflict(f"a cluster named {cluster.name!r}, or this member under another name, was registered at the "
                       "same moment") from None
    except BaseException:
        client.close()
        raise
    events.record(session, "cluster", cluster.name, "Registered",
                  f"registered {client.api_server} (Kubernetes {facts.version}, JobSet CRD present"
                  f"{', HyperNode CRD present' if facts.hypernode_crd else ''}"
                  f"{'' if registration.checked else '; permissions not checked: no SelfSubjectAccessReview API'})")
    return cluster, client


def register_pull_cluster(session: Session, *, name: str, labels: Mapping[str, str] | None = None,
                          topology_recipe: str = AUTO) -> tuple[Cluster, str]:
    """Store a member whose agent will call in (Pending until its agent reports), and mint the agent's token:
    returned once, kept only hashed. The broker never calls a pull member, so there is nothing to check there."""
    check_name(name)
    labels = check_cluster_labels(labels or {})
    check_choice(session, topology_recipe)
    if session.scalar(select(Cluster.id).where(Cluster.name == name)) is not None:
        raise Conflict(f"a cluster named {name!r} is already registered")
    secret = f"apa_{secrets.token_urlsafe(32)}"
    cluster = Cluster(name=name, mode="pull", api_server="", kubeconfig_encrypted=b"", labels=labels, taints=[],
                      state="Pending", agent_token_hash=hash_token(secret), warnings=[],
                      topology_recipe=topology_recipe)
    session.add(cluster)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"a cluster named {name!r} was registered at the same moment") from None
    events.record(session, "cluster", name, "Registered", "registered in pull mode: waiting for its agent")
    return cluster, secret


def agent_cluster(session: Session, token: str) -> Cluster | None:
    """The pull member a bearer token is the agent of (None for any other token)."""
    return session.scalar(select(Cluster).where(Cluster.mode == "pull", Cluster.agent_token_hash == hash_token(token)))
