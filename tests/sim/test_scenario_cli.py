"""Scenario parsing, and the `python -m clusters.sim` process end to end (TLS, kubeconfigs, SIGTERM)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from clusters.sim.scenario import HOSTNAME, LEAF, SPINE, ZONE, load


def test_generated_nodes_labels_and_hypernode_tree():
    (spec,) = load({"clusters": [{"name": "eu-west", "labels": {"region": "eu"}, "nodes": 32,
                                  "node": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                                  "zones": ["eu-1a", "eu-1b"], "topology": {"leaf": 8, "spine": 2}}]})
    assert len(spec.nodes) == 32
    first, last = spec.nodes[0]["metadata"]["labels"], spec.nodes[-1]["metadata"]["labels"]
    assert first[HOSTNAME] == "node-00" and first[LEAF] == "leaf-0" and first[SPINE] == "spine-0"
    assert last[LEAF] == "leaf-3" and last[SPINE] == "spine-1" and (first[ZONE], last[ZONE]) == ("eu-1a", "eu-1b")
    assert spec.nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    tiers = {h["metadata"]["name"]: h for h in spec.hypernodes}
    assert [tiers[f"leaf-{i}"]["spec"]["tier"] for i in range(4)] == [1, 1, 1, 1]
    assert tiers["spine-1"]["spec"]["members"] == [
        {"type": "HyperNode", "selector": {"exactMatch": {"name": "leaf-2"}}},
        {"type": "HyperNode", "selector": {"exactMatch": {"name": "leaf-3"}}}]
    assert tiers["root"]["spec"]["tier"] == 3 and tiers["root"]["status"]["nodeCount"] == 32
    regex = tiers["leaf-1"]["spec"]["members"][0]["selector"]["regexMatch"]["pattern"]
    assert all(re.match(regex, f"node-{i:02d}") for i in range(8, 16)) and not re.match(regex, "node-16")


def test_explicit_nodes_pools_and_modes():
    (spec,) = load(yaml.safe_dump({"clusters": [{
        "name": "lab", "hypernodes": "labels", "jobset": False,
        "nodes": [{"name": "gpu-a", "leaf": "rack-1", "spine": "row-1", "labels": {"x": "1"},
                   "resources": {"cpu": "8"}, "taints": [{"key": "k", "effect": "NoSchedule"}]}],
        "pools": [{"name_prefix": "cpu", "nodes": 2, "node_labels": {"pool": "cpu"}}]}]}))
    names = [n["metadata"]["name"] for n in spec.nodes]
    assert names == ["gpu-a", "cpu-01", "cpu-02"]
    gpu = spec.nodes[0]
    assert gpu["metadata"]["labels"][LEAF] == "rack-1" and gpu["metadata"]["labels"]["x"] == "1"
    assert gpu["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    assert spec.nodes[1]["metadata"]["labels"][LEAF] != "rack-1"  # a pool starts on its own leaf
    assert spec.hypernodes == [] and spec.jobset is False
    (bare,) = load({"clusters": [{"name": "flat", "nodes": 2, "hypernodes": "none"}]})
    assert LEAF not in bare.nodes[0]["metadata"]["labels"]


@pytest.mark.parametrize("bad", [
    {"clusters": []},
    {"clusters": [{"name": "Bad_Name", "nodes": 1}]},
    {"clusters": [{"name": "a", "nodes": 1, "hypernodes": "maybe"}]},
    {"clusters": [{"name": "a", "nodes": 1, "colour": "red"}]},
    {"clusters": [{"name": "a", "nodes": 1}, {"name": "a", "nodes": 1}]},
])
def test_bad_scenarios_are_refused(bad):
    with pytest.raises(ValueError):
        load(bad)


def test_cli_serves_tls_writes_kubeconfigs_and_exits_on_sigterm(tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({"clusters": [{"name": "one", "nodes": 3}, {"name": "two", "nodes": 1}]}))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "clusters.sim", "--scenario", str(scenario), "--port", "0",
                             "--kubeconfig-dir", str(tmp_path), "--tls", "--speed", "10"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # announced once the socket listens: requests queue until uvicorn serves
            if "admin token" in line:
                break
        kubeconfig = yaml.safe_load((tmp_path / "two.kubeconfig").read_text())
        assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
        assert kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
        with config.new_client_from_config(str(tmp_path / "two.kubeconfig")) as api:
            assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["node-00"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
