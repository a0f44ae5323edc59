"""Train a chapter's model from the command line: `python -m annotated.train multi30k`.

The run folder holds the checkpoint, the vocabularies and the history; running the same command
again resumes a stopped run, or just reports a finished one. ANNOTATED_PROFILE=smoke (or
--profile smoke) selects the tiny CI profile.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m annotated.train", description=__doc__.split("\n")[0]
    )
    parser.add_argument("task", choices=["multi30k"], help="what to train")
    parser.add_argument(
        "--profile",
        choices=["full", "smoke"],
        default=None,
        help="default: $ANNOTATED_PROFILE or full",
    )
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/<task>-<profile>")
    parser.add_argument("--no-scores", action="store_true", help="skip the final BLEU/chrF scores")
    args = parser.parse_args(argv)
    from annotated import ch05_multi30k as ch05

    profile, config = ch05.profile_config(args.profile)
    folder = args.run_dir or ch05.RUNS_DIR / f"multi30k-{profile}"
    run = ch05.train_multi30k(config, folder)
    minutes = run.history.seconds.sum() / 60
    print(f"{folder}: {int(run.history.step.max())} steps, {minutes:.1f} training minutes")
    if not args.no_scores:
        scores = ch05.final_scores(run)
        print(
            scores[
                ["split", "weights", "decoding", "<unk> copied", "BLEU", "chrF", "sentences/s"]
            ].to_string(index=False)
        )
        print(scores["BLEU signature"][0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
