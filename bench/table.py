"""How every benchmark ends: a readable table, then one JSON object of its figures as the last line."""

from __future__ import annotations

import json
from typing import Any, Sequence


def print_table(rows: Sequence[tuple[str, str, str]], figures: dict[str, Any]) -> None:
    """`rows` are (measure, value, target); the JSON line is for machines, the table for people."""
    width = max(len(name) for name, _, _ in rows)
    value_width = max(10, *(len(value) for _, value, _ in rows))
    print(f"{'measure'.ljust(width)}  {'value':>{value_width}}  target")
    for name, value, target in rows:
        print(f"{name.ljust(width)}  {value:>{value_width}}  {target}")
    print(json.dumps(figures))
