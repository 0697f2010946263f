"""Ed25519 keys for seals: signing keys kept on disk owner-only, public keys by key id."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import stat
from collections.abc import Iterable, Iterator

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ._errors import InvalidArgumentError
from ._seal_errors import KeyStoreError, UnknownKeyError

_CURRENT = "current"
_PRIVATE_SUFFIX = ".key"
_PUBLIC_SUFFIX = ".pub"


def key_id_of(raw_public: bytes) -> str:
    """The key id of a raw Ed25519 public key: the first 16 bytes of its SHA-256, in hex.

    Deriving the id from the key binds them: a verifier recomputes it and never trusts a
    key that claims somebody else's id.
    """
    return hashlib.sha256(raw_public).digest()[:16].hex()


def _check_raw_public(_inst: object, _attr: object, value: bytes) -> None:
    if not isinstance(value, bytes) or len(value) != 32:
        raise InvalidArgumentError("an Ed25519 public key is exactly 32 bytes")


@attrs.frozen
class PublicKey:
    """An Ed25519 public key (32 raw bytes) that checks seal signatures."""

    raw: bytes = attrs.field(validator=_check_raw_public)

    @property
    def key_id(self) -> str:
        return key_id_of(self.raw)

    def hex(self) -> str:
        return self.raw.hex()

    @classmethod
    def from_hex(cls, text: str) -> PublicKey:
        """Read a key written by `hex` (64 lowercase or uppercase hex digits)."""
        if not isinstance(text, str):
            raise InvalidArgumentError("a public key in hex must be a string")
        try:
            raw = bytes.fromhex(text.strip())
        except ValueError:
            raise InvalidArgumentError(f"public key {text!r} is not hex") from None
        if len(raw) != 32:
            raise InvalidArgumentError(
                f"public key {text!r} has {len(raw)} bytes; an Ed25519 key has 32"
            )
        return cls(raw)

    def verify(self, signature: bytes, data: bytes) -> bool:
        """True if ``signature`` is this key's Ed25519 signature over ``data``."""
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, data)
        except (InvalidSignature, ValueError):
            return False
        return True


