"""How large a model's context window is, when no setting says: the server's own answer
(llama.cpp's ``/props``, vLLM's model listing, Ollama's ``/api/show``), else a table of
known models, else a conservative default. The session stores the answer as a
``context.window`` event, so this asking happens once per model and server, and a replay
reads the event instead of asking again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from projections import DEFAULT_WINDOW

__all__ = ["KNOWN_WINDOWS", "ask_server", "known_window"]

#: Windows of well-known model families, by name prefix (longest match wins).
KNOWN_WINDOWS: Mapping[str, int] = {
    "gpt-3.5-turbo": 16385,
    "gpt-4": 8192,
    "gpt-4-turbo": 128000,
    "gpt-4o": 128000,
    "gpt-4.1": 1047576,
    "gpt-5": 400000,
    "o1": 200000,
    "o3": 200000,
    "o4": 200000,
    "claude": 200000,
    "llama3": 8192,
    "llama-3": 8192,
    "llama3.1": 131072,
    "llama-3.1": 131072,
    "llama3.2": 131072,
    "llama-3.2": 131072,
    "qwen2.5": 32768,
    "qwen3": 32768,
    "mistral": 32768,
    "gemma2": 8192,
    "gemma3": 131072,
    "phi3": 4096,
}

#: Ollama's default runtime window when a model sets none: it cuts a longer prompt
#: silently instead of refusing it, so its model maximum would be the wrong answer.
OLLAMA_DEFAULT_CTX = 4096
_TIMEOUT = 5.0


def known_window(model: str) -> tuple[int, str]:
    """The table's window for ``model`` (a namespace before ``/`` ignored), else the
    default; with where the number came from."""
    name = model.rsplit("/", 1)[-1].lower()
    best = ""
    for prefix in KNOWN_WINDOWS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    if best:
        return KNOWN_WINDOWS[best], f"table ({best})"
    return DEFAULT_WINDOW, "default"


def _positive(x: Any) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else 0


def _llama(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    settings = body.get("default_generation_settings")
    if isinstance(settings, dict):
        n = _positive(settings.get("n_ctx")) or _positive(
            (settings.get("params") or {}).get("n_ctx")
        )
        if n:
            return n
    return _positive(body.get("n_ctx"))


def _vllm(body: Any, model: str) -> int:
    rows = body.get("data") if isinstance(body, dict) else None
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and row.get("id") == model:
            return _positive(row.get("max_model_len"))
    return 0


def _ollama(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    for line in str(body.get("parameters") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "num_ctx" and parts[1].isdigit():
            return int(parts[1])
    info = body.get("model_info")
    if isinstance(info, dict):
        for k, v in info.items():
            if k.endswith(".context_length") and _positive(v):
                return min(int(v), OLLAMA_DEFAULT_CTX)
    return 0


async def _get(client: Any, method: str, url: str, headers: Mapping[str, str], body: Any) -> Any:
    try:
        content = orjson.dumps(body) if body is not None else None
        resp = await client.request(
            method, url, headers=dict(headers), content=content, timeout=_TIMEOUT
        )
        if resp.status_code != 200:
            return None
        return orjson.loads(resp.content)
    except Exception:  # a server that does not say is answered by the table
        return None


async def ask_server(
    client: Any, base_url: str, headers: Mapping[str, str], model: str
) -> tuple[int, str] | None:
    """The window the server at ``base_url`` says ``model`` has, and which answer said
    it; None when it says nothing."""
    base = base_url.rstrip("/")
    root = base.removesuffix("/v1")
    n = _llama(await _get(client, "GET", f"{root}/props", headers, None))
    if n:
        return n, "llama.cpp /props"
    n = _vllm(await _get(client, "GET", f"{base}/models", headers, None), model)
    if n:
        return n, "vLLM /models"
    n = _ollama(await _get(client, "POST", f"{root}/api/show", headers, {"model": model}))
    if n:
        return n, "Ollama /api/show"
    return None
