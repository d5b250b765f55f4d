"""Member clusters: admins register them by kubeconfig, label, cordon, drain and remove them;
anyone signed in reads their state, capacity and HyperNode tree (never a kubeconfig)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import AdminDep, DatabaseDep, PrincipalDep, SessionDep, SettingsDep
from api.problems import Problem
from api.schemas import problems
from broker.services import first_sync
from broker.store import inventory
from broker.store.db.models import Cluster
from broker.store.db.runtime import Database
from broker.store.errors import Invalid
from clusters.member import MemberError

router = APIRouter(prefix="/api/v1", tags=["clusters"])
ADMIN_ERRORS = (401, 403, 404)
RECIPE = ("how its HyperNode tree is found from node labels when it has no HyperNode objects: auto (the recipe whose "
          "labels most of its nodes carry), a built-in recipe (archipelago, aws, gke, nvlink) or an admin's")
WRITE_BACK = ("write the tree discovered from its node labels back to it as HyperNode objects, for its own Volcano "
              "(push members; its identity needs deploy/member-topology-rbac.yaml's role)")


class ClusterIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="DNS-1123 label, unique among clusters")
    mode: Literal["push", "pull"] = Field("push", description="push: the broker calls the member with the "
                                          "kubeconfig; pull: the member's agent calls the broker with the token "
                                          "this answers once (agent_token)")
    kubeconfig: str | None = Field(None, description="kubeconfig YAML (push mode only); inline credentials only "
                                                     "unless the admin allows more")
    context: str | None = Field(None, description="the context to use (default: its current-context)")
    labels: dict[str, str] = Field(default_factory=dict, description="the broker's labels for the cluster, "
                                                                     "matched by archipelago.io/cluster-selector")
    topology_recipe: str = Field("auto", description=RECIPE)
    topology_write_back: bool = Field(False, description=WRITE_BACK)


class ClusterPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    labels: dict[str, str | None] | None = Field(None, description="merged into the labels; null removes one")
    taints: list[dict[str, str]] | None = Field(None, description="replace the cluster's taints "
                                                                  "({key, value?, effect})")
    topology_recipe: str | None = Field(None, description=RECIPE)
    topology_write_back: bool | None = Field(None, description=WRITE_BACK)


class RecipeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="a DNS label; not auto nor a built-in recipe's name")
    tiers: list[list[str]] | None = Field(None, description="per tier, closest first, the node label keys that name "
                                                            "a node's domain there (the first it carries)")
    levels: list[dict[str, str]] | None = Field(None, description="or Volcano's label discovery shape: "
                                                                  "[{nodeLabel: key}, …] from the highest domain "
                                                                  "down, a last kubernetes.io/hostname names the node")


@router.post("/clusters", status_code=201, responses=problems(401, 403, 409, 422, 502, 504),
             summary="Register a member cluster by kubeconfig, or a pull member (its agent's token answered once)")
def register(body: ClusterIn, request: Request, session: SessionDep, database: DatabaseDep, settings: SettingsDep,
             _: AdminDep) -> dict[str, Any]:
    if body.mode == "pull":
        return _register_pull(body, request, database)
    if body.kubeconfig is None:
        raise Invalid("kubeconfig", "a push member needs the kubeconfig the broker reaches it with")
    try:
        registration = inventory.check_registration(session, settings, name=body.name, kubeconfig=body.kubeconfig,
                                                    context=body.context, labels=body.labels,
                                                    topology_recipe=body.topology_recipe,
                                                    topology_write_back=body.topology_write_back)
    except inventory.RegistrationError as exc:
        raise Problem(exc.status, exc.detail, title=exc.title, **exc.extra) from None
    with database.write() as written:
        cluster, client = inventory.store_registration(written, registration)
    try:
        first_sync(database, settings, cluster.id, client)
    except MemberError as exc:  # registered all the same: the sync loop retries with back-off
        with database.write() as written:
            inventory.record_sync_error(written, written.get(Cluster, cluster.id), f"sync: {exc}")
    finally:
        client.close()
    request.app.state.services.wake("inventory-sync")
    request.app.state.capacity.forget()
    with database.read() as fresh:
        return inventory.cluster_view(fresh, fresh.get(Cluster, cluster.id))


def _register_pull(body: ClusterIn, request: Request, database: Database) -> dict[str, Any]:
    for field, value in (("kubeconfig", body.kubeconfig), ("context", body.context),
                         ("topology_write_back", body.topology_write_back or None)):
        if value is not None:
            raise Invalid(field, "a pull member is never called by the broker: leave out its kubeconfig and context, "
                                 "and topology_write_back off")
    with database.write() as session:
        cluster, token = inventory.register_pull_cluster(session, name=body.name, labels=body.labels,
                                                         topology_recipe=body.topology_recipe)
        view = inventory.cluster_view(session, cluster)
    request.app.state.services.wake("inventory-sync")
    return {**view, "agent_token": token}


@router.get("/clusters", responses=problems(401), summary="Every cluster: state and capacity totals")
def list_clusters(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return inventory.list_views(session)


@router.get("/clusters/{name}", responses=problems(401, 404),
            summary="One cluster: state, errors, capacity and HyperNode tree")
def get_cluster(name: str, session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    return inventory.cluster_view(session, inventory.get_cluster(session, name))


@router.get("/clusters/{name}/devices", responses=problems(401, 404),
            summary="One cluster's devices as its DRA drivers publish them, and the claims that hold them")
def get_devices(name: str, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    view = inventory.devices_view(session, name)
    if not principal.is_admin:  # which claims hold a device: other tenants' namespaces and names, not theirs to read
        for device in view["devices"]:
            device["allocated_by"] = ["a ResourceClaim"] * len(device["allocated_by"])
    return view


@router.patch("/clusters/{name}", responses=problems(*ADMIN_ERRORS, 422),
              summary="Edit labels, taints and the topology recipe")
def patch_cluster(name: str, body: ClusterPatch, request: Request, database: DatabaseDep, settings: SettingsDep,
                  _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        cluster = inventory.update_cluster(session, name, labels=body.labels, taints=body.taints,
                                           topology_recipe=body.topology_recipe,
                                           topology_write_back=body.topology_write_back,
                                           global_tiers=settings.topology_tier_labels)
        view = inventory.cluster_view(session, cluster)
    request.app.state.capacity.forget()
    request.app.state.services.wake("scheduler")
    return view


@router.post("/clusters/{name}/cordon", responses=problems(*ADMIN_ERRORS), summary="Stop new placements here")
def cordon(name: str, database: DatabaseDep, _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        return inventory.cluster_view(session, inventory.cordon_cluster(session, name))


@router.post("/clusters/{name}/uncordon", responses=problems(*ADMIN_ERRORS), summary="Allow placements again")
def uncordon(name: str, request: Request, database: DatabaseDep, _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        view = inventory.cluster_view(session, inventory.uncordon_cluster(session, name))
    request.app.state.services.wake("scheduler")
    return view


@router.post("/clusters/{name}/drain", responses=problems(*ADMIN_ERRORS),
             summary="Cordon, and move placements that have not started elsewhere")
def drain(name: str, request: Request, database: DatabaseDep, _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        cluster, waiting = inventory.drain_cluster(session, name)
        view = inventory.cluster_view(session, cluster)
    request.app.state.services.wake("scheduler")
    return {**view, "placements_to_move": waiting}


@router.delete("/clusters/{name}", status_code=204, responses=problems(*ADMIN_ERRORS, 409),
               summary="Forget a cluster (refused while placements live there, unless force=true)")
def remove(name: str, request: Request, database: DatabaseDep, _: AdminDep, force: bool = False) -> Response:
    with database.write() as session:
        inventory.remove_cluster(session, name, force=force, settings=request.app.state.settings)
    request.app.state.capacity.forget()
    request.app.state.services.wake("inventory-sync")
    return Response(status_code=204)


@router.get("/topology-recipes", responses=problems(401),
            summary="The recipes that find a HyperNode tree from node labels: built in, and the admins'")
def list_recipes(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return inventory.list_recipes(session)


@router.post("/topology-recipes", status_code=201, responses=problems(401, 403, 409, 422),
             summary="Add a recipe: node label keys per tier, or Volcano's label discovery levels")
def create_recipe(body: RecipeIn, database: DatabaseDep, _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        return inventory.create_recipe(session, body.name, body.model_dump(exclude_none=True)).as_dict()


@router.delete("/topology-recipes/{name}", status_code=204, responses=problems(401, 403, 404, 409),
               summary="Remove an admin's recipe no cluster is set to")
def delete_recipe(name: str, database: DatabaseDep, _: AdminDep) -> Response:
    with database.write() as session:
        inventory.delete_recipe(session, name)
    return Response(status_code=204)


class DeviceClassMappingIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    device_classes: list[str] = Field(alias="deviceClasses", description="DRA DeviceClass names whose devices count "
                                                                         "as this resource")


@router.get("/device-class-mappings", responses=problems(401),
            summary="Which DRA device classes count as which quota resource (Kueue's deviceClassMappings)")
def list_device_class_mappings(session: SessionDep, _: PrincipalDep) -> list[dict[str, Any]]:
    return inventory.list_mappings(session)


@router.put("/device-class-mappings/{resource:path}", responses=problems(401, 403, 422),
            summary="Count devices of these classes as this quota resource, in quotas, fair shares and views")
def set_device_class_mapping(resource: str, body: DeviceClassMappingIn, database: DatabaseDep,
                             _: AdminDep) -> dict[str, Any]:
    with database.write() as session:
        return inventory.set_mapping(session, resource, body.device_classes)


@router.delete("/device-class-mappings/{resource:path}", status_code=204, responses=problems(401, 403, 404),
               summary="Stop counting devices as this resource")
def delete_device_class_mapping(resource: str, database: DatabaseDep, _: AdminDep) -> Response:
    with database.write() as session:
        inventory.delete_mapping(session, resource)
    return Response(status_code=204)
