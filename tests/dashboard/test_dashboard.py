"""The dashboard in a real Chromium: every page against a live broker, checked against the API's answers."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

import pytest
from playwright.sync_api import expect

from tests.api.jobsets import jobset
from tests.dashboard.conftest import ADMIN_TOKEN, SHORT, VIEWPORT, shot

pytestmark = pytest.mark.browser
GPU = "nvidia.com/gpu"


def pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def readable(quantity: str) -> str:
    """The API's quantity as the dashboard shows it: binary units to 3 significant digits, halves up (as JavaScript's
    toPrecision), so that "7.625Ti" fits a card as "7.63Ti"."""
    found = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei)", quantity)
    if not found:
        return quantity
    value = Decimal(found.group(1))
    digits = Decimal(1).scaleb(value.adjusted() - 2)
    return f"{value.quantize(digits, rounding=ROUND_HALF_UP).normalize():f}{found.group(2)}"


def bar_text(amounts: dict) -> str:
    used, free, total = (readable(amounts[key]) for key in ("used", "free", "allocatable"))
    return f"{used} used / {free} free / {total} total"


def test_sign_in_then_overview_matches_the_api(browser, federation):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(federation.url + "/")
    expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
    page.get_by_label("API token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown, revoked or expired")
    page.get_by_label("API token").fill(ADMIN_TOKEN)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Federation overview")).to_be_visible()
    expect(page.get_by_test_id("whoami")).to_have_text("admin")

    clusters = federation.get("/clusters")
    queues = federation.get("/queues")
    cards = page.get_by_test_id("cluster-card")
    expect(cards).to_have_count(len(clusters))
    for cluster in clusters:
        card = page.locator(f'[data-cluster="{cluster["name"]}"]')
        expect(card.get_by_test_id("state")).to_have_text(cluster["state"])
        expect(card.get_by_test_id("region")).to_have_text("region " + cluster["labels"]["region"])
        for resource in (GPU, "cpu", "memory"):
            expect(card.locator(f'[data-resource="{resource}"] [data-testid="capbar-text"]')).to_have_text(
                bar_text(cluster["capacity"][resource]))
        running = {p["job_id"] for p in federation.get("/placements", cluster=cluster["name"], state="Running")["items"]}
        expect(card.get_by_test_id("cluster-running")).to_have_text(f"{len(running)} running")
    ready = sum(c["state"] == "Ready" for c in clusters)
    expect(page.get_by_test_id("total-clusters")).to_contain_text(f"{ready} / {len(clusters)}")
    expect(page.get_by_test_id("total-nodes")).to_contain_text(str(sum(c["nodes"] for c in clusters)))
    expect(page.get_by_test_id("total-queued")).to_contain_text(str(sum(q["pending"] for q in queues)))
    expect(page.get_by_test_id("total-running")).to_contain_text(str(sum(q["running"] for q in queues)))
    total_gpus = sum(c["capacity"][GPU]["allocatable_milli"] for c in clusters) // 1000
    expect(page.get_by_test_id("total-capacity").locator(f'[data-resource="{GPU}"] [data-testid="capbar-text"]')
           ).to_contain_text(f"/ {total_gpus} total")
    expect(page.get_by_role("meter", name=re.compile(r"^GPU: [0-9.]+ used .* free .* total$")).first).to_be_visible()
    newest = federation.get("/events", limit=500)["items"][-1]
    expect(page.get_by_test_id("events-table").locator("tbody tr").first).to_contain_text(newest["message"])
    shot(page, "overview")
    context.close()


@pytest.mark.parametrize("target", ["/%5Cevil.example/steal", "/.//evil.example/steal", "//evil.example/steal"])
def test_sign_in_never_sends_the_user_off_site(browser, federation, target):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(federation.url + "/login?next=" + target)
    page.get_by_label("API token").fill(ADMIN_TOKEN)
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("whoami")).to_have_text("admin")
    assert page.url.startswith(federation.url + "/")
    context.close()


def test_clusters_and_a_cluster_with_its_hypernode_tree(page, federation):
    clusters = federation.get("/clusters")
    page.goto(federation.url + "/clusters")
    rows = page.get_by_test_id("clusters-table").locator("tbody tr")
    expect(rows).to_have_count(len(clusters))
    for cluster in clusters:
        expect(page.locator(f'tr[data-row="{cluster["name"]}"] [data-testid="state"]')).to_have_text(cluster["state"])
    sources = {"eu-west": "HyperNode objects", "us-east": "node labels, recipe archipelago (auto)"}  # issue #48
    for name, words in sources.items():
        expect(page.locator(f'tr[data-row="{name}"] [data-testid="topology-source"]')).to_have_text(words)
    shot(page, "clusters")

    page.get_by_role("link", name="eu-west", exact=True).focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/clusters/eu-west$"))
    detail = federation.get("/clusters/eu-west")
    flat = []

    def walk(nodes):
        for hypernode in nodes:
            flat.append(hypernode)
            walk(hypernode["children"])
    walk(detail["hypernodes"])
    boxes = page.get_by_test_id("hypernode")
    expect(boxes).to_have_count(len(flat))
    for hypernode in flat:  # the free GPUs the tree announces are the API's
        expect(page.locator(f'[data-hypernode="{hypernode["name"]}"]')).to_have_attribute(
            "aria-label", re.compile(rf"tier {hypernode['tier']}, {hypernode['nodes']} nodes, .* "
                                     rf"{re.escape(hypernode['free'][GPU])} free"))
    expect(page.get_by_test_id("node-count")).to_have_text(str(detail["nodes"]))
    expect(page.get_by_test_id("topology-source")).to_have_text("HyperNode objects")
    expect(page.get_by_test_id("nodes-table").locator("tbody tr")).to_have_count(detail["nodes"])

    placements = federation.get("/placements", cluster="eu-west",
                                state=["Decided", "Applying", "Starting", "Running", "Deleting"])["items"]
    assert placements, "the fixture places jobs on eu-west"
    expect(page.get_by_test_id("cluster-jobs-table").locator("tbody tr")).to_have_count(len(placements))
    for placement in placements:
        row = page.locator(f'[data-testid="cluster-jobs-table"] tr[data-row="{placement["id"]}"]')
        expect(row.get_by_test_id("hypernode-name")).to_have_text(placement["hypernode"])
        expect(row.get_by_test_id("state")).to_have_text(placement["state"])
        expect(page.locator(f'[data-hypernode="{placement["hypernode"]}"]')).to_have_attribute(
            "aria-label", re.compile(r"\d+ jobs? placed on it$"))
    page.locator(f'[data-hypernode="{flat[0]["name"]}"]').focus()  # the tree is keyboard-reachable
    expect(page.locator(f'[data-hypernode="{flat[0]["name"]}"]')).to_be_focused()
    shot(page, "cluster-eu-west")


def test_queues_show_fair_share_quota_depth_and_history(page, federation):
    page.goto(federation.url + "/queues")
    queues = federation.get("/queues")
    expect(page.get_by_test_id("queues-table").locator("tbody tr")).to_have_count(len(queues))
    for queue in queues:
        row = page.locator(f'[data-tenant="{queue["tenant"]}"] tr[data-row="{queue["name"]}"]')
        expect(row.get_by_test_id("pending")).to_have_text(str(queue["pending"]))
        expect(row.get_by_test_id("running")).to_have_text(str(queue["running"]))
        expect(row.get_by_test_id("fair-share")).to_have_text(pct(queue["fair_share"]))
        expect(row.get_by_test_id("dominant-share")).to_have_text(pct(queue["dominant_share"]))
        expect(row.get_by_role("img", name=re.compile(r"^Last hour: pending now \d+"))).to_be_visible()
        if queue["oldest_pending_at"] is None:
            expect(row.get_by_test_id("oldest-wait")).to_have_text("—")
    for tenant in federation.get("/tenants"):  # each tenant: its weight, its share against its fair share
        section = page.locator(f'[data-tenant="{tenant["name"]}"]').get_by_test_id("tenant-share")
        expect(section.get_by_test_id("tenant-weight")).to_have_text(f'{tenant["weight"]:g}')
        expect(section.get_by_test_id("fair-share")).to_have_text(pct(tenant["fair_share"]))
        expect(section.get_by_test_id("dominant-share")).to_have_text(pct(tenant["dominant_share"]))
        level = page.locator(f'[data-tenant="{tenant["name"]}"]').get_by_test_id("tenant-pod-security")
        expect(level).to_have_value(tenant["pod_security"])  # an admin's: a select
    training = next(q for q in queues if q["name"] == "training")
    expect(page.locator('tr[data-row="training"]').get_by_test_id(f"quota-{GPU}")).to_contain_text(
        f"GPU {training['usage'][GPU]} / {training['nominal_quota'][GPU]}")
    history = federation.get("/queue-history")
    for series in history["queues"]:  # the newest sample is the present
        queue = next(q for q in queues if q["name"] == series["name"])
        assert (series["pending"][-1], series["running"][-1]) == (queue["pending"], queue["running"])
        assert series["dominant_share"][-1] == pytest.approx(queue["dominant_share"], abs=1e-3)
    shot(page, "queues")


def test_jobs_table_filters_and_sorts_like_the_api(page, federation):
    page.goto(federation.url + "/jobs")
    jobs = federation.get("/jobs")["items"]
    table = page.get_by_test_id("jobs-table")
    expect(table.locator("tbody tr")).to_have_count(len(jobs))
    for job in jobs:
        row = table.locator(f'tr[data-row="{job["id"]}"]')
        expect(row.get_by_test_id("state")).to_have_text(job["state"])
        expect(row.locator('[data-col="cluster"]')).to_have_text(", ".join(job["clusters"]) or "—")
        expect(row.locator('[data-col="hypernode"]')).to_have_text(", ".join(job["hypernodes"]) or "—")
        expect(row.locator('[data-col="queue"]')).to_have_text(job["queue"])
    shot(page, "jobs")

    page.get_by_label("State").select_option("Queued")
    queued = federation.get("/jobs", state="Queued")["items"]
    expect(table.locator("tbody tr")).to_have_count(len(queued))
    expect(page).to_have_url(re.compile(r"state=Queued"))
    page.get_by_label("State").select_option("")
    page.get_by_label("Cluster").select_option("eu-west")
    expect(table.locator("tbody tr")).to_have_count(len(federation.get("/jobs", cluster="eu-west")["items"]))
    page.get_by_label("Cluster").select_option("")

    sort_by_name = page.get_by_role("button", name="Name")
    sort_by_name.focus()
    page.keyboard.press("Enter")
    expect(page.locator("th[aria-sort='ascending']")).to_have_text(re.compile("Name"))
    names = sorted(j["name"] for j in jobs)
    expect(table.locator("tbody tr [data-col='name']")).to_have_text(names)
    page.keyboard.press("Enter")  # focus stays on the header across the re-render
    expect(table.locator("tbody tr [data-col='name']")).to_have_text(names[::-1])
    page.get_by_label("Name").fill("train")
    expect(table.locator("tbody tr [data-col='name']")).to_have_text(
        sorted((j["name"] for j in jobs if "train" in j["name"]), reverse=True))


def test_a_waiting_job_says_why_per_cluster(page, federation):
    waiting = federation.get("/jobs", name="detector-xl")["items"][0]
    detail = federation.get(f"/jobs/{waiting['id']}")
    assert detail["waiting_reasons"], "the scheduler records per-cluster reasons"
    page.goto(federation.url + f"/jobs/{waiting['id']}")
    expect(page.get_by_test_id("job-state")).to_contain_text("Queued")
    expect(page.get_by_test_id("job-reason")).to_have_text(detail["reason"])
    rows = page.get_by_test_id("waits-table").locator("tbody tr")
    expect(rows).to_have_count(len(detail["waiting_reasons"]))
    for cluster, reason in detail["waiting_reasons"].items():
        expect(page.get_by_test_id("waits-table").locator("tr", has_text=cluster)).to_contain_text(reason)
    shot(page, "job-waiting")


def test_follow_a_job_from_queued_to_succeeded_live(page, federation):
    job = federation.submit("research", jobset("live-probe", queue="eval", replicas=1, annotations=SHORT))
    page.goto(federation.url + f"/jobs/{job['id']}")
    state = page.get_by_test_id("job-state")
    expect(state).to_contain_text("Queued")
    page.evaluate("window.__not_reloaded = true")
    shot(page, "job-queued")

    federation.schedule()
    placed = federation.get(f"/jobs/{job['id']}")
    assert placed["state"] == "Admitted", placed
    expect(state).to_contain_text("Admitted")
    expect(page.get_by_test_id("placement-hypernode")).to_have_text(placed["placements"][0]["hypernode"])
    expect(page.get_by_test_id("job-hypernodes")).to_have_text(", ".join(placed["hypernodes"]))

    federation.run(job["id"])
    expect(state).to_contain_text("Running")
    expect(page.get_by_test_id("job-placements").get_by_test_id("state")).to_have_text("Running")
    shot(page, "job-running")

    federation.finish(job["id"])
    expect(state).to_contain_text("Succeeded")
    final = federation.get(f"/jobs/{job['id']}")
    timeline = page.get_by_test_id("timeline").locator("li")
    expect(timeline).to_have_count(len(final["events"]))
    expect(timeline.last).to_contain_text("Succeeded")
    expect(page.get_by_test_id("aggregated-status")).to_contain_text("Completed")
    # the status reads as tables: the Jobs of each ReplicatedJob by state, the conditions with the broker's time
    [rjob] = final["status"]["replicatedJobsStatus"]
    row = page.get_by_test_id("aggregated-status").get_by_test_id("replicated-jobs").locator(f'[data-row="{rjob["name"]}"]')
    expect(row.locator('[data-col="succeeded"]')).to_have_text(str(rjob["succeeded"]))
    completed = next(c for c in final["status"]["conditions"] if c["type"] == "Completed")
    assert completed["observedTime"] != completed["lastTransitionTime"], "the simulated member's clock runs fast"
    assert final["submitted_at"][:19] <= completed["observedTime"][:19] <= final["finished_at"][:19] + "Z", completed
    cell = page.get_by_test_id("aggregated-status").get_by_test_id("conditions").locator('tr:has(th:text-is("Completed"))')
    expect(cell.locator("time")).to_have_attribute("datetime", completed["observedTime"])
    expect(cell.locator("time")).to_have_attribute("title", re.compile(re.escape(completed["lastTransitionTime"])))
    assert page.evaluate("window.__not_reloaded") is True, "the page reloaded instead of updating live"
    shot(page, "job-succeeded")


def test_an_admin_changes_a_tenants_pod_security_level_on_the_queues_page(page, federation):
    page.goto(federation.url + "/queues")
    level = page.locator('[data-tenant="vision"]').get_by_test_id("tenant-pod-security")
    expect(level).to_have_value("baseline")
    with page.expect_response(lambda answer: answer.request.method == "PATCH") as changed:
        level.select_option("restricted")
    assert changed.value.status == 200
    assert next(t for t in federation.get("/tenants") if t["name"] == "vision")["pod_security"] == "restricted"
    with federation.client() as admin:  # as it was, for the tests that follow on this federation
        assert admin.patch("/tenants/vision", json={"pod_security": "baseline"}).status_code == 200


def test_a_tenant_sees_only_its_own_jobs_and_queues(browser, federation):
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"sessionStorage.setItem('archipelago.token', {federation.tokens['vision']!r})")
    page = context.new_page()
    page.goto(federation.url + "/jobs")
    expect(page.get_by_test_id("whoami")).to_have_text("tenant vision")
    own = federation.get("/jobs", who="vision")["items"]
    rows = page.get_by_test_id("jobs-table").locator("tbody tr")
    expect(rows).to_have_count(len(own))
    expect(page.get_by_test_id("jobs-table").locator("tbody [data-col='tenant']")).to_have_text(["vision"] * len(own))
    expect(page.get_by_label("Tenant")).to_be_hidden()

    page.get_by_role("link", name="Queues").click()
    expect(page.get_by_test_id("queues-table").locator("tbody tr")).to_have_count(len(federation.get("/queues", who="vision")))
    expect(page.locator("[data-tenant='research']")).to_have_count(0)
    expect(page.get_by_test_id("tenant-pod-security")).to_have_text("baseline")  # read, not changed: no select
    expect(page.locator("[data-tenant='vision'] select")).to_have_count(0)

    other = federation.get("/jobs", name="pretrain")["items"][0]
    page.goto(federation.url + f"/jobs/{other['id']}")
    expect(page.locator("#live-error")).to_have_text(f"job {other['id']} does not exist")
    shot(page, "tenant-forbidden-job")
    context.close()


def test_override_rules_on_the_clusters_page_and_those_applied_on_the_job_page(page, federation):
    rule = {"name": "proxy-everywhere", "order": 7, "selector": "", "description": "the site proxy",
            "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]}
    with federation.client() as admin:
        assert admin.post("/overrides", json=rule).status_code == 201
    try:
        page.goto(federation.url + "/clusters")
        row = page.locator('[data-testid="overrides-table"] tr[data-row="proxy-everywhere"]')
        expect(row).to_contain_text("selector (every cluster)")
        expect(row).to_contain_text("env")
        expect(row).to_contain_text("the site proxy")
        shot(page, "clusters-overrides")

        job = federation.submit("research", jobset("proxied", queue="eval", replicas=1, annotations=SHORT))
        federation.schedule()
        federation.run(job["id"])
        placed = federation.get(f"/jobs/{job['id']}")
        assert [p["overrides"] for p in placed["placements"]] == [["proxy-everywhere"]]
        page.goto(federation.url + f"/jobs/{job['id']}")
        expect(page.get_by_test_id("placement-overrides")).to_have_text("proxy-everywhere")
        shot(page, "job-overrides")
        federation.finish(job["id"])
    finally:
        with federation.client() as admin:
            assert admin.delete("/overrides/proxy-everywhere").status_code == 204


def test_a_tenant_does_not_see_the_override_rules(browser, federation):
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"sessionStorage.setItem('archipelago.token', {federation.tokens['vision']!r})")
    tenant = context.new_page()
    tenant.goto(federation.url + "/clusters")
    expect(tenant.get_by_test_id("clusters-table")).to_be_visible()
    expect(tenant.get_by_test_id("overrides")).to_be_hidden()
    context.close()


def test_an_admin_cancels_a_job_from_its_page_after_confirming(page, federation):
    job = federation.submit("research", jobset("to-cancel", queue="eval", replicas=1))
    page.goto(federation.url + f"/jobs/{job['id']}")
    cancel = page.get_by_test_id("cancel-job")
    page.once("dialog", lambda dialog: dialog.dismiss())  # asked first: dismissed, nothing is sent
    cancel.click()
    assert federation.get(f"/jobs/{job['id']}")["cancel_requested"] is False
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(lambda answer: answer.request.method == "DELETE") as answered:
        cancel.click()
    assert answered.value.status == 202
    assert federation.get(f"/jobs/{job['id']}")["cancel_requested"] is True
    expect(page.get_by_test_id("job-state")).to_contain_text(re.compile("Cancelled|cancel requested"))
    expect(page.get_by_test_id("cancel-job")).to_have_count(0)  # nothing more to cancel


def test_an_admin_cordons_and_uncordons_a_cluster_and_is_asked_before_a_drain(page, federation):
    page.goto(federation.url + "/clusters/eu-west")
    expect(page.get_by_test_id("cluster-state")).to_contain_text("Ready")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_test_id("drain").click()
    assert federation.get("/clusters/eu-west")["state"] == "Ready"
    for action, state in (("cordon", "Cordoned"), ("uncordon", "Ready")):
        page.once("dialog", lambda dialog: dialog.accept())
        with page.expect_response(lambda answer: answer.request.method == "POST") as answered:
            page.get_by_test_id(action).click()
        assert answered.value.status == 200
        assert federation.get("/clusters/eu-west")["state"] == state
        expect(page.get_by_test_id("cluster-state")).to_contain_text(state)


def test_a_tenant_gets_no_action_buttons(browser, federation):
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"sessionStorage.setItem('archipelago.token', {federation.tokens['research']!r})")
    page = context.new_page()
    own = federation.get("/jobs", who="research")["items"][0]
    page.goto(federation.url + f"/jobs/{own['id']}")
    expect(page.get_by_test_id("job-state")).to_be_visible()
    expect(page.get_by_test_id("cancel-job")).to_have_count(0)
    context.close()


def test_a_cluster_the_broker_cannot_reach_shows_no_free_capacity_and_its_nodes_unknown(page, federation):
    """During an outage: the NotReady cluster's capacity is set apart from the federation's free capacity, its card
    says its capacity is unknown and how much of its work is failing over, its nodes' readiness unknown."""
    from sqlalchemy import update

    from broker.store.db.models import Cluster

    def state(value: str) -> None:
        with federation.db.sessions() as session, session.begin():
            session.execute(update(Cluster).where(Cluster.name == "eu-west").values(state=value))

    running_there = {p["job_id"] for p in federation.get("/placements", cluster="eu-west")["items"]
                     if p["state"] in ("Decided", "Applying", "Starting", "Running")}
    state("NotReady")
    try:
        page.goto(federation.url + "/")
        card = page.locator('[data-cluster="eu-west"]')
        expect(card.get_by_test_id("capacity-unknown")).to_contain_text("capacity unknown since")
        expect(card.get_by_test_id("cluster-failing-over")).to_have_text(f" · {len(running_there)} failing over")
        expect(page.get_by_test_id("unavailable-capacity")).to_contain_text("on eu-west (NotReady)")
        others = [c for c in federation.get("/clusters") if c["name"] != "eu-west"]
        free = sum(float(c["capacity"][GPU]["free"]) for c in others if GPU in c["capacity"])
        gpus = page.get_by_test_id("total-capacity").locator(f'[data-resource="{GPU}"] [data-testid="capbar-text"]')
        expect(gpus).to_contain_text(f"/ {free:g} free /")
        shot(page, "outage")
        page.goto(federation.url + "/clusters/eu-west")
        expect(page.get_by_test_id("node-unknown").first).to_contain_text("unknown since")
        expect(page.get_by_test_id("nodes-table").locator("tbody").get_by_text("yes", exact=True)).to_have_count(0)
    finally:
        state("Ready")


