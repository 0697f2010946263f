"""An authenticated frame for Thespian's TCP transport: nothing unproven is unpickled.

Thespian's ``multiprocTCPBase`` pickles every message and unpickles whatever arrives on
any of its listeners (the admin's, every actor's, every client endpoint's): anyone who can
connect runs code as the daemon's user. This module keeps Thespian's transport and
replaces only its serializer hooks (the module's ``serializer``, the transport's
``serializer`` method and the two precomputed acknowledgement packets):

- every data directory has a secret, ``actor.key`` (32 random bytes, hex, owner-only 0600),
  created at first start beside the other data files;
- every message frame is ``MAGIC | key id | time | HMAC-SHA256 | pickle``: the MAC covers
  the header and the pickled bytes and is checked, in constant time, before the bytes are
  unpickled; the key id picks the secret (a process may know a few: a client attached to
  two daemons), so a frame under an unknown key fails like a bad MAC;
- a frame whose time is more than `WINDOW` seconds off this host's clock is refused, so a
  captured frame is useless after the window (a retransmission by Thespian reuses its
  frame, so the window must outlast Thespian's retries; duplicates inside it are what
  the protocol's idempotency keys are for);
- the acknowledgements (``ACK`` / ``ACK+DATAERR``) carry no data and are never unpickled:
  they are the fixed word under a MAC per key this process holds;
- a frame that fails is dropped and counted (`rejected`), logged at most once a second,
  and Thespian answers it with its data-error acknowledgement and closes the connection.

Every process of an actor system gets the secret by inheritance: the patch and the key
live in module state, and Thespian forks the admin from the process that starts the
system, and every actor process from the admin or an actor. A client selects the key of
the system it talks to with `keyed` around the creation of its ``ActorSystem``; the
transport remembers it, and every ``private()`` endpoint cloned from it inherits it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import pickle
import stat
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import ActorsError

__all__ = [
    "SECRET_FILE",
    "WINDOW",
    "SecretError",
    "install",
    "key_id",
    "keyed",
    "load_secret",
    "rejected",
    "share_secret",
    "use_secret",
]

LOGGER = "vertebra.transport"

#: The secret's file in the data directory.
SECRET_FILE = "actor.key"
#: Seconds a frame's timestamp may be away from this host's clock. Thespian resends an
#: undelivered frame unchanged for up to five minutes (its transmit period), so a shorter
#: window would turn a slow legitimate delivery into a refusal.
WINDOW = 300.0

_MAGIC = b"VTA1"
_CTL = b"VTC1"
_KID = 8
_HEAD = len(_MAGIC) + _KID + 8
_MAC = 32
_TIME = struct.Struct(">Q")
_CONTROL = ("ACK", "ACK+DATAERR")

_lock = threading.RLock()
#: key id -> secret, every secret this process may verify with.
_keys: dict[bytes, bytes] = {}
#: key id -> an HMAC keyed with its secret and fed nothing: copying it skips the key
#: schedule and the digest lookup, about three times faster per frame than `hmac.digest`.
_macs: dict[bytes, hmac.HMAC] = {}
#: The key id new transports take (set by `keyed`; inherited by forked actor processes).
_current: bytes | None = None
_installed = False
_disabled = False
_rejected = 0
_last_log = 0.0
#: The data directory of the system started last, and the process that started it.
_home: tuple[str, int] | None = None


class SecretError(ActorsError):
    """The data directory's actor secret is missing, unsafe or unreadable."""


def rejected() -> int:
    """How many frames this process dropped because they failed authentication."""
    return _rejected


def key_id(secret: bytes) -> bytes:
    """The public name of ``secret`` (not enough to forge a MAC)."""
    return hashlib.sha256(b"vertebra actor key id\0" + secret).digest()[:_KID]


