"""The CLI's HTTP client for a running broker: server URL and token from flags, environment or a config file.

Precedence: flag, then ARCHIPELAGO_SERVER / ARCHIPELAGO_TOKEN, then ~/.config/archipelago/config.yaml
(`server:` and `token:`), then http://127.0.0.1:8000 with the admin token from ARCHIPELAGO_ADMIN_TOKEN. An HTTPS
broker's certificate is checked against the CA of `--certificate-authority` (ARCHIPELAGO_CERTIFICATE_AUTHORITY, the
config file's `certificate-authority:`), else against the system's.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

CONFIG_FILE = Path("~/.config/archipelago/config.yaml")
DEFAULT_SERVER = "http://127.0.0.1:8000"
command_authority: Path | None = None  # the command's --certificate-authority (broker.cli.app sets it on each run)


class ClientError(Exception):
    """One line for the user: what failed and what the server said (`status`: its HTTP status, if it answered)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _config_file() -> dict[str, Any]:
    path = Path(os.environ.get("ARCHIPELAGO_CONFIG", CONFIG_FILE)).expanduser()
    if not path.exists():
        return {}
    import yaml  # here and below, not at start: `--help` and `version` load none of it

    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ClientError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ClientError(f"{path} must be a mapping with `server:` and `token:`")
    return loaded


class ApiClient:
    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 30.0,
                 certificate_authority: str | Path | None = None) -> None:
        config = _config_file()
        self.server = (server or os.environ.get("ARCHIPELAGO_SERVER") or config.get("server")
                       or DEFAULT_SERVER).rstrip("/")
        token = (token or os.environ.get("ARCHIPELAGO_TOKEN") or config.get("token")
                 or os.environ.get("ARCHIPELAGO_ADMIN_TOKEN") or signed_in_token(self.server))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if os.environ.get("ARCHIPELAGO_TENANT"):  # a signed-in user in several tenants acts for this one
            headers["X-Archipelago-Tenant"] = os.environ["ARCHIPELAGO_TENANT"]
        authority = (certificate_authority or command_authority or os.environ.get("ARCHIPELAGO_CERTIFICATE_AUTHORITY")
                     or config.get("certificate-authority"))
        import ssl

        import httpx

        try:
            verify = ssl.create_default_context(cafile=str(Path(authority).expanduser())) if authority else True
        except (OSError, ssl.SSLError) as exc:
            raise ClientError(f"the certificate authority {authority}: {exc}") from None
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout, verify=verify)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the API; return the decoded JSON body, or raise ClientError with the problem's detail."""
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ClientError(f"cannot reach the broker at {self.server}: {exc}") from None
        if response.status_code >= 400:
            try:
                problem = response.json()
                message = problem.get("detail") or problem.get("title") or response.text
            except ValueError:
                message = response.text.strip() or response.reason_phrase
            raise ClientError(f"{method} {path}: {response.status_code} {message}", response.status_code)
        return response.json() if response.content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Any:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Any:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)


# Single sign-on (`archipelago login`, broker.cli.sso): the ID token kept per broker -------------------------------

SSO_FILE = "~/.config/archipelago/sso.json"
EARLY = 60  # seconds before its expiry a token is refreshed


def _path() -> Path:
    return Path(os.environ.get("ARCHIPELAGO_SSO_FILE", SSO_FILE)).expanduser()


def _load() -> dict[str, Any]:
    try:
        return json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}


def save_sign_in(server: str, entry: dict[str, Any]) -> None:
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {**_load(), server: entry}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(kept, out)


def _expires(id_token: str) -> float:
    body = id_token.split(".")[1]
    return float(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).get("exp", 0))


def post_form(url: str, data: dict[str, str]) -> tuple[int, dict[str, Any]]:
    import httpx

    try:
        answer = httpx.post(url, data=data, timeout=30)
    except httpx.HTTPError as exc:
        raise ClientError(f"the OpenID provider at {url} does not answer: {exc}") from None
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return answer.status_code, {"error": answer.text[:200]}


def signed_in_token(server: str) -> str | None:
    """The ID token `archipelago login` kept for this broker, refreshed if it is about to expire; None if none."""
    entry = _load().get(server)
    if not entry:
        return None
    if _expires(entry["id_token"]) - EARLY > time.time():
        return entry["id_token"]
    if not entry.get("refresh_token"):
        raise ClientError("the sign-in has expired: run `archipelago login` again")
    status, body = post_form(entry["token_endpoint"], {"grant_type": "refresh_token", "client_id": entry["client_id"],
                                                   "refresh_token": entry["refresh_token"]})
    if status != 200 or "id_token" not in body:
        raise ClientError(f"the sign-in could not be refreshed ({body.get('error', status)}): run `archipelago login`")
    entry = {**entry, "id_token": body["id_token"], "refresh_token": body.get("refresh_token", entry["refresh_token"])}
    save_sign_in(server, entry)
    return entry["id_token"]
