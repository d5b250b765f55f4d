"""Kubernetes' Pod Security Standards, as the PodSecurity admission plugin checks a pod spec and words a refusal.

A tenant's pods are held to its level before they are placed, so that a JobSet a member would refuse never is; the
words are the API server's ("violates PodSecurity "baseline:latest": privileged (container "train" must not set
securityContext.privileged=true)"). The checks and their order are the plugin's (`k8s.io/pod-security-admission/policy`,
sorted by check id; a restricted check replaces the baseline check it tightens).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

LEVELS = ("privileged", "baseline", "restricted")  # each stricter than the one before
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
VERSION = "latest"

# Nodes a pod below privileged may never be placed on, whatever it tolerates.
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")

_BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
_SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                           "net.ipv4.ip_unprivileged_port_start",
                           "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                           "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                           "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
_RESTRICTED_VOLUME_TYPES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                      "persistentVolumeClaim", "projected", "secret", "image"})
_VOLUME_FIELDS = frozenset({"name"})
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def level_index(level: str) -> int:
    return LEVELS.index(level)


def namespace_labels(level: str) -> dict[str, str]:
    """The labels that make a member's PodSecurity admission enforce `level` in a namespace."""
    return {ENFORCE_LABEL: level, ENFORCE_VERSION_LABEL: VERSION}


