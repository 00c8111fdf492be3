"""What a composed config may hold: one declarative table of (key, rule) checks, run before any work.

`validate(cfg, job)` is the first line of `train.py`, `evaluate.py` and `rank.py`: it stops at the
first problem with a `ConfigError` naming the key (one line, exit code 2), so a typo'd value never
reaches a model load or writes a file. Three kinds of checks, in this order:

1. mandatory values (`???` in `conf/`) that the job needs and the command line did not set;
2. the rules of `RULES`: a key, the jobs it applies to, a check (type, range, choice, path that must
   exist) and, optionally, a condition on the rest of the config;
3. relations between keys (`RELATIONS`), e.g. `shard.index < shard.count`.

Keys absent from the composed config are skipped (an experiment may not have them). Unknown keys
never get here: Hydra refuses an override of a key that does not exist (use `+key=value` to add
one), and `esc.lifecycle.run_hydra` prints its refusal as one line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from esc.cards.schema import LANGUAGES
from esc.chat.build import backend_kinds
from esc.chat.cache import JOURNAL_MODES
from esc.errors import ConfigError
from esc.esc_rank.data import ADAPTER_MODES as RANK_ADAPTERS
from esc.esc_rank.data import BALANCE_MODES as RANK_BALANCE
from esc.interact.engine import CONTEXT_POLICIES, ENGINE_MODES
from esc.jobs.rank import MODES as RANK_MODES
from esc.lifecycle import SCRIPTS
from esc.models.loading import AUTO_CLASSES
from esc.reports.agreement_data import SPLITS as AGREEMENT_SPLITS
from esc.scoring.judges import judge_kinds

Job = Literal["train", "evaluate", "rank", "cards"]
JOBS: tuple[str, ...] = ("train", "evaluate", "rank", "cards")
TRAIN, EVALUATE, RANK, CARDS = ("train",), ("evaluate",), ("rank",), ("cards",)

# Choices the code acts on, from the modules that act on them.
RESUME_MODES = ("auto", "never")  # esc/train/run.py; or a checkpoint path

Check = Callable[[Any], "str | None"]
"""A check takes a plain value (containers converted) and returns the problem, or None if fine."""

_ABSENT = object()


# --- checks ---------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    """A value as the command line would write it: "abc", 1, true, null, [1, 2]."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(minimum: int | None = None, null: bool = False) -> Check:
    """An integer (not a bool, not a float) >= `minimum`; `null` allows None."""
    wanted = "an integer" + (f" >= {minimum}" if minimum is not None else "") + (" or null" if null else "")

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not _is_int(value) or (minimum is not None and value < minimum):
            return f"must be {wanted}, got {_show(value)}"
        return None

    return check


def number(
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    null: bool = False,
) -> Check:
    """A number within the bounds: `minimum`/`maximum` inclusive, `above`/`below` exclusive."""
    bounds = [
        f"{op} {bound}"
        for op, bound in ((">=", minimum), (">", above), ("<=", maximum), ("<", below))
        if bound is not None
    ]
    wanted = " and ".join(b for b in bounds if b)
    wanted = "a number" + (f" {wanted}" if wanted else "") + (" or null" if null else "")

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        ok = _is_number(value) and not (
            (minimum is not None and value < minimum)
            or (above is not None and value <= above)
            or (maximum is not None and value > maximum)
            or (below is not None and value >= below)
        )
        return None if ok else f"must be {wanted}, got {_show(value)}"

    return check


def boolean() -> Check:
    def check(value: Any) -> str | None:
        return None if isinstance(value, bool) else f"must be true or false, got {_show(value)}"

    return check


def one_of(*choices: Any, null: bool = False) -> Check:
    """One of `choices` (compared exactly: `1` is not `"1"`)."""
    shown = ", ".join(c if isinstance(c, str) else _show(c) for c in choices) + (" or null" if null else "")

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not any(type(value) is type(c) and value == c for c in choices):
            return f"must be one of {shown}, got {_show(value)}"
        return None

    return check


