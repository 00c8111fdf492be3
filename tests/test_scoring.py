"""Scoring (esc/scoring): rubrics, the local judge's answer distribution, score files, the
leaderboard, and rank.py end to end on the tiny judge. Offline, CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from esc.chat.closed import ClosedAnswer
from esc.errors import ConfigError, DataError, UserError
from esc.reports.bootstrap import bootstrap_ci
from esc.reports.result import Report
from esc.scoring.judge import FAILED, INVALID, VALID, JudgeAnswer, ScoreItem
from esc.scoring.judges import build_judge, judge_settings
from esc.scoring.rubrics import (
    DIMENSION_KEYS,
    TABLE_2_ORDER,
    annotation_rules,
    dialogue_text,
    dimension,
    dimensions,
    label,
    labelled_counts,
    prompt_style,
)
from esc.scoring.store import ScoreRecord, ScoreStore, read_scores
from esc.tasks.score import leaderboard as board
from tests.helpers import compose, conf_node, requires_data, run_entry

LINES = (
    ("assistant", "Hello, I'm your personal assistant."),
    ("user", "I failed my exam and my parents are angry."),
    ("assistant", "I'm sorry to hear that. How are you feeling?"),
)


# --- rubrics ---------------------------------------------------------------------------------------


def test_dimensions_resolve_keys_paper_names_and_official_keys() -> None:
    assert DIMENSION_KEYS == ("fluency", "diversity", "empathy", "suggestion", "humanoid", "skill", "overall")
    assert dimension("Expression").key == "diversity" and dimension("empathic").key == "empathy"
    assert dimension("tech").key == "skill" and dimension("human").key == "humanoid"
    assert dimension("Information").key == "suggestion" and dimension("human preference").key == "overall"
    assert [d.official_key for d in map(dimension, DIMENSION_KEYS)] == [
        "fluency", "diversity", "empathic", "suggestion", "human", "tech", "overall"
    ]  # fmt: skip
    with pytest.raises(UserError, match="unknown dimension 'kindness'"):
        dimension("kindness")


def test_the_one_table_of_dimensions_names_them_as_the_paper_does() -> None:
    """Table 2's header, as printed (Fluency Expression Empathy Information Skillful Humanoid
    Overall), is the table's paper names in TABLE_2_ORDER; every view labels a key by it (`label`),
    and any other key (a checklist question) stays as it is."""
    table_2 = ["Fluency", "Expression", "Empathy", "Information", "Skillful", "Humanoid", "Overall"]
    assert [dimension(k).paper_name for k in TABLE_2_ORDER] == table_2
    assert [label(k) for k in TABLE_2_ORDER] == table_2 and label("harmful_content") == "harmful_content"
    assert {d.key: d.zh for d in dimensions()}["diversity"] == "多样性"
    assert all(d.zh and d.short.endswith(".") for d in dimensions())
    assert labelled_counts({"diversity": 2, "overall": 0, "skill": 1}) == "Expression 2, Skillful 1"
    assert labelled_counts({}) == "none"


def test_official_prompt_is_score_py_verbatim() -> None:
    """The text the released ESC-RANK adapters read (haidequanbu/ESC-Eval score.py)."""
    style = prompt_style("official")
    [message] = style.messages("suggestion", dialogue_text(LINES), "en")
    assert message["role"] == "user"
    text = message["content"]
    assert text.startswith("I need to evaluate the  suggection effectiveness of an AI assistant")
    assert "\n4: There are more than 5 suggestions, and all of them are valid.\n" in text
    assert "Dialogue between user and AI assistant: \n**AI助手**：Hello" in text
    assert "\n\n**用户**I failed my exam" in text  # score.py drops the colon after ESC-Role
    assert text.endswith(
        "Based on the rules, give your suggection effectiveness score (The number only) to the Dialogue."
    )
    en = style.messages("fluency", "x", "en")[0]["content"]
    zh = style.messages("fluency", "x", "zh")[0]["content"]
    assert "replies are in Chinese" in en and "Chinese" not in zh
    assert style.messages("overall", "x", "en")[0]["content"].count("recommend it to friends.\n'") == 1


def test_paper_prompt_is_figures_12_to_19() -> None:
    style = prompt_style("paper")
    system, user = style.messages("empathy", "DIALOGUE", "en")
    assert system == {"role": "system", "content": "You are a helpful assistant!"}
    assert user["content"].startswith("[Instruction]\nI need to evaluate the empathy of an AI assistant")
    expected = "[Input]\nDialogue between user and AI assistant:\nDIALOGUE\nBased on the rules, give your "
    assert expected + "empathic score" in user["content"]
    assert user["content"].endswith("(The number only) to the Dialogue.\n[Output]")
    skill = style.messages("skill", "x", "en")[1]["content"]
    assert "As a data annotator, please help" in skill and "data\nannotator" not in skill  # PDF wraps joined


def test_annotation_rules_are_table_16() -> None:
    rules = annotation_rules()
    assert rules["version"] == 1 and set(DIMENSION_KEYS) <= set(rules)
    assert rules["overall"]["levels"][4] == "I will use it myself and recommend it to friends."
    assert rules["skill"]["levels"][0] == "One out of five."


# --- judgments -------------------------------------------------------------------------------------


def test_judgment_from_distribution() -> None:
    j = JudgeAnswer.from_closed(ClosedAnswer.from_probabilities([0.0, 0.1, 0.1, 0.2, 0.0]))
    assert j.status == VALID and j.score == 3 and j.answer_mass == pytest.approx(0.4)
    assert j.probs == pytest.approx([0, 0.25, 0.25, 0.5, 0]) and j.expected == pytest.approx(2.25)
    low = JudgeAnswer.from_closed(ClosedAnswer.from_probabilities([1e-6] * 5, min_mass=0.01))
    assert low.status == INVALID and low.score is None and "probability" in low.error


@pytest.fixture(scope="module")
def tiny_judge():
    judge = build_judge(
        judge_settings(
            {"kind": "local", "name": "tiny", "model": compose(["model=tiny"]).model, "batch_size": 4}
        )
    )
    judge.check_ready()
    yield judge
    judge.close()


@requires_data
def test_local_judge_scores_every_dimension_and_is_batch_invariant(tiny_judge) -> None:
    items = [ScoreItem(f"d{i}", key, "en", LINES[: i + 1]) for i in range(3) for key in DIMENSION_KEYS]
    together = tiny_judge.judge(items)
    alone = [tiny_judge.judge([item])[0] for item in items[::5]]
    assert all(j.status == VALID and j.score in range(5) for j in together)
    for j in together:
        assert sum(j.probs) == pytest.approx(1, abs=1e-5) and 0 < j.answer_mass <= 1
        assert j.score == max(range(5), key=lambda s: j.probs[s])
        assert j.expected == pytest.approx(sum(s * p for s, p in enumerate(j.probs)), abs=1e-5)
    for a, b in zip(alone, together[::5], strict=True):
        assert a.probs == pytest.approx(b.probs, abs=1e-5)
    identity = tiny_judge.identity()
    assert identity["prompt"] == prompt_style("official").identity and identity["adapters"] is None
    assert identity["prompt"]["version"] == 2 and len(identity["prompt"]["sha256"]) == 64


@requires_data
def test_local_judge_reads_the_probability_of_each_answer_token(tiny_judge) -> None:
    """The five probabilities are the model's own next-token probabilities of "0".."4"."""
    import torch

    item = ScoreItem("d", "empathy", "en", LINES)
    ids = tiny_judge.prompt_ids(item)
    with torch.no_grad():
        logits = tiny_judge.backend._model(input_ids=torch.tensor([ids])).logits[0, -1]
    full = torch.softmax(logits.float(), -1)
    tokenizer = tiny_judge.backend.tokenizer
    answer = [float(full[tokenizer.convert_tokens_to_ids(str(s))]) for s in range(5)]
    j = tiny_judge.judge([item])[0]
    assert j.answer_mass == pytest.approx(sum(answer), rel=1e-3)
    assert j.probs == pytest.approx([a / sum(answer) for a in answer], abs=1e-5)


