"""`archipelago sim`: serve a scenario's clusters until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from clusters.sim.server import SimServer


def run(scenario: Path, host: str = "127.0.0.1", port: int = 6443, kubeconfig_dir: Path = Path("."),
        speed: float = 1.0, tls: bool = False) -> None:
    server = SimServer(Path(scenario), host=host, port=port, speed=speed, tls=tls)
    try:
        paths = server.write_kubeconfigs(Path(kubeconfig_dir))
        print(f"archipelago sim: {len(server.app.clusters)} cluster(s) at {server.url}/clusters/<name> "
              f"(speed {speed:g}x); kubeconfigs:", flush=True)
        for path in paths:
            print(f"  {path}", flush=True)
        print(f"  admin token in {Path(kubeconfig_dir) / 'admin-token'}", flush=True)
        uv = server.uvicorn_server()
        # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal to the handler
        # it found: make that handler a no-op so that run() returns and the process exits with 0.
        previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            asyncio.run(uv.serve(sockets=[server.sock]))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        server.close()
