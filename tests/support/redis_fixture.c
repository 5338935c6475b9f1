/* redis_fixture: see redis_fixture.h. */
#define _GNU_SOURCE
#include "redis_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

static int port_free(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* A loopback port that is free, as is port + 10000 (the cluster bus).
 * Ports handed out by this process are never handed out again, so nodes
 * started back to back do not collide before they bind. */
static int free_port(void) {
    static unsigned seed;
    static int given[256], ngiven;
    if (!seed) seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 200; tries++) {
        int port = 20000 + (int)(rand_r(&seed) % 30000);
        int dup = 0;
        for (int i = 0; i < ngiven; i++) dup |= given[i] == port;
        if (dup || !port_free(port) || !port_free(port + 10000)) continue;
        if (ngiven < 256) given[ngiven++] = port;
        return port;
    }
    return -1;
}

/* Starts redis-server for f without waiting for it. Returns 0 or -1. */
static int spawn_nowait(redis_fixture *f) {
    const char *bin = getenv("SLUICE_REDIS_SERVER");
    char port[16], nodes[400], conf[400];
    if (!bin) bin = "redis-server";
    snprintf(port, sizeof(port), "%d", f->port);
    snprintf(nodes, sizeof(nodes), "%s/nodes.conf", f->dir);
    snprintf(conf, sizeof(conf), "%s/sentinel.conf", f->dir);
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    if (f->sentinel) {
        argv[n++] = conf;
        argv[n++] = "--sentinel";
    }
    argv[n++] = "--port";
    argv[n++] = port;
    if (f->port) {
        argv[n++] = "--bind";
        argv[n++] = "127.0.0.1";
    }
    argv[n++] = "--unixsocket";
    argv[n++] = f->sock;
    argv[n++] = "--unixsocketperm";
    argv[n++] = "700";
    argv[n++] = "--dir";
    argv[n++] = f->dir;
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    argv[n++] = "--loglevel";
    argv[n++] = "warning";
    if (!f->sentinel) {
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--appendonly";
        argv[n++] = "no";
    }
    if (f->cluster) {
        argv[n++] = "--cluster-enabled";
        argv[n++] = "yes";
        argv[n++] = "--cluster-config-file";
        argv[n++] = nodes;
        argv[n++] = "--cluster-node-timeout";
        argv[n++] = "1000";
    }
    char extra[256];
    snprintf(extra, sizeof(extra), "%s", f->extra);
    for (char *save = NULL, *tok = strtok_r(extra, " ", &save); tok && n < 62; tok = strtok_r(NULL, " ", &save))
        argv[n++] = tok;
    argv[n] = NULL;
    pid_t pid = proc_spawn((char *const *)argv, getenv("SLUICE_TEST_VERBOSE") ? NULL : "/dev/null", 0);
    if (pid < 0) return -1;
    f->pid = pid;
    return 0;
}

int redis_fixture_wait_ready(redis_fixture *f, int timeout_ms) {
    if (f->pid <= 0) return -1;
    /* Readiness: poll with PING (bounded), not a fixed sleep. */
    int rc = proc_wait_ping(f->pid, f->sock, f->port, timeout_ms, NULL);
    if (rc == -1) {
        fprintf(stderr, "redis_fixture: redis-server exited during start (%s)\n", f->sock);
        f->pid = 0;
    } else if (rc == -2) {
        fprintf(stderr, "redis_fixture: redis-server did not answer PING on %s\n", f->sock);
    }
    return rc == 0 ? 0 : -1;
}

static int spawn(redis_fixture *f) {
    if (spawn_nowait(f) != 0) return -1;
    return redis_fixture_wait_ready(f, 10000);
}

static int fixture_dir(redis_fixture *f) {
    if (proc_mkdtemp(f->dir, sizeof(f->dir), "sluice-test") != 0) {
        perror("redis_fixture: mkdtemp");
        return -1;
    }
    snprintf(f->sock, sizeof(f->sock), "%s/redis.sock", f->dir);
    return 0;
}

