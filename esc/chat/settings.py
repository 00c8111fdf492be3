"""The settings models chat backends share: a backend's base model, a price, a server's URL (a local
model's node is `esc.models.loading.ModelSettings`).

Each registered backend declares its own model (`Settings`, a `BackendSettings`) beside its class,
made of these pieces; `esc.chat.build.build_backend` validates a config node with it and builds the
class from the instance, so no backend checks or defaults a setting in its constructor.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from esc.config_rules import Settings, check, relation, show
from esc.settings.plugins import PluginSettings


class BackendSettings(PluginSettings):
    """What every backend node holds: its `kind` (the registry's name for its class); a `price` (a
    backend's field, where it has one) must be the price of the model the node asks for."""

    def served_model(self) -> str | None:
        """The model this node asks for, as its backend's identity names it (`esc.chat.cost`); None
        where it names none."""
        return None

    @model_validator(mode="after")
    def _price_of_this_model(self) -> Self:
        price, served = getattr(self, "price", None), self.served_model()
        if (
            isinstance(price, Price)
            and price.model is not None
            and served is not None
            and price.model != served
        ):
            raise relation(  # a config copied from gpt4.yaml with another model: its estimate would be wrong
                "price",
                f"is the price of {price.model!r}, but the backend asks for model {served!r}: give the price "
                f"of {served!r} (KEY={{model: {served}, prompt: USD_PER_1K, completion: USD_PER_1K}}), or "
                "KEY=null for no estimate",
            )
        return self


class Price(Settings):
    """USD per 1,000 tokens (`esc.chat.cost`); `model`: whose price it is (another model is refused
    before any request); `batch_*`: the provider's batch-API price (`judge.batch=true`)."""

    model: str | None = None
    prompt: float = Field(ge=0, description="USD per 1,000 prompt tokens")
    completion: float = Field(ge=0, description="USD per 1,000 completion tokens")
    batch_prompt: float | None = Field(None, ge=0)
    batch_completion: float | None = Field(None, ge=0)

    def shown(self) -> dict[str, Any]:
        """The price as the config gave it (its keys only): what a cost estimate records."""
        return self.model_dump(exclude_unset=True)


class BatchPrice(Price):
    """The price of a request sent through a batch API (`esc.chat.batch.batch_price`): a price's
    `batch_prompt` and `batch_completion` as its `prompt` and `completion`. Made in code, never a
    config node."""

    def shown(self) -> dict[str, Any]:
        return {**super().shown(), "batch": True}


def _server(value: Any) -> str | None:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be a server's URL such as http://127.0.0.1:8000/v1, got {show(value)}"
    return None


ServerUrl = Annotated[str, check(_server)]
"""An http(s) URL with a host: an empty string, a null in a list or a mapping is never a server
(each would have meant the provider's default server, sending dialogues and the key elsewhere)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(value: Any) -> str | None:
    if isinstance(value, str) and _ENV_NAME.fullmatch(value):
        return None
    return f"must be the name of an environment variable (letters, digits, _), got {show(value)}"


EnvName = Annotated[str, check(_env_name)]
"""The name of the environment variable that holds a key (the key itself never sits in a config)."""


def dumped(node: Settings | None) -> dict[str, Any]:
    """A sub-node as the plain mapping the config gave (its keys only, no default filled in): what a
    backend hands on to a library or hashes into its identity."""
    return node.model_dump(exclude_unset=True) if node is not None else {}


BatchSize = Annotated[int, Field(ge=1)] | Literal["auto"]
