"""The simulated JobSet controller (jobset.x-k8s.io/v1alpha2): child Jobs and the headless Service, startup and
success policies, failure policy restarts, suspend and resume, and the JobSet's status."""

from __future__ import annotations

import copy
import hashlib

from clusters.sim.clock import rfc3339
from clusters.sim.objects import (COORDINATOR, EXCLUSIVE, GLOBAL_REPLICAS, JOBSET_NAME, JOB_GLOBAL_INDEX, JOB_INDEX,
                                  JOB_KEY, RESTART_ATTEMPT, RJOB_NAME, RJOB_REPLICAS, condition, job_finished)
from clusters.sim.resources import JOBS, JOBSETS, SERVICES
from clusters.sim.validation import JOBSET_CONTROLLER


class JobSetController:
    """A part of `Controller`, whose `__init__` sets the state it reads."""

    def reconcile_jobset(self, js: dict, now: float) -> None:
        meta, spec = js["metadata"], js.get("spec", {})
        if meta.get("deletionTimestamp") or spec.get("managedBy", JOBSET_CONTROLLER) != JOBSET_CONTROLLER \
                or self._lagging(js, "jobset", now):
            return
        status = js.get("status") or {}
        new = dict(status)
        restarts = status.get("restarts", 0)
        jobs = self._children(js, JOBS.key)
        previous, active, succeeded, failed = [], [], [], []
        for job in jobs:
            attempt = int((job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT, "0"))
            state = job_finished(job)
            (previous if attempt < restarts else failed if state == "Failed"
             else succeeded if state == "Complete" else active).append(job)
        new["replicatedJobsStatus"] = self._rjob_statuses(spec, active, succeeded, failed)
        conditions = [dict(c) for c in status.get("conditions") or ()]
        ns = meta["namespace"]
        if _finished_conditions(conditions):
            for job in active:
                self.cluster.delete_object(JOBS, ns, job["metadata"]["name"], "Background")
            self._save_status(js, new, conditions, now)
            return
        for job in previous:
            self.cluster.delete_object(JOBS, ns, job["metadata"]["name"], "Background")
        if failed:
            self._failure_policy(js, new, conditions, failed, now)
        elif succeeded and self._success(spec, succeeded):
            _set_condition(conditions, "Completed", "True", "AllJobsCompleted", "jobset completed successfully", now)
            new["terminalState"] = "Completed"
        else:
            self._ensure_service(js)
            self._create_jobs(js, spec, new, conditions, jobs, previous, now)
            self._suspend_or_resume(js, spec, new, conditions, active, now)
        if _finished_conditions(conditions):
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is not None:
                self._timer(now + ttl, "ttl", js)
            for job in active:
                self.cluster.delete_object(JOBS, ns, job["metadata"]["name"], "Background")
        self._save_status(js, new, conditions, now)

    def _save_status(self, js: dict, status: dict, conditions: list[dict], now: float) -> None:
        if conditions:
            status["conditions"] = conditions
        if self.cluster.jobset_counts == "omitted":
            del status["replicatedJobsStatus"]
        elif self.cluster.jobset_counts == "lagging":
            self._lag_counts(js, status, now)
        if status != (js.get("status") or {}):
            self.cluster.write(JOBSETS, {**js, "status": status})

    def _lag_counts(self, js: dict, status: dict, now: float) -> None:
        """A new condition goes out with the counts shown before it; the counts follow a second later."""
        uid, before = js["metadata"]["uid"], js.get("status") or {}
        held = self.held_counts.get(uid)
        if held is None and status.get("conditions") != before.get("conditions"):
            held = self.held_counts[uid] = (now + 1, before.get("replicatedJobsStatus") or [])
            self._timer(held[0], "jobset", js)
        if held is not None and now < held[0]:
            status["replicatedJobsStatus"] = held[1]
        else:
            self.held_counts.pop(uid, None)

    @staticmethod
    def _rjob_statuses(spec: dict, active: list, succeeded: list, failed: list) -> list[dict]:
        counts = {r["name"]: {"name": r["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
                  for r in spec.get("replicatedJobs") or ()}
        for job in active:
            entry = counts.get((job["metadata"].get("labels") or {}).get(RJOB_NAME))
            if entry is None:
                continue
            jspec, jstatus = job.get("spec", {}), job.get("status", {})
            pods = jspec.get("parallelism", 1)
            if jspec.get("completions") is not None:
                pods = min(pods, jspec["completions"])
            if jstatus.get("succeeded", 0) + jstatus.get("ready", 0) >= pods:
                entry["ready"] += 1
            if jstatus.get("active", 0) > 0:
                entry["active"] += 1
            if jspec.get("suspend"):
                entry["suspended"] += 1
        for jobs, field in ((succeeded, "succeeded"), (failed, "failed")):
            for job in jobs:
                entry = counts.get((job["metadata"].get("labels") or {}).get(RJOB_NAME))
                if entry is not None:
                    entry[field] += 1
        return list(counts.values())

    @staticmethod
    def _success(spec: dict, succeeded: list[dict]) -> bool:
        policy = spec.get("successPolicy") or {"operator": "All"}
        targets = policy.get("targetReplicatedJobs") or [r["name"] for r in spec.get("replicatedJobs") or ()]
        matching = sum(1 for j in succeeded if (j["metadata"].get("labels") or {}).get(RJOB_NAME) in targets)
        if policy.get("operator") == "Any":
            return matching >= 1
        expected = sum(r.get("replicas", 1) for r in spec.get("replicatedJobs") or () if r["name"] in targets)
        return matching >= expected

    def _failure_policy(self, js: dict, status: dict, conditions: list[dict], failed: list[dict], now: float) -> None:
        policy = js["spec"].get("failurePolicy")
        if policy is None:
            _set_condition(conditions, "Failed", "True", "FailedJobs", "jobset failed due to one or more job failures", now)
            status["terminalState"] = "Failed"
            return
        first = min(failed, key=lambda j: _failed_at(j))
        rjob = (first["metadata"].get("labels") or {}).get(RJOB_NAME)
        reason = (condition(first.get("status", {}).get("conditions"), "Failed") or {}).get("reason", "")
        action = "RestartJobSet"
        for rule in policy.get("rules") or ():
            if rule.get("targetReplicatedJobs") and rjob not in rule["targetReplicatedJobs"]:
                continue
            if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
                continue
            action = rule["action"]
            break
        if action == "FailJobSet":
            _set_condition(conditions, "Failed", "True", "FailJobSetFailurePolicyAction",
                           "applying FailJobSet failure policy action", now)
            status["terminalState"] = "Failed"
            return
        counted = action in ("RestartJobSet", "RestartJob")
        if counted and status.get("restartsCountTowardsMax", 0) >= policy.get("maxRestarts", 0):
            _set_condition(conditions, "Failed", "True", "ReachedMaxRestarts",
                           "jobset failed due to reaching max number of restarts", now)
            status["terminalState"] = "Failed"
            return
        status["restarts"] = status.get("restarts", 0) + 1
        if counted:
            status["restartsCountTowardsMax"] = status.get("restartsCountTowardsMax", 0) + 1
        self.dirty_jobsets.add((js["metadata"]["namespace"], js["metadata"]["name"]))

    def _ensure_service(self, js: dict) -> None:
        network = js["spec"].get("network") or {}
        if not network.get("enableDNSHostnames"):
            return
        name = network.get("subdomain") or js["metadata"]["name"]
        ns = js["metadata"]["namespace"]
        if self.store.get(SERVICES.key, ns, name) is not None:
            return
        self.cluster.create_internal(SERVICES, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [_owner_ref(js)]},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "selector": {JOBSET_NAME: js["metadata"]["name"]},
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
                     "type": "ClusterIP", "ports": []}})

    def _create_jobs(self, js: dict, spec: dict, status: dict, conditions: list[dict], jobs: list[dict],
                     previous: list[dict], now: float) -> None:
        strategy = (spec.get("failurePolicy") or {}).get("restartStrategy")
        if previous and strategy == "BlockingRecreate":
            return
        stale = {id(j) for j in previous}
        existing = {j["metadata"]["name"] for j in jobs if id(j) not in stale}
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder" and not spec.get("suspend")
        rstatus = {s["name"]: s for s in status["replicatedJobsStatus"]}
        replicas = {r["name"]: r.get("replicas", 1) for r in spec.get("replicatedJobs") or ()}
        for global_base, rjob in _with_global_base(spec):
            current = rstatus.get(rjob["name"], {})
            if not all(_dependency_met(dep, replicas, rstatus) for dep in rjob.get("dependsOn") or ()):
                continue
            if in_order and current.get("ready", 0) == rjob.get("replicas", 1):
                continue
            for index in range(rjob.get("replicas", 1)):
                name = f"{js['metadata']['name']}-{rjob['name']}-{index}"
                if name not in existing:
                    self.cluster.create_internal(JOBS, self._construct_job(js, rjob, index, global_base + index))
            if in_order:
                _set_condition(conditions, "StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress",
                               "in order startup policy is in progress", now)
                return
        if in_order:
            _set_condition(conditions, "StartupPolicyCompleted", "True", "InOrderStartupPolicyCompleted",
                           "in order startup policy has completed", now)

    def _construct_job(self, js: dict, rjob: dict, index: int, global_index: int) -> dict:
        meta, spec = js["metadata"], js["spec"]
        name = f"{meta['name']}-{rjob['name']}-{index}"
        template = copy.deepcopy(rjob["template"])
        restarts = (js.get("status") or {}).get("restarts", 0)
        total = sum(r.get("replicas", 1) for r in spec["replicatedJobs"])
        tags = {JOBSET_NAME: meta["name"], RJOB_NAME: rjob["name"], RESTART_ATTEMPT: str(restarts),
                RJOB_REPLICAS: str(rjob.get("replicas", 1)), GLOBAL_REPLICAS: str(total), JOB_INDEX: str(index),
                JOB_KEY: hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
                JOB_GLOBAL_INDEX: str(global_index)}
        network = spec.get("network") or {}
        subdomain = network.get("subdomain") or meta["name"]
        coordinator = spec.get("coordinator")
        if coordinator:
            tags[COORDINATOR] = (f"{meta['name']}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
                                 f"{coordinator.get('podIndex', 0)}.{subdomain}")
        extra = {}
        for source in ((meta.get("annotations") or {}), (rjob["template"].get("metadata") or {}).get("annotations") or {}):
            if EXCLUSIVE in source:
                extra[EXCLUSIVE] = source[EXCLUSIVE]
        job_spec = template.get("spec") or {}
        pod = job_spec.setdefault("template", {})
        pmeta = pod.setdefault("metadata", {})
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **tags}
        pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **tags, **extra}
        if network.get("enableDNSHostnames"):
            pod.setdefault("spec", {})["subdomain"] = subdomain
        job_spec["suspend"] = bool(spec.get("suspend"))
        tmeta = template.get("metadata") or {}
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": meta["namespace"],
                             "labels": {**(tmeta.get("labels") or {}), **tags},
                             "annotations": {**(tmeta.get("annotations") or {}), **tags, **extra},
                             "ownerReferences": [_owner_ref(js)]},
                "spec": job_spec}

    def _suspend_or_resume(self, js: dict, spec: dict, status: dict, conditions: list[dict], active: list[dict],
                           now: float) -> None:
        if spec.get("suspend"):
            for job in active:
                if not job["spec"].get("suspend"):
                    self.cluster.write(JOBS, {**job, "spec": {**job["spec"], "suspend": True}}, bump=True)
            _set_condition(conditions, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
            return
        templates = {r["name"]: (r["template"]["spec"].get("template") or {}) for r in spec.get("replicatedJobs") or ()}
        for job in active:
            if not job["spec"].get("suspend"):
                continue
            source = templates.get((job["metadata"].get("labels") or {}).get(RJOB_NAME), {})
            pod = job["spec"].get("template") or {}
            pmeta, pspec = dict(pod.get("metadata") or {}), dict(pod.get("spec") or {})
            smeta, sspec = source.get("metadata") or {}, source.get("spec") or {}
            pmeta["labels"] = {**(pmeta.get("labels") or {}), **(smeta.get("labels") or {})}
            pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **(smeta.get("annotations") or {})}
            for field in ("nodeSelector",):
                if sspec.get(field):
                    pspec[field] = {**(pspec.get(field) or {}), **sspec[field]}
            for field in ("tolerations", "schedulingGates"):
                for item in sspec.get(field) or ():
                    pspec.setdefault(field, [])
                    if item not in pspec[field]:
                        pspec[field] = [*pspec[field], item]
            if sspec.get("affinity"):
                pspec["affinity"] = sspec["affinity"]
            job_status = {k: v for k, v in job.get("status", {}).items() if k != "startTime"}
            self.cluster.write(JOBS, {**job, "spec": {**job["spec"], "suspend": False,
                                                     "template": {**pod, "metadata": pmeta, "spec": pspec}},
                                      "status": job_status}, bump=True)
        if condition(conditions, "Suspended"):
            _set_condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed", now)


