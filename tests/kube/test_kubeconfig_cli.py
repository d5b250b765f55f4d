"""`archipelago kubeconfig --tenant T`: a token minted through the API, the front door's URL, the broker's CA;
kubectl works with what it prints and nothing else."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from broker.cli.app import app as cli


def test_the_kubeconfig_it_prints_is_enough_for_kubectl(front_door, monkeypatch):
    ca = front_door.home / "broker-ca.crt"
    ca.write_bytes(front_door.ca_pem)
    for name in ("ARCHIPELAGO_TOKEN", "ARCHIPELAGO_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    printed = CliRunner().invoke(cli, ["kubeconfig", "--tenant", "team-a", "--server", front_door.url,
                                       "--certificate-authority", str(ca)],
                                 env={"ARCHIPELAGO_ADMIN_TOKEN": "admin-test-token"}, catch_exceptions=False)
    assert printed.exit_code == 0, printed.output
    document = yaml.safe_load(printed.stdout)
    [cluster] = document["clusters"]
    assert cluster["cluster"]["server"] == front_door.url + "/k8s"
    assert document["contexts"][0]["context"]["namespace"] == "team-a"
    [user] = document["users"]
    assert set(user["user"]) == {"token"}  # a bearer token: no exec plugin, no file paths
    [token] = [t for t in front_door.api.get("/api/v1/tokens").json() if t["description"] == "kubeconfig"]
    assert token["tenant"] == "team-a" and token["role"] == "tenant"

    path = front_door.home / "printed.kubeconfig"
    path.write_text(printed.stdout)
    assert front_door.kubectl(path, "get", "jobsets").stderr.strip() == "No resources found in team-a namespace."
    refused = front_door.kubectl(path, "get", "jobsets", "-n", "team-b", ok=False)
    assert refused.returncode == 1 and "forbidden" in refused.stderr

    # a token the tenant has already goes in as it is, and none is minted
    given = CliRunner().invoke(cli, ["--certificate-authority", str(ca), "kubeconfig", "--tenant", "team-a",
                                     "--server", front_door.url, "--token", user["user"]["token"]],
                               catch_exceptions=False)
    assert given.exit_code == 0, given.output
    assert yaml.safe_load(given.stdout)["users"] == [user]
    assert len(front_door.api.get("/api/v1/tokens").json()) == 1


def test_an_unknown_tenant_is_one_line(front_door, monkeypatch):
    ca = front_door.home / "broker-ca.crt"
    ca.write_bytes(front_door.ca_pem)
    monkeypatch.setenv("ARCHIPELAGO_CERTIFICATE_AUTHORITY", str(ca))
    result = CliRunner().invoke(cli, ["kubeconfig", "--tenant", "nobody", "--server", front_door.url],
                                env={"ARCHIPELAGO_ADMIN_TOKEN": "admin-test-token"})
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0 and "tenant 'nobody' does not exist" in result.stderr


def test_an_http_broker_gets_no_kubeconfig_kubectl_could_not_use(monkeypatch):
    """kubectl would answer "You must be logged in to the server": the CLI says why first, and mints nothing."""
    result = CliRunner().invoke(cli, ["kubeconfig", "--tenant", "team-a", "--server", "http://127.0.0.1:9"],
                                env={"ARCHIPELAGO_ADMIN_TOKEN": "admin-test-token"})
    assert result.exit_code == 2 and result.stdout == ""
    assert "kubectl sends a token over HTTPS only" in result.stderr and result.stderr.count("\n") == 1


def test_every_command_trusts_the_certificate_authority_it_is_given(front_door, monkeypatch):
    monkeypatch.delenv("ARCHIPELAGO_CERTIFICATE_AUTHORITY", raising=False)
    ca = front_door.home / "broker-ca.crt"
    ca.write_bytes(front_door.ca_pem)
    env = {"ARCHIPELAGO_SERVER": front_door.url, "ARCHIPELAGO_TOKEN": "admin-test-token"}
    untrusted = CliRunner().invoke(cli, ["tenants", "list", "-o", "json"], env=env)
    assert untrusted.exit_code == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    trusted = CliRunner().invoke(cli, ["--certificate-authority", str(ca), "tenants", "list", "-o", "json"], env=env)
    assert trusted.exit_code == 0, trusted.output
    assert "team-a" in trusted.stdout