def load_secret(data_dir: str | os.PathLike[str]) -> bytes:
    """``data_dir``'s actor secret, created (owner-only) if there is none yet.

    Refuses a secret file another user owns or that is readable by others: whoever can
    read it can talk to the actor system as its owner.
    """
    path = os.path.join(os.fspath(data_dir), SECRET_FILE)
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(32).hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # A link never replaces an existing file: two first starts agree on one secret.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SecretError(f"cannot open the actor secret {path!r}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise SecretError(
                f"the actor secret {path!r} belongs to uid {st.st_uid}, not to this user"
            )
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise SecretError(
                f"the actor secret {path!r} is readable by other users (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): anyone who read it can run code as this "
                f"user; remove it (a new one is made at the next start) or chmod 600 it"
            )
        raw = os.read(fd, 200).strip()
    finally:
        os.close(fd)
    try:
        secret = bytes.fromhex(raw.decode("ascii"))
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise SecretError(f"the actor secret {path!r} is damaged: remove it and restart")
    return secret


def use_secret(secret: bytes) -> bytes:
    """Let this process verify frames under ``secret``; return its key id. Installs the
    authenticated frame into Thespian on first use."""
    kid = key_id(secret)
    if _disabled:
        return kid
    with _lock:
        install()
        if _keys.get(kid) != secret:
            _macs[kid] = hmac.new(secret, digestmod=hashlib.sha256)
            _keys[kid] = secret
            _refresh_acks()
    return kid


@contextlib.contextmanager
def keyed(secret: bytes, data_dir: str | None = None) -> Iterator[bytes]:
    """Transports created inside (an ``ActorSystem`` and the admin it forks) use
    ``secret``; actor processes forked inside log refused frames to ``data_dir``'s
    ``vertebra.log``. Serialised: two threads starting systems under different keys wait."""
    global _current, _home
    with _lock:
        kid = use_secret(secret)
        before, _current = _current, kid
        if data_dir is not None:
            _home = (data_dir, os.getpid())
        try:
            yield kid
        finally:
            # The admin forked in here keeps the key; later actor processes fork from it.
            _current = before if before is not None else kid


def _mac(kid: bytes, *parts: bytes) -> bytes:
    h = _macs[kid].copy()
    for part in parts:
        h.update(part)
    return h.digest()


def _frame(kid: bytes | None, body: bytes) -> bytes:
    if kid is None or kid not in _keys:
        # A transport made before any key was known: the newest key is the only choice.
        kid = _current
    if kid is None or _disabled:
        return body
    head = _MAGIC + kid + _TIME.pack(time.time_ns())
    return head + _mac(kid, head, body) + body


def _control(word: str) -> bytes:
    body = word.encode("ascii")
    macs = b"".join(kid + _mac(kid, _CTL, body) for kid in _keys)
    return _CTL + bytes([len(_keys)]) + macs + body


def _refuse(reason: str) -> str:
    global _rejected, _last_log
    _rejected += 1
    now = time.monotonic()
    if now - _last_log >= 1.0:
        _last_log = now
        if _home is not None and _home[1] != os.getpid():
            # An actor process (forked from the starter): into the daemon's log file,
            # even in processes (the admin) that never log anything else.
            with contextlib.suppress(Exception):
                from .system import configure_actor_logging

                configure_actor_logging(_home[0])
        # Looked up now: Thespian gives each actor process a logging manager of its own.
        logging.getLogger(LOGGER).warning(
            "dropped an actor-transport frame that failed authentication (%s); %d so far in "
            "process %d",
            reason,
            _rejected,
            os.getpid(),
        )
    # Thespian answers a control word where a message was due with a data-error ack and
    # closes the connection; on an acknowledgement wait it counts as a failed send.
    return "ACK+DATAERR"


