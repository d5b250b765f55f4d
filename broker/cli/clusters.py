"""`archipelago clusters ...`: register member clusters and manage them on a running broker."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NoReturn, Optional

import typer

from broker.cli.client import ApiClient, ClientError
from broker.cli.output import (Output, OutputOption, ServerOption, TokenOption, calling, client, cut, emit, key_values,
                               read_file, usage_error)
from clusters.system import NAME_PREFIX, SYSTEM_NAMESPACE

if TYPE_CHECKING:  # the rest is imported where it is used: `--help` and the API commands stay quick
    from clusters.kubeconfig import LoadedKubeconfig
    from clusters.member import MemberClient

clusters_app = typer.Typer(no_args_is_help=True, help="Member clusters: register, inspect, cordon, drain, remove.")


def _capacity(cluster: dict, resource: str) -> str:
    amounts = cluster["capacity"].get(resource)
    return f"{amounts['free']}/{amounts['allocatable']}" if amounts else ""


CLUSTER_COLUMNS = [
    ("NAME", lambda c: c["name"]), ("STATE", lambda c: c["state"]), ("VERSION", lambda c: c["kubernetes_version"]),
    ("NODES", lambda c: c["nodes"]), ("GPU FREE", lambda c: _capacity(c, "nvidia.com/gpu")),
    ("CPU FREE", lambda c: _capacity(c, "cpu")), ("TOPOLOGY", lambda c: c["hypernode_source"]),
    ("LABELS", lambda c: ",".join(f"{k}={v}" for k, v in c["labels"].items())),
    ("ERROR", cut(lambda c: c["last_error"] or "", 60)),
]


RECIPE_HELP = ("how its HyperNode tree is found from node labels when it has no HyperNode objects: auto, a built-in "
               "recipe (archipelago, aws, gke, nvlink) or an admin's (`archipelago recipes list`)")
WRITE_BACK_HELP = ("write the tree found from its labels back to the member as HyperNode objects, for its own Volcano "
                   "(the identity needs deploy/member-topology-rbac.yaml; `join --topology-write-back` grants it)")


def _tree_lines(hypernodes: list[dict], depth: int = 0) -> list[str]:
    lines = []
    for hypernode in hypernodes:
        free = ", ".join(f"{r}={q}" for r, q in hypernode["free"].items() if r in ("cpu", "nvidia.com/gpu"))
        lines.append(f"{'  ' * depth}{hypernode['name']} (tier {hypernode['tier']}, {hypernode['nodes']} nodes"
                     f"{', free ' + free if free else ''})")
        lines.extend(_tree_lines(hypernode["children"], depth + 1))
    return lines


@clusters_app.command("add")
def add(name: str = typer.Argument(..., help="the cluster's name in the broker"),
        kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="kubeconfig file (inline credentials); "
                                                  "push mode only"),
        context: Optional[str] = typer.Option(None, "--context", help="context to use [default: current-context]"),
        mode: str = typer.Option("push", "--mode", help="push: the broker calls the member; pull: an agent in the "
                                 "member calls the broker (prints the agent's token, once)"),
        label: list[str] = typer.Option([], "--label", help="cluster label key=value (repeatable)"),
        topology_recipe: str = typer.Option("auto", "--topology-recipe", help=RECIPE_HELP),
        topology_write_back: bool = typer.Option(False, "--topology-write-back", help=WRITE_BACK_HELP),
        output: Output = OutputOption, server: Optional[str] = ServerOption,
        token: Optional[str] = TokenOption) -> None:
    """Register a member cluster. Push: the broker checks it can reach it, that JobSet is installed and that the
    kubeconfig's identity holds the permissions of deploy/member-rbac.yaml (see `join`). Pull: the broker mints
    the token of the member's `archipelago agent` (deploy/agent.yaml) and prints it."""
    if mode not in ("push", "pull"):
        usage_error("--mode must be push or pull")
    if (mode == "push") != (kubeconfig is not None):
        usage_error("--kubeconfig is needed in push mode, and refused in pull mode (the broker never calls a pull "
                    "member)")
    body = {"name": name, "mode": mode, "context": context, "labels": key_values(label, "--label", "key=value"),
            "topology_recipe": topology_recipe, **({"topology_write_back": True} if topology_write_back else {}),
            **({"kubeconfig": read_file(kubeconfig).decode()} if kubeconfig else {})}
    cluster = calling(lambda: client(server, token).post("/api/v1/clusters", json=body))
    emit(cluster, output, CLUSTER_COLUMNS)
    if mode == "pull" and output is Output.table:
        typer.echo(f"agent token (shown this once): {cluster['agent_token']}")


