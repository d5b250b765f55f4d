"""Least privilege at registration: the kubeconfig's identity must hold every permission the broker uses on
the member (SelfSubjectAccessReviews against the simulator's RBAC), and deploy/member-rbac.yaml grants
exactly those."""

from __future__ import annotations

from pathlib import Path

import yaml
from sqlalchemy import func, select

from broker.store.db.models import Cluster, Event
from clusters import access
from clusters.access import Permission
from clusters.sim.testing import running_simulator

MEMBER_RBAC = Path(__file__).resolve().parents[2] / "deploy" / "member-rbac.yaml"


def _without(*taken: tuple[str, str]) -> list[dict]:
    """The broker's ClusterRole rules less some (verb, resource) pairs."""
    rules = []
    for rule in access.cluster_role_rules():
        verbs = [v for v in rule["verbs"] if (v, rule["resources"][0]) not in taken]
        if verbs:
            rules.append({**rule, "verbs": verbs})
    return rules


def _granted(rules: list[dict]) -> set[Permission]:
    return {Permission(verb, group, resource) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_member_rbac_yaml_grants_exactly_what_registration_requires():
    assert MEMBER_RBAC.read_text() == access.member_rbac_yaml()
    objects = {o["kind"]: o for o in yaml.safe_load_all(MEMBER_RBAC.read_text())}
    assert _granted(objects["ClusterRole"]["rules"]) == set(access.required(hypernodes=True, dra=True))
    assert all(o["metadata"]["name"].startswith("archipelago-") for o in objects.values())
    assert objects["ClusterRoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "archipelago-broker",
                                                          "namespace": "archipelago-system"}]


def test_registration_refuses_an_identity_without_patch_jobsets_and_names_what_is_missing(api, sim, db):
    kubeconfig = sim.service_account("crd", "narrow", _without(("patch", "jobsets"), ("watch", "pods")))
    answer = api.post("/api/v1/clusters", json={"name": "crd", "kubeconfig": kubeconfig})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["title"] == "Member forbids it"
    assert f"may not, cluster-wide on {sim.cluster_url('crd')}: watch pods; patch jobsets.jobset.x-k8s.io " \
           "(SelfSubjectAccessReview)" in problem["detail"]
    assert problem["missing"] == [{"verb": "watch", "group": "", "resource": "pods"},
                                  {"verb": "patch", "group": "jobset.x-k8s.io", "resource": "jobsets"}]
    with db.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Cluster)) == 0


def test_an_identity_with_the_broker_rules_registers_and_syncs(api, sim):
    kubeconfig = sim.service_account("crd", "broker", access.cluster_role_rules())
    answer = api.post("/api/v1/clusters", json={"name": "crd", "kubeconfig": kubeconfig})
    assert answer.status_code == 201, answer.text
    assert (answer.json()["state"], answer.json()["nodes"], answer.json()["hypernode_source"]) == ("Ready", 12, "crd")


def test_hypernode_permissions_matter_only_where_the_member_has_hypernodes(api, sim):
    rules = _without(("list", "hypernodes"), ("watch", "hypernodes"))
    refused = api.post("/api/v1/clusters", json={"name": "crd", "kubeconfig": sim.service_account("crd", "a", rules)})
    assert refused.status_code == 422
    assert "list hypernodes.topology.volcano.sh; watch hypernodes.topology.volcano.sh" in refused.json()["detail"]
    labels = api.post("/api/v1/clusters", json={"name": "labels",
                                                "kubeconfig": sim.service_account("labels", "a", rules)})
    assert labels.status_code == 201, labels.text


def test_a_member_without_access_reviews_registers_as_before_and_says_so(api, db):
    scenario = {"clusters": [{"name": "old", "nodes": 1, "access_reviews": False}]}
    with running_simulator(scenario) as old:
        answer = api.post("/api/v1/clusters", json={"name": "old", "kubeconfig": old.kubeconfig("old")})
        assert answer.status_code == 201, answer.text
    with db.sessions() as session:
        message = session.scalar(select(Event.message).where(Event.object_id == "old", Event.reason == "Registered"))
    assert message.endswith("permissions not checked: no SelfSubjectAccessReview API)")
