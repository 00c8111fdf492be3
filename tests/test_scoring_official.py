"""The official ESC-Eval score files (`score/<Model>_<lang>.json`): read, write, round trip, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.cli import main as esc_main
from esc.errors import DataError
from esc.official_formats.scores import (
    official_keys,
    official_parse,
    read_official_scores,
    write_official_scores,
)
from esc.paths import data_dir
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord, ScoreStore, read_scores
from tests.helpers import requires_data

CARDS = [32025, 32027, 32030]  # card ids in card-file order: position 0, 1, 2

# Exactly as score.py writes it (json.dumps(indent=4, ensure_ascii=False), no final newline), with a -1.
OFFICIAL = """{
    "0": {
        "fluency": 3,
        "diversity": 2,
        "empathic": 4,
        "suggestion": 3,
        "human": 1,
        "tech": 0,
        "overall": 2
    },
    "2": {
        "fluency": -1,
        "diversity": 3,
        "empathic": 3,
        "suggestion": 3,
        "human": 2,
        "tech": 3,
        "overall": 2
    }
}"""


def our_records(target: str = "llama3", language: str = "en") -> list[ScoreRecord]:
    """What rank.py writes for two dialogues: every dimension, one invalid and one failed judgment."""
    records = []
    for n, card_id in enumerate(CARDS[:2]):
        for i, key in enumerate(DIMENSION_KEYS):
            fields = {
                "dialogue_id": f"{target}__esc_role__{language}/{card_id}",
                "dimension": key,
                "language": language,
                "judge": "esc_rank",
                "prompt": {"style": "official", "version": 1},
                "target": target,
                "roleplayer": "esc_role",
                "card_id": card_id,
            }
            if (n, key) == (0, "humanoid"):
                records.append(ScoreRecord(**fields, status=INVALID, raw="five", error="no score"))
            elif (n, key) == (1, "overall"):
                records.append(ScoreRecord(**fields, status=FAILED, error="HTTP 500"))
            else:
                score = (i + n) % 5
                probs = [0.1] * 5
                records.append(ScoreRecord(**fields, status=VALID, score=score, expected=2.0, probs=probs))
    return records


def test_round_trip_ours_official_ours(tmp_path: Path) -> None:
    ours = our_records()
    path = write_official_scores(ours, tmp_path / "llama3_en.json", CARDS)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data) == ["0", "1"] and list(data["0"]) == list(official_keys())
    assert data["0"]["human"] == -1 and data["1"]["overall"] == -1  # invalid and failed: -1
    back = {r.key: r for r in read_official_scores(path, CARDS, judge="esc_rank")}
    assert set(back) == {r.key for r in ours}
    for record in ours:
        got = back[record.key]
        assert (got.dialogue_id, got.target, got.roleplayer, got.language, got.card_id) == (
            record.dialogue_id,
            "llama3",
            "esc_role",
            "en",
            record.card_id,
        )
        if record.status == VALID:
            assert got.status == VALID and got.score == record.score
        else:  # failed is written as -1 too, so both come back invalid, never as a score
            assert got.status == INVALID and got.score is None and "-1" in got.error


def test_cli_exports_a_rank_output_and_imports_it_for_the_leaderboard(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("esc.official_formats.scores._released_card_ids", lambda language: CARDS)
    store = ScoreStore(tmp_path / "run" / "scores" / "llama3__esc_role__en__esc_rank.jsonl")
    store.add(our_records())
    store.add([ScoreRecord(**{**our_records()[0].to_dict(), "score": 4})])  # a later line supersedes
    assert esc_main(["scores", "export", str(tmp_path / "run"), "--out", str(tmp_path / "score")]) == 0
    official = tmp_path / "score" / "llama3__esc_role_en.json"  # the role-player in the name
    assert json.loads(official.read_text(encoding="utf-8"))["0"]["fluency"] == 4
    out = tmp_path / "imported.jsonl"
    assert esc_main(["scores", "import", str(official), "--out", str(out)]) == 0
    assert "14 judgments (2 invalid: -1)" in capsys.readouterr().out
    records = list(read_scores(out))  # the file rank.py mode=leaderboard scores=... reads
    assert len(records) == 14 and {r.judge for r in records} == {"esc_rank_official"}
    assert {r.dialogue_id for r in records} == {"llama3__esc_role__en/32025", "llama3__esc_role__en/32027"}


def test_reads_the_exact_official_layout(tmp_path: Path) -> None:
    path = tmp_path / "Qwen_7B_zh.json"
    path.write_text(OFFICIAL, encoding="utf-8")
    records = read_official_scores(path, CARDS)
    assert len(records) == 14
    assert {(r.target, r.language, r.roleplayer) for r in records} == {("Qwen_7B", "zh", "esc_role")}
    got = {(r.card_id, r.dimension): r for r in records}
    assert got[(32025, "empathy")].score == 4  # empathic -> empathy
    assert got[(32025, "humanoid")].score == 1  # human -> humanoid
    assert got[(32025, "skill")].score == 0  # tech -> skill
    unparsed = got[(32030, "fluency")]  # "2" is the third card
    assert unparsed.status == INVALID and unparsed.score is None
    assert unparsed.dialogue_id == "Qwen_7B__esc_role__zh/32030"
    assert all(r.status == VALID and r.score is not None for r in records if r is not unparsed)
    again = write_official_scores(records, tmp_path / "out" / path.name, CARDS)
    assert again.read_text(encoding="utf-8") == OFFICIAL  # byte for byte


@requires_data
def test_the_released_example_score_files_round_trip(tmp_path: Path) -> None:
    from esc.cards import load_cards

    for path in sorted((data_dir() / "esc_eval" / "example_scores").glob("*.json")):
        language = path.stem.rsplit("_", 1)[1]
        ids = [
            c.id for c in load_cards([data_dir() / "esc_eval" / f"test_{language}.json"], language=language)
        ]
        records = read_official_scores(path, ids)
        assert len(records) == 21 and all(r.status == VALID for r in records)
        again = write_official_scores(records, tmp_path / path.name, ids)
        assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("llama3_en.json", '{"0": {"fluency": 3,}', r"llama3_en.json: not valid JSON \(line 1"),
        ("llama3_en.json", '[{"fluency": 3}]', r"llama3_en.json: expected a JSON object"),
        ("llama3_en.json", '{"1": {"fluency": 5}}', r"llama3_en.json \[record 1, fluency\]: score 5 is not"),
        ("llama3_en.json", '{"0": {"tech": -2}}', r"\[record 0, tech\]: score -2 is not an integer in -1..4"),
        ("llama3_en.json", '{"0": {"tech": "3"}}', r"\[record 0, tech\]: score '3' is not an integer"),
        ("llama3_en.json", '{"0": {"tech": true}}', r"\[record 0, tech\]: score True"),
        (
            "llama3_en.json",
            '{"0": {"fluency": 3, "kindness": 2}}',
            r"\[record 0\]: unknown dimension key 'kindness'",
        ),
        ("llama3_en.json", '{"0": {"empathic": 3, "empathy": 2}}', r"\[record 0\]: 'empathy' and 'empathic'"),
        (
            "llama3_en.json",
            '{"3": {"fluency": 3}}',
            r"\[record 3\]: the key is not a position in the 3 cards",
        ),
        ("llama3_en.json", '{"0": [3, 3]}', r"\[record 0\]: expected an object"),
        ("llama3.json", '{"0": {"fluency": 3}}', r"llama3.json: no language"),
    ],
)
def test_bad_input_names_file_and_record(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_official_scores(path, CARDS)


def test_cli_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("esc.official_formats.scores._released_card_ids", lambda language: CARDS)
    path = tmp_path / "llama3_en.json"
    path.write_text('{"0": {"fluency": 7}}', encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        esc_main(["scores", "import", str(path), "--out", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert f"{path} [record 0, fluency]: score 7" in err and not (tmp_path / "x.jsonl").exists()


def test_export_refuses_a_card_not_in_the_card_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"llama3__esc_role__en/32027 \[record fluency\]: card 32027 is not"):
        write_official_scores(our_records(), tmp_path / "llama3_en.json", CARDS[:1])


@pytest.mark.parametrize(
    ("reply", "score"),
    [("3", 3), ("Score: 3 out of 4", 3), ("4/10", 0), ("I'd say 3 or 2", 2), ("five", -1), ("", -1)],
)
def test_official_parse_takes_the_lowest_digit_anywhere(reply: str, score: int) -> None:
    assert official_parse(reply) == score
