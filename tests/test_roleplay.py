"""Role-play agent evaluation (issue 11): the six metrics (0-2) and the pairwise test in both
orders, judged through rank.py's judges (invalid answers counted, never scored), Table 1 and win
rates with intervals, end to end with the tiny model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from esc.esc_role_samples.esconv import read_esconv_splits
from esc.paths import data_dir
from esc.scoring.judge import INVALID, VALID
from esc.scoring.judges import build_judge, judge_settings
from esc.scoring.store import ScoreRecord
from esc.tasks.roleplay.questions import PAIRWISE, RoleplayRecord, metric_items, metric_keys, pairwise_items
from esc.tasks.roleplay.report import table1, win_rates
from tests.helpers import evaluate_config, requires_data, run_entry, run_job
from tests.test_scoring_judges import QueuedBackend  # noqa: F401  (registers backend kind "queued_replies")

pytestmark = requires_data
SEEKER = (("user", "I failed my exam."), ("assistant", "I'm sorry."), ("user", "My parents will be angry."))
HUMAN = (("user", "i failed again"), ("assistant", "That sounds hard."), ("user", "yeah my dad will kill me"))


def canned(replies: list[str]):
    backend = {"kind": "queued_replies", "replies": [{"text": r} for r in replies]}
    return build_judge(
        judge_settings({"kind": "api", "name": "canned", "prompt": "paper", "backend": backend})
    )


def records(items, judgments) -> list[ScoreRecord]:
    return [
        RoleplayRecord.make(
            j, dialogue_id=it.item_id, dimension=it.dimension, language=it.language, judge="canned", prompt={}
        )  # fmt: skip
        for it, j in zip(items, judgments, strict=True)
    ]


def test_metric_questions_take_0_to_2_and_count_what_is_not() -> None:
    items = metric_items("esc_role:en:1", "en", "Age: 20\nProblem: failed an exam", SEEKER)
    assert [i.dimension for i in items] == metric_keys() and all(i.choices == ("0", "1", "2") for i in items)
    prompt = items[0].prompt(None)[0]["content"]
    assert (
        "Problem: failed an exam" in prompt
        and "Seeker: I failed my exam." in prompt
        and "0, 1 or 2" in prompt
    )
    judged = canned(["2", "Score: 1", "3", "1 or 2", "0", "**2**"]).judge(items)
    assert [j.status for j in judged] == [VALID, VALID, INVALID, INVALID, VALID, VALID]
    assert [j.score for j in judged] == [2, 1, None, None, 0, 2]  # "3" is out of this scale: invalid


def test_win_rates_cancel_position_bias() -> None:
    pairs = [
        pairwise_items(f"{rp}:en:{k}", "en", SEEKER, HUMAN)
        for rp in ("always_a", "picks_rp")
        for k in range(4)
    ]
    items = [i for p in pairs for i in p]
    assert {i.dimension for i in items} == {PAIRWISE} and items[0].item_id.endswith(":rp_first")
    first, second = items[0].prompt(None)[0]["content"], items[1].prompt(None)[0]["content"]
    assert first.index("I failed my exam") < first.index("i failed again")  # role-player shown as A
    assert second.index("i failed again") < second.index("I failed my exam")  # then as B
    # a judge that always answers A (position bias), then one that always finds the role-player
    answers = ["A", "A"] * 4 + ["A", "B"] * 4
    rows = win_rates(records(items, canned(answers).judge(items)), 200, 0)
    biased, faithful = rows
    assert (
        biased["roleplayer"] == "always_a"
        and biased["win_rate"] == 0.5
        and biased["position_consistent"] == 0
    )
    assert faithful["win_rate"] == 1.0 and faithful["position_consistent"] == 1 and faithful["pairs"] == 4


def test_table1_scales_to_ten_with_intervals() -> None:
    items = [i for k in range(6) for i in metric_items(f"esc_role:en:{k}", "en", "card", SEEKER)]
    judged = canned(["2", "1"] * 3).judge(items)  # metrics 0, 2, 4 get 2 and 1, 3, 5 get 1
    rows = {r["metric"]: r for r in table1(records(items, judged), 300, 0)}
    assert rows[metric_keys()[0]]["mean"] == 10.0 and rows[metric_keys()[1]]["mean"] == 5.0
    assert rows["average"]["mean"] == 7.5 and rows["average"]["n"] == 6


def test_roleplay_eval_end_to_end_with_the_tiny_model(tmp_path: Path) -> None:
    runs = []
    for name in ("esc_role", "gpt4_zero_shot"):  # two role-players (the tiny model under two names)
        out = tmp_path / name
        run_job(
            "evaluate",
            evaluate_config(out, "cards.languages=[en]", "cards.limit=2", f"roleplayer.name={name}"),
        )
        runs.append(str(out))
    # human dialogues for those cards: here two ESConv dialogues stand in for the cards' sources
    cards = [
        json.loads(line)["card_id"]
        for line in (Path(runs[0]) / "dialogues" / "tiny__esc_role__en.jsonl").open()
    ]
    human = tmp_path / "human.jsonl"
    dialogues = read_esconv_splits(data_dir(), ["valid"])[:2]
    human.write_text("".join(
        json.dumps({"card_id": c, "language": "en", "dialogue": [dict(m) for m in d.messages[1:]]}) + "\n"
        for c, d in zip(cards, dialogues, strict=True)
    ))  # fmt: skip
    args = ["+exp=rank/roleplay_eval", "judge=tiny", f"dialogues=[{runs[0]},{runs[1]}]",
            f"roleplay.human={human}", f"hydra.run.dir={tmp_path}/rank"]  # fmt: skip
    run = run_entry("rank.py", args)
    assert run.returncode == 0, run.stderr[-2000:]
    table = (tmp_path / "rank" / "table1.md").read_text()
    assert "| esc_role | en |" in table and "| gpt4_zero_shot | en |" in table and " [" in table
    wins = (tmp_path / "rank" / "winrates.md").read_text()
    assert wins.count("| en | 2 |") == 2  # each role-player: 2 pairs judged in both orders
    # the CSVs are the tables: each figure's text, then its value, interval and n
    with (tmp_path / "rank" / "winrates.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["pairs"] for r in rows] == ["2", "2"] and all(
        r["win rate vs human [95% CI] n"] == "2" for r in rows
    )
    with (tmp_path / "rank" / "table1.csv").open() as fh:
        assert {r["role-player"] for r in csv.DictReader(fh)} == {"esc_role", "gpt4_zero_shot"}
    lines = (tmp_path / "rank" / "scores" / "roleplay__tiny.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 2 * (6 + 2)  # 2 role-players x 2 cards x (6 metrics + 2 orders)
    assert {json.loads(line)["prompt"]["style"] for line in lines} == {"roleplay"}  # not the rubric's
    again = run_entry("rank.py", args)  # a rerun asks nothing again
    assert again.returncode == 0 and len(
        (tmp_path / "rank" / "scores" / "roleplay__tiny.jsonl").read_text().splitlines()
    ) == len(lines)
    assert "Role-play metrics" in run.stdout and "Against the human dialogue" in run.stdout
    # other questions (here: more of the human dialogue shown) do not resume the folder's judgments
    other = run_entry("rank.py", [*args, "roleplay.turns=3"])
    assert other.returncode != 0 and "roleplay" in other.stderr and "settings" in other.stderr


def test_a_role_play_record_checks_its_scale() -> None:
    good = {"dialogue_id": "a:en:1", "dimension": "humanoid", "language": "en", "judge": "j", "prompt": {},
            "status": "valid", "score": 2}  # fmt: skip
    assert RoleplayRecord.from_dict(good).score == 2
    with pytest.raises(ValueError, match=r"one of \(0, 1\), got 2"):
        RoleplayRecord.from_dict({**good, "dimension": PAIRWISE})
    with pytest.raises(ValueError, match="unknown role-play question"):
        RoleplayRecord.from_dict({**good, "dimension": "empathy"})
