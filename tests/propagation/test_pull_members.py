"""Pull members: a cluster the broker cannot reach runs `archipelago agent`, which calls out to the broker
over real HTTP with the token minted at registration, and works on its own cluster (the simulator's, over
real HTTPS) with its own client. The broker's loops never call such a member."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from broker.cli.client import ApiClient, ClientError
from broker.process.agent import Agent
from broker.process.testing import TENANTS, jobset
from broker.services.inventory import ClusterHealthService
from broker.store.db.models import Cluster, Event, utcnow
from clusters import jobsets
from clusters.member import MemberClient
from clusters.sim.resources import NAMESPACES, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES
from tests.propagation.conftest import ADMIN, Federation
from tests.servers import serving

PULL = "us-east"  # the simulator's member that only an agent reaches
CLI = str(Path(sys.executable).parent / "archipelago")
ENFORCE = "pod-security.kubernetes.io/enforce"
ON_PULL = {"archipelago.io/cluster-selector": "region=us", "sim.archipelago.io/duration": "60s"}


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"not_ready_grace": 30.0})


class PullFederation(Federation):
    """eu-west registered in push mode, us-east in pull mode; the broker's API also over real HTTP, for agents."""

    url: str
    token: str

    def agent(self, token: str | None = None) -> Agent:
        """A fresh agent of the pull member, with clients of its own (as after a restart)."""
        agent = Agent(ApiClient(self.url, token or self.token), MemberClient.from_kubeconfig(self.sim.kubeconfig(PULL)))
        self._agents.append(agent)
        return agent

    def until(self, agent: Agent, done, passes: int = 10) -> None:
        """Agent passes, each followed by a broker step and the member's controllers acting, until `done`."""
        for _ in range(passes):
            if done():
                return
            agent.run_once()
            self.time.settle()
            self.step()
        assert done(), f"not done after {passes} agent passes"

    def cluster(self, name: str = PULL) -> Cluster:
        with self.db.sessions() as session:
            return session.scalar(select(Cluster).where(Cluster.name == name))

    def cluster_reasons(self, name: str = PULL) -> list[str]:
        with self.db.sessions() as session:
            return list(session.scalars(select(Event.reason).where(Event.kind == "cluster", Event.object_id == name)
                                        .order_by(Event.id)))


@pytest.fixture
def pull(sim, settings, db) -> Iterator[PullFederation]:
    with TestClient(create_app(settings, db, run_loops=False), headers=ADMIN) as api, \
            serving(create_app(settings, db, run_loops=False)) as url:
        fed = PullFederation(sim, api, db, settings)
        fed.url, fed.settings, fed._agents = url, settings, []
        for tenant, queue in TENANTS:
            assert api.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}).status_code == 201
            assert api.post("/api/v1/queues", json={"name": queue, "tenant": tenant}).status_code == 201
        answer = api.post("/api/v1/clusters", json={"name": "eu-west", "kubeconfig": sim.kubeconfig("eu-west"),
                                                    "labels": {"region": "eu"}})
        assert answer.status_code == 201, answer.text
        answer = api.post("/api/v1/clusters", json={"name": PULL, "mode": "pull", "labels": {"region": "us"}})
        assert answer.status_code == 201, answer.text
        fed.token = answer.json()["agent_token"]
        try:
            yield fed
        finally:
            for agent in fed._agents:
                agent.member.close()
            fed.close()


# (1) registration, the agent's token, heartbeats -> health --------------------------------------------------

def test_a_pull_member_is_registered_without_a_kubeconfig_and_its_token_is_shown_once_and_kept_hashed(pull):
    view = pull.api.get(f"/api/v1/clusters/{PULL}").json()
    assert (view["mode"], view["state"], view["api_server"]) == ("pull", "Pending", None)
    assert "agent_token" not in view and pull.token not in str(pull.api.get("/api/v1/clusters").json())
    stored = pull.cluster()
    assert stored.agent_token_hash == hashlib.sha256(pull.token.encode()).hexdigest()
    assert stored.kubeconfig_encrypted == b""
    assert pull.cluster_reasons() == ["Registered"]


