"""The report site (`esc report`, esc/site/): pages that open from disk and show what the
run folders hold, model text escaped. Runs are synthetic (`tests.synthetic_run.synthetic_run`:
the dialogue and score file formats evaluate.py and rank.py write), so nothing here loads a model."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from esc.cli import main
from esc.scoring.store import latest, read_scores
from esc.site import build_site, slugify
from tests.synthetic_run import inject_text, synthetic_run

INJECTION = "<script>alert(1)</script>"
#: what write_site reads of a resolved rank.py config (conf/rank.yaml's values)
LEADERBOARD = {"bootstrap": 1000, "charts": True, "breakdowns": True, "min_n": 10, "cards": None}
REPORT_ON = {"report": {"enabled": True, "title": None}, "leaderboard": LEADERBOARD}
DIMENSIONS = ("fluency", "diversity", "empathy", "suggestion", "skill", "humanoid", "overall")  # Table 2


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("report")
    rank = synthetic_run(
        root / "run", cards=6, targets=["alpha", "Beta/2"], dims=7, seed=3, safety=True, pairwise=True
    )
    target, language, card = inject_text(rank, INJECTION)
    result = build_site([rank], root / "site", title="Test site", n_resamples=50)
    return {"rank": rank, "out": root / "site", "result": result, "injected": (target, language, card)}


def score_records(rank: Path) -> dict[tuple[str, str], object]:
    records = {}
    for path in sorted((rank / "scores").glob("*.jsonl")):
        records.update(latest(read_scores(path)))
    return records


def links(page: Path) -> list[str]:
    return re.findall(r'(?:href|src)="([^"]*)"', page.read_text(encoding="utf-8"))


def test_every_page_is_written_and_every_link_is_a_relative_file(site: dict) -> None:
    out, result = site["out"], site["result"]
    assert result.index == out / "index.html"
    assert result.pages == {"overview": 1, "targets": 2, "dialogues": 12, "compare": 6, "reports": 0}
    assert (out / "static" / "site.css").is_file() and (out / "static" / "site.js").is_file()
    slug = slugify("Beta/2")
    assert slug != "Beta/2" and "/" not in slug
    assert (out / "targets" / "alpha.html").is_file() and (out / "targets" / f"{slug}.html").is_file()
    pages = sorted(out.rglob("*.html"))
    assert len(pages) == sum(result.pages.values())
    for page in pages:
        for link in links(page):
            if link.startswith("#"):
                continue  # within the page (an SVG's own definitions)
            assert not re.match(r"^(https?:)?//|^/", link), f"{page}: {link} is not a relative link"
            assert (page.parent / link.split("#")[0]).resolve().is_file(), f"{page}: {link} leads nowhere"
    script = (out / "static" / "site.js").read_text() + (out / "static" / "site.css").read_text()
    assert not re.search(r"fetch\(|XMLHttpRequest|import\s|url\(|https?:", script)  # nothing from the network


def test_dialogue_pages_show_the_scores_of_the_score_files(site: dict) -> None:
    records = score_records(site["rank"])
    pages = sorted((site["out"] / "dialogues").rglob("*.html"))
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        dialogue_id = re.search(r"<code>([^<]+/\d+)</code> in", text).group(1)
        shown = dict(
            re.findall(r'data-dimension="(\w+)">\s*<td>[^<]*</td>\s*<td class="num score">(.*?)</td>', text)
        )
        assert set(shown) == set(DIMENSIONS)
        for key, cell in shown.items():
            record = records[(dialogue_id, key)]
            if record.status == "valid":
                assert cell == str(record.score), (page, key)
            else:
                assert record.status in cell, (page, key)
            checked += 1
    assert checked == 12 * 7


def test_target_pages_list_the_worst_dialogue_first_with_its_scores(site: dict) -> None:
    records = score_records(site["rank"])
    text = (site["out"] / "targets" / "alpha.html").read_text(encoding="utf-8")
    averages = [float(a) for a in re.findall(r'<tr data-language=[^>]* data-avg="([0-9.]+)"', text)]
    assert len(averages) == 6 and averages == sorted(averages)
    for row in re.findall(r'<tr data-language="(\w+)".*?</tr>', text, flags=re.S):
        assert row in ("en", "zh")
    first = re.search(r"<tr data-language=.*?</tr>", text, flags=re.S).group(0)
    label = re.search(r'<a href="[^"]+">(\w+)-(\d+)</a>', first)
    stem = f"alpha__esc_role__{label.group(1)}"
    cells = re.findall(r'<td class="num s-(\w+)" data-sort="[^"]*">([^<]*)</td>', first)
    assert len(cells) == 7
    for key, (status, value) in zip(DIMENSIONS, cells, strict=True):
        record = records[(f"{stem}/{label.group(2)}", key)]
        assert status == record.status
        assert value == (str(record.score) if record.status == "valid" else record.status)


def test_model_text_is_shown_as_text_never_run(site: dict) -> None:
    target, language, card = site["injected"]
    page = site["out"] / "dialogues" / slugify(target) / f"{language}-{card}.html"
    text = page.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in text  # the reply
    assert "Score: &lt;script&gt;alert(1)&lt;/script&gt;" in text  # the judge's reply of an invalid judgment
    for page in site["out"].rglob("*.html"):
        scripts = re.findall(r"<script[^>]*>", page.read_text(encoding="utf-8"))
        assert scripts == [
            f'<script src="{"../" * (len(page.relative_to(site["out"]).parts) - 1)}static/site.js">'
        ]


def test_dialogue_pages_show_trajectory_safety_and_pairwise(site: dict) -> None:
    text = (site["out"] / "dialogues" / "alpha").glob("*.html").__next__().read_text(encoding="utf-8")
    assert '<svg class="trajectory"' in text and "<polyline points=" in text
    assert "Safety checklist" in text and "risk_missed" in text
    assert "Pairwise verdicts" in text and "Beta/2" in text
    assert "compare/" in text


def test_the_overview_has_the_leaderboard_charts_counts_and_the_manifest(site: dict) -> None:
    text = (site["out"] / "index.html").read_text(encoding="utf-8")
    board = re.search(r'<table class="sortable board".*?</table>', text, flags=re.S).group(0)
    assert board.count("<tr>") == 1 + 4  # header, 2 targets x 2 languages
    assert 'href="targets/alpha.html"' in board
    assert text.count("<svg") == 4  # a radar and a bar chart per language
    assert "Judgments" in text and "synthetic_judge" in text and "official v2" in text
    assert "safety question" in text and "safety v1" in text and "pairwise v1" in text  # each question named
    assert "git commit" in text and "synthetic" in text


def test_a_dialogue_file_that_is_gone_leaves_its_scores_on_the_page(tmp_path: Path) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=1)
    manifest = json.loads((rank / "manifest.json").read_text())
    gone = Path(manifest["sources"][0])
    gone.unlink()
    result = build_site([rank], tmp_path / "site", n_resamples=10)
    page = next((tmp_path / "site" / "dialogues").rglob(f"{gone.stem.split('__')[-1]}-*.html"))
    text = page.read_text(encoding="utf-8")
    assert f"the dialogue file {gone} no longer exists" in text
    assert len(re.findall(r'class="num score"', text)) == 7
    assert result.pages["dialogues"] == 2
    assert "no transcript" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_an_agreement_run_gets_its_table_and_a_scatter(tmp_path: Path) -> None:
    run = tmp_path / "agree"
    annotations = tmp_path / "ann.jsonl"
    lines, scores = [], []
    for i in range(12):
        lines.append(
            {
                "dialogue_id": f"esconv/test/{i}",
                "language": "en",
                "dimension": "empathy",
                "score": i % 5,
                "annotator": "seeker",
                "source": "esconv",
                "dialogue": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            }
        )
        scores.append(
            {
                "dialogue_id": f"esconv/test/{i}",
                "dimension": "empathy",
                "language": "en",
                "judge": "j",
                "prompt": {"style": "official", "version": 2},
                "status": "valid",
                "score": i % 5,
                "expected": (i % 5) * 0.9,
                "probs": [0.2] * 5,
                "answer_mass": 1.0,
            }
        )
    annotations.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "scores").mkdir(parents=True)
    (run / "scores" / "annotations__j.jsonl").write_text("".join(json.dumps(x) + "\n" for x in scores))
    (run / "manifest.json").write_text(
        json.dumps({"config": {"mode": "agreement", "agreement": {"annotations": str(annotations)}}})
    )
    (run / "agreement.md").write_text(
        f"# j against people\n\n| Dim. | ACC |\n|---|---|\n| Empa. {INJECTION} | 50.0 |\n"
    )
    build_site([run], tmp_path / "site", n_resamples=10)
    page = tmp_path / "site" / "runs" / "agree-agreement.html"
    text = page.read_text(encoding="utf-8")
    assert "<table>" in text and "<td>Empa. &lt;script&gt;alert(1)&lt;/script&gt;</td>" in text
    assert "<svg" in text and "Empathy (n=12)" in text
    assert 'href="runs/agree-agreement.html"' in (tmp_path / "site" / "index.html").read_text()


def test_a_new_build_replaces_an_old_site_but_never_another_folder(tmp_path: Path) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=2)
    site = tmp_path / "site"
    build_site([synthetic_run(tmp_path / "two", cards=2, targets=2, dims=7, seed=2)], site, n_resamples=10)
    stale = site / "targets" / "target_01.html"  # a page of the old site that the new one lacks
    assert stale.is_file()
    build_site([rank], site, n_resamples=10)
    assert not stale.exists() and (site / "index.html").is_file()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(Exception, match="not empty and not a site"):
        build_site([rank], other)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(Exception, match="holds the run folder"):
        build_site([rank], rank.parent)
    assert not list(tmp_path.glob(".*building*"))


def test_a_build_removes_what_a_killed_build_left_and_keeps_a_running_ones(tmp_path: Path) -> None:
    """Issue 36: kill -9 of `esc report` left `.site.building-PID` behind after the next good build."""
    import subprocess
    import sys

    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=3)
    script = "import os; print(os.getpid())"
    gone = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)  # a process that has ended
    for kind in ("building", "old"):
        (tmp_path / f".site.{kind}-{dead_pid}" / "dialogues").mkdir(parents=True)
    running = tmp_path / f".site.building-{os.getppid()}"  # a live process's build: not ours to remove
    running.mkdir()
    build_site([rank], tmp_path / "site", n_resamples=10)
    assert sorted(p.name for p in tmp_path.glob(".site.*")) == [running.name]


def test_the_cli_builds_a_site_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=2, dims=7, seed=4)
    assert (
        main(["report", str(rank), "--out", str(tmp_path / "site"), "--title", "T", "--bootstrap", "10"]) == 0
    )
    out = capsys.readouterr().out
    assert out.startswith(f"site: {tmp_path / 'site' / 'index.html'} (") and "4 dialogues" in out
    assert "<title>Overview · T</title>" in (tmp_path / "site" / "index.html").read_text()


@pytest.mark.parametrize("case", ["empty folder", "no such folder", "only dialogues"])
def test_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture, case: str) -> None:
    folder = tmp_path / "out"
    if case != "no such folder":
        folder.mkdir()
    if case == "only dialogues":  # an evaluate.py folder, not a rank.py one
        (folder / "dialogues").mkdir()
        (folder / "dialogues" / "a__b__en.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit) as done:
        main(["report", str(folder), "--out", str(tmp_path / "site")])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {folder}: no ")
    assert not (tmp_path / "site").exists()


def test_slugs_are_file_names_and_never_collide() -> None:
    names = ["gpt-4", "GPT-4", "a/b", "a b", "..", "模型", "llama3_8b_instruct", "x" * 200]
    slugs = [slugify(n) for n in names]
    assert len({s.lower() for s in slugs}) == len(names)
    assert slugify("llama3_8b_instruct") == "llama3_8b_instruct"
    for slug in slugs:
        assert re.fullmatch(r"[a-z0-9._-]+", slug) and not slug.startswith(".") and len(slug) <= 67


def test_the_site_works_without_the_role_cards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=5)
    monkeypatch.setenv("ESC_DATA_DIR", str(tmp_path / "no-data"))
    build_site([rank], tmp_path / "site", n_resamples=10)
    assert "every topic and source is unknown" in (tmp_path / "site" / "index.html").read_text()


@pytest.mark.slow
def test_a_real_run_of_the_tiny_model(tmp_path: Path) -> None:
    """evaluate.py and rank.py (score, then safety into the same folder) on the tiny model, as a user
    runs them; the site shows the score files' scores and the stored emotion ratings."""
    from tests.helpers import run_entry

    evaluate = [f"hydra.run.dir={tmp_path / 'eval'}", "roleplayer=tiny", "target=tiny", "cards.limit=2",
                "engine.progress=false", "cache.enabled=false", "trajectory.enabled=true"]  # fmt: skip
    done = run_entry("evaluate.py", evaluate)
    assert done.returncode == 0, done.stderr[-2000:]
    for mode in ("score", "safety"):
        done = run_entry("rank.py", [f"mode={mode}", "judge=tiny", f"dialogues={tmp_path / 'eval'}",
                                     f"hydra.run.dir={tmp_path / 'rank'}", "scoring.progress=false",
                                     "cache.enabled=false"])  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    result = build_site([tmp_path / "rank"], tmp_path / "site", n_resamples=20)
    assert result.pages["dialogues"] == 4 and result.pages["reports"] == 2  # leaderboard.md, safety.md
    records = score_records(tmp_path / "rank")
    for page in (tmp_path / "site" / "dialogues").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        dialogue_id = re.search(r"<code>([^<]+/\d+)</code> in", text).group(1)
        for key, cell in re.findall(
            r'data-dimension="(\w+)">\s*<td>[^<]*</td>\s*<td class="num score">(.*?)</td>', text
        ):
            assert cell == str(records[(dialogue_id, key)].score)
        assert '<svg class="trajectory"' in text and "Safety checklist" in text


