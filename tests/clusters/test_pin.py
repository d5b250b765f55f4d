"""The broker pins pods by node name as the DaemonSet controller does, within the pod's own affinity."""

from clusters.rules.labels import node_selector_term, pin_to_nodes

NAME = "metadata.name"


def _name_is(node: str) -> dict:
    return {"key": NAME, "operator": "In", "values": [node]}


def test_no_affinity_of_its_own_becomes_one_term_per_node():
    assert pin_to_nodes(None, ["a", "b"]) == {"nodeSelectorTerms": [{"matchFields": [_name_is("a")]},
                                                                    {"matchFields": [_name_is("b")]}]}


def test_each_of_the_pods_terms_is_kept_and_anded_with_each_node():
    gen = {"matchExpressions": [{"key": "gen", "operator": "In", "values": ["h100"]}]}
    zone = {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
    pinned = pin_to_nodes({"nodeSelectorTerms": [gen, zone]}, ["a"])
    assert pinned["nodeSelectorTerms"] == [{**gen, "matchFields": [_name_is("a")]},
                                           {**zone, "matchFields": [_name_is("a")]}]
    for term in pinned["nodeSelectorTerms"]:  # every term stays one the API server accepts
        node_selector_term(term)


def test_a_term_that_rules_the_node_out_or_matches_nothing_is_not_widened():
    not_a = {"matchFields": [{"key": NAME, "operator": "NotIn", "values": ["a"]}]}
    pinned = pin_to_nodes({"nodeSelectorTerms": [not_a, {}]}, ["a", "b"])
    assert pinned["nodeSelectorTerms"] == [{"matchFields": [*not_a["matchFields"], _name_is("b")]}]
