"""`serve --tls-self-signed` and the demo: a certificate authority and a serving certificate it signs, kept under
the broker's data directory. Made once and reused, so that the kubeconfigs and clients that trust the CA keep
working across restarts; delete the folder for new ones."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from clusters.rules.certificates import make_serving_cert

PREFIX = "archipelago-"


@dataclass(frozen=True)
class SelfSigned:
    certfile: Path
    keyfile: Path
    ca: Path  # what clients trust: `--certificate-authority`, a kubeconfig's certificate-authority-data


def self_signed(directory: Path, host: str) -> SelfSigned:
    """The certificate for `host` (and localhost, 127.0.0.1; this machine's name when `host` is every address)."""
    found = SelfSigned(directory / f"{PREFIX}server.crt", directory / f"{PREFIX}server.key",
                       directory / f"{PREFIX}ca.crt")
    if not all(path.exists() for path in (found.certfile, found.keyfile, found.ca)):
        named = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
        make_serving_cert(named, "archipelago").write(directory, PREFIX)
    return found
