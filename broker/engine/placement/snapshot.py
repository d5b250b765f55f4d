"""The mutable view of the inventory one cycle works on: free capacity per node and per HyperNode.

Built once per cycle from immutable records; every decision updates it (and `dry_run` undoes its
own), so the next decision sees what the previous one took. The indexes exist so that a decision
never scans every HyperNode: per cluster and tier, HyperNodes are kept sorted by free GPU and by
free cpu, so "the smallest HyperNode of tier t with at least g free GPUs" is one bisection, and
"no HyperNode of tier t has g free GPUs" is one look at the end of a list.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from broker.engine.jobset import POD_SLOT, PartSpec
from broker.engine.placement.model import GPU, Cluster, Node, Queue, Resources, RunningPlacement, Tenant, no_pause
from clusters.rules.pod_security import is_control_plane
from clusters.rules.quantity import add_into
from clusters.rules.taints import untolerated

INDEXED_RESOURCES = (GPU, "cpu")
_UNBOUNDED_ROOM = 1 << 30  # pods that fit a node when they request nothing
PLACEMENTS_BETWEEN_PAUSES = 16  # ~1.5 ms of a snapshot's accounting of the running placements


def primary_resource(demand: Resources) -> str:
    """The resource a request is indexed by: GPUs when it asks for any, else cpu."""
    return GPU if demand.get(GPU) else "cpu"


def fits(free: Mapping[str, int], demand: Resources) -> bool:
    return all(free.get(r, 0) >= q for r, q in demand.items())


class HyperNodeState:
    """One HyperNode's live totals over every node below it."""

    __slots__ = ("name", "tier", "nodes", "free", "allocatable")

    def __init__(self, name: str, tier: int, nodes: list[int]):
        self.name, self.tier, self.nodes = name, tier, nodes
        self.free: dict[str, int] = {}
        self.allocatable: dict[str, int] = {}

    def copy(self) -> HyperNodeState:
        twin = HyperNodeState(self.name, self.tier, self.nodes)
        twin.free, twin.allocatable = dict(self.free), self.allocatable
        return twin


@dataclass(slots=True)
class Binding:
    """Pods assigned to nodes (by position in the cluster) for one placement, not yet applied."""

    usage: dict[int, dict[str, int]]  # node -> resources taken
    pods: dict[int, dict[str, int]]  # node -> ReplicatedJob name -> pods
    domains: list[tuple[str, str]]  # exclusive-topology domains taken, (label key, value)


@dataclass(slots=True)
class Fit:
    hypernode: HyperNodeState | None  # None: the pods span HyperNodes (soft topology only)
    binding: Binding | None  # None for an estimate made on HyperNode totals alone


