"""Registration over real HTTPS: each bad kubeconfig gets its own clear error and stores nothing;
credentials never reach the database in clear, an API answer, an error or a log line."""

from __future__ import annotations

import base64
import logging
import sys
import textwrap

import pytest
import yaml
from sqlalchemy import func, select, text

from broker.store.db.models import Cluster, Event
from tests.clusters.conftest import TOKEN, register


def _kubeconfig(sim, name: str, edit) -> str:
    config = yaml.safe_load(sim.kubeconfig(name))
    edit(config["clusters"][0]["cluster"], config["users"][0]["user"], config)
    return yaml.safe_dump(config)


def _clusters(db) -> int:
    with db.sessions() as session:
        return session.scalar(select(func.count()).select_from(Cluster))


def test_registration_answers_what_it_found(api, sim, db):
    found = register(api, sim, "crd", labels={"region": "eu", "accelerator": "h100"})
    assert (found["state"], found["kubernetes_version"], found["jobset_crd"], found["hypernode_source"]) == \
        ("Ready", "v1.31.4", True, "crd")
    assert found["api_server"] == sim.cluster_url("crd") and found["labels"]["accelerator"] == "h100"
    listed = api.get("/api/v1/clusters").json()
    assert [c["name"] for c in listed] == ["crd"] and listed[0]["nodes"] == 12
    with db.sessions() as session:
        assert session.scalar(select(Event.reason).where(Event.object_id == "crd").order_by(Event.id)) == "Registered"


def _cases(sim):
    ca = yaml.safe_load(sim.kubeconfig("crd"))["clusters"][0]["cluster"]["certificate-authority-data"]
    other_ca = base64.b64encode(_other_ca_pem()).decode()
    return {
        "yaml": ("clusters: [unclosed\n  token: " + TOKEN, 422, "not valid YAML at line"),
        "context": (sim.kubeconfig("crd"), 422, "no such context 'prod' in the kubeconfig; it has: crd", {"context": "prod"}),
        "unreachable": (_kubeconfig(sim, "crd", lambda c, u, k: c.update(server="https://127.0.0.1:9/x")), 502,
                        "cannot reach https://127.0.0.1:9/x: Failed to establish a new connection: "
                        "[Errno 111] Connection refused"),
        "tls": (_kubeconfig(sim, "crd", lambda c, u, k: c.update({"certificate-authority-data": other_ca})), 502,
                "TLS handshake with " + sim.cluster_url("crd") + " failed: certificate verify failed"),
        "401": (_kubeconfig(sim, "crd", lambda c, u, k: u.update(token="wrong")), 422,
                "rejected the credentials (401 Unauthorized)"),
        "jobset": (sim.kubeconfig("nojobset"), 422, "does not serve jobsets.jobset.x-k8s.io/v1alpha2"),
        "exec": (_kubeconfig(sim, "crd", lambda c, u, k: u.update(exec={"command": "sh", "apiVersion": "x"})), 422,
                 "`exec` is refused: it would run a command on the broker's host"),
        "auth-provider": (_kubeconfig(sim, "crd", lambda c, u, k: u.update({"auth-provider": {"name": "oidc"}})),
                          422, "`auth-provider` is refused"),
        "ca-file": (_kubeconfig(sim, "crd", lambda c, u, k: c.update({"certificate-authority": "/etc/ssl/ca.pem"})),
                    422, "`certificate-authority` is a file path on the broker's host"),
        "key-file": (_kubeconfig(sim, "crd", lambda c, u, k: u.update({"client-certificate": "/a.crt",
                                                                       "client-key": "/a.key"})),
                     422, "`client-certificate` is a file path"),
        "token-file": (_kubeconfig(sim, "crd", lambda c, u, k: u.update(tokenFile="/var/run/token")), 422,
                       "`tokenFile` is a file path"),
        "insecure": (_kubeconfig(sim, "crd", lambda c, u, k: c.update({"insecure-skip-tls-verify": True})), 422,
                     "insecure-skip-tls-verify is refused"),
        "http": (_kubeconfig(sim, "crd", lambda c, u, k: c.update(server="http://127.0.0.1:9/x")), 422,
                 "plain HTTP"),
        "bad-ca": (_kubeconfig(sim, "crd", lambda c, u, k: c.update({"certificate-authority-data": "bm90IGEgY2VydA=="})),
                   422, "the certificate authority is not a PEM certificate"),
    }, ca


