"""The provider's ID tokens as bearer tokens (issue #51), against the real OpenID provider on loopback: its keys by
discovery, a rotated key refused, and each way a token can be wrong refused with a 401 that says which; the groups
decide who a user is — an admin, one tenant, or several it must choose among."""

from __future__ import annotations

from typing import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.identity.conftest import CLIENT, new_key, sso_settings

ADMIN = {"Authorization": "Bearer admin-test-token"}


@pytest.fixture
def api(settings, db, provider) -> Iterator[TestClient]:
    with TestClient(create_app(sso_settings(settings, provider), db, run_loops=False)) as client:
        for tenant in ("research", "vision"):
            assert client.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]},
                               headers=ADMIN).status_code == 201
            assert client.post("/api/v1/queues", json={"name": f"{tenant}-q", "tenant": tenant},
                               headers=ADMIN).status_code == 201
        yield client


def who(api, token: str, **headers) -> tuple[int, dict]:
    answer = api.get("/api/v1/whoami", headers={"Authorization": f"Bearer {token}", **headers})
    return answer.status_code, answer.json()


def test_groups_decide_who_a_user_is(api, provider):
    assert who(api, provider.token("alice")) == (200, {"role": "tenant", "tenant": "research"})
    assert who(api, provider.token("bob")) == (200, {"role": "tenant", "tenant": "vision"})
    assert who(api, provider.token("root")) == (200, {"role": "admin", "tenant": None})
    status, problem = who(api, provider.token("carol"))
    assert status == 401 and "carol@example.com is in tenants research, vision: name one" in problem["detail"]
    assert who(api, provider.token("carol"), **{"X-Archipelago-Tenant": "vision"}) == (
        200, {"role": "tenant", "tenant": "vision"})
    status, problem = who(api, provider.token("nobody"))
    assert status == 401 and "in no group that maps to a tenant" in problem["detail"]


def test_what_a_user_sees_is_its_tenants(api, provider):
    alice = {"Authorization": f"Bearer {provider.token('alice')}"}
    assert [q["name"] for q in api.get("/api/v1/queues", headers=alice).json()] == ["research-q"]
    assert api.get("/api/v1/tenants/vision", headers=alice).status_code == 404
    root = {"Authorization": f"Bearer {provider.token('root')}"}
    assert sorted(q["name"] for q in api.get("/api/v1/queues", headers=root).json()) == ["research-q", "vision-q"]


@pytest.mark.parametrize("wrong, words", [
    ({"issuer": "http://127.0.0.1:1/another"}, "issued by 'http://127.0.0.1:1/another'"),
    ({"lifetime": -3600}, "the ID token has expired"),
    ({"not_before": 3600}, "not valid yet"),
    ({"audience": "someone-else"}, f"for another client, not {CLIENT}"),
])
def test_a_wrong_token_is_refused_with_a_401_that_says_why(api, provider, wrong, words):
    status, problem = who(api, provider.token("alice", **wrong))
    assert status == 401 and words in problem["detail"], problem
    assert api.get("/api/v1/whoami", headers={"Authorization": f"Bearer {provider.token('alice', **wrong)}"}) \
        .headers["www-authenticate"] == "Bearer"


def test_a_token_signed_by_a_key_the_issuer_does_not_publish_is_refused(api, provider):
    _, stranger = new_key(provider.key_id)  # the same key id, another key: the signature fails
    status, problem = who(api, provider.token("alice", key=stranger))
    assert status == 401 and "not valid" in problem["detail"]


def test_a_rotated_key_is_found_and_the_old_one_refused(api, provider):
    before = provider.token("alice")
    assert who(api, before)[0] == 200
    provider.rotate("k2")  # the provider now signs with k2 only, and publishes only k2
    after = provider.token("alice")
    assert who(api, after) == (200, {"role": "tenant", "tenant": "research"})  # an unknown kid: the keys fetched again
    status, problem = who(api, before)
    assert status == 401 and "signed with a key the issuer does not publish" in problem["detail"]


def test_static_tokens_stay_for_automation(api):
    assert who(api, "admin-test-token") == (200, {"role": "admin", "tenant": None})
    token = api.post("/api/v1/tokens", json={"role": "tenant", "tenant": "research"}, headers=ADMIN).json()["token"]
    assert who(api, token) == (200, {"role": "tenant", "tenant": "research"})


def test_the_kubernetes_front_door_takes_id_tokens(api, provider):
    answer = api.get("/k8s/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets",
                     headers={"Authorization": f"Bearer {provider.token('alice')}"})
    assert answer.status_code == 200, answer.text
    refused = api.get("/k8s/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets",
                      headers={"Authorization": f"Bearer {provider.token('alice', lifetime=-3600)}"})
    assert refused.status_code == 401 and "expired" in refused.json()["message"]


def test_a_signed_in_users_changes_are_audited_by_name(api, provider):
    root = {"Authorization": f"Bearer {provider.token('root')}"}
    assert api.patch("/api/v1/queues/research-q", json={"weight": 2}, headers=root).status_code == 200
    alice = {"Authorization": f"Bearer {provider.token('alice')}"}
    assert api.patch("/api/v1/queues/research-q", json={"weight": 3}, headers=alice).status_code == 403
    trail = api.get("/api/v1/audit", params={"limit": 2}, headers=ADMIN).json()["items"]
    assert [(r["actor"], r["outcome"]) for r in trail] == [("oidc alice@example.com (tenant research)", "refused"),
                                                           ("oidc root@example.com (admin)", "succeeded")]
