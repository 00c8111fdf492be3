"""Card construction (`python -m esc.cards build`): source adapters, the four LLM steps (extract,
filter, classify, grade) with strict parsing, and the resumable job with dedup and report."""
