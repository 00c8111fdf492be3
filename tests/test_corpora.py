"""The third-party corpus readers (esc/corpora): what they return and how a bad record is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esc.corpora import SEEKER, SUPPORTER
from esc.corpora.esconv import read_esconv, read_failed_esconv
from esc.corpora.posts import EPITOME_FILES, read_epitome
from esc.corpora.smile import read_smile_dialogue
from esc.errors import DataError


def _esconv_line(**changes: object) -> str:
    record = {
        "situation": " I lost my job ",
        "problem_type": "job crisis",
        "emotion_type": "anxiety",
        "empathy": 4,
        "relevance": "5",
        "dialog": [
            {"speaker": "usr", "text": "hi ", "rating": "3"},
            {"speaker": "sys", "text": "Hello, how are you?"},
            {"speaker": "usr", "text": "bad", "rating": ""},
        ],
    }
    return json.dumps({**record, **changes}) + "\n"


def test_esconv_dialogues_keep_texts_ids_survey_and_seeker_ratings(tmp_path: Path) -> None:
    path = tmp_path / "valid_rl.txt"
    path.write_text(_esconv_line() + _esconv_line(situation="second"), encoding="utf-8")
    first, second = read_esconv(path)
    assert (first.id, second.id) == ("esconv/valid/0", "esconv/valid/1")
    assert first.situation == " I lost my job "  # as the file has it: each user decides
    assert [(u.speaker, u.text, u.feedback) for u in first.utterances] == [
        (SEEKER, "hi ", 3),
        (SUPPORTER, "Hello, how are you?", None),
        (SEEKER, "bad", None),
    ]
    assert first.survey == {"empathy": 4, "relevance": "5"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dialog": [{"speaker": "usr", "text": "hi", "rating": "great"}]}, r"line 1, dialog\[0\].*integer"),
        ({"dialog": [{"speaker": "bot", "text": "hi"}]}, r"line 1, dialog\[0\].*usr/sys"),
        ({"problem_type": None}, r"line 1.*`problem_type` should be str"),
    ],
)
def test_a_bad_esconv_record_is_one_data_error_naming_its_place(
    tmp_path: Path, change: dict, message: str
) -> None:
    path = tmp_path / "train_rl.txt"
    path.write_text(_esconv_line(**change), encoding="utf-8")
    with pytest.raises(DataError, match=message):
        list(read_esconv(path))


def test_failed_esconv_reads_its_own_layout(tmp_path: Path) -> None:
    path = tmp_path / "FailedESConv.json"
    dialog = [
        {"speaker": "seeker", "content": "I feel alone", "annotation": {"feedback": "2"}},
        {"speaker": "supporter", "content": "I hear you", "annotation": {}},
        {"speaker": "speaker", "content": "thanks", "annotation": {"feedback": ""}},
    ]
    path.write_text(json.dumps([{"dialog": dialog, "survey_score": {"seeker": {"empathy": "1"}}}]))
    (d,) = read_failed_esconv(path)
    assert d.id == "failedesconv/0" and d.situation == "" and d.survey == {"empathy": "1", "relevance": None}
    assert [(u.speaker, u.feedback) for u in d.utterances] == [(SEEKER, 2), (SUPPORTER, None), (SEEKER, None)]
    dialog[0]["annotation"] = {"feedback": "two"}
    path.write_text(json.dumps([{"dialog": dialog}]))
    with pytest.raises(DataError, match=r"0, dialog\[0\].*integer"):
        list(read_failed_esconv(path))


def test_smile_roles_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "7.json"
    path.write_text(
        json.dumps([{"role": "client", "content": "我很累"}, {"role": "counselor", "content": "嗯"}])
    )
    assert read_smile_dialogue(path) == ((SEEKER, "我很累"), (SUPPORTER, "嗯"))
    path.write_text(json.dumps([{"role": "therapist", "content": "x"}]))
    with pytest.raises(DataError, match="role should be client/counselor"):
        read_smile_dialogue(path)


def test_epitome_gives_each_post_once(tmp_path: Path) -> None:
    for name in EPITOME_FILES:
        (tmp_path / name).write_text("sp_id,seeker_post\n1, help me \n2,\n", encoding="utf-8")
    assert list(read_epitome(tmp_path)) == [("1", "help me")]
