"""A tenant's Pod Security level and the namespaces no tenant may be given, through the API, on both databases."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.api.conftest import make_tenant
from tests.api.jobsets import jobset, with_change

POD = "spec.replicatedJobs.0.template.spec.template.spec"
ROOT_ON_THE_NODE = {"hostPID": True, "hostNetwork": True,
                    "containers": [{"name": "train", "image": "busybox",
                                    "securityContext": {"privileged": True}, "volumeMounts": [
                                        {"name": "root", "mountPath": "/host"}]}],
                    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                    "tolerations": [{"operator": "Exists"}]}


def test_a_new_tenant_is_baseline_and_its_root_pods_are_refused_in_the_api_servers_words(admin, research):
    assert admin.get("/api/v1/tenants/research").json()["pod_security"] == "baseline"
    refused = research.post("/api/v1/jobs", json=with_change(jobset("root"), POD, ROOT_ON_THE_NODE))
    assert refused.status_code == 422
    problem = refused.json()
    assert problem["errors"][0]["field"] == "spec.replicatedJobs[0].template.spec.template.spec"
    assert problem["errors"][0]["message"] == (
        'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), hostPath volumes '
        '(volume "root"), privileged (container "train" must not set securityContext.privileged=true) (tenant '
        "research's Pod Security level is baseline; an admin may change it)")
    assert research.get("/api/v1/jobs").json()["items"] == []  # nothing stored
    dry = research.post("/api/v1/jobs:dry-run", json=with_change(jobset("root"), POD, ROOT_ON_THE_NODE))
    assert dry.status_code == 422 and "violates PodSecurity" in dry.text


def test_only_an_admin_changes_the_level_and_privileged_admits_what_baseline_refused(admin, research):
    assert research.patch("/api/v1/tenants/research", json={"pod_security": "privileged"}).status_code == 403
    assert admin.patch("/api/v1/tenants/research", json={"pod_security": "root"}).status_code == 422
    assert admin.patch("/api/v1/tenants/research", json={"pod_security": "privileged"}).json()[
        "pod_security"] == "privileged"
    assert research.post("/api/v1/jobs", json=with_change(jobset("root"), POD, ROOT_ON_THE_NODE)).status_code == 201


def test_restricted_refuses_a_plain_pod_and_admits_a_hardened_one(admin, research):
    admin.patch("/api/v1/tenants/research", json={"pod_security": "restricted"})
    plain = research.post("/api/v1/jobs", json=jobset("plain"))
    assert plain.status_code == 422
    assert plain.json()["errors"][0]["message"].startswith(
        'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "trainer" must set '
        "securityContext.allowPrivilegeEscalation=false)")
    hardened = with_change(jobset("hardened"), f"{POD}.securityContext",
                           {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}})
    hardened = with_change(hardened, f"{POD}.containers.0.securityContext",
                           {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})
    assert research.post("/api/v1/jobs", json=hardened).status_code == 201


def test_a_toleration_of_every_taint_is_refused_below_privileged(research):
    refused = research.post("/api/v1/jobs", json=with_change(jobset("everywhere"), f"{POD}.tolerations",
                                                            [{"operator": "Exists"}]))
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "spec.replicatedJobs[0].template.spec.template.spec.tolerations[0]"


@pytest.mark.parametrize("body", [{"name": "kube-system"}, {"name": "default"}, {"name": "openshift-infra"},
                                  {"name": "ops", "namespaces": ["archipelago-system"]},
                                  {"name": "ops", "namespaces": ["ops", "kube-public"]}])
def test_no_tenant_is_given_a_namespace_that_is_not_its_own_to_give(admin, body):
    refused = admin.post("/api/v1/tenants", json=body)
    assert refused.status_code == 422, refused.text
    assert "is reserved for the members' own use" in refused.text
    assert admin.get("/api/v1/tenants").json() == []


def test_an_admin_reserves_more_names_and_a_patch_is_held_to_them(settings, db, admin):
    settings.reserved_namespaces = ["monitoring"]
    with TestClient(create_app(settings, db, run_loops=False), headers=admin.headers) as reserved:
        assert reserved.post("/api/v1/tenants", json={"name": "monitoring"}).status_code == 422
        assert reserved.post("/api/v1/tenants", json={"name": "ops"}).status_code == 201
        patched = reserved.patch("/api/v1/tenants/ops", json={"namespaces": ["ops", "monitoring"]})
        assert patched.status_code == 422 and "namespaces[1]" in patched.text


def test_adoptable_namespaces_are_the_tenants_own(admin):
    make_tenant(admin, "ops")
    assert admin.patch("/api/v1/tenants/ops", json={"adoptable_namespaces": ["elsewhere"]}).status_code == 422
    assert admin.patch("/api/v1/tenants/ops", json={"adoptable_namespaces": ["ops"]}).json()[
        "adoptable_namespaces"] == ["ops"]
    assert admin.patch("/api/v1/tenants/ops", json={"namespaces": ["ops-2"]}).status_code == 422  # still adoptable
