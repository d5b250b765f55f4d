"""Single sign-on for the dashboard — the authorization code flow with PKCE, the code exchanged by the broker (no
token ever in a URL, no CORS at the provider) — and what the CLI's device flow needs to know (`GET /api/v1/identity`).

`/login/sso` makes a PKCE verifier, a state and a nonce, keeps them in a cookie the broker signs (ten minutes, this
path only), and sends the browser to the provider; `/login/callback` checks the state, exchanges the code with the
verifier, verifies the ID token (`api.identity`) and its nonce, and hands it to the page, which keeps it in the tab's
sessionStorage as the token sign-in does: the dashboard then reads the API with it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any
from urllib.parse import urlencode

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from api.identity import verifier_for
from api.problems import Problem
from api.routes.dashboard import templates
from broker.store.errors import IdentityRefused

router = APIRouter()
COOKIE = "archipelago_sso"
COOKIE_SECONDS = 600
SCOPES = "openid email groups"


def _verifier(request: Request):
    verifier = verifier_for(request.app.state.settings)
    if verifier is None:
        raise Problem(404, "single sign-on is not configured (ARCHIPELAGO_OIDC_ISSUER, ARCHIPELAGO_OIDC_CLIENT_ID)")
    return verifier


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(request: Request, payload: dict[str, Any]) -> str:
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    mac = hmac.new(request.app.state.settings.fernet_key(), body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def _unsigned(request: Request, cookie: str | None) -> dict[str, Any] | None:
    body, _, mac = (cookie or "").partition(".")
    expected = _b64(hmac.new(request.app.state.settings.fernet_key(), body.encode(), hashlib.sha256).digest())
    if not body or not hmac.compare_digest(mac, expected):
        return None
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return payload if payload.get("until", 0) > time.time() else None


def _redirect_uri(request: Request) -> str:
    return str(request.url_for("sso_callback"))


@router.get("/api/v1/identity", tags=["identity"], summary="The OpenID provider the broker accepts (no token needed)")
def identity(request: Request) -> dict[str, Any]:
    verifier = _verifier(request)
    return {"issuer": verifier.issuer, "client_id": verifier.client_id, "scopes": f"{SCOPES} offline_access"}


@router.get("/login/sso", include_in_schema=False)
def sso_start(request: Request, next: str = "/") -> RedirectResponse:
    verifier = _verifier(request)
    try:
        endpoint = verifier.discovery()["authorization_endpoint"]
    except IdentityRefused as exc:
        raise Problem(502, str(exc)) from None
    code_verifier, state, nonce = secrets.token_urlsafe(48), secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    challenge = _b64(hashlib.sha256(code_verifier.encode()).digest())
    query = urlencode({"response_type": "code", "client_id": verifier.client_id, "redirect_uri": _redirect_uri(request),
                       "scope": SCOPES, "state": state, "nonce": nonce, "code_challenge": challenge,
                       "code_challenge_method": "S256"})
    answer = RedirectResponse(f"{endpoint}?{query}", status_code=303)
    answer.set_cookie(COOKIE, _signed(request, {"state": state, "verifier": code_verifier, "nonce": nonce, "next": next,
                                                "until": time.time() + COOKIE_SECONDS}),
                      max_age=COOKIE_SECONDS, path="/login", httponly=True, samesite="lax",
                      secure=request.url.scheme == "https")
    return answer


@router.get("/login/callback", name="sso_callback", response_class=HTMLResponse, include_in_schema=False)
def sso_callback(request: Request, code: str = "", state: str = "", error: str = "", error_description: str = ""):
    verifier = _verifier(request)
    started = _unsigned(request, request.cookies.get(COOKIE))
    if error:
        return _failed(request, f"the provider refused: {error_description or error}")
    if started is None or not hmac.compare_digest(started["state"], state) or not code:
        return _failed(request, "this sign-in was not started here, or took longer than ten minutes: start again")
    try:
        exchanged = httpx.post(verifier.discovery()["token_endpoint"], timeout=10, verify=verifier.tls_verify, data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": _redirect_uri(request),
            "client_id": verifier.client_id, "code_verifier": started["verifier"]})
        if exchanged.status_code != 200:
            return _failed(request, f"the provider refused the code: {exchanged.text[:300]}")
        token = exchanged.json()["id_token"]
        claims = verifier.verify(token)
        who = verifier.identity(token)
    except (IdentityRefused, httpx.HTTPError, KeyError, ValueError) as exc:
        return _failed(request, str(exc))
    if claims.get("nonce") != started["nonce"]:
        return _failed(request, "the ID token's nonce is not this sign-in's: start again")
    answer = templates.TemplateResponse(request, "signed_in.html", {"nav": None, "title": "Signed in",
                                                                    "token": token, "next": started["next"],
                                                                    "tenants": ",".join(who.tenants)},
                                        headers={"Cache-Control": "no-store"})
    answer.delete_cookie(COOKIE, path="/login")
    return answer


def _failed(request: Request, why: str) -> HTMLResponse:
    return templates.TemplateResponse(request, "login.html", {"nav": None, "title": "Sign in", "sso": True,
                                                              "sso_error": why}, status_code=401)
