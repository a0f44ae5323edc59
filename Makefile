# The Annotated Transformer, as a book. Run `make help` for the targets.
# Every target that needs Python first creates .venv and installs the book into it (`make setup`).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The torch build to install. The default is the CPU build; GPU users name theirs, e.g.
#   make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
# or install torch into .venv themselves and pass TORCH= (empty) to keep it.
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.DEFAULT_GOAL := help
.PHONY: help setup book notebooks execute status test unit nbval lint lab clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: $(STAMP)  ## create .venv and install the book with its tools

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(strip $(TORCH)),$(PY) -m pip install $(TORCH))
	$(PY) -m pip install -e '.[dev]'
	touch $@

book: $(STAMP)  ## set up, then re-execute the notebooks whose chapter changed
	$(PY) tools/book.py execute

notebooks: $(STAMP)  ## regenerate notebooks/*.ipynb from annotated/*.py, keeping outputs
	$(PY) tools/book.py sync

execute: $(STAMP)  ## re-execute every notebook
	$(PY) tools/book.py execute --all

status: $(STAMP)  ## say which notebooks are stale
	$(PY) tools/book.py status

test: $(STAMP)  ## unit tests and nbval on every notebook
	$(PY) -m pytest tests notebooks $(NBVAL)

unit: $(STAMP)  ## unit tests only (fast)
	$(PY) -m pytest tests

nbval: $(STAMP)  ## nbval on every notebook only
	$(PY) -m pytest notebooks $(NBVAL)

lint: $(STAMP)  ## ruff on the code, formatting included
	$(PY) -m ruff check annotated tests tools notebooks/conftest.py
	$(PY) -m ruff format --check annotated tests tools notebooks/conftest.py

lab: $(STAMP)  ## open the notebooks in JupyterLab (installs it on first use)
	$(PY) -m pip install -e '.[lab]'
	$(PY) -m jupyter lab notebooks

clean:  ## remove build output and caches (keeps .venv and data/)
	rm -rf _build .pytest_cache .ruff_cache notebooks/.ipynb_checkpoints
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
