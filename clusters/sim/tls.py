"""The simulator's kubeconfig files, which trust its throw-away certificate authority (clusters/rules/certificates.py).
"""

from __future__ import annotations

import base64

import yaml

from clusters.rules.certificates import ServingCert, make_serving_cert

__all__ = ["ServingCert", "kubeconfig", "make_serving_cert"]


def kubeconfig(name: str, server: str, token: str, ca_pem: bytes | None) -> str:
    """A kubeconfig with one cluster, user and context, all named after the cluster."""
    cluster: dict = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }, sort_keys=False)
