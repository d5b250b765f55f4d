"""The member client (clusters/member.py) over real HTTP(S), against the simulator and real sockets:
the `kubernetes` package's typed APIs, errors classified by what they are, and the manners a member's
API server asks for (relists from the watch cache, watch bookmarks, Retry-After, a request budget),
asserted on the simulator's own request log.

CI also runs this file with the oldest `kubernetes` package pyproject.toml allows (`make
test-min-client`, with --noconftest): it needs the simulator only, no database.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import pytest

from broker.services.inventory import MemberMirror, relist_all
from clusters import jobsets
from clusters.budget import RequestBudget
from clusters.kubeconfig import KubeconfigPolicy
from clusters.member import JOBSETS, NAMESPACES, NODES, MemberClient, MemberError
from clusters.sim.testing import SimHandle, running_simulator
from clusters.sim.tls import kubeconfig, make_serving_cert
from tests.servers import serving

TOKEN = "member-client-test-token-0123456789"
SCENARIO = {
    "defaults": {"node": {"cpu": "8", "memory": "32Gi"}, "token": TOKEN, "hypernodes": "none"},
    "clusters": [{"name": "big", "nodes": 520}, {"name": "crd", "nodes": 4, "hypernodes": "crd"},
                 {"name": "jobs", "nodes": 2}, {"name": "faulty", "nodes": 1}, {"name": "quiet", "nodes": 1},
                 {"name": "shared", "nodes": 1}, {"name": "patient", "nodes": 1}, {"name": "budget", "nodes": 1}],
}
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "train", "namespace": "team-a"},
          "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {"template": {"spec": {
              "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}}]}}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with running_simulator(SCENARIO) as handle:
        yield handle


def _client(sim: SimHandle, name: str, **options) -> MemberClient:
    return MemberClient.from_kubeconfig(sim.kubeconfig(name), **options)


def _since(sim: SimHandle, name: str, start: float, path: str | None = None):
    return [r for r in sim.requests(name) if r.at >= start and (path is None or r.path == path)]


def test_a_consistent_list_pages_through_etcd_and_a_relist_takes_the_watch_cache_whole(sim):
    client = _client(sim, "big")
    try:
        start = time.monotonic()
        items, version = client.list(NODES)
        consistent = _since(sim, "big", start)
        start = time.monotonic()
        cached, cached_version = client.list(NODES, from_cache=True)
        relist = _since(sim, "big", start)
    finally:
        client.close()
    assert len(items) == len(cached) == 520 and version and cached_version
    assert [(r.query.get("limit"), "continue" in r.query, r.query.get("resourceVersion")) for r in consistent] == [
        ("500", False, None), ("500", True, None)]
    assert [(r.path, r.query.get("resourceVersion")) for r in relist] == [("/api/v1/nodes", "0")]


def test_the_inventorys_relists_and_the_status_relist_carry_resource_version_0(sim):
    client = _client(sim, "crd")
    try:
        start = time.monotonic()
        relist_all(client, MemberMirror())
        jobsets.list_owned(client, from_cache=True)
    finally:
        client.close()
    lists = [r for r in _since(sim, "crd", start) if r.path.rsplit("/", 1)[-1] in ("nodes", "pods", "hypernodes", "jobsets")]
    assert sorted(r.path for r in lists) == ["/api/v1/nodes", "/api/v1/pods", "/apis/jobset.x-k8s.io/v1alpha2/jobsets",
                                            "/apis/topology.volcano.sh/v1alpha1/hypernodes"]
    assert all(r.query.get("resourceVersion") == "0" for r in lists), [r.query for r in lists]


def test_a_watch_asks_for_bookmarks_and_yields_changes(sim):
    client = _client(sim, "jobs")
    try:
        _, version = client.list(NODES)
        start = time.monotonic()
        stream = client.watch(NODES, version, timeout_seconds=30)
        sim.cluster("jobs").cordon("node-00")
        try:
            event = next(e for e in stream if e["type"] == "MODIFIED")
        finally:
            stream.close()
    finally:
        client.close()
    assert event["object"]["metadata"]["name"] == "node-00" and event["object"]["spec"]["unschedulable"]
    [watch] = _since(sim, "jobs", start, "/api/v1/nodes")
    assert (watch.query["watch"], watch.query["allowWatchBookmarks"], watch.query["resourceVersion"]) == (
        "true", "true", version)


def test_apply_read_and_delete_through_the_typed_apis(sim):
    client = _client(sim, "jobs")
    try:
        client.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}, "test")
        applied = client.apply(JOBSETS, JOBSET, "test")
        assert client.read(JOBSETS, "train", "team-a")["metadata"]["uid"] == applied["metadata"]["uid"]
        assert applied["metadata"]["managedFields"][0]["manager"] == "test"
        with pytest.raises(MemberError) as conflict:
            client.delete(JOBSETS, "train", "team-a", uid="not-its-uid")
        assert conflict.value.status == 409
        client.delete(JOBSETS, "train", "team-a", propagation="Foreground", uid=applied["metadata"]["uid"])
        sim.settle()
        with pytest.raises(MemberError) as gone:
            client.read(JOBSETS, "train", "team-a")
    finally:
        client.close()
    assert (gone.value.reason, gone.value.status) == ("NotFound", 404)
    assert "get jobsets.jobset.x-k8s.io team-a/train" in str(gone.value)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _forbidding(scope, receive, send) -> None:
    """An API server that forbids everything, as RBAC does to an identity without a grant."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 403, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"kind":"Status","apiVersion":"v1","status":"Failure",'
                b'"message":"nodes is forbidden: User \\"x\\" cannot list resource \\"nodes\\"","code":403}'})


