"""Command line: `python -m esc.cards stats [--language en|zh] [--json]`, `python -m esc.cards show ID`,
and `python -m esc.cards build [Hydra overrides]` (role cards from raw datasets: conf/cards.yaml,
esc/cards/construct/pipeline.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from esc.cards.loader import load_cards
from esc.cards.stats import card_stats, format_stats
from esc.errors import ArgumentParser, UserError, exit_on_user_error


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m esc.cards", description="Inspect ESC-Eval role cards.")
    common = ArgumentParser(add_help=False)
    common.add_argument(
        "--cards",
        type=Path,
        action="append",
        metavar="PATH",
        help="card file (released or saved format); repeatable; default: the released high-quality files",
    )
    common.add_argument("--language", choices=["en", "zh", "english", "chinese"], help="only this language")
    sub = parser.add_subparsers(dest="command", required=True)
    stats = sub.add_parser("stats", parents=[common], help="counts by language, source and topic")
    stats.add_argument("--json", action="store_true", help="print the counts as JSON")
    show = sub.add_parser("show", parents=[common], help="print one card's text")
    sub.add_parser("build", help="role cards from raw datasets (Hydra overrides follow; conf/cards.yaml)")
    show.add_argument("id", type=int, help="card id, e.g. 32025")
    return parser


def build(argv: list[str]) -> int:
    """`build`: a Hydra job composed from conf/cards.yaml with the overrides in `argv`."""
    import hydra

    from esc.errors import run_hydra
    from esc.paths import REPO_ROOT

    sys.argv = [f"{sys.argv[0]} build", *argv]  # Hydra reads its overrides from sys.argv

    @hydra.main(config_path=str(REPO_ROOT / "conf"), config_name="cards", version_base="1.3")
    @exit_on_user_error
    def job(cfg) -> None:  # noqa: ANN001
        from esc.cards.construct.pipeline import build_cards
        from esc.config_schema import validate

        validate(cfg, "cards")
        result = build_cards(cfg)
        print(result["markdown"], end="")
        print(f"{result['cards']} cards: {result['output_dir']}/cards.json (report.md, unparseable.jsonl)")

    run_hydra(job)
    return 0


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    """Run the command line; UserError ends with one line on stderr and exit code 2."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["build"]:
        return build(argv[1:])
    args = _parser().parse_args(argv)
    cards = load_cards(args.cards, language=args.language)
    if args.command == "stats":
        stats = card_stats(cards)
        print(json.dumps(stats, ensure_ascii=False, indent=2) if args.json else format_stats(stats))
        return 0
    matches = [card for card in cards if card.id == args.id]
    if not matches:
        raise UserError(f"no card with id {args.id} among {len(cards)} loaded cards")
    print(matches[0].to_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
