"""`esc dialogues`: read dialogues as transcripts, export/import the official format, merge shards.

    esc dialogues show RUN_DIR/dialogues/*.jsonl [--card 32025] [--limit 1] [--brief]
    esc dialogues export --format official RUN_DIR --out result/  # <target>__<rp>_<lang>.json
    esc dialogues import --format official result/llama3_en.json --language en \
        --roleplayer esc_role --target llama3_8b_instruct --out RUN_DIR
    esc dialogues merge SHARD_DIR [SHARD_DIR ...] --out MERGED_DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from esc.dialogues.merge import merge_runs, merge_summary
from esc.dialogues.store import read_dialogues
from esc.dialogues.transcript import render_transcript
from esc.errors import ArgumentParser, UserError
from esc.official_formats.dialogues import check_out_dir, export_run, import_files

HELP = "Read dialogues as transcripts, export/import the official format, merge shards."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
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


def run(args: argparse.Namespace) -> int:
    if args.command == "show":
        try:
            return _show(args)
        except BrokenPipeError:  # `show ... | head`: the reader has enough; stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    if args.command == "export":
        for path, dest, n in export_run(args.run_dir, args.out, args.cards):
            print(f"{path} -> {dest} ({n} dialogues)")
        return 0
    if args.command == "import":
        path, added = import_files(
            args.files, args.out, args.language, args.roleplayer, args.target, args.cards
        )
        print(f"{added} dialogues imported into {path}")
        return 0
    check_out_dir(args.out)
    lines, problems = merge_summary(merge_runs(args.run_dirs, args.out), args.out)
    for line in lines:
        print(line, file=sys.stderr if line.startswith("missing shards") else sys.stdout)
    return 1 if problems else 0


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