def _error(text: str, call=lambda client: client.list(NODES), policy=KubeconfigPolicy(), timeout=5.0) -> MemberError:
    client = MemberClient.from_kubeconfig(text, policy=policy, timeout=timeout)
    try:
        with pytest.raises(MemberError) as caught:
            call(client)
    finally:
        client.close()
    return caught.value


def test_each_failure_is_classified_by_what_it_is(sim):
    server = sim.cluster_url("faulty")
    ca = make_serving_cert("127.0.0.1").ca_pem
    other_ca = _error(kubeconfig("faulty", server, TOKEN, make_serving_cert("127.0.0.1").ca_pem))
    assert other_ca.reason == "TLS" and "certificate verify failed" in str(other_ca)
    refused = _error(kubeconfig("x", f"https://127.0.0.1:{_closed_port()}", TOKEN, ca))
    assert refused.reason == "Unreachable" and "Connection refused" in str(refused)
    unknown = _error(kubeconfig("x", "https://no-such-member.invalid:6443", TOKEN, ca))
    assert unknown.reason == "Unreachable" and "no-such-member.invalid" in str(unknown)
    bad_token = _error(sim.kubeconfig("faulty").replace(TOKEN, "not-the-token"))
    assert (bad_token.reason, bad_token.status) == ("Unauthorized", 401)
    assert "list nodes: " + server + " rejected the credentials (401 Unauthorized)" in str(bad_token)
    missing = _error(sim.kubeconfig("faulty"), lambda client: client.read(JOBSETS, "none", "default"))
    assert (missing.reason, missing.status) == ("NotFound", 404)
    with serving(_forbidding) as url:
        forbidden = _error(kubeconfig("x", url, TOKEN, None), policy=KubeconfigPolicy(allow_insecure_tls=True))
    assert (forbidden.reason, forbidden.status) == ("Forbidden", 403) and "cannot list resource" in str(forbidden)
    sim.make_failing("faulty", 503)
    try:
        failing = _error(sim.kubeconfig("faulty"))
    finally:
        sim.heal("faulty")
    assert (failing.reason, failing.status) == ("ServerError", 503)
    sim.make_slow("faulty", 30)
    try:
        slow = _error(sim.kubeconfig("faulty"), timeout=0.5)
    finally:
        sim.heal("faulty")
    assert slow.reason == "Timeout" and "did not answer in time" in str(slow)
    assert TOKEN not in " ".join(str(e) for e in (other_ca, refused, unknown, bad_token, missing, forbidden, slow))


def test_a_429_with_retry_after_2_silences_the_member_for_2_seconds(sim):
    client = _client(sim, "quiet")
    try:
        start = time.monotonic()
        sim.throttle("quiet", retry_after=2, seconds=1.0)
        version = client.version()  # answered after the pause
    finally:
        client.close()
    seen = _since(sim, "quiet", start)
    assert version and [r.throttled for r in seen] == [True, False]
    assert seen[1].at - seen[0].at >= 2


def test_the_pause_a_429_asks_for_holds_every_lane_of_that_member(sim):
    client = _client(sim, "shared")  # as MemberClients shares one client among the inventory, status and dispatcher
    try:
        start = time.monotonic()
        sim.throttle("shared", retry_after=2, seconds=0.1)
        client.version()  # the health probe's lane meets the 429
        probe_answered = time.monotonic()
        relist_all(client, MemberMirror())  # the inventory's lane, after the probe: it never saw a 429 itself
    finally:
        client.close()
    throttled = [r for r in _since(sim, "shared", start) if r.throttled]
    after = _since(sim, "shared", probe_answered)
    assert len(throttled) == 1 and after and all(r.at >= throttled[0].at + 2 for r in after)


def test_a_retry_after_beyond_the_timeout_fails_fast_and_sends_nothing_meanwhile(sim):
    client = _client(sim, "patient", timeout=2.0)
    try:
        start = time.monotonic()
        sim.throttle("patient", retry_after=60, seconds=0.5)
        with pytest.raises(MemberError) as first:
            client.version()
        with pytest.raises(MemberError) as second:
            client.list(NODES)
    finally:
        client.close()
    assert first.value.reason == second.value.reason == "Throttled"
    assert "asked for no requests for 60 s more" in str(second.value)
    assert len(_since(sim, "patient", start)) == 1


def test_the_request_budget_is_shared_by_every_lane_of_a_member(sim):
    qps, burst, lanes, calls = 20.0, 2, 3, 4
    created = time.monotonic()
    client = _client(sim, "budget", budget=RequestBudget(qps, burst))
    start = time.monotonic()
    try:
        threads = [threading.Thread(target=lambda: [client.version() for _ in range(calls)]) for _ in range(lanes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        client.close()
    arrivals = sorted(r.at for r in _since(sim, "budget", start))
    assert len(arrivals) == lanes * calls
    # the bucket starts full (burst) when made; then one token every 1/qps, whichever lane takes it
    assert all(at >= created + (i + 1 - burst) / qps for i, at in enumerate(arrivals))
