"""The rooms inside `actors`: the session's and the Runner's pure rules below their shells,
the machine room (`actors._runtime`) below everything that runs, no import cycles, and
imports at the top of modules where a reader sees them."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "spine", "projections")


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _targets(name: str, path: pathlib.Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules an import statement loads (a package's submodule when a name
    imported from it is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]


def _imports(body: list[ast.stmt], where: str = "top") -> list[tuple[ast.AST, str]]:
    """Import statements with where they sit: ``top`` (run on import), ``function`` or
    ``typing`` (under ``if TYPE_CHECKING``, never run)."""
    out: list[tuple[ast.AST, str]] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append((node, where))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out += _imports(node.body, "function")
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += _imports(node.body, "typing") + _imports(node.orelse, where)
        else:
            for field in ("body", "orelse", "finalbody"):
                out += _imports(getattr(node, field, None) or [], where)
            for handler in getattr(node, "handlers", None) or []:
                out += _imports(handler.body, where)
    return out


def _graph() -> dict[str, list[tuple[str, str]]]:
    graph: dict[str, list[tuple[str, str]]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, where in _imports(tree.body):
            assert isinstance(node, ast.Import | ast.ImportFrom)
            for target in _targets(name, path, node):
                if target.split(".")[0] in PACKAGES:
                    graph.setdefault(name, []).append((target, where))
    return graph


GRAPH = _graph()


def _reaching(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{src} imports {dst}"
        for src, edges in GRAPH.items()
        if src == prefix or src.startswith(prefix + ".")
        for dst, _ in edges
        if any(dst == f or dst.startswith(f + ".") for f in forbidden)
    )


def test_the_session_rules_import_nothing_from_the_shells_the_kit_or_the_machine_room() -> None:
    bad = _reaching(
        "actors.session.rules",
        ("actors.session.shell", "actors.runner", "actors.testing", "actors._runtime"),
    )
    assert not bad, bad


def test_the_runner_rules_import_nothing_from_a_shell_or_the_machine_room() -> None:
    bad = _reaching(
        "actors.runner.rules",
        ("actors.runner.shell", "actors.session.shell", "actors.testing", "actors._runtime"),
    )
    assert not bad, bad


def test_the_session_imports_nothing_from_the_runner() -> None:
    assert not _reaching("actors.session", ("actors.runner",))


def test_no_source_module_imports_the_test_kit() -> None:
    bad = [
        f"{src} imports {dst}"
        for src, edges in GRAPH.items()
        if src != "actors.testing"
        for dst, _ in edges
        if dst == "actors.testing"
    ]
    assert not bad, bad


def test_no_import_cycle_between_modules() -> None:
    """Imports that run on import (not those under ``TYPE_CHECKING`` or inside functions)
    form no cycle: Tarjan's strongly connected components are all single modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w, where in GRAPH.get(v, []):
            if where != "top" or w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    assert not cycles, cycles


#: Imports that stay inside a function, each for a reason a top-level import cannot meet.
#: The CLI (every command loads what it needs) and the seal tool's commands are exempt.
DEFERRED = {
    # optional extras: importing the module must not need them
    "spine._backends": "a backend's modules load when first used (PostgreSQL's need the extra)",
    "actors.agents.factory": "the HTTP providers need the models extra",
    "actors.otel._exporter": "loaded only in the daemon, with the otel extra",
    "actors.otel._export_pump": "the OTLP encoder needs the otel extra",
    "actors.gateway._server": "the A2A webhook needs the a2a extra",
    # a package's public face that must not pull in Thespian for pure users
    "actors.runner": "the Runner's actor classes load Thespian",
    "projections": "the reducer actor loads Thespian",
    "actors.host.host": "members join with the transport's authentication only when asked",
    "actors.host.member": "the transport's authentication is installed only in a member",
    # the machine room: what a forked child loads before its own logging is set up
    "actors._runtime.system": "logging and the log are configured in the child process",
    "actors._runtime.thespian_log": "Thespian's logging shim is patched in the child",
    "actors._runtime.transport_auth": "the system's key location is read only when asked",
    "actors.agents.tools": "the egress guard is loaded by the tools that reach the network",
    "spine.testing.durable": "the seal is loaded only by the durability tests that seal",
}


def test_imports_sit_at_the_top_of_modules() -> None:
    """No function-level import of the project's own modules outside the CLI, the seal
    command and the declared `DEFERRED` places."""
    bad = sorted(
        f"{src} imports {dst} inside a function"
        for src, edges in GRAPH.items()
        for dst, where in edges
        if where == "function"
        and not src.startswith(("actors.cli", "spine._seal_cli"))
        and src not in DEFERRED
    )
    assert not bad, bad
    unused = sorted(
        src for src in DEFERRED if not any(w == "function" for _, w in GRAPH.get(src, []))
    )
    assert not unused, f"declared deferred but importing at the top: {unused}"
