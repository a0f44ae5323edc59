"""The book's public home and its releases: what the GitHub workflows and the README rely on.

    python -m tools.publish badges [--check]  # the README's badges from pyproject (`make badges`)
    python -m tools.publish dist [FOLDER]     # the wheel and the sdist, built, checked (`make dist`)
    python -m tools.publish tag vX.Y.Z        # fails unless the tag names pyproject's version

It needs nothing beyond Python's standard library (`make badges` and the release workflow's tag
check run it with a bare python3), nor does tools/booksite.py, which it imports.

The repository's public address is written once, as `Repository` in pyproject.toml's
[project.urls] (tools/booksite.py reads it). From it come the README's badges (the block between
BEGIN and END, rewritten here) and the site's links to the repository, Colab and Binder; while it
is unset, neither appears. The README is also the package's page on PyPI, where a link to a file
of the checkout (`notebooks/ch01_attention.ipynb`) leads nowhere: `make badges` writes its links to
the book's files as addresses in the repository once it has one (and back as paths when it is
removed), and a release is refused while any is still a bare path.
`tests/test_publish.py` holds the README to what pyproject.toml says.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tools import booksite  # the address, and the chapters' Colab links

ROOT = Path(__file__).resolve().parent.parent

README = ROOT / "README.md"
WORKFLOWS = ROOT / ".github" / "workflows"
CI_WORKFLOW = "ci.yml"  # make test on every push to main and every pull request
SITE_WORKFLOW = "site.yml"  # the site and the PDF, deployed to GitHub Pages from main
RELEASE_WORKFLOW = "release.yml"  # on a tag vX.Y.Z: the package index, and the PDF on the release
BEGIN = "<!-- badges: written by `make badges` from pyproject.toml's [project.urls] Repository -->"
END = "<!-- end of badges -->"
FIRST_CHAPTER = "ch01_attention.ipynb"  # the chapter the README's Colab badge opens
INLINE_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")  # [text](target)
# A file's address in a GitHub repository: https://github.com/OWNER/NAME/blob/BRANCH/PATH
IN_A_REPOSITORY = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[\w.-]+/(?P<path>[^\s#]+)")


def project(pyproject: Path | None = None) -> dict:
    """pyproject.toml's [project] table."""
    text = (pyproject or booksite.PYPROJECT).read_text(encoding="utf-8")
    return tomllib.loads(text)["project"]


def pages_address(repository: str) -> str:
    """Where GitHub Pages serves the site of https://github.com/OWNER/NAME."""
    owner, name = booksite.owner_and_name(repository)
    if name.lower() == f"{owner.lower()}.github.io":  # the owner's own site, served at the root
        return f"https://{name.lower()}/"
    return f"https://{owner.lower()}.github.io/{name}/"


def badges(repository: str, package: str) -> list[str]:
    """The README's badge lines for the book at `repository` (none for ""): CI's state, the site,
    the release on the package index, and chapter 1 in Colab."""
    if not repository:
        return []
    owner, name = booksite.owner_and_name(repository)
    actions = f"https://github.com/{owner}/{name}/actions/workflows"
    colab = dict(booksite.launch_links(repository, FIRST_CHAPTER))["Open in Colab"]
    return [
        f"[![CI]({actions}/{CI_WORKFLOW}/badge.svg)]({actions}/{CI_WORKFLOW})",
        f"[![The site]({actions}/{SITE_WORKFLOW}/badge.svg)]({pages_address(repository)})",
        f"[![PyPI](https://img.shields.io/pypi/v/{package})](https://pypi.org/project/{package}/)",
        f"[![Open chapter 1 in Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab})",
    ]


def with_badges(readme: str, lines: list[str]) -> str:
    """The README's text with `lines` between its BEGIN and END markers, in place of what was."""
    pattern = re.compile(rf"^{re.escape(BEGIN)}\n(?:.*\n)*?{re.escape(END)}$", re.M)
    if len(pattern.findall(readme)) != 1:
        raise SystemExit(f"README.md must hold one badge block, from\n{BEGIN}\nto\n{END}")
    block = "\n".join([BEGIN, *lines, END])
    return pattern.sub(lambda _: block, readme)


