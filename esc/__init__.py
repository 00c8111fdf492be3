"""ESC-Eval: role cards, the ESC-Role role-player, ESC evaluation and ESC-RANK scoring."""

__version__ = "0.1.0"
