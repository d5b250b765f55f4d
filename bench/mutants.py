"""Mutation testing of the pure core and the outbox (`make mutants`; not part of `make test`, too slow).

mutmut changes one thing at a time in every function of the pure core (broker/engine/placement, broker/engine/status.py,
broker/engine/jobset.py, the pure Kubernetes rules in clusters/) and of the outbox rules (broker/store/outbox/), and
runs the tests that reach that function against each change; a change no test notices is a surviving
mutant. Each survivor the project knows of is explained in bench/mutants_explained.toml (equivalent: no behaviour
can tell it apart; untested: what a test would have to check, and why none does yet). Each group is tested by its own tests: the pure core by the unit tests (no database, no simulator),
the outbox by its rules' tests on rows written straight into SQLite (tests/outbox: milliseconds each, run
first, they kill most of its mutants) and the propagation tests over the simulator (no crash subprocesses).
A group runs in its own folder under mutants/, a view of the checkout with that group's [tool.mutmut] settings.

A run starts its groups from scratch (their folders under mutants/ are wiped; `--group` runs one); `--again`
keeps the mutants the last run killed and tests only the rest again, with the tests written since. Prints
every survivor with its explanation (the diff of those without one), the score per module (mutants killed or
timed out ÷ mutants) and per group against its target, then one JSON object as the last line. Exits 1 when a group
is below its target or a survivor is unexplained.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from mutmut.configuration import reset_config
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from sqlalchemy import create_engine

from broker.store.db import migrate

from table import print_table

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"
DETECTED = ("killed", "timeout")
ONLY_SQLITE = ["-m", "not postgres and not browser", "-p", "no:cacheprovider"]
FASTEST_FIRST = "fastest_first"  # bench/fastest_first.py, a pytest plugin the views hold
EXPLAINED = Path(__file__).with_name("mutants_explained.toml")


class Group:
    def __init__(self, name: str, target: float, mutate: list[str], tests: list[str]) -> None:
        self.name, self.target, self.mutate, self.tests = name, target, mutate, tests
        self.folder = WORK / name.replace(" ", "-")

    def settings(self) -> str:
        """The [tool.mutmut] table of this group's view (mutmut reads it from the folder it runs in)."""
        return "\n".join([
            "[tool.mutmut]",
            f"source_paths = {json.dumps(['broker/', 'clusters/', 'api/', 'migrations/'])}",  # all it imports
            f"only_mutate = {json.dumps(self.mutate)}",
            # manifests the tests render and check; the plugin that orders a mutant's tests
            f"also_copy = {json.dumps(['deploy/', FASTEST_FIRST + '.py'])}",
            f"pytest_add_cli_args = {json.dumps(ONLY_SQLITE + ['-p', FASTEST_FIRST])}",
            f"pytest_add_cli_args_test_selection = {json.dumps(self.tests)}", ""])


GROUPS = [
    Group("pure core", 0.90,
          ["broker/engine/placement/*", "broker/engine/status.py", "broker/engine/jobset.py", "clusters/rules/labels.py",
           "clusters/rules/quantity.py", "clusters/rules/pods.py", "clusters/rules/taints.py", "clusters/topology.py"],
          ["tests/placement", "tests/status", "tests/clusters/test_topology.py", "tests/clusters/test_topology_warnings.py",
           "tests/clusters/test_label_selectors.py", "tests/clusters/test_pin.py", "tests/clusters/test_pod_requests.py",
           "tests/clusters/test_tolerations.py", "tests/clusters/test_rule_boundaries.py"]),
    Group("outbox", 0.80, ["broker/store/outbox/*"],
          ["tests/outbox", "tests/propagation", "--ignore=tests/propagation/test_crash.py"]),
]


def prepare(group: Group) -> None:
    """The group's view of the checkout: its code and tests linked, pyproject.toml with its settings added."""
    group.folder.mkdir(parents=True)
    for name in ("broker", "clusters", "api", "migrations", "tests", "deploy"):
        (group.folder / name).symlink_to(ROOT / name)
    (group.folder / f"{FASTEST_FIRST}.py").symlink_to(ROOT / "bench" / f"{FASTEST_FIRST}.py")
    (group.folder / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + "\n" + group.settings())


