"""annotated/translate.py: `python -m annotated.translate`, the filter that translates one line
for every line it reads, on bad input.

Each case checks the message a user sees and that nothing else is lost: every other input line
still gets its translation, in its place. Most cases call the command's `main` in this process,
with its standard streams as bytes (tests/command_line.py's `cli`); a few start the real
`python -m` process, for what only a process shows: its exit status, a reader that closes the pipe
early, output with nothing in it but translations. Then the model the filter chooses when none is
named: the longest run trained here, else the book's shipped model, saying so.
"""

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from command_line import ROOT, cli, run_module
from toy_runs import GERMAN, model_state, write_run_folder

from annotated.base.checkpoints import read_checkpoint
from annotated.ch06_decoding import DecodeConfig, Translator
from annotated.training.finish import load_translator
from annotated.translate import default_checkpoint, translate_stream
from annotated.translate import main as translate_main

# Every test here is slow-marked (the filter, some of it started as processes):
# `make unit` leaves them to `make test`.
pytestmark = pytest.mark.slow

DECODING = {"beam": 2, "alpha": 0.6}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A run folder as training leaves it: vocabularies and an (untrained) averaged model."""
    return write_run_folder(tmp_path_factory.mktemp("run"), DECODING)


@pytest.fixture(scope="module")
def translator(run_folder) -> Translator:
    return load_translator(run_folder / "averaged.pt")


def translate_cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`python -m annotated.translate args`, in this process (`cli`)."""
    return cli(translate_main, *args, stdin=stdin)


