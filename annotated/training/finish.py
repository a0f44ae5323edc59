"""A run's finish: its result (`Run`), the average of its last snapshots, its final scores, and
the translator a run folder holds.

`finish_run` is the stage: it takes the run in progress (`folder.RunInProgress`) and what its
training left, and where the process writes the run's folder (the first process) it writes the
history (history.csv) and averages the last snapshots into averaged.pt (checkpoint averaging,
section 6.1). `final_scores` scores the run on the validation and test sets and keeps them in
scores.json. `save_vocabularies` puts a corpus's vocabularies in a run folder before training,
and `load_translator` reads a run folder's best model back with them (`python -m
annotated.translate`, the site's export).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from annotated.base.checkpoints import read_checkpoint
from annotated.base.devices import training_device  # a CUDA GPU, Apple's MPS or the CPU (chapter 3)
from annotated.base.files import atomic_write
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import Corpus, Subwords, Vocab
from annotated.ch06_decoding import DecodeConfig, Translator, evaluate_split
from annotated.training.config import RunConfig, Schedule
from annotated.training.folder import RunFolder, RunInProgress
from annotated.training.loop import Trained, write_csv
from annotated.training.plan import TimeBudget


@dataclass
class Run:
    """A finished (or stopped) training run and what it produced."""

    config: RunConfig  # as given: a time budget plans `schedule`, and leaves this as it was
    folder: Path
    translator: Translator
    corpus: Corpus
    history: pd.DataFrame
    evals: pd.DataFrame
    schedule: Schedule  # what it trained with: its recipe's, or its time budget's
    averaged: Translator | None = None  # the average of the last snapshots, when there are any
    budget: TimeBudget | None = None  # how a time budget shaped the run (None: it had none)
    shipped: bool = False  # the book's shipped model (annotated/model/), not a run trained here


def finish_run(
    run: RunInProgress, schedule: Schedule, trained: Trained, budget: TimeBudget | None
) -> Run:
    """The run's result; where this process writes the run's folder, with its history written
    and its last snapshots averaged (the other processes write nothing)."""
    averaged = None
    if run.folder.writes:
        write_csv(trained.history, run.folder.history)
        averaged = average_run(trained.translator, run.folder, schedule.average_last)
    return Run(
        run.config,
        run.folder.path,
        trained.translator,
        run.corpus,
        trained.history,
        trained.evals,
        schedule,
        averaged,
        budget,
    )


def save_vocabularies(corpus: Corpus, folder: Path) -> None:
    """Save the corpus's vocabularies in a run folder, or check that the ones there are the same."""
    files = RunFolder(folder)
    words = {files.vocab("de"): corpus.src_vocab, files.vocab("en"): corpus.tgt_vocab}
    if isinstance(corpus.src_vocab, Subwords):
        wanted, others = {files.subwords: corpus.src_vocab}, list(words)
    else:
        wanted, others = words, [files.subwords]
    if any(path.exists() for path in others):
        raise ValueError(
            f"{folder} holds a run with another kind of vocabulary "
            f"({', '.join(path.name for path in others)}): use another folder, or delete that run "
            "to start over"
        )
    for path, vocab in wanted.items():
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
    instead of a file: its best model (`RunFolder.best_model`: its averaged model, else its latest
    checkpoint).
    """
    checkpoint = Path(checkpoint)
    if checkpoint.is_dir():
        checkpoint = RunFolder(checkpoint, writes=False).best_model()
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
    files = RunFolder(folder, writes=False)
    if files.subwords.exists():
        subwords = Subwords.load(files.subwords)
        vocabs = [subwords, subwords]
    elif files.vocab("de").exists() and files.vocab("en").exists():
        vocabs = [Vocab.load(files.vocab(language)) for language in ("de", "en")]
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


def average_run(translator: Translator, folder: RunFolder, last: int) -> Translator | None:
    """Average the run's `last` snapshots into averaged.pt; its translator (None: no snapshots).

    The averaged model is a copy of the trained one (`translator`'s) with the average loaded.
    """
    snapshots = folder.snapshots()[-last:]
    if not snapshots:
        return None
    model = deepcopy(translator.model).to("cpu")
    model.load_state_dict(average_snapshots(snapshots))
    with atomic_write(folder.averaged) as handle:
        torch.save(
            {
                "model": model.state_dict(),
                "model_config": dataclasses.asdict(model.config),
                "averaged": [path.name for path in snapshots],
                "decoding": dataclasses.asdict(translator.decoding),
            },
            handle,
        )
    model = model.to(training_device()).eval()
    return Translator(model, translator.src_vocab, translator.tgt_vocab, translator.decoding)


def saved_scores(run: Run) -> list[dict] | None:
    """The rows final_scores saved for this run's last step and decoding settings, if any."""
    path = RunFolder(run.folder, writes=False).scores
    if not path.exists():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    same_step = saved.get("step") == int(run.history.step.max())
    decoding = saved.get("decoding")
    same_decoding = isinstance(decoding, dict) and (
        DecodeConfig.from_saved(decoding) == run.config.decoding
    )
    # the sentences each split was scored on (first the validation set's, then the test set's):
    # scores of fewer sentences ($ANNOTATED_SENTENCES) are not the whole set's (older folders
    # saved no such field, and scored whatever their recipe said, the whole set in every profile
    # but the smoke runs, which scored 40 and get scored afresh once)
    limits = [run.config.val_sentences, run.config.test_sentences]
    same_sentences = saved.get("sentences", [None, None]) == limits
    return saved["scores"] if same_step and same_decoding and same_sentences else None


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
    record["sentences"] = [limit for _, limit in splits]
    with atomic_write(RunFolder(run.folder).scores, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    return pd.DataFrame(rows)


def _scored_setups(run: Run, copy_unknowns: bool) -> list[tuple]:
    """(weights' name, translator, decoding's name, beam width, <unk> copied) for each score."""
    copy_unknowns = copy_unknowns and run.corpus.tgt_vocab.can_copy_unknowns
    final = run.averaged or run.translator
    weights = f"average of last {run.schedule.average_last}" if run.averaged else "last"
    if run.shipped:
        weights = f"shipped ({weights}, quantized)"
    beam = run.config.decoding.beam
    setups = [
        ("last", run.translator, "greedy", 1, False),
        (weights, final, "greedy", 1, False),
        (weights, final, "greedy", 1, True),
        (weights, final, f"beam {beam}", beam, True),
    ]
    if not copy_unknowns:
        setups = [setups[0], setups[1], (*setups[3][:4], False)]
    if run.averaged is None or run.shipped:  # one model: its last weights, or the shipped ones
        setups.pop(0 if run.shipped else 1)
    return setups
