"""CONTRIBUTING.md, the maintainers' guide, agrees with the tree it maps and the tests it describes.

- **Where things live.** Its tables headed `| where | what lives there |` name every module of the
  book's package (each `annotated/*.py`, each file of its subpackages and each subpackage), every
  script and folder of `tools/`, and every script of `benchmarks/` and `site/`; and every path
  they name exists (or is build output git ignores, such as `_build/`). A cell's first path sets
  the folder for the bare names after it (`annotated/base/datasets.py`, `files.py`); `NN` in a name
  stands for two digits and `topic` for a word (`annotated/chNN_topic.py`). A folder's row
  (`annotated/`) names the folder, not each file in it.
- **What it says about the tests.** The sizes tests/test_layout.py holds, the tests of `make
  test`'s reader's lane (the Makefile's READER_TESTS), the chapters each nbval run executes
  (PORTABLE_CHAPTERS and the others), and `make unit`'s time, stated once.

Each check is a function of the guide's text, so that a test here can show it fail on a text
that has gone wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_layout import MAX_CODE_LINE, MAX_FUNCTION_LINES, MAX_NOTEBOOK_CODE_LINES

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "CONTRIBUTING.md"
WHERE = "| where | what lives there |"


def guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


# --- where things live --------------------------------------------------------------------------


def named_paths(text: str) -> list[str]:
    """Every path the first column of the guide's "where" tables names."""
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() != WHERE:
            continue
        for row in lines[i + 2 :]:
            if not row.strip().startswith("|"):
                break
            folder = ""
            for name in re.findall(r"`([^`]+)`", row.strip().strip("|").split("|")[0]):
                if "/" in name or name.startswith("."):
                    folder = name if name.endswith("/") else name.rpartition("/")[0] + "/"
                    found.append(name)
                else:
                    found.append(folder + name)
    return found


def _pattern(name: str) -> re.Pattern:
    """A named path as a regular expression: NN two digits, `topic` a word, `*` any name."""
    escaped = re.escape(name.rstrip("/"))
    escaped = escaped.replace("NN", r"\d\d").replace("topic", r"[a-z0-9_]+")
    return re.compile(escaped.replace(r"\*", r"[^/]*") + ("(/.*)?" if name.endswith("/") else ""))


