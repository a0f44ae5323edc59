"""The book as a project: setup files agree, notebooks match their chapters, imports are silent."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
from tools import book
from tools.chapters import chapter_sources, is_chapter_source, module_name, package_modules

CHAPTERS = chapter_sources()


def _requirements(lines) -> dict[str, str]:
    """name -> normalized requirement string."""
    found = {}
    for line in lines:
        requirement = Requirement(line)
        found[requirement.name.lower()] = str(requirement)
    return found


def _declared() -> dict[str, str]:
    """Every dependency pyproject.toml declares, extras included: name -> requirement."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared += extra
    return _requirements(declared)


def _lock() -> dict[str, str]:
    """constraints.txt: name -> pinned version."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"constraints.txt must pin exactly: {line}"
            pins[requirement.name.lower()] = specifier.version
    return pins


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    pip_section = next(
        entry["pip"]
        for entry in yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
        if isinstance(entry, dict)
    )
    conda = _requirements(line for line in pip_section if not line.startswith("-"))
    assert "-e ." in pip_section, "environment.yml must install the book itself"
    ours = _declared()
    assert set(conda) == set(ours), (
        f"only in environment.yml: {set(conda) - set(ours)}; only in pyproject: {set(ours) - set(conda)}"
    )
    torch_pin = re.search(r"^TORCH\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    for name, spec in ours.items():
        expected = torch_pin if name == "torch" else spec
        assert conda[name] == expected, (
            f"{name}: environment.yml says {conda[name]}, the pip path says {expected}"
        )
    # The Makefile's pinned torch must satisfy pyproject's range, or pip would replace it.
    pinned = Requirement(torch_pin)
    assert Requirement(ours["torch"]).specifier.contains(next(iter(pinned.specifier)).version)


def test_make_setup_and_environment_yml_both_follow_the_lock_file():
    makefile = (ROOT / "Makefile").read_text()
    setup = makefile[makefile.index("$(STAMP): pyproject.toml") :].split("\n\n")[0]
    assert "$(LOCK)" in setup.splitlines()[0], "the install must be redone when the lock changes"
    assert "$(PY) -m pip install -c $(LOCK) -e '.[dev,docs]'" in setup, setup
    assert re.search(r"^LOCK\s*:=\s*constraints.txt$", makefile, re.M)
    pip_section = next(
        entry["pip"]
        for entry in yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
        if isinstance(entry, dict)
    )
    assert "-c constraints.txt" in pip_section, "environment.yml must follow the lock file"
    assert (ROOT / "constraints.txt").exists()


def test_the_lock_pins_every_dependency_within_pyprojects_ranges():
    pins, declared = _lock(), _declared()
    missing = sorted(set(declared) - set(pins))
    assert not missing, f"constraints.txt pins none of {missing}: run `make lock`"
    for name, requirement in declared.items():
        assert Requirement(requirement).specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {requirement}"
        )
    torch_pin = re.search(r"^TORCH\s*\?=\s*torch==(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert pins["torch"] == torch_pin.group(1), "the lock and the Makefile must pin the same torch"
    assert "annotated" not in pins, "the book itself is installed from the folder, never pinned"


def test_the_installed_packages_are_the_locked_versions():
    from importlib.metadata import PackageNotFoundError, version

    wrong = {}
    for name, pinned in _lock().items():
        try:
            installed = version(name).split("+")[0]
        except PackageNotFoundError:
            continue  # an extra this environment does not have (JupyterLab)
        if installed != pinned:
            wrong[name] = f"{installed} installed, {pinned} locked"
    assert not wrong, f"run `make setup` (or `make lock` to move the pins): {wrong}"


@pytest.mark.slow
def test_every_chapter_has_an_executed_up_to_date_notebook():
    assert [c.stem for c in CHAPTERS][:3] == ["ch00_preface", "ch01_attention", "ch02_model"]
    for source in CHAPTERS:
        target = book.notebook_for(source)
        assert target.exists(), f"{target} is missing: run `make notebooks` then `make book`"
        saved = nbformat.read(target, as_version=4)
        cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]  # noqa: E731
        assert cells(book.read_chapter(source)) == cells(saved), (
            f"{target} differs from {source}: run `make book`"
        )
        unexecuted = [
            i
            for i, c in enumerate(saved.cells)
            if c.cell_type == "code" and c.execution_count is None
        ]
        assert not unexecuted, f"{target}: cells {unexecuted} were never executed: run `make book`"
        assert not book.is_stale(source), (
            f"{target} was executed from an older {source.name}: run `make book`"
        )
        errors = [
            o
            for c in saved.cells
            if c.cell_type == "code"
            for o in c.outputs
            if o.output_type == "error"
        ]
        assert not errors, f"{target} was saved with an error output"


def test_stale_detection_follows_imported_chapters(tmp_path, monkeypatch):
    # ch02 imports ch01: editing ch01 must make ch02 stale, and leave ch00's digest to its own imports.
    deps = {module_name(p) for p in book.dependencies(book.PACKAGE / "ch02_model.py")}
    assert {"annotated.ch02_model", "annotated.ch01_attention", "annotated.figures"} <= deps
    assert "annotated.ch00_preface" not in deps


def test_a_module_in_a_subpackage_is_a_dependency_with_its_package(tmp_path):
    # Importing a chapter's chart module runs the figures package too: both are dependencies.
    source = tmp_path / "reader.py"
    source.write_text(
        "from annotated.figures.ch01_attention import walk_chart\n"
        "from annotated.exercises import check\n"
        "from annotated import ch02_model\n"
    )
    found = {module_name(path) for path in book._imported_modules(source)}
    assert (
        found
        == {
            "annotated",
            "annotated.figures",
            "annotated.figures.ch01_attention",
            "annotated.exercises",
            "annotated.ch02_model",
        }
        or not (book.PACKAGE / "figures" / "ch01_attention.py").exists()
    )
    modules = package_modules()
    assert modules["annotated.figures"] == book.PACKAGE / "figures" / "__init__.py"
    assert "annotated.nothing_here" not in modules
    # Chapters are chNN_topic.py; a support module whose name starts with "ch" is not one.
    assert is_chapter_source(book.PACKAGE / "ch07_multi30k.py")
    assert not is_chapter_source(book.PACKAGE / "checkpoints.py")


def test_imports_in_notebook_only_cells_are_dependencies_too():
    # ch10 imports chapter 8's table_2 in a notebook-only cell, never at module level.
    deps = {module_name(p) for p in book.dependencies(book.PACKAGE / "ch10_conclusion.py")}
    assert "annotated.ch08_wmt" in deps


def test_wmt_depends_on_the_shared_pieces_not_on_the_multi30k_chapter():
    deps = {module_name(p) for p in book.dependencies(book.PACKAGE / "ch08_wmt.py")}
    assert {"annotated.ch05_text", "annotated.ch06_decoding", "annotated.training.runs"} <= deps
    assert "annotated.ch07_multi30k" not in deps
    # Chapter 7's training curves serve chapter 8 too: their module is a dependency, the chapter not.
    assert "annotated.figures.ch07_multi30k" in deps


def test_an_imported_chapters_notebook_cells_are_not_dependencies():
    # Chapter 2 imports chapter 1's module, which runs none of chapter 1's figures or exercises:
    # only chapter 1's notebook does.
    deps = {module_name(p) for p in book.dependencies(book.PACKAGE / "ch02_model.py")}
    assert "annotated.ch01_attention" in deps
    assert not {"annotated.figures.ch01_attention", "annotated.exercises.ch01_attention"} & deps


@pytest.mark.parametrize("chapter", ["ch00_preface", "ch01_attention", "ch02_model"])
def test_the_first_chapters_depend_on_a_dozen_files_at_most(chapter):
    deps = book.dependencies(book.PACKAGE / f"{chapter}.py")
    assert len(deps) <= 12, [module_name(p) for p in deps]


def _stale_after_a_code_line(tmp_path, monkeypatch, module: str) -> list[str]:
    """The chapters whose notebook a code line added to `module` makes stale, in a copy."""
    package = tmp_path / "annotated"
    shutil.copytree(book.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    monkeypatch.setattr(book, "PACKAGE", package)
    before = {source.stem: book.source_digest(source) for source in chapter_sources(book.PACKAGE)}
    with (package / module).open("a", encoding="utf-8") as handle:
        handle.write("\nPROBE = 1\n")
    return [
        s.stem for s in chapter_sources(book.PACKAGE) if book.source_digest(s) != before[s.stem]
    ]


@pytest.mark.parametrize(
    ("module", "at_most"),
    [
        ("exercises/ch06_decoding.py", ["ch06_decoding"]),
        ("figures/ch01_attention.py", ["ch01_attention", "ch07_multi30k"]),
        ("export/browser_model.py", []),
        ("training/runs.py", ["ch07_multi30k", "ch08_wmt", "ch09_table3", "ch10_conclusion"]),
        ("translate.py", []),
    ],
)
def test_a_code_change_makes_stale_only_the_notebooks_that_run_it(
    tmp_path, monkeypatch, module, at_most
):
    stale = _stale_after_a_code_line(tmp_path, monkeypatch, module)
    if at_most:
        assert stale, f"a code line in {module} made no notebook stale"
    assert set(stale) <= set(at_most), stale


def test_a_change_to_a_module_every_chapter_imports_makes_them_all_stale(tmp_path, monkeypatch):
    # The probe itself: a module under every chapter (the files' module) reaches all but the lab
    # notebook, which runs no code of the book's.
    stale = _stale_after_a_code_line(tmp_path, monkeypatch, "base/files.py")
    assert set(stale) == {s.stem for s in CHAPTERS} - {"ch11_lab_notebook"}


def test_the_maintainers_guide_shows_which_notebooks_each_module_makes_stale():
    # `python -m tools.book reach` prints the table; CONTRIBUTING.md holds it as printed.
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    guide = "\n".join(line.strip() for line in guide.splitlines())
    table = book.stale_table()
    assert table in guide, (
        "CONTRIBUTING.md's table of what each module makes stale differs from the package's: "
        "paste the output of `python -m tools.book reach` in its place"
    )


def test_the_digest_follows_code_and_ignores_prose(tmp_path, monkeypatch):
    package = tmp_path / "annotated"
    package.mkdir()
    chapter = '# %% [markdown]\n# # Chapter 1 - One\n# Prose.\n\n# %%\nfrom annotated.helper import f\n\n# %% tags=["active-ipynb"]\n# f()\n'
    helper = '"""A helper."""\n\n\ndef f():\n    """Say one."""\n    return 1  # a comment\n'
    (package / "ch01_one.py").write_text(chapter)
    (package / "helper.py").write_text(helper)
    monkeypatch.setattr(book, "PACKAGE", package)
    source = package / "ch01_one.py"
    first = book.source_digest(source)

    def digest_after(path, text):
        before = path.read_text()
        path.write_text(text)
        try:
            return book.source_digest(source)
        finally:
            path.write_text(before)

    # Prose: the chapter's markdown, the helper's docstrings and comments.
    assert digest_after(source, chapter.replace("Prose.", "Other prose.")) == first
    assert digest_after(package / "helper.py", helper.replace("Say one.", "Return 1.")) == first
    assert digest_after(package / "helper.py", helper.replace("a comment", "another")) == first
    # Code: the helper's, and the chapter's notebook-only cells too.
    assert digest_after(package / "helper.py", helper.replace("return 1", "return 2")) != first
    assert digest_after(source, chapter.replace("# f()", "# f() + 1")) != first


@pytest.mark.slow
def test_importing_chapters_prints_plots_and_writes_nothing(tmp_path):
    names = ", ".join(f"annotated.{c.stem}" for c in CHAPTERS)
    code = (
        f"import altair as alt\nimport {names}\n"
        "assert alt.renderers.active != 'annotated', 'importing a chapter switched the chart renderer'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_the_readme_is_a_front_door():
    """At most 150 lines; a newcomer finds how to open chapter 1 in Jupyter in its first 40; it
    still names the book's test command, which CI runs."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to its home"
    head = "\n".join(lines[:40])
    assert "make lab" in head and "ch01_attention.ipynb" in head
    assert "make test" in "\n".join(lines)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    for guide in ("CONTRIBUTING.md", "benchmarks/README.md", "LICENSE", "CITATION.cff"):
        assert guide in "\n".join(lines), f"the README should point to {guide}"


