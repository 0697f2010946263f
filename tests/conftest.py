"""Shared fixtures."""

from __future__ import annotations

import pathlib

import pytest


@pytest.fixture
def db_path(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh SQLite file path in the test's temporary directory."""
    return tmp_path / "spine.db"