@requires_data
def test_prompt_too_long_is_invalid_not_cut() -> None:
    judge = build_judge(judge_settings({"kind": "local", "name": "t", "model": compose(["model=tiny"]).model,
                         "max_prompt_tokens": 50}))  # fmt: skip
    [j] = judge.judge([ScoreItem("d", "fluency", "en", LINES)])
    assert j.status == INVALID and j.score is None and "prompt too long" in j.error


def test_unknown_judge_kind_and_bad_adapter_layout_name_the_key() -> None:
    with pytest.raises(ConfigError, match="judge.kind"):
        build_judge(judge_settings({"kind": "oracle", "name": "x"}))
    with pytest.raises(ConfigError, match="judge.adapters.root"):
        model = conf_node("model", {"tiny": None, "name_or_path": "m"})
        build_judge(
            judge_settings({"kind": "local", "name": "x", "model": model, "adapters": {"layout": "official"}})
        )


# --- score files and the leaderboard ----------------------------------------------------------------


def record(dialogue: str, dim: str, status: str, score: int | None, target: str = "bot", lang: str = "en"):
    return ScoreRecord(dialogue, dim, lang, "judge", {"style": "official", "version": 1}, status, score,
                       target=target, roleplayer="rp")  # fmt: skip


def test_leaderboard_numbers_by_hand() -> None:
    records = [
        record("a", "fluency", VALID, 4), record("b", "fluency", VALID, 2),        # mean 3 -> 75
        record("a", "empathy", VALID, 1), record("b", "empathy", INVALID, None),   # mean 1 -> 25, 1 invalid
        record("a", "overall", VALID, 0), record("b", "overall", FAILED, None),    # mean 0 -> 0, 1 failed
        # an invalid record carrying a number must still never count
        record("a", "humanoid", INVALID, 4), record("b", "humanoid", VALID, 2),    # mean 2 -> 50
    ]  # fmt: skip
    [row] = board.leaderboard(records, n_resamples=200)
    cells = {k: c.estimate for k, c in row.cells.items()}
    assert cells["fluency"].value == 75 and cells["fluency"].n == 2
    assert cells["empathy"].value == 25 and row.cells["empathy"].n_invalid == 1
    assert cells["overall"].value == 0 and row.cells["overall"].n_failed == 1
    assert cells["humanoid"].value == 50 and cells["humanoid"].n == 1
    assert (
        cells["skill"].value is None and cells["skill"].n == 0 and cells["skill"].note == "no valid judgment"
    )
    assert row.average.estimate.value == pytest.approx((75 + 25 + 0 + 50) / 4)
    low, high = cells["fluency"].low, cells["fluency"].high
    assert 50 <= low <= 75 <= high <= 100
    assert cells["fluency"].unit == "dialogue" and cells["skill"].unit is None  # no card ids: each dialogue
    report = Report("leaderboard", tuple(board.leaderboard_blocks([row])))
    markdown = report.to_markdown()
    assert "| en | bot | rp | 75.00 [" in markdown and "n/a" in markdown
    placed = {dict(e.keys)["column"]: e for e in report.estimates()}
    assert placed["Fluency"].value == 75 and placed["Fluency"].table == "leaderboard/table 1"
    average = board.average_label(row.average_of)  # four dimensions judged: the label says which
    assert average.startswith("Average (4 of 7: ") and placed[average].value == row.average.estimate.value
    assert dict(placed[average].keys) == {
        "Lang": "en",
        "Target": "bot",
        "Role-player": "rp",
        "column": average,
    }


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_n() -> None:
    small = bootstrap_ci([0, 4] * 5, n_resamples=500)
    large = bootstrap_ci([0, 4] * 200, n_resamples=500)
    assert small[0] < 2 < small[1] and large[0] < 2 < large[1]
    assert large[1] - large[0] < small[1] - small[0]
    assert bootstrap_ci([3]) == (None, None)


