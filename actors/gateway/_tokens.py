"""Bearer tokens: the admin token and tokens scoped to sessions, stored hashed, each with
an id, an optional expiry, and revocable one at a time.

The admin token is generated at the gateway's first start into ``gateway-token`` in the
data directory (owner-only), so the owner can read it and nobody else can; it is never
printed. Every other token is minted by `mint` (``vertebra token create``, ``POST
/v1/tokens``) and only its SHA-256 digest is kept, in ``gateway-tokens.json``
(owner-only), with its id, sessions, creation and expiry times: a token is 32 random
bytes, so a fast hash is enough, and a leaked file reveals no usable token. The file is
changed under a lock (``gateway-tokens.lock``) by whichever process mints or revokes, and
a running gateway sees each change at the next request.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

ADMIN_FILE = "gateway-token"
TOKENS_FILE = "gateway-tokens.json"
LOCK_FILE = "gateway-tokens.lock"

_TTL = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_ttl(text: str) -> float:
    """Seconds in ``30m``, ``12h``, ``7d``, ``2w`` or plain seconds (`ValueError` naming it)."""
    m = _TTL.fullmatch(text.strip().lower())
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"an expiry is a positive number with s, m, h, d or w, got {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


@attrs.frozen(kw_only=True)
class Grant:
    """What a token may do: every session (``sessions`` None) or the listed ones; and
    whether it may only read. ``token_id`` is None for the admin token."""

    sessions: frozenset[str] | None = None
    read_only: bool = False
    token_id: str | None = None
    #: A tenant's token reaches every session of its tenant (the sessions' ``tenant``
    #: key), and creates sessions in it; ``sessions`` is then None.
    tenant: str | None = None

    @property
    def admin(self) -> bool:
        return self.sessions is None and not self.read_only and self.tenant is None

    def may_read(self, session_id: str, tenant: str | None = None) -> bool:
        """Whether the token covers ``session_id``, whose tenant is ``tenant``."""
        if self.tenant is not None:
            return tenant == self.tenant
        return self.sessions is None or session_id in self.sessions

    def may_write(self, session_id: str, tenant: str | None = None) -> bool:
        return not self.read_only and self.may_read(session_id, tenant)


@attrs.frozen(kw_only=True)
class TokenInfo:
    """A minted token as stored, without the token: what ``token list`` shows."""

    id: str
    sessions: tuple[str, ...]
    read_only: bool
    created: float
    expires: float | None
    tenant: str | None = None

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "sessions": list(self.sessions),
            "read_only": self.read_only,
            "created": self.created,
            "expires": self.expires,
            "expired": self.expired(now),
            "tenant": self.tenant,
        }


def _write_private(path: str, text: str) -> None:
    # Created owner-only from the start (never readable by others, not even briefly),
    # then moved into place so a reader never sees half a file.
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
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


def _load(path: str) -> list[dict[str, Any]]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (FileNotFoundError, ValueError):
        return []
    tokens = data.get("tokens", []) if isinstance(data, dict) else []
    return [t for t in tokens if isinstance(t, dict) and isinstance(t.get("sha256"), str)]


def _info(e: dict[str, Any]) -> TokenInfo:
    # Entries minted before tokens had ids are named by their digest's head.
    expires = e.get("expires")
    return TokenInfo(
        id=str(e.get("id") or "tok_" + str(e["sha256"])[:12]),
        sessions=tuple(str(s) for s in e.get("sessions") or ()),
        read_only=bool(e.get("read_only")),
        created=float(e.get("created") or 0.0),
        expires=float(expires) if isinstance(expires, int | float) else None,
        tenant=str(e["tenant"]) if e.get("tenant") else None,
    )


@contextlib.contextmanager
def _locked(data_dir: str) -> Iterator[str]:
    """The tokens file's path, held against other minting or revoking processes."""
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield os.path.join(data_dir, TOKENS_FILE)
    finally:
        os.close(fd)


def _save(path: str, entries: list[dict[str, Any]]) -> None:
    _write_private(path, json.dumps({"tokens": entries}, indent=1) + "\n")


