"""Hostile input from a tenant with a valid token: every request answers a 4xx problem naming what to fix,
stores nothing, and the broker keeps answering /healthz meanwhile (on both databases)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time

import httpx
import pytest
from cryptography.fernet import Fernet
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event

from api.app import create_app
from broker.process.settings import Settings
from broker.store.db.runtime import Database
from broker.store.db.session import make_sessionmaker
from tests.api.conftest import ADMIN, make_tenant
from tests.api.jobsets import jobset, with_change
from tests.servers import serving

YAML = "application/yaml"
POD = "spec.replicatedJobs.0.template.spec.template.spec"


def post(client, body, content_type="application/json", path="/api/v1/jobs", **params):
    return client.post(path, content=body if isinstance(body, (str, bytes)) else json.dumps(body),
                       headers={"Content-Type": content_type}, params=params)


def jobs_stored(admin) -> list[int]:
    return [j["id"] for j in admin.get("/api/v1/jobs").json()["items"]]


def refused(answer, status: int, field: str | None = None, says: str = "") -> dict:
    """A problem+json answer of that status, naming the field (for a 422), whose detail says `says`."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    if field is not None:
        assert [e["field"] for e in problem["errors"]] == [field], problem
    assert says in problem["detail"], problem
    return problem


def laughs(levels: int = 9) -> str:
    """The billion-laughs body: a few hundred bytes of aliases that would expand to 10^levels strings."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join(['*a' + str(i - 1)] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture
def hostile(research):
    return research


BODIES = {
    "yaml aliases": (laughs(), YAML, "aliases (*name) are not accepted"),
    "json nested 10,000 deep": (nested(10_000), "application/json", "nested more than 100 levels deep"),
    "yaml nested 10,000 deep": (nested(10_000), YAML, "nested more than 100 levels deep"),
    "json 1e5000": ('{"kind": "JobSet", "x": 1e5000}', "application/json", "'1e5000' is out of range"),
    "json Infinity": ('{"kind": "JobSet", "x": Infinity}', "application/json", "Infinity is not a JSON number"),
    "json NaN": ('{"kind": "JobSet", "x": NaN}', "application/json", "NaN is not a JSON number"),
    "yaml .inf": ("kind: JobSet\nx: .inf\n", YAML, "'.inf' is not a finite number"),
    "yaml 5,000-digit integer": ("kind: JobSet\nx: " + "9" * 5000 + "\n", YAML, "the integer has too many digits"),
    "yaml !!binary": ("kind: JobSet\nx: !!binary aGVsbG8=\n", YAML, "tag:yaml.org,2002:binary is not accepted"),
    "yaml !!set": ("kind: JobSet\nx: !!set {a, b}\n", YAML, "tag:yaml.org,2002:set is not accepted"),
    "yaml integer key": ("kind: JobSet\nmetadata:\n  labels:\n    1: x\n", YAML, "the key 1 must be a string"),
}


@pytest.mark.parametrize("case", BODIES)
@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs:dry-run"])
def test_a_body_outside_what_json_holds_is_a_400_that_says_where(admin, hostile, case, path):
    body, content_type, says = BODIES[case]
    refused(post(hostile, body, content_type, path=path), 400, says=says)
    assert jobs_stored(admin) == []


def test_a_yaml_date_stays_the_string_it_was_written_as(admin, hostile):
    text = yaml.safe_dump(with_change(jobset("dated"), f"{POD}.containers.0.env",
                                      [{"name": "SINCE", "value": "PLACEHOLDER"}])).replace("PLACEHOLDER", "2024-01-01")
    answer = post(hostile, text, YAML)
    assert answer.status_code == 201, answer.text
    manifest = admin.get(f"/api/v1/jobs/{answer.json()['items'][0]['id']}").json()["manifest"]
    assert manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "SINCE", "value": "2024-01-01"}]


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs:dry-run"])
def test_a_jobset_over_the_size_limit_is_refused(admin, hostile, path):
    big = with_change(jobset("big"), f"{POD}.containers.0.args", ["x" * 1024] * 1600)  # 1.6 MiB in a 16 MiB body
    refused(post(hostile, big, path=path), 422, "$", "the limit is 1572864 (setting ARCHIPELAGO_MAX_JOBSET_BYTES)")
    assert jobs_stored(admin) == []


def _parts(manifest: dict, count: int) -> dict:
    [rjob] = manifest["spec"]["replicatedJobs"]
    return with_change(manifest, "spec.replicatedJobs", [{**rjob, "name": f"p{i}"} for i in range(count)])


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs:dry-run"])
def test_too_many_replicated_jobs_or_split_parts_are_refused(admin, hostile, path):
    refused(post(hostile, _parts(jobset("wide", gpus=0), 501), path=path), 422, "spec.replicatedJobs",
            "at most 500 ReplicatedJobs, this one has 501")
    split = jobset("split", gpus=0, annotations={"archipelago.io/placement": "split"})
    refused(post(hostile, _parts(split, 101), path=path), 422, "spec.replicatedJobs",
            "a split job may have at most 100 parts, this one has 101")
    assert jobs_stored(admin) == []


QUANTITIES = {
    "request 1e5000": (f"{POD}.containers.0.resources.requests.cpu", "1e5000",
                       "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.requests.cpu",
                       "'1e5000' is out of range"),
    "request Infinity": (f"{POD}.containers.0.resources.requests.cpu", "Infinity",
                         "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.requests.cpu",
                         "'Infinity' is not a resource quantity"),
    "negative overhead": (f"{POD}.overhead", {"nvidia.com/gpu": "-8"},
                          "spec.replicatedJobs[0].template.spec.template.spec.overhead.nvidia.com/gpu",
                          "must not be negative"),
    "a device asked for without a limit": (f"{POD}.containers.0.resources", {"requests": {"nvidia.com/gpu": "8"}},
                                           "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources"
                                           ".limits.nvidia.com/gpu", "set a limit for nvidia.com/gpu"),
    "half a device": (f"{POD}.containers.0.resources", {"limits": {"nvidia.com/gpu": "0.5"}},
                      "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits.nvidia.com/gpu",
                      "'0.5' is not a whole number"),
}


@pytest.mark.parametrize("case", QUANTITIES)
def test_a_quantity_out_of_range_or_negative_or_one_kubernetes_refuses_is_a_422_naming_it(admin, hostile, case):
    """(A device without a limit, or a part of one: the member's API server would create none of its pods.)"""
    path, value, field, says = QUANTITIES[case]
    refused(post(hostile, with_change(jobset("q"), path, value)), 422, field, says)
    assert jobs_stored(admin) == []


def test_healthz_answers_while_a_big_body_is_decoded(settings, db):
    """The decoding and validation of a 1.5 MB YAML batch (seconds of CPU) run off the event loop."""
    batch = [jobset(f"j{i}") for i in range(1500)] + [{"kind": "NotAJobSet"}]
    body = yaml.safe_dump_all(batch)
    with serving(create_app(settings, db, run_loops=False)) as url, \
            httpx.Client(base_url=url, headers={"Authorization": "Bearer admin-test-token"}) as admin:
        assert admin.post("/api/v1/tenants", json={"name": "t"}).status_code == 201
        assert admin.post("/api/v1/queues", json={"name": "q", "tenant": "t"}).status_code == 201
        answers: list[httpx.Response] = []
        done = threading.Event()

        def big() -> None:
            with httpx.Client(base_url=url, headers=admin.headers, timeout=120) as client:
                answers.append(client.post("/api/v1/jobs", content=body, params={"tenant": "t"},
                                           headers={"Content-Type": YAML}))
            done.set()

        worker = threading.Thread(target=big)
        worker.start()
        probes: list[tuple[float, bool]] = []  # (seconds, answered while the big request was in flight)
        with httpx.Client(base_url=url) as prober:
            while not done.is_set():
                started = time.perf_counter()
                assert prober.get("/healthz").status_code == 200
                probes.append((time.perf_counter() - started, not done.is_set()))
        worker.join()
        refused(answers[0], 422, "[1500].apiVersion")
        # Blocked, the loop answers the probes sent while the body uploads, then none until the batch is refused.
        in_flight = [seconds for seconds, during in probes if during]
        assert len(in_flight) >= 10, probes
        assert max(seconds for seconds, _ in probes) < 2.0, probes  # a liveness probe's budget, with a wide margin
        assert admin.get("/api/v1/jobs").json()["items"] == []


META = "spec.replicatedJobs[0].template.spec.template.spec"
FIELDS = {
    "label key": ("metadata.labels", {"-bad": "x"}, "metadata.labels['-bad']", "invalid label key '-bad'"),
    "label value": ("metadata.labels", {"app": "a b"}, "metadata.labels['app']", "invalid value 'a b' of label 'app'"),
    "reserved label in capitals": ("metadata.labels", {"Archipelago.io/job-id": "1"},
                                   "metadata.labels['Archipelago.io/job-id']", "invalid label key"),
    "reserved annotation in capitals": ("metadata.annotations", {"ARCHIPELAGO.IO/placement": "split"},
                                       "metadata.annotations", "invalid annotation key 'ARCHIPELAGO.IO/placement'"),
    "annotations over 256 KiB": ("metadata.annotations", {"note": "x" * (256 * 1024)}, "metadata.annotations",
                                 "the annotations take 262148 bytes; Kubernetes allows at most 262144"),
    "pod annotations over 256 KiB": ("spec.replicatedJobs.0.template.spec.template.metadata",
                                     {"annotations": {"note": "x" * (300 * 1024)}},
                                     "spec.replicatedJobs[0].template.spec.template.metadata.annotations",
                                     "Kubernetes allows at most 262144"),
    "node selector": (f"{POD}.nodeSelector", {"zone": "eu west"}, f"{META}.nodeSelector['zone']", "invalid value"),
    "container name": (f"{POD}.containers.0.name", "Trainer_1", f"{META}.containers[0].name",
                       "the container name 'Trainer_1' must be a DNS-1123 label"),
    "container name twice": (f"{POD}.initContainers", [{"name": "trainer", "image": "x"}],
                             f"{META}.containers[0].name", "'trainer' is used twice"),
    "replicas over int32": ("spec.replicatedJobs.0.replicas", 2**31, "spec.replicatedJobs[0].replicas",
                            "must be at most 2147483647"),
    "maxRestarts over int32": ("spec.failurePolicy", {"maxRestarts": 2**31}, "spec.failurePolicy.maxRestarts",
                               "≥ 0 and ≤ 2147483647"),
    "5,000-digit tier": ("metadata.annotations", {"archipelago.io/network-topology-mode": "hard",
                                                  "archipelago.io/highest-tier-allowed": "9" * 5000},
                         "metadata.annotations['archipelago.io/highest-tier-allowed']", "must be a tier number"),
}


@pytest.mark.parametrize("case", FIELDS)
def test_what_kube_apiserver_would_refuse_is_a_422_naming_the_field(admin, hostile, case):
    path, value, field, says = FIELDS[case]
    for endpoint in ("/api/v1/jobs", "/api/v1/jobs:dry-run"):
        refused(post(hostile, with_change(jobset("k"), path, value), path=endpoint), 422, field, says)
    assert jobs_stored(admin) == []


@pytest.mark.parametrize("since", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_a_time_with_no_utc_equivalent_is_a_422(hostile, since):
    refused(hostile.get("/api/v1/events", params={"since": since}), 422, "since", "has no UTC equivalent")


@pytest.mark.parametrize("quota", ["Infinity", "1e5000"])
def test_an_admin_queue_quota_out_of_range_is_a_422(admin, quota):
    assert admin.post("/api/v1/tenants", json={"name": "t"}).status_code == 201
    body = '{"name": "q", "tenant": "t", "nominal_quota": {"nvidia.com/gpu": %s}}' % quota
    refused(post(admin, body, path="/api/v1/queues"), 422, "nominal_quota.nvidia.com/gpu", "is not a resource quantity")
    assert [q["name"] for q in admin.get("/api/v1/queues").json() if q["tenant"] == "t"] == []


def test_a_socks_proxy_in_a_kubeconfig_is_a_422(admin):
    kubeconfig = yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443", "proxy-url": "socks5://10.0.0.2"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}], "current-context": "ctx"})
    refused(admin.post("/api/v1/clusters", json={"name": "socks", "kubeconfig": kubeconfig}), 422,
            says="`proxy-url` is refused")
    assert admin.get("/api/v1/clusters").json() == []


def test_another_tenants_job_is_refused_before_its_manifest_is_read(admin, hostile, db):
    with make_tenant(admin, "other") as other:
        job_id = post(other, jobset("theirs")).json()["items"][0]["id"]
    statements: list[str] = []

    def record(conn, cursor, statement, *_):
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        refused(hostile.get(f"/api/v1/jobs/{job_id}"), 404, says=f"job {job_id} does not exist")
        refused(hostile.delete(f"/api/v1/jobs/{job_id}"), 404, says=f"job {job_id} does not exist")
        assert [j["id"] for j in admin.get("/api/v1/jobs").json()["items"]] == [job_id]  # a listing shows no manifest
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert any("FROM jobs" in s for s in statements)
    assert not [s for s in statements if "jobs.manifest" in s]


def test_cancel_behind_a_long_sqlite_write_answers_409_with_retry_advice(migrated_sqlite_template, tmp_path):
    """SQLite only: PostgreSQL locks rows, not the database."""
    path = tmp_path / "busy.db"
    shutil.copy(migrated_sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 0.2})
    busy = Database(engine, make_sessionmaker(engine))
    local = Settings(database_url=f"sqlite:///{path}", secret_key=Fernet.generate_key().decode(),
                     admin_token="admin-test-token", _env_file=None)
    with TestClient(create_app(local, busy, run_loops=False), headers=ADMIN) as admin:
        with make_tenant(admin, "t") as tenant:
            job_id = post(tenant, jobset("j", gpus=0)).json()["items"][0]["id"]
            writer = sqlite3.connect(path)
            try:
                writer.execute("BEGIN IMMEDIATE")  # another write holds the database
                answer = tenant.delete(f"/api/v1/jobs/{job_id}")
            finally:
                writer.rollback()
                writer.close()
            refused(answer, 409, says="the database is busy with another write; nothing was changed")
            assert answer.headers["retry-after"] == "5"
            assert tenant.get(f"/api/v1/jobs/{job_id}").json()["state"] == "Queued"
            assert tenant.delete(f"/api/v1/jobs/{job_id}").json()["state"] == "Cancelled"
    busy.dispose()
