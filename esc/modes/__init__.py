"""The job layer: what an entry point runs when one job has several modes (`rank.py mode=...`).

It sits above every stage, so that it may pick among them; the stages never import it."""
