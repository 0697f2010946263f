"""Seal keys: created owner-only on first use, identified by key id, rotated without loss."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from spine import Event, Kind, SqliteLog
from spine.seal import (
    Keyring,
    KeyStore,
    KeyStoreError,
    PublicKey,
    SigningKey,
    key_id_of,
    seal_stream,
    verify_stream,
)

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


@posix_only
def test_the_first_use_creates_an_owner_only_directory_and_key_file(tmp_path: pathlib.Path) -> None:
    """The key directory is 0700 and every key file 0600, whatever the umask."""
    old = os.umask(0)
    try:
        key = KeyStore(tmp_path / "keys").signing_key()
    finally:
        os.umask(old)
    d = tmp_path / "keys"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for f in d.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name
    assert (d / f"{key.key_id}.key").exists()
    assert (d / "current").read_text().strip() == key.key_id


def test_the_same_key_is_loaded_on_every_later_use(tmp_path: pathlib.Path) -> None:
    """A second store on the same directory signs with the key the first one created."""
    a = KeyStore(tmp_path / "keys").signing_key()
    b = KeyStore(tmp_path / "keys").signing_key()
    assert a.key_id == b.key_id
    assert b.public_key.verify(a.sign(b"x"), b"x")


def test_the_key_id_is_derived_from_the_public_key() -> None:
    """The id is the first 16 bytes of SHA-256 of the raw key, so it cannot be claimed."""
    key = SigningKey.generate()
    assert key.key_id == key_id_of(key.public_key.raw)
    assert len(key.key_id) == 32
    assert PublicKey.from_hex(key.public_key.hex()) == key.public_key


@posix_only
def test_a_key_directory_readable_by_others_is_refused(tmp_path: pathlib.Path) -> None:
    """Like ssh, a store other users can read is an error naming the path and the fix."""
    d = tmp_path / "keys"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    with pytest.raises(KeyStoreError, match="owner-only"):
        KeyStore(d).signing_key()


@posix_only
def test_a_private_key_readable_by_others_is_refused(tmp_path: pathlib.Path) -> None:
    """A key file loosened after creation is not used."""
    store = KeyStore(tmp_path / "keys")
    key = store.signing_key()
    (tmp_path / "keys" / f"{key.key_id}.key").chmod(0o644)
    with pytest.raises(KeyStoreError, match="0600"):
        store.signing_key()


def test_rotation_signs_with_a_new_key_and_old_seals_still_verify(tmp_path: pathlib.Path) -> None:
    """After a rotation the store's keyring holds both keys; seals by either verify."""
    store = KeyStore(tmp_path / "keys")
    with SqliteLog(tmp_path / "spine.db") as log:
        log.append("rot-1", [Event(kind=Kind.USER_MESSAGE, text="a")])
        old = seal_stream(log, "rot-1", store.signing_key())
        new_key = store.rotate()
        assert new_key.key_id != old.key_id
        assert store.signing_key().key_id == new_key.key_id
        log.append("rot-1", [Event(kind=Kind.USER_MESSAGE, text="b")])
        new = seal_stream(log, "rot-1", store.signing_key())
        assert new.key_id == new_key.key_id
        report = verify_stream(log, "rot-1", store.keyring())
        assert report.ok, report.summary()
        # The retired private key is gone; its public key stays for verification.
        assert not (tmp_path / "keys" / f"{old.key_id}.key").exists()
        assert old.key_id in store.keyring()


def test_a_keyring_refuses_text_in_place_of_keys() -> None:
    """Passing hex where a PublicKey is expected is a clear misuse error."""
    with pytest.raises(ValueError, match="PublicKey"):
        Keyring.of("ab" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="32"):
        PublicKey.from_hex("abcd")
