"""rank.py mode=robustness (issue 65): a scripted role-player that plays every hard profile exactly (one
it ignores on purpose) against two scripted targets with planted weaknesses (`fragile` collapses when
the seeker resists, `steady` does not), judged by a scripted judge that scores replies by their markers
and answers an adherence question "yes" exactly where the seeker message carries that profile's
marker: the mode recovers the planted drops, the rank change and the adherence, "not played" for the
ignored profile. The tiny judge's run resumes after SIGKILL with identical outputs; the tiny model's
evaluate.py -> rank.py run writes the changes, adherence, run log and report page; bad inputs are one
error line each."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.chat.settings import BackendSettings
from esc.dialogues.record import Dialogue, Turn, profiled_id
from esc.dialogues.store import read_dialogues
from esc.prompts.registry import LANGUAGES
from esc.prompts.seekers import COOPERATIVE, instruction, profile_names, record_identity
from esc.reports.result import read_result, result_path
from esc.reports.runlog import read_run_log
from esc.scoring.judge import VALID, Judge, JudgeAnswer, JudgeSettings, ScoreItem, register_judge
from esc.scoring.rubrics import DIMENSION_KEYS, TABLE_2_ORDER, dimension
from esc.tasks.robustness.adherence import YES, hard_profiles
from esc.tasks.robustness.report import NOT_PLAYED, PLAYED
from tests.helpers import compose, evaluate_config, kill_entry_when, requires_data, run_entry, run_job

HARD = hard_profiles()
RESISTANT = "resistant"  # the profile the fragile target breaks under
IGNORED = [p for p in HARD if p != RESISTANT][-1]  # the profile the scripted role-player does not play
MARKER = {p: f"<{p.upper()}>" for p in HARD}  # what a seeker message playing the profile carries
DAY = re.compile(r"\(day (\d)\)")
TARGETS = ("fragile", "steady")
# the planted targets' replies and the score the planted judge gives each (every dimension)
REPLY = {"fragile": "FRAGILE: that sounds so hard; you could try one small step.", "steady": "STEADY: I see."}
COLLAPSE = "COLLAPSE: fine, forget it."
SCORE = {"FRAGILE": 4, "STEADY": 3, "COLLAPSE": 0}


def _day(system: str) -> int:
    """A number 0-3 of the role card alone (the prompt without any profile's line, whitespace aside):
    the same for a card whatever the profile, different between cards."""
    text = system
    for p in HARD:
        for language in LANGUAGES:
            text = text.replace(instruction(p, language), "")
    return int(hashlib.sha256(re.sub(r"\s+", "", text).encode()).hexdigest()[:8], 16) % 4


@register_backend("profile_player")
class ProfilePlayer(ChatBackend):
    """A role-player that reads the profile line of its system prompt and plays it exactly: its k-th
    message carries the profile's marker unless (day + k) % 4 == 0 (a card's share varies), and says
    the card's day; the cooperative seeker and the `ignore`d profile carry no marker."""

    runs_in_process = True

    class Settings(BackendSettings):
        ignore: str = IGNORED

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.ignore = settings.ignore

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        replies = []
        for messages in batch:
            system = messages[0]["content"]
            playing = [p for p in HARD if any(instruction(p, lang) in system for lang in LANGUAGES)]
            day, k = _day(system), 1 + sum(m["role"] == "assistant" for m in messages)
            marker = ""
            if playing and playing[0] != self.ignore and (day + k) % 4:
                marker = f"{MARKER[playing[0]]} "
            replies.append(
                Reply(f"{marker}I am not sure about this (day {day}).", "stop", completion_tokens=8)
            )
        return replies

    def identity(self) -> dict[str, Any]:
        return {"kind": "profile_player", "ignore": self.ignore}


@register_backend("planted_target")
class PlantedTarget(ChatBackend):
    """`fragile` answers warmly, but collapses on the k-th reply when the seeker's message resists and
    (day + k) % 3 != 0; `steady` answers the same plain way whatever the seeker does."""

    runs_in_process = True

    class Settings(BackendSettings):
        behaviour: str

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.behaviour = settings.behaviour

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        replies = []
        for messages in batch:
            last = messages[-1]["content"]
            found = DAY.search(last)
            day, k = (int(found.group(1)) if found else 0), sum(m["role"] == "user" for m in messages)
            resists = MARKER[RESISTANT] in last
            collapse = self.behaviour == "fragile" and resists and (day + k) % 3 != 0
            replies.append(
                Reply(COLLAPSE if collapse else REPLY[self.behaviour], "stop", completion_tokens=8)
            )
        return replies

    def identity(self) -> dict[str, Any]:
        return {"kind": "planted_target", "behaviour": self.behaviour}


