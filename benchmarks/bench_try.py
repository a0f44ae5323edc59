"""The "Try the model" page (site/try.md) in headless Chromium: how long the model takes to load and
to translate a 20-word sentence, greedy and with beam search.

    python -m benchmarks.bench_try [--loads 3] [--repeats 5]     (make bench-try)

The site is built as `make site` builds it and served from this machine; Chromium (Debian's, as
the browser tests use) opens the page `--loads` times in fresh contexts (nothing cached): the load
time is from the request of the page to the model ready to translate (its 13 MB script fetched,
decoded and its weights unpacked). The sentence is the first of test2016 that spaCy cuts into 20
words; `AnnotatedTry.translate`, what the page's Translate button calls, translates it `--repeats`
times after one untimed run, greedy and with beam 4 and alpha 2.5 (the page's defaults), and the
median of each is recorded, with the target the issue set: greedy under half a second. Last, as
the browser test does, the page translates the reference's 200 test2016 sentences greedily and
with beam search, and the record says how many equal the Python translator's.

The CPU time Chromium's processes use counts as this benchmark's own (not "others'") when
`Timing` judges whether the machine was idle (`BrowserCpu`).

Writes benchmarks/results/try.json.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from annotated.base.datasets import read_multi30k
from annotated.ch05_text import tokenize
from benchmarks.common import Timing, describe, write_results

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
CHROMIUM = os.environ.get("ANNOTATED_CHROMIUM", "/usr/bin/chromium")
WORDS = 20
TARGET_GREEDY_SECONDS = 0.5
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class BrowserCpu:
    """The CPU seconds of this process and of the browser's: every process below this one and
    every Chromium process (Chromium starts its renderers outside the tree of the process that
    launched it), read from Linux's /proc five times a second in a thread, each process's last
    reading kept, so that one that ends meanwhile still counts (up to its last 0.2 s)."""

    def __init__(self, every: float = 0.2) -> None:
        self.seen: dict[int, float] = {}
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.read()
            self._stop.wait(self.every)

    def read(self) -> None:
        stats = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                head, tail = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            fields = tail.split()
            name = head.split("(", 1)[1]
            stats[int(entry)] = (name, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
        below, frontier = set(), {os.getpid()}
        while frontier:
            frontier = {pid for pid, (_, parent, _) in stats.items() if parent in frontier} - below
            below |= frontier
        for pid, (name, _, seconds) in stats.items():
            if pid in below or name.startswith("chrom"):
                self.seen[pid] = max(seconds, self.seen.get(pid, 0.0))

    def seconds(self) -> float:
        self.read()
        own = os.times()  # this process alone: its children are among the processes read
        return own.user + own.system + sum(self.seen.values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def sentence_of(words: int) -> str:
    for german, _ in read_multi30k("test_2016_flickr"):
        if len(tokenize([german], "de")[0]) == words:
            return german
    raise SystemExit(f"no test2016 sentence of {words} words")


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/try.html"


def load_times(browser, url: str, loads: int) -> tuple[list[float], list[float]]:
    """The seconds from the request of the page to its model ready to translate, `loads` times in
    fresh contexts (nothing cached), and the seconds the page says the model's set-up took."""
    seconds, model_seconds = [], []
    for _ in range(loads):
        context = browser.new_context()
        page = context.new_page()
        started = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_function("() => window.AnnotatedTry")
        model_seconds.append(page.evaluate("() => AnnotatedTry.ready"))
        seconds.append(time.perf_counter() - started)
        context.close()
    return seconds, model_seconds


