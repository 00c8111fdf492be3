"""Results leave as a dataset: one row per dialogue of rank.py runs (`esc export`), as Parquet and as a
Hugging Face `datasets` folder with a dataset card; `--push` sends it to the Hub."""