int redis_fixture_start_ex(redis_fixture *f, const char *extra, int sentinel_of) {
    memset(f, 0, sizeof(*f));
    if (fixture_dir(f) != 0 || (f->port = free_port()) < 0) return -1;
    snprintf(f->extra, sizeof(f->extra), "%s", extra ? extra : "");
    if (sentinel_of > 0) {
        char conf[400];
        snprintf(conf, sizeof(conf), "%s/sentinel.conf", f->dir);
        FILE *c = fopen(conf, "w");
        if (!c) return -1;
        fprintf(c,
                "sentinel monitor mymaster 127.0.0.1 %d 2\n"
                "sentinel down-after-milliseconds mymaster 1000\n"
                "sentinel failover-timeout mymaster 3000\n",
                sentinel_of);
        fclose(c);
        f->sentinel = 1;
    }
    return spawn(f);
}

int redis_fixture_start(redis_fixture *f, int cluster) {
    memset(f, 0, sizeof(*f));
    if (fixture_dir(f) != 0) return -1;
    f->cluster = cluster;
    if (cluster && (f->port = free_port()) < 0) return -1;
    if (spawn(f) != 0) return -1;
    if (cluster == 1) {
        redisContext *c = redis_fixture_connect(f);
        redisReply *r = c ? redisCommand(c, "CLUSTER ADDSLOTSRANGE 0 16383") : NULL;
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        /* Wait until the node reports the cluster as ok (bounded). */
        for (int i = 0; ok && i < 500; i++) {
            r = redisCommand(c, "CLUSTER INFO");
            int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
            if (r) freeReplyObject(r);
            if (up) break;
            proc_sleep_ms(10);
        }
        if (c) redisFree(c);
        if (!ok) {
            fprintf(stderr, "redis_fixture: CLUSTER ADDSLOTSRANGE failed\n");
            return -1;
        }
    }
    return 0;
}

void redis_fixture_kill(redis_fixture *f, int hard) {
    if (f->pid > 0) {
        kill(f->pid, hard ? SIGKILL : SIGTERM);
        proc_wait(f->pid, -1, NULL);
        f->pid = 0;
    }
}

int redis_fixture_restart_begin(redis_fixture *f) {
    redis_fixture_kill(f, 1);
    unlink(f->sock);
    return spawn_nowait(f);
}

int redis_fixture_restart(redis_fixture *f) {
    if (redis_fixture_restart_begin(f) != 0) return -1;
    return redis_fixture_wait_ready(f, 10000);
}

void redis_fixture_stop(redis_fixture *f) {
    redis_fixture_kill(f, 0);
    if (f->dir[0]) {
        if (proc_rmtree(f->dir) != 0) fprintf(stderr, "redis_fixture: could not remove %s\n", f->dir);
        f->dir[0] = '\0';
    }
}

redisContext *redis_fixture_connect(const redis_fixture *f) {
    redisContext *c = redisConnectUnix(f->sock);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    return c;
}

redisContext *redis_fixture_connect_tcp(const redis_fixture *f) {
    redisContext *c = redisConnect("127.0.0.1", f->port);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    return c;
}

int redis_cluster_create(redis_fixture *nodes, int n, int replicas) {
    char cmd[2048];
    int len = snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
    for (int i = 0; i < n; i++) len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " 127.0.0.1:%d", nodes[i].port);
    snprintf(cmd + len, sizeof(cmd) - (size_t)len, " --cluster-replicas %d --cluster-yes >%s 2>&1", replicas,
             getenv("SLUICE_TEST_VERBOSE") ? "/dev/stderr" : "/dev/null");
    if (system(cmd) != 0) {
        fprintf(stderr, "redis_fixture: %s failed\n", cmd);
        return -1;
    }
    /* Bounded wait until every node agrees the cluster is up. */
    for (int tries = 0; tries < 1000; tries++) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            redisContext *c = redis_fixture_connect_tcp(&nodes[i]);
            redisReply *r = c ? redisCommand(c, "CLUSTER INFO") : NULL;
            ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
            if (r) freeReplyObject(r);
            if (c) redisFree(c);
        }
        if (ok) return 0;
        proc_sleep_ms(20);
    }
    fprintf(stderr, "redis_fixture: cluster did not reach cluster_state:ok\n");
    return -1;
}
