"""Actors are measured by the whole class: what a class inherits from the project counts
as its own. No actor class is over 400 lines or holds more than 10 fields (``self.x =``),
so an actor stays a receiver of messages that owns a few objects, not mixins sharing a
pile of state."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Where a project class that is an actor starts: Thespian's own bases.
ACTOR_ROOTS = {"Actor", "ActorTypeDispatcher"}
MAX_LINES = 400
MAX_FIELDS = 10


def _classes() -> dict[tuple[str, str], tuple[ast.ClassDef, dict[str, tuple[str, str]]]]:
    """Every class of the project by (module, name), with the names its module imports
    from the project (local name -> (module, name))."""
    out = {}
    for package in ("actors", "spine", "projections"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text())
            imported: dict[str, tuple[str, str]] = {}
            pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    base = pkg.split(".")[: len(pkg.split(".")) - max(node.level - 1, 0)]
                    src = ".".join([*base, node.module or ""]) if node.level else node.module
                    for a in node.names:
                        imported[a.asname or a.name] = (str(src).rstrip("."), a.name)
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    imported.setdefault(node.name, (module, node.name))
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    out[(module, node.name)] = (node, imported)
    return out


CLASSES = _classes()


def _lineage(key: tuple[str, str]) -> tuple[list[ast.ClassDef], bool]:
    """The class and its project bases, and whether it is an actor."""
    node, imported = CLASSES[key]
    found, actor = [node], False
    for base in node.bases:
        name = ast.unparse(base).rpartition(".")[2]
        if name in ACTOR_ROOTS:
            actor = True
            continue
        target = imported.get(name)
        if target is None:
            continue
        # A name re-exported by a package resolves to the class of that name below it.
        match = (
            target
            if target in CLASSES
            else next(
                (k for k in CLASSES if k[1] == target[1] and k[0].startswith(target[0])), None
            )
        )
        if match is not None:
            more, is_actor = _lineage(match)
            found += more
            actor = actor or is_actor
    return found, actor


def _fields(nodes: list[ast.ClassDef]) -> set[str]:
    out = set()
    for cls in nodes:
        for node in ast.walk(cls):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for t in targets:
                for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if (
                        isinstance(el, ast.Attribute)
                        and isinstance(el.value, ast.Name)
                        and el.value.id == "self"
                    ):
                        out.add(el.attr)
    return out


def _actors() -> dict[str, tuple[int, set[str]]]:
    out = {}
    for key in CLASSES:
        nodes, actor = _lineage(key)
        if actor:
            lines = sum((n.end_lineno or n.lineno) - n.lineno + 1 for n in nodes)
            out[".".join(key)] = (lines, _fields(nodes))
    return out


ACTORS = _actors()


def test_the_walk_finds_the_actors_and_their_project_bases() -> None:
    """The session and the Runner are found, each measured with `GuardedActor`."""
    session = ACTORS["actors.session.shell.actor.SessionActor"]
    runner = ACTORS["actors.runner.shell.actor.RunnerActor"]
    guarded = ACTORS["actors._runtime.shell.GuardedActor"]
    assert session[0] > guarded[0] and runner[0] > guarded[0]
    assert {"spare", "live", "exit"} <= session[1]
    assert {"registry", "spares", "sinks"} <= runner[1]


def test_no_actor_class_is_over_400_lines_with_what_it_inherits() -> None:
    big = {name: lines for name, (lines, _) in ACTORS.items() if lines > MAX_LINES}
    assert not big, big


def test_no_actor_holds_more_than_10_fields() -> None:
    many = {name: sorted(f) for name, (_, f) in ACTORS.items() if len(f) > MAX_FIELDS}
    assert not many, many
