"""The CLI starts quickly: loading the `archipelago` command loads none of the heavy libraries (the database, the
Kubernetes client, the HTTP client, settings, tables); each command imports what it uses. (The time itself is
bench/cli.py's to measure.)"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("sqlalchemy", "kubernetes", "httpx", "pydantic_settings", "rich", "uvicorn", "fastapi", "cryptography",
         "yaml", "api", "broker.store.db", "clusters.member")


def test_loading_the_command_loads_no_heavy_library():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, json, broker.cli.app; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True).stdout
    modules = json.loads(loaded)
    assert [m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY] == []