def registered(kinds: Callable[[], Sequence[str]]) -> Check:
    """One of the kinds a registry knows when the check runs (`backend_kinds`, `judge_kinds`): a
    backend or judge registered by a plugin is a valid `kind:` too."""

    def check(value: Any) -> str | None:
        return one_of(*kinds())(value)

    return check


def list_of(item: Check, null: bool = False, length: int | None = None) -> Check:
    """A non-empty list (of exactly `length` items if given) whose every item passes `item`."""

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, list):
            return f"must be a list, e.g. [a, b]{' or null' if null else ''}, got {_show(value)}"
        if not value:
            return "is an empty list, which selects nothing" + ("; use null for the default" if null else "")
        if length is not None and len(value) != length:
            return f"must have {length} items, got {len(value)}"
        for i, x in enumerate(value):
            problem = item(x)
            if problem:
                return f"item {i}: {problem}"
        return None

    return check


def path(kind: Literal["file", "dir", "any"] = "any", null: bool = False) -> Check:
    """A path that exists: a file, a directory, or either."""

    def check(value: Any) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, str) or not value:
            return f"must be a path, got {_show(value)}"
        p = Path(value)
        if not p.exists():
            return (
                f"{value}: no such {'directory' if kind == 'dir' else 'file' if kind == 'file' else 'path'}"
            )
        if kind == "file" and not p.is_file():
            return f"{value}: is a directory, not a file"
        if kind == "dir" and not p.is_dir():
            return f"{value}: is a file, not a directory"
        return None

    return check


def paths(kind: Literal["file", "dir", "any"] = "any") -> Check:
    """One existing path, or a non-empty list of them."""
    single = path(kind)
    many = list_of(single)

    def check(value: Any) -> str | None:
        return many(value) if isinstance(value, list) else single(value)

    return check


def strings() -> Check:
    """Null, or a (possibly empty) list of strings."""

    def check(value: Any) -> str | None:
        if value is None or (isinstance(value, list) and all(isinstance(x, str) for x in value)):
            return None
        return f"must be a list of strings, got {_show(value)}"

    return check


def device() -> Check:
    """`auto`, or a device torch knows (`cpu`, `cuda`, `cuda:1`, `mps`, ...)."""

    def check(value: Any) -> str | None:
        if value == "auto":
            return None
        import torch

        try:
            torch.device(value)
        except (RuntimeError, TypeError, ValueError):
            return f"must be auto or a torch device such as cpu, cuda or cuda:1, got {_show(value)}"
        return None

    return check


def precision() -> Check:
    """A precision Lightning's Trainer accepts (`32-true`, `bf16-mixed`, `16-mixed`, 32, ...)."""

    def check(value: Any) -> str | None:
        from typing import get_args

        from lightning_fabric.plugins.precision.precision import _PRECISION_INPUT

        allowed = [c for part in get_args(_PRECISION_INPUT) for c in get_args(part)]
        if any(type(value) is type(c) and value == c for c in allowed):
            return None
        shown = ", ".join(str(c) for c in allowed if isinstance(c, str) and "-" in c)
        return f"must be one of {shown} (or 64, 32, 16, bf16), got {_show(value)}"

    return check


def validation_interval() -> Check:
    """Lightning's `val_check_interval`: null, a number of batches, a fraction of an epoch, or a time
    "DD:HH:MM:SS" (four integers)."""
    batches, fraction = integer(1), number(above=0, maximum=1)

    def check(value: Any) -> str | None:
        parts = value.split(":") if isinstance(value, str) else []
        is_time = len(parts) == 4 and all(p.strip().isdigit() for p in parts)
        if value is None or is_time or batches(value) is None or fraction(value) is None:
            return None
        return (
            f"must be null, an integer >= 1, a number > 0 and <= 1 or a time DD:HH:MM:SS, got {_show(value)}"
        )

    return check


def either(*checks: Check) -> Check:
    """Passes when any check passes; otherwise the problem of the last one."""

    def check(value: Any) -> str | None:
        problems = [c(value) for c in checks]
        return None if any(p is None for p in problems) else problems[-1]

    return check


