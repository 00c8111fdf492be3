"""Role-play agent evaluation (Table 1): the six metrics of Table 10 and the pairwise human-likeness test."""
