"""The report site (`esc report`, esc/site/): pages that open from disk and show what the run
folders' logs hold (`OUT/run.json`), by task, with no task known to the site; model text escaped.
Runs are synthetic (`tests.synthetic_run.synthetic_run`: the dialogue and judgment formats
evaluate.py and rank.py write, and the run log rank.py builds of them), so nothing here loads a model."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from esc.cli import main
from esc.rank.run import ReportSettings
from esc.reports.runlog import Judgment, RunHeader, RunLog, read_run_log, write_run_log
from esc.scoring.rubrics import TABLE_2_ORDER, dimensions
from esc.site import build_site, slugify
from tests.synthetic_run import inject_text, synthetic_run

INJECTION = "<script>alert(1)</script>"
#: what write_site reads of a resolved rank.py config (conf/rank.yaml's values)
LEADERBOARD = {"bootstrap": 1000, "charts": True, "breakdowns": True, "min_n": 10, "cards": None}
REPORT_ON = {"report": {"enabled": True, "title": None, "low_mass": 0.5}, "leaderboard": LEADERBOARD}
SITE_ON = ReportSettings(**REPORT_ON["report"])  # rank.py's `report` section, as validated
ROW = re.compile(
    r'<tr class="s-(\w+)" data-judge="([^"]*)" data-key="([^"]*)"(?: data-turn="(\d+)")?>(.*?)</tr>', re.S
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("report")
    rank = synthetic_run(
        root / "run", cards=6, targets=["alpha", "Beta 2"], dims=7, seed=3, safety=True, pairwise=True,
        bootstrap=50,
    )  # fmt: skip
    target, language, card = inject_text(rank, INJECTION)
    result = build_site([rank], root / "site", title="Test site")
    return {"rank": rank, "out": root / "site", "result": result, "injected": (target, language, card)}


def by_dialogue(rank: Path) -> dict[str, list[Judgment]]:
    return read_run_log(rank).by_dialogue()


def shown_judgments(text: str) -> dict[str, list[tuple[str, ...]]]:
    """task -> (status, judge, key, turn, answer cell) of each judgment row of a dialogue page."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for task, table in re.findall(r'<table class="judgments" data-task="([^"]+)">(.*?)</table>', text, re.S):
        rows = []
        for status, judge, key, turn, cells in ROW.findall(table):
            answer = re.search(r'<td class="num answer">(.*?)</td>', cells, re.S).group(1)
            rows.append((status, judge, key, turn, answer))
        out[task] = rows
    return out


def links(page: Path) -> list[str]:
    return re.findall(r'(?:href|src)="([^"]*)"', page.read_text(encoding="utf-8"))


def test_every_page_is_written_and_every_link_is_a_relative_file(site: dict) -> None:
    out, result = site["out"], site["result"]
    assert result.index == out / "index.html"
    assert result.pages == {"overview": 1, "targets": 2, "dialogues": 12, "compare": 6, "reports": 1}
    assert (out / "static" / "site.css").is_file() and (out / "static" / "site.js").is_file()
    slug = slugify("Beta 2")
    assert slug != "Beta 2" and " " not in slug
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


def test_dialogue_pages_show_every_judgment_of_the_log_by_task(site: dict) -> None:
    judgments = by_dialogue(site["rank"])
    pages = sorted((site["out"] / "dialogues").rglob("*.html"))
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        dialogue_id = re.search(r"<code>([^<]+/\d+)</code> in", text).group(1)
        shown = shown_judgments(text)
        logged: dict[str, list[Judgment]] = {}
        for j in judgments[dialogue_id]:
            logged.setdefault(j.task, []).append(j)
        assert list(shown) == list(logged) == ["score", "safety", "pairwise"]  # as the log lists them
        for task, rows in shown.items():
            expected = sorted(logged[task], key=lambda j: (j.judge, j.turn is not None, j.turn or 0))
            assert len(rows) == len(expected), (page, task)
            for (status, judge, key, turn, answer), j in zip(rows, expected, strict=True):
                assert (status, judge, key, turn) == (
                    j.status,
                    j.judge,
                    j.key,
                    "" if j.turn is None else str(j.turn),
                )
                assert answer == j.answer if j.status == "valid" else j.status in answer, (page, task, key)
                checked += 1
    assert len(pages) == 12 and checked == sum(len(judgments[d]) for d in judgments)


def test_target_pages_list_the_worst_dialogue_first_with_its_answers_and_report_rows(site: dict) -> None:
    judgments = by_dialogue(site["rank"])
    text = (site["out"] / "targets" / "alpha.html").read_text(encoding="utf-8")
    averages = [float(a) for a in re.findall(r'<tr data-language=[^>]* data-avg="([0-9.]+)"', text)]
    assert len(averages) == 6 and averages == sorted(averages)
    first = re.search(r"<tr data-language=.*?</tr>", text, flags=re.S).group(0)
    label = re.search(r'<a href="[^"]+">(\w+)-(\d+)</a>', first)
    logged = {
        j.key: j
        for j in judgments[f"alpha__esc_role__{label.group(1)}/{label.group(2)}"]
        if j.task == "score"
    }
    cells = re.findall(r'<td class="num s-(\w+)" data-sort="[^"]*">([^<]*)</td>', first)
    assert len(cells) == 7  # a column per question of the whole dialogue
    for key, (status, value) in zip(TABLE_2_ORDER, cells, strict=True):
        assert status == logged[key].status
        assert value == (logged[key].answer if status == "valid" else status)
    assert re.search(r"<td>no \d+( · yes \d+)?</td>", first)  # the answers about its replies, counted
    # the report rows that name the target: the leaderboard's, with their figures as data
    results = text.split('<section id="results">')[1].split("</section>")[0]
    rows = re.findall(r"<tr><td>(en|zh)</td><td>(\w+)</td>.*?</tr>", results, re.S)
    assert sorted(rows) == [("en", "alpha"), ("zh", "alpha")]
    log = read_run_log(site["rank"])
    figure = next(e for e in log.results if dict(e.keys).get("Target") == "alpha")
    assert f'data-value="{figure.value:.6g}"' in results


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


def test_dialogue_pages_show_emotion_reply_judgments_beside_replies_and_pairs_linked(site: dict) -> None:
    page = sorted((site["out"] / "dialogues" / "alpha").glob("*.html"))[0]
    text = page.read_text(encoding="utf-8")
    assert '<svg class="emotion"' in text and "<polyline points=" in text
    beside = re.findall(r'<div class="judged" data-task="safety">', text)
    assert len(beside) == 5  # one line per reply, in its bubble
    assert "risk_missed <b>" in text
    pairs = text.split('data-task="pairwise"')[1].split("</table>")[0]
    other = f"../../dialogues/{slugify('Beta 2')}/{page.name}"
    assert (
        f'<a href="{other}">Beta 2</a>' in pairs
        and (site["out"] / "dialogues" / slugify("Beta 2") / page.name).is_file()
    )
    assert "order: xy" in pairs and "first: " in pairs  # the task's detail
    assert "compare/" in text


def test_the_overview_has_each_reports_headline_counts_by_task_and_the_runs(site: dict) -> None:
    text = (site["out"] / "index.html").read_text(encoding="utf-8")
    headline = re.search(
        r'<section class="headline" data-task="score" data-report="leaderboard">.*?</section>', text, re.S
    )
    table = re.search(r"<table.*?</table>", headline.group(0), flags=re.S).group(0)
    assert table.count("<tr>") == 1 + 4  # header, 2 targets x 2 languages
    assert "By language" not in headline.group(0)  # the report's first table only (the rest: its page)
    log = read_run_log(site["rank"])
    for e in log.results:
        if e.table == log.results[0].table and e.value is not None:
            assert f'data-value="{e.value:.6g}"' in table
    assert re.findall(r'<table class="counts" data-task="(\w+)">', text) == ["score", "safety", "pairwise"]
    assert "synthetic_judge" in text and "official v2" in text
    assert "git commit" in text and "synthetic" in text and 'href="runs/rank-leaderboard.html"' in text


def test_every_dimension_shows_its_paper_name_on_every_page_and_its_key_only_as_data(site: dict) -> None:
    """Issue 63: the site said diversity, suggestion, skill where Table 2 says Expression, Information,
    Skillful. Every page reads the one table of dimensions: the overview's counts, a dialogue's
    judgments and the target pages' columns show the paper's name; `data-key` keeps the key."""
    names = {d.key: d.paper_name for d in dimensions()}
    overview = (site["out"] / "index.html").read_text(encoding="utf-8")
    score = re.search(r'<table class="counts" data-task="score">.*?</table>', overview, re.S).group(0)
    assert sorted(re.findall(r"<tr><td>([^<]+)</td>", score)) == sorted(names.values())
    pairwise = re.search(r'<table class="counts" data-task="pairwise">.*?</table>', overview, re.S).group(0)
    assert set(re.findall(r"<tr><td>([^<]+)</td>", pairwise)) <= set(names.values())
    page = next((site["out"] / "dialogues").rglob("*.html")).read_text(encoding="utf-8")
    shown = 0
    for _, _, key, _, cells in ROW.findall(page):
        first = re.search(r"<td>([^<]*)</td>", cells).group(1)
        assert first == names.get(key, key), (key, first)  # a checklist question: its own key
        shown += key in names
    assert shown >= len(names)
    target = (site["out"] / "targets" / "alpha.html").read_text(encoding="utf-8")
    headers = re.findall(r'<th class="num" title="task score">([^<]+)</th>', target)
    assert sorted(headers) == sorted(names.values())
    assert not {"diversity", "suggestion", "skill"} & set(re.findall(r">(\w+)<", overview + page + target))


def test_a_dialogue_file_that_is_gone_leaves_its_judgments_on_the_page(tmp_path: Path) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=1, bootstrap=10)
    manifest = json.loads((rank / "manifest.json").read_text())
    gone = Path(manifest["sources"][0])
    gone.unlink()
    result = build_site([rank], tmp_path / "site")
    page = next((tmp_path / "site" / "dialogues").rglob(f"{gone.stem.split('__')[-1]}-*.html"))
    text = page.read_text(encoding="utf-8")
    assert f"the dialogue file {gone} no longer exists" in text
    assert len(shown_judgments(text)["score"]) == 7
    assert result.pages["dialogues"] == 2
    assert "no transcript" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_a_task_the_site_never_heard_of_shows_its_judgments_and_report(tmp_path: Path) -> None:
    """A toy task's log: its judgments on the dialogue pages (per reply and per pair too), its report
    as a page, its first table on the overview and its target's rows on the target page."""
    rank = synthetic_run(tmp_path / "run", cards=2, targets=["bot", "other"], dims=1, seed=2, bootstrap=10)
    log = read_run_log(rank)
    dialogues = sorted(log.by_dialogue())
    toy = tmp_path / "toy"
    toy.mkdir()
    judgments = [
        Judgment("toy", (dialogues[0],), "kindness", "j", "valid", "very", 3.0, detail=(("why", "warm"),)),
        Judgment(
            "toy", (dialogues[0],), "tone", "j", "invalid", raw=f"Tone: {INJECTION}", error="unread", turn=1
        ),
        Judgment("toy", (dialogues[0], dialogues[2]), "better", "j", "valid", "A", 0.0),
        Judgment("toy", ("nowhere/1",), "kindness", "j", "valid", "very", 3.0),
    ]
    bot = {"text": f"0.50 {INJECTION}", "value": 0.5, "low": 0.25, "high": 0.75, "n": 4}
    cells = [[{"text": "bot"}, bot], [{"text": "other"}, {"text": "0.10", "value": 0.1, "n": 4}]]
    report = {"format": "esc-report/1", "kind": "kindness", "blocks": [
        {"type": "text", "text": "How kind each target is."},
        {"type": "table", "columns": ["target", "kind"], "rows": cells},
        {"type": "heading", "level": 2, "text": "More"},
        {"type": "table", "columns": ["target", "kind"], "rows": cells[:1]},
    ]}  # fmt: skip
    write_run_log(
        toy, RunLog(RunHeader(task="toy", sources=[], judges=[]), judgments, [], {"kindness": report})
    )
    result = build_site([rank, toy], tmp_path / "site")
    assert result.pages["reports"] == 2  # the leaderboard and the toy's
    entries = {p: p.read_text(encoding="utf-8") for p in (tmp_path / "site" / "dialogues").rglob("*.html")}
    first = next(t for t in entries.values() if f"<code>{dialogues[0]}</code>" in t)
    toy_rows = shown_judgments(first)["toy"]
    assert [(r[2], r[3]) for r in toy_rows] == [("kindness", ""), ("better", ""), ("tone", "1")]
    assert toy_rows[0][4] == "very" and "why: warm" in first
    assert (
        f"Tone: {INJECTION.replace('<', '&lt;').replace('>', '&gt;')}" in first
    )  # the judge's reply, as text
    assert '<div class="judged" data-task="toy">' in first  # beside reply 1
    paired = next(t for t in entries.values() if f"<code>{dialogues[2]}</code>" in t)
    assert [r[2] for r in shown_judgments(paired)["toy"]] == ["better"]
    page = (tmp_path / "site" / "runs" / "toy-kindness.html").read_text(encoding="utf-8")
    assert 'data-value="0.5" data-low="0.25" data-high="0.75" data-n="4"' in page and "More" in page
    assert "0.50 &lt;script&gt;alert(1)&lt;/script&gt;" in page and INJECTION not in page
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'data-task="toy" data-report="kindness"' in index and "More</h2>" not in index
    assert "1 judgments of task toy are about dialogues in no dialogue file" in index
    target = (tmp_path / "site" / "targets" / "bot.html").read_text(encoding="utf-8")
    assert target.count('data-value="0.5"') == 2 and 'data-value="0.1"' not in target  # its rows only
    assert "kindness: More" in target


def test_a_new_build_replaces_an_old_site_but_never_another_folder(tmp_path: Path) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=2, bootstrap=10)
    site = tmp_path / "site"
    build_site([synthetic_run(tmp_path / "two", cards=2, targets=2, dims=7, seed=2, bootstrap=10)], site)
    stale = site / "targets" / "target_01.html"  # a page of the old site that the new one lacks
    assert stale.is_file()
    build_site([rank], site)
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

    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=3, bootstrap=10)
    script = "import os; print(os.getpid())"
    gone = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)  # a process that has ended
    for kind in ("building", "old"):
        (tmp_path / f".site.{kind}-{dead_pid}" / "dialogues").mkdir(parents=True)
    running = tmp_path / f".site.building-{os.getppid()}"  # a live process's build: not ours to remove
    running.mkdir()
    build_site([rank], tmp_path / "site")
    assert sorted(p.name for p in tmp_path.glob(".site.*")) == [running.name]