def file_links(readme: str, repository: str) -> str:
    """The README's text with each link to a file of the book (a path in the checkout, or that
    file's address in a GitHub repository) made its address in `repository`, on the branch the
    site's launch links use, or its path for "" (no repository yet)."""

    def rewrite(found: re.Match) -> str:
        target = found["target"]
        in_repository = IN_A_REPOSITORY.fullmatch(target)
        if in_repository and (ROOT / in_repository["path"]).is_file():
            path = in_repository["path"]
        elif not re.match(r"[a-z][a-z0-9+.-]*:|#", target) and (ROOT / target).is_file():
            path = target
        else:
            return found.group(0)  # an address elsewhere, or an anchor on the page
        if repository:
            owner, name = booksite.owner_and_name(repository)
            path = f"https://github.com/{owner}/{name}/blob/{booksite.LAUNCH_BRANCH}/{path}"
        return f"]({path})"

    return INLINE_LINK.sub(rewrite, readme)


def relative_links(readme: str) -> list[str]:
    """The README's link targets that are paths (broken on the package index): neither an
    address (https:, mailto:...) nor an anchor on the page."""
    targets = [found["target"] for found in INLINE_LINK.finditer(readme)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def readme_badges(pyproject: Path | None = None, readme: Path = README) -> str:
    """The README as pyproject.toml's address and package name make it: its badges and its links
    to the book's files."""
    found = project(pyproject)
    address = booksite.repository(pyproject)
    text = with_badges(readme.read_text(encoding="utf-8"), badges(address, found["name"]))
    return file_links(text, address)


def build_dist(folder: Path) -> tuple[Path, Path]:
    """The wheel and the sdist of this checkout, built into `folder` (emptied first) and checked:
    the wheel is built from the sdist (so the sdist holds what building needs), with this
    environment's setuptools (--no-isolation: the locked one, which `build` checks against
    pyproject.toml's requirement), and `twine check --strict` passes both. `make dist` and the
    package tests (tests/conftest.py) build with this, and a release publishes what it built."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(folder), str(ROOT)]
    built = subprocess.run(command, capture_output=True, text=True, timeout=900)
    said = built.stdout[-3000:] + built.stderr[-3000:]
    if built.returncode != 0:
        raise RuntimeError(f"python -m build failed:\n{said}")
    # A folder of the package missing from pyproject.toml's `packages` would be left out.
    if "would be ignored" in built.stdout + built.stderr:
        raise RuntimeError(f"part of the package would be left out:\n{said}")
    found = project()
    stem = f"{found['name'].replace('-', '_')}-{found['version']}"
    wheels = list(folder.glob(f"{stem}-py3-none-any.whl"))
    sdists = list(folder.glob(f"{stem}.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1 or len(list(folder.iterdir())) != 2:
        raise RuntimeError(f"expected {stem}'s wheel and sdist, found {sorted(folder.iterdir())}")
    twine = [sys.executable, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])]
    checked = subprocess.run(twine, capture_output=True, text=True, timeout=300)
    if checked.returncode != 0 or checked.stdout.count("PASSED") != 2:
        raise RuntimeError(f"twine check failed:\n{checked.stdout}{checked.stderr}")
    return wheels[0], sdists[0]


def tag_problem(tag: str, readme: Path | None = None) -> str | None:
    """Why `tag` may not publish a release (None when it may): it must be v + pyproject's version,
    the version every notebook's first cell installs (tools/book.py writes it there), and the
    README, the release's page on the package index, may link no file by a bare path."""
    version = project()["version"]
    if tag != f"v{version}":
        return (
            f"the tag {tag!r} is not v{version}, pyproject.toml's version: raise the version, "
            "re-execute the notebooks (`make execute`), commit, and tag that"
        )
    if bare := relative_links((readme or README).read_text(encoding="utf-8")):
        return (
            f"README.md, the package's page on PyPI, links {len(set(bare))} files by paths that "
            f"lead nowhere there ({min(bare)}, ...): set Repository in pyproject.toml's "
            "[project.urls] and run `make badges`, which makes them addresses in the repository"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    badge = commands.add_parser("badges", help="write the README's badges from pyproject.toml")
    badge.add_argument("--check", action="store_true", help="only say whether they are current")
    dist = commands.add_parser("dist", help="build and check the wheel and the sdist")
    dist.add_argument("folder", nargs="?", type=Path, default=ROOT / "dist")
    tag = commands.add_parser("tag", help="check that a release tag names pyproject's version")
    tag.add_argument("tag")
    args = parser.parse_args(argv)
    if args.command == "badges":
        wanted = readme_badges()
        if wanted == README.read_text(encoding="utf-8"):
            print("README.md: its badges are what pyproject.toml says")
        elif args.check:
            print("README.md's badges differ from pyproject.toml: run `make badges`")
            return 1
        else:
            README.write_text(wanted, encoding="utf-8")
            print("README.md: badges written from pyproject.toml")
    elif args.command == "dist":
        for path in build_dist(args.folder.resolve()):
            print(f"built and checked by twine: {path}")
    elif problem := tag_problem(args.tag):
        print(f"release: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
