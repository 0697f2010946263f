"""Every package's public face is pinned: `tests/public_exports.txt` lists what each
package's ``__all__`` holds, so an export appears or disappears only on purpose. Modules
behind a leading underscore, and the rooms under a package (``rules``, ``shell``,
``_runtime``), are private: embedders import from the packages listed here."""

from __future__ import annotations

import importlib
import pathlib

PINNED = pathlib.Path(__file__).with_name("public_exports.txt")


def _pinned() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in PINNED.read_text().splitlines():
        if line and not line.startswith("#"):
            package, name = line.split()
            out.setdefault(package, set()).add(name)
    return out


def test_each_package_exports_what_is_pinned() -> None:
    diffs = []
    for package, names in sorted(_pinned().items()):
        module = importlib.import_module(package)
        exported = set(module.__all__)
        if exported != names:
            diffs.append(
                f"{package}: added {sorted(exported - names)}, removed {sorted(names - exported)}"
            )
        missing = sorted(n for n in exported if not hasattr(module, n))
        if missing:
            diffs.append(f"{package}: __all__ names missing attributes {missing}")
    assert not diffs, diffs
