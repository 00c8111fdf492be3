"""The rank.py job: builds the judge or jury once, runs one task (`esc.tasks`), writes the report site."""
