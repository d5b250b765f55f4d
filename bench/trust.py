"""What a stranger's request costs the broker, and what a watch reads.

    python bench/trust.py [--megabytes N] [--polls N]

`archipelago serve`'s app runs as its own process on a fresh SQLite database (bench/api.py's helpers). Then:
1. N MB bodies sent to POST /api/v1/tenants (a route whose body is a model) without a token, then with a tenant's:
   the server process's resident memory before and after (from /proc), and how long each answer (401, 413) took
   from the end of the headers;
2. a watch's polls over an event log of 20,000 recent events with nothing new: the event queries and time each poll
   takes (its cursor asks for the ids after its own and for the gaps it saw, not every event of the last 30 s).
Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy import create_engine, event, func, insert, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api.kube.objects import COMMIT_SLACK  # noqa: E402
from api.kube.watch import EventCursor  # noqa: E402
from bench.api import TENANT_TOKEN, broker_server, database, prepare  # noqa: E402
from broker.store.db.models import Event  # noqa: E402
from broker.store.db.session import make_engine, make_sessionmaker  # noqa: E402
from broker.store.tenancy import Principal  # noqa: E402


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096


def send_body(base: str, megabytes: int, token: str | None) -> tuple[str, float]:
    """Declare a body of `megabytes`, send the headers, stream the body until the server answers or closes: the
    status line and the seconds from the end of the headers to the answer."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port)) as sock:
        head = {"Host": "bench", "Content-Type": "application/json", "Content-Length": str(megabytes << 20),
                **({"Authorization": f"Bearer {token}"} if token else {})}
        sock.sendall(("POST /api/v1/tenants HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
                      + "\r\n").encode())
        started = time.perf_counter()
        sock.settimeout(0)
        answer, block, sent = b"", b" " * (1 << 16), 0
        while b"\r\n" not in answer:
            try:
                answer += sock.recv(4096)
                continue
            except BlockingIOError:
                pass
            if sent < megabytes << 20:
                try:
                    sent += sock.send(block)
                except (BlockingIOError, OSError):
                    time.sleep(0.001)
            else:
                time.sleep(0.001)
        return answer.split(b"\r\n", 1)[0].decode(), time.perf_counter() - started


def watch_polls(url: str, polls: int) -> tuple[float, float, int]:
    """A caught-up watch cursor over 20,000 events of the last seconds, nothing new: its event queries and
    milliseconds per poll, and the events of the last 30 s (what each poll re-read before it kept a cursor)."""
    engine = create_engine(url)
    now = datetime.now(timezone.utc)
    with engine.begin() as connection:
        connection.execute(insert(Event), [{"time": now, "kind": "job", "object_id": str(i), "type": "Normal",
                                            "reason": "Admitted", "message": "-"} for i in range(20_000)])
        recent = connection.scalar(select(func.count()).select_from(Event).where(Event.time >= now - COMMIT_SLACK))
    engine.dispose()
    engine = make_engine(url)
    queries = [0]
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: queries.__setitem__(0, queries[0] + ("FROM events" in statement)))
    cursor = EventCursor(0)
    with make_sessionmaker(engine)() as session:
        while cursor.changed_jobs(session, Principal("admin"))[0]:
            pass  # caught up
        queries[0] = 0
        started = time.perf_counter()
        for _ in range(polls):
            cursor.changed_jobs(session, Principal("admin"))
        elapsed = time.perf_counter() - started
    engine.dispose()
    return queries[0] / polls, elapsed / polls * 1e3, recent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--polls", type=int, default=100)
    args = parser.parse_args()
    with database("sqlite") as url:
        prepare(url, 0)
        with broker_server(url) as (base, pid):
            before = rss_bytes(pid)
            stranger, stranger_s = send_body(base, args.megabytes, None)
            grown = rss_bytes(pid) - before
            tenant, tenant_s = send_body(base, args.megabytes, TENANT_TOKEN)
            grown_after = rss_bytes(pid) - before
        queries, poll_ms, recent = watch_polls(url, args.polls)
    figures = {"stranger_body_mb": args.megabytes, "stranger_answer": stranger, "stranger_answer_ms": stranger_s * 1e3,
               "rss_growth_mb": grown / 2**20, "tenant_answer": tenant, "tenant_answer_ms": tenant_s * 1e3,
               "rss_growth_after_both_mb": grown_after / 2**20, "watch_event_queries_per_poll": queries,
               "watch_poll_ms": poll_ms, "events_of_the_last_30_s": recent}
    print(f"{args.megabytes} MB body, no token: {stranger} in {stranger_s * 1e3:.1f} ms; server grew "
          f"{grown / 2**20:.1f} MB")
    print(f"{args.megabytes} MB body, a tenant's token: {tenant} in {tenant_s * 1e3:.1f} ms; server grew "
          f"{grown_after / 2**20:.1f} MB in all")
    print(f"a caught-up watch over {recent:,} events of the last 30 s: {queries:g} event query per poll, "
          f"{poll_ms:.2f} ms (each poll re-read all {recent:,} before)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
