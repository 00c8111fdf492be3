"""Limits every config check keeps: no nan or inf passes a number rule or a typed field, anywhere in a
shipped config; a name fits the file names built from it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from pydantic import ValidationError

from tests.helpers import CONF_DIR, compose

JOBS = ("evaluate", "rank", "train", "cards")
NON_FINITE = (math.nan, math.inf, -math.inf)


def _sections() -> Iterator[tuple[str, object]]:
    """(job, section) of every job's schema, each mode's sections among rank.py's."""
    from esc.config_schema import schema

    for job in JOBS:
        for section in schema(job):
            yield job, section


def test_every_field_refuses_nan_and_inf() -> None:
    """nan fails no comparison, so a range check let it through (a nan temperature decoded greedily,
    a nan minimum mass turned the rule off, settings.json held a bare NaN): each field of each job's
    models (nested ones too) refuses nan, inf and -inf, naming the key; a field of no type (`Any`) is
    left to the whole config's refusal of any nan (the next test). A new field is walked without an
    edit here."""
    from esc.config_docs import fields
    from esc.config_rules import config_error

    checked = 0
    for job, section in _sections():
        for key, model, name, field in fields(section.node, section.model):
            if field.annotation is Any:
                continue
            name = field.alias or name  # `_target_`
            for value in NON_FINITE:
                try:
                    model.model_validate({name: value})
                except ValidationError as err:
                    mine = [e for e in err.errors() if e["loc"][:1] == (name,) and e["type"] != "missing"]
                    assert mine, f"{job}: {key} accepts {value}"
                    message = str(config_error(mine, key.rpartition(".")[0], {name: value}))
                    assert f"`{key}`" in message and f"got {value}" in message, f"{key}: {message}"
                else:
                    raise AssertionError(f"{job}: {key} accepts {value}")
            checked += 1
    assert checked > 100, checked  # the walk reached the models


def _numbers(node: object, where: str = "") -> Iterator[str]:
    """The key of every int or float (not a bool) in a plain config tree; list items as key[i]."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _numbers(value, f"{where}.{key}".lstrip("."))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _numbers(value, f"{where}[{i}]")
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield where


CONFIGS = [
    ("evaluate", ["trajectory.enabled=true", "trajectory.stop.enabled=true"]),
    ("rank", [f"dialogues={CONF_DIR}"]),
    ("rank", [f"dialogues={CONF_DIR}", "jury=tiny_pair", "mode=pairwise"]),
    ("train", []),
    ("train", ["+exp=train/esc_rank_smollm2"]),
    ("cards", []),
]


@pytest.mark.parametrize(("job", "overrides"), CONFIGS, ids=[f"{j}-{len(o)}" for j, o in CONFIGS])
def test_nan_in_any_number_of_a_shipped_config_is_one_config_error(job: str, overrides: list[str]) -> None:
    """Every number a shipped config holds, set to nan (or inf), stops validation with one
    ConfigError naming it, whether a rule reads the key or not (a new key cannot slip through)."""
    from esc.config_schema import validate
    from esc.errors import ConfigError

    cfg = compose(overrides, config_name=job)
    validate(cfg, job)  # as shipped: accepted
    keys = list(_numbers(OmegaConf.to_container(cfg, resolve=False)))
    assert len(keys) > 10
    for i, key in enumerate(keys):
        bad = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
        OmegaConf.update(bad, key.replace("[", ".").replace("]", ""), NON_FINITE[i % 3], force_add=True)
        with pytest.raises(ConfigError) as err:
            validate(bad, job)
        named, message = str(err.value).split("`")[1], str(err.value)
        given = key.startswith(named) and named or f"comes from ${{{key}}}" in message  # or, behind it
        assert given, f"{key}: {message}"  # the key, its list, or the key set through an interpolation


def test_a_name_at_the_limit_fits_every_file_built_from_it(tmp_path: Path) -> None:
    """Three names of NAME_BYTES bytes (Chinese, 3 bytes a character) give the longest files a run
    writes, their temporary copies included (real writes: a file system refuses over 255 bytes);
    one byte more is refused by the name check, naming the size."""
    from esc.dialogues.record import Dialogue
    from esc.dialogues.store import DialogueStore, dialogue_file
    from esc.jsonl import atomic_write_text
    from esc.settings.types import NAME_BYTES, file_name_problem

    name = "情" * (NAME_BYTES // 3) + "a" * (NAME_BYTES % 3)
    assert len(name.encode()) == NAME_BYTES and file_name_problem(name) is None
    path = dialogue_file(tmp_path, name, name, "en")
    store = DialogueStore(path)
    store.add(Dialogue(32999, "en", name, name, "card", "Hello", None, [], "failed"))  # .failed.jsonl
    assert store.failed_path.is_file()
    score = tmp_path / "scores" / f"{path.stem}__{name}.jsonl"  # esc.tasks.score.task's score file
    score.parent.mkdir()
    atomic_write_text(score, "")  # through its temporary copy, the longest name
    assert score.is_file()
    problem = file_name_problem(name + "a")
    assert problem is not None and f"is {NAME_BYTES + 1} bytes" in problem


@pytest.mark.parametrize(
    "argv",
    [
        ("evaluate.py", "~seed", "cards.paths=[{tmp}/cards.json]", "cards.languages=[en]"),
        ("rank.py", "judge=tiny", "dimensions=123", "dialogues={tmp}/tiny__tiny__en.jsonl"),
        ("rank.py", "judge=tiny", "~seed", "dialogues={tmp}/tiny__tiny__en.jsonl"),
    ],
    ids=["evaluate-without-seed", "rank-dimensions-a-number", "rank-without-seed"],
)
def test_a_refused_setting_leaves_no_run_folder(
    argv: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`~seed` and `dimensions=123` were tracebacks in the job that left a run folder (an empty one,
    or one holding `.lock`): now one line before any work, and no folder."""
    from tests.test_bad_inputs import EN_CARD, _dialogue_line, run_in_process

    (tmp_path / "cards.json").write_text(json.dumps([EN_CARD], ensure_ascii=False), encoding="utf-8")
    (tmp_path / "tiny__tiny__en.jsonl").write_text(_dialogue_line(32999), encoding="utf-8")
    out = tmp_path / "out"
    args = [argv[0], f"hydra.run.dir={out}", *(a.format(tmp=tmp_path) for a in argv[1:])]
    code, stderr, _ = run_in_process(args, monkeypatch, capsys)
    assert "Traceback" not in stderr and code == 2, stderr[-1500:]
    assert stderr.rstrip().splitlines()[-1].startswith("error: config `"), stderr[-1500:]
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
