"""Chapter 7's trained translator as the book ships it, for the site's "Try the model" page and
for readers who do not train (`annotated/training/shipped.py` reads it back).

    python -m annotated.export.browser_model [--run runs/multi30k-full] [--out annotated/model]
    (make try-model)

The page (site/try.md, its scripts in site/try/) runs the model in the reader's browser with a
forward pass of its own in JavaScript; the package loads the same files into PyTorch when no
trained run is at hand. This module writes:

    annotated/model/model.bin   every weight matrix, quantized (below); biases and norms in float32
    annotated/model/history.csv, evals.csv  the run's training curve and evaluations, as it wrote them
    annotated/model/model.json  the manifest: where each tensor lies in model.bin and how it is
                          stored, the model's settings, both vocabularies, spaCy's German tokenizer
                          rules, the decoding settings, the run it came from (its file's SHA-256
                          and its scores) and the example sentences the page offers
    site/try/reference.json  the first 200 test2016 sentences' translations by
                          `python -m annotated.translate` with the run's own weights, greedy and
                          beam 4: what the browser test holds the page to

**Why quantized, and how.** The model has 7.3 million weights, 29 MB in float32 and 15 MB in
float16; the page may weigh 10 MB. Each matrix is stored as integers of `bits` bits, one scale for
each group of 64 along a row (the group's largest magnitude maps to the largest integer), a
float16 times a power of two the matrix shares.
A matrix's bits are chosen by how much its rounding moves the model's output: the export measures,
for each matrix alone rounded to 8 bits, the change of the logits over 120 validation sentences,
then hands out bits (8 to 12) where they buy the most, within a byte budget (`allocate_bits`).
The matrices that multiply (all but the embeddings) are rounded with compensation
(`quantize_compensated`). The integers are packed into a bit stream, so a 10-bit matrix takes 10
bits a weight.

Why these files and not a float16 copy: on test2016 the quantized model scores BLEU within a
tenth of the run's float32 weights (beam and greedy), at two thirds of float16's size, and the page
needs them anyway (benchmarks/README.md, "the shipped model").
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import io
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from annotated.base.datasets import read_multi30k
from annotated.base.files import REPO_ROOT, atomic_write, runs_dir
from annotated.ch01_attention import subsequent_mask
from annotated.ch03_training import inference
from annotated.ch05_text import Subwords
from annotated.ch06_decoding import DecodeConfig, Translator, decode_ids
from annotated.export.sentencepiece_table import piece_table
from annotated.export.spacy_rules import tokenizer_rules
from annotated.training.finish import load_translator
from annotated.training.folder import RunFolder, folder_name
from annotated.training.shipped import FORMAT, GROUP, SHIPPED_DIR, SHIPPED_HISTORY, dequantize

BITS = (8, 12)  # the fewest and the most bits a matrix may get
BUDGET = 9_640_000  # bytes for the quantized matrices: the page's files stay under 10 MB in all
CALIBRATION = 120  # validation sentences whose logits measure each matrix's sensitivity
SHARED = "tgt_embed.0.lut.weight"  # the name a shared embedding is stored by (share_embeddings)
REFERENCE = 200  # test2016 sentences translated for the browser test
EXAMPLES = (0, 2, 3, 8, 12, 27)  # test2016 sentences the page offers to click
DEFAULT_OUT = SHIPPED_DIR  # model.bin and model.json: the package carries them
REFERENCE_FILE = REPO_ROOT / "site" / "try" / "reference.json"  # the browser test's, not shipped


# Storing integers of any width ------------------------------------------------------------------
def quantize(weight: Tensor, bits: int, group: int = GROUP) -> tuple[Tensor, Tensor]:
    """(rows, cols) floats -> integer codes in [-(2^(bits-1) - 1), 2^(bits-1) - 1] and the scales
    (rows, cols / group, float32, each a float16 times the matrix's `scale_shift`): weight ~
    codes * scales, group by group along each row."""
    rows, cols = weight.shape
    if cols % group:
        raise ValueError(f"a row of {cols} weights does not split into groups of {group}")
    levels = 2 ** (bits - 1) - 1
    blocks = weight.float().reshape(rows, cols // group, group)
    scales = stored_scale(blocks.abs().amax(-1), levels, scale_shift(weight, levels))
    codes = (blocks / scales.unsqueeze(-1)).round().clamp(-levels, levels)
    return codes.to(torch.int32).reshape(rows, cols), scales


def scale_shift(weight: Tensor, levels: int) -> int:
    """The power of two that brings the matrix's largest step into [2^14, 2^15): every step is
    stored as a float16 times 2^-shift, so that none falls among float16's imprecise subnormal
    numbers (below 6.1e-5), where a step could not be stored within 0.1%."""
    largest = weight.abs().max().item() / levels
    return 0 if largest == 0 else 14 - math.floor(math.log2(largest))


def stored_scale(largest: Tensor, levels: int, shift: int) -> Tensor:
    """The step that maps `largest` to at most `levels`, rounded up (a step rounded down would clip
    the largest weight) to a float16 times 2^-shift; 1 for an all-zero group."""
    wanted = largest.double() / levels * 2.0**shift
    half = wanted.half()
    short = half.double() < wanted  # rounded down: take the next float16 up
    half = torch.where(short, (half.view(torch.int16) + 1).view(torch.float16), half)
    scale = half.double() * 2.0**-shift
    return torch.where(scale == 0, torch.ones_like(scale), scale).float()


def pack_bits(codes: Tensor, bits: int) -> bytes:
    """Signed integers -> a little-endian bit stream of `bits` bits each (two's complement)."""
    values = codes.flatten().to(torch.int64) & ((1 << bits) - 1)
    positions = torch.arange(bits, dtype=torch.int64)
    stream = ((values.unsqueeze(1) >> positions) & 1).flatten()  # bit i of value j at j*bits+i
    stream = torch.cat([stream, stream.new_zeros((-stream.numel()) % 8)]).view(-1, 8)
    return bytes((stream << torch.arange(8)).sum(1).to(torch.uint8).tolist())


# Which matrix gets how many bits -----------------------------------------------------------------
def _logits(model, pairs: Sequence[tuple[Tensor, Tensor]]) -> Tensor:
    with inference(model):
        return torch.cat(
            [
                model(
                    src,
                    tgt,
                    torch.ones(1, 1, src.size(1), dtype=torch.bool),
                    subsequent_mask(tgt.size(1)),
                ).flatten()
                for src, tgt in pairs
            ]
        )


def calibration_pairs(translator: Translator, sentences: Sequence[str]) -> list:
    """(source, target) id tensors of the sentences and the model's own greedy translations: the
    inputs on which rounding is measured and compensated."""
    specials = translator.tgt_vocab.specials
    sources = translator.source_ids(sentences)
    outputs = decode_ids(
        translator.model, sources, translator.src_vocab.specials, specials, DecodeConfig(beam=1)
    )
    return [
        (torch.tensor([s]), torch.tensor([[specials.bos, *o[:-1]]]))
        for s, o in zip(sources, outputs, strict=True)
    ]


def sensitivities(model, pairs: Sequence[tuple[Tensor, Tensor]]) -> dict[str, float]:
    """For each weight matrix, the mean squared change of the logits over the calibration pairs
    when that matrix alone is rounded to the fewest bits."""
    base = _logits(model, pairs)
    found = {}
    for name in matrices(model):
        rounded = copy.deepcopy(model)
        parameter = rounded.get_parameter(name)
        with torch.no_grad():
            parameter.copy_(dequantize(*quantize(parameter, BITS[0])))
        found[name] = float((_logits(rounded, pairs) - base).pow(2).mean())
    return found


def matrices(model) -> list[str]:
    """The names of the model's weight matrices, each once (the tied output projection is the
    target embedding; with share_embeddings, so is the source embedding)."""
    names = [name for name, p in model.named_parameters() if p.dim() == 2]
    if model.config.share_embeddings:  # PyTorch names the shared matrix by its first use
        names = [SHARED if name == "src_embed.0.lut.weight" else name for name in names]
    return names


def allocate_bits(
    sensitivity: dict[str, float], sizes: dict[str, int], budget: int = BUDGET
) -> dict[str, int]:
    """Bits per matrix: start every one at BITS[0], then add one bit at a time to the matrix whose
    expected output error falls most per added byte (one more bit quarters a matrix's squared
    error) among those that still fit, while the matrices (codes and scales) fit in `budget`
    bytes."""
    bits = dict.fromkeys(sensitivity, BITS[0])

    def size(name: str, b: int) -> float:
        return sizes[name] * (b + 16 / GROUP) / 8

    used = sum(size(name, b) for name, b in bits.items())
    while True:
        gain = {  # among the matrices one more bit of which still fits
            name: sensitivity[name] * 4.0 ** (BITS[0] - b) * 0.75 / sizes[name]
            for name, b in bits.items()
            if b < BITS[1] and used + sizes[name] / 8 <= budget
        }
        if not gain:
            return bits
        name = max(gain, key=gain.get)
        bits[name] += 1
        used += sizes[name] / 8


# Rounding that makes up for itself ----------------------------------------------------------------
# Rounding each weight to the nearest code is not the best a layer can do: the error of one column's
# rounding can be cancelled in part by moving the columns not yet rounded, in the directions its
# inputs make cheap. This is GPTQ's rule (Frantar et al., 2022), written from the paper: with
# H = X^T X over the layer's inputs X, round column i, then subtract its error, scaled by row i of
# the Cholesky factor of H^-1, from the columns after it. Measured on validation sentences it
# lowers the logits' error by about a quarter against plain rounding, at the same bits.
def input_products(model, pairs: Sequence[tuple[Tensor, Tensor]]) -> dict[str, tuple[Tensor, int]]:
    """X^T X (float64) and the row count of the inputs of every Linear but the output projection."""
    found: dict[str, list] = {}

    def keep(name):
        def hook(module, inputs, output):
            x = inputs[0].reshape(-1, inputs[0].size(-1)).double()
            entry = found.setdefault(name, [0, 0])
            entry[0] = entry[0] + x.T @ x
            entry[1] += x.size(0)

        return hook

    hooks = [
        module.register_forward_hook(keep(name))
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and name != "generator"
    ]
    try:
        _logits(model, pairs)
    finally:
        for hook in hooks:
            hook.remove()
    return {name: (products, rows) for name, (products, rows) in found.items()}


def quantize_compensated(
    weight: Tensor, bits: int, products: tuple[Tensor, int], group: int = GROUP, damp: float = 0.01
) -> tuple[Tensor, Tensor]:
    """`quantize`'s codes and scales, each column rounded after the earlier columns' errors were
    spread over it (GPTQ); a group's scale is taken when its first column is reached."""
    levels = 2 ** (bits - 1) - 1
    work = weight.double().clone()
    rows, cols = work.shape
    hessian = products[0] / products[1]
    hessian = hessian + damp * hessian.diag().mean() * torch.eye(cols, dtype=torch.float64)
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(hessian))
    factor = torch.linalg.cholesky(inverse, upper=True)
    codes = torch.zeros(rows, cols, dtype=torch.int32)
    scales = torch.zeros(rows, cols // group)
    shift = scale_shift(weight, levels)
    for i in range(cols):
        if i % group == 0:
            largest = work[:, i : i + group].abs().amax(1)
            scales[:, i // group] = stored_scale(largest, levels, shift)
        scale = scales[:, i // group].double()
        code = (work[:, i] / scale).round().clamp(-levels, levels)
        codes[:, i] = code.int()
        error = (work[:, i] - code * scale) / factor[i, i]
        work[:, i + 1 :] -= error.unsqueeze(1) * factor[i, i + 1 :].unsqueeze(0)
    return codes, scales


# Writing and reading the files -------------------------------------------------------------------
def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def reference_translations(translator: Translator, sentences: Sequence[str]) -> dict:
    """What `python -m annotated.translate --beam 1` and `--beam 4` print for the sentences
    (the filter's own code path, batches of 64 included)."""
    from annotated.translate import translate_stream

    lines = [(s + "\n").encode() for s in sentences]
    found = {}
    for name, beam in (("greedy", 1), ("beam", 4)):
        out = io.BytesIO()
        translate_stream(
            translator, lines, out, lambda message: None, beam, translator.decoding.alpha
        )
        found[name] = out.getvalue().decode().splitlines()
    return found


def export(
    run: Path,
    out: Path = DEFAULT_OUT,
    reference_file: Path = REFERENCE_FILE,
    budget: int = BUDGET,
    log=print,
) -> dict:
    """Write model.bin and model.json for the run's averaged model into `out`, and the reference
    translations into `reference_file`."""
    files = RunFolder(run, writes=False)
    checkpoint, scores_file = files.averaged, files.scores
    if not checkpoint.exists() or not scores_file.exists():
        raise FileNotFoundError(
            f"{run} has no averaged model or no scores.json: train chapter 7's model to the end "
            "first (`make train-multi30k`)"
        )
    translator = load_translator(checkpoint)
    model = translator.model
    calibration = [de for de, _ in read_multi30k("val")[:CALIBRATION]]
    log(f"measuring each matrix's sensitivity on {len(calibration)} validation sentences ...")
    pairs = calibration_pairs(translator, calibration)
    sensitivity = sensitivities(model, pairs)
    sizes = {name: model.get_parameter(name).numel() for name in sensitivity}
    bits = allocate_bits(sensitivity, sizes, budget)
    tensors, blob = pack_model(model, bits, input_products(model, pairs))

    test = read_multi30k("test_2016_flickr")
    reference = {"sentences": REFERENCE, "split": "test_2016_flickr"}
    reference |= reference_translations(translator, [de for de, _ in test[:REFERENCE]])
    scores = json.loads(scores_file.read_text())["scores"]
    manifest = {
        "format": FORMAT,
        "run": {
            "folder": run.name,
            "averaged_sha256": sha256(checkpoint),
            "scores": [s for s in scores if s["split"] == "test_2016_flickr"],
        },
        **describe(translator),
        "examples": [test[i][0] for i in EXAMPLES],
        "sensitivity": {name: sensitivity[name] for name in bits},
        "tensors": tensors,
        "bin_bytes": len(blob),
        "bin_sha256": hashlib.sha256(blob).hexdigest(),
    }
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "model.bin", "wb") as handle:
        handle.write(bytes(blob))
    for path, content in ((out / "model.json", manifest), (reference_file, reference)):
        with atomic_write(path, "w", encoding="utf-8") as handle:
            json.dump(
                content, handle, ensure_ascii=False, indent=0 if path is not reference_file else 1
            )
            handle.write("\n")
    for name in SHIPPED_HISTORY:  # the run's training curve and evaluations, as it wrote them
        with atomic_write(out / name, "wb") as handle:
            handle.write((run / name).read_bytes())
    log(f"wrote {out}: model.bin {len(blob):,} bytes; bits per matrix {sorted(set(bits.values()))}")
    return manifest


def pack_model(model, bits: dict[str, int], products: dict) -> tuple[list[dict], bytearray]:
    """model.bin's bytes (every tensor from a 4-byte boundary) and each tensor's manifest entry:
    the matrices in `bits` quantized (with compensation where `products` has their inputs), the
    rest (biases, norms) float32. A tied output projection is left out: it is the target embedding;
    so is a shared source embedding."""
    tensors, blob = [], bytearray()
    tied = model.config.tie_target_embeddings or model.config.share_embeddings
    for name, parameter in model.state_dict().items():
        if name == "generator.weight" and tied:
            continue
        if name == "src_embed.0.lut.weight" and model.config.share_embeddings:
            continue  # shared: stored once, as the target embedding (SHARED)
        entry = {"name": name, "shape": list(parameter.shape), "offset": len(blob)}
        if name in bits:
            layer = name.removesuffix(".weight")
            if layer in products:
                codes, scales = quantize_compensated(parameter, bits[name], products[layer])
            else:  # an embedding: looked up, not multiplied, so plain rounding
                codes, scales = quantize(parameter, bits[name])
            shift = scale_shift(parameter, 2 ** (bits[name] - 1) - 1)
            blob += (scales.double() * 2.0**shift).half().numpy().tobytes()  # exact
            blob += pack_bits(codes, bits[name])
            entry |= {"bits": bits[name], "group": GROUP, "shift": shift}
        else:
            blob += parameter.float().numpy().astype("<f4").tobytes()
            entry |= {"bits": 32}
        entry["bytes"] = len(blob) - entry["offset"]
        blob += bytes((-len(blob)) % 4)
        tensors.append(entry)
    return tensors, blob


def describe(translator: Translator) -> dict:
    """What the page needs to know besides the weights: the model's settings, the decoding, the
    special tokens, and how text becomes ids and back. For words: both vocabularies, the German
    tokenizer's rules and the detokenizer's. For shared subwords: the piece table that
    site/try/subwords.js runs sentencepiece's encoder and decoder over."""
    decoding, vocabs = translator.decoding, (translator.src_vocab, translator.tgt_vocab)
    described = {
        "model": dataclasses.asdict(translator.model.config)
        | {"parameters": sum(p.numel() for p in translator.model.parameters())},
        "decoding": {k: getattr(decoding, k) for k in ("beam", "alpha", "extra_length")},
        "specials": {
            side: dataclasses.asdict(vocab.specials) | {"unk": vocab.unk}
            for side, vocab in zip(("src", "tgt"), vocabs, strict=True)
        },
    }
    if isinstance(translator.src_vocab, Subwords):
        if translator.tgt_vocab != translator.src_vocab:
            raise ValueError("the page runs one shared subword vocabulary, not two")
        return described | {"subwords": piece_table(translator.src_vocab)}
    return described | {
        "vocab": {side: list(v.tokens) for side, v in zip(("src", "tgt"), vocabs, strict=True)},
        "tokenizer": tokenizer_rules("de"),
        "detokenize": detokenizer_rules(),
    }


def detokenizer_rules() -> dict:
    """Chapter 5's `detokenize` regular expressions, for the page to apply as the book does (they
    mean the same in JavaScript; the test compares the page's outputs with the book's)."""
    from annotated import ch05_text

    return {
        name: {"pattern": rule.pattern, "ignorecase": bool(rule.flags & re.IGNORECASE)}
        for name, rule in (
            ("hyphen", ch05_text._HYPHEN),
            ("no_space_after", ch05_text._NO_SPACE_AFTER),
            ("no_space_before", ch05_text._NO_SPACE_BEFORE),
        )
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated.export.browser_model",
        description="Export chapter 7's trained model for the site's Try-the-model page.",
    )
    parser.add_argument(
        "--run",
        type=Path,
        default=None,
        help="the finished run folder (default: multi30k-full in the runs folder)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where model.bin and model.json go (default: annotated/model, which the package "
        "carries and the site's page reads)",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        default=REFERENCE_FILE,
        help="where the browser test's reference translations go (default: site/try/reference.json)",
    )
    args = parser.parse_args(argv)
    try:
        export(args.run or runs_dir() / folder_name("multi30k", "full"), args.out, args.reference)
    except FileNotFoundError as error:
        print(f"browser_model: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