def test_the_licence_and_the_citation_agree_with_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert project["license"] == "MIT" and licence.startswith("MIT License\n")
    holder = project["maintainers"][0]["name"]
    assert re.search(rf"^Copyright \(c\) \d{{4}} {re.escape(holder)}$", licence, re.M), holder
    assert project["license-files"] == ["LICENSE"]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["message"]
    assert cff["version"] == project["version"] and cff["license"] == project["license"]
    assert [a["name"] for a in cff["authors"]] == [holder]
    assert project["description"].startswith(cff["title"])
    # The paper is the first reference, its authors as the README's credits name them.
    (paper,) = [r for r in cff["references"] if r["title"] == "Attention Is All You Need"]
    names = [f"{a['given-names']} {a['family-names']}" for a in paper["authors"]]
    credits = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"The paper: {', '.join(names[:-1])} and {names[-1]}, *Attention" in credits
    assert paper["year"] == 2017
    # The data's own terms are written down, for each data set.
    terms = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    assert "## Terms" in terms and "Multi30k" in terms and "wmt14-toy-ende" in terms


def test_notebooks_carry_no_volatile_metadata():
    for source in CHAPTERS:
        saved = nbformat.read(book.notebook_for(source), as_version=4)
        assert set(saved.metadata) <= {"kernelspec", "language_info", "annotated"}
        # Only the site's tags survive (hide-input folds an exercise's solution), and the
        # slideshow marks the slide decks read.
        assert all(set(c.metadata) <= {"tags", "slideshow"} for c in saved.cells)
        assert all(set(c.metadata.get("slideshow", {})) <= {"slide_type"} for c in saved.cells)
        assert {t for c in saved.cells for t in c.metadata.get("tags", [])} <= {"hide-input"}


