"""Every link in a chapter's prose must work where a reader follows it: in Jupyter, where the
notebook sits in notebooks/ beside the other chapters, and on the built site, where the chapters
sit beside the site's own pages. A link to a page that only the site has (the "Try the model"
page, the course page) is dead in Jupyter, so a chapter names such a page instead of linking it."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools import book
from tools.chapters import chapter_sources

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def relative_links(markdown: str) -> list[str]:
    """The targets of the markdown's links that point into the book (not to a web address or to
    a heading of the same page), code spans and fenced code left out."""
    targets = []
    for target in LINK.findall(CODE.sub("", markdown)):
        parts = urlsplit(target)
        if not parts.scheme and not target.startswith("#"):
            targets.append(parts.path)
    return targets


def test_relative_links_are_found_and_web_links_skipped():
    text = "see [chapter 6](ch06_decoding.ipynb#beam), [PyTorch](https://pytorch.org), [up](#top)"
    text += ", `[not](a-link.md)`, ![a picture](x.png) and [Try](try.md)"
    assert relative_links(text) == ["ch06_decoding.ipynb", "try.md"]


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda path: path.stem)
def test_every_link_in_a_chapter_works_in_jupyter(source):
    notebook = book.read_chapter(source)
    prose = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    dead = [t for t in relative_links(prose) if not (ROOT / "notebooks" / t).exists()]
    assert not dead, (
        f"{source.name} links {dead}, which a reader in Jupyter cannot open (notebooks/ has no "
        "such file): link a chapter notebook, or name a page only the site has without a link"
    )
