"""Override rules through the API: admins create, read, replace and delete them; bad input is a 4xx naming the field."""

from __future__ import annotations

import pytest

RULE = {"name": "eu-mirror", "order": 3, "selector": "region in (eu, uk)", "description": "the EU mirror",
        "image": {"registry": "mirror.eu:5000", "from": "docker.io"},
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.eu:3128"}]}


def test_rules_are_created_listed_read_replaced_and_deleted(admin):
    created = admin.post("/api/v1/overrides", json=RULE)
    assert created.status_code == 201, created.text
    assert created.json() == RULE
    other = {"name": "a-first", "cluster": "us-east", "nodeSelector": {"gpu": "a100"}}
    assert admin.post("/api/v1/overrides", json=other).status_code == 201
    assert [r["name"] for r in admin.get("/api/v1/overrides").json()] == ["a-first", "eu-mirror"]  # by order
    assert admin.get("/api/v1/overrides/eu-mirror").json() == RULE

    replaced = admin.put("/api/v1/overrides/eu-mirror", json={"cluster": "eu-west", "labels": {"mirror": "eu"}})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json() == {"name": "eu-mirror", "order": 0, "cluster": "eu-west", "labels": {"mirror": "eu"}}
    assert admin.get("/api/v1/overrides/eu-mirror").json() == replaced.json()

    assert admin.delete("/api/v1/overrides/eu-mirror").status_code == 204
    assert admin.get("/api/v1/overrides/eu-mirror").status_code == 404
    assert [r["name"] for r in admin.get("/api/v1/overrides").json()] == ["a-first"]


@pytest.mark.parametrize("change, field", [
    ({"selector": "region in (eu"}, "selector"),
    ({"jsonPatch": [{"op": "replace", "path": "/metadata/namespace", "value": "x"}]}, "jsonPatch[0].path"),
    ({"env": [{"name": "NOT=VALID", "value": "1"}]}, "env[0].name"),
    ({"image": {"prefix": "https://mirror"}}, "image.prefix"),
    ({"labels": {"archipelago.io/placement-id": "7"}}, "labels['archipelago.io/placement-id']"),
    ({"cluster": "eu-west"}, "cluster"),  # and the selector: two targets
    ({"name": "Not_A_Name"}, "name"),
    ({"volumes": []}, "volumes"),  # not a change a rule can make
])
def test_a_bad_rule_is_a_problem_naming_the_field(admin, change, field):
    answer = admin.post("/api/v1/overrides", json={**RULE, **change})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert field in [e["field"] for e in answer.json()["errors"]]
    assert admin.get("/api/v1/overrides").json() == []


def test_names_are_unique_and_unknown_ones_are_404(admin):
    assert admin.post("/api/v1/overrides", json=RULE).status_code == 201
    assert admin.post("/api/v1/overrides", json=RULE).status_code == 409
    assert admin.put("/api/v1/overrides/nope", json=RULE).status_code == 404
    assert admin.delete("/api/v1/overrides/nope").status_code == 404
    renamed = admin.put("/api/v1/overrides/eu-mirror", json={**RULE, "name": "other"})
    assert renamed.status_code == 422 and renamed.json()["errors"][0]["field"] == "name"


def test_only_admins_touch_rules(admin, research):
    assert admin.post("/api/v1/overrides", json=RULE).status_code == 201
    assert research.get("/api/v1/overrides").status_code == 403
    assert research.post("/api/v1/overrides", json={**RULE, "name": "mine"}).status_code == 403
    assert research.delete("/api/v1/overrides/eu-mirror").status_code == 403
    assert admin.get("/api/v1/overrides/eu-mirror").status_code == 200
