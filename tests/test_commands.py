"""Every command the book documents starts and describes itself: a test runs each one's `--help`.

The commands are found where a reader meets them, in the README, the chapters, the course page
and the Makefile, so a command renamed, moved or broken at import fails here with its name.
`make help` lists every target of the Makefile, one a line, and what the help texts of
`python -m annotated.train` and `python -m annotated.translate` say about a default or an order is
held to the code that decides it: each test asks that code (with the variables and folders it
reads planted in a temporary folder) and compares its answer with the sentence.
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from annotated import train, translate
from annotated.base import files
from annotated.training.config import PROFILE_ENV

ROOT = Path(__file__).resolve().parent.parent
# `python -m annotated.train`, `$(PY) -m tools.book`, ...: the book's commands, each a module run
# from the checkout's root (tools/ and benchmarks/ are packages beside annotated/).
COMMAND = re.compile(r"(?:python3?|\$\(PY\)) (-m (?:annotated|benchmarks|tools)(?:\.[a-z_0-9]+)+)")


def documented_commands() -> list[str]:
    places = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md"]
    places += [ROOT / "Makefile", *sorted((ROOT / "annotated").rglob("*.py"))]
    places += sorted((ROOT / "site").glob("*.md"))
    found = set()
    for path in places:
        found.update(COMMAND.findall(path.read_text(encoding="utf-8")))
    return sorted(found)


def test_the_documented_commands_are_found():
    commands = documented_commands()
    assert {"-m annotated.train", "-m annotated.translate", "-m benchmarks.bench_table3"} <= set(
        commands
    )
    # a command in a subpackage is found whole, not cut at its package
    assert "-m annotated.base.datasets" in commands and "-m annotated.base" not in commands
    assert {"-m tools.book", "-m tools.booksite", "-m benchmarks.bench_grade"} <= set(commands)


# Runs each command as `python -m` runs it (the module as __main__, the checkout's root first on
# sys.path), one after the other in one fresh process, so that torch is imported once rather than
# once a command (26 processes took 90 s on two cores; this takes a few). Prints a JSON line: for
# each command, its exit code and what it wrote.
HELP_ALL = """
import contextlib, io, json, runpy, sys
sys.path.insert(0, "")
answers = {}
for command in sys.argv[1:]:
    module = command.split()[-1]
    out = io.StringIO()
    sys.argv = [module, "--help"]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException as error:  # broken at import, say: this command fails, not the rest
            print(f"{type(error).__name__}: {error}")
            code = 1
    answers[command] = [code, out.getvalue()]