@pytest.mark.parametrize("source", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_chapter_sources_are_jupytext_percent_files(source):
    text = source.read_text()
    # The title cell may carry the slideshow mark that opens the chapter's slides.
    text = text.replace(' slideshow={"slide_type": "slide"}', "", 1)
    assert text.startswith(("# %% [markdown]\n# # Chapter", "# %% [markdown]\n# # Appendix")), (
        f"{source.name} should open with its title cell"
    )


def undefined_names(code: str, folder: Path) -> list[str]:
    """ruff's F821 (undefined name) findings in `code`, read as one script."""
    script = folder / "notebook.py"
    script.write_text(code, encoding="utf-8")
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "F821",
         "--output-format", "concise", str(script)],
        capture_output=True, text=True,
    )  # fmt: skip
    return [line for line in found.stdout.splitlines() if "F821" in line]


def test_every_name_a_notebook_uses_is_imported_or_defined(tmp_path):
    # An import that only notebook-only cells use looks unused in the .py (those cells are
    # comments there), and a linter's fix can delete it: the notebook then fails on its first use.
    missing = {}
    for source in chapter_sources():
        code = book.notebook_code(source).replace("\n\0", "\n\n")
        code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("%"))
        if found := undefined_names(code, tmp_path):
            missing[source.stem] = found
    assert not missing, missing
    assert undefined_names("print(never_defined)\n", tmp_path), "the check must see a missing name"


