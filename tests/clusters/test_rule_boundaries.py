"""Boundaries of the pure Kubernetes rules (clusters/rules/quantity.py, labels.py, pods.py) the other tests pass by:
the largest quantity, an operator that takes no values, and pods that finished."""

from __future__ import annotations

from decimal import Decimal

import pytest

from clusters.rules.labels import MAX_ANNOTATIONS_BYTES, check_annotations, node_requirement
from clusters.rules.pods import why_not_ready
from clusters.rules.quantity import QuantityRangeError, parse_quantity


def test_a_quantity_of_exactly_the_largest_int64_is_one_and_a_larger_one_is_refused_in_forty_characters():
    assert parse_quantity(str(2**63 - 1)) == Decimal(2**63 - 1)
    with pytest.raises(QuantityRangeError) as refused:
        parse_quantity("9" * 50)
    assert str(refused.value) == f"{'9' * 40!r} is out of range: a quantity is at most {2**63 - 1}"


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist"])
def test_an_operator_on_whether_a_label_is_there_takes_no_values(operator):
    with pytest.raises(ValueError) as refused:
        node_requirement({"key": "gpu", "operator": operator, "values": ["h100"]}, field=False)
    assert str(refused.value) == f"{operator} takes no values"


def test_pods_that_finished_are_no_reason_a_copy_is_not_ready():
    pods = [{"status": {"phase": "Succeeded"}}, {"status": {"phase": "Failed"}}, {"status": {"phase": "Running"}}]
    assert why_not_ready(pods) == "1 pod Running: not ready"


def test_annotations_of_exactly_the_api_servers_bound_pass_and_one_byte_more_is_refused_saying_the_size():
    check_annotations({"k": "v" * (MAX_ANNOTATIONS_BYTES - 1)})  # keys and values together: 1 + 262143 bytes
    with pytest.raises(ValueError, match=f"^the annotations take {MAX_ANNOTATIONS_BYTES + 3} bytes"):
        check_annotations({"k": "é" * (MAX_ANNOTATIONS_BYTES // 2 + 1)})  # bytes, not characters: é is two
    with pytest.raises(ValueError) as refused:
        check_annotations({"k": "v" * MAX_ANNOTATIONS_BYTES})
    assert str(refused.value) == (f"the annotations take {MAX_ANNOTATIONS_BYTES + 1} bytes; Kubernetes allows at most "
                                  f"{MAX_ANNOTATIONS_BYTES} (keys and values together)")


def test_an_annotation_keys_prefix_is_a_dns_subdomain_of_at_most_253_characters():
    check_annotations({"a" * 253 + "/k": "v"})
    with pytest.raises(ValueError, match="^invalid annotation key 'a{254}/k'"):
        check_annotations({"a" * 254 + "/k": "v"})
