"""Submitting, listing, reading and cancelling jobs, and every validation error, on both databases."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from broker.engine.jobset import from_placement_record, parse_jobset
from broker.engine.placement import shape_of
from broker.store.db.crypto import KubeconfigCipher
from broker.store.db.models import Cluster, Event, Job, Node, Queue
from clusters.rules.quantity import to_milli
from clusters.rules.times import rfc3339
from tests.api.conftest import add_cluster_with_leaves, make_tenant
from tests.api.jobsets import jobset, with_change
from tests.examples import example, jobset_examples
from tests.locks import until_waiting_for_a_lock

YAML = {"Content-Type": "application/yaml"}


def submit(client, body, *, content_type="application/json", **params):
    payload = body if isinstance(body, str) else json.dumps(body)
    return client.post("/api/v1/jobs", content=payload, headers={"Content-Type": content_type}, params=params)


@pytest.fixture
def example_tenants(admin):
    """The tenants, namespaces and queues the shared examples name."""
    for tenant, namespace, queue in [("team-a", "team-a", "research"), ("team-b", "team-b", "production"),
                                     ("hpc", "hpc", "hpc")]:
        admin.post("/api/v1/tenants", json={"name": tenant, "namespaces": [namespace]})
        admin.post("/api/v1/queues", json={"name": queue, "tenant": tenant})


@pytest.mark.parametrize("filename", jobset_examples())
def test_every_example_is_accepted_as_yaml(admin, example_tenants, db, filename):
    manifest = example(filename)
    tenant = {"team-a": "team-a", "team-b": "team-b", "hpc": "hpc"}[manifest["metadata"]["namespace"]]
    answer = submit(admin, yaml.safe_dump(manifest), content_type="application/yaml", tenant=tenant)
    assert answer.status_code == 201, answer.text
    [job] = answer.json()["items"]
    assert (job["name"], job["namespace"], job["state"]) == (manifest["metadata"]["name"],
                                                             manifest["metadata"]["namespace"], "Queued")
    detail = admin.get(f"/api/v1/jobs/{job['id']}").json()
    assert detail["manifest"] == manifest
    assert [e["reason"] for e in detail["events"]] == ["Queued"]
    with db.sessions() as session:  # what the scheduler reads of it, rather than parse the manifest again
        record = session.get(Job, job["id"]).placement_spec
    assert shape_of(from_placement_record(record)) == shape_of(parse_jobset(manifest))


def test_a_tenant_submits_into_its_default_queue_and_namespace(research):
    answer = submit(research, jobset("train", gpus=8, replicas=2))
    assert answer.status_code == 201, answer.text
    [job] = answer.json()["items"]
    assert (job["tenant"], job["queue"], job["namespace"], job["priority_class"]) == (
        "research", "training", "research", "normal")
    detail = research.get(f"/api/v1/jobs/{job['id']}").json()
    assert detail["demand"]["nvidia.com/gpu"] == "16"


def test_priority_class_sets_priority(research):
    high = submit(research, jobset("a", priority_class="high")).json()["items"][0]
    low = submit(research, jobset("b", priority_class="low")).json()["items"][0]
    assert high["priority"] > low["priority"]


def test_batches_in_every_shape(research):
    as_list = submit(research, [jobset("a"), jobset("b")])
    assert as_list.status_code == 201 and len(as_list.json()["items"]) == 2
    stream = yaml.safe_dump_all([jobset("c"), jobset("d"), jobset("e")])
    assert len(submit(research, stream, content_type="application/yaml").json()["items"]) == 3
    kind_list = {"apiVersion": "v1", "kind": "List", "items": [jobset("f")]}
    assert len(submit(research, kind_list).json()["items"]) == 1


@pytest.mark.parametrize("body", [[], {"apiVersion": "v1", "kind": "List", "items": []}, None])
def test_an_empty_body_holds_no_jobset(research, body):
    answer = submit(research, "" if body is None else body,
                    content_type="application/yaml" if body is None else "application/json")
    assert answer.status_code == 422
    assert answer.json()["detail"] == "the body holds no JobSet"


def test_a_batch_is_all_or_nothing(research):
    answer = submit(research, [jobset("good"), with_change(jobset("bad"), "spec.replicatedJobs.0.replicas", 0)])
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "[1].spec.replicatedJobs[0].replicas"
    assert research.get("/api/v1/jobs").json()["items"] == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_two_batches_that_name_the_same_jobs_in_opposite_orders_are_told_to_retry(research, db):
    """A batch [b, a] holds b and waits at the unique index for a batch [a, b] that holds a and waits for b:
    PostgreSQL aborts one of the two (here the API's, the first to wait). It lost a race for a name, as on a
    duplicate key: a 409 that says so, not a 500."""
    answers: list = []
    with db.write() as session:  # it waits second: the batch, waiting first, is the first to look for a deadlock
        queue = session.scalar(select(Queue).where(Queue.name == "training"))

        def insert(name: str) -> None:
            session.add(Job(tenant_id=queue.tenant_id, queue_id=queue.id, namespace="research", name=name,
                            manifest=jobset(name), state="Queued"))
            session.flush()

        insert("b")
        batch = threading.Thread(target=lambda: answers.append(submit(research, [jobset("a"), jobset("b")])))
        batch.start()
        until_waiting_for_a_lock(db, "the batch never waited for b")
        insert("a")  # waits for the batch's a, until PostgreSQL aborts the batch
    batch.join(30)
    [answer] = answers
    assert answer.status_code == 409, answer.text
    ids = {job["name"]: job["id"] for job in research.get("/api/v1/jobs").json()["items"]}
    assert set(ids) == {"a", "b"}
    # the name it lost, once the other transaction committed; else (not yet) that it lost one
    assert answer.json()["detail"] in (
        "a job of the same namespace/name was submitted at the same moment; retry",
        f"[0].metadata.name: job {ids['a']} (research/a) is still Queued; pick another name or cancel it first",
        f"[1].metadata.name: job {ids['b']} (research/b) is still Queued; pick another name or cancel it first")


INVALID = [
    ("wrong kind", lambda m: with_change(m, "kind", "Job"), "kind"),
    ("bad name", lambda m: with_change(m, "metadata.name", "Train_1"), "metadata.name"),
    ("no replicated jobs", lambda m: with_change(m, "spec.replicatedJobs", []), "spec.replicatedJobs"),
    ("duplicate replicated job", lambda m: with_change(m, "spec.replicatedJobs",
                                                       m["spec"]["replicatedJobs"] * 2), "spec.replicatedJobs[1].name"),
    ("zero replicas", lambda m: with_change(m, "spec.replicatedJobs.0.replicas", 0),
     "spec.replicatedJobs[0].replicas"),
    ("split part name too long", lambda m: with_change(with_change(m, "metadata.annotations", {
        "archipelago.io/placement": "split"}), "spec.replicatedJobs.0.name", "w" * 60),
     "spec.replicatedJobs[0].name"),
    ("replicas beyond int32", lambda m: with_change(m, "spec.replicatedJobs.0.replicas", 2**31),
     "spec.replicatedJobs[0].replicas"),
    ("negative parallelism", lambda m: with_change(m, "spec.replicatedJobs.0.template.spec.parallelism", -1),
     "spec.replicatedJobs[0].template.spec.parallelism"),
    ("bad quantity", lambda m: with_change(
        m, "spec.replicatedJobs.0.template.spec.template.spec.containers.0.resources.requests.cpu", "eight"),
     "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.requests.cpu"),
    ("unknown placement mode", lambda m: with_change(m, "metadata.annotations",
                                                     {"archipelago.io/placement": "scatter"}),
     "metadata.annotations['archipelago.io/placement']"),
    ("bad selector", lambda m: with_change(m, "metadata.annotations",
                                           {"archipelago.io/cluster-selector": "region in (eu"}),
     "metadata.annotations['archipelago.io/cluster-selector']"),
    ("non-integer tier", lambda m: with_change(m, "metadata.annotations", {
        "archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "two"}),
     "metadata.annotations['archipelago.io/highest-tier-allowed']"),
    ("negative max restarts", lambda m: with_change(m, "metadata.annotations", {"archipelago.io/max-restarts": "-1"}),
     "metadata.annotations['archipelago.io/max-restarts']"),
    ("reserved label", lambda m: with_change(m, "metadata.labels", {"archipelago.io/job-id": "7"}),
     "metadata.labels['archipelago.io/job-id']"),
    ("unknown broker annotation", lambda m: with_change(m, "metadata.annotations", {"archipelago.io/owner": "me"}),
     "metadata.annotations['archipelago.io/owner']"),
    ("expected runtime not a duration", lambda m: with_change(m, "metadata.annotations",
                                                              {"archipelago.io/expected-runtime": "a while"}),
     "metadata.annotations['archipelago.io/expected-runtime']"),
    ("unknown queue", lambda m: with_change(m, "metadata.labels", {"kueue.x-k8s.io/queue-name": "nope"}),
     "metadata.labels['kueue.x-k8s.io/queue-name']"),
    ("unknown priority class", lambda m: with_change(m, "metadata.labels", {"kueue.x-k8s.io/priority-class": "vip"}),
     "metadata.labels['kueue.x-k8s.io/priority-class']"),
    ("foreign namespace", lambda m: with_change(m, "metadata.namespace", "kube-system"), "metadata.namespace"),
]


@pytest.mark.parametrize("case, mutate, field", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_jobsets_name_the_field(research, case, mutate, field):
    answer = submit(research, mutate(jobset("train")))
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["errors"][0]["field"] == field
    assert problem["detail"].startswith(field)
    assert len(problem["detail"]) > len(field) + 10  # says what is wrong, not only where


def test_another_tenants_queue_is_not_open(research, vision):
    answer = submit(vision, jobset("x", queue="training"))
    assert answer.status_code == 422
    assert "does not exist or is not open to tenant vision" in answer.json()["detail"]


def test_transport_errors(research, settings):
    assert submit(research, "not json{", content_type="application/json").status_code == 400
    assert submit(research, "a: [unclosed", content_type="application/yaml").status_code == 400
    unsupported = research.post("/api/v1/jobs", content=b"x", headers={"Content-Type": "text/plain"})
    assert unsupported.status_code == 415
    huge = b"{" + b" " * settings.max_request_bytes + b"}"
    too_big = research.post("/api/v1/jobs", content=huge, headers={"Content-Type": "application/json"})
    assert too_big.status_code == 413
    assert too_big.headers["content-type"] == "application/problem+json"


def test_a_live_name_cannot_be_reused_until_it_finishes(research):
    first = submit(research, jobset("train")).json()["items"][0]
    again = submit(research, jobset("train"))
    assert again.status_code == 409
    assert f"job {first['id']} (research/train) is still Queued" in again.json()["detail"]
    research.delete(f"/api/v1/jobs/{first['id']}")
    assert submit(research, jobset("train")).status_code == 201


def test_a_job_no_cluster_could_ever_hold_is_refused_at_once(research, db, settings):
    cipher = KubeconfigCipher(settings.fernet_key())
    with db.sessions() as session, session.begin():
        for name, gpus in [("small", 8), ("large", 64)]:
            cluster = Cluster(name=name, api_server=f"https://{name}", kubeconfig_encrypted=cipher.encrypt("x"))
            cluster.nodes = [Node(name=f"n{i}", allocatable={"nvidia.com/gpu": 8000, "cpu": 64000,
                                                             "memory": to_milli("512Gi")})
                             for i in range(gpus // 8)]
            session.add(cluster)
    research.app.state.capacity.forget()  # the cached empty inventory
    assert submit(research, jobset("fits", replicas=8, gpus=8)).status_code == 201
    answer = submit(research, jobset("too-big", replicas=9, gpus=8))
    assert answer.status_code == 422
    assert answer.json()["clusters"] == {"large": "needs 72 GPUs; 64 GPUs free", "small": "needs 72 GPUs; 8 GPUs free"}
    assert answer.json()["detail"] == ("spec.replicatedJobs: no registered cluster could ever run it "
                                       "(large: needs 72 GPUs; 64 GPUs free; small: needs 72 GPUs; 8 GPUs free)")
    with db.sessions() as session, session.begin():  # nodes that report their pod slots: 110 each
        for node in session.query(Node):
            node.allocatable = {**node.allocatable, "pods": 110_000}
    research.app.state.capacity.forget()
    swarm = with_change(jobset("swarm", replicas=881, gpus=0),
                        "spec.replicatedJobs.0.template.spec.template.spec.containers.0.resources",
                        {"requests": {"cpu": "10m"}})
    too_many_pods = submit(research, swarm)
    assert too_many_pods.status_code == 422
    assert too_many_pods.json()["clusters"]["large"] == "needs 881 pods; 880 pods free"
    pod_too_big = submit(research, jobset("fat-pod", replicas=1, gpus=16))
    assert pod_too_big.status_code == 422
    assert pod_too_big.json()["clusters"]["large"] == "even empty, its nodes cannot hold 1 pod of 16 GPUs"


def test_listing_pages_and_filters(research):
    for i in range(7):
        submit(research, jobset(f"job-{i}", queue="eval" if i % 2 else "training",
                                labels={"team": "nlp" if i < 3 else "cv"}))
    seen, cursor = [], None
    while True:
        page = research.get("/api/v1/jobs", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
        seen += [j["name"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"job-{i}" for i in reversed(range(7))]
    first = research.get("/api/v1/jobs", params={"limit": 4, "order": "oldest"}).json()
    second = research.get("/api/v1/jobs", params={"limit": 4, "order": "oldest", "cursor": first["next_cursor"]})
    assert [j["name"] for j in first["items"] + second.json()["items"]] == [f"job-{i}" for i in range(7)]
    assert second.json()["next_cursor"] is None
    names = lambda **params: [j["name"] for j in research.get("/api/v1/jobs", params=params).json()["items"]]
    assert names(queue="eval") == ["job-5", "job-3", "job-1"]
    assert names(selector="team=nlp") == ["job-2", "job-1", "job-0"]
    assert names(selector="team=cv", queue="training", limit=1) == ["job-6"]
    assert names(name="job-4") == ["job-4"]
    assert names(state="Running") == []
    assert len(names(state=["Queued", "Cancelled"])) == 7
    assert research.get("/api/v1/jobs", params={"state": "Sleeping"}).status_code == 422
    assert research.get("/api/v1/jobs", params={"selector": "team in (nlp"}).status_code == 422
    assert research.get("/api/v1/jobs", params={"cursor": "abc"}).status_code == 422


def test_cancelling_a_queued_job(research):
    job = submit(research, jobset("train")).json()["items"][0]
    cancelled = research.delete(f"/api/v1/jobs/{job['id']}")
    assert cancelled.status_code == 202
    assert cancelled.json()["state"] == "Cancelled"
    again = research.delete(f"/api/v1/jobs/{job['id']}")
    assert again.status_code == 409
    assert [e["reason"] for e in research.get(f"/api/v1/jobs/{job['id']}").json()["events"]] == ["Queued",
                                                                                                  "Cancelled"]


def test_events_follow_a_cursor(research):
    submit(research, [jobset("a"), jobset("b")])
    first = research.get("/api/v1/events", params={"kind": "job", "limit": 1}).json()
    rest = research.get("/api/v1/events", params={"kind": "job", "cursor": first["next_cursor"]}).json()
    assert [e["message"] for e in first["items"] + rest["items"]] == ["research/a queued in training",
                                                                       "research/b queued in training"]


def test_one_job_and_a_batch_are_stored_alike(research, db):
    # On PostgreSQL one job goes in one statement with its event, a batch in one statement a table: the same rows.
    [single] = submit(research, jobset("alone")).json()["items"]
    batch = submit(research, [jobset("first"), jobset("second")]).json()["items"]
    ids = [single["id"], *(job["id"] for job in batch)]
    with db.sessions() as session:
        jobs = {job.id: job for job in session.scalars(select(Job).where(Job.id.in_(ids)))}
        events = {int(event.object_id): event for event in session.scalars(
            select(Event).where(Event.kind == "job", Event.object_id.in_([str(i) for i in ids])))}
    for name, job_id in zip(("alone", "first", "second"), ids):
        job, event = jobs[job_id], events[job_id]
        assert (job.state, job.evictions, job.avoid, job.restart_count) == ("Queued", 0, {}, 0)
        assert (event.type, event.reason, event.tenant_id, event.time) == ("Normal", "Queued", job.tenant_id,
                                                                          job.submitted_at)
        assert event.message == f"research/{name} queued in training"


def test_tenant_isolation_on_every_endpoint(admin, research, db, settings):
    """Another tenant's ids answer exactly as ids that do not exist: 404, never 403."""
    from broker.services.scheduler import SchedulerService

    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {"region": "eu"})
    job_id = submit(research, jobset("secret")).json()["items"][0]["id"]
    SchedulerService(db, settings).run_once()  # placed: it has placements and more events to leak
    assert research.get("/api/v1/placements", params={"job": job_id}).json()["items"]
    with make_tenant(admin, "intruder") as intruder:
        assert intruder.get("/api/v1/placements", params={"cluster": "eu-west"}).json()["items"] == []
        assert intruder.get("/api/v1/events", params={"kind": "job", "object": str(job_id)}).json()["items"] == []
        assert intruder.post("/api/v1/jobs:dry-run", json=jobset("x", queue="training")).status_code == 422
        history = intruder.get("/api/v1/queue-history").json()
        assert "training" not in str(history) and "research" not in str(history)
        for method, path in [("GET", f"/api/v1/jobs/{job_id}"), ("DELETE", f"/api/v1/jobs/{job_id}"),
                             ("GET", "/api/v1/queues/training"), ("GET", "/api/v1/tenants/research")]:
            answer = intruder.request(method, path)
            assert answer.status_code == 404, (method, path, answer.text)
            assert "does not exist" in answer.json()["detail"]
        assert intruder.get("/api/v1/jobs").json()["items"] == []
        assert intruder.get("/api/v1/jobs", params={"tenant": "research"}).json()["items"] == []
        assert intruder.get("/api/v1/placements", params={"job": job_id}).json()["items"] == []
        assert [e["object_id"] for e in intruder.get("/api/v1/events").json()["items"]] == ["intruder",
                                                                                            "intruder-default"]
        assert [q["name"] for q in intruder.get("/api/v1/queues").json()] == ["intruder-default"]
        assert [t["name"] for t in intruder.get("/api/v1/tenants").json()] == ["intruder"]
        assert submit(intruder, jobset("x"), tenant="research").status_code == 404
    assert research.get(f"/api/v1/jobs/{job_id}").status_code == 200