def _ignored_by_git() -> set[str]:
    """The .gitignore lines that name a path (build output, runs): named, but not in a clone."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def _own_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def what_the_tables_must_name(root: Path = ROOT) -> list[str]:
    """The files and folders the "where" tables cover, relative to the checkout (folders end
    with /): the package's modules and subpackages, tools/, benchmarks/ and site/'s scripts."""
    package = root / "annotated"
    modules = [p for p in package.rglob("*.py") if "__pycache__" not in p.parts]
    folders = _own_folders(package) + _own_folders(root / "tools")
    scripts = [p for name in ("tools", "benchmarks", "site") for p in (root / name).glob("*.py")]
    found = [str(p.relative_to(root)) for p in sorted(modules + scripts)]
    return found + [f"{p.relative_to(root)}/" for p in folders]


def unnamed(text: str, root: Path = ROOT) -> list[str]:
    """What the tables should name and do not. A file is named by its path or a pattern (a
    folder's row does not name each file in it); a folder by its path or a path inside it."""
    patterns = [_pattern(name) for name in named_paths(text) if not name.endswith("/")]
    left = []
    for path in what_the_tables_must_name(root):
        inside = [n for n in named_paths(text) if n.startswith(path)] if path.endswith("/") else []
        if not inside and not any(p.fullmatch(path.rstrip("/")) for p in patterns):
            left.append(path)
    return left


def named_but_missing(text: str, root: Path = ROOT) -> list[str]:
    """What the tables name that the tree does not hold (build output git ignores aside)."""
    missing = []
    for name in named_paths(text):
        if name in _ignored_by_git():
            continue
        wildcard = name.rstrip("/").replace("NN", "[0-9][0-9]").replace("topic", "*")
        pattern = _pattern(name)
        found = [p for p in root.glob(wildcard) if pattern.fullmatch(str(p.relative_to(root)))]
        if not found or (name.endswith("/") and not found[0].is_dir()):
            missing.append(name)
    return missing


def test_the_where_tables_name_every_module_and_script():
    assert named_paths(guide()), f"no table headed {WHERE!r} in CONTRIBUTING.md"
    left = unnamed(guide())
    assert not left, (
        f"CONTRIBUTING.md's tables of where things live do not name {left}: add a row that says "
        "what each is"
    )


def test_every_path_the_where_tables_name_exists():
    missing = named_but_missing(guide())
    assert not missing, f"CONTRIBUTING.md names {missing}, which the checkout does not hold"


def test_the_where_check_sees_a_row_taken_out():
    text = guide()
    where_table = text[text.index(WHERE) :]  # not the table of what each module makes stale
    row = next(
        line
        for line in where_table.splitlines()
        if line.startswith("  | `annotated/base/devices.py`")
    )
    assert unnamed(text.replace(row + "\n", "")) == ["annotated/base/devices.py"]
    assert named_but_missing(
        text.replace("`annotated/base/devices.py`", "`annotated/gone.py`")
    ) == ["annotated/gone.py"]
    # A bare name after a path is in that path's folder; a pattern stands for its files.
    paths = named_paths(
        f"{WHERE}\n|---|---|\n| `tools/a.py`, `b.py` | x |\n| `x/chNN_topic.py` | y |"
    )
    assert paths == ["tools/a.py", "tools/b.py", "x/chNN_topic.py"]
    assert _pattern(paths[2]).fullmatch("x/ch07_multi30k.py")


# --- what the guide says about the tests --------------------------------------------------------


def makefile() -> str:
    return (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")


def make_variable(name: str) -> list[str]:
    return re.search(rf"^{name}\s*:=(.*)$", makefile(), re.M).group(1).split()


def stated(text: str, patterns: dict[str, str], read) -> dict:
    """What the guide states: for each pattern found (its spaces match any white space), `read`
    of its first group."""
    return {
        what: read(match.group(1))
        for what, pattern in patterns.items()
        if (match := re.search(pattern.replace(" ", r"\s+"), text))
    }


def stated_limits(text: str) -> dict[str, int]:
    """The sizes the guide says tests/test_layout.py holds."""
    found = {
        "function lines": r"no function in `annotated/`, `tools/` or `benchmarks/` over (\d+)\s+lines",
        "notebook code lines": r"no chapter notebook over (\d+) lines of code",
        "code line characters": r"holds the code's (\d+) characters a line",
    }
    return stated(text, found, int)


def test_the_guide_states_the_layout_tests_limits():
    assert stated_limits(guide()) == {
        "function lines": MAX_FUNCTION_LINES,
        "notebook code lines": MAX_NOTEBOOK_CODE_LINES,
        "code line characters": MAX_CODE_LINE,
    }


def commands_row(text: str, target: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| `make {target}` |"))


def stated_reader_tests(text: str) -> set[str]:
    """The tests the `make test` row puts in the reader's lane."""
    lane = commands_row(text, "test").partition("`make test-reader`")[2]
    return set(re.findall(r"tests/test_\w+\.py", lane))


def test_the_readers_lane_is_the_makefiles():
    assert stated_reader_tests(guide()) == set(make_variable("READER_TESTS"))


def chapters(spec: str) -> set[int]:
    """'0-4, 6, 10 and 11' or '5 and 7 to 9' as the chapter numbers they name."""
    found = set()
    for first, last in re.findall(r"(\d+)(?:\s*(?:-|–|to)\s*(\d+))?", spec):
        found.update(range(int(first), int(last or first) + 1))
    return found


def makefile_chapters() -> tuple[set[int], set[int]]:
    """(the chapters nbval runs under other kernels, the others): PORTABLE_CHAPTERS, expanded."""
    wildcard = " ".join(make_variable("PORTABLE_CHAPTERS"))
    patterns = re.fullmatch(r"\$\(wildcard (.*)\)", wildcard).group(1).split()
    portable = {path for pattern in patterns for path in ROOT.glob(pattern)}
    every = set((ROOT / "notebooks").glob("ch[0-9][0-9]_*.ipynb"))
    number = lambda paths: {int(p.name[2:4]) for p in paths}  # noqa: E731
    return number(portable), number(every - portable)


def stated_nbval_chapters(text: str) -> dict[str, set[int]]:
    found = {
        "make test, Python lane": r"on the chapters that train on data, ([\d\s,andto-]+)\)",
        "make nbval-kernels": r"nbval on the chapters that need no data \(([\d\s,andto-]+)\)",
        "same outputs": r"it executes chapters ([\d\s,andto-]+?) \(those that need no",
    }
    return stated(text, found, chapters)


def test_the_chapters_each_nbval_run_executes_are_the_makefiles():
    portable, data = makefile_chapters()
    assert stated_nbval_chapters(guide()) == {
        "make test, Python lane": data,
        "make nbval-kernels": portable,
        "same outputs": portable,
    }


# A run's length: "19 minutes", "about two minutes", "a minute and a half"; a slow test's threshold
# ("ten seconds or more") is not one.
DURATION = re.compile(
    r"(?:a minute and a half|\b(?:an?|one|two|three|four|five|ten|[\d.]+)\s+"
    r"(?:\w+\s+)?(?:seconds?|minutes?|hours?)\b)(?!\s+or more)"
)


def statements(text: str) -> list[str]:
    """The guide's table rows and its prose sentences."""
    found, prose = [], []
    for line in text.splitlines():
        (found if line.lstrip().startswith("|") else prose).append(line)
    found += re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", " ".join(prose))
    return found


def stated_times(text: str, target: str) -> list[str]:
    """Each length of run the guide gives `make <target>`: a duration whose nearest `make`
    command before it, in its row or sentence, is that target."""
    times = []
    for statement in statements(text):
        for duration in DURATION.finditer(statement):
            before = re.findall(r"`make ([a-z-]+)", statement[: duration.start()])
            if before and before[-1] == target:
                times.append(duration.group())
    return times


def test_make_units_time_is_stated_once():
    times = stated_times(guide(), "unit")
    assert len(times) == 1, f"CONTRIBUTING.md gives `make unit` {len(times)} times: {times}"
