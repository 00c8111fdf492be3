"""The rating loop keeps people's work (issue 50): labels record the task file they were made on and
`--add` refuses another task set's, two `--add` imports at once lose no rater, an export or a site never
replaces a folder it did not make, every page text goes through the secret filter, and the blind keys
are salted with a secret the pages do not hold. `make_rating_files` also sets up the bad-input rows
(tests/test_bad_inputs.py, `# --- issue 50: rating loop ---`)."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

import esc.cli.annotate as annotate_cli
from esc.annotate.rating_site import MARKER, write_rating_site
from esc.annotate.tasks import (
    RATING_FORMAT,
    SALT_FILE,
    Payload,
    Task,
    export_tasks,
    read_labels,
    read_salt,
    read_tasks,
    task_key,
)
from esc.cli import main as esc_main
from esc.hashing import sha256_file
from esc.scoring.rubrics import DIMENSION_KEYS

SECRET = "sk-PLANTED-rating-0123456789abcdef"
CARDS = (32025, 32027)
CARD = {"base": "Age: 30\nGender: Female\nOccupation: Teacher\nProblem: Cannot sleep before exams.",
        "res": "工作学习", "source": "ESconv", "language": "english"}  # fmt: skip


def _tasks(reply: str) -> list[Task]:
    """Two dialogue tasks of one target: the same ids whatever `reply` (another task set's replies)."""
    tasks = []
    for card in CARDS:
        lines = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": f"card {card}"},
                 {"role": "assistant", "content": reply}]  # fmt: skip
        payload = {"card_id": card, "roleplayer": "rolebot", "target": "alphabot", "dialogue": lines}
        tasks.append(
            Task(f"dialogue:alphabot:rolebot:en:{card}", "dialogue", "en", reply, Payload(**payload))
        )
    return tasks


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _scores(rater: str, task_ids: list[str]) -> list[dict]:
    """A spreadsheet-style labels file: every dimension 2 for each task."""
    return [{"task_id": t, "annotator": rater, **dict.fromkeys(DIMENSION_KEYS, 2)} for t in task_ids]


def _rating(tasks_dir: Path, task_id: str, rater: object = "ana", **fields: object) -> dict:
    """A record as the rating pages export it."""
    checksum = sha256_file(tasks_dir / "tasks.jsonl")
    key = task_key(checksum, task_id, read_salt(tasks_dir))
    record = {"format": RATING_FORMAT, "rater": rater, "task": key,
              "scores": dict.fromkeys(DIMENSION_KEYS, 2), "comment": "", "skipped": False,
              "rated_at": "2026-11-27T00:00:00Z", "tasks_sha256": checksum, "order_seed": 1}  # fmt: skip
    return {**record, **fields}


def make_rating_files(tmp: Path) -> None:
    """tmp/tasks and tmp/other (the same task ids, other replies), ana's labels of tasks
    (tmp/labels.jsonl), ben's of other (tmp/ben_other.jsonl), bad rating-page exports, a folder of
    someone's notes (tmp/notes) and a task folder exported before salts (tmp/old_tasks)."""
    export_tasks(_tasks("Take a walk."), tmp / "tasks")
    export_tasks(_tasks("Call a friend."), tmp / "other")
    ids = list(read_tasks(tmp / "tasks"))
    _jsonl(tmp / "ana.jsonl", _scores("ana", ids))
    assert esc_main(["annotate", "import", str(tmp / "tasks"), str(tmp / "ana.jsonl"), "--out",
                     str(tmp / "labels.jsonl")]) == 0  # fmt: skip
    _jsonl(tmp / "ben_other.jsonl", _scores("ben", ids))
    first, second = ids
    bad = {
        "skip_and_rate": [
            _rating(tmp / "tasks", first),
            _rating(tmp / "tasks", first, skipped=True, scores=None),
        ],
        "skipped_string": [_rating(tmp / "tasks", first, skipped="false")],
        "rater_number": [_rating(tmp / "tasks", first, rater=7)],
        "rater_list": [_rating(tmp / "tasks", first, rater=["a"])],
        "rater_lines": [_rating(tmp / "tasks", first, rater="a\nb")],
        "format_2": [_rating(tmp / "tasks", first, format="esc-rating/2")],
    }
    for name, records in bad.items():
        _jsonl(tmp / f"{name}.jsonl", records)
    (tmp / "notes").mkdir()
    (tmp / "notes" / "index.html").write_text("<p>my notes</p>\n")
    (tmp / "old_tasks").mkdir()
    (tmp / "old_tasks" / "tasks.jsonl").write_text((tmp / "tasks" / "tasks.jsonl").read_text())
    (tmp / "dialogues.jsonl").write_text("")  # an export's (empty) source, for `--out` checks
    (tmp / "cards.json").write_text(json.dumps([{**CARD, "id": card} for card in CARDS]))


