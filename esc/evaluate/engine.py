"""The dialogue engine: turn-synchronous waves for local models, independent dialogues for APIs.

Waves (`run_wave`): dialogues advance together: in each turn, every pending role-player message goes
to the role-player backend as one batch, then every target reply to the target backend as one batch.
Local models therefore generate full batches instead of one request at a time (the official
script's shape). Cards are processed in waves of `wave_size` dialogues so that finished dialogues
reach the disk as each wave completes.

Streaming (`run_streaming`): when every side is an API or a model server (a backend with
`max_concurrency`, which batches on its own), a wave would make each turn wait for its slowest
request. Instead up to `concurrency` dialogues are played at once, each on its own, turn after turn
as its replies arrive, and each is handed back (written, counted) the moment it completes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Annotated, Any, Literal

from pydantic import Field

from esc.chat.base import ChatBackend, GenerationSettings, Reply
from esc.chat.usage import Usage
from esc.config_rules import Settings
from esc.dialogues.record import Dialogue, Turn
from esc.evaluate.context import ContextFit, fit_context
from esc.evaluate.emotion import EmotionRater
from esc.evaluate.stopping import StopRule

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Side:
    """One party of the dialogue: its backend, decoding settings and name."""

    name: str
    backend: ChatBackend
    settings: GenerationSettings


#: what to do when a prompt outgrows a model's context window (`dialogue.context_policy`): truncate_oldest
#: drops the oldest exchanges, and fails the dialogue when that is not enough; fail fails it at once.
#: Either way a prompt over the window is never sent: the failure is recorded with its reason (exit 3).
CONTEXT_POLICIES = ("truncate_oldest", "fail")
#: how dialogues advance (`engine.mode`): auto picks streaming when every side has a `max_concurrency`
ENGINE_MODES = ("auto", "waves", "streaming")


class EngineSettings(Settings):
    """`engine` (conf/evaluate.yaml): how dialogues advance."""

    mode: Literal[ENGINE_MODES] = Field(description="auto streams when every side is an API/server")  # type: ignore[valid-type]
    wave_size: Literal["auto"] | Annotated[int, Field(ge=1)] = Field(
        description="auto: as many as memory allows"
    )
    concurrency: int | None = Field(ge=1, description="streaming: dialogues in flight")
    progress: bool


def streaming_concurrency(sides: Sequence[Side], engine: EngineSettings) -> int | None:
    """Dialogues in flight when dialogues should stream (see the module docstring), else None.

    `engine.mode` auto streams when every side's backend takes concurrent requests
    (`max_concurrency`); streaming forces it (local sides then get one conversation per call); waves
    never streams. `engine.concurrency` (null: the smallest `max_concurrency` of the sides) bounds
    the dialogues in flight.
    """
    limits = [side.backend.max_concurrency for side in sides]
    if engine.mode == "waves" or (engine.mode == "auto" and not all(limits)):
        return None
    if engine.concurrency is not None:
        return engine.concurrency
    return min((n for n in limits if n), default=1)


MAX_TURNS = 100  # exchanges of one dialogue: the paper plays 5; a count past this is a typo that runs forever


class DialogueSettings(Settings):
    """`dialogue` (conf/evaluate.yaml): how a dialogue is played."""

    # exchanges; with `stop`, the most a dialogue may take
    turns: int = Field(ge=1, le=MAX_TURNS, description="exchanges per dialogue; the paper plays 5")
    context_policy: Literal[CONTEXT_POLICIES]  # type: ignore[valid-type]  # a prompt too long for a window


@dataclasses.dataclass
class DialogueEngine:
    roleplayer: Side
    target: Side
    dialogue: DialogueSettings
    rater: EmotionRater | None = None  # the seeker's emotion after its first message and each reply
    stop: StopRule | None = None  # end a dialogue early on its emotion (needs `rater`)
    usage: dict[str, Usage] = dataclasses.field(
        default_factory=lambda: {"roleplayer": Usage(), "target": Usage()}
    )
    #: called after each batch of replies with (speaker, replies): progress a person can follow
    #: within a turn (from several threads when streaming)
    on_replies: Callable[[str, Sequence[Reply]], None] | None = None

    def __post_init__(self) -> None:
        self._usage_lock = threading.Lock()  # streaming: replies are counted from several threads

    def run_streaming(
        self, dialogues: Sequence[Dialogue], concurrency: int, stop: threading.Event | None = None
    ) -> Iterator[Dialogue]:
        """Play the dialogues independently, at most `concurrency` at once; yield each (complete or
        failed) as soon as it ends, in the order they end. Setting `stop` (or closing the generator,
        e.g. on Ctrl-C) starts no new turn; dialogues in flight end after their current request and
        are not yielded."""
        stop = stop or threading.Event()
        pending = iter(dialogues)
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="dialogue") as pool:
            running: set[Future] = set()
            try:
                while True:
                    while len(running) < concurrency and not stop.is_set():
                        dialogue = next(pending, None)
                        if dialogue is None:
                            break
                        running.add(pool.submit(self._play_one, dialogue, stop))
                    if not running:
                        return
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        dialogue = future.result()
                        if dialogue.status != "interrupted":
                            yield dialogue
            finally:
                stop.set()  # closed early (an exception, Ctrl-C): no new turns; in-flight requests end

    def _play_one(self, dialogue: Dialogue, stop: threading.Event) -> Dialogue:
        for exchange in range(1, self.dialogue.turns + 1):
            for side, speaker, view, head in (
                (self.roleplayer, "roleplayer", Dialogue.roleplayer_view, 2),
                (self.target, "target", Dialogue.target_view, None),
            ):
                if stop.is_set():
                    dialogue.status = "interrupted"
                    return dialogue
                self._step([dialogue], side, speaker, view, keep_head=head)
                if speaker == "roleplayer" and exchange == 1:
                    self._rate([dialogue])  # the start: before any reply of the target
            self._rate([dialogue])
            self._check_stop([dialogue], exchange)
            if dialogue.status != "running":
                break  # stopped early or failed: nothing more to play
        self._finish([dialogue])
        return dialogue

    def run_wave(self, dialogues: Sequence[Dialogue]) -> list[Dialogue]:
        """Play `turns` exchanges for every dialogue (fewer where `stop` ends one); each ends
        complete or failed with a reason."""
        for exchange in range(1, self.dialogue.turns + 1):
            self._step(dialogues, self.roleplayer, "roleplayer", Dialogue.roleplayer_view, keep_head=2)
            if exchange == 1:
                self._rate(dialogues)  # the start: before any reply of the target
            self._step(dialogues, self.target, "target", Dialogue.target_view, keep_head=None)
            self._rate(dialogues)
            self._check_stop(dialogues, exchange)
        self._finish(dialogues)
        return list(dialogues)

    def _rate(self, dialogues: Sequence[Dialogue]) -> None:
        """The seeker's emotion after the last turn of every dialogue still running."""
        if self.rater is not None:
            self.rater.rate([d for d in dialogues if d.status == "running"])

    def _check_stop(self, dialogues: Sequence[Dialogue], exchange: int) -> None:
        """End the dialogues whose seeker's emotion passed a threshold after `exchange` replies."""
        if self.stop is None:
            return
        for dialogue in dialogues:
            reason = self.stop.reason(dialogue, exchange) if dialogue.status == "running" else None
            if reason is not None:
                dialogue.status, dialogue.stop_reason = "complete", reason

    def _finish(self, dialogues: Sequence[Dialogue]) -> None:
        for dialogue in dialogues:
            if dialogue.status == "running":
                dialogue.status = "complete"
                if self.stop is not None:
                    dialogue.stop_reason = "max_turns"

    def _step(
        self,
        dialogues: Sequence[Dialogue],
        side: Side,
        speaker: str,
        view: Callable[[Dialogue], list],
        keep_head: int | None,
    ) -> None:
        active = [d for d in dialogues if d.status == "running"]
        if not active:
            return
        prompts = []
        for dialogue in active:
            fitted = self._fit(dialogue, side, speaker, view(dialogue), keep_head)
            if fitted is not None:
                prompts.append((dialogue, fitted.messages, fitted.dropped))
        replies = side.backend.generate([p[1] for p in prompts], side.settings) if prompts else []
        if len(replies) != len(prompts):
            raise RuntimeError(
                f"{side.name} backend returned {len(replies)} replies for {len(prompts)} prompts"
            )
        if self.on_replies is not None and replies:
            self.on_replies(speaker, replies)
        for (dialogue, _, n), reply in zip(prompts, replies, strict=True):
            with self._usage_lock:
                self.usage[speaker].add(reply)
            if not reply.ok:
                dialogue.fail(f"{speaker} {side.name}: {reply.error or 'generation failed'}")
                continue
            if not reply.text.strip():  # whatever the backend: a turn without text is never played on
                dialogue.fail(f"{speaker} {side.name}: empty reply (finish_reason {reply.finish_reason})")
                continue
            dialogue.turns.append(Turn.from_reply(speaker, reply, context_dropped=n))

    def _fit(
        self, dialogue: Dialogue, side: Side, speaker: str, messages: list, keep_head: int | None
    ) -> ContextFit | None:
        """The prompt to send for `dialogue`, made to fit `side`'s context window under the
        context policy; None, with the dialogue failed and the reason recorded, when it cannot fit:
        `fail` and the prompt is over the window, or `truncate_oldest` and it is still over after
        dropping every exchange that may be dropped (the card prompt, opener and newest message
        alone are too long). A prompt over the window is never sent."""
        head = keep_head if keep_head is not None else int(bool(dialogue.target_system_prompt))
        window, reserve = side.backend.context_window, side.settings.max_new_tokens
        truncate = self.dialogue.context_policy == "truncate_oldest"
        fit = fit_context(messages, side.backend.count_tokens, window, reserve, head, truncate=truncate)
        if not fit.fits:
            reason = f"{speaker} {overflow_reason(fit, window, reserve, self.dialogue.context_policy)}"
            log.warning("card %s: failed: %s", dialogue.card_id, reason)
            dialogue.fail(reason)
            return None
        if fit.dropped:
            log.warning(
                "card %s: %s prompt over its context window; dropped %d oldest messages",
                dialogue.card_id,
                speaker,
                fit.dropped,
            )
        return fit


def overflow_reason(fit: ContextFit, window: int | None, reserve: int, policy: str) -> str:
    """Why a prompt was not sent, for the failed-dialogues file: its size, the window, the policy."""
    size = f"{fit.tokens} tokens + {reserve} for the reply"
    if policy == "fail":
        return (
            f"prompt does not fit its context window ({window} tokens): {size} (dialogue.context_policy=fail)"
        )
    dropped = f" after dropping the {fit.dropped} oldest messages" if fit.dropped else ""
    return (
        f"prompt does not fit its context window ({window} tokens): {size}{dropped}, and nothing is left "
        f"to drop (the system prompt, opener and newest message stay; dialogue.context_policy={policy})"
    )


def usage_report(engine: DialogueEngine) -> dict[str, Any]:
    """Per side: requests, cache hits, errors, fresh and cached tokens, cost of the fresh ones,
    and the served models / fingerprints the API reported."""
    report = {
        speaker: engine.usage[speaker].report(side.backend.price)
        for speaker, side in (("roleplayer", engine.roleplayer), ("target", engine.target))
    }
    if engine.rater is not None:  # the emotion ratings written by a model (not those read off a distribution)
        question = engine.rater.question
        report["rater"] = question.usage.report(question.backend.price)
    return report