def translate_process(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`python -m annotated.translate args`, a process of its own."""
    return run_module("annotated.translate", *args, stdin=stdin)


def stream(translator, data: bytes, **options) -> tuple[list[str], list[str], int]:
    """translate_stream in-process: (output lines, warnings, lines left empty)."""
    out, warnings = io.BytesIO(), []
    settings = {"beam": 1, "alpha": 0.6, **options}
    empty = translate_stream(translator, io.BytesIO(data), out, warnings.append, **settings)
    return out.getvalue().decode("utf-8").split("\n")[:-1], warnings, empty


# ---------------------------------------------------------------- files that are not checkpoints


@pytest.mark.parametrize(
    "content",
    [b"just some text\n", bytes(range(256)) * 4, b""],
    ids=["text", "random bytes", "empty"],
)
def test_a_file_that_is_not_a_checkpoint_is_refused_with_a_message(tmp_path, content):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    result = translate_cli("--checkpoint", str(path), stdin=b"Hallo\n")
    assert result.returncode == 2 and result.stdout == b""
    assert b"is not a checkpoint this book can read" in result.stderr
    assert b"Traceback" not in result.stderr


def test_a_torch_file_without_model_and_config_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    result = translate_cli("--checkpoint", str(path))
    assert result.returncode == 2
    assert b"not a checkpoint of this book" in result.stderr


def test_a_checkpoint_of_another_task_has_no_vocabulary_and_says_so(tmp_path):
    path = tmp_path / "copy-task.pt"  # chapter 4's copy model: weights, config, no vocabulary
    torch.save(model_state(13, 13), path)
    result = translate_cli("--checkpoint", str(path), stdin=b"Hallo\n")
    assert result.returncode == 2 and result.stdout == b""
    assert b"has no vocabulary beside it" in result.stderr


def test_a_checkpoint_with_another_vocabulary_is_refused(tmp_path, run_folder):
    for name in ("vocab.de.json", "vocab.en.json"):
        (tmp_path / name).write_bytes((run_folder / name).read_bytes())
    torch.save(model_state(50, 60), tmp_path / "averaged.pt")
    result = translate_cli("--checkpoint", str(tmp_path / "averaged.pt"))
    assert result.returncode == 2 and b"does not fit the model" in result.stderr


def test_a_broken_vocabulary_file_names_itself(tmp_path, run_folder):
    (tmp_path / "vocab.de.json").write_text("{not json")
    (tmp_path / "vocab.en.json").write_bytes((run_folder / "vocab.en.json").read_bytes())
    (tmp_path / "averaged.pt").write_bytes((run_folder / "averaged.pt").read_bytes())
    result = translate_cli("--checkpoint", str(tmp_path))
    assert result.returncode == 2
    assert b"vocab.de.json is not a vocabulary file of this book" in result.stderr


def test_a_run_folder_may_be_given_instead_of_a_file(run_folder, translator):
    result = translate_process("--checkpoint", str(run_folder), stdin=GERMAN[0].encode() + b"\n")
    assert result.returncode == 0, result.stderr
    expected = translator.translate([GERMAN[0]], **DECODING)
    assert result.stdout.decode().split("\n")[:-1] == expected


def test_translate_cli_without_a_checkpoint_says_what_to_do(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "annotated.translate", "--checkpoint", str(tmp_path / "none.pt")],
        input="Hallo\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert "make train-multi30k" in result.stderr and result.stdout == ""


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    "option, value",
    [
        ("--beam", "0"),
        ("--beam", "-3"),
        ("--beam", "four"),
        ("--beam", "1000"),
        ("--alpha", "nan"),
        ("--alpha", "-1"),
        ("--alpha", "inf"),
        ("--batch", "0"),
        ("--max-tokens", "0"),
    ],
)
def test_option_values_that_make_no_sense_are_refused_before_any_work(run_folder, option, value):
    result = translate_cli("--checkpoint", str(run_folder), option, value, stdin=b"Hallo\n")
    assert result.returncode == 2 and result.stdout == b""
    assert option.encode() in result.stderr and b"Traceback" not in result.stderr


@pytest.mark.slow
def test_the_checkpoints_decoding_settings_are_the_default_and_options_override_them(
    run_folder, translator
):
    assert translator.decoding == DecodeConfig(**DECODING)  # the other settings: their defaults
    lines = "\n".join(GERMAN).encode() + b"\n"
    saved = translate_cli("--checkpoint", str(run_folder), stdin=lines)
    assert saved.returncode == 0 and saved.stderr == b""
    assert saved.stdout.decode().split("\n")[:-1] == translator.translate(GERMAN, **DECODING)
    greedy = translate_cli(
        "--checkpoint", str(run_folder), "--beam", "1", "--alpha", "0", stdin=lines
    )
    assert greedy.stdout.decode().split("\n")[:-1] == translator.translate(GERMAN, 1, 0.0)


def test_a_checkpoint_without_decoding_settings_uses_chapter_7s_and_says_so(tmp_path, run_folder):
    for name in ("vocab.de.json", "vocab.en.json"):
        (tmp_path / name).write_bytes((run_folder / name).read_bytes())
    state = read_checkpoint(run_folder / "averaged.pt")
    del state["decoding"]
    torch.save(state, tmp_path / "checkpoint.pt")
    result = translate_cli("--checkpoint", str(tmp_path), stdin=b"Hallo\n")
    assert result.returncode == 0
    assert b"records no decoding settings; using chapter 7's (beam 4, alpha 2.5)" in result.stderr


# ---------------------------------------------------------------- lines


def test_empty_and_whitespace_lines_stay_empty_without_a_warning(translator):
    lines, warnings, empty = stream(translator, b"\n   \n\t\n" + GERMAN[0].encode() + b"\n\n")
    assert lines[:3] == ["", "", ""] and lines[4] == "" and len(lines) == 5
    assert lines[3] == translator.translate([GERMAN[0]])[0]
    assert warnings == [] and empty == 0


def test_invalid_utf8_is_replaced_warned_about_and_costs_no_other_line(translator):
    data = GERMAN[0].encode() + b"\nEin \xff\xfeHund\n" + GERMAN[1].encode() + b"\n"
    lines, warnings, empty = stream(translator, data)
    assert len(lines) == 3
    assert [lines[0], lines[2]] == translator.translate([GERMAN[0], GERMAN[1]])
    assert lines[1] == translator.translate(["Ein \ufffd\ufffdHund"])[0]
    assert warnings == ["line 2: not valid UTF-8; its undecodable bytes were replaced by U+FFFD"]
    assert empty == 0


def test_a_line_longer_than_max_tokens_gives_an_empty_line_and_a_warning(translator):
    long = " ".join(["Hund"] * 40)
    data = f"{GERMAN[0]}\n{long}\n{GERMAN[1]}\n".encode()
    lines, warnings, empty = stream(translator, data, max_tokens=20)
    assert lines[1] == "" and [lines[0], lines[2]] == translator.translate(GERMAN[:2])
    assert empty == 1 and warnings[0].startswith("line 2: 41 tokens, more than --max-tokens 20")


def test_a_line_whose_translation_fails_costs_only_itself(translator, monkeypatch):
    real = Translator.translate

    def fragile(self, sentences, *args, **kwargs):
        if any("Bank" in s for s in sentences):
            raise RuntimeError("out of memory")
        return real(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", fragile)
    data = "\n".join(GERMAN).encode() + b"\n"
    lines, warnings, empty = stream(translator, data, batch=8)
    assert lines[1] == "" and [lines[0], lines[2]] == real(translator, [GERMAN[0], GERMAN[2]])
    assert warnings == ["line 2: left untranslated (RuntimeError: out of memory)"] and empty == 1


def test_a_byte_order_mark_and_windows_line_endings_are_ignored(translator):
    lines, warnings, _ = stream(translator, b"\xef\xbb\xbf" + GERMAN[0].encode() + b"\r\n")
    assert lines == translator.translate([GERMAN[0]]) and warnings == []


def test_the_filter_exits_1_when_a_line_was_left_empty_and_keeps_the_others(run_folder, translator):
    data = f"{GERMAN[0]}\n{' '.join(['Hund'] * 30)}\n{GERMAN[2]}\n".encode()
    result = translate_process("--checkpoint", str(run_folder), "--max-tokens", "10", stdin=data)
    assert result.returncode == 1
    lines = result.stdout.decode().split("\n")[:-1]
    assert lines[1] == "" and [lines[0], lines[2]] == translator.translate(
        [GERMAN[0], GERMAN[2]], **DECODING
    )
    assert b"line 2: 31 tokens, more than --max-tokens 10" in result.stderr


def test_a_reader_that_stops_early_gets_no_traceback(run_folder):
    data = (GERMAN[0] + "\n").encode() * 300
    result = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m annotated.translate --checkpoint {run_folder} --batch 1"
            " | head -n 1",
        ],
        input=data,
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    assert len(result.stdout.decode().split("\n")) == 2
    assert b"Traceback" not in result.stderr and b"BrokenPipe" not in result.stderr


# ---------------------------------------------------------------- the model it chooses


def test_the_filter_finds_a_run_of_any_profile_that_train_writes(tmp_path):
    assert default_checkpoint(tmp_path) == tmp_path / "multi30k-full" / "averaged.pt"  # none yet
    for profile in ("smoke", "class", "full", "long"):  # each found, the longer runs preferred
        (tmp_path / f"multi30k-{profile}").mkdir()
        (tmp_path / f"multi30k-{profile}" / "checkpoint.pt").write_bytes(b"")
        assert default_checkpoint(tmp_path) == tmp_path / f"multi30k-{profile}" / "checkpoint.pt"
    (tmp_path / "multi30k-long" / "averaged.pt").write_bytes(b"")
    assert default_checkpoint(tmp_path) == tmp_path / "multi30k-long" / "averaged.pt"


@pytest.mark.parametrize(("profile", "warned"), [("full", False), ("long", False), ("class", True)])
def test_the_filter_warns_of_weaker_translations_only_for_a_shortened_run(
    tmp_path, monkeypatch, profile, warned
):
    """The default training (the full profile) is the book's run: no warning; class and smoke
    shorten the recipe, and the filter says so."""
    (tmp_path / f"multi30k-{profile}").mkdir()
    (tmp_path / f"multi30k-{profile}" / "averaged.pt").write_bytes(b"not a checkpoint")
    monkeypatch.setenv("ANNOTATED_RUNS_DIR", str(tmp_path))
    done = translate_cli(stdin=b"Ein Hund.\n")
    assert done.returncode == 2  # the file is no model: refused after the choice is said
    assert (b"no full run here" in done.stderr) == warned, done.stderr


def test_with_no_run_the_filter_translates_with_the_shipped_model_and_says_so(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("ANNOTATED_RUNS_DIR", str(tmp_path))  # an empty runs folder
    done = translate_cli(stdin="Ein Hund läuft.\n\nZwei Männer.\n".encode())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().split("\n")
    assert len(lines) == 4 and lines[1] == "" and "dog" in lines[0].lower(), lines
    said = done.stderr.decode().strip().splitlines()
    assert len(said) == 1 and "using the book's shipped model" in said[0], said


def test_the_shipped_model_can_be_asked_for_over_a_shortened_run(tmp_path, monkeypatch):
    (tmp_path / "multi30k-class").mkdir()
    (tmp_path / "multi30k-class" / "averaged.pt").write_bytes(b"not a checkpoint")
    monkeypatch.setenv("ANNOTATED_RUNS_DIR", str(tmp_path))
    done = translate_cli("--checkpoint", "shipped", stdin=b"Ein Hund.\n")
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    assert done.stdout.count(b"\n") == 1 and done.stdout.strip()
