"""Browser fixtures: a real broker on a socket, simulated member clusters, and Debian's Chromium.

The federation is built through the real pipeline: clusters registered through the API against the
simulator, tenants, queues, tokens and jobs through the API, placements by the scheduler, copies
applied on the members by the dispatcher and followed by the status loop, node usage synced back —
each loop one `run_once()` at a time, with the simulator's clock moving only when a test says so.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from cryptography.fernet import Fernet

from api.app import create_app
from broker.process.settings import Settings
from broker.services.dispatcher import DispatcherService
from broker.services.forecast import ForecastService
from broker.services.inventory import ClusterHealthService, InventorySyncService
from broker.services.members import MemberClients
from broker.services.scheduler import SchedulerService
from broker.services.status import StatusService
from broker.store.db.runtime import Database, open_database
from clusters.sim.testing import SimHandle, running_simulator
from tests.api.jobsets import jobset
from tests.servers import serving

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
VIEWPORT = {"width": 1366, "height": 768}
ADMIN_TOKEN = "admin-test-token"
NODE = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
SHORT = {"sim.archipelago.io/duration": "1m"}  # the others run for the default 10h of simulated time
SCENARIO = {
    "defaults": {"node": NODE, "topology": {"leaf": 4, "spine": 2}, "duration": "10h"},
    "clusters": [
        {"name": "eu-west", "nodes": 16, "hypernodes": "crd", "labels": {"region": "eu", "gpu": "h100"}},
        {"name": "us-east", "nodes": 8, "hypernodes": "labels", "labels": {"region": "us", "gpu": "a100"},
         "zones": ["us-east-1a"]},
    ],
}


@dataclass
class Federation:
    """A running broker over simulated members, and the handles a test drives it with."""

    url: str
    sim: SimHandle
    db: Database
    scheduler: SchedulerService
    dispatcher: DispatcherService
    status: StatusService
    inventory: InventorySyncService
    forecast: ForecastService
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, who: str = "admin") -> httpx.Client:
        token = ADMIN_TOKEN if who == "admin" else self.tokens[who]
        return httpx.Client(base_url=self.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10)

    def get(self, path: str, who: str = "admin", **params):
        with self.client(who) as client:
            answer = client.get(path, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def submit(self, tenant: str, manifest: dict) -> dict:
        with self.client(tenant) as client:
            answer = client.post("/jobs", json=manifest)
        assert answer.status_code == 201, answer.text
        return answer.json()["items"][0]

    def schedule(self) -> None:
        self.scheduler.run_once()

    def run(self, job_id: int) -> None:
        """The real pipeline: the dispatcher applies the job on its member, the status loop sees it run."""
        self._settle(job_id, "Running")

    def finish(self, job_id: int) -> None:
        """Simulated time past the job's run (SHORT), and the status loop sees it complete."""
        self.sim.advance(120)
        self._settle(job_id, "Succeeded")

    def _settle(self, job_id: int, state: str) -> None:
        for _ in range(20):
            self.dispatcher.run_once()
            self.sim.settle()
            self.status.run_once()
            if self.get(f"/jobs/{job_id}")["state"] == state:
                break
        assert self.get(f"/jobs/{job_id}")["state"] == state
        self.inventory.run_once()  # the nodes' usage, as the member now reports it


@pytest.fixture(scope="module")
def federation(migrated_sqlite_template, tmp_path_factory) -> Iterator[Federation]:
    """Two simulated clusters, two tenants with queues and tokens, a few jobs placed by the scheduler:
    some running, one finished, one waiting for room."""
    path = tmp_path_factory.mktemp("dashboard") / "archipelago.db"
    shutil.copy(migrated_sqlite_template, path)
    settings = Settings(database_url=f"sqlite:///{path}", secret_key=Fernet.generate_key().decode(),
                        admin_token=ADMIN_TOKEN, member_timeout=5.0, cluster_sync_interval=0, _env_file=None)
    database = open_database(settings, upgrade=False)
    members = MemberClients(settings)
    health = ClusterHealthService(database, settings, members)
    loops = [DispatcherService(database, settings, members), StatusService(database, settings, members, watch=False),
             InventorySyncService(database, settings, members, watch=False)]
    try:
        with running_simulator(SCENARIO, speed=0, tls=True) as sim, \
                serving(create_app(settings, database, run_loops=False)) as url:
            fed = Federation(url, sim, database, SchedulerService(database, settings), *loops,
                             ForecastService(database, settings))
            with fed.client() as admin:
                for name in sim.cluster_names:
                    spec = next(c for c in SCENARIO["clusters"] if c["name"] == name)
                    answer = admin.post("/clusters", json={"name": name, "kubeconfig": sim.kubeconfig(name),
                                                           "labels": spec["labels"]})
                    assert answer.status_code == 201, answer.text
                health.run_once()
                for tenant, queues in {"research": {"training": {"weight": 2, "nominal_quota": {"nvidia.com/gpu": "32"},
                                                                 "borrowing_limit": {"nvidia.com/gpu": "32"}},
                                                    "eval": {}},
                                       "vision": {"vision-batch": {}}}.items():
                    assert admin.post("/tenants", json={"name": tenant}).status_code == 201
                    for queue, fields in queues.items():
                        answer = admin.post("/queues", json={"name": queue, "tenant": tenant, **fields})
                        assert answer.status_code == 201, answer.text
                    fed.tokens[tenant] = admin.post("/tokens", json={"role": "tenant", "tenant": tenant}).json()["token"]
            jobs = {
                "pretrain": fed.submit("research", jobset("pretrain", queue="training", replicas=4)),
                "finetune": fed.submit("research", jobset("finetune", queue="training", replicas=2)),
                "eval-suite": fed.submit("research", jobset("eval-suite", queue="eval", replicas=1, annotations=SHORT)),
                "segmenter": fed.submit("vision", jobset("segmenter", queue="vision-batch", replicas=2)),
            }
            fed.schedule()
            fed.run(jobs["pretrain"]["id"])
            fed.run(jobs["segmenter"]["id"])
            fed.run(jobs["eval-suite"]["id"])
            fed.finish(jobs["eval-suite"]["id"])
            # all 16 nodes of eu-west's fabric (tier 3), where work runs: it waits, and every cluster says why
            # (one that could never run anywhere would be refused at submission).
            fed.submit("vision", jobset("detector-xl", queue="vision-batch", replicas=16, annotations={
                "archipelago.io/network-topology-mode": "hard", "archipelago.io/highest-tier-allowed": "3"}))
            fed.schedule()
            yield fed
    finally:
        for service in (health, *loops):
            service.stop()
        members.close()
        database.dispose()


@pytest.fixture
def page(browser, federation):
    """A fresh tab at 1366x768 signed in as the admin."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"sessionStorage.setItem('archipelago.token', {ADMIN_TOKEN!r})")
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert not errors, f"the page threw: {errors}"


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