def test_the_cli_builds_a_site_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=2, dims=7, seed=4, bootstrap=10)
    assert main(["report", str(rank), "--out", str(tmp_path / "site"), "--title", "T"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"site: {tmp_path / 'site' / 'index.html'} (") and "4 dialogues" in out
    assert "<title>Overview · T</title>" in (tmp_path / "site" / "index.html").read_text()


@pytest.mark.parametrize(
    "case", ["empty folder", "no such folder", "only dialogues", "no run log", "bad log"]
)
def test_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture, case: str) -> None:
    folder = tmp_path / "out"
    if case != "no such folder":
        folder.mkdir()
    if case == "only dialogues":  # an evaluate.py folder, not a rank.py one
        (folder / "dialogues").mkdir()
        (folder / "dialogues" / "a__b__en.jsonl").write_text("{}\n")
    if case in ("no run log", "bad log"):  # a rank.py folder from before run logs; a log that is not one
        folder = synthetic_run(tmp_path / "run", cards=1, targets=1, dims=1, seed=0, bootstrap=0)
        if case == "bad log":
            log = json.loads((folder / "run.json").read_text())
            log["reports"]["leaderboard"]["blocks"][0] = {"type": "chart"}
            (folder / "run.json").write_text(json.dumps(log))
        else:
            (folder / "run.json").unlink()
    with pytest.raises(SystemExit) as done:
        main(["report", str(folder), "--out", str(tmp_path / "site")])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    if case == "no such folder":
        assert len(err) == 1 and err[0].startswith(f"error: {folder}: no such run folder")
    elif case == "bad log":
        where = f"{folder / 'run.json'} [record reports.leaderboard]"
        assert err == [f"error: {where}: not a report: unknown block type 'chart'"]
    else:  # the folder's log is missing: how to make one
        assert len(err) == 1 and err[0].startswith(f"error: {folder / 'run.json'}: no run log")
        assert f"`esc runs upgrade {folder}`" in err[0]
    assert not (tmp_path / "site").exists()


