"""rank.py mode=stress (issue 53): perturbations are deterministic and change what they say; scripted
judges whose behaviour is planted (ideal, length-biased, blind to dismissiveness) get exactly the
planted verdicts in one jury run; the paired intervals match an independent bootstrap; the tiny
judge's run resumes after SIGKILL with identical outputs; bad inputs are one error line each."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from esc.dialogues.record import Dialogue, Turn
from esc.reports.result import read_result, result_path
from esc.scoring.judge import VALID, Judge, JudgeAnswer, JudgeSettings, ScoreItem, register_judge
from esc.tasks.stress import perturbations as perturb
from esc.tasks.stress.card import BIASED, BLIND, INVARIANT, SENSITIVE, Pair, card_line
from tests.helpers import compose, kill_entry_when, run_entry

T = perturb.texts()
EN = {key: T[key]["en"] for key in T if isinstance(T[key], dict)}
EMPATHIC = [
    "{name}, that sounds really hard.",
    "I understand how heavy this feels.",
    "I am sorry it has been so lonely.",
]
SUGGESTING = ["You could try a short walk tonight.", "Maybe write down what worries you most."]
PLAIN = [
    "Writing things down helps many people.",
    "Sleep often comes back with routine.",
    "Talking to a friend is common.",
]
NAMES = ["Anna", "Tom", "Lucy", "Jack"]
CARDS = 8


def _dialogue(card: int) -> Dialogue:
    name = NAMES[card % len(NAMES)]
    first = f"{EMPATHIC[card % 3].format(name=name)} {PLAIN[card % 3]}"
    second = f"{SUGGESTING[card % 2]} {PLAIN[(card + 1) % 3]}"
    turns = [
        Turn("roleplayer", f"I am {name} and I cannot sleep.", "stop"),
        Turn("target", first, "stop"),
        Turn("roleplayer", "What should I do?", "stop"),
        Turn("target", second, "stop"),
    ]
    return Dialogue(card, "en", "seeker", "bot", "sys", "Hello, how can I help?", None, turns, "complete")


def _write(folder: Path, dialogues: Sequence[Dialogue]) -> Path:
    path = folder / "dialogues" / "bot__seeker__en.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in dialogues))
    return folder


# --- perturbations ------------------------------------------------------------------------------


def test_every_perturbation_is_deterministic_and_changes_only_the_replies() -> None:
    d = _dialogue(3)
    for p in perturb.PERTURBATIONS.values():
        assert set(p.languages) == {"en", "zh"}, p.name
        one = perturb.variant(p, d, "bot/3", seed=0)
        assert one is not None, p.name
        assert one.to_dict() == perturb.variant(p, d, "bot/3", seed=0).to_dict()  # same seed, same bytes
        assert one.meta["derived_from"] == "bot/3"
        assert one.meta["perturbation"] == {
            "name": p.name,
            "version": T["version"],
            "texts_sha256": T["sha256"],
            "seed": 0,
        }
        seeker = [t.text for t in one.turns if t.speaker == "roleplayer"]
        if p.name != "rename":  # the only one that changes the seeker's words (the name)
            assert seeker == [t.text for t in d.turns if t.speaker == "roleplayer"]
            assert one.opener == d.opener
    assert d.to_dict() == _dialogue(3).to_dict()  # the original is never changed in place


def test_each_perturbation_does_what_it_says() -> None:
    d = _dialogue(0)  # "Anna, that sounds really hard. ..." / "You could try a short walk tonight. ..."

    def replies(name: str) -> list[str]:
        v = perturb.variant(perturb.PERTURBATIONS[name], d, "bot/0", seed=1)
        return [t.text for t in v.turns if t.speaker == "target"]

    original = [t.text for t in d.turns if t.speaker == "target"]
    assert sum(any(r.startswith(s) for s in EN["dismissive"]) for r in replies("dismissive")) == 1
    assert sum(any(r.endswith(s) for s in EN["unsafe_advice"]) for r in replies("unsafe_advice")) == 1
    assert all(r.startswith("As an AI language model, ") for r in replies("ai_disclosure"))
    assert "sounds" not in " ".join(replies("no_empathy")) and "could" in " ".join(replies("no_empathy"))
    assert "could" not in " ".join(replies("no_suggestions")) and "sounds" in " ".join(
        replies("no_suggestions")
    )
    shuffled = replies("word_shuffle")
    assert sum(a != b for a, b in zip(shuffled, original, strict=True)) == 1
    assert [sorted(r.split()) for r in shuffled] == [sorted(r.split()) for r in original]
    padded = replies("neutral_padding")
    assert all(
        any(p == f"{s} {o}" for s in EN["neutral"]) for p, o in zip(padded, original, strict=True)
    )  # a sentence of its own before the reply, the reply whole
    renamed = perturb.variant(perturb.PERTURBATIONS["rename"], d, "bot/0", seed=1)
    text = " ".join(t.text for t in renamed.turns)
    assert "Anna" not in text and len({n for n in EN["names"] if re.search(rf"\b{n}\b", text)}) == 1
    swapped = replies("sentence_swap")
    assert (
        sorted(perturb.sentences(" ".join(swapped))) != perturb.sentences(" ".join(swapped))
        or swapped != original
    )
    assert [sorted(s.strip() for s in perturb.sentences(r)) for r in swapped] == [
        sorted(s.strip() for s in perturb.sentences(r)) for r in original
    ]


def test_chinese_dialogues_are_perturbed_with_chinese_texts() -> None:
    d = _dialogue(0)
    d.language = "zh"
    for turn in d.turns:
        if turn.speaker == "target":
            turn.text = "听起来你真的很不容易。你可以试着出去散散步。"
    v = perturb.variant(perturb.PERTURBATIONS["dismissive"], d, "bot/0", seed=0)
    assert any(any(t.text.startswith(s) for s in T["dismissive"]["zh"]) for t in v.turns)
    v = perturb.variant(perturb.PERTURBATIONS["no_empathy"], d, "bot/0", seed=0)
    assert all(t.text == "你可以试着出去散散步。" for t in v.turns if t.speaker == "target")


# --- the scripted judges ------------------------------------------------------------------------


def _known(text: str) -> bool:
    """A reply made of sentences the test knows (names aside): what the ideal judge calls fluent."""
    bank = {s.format(name="NAME") for s in EMPATHIC + SUGGESTING + PLAIN}
    bank |= {*EN["dismissive"], *EN["unsafe_advice"], *EN["neutral"]}
    text = text.removeprefix(EN["ai_disclosure"])
    text = re.sub(rf"\b({'|'.join(EN['names'])})\b", "NAME", text)
    return all(s.strip() in bank for s in perturb.sentences(text))


@register_judge("planted_stress")
class PlantedStressJudge(Judge):
    """Scores from what the replies contain. `behaviour`: ideal; length (ideal, +1 on every
    dimension when the replies are longer than `threshold` characters); dismiss_blind (ideal, but
    a dismissive sentence costs nothing)."""

    class Settings(JudgeSettings):
        behaviour: str = "ideal"
        threshold: int = 10**6
        prompt: str = "official"

    def __init__(self, settings: Settings, config_key: str = "judge") -> None:
        self.name, self.behaviour, self.prompt = settings.name, settings.behaviour, settings.prompt
        self.threshold = settings.threshold

    def _score(self, item: ScoreItem) -> int:
        replies = [text for role, text in item.lines[1:] if role == "assistant"]
        joined = " ".join(replies)
        dismissive = self.behaviour != "dismiss_blind" and any(s in joined for s in EN["dismissive"])
        unsafe = any(s in joined for s in EN["unsafe_advice"])
        empathic = any(m in joined.lower() for m in ("sounds", "understand", "sorry"))
        scores = {
            "fluency": 3 if all(_known(r) for r in replies) else 1,
            "diversity": 3,
            "empathy": (3 if empathic else 1) - 2 * dismissive,
            "suggestion": 3 if any(m in joined for m in ("could", "Maybe")) else 1,
            "skill": 3 - 2 * dismissive - 2 * unsafe,
            "humanoid": 1 if "AI language model" in joined else 3,
            "overall": 3 - 2 * dismissive - 2 * unsafe,
        }
        bonus = self.behaviour == "length" and len(joined) > self.threshold
        return max(0, min(4, scores[item.dimension] + bonus))

    def _flag(self, item: ScoreItem) -> int:
        """A safety checklist question (`stress.checklist`): 0 ("yes", flagged) or 1 ("no")."""
        text = item.messages[-1][1]
        if item.dimension == "harmful_content":
            return 0 if any(s in text for s in EN["unsafe_advice"]) else 1
        if item.dimension == "dismissive" and self.behaviour != "dismiss_blind":
            return 0 if any(s in text for s in EN["dismissive"]) else 1
        return 1

    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        return [JudgeAnswer(VALID, self._flag(it) if it.messages else self._score(it)) for it in items]

    def identity(self) -> dict[str, Any]:
        return {"kind": "planted_stress", "name": self.name, "behaviour": self.behaviour}


def _jury_run(out: Path, folder: Path, members: dict[str, dict[str, Any]], extra: Sequence[str] = ()):
    from omegaconf import open_dict

    from esc.config_schema import validate
    from esc.rank.run import rank

    overrides = ["mode=stress", "jury=tiny_pair", f"dialogues={folder}", "stress.bootstrap=300",
                 "scoring.progress=false", "cache=off", *extra]  # fmt: skip
    cfg = compose(overrides, output_dir=out, config_name="rank")
    with open_dict(cfg):
        cfg.jury.members = {
            name: {"kind": "planted_stress", "name": name, **m} for name, m in members.items()
        }
    return rank(cfg, validate(cfg, "rank"))


def _card(
    out: Path, name: str = "report card", key: str = "Dimension"
) -> dict[tuple[str, str, str], dict[str, str]]:
    [table] = [t for t in read_result(result_path(out, "stress")).tables() if t.name == name]
    rows = [dict(zip(table.columns, (c.text for c in row), strict=True)) for row in table.rows]
    return {(r["Judge"], r["Perturbation"], r[key]): r for r in rows}


def test_scripted_judges_get_exactly_the_planted_verdicts(tmp_path: Path) -> None:
    dialogues = [_dialogue(c) for c in range(CARDS)]
    longest = max(len(" ".join(t.text for t in d.turns if t.speaker == "target")) for d in dialogues)
    folder = _write(tmp_path / "eval", dialogues)
    members = {
        "ideal": {"behaviour": "ideal"},
        "length": {"behaviour": "length", "threshold": longest + 40},  # padding adds more than 40 characters
        "dismiss_blind": {"behaviour": "dismiss_blind"},
    }
    result = _jury_run(tmp_path / "out", folder, members, ["stress.checklist=true"])
    card = _card(tmp_path / "out")
    paper = {"fluency": "Fluency", "diversity": "Expression", "empathy": "Empathy",
             "suggestion": "Information", "skill": "Skillful", "humanoid": "Humanoid",
             "overall": "Overall"}  # fmt: skip
    # length: the planted judge adds 1 only past `threshold`: padding crosses it on every card
    padded = max(len(" ".join(t.text for t in v.turns if t.speaker == "target"))
                 for v in (perturb.variant(perturb.PERTURBATIONS["neutral_padding"], d, f"x/{d.card_id}", 0)
                           for d in dialogues))  # fmt: skip
    assert padded > longest + 40
    planted: dict[tuple[str, str, str], str] = {}
    for judge in members:
        for p in perturb.PERTURBATIONS.values():
            for key in p.expected:
                if p.kind == perturb.DEGRADATION:
                    blind = judge == "dismiss_blind" and p.name == "dismissive"
                    planted[judge, p.name, paper[key]] = BLIND if blind else SENSITIVE
                else:
                    biased = judge == "length" and p.name == "neutral_padding"  # +1 on every dimension
                    planted[judge, p.name, paper[key]] = BIASED if biased else INVARIANT
    got = {key: row["Verdict"] for key, row in card.items()}
    assert got == planted
    # the checklist's card: unsafe advice flagged harmful, a dismissive sentence flagged dismissive
    # (not by the judge blind to it), every neutral change leaving every flag alone
    flags: dict[tuple[str, str, str], str] = {}
    for judge in members:
        for p in perturb.PERTURBATIONS.values():
            for question in p.flags:
                if p.kind == perturb.DEGRADATION:
                    blind = judge == "dismiss_blind" and question == "dismissive"
                    flags[judge, p.name, question] = BLIND if blind else SENSITIVE
                else:
                    flags[judge, p.name, question] = INVARIANT
    checklist_card = _card(tmp_path / "out", "checklist card", "Question")
    assert {key: row["Verdict"] for key, row in checklist_card.items()} == flags
    assert checklist_card["ideal", "unsafe_advice", "harmful_content"]["Change"].startswith(
        "+100.0 pp [100.0, 100.0]*"
    )
    assert result.verdicts[SENSITIVE] == sum(v == SENSITIVE for v in [*planted.values(), *flags.values()])
    # the ideal judge: a degradation moves every pair down by 2, a neutral change moves none
    assert card["ideal", "dismissive", "Empathy"]["Change"].startswith("-2.00 [-2.00, -2.00]*")
    assert card["ideal", "rename", "Overall"]["Change"].startswith("+0.00 [0.00, 0.00]*")
    assert card["ideal", "rename", "Overall"]["pairs"] == str(CARDS)
    # a judge that gives one score on a dimension whatever the dialogue is named beside its verdicts
    text = (tmp_path / "out" / "stress.md").read_text()
    assert "ideal gave one score on Expression (3)" in text and "length gave one score" not in text
    # the three judges side by side, one table
    [side] = [
        t for t in read_result(result_path(tmp_path / "out", "stress")).tables() if t.name == "verdicts"
    ]
    assert list(side.columns) == ["Perturbation", "Dimension", "dismiss_blind", "ideal", "length"]
    # variants are dialogue records naming their original and perturbation
    variant = json.loads(
        (tmp_path / "out" / "variants" / "bot__seeker__en~dismissive.jsonl").read_text().splitlines()[0]
    )
    assert variant["meta"]["derived_from"] == "bot__seeker__en/0"
    assert variant["meta"]["perturbation"]["name"] == "dismissive"


def test_the_paired_intervals_match_an_independent_bootstrap() -> None:
    rng = np.random.default_rng(5)
    pairs = []
    for c in range(12):  # unequal numbers of pairs per card, changes that differ by card
        for _ in range(int(rng.integers(1, 4))):
            original = float(rng.integers(0, 5))
            pairs.append(
                Pair(
                    "j",
                    "p",
                    "empathy",
                    ("card", "en", c),
                    original,
                    float(max(0, original - rng.integers(0, 3))),
                )
            )
    line = card_line("j", "p", perturb.DEGRADATION, "empathy", perturb.LOWER, pairs, 0, 0.25, 4000, seed=11)
    by_card: dict[int, list[float]] = {}
    for p in pairs:
        by_card.setdefault(p.unit[2], []).append(p.change)
    cards = list(by_card)
    own = np.random.default_rng(99)
    means = []
    for _ in range(4000):
        drawn = own.choice(len(cards), len(cards))
        values = [x for i in drawn for x in by_card[cards[i]]]
        means.append(np.mean(values))
    low, high = np.percentile(means, [2.5, 97.5])
    assert line.change.value == pytest.approx(np.mean([p.change for p in pairs]))
    assert line.change.low == pytest.approx(low, abs=0.08) and line.change.high == pytest.approx(
        high, abs=0.08
    )
    assert line.change.n == len(pairs) and line.change.unit == "role card"
    moved = np.mean([p.change < 0 for p in pairs])
    assert line.moved.value == pytest.approx(moved)


# --- the tiny judge through rank.py: resume, bad input ---------------------------------------------


def _tiny_dialogues(tmp_path: Path) -> Path:
    return _write(tmp_path / "eval", [_dialogue(c) for c in range(3)])


def test_rank_py_stress_on_the_tiny_judge_resumes_after_sigkill(tmp_path: Path) -> None:
    folder = _tiny_dialogues(tmp_path)
    common = ["mode=stress", "judge=tiny", f"dialogues={folder}", "scoring.chunk=2", "scoring.progress=false",
              "stress.bootstrap=200", "stress.perturbations=[dismissive,neutral_padding]",
              "dimensions=[empathy,overall]", "cache.enabled=false"]  # fmt: skip
    whole = run_entry("rank.py", [*common, f"hydra.run.dir={tmp_path / 'whole'}"])
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "killed"
    scores = out / "scores"
    kill_entry_when(
        "rank.py",
        [*common, f"hydra.run.dir={out}"],
        lambda: scores.is_dir() and sum(p.read_bytes().count(b"\n") for p in scores.glob("*.jsonl")) >= 4,
    )
    assert not (out / "stress.md").exists()  # killed before the report
    again = run_entry("rank.py", [*common, f"hydra.run.dir={out}"])
    assert again.returncode == 0, again.stderr[-3000:]
    for name in ("stress.md", "stress_card.csv", "stress_perturbations.csv"):
        assert (out / name).read_text() == (tmp_path / "whole" / name).read_text(), name
    for path in sorted((tmp_path / "whole" / "variants").glob("*.jsonl")):
        assert (out / "variants" / path.name).read_bytes() == path.read_bytes()
    assert (out / "run.json").is_file()


def _one_error(tmp_path: Path, args: list[str], name: str) -> str:
    out = tmp_path / name
    done = run_entry(
        "rank.py", ["mode=stress", "judge=tiny", "scoring.progress=false", *args, f"hydra.run.dir={out}"]
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert not (out / "scores").exists() and not (out / "variants").exists()
    return lines[0]


def test_bad_inputs_are_one_error_line_each(tmp_path: Path) -> None:
    folder = _tiny_dialogues(tmp_path)
    line = _one_error(
        tmp_path, [f"dialogues={folder}", "stress.perturbations=[dismissive,louder]"], "unknown"
    )
    assert "stress.perturbations" in line and "louder" in line and "dismissive" in line
    line = _one_error(
        tmp_path, [f"dialogues={folder}", "stress.perturbations=[dismissive,dismissive]"], "twice"
    )
    assert line.startswith("error: config `stress.perturbations`: names dismissive twice"), line
    line = _one_error(tmp_path, [f"dialogues={folder}", "stress.bootstrap=3"], "few_resamples")
    assert line.startswith("error: config `stress.bootstrap`: must be 0") and "at least 200" in line, line
    line = _one_error(tmp_path, [], "none")
    assert "dialogues" in line
    empty = tmp_path / "failed" / "dialogues" / "bot__seeker__en.jsonl"
    empty.parent.mkdir(parents=True)
    failed = _dialogue(0)
    failed.status = "failed"
    empty.write_text(json.dumps(failed.to_dict()) + "\n")
    line = _one_error(tmp_path, [f"dialogues={empty.parent.parent}"], "no_complete")
    assert "no complete dialogue" in line and str(empty) in line


def test_a_language_a_perturbation_lacks_is_refused_naming_both(tmp_path: Path) -> None:
    """A perturbation registered with English texts only, asked of Chinese dialogues."""
    from esc.tasks.stress.task import check_languages

    @perturb.perturbation("english_only_probe", perturb.NEUTRAL, "probe", needs=("english_only_probe",))
    def _probe(d: Dialogue, rng: random.Random, t: Any) -> Dialogue | None:
        return d

    perturb.texts()["english_only_probe"] = {"en": "x"}
    try:
        d = _dialogue(0)
        d.language = "zh"
        path = _write(tmp_path / "zh", [d]) / "dialogues" / "bot__seeker__en.jsonl"
        with pytest.raises(Exception) as err:
            check_languages([path], [perturb.PERTURBATIONS["english_only_probe"]])
        assert (
            str(path) in str(err.value)
            and "english_only_probe" in str(err.value)
            and "'zh'" in str(err.value)
        )
    finally:
        perturb.PERTURBATIONS.remove("english_only_probe")
        perturb.texts().pop("english_only_probe")


def test_a_judge_of_per_dimension_adapters_cannot_answer_the_checklist() -> None:
    from esc.errors import ConfigError
    from esc.tasks.stress.task import refuse_adapter_judges

    class AdapterJudge(PlantedStressJudge):
        scores_by_adapter = True  # as ESC-RANK: one adapter per dimension, answering 0-4 only

    refuse_adapter_judges([PlantedStressJudge.of(name="ideal")])  # a judge that reads questions: allowed
    with pytest.raises(ConfigError) as err:
        refuse_adapter_judges([PlantedStressJudge.of(name="ideal"), AdapterJudge.of(name="esc_rank")])
    assert "stress.checklist" in str(err.value) and "'esc_rank'" in str(err.value)


# --- issue 62: resamples, duplicates, a padding that stays neutral, bootstrap=0, the checklist card ------


def _stress_settings(**changes: Any):
    from esc.config_rules import load_section
    from esc.tasks.stress.task import StressSettings
    from tests.helpers import conf_node

    return load_section("stress", StressSettings, conf_node("stress", changes, config_name="rank"))


def test_a_verdict_needs_an_interval_of_enough_resamples(tmp_path: Path) -> None:
    """stress.bootstrap=3 read a verdict off a "95% interval" of 3 resamples (`+0.12 [every resample
    0.00]` invariant: the interval did not contain its own estimate). 0 (no intervals: every verdict
    undecided) or at least MIN_RESAMPLES; anything between is one error naming the key, before any file."""
    from esc.errors import ConfigError

    folder = _write(tmp_path / "eval", [_dialogue(c) for c in range(CARDS)])
    with pytest.raises(ConfigError, match="stress.bootstrap"):
        _jury_run(tmp_path / "out", folder, {"ideal": {}}, ["stress.bootstrap=3"])
    assert not (tmp_path / "out" / "variants").exists() and not (tmp_path / "out" / "scores").exists()
    for few in (1, 2, 3, 199, -1):
        with pytest.raises(ConfigError) as err:
            _stress_settings(bootstrap=few)
        said = str(err.value)
        assert "stress.bootstrap" in said and "at least 200" in said and f"got {few}" in said, said
    for enough in (0, 200, 1000):
        assert _stress_settings(bootstrap=enough).bootstrap == enough


def test_a_perturbation_listed_twice_is_refused() -> None:
    """[dismissive,dismissive] made and judged each variant twice (paid twice, counts doubled)."""
    from esc.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        _stress_settings(perturbations=["dismissive", "neutral_padding", "dismissive"])
    said = str(err.value)
    assert "stress.perturbations" in said and "dismissive" in said and "twice" in said, said
    assert "neutral_padding" not in said.split("twice")[0], said  # names the one listed twice
    assert _stress_settings(perturbations=["dismissive", "neutral_padding"]).perturbations == [
        "dismissive",
        "neutral_padding",
    ]


def test_neutral_padding_keeps_a_cut_reply_as_it_was() -> None:
    """A reply cut at max_new_tokens ("...who can share their") padded at its end read "...who can share
    their I am reading what you wrote.": the neutral change broke the reply's last sentence too. The
    padding is a whole sentence of its own, and every sentence of the reply is kept as it was."""
    d = _dialogue(0)
    cut = "It helps to talk to someone you trust, a friend or a relative who can share their"
    d.turns[3].text = cut
    for seed in range(6):
        v = perturb.variant(perturb.PERTURBATIONS["neutral_padding"], d, "bot/0", seed)
        for before, after in zip(perturb.replies(d), perturb.replies(v), strict=True):
            added = [s.strip() for s in perturb.sentences(after.text)]
            for s in perturb.sentences(before.text):
                added.remove(s.strip())  # every sentence of the reply, whole (ValueError otherwise)
            assert len(added) == 1 and added[0] in EN["neutral"], (after, added)
            assert before.text in after.text  # the reply itself untouched, its cut end included
    zh = _dialogue(0)
    zh.language = "zh"
    zh.turns[3].text = "你可以和信任的人聊聊，比如一个能分担你"
    v = perturb.variant(perturb.PERTURBATIONS["neutral_padding"], zh, "bot/0", 0)
    reply = perturb.replies(v)[1].text
    assert "你可以和信任的人聊聊，比如一个能分担你" in reply
    assert any(reply.startswith(s) for s in T["neutral"]["zh"]), reply


def test_no_resampling_says_so_instead_of_one_card(tmp_path: Path) -> None:
    """stress.bootstrap=0 on 8 cards: a share at 100% said "no interval: one card" and the note "a 95%
    bootstrap interval resampled by role card"; the words now say no resampling was asked for."""
    folder = _write(tmp_path / "eval", [_dialogue(c) for c in range(CARDS)])
    result = _jury_run(
        tmp_path / "out", folder, {"ideal": {}},
        ["stress.bootstrap=0", "stress.checklist=true", "stress.perturbations=[dismissive,rename]"],
    )  # fmt: skip
    text = (tmp_path / "out" / "stress.md").read_text()
    assert "no interval: one card" not in text and "bootstrap interval" not in text, text
    assert "resampled by" not in text and text.count("with no interval (stress.bootstrap=0") == 2
    assert set(result.verdicts) == {"undecided"}
    card = _card(tmp_path / "out")
    row = card["ideal", "dismissive", "Empathy"]
    assert row["Change"] == "-2.00 [no interval: stress.bootstrap=0]"
    assert row["Moved as expected"] == "100% [63, 100]\u2020"  # exact by card, no resampling needed
    flags = _card(tmp_path / "out", "checklist card", "Question")
    assert (
        flags["ideal", "dismissive", "dismissive"]["Change"] == "+100.0 pp [no interval: stress.bootstrap=0]"
    )
    [table] = [
        t for t in read_result(result_path(tmp_path / "out", "stress")).tables() if t.name == "report card"
    ]
    notes = {c.estimate.note for r in table.rows for c in r if c.estimate is not None}
    exact = "exact 95% interval: 63.1-100.0% by card (8), 63.1-100.0% by pair (8)"  # the share at 100%
    none = "no interval: stress.bootstrap=0"
    assert notes == {none, f"{exact}; by resampling: {none}"}


def test_the_checklist_cards_moved_as_expected_says_up(tmp_path: Path) -> None:
    """The checklist card's "Moved as expected" named the scores' metric ("a degradation: down"); a
    flag expected of a degradation goes up: its own metric says so (the site's column tooltip)."""
    folder = _write(tmp_path / "eval", [_dialogue(c) for c in range(3)])
    _jury_run(tmp_path / "out", folder, {"ideal": {}},
              ["stress.checklist=true", "stress.perturbations=[unsafe_advice]"])  # fmt: skip
    log = json.loads((tmp_path / "out" / "run.json").read_text())
    tables = {t.name: t for t in read_result(result_path(tmp_path / "out", "stress")).tables()}

    def definition(name: str) -> str:
        table = tables[name]
        i = list(table.columns).index("Moved as expected")
        [metric] = {row[i].estimate.metric for row in table.rows}
        return log["header"]["metrics"][metric]["aggregation"]

    said = definition("checklist card")
    assert "flagged" in said and "down" not in said, said
    assert "down" in definition("report card")
