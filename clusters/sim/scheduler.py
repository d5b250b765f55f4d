"""The simulated kube-scheduler: pending pods bound to nodes in arrival order, by resources, node selectors and
affinity, taints, and JobSet's exclusive topology; a pod that fits nowhere is marked Unschedulable with the
kube-scheduler's words."""

from __future__ import annotations

import json
from collections import Counter

from typing import Any

from clusters.rules.dra import DeviceDemand
from clusters.sim.claims import DeviceIndex, demand_of, make_claims
from clusters.sim.clock import rfc3339
from clusters.sim.fit import repelling_taint, selects
from clusters.sim.objects import EXCLUSIVE, JOB_KEY, TERMINAL, condition, node_allocatable
from clusters.sim.requests import pod_requests
from clusters.sim.resources import NODES, PODS


class Scheduler:
    """A part of `Controller`, whose `__init__` sets the state it reads."""

    def schedule(self, now: float) -> None:
        if not self.unbound:
            return
        if self._usable is None:
            self._usable = sorted((n for n in self.store.items(NODES.key)
                                   if _ready(n) and not n["spec"].get("unschedulable")),
                                  key=lambda n: n["metadata"]["name"])
        nodes = self._usable
        total = len(self.alloc)
        topology: _Topology | None = None  # built only when exclusive placement is in play
        devices: DeviceIndex | None = None  # built only when a pod has claims
        failed: dict[str, str] = {}
        for ident in list(self.unbound):
            pod = self.store.get(PODS.key, *ident)
            if pod is None or pod["spec"].get("nodeName") or pod.get("status", {}).get("phase") != "Pending" \
                    or pod["metadata"].get("deletionTimestamp"):
                self.unbound.pop(ident, None)
                continue
            if topology is None and (self.exclusive_active or EXCLUSIVE in (pod["metadata"].get("annotations") or {})):
                topology = _Topology(self.store)
            signature = None if topology is not None else _signature(pod)
            if signature is not None and signature in failed:
                self._unschedulable(pod, failed[signature], now)
                continue
            demand, why = demand_of(self.store, pod)
            if why:
                self._unschedulable(pod, why, now)
                continue
            if demand is not None and devices is None:
                devices = DeviceIndex(self.store)
            node, why, allocation = self._pick(pod, nodes, topology, total, demand, devices)
            if node is None:
                if signature is not None:
                    failed[signature] = why
                self._unschedulable(pod, why, now)
                continue
            self.unbound.pop(ident, None)
            if topology is not None:
                topology.place(pod, node)
            if allocation is not None:
                make_claims(self.cluster, self.store, pod, allocation)
            self._start_pod({**pod, "spec": {**pod["spec"], "nodeName": node["metadata"]["name"]}}, node, now)

    def _pick(self, pod: dict, nodes: list[dict], topology: "_Topology | None", total: int,
              demand: DeviceDemand | None = None, devices: DeviceIndex | None = None) -> tuple[dict | None, str, Any]:
        spec = pod["spec"]
        requests = pod_requests(spec)
        tolerations = spec.get("tolerations") or ()
        reasons: Counter = Counter()
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            name = node["metadata"]["name"]
            if not selects(spec, node):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            taint = repelling_taint(node, tolerations)
            if taint is not None:
                reasons[f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"] += 1
                continue
            alloc, used = self.alloc.get(name) or node_allocatable(node), self.used.get(name) or {}
            short = [r for r, amount in requests.items() if used.get(r, 0) + amount > alloc.get(r, 0)]
            if short:
                for r in short:
                    reasons["Too many pods" if r == "pods" else f"Insufficient {r}"] += 1
                continue
            conflict = topology.conflict(pod, labels) if topology is not None else ""
            if conflict:
                reasons[conflict] += 1
                continue
            allocation = None
            if demand is not None:
                allocation = devices.allocate(name, demand)
                if allocation is None:
                    reasons["cannot allocate all claims"] += 1
                    continue
            return node, "", allocation
        unusable = total - len(nodes)
        if unusable > 0:
            reasons["node(s) were unschedulable or not ready"] += unusable
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        return None, f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available.", None

    def _unschedulable(self, pod: dict, message: str, now: float) -> None:
        conds = pod.get("status", {}).get("conditions") or []
        current = condition(conds, "PodScheduled")
        if current and current.get("message") == message:
            return
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                "lastProbeTime": None, "lastTransitionTime": rfc3339(now)}
        self.cluster.write(PODS, {**pod, "status": {**pod.get("status", {}), "conditions": [cond]}})


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions") or ())


