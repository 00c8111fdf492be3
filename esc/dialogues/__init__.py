"""The dialogue record, its file format and store, and the tools that read it: transcripts, the
official format, merging shards."""
