"""At most ARCHIPELAGO_MAX_WATCHES_PER_TOKEN watches open per token: one more is a 429 Status with Retry-After, and a
closed watch gives its slot back. The app is driven as a server drives it (ASGI): a watch ends when its client's
disconnect reaches it, and the test awaits that end, not a time."""

from __future__ import annotations

import asyncio
import json

from fastapi.testclient import TestClient

from api.app import create_app
from api.kube.watch import WATCHES
from tests.servers import run_async

PATH = "/k8s/apis/jobset.x-k8s.io/v1alpha2/jobsets"
ADMIN = "Bearer admin-test-token"


class Watch:
    """One watch request, open until `close()` sends its client's disconnect."""

    def __init__(self, app) -> None:
        self.sent: list[dict] = []
        self.started, self._closed = asyncio.Event(), asyncio.Event()
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": PATH, "raw_path": PATH.encode(), "root_path": "",
                 "query_string": b"watch=true&timeoutSeconds=600", "client": ("127.0.0.1", 1),
                 "server": ("broker", 80), "headers": [(b"host", b"broker"), (b"authorization", ADMIN.encode())]}
        self.done = asyncio.ensure_future(app(scope, self._receive, self._send))

    async def _receive(self) -> dict:
        await self._closed.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        self.sent.append(message)
        self.started.set()

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    async def close(self) -> None:
        self._closed.set()
        await self.done


async def _watches(app) -> None:
    first, second = Watch(app), Watch(app)
    await asyncio.gather(first.started.wait(), second.started.wait())
    assert (first.status, second.status) == (200, 200)
    refused = Watch(app)
    await refused.done  # answered at once, nothing streamed
    assert refused.status == 429
    headers = dict(refused.sent[0]["headers"])
    body = json.loads(b"".join(m.get("body", b"") for m in refused.sent[1:]))
    assert (body["reason"], headers[b"retry-after"]) == ("TooManyRequests", b"1")
    assert "holds 2 watches open already" in body["message"]
    await second.close()
    assert WATCHES.held(ADMIN) == 1  # its slot given back as its stream ended
    again = Watch(app)
    await again.started.wait()
    assert again.status == 200
    await asyncio.gather(again.close(), first.close())
    assert WATCHES.held(ADMIN) == 0


def test_one_watch_more_than_a_token_may_hold_is_a_429_until_one_closes(settings, db):
    settings.max_watches_per_token = 2
    app = create_app(settings, db, run_loops=False)
    with TestClient(app):  # the app started (its lifespan), then driven here
        run_async(lambda: _watches(app))