@register_judge("planted_robustness")
class PlantedJudge(Judge):
    """Scores a dialogue on every dimension by its replies' markers (the rounded mean of FRAGILE 4,
    STEADY 3, COLLAPSE 0, an unmarked reply 2); answers a profile's adherence question "yes" exactly
    where the seeker message judged carries that profile's marker."""

    class Settings(JudgeSettings):
        prompt: str = "official"

    def __init__(self, settings: Settings, config_key: str = "judge") -> None:
        self.name, self.prompt = settings.name, settings.prompt

    def _score(self, item: ScoreItem) -> int:
        replies = [text for role, text in item.lines[1:] if role == "assistant"]
        return round(sum(SCORE.get(r.split(":")[0], 2) for r in replies) / len(replies))  # unmarked: 2

    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        out = []
        for item in items:
            if item.messages is None:
                out.append(JudgeAnswer(VALID, self._score(item)))
            else:  # an adherence question: the profile is the item's dimension, the message its last line
                out.append(
                    JudgeAnswer(VALID, YES if MARKER[item.dimension] in item.lines[-1][1] else 1 - YES)
                )
        return out

    def identity(self) -> dict[str, Any]:
        return {"kind": "planted_robustness", "name": self.name}


# --- the planted run ------------------------------------------------------------------------------


def _play(out: Path, profile: str, target: str, cards: int = 8) -> Path:
    cfg = evaluate_config(
        out, f"seeker={profile}", f"target.name={target}", "roleplayer.name=scripted", "dialogue.turns=4",
        f"cards.limit={cards}", "cards.languages=[en,zh]",
        roleplayer_backend={"kind": "profile_player"},
        target_backend={"kind": "planted_target", "behaviour": target},
    )  # fmt: skip
    run_job("evaluate", cfg)
    return out


def _rank(out: Path, folders: Sequence[Path], *overrides: str, judge: dict | None = None) -> Any:
    from omegaconf import open_dict

    cfg = compose(
        ["mode=robustness", f"dialogues=[{','.join(map(str, folders))}]", "robustness.bootstrap=400",
         "scoring.progress=false", "cache.enabled=false", *overrides],
        output_dir=out, config_name="rank",
    )  # fmt: skip
    with open_dict(cfg):
        cfg.judge = judge or {"kind": "planted_robustness", "name": "planted"}
    return run_job("rank", cfg)


def _table(out: Path, name: str) -> list[dict[str, Any]]:
    """A table of robustness.result.json as rows of {column: cell}."""
    [table] = [t for t in read_result(result_path(out, "robustness")).tables() if t.name == name]
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows]


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, list[Path]]:
    """Every profile played by the scripted role-player with both targets (8 cards per language), and
    one mode=robustness run over all of them."""
    root = tmp_path_factory.mktemp("robustness")
    folders = [_play(root / f"{p}-{t}", p, t) for p in profile_names() for t in TARGETS]
    result = _rank(root / "rank", folders)
    return root / "rank", result, folders


@requires_data
def test_the_scripted_role_player_plays_each_profile_and_the_records_name_it(planted) -> None:
    _, _, folders = planted
    for folder in folders:
        profile = folder.name.split("-")[0]
        for path in (folder / "dialogues").glob("*.jsonl"):
            for d in read_dialogues(path):
                assert d.status == "complete" and d.seeker == record_identity(profile, d.language)
                marked = [t.text for t in d.turns if t.speaker == "roleplayer" and "<" in t.text]
                if profile in (COOPERATIVE, IGNORED):
                    assert not marked
                else:
                    assert marked and all(m.startswith(MARKER[profile]) for m in marked)


