"""Which copy of chapter 7's model ships with the book: BLEU and size of each candidate.

    python -m benchmarks.bench_shipped      (make bench-shipped; needs runs/multi30k-full)

Chapter 7's averaged model is scored on all of test2016 (1,000 sentences), greedy and with beam
search, copying <unk> as the chapter's final scores do, in three forms: the run's own float32
weights, the quantized export the book ships (annotated/model/, which the "Try the model" page
runs too) and a float16 copy (every tensor rounded to float16 and back). Beside each, the bytes it
would add to the wheel. Writes benchmarks/results/shipped.json. BLEU does not depend on the
machine's load, so no timing is recorded; the decoding may differ in the last bits between CPU
kinds, so the record names the machine.
"""

from __future__ import annotations

import argparse
import copy

import torch

from annotated.base.files import runs_dir
from annotated.base.threads import use_fair_threads
from annotated.ch05_text import load_multi30k
from annotated.ch06_decoding import Translator, evaluate_split
from annotated.training.finish import load_translator
from annotated.training.folder import RunFolder, folder_name
from annotated.training.shipped import SHIPPED_DIR, load_shipped, shipped_identity
from benchmarks.common import describe, write_results

SPLIT = "test_2016_flickr"


def float16_copy(translator: Translator) -> Translator:
    """The translator with every weight rounded to float16 and computed in float32 again."""
    rounded = copy.deepcopy(translator)
    state = {name: t.half().float() for name, t in rounded.model.state_dict().items()}
    rounded.model.load_state_dict(state)
    return rounded


def scores(translator: Translator, corpus, beam: int, alpha: float) -> dict:
    found, _ = evaluate_split(
        translator, corpus, SPLIT, limit=None, beam=beam, alpha=alpha, copy_unknowns=True
    )
    return {"BLEU": found["BLEU"], "chrF": found["chrF"]}


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    use_fair_threads()
    run = runs_dir() / folder_name("multi30k", "full")
    own = load_translator(RunFolder(run, writes=False).averaged)
    corpus = load_multi30k(vocab_dir=run)
    beam, alpha = own.decoding.beam, own.decoding.alpha
    parameters = sum(p.numel() for p in own.model.parameters())  # the tied matrix once
    forms = {  # the weights' bytes; each form needs the manifest's vocabularies besides
        "float32 (the run's own)": (own, 4 * parameters),
        "quantized (shipped)": (load_shipped(), (SHIPPED_DIR / "model.bin").stat().st_size),
        "float16": (float16_copy(own), 2 * parameters),
    }
    record = {
        "benchmark": "the shipped model: test2016 BLEU and size of chapter 7's averaged model",
        "machine": describe(),
        "run": shipped_identity()["folder"],
        "split": SPLIT,
        "sentences": len(corpus.raw[SPLIT]),
        "decoding": {"beam": beam, "alpha": alpha, "<unk> copied": True},
        "parameters": parameters,
        "manifest MB": round((SHIPPED_DIR / "model.json").stat().st_size / 1e6, 2),
        "forms": {},
    }
    for name, (translator, size) in forms.items():
        record["forms"][name] = {
            "greedy": scores(translator, corpus, 1, alpha),
            f"beam {beam}": scores(translator, corpus, beam, alpha),
            "weights MB": round(size / 1e6, 2),
        }
        print(name, record["forms"][name], flush=True)
    write_results("shipped", record)


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