def is_control_plane(labels: Mapping[str, Any]) -> bool:
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def _dict(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _containers(spec: Mapping) -> Iterator[tuple[str, Mapping]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in _list(spec.get(field)):
            container = _dict(container)
            yield str(container.get("name", "")), container


def _security(container: Mapping) -> Mapping:
    return _dict(container.get("securityContext"))


def _quoted(names: list[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


def _containers_named(names: list[str]) -> str:
    return f'{_plural(len(names), "container", "containers")} {_quoted(names)}'


def _who(pod: bool, names: list[str]) -> str:
    """"pod", "container "a"", "pod and containers "a", "b""."""
    parts = (["pod"] if pod else []) + ([_containers_named(names)] if names else [])
    return " and ".join(parts)


Finding = tuple[str, str]  # (reason, detail), as the plugin words them
Check = Callable[[Mapping, Mapping], "Finding | None"]


def _allow_privilege_escalation(metadata: Mapping, spec: Mapping) -> Finding | None:
    bad = [name for name, c in _containers(spec) if _security(c).get("allowPrivilegeEscalation") is not False]
    if bad:
        return ("allowPrivilegeEscalation != false",
                f"{_containers_named(bad)} must set securityContext.allowPrivilegeEscalation=false")
    return None


def _app_armor(metadata: Mapping, spec: Mapping) -> Finding | None:
    bad = []
    for key, value in sorted(_dict(metadata.get("annotations")).items()):
        if key.startswith(_APPARMOR_ANNOTATION) and value != "runtime/default" \
                and not str(value).startswith("localhost/"):
            bad.append(f'{key}="{value}"')
    if _dict(_dict(spec.get("securityContext")).get("appArmorProfile")).get("type") == "Unconfined":
        bad.append('pod must not set securityContext.appArmorProfile.type to "Unconfined"')
    for name, c in _containers(spec):
        if _dict(_security(c).get("appArmorProfile")).get("type") == "Unconfined":
            bad.append(f'container "{name}" must not set securityContext.appArmorProfile.type to "Unconfined"')
    if bad:
        return _plural(len(bad), "forbidden AppArmor profile", "forbidden AppArmor profiles"), ", ".join(bad)
    return None


def _added_capabilities(spec: Mapping, allowed: frozenset) -> tuple[list[str], list[str]]:
    names, capabilities = [], []
    for name, c in _containers(spec):
        added = [str(cap) for cap in _list(_dict(_security(c).get("capabilities")).get("add")) if cap not in allowed]
        if added:
            names.append(name)
            capabilities += [cap for cap in added if cap not in capabilities]
    return names, capabilities


def _capabilities_baseline(metadata: Mapping, spec: Mapping) -> Finding | None:
    names, capabilities = _added_capabilities(spec, _BASELINE_CAPABILITIES)
    if names:
        return ("non-default capabilities",
                f"{_containers_named(names)} must not include {_quoted(capabilities)} in "
                "securityContext.capabilities.add")
    return None


def _capabilities_restricted(metadata: Mapping, spec: Mapping) -> Finding | None:
    undropped = [name for name, c in _containers(spec)
                 if "ALL" not in _list(_dict(_security(c).get("capabilities")).get("drop"))]
    added, capabilities = _added_capabilities(spec, frozenset({"NET_BIND_SERVICE"}))
    details = []
    if undropped:
        details.append(f'{_containers_named(undropped)} must set securityContext.capabilities.drop=["ALL"]')
    if added:
        details.append(f"{_containers_named(added)} must not include {_quoted(capabilities)} "
                       "in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _host_namespaces(metadata: Mapping, spec: Mapping) -> Finding | None:
    set_ = [f"{field}=true" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field) is True]
    return ("host namespaces", ", ".join(set_)) if set_ else None


def _volumes(spec: Mapping) -> Iterator[tuple[str, Mapping]]:
    for volume in _list(spec.get("volumes")):
        volume = _dict(volume)
        yield str(volume.get("name", "")), volume


def _host_path_volumes(metadata: Mapping, spec: Mapping) -> Finding | None:
    bad = [name for name, volume in _volumes(spec) if volume.get("hostPath") is not None]
    if bad:
        return "hostPath volumes", f'{_plural(len(bad), "volume", "volumes")} {_quoted(bad)}'
    return None


def _host_ports(metadata: Mapping, spec: Mapping) -> Finding | None:
    names, ports = [], []
    for name, c in _containers(spec):
        used = [str(p.get("hostPort")) for p in map(_dict, _list(c.get("ports"))) if p.get("hostPort") not in (None, 0)]
        if used:
            names.append(name)
            ports += [port for port in used if port not in ports]
    if names:
        return "hostPort", (f'{_containers_named(names)} {_plural(len(names), "uses", "use")} '
                            f'{_plural(len(ports), "hostPort", "hostPorts")} {", ".join(ports)}')
    return None


def _privileged(metadata: Mapping, spec: Mapping) -> Finding | None:
    bad = [name for name, c in _containers(spec) if _security(c).get("privileged") is True]
    if bad:
        return "privileged", f"{_containers_named(bad)} must not set securityContext.privileged=true"
    return None


def _proc_mount(metadata: Mapping, spec: Mapping) -> Finding | None:
    names, values = [], []
    for name, c in _containers(spec):
        value = _security(c).get("procMount")
        if value not in (None, "Default"):
            names.append(name)
            values += [str(value)] if str(value) not in values else []
    if names:
        return "procMount", f"{_containers_named(names)} must not set securityContext.procMount to {_quoted(values)}"
    return None


def _restricted_volumes(metadata: Mapping, spec: Mapping) -> Finding | None:
    names, kinds = [], []
    for name, volume in _volumes(spec):
        bad = [kind for kind in volume if kind not in _VOLUME_FIELDS and kind not in _RESTRICTED_VOLUME_TYPES]
        if bad:
            names.append(name)
            kinds += [kind for kind in bad if kind not in kinds]
    if names:
        return "restricted volume types", (
            f'{_plural(len(names), "volume", "volumes")} {_quoted(names)} {_plural(len(names), "uses", "use")} '
            f'restricted volume {_plural(len(kinds), "type", "types")} {_quoted(kinds)}')
    return None


def _pod_and_containers(spec: Mapping, field: str, bad: Callable[[Any], bool]) -> tuple[bool, list[str], list[str]]:
    """(the pod sets a bad value, containers that set one, containers that leave it to a pod that does not set it)."""
    pod_value = _dict(spec.get("securityContext")).get(field)
    pod_bad = pod_value is not None and bad(pod_value)
    setting, unset = [], []
    for name, c in _containers(spec):
        value = _security(c).get(field)
        if value is not None and bad(value):
            setting.append(name)
        elif value is None and pod_value is None:
            unset.append(name)
    return pod_bad, setting, unset


def _run_as_non_root(metadata: Mapping, spec: Mapping) -> Finding | None:
    pod_bad, setting, unset = _pod_and_containers(spec, "runAsNonRoot", lambda v: v is not True)
    details = []
    if pod_bad:
        details.append("pod must not set securityContext.runAsNonRoot=false")
    if setting:
        details.append(f"{_containers_named(setting)} must not set securityContext.runAsNonRoot=false")
    if unset:
        details.append(f"pod or {_containers_named(unset)} must set securityContext.runAsNonRoot=true")
    return ("runAsNonRoot != true", "; ".join(details)) if details else None


def _run_as_user(metadata: Mapping, spec: Mapping) -> Finding | None:
    pod_bad, setting, _ = _pod_and_containers(spec, "runAsUser", lambda v: v == 0)
    details = (["pod must not set runAsUser=0"] if pod_bad else []) + \
              ([f"{_containers_named(setting)} must not set runAsUser=0"] if setting else [])
    return ("runAsUser=0", "; ".join(details)) if details else None


def _selinux_values(options: Any) -> list[str]:
    options = _dict(options)
    bad = []
    if str(options.get("type") or "") not in _SELINUX_TYPES:
        bad.append(f'type "{options.get("type")}"')
    bad += [f'{field} "{options[field]}"' for field in ("user", "role") if options.get(field)]
    return bad


def _selinux_options(metadata: Mapping, spec: Mapping) -> Finding | None:
    values = _selinux_values(_dict(spec.get("securityContext")).get("seLinuxOptions"))
    pod_bad = bool(values)
    names = []
    for name, c in _containers(spec):
        found = _selinux_values(_security(c).get("seLinuxOptions"))
        if found:
            names.append(name)
            values += [value for value in found if value not in values]
    if values:
        return "seLinuxOptions", (f"{_who(pod_bad, names)} set forbidden securityContext.seLinuxOptions: "
                                  f"{'; '.join(values)}")
    return None


def _seccomp_type(context: Mapping) -> Any:
    return _dict(context.get("seccompProfile")).get("type")


def _seccomp_baseline(metadata: Mapping, spec: Mapping) -> Finding | None:
    details = []
    if _seccomp_type(_dict(spec.get("securityContext"))) == "Unconfined":
        details.append('pod must not set securityContext.seccompProfile.type to "Unconfined"')
    bad = [name for name, c in _containers(spec) if _seccomp_type(_security(c)) == "Unconfined"]
    if bad:
        details.append(f'{_containers_named(bad)} must not set securityContext.seccompProfile.type to "Unconfined"')
    return ("seccompProfile", "; ".join(details)) if details else None


def _seccomp_restricted(metadata: Mapping, spec: Mapping) -> Finding | None:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = _seccomp_type(_dict(spec.get("securityContext")))
    details = []
    if pod_type is not None and pod_type not in allowed:
        details.append(f'pod must not set securityContext.seccompProfile.type to "{pod_type}"')
    bad, kinds, unset = [], [], []
    for name, c in _containers(spec):
        kind = _seccomp_type(_security(c))
        if kind is not None and kind not in allowed:
            bad.append(name)
            kinds += [str(kind)] if str(kind) not in kinds else []
        elif kind is None and pod_type is None:
            unset.append(name)
    if bad:
        details.append(f"{_containers_named(bad)} must not set securityContext.seccompProfile.type to {_quoted(kinds)}")
    if unset:
        details.append(f'pod or {_containers_named(unset)} must set securityContext.seccompProfile.type to '
                       '"RuntimeDefault" or "Localhost"')
    return ("seccompProfile", "; ".join(details)) if details else None


def _sysctls(metadata: Mapping, spec: Mapping) -> Finding | None:
    bad = [str(_dict(s).get("name")) for s in _list(_dict(spec.get("securityContext")).get("sysctls"))
           if _dict(s).get("name") not in _SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def _host_process(metadata: Mapping, spec: Mapping) -> Finding | None:
    pod = _dict(_dict(spec.get("securityContext")).get("windowsOptions")).get("hostProcess") is True
    names = [name for name, c in _containers(spec)
             if _dict(_security(c).get("windowsOptions")).get("hostProcess") is True]
    if pod or names:
        return "hostProcess", f"{_who(pod, names)} must not set securityContext.windowsOptions.hostProcess=true"
    return None


# By check id, as the plugin orders them: (id, level, check, the baseline check it replaces).
CHECKS: tuple[tuple[str, str, Check, str | None], ...] = (
    ("allowPrivilegeEscalation", "restricted", _allow_privilege_escalation, None),
    ("appArmorProfile", "baseline", _app_armor, None),
    ("capabilities_baseline", "baseline", _capabilities_baseline, None),
    ("capabilities_restricted", "restricted", _capabilities_restricted, "capabilities_baseline"),
    ("hostNamespaces", "baseline", _host_namespaces, None),
    ("hostPathVolumes", "baseline", _host_path_volumes, None),
    ("hostPorts", "baseline", _host_ports, None),
    ("privileged", "baseline", _privileged, None),
    ("procMount", "baseline", _proc_mount, None),
    ("restrictedVolumes", "restricted", _restricted_volumes, "hostPathVolumes"),
    ("runAsNonRoot", "restricted", _run_as_non_root, None),
    ("runAsUser", "restricted", _run_as_user, None),
    ("seLinuxOptions", "baseline", _selinux_options, None),
    ("seccompProfile_baseline", "baseline", _seccomp_baseline, None),
    ("seccompProfile_restricted", "restricted", _seccomp_restricted, "seccompProfile_baseline"),
    ("sysctls", "baseline", _sysctls, None),
    ("windowsHostProcess", "baseline", _host_process, None),
)


def violations(level: str, metadata: Mapping, spec: Mapping) -> list[Finding]:
    """What `level` forbids in a pod (its metadata and spec), in the plugin's order; none at privileged."""
    wanted = [c for c in CHECKS if level_index(c[1]) <= level_index(level) and level != "privileged"]
    replaced = {c[3] for c in wanted if c[3]}
    findings = (check(_dict(metadata), _dict(spec)) for name, _, check, _ in wanted if name not in replaced)
    return [finding for finding in findings if finding]


def refusal(level: str, metadata: Mapping, spec: Mapping) -> str | None:
    """The API server's words for a pod `level` forbids, or None."""
    found = violations(level, metadata, spec)
    if not found:
        return None
    return f'violates PodSecurity "{level}:{VERSION}": ' + ", ".join(f"{reason} ({detail})" for reason, detail in found)


def tolerates_every_taint(spec: Mapping) -> int | None:
    """The index of a toleration of every taint (`operator: Exists` without a key), which would let a pod onto any
    node, control-plane nodes too; None if there is none."""
    for index, toleration in enumerate(_list(spec.get("tolerations"))):
        toleration = _dict(toleration)
        if not toleration.get("key") and toleration.get("operator") == "Exists":
            return index
    return None


def template_refusal(jobset: Mapping, level: str) -> tuple[str, str] | None:
    """(path, words) for the first pod template of a JobSet that `level` forbids, or None: the member's admission
    would refuse its pods, and a toleration of every taint would take them past the nodes `level` keeps them off."""
    for index, rjob in enumerate(_list(_dict(jobset.get("spec")).get("replicatedJobs"))):
        pod = _dict(_dict(_dict(_dict(rjob).get("template")).get("spec")).get("template"))
        path = f"spec.replicatedJobs[{index}].template.spec.template"
        words = refusal(level, _dict(pod.get("metadata")), _dict(pod.get("spec")))
        if words:
            return f"{path}.spec", words
        toleration = tolerates_every_taint(_dict(pod.get("spec"))) if level != "privileged" else None
        if toleration is not None:
            return (f"{path}.spec.tolerations[{toleration}]",
                    "a toleration of every taint (operator Exists without a key) would let these pods onto any "
                    "node, control-plane nodes too: only a tenant at Pod Security level privileged may use one; "
                    "name the taint's key")
    return None
