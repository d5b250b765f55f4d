"""`archipelago login`: single sign-on for the CLI by the OAuth 2.0 device flow (RFC 8628) at the OpenID provider the
broker names (`GET /api/v1/identity`): it prints where to go and the code to confirm, waits, and keeps the ID token
and its refresh token in ~/.config/archipelago/sso.json (mode 0600), per broker. Later commands with no token of
their own use it, refreshed when it is about to expire (`signed_in_token`)."""

from __future__ import annotations

import time
from typing import Optional

import typer

from broker.cli.client import post_form, save_sign_in
from broker.cli.output import ServerOption, calling, client, usage_error

def login(server: Optional[str] = ServerOption) -> None:
    """Sign in through the broker's OpenID provider (the device flow): open the address it prints, confirm the code."""
    import httpx

    api = client(server, None)
    found = calling(lambda: api.get("/api/v1/identity"))
    try:
        discovery = httpx.get(f"{found['issuer']}/.well-known/openid-configuration", timeout=30).json()
    except (httpx.HTTPError, ValueError) as exc:
        usage_error(f"the OpenID provider {found['issuer']} does not answer: {exc}")
    if "device_authorization_endpoint" not in discovery:
        usage_error(f"the OpenID provider {found['issuer']} does not offer the device flow")
    status, device = calling(lambda: post_form(discovery["device_authorization_endpoint"],
                                           {"client_id": found["client_id"], "scope": found["scopes"]}))
    if status != 200:
        usage_error(f"the OpenID provider refused to start a sign-in: {device.get('error_description') or device}")
    where = device.get("verification_uri_complete") or device["verification_uri"]
    typer.echo(f"Open {where} and confirm the code {device['user_code']}", err=True)
    interval, until = float(device.get("interval", 5)), time.time() + float(device.get("expires_in", 600))
    while time.time() < until:
        time.sleep(interval)
        status, body = calling(lambda: post_form(discovery["token_endpoint"], {
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": device["device_code"],
            "client_id": found["client_id"]}))
        if status == 200 and "id_token" in body:
            save_sign_in(api.server, {"issuer": found["issuer"], "client_id": found["client_id"],
                               "token_endpoint": discovery["token_endpoint"], "id_token": body["id_token"],
                               "refresh_token": body.get("refresh_token")})
            typer.echo(f"signed in to {api.server}")
            return
        error = body.get("error")
        if error == "slow_down":
            interval += 5
        elif error != "authorization_pending":
            usage_error(f"the sign-in failed: {body.get('error_description') or error}")
    usage_error("the code was not confirmed in time: run `archipelago login` again")