def readme_sections_named(text: str) -> list[str]:
    """The README sections a comment names, `README, "Title"` or `README's "Title"`, a title
    that runs over two comment lines joined."""
    joined = " ".join(re.sub(r"^\s*#", "", line) for line in text.splitlines())
    return re.findall(r"\bREADME(?:\.md)?(?:,|'s)?\s+\"([^\"]+)\"", " ".join(joined.split()))


def test_the_readme_sections_the_setup_files_name_exist():
    assert readme_sections_named('# see the README, "On a GPU,\n# or on a CPU"') == [
        "On a GPU, or on a CPU"
    ]
    readme = re.sub(r"```.*?```", "", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", readme, re.M)  # not a code block's comments
    for name in ("Makefile", "pyproject.toml", "environment.yml"):
        for section in readme_sections_named((ROOT / name).read_text(encoding="utf-8")):
            assert section in headings, f'{name} names the README\'s "{section}": {headings}'


def test_environment_ymls_cpu_steps_make_the_environment_it_describes():
    """The commands at the top of environment.yml (a CPU torch first, then the file) name the
    file's environment, channel, Python and torch, and PyTorch's CPU index."""
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    env = yaml.safe_load(text)
    steps = [line[4:].split() for line in text.splitlines() if line.startswith("#   ")]
    create, activate, torch_line, update = steps
    (python,) = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python=")]
    assert create[:2] == ["conda", "create"] and ["-n", env["name"]] == create[2:4], create
    assert {"pip", python} <= set(create), create
    for channel in env["channels"]:
        assert f"-c {channel}" in " ".join(create), create
    assert activate == ["conda", "activate", env["name"]]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    requirements = [Requirement(line) for line in pip_section if not line.startswith("-")]
    (torch,) = [str(r) for r in requirements if r.name == "torch"]
    assert torch_line == [
        "pip",
        "install",
        torch,
        "--index-url",
        "https://download.pytorch.org/whl/cpu",
    ]
    assert update == ["conda", "env", "update", "-f", "environment.yml"]
