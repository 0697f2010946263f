"""What an MCP call stores (pure): the idempotency key sent in its ``_meta``, the tool's
annotations as hints, and its result as text for the model plus a bounded record.

Binary content (images, audio, blobs) is stored as a typed reference (kind, MIME type,
size, SHA-256), never its bytes: a log that keeps everything forever must not grow by
what a server chose to send.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "IDEMPOTENCY_META",
    "MAX_TEXT",
    "hints",
    "idempotency_key",
    "render",
    "scrub",
]

#: The ``_meta`` key that carries a call's idempotency key to the server.
IDEMPOTENCY_META = "io.vertebra/idempotency-key"
#: Bytes of text (and of structured content) kept per result; the rest is cut, named.
MAX_TEXT = 64 * 1024


def idempotency_key(session_id: str, tool_use_id: str) -> str:
    """The same for every attempt of one tool call of one session (a retry after a crash
    sends the same key), different for any other call."""
    return hashlib.sha256(f"{session_id}\0{tool_use_id}".encode()).hexdigest()[:32]


def hints(annotations: Any) -> dict[str, bool]:
    """The server's own claims about a tool (``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``) that it set: kept as hints, never obeyed."""
    out: dict[str, bool] = {}
    if annotations is None:
        return out
    for field, key in (
        ("read_only_hint", "readOnlyHint"),
        ("destructive_hint", "destructiveHint"),
        ("idempotent_hint", "idempotentHint"),
        ("open_world_hint", "openWorldHint"),
    ):
        value = getattr(annotations, field, None)
        if isinstance(value, bool):
            out[key] = value
    return out


def _reference(kind: str, mime: str | None, data: str) -> dict[str, Any]:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raw = data.encode()
    return {
        "type": kind,
        "mimeType": mime or "application/octet-stream",
        "size": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def _says(ref: Mapping[str, Any]) -> str:
    return f"[{ref['type']} {ref['mimeType']}, {ref['size']} bytes, sha256 {ref['sha256'][:16]}]"


def _block(block: Any) -> tuple[str, dict[str, Any]]:
    """One content block as text for the model and as its stored record."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text, {"type": "text"}
    if kind in ("image", "audio"):
        ref = _reference(kind, block.mime_type, block.data)
        return _says(ref), ref
    if kind == "resource":
        res = block.resource
        uri = str(getattr(res, "uri", ""))
        if getattr(res, "text", None) is not None:
            return res.text, {"type": "resource", "uri": uri, "mimeType": res.mime_type}
        ref = {**_reference("blob", res.mime_type, getattr(res, "blob", "")), "uri": uri}
        return _says(ref), ref
    if kind == "resource_link":
        link = {"type": "resource_link", "uri": str(block.uri), "mimeType": block.mime_type}
        return f"[resource {block.uri}]", link
    return f"[{kind or 'unknown'} content]", {"type": kind or "unknown"}


def scrub(value: Any, depth: int = 0) -> Any:
    """Structured content with every binary payload in it (an image's or audio's
    ``data``, a resource's ``blob``) replaced by its reference: servers that wrap their
    content blocks as structured content would otherwise put the bytes in the log."""
    if depth > 32:
        return "[nested too deep]"
    if isinstance(value, list):
        return [scrub(v, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if kind in ("image", "audio") and isinstance(value.get("data"), str):
        return _reference(kind, value.get("mimeType"), value["data"])
    if isinstance(value.get("blob"), str):
        return {**_reference("blob", value.get("mimeType"), value["blob"]), "uri": value.get("uri")}
    return {k: scrub(v, depth + 1) for k, v in value.items()}


def _cut(text: str) -> str:
    raw = text.encode()
    if len(raw) <= MAX_TEXT:
        return text
    return raw[:MAX_TEXT].decode("utf-8", "ignore") + f"\n[cut at {MAX_TEXT} bytes of {len(raw)}]"


def render(result: Any) -> tuple[str, bool, dict[str, Any]]:
    """A ``CallToolResult`` as ``(text, is_error, record)``: the text goes to the model
    and is the ``tool.result``'s result; the record (content kinds, binary references,
    structured content when small enough) is stored beside it."""
    texts: list[str] = []
    blocks: list[dict[str, Any]] = []
    for block in getattr(result, "content", None) or ():
        said, kept = _block(block)
        texts.append(said)
        blocks.append(kept)
    record: dict[str, Any] = {"content": blocks}
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        structured = scrub(structured)
        encoded = orjson.dumps(structured)
        if len(encoded) <= MAX_TEXT:
            record["structured"] = structured
        else:
            record["structured"] = {
                "size": len(encoded),
                "sha256": hashlib.sha256(encoded).hexdigest(),
            }
        if not texts:
            # The model hears structured content when the server sent no text for it.
            texts.append(encoded.decode())
    text = _cut("\n".join(texts)) if texts else "(no content)"
    return text, bool(getattr(result, "is_error", False)), record
