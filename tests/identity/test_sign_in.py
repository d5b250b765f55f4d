"""Signing in through the real OpenID provider (issue #51): a user signs in to the dashboard in Chromium by the
authorization code flow with PKCE, and to the CLI by the device flow (the code confirmed in Chromium); what each then
sees is its group's tenant's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Iterator

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.identity.conftest import Provider, free_port, node_modules_present, sso_settings
from tests.servers import serving

ADMIN = {"Authorization": "Bearer admin-test-token"}


@pytest.fixture
def site(settings, db) -> Iterator[tuple[str, Provider]]:
    """The broker on a socket, its tenants and a queue each, and the provider knowing its callback."""
    node_modules_present()
    provider = Provider(free_port(), [])
    app = create_app(sso_settings(settings, provider), db, run_loops=False)
    with serving(app) as url:
        provider.redirects = [f"{url}/login/callback"]
        provider.start()
        try:
            with TestClient(app) as admin:
                for tenant in ("research", "vision"):
                    admin.post("/api/v1/tenants", json={"name": tenant, "namespaces": [tenant]}, headers=ADMIN)
                    admin.post("/api/v1/queues", json={"name": f"{tenant}-q", "tenant": tenant}, headers=ADMIN)
            yield url, provider
        finally:
            provider.stop()


def sign_in_at_the_provider(page, user: str) -> None:
    """The provider's own pages: its login form (any password), then its consent."""
    page.locator("input[name=login]").fill(user)
    page.locator("input[name=password]").fill("any password")
    page.locator("button[type=submit]").click()
    page.locator("button[type=submit]", has_text="Continue").click()


def signed_in_on_the_queues_page(browser, url: str, user: str):
    """A tab that signed in by single sign-on from the sign-in page, back on the page it came for."""
    page = browser.new_page()
    page.goto(f"{url}/login?next=/queues")
    page.locator("#sso").click()
    sign_in_at_the_provider(page, user)
    page.wait_for_url(f"{url}/queues")
    return page


def test_a_user_signs_in_to_the_dashboard_and_sees_its_tenant(site, browser):
    url, _ = site
    page = signed_in_on_the_queues_page(browser, url, "alice")
    try:
        seen = page.evaluate("""async () => {
            const token = sessionStorage.getItem("archipelago.token");
            const get = async (path) => (await fetch(path, {headers: {Authorization: "Bearer " + token}})).json();
            return {who: await get("/api/v1/whoami"), queues: (await get("/api/v1/queues")).map(q => q.name)};
        }""")
        assert seen == {"who": {"role": "tenant", "tenant": "research"}, "queues": ["research-q"]}
        page.locator("text=research-q").first.wait_for()  # the queues page shows it, and only it
        assert page.locator("text=vision-q").count() == 0
    finally:
        page.close()


def test_a_user_in_two_tenants_chooses_which_one_the_dashboard_acts_for(site, browser):
    url, _ = site
    page = signed_in_on_the_queues_page(browser, url, "carol")
    try:
        choice = page.locator("#tenant-choice")
        assert choice.input_value() == "research"  # the first, until she chooses
        page.locator("text=research-q").first.wait_for()
        choice.select_option("vision")
        page.locator("text=vision-q").first.wait_for()
        assert page.locator("text=research-q").count() == 0
        assert page.locator("#tenant-choice").input_value() == "vision"
    finally:
        page.close()


def test_a_sign_in_not_started_here_is_refused(site, browser):
    url, _ = site
    answer = httpx.get(f"{url}/login/callback", params={"code": "stolen", "state": "guessed"})
    assert answer.status_code == 401 and "not started here" in answer.text


def test_the_cli_signs_in_by_the_device_flow(site, browser, tmp_path):
    url, provider = site
    env = {**os.environ, "ARCHIPELAGO_SERVER": url, "ARCHIPELAGO_SSO_FILE": str(tmp_path / "sso.json"),
           "ARCHIPELAGO_CONFIG": str(tmp_path / "none.yaml")}
    for name in ("ARCHIPELAGO_TOKEN", "ARCHIPELAGO_ADMIN_TOKEN"):
        env.pop(name, None)
    cli = [os.path.join(os.path.dirname(sys.executable), "archipelago")]
    login = subprocess.Popen([*cli, "login"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        prompt = login.stderr.readline()
        where = re.search(r"Open (\S+) and confirm the code (\S+)", prompt)
        assert where, prompt
        page = browser.new_page()
        try:
            page.goto(where[1])
            page.locator("button[type=submit]", has_text="Continue").click()  # the code shown is the one printed
            sign_in_at_the_provider(page, "bob")
            page.locator("text=Sign-in Success").wait_for()
        finally:
            page.close()
        out, err = login.communicate(timeout=60)
    finally:
        login.kill()
    assert login.returncode == 0, err
    assert out.strip() == f"signed in to {url}"
    assert oct((tmp_path / "sso.json").stat().st_mode & 0o777) == "0o600"
    listed = subprocess.run([*cli, "queues", "list", "-o", "json"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert [q["name"] for q in json.loads(listed.stdout)] == ["vision-q"]
    # an ID token about to expire is refreshed with the refresh token the device flow gave
    kept = json.loads((tmp_path / "sso.json").read_text())
    assert kept[url]["refresh_token"]
    expiring = provider.token("bob", lifetime=10)
    (tmp_path / "sso.json").write_text(json.dumps({url: {**kept[url], "id_token": expiring}}))
    again = subprocess.run([*cli, "queues", "list", "-o", "json"], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    refreshed = json.loads((tmp_path / "sso.json").read_text())[url]["id_token"]
    assert refreshed != expiring  # the provider's, by the refresh token: it lasts its full hour
    assert jwt.decode(refreshed, options={"verify_signature": False})["exp"] > time.time() + 600
