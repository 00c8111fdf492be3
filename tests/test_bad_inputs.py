"""Bad inputs across the five entry points: each ends with exit code 2 and one `error: ...` line that
names the file and record or the config key, with no traceback, and loses nothing written before.

The table (`CASES`, also docs/bad_inputs.md) runs most cases in this process: the real entry point
(`train.py`, `evaluate.py`, `rank.py` through `runpy`, the CLIs' `main`), so the exit code and stderr
are the ones a user gets, without paying ~5 s of imports per case. The cases marked `subprocess`
(the reported ones, and those whose point is the process itself) run as real processes, two at a
time, while the in-process cases run.
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from esc.paths import REPO_ROOT, data_dir
from tests import helpers
from tests.helpers import FAST_TRAIN, compose

HAS_DATA = (data_dir() / "esconv").is_dir()  # the tiny model's tokenizer is trained on it
HYDRA_SCRIPTS = helpers.HYDRA_SCRIPTS
DIALOGUE_TASK = "dialogue:tiny:tiny:en:32999"
OFFICIAL_KEYS = ("fluency", "diversity", "empathic", "suggestion", "human", "tech", "overall")
EN_CARD = {
    "base": "Age: 30\nGender: Female\nOccupation: Teacher\nProblem: Argues with her husband about money.",
    "res": "家庭生活",
    "source": "ESconv",
    "language": "english",
    "id": 32999,
}
ZH_CARD = {
    **EN_CARD,
    "base": "年龄：30\n性别：女\n职业：教师\n问题：和丈夫为钱争吵。",
    "language": "chinese",
    "id": 33999,
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input. `argv`: the entry point, then its arguments, with {fx} (shared bad files),
    {tmp} (this case's folder) and {out} (= {tmp}/out) filled in. `expect`: what the error line
    must name. `setup`: earlier output to put in {tmp} first (SETUPS); `keep`: files under {tmp}
    whose bytes must survive the failed run. `full_disk`: the disk fills up while the run writes a
    file of this name (in this process: `esc.jsonl` writes half of it, then fails with ENOSPC)."""

    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...]
    setup: str | None = None
    keep: tuple[str, ...] = ()
    subprocess: bool = False
    needs_data: bool = False  # loads the tiny model
    privileged_write: bool = False  # needs a folder this process cannot write
    full_disk: str | None = None  # writes to files of this name (a glob) fail as on a full disk
    absent: tuple[str, ...] = ()  # what the console (stdout and stderr) must not show
    no_folder: bool = False  # refused before the run folder is accepted: {out} is not left behind


RUN_FILE = "out/dialogues/tiny__tiny__en.jsonl"
# mode=robustness's folders (setup `robustness_runs`): files of one name, two seeker profiles
ROBUSTNESS_RUNS = tuple(f"{folder}/dialogues/tiny__tiny__en.jsonl" for folder in ("coop", "res", "twin"))
EV = ("evaluate.py", "hydra.run.dir={out}", "cards.paths=[{fx}/cards_en.json]", "cards.languages=[en]")
EV_RUN = (*EV, "dialogue.turns=1", "cache.enabled=false", "engine.progress=false")
TR = ("train.py", "hydra.run.dir={out}", "model=tiny", "trainer.max_steps=1")
RK = ("rank.py", "hydra.run.dir={out}", "judge=tiny")
LEADERBOARD = ("rank.py", "hydra.run.dir={out}", "mode=leaderboard", "leaderboard.bootstrap=10")
NO_SPACE = "No space left on device"
SECRET = "PLANTED-token-0123456789"
CARDS = ("esc", "cards", "stats", "--cards")
DLG = ("esc", "dialogues")
IMPORT = (*DLG, "import", "--target", "llama3", "--out", "{out}", "--cards", "{fx}/cards_en.json")

