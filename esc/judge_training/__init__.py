"""Training ESC-RANK, the judge that learns human scores: its samples (`data`) and its job (`train`)."""
