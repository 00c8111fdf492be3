"""Scoring dialogues on the paper's 7 dimensions (0-4): rubrics, judges, score files and reports."""
