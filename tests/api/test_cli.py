"""The CLI client against a real server over HTTP: tables for people, json/yaml for scripts, one-line errors."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from broker.cli.app import app as cli
from broker.process.settings import get_settings
from tests.api.jobsets import jobset
from tests.servers import serving



@pytest.fixture
def backend() -> str:
    """The CLI only speaks HTTP; one database is enough here (the API tests cover both)."""
    return "sqlite"


@pytest.fixture
def server(app, monkeypatch):
    with serving(app) as url:
        monkeypatch.setenv("ARCHIPELAGO_SERVER", url)
        monkeypatch.setenv("ARCHIPELAGO_TOKEN", "admin-test-token")
        monkeypatch.setenv("ARCHIPELAGO_CONFIG", "/nonexistent/config.yaml")
        yield url


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", **(env or {})}, catch_exceptions=False)


def test_an_admin_sets_a_tenants_pod_security_level_and_adoptable_namespaces(server):
    created = run("tenants", "create", "ops", "--namespace", "ops", "--namespace", "ops-batch",
                  "--pod-security", "restricted", "--adopt", "ops", "-o", "json")
    assert created.exit_code == 0, created.output
    assert [json.loads(created.output)[k] for k in ("pod_security", "adoptable_namespaces")] == ["restricted", ["ops"]]
    listed = run("tenants", "list").output
    assert "POD SECURITY" in listed and "restricted" in listed
    changed = run("tenants", "update", "ops", "--pod-security", "privileged", "--adopt-none", "-o", "json")
    assert [json.loads(changed.output)[k] for k in ("pod_security", "adoptable_namespaces")] == ["privileged", []]
    refused = run("tenants", "create", "kube-system")
    assert refused.exit_code == 1 and len(refused.output.strip().splitlines()) == 1
    assert "is reserved for the members' own use" in refused.output


def test_a_command_on_the_database_refuses_one_that_is_missing_or_not_migrated_in_one_line(tmp_path, monkeypatch):
    """`tokens create` beside the demo without its database named: one line, and no empty database left behind."""
    missing = tmp_path / "archipelago.db"
    monkeypatch.setenv("ARCHIPELAGO_DATABASE_URL", f"sqlite:///{missing}")
    get_settings.cache_clear()
    try:
        refused = run("tokens", "create", "--tenant", "research")
        assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
        assert f"there is no broker database at {missing}" in refused.output
        assert not missing.exists()
        missing.touch()  # a file, but no schema in it
        refused = run("tokens", "create", "--tenant", "research")
        assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
        assert "the database schema is at no revision" in refused.output
    finally:
        get_settings.cache_clear()


def test_admin_sets_up_a_tenant_and_a_tenant_submits(server, tmp_path, settings, monkeypatch):
    assert run("tenants", "create", "research", "--namespace", "research", "--weight", "2").exit_code == 0
    weighed = run("tenants", "update", "research", "--weight", "3", "--fair-share-preemption",
                  "LessThanOrEqualToFinalShare", "-o", "json")
    assert weighed.exit_code == 0, weighed.output
    assert [json.loads(weighed.output)[k] for k in ("weight", "namespaces", "fair_share_preemption")] == [
        3, ["research"], "LessThanOrEqualToFinalShare"]
    assert "WEIGHT" in run("tenants", "list").output
    created = run("queues", "create", "training", "--tenant", "research", "--weight", "2",
                  "--quota", "nvidia.com/gpu=64", "--reclaim", "LowerPriority", "-o", "json")
    assert created.exit_code == 0, created.output
    assert json.loads(created.output)["nominal_quota"] == {"nvidia.com/gpu": "64"}
    assert json.loads(created.output)["reclaim_within_cohort"] == "LowerPriority"

    for key, value in {"ARCHIPELAGO_DATABASE_URL": settings.database_url,
                       "ARCHIPELAGO_SECRET_KEY": settings.secret_key}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    minted = run("tokens", "create", "--tenant", "research")
    get_settings.cache_clear()
    assert minted.exit_code == 0, minted.output
    tenant_env = {"ARCHIPELAGO_TOKEN": minted.output.strip()}

    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(jobset("train")))
    submitted = run("submit", str(path), "-o", "yaml", env=tenant_env)
    assert submitted.exit_code == 0, submitted.output
    [job] = yaml.safe_load(submitted.output)
    assert (job["name"], job["queue"], job["state"]) == ("train", "training", "Queued")

    table = run("jobs", "list", env=tenant_env)
    assert "research/train" in table.output and "Queued" in table.output
    assert json.loads(run("jobs", "get", str(job["id"]), "-o", "json", env=tenant_env).output)["id"] == job["id"]
    events = run("jobs", "events", str(job["id"]), "-o", "json", env=tenant_env)
    assert [e["reason"] for e in json.loads(events.output)] == ["Queued"]
    assert "Cancelled" in run("jobs", "cancel", str(job["id"]), env=tenant_env).output


def test_a_job_is_named_by_id_or_namespace_name_and_its_reason_is_shown_whole(server, admin, db, tmp_path):
    from broker.store.db.models import Job
    from tests.api.conftest import make_tenant

    token = make_tenant(admin, "research").headers["Authorization"].split()[1]
    env = {"ARCHIPELAGO_TOKEN": token}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(jobset("train")))
    [job] = yaml.safe_load(run("submit", str(path), "-o", "yaml", env=env).output)
    reason = "waits for its queue's quota: " + "needs 16 GPUs more than the queue research-default may borrow " * 3
    with db.sessions() as session, session.begin():
        session.get(Job, job["id"]).reason = reason
    for ref in (str(job["id"]), "research/train", "train"):
        assert json.loads(run("jobs", "get", ref, "-o", "json", env=env).output)["id"] == job["id"], ref
    shown = run("jobs", "get", "research/train", env=env)
    assert f"reason: {reason}" in shown.output
    assert "position: 1 in queue research-default" in shown.output
    assert reason not in run("jobs", "list", env=env).output.replace("\n", "")  # cut short in the table
    assert "…" in run("jobs", "list", env=env).output
    assert "…" not in run("jobs", "list", "-o", "wide", env=env).output
    unknown = run("jobs", "get", "research/nothing", env=env)
    assert unknown.exit_code == 2 and "no job named research/nothing" in unknown.output


def test_a_dry_run_of_a_file_without_a_jobset_and_an_admins_submission_without_a_tenant_say_what_to_do(server):
    from pathlib import Path

    hypernodes = Path(__file__).resolve().parents[3] / "shared" / "examples" / "hypernodes-eu-west.yaml"
    dry = run("submit", str(hypernodes), "--dry-run")
    assert dry.exit_code == 1 and "none is a JobSet (HyperNode)" in dry.output, dry.output
    examples = hypernodes.parent / "jobset-mpi.yaml"
    admin = run("submit", str(examples))
    assert admin.exit_code == 1 and "--tenant NAME" in admin.output, admin.output


def test_errors_are_one_line_with_a_nonzero_exit(server, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**jobset("x"), "kind": "Job"}))
    result = CliRunner().invoke(cli, ["submit", str(bad), "--tenant", "nobody"])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0
    assert result.output.startswith("archipelago: POST /api/v1/jobs: ")
    missing = CliRunner().invoke(cli, ["submit", str(tmp_path / "missing.yaml")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.output
    bad_quota = CliRunner().invoke(cli, ["queues", "create", "q", "--tenant", "t", "--quota", "gpu"])
    assert bad_quota.exit_code == 2
    assert "takes RESOURCE=AMOUNT" in bad_quota.output


def test_an_unreachable_server_is_one_line(monkeypatch):
    monkeypatch.setenv("ARCHIPELAGO_CONFIG", "/nonexistent/config.yaml")
    result = CliRunner().invoke(cli, ["jobs", "list", "--server", "http://127.0.0.1:1"])
    assert result.exit_code == 1
    assert result.output.startswith("archipelago: cannot reach the broker at http://127.0.0.1:1")


def test_dry_run_prints_where_or_why(server, admin, db, settings, tmp_path):
    from broker.store.db.crypto import KubeconfigCipher
    from broker.store.db.models import Node
    from tests.api.conftest import add_cluster_with_leaves, make_tenant

    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {"region": "eu"})
    token = make_tenant(admin, "research").headers["Authorization"].split()[1]
    fits, too_big = tmp_path / "fits.yaml", tmp_path / "big.yaml"
    hard = {"archipelago.io/network-topology-mode": "hard"}
    fits.write_text(yaml.safe_dump(jobset("small", replicas=2, annotations=hard)))
    too_big.write_text(yaml.safe_dump(jobset("big", replicas=4, annotations=hard)))
    env = {"ARCHIPELAGO_TOKEN": token}
    placed = run("submit", str(fits), "--dry-run", env=env)
    assert placed.exit_code == 0, placed.output
    assert "would run now" in placed.output and "eu-west" in placed.output and "leaf-" in placed.output
    with db.sessions() as session, session.begin():  # someone else's pod on one node of each leaf
        for node in session.query(Node).filter(Node.name.in_(["eu-west-l0-n0", "eu-west-l1-n0"])):
            node.used = {"nvidia.com/gpu": 8000}
    waits = run("submit", str(too_big), "--dry-run", env=env)
    assert waits.exit_code == 0, waits.output
    assert f"{too_big}: would wait: no cluster can take it now" in waits.output
    assert "eu-west: needs 32 GPUs in one tier-1 HyperNode; the largest free one has 24" in waits.output
    assert "expected start: never, as the fleet is now" in waits.output  # the foreign pods have no end
    as_json = json.loads(run("submit", str(fits), "--dry-run", "-o", "json", env=env).output)
    assert as_json["fits"] is True and as_json["placements"][0]["cluster"] == "eu-west"
    assert json.loads(run("jobs", "list", "-o", "json", env=env).output) == []  # nothing was submitted


def test_override_rules_from_files_and_what_the_dry_run_says_of_them(server, admin, db, settings, tmp_path):
    from broker.store.db.crypto import KubeconfigCipher
    from tests.api.conftest import add_cluster_with_leaves, make_tenant

    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {"region": "eu"})
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump_all([
        {"name": "eu-mirror", "selector": "region=eu", "image": {"registry": "mirror.eu:5000"}},
        {"name": "eu-strip", "order": 2, "cluster": "eu-west", "jsonPatch": [
            {"op": "remove", "path": "/spec/replicatedJobs/0/template/spec/template/spec/containers"}]}]))
    applied = run("overrides", "apply", str(rules))
    assert applied.exit_code == 0, applied.output
    assert "eu-mirror" in applied.output and "selector='region=eu'" in applied.output
    listed = run("overrides", "list", "-o", "json")
    assert [r["name"] for r in json.loads(listed.output)] == ["eu-mirror", "eu-strip"]

    token = make_tenant(admin, "research").headers["Authorization"].split()[1]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(jobset("small", replicas=1)))
    dry = run("submit", str(path), "--dry-run", env={"ARCHIPELAGO_TOKEN": token})
    assert dry.exit_code == 0, dry.output
    assert "eu-mirror,eu-strip" in dry.output
    assert "would fail on eu-west: override rule 'eu-strip'" in dry.output

    assert run("overrides", "delete", "eu-strip").exit_code == 0
    answer = json.loads(run("submit", str(path), "--dry-run", "-o", "json", env={"ARCHIPELAGO_TOKEN": token}).output)
    [placement] = answer["placements"]
    assert placement["overrides"] == ["eu-mirror"] and placement["override_error"] is None
    image = placement["manifest"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert image["image"].startswith("mirror.eu:5000/")

    bad = rules.with_name("bad.yaml")
    bad.write_text(yaml.safe_dump({"name": "bad", "selector": "region in (eu", "env": [{"name": "A"}]}))
    refused = run("overrides", "apply", str(bad))
    assert refused.exit_code == 1 and len(refused.output.strip().splitlines()) == 1
    assert "selector" in refused.output


def test_jobs_list_has_an_estimated_start_column_as_squeue_start(server, admin, db, settings, tmp_path):
    from broker.services.forecast import ForecastService
    from broker.store.db.models import Job
    from tests.api.conftest import make_tenant

    env = {"ARCHIPELAGO_TOKEN": make_tenant(admin, "research").headers["Authorization"].split()[1]}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(jobset("train")))
    [job] = yaml.safe_load(run("submit", str(path), "-o", "yaml", env=env).output)
    ForecastService(db, settings).run_once()  # no member at all: nothing it waits for will ever end
    [listed] = json.loads(run("jobs", "list", "-o", "json", env=env).output)
    assert listed["expected_start"] is None and listed["expected"].startswith("never, as the fleet is now")
    table = run("jobs", "list", env=env).output
    assert "ESTIMATED START" in table and "│ never" in table, table
    with db.sessions() as session, session.begin():
        session.get(Job, job["id"]).forecast = {"start": "2026-12-07T14:20:31Z", "cluster": "eu-west",
                                                "hypernode": None, "after": []}
    assert "2026-12-07 14:20Z" in run("jobs", "list", env=env).output
    shown = run("jobs", "get", "research/train", env=env).output
    assert "expected start: 2026-12-07 14:20Z: at the next cycle, on eu-west" in shown, shown


def test_topology_recipes_from_the_cli(server, db, settings, tmp_path):
    """An admin writes a recipe in Volcano's shape, lists it beside the built-in ones, sets a cluster to it (its tree
    is found again from the stored node labels at once) and deletes it once no cluster is set to it."""
    from broker.store.db.crypto import KubeconfigCipher
    from broker.store.db.models import Node
    from tests.api.conftest import add_cluster_with_leaves

    with db.sessions() as session, session.begin():
        add_cluster_with_leaves(session, KubeconfigCipher(settings.fernet_key()), "eu-west", 2, {"region": "eu"})
        for node in session.query(Node):
            node.labels = {**node.labels, "example.com/rack": node.name.rsplit("-", 1)[0]}
    recipe = tmp_path / "racks.yaml"
    recipe.write_text(yaml.safe_dump({"name": "racks", "levels": [{"nodeLabel": "example.com/rack"},
                                                                  {"nodeLabel": "kubernetes.io/hostname"}]}))
    created = run("recipes", "create", str(recipe))
    assert created.exit_code == 0, created.output
    listed = run("recipes", "list").output
    assert "TIERS (CLOSEST FIRST)" in listed and "racks" in listed and "nvidia.com/gpu.clique < " in listed
    chosen = run("clusters", "topology", "eu-west", "--recipe", "racks", "-o", "json")
    assert chosen.exit_code == 0, chosen.output
    view = json.loads(chosen.output)
    assert view["hypernode_source"] == "labels:racks"
    assert sorted(h["name"] for h in view["hypernodes"]) == ["rack-eu-west-l0", "rack-eu-west-l1"]
    in_use = run("recipes", "delete", "racks")
    assert in_use.exit_code == 1 and "clusters eu-west use topology recipe racks" in in_use.output
    unknown = run("clusters", "topology", "eu-west", "--recipe", "azure")
    assert unknown.exit_code == 1 and len(unknown.output.strip().splitlines()) == 1
    assert "no topology recipe 'azure'; one of auto, archipelago, aws, gke, nvlink, racks" in unknown.output
    assert run("clusters", "topology", "eu-west", "--recipe", "auto").exit_code == 0
    assert run("recipes", "delete", "racks").output.strip() == "recipe racks deleted"


def test_device_class_mappings_from_the_cli(server):
    """An admin counts MIG slices as a quota resource, lists the mapping, is told in one line what is wrong with a
    second mapping of the same class, and removes it."""
    mapped = run("device-classes", "map", "nvidia.com/mig-1g.10gb", "--class", "mig-1g.10gb.gpu.nvidia.com")
    assert mapped.exit_code == 0, mapped.output
    listed = run("device-classes", "list").output
    assert "RESOURCE" in listed and "nvidia.com/mig-1g.10gb" in listed and "mig-1g.10gb.gpu.nvidia.com" in listed
    twice = run("device-classes", "map", "example.com/slices", "--class", "mig-1g.10gb.gpu.nvidia.com")
    assert twice.exit_code == 1 and len(twice.output.strip().splitlines()) == 1
    assert "already count as nvidia.com/mig-1g.10gb" in twice.output
    assert run("device-classes", "unmap", "nvidia.com/mig-1g.10gb").output.strip() == \
        "device-class mapping nvidia.com/mig-1g.10gb removed"
    assert json.loads(run("device-classes", "list", "-o", "json").output) == []