def test_a_queue_whose_quota_is_used_up_with_work_waiting_is_flagged(page, federation):
    with federation.client() as admin:
        assert admin.post("/queues", json={"name": "capped", "tenant": "vision", "nominal_quota": {GPU: "8"},
                                           "borrowing_limit": {GPU: "0"}}).status_code == 201
    for name in ("capped-a", "capped-b"):
        federation.submit("vision", jobset(name, queue="capped", replicas=1))
    federation.schedule()
    capped = next(q for q in federation.get("/queues") if q["name"] == "capped")
    assert (capped["usage"][GPU], capped["pending"]) == ("8", 1)
    page.goto(federation.url + "/queues")
    expect(page.locator('tr[data-row="capped"]').get_by_test_id("at-quota")).to_have_text("at quota")
    expect(page.locator('tr[data-row="eval"]').get_by_test_id("at-quota")).to_have_count(0)


def test_jobs_are_counted_by_state_and_a_waiting_job_shows_its_place_in_its_queue(page, federation):
    counts = federation.get("/jobs:counts")
    page.goto(federation.url + "/jobs")
    chips = page.get_by_test_id("state-counts")
    for state, count in counts.items():
        if count:
            expect(chips.locator(f'[data-state="{state}"]')).to_have_text(f"{state} {count}")
    waiting = federation.get("/jobs", state="Queued")["items"][-1]
    position = federation.get(f"/jobs/{waiting['id']}")["position"]
    page.goto(federation.url + f"/jobs/{waiting['id']}")
    expect(page.get_by_test_id("job-position")).to_contain_text(f"{position} in queue {waiting['queue']}")


