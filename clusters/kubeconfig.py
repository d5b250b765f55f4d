"""Kubeconfig loading for member clusters: parse, refuse what would make this host act, connect settings.

A kubeconfig handed to the broker is an instruction to this host: an `exec` entry runs a command,
a file path reads a local file. Both are refused unless an admin allows them; so is turning TLS
verification off. Only inline data is used by default. Error messages name the field at fault but
never quote its value, so no token, key or certificate reaches a log line or an API answer.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import posixpath
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3
from cryptography import x509
from kubernetes.client import Configuration

from clusters.rules.documents import DocumentError, load_yaml_all

EXEC_TIMEOUT = 30.0


class KubeconfigError(ValueError):
    """What is wrong with a kubeconfig, in words safe to show anyone."""


@dataclass(frozen=True)
class KubeconfigPolicy:
    """What a kubeconfig may ask of this host (the ARCHIPELAGO_ALLOW_* settings)."""

    allow_exec: bool = False
    allow_files: bool = False
    allow_insecure_tls: bool = False
    allow_proxy: bool = False


class LoadedKubeconfig:
    """A client Configuration for one context, and the private files it needs until `close()`.

    urllib3 loads client certificates only from files (and kubernetes < 37 the CA too): inline
    client-certificate/key and CA data is written to a 0700 directory of this object's own, removed
    on close (or when it is collected).
    """

    def __init__(self, context: str, server: str, configuration: Configuration, directory: Path | None) -> None:
        self.context, self.server, self.configuration = context, server, configuration
        self._directory = directory
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(directory), True) if directory else None

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


def load_kubeconfig(text: str, context: str | None = None,
                    policy: KubeconfigPolicy = KubeconfigPolicy()) -> LoadedKubeconfig:
    """Parse `text`, check it against `policy`, and build the connection settings of `context`
    (default: the current context). Raises KubeconfigError saying what is wrong."""
    config = _parse(text)
    name, cluster, user = _select(config, context)
    server = _server(cluster, policy)
    configuration = Configuration(host=server.rstrip("/"))
    # One attempt with a short timeout (the loops retry with back-off). Retry(0), not False: a failure
    # comes wrapped in MaxRetryError, never as the bare SSLError that kubernetes < 37 mangles.
    configuration.retries = urllib3.Retry(0)
    configuration.verify_ssl = not _insecure(cluster, policy)
    ca_pem = configuration.ca_cert_data = _ca_data(cluster, policy)
    if cluster.get("tls-server-name"):
        configuration.tls_server_name = str(cluster["tls-server-name"])
    if cluster.get("proxy-url"):
        configuration.proxy = _proxy(cluster["proxy-url"], policy)
    directory = _credentials(user, configuration, policy)
    if ca_pem is not None:  # kubernetes < 37 reads the CA from a file only
        directory = directory or _private_directory()
        configuration.ssl_ca_cert = _private_file(directory / "ca.crt", ca_pem.encode())
    return LoadedKubeconfig(name, server, configuration, directory)


def _parse(text: str) -> dict:
    if not isinstance(text, str) or not text.strip():
        raise KubeconfigError("the kubeconfig is empty")
    try:
        documents = load_yaml_all(text)
    except DocumentError as exc:
        raise KubeconfigError(f"the kubeconfig: {exc}") from None
    config = documents[0] if len(documents) == 1 else None
    if not isinstance(config, dict) or not any(k in config for k in ("clusters", "contexts", "users")):
        raise KubeconfigError("the kubeconfig is not a kubeconfig: expected a mapping with "
                              "`clusters`, `users` and `contexts`")
    return config


def _named(config: dict, section: str, key: str) -> dict[str, dict]:
    entries = config.get(section) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"`{section}` must be a list")
    found = {}
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            body = entry.get(key) or {}
            if not isinstance(body, dict):
                raise KubeconfigError(f"{section} entry {entry['name']!r}: `{key}` must be a mapping")
            found[entry["name"]] = body
    return found


def _select(config: dict, context: str | None) -> tuple[str, dict, dict]:
    contexts = _named(config, "contexts", "context")
    name = context or config.get("current-context")
    if not name:
        raise KubeconfigError("the kubeconfig has no current-context; name one of its contexts "
                              f"({', '.join(sorted(contexts)) or 'it has none'})")
    if name not in contexts:
        raise KubeconfigError(f"no such context {name!r} in the kubeconfig; it has: "
                              f"{', '.join(sorted(contexts)) or 'none'}")
    chosen = contexts[name]
    clusters, users = _named(config, "clusters", "cluster"), _named(config, "users", "user")
    cluster_name, user_name = chosen.get("cluster"), chosen.get("user")
    if cluster_name not in clusters:
        raise KubeconfigError(f"context {name!r} names cluster {cluster_name!r}, which the kubeconfig does not define")
    if user_name is not None and user_name not in users:
        raise KubeconfigError(f"context {name!r} names user {user_name!r}, which the kubeconfig does not define")
    return name, clusters[cluster_name], users.get(user_name, {})


def _server(cluster: dict, policy: KubeconfigPolicy) -> str:
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeconfigError("the cluster entry has no `server` URL")
    parts = urlsplit(server)
    if parts.username or parts.password:  # checked first: no message may quote them
        raise KubeconfigError("the server URL must not carry credentials")
    if parts.query or parts.fragment:  # a query may hold a token: refused before any message quotes the URL
        raise KubeconfigError("the server URL must not carry a query string or fragment")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise KubeconfigError(f"server {server!r} is not an http(s) URL")
    if parts.scheme == "http" and not policy.allow_insecure_tls:
        raise KubeconfigError(f"server {server} is plain HTTP, which would send credentials unencrypted; "
                              "use https (or set ARCHIPELAGO_ALLOW_INSECURE_TLS=true)")
    return server


_LOOPBACK = {"localhost": "127.0.0.1", "localhost.localdomain": "127.0.0.1", "::1": "127.0.0.1",
             "0:0:0:0:0:0:0:1": "127.0.0.1"}


def server_identity(server: str) -> str:
    """One spelling per API server, to tell a member registered twice: scheme and host in lower case, the host
    percent-decoded and without a trailing dot, loopback names as 127.0.0.1, the default port written out,
    the path with `.`, `..` and trailing `/` resolved."""
    parts = urlsplit(server)
    scheme = parts.scheme.lower()
    host = unquote(parts.hostname or "").rstrip(".").lower()
    host = _LOOPBACK.get(host, host)
    port = parts.port or {"https": 443, "http": 80}.get(scheme)
    path = posixpath.normpath("/" + unquote(parts.path).lstrip("/")).rstrip("/")
    return f"{scheme}://{host}:{port}{'' if path in ('', '/') else path}"


def _proxy(url: Any, policy: KubeconfigPolicy) -> str:
    """An http(s) proxy the member traffic may go through, if an admin allows proxies at all (never quoted:
    a proxy URL may carry credentials)."""
    if not policy.allow_proxy:
        raise KubeconfigError("`proxy-url` is refused: the broker would send its traffic to the member through "
                              "another host (set ARCHIPELAGO_ALLOW_KUBECONFIG_PROXY=true to accept http(s) proxies)")
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
    except ValueError:  # an unclosed [IPv6] host
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeconfigError("`proxy-url` must be an http:// or https:// URL (socks proxies are not supported)")
    return url


def _insecure(cluster: dict, policy: KubeconfigPolicy) -> bool:
    if cluster.get("insecure-skip-tls-verify") is True:
        if not policy.allow_insecure_tls:
            raise KubeconfigError("insecure-skip-tls-verify is refused: it turns off the server certificate "
                                  "check (set ARCHIPELAGO_ALLOW_INSECURE_TLS=true to accept it)")
        return True
    return False


def _file_allowed(field: str, policy: KubeconfigPolicy) -> None:
    if not policy.allow_files:
        raise KubeconfigError(f"`{field}` is a file path on the broker's host, which is refused; inline the "
                              f"content as `{field}-data` (or set ARCHIPELAGO_ALLOW_KUBECONFIG_FILES=true)")


def _decode(entry: dict, field: str) -> bytes:
    try:
        return base64.b64decode(str(entry[field]), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"`{field}` is not base64") from None


def _ca_data(cluster: dict, policy: KubeconfigPolicy) -> str | None:
    if cluster.get("certificate-authority"):
        _file_allowed("certificate-authority", policy)
        pem = _read_file(cluster["certificate-authority"], "certificate-authority")
    elif cluster.get("certificate-authority-data"):
        pem = _decode(cluster, "certificate-authority-data")
    else:
        return None
    try:
        x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise KubeconfigError("the certificate authority is not a PEM certificate") from None
    return pem.decode()


def _read_file(path: Any, field: str) -> bytes:
    try:
        return Path(str(path)).expanduser().read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"`{field}` cannot be read: {exc.strerror}") from None


def _credentials(user: dict, configuration: Configuration, policy: KubeconfigPolicy) -> Path | None:
    """Set the user's credentials on `configuration`; returns the private directory it wrote, if any."""
    if user.get("username") or user.get("password"):
        raise KubeconfigError("basic authentication (username/password) is not supported; Kubernetes "
                              "removed it in 1.19: use a token or a client certificate")
    if user.get("as") or user.get("as-groups") or user.get("as-uid"):
        raise KubeconfigError("impersonation (`as`, `as-groups`) is not supported; give the broker its own identity")
    if user.get("auth-provider"):
        if not policy.allow_exec:
            raise KubeconfigError("`auth-provider` is refused (set ARCHIPELAGO_ALLOW_KUBECONFIG_EXEC=true to accept it)")
        token = (user["auth-provider"].get("config") or {}).get("id-token") or \
            (user["auth-provider"].get("config") or {}).get("access-token")
        if not token:
            raise KubeconfigError("this auth-provider keeps no id-token or access-token in the kubeconfig; "
                                  "use a client-go exec credential plugin instead")
        _bearer(configuration, str(token))
    if user.get("exec"):
        if not policy.allow_exec:
            raise KubeconfigError("`exec` is refused: it would run a command on the broker's host "
                                  "(set ARCHIPELAGO_ALLOW_KUBECONFIG_EXEC=true to accept it)")
        _exec_credentials(user["exec"], configuration)
    if user.get("tokenFile"):
        _file_allowed("tokenFile", policy)
        _bearer(configuration, _read_file(user["tokenFile"], "tokenFile").decode().strip())
    if user.get("token"):
        _bearer(configuration, str(user["token"]))

    cert, key = _client_pem(user, "client-certificate", policy), _client_pem(user, "client-key", policy)
    if (cert is None) != (key is None):
        raise KubeconfigError("a client certificate needs both client-certificate and client-key")
    if cert is None:
        return None
    directory = _private_directory()
    configuration.cert_file = _private_file(directory / "client.crt", cert)
    configuration.key_file = _private_file(directory / "client.key", key)
    return directory


