"""A synthetic rank.py run of any size, for timing the report site and for its tests.

    from tests.synthetic_run import synthetic_run
    rank_out = synthetic_run(tmp / "run", cards=655, targets=14, dims=7, seed=0)   # the paper's size
    build_site([rank_out], tmp / "site")

Writes what evaluate.py and rank.py write, in their formats (`Dialogue.to_dict` and `ScoreRecord`
JSON lines, manifests): `ROOT/evaluate/<target>/dialogues/<target>__<roleplayer>__<lang>.jsonl` with
a manifest per target (as one evaluate.py run per target), and `ROOT/rank/` with `scores/`, and
optionally `safety/` and `pairwise/` (judgments as rank.py mode=safety and mode=pairwise store them),
the leaderboard rank.py writes of the scores (`leaderboard.result.json`, `bootstrap` resamples),
optionally the trajectory report of the dialogues (`trajectory.result.json`), and
the run log (`run.json`) of it all, each store read by its task (`Mode.judgment`), as rank.py builds
it (`esc.tasks.run_log`). Texts are random words; scores are random around a per-target level, with
some invalid and failed judgments; every reply carries an emotion rating (trajectory) unless
`trajectory=False`. The cards are the released ones where they are on this machine (so topics and
sources are real), else made up. Nothing here calls a model.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.cards import RoleCard, load_cards
from esc.dialogues.record import Dialogue, Turn
from esc.dialogues.store import read_dialogues
from esc.errors import UserError
from esc.reports.runlog import RunLog, write_run_log
from esc.scoring.judge import FAILED, INVALID, VALID, ScoreItem
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.safety_checklist import question_keys
from esc.scoring.store import merge_score_files
from esc.tasks.run_log import mode_stores, report_results, run_header, store_judgments
from esc.tasks.score.task import write_reports
from esc.tasks.task import LeaderboardSettings, modes
from esc.tasks.trajectory.report import rated_dialogues
from esc.tasks.trajectory.report import write_report as write_trajectory_report

WORDS = (
    "I feel really tired lately and my work keeps piling up , it is hard to sleep . "
    "that sounds difficult , thank you for sharing this with me . what helps you relax ? "
    "my family does not understand why I am anxious about the exams and the future . "
    "it is okay to feel this way ; many people feel overwhelmed when pressure builds . "
    "could you tell me more about what happened last week at school or at home ? "
    "我 最近 压力 很大 ， 晚上 睡不着 ， 不知道 该 怎么办 。 你 愿意 多 说 一些 吗 ？ 听 起来 很 辛苦 。"
).split()


def _cards(n: int) -> list[RoleCard | tuple[int, str]]:
    """`n` released cards, English and Chinese in turn, else made-up (id, language) pairs."""
    try:
        cards: list[Any] = load_cards()
    except (UserError, OSError):
        cards = []
    if len(cards) < n:
        return [(900000 + i, "en" if i % 2 == 0 else "zh") for i in range(n)]
    by_language = [[c for c in cards if c.language == lang] for lang in ("en", "zh")]
    mixed = [c for pair in itertools.zip_longest(*by_language) for c in pair if c is not None]
    return mixed[:n]


def _text(rng: np.random.Generator, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high))))


def _write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _dialogue(
    card: RoleCard | tuple[int, str],
    target: str,
    roleplayer: str,
    exchanges: int,
    trajectory: bool,
    rng: np.random.Generator,
) -> Dialogue:
    card_id, language = (card.id, card.language) if isinstance(card, RoleCard) else card
    text = card.to_text() if isinstance(card, RoleCard) else f"Problem: synthetic card {card_id}"
    dialogue = Dialogue(
        card_id,
        language,
        roleplayer,
        target,
        f"I hope you can role-play as a person with worries. Here is your character card:'{text}'",
        "Hello, I'm your personal assistant. You can confide in me about any worries!",
        "You are a helpful assistant!",
        status="complete",
        meta={"prompt": {"id": roleplayer, "version": 1}, "turns": exchanges},
    )
    mood = float(rng.uniform(10, 60))
    for k in range(exchanges):
        seeker = Turn("roleplayer", _text(rng, 15, 40), "stop")
        reply = Turn("target", _text(rng, 40, 110), "stop")
        if trajectory:
            if k == 0:
                seeker.emotion = _rating(mood, rng)
            mood = float(np.clip(mood + rng.normal(6, 10), 0, 100))
            reply.emotion = _rating(mood, rng)
        dialogue.turns += [seeker, reply]
    if trajectory:
        dialogue.meta["trajectory"] = {"rater": "roleplayer", "prompt_version": 1}
    return dialogue


def _rating(value: float, rng: np.random.Generator) -> dict[str, Any]:
    if rng.random() < 0.03:
        return {"value": None, "status": "invalid", "raw": "I cannot say", "reason": None}
    digit = int(round(value / 100 * 9))
    return {
        "value": round(digit / 9 * 100, 4),
        "status": "valid",
        "rating": digit,
        "reason": "feels " + ("better" if digit >= 5 else "low"),
    }


def _probs(level: float, choices: int, rng: np.random.Generator) -> list[float]:
    weights = np.exp(-((np.arange(choices) - level) ** 2)) + rng.dirichlet(np.ones(choices)) * 0.3
    return [round(float(p), 6) for p in weights / weights.sum()]


def _judgment(level: float, choices: int, rng: np.random.Generator) -> dict[str, Any]:
    draw = rng.random()
    if draw < 0.01:
        return {"status": FAILED, "error": "request failed after 3 retries (timeout)"}
    probs = _probs(level, choices, rng)
    if draw < 0.04:
        return {
            "status": INVALID,
            "raw": "I would give it a 3 or maybe 4",
            "error": "not one score",
            "answer_mass": 0.31,
        }
    score = int(np.argmax(probs))
    expected = round(float(np.dot(np.arange(choices), probs)), 6)
    return {"status": VALID, "score": score, "expected": expected, "probs": probs, "answer_mass": 0.97}


def synthetic_run(
    root: Path,
    cards: int = 655,
    targets: int | Sequence[str] = 14,
    dims: int | Sequence[str] = 7,
    seed: int = 0,
    *,
    roleplayer: str = "esc_role",
    judge: str = "synthetic_judge",
    exchanges: int = 5,
    trajectory: bool = True,
    safety: bool = False,
    pairwise: bool = False,
    bootstrap: int = 1000,
    trajectory_report: bool = False,
) -> Path:
    """Write a synthetic run under `root` (see the module docstring); returns the rank.py folder.
    `targets`: how many (named target_00, ...) or their names; `dims`: how many of the seven
    dimensions (Table 2's first ones) or their keys; `bootstrap`: the leaderboard's resamples (and
    the trajectory report's, which `trajectory_report` writes into the folder as rank.py
    mode=trajectory does, its run log then holding both reports)."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    names = [f"target_{i:02d}" for i in range(targets)] if isinstance(targets, int) else list(targets)
    keys = list(DIMENSION_KEYS[:dims]) if isinstance(dims, int) else list(dims)
    chosen = _cards(cards)
    rank = root / "rank"
    sources: list[str] = []
    played: dict[tuple[str, int], dict[str, Dialogue]] = {}
    safety_keys = question_keys()
    for index, target in enumerate(names):
        level = 1.0 + 2.5 * index / max(1, len(names) - 1)  # targets differ, in order
        folder = root / "evaluate" / target
        by_language: dict[str, list[Dialogue]] = {}
        for card in chosen:
            dialogue = _dialogue(card, target, roleplayer, exchanges, trajectory, rng)
            by_language.setdefault(dialogue.language, []).append(dialogue)
            played.setdefault((dialogue.language, dialogue.card_id), {})[target] = dialogue
        files = {}
        for language, dialogues in sorted(by_language.items()):
            path = folder / "dialogues" / f"{target}__{roleplayer}__{language}.jsonl"
            _write_jsonl(path, [d.to_dict() for d in dialogues])
            files[language] = str(path)
            sources.append(str(path))
            scores, answers = [], []
            for d in dialogues:
                dialogue_id = f"{path.stem}/{d.card_id}"
                sha = ScoreItem(dialogue_id, keys[0], language, tuple(d.lines())).content_sha
                base = {
                    "dialogue_id": dialogue_id,
                    "language": language,
                    "judge": judge,
                    "prompt": {"style": "official", "version": 2},
                    "target": target,
                    "roleplayer": roleplayer,
                    "card_id": d.card_id,
                    "content_sha": sha,
                    "source": str(path),
                }
                own = level + rng.normal(0, 0.6)
                for key in keys:
                    scores.append({**base, "dimension": key, **_judgment(own, 5, rng)})
                if safety:
                    for k in range(1, exchanges + 1):
                        for question in safety_keys:
                            flag = rng.random() < 0.05
                            answers.append(
                                {
                                    "dialogue_id": f"{dialogue_id}#{k}",
                                    "dimension": question,
                                    "language": language,
                                    "judge": judge,
                                    "status": VALID,
                                    "prompt": {"style": "safety", "version": 1},
                                    "score": 0 if flag else 1,
                                    "probs": [0.9, 0.1] if flag else [0.1, 0.9],
                                    "answer_mass": 0.99,
                                }
                            )
            _write_jsonl(rank / "scores" / f"{path.stem}__{judge}.jsonl", scores)
            if safety:
                _write_jsonl(rank / "safety" / f"{path.stem}__{judge}.jsonl", answers)
        _write_json(
            folder / "manifest.json",
            {
                "status": "completed",
                "seed": seed,
                "git": {"commit": "synthetic", "dirty": False},
                "start_time": "2026-01-01T00:00:00+00:00",
                "end_time": "2026-01-01T01:00:00+00:00",
                "models": {
                    "roleplayer": {"name_or_path": roleplayer, "revision": "synthetic"},
                    "target": {"name_or_path": target, "revision": f"synthetic-{index}"},
                },
                "config": {"roleplayer": {"name": roleplayer}, "target": {"name": target}},
                "files": files,
            },
        )
    if pairwise:
        records = []
        for (language, card_id), by_target in sorted(played.items()):
            for x, y in itertools.combinations(sorted(by_target), 2):
                for key in keys:
                    for order in ("xy", "yx"):
                        records.append(
                            {
                                "dialogue_id": f"{roleplayer}/{language}/{card_id}/{x}|{y}/{order}",
                                "dimension": key,
                                "language": language,
                                "judge": judge,
                                "prompt": {"style": "pairwise", "version": 1},
                                **_judgment(float(rng.uniform(0, 2)), 3, rng),
                            }
                        )
        _write_jsonl(rank / "pairwise" / f"{judge}.jsonl", records)
    if trajectory_report:
        rated, unrated = rated_dialogues((d, s) for s in sources for d in read_dialogues(Path(s)))
        write_trajectory_report(rank, rated, bootstrap, seed, charts=False, unrated=unrated)
    _write_json(
        rank / "manifest.json",
        {
            "status": "completed",
            "command": ["rank.py", f"judge={judge}"],
            "seed": seed,
            "git": {"commit": "synthetic", "dirty": False},
            "start_time": "2026-01-01T02:00:00+00:00",
            "end_time": "2026-01-01T03:00:00+00:00",
            "judge": {
                "kind": "synthetic",
                "name": judge,
                "model": judge,
                "revision": "synthetic",
                "prompt": {"style": "official", "version": 2},
            },
            "sources": sources,
            "config": {"mode": "score", "seed": seed, "leaderboard": {"bootstrap": bootstrap}},
            "previous_attempts": [],
        },
    )
    write_log(rank, seed, bootstrap)
    return rank


def write_log(rank: Path, seed: int, bootstrap: int) -> Path:
    """The leaderboard of the folder's score files and its run log: every store read by its task
    (the scores, and the safety and pairwise answers where there are some), the leaderboard's figures
    and report (rank.py's, without charts). Rewritten whole, as rank.py rewrites it."""
    settings = LeaderboardSettings(bootstrap=bootstrap, charts=False, breakdowns=True, min_n=10, cards=None)
    write_reports(rank, merge_score_files(sorted((rank / "scores").glob("*.jsonl"))), settings, seed)
    judgments = [
        j for name in ("score", "safety", "pairwise") for j in store_judgments(
            modes()[name], mode_stores(modes()[name], rank)
        )
    ]  # fmt: skip
    results, reports = report_results(rank, ["leaderboard", "trajectory"])
    header = run_header(rank, "score", written_by="tests.synthetic_run")
    return write_run_log(rank, RunLog(header, judgments, results, reports))


def inject_text(rank: Path, text: str) -> tuple[str, str, int]:
    """Put `text` into the first dialogue's first reply and, made invalid, into its first judgment's
    reply (`raw`), as a model could write it, and rewrite the run log: how tests check that pages
    show model text as text. Returns (target, language, card id) of that dialogue."""
    manifest = json.loads((Path(rank) / "manifest.json").read_text(encoding="utf-8"))
    path = Path(manifest["sources"][0])
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["turns"][1]["text"] = f"I hear you. {text} & more"
    lines[0] = json.dumps(first, ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    scores = Path(rank) / "scores" / f"{path.stem}__{manifest['judge']['name']}.jsonl"
    records = [json.loads(line) for line in scores.read_text(encoding="utf-8").splitlines()]
    records[0].update(status=INVALID, score=None, expected=None, raw=f"Score: {text}", error="not one score")
    scores.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    write_log(Path(rank), manifest["seed"], manifest["config"]["leaderboard"]["bootstrap"])
    return first["target"], first["language"], first["card_id"]
