"""`archipelago.io/startup-timeout`: how long a JobSet's pods may take to start, read and checked at
submission (broker/engine/jobset.py)."""

from __future__ import annotations

import pytest

from broker.engine.jobset import STARTUP_TIMEOUT_ANNOTATION, JobSetError, parse_jobset, startup_timeout
from tests.placement.fixtures import manifest


@pytest.mark.parametrize("text, seconds", [
    ("600", 600), ("600s", 600), ("10m", 600), ("1h", 3600), (" 2m ", 120), ("9999999s", 9999999),
    ("0", None), ("05m", None), ("10M", None), ("1.5h", None), ("-1", None), ("1d", None), ("10 m", None),
    ("", None), ("12345678", None), ("m", None),
])
def test_a_startup_timeout_reads_in_seconds_minutes_or_hours(text, seconds):
    assert startup_timeout(text) == seconds


def test_a_job_whose_startup_timeout_is_no_duration_is_refused_naming_the_annotation():
    assert parse_jobset(manifest(annotations={STARTUP_TIMEOUT_ANNOTATION: "15m"})).name == "job"
    with pytest.raises(JobSetError) as refused:
        parse_jobset(manifest(annotations={STARTUP_TIMEOUT_ANNOTATION: "soon"}))
    assert refused.value.path == f"metadata.annotations[{STARTUP_TIMEOUT_ANNOTATION!r}]"
    assert refused.value.message == "'soon' must be a duration such as \"600s\", \"10m\" or \"1h\""
