"""Training runs for translation: one configuration, one run folder, resumable, scored.

Chapters 7 (Multi30k) and 8 (WMT) train with the same machinery, which lives here rather than in
either chapter: `RunConfig` (everything a run depends on) and its profiles (`pick_profile`,
`smoke_version`), `train_run` (train, resume or just load a run in its folder, with `StepHook`
scoring the validation set on the way and a time budget from `annotated/training/budgets.py`), checkpoint
averaging, `final_scores`, and `load_translator` (a run folder's model with its vocabularies,
which `save_vocabularies` put there). A run folder holds:

* `checkpoint.pt`: the model and everything needed to resume (written atomically), with the
  run's `DecodeConfig`;
* `subwords.json`, or `vocab.de.json` and `vocab.en.json`: the vocabulary with its settings;
* `history.csv`: loss, learning rate, tokens and seconds per step;
* `evals.csv`: validation BLEU (greedy, bare weights) against steps and training minutes;
* `snapshots/`: the weights at the last evaluations, and `averaged.pt`, their average;
* `scores.json`: the final scores, with the step and decoding that produced them;
* `plan.json`: how a time budget fitted the schedule, when the run has one (`budgets.TimeBudget`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor, nn

from annotated.base.checkpoints import load_checkpoint, read_checkpoint
from annotated.base.devices import training_device  # a CUDA GPU, Apple's MPS or the CPU (chapter 3)
from annotated.base.distributed import rank_and_world, sum_over_processes
from annotated.base.files import atomic_write, folder_lock, runs_dir
from annotated.base.machine import describe as describe_machine
from annotated.ch02_model import EncoderDecoder, ModelConfig, make_model
from annotated.ch03_training import (
    SpecialTokens,
    TrainConfig,
    train,
    use_fast_dropout,
)
from annotated.ch05_text import BatchPlan, Corpus, Subwords, Vocab
from annotated.ch06_decoding import DecodeConfig, Translator, evaluate_split
from annotated.training.budgets import (
    PROBE_STEPS,
    TimeBudget,
    fit_schedule,
    read_budget,
    report_stop,
    write_budget,
)

RUNS_DIR = runs_dir()  # the checkout's runs/, else the user's (files.runs_dir)
PROFILE_ENV = "ANNOTATED_PROFILE"


def profile_name(default: str) -> str:
    """The profile $ANNOTATED_PROFILE names ("smoke" in CI), else the chapter's `default`."""
    return os.environ.get(PROFILE_ENV) or default


def pick_profile(profiles: dict, name: str | None, default: str) -> tuple[str, RunConfig]:
    """The profile named (or by $ANNOTATED_PROFILE, else `default`) and its configuration."""
    name = name or profile_name(default)
    if name not in profiles:
        raise ValueError(f"{PROFILE_ENV}={name!r}: choose one of {sorted(profiles)}")
    return name, profiles[name]


