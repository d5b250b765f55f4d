"""The recipes' rules alone (clusters.recipes): object names from label values, an admin's recipe read or refused
with what to fix, `auto`'s choice between recipes that share labels, and the global list as the last resort."""

from __future__ import annotations

import pytest

from clusters.recipes import BUILT_IN, CLIQUE, ZONE, RecipeError, choose, discover, hypernode_name, parse_recipe

LEAF = "network.archipelago.io/leaf"


def test_a_domain_is_named_prefix_value_and_a_value_no_object_name_may_hold_ends_in_its_hash():
    assert hypernode_name("layer3", "nn-1a2b3c") == "layer3-nn-1a2b3c"
    assert hypernode_name("", "leaf-0") == "leaf-0"  # our own labels name themselves
    odd = hypernode_name("clique", "7CBA8243_11E0.3")
    assert odd.startswith("clique-7cba8243-11e0.3-") and len(odd) == len("clique-7cba8243-11e0.3-") + 8
    assert odd != hypernode_name("clique", "7cba8243-11e0.3")  # two values never share a name
    assert len(hypernode_name("clique", "x" * 300)) <= 63


@pytest.mark.parametrize("body, error", [
    ({}, "give either tiers"),
    ({"tiers": [["a/b"]], "levels": []}, "give either tiers"),
    ({"tiers": []}, "tiers: a non-empty list"),
    ({"tiers": [["a/b"], ["a/b"]]}, "tier 2: a/b is in another tier too"),
    ({"tiers": [["bad key"]]}, "tier 1: 'bad key' is not a label key"),
    ({"levels": [{"label": "x"}]}, "levels: a list of {nodeLabel"),
    ({"tiers": [[f"k{i}"] for i in range(9)]}, "at most 8 tiers"),
])
def test_an_admins_recipe_that_cannot_be_used_says_what_to_fix(body, error):
    with pytest.raises(RecipeError, match=error.replace("{", r"\{").replace("(", r"\(")):
        parse_recipe("mine", body)


def test_volcanos_levels_read_from_the_highest_down_and_its_hostname_level_makes_no_tier():
    recipe = parse_recipe("racks", {"levels": [{"nodeLabel": "example.com/hall"}, {"nodeLabel": "example.com/rack"},
                                               {"nodeLabel": "kubernetes.io/hostname"}]})
    assert [t.keys for t in recipe.tiers] == [("example.com/rack",), ("example.com/hall",)]
    assert [t.prefix for t in recipe.tiers] == ["rack", "hall"]
    with pytest.raises(RecipeError, match="built in"):
        parse_recipe("aws", {"tiers": [["x"]]})


@pytest.mark.parametrize("labels, chosen", [
    ({CLIQUE: "u.1", ZONE: "z"}, "nvlink"),  # every recipe has a clique tier: the most specific wins
    ({CLIQUE: "u.1", "topology.k8s.aws/network-node-layer-3": "nn-1", ZONE: "z"}, "aws"),
    ({LEAF: "leaf-1", ZONE: "z"}, "archipelago"),
    ({"cloud.google.com/gce-topology-block": "b1"}, "gke"),
    ({ZONE: "z"}, None),  # a zone says no fabric: the global list decides
])
def test_auto_chooses_the_recipe_whose_own_labels_the_nodes_carry(labels, chosen):
    recipe = choose({"n1": labels, "n2": labels}, BUILT_IN)
    assert (recipe.name if recipe else None) == chosen


def test_without_any_recipes_labels_the_global_list_is_the_last_resort():
    topology, source = discover({"n1": {ZONE: "z-a"}}, "auto", {}, [[LEAF], ["spine"], [ZONE]])
    assert source == "labels" and [(h.name, h.tier) for h in topology.hypernodes] == [("z-a", 3)]
    topology, source = discover({"n1": {"other": "x"}}, "auto", {}, [[LEAF]])
    assert (source, topology.hypernodes) == ("none", [])
    topology, source = discover({"n1": {ZONE: "z"}}, "racks", {}, [[LEAF]])
    assert source == "none" and topology.warnings == ["topology recipe racks does not exist; the tree is empty "
                                                      "until it does"]


def test_two_domains_never_share_a_name_even_once_one_is_renamed():
    """n1's leaf is `a` and its spine `a-tier2`; n2's leaf `b` and spine `a`: the spine `a` is renamed, and not into
    the other spine's name."""
    from clusters.recipes import derive
    labels = {"n1": {LEAF: "a", "network.archipelago.io/spine": "a-tier2"},
              "n2": {LEAF: "b", "network.archipelago.io/spine": "a"}}
    tree = {h.name: (h.tier, set(h.nodes)) for h in derive(labels, BUILT_IN["archipelago"]).hypernodes}
    assert len(tree) == 4 and tree["a-tier2"] == (2, {"n1"})
    assert [nodes for name, (tier, nodes) in tree.items() if tier == 2 and name != "a-tier2"] == [{"n2"}]


def test_an_admins_recipe_naming_the_zone_does_not_win_auto_by_the_zone_alone():
    racks = parse_recipe("racks", {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": "example.com/rack"},
                                              {"nodeLabel": "kubernetes.io/hostname"}]})
    gpu = {"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s1", ZONE: "z"}
    nodes = {**{f"g{i}": gpu for i in range(4)}, **{f"c{i}": {ZONE: "z"} for i in range(5)}}
    assert choose(nodes, {**BUILT_IN, "racks": racks}).name == "gke"
