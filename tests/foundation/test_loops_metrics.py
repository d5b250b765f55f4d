"""`archipelago serve --workers 2`: the loop services run in the parent process, which serves no API; it serves
their figures on ARCHIPELAGO_LOOPS_METRICS_PORT, where the workers' `/metrics` shows them at zero."""

from __future__ import annotations

import re

import httpx
import pytest

from broker.process.testing import ADMIN, Broker, free_port, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("backend", ["postgres"], indirect=True)]
METRICS_TOKEN = "loops-metrics-test-token"


def gauge(exposition: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", exposition, re.MULTILINE)
    assert found, f"{name} not in the exposition"
    return float(found.group(1))


def test_the_loop_process_serves_its_own_figures_beside_the_workers(settings, tmp_path):
    port = free_port()
    broker = Broker(tmp_path, database_url=settings.database_url, secret_key=settings.secret_key,
                    args=("--workers", "2"), env={"ARCHIPELAGO_LOOPS_METRICS_PORT": str(port),
                                                  "ARCHIPELAGO_METRICS_TOKEN": METRICS_TOKEN})
    loops = f"http://127.0.0.1:{port}/metrics"

    def scrape(url: str, token: str = METRICS_TOKEN) -> httpx.Response:
        return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    try:
        broker.start()
        # the parent holds the leader lease (the only replica): its own figures say so, and count its lanes
        wait_for(lambda: gauge(scrape(loops).text, "archipelago_leader_lease_held") == 1, "the lease on the loops port")
        assert gauge(scrape(loops).text, "archipelago_member_lanes_held") == 0  # no members registered
        assert gauge(scrape(f"{broker.url}/metrics").text, "archipelago_leader_lease_held") == 0  # a worker's
        assert scrape(loops, ADMIN).status_code == 200  # an admin token may, as on the API's /metrics
        assert scrape(loops, "not-a-token").status_code == 403
        assert httpx.get(loops, timeout=10).status_code == 403
    finally:
        broker.stop()
