#!/usr/bin/env bash
# The reliability runs (docs/reliability.md): the partition scenarios of
# issue 15 (build/tests/test_partition) and the soak under faults
# (build/tests/sluice_soak). Not part of tests/run: they take minutes
# (.ci/run runs the 2-minute soak, ci-soak, on its plain build).
#
#   tests/reliability.sh                the partition scenarios, then a 10-minute soak
#   tests/reliability.sh ci             the partition scenarios, then a 2-minute soak
#   tests/reliability.sh partition      the partition scenarios only
#                                       (PARTITION_ONLY=cut1 picks by name)
#   tests/reliability.sh soak [ARGS]    the soak only; ARGS go to sluice_soak
#                                       (--minutes N, --seed S, --gap LO-HI, --keep, --quiet)
#   tests/reliability.sh ci-soak        the CI step (.ci/run): a 2-minute soak, seed 15
#
# Builds the two programs (and sluiced, sluice) RelWithDebInfo into build/,
# or into $SLUICE_BUILD_DIR when set (an existing build keeps its own type:
# the sanitizers slow the agents down, so prefer a plain build for the
# figures). Exit status: 0 when every part passed, 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
[ $# -gt 0 ] && shift
case "$what" in
  all|ci|partition|soak|ci-soak) ;;
  -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
  *) echo "usage: tests/reliability.sh [all|ci|partition|soak [ARGS]|ci-soak]" >&2; exit 2 ;;
esac
BUILD=${SLUICE_BUILD_DIR:-build}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
fi
case "$what" in
  partition) targets="test_partition" ;;
  soak|ci-soak) targets="sluice_soak" ;;
  *) targets="test_partition sluice_soak" ;;
esac
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $targets >/dev/null || {
  echo "reliability: the build failed (run cmake --build $BUILD to see why)" >&2
  exit 1
}
SLUICE_BUILD_DIR=$(cd "$BUILD" && pwd)
export SLUICE_BUILD_DIR

failed=()
partition() {
  echo "== test_partition ($(date -u +%FT%TZ)) =="
  "$SLUICE_BUILD_DIR/tests/test_partition" || failed+=("partition")
}
soak() {
  echo "== sluice_soak $* ($(date -u +%FT%TZ)) =="
  "$SLUICE_BUILD_DIR/tests/sluice_soak" "$@" || failed+=("soak")
}
case "$what" in
  all) partition; soak --minutes 10 "$@" ;;
  ci) partition; soak --minutes 2 "$@" ;;
  partition) partition ;;
  soak) soak "$@" ;;
  ci-soak) soak --minutes 2 --seed 15 --quiet "$@" ;;
esac
if [ ${#failed[@]} -gt 0 ]; then
  echo "reliability: FAILED: ${failed[*]} (figures above; docs/reliability.md explains them)"
  exit 1
fi
echo "reliability: all passed"
