/* sluiced_fixture: runs a real sluiced process for a test or benchmark.
 *
 * Writes the given YAML to a config file in a fresh temp dir (the agent's
 * socket lives there too), starts $SLUICE_BUILD_DIR/agent/sluiced with
 * PR_SET_PDEATHSIG so it dies with the caller, and waits (bounded) until it
 * answers PING on its socket. Stop sends SIGTERM and reaps it. */
#ifndef SLUICE_SLUICED_FIXTURE_H
#define SLUICE_SLUICED_FIXTURE_H

#include <sys/types.h>

typedef struct sluiced_fixture {
    pid_t pid;
    char dir[256];
    char config[300];
    char sock[300];
    char log[300];
} sluiced_fixture;

/* The sluiced binary: $SLUICE_BUILD_DIR/agent/sluiced, or NULL (with a
 * message on stderr) when it is not built. */
const char *sluiced_fixture_binary(void);

/* yaml may contain "%SOCK%", replaced by the fixture's socket path. Returns
 * 0, or -1 with a message on stderr (the daemon's log is echoed). */
int sluiced_fixture_start(sluiced_fixture *f, const char *yaml);

/* SIGTERM (or SIGKILL when hard), wait, and return the exit status as
 * waitpid reports it; removes the directory unless keep is set. */
int sluiced_fixture_stop(sluiced_fixture *f, int hard);

#endif
