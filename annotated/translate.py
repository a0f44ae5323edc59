"""Translate one sentence per line with a trained model: a Unix filter around chapter 6's Translator.

    echo "Ein Hund rennt über die Wiese." | python -m annotated.translate [--checkpoint PATH] [--beam N]

Reads stdin and writes exactly one line to stdout for every input line, in the same order, so the
output always lines up with the input. Lines that cannot be translated still get their line:

- an empty or whitespace-only line gives an empty line (no warning);
- a line that is not valid UTF-8 is translated with its undecodable bytes replaced by U+FFFD;
- a line longer than --max-tokens source tokens gives an empty line;
- a line whose translation fails gives an empty line;

each of the last three with a warning on stderr that names the line (when a batch fails, its
lines are translated one by one, so only the failing line is left empty). A UTF-8 byte-order
mark and Windows line endings are ignored. The exit status is 0 when every line was translated, 1 when some
were left empty (their warnings say why), 2 when nothing could start: no model, a file that is not
a checkpoint (checkpoints are read with `weights_only=True`, so a file that would run code when
unpickled is refused), a checkpoint without a vocabulary beside it (another task's model), a
vocabulary that does not fit the model, or a bad option.

The default model is the longest Multi30k run trained here: the long run's (`--profile long`),
else the full run's (`make train-multi30k`), else the class or smoke run's; of that run, its
averaged weights, else its latest checkpoint. The runs are looked for in $ANNOTATED_RUNS_DIR if
set, else in runs/ in a checkout, else in the user's runs folder for an installed book
(`files.runs_dir`). With no run trained, the book's shipped model (chapter 7's, in
`annotated/model/`), saying so in one line. --checkpoint takes another run's file or folder, or
`shipped`. The beam and length penalty default to those the checkpoint's
run used (chapter 7's Multi30k runs: beam 4, alpha 2.5; chapter 8's WMT runs: beam 4, alpha 0.6).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from annotated.base.files import runs_dir
from annotated.training.folder import RunFolder, folder_name  # names only: imports no torch

# The Multi30k runs `python -m annotated.train multi30k` writes, the longest trained first
# (chapter 7's profiles: long, full, class, smoke).
RUNS = tuple(folder_name("multi30k", profile) for profile in ("long", "full", "class", "smoke"))
FULL_RUNS = RUNS[:2]  # the recipe whole (long: twice its steps); class and smoke shorten it
MAX_TOKENS = 256  # a source line longer than this (in tokens, </s> included) is not translated
MAX_BEAM = 100
SHIPPED = "shipped"  # --checkpoint shipped: the book's own trained model (annotated/model/)


def default_checkpoint(folder: Path | None = None) -> Path:
    """The best Multi30k run trained here: its averaged model, else its latest checkpoint.

    The runs are looked for in `folder` (default: `files.runs_dir()`, the checkout's runs/ or the
    user's), the long run first, then the full, class and smoke runs. With none, the full run's
    path, which the error message then names.
    """
    folder = runs_dir() if folder is None else folder
    for name in RUNS:
        best = RunFolder(folder / name, writes=False).best_model()
        if best.exists():
            return best
    return RunFolder(folder / folder_name("multi30k", "full"), writes=False).averaged


def _bounded(kind: type, low: float, high: float, name: str) -> Callable[[str], float]:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}, got {text}")
        return value

    return parse


def arguments() -> argparse.ArgumentParser:
    """The command line's parser."""
    parser = argparse.ArgumentParser(
        prog="python -m annotated.translate",
        description="Translate sentences, one per line on stdin, into one line each on stdout.",
        epilog="Every input line gets exactly one output line. An empty line gives an empty line; "
        "a line with invalid UTF-8 is translated with U+FFFD in place of the bad bytes; a line "
        "longer than --max-tokens, or one whose translation fails, gives an empty line. Each of "
        "these but the first also prints a warning on stderr naming the line. Exit status: 0 all "
        "lines translated, 1 some left empty, 2 could not start.",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a checkpoint file or a run folder, or `shipped` for the book's own trained model "
        "(default: the longest Multi30k run trained here, long, full, class or smoke, in "
        "$ANNOTATED_RUNS_DIR if set, else in runs/ in a checkout, else in the user's data folder "
        "(~/.local/share/annotated/runs on Linux): its averaged.pt, else its checkpoint.pt; with "
        "none, the shipped model)",
    )
    parser.add_argument(
        "--beam",
        type=_bounded(int, 1, MAX_BEAM, "--beam"),
        default=None,
        help="beam size, 1 for greedy decoding (default: the checkpoint's run's, else 4)",
    )
    parser.add_argument(
        "--alpha",
        type=_bounded(float, 0.0, 10.0, "--alpha"),
        default=None,
        help="length penalty (default: the checkpoint's run's, else chapter 7's 2.5)",
    )
    parser.add_argument(
        "--batch",
        type=_bounded(int, 1, 10_000, "--batch"),
        default=64,
        help="lines translated together (default 64)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_bounded(int, 1, 100_000, "--max-tokens"),
        default=MAX_TOKENS,
        help=f"leave lines longer than this many source tokens untranslated (default {MAX_TOKENS})",
    )
    return parser


def decode_line(raw: bytes, number: int, warn: Callable[[str], None]) -> str:
    """One input line as text: line ending and a byte-order mark removed, bad UTF-8 replaced."""
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark, as some Windows editors write
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        warn(f"line {number}: not valid UTF-8; its undecodable bytes were replaced by U+FFFD")
        return raw.decode("utf-8", errors="replace")


def translate_stream(
    translator,
    lines: Iterable[bytes],
    out: BinaryIO,
    warn: Callable[[str], None],
    beam: int,
    alpha: float,
    batch: int = 64,
    max_tokens: int = MAX_TOKENS,
) -> int:
    """Translate raw input lines to `out`, one line each; returns how many were left empty."""
    left_empty = 0
    pending: list[tuple[int, str]] = []  # (line number, text) waiting for a batch

    def translate(items: list[tuple[int, str]]) -> list[str]:
        nonlocal left_empty
        try:
            return translator.translate([text for _, text in items], beam=beam, alpha=alpha)
        except Exception as error:  # one bad line must not cost the others their translations
            if len(items) > 1:
                return [line for item in items for line in translate([item])]
            left_empty += 1
            warn(f"line {items[0][0]}: left untranslated ({type(error).__name__}: {error})")
            return [""]

    def flush() -> None:
        results = translate(pending) if pending else []
        for translation in results:
            out.write(translation.replace("\n", " ").encode("utf-8") + b"\n")
        out.flush()
        pending.clear()

    for number, raw in enumerate(lines, start=1):
        text = decode_line(raw, number, warn).strip()
        if text:
            length = len(translator.source_ids([text])[0])
            if length > max_tokens:
                left_empty += 1
                warn(
                    f"line {number}: {length} tokens, more than --max-tokens {max_tokens}; "
                    "left untranslated (raise --max-tokens to translate it anyway)"
                )
                text = ""
        if not text:  # keep the order: what is pending goes out first
            flush()
            out.write(b"\n")
            continue
        pending.append((number, text))
        if len(pending) >= batch:
            flush()
    flush()
    return left_empty


def choose_model(checkpoint: Path | None, warn: Callable[[str], None]):
    """(the translator, where it came from), having said in one line which model it is wherever
    that is not the obvious one; (None, ...) when no model can be loaded (the reason warned)."""
    from annotated.training.finish import load_translator
    from annotated.training.shipped import SHIPPED_DIR, load_shipped, shipped_identity

    if checkpoint is None:
        checkpoint = default_checkpoint()
        if not checkpoint.exists():
            checkpoint = Path(SHIPPED)
            warn(
                f"no trained Multi30k model in {default_checkpoint().parent.parent}: using the "
                f"book's shipped model (chapter 7's {shipped_identity()['folder']} run); train your own "
                "with `python -m annotated.train multi30k`"
            )
        elif checkpoint.parent.name not in FULL_RUNS:
            warn(
                f"using {checkpoint} (no full run here; its translations are weaker than the "
                "book's shipped model's, which `--checkpoint shipped` takes)"
            )
    try:
        if str(checkpoint) == SHIPPED:
            return load_shipped(), SHIPPED_DIR
        return load_translator(checkpoint), checkpoint
    except (FileNotFoundError, ValueError, OSError) as error:
        warn(str(error))
        return None, checkpoint


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)

    def warn(message: str) -> None:
        print(f"translate: {message}", file=sys.stderr, flush=True)

    # Late imports: --help stays instant.
    from annotated.base.threads import use_fair_threads
    from annotated.ch07_multi30k import PROFILES

    use_fair_threads(quiet=True)  # stdout carries the translations only
    fallback = PROFILES["full"].decoding
    translator, checkpoint = choose_model(args.checkpoint, warn)
    if translator is None:
        return 2
    saved = translator.decoding
    if saved is None and (args.beam is None or args.alpha is None):
        warn(
            f"{checkpoint} records no decoding settings; using chapter 7's "
            f"(beam {fallback.beam}, alpha {fallback.alpha}) where not given"
        )
    beam = args.beam if args.beam is not None else (saved or fallback).beam
    alpha = args.alpha if args.alpha is not None else (saved or fallback).alpha
    if sys.stdin.isatty():
        warn("reading one sentence per line from the terminal; end with Ctrl-D")
    try:
        left_empty = translate_stream(
            translator,
            sys.stdin.buffer,
            sys.stdout.buffer,
            warn,
            beam,
            alpha,
            args.batch,
            args.max_tokens,
        )
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 1 if left_empty else 0


if __name__ == "__main__":
    sys.exit(main())
