"""The command-line tools on bad input: `python -m annotated.translate` and
`python -m annotated.train`; and the first cell tools/book.py writes into every chapter notebook.

Each case checks the message a user sees and that nothing else is lost: every other input line
still gets its translation, in its place. Most cases call the command's `main` in this process,
with its standard streams as bytes (`cli`): a process each would import torch and the chapters
thirty times over. A few start the real `python -m` process, for what only a process shows: its
exit status, a reader that closes the pipe early, output with nothing in it but translations.

The first cell is checked where it is written (once, in tools/book.py, never in the .py files)
and run as a kernel would run it: finding the book, finding it at another version, and failing
to install it. tests/test_package.py runs it where the book is not installed yet.
"""

import dataclasses
import io
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jupytext
import nbformat
import pytest
import torch

from annotated.base.checkpoints import read_checkpoint
from annotated.base.datasets import DATA_DIR_ENV
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import Vocab, tokenize, vocab_settings
from annotated.ch06_decoding import DecodeConfig, Translator
from annotated.train import main as train_main
from annotated.training.finish import load_translator
from annotated.translate import default_checkpoint, translate_stream
from annotated.translate import main as translate_main

ROOT = Path(__file__).resolve().parent.parent
from tools import book
from tools.chapters import chapter_sources

# Every test here is slow-marked (the command-line tools, some started as processes):
# `make unit` leaves them to `make test`.
pytestmark = pytest.mark.slow

GERMAN = ["Ein Hund rennt.", "Zwei Männer sitzen auf einer Bank.", "Eine Frau liest ein Buch."]
ENGLISH = ["A dog runs.", "Two men sit on a bench.", "A woman reads a book."]
DECODING = {"beam": 2, "alpha": 0.6}


def _vocab(sentences: list[str], language: str) -> Vocab:
    settings = {k: v for k, v in vocab_settings(language, 1).items() if k != "min_freq"}
    return Vocab.build(tokenize(sentences, language), 1, **settings)