CASES: tuple[Case, ...] = (
    # --- esc cards: card files ---
    Case("cards-malformed-json", (*CARDS, "{fx}/malformed.json"), ("malformed.json", "not valid JSON")),
    Case("cards-not-utf8", (*CARDS, "{fx}/latin1.json"), ("latin1.json", "not UTF-8")),
    Case("cards-empty-list", (*CARDS, "{fx}/empty.json"), ("empty.json", "no cards")),
    Case(
        "cards-duplicate-ids", (*CARDS, "{fx}/duplicates.json"), ("duplicates.json", "[record 1, id 32999]")
    ),
    Case("cards-bad-record", (*CARDS, "{fx}/no_problem.json"), ("no_problem.json", "[record 0, id 32999]")),
    Case("cards-missing-file", (*CARDS, "{fx}/nope.json"), ("nope.json", "not found")),
    Case("cards-unknown-id", ("esc", "cards", "show", "1", "--cards", "{fx}/cards_en.json"), ("id 1",)),
    Case("cards-unknown-language", ("esc", "cards", "stats", "--language", "fr"), ("--language", "'fr'")),
    # --- esc dialogues: dialogue files and the official format ---
    Case(
        "show-corrupt-middle-line",
        (*DLG, "show", "{tmp}/" + RUN_FILE),
        ("tiny__tiny__en.jsonl", "line 2"),
        setup="corrupt_run",
        keep=(RUN_FILE,),
    ),
    Case(
        "show-emotion-value-a-word",
        (*DLG, "show", "{fx}/emotion_word/tiny__tiny__en.jsonl"),
        ("tiny__tiny__en.jsonl", "line 1", "turn 0 (card 32999)", "`emotion.value` is 'high'"),
    ),
    Case(
        "report-emotion-value-a-word",
        ("esc", "report", "{fx}/emotion_word_rank", "--out", "{tmp}/site"),
        ("tiny__tiny__en.jsonl", "line 1", "`emotion.value` is 'high'"),
    ),
    Case(
        "cache-merge-into-read-only-folder",
        ("esc", "cache", "merge", "{tmp}/job.sqlite", "--into", "{tmp}/read_only/cache.sqlite"),
        ("read_only", "cannot be written", "--into DST"),
        setup="read_only_cache_folder",
        keep=("job.sqlite",),
        subprocess=True,  # as a user who cannot write there (root can)
        privileged_write=True,
        absent=("--out",),
    ),
    Case(
        "import-wrong-shape",
        (*IMPORT, "--language", "en", "{fx}/official_list.json"),
        ("official_list.json", "expected a JSON object"),
    ),
    Case(
        "import-bad-index",
        (*IMPORT, "--language", "en", "{fx}/official_bad_index.json"),
        ("official_bad_index.json", "[record 7]"),
    ),
    Case(
        "import-not-utf8",
        (*IMPORT, "--language", "en", "{fx}/official_latin1.json"),
        ("official_latin1.json", "not UTF-8"),
    ),
    Case(
        "import-chinese-as-en",
        (*IMPORT, "--language", "en", "{fx}/official_zh.json"),
        ("official_zh.json", "[record 0]", "--language zh"),
        setup="imported_run",
        keep=("out/dialogues/llama3__esc_role__en.jsonl",),
    ),
    Case(
        "export-out-is-a-file",
        (*DLG, "export", "{out}", "--out", "{tmp}/result.json", "--cards", "{fx}/cards_en.json"),
        ("result.json", "existing file"),
        setup="run",
        keep=("result.json", RUN_FILE),
    ),
    Case(
        "export-corrupt-dialogue-file",
        (*DLG, "export", "{out}", "--out", "{tmp}/result", "--cards", "{fx}/cards_en.json"),
        ("tiny__tiny__en.jsonl", "line 2"),
        setup="corrupt_run",
        keep=(RUN_FILE,),
    ),
    Case(
        "export-foreign-file-name",
        (*DLG, "export", "{tmp}/foreign", "--out", "{tmp}/result"),
        ("notes.jsonl", "not a dialogue file name"),
        setup="foreign_run",
    ),
    Case("merge-not-a-run", (*DLG, "merge", "{fx}", "--out", "{tmp}/merged"), ("manifest.json",)),
    Case(
        "merge-two-seekers",
        (*DLG, "merge", "{tmp}/shard", "{tmp}/resistant", "--out", "{tmp}/merged"),
        ("shard/dialogues/tiny__tiny__en.jsonl", "two seeker profiles", "cooperative and resistant"),
        setup="two_seeker_shards",
        keep=("shard/dialogues/tiny__tiny__en.jsonl", "resistant/dialogues/tiny__tiny__en.jsonl"),
    ),
    Case(
        "merge-corrupt-manifest",
        (*DLG, "merge", "{tmp}/shard", "--out", "{tmp}/merged"),
        ("shard/manifest.json", "not a JSON manifest"),
        setup="corrupt_manifest",
    ),
    # --- evaluate.py ---
    Case(
        "evaluate-zero-turns-typo-policy",
        (*EV, "dialogue.turns=0", "dialogue.context_policy=fial"),
        ("config `dialogue.turns`", "got 0"),
        setup="run",
        keep=(RUN_FILE,),
        subprocess=True,
    ),
    Case(
        "evaluate-typo-policy",
        (*EV, "dialogue.context_policy=fial"),
        ("dialogue.context_policy", '"fial"'),
        setup="run",
        keep=(RUN_FILE,),
    ),
    Case("evaluate-negative-limit", (*EV, "cards.limit=-1"), ("config `cards.limit`", "-1")),
    Case("evaluate-limit-abc", (*EV, "cards.limit=abc"), ("config `cards.limit`", '"abc"'), subprocess=True),
    Case(
        "evaluate-unknown-language", (*EV[:3], "cards.languages=[fr]"), ("config `cards.languages`", '"fr"')
    ),
    Case(
        "evaluate-empty-languages",
        (*EV[:3], "cards.languages=[]"),
        ("config `cards.languages`", "at least 1 item"),
    ),
    Case("evaluate-empty-ids", (*EV, "cards.ids=[]"), ("config `cards.ids`", "at least 1 item")),
    Case("evaluate-unknown-ids", (*EV, "cards.ids=[1]"), ("config `cards.ids`", "unknown card ids [1]")),
    Case(
        "evaluate-missing-card-file", (*EV[:2], "cards.paths=[{tmp}/nope.json]"), ("cards.paths", "nope.json")
    ),
    Case(
        "evaluate-malformed-card-file",
        (*EV[:2], "cards.paths=[{fx}/malformed.json]"),
        ("malformed.json", "not valid JSON"),
    ),
    Case("evaluate-typo-key", (*EV, "cards.limt=1"), ("config `cards.limt`", "+cards.limt"), subprocess=True),
    Case(
        "evaluate-added-key-nothing-reads",
        (*EV, "+engine.wave_sise=3"),
        ("config `engine.wave_sise`", "unknown key", "wave_size"),
        subprocess=True,  # a `+key` override: as evaluate-typo-key, in its own process
    ),
    Case(
        "evaluate-backend-key-its-class-lacks",
        (*EV, "+target.backend.extra_bodyy=1"),
        ("config `target.backend.extra_bodyy`", "unknown key", "generation_config"),
        subprocess=True,  # a `+key` override: as evaluate-typo-key, in its own process
    ),
    Case("evaluate-typo-group", (*EV, "roleplayer=tinyy"), ("roleplayer/tinyy", "tiny")),
    Case("evaluate-bad-override-syntax", (*EV, "cards.limit=[1"), ("cards.limit=[1",)),
    Case(
        "evaluate-negative-temperature",
        (*EV, "roleplayer.generation.temperature=-1"),
        ("roleplayer.generation.temperature",),
    ),
    Case("evaluate-top-p-zero", (*EV, "target.generation.top_p=0"), ("target.generation.top_p",)),
    Case(
        "evaluate-zero-max-new-tokens",
        (*EV, "target.generation.max_new_tokens=0"),
        ("target.generation.max_new_tokens",),
    ),
    Case("evaluate-zero-wave-size", (*EV, "engine.wave_size=0"), ("engine.wave_size",)),
    Case(
        "evaluate-cpu-bf16-unknown",
        (*EV, "+target.backend.cpu_bf16=sometimes"),
        ("config `target.backend.cpu_bf16`", "auto, true or false"),
    ),
    Case("evaluate-shard-out-of-range", (*EV, "shard.index=2", "shard.count=2"), ("config `shard.index`",)),
    Case(
        "evaluate-stop-without-trajectory",
        (*EV, "trajectory.stop.enabled=true"),
        ("config `trajectory.stop.enabled`", "trajectory.enabled=true"),
    ),
    Case(
        "evaluate-stop-thresholds-crossed",
        (*EV, "trajectory.stop.success=10", "trajectory.stop.failure=20"),
        ("config `trajectory.stop.failure`", "must be below trajectory.stop.success (10), got 20"),
    ),
    Case("evaluate-typo-rater", (*EV, "trajectory.rater=self"), ("config `trajectory.rater`", '"self"')),
    Case(
        "evaluate-observer-without-backend",
        (*EV, "trajectory.enabled=true", "trajectory.rater=observer"),
        ("config `trajectory.observer.backend`",),
    ),
    Case(
        "evaluate-unknown-card-subset", (*EV, "cards.subset=suicide"), ("config `cards.subset`", '"suicide"')
    ),
    Case("evaluate-unknown-seeker", (*EV, "seeker=nope"), ("config `seeker`", "'nope'", "cooperative, ")),
    Case(
        "evaluate-unknown-seeker-name",
        (*EV, "seeker.name=nope"),
        ("config `seeker.name`", "unknown seeker profile 'nope'", "resistant"),
    ),
    Case(
        "evaluate-resume-another-seeker",
        EV_RUN,  # the default seeker, cooperative, into a folder of the resistant seeker's dialogues
        ("out", "played by the resistant (version 1) seeker", "cooperative", "rerun with seeker=resistant"),
        setup="resistant_run",
        keep=(RUN_FILE,),
    ),
    Case("evaluate-negative-max-cost", (*EV, "max_cost=-1"), ("config `max_cost`", "got -1")),
    Case(
        "evaluate-over-max-cost",
        (
            *EV[:2],
            "cards.paths=[{fx}/cards_two.json]",
            *EV[3:],
            "target.backend.price={{prompt:1,completion:1}}",  # USD per 1K tokens: a dollar a card
            "max_cost=0.01",
        ),
        ("config `max_cost`", "over the budget of $0.0100", "raise max_cost"),
        setup="run",  # card 32999 done: the estimate counts 33000 alone
        keep=(RUN_FILE,),
    ),
    Case(
        "evaluate-missing-adapter-dir",
        (*EV, "roleplayer.backend.adapter={tmp}/no_adapter"),
        ("roleplayer.backend.adapter", "no_adapter"),
    ),
    Case("evaluate-adapter-not-set", (*EV, "roleplayer=esc_role_local"), ("roleplayer.backend.adapter",)),
    Case(
        "evaluate-target-without-weights",
        (*EV, "target=extes_llama"),
        ("config `target.backend.model.name_or_path`", "no public weights"),
    ),
    Case(
        "evaluate-truncated-adapter",
        (*EV_RUN, "roleplayer.backend.adapter={tmp}/adapter"),
        ("adapter/adapter_model.safetensors", "cut short"),
        setup="truncated_adapter",
        needs_data=True,
    ),
    Case(
        "evaluate-corrupt-line-then-rerun",
        EV_RUN,
        ("tiny__tiny__en.jsonl", "line 2"),
        setup="corrupt_run",
        keep=(RUN_FILE,),
        needs_data=True,
    ),
    Case(
        "evaluate-read-only-run-folder",
        EV_RUN,
        ("out", "Permission denied"),
        setup="read_only_run",
        keep=(RUN_FILE,),
        subprocess=True,
        privileged_write=True,
    ),
    # --- train.py ---
    Case("train-lora-rank-zero", (*TR, "peft.r=0"), ("config `peft.r`", "got 0"), subprocess=True),
    Case(
        "train-max-steps-abc",
        (*TR[:3], "trainer.max_steps=abc"),
        ("config `trainer.max_steps`", '"abc"'),
        subprocess=True,
    ),
    Case("train-missing-resume-path", (*TR, "resume={tmp}/nope.ckpt"), ("config `resume`", "nope.ckpt")),
    Case("train-zero-batch-size", (*TR, "datamodule.batch_size=0"), ("config `datamodule.batch_size`",)),
    Case("train-unknown-data-language", (*TR, "data.languages=[fr]"), ("config `data.languages`",)),
    Case("train-typo-logger", (*TR, "logger=wandbb"), ("logger/wandbb", "csv")),
    Case("train-typo-key", (*TR, "trainer.max_step=1"), ("config `trainer.max_step`",)),
    Case(
        "train-smile-card-file-twice",
        (*TR, "data.sources.smile.cards={fx}/smile_cards.jsonl"),
        ("smile_cards.jsonl", "line 2", "a second card for 'smile/0'"),
        needs_data=True,
    ),
    Case(
        "train-roleplay-file-unknown-speaker",
        (*TR, "data.sources.roleplay.files=[{{path: {fx}/roleplay.jsonl, language: en}}]"),
        ("roleplay.jsonl", "line 1, message 0", "unknown speaker 'narrator'"),
        needs_data=True,
    ),
    # --- python build_cards.py, esc annotate ---
    Case(
        "cards-build-empty-post",
        (
            "build_cards.py",
            "+exp=cards/en",
            "hydra.run.dir={out}",
            "cards.sources.esconv.enabled=false",
            "cards.sources.esconv_failed.enabled=false",
            "cards.sources.epitome.enabled=false",
            "cards.sources.chatcounselor.enabled=false",
            "cards.sources.jsonl_qa.enabled=true",
            "cards.sources.jsonl_qa.path={fx}/posts.jsonl",
        ),
        ("posts.jsonl", "line 2", "empty `text`"),
        subprocess=True,
    ),  # fmt: skip
    Case(
        "annotate-unknown-task",
        (
            "esc",
            "annotate",
            "import",
            "{fx}/tasks",
            "{fx}/labels_unknown.jsonl",
            "--out",
            "{tmp}/labels.jsonl",
        ),
        ("labels_unknown.jsonl", "line 1", "unknown task id 'card:en:9'"),
    ),
    Case(
        "annotate-label-out-of-range",
        ("esc", "annotate", "import", "{fx}/tasks", "{fx}/labels_range.csv", "--out", "{tmp}/labels.jsonl"),
        ("labels_range.csv", "row 2", "grade: 'excellent' is not one of"),
    ),
    # --- rank.py ---
    Case("rank-typo-mode", (*RK, "mode=scor", "dialogues={tmp}"), ("config `mode`", '"scor"')),
    Case(
        "rank-unknown-safety-question",
        (*RK, "mode=safety", "dialogues={tmp}", "safety.questions=[risk_missed,unsafe]"),
        ("config `safety.questions`", "unsafe"),
    ),
    Case(
        "rank-jury-outside-score",
        (*RK, "mode=safety", "jury=tiny_pair", "dialogues={fx}/tiny__tiny__en.jsonl"),
        ("config `jury`", "mode=score"),
    ),
    *(
        Case(
            f"rank-{mode}-with-score-adapters",
            (
                *RK,
                "+exp=rank/roleplay_eval" if mode == "roleplay" else f"mode={mode}",  # its section with it
                "dialogues={fx}/tiny__tiny__en.jsonl",
                "judge.adapters.layout=single",
                "judge.adapters.root={tmp}",
            ),
            ("config `judge.adapters`", f"mode={mode}'s questions", "judge.adapters.layout=none"),
        )  # fmt: skip
        for mode in ("roleplay", "safety", "pairwise", "robustness")
    ),
    Case(  # the section comes with the experiment: without it, one line before any work
        "rank-roleplay-without-its-experiment",
        (*RK, "mode=roleplay", "dialogues={fx}/tiny__tiny__en.jsonl"),
        ("config `roleplay`", "is not in the config", "+exp=rank/roleplay_eval"),
    ),
    Case(
        "rank-pairwise-one-target",
        (*RK, "mode=pairwise", "dialogues={fx}/tiny__tiny__en.jsonl"),
        ("no card played by two targets",),
        needs_data=True,
    ),
    Case(
        "rank-robustness-without-cooperative",
        (*RK, "mode=robustness", "dialogues={tmp}/res"),
        ("no dialogue of the cooperative seeker", "the baseline", "seeker=cooperative"),
        setup="robustness_runs",
        keep=ROBUSTNESS_RUNS,
        needs_data=True,
    ),
    Case(
        "rank-robustness-without-hard-profile",
        (*RK, "mode=robustness", "dialogues={tmp}/coop"),
        ("only the cooperative seeker's dialogues", "resistant", "seeker=NAME"),
        setup="robustness_runs",
        keep=ROBUSTNESS_RUNS,
        needs_data=True,
    ),
    Case(
        "rank-robustness-one-profile-two-files-of-one-name",
        (*RK, "mode=robustness", "dialogues=[{tmp}/coop,{tmp}/res,{tmp}/twin]"),
        ("res/dialogues/tiny__tiny__en.jsonl", "twin/dialogues/tiny__tiny__en.jsonl", "(resistant)"),
        setup="robustness_runs",
        keep=ROBUSTNESS_RUNS,
        needs_data=True,
    ),
    Case(
        "rank-robustness-few-resamples",
        (*RK, "mode=robustness", "dialogues=[{tmp}/coop,{tmp}/res]", "robustness.bootstrap=20"),
        ("config `robustness.bootstrap`", "200", "got 20"),
        setup="robustness_runs",
        keep=ROBUSTNESS_RUNS,
    ),
    Case(
        "rank-trajectory-without-ratings",
        (*RK, "mode=trajectory", "dialogues={fx}/tiny__tiny__en.jsonl"),
        ("no rated dialogue", "trajectory.enabled=true"),
    ),
    Case(
        "rank-trajectory-emotion-out-of-range",
        (*RK, "mode=trajectory", "dialogues={fx}/emotion_150"),
        ("tiny__tiny__en.jsonl", "line 1", "turn 1 (card 32999)", "`emotion.value` is 150", "0 to 100"),
    ),
    Case(
        "rank-empty-target-reply",
        (*RK, "dialogues={fx}/empty_reply"),
        ("tiny__tiny__en.jsonl", "line 1", "turn 1 (target) has no text", "never scored"),
    ),
    Case("rank-dialogues-not-set", RK, ("config `dialogues`", "mandatory")),
    Case("rank-missing-dialogues", (*RK, "dialogues={tmp}/nope"), ("config `dialogues`", "nope")),
    Case(
        "rank-typo-judge",
        (*RK, "judge=tinyy", "dialogues={tmp}"),
        ("config `judge`", "judge/tinyy", "tiny_vllm"),
    ),
    Case(
        "rank-judge-key-its-class-lacks",
        (*RK, "+judge.batchsize=2", "dialogues={tmp}"),
        ("config `judge.batchsize`", "unknown key", "batch_size"),
        subprocess=True,  # a `+key` override: as evaluate-typo-key, in its own process
    ),
    Case(
        "rank-experiment-of-train",
        (*RK, "+exp=train/esc_role", "dialogues={tmp}"),
        ("config `exp`", "experiment of train.py", "python train.py +exp=train/esc_role"),
    ),
    Case("rank-experiment-without-folder", (*RK, "+exp=roleplay_eval"), ("+exp=rank/roleplay_eval",)),
    Case("rank-typo-split", (*RK, "mode=agreement", "agreement.split=tst"), ("config `agreement.split`",)),
    Case("rank-negative-max-cost", (*RK, "dialogues={tmp}", "max_cost=-1"), ("config `max_cost`", "got -1")),
    Case(  # a key with a type and no rule: the typed section (its dataclass) refuses it
        "rank-references-not-a-path",
        (*RK, "mode=correlation", "correlation.references=[a,b]"),
        ("config `correlation.references`", "str"),
    ),
    Case(  # the W&B section is typed too: before, `wandb.enabled=maybe` was truthy and logged
        "rank-wandb-enabled-not-a-boolean",
        (*RK, "dialogues={tmp}", "wandb.enabled=maybe"),
        ("config `wandb.enabled`", "valid boolean"),
    ),
    Case(
        "rank-corrupt-dialogue-line",
        (*RK[:1], "hydra.run.dir={tmp}/rank", "judge=tiny", "dialogues={out}"),
        ("tiny__tiny__en.jsonl", "line 2"),
        setup="corrupt_run",
        keep=(RUN_FILE,),
        needs_data=True,
    ),
    # --- an output path that names the wrong kind of thing ---
    Case(
        "evaluate-run-dir-is-a-file",
        (EV[0], "hydra.run.dir={tmp}/result.json", *EV[2:]),
        ("result.json", "is an existing file", "hydra.run.dir="),
        setup="run",
        keep=("result.json", RUN_FILE),
    ),
    Case(
        "train-run-dir-is-a-file",
        (TR[0], "hydra.run.dir={tmp}/result.json", *TR[2:]),
        ("result.json", "is an existing file", "hydra.run.dir="),
        setup="run",
        keep=("result.json", RUN_FILE),
    ),
    Case(
        "annotate-export-out-is-a-file",
        ("esc", "annotate", "export", "card", "--cards", "{fx}/cards_en.json", "--out", "{tmp}/result.json"),
        ("result.json", "--out is an existing file"),
        setup="run",
        keep=("result.json", RUN_FILE),
    ),
    Case(
        "official-export-out-is-a-file",
        ("esc", "scores", "export", "{fx}/scores", "--out", "{tmp}/result.json"),
        ("result.json", "--out is an existing file"),
        setup="run",
        keep=("result.json", RUN_FILE),
    ),
    Case(
        "official-import-out-is-a-folder",
        (
            "esc",
            "scores",
            "import",
            "{fx}/tiny_en.json",
            "--cards",
            "{fx}/cards_en.json",
            "--out",
            "{out}",
        ),
        ("out", "--out is a folder"),
        setup="run",
        keep=(RUN_FILE,),
    ),
    # --- values only a library would have refused, with a traceback ---
    Case(
        "evaluate-bad-device",
        (*EV, "target.backend.device=banana"),
        ("config `target.backend.device`", '"banana"'),
        setup="run",
        keep=(RUN_FILE,),
    ),
    Case(
        "train-bad-precision", (*TR, "trainer.precision=banana"), ("config `trainer.precision`", '"banana"')
    ),
    Case(
        "train-val-check-interval-abc",
        (*TR, "trainer.val_check_interval=abc"),
        ("config `trainer.val_check_interval`", '"abc"'),
    ),
    # --- records with a hole: a turn whose text is null, a score file that is not UTF-8 ---
    Case(
        "show-null-turn-text",
        (*DLG, "show", "{tmp}/" + RUN_FILE),
        ("tiny__tiny__en.jsonl", "line 2", "turn 1 has no text"),
        setup="null_text_run",
        keep=(RUN_FILE,),
    ),
    Case(
        "export-null-turn-text",
        (*DLG, "export", "{out}", "--out", "{tmp}/result", "--cards", "{fx}/cards_en.json"),
        ("tiny__tiny__en.jsonl", "line 2", "turn 1 has no text"),
        setup="null_text_run",
        keep=(RUN_FILE,),
    ),
    Case(
        "rank-leaderboard-score-file-not-utf8",
        (*LEADERBOARD, "scores=[{fx}/scores_latin1.jsonl]"),
        ("scores_latin1.jsonl", "line 1", "not UTF-8"),
    ),
    # --- esc annotate: files from spreadsheets and Label Studio, label values ---
    Case(
        "annotate-import-csv-not-utf8",
        ("esc", "annotate", "import", "{fx}/tasks", "{fx}/labels_latin1.csv", "--out", "{tmp}/labels.jsonl"),
        ("labels_latin1.csv", "row 2", "not UTF-8"),
    ),
    Case(
        "annotate-import-labelstudio-data-string",
        (
            "esc",
            "annotate",
            "import",
            "{fx}/tasks",
            "{fx}/ls_data_string.json",
            "--out",
            "{tmp}/labels.jsonl",
        ),
        ("ls_data_string.json", "task 0", "`data` is a JSON string"),
    ),
    Case(
        "annotate-import-labelstudio-annotation-string",
        (
            "esc",
            "annotate",
            "import",
            "{fx}/tasks",
            "{fx}/ls_annotation_string.json",
            "--out",
            "{tmp}/labels.jsonl",
        ),
        ("ls_annotation_string.json", "task 0", "annotation 0 is a JSON string"),
    ),
    Case(
        "annotate-import-label-out-of-range",
        (
            "esc",
            "annotate",
            "import",
            "{fx}/dialogue_tasks",
            "{fx}/label_seven.jsonl",
            "--out",
            "{tmp}/labels.jsonl",
        ),
        ("label_seven.jsonl", "line 1", "fluency: 7 is not one of"),
    ),
    Case(
        "annotate-agreement-label-out-of-range",
        ("esc", "annotate", "agreement", "{fx}/labels_seven.jsonl", "--out", "{tmp}/agreement"),
        ("labels_seven.jsonl", "line 1", "fluency: '7' is not one of"),
    ),
    Case(
        "annotate-to-esc-rank-score-out-of-range",
        (
            "esc",
            "annotate",
            "to-esc-rank",
            "{fx}/labels_seven.jsonl",
            "--tasks",
            "{fx}/dialogue_tasks",
            "--out",
            "{tmp}/mine.jsonl",
        ),
        ("labels_seven.jsonl", "line 1", "fluency: '7' is not one of"),
    ),
    Case(
        "annotate-agreement-missing-file",
        ("esc", "annotate", "agreement", "{tmp}/MISSING.jsonl"),
        ("MISSING.jsonl", "file not found"),
        absent=("make data",),
    ),
    Case("official-usage-error", ("esc", "scores", "import", "{fx}/tiny_en.json"), ("--out",)),
    # --- a full disk: one line naming the run folder and the file; the files written before stay ---
    Case(
        "evaluate-disk-full-manifest",
        EV_RUN,
        ("out/manifest.json", NO_SPACE, "run folder"),
        setup="run_with_manifest",
        keep=(RUN_FILE, "out/manifest.json"),
        needs_data=True,
        full_disk="manifest.json",
    ),
    Case(
        "evaluate-disk-full-dialogue-line",
        (*EV_RUN[:2], "cards.paths=[{fx}/cards_two.json]", *EV_RUN[3:]),
        ("tiny__tiny__en.jsonl", NO_SPACE, "run folder"),
        setup="run",
        keep=(RUN_FILE,),
        needs_data=True,
        full_disk="tiny__tiny__en.jsonl",
    ),
    Case(
        "rank-disk-full-charts",
        (*LEADERBOARD, "scores=[{fx}/scores]"),
        ("out/charts/radar_en.png", NO_SPACE, "run folder"),
        setup="charts",
        keep=("out/charts/radar_en.png", "out/charts/average_en.png"),
        full_disk="*.png",
    ),
    Case(
        "train-disk-full-checkpoint",
        (*TR, *FAST_TRAIN[1:], "resume=never"),
        ("out/last.ckpt", NO_SPACE, "run folder"),
        setup="checkpoint",
        keep=("out/last.ckpt",),
        needs_data=True,
        full_disk="last.ckpt",
    ),
    # --- a sweep echoes each job's overrides on the console: a token among them is masked ---
    Case(
        "rank-sweep-masks-a-token-override",
        (
            "rank.py",
            "-m",
            "hydra.sweep.dir={tmp}/sweep",
            "mode=leaderboard",
            "scores=[{tmp}/nope]",
            f"+hydra.job.env_set.FOO_TOKEN={SECRET}",
        ),
        ("config `scores`", "nope"),
        subprocess=True,
        absent=(SECRET,),
    ),
    # --- issue 50: rating loop ---
    Case(
        "annotate-site-missing-tasks",
        ("esc", "annotate", "site", "{tmp}/nope", "--out", "{tmp}/rate"),
        ("nope", "file not found"),
    ),
    *(
        Case(case_id, argv, expect, setup="rating_loop", keep=keep)
        for keep in [
            (
                "tasks/tasks.jsonl",
                "tasks/blind-key-salt",
                "other/tasks.jsonl",
                "old_tasks/tasks.jsonl",
                "labels.jsonl",
                "ana.jsonl",
                "ben_other.jsonl",
                "dialogues.jsonl",
                "notes/index.html",
                *(
                    f"{name}.jsonl"
                    for name in (
                        "skip_and_rate",
                        "skipped_string",
                        "rater_number",
                        "rater_list",
                        "rater_lines",
                        "format_2",
                    )
                ),
            )
        ]
        for case_id, argv, expect in (
            *(
                (
                    f"annotate-rating-{name.replace('_', '-')}",
                    (
                        "esc",
                        "annotate",
                        "import",
                        "{tmp}/tasks",
                        f"{{tmp}}/{name}.jsonl",
                        "--out",
                        "{tmp}/new.jsonl",
                    ),
                    (f"{name}.jsonl", *expect),
                )
                for name, expect in (
                    ("skip_and_rate", ("line 2", "ana skipped a dialogue they also rated")),
                    ("skipped_string", ("line 1", "`skipped` is a JSON string")),
                    ("rater_number", ("line 1", "`rater` is a JSON number")),
                    ("rater_list", ("line 1", "`rater` is a JSON list")),
                    ("rater_lines", ("line 1", "is not a rater's name")),
                    ("format_2", ("line 1", "format 'esc-rating/2' is not one this version reads")),
                )
            ),
            (
                "annotate-agreement-negative-bootstrap",
                ("esc", "annotate", "agreement", "{tmp}/labels.jsonl", "--bootstrap", "-5"),
                ("--bootstrap -5", "0 (none) or more"),
            ),
            (
                "annotate-agreement-unrelated-tasks",
                ("esc", "annotate", "agreement", "{tmp}/labels.jsonl", "--tasks", "{tmp}/other"),
                ("labels.jsonl", "another task file"),
            ),
            (
                "annotate-add-other-task-set",
                (
                    "esc",
                    "annotate",
                    "import",
                    "{tmp}/other",
                    "{tmp}/ben_other.jsonl",
                    "--out",
                    "{tmp}/labels.jsonl",
                    "--add",
                ),
                ("labels.jsonl", "another task file"),
            ),
            (
                "annotate-export-over-a-task-folder",
                ("esc", "annotate", "export", "card", "--cards", "{tmp}/cards.json", "--out", "{tmp}/tasks"),
                ("tasks", "not empty", "--force"),
            ),
            (
                "annotate-site-over-a-foreign-folder",
                (
                    "esc",
                    "annotate",
                    "site",
                    "{tmp}/tasks",
                    "--out",
                    "{tmp}/notes",
                    "--cards",
                    "{tmp}/cards.json",
                ),
                ("notes", "not empty", "--force"),
            ),
            (
                "annotate-site-unsalted-task-folder",
                (
                    "esc",
                    "annotate",
                    "site",
                    "{tmp}/old_tasks",
                    "--out",
                    "{tmp}/rate",
                    "--cards",
                    "{tmp}/cards.json",
                ),
                ("old_tasks", "before blind keys were salted", "export the tasks again"),
            ),
        )
    ),
    # --- issue 50: converter ---
    Case(
        "convert-truncated-safetensors",
        ("esc", "models", "convert-internlm2", "{tmp}/internlm2", "{out}"),
        ("internlm2/model.safetensors", "cut short or corrupt"),
        setup="internlm2_truncated",
        keep=("internlm2/model.safetensors",),
    ),
    Case(
        "convert-refused-adapter-keeps-out",
        ("esc", "models", "convert-internlm2", "{tmp}/internlm2", "{out}", "--adapters", "{tmp}/ESC-RANK"),
        ("zz_dora/adapter_config.json", "use_dora is true"),
        setup="internlm2_converted_then_dora",
        keep=(
            "out/model.safetensors",
            "out/adapters/fluency/adapter_model.safetensors",
            "out/adapters/fluency_en/adapter_config.json",
        ),
    ),
    Case(
        "convert-adapter-targets-not-its-weights",
        ("esc", "models", "convert-internlm2", "{tmp}/internlm2", "{out}", "--adapters", "{tmp}/ESC-RANK"),
        ("fluency/adapter_config.json", "target_modules ['wo']", "weights of ['wqkv']"),
        setup="internlm2_adapter_targets_wo",
    ),
    Case(
        "convert-adapter-rank-not-its-weights",
        ("esc", "models", "convert-internlm2", "{tmp}/internlm2", "{out}", "--adapters", "{tmp}/ESC-RANK"),
        ("fluency/adapter_model.safetensors", "not of rank r=4"),
        setup="internlm2_adapter_rank_4",
    ),
    Case(
        "convert-out-a-symbolic-link",
        ("esc", "models", "convert-internlm2", "{tmp}/internlm2", "{out}"),
        ("out: is a symbolic link", "name the folder itself"),
        setup="internlm2_out_a_link",
        keep=("elsewhere/notes.txt",),
    ),
    Case(
        "convert-adapters-inside-out",
        ("esc", "models", "convert-internlm2", "{tmp}/internlm2", "{out}", "--adapters", "{out}/released"),
        ("out: the output folder is, holds or lies in", "released"),
        setup="internlm2_adapters_inside_out",
        keep=("out/released/fluency/adapter_model.safetensors",),
    ),
    # --- issue 50: settings ---
    Case(
        "evaluate-nan-temperature",
        (*EV, "roleplayer.generation.temperature=nan"),
        ("config `roleplayer.generation.temperature`", "got nan"),
    ),
    Case(
        "evaluate-infinite-temperature",
        (*EV, "target.generation.temperature=1e400"),
        ("config `target.generation.temperature`", "got inf"),
    ),
    Case(
        "evaluate-nan-top-p",
        (*EV, "target.generation.top_p=nan"),
        ("config `target.generation.top_p`", "nan"),
    ),
    Case("evaluate-nan-max-cost", (*EV, "max_cost=nan"), ("config `max_cost`", "got nan")),
    Case(
        "evaluate-nan-min-answer-mass",
        (*EV, "trajectory.enabled=true", "trajectory.min_answer_mass=nan"),
        ("config `trajectory.min_answer_mass`", "got nan"),
    ),
    Case(
        "evaluate-nan-stop-success",
        (*EV, "trajectory.enabled=true", "trajectory.stop.enabled=true", "trajectory.stop.success=nan"),
        ("config `trajectory.stop.success`", "got nan"),
        absent=("stop.failure",),
    ),
    Case("evaluate-nan-in-an-unchecked-key", (*EV, "target.notes=nan"), ("config `target.notes`", "finite")),
    Case(
        "evaluate-turns-without-end",
        (*EV, "dialogue.turns=1000000000000000000000"),
        ("config `dialogue.turns`", "less than or equal to 100"),
    ),
    Case("evaluate-without-seed", (*EV, "~seed"), ("config `seed`", "is not set")),
    Case("evaluate-target-null", (*EV, "target=null"), ("config `target`", "config group", "tiny")),
    Case(
        "evaluate-target-name-240-bytes",
        (*EV, "target.name=" + "a" * 240),
        ("config `target.name`", "240 bytes", "255"),
    ),
    Case(
        "evaluate-target-name-78-chinese-characters",
        (*EV, "target.name='" + "情" * 78 + "'"),
        ("config `target.name`", "234 bytes", "255"),
    ),
    Case(
        "rank-dimensions-a-number", (*RK, "dialogues={tmp}", "dimensions=123"), ("config `dimensions`", "123")
    ),
    Case("rank-without-seed", (*RK, "dialogues={tmp}", "~seed"), ("config `seed`", "is not set")),
    Case(
        "rank-judge-null", (*RK, "dialogues={tmp}", "judge=null"), ("config `judge`", "config group", "tiny")
    ),
    Case(
        "rank-nan-max-cost-priced-judge",
        ("rank.py", "hydra.run.dir={out}", "judge=gpt4", "dialogues={tmp}", "max_cost=nan"),
        ("config `max_cost`", "got nan"),
    ),
    Case(
        "rank-nan-min-answer-mass",
        (*RK, "dialogues={tmp}", "judge.min_answer_mass=nan"),
        ("config `judge.min_answer_mass`", "got nan"),
    ),
    Case(
        "rank-nan-pairwise-prior",
        (*RK, "dialogues={tmp}", "mode=pairwise", "pairwise.prior=nan"),
        ("config `pairwise.prior`", "got nan"),
    ),
    Case(
        "rank-zero-split-ratios",
        (*RK, "mode=agreement", "agreement.split_ratios=[0,0,0]"),
        ("config `agreement.split_ratios`", "train"),
        absent=("data.split",),
    ),
    Case(
        "rank-nan-split-ratios",
        (*RK, "mode=agreement", "agreement.split_ratios=[nan,1,1]"),
        ("config `agreement.split_ratios`", "got nan"),
    ),
    Case("rank-judge-deleted", (*RK, "dialogues={tmp}", "~judge"), ("config `run_name`", "judge.name")),
    Case(
        "rank-judge-name-too-long",
        (*RK, "dialogues={tmp}", "judge.name=" + "j" * 200),
        ("config `judge.name`", "200 bytes", "255"),
    ),
    # --- issue 50: secrets ---
    # --- issue 50: processes ---
    Case(
        "merge-same-folder-twice",
        (*DLG, "merge", "{tmp}/shard", "{tmp}/shard/", "--out", "{tmp}/merged"),
        ("shard", "named twice", "name each shard's folder once"),
        setup="merge_shard",
        keep=("shard/dialogues/tiny__tiny__en.jsonl",),
    ),
    Case(
        "bench-keep-a-file",
        ("benchmarks.bench_evaluate", "--model", "tiny", "--skip-official", "--keep", "{tmp}/notes.txt"),
        ("--keep", "notes.txt", "is a file", "name a folder"),
        setup="bench_keep",
        keep=("notes.txt",),
    ),
    Case(
        "bench-keep-truncated-result",
        ("benchmarks.bench_evaluate", "--model", "tiny", "--skip-official", "--keep", "{tmp}/keep"),
        ("keep/cpu_bf16-false.json", "not a complete run result", "delete it"),
        setup="bench_keep",
        keep=("keep/cpu_bf16-false.json",),
    ),
    # --- issue 50: scoring ---
    Case(
        "scores-import-missing-dimension",
        (
            "esc",
            "scores",
            "import",
            "{tmp}/model_en.json",
            "--out",
            "{tmp}/mine.jsonl",
            "--cards",
            "{fx}/cards_two.json",
        ),
        ("model_en.json", "[record 1]", "lacks tech"),
        setup="official_without_a_dimension",
        keep=("model_en.json",),
    ),
    # --- issue 62: a plugin's settings (each judge and backend validated by its own model) ---
    *(
        Case(f"rank-gpt4-{name}", (*RK, "judge=gpt4", "dialogues={tmp}", override), expect, no_folder=True)
        for name, override, expect in (
            ("batch-string", "judge.batch=no", ("config `judge.batch`", "valid boolean", '"no"')),
            ("batch-wait-bool", "judge.batch_wait_s=true", ("config `judge.batch_wait_s`", "got true")),
            (
                "negative-top-logprobs",
                "judge.top_logprobs=-3",
                ("config `judge.top_logprobs`", "greater than or equal to 0", "-3"),
            ),
            ("top-logprobs-text", "judge.top_logprobs=abc", ("config `judge.top_logprobs`", '"abc"')),
            ("poll-text", "judge.batch_poll_s=abc", ("config `judge.batch_poll_s`", '"abc"')),
            (
                "retries-text",
                "judge.backend.max_retries=abc",
                ("config `judge.backend.max_retries`", '"abc"'),
            ),
            (
                "concurrency-zero",
                "judge.backend.max_concurrency=0",
                ("config `judge.backend.max_concurrency`",),
            ),
            (
                "concurrency-text",
                "judge.backend.max_concurrency=abc",
                ("config `judge.backend.max_concurrency`",),
            ),
            (
                "base-url-mapping",
                "judge.backend.base_url={{a: 1}}",
                ("config `judge.backend.base_url`", '{"a": 1}'),
            ),
            ("extra-body-text", "judge.backend.extra_body=notadict", ("config `judge.backend.extra_body`",)),
            (
                "price-text",
                "judge.backend.price.prompt=abc",
                ("config `judge.backend.price.prompt`", '"abc"'),
            ),
            (
                "negative-price",
                "judge.backend.price.prompt=-1",
                ("config `judge.backend.price.prompt`", "greater than or equal to 0"),
            ),
        )
    ),
    *(
        Case(
            f"rank-claude-{name}", (*RK, "judge=claude", "dialogues={tmp}", override), expect, no_folder=True
        )
        for name, override, expect in (
            (
                "sampling-string",
                "judge.backend.sampling_params=maybe",
                ("`judge.backend.sampling_params`", '"maybe"'),
            ),
            (
                "base-url-list",
                "judge.backend.base_url=[http://127.0.0.1:9]",
                ("`judge.backend.base_url`", "a valid string"),
            ),
        )
    ),
    *(
        Case(
            f"evaluate-own-chatbot-{name}",
            (*EV, "target=openai_compatible", "target.backend.model=m", override),
            expect,
            no_folder=True,
        )  # fmt: skip
        for name, override, expect in (
            (
                "null-server",
                "target.backend.base_url=[null]",
                ("`target.backend.base_url`", "item 0", "null"),
            ),
            ("empty-server", "target.backend.base_url=['']", ("`target.backend.base_url`", "server's URL")),
        )
    ),
    Case(
        "evaluate-own-chatbot-revision-list",
        (
            *EV,
            "target=openai_compatible",
            "target.backend.model=m",
            "target.backend.base_url=http://127.0.0.1:9/v1",
            "target.backend.revision=[a]",
        ),
        ("`target.backend.revision`", "a valid string"),
        no_folder=True,
    ),  # fmt: skip
    Case(
        "rank-typo-added-key",
        (*RK, "dialogues={tmp}", "+max_cots=0.0001"),
        ("config `max_cots`", "unknown key"),
        no_folder=True,
    ),  # fmt: skip
    Case(
        "rank-typo-added-section",
        (*RK, "dialogues={tmp}", "+leaderbord.bootstrap=5"),
        ("config `leaderbord`", "unknown key"),
        no_folder=True,
    ),  # fmt: skip
    Case(
        "rank-jury-member-not-a-judge",
        (*RK, "dialogues={tmp}", "+jury.members.jury=tiny"),
        ("config `jury.members.jury`", "+judge@jury.members.jury=OPTION"),
        no_folder=True,
    ),  # fmt: skip
)


