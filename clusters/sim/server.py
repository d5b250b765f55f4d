"""Wiring of scenario, clock, app, socket, TLS and uvicorn, shared by the CLI and the test helper."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import uvicorn

from clusters.sim import scenario as scenarios
from clusters.sim.app import SimApp, protocol_class
from clusters.sim.clock import SimClock
from clusters.sim.tls import ServingCert, kubeconfig, make_serving_cert


class _Server(uvicorn.Server):
    """Ends open watch streams at once on shutdown instead of waiting for the graceful timeout."""

    def __init__(self, config: uvicorn.Config, app: SimApp) -> None:
        super().__init__(config)
        self.sim_app = app

    def handle_exit(self, sig, frame) -> None:
        self.sim_app.stopping = True
        self.sim_app.close_streams()
        super().handle_exit(sig, frame)


class SimServer:
    """Every cluster of a scenario behind one listening socket (bound at construction: port 0 picks a free one)."""

    def __init__(self, scenario: dict | str | Path, host: str = "127.0.0.1", port: int = 6443, speed: float = 1.0,
                 tls: bool = False, admin_token: str | None = None) -> None:
        self.clock = SimClock(speed)
        self.app = SimApp(scenarios.load(scenario), self.clock, admin_token)
        self.host = host
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(2048)
        self.port = self.sock.getsockname()[1]
        self.cert: ServingCert | None = make_serving_cert(host) if tls else None
        self._certdir: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.cert else 'http'}://{host}:{self.port}"

    def cluster_url(self, name: str) -> str:
        return f"{self.url}/clusters/{name}"

    def kubeconfig(self, name: str) -> str:
        """For a cluster, or for one of its aliases (its other address)."""
        cluster = self.app.clusters[self.app.aliases.get(name, name)]
        return kubeconfig(name, self.cluster_url(name), cluster.token, self.cert.ca_pem if self.cert else None)

    def write_kubeconfigs(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name in self.app.clusters:
            path = directory / f"{name}.kubeconfig"
            path.touch(mode=0o600)
            path.write_text(self.kubeconfig(name))
            paths.append(path)
        token = directory / "admin-token"
        token.touch(mode=0o600)
        token.write_text(self.app.admin_token + "\n")
        return paths

    def uvicorn_server(self) -> _Server:
        options: dict = {}
        if self.cert is not None:
            self._certdir = tempfile.TemporaryDirectory(prefix="archipelago-sim-")
            certfile, keyfile = self.cert.write(Path(self._certdir.name))
            options.update(ssl_certfile=str(certfile), ssl_keyfile=str(keyfile))
        config = uvicorn.Config(self.app, http=protocol_class(self.app), lifespan="on", log_level="warning",
                                access_log=False, timeout_graceful_shutdown=2, timeout_keep_alive=30, **options)
        return _Server(config, self.app)

    def close(self) -> None:
        self.sock.close()
        if self._certdir is not None:
            self._certdir.cleanup()
            self._certdir = None
