"""The book's public address, written once in pyproject.toml, and what is made from it: the
README's badges (tools/publish.py); the site's links are tests/test_site.py's. And the check that
a release tag names the version."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import publish  # noqa: E402  (tools/publish.py)

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
    # Nothing else in the README moved either way.
    assert with_address.replace(block + "\n", "") == without
    if not publish.booksite.repository():
        assert without == publish.README.read_text(encoding="utf-8")


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


def test_a_release_tag_must_name_pyprojects_version():
    version = publish.project()["version"]
    assert publish.tag_problem(f"v{version}") is None
    for wrong in (version, f"v{version}.1", "v0.0.0-rc"):
        assert "pyproject.toml's version" in publish.tag_problem(wrong)
    assert publish.main(["tag", f"v{version}"]) == 0
    assert publish.main(["tag", "v0.0.0"]) == 1
