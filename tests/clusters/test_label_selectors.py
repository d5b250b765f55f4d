"""Label selectors and node selector terms as Kubernetes reads them (clusters/rules/labels.py): the string form,
`matchLabels`/`matchExpressions`, label checks (the node pinning is tests/clusters/test_pin.py's)."""

from __future__ import annotations

import pytest

from clusters.rules.labels import (NODE_NAME_FIELD, Requirement, Selector, TermError, check_labels, node_requirement,
                                   node_selector_term, parse_selector, selector_from_object)

LABELS = {"region": "eu", "gpu": "h100", "tier": "3", "example.com/pool": "a.b_c-d"}


@pytest.mark.parametrize("text, matches", [
    ("", True),
    ("   ", True),
    ("region=eu", True),
    ("region==eu", True),
    ("region = eu", True),
    ("region=us", False),
    ("region!=us", True),
    ("region!=eu", False),
    ("zone!=a", True),  # != holds where the label is absent
    ("region in (eu, us)", True),
    ("region in (us,ap)", False),
    ("zone in (a)", False),
    ("region notin (us)", True),
    ("region notin (eu,us)", False),
    ("zone notin (a)", True),
    ("gpu", True),
    ("zone", False),
    ("!zone", True),
    ("! gpu", False),
    ("tier>2", True),
    ("tier>3", False),
    ("tier<4", True),
    ("tier<3", False),
    ("tier > -1", True),
    ("region>1", False),  # not a number: Gt holds on nothing
    ("zone<5", False),
    ("example.com/pool=a.b_c-d", True),
    ("region in (eu,us),gpu=h100,!zone,tier>1", True),
    ("region in (eu,us),gpu=a100", False),
])
def test_a_selector_string_matches_as_kubernetes_does(text, matches):
    assert parse_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize("text, requirements", [
    ("a=b", [("a", "In", ("b",))]),
    ("a!=b", [("a", "NotIn", ("b",))]),
    ("a in ( x , y )", [("a", "In", ("x", "y"))]),
    ("a notin (x)", [("a", "NotIn", ("x",))]),
    ("a", [("a", "Exists", ())]),
    ("!a", [("a", "DoesNotExist", ())]),
    ("a>1,b<-2", [("a", "Gt", ("1",)), ("b", "Lt", ("-2",))]),
    (" a=b , c ", [("a", "In", ("b",)), ("c", "Exists", ())]),
    ("a=", [("a", "In", ("",))]),
])
def test_a_selector_string_parses_into_requirements(text, requirements):
    assert [(r.key, r.operator, r.values) for r in parse_selector(text).requirements] == requirements


@pytest.mark.parametrize("text, message", [
    ("a=b,", "empty term in selector 'a=b,'"),
    (",a", "empty term in selector ',a'"),
    ("a in (x", "unbalanced '(' in selector 'a in (x'"),
    ("a=b)", "unbalanced ')' in selector 'a=b)'"),
    ("a in ()", "empty value set in 'a in ()'"),
    ("a in (x,)", "empty value set in 'a in (x,)'"),
    ("a>b", "'a>b': '>' needs an integer"),
    ("a<1.5", "'a<1.5': '<' needs an integer"),
    ("-a=b", "invalid label key '-a' in selector '-a=b'"),
    ("a=b c", "invalid label value 'b c' in selector 'a=b c'"),
    ("a in (x y)", "invalid label value 'x y' in selector 'a in (x y)'"),
    ("!", "invalid label key '' in selector '!'"),
    ("Bad.Prefix/a", "invalid label key 'Bad.Prefix/a' in selector 'Bad.Prefix/a'"),
    ("-a in (x)", "invalid label key '-a' in selector '-a in (x)'"),
    ("a in ((x))", "invalid label value '(x)' in selector 'a in ((x))'"),  # nested, yet balanced: the value is wrong
])
def test_a_wrong_selector_string_says_which_term(text, message):
    with pytest.raises(ValueError) as raised:
        parse_selector(text)
    assert str(raised.value) == message