# --- the table ------------------------------------------------------------------------------------


def _mode(cfg: DictConfig) -> Any:
    return cfg.get("mode", "score")


def _judging(cfg: DictConfig) -> bool:
    """rank.py loads the judge: mode=score or roleplay, or mode=agreement without existing `scores`."""
    return _mode(cfg) in ("score", "roleplay") or (_mode(cfg) == "agreement" and not cfg.get("scores"))


@dataclasses.dataclass(frozen=True)
class Rule:
    """`key` (dotted) must pass `check` in `jobs`, when `when(cfg)` holds; `hint` follows the problem."""

    key: str
    check: Check
    jobs: tuple[str, ...]
    hint: str = ""
    when: Callable[[DictConfig], bool] | None = None


def _side_rules(side: str) -> list[Rule]:
    """evaluate.py: the role-player's and the target's backend and decoding settings."""
    return [
        Rule(f"{side}.backend.kind", registered(backend_kinds), EVALUATE),
        Rule(f"{side}.backend.device", device(), EVALUATE, "auto: a CUDA GPU when there is one"),
        Rule(f"{side}.backend.adapter", path("dir", null=True), EVALUATE, "a PEFT adapter directory"),
        Rule(f"{side}.backend.batch_size", either(one_of("auto"), integer(1)), EVALUATE, "or auto"),
        Rule(f"{side}.backend.model.auto_class", one_of(*AUTO_CLASSES, null=True), EVALUATE),
        Rule(f"{side}.generation.max_new_tokens", integer(1), EVALUATE),
        Rule(f"{side}.generation.temperature", number(minimum=0), EVALUATE, "0: greedy"),
        Rule(f"{side}.generation.top_p", number(above=0, maximum=1), EVALUATE),
        Rule(f"{side}.generation.seed", integer(null=True), EVALUATE),
        Rule(f"{side}.generation.stop", strings(), EVALUATE),
    ]


