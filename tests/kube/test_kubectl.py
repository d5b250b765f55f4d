"""A real kubectl against the broker's /k8s front door: apply, get with the broker's columns, watch a job to its
end, delete (= cancel on every member), server-side apply, and tenants kept apart."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time

import httpx
import pytest
import yaml

from broker.process.testing import jobset
from tests.examples import example_path, jobset_examples

DEADLINE = 60.0


class Lines:
    """A running kubectl's output, read line by line in a thread; waited on with a deadline."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.seen, self._lines = process, [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))

    def until(self, wanted, step=lambda: None, idle: float = 0.2, seconds: float = DEADLINE) -> list[str]:
        """Read lines (calling `step` after `idle` seconds without one) until one satisfies `wanted`; fail after
        `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=idle)
            except queue.Empty:
                step()
                continue
            self.seen.append(line)
            if wanted(line):
                return self.seen
        pytest.fail(f"not seen within {seconds}s; kubectl printed {self.seen}")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


def _columns(output: str) -> dict[str, dict[str, str]]:
    """`kubectl get` output as {name: {column: value}} (empty cells are blank)."""
    header, *rows = output.splitlines()
    names = re.findall(r"\S+(?: \S+)*", header)  # a column's name may hold one space: EXPECTED START
    starts = [header.index(name) for name in names]
    cells = lambda line: [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]  # noqa: E731
    return {cells(row)[0]: dict(zip(names, cells(row))) for row in rows}


def _write(door, manifest: dict) -> str:
    path = door.home / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return str(path)


def test_kubectl_applies_the_examples_and_gets_them_with_state_and_clusters(front_door):
    configs = {}
    for filename in jobset_examples():
        namespace = yaml.safe_load(example_path(filename).read_text())["metadata"]["namespace"]
        configs.setdefault(namespace, front_door.kubeconfig(namespace))
        applied = front_door.kubectl(configs[namespace], "apply", "-f", str(example_path(filename)))
        assert applied.stdout.strip().endswith("created") and applied.stderr == ""
    jobs = {j["name"]: j for j in front_door.api.get("/api/v1/jobs").json()["items"]}
    assert len(jobs) == len(jobset_examples())
    states = lambda: {j["state"] for j in front_door.api.get("/api/v1/jobs").json()["items"]}  # noqa: E731
    front_door.run_until(lambda: states() == {"Running"})
    jobs = {j["name"]: j for j in front_door.api.get("/api/v1/jobs").json()["items"]}
    for namespace, config in configs.items():
        table = _columns(front_door.kubectl(config, "get", "jobsets").stdout)
        assert set(table) == {name for name, j in jobs.items() if j["namespace"] == namespace}
        for name, row in table.items():
            assert row["STATE"] == "Running" and row["QUEUE"] == jobs[name]["queue"]
            assert row["CLUSTERS"] == ",".join(jobs[name]["clusters"]) and row["CLUSTERS"]
            assert row["HYPERNODES"] == ",".join(jobs[name]["hypernodes"])
        # the same files again: nothing to change
        for filename in jobset_examples():
            if yaml.safe_load(example_path(filename).read_text())["metadata"]["namespace"] == namespace:
                again = front_door.kubectl(config, "apply", "-f", str(example_path(filename)))
                assert again.stdout.strip().endswith("unchanged") and again.stderr == "", again.stderr
    assert len(front_door.api.get("/api/v1/jobs").json()["items"]) == len(jobset_examples())
    described = " ".join(front_door.kubectl(configs["team-a"], "describe", "jobset", "eval-sweep").stdout.split())
    assert "archipelago.io/state: Running" in described and "Replicated Jobs Status:" in described
    # the broker's events of the job, as kubectl describe lists them
    assert "Normal Queued" in described and "Normal Admitted" in described and "Normal Running" in described
    events = front_door.kubectl(configs["team-a"], "get", "events", "-o", "jsonpath={.items[*].reason}").stdout
    assert events.split()[:2] == ["Queued", "Queued"]  # eval-sweep and multislice-train, oldest first


def test_kubectl_get_watch_sees_the_job_queued_running_succeeded(front_door):
    config = front_door.kubeconfig("team-a")
    watch = Lines(subprocess.Popen(front_door.kubectl_command(config, "get", "jobsets", "--watch"),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={"HOME": str(front_door.home)}))
    try:
        front_door.kubectl(config, "apply", "-f", _write(front_door, jobset("watched")))
        states = []

        def state_of(line: str) -> bool:
            if line.startswith("watched"):
                states.append(line.split()[2])
            return bool(states) and states[-1] == "Succeeded"

        # a step once the watch has printed the job as it is (the front door sends a job as it is now, and
        # the watch polls every half second): each state a step leads to has time to show
        watch.until(state_of, step=lambda: states and front_door.step(5.0), idle=1.5)
    finally:
        watch.stop()
    firsts = list(dict.fromkeys(states))
    assert firsts[0] == "Queued" and firsts[-1] == "Succeeded"
    assert firsts.index("Running") < firsts.index("Succeeded"), states


def test_kubectl_delete_cancels_the_job_on_every_member(front_door):
    config = front_door.kubeconfig("team-a")
    manifest = jobset("split-run", split=True, parts=(("shard-a", 2, 8, 8), ("shard-b", 2, 8, 8)),
                      annotations={"sim.archipelago.io/duration": "600s"})
    front_door.kubectl(config, "apply", "-f", _write(front_door, manifest))
    [job] = [j["id"] for j in front_door.api.get("/api/v1/jobs").json()["items"]]
    front_door.until_state(job, "Running")
    assert {c["cluster"] for c in front_door.copies(job)} == {"eu-west", "us-east"}
    deleting = subprocess.Popen(front_door.kubectl_command(config, "delete", "jobset", "split-run"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={"HOME": str(front_door.home)})
    deadline = time.monotonic() + DEADLINE
    while deleting.poll() is None and time.monotonic() < deadline:  # kubectl waits until it is gone
        front_door.step(1.0)
        time.sleep(0.1)
    out, err = deleting.communicate(timeout=10)
    assert deleting.returncode == 0, err
    assert 'jobset.jobset.x-k8s.io "split-run" deleted' in out
    assert front_door.copies(job) == []
    assert front_door.state(job) == "Cancelled"
    gone = front_door.kubectl(config, "get", "jobset", "split-run", ok=False)
    assert gone.returncode == 1 and 'jobsets.jobset.x-k8s.io "split-run" not found' in gone.stderr


def test_kubectl_server_side_apply_twice_is_a_no_op_and_a_spec_change_is_refused(front_door):
    config = front_door.kubeconfig("team-a")
    path = _write(front_door, jobset("ssa"))
    for _ in range(2):
        applied = front_door.kubectl(config, "apply", "--server-side", "-f", path)
        assert applied.stdout.strip() == "jobset.jobset.x-k8s.io/ssa serverside-applied"
    assert [j["name"] for j in front_door.api.get("/api/v1/jobs").json()["items"]] == ["ssa"]
    # fields left out of an apply stay as they are
    partial = jobset("ssa")
    del partial["metadata"]["labels"], partial["spec"]["replicatedJobs"]
    assert front_door.kubectl(config, "apply", "--server-side", "-f", _write(front_door, partial)).returncode == 0
    # a changed field is the broker's: a conflict, and forced, an immutable field
    changed = jobset("ssa", parts=(("workers", 2, 2, 8),))
    conflict = front_door.kubectl(config, "apply", "--server-side", "-f", _write(front_door, changed), ok=False)
    assert conflict.returncode == 1
    assert ('Apply failed with 1 conflict: conflict with "archipelago" using jobset.x-k8s.io/v1alpha2: '
            '.spec.replicatedJobs') in conflict.stderr
    forced = front_door.kubectl(config, "apply", "--server-side", "--force-conflicts", "-f",
                                _write(front_door, changed), ok=False)
    assert 'The JobSet "ssa" is invalid: spec.replicatedJobs: field is immutable' in forced.stderr
    patched = front_door.kubectl(config, "apply", "-f", _write(front_door, changed), ok=False)  # a merge patch
    assert patched.returncode == 1 and 'The JobSet "ssa" is invalid: spec: field is immutable' in patched.stderr
    relabelled = jobset("ssa")
    relabelled["metadata"]["labels"]["team"] = "vision"
    refused = front_door.kubectl(config, "apply", "--server-side", "-f", _write(front_door, relabelled), ok=False)
    assert 'metadata.labels.team: field is immutable' in refused.stderr
    [job] = front_door.api.get("/api/v1/jobs").json()["items"]
    assert front_door.job(job["id"])["manifest"]["spec"] == jobset("ssa")["spec"]


def test_a_second_tenant_sees_nothing_of_the_first(front_door):
    team_a, team_b = front_door.kubeconfig("team-a"), front_door.kubeconfig("team-b")
    front_door.kubectl(team_a, "apply", "-f", _write(front_door, jobset("private")))
    assert front_door.kubectl(team_a, "get", "jobsets", "-A", "-o", "name").stdout.split() == \
        ["jobset.jobset.x-k8s.io/private"]
    listed = front_door.kubectl(team_b, "get", "jobsets", "-A")
    assert listed.stdout == "" and "No resources found" in listed.stderr
    forbidden = front_door.kubectl(team_b, "get", "jobset", "private", "-n", "team-a", ok=False)
    assert forbidden.returncode == 1
    assert 'User "tenant:team-b" cannot get resource "jobsets"' in forbidden.stderr and "forbidden" in forbidden.stderr
    missing = front_door.kubectl(team_b, "get", "jobset", "private", ok=False)  # in its own namespace, team-b
    assert 'jobsets.jobset.x-k8s.io "private" not found' in missing.stderr
    deleting = front_door.kubectl(team_b, "delete", "jobset", "private", "-n", "team-a", ok=False)
    assert deleting.returncode == 1 and "forbidden" in deleting.stderr
    assert front_door.state(1) == "Queued"
    # as Status objects, for any client
    token = yaml.safe_load(team_b.read_text())["users"][0]["user"]["token"]
    with httpx.Client(base_url=front_door.url + "/k8s", verify=front_door.trust,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        answer = client.get("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/private")
        assert answer.status_code == 403
        assert {k: answer.json()[k] for k in ("kind", "reason", "code")} == {"kind": "Status", "reason": "Forbidden",
                                                                            "code": 403}
        answer = client.get("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-b/jobsets/private")
        assert (answer.status_code, answer.json()["reason"]) == (404, "NotFound")
        answer = client.get("/apis/jobset.x-k8s.io/v1alpha2/jobsets", headers={"Authorization": "Bearer wrong"})
        assert (answer.status_code, answer.json()["kind"], answer.json()["reason"]) == (401, "Status", "Unauthorized")


def test_an_invalid_jobset_is_refused_as_kube_apiserver_would_naming_the_field(front_door):
    config = front_door.kubeconfig("team-a")
    bad = jobset("bad", parts=(("workers", 0, 2, 8),))
    refused = front_door.kubectl(config, "apply", "-f", _write(front_door, bad), ok=False)
    assert refused.returncode == 1
    assert 'The JobSet "bad" is invalid: spec.replicatedJobs[0].replicas' in refused.stderr


def test_server_dry_runs_change_nothing(front_door):
    config = front_door.kubeconfig("team-a")
    path = _write(front_door, jobset("trial"))
    tried = front_door.kubectl(config, "apply", "--dry-run=server", "-f", path)
    assert tried.stdout.strip() == "jobset.jobset.x-k8s.io/trial created (server dry run)"
    assert front_door.api.get("/api/v1/jobs").json()["items"] == []
    bad = front_door.kubectl(config, "apply", "--dry-run=server", "-f",
                             _write(front_door, jobset("trial-bad", parts=(("workers", 0, 2, 8),))), ok=False)
    assert 'The JobSet "trial-bad" is invalid: spec.replicatedJobs[0].replicas' in bad.stderr
    front_door.kubectl(config, "apply", "-f", path)
    kept = front_door.kubectl(config, "delete", "--dry-run=server", "jobset", "trial")
    assert kept.stdout.strip() == 'jobset.jobset.x-k8s.io "trial" deleted from team-a namespace (server dry run)'
    [job] = front_door.api.get("/api/v1/jobs").json()["items"]
    assert job["state"] == "Queued" and not job["cancel_requested"]


def test_discovery_and_explain_come_from_the_jobset_crd(front_door):
    config = front_door.kubeconfig("team-a")
    resources = [line.split() for line in front_door.kubectl(config, "api-resources").stdout.splitlines()[1:]]
    assert resources == [["events", "ev", "v1", "true", "Event"], ["namespaces", "ns", "v1", "false", "Namespace"],
                         ["jobsets", "js", "jobset.x-k8s.io/v1alpha2", "true", "JobSet"]]
    explained = front_door.kubectl(config, "explain", "jobset.spec.replicatedJobs.replicas").stdout
    assert "FIELD: replicas <integer>" in explained and "replicas is the number of jobs" in explained
    namespaces = front_door.kubectl(config, "get", "namespaces", "-o", "name").stdout.split()
    assert namespaces == ["namespace/team-a"]


def test_the_commands_a_newcomer_runs_print_no_warning(front_door):
    """apply, apply again, apply --server-side, get, describe, delete: what they say goes to stdout, stderr stays
    empty (a second client-side apply warned 'unable to find api field "annotations"' without ObjectMeta)."""
    config = front_door.kubeconfig("team-a")
    path = _write(front_door, jobset("newcomer"))
    for args in (("apply", "-f", path), ("apply", "-f", path), ("apply", "--server-side", "-f", path),
                 ("get", "jobsets"), ("describe", "jobset", "newcomer"), ("delete", "-f", path)):
        done = front_door.kubectl(config, *args)
        assert done.stderr == "" and done.stdout, (args, done.stderr)


def test_kubectl_get_shows_a_waiting_jobs_expected_start(front_door, settings):
    """Gangs of 16 GPUs until one waits; the forecast loop runs: kubectl's EXPECTED START is its forecast start."""
    from broker.services.forecast import ForecastService

    config = front_door.kubeconfig("team-a")
    waiting = None
    for i in range(40):
        job_id = front_door.submit(jobset(f"gang-{i}", parts=(("workers", 1, 2, 8),)))
        front_door.step()
        if front_door.state(job_id) == "Queued":
            waiting = front_door.job(job_id)
            break
    assert waiting is not None, "the federation never filled up"
    ForecastService(front_door.db, settings).run_once()
    expected = front_door.job(waiting["id"])
    assert expected["expected_start"], expected["forecast"]
    table = _columns(front_door.kubectl(config, "get", "jobsets").stdout)
    start = expected["expected_start"].replace("+00:00", "Z")
    assert table[waiting["name"]]["EXPECTED START"] == (start if start.endswith("Z") else start + "Z")
