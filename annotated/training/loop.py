"""A run's training: chapter 3's `train` on the run's schedule, scoring the validation set on the
way and keeping snapshots of the weights, resumed from the run's checkpoint.

`train_schedule` is the stage: it takes the run in progress (`folder.RunInProgress`) and the
schedule its plan gave. After each step its `StepHook` decides whether to evaluate (greedy
validation BLEU of the bare weights, a line in evals.csv, a snapshot in snapshots/) and whether
the run's time is up. Under torch.distributed every process trains its share of each step's
batches; only the first, the one that writes the run's folder, evaluates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from annotated.base.checkpoints import load_checkpoint, read_checkpoint
from annotated.base.distributed import data_parallel
from annotated.base.files import atomic_write
from annotated.ch02_model import EncoderDecoder
from annotated.ch03_training import train
from annotated.ch05_text import Corpus
from annotated.ch06_decoding import Translator, evaluate_split
from annotated.training.config import Schedule
from annotated.training.folder import RunFolder, RunInProgress

HISTORY_COLUMNS = ("step", "loss", "lr", "tokens", "seconds")
EVAL_COLUMNS = ("step", "epoch", "train minutes", "val BLEU")


def read_csv(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    """A run's table (history.csv, evals.csv), empty with its columns before it is written."""
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=list(columns))


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_write(path, "w", encoding="utf-8") as handle:
        frame.to_csv(handle, index=False)


def save_snapshot(model: EncoderDecoder, folder: RunFolder, step: int, keep: int) -> None:
    """Save the model's weights as the folder's snapshot of `step`, keeping only the last `keep`."""
    path = folder.snapshot(step)
    path.parent.mkdir(exist_ok=True)
    with atomic_write(path) as handle:
        state = {"model": model.state_dict(), "model_config": dataclasses.asdict(model.config)}
        torch.save({"step": step, **state}, handle)
    for old in folder.snapshots()[:-keep]:
        old.unlink()


class StepHook:
    """What a run does after each training step: score the validation set now and then, and stop
    when its time is up (the `on_step` of chapter 3's `train`).

    At each evaluation (every `schedule.eval_every` steps, at the last step, and when time is up)
    it appends a row to evals.csv and saves a snapshot of the weights; only a process that writes
    the folder does either. It returns True (stop) once `schedule.limit_seconds` of training have
    passed, counting the `seconds` trained before.
    """

    def __init__(
        self,
        schedule: Schedule,
        folder: RunFolder,
        translator: Translator,
        corpus: Corpus,
        *,
        val_sentences: int | None,
        seconds: float,
        progress: bool,
    ) -> None:
        self.schedule, self.folder = schedule, folder
        self.translator, self.corpus = translator, corpus
        self.val_sentences = val_sentences  # score the first n validation sentences (None: all)
        self.seconds = seconds  # training seconds so far
        self.progress = progress
        self.evals = read_csv(folder.evals, EVAL_COLUMNS)

    @property
    def out_of_time(self) -> bool:
        limit = self.schedule.limit_seconds
        return limit is not None and self.seconds >= limit

    def __call__(self, row: dict) -> bool:
        self.seconds += row["seconds"]
        step = row["step"]
        last = step == self.schedule.steps
        due = step % self.schedule.eval_every == 0 or self.out_of_time or last
        if due and self.folder.writes:
            self.evaluate(step)
        return self.out_of_time

    def evaluate(self, step: int) -> None:
        """Greedy validation BLEU of the bare weights, a line in evals.csv, and a snapshot."""
        scores, _ = evaluate_split(
            self.translator,
            self.corpus,
            "val",
            limit=self.val_sentences,
            beam=1,
            alpha=0.0,
            copy_unknowns=False,
        )
        line = {
            "step": step,
            "epoch": round(step / self.schedule.steps_per_epoch, 2),
            "train minutes": round(self.seconds / 60, 2),
            "val BLEU": scores["BLEU"],
        }
        earlier = self.evals[self.evals.step < step]  # a resumed run replaces later lines
        self.evals = pd.concat([earlier, pd.DataFrame([line])], ignore_index=True)
        write_csv(self.evals, self.folder.evals)
        save_snapshot(self.translator.model, self.folder, step, self.schedule.average_last)
        if self.progress:
            print(
                f"step {step} (epoch {line['epoch']}): {line['train minutes']} min, "
                f"val BLEU {line['val BLEU']}",
                flush=True,
            )


@dataclass
class Trained:
    """What the training stage leaves: the trained model's translator, the history of every step,
    the validation scores, and the training seconds (over every start of the run)."""

    translator: Translator
    history: pd.DataFrame
    evals: pd.DataFrame
    seconds: float


def saved_history(checkpoint: Path) -> pd.DataFrame:
    """The history stored in the run's checkpoint (empty before the first one)."""
    rows = read_checkpoint(checkpoint).get("history", []) if checkpoint.exists() else []
    if not rows:
        return pd.DataFrame(columns=list(HISTORY_COLUMNS), dtype=float)
    return pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))


def train_schedule(run: RunInProgress, schedule: Schedule) -> Trained:
    """Train the run's model on its batches to the end of `schedule` with chapter 3's `train`,
    resuming from the run's checkpoint; or, when its time is already spent, load the checkpoint
    and train no more."""
    config, folder, model = run.config, run.folder, run.model
    batches, specials, rank, world = run.batches, run.specials, run.rank, run.world
    says = run.says  # asked before chapter 3's configuration is made: the run then goes down once
    translator = Translator(model, run.corpus.src_vocab, run.corpus.tgt_vocab, config.decoding)
    history = saved_history(folder.checkpoint)
    hook = StepHook(
        schedule,
        folder,
        translator,
        run.corpus,
        val_sentences=config.val_sentences,
        seconds=float(history.seconds.sum()),
        progress=run.progress,
    )
    train_config = config.train_config(schedule)
    if hook.out_of_time:  # the time budget is spent: load the result, train no more
        state = load_checkpoint(folder.checkpoint, model.config, train_config)
        model.load_state_dict(state["model"])
    else:
        history = train(
            data_parallel(model),
            lambda step: batches.step(step, specials, rank, world),
            train_config,
            folder.checkpoint,
            progress=says,
            on_step=hook,
            extra={"decoding": dataclasses.asdict(config.decoding)},
        )
    model.eval()
    return Trained(translator, history, hook.evals, hook.seconds)
