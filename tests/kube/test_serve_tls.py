"""`archipelago serve` over HTTPS, `archipelago kubeconfig` for a tenant, and kubectl with nothing else."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from broker.process.testing import free_port
from clusters.sim.tls import make_serving_cert
from tests.kube.conftest import KUBECTL

ARCHIPELAGO = str(Path(sys.executable).parent / "archipelago")


def test_serve_speaks_https_and_kubectl_reaches_the_front_door(tmp_path):
    cert = make_serving_cert("127.0.0.1")
    certfile, keyfile = cert.write(tmp_path / "tls")
    ca = tmp_path / "tls" / "sim-ca.crt"
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("ARCHIPELAGO_")},
                   "ARCHIPELAGO_ADMIN_TOKEN": "tls-admin", "ARCHIPELAGO_TLS_CERTFILE": str(certfile),
                   "ARCHIPELAGO_TLS_KEYFILE": str(keyfile), "HOME": str(tmp_path)}
    server = subprocess.Popen([ARCHIPELAGO, "serve", "--port", str(port)], cwd=tmp_path, env=environment,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        admin = httpx.Client(base_url=url, headers={"Authorization": "Bearer tls-admin"},
                             verify=ssl.create_default_context(cafile=str(ca)), timeout=5)
        deadline = time.monotonic() + 30
        while True:
            try:
                admin.get("/healthz")
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "serve did not answer over HTTPS within 30 s"
                time.sleep(0.1)
        assert admin.post("/api/v1/tenants", json={"name": "team-a", "namespaces": ["team-a"]}).status_code == 201
        printed = subprocess.run([ARCHIPELAGO, "kubeconfig", "--tenant", "team-a", "--server", url,
                                  "--certificate-authority", str(ca)], env=environment, capture_output=True,
                                 text=True, timeout=30)
        assert printed.returncode == 0, printed.stderr
        kubeconfig = tmp_path / "team-a.kubeconfig"
        kubeconfig.write_text(printed.stdout)
        got = subprocess.run([KUBECTL, f"--kubeconfig={kubeconfig}", "get", "jobsets"], capture_output=True,
                             text=True, timeout=30, env={"HOME": str(tmp_path)})
        assert (got.returncode, got.stderr.strip()) == (0, "No resources found in team-a namespace.")
        admin.close()
    finally:
        server.terminate()
        server.wait(timeout=10)


def _serve(tmp_path: Path, port: int, *args: str) -> subprocess.Popen:
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("ARCHIPELAGO_")},
                   "ARCHIPELAGO_ADMIN_TOKEN": "tls-admin", "HOME": str(tmp_path)}
    return subprocess.Popen([ARCHIPELAGO, "serve", "--port", str(port), *args], cwd=tmp_path, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _answered(server: subprocess.Popen, url: str, ca: Path) -> int:
    deadline = time.monotonic() + 30
    while True:
        try:
            with httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=5) as client:
                return client.get(f"{url}/healthz").status_code
        except (httpx.TransportError, OSError):
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "serve did not answer over HTTPS within 30 s"
            time.sleep(0.1)


def test_serve_makes_its_own_certificate_once_and_keeps_it(tmp_path):
    """`serve --tls-self-signed`: a CA and a certificate under the data directory (beside the SQLite file), the
    same after a restart, so what trusts the CA goes on working."""
    port = free_port()
    url, ca = f"https://127.0.0.1:{port}", tmp_path / "tls" / "archipelago-ca.crt"
    for run in range(2):
        server = _serve(tmp_path, port, "--tls-self-signed")
        try:
            assert _answered(server, url, ca) == 200
            if run == 0:
                first = ca.read_bytes()
        finally:
            server.terminate()
            server.wait(timeout=10)
    assert ca.read_bytes() == first
    assert (tmp_path / "tls" / "archipelago-server.key").stat().st_mode & 0o077 == 0