def test_metrics_count_jobs_by_state_and_queue_depth(admin, research, db):
    submit(research, [jobset("a"), jobset("b"), jobset("c", queue="eval")])
    research.delete(f"/api/v1/jobs/{research.get('/api/v1/jobs').json()['items'][0]['id']}")
    text = admin.get("/metrics").text
    assert 'archipelago_jobs{state="Queued"} 2.0' in text
    assert 'archipelago_jobs{state="Cancelled"} 1.0' in text
    with db.sessions() as session:
        ids = dict(session.execute(select(Queue.name, Queue.id)).all())
    assert f'archipelago_queue_pending_jobs{{queue="{ids["training"]}"}} 2.0' in text  # no tenant's words by default
    assert f'archipelago_queue_pending_jobs{{queue="{ids["eval"]}"}} 0.0' in text
    assert "training" not in text and "research" not in text
    assert "archipelago_scheduler_cycle_seconds_bucket" in text


def test_metrics_need_the_metrics_token_or_an_admin_and_show_queue_names_only_when_allowed(settings, db, research):
    app = create_app(settings.model_copy(update={"metrics_token": "scrape-me", "metrics_queue_names": True}), db,
                     run_loops=False)
    with TestClient(app) as anonymous:
        assert anonymous.get("/metrics").status_code == 401
        assert anonymous.get("/metrics", headers=research.headers).status_code == 403
        assert anonymous.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        text = anonymous.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).text
    assert 'archipelago_queue_pending_jobs{queue="training"} 0.0' in text


