"""`python -m esc.dialogues`: read dialogues as transcripts, export/import the official format, merge shards.

    python -m esc.dialogues show RUN_DIR/dialogues/*.jsonl [--card 32025] [--limit 1] [--brief]
    python -m esc.dialogues export --format official RUN_DIR --out result/  # <target>__<rp>_<lang>.json
    python -m esc.dialogues import --format official result/llama3_en.json --language en \
        --roleplayer esc_role --target llama3_8b_instruct --out RUN_DIR
    python -m esc.dialogues merge SHARD_DIR [SHARD_DIR ...] --out MERGED_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from esc.cards import load_cards
from esc.dialogues.merge import merge_runs
from esc.dialogues.official import from_official, official_name, to_official
from esc.dialogues.store import DialogueStore, check_against_settings, dialogue_file, read_dialogues
from esc.dialogues.transcript import render_transcript
from esc.errors import ArgumentParser, DataError, UserError, exit_on_user_error
from esc.jsonl import atomic_write_text
from esc.rundir import read_settings


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m esc.dialogues", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print dialogues as transcripts (speaker, text, finish reason)")
    show.add_argument("files", type=Path, nargs="+", help="dialogue files (RUN_DIR/dialogues/*.jsonl)")
    show.add_argument("--card", type=int, action="append", help="only this card id (repeatable)")
    show.add_argument("--limit", type=int, default=None, help="at most this many dialogues")
    show.add_argument("--brief", action="store_true", help="leave out the prompts, show the turns only")
    show.add_argument("--width", type=int, default=None, help="columns (default: the terminal's)")
    exp = sub.add_parser("export", help="write RUN_DIR/dialogues/*.jsonl in another format")
    exp.add_argument("run_dir", type=Path)
    exp.add_argument("--format", choices=["official"], default="official")
    exp.add_argument("--out", type=Path, required=True)
    exp.add_argument(
        "--cards", type=Path, nargs="*", help="card files the indices refer to (default: released)"
    )
    imp = sub.add_parser("import", help="read files in another format into RUN_DIR/dialogues/")
    imp.add_argument("files", type=Path, nargs="+")
    imp.add_argument("--format", choices=["official"], default="official")
    imp.add_argument("--language", choices=["en", "zh"], required=True)
    imp.add_argument("--roleplayer", default="esc_role")
    imp.add_argument("--target", required=True)
    imp.add_argument("--out", type=Path, required=True)
    imp.add_argument(
        "--cards", type=Path, nargs="*", help="card files the indices refer to (default: released)"
    )
    merge = sub.add_parser("merge", help="join sharded runs; report missing and duplicated dialogues")
    merge.add_argument("run_dirs", type=Path, nargs="+")
    merge.add_argument(
        "--out",
        type=Path,
        required=True,
        help="a new folder, or one holding dialogues already: they are kept, the shards' new ones added",
    )
    return parser


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "show":
        try:
            return _show(args)
        except BrokenPipeError:  # `show ... | head`: the reader has enough; stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    if args.command == "export":
        _export(args)
    elif args.command == "import":
        _check_out_dir(args.out)
        cards = load_cards(args.cards or None, language=args.language)
        dialogues = [
            d for path in args.files for d in from_official(path, cards, args.roleplayer, args.target)
        ]
        store = DialogueStore(dialogue_file(args.out, args.target, args.roleplayer, args.language))
        added = 0
        for dialogue in dialogues:  # every file read and checked before the first line is written
            added += not store.is_done(dialogue.card_id, dialogue.language)
            store.add(dialogue)
        print(f"{added} dialogues imported into {store.path}")
    else:
        _check_out_dir(args.out)
        report = merge_runs(args.run_dirs, args.out)
        problems = 0
        for name, info in report["files"].items():
            kept = report["already_in_out"].get(name, 0)
            print(
                f"{name}: {info['dialogues']} dialogues"
                + (f" ({kept} already in {args.out})" if kept else "")
                + f", {len(info['missing'])} missing, {len(info['duplicated'])} duplicated"
            )
            problems += len(info["missing"]) + len(info["duplicated"])
        if report["missing_shards"]:
            print(f"missing shards: {report['missing_shards']} of {report['shard_count']}", file=sys.stderr)
        print(f"merged into {args.out} (report: {args.out / 'merge_report.json'})")
        return 1 if problems or report["missing_shards"] else 0
    return 0


def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: --out is an existing file; name a folder (new or existing)")


def _export(args: argparse.Namespace) -> None:
    """Every dialogue file of a run as an official result file; all are read before any is written."""
    if not args.run_dir.is_dir():
        raise UserError(f"{args.run_dir}: no such run folder")
    _check_out_dir(args.out)
    files = sorted(
        p for p in (args.run_dir / "dialogues").glob("*.jsonl") if not p.name.endswith(".failed.jsonl")
    )
    if not files:
        raise UserError(f"{args.run_dir / 'dialogues'}: no dialogue files")
    settings = read_settings(args.run_dir).get("evaluate")
    exports = []
    for path in files:
        parts = path.stem.split("__")
        if len(parts) != 3 or parts[2] not in ("en", "zh"):
            raise DataError(path, None, "not a dialogue file name (<target>__<roleplayer>__<en|zh>.jsonl)")
        target, roleplayer, language = parts
        cards = load_cards(args.cards or None, language=language)
        dialogues = list(read_dialogues(path))
        if settings is not None:  # every dialogue made with the folder's settings, or nothing exported
            check_against_settings(path, dialogues, settings)
        data = to_official(dialogues, cards)
        exports.append((path, args.out / official_name(target, roleplayer, language), data))
    args.out.mkdir(parents=True, exist_ok=True)
    for path, dest, data in exports:
        atomic_write_text(dest, json.dumps(data, ensure_ascii=False, indent=4) + "\n")
        print(f"{path} -> {dest} ({len(data)} dialogues)")


def _show(args: argparse.Namespace) -> int:
    width = args.width or shutil.get_terminal_size(fallback=(100, 24)).columns
    shown = 0
    for path in args.files:
        if not path.is_file():
            raise UserError(f"{path}: no such dialogue file")
        for dialogue in read_dialogues(path):
            if args.card and dialogue.card_id not in args.card:
                continue
            if args.limit is not None and shown >= args.limit:
                return 0
            print(("\n" if shown else "") + f"{path}:")
            print(render_transcript(dialogue, width=width, prompts=not args.brief))
            shown += 1
    if not shown:
        wanted = f" for card {', '.join(map(str, args.card))}" if args.card else ""
        raise UserError(f"{', '.join(map(str, args.files))}: no dialogue{wanted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