@dataclass(frozen=True)
class RunConfig:
    """One translation run: data, model, schedule, budget and decoding (defaults: the paper's base)."""

    # Data and vocabulary (chapter 5)
    train_pairs: int | None = None  # train on the first n pairs only (None: all)
    vocab_size: int | None = 37000  # n shared BPE subwords; None: a word vocabulary per language
    min_freq: int = 2  # word vocabularies only: rarer training words become <unk>
    max_tokens: int = 3125  # padded target tokens per micro-batch (sources held to the same)
    accumulate: int = 1  # micro-batches per optimizer step and process (chapter 3)
    # Model: chapter 2's ModelConfig settings of the same names, which `model_config` passes on
    N: int = 6
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    d_k: int | None = None  # query/key width per head (None: d_model // h)
    d_v: int | None = None  # value width per head (None: d_model // h)
    learned_positions: bool = False  # a trained position table instead of sinusoids (Table 3, E)
    p_drop: float = 0.1
    p_drop_final: float | None = None  # dropout rising linearly to this by the last step (ch. 3)
    norm_first: bool = False  # the paper's post-norm
    fast_dropout: bool = False  # chapter 3's FastDropout: a quarter of the random draws (CPUs)
    # Schedule: chapter 3's TrainConfig settings of the same names (`train_config`), the run's length
    warmup: int = 4000
    lr_factor: float = 1.0
    eps_ls: float = 0.1
    steps: int | None = 100_000  # optimizer steps; None: `epochs` passes over the data instead
    epochs: int | None = None
    cooldown_epochs: float = 0.0  # the rate falls linearly to 1/c of its value over these epochs
    max_minutes: float | None = None  # a time budget: the schedule is planned to fit (TimeBudget)
    precision: str = "auto"  # bf16 autocast where the hardware has it (chapter 3)
    # Evaluation, averaging and decoding (chapter 6)
    evals_per_epoch: int = 2  # validation BLEU this often; also a checkpoint and a snapshot
    average_last: int = 5  # the final model averages the last this many snapshots (section 6.1)
    val_sentences: int | None = None  # score only the first n validation sentences (None: all)
    test_sentences: int | None = None  # the same for the final test scores
    decoding: DecodeConfig = DecodeConfig(beam=4, alpha=0.6)  # section 6.1
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError(f"give either steps or epochs, not both or neither: {self}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(
                f"max_minutes must be positive, or None for no budget: {self.max_minutes}"
            )

    def shared_settings(self, config_class: type) -> dict:
        """This run's values of the settings it shares, by name, with chapter 2's `ModelConfig`
        or chapter 3's `TrainConfig` (a test holds their defaults equal: the paper's)."""
        names = {field.name for field in dataclasses.fields(config_class)}
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name in names
        }

    def model_config(
        self, src_vocab: int, tgt_vocab: int, shared: bool | None = None
    ) -> ModelConfig:
        """Chapter 2's configuration for this run's model.

        One shared vocabulary shares all three embedding matrices (section 3.4); two word
        vocabularies can share only the target embedding with the output layer.
        """
        shared = self.vocab_size is not None if shared is None else shared
        return ModelConfig(
            src_vocab,
            tgt_vocab,
            tie_target_embeddings=not shared,
            share_embeddings=shared,
            max_len=512,
            **self.shared_settings(ModelConfig),
        )

    def train_config(self, steps_per_epoch: int) -> TrainConfig:
        """Chapter 3's configuration: the run's steps, with a checkpoint at each evaluation."""
        return TrainConfig(
            max_steps=self.steps if self.steps is not None else self.epochs * steps_per_epoch,
            cooldown=round(self.cooldown_epochs * steps_per_epoch),
            checkpoint_every=self.eval_every(steps_per_epoch),
            **self.shared_settings(TrainConfig),
        )

    def eval_every(self, steps_per_epoch: int) -> int:
        return max(1, steps_per_epoch // self.evals_per_epoch)


def smoke_version(config: RunConfig, **changes: object) -> RunConfig:
    """A profile made small enough for CI to train in a minute through the same code.

    The model shrinks to one layer a side of width 32 with two heads (with a learning rate to
    match), it is evaluated once an epoch and decoded with a beam of two; `changes` cut the data
    and the schedule.
    """
    tiny = dict(N=1, d_model=32, d_ff=64, h=2, lr_factor=2.0, evals_per_epoch=1)
    decoding = dataclasses.replace(config.decoding, beam=2)
    return dataclasses.replace(config, **{**tiny, "decoding": decoding, **changes})


@dataclass
class Run:
    """A finished (or stopped) training run and what it produced."""

    config: RunConfig
    folder: Path
    translator: Translator
    corpus: Corpus
    history: pd.DataFrame
    evals: pd.DataFrame
    averaged: Translator | None = None  # the average of the last snapshots, when there are any
    budget: TimeBudget | None = None  # how a time budget shaped the run (None: it had none)


HISTORY_COLUMNS = ("step", "loss", "lr", "tokens", "seconds")
EVAL_COLUMNS = ("step", "epoch", "train minutes", "val BLEU")


def _read_csv(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=list(columns))


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_write(path, "w", encoding="utf-8") as handle:
        frame.to_csv(handle, index=False)


def save_vocabularies(corpus: Corpus, folder: Path) -> None:
    """Save the corpus's vocabularies in a run folder, or check that the ones there are the same."""
    if isinstance(corpus.src_vocab, Subwords):
        wanted = {"subwords.json": corpus.src_vocab}
        others = ["vocab.de.json", "vocab.en.json"]
    else:
        wanted = {"vocab.de.json": corpus.src_vocab, "vocab.en.json": corpus.tgt_vocab}
        others = ["subwords.json"]
    if any((folder / name).exists() for name in others):
        raise ValueError(
            f"{folder} holds a run with another kind of vocabulary ({', '.join(others)}): "
            "use another folder, or delete that run to start over"
        )
    for name, vocab in wanted.items():
        path = folder / name
        if not path.exists():
            vocab.save(path)
        elif type(vocab).load(path, vocab.settings) != vocab:
            raise ValueError(
                f"{path} differs from the vocabulary of the corpus given: use another folder, "
                "or delete the run to start over"
            )


def load_translator(checkpoint: str | Path) -> Translator:
    """The model of a training run's checkpoint, with the vocabulary saved beside it.

    A folder with `subwords.json` gets its shared Subwords (chapter 8's runs too), one with
    `vocab.de.json` and `vocab.en.json` its word vocabularies. A run folder may be given
    instead of a file: its averaged model, else its latest checkpoint.
    """
    checkpoint = Path(checkpoint)
    if checkpoint.is_dir():
        averaged = checkpoint / "averaged.pt"
        checkpoint = averaged if averaged.exists() else checkpoint / "checkpoint.pt"
    if not checkpoint.exists():
        raise FileNotFoundError(
            f"no checkpoint at {checkpoint}. Train one with `make train-multi30k` "
            "(or `python -m annotated.train multi30k`), or pass --checkpoint PATH."
        )
    state = read_checkpoint(checkpoint)
    try:
        model = make_model(ModelConfig(**state["model_config"]))
        model.load_state_dict(state["model"])
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(
            f"{checkpoint}: its weights do not fit the model it describes ({error}); "
            "was it written by another version of the book?"
        ) from None
    model.eval()
    folder = checkpoint.parent
    if (folder / "subwords.json").exists():
        subwords = Subwords.load(folder / "subwords.json")
        vocabs = [subwords, subwords]
    elif (folder / "vocab.de.json").exists() and (folder / "vocab.en.json").exists():
        vocabs = [Vocab.load(folder / f"vocab.{language}.json") for language in ("de", "en")]
    else:
        raise ValueError(
            f"{checkpoint} has no vocabulary beside it (subwords.json, or vocab.de.json and "
            "vocab.en.json): is it a translation model? Give a checkpoint inside the run folder "
            "that `python -m annotated.train` wrote."
        )
    for vocab, size in zip(vocabs, (model.config.src_vocab, model.config.tgt_vocab), strict=True):
        if len(vocab) != size:
            raise ValueError(
                f"{folder}: the vocabulary ({len(vocab)}) does not fit the model ({size})"
            )
    saved = state.get("decoding")
    return Translator(model, *vocabs, DecodeConfig.from_saved(saved) if saved else None)


def shared_specials(corpus: Corpus) -> SpecialTokens:
    """The pad, <s> and </s> ids, which the two vocabularies must agree on."""
    specials = corpus.tgt_vocab.specials
    if specials != corpus.src_vocab.specials:
        raise ValueError("source and target vocabularies must give the specials the same ids")
    return specials


def new_model(config: RunConfig, corpus: Corpus) -> EncoderDecoder:
    """The run's freshly initialized model (seeded), sized for the corpus's vocabularies."""
    shared = corpus.src_vocab is corpus.tgt_vocab
    torch.manual_seed(config.seed)
    model = make_model(config.model_config(len(corpus.src_vocab), len(corpus.tgt_vocab), shared))
    return use_fast_dropout(model) if config.fast_dropout else model


class StepHook:
    """What a run does after each training step: score the validation set now and then, and stop
    when its time is up (the `on_step` of chapter 3's `train`).

    At each evaluation it appends a row to evals.csv and saves a snapshot of the weights; only
    the first process does either. It returns True (stop) once `limit` seconds of training have
    passed (a planned run's budget with its grace: see `TimeBudget`).
    """

    def __init__(
        self,
        *,
        config: RunConfig,
        folder: Path,
        translator: Translator,
        corpus: Corpus,
        steps_per_epoch: int,
        max_steps: int,
        seconds: float,
        limit: float | None,
        progress: bool,
    ) -> None:
        self.config, self.folder, self.translator, self.corpus = config, folder, translator, corpus
        self.steps_per_epoch, self.max_steps, self.seconds = steps_per_epoch, max_steps, seconds
        self.limit = limit  # seconds of training after which the run stops (None: no limit)
        self.every = config.eval_every(steps_per_epoch)
        self.progress, self.rank = progress, rank_and_world()[0]
        self.evals = _read_csv(folder / "evals.csv", EVAL_COLUMNS)

    @property
    def out_of_time(self) -> bool:
        return self.limit is not None and self.seconds >= self.limit

    def __call__(self, row: dict) -> bool:
        self.seconds += row["seconds"]
        step = row["step"]
        due = step % self.every == 0 or self.out_of_time or step == self.max_steps
        if due and self.rank == 0:
            self.evaluate(step)
        return self.out_of_time

    def evaluate(self, step: int) -> None:
        """Greedy validation BLEU of the bare weights, a line in evals.csv, and a snapshot."""
        scores, _ = evaluate_split(
            self.translator,
            self.corpus,
            "val",
            limit=self.config.val_sentences,
            beam=1,
            alpha=0.0,
            copy_unknowns=False,
        )
        line = {
            "step": step,
            "epoch": round(step / self.steps_per_epoch, 2),
            "train minutes": round(self.seconds / 60, 2),
            "val BLEU": scores["BLEU"],
        }
        earlier = self.evals[self.evals.step < step]  # a resumed run replaces later lines
        self.evals = pd.concat([earlier, pd.DataFrame([line])], ignore_index=True)
        _write_csv(self.evals, self.folder / "evals.csv")
        save_snapshot(self.translator.model, self.folder, step, self.config.average_last)
        if self.progress:
            print(
                f"step {step} (epoch {line['epoch']}): {line['train minutes']} min, "
                f"val BLEU {line['val BLEU']}",
                flush=True,
            )


def measure_step_seconds(
    config: RunConfig, corpus: Corpus, batches: BatchPlan, device: torch.device
) -> tuple[float, float, float]:
    """This run's training step on this machine: (seconds per step, what a step costs more on
    average in the run's first epoch, the probe's total seconds).

    A throwaway copy of the run's model trains through chapter 3's `train` on PROBE_STEPS batches
    spread over the first epoch (short and long sentences alike), with the run's precision, dropout
    and optimizer, twice over: the same batches in the same order. A step on a batch shape the
    process meets for the first time costs more (kernels are chosen and set up for it, memory is
    allocated), and the run meets its shapes for the first time in its first epoch only; so the
    second pass, on shapes met before, times the run's steady step. The first pass's excess over
    it, per batch (the first one left out: it also sets up the process), is what a step on a new
    batch costs more; the run's first epoch pays it on the batches the probe did not train (the
    probe runs in the run's process, just before it). Nothing of it is kept: the run itself starts
    from its seed. Under torch.distributed every process probes, and all plan with the mean of
    their times.
    """
    rank, world = rank_and_world()
    spread = [i * batches.steps_per_epoch // PROBE_STEPS for i in range(PROBE_STEPS)]
    specials = shared_specials(corpus)
    model = new_model(config, corpus).to(device)
    trained = (
        nn.parallel.DistributedDataParallel(model, broadcast_buffers=False) if world > 1 else model
    )
    schedule = dataclasses.replace(
        config.train_config(batches.steps_per_epoch), max_steps=2 * PROBE_STEPS, cooldown=0
    )
    history = train(
        trained,
        lambda step: batches.step(spread[step % PROBE_STEPS], specials, rank, world),
        schedule,
        checkpoint=None,
        progress=False,
    )
    seconds = history.seconds.tolist()
    first, second = seconds[:PROBE_STEPS], seconds[PROBE_STEPS:]
    excess = [once - twice for once, twice in zip(first[1:], second[1:], strict=True)]
    steady = sum(second) / PROBE_STEPS
    unmet = 1 - len(set(spread)) / batches.steps_per_epoch  # the first epoch's new batches' share
    extra = max(sum(excess) / len(excess), 0.0) * unmet
    steady, extra, total = sum_over_processes([steady, extra, sum(seconds)], device)
    return steady / world, extra / world, total / world


def time_budget(
    config: RunConfig,
    folder: Path,
    corpus: Corpus,
    batches: BatchPlan,
    device: torch.device,
    checkpoint: Path,
    progress: bool,
) -> TimeBudget | None:
    """The run's time budget: the one kept in its folder, else a new one (None without a budget)."""
    if config.max_minutes is None:
        return None
    say = progress and rank_and_world()[0] == 0
    budget = read_budget(folder)
    if budget is not None:
        if say:
            kept = f"plan kept from this run's start ({budget.budget_minutes:g} minutes)"
            if budget.budget_minutes != config.max_minutes:
                kept += f"; the budget of {config.max_minutes:g} now only moves the time limit"
            print(f"{kept}: {budget.steps:,} steps, planned then as", flush=True)
            print(budget.describe(config), flush=True)
        return budget
    history = read_checkpoint(checkpoint)["history"] if checkpoint.exists() else []
    if history:  # a run begun before plans existed: it stays its recipe
        seconds, extra, probe = sum(row["seconds"] for row in history) / len(history), 0.0, 0.0
    else:
        seconds, extra, probe = measure_step_seconds(config, corpus, batches, device)
    budget = fit_schedule(
        config,
        batches.steps_per_epoch,
        seconds,
        probe,
        keep_recipe=bool(history),  # a checkpoint is tied to the recipe's schedule
        first_epoch_extra=extra,
        machine=describe_machine(),
        load_average=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    )
    write_budget(folder, budget)
    if say:
        print(budget.describe(config), flush=True)
    return budget


def train_run(config: RunConfig, folder: str | Path, corpus: Corpus, progress: bool = True) -> Run:
    """Train, resume, or just load the run in `folder` (whose vocabularies are saved there).

    Under torch.distributed (chapter 8) every process trains on its share of each step's batches;
    only the first one evaluates, keeps snapshots and writes files.
    """
    folder = Path(folder)
    rank, world = rank_and_world()
    if rank == 0:  # one process per run folder: a second one stops here and names the first
        with folder_lock(folder):
            return _train_run(config, folder, corpus, progress)
    return _train_run(config, folder, corpus, progress)


def _train_run(config: RunConfig, folder: Path, corpus: Corpus, progress: bool) -> Run:
    rank, world = rank_and_world()
    device = training_device()
    specials = shared_specials(corpus)
    pairs = corpus.ids["train"][: config.train_pairs]
    batches = BatchPlan.build(pairs, config.max_tokens, config.accumulate, world, config.seed)
    checkpoint = folder / "checkpoint.pt"
    budget = time_budget(config, folder, corpus, batches, device, checkpoint, progress)
    limit = None if budget is None else budget.limit_seconds(config.max_minutes)
    config = config if budget is None else budget.apply(config)
    train_config = config.train_config(batches.steps_per_epoch)
    model = new_model(config, corpus).to(device)
    translator = Translator(model, corpus.src_vocab, corpus.tgt_vocab, config.decoding)
    history = _saved_history(checkpoint, model.config, train_config)
    hook = StepHook(
        config=config,
        folder=folder,
        translator=translator,
        corpus=corpus,
        steps_per_epoch=batches.steps_per_epoch,
        max_steps=train_config.max_steps,
        seconds=float(history.seconds.sum()),
        limit=limit,
        progress=progress,
    )
    if hook.out_of_time:  # the time budget is spent: load the result, train no more
        model.load_state_dict(load_checkpoint(checkpoint, model.config, train_config)["model"])
    else:
        trained = (
            nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
            if world > 1
            else model
        )
        history = train(
            trained,
            lambda step: batches.step(step, specials, rank, world),
            train_config,
            checkpoint,
            progress=progress and rank == 0,
            on_step=hook,
            extra={"decoding": dataclasses.asdict(config.decoding)},
        )
    model.eval()
    if budget is not None and int(history.step.max()) < train_config.max_steps:
        budget = report_stop(budget, folder, int(history.step.max()), hook.seconds / 60)
    elif budget is not None and budget.stopped_at is not None:  # finished since: a larger budget
        budget = dataclasses.replace(budget, stopped_at=None)
        write_budget(folder, budget)
    if rank != 0:
        return Run(config, folder, translator, corpus, history, hook.evals, budget=budget)
    _write_csv(history, folder / "history.csv")
    averaged = average_run(config, folder, corpus, model.config)
    return Run(config, folder, translator, corpus, history, hook.evals, averaged, budget)


def _saved_history(
    checkpoint: Path, model_config: ModelConfig, train_config: TrainConfig
) -> pd.DataFrame:
    """The history stored in the run's checkpoint (empty before the first one)."""
    if not checkpoint.exists():
        return pd.DataFrame(columns=list(HISTORY_COLUMNS), dtype=float)
    rows = load_checkpoint(checkpoint, model_config, train_config)["history"]
    return pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))


