"""The simulated kubelet: pods bound to a node start (or fail to pull their image), run for their simulated duration
and end, succeeded or failed as the JobSet's knobs say."""

from __future__ import annotations

import fnmatch
from typing import Iterable

from clusters.sim.clock import rfc3339
from clusters.rules.durations import parse_duration
from clusters.sim.objects import DURATION, FAIL, FAIL_ATTEMPTS, JOBSET_NAME, RESTART_ATTEMPT, RJOB_NAME, TERMINAL
from clusters.sim.resources import JOBSETS, PODS


class Kubelet:
    """A part of `Controller`, whose `__init__` sets the state it reads."""

    def terminating_pod(self, pod: dict, until: float) -> None:
        """A deleted pod's grace period: it goes at `until` (the `terminated` timer)."""
        self._timer(until, "terminated", pod)

    def _owner_jobset(self, pod: dict) -> dict | None:
        name = (pod["metadata"].get("labels") or {}).get(JOBSET_NAME)
        return self.store.get(JOBSETS.key, pod["metadata"]["namespace"], name) if name else None

    def _knob(self, pod: dict, key: str) -> str | None:
        value = (pod["metadata"].get("annotations") or {}).get(key)
        if value is None:
            js = self._owner_jobset(pod)
            value = (js["metadata"].get("annotations") or {}).get(key) if js else None
        return value

    def _duration(self, pod: dict) -> float:
        value = self._knob(pod, DURATION)
        try:
            return parse_duration(value) if value is not None else self.cluster.default_duration
        except ValueError:
            return self.cluster.default_duration

    def _should_fail(self, pod: dict) -> bool:
        value = self._knob(pod, FAIL)
        if not value:
            return False
        labels = pod["metadata"].get("labels") or {}
        targets = {t.strip() for t in value.split(",")}
        if not ({"true", "*"} & targets or labels.get(RJOB_NAME) in targets):
            return False
        attempts = self._knob(pod, FAIL_ATTEMPTS)
        if attempts is not None and attempts.isdigit():
            return int(labels.get(RESTART_ATTEMPT, "0")) < int(attempts)
        return True

    def _start_pod(self, pod: dict, node: dict, now: float) -> None:
        ts = rfc3339(now)
        image = self._unpullable(pod)
        if image:
            self._pull_fails(pod, image, ts)
            return
        addresses = node.get("status", {}).get("addresses") or []
        host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")
        self.cluster.pod_ip_seq += 1
        seq = self.cluster.pod_ip_seq
        pod_ip = f"10.{64 + (seq >> 16) % 64}.{(seq >> 8) % 256}.{seq % 256}"
        conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
                 for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
        statuses = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": True,
                     "started": True, "restartCount": 0, "containerID": f"sim://{pod['metadata']['uid'][:8]}-{i}",
                     "state": {"running": {"startedAt": ts}}, "lastState": {}}
                    for i, c in enumerate(pod["spec"].get("containers") or ())]
        status = {**pod.get("status", {}), "phase": "Running", "conditions": conds, "hostIP": host_ip,
                  "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": ts,
                  "containerStatuses": statuses}
        status.pop("reason", None)
        status.pop("message", None)
        started = self.cluster.write(PODS, {**pod, "status": status})
        self._timer(now + self._duration(pod), "pod", started)

    def _unpullable(self, pod: dict) -> str | None:
        spec = pod["spec"]
        return next((c.get("image", "") for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ()))
                     if any(fnmatch.fnmatchcase(c.get("image", ""), p) for p in self.cluster.unpullable_images)), None)

    def _pull_fails(self, pod: dict, image: str, ts: str) -> None:
        """Bound to its node, holding its resources, and never started: the kubelet backs off pulling."""
        message = f'Back-off pulling image "{image}"'
        if any((s.get("state") or {}).get("waiting", {}).get("message") == message
               for s in pod.get("status", {}).get("containerStatuses") or ()):
            return
        conds = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
                 *({"type": t, "status": "False", "reason": "ContainersNotReady", "lastProbeTime": None,
                    "lastTransitionTime": ts} for t in ("Ready", "ContainersReady"))]
        statuses = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": False,
                     "started": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": message}}}
                    for c in pod["spec"].get("containers") or ()]
        self.cluster.write(PODS, {**pod, "status": {**pod.get("status", {}), "phase": "Pending", "conditions": conds,
                                                    "containerStatuses": statuses, "startTime": ts}})

    def _finish_pod(self, pod: dict, succeeded: bool, now: float, reason: str = "", message: str = "") -> None:
        ts = rfc3339(now)
        status = dict(pod.get("status", {}))
        started = status.get("startTime", ts)
        status["phase"] = "Succeeded" if succeeded else "Failed"
        status["conditions"] = [
            {**c, "status": "False", "reason": "PodCompleted", "lastTransitionTime": ts}
            if c.get("type") in ("Ready", "ContainersReady") else c for c in status.get("conditions") or ()]
        status["containerStatuses"] = [
            {**s, "ready": False, "started": False,
             "state": {"terminated": {"exitCode": 0 if succeeded else 1, "reason": "Completed" if succeeded else "Error",
                                      "startedAt": started, "finishedAt": ts,
                                      "containerID": s.get("containerID", "")}}}
            for s in status.get("containerStatuses") or ()]
        if reason:
            status["reason"], status["message"] = reason, message or reason
        self.cluster.write(PODS, {**pod, "status": status})

    def _fail_pods_on(self, node_name: str, reason: str, message: str) -> None:
        for pod in list(self.store.items(PODS.key)):
            if pod["spec"].get("nodeName") == node_name and pod.get("status", {}).get("phase") not in TERMINAL:
                self._finish_pod(pod, False, self.cluster.clock.now(), reason, message)

    def finish_pods(self, pods: Iterable[dict], succeeded: bool) -> int:
        """End running pods now (a test's shortcut through time)."""
        count = 0
        for pod in pods:
            if pod.get("status", {}).get("phase") == "Running":
                self._finish_pod(pod, succeeded, self.cluster.clock.now())
                count += 1
        return count
