"""Role-play agent evaluation: the six metrics of Table 10 and the pairwise human-likeness test."""
