"""Runs that cannot lie: outputs that say "complete" are complete, and nothing done is ever lost.

Each test here reproduces a case that once passed silently (exit 0, a plausible output) while the
outputs were wrong: a merge into an existing run that dropped dialogues, a prompt far over the
model's context window sent as if it fitted.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from esc.config_schema import validate
from esc.dialogues.store import read_dialogues
from esc.evaluate.context import fit_context
from esc.evaluate.run import evaluate
from tests.helpers import compose, requires_data, run_entry

EN_FILE = "dialogues/tiny__tiny__en.jsonl"


def _evaluate(out: Path, *overrides: str) -> dict:
    """`evaluate.py roleplayer=tiny target=tiny` in this process: one turn, English, no cache."""
    cfg = compose(
        [
            "roleplayer=tiny",
            "target=tiny",
            "cards.languages=[en]",
            "dialogue.turns=1",
            "engine.progress=false",
            "cache.enabled=false",
            *overrides,
        ],
        output_dir=out,
        config_name="evaluate",
    )
    return evaluate(cfg, validate(cfg, "evaluate"))


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (but the lock file, whose existence says nothing), by content."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _merge(*args: str | Path):
    return run_entry("-m", ["esc", "dialogues", "merge", *map(str, args)], timeout=300)


def _card_ids(path: Path) -> list[int]:
    return [d.card_id for d in read_dialogues(path)]


# --- merge: never drops a completed dialogue ----------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two shards of a 4-card run and an unsharded 8-card run over the same first cards."""
    root = tmp_path_factory.mktemp("runs")
    for index in range(2):
        _evaluate(root / f"S{index}", "cards.limit=4", f"shard.index={index}", "shard.count=2")
    _evaluate(root / "FULL", "cards.limit=8")
    return root


@requires_data
def test_merge_into_an_existing_run_keeps_its_dialogues(runs: Path, tmp_path: Path) -> None:
    full = tmp_path / "FULL"
    shutil.copytree(runs / "FULL", full)
    before = (full / EN_FILE).read_bytes()
    assert len(_card_ids(full / EN_FILE)) == 8

    result = _merge(runs / "S0", runs / "S1", "--out", full)
    assert result.returncode == 0, result.stderr
    # the shards' dialogues are the same dialogues as the run's first four: kept once, nothing lost
    assert (full / EN_FILE).read_bytes() == before
    assert len(_card_ids(full / EN_FILE)) == 8


