"""One scheduling cycle over one snapshot, in numbered phases (after Kueue's scheduler).

1. Take the pending jobs by queue, each queue in its order (priority, then submission, then id: `Backlog`).
2. Repeatedly take the head of the queue that should go next (`_queue_key`).
3. Decide that job: quota, then filters and scores per cluster, then bind the gang to nodes.
   If it does not fit: preempt where the queue allows it, else, once it has waited too long, hold
   for it the nodes of the HyperNode where it would fit soonest (`_hold`), and record per cluster
   why it waits.
4. Every decision is applied to the snapshot at once, so the next one sees it; a hold takes the
   free capacity of its nodes, so no later decision of the cycle uses them.

Holds last one cycle: they are recomputed by the next one, where the long-waiting jobs go first.
`schedule` leaves the snapshot holding the cycle's decisions (not its holds); `dry_run` leaves it unchanged.

Inadmissible jobs (after Kueue's inadmissible lists): a job that did not fit and got no hold, that may
preempt nothing beyond its own queue, does not fit later either while capacity, quota and the nodes
held for others only shrink. `schedule` reports them; given back as `Parked` with what changed since
(the caller's part to know: clusters that changed or got capacity back, tenants whose queues hold
less, the nodes held at the end of that cycle), each keeps its turn in its queue but is decided again
only if a change concerns it, or it may take a hold now (`_still_inadmissible`); a decision that places
and holds nothing changes nothing, so the cycle decides as if it had decided them all. A parked job's turn
costs a dictionary lookup: between two changes, jobs of one kind (shape, queue, priority) share their verdict
and where their key falls against the other queues' next one, jobs of one demand in a queue share their standing
(the key but for submission and id, `_standing`) until a decision changes what their tenant holds, and the turns
of a queue's parked jobs follow one another without the heap while no other queue's head comes first
(`_pop_past_parked`).

The modules: `config` (what the settings control), `run` (`_Cycle`, its state and the loop of phases 1-3),
`order` (phase 2), `decide` (phase 3), `preempt`, `hold`, `parked` (the parts of `_Cycle` named above), and
`placements` (a placement from a fit). The rest of the broker imports from here.
"""

from broker.engine.placement.cycle.config import DEFAULT_FILTERS, DEFAULT_SCORE_WEIGHTS, Config
from broker.engine.placement.cycle.order import JOBS_BETWEEN_PAUSES
from broker.engine.placement.cycle.run import dry_run, schedule

__all__ = ["DEFAULT_FILTERS", "DEFAULT_SCORE_WEIGHTS", "JOBS_BETWEEN_PAUSES", "Config", "dry_run", "schedule"]
