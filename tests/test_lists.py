"""Hand-written lists stay true to what they list (issue 63, item 5): rank.py's modes in the two
docstrings that list them, the task folders and `JobResult`s in docs/architecture.md, and the table
of dimensions in docs/scoring.md, each held to the registry or the code it names. A new mode, task
folder or result fails here until the docs name it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from esc.rank import run as rank_run
from esc.scoring.rubrics import dimensions
from esc.tasks.task import modes

REPO = Path(__file__).resolve().parent.parent
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
#: rank.py's docstring, read (importing the entry point would set its process-wide settings)
RANK_PY_DOC = ast.get_docstring(ast.parse((REPO / "rank.py").read_text(encoding="utf-8"))) or ""


def test_rank_py_docstring_shows_every_registered_mode() -> None:
    names = set(modes())
    shown = set(re.findall(r"mode=(\w+)", RANK_PY_DOC))
    assert names <= shown, f"rank.py's docstring lacks mode={sorted(names - shown)}"
    assert shown <= names, f"rank.py's docstring names modes that are not registered: {sorted(shown - names)}"


def test_rank_run_docstring_lists_every_registered_mode_with_its_module() -> None:
    """esc/rank/run.py's table: one line per mode, `NAME  what it does ... (its module)`."""
    doc = rank_run.__doc__ or ""
    table = re.findall(r"^    (\w+) +.*?(?:\n {17}.*?)*\((esc\.tasks\.[\w.]+)\)$", doc, flags=re.M)
    listed = dict(table)
    assert len(listed) == len(table), "a mode listed twice"
    assert listed == {name: type(mode).__module__ for name, mode in modes().items()}


def _task_folders() -> set[str]:
    """The folders of esc/tasks/ that hold a task (a module registering a `Mode`)."""
    return {type(mode).__module__.split(".")[2] for mode in modes().values()}


def test_architecture_names_every_task_folder_in_both_tables() -> None:
    folders = _task_folders()
    layer_row = next(line for line in ARCHITECTURE.splitlines() if line.startswith("| 8 | `esc.tasks`"))
    room_row = next(line for line in ARCHITECTURE.splitlines() if line.startswith("| `esc/tasks/` |"))
    for row in (layer_row, room_row):
        named = set(re.findall(r"`(\w+)/`", row))
        assert folders <= named, f"docs/architecture.md lacks {sorted(folders - named)}: {row[:60]}"


def _job_results() -> set[str]:
    """Every class of esc/ that derives from `JobResult`, read from the source (nothing imported)."""
    bases: dict[str, set[str]] = {}
    for path in (REPO / "esc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
    found, grown = {"JobResult"}, True
    while grown:
        more = {name for name, of in bases.items() if of & found} - found
        found |= more
        grown = bool(more)
    return found - {"JobResult"}


def test_architecture_names_every_job_result() -> None:
    results = _job_results()
    known = {"ScoreResult", "StressResult", "PairwiseResult", "AnsweredResult", "RobustnessResult"}
    assert known <= results  # the reader works
    sentence = ARCHITECTURE[ARCHITECTURE.index("it returns a `JobResult`") :].split("whose `summary()`")[0]
    named = set(re.findall(r"`(\w+Result)`", sentence)) - {"JobResult"}
    assert results <= named, f"docs/architecture.md's JobResult list lacks {sorted(results - named)}"
    assert named <= results, f"docs/architecture.md names results the code lacks: {sorted(named - results)}"


def test_the_dimension_table_in_docs_is_the_one_table() -> None:
    text = (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([\w.]+) \| (\S+) \| `(\w+)` \|$", text, flags=re.M)
    assert rows == [(d.key, d.paper_name, d.short, d.zh, d.official_key) for d in dimensions()]


def test_conf_rank_yaml_says_what_every_mode_does() -> None:
    """The comment beside `mode:` in conf/rank.yaml: `NAME: what it does`, one per registered mode."""
    text = (REPO / "conf" / "rank.yaml").read_text(encoding="utf-8")
    block = text[text.index("\nmode: ") : text.index("\ndialogues: ")]
    said = re.findall(r"(?:# |\| )(\w+):", block)
    assert sorted(said) == sorted(modes())
