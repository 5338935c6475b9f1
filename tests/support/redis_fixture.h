/* redis_fixture: starts a private redis-server for one test process.
 *
 * The server listens on a UNIX socket in a fresh temp dir (and, for cluster
 * mode, on a loopback port). It is started with PR_SET_PDEATHSIG so it dies
 * with the test even when the test crashes, and redis_fixture_stop() removes
 * the directory. Depends on hiredis and the redis-server binary on PATH (or
 * $SLUICE_REDIS_SERVER). */
#ifndef SLUICE_REDIS_FIXTURE_H
#define SLUICE_REDIS_FIXTURE_H

#include <sys/types.h>
#include <hiredis/hiredis.h>

typedef struct redis_fixture {
    pid_t pid;
    int port; /* TCP port on 127.0.0.1, 0 when only the socket */
    int cluster;
    int sentinel;    /* a Sentinel (config file in dir) */
    char extra[256]; /* extra arguments, space-separated (start_ex) */
    char dir[256];
    char sock[300];
} redis_fixture;

/* Starts redis-server. cluster == 1 starts a one-node Redis Cluster that
 * owns every slot, so scripts that touch keys of two slots fail as they
 * would on a real cluster; cluster == 2 starts a cluster-enabled node that
 * owns nothing (to be joined by redis_cluster_create). Returns 0, or -1
 * with a message on stderr. */
int redis_fixture_start(redis_fixture *f, int cluster);

/* Joins n cluster-enabled nodes (started with cluster == 2) into one Redis
 * Cluster with `replicas` replicas per master (redis-cli --cluster create)
 * and waits until every node reports cluster_state:ok. node_timeout_ms
 * was given at start. Returns 0 or -1. */
int redis_cluster_create(redis_fixture *nodes, int n, int replicas);

/* Starts redis-server on a TCP port (and the socket) with extra
 * space-separated arguments, e.g. "--replicaof 127.0.0.1 7000". With
 * sentinel_of > 0 starts a Sentinel monitoring the master on that port as
 * "mymaster" (quorum 2, down after 1000 ms, failover timeout 3000 ms). */
int redis_fixture_start_ex(redis_fixture *f, const char *extra, int sentinel_of);

/* Blocking connection to a node's TCP port. */
redisContext *redis_fixture_connect_tcp(const redis_fixture *f);

/* Kills the server (SIGKILL when hard, else SIGTERM) and waits for it.
 * Keeps the directory so redis_fixture_restart() reuses the socket path. */
void redis_fixture_kill(redis_fixture *f, int hard);

/* Starts the server again on the same socket (after kill) and waits
 * until it answers PING (bounded: 10 s). */
int redis_fixture_restart(redis_fixture *f);

/* The same in two steps, for a caller that must not block meanwhile (a
 * test stamping replies as they arrive): restart_begin kills the server
 * if it runs and starts it again without waiting; wait_ready polls PING
 * until it answers (0) or timeout_ms pass (-1). */
int redis_fixture_restart_begin(redis_fixture *f);
int redis_fixture_wait_ready(redis_fixture *f, int timeout_ms);

/* Stops the server and removes its directory. Safe to call twice. */
void redis_fixture_stop(redis_fixture *f);

/* A new blocking connection to the fixture's socket, or NULL. */
redisContext *redis_fixture_connect(const redis_fixture *f);

#endif