RULES: tuple[Rule, ...] = (
    # every job
    Rule("seed", integer(), JOBS),
    # evaluate.py
    Rule("cards.languages", list_of(one_of(*LANGUAGES)), EVALUATE),
    Rule("cards.ids", list_of(integer(0), null=True), EVALUATE, "card ids, e.g. [32025, 10000]"),
    Rule("cards.limit", integer(1, null=True), EVALUATE, "the first N cards per language; null: all"),
    Rule("cards.paths", list_of(path("file"), null=True), EVALUATE, "card files; null: the released cards"),
    Rule("dialogue.turns", integer(1), EVALUATE),
    Rule("dialogue.context_policy", one_of(*CONTEXT_POLICIES), EVALUATE),
    Rule("engine.wave_size", integer(1), EVALUATE),
    Rule("engine.mode", one_of(*ENGINE_MODES), EVALUATE, "auto streams when every side is an API/server"),
    Rule("engine.concurrency", integer(1, null=True), EVALUATE, "streaming: dialogues in flight"),
    Rule("engine.progress", boolean(), EVALUATE),
    Rule("shard.count", integer(1), EVALUATE),
    Rule("shard.index", integer(0), EVALUATE),
    Rule("cache.enabled", boolean(), ("evaluate", "rank")),
    Rule("cache.journal_mode", one_of(*JOURNAL_MODES), ("evaluate", "rank"), "auto picks per filesystem"),
    Rule("cache.timeout_s", number(above=0), ("evaluate", "rank"), "seconds to wait for the cache's lock"),
    *_side_rules("roleplayer"),
    *_side_rules("target"),
    # train.py
    Rule(
        "resume",
        either(one_of(*RESUME_MODES, False, null=True), path("any")),
        TRAIN,
        "auto, never, or an existing checkpoint path",
    ),
    Rule("cpu_fallback", boolean(), TRAIN),
    Rule("model.max_length", integer(1), TRAIN),
    Rule("model.context_window", integer(1, null=True), JOBS),
    Rule("peft.r", integer(1), TRAIN, "the LoRA rank"),
    Rule("peft.lora_alpha", number(above=0), TRAIN),
    Rule("peft.lora_dropout", number(minimum=0, below=1), TRAIN),
    Rule("datamodule.batch_size", integer(1), TRAIN),
    Rule("datamodule.eval_batch_size", integer(1), TRAIN),
    Rule("datamodule.num_workers", integer(0), TRAIN),
    Rule("datamodule.num_proc", integer(1, null=True), TRAIN),
    Rule("module.warmup_ratio", number(minimum=0, maximum=1), TRAIN),
    Rule("optimizer.lr", number(above=0), TRAIN),
    Rule("trainer.max_steps", integer(-1), TRAIN, "-1: train for trainer.max_epochs"),
    Rule("trainer.max_epochs", integer(-1, null=True), TRAIN),
    Rule("trainer.accumulate_grad_batches", integer(1), TRAIN),
    Rule("trainer.num_nodes", integer(1), TRAIN),
    Rule("trainer.log_every_n_steps", integer(1), TRAIN),
    Rule("trainer.num_sanity_val_steps", integer(-1), TRAIN),
    Rule("trainer.limit_val_batches", number(minimum=0), TRAIN),
    Rule("trainer.gradient_clip_val", number(minimum=0, null=True), TRAIN),
    Rule("trainer.precision", precision(), TRAIN, "bf16-mixed on GPUs, 32-true on CPUs"),
    Rule(
        "trainer.val_check_interval",
        validation_interval(),
        TRAIN,
        "null: at each epoch's end; N: every N training batches; 0.25: four times an epoch",
    ),
    Rule("callbacks.checkpoint.every_n_train_steps", integer(0, null=True), TRAIN),
    Rule("data.languages", list_of(one_of(*LANGUAGES)), TRAIN),
    Rule("data.roleplay_ratio", number(minimum=0), TRAIN),
    Rule("data.hold_out_card_echo", boolean(), TRAIN),
    Rule("data.sources.smile.cards", path("file", null=True), TRAIN, "a JSON-lines card file; null: none"),
    Rule("data.sources.roleplay.rolebench_turns", integer(1), TRAIN, "question/answer pairs per session"),
    Rule("data.val_fraction", number(minimum=0, below=1), TRAIN),
    Rule("data.balance_power", number(minimum=0), TRAIN, "0: no class weights; 1: every score equally"),
    Rule("datamodule.weighted_sampling", boolean(), TRAIN),
    Rule("module.weighted_loss", boolean(), TRAIN),
    Rule("rank.adapters", one_of(*RANK_ADAPTERS), TRAIN),
    Rule("rank.balance", one_of(*RANK_BALANCE), TRAIN),
    Rule("rank.compare_base", boolean(), TRAIN),
    Rule("rank.min_answer_mass", number(minimum=0, maximum=1), TRAIN),
    Rule("rank.bootstrap", integer(0), TRAIN),
    # python build_cards.py
    Rule("cards.limit", integer(1, null=True), CARDS, "the first N records of each source; null: all"),
    Rule("cards.languages", list_of(one_of(*LANGUAGES)), CARDS),
    Rule("cards.dedup_threshold", number(above=0, maximum=1), CARDS),
    Rule("extractor.kind", registered(backend_kinds), CARDS),
    Rule("chunk", integer(1), CARDS),
    # rank.py
    Rule("mode", one_of(*RANK_MODES), RANK),
    Rule(
        "dialogues",
        paths(),
        RANK,
        "evaluate.py output dirs or dialogue files",
        when=lambda cfg: _mode(cfg) in ("score", "roleplay"),
    ),
    Rule(
        "scores",
        paths(),
        RANK,
        "rank.py output dirs or score files",
        when=lambda cfg: _mode(cfg) == "leaderboard",
    ),
    Rule("scores", either(one_of(None), paths()), RANK, when=lambda cfg: _mode(cfg) == "agreement"),
    Rule("scoring.chunk", integer(1), RANK),
    Rule("leaderboard.bootstrap", integer(0), RANK),
    Rule("agreement.split", one_of(*AGREEMENT_SPLITS), RANK),
    Rule("agreement.split_ratios", list_of(number(minimum=0), length=3), RANK, "train : val : test"),
    Rule("agreement.languages", list_of(one_of(*LANGUAGES)), RANK),
    Rule("agreement.bootstrap", integer(0), RANK),
    Rule("correlation.bootstrap", integer(0), RANK),
    Rule("judge.kind", registered(judge_kinds), RANK, when=_judging),
    Rule("judge.device", device(), RANK, "auto: a CUDA GPU when there is one", when=_judging),
    Rule("judge.batch_size", integer(1), RANK, when=_judging),
    Rule("judge.max_new_tokens", integer(1), RANK, when=_judging),
    Rule("judge.min_answer_mass", number(minimum=0, maximum=1), RANK, when=_judging),
    Rule("judge.adapters.root", path("dir", null=True), RANK, when=_judging),
)


