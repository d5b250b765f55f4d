"""Errors the service functions raise; the API turns each into problem+json, the CLI into one line."""

from __future__ import annotations


class NotFound(LookupError):
    """No such object — or one the caller may not see (no existence leak across tenants)."""


class Conflict(ValueError):
    """The request is well-formed but clashes with what exists (a name taken, a job already finished)."""


class Invalid(ValueError):
    """A field is wrong; `path` names it (`spec.replicatedJobs[1].replicas`). `clusters`: why each
    cluster refuses it, when that is the problem."""

    def __init__(self, path: str, message: str, clusters: dict[str, str] | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message
        self.clusters = clusters


class IdentityRefused(Exception):
    """A bearer token that looks like an ID token of the configured OpenID provider but is not accepted, or speaks
    for no tenant the broker knows: the message says why (a 401)."""