@pytest.mark.parametrize("requirement, text", [
    (Requirement("a", "In", ("x",)), "a=x"),
    (Requirement("a", "NotIn", ("x",)), "a!=x"),
    (Requirement("a", "In", ("x", "y")), "a in (x,y)"),
    (Requirement("a", "NotIn", ("x", "y")), "a notin (x,y)"),
    (Requirement("a", "Exists"), "a"),
    (Requirement("a", "DoesNotExist"), "!a"),
    (Requirement("a", "Gt", ("1",)), "a > 1"),
    (Requirement("a", "Lt", ("1",)), "a < 1"),
])
def test_a_requirement_reads_back_as_the_string_form(requirement, text):
    assert str(requirement) == text
    assert parse_selector(text).requirements == (requirement,)


def test_a_selector_reads_back_as_its_terms_joined():
    assert str(Selector((Requirement("a", "In", ("x",)), Requirement("b", "Exists")))) == "a=x,b"
    assert str(Selector()) == ""


def test_a_label_selector_object_matches_labels_and_expressions():
    selector = selector_from_object({"matchLabels": {"region": "eu", "tier": 3},
                                     "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", 1]},
                                                          {"key": "zone", "operator": "DoesNotExist"}]})
    assert [(r.key, r.operator, r.values) for r in selector.requirements] == [
        ("region", "In", ("eu",)), ("tier", "In", ("3",)), ("gpu", "In", ("h100", "1")), ("zone", "DoesNotExist", ())]
    assert selector.matches(LABELS)
    assert not selector.matches({**LABELS, "zone": "a"})
    assert selector_from_object(None) == selector_from_object({}) == Selector()
    assert selector_from_object({"matchExpressions": [{"key": "a", "operator": "Exists"}]}).matches({"a": ""})
    with pytest.raises(ValueError, match="unknown selector operator 'Like'"):
        selector_from_object({"matchExpressions": [{"key": "a", "operator": "Like", "values": ["x"]}]})


@pytest.mark.parametrize("labels, message", [
    ({"region": "eu", "example.com/pool-1": "a.b_c-d", "a": ""}, None),
    ({"x" * 63: "y" * 63}, None),
    ({"x" * 64: "y"}, f"invalid label key {'x' * 64!r}"),
    ({"a": "y" * 64}, "invalid value"),
    ({"-a": "b"}, "invalid label key '-a'"),
    ({"a": "-b"}, "invalid value '-b' of label 'a'"),
    ({"a": "b-"}, "invalid value 'b-' of label 'a'"),
    ({"a": 1}, "invalid value 1 of label 'a'"),
    ({1: "a"}, "invalid label key 1"),
    ({"Example.com/a": "b"}, "invalid label key 'Example.com/a'"),
    ({"a" * 253 + "/k": "v"}, None),  # a prefix is a DNS subdomain: at most 253 characters
    ({"a" * 254 + "/k": "v"}, f"invalid label key {'a' * 254 + '/k'!r}"),
    ({"a..b/k": "v"}, "invalid label key 'a..b/k'"),  # each part of the subdomain starts and ends alphanumeric
    ({"a.-b/k": "v"}, "invalid label key 'a.-b/k'"),
    ({"k\n": "v"}, "invalid label key 'k\\n'"),  # the whole key, not a line of it
    ({"a": "b_"}, "invalid value 'b_' of label 'a': at most 63 characters, alphanumerics, '-', '_' or '.', "
                  "starting and ending with an alphanumeric"),
])
def test_labels_are_checked_as_the_api_server_checks_them(labels, message):
    if message is None:
        check_labels(labels)
        return
    with pytest.raises(ValueError) as raised:
        check_labels(labels)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("expr, field, requirement", [
    ({"key": "gpu", "operator": "In", "values": ["a", "b"]}, False, ("gpu", "In", ("a", "b"))),
    ({"key": "gpu", "operator": "Exists"}, False, ("gpu", "Exists", ())),
    ({"key": "gpu", "operator": "DoesNotExist", "values": []}, False, ("gpu", "DoesNotExist", ())),
    ({"key": "n", "operator": "Gt", "values": ["-3"]}, False, ("n", "Gt", ("-3",))),
    ({"key": NODE_NAME_FIELD, "operator": "NotIn", "values": ["n1"]}, True, (NODE_NAME_FIELD, "NotIn", ("n1",))),
])
def test_a_node_requirement_is_read_as_the_api_server_reads_it(expr, field, requirement):
    r = node_requirement(expr, field)
    assert (r.key, r.operator, r.values) == requirement