def test_a_waiting_job_shows_when_it_is_expected_to_start(page, federation):
    federation.forecast.run_once()
    waiting = next(j for j in federation.get("/jobs", state="Queued")["items"] if j["expected_start"])
    detail = federation.get(f"/jobs/{waiting['id']}")
    assert detail["expected"], detail["forecast"]
    page.goto(federation.url + f"/jobs/{waiting['id']}")
    expected = page.get_by_test_id("job-expected")
    expect(expected).to_contain_text(detail["expected"])
    expect(expected).to_contain_text(f"expected to run {'1h 0m'}: {detail['forecast']['runtime_source']}")
    expect(expected.locator("time")).to_have_attribute("datetime", detail["expected_start"])


def test_a_queue_shows_the_next_expected_start_of_its_waiting_jobs(page, federation):
    federation.forecast.run_once()
    queues = [q for q in federation.get("/queues") if q["next_expected_start"]]
    assert queues, "some queue's waiting job has a forecast start"
    starts = [j["expected_start"] for j in federation.get("/jobs", state="Queued", queue=queues[0]["name"])["items"]
              if j["expected_start"]]
    assert queues[0]["next_expected_start"] == min(starts)
    page.goto(federation.url + "/queues")
    row = page.locator(f'[data-tenant="{queues[0]["tenant"]}"]').locator(f'tr[data-row="{queues[0]["name"]}"]')
    expect(row.get_by_test_id("next-start")).to_have_attribute("datetime", queues[0]["next_expected_start"])
