"""Warnings about what a member reports (its topology, its devices), a few of each kind."""

from __future__ import annotations

MAX_WARNINGS_PER_KIND = 5


class Warnings:
    """Collects warnings, at most a few of each kind, so a broken 5,000-node member stays readable."""

    def __init__(self) -> None:
        self.kinds: dict[str, list[str]] = {}

    def add(self, kind: str, message: str) -> None:
        self.kinds.setdefault(kind, []).append(message)

    def messages(self) -> list[str]:
        out = []
        for messages in self.kinds.values():
            out.extend(messages[:MAX_WARNINGS_PER_KIND])
            if len(messages) > MAX_WARNINGS_PER_KIND:
                out.append(f"... and {len(messages) - MAX_WARNINGS_PER_KIND} more like it")
        return out