@pytest.mark.parametrize("expr, field, message", [
    ("gpu", False, "must be an object with key, operator and values"),
    ({"key": "gpu", "operator": "In", "values": "a"}, False, "values must be a list of strings, got 'a'"),
    ({"key": "gpu", "operator": "In", "values": [1]}, False, "values must be a list of strings, got [1]"),
    ({"key": "zone", "operator": "In", "values": ["n1"]}, True,
     "key 'zone' is not a node field; the only one is metadata.name"),
    ({"key": NODE_NAME_FIELD, "operator": "Exists"}, True,
     "operator 'Exists' is not one of In, NotIn for a node field"),
    ({"key": NODE_NAME_FIELD, "operator": "In", "values": ["a", "b"]}, True,
     "In on metadata.name takes exactly one value (use one term per node), got 2"),
    ({"key": NODE_NAME_FIELD, "operator": "In"}, True,
     "In on metadata.name takes exactly one value (use one term per node), got 0"),
    ({"key": "-gpu", "operator": "Exists"}, False, "key '-gpu' is not a label key"),
    ({"key": 7, "operator": "Exists"}, False, "key 7 is not a label key"),
    ({"key": "gpu", "operator": "Like"}, False,
     "operator 'Like' is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"),
    ({"key": "gpu", "operator": "NotIn"}, False, "NotIn needs at least one value"),
    ({"key": "gpu", "operator": "Exists", "values": ["a"]}, False, "Exists takes no values"),
    ({"key": "gpu", "operator": "Gt", "values": ["1", "2"]}, False,
     "Gt takes exactly one integer value, got ['1', '2']"),
    ({"key": "gpu", "operator": "Lt", "values": ["x"]}, False, "Lt takes exactly one integer value, got ['x']"),
])
def test_a_wrong_node_requirement_says_what_is_wrong(expr, field, message):
    with pytest.raises(ValueError) as raised:
        node_requirement(expr, field)
    assert str(raised.value) == message


def test_a_node_selector_term_ands_its_expressions_and_fields():
    term = node_selector_term({"matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                               "matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": ["n1"]}]})
    assert term.matches("n1", {"gpu": "h100"})
    assert not term.matches("n2", {"gpu": "h100"})
    assert not term.matches("n1", {})
    only_fields = node_selector_term({"matchFields": [{"key": NODE_NAME_FIELD, "operator": "NotIn", "values": ["n1"]}]})
    assert only_fields.matches("n2", {}) and not only_fields.matches("n1", {})
    assert node_selector_term({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}).matches("any", {"gpu": ""})
    assert not node_selector_term({}).matches("n1", {})  # a term with neither matches no node
    assert not node_selector_term({"matchExpressions": [], "matchFields": None}).matches("n1", {"gpu": "x"})


@pytest.mark.parametrize("term, error", [
    ("gpu", ": a node selector term must be an object with matchExpressions and/or matchFields"),
    ({"matchExpressions": {"key": "gpu"}}, "matchExpressions: must be a list, got dict"),
    ({"matchFields": "x"}, "matchFields: must be a list, got str"),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}, {"key": "gpu", "operator": "In"}]},
     "matchExpressions[1]: In needs at least one value"),
    ({"matchFields": [{"key": "zone", "operator": "In", "values": ["a"]}]},
     "matchFields[0]: key 'zone' is not a node field; the only one is metadata.name"),
])
def test_a_wrong_node_selector_term_names_its_entry(term, error):
    with pytest.raises(TermError) as raised:
        node_selector_term(term)
    assert str(raised.value) == error
    assert f"{raised.value.path}: {raised.value.message}" == error