def test_slugs_are_file_names_and_never_collide() -> None:
    names = ["gpt-4", "GPT-4", "a/b", "a b", "..", "模型", "llama3_8b_instruct", "x" * 200]
    slugs = [slugify(n) for n in names]
    assert len({s.lower() for s in slugs}) == len(names)
    assert slugify("llama3_8b_instruct") == "llama3_8b_instruct"
    for slug in slugs:
        assert re.fullmatch(r"[a-z0-9._-]+", slug) and not slug.startswith(".") and len(slug) <= 67


def test_the_site_works_without_the_role_cards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rank = synthetic_run(tmp_path / "run", cards=2, targets=1, dims=7, seed=5, bootstrap=10)
    monkeypatch.setenv("ESC_DATA_DIR", str(tmp_path / "no-data"))
    build_site([rank], tmp_path / "site")
    assert "every topic and source is unknown" in (tmp_path / "site" / "index.html").read_text()


@pytest.mark.slow
def test_a_real_run_of_the_tiny_model(tmp_path: Path) -> None:
    """evaluate.py and rank.py (score, then safety, each in its folder) on the tiny model, as a user
    runs them; the site shows every judgment of the two run logs and the stored emotion ratings."""
    from tests.helpers import run_entry

    evaluate = [f"hydra.run.dir={tmp_path / 'eval'}", "roleplayer=tiny", "target=tiny", "cards.limit=2",
                "engine.progress=false", "cache.enabled=false", "trajectory.enabled=true"]  # fmt: skip
    done = run_entry("evaluate.py", evaluate)
    assert done.returncode == 0, done.stderr[-2000:]
    for mode in ("score", "safety"):
        done = run_entry("rank.py", [f"mode={mode}", "judge=tiny", f"dialogues={tmp_path / 'eval'}",
                                     f"hydra.run.dir={tmp_path / mode}", "scoring.progress=false",
                                     "cache.enabled=false"])  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    result = build_site([tmp_path / "score", tmp_path / "safety"], tmp_path / "site")
    assert result.pages["dialogues"] == 4 and result.pages["reports"] == 2  # leaderboard, safety
    judgments = {**by_dialogue(tmp_path / "score")}
    for dialogue_id, more in by_dialogue(tmp_path / "safety").items():
        judgments[dialogue_id] = judgments.get(dialogue_id, []) + more
    for page in (tmp_path / "site" / "dialogues").rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        dialogue_id = re.search(r"<code>([^<]+/\d+)</code> in", text).group(1)
        shown = shown_judgments(text)
        assert list(shown) == ["score", "safety"]
        assert sum(map(len, shown.values())) == len(judgments[dialogue_id])
        assert '<svg class="emotion"' in text and '<div class="judged" data-task="safety">' in text


