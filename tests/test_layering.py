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


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
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