def _page_data(index: Path) -> dict:
    html = index.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def _stopped(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a refused command (exit 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        esc_main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


# --- dangerous: nothing people made is lost ----------------------------------------------------------


def test_add_refuses_labels_of_another_task_set(tmp_path: Path, capsys) -> None:
    make_rating_files(tmp_path)
    labels = tmp_path / "labels.jsonl"
    before = labels.read_bytes()
    line = _stopped(["annotate", "import", str(tmp_path / "other"), str(tmp_path / "ben_other.jsonl"),
                     "--out", str(labels), "--add"], capsys)  # fmt: skip
    assert "labels.jsonl" in line and "another task file" in line
    assert labels.read_bytes() == before
    # the same task set: added, and each label says which task file it was made on
    _jsonl(tmp_path / "ben.jsonl", _scores("ben", list(read_tasks(tmp_path / "tasks"))))
    assert esc_main(["annotate", "import", str(tmp_path / "tasks"), str(tmp_path / "ben.jsonl"),
                     "--out", str(labels), "--add"]) == 0  # fmt: skip
    checksum = sha256_file(tmp_path / "tasks" / "tasks.jsonl")
    assert {(x.annotator, x.tasks_sha256) for x in read_labels(labels)} == {
        ("ana", checksum),
        ("ben", checksum),
    }


def test_two_add_imports_at_once_keep_both_raters(tmp_path: Path, monkeypatch) -> None:
    """Two raters' files added at the same moment: each import reads the labels file, then writes it;
    reading is slowed down so the two overlap every time, as they did 1 try in 3."""
    make_rating_files(tmp_path)
    ids = list(read_tasks(tmp_path / "tasks"))
    read = annotate_cli.read_labels

    def slow_read(path: Path):
        found = read(path)
        time.sleep(0.5)
        return found

    monkeypatch.setattr(annotate_cli, "read_labels", slow_read)
    errors: list[BaseException] = []

    def add(rater: str) -> None:
        try:
            args = annotate_cli.parser("esc annotate").parse_args(
                [
                    "import",
                    str(tmp_path / "tasks"),
                    str(_jsonl(tmp_path / f"{rater}.jsonl", _scores(rater, ids))),
                    "--out",
                    str(tmp_path / "labels.jsonl"),
                    "--add",
                ]  # fmt: skip
            )
            annotate_cli.run(args)
        except BaseException as err:  # noqa: BLE001  (reported by the test)
            errors.append(err)

    threads = [threading.Thread(target=add, args=(rater,)) for rater in ("ben", "cal")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    labels = read_labels(tmp_path / "labels.jsonl")
    assert {x.annotator for x in labels} == {"ana", "ben", "cal"} and len(labels) == 3 * 2 * 7


def test_export_never_replaces_a_task_folder(tmp_path: Path, capsys) -> None:
    make_rating_files(tmp_path)
    tasks = tmp_path / "tasks"
    before = {p: p.read_bytes() for p in tasks.rglob("*") if p.is_file()}
    argv = ["annotate", "export", "card", "--cards", str(tmp_path / "cards.json"), "--out", str(tasks)]
    line = _stopped(argv, capsys)
    assert "tasks" in line and "--force" in line
    assert {p: p.read_bytes() for p in tasks.rglob("*") if p.is_file()} == before
    line = _stopped(["annotate", "export", "dialogue", "--dialogues", str(tmp_path / "dialogues.jsonl"),
                     "--out", str(tmp_path), "--force"], capsys)  # fmt: skip
    assert "holds this command's input" in line  # never a source, even with --force


def test_site_writes_only_into_its_own_folder(tmp_path: Path, capsys) -> None:
    make_rating_files(tmp_path)
    notes = tmp_path / "notes"
    cards = ["--cards", str(tmp_path / "cards.json")]
    line = _stopped(["annotate", "site", str(tmp_path / "tasks"), "--out", str(notes), *cards], capsys)
    assert "notes" in line and "--force" in line
    assert [p.name for p in notes.iterdir()] == ["index.html"]
    assert (notes / "index.html").read_text() == "<p>my notes</p>\n"
    line = _stopped(
        ["annotate", "site", str(tmp_path / "tasks"), "--out", str(tmp_path / "tasks"), *cards], capsys
    )
    assert "holds this command's input" in line
    rate = tmp_path / "rate"
    for _ in range(2):  # its own pages: rebuilt
        assert esc_main(["annotate", "site", str(tmp_path / "tasks"), "--out", str(rate), *cards]) == 0
    assert (
        esc_main(["annotate", "site", str(tmp_path / "tasks"), "--out", str(notes), "--force", *cards]) == 0
    )
    (rate / MARKER).unlink()  # pages made before sites were marked: still its own
    assert esc_main(["annotate", "site", str(tmp_path / "tasks"), "--out", str(rate), *cards]) == 0


def test_a_secret_in_a_dialogue_never_reaches_the_pages(tmp_path: Path, monkeypatch) -> None:
    export_tasks(_tasks(f"my key is {SECRET}, use it"), tmp_path / "tasks")  # exported before it was known
    (tmp_path / "cards.json").write_text(json.dumps([{**CARD, "id": card} for card in CARDS]))
    monkeypatch.setenv("ESC_TEST_API_KEY", SECRET)
    index = write_rating_site(tmp_path / "tasks", tmp_path / "rate", [tmp_path / "cards.json"])
    for path in (tmp_path / "rate").iterdir():
        assert SECRET.encode() not in path.read_bytes(), path
    assert any(
        "my key is ***, use it" in line[1] for item in _page_data(index)["items"] for line in item["lines"]
    )


# --- bad: the blind keys -----------------------------------------------------------------------------


def test_a_blind_key_cannot_be_recomputed_from_the_page(tmp_path: Path, capsys) -> None:
    make_rating_files(tmp_path)
    index = write_rating_site(tmp_path / "tasks", tmp_path / "rate", [tmp_path / "cards.json"])
    data = _page_data(index)
    salt = read_salt(tmp_path / "tasks")
    assert salt and (tmp_path / "tasks" / SALT_FILE).stat().st_mode & 0o077 == 0
    pages = b"".join(p.read_bytes() for p in (tmp_path / "rate").iterdir())
    assert salt.encode() not in pages
    keys = {item["key"] for item in data["items"]}
    ids = list(read_tasks(tmp_path / "tasks"))  # what a guesser could try: every real task id
    assert not keys & {task_key(data["tasks_sha256"], t) for t in ids}
    assert keys == {task_key(data["tasks_sha256"], t, salt) for t in ids}
    ratings = _jsonl(tmp_path / "ana_pages.jsonl", [_rating(tmp_path / "tasks", t) for t in ids])
    out = tmp_path / "page_labels.jsonl"
    assert esc_main(["annotate", "import", str(tmp_path / "tasks"), str(ratings), "--out", str(out)]) == 0
    assert {x.task_id for x in read_labels(out)} == set(ids)
    # a new export of the same tasks: new keys
    export_tasks(_tasks("Take a walk."), tmp_path / "again")
    assert read_salt(tmp_path / "again") != salt


def test_an_old_task_folder_without_a_salt_imports_but_makes_no_pages(tmp_path: Path, capsys) -> None:
    """Ratings made on the pages of a folder exported before salts (unsalted keys) still import; new
    pages of it are refused, since they could be de-blinded."""
    make_rating_files(tmp_path)
    old = tmp_path / "old_tasks"
    ids = list(read_tasks(old))
    ratings = _jsonl(tmp_path / "old_pages.jsonl", [_rating(old, t) for t in ids])
    assert esc_main(["annotate", "import", str(old), str(ratings), "--out", str(tmp_path / "old.jsonl")]) == 0
    line = _stopped(["annotate", "site", str(old), "--out", str(tmp_path / "rate"), "--cards",
                     str(tmp_path / "cards.json")], capsys)  # fmt: skip
    assert "old_tasks" in line and "export the tasks again" in line
    assert not (tmp_path / "rate").exists()


def test_agreement_and_to_esc_rank_refuse_another_task_folder(tmp_path: Path, capsys) -> None:
    make_rating_files(tmp_path)
    labels = str(tmp_path / "labels.jsonl")
    line = _stopped(["annotate", "agreement", labels, "--tasks", str(tmp_path / "other")], capsys)
    assert "another task file" in line
    line = _stopped(["annotate", "to-esc-rank", labels, "--tasks", str(tmp_path / "other"), "--out",
                     str(tmp_path / "rank.jsonl")], capsys)  # fmt: skip
    assert "another task file" in line and not (tmp_path / "rank.jsonl").exists()
    assert (
        esc_main(["annotate", "agreement", labels, "--tasks", str(tmp_path / "tasks"), "--bootstrap", "0"])
        == 0
    )


def test_labels_of_before_checksums_are_not_added_to_and_checked_by_task_id(tmp_path: Path, capsys) -> None:
    """A labels file imported before labels recorded their task file: `--add` cannot tell which task
    set it was made on (refused, unchanged); `agreement --tasks` checks its task ids."""
    make_rating_files(tmp_path)
    old = tmp_path / "old_labels.jsonl"
    records = [json.loads(line) for line in (tmp_path / "labels.jsonl").read_text().splitlines()]
    _jsonl(old, [{k: v for k, v in r.items() if k != "tasks_sha256"} for r in records])
    before = old.read_bytes()
    line = _stopped(["annotate", "import", str(tmp_path / "tasks"), str(tmp_path / "ben_other.jsonl"),
                     "--out", str(old), "--add"], capsys)  # fmt: skip
    assert "do not record the task file" in line and old.read_bytes() == before
    export_tasks([Task("card:en:1", "card", "en", "Age: 30", Payload())], tmp_path / "cards_tasks")
    line = _stopped(["annotate", "agreement", str(old), "--tasks", str(tmp_path / "cards_tasks")], capsys)
    assert "dialogue:alphabot:rolebot:en:32025' (and 1 more) is not in" in line
