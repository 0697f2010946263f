"""Bundles: a sealed stream exported as JSON lines, verifiable offline with the package alone.

Line 1 is a header object; every further line is the exact stored payload of one event,
seq ``first`` on line 2, ``first + 1`` on line 3, and so on. Payloads are compact JSON
without raw newlines, so a line is a payload byte for byte and hashes to its sealed leaf.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, Any

import attrs
import orjson

from ._event import Kind
from ._ids import validate_session_id
from ._keys import Keyring, KeysLike, PublicKey
from ._log import Log, Record
from ._seal_errors import BundleError, MalformedSealError, SealError, UnknownKeyError
from ._seal_record import Seal
from ._seal_report import VerifyReport
from ._seal_verify import verify_records
from ._sealing import origin_in, parse_seal_event

BUNDLE_FORMAT = "vertebra-seal-bundle"
BUNDLE_VERSION = 1
_SEALED_MARK = b'"kind":"record.sealed"'


@attrs.frozen(kw_only=True)
class Bundle:
    """A stream's sealed range with its seals' public keys.

    ``seals`` lists the seqs of the seal events the exporter put in; a line there that no
    longer reads as a seal is reported as a broken seal instead of silently skipped.
    """

    stream: str
    first: int
    seals: tuple[int, ...]
    keys: tuple[PublicKey, ...]
    lines: tuple[bytes, ...]
    #: ``(seq, version)`` of every line stored under a schema version other than 1 (the
    #: leaves cover it); the header's optional ``versions`` list, absent when empty.
    versions: tuple[tuple[int, int], ...] = ()

    @property
    def last(self) -> int:
        return self.first + len(self.lines) - 1

    def records(self) -> list[Record]:
        """The lines as records; a line's seq is its position (the bundle's storage order).

        Seal lines are found by their kind; a seal the header lists but no line carries any
        more (say its bytes were damaged) is checked at its listed position, so that it is
        reported as a broken seal instead of being silently skipped.
        """
        kinds = [""] * len(self.lines)
        found: set[int] = set()
        for i, line in enumerate(self.lines):
            # Parse only candidates: the mark can also sit inside a nested object.
            if _SEALED_MARK not in line:
                continue
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(d, dict) and d.get("kind") == Kind.RECORD_SEALED:
                kinds[i] = Kind.RECORD_SEALED
                if isinstance(d.get("seq"), int):
                    found.add(d["seq"])
        for seq in self.seals:
            i = seq - self.first
            if (
                seq not in found
                and 0 <= i < len(kinds)
                and _claimed_seq(self.lines[i])
                in (
                    None,
                    seq,
                )
            ):
                # Another intact event here means lines moved (found by location instead).
                kinds[i] = Kind.RECORD_SEALED
        versions = dict(self.versions)
        return [
            Record(self.stream, seq, i + 1, kinds[i], line, versions.get(seq, 1))
            for i, line in enumerate(self.lines)
            for seq in (self.first + i,)
        ]

    def keyring(self) -> Keyring:
        return Keyring(self.keys)

    def verify(self, keys: KeysLike | None = None) -> VerifyReport:
        """Verify against ``keys``, or, when None, the bundle's own public keys.

        A bundle's own keys prove only that the bundle is intact under them; pin the key
        (pass it, or compare ``key_id``s) to also know who sealed it.
        """
        ring = self.keyring() if keys is None else Keyring.of(keys)
        # A bundle holds payload lines only: no stored columns to check.
        return verify_records(self.stream, self.records(), ring, columns=False)

    def header(self) -> dict[str, Any]:
        return {
            "format": BUNDLE_FORMAT,
            "v": BUNDLE_VERSION,
            "stream": self.stream,
            "first": self.first,
            "last": self.last,
            "seals": list(self.seals),
            "keys": [{"keyId": k.key_id, "publicKey": k.hex()} for k in self.keys],
            **({"versions": [list(v) for v in self.versions]} if self.versions else {}),
        }

    def to_bytes(self) -> bytes:
        parts = [orjson.dumps(self.header())]
        parts.extend(self.lines)
        return b"\n".join(parts) + b"\n"

    def write(self, dest: str | os.PathLike[str] | IO[bytes]) -> None:
        data = self.to_bytes()
        if isinstance(dest, str | os.PathLike):
            with open(dest, "wb") as f:
                f.write(data)
        else:
            dest.write(data)

    @classmethod
    def from_bytes(cls, data: bytes) -> Bundle:
        if not isinstance(data, bytes):
            raise BundleError("a bundle is read from bytes (open the file in binary mode)")
        head, sep, body = data.partition(b"\n")
        if not sep:
            raise BundleError("the bundle has no header line")
        h = _header(head)
        stream = h.get("stream")
        first = h.get("first")
        seals = h.get("seals")
        if not isinstance(stream, str):
            raise BundleError("the bundle header has no stream")
        validate_session_id(stream)
        if not isinstance(first, int) or isinstance(first, bool) or first < 1:
            raise BundleError("the bundle header's 'first' must be a seq of at least 1")
        if not isinstance(seals, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seals
        ):
            raise BundleError("the bundle header's 'seals' must be a list of seqs")
        keys = _header_keys(h)
        versions = _header_versions(h)
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return cls(
            stream=stream,
            first=first,
            seals=tuple(seals),
            keys=tuple(keys),
            lines=tuple(lines),
            versions=tuple((v[0], v[1]) for v in versions),
        )


def _header(head: bytes) -> dict[str, Any]:
    """The header line parsed: a JSON object of this bundle format and version."""
    try:
        h = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise BundleError(f"the bundle header is not JSON ({exc})") from None
    if not isinstance(h, dict) or h.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"not a seal bundle (the header's format is not {BUNDLE_FORMAT!r})")
    if h.get("v") != BUNDLE_VERSION:
        raise BundleError(f"unsupported bundle version {h.get('v')!r}")
    return h


def _header_keys(h: dict[str, Any]) -> list[PublicKey]:
    """The header's public keys, each checked against the key id it is listed under."""
    keys = []
    for entry in h.get("keys") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("publicKey"), str):
            raise BundleError("each bundle key needs a 'publicKey' in hex")
        try:
            key = PublicKey.from_hex(entry["publicKey"])
        except ValueError as exc:
            raise BundleError(f"bad public key in bundle: {exc}") from None
        if entry.get("keyId") != key.key_id:
            raise BundleError(
                f"bundle key {entry.get('keyId')!r} does not match its public key "
                f"(whose id is {key.key_id})"
            )
        keys.append(key)
    return keys


