"""`python -m clusters.sim --scenario FILE ...` (what `archipelago sim` runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from clusters.sim.cli import run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="archipelago sim", description="Simulate member Kubernetes clusters.")
    parser.add_argument("--scenario", type=Path, required=True, help="scenario YAML file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--kubeconfig-dir", type=Path, default=Path("."), help="where <cluster>.kubeconfig go")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a self-signed CA")
    args = parser.parse_args(argv)
    run(args.scenario, host=args.host, port=args.port, kubeconfig_dir=args.kubeconfig_dir, speed=args.speed,
        tls=args.tls)


if __name__ == "__main__":
    main()