# --- files ----------------------------------------------------------------------------------------


def _dialogue_line(card_id: int, language: str = "en", target: str = "tiny", roleplayer: str = "tiny") -> str:
    from esc.dialogues.record import Dialogue, Turn

    opener = "Hello, I'm your personal assistant." if language == "en" else "你好，我是您的私人助手。"
    turns = [Turn("roleplayer", "I feel stuck.", "stop"), Turn("target", "Tell me more.", "stop")]
    dialogue = Dialogue(card_id, language, roleplayer, target, "card prompt", opener, None, turns, "complete")
    return json.dumps(dialogue.to_dict(), ensure_ascii=False) + "\n"


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bad (and a few good) input files shared by the cases."""
    root = tmp_path_factory.mktemp("fx")
    write = lambda name, obj: (root / name).write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")  # noqa: E731
    write("cards_en.json", [EN_CARD])
    write("empty.json", [])
    write("duplicates.json", [EN_CARD, EN_CARD])
    write("no_problem.json", [{**EN_CARD, "base": "Age: 30\nGender: Female\nOccupation: Teacher"}])
    (root / "malformed.json").write_text('[{"base": "Age: 30",\n  "id": }]', encoding="utf-8")
    (root / "latin1.json").write_bytes(
        json.dumps([EN_CARD]).replace("Teacher", "Lehrerin \xe9").encode("latin-1")
    )
    write("official_list.json", [["AI assistant：Hello"]])
    write("official_bad_index.json", {"7": ["AI assistant：Hello", "ESC-Role：I feel stuck."]})
    write("official_zh.json", {"0": ["AI assistant：你好，我是您的私人助手。", "ESC-Role：我最近压力很大。"]})
    (root / "official_latin1.json").write_bytes('{"0": ["AI assistant：Hall'.encode() + b'\xe9"]}')  # Latin-1
    card = {"id": "smile/0", "card": "年龄：青年\n问题：学业压力大"}
    (root / "smile_cards.jsonl").write_text(json.dumps(card) + "\n" + json.dumps(card) + "\n")
    chat = {
        "conversations": [{"from": "narrator", "value": "Once upon a time"}, {"from": "gpt", "value": "Hi"}]
    }
    (root / "roleplay.jsonl").write_text(json.dumps(chat) + "\n")
    posts = [{"id": 1, "text": "My boss yells at me."}, {"id": 2, "text": "  "}]
    (root / "posts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in posts))
    task = {"task_id": "card:en:1", "kind": "card", "language": "en", "text": "Age: 30", "payload": {}}
    (root / "tasks").mkdir()
    (root / "tasks" / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (root / "labels_unknown.jsonl").write_text(
        json.dumps({"task_id": "card:en:9", "annotator": "a", "grade": "high"}) + "\n"
    )
    (root / "labels_range.csv").write_text("task_id,annotator,grade\ncard:en:1,a,excellent\n")
    _annotation_files(root)
    _score_files(root)
    write("cards_two.json", [EN_CARD, {**EN_CARD, "id": 33000}])
    (root / "tiny__tiny__en.jsonl").write_text(_dialogue_line(32999))  # complete, without ratings
    _trajectory_files(root)
    return root


def _rated_line(values: tuple, text: str = "Tell me more.") -> str:
    """A dialogue of card 32999 rated at its two rating points with `values` (the target's reply: `text`)."""
    line = json.loads(_dialogue_line(32999).replace("Tell me more.", text))
    for turn, value in zip(line["turns"], values, strict=True):
        turn["emotion"] = {"value": value, "status": "valid", "rating": 5}
    return json.dumps(line) + "\n"


def _trajectory_files(root: Path) -> None:
    """Dialogue files with an emotion rating that is a word, one out of range, and an empty reply;
    a rank.py folder whose scores (and run log) name the first (for `esc report`)."""
    for name, line in (
        ("emotion_word", _rated_line(("high", 50.0))),
        ("emotion_150", _rated_line((40.0, 150))),
        ("empty_reply", _rated_line((40.0, 50.0), text="")),
    ):
        (root / name).mkdir()
        (root / name / "tiny__tiny__en.jsonl").write_text(line)
    rank = root / "emotion_word_rank"
    (rank / "scores").mkdir(parents=True)
    records = (root / "scores" / "tiny__tiny__en__tiny.jsonl").read_text().splitlines()
    source = str(root / "emotion_word" / "tiny__tiny__en.jsonl")
    lines = [json.dumps({**json.loads(r), "source": source}) + "\n" for r in records]
    (rank / "scores" / "tiny__tiny__en__tiny.jsonl").write_text("".join(lines))
    from esc.reports.runlog import RunHeader, RunLog, write_run_log
    from esc.scoring.store import ScoreRecord
    from esc.tasks.task import modes

    judgments = [modes()["score"].judgment(ScoreRecord.from_dict(json.loads(line))) for line in lines]
    write_run_log(rank, RunLog(RunHeader(task="score", sources=[]), judgments, [], {}))


def _annotation_files(root: Path) -> None:
    """A dialogue task folder, and labels that do not fit it or the card tasks (`tasks`)."""
    (root / "labels_latin1.csv").write_bytes(
        "task_id,annotator,grade\ncard:en:1,J\xe9r\xf4me,high\n".encode("latin-1")
    )
    (root / "ls_data_string.json").write_text(json.dumps([{"data": "card:en:1", "annotations": []}]))
    (root / "ls_annotation_string.json").write_text(
        json.dumps([{"data": {"task_id": "card:en:1"}, "annotations": ["grade: high"]}])
    )
    dialogue = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "I feel stuck."}]
    payload = {"card_id": 32999, "roleplayer": "tiny", "target": "tiny", "dialogue": dialogue}
    task = {"task_id": DIALOGUE_TASK, "kind": "dialogue", "language": "en", "text": "...", "payload": payload}
    (root / "dialogue_tasks").mkdir()
    (root / "dialogue_tasks" / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    (root / "label_seven.jsonl").write_text(
        json.dumps({"task_id": DIALOGUE_TASK, "annotator": "a", "fluency": 7}) + "\n"
    )
    labels = [
        {"task_id": DIALOGUE_TASK, "kind": "dialogue", "annotator": who, "field": "fluency", "value": value}
        for who, value in (("a", "7"), ("b", "3"))
    ]
    (root / "labels_seven.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))


def _score_files(root: Path) -> None:
    """A rank.py score file (the tiny judge on card 32999), the same saved as Latin-1, and an
    official score file."""
    from esc.scoring.rubrics import DIMENSION_KEYS

    records = [
        {"dialogue_id": "tiny__tiny__en/32999", "dimension": key, "language": "en", "judge": "tiny",
         "prompt": {"style": "official", "version": 2}, "status": "valid", "score": 2, "expected": 2.0,
         "probs": None, "answer_mass": None, "raw": None, "error": None, "target": "tiny",
         "roleplayer": "tiny", "card_id": 32999}
        for key in DIMENSION_KEYS
    ]  # fmt: skip
    (root / "scores").mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (root / "scores" / "tiny__tiny__en__tiny.jsonl").write_text(lines)
    (root / "scores_latin1.jsonl").write_bytes(lines.replace('"tiny"', '"tin\xe9"', 1).encode("latin-1"))
    (root / "tiny_en.json").write_text(json.dumps({"0": {k: 3 for k in OFFICIAL_KEYS}}))


# Setups registered by name (a function of the case's folder), beside the if-chain of `_setup`.
EXTRA_SETUPS: dict[str, Callable[[Path], None]] = {}


def extra_setup(func: Callable[[Path], None]) -> Callable[[Path], None]:
    """Registers `func` as the setup named after it (without a leading underscore)."""
    EXTRA_SETUPS[func.__name__.lstrip("_")] = func
    return func


# --- issue 50 setups: rating loop ---
@extra_setup
def _rating_loop(tmp: Path) -> None:
    from tests.test_rating_loop import make_rating_files

    make_rating_files(tmp)


# --- issue 50 setups: converter ---


def _internlm2_source(tmp: Path, adapter_change: dict | None = None) -> None:
    """{tmp}/internlm2 (the tiny InternLM2 checkpoint) and {tmp}/ESC-RANK/fluency, its adapter with
    `adapter_change` made to its adapter_config.json."""
    fixture = REPO_ROOT / "tests" / "fixtures" / "internlm2_tiny"
    shutil.copytree(fixture / "base", tmp / "internlm2")
    shutil.copytree(fixture / "adapter_a", tmp / "ESC-RANK" / "fluency")
    config = tmp / "ESC-RANK" / "fluency" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **(adapter_change or {})}))