def _header_versions(h: dict[str, Any]) -> list[list[int]]:
    """The header's ``[seq, version]`` pairs (none when it lists none)."""
    versions = h.get("versions", [])
    if not isinstance(versions, list) or not all(
        isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        for v in versions
    ):
        raise BundleError("the bundle header's 'versions' must be a list of [seq, version]")
    return versions


def _claimed_seq(line: bytes) -> int | None:
    try:
        d = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    seq = d.get("seq") if isinstance(d, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def read_bundle(source: str | os.PathLike[str] | IO[bytes] | bytes) -> Bundle:
    """Load a bundle from a path, a binary file or its bytes (no verification)."""
    if isinstance(source, bytes):
        return Bundle.from_bytes(source)
    if isinstance(source, str | os.PathLike):
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise BundleError(f"cannot read bundle {os.fspath(source)!r}: {exc}") from None
        return Bundle.from_bytes(data)
    return Bundle.from_bytes(source.read())


def verify_bundle(
    source: str | os.PathLike[str] | IO[bytes] | bytes | Bundle, keys: KeysLike | None = None
) -> VerifyReport:
    """Verify a bundle offline; see `Bundle.verify` for what ``keys=None`` means."""
    bundle = source if isinstance(source, Bundle) else read_bundle(source)
    return bundle.verify(keys)


def build_bundle(log: Log, stream: str, keys: KeysLike) -> Bundle:
    """Every seal of ``stream`` and the events they cover, from the first sealed seq to the
    newest seal event, with the public keys of the seals' signers (taken from ``keys``)."""
    validate_session_id(stream)
    ring = Keyring.of(keys)
    found: list[Seal] = []
    records = log.read(stream, 0, None)
    origin = origin_in(records)
    for r in records:
        if r.kind == Kind.RECORD_SEALED:
            try:
                found.append(parse_seal_event(stream, r, origin))
            except MalformedSealError as exc:
                raise SealError(f"cannot export stream {stream!r}: {exc}") from None
    if not found:
        raise SealError(f"stream {stream!r} has no seal to export")
    first = min(s.first for s in found)
    last = max(s.seq for s in found)
    public = []
    for kid in sorted({s.key_id for s in found}):
        key = ring.get(kid)
        if key is None:
            raise UnknownKeyError(kid)
        public.append(key)
    kept = [r for r in records if first <= r.seq <= last]
    lines = [r.payload for r in kept]
    _check_lines(stream, first, lines)
    return Bundle(
        stream=stream,
        first=first,
        seals=tuple(s.seq for s in found),
        keys=tuple(public),
        lines=tuple(lines),
        versions=tuple((r.seq, r.version) for r in kept if r.version != 1),
    )


def _check_lines(stream: str, first: int, lines: Sequence[bytes]) -> None:
    for i, line in enumerate(lines):
        if b"\n" in line:
            raise SealError(
                f"seq {first + i} of stream {stream!r} holds a raw newline; it cannot be a line"
            )


def export_bundle(
    log: Log, stream: str, dest: str | os.PathLike[str] | IO[bytes], keys: KeysLike
) -> Bundle:
    """Write `build_bundle` to ``dest`` and return it."""
    bundle = build_bundle(log, stream, keys)
    bundle.write(dest)
    return bundle
