"""Small helpers shared by the backends: one-line error replies, plain config mappings, the prompt a
conversation becomes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from esc.chat.base import Message, Reply
from esc.secrets.redaction import scrub_text, secret_values

ERROR_CHARS = 300


def one_line(err: BaseException, secrets: Iterable[str] = (), limit: int = ERROR_CHARS) -> str:
    """``TypeName: message`` on one line, at most `limit` characters, with `secrets` and every secret
    this process knows of masked (`esc.secrets.redaction`)."""
    text = scrub_text(f"{type(err).__name__}: {err}".strip(), [*secrets, *secret_values()])
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


def render_prompt(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The prompt text a conversation becomes: the tokenizer's chat template (or the one the model
    config sets, `esc.models.loading.load_tokenizer`) with the generation prompt. The text is then
    tokenized without adding special tokens: the template writes them (BOS, [gMASK]sop, ...)."""
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
    )


def prompt_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The token ids a model reads for `messages`: the rendered prompt encoded whole (the hf and
    vLLM backends read the same ids, so a judge's answer is read at the same position on both)."""
    return list(tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"])