def test_score_store_resumes_and_retries_failed(tmp_path: Path) -> None:
    store = ScoreStore(tmp_path / "s.jsonl")
    store.add([record("a", "fluency", VALID, 3), record("a", "empathy", FAILED, None)])
    with (tmp_path / "s.jsonl").open("a") as fh:
        fh.write('{"dialogue_id": "a", "dimen')  # a line cut by a kill
    again = ScoreStore(tmp_path / "s.jsonl")
    assert again.is_done(("a", "fluency")) and not again.is_done(("a", "empathy"))
    again.add([record("a", "empathy", VALID, 2)])
    latest = {r.key: r for r in read_scores(tmp_path / "s.jsonl")}
    assert latest[("a", "empathy")].score == 2 and len(latest) == 2


def test_bad_score_file_is_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record("a", "fluency", VALID, 3).to_dict()) + "\n"
                    + json.dumps({**record("a", "empathy", VALID, 7).to_dict()}) + "\n")  # fmt: skip
    with pytest.raises(DataError, match=r"bad.jsonl \[record line 2\]: not a score record .*0, 1, 2, 3, 4"):
        list(read_scores(path))
    path.write_text(json.dumps({**record("a", "kindness", VALID, 3).to_dict()}) + "\n")
    with pytest.raises(DataError, match="unknown dimension 'kindness'"):
        list(read_scores(path))


# --- rank.py end to end ------------------------------------------------------------------------------


