"""The book's public address, written once in pyproject.toml, and what is made from it: the
README's badges (tools/publish.py); the site's links are tests/test_site.py's. And the check that
a release tag names the version."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools import publish

REPOSITORY = "https://github.com/example-owner/annotated-book"  # a dummy public address
URLS = re.compile(r"^\[project\.urls\]\n(?:[^\[\n].*\n)*", re.M)


def pyproject_with(tmp_path: Path, repository: str) -> Path:
    """A copy of pyproject.toml whose [project.urls] is Repository = `repository` ("": none)."""
    text = URLS.sub("", (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    if repository:
        text += f'\n[project.urls]\nRepository = "{repository}"\n'
    path = tmp_path / f"pyproject-{len(repository)}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def badge_block(readme: str) -> list[str]:
    """The lines between the README's badge markers."""
    lines = readme.splitlines()
    return lines[lines.index(publish.BEGIN) + 1 : lines.index(publish.END)]


def test_the_readmes_badges_are_what_pyproject_says():
    readme = publish.README.read_text(encoding="utf-8")
    assert publish.readme_badges() == readme, "run `make badges`"
    block = badge_block(readme)
    if not publish.booksite.repository():
        assert block == [], "no badge while pyproject.toml names no repository"


def test_setting_the_address_brings_the_badges_and_removing_it_takes_them_away(tmp_path):
    name = publish.project()["name"]
    with_address = publish.readme_badges(pyproject_with(tmp_path, REPOSITORY))
    block = "\n".join(badge_block(with_address))
    actions = "https://github.com/example-owner/annotated-book/actions/workflows"
    assert f"[![CI]({actions}/ci.yml/badge.svg)]({actions}/ci.yml)" in block
    assert (
        f"({actions}/site.yml/badge.svg)](https://example-owner.github.io/annotated-book/)" in block
    )
    assert f"(https://img.shields.io/pypi/v/{name})](https://pypi.org/project/{name}/)" in block
    assert (
        "(https://colab.research.google.com/github/example-owner/annotated-book/blob/main/"
        "notebooks/ch01_attention.ipynb)" in block
    )
    assert len(badge_block(with_address)) == 4
    readme = tmp_path / "README.md"
    readme.write_text(with_address, encoding="utf-8")
    without = publish.readme_badges(pyproject_with(tmp_path, ""), readme)
    assert badge_block(without) == []
    # The links to the book's files go with the address, and nothing else in the README moved.
    assert publish.file_links(with_address.replace(block + "\n", ""), "") == without
    if not publish.booksite.repository():
        assert without == publish.README.read_text(encoding="utf-8")


def test_the_readme_links_the_books_files_by_the_repositorys_address_once_there_is_one(tmp_path):
    """The README is also the package's page on PyPI, where a path in the checkout leads nowhere."""
    with_address = publish.readme_badges(pyproject_with(tmp_path, REPOSITORY))
    assert publish.relative_links(with_address) == []
    assert f"]({REPOSITORY}/blob/main/notebooks/ch01_attention.ipynb)" in with_address
    without = publish.readme_badges(pyproject_with(tmp_path, ""))
    paths = publish.relative_links(without)
    assert "notebooks/ch01_attention.ipynb" in paths and "CONTRIBUTING.md" in paths
    assert [path for path in paths if not (ROOT / path).is_file()] == []
    # Only links to the book's files move: addresses elsewhere and anchors stay as they are.
    other = "[a](https://example.org/x) [b](#c) [d](https://github.com/x/y/blob/main/no/such.md)"
    assert publish.file_links(other, REPOSITORY) == other
    assert publish.relative_links("[a](b.md) [c](https://x.org) [d](#e)") == ["b.md"]


def test_the_readme_says_nothing_a_release_would_make_false():
    """Its text is what PyPI shows once a release is out: no word that none is."""
    readme = " ".join(publish.README.read_text(encoding="utf-8").split())
    said = re.findall(
        r"no release[^.]*|not (?:yet )?on the package index|package index yet", readme
    )
    assert said == [], said


def test_a_readme_without_its_markers_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A book\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="one badge block"):
        publish.readme_badges(pyproject_with(tmp_path, REPOSITORY), readme)


def test_an_address_that_is_not_a_github_repository_is_refused_with_what_to_write(tmp_path):
    pyproject = pyproject_with(tmp_path, "https://gitlab.com/owner/name")
    with pytest.raises(ValueError, match="https://github.com/OWNER/NAME.*pyproject.toml"):
        publish.readme_badges(pyproject)


def test_the_site_address_follows_github_pages_rules():
    assert publish.pages_address("https://github.com/Some-Owner/book") == (
        "https://some-owner.github.io/book/"
    )
    assert publish.pages_address("https://github.com/owner/Owner.github.io") == (
        "https://owner.github.io/"
    )


def test_a_release_tag_must_name_pyprojects_version_and_the_readme_link_no_bare_path(
    tmp_path, monkeypatch
):
    version = publish.project()["version"]
    readme = tmp_path / "README.md"
    readme.write_text(publish.readme_badges(pyproject_with(tmp_path, REPOSITORY)), encoding="utf-8")
    assert publish.tag_problem(f"v{version}", readme) is None
    for wrong in (version, f"v{version}.1", "v0.0.0-rc"):
        assert "pyproject.toml's version" in publish.tag_problem(wrong, readme)
    monkeypatch.setattr(publish, "README", readme)
    assert publish.main(["tag", f"v{version}"]) == 0
    assert publish.main(["tag", "v0.0.0"]) == 1
    # Paths in the checkout would lead nowhere on the release's page on PyPI.
    readme.write_text(publish.readme_badges(pyproject_with(tmp_path, "")), encoding="utf-8")
    assert "Repository" in publish.tag_problem(f"v{version}", readme)
    assert publish.main(["tag", f"v{version}"]) == 1


def test_binder_installs_torchs_cpu_build_then_the_book_at_the_locks_versions():
    """mybinder.org builds from binder/ when it exists (the repository's environment.yml, with
    PyPI's CUDA torch, otherwise); its machines have no GPU."""
    binder = ROOT / "binder"
    requirements = [
        line
        for line in (binder / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    torch_pin = re.search(r"^TORCH\s*\?=\s*(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert requirements == [
        "--index-url https://download.pytorch.org/whl/cpu",
        torch_pin.group(1),
    ], "torch alone, the Makefile's version, from PyTorch's CPU index"
    runtime = (binder / "runtime.txt").read_text(encoding="utf-8").strip()
    python = re.fullmatch(r"python-(3\.\d+)", runtime)
    assert python, runtime
    assert (
        f"Programming Language :: Python :: {python.group(1)}" in publish.project()["classifiers"]
    )
    post_build = binder / "postBuild"
    assert post_build.stat().st_mode & 0o111, "Binder runs postBuild only if it is executable"
    commands = [
        line
        for line in post_build.read_text(encoding="utf-8").splitlines()
        if line.startswith("pip ")
    ]
    assert commands == ["pip install --no-cache-dir -c constraints.txt -e ."]
