"""A training run for translation, in one folder, resumable, scored: the spine of chapters 7 and 8.

`train_run` goes through a run's four stages, each in its own module of `annotated/training/`:
its configuration (`config.py`: `RunConfig`, the model it makes, the recipe's `Schedule`), its plan
(`plan.py`: the schedule a time budget fits into this machine's minutes, `TimeBudget`), its training
(`loop.py`: chapter 3's `train` with validation scores and snapshots on the way), and its finish
(`finish.py`: averaging, the `Run`, its final scores, `load_translator`). Each stage takes the run
in progress (`folder.RunInProgress`): the configuration, the folder, the corpus, the batches, the
model and the recipe's schedule, made here once. A run folder holds (`folder.RunFolder` names each
file):

* `checkpoint.pt`: the model and everything needed to resume (written atomically), with the
  run's `DecodeConfig`;
* `subwords.json`, or `vocab.de.json` and `vocab.en.json`: the vocabulary with its settings;
* `history.csv`: loss, learning rate, tokens and seconds per step;
* `evals.csv`: validation BLEU (greedy, bare weights) against steps and training minutes;
* `snapshots/`: the weights at the last evaluations, and `averaged.pt`, their average;
* `scores.json`: the final scores, with the step and decoding that produced them;
* `plan.json`: how a time budget fitted the schedule, when the run has one (`plan.TimeBudget`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from annotated.base.devices import training_device  # a CUDA GPU, Apple's MPS or the CPU (chapter 3)
from annotated.base.distributed import rank_and_world
from annotated.base.files import folder_lock
from annotated.ch05_text import BatchPlan, Corpus
from annotated.training.config import RunConfig, new_model, shared_specials
from annotated.training.finish import Run, finish_run
from annotated.training.folder import RunFolder, RunInProgress
from annotated.training.loop import train_schedule
from annotated.training.plan import plan_run, settle_budget


def train_run(config: RunConfig, folder: str | Path, corpus: Corpus, progress: bool = True) -> Run:
    """Train, resume, or just load the run in `folder` (whose vocabularies are saved there).

    Under torch.distributed (chapter 8) every process trains on its share of each step's batches;
    only the first one evaluates, keeps snapshots and writes files.
    """
    rank, world = rank_and_world()  # asked once: the folder and the stages are told
    files = RunFolder(folder, writes=rank == 0)
    # One process per run folder: a second one stops here and names the first.
    with folder_lock(files.path) if files.writes else contextlib.nullcontext():
        # Configure: the run's batches, the recipe's schedule on them, and the run's model,
        # freshly initialized from its seed.
        pairs = corpus.ids["train"][: config.train_pairs]
        batches = BatchPlan.build(pairs, config.max_tokens, config.accumulate, world, config.seed)
        recipe = config.schedule(batches.steps_per_epoch)
        model = new_model(config, corpus).to(training_device())
        specials = shared_specials(corpus)
        run = RunInProgress(
            config, files, corpus, batches, model, recipe, specials, rank, world, progress
        )
        # Plan: the recipe's schedule, or the one a time budget fits it into (plan.json).
        schedule, budget = plan_run(run)
        # Train: chapter 3's loop from the checkpoint, scoring the validation set on the way.
        trained = train_schedule(run, schedule)
        # Finish: a stop by the time limit said, the history kept, the last snapshots averaged.
        last = int(trained.history.step.max())
        budget = settle_budget(budget, files, last, trained.seconds / 60)
        return finish_run(run, schedule, trained, budget)
