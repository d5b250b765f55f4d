"""Single sign-on's cost per request: verifying an ID token (api.identity: its signature against the issuer's cached
keys, iss/aud/exp), against looking up one of the broker's own tokens; and the audit record a change writes in its
transaction (a PATCH of a queue, SQLite), against a read.

    python bench/identity.py [--requests N]

The issuer is a discovery document and a JWKS served on loopback by this process. Prints a table, then one JSON
object as the last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jwt  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from api.app import create_app  # noqa: E402
from api.identity import OidcVerifier  # noqa: E402
from broker.process.settings import Settings  # noqa: E402
from broker.store.db.runtime import open_database  # noqa: E402


def issuer() -> tuple[str, object, ThreadingHTTPServer]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": "k1", "alg": "RS256"}
    documents: dict[str, dict] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps(documents[self.path]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    documents["/.well-known/openid-configuration"] = {"issuer": url, "jwks_uri": f"{url}/jwks"}
    documents["/jwks"] = {"keys": [public]}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return url, key, server


def per_call(fn, n: int) -> float:
    """Median seconds of one call, over five rounds of n."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - started) / n)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    url, key, server = issuer()
    settings = Settings(oidc_issuer=url, oidc_client_id="archipelago", oidc_group_tenants={"g": "research"})
    verifier = OidcVerifier(settings)
    now = int(time.time())
    token = jwt.encode({"iss": url, "aud": "archipelago", "sub": "alice", "iat": now, "exp": now + 3600,
                        "email": "alice@example.com", "groups": ["g"]}, key, algorithm="RS256", headers={"kid": "k1"})
    verifier.identity(token)  # discovery and keys fetched once
    verify_s = per_call(lambda: verifier.identity(token), args.requests)

    with tempfile.TemporaryDirectory() as tmp:
        db_settings = Settings(database_url=f"sqlite:///{tmp}/bench.db", admin_token="bench-admin")
        database = open_database(db_settings, upgrade=True)
        with TestClient(create_app(db_settings, database, run_loops=False),
                        headers={"Authorization": "Bearer bench-admin"}) as api:
            api.post("/api/v1/tenants", json={"name": "research"})
            api.post("/api/v1/queues", json={"name": "q", "tenant": "research"})
            weights = iter(range(1, 10**9))
            patch_s = per_call(lambda: api.patch("/api/v1/queues/q", json={"weight": next(weights)}), args.requests // 5)
            read_s = per_call(lambda: api.get("/api/v1/queues/q"), args.requests // 5)
            records = api.get("/api/v1/audit", params={"limit": 1}).json()["items"][0]["id"]
    server.shutdown()
    rows = [("ID token verified", "signature against the cached JWKS, iss/aud/exp, groups → tenant",
             f"{verify_s * 1e6:.0f} µs"),
            ("a change, audited", "PATCH /queues/q as an admin, its audit record in its transaction, SQLite",
             f"{patch_s * 1e3:.2f} ms (a read: {read_s * 1e3:.2f} ms)")]
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, width)))
    print(json.dumps({"id_token_verify_us": round(verify_s * 1e6, 1), "audited_patch_ms": round(patch_s * 1e3, 3),
                      "read_ms": round(read_s * 1e3, 3), "audit_records": records}))


if __name__ == "__main__":
    main()
