"""Chapter 7's trained translator as the book ships it: read back into a PyTorch `Translator`.

The repository and the wheel carry one copy of chapter 7's averaged model, in `annotated/model/`:
`model.bin`, every weight matrix stored in 9 to 12 bits (the export may give a matrix 8 to 12;
one float16 scale for each group of 64 along a row, times a power of two the matrix shares;
biases and norms in float32), and `model.json`, the manifest (where each tensor lies in model.bin
and how it is stored, the model's settings, both vocabularies, the decoding settings, and the run
it came from: its folder, the SHA-256 of its averaged weights and its scores); and the run's
`history.csv` and `evals.csv`. `annotated/export/browser_model.py` writes both (`make
try-model`), and the site's "Try the model" page computes with the same files.

`load_shipped` is what a reader without a trained run gets: `python -m annotated.translate` uses
it, and chapter 7's `shipped` profile the whole run (`load_shipped_run`). Reading a file never runs code from it: the manifest is
JSON, the weights raw numbers, and model.bin must have the digest model.json gives.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import BatchPlan, Vocab, load_multi30k, vocab_settings
from annotated.ch06_decoding import DecodeConfig, Translator
from annotated.training.config import RunConfig
from annotated.training.finish import Run
from annotated.training.folder import RunFolder
from annotated.training.loop import EVAL_COLUMNS, HISTORY_COLUMNS, read_csv

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "model"
FORMAT = 1  # the manifest's format; the page and this reader refuse another
GROUP = 64  # quantized weights that share one scale, along a row
LANGUAGES = {"src": "de", "tgt": "en"}
SHIPPED_HISTORY = (RunFolder.HISTORY, RunFolder.EVALS)  # copied from the run folder by the export


def unpack_bits(data: bytes, bits: int, count: int) -> Tensor:
    """`count` signed integers of `bits` bits each from a little-endian bit stream (bit i of value
    j at bit j*bits + i, two's complement)."""
    stream = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    columns = stream[: count * bits].reshape(count, bits)
    values = np.zeros(count, dtype=np.int64)
    for i in range(bits):  # a dozen passes over the column of bit i: fast, and little memory
        values |= columns[:, i].astype(np.int64) << i
    values = torch.from_numpy(values)
    return torch.where(values >= 1 << (bits - 1), values - (1 << bits), values)


def dequantize(codes: Tensor, scales: Tensor, group: int = GROUP) -> Tensor:
    """The float32 weights the codes stand for (exact: a float16 times a small integer)."""
    rows, cols = codes.shape
    blocks = codes.reshape(rows, cols // group, group).float() * scales.float().unsqueeze(-1)
    return blocks.reshape(rows, cols)


def read_manifest(folder: Path = SHIPPED_DIR) -> dict:
    """model.json, refused with a clear line if it is missing or of another format."""
    path = folder / "model.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the book's shipped model is not here (reinstall the book, or "
            "export a trained run with `make try-model`)"
        )
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is format {manifest.get('format')}, not {FORMAT}")
    return manifest


def read_tensors(folder: Path = SHIPPED_DIR) -> tuple[dict, dict[str, Tensor]]:
    """The manifest and every tensor of the model, dequantized to float32 (the page's weights)."""
    manifest = read_manifest(folder)
    blob = (folder / "model.bin").read_bytes()
    if hashlib.sha256(blob).hexdigest() != manifest["bin_sha256"]:
        raise ValueError(f"{folder}/model.bin is not the file model.json describes: export again")
    found = {}
    for entry in manifest["tensors"]:
        data = blob[entry["offset"] : entry["offset"] + entry["bytes"]]
        shape = entry["shape"]
        if entry["bits"] == 32:
            found[entry["name"]] = torch.frombuffer(bytearray(data), dtype=torch.float32).view(
                shape
            )
            continue
        rows, cols = shape
        n_scales = rows * cols // entry["group"]
        stored = torch.frombuffer(bytearray(data[: 2 * n_scales]), dtype=torch.float16)
        scales = (stored.double() * 2.0 ** -entry["shift"]).float().view(rows, -1)
        codes = unpack_bits(data[2 * n_scales :], entry["bits"], rows * cols).view(rows, cols)
        found[entry["name"]] = dequantize(codes, scales, entry["group"])
    return manifest, found


def load_shipped(folder: Path = SHIPPED_DIR) -> Translator:
    """The shipped model as a PyTorch Translator, with the decoding settings its run used."""
    manifest, tensors = read_tensors(folder)
    config = ModelConfig(**{k: v for k, v in manifest["model"].items() if k != "parameters"})
    model = make_model(config)
    tied = config.tie_target_embeddings or config.share_embeddings
    if "generator.weight" not in tensors and tied:
        tensors["generator.weight"] = tensors["tgt_embed.0.lut.weight"]  # stored once
    model.load_state_dict(tensors)
    model.eval()
    vocabs = [
        Vocab(tuple(manifest["vocab"][side]), {"language": language})
        for side, language in LANGUAGES.items()
    ]
    decoding = manifest["decoding"]
    settings = DecodeConfig(decoding["beam"], decoding["alpha"], decoding["extra_length"])
    return Translator(model, *vocabs, settings)


def shipped_identity(folder: Path = SHIPPED_DIR) -> dict:
    """Which run the shipped model is: its folder's name, its averaged weights' SHA-256, and the
    scores the run's own float32 weights got (`final_scores`)."""
    return read_manifest(folder)["run"]


def load_shipped_run(config: RunConfig, folder: Path) -> Run:
    """Chapter 7's run as the book ships it, for a reader who does not train (chapter 7's `shipped`
    profile): the shipped model with the recipe it was trained by (`config`), its history and
    evaluations, and the Multi30k corpus encoded with its vocabularies, which are written into
    `folder` (the only thing written: scores computed later are kept there too)."""
    translator = load_shipped()
    folder.mkdir(parents=True, exist_ok=True)
    for vocab in (translator.src_vocab, translator.tgt_vocab):
        language = vocab.settings["language"]
        path = RunFolder(folder).vocab(language)
        if not path.exists():
            Vocab(vocab.tokens, vocab_settings(language, config.min_freq)).save(path)
    corpus = load_multi30k(config.vocab_size, config.min_freq, folder)
    pairs = corpus.ids["train"][: config.train_pairs]
    batches = BatchPlan.build(pairs, config.max_tokens, config.accumulate, 1, config.seed)
    shipped = RunFolder(SHIPPED_DIR, writes=False)  # the run's own tables, as its folder held them
    return Run(
        config,
        folder,
        translator,
        corpus,
        read_csv(shipped.history, HISTORY_COLUMNS),
        read_csv(shipped.evals, EVAL_COLUMNS),
        config.schedule(batches.steps_per_epoch),
        averaged=translator,
        shipped=True,
    )
