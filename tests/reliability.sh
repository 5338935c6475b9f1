#!/usr/bin/env bash
# The reliability runs (docs/reliability.md): the real-time fleets (the
# ctest label realtime: utilisation and latency bounds in real time), the
# partition scenarios of issue 15 (build/tests/test_partition), the soak
# under faults (build/tests/sluice_soak) and the simulator's scoreboard on
# seeds 1..10 (build/tests/sim/sim_scoreboard, issue 22). Not part of
# tests/run or .ci/run: they take minutes, and a loaded machine can fail a
# real-time bound with nothing wrong in the code (ctest's
# test_sim_scoreboard, in the gate, runs the scoreboard's seeds 1..3).
#
#   tests/reliability.sh                the real-time fleets, the partition scenarios, a 10-minute soak, the scoreboard
#   tests/reliability.sh ci             the real-time fleets, the partition scenarios, a 2-minute soak
#   tests/reliability.sh realtime [ARGS]
#                                       the real-time fleets only, one at a time, their
#                                       bounds asserted (SLUICE_REALTIME_BOUNDS=1), on the
#                                       ASan build tests/run makes (build-asan, or
#                                       $SLUICE_ASAN_BUILD_DIR); ARGS go to ctest
#   tests/reliability.sh partition      the partition scenarios only
#                                       (PARTITION_ONLY=cut1 picks by name)
#   tests/reliability.sh soak [ARGS]    the soak only; ARGS go to sluice_soak
#                                       (--minutes N, --seed S, --gap LO-HI, --keep, --quiet)
#   tests/reliability.sh ci-soak        the CI step (.ci/run): a 2-minute soak, seed 15
#   tests/reliability.sh sim [ARGS]     the scoreboard on seeds 1..10 (SIM_SEEDS=N for
#                                       1..N); ARGS go to sim_scoreboard (--scenario NAME)
#
# Builds the programs (and sluiced, sluice) RelWithDebInfo into build/,
# or into $SLUICE_BUILD_DIR when set (an existing build keeps its own type:
# the sanitizers slow the agents down, so prefer a plain build for the
# figures). Exit status: 0 when every part passed, 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
[ $# -gt 0 ] && shift
case "$what" in
  all|ci|partition|soak|ci-soak|sim|realtime) ;;
  -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
  *) echo "usage: tests/reliability.sh [all|ci|partition|soak [ARGS]|ci-soak|sim [ARGS]|realtime [ARGS]]" >&2; exit 2 ;;
esac
failed=()
realtime() {
  local asan=${SLUICE_ASAN_BUILD_DIR:-build-asan}
  echo "== the real-time fleets on $asan ($(date -u +%FT%TZ)) =="
  if ! { cmake -S . -B "$asan" -DSLUICE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null &&
          cmake --build "$asan" -j"$(nproc)" >/dev/null; }; then
    echo "reliability: the build of $asan failed (run tests/run to see why)" >&2
    failed+=("realtime")
    return
  fi
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  SLUICE_REALTIME_BOUNDS=1 ctest --test-dir "$asan" --output-on-failure -L realtime -j1 "$@" || failed+=("realtime")
}
if [ "$what" = realtime ]; then
  realtime "$@"
  [ ${#failed[@]} -eq 0 ] || { echo "reliability: FAILED: ${failed[*]}"; exit 1; }
  echo "reliability: all passed"
  exit 0
fi
BUILD=${SLUICE_BUILD_DIR:-build}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
fi
case "$what" in
  partition) targets="test_partition" ;;
  soak|ci-soak) targets="sluice_soak" ;;
  sim) targets="sim_scoreboard" ;;
  ci) targets="test_partition sluice_soak" ;;
  *) targets="test_partition sluice_soak sim_scoreboard" ;;
esac
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $targets >/dev/null || {
  echo "reliability: the build failed (run cmake --build $BUILD to see why)" >&2
  exit 1
}
SLUICE_BUILD_DIR=$(cd "$BUILD" && pwd)
export SLUICE_BUILD_DIR

partition() {
  echo "== test_partition ($(date -u +%FT%TZ)) =="
  "$SLUICE_BUILD_DIR/tests/test_partition" || failed+=("partition")
}
soak() {
  echo "== sluice_soak $* ($(date -u +%FT%TZ)) =="
  "$SLUICE_BUILD_DIR/tests/sluice_soak" "$@" || failed+=("soak")
}
# Every scenario on seeds 1..SIM_SEEDS (10): the properties of issue 22
# from t = 0 on ten seeds each (a FAIL, or an expected failure that
# passes on a seed, fails the part).
sim() {
  echo "== sim_scoreboard --seeds ${SIM_SEEDS:-10}${*:+ $*} ($(date -u +%FT%TZ)) =="
  "$SLUICE_BUILD_DIR/tests/sim/sim_scoreboard" --seeds "${SIM_SEEDS:-10}" "$@" || failed+=("sim")
}
case "$what" in
  all) realtime; partition; soak --minutes 10 "$@"; sim ;;
  ci) realtime; partition; soak --minutes 2 "$@" ;;
  partition) partition ;;
  soak) soak "$@" ;;
  ci-soak) soak --minutes 2 --seed 15 --quiet "$@" ;;
  sim) sim "$@" ;;
esac
if [ ${#failed[@]} -gt 0 ]; then
  echo "reliability: FAILED: ${failed[*]} (figures above; docs/reliability.md explains them)"
  exit 1
fi
echo "reliability: all passed"
