"""The seekers' emotion per target, from the ratings evaluate.py stored (no judge)."""
