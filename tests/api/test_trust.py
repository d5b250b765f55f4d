"""Nothing is read before it is trusted: 401 before any body without a known token, on every route with a body
(the pull agents' included, which face the network), and 413 for a body over the limit, declared or counted."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from sqlalchemy import select

from api.app import create_app
from api.trust import KNOWN_FOR, TrustedBodies
from broker.store.db.models import Token
from tests.api.conftest import make_tenant
from tests.servers import run_async, serving

BODY_ROUTES = [("post", "/api/v1/tenants"), ("patch", "/api/v1/tenants/research"), ("post", "/api/v1/queues"),
               ("post", "/api/v1/tokens"), ("post", "/api/v1/clusters"), ("post", "/api/v1/overrides"),
               ("post", "/api/v1/jobs"), ("post", "/api/v1/jobs:dry-run"), ("post", "/api/v1/agent/heartbeat"),
               ("post", "/api/v1/agent/outcomes"), ("post", "/api/v1/agent/inventory")]
MALFORMED = b"{not json"


@pytest.fixture
def anonymous(app):
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize("method,path", BODY_ROUTES)
@pytest.mark.parametrize("token", [None, "made-up"])
def test_a_body_from_a_stranger_is_a_401_whatever_it_holds(anonymous, method, path, token):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    answer = anonymous.request(method, path, content=MALFORMED, headers=headers)
    assert answer.status_code == 401, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["www-authenticate"] == "Bearer"


def test_a_tenants_token_is_a_stranger_to_the_agent_routes(admin):
    with make_tenant(admin, "research") as research:
        answer = research.post("/api/v1/agent/outcomes", content=MALFORMED,
                               headers={"Content-Type": "application/json"})
        assert answer.status_code == 401
        assert research.post("/api/v1/queues", content=MALFORMED,
                             headers={"Content-Type": "application/json"}).status_code == 422  # trusted: then read


def test_the_kubernetes_front_door_refuses_a_stranger_with_a_status(anonymous):
    answer = anonymous.post("/k8s/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets", content=MALFORMED,
                            headers={"Content-Type": "application/json"})
    assert answer.status_code == 401
    assert (answer.json()["kind"], answer.json()["reason"]) == ("Status", "Unauthorized")


def test_a_revoked_token_is_refused_by_the_route_while_the_gate_still_remembers_it(admin, app):
    minted = admin.post("/api/v1/tokens", json={"role": "admin"}).json()
    with TestClient(app, headers={"Authorization": f"Bearer {minted['token']}"}) as holder:
        assert holder.post("/api/v1/tenants", json={"name": "ops"}).status_code == 201
        assert admin.delete(f"/api/v1/tokens/{minted['id']}").status_code in (200, 204)
        assert holder.post("/api/v1/tenants", json={"name": "ops-2"}).status_code == 401  # the route's own check


def test_the_gate_remembers_a_known_token_for_a_few_seconds_then_asks_again(db, settings):
    """One lookup per token while it is remembered; once KNOWN_FOR has passed a revoked token is a stranger to the
    gate too. Agent tokens are known on the agent routes only."""
    from broker.store import tenancy

    with db.write() as session:
        tenancy.create_tenant(session, "research")
        token = tenancy.create_token(session, "tenant", "research")[1]
    lookups, now = [], [0.0]
    state = SimpleNamespace(settings=settings, db=SimpleNamespace(read=lambda: lookups.append(1) or db.read()))
    gate = TrustedBodies(app=None, clock=lambda: now[0])
    trusted = lambda agent=False: run_async(lambda: gate._trusted(state, agent, f"Bearer {token}".encode()))  # noqa: E731
    assert trusted() and trusted() and len(lookups) == 1
    assert not trusted(agent=True)  # a tenant's token is no agent's
    with db.write() as session:
        tenancy.revoke_token(session, session.scalar(select(Token.id)))
    now[0] = KNOWN_FOR - 0.1
    assert trusted()  # still remembered: the route refuses it (above)
    now[0] = KNOWN_FOR + 0.1
    assert not trusted()


@pytest.mark.parametrize("path", ["/api/v1/tenants", "/api/v1/jobs"])
def test_a_body_over_the_limit_is_a_413_declared_or_counted(admin, settings, path):
    huge = b"[" + b" " * settings.max_request_bytes + b"]"
    declared = admin.post(path, content=huge, headers={"Content-Type": "application/json"})
    assert declared.status_code == 413 and "the limit is" in declared.json()["detail"]

    def chunks():
        for _ in range(settings.max_request_bytes // 65536 + 2):
            yield b" " * 65536

    counted = admin.post(path, content=chunks(), headers={"Content-Type": "application/json"})
    assert counted.status_code == 413 and "over the limit" in counted.json()["detail"]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def _send_large(url: str, headers: dict[str, str], size: int) -> tuple[bytes, int]:
    """Send a request declaring a `size`-byte body, the headers first: the answer, and how much of the body went
    before the server closed the connection (the server answers before reading any)."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port)) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "localhost", "Content-Type": "application/json",
                                                       "Content-Length": str(size), **headers}.items())
        sock.sendall(f"POST /api/v1/tenants HTTP/1.1\r\n{head}\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        sent, block = 0, b" " * (1 << 20)
        try:
            while sent < size:
                sock.sendall(block)
                sent += len(block)
        except OSError:  # closed by the server: the rest is never read
            pass
        return answer, sent


def test_a_100_mb_body_without_a_token_is_a_401_read_by_no_one_and_with_one_a_413(settings, db):
    with serving(create_app(settings, db, run_loops=False)) as url:
        before = _rss_bytes()
        answer, _ = _send_large(url, {}, 100 * 1024 * 1024)
        grown = _rss_bytes() - before
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert grown < 10 * 1024 * 1024, grown
        answer, _ = _send_large(url, {"Authorization": "Bearer admin-test-token"}, 100 * 1024 * 1024)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