def save_snapshot(model: EncoderDecoder, folder: Path, step: int, keep: int) -> None:
    """Save the model's weights as snapshots/step-NNNNNN.pt, keeping only the last `keep`."""
    path = folder / "snapshots" / f"step-{step:06d}.pt"
    path.parent.mkdir(exist_ok=True)
    with atomic_write(path) as handle:
        state = {"model": model.state_dict(), "model_config": dataclasses.asdict(model.config)}
        torch.save({"step": step, **state}, handle)
    for old in sorted(path.parent.glob("step-*.pt"))[:-keep]:
        old.unlink()


def average_snapshots(paths: Sequence[Path]) -> dict[str, Tensor]:
    """The element-wise mean of the weights saved in `paths` (checkpoint averaging)."""
    if not paths:
        raise ValueError("nothing to average: no snapshots given")
    total: dict[str, Tensor] = {}
    config = None
    for path in paths:
        saved = read_checkpoint(path)
        if config is not None and saved["model_config"] != config:
            raise ValueError(f"snapshots of different models cannot be averaged: {list(paths)}")
        config = saved["model_config"]
        for name, tensor in saved["model"].items():
            # Summed in float64 on the CPU (MPS has no float64), then divided.
            total[name] = total.get(name, 0) + tensor.to("cpu", torch.float64)
    return {name: (value / len(paths)).float() for name, value in total.items()}


