"""A run's folder, and a run in progress: the one place that names a run's files.

`RunFolder` names every file a translation run keeps (`annotated/training/runs.py` lists them),
knows which of its models is the best one (the average of the last snapshots, else the latest
checkpoint), and says whether this process writes there: under torch.distributed (chapter 8) every
process reads a run's folder and only the first writes, which the folder asks once, when it is
made, instead of each stage asking the process's rank again. `folder_name` is where
`python -m annotated.train` keeps a task's run of a profile (`multi30k-full`, `wmt-sample`).

`RunInProgress` is a run between its configuration and its finish: its configuration, folder,
corpus, batches and freshly made model, and the recipe's schedule, computed once. The stages of
`annotated/training/` (`plan`, `loop`, `finish`) each take it, where each took the same six
arguments before.

This module imports no stage, and nothing at all until a folder asks for the process's rank, so
that a command that only names a run's files (`python -m annotated.translate --help`) does not
import torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the types of a run in progress, which every caller has already imported
    from annotated.ch02_model import EncoderDecoder
    from annotated.ch03_training import SpecialTokens
    from annotated.ch05_text import BatchPlan, Corpus
    from annotated.training.config import RunConfig, Schedule


def folder_name(task: str, profile: str) -> str:
    """The folder of a task's run of a profile in the runs folder: `multi30k-full`, `wmt-sample`."""
    return f"{task}-{profile}"


def _first_process() -> bool:
    """Whether this is the first process of a torch.distributed run, or the only process."""
    from annotated.base.distributed import rank_and_world  # imports torch: only when asked

    return rank_and_world()[0] == 0


@dataclass(frozen=True)
class RunFolder:
    """The files of the run in `path`, and whether this process writes them.

    `writes` is the first process's alone (asked once, from the process's rank, when the folder
    is made); a test or a reader may give it.
    """

    path: Path
    writes: bool = dataclasses.field(default_factory=_first_process)

    CHECKPOINT = "checkpoint.pt"  # the model and all a resumed run needs (chapter 3)
    AVERAGED = "averaged.pt"  # the average of the last snapshots (section 6.1)
    SNAPSHOTS = "snapshots"  # the weights at the last evaluations: step-NNNNNN.pt
    HISTORY = "history.csv"  # loss, learning rate, tokens and seconds of every step
    EVALS = "evals.csv"  # validation BLEU at each evaluation
    PLAN = "plan.json"  # how a time budget fitted the schedule (`plan.TimeBudget`)
    SCORES = "scores.json"  # the final scores, with the step and decoding behind them
    SUBWORDS = "subwords.json"  # one shared subword vocabulary (chapter 8's runs)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def checkpoint(self) -> Path:
        return self.path / self.CHECKPOINT

    @property
    def averaged(self) -> Path:
        return self.path / self.AVERAGED

    @property
    def history(self) -> Path:
        return self.path / self.HISTORY

    @property
    def evals(self) -> Path:
        return self.path / self.EVALS

    @property
    def plan(self) -> Path:
        return self.path / self.PLAN

    @property
    def scores(self) -> Path:
        return self.path / self.SCORES

    @property
    def subwords(self) -> Path:
        return self.path / self.SUBWORDS

    def vocab(self, language: str) -> Path:
        """A word vocabulary of one language (`de` or `en`): vocab.de.json, vocab.en.json."""
        return self.path / f"vocab.{language}.json"

    def snapshot(self, step: int) -> Path:
        """The snapshot of the weights at `step` (six digits, so that names sort by step)."""
        return self.path / self.SNAPSHOTS / f"step-{step:06d}.pt"

    def snapshots(self) -> list[Path]:
        """The snapshots kept, oldest first."""
        return sorted((self.path / self.SNAPSHOTS).glob("step-*.pt"))

    def best_model(self) -> Path:
        """The model the run's scores and translations take: its averaged weights, else its latest
        checkpoint (which may not exist yet)."""
        return self.averaged if self.averaged.exists() else self.checkpoint


@dataclass
class RunInProgress:
    """A run between its configuration and its finish: what `train_run` hands to each stage."""

    config: RunConfig  # as given: a time budget plans another schedule and leaves this as it was
    folder: RunFolder
    corpus: Corpus
    batches: BatchPlan  # this process's share of each step's batches
    model: EncoderDecoder  # freshly initialized from the run's seed; the training stage trains it
    recipe: Schedule  # the recipe's schedule at these batches' steps an epoch, computed once
    specials: SpecialTokens  # the pad, <s> and </s> ids both vocabularies give
    rank: int  # this process, of `world` (0 of 1 without torch.distributed)
    world: int
    progress: bool  # print the plan, a progress bar and each evaluation

    @property
    def says(self) -> bool:
        """Whether this process prints what the run does: asked to, and the first process."""
        return self.progress and self.folder.writes
