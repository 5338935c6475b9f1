#!/usr/bin/env bash
# Runs the daemon tests against a sluiced built without sanitizers, so that
# test_daemon's test_valgrind_session, test_daemon_http's test_valgrind_http
# and test_proxy's test_valgrind_proxy can run sluiced under valgrind (they
# are skipped in the ASan build that tests/run uses). The sessions drive
# every command, a reload, bad input, an abandoned waiter, a metrics scrape
# and a drain with callers waiting; the HTTP server's routes, errors,
# refusals, timeouts, clients that leave, a reload and the drain; and the
# governing proxy forwarding to `sluice mock`: answers and streams of each
# API, a shed, an upstream 429 retried, a hard quota error, clients that
# leave while waiting, mid-stream and mid-answer, an upstream timeout and a
# refused connection, key injection with a client key, a reload with calls
# in flight into observe mode, and SIGTERM with a stream in flight. Each
# requires "ERROR SUMMARY: 0 errors" and no definite or indirect leaks at
# exit (valgrind --error-exitcode=99 also makes sluiced's exit code
# non-zero on any error).
#   tests/valgrind.sh          build into build-valgrind/ and run the three tests
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
BUILD=${SLUICE_VALGRIND_BUILD_DIR:-build-valgrind}
cmake -S . -B "$BUILD" -DSLUICE_SANITIZE=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target sluiced sluice test_daemon test_daemon_http test_proxy
ctest --test-dir "$BUILD" --output-on-failure -R '^test_(daemon|daemon_http|proxy)$' "$@"
