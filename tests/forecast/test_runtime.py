"""A job's expected runtime: the rules in their order, each a named case."""

from __future__ import annotations

import pytest

from broker.engine.forecast import Runtime, declared_runtime, deadline, expected_runtime, learned, parse_duration, trusted

H = 3600.0


@pytest.mark.parametrize("case, known, runtime", [
    ("a declaration", dict(declared=2 * H), Runtime(2 * H, "declared")),
    ("a declaration, trusted, beats what was learned", dict(declared=2 * H, learnt=3 * H), Runtime(2 * H, "declared")),
    ("a tenant whose declarations ran over: what was learned wins when longer",
     dict(declared=2 * H, learnt=3 * H, declarations_trusted=False), Runtime(3 * H, "learned")),
    ("... and not when shorter", dict(declared=2 * H, learnt=H, declarations_trusted=False),
     Runtime(2 * H, "declared")),
    ("what was learned, within the Jobs' deadline", dict(learnt=3 * H, bound=2 * H), Runtime(2 * H, "learned")),
    ("the Jobs' deadline alone", dict(bound=2 * H), Runtime(2 * H, "deadline")),
    ("the queue's default", dict(queue_default=5 * H), Runtime(5 * H, "queue default")),
    ("the broker's default", dict(), Runtime(H, "default")),
], ids=lambda value: value if isinstance(value, str) else "")
def test_the_expected_runtime_comes_from_what_is_known_best_first(case, known, runtime):
    arguments = dict(declared=None, bound=None, learnt=None, queue_default=None, default=H) | known
    assert expected_runtime(**arguments) == runtime


def test_what_is_learned_is_a_high_quantile_of_the_recent_runtimes():
    assert learned([100.0, 200.0]) is None  # too few to say
    assert learned([float(s) for s in range(1, 11)]) == 9.0  # the 90th percentile, nearest rank
    assert learned([1000.0] * 5 + [1.0] * 30) == 1000.0  # only the 20 most recent (newest first) count


def test_a_tenant_is_trusted_while_few_of_its_declarations_ran_over():
    assert trusted([(100.0, 110.0)] * 10)  # within 20 % over
    assert trusted([(100.0, 200.0)] * 2 + [(100.0, 90.0)] * 8)  # 2 of 10 ran over
    assert not trusted([(100.0, 200.0)] * 3 + [(100.0, 90.0)] * 7)
    assert trusted([])


def test_declarations_and_deadlines_are_read_from_the_manifest():
    def jobset(annotation=None, deadlines=()):
        return {"metadata": {"annotations": {} if annotation is None else {
            "archipelago.io/expected-runtime": annotation}},
                "spec": {"replicatedJobs": [{"name": f"r{i}", "template": {"spec": {} if d is None else {
                    "activeDeadlineSeconds": d}}} for i, d in enumerate(deadlines)]}}
    assert declared_runtime(jobset("2h30m")) == 9000.0 and declared_runtime(jobset()) is None
    with pytest.raises(ValueError, match="write it as 90s, 45m, 2h30m or 1d"):
        declared_runtime(jobset("two hours"))
    with pytest.raises(ValueError, match="must be a positive duration"):
        declared_runtime(jobset("0s"))
    assert deadline(jobset(deadlines=(600, 900))) == 900.0
    assert deadline(jobset(deadlines=(600, None))) is None  # one of its Jobs may run for ever
    assert parse_duration("1d") == 86400.0 and parse_duration(90) == 90.0