def _other_ca_pem() -> bytes:
    from clusters.sim.tls import make_serving_cert

    return make_serving_cert("127.0.0.1").ca_pem


def test_each_bad_kubeconfig_gets_its_error_and_stores_nothing(api, sim, db, caplog):
    caplog.set_level(logging.DEBUG)
    cases, ca = _cases(sim)
    for case, (kubeconfig, status, message, *extra) in cases.items():
        answer = api.post("/api/v1/clusters", json={"name": "crd", "kubeconfig": kubeconfig, **(extra[0] if extra else {})})
        assert answer.status_code == status, (case, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert message in answer.json()["detail"], (case, answer.json())
        assert TOKEN not in answer.text and ca not in answer.text
    assert _clusters(db) == 0
    assert TOKEN not in caplog.text and ca not in caplog.text


def test_a_taken_name_is_a_conflict(api, sim, db):
    register(api, sim, "crd")
    answer = api.post("/api/v1/clusters", json={"name": "crd", "kubeconfig": sim.kubeconfig("labels")})
    assert answer.status_code == 409 and "already registered" in answer.json()["detail"]
    bad = api.post("/api/v1/clusters", json={"name": "Bad_Name", "kubeconfig": sim.kubeconfig("labels")})
    assert bad.status_code == 422 and "DNS-1123" in bad.json()["detail"]
    assert _clusters(db) == 1


def test_only_admins_register(api, sim, db):
    answer = api.post("/api/v1/clusters", json={"name": "crd", "kubeconfig": sim.kubeconfig("crd")},
                      headers={"Authorization": "Bearer not-a-token"})
    assert answer.status_code == 401 and _clusters(db) == 0


def test_the_stored_row_holds_no_plaintext_credential(api, sim, db):
    register(api, sim, "crd")
    ca = yaml.safe_load(sim.kubeconfig("crd"))["clusters"][0]["cluster"]["certificate-authority-data"]
    with db.engine.connect() as connection:
        row = connection.execute(text("SELECT * FROM clusters")).one()
    stored = b"".join(bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode() for v in row)
    for secret in (TOKEN.encode(), ca.encode(), base64.b64decode(ca)[30:90]):
        assert secret not in stored
    for path in ("/api/v1/clusters", "/api/v1/clusters/crd"):
        assert TOKEN not in api.get(path).text and "certificate-authority" not in api.get(path).text


def test_exec_and_files_work_where_an_admin_allows_them(settings, db, sim, tmp_path):
    from fastapi.testclient import TestClient

    from api.app import create_app
    from tests.clusters.conftest import ADMIN

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    plugin = textwrap.dedent(f"""
        import json; print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                                       "status": {{"token": "{TOKEN}"}}}}))""")
    by_exec = _kubeconfig(sim, "crd", lambda c, u, k: (u.pop("token"), u.update(exec={
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": ["-c", plugin]})))
    by_file = _kubeconfig(sim, "labels", lambda c, u, k: (u.pop("token"), u.update(tokenFile=str(token_file))))
    allowing = settings.model_copy(update={"allow_kubeconfig_exec": True, "allow_kubeconfig_files": True})
    with TestClient(create_app(allowing, db, run_loops=False), headers=ADMIN) as api:
        for name, kubeconfig in (("crd", by_exec), ("labels", by_file)):
            answer = api.post("/api/v1/clusters", json={"name": name, "kubeconfig": kubeconfig})
            assert answer.status_code == 201, answer.text
            assert answer.json()["nodes"] > 0


@pytest.mark.parametrize("backend", ["sqlite"])
def test_cluster_labels_are_editable(api, sim, backend):
    register(api, sim, "crd", labels={"region": "eu", "tier": "gold"})
    patched = api.patch("/api/v1/clusters/crd", json={"labels": {"tier": None, "gpu": "h100"},
                                                       "taints": [{"key": "maintenance", "effect": "NoSchedule"}]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["labels"] == {"region": "eu", "gpu": "h100"}
    assert patched.json()["taints"] == [{"key": "maintenance", "effect": "NoSchedule"}]
    bad = api.patch("/api/v1/clusters/crd", json={"labels": {"gpu": "not a value!"}})
    assert bad.status_code == 422 and "invalid value" in bad.json()["detail"]
    assert api.patch("/api/v1/clusters/nope", json={"labels": {}}).status_code == 404
