"""How long the `archipelago` command takes to start: `--help`, `version`, and a request (`jobs list` against a port
where nothing listens, so that only the CLI's own start is measured). Best of N runs each.

    python bench/cli.py [--runs N]

Prints a line per command, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CLI = str(Path(sys.executable).with_name("archipelago"))
COMMANDS = {"help": ["--help"], "version": ["version"],
            "request": ["jobs", "list", "--server", "http://127.0.0.1:9", "--token", "t"]}


def best(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([CLI, *args], capture_output=True)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    figures = {name: best(args, runs) for name, args in COMMANDS.items()}
    for name, seconds in figures.items():
        print(f"archipelago {' '.join(COMMANDS[name])}: {seconds:.2f} s")
    print(json.dumps({f"{name}_s": round(seconds, 3) for name, seconds in figures.items()}))


if __name__ == "__main__":
    main()
