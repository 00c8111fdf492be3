"""The evaluation job behind `evaluate.py`: role-player × target × role cards → dialogue files."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from esc.cards import RoleCard
from esc.cards.selection import CardSelection, Shard, select_cards
from esc.chat.base import ChatBackend, GenerationSettings, Reply
from esc.chat.build import build_backend
from esc.chat.cache import CacheSettings, with_cache
from esc.chat.cost import MESSAGE_TOKENS, before_spending
from esc.config_rules import OpenSettings, Section
from esc.dialogues.record import Dialogue
from esc.dialogues.store import DialogueStore, dialogue_file, refuse_other_seeker
from esc.errors import ConfigError, in_multirun
from esc.evaluate.emotion import EmotionRater, TrajectorySettings, build_rater
from esc.evaluate.engine import (
    DialogueEngine,
    DialogueSettings,
    EngineSettings,
    Side,
    streaming_concurrency,
    usage_report,
)
from esc.evaluate.estimate import estimate_dialogues
from esc.evaluate.sides import RoleplayerSettings, SeekerSettings, TargetSettings
from esc.evaluate.stopping import StopRule
from esc.lifecycle import Job, JobResult, job_run
from esc.progress import Progress
from esc.prompts import example_dialogue, prompt_version, render_roleplayer_prompt
from esc.prompts.seekers import instruction, profile_settings, record_identity
from esc.rundir import model_settings, read_settings, refuse_unswept_sweep, resolved_revision

log = logging.getLogger(__name__)
MANIFEST_EVERY_S = 10.0  # at most one rewrite of manifest.json (running counts) per this many seconds


SIDES = ("roleplayer", "target")
TARGET_KEYS = (
    "backend",
    "display_name",
    "generation",
    "name",
    "notes",
    "system_prompt",
    "weights_unavailable",
)


@dataclasses.dataclass
class EvaluateResult(JobResult):
    """The dialogue files of a run and what became of its cards this time."""

    files: dict[str, str] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped: str | None = None  # why a sweep's job did not run (a target without weights)

    def summary(self) -> str:
        if self.skipped:
            return f"skipped {self.skipped}"
        c = self.counts
        return (
            f"{c['completed']} dialogues completed, {c['failed']} failed, {c['skipped']} already done; "
            f"files: {', '.join(self.files.values())}"
        )

    def incomplete(self) -> str | None:
        if not self.counts.get("failed"):
            return None
        return (
            f"{self.counts['failed']} of {self.counts['selected']} dialogues failed (reasons in "
            f"{self.output_dir}/dialogues/*.failed.jsonl); rerun the same command to retry them"
        )


def _side(node: RoleplayerSettings | TargetSettings, role: str, cache: CacheSettings | None) -> Side:
    backend: ChatBackend = build_backend(node.backend, key=f"{role}.backend")
    return Side(node.name, with_cache(backend, cache), node.generation.settings())


class DialogueFactory:
    """Opens a dialogue for a card: the role-player's prompt (versioned) with the seeker profile's
    line after the card, and the target's system prompt."""

    def __init__(
        self, roleplayer: RoleplayerSettings, target: TargetSettings, seeker: SeekerSettings,
        settings: dict[str, Any],
    ) -> None:  # fmt: skip
        self.roleplayer, self.target, self.seeker, self.settings = roleplayer, target, seeker.name, settings
        self.examples: dict[str, str] = {}

    def __call__(self, card: RoleCard) -> Dialogue:
        example = None
        if self.roleplayer.icl:
            if card.language not in self.examples:
                self.examples[card.language] = example_dialogue(card.language)
            example = self.examples[card.language]
        prompt_id, language = self.roleplayer.prompt, card.language
        seeker = instruction(self.seeker, language)  # "" for the cooperative seeker: the card alone
        system, opener = render_roleplayer_prompt(prompt_id, language, card.to_text(), example, seeker)
        profile = record_identity(self.seeker, language)  # None for the cooperative seeker: no key
        return Dialogue(
            card_id=card.id,
            language=card.language,
            roleplayer=self.roleplayer.name,
            target=self.target.name,
            system_prompt=system,
            opener=opener,
            target_system_prompt=self.target.system_prompt,
            meta={
                "prompt": {"id": prompt_id, "version": prompt_version(prompt_id)},
                **({"seeker": profile} if profile else {}),
                **self.settings,
            },
        )


