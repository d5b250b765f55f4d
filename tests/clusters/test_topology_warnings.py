"""A member's broken HyperNode objects, word for word: which warnings, grouped by kind in the order the
kinds first appear, at most five of a kind (clusters/topology.py); and the order of the resolved tree."""

from __future__ import annotations

import subprocess
import sys

from clusters.topology import MAX_PATTERN, derive_from_labels, resolve_hypernodes
from tests.clusters.test_topology import hn, tree

NODES = {"n1": {"pool": "a"}, "n2": {"pool": "b"}}


def test_every_broken_member_is_one_warning_grouped_by_kind_at_most_five_of_a_kind():
    # the names alternate the kinds (dangling, member), so that a warning filed under another kind moves
    result = resolve_hypernodes([
        hn("h00", True), hn("h00-str", "1"),
        hn("h01", 1, ("Node", {"exactMatch": {"name": "ghost"}})),
        hn("h02", 1, ("Pod", {"exactMatch": {"name": "n1"}})),
        hn("h03", 2, ("HyperNode", {"exactMatch": {"name": "nowhere"}})),
        hn("h04", 1, ("Node", {"fieldMatch": {}})),
        hn("h05", 1, ("Node", {"regexMatch": {"pattern": "zzz"}})),
        hn("h06", 1, ("Node", {"labelMatch": {"matchExpressions": [{"key": "pool", "operator": "Like"}]}})),
        hn("h07", 2, ("HyperNode", {"regexMatch": {"pattern": "^zzz"}})),
        hn("h08", 1, ("Node", {"regexMatch": {"pattern": "("}})),
        hn("h09", 2, ("HyperNode", {"labelMatch": {"matchLabels": {"a": "b"}}})),
        hn("h10", 2, ("HyperNode", {"regexMatch": {"pattern": "["}})),
        hn("h11", 2, ("Pod", {})),
    ], NODES)
    assert result.warnings == [
        "HyperNode h00: tier True is not a positive integer; ignored",
        "HyperNode h00-str: tier '1' is not a positive integer; ignored",
        "HyperNode h01: member node 'ghost' does not exist",
        "HyperNode h03: member HyperNode 'nowhere' does not exist",
        "HyperNode h05: member selector {'regexMatch': {'pattern': 'zzz'}} matches no node",
        "HyperNode h07: regexMatch '^zzz' matches no HyperNode",
        "HyperNode h02: unknown member type 'Pod'; ignored",
        "HyperNode h04: a member has no exactMatch, regexMatch or labelMatch",
        "HyperNode h06: labelMatch is not a label selector (unknown selector operator 'Like')",
        "HyperNode h08: regexMatch '(' is not a regular expression Go's regexp (RE2) accepts (missing ): (); ignored",
        "HyperNode h09: a HyperNode member needs exactMatch or regexMatch",
        "... and 2 more like it",
    ]
    assert [(h.name, h.tier) for h in result.hypernodes] == [  # highest tier first, then by name
        ("h03", 2), ("h07", 2), ("h09", 2), ("h10", 2), ("h11", 2),
        ("h01", 1), ("h02", 1), ("h04", 1), ("h05", 1), ("h06", 1), ("h08", 1)]


def test_five_warnings_of_a_kind_are_all_shown():
    result = resolve_hypernodes([hn(f"h{i}", 1, ("Node", {"exactMatch": {"name": f"ghost{i}"}})) for i in range(5)],
                                NODES)
    assert result.warnings == [f"HyperNode h{i}: member node 'ghost{i}' does not exist" for i in range(5)]


