"""The book installed as a regular package (a class server's setup): it runs, and writes nothing
inside its installation.

The wheel built from this checkout (tests/conftest.py, `dist`) is installed into a fresh virtual
environment outside it; the environment's own packages come from this one's (a `.pth` file), so
nothing is downloaded.
The installation is then made read-only, and a user with an empty home folder trains the smoke
run and translates with it. Running as root, file permissions stop nothing, so the test also
compares every file of the installation before and after: not one may appear or change.
"""

import os
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

# Every test here is slow-marked (an installed book in its own environment):
# `make unit` leaves them to `make test`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)


@pytest.fixture(scope="module")
def installed(tmp_path_factory, dist):
    """(python of a fresh environment with the book's wheel installed, that environment)."""
    scratch = tmp_path_factory.mktemp("install")
    (wheel,) = dist.glob("annotated_transformer_book-*.whl")
    env_dir = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The dependencies: this environment's packages, after the new environment's own.
    (site / "book-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    _read_only(env_dir)
    yield python, env_dir
    for path in [env_dir, *env_dir.rglob("*")]:  # let pytest clean it up
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o200)


def as_a_user(python: Path, tmp_path: Path):
    """(run, work): `run(*args, input=None)` runs the installed book's python with `args` as a
    user with a new, empty home would, from a folder outside the checkout."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    keep = ("PATH", "LANG", "LC_ALL", "ANNOTATED_DATA_DIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), ANNOTATED_THREADS="1")

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [python, *args],
            input=input,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )

    return run, work


def test_the_installed_package_is_not_the_checkout(installed, tmp_path):
    python, env_dir = installed
    run, _ = as_a_user(python, tmp_path)
    where = run(
        "-c",
        "import annotated.base.files as f; print(f.__file__); print(f.in_checkout()); "
        "print(f.runs_dir())",
    )
    out = where.stdout.split()
    assert where.returncode == 0, where.stderr
    assert Path(out[0]).is_relative_to(env_dir) and out[1] == "False"
    assert out[2] == str(tmp_path / "home" / ".local" / "share" / "annotated" / "runs")
    # Chapter 9 reads the Table 3 record the wheel carries inside the package: the checkout's.
    read = run(
        "-c",
        "from annotated import ch09_table3 as c; from annotated.training.sweeps import read_results; "
        "p = c.table3_sweep('class')[1]; print(p.results); print(len(read_results(p.results)))",
    )
    record = read.stdout.split()
    assert read.returncode == 0, read.stderr
    assert (
        Path(record[0]).is_relative_to(env_dir)
        and Path(record[0]).parent == Path(out[0]).parent.parent / "results"
        and Path(record[0]).read_bytes()
        == (ROOT / "annotated" / "results" / "table3.json").read_bytes()
    )
    assert int(record[1]) > 0


@pytest.mark.slow
@pytest.mark.multi30k
def test_a_user_trains_and_translates_with_an_installed_read_only_book(installed, tmp_path):
    python, env_dir = installed
    run, work = as_a_user(python, tmp_path)
    before = _snapshot(env_dir)
    train = run("-m", "annotated.train", "multi30k", "--profile", "smoke", "--no-scores")
    assert train.returncode == 0, train.stderr[-3000:]
    runs = tmp_path / "home" / ".local" / "share" / "annotated" / "runs"
    assert (runs / "multi30k-smoke" / "checkpoint.pt").is_file()
    translate = run(
        "-m", "annotated.translate", input="Ein Hund läuft über die Wiese.\n\nZwei Männer.\n"
    )
    assert translate.returncode in (0, 1), translate.stderr
    assert len(translate.stdout.split("\n")) == 4  # three lines out for three in
    assert "multi30k-smoke" in translate.stderr  # it says which model it fell back to
    assert _snapshot(env_dir) == before, "the book wrote inside its installation"
    assert list(work.iterdir()) == []  # nor into the folder it was started from


def test_translate_without_any_trained_model_uses_the_shipped_one(installed, tmp_path):
    python, _ = installed
    run, _ = as_a_user(python, tmp_path)
    result = run("-m", "annotated.translate", input="Ein Hund läuft.\n")
    assert result.returncode == 0, result.stderr
    # One English line (its exact words may differ in the last bits of another CPU's arithmetic).
    assert result.stdout.count("\n") == 1 and "dog" in result.stdout.lower(), result.stdout
    assert "no trained Multi30k model in" in result.stderr
    assert "using the book's shipped model" in result.stderr
    assert "python -m annotated.train multi30k" in result.stderr


def test_the_installed_package_has_every_module_of_the_checkout(installed, tmp_path):
    # A subpackage left out of pyproject.toml's list installs without its modules: a chapter's
    # notebook would then fail where it imports its charts or its exercises.
    python, _ = installed
    run, _ = as_a_user(python, tmp_path)
    listing = run(
        "-c",
        "import annotated, pathlib; root = pathlib.Path(annotated.__file__).parent; "
        "print('\\n'.join(sorted(str(p.relative_to(root)) for p in root.rglob('*.py'))))",
    )
    installed_modules = set(listing.stdout.split())
    in_checkout = {
        str(p.relative_to(ROOT / "annotated")) for p in (ROOT / "annotated").rglob("*.py")
    }
    assert in_checkout - installed_modules == set()
    assert "figures/ch01_attention.py" in installed_modules
