"""Every check of the Pod Security Standards' baseline and restricted levels, as the Kubernetes documentation lists
them, by name, with the words a real API server's PodSecurity admission gives."""

from __future__ import annotations


import pytest

from clusters.rules.pod_security import refusal, template_refusal, violations


def restricted_pod() -> dict:
    """A pod every level admits."""
    return {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "train", "image": "trainer:1",
                            "securityContext": {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}


def _set(pod: dict, path: str, value) -> dict:
    """`path` like `containers.0.securityContext.privileged`; missing objects are made."""
    *parents, last = path.split(".")
    node = pod
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return pod


# (name, level, change to the restricted pod, the words after 'violates PodSecurity "<level>:latest": ')
CASES = [
    # baseline
    ("host-process", "baseline", {"securityContext.windowsOptions": {"hostProcess": True}},
     "hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)"),
    ("host-namespaces", "baseline", {"hostNetwork": True, "hostPID": True, "hostIPC": True},
     "host namespaces (hostNetwork=true, hostPID=true, hostIPC=true)"),
    ("privileged", "baseline", {"containers.0.securityContext.privileged": True},
     'privileged (container "train" must not set securityContext.privileged=true)'),
    ("capabilities", "baseline", {"containers.0.securityContext.capabilities.add": ["NET_ADMIN", "CHOWN"]},
     'non-default capabilities (container "train" must not include "NET_ADMIN" in '
     "securityContext.capabilities.add)"),
    ("host-path", "baseline", {"volumes.0": {"name": "root", "hostPath": {"path": "/"}}},
     'hostPath volumes (volume "root")'),
    ("host-ports", "baseline", {"containers.0.ports": [{"containerPort": 80, "hostPort": 8080}]},
     'hostPort (container "train" uses hostPort 8080)'),
    ("apparmor", "baseline", {"metadata.annotations": {
        "container.apparmor.security.beta.kubernetes.io/train": "unconfined"}},
     'forbidden AppArmor profile (container.apparmor.security.beta.kubernetes.io/train="unconfined")'),
    ("selinux", "baseline", {"containers.0.securityContext.seLinuxOptions": {"type": "spc_t", "user": "root"}},
     'seLinuxOptions (container "train" set forbidden securityContext.seLinuxOptions: type "spc_t"; user "root")'),
    ("proc-mount", "baseline", {"containers.0.securityContext.procMount": "Unmasked"},
     'procMount (container "train" must not set securityContext.procMount to "Unmasked")'),
    ("seccomp", "baseline", {"securityContext.seccompProfile.type": "Unconfined"},
     'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")'),
    ("sysctls", "baseline", {"securityContext.sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                                        {"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
     "forbidden sysctls (kernel.msgmax)"),
    # restricted
    ("volume-types", "restricted", {"volumes.0": {"name": "shared", "nfs": {"server": "nfs", "path": "/"}}},
     'restricted volume types (volume "shared" uses restricted volume type "nfs")'),
    ("privilege-escalation", "restricted", {"containers.0.securityContext.allowPrivilegeEscalation": True},
     'allowPrivilegeEscalation != false (container "train" must set securityContext.allowPrivilegeEscalation=false)'),
    ("running-as-non-root", "restricted", {"securityContext.runAsNonRoot": False},
     "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)"),
    ("running-as-non-root-user", "restricted", {"containers.0.securityContext.runAsUser": 0},
     'runAsUser=0 (container "train" must not set runAsUser=0)'),
    ("seccomp-restricted", "restricted", {"securityContext.seccompProfile": None},
     'seccompProfile (pod or container "train" must set securityContext.seccompProfile.type to "RuntimeDefault" '
     'or "Localhost")'),
    ("capabilities-restricted", "restricted", {"containers.0.securityContext.capabilities": {"add": ["CHOWN"]}},
     'unrestricted capabilities (container "train" must set securityContext.capabilities.drop=["ALL"]; '
     'container "train" must not include "CHOWN" in securityContext.capabilities.add)'),
]


def _pod(changes: dict) -> tuple[dict, dict]:
    pod = restricted_pod()
    metadata: dict = {}
    for path, value in changes.items():
        if path.startswith("metadata."):
            _set(metadata, path.removeprefix("metadata."), value)
        elif value is None:
            pod["securityContext"].pop(path.split(".")[-1])
        else:
            _set(pod, path, value)
    return metadata, pod


@pytest.mark.parametrize("name,level,changes,words", CASES, ids=[c[0] for c in CASES])
def test_each_check_refuses_in_the_api_servers_words(name, level, changes, words):
    metadata, pod = _pod(changes)
    assert refusal(level, metadata, pod) == f'violates PodSecurity "{level}:latest": {words}'
    assert refusal("privileged", metadata, pod) is None


@pytest.mark.parametrize("name,level,changes,words", [c for c in CASES if c[1] == "restricted"],
                         ids=[c[0] for c in CASES if c[1] == "restricted"])
def test_restricted_checks_are_not_baselines(name, level, changes, words):
    metadata, pod = _pod(changes)
    assert refusal("baseline", metadata, pod) is None


def test_a_compliant_pod_passes_every_level():
    for level in ("privileged", "baseline", "restricted"):
        assert violations(level, {}, restricted_pod()) == []


def test_a_plain_pod_is_baseline_but_not_restricted():
    pod = {"containers": [{"name": "train", "image": "trainer:1"}]}
    assert refusal("baseline", {}, pod) is None
    assert [reason for reason, _ in violations("restricted", {}, pod)] == [
        "allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true", "seccompProfile"]


def test_several_findings_join_in_check_order_and_name_every_container():
    pod = {"hostPID": True, "containers": [
        {"name": "a", "securityContext": {"privileged": True}, "ports": [{"hostPort": 80}, {"hostPort": 443}]},
        {"name": "b", "securityContext": {"privileged": True}, "ports": [{"hostPort": 80}]}],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "etc", "hostPath": {"path": "/etc"}}]}
    assert refusal("baseline", {}, pod) == (
        'violates PodSecurity "baseline:latest": host namespaces (hostPID=true), '
        'hostPath volumes (volumes "root", "etc"), hostPort (containers "a", "b" use hostPorts 80, 443), '
        'privileged (containers "a", "b" must not set securityContext.privileged=true)')


