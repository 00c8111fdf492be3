"""rank.py's tasks: one folder each (`score/`, `agreement/`, `correlation/`, `roleplay/`, `safety/`,
`pairwise/`, `trajectory/`), holding its settings, its items or plan, its questions and its report;
`task.py` is the base class, the registry and the one runner every task goes through.

The registry imports every module here once, so a new folder with a registered task is a new mode of
rank.py (docs/architecture.md, "Adding a task")."""
