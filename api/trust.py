"""Nothing is read before it is trusted: a request that carries a body is answered 401 before one byte of it is read
unless its bearer token is one the broker knows (an agent's on /api/v1/agent/, a tenant's or an admin's elsewhere),
and 413 as soon as its body, declared or counted while read, is over ARCHIPELAGO_MAX_REQUEST_BYTES — on every route.

Routes authenticate again (who is asking, with what rights); this gate only keeps strangers' bytes out. The tokens it
found known are remembered for a few seconds (hashed), so that a stream of submissions pays one lookup, not one each.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from http import HTTPStatus
from typing import Any, Callable

import anyio

from api.identity import verifier_for
from api.kube.errors import KubeError
from api.problems import problem_response
from broker.store.inventory import agent_cluster
from broker.store.errors import IdentityRefused
from broker.store.authentication import authenticate

AGENT_PREFIX = "/api/v1/agent/"
KUBE_PREFIX = "/k8s"
KNOWN_FOR = 5.0  # seconds a token found known lets bodies in without another lookup
KNOWN_MOST = 1024  # tokens remembered at once
UNTRUSTED = ("send a known bearer token (`Authorization: Bearer <token>`; a pull member's agent token on "
             f"{AGENT_PREFIX}) with a body: this one is missing, unknown, revoked or expired")


class TrustedBodies:
    """Pure ASGI, innermost: the gate above for every HTTP request with a body; the body, once whole and within
    bounds, is handed to the app as one message."""

    def __init__(self, app, clock: Callable[[], float] = time.monotonic) -> None:
        self.app, self.clock = app, clock
        self._known: OrderedDict[tuple[bool, bytes], float] = OrderedDict()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            return await self.app(scope, receive, send)
        state = scope["app"].state
        limit = state.settings.max_request_bytes
        headers = dict(scope["headers"])
        kube = scope["path"].startswith(KUBE_PREFIX)
        if not await self._trusted(state, scope["path"].startswith(AGENT_PREFIX), headers.get(b"authorization")):
            return await _refuse(scope, receive, send, kube, 401, UNTRUSTED, {"www-authenticate": "Bearer"})
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await _refuse(scope, receive, send, kube, 413,
                                 f"the body is {int(declared)} bytes; the limit is {limit} (split the batch)")
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                return await _refuse(scope, receive, send, kube, 413,
                                     f"the body is over the limit of {limit} bytes (split the batch)")
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _trusted(self, state: Any, agent: bool, authorization: bytes | None) -> bool:
        scheme, _, token = (authorization or b"").decode("latin-1").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        key = (agent, hashlib.sha256(token.encode()).digest())
        now = self.clock()
        if self._known.get(key, float("-inf")) > now:
            return True
        known = await anyio.to_thread.run_sync(_lookup, state, agent, token)
        if known:
            self._known[key] = now + KNOWN_FOR
            self._known.move_to_end(key)
            while len(self._known) > KNOWN_MOST:
                self._known.popitem(last=False)
        return known


def _lookup(state: Any, agent: bool, token: str) -> bool:
    with state.db.read() as session:
        if agent:
            return agent_cluster(session, token) is not None
        verifier = verifier_for(state.settings)
        if verifier is not None and verifier.takes(token):  # an ID token: known if the provider signed it for us
            try:
                verifier.verify(token)
            except IdentityRefused:
                return False
            return True
        return authenticate(session, state.settings.admin_token, token) is not None


def _has_body(scope: dict) -> bool:
    return any((name == b"content-length" and value != b"0") or name == b"transfer-encoding"
               for name, value in scope["headers"])


async def _refuse(scope, receive, send, kube: bool, status: int, detail: str,
                  headers: dict[str, str] | None = None) -> None:
    """The answer without the body read: a Status for the Kubernetes front door, problem+json elsewhere. The
    connection is closed (what the client still sends is not read)."""
    headers = {**(headers or {}), "connection": "close"}
    response = (KubeError(status, detail, headers=headers).response() if kube else
                problem_response(status, HTTPStatus(status).phrase, detail, headers))
    await response(scope, receive, send)
