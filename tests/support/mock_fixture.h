/* mock_fixture: `sluice mock` providers for tests and benchmarks.
 *
 * mock_fixture_start() runs the built $SLUICE_BUILD_DIR/sluice mock on a
 * free loopback port (--port 0 --port-file) as a child process that dies
 * with the calling thread (PR_SET_PDEATHSIG), and waits, bounded, until
 * its port file appears. The ledger is read over HTTP (GET /stats), the
 * injected failures are switched at run time (POST /control, see
 * docs/mock.md), and mock_fixture_stop() ends it with SIGTERM, reaps it
 * (bounded) and removes its directory. The HTTP here is plain blocking
 * sockets with a bound on every read, one request per connection.
 *
 * Depends on jansson and proc. Functions print what went wrong on stderr. */
#ifndef SLUICE_MOCK_FIXTURE_H
#define SLUICE_MOCK_FIXTURE_H

#include <sys/types.h>

#include <jansson.h>

typedef struct mock_fixture {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[256]; /* port file and output (out.log) */
    char log[300];
} mock_fixture;

/* The sluice binary: $SLUICE_BUILD_DIR/sluice, or NULL when it is not set
 * or not built (with a message on stderr). */
const char *mock_fixture_binary(void);

/* Starts `sluice mock --port 0 --port-file F ARGS...` (args NULL-terminated,
 * or NULL) and waits up to timeout_ms for its port. Returns 0, or -1 (then
 * nothing is left running). */
int mock_fixture_start(mock_fixture *m, const char *const *args, int timeout_ms);

/* GET /stats<query> (query "" or e.g. "?reset=1"): the ledger, a new
 * reference owned by the caller, or NULL. */
json_t *mock_fixture_stats(const mock_fixture *m, const char *query);

/* POST /control<query> (e.g. "?fail_503=1"). Returns the HTTP status, or
 * -1 when there was no answer. */
int mock_fixture_control(const mock_fixture *m, const char *query);

/* The integer at path in a ledger, components separated by '/'
 * ("deployments/gpt-4o/accepted", "clients/w1/status_429"); 0 when a
 * component is missing (the ledger leaves out what saw no request). */
long long mock_fixture_count(const json_t *ledger, const char *path);

/* SIGTERM, reap within 15 s (SIGKILL after), remove the directory. Returns
 * the wait status, or -1 (not running, or killed). Safe to call twice. */
int mock_fixture_stop(mock_fixture *m);

#endif
