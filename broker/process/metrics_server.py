"""The loop process's own `/metrics`: under `archipelago serve --workers N` the loop services run in the parent
process, which serves no API, so its figures (the leader lease held and lost, lanes held and their lag, cycles)
would reach no scrape; this serves them on ARCHIPELAGO_LOOPS_METRICS_PORT, to the same tokens as the API's."""

from __future__ import annotations

import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from broker.process.metrics import exposition
from broker.process.settings import Settings
from broker.store.db.runtime import Database
from broker.store.authentication import authenticate


def may_read_metrics(database: Database, settings: Settings, token: str | None) -> bool:
    """The metrics token (ARCHIPELAGO_METRICS_TOKEN) or an admin token, as for the API's `/metrics`."""
    if not token:
        return False
    if settings.metrics_token and hmac.compare_digest(token.encode(), settings.metrics_token.encode()):
        return True
    with database.read() as session:
        principal = authenticate(session, settings.admin_token, token)
    return principal is not None and principal.is_admin


def serve_loop_metrics(database: Database, settings: Settings, host: str, port: int) -> ThreadingHTTPServer:
    """`GET /metrics` on `host:port` (where the API listens, another port), answered from daemon threads;
    `shutdown()` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                return self._answer(404, b"only /metrics is served here\n")
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if not may_read_metrics(database, settings, token.strip() if scheme.lower() == "bearer" else None):
                return self._answer(403, b"metrics need the metrics token (ARCHIPELAGO_METRICS_TOKEN) or an admin "
                                         b"token, as a bearer token\n")
            self._answer(200, exposition(database.read, queue_names=settings.metrics_queue_names),
                         CONTENT_TYPE_LATEST)

        def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # a scrape every few seconds is not news
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="loop-metrics", daemon=True).start()
    return server
