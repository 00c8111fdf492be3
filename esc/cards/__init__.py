"""ESC-Eval role cards: schema, the paper's three-tier taxonomy, loading, saving, selecting and statistics."""

from esc.cards.loader import load_cards, parse_card_text, save_cards
from esc.cards.schema import RoleCard
from esc.cards.selection import select_cards
from esc.cards.taxonomy import load_taxonomy

__all__ = ["RoleCard", "load_cards", "load_taxonomy", "parse_card_text", "save_cards", "select_cards"]
