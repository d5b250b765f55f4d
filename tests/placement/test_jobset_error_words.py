"""The errors a tenant sees for a bad JobSet, word for word (broker/engine/jobset.py): each names the field and says what
to do. `test_jobset.py` checks that a key word is there; these pin the whole message, so a changed word shows."""

from __future__ import annotations

import pytest

from broker.engine.jobset import JobSetError, parse_jobset

from .fixtures import manifest

DNS = ("must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter "
       "or digit")
POD = "spec.replicatedJobs[0].template.spec.template.spec"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TERMS = f"{POD}.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
PART1 = "spec.replicatedJobs[1]"
POD1 = f"{PART1}.template.spec.template.spec"
BAD_KEY = ("invalid annotation key 'bad key!': an optional DNS prefix and '/', then at most 63 alphanumerics, '-', '_' "
           "or '.', starting and ending with an alphanumeric")
INT32 = "must be a whole number ≥ 0 and ≤ 2147483647 (an int32), got"


def rj(m, i):
    return m["spec"]["replicatedJobs"][i]


def pod(m, i):
    return rj(m, i)["template"]["spec"]["template"]["spec"]


def ann(m, **annotations):
    m["metadata"]["annotations"].update(annotations)


def affinity(m, *terms):
    pod(m, 0)["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


CASES = {  # what is broken: (how, the field named, the message)
    "wrong apiVersion": (lambda m: m.update(apiVersion="jobset.x-k8s.io/v1alpha1"),
                         "apiVersion", "must be 'jobset.x-k8s.io/v1alpha2', got 'jobset.x-k8s.io/v1alpha1'"),
    "wrong kind": (lambda m: m.update(kind="Job"), "kind", "must be 'JobSet', got 'Job'"),
    "no name": (lambda m: m["metadata"].pop("name"), "metadata.name", "the JobSet name is required"),
    "name not DNS-1123": (lambda m: m["metadata"].update(name="Big_Name"),
                          "metadata.name", f"the JobSet name 'Big_Name' {DNS}"),
    "name of 64 characters": (lambda m: m["metadata"].update(name="a" * 64),
                              "metadata.name", f"the JobSet name {'a' * 64!r} {DNS}"),
    "namespace not DNS-1123": (lambda m: m["metadata"].update(namespace="Team A"),
                               "metadata.namespace", f"the namespace 'Team A' {DNS}"),
    "label value not a string": (lambda m: m["metadata"]["labels"].update(tier=3),
                                 "metadata.labels['tier']", "must be a string (quote it in YAML), got 3"),
    "bad label key": (lambda m: m["metadata"]["labels"].update({"bad key!": "x"}),
                      "metadata.labels['bad key!']", "invalid label key 'bad key!'"),
    "replicas a string": (lambda m: rj(m, 1).update(replicas="2"),
                          "spec.replicatedJobs[1].replicas", "must be a whole number, got '2'"),
    "replicas true": (lambda m: rj(m, 1).update(replicas=True),
                      "spec.replicatedJobs[1].replicas", "must be a whole number, got True"),
    "zero replicas": (lambda m: rj(m, 1).update(replicas=0),
                      "spec.replicatedJobs[1].replicas", "must be at least 1, got 0"),
    "replicas beyond int32": (lambda m: rj(m, 1).update(replicas=2**31), "spec.replicatedJobs[1].replicas",
                              "must be at most 2147483647 (Kubernetes counts in int32), got 2147483648"),
    "no pod spec": (lambda m: rj(m, 0)["template"]["spec"]["template"].pop("spec"),
                    POD, "the Job template needs a pod spec with containers"),
    "container without name": (lambda m: pod(m, 0)["containers"][0].pop("name"),
                                f"{POD}.containers[0].name", "the container name is required"),
    "container name twice": (lambda m: pod(m, 0)["containers"].append(dict(pod(m, 0)["containers"][0])),
                             f"{POD}.containers[1].name", "'c' is used twice; container names must be unique in a pod"),
    "init container named as a container": (
        lambda m: pod(m, 1).update(initContainers=[{"name": "c", "image": "x"}]),
        "spec.replicatedJobs[1].template.spec.template.spec.containers[0].name",
        "'c' is used twice; container names must be unique in a pod"),
    "no containers": (lambda m: pod(m, 0).update(containers=[]),
                      f"{POD}.containers", "a pod needs at least one container"),
    "tolerations not a list": (lambda m: pod(m, 0).update(tolerations={"key": "x"}),
                               f"{POD}.tolerations", "must be a list, got dict"),
    "node selector value not a string": (lambda m: pod(m, 0).update(nodeSelector={"gpu": 1}),
                                         f"{POD}.nodeSelector['gpu']", "must be a string (quote it in YAML), got 1"),
    "no required affinity terms": (lambda m: affinity(m), TERMS,
                                   "needs at least one term; remove the required node affinity if any node will do"),
    "bad required affinity term": (
        lambda m: affinity(m, {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]}),
        f"{TERMS}[0].matchExpressions[0]", "Exists takes no values"),
    "bad exclusive key on a part": (
        lambda m: rj(m, 1)["template"].update(metadata={"annotations": {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack in (a)"}}),
        "spec.replicatedJobs[1].template.metadata.annotations['alpha.jobset.sigs.k8s.io/exclusive-topology']",
        "'rack in (a)' is not a node label key (e.g. topology.kubernetes.io/zone)"),
    "bad placement": (lambda m: ann(m, **{"archipelago.io/placement": "spread"}),
                      "metadata.annotations['archipelago.io/placement']", "'spread' is not one of whole, split"),
    "bad topology mode": (lambda m: ann(m, **{"archipelago.io/network-topology-mode": "strict"}),
                          "metadata.annotations['archipelago.io/network-topology-mode']",
                          "'strict' is not one of hard, soft"),
    "tier zero": (lambda m: ann(m, **{"archipelago.io/network-topology-mode": "hard",
                                      "archipelago.io/highest-tier-allowed": "0"}),
                  "metadata.annotations['archipelago.io/highest-tier-allowed']",
                  "'0' must be a tier number of 1 or more, e.g. \"2\""),
    "tier without hard": (lambda m: ann(m, **{"archipelago.io/highest-tier-allowed": "2"}),
                          "metadata.annotations['archipelago.io/highest-tier-allowed']",
                          "only applies with archipelago.io/network-topology-mode: hard; add it or remove the tier"),
    "split names too long": (lambda m: (m["metadata"].update(name="n" * 62),
                                        ann(m, **{"archipelago.io/placement": "split"})),
                             "spec.replicatedJobs[0].name",
                             f"in split mode this part runs as the JobSet {'n' * 62}-a, 64 characters; shorten the "
                             "names to 63 in all"),
    "duplicate part": (lambda m: rj(m, 1).update(name="a"),
                       "spec.replicatedJobs[1].name", "'a' is used twice; ReplicatedJob names must be unique"),
    "unknown success operator": (lambda m: m["spec"].update(successPolicy={"operator": "Most"}),
                                 "spec.successPolicy.operator", "'Most' is not one of All, Any"),
    "success target not a part": (lambda m: m["spec"].update(successPolicy={"targetReplicatedJobs": ["a", "c"]}),
                                  "spec.successPolicy.targetReplicatedJobs[1]",
                                  "'c' is not a ReplicatedJob of this JobSet; name one of a, b"),
    "maxRestarts a string": (lambda m: m["spec"].update(failurePolicy={"maxRestarts": "3"}),
                             "spec.failurePolicy.maxRestarts", f"{INT32} '3'"),
    "maxRestarts beyond int32": (lambda m: m["spec"].update(failurePolicy={"maxRestarts": 2**31}),
                                 "spec.failurePolicy.maxRestarts", f"{INT32} 2147483648"),
    "max-restarts annotation negative": (lambda m: ann(m, **{"archipelago.io/max-restarts": "-1"}),
                                         "metadata.annotations['archipelago.io/max-restarts']",
                                         "'-1' must be a whole number ≥ 0, e.g. \"3\""),
    "startup timeout not a duration": (lambda m: ann(m, **{"archipelago.io/startup-timeout": "soon"}),
                                       "metadata.annotations['archipelago.io/startup-timeout']",
                                       "'soon' must be a duration such as \"600s\", \"10m\" or \"1h\""),
    "on-preemption unknown": (lambda m: ann(m, **{"archipelago.io/on-preemption": "retry"}),
                              "metadata.annotations['archipelago.io/on-preemption']",
                              "'retry' must be requeue (back in its queue when preempted, the default) or fail"),
    # objects and lists of the wrong type, names and keys, defaults read as wrong values
    "metadata a list": (lambda m: m.update(metadata=[]),
                        "metadata", "must be an object, got list"),
    "spec a string": (lambda m: m.update(spec="x"),
                      "spec", "must be an object, got str"),
    "part a list": (lambda m: m["spec"]["replicatedJobs"].__setitem__(1, []),
                    PART1, "must be an object, got list"),
    "part without name": (lambda m: rj(m, 1).pop("name"),
                          f"{PART1}.name", "the ReplicatedJob name is required"),
    "template a list": (lambda m: rj(m, 1).update(template=[]),
                        f"{PART1}.template", "must be an object, got list"),
    "template metadata a list": (lambda m: rj(m, 1)["template"].update(metadata=[]),
                                 f"{PART1}.template.metadata", "must be an object, got list"),
    "template label not a string": (
        lambda m: rj(m, 1)["template"].update(metadata={"labels": {"a": 1}}),
        f"{PART1}.template.metadata.labels['a']",
        "must be a string (quote it in YAML), got 1"),
    "template annotation key bad": (lambda m: rj(m, 1)["template"].update(metadata={"annotations": {"bad key!": "x"}}),
                                    f"{PART1}.template.metadata.annotations", BAD_KEY),
    "job spec a list": (lambda m: rj(m, 1)["template"].update(spec=[]),
                        f"{PART1}.template.spec", "must be an object, got list"),
    "completions a string": (lambda m: rj(m, 1)["template"]["spec"].update(completions="2"),
                             f"{PART1}.template.spec.completions", "must be a whole number, got '2'"),
    "pod template a list": (lambda m: rj(m, 1)["template"]["spec"].update(template=[]),
                            f"{PART1}.template.spec.template", "must be an object, got list"),
    "pod template label not a string": (
        lambda m: rj(m, 1)["template"]["spec"]["template"].update(metadata={"labels": {"a": 1}}),
        f"{PART1}.template.spec.template.metadata.labels['a']",
        "must be a string (quote it in YAML), got 1"),
    "pod template annotation not a string": (
        lambda m: rj(m, 1)["template"]["spec"]["template"].update(metadata={"annotations": {"a": 1}}),
        f"{PART1}.template.spec.template.metadata.annotations['a']",
        "must be a string (quote it in YAML), got 1"),
    "pod spec a list": (lambda m: rj(m, 1)["template"]["spec"]["template"].update(spec=["x"]),
                        POD1, "must be an object, got list"),
    "containers a dict": (lambda m: pod(m, 1).update(containers={"name": "c"}),
                          f"{POD1}.containers", "must be a list, got dict"),
    "container a string": (lambda m: pod(m, 1)["containers"].__setitem__(0, "c"),
                           f"{POD1}.containers[0]", "must be an object, got str"),
    "toleration a string": (lambda m: pod(m, 1).update(tolerations=["x"]),
                            f"{POD1}.tolerations[0]", "must be an object, got str"),
    "affinity a list": (lambda m: pod(m, 1).update(affinity=[]),
                        f"{POD1}.affinity", "must be an object, got list"),
    "node affinity a list": (lambda m: pod(m, 1).update(affinity={"nodeAffinity": []}),
                             f"{POD1}.affinity.nodeAffinity", "must be an object, got list"),
    "job annotation key bad": (lambda m: ann(m, **{"bad key!": "x"}),
                               "metadata.annotations", BAD_KEY),
    "job annotations a list": (lambda m: m["metadata"].update(annotations=["x"]),
                               "metadata.annotations", "must be an object, got list"),
    "exclusive key with an operator": (
        lambda m: ann(m, **{"alpha.jobset.sigs.k8s.io/exclusive-topology": "!rack"}),
        "metadata.annotations['alpha.jobset.sigs.k8s.io/exclusive-topology']",
        "'!rack' is not a node label key (e.g. topology.kubernetes.io/zone)"),
    "exclusive key empty": (lambda m: ann(m, **{"alpha.jobset.sigs.k8s.io/exclusive-topology": ""}),
                             "metadata.annotations['alpha.jobset.sigs.k8s.io/exclusive-topology']",
                             "'' is not a node label key (e.g. topology.kubernetes.io/zone)"),
    "exclusive key not a selector": (lambda m: ann(m, **{"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack in ("}),
                                     "metadata.annotations['alpha.jobset.sigs.k8s.io/exclusive-topology']",
                                     "'rack in (' is not a node label key (e.g. topology.kubernetes.io/zone)"),
    "exclusive key with a space": (lambda m: ann(m, **{"alpha.jobset.sigs.k8s.io/exclusive-topology": " rack"}),
                                   "metadata.annotations['alpha.jobset.sigs.k8s.io/exclusive-topology']",
                                   "' rack' is not a node label key (e.g. topology.kubernetes.io/zone)"),
    "required affinity a list": (lambda m: pod(m, 1).update(affinity={"nodeAffinity": {REQUIRED: []}}),
                                 f"{POD1}.affinity.nodeAffinity.{REQUIRED}", "must be an object, got list"),
    "required affinity terms a dict": (
        lambda m: pod(m, 1).update(affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": {}}}}),
        f"{POD1}.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms", "must be a list, got dict"),
    "required affinity term a string": (
        lambda m: affinity(m, "gpu"), f"{TERMS}[0]",
        "a node selector term must be an object with matchExpressions and/or matchFields"),
    "success policy a list": (lambda m: m["spec"].update(successPolicy=["All"]),
                              "spec.successPolicy", "must be an object, got list"),
    "success targets a string": (lambda m: m["spec"].update(successPolicy={"targetReplicatedJobs": "a"}),
                                 "spec.successPolicy.targetReplicatedJobs", "must be a list, got str"),
    "failure policy a list": (lambda m: m["spec"].update(failurePolicy=[]),
                              "spec.failurePolicy", "must be an object, got list"),
    "maxRestarts true": (
        lambda m: m["spec"].update(failurePolicy={"maxRestarts": True}),
        "spec.failurePolicy.maxRestarts",
        "must be a whole number ≥ 0 and ≤ 2147483647 (an int32), got True"),
    "bad selector": (
        lambda m: ann(m, **{"archipelago.io/cluster-selector": "region in (eu"}),
        "metadata.annotations['archipelago.io/cluster-selector']",
        "unbalanced '(' in selector 'region in (eu'"),
    "no replicatedJobs": (lambda m: m["spec"].update(replicatedJobs=[]),
                          "spec.replicatedJobs", "a JobSet needs at least one ReplicatedJob"),
    "replicatedJobs a dict": (lambda m: m["spec"].update(replicatedJobs={}),
                              "spec.replicatedJobs", "must be a list, got dict"),
    "name empty": (lambda m: m["metadata"].update(name=""),
                   "metadata.name", "the JobSet name is required"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_jobset_is_refused_naming_the_field_in_these_words(case):
    breaks, path, message = CASES[case]
    m = manifest(parts=(("a", 1, 1, 8), ("b", 1, 1, 8)))
    breaks(m)
    with pytest.raises(JobSetError) as refused:
        parse_jobset(m)
    assert (refused.value.path, refused.value.message) == (path, message)


@pytest.mark.parametrize("body", [[], "JobSet", 3])
def test_a_manifest_that_is_not_an_object_is_refused_at_its_root(body):
    with pytest.raises(JobSetError) as refused:
        parse_jobset(body)
    assert (refused.value.path, refused.value.message) == ("$", f"must be an object, got {type(body).__name__}")


def test_the_limits_themselves_are_accepted_and_the_defaults_read_as_kubernetes_reads_them():
    m = manifest(name="n" * 61, parts=(("a", 2**31 - 1, 1, 8), ("b", 1, 1, 8)))  # split names of 63 exactly
    m["metadata"]["namespace"] = "team-a"
    ann(m, **{"archipelago.io/placement": "split", "archipelago.io/network-topology-mode": "hard",
              "archipelago.io/highest-tier-allowed": "1", "archipelago.io/max-restarts": "3"})
    m["spec"].update(successPolicy={"operator": "Any", "targetReplicatedJobs": ["b"]},
                     failurePolicy={"maxRestarts": 2**31 - 1})
    rj(m, 0)["template"]["spec"]["completions"] = 5
    rj(m, 1).pop("replicas")
    rj(m, 1)["template"]["spec"].pop("parallelism")
    spec = parse_jobset(m)
    assert (spec.namespace, spec.placement, spec.tier_bound, spec.max_restarts) == ("team-a", "split", 1, 3)
    assert dict(spec.labels) == {"kueue.x-k8s.io/queue-name": "q"}
    assert dict(spec.annotations) == m["metadata"]["annotations"]
    assert [(p.name, p.replicas, p.parallelism, p.completions) for p in spec.parts] == [
        ("a", 2**31 - 1, 1, 5), ("b", 1, 1, None)]
    assert parse_jobset(manifest(name="a" * 63)).name == "a" * 63
    whole = parse_jobset(manifest(annotations={"archipelago.io/network-topology-mode": "hard"}))
    assert (whole.placement, whole.tier_bound, whole.max_restarts) == ("whole", 1, 0)  # Volcano's default tier
    assert not whole.cluster_selector.requirements  # no selector: any cluster
