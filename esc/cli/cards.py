"""`esc cards stats [--language en|zh] [--json]`, `esc cards show ID`, `esc cards crisis [--sources]`:
the role cards (the released high-quality files, or card files given with --cards). Cards are built
from raw datasets by `python build_cards.py` (conf/cards.yaml); `crisis` lists the cards that mention
suicide or self-harm (`esc.cards.crisis`, played with `python evaluate.py cards.subset=crisis`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from esc.cards.crisis import format_crisis, source_crisis_counts
from esc.cards.loader import load_cards
from esc.cards.stats import card_stats, format_stats
from esc.errors import ArgumentParser, UserError

HELP = "Inspect ESC-Eval role cards (build them with `python build_cards.py`)."


def parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(prog=prog, description=HELP)
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
    show.add_argument("id", type=int, help="card id, e.g. 32025")
    crisis = sub.add_parser(
        "crisis", parents=[common], help="the cards that mention suicide or self-harm, per language"
    )
    crisis.add_argument(
        "--sources",
        action="store_true",
        help="also count the seeker texts of the source datasets under data/ (ESConv, FailedESConv, "
        "EPITOME, ChatCounselor, PsyQA, Smile)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    cards = load_cards(args.cards, language=args.language)
    if args.command == "stats":
        stats = card_stats(cards)
        print(json.dumps(stats, ensure_ascii=False, indent=2) if args.json else format_stats(stats))
        return 0
    if args.command == "crisis":
        print(format_crisis(cards, source_crisis_counts() if args.sources else None))
        return 0
    matches = [card for card in cards if card.id == args.id]
    if not matches:
        raise UserError(f"no card with id {args.id} among {len(cards)} loaded cards")
    print(matches[0].to_text())
    return 0