@requires_data
def test_the_planted_drops_are_recovered(planted) -> None:
    """fragile's change with the resistant seeker is below 0 (its interval excludes 0) on the Average
    and every dimension; steady's interval holds 0 everywhere; nothing moves with another profile."""
    out, result, _ = planted
    rows = _table(out, "change from the cooperative seeker")
    names = ["Average", *(dimension(k).paper_name for k in TABLE_2_ORDER)]
    assert {(r["Lang"].text, r["Target"].text, r["Profile"].text) for r in rows} == {
        (lang, t, p) for lang in LANGUAGES for t in TARGETS for p in HARD
    }
    for row in rows:
        target, profile = row["Target"].text, row["Profile"].text
        for name in names:
            cell = row[name]
            assert cell.low is not None and cell.high is not None, (target, profile, name, cell.text)
            if target == "fragile" and profile == RESISTANT:
                assert cell.high < 0, (name, cell.text)  # the planted collapse, told apart from 0
            else:
                assert cell.low <= 0 <= cell.high, (target, profile, name, cell.text)
        assert row["cards"].text == "8" and row["left out"].text == "none"
    assert result.changes == len(rows)
    # each target's largest drop: fragile's is with the resistant seeker; steady has none
    drops = {(r["Lang"].text, r["Target"].text): r for r in _table(out, "largest drop")}
    for lang in LANGUAGES:
        assert drops[(lang, "fragile")]["Profile"].text == RESISTANT
        assert drops[(lang, "fragile")]["Change"].high < 0
        assert drops[(lang, "steady")]["Profile"].text == "none"


@requires_data
def test_the_ranking_changes_under_the_resistant_seeker(planted) -> None:
    """fragile is ahead of steady with the cooperative seeker (or tied), behind it with the resistant one."""
    out, _, _ = planted
    ranks = {
        (r["Lang"].text, r["Profile"].text, r["Target"].text): r for r in _table(out, "ranking per profile")
    }
    for lang in LANGUAGES:
        coop = {t: int(ranks[(lang, COOPERATIVE, t)]["Rank"].text) for t in TARGETS}
        hard = {t: int(ranks[(lang, RESISTANT, t)]["Rank"].text) for t in TARGETS}
        assert coop["fragile"] <= coop["steady"] and hard["fragile"] > hard["steady"], (coop, hard)
        assert ranks[(lang, RESISTANT, "fragile")]["Rank change"].text.startswith("down")
        for profile in HARD:
            if profile != RESISTANT:
                assert ranks[(lang, profile, "fragile")]["Rank change"].text == "same"
    said = [
        line for line in (out / "robustness.md").read_text().splitlines() if "the ranking changes:" in line
    ]
    assert len(said) == len(LANGUAGES), said  # the resistant seeker's, and no other profile's
    assert all(f"with the {RESISTANT} seeker: " in line and "fragile 1 -> 2" in line for line in said), said


@requires_data
def test_adherence_is_played_where_planted_and_not_for_the_ignored_profile(planted) -> None:
    out, result, _ = planted
    adherence = {(r["Lang"].text, r["Profile"].text): r for r in _table(out, "adherence")}
    assert set(adherence) == {(lang, p) for lang in LANGUAGES for p in HARD}
    for (_, profile), row in adherence.items():
        assert row["yes with the cooperative seeker"].value == 0.0  # no cooperative message carries a marker
        if profile == IGNORED:
            assert row["Verdict"].text == NOT_PLAYED and row["yes with the profile"].value == 0.0
        else:
            assert row["Verdict"].text == PLAYED and row["difference (pp)"].low > 0
            # 8 cards x 4 messages, the marker left out where (day + k) % 4 == 0: one message per card
            assert row["yes with the profile"].value == pytest.approx(0.75)
    assert sorted(result.not_played) == sorted(f"{lang}/scripted/{IGNORED}" for lang in LANGUAGES)
    # every figure of the ignored profile says so: the column of each table, the sentences
    for name in ("change from the cooperative seeker", "scores per profile", "ranking per profile"):
        for row in _table(out, name):
            expected = {COOPERATIVE: "baseline", IGNORED: NOT_PLAYED}.get(row["Profile"].text, PLAYED)
            assert row["Adherence"].text == expected, (name, row["Profile"].text)
    lead = (out / "robustness.md").read_text()
    assert lead.count(f"with the {IGNORED} seeker (NOT PLAYED") == len(LANGUAGES) * len(TARGETS)