def test_two_runs_whose_dialogue_files_share_a_name_are_refused(tmp_path: Path) -> None:
    """Two runs of one target and role-player: the same dialogue ids from two files would put one
    run's scores beside the other's transcripts; the site refuses with one line instead."""
    from esc.errors import UserError

    first = synthetic_run(tmp_path / "a", cards=3, targets=["bot"], dims=2, seed=1, judge="ja", bootstrap=10)
    second = synthetic_run(tmp_path / "b", cards=3, targets=["bot"], dims=2, seed=2, judge="jb", bootstrap=10)
    with pytest.raises(UserError, match="both hold dialogue"):
        build_site([first, second], tmp_path / "site")


def test_rank_py_writes_its_site_after_the_run_and_a_failed_site_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import esc.rank.run as rank_job

    rank = synthetic_run(tmp_path / "run", cards=2, targets=["bot"], dims=2, seed=0, bootstrap=10)
    fields = rank_job.write_site(rank, REPORT_ON, "score", SITE_ON, LEADERBOARD["cards"])
    assert (
        fields == {"site": str(rank / "report" / "index.html")} and (rank / "report" / "index.html").is_file()
    )
    page = (rank / "report" / "index.html").read_text()
    assert 'data-report="leaderboard"' in page  # rank.py's leaderboard, from the run log

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(rank_job, "build_site", broken)
    assert rank_job.write_site(rank, REPORT_ON, "score", SITE_ON, LEADERBOARD["cards"]) == {
        "site": None, "site_error": "RuntimeError: planted"
    }  # fmt: skip
    assert (
        rank_job.write_site(rank, REPORT_ON, "score", SITE_ON.model_copy(update={"enabled": False}), None)
        == {}
    )


