"""The human-annotation round trip: tasks out (JSONL, CSV, Label Studio), labels in, agreement."""