def test_restricted_volume_types_replace_the_baseline_host_path_check():
    _, pod = _pod({"volumes.0": {"name": "root", "hostPath": {"path": "/"}}})
    assert [reason for reason, _ in violations("restricted", {}, pod)] == ["restricted volume types"]


def test_init_containers_are_held_too():
    pod = restricted_pod()
    pod["initContainers"] = [{"name": "fetch", "securityContext": {"privileged": True}}]
    assert 'container "fetch" must not set securityContext.privileged=true' in refusal("baseline", {}, pod)


def _jobset(pod_spec: dict) -> dict:
    return {"spec": {"replicatedJobs": [
        {"name": "ok", "template": {"spec": {"template": {"spec": restricted_pod()}}}},
        {"name": "bad", "template": {"spec": {"template": {"spec": pod_spec}}}}]}}


def test_a_jobsets_refusal_names_the_template():
    path, words = template_refusal(_jobset({"containers": [{"name": "train", "securityContext": {"privileged": True}}]}),
                                   "baseline")
    assert path == "spec.replicatedJobs[1].template.spec.template.spec"
    assert words.startswith('violates PodSecurity "baseline:latest": privileged (container "train"')


def test_a_toleration_of_every_taint_is_privileged_only():
    pod = {"containers": [{"name": "train"}], "tolerations": [{"key": "gpu", "operator": "Exists"},
                                                              {"operator": "Exists"}]}
    path, words = template_refusal(_jobset(pod), "baseline")
    assert path == "spec.replicatedJobs[1].template.spec.template.spec.tolerations[1]"
    assert "control-plane nodes" in words
    assert template_refusal(_jobset(pod), "privileged") is None
    pod["tolerations"].pop()
    assert template_refusal(_jobset(pod), "baseline") is None