AdminKubeconfigOption = typer.Option(..., "--kubeconfig", help="an admin kubeconfig of the member: used from this "
                                      "process only, never sent to the broker")
NamespaceOption = typer.Option(SYSTEM_NAMESPACE, "--namespace",
                               help="the namespace of the broker's ServiceAccount (named archipelago-...)")


def _fail(message: str) -> NoReturn:
    typer.echo(f"archipelago: {message}", err=True)
    raise typer.Exit(1)


@contextlib.contextmanager
def _admin_member(kubeconfig: Path, context: str | None, namespace: str) -> Iterator[tuple[LoadedKubeconfig,
                                                                                            MemberClient]]:
    """The member as the admin kubeconfig reaches it; every member failure is one line."""
    from broker.process.settings import ConfigError, get_settings
    from broker.store.inventory import kubeconfig_policy
    from clusters import access
    from clusters.kubeconfig import KubeconfigError, load_kubeconfig
    from clusters.member import MemberClient, MemberError

    if not namespace.startswith(NAME_PREFIX):
        usage_error(f"--namespace must start with {NAME_PREFIX!r}: unjoin deletes it, so it must be the "
                    "broker's own")
    try:
        settings = get_settings()
        loaded = load_kubeconfig(read_file(kubeconfig).decode(), context, kubeconfig_policy(settings))
    except (KubeconfigError, ConfigError, UnicodeDecodeError) as exc:
        usage_error(f"{kubeconfig}: {exc}")
    member = MemberClient(loaded, settings.member_timeout)
    try:
        yield loaded, member
    except (MemberError, access.JoinError) as exc:
        _fail(str(exc))
    finally:
        member.close()


def _registered(broker: ApiClient, name: str) -> dict | None:
    try:
        return broker.get(f"/api/v1/clusters/{name}")
    except ClientError as exc:
        if exc.status == 404:
            return None
        _fail(str(exc))


def _same_member(cluster: dict, member: MemberClient) -> None:
    from clusters.kubeconfig import server_identity

    if cluster["mode"] == "pull":
        _fail(f"the name {cluster['name']} is taken by a pull member; choose another name")
    if server_identity(cluster["api_server"]) != server_identity(member.api_server):
        _fail(f"the name {cluster['name']} is taken: the broker has it for {cluster['api_server']}, not "
              f"{member.api_server}; choose another name")


@clusters_app.command("join")
def join(name: str = typer.Argument(..., help="the cluster's name in the broker"),
         kubeconfig: Path = AdminKubeconfigOption,
         context: Optional[str] = typer.Option(None, "--context", help="context to use [default: current-context]"),
         namespace: str = NamespaceOption,
         label: list[str] = typer.Option([], "--label", help="cluster label key=value (repeatable)"),
         topology_recipe: str = typer.Option("auto", "--topology-recipe", help=RECIPE_HELP),
         topology_write_back: bool = typer.Option(False, "--topology-write-back",
                                                  help=WRITE_BACK_HELP + "; also applies that role"),
         output: Output = OutputOption, server: Optional[str] = ServerOption,
         token: Optional[str] = TokenOption) -> None:
    """Give the broker a least-privilege identity on a member, and register the member with it.

    With the admin kubeconfig, applies deploy/member-rbac.yaml there (namespace, ServiceAccount, ClusterRole,
    binding, token Secret), waits for the token and registers a kubeconfig holding only that. Safe to rerun."""
    labels = key_values(label, "--label", "key=value")
    broker = client(server, token)
    with _admin_member(kubeconfig, context, namespace) as (loaded, member):
        existing = _registered(broker, name)
        if existing is not None:
            _same_member(existing, member)
        from clusters import access

        bearer = access.join(member, namespace, write_back=topology_write_back)
        if existing is not None:
            typer.echo(f"cluster {name} was joined already; its objects on {member.api_server} are up to date")
            return
        body = {"name": name, "kubeconfig": access.token_kubeconfig(loaded, name, bearer), "labels": labels,
                "topology_recipe": topology_recipe, "topology_write_back": topology_write_back}
        emit(calling(lambda: broker.post("/api/v1/clusters", json=body)), output, CLUSTER_COLUMNS)


