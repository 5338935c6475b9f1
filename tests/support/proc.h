/* proc: the child processes of a test (redis-server, sluiced, ...).
 *
 * proc_spawn() forks and execs with PR_SET_PDEATHSIG(SIGKILL), so the
 * child is killed when the thread that started it dies, even by a crash;
 * its output can go to a file. Readiness is a bounded PING poll
 * (proc_wait_ping), never a fixed sleep; proc_wait() reaps with a bound.
 * Also the clock, sleep, poll (wait for a condition, bounded) and
 * temp-directory helpers the fixtures and tests share.
 *
 * Depends on hiredis and Linux (prctl). Functions return 0 or -1 unless
 * said otherwise and print nothing; the fixtures built on them say what
 * failed. */
#ifndef SLUICE_TEST_PROC_H
#define SLUICE_TEST_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in milliseconds. */
double proc_now_ms(void);

/* Sleeps ms milliseconds, resuming after signals. */
void proc_sleep_ms(int ms);

/* Waiting on a condition instead of a sleep: calls pred(arg) every
 * PROC_POLL_STEP_MS until it returns nonzero (returns 1) or timeout_ms pass
 * (returns 0, after one last call). For conditions another thread or
 * process makes true (a daemon's STATUS, the library's thread, a
 * provider's log); a test on a libuv loop uses loop_run_until (loop.h). */
#define PROC_POLL_STEP_MS 5
int proc_poll(int (*pred)(void *arg), void *arg, int timeout_ms);

/* proc_poll() that fails the running cmocka test (include cmocka.h first)
 * with "timed out after <ms> ms waiting for <what>". */
#define PROC_POLL_OR_FAIL(pred, arg, timeout_ms, what)                                                                 \
    do {                                                                                                               \
        if (!proc_poll((pred), (arg), (timeout_ms)))                                                                   \
            fail_msg("timed out after %d ms waiting for %s", (int)(timeout_ms), (what));                               \
    } while (0)

/* Starts argv[0] (looked up in PATH unless it holds a '/') with argv,
 * killed with the calling thread. With out set, its stdout (and stderr too
 * when also_stderr) is appended to that file, created 0600 if need be.
 * Returns the child's pid, or -1. */
pid_t proc_spawn(char *const argv[], const char *out, int also_stderr);

/* 1 when PING on a new connection answers +PONG, else 0: to 127.0.0.1:port
 * when port > 0, else to the UNIX socket unix_path. Connecting and the
 * reply are each bounded by timeout_ms. */
int proc_ping(const char *unix_path, int port, int timeout_ms);

/* Polls proc_ping() every 10 ms until it answers (returns 0), pid exits
 * (returns -1; reaped, its wait status in *status when status is set), or
 * timeout_ms pass (returns -2; still running). */
int proc_wait_ping(pid_t pid, const char *unix_path, int port, int timeout_ms, int *status);

/* Waits up to timeout_ms (< 0: without a bound) for pid to exit. Returns 1
 * when it was reaped (its wait status in *status when status is set), 0
 * when it is still running. */
int proc_wait(pid_t pid, int timeout_ms, int *status);

/* Makes a fresh directory $TMPDIR/<prefix>-XXXXXX (TMPDIR defaults to
 * /tmp) and writes its path into buf. */
int proc_mkdtemp(char *buf, size_t n, const char *prefix);

/* Removes dir and everything below it; a missing dir is not an error. */
int proc_rmtree(const char *dir);

#endif
