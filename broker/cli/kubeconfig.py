"""`archipelago kubeconfig`: a kubeconfig for a tenant, pointing kubectl at the broker's Kubernetes front door."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Optional

import typer

from broker.cli.client import ApiClient, ClientError
from broker.cli.output import ServerOption

FRONT_DOOR = "/k8s"


def kubeconfig_document(server: str, tenant: str, token: str, namespace: str | None,
                        certificate_authority: bytes | None = None) -> dict[str, Any]:
    """A kubeconfig with one cluster, user and context: a bearer token, no exec plugin, no file paths."""
    cluster: dict[str, Any] = {"server": server.rstrip("/") + FRONT_DOOR}
    if certificate_authority:
        cluster["certificate-authority-data"] = base64.b64encode(certificate_authority).decode()
    context: dict[str, Any] = {"cluster": "archipelago", "user": tenant}
    if namespace:
        context["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "archipelago", "cluster": cluster}],
            "users": [{"name": tenant, "user": {"token": token}}],
            "contexts": [{"name": f"archipelago-{tenant}", "context": context}],
            "current-context": f"archipelago-{tenant}", "preferences": {}}


def kubeconfig(tenant: str = typer.Option(..., help="the tenant whose JobSets kubectl will see"),
               server: Optional[str] = ServerOption,
               token: Optional[str] = typer.Option(None, "--token", show_default=False,
                                                   help="the tenant's token to put in it [default: mint one with "
                                                        "POST /api/v1/tokens, as the admin ARCHIPELAGO_TOKEN or "
                                                        "ARCHIPELAGO_ADMIN_TOKEN names]"),
               certificate_authority: Optional[Path] = typer.Option(
                   None, exists=True, dir_okay=False, envvar="ARCHIPELAGO_CERTIFICATE_AUTHORITY",
                   help="the CA of the broker's TLS certificate: embedded, and trusted for this command's calls"),
               ) -> None:
    """Print a kubeconfig for a tenant: `kubectl get jobsets` then talks to the broker's /k8s front door."""
    try:
        admin = ApiClient(server, certificate_authority=certificate_authority)
        if not admin.server.startswith("https://"):
            typer.echo(f"archipelago: kubectl sends a token over HTTPS only, and {admin.server} is not: serve "
                       "the broker with TLS (`serve --tls-self-signed`, or ARCHIPELAGO_TLS_CERTFILE and _KEYFILE) "
                       "and give its https:// address", err=True)
            raise typer.Exit(2)
        if token is None:
            token = admin.post("/api/v1/tokens", json={"role": "tenant", "tenant": tenant,
                                                       "description": "kubeconfig"})["token"]
        tenant_client = ApiClient(server, token, certificate_authority=certificate_authority)
        namespaces = tenant_client.get(f"/api/v1/tenants/{tenant}")["namespaces"]
    except ClientError as exc:
        typer.echo(f"archipelago: {exc}", err=True)
        raise typer.Exit(1) from None
    document = kubeconfig_document(tenant_client.server, tenant, token, namespaces[0] if namespaces else None,
                                   certificate_authority.read_bytes() if certificate_authority else None)
    import yaml

    typer.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
