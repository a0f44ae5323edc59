"""Train a chapter's model from the command line: `python -m annotated.train multi30k|wmt`.

The run folder holds the checkpoint, the vocabularies and the history; running the same command
again resumes a stopped run, or just reports a finished one. A time budget (`--minutes 30`)
plans how many steps fit before training starts and shrinks the whole schedule to them, so that
warmup, cooldown and averaging all finish inside it; without the option the profile's budget
applies, and `--minutes none` trains the recipe whatever the time. Without --profile, the profile
is $ANNOTATED_PROFILE's (CI sets smoke, the tiny one), else full for multi30k and sample for wmt.
ANNOTATED_PROFILE=shipped is refused: it names the model the book ships, which chapter 7 loads
instead of training. A wrong setting, missing data or a checkpoint of another configuration is
reported in one line that names the file and what to do, with exit status 2. WMT also runs
data-parallel under torchrun:

    torchrun --standalone --nproc_per_node=8 -m annotated.train wmt --profile base
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from annotated.base.files import FolderInUseError

TASKS = ("multi30k", "wmt")
DEFAULT_PROFILES = {"multi30k": "full", "wmt": "sample"}  # as chapters 7 and 8 choose them
COLUMNS = ["split", "weights", "decoding", "<unk> copied", "BLEU", "chrF", "sentences/s"]


def arguments(profiles: dict[str, tuple[str, ...]]) -> argparse.ArgumentParser:
    """The command line's parser, for the tasks' `profiles` (`task_profiles()`)."""
    parser = argparse.ArgumentParser(
        prog="python -m annotated.train", description=__doc__.split("\n")[0]
    )
    parser.add_argument("task", choices=TASKS, help="what to train")
    parser.add_argument(
        "--profile",
        choices=sorted({p for names in profiles.values() for p in names}),
        default=None,
        help="; ".join(f"{task}: {', '.join(names)}" for task, names in profiles.items())
        + " (default: the one $ANNOTATED_PROFILE names, else "
        + " / ".join(DEFAULT_PROFILES[task] for task in profiles)
        + ")",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="default: <runs>/<task>-<profile>, <runs> being $ANNOTATED_RUNS_DIR if set, else "
        "runs/ in a checkout, else the user's data folder (~/.local/share/annotated/runs on Linux)",
    )
    parser.add_argument(
        "--minutes",
        type=budget_minutes,
        default=False,
        metavar="M",
        help="a budget of M training minutes: the schedule is planned to fit it, from the speed "
        "measured over the first steps, and kept if the run is resumed ('none': no budget; "
        "default: the profile's, 60 for multi30k full)",
    )
    parser.add_argument("--no-scores", action="store_true", help="skip the final BLEU/chrF scores")
    return parser


def main(argv: list[str] | None = None) -> int:
    profiles = task_profiles()
    parser = arguments(profiles)
    args = parser.parse_args(argv)
    if args.profile is not None and args.profile not in profiles[args.task]:
        parser.error(f"{args.task} has the profiles {', '.join(profiles[args.task])}")
    if args.run_dir is not None and args.run_dir.exists() and not args.run_dir.is_dir():
        parser.error(
            f"--run-dir {args.run_dir} is a file; give a folder (it is created if missing)"
        )
    try:
        refuse_shipped(args)
        return run(args)
    except (ValueError, OSError, FloatingPointError, FolderInUseError) as error:
        # A wrong setting, missing data, a checkpoint of another run, a full disk: the message says
        # what to do, and every checkpoint written so far is intact.
        print(f"train: {error}", file=sys.stderr)
        return 2


def task_profiles() -> dict[str, tuple[str, ...]]:
    """Each task's profile names, as chapters 7 and 8 define them."""
    from annotated.ch07_multi30k import PROFILES
    from annotated.ch08_wmt import WMT_PROFILES

    return {"multi30k": tuple(PROFILES), "wmt": tuple(WMT_PROFILES)}


def refuse_shipped(args: argparse.Namespace) -> None:
    """Stop before anything starts when $ANNOTATED_PROFILE names chapter 7's shipped model (not a
    --profile choice): it has no recipe of its own, and would train the full one into
    <runs>/multi30k-shipped."""
    from annotated.ch07_multi30k import SHIPPED, profile_config

    if args.task == "multi30k" and profile_config(args.profile)[0] == SHIPPED:
        raise ValueError(
            "ANNOTATED_PROFILE=shipped is the book's trained model, which needs no training: "
            "chapter 7 loads it under that profile, and `python -m annotated.translate "
            "--checkpoint shipped` translates with it; to train your own, unset "
            "ANNOTATED_PROFILE or pass --profile full"
        )


def budget_minutes(text: str) -> float | None:
    """--minutes: a positive number of minutes, or "none"."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(
            f"give a positive number of minutes or 'none', not {text!r}"
        )
    return value


def with_budget(config, args: argparse.Namespace):
    """The profile's configuration with the budget --minutes gave (unchanged without it)."""
    return (
        config if args.minutes is False else dataclasses.replace(config, max_minutes=args.minutes)
    )


def run(args: argparse.Namespace) -> int:
    """Train (or resume, or load) the run the arguments describe, then print its scores."""
    from annotated.base.threads import use_fair_threads
    from annotated.training.config import RUNS_DIR
    from annotated.training.finish import final_scores
    from annotated.training.folder import folder_name

    use_fair_threads()

    if args.task == "multi30k":
        from annotated import ch07_multi30k as ch07

        profile, config = ch07.profile_config(args.profile)
        config = with_budget(config, args)
        folder = args.run_dir or RUNS_DIR / folder_name("multi30k", profile)
        run = ch07.train_multi30k(config, folder)
        columns = COLUMNS
    else:
        from annotated import ch08_wmt as ch08

        rank, _ = ch08.setup_distributed()
        profile, config = ch08.wmt_profile(args.profile)
        config = with_budget(config, args)
        folder = args.run_dir or RUNS_DIR / folder_name("wmt", profile)
        run = ch08.train_wmt(config, folder)
        ch08.teardown_distributed()
        if rank != 0:
            return 0
        columns = [c for c in COLUMNS if c != "<unk> copied"]
        columns.insert(columns.index("chrF"), "tokenized BLEU")
    minutes = run.history.seconds.sum() / 60
    print(f"{folder}: {int(run.history.step.max())} steps, {minutes:.1f} training minutes")
    if not args.no_scores:
        scores = final_scores(run) if args.task == "multi30k" else ch08.wmt_scores(run)
        print(scores[columns].to_string(index=False))
        print(scores["BLEU signature"][0])
        if args.task != "multi30k":
            from annotated.base.datasets import WMT14_TEST_SETS

            print("test set:", WMT14_TEST_SETS[config.data])
    return 0


if __name__ == "__main__":
    sys.exit(main())
