"""pytest plugin of `make mutants`: a mutant's tests run cheapest first, so the first test to fail, which ends
the run (`-x`), comes sooner; which tests run does not change. The tests that start no simulator come first
(the outbox's rules tests, milliseconds each; a loaded machine's clean-run durations do not tell them apart
from the quicker simulator tests reliably), each kind fastest first by the durations mutmut recorded in its
clean run (mutmut-stats.json, in the folder the tests run in). Without recorded durations (the clean run)
the order is pytest's own."""

from __future__ import annotations

import json
from pathlib import Path

STATS = Path("mutmut-stats.json")


def pytest_collection_modifyitems(items) -> None:
    if STATS.exists():
        durations = json.loads(STATS.read_text())["duration_by_test"]
        items.sort(key=lambda item: ("sim" in item.fixturenames, durations.get(item.nodeid, 0.0)))