@extra_setup
def _internlm2_truncated(tmp: Path) -> None:
    _internlm2_source(tmp)
    weights = tmp / "internlm2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])  # an interrupted download


@extra_setup
def _internlm2_converted_then_dora(tmp: Path) -> None:
    """OUT converted with two adapters; then a third that cannot convert joins the tree."""
    from esc.cli import main

    _internlm2_source(tmp)
    fixture = REPO_ROOT / "tests" / "fixtures" / "internlm2_tiny"
    shutil.copytree(fixture / "adapter_b", tmp / "ESC-RANK" / "fluency_en")
    argv = ["models", "convert-internlm2", str(tmp / "internlm2"), str(tmp / "out")]
    assert main([*argv, "--adapters", str(tmp / "ESC-RANK")]) == 0
    shutil.copytree(fixture / "adapter_a", tmp / "ESC-RANK" / "zz_dora")
    config = tmp / "ESC-RANK" / "zz_dora" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "use_dora": True}))


@extra_setup
def _internlm2_adapter_targets_wo(tmp: Path) -> None:
    _internlm2_source(tmp, {"target_modules": ["wo"]})  # its weights are on wqkv


@extra_setup
def _internlm2_adapter_rank_4(tmp: Path) -> None:
    _internlm2_source(tmp, {"r": 4})  # its weights have rank 8


