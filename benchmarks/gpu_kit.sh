#!/usr/bin/env bash
# The recipe search (benchmarks/search_recipes.py) on a GPU machine that has PyTorch but no internet
# and none of the book's other packages, such as the one a session may be lent for 15 minutes.
#
#   bash benchmarks/gpu_kit.sh prepare          # here, with the package index and ../shared/data
#   bash benchmarks/gpu_kit.sh run SECONDS ARGS # there, from the checkout's copy; OUT names a folder
#
# `prepare` downloads, pinned by constraints.txt, the wheels of the packages the search imports
# that such a machine lacks (spaCy and what it needs) for its Python (3.12, manylinux x86-64),
# unpacks them without their tests and sources into one folder and packs that as .gpu/site.tar.xz
# (33 MB: the wheels themselves, 59 MB, and the checkout, 18 MB, would pass the device tool's 64 MiB
# for a call), copies Multi30k into .gpu/data/multi30k/, and has git ignore .gpu/ (.git/info/exclude):
# it travels with the working tree when the device tool's `carry` names ".gpu".
#
# `run` unpacks the packages into /tmp/site (unless they import already), runs
# `search_recipes.py ARGS` for at most SECONDS with the record in $OUT/recipes.json (a copy of the
# checkout's, so lines already measured are kept) and the runs in /tmp/runs, then writes
# $OUT/partial.json (the validation curve of every run of ARGS, finished or stopped: `--collect`)
# and $OUT/workers.log (every worker's log, one after the other). Only $OUT's files come back, so
# nothing else survives the call. Copy $OUT/recipes.json over benchmarks/results/recipes.json and
# commit it with the session's note. One call of the device tool, for example:
#
#   ANNOTATED_COMMIT=<git rev-parse HEAD here> bash benchmarks/gpu_kit.sh run 540 --parallel 12 \
#     --only "subwords 10k, 20 epochs" ...
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES="spacy spacy-legacy spacy-loggers thinc blis cymem preshed murmurhash srsly catalogue
confection wasabi weasel pydantic pydantic_core annotated-types typing-inspection cloudpathlib
smart_open wrapt sacremoses"

prepare() {
  local staging
  staging=$(mktemp -d)
  mkdir -p .gpu/data/multi30k "$staging/wheels" "$staging/site"
  grep -qxF /.gpu/ .git/info/exclude 2>/dev/null || echo /.gpu/ >>.git/info/exclude
  local pins=()
  for name in $PACKAGES; do
    pins+=("$(grep -iE "^${name//[-_]/[-_]}==" constraints.txt)")
  done
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$staging/wheels" "${pins[@]}"
  for wheel in "$staging"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$staging/site"
  done
  find "$staging/site" -type d -name tests -prune -exec rm -rf {} +
  find "$staging/site" \( -name "*.pyx" -o -name "*.c" -o -name "*.cpp" \) -delete
  XZ_OPT=-9 tar -C "$staging/site" -cJf .gpu/site.tar.xz .
  cp "${ANNOTATED_DATA_DIR:-../shared/data}"/multi30k/*.gz .gpu/data/multi30k/
  rm -rf "$staging"
  du -sh .gpu/site.tar.xz .gpu/data
}

run() {
  local seconds=$1
  shift
  : "${OUT:?set OUT to the folder whose files come back}" "${ANNOTATED_COMMIT:?name the commit}"
  if ! python3 -c "import spacy" 2>/dev/null; then
    mkdir -p /tmp/site
    python3 -c "import tarfile; tarfile.open('.gpu/site.tar.xz').extractall('/tmp/site')"
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  export ANNOTATED_DATA_DIR="$PWD/.gpu/data" ANNOTATED_RUNS_DIR=/tmp/runs
  cp benchmarks/results/recipes.json "$OUT/recipes.json"
  local common=(--record "$OUT/recipes.json" --runs /tmp/runs/search)
  timeout --signal=TERM "$seconds" python3 -m benchmarks.search_recipes "${common[@]}" "$@" ||
    echo "search_recipes.py stopped (exit $?): the runs it had not finished are in partial.json"
  python3 -m benchmarks.search_recipes "${common[@]}" "$@" --collect "$OUT/partial.json"
  cat /tmp/runs/search/worker-*.log >"$OUT/workers.log" 2>/dev/null || true
}

case "${1:-}" in
prepare) prepare ;;
run)
  shift
  run "$@"
  ;;
*)
  echo "usage: $0 prepare | run SECONDS [search_recipes.py arguments]" >&2
  exit 2
  ;;
esac
