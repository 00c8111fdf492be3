"""Small helpers shared by the backends: one-line error replies, plain config mappings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from esc.chat.base import Reply

ERROR_CHARS = 300


def one_line(err: BaseException, secrets: Iterable[str] = (), limit: int = ERROR_CHARS) -> str:
    """``TypeName: message`` on one line, at most `limit` characters, with every secret masked."""
    text = f"{type(err).__name__}: {err}".strip()
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_reply(err: BaseException, latency_s: float = 0.0, secrets: Iterable[str] = ()) -> Reply:
    return Reply(text="", finish_reason="error", latency_s=latency_s, error=one_line(err, secrets))


def plain(mapping: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plain dict (resolving an OmegaConf node), so configs can be copied, hashed and dumped."""
    if mapping is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(mapping, DictConfig):
            return OmegaConf.to_container(mapping, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    return {k: (plain(v) if isinstance(v, Mapping) else v) for k, v in mapping.items()}
