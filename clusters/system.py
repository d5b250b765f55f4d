"""The broker's own names on a member, apart from the modules that call members (so the CLI and the store read them
without loading the Kubernetes client): its system namespace, where `join` keeps its identity, and the prefix of
what `join` makes there, and the mark on what the broker makes there."""

SYSTEM_NAMESPACE = "archipelago-system"
NAME_PREFIX = "archipelago-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "archipelago"}  # the broker's mark on what it makes on a member


def made_by_us(obj) -> bool:
    """Does a member's object carry the broker's mark?"""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in MANAGED_BY.items())
