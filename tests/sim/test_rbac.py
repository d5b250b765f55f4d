"""RBAC on the simulator, through the official client: a ServiceAccount's token, filled in by the token
controller, is allowed what its bindings grant and nothing else (403 worded as kube-apiserver words it);
SelfSubjectAccessReviews answer from the same rules; the admin token keeps full access."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .helpers import jobset

READ_NODES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
              {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "patch"]}]


@contextlib.contextmanager
def _service_account(sim, rules: list[dict], *, role_binding_namespace: str | None = None):
    """A ServiceAccount of eu-west allowed `rules`: yields its client, its name and its kubeconfig."""
    account = f"sa-{uuid.uuid4().hex[:6]}"
    kubeconfig = sim.service_account("eu-west", account, rules, role_binding_namespace=role_binding_namespace)
    with config.new_client_from_config_dict(yaml.safe_load(kubeconfig)) as theirs:
        yield theirs, account, kubeconfig


def _forbidden(call) -> dict:
    with pytest.raises(ApiException) as raised:
        call()
    assert raised.value.status == 403
    return json.loads(raised.value.body)


def test_a_service_account_may_do_what_its_cluster_role_grants_and_nothing_more(sim, api, namespace):
    with _service_account(sim, READ_NODES) as (theirs, account, _):
        core = client.CoreV1Api(theirs)
        assert len(core.list_node().items) == 18
        assert core.read_node(core.list_node().items[0].metadata.name).metadata.name
        user = f"system:serviceaccount:{account}:{account}"
        status = _forbidden(lambda: core.list_pod_for_all_namespaces())
        assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" '
                                     "at the cluster scope",
                          "reason": "Forbidden", "details": {"group": "", "kind": "pods"}, "code": 403}
        assert _forbidden(lambda: core.list_node(watch=True, _preload_content=False))["message"].endswith(
            'cannot watch resource "nodes" in API group "" at the cluster scope')
        client.CustomObjectsApi(api).create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace,
                                                                     "jobsets", jobset("mine"))
        custom = client.CustomObjectsApi(theirs)
        patched = custom.patch_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "mine",
                                                        {"metadata": {"labels": {"patched": "yes"}}})
        assert patched["metadata"]["labels"]["patched"] == "yes"
        assert _forbidden(lambda: custom.delete_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "mine"))["message"] == (
            f'jobsets.jobset.x-k8s.io "mine" is forbidden: User "{user}" cannot delete resource "jobsets" in API '
            f'group "jobset.x-k8s.io" in the namespace "{namespace}"')
        assert "cannot get resource \"jobsets/status\"" in _forbidden(lambda: custom.get_namespaced_custom_object_status(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "mine"))["message"]
        # an apply that would create the object needs create as well as patch
        assert "cannot create resource" in _forbidden(lambda: custom.patch_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "other", jobset("other"),
            field_manager="t", _content_type="application/apply-patch+yaml"))["message"]


def test_access_reviews_answer_from_the_same_rules(sim, api):
    def review(api_client, **attributes) -> bool:
        answer = client.AuthorizationV1Api(api_client).create_self_subject_access_review(
            {"spec": {"resourceAttributes": attributes}})
        return answer.status.allowed

    with _service_account(sim, READ_NODES) as (theirs, _, _):
        assert review(theirs, verb="list", resource="nodes")
        assert not review(theirs, verb="watch", resource="nodes")
        assert review(theirs, verb="patch", group="jobset.x-k8s.io", resource="jobsets", namespace="anywhere")
        assert not review(theirs, verb="create", group="jobset.x-k8s.io", resource="jobsets")
        assert not review(theirs, verb="get", group="jobset.x-k8s.io", resource="jobsets", subresource="status")
        assert review(api, verb="delete", resource="nodes")  # the admin


def test_a_role_binding_grants_in_its_namespace_only(sim, api, namespace):
    with _service_account(sim, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
                          role_binding_namespace=namespace) as (theirs, _, _):
        core = client.CoreV1Api(theirs)
        assert core.list_namespaced_pod(namespace).items == []
        assert 'in the namespace "default"' in _forbidden(lambda: core.list_namespaced_pod("default"))["message"]


def test_a_token_dies_with_its_service_account(sim, api):
    with _service_account(sim, READ_NODES) as (theirs, account, _):
        client.CoreV1Api(api).delete_namespaced_service_account(account, account)
        sim.settle()
        with pytest.raises(ApiException) as raised:
            client.CoreV1Api(theirs).list_node()
        assert raised.value.status == 401
        assert client.CoreV1Api(api).list_namespaced_secret(account).items == []  # the token controller deleted it


def test_kubectl_auth_can_i_asks_the_simulator(sim, api, tmp_path):
    kubectl = pytest.importorskip("shutil").which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    with _service_account(sim, READ_NODES) as (_, _, kubeconfig):
        path = tmp_path / "sa.kubeconfig"
        path.write_text(kubeconfig)
        asked = [subprocess.run([kubectl, "--kubeconfig", str(path), "auth", "can-i", verb, resource],
                                capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path)}).stdout.strip()
                 for verb, resource in [("list", "nodes"), ("watch", "nodes"), ("patch", "jobsets.jobset.x-k8s.io")]]
        assert asked == ["yes", "no", "yes"]
