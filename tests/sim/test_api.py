"""The API surface, through the official kubernetes client over HTTPS."""

from __future__ import annotations

import json

import httpx
import pytest
import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from .helpers import api_client, jobset

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_discovery_and_crd(sim, api):
    assert client.VersionApi(api).get_code().git_version == "v1.31.4"
    dyn = DynamicClient(api)
    jobsets = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="JobSet")
    assert jobsets.namespaced and jobsets.name == "jobsets"
    hypernodes = dyn.resources.get(api_version="topology.volcano.sh/v1alpha1", kind="HyperNode")
    assert not hypernodes.namespaced and "hn" in hypernodes.short_names
    assert dyn.resources.get(api_version="batch/v1", kind="Job").namespaced
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("jobsets.jobset.x-k8s.io")
    assert crd.spec.group == GROUP and crd.spec.names.kind == "JobSet"
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)


def test_cluster_without_jobset_says_so(sim):
    with api_client(sim, "us-east") as api:
        with pytest.raises(ApiException) as err:
            client.ApiextensionsV1Api(api).read_custom_resource_definition("jobsets.jobset.x-k8s.io")
        assert err.value.status == 404
        groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
        assert GROUP not in groups and "batch" in groups
        assert "topology.volcano.sh" not in groups  # hypernodes: labels mode has no HyperNode API
        with pytest.raises(ApiException) as err:
            client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
        assert err.value.status == 404
        node = client.CoreV1Api(api).list_node().items[0]
        assert "network.archipelago.io/leaf" in node.metadata.labels


def test_bad_token_is_401(sim):
    kubeconfig = yaml.safe_load(sim.kubeconfig("eu-west"))
    kubeconfig["users"][0]["user"]["token"] = "wrong"
    with config.new_client_from_config_dict(kubeconfig) as api:
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(api).list_node()
    assert err.value.status == 401 and _status(err.value)["reason"] == "Unauthorized"


def test_namespace_crud_and_errors(api):
    core = client.CoreV1Api(api)
    created = core.create_namespace({"metadata": {"name": "crud-ns", "labels": {"team": "a"}}})
    assert created.status.phase == "Active" and created.metadata.uid
    with pytest.raises(ApiException) as err:
        core.create_namespace({"metadata": {"name": "crud-ns"}})
    assert err.value.status == 409 and _status(err.value)["reason"] == "AlreadyExists"
    patched = core.patch_namespace("crud-ns", {"metadata": {"labels": {"team": "b"}}})
    assert patched.metadata.labels["team"] == "b"
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    assert "crud-ns" in [n.metadata.name for n in core.list_namespace(label_selector="team=b").items]
    core.delete_namespace("crud-ns")
    with pytest.raises(ApiException) as err:
        core.read_namespace("nope")
    assert err.value.status == 404 and _status(err.value)["reason"] == "NotFound"
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, "missing-ns", PLURAL, jobset("x"))
    assert err.value.status == 404


def test_jobset_create_get_list_patch_delete(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    created = co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("train"))
    meta = created["metadata"]
    assert meta["uid"] and meta["generation"] == 1 and meta["creationTimestamp"]
    assert created["spec"]["successPolicy"] == {"operator": "All"}  # webhook defaulting
    got = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train")
    assert got["metadata"]["uid"] == meta["uid"]
    patched = co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train",
                                                {"metadata": {"labels": {"tier": "gold"}}})
    assert patched["metadata"]["labels"] == {"tier": "gold"}
    assert patched["metadata"]["generation"] == 1  # metadata is not spec
    listed = co.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, label_selector="tier in (gold,silver)")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["train"]
    assert co.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, label_selector="tier!=gold")["items"] == []
    sim.settle()
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    jobs = batch.list_namespaced_job(namespace).items
    assert sorted(j.metadata.name for j in jobs) == ["train-workers-0", "train-workers-1"]
    pods = core.list_namespaced_pod(namespace, label_selector="jobset.sigs.k8s.io/jobset-name=train").items
    assert len(pods) == 4
    labels = pods[0].metadata.labels
    for key in ("jobset.sigs.k8s.io/replicatedjob-name", "jobset.sigs.k8s.io/job-index", "jobset.sigs.k8s.io/job-key",
                "jobset.sigs.k8s.io/restart-attempt", "batch.kubernetes.io/job-name"):
        assert key in labels
    assert core.read_namespaced_service("train", namespace).spec.cluster_ip == "None"  # DNS hostnames default on
    co.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train", propagation_policy="Foreground")
    sim.settle()
    assert batch.list_namespaced_job(namespace).items == []
    assert core.list_namespaced_pod(namespace).items == []
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train")
    assert err.value.status == 404


