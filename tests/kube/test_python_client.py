"""The official `kubernetes` Python client against the front door: CustomObjectsApi and watch.Watch."""

from __future__ import annotations

import json
import queue
import threading

import httpx
import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from broker.cli.kubeconfig import kubeconfig_document
from broker.process.testing import jobset

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@pytest.fixture
def objects(front_door):
    """CustomObjectsApi for team-a, configured from the kubeconfig `archipelago kubeconfig` writes."""
    api_client = config.new_client_from_config(str(front_door.kubeconfig("team-a")))
    yield client.CustomObjectsApi(api_client)
    api_client.close()


def test_custom_objects_api_creates_gets_lists_and_deletes(front_door, objects):
    created = objects.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, jobset("one"))
    assert created["metadata"]["annotations"]["archipelago.io/state"] == "Queued"
    objects.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL,
                                            {**jobset("two"), "metadata": {**jobset("two")["metadata"],
                                                                           "labels": {"tier": "batch"}}})
    with pytest.raises(ApiException) as taken:
        objects.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, jobset("one"))
    assert taken.value.status == 409 and '"reason":"AlreadyExists"' in taken.value.body.replace(" ", "")

    got = objects.get_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "one")
    assert got["metadata"]["uid"] == created["metadata"]["uid"] and got["spec"] == jobset("one")["spec"]
    [managed] = got["metadata"]["managedFields"]  # the broker owns what was submitted
    assert managed["manager"] == "archipelago" and set(managed["fieldsV1"]) == {"f:metadata", "f:spec"}
    assert set(managed["fieldsV1"]["f:spec"]["f:replicatedJobs"]) == set()  # a list: one field
    # what `kubectl get -o yaml` printed can be created again: the server's fields are dropped
    objects.delete_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "one")
    again = objects.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, got)
    assert again["metadata"]["uid"] != got["metadata"]["uid"] and len(again["metadata"]["managedFields"]) == 1
    got = again
    listed = objects.list_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["two", "one"]  # in submission order
    selected = objects.list_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, label_selector="tier=batch")
    assert [i["metadata"]["name"] for i in selected["items"]] == ["two"]
    first = objects.list_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, limit=1)
    rest = objects.list_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, limit=1,
                                                 _continue=first["metadata"]["continue"])
    assert [i["metadata"]["name"] for i in first["items"] + rest["items"]] == ["two", "one"]

    objects.delete_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "two")  # queued: cancelled at once
    with pytest.raises(ApiException) as gone:
        objects.get_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "two")
    assert gone.value.status == 404

    front_door.until_state(int(got["metadata"]["annotations"]["archipelago.io/job-id"]), "Running")
    placed = objects.get_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "one")
    assert placed["status"]["replicatedJobsStatus"][0]["name"] == "workers"
    condition, annotations = placed["status"]["conditions"][0], placed["metadata"]["annotations"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Placed", "True", "Running")
    assert condition["message"] == (f"on {annotations['archipelago.io/clusters']} "
                                    f"({annotations['archipelago.io/hypernodes']})")  # one cluster: a whole job
    assert placed["status"]["restarts"] == 0
    with pytest.raises(ApiException) as elsewhere:
        objects.list_namespaced_custom_object(GROUP, VERSION, "team-b", PLURAL)
    assert elsewhere.value.status == 403


def test_a_watch_from_a_lists_resource_version_sees_every_later_change(front_door, objects):
    objects.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, jobset("watched"))
    listed = objects.list_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL)
    [item] = listed["items"]
    assert item["metadata"]["annotations"]["archipelago.io/state"] == "Queued"
    job = int(item["metadata"]["annotations"]["archipelago.io/job-id"])
    front_door.until_state(job, "Running")  # changed after the list, before the watch starts
    events: queue.Queue = queue.Queue()
    stream = watch.Watch()

    def follow() -> None:
        try:
            for event in stream.stream(objects.list_namespaced_custom_object, GROUP, VERSION, "team-a", PLURAL,
                                       resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=60):
                events.put((event["type"], event["object"]["metadata"]["annotations"]["archipelago.io/state"]))
        except Exception as exc:  # the server stops at teardown under a watch still open
            events.put(("closed", type(exc).__name__))

    threading.Thread(target=follow, daemon=True).start()
    try:
        assert events.get(timeout=30) == ("MODIFIED", "Running")  # nothing stepped since: the change it missed
        front_door.until_state(job, "Succeeded", seconds=30)
        seen = []
        while not seen or seen[-1] != ("MODIFIED", "Succeeded"):
            seen.append(events.get(timeout=30))
        # a finished job deleted leaves the JobSets shown at once; the REST API keeps it as history
        objects.delete_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "watched")
        assert events.get(timeout=30) == ("DELETED", "Succeeded")
        with pytest.raises(ApiException) as gone:
            objects.get_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "watched")
        assert gone.value.status == 404
        assert front_door.state(job) == "Succeeded" and "Removed" in front_door.reasons(job)
        objects.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, jobset("watched"))  # the name is free
    finally:
        stream.stop()


def test_an_admin_submits_into_a_tenants_namespace_and_sees_every_namespace(front_door):
    path = front_door.home / "admin.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_document(front_door.url, "admin", "admin-test-token", None,
                                                       front_door.ca_pem)))
    api_client = config.new_client_from_config(str(path))
    try:
        admin = client.CustomObjectsApi(api_client)
        admin.create_namespaced_custom_object(GROUP, VERSION, "team-b", PLURAL, jobset("theirs", namespace="team-b"))
        [job] = front_door.api.get("/api/v1/jobs").json()["items"]
        assert (job["tenant"], job["queue"]) == ("team-b", "production")
        everywhere = admin.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]] == [
            ("team-b", "theirs")]
        stray = jobset("stray")
        stray["metadata"]["namespace"] = "nobody"
        with pytest.raises(ApiException) as nobody:
            admin.create_namespaced_custom_object(GROUP, VERSION, "nobody", PLURAL, stray)
        assert nobody.value.status == 404 and 'namespaces \\"nobody\\" not found' in nobody.value.body
        with pytest.raises(ApiException) as elsewhere:
            admin.create_namespaced_custom_object(GROUP, VERSION, "team-b", PLURAL, jobset("x", namespace="team-a"))
        assert elsewhere.value.status == 400  # the object's namespace is not the request's
    finally:
        api_client.close()


def test_a_watch_sends_bookmarks_when_asked(front_door, monkeypatch):
    monkeypatch.setattr("api.kube.routes.BOOKMARK_INTERVAL", 0.1)
    token = yaml.safe_load(front_door.kubeconfig("team-a").read_text())["users"][0]["user"]["token"]
    with httpx.Client(base_url=front_door.url + "/k8s", verify=front_door.trust,
                      headers={"Authorization": f"Bearer {token}"}, timeout=30) as http, \
            http.stream("GET", f"/apis/{GROUP}/{VERSION}/namespaces/team-a/{PLURAL}",
                        params={"watch": "1", "allowWatchBookmarks": "true", "sendInitialEvents": "true",
                                "resourceVersionMatch": "NotOlderThan"}) as answer:
        lines = answer.iter_lines()
        first = json.loads(next(lines))
        assert first["type"] == "BOOKMARK"
        assert first["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert json.loads(next(lines))["type"] == "BOOKMARK"  # and then one every interval
