"""The simulator's PodSecurity admission: a namespace's enforce label holds every pod created in it, through the API
and by the Job controller, as a real API server does."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .helpers import jobset

PRIVILEGED_POD = {"metadata": {"name": "root"},
                  "spec": {"hostPID": True, "containers": [{"name": "train", "image": "busybox",
                                                            "securityContext": {"privileged": True}}]}}


def _label(api, namespace: str, level: str) -> None:
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}}})


def test_a_pod_its_namespaces_level_forbids_is_refused_in_the_api_servers_words(api, namespace):
    core = client.CoreV1Api(api)
    _label(api, namespace, "baseline")
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, PRIVILEGED_POD)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == ('pods "root" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostPID=true), '
            'privileged (container "train" must not set securityContext.privileged=true)')
    assert core.list_namespaced_pod(namespace).items == []
    _label(api, namespace, "privileged")
    assert core.create_namespaced_pod(namespace, PRIVILEGED_POD).metadata.name == "root"


def test_a_namespace_without_the_label_admits_anything(api, namespace):
    assert client.CoreV1Api(api).create_namespaced_pod(namespace, PRIVILEGED_POD).metadata.name == "root"


def test_the_job_controller_makes_no_pod_the_level_forbids(sim, api, namespace):
    _label(api, namespace, "baseline")
    body = jobset("root", [("w", 1, 2)])
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
    client.CustomObjectsApi(api).create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace,
                                                                 "jobsets", body)
    sim.settle()
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
    assert len(jobs) == 1 and (jobs[0].status.active or 0) == 0  # the JobSet and its Job exist; no pod does
    assert client.CoreV1Api(api).list_namespaced_pod(namespace).items == []
