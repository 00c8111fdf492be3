"""The seven-dimension score (Table 2): the leaderboard, a jury's pooled score, several simulators."""
