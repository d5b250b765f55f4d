"""The example inputs in ../shared/examples (beside the checkout), or ARCHIPELAGO_SHARED_DIR/examples.

Every listing is non-empty: a missing folder makes the tests that read it fail by name, never skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

SHARED = Path(os.environ.get("ARCHIPELAGO_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
EXAMPLES = SHARED / "examples"


def example_path(name: str) -> Path:
    path = EXAMPLES / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the tests read ../shared/examples beside the checkout "
                                "(or set ARCHIPELAGO_SHARED_DIR)")
    return path


def example(name: str) -> dict:
    return yaml.safe_load(example_path(name).read_text())


def example_documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(example_path(name).read_text()) if d]


def jobset_examples() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("jobset-*.yaml")) or ["jobset-examples-missing.yaml"]