@clusters_app.command("unjoin")
def unjoin(name: str = typer.Argument(..., help="the cluster's name in the broker"),
           kubeconfig: Path = AdminKubeconfigOption,
           context: Optional[str] = typer.Option(None, "--context", help="context to use [default: current-context]"),
           namespace: str = NamespaceOption,
           force: bool = typer.Option(False, "--force", help="even while placements live there"),
           server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Remove the cluster from the broker, then the broker's identity and its grants from the member."""
    broker = client(server, token)
    with _admin_member(kubeconfig, context, namespace) as (_, member):
        existing = _registered(broker, name)
        if existing is not None:
            _same_member(existing, member)
            calling(lambda: broker.delete(f"/api/v1/clusters/{name}", params={"force": str(force).lower()}))
        from clusters import access

        access.unjoin(member, namespace)
        typer.echo(f"cluster {name} unjoined: removed from the broker, and the broker's ServiceAccount, ClusterRole "
                   f"and binding from {member.api_server}")


@clusters_app.command("list")
def list_(output: Output = OutputOption, server: Optional[str] = ServerOption,
          token: Optional[str] = TokenOption) -> None:
    """Every cluster with its state and free capacity."""
    emit(calling(lambda: client(server, token).get("/api/v1/clusters")), output, CLUSTER_COLUMNS)


@clusters_app.command("get")
def get(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
        token: Optional[str] = TokenOption) -> None:
    """One cluster: state, errors, capacity and its HyperNode tree."""
    cluster = calling(lambda: client(server, token).get(f"/api/v1/clusters/{name}"))
    if output is not Output.table:
        emit(cluster, output)
        return
    emit(cluster, output, CLUSTER_COLUMNS)
    for warning in cluster["warnings"]:
        typer.echo(f"warning: {warning}")
    for driver, counts in cluster["devices"].items():
        typer.echo(f"devices of {driver}: {counts['devices']}, {counts['allocated']} held by ResourceClaims")
    typer.echo("\n".join(_tree_lines(cluster["hypernodes"])) or "no HyperNodes")


@clusters_app.command("topology")
def topology(name: str, recipe: Optional[str] = typer.Option(None, "--recipe", help=RECIPE_HELP),
             write_back: Optional[bool] = typer.Option(None, "--write-back/--no-write-back", help=WRITE_BACK_HELP),
             output: Output = OutputOption, server: Optional[str] = ServerOption,
             token: Optional[str] = TokenOption) -> None:
    """Choose how the cluster's HyperNode tree is found from its node labels (found again at once), and whether it
    is written back to the member; with neither, show its topology source and warnings."""
    body = {k: v for k, v in (("topology_recipe", recipe), ("topology_write_back", write_back)) if v is not None}
    api = client(server, token)
    cluster = calling(lambda: api.patch(f"/api/v1/clusters/{name}", json=body) if body
                      else api.get(f"/api/v1/clusters/{name}"))
    emit(cluster, output, CLUSTER_COLUMNS)
    for warning in cluster["warnings"] if output is Output.table else ():
        typer.echo(f"warning: {warning}")


def _action(name: str, verb: str, output: Output, server: Optional[str], token: Optional[str]) -> None:
    emit(calling(lambda: client(server, token).post(f"/api/v1/clusters/{name}/{verb}")), output, CLUSTER_COLUMNS)


@clusters_app.command("cordon")
def cordon(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
           token: Optional[str] = TokenOption) -> None:
    """Stop new placements on the cluster."""
    _action(name, "cordon", output, server, token)


@clusters_app.command("uncordon")
def uncordon(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
             token: Optional[str] = TokenOption) -> None:
    """Allow placements on the cluster again."""
    _action(name, "uncordon", output, server, token)


@clusters_app.command("drain")
def drain(name: str, output: Output = OutputOption, server: Optional[str] = ServerOption,
          token: Optional[str] = TokenOption) -> None:
    """Cordon, and move placements that have not started to other clusters."""
    _action(name, "drain", output, server, token)


@clusters_app.command("remove")
def remove(name: str, force: bool = typer.Option(False, "--force", help="even while placements live there"),
           server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Forget a cluster (refused while placements live there, unless --force)."""
    calling(lambda: client(server, token).delete(f"/api/v1/clusters/{name}", params={"force": str(force).lower()}))
    typer.echo(f"cluster {name} removed")
