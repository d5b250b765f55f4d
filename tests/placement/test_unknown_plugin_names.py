"""A placement setting that names a plugin the engine does not have is refused at once, with the names it has
(broker/engine/placement/cycle/ `Config`): the settings layer shows this message to the operator."""

from __future__ import annotations

import pytest

from broker.engine.placement import Config

KNOWN = ("['Capacity', 'ClusterSelector', 'ClusterState', 'ExclusiveTopology', 'JobSetCRD', 'MemberAdmission', "
         "'NodeEligibility', 'RecentEviction', 'Reservation', 'TaintToleration', 'TopologyBound', 'BinPacking', "
         "'Locality', 'Spread', 'TightestTier']")


@pytest.mark.parametrize("settings, unknown", [
    ({"filters": ("Capacity", "Capacityy")}, "['Capacityy']"),
    ({"score_weights": {"BinPacking": 1.0, "Tightest": 2.0}}, "['Tightest']"),
])
def test_an_unknown_plugin_name_is_refused_with_the_known_ones(settings, unknown):
    with pytest.raises(ValueError) as error:
        Config(**settings)
    assert str(error.value) == f"unknown placement plugins {unknown}; known: {KNOWN}"


def test_known_plugin_names_are_accepted():
    assert Config(filters=("Capacity",), score_weights={"Spread": 1.0}).filters == ("Capacity",)
