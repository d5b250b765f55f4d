"""kubectl cannot tell the simulator from a cluster: discovery, tables and CRDs through the real binary."""

from __future__ import annotations

import shutil
import subprocess

import pytest


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:  # Debian ships it as kubernetes-client
        subprocess.run(["apt-get", "install", "-y", "-q", "kubernetes-client"], capture_output=True, timeout=300)
        path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not installed and could not be installed")
    return path


def _run(kubectl: str, kubeconfig, *args: str) -> str:
    result = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                            timeout=60, env={"HOME": str(kubeconfig.parent), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kubectl_get_nodes_jobsets_hypernodes(sim, namespace, kubectl, tmp_path):
    kubeconfig = next(p for p in sim.write_kubeconfigs(tmp_path) if p.name == "eu-west.kubeconfig")
    manifest = tmp_path / "js.yaml"
    manifest.write_text(f"""
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: from-kubectl, namespace: {namespace}}}
spec:
  replicatedJobs:
  - name: w
    replicas: 1
    template:
      spec:
        parallelism: 1
        completions: 1
        template:
          spec:
            restartPolicy: Never
            containers: [{{name: main, image: busybox}}]
""")
    # no OpenAPI documents are served, so client-side schema validation is off
    assert "created" in _run(kubectl, kubeconfig, "create", "--validate=false", "-f", str(manifest))
    sim.settle()
    out = _run(kubectl, kubeconfig, "get", "nodes,jobsets,hypernodes", "-A")
    assert "node/node-00" in out and "Ready" in out
    assert "jobset.jobset.x-k8s.io/from-kubectl" in out and namespace in out
    assert "hypernode.topology.volcano.sh/leaf-0" in out and "hypernode.topology.volcano.sh/root" in out
    resources = _run(kubectl, kubeconfig, "api-resources")
    assert "jobsets" in resources and "hypernodes" in resources and "hn" in resources
    pods = _run(kubectl, kubeconfig, "get", "pods", "-n", namespace, "-o", "name")
    assert pods.startswith("pod/from-kubectl-w-0-0-")
    _run(kubectl, kubeconfig, "label", "node", "node-01", "kubectl=yes")
    assert _run(kubectl, kubeconfig, "get", "nodes", "-l", "kubectl=yes", "-o", "name").split() == ["node/node-01"]
    _run(kubectl, kubeconfig, "delete", "jobset", "from-kubectl", "-n", namespace)
