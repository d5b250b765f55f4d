"""`archipelago sim`: serve a scenario's clusters until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
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
        asyncio.run(uv.serve(sockets=[server.sock]))
    finally:
        server.close()
