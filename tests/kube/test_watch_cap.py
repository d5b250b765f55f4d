"""At most ARCHIPELAGO_MAX_WATCHES_PER_TOKEN watches open per token: one more is a 429 Status with Retry-After, and a
closed watch gives its slot back. Over real HTTP: a watch's headers come before its first event."""

from __future__ import annotations

import httpx

from api.app import create_app
from api.kube.watch import WATCHES
from tests.servers import serving

WATCH = "/k8s/apis/jobset.x-k8s.io/v1alpha2/jobsets?watch=true&timeoutSeconds=600"
ADMIN = {"Authorization": "Bearer admin-test-token"}


def test_one_watch_more_than_a_token_may_hold_is_a_429_until_one_closes(settings, db):
    settings.max_watches_per_token = 2
    with serving(create_app(settings, db, run_loops=False)) as url, httpx.Client(base_url=url, headers=ADMIN) as http:
        first, second = (http.stream("GET", WATCH) for _ in range(2))
        for watch in (first, second):
            assert watch.__enter__().status_code == 200
        refused = http.get(WATCH)
        assert refused.status_code == 429
        assert (refused.json()["reason"], refused.headers["retry-after"]) == ("TooManyRequests", "1")
        assert "holds 2 watches open already" in refused.json()["message"]
        second.__exit__(None, None, None)
        for _ in range(600):  # the server sees the close at its next poll of the stream
            if WATCHES.held(ADMIN["Authorization"]) < 2:
                break
            http.get("/healthz")
        again = http.stream("GET", WATCH)
        assert again.__enter__().status_code == 200
        again.__exit__(None, None, None)
        first.__exit__(None, None, None)
