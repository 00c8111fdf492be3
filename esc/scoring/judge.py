"""What a judge is: (dialogue, dimension) items in, one judgment each out, never a silent failure.

A judgment is `valid` with a score 0-4; `invalid` when the judge answered but not with one score
(the reason and its reply are kept); or `failed` when no answer came (a request that failed after
its retries, an error in the batch), which a rerun retries. Invalid and failed judgments are counted
and reported per dimension and never enter a mean. Judges that can
(local models; APIs that return log-probabilities) also give the probability of each score, the
expected score, and how much of the next-token probability fell on the five answers at all.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import Field

from esc.chat.closed import ClosedAnswer
from esc.config_rules import check, show
from esc.registry import Registry
from esc.scoring.rubrics import SCORES, dialogue_text, dimension, prompt_style, prompt_style_names
from esc.settings.plugins import PluginSettings, Registered, registers_settings
from esc.settings.types import FileName

VALID, INVALID, FAILED = "valid", "invalid", "failed"


DIGITS: tuple[str, ...] = tuple(str(s) for s in SCORES)  # the answers of the 7 dimensions: "0".."4"


@dataclasses.dataclass(frozen=True)
class ScoreItem:
    """One dialogue to score on one dimension.

    By default the judge renders the prompt of `dimension` (the rubric of its prompt style) and
    the answer is one of "0".."4". Other questions (the role-play metrics, 0-2; the pairwise
    human-likeness test, "A" or "B") give the prompt whole in `messages` and their own `choices`;
    the score is then the index of the chosen answer.
    """

    item_id: str  # the dialogue's id, unique within a run
    dimension: str  # canonical dimension key (or the question's name when `messages` is given)
    language: str  # "en" | "zh": picks the rubric (and, for ESC-RANK, the adapter)
    lines: tuple[tuple[str, str], ...]  # (role, text), role "assistant" (the chatbot) or "user"
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content): the prompt, given whole
    choices: tuple[str, ...] = DIGITS  # the answers allowed, in score order
    # With `messages`: the question's (style, version, sha256 of its texts), e.g. ("safety", 1, "2dee..."),
    # recorded with each answer as its `prompt` (without `messages` the judge's rubric's identity is).
    question: tuple[str, Any] | None = None

    @functools.cached_property  # asked several times per item (pending, the estimate, the record)
    def content_sha(self) -> str:
        """A hash of what the judge reads of this item (its lines, or its whole prompt and answers):
        a judgment is done only for the content it was made on."""
        import hashlib
        import json

        content = {"lines": self.lines, "messages": self.messages, "choices": self.choices}
        return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()[:16]

    def prompt(self, style: Any, default_system: str | None = None) -> list[dict[str, str]]:
        """The judge prompt: `messages` when given, else the rubric of `style` for `dimension`
        (`default_system`: the judge model's chat() default system turn, `PromptStyle.messages`)."""
        if self.messages is not None:
            return [{"role": role, "content": content} for role, content in self.messages]

        return style.messages(
            dimension(self.dimension).key, dialogue_text(self.lines), self.language, default_system
        )


@dataclasses.dataclass
class JudgeAnswer:
    """What a judge answered about one item, before the store adds what was judged and by whom
    (`esc.scoring.store.ScoreRecord`); a run log's `esc.reports.runlog.Judgment` is that record as
    the log lists it."""

    status: str  # "valid" | "invalid" | "failed"
    score: int | None = None
    expected: float | None = None  # sum of score x probability over the five answers
    probs: list[float] | None = None  # P(0..4), renormalised over the five answers
    answer_mass: float | None = None  # probability the judge put on the five answers at all
    raw: str | None = None  # the judge's reply, when it wrote one
    error: str | None = None  # why a judgment is invalid

    @classmethod
    def from_closed(cls, answer: ClosedAnswer) -> JudgeAnswer:
        """The answer to a closed question (`esc.chat.closed`)."""
        return cls(
            answer.status, answer.index, answer.expected, answer.probs, answer.mass, answer.raw, answer.error
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Judge(Registered, abc.ABC):
    """Scores items. `name` labels its outputs; `identity` says what determines its scores."""

    name: str
    prompt: str  # the prompt style (esc/scoring/rubrics.yaml)
    config_key: str = "judge"  # its node in the config (`jury.members.NAME`), named in errors
    config_node = "judge"  # `Registered`: a judge's `Settings` is a `JudgeSettings`

    @abc.abstractmethod
    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        """One judgment per item, in order. Never raises for one bad item."""

    @abc.abstractmethod
    def identity(self) -> dict[str, Any]:
        """Model, revision, adapters, prompt style and version: what a score depends on."""

    def submit(self, items: Sequence[ScoreItem]) -> None:  # noqa: B027 (optional hook)
        """Send the requests of `items` ahead of `judge` (a judge that uses a batch API submits them
        all at once, so its batches wait side by side); most judges do nothing here."""

    def check_ready(self) -> None:  # noqa: B027 (optional hook)
        """Fail before any work (a missing key, model or adapter) with a UserError."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Free the model or client."""

    def usage(self) -> dict[str, Any] | None:
        """The requests, tokens and cost of the replies it was sent this run (`esc.chat.usage`); None
        for a judge that sends no requests (a local model read off its distribution)."""
        return None

    @property
    def prompt_identity(self) -> dict[str, Any]:
        """The rubric prompt a judgment records: style, version and the sha256 of its texts."""
        return prompt_style(self.prompt).identity

    @property
    def scores_by_adapter(self) -> bool:
        """Whether it scores through adapters trained per dimension (ESC-RANK): they answer a rubric's
        0-4, never a question given whole (`ScoreItem.messages`: role-play, safety, pairwise)."""
        return False


JudgeFactory = Callable[..., Judge]
REGISTRY: Registry[JudgeFactory] = Registry("judge", "esc.scoring.judges")


def register_judge(kind: str) -> Callable[[JudgeFactory], JudgeFactory]:
    """Class decorator: make a judge buildable from config as ``judge.kind: <kind>`` (a module of
    `esc.scoring.judges` is found without an import line; a taken kind is refused). The class
    declares its settings model, `Settings` (a `JudgeSettings`: every key it reads, typed), and is
    built as ``cls(settings, config_key=...)`` (where its node sits in the config: its errors name it)."""
    return registers_settings(REGISTRY, kind)


def _prompt_style(value: Any) -> str | None:
    """a prompt style of esc/scoring/rubrics.yaml (official, paper)"""
    known = prompt_style_names()
    return None if value in known else f"unknown prompt style {show(value)}; known: {known}"


PromptStyleName = Annotated[str, check(_prompt_style)]
"""A prompt style of `esc/scoring/rubrics.yaml` (`official`, `paper`)."""


class JudgeSettings(PluginSettings):
    """What every judge node holds (conf/judge/): its `kind`, its `name` (it names the score files),
    and two keys for people (`display_name`, `notes`) that no judge reads."""

    name: FileName = Field(description="it names the score files")
    display_name: Any = None
    notes: Any = None