def test_a_regex_with_no_pattern_matches_every_node_and_a_hypernode_regex_never_its_owner():
    result = resolve_hypernodes([hn("all", 1, ("Node", {"regexMatch": {}})),
                                 hn("spine-a", 2, ("HyperNode", {"regexMatch": {"pattern": "^all$|^spine"}})),
                                 hn("spine-b", 1, ("Node", {"regexMatch": {"pattern": None}}))], NODES)
    assert tree(result) == {"spine-a": (2, None, ("n1", "n2")), "all": (1, "spine-a", ("n1", "n2")),
                            "spine-b": (1, "spine-a", ("n1", "n2"))}
    assert result.warnings == ["node n1 is in both all and spine-b of tier 1",
                               "node n2 is in both all and spine-b of tier 1"]


def test_a_hypernode_claimed_twice_and_a_cycle_each_say_which_edge_went():
    result = resolve_hypernodes([
        hn("a", 3, ("HyperNode", {"exactMatch": {"name": "b"}})),
        hn("b", 2, ("HyperNode", {"exactMatch": {"name": "c"}})),
        hn("c", 1, ("HyperNode", {"exactMatch": {"name": "a"}}), ("Node", {"exactMatch": {"name": "n1"}})),
        hn("d", 2, ("HyperNode", {"exactMatch": {"name": "c"}}), ("HyperNode", {"exactMatch": {"name": "d"}})),
    ], NODES)
    assert tree(result) == {"a": (3, None, ("n1",)), "b": (2, "a", ("n1",)), "d": (2, None, ()),
                            "c": (1, "b", ("n1",))}
    assert result.warnings == ["HyperNode cycle a -> b -> c -> a; the member a of c is ignored",
                               "HyperNode cycle d -> d; the member d of d is ignored",
                               "HyperNode c is a member of both b and d; kept under b"]


def test_label_tiers_are_listed_highest_first_and_a_node_without_labels_is_in_none():
    result = derive_from_labels({"n1": {"leaf": "b", "zone": "z"}, "n2": {"leaf": "a"}, "n3": {"spine": ""}},
                                [["leaf"], ["spine"], ["zone"]])
    assert [(h.name, h.tier, h.parent, h.nodes) for h in result.hypernodes] == [
        ("z", 3, None, ("n1",)), ("a", 1, None, ("n2",)), ("b", 1, "z", ("n1",))]
    assert result.warnings == []


def test_regex_match_is_gos_syntax_and_bounded():
    result = resolve_hypernodes([hn("ahead", 1, ("Node", {"regexMatch": {"pattern": "n(?!1)"}})),
                                 hn("back", 1, ("Node", {"regexMatch": {"pattern": "(n)\\1"}})),
                                 hn("long", 1, ("Node", {"regexMatch": {"pattern": "n" * (MAX_PATTERN + 1)}})),
                                 hn("go", 1, ("Node", {"regexMatch": {"pattern": "^n[[:digit:]]$"}}))], NODES)
    assert result.warnings == [
        "HyperNode ahead: regexMatch 'n(?!1)' is not a regular expression Go's regexp (RE2) accepts "
        "(invalid perl operator: (?!); ignored",
        "HyperNode back: regexMatch '(n)\\\\1' is not a regular expression Go's regexp (RE2) accepts "
        "(invalid escape sequence: \\1); ignored",
        f"HyperNode long: regexMatch pattern of {MAX_PATTERN + 1} characters is longer than the {MAX_PATTERN} read; "
        "ignored",
    ]
    assert tree(result)["go"] == (1, None, ("n1", "n2"))  # a POSIX class, which Python's re does not know


def test_a_pattern_too_long_is_a_broken_member_like_any_other_and_a_pattern_just_short_enough_is_read():
    result = resolve_hypernodes([hn("a", 1, ("Pod", {})),
                                 hn("b", 1, ("Node", {"regexMatch": {"pattern": "n" * (MAX_PATTERN + 1)}})),
                                 hn("c", 1, ("Node", {"fieldMatch": {}})),
                                 hn("d", 1, ("Node", {"regexMatch": {"pattern": "n1|" + "x" * (MAX_PATTERN - 3)}}))],
                                NODES)
    assert result.warnings == [  # one kind: in the order of the HyperNodes' names
        "HyperNode a: unknown member type 'Pod'; ignored",
        f"HyperNode b: regexMatch pattern of {MAX_PATTERN + 1} characters is longer than the {MAX_PATTERN} read; "
        "ignored",
        "HyperNode c: a member has no exactMatch, regexMatch or labelMatch",
    ]
    assert tree(result)["d"] == (1, None, ("n1",))


