"""Command line of the annotation round trip (docs/annotation.md):

python -m esc.annotate export dialogue --dialogues OUT_OF_EVALUATE --out TASKS   # 7 dimensions, 0-4
python -m esc.annotate export roleplay --dialogues OUT_OF_EVALUATE --out TASKS   # 6 metrics, 0-2 [--cards]
python -m esc.annotate export card --cards cards.json --out TASKS                # grade + category
python -m esc.annotate import TASKS filled.csv ann2.jsonl labelstudio.json --out labels.jsonl
python -m esc.annotate agreement labels.jsonl --out agreement                    # .md .csv .json
python -m esc.annotate resolve labels.jsonl --first a1 --second a2 --third a3 --out resolved.json
python -m esc.annotate to-esc-rank labels.jsonl --tasks TASKS --out data/annotations/mine.jsonl
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from esc.annotate.agreement import agreement, agreement_markdown, resolve_labels
from esc.annotate.kinds import KINDS
from esc.annotate.tasks import (
    card_tasks,
    dialogue_tasks,
    export_tasks,
    import_labels,
    read_labels,
    read_tasks,
    to_esc_rank,
    write_labels,
)
from esc.cards import load_cards
from esc.errors import ArgumentParser, UserError, exit_on_user_error
from esc.jsonl import atomic_write_text, find_jsonl_files
from esc.scoring.annotations import write_annotations


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m esc.annotate", description="Annotation tasks out, labels in.")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write a task folder (JSONL, CSV, Label Studio project)")
    export.add_argument("kind", choices=KINDS)
    export.add_argument("--dialogues", nargs="+", help="evaluate.py output folders or dialogue files")
    export.add_argument(
        "--cards", type=Path, action="append",
        help="card files (default: the released ones): to grade, or the cards `roleplay` dialogues played",
    )  # fmt: skip
    export.add_argument("--language", choices=["en", "zh"], help="only this language")
    export.add_argument("--out", type=Path, required=True, help="the task folder to write")
    imp = sub.add_parser("import", help="read filled CSV / JSONL / Label Studio exports into labels.jsonl")
    imp.add_argument("tasks", type=Path, help="the task folder (its tasks.jsonl)")
    imp.add_argument("files", nargs="+", type=Path)
    imp.add_argument("--out", type=Path, required=True)
    agree = sub.add_parser("agreement", help="Cohen's, Fleiss' kappa, Krippendorff's alpha per field")
    agree.add_argument("labels", type=Path)
    agree.add_argument("--out", type=Path, help="write OUT.md, OUT.csv and OUT.json too")
    res = sub.add_parser("resolve", help="the paper's two-annotators-and-a-third correction rule")
    res.add_argument("labels", type=Path)
    res.add_argument("--first", required=True)
    res.add_argument("--second", required=True)
    res.add_argument("--third", default=None)
    res.add_argument("--out", type=Path, required=True)
    rank = sub.add_parser("to-esc-rank", help="dialogue labels as ESC-RANK training annotations")
    rank.add_argument("labels", type=Path)
    rank.add_argument("--tasks", type=Path, required=True)
    rank.add_argument("--out", type=Path, required=True)
    return parser


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "export":
        if args.out.exists() and not args.out.is_dir():
            raise UserError(f"{args.out}: --out is an existing file; name a task folder (new or existing)")
        if args.kind == "card":
            tasks = card_tasks(load_cards(args.cards, language=args.language))
        else:
            if not args.dialogues:
                raise UserError(f"export {args.kind} needs --dialogues (evaluate.py output folders or files)")
            files = find_jsonl_files(args.dialogues, "dialogues", "dialogue files")
            card_texts = None
            if args.kind == "roleplay":  # the card each role-player played, as its judge reads it
                card_texts = {(c.id, c.language): c.to_text() for c in load_cards(args.cards)}
            tasks = [
                t
                for t in dialogue_tasks(files, args.kind, card_texts)
                if not args.language or t.language == args.language
            ]
        written = export_tasks(tasks, args.out)
        print(f"{len(tasks)} {args.kind} tasks: " + ", ".join(str(p) for p in written.values()))
        return 0
    if args.command == "import":
        labels = import_labels(read_tasks(args.tasks), args.files)
        write_labels(labels, args.out)
        print(f"{len(labels)} labels from {len(args.files)} files: {args.out}")
        return 0
    labels = read_labels(args.labels)
    if not labels:
        raise UserError(f"{args.labels}: no labels")
    if args.command == "agreement":
        rows = agreement(labels)
        table = agreement_markdown(rows)
        print(table, end="")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.out.with_suffix(".md"), table)
            atomic_write_text(args.out.with_suffix(".json"), json.dumps(rows, indent=2) + "\n")
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
            atomic_write_text(args.out.with_suffix(".csv"), buffer.getvalue())
        return 0
    if args.command == "resolve":
        resolved = resolve_labels(labels, args.first, args.second, args.third)
        atomic_write_text(args.out, json.dumps(resolved, indent=2, ensure_ascii=False) + "\n")
        open_ = sum(v is None for fields in resolved.values() for v in fields.values())
        print(f"{len(resolved)} tasks resolved ({open_} labels await the third annotator): {args.out}")
        return 0

    annotations = to_esc_rank(labels, read_tasks(args.tasks), args.labels)
    if not annotations:
        raise UserError(f"{args.labels}: no dialogue labels (only `export dialogue` tasks train ESC-RANK)")
    write_annotations(annotations, args.out)
    print(
        f"{len(annotations)} annotations for ESC-RANK: {args.out} "
        f"(train.py +exp=esc_rank data.annotations={args.out})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
