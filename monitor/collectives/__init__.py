"""The collective test before a launch: the exercise every rank runs, the measurement it writes,
and the verdict on it (the slow node, rank or link, or nobody)."""
