"""Single sign-on: ID tokens of the configured OpenID provider (`ARCHIPELAGO_OIDC_*`), verified with PyJWT against the
issuer's keys — its discovery document, its JWKS fetched again when a token names a key not seen (rotation), and
`iss`, `aud` (the client id), `exp`, `nbf` and `iat` with `oidc_clock_skew` seconds of leeway. A refusal says why, in
the 401 (`IdentityRefused`).

Who the token speaks for: a member of one of `oidc_admin_groups` is an admin; otherwise the tenants its groups map to
(`oidc_group_tenants`) — the one it names per request (`?tenant=` or `X-Archipelago-Tenant`) when it has several.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import jwt

from broker.process.settings import Settings
from broker.store.errors import IdentityRefused

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
DISCOVERY_TTL = 3600.0


@dataclass(frozen=True)
class Identity:
    """Who an ID token speaks for."""

    user: str
    admin: bool
    tenants: tuple[str, ...]


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("ey")


class OidcVerifier:
    def __init__(self, settings: Settings) -> None:
        self.issuer = settings.oidc_issuer.rstrip("/")
        self.client_id = settings.oidc_client_id
        self.settings = settings
        self._ssl = ssl.create_default_context(cafile=str(settings.oidc_ca_file) if settings.oidc_ca_file else None)
        self.tls_verify: str | bool = str(settings.oidc_ca_file) if settings.oidc_ca_file else True  # httpx's
        self._lock = threading.Lock()
        self._discovery: tuple[float, dict[str, Any]] | None = None
        self._jwks: jwt.PyJWKClient | None = None

    def _get(self, url: str) -> dict[str, Any]:
        parsed = urlparse(url)
        if parsed.scheme != "https" and parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise IdentityRefused(f"the issuer's {url} is not HTTPS")
        with urllib.request.urlopen(url, timeout=10, context=self._ssl if parsed.scheme == "https" else None) as r:
            return json.loads(r.read())

    def discovery(self) -> dict[str, Any]:
        """The issuer's OpenID configuration, kept an hour."""
        with self._lock:
            if self._discovery is None or time.monotonic() - self._discovery[0] > DISCOVERY_TTL:
                try:
                    found = self._get(f"{self.issuer}/.well-known/openid-configuration")
                except (OSError, ValueError) as exc:
                    raise IdentityRefused(f"the OpenID provider {self.issuer} does not answer: {exc}") from None
                if found.get("issuer", "").rstrip("/") != self.issuer:
                    raise IdentityRefused(f"the OpenID provider at {self.issuer} names itself {found.get('issuer')!r}")
                self._discovery = (time.monotonic(), found)
                self._jwks = jwt.PyJWKClient(found["jwks_uri"], cache_keys=False, lifespan=300,
                                             ssl_context=self._ssl,
                                             cooldown_duration=self.settings.oidc_key_refresh_cooldown)
            return self._discovery[1]

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims; IdentityRefused with the reason when it is not an ID token of this issuer for us."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError as exc:
            raise IdentityRefused(f"not a JWT: {exc}") from None
        if str(unverified.get("iss", "")).rstrip("/") != self.issuer:
            raise IdentityRefused(f"issued by {unverified.get('iss')!r}, not by {self.issuer}")
        self.discovery()
        try:
            key = self._jwks.get_signing_key_from_jwt(token)  # an unknown kid fetches the JWKS again: rotation
        except jwt.PyJWKClientError as exc:
            raise IdentityRefused(f"signed with a key the issuer does not publish ({exc})") from None
        try:
            return jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=self.client_id, issuer=unverified["iss"],
                              leeway=self.settings.oidc_clock_skew,
                              options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            raise IdentityRefused("the ID token has expired: sign in again") from None
        except jwt.ImmatureSignatureError:
            raise IdentityRefused("the ID token is not valid yet (nbf/iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise IdentityRefused(f"the ID token is for another client, not {self.client_id}") from None
        except jwt.InvalidTokenError as exc:
            raise IdentityRefused(f"the ID token is not valid: {exc}") from None

    def takes(self, token: str) -> bool:
        """Is it an ID token, rather than one of the broker's own (which are not JWTs)?"""
        return looks_like_jwt(token)

    def identity(self, token: str) -> Identity:
        claims = self.verify(token)
        settings = self.settings
        groups = claims.get(settings.oidc_groups_claim) or []
        groups = [groups] if isinstance(groups, str) else [g for g in groups if isinstance(g, str)]
        user = claims.get(settings.oidc_username_claim) or claims["sub"]
        tenants = tuple(sorted({settings.oidc_group_tenants[g] for g in groups if g in settings.oidc_group_tenants}))
        return Identity(str(user), any(g in settings.oidc_admin_groups for g in groups), tenants)


_VERIFIERS: dict[str, OidcVerifier] = {}
_VERIFIERS_LOCK = threading.Lock()


def verifier_for(settings: Settings) -> OidcVerifier | None:
    """The process's verifier for these settings (None without SSO): its discovery and keys are kept between
    requests."""
    if not settings.oidc_issuer or not settings.oidc_client_id:
        return None
    key = json.dumps([settings.oidc_issuer, settings.oidc_client_id, settings.oidc_username_claim,
                      settings.oidc_groups_claim, settings.oidc_admin_groups, settings.oidc_group_tenants,
                      settings.oidc_clock_skew, str(settings.oidc_ca_file), settings.oidc_key_refresh_cooldown])
    with _VERIFIERS_LOCK:
        if key not in _VERIFIERS:
            _VERIFIERS[key] = OidcVerifier(settings)
        return _VERIFIERS[key]