class SigningKey:
    """An Ed25519 private key with its public half and key id."""

    __slots__ = ("_private", "public_key")

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        raw = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_key = PublicKey(raw)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> SigningKey:
        if not isinstance(raw, bytes) or len(raw) != 32:
            raise InvalidArgumentError("an Ed25519 private key is exactly 32 bytes")
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    @property
    def key_id(self) -> str:
        return self.public_key.key_id

    def sign(self, data: bytes) -> bytes:
        return self._private.sign(data)

    def private_pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM (what the key store writes)."""
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r})"


class Keyring:
    """Trusted public keys by key id: what verification checks signatures against.

    Keep every key that ever signed a seal you still need to verify; rotation adds keys,
    it never makes an old seal unverifiable as long as its key stays in the ring.
    """

    def __init__(self, keys: Iterable[PublicKey] = ()) -> None:
        self._keys: dict[str, PublicKey] = {}
        for k in keys:
            self.add(k)

    @classmethod
    def of(cls, keys: KeysLike) -> Keyring:
        """Accept a keyring, one key, a key store (all its keys) or public keys."""
        if isinstance(keys, Keyring):
            return keys
        if isinstance(keys, KeyStore):
            return keys.keyring()
        if isinstance(keys, SigningKey):
            return cls([keys.public_key])
        if isinstance(keys, PublicKey):
            return cls([keys])
        if isinstance(keys, str | bytes):
            raise InvalidArgumentError(
                "pass PublicKey objects (PublicKey.from_hex for text), not a string"
            )
        return cls(keys)

    def add(self, key: PublicKey) -> None:
        if not isinstance(key, PublicKey):
            raise InvalidArgumentError(f"a keyring holds PublicKey objects, not {key!r}")
        self._keys[key.key_id] = key

    def get(self, key_id: str) -> PublicKey | None:
        return self._keys.get(key_id)

    def require(self, key_id: str) -> PublicKey:
        key = self._keys.get(key_id)
        if key is None:
            raise UnknownKeyError(key_id)
        return key

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __iter__(self) -> Iterator[PublicKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"Keyring({sorted(self._keys)})"


class KeyStore:
    """A directory of signing keys: created owner-only (0700) on first use.

    Files: ``current`` names the key id that signs; ``<key id>.key`` is its private key
    (PKCS#8 PEM, mode 0600); ``<key id>.pub`` is every public key ever used, in hex, so
    `keyring` can verify seals made before a rotation. A key store that another user can
    read is refused rather than used, as ssh does.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = pathlib.Path(directory)

    # -- public ------------------------------------------------------------------------

    def signing_key(self) -> SigningKey:
        """The current signing key, generated and stored on first use."""
        self._ensure_dir()
        current = self._read_current()
        if current is None:
            return self._create(make_current=True)
        return self._load_private(current)

    def rotate(self) -> SigningKey:
        """Switch to a fresh key; the old private key is deleted, its public key kept."""
        self._ensure_dir()
        old = self._read_current()
        new = self._create(make_current=True)
        if old is not None and old != new.key_id:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / (old + _PRIVATE_SUFFIX)).unlink()
        return new

    def trust(self, key: PublicKey) -> bool:
        """Add ``key`` to the keys `keyring` verifies with (its public half only: it never
        signs here); False when the store already held it. An import does this for the
        keys that sealed what it copies."""
        self._ensure_dir()
        path = self.directory / (key.key_id + _PUBLIC_SUFFIX)
        if path.exists():
            return False
        tmp = path.with_suffix(".tmp")
        tmp.write_text(key.hex())
        os.replace(tmp, path)
        return True

    def keyring(self) -> Keyring:
        """Every public key this store ever held (current and rotated out)."""
        ring = Keyring()
        if not self.directory.is_dir():
            return ring
        for p in sorted(self.directory.glob("*" + _PUBLIC_SUFFIX)):
            try:
                key = PublicKey.from_hex(p.read_text())
            except (OSError, InvalidArgumentError) as exc:
                raise KeyStoreError(f"public key file {p} is unreadable: {exc}") from None
            if key.key_id != p.name[: -len(_PUBLIC_SUFFIX)]:
                raise KeyStoreError(f"public key file {p} holds key {key.key_id}, not its name")
            ring.add(key)
        return ring

    # -- internals ---------------------------------------------------------------------

    def _ensure_dir(self) -> None:
        d = self.directory
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            mode = d.stat().st_mode
        except OSError as exc:
            raise KeyStoreError(f"cannot create key directory {d}: {exc}") from None
        if not stat.S_ISDIR(mode):
            raise KeyStoreError(f"key directory {d} is not a directory")
        if os.name == "posix" and mode & 0o077:
            raise KeyStoreError(
                f"key directory {d} is accessible by other users (mode {stat.S_IMODE(mode):o}); "
                "it must be owner-only (chmod 700)"
            )

    def _read_current(self) -> str | None:
        try:
            text = (self.directory / _CURRENT).read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeyStoreError(f"cannot read {self.directory / _CURRENT}: {exc}") from None
        if len(text) != 32 or any(c not in "0123456789abcdef" for c in text):
            raise KeyStoreError(f"{self.directory / _CURRENT} does not name a key id: {text!r}")
        return text

    def _load_private(self, key_id: str) -> SigningKey:
        path = self.directory / (key_id + _PRIVATE_SUFFIX)
        try:
            st = path.stat()
            if os.name == "posix" and st.st_mode & 0o077:
                raise KeyStoreError(
                    f"private key {path} is accessible by other users "
                    f"(mode {stat.S_IMODE(st.st_mode):o}); it must be 0600"
                )
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyStoreError(
                f"current key {key_id} has no private key file {path} (retired or deleted)"
            ) from None
        except OSError as exc:
            raise KeyStoreError(f"cannot read private key {path}: {exc}") from None
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyStoreError(f"private key {path} is not a PEM key: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise KeyStoreError(f"private key {path} is not an Ed25519 key")
        key = SigningKey(private)
        if key.key_id != key_id:
            raise KeyStoreError(f"private key {path} holds key {key.key_id}, not {key_id}")
        return key

    def _create(self, *, make_current: bool) -> SigningKey:
        key = SigningKey.generate()
        kid = key.key_id
        _write_private(self.directory / (kid + _PRIVATE_SUFFIX), key.private_pem())
        _write_private(
            self.directory / (kid + _PUBLIC_SUFFIX), (key.public_key.hex() + "\n").encode()
        )
        if not make_current:
            return key
        current = self.directory / _CURRENT
        tmp = self.directory / f".{_CURRENT}.{kid}"
        _write_private(tmp, (kid + "\n").encode())
        if self._read_current() is None:
            try:
                # Create-if-absent: when two processes make the first key at once, one wins
                # and the other adopts its key instead of signing with an orphan.
                os.link(tmp, current)
            except FileExistsError:
                tmp.unlink()
                winner = self._read_current()
                assert winner is not None
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / (kid + _PRIVATE_SUFFIX)).unlink()
                return self._load_private(winner)
            tmp.unlink()
        else:
            os.replace(tmp, current)
        return key


#: What verification accepts as trusted keys.
KeysLike = Keyring | PublicKey | SigningKey | KeyStore | Iterable[PublicKey]


def _write_private(path: pathlib.Path, data: bytes) -> None:
    """Write a new file with mode 0600 from its creation, durably."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        raise KeyStoreError(f"cannot write key file {path}: {exc}") from None
