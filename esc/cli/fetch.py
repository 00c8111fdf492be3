"""`esc fetch [--only NAME] [--check] [--offline]`: fill data/ with the pinned public datasets of
data/sources.yaml (`make data`; esc/fetch/fetcher.py)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from esc.errors import ArgumentParser
from esc.fetch.fetcher import check, fetch, select
from esc.fetch.manifest import MANIFEST_PATH, load_manifest
from esc.paths import data_dir, shared_data_dir

HELP = (
    "Fill data/ with the pinned public datasets of data/sources.yaml "
    "(shared copy first, else the pinned GitHub URL; sha256 always checked)."
)


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
    parser.add_argument(
        "--dest", type=Path, default=None, help="target folder (default: data/, or $ESC_DATA_DIR)"
    )
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="only this dataset (repeatable); see sources.yaml"
    )
    parser.add_argument("--check", action="store_true", help="verify files only; exit 1 listing problems")
    parser.add_argument(
        "--offline", action="store_true", help="never download; a file missing locally is an error"
    )
    parser.add_argument("--jobs", type=int, default=8, help="parallel copies/downloads (default 8)")
    parser.add_argument(
        "--manifest", type=Path, default=MANIFEST_PATH, help="manifest (default data/sources.yaml)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    datasets = load_manifest(args.manifest)
    files = select(datasets, args.only, args.manifest)
    dest = args.dest if args.dest is not None else data_dir()
    if args.check:
        problems = check(files, dest)
        for line in problems:
            print(line, file=sys.stderr)
        ok = len(files) - len(problems)
        print(f"check {dest}: {ok} of {len(files)} files OK, {len(problems)} problem(s)")
        return 1 if problems else 0
    start = time.monotonic()
    counts = fetch(files, dest, shared=shared_data_dir(), offline=args.offline, jobs=args.jobs)
    replaced = f" ({counts['replaced']} replaced a file with a wrong sha256)" if counts["replaced"] else ""
    print(
        f"data -> {dest}: {counts['copied']} copied, {counts['downloaded']} downloaded, "
        f"{counts['present']} already present{replaced} [{time.monotonic() - start:.1f}s]"
    )
    return 0