def test_stale_resource_version_conflicts(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("stale", suspend=True))
    sim.settle()  # the controller writes status once; read after it
    first = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "stale")
    first["metadata"].setdefault("labels", {})["a"] = "1"
    updated = co.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "stale", first)
    assert updated["metadata"]["labels"]["a"] == "1"
    first["metadata"]["labels"]["a"] = "2"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "stale", first)
    assert err.value.status == 409 and _status(err.value)["reason"] == "Conflict"


def test_generation_moves_with_spec_only(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("gen", suspend=True))
    resumed = co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen", {"spec": {"suspend": False}})
    assert resumed["metadata"]["generation"] == 2
    sim.settle()
    after_status = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen")
    assert after_status["status"]["replicatedJobsStatus"] and after_status["metadata"]["generation"] == 2
    status_write = co.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "gen",
                                                            {"status": {"restarts": 7}})
    assert status_write["status"]["restarts"] == 7 and status_write["metadata"]["generation"] == 2
    ignored = co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gen", {"status": {"restarts": 9}})
    assert ignored["status"]["restarts"] == 7  # the main resource ignores status


@pytest.mark.parametrize("mutate, field", [
    (lambda js: js["spec"].pop("replicatedJobs"), "spec.replicatedJobs"),
    (lambda js: js["metadata"].update(name="Bad_Name"), "metadata.name"),
    (lambda js: js["spec"]["replicatedJobs"][0].update(replicas="two"), "spec.replicatedJobs[0].replicas"),
    (lambda js: js["spec"].update(successPolicy={"operator": "All", "targetReplicatedJobs": ["nope"]}),
     "spec.successPolicy.targetReplicatedJobs"),
])
def test_invalid_jobset_is_422_with_causes(api, namespace, mutate, field):
    body = jobset("bad")
    mutate(body)
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    status = _status(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert field in [c["field"] for c in status["details"]["causes"]]


def test_immutable_fields_are_422(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("fixed"))
    sim.settle()
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "fixed",
                                          {"spec": {"successPolicy": {"operator": "Any"}}})
    assert err.value.status == 422
    assert "spec.successPolicy" in [c["field"] for c in _status(err.value)["details"]["causes"]]
    current = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "fixed")
    current["spec"]["replicatedJobs"][0]["replicas"] = 5
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "fixed", current)
    assert err.value.status == 422


def test_suspended_jobset_allows_template_scheduling_changes(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("kueued", suspend=True))
    sim.settle()
    current = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "kueued")
    current["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "x"}
    updated = co.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "kueued", current)
    assert updated["metadata"]["generation"] == 2


def test_undecodable_body_is_400(sim):
    cluster = sim.cluster("eu-west")
    with httpx.Client(verify=False) as http:
        response = http.post(f"{sim.cluster_url('eu-west')}/api/v1/namespaces", content=b"{not json",
                             headers={"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["kind"] == "Status" and response.json()["reason"] == "BadRequest"


def test_server_side_apply_owns_fields(api, namespace):
    dyn = DynamicClient(api)
    resource = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="JobSet")
    body = jobset("applied")
    body["metadata"]["labels"] = {"owner": "broker"}
    first = resource.server_side_apply(body=body, namespace=namespace, field_manager="broker")
    assert first.metadata.labels["owner"] == "broker"
    assert [m.manager for m in first.metadata.managedFields] == ["broker"]
    clash = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet",
             "metadata": {"name": "applied", "labels": {"owner": "someone-else"}}}
    with pytest.raises(ApiException) as err:
        resource.server_side_apply(body=clash, namespace=namespace, field_manager="intruder")
    assert err.value.status == 409 and "owner" in _status(err.value)["message"]
    forced = resource.server_side_apply(body=clash, namespace=namespace, field_manager="intruder", force_conflicts=True)
    assert forced.metadata.labels["owner"] == "someone-else"
    # the broker applies again without the label: the label stays, now owned by the intruder
    body["metadata"]["labels"] = {"extra": "1"}
    again = resource.server_side_apply(body=body, namespace=namespace, field_manager="broker")
    assert again.to_dict()["metadata"]["labels"] == {"owner": "someone-else", "extra": "1"}


