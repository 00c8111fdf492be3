"""Card construction (`python build_cards.py`): source adapters, the four LLM steps (extract,
filter, classify, grade) with strict parsing, and the resumable job with dedup and report."""
