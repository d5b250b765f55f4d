"""Durations as people and Go write them ("90s", "1h30m", "2d"): the simulator's annotations and the tenants'
declared runtimes."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_SCALE = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int | float) -> float:
    """Seconds in "90", "90s", "1h30m", "2d", "500ms" (Go's durations, and days); ValueError says what it read."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    text = str(text).strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise ValueError(f"not a duration: {text!r} (write it as 90s, 45m, 2h30m or 1d)")
    return sum(float(amount) * _SCALE[unit] for amount, unit in parts)
