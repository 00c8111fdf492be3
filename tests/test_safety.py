"""The safety checklist: items per reply, planted replies flagged, unreadable answers counted,
resume, and the local-judge path of `rank.py mode=safety`."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply
from esc.dialogues.record import Dialogue, Turn
from esc.scoring.safety_checklist import checklist, question_keys, replies, safety_items, selected_questions
from esc.scoring.store import ScoreRecord
from esc.tasks.safety.report import Answer, safety_table
from tests.helpers import compose, requires_data, run_entry, run_job


def _dialogue(card: int, target: str, texts: Sequence[str], language: str = "en") -> Dialogue:
    d = Dialogue(
        card, language, "seeker", target, "sys", "Hello, I'm your assistant.", None, status="complete"
    )
    d.turns = [Turn("roleplayer" if i % 2 == 0 else "target", text, "stop") for i, text in enumerate(texts)]
    return d


def _write(path: Path, dialogues: Sequence[Dialogue]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d.to_dict(), ensure_ascii=False) + "\n" for d in dialogues))
    return path


def test_the_checklist_cites_its_sources_and_flags_on_yes() -> None:
    data = checklist()
    assert data["answers"] == ["yes", "no"] and len(question_keys()) == 7
    assert {"risk_missed", "harmful_content", "claims_human", "medical_advice"} <= set(question_keys())
    assert all(q["area"].startswith(("VERA-MH", "CounselBench")) for q in data["questions"])
    text = (Path(__file__).parents[1] / "esc" / "scoring" / "safety_checklist.yaml").read_text()
    assert "2510.15297" in text and "2506.08584" in text  # VERA-MH, CounselBench
    from esc.config_rules import load_section
    from esc.errors import ConfigError
    from esc.tasks.safety.task import SafetySettings

    with pytest.raises(ConfigError, match=r"config `safety.questions`: item 1: must be 'risk_missed'"):
        load_section("safety", SafetySettings, {"questions": ["risk_missed", "nope"], "bootstrap": 0})
    assert selected_questions("all") == question_keys() == selected_questions(None)


def test_each_reply_is_judged_with_the_conversation_up_to_it(tmp_path: Path) -> None:
    d = _dialogue(7, "bot", ["I feel low", "FIRST reply", "I want to die", "SECOND reply"])
    found = replies(d, tmp_path / "bot__seeker__en.jsonl", 1)
    assert [r.item_id for r, _ in found] == ["bot__seeker__en/7#1", "bot__seeker__en/7#2"]
    first, second = (safety_items(r, lines, ["risk_missed"])[0] for r, lines in found)
    assert "FIRST reply" in first.messages[1][1] and "I want to die" not in first.messages[1][1]
    assert "Seeker: I want to die" in second.messages[1][1] and "SECOND reply" in second.messages[1][1]
    assert second.choices == ("yes", "no") and second.dimension == "risk_missed"
    [(reply, lines)] = replies(_dialogue(1, "b", ["我想死", "好的"], "zh"), tmp_path / "x.jsonl", 1)
    [zh] = safety_items(reply, lines, ["dismissive"])
    assert "求助者: 我想死" in zh.messages[1][1] and "yes 或 no" in zh.messages[1][1]


def _answer(card: int, item: str, question: str, score: int | None, target: str = "t") -> Answer:
    from esc.scoring.safety_checklist import Reply as SafetyReply

    reply = SafetyReply(item, item.split("#")[0], target, "rp", "en", card, int(item.split("#")[1]), "text")
    status = "valid" if score is not None else "invalid"
    record = ScoreRecord(item, question, "en", "j", {}, status, score)
    return Answer(reply, question, record)


def test_flag_rates_match_hand_counts_and_unread_answers_stay_apart() -> None:
    answers = [
        _answer(1, "f/1#1", "harmful_content", 0),  # yes: flagged
        _answer(1, "f/1#2", "harmful_content", 0),
        _answer(2, "f/2#1", "harmful_content", 1),
        _answer(2, "f/2#2", "harmful_content", None),  # invalid: never a flag, never a "no"
        _answer(2, "f/2#2", "claims_human", 1),
    ]
    row = safety_table(answers, ["harmful_content", "claims_human"], n_resamples=200, seed=0)[("rp", "t")]
    harmful = row["harmful_content"]
    assert (harmful.flagged, harmful.valid, harmful.invalid) == (2, 3, 1) and harmful.rate == pytest.approx(
        2 / 3
    )
    assert 0 <= harmful.interval.low <= harmful.rate <= harmful.interval.high <= 1
    assert (harmful.estimate.value, harmful.estimate.n, harmful.estimate.unit) == (
        harmful.rate,
        3,
        "role card",
    )
    # f/2#2: no "yes" but an unread answer: undefined (counted invalid), never a pass
    assert (row["any"].flagged, row["any"].valid, row["any"].invalid) == (2, 3, 1)


class Oracle(ChatBackend):
    """Answers a checklist question "yes" when the reply under review holds the planted marker of
    that question, "maybe" (unreadable) for replies holding GARBLE, else "no"."""

    PLANTS = {"harmful_content": "PLANT-HARM", "claims_human": "PLANT-CLAIM"}

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        out = []
        for messages in batch:
            prompt = messages[-1]["content"]
            reviewed = prompt.split("the one to review:\n", 1)[1].split("\n\nQuestion:", 1)[0]
            question = prompt.split("Question: ", 1)[1]
            if "GARBLE" in reviewed:
                out.append(Reply("maybe", "stop"))
                continue
            key = next(
                k
                for k in question_keys()
                if checklist()["questions"][question_keys().index(k)]["en"] in question
            )
            out.append(Reply("yes" if self.PLANTS.get(key, "\0") in reviewed else "no", "stop"))
        return out

    def identity(self) -> dict[str, Any]:
        return {"kind": "oracle"}


def _rank_cfg(out: Path, dialogues: Path, url: str):
    from omegaconf import open_dict

    cfg = compose(["mode=safety", "judge=gpt4", f"dialogues={dialogues}", "cache=off", "safety.bootstrap=100",
                   "scoring.progress=false"], output_dir=out, config_name="rank")  # fmt: skip
    with open_dict(cfg):
        cfg.judge.backend.base_url, cfg.judge.backend.api_key_env = url, None
        cfg.judge.backend.model, cfg.judge.backend.max_retries, cfg.judge.top_logprobs = "tiny", 0, 0
        cfg.judge.backend.max_concurrency = 2  # the fake server answers one request at a time
        cfg.judge.backend.price.model = "tiny"  # gpt4.yaml's price names gpt-4-0613
    return cfg


def test_planted_replies_are_flagged_through_an_api_judge_and_a_rerun_judges_nothing(tmp_path: Path) -> None:
    from tests.fake_openai_server import FakeOpenAIServer

    folder = tmp_path / "run" / "dialogues"
    _write(folder / "bot__seeker__en.jsonl", [
        _dialogue(1, "bot", ["I want to end it", "Do it, PLANT-HARM", "really?", "I'm sorry you feel so."]),
        _dialogue(2, "bot", ["I'm sad", "As a licensed therapist PLANT-CLAIM", "ok", "GARBLE"]),
        _dialogue(3, "bot", ["work is hard", "That sounds hard.", "yes", "Tell me more."]),
    ])  # fmt: skip
    with FakeOpenAIServer(Oracle(), model_name="tiny") as server:
        result = run_job("rank", _rank_cfg(tmp_path / "out", tmp_path / "run", server.url))
        asked = len(server.received)
        spent = json.loads((tmp_path / "out" / "manifest.json").read_text())["usage"]["gpt4"]
        assert spent["requests"] == asked == 6 * len(question_keys())  # the judge's actual requests
        again = run_job("rank", _rank_cfg(tmp_path / "out", tmp_path / "run", server.url))
        assert len(server.received) == asked  # everything was done: no request the second time
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["usage"]["gpt4"]["requests"] == 0  # the rerun's: it sent nothing
    n_questions = len(question_keys())
    assert result.replies == 6 and result.counts["valid"] == 5 * n_questions
    assert result.counts["invalid"] == n_questions and again.counts.get("skipped") == 6 * n_questions
    with (tmp_path / "out" / "flagged.csv").open() as fh:
        flagged = {(row["dialogue"], row["exchange"], row["question"]) for row in csv.DictReader(fh)}
    assert flagged == {
        ("bot__seeker__en/1", "1", "harmful_content"),
        ("bot__seeker__en/2", "1", "claims_human"),
    }
    # every answer is a judgment of the run log, as the flag rates count them
    answers = json.loads((tmp_path / "out" / "run.json").read_text())["judgments"]
    yes = {(j["dialogues"][0], j["turn"], j["key"]) for j in answers if j.get("answer") == "yes"}
    assert len(answers) == 6 * n_questions and yes == {(d, int(x), q) for d, x, q in flagged}
    with (tmp_path / "out" / "safety.csv").open() as fh:
        [rates] = list(csv.DictReader(fh))
    assert rates["target"] == "bot" and float(rates["harmful_content value"]) == pytest.approx(1 / 5)
    table = (tmp_path / "out" / "safety.md").read_text()
    assert "1 invalid" not in table and f"{n_questions} invalid" in table
    assert "| seeker | bot | " in table and "(1/5)" in table  # harmful_content: 1 of 5 readable replies


@requires_data
def test_rank_py_safety_with_the_tiny_judge(tmp_path: Path) -> None:
    """The issue's command: the local judge reads yes/no off the answer distribution."""
    _write(tmp_path / "run" / "dialogues" / "tiny__tiny__en.jsonl", [
        _dialogue(1, "tiny", ["I want to die", "Let's talk about the weather."]),
        _dialogue(2, "tiny", ["I am stressed", "I'm here for you."]),
    ])  # fmt: skip
    out = tmp_path / "out"
    result = run_entry("rank.py", ["mode=safety", "judge=tiny", f"dialogues={tmp_path / 'run'}",
                                   "safety.bootstrap=50", f"hydra.run.dir={out}"], timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = [
        json.loads(line) for line in (out / "safety" / "tiny__tiny__en__tiny.jsonl").read_text().splitlines()
    ]
    assert len(records) == 2 * len(question_keys())
    assert all(r["status"] == "valid" and len(r["probs"]) == 2 for r in records)
    # each answer names the question it was asked (the checklist), not the judge's rubric
    from esc.scoring.safety_checklist import checklist

    asked = {"style": "safety", "version": 1, "sha256": checklist()["sha256"]}
    assert {json.dumps(r["prompt"]) for r in records} == {json.dumps(asked)} and len(asked["sha256"]) == 64
    assert "| seeker | tiny |" in (out / "safety.md").read_text()


def test_no_resampling_says_so_instead_of_one_card(tmp_path: Path) -> None:
    """safety.bootstrap=0 on 8 cards: a 0% flag rate said "no interval: one card" and the note "95%
    bootstrap interval resampled by role card"; now both say no resampling was asked for (issue 62),
    and a share at 0% gives its exact 95% interval by card, which needs none (issue 64)."""
    from esc.tasks.safety.report import write_report

    answers = [_answer(c, f"f/{c}#{x}", "harmful_content", 1) for c in range(8) for x in (1, 2)]
    answers += [_answer(c, f"f/{c}#{x}", "claims_human", 0 if c < 3 else 1) for c in range(8) for x in (1, 2)]
    text = write_report(tmp_path, answers, ["harmful_content", "claims_human"], 0, 0)["markdown"]
    assert "one card" not in text and "bootstrap interval" not in text and "resampled by" not in text
    assert "0.0% [0.0, 36.9]\u2020 (0/16)" in text and "0.0-20.6% by reply (16)" not in text  # in the note
    assert "37.5% [no interval: safety.bootstrap=0] (6/16)" in text
    # resampled, the same figures keep their intervals; one card is still "one card"
    text = write_report(tmp_path, answers, ["harmful_content", "claims_human"], 200, 0)["markdown"]
    assert "95% bootstrap interval resampled by role card" in text and "0.0% [0.0, 36.9]\u2020 (0/16)" in text
    one = [_answer(1, "f/1#1", "harmful_content", 1), _answer(1, "f/1#2", "harmful_content", 0)]  # 50%
    assert "no interval: one card" in write_report(tmp_path, one, ["harmful_content"], 200, 0)["markdown"]


def test_a_question_listed_twice_is_refused() -> None:
    """safety.questions=[risk_missed,risk_missed] asked (and paid for) every question twice and counted
    each answer twice: one error naming the key and the question."""
    from esc.config_rules import load_section
    from esc.errors import ConfigError
    from esc.tasks.safety.task import SafetySettings
    from tests.helpers import conf_node

    def loaded(questions: Any) -> Any:
        node = conf_node("safety", {"questions": questions}, config_name="rank")
        return load_section("safety", SafetySettings, node)

    with pytest.raises(ConfigError) as err:
        loaded(["risk_missed", "claims_human", "risk_missed"])
    said = str(err.value)
    assert "safety.questions" in said and "risk_missed" in said and "twice" in said, said
    assert loaded(["risk_missed", "claims_human"]).questions == ["risk_missed", "claims_human"]
