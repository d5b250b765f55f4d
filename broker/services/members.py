"""What the loop services share about the members they call: one client per member, the back-off after failures,
and the states in which no loop calls a member."""

from __future__ import annotations

import random
import threading
from typing import Callable

from broker.process.settings import Settings
from broker.store.db.crypto import KubeconfigCipher
from broker.store.inventory import connect
from clusters.member import MemberClient

UNAVAILABLE_STATES = ("NotReady", "Pending")  # members the dispatcher and the status loop do not call
MAX_BACKOFF = 300.0


def backoff(failures: int, base: float, cap: float = MAX_BACKOFF) -> float:
    """Seconds to wait after `failures` failures in a row: doubling from `base`, capped, ±20% jitter
    so that members that failed together do not retry together."""
    return min(base * 2 ** max(failures - 1, 0), cap) * random.uniform(0.8, 1.2)


class MemberClients:
    """One MemberClient per registered cluster, built from its stored (encrypted) kubeconfig and
    shared by the loops; rebuilt when the stored kubeconfig changes."""

    def __init__(self, settings: Settings, guard: Callable[[], None] = lambda: None) -> None:
        """`guard` runs before every request to a member (`Database.ensure_leading` of the loops' replica)."""
        self.settings, self.guard = settings, guard
        self._cipher = KubeconfigCipher(settings.fernet_key())
        self._clients: dict[int, tuple[bytes, MemberClient]] = {}
        self._lock = threading.Lock()

    def get(self, cluster_id: int, blob: bytes, context: str | None) -> MemberClient:
        """Raises KubeconfigError (or ValueError if the secret key changed)."""
        blob = bytes(blob)
        with self._lock:
            known = self._clients.get(cluster_id)
            if known is not None and known[0] == blob:
                return known[1]
        client = connect(self.settings, self._cipher.decrypt(blob), context)
        client.guard = self.guard
        with self._lock:
            known = self._clients.get(cluster_id)
            if known is not None and known[0] == blob:  # another thread got there first
                client.close()
                return known[1]
            self._clients[cluster_id] = (blob, client)
        if known is not None:
            known[1].close()
        return client

    def retain(self, cluster_ids: set[int]) -> None:
        """Close the clients of clusters no longer registered."""
        with self._lock:
            gone = [self._clients.pop(i)[1] for i in list(self._clients) if i not in cluster_ids]
        for client in gone:
            client.close()

    def close(self) -> None:
        self.retain(set())
