"""Bearer tokens: the admin token and tokens scoped to sessions, stored hashed.

The admin token is generated at the gateway's first start into ``gateway-token`` in the
data directory (owner-only), so the owner can read it and nobody else can. Every other
token is minted by `create_token` and only its SHA-256 digest is kept, in
``gateway-tokens.json`` (owner-only): a token is 32 random bytes, so a fast hash is
enough, and a leaked file reveals no usable token.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from collections.abc import Iterable

import attrs

ADMIN_FILE = "gateway-token"
TOKENS_FILE = "gateway-tokens.json"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@attrs.frozen(kw_only=True)
class Grant:
    """What a token may do: every session (``sessions`` None) or the listed ones; and
    whether it may only read."""

    sessions: frozenset[str] | None = None
    read_only: bool = False

    @property
    def admin(self) -> bool:
        return self.sessions is None and not self.read_only

    def may_read(self, session_id: str) -> bool:
        return self.sessions is None or session_id in self.sessions

    def may_write(self, session_id: str) -> bool:
        return not self.read_only and self.may_read(session_id)


def _write_private(path: str, text: str) -> None:
    # Created owner-only from the start (never readable by others, not even briefly),
    # then moved into place so a reader never sees half a file.
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def admin_token(data_dir: str) -> str:
    """The data directory's admin token, generated (owner-only) if there is none yet."""
    path = os.path.join(data_dir, ADMIN_FILE)
    try:
        with open(path) as f:
            token = f.read().strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    os.makedirs(data_dir, exist_ok=True)
    token = "vta_" + secrets.token_urlsafe(32)
    _write_private(path, token + "\n")
    return token


def _load(path: str) -> list[dict[str, object]]:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    tokens = data.get("tokens", []) if isinstance(data, dict) else []
    return [t for t in tokens if isinstance(t, dict)]


def create_token(data_dir: str, sessions: Iterable[str], *, read_only: bool = False) -> str:
    """Mint a token limited to ``sessions`` (read-only if asked); returns the token, of
    which only the digest is stored. A running gateway picks it up at its first use."""
    scope = sorted(set(sessions))
    if not scope:
        raise ValueError("a scoped token needs at least one session")
    token = "vts_" + secrets.token_urlsafe(32)
    path = os.path.join(data_dir, TOKENS_FILE)
    os.makedirs(data_dir, exist_ok=True)
    entries = _load(path)
    entries.append({"sha256": digest(token), "sessions": scope, "read_only": read_only})
    _write_private(path, json.dumps({"tokens": entries}, indent=1) + "\n")
    return token


class TokenStore:
    """Looks up the grant of a presented token. The scoped tokens file is read again
    when an unknown token shows up and the file changed, so tokens minted while the
    gateway runs work at once."""

    def __init__(self, data_dir: str) -> None:
        self.admin = admin_token(data_dir)
        self._admin_digest = digest(self.admin)
        self._path = os.path.join(data_dir, TOKENS_FILE)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._grants: dict[str, Grant] = {}
        self._reload()

    def _reload(self) -> None:
        try:
            st = os.stat(self._path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        grants = {}
        for e in _load(self._path):
            sessions = e.get("sessions")
            if isinstance(e.get("sha256"), str) and isinstance(sessions, list):
                grants[str(e["sha256"])] = Grant(
                    sessions=frozenset(str(s) for s in sessions),
                    read_only=bool(e.get("read_only")),
                )
        self._grants, self._stamp = grants, stamp

    def grant(self, token: str) -> Grant | None:
        """The grant of ``token``, or None if it is not a known token."""
        d = digest(token)
        if secrets.compare_digest(d, self._admin_digest):
            return Grant()
        with self._lock:
            g = self._grants.get(d)
            if g is None:
                self._reload()
                g = self._grants.get(d)
        return g
