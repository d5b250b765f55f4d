"""The one resource the front door serves, JobSet, as Kubernetes discovery and OpenAPI v3 describe it."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

import broker

GROUP, VERSION, KIND, PLURAL, SINGULAR = "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "jobset"
API_VERSION = f"{GROUP}/{VERSION}"
SHORT_NAMES, CATEGORIES = ["js"], ["all"]
VERBS = ["create", "delete", "get", "list", "patch", "watch"]
GVK = {"group": GROUP, "version": VERSION, "kind": KIND}
GROUP_VERSION_PATH = f"apis/{GROUP}/{VERSION}"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def version_info() -> dict[str, str]:
    """`/version`: the Kubernetes release whose API the front door follows, and the broker's own version."""
    return {"major": "1", "minor": "33", "gitVersion": f"v1.33.0+archipelago-{broker.__version__}",
            "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "", "compiler": "",
            "platform": "archipelago"}


def api_versions() -> dict[str, Any]:
    """`/api`: the core group, of which the front door serves namespaces (kubectl reads one after a 404) and
    the events of JobSets (`kubectl describe` lists them)."""
    return {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"], "serverAddressByClientCIDRs": []}


# The core resources served: (plural, singular, kind, namespaced, verbs, short names).
_CORE = [("namespaces", "namespace", "Namespace", False, ["get", "list"], ["ns"]),
         ("events", "event", "Event", True, ["list"], ["ev"])]


def core_resource_list() -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
        {"name": plural, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs,
         "shortNames": short} for plural, singular, kind, namespaced, verbs, short in _CORE]}