@extra_setup
def _internlm2_out_a_link(tmp: Path) -> None:
    _internlm2_source(tmp)
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "notes.txt").write_text("mine")
    (tmp / "out").symlink_to(tmp / "elsewhere", target_is_directory=True)


@extra_setup
def _internlm2_adapters_inside_out(tmp: Path) -> None:
    """OUT converted before; the adapters to convert were then put inside it."""
    from esc.cli import main

    _internlm2_source(tmp)
    assert main(["models", "convert-internlm2", str(tmp / "internlm2"), str(tmp / "out")]) == 0
    shutil.move(tmp / "ESC-RANK", tmp / "out" / "released")


# --- issue 50 setups: settings ---

# --- issue 50 setups: secrets ---


# --- issue 50 setups: processes ---
@extra_setup
def _merge_shard(tmp: Path) -> None:
    """A shard folder as evaluate.py leaves it: a manifest naming its cards, one dialogue."""
    (tmp / "shard" / "dialogues").mkdir(parents=True)
    cards = {"languages": ["en"], "ids": None, "limit": 1, "paths": None}
    (tmp / "shard" / "manifest.json").write_text(json.dumps({"config": {"cards": cards}}))
    (tmp / "shard" / "dialogues" / "tiny__tiny__en.jsonl").write_text(_dialogue_line(32999))