def test_a_hypernode_member_whose_pattern_re2_refuses_names_its_owner():
    result = resolve_hypernodes([hn("fabric", 2, ("HyperNode", {"regexMatch": {"pattern": "^spine-(?=a)"}}))], NODES)
    assert result.warnings == ["HyperNode fabric: regexMatch '^spine-(?=a)' is not a regular expression Go's regexp "
                               "(RE2) accepts (invalid perl operator: (?=); ignored"]


def test_a_pattern_that_is_not_a_string_or_not_unicode_is_a_warning_not_a_failed_sync():
    # the CRD's schema would refuse both; a pull member's agent reports objects the broker did not see validated
    result = resolve_hypernodes([hn("list", 1, ("Node", {"regexMatch": {"pattern": ["n1"]}})),
                                 hn("m", 1, ("Node", {})),
                                 hn("number", 1, ("Node", {"regexMatch": {"pattern": 5}})),
                                 hn("surrogate", 2, ("HyperNode", {"regexMatch": {"pattern": "\ud800"}})),
                                 hn("z", 1, ("Node", {})),
                                 hn("fine", 1, ("Node", {"exactMatch": {"name": "n1"}}))], NODES)
    assert result.warnings == [  # broken members like any other: one kind, in the order of the HyperNodes' names
        "HyperNode list: regexMatch pattern must be a string, got list; ignored",
        "HyperNode m: a member has no exactMatch, regexMatch or labelMatch",
        "HyperNode number: regexMatch pattern must be a string, got int; ignored",
        "HyperNode surrogate: regexMatch '\\ud800' is not valid Unicode; ignored",  # the warning itself is valid
        "HyperNode z: a member has no exactMatch, regexMatch or labelMatch",
    ]
    assert tree(result)["fine"] == (1, None, ("n1",))


def test_a_refused_pattern_is_a_warning_and_not_a_line_on_stderr(capfd):
    resolve_hypernodes([hn("h", 1, ("Node", {"regexMatch": {"pattern": "("}}))], NODES)
    assert capfd.readouterr().err == ""


def test_a_member_that_would_close_a_cycle_is_dropped_alone_and_the_owners_next_members_are_kept():
    result = resolve_hypernodes([hn("a", 3, ("HyperNode", {"exactMatch": {"name": "b"}})),
                                 hn("b", 2, ("HyperNode", {"exactMatch": {"name": "a"}}),
                                    ("HyperNode", {"exactMatch": {"name": "c"}})),
                                 hn("c", 1, ("Node", {"exactMatch": {"name": "n1"}}))], NODES)
    assert tree(result) == {"a": (3, None, ("n1",)), "b": (2, "a", ("n1",)), "c": (1, "b", ("n1",))}
    assert result.warnings == ["HyperNode cycle a -> b -> a; the member a of b is ignored"]


HOSTILE = """
from clusters.topology import resolve_hypernodes
hypernode = {"metadata": {"name": "h"}, "spec": {"tier": 1, "members": [
    {"type": "Node", "selector": {"regexMatch": {"pattern": "^(a+)+$"}}}]}}
print(resolve_hypernodes([hypernode], {"a" * 64 + "!": {}}).warnings)
"""


def test_a_pattern_that_backtracks_catastrophically_in_pythons_re_is_matched_in_linear_time():
    # Python's re would take 2^64 steps on this name, holding the GIL: hence a process of its own, and a deadline
    done = subprocess.run([sys.executable, "-c", HOSTILE], capture_output=True, text=True, timeout=60, check=True)
    assert "matches no node" in done.stdout