@dataclasses.dataclass(frozen=True)
class Relation:
    """A check across keys: `check(cfg)` returns the problem with `key`, or None."""

    key: str
    check: Callable[[DictConfig], str | None]
    jobs: tuple[str, ...]


def _shard_in_range(cfg: DictConfig) -> str | None:
    index, count = _select(cfg, "shard.index"), _select(cfg, "shard.count")
    if _is_int(index) and _is_int(count) and index >= count:
        return f"must be below shard.count ({count}), got {index}"
    return None


RELATIONS: tuple[Relation, ...] = (Relation("shard.index", _shard_in_range, EVALUATE),)


# Subtrees whose mandatory values (`???`) a job needs only in some modes.
def _needed(cfg: DictConfig, job: str, key: str) -> bool:
    if job != "rank":
        return True
    top = key.split(".", 1)[0]
    if top == "dialogues":
        return _mode(cfg) in ("score", "roleplay")
    if top == "judge":
        return _judging(cfg)
    return True


# --- validation -----------------------------------------------------------------------------------


def _select(cfg: DictConfig, key: str) -> Any:
    """The plain, resolved value at `key`, or `_ABSENT`; a value that cannot resolve is a ConfigError."""
    try:
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException as err:
        raise ConfigError(key, f"cannot be resolved ({str(err).splitlines()[0]})") from None
    return value


def missing_keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys whose value is the mandatory marker `???`, in config order."""
    if isinstance(node, DictConfig | ListConfig):
        node = OmegaConf.to_container(node, resolve=False)  # `???` stays a string, nothing resolves
    if node == "???":
        yield prefix
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from missing_keys(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from missing_keys(value, f"{prefix}[{i}]")


def _check_experiment(job: str) -> None:
    """An experiment (`+exp=<entry point>/<name>`, conf/exp/) runs only with its own entry point."""
    if not HydraConfig.initialized():
        return
    choice = HydraConfig.get().runtime.choices.get("exp")
    if choice and str(choice).split("/")[0] != job:
        owner = SCRIPTS.get(str(choice).split("/")[0])
        where = f"run it with `python {owner} +exp={choice}`" if owner else "name one as <entry point>/<name>"
        raise ConfigError("exp", f"{choice} is not an experiment of {SCRIPTS[job]} ({where})")


def validate(cfg: DictConfig, job: Job) -> None:
    """Raise ConfigError("key", "problem") on the first value `job` (train, evaluate, rank) cannot use."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    _check_experiment(job)
    for key in missing_keys(cfg):
        if _needed(cfg, job, key):
            raise ConfigError(key, f"is mandatory and not set: add {key}=VALUE to the command line")
    for rule in RULES:
        if job not in rule.jobs or (rule.when is not None and not rule.when(cfg)):
            continue
        value = _select(cfg, rule.key)
        if value is _ABSENT:
            continue
        problem = rule.check(value)
        if problem:
            raise ConfigError(rule.key, f"{problem} ({rule.hint})" if rule.hint else problem)
    for relation in RELATIONS:
        if job in relation.jobs:
            problem = relation.check(cfg)
            if problem:
                raise ConfigError(relation.key, problem)
