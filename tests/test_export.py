"""`esc export` (issue 54, item 4): one row per dialogue of rank.py runs as Parquet and a `datasets`
folder with its card; the rows match the run log and the dialogue files (counted here from them);
secrets are masked; `--push` goes through `Dataset.push_to_hub` (a local stand-in, never the network)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from esc.cli import main
from esc.reports.runlog import read_run_log
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
    judge = log.header["judges"][0] if isinstance(log.header["judges"], list) else log.header["judges"]
    assert "configs:" in card and judge["name"] in card and f"{len(table)} dialogues" in card
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