def test_dry_run_says_where_a_job_would_go_and_writes_nothing(research, db, settings):
    cipher = KubeconfigCipher(settings.fernet_key())
    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, cipher, "eu-west", 2, {"region": "eu"})
        add_cluster_with_leaves(session, cipher, "us-east", 1, {"region": "us"})
    research.app.state.capacity.forget()
    hard = {"archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "1"}
    answer = research.post("/api/v1/jobs:dry-run", json=jobset("train", replicas=4, gpus=8, annotations=hard))
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["fits"] is True
    [placement] = plan["placements"]
    assert placement["tier"] == 1 and placement["hypernode"].startswith("leaf-")
    assert len(placement["nodes"]) == 4

    eu_only = {**hard, "archipelago.io/cluster-selector": "region=eu"}
    with db.sessions() as session, session.begin():  # someone else's pod on one node of each eu-west leaf
        for node in session.query(Node).filter(Node.name.in_(["eu-west-l0-n0", "eu-west-l1-n0"])):
            node.used = {"nvidia.com/gpu": 8000}
    waits = research.post("/api/v1/jobs:dry-run", json=jobset("big", replicas=4, gpus=8, annotations=eu_only)).json()
    assert waits["fits"] is False
    assert set(waits["waiting_reasons"]) == {"eu-west", "us-east"}
    assert waits["waiting_reasons"]["eu-west"] == ("needs 32 GPUs in one tier-1 HyperNode; "
                                                   "the largest free one has 24")
    assert "region=eu" in waits["waiting_reasons"]["us-east"]
    assert waits["expected"].startswith("never, as the fleet is now") and waits["expected_start"] is None
    never = research.post("/api/v1/jobs:dry-run", json=jobset("huge", replicas=5, gpus=8, annotations=eu_only))
    assert never.status_code == 422, "a dry run answers as the submission would"
    assert set(never.json()["clusters"]) == {"eu-west", "us-east"}
    assert research.get("/api/v1/jobs").json()["items"] == []
    invalid = research.post("/api/v1/jobs:dry-run", json=with_change(jobset("x"), "kind", "Job"))
    assert invalid.status_code == 422


def test_a_dry_run_that_would_wait_says_when_it_would_start(research, db, settings):
    """Issue #46: one leaf, taken by a gang declared to run 2 h; the same gang, dry run, would start when it ends —
    "would start about T on C", as `squeue --start` says of a job submitted now."""
    from broker.services.scheduler import SchedulerService
    from broker.store.db.models import Placement

    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 1, {"region": "eu"})
    hard = {"archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "1"}
    first = submit(research, jobset("first", replicas=4, annotations={**hard, "archipelago.io/expected-runtime": "2h"}))
    first_id = first.json()["items"][0]["id"]
    SchedulerService(db, settings).run_once()
    with db.sessions() as session:
        started = session.query(Placement).filter(Placement.job_id == first_id).one().created_at
    answer = research.post("/api/v1/jobs:dry-run", json=jobset("second", replicas=4, annotations=hard)).json()
    assert answer["fits"] is False
    assert answer["expected"] == f"after job {first_id} ends, on eu-west, HyperNode leaf-0"
    assert answer["expected_start"] == rfc3339(started + timedelta(hours=2))
    assert [j["name"] for j in research.get("/api/v1/jobs").json()["items"]] == ["first"]  # nothing submitted


def test_a_job_waiting_again_lists_no_cluster_its_old_placement_is_leaving(research, db):
    """Re-queued after a fail-over, a job's old placement is being deleted: it runs nowhere, and says so."""
    from broker.store.db.models import Placement

    job = submit(research, jobset("moved")).json()["items"][0]
    with db.sessions() as session, session.begin():
        session.add(Placement(job_id=job["id"], cluster_name="eu-west", state="Deleting", resources={}))
    assert research.get(f"/api/v1/jobs/{job['id']}").json()["clusters"] == []
    assert research.get("/api/v1/jobs").json()["items"][0]["clusters"] == []
    with db.sessions() as session, session.begin():
        session.add(Placement(job_id=job["id"], cluster_name="us-east", state="Running", resources={}, generation=2))
    assert research.get(f"/api/v1/jobs/{job['id']}").json()["clusters"] == ["us-east"]


def test_a_waiting_job_knows_its_place_in_its_queue_and_jobs_are_counted_by_state(research, vision, db):
    """The scheduler takes a queue's jobs by priority, then submission: the position says how many go first."""
    first = submit(research, jobset("first")).json()["items"][0]
    second = submit(research, jobset("second")).json()["items"][0]
    urgent = submit(research, jobset("urgent", priority_class="high")).json()["items"][0]
    submit(vision, jobset("elsewhere"))
    positions = {job["name"]: research.get(f"/api/v1/jobs/{job['id']}").json()["position"]
                 for job in (first, second, urgent)}
    assert positions == {"urgent": 1, "first": 2, "second": 3}
    counts = research.get("/api/v1/jobs:counts").json()
    assert (counts["Queued"], counts["Running"]) == (3, 0)  # its own jobs only
    assert research.get("/api/v1/jobs:counts", params={"queue": "eval"}).json()["Queued"] == 0
    research.delete(f"/api/v1/jobs/{urgent['id']}")
    assert research.get(f"/api/v1/jobs/{urgent['id']}").json()["position"] is None
    assert research.get(f"/api/v1/jobs/{second['id']}").json()["position"] == 2