def forget_survivors(group: Group, only: str | None = None) -> None:
    """Make mutmut test again every mutant the last run did not kill (it tests only mutants without a result), or
    those of them `only` names (the others keep their verdict)."""
    for meta in (group.folder / "mutants").rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        codes.update({name: None for name, code in codes.items() if status_by_exit_code[code] not in DETECTED
                      and (only is None or fnmatch.fnmatch(name, only))})
        meta.write_text(json.dumps(data))


def covers(group: Group, pattern: str) -> bool:
    """Whether mutants named by `pattern` (e.g. broker.engine.placement.feasibility*) can be in this group's modules."""
    prefix = pattern.split("*")[0].replace(".", "/")
    return any(path.rstrip("*").startswith(prefix) or prefix.startswith(path.rstrip("*").removesuffix(".py"))
               for path in group.mutate)


def migrated_template(group: Group) -> Path:
    """A migrated SQLite database the tests copy (tests/conftest.py), made once for every mutant's tests."""
    path = group.folder / "migrated.db"
    path.unlink(missing_ok=True)
    engine = create_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    return path


def run_mutmut(group: Group, max_children: int, only: str | None = None) -> None:
    # the tests run inside the view's mutants/, where ../shared is not beside them
    env = {**os.environ, "ARCHIPELAGO_SHARED_DIR": os.environ.get("ARCHIPELAGO_SHARED_DIR")
           or str(ROOT.parent / "shared"), "ARCHIPELAGO_HYPOTHESIS_PROFILE": "mutants",
           "ARCHIPELAGO_SQLITE_TEMPLATE": str(migrated_template(group))}
    log = group.folder / "mutmut.log"
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children),
                               *([only] if only else [])],
                              cwd=group.folder, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        print(log.read_text()[-4000:])
        sys.exit(f"mutmut failed on the {group.name} (exit {done.returncode}); its output is in {log}")


