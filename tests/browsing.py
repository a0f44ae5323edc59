"""The site, one server and one browser for every test that reads a page (a pytest plugin that
tests/conftest.py loads): test_site, test_site_layout, test_try_page, test_try_model_config,
test_try_tokenizer, test_slides and test_pdf share them, built or started once a session (a
Chromium started per file cost a few seconds each time, and the site's build is brought up to
date once)."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from needs import missing

from tools import bookpdf, booksite

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = bookpdf.CHROMIUM  # Debian's chromium (`make browser`), or ANNOTATED_CHROMIUM
# Flags this machine's Chromium needs headless; the host resolver rule makes every name but the
# local server's fail, so a request the route handler missed could not reach a network either.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]


def run_site_script(name: str, what: str) -> str:
    """Run `python -m tools.<name>` as `make site` or `make pdf` does and return what it printed;
    fail with its output if it fails."""
    result = subprocess.run(
        [sys.executable, "-m", f"tools.{name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"{what} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="session")
def site() -> Path:
    """_build/html, brought up to date with the notebooks (a second build takes seconds)."""
    run_site_script("booksite", "the site's build")
    return booksite.HTML


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def server(site):
    """The site served from 127.0.0.1 on a free port by a thread of this process."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium, driven by Playwright: skipped where Chromium or Playwright is missing
    (`bookpdf.chromium_missing` says which and what to run), failed there under
    $ANNOTATED_REQUIRE_ALL (tests/needs.py)."""
    reason = bookpdf.chromium_missing()
    if reason:
        missing(f"{reason}; `make test` runs `make browser` first")
    from playwright.sync_api import sync_playwright

    # Playwright starts the browser with a fresh, temporary --user-data-dir of its own; it is
    # given the system Chromium, so nothing is downloaded.
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True
        )
        yield chromium
        chromium.close()


def try_page(browser, server: str, viewport: dict, model_data_js: str | None = None):
    """The Try page opened and its model loaded, for a module's fixture to `yield from`; with
    `model_data_js`, the page gets that script in place of the shipped model's data. Closes the
    page afterwards and fails if the page raised an error meanwhile."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    if model_data_js is not None:
        page.route(
            "**/_static/try/model-data.js",
            lambda route: route.fulfill(body=model_data_js, content_type="text/javascript"),
        )
    page.goto(f"{server}try.html")
    page.wait_for_function("() => window.AnnotatedTry", timeout=30_000)
    page.evaluate("() => AnnotatedTry.ready")
    yield page
    context.close()
    assert not errors, errors
