"""The Grafana dashboard and the Prometheus alerting rules in deploy/monitoring (issue #51). No package registry here
carries promtool, so each rule is parsed by a PromQL parser (promql-parser, a port of Prometheus' own) and checked as
promtool checks a rule file — names, `for` durations, labels, annotations — and every series a rule or a panel reads
must be one the broker exposes: a metric renamed breaks this test, not the operators' alerts in silence."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest
import yaml

from broker.process import metrics

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = yaml.safe_load((ROOT / "alerts.yaml").read_text())
DASHBOARD = json.loads((ROOT / "grafana-dashboard.json").read_text())
NAME = re.compile(r"\barchipelago_[a-z_]+\b")
DURATION = re.compile(r"^\d+[smhd]$")


def exposed() -> set[str]:
    """Every series name the broker's registry exposes, counters' and histograms' suffixes included."""
    names = set()
    for collector in (metrics.INVENTORY, *metrics.REGISTRY._collector_to_names):  # noqa: SLF001 - the registry's own
        for family in collector.describe() if hasattr(collector, "describe") else collector.collect():
            names.add(family.name)
            names.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_sum", "_count", "_created"))
    return names


def rules() -> list[dict]:
    return [rule for group in RULES["groups"] for rule in group["rules"]]


def expressions() -> list[tuple[str, str]]:
    found = [(rule["alert"], rule["expr"]) for rule in rules()]
    found += [(panel["title"], target["expr"]) for panel in DASHBOARD["panels"] for target in panel["targets"]]
    return found


@pytest.mark.parametrize("where, expr", expressions(), ids=[w for w, _ in expressions()])
def test_each_expression_is_promql_over_series_the_broker_exposes(where, expr):
    promql_parser.parse(expr)  # ValueError, with the position, for what Prometheus would refuse
    names = set(NAME.findall(expr))
    assert names, f"{where} reads no series of the broker"
    assert names <= exposed(), f"{where} reads {sorted(names - exposed())}, which the broker does not expose"


def test_the_rule_file_is_what_promtool_accepts():
    assert set(RULES) == {"groups"}
    seen = set()
    for group in RULES["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]) and rule["alert"] not in seen
            seen.add(rule["alert"])
            assert DURATION.match(rule.get("for", "0s")), rule
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    assert {"ArchipelagoMemberNotReady", "ArchipelagoLeaderLeaseFlapping", "ArchipelagoSchedulingCyclesDropped",
            "ArchipelagoStartupEvictionsRising"} <= seen


def test_the_dashboard_shows_what_operators_ask_for():
    titles = [panel["title"] for panel in DASHBOARD["panels"]]
    for wanted in ("Queued jobs by queue", "Oldest wait by queue", "Placements per second", "Scheduling cycle time",
                   "Members by state", "Member lane lag", "Leader lease holder", "API latency"):
        assert any(title.startswith(wanted) for title in titles), wanted
    assert len({panel["id"] for panel in DASHBOARD["panels"]}) == len(titles)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in DASHBOARD["panels"])


def test_a_misspelt_series_is_caught():
    assert not {"archipelago_scheduler_placement_total"} <= exposed()
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(archipelago_scheduler_placements_total[5m])")
