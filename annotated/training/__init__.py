"""A training run of chapters 7 to 9, above chapters 1 to 6 and below the chapters that train.

A run goes through four stages, each a module: its configuration (`config`: `RunConfig`, its
profiles, the model and the recipe's `Schedule` it makes), its plan (`plan`: the speed probe and
the time budget, which give the schedule it trains), its training (`loop`: chapter 3's `train` with
evaluations and snapshots) and its finish (`finish`: averaging, scores, the translator, the
vocabularies). `runs.train_run` is the spine that calls them in turn, handing each the run in
progress (`folder.RunInProgress`); `folder.RunFolder` names a run folder's files, gives its best
model and says whether this process writes there. Many runs of one recipe are in `sweeps`; where
a step's time goes in `profiling`; the model the book ships, read back, in `shipped`.
"""