@pytest.mark.parametrize("body, field", [
    ({"name": "edge", "mode": "pull", "kubeconfig": "apiVersion: v1"}, "kubeconfig"),
    ({"name": "edge", "mode": "pull", "context": "c"}, "context"),
    ({"name": "edge"}, "kubeconfig"),
])
def test_what_does_not_fit_the_mode_is_refused_by_field(pull, body, field):
    answer = pull.api.post("/api/v1/clusters", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == field
    assert pull.api.get("/api/v1/clusters/edge").status_code == 404


def test_the_agent_endpoints_take_only_an_agent_token_and_each_speaks_for_its_own_cluster(pull):
    other = pull.api.post("/api/v1/clusters", json={"name": "edge", "mode": "pull"}).json()["agent_token"]
    for token in ("admin-test-token", "ap_not-a-token", ""):
        with pytest.raises(ClientError) as refused:
            ApiClient(pull.url, token or "x").post("/api/v1/agent/heartbeat", json={})
        assert refused.value.status == 401
    assert pull.agent().run_once() == {"cluster": PULL, "state": "Pending"}
    assert pull.cluster().last_heartbeat is not None and pull.cluster("edge").last_heartbeat is None
    assert ApiClient(pull.url, other).post("/api/v1/agent/heartbeat", json={})["cluster"] == "edge"
    with pytest.raises(ClientError) as refused:
        ApiClient(pull.url, pull.token).get("/api/v1/clusters")  # an agent's token opens nothing else
    assert refused.value.status == 401


def test_heartbeats_are_the_pull_members_health_and_the_broker_never_calls_it(pull):
    agent = pull.agent()
    agent.run_once()
    assert pull.cluster().kubernetes_version == agent.member.version()
    before = len(pull.sim.requests(PULL))
    clock = {"now": utcnow()}
    health = ClusterHealthService(pull.db, pull.settings, pull.members, now=lambda: clock["now"])
    try:
        pull.step()  # inventory sync, scheduler, dispatcher, status: none calls the pull member
        assert health.run_once()["eu-west"] == "Ready"
        assert pull.cluster().state == "Ready"  # heard from within the grace: nothing to record
        clock["now"] += timedelta(seconds=31)
        assert health.run_once()[PULL] == "NotReady"
        assert "its agent has not called in for 3" in pull.cluster().last_error
        assert pull.cluster_reasons()[-1] == "MemberNotReady"
        assert len(pull.sim.requests(PULL)) == before  # only its agent ever calls it
        agent.run_once()
        assert (pull.cluster().state, pull.cluster().last_error) == ("Ready", None)
        assert pull.cluster_reasons()[-1] == "MemberReady"
    finally:
        health.stop()


def test_a_pull_member_never_heard_from_goes_not_ready_after_the_grace(pull):
    created = pull.cluster().created_at
    health = ClusterHealthService(pull.db, pull.settings, pull.members, now=lambda: created + timedelta(seconds=31))
    try:
        assert health.run_once()[PULL] == "NotReady"
    finally:
        health.stop()
    assert pull.cluster().state == "NotReady"


def test_the_cli_mints_the_token_and_the_agent_command_heartbeats_with_it(pull, tmp_path):
    env = {"ARCHIPELAGO_SERVER": pull.url, "ARCHIPELAGO_TOKEN": "admin-test-token",
           "ARCHIPELAGO_CONFIG": "/nonexistent", "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    added = subprocess.run([CLI, "clusters", "add", "edge", "--mode", "pull"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip().splitlines()[-1].split(": ")[-1]
    assert token.startswith("apa_")
    refused = subprocess.run([CLI, "clusters", "add", "edge2", "--mode", "pull",
                              "--kubeconfig", "/dev/null"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "refused in pull mode" in refused.stderr
    kubeconfig = tmp_path / "member.kubeconfig"
    kubeconfig.write_text(pull.sim.kubeconfig(PULL))
    agent = subprocess.Popen([CLI, "agent", "--broker", pull.url, "--token", token,
                              "--kubeconfig", str(kubeconfig), "--interval", "0.2"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while pull.cluster("edge").last_heartbeat is None:
            assert agent.poll() is None, agent.communicate()
            assert time.monotonic() < deadline, "the agent never called in"
            time.sleep(0.05)
        assert pull.cluster("edge").kubernetes_version
    finally:
        agent.terminate()
        agent.wait(30)


# (2) inventory reports ----------------------------------------------------------------------------------

def test_the_agents_inventory_report_makes_the_same_rows_as_a_push_members_sync(pull):
    pull.step()  # eu-west, the same scenario in push mode, synced by the broker
    agent = pull.agent()
    agent.run_once()
    pushed, pulled = (pull.api.get(f"/api/v1/clusters/{name}").json() for name in ("eu-west", PULL))
    assert pulled["state"] == "Ready" and pulled["nodes"] == 16
    assert pull.cluster_reasons()[-1] == "Synced"
    for key in ("nodes", "capacity", "hypernodes", "hypernode_source", "warnings"):
        assert pulled[key] == pushed[key], key
    assert agent.report_inventory() is False  # nothing changed: nothing sent
    pull.sim.others_pods(PULL, {"cpu": "8", "nvidia.com/gpu": "2"}, nodes=3)
    assert agent.report_inventory() is True
    used = pull.api.get(f"/api/v1/clusters/{PULL}").json()["capacity"]["nvidia.com/gpu"]["used"]
    assert used == "6"


def test_an_inventory_that_is_not_what_an_api_server_lists_is_refused(pull):
    with pytest.raises(ClientError) as refused:
        ApiClient(pull.url, pull.token).post("/api/v1/agent/inventory", json={"nodes": [{"spec": {}}], "pods": []})
    assert refused.value.status == 422 and "inventory" in str(refused.value)
    assert pull.cluster().state == "Pending"


# (3) assigned placements applied and deleted, status reported ------------------------------------------------

def test_a_jobset_placed_on_a_pull_member_runs_to_succeeded_through_its_agent(pull):
    agent = pull.agent()
    agent.run_once()  # Ready, with its inventory
    job = pull.submit(jobset("edge-train", annotations=ON_PULL))
    pull.step()
    assert [(p.cluster_name, p.state) for p in pull.placements(job)] == [(PULL, "Decided")]
    assert pull.copies(job) == []  # the broker never calls the member: nothing until its agent calls in
    pull.until(agent, lambda: pull.state(job) == "Running")
    [copy] = pull.copies(job)
    assert copy["cluster"] == PULL and copy["metadata"]["labels"]["archipelago.io/placement-id"] == \
        str(pull.placements(job)[0].id)
    pull.sim.advance(61)
    pull.until(agent, lambda: pull.state(job) == "Succeeded")
    assert [p.state for p in pull.placements(job)] == ["Succeeded"]
    assert pull.copies(job, cluster="eu-west") == []


def test_the_agent_makes_the_tenants_namespace_with_its_level_relabels_it_and_refuses_one_it_did_not_make(pull):
    member = pull.sim.cluster(PULL)
    with member.lock:
        member.create(NAMESPACES, "", {"metadata": {"name": "team-b"}}, "kubectl")  # someone else's
    agent = pull.agent()
    agent.run_once()
    job = pull.submit(jobset("edge-train", annotations=ON_PULL))
    foreign = pull.submit(jobset("edge-foreign", namespace="team-b", annotations=ON_PULL))
    pull.step()
    pull.until(agent, lambda: pull.state(job) == "Running" and pull.state(foreign) == "Failed")
    with member.lock:
        labels = member.get(NAMESPACES, "", "team-a")["metadata"]["labels"]
    assert (labels[ENFORCE], labels["archipelago.io/tenant"]) == ("baseline", "team-a")
    assert "namespace team-b exists on this member and Archipelago did not create it" in pull.job(foreign)["reason"]
    assert pull.api.patch("/api/v1/tenants/team-a", json={"pod_security": "restricted"}).status_code == 200
    agent.run_once()
    with member.lock:
        assert member.get(NAMESPACES, "", "team-a")["metadata"]["labels"][ENFORCE] == "restricted"


def test_a_copy_that_ends_between_two_agent_passes_is_recorded_finished_and_runs_once(pull):
    """The JobSet asks `ttlSecondsAfterFinished: 0`; the agent only ever lists: the copy, which carries no TTL,
    is still there at its next list, finished, and its agent deletes it once the broker has recorded the verdict."""
    agent = pull.agent()
    agent.run_once()
    manifest = jobset("edge-once", annotations=ON_PULL)
    manifest["spec"]["ttlSecondsAfterFinished"] = 0
    job = pull.submit(manifest)
    pull.step()
    pull.until(agent, lambda: pull.state(job) == "Running")
    pull.sim.advance(61)  # it ends between two passes of the agent: only the member's controllers act
    pull.sim.settle()
    pull.sim.settle()
    pull.until(agent, lambda: pull.state(job) in ("Succeeded", "Failed"))
    assert pull.state(job) == "Succeeded"
    pull.until(agent, lambda: pull.copies(job) == [])
    reasons = pull.reasons(job)
    assert reasons.count("Applied") == 1 and "CopyVanished" not in reasons and "CopyDeleted" in reasons


def test_a_cancelled_jobs_copy_is_deleted_by_the_agent_and_a_copy_nobody_lists_is_swept(pull):
    agent = pull.agent()
    agent.run_once()
    job = pull.submit(jobset("edge-cancel", annotations={**ON_PULL, "sim.archipelago.io/duration": "1h"}))
    pull.step()
    pull.until(agent, lambda: pull.state(job) == "Running")
    stray = jobset("stray", annotations={"sim.archipelago.io/duration": "1h"})  # a copy of a placement long gone
    stray["metadata"]["labels"].update({"archipelago.io/job-id": "999", "archipelago.io/placement-id": "999"})
    jobsets.apply(agent.member, stray)
    agent.run_once()
    assert [c["metadata"]["name"] for c in pull.copies(cluster=PULL)] == ["edge-cancel"]
    assert pull.api.delete(f"/api/v1/jobs/{job}").status_code == 202
    pull.step()
    pull.until(agent, lambda: pull.state(job) == "Cancelled")
    assert pull.copies(job) == [] and [p.state for p in pull.placements(job)] == ["Deleted"]


def test_outcomes_reported_twice_change_nothing_the_second_time(pull):
    agent = pull.agent()
    agent.run_once()
    job = pull.submit(jobset("edge-twice", annotations=ON_PULL))
    pull.step()
    work = agent.broker.post("/api/v1/agent/work")
    [item] = work["apply"]
    assert work["kept"] == [item["placement_id"]] and pull.placements(job)[0].state == "Applying"
    agent.label(work["namespaces"])
    applied = jobsets.apply(agent.member, item["jobset"])
    report = {"placement_id": item["placement_id"], "action": "apply", "kind": "done", "jobset": applied}
    for _ in range(2):
        agent.broker.post("/api/v1/agent/outcomes", json={"outcomes": [report]})
    assert [p.state for p in pull.placements(job)] == ["Starting"]
    assert pull.reasons(job).count("Applied") == 1
    assert agent.broker.post("/api/v1/agent/work")["apply"] == []


# (4) restarts and fail-over ---------------------------------------------------------------------------------

def test_an_agent_restarted_after_applying_but_before_reporting_adopts_its_copy(pull):
    first = pull.agent()
    first.run_once()
    job = pull.submit(jobset("edge-restart", annotations=ON_PULL))
    pull.step()
    work = first.broker.post("/api/v1/agent/work")
    [item] = work["apply"]  # Applying committed; the agent applies ...
    first.label(work["namespaces"])
    jobsets.apply(first.member, item["jobset"])  # ... and dies before it reports
    assert pull.placements(job)[0].state == "Applying"
    second = pull.agent()  # a new process: new clients, nothing remembered
    pull.until(second, lambda: pull.state(job) == "Running")
    [copy] = pull.copies(job)
    assert pull.placements(job)[0].member_uid == copy["metadata"]["uid"]
    assert any("adopted" in e["message"] or "Applied" == e["reason"] for e in pull.job(job)["events"])


def test_a_pull_member_whose_agent_goes_silent_fails_over_and_its_stale_copy_is_fenced(pull):
    agent = pull.agent()
    agent.run_once()
    pull.api.post("/api/v1/clusters/eu-west/cordon")  # the first placement goes to the pull member
    job = pull.submit(jobset("edge-failover", annotations={"sim.archipelago.io/duration": "1h"}))
    pull.step()
    pull.until(agent, lambda: pull.state(job) == "Running")
    [first] = pull.placements(job)
    assert first.cluster_name == PULL
    pull.api.post("/api/v1/clusters/eu-west/uncordon")
    pull.step(31)  # the agent is silent past the grace (30 s): NotReady, then failed over
    pull.health.run_once()
    assert pull.cluster().state == "NotReady"
    pull.run_until(lambda: any(p.cluster_name == "eu-west" and p.state == "Running" for p in pull.placements(job)))
    assert [c["cluster"] for c in pull.copies(job)] == ["eu-west", PULL]  # the partitioned copy still runs
    assert pull.placements(job)[0].state not in ("Applying", "Starting", "Running")
    agent.run_once()  # the partition heals: its first pass deletes the copy the broker no longer lists for it
    pull.time.settle()
    assert [c["cluster"] for c in pull.copies(job)] == ["eu-west"]
    assert all(p.state != "Running" or p.cluster_name == "eu-west" for p in pull.placements(job))


def test_pods_that_never_become_ready_on_a_pull_member_are_evicted_and_its_agent_deletes_the_copy(pull):
    agent = pull.agent()
    agent.run_once()
    pull.sim.cluster(PULL).unpullable_images = ("registry.invalid/*",)
    stuck = jobset("edge-stuck", annotations={**ON_PULL, "archipelago.io/startup-timeout": "60s"})
    stuck["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "registry.invalid/train:1")
    job = pull.submit(stuck)
    pull.step()
    pull.until(agent, lambda: pull.state(job) == "Starting")
    pull.step(30)
    assert pull.state(job) == "Starting"  # not yet: 60 s
    pull.step(31)
    [evicted] = [e["message"] for e in pull.job(job)["events"] if e["reason"] == "Evicted"]
    assert evicted.startswith(f"on {PULL}: pods not all ready within 60s (0 of 1 Jobs of workers ready; its member "
                              "is in pull mode: its agent does not say which pods are waiting)")
    assert pull.state(job) == "Queued" and [c["cluster"] for c in pull.copies(job)] == [PULL]
    pull.until(agent, lambda: pull.copies(job) == [])  # the agent deletes the evicted copy at its next pass
    assert [p.state for p in pull.placements(job)] == ["Deleted"]


def test_a_broker_killed_while_handing_out_work_resumes_with_one_copy(sim, tmp_path):
    from cryptography.fernet import Fernet

    from broker.services.outcomes import CRASH_AT_ENV
    from broker.process.testing import Broker, wait_for

    broker = Broker(tmp_path, database_url=f"sqlite:///{tmp_path / 'broker.db'}",
                    secret_key=Fernet.generate_key().decode(), env={"ARCHIPELAGO_NOT_READY_GRACE": "300"})
    broker.start({CRASH_AT_ENV: "applying"})
    member = MemberClient.from_kubeconfig(sim.kubeconfig(PULL))
    try:
        broker.api.post("/api/v1/tenants", json={"name": "team-a", "namespaces": ["team-a"]}).raise_for_status()
        broker.api.post("/api/v1/queues", json={"name": "research", "tenant": "team-a"}).raise_for_status()
        answer = broker.api.post("/api/v1/clusters", json={"name": PULL, "mode": "pull", "labels": {"region": "us"}})
        answer.raise_for_status()
        agent = Agent(ApiClient(broker.url, answer.json()["agent_token"]), member)
        agent.run_once()
        job = broker.api.post("/api/v1/jobs", json=jobset("edge-crash", annotations=ON_PULL),
                              params={"tenant": "team-a"}).json()["items"][0]["id"]
        wait_for(lambda: broker.state(job) == "Admitted", "the job to be placed")
        with pytest.raises(ClientError):
            agent.run_once()  # the broker commits Applying, then dies before it answers
        assert broker.killed() == -9, broker.log()
        assert not [c for c in jobsets.list_owned(member)[0]]  # nothing applied: the agent heard nothing
        broker.start()
        wait_for(lambda: broker.state(job) == "Running", "the job to run", tick=lambda: (agent.run_once(),
                                                                                       sim.settle()))
        [copy] = jobsets.list_owned(member)[0]
        sim.advance(61)
        wait_for(lambda: broker.state(job) == "Succeeded", "the job to succeed", tick=agent.run_once)
        assert [c["metadata"]["uid"] for c in jobsets.list_owned(member)[0]] == [copy["metadata"]["uid"]]
    finally:
        member.close()
        broker.stop()


def test_deploy_agent_yaml_is_rendered_and_grants_the_agent_what_the_broker_needs_on_a_push_member():
    from clusters import access

    assert (Path(__file__).resolve().parents[2] / "deploy" / "agent.yaml").read_text() == access.agent_yaml()
    role = next(o for o in access.agent_objects() if o["kind"] == "ClusterRole")
    assert role["rules"] == access.cluster_role_rules()
    [deployment] = [o for o in access.agent_objects() if o["kind"] == "Deployment"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"} and deployment["spec"]["replicas"] == 1


@pytest.mark.parametrize("scenario", [{
    "defaults": {"node": {"cpu": "64", "memory": "512Gi", "pods": "110"}, "topology": {"leaf": 2, "spine": 1},
                 "duration": "60s", "version": "v1.34.1"},
    "clusters": [{"name": "eu-west", "nodes": 1}, {"name": PULL, "nodes": 1, "devices": {
        "driver": "gpu.nvidia.com", "count": 4}}]}])
def test_a_pull_members_agent_sends_the_claim_templates_before_the_jobset_and_its_pods_get_devices(pull):
    from tests.propagation.test_devices import claiming, devices_of, exactly, template

    agent = pull.agent()
    agent.run_once()  # Ready, with its inventory: its devices too
    answer = pull.api.post("/api/v1/jobs", params={"tenant": "team-a"}, json={"kind": "List", "apiVersion": "v1", "items": [
        claiming("edge-gpus", "gpus"), template("gpus", exactly("gpu", "gpu.nvidia.com", 2))]})
    assert answer.status_code == 201, answer.text
    job = answer.json()["items"][0]["id"]
    pull.until(agent, lambda: pull.state(job) == "Running")
    member = pull.sim.cluster(PULL)
    with member.lock:
        claims = member.list(RESOURCECLAIMS, "team-a", None, None)[0]
        [made] = member.list(RESOURCECLAIMTEMPLATES, "team-a", None, None)[0]
    assert len(devices_of(claims)) == 2
    assert made["metadata"]["ownerReferences"][0]["name"] == "edge-gpus"