def _resistant_line(card_id: int) -> str:
    """A dialogue line the resistant seeker played (its record names the profile)."""
    from esc.prompts.seekers import record_identity

    record = json.loads(_dialogue_line(card_id))
    record["meta"] = {"seeker": record_identity("resistant", "en")}
    return json.dumps(record, ensure_ascii=False) + "\n"


@extra_setup
def _resistant_run(tmp: Path) -> None:
    """An evaluate.py folder of the resistant seeker's dialogues."""
    (tmp / "out" / "dialogues").mkdir(parents=True)
    (tmp / RUN_FILE).write_text(_resistant_line(32999), encoding="utf-8")


@extra_setup
def _two_seeker_shards(tmp: Path) -> None:
    """Two shards of one card selection: the cooperative seeker's, the resistant seeker's."""
    _merge_shard(tmp)
    (tmp / "resistant" / "dialogues").mkdir(parents=True)
    shutil.copy(tmp / "shard" / "manifest.json", tmp / "resistant" / "manifest.json")
    (tmp / "resistant" / "dialogues" / "tiny__tiny__en.jsonl").write_text(_resistant_line(32999))


@extra_setup
def _robustness_runs(tmp: Path) -> None:
    """Three evaluate.py folders whose files share one name: the cooperative seeker's (coop), the
    resistant seeker's (res) and another of the resistant seeker's (twin)."""
    for folder, line in (("coop", _dialogue_line(32999)), ("res", _resistant_line(32999)),
                         ("twin", _resistant_line(32999))):  # fmt: skip
        (tmp / folder / "dialogues").mkdir(parents=True)
        (tmp / folder / "dialogues" / "tiny__tiny__en.jsonl").write_text(line, encoding="utf-8")


