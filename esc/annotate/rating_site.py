"""Blind rating pages: people rate dialogues on the 7 dimensions in a browser, from disk.

`esc annotate site TASKS --out DIR` writes DIR/index.html (with rate.js and rate.css beside it) from
a `dialogue` task folder (`esc annotate export dialogue`). Opened from disk (file://), with no
server and no network, it shows one dialogue at a time, **blind**: no target or role-player name, no
task id, no judge score. Each dialogue is known to the page only by an opaque key (`task_key`: a
hash of the task folder's secret salt, the task file's checksum and the task id; the salt is never
in the pages, so a key cannot be recomputed by guessing task ids), the items are sorted by that key
(the export's order groups by target), and each rater gets their own order (shuffled in the browser
with a seed made from the site's seed and the rater id, recorded with every rating). Beside the
dialogue: the card the seeker played, and the 7 dimensions with the paper's annotation rules (Table
16) and their 0-4 anchors, in English, or in Chinese for a Chinese dialogue (this repository's
translation, `rating/rules_zh.yaml`). Ratings stay in the browser (localStorage, per rater) and are
exported as one JSONL file, one record per rated or skipped dialogue:

    {"format": "esc-rating/1", "rater": "ana", "task": KEY, "scores": {"fluency": 3, ...},
     "comment": "", "skipped": false, "rated_at": ISO-8601, "tasks_sha256": ..., "order_seed": ...}

`esc annotate import TASKS ratings-ana.jsonl ratings-ben.jsonl --out labels.jsonl` reads them back
(`esc.annotate.tasks.import_labels`): a record of another task file (its checksum differs) is
refused, and so is a rating given twice.

The pages are written only into a new or empty folder, or one holding `MARKER` (pages made before),
unless `--force`; never into the task folder; every text through the secret filter.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from esc.annotate.outputs import check_new_folder, check_not_a_source, locked
from esc.annotate.tasks import (
    RATING_FORMAT,
    SALT_FILE,
    Task,
    read_salt,
    read_tasks,
    task_folder,
    task_key,
    user_file,
)
from esc.cards import load_cards
from esc.errors import UserError
from esc.hashing import sha256_file
from esc.jsonl import atomic_write_text
from esc.scoring.rubrics import annotation_rules, dimensions
from esc.secrets.redaction import known_secrets, scrub_text

ASSETS = Path(__file__).with_name("rating")
SPEAKERS = {"en": ("Seeker", "Assistant"), "zh": ("求助者", "助手")}
MARKER = ".esc-rating-site"  # in every folder of rating pages: a new site may replace its pages


def rubrics() -> dict[str, Any]:
    """The 7 dimensions' rules by language: what to focus on, and what each score 0-4 means."""
    english = annotation_rules()
    chinese = yaml.safe_load((ASSETS / "rules_zh.yaml").read_text(encoding="utf-8"))
    out: dict[str, Any] = {"en": {}, "zh": {}}
    for dim in dimensions():
        rule = english[dim.key]
        out["en"][dim.key] = {
            "title": dim.paper_name,
            "focus": rule["focus"],
            "levels": [rule["levels"][s] for s in range(5)],
        }
        rule_zh = chinese[dim.key]
        out["zh"][dim.key] = {
            "title": f"{dim.zh} ({dim.paper_name})",
            "focus": rule_zh["focus"],
            "levels": [rule_zh["levels"][s] for s in range(5)],
        }
    out["zh_source"] = chinese["source"]
    return out


def _card_texts(tasks: Sequence[Task], cards: Sequence[Path] | None) -> dict[tuple[int, str], str]:
    texts: dict[tuple[int, str], str] = {}
    for language in sorted({t.language for t in tasks}):
        for card in load_cards(list(cards) if cards else None, language=language):
            texts[(card.id, card.language)] = card.to_text()
    return texts


def site_data(tasks_path: Path, cards: Sequence[Path] | None = None, seed: int = 0) -> dict[str, Any]:
    """What the pages hold: the opaque items (language, card, dialogue lines, each text through the
    secret filter) and the rubrics; not the task folder's salt, so no key can be recomputed."""
    tasks = list(read_tasks(tasks_path).values())
    checksum = sha256_file(tasks_path)
    salt = read_salt(tasks_path)
    if salt is None:
        raise UserError(
            f"{task_folder(tasks_path)}: a task folder exported before blind keys were salted (no "
            f"{SALT_FILE}): its pages could be de-blinded; export the tasks again into a new folder "
            "(esc annotate export dialogue ...); ratings already made on its pages still import"
        )
    kinds = {t.kind for t in tasks}
    if kinds != {"dialogue"}:
        raise UserError(
            f"{tasks_path}: the rating pages show `dialogue` tasks (7 dimensions, 0-4), not {sorted(kinds)}"
        )
    texts = _card_texts(tasks, cards)
    secrets = known_secrets()  # once: the filter `atomic_write_text` applies to the whole page again
    items = []
    for task in tasks:
        card = texts.get((task.payload.card_id, task.language))
        items.append(
            {
                "key": task_key(checksum, task.task_id, salt),
                "language": task.language,
                "card": None if card is None else scrub_text(card, secrets),
                "lines": [[m.role, scrub_text(m.content, secrets)] for m in task.payload.dialogue],
            }
        )
    items.sort(key=lambda item: item["key"])
    return {
        "format": RATING_FORMAT,
        "tasks_sha256": checksum,
        "tasks_file": tasks_path.name,
        "seed": int(seed),
        "dimensions": [d.key for d in dimensions()],
        "rubrics": rubrics(),
        "speakers": SPEAKERS,
        "items": items,
    }


def _script_json(data: Any) -> str:
    """JSON that can sit inside a <script> element: no `</script>` or `<!--` can close it early."""
    return json.dumps(data, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def _unmarked_pages(out: Path) -> bool:
    """Whether `out` holds only the pages of a site made before sites were marked (index.html, rate.js
    and rate.css): a new site may replace them."""
    names = {p.name for p in out.iterdir()} if out.is_dir() else set()
    return "rate.js" in names and names <= {"index.html", "rate.js", "rate.css"}


def write_rating_site(
    tasks: Path, out: Path, cards: Sequence[Path] | None = None, seed: int = 0, title: str | None = None,
    force: bool = False,
) -> Path:  # fmt: skip
    """DIR/index.html, rate.js and rate.css for the tasks of `tasks` (a task folder or its
    tasks.jsonl); returns the page's path. DIR is new, empty or pages this command made before
    (`MARKER`), unless `force`; never the task folder or a card file. Written under DIR's lock, every
    text through the secret filter (`esc.jsonl.atomic_write_text`)."""
    tasks_path = Path(tasks) / "tasks.jsonl" if Path(tasks).is_dir() else Path(tasks)
    out = Path(out)
    check_not_a_source(out, [task_folder(user_file(tasks_path)), *(cards or [])])
    data = site_data(tasks_path, cards, seed)
    env = Environment(loader=FileSystemLoader(ASSETS), autoescape=True, undefined=StrictUndefined)
    page = env.get_template("page.jinja").render(
        title=title or "Rate dialogues", data_json=_script_json(data), n=len(data["items"])
    )
    with locked(out):
        check_new_folder(out, force or _unmarked_pages(out), "rating pages", MARKER)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / MARKER, "made by `esc annotate site`; a new site may replace its pages\n")
        for name in ("rate.js", "rate.css"):
            atomic_write_text(out / name, (ASSETS / name).read_text(encoding="utf-8"))
        index = out / "index.html"
        atomic_write_text(index, page)
    return index