#: the folder's fingerprint keys (`output_settings`) as the config keys a user sets, for the error
#: naming a difference (`esc.rundir.config_key`): a side's backend identity is kept under `model`
CONFIG_KEYS = {
    **{f"{side}.model": f"{side}.backend" for side in SIDES},
    **{
        f"{side}.model.{field}": f"{side}.backend.model.{key}"
        for side in SIDES
        for field, key in (("name_or_path", "name_or_path"), ("configured_revision", "revision"))
    },
    "trajectory.observer": "trajectory.observer.backend",
    "roleplayer.prompt.id": "roleplayer.prompt",
}


def output_settings(
    roleplayer_cfg: RoleplayerSettings, target_cfg: TargetSettings, sides: tuple[Side, Side],
    dialogue_cfg: DialogueSettings, seeker: SeekerSettings,
) -> dict[str, Any]:  # fmt: skip
    """What shapes a dialogue folder's outputs (OUT/settings.json): a rerun must match it to resume.
    A seeker profile other than the cooperative one is recorded (`seeker`: name, version); the
    cooperative seeker records nothing, so folders made before profiles resume as they did."""
    roleplayer, target = sides
    prompt_id = roleplayer_cfg.prompt
    profile = profile_settings(seeker.name)
    settings = {
        "roleplayer": {
            "name": roleplayer.name,
            "prompt": {"id": prompt_id, "version": prompt_version(prompt_id)},
            "icl": roleplayer_cfg.icl,
            "model": model_settings(roleplayer.backend.identity()),
            "generation": roleplayer.settings.to_dict(),
        },
        "target": {
            "name": target.name,
            "system_prompt": target_cfg.system_prompt,
            "model": model_settings(target.backend.identity()),
            "generation": target.settings.to_dict(),
        },
        "dialogue": {"turns": dialogue_cfg.turns, "context_policy": dialogue_cfg.context_policy},
    }
    if profile is not None:
        settings["seeker"] = profile
    return settings


def check_ready(sides: Sequence[Side]) -> None:
    """Fail in seconds, before any model loads: API keys, endpoints (one cheap request), model
    and adapter paths, on every side."""
    for side in sides:
        side.backend.check_ready()


def unavailable_target(target: TargetSettings) -> str | None:
    """Why the target cannot run as configured: its config says it has no weights to download
    (`weights_unavailable`) and no local copy is given. None when it can run."""
    model = getattr(target.backend, "model", None)  # an API's model is a name, a local one a node
    if not target.weights_unavailable or getattr(model, "name_or_path", None):
        return None
    return f"{target.name}: {target.weights_unavailable}"


