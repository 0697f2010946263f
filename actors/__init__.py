"""Actors: sessions, the runner supervisor, sinks, interceptors, the host API and the CLI."""

__all__: list[str] = []