def ready_page(browser, url: str):
    """The page opened in a context of its own, its model ready to translate."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    page.wait_for_function("() => window.AnnotatedTry")
    page.evaluate("() => AnnotatedTry.ready")
    return page


def translation_times(page, sentence: str, repeats: int) -> tuple[dict, dict]:
    """Greedy and beam search with the page's defaults: the seconds of each of `repeats`
    translations of the sentence after an untimed one, and what the page answered (the text, its
    words, the kernel), by name."""
    times, outputs = {}, {}
    for name, beam in (("greedy", 1), ("beam", 4)):
        runs = page.evaluate(
            """([text, beam, repeats]) => {
              const alpha = AnnotatedTry.state.manifest.decoding.alpha;
              AnnotatedTry.translate(text, {beam, alpha});  // untimed: the code warms up
              const seconds = [];
              let result;
              for (let i = 0; i < repeats; i++) {
                const started = performance.now();
                result = AnnotatedTry.translate(text, {beam, alpha});
                seconds.push((performance.now() - started) / 1000);
              }
              return {seconds, text: result.text, words: result.words.length,
                      kernel: AnnotatedTry.state.model.kernel};
            }""",
            [sentence, beam, repeats],
        )
        times[name], outputs[name] = runs["seconds"], runs
    return times, outputs


def agreement_with_python(page) -> tuple[list[str], dict[str, int]]:
    """What the browser test checks, recorded: the page's translations of the reference's
    sentences against the Python translator's. The sentences, and how many the page translates
    as Python does, greedy and with beam search."""
    reference = json.loads((ROOT / "site" / "try" / "reference.json").read_text("utf-8"))
    sources = [de for de, _ in read_multi30k("test_2016_flickr")[: reference["sentences"]]]
    same = {}
    for name, beam in (("greedy", 1), ("beam", 4)):
        got = page.evaluate(
            """([texts, beam]) => texts.map((text) => AnnotatedTry.translate(text,
                 {beam, alpha: AnnotatedTry.state.manifest.decoding.alpha}).text)""",
            [sources, beam],
        )
        same[name] = sum(g == w for g, w in zip(got, reference[name], strict=True))
    return sources, same


def measure_page(playwright, url: str, sentence: str, args) -> dict:
    """Everything measured in Chromium, by name: its version, the load times, the sentence's
    translation times and outputs, and the agreement with Python's translations."""
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True
    )
    loads, model_seconds = load_times(browser, url, args.loads)
    page = ready_page(browser, url)
    times, outputs = translation_times(page, sentence, args.repeats)
    sources, same = agreement_with_python(page)
    seen = {
        "loads": loads,
        "model_seconds": model_seconds,
        "times": times,
        "outputs": outputs,
        "sources": sources,
        "same": same,
        "version": browser.version,
    }
    browser.close()
    return seen


def page_record(seen: dict, sentence: str, args) -> dict:
    """The record of what `measure_page` saw, with the sizes of the model's files."""
    times, outputs, loads = seen["times"], seen["outputs"], seen["loads"]
    model_bytes = (ROOT / "annotated" / "model" / "model.bin").stat().st_size
    greedy = statistics.median(times["greedy"])
    return {
        "benchmark": "the Try-the-model page in headless Chromium (site/try)",
        "machine": describe(),
        "browser": f"Chromium {seen['version']} (headless)",
        "kernel": outputs["greedy"]["kernel"],
        "model_bin_bytes": model_bytes,
        "float32_bytes": 4
        * json.loads((ROOT / "annotated" / "model" / "model.json").read_text("utf-8"))["model"][
            "parameters"
        ],
        "model_data_js_bytes": (HTML / "_static" / "try" / "model-data.js").stat().st_size,
        "page_load_to_ready_seconds": round(statistics.median(loads), 3),
        "page_load_to_ready_all": [round(s, 3) for s in loads],
        "model_setup_seconds": round(statistics.median(seen["model_seconds"]), 3),
        "sentence": sentence,
        "sentence_words": outputs["greedy"]["words"],
        "greedy_seconds": round(greedy, 4),
        "beam_seconds": round(statistics.median(times["beam"]), 4),
        "greedy_all": [round(s, 4) for s in times["greedy"]],
        "beam_all": [round(s, 4) for s in times["beam"]],
        "greedy_output": outputs["greedy"]["text"],
        "beam_output": outputs["beam"]["text"],
        "target_greedy_seconds": TARGET_GREEDY_SECONDS,
        "greedy_within_target": greedy < TARGET_GREEDY_SECONDS,
        "reference_sentences": len(seen["sources"]),
        "same_as_python_greedy": seen["same"]["greedy"],
        "same_as_python_beam": seen["same"]["beam"],
        "loads": args.loads,
        "repeats": args.repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    subprocess.run([sys.executable, "-m", "tools.booksite"], check=True, cwd=ROOT)
    sentence = sentence_of(WORDS)
    httpd, url = serve(HTML)
    browser_cpu = BrowserCpu()
    timing = Timing(1, cpu_seconds=browser_cpu.seconds).start()
    with sync_playwright() as playwright:
        seen = measure_page(playwright, url, sentence, args)
    httpd.shutdown()
    record = page_record(seen, sentence, args)
    record["timing"] = timing.stop()
    browser_cpu.close()
    write_results("try", record)


if __name__ == "__main__":
    main()