def test_paging_and_expired_continue(sim, api):
    core = client.CoreV1Api(api)
    names, token = [], None
    while True:
        page = core.list_node(limit=5, _continue=token)
        names += [n.metadata.name for n in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 18 - len(names)
    assert names == sorted(sim.cluster("eu-west").node_names()) and len(names) == 18
    page = core.list_node(limit=5)
    sim.cluster("eu-west").label_node("node-00", {"touched": "yes"})
    sim.cluster("eu-west").compact()  # history now starts after the page's resourceVersion
    with pytest.raises(ApiException) as err:
        core.list_node(limit=5, _continue=page.metadata._continue)
    assert err.value.status == 410


def test_label_selector_operators_on_nodes(api):
    core = client.CoreV1Api(api)
    count = lambda selector: len(core.list_node(label_selector=selector).items)
    assert count("pool=cpu") == 2
    assert count("pool!=cpu") == 16
    assert count("network.archipelago.io/leaf in (leaf-0,leaf-1)") == 8
    assert count("network.archipelago.io/leaf notin (leaf-0,leaf-1)") == 10
    assert count("pool") == 2 and count("!pool") == 16


def test_node_label_patch_and_hypernodes(sim, api):
    core = client.CoreV1Api(api)
    patched = core.patch_node("node-03", {"metadata": {"labels": {"maintenance": "soon"}}})
    assert patched.metadata.labels["maintenance"] == "soon"
    assert [n.metadata.name for n in core.list_node(label_selector="maintenance=soon").items] == ["node-03"]
    co = client.CustomObjectsApi(api)
    tree = {h["metadata"]["name"]: h for h in
            co.list_cluster_custom_object("topology.volcano.sh", "v1alpha1", "hypernodes")["items"]}
    assert sorted(tree) == ["leaf-0", "leaf-1", "leaf-2", "leaf-3", "leaf-4", "root", "spine-0", "spine-1", "spine-2"]
    assert {h["spec"]["tier"] for h in tree.values()} == {1, 2, 3}
    kinds = {next(iter(m["selector"])) for h in tree.values() for m in h["spec"]["members"]}
    assert kinds == {"exactMatch", "regexMatch", "labelMatch"}
    hn = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "test-hn"},
          "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "node-00"}}}]}}
    co.create_cluster_custom_object("topology.volcano.sh", "v1alpha1", "hypernodes", hn)
    co.delete_cluster_custom_object("topology.volcano.sh", "v1alpha1", "hypernodes", "test-hn")
    hn["spec"]["members"][0]["selector"] = {"exactMatch": {"name": "node-00"}, "regexMatch": {"pattern": "x"}}
    with pytest.raises(ApiException) as err:
        co.create_cluster_custom_object("topology.volcano.sh", "v1alpha1", "hypernodes", hn)
    assert err.value.status == 422


def test_watch_jobset_through_running_to_completed(sim, api, namespace):
    co = client.CustomObjectsApi(api)
    created = co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("watched"))
    seen, advanced = [], False
    w = watch.Watch()
    for event in w.stream(co.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                          field_selector="metadata.name=watched", resource_version=created["metadata"]["resourceVersion"],
                          timeout_seconds=20):
        status = event["object"].get("status") or {}
        rjobs = status.get("replicatedJobsStatus") or []
        if rjobs and rjobs[0]["ready"] == 2 and not advanced:
            seen.append("Running")
            advanced = True
            sim.advance(61)  # the default simulated run time is 60s
        if status.get("terminalState"):
            seen.append(status["terminalState"])
            w.stop()
    assert seen == ["Running", "Completed"]
    final = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "watched")["status"]
    assert final["replicatedJobsStatus"][0]["succeeded"] == 2
    assert any(c["type"] == "Completed" and c["status"] == "True" and c["reason"] == "AllJobsCompleted"
               for c in final["conditions"])


