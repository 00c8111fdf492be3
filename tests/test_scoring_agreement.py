"""Human annotations, agreement metrics, rank.py mode=agreement, ESC-RANK training, and rank.py
resuming after SIGKILL. Offline, CPU, tiny model."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from esc.annotate.human_scores import (
    Annotation,
    esconv_annotations,
    human_reference,
    read_annotations,
    split_by_dialogue,
    write_annotations,
)
from esc.errors import DataError
from esc.reports.result import Cell, read_result
from esc.scoring.rubrics import dimension
from esc.scoring.store import read_scores
from esc.tasks.agreement import report as agree
from tests.helpers import kill_entry_when, requires_data, run_entry

DIALOGUE = [{"role": "user", "content": "I lost my job."}, {"role": "assistant", "content": "That is hard."}]


def row(dialogue_id: str = "d1", dimension: str = "empathy", score: object = 3, annotator: str = "a") -> str:
    record = {
        "dialogue_id": dialogue_id,
        "language": "en",
        "dialogue": DIALOGUE,
        "dimension": dimension,
        "score": score,
        "annotator": annotator,
    }
    return json.dumps(record) + "\n"


# --- annotation files ------------------------------------------------------------------------------


def test_annotations_read_and_write_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ann.jsonl"
    path.write_text(row() + row(dimension="tech", score=0) + row(annotator="b", score=4))
    anns = read_annotations(path)
    assert [(a.dimension, a.score, a.annotator) for a in anns] == [
        ("empathy", 3, "a"),
        ("skill", 0, "a"),  # the official key `tech` is the canonical `skill`
        ("empathy", 4, "b"),
    ]
    assert anns[0].lines == (("user", "I lost my job."), ("assistant", "That is hard."))
    write_annotations(anns, tmp_path / "copy.jsonl")
    assert read_annotations(tmp_path / "copy.jsonl") == anns
    assert human_reference(anns) == {("d1", "empathy"): 3, ("d1", "skill"): 0}  # median of 3, 4: lower


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        ([row(), row(score=5)], "line 2", "score must be an integer 0-4, got 5"),
        ([row(score=-1)], "line 1", "score must be an integer 0-4"),
        ([row(score=2.5)], "line 1", "score must be an integer 0-4"),
        ([row(score=True)], "line 1", "score must be an integer 0-4"),
        ([row(), row(), row()], "line 2", "duplicate of line 1"),
        ([row(), row(dimension="kindness")], "line 2", "kindness"),
        ([row().replace('"dialogue_id": "d1", ', "")], "line 1", "missing field `dialogue_id`"),
        ([row().replace('"role": "user"', '"role": "seeker"')], "line 1", "dialogue[0]"),
        ([row(), "{not json\n"], "line 2", ""),
    ],
)
def test_bad_annotation_rows_are_one_line_errors(
    tmp_path: Path, lines: list[str], where: str, message: str
) -> None:
    path = tmp_path / "ann.jsonl"
    path.write_text("".join(lines))
    with pytest.raises(DataError) as err:
        read_annotations(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and where in text and message in text


def test_empty_annotation_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(DataError, match="empty file"):
        read_annotations(path)


def test_split_is_by_dialogue_seeded_and_near_7_1_2() -> None:
    anns = [
        Annotation(f"d{i}", "en", (("user", "x"),), dim, 2, "a")
        for i in range(2000)
        for dim in ("empathy", "overall")
    ]
    parts = split_by_dialogue(anns, seed=42)
    assert split_by_dialogue(anns, seed=42) == parts
    assert split_by_dialogue(anns, seed=7) != parts
    owner = {}
    for name, part in parts.items():
        for a in part:
            assert owner.setdefault(a.dialogue_id, name) == name  # a dialogue never straddles splits
    shares = {name: len({a.dialogue_id for a in part}) / 2000 for name, part in parts.items()}
    assert (
        abs(shares["train"] - 0.7) < 0.04
        and abs(shares["val"] - 0.1) < 0.03
        and abs(shares["test"] - 0.2) < 0.03
    )


@requires_data
def test_esconv_annotations_follow_the_documented_mapping() -> None:
    from esc.corpora.esconv import esconv_path
    from esc.jsonl import read_jsonl
    from esc.paths import data_dir

    anns = esconv_annotations()
    assert {a.dimension for a in anns} == {"empathy", "fluency", "overall"}  # the others have no ratings
    assert all(0 <= a.score <= 4 and a.annotator == "seeker" and a.language == "en" for a in anns)
    _, first = next(iter(read_jsonl(esconv_path(data_dir(), "train"))))
    by_dim = {a.dimension: a for a in anns if a.dialogue_id == "esconv/train/0"}
    assert by_dim["empathy"].score == int(first["empathy"]) - 1
    assert by_dim["fluency"].score == int(first["relevance"]) - 1
    feedback = [int(u["rating"]) for u in first["dialog"][:12] if u["speaker"] == "usr" and u.get("rating")]
    if feedback:
        assert by_dim["overall"].score == int(sum(feedback) / len(feedback) - 1 + 0.5)
    assert len(by_dim["empathy"].lines) <= 12


# --- agreement metrics ----------------------------------------------------------------------------

PRED = [0, 1, 2, 3, 4, 2]
HUMAN = [0, 2, 2, 1, 4, 3]


def one_row(pred, human, n_resamples: int = 200, reading: str = "argmax", expected=None) -> agree.Row:
    """The row of judge "j" in a one-dimension table (items are their own units)."""
    items = [agree.Item((f"d{i}", "empathy"), h, f"d{i}") for i, h in enumerate(human)]
    expected = expected or [None] * len(pred)
    rows = {"j": {it.key: agree.Prediction(p, e) for it, p, e in zip(items, pred, expected, strict=True)}}
    return agree.find_row(agree.agreement_tables(items, rows, n_resamples), "empathy", "j", reading)


def test_accuracy_soft_accuracy_and_mae_by_hand() -> None:
    r = one_row(PRED, HUMAN)
    assert r.values["acc"] == pytest.approx(3 / 6)  # items 0, 2, 4
    assert r.values["acc_soft"] == pytest.approx(5 / 6)  # all but 3 vs 1
    assert r.values["mae"] == pytest.approx((0 + 1 + 0 + 2 + 0 + 1) / 6)


def test_quadratic_weighted_kappa_by_hand_and_as_scikit_learn() -> None:
    from sklearn.metrics import cohen_kappa_score

    observed = np.zeros((5, 5))
    for h, p in zip(HUMAN, PRED, strict=True):
        observed[h, p] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    weights = np.array([[(i - j) ** 2 / 16 for j in range(5)] for i in range(5)])
    kappa = 1 - (weights * observed).sum() / (weights * expected).sum()
    assert one_row(PRED, HUMAN).values["qwk"] == pytest.approx(kappa)
    rng = np.random.default_rng(3)
    for _ in range(20):  # on integer scores the formula is scikit-learn's quadratic kappa
        h, p = rng.integers(0, 5, 40), rng.integers(0, 5, 40)
        sk = cohen_kappa_score(h, p, weights="quadratic", labels=list(range(5)))
        assert agree.qwk(p.astype(float), h.astype(float)) == pytest.approx(sk)
    assert agree.qwk(np.full(10, 4.0), rng.integers(0, 5, 10).astype(float)) == pytest.approx(0.0)


def test_correlations_by_hand() -> None:
    x, y = np.array(PRED, float), np.array(HUMAN, float)
    pearson = ((x - x.mean()) * (y - y.mean())).sum() / math.sqrt(
        ((x - x.mean()) ** 2).sum() * ((y - y.mean()) ** 2).sum()
    )

    def ranks(v: np.ndarray) -> np.ndarray:  # average ranks for ties
        return np.array([np.mean([j for j, w in enumerate(sorted(v)) if w == u]) for u in v])

    rx, ry = ranks(x), ranks(y)
    spearman = ((rx - rx.mean()) * (ry - ry.mean())).sum() / math.sqrt(
        ((rx - rx.mean()) ** 2).sum() * ((ry - ry.mean()) ** 2).sum()
    )
    # Kendall's tau-b: (concordant - discordant) / sqrt((n0 - ties_x)(n0 - ties_y))
    pairs = [(i, j) for i in range(6) for j in range(i + 1, 6)]
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in pairs)
    tx = sum(1 for i, j in pairs if x[i] == x[j])
    ty = sum(1 for i, j in pairs if y[i] == y[j])
    kendall = s / math.sqrt((len(pairs) - tx) * (len(pairs) - ty))
    r = one_row(PRED, HUMAN)
    assert r.values["pearson"] == pytest.approx(pearson)
    assert r.values["spearman"] == pytest.approx(spearman)
    assert r.values["kendall"] == pytest.approx(kendall)


def test_invalid_counts_as_wrong_for_accuracy_and_is_left_out_of_the_rest() -> None:
    r = one_row([None, 1, 2], [0, 1, 2])
    assert r.n == 3 and r.n_invalid == 1 and r.n_common == 2
    assert r.values["acc"] == pytest.approx(2 / 3) and r.values["acc_soft"] == pytest.approx(2 / 3)
    assert r.values["mae"] == 0.0  # over the two valid items only


def test_expected_reading_rounds_for_accuracy_and_keeps_the_value_for_the_rest() -> None:
    r = one_row([1, 2, 3], [1, 2, 4], reading="expected", expected=[1.4, 2.6, 3.5])
    assert r.values["acc"] == pytest.approx(2 / 3)  # 1.4 -> 1, 2.6 -> 3, 3.5 -> 4 (half up)
    assert r.values["mae"] == pytest.approx((0.4 + 0.6 + 0.5) / 3)
    p, h = np.array([1.4, 2.6, 3.5]), np.array([1.0, 2.0, 4.0])
    assert r.values["qwk"] == pytest.approx(
        1 - np.mean((p - h) ** 2) / (p.var() + h.var() + (p.mean() - h.mean()) ** 2)
    )


def test_intervals_cover_the_value_and_constant_series_have_no_correlation() -> None:
    rng = np.random.default_rng(0)
    human = rng.integers(0, 5, 200).tolist()
    noisy = [int(np.clip(h + rng.integers(-1, 2), 0, 4)) for h in human]
    r = one_row(noisy, human, n_resamples=300)
    for metric in agree.METRICS:
        assert r.intervals[metric].low <= r.values[metric] <= r.intervals[metric].high, metric
        assert r.intervals[metric].undefined == 0.0
    constant = one_row([2] * 50, human[:50], n_resamples=100)
    assert math.isnan(constant.values["spearman"]) and constant.intervals["spearman"].undefined == 1.0


def test_baselines_majority_and_length() -> None:
    assert agree.majority_baseline([1, 3, 3, 1, 2]) == 3  # a tie goes to the higher score
    fit = agree.length_baseline([10, 20, 30, 40], [0, 1, 2, 3])
    assert [fit(10), fit(27), fit(1000)] == pytest.approx([0, 1.7, 4])  # the line, clipped to 0-4


# --- end to end ------------------------------------------------------------------------------------


def small_annotations(tmp_path: Path, dialogues: int = 40) -> Path:
    """The first `dialogues` dialogues of the shipped ESConv annotations."""
    from esc.annotate.human_scores import default_esconv_path, load_annotations

    anns = load_annotations(
        {"annotations": str(default_esconv_path()) if default_esconv_path().is_file() else None}
    )
    keep = list(dict.fromkeys(a.dialogue_id for a in anns))[:dialogues]
    path = tmp_path / "annotations.jsonl"
    write_annotations([a for a in anns if a.dialogue_id in set(keep)], path)
    return path


def _figures(out: Path, name: str = "all figures") -> dict[tuple[str, ...], dict[str, Cell]]:
    """The rows of OUT/agreement.result.json's table `name` by their labels (source, Dim., Judge,
    then reading, or vs and reading), each column -> cell."""
    [table] = [t for t in read_result(out / "agreement.result.json").tables() if t.name == name]
    width = 4 if name == "all figures" else 5
    return {
        tuple(c.text for c in row[:width]): dict(zip(table.columns, row, strict=True)) for row in table.rows
    }


@requires_data
def test_rank_py_agreement_mode_with_the_tiny_judge(tmp_path: Path) -> None:
    annotations = small_annotations(tmp_path)
    out = tmp_path / "agree"
    args = [
        "mode=agreement",
        "judge=tiny",
        f"agreement.annotations={annotations}",
        "agreement.split=all",
        "agreement.bootstrap=100",
        "scoring.progress=false",
        f"hydra.run.dir={out}",
    ]
    result = run_entry("rank.py", args)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = _figures(out)  # every figure, from the report's table (agreement.csv holds the same)
    anns = read_annotations(annotations)
    n = len({(a.dialogue_id, a.dimension) for a in anns})
    dims = {a.dimension for a in anns}
    everything = {k[1:]: row for k, row in figures.items() if k[0] == "all sources"}
    assert sum(int(everything[(dimension(d).short, "tiny", "argmax")]["n"].text) for d in dims) == n
    [pooled] = [row for (dim, judge, reading), row in everything.items() if dim.startswith("pooled")
                and (judge, reading) == ("tiny", "argmax")]  # fmt: skip
    assert int(pooled["n"].text) == n
    # split=all evaluates the train split too: baselines fitted there would be scored in-sample, so
    # they are left out and the report says why (issue 52, item 10)
    assert {judge for dim, judge, _ in everything if dim == "Empa."} == {"tiny"}
    assert "Baselines left out: with agreement.split=all" in (out / "agreement.md").read_text()
    acc = everything[("Empa.", "tiny", "argmax")]["ACC"]
    assert acc.low <= acc.value <= acc.high
    sources = {k[0] for k in figures}
    assert sources == {"all sources", "esconv", "failedesconv"} or sources == {"all sources"}
    with (out / "agreement.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(figures)
    assert len(list(read_scores(out / "scores" / "annotations__tiny.jsonl"))) == n
    assert "| Empa. | tiny | argmax |" in (out / "agreement.md").read_text()
    # the same judgments, read back from the score file instead of judged again
    again = run_entry(
        "rank.py", [*args[:-1], f"scores=[{out / 'scores'}]", f"hydra.run.dir={tmp_path / 'b'}"]
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert _figures(tmp_path / "b") == figures


@requires_data
def test_tiny_esc_rank_training_reports_agreement_and_resumes(tmp_path: Path) -> None:
    annotations = small_annotations(tmp_path, dialogues=60)
    out = tmp_path / "rank"
    args = [
        "+exp=train/esc_rank",
        "model=tiny",
        "cpu_fallback=true",
        "trainer.max_steps=3",
        "logger=csv",
        f"data.annotations={annotations}",
        "data.dimensions=[empathy,overall]",
        "rank.bootstrap=100",
        "rank.min_answer_mass=0",  # random weights put ~0.1% on "0".."4" even after training
        f"hydra.run.dir={out}",
    ]
    result = run_entry("train.py", args)
    assert result.returncode == 0, result.stderr[-3000:]
    for dim in ("empathy", "overall"):
        assert (out / dim / "adapter_model.safetensors").is_file()
    assert not (out / "fluency").exists()  # not selected
    summary = {k[1:]: row for k, row in _figures(out).items() if k[0] == "all sources"}
    rank, base = "ESC-RANK (tiny, per_dimension)", "tiny zero-shot"
    assert {dim.split(" (")[0] for dim, _, _ in summary} == {"Empa.", "Over.", "Aver.", "pooled"}
    judges = [judge for dim, judge, reading in summary if (dim, reading) == ("Empa.", "argmax")]
    assert judges == [rank, base, "majority (train)", "dialogue length (train fit)"]
    differences = _figures(out, "all differences")
    for dim in ("Empa.", "Over."):
        for reading in ("argmax", "expected"):
            acc = summary[(dim, rank, reading)]["ACC"]
            assert 0 <= acc.low <= acc.value <= acc.high <= 1
            assert summary[(dim, rank, reading)]["ACC_soft"].value >= acc.value
        assert {(k[2], k[3]) for k in differences if k[1] == dim} == {(rank, other) for other in judges[1:]}
    assert (
        "ACC_soft" in result.stdout
        and "| Aver. (2 of 2 dim.: Empa., Over.) | ESC-RANK (tiny, per_dimension) |" in result.stdout
    )
    trained = json.loads((out / "trained_on.json").read_text())["dialogues"]
    judged = {r.dialogue_id for r in read_scores(out / "test_scores" / "rank.jsonl")}
    assert trained and judged and not set(trained) & judged  # never measured on what it learned
    # rank.py on every split still leaves out what the adapters learned from (trained_on.json)
    agreement = tmp_path / "agree-all"
    every = run_entry("rank.py", [
        "mode=agreement", "judge=tiny", "judge.adapters.layout=per_dimension", f"judge.adapters.root={out}",
        "judge.adapters.dimensions=[empathy,overall]",
        f"agreement.annotations={annotations}", "agreement.split=all", "dimensions=[empathy,overall]",
        "agreement.bootstrap=20", "scoring.progress=false", f"hydra.run.dir={agreement}",
    ])  # fmt: skip
    assert every.returncode == 0, every.stderr[-3000:]
    scored = {r.dialogue_id for r in read_scores(agreement / "scores" / "annotations__tiny.jsonl")}
    everything = {a.dialogue_id for a in read_annotations(annotations)}
    assert scored == everything - set(trained)  # the test split only: train and val left out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["dimensions_trained"] == ["empathy", "overall"]
    assert manifest["split"]["test"] > 0
    again = run_entry("train.py", args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (again.stdout + again.stderr).count("already trained") == 2  # nothing trained twice
    assert {k[1:]: row for k, row in _figures(out).items() if k[0] == "all sources"} == summary  # resumed


def test_rank_py_resumes_after_sigkill(tmp_path: Path) -> None:
    dialogues = tmp_path / "eval"
    made = run_entry(
        "evaluate.py",
        [
            "roleplayer=tiny",
            "target=tiny",
            "cards.limit=4",
            "cards.languages=[en]",
            "engine.progress=false",
            "cache.enabled=false",
            f"hydra.run.dir={dialogues}",
        ],
    )
    assert made.returncode == 0, made.stderr[-3000:]
    common = [
        "judge=tiny",
        f"dialogues={dialogues}",
        "scoring.chunk=2",
        "scoring.progress=false",
        "leaderboard.charts=false",
        "leaderboard.bootstrap=50",
    ]
    whole = run_entry("rank.py", [*common, f"hydra.run.dir={tmp_path / 'whole'}"])
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "killed"
    path = out / "scores" / "tiny__tiny__en__tiny.jsonl"
    kill_entry_when(
        "rank.py",
        [*common, f"hydra.run.dir={out}"],
        lambda: path.exists() and path.read_bytes().count(b"\n") >= 4,
    )
    written = path.read_bytes().count(b"\n")
    assert 4 <= written < 28, f"kill came at the wrong moment ({written} judgments written)"
    again = run_entry("rank.py", [*common, f"hydra.run.dir={out}"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"({written} already done)" in again.stdout

    def scores(p: Path) -> dict:
        return {r.key: (r.status, r.score, r.probs) for r in read_scores(p)}

    assert scores(path) == scores(tmp_path / "whole" / "scores" / path.name)
    assert len(list(read_scores(path))) == 28  # each (dialogue, dimension) once


@requires_data
def test_rank_py_correlation_mode_and_wandb_tables(tmp_path: Path) -> None:
    annotations = small_annotations(tmp_path)
    judged = tmp_path / "agree"
    args = [
        "mode=agreement",
        "judge=tiny",
        f"agreement.annotations={annotations}",
        "agreement.split=all",
        "agreement.bootstrap=50",
        "dimensions=[empathy]",
        "scoring.progress=false",
        f"hydra.run.dir={judged}",
    ]
    assert run_entry("rank.py", args).returncode == 0
    out = tmp_path / "corr"
    args = [
        "mode=correlation",
        f"correlation.annotations={annotations}",
        f"correlation.scores=[{judged}]",
        "correlation.bootstrap=50",
        "wandb.enabled=true",
        f"hydra.run.dir={out}",
    ]
    result = run_entry("rank.py", args, env={"WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stderr[-3000:]
    markdown = (out / "correlation.md").read_text()
    assert (
        f" of {len({a.dialogue_id for a in read_annotations(annotations)})} annotated dialogues" in markdown
    )
    assert "| ESC-Empathy |" in markdown and "| Distinct-1 |" in markdown
    assert "| BLEU-1 | 0 | not computed: no references file" in markdown  # never invented
    logged = {
        t.name.split("_0_")[0]: t
        for t in (out / "wandb").glob("offline-run-*/files/media/table/*.table.json")
    }
    assert set(logged) == {"correlation", "correlation_dialogues", "correlation_rows"}  # the report's CSVs
    table = json.loads(logged["correlation"].read_text())
    assert table["columns"][:3] == ["level", "Metric", "Fluency Spear."] and table["data"]
    assert [table["columns"], *table["data"]] == list(csv.reader((out / "correlation.csv").open()))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["wandb_dir"]


def test_rank_py_empty_dialogue_file_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "bot__rp__en.jsonl").write_text("")
    result = run_entry(
        "rank.py", ["judge=tiny", f"dialogues={tmp_path}", f"hydra.run.dir={tmp_path / 'out'}"]
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "bot__rp__en.jsonl" in error and "empty file" in error


def test_sample_dialogues_is_seeded_and_keeps_whole_dialogues() -> None:
    from esc.tasks.agreement.data import sample_dialogues

    anns = [
        Annotation(f"d{i}", "en", (("user", "x"),), dim, 2, "a")
        for i in range(50)
        for dim in ("empathy", "overall")
    ]
    picked = sample_dialogues(anns, 10, seed=1)
    assert picked == sample_dialogues(anns, 10, seed=1) != sample_dialogues(anns, 10, seed=2)
    ids = {a.dialogue_id for a in picked}
    assert len(ids) == 10 and len(picked) == 20  # both dimensions of each dialogue
    assert ids != {f"d{i}" for i in range(10)}  # a sample, not the file's first ten
    assert sample_dialogues(anns, None) == anns
