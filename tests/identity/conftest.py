"""A real OpenID provider on loopback for the identity tests: panva's oidc-provider (OpenID Certified), run by
Node.js from tests/identity/node_modules (`make test` installs it from the npm registry). Its signing keys are the
tests' own, so that they can also make tokens it never issued: expired, for another audience, of another issuer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

HERE = Path(__file__).resolve().parent
CLIENT = "archipelago"
ACCOUNTS = {
    "alice": {"email": "alice@example.com", "groups": ["ml-research"]},
    "bob": {"email": "bob@example.com", "groups": ["ml-vision"]},
    "carol": {"email": "carol@example.com", "groups": ["ml-research", "ml-vision"]},
    "root": {"email": "root@example.com", "groups": ["platform-admins"]},
    "nobody": {"email": "nobody@example.com", "groups": ["marketing"]},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_key(kid: str) -> tuple[dict, object]:
    """A private JWK (for the provider's JWKS) and its key (to sign tokens with in the tests)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}, key


@dataclass
class Provider:
    port: int
    redirects: list[str]
    key_id: str = "k1"
    jwk: dict = field(default_factory=dict)
    key: object = None
    process: subprocess.Popen | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, kid: str | None = None) -> None:
        if kid is not None or not self.jwk:
            self.key_id = kid or self.key_id
            self.jwk, self.key = new_key(self.key_id)
        env = {**os.environ, "OP_JWKS": json.dumps({"keys": [self.jwk]}), "OP_ACCOUNTS": json.dumps(ACCOUNTS),
               "OP_CLIENT": CLIENT, "OP_REDIRECTS": json.dumps(self.redirects)}
        self.process = subprocess.Popen(["node", str(HERE / "provider.mjs"), str(self.port)], env=env, cwd=HERE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said = []
        for line in self.process.stdout:  # it says so once it listens (after warnings of its own, if any)
            said.append(line)
            if line.startswith("listening"):
                return
        self.process.wait(10)
        raise RuntimeError(f"the OpenID provider did not start: {''.join(said)}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def rotate(self, kid: str) -> None:
        """Restart it with a new signing key: tokens signed with the old one are no longer vouched for."""
        self.stop()
        self.start(kid)

    def token(self, user: str = "alice", *, key=None, kid: str | None = None, issuer: str | None = None,
              audience: str = CLIENT, lifetime: float = 600, not_before: float = 0, **claims) -> str:
        """An ID token as the provider signs them — or, with other arguments, as it never would."""
        now = time.time()
        account = ACCOUNTS[user]
        body = {"iss": issuer or self.issuer, "sub": user, "aud": audience, "iat": int(now),
                "exp": int(now + lifetime), "email": account["email"], "groups": account["groups"], **claims}
        if not_before:
            body["nbf"] = int(now + not_before)
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": kid or self.key_id})


def node_modules_present() -> None:
    if not (HERE / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("the identity tests need oidc-provider: `make test` installs it (npm ci in tests/identity)",
                    pytrace=False)


@pytest.fixture
def provider(request) -> Iterator[Provider]:
    node_modules_present()
    redirects = getattr(request, "param", None) or []
    found = Provider(free_port(), list(redirects))
    found.start()
    try:
        with urllib.request.urlopen(f"{found.issuer}/.well-known/openid-configuration", timeout=10) as answer:
            assert json.loads(answer.read())["issuer"] == found.issuer
        yield found
    finally:
        found.stop()


def sso_settings(settings, provider: Provider):
    return settings.model_copy(update={
        "oidc_issuer": provider.issuer, "oidc_client_id": CLIENT, "oidc_admin_groups": ["platform-admins"],
        "oidc_group_tenants": {"ml-research": "research", "ml-vision": "vision"}, "oidc_clock_skew": 30.0,
        "oidc_key_refresh_cooldown": 0.0})  # a rotation is found at once, not after the cooldown