@requires_data
def test_the_run_log_and_the_report_site_show_every_judgment(planted) -> None:
    """Two profiles' files of one name are kept apart: the run log's judgments name each dialogue by
    its profiled id, the adherence answers by seeker message; the site builds with every dialogue."""
    out, _, folders = planted
    log = read_run_log(out)
    dialogues = {
        profiled_id(path, d)
        for f in folders
        for path in (f / "dialogues").glob("*.jsonl")
        for d in read_dialogues(path)
    }
    judged = {j.dialogues[0] for j in log.judgments}
    assert judged == dialogues and len(dialogues) == len(profile_names()) * len(TARGETS) * 16
    scores = [j for j in log.judgments if j.turn is None]
    assert {j.key for j in scores} == set(DIMENSION_KEYS) and len(scores) == len(dialogues) * len(
        DIMENSION_KEYS
    )
    answers = [j for j in log.judgments if j.turn is not None]
    assert {j.key for j in answers} == set(HARD) and all(
        dict(j.detail) == {"message": "seeker"} for j in answers
    )
    assert {j.answer for j in answers} == {"yes", "no"}
    assert (out / "report" / "index.html").is_file()
    pages = list((out / "report" / "dialogues").rglob("*.html"))
    assert len(pages) == len(dialogues)
    assert any("rank-robustness" in p.name for p in (out / "report" / "runs").glob("*.html"))


# --- the tiny judge: resume after SIGKILL, bad inputs ---------------------------------------------


def _dialogue(card: int, profile: str, target: str = "bot") -> Dialogue:
    turns = [
        Turn("roleplayer", f"I cannot sleep ({profile}).", "stop"),
        Turn("target", "That sounds hard. You could try a walk.", "stop"),
        Turn("roleplayer", "I tried that already.", "stop"),
        Turn("target", "I hear you.", "stop"),
    ]
    meta = {} if profile == COOPERATIVE else {"seeker": record_identity(profile, "en")}
    return Dialogue(
        card, "en", "seeker", target, "sys", "Hello, how can I help?", None, turns, "complete", meta=meta
    )


def _write(
    folder: Path, profile: str, cards: Sequence[int] = (1, 2, 3), name: str = "bot__seeker__en"
) -> Path:
    path = folder / "dialogues" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(_dialogue(c, profile).to_dict()) + "\n" for c in cards))
    return folder


def test_a_hard_profiles_dialogue_scored_by_mode_score_is_found_on_the_site(tmp_path: Path) -> None:
    """mode=score names a resistant folder's dialogues `<stem>/<card>`, as always: the site still finds
    each one (by that id, which only it holds), with its judgments and its transcript."""
    from omegaconf import open_dict

    from esc.site.collect import collect

    folder = _write(tmp_path / "res", RESISTANT)
    out = tmp_path / "score"
    cfg = compose(
        ["mode=score", f"dialogues={folder}", "scoring.progress=false", "cache.enabled=false",
         "leaderboard.bootstrap=10", "leaderboard.breakdowns=false", "leaderboard.charts=false"],
        output_dir=out, config_name="rank",
    )  # fmt: skip
    with open_dict(cfg):
        cfg.judge = {"kind": "planted_robustness", "name": "planted"}
    run_job("rank", cfg)
    data = collect([out])
    assert sorted(data.entries) == [f"bot__seeker__en/{card}" for card in (1, 2, 3)]
    for entry in data.entries.values():
        assert (
            entry.dialogue is not None
            and entry.missing is None
            and entry.dialogue.seeker["name"] == RESISTANT
        )
        assert len(entry.judgments["score"]) == len(DIMENSION_KEYS)
    assert (out / "report" / "index.html").is_file()


def test_rank_py_robustness_on_the_tiny_judge_resumes_after_sigkill(tmp_path: Path) -> None:
    cards = range(1, 7)
    coop, resistant = (
        _write(tmp_path / "coop", COOPERATIVE, cards),
        _write(tmp_path / "res", RESISTANT, cards),
    )
    common = ["mode=robustness", "judge=tiny", f"dialogues=[{coop},{resistant}]", "scoring.chunk=2",
              "scoring.progress=false", "robustness.bootstrap=200", "dimensions=[empathy,overall]",
              "cache.enabled=false"]  # fmt: skip
    whole = run_entry("rank.py", [*common, f"hydra.run.dir={tmp_path / 'whole'}"])
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "killed"

    def lines() -> int:
        return sum(
            p.read_bytes().count(b"\n") for p in out.rglob("*.jsonl") if p.parent.parent.name != "report"
        )

    kill_entry_when("rank.py", [*common, f"hydra.run.dir={out}"], lambda: out.is_dir() and lines() >= 4)
    # killed mid-judging: 12 dialogues x 2 dimensions, 12 x 2 seeker messages x the resistant question
    assert not (out / "robustness.md").exists() and lines() < 24 + 24
    again = run_entry("rank.py", [*common, f"hydra.run.dir={out}"])
    assert again.returncode == 0, again.stderr[-3000:]
    for name in ("robustness.md", "robustness_changes.csv", "robustness_scores.csv", "robustness_ranks.csv",
                 "robustness_drops.csv", "robustness_adherence.csv"):  # fmt: skip
        assert (out / name).read_text() == (tmp_path / "whole" / name).read_text(), name
    assert (out / "run.json").is_file() and (out / "report" / "index.html").is_file()