def _owner_ref(js: dict) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": js["metadata"]["name"],
            "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _failed_at(job: dict) -> str:
    return (condition(job.get("status", {}).get("conditions"), "Failed") or {}).get("lastTransitionTime", "")


def _finished_conditions(conditions: list[dict]) -> bool:
    return any(c.get("type") in ("Completed", "Failed") and c.get("status") == "True" for c in conditions)


def _set_condition(conditions: list[dict], type_: str, status: str, reason: str, message: str, now: float) -> None:
    """The real controller's rule: change on status flip, append only when True, and
    StartupPolicyInProgress/Completed exclude each other."""
    exclusive = {"StartupPolicyInProgress": "StartupPolicyCompleted", "StartupPolicyCompleted": "StartupPolicyInProgress"}
    found = False
    for i, cond in enumerate(conditions):
        if cond["type"] == type_:
            found = True
            if cond["status"] != status:
                conditions[i] = {"type": type_, "status": status, "reason": reason, "message": message,
                                 "lastTransitionTime": rfc3339(now)}
        elif exclusive.get(type_) == cond["type"] and cond["status"] == "True" and status == "True":
            conditions[i] = {**cond, "status": "False"}
    if not found and status == "True":
        conditions.append({"type": type_, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": rfc3339(now)})


def _with_global_base(spec: dict):
    base = 0
    for rjob in spec.get("replicatedJobs") or ():
        yield base, rjob
        base += rjob.get("replicas", 1)


def _dependency_met(dep: dict, replicas: dict[str, int], statuses: dict[str, dict]) -> bool:
    status = statuses.get(dep["name"], {})
    wanted = replicas.get(dep["name"], 0)
    if dep.get("status") == "Complete":
        return status.get("succeeded", 0) >= wanted
    return status.get("ready", 0) + status.get("succeeded", 0) >= wanted