def _client_pem(user: dict, field: str, policy: KubeconfigPolicy) -> bytes | None:
    if user.get(field):
        _file_allowed(field, policy)
        return _read_file(user[field], field)
    if user.get(f"{field}-data"):
        return _decode(user, f"{field}-data")
    return None


def _private_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="archipelago-member-"))  # mode 0700


def _private_file(path: Path, content: bytes) -> str:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
    return str(path)


def _bearer(configuration: Configuration, token: str) -> None:
    configuration.api_key["BearerToken"] = token
    configuration.api_key_prefix["BearerToken"] = "Bearer"


def _exec_credentials(spec: dict, configuration: Configuration) -> None:
    """A client-go credential plugin: run it now, and again whenever its token has expired."""
    if not spec.get("command"):
        raise KubeconfigError("`exec` has no command")
    command = [str(spec["command"]), *[str(a) for a in spec.get("args") or []]]
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in spec.get("env") or [] if "name" in e}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": spec.get("apiVersion"), "kind": "ExecCredential",
                                              "spec": {"interactive": False}})
    lock = threading.Lock()
    expires = [0.0]

    def refresh(config: Configuration) -> None:
        with lock:
            if expires[0] > time.time():
                return
            try:
                done = subprocess.run(command, env=env, capture_output=True, timeout=EXEC_TIMEOUT, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise KubeconfigError(f"exec credential plugin {command[0]!r} failed to run: "
                                      f"{getattr(exc, 'strerror', None) or type(exc).__name__}") from None
            if done.returncode != 0:
                raise KubeconfigError(f"exec credential plugin {command[0]!r} exited with {done.returncode}")
            try:
                status = json.loads(done.stdout)["status"]
                token = status["token"]
            except (ValueError, KeyError, TypeError):
                raise KubeconfigError(f"exec credential plugin {command[0]!r} did not print an ExecCredential "
                                      "with status.token") from None
            _bearer(config, str(token))
            stamp = status.get("expirationTimestamp")
            expires[0] = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - 10 if stamp \
                else float("inf")

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh
