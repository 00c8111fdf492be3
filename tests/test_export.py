"""`esc export` (issue 54, item 4): one row per dialogue of rank.py runs as Parquet and a `datasets`
folder with its card; the rows match the run log and the dialogue files (counted here from them);
secrets are masked; `--push` goes through `Dataset.push_to_hub` (a local stand-in, never the network)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from esc.cli import main
from esc.reports.runlog import read_run_log
from esc.scoring.rubrics import DIMENSION_KEYS, dimensions
from tests.helpers import refused
from tests.synthetic_run import inject_text, synthetic_run

SECRET = "sk-test-" + "Q" * 40


def _run(tmp_path: Path) -> Path:
    return synthetic_run(tmp_path / "run", cards=4, targets=2, dims=3, seed=1, safety=True, bootstrap=20)


def test_export_writes_one_row_per_dialogue_with_every_judgment(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from datasets import load_from_disk

    rank = _run(tmp_path)
    mine = tmp_path / "ds.partial"  # a person's folder whose name a staging folder could have had
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    assert (mine / "notes.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")) == ["ds.partial"]
    log = read_run_log(rank)
    per_dialogue = Counter(d for j in log.judgments for d in j.dialogues)
    table = pq.read_table(tmp_path / "ds" / "dialogues.parquet").to_pylist()
    assert {r["dialogue_id"]: len(r["judgments"]) for r in table} == dict(per_dialogue)
    hf = load_from_disk(str(tmp_path / "ds" / "hf"))
    assert hf.num_rows == len(table) and set(hf.column_names) >= {"transcript", "trajectory", "judgments"}
    row = table[0]
    # the transcript is the dialogue file's, the seeker's emotion trajectory too
    manifest = json.loads((rank / "manifest.json").read_text())
    played = {}
    for source in manifest["sources"]:
        for line in Path(source).read_text().splitlines():
            d = json.loads(line)
            played[f"{Path(source).stem}/{d['card_id']}"] = d
    d = played[row["dialogue_id"]]
    assert [t["text"] for t in row["transcript"][1:]] == [t["text"] for t in d["turns"]]
    assert row["trajectory"] == [t["emotion"]["value"] for t in d["turns"] if t.get("emotion")]
    assert {j["task"] for r in table for j in r["judgments"]} == {"score", "safety"}
    card = (tmp_path / "ds" / "README.md").read_text()
    judge = log.header.judges[0]
    assert "configs:" in card and judge["name"] in card and f"{len(table)} dialogues" in card
    # the data keep the dimensions' keys; the card maps each key to the paper's name and the zh label
    keys = {j["key"] for r in table for j in r["judgments"] if j["task"] == "score"}
    assert keys and keys <= set(DIMENSION_KEYS)
    for d in dimensions():
        assert f"| {d.key} | {d.paper_name} | {d.short} | {d.zh} |" in card
    # a second export into the same folder replaces it; a folder of other files is refused
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(rank), "--out", str(other)])
    assert exit_.value.code == 2 and (other / "mine.txt").read_text() == "keep"


def test_a_key_a_model_echoed_is_masked_in_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    rank = _run(tmp_path)
    inject_text(rank, f"my key is {SECRET}")
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    for path in (tmp_path / "ds").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_push_sends_the_dataset_with_the_token_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasets import Dataset

    pushed = []
    monkeypatch.setattr(
        Dataset, "push_to_hub", lambda self, repo, token=None: pushed.append((repo, token, self.num_rows))
    )
    rank = _run(tmp_path)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(SystemExit):  # no token: one error line, nothing written
        main(["export", str(rank), "--out", str(tmp_path / "ds"), "--push", "me/esc"])
    assert not (tmp_path / "ds").exists() and not pushed
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    assert main(["export", str(rank), "--out", str(tmp_path / "ds"), "--push", "me/esc"]) == 0
    [(repo, token, rows)] = pushed
    assert repo == "me/esc" and token == "hf_" + "x" * 34 and rows > 0
    assert b"hf_xxxx" not in b"".join(p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file())


def test_a_folder_without_a_run_log_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(tmp_path / "empty"), "--out", str(tmp_path / "ds")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error:") and "run.json" in err[0]


# --- issue 62: what an export may write, and rows that say what was judged ----------------------------


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def rows_of(out: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(out / "dialogues.parquet").to_pylist()


def test_a_second_export_never_deletes_what_a_person_put_in_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Item 1: a second `esc export RUN --out X` deleted X/notes.md and X/analysis/, exit 0. What the
    export did not write is named and refused; with --force it is kept beside the new export."""
    rank, out = _run(tmp_path), tmp_path / "ds"
    assert main(["export", str(rank), "--out", str(out)]) == 0
    (out / "notes.md").write_text("mine")
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.py").write_text("mine too")
    (out / "hf" / "my_split.txt").write_text("inside a folder of the export, yet mine")
    mine = {p: out / p for p in ("notes.md", "analysis/plot.py", "hf/my_split.txt")}
    before = {p: path.read_bytes() for p, path in mine.items()}
    err = refused(capsys, ["export", str(rank), "--out", str(out)])
    assert f"{out}: holds analysis and 2 more" in err and "--force" in err
    assert {p: path.read_bytes() for p, path in mine.items()} == before
    assert main(["export", str(rank), "--out", str(out), "--force"]) == 0
    assert {p: path.read_bytes() for p, path in mine.items()} == before
    assert len(rows_of(out)) == 8
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_run_kept_inside_the_export_folder_is_refused_never_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Item 2: `esc export X/myrun --out X` deleted the run it exported."""
    rank, out = _run(tmp_path), tmp_path / "ds"
    assert main(["export", str(rank), "--out", str(out)]) == 0
    inside = out / "myrun"
    shutil.copytree(rank, inside)
    before = files(inside)
    for force in ([], ["--force"]):
        err = refused(capsys, ["export", str(inside), "--out", str(out), *force])
        assert f"{out}: --out holds the run folder {inside}" in err
        assert files(inside) == before


def test_a_run_named_twice_is_counted_once(tmp_path: Path) -> None:
    """Item 3: `esc export R R` put every judgment in twice ("56 judgments from 2 runs"); the same
    folder by another spelling or through a link is the same run."""
    rank = _run(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(rank, target_is_directory=True)
    spellings = [rank, rank, link, rank.parent / ".." / rank.parent.name / rank.name]
    assert main(["export", *map(str, spellings), "--out", str(tmp_path / "ds")]) == 0
    per_dialogue = Counter(d for j in read_run_log(rank).judgments for d in j.dialogues)
    assert {r["dialogue_id"]: len(r["judgments"]) for r in rows_of(tmp_path / "ds")} == dict(per_dialogue)
    card = (tmp_path / "ds" / "README.md").read_text()
    assert f"{sum(per_dialogue.values())} judgments from 1 rank.py run(s)" in card


def _two_runs_sharing_ids(tmp_path: Path) -> tuple[Path, Path]:
    """The same targets and cards played twice (other seeds: other words), each judged: every
    dialogue id is in both, each run's in its own files (a/.../t__r__en.jsonl, b/.../t__r__en.jsonl)."""
    a = synthetic_run(tmp_path / "a", cards=3, targets=2, dims=2, seed=1, bootstrap=0)
    b = synthetic_run(tmp_path / "b", cards=3, targets=2, dims=2, seed=2, bootstrap=0)
    return a, b


def test_two_runs_whose_dialogues_share_ids_stay_apart(tmp_path: Path) -> None:
    """Item 4: two runs whose dialogues share ids were merged: 18 rows instead of 30, and rows held two
    dialogues' judgments under one transcript. Each row is one dialogue of one file, and the runs
    (both folders are called `rank`) are told apart by their paths."""
    a, b = _two_runs_sharing_ids(tmp_path)
    assert main(["export", str(a), str(b), "--out", str(tmp_path / "ds")]) == 0
    table = rows_of(tmp_path / "ds")
    assert len(table) == 2 * 2 * 3  # runs x targets x cards
    played = {}
    for rank in (a, b):
        for source in json.loads((rank / "manifest.json").read_text())["sources"]:
            for line in Path(source).read_text().splitlines():
                d = json.loads(line)
                played[(Path(source).relative_to(tmp_path).as_posix(), d["card_id"])] = d
    for row in table:
        [run] = {j["run"] for j in row["judgments"]}
        assert row["runs"] == [run] and run in ("a/rank", "b/rank")
        assert row["source_file"].startswith(run[0] + "/")  # the file of its own run
        d = played[(row["source_file"], row["card_id"])]
        assert [t["text"] for t in row["transcript"][1:]] == [t["text"] for t in d["turns"]]
    assert len({(r["source_file"], r["dialogue_id"]) for r in table}) == len(table)
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "| a/rank |" in card and "| b/rank |" in card
    assert [r["run"] for r in json.loads((tmp_path / "ds" / "runs.json").read_text())] == ["a/rank", "b/rank"]


def test_a_dialogue_changed_after_judging_is_flagged_in_its_row(tmp_path: Path) -> None:
    """Item 10: a dialogue file changed after judging paired the new transcript with the old
    judgments, nothing said; the row says so (`changed`), as the site's page does."""
    rank = _run(tmp_path)
    source = Path(json.loads((rank / "manifest.json").read_text())["sources"][0])
    lines = source.read_text().splitlines()
    first = json.loads(lines[0])
    first["turns"][1]["text"] = "a reply written after the judge read the dialogue"
    lines[0] = json.dumps(first)
    source.write_text("\n".join(lines) + "\n")
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    changed = {r["dialogue_id"]: r["changed"] for r in rows_of(tmp_path / "ds")}
    assert changed.pop(f"{source.stem}/{first['card_id']}") is True
    assert set(changed.values()) == {False}
    assert "`changed`" in (tmp_path / "ds" / "README.md").read_text()


def test_export_into_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cd X && esc export RUN --out .` emptied X, then failed with OSError."""
    rank, out = _run(tmp_path), tmp_path / "ds"
    out.mkdir()
    monkeypatch.chdir(out)
    for _ in range(2):  # new (empty), then its own export
        assert main(["export", str(rank), "--out", "."]) == 0
        assert Path.cwd() == out and sorted(os.listdir(".")) == [
            ".esc-export", "README.md", "dialogues.parquet", "hf", "runs.json"
        ]  # fmt: skip
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_export_through_a_link_writes_the_folder_it_names(tmp_path: Path) -> None:
    """`--out LINK` crashed and left a hidden `.partial` copy; the folder the link names is written,
    the link stays."""
    rank, real = _run(tmp_path), tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    for _ in range(2):
        assert main(["export", str(rank), "--out", str(link)]) == 0
        assert link.is_symlink() and len(rows_of(real)) == 8
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_the_export_folder_opens_to_others_as_every_output_does(tmp_path: Path) -> None:
    """The export folder was created 0700 (mkdtemp's), where every other output is 0755."""
    rank = _run(tmp_path)
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    (tmp_path / "plain").mkdir()
    assert (tmp_path / "ds").stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777


def test_the_card_names_an_api_judges_model(tmp_path: Path) -> None:
    """The card listed a gpt4 judge's model and revision as None: an API judge's model is in its
    backend's identity."""
    rank = _run(tmp_path)
    log = json.loads((rank / "run.json").read_text())
    prompt = {"style": "paper", "version": 1, "sha256": "ab12"}
    backend = {"kind": "openai", "model": "gpt-4-0613", "revision": None, "base_url": None}
    log["header"]["judges"] = [
        {"kind": "api", "name": "synthetic_judge", "prompt": prompt, "backend": backend}
    ]
    (rank / "run.json").write_text(json.dumps(log))
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "| synthetic_judge | api | gpt-4-0613 | none (an API model) | paper | 1 | ab12 |" in card


def test_a_push_without_a_network_is_one_error_line_and_keeps_the_export(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--push` without a network was an 86-line traceback: the real push, to a port nothing listens on."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    rank = _run(tmp_path)
    err = refused(capsys, ["export", str(rank), "--out", str(tmp_path / "ds"), "--push", "me/esc"])
    assert "me/esc" in err and "Connection refused" in err and str(tmp_path / "ds") in err
    assert len(rows_of(tmp_path / "ds")) == 8


@pytest.mark.parametrize("task", ["safety", "pairwise"])
def test_a_run_of_questions_about_replies_or_pairs_shows_its_transcripts(tmp_path: Path, task: str) -> None:
    """An export of a safety-only or pairwise-only run showed no transcript, though its dialogue
    files exist: the run log's header names them."""
    rank = synthetic_run(tmp_path / "run", cards=2, targets=2, dims=1, seed=1, bootstrap=0,
                         safety=task == "safety", pairwise=task == "pairwise")  # fmt: skip
    log = json.loads((rank / "run.json").read_text())
    log["judgments"] = [j for j in log["judgments"] if j["task"] == task]
    (rank / "run.json").write_text(json.dumps(log))
    assert main(["export", str(rank), "--out", str(tmp_path / "ds")]) == 0
    table = rows_of(tmp_path / "ds")
    assert len(table) == 4 and all(r["transcript"] and r["missing"] is None for r in table)


def test_one_run_whose_own_files_share_a_name_is_refused_where_a_judgment_names_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """One run that read two folders of one target: a pairwise verdict names dialogue ids, no file,
    and both files hold each id: refused, naming both files and the id, rather than guessed."""
    a = synthetic_run(tmp_path / "a", cards=1, targets=2, dims=1, seed=1, bootstrap=0, pairwise=True)
    b = synthetic_run(tmp_path / "b", cards=1, targets=2, dims=1, seed=2, bootstrap=0)
    log = json.loads((a / "run.json").read_text())
    log["header"]["sources"] += json.loads((b / "run.json").read_text())["header"]["sources"]
    (a / "run.json").write_text(json.dumps(log))
    err = refused(capsys, ["export", str(a), "--out", str(tmp_path / "ds")])
    first, second = str(tmp_path / "a" / "evaluate"), str(tmp_path / "b" / "evaluate")
    assert first in err and second in err and "both hold dialogue 'target_00__esc_role__" in err
    assert not (tmp_path / "ds").exists()


def test_force_keeps_a_persons_file_even_where_the_export_writes_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--force` writes beside a person's files, never over one: their README.md in a folder the
    export did not write is refused even so, and nothing is changed."""
    rank, out = _run(tmp_path), tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("# my notes")
    (out / "data.csv").write_text("a,b\n")
    err = refused(capsys, ["export", str(rank), "--out", str(out), "--force"])
    assert f"{out}: holds README.md, which `esc export` did not write and would write over" in err
    assert sorted(os.listdir(out)) == ["README.md", "data.csv"]
    assert (out / "README.md").read_text() == "# my notes"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
