"""HyperNode resolution as Volcano does it, label-derived trees, and bad graphs as warnings."""

from __future__ import annotations

from clusters.topology import derive_from_labels, resolve_hypernodes
from tests.examples import example_documents


def hn(name: str, tier: int, *members: tuple[str, dict]) -> dict:
    return {"metadata": {"name": name}, "spec": {"tier": tier, "members": [
        {"type": kind, "selector": selector} for kind, selector in members]}}


def tree(topology) -> dict[str, tuple[int, str | None, tuple[str, ...]]]:
    return {h.name: (h.tier, h.parent, h.nodes) for h in topology.hypernodes}


def test_the_shared_example_resolves_every_selector_kind():
    nodes = {f"gpu-{i:02d}": {"topology.example.com/leaf": f"leaf-{i // 8}"} for i in range(24)}
    result = resolve_hypernodes(example_documents("hypernodes-eu-west.yaml"), nodes)
    resolved = tree(result)
    assert resolved["leaf-0"] == (1, "spine-0", tuple(f"gpu-{i:02d}" for i in range(8)))
    assert resolved["leaf-1"][2] == tuple(f"gpu-{i:02d}" for i in range(8, 16))
    assert resolved["leaf-2"] == (1, "spine-1", tuple(f"gpu-{i:02d}" for i in range(16, 24)))
    assert resolved["fabric"] == (3, None, tuple(sorted(nodes)))
    assert result.warnings == []


def test_regex_is_a_search_and_an_empty_label_match_selects_nothing():
    nodes = {"a-1": {}, "a-10": {}, "b-1": {"x": "y"}}
    result = resolve_hypernodes([hn("r", 1, ("Node", {"regexMatch": {"pattern": "-1"}})),
                                 hn("e", 1, ("Node", {"labelMatch": {}})),
                                 hn("l", 1, ("Node", {"labelMatch": {"matchExpressions": [
                                     {"key": "x", "operator": "Exists"}]}}))], nodes)
    assert tree(result)["r"][2] == ("a-1", "a-10", "b-1")
    assert tree(result)["e"][2] == () and tree(result)["l"][2] == ("b-1",)


def test_cycles_double_parents_duplicates_and_dangling_members_are_warnings():
    nodes = {"n1": {}, "n2": {}}
    result = resolve_hypernodes([
        hn("a", 2, ("HyperNode", {"exactMatch": {"name": "b"}})),
        hn("b", 2, ("HyperNode", {"exactMatch": {"name": "a"}}), ("Node", {"exactMatch": {"name": "n1"}})),
        hn("leaf-x", 1, ("Node", {"exactMatch": {"name": "n2"}}), ("Node", {"exactMatch": {"name": "ghost"}})),
        hn("leaf-y", 1, ("Node", {"regexMatch": {"pattern": "^n2$"}})),
        hn("top", 3, ("HyperNode", {"exactMatch": {"name": "leaf-x"}})),
        hn("top2", 3, ("HyperNode", {"exactMatch": {"name": "leaf-x"}})),
        hn("bad", 0, ("Node", {"exactMatch": {"name": "n1"}})),
    ], nodes)
    resolved = tree(result)
    assert resolved["a"] == (2, None, ("n1",)) and resolved["b"] == (2, "a", ("n1",))
    assert resolved["leaf-x"] == (1, "top", ("n2",)) and resolved["top2"][2] == ()
    assert "bad" not in resolved
    text = "\n".join(result.warnings)
    for expected in ("HyperNode cycle a -> b -> a", "leaf-x is a member of both top and top2",
                     "node n2 is in both leaf-x and leaf-y of tier 1", "member node 'ghost' does not exist",
                     "tier 0 is not a positive integer", "a member should be of a lower tier"):
        assert expected in text


def test_label_tiers_build_a_tree_and_a_value_shared_by_two_tiers_gets_its_own_name():
    tiers = [["leaf", "alt-leaf"], ["spine"], ["zone"]]
    nodes = {"n1": {"leaf": "l1", "spine": "s1", "zone": "z"}, "n2": {"alt-leaf": "l2", "spine": "s1", "zone": "z"},
             "n3": {"leaf": "z", "zone": "z"}, "n4": {}}
    result = derive_from_labels(nodes, tiers)
    assert tree(result) == {"z": (3, None, ("n1", "n2", "n3")), "s1": (2, "z", ("n1", "n2")),
                            "l1": (1, "s1", ("n1",)), "l2": (1, "s1", ("n2",)), "z-tier1": (1, "z", ("n3",))}
    split = derive_from_labels({"a": {"leaf": "l", "spine": "s1"}, "b": {"leaf": "l", "spine": "s2"}}, tiers)
    assert tree(split)["l"][1] == "s1" and "domain l lies under both s1 and s2" in split.warnings[0]
