"""The official ESC-Eval file formats, both ways, in one place: dialogue files
(`result/<date>/<Model>_<lang>.json`, `esc.official_formats.dialogues`) and score files
(`score/<Model>_<lang>.json`, `esc.official_formats.scores`). `esc dialogues export|import` and
`esc scores export|import` are their command line."""