def _model_state(src: int, tgt: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    config = ModelConfig(src, tgt, N=1, d_model=16, d_ff=32, h=2, p_drop=0.0)
    return {"model": make_model(config).state_dict(), "model_config": dataclasses.asdict(config)}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A run folder as training leaves it: vocabularies and an (untrained) averaged model."""
    folder = tmp_path_factory.mktemp("run")
    src, tgt = _vocab(GERMAN, "de"), _vocab(ENGLISH, "en")
    src.save(folder / "vocab.de.json")
    tgt.save(folder / "vocab.en.json")
    torch.save({**_model_state(len(src), len(tgt)), "decoding": DECODING}, folder / "averaged.pt")
    return folder


@pytest.fixture(scope="module")
def translator(run_folder) -> Translator:
    return load_translator(run_folder / "averaged.pt")


def run_module(module: str, *args: str, stdin: bytes = b"", env: dict | None = None):
    """`python -m module args...` from the project folder, its output captured as bytes."""
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, input=stdin, capture_output=True, cwd=ROOT, timeout=600, env=env)


def cli(main, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`main(args)` in this process as `python -m` would run it, its standard streams bytes: the
    exit status is what main returns, or what SystemExit carries (argparse's errors exit 2). An
    exception that escapes main escapes here too, and fails the test as a traceback would."""
    streams = [io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") for data in (stdin, b"", b"")]
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        status = main(list(args))
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        for stream in streams[1:]:
            stream.flush()
    out, err = (stream.buffer.getvalue() for stream in streams[1:])
    return subprocess.CompletedProcess(["main", *args], status, out, err)


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


class Payload:
    """An object that a full unpickler would rebuild (and could run code for)."""


def test_a_pickle_with_arbitrary_objects_is_refused_not_unpickled(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": Payload(), "model_config": {}}, path)
    with pytest.raises(ValueError, match="not a checkpoint this book can read"):
        read_checkpoint(path)


def test_a_torch_file_without_model_and_config_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    result = translate_cli("--checkpoint", str(path))
    assert result.returncode == 2
    assert b"not a checkpoint of this book" in result.stderr


def test_a_checkpoint_of_another_task_has_no_vocabulary_and_says_so(tmp_path):
    path = tmp_path / "copy-task.pt"  # chapter 4's copy model: weights, config, no vocabulary
    torch.save(_model_state(13, 13), path)
    result = translate_cli("--checkpoint", str(path), stdin=b"Hallo\n")
    assert result.returncode == 2 and result.stdout == b""
    assert b"has no vocabulary beside it" in result.stderr


def test_a_checkpoint_with_another_vocabulary_is_refused(tmp_path, run_folder):
    for name in ("vocab.de.json", "vocab.en.json"):
        (tmp_path / name).write_bytes((run_folder / name).read_bytes())
    torch.save(_model_state(50, 60), tmp_path / "averaged.pt")
    result = translate_cli("--checkpoint", str(tmp_path / "averaged.pt"))
    assert result.returncode == 2 and b"does not fit the model" in result.stderr


def test_weights_that_do_not_fit_their_own_config_are_refused(tmp_path, run_folder):
    state = _model_state(20, 20)
    state["model_config"]["d_model"] = 32
    path = tmp_path / "averaged.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="do not fit the model it describes"):
        load_translator(path)


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


# ---------------------------------------------------------------- python -m annotated.train


def train_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m annotated.train args`, in this process (`cli`), its output text."""
    result = cli(train_main, *args)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    return result


def test_train_refuses_a_run_dir_that_is_a_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    result = train_cli("multi30k", "--run-dir", str(path))
    assert result.returncode == 2 and "is a file; give a folder" in result.stderr
    assert path.read_text() == "mine"


def test_train_with_an_unknown_profile_in_the_environment_says_which_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("ANNOTATED_PROFILE", "fast")
    result = train_cli("multi30k", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert (
        "ANNOTATED_PROFILE='fast': choose one of ['class', 'full', 'long', 'smoke']"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_train_refuses_the_shipped_profile_in_one_line_and_trains_nothing(tmp_path, monkeypatch):
    """ANNOTATED_PROFILE=shipped (chapter 7's way to load the book's model) would otherwise train
    the full recipe into multi30k-shipped: refused before anything starts."""
    from annotated import ch07_multi30k

    trained = []

    def train_multi30k(config, folder, *args, **kw):
        trained.append(folder)
        raise ValueError(f"started training into {folder}")

    monkeypatch.setattr(ch07_multi30k, "train_multi30k", train_multi30k)
    monkeypatch.setenv("ANNOTATED_PROFILE", "shipped")
    result = train_cli("multi30k", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and not trained and not (tmp_path / "run").exists()
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and "needs no training" in said[0] and "chapter 7 loads it" in said[0]
    assert result.stdout == ""


def test_train_with_a_missing_data_folder_says_where_to_put_it(tmp_path):
    # A process of its own: the exit status and message `python -m` gives, nothing else printed.
    env = {**os.environ, DATA_DIR_ENV: str(tmp_path / "nowhere"), "ANNOTATED_PROFILE": "smoke"}
    result = run_module("annotated.train", "multi30k", "--run-dir", str(tmp_path / "run"), env=env)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 2 and result.stderr.startswith("train: ")
    assert "nowhere" in result.stderr and "Traceback" not in result.stderr


def test_train_refuses_a_profile_of_the_other_task():
    result = train_cli("multi30k", "--profile", "sample")  # chapter 8's WMT sample
    assert result.returncode == 2
    assert "multi30k has the profiles full, long, class, smoke" in result.stderr


@pytest.mark.parametrize("value", ["0", "-5", "abc", "inf", "nan", ""])
def test_train_refuses_a_budget_that_is_not_a_positive_number_of_minutes(tmp_path, value):
    result = train_cli("multi30k", "--minutes", value, "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "positive number of minutes or 'none'" in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_budget_option_sets_or_removes_the_profiles_budget():
    from annotated.ch07_multi30k import PROFILES
    from annotated.train import budget_minutes, with_budget

    full = PROFILES["full"]
    given = lambda text: with_budget(full, type("Args", (), {"minutes": text})())  # noqa: E731
    assert given(False) is full  # no --minutes: the profile's 60
    assert given(budget_minutes("30")).max_minutes == 30.0
    assert given(budget_minutes(" None ")).max_minutes is None


# ---------------------------------------------------------------- tools/book.py: the first cell


def test_every_notebook_that_runs_code_opens_with_the_first_cell_its_py_holds():
    cell = book.first_cell().source
    name, version = book.release()
    assert name == "annotated-transformer-book"
    assert f'name="{name}", version="{version}"' in cell
    assert max(len(line) for line in cell.splitlines()) <= 100
    for source in chapter_sources():
        text = source.read_text(encoding="utf-8")
        # The .py holds it as sync wrote it (a notebook-only cell), so the two stay twins.
        assert book.with_first_cell(text) == text, f"{source.name}: run `make notebooks`"
        notebook = nbformat.read(book.notebook_for(source), as_version=4)
        code = [c.source for c in notebook.cells if c.cell_type == "code"]
        if not code:
            continue  # the lab notebook runs nothing, so it installs nothing
        assert notebook.cells[0].cell_type == "markdown", source.name  # the title, then the cell
        assert notebook.cells[1].source == cell, f"{source.name}: run `make notebooks`"
        assert code.count(cell) == 1


def test_sync_writes_the_first_cell_once_keeps_its_output_and_twice_is_stable(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(book, "NOTEBOOKS", tmp_path)
    source = book.PACKAGE / "ch10_conclusion.py"
    target = tmp_path / "ch10_conclusion.ipynb"
    book.sync(source)
    notebook = nbformat.read(target, as_version=4)
    assert [c.source for c in notebook.cells].count(book.first_cell().source) == 1
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", text="The book's code: ...\n")]
    book.write_atomically(notebook, target)
    book.sync(source)
    once = target.read_bytes()
    book.sync(source)
    assert target.read_bytes() == once
    again = nbformat.read(target, as_version=4)
    assert [c.source for c in again.cells].count(book.first_cell().source) == 1
    assert again.cells[1].outputs[0].text == "The book's code: ...\n"


def test_sync_keeps_the_slideshow_marks_and_the_outputs_of_the_cells_they_mark(
    tmp_path, monkeypatch
):
    """A chapter's `# %%` line may carry Jupyter's slideshow mark (the slide decks read it):
    sync writes it into the notebook, keeps a marked cell's outputs, and refuses a made-up mark."""
    monkeypatch.setattr(book, "NOTEBOOKS", tmp_path)
    source = tmp_path / "ch10_conclusion.py"
    text = (book.PACKAGE / source.name).read_text(encoding="utf-8")
    text = re.sub(r" slideshow=\{[^}]*\}", "", text)  # the chapter's own marks out: ours in
    code = '# %% tags=["active-ipynb"]\n# from annotated.ch08_wmt'
    assert code in text
    marked = text.replace(
        "# %% [markdown]\n# ## What the book built",
        '# %% [markdown] slideshow={"slide_type": "slide"}\n# ## What the book built',
    ).replace(code, code.replace("]\n", '] slideshow={"slide_type": "-"}\n'))
    source.write_text(marked, encoding="utf-8")
    saved = book.ROOT / "notebooks" / "ch10_conclusion.ipynb"  # with its outputs
    shutil.copy(saved, tmp_path / saved.name)
    book.sync(source)
    notebook = nbformat.read(tmp_path / "ch10_conclusion.ipynb", as_version=4)
    marks = [(c.cell_type, c.metadata.get("slideshow")) for c in notebook.cells]
    assert ("markdown", {"slide_type": "slide"}) in marks
    (table,) = [c for c in notebook.cells if c.metadata.get("slideshow") == {"slide_type": "-"}]
    assert table.outputs and "text/html" in table.outputs[0].data
    assert sum(1 for _, mark in marks if mark) == 2  # the unmarked cells stay unmarked
    source.write_text(marked.replace('"slide_type": "slide"', '"slide_type": "title"'))
    with pytest.raises(SystemExit, match="'title', which is none of"):
        book.sync(source)


def test_the_first_cell_is_part_of_the_code_a_notebook_was_executed_from(monkeypatch):
    # A new release changes the cell, so every notebook must be executed again.
    source = book.PACKAGE / "ch10_conclusion.py"
    before = book.source_digest(source)
    monkeypatch.setattr(book, "release", lambda: ("annotated-transformer-book", "99.0.0"))
    assert "99.0.0" in book.notebook_code(source)
    assert book.source_digest(source) != before


def run_first_cell(tmp_path: Path, version: str, name: str = "annotated-transformer-book", **kw):
    """The first cell, for `name` at `version`, run by this environment's python, from tmp_path.
    kw: `before` (code run first, as earlier cells of a kernel would) and `env`."""
    cell = book.FIRST_CELL.substitute(name=name, version=version)
    if "calls" in kw.get("before", ""):  # the test looks at pip's command instead of running it
        cell = cell.replace("\nfind_or_install_the_book()", "")
        cell += "\ntry:\n    find_or_install_the_book()\nexcept RuntimeError:\n    print(calls)\n"
    return subprocess.run(
        [sys.executable, "-c", kw.get("before", "") + cell],
        cwd=tmp_path,
        env=kw.get("env"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_first_cell_finds_the_installed_book_and_says_so_in_one_line(tmp_path):
    version = metadata.version("annotated-transformer-book")
    result = run_first_cell(tmp_path, version)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"The book's code: annotated-transformer-book {version}.\n"


def test_the_first_cell_uses_a_book_at_another_version_and_says_which(tmp_path):
    version = metadata.version("annotated-transformer-book")
    result = run_first_cell(tmp_path, "0.0.1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"The book's code: annotated-transformer-book {version} "
        "(this notebook was executed with 0.0.1).\n"
    )


def test_the_first_cell_without_anything_to_install_from_says_what_to_run_and_raises(tmp_path):
    # A name no index has, and pip pointed at nothing: what a reader offline would see.
    name = "annotated-transformer-book-never-published"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    result = run_first_cell(tmp_path, "0.1.0", name, env=env)
    assert result.returncode == 1
    assert "No matching distribution found" in result.stdout  # pip's own words, on failure only
    assert result.stdout.splitlines()[-2:] == [
        f"Could not install the book's code, {name}==0.1.0 (pip's words above): that release "
        "may not be on the package index yet, or this machine is offline.",
        "Work in a clone of the book instead (`make lab` there opens the chapters), or install "
        "a clone here (`pip install -e path/to/clone`) and restart the kernel.",
    ]
    assert result.stderr.rstrip().endswith(f"RuntimeError: {name} is not installed")
    assert "During handling" not in result.stderr


def test_the_first_cell_pins_what_the_kernel_imported_and_leaves_out_the_lock(tmp_path):
    before = (
        "import subprocess\nimport numpy\ncalls = []\n"
        "def pip(args, **kw):\n"
        "    calls.append((args, open(args[args.index('-c') + 1]).read().splitlines()))\n"
        "    return subprocess.CompletedProcess(args, 1, '', 'not this time')\n"
        "subprocess.run = pip\n"
    )
    result = run_first_cell(tmp_path, "0.1.0", "annotated-transformer-book-x", before=before)
    assert result.returncode == 0, result.stderr
    ((args, pins),) = eval(result.stdout.splitlines()[-1])
    assert args[:5] == [
        sys.executable,
        "-m",
        "pip",
        "install",
        "annotated-transformer-book-x==0.1.0",
    ]
    assert not any("constraints.txt" in arg for arg in args)
    assert f"numpy=={metadata.version('numpy')}" in pins  # imported: pip must keep it
    assert not [pin for pin in pins if pin.lower().startswith(("torch==", "pandas=="))]


def test_the_first_cell_is_written_into_a_chapter_once_and_replaced_when_it_changes(monkeypatch):
    """sync puts FIRST_CELL under the title's cell, as comments (importing runs nothing); a new
    release replaces it in place; a chapter with no code cell gets none."""
    chapter = "# %% [markdown]\n# # Title\n\n# %%\nx = 1\n"
    once = book.with_first_cell(chapter)
    assert once.startswith("# %% [markdown]\n# # Title\n\n" + book.FIRST_CELL_TAGS)
    assert once.endswith("\n\n# %%\nx = 1\n") and book.with_first_cell(once) == once
    namespace: dict = {}
    exec(compile(once, "chapter.py", "exec"), namespace)  # as `import` runs it
    assert "find_or_install_the_book" not in namespace and namespace["x"] == 1
    cells = jupytext.reads(once, fmt="py:percent").cells
    assert cells[1].source == book.first_cell().source
    monkeypatch.setattr(book, "release", lambda: ("annotated-transformer-book", "9.9.9"))
    again = book.with_first_cell(once)
    assert again.count("find_or_install_the_book(name=") == 1 and 'version="9.9.9"' in again
    prose_only = "# %% [markdown]\n# # Title\n\n# %% [markdown]\n# More.\n"
    assert book.with_first_cell(prose_only) == prose_only


def test_settle_streams_keeps_what_a_terminal_shows_of_a_progress_bar():
    stream = lambda name, text: nbformat.v4.new_output("stream", name=name, text=text)  # noqa: E731
    cell = nbformat.v4.new_code_cell("train()")
    cell.outputs = [
        stream("stdout", "plan: 3 steps\n"),
        stream("stderr", "\r  0%|     | 0/3"),
        stream("stderr", "\r 33%|█    | 1/3"),
        stream("stderr", "\r100%|█████| 3/3"),
        stream("stderr", "\n"),
        stream("stdout", "done\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=1),
        stream("stdout", "after\n"),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("text")])
    book.settle_streams(notebook)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in cell.outputs] == [
        ("stream", "stdout", "plan: 3 steps\n"),
        ("stream", "stderr", "100%|█████| 3/3\n"),
        ("stream", "stdout", "done\n"),
        ("execute_result", None, None),
        ("stream", "stdout", "after\n"),
    ]


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