def average_run(
    config: RunConfig, folder: Path, corpus: Corpus, model_config: ModelConfig
) -> Translator | None:
    """Average the run's last snapshots into averaged.pt; its translator (None: no snapshots)."""
    snapshots = sorted((folder / "snapshots").glob("step-*.pt"))[-config.average_last :]
    if not snapshots:
        return None
    model = make_model(model_config)
    model.load_state_dict(average_snapshots(snapshots))
    with atomic_write(folder / "averaged.pt") as handle:
        torch.save(
            {
                "model": model.state_dict(),
                "model_config": dataclasses.asdict(model_config),
                "averaged": [path.name for path in snapshots],
                "decoding": dataclasses.asdict(config.decoding),
            },
            handle,
        )
    model = model.to(training_device()).eval()
    return Translator(model, corpus.src_vocab, corpus.tgt_vocab, config.decoding)


def saved_scores(run: Run) -> list[dict] | None:
    """The rows final_scores saved for this run's last step and decoding settings, if any."""
    path = run.folder / "scores.json"
    if not path.exists():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    same_step = saved.get("step") == int(run.history.step.max())
    decoding = saved.get("decoding")
    same_decoding = isinstance(decoding, dict) and (
        DecodeConfig.from_saved(decoding) == run.config.decoding
    )
    return saved["scores"] if same_step and same_decoding else None


