#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time.
#   tests/fuzz.sh [seconds per target (30)]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
BUILD=build-fuzz
CC=clang cmake -S . -B "$BUILD" -DSLUICE_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
targets=$(cd tests/fuzz && ls fuzz_*.c 2>/dev/null | sed 's/\.c$//')
[ -n "$targets" ] || { echo "no fuzz targets"; exit 0; }
cmake --build "$BUILD" -j"$(nproc)" --target $targets
for t in $targets; do
  corpus=$(mktemp -d)
  echo "== $t for ${SECS}s"
  log="$corpus.log"
  if ! "$BUILD/tests/$t" -max_total_time="$SECS" -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $t FAILED" >&2
    exit 1
  fi
  grep -E "stat::number_of_executed_units" "$log" || true
  rm -rf "$corpus" "$log"
done
echo "fuzz: all targets ran ${SECS}s without a crash"
