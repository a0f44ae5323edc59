"""The book as a package a reader installs, and its notebooks as a reader downloads them.

The wheel and the sdist of this checkout are built and checked as `make dist` builds them for a
release (tools/publish.py, `build_dist`: the wheel from the sdist, `twine check` on both; the
fixture `dist` in tests/conftest.py; tests/test_install.py installs the same wheel). Then a fresh
virtual environment gets only what Colab preinstalls (torch, numpy, pandas, altair, ipykernel,
nbclient): not the book, spaCy, sacreBLEU or sentencepiece. Its torch is this environment's, seen through a `.pth` file that
names a folder holding torch alone: installed again, it would copy a gigabyte and a minute and a
half for nothing a test here looks at, and pip leaves a package outside the environment alone.
Chapter notebooks are copied from notebooks/ (the files the site offers for download) into an empty
folder outside the checkout and executed there by nbclient in that environment's kernel, with a
clean environment: no PYTHONPATH, a new HOME (so downloads and runs go to a temporary cache), and
the built wheel offered to pip through PIP_FIND_LINKS, which the first cell does not know about.

* With nothing to install from (PIP_NO_INDEX, no find-links, no pip configuration), the first
  cell prints what to run instead and raises: the notebook stops there.
* Chapter 1 runs to its last cell, its first cell installing the book from the wheel.
* Chapter 7 runs to its last cell with the shipped profile (the model the wheel carries), its
  data from $ANNOTATED_DATA_DIR
  (skipped without it).
* (The README's way in without make, in a clone, is tests/test_readme_install.py's, with the
  helpers here: it runs in make test's other lane.)

Everything here needs the package registry pip is configured with (the book's dependencies):
where it cannot be reached, the tests are skipped with that reason (or fail, where
$ANNOTATED_REQUIRE_ALL asks for every registry and data set: tests/needs.py). pip's own cache is shared
with this machine's, so a second run downloads little.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from needs import missing

from annotated.base.datasets import WMT14_SPLITS, WMT14_TOY_PAIRS

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
NAME, VERSION = PROJECT["name"], PROJECT["version"]
WHEEL_NAME = NAME.replace("-", "_")
# What Colab has preinstalled that the book uses, besides torch; at the lock's versions here.
COLAB = ("numpy", "pandas", "altair", "ipykernel", "nbclient")
NOT_PREINSTALLED = ("annotated-transformer-book", "spacy", "sacrebleu", "sentencepiece")
FIRST_LINE = f"The book's code: {NAME} {VERSION}.\n"
INSTEAD = (
    "Work in a clone of the book instead (`make lab` there opens the chapters), or install a "
    "clone here (`pip install -e path/to/clone`) and restart the kernel."
)

pytestmark = pytest.mark.registry

# Executes a notebook in the environment's own kernel and saves it with its outputs, also when a
# cell fails (exit status 1). Run by the fresh environment's python, from the empty folder. The
# saved outputs are cleared first, so that what is left afterwards is what ran.
DRIVER = """\
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

notebook = nbformat.read(sys.argv[1], as_version=4)
for cell in notebook.cells:
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
where = {"metadata": {"path": "."}}
client = NotebookClient(notebook, timeout=1200, kernel_name="python3", resources=where)
try:
    client.execute()
    failed = 0
except CellExecutionError as error:
    print(str(error)[-3000:], file=sys.stderr)
    failed = 1