print(json.dumps(answers))
"""


@pytest.mark.slow
def test_every_documented_command_answers_help():
    commands = documented_commands()
    done = subprocess.run(
        [sys.executable, "-c", HELP_ALL, *commands],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    assert sorted(answers) == commands
    failed = [
        f"python {command} --help (exit {code}): {out[-400:]}"
        for command, (code, out) in answers.items()
        if code != 0 or "usage:" not in out
    ]
    assert not failed, "\n\n".join(failed)


# --------------------------------------------------------------------------------- make help


def makefile() -> str:
    """The Makefile with its continued lines joined."""
    return (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")


def described_targets() -> dict[str, str]:
    """Each rule with a `## ` description: its target and the description."""
    rule = re.compile(r"^([A-Za-z0-9_.-]+):[^=\n]*?## (.*)$", re.M)
    return {name: text.strip() for name, text in rule.findall(makefile())}


def phony_targets() -> set[str]:
    """The .PHONY targets a reader types; a rule named by a variable (`$(TEST_LANES)`, the log
    files make test's lanes write) is make test's own step, not a command."""
    return {
        name
        for line in re.findall(r"^\.PHONY:(.*)$", makefile(), re.M)
        for name in line.split()
        if not name.startswith("$(")
    }


def test_every_target_has_a_description_for_make_help():
    undescribed = sorted(phony_targets() - set(described_targets()))
    assert not undescribed, f"give these targets a `## ` description: {undescribed}"


def test_make_help_lists_every_target_on_a_line_of_its_own():
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    shown = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    targets = described_targets() | dict.fromkeys(phony_targets() - set(described_targets()), "")
    columns = set()
    for name, text in targets.items():
        # the name, at least two spaces, then its description: never run into each other
        line = re.compile(rf"  make {re.escape(name)} {{2,}}{re.escape(text)}")
        lines = [shown_line for shown_line in shown if line.fullmatch(shown_line)]
        assert len(lines) == 1, f"make help shows `{name}` on {len(lines)} lines of its own"
        columns.add(lines[0].index(text, len(f"  make {name}")))
    assert len(columns) == 1, f"the descriptions start in the columns {sorted(columns)}"


def test_try_models_description_names_the_files_the_export_writes():
    from annotated.export import browser_model

    described = described_targets()["try-model"]
    for path in (browser_model.DEFAULT_OUT, browser_model.REFERENCE_FILE):
        where = path.relative_to(files.REPO_ROOT).as_posix()
        assert where in described, f"make try-model writes into {where}: {described!r}"


# ------------------------------------------------- the help texts against the code behind them


def option_help(parser: argparse.ArgumentParser, option: str) -> str:
    return next(action.help for action in parser._actions if option in action.option_strings)


def stated_order(text: str, names: dict[str, str]) -> list[str]:
    """The keys of `names` in the order the text first names each (its value, as a whole word)."""
    where = {}
    for key, name in names.items():
        found = re.search(rf"(?<![\w$]){re.escape(name)}(?!\w)", text)
        assert found, f"{name!r} is not named in: {text!r}"
        where[key] = found.start()
    return sorted(where, key=where.get)


def docstring_paragraph(module, start: str) -> str:
    """The paragraph of the module's docstring that begins with `start`, on one line."""
    paragraph = next(p for p in module.__doc__.split("\n\n") if p.strip().startswith(start))
    return " ".join(paragraph.split())


RUNS_PLACES = {
    "variable": f"${files.RUNS_DIR_ENV}",
    "checkout": "checkout",
    "user": "user's",
}


def runs_folder_order(tmp_path: Path, monkeypatch) -> list[str]:
    """The places `files.runs_dir()` takes the runs folder from, the one it prefers first: found by
    offering it two at once (the user's folder is always on offer), each in tmp_path."""
    variable, user = tmp_path / "variable", tmp_path / "user"
    monkeypatch.setattr(files, "user_folder", lambda kind: user / kind)
    places = {
        variable: "variable",
        files.REPO_ROOT / "runs": "checkout",
        user / "data" / "runs": "user",
    }

    def chosen(with_variable: bool, in_checkout: bool) -> str:
        if with_variable:
            monkeypatch.setenv(files.RUNS_DIR_ENV, str(variable))
        else:
            monkeypatch.delenv(files.RUNS_DIR_ENV, raising=False)
        monkeypatch.setattr(files, "in_checkout", lambda: in_checkout)
        return places[files.runs_dir()]

    wins = Counter([chosen(True, True), chosen(True, False), chosen(False, True)])
    return sorted(RUNS_PLACES, key=lambda place: -wins[place])


def runs_folder_sentences() -> dict[str, str]:
    return {
        "train --run-dir": option_help(train.arguments(train.task_profiles()), "--run-dir"),
        "translate --checkpoint": option_help(translate.arguments(), "--checkpoint"),
        "translate's docstring": docstring_paragraph(translate, "The default model"),
    }


@pytest.mark.parametrize("where", sorted(runs_folder_sentences()))
def test_the_runs_folders_order_is_stated_as_files_runs_dir_decides_it(
    where, tmp_path, monkeypatch
):
    order = runs_folder_order(tmp_path, monkeypatch)
    text = runs_folder_sentences()[where]
    assert stated_order(text, RUNS_PLACES) == order, f"{where} says: {text!r}"


def default_model_order(tmp_path: Path) -> list[str]:
    """The profiles whose runs `translate.default_checkpoint` takes, the one it prefers first: a run
    of every profile chapter 7 can train planted in tmp_path, the chosen one removed each time."""
    from annotated.ch07_multi30k import PROFILES

    for profile in PROFILES:
        (tmp_path / f"multi30k-{profile}").mkdir()
        (tmp_path / f"multi30k-{profile}" / "averaged.pt").write_bytes(b"")
    order = []
    while (found := translate.default_checkpoint(tmp_path)).exists():
        order.append(found.parent.name.removeprefix("multi30k-"))
        shutil.rmtree(found.parent)
    assert sorted(order) == sorted(PROFILES), f"translate never takes {set(PROFILES) - set(order)}"
    return order


@pytest.mark.parametrize("where", ["translate --checkpoint", "translate's docstring"])
def test_the_default_models_order_is_stated_as_translate_decides_it(where, tmp_path):
    order = default_model_order(tmp_path)
    text = runs_folder_sentences()[where]
    assert stated_order(text, {profile: profile for profile in order}) == order, (
        f"translate takes the runs in the order {order}; {where} says: {text!r}"
    )


def test_trains_default_profile_is_stated_as_the_chapters_choose_it(monkeypatch):
    from annotated.ch07_multi30k import profile_config
    from annotated.ch08_wmt import wmt_profile

    choosers = {"multi30k": profile_config, "wmt": wmt_profile}
    profiles = train.task_profiles()
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    defaults = [choosers[task](None)[0] for task in profiles]
    ignored = []  # the profiles the variable can name that the chapters would not take from it
    for task, names in profiles.items():
        for name in names:
            monkeypatch.setenv(PROFILE_ENV, name)
            if choosers[task](None)[0] != name:
                ignored.append(f"{task} {name}")
    text = option_help(train.arguments(profiles), "--profile")
    default = re.search(r"\(default: (.*)\)$", text).group(1)
    assert f"${PROFILE_ENV}" in default, text
    if not ignored:  # every profile is taken from the variable: the help may not tie it to one
        assert not re.search(rf"\${PROFILE_ENV}\s*=", default), text
    assert default.endswith("else " + " / ".join(defaults)), text


def test_the_numbers_given_as_defaults_are_the_options_defaults():
    from annotated.ch07_multi30k import PROFILES

    parsers = {"train": train.arguments(train.task_profiles()), "translate": translate.arguments()}
    for command, parser in parsers.items():
        for action in parser._actions:
            if isinstance(action.default, int | float) and not isinstance(action.default, bool):
                assert f"default {action.default}" in action.help, (command, action.help)
    # where the option itself has no default, the one the command falls back to
    full = PROFILES["full"]
    minutes = re.search(r"(\d+) for multi30k full", option_help(parsers["train"], "--minutes"))
    assert float(minutes.group(1)) == full.max_minutes
    beam = re.search(r"else (\d+)\)", option_help(parsers["translate"], "--beam"))
    assert int(beam.group(1)) == full.decoding.beam
    alpha = re.search(r"else chapter 7's ([\d.]+)\)", option_help(parsers["translate"], "--alpha"))
    assert float(alpha.group(1)) == full.decoding.alpha
