#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time,
# starting from its kept corpus (tests/fuzz/corpus/<target>/, committed:
# the inputs worth starting from, so a short CI run does not begin from
# nothing). New inputs found go to a scratch copy; to keep them, run with
# --merge, which folds what a run found back into the kept corpus
# (libFuzzer -merge=1 keeps only inputs that add coverage).
#   tests/fuzz.sh [seconds per target (30)] [--merge] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=30
MERGE=0
ONLY=()
for a in "$@"; do
  case "$a" in
    --merge) MERGE=1 ;;
    [0-9]*) SECS=$a ;;
    *) ONLY+=("$a") ;;
  esac
done
BUILD=build-fuzz
CC=clang cmake -S . -B "$BUILD" -DSLUICE_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
targets=$(cd tests/fuzz && ls fuzz_*.c 2>/dev/null | sed 's/\.c$//')
[ -n "$targets" ] || { echo "no fuzz targets"; exit 0; }
[ ${#ONLY[@]} -eq 0 ] || targets="${ONLY[*]}"
cmake --build "$BUILD" -j"$(nproc)" --target $targets
for t in $targets; do
  kept=tests/fuzz/corpus/$t
  corpus=$(mktemp -d)
  [ -d "$kept" ] && cp -r "$kept"/. "$corpus"/
  seeds=$(ls "$corpus" | wc -l)
  echo "== $t for ${SECS}s from $seeds kept inputs"
  log="$corpus.log"
  if ! "$BUILD/tests/$t" -max_total_time="$SECS" -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $t FAILED" >&2
    exit 1
  fi
  grep -E "stat::number_of_executed_units" "$log" || true
  if [ "$MERGE" = 1 ]; then
    mkdir -p "$kept"
    "$BUILD/tests/$t" -merge=1 "$kept" "$corpus" >>"$log" 2>&1 || { tail -20 "$log"; exit 1; }
    echo "   kept corpus: $(ls "$kept" | wc -l) inputs"
  fi
  rm -rf "$corpus" "$log"
done
echo "fuzz: all targets ran ${SECS}s without a crash"
