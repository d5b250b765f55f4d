"""The scheduler's I/O around the pure placement engine: read one snapshot, commit one cycle.

A cycle, after Kueue's scheduler:
1. `read_inventory`: clusters, nodes, HyperNodes, queues, live placements and pending jobs in one
   consistent read transaction (`Database.read`: REPEATABLE READ on PostgreSQL, a BEGIN on SQLite); the
   pending rows (`PendingJobs`), the clusters' nodes and the live placements (`KeptClusters`) kept since the
   last cycle are brought up to date, not read again.
2. `broker.engine.placement.schedule`: decisions over that snapshot, no I/O.
3. `commit_cycle`: the decisions a slice of jobs per transaction, in the order the cycle made them
   (`commit_decisions`, in a `Database.write`: a new leader's first cycle admits thousands, and one
   transaction held the write lock from every submission meanwhile); then the waiting jobs' reasons that
   changed (`write_reasons`), a slice per transaction.

Two guards make a cycle safe to crash or to race. Each slice's commit holds the scheduler's write lock
and checks a fence (the newest placement id it read, then the one the slice before left): if another
scheduler committed placements since, that slice and the rest are dropped, since the snapshot no longer
holds. And each job is admitted by a conditional UPDATE (still Queued, not cancelled): a job that was
placed or cancelled meanwhile gets none of its placements inserted. A job's placements, its admission,
the placements it preempts and its events are in one slice: a crash leaves the job either admitted
with all of them or Queued with none, and the next cycle places it once.

`read` is phase 1 (with `kept_clusters` and `pending`, the two halves of the snapshot kept between cycles),
`commit` phase 3, `records` what they hand each other, `dry_run` the engine's answer for one JobSet. The rest of
the broker imports them from here.
"""

from broker.store.scheduling.commit import RULE_WORDS, commit_cycle, write_reasons
from broker.store.scheduling.dry_run import dry_run_manifest, probe
from broker.store.scheduling.kept_clusters import NODES_BETWEEN_PAUSES, KeptClusters
from broker.store.scheduling.pending import PendingJobs
from broker.store.scheduling.read import has_pending, read_clusters, read_inventory
from broker.store.scheduling.records import (CommitOutcome, Inventory, engine_config, reasons_digest,
                                             stored_reasons_digest)

__all__ = ["NODES_BETWEEN_PAUSES", "RULE_WORDS", "CommitOutcome", "Inventory", "KeptClusters", "PendingJobs",
           "commit_cycle", "dry_run_manifest", "probe", "engine_config", "has_pending", "read_clusters", "read_inventory",
           "reasons_digest", "stored_reasons_digest", "write_reasons"]