class ClusterIndex:
    """A cluster's nodes and HyperNodes with their free capacity, and the searches over them."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.name = cluster.name
        self.nodes = sorted((_with_pod_limit(n) for n in cluster.nodes), key=lambda n: n.name)
        self.position = {n.name: i for i, n in enumerate(self.nodes)}
        # A cordoned or NotReady node takes no new pod: its capacity is free nowhere (cluster, HyperNodes).
        self.usable = [not n.unschedulable for n in self.nodes]
        self.usable_count = sum(self.usable)
        self.control_plane = [is_control_plane(n.labels) for n in self.nodes]  # only for parts that may use them
        self.free: list[dict[str, int]] = []
        self.free_total: dict[str, int] = {}
        self.allocatable_total: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            free = dict(node.allocatable)
            add_into(free, node.used, -1)
            self.free.append(free)
            if self.usable[i]:
                add_into(self.free_total, free)
            add_into(self.allocatable_total, node.allocatable)
        self.broker_pods = [0] * len(self.nodes)  # pods of placements per node (exclusive domains)
        self.locks = [0] * len(self.nodes)  # > 0: inside a domain another job holds exclusively
        self.version = 0  # grows with every `apply`: what was found here at one version holds while it lasts
        self._eligible: dict[tuple, bytearray] = {}
        self._eligible_counts: dict[tuple, int] = {}
        self._domains: dict[str, dict[str, list[int]]] = {}
        self._holding: dict[tuple, list[str]] = {}  # `holding`
        self._build_hypernodes()

    def copy(self) -> ClusterIndex:
        """A twin to take and give back capacity in, this one untouched: what depends on the nodes alone (their
        order, the HyperNode tree, eligibility and domains found so far) is shared, the free amounts are its own."""
        twin = object.__new__(ClusterIndex)
        for name in _SHARED:
            setattr(twin, name, getattr(self, name))
        twin.free, twin.free_total = [dict(free) for free in self.free], dict(self.free_total)
        twin.broker_pods, twin.locks, twin.version = list(self.broker_pods), list(self.locks), 0
        twin.hypernodes = {name: state.copy() for name, state in self.hypernodes.items()}
        twin.node_hypernodes = [[twin.hypernodes[h.name] for h in states] for states in self.node_hypernodes]
        twin.by_tier = {tier: {r: list(entries) for r, entries in by.items()} for tier, by in self.by_tier.items()}
        return twin

    # -- HyperNode tree and its tier indexes -------------------------------------------------
    def _build_hypernodes(self) -> None:
        specs = {h.name: h for h in self.cluster.hypernodes}
        children: dict[str, set[str]] = {name: set(h.children) for name, h in specs.items()}
        for h in specs.values():
            if h.parent in children:
                children[h.parent].add(h.name)
        members: dict[str, list[int]] = {}

        def collect(name: str, path: frozenset[str]) -> list[int]:
            if name not in members:
                nodes = {self.position[n] for n in specs[name].nodes if n in self.position}
                for child in children[name]:
                    if child in specs and child not in path:  # a cycle in bad data must not hang us
                        nodes.update(collect(child, path | {name}))
                members[name] = sorted(nodes)
            return members[name]

        self.hypernodes: dict[str, HyperNodeState] = {}
        self.node_hypernodes: list[list[HyperNodeState]] = [[] for _ in self.nodes]
        for name in sorted(specs):
            state = HyperNodeState(name, specs[name].tier, collect(name, frozenset()))
            for i in state.nodes:
                add_into(state.allocatable, self.nodes[i].allocatable)
                if self.usable[i]:
                    add_into(state.free, self.free[i])
                self.node_hypernodes[i].append(state)
            self.hypernodes[name] = state
        self.tiers = sorted({h.tier for h in self.hypernodes.values()})
        self.by_tier: dict[int, dict[str, list[tuple[int, str]]]] = {
            t: {r: [] for r in INDEXED_RESOURCES} for t in self.tiers}
        for state in self.hypernodes.values():
            self._index(state)

    def _index(self, state: HyperNodeState) -> None:
        for resource, entries in self.by_tier[state.tier].items():
            insort(entries, (state.free.get(resource, 0), state.name))

    def _unindex(self, state: HyperNodeState) -> None:
        for resource, entries in self.by_tier[state.tier].items():
            del entries[bisect_left(entries, (state.free.get(resource, 0), state.name))]

    def largest_free(self, resource: str, bound: int | None) -> int:
        """The most `resource` any single HyperNode of tier ≤ bound has free (0 if none)."""
        best = 0
        for tier in self.tiers:
            if bound is not None and tier > bound:
                break
            entries = self.by_tier[tier][resource]
            if entries:
                best = max(best, entries[-1][0])
        return best

    # -- node eligibility and exclusive domains ----------------------------------------------
    def eligible(self, part: PartSpec) -> bytearray:
        """Which nodes a pod of this part may use: schedulable, not a control-plane node unless the part may use
        those, taints tolerated, node selector and required node affinity matched (the pod slots left are counted
        as a resource, `pods`)."""
        key = eligibility_key(part)
        if key not in self._eligible:
            choosy = bool(part.node_selector) or part.node_affinity is not None
            self._eligible[key] = bytearray(
                self.usable[i] and not (self.control_plane[i] and not part.control_plane)
                and not (n.taints and untolerated(n.taints, part.tolerations))
                and not (choosy and not part.may_run_on(n.name, n.labels))
                for i, n in enumerate(self.nodes))
            self._eligible_counts[key] = sum(self._eligible[key])
        return self._eligible[key]

    def holding(self, demand: Resources, bound: int | None) -> list[HyperNodeState]:
        """The HyperNodes of tier ≤ `bound` (any, if None) whose allocatable could hold `demand`: a hold's candidates
        (`Holding._hold`), found once per demand — allocatable does not change while the cluster is the same."""
        key = (tuple(sorted(demand.items())), bound)
        names = self._holding.get(key)
        if names is None:
            names = self._holding[key] = [h.name for h in self.hypernodes.values()
                                          if (bound is None or h.tier <= bound) and fits(h.allocatable, demand)]
        return [self.hypernodes[name] for name in names]

    def eligible_count(self, part: PartSpec) -> int:
        """How many nodes a pod of this part may use (`eligible`)."""
        key = eligibility_key(part)
        if key not in self._eligible_counts:
            self.eligible(part)
        return self._eligible_counts[key]

    def _eligible_hold(self, parts: Sequence[PartSpec], state: HyperNodeState) -> bool:
        """Could the nodes of `state` each part may use hold its pods by their free totals? (When every
        schedulable node of the cluster is one it may use, the HyperNode's own totals said so already.)"""
        for part in parts:
            if self.eligible_count(part) == self.usable_count:
                continue
            eligible, free = self.eligible(part), {}
            for i in state.nodes:
                if eligible[i] and not self.locks[i]:
                    add_into(free, self.free[i])
            if not fits(free, part.requests):
                return False
        return True

    def domains(self, label: str) -> dict[str, list[int]]:
        """Nodes grouped by their value of `label` (nodes without it belong to no domain)."""
        if label not in self._domains:
            groups: dict[str, list[int]] = {}
            for i, node in enumerate(self.nodes):
                if label in node.labels:
                    groups.setdefault(node.labels[label], []).append(i)
            self._domains[label] = groups
        return self._domains[label]

    def free_domains(self, part: PartSpec, nodes: Iterable[int] | None = None) -> list[tuple[int, str, list[int]]]:
        """Exclusive domains no placement touches, with room for `parallelism` pods: (room, value, nodes)."""
        groups = self.domains(part.exclusive_topology)
        allowed = None if nodes is None else set(nodes)
        eligible = self.eligible(part)
        found = []
        for value, members in groups.items():
            if any(self.broker_pods[i] or self.locks[i] for i in members):
                continue
            usable = [i for i in members if eligible[i] and (allowed is None or i in allowed)]
            room = sum(self.room(i, part.pod_requests, None) for i in usable)
            if room >= part.parallelism:
                found.append((room, value, usable))
        found.sort(key=lambda d: (d[0], d[1]))
        return found

    # -- node-level binding -------------------------------------------------------------------
    def room(self, node: int, pod: Resources, taken: Mapping[int, Mapping[str, int]] | None) -> int:
        """How many pods of this shape still fit on the node."""
        free, held = self.free[node], (taken or {}).get(node, {})
        room = _UNBOUNDED_ROOM
        for resource, amount in pod.items():
            available = free.get(resource, 0) - held.get(resource, 0)
            if available < amount:
                return 0
            room = min(room, available // amount)
        return room

    def scarcest(self, part: PartSpec) -> str | None:
        """What a reason names when the part's pods fit nowhere: the resource that limits the most nodes it may use
        and that could hold one of its pods when idle (on each, the one with room for the fewest of its pods; GPUs
        first on a tie, its pod slots aside). Nodes without a GPU say nothing of a GPU pod's lack of CPUs; when no
        node could ever hold one, their allocatable amounts say what is too small."""
        asked = [(resource, amount) for resource, amount in part.pod_requests.items()
                 if amount > 0 and resource != POD_SLOT]
        may = [i for i, eligible in enumerate(self.eligible(part)) if eligible]
        able = [i for i in may if all(self.nodes[i].allocatable.get(r, 0) >= amount for r, amount in asked)]
        amounts = self.free if able else [node.allocatable for node in self.nodes]
        votes: dict[str, int] = {}
        for i in able or may:
            have = amounts[i]
            limit = min(asked, key=lambda ra: (have.get(ra[0], 0) // ra[1], ra[0] != GPU, ra[0]), default=None)
            if limit is not None:
                votes[limit[0]] = votes.get(limit[0], 0) + 1
        return min(votes, key=lambda resource: (-votes[resource], resource != GPU, resource), default=None)

    def _fill(self, part: PartSpec, count: int, nodes: Sequence[int], binding: Binding) -> bool:
        """Best-fit `count` pods onto nodes: the smallest node that takes all the rest, else fill the largest."""
        pod = part.pod_requests
        rooms = []  # (room, -position): sorted, so ties between equal rooms break deterministically
        for i in nodes:
            room = self.room(i, pod, binding.usage)
            if room:
                rooms.append((room, -i))
        if sum(r for r, _ in rooms) < count:
            return False
        rooms.sort()
        remaining = count
        while remaining:
            at = bisect_left(rooms, (remaining, -len(self.nodes)))
            room, negative = rooms.pop(at) if at < len(rooms) else rooms.pop()
            node, pods = -negative, min(room, remaining)
            used = binding.usage.setdefault(node, {})
            for resource, amount in pod.items():
                used[resource] = used.get(resource, 0) + amount * pods
            per_part = binding.pods.setdefault(node, {})
            per_part[part.name] = per_part.get(part.name, 0) + pods
            remaining -= pods
        return True

    def bind(self, parts: Sequence[PartSpec], nodes: Sequence[int]) -> Binding | None:
        """Assign every pod of every part to a node among `nodes`, or None if the gang does not fit."""
        binding = Binding({}, {}, [])
        for part in sorted(parts, key=_pod_size_descending):
            eligible = self.eligible(part)
            usable = [i for i in nodes if eligible[i] and not self.locks[i]]
            if part.exclusive_topology:
                taken = set(binding.usage)
                domains = [d for d in self.free_domains(part, usable) if not taken.intersection(d[2])]
                if len(domains) < part.replicas:
                    return None
                for _, value, members in domains[:part.replicas]:
                    if not self._fill(part, part.parallelism, members, binding):
                        return None
                    binding.domains.append((part.exclusive_topology, value))
            elif not self._fill(part, part.pods, usable, binding):
                return None
        return binding

    # -- the topology search ------------------------------------------------------------------
    def search(self, parts: Sequence[PartSpec], demand: Resources, bound: int | None,
               max_candidates: int, bind: bool) -> Fit | None:
        """The tightest place for the gang: lowest tier first, smallest HyperNode that fits first.

        Stops at the first tier that fits. With `bind=False` it only checks HyperNode totals (an
        optimistic estimate for scoring); with `bind=True` it assigns every pod to a node. At most
        `max_candidates` HyperNodes per tier are tried, so a fragmented tier costs a bounded time; one
        whose nodes the pods may not use (taints, selector, affinity) or that lacks room on them is
        skipped without counting. With no bound (soft), a gang no HyperNode holds may still span the cluster.
        """
        resource = primary_resource(demand)
        need = demand.get(resource, 0)
        for tier in self.tiers:
            if bound is not None and tier > bound:
                break
            entries = self.by_tier[tier][resource]
            if not entries or entries[-1][0] < need:
                continue
            tried = 0
            for at in range(bisect_left(entries, (need, "")), len(entries)):
                state = self.hypernodes[entries[at][1]]
                if fits(state.free, demand):
                    if not bind:
                        return Fit(state, None)
                    binding = self.bind(parts, state.nodes)
                    if binding is not None:
                        return Fit(state, binding)
                    if not self._eligible_hold(parts, state):
                        continue
                tried += 1
                if tried >= max_candidates:
                    break
        if bound is not None or not fits(self.free_total, demand):
            return None
        if not bind:
            return Fit(None, None)
        binding = self.bind(parts, range(len(self.nodes)))
        return Fit(None, binding) if binding is not None else None

    # -- applying and undoing decisions -------------------------------------------------------
    def apply(self, usage: Mapping[int, Resources], pods: Mapping[int, int],
              domains: Iterable[tuple[str, str]], sign: int) -> None:
        """Take (sign=+1) or give back (sign=-1) the pods of one placement (on a cordoned or NotReady
        node they change only the node's own free amounts: the totals never counted it)."""
        self.version += 1
        touched = {h.name: h for i in usage if self.usable[i] for h in self.node_hypernodes[i]}
        for state in touched.values():
            self._unindex(state)
        for i, amounts in usage.items():
            add_into(self.free[i], amounts, -sign)
            if self.usable[i]:
                add_into(self.free_total, amounts, -sign)
                for state in self.node_hypernodes[i]:
                    add_into(state.free, amounts, -sign)
        for state in touched.values():
            self._index(state)
        for i, count in pods.items():
            self.broker_pods[i] += sign * count
        for label, value in domains:
            for i in self.domains(label).get(value, ()):
                self.locks[i] += sign


_UNCONSTRAINED = ((), (), None, False)
# What `ClusterIndex.copy` shares: set once from the cluster's nodes, or caches of what follows from them alone.
_SHARED = ("cluster", "name", "nodes", "position", "usable", "usable_count", "control_plane", "allocatable_total",
           "_eligible", "_eligible_counts", "_domains", "_holding", "tiers")


def eligibility_key(part: PartSpec) -> tuple:
    """What decides which nodes a part's pods may use; parts alike share `ClusterIndex.eligible`."""
    if not part.tolerations and not part.node_selector and part.node_affinity is None and not part.control_plane:
        return _UNCONSTRAINED
    return (tuple(tuple(sorted(t.items())) for t in part.tolerations), tuple(sorted(part.node_selector.items())),
            part.node_affinity, part.control_plane)


def _with_pod_limit(node: Node) -> Node:
    """Every kubelet states how many pods its node takes (allocatable `pods`); a node record without
    it (a hand-made inventory) is taken to have no limit."""
    if POD_SLOT in node.allocatable:
        return node
    return Node(node.name, {**node.allocatable, POD_SLOT: _UNBOUNDED_ROOM * 1000}, node.used, node.labels, node.taints,
                node.unschedulable)


def _pod_size_descending(part: PartSpec) -> tuple:
    pod = part.pod_requests
    return (-pod.get(GPU, 0), -pod.get("cpu", 0), -pod.get("memory", 0), part.name)


@dataclass(slots=True)
class QueueState:
    queue: Queue
    usage: dict[str, int]


class Snapshot:
    """Clusters, queues and running placements of one cycle, as mutable indexes.

    `running` must list every placement that holds capacity (every live one, being deleted too);
    their node usage is added on top of `Node.used`, and the charged ones' to their queues (and only
    those may be preempted). `now` is on the clock of `submitted_at`.
    Queue names are unique across tenants.
    """

    def __init__(self, clusters: Iterable[Cluster], queues: Iterable[Queue],
                 tenants: Iterable[Tenant] = (), running: Iterable[RunningPlacement] = (), now: float = 0.0,
                 built: dict[str, ClusterIndex] | None = None, pause: Callable[[], None] = no_pause):
        """`built`: the clusters' indexes as a previous snapshot built them, before any placement; this one works on
        copies of those whose `Cluster` is the same object, builds the others, and leaves it with what it built.
        `pause`: called between clusters and every `PLACEMENTS_BETWEEN_PAUSES` placements (`schedule`'s `pause`)."""
        self.now = now
        self.clusters = {}
        for cluster in sorted(clusters, key=lambda c: c.name):
            pause()
            if built is None:
                self.clusters[cluster.name] = ClusterIndex(cluster)
                continue
            if cluster.name not in built or built[cluster.name].cluster is not cluster:
                built[cluster.name] = ClusterIndex(cluster)
            self.clusters[cluster.name] = built[cluster.name].copy()
        if built is not None:
            for gone in built.keys() - self.clusters.keys():
                del built[gone]
        self.tenants = {t.name: t for t in tenants}
        self.queues = {q.name: QueueState(q, {}) for q in sorted(queues, key=lambda q: q.name)}
        self.cohorts: dict[str, list[QueueState]] = {}
        self.tenant_usage: dict[str, dict[str, int]] = {}  # tenant -> what its queues use, summed
        for state in self.queues.values():
            self.cohorts.setdefault(state.queue.tenant, []).append(state)
            self.tenant_usage.setdefault(state.queue.tenant, {})
        self.totals: dict[str, int] = {}
        for index in self.clusters.values():
            if index.cluster.state == "Ready":
                add_into(self.totals, index.allocatable_total)
        self.running: dict[str, list[RunningPlacement]] = {}
        for count, placement in enumerate(running):
            if not count % PLACEMENTS_BETWEEN_PAUSES:
                pause()
            if placement.charged:
                self.running.setdefault(placement.job_id, []).append(placement)
            self.occupy(placement.cluster, placement.queue if placement.charged else None, placement.node_usage,
                        placement.node_pods, placement.exclusive_topology, +1)

    def tenant_weight(self, name: str) -> float:
        tenant = self.tenants.get(name)
        return tenant.weight if tenant else 1.0

    def occupy(self, cluster: str, queue: str | None, node_usage: Mapping[str, Resources],
               node_pods: Mapping[str, int], exclusive_label: str | None, sign: int) -> None:
        """Account a placement's pods (sign=+1) or remove them (sign=-1): nodes, HyperNodes, queue (if any)."""
        if queue in self.queues:
            state = self.queues[queue]
            tenant = self.tenant_usage[state.queue.tenant]
            for amounts in node_usage.values():
                add_into(state.usage, amounts, sign)
                add_into(tenant, amounts, sign)
        index = self.clusters.get(cluster)
        if index is None:
            return
        usage = {index.position[n]: u for n, u in node_usage.items() if n in index.position}
        pods = {index.position[n]: c for n, c in node_pods.items() if n in index.position}
        domains = []
        if exclusive_label:
            domains = sorted({(exclusive_label, index.nodes[i].labels[exclusive_label])
                              for i in pods if exclusive_label in index.nodes[i].labels})
        index.apply(usage, pods, domains, sign)
