"""The `archipelago` command. Errors are one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

import typer

import broker
from broker.cli import client
from broker.cli.clusters import clusters_app
from broker.cli.jobs import jobs_app, queues_app, submit, tenants_app, tokens_app
from broker.cli.kubeconfig import kubeconfig
from broker.cli.local import fail, one_line_errors
from broker.cli.overrides import overrides_app
from broker.cli.audit import audit
from broker.cli.devices import device_classes_app
from broker.cli.sso import login
from broker.cli.recipes import recipes_app

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Archipelago: place JobSets across Kubernetes clusters.")
db_app = typer.Typer(no_args_is_help=True, help="The inventory database.")
secret_app = typer.Typer(no_args_is_help=True, help="The key that encrypts kubeconfigs at rest.")
app.add_typer(db_app, name="db")
app.add_typer(secret_app, name="secret")
app.add_typer(jobs_app, name="jobs")
app.add_typer(queues_app, name="queues")
app.add_typer(tenants_app, name="tenants")
app.add_typer(tokens_app, name="tokens")
app.add_typer(clusters_app, name="clusters")
app.add_typer(overrides_app, name="overrides")
app.add_typer(recipes_app, name="recipes")
app.add_typer(device_classes_app, name="device-classes")
app.command()(submit)
app.command()(kubeconfig)
app.command()(audit)
app.command()(login)


@app.callback()
def everywhere(certificate_authority: Path = typer.Option(
        None, "--certificate-authority", envvar="ARCHIPELAGO_CERTIFICATE_AUTHORITY", dir_okay=False,
        help="the CA that signed an https:// broker's certificate, for every command's calls")) -> None:
    """Archipelago: place JobSets across Kubernetes clusters."""
    client.command_authority = certificate_authority  # set on every run of the command: what its ApiClients trust


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(broker.__version__)


@app.command()
@one_line_errors
def serve(host: str = typer.Option(None, help="Address to listen on [default: ARCHIPELAGO_HOST or 127.0.0.1]"),
          port: int = typer.Option(None, help="Port [default: ARCHIPELAGO_PORT or 8000]"),
          workers: int = typer.Option(1, min=1, help="API worker processes (PostgreSQL only); the loop services "
                                                     "run once, in this process, beside them"),
          tls_self_signed: bool = typer.Option(False, "--tls-self-signed",
                                               help="serve HTTPS with a CA and certificate made (once) under the "
                                                    "data directory; clients trust its archipelago-ca.crt")) -> None:
    """Serve the API and dashboard, and run the loop services while this replica holds the leader lease
    (migrates the embedded SQLite database first)."""
    import uvicorn

    from api.app import create_app
    from broker.store.db import migrate
    from broker.store.db.runtime import open_database
    from broker.process.logs import configure_logging
    from broker.process.metrics_server import serve_loop_metrics
    from broker.store.scheduling import engine_config
    from broker.services import beside_the_api, replica
    from broker.process.settings import ConfigError, get_settings
    from broker.process.tls import self_signed

    settings = get_settings()
    configure_logging(settings)
    settings.fernet_key()  # a missing or malformed secret key stops us here, not at the first cluster
    engine_config(settings)  # so does an unknown placement plugin
    if workers > 1 and settings.is_sqlite:
        raise ConfigError("--workers needs PostgreSQL (ARCHIPELAGO_DATABASE_URL): SQLite takes one writer at a time "
                          "and wakes loops within one process only")
    database = open_database(settings, upgrade=settings.is_sqlite)  # fail fast, before binding the port
    if not settings.is_sqlite:
        migrate.require_head(database.engine)
    host, port = host or settings.host, port or settings.port
    tls = {"ssl_certfile": settings.tls_certfile, "ssl_keyfile": settings.tls_keyfile} if settings.tls_certfile else {}
    if tls_self_signed:
        if tls:
            raise ConfigError("--tls-self-signed or ARCHIPELAGO_TLS_CERTFILE and _KEYFILE, not both")
        made = self_signed(settings.data_dir / "tls", host)
        tls = {"ssl_certfile": made.certfile, "ssl_keyfile": made.keyfile}
        typer.echo(f"TLS: a self-signed certificate; clients trust its CA, {made.ca}", err=True)
    typer.echo(f"Archipelago {broker.__version__} on {'https' if tls else 'http'}://{host}:{port} "
               f"(database {database.engine.url.render_as_string(hide_password=True)}"
               f"{f', {workers} API workers' if workers > 1 else ''})", err=True)
    loop_metrics = None
    if settings.loops_metrics_port is not None:
        try:
            loop_metrics = serve_loop_metrics(database, settings, host, settings.loops_metrics_port)
        except OSError as exc:
            raise ConfigError(f"ARCHIPELAGO_LOOPS_METRICS_PORT: cannot listen on {host}:{settings.loops_metrics_port}:"
                              f" {exc.strerror}") from None
    try:
        if workers == 1:
            if settings.run_loops:
                beside_the_api()
            uvicorn.run(create_app(settings, database), host=host, port=port, log_config=None, **tls)
            return
        loops = replica(database, settings, run_loops=settings.run_loops)
        loops.start()
        try:  # uvicorn's supervisor: it returns once SIGTERM or Ctrl-C has stopped the workers
            uvicorn.run("api.app:api_worker_app", factory=True, host=host, port=port, workers=workers,
                        log_config=None, **tls)
        finally:
            loops.stop()
    finally:
        if loop_metrics is not None:
            loop_metrics.shutdown()
            loop_metrics.server_close()
        if workers > 1:
            database.dispose()


@app.command()
def agent(broker_url: str = typer.Option(..., "--broker", help="the broker's URL, as this member reaches it"),
          token: str = typer.Option(..., "--token", envvar="ARCHIPELAGO_AGENT_TOKEN",
                                    help="the token `clusters add NAME --mode pull` printed"),
          kubeconfig: Path = typer.Option(None, "--kubeconfig", help="this member's kubeconfig (inline credentials) "
                                          "[default: the pod's ServiceAccount]"),
          context: str = typer.Option(None, "--context", help="context to use [default: current-context]"),
          interval: float = typer.Option(5.0, "--interval", min=0.1,
                                         help="seconds between heartbeats; well under the broker's "
                                              "ARCHIPELAGO_NOT_READY_GRACE")) -> None:
    """Run a pull member's agent: it calls out to the broker (which cannot reach this member) and works on its
    own cluster for it. Stops on SIGTERM or Ctrl-C."""
    import signal
    import threading

    from broker.process.agent import Agent, in_cluster_kubeconfig
    from broker.cli.client import ApiClient
    from clusters.kubeconfig import KubeconfigError
    from clusters.member import MemberClient

    try:
        text = kubeconfig.read_text() if kubeconfig else in_cluster_kubeconfig()
        member = MemberClient.from_kubeconfig(text, context)
    except (OSError, ValueError, KubeconfigError) as exc:
        fail(f"cannot reach this member: {exc}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    typer.echo(f"archipelago agent: {member.api_server} -> {broker_url}", err=True)
    try:
        Agent(ApiClient(broker_url, token), member).run(interval, stop)
    except KeyboardInterrupt:
        pass
    finally:
        member.close()


@db_app.command("upgrade")
@one_line_errors
def db_upgrade(revision: str = typer.Argument("head")) -> None:
    """Apply the migrations up to REVISION."""
    from broker.process.settings import get_settings
    from broker.store.db import migrate
    from broker.store.db.runtime import open_database

    database = open_database(get_settings(), upgrade=False)
    migrate.upgrade(database.engine, revision)
    typer.echo(f"database at {database.engine.url.render_as_string(hide_password=True)} is at {revision}")
    database.dispose()


@secret_app.command("generate")
def secret_generate() -> None:
    """Print a new value for ARCHIPELAGO_SECRET_KEY."""
    from cryptography.fernet import Fernet

    typer.echo(Fernet.generate_key().decode())


@app.command()
def demo(port: int = typer.Option(8000, help="dashboard and API port"),
         speed: float = typer.Option(20.0, help="simulated seconds per real second"),
         duration: float = typer.Option(None, help="stop after this many seconds [default: run until Ctrl-C]"),
         workdir: Path = typer.Option(Path("demo-run"), help="where the demo keeps its database and kubeconfigs"),
         ) -> None:
    """Run the whole federation on this machine: simulated clusters, the broker, tenants and a job stream."""
    from broker.process.demo import run_demo

    run_demo(port=port, speed=speed, duration=duration, workdir=workdir)


@app.command()
def sim(scenario: Path = typer.Option(..., exists=True, dir_okay=False, help="Scenario YAML"),
        host: str = "127.0.0.1", port: int = 6443,
        kubeconfig_dir: Path = typer.Option(Path("."), help="Where to write <cluster>.kubeconfig"),
        speed: float = typer.Option(1.0, help="Simulated seconds per real second"),
        tls: bool = typer.Option(False, help="Serve HTTPS with a self-signed CA")) -> None:
    """Serve simulated member clusters (for tests, benchmarks and the demo)."""
    from clusters.sim.cli import run

    run(scenario, host=host, port=port, kubeconfig_dir=kubeconfig_dir, speed=speed, tls=tls)