def test_watch_sees_added_modified_deleted_and_bookmarks(sim, api, namespace):
    core = client.CoreV1Api(api)
    start = core.list_namespaced_service(namespace).metadata.resource_version
    core.create_namespaced_service(namespace, {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}})
    core.patch_namespaced_service("svc", namespace, {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_service("svc", namespace)
    kinds = [e["type"] for e in watch.Watch().stream(core.list_namespaced_service, namespace, resource_version=start,
                                                    timeout_seconds=1)]
    assert kinds == ["ADDED", "MODIFIED", "DELETED"]
    with httpx.Client(verify=False, timeout=10) as http:
        url = (f"{sim.cluster_url('eu-west')}/api/v1/namespaces/{namespace}/services?watch=1"
               f"&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
        with http.stream("GET", url, headers={"Authorization": f"Bearer {sim.cluster('eu-west').token}"}) as response:
            first = json.loads(next(response.iter_lines()))
    assert first["type"] == "BOOKMARK"
    assert first["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_expired_watch_is_410(sim, api, namespace):
    core = client.CoreV1Api(api)
    old = core.list_namespaced_pod(namespace).metadata.resource_version
    core.create_namespaced_service(namespace, {"metadata": {"name": "bump"}, "spec": {"ports": [{"port": 80}]}})
    sim.cluster("eu-west").compact()
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(core.list_namespaced_pod, namespace, resource_version=old, timeout_seconds=5):
            pass
    assert err.value.status == 410


def test_pod_field_selectors(sim, api, namespace):
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, jobset("fields", [("w", 1, 3)]))
    sim.settle()
    pods = core.list_namespaced_pod(namespace).items
    node = pods[0].spec.node_name
    on_node = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
    assert on_node and all(p.spec.node_name == node for p in on_node)
    assert len(core.list_namespaced_pod(namespace, field_selector="status.phase=Running").items) == 3
    assert core.list_namespaced_pod(namespace, field_selector="status.phase!=Running").items == []


def test_faults_unreachable_slow_failing_and_heal(sim):
    api = api_client(sim, "eu-west")
    api.configuration.retries = 0
    core = client.CoreV1Api(api)
    try:
        sim.make_unreachable("eu-west")
        with pytest.raises(urllib3.exceptions.HTTPError):
            core.list_namespace()
        with api_client(sim, "us-east") as other:  # only that cluster is cut off
            assert client.CoreV1Api(other).list_namespace().items
        sim.make_failing("eu-west", 503)
        with pytest.raises(ApiException) as err:
            core.list_namespace()
        assert err.value.status == 503
        sim.make_slow("eu-west", 30)
        with pytest.raises(urllib3.exceptions.MaxRetryError) as slow:
            core.list_namespace(_request_timeout=0.2)
        assert isinstance(slow.value.reason, urllib3.exceptions.ReadTimeoutError)
    finally:
        sim.heal("eu-west")
    assert core.list_namespace().items
    api.close()


def test_admin_endpoint_sets_faults(sim):
    headers = {"Authorization": f"Bearer {sim.admin_token}"}
    with httpx.Client(verify=False, timeout=10) as http:
        assert http.post(f"{sim.url}/admin/clusters/us-east/fault", json={"mode": "failing", "status": 500},
                         headers={"Authorization": "Bearer nope"}).status_code == 401
        assert http.post(f"{sim.url}/admin/clusters/us-east/fault", json={"mode": "failing", "status": 500},
                         headers=headers).json()["fault"] == "failing"
        token = sim.cluster("us-east").token
        assert http.get(f"{sim.cluster_url('us-east')}/api", headers={"Authorization": f"Bearer {token}"}).status_code == 500
        http.post(f"{sim.url}/admin/clusters/us-east/fault", json={"mode": "healthy"}, headers=headers)
        assert http.get(f"{sim.cluster_url('us-east')}/api", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_finalizers_hold_deletion_with_deletion_timestamp(api, namespace):
    co = client.CustomObjectsApi(api)
    body = jobset("held", suspend=True)
    body["metadata"]["finalizers"] = ["example.com/keep"]
    co.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    co.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    held = co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    assert held["metadata"]["deletionTimestamp"]
    co.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    assert err.value.status == 404
