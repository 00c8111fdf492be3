"""Baichuan-NPC, Baichuan's character-role-play API: the paper's baseline role-player (Table 1, 12).

Convention with the evaluation engine: a conversation's FIRST message is
``{"role": "system", "content": <a JSON object>}`` holding the character profile -- the paper's
Table 12 fields ``basic_info`` (the role card), ``reply_restrict`` (the notes), ``opener`` and
``dialogue_sample`` (or any other profile fields the API takes). The backend parses it into the
request's ``character_profile`` object (fields that are null are left out) and sends the remaining
messages as the dialogue. A conversation without such a first message gets an error reply.

Request format. The official reference (https://platform.baichuan-ai.com/docs/npc, the paper's
footnote 2) could not be read from here; what follows comes from public client code that calls
the API, and from the paper.

Seen in several independent clients (taken as established):
  * ``POST https://api.baichuan-ai.com/v1/chat/completions`` with ``Authorization: Bearer <key>``;
  * an OpenAI-style JSON body: ``model`` (``Baichuan-NPC-Turbo`` or ``Baichuan-NPC-Lite``),
    ``messages``, ``temperature``, ``top_p``, ``max_tokens``, ``stream``, plus a
    ``character_profile`` object;
  * ``character_profile`` as ``{"character_id": <id of a character created on the platform>}`` or
    inline as ``{"character_name", "character_info", "user_name", "user_info"}``;
  * characters are created with ``POST /v1/npc`` whose fields include ``name``, ``basic_info``
    and ``opener`` (the names the paper's Table 12 uses).

NOT verified:
  * that ``character_profile`` accepts the Table 12 fields (``basic_info``, ``reply_restrict``,
    ``opener``, ``dialogue_sample``) inline -- inferred from the paper and the creation endpoint;
    since the profile is passed through as given, a role-player config can switch to the
    ``character_name``/``character_info`` or ``character_id`` forms without code changes;
  * the response shape: OpenAI's (``choices[0].message.content``, ``finish_reason``, ``usage``)
    is assumed, as the API is otherwise OpenAI-compatible;
  * whether temperature 0 is accepted: clients use 0.001-1.0 and the console's slider starts at
    0.01, so temperatures are raised to ``min_temperature`` (0.01; set 0 to send them as they are);
  * ``seed`` support: not sent; ``stop`` is sent when set;
  * the API's rejection behaviour (the paper reports ~10% refused requests): a rejection arrives
    either as an HTTP error (an error reply after the SDK's retries for 429/5xx) or as a
    ``content_filter`` finish reason, and is recorded either way.

Transport: the ``openai`` SDK's ``AsyncOpenAI`` client pointed at Baichuan's base URL, with the
profile in ``extra_body`` -- so the SDK's retries (backoff on 408/409/429/5xx, timeouts,
connection errors), timeouts and bounded concurrency are exactly those of the ``openai`` backend.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from esc.chat.backends.openai_compat import OpenAIBackend
from esc.chat.base import GenerationSettings, Message, register_backend
from esc.chat.settings import EnvName, ServerUrl

PROFILE_FIELDS = ("basic_info", "reply_restrict", "opener", "dialogue_sample")


def parse_profile(messages: Sequence[Message]) -> tuple[dict[str, Any], list[Message]]:
    """Split a conversation into (character profile, the dialogue after it)."""
    if not messages or messages[0].get("role") != "system":
        raise ValueError("baichuan_npc: the first message must be the system message holding the profile")
    try:
        profile = json.loads(messages[0]["content"])
    except json.JSONDecodeError as err:
        raise ValueError(f"baichuan_npc: the system message is not a JSON profile ({err.msg})") from None
    if not isinstance(profile, dict):
        raise ValueError("baichuan_npc: the system message must hold a JSON object")
    rest = [dict(m) for m in messages[1:]]
    if not rest:
        raise ValueError("baichuan_npc: no dialogue messages after the profile")
    return profile, rest  # type: ignore[return-value]


@register_backend("baichuan_npc")
class BaichuanNPCBackend(OpenAIBackend):
    """Baichuan-NPC through its chat completions endpoint with a per-conversation character profile.

    Args beyond the ``openai`` backend's: ``profile_defaults``, profile fields sent with every
    conversation unless the conversation's own profile sets them (e.g. ``{"user_name": "AI"}``);
    ``min_temperature``, the lowest temperature sent (see the module docstring).

    Code version: bump `CODE_VERSION` whenever a change to this class can change the reply to the
    same request (profile handling, request shape); the ``openai`` backend's version counts too.
    The model list of the readiness check is not verified for this API, so a configured model
    missing from it is only a warning.
    """

    CODE_VERSION = 1
    kind = "baichuan_npc"
    default_base_url = "https://api.baichuan-ai.com/v1"
    strict_model_list = False

    class Settings(OpenAIBackend.Settings):
        """A `baichuan_npc` node (conf/roleplayer/baichuan_npc_*.yaml): the openai backend's keys, with
        Baichuan's defaults, and the profile's."""

        model: str = Field("Baichuan-NPC-Turbo", min_length=1)
        base_url: ServerUrl | None = Field("https://api.baichuan-ai.com/v1")
        api_key_env: EnvName | None = Field("BAICHUAN_API_KEY")
        max_concurrency: int = Field(4, ge=1, description="requests in flight")
        profile_defaults: dict[str, Any] | None = Field(
            None, description="profile fields of every conversation"
        )
        min_temperature: float = Field(0.01, ge=0, description="the lowest temperature sent")

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        super().__init__(settings, config_key)
        self.profile_defaults = dict(settings.profile_defaults or {})
        self.min_temperature = settings.min_temperature

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        identity["profile_defaults"] = self.profile_defaults or None
        identity["min_temperature"] = self.min_temperature
        return identity

    def _request(self, messages: Sequence[Message], settings: GenerationSettings) -> dict[str, Any]:
        profile, rest = parse_profile(messages)
        profile = {k: v for k, v in {**self.profile_defaults, **profile}.items() if v is not None}
        request = super()._request(rest, settings)
        request["temperature"] = max(float(settings.temperature), self.min_temperature)
        request.pop("seed", None)
        request["stream"] = False
        request["extra_body"] = {**request.get("extra_body", {}), "character_profile": profile}
        return request
