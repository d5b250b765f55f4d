"""The pure override rules: named cases in, the member's JobSet (or the named refusal) out."""

from __future__ import annotations

import copy

import pytest

from broker.engine.jobset import parse_jobset
from broker.engine.overrides import OverrideError, RuleError, apply_overrides, parse_rule, split_image
from broker.store.cluster_overrides import preview


def jobset(*containers: dict, parts: int = 1) -> dict:
    pod = {"restartPolicy": "Never", "containers": list(containers) or [
        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "team-a", "labels": {"app": "train"}, "annotations": {}},
            "spec": {"replicatedJobs": [{"name": f"r{i}", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "template": {"spec": copy.deepcopy(pod)}}}} for i in range(parts)]}}


def pod(manifest: dict, index: int = 0) -> dict:
    return manifest["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]


def rule(name: str = "r", **fields) -> dict:
    return {"name": name, "selector": "", **fields}


EU = ("eu-west", {"region": "eu", "gpu": "h100"})

# (case, rules, container(s) or None, what to read from the result, expected)
APPLIED = [
    ("registry replaced, docker hub made explicit",
     [rule(image={"registry": "mirror.eu:5000"})], None, lambda m: pod(m)["spec"]["containers"][0]["image"],
     "mirror.eu:5000/library/busybox"),
    ("registry replaced only from the one named",
     [rule(image={"registry": "mirror.eu", "from": "nvcr.io"})],
     [{"name": "a", "image": "nvcr.io/nvidia/pytorch:24.01"}, {"name": "b", "image": "ghcr.io/x/y@sha256:" + "a" * 64}],
     lambda m: [c["image"] for c in pod(m)["spec"]["containers"]],
     ["mirror.eu/nvidia/pytorch:24.01", "ghcr.io/x/y@sha256:" + "a" * 64]),
    ("prefix before every image, init containers too",
     [rule(image={"prefix": "harbor.example/cache"})],
     [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01"}],
     lambda m: pod(m)["spec"]["containers"][0]["image"], "harbor.example/cache/nvcr.io/nvidia/pytorch:24.01"),
    ("env added to the named container only, replaced where it was",
     [rule(env=[{"name": "NCCL_IB_HCA", "value": "mlx5", "container": "main"}, {"name": "MODE", "value": "eu"}])],
     [{"name": "main", "image": "busybox", "env": [{"name": "MODE", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]},
      {"name": "side", "image": "busybox"}],
     lambda m: [c.get("env") for c in pod(m)["spec"]["containers"]],
     [[{"name": "MODE", "value": "eu"}, {"name": "NCCL_IB_HCA", "value": "mlx5"}], [{"name": "MODE", "value": "eu"}]]),
    ("nodeSelector entries and tolerations added, a toleration once",
     [rule(nodeSelector={"gpu": "h100"}, tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
      rule("again", tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])], None,
     lambda m: (pod(m)["spec"]["nodeSelector"], pod(m)["spec"]["tolerations"]),
     ({"gpu": "h100"}, [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])),
    ("node affinity ANDed into a new term",
     [rule(nodeAffinity=[{"key": "fabric", "operator": "In", "values": ["ib"]}])], None,
     lambda m: pod(m)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
     {"nodeSelectorTerms": [{"matchExpressions": [{"key": "fabric", "operator": "In", "values": ["ib"]}]}]}),
    ("labels and annotations of the JobSet and of its pods",
     [rule(labels={"cost-center": "eu"}, annotations={"note": "mirrored"}, podLabels={"sidecar": "off"},
           podAnnotations={"prometheus.io/scrape": "true"})], None,
     lambda m: (m["metadata"]["labels"], m["metadata"]["annotations"], pod(m)["metadata"]),
     ({"app": "train", "cost-center": "eu"}, {"note": "mirrored"},
      {"labels": {"sidecar": "off"}, "annotations": {"prometheus.io/scrape": "true"}})),
    ("a JSON patch under the ReplicatedJobs",
     [rule(jsonPatch=[{"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/priorityClassName",
                       "value": "eu-batch"}])], None, lambda m: pod(m)["spec"]["priorityClassName"], "eu-batch"),
    ("rules in order, then by name: the later one wins",
     [rule("b-second", order=1, env=[{"name": "X", "value": "b"}]), rule("z-first", order=0, env=[{"name": "X", "value": "z"}]),
      rule("a-second", order=1, env=[{"name": "X", "value": "a"}])], None,
     lambda m: pod(m)["spec"]["containers"][0]["env"], [{"name": "X", "value": "b"}]),
]


@pytest.mark.parametrize("case, rules, containers, read, expected", APPLIED, ids=[c[0] for c in APPLIED])
def test_rules_rewrite_the_member_copy(case, rules, containers, read, expected):
    manifest = jobset(*(containers or ()))
    before = copy.deepcopy(manifest)
    result, applied = apply_overrides([parse_rule(r) for r in rules], *EU, manifest, "baseline")
    assert read(result) == expected
    assert applied == tuple(sorted((r["name"] for r in rules),
                                   key=lambda n: ([r.get("order", 0) for r in rules if r["name"] == n][0], n)))
    assert manifest == before  # the caller's JobSet is never changed
    parse_jobset(result)


# (case, rule, cluster, labels): rules that do not apply there
NOT_APPLIED = [
    ("another cluster by name", rule(cluster="us-east", selector=None, labels={"a": "b"}), *EU),
    ("a selector the cluster's labels do not meet", rule(selector="region in (us, ap)", labels={"a": "b"}), *EU),
    ("a selector on a label the cluster lacks", rule(selector="fabric=ib", labels={"a": "b"}), *EU),
]


@pytest.mark.parametrize("case, raw, cluster, labels", NOT_APPLIED, ids=[c[0] for c in NOT_APPLIED])
def test_rules_that_target_other_clusters_leave_the_copy_alone(case, raw, cluster, labels):
    manifest = jobset()
    raw = {k: v for k, v in raw.items() if v is not None}
    assert apply_overrides([parse_rule(raw)], cluster, labels, manifest, "baseline") == (manifest, ())


# (case, rules, containers, words in the refusal): the placement fails, naming the rule
REFUSED = [
    ("a prefix that makes an invalid image reference", [rule("prefix", image={"prefix": "mirror.example/cache"})],
     [{"name": "main", "image": "localhost:5000/app:1"}], ["'prefix'", "localhost:5000/app:1", "not a valid image"]),
    ("a JSON patch that removes the containers", [rule("strip", jsonPatch=[
        {"op": "remove", "path": "/spec/replicatedJobs/0/template/spec/template/spec/containers"}])], None,
     ["'strip'", "containers"]),
    ("a JSON patch on a path that is not there", [rule("missing", jsonPatch=[
        {"op": "replace", "path": "/spec/replicatedJobs/3/replicas", "value": 1}])], None, ["'missing'", "jsonPatch"]),
    ("a JSON patch that changes the demand placement reserved", [rule("grow", jsonPatch=[
        {"op": "replace", "path": "/spec/replicatedJobs/0/replicas", "value": 8}])], None, ["'grow'", "replicas"]),
    ("env where the JobSet's is not a list", [rule("proxy", env=[{"name": "A", "value": "1"}])],
     [{"name": "main", "image": "busybox", "env": "A=1"}], ["'proxy'", "env"]),
    ("the second rule of two, the first being fine", [rule("ok", order=0, env=[{"name": "A", "value": "1"}]),
                                                      rule("bad", order=1, nodeSelector={"x": "y"}, jsonPatch=[
        {"op": "replace", "path": "/spec/replicatedJobs/0/name", "value": "Not A Name"}])], None, ["'bad'", "name"]),
]


@pytest.mark.parametrize("case, rules, containers, words", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_rule_that_would_make_an_invalid_jobset_is_refused_by_name(case, rules, containers, words):
    with pytest.raises(OverrideError) as raised:
        apply_overrides([parse_rule(r) for r in rules], *EU, jobset(*(containers or ())), "baseline")
    for word in words:
        assert word in str(raised.value)


HOST_PID = [{"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/spec/hostPID", "value": True}]


def test_a_rule_cannot_make_a_copy_break_its_tenants_pod_security_level():
    """The tenant's level holds the member copy as it held the submission: a rule that makes its pods share the
    node's process namespace is refused below privileged, naming the rule and the check in the API server's words."""
    with pytest.raises(OverrideError) as raised:
        apply_overrides([parse_rule(rule("debug", jsonPatch=HOST_PID))], *EU, jobset(), "baseline")
    assert "'debug'" in str(raised.value)
    assert 'violates PodSecurity "baseline:latest": host namespaces (hostPID=true)' in str(raised.value)
    copy_, applied = apply_overrides([parse_rule(rule("debug", jsonPatch=HOST_PID))], *EU, jobset(), "privileged")
    assert applied == ("debug",) and pod(copy_)["spec"]["hostPID"] is True
    seen = preview([parse_rule(rule("debug", jsonPatch=HOST_PID))], EU[1], jobset(), namespace="team-a",
                   cluster=EU[0], part="", pod_security="baseline")  # a tenant's dry run says so too
    assert seen.manifest is None and "host namespaces (hostPID=true)" in seen.error


# (case, rule as written, the field the error names)
INVALID = [
    ("no target", {"name": "r", "env": [{"name": "A", "value": "1"}]}, "cluster"),
    ("two targets", {**rule(env=[{"name": "A"}]), "cluster": "eu-west"}, "cluster"),
    ("a bad selector", rule(selector="region in (eu", env=[{"name": "A"}]), "selector"),
    ("a name that is not a DNS label", rule("Eu_Mirror", env=[{"name": "A"}]), "name"),
    ("nothing to change", rule(), ""),
    ("an unknown change", rule(volumes=[{}]), "volumes"),
    ("an env name with '='", rule(env=[{"name": "A=B", "value": "1"}]), "env[0].name"),
    ("an env name starting with a digit", rule(env=[{"name": "1A", "value": "1"}]), "env[0].name"),
    ("a container name that cannot be", rule(env=[{"name": "A", "container": "Main"}]), "env[0].container"),
    ("a JSON patch outside the ReplicatedJobs", rule(jsonPatch=[{"op": "replace", "path": "/metadata/name",
                                                                 "value": "x"}]), "jsonPatch[0].path"),
    ("a JSON patch moving from outside", rule(jsonPatch=[{"op": "move", "from": "/spec/failurePolicy",
                                                          "path": "/spec/replicatedJobs/0/x"}]), "jsonPatch[0].from"),
    ("a JSON patch with an unknown op", rule(jsonPatch=[{"op": "merge", "path": "/spec/replicatedJobs/0"}]),
     "jsonPatch"),
    ("a JSON patch add without a value", rule(jsonPatch=[{"op": "add", "path": "/spec/replicatedJobs/0/x"}]),
     "jsonPatch[0].value"),
    ("a registry that is not a host", rule(image={"registry": "https://mirror"}), "image.registry"),
    ("registry and prefix together", rule(image={"registry": "m.io", "prefix": "m.io/c"}), "image"),
    ("a broker label", rule(labels={"archipelago.io/job-id": "1"}), "labels['archipelago.io/job-id']"),
    ("a label value Kubernetes refuses", rule(podLabels={"a": "not ok"}), "podLabels"),
    ("a toleration operator", rule(tolerations=[{"key": "a", "operator": "In"}]), "tolerations[0].operator"),
    ("tolerationSeconds without NoExecute", rule(tolerations=[{"key": "a", "operator": "Exists",
                                                               "tolerationSeconds": 5}]), "tolerations[0].tolerationSeconds"),
    ("a node affinity operator", rule(nodeAffinity=[{"key": "a", "operator": "Near", "values": ["x"]}]),
     "nodeAffinity[0]"),
    ("an order that is not a number", rule(order="first", env=[{"name": "A"}]), "order"),
]


@pytest.mark.parametrize("case, raw, field", INVALID, ids=[c[0] for c in INVALID])
def test_a_rule_is_checked_when_written(case, raw, field):
    with pytest.raises(RuleError) as raised:
        parse_rule(raw)
    assert raised.value.path == field


@pytest.mark.parametrize("image, parts", [
    ("busybox", ("docker.io", "library/busybox")), ("team/app:1", ("docker.io", "team/app:1")),
    ("localhost/app", ("localhost", "app")), ("registry:5000/app", ("registry:5000", "app")),
    ("nvcr.io/nvidia/pytorch:24.01", ("nvcr.io", "nvidia/pytorch:24.01")),
])
def test_an_image_is_split_as_a_container_runtime_reads_it(image, parts):
    assert split_image(image) == parts