def evaluate(cfg: DictConfig, checked: Mapping[Any, Any]) -> EvaluateResult:
    """Play every selected card against the target; resumable, writing each wave as it completes.

    A target without downloadable weights (`unavailable_target`) is a one-line error, or, in a
    sweep such as `+exp=evaluate/table2_en`, a skipped job (`EvaluateResult.skipped`) so the grid goes on.
    `checked`: what `esc.config_schema.validate` returned (the settings read here and below)."""
    refuse_unswept_sweep()  # before the skip below, which only a sweep may take
    out = Path(cfg.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    run: EvaluateSettings = checked[EvaluateSettings]
    reason = unavailable_target(run.target)
    if reason:
        if in_multirun():
            log.warning("Skipped: %s", reason)
            return EvaluateResult(str(out), skipped=reason)
        raise ConfigError(
            "target.backend.model.name_or_path",
            f"is not set, and {reason}: target.backend.model.name_or_path=PATH",
        )
    cards = select_cards(run.cards, run.shard)
    dialogue, engine, trajectory = run.dialogue, run.engine, run.trajectory
    if out.is_dir():  # a folder holds one seeker profile's dialogues: another is refused before any work
        refuse_other_seeker(out, profile_settings(run.seeker.name), read_settings(out).get("evaluate"))

    roleplayer = _side(run.roleplayer, "roleplayer", run.cache)
    target = _side(run.target, "target", run.cache)
    observer = _observer(trajectory, run.cache)
    sides = (roleplayer, target, *([observer] if observer else []))
    try:
        check_ready(sides)
        rater = _rater(trajectory, roleplayer, observer, cards, dialogue.context_policy)
        stop = trajectory.stop.rule() if trajectory.enabled and trajectory.stop else None  # needs ratings
        settings = output_settings(run.roleplayer, run.target, (roleplayer, target), dialogue, run.seeker)
        if rater is not None:  # only then: folders without a trajectory keep their fingerprint
            settings["trajectory"] = trajectory_settings(rater, stop)
        estimate = estimate_dialogues(  # requests, tokens and dollars, when a side has a price
            out, cards, DialogueFactory(run.roleplayer, run.target, run.seeker, {}), roleplayer, target,
            dialogue.turns,
            rater,
        )  # fmt: skip
        before_spending(estimate, run.max_cost)  # printed; over max_cost: refused here
        with job_run(out, "evaluate", settings, resolved, seed=run.seed, config_keys=CONFIG_KEYS) as job:
            if estimate is not None:
                job.manifest.update(cost_estimate=estimate.to_dict())
            for side in sides:
                side.backend.load()  # minutes for a large model: after the cheap checks
            if rater is not None:
                rater.check_ready()  # its answers' token ids, before any dialogue is played
            job.folder.check_resolved(
                {
                    side: resolved_revision(s.backend.identity())
                    for side, s in zip((*SIDES, "observer"), sides, strict=False)
                }
            )
            nodes = (run.roleplayer, run.target, run.seeker)
            return _play(job, out, cards, nodes, roleplayer, target, dialogue, engine, rater, stop)
    finally:
        for side in sides:
            side.backend.close()


def _observer(trajectory: TrajectorySettings, cache: CacheSettings | None) -> Side | None:
    """The observer's side when the trajectory is rated by one (`trajectory.rater=observer`)."""
    if not trajectory.enabled or trajectory.rater != "observer":
        return None
    node = trajectory.observer
    assert node is not None and node.backend is not None  # TrajectorySettings' own check
    backend = with_cache(build_backend(node.backend, key="trajectory.observer.backend"), cache)
    return Side(node.name or "observer", backend, GenerationSettings())


def _rater(
    trajectory: TrajectorySettings, roleplayer: Side, observer: Side | None, cards: Sequence[RoleCard],
    context_policy: str,
) -> EmotionRater | None:  # fmt: skip
    """The emotion rater of `trajectory.enabled=true`, else None (a stop rule needs one)."""
    if not trajectory.enabled:
        return None
    texts = {(card.id, card.language): card.to_text() for card in cards}
    return build_rater(
        trajectory, roleplayer.backend, observer.backend if observer else None, texts, context_policy
    )


AUTO_WAVE_MAX = 256  # `engine.wave_size: auto` writes dialogues at least every this many


def auto_wave_size(
    pending: Sequence[RoleCard], factory: DialogueFactory, roleplayer: Side, target: Side, turns: int
) -> int:
    """`engine.wave_size: auto`: all pending cards at once, as many as each side keeps between
    turns (a local model's prefix cache, at the longest card's prompt plus every turn at its
    `max_new_tokens`), at most AUTO_WAVE_MAX: large waves run the matrix products at the row counts
    where the hardware is fast, and no conversation's kept prefix is pushed out by another's."""
    if not pending:
        return 1
    prompts = [roleplayer.backend.count_tokens(factory(card).roleplayer_view()) or 0 for card in pending]
    per_turn = roleplayer.settings.max_new_tokens + target.settings.max_new_tokens + 2 * MESSAGE_TOKENS
    tokens = max(prompts) + turns * per_turn
    bounds = [
        b for side in (roleplayer, target) if (b := side.backend.kept_conversations(tokens)) is not None
    ]
    size = max(1, min(AUTO_WAVE_MAX, len(pending), *bounds))
    held = " and ".join(f"{b:,}" for b in bounds) if bounds else "any number of"
    log.info(
        "Playing %d dialogues a wave, %d pending (engine.wave_size=auto: each side's prefix cache holds "
        "%s dialogues of up to %s tokens)", size, len(pending), held, f"{tokens:,}",
    )  # fmt: skip
    return size


def trajectory_settings(rater: EmotionRater, stop: StopRule | None) -> dict[str, Any]:
    """What shapes the ratings (the observer's model among them) and where dialogues end: in the
    folder's settings (a folder with other ones is not resumed) and each dialogue's meta."""
    return {**rater.identity(), "stop": stop.to_dict() if stop else None}


def _play(
    job: Job, out: Path, cards: list[RoleCard],
    nodes: tuple[RoleplayerSettings, TargetSettings, SeekerSettings],
    roleplayer: Side, target: Side,
    dialogue: DialogueSettings, engine_settings: EngineSettings, rater: EmotionRater | None = None,
    stop: StopRule | None = None,
) -> EvaluateResult:  # fmt: skip
    manifest = job.manifest
    models = {"roleplayer": roleplayer.backend.identity(), "target": target.backend.identity()}
    if rater is not None and rater.rater == "observer":
        models["observer"] = rater.question.backend.identity()
    manifest.update(models=models)

    stores = {
        lang: DialogueStore(dialogue_file(out, target.name, roleplayer.name, lang))
        for lang in sorted({c.language for c in cards})
    }
    pending = [c for c in cards if not stores[c.language].is_done(c.id, c.language)]
    skipped = len(cards) - len(pending)
    if skipped:
        log.info(
            "Resuming: %d of %d dialogues already complete in %s", skipped, len(cards), out / "dialogues"
        )
    meta = {
        "generation": {"roleplayer": roleplayer.settings.to_dict(), "target": target.settings.to_dict()},
        "turns": dialogue.turns,
    }
    if rater is not None:
        meta["trajectory"] = trajectory_settings(rater, stop)
    factory = DialogueFactory(*nodes, meta)  # the role-player's, the target's and the seeker's settings
    engine = DialogueEngine(roleplayer, target, dialogue, rater=rater, stop=stop)
    rating = [Side("rater", rater.question.backend, GenerationSettings())] if rater else []
    # a local rater makes the dialogues advance in waves too
    concurrency = streaming_concurrency((roleplayer, target, *rating), engine_settings)
    counts = {"selected": len(cards), "skipped": skipped, "completed": 0, "failed": 0}
    job.on_stop(lambda: {"counts": counts, "usage": usage_report(engine)})
    turns = dialogue.turns
    planned = len(pending) * turns * 2  # messages: the seeker's and the target's, per exchange
    with Progress(
        planned, "message", f"{roleplayer.name} × {target.name}", enabled=engine_settings.progress
    ) as bar:
        last_update = [0.0]
        tokens = [0]
        lock = threading.Lock()
        started = time.monotonic()

        def replied(speaker: str, replies: Sequence[Reply]) -> None:
            with lock:
                played = [r for r in replies if r.ok and r.text.strip()]  # the others fail their dialogue
                tokens[0] += sum(r.completion_tokens or 0 for r in played)
                rate = tokens[0] / max(time.monotonic() - started, 1e-9)
                bar.update(len(played), tok_s=f"{rate:.1f}")

        engine.on_replies = replied

        def finished(dialogues: list[Dialogue]) -> None:
            for dialogue in dialogues:
                stores[dialogue.language].add(dialogue)
                counts["completed" if dialogue.status == "complete" else "failed"] += 1
            # messages a dialogue will not play (it stopped early or failed) leave the count
            unplayed = sum(max(turns * 2 - len(d.turns), 0) for d in dialogues)
            with lock:
                done = counts["completed"] + counts["failed"]
                bar.update(unplayed, dialogues=f"{done}/{len(pending)}", failed=counts["failed"])
            # the dialogues are on disk already; the manifest's running counts need not be
            # rewritten for each of them when they stream in (finish() writes the last ones)
            if time.monotonic() - last_update[0] >= MANIFEST_EVERY_S:
                manifest.update(counts=counts, usage=usage_report(engine))
                last_update[0] = time.monotonic()

        if concurrency:  # every side an API or server: each dialogue goes on as its replies arrive
            log.info("Streaming: up to %d dialogues at once, each written when it ends", concurrency)
            for dialogue in engine.run_streaming([factory(card) for card in pending], concurrency):
                finished([dialogue])
        else:  # local models: turn-synchronous batches, one wave at a time
            wave_size = (
                auto_wave_size(pending, factory, roleplayer, target, turns)
                if engine_settings.wave_size == "auto"
                else engine_settings.wave_size
            )
            for start in range(0, len(pending), wave_size):
                finished(engine.run_wave([factory(card) for card in pending[start : start + wave_size]]))
    for store in stores.values():
        store.finalize()
    files = {lang: str(store.path) for lang, store in stores.items()}
    result = EvaluateResult(str(out), files=files, counts=counts)
    return job.complete(result, counts=counts, usage=usage_report(engine), files=files)


class EvaluateSettings(OpenSettings):
    """What evaluate.py reads of its config (conf/evaluate.yaml), checked before any work
    (`esc.config_schema.validate`); the rest of the top level (hydra, paths) is Hydra's."""

    seed: int
    max_cost: float | None = Field(ge=0, description="USD: refuse a run estimated over it")
    cards: CardSelection
    shard: Shard
    dialogue: DialogueSettings
    engine: EngineSettings
    trajectory: TrajectorySettings
    roleplayer: RoleplayerSettings
    target: TargetSettings
    seeker: SeekerSettings
    cache: CacheSettings | None = None  # a primary config of one's own may leave the cache out: none


#: evaluate.py's config: one model tree
CONFIG: tuple[Section, ...] = (Section("", EvaluateSettings),)