@extra_setup
def _bench_keep(tmp: Path) -> None:
    """`bench_evaluate.py --keep`: a notes file where a folder is meant, and a result cut short (a
    benchmark killed while an older version wrote it)."""
    (tmp / "notes.txt").write_text("my notes\n")
    (tmp / "keep").mkdir()
    (tmp / "keep" / "cpu_bf16-false.json").write_text('{"seconds": 12.5, "texts": {"32999": ["I fe')


# --- issue 50 setups: scoring ---


@extra_setup
def _official_without_a_dimension(tmp: Path) -> None:
    """An official score file of two dialogues, the second without `tech` (20 of 21 imported, no word)."""
    scores = {"0": {k: 3 for k in OFFICIAL_KEYS}, "1": {k: 2 for k in OFFICIAL_KEYS if k != "tech"}}
    (tmp / "model_en.json").write_text(json.dumps(scores), encoding="utf-8")


def _setup(name: str, tmp: Path) -> None:
    """Earlier output in `tmp` (= the case's folder) that the failing run must leave as it was."""
    if name in EXTRA_SETUPS:
        EXTRA_SETUPS[name](tmp)
        return
    dialogues = tmp / "out" / "dialogues"
    if name in ("run", "corrupt_run", "read_only_run", "run_with_manifest", "null_text_run"):
        dialogues.mkdir(parents=True)
        lines = [_dialogue_line(32999)]
        if name == "corrupt_run":  # a line cut in the middle of the file, complete lines around it
            lines = [
                _dialogue_line(32999),
                '{"card_id": 33000, "language": "en", "rolepl\n',
                _dialogue_line(33001),
            ]
        if name == "null_text_run":  # the second dialogue's reply has no text (a file edited by hand)
            lines.append(_dialogue_line(33000).replace('"text": "Tell me more."', '"text": null'))
        (dialogues / "tiny__tiny__en.jsonl").write_text("".join(lines), encoding="utf-8")
        (tmp / "result.json").write_text('{"0": ["AI assistant：an earlier export"]}\n', encoding="utf-8")
        if name == "run_with_manifest":
            (tmp / "out" / "manifest.json").write_text('{"status": "completed", "note": "an earlier run"}\n')
        if name == "read_only_run":
            for path in (dialogues.parent, dialogues):
                path.chmod(0o555)
    elif name == "read_only_cache_folder":
        from esc.chat.base import Reply
        from esc.chat.cache import RequestCache

        cache = RequestCache(tmp / "job.sqlite", "auto", 30.0)
        cache.put_many([("a request", Reply("a reply", "stop"))])
        cache.close()
        (tmp / "read_only").mkdir()
        (tmp / "read_only").chmod(0o555)
    elif name == "charts":
        (tmp / "out" / "charts").mkdir(parents=True)
        for chart in ("radar_en.png", "average_en.png"):
            (tmp / "out" / "charts" / chart).write_bytes(b"\x89PNG an earlier chart")
    elif name == "checkpoint":
        (tmp / "out").mkdir()
        (tmp / "out" / "last.ckpt").write_bytes(b"an earlier checkpoint")
    elif name == "imported_run":
        dialogues.mkdir(parents=True)
        (dialogues / "llama3__esc_role__en.jsonl").write_text(
            _dialogue_line(32999, "en", "llama3", "esc_role")
        )
    elif name == "corrupt_manifest":
        (tmp / "shard" / "dialogues").mkdir(parents=True)
        (tmp / "shard" / "manifest.json").write_text('{"config": {"cards": ')  # cut short
    elif name == "foreign_run":
        (tmp / "foreign" / "dialogues").mkdir(parents=True)
        (tmp / "foreign" / "dialogues" / "notes.jsonl").write_text(_dialogue_line(32999))
    elif name == "truncated_adapter":
        import torch
        from safetensors.torch import save_file

        adapter = tmp / "adapter"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2}))
        weights = adapter / "adapter_model.safetensors"
        save_file({"base_model.model.layers.0.q_proj.lora_A.weight": torch.zeros(2, 128)}, str(weights))
        weights.write_bytes(weights.read_bytes()[:-100])  # an interrupted copy
    else:
        raise ValueError(name)


def _fill(argv: tuple[str, ...], fx: Path, tmp: Path) -> list[str]:
    return [a.format(fx=fx, tmp=tmp, out=tmp / "out") for a in argv]


def _snapshot(case: Case, tmp: Path) -> dict[str, bytes]:
    return {name: (tmp / name).read_bytes() for name in case.keep}


# --- running --------------------------------------------------------------------------------------


def _command(argv: list[str]) -> list[str]:
    if argv[0] in HYDRA_SCRIPTS:
        return [sys.executable, str(REPO_ROOT / argv[0]), *argv[1:]]
    return [sys.executable, "-m", *argv]


def _without_write_override() -> list[str]:
    """A prefix that runs a command without the root's power to write anywhere (CAP_DAC_OVERRIDE), so
    a folder's permission bits hold; empty when this process is not root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a folder read-only")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def run_subprocess(argv: list[str], prefix: Sequence[str] = ()) -> tuple[int, str, str]:
    """(exit code, stderr, stdout) of the entry point run as a process, as a user's shell would."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [*prefix, *_command(argv)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stderr, done.stdout