class _Topology:
    """Who holds which exclusive-topology domain, for the JobSet exclusive placement rule:
    a child Job's pods share one domain, and no other Job's pods may enter it (both directions,
    as the pod affinity/anti-affinity the JobSet webhook injects behave)."""

    def __init__(self, store) -> None:
        self.nodes = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in store.items(NODES.key)}
        self.exclusive: dict[str, dict[str, str]] = {}  # topology key -> domain -> job key
        self.job_domain: dict[tuple[str, str], str] = {}  # (topology key, job key) -> domain
        self.occupants: dict[tuple[str, str], set[str]] = {}  # (topology key, domain) -> job keys
        self.indexed: set[str] = set()
        self.pods = [p for p in store.items(PODS.key) if p["spec"].get("nodeName")
                     and p.get("status", {}).get("phase") not in TERMINAL
                     and JOB_KEY in (p["metadata"].get("labels") or {})]
        for pod in self.pods:
            key = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE)
            if key:
                self._claim(pod, key)

    def _index(self, key: str) -> None:
        if key in self.indexed:
            return
        self.indexed.add(key)
        for pod in self.pods:
            domain = self.nodes.get(pod["spec"]["nodeName"], {}).get(key)
            if domain is not None:
                self.occupants.setdefault((key, domain), set()).add(pod["metadata"]["labels"][JOB_KEY])

    def _claim(self, pod: dict, key: str) -> None:
        self._index(key)
        domain = self.nodes.get(pod["spec"]["nodeName"], {}).get(key)
        if domain is not None:
            job = pod["metadata"]["labels"][JOB_KEY]
            self.exclusive.setdefault(key, {})[domain] = job
            self.job_domain[(key, job)] = domain

    def conflict(self, pod: dict, labels: dict) -> str:
        job = (pod["metadata"].get("labels") or {}).get(JOB_KEY)
        key = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE)
        if key:
            domain = labels.get(key)
            if domain is None:
                return f"node(s) didn't have the exclusive topology label {key}"
            mine = self.job_domain.get((key, job))
            if mine is not None and mine != domain:
                return "node(s) didn't match pod affinity rules"
            self._index(key)
            if self.occupants.get((key, domain), set()) - {job}:
                return "node(s) didn't match pod anti-affinity rules"
            return ""
        if job:
            for topo, domains in self.exclusive.items():
                owner = domains.get(labels.get(topo, "\0"))
                if owner is not None and owner != job:
                    return "node(s) didn't satisfy existing pods anti-affinity rules"
        return ""

    def place(self, pod: dict, node: dict) -> None:
        labels = pod["metadata"].get("labels") or {}
        if JOB_KEY not in labels:
            return
        pod = {**pod, "spec": {**pod["spec"], "nodeName": node["metadata"]["name"]}}
        self.pods.append(pod)
        node_labels = node["metadata"].get("labels") or {}
        for key in self.indexed:
            if key in node_labels:
                self.occupants.setdefault((key, node_labels[key]), set()).add(labels[JOB_KEY])
        key = (pod["metadata"].get("annotations") or {}).get(EXCLUSIVE)
        if key:
            self._claim(pod, key)


def _signature(pod: dict) -> str:
    """Pods that ask for the same thing fit or fail alike: try each kind once per pass."""
    spec = pod["spec"]
    return json.dumps([sorted(pod_requests(spec).items()), spec.get("nodeSelector"), spec.get("affinity"),
                       spec.get("tolerations"), JOB_KEY in (pod["metadata"].get("labels") or {})],
                      sort_keys=True, default=str)
