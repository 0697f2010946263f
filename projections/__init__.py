"""Projections: pure folds of the spine's events (imports only ``spine``)."""

__all__: list[str] = []
