"""A training run of chapters 7 to 9, above chapters 1 to 6 and below the chapters that train.

A run's configuration and its folder, its plan (the speed probe and the time budget), the
training itself and its finish (averaging, scores, the translator) are in `runs` and `budgets`;
many runs of one recipe in `sweeps`; where a step's time goes in `profiling`.
"""