def mint(
    data_dir: str,
    sessions: Iterable[str],
    *,
    read_only: bool = False,
    ttl: float | None = None,
    tenant: str | None = None,
) -> tuple[TokenInfo, str]:
    """Mint a token limited to ``sessions``, or to the sessions of ``tenant`` (read-only
    if asked, expiring ``ttl`` seconds from now if given): its stored entry and the
    token, of which only the digest is kept."""
    scope = sorted(set(sessions))
    if tenant is not None:
        if scope:
            raise ValueError("a tenant's token covers its tenant's sessions: name no sessions")
        if not tenant or not tenant.isprintable() or len(tenant) > 200:
            raise ValueError(f"a tenant is 1 to 200 printable characters, got {tenant!r}")
    elif not scope:
        raise ValueError("a scoped token needs at least one session (or a tenant)")
    if ttl is not None and not ttl > 0:
        raise ValueError(f"a token's lifetime must be above 0 seconds, got {ttl!r}")
    token = "vts_" + secrets.token_urlsafe(32)
    now = time.time()
    entry = {
        "id": "tok_" + secrets.token_hex(6),
        "sha256": digest(token),
        "sessions": scope,
        "read_only": read_only,
        "created": now,
        "expires": None if ttl is None else now + ttl,
        "tenant": tenant,
    }
    with _locked(data_dir) as path:
        _save(path, [*_load(path), entry])
    return _info(entry), token


def create_token(
    data_dir: str,
    sessions: Iterable[str] = (),
    *,
    read_only: bool = False,
    ttl: float | None = None,
    tenant: str | None = None,
) -> str:
    """`mint`, returning only the token."""
    return mint(data_dir, sessions, read_only=read_only, ttl=ttl, tenant=tenant)[1]


def list_tokens(data_dir: str) -> list[TokenInfo]:
    """Every minted token, oldest first (expired ones included, marked so)."""
    return [_info(e) for e in _load(os.path.join(data_dir, TOKENS_FILE))]


def revoke_token(data_dir: str, token_id: str) -> bool:
    """Remove the token ``token_id``; False if there is none. A running gateway refuses it
    from its next request on."""
    with _locked(data_dir) as path:
        entries = _load(path)
        kept = [e for e in entries if _info(e).id != token_id]
        if len(kept) == len(entries):
            return False
        _save(path, kept)
    return True


class TokenStore:
    """Looks up the grant of a presented token. The tokens file is read again whenever
    it changed (a stat per lookup), so tokens minted or revoked while the gateway runs
    count at once; an expired token has no grant."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.admin = admin_token(data_dir)
        self._admin_digest = digest(self.admin)
        self._path = os.path.join(data_dir, TOKENS_FILE)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._grants: dict[str, tuple[Grant, float | None]] = {}
        self._reload()

    def _reload(self) -> None:
        try:
            st = os.stat(self._path)
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        grants = {}
        for e in _load(self._path):
            info = _info(e)
            grant = Grant(
                sessions=None if info.tenant else frozenset(info.sessions),
                read_only=info.read_only,
                token_id=info.id,
                tenant=info.tenant,
            )
            grants[str(e["sha256"])] = (grant, info.expires)
        self._grants, self._stamp = grants, stamp

    def grant(self, token: str) -> Grant | None:
        """The grant of ``token``, or None if it is not a known, unexpired token."""
        d = digest(token)
        if secrets.compare_digest(d, self._admin_digest):
            return Grant()
        with self._lock:
            self._reload()
            found = self._grants.get(d)
        if found is None:
            return None
        grant, expires = found
        return None if expires is not None and time.time() >= expires else grant

    def valid(self, grant: Grant) -> bool:
        """Whether ``grant`` still holds (its token not revoked nor expired): open
        streams ask this as they go."""
        if grant.token_id is None:
            return True
        with self._lock:
            self._reload()
            found = [g for g, _ in self._grants.values() if g.token_id == grant.token_id]
            expiry = [x for g, x in self._grants.values() if g.token_id == grant.token_id]
        return bool(found) and (expiry[0] is None or time.time() < expiry[0])
