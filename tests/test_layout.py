"""The layout's rules, read from the imports of every module (parsed, not imported): which folder may use which.

    broker/engine     pure rules: Kubernetes' object rules (clusters/rules) and nothing else of ours; no I/O library
    broker/store      the SQL inventory and the functions that take a session: the engine, the members, settings
    broker/services   the loop services: the store, the engine, the members, settings, logging and metrics
    api/              the REST API, the kubectl front door, the dashboard: the store, the engine, the members; the
                      loop services only through the names `broker.services.__all__` gives it
    broker/cli, and the programs beside `serve` (broker/process: demo, agent, metrics_server): anything
    clusters/         the members: clusters/rules and themselves; the simulator (clusters/sim) nothing of the broker
    bench/            anything but tests/; tests/ anything

What the tests and benchmarks use to run a broker (`broker.process.testing`, `broker.services.stepper`,
`clusters.sim.testing`) no module of the broker imports, but the demo. No two modules import each other, directly
or through others (imports under `if TYPE_CHECKING:` are for annotations only and are not counted). No module is
longer than 500 lines unless its docstring says why ("Over 500 lines: ...").

Each rule is also shown to fail on a module graph that breaks it (`test_each_rule_catches_what_breaks_it`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "api", "clusters", "migrations", "bench", "tests")
MAX_LINES = 500
LONG_REASON = "Over 500 lines:"

BASE = ("broker.process.settings", "broker.process.logs", "broker.process.courtesy")
MEMBERS = ("clusters",)  # but clusters.sim: see `_allowed`
HARNESS = ("broker.process.testing", "broker.services.stepper", "clusters.sim.testing")
HARNESS_USERS = ("tests", "bench", "broker.process.demo", "broker.process.testing")
PURE_FORBIDDEN = ("sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "kubernetes", "httpx", "apscheduler",
                  "psycopg", "typer", "prometheus_client")

# (the modules a rule is for, the first-party modules they may import); the first rule that matches a module is its
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("broker.engine", ("broker.engine", "clusters.rules")),
    ("clusters.rules", ("clusters.rules",)),
    ("clusters.sim", ("clusters.sim", "clusters.rules")),
    ("clusters", MEMBERS),
    ("broker.process.settings", BASE),
    ("broker.process.logs", BASE),
    ("broker.process.courtesy", BASE),
    ("broker.store", ("broker.engine", "broker.store", *MEMBERS, *BASE, "migrations")),
    ("broker.process.metrics", ("broker.store", *BASE)),
    ("broker.services", ("broker.engine", "broker.store", "broker.services", *MEMBERS, *BASE,
                         "broker.process.metrics")),
    ("api", ("api", "broker.engine", "broker.store", "broker.services", *MEMBERS, *BASE, "broker.process.metrics")),
    ("migrations", ("migrations", "broker.store.db")),
    ("broker", ("broker", "api", "clusters", "migrations")),  # the CLI and the programs beside `serve`
    ("bench", ("broker", "api", "clusters", "migrations", "bench")),
    ("tests", PACKAGES),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, (ast.Name, ast.Attribute)) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def imports_of(path: Path, modules: set[str], name: str) -> dict[str, set[str]]:
    """What module `name` (at `path`) imports, by module name, and the names it takes from each (`*` for the module
    itself); without what it imports under `if TYPE_CHECKING:`."""
    found: dict[str, set[str]] = {}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, set()).add("*")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    found.setdefault(f"{base}.{alias.name}", set()).add("*")
                else:
                    found.setdefault(base, set()).add(alias.name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def tree() -> dict[str, dict[str, set[str]]]:
    paths = _sources()
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules, module_name(p)) for p in paths}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _ours(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _allowed(importer: str, imported: str) -> tuple[str, ...] | None:
    """The prefixes `importer` may import from, or None if `imported` is fine for it."""
    if imported == "broker":  # the package's own __init__: its version
        return None
    for prefix, allowed in RULES:
        if _within(importer, prefix):
            if prefix == "clusters" and _within(imported, "clusters.sim"):
                return allowed  # the members' code never runs the simulator
            if prefix == "bench" and _within(imported, "tests"):
                return allowed
            return None if any(_within(imported, a) for a in allowed) else allowed
    return None


def violations(graph: dict[str, dict[str, set[str]]], services_api: set[str]) -> list[str]:
    """Every broken layering rule in the graph (module -> imported module -> names), in words."""
    found = []
    for importer, imported in sorted(graph.items()):
        for module, names in sorted(imported.items()):
            if _within(importer, "broker.engine") and module.split(".")[0] in PURE_FORBIDDEN:
                found.append(f"{importer} imports {module}: the engine does no I/O")
            if not _ours(module):
                continue
            allowed = _allowed(importer, module)
            if allowed is not None:
                found.append(f"{importer} imports {module}; it may import only {', '.join(allowed)}")
            if _within(importer, "api") and _within(module, "broker.services"):
                if module != "broker.services" or "*" in names or not names <= services_api:
                    wanted = sorted(names - services_api - {"*"}) or [module]
                    found.append(f"{importer} reaches into the loop services ({', '.join(wanted)}); "
                                 f"the API may use only broker.services.__all__")
            if any(_within(module, h) for h in HARNESS) and not any(_within(importer, u) for u in HARNESS_USERS) \
                    and not any(_within(importer, h) for h in HARNESS):
                found.append(f"{importer} imports {module}, which is for the tests and benchmarks")
    return found


def cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan)."""
    edges = {m: sorted(i for i in imported if i in graph and i != m) for m, imported in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def _services_api() -> set[str]:
    module = ast.parse((ROOT / "broker" / "services" / "__init__.py").read_text())
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def test_the_folders_keep_their_rules():
    assert violations(tree(), _services_api()) == []


def test_no_modules_import_each_other():
    assert cycles(tree()) == []


def test_a_long_module_says_why():
    long = []
    for path in _sources():
        lines = path.read_text().count("\n")
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and LONG_REASON not in doc:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == []


def test_the_top_level_folders_say_what_they_hold():
    assert {p.name for p in (ROOT / "broker").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "engine", "store", "services", "cli", "process"}
    assert (ROOT / "clusters" / "sim").is_dir() and (ROOT / "clusters" / "rules").is_dir()


BROKEN = [
    ({"broker.engine.jobset": {"sqlalchemy": {"select"}}}, "the engine does no I/O"),
    ({"broker.engine.jobset": {"broker.store.db.models": {"Job"}}}, "it may import only broker.engine, clusters.rules"),
    ({"broker.engine.status": {"clusters.member": {"MemberClient"}}}, "it may import only broker.engine"),
    ({"broker.store.jobs": {"broker.services.scheduler": {"*"}}}, "it may import only broker.engine"),
    ({"broker.store.jobs": {"api.app": {"create_app"}}}, "it may import only"),
    ({"broker.services.status": {"api.views": {"job_out"}}}, "it may import only"),
    ({"api.routes.agent": {"broker.services.dispatcher": {"assigned_work"}}}, "the API may use only"),
    ({"api.routes.agent": {"broker.services": {"build_services"}}}, "build_services"),
    ({"clusters.sim.cluster": {"broker.engine.jobset": {"parse_jobset"}}}, "it may import only clusters.sim"),
    ({"clusters.member": {"clusters.sim.testing": {"running_simulator"}}}, "it may import only clusters"),
    ({"bench.ha": {"tests.brokers": {"Broker"}}}, "bench.ha imports tests.brokers"),
    ({"broker.cli.app": {"broker.process.testing": {"Broker"}}}, "for the tests and benchmarks"),
]


@pytest.mark.parametrize("graph, words", BROKEN, ids=[next(iter(g)) + " → " + next(iter(next(iter(g.values()))))
                                                      for g, _ in BROKEN])
def test_each_rule_catches_what_breaks_it(graph, words):
    found = violations(graph, {"assigned_work", "replica"})
    assert found and words in found[0], found


def test_a_cycle_is_found_through_other_modules():
    graph = {"a": {"b": {"*"}}, "b": {"c": {"x"}}, "c": {"a": {"y"}}, "d": {"a": {"*"}}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_an_import_for_annotations_only_is_not_counted_and_one_in_a_function_is(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from other import Thing\n"
                      "def f():\n    from third import g\n")
    assert set(imports_of(source, set(), "mod")) == {"typing", "third"}
