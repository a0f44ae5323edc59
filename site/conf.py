"""Sphinx settings for the book's HTML site. Build it with `make site` (see tools/booksite.py).

Everything here serves one aim: a site that reads the same with the network off. The notebooks
are rendered with the outputs saved in them (never re-executed), MathJax comes from a PyPI package
and is copied into the site, and charts load vega from the site's own `_static/` folder.

Sphinx runs inside `python -m tools.booksite` (or tools.bookpdf), started from the checkout's
root, so `tools` imports here as it does there.
"""

from tools import booksite  # staging, the chapter list, the extension below

project = "The Annotated Transformer, as a book"
html_title = "The Annotated Transformer"
html_show_copyright = False
html_show_sphinx = False
language = "en"

extensions = [
    "myst_nb",  # notebooks and MyST markdown (it brings myst_parser along)
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/mathjax, nothing from a CDN
    "tools.booksite",  # the chapter map on the landing page and the download links on each chapter
]

# The book's public repository is pyproject.toml's [project.urls] Repository, read by
# tools/booksite.py: set, every chapter page links its notebook in Colab and Binder, and the
# header links the repository; unset, neither appears. It is written there only (the README's badges come from it).

root_doc = "index"
exclude_patterns = [".ipynb_checkpoints"]

# Notebooks are rendered as saved: `make book` / `make execute` run them, the site never does.
nb_execution_mode = "off"
# $...$ and $$...$$ in the chapters' markdown, and amsmath environments, become math.
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
# A chart output carries a Vega-Lite spec (which myst-nb cannot draw; booksite.page_source drops
# it from the staged copy) and an HTML form that draws it with the site's own vega bundle
# (annotated/figures/__init__.py). The HTML form comes first, and myst-nb keeps its <script> as it is.
nb_mime_priority_overrides = [("html", "text/html", 0)]
# myst-nb would put require.js and the widget manager from a CDN on pages with widgets; the book
# has none, and a page must never reach another host.
nb_ipywidgets_js = {}
nb_merge_streams = True

html_theme = "sphinx_book_theme"
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": False,  # each chapter links its .ipynb and .py under its title
    "use_fullscreen_button": False,
    "navigation_with_keys": False,
    "footer_content_items": [],
}
html_static_path = ["_static", str(booksite.STATIC)]  # the book's CSS, and annotated-vega.js
html_extra_path = [str(booksite.EXTRA)]  # downloads/: every chapter's .ipynb and .py
# print.css: the page on paper (`make pdf` prints the whole book with it, tools/bookpdf.py).
html_css_files = ["book.css", ("print.css", {"media": "print"})]
html_js_files = ["book.js"]  # settings the theme's scripts read when they start
html_copy_source = False  # the downloads/ folder already has the sources
html_show_sourcelink = False
html_last_updated_fmt = None
# The reader's system setting picks light or dark, and the theme's toggle overrides it. Charts and
# drawings keep their white ground in dark mode, so their colours and text read the same in both
# (tests/test_site_layout.py measures the contrast). Left empty, the theme logs a console error.
html_context = {"default_mode": "auto"}
