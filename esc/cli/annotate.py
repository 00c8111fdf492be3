"""`esc annotate`: the annotation round trip (docs/annotation.md), and the human scores ESC-RANK learns.

esc annotate export dialogue --dialogues OUT_OF_EVALUATE --out TASKS   # 7 dimensions, 0-4
esc annotate export roleplay --dialogues OUT_OF_EVALUATE --out TASKS   # 6 metrics, 0-2 [--cards]
esc annotate export card --cards cards.json --out TASKS                # grade + category
esc annotate export dialogue --dialogues RUN_A RUN_B --sample 40 --out TASKS  # 40, by target and language
esc annotate site TASKS --out RATE                                     # blind rating pages (RATE/index.html)
    (export and site write only into a new or empty folder, site also into its own; --force otherwise)
esc annotate import TASKS filled.csv ann2.jsonl labelstudio.json --out labels.jsonl
esc annotate import TASKS ratings-ana.jsonl ratings-ben.jsonl --out labels.jsonl [--add]
esc annotate agreement labels.jsonl --out agreement [--tasks TASKS]    # .md .csv .json, intervals by card
    (agreement writes OUT.md, OUT.csv, OUT.json only where none exists; --force replaces them)
esc annotate resolve labels.jsonl --first a1 --second a2 --third a3 --out resolved.json
esc annotate to-esc-rank labels.jsonl --tasks TASKS --out data/annotations/mine.jsonl
esc annotate build-esconv [--out FILE] [--max-lines 12]   # human scores from ESConv's seekers' ratings
esc annotate stats data/annotations/esconv_ratings.jsonl  # annotations per dimension and score
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from esc.annotate.annotator_agreement import agreement, resolve_labels, write_agreement_files
from esc.annotate.human_scores import (
    default_esconv_path,
    esconv_annotations,
    read_annotations,
    stats,
    write_annotations,
)
from esc.annotate.kinds import KINDS
from esc.annotate.outputs import check_new_folder, check_not_a_source, locked
from esc.annotate.rating_site import write_rating_site
from esc.annotate.tasks import (
    Label,
    export_tasks,
    gather_tasks,
    import_labels,
    read_labels,
    read_salt,
    read_tasks,
    sample_tasks,
    to_esc_rank,
    user_file,
    write_labels,
)
from esc.cards import load_cards
from esc.cli.outputs import new_output
from esc.errors import ArgumentParser, UserError
from esc.hashing import sha256_file
from esc.jsonl import atomic_write_text
from esc.tasks.agreement.raters import (
    annotator_markdown,
    label_intervals,
    label_unit,
    task_units,
    with_intervals,
)

HELP = "Annotation tasks out, labels in; the human scores ESC-RANK learns."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write a task folder (JSONL, CSV, Label Studio project)")
    export.add_argument("kind", choices=KINDS)
    export.add_argument("--dialogues", nargs="+", help="evaluate.py output folders or dialogue files")
    export.add_argument(
        "--cards", type=Path, action="append",
        help="card files (default: the released ones): to grade, or the cards `roleplay` dialogues played",
    )  # fmt: skip
    export.add_argument("--language", choices=["en", "zh"], help="only this language")
    export.add_argument(
        "--sample", type=int, default=None,
        help="dialogue/roleplay: only N of them, an equal share per target and language",
    )  # fmt: skip
    export.add_argument("--seed", type=int, default=0, help="--sample's draw (the same seed, the same tasks)")
    export.add_argument("--out", type=Path, required=True, help="the task folder to write (new or empty)")
    export.add_argument(
        "--force", action="store_true",
        help="write into an existing folder (an existing task folder's pages and ratings no longer import)",
    )  # fmt: skip
    site = sub.add_parser("site", help="blind rating pages of a dialogue task folder, opened from disk")
    site.add_argument("tasks", type=Path, help="the task folder (its tasks.jsonl)")
    site.add_argument("--out", type=Path, required=True, help="the folder of the pages (OUT/index.html)")
    site.add_argument("--cards", type=Path, action="append", help="card files played (default: released)")
    site.add_argument(
        "--seed", type=int, default=0, help="with the rater id, each rater's order of dialogues"
    )
    site.add_argument("--title", default=None)
    site.add_argument(
        "--force", action="store_true", help="write the pages into a folder that is not empty (and not pages)"
    )
    imp = sub.add_parser("import", help="read filled CSV / JSONL / Label Studio exports into labels.jsonl")
    imp.add_argument("tasks", type=Path, help="the task folder (its tasks.jsonl)")
    imp.add_argument("files", nargs="+", type=Path)
    imp.add_argument("--out", type=Path, required=True)
    imp.add_argument("--force", action="store_true", help="replace --out if it exists")
    imp.add_argument(
        "--add", action="store_true",
        help="add these files' labels to --out's (another rater's); a rating given twice is refused",
    )  # fmt: skip
    agree = sub.add_parser("agreement", help="Cohen's, Fleiss' kappa, Krippendorff's alpha per field")
    agree.add_argument("labels", type=Path)
    agree.add_argument("--out", type=Path, help="write OUT.md, OUT.csv and OUT.json too (none existing)")
    agree.add_argument(
        "--force", action="store_true", help="replace OUT.md, OUT.csv and OUT.json if they exist"
    )
    agree.add_argument("--tasks", type=Path, help="the task folder: intervals resample role cards, not tasks")
    agree.add_argument(
        "--bootstrap", type=int, default=1000, help="resamples for the 95%% intervals (0: none)"
    )
    agree.add_argument("--seed", type=int, default=0, help="the resampling's seed")
    res = sub.add_parser("resolve", help="the paper's two-annotators-and-a-third correction rule")
    res.add_argument("labels", type=Path)
    res.add_argument("--first", required=True)
    res.add_argument("--second", required=True)
    res.add_argument("--third", default=None)
    res.add_argument("--out", type=Path, required=True)
    res.add_argument("--force", action="store_true", help="replace --out if it exists")
    rank = sub.add_parser("to-esc-rank", help="dialogue labels as ESC-RANK training annotations")
    rank.add_argument("labels", type=Path)
    rank.add_argument("--tasks", type=Path, required=True)
    rank.add_argument("--out", type=Path, required=True)
    rank.add_argument("--force", action="store_true", help="replace --out if it exists")
    build = sub.add_parser("build-esconv", help="derive annotations from the ESConv seekers' ratings")
    build.add_argument(
        "--out", type=Path, default=None, help="default: data/annotations/esconv_ratings.jsonl"
    )
    build.add_argument("--max-lines", type=int, default=12, help="utterances kept per dialogue (0: all)")
    show = sub.add_parser("stats", help="count the annotations of a file per dimension and score")
    show.add_argument("file", type=Path)
    return parser


def strata_counts(tasks: Sequence) -> str:
    """`target/language: n` for each stratum of a sample."""
    counts = Counter(f"{t.payload.target}/{t.language}" for t in tasks)
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))


def rater_counts(labels: Sequence[Label], skipped: Counter) -> dict[str, str]:
    """Per rater: the tasks rated (and skipped, on the rating pages)."""
    rated: dict[str, set[str]] = {}
    for label in labels:
        rated.setdefault(label.annotator, set()).add(label.task_id)
    return {
        rater: f"{len(rated.get(rater, ()))} rated"
        + (f", {skipped[rater]} skipped" if skipped[rater] else "")
        for rater in sorted({*rated, *skipped})
    }


def check_same_task_file(
    labels: Sequence[Label], labels_path: Path, task_file: Path, checksum: str,
    hint: str = "give the task folder the ratings were made on",
) -> None:  # fmt: skip
    """A UserError unless `labels` were made on `task_file` (its checksum `checksum`): ratings of
    another task set (other replies under the same task ids) must not mix. Labels files written before
    the checksum was recorded are checked by task id only (`--add` refuses them: it cannot tell)."""
    made_on = {x.tasks_sha256 for x in labels}
    if made_on == {checksum}:
        return
    others = sorted(str(c)[:12] for c in made_on - {checksum} if c)
    if others:
        raise UserError(
            f"{labels_path}: its labels were made on another task file (tasks_sha256 {', '.join(others)}..., "
            f"{task_file}'s is {checksum[:12]}...): {hint}"
        )
    unknown = sorted({x.task_id for x in labels} - set(read_tasks(task_file)))
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise UserError(f"{labels_path}: task {unknown[0]!r}{more} is not in {task_file}: {hint}")


def run(args: argparse.Namespace) -> int:
    if args.command == "export":
        check_new_folder(args.out, args.force, "task folder")
        check_not_a_source(args.out, [*(args.dialogues or []), *(args.cards or [])])
        cards = None
        if args.kind == "card":
            cards = load_cards(args.cards, language=args.language)
        elif args.kind == "roleplay":  # the card each role-player played, as its judge reads it
            cards = load_cards(args.cards)
        tasks = gather_tasks(args.kind, args.dialogues, cards, args.language)
        if args.sample is not None:
            if args.kind == "card":
                raise UserError("--sample draws dialogues by target and language: not for card tasks")
            found = len(tasks)
            tasks = sample_tasks(tasks, args.sample, args.seed)
            print(f"sampled {len(tasks)} of {found} dialogues ({strata_counts(tasks)}; seed {args.seed})")
        with locked(args.out):
            check_new_folder(args.out, args.force, "task folder")  # none made it meanwhile
            written = export_tasks(tasks, args.out)
        print(f"{len(tasks)} {args.kind} tasks: " + ", ".join(str(p) for p in written.values()))
        return 0
    if args.command == "site":
        index = write_rating_site(args.tasks, args.out, args.cards, args.seed, args.title, args.force)
        print(f"rating pages: {index} (open it in a browser; no server needed)")
        return 0
    if args.command == "import":
        task_file = user_file(args.tasks / "tasks.jsonl" if args.tasks.is_dir() else args.tasks)
        checksum = sha256_file(task_file)
        tasks = read_tasks(task_file)
        with locked(args.out):  # another import adding to the same file waits: no rater's labels lost
            existing = []
            if args.add and args.out.is_file():
                existing = read_labels(args.out)
                if any(x.tasks_sha256 is None for x in existing):
                    raise UserError(
                        f"{args.out}: its labels do not record the task file they were made on (imported "
                        "before labels did); import every rater's files again into a new --out"
                    )
                check_same_task_file(
                    existing, args.out, task_file, checksum,
                    "add only ratings of the same task folder, or import these into a new --out",
                )  # fmt: skip
            else:
                new_output(args.out, [task_file, *args.files], args.force)
            skipped: Counter = Counter()
            labels = import_labels(tasks, args.files, checksum, existing, skipped, read_salt(task_file))
            write_labels([*existing, *labels], args.out)
        print(f"{len(labels)} labels from {len(args.files)} files: {args.out}"
              + (f" (added to its {len(existing)})" if existing else ""))  # fmt: skip
        for rater, count in rater_counts([*existing, *labels], skipped).items():
            print(f"  {rater}: {count}")
        return 0
    if args.command == "build-esconv":
        out = args.out or default_esconv_path()
        anns = esconv_annotations(max_lines=args.max_lines or None)
        write_annotations(anns, out)
        print(f"{out}: {stats(anns)}")
        return 0
    if args.command == "stats":
        print(stats(read_annotations(args.file)))
        return 0
    labels = read_labels(args.labels)
    if not labels:
        raise UserError(f"{args.labels}: no labels")
    if args.command == "agreement":
        if args.bootstrap < 0:
            raise UserError(f"--bootstrap {args.bootstrap}: the resamples must be 0 (none) or more")
        units = None
        task_file = None
        if args.tasks:
            task_file = user_file(args.tasks / "tasks.jsonl" if args.tasks.is_dir() else args.tasks)
        if args.out:  # before any work: a person's OUT.md is never replaced unless told, an input never
            inputs = [args.labels, task_file] if task_file else [args.labels]
            for suffix in (".md", ".csv", ".json"):
                new_output(args.out.with_suffix(suffix), inputs, args.force)
        if task_file:
            check_same_task_file(labels, args.labels, task_file, sha256_file(task_file))
            units = task_units(read_tasks(task_file))
        rows = agreement(labels)
        intervals = label_intervals(labels, units, args.bootstrap, args.seed) if args.bootstrap > 0 else {}
        print(annotator_markdown(rows, intervals, label_unit(labels, units)), end="")
        if args.out:
            write_agreement_files(with_intervals(rows, intervals), args.out)
        return 0
    if args.command == "resolve":
        new_output(args.out, [args.labels], args.force)
        resolved = resolve_labels(labels, args.first, args.second, args.third)
        atomic_write_text(args.out, json.dumps(resolved, indent=2, ensure_ascii=False) + "\n")
        open_ = sum(v is None for fields in resolved.values() for v in fields.values())
        print(f"{len(resolved)} tasks resolved ({open_} labels await the third annotator): {args.out}")
        return 0
    task_file = user_file(args.tasks / "tasks.jsonl" if args.tasks.is_dir() else args.tasks)
    new_output(args.out, [args.labels, task_file], args.force)
    check_same_task_file(labels, args.labels, task_file, sha256_file(task_file))
    annotations = to_esc_rank(labels, read_tasks(args.tasks), args.labels)
    if not annotations:
        raise UserError(f"{args.labels}: no dialogue labels (only `export dialogue` tasks train ESC-RANK)")
    write_annotations(annotations, args.out)
    print(
        f"{len(annotations)} annotations for ESC-RANK: {args.out} "
        f"(train.py +exp=train/esc_rank data.annotations={args.out})"
    )
    return 0