def fill_the_disk(monkeypatch: pytest.MonkeyPatch, pattern: str) -> None:
    """From now on, writing a file whose name matches `pattern` fails as on a full disk: half of the
    bytes reach the file (its temp file, for one replaced whole), then OSError(ENOSPC), which names no
    file, as a real `write` on a full disk."""
    import esc.jsonl

    real = esc.jsonl._write_all

    def write(fd: int, data: bytes, path: Path) -> None:
        if not fnmatch.fnmatch(Path(path).name, pattern):
            return real(fd, data, path)
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(esc.jsonl, "_write_all", write)


def run_in_process(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch | None = None,
    capsys: pytest.CaptureFixture | None = None,
) -> tuple[int, str, str]:
    """(exit code, stderr, stdout) of the entry point as `python SCRIPT ARGS` / `python -m MODULE ARGS`
    runs it, in this process (`tests.helpers.run_in_process`; `monkeypatch` and `capsys` are not
    needed any more and are accepted for the callers that pass them)."""
    done = helpers.run_in_process(
        argv if argv[0] in HYDRA_SCRIPTS else ["-m", *argv],
        {"HYDRA_FULL_ERROR": "0", "WANDB_MODE": "disabled"},
    )
    return done.returncode, done.stderr, done.stdout


def assert_one_line_error(case: Case, code: int, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    last = stderr.rstrip("\n").splitlines()[-1] if stderr.strip() else ""
    assert code == 2, f"exit code {code}; stderr ends: {stderr[-1500:]}"
    assert last.startswith("error: "), stderr[-1500:]
    for part in case.expect:
        assert part in last, f"{part!r} not in {last!r}"


@pytest.fixture(scope="module")
def subprocess_runs(
    fx: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[Future, Path]]]:
    """The `subprocess` cases, started at once two at a time; each test waits for its own."""
    pool = ThreadPoolExecutor(max_workers=2)
    runs: dict[str, tuple[Future, Path]] = {}

    def start(case: Case, tmp: Path) -> tuple[int, str, str, dict[str, bytes]]:
        if case.setup:
            _setup(case.setup, tmp)
        before = _snapshot(case, tmp)
        prefix = _without_write_override() if case.privileged_write else []
        return (*run_subprocess(_fill(case.argv, fx, tmp), prefix), before)

    for case in CASES:
        if case.subprocess and (HAS_DATA or not case.needs_data):
            tmp = tmp_path_factory.mktemp(case.id)
            runs[case.id] = (pool.submit(start, case, tmp), tmp)
    yield runs
    pool.shutdown(wait=True)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_ends_with_one_line_and_keeps_earlier_output(
    case: Case,
    fx: Path,
    tmp_path: Path,
    subprocess_runs: dict[str, tuple[Future, Path]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    if case.needs_data and not HAS_DATA:
        pytest.skip("the tiny model needs the third-party data: run `make data`")
    if case.subprocess:
        future, tmp = subprocess_runs[case.id]
        code, stderr, stdout, before = future.result()
    else:
        if case.setup:
            _setup(case.setup, tmp_path)
        tmp, before = tmp_path, _snapshot(case, tmp_path)
        if case.full_disk:
            fill_the_disk(monkeypatch, case.full_disk)
        code, stderr, stdout = run_in_process(_fill(case.argv, fx, tmp_path), monkeypatch, capsys)
    assert_one_line_error(case, code, stderr)
    for text in case.absent:
        assert text not in stdout + stderr, f"{text!r} on the console"
    assert _snapshot(case, tmp) == before  # nothing written before is lost or changed
    if case.no_folder:
        assert not (tmp / "out").exists(), sorted(str(p) for p in (tmp / "out").rglob("*"))
    written = {str(p.relative_to(tmp)) for p in tmp.rglob("*.jsonl")}
    assert written <= set(case.keep) | {"foreign/dialogues/notes.jsonl"}  # no dialogue or score file added


# --- beyond the table -----------------------------------------------------------------------------


CARDS_TO_INTERRUPT = 8  # one-turn dialogues of the tiny model: several left when the first is written


@pytest.mark.skipif(not HAS_DATA, reason="the tiny model needs the third-party data: run `make data`")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_mid_run_then_rerun_keeps_the_dialogues_written(
    stop: signal.Signals,
    tmp_path: Path,
    fx: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Ctrl-C (SIGINT), or SIGTERM (`timeout`, `scancel`, SLURM's time limit), mid-run: exit code 128 +
    the signal and one line, no traceback; the manifest says "interrupted", not "running", and no
    `.lock.owner` names the dead process; the rerun (in this process, to save the imports) resumes
    after the lines already written, which stay byte for byte."""
    out = tmp_path / "out"
    path = out / "dialogues" / "tiny__tiny__en.jsonl"
    (tmp_path / "cards.json").write_text(
        json.dumps([{**EN_CARD, "id": 32999 + i} for i in range(CARDS_TO_INTERRUPT)], ensure_ascii=False),
        encoding="utf-8",
    )
    entry = _fill((*EV_RUN, "cards.paths=[{tmp}/cards.json]", "engine.wave_size=1"), fx, tmp_path)
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _command(entry), cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # a shell's background job inherits SIGINT ignored, and Python then never raises
        # KeyboardInterrupt: give the run the default disposition a terminal's Ctrl-C meets
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while proc.poll() is None and not (path.exists() and path.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(stop)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == 128 + stop and "Traceback" not in stderr, (proc.returncode, stderr[-1500:])
    assert stderr.rstrip().splitlines()[-1].startswith("error: interrupted"), stderr[-1500:]
    if stop == signal.SIGTERM:
        assert "error: interrupted (SIGTERM)" in stderr
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "interrupted", manifest["status"]
    assert not (out / ".lock.owner").exists(), "a stale lock owner names the dead process"
    written = path.read_bytes()
    assert 1 <= written.count(b"\n") < CARDS_TO_INTERRUPT

    code, stderr, _ = run_in_process(entry, monkeypatch, capsys)
    assert code == 0, stderr[-1500:]
    assert path.read_bytes().startswith(written) and path.read_bytes().count(b"\n") == CARDS_TO_INTERRUPT
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["status"] == "completed"


def test_export_names_include_the_roleplayer(
    tmp_path: Path, fx: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Two runs of one target with different role-players export to two files, not one."""
    for roleplayer in ("esc_role", "gpt4_zero_shot"):
        run = tmp_path / roleplayer / "dialogues"
        run.mkdir(parents=True)
        (run / f"llama3__{roleplayer}__en.jsonl").write_text(
            _dialogue_line(32999, "en", "llama3", roleplayer)
        )
        argv = [
            "esc",
            "dialogues",
            "export",
            str(run.parent),
            "--out",
            str(tmp_path / "result"),
            "--cards",
            str(fx / "cards_en.json"),
        ]
        assert run_in_process(argv, monkeypatch, capsys)[0] == 0
    names = sorted(p.name for p in (tmp_path / "result").iterdir())
    assert names == ["llama3__esc_role_en.json", "llama3__gpt4_zero_shot_en.json"]


def test_shipped_configs_pass_validation() -> None:
    """Every experiment, and options of each kind, compose into a config that passes validation
    (mandatory `???` values set, as the docs say to): it never refuses a documented command."""
    from esc.config_schema import validate

    folder = str(REPO_ROOT / "conf")  # any existing folder
    adapter = str(REPO_ROOT / "tests" / "fixtures" / "internlm2_tiny" / "adapter_a")  # a PEFT adapter
    for overrides, name, job in [
        ([], "train", "train"),
        (
            ["+exp=train/esc_role", "strategy=deepspeed_zero2", "quantization=nf4", "logger=csv_wandb"],
            "train",
            "train",
        ),
        (["+exp=train/esc_rank"], "train", "train"),
        (["+exp=train/esc_role_smollm2"], "train", "train"),
        (["+exp=train/esc_rank_smollm2"], "train", "train"),
        (["+exp=evaluate/table2_en"], "evaluate", "evaluate"),
        (["+exp=evaluate/table2_zh"], "evaluate", "evaluate"),
        (
            ["roleplayer=esc_role_local", f"roleplayer.backend.adapter={adapter}", "target=gpt4"],
            "evaluate",
            "evaluate",
        ),
        (
            ["roleplayer=baichuan_npc_icl_cot", "target=extes_llama", "target.backend.model.name_or_path=x"],
            "evaluate",
            "evaluate",
        ),
        ([f"dialogues={folder}"], "rank", "rank"),
        (["judge=esc_rank", f"judge.adapters.root={folder}", "mode=agreement"], "rank", "rank"),
        (["judge=gpt4", "mode=leaderboard", f"scores=[{folder}]"], "rank", "rank"),
        (["mode=correlation"], "rank", "rank"),
    ]:
        validate(compose(overrides, config_name=name), job)


def test_docs_table_lists_every_case() -> None:
    table = (REPO_ROOT / "docs" / "bad_inputs.md").read_text(encoding="utf-8")
    missing = [case.id for case in CASES if f"`{case.id}`" not in table]
    assert not missing, f"docs/bad_inputs.md lacks {missing}"
