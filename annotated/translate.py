"""Translate German to English, one sentence per line: a Unix filter around chapter 5's model.

    echo "Ein Hund rennt über die Wiese." | python -m annotated.translate [--checkpoint PATH] [--beam N]

Reads stdin, writes one translation per input line to stdout (an empty line gives an empty line).
The default model is the one `make train-multi30k` writes (its averaged weights).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "runs" / "multi30k-full"


def default_checkpoint() -> Path:
    """The averaged model `make train-multi30k` writes at the end, else its latest checkpoint."""
    averaged = RUN / "averaged.pt"
    return averaged if averaged.exists() else RUN / "checkpoint.pt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated.translate",
        description="Translate German sentences (one per line on stdin) into English (stdout).",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a chapter 5 checkpoint (default: runs/multi30k-full/averaged.pt, else checkpoint.pt)",
    )
    parser.add_argument("--beam", type=int, default=4, help="beam size (1: greedy decoding)")
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="length penalty (default: chapter 5's, chosen on the Multi30k validation set)",
    )
    parser.add_argument("--batch", type=int, default=64, help="lines translated together")
    args = parser.parse_args(argv)
    if args.beam < 1:
        parser.error("--beam must be at least 1")
    from annotated.ch05_multi30k import Multi30kConfig, Translator  # late: --help stays instant

    alpha = Multi30kConfig.length_penalty if args.alpha is None else args.alpha

    try:
        translator = Translator.load(args.checkpoint or default_checkpoint())
    except (FileNotFoundError, ValueError) as error:
        print(f"translate: {error}", file=sys.stderr)
        return 2
    lines: list[str] = []

    def flush() -> None:
        for translation in translator.translate(lines, beam=args.beam, alpha=alpha):
            print(translation, flush=False)
        sys.stdout.flush()
        lines.clear()

    for line in sys.stdin:
        lines.append(line.rstrip("\n"))
        if len(lines) >= args.batch:
            flush()
    flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