@requires_data
def test_rank_py_on_tiny_dialogues_writes_scores_leaderboard_and_charts(tmp_path: Path) -> None:
    dialogues = tmp_path / "eval"
    args = ["roleplayer=tiny", "target=tiny", "cards.limit=2", "engine.progress=false",
            "cache.enabled=false", f"hydra.run.dir={dialogues}"]  # fmt: skip
    assert run_entry("evaluate.py", args).returncode == 0
    out = tmp_path / "rank"
    result = run_entry("rank.py", ["judge=tiny", f"dialogues={dialogues}", "scoring.progress=false",
                                   f"hydra.run.dir={out}"])  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted((out / "scores").glob("*.jsonl"))
    assert [f.name for f in files] == ["tiny__tiny__en__tiny.jsonl", "tiny__tiny__zh__tiny.jsonl"]
    records = [r for f in files for r in read_scores(f)]
    assert len(records) == 2 * 2 * 7 and all(r.status == VALID for r in records)
    per_dialogue = {}
    for r in records:
        per_dialogue.setdefault(r.dialogue_id, set()).add(r.dimension)
    assert all(dims == set(DIMENSION_KEYS) for dims in per_dialogue.values())
    table2 = (out / "leaderboard.md").read_text().split("\n## ")[0]  # before the breakdown sections
    assert table2.count("| tiny | tiny |") == 2
    assert {p.name for p in (out / "charts").glob("*.png")} == {
        "radar_en.png",
        "radar_zh.png",
        "average_en.png",
        "average_zh.png",
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["judge"]["name"] == "tiny"
    assert manifest["judgments"]["empathy"] == {"valid": 4, "invalid": 0, "failed": 0}
    assert "0 invalid" in result.stdout
    again = run_entry("rank.py", ["judge=tiny", f"dialogues={dialogues}", "scoring.progress=false",
                                  f"hydra.run.dir={out}"])  # fmt: skip
    assert again.returncode == 0 and "(28 already done)" in again.stdout
    assert sum(1 for f in files for _ in read_scores(f)) == 28  # nothing judged twice


@requires_data
def test_rank_py_bad_dialogue_is_one_line_error_before_any_judging(tmp_path: Path) -> None:
    from esc.dialogues.record import Dialogue, Turn

    folder = tmp_path / "dialogues"
    folder.mkdir()
    good = Dialogue(1, "en", "rp", "bot", "sys", "hi", None, [Turn("roleplayer", "a", "stop")], "complete")
    twice = [Turn("roleplayer", "a", "stop"), Turn("roleplayer", "b", "stop")]
    bad = Dialogue(2, "en", "rp", "bot", "sys", "hi", None, twice, "complete")
    lines = "".join(json.dumps(d.to_dict()) + "\n" for d in (good, bad))
    (folder / "bot__rp__en.jsonl").write_text(lines)
    out = tmp_path / "rank"
    result = run_entry("rank.py", ["judge=tiny", f"dialogues={tmp_path}", f"hydra.run.dir={out}"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "bot__rp__en.jsonl [record line 2]" in error and "turns missing" in error
    assert not (out / "scores").exists()


def test_selected_dimensions() -> None:
    from esc.scoring.judging import selected_dimensions

    assert selected_dimensions("all") == list(DIMENSION_KEYS)
    assert selected_dimensions(["Empathy", "tech"]) == ["empathy", "skill"]
    with pytest.raises(UserError, match="config `dimensions`"):
        selected_dimensions(["kindness"])
    assert math.isclose(1.0, 1.0)


JUDGES = sorted(p.stem for p in (Path(__file__).parent.parent / "conf" / "judge").glob("*.yaml"))


@pytest.mark.parametrize("judge", JUDGES)
def test_every_judge_config_composes(judge: str, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    cfg = compose([f"judge={judge}", "dialogues=x"], output_dir=tmp_path, config_name="rank")
    node = OmegaConf.to_container(cfg.judge, resolve=True, throw_on_missing=False)
    assert node["name"] == judge and node["kind"] in ("local", "api") and node["notes"]
    assert node["prompt"] in ("official", "paper")
    if node["kind"] == "local":
        assert OmegaConf.is_missing(cfg.judge.adapters, "root") == judge.startswith("esc_rank")
    elif node["backend"]["kind"] == "vllm":  # vLLM in this process: constrained answers, adapters
        assert node["constrain"] and node["max_new_tokens"] == 1 and node["top_logprobs"] >= 5
        assert OmegaConf.is_missing(cfg.judge.adapters, "root") == judge.startswith("esc_rank")
    elif node["backend"]["kind"] == "anthropic":  # Claude: the API has no log-probabilities to ask for
        assert node["backend"]["api_key_env"] and node["top_logprobs"] == 0
    else:
        assert node["backend"]["kind"] == "openai" and node["backend"]["api_key_env"]