def final_scores(
    run: Run,
    test_split: str = "test_2016_flickr",
    copy_unknowns: bool = True,
    extra: Callable[[list[str], list[str]], dict] | None = None,
    reuse: bool = True,
) -> pd.DataFrame:
    """BLEU and chrF on val and the test split: last and averaged weights, greedy and beam.

    With word vocabularies the averaged model is also scored with <unk> copied from the source
    (unless `copy_unknowns` is False); a subword model never writes <unk>, so it has no such rows.
    `extra` adds columns computed from the hypotheses and references (chapter 8). With `reuse`,
    the scores saved for the run's last step are returned when they are the same rows (decoding
    a test set can take minutes).
    """
    setups = _scored_setups(run, copy_unknowns)
    splits = (("val", run.config.val_sentences), (test_split, run.config.test_sentences))
    wanted = [
        (split, weights_name, name, "yes" if copy else "no")
        for split, _ in splits
        for weights_name, _, name, _, copy in setups
    ]
    saved = saved_scores(run) if reuse else None
    keys = ("split", "weights", "decoding", "<unk> copied")
    if saved is not None and [tuple(row[k] for k in keys) for row in saved] == wanted:
        return pd.DataFrame(saved)
    rows = []
    for split, limit in splits:
        for weights_name, translator, name, width, copy in setups:
            started = time.perf_counter()
            scores, hypotheses = evaluate_split(
                translator,
                run.corpus,
                split,
                limit=limit,
                beam=width,
                alpha=run.config.decoding.alpha,
                copy_unknowns=copy,
            )
            seconds = time.perf_counter() - started
            references = [target for _, target in run.corpus.raw[split][:limit]]
            rows.append(
                {
                    "split": split,
                    "weights": weights_name,
                    "decoding": name,
                    "<unk> copied": "yes" if copy else "no",
                    **scores,
                    **(extra(hypotheses, references) if extra else {}),
                    "sentences/s": round(len(hypotheses) / seconds, 1),
                }
            )
    record = {"scores": rows, "step": int(run.history.step.max())}
    record["decoding"] = dataclasses.asdict(run.config.decoding)
    with atomic_write(run.folder / "scores.json", "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    return pd.DataFrame(rows)


def _scored_setups(run: Run, copy_unknowns: bool) -> list[tuple]:
    """(weights' name, translator, decoding's name, beam width, <unk> copied) for each score."""
    copy_unknowns = copy_unknowns and run.corpus.tgt_vocab.can_copy_unknowns
    final = run.averaged or run.translator
    weights = f"average of last {run.config.average_last}" if run.averaged else "last"
    beam = run.config.decoding.beam
    setups = [
        ("last", run.translator, "greedy", 1, False),
        (weights, final, "greedy", 1, False),
        (weights, final, "greedy", 1, True),
        (weights, final, f"beam {beam}", beam, True),
    ]
    if not copy_unknowns:
        setups = [setups[0], setups[1], (*setups[3][:4], False)]
    if run.averaged is None:
        setups.pop(1)
    return setups