def test_two_runs_whose_dialogue_files_share_a_name_are_refused(tmp_path: Path) -> None:
    """Two runs of one target and role-player: the same dialogue ids from two files would put one
    run's scores beside the other's transcripts; the site refuses with one line instead."""
    from esc.errors import UserError

    first = synthetic_run(tmp_path / "a", cards=3, targets=["bot"], dims=2, seed=1, judge="ja")
    second = synthetic_run(tmp_path / "b", cards=3, targets=["bot"], dims=2, seed=2, judge="jb")
    with pytest.raises(UserError, match="both hold dialogue"):
        build_site([first, second], tmp_path / "site", n_resamples=10)


def test_rank_py_writes_its_site_after_the_run_and_a_failed_site_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import esc.rank.run as rank_job

    rank = synthetic_run(tmp_path / "run", cards=2, targets=["bot"], dims=2, seed=0)
    fields = rank_job.write_site(rank, REPORT_ON, "score")
    assert (
        fields == {"site": str(rank / "report" / "index.html")} and (rank / "report" / "index.html").is_file()
    )
    page = (rank / "report" / "index.html").read_text()
    assert "leaderboard" in page  # rank.py's leaderboard.md, with its sections, is a page of the site

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(rank_job, "build_site", broken)
    assert rank_job.write_site(rank, REPORT_ON, "score") == {
        "site": None, "site_error": "RuntimeError: planted"
    }  # fmt: skip
    assert (
        rank_job.write_site(rank, {**REPORT_ON, "report": {"enabled": False, "title": None}}, "score") == {}
    )


def test_a_leaderboard_run_shows_the_folders_it_read(tmp_path: Path) -> None:
    import esc.rank.run as rank_job

    rank = synthetic_run(tmp_path / "run", cards=2, targets=["bot"], dims=2, seed=0)
    out = tmp_path / "board"
    out.mkdir()
    (out / "leaderboard.md").write_text("| a |\n|---|\n| 1 |\n")
    assert rank_job.site_sources(out, {**REPORT_ON, "scores": [str(rank)]}, "leaderboard") == [out, rank]
    assert rank_job.write_site(out, {**REPORT_ON, "scores": [str(rank)]}, "leaderboard")["site"]
