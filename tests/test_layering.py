"""The import direction between the three packages: spine <- projections <- actors."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "spine": {"actors", "projections"},
    "projections": {"actors"},
}


def _parse(path: pathlib.Path) -> ast.Module:
    """``ast.parse``, retried: CPython 3.11's AST converter keeps its recursion depth per
    interpreter, so a parse racing with one on another thread (3.11 formats tracebacks
    with ``ast``; a thread left by an earlier test may log one) can fail spuriously with
    "AST constructor recursion depth mismatch"."""
    for attempt in range(5):
        try:
            return ast.parse(path.read_text(), filename=str(path))
        except SystemError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def _imports(path: pathlib.Path) -> set[str]:
    tree = _parse(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_layers_above_it(package: str) -> None:
    """No module of spine imports actors or projections; none of projections imports actors."""
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    bad = []
    for f in files:
        hit = _imports(f) & FORBIDDEN[package]
        if hit:
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(hit)}")
    assert not bad, "layering broken: " + "; ".join(bad)


def test_spine_does_not_import_thespian() -> None:
    """The spine is plain Python: no actor framework underneath the log."""
    for f in sorted((ROOT / "spine").rglob("*.py")):
        assert "thespian" not in _imports(f), f"{f.relative_to(ROOT)} imports thespian"


#: Modules that hold decisions: pure, so they are tested as tables without processes.
PURE = [
    "actors/policy.py",
    "actors/authority.py",
    "actors/model_servers.py",
    "actors/spec.py",
    "actors/placement.py",
    "actors/interceptors.py",
    *sorted(
        str(p.relative_to(ROOT))
        for room in ("actors/session/rules", "actors/runner/rules")
        for p in (ROOT / room).glob("*.py")
    ),
    "actors/agents/governance.py",
    "actors/agents/egress_rules.py",
    "actors/agents/accumulate.py",
    "actors/agents/formats.py",
    "actors/agents/context.py",
    "actors/agents/wire.py",
    "actors/agents/mcp_results.py",
    "actors/agents/toolnames.py",
]
#: What a decision may not reach for: the actor framework, threads, the clock, storage.
EFFECTFUL = {"thespian", "threading", "time", "sqlite3", "socket", "os", "subprocess"}


def _transitive(path: pathlib.Path, seen: set[pathlib.Path]) -> set[str]:
    """Top-level modules ``path`` imports, following relative imports inside actors/."""
    if path in seen or not path.exists():
        return set()
    seen.add(path)
    tree = _parse(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            # A package's __init__ runs on import but is not what the module depends on:
            # follow the modules named, not the package's public face.
            target = base.joinpath(*node.module.split(".")) if node.module else base
            out |= _transitive(target.with_suffix(".py"), seen)
            for a in node.names:
                out |= _transitive(target / f"{a.name}.py", seen)
    return out


@pytest.mark.parametrize("module", PURE)
def test_decision_modules_are_pure(module: str) -> None:
    """Deciders import no actor framework, threads, clock or storage, not even indirectly."""
    hit = _transitive(ROOT / module, set()) & EFFECTFUL
    assert not hit, f"{module} reaches {sorted(hit)}"


def test_importing_the_deciders_loads_no_actor_framework() -> None:
    """The static check above follows relative imports only; this one imports the pure
    modules and the test kit in a fresh interpreter and looks at what got loaded."""
    import subprocess
    import sys

    mods = [m.removesuffix(".py").replace("/", ".") for m in PURE] + ["actors.testing"]
    code = "import sys\n" + "".join(f"import {m}\n" for m in mods)
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] == 'thespian'))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


#: The packages' shape: modules a reader can hold in mind, functions that fit on a screen
#: ("about 400" lines: the session state's fold, with its event table, is 425).
MODULE_LINES = 430
FUNCTION_LINES = 50
SHAPED = ("actors", "projections", "spine")


@pytest.mark.parametrize("package", SHAPED)
def test_modules_and_functions_stay_small(package: str) -> None:
    """No module over about 400 lines, no function or method over 50."""
    too_long: list[str] = []
    for path in sorted((ROOT / package).rglob("*.py")):
        name = str(path.relative_to(ROOT))
        lines = path.read_text().count("\n")
        if lines > MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long


def test_no_module_of_actors_imports_the_test_kit() -> None:
    """Only tests use actors.testing: the runtime (the warm-up included) runs the executor."""
    bad = []
    for f in sorted((ROOT / "actors").rglob("*.py")):
        if f.name == "testing.py":
            continue
        tree = _parse(f)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    parts = list(f.relative_to(ROOT).with_suffix("").parts)[: -node.level]
                    mod = ".".join([*parts, mod] if mod else parts)
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            if any(n == "actors.testing" or n.startswith("actors.testing.") for n in names):
                bad.append(str(f.relative_to(ROOT)))
    assert not bad, "imports actors.testing: " + ", ".join(sorted(set(bad)))


#: What only the spine's backend registry may compare a location or a log with.
_BACKEND_WORDS = ("sqlite", "postgres")
_LOG_CLASSES = {"SqliteLog", "PostgresLog", "MemoryLog", "SqliteLogReader"}


def _names_a_backend(node: ast.AST) -> bool:
    values = [node] if not isinstance(node, ast.Tuple) else list(node.elts)
    return any(
        isinstance(v, ast.Constant)
        and isinstance(v.value, str)
        and v.value.lower().startswith(_BACKEND_WORDS)
        for v in values
    )


def _backend_tests(tree: ast.AST) -> list[int]:
    """Lines that choose by a log's scheme or class: a comparison with, or a
    ``startswith`` of, a backend's name, or an ``isinstance`` with a log class."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if any(_names_a_backend(n) for n in [node.left, *node.comparators]):
                hits.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name in ("startswith", "endswith") and any(map(_names_a_backend, node.args)):
                hits.append(node.lineno)
            if name == "isinstance" and len(node.args) == 2:
                classes = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if classes & _LOG_CLASSES:
                    hits.append(node.lineno)
    return hits


@pytest.mark.parametrize("package", ["actors", "projections"])
def test_storage_backends_are_chosen_only_in_the_spine(package: str) -> None:
    """A new backend touches spine/ alone: above it nothing tests a URL's scheme or a log's
    class (the spine's `Backend` says what a backend can do)."""
    bad = [
        f"{f.relative_to(ROOT)}:{line}"
        for f in sorted((ROOT / package).rglob("*.py"))
        for line in _backend_tests(_parse(f))
    ]
    assert not bad, "chooses by storage backend outside the spine: " + ", ".join(bad)
