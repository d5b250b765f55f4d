"""Configuration mistakes get one clear line; `archipelago serve` comes up on the embedded default."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect

import broker
from api.app import create_app
from broker.process.settings import ConfigError, Settings, get_settings
from broker.store.db.runtime import Database, open_database

ARCHIPELAGO = str(Path(sys.executable).parent / "archipelago")


def run_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ARCHIPELAGO_")} | env
    return subprocess.run([ARCHIPELAGO, *args], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("url, expected", [
    ("nonsense", "is not a database URL"),
    ("mysql://root@localhost/db", "runs on sqlite or postgresql"),
    ("postgresql://postgres@127.0.0.1:1/nothing", "cannot reach the database at postgresql+psycopg://postgres@127.0.0.1:1"),
])
def test_bad_database_url_is_one_line(tmp_path, url, expected):
    result = run_cli("db", "upgrade", cwd=tmp_path, ARCHIPELAGO_DATABASE_URL=url, ARCHIPELAGO_SECRET_KEY="x" * 44)
    assert result.returncode == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name, value, expected", [
    ("ARCHIPELAGO_SCHEDULER_INTERVAL", "-1", "ARCHIPELAGO_SCHEDULER_INTERVAL: Input should be greater than 0"),
    ("ARCHIPELAGO_PORT", "abc", "ARCHIPELAGO_PORT: Input should be a valid integer"),
    ("ARCHIPELAGO_MEMBER_WORKERS", "0", "ARCHIPELAGO_MEMBER_WORKERS: Input should be greater than or equal to 1"),
    ("ARCHIPELAGO_PLACEMENT_SCORE_WEIGHTS", '{"Nearest": 1}', "unknown placement plugins ['Nearest']"),
    ("ARCHIPELAGO_LEASE_RENEW_PERIOD", "4", "must be at most a third of ARCHIPELAGO_LEASE_DURATION (10 s)"),
    ("ARCHIPELAGO_LOG_FORMAT", "xml", "ARCHIPELAGO_LOG_FORMAT: Input should be 'text' or 'json'"),
])
def test_a_bad_setting_is_named_in_one_line(tmp_path, name, value, expected):
    result = run_cli("serve", cwd=tmp_path, **{name: value})
    assert result.returncode == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_api_workers_need_postgresql(tmp_path):
    result = run_cli("serve", "--workers", "2", cwd=tmp_path)
    assert result.returncode == 2
    assert "--workers needs PostgreSQL" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_non_sqlite_database_needs_a_secret_key(tmp_path):
    result = run_cli("serve", cwd=tmp_path, ARCHIPELAGO_DATABASE_URL="postgresql://postgres@127.0.0.1/postgres")
    assert result.returncode == 2
    assert result.stderr.strip() == ("archipelago: ARCHIPELAGO_SECRET_KEY is not set; a non-SQLite database needs "
                                     "one (generate it with: archipelago secret generate)")


def test_a_malformed_secret_key_is_refused():
    with pytest.raises(ConfigError, match="not a Fernet key"):
        Settings(database_url="sqlite:///x.db", secret_key="too-short", _env_file=None).fernet_key()


def test_embedded_default_generates_a_private_key_once(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path}/data/archipelago.db", _env_file=None)
    key = settings.fernet_key()
    key_file = tmp_path / "data" / "archipelago.secret"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert settings.fernet_key() == key


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("ARCHIPELAGO_SCHEDULER_INTERVAL", "0.5")
    get_settings.cache_clear()
    try:
        assert get_settings().scheduler_interval == 0.5
    finally:
        get_settings.cache_clear()


def test_secret_generate_prints_a_usable_key(tmp_path):
    result = run_cli("secret", "generate", cwd=tmp_path)
    key = result.stdout.strip()
    assert Settings(database_url="sqlite:///x.db", secret_key=key, _env_file=None).fernet_key() == key.encode()


def test_health_readiness_and_version(settings, db):
    with TestClient(create_app(settings, db, run_loops=False)) as api:
        assert api.get("/healthz").json() == {"status": "ok"}
        assert api.get("/readyz").json() == {"status": "ready"}
        assert api.get("/api/v1/version").json() == {"version": broker.__version__}
        missing = api.get("/api/v1/nothing-here")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"


def test_readyz_fails_when_the_database_is_gone(settings, db):
    url = db.engine.url
    gone = url.set(database="/nonexistent/dir/x.db") if settings.is_sqlite else url.set(port=1)
    with TestClient(create_app(settings, Database(create_engine(gone), db.sessions), run_loops=False)) as api:
        answer = api.get("/readyz")
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/problem+json"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_serve_migrates_the_embedded_database_and_answers(tmp_path):
    port = _free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ARCHIPELAGO_")}
    server = subprocess.Popen([ARCHIPELAGO, "serve", "--port", str(port)], cwd=tmp_path, env=environment,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "serve did not answer within 30 s"
                time.sleep(0.1)
        assert answer.json() == {"status": "ok"}
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").json() == {"status": "ready"}
        engine = create_engine(f"sqlite:///{tmp_path / 'archipelago.db'}")
        assert {"alembic_version", "clusters", "jobs", "placements"} <= set(inspect(engine).get_table_names())
        engine.dispose()
        assert stat.S_IMODE((tmp_path / "archipelago.secret").stat().st_mode) == 0o600
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_sqlite_file_is_created_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "data" / "archipelago.db"
    database = open_database(Settings(database_url=f"sqlite:///{path}", _env_file=None), upgrade=True)
    database.dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
