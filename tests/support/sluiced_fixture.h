/* sluiced_fixture: the one way tests and benchmarks run a real sluiced.
 *
 * A fixture is a directory holding the daemon's config (sluiced.yaml),
 * socket (agent.sock) and log (sluiced.log, plus valgrind.log): either a
 * fresh temp dir that the fixture removes at stop, or base/name inside a
 * directory the caller owns (a redis_fixture's, removed with it). The
 * config is written from text (sluiced_fixture_write_config) or is any
 * file put at f->config. sluiced_fixture_launch() runs
 * $SLUICE_BUILD_DIR/agent/sluiced --config f->config [args...], under
 * valgrind when f->valgrind, with stdout and stderr appended to f->log and
 * PR_SET_PDEATHSIG so that it dies with the test even when the test
 * crashes, then waits (bounded) until it answers PING; when it does not,
 * its log is echoed to stderr. Every running daemon is recorded:
 * sluiced_fixture_kill_all() (a test's teardown after a failure) and an
 * exit handler kill and reap what is left, so none outlives its test.
 *
 * Depends on hiredis and proc. Not thread-safe: start and stop daemons
 * from one thread (the one whose death PR_SET_PDEATHSIG watches).
 * Functions print what went wrong on stderr. */
#ifndef SLUICE_SLUICED_FIXTURE_H
#define SLUICE_SLUICED_FIXTURE_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

typedef struct sluiced_fixture {
    pid_t pid;    /* the running daemon, 0 when none */
    int valgrind; /* set before launch: run it under valgrind, logging to vglog */
    int own_dir;  /* dir was made by init and is removed by stop */
    char dir[300];
    char sock[400];
    char config[400];
    char log[400];
    char vglog[400];
} sluiced_fixture;

/* The sluiced binary: $SLUICE_BUILD_DIR/agent/sluiced, or NULL (with a
 * message on stderr) when it is not set or not built. */
const char *sluiced_fixture_binary(void);

/* Clears f and names its files in a fresh temp dir when base is NULL
 * (owned: stop removes it), else in base/name (created if need be, kept).
 * Returns 0 or -1. */
int sluiced_fixture_init(sluiced_fixture *f, const char *base, const char *name);

/* Writes yaml to f->config, with every "%SOCK%" replaced by f->sock.
 * Returns 0 or -1. */
int sluiced_fixture_write_config(const sluiced_fixture *f, const char *yaml);

/* Starts the daemon on f->config with the extra arguments args (NULL-
 * terminated, or NULL for none) and waits up to timeout_ms until it
 * answers PING. Returns 0, or -1 when it exited or never answered (killed
 * then; its log is on stderr). */
int sluiced_fixture_launch(sluiced_fixture *f, const char *const *args, int timeout_ms);

/* init in a temp dir, write_config(yaml), launch with no extra arguments
 * and a 10 s bound. */
int sluiced_fixture_start(sluiced_fixture *f, const char *yaml);

/* A blocking connection to the daemon's socket whose connect and commands
 * time out after timeout_ms, or NULL. */
redisContext *sluiced_fixture_connect(const sluiced_fixture *f, int timeout_ms);

/* 1 when PING over a new connection answers PONG within timeout_ms. */
int sluiced_fixture_ping(const sluiced_fixture *f, int timeout_ms);

/* Sends sig to the running daemon. Returns 0, or -1 when none runs. */
int sluiced_fixture_signal(const sluiced_fixture *f, int sig);

/* Waits up to timeout_ms for the daemon to exit and returns its wait
 * status; when it does not exit in time it is killed and -1 returned (-1
 * too when none runs). */
int sluiced_fixture_wait(sluiced_fixture *f, int timeout_ms);

/* Stops the daemon: SIGTERM (SIGKILL when hard), then sluiced_fixture_wait
 * with 15 s (60 s under valgrind). Removes an owned directory. Returns the
 * wait status, or -1 (none ran, or it had to be killed). */
int sluiced_fixture_stop(sluiced_fixture *f, int hard);

/* SIGKILLs and reaps every daemon still running and removes the owned
 * directories of those. Fixtures they belonged to may be gone (a failed
 * test's stack): only the record is used. */
void sluiced_fixture_kill_all(void);

#endif
