"""The seeker's emotion trajectory: reading a rating, rating while playing, adaptive stopping,
resume after kill -9, and the per-target report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esc.chat.base import GenerationSettings, Reply
from esc.chat.build import backend_settings, build_backend
from esc.chat.closed import FAILED, INVALID, VALID, ClosedAnswer, ClosedQuestion, resolve_method
from esc.dialogues.record import Dialogue, Turn
from esc.dialogues.store import read_dialogues
from esc.dialogues.trajectory import trajectory_figures
from esc.errors import ConfigError
from esc.evaluate.emotion import EmotionRater, rating_record
from esc.evaluate.engine import DialogueEngine, DialogueSettings, Side
from esc.evaluate.stopping import StopRule
from esc.prompts.emotion import RATINGS, observer_messages, parse_rating, roleplayer_messages, to_percent
from esc.tasks.trajectory.report import differences, rated_dialogues, target_rows
from tests.helpers import REPO_ROOT, requires_data, run_entry, run_job
from tests.scripted_backend import PlannedBackend


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("3 - they listened, but I still feel stuck", (3, "they listened, but I still feel stuck")),
        ("**7**", (7, None)),
        ("Emotion: 4/9 - a bit better", (4, "a bit better")),
        ("情绪：6，好一些了", (6, "好一些了")),
        ("５", (5, None)),  # full-width digit
        ("8\nthey got it", (8, "they got it")),
        ("7/9 - better", (7, "better")),
        ("7 out of 9", (7, None)),
    ],
)
def test_a_rating_is_read_with_its_reason(reply: str, expected: tuple) -> None:
    assert parse_rating(reply) == expected


@pytest.mark.parametrize(
    "reply",
    ["3-4", "35", "3.5", "3 or 4", "I feel 3", "", "about five", "10", "7/10", "7 out of 100", "6 of 10"],
)
def test_a_reply_without_one_rating_is_invalid(reply: str) -> None:
    assert parse_rating(reply) is None


def test_ratings_are_on_0_100() -> None:
    assert to_percent(0) == 0 and to_percent(9) == 100 and to_percent(4.5) == 50


def _dialogue(card: int, word: str, language: str = "en") -> Dialogue:
    return Dialogue(card, language, "seeker", "helper", f"You are {word}.", "Hello, how can I help?", None)


def test_the_aside_joins_the_last_user_turn_so_roles_alternate() -> None:
    after_reply = roleplayer_messages(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "opener"}], "en"
    )
    assert [m["role"] for m in after_reply] == ["system", "user"]
    assert after_reply[-1]["content"].startswith("opener\n\n[An aside")
    start = roleplayer_messages([{"role": "assistant", "content": "I feel low"}], "zh")
    assert start[-1]["role"] == "user" and "旁白" in start[-1]["content"]


def test_the_observer_reads_the_card_and_the_dialogue() -> None:
    messages = observer_messages("Problem: exams", [("assistant", "Hi"), ("user", "I failed")], "en")
    assert messages[0]["role"] == "system"
    assert "Problem: exams" in messages[1]["content"] and "Seeker: I failed" in messages[1]["content"]
    assert "Supporter: Hi" in messages[1]["content"]


def test_a_closed_question_parsed_from_replies_counts_invalid_and_failed_apart() -> None:
    backend = build_backend(
        backend_settings(
            {"kind": "planned", "plans": {"alpha": ["7 - better"], "beta": ["no idea"], "gamma": ["FAIL"]}}
        )
    )
    method = resolve_method(backend, "auto", "trajectory.method")
    question = ClosedQuestion(
        backend, RATINGS, method, parse_rating, max_new_tokens=64, top_logprobs=0, min_mass=0.0
    )
    assert question.method == "parse"
    prompts = [
        [{"role": "user", "content": f"{w}: on a scale from 0 to 9?"}] for w in ("alpha", "beta", "gamma")
    ]
    valid, invalid, failed = question.ask(prompts)
    assert (valid.status, valid.index, valid.reason) == (VALID, 7, "better")
    assert invalid.status == INVALID and invalid.raw == "no idea" and invalid.index is None
    assert failed.status == FAILED and failed.error == "planned failure"
    assert question.usage.requests == 3 and question.usage.errors == 1


def test_log_probabilities_give_the_expected_rating() -> None:
    class WithLogprobs(PlannedBackend):
        def generate(self, batch, settings: GenerationSettings) -> list[Reply]:
            assert settings.top_logprobs == 5
            top = {"6": -0.6931, "7": -0.6931}  # 0.5 each
            return [Reply("6 - ok", "stop", logprobs=[{"token": "6", "top": top}]) for _ in batch]

    question = ClosedQuestion(
        WithLogprobs(PlannedBackend.Settings(kind="planned", plans={})),
        RATINGS,
        "parse",
        parse_rating,
        max_new_tokens=64,
        top_logprobs=5,
        min_mass=0.0,
    )
    [answer] = question.ask([[{"role": "user", "content": "0 to 9"}]])
    assert answer.index == 6 and answer.expected == pytest.approx(6.5, abs=1e-3)
    record = rating_record(answer, "parse")  # a written answer's value is the stated digit
    assert record["value"] == to_percent(6) and record["expected"] == pytest.approx(to_percent(6.5), abs=0.01)


def test_a_distribution_needs_a_local_model() -> None:
    with pytest.raises(ConfigError, match="trajectory.method"):
        resolve_method(
            build_backend(backend_settings({"kind": "scripted"})), "distribution", "trajectory.method"
        )
    with pytest.raises(ConfigError, match="constrained"):
        resolve_method(
            build_backend(backend_settings({"kind": "scripted"})), "constrained", "trajectory.method"
        )


def test_an_invalid_distribution_keeps_its_mass() -> None:
    answer = ClosedAnswer.from_probabilities([0.001] * 10, min_mass=0.5)
    record = rating_record(answer, "distribution")
    assert record["status"] == INVALID and record["value"] is None and record["mass"] == pytest.approx(0.01)


def _engine(plans: dict[str, list[str]], turns: int, stop: StopRule | None, rater: str = "roleplayer"):
    seeker = build_backend(backend_settings({"kind": "planned", "plans": plans}))
    helper = build_backend(backend_settings({"kind": "scripted", "label": "helper"}))
    judge_backend = (
        seeker
        if rater == "roleplayer"
        else build_backend(backend_settings({"kind": "planned", "plans": plans}))
    )
    question = ClosedQuestion(
        judge_backend, RATINGS, "parse", parse_rating, max_new_tokens=64, top_logprobs=0, min_mass=0.0
    )
    cards = {(i, "en"): f"Problem: {w}" for i, w in enumerate(plans)}
    engine = DialogueEngine(
        Side("seeker", seeker, GenerationSettings()),
        Side("helper", helper, GenerationSettings()),
        DialogueSettings(turns=turns, context_policy="truncate_oldest"),
        rater=EmotionRater(rater, question, cards),
        stop=stop,
    )
    return engine, judge_backend


def test_each_target_reply_and_the_start_carry_a_rating() -> None:
    engine, _ = _engine({"alpha": ["5", "6", "7"]}, turns=2, stop=None)
    [dialogue] = engine.run_wave([_dialogue(0, "alpha")])
    assert dialogue.status == "complete" and len(dialogue.turns) == 4 and dialogue.stop_reason is None
    values = [t.emotion and t.emotion["value"] for t in dialogue.turns]
    assert values == [to_percent(5), to_percent(6), None, to_percent(7)]
    figures = trajectory_figures(dialogue)
    assert (figures.start, figures.final, figures.exchanges) == (to_percent(5), to_percent(7), 2)
    assert figures.change == pytest.approx(to_percent(2), abs=1e-3)


def test_adaptive_stop_follows_a_scripted_trajectory() -> None:
    """Success at the first rating >= 85, failure at the first <= 15, else all the turns."""
    plans = {
        "alpha": ["5", "6", "9", "9"],
        "beta": ["5", "1"],
        "gamma": ["5", "6", "5", "6"],
        "delta": ["5", "x"],
    }
    engine, _ = _engine(plans, turns=3, stop=StopRule(success=85, failure=15, min_turns=1))
    dialogues = engine.run_wave([_dialogue(i, w) for i, w in enumerate(plans)])
    ended = {d.system_prompt.split()[-1].rstrip("."): (d.stop_reason, len(d.turns) // 2) for d in dialogues}
    assert ended == {
        "alpha": ("success", 2),
        "beta": ("failure", 1),
        "gamma": ("max_turns", 3),
        "delta": ("max_turns", 3),  # an invalid rating ("x") decides nothing
    }
    assert all(d.status == "complete" for d in dialogues)


def test_streaming_dialogues_stop_the_same_way() -> None:
    plans = {"alpha": ["5", "6", "9"], "beta": ["5", "0"]}
    engine, _ = _engine(plans, turns=3, stop=StopRule(85, 15, 1))
    done = {
        d.card_id: (d.stop_reason, len(d.turns))
        for d in engine.run_streaming([_dialogue(0, "alpha"), _dialogue(1, "beta")], 2)
    }
    assert done == {0: ("success", 4), 1: ("failure", 2)}


def test_a_failed_rating_fails_the_dialogue_so_a_rerun_plays_it_again() -> None:
    engine, _ = _engine({"alpha": ["5", "FAIL"]}, turns=2, stop=None)
    [dialogue] = engine.run_wave([_dialogue(0, "alpha")])
    assert dialogue.status == "failed" and "emotion rating" in dialogue.error


def test_an_observer_rates_from_the_card_and_the_dialogue() -> None:
    engine, observer = _engine({"alpha": ["4", "6"]}, turns=1, stop=None, rater="observer")
    [dialogue] = engine.run_wave([_dialogue(0, "alpha")])
    assert [t.emotion["value"] for t in dialogue.turns] == [to_percent(4), to_percent(6)]
    asked = observer.calls[-1][0]
    assert "Problem: alpha" in asked[1]["content"] and "Seeker: seeker #" in asked[1]["content"]


def test_stop_thresholds_are_checked() -> None:
    """By the settings the rule comes from (`StopSettings`), before any work."""
    from esc.config_rules import load_section
    from esc.evaluate.stopping import StopSettings

    node = {"enabled": True, "success": 10, "failure": 20, "min_turns": 1}
    with pytest.raises(ConfigError, match=r"config `trajectory.stop.failure`: must be below"):
        load_section("trajectory.stop", StopSettings, node)
    with pytest.raises(
        ConfigError, match=r"config `trajectory.stop.min_turns`: must be greater than or equal"
    ):
        load_section("trajectory.stop", StopSettings, {**node, "failure": 5, "min_turns": 0})


def test_files_without_ratings_keep_their_old_fields() -> None:
    dialogue = _dialogue(0, "alpha")
    dialogue.turns.append(Turn("roleplayer", "hi", "stop"))
    data = dialogue.to_dict()
    assert "stop_reason" not in data and "emotion" not in data["turns"][0]
    dialogue.turns[0].emotion = {"value": 50.0, "status": "valid"}
    dialogue.stop_reason = "success"
    again = Dialogue.from_dict(json.loads(json.dumps(dialogue.to_dict())))
    assert again.turns[0].emotion == {"value": 50.0, "status": "valid"} and again.stop_reason == "success"


def _rated(card: int, target: str, values: list[float | None]) -> Dialogue:
    d = Dialogue(card, "en", "rp", target, "s", "o", None, status="complete")
    for i, value in enumerate(values):
        status = "valid" if value is not None else "invalid"
        if i:
            d.turns.append(Turn("roleplayer", "r", "stop"))
        d.turns.append(
            Turn(
                "roleplayer" if i == 0 else "target", "t", "stop", emotion={"value": value, "status": status}
            )
        )
    return d


def test_a_rating_point_left_unrated_counts_as_missing_and_invalid() -> None:
    """Issue 36: two target turns without a rating in a rated dialogue were not counted ("0 of 22
    invalid" instead of 24), and a dialogue whose final rating was missing kept its area."""
    dialogue = _rated(1, "supportive", [50, 60, 70, 80])
    dialogue.turns[4].emotion = None  # the target's 2nd reply (a middle point: bridged)
    dialogue.turns[6].emotion = None  # the target's 3rd and last reply: no final rating
    figures = trajectory_figures(dialogue)
    assert (figures.rated, figures.invalid, figures.missing) == (4, 2, 2)
    assert figures.points == ((0, 50.0), (1, 60.0)) and figures.final is None and figures.area is None
    [row] = target_rows(rated_dialogues([(dialogue, "a.jsonl")])[0], n_resamples=10)
    assert (row.invalid, row.ratings, row.missing) == (2, 4, 2)
    unrated = _rated(2, "supportive", [50, 60])
    for turn in unrated.turns:
        turn.emotion = None
    assert trajectory_figures(unrated).rated == 0  # a dialogue never rated has no missing points


def test_figures_and_paired_differences_match_hand_counts() -> None:
    # supportive: start 50, then 60, 70; dismissive: 50, 40, 30; card 2 has an invalid final rating
    dialogues = [
        _rated(1, "supportive", [50, 60, 70]),
        _rated(2, "supportive", [40, 50, None]),
        _rated(1, "dismissive", [50, 40, 30]),
        _rated(2, "dismissive", [40, 30, 20]),
    ]
    rated, unrated = rated_dialogues((d, f"{d.target}.jsonl") for d in dialogues)
    assert unrated == 0
    rows = {r.target: r for r in target_rows(rated, n_resamples=200, seed=0)}
    supportive, dismissive = rows["supportive"].means["change"], rows["dismissive"].means["change"]
    assert supportive.estimate.value == 20 and supportive.undefined == 1
    assert dismissive.estimate.value == -20 and dismissive.estimate.n == 2
    assert dismissive.estimate.unit == "role card"  # one dialogue per card: the cards are resampled
    e = dismissive.estimate
    assert (e.value, e.low, e.high, e.n, dismissive.undefined) == (-20, -20, -20, 2, 0)
    assert rows["supportive"].invalid == 1 and rows["supportive"].ratings == 6
    # area: trapezoids / span: (55 + 65) / 2 = 60 for card 1 supportive. Card 2's final rating is
    # invalid: its points (0,40),(1,50) span exchanges 0-1 of 0-2, so it has no area (issue 35: it got
    # 45, over a shorter span, and was counted as defined)
    area = rows["supportive"].means["area"]
    assert area.estimate.value == pytest.approx(60) and area.estimate.n == 1 and area.undefined == 1
    change = next(d for d in differences(rated, n_resamples=200) if d.metric == "change")
    assert (change.a, change.b) == ("dismissive", "supportive")  # sorted names
    assert change.mean.estimate.value == -40 and change.mean.estimate.n == 1 and change.mean.undefined == 1
    assert (change.a_higher, change.b_higher, change.shared) == (0, 1, 2)


@requires_data
def test_trajectory_run_killed_then_rerun_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """The issue's command on the tiny model; kill -9 after the first dialogue, rerun: every
    dialogue complete once, one rating per target reply plus the start, identical to a whole run."""
    common = [
        *("roleplayer=tiny", "target=tiny", "cards.limit=4", "cards.languages=[en]", "dialogue.turns=2"),
        *("trajectory.enabled=true", "engine.wave_size=1", "engine.progress=false", "cache.enabled=false"),
    ]
    whole = run_entry("evaluate.py", [*common, f"hydra.run.dir={tmp_path / 'whole'}"])
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "killed"
    path = out / "dialogues" / "tiny__tiny__en.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "evaluate.py", *common, f"hydra.run.dir={out}"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 1 <= path.read_bytes().count(b"\n") < 4, "kill came at the wrong moment"
    again = run_entry("evaluate.py", [*common, f"hydra.run.dir={out}"])
    assert again.returncode == 0, again.stderr[-3000:]

    def rows(p: Path) -> list[dict]:
        return [
            {
                **d.to_dict(),
                "turns": [
                    {k: v for k, v in t.items() if k not in ("latency_s", "cached")}
                    for t in d.to_dict()["turns"]
                ],
            }
            for d in read_dialogues(p)
        ]

    resumed = rows(path)
    assert resumed == rows(tmp_path / "whole" / "dialogues" / "tiny__tiny__en.jsonl")
    assert sorted(r["card_id"] for r in resumed) == sorted({r["card_id"] for r in resumed})  # no duplicate
    for row in resumed:
        assert len(row["turns"]) == 4
        rated = [i for i, t in enumerate(row["turns"]) if "emotion" in t]
        assert rated == [0, 1, 3] and all(row["turns"][i]["emotion"]["status"] == "valid" for i in rated)
        assert row["meta"]["trajectory"]["method"] == "distribution"

    report = run_entry("rank.py", ["mode=trajectory", f"dialogues={out}", "trajectory.bootstrap=50",
                                   f"hydra.run.dir={tmp_path / 'report'}"])  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    table = (tmp_path / "report" / "trajectory.md").read_text()
    assert "| tiny | tiny | 4 |" in table and (tmp_path / "report" / "charts" / "trajectory.png").is_file()


@requires_data
def test_stopping_without_a_trajectory_is_one_config_error(tmp_path: Path) -> None:
    result = run_entry(
        "evaluate.py",
        ["roleplayer=tiny", "target=tiny", "cards.limit=1", "trajectory.stop.enabled=true",
         f"hydra.run.dir={tmp_path / 'out'}"],
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "error: config `trajectory.stop.enabled`: needs trajectory.enabled=true" in result.stderr
        and not (tmp_path / "out" / "dialogues").exists()
    )


def test_the_transcript_shows_each_rating_and_why_the_dialogue_ended() -> None:
    from esc.dialogues.transcript import render_transcript

    engine, _ = _engine({"alpha": ["5 - unsure", "9 - much better", "x"]}, turns=3, stop=StopRule(85, 15, 1))
    [dialogue] = engine.run_wave([_dialogue(0, "alpha")])
    text = render_transcript(dialogue)
    assert "-> seeker feels 56/100 (unsure)" in text and "-> seeker feels 100/100 (much better)" in text
    assert "[ended: success]" in text


def test_a_report_refuses_ratings_made_differently_or_a_card_twice() -> None:
    from esc.errors import UserError

    a, b = _rated(1, "t", [50, 60]), _rated(2, "t", [50, 40])
    a.meta["trajectory"], b.meta["trajectory"] = {"rater": "roleplayer"}, {"rater": "observer"}
    with pytest.raises(UserError, match="rated differently"):
        rated_dialogues([(a, "a.jsonl"), (b, "b.jsonl")])
    with pytest.raises(UserError, match="card 1 .* twice"):
        rated_dialogues([(a, "a.jsonl"), (_rated(1, "t", [50, 60]), "c.jsonl")][:1] + [(a, "c.jsonl")])
    unrated = Dialogue(3, "en", "rp", "t", "s", "o", None, status="complete")
    _, left_out = rated_dialogues([(a, "a.jsonl"), (unrated, "a.jsonl")])
    assert left_out == 1


def test_no_stop_before_min_turns() -> None:
    engine, _ = _engine({"alpha": ["5", "9", "9", "9"]}, turns=3, stop=StopRule(85, 15, min_turns=2))
    [dialogue] = engine.run_wave([_dialogue(0, "alpha")])
    assert dialogue.stop_reason == "success" and len(dialogue.turns) == 4  # not after the first reply


@requires_data
def test_an_observer_rates_in_an_evaluate_run_and_stopping_is_another_fingerprint(tmp_path: Path) -> None:
    from omegaconf import open_dict

    from esc.errors import UserError
    from tests.helpers import evaluate_config

    def cfg(*overrides: str):
        c = evaluate_config(tmp_path / "out", "cards.languages=[en]", "cards.limit=1", "dialogue.turns=2",
                            "trajectory.enabled=true", "trajectory.rater=observer", *overrides,
                            target_backend={"kind": "scripted", "label": "helper"})  # fmt: skip
        with open_dict(c):
            c.trajectory.observer = {
                "name": "watcher",
                "backend": {"kind": "planned", "plans": {"": ["3", "6", "7"]}},
            }
        return c

    result = run_job("evaluate", cfg())
    assert result.counts["completed"] == 1
    [path] = (tmp_path / "out" / "dialogues").glob("*.jsonl")
    for dialogue in read_dialogues(path):
        assert [t.emotion and t.emotion["value"] for t in dialogue.turns] == [
            to_percent(3),
            to_percent(6),
            None,
            to_percent(7),
        ]  # the observer's planned answers, in turn
        assert dialogue.meta["trajectory"]["rater"] == "observer"
        assert dialogue.meta["trajectory"]["observer"]["kind"] == "planned"
    with pytest.raises(UserError, match="trajectory"):
        run_job("evaluate", cfg("trajectory.stop.enabled=true"))