def read_results(group: Group, only: str | None = None) -> dict[str, dict[str, str]]:
    """module path → mutant name → status, from the .meta files mutmut leaves beside each mutated file."""
    results = {}
    for meta in sorted((group.folder / "mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if only:
            codes = {name: code for name, code in codes.items() if fnmatch.fnmatch(name, only)}
        if codes:
            module = str(meta.relative_to(group.folder / "mutants"))[:-len(".meta")]
            results[module] = {name: status_by_exit_code[code] for name, code in codes.items()}
    return results


def changed_lines(group: Group, mutant: str, module: str) -> list[str]:
    """The lines a survivor changes (its diff, as `mutmut show` prints it, without the file headers)."""
    os.chdir(group.folder)  # mutmut reads its files relative to where it ran
    reset_config()
    diff = get_diff_for_mutant(mutant, path=module)
    return [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def function_of(mutant: str) -> str:
    """The dotted name of the function a mutant changes: mutmut's `broker.engine.placement.cycle.hold.xǁHoldingǁ_hold__mutmut_3`
    is `broker.engine.placement.cycle.hold.Holding._hold`, `broker.engine.jobset.x__exclusive_key__mutmut_6` is
    `broker.engine.jobset._exclusive_key`."""
    module, _, mangled = mutant.rsplit("__mutmut_", 1)[0].rpartition(".")
    return f"{module}.{'.'.join(mangled[2:].split('ǁ')) if mangled.startswith('xǁ') else mangled[2:]}"


def mutated_text(lines: list[str]) -> str:
    """What a mutant writes in place of the original (its diff's added lines, stripped): with its function, how
    bench/mutants_explained.toml names it, as mutmut's numbers move whenever the function changes."""
    return "\n".join(line[1:].strip() for line in lines if line.startswith("+"))


def load_explanations(path: Path = EXPLAINED) -> dict[tuple[str, str], tuple[str, str]]:
    """(function, mutated text) → (verdict, reason), from the file's [[survivor]] tables."""
    explained = {}
    for entry in tomllib.loads(path.read_text()).get("survivor", []):
        if entry["verdict"] not in ("equivalent", "untested"):
            sys.exit(f"{path.name}: {entry['function']}: verdict must be equivalent or untested, not "
                     f"{entry['verdict']!r}")
        for text in entry["mutated"]:
            explained[(entry["function"], text.strip())] = (entry["verdict"], entry["reason"])
    return explained


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
    parser.add_argument("--only", metavar="PATTERN",
                        help="only the mutants whose names match, e.g. 'broker.engine.placement.feasibility*' (one module's "
                             "score while writing its tests; the group's score then covers those mutants only)")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: report the last run's results again (after explaining survivors)")
    parser.add_argument("--group", choices=[g.folder.name for g in GROUPS],
                        help="only this group (e.g. the outbox's run apart from the pure core's, or beside it)")
    args = parser.parse_args()

    rows, figures, below = [], {"modules": {}, "groups": {}, "survivors": [], "unexplained": [], "stale_explanations": []}, []
    explanations = load_explanations()
    groups = [g for g in GROUPS if (not args.only or covers(g, args.only)) and args.group in (None, g.folder.name)]
    if not groups:
        sys.exit(f"no group mutates a module that mutants named {args.only!r} could be in")
    for group in groups:
        started = time.monotonic()
        if args.report:
            pass
        elif args.again:
            forget_survivors(group, args.only)
            run_mutmut(group, args.max_children, args.only)
        else:
            shutil.rmtree(group.folder, ignore_errors=True)  # the other group's last results stay
            prepare(group)
            run_mutmut(group, args.max_children, args.only)
        minutes = (time.monotonic() - started) / 60
        results = read_results(group, args.only)
        unchecked = sum(s == "not checked" for statuses in results.values() for s in statuses.values())
        if unchecked:
            sys.exit(f"mutmut stopped with {unchecked} mutants of the {group.name} not checked; see "
                     f"{group.folder / 'mutmut.log'}")

        survivors = sorted((module, name, status) for module, statuses in results.items()
                           for name, status in statuses.items() if status not in DETECTED)
        verdicts = {"equivalent": 0, "untested": 0, "unexplained": 0}
        matched = set()
        print(f"{group.name}: {len(survivors)} surviving mutants")
        for module, name, status in survivors:
            lines = changed_lines(group, name, module)
            key = (function_of(name), mutated_text(lines))
            verdict, reason = explanations.get(key, ("unexplained", ""))
            matched.add(key)
            verdicts[verdict] += 1
            print(f"  {name} ({status}, {verdict}{': ' + reason if reason else ''})")
            if verdict == "unexplained":
                for line in lines:
                    print(f"      {line}")
                figures["unexplained"].append(name)
        if not args.only:  # an explanation of this group's modules that no survivor matches: killed since
            stale = sorted(key for key in explanations if key not in matched and any(
                key[0].startswith(module.removesuffix(".py").replace("/", ".") + ".") for module in results))
            for function, text in stale:
                print(f"  explained but not among the survivors (killed since? remove it): {function}: {text!r}")
            figures["stale_explanations"] += [f"{function}: {text}" for function, text in stale]
        print()

        for module, statuses in results.items():
            detected, total = score(statuses.values())
            rows.append((module, percent(detected, total), ""))
            figures["modules"][module] = {"killed": detected, "mutants": total}
        detected, total = score(s for statuses in results.values() for s in statuses.values())
        rows.append((f"{group.name} ({minutes:.0f} min)", percent(detected, total), f"≥ {100 * group.target:.0f}%"))
        rows.append((f"{group.name}: survivors equivalent / untested / unexplained",
                     " / ".join(str(n) for n in verdicts.values()), "0 unexplained"))
        figures["groups"][group.name] = {"killed": detected, "mutants": total, "target": group.target,
                                         "score": round(detected / total, 4) if total else None,
                                         "minutes": round(minutes, 1), "survivors": verdicts}
        figures["survivors"] += [name for _, name, _ in survivors]
        if not total or detected / total < group.target:
            below.append(group.name)
    figures["below_target"] = below
    print_table(rows, figures)
    sys.exit(1 if below or figures["unexplained"] else 0)


if __name__ == "__main__":
    main()
