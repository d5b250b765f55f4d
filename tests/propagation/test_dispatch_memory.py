"""Dispatching a split job costs memory in proportion to the job, not to its parts × its size: the job's
manifest is read once per dispatcher pass and each part renders only itself."""

from __future__ import annotations

import tracemalloc

from sqlalchemy import func, select

from broker.process.testing import jobset
from broker.store.db.models import Placement

MB = 1024 * 1024


def test_a_split_job_at_the_part_limit_and_near_the_size_limit_dispatches_in_bounded_memory(federation, settings):
    parts = settings.max_split_parts
    manifest = jobset("wide", split=True, parts=[(f"p{i}", 1, 1, 0) for i in range(parts)])
    payload = ["x" * 1024] * ((settings.max_jobset_bytes - 64 * 1024) // parts // 1040)
    for rjob in manifest["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"]["containers"][0]["args"] = payload
    job = federation.submit(manifest)
    federation.scheduler.run_once()
    with federation.db.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Placement).where(Placement.job_id == job)) == parts

    tracemalloc.start()
    try:
        federation.dispatcher.run_once()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert len(federation.copies(job)) == parts  # every part went out in this one pass
    assert peak < 100 * MB, f"dispatching took {peak / MB:.0f} MB at its peak"