def _open(data: bytes) -> Any:
    """The object in an authenticated frame, or the data-error word if it is not one."""
    if _disabled:
        return pickle.loads(data)
    view = memoryview(data)
    if data[:4] == _MAGIC:
        if len(data) < _HEAD + _MAC:
            return _refuse("short frame")
        kid = bytes(view[4 : 4 + _KID])
        if kid not in _macs:
            return _refuse("unknown key")
        body = data[_HEAD + _MAC :]
        if not hmac.compare_digest(_mac(kid, data[:_HEAD], body), data[_HEAD : _HEAD + _MAC]):
            return _refuse("bad MAC")
        sent = _TIME.unpack_from(data, 4 + _KID)[0]
        if abs(time.time_ns() - sent) > WINDOW * 1e9:
            return _refuse("outside the time window")
        return pickle.loads(body)
    if data[:4] == _CTL and len(data) > 5:
        n = data[4]
        body = bytes(view[5 + n * (_KID + _MAC) :])
        word = body.decode("ascii", "replace")
        if word in _CONTROL:
            for i in range(n):
                at = 5 + i * (_KID + _MAC)
                kid = bytes(view[at : at + _KID])
                if kid not in _macs:
                    continue
                want = _mac(kid, _CTL, body)
                if hmac.compare_digest(want, view[at + _KID : at + _KID + _MAC]):
                    return word
        return _refuse("bad control frame")
    return _refuse("not an authenticated frame")


class _Serializer:
    """Stands in for the ``pickle`` module Thespian's TCP transport serializes with."""

    @staticmethod
    def loads(data: bytes) -> Any:
        return _open(data)

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return _frame(_current, pickle.dumps(obj))


def _refresh_acks() -> None:
    from thespian.system.transport import TCPTransport as tt
    from thespian.system.transport.streamBuffer import toSendBuffer

    tt.ackMsg = toSendBuffer(_control("ACK"), bytes)
    tt.ackDataErrMsg = toSendBuffer(_control("ACK+DATAERR"), bytes)


def install() -> None:
    """Put the authenticated frame into Thespian's TCP transport (idempotent).

    Until a secret is known (`use_secret`), frames are refused and sent unauthenticated,
    so call `use_secret` or `keyed` before starting or joining an actor system.
    """
    global _installed
    with _lock:
        if _installed:
            return
        from thespian.system import multiprocCommon as mc
        from thespian.system.transport import TCPTransport as tt

        _patch_transport(tt.TCPTransport)
        tt.serializer = _Serializer()
        mc.startAdmin = _admin_start(mc.startAdmin)
        _refresh_acks()
        _installed = True


def _patch_transport(cls: Any) -> None:
    """Make each transport frame what it sends under the key that was current when it was
    created; a clone takes its original's key."""
    from thespian.system.transport.streamBuffer import toSendBuffer

    original_init = cls.__init__
    original_clone = cls.external_transport_clone

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self._vertebra_kid = _current
        original_init(self, *args, **kwargs)

    def external_transport_clone(self: Any) -> Any:
        clone = original_clone(self)
        clone._vertebra_kid = getattr(self, "_vertebra_kid", None)
        return clone

    def serializer(self: Any, intent: Any) -> bytes:
        kid = getattr(self, "_vertebra_kid", None)
        return bytes(
            toSendBuffer(
                (self.myAddress, intent.message),
                lambda obj: _frame(kid, pickle.dumps(obj)),
            )
        )

    cls.__init__ = __init__
    cls.external_transport_clone = external_transport_clone
    cls.serializer = serializer


def _admin_start(original_admin: Any) -> Any:
    """Thespian's admin start, wrapped to forget every key but the system's own first."""

    def start_admin(*args: Any, **kwargs: Any) -> Any:
        # The admin (and every actor process it forks) keeps only its own system's key:
        # the starting process may know others (a client attached elsewhere too).
        if _current is not None:
            for kid in list(_keys):
                if kid != _current:
                    del _keys[kid], _macs[kid]
            _refresh_acks()
        return original_admin(*args, **kwargs)

    return start_admin


def _disable_for_measurement() -> None:
    """Plain pickles again, for the benchmark's unauthenticated baseline only: call it
    first thing in a process of its own, before any actor system starts."""
    global _disabled
    _disabled = True


def share_secret(source_dir: str | os.PathLike[str], target_dir: str | os.PathLike[str]) -> None:
    """Copy ``source_dir``'s actor secret into ``target_dir`` (owner-only), as a member host
    of a convention needs its leader's before it starts."""
    secret = load_secret(source_dir)
    os.makedirs(target_dir, mode=0o700, exist_ok=True)
    path = os.path.join(os.fspath(target_dir), SECRET_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, secret.hex().encode() + b"\n")
    finally:
        os.close(fd)