def _one_error(tmp_path: Path, args: list[str], name: str) -> str:
    out = tmp_path / name
    done = run_entry(
        "rank.py", ["mode=robustness", "judge=tiny", "scoring.progress=false", *args, f"hydra.run.dir={out}"]
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert not (out / "scores").exists() and not (out / "adherence").exists()
    return lines[0]


def test_bad_inputs_are_one_error_line_each(tmp_path: Path) -> None:
    coop, resistant = _write(tmp_path / "coop", COOPERATIVE), _write(tmp_path / "res", RESISTANT)
    line = _one_error(tmp_path, [f"dialogues={resistant}"], "no_coop")
    assert "the cooperative seeker's dialogues are the baseline" in line and "seeker=cooperative" in line
    line = _one_error(tmp_path, [f"dialogues={coop}"], "no_hard")
    assert "only the cooperative seeker's dialogues" in line and RESISTANT in line
    other = _write(tmp_path / "other", COOPERATIVE, (7, 8))
    line = _one_error(tmp_path, [f"dialogues=[{other},{resistant}]"], "no_pairs")
    assert "no card" in line and "played by both the cooperative seeker and a hard profile" in line
    twin = _write(tmp_path / "twin", RESISTANT)
    line = _one_error(tmp_path, [f"dialogues=[{coop},{resistant},{twin}]"], "same_profile_same_name")
    assert "the same name" in line and f"({RESISTANT})" in line
    stale = tmp_path / "stale"
    _write(stale, RESISTANT)
    path = stale / "dialogues" / "bot__seeker__en.jsonl"
    records = [json.loads(x) for x in path.read_text().splitlines()]
    records[1]["meta"]["seeker"]["version"] = 99
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    line = _one_error(tmp_path, [f"dialogues=[{coop},{stale}]"], "stale_version")
    assert "line 2" in line and "resistant (version 99)" in line and "version 1" in line
    line = _one_error(tmp_path, [f"dialogues=[{coop},{resistant}]", "robustness.bootstrap=50"], "few")
    assert "robustness.bootstrap" in line


# --- the tiny model, end to end (issue 65's "Done when") ------------------------------------------


@requires_data
def test_evaluate_then_rank_on_the_tiny_model_writes_changes_adherence_run_log_and_report(
    tmp_path: Path,
) -> None:
    folders = []
    for profile in (COOPERATIVE, RESISTANT):
        out = tmp_path / profile
        played = run_entry(
            "evaluate.py",
            ["roleplayer=tiny", "target=tiny", f"seeker={profile}", "cards.limit=3", "cards.languages=[en]",
             "dialogue.turns=2", "cache.enabled=false", "engine.progress=false", f"hydra.run.dir={out}"],
        )  # fmt: skip
        assert played.returncode == 0, played.stderr[-3000:]
        [record] = list(read_dialogues(out / "dialogues" / "tiny__tiny__en.jsonl"))[:1]
        assert record.seeker == record_identity(profile, "en")
        folders.append(out)
    out = tmp_path / "rank"
    done = run_entry(
        "rank.py",
        ["mode=robustness", "judge=tiny", f"dialogues=[{folders[0]},{folders[1]}]",
         "robustness.bootstrap=200", "cache.enabled=false", "scoring.progress=false", f"hydra.run.dir={out}"],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [change] = _table(out, "change from the cooperative seeker")
    assert change["Profile"].text == RESISTANT and change["Average"].low is not None
    [adherence] = _table(out, "adherence")
    assert adherence["Verdict"].text in (PLAYED, NOT_PLAYED) and adherence["cards"].text == "3"
    log = read_run_log(out)
    assert log.header.task == "robustness" and {j.key for j in log.judgments} >= {RESISTANT}
    assert (out / "robustness_changes.csv").read_text().count("\n") == 2
    assert (out / "report" / "index.html").is_file()
    assert any((out / "report" / "runs").glob("*robustness*.html"))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["site"].endswith("index.html")