def test_a_leaderboard_run_shows_the_folders_it_read(tmp_path: Path) -> None:
    import esc.rank.run as rank_job

    rank = synthetic_run(tmp_path / "run", cards=2, targets=["bot"], dims=2, seed=0, bootstrap=10)
    out = tmp_path / "board"
    out.mkdir()
    write_run_log(out, RunLog(RunHeader(task="leaderboard"), [], [], {}))
    assert rank_job.site_sources(out, {**REPORT_ON, "scores": [str(rank)]}, "leaderboard") == [out, rank]
    assert rank_job.write_site(out, {**REPORT_ON, "scores": [str(rank)]}, "leaderboard", SITE_ON, None)[
        "site"
    ]
    missing = tmp_path / "old"
    shutil.copytree(rank, missing)
    (missing / "run.json").unlink()  # a folder it read that has no run log: no site, and the run says why
    fields = rank_job.write_site(out, {**REPORT_ON, "scores": [str(missing)]}, "leaderboard", SITE_ON, None)
    assert fields["site"] is None and "esc runs upgrade" in fields["site_error"]


def test_low_mass_marks_follow_the_threshold_given(tmp_path: Path) -> None:
    """A valid judgment is marked "low mass" under `report.low_mass` (conf/rank.yaml) or the
    threshold given; the synthetic run's valid judgments put 0.97 on their answers."""
    rank = synthetic_run(tmp_path / "run", cards=1, targets=1, dims=2, seed=3, bootstrap=10)

    def marked(**given: float) -> int:
        site = tmp_path / f"site{len(given)}{given.get('low_mass', '')}"
        build_site([rank], site, **given)
        return sum(p.read_text().count('title="under ') for p in (site / "dialogues").rglob("*.html"))

    assert marked() == 0  # 0.5 by default: 0.97 is plenty
    assert marked(low_mass=0.98) > 0  # every valid judgment now under it
    assert marked(low_mass=0.0) == 0