@requires_data
def test_merge_again_after_a_missing_shard_adds_it_and_keeps_the_rest(runs: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    first = _merge(runs / "S0", "--out", merged)
    assert first.returncode == 1 and "2 missing" in first.stdout  # S1 not there yet
    partial = (merged / EN_FILE).read_bytes()

    second = _merge(runs / "S0", runs / "S1", "--out", merged)
    assert second.returncode == 0, second.stderr + second.stdout
    assert (merged / EN_FILE).read_bytes().startswith(partial)  # what was there is unchanged
    assert sorted(_card_ids(merged / EN_FILE)) == sorted(_card_ids(runs / "FULL" / EN_FILE)[:4])


def _change_one_reply(path: Path, card_id: int) -> None:
    """Make the dialogue of `card_id` another dialogue: as if that card had been played again."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["card_id"] == card_id:
            record["turns"][-1]["text"] += " (played again)"
            lines[i] = json.dumps(record, ensure_ascii=False) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


@requires_data
def test_merge_refuses_two_different_dialogues_for_one_card(runs: Path, tmp_path: Path) -> None:
    full = tmp_path / "FULL"
    shutil.copytree(runs / "FULL", full)
    card = _card_ids(runs / "S1" / EN_FILE)[0]
    _change_one_reply(full / EN_FILE, card)
    before = _snapshot(full)

    result = _merge(runs / "S0", runs / "S1", "--out", full)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert f"card {card}" in lines[0]
    assert str(runs / "S1" / EN_FILE) in lines[0] and str(full / EN_FILE) in lines[0]
    assert _snapshot(full) == before  # nothing in the folder changed


@requires_data
def test_merge_refuses_shards_that_disagree_and_writes_nothing(runs: Path, tmp_path: Path) -> None:
    other = tmp_path / "S0-again"
    shutil.copytree(runs / "S0", other)
    card = _card_ids(other / EN_FILE)[0]
    _change_one_reply(other / EN_FILE, card)

    result = _merge(runs / "S0", other, runs / "S1", "--out", tmp_path / "merged")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error:") and f"card {card}" in result.stderr
    assert str(runs / "S0" / EN_FILE) in result.stderr and str(other / EN_FILE) in result.stderr
    assert not (tmp_path / "merged").exists()


# --- context window: a prompt that cannot fit is never sent -------------------------------------


def _count(messages: list[dict]) -> int:
    """A token counter for tests: one token per character."""
    return sum(len(m["content"]) for m in messages)


def test_fit_context_says_when_nothing_is_left_to_drop() -> None:
    system = {"role": "system", "content": "s" * 500}
    opener = {"role": "user", "content": "o" * 10}
    exchange = [{"role": "assistant", "content": "a" * 20}, {"role": "user", "content": "u" * 20}]

    fit = fit_context([system, opener], _count, window=100, reserve=8, keep_head=2)
    assert not fit.fits and fit.dropped == 0 and fit.tokens == 510  # nothing could be dropped

    fit = fit_context([system, opener, *exchange * 3], _count, window=100, reserve=8, keep_head=2)
    assert not fit.fits and fit.dropped == 4 and fit.tokens == 550  # all it may drop, still too long

    small = {"role": "system", "content": "s" * 10}
    fit = fit_context([small, opener, *exchange * 3], _count, window=100, reserve=8, keep_head=2)
    assert fit.fits and fit.dropped == 4 and fit.messages == [small, opener, *exchange]

    fit = fit_context(
        [small, opener, *exchange * 3], _count, window=100, reserve=8, keep_head=2, truncate=False
    )
    assert not fit.fits and fit.dropped == 0 and fit.tokens == 140  # the `fail` policy drops nothing


def _card(card_id: int, text: str) -> dict:
    return {
        "id": card_id,
        "language": "en",
        "age": "30",
        "gender": "Female",
        "occupation": "Teacher",
        "problem": text,
        "source": "ESConv",
        "topic": "family_life",
    }


def _big_card_file(path: Path) -> Path:
    """A normal card, then one whose fields are 10,000 characters each: ~40,000 tokens of prompt
    for the tiny model, whose window is 4,096."""
    rng = random.Random(0)
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(10_000))
    big = {**_card(2, noise), "age": noise, "gender": noise, "occupation": noise}
    path.write_text(json.dumps([_card(1, "She cannot sleep before exams."), big]), encoding="utf-8")
    return path


@pytest.mark.parametrize("policy", ["truncate_oldest", "fail"])
def test_a_prompt_over_the_context_window_fails_its_dialogue(tmp_path: Path, policy: str) -> None:
    cards = _big_card_file(tmp_path / "BIG.json")
    out = tmp_path / "out"
    result = run_entry(
        "evaluate.py",
        [
            "roleplayer=tiny",
            "target=tiny",
            f"cards.paths=[{cards}]",
            "dialogue.turns=2",
            f"dialogue.context_policy={policy}",
            "engine.progress=false",
            "cache.enabled=false",
            f"hydra.run.dir={out}",
        ],
    )
    assert result.returncode == 3, result.stdout + result.stderr  # finished with failed dialogues
    assert "1 dialogues completed, 1 failed" in result.stdout
    assert [d.card_id for d in read_dialogues(out / EN_FILE)] == [1]  # the normal card is unharmed
    [failed] = read_dialogues(out / "dialogues" / "tiny__tiny__en.failed.jsonl")
    assert failed.card_id == 2 and failed.status == "failed" and not failed.turns  # nothing was sent
    assert "context window (4096 tokens)" in failed.error
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["failed"] == 1 and manifest["status"] == "completed_with_failures"