def namespace(name: str, tenant: str) -> dict[str, Any]:
    """A tenant's namespace as a Namespace object."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/metadata.name": name, "archipelago.io/tenant": tenant}},
            "spec": {}, "status": {"phase": "Active"}}


def group() -> dict[str, Any]:
    version = {"groupVersion": API_VERSION, "version": VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [version], "preferredVersion": version}


def group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]}


def resource_list() -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": [
        {"name": PLURAL, "singularName": SINGULAR, "namespaced": True, "kind": KIND, "verbs": VERBS,
         "shortNames": SHORT_NAMES, "categories": CATEGORIES},
        {"name": f"{PLURAL}/status", "singularName": "", "namespaced": True, "kind": KIND, "verbs": ["get"]}]}


def aggregated(core: bool) -> dict[str, Any]:
    """Aggregated discovery (apidiscovery.k8s.io/v2), which kubectl asks for first: `/api` or `/apis`."""
    if core:
        resources = [{"resource": plural, "responseKind": {"group": "", "version": "v1", "kind": kind},
                      "scope": "Namespaced" if namespaced else "Cluster", "singularResource": singular, "verbs": verbs,
                      "shortNames": short} for plural, singular, kind, namespaced, verbs, short in _CORE]
        items = [{"metadata": {"name": ""}, "versions": [{"version": "v1", "freshness": "Current",
                                                          "resources": resources}]}]
    else:
        resources = [{"resource": PLURAL, "responseKind": GVK, "scope": "Namespaced", "singularResource": SINGULAR,
                      "verbs": VERBS, "shortNames": SHORT_NAMES, "categories": CATEGORIES,
                      "subresources": [{"subresource": "status", "responseKind": GVK, "verbs": ["get"]}]}]
        items = [{"metadata": {"name": GROUP}, "versions": [{"version": VERSION, "freshness": "Current",
                                                              "resources": resources}]}]
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


def wants_aggregated(accept: str) -> bool:
    return any("as=APIGroupDiscoveryList" in kind and "v=v2" in kind.replace(" ", "").split(";")
               for kind in accept.split(","))


# OpenAPI v3 -------------------------------------------------------------------------------------

_SCHEMA_NAME = "io.x-k8s.jobset.v1alpha2.JobSet"
_OPEN_SCHEMA = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


@functools.lru_cache(maxsize=4)
def _jobset_schema(crd: Path | None) -> dict[str, Any]:
    """The v1alpha2 schema of the JobSet CRD the members run, read once; open when no CRD is configured."""
    if crd is None:
        return {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                                 "metadata": {"type": "object"}, "spec": _OPEN_SCHEMA,
                                                 "status": _OPEN_SCHEMA}}
    document = yaml.load(crd.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # an admin's file
    for version in document["spec"]["versions"]:
        if version["name"] == VERSION:
            return version["schema"]["openAPIV3Schema"]
    raise ValueError(f"{crd} has no {VERSION} version of {KIND}")


_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_STRING, _STRINGS = {"type": "string"}, {"type": "object", "additionalProperties": {"type": "string", "default": ""}}


def _ref(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{_META}{name}"}], "default": {}}


# ObjectMeta as kube-apiserver publishes it beside every CRD's schema (whose `metadata` is a bare object): kubectl's
# client-side apply walks it to diff `metadata.annotations` and `labels`, and warns ("unable to find api field
# \"annotations\"") where it is missing. Only the fields and patch strategies kubectl reads.
_META_SCHEMAS = {
    f"{_META}ObjectMeta": {"type": "object", "properties": {
        **{field: _STRING for field in ("name", "namespace", "generateName", "uid", "resourceVersion", "selfLink")},
        "labels": _STRINGS, "annotations": _STRINGS,
        "generation": {"type": "integer", "format": "int64"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set",
                       "x-kubernetes-patch-strategy": "merge"},
        "ownerReferences": {"type": "array", "items": _ref("OwnerReference"), "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-patch-merge-key": "uid",
                            "x-kubernetes-patch-strategy": "merge"},
        "managedFields": {"type": "array", "items": _ref("ManagedFieldsEntry")}}},
    f"{_META}OwnerReference": {"type": "object", "required": ["apiVersion", "kind", "name", "uid"], "properties": {
        **{field: _STRING for field in ("apiVersion", "kind", "name", "uid")},
        "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}},
        "x-kubernetes-map-type": "atomic"},
    f"{_META}ManagedFieldsEntry": {"type": "object", "properties": {
        **{field: _STRING for field in ("apiVersion", "fieldsType", "manager", "operation", "subresource")},
        "time": {"type": "string", "format": "date-time"}, "fieldsV1": {"type": "object"}}},
}


def _with_object_meta(schema: dict[str, Any]) -> dict[str, Any]:
    """The JobSet's schema with its `metadata` the ObjectMeta of the components, as an API server serves a CRD's."""
    return {**schema, "properties": {**schema.get("properties", {}), "metadata": _ref("ObjectMeta")}}


def _parameter(name: str, where: str, description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "description": description, "required": required or where == "path",
            "schema": {"type": "string"}}


def _operation(action: str, summary: str, parameters: list[dict], *, body: bool = False,
               patch: bool = False) -> dict[str, Any]:
    """An operation as kube-apiserver describes it; kubectl reads the GVK extension and, on PATCH, whether
    fieldValidation is taken (then it leaves validation to the server)."""
    reference = {"$ref": f"#/components/schemas/{_SCHEMA_NAME}"}
    operation: dict[str, Any] = {
        "summary": summary, "operationId": f"{action}{KIND}", "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
        "x-kubernetes-action": action, "x-kubernetes-group-version-kind": GVK}
    if body:
        media_types = (["application/apply-patch+yaml", "application/merge-patch+json",
                        "application/strategic-merge-patch+json"] if patch else
                       ["application/json", "application/yaml"])
        operation["requestBody"] = {"required": True, "content": {t: {"schema": reference} for t in media_types}}
    return operation


_WRITE_PARAMETERS = [_parameter("dryRun", "query", "All: validate only"),
                     _parameter("fieldManager", "query", "who makes the change"),
                     _parameter("fieldValidation", "query", "the broker validates every JobSet in full")]


def group_version_document(crd: Path | None) -> dict[str, Any]:
    namespaced = f"/{GROUP_VERSION_PATH}/namespaces/{{namespace}}/{PLURAL}"
    in_namespace = [_parameter("namespace", "path", "the tenant's namespace")]
    named = in_namespace + [_parameter("name", "path", "the JobSet's name")]
    listing = [_parameter(p, "query", p) for p in ("labelSelector", "fieldSelector", "limit", "continue",
                                                   "resourceVersion", "watch", "allowWatchBookmarks",
                                                   "timeoutSeconds")]
    schema = {**_with_object_meta(_jobset_schema(crd)), "x-kubernetes-group-version-kind": [GVK]}
    return {"openapi": "3.0.0", "info": {"title": "Archipelago JobSets", "version": broker.__version__},
            "paths": {
                f"/{GROUP_VERSION_PATH}/{PLURAL}": {
                    "get": _operation("list", "JobSets of every namespace the token may see", listing)},
                namespaced: {
                    "get": _operation("list", "JobSets of a namespace", in_namespace + listing),
                    "post": _operation("post", "Submit a JobSet", in_namespace + _WRITE_PARAMETERS, body=True)},
                f"{namespaced}/{{name}}": {
                    "get": _operation("get", "A JobSet and its federated status", named),
                    "patch": _operation("patch", "Apply (server-side) or merge-patch a JobSet; only a change to "
                                                 "nothing is taken", named + _WRITE_PARAMETERS + [
                                            _parameter("force", "query", "server-side apply: take over fields")],
                                        body=True, patch=True),
                    "delete": _operation("delete", "Cancel the JobSet on every member", named)},
                f"{namespaced}/{{name}}/status": {
                    "get": _operation("get", "A JobSet's federated status", named)}},
            "components": {"schemas": {_SCHEMA_NAME: schema, **_META_SCHEMAS}}}


@functools.lru_cache(maxsize=4)
def group_version_hash(crd: Path | None) -> str:
    return hashlib.sha256(json.dumps(group_version_document(crd), sort_keys=True).encode()).hexdigest()[:32].upper()
