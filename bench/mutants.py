"""Mutation testing of the pure core and the outbox (`make mutants`; not part of `make test`, too slow).

mutmut (configured in pyproject.toml's [tool.mutmut]) changes one thing at a time in every function of
the pure core (broker/placement, broker/status.py, broker/jobset.py, the pure Kubernetes helpers in
clusters/) and of the outbox rules (broker/dispatch.py), and runs the tests that reach that function
(SQLite only, no browser, no crash subprocesses) against each change. A change no test notices is a
surviving mutant. A run starts from scratch (mutants/ is wiped); `--again` keeps the mutants the last run
killed and tests only the rest again, with the tests written since.

Prints the score per module (mutants killed or timed out ÷ mutants), per group against its target,
every survivor's diff, then one JSON object as the last line. Exits 1 when a group is below its target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code

from table import print_table

ROOT = Path(__file__).resolve().parent.parent
OUTBOX = "broker/dispatch.py"
TARGETS = {"pure core": 0.90, "outbox": 0.80}
DETECTED = ("killed", "timeout")


def group_of(module: str) -> str:
    return "outbox" if module == OUTBOX else "pure core"


def run_mutmut(max_children: int, again: bool, log: Path) -> None:
    if again:
        forget_survivors()
    else:
        shutil.rmtree(log.parent, ignore_errors=True)
    log.parent.mkdir(exist_ok=True)
    # the tests run inside mutants/, where ../shared is not beside them
    env = {**os.environ, "ARCHIPELAGO_SHARED_DIR": os.environ.get("ARCHIPELAGO_SHARED_DIR")
           or str(ROOT.parent / "shared")}
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)],
                              env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        print(log.read_text()[-4000:])
        sys.exit(f"mutmut failed (exit {done.returncode}); its output is in {log}")


def forget_survivors() -> None:
    """Make mutmut test again every mutant the last run did not kill (it tests only mutants without a result)."""
    for meta in (ROOT / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        codes.update({name: None for name, code in codes.items() if status_by_exit_code[code] not in DETECTED})
        meta.write_text(json.dumps(data))


def read_results() -> dict[str, dict[str, str]]:
    """module path → mutant name → status, from the .meta files mutmut leaves beside each mutated file."""
    results = {}
    for meta in sorted((ROOT / "mutants").rglob("*.py.meta")):
        module = str(meta.relative_to(ROOT / "mutants"))[:-len(".meta")]
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        results[module] = {name: status_by_exit_code[code] for name, code in codes.items()}
    return results


def changed_lines(mutant: str, module: str) -> list[str]:
    """The lines a survivor changes (its diff, as `mutmut show` prints it, without the file headers)."""
    diff = get_diff_for_mutant(mutant, path=module)
    return [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def score(statuses) -> tuple[int, int]:
    statuses = list(statuses)
    return sum(s in DETECTED for s in statuses), len(statuses)


def percent(detected: int, total: int) -> str:
    return f"{detected}/{total} = {100 * detected / total:.1f}%" if total else "no mutants"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--again", action="store_true",
                        help="keep the last run's killed mutants and test only the others again (after new tests)")
    args = parser.parse_args()

    os.chdir(ROOT)  # mutmut's own reading of its results is relative to the project
    log = ROOT / "mutants" / "mutmut.log"
    started = time.monotonic()
    run_mutmut(args.max_children, args.again, log)
    seconds = time.monotonic() - started
    results = read_results()
    unchecked = sum(status == "not checked" for statuses in results.values() for status in statuses.values())
    if unchecked:
        sys.exit(f"mutmut stopped with {unchecked} mutants not checked; its output is in {log}")

    survivors = {(module, name): status for module, statuses in results.items() for name, status in statuses.items()
                 if status not in DETECTED}
    print(f"{len(survivors)} surviving mutants:")
    for (module, name), status in sorted(survivors.items()):
        print(f"  {name} ({status})")
        for line in changed_lines(name, module):
            print(f"      {line}")
    print()

    rows, modules = [], {}
    for module, statuses in results.items():
        detected, total = modules[module] = score(statuses.values())
        rows.append((module, percent(detected, total), ""))
    groups = {}
    for group, target in TARGETS.items():
        detected, total = groups[group] = score(s for module, statuses in results.items()
                                                if group_of(module) == group for s in statuses.values())
        rows.append((group, percent(detected, total), f"≥ {100 * target:.0f}%"))
    rows.append(("run time", f"{seconds / 60:.1f} min", f"{args.max_children} at once"))
    below = [g for g, (detected, total) in groups.items() if not total or detected / total < TARGETS[g]]
    print_table(rows, {
        "modules": {m: {"killed": d, "mutants": t} for m, (d, t) in modules.items()},
        "groups": {g: {"killed": d, "mutants": t, "score": round(d / t, 4) if t else None, "target": TARGETS[g]}
                   for g, (d, t) in groups.items()},
        "survivors": sorted(name for _, name in survivors), "seconds": round(seconds, 1), "below_target": below})
    sys.exit(1 if below else 0)


if __name__ == "__main__":
    main()