nbformat.write(notebook, sys.argv[2])
sys.exit(failed)
"""


def pip(python: Path | str, *args: str, env: dict | None = None, timeout: float = 900):
    return subprocess.run(
        [str(python), "-m", "pip", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _unreachable(scratch: Path) -> str | None:
    """Why pip cannot get a package from its registry now, or None if it can."""
    pinned = next(
        line
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith("tqdm==")
    )
    probe = pip(
        sys.executable,
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--timeout",
        "10",
        "--retries",
        "1",
        "-d",
        str(scratch),
        pinned,
        timeout=120,
    )
    if probe.returncode == 0:
        return None
    tail = (probe.stderr or probe.stdout).strip().splitlines()[-1:]
    return f"the package registry cannot be reached (pip download {pinned}: {' '.join(tail)})"


def _pip_settings() -> dict[str, str]:
    """This machine's pip settings, for a process whose HOME is elsewhere: the PIP_* variables,
    the user's configuration file (its indexes) and pip's cache."""
    settings = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    for config in (config_home / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"):
        if "PIP_CONFIG_FILE" not in settings and config.is_file():
            settings["PIP_CONFIG_FILE"] = str(config)
    cache = pip(sys.executable, "cache", "dir", timeout=60)
    if cache.returncode == 0 and cache.stdout.strip():
        settings.setdefault("PIP_CACHE_DIR", cache.stdout.strip())
    return settings


@dataclass
class Reader:
    """A fresh environment with what Colab preinstalls, the book's built wheel and sdist, and a
    way to run a downloaded notebook there."""

    python: Path
    dist: Path
    scratch: Path
    pip_settings: dict[str, str]

    def env(self, home: Path, offline: bool = False, profile: str = "smoke") -> dict[str, str]:
        """A clean environment: nothing from the checkout importable, HOME empty, and pip offered
        the wheel through PIP_FIND_LINKS (or, offline, pointed at nothing at all)."""
        path = [str(self.python.parent)] + [
            p for p in os.environ["PATH"].split(os.pathsep) if p and not p.startswith(str(ROOT))
        ]
        # The thread settings pass (make test's lanes run torch on one thread each, notebooks too).
        kept = ("LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
        env = {k: os.environ[k] for k in kept if k in os.environ}
        env.update(
            PATH=os.pathsep.join(path),
            HOME=str(home),
            JUPYTER_PATH=str(self.scratch / "jupyter"),
            ANNOTATED_PROFILE=profile,
        )
        if os.environ.get("ANNOTATED_DATA_DIR"):
            env["ANNOTATED_DATA_DIR"] = os.environ["ANNOTATED_DATA_DIR"]
        if offline:
            env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
            return env
        env.update(self.pip_settings)
        env["PIP_FIND_LINKS"] = " ".join([str(self.dist), env.get("PIP_FIND_LINKS", "")]).strip()
        return env

    def run_notebook(
        self, name: str, tmp_path: Path, offline: bool = False, profile="smoke", sentences=None
    ):
        """(exit status, the executed notebook, the driver's stderr) for notebooks/<name>.ipynb,
        downloaded into an empty folder and executed there (with ANNOTATED_PROFILE=profile, and
        ANNOTATED_SENTENCES=sentences where given)."""
        work, home = tmp_path / "downloads", tmp_path / "home"
        work.mkdir()
        home.mkdir()
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", work)
        driver = self.scratch / "execute.py"
        done = tmp_path / "executed.ipynb"
        result = subprocess.run(
            [str(self.python), str(driver), f"{name}.ipynb", str(done)],
            cwd=work,
            env={
                **self.env(home, offline, profile),
                **({"ANNOTATED_SENTENCES": str(sentences)} if sentences else {}),
            },
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.exists(), result.stderr[-3000:]
        return result.returncode, nbformat.read(done, as_version=4), result.stderr

    def has(self, distribution: str) -> bool:
        return pip(self.python, "show", "-q", distribution).returncode == 0


def _see_this_torch(python: Path, torch_only: Path) -> None:
    """Gives the environment of `python` this environment's torch, as if installed there: torch's
    folders linked into `torch_only`, a folder of their own, which a `.pth` file puts on its path
    (pip then counts torch as installed, and installs only what torch itself requires)."""
    torch_only.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    files = metadata.distribution("torch").files or []
    for top in sorted({Path(f).parts[0] for f in files if Path(f).parts[0] != ".."}):
        (torch_only / top).symlink_to(here / top)
    (purelib_of(python) / "colab-torch.pth").write_text(f"{torch_only}\n")


def purelib_of(python: Path) -> Path:
    """The site-packages folder of the environment `python` belongs to."""
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(site)


def _colab_like(venv: Path) -> Path:
    """A new environment holding what Colab preinstalls (and pip), its python returned."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    _see_this_torch(python, venv.parent / "torch-only")
    # torch's own dependencies (sympy, networkx, ...) are installed here, as Colab has them.
    torch = f"torch=={metadata.version('torch').split('+')[0]}"
    constraints = str(ROOT / "constraints.txt")
    installed = pip(python, "install", "-q", "--no-compile", "-c", constraints, torch, *COLAB)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    for name in NOT_PREINSTALLED:
        assert pip(python, "show", "-q", name).returncode != 0, f"{name} must not be preinstalled"
    return python


@pytest.fixture(scope="module")
def reader(tmp_path_factory, dist) -> Reader:
    scratch = tmp_path_factory.mktemp("package")
    if reason := _unreachable(scratch / "probe"):
        missing(reason)
    python = _colab_like(scratch / "venv")
    # The notebooks' kernel, "python3", is this environment's python (JUPYTER_PATH comes first).
    spec = scratch / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "Python 3 (Colab-like)", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    (scratch / "execute.py").write_text(DRIVER)
    return Reader(python, dist, scratch, _pip_settings())


def code_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def printed(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


MAX_WHEEL_BYTES = 30_000_000  # the shipped model included (issue: at most 30 MB)


def test_the_wheel_holds_the_package_and_its_data(reader):
    (wheel,) = reader.dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "annotated/results/table3.json" in names
    assert (
        "annotated/figures/ch01_attention.py" in names
        and "annotated/exercises/__init__.py" in names
    )
    assert not [n for n in names if n.endswith(".lock") or n.endswith(".tmp")]
    # Chapter 7's trained model ships with the book, within the wheel's budget.
    assert {"annotated/model/model.bin", "annotated/model/model.json"} <= set(names)
    assert wheel.stat().st_size <= MAX_WHEEL_BYTES, f"the wheel is {wheel.stat().st_size:,} bytes"
    # Of data/, the wheel carries the book's own data set only (chapter 8's WMT sample), whole.
    sample = [
        f"annotated/data/wmt14-toy-ende/{s}.{lang}.gz"
        for s in WMT14_SPLITS
        for lang in ("en", "de")
    ]
    data = sorted(n for n in names if "/data/" in n)
    assert data == sorted([*sample, "annotated/data/wmt14-toy-ende/README.md"]), data
    meta = zipfile.ZipFile(wheel).read(f"{WHEEL_NAME}-{VERSION}.dist-info/METADATA").decode()
    for field in (
        "Name: annotated-transformer-book",
        "License-Expression: MIT",
        "License-File: LICENSE",
        "Summary: ",
    ):
        assert field in meta
    # The licence travels with both: the wheel's dist-info and the sdist's top folder.
    licence = (ROOT / "LICENSE").read_bytes()
    with zipfile.ZipFile(wheel) as opened:
        assert opened.read(f"{WHEEL_NAME}-{VERSION}.dist-info/licenses/LICENSE") == licence
    (sdist,) = reader.dist.glob(f"{WHEEL_NAME}-{VERSION}.tar.gz")
    with tarfile.open(sdist) as opened:
        member = opened.extractfile(f"{WHEEL_NAME}-{VERSION}/LICENSE")
        assert member is not None and member.read() == licence


def test_with_nothing_to_install_from_the_first_cell_says_what_to_run_and_stops(reader, tmp_path):
    pip(reader.python, "uninstall", "-y", "-q", NAME)  # in case chapter 1 ran first
    status, notebook, _ = reader.run_notebook("ch01_attention", tmp_path, offline=True)
    assert status == 1
    first, *rest = code_cells(notebook)
    assert INSTEAD in printed(first).splitlines()
    errors = [o for o in first.outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "RuntimeError"
    assert all(cell.execution_count is None for cell in rest), "the notebook must stop there"
    assert not reader.has(NAME)


def _executed_to_the_end(notebook: nbformat.NotebookNode) -> None:
    cells = code_cells(notebook)
    assert all(cell.execution_count is not None for cell in cells), "not every cell ran"
    errors = [o for cell in cells for o in cell.outputs if o.output_type == "error"]
    assert not errors, errors[0].get("evalue")


def _installed_from_the_wheel(reader: Reader) -> None:
    """The book in the environment is the built wheel's, installed in its site-packages."""
    shown = pip(reader.python, "show", NAME)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(": ", 1) for line in shown.stdout.splitlines() if ": " in line)
    assert fields["Version"] == VERSION
    site = subprocess.run(
        [str(reader.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(fields["Location"]) == Path(site) and not Path(site).is_relative_to(ROOT)
    (wheel,) = reader.dist.glob("*.whl")
    record = f"{WHEEL_NAME}-{VERSION}.dist-info/RECORD"
    ours = set(zipfile.ZipFile(wheel).read(record).decode().splitlines())
    there = set((Path(site) / record).read_text().splitlines())
    package = {line for line in ours if line.startswith("annotated/")}
    assert package and package <= there, "the installed files are not the wheel's"


def test_chapter_1_downloaded_runs_to_its_end_installing_the_book(reader, tmp_path):
    status, notebook, stderr = reader.run_notebook("ch01_attention", tmp_path)
    assert status == 0, stderr[-3000:]
    first = code_cells(notebook)[0]
    assert printed(first) == FIRST_LINE
    _executed_to_the_end(notebook)
    _installed_from_the_wheel(reader)
    for name in NOT_PREINSTALLED[1:]:
        assert reader.has(name), f"installing the book should have brought {name}"


def test_the_installed_book_reads_chapter_8s_sample_from_its_own_files(reader, tmp_path):
    # No mirror and no checkout: the wheel's package data are the only copy there is.
    (wheel,) = reader.dist.glob("*.whl")
    home = tmp_path / "home"
    home.mkdir()
    env = reader.env(home)
    env.pop("ANNOTATED_DATA_DIR", None)
    installed = pip(reader.python, "install", "-q", str(wheel), env=env)
    assert installed.returncode == 0, installed.stderr[-3000:]
    script = (
        "from annotated.base import datasets\n"
        "for split in datasets.WMT14_SPLITS:\n"
        "    paths = datasets.wmt14_paths(split)\n"
        "    print(split, len(datasets.read_wmt14(split)), paths['en'].parent)\n"
    )
    done = subprocess.run(
        [str(reader.python), "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split(" ", 2) for line in done.stdout.splitlines()]
    assert [(split, int(count)) for split, count, _ in lines] == list(WMT14_TOY_PAIRS.items())
    assert {Path(folder).parts[-3:] for _, _, folder in lines} == {
        ("annotated", "data", "wmt14-toy-ende")
    }
    assert not (home / ".cache").exists(), "nothing downloaded or copied"


def test_chapter_7_downloaded_runs_to_its_end_on_the_shipped_model(reader, tmp_path):
    # A reader without the time to train: the shipped profile loads the model the wheel carries.
    # (The smoke profile's training runs in make test's other lane, under nbval.)
    if not os.environ.get("ANNOTATED_DATA_DIR"):
        missing(
            "chapter 7 reads Multi30k from a local folder here: set ANNOTATED_DATA_DIR "
            "(CI points it at ../shared/data)"
        )
    # It scores the first 100 sentences of each split, where a reader's run scores the 1,014 and
    # 1,000 (ANNOTATED_SENTENCES): the same cells, in a minute instead of four. The whole sets'
    # scores of the shipped model are the benchmark's (make bench-shipped, tests/test_shipped.py).
    status, notebook, stderr = reader.run_notebook(
        "ch07_multi30k", tmp_path, profile="shipped", sentences=100
    )
    assert status == 0, stderr[-3000:]
    assert printed(code_cells(notebook)[0]) == FIRST_LINE
    _executed_to_the_end(notebook)
    _installed_from_the_wheel(reader)
    loaded = next(c for c in code_cells(notebook) if "profile == SHIPPED" in c.source)
    assert printed(loaded).startswith("the book's shipped model: chapter 7's multi30k-full run")
    runs = tmp_path / "home" / ".local" / "share" / "annotated" / "runs"
    assert sorted(p.name for p in (runs / "multi30k-shipped").iterdir()) == [
        "scores.json",
        "vocab.de.json",
        "vocab.en.json",
    ], "only the vocabularies and the scores are written, in the reader's own data folder"
    assert not (runs / "multi30k-full").exists(), "nothing trained"
    scored = json.loads((runs / "multi30k-shipped" / "scores.json").read_text(encoding="utf-8"))
    assert scored["sentences"] == [100, 100], "the scores say how many sentences they are of"
