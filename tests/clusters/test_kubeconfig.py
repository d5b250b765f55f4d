"""Kubeconfig parsing without a member: client certificates live in a private directory until closed,
and a YAML error never quotes the line it failed on."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
import yaml

from clusters.kubeconfig import KubeconfigError, KubeconfigPolicy, load_kubeconfig
from clusters.sim.tls import make_serving_cert


def _config(user: dict, cluster: dict | None = None) -> str:
    return yaml.safe_dump({"clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443", **(cluster or {})}}],
                           "users": [{"name": "u", "user": user}],
                           "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                           "current-context": "ctx"})


def test_client_certificates_are_private_files_removed_on_close():
    cert = make_serving_cert("127.0.0.1")
    loaded = load_kubeconfig(_config({"client-certificate-data": base64.b64encode(cert.cert_pem).decode(),
                                      "client-key-data": base64.b64encode(cert.key_pem).decode()},
                                     {"certificate-authority-data": base64.b64encode(cert.ca_pem).decode()}))
    key = Path(loaded.configuration.key_file)
    assert key.read_bytes() == cert.key_pem
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert loaded.configuration.ca_cert_data == cert.ca_pem.decode() and loaded.configuration.verify_ssl
    loaded.close()
    assert not key.parent.exists()


def test_yaml_errors_say_where_without_quoting_the_secret():
    secret = "sha256~do-not-print-me"
    with pytest.raises(KubeconfigError) as error:
        load_kubeconfig(f"users:\n- name: u\n  user: {{token: {secret}\n")
    assert "line" in str(error.value) and secret not in str(error.value)


def test_half_a_client_certificate_and_basic_auth_are_refused():
    with pytest.raises(KubeconfigError, match="needs both client-certificate and client-key"):
        load_kubeconfig(_config({"client-certificate-data": base64.b64encode(b"x").decode()}))
    with pytest.raises(KubeconfigError, match="basic authentication"):
        load_kubeconfig(_config({"username": "admin", "password": "hunter2"}))
    insecure = load_kubeconfig(_config({"token": "t"}, {"insecure-skip-tls-verify": True}),
                               policy=KubeconfigPolicy(allow_insecure_tls=True))
    assert insecure.configuration.verify_ssl is False


@pytest.mark.parametrize("server", ["ftp://admin:hunter2@10.0.0.1", "https://admin:hunter2@10.0.0.1:6443",
                                    "http://admin:hunter2@10.0.0.1"])
def test_credentials_in_the_server_url_are_never_quoted(server):
    with pytest.raises(KubeconfigError) as error:
        load_kubeconfig(_config({"token": "t"}, {"server": server}))
    assert str(error.value) == "the server URL must not carry credentials"


def test_a_query_string_in_the_server_url_is_refused_without_quoting_it():
    with pytest.raises(KubeconfigError) as error:
        load_kubeconfig(_config({"token": "t"}, {"server": "https://10.0.0.1:6443/?access_token=do-not-print-me"}))
    assert str(error.value) == "the server URL must not carry a query string or fragment"


@pytest.mark.parametrize("policy, proxy, refusal", [
    (KubeconfigPolicy(), "http://proxy.example:3128", "`proxy-url` is refused"),
    (KubeconfigPolicy(allow_proxy=True), "socks5://user:pw@proxy.example:1080", "must be an http:// or https:// URL"),
    (KubeconfigPolicy(allow_proxy=True), "http://[::1", "must be an http:// or https:// URL"),
])
def test_a_proxy_is_followed_only_when_allowed_and_only_over_http(policy, proxy, refusal):
    with pytest.raises(KubeconfigError) as error:
        load_kubeconfig(_config({"token": "t"}, {"proxy-url": proxy}), policy=policy)
    assert refusal in str(error.value) and "pw@" not in str(error.value)
    allowed = load_kubeconfig(_config({"token": "t"}, {"proxy-url": "https://proxy.example:3128"}),
                              policy=KubeconfigPolicy(allow_proxy=True))
    assert allowed.configuration.proxy == "https://proxy.example:3128"


def test_aliases_in_a_kubeconfig_are_refused():
    with pytest.raises(KubeconfigError, match="aliases"):
        load_kubeconfig("users: &u [{name: u}]\nclusters: *u\n")
