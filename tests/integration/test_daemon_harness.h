/* test_daemon_harness: runs real sluiced processes for the daemon tests
 * (test_daemon.c, test_daemon_fleet.c). Header-only, static functions, so
 * each test executable stays one file plus this.
 *
 * A daemon gets a private directory (socket, config, log) under the
 * fixture's temp dir. It is started with PR_SET_PDEATHSIG, so it dies with
 * the test even when the test crashes; every daemon started is also
 * recorded so that a failed test's teardown (harness_kill_all) kills it.
 * Readiness is a bounded PING poll on the socket, never a fixed sleep.
 * The binary is $SLUICE_BUILD_DIR/agent/sluiced (set by ctest). */
#ifndef SLUICE_TEST_DAEMON_HARNESS_H
#define SLUICE_TEST_DAEMON_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
/* Waits until every deployment of the daemon is governed through Redis
 * (STATUS shows mode redis for each), bounded. Returns 1 when it is. */
HARNESS_FN int daemon_wait_redis(const daemon_proc *d, int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        redisContext *c = daemon_connect(d);
        redisReply *r = c ? redisCommand(c, "STATUS") : NULL;
        int all = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
        for (size_t i = 0; all && i < r->elements; i++) {
            redisReply *e = r->element[i];
            int redis = 0;
            for (size_t k = 0; e->type == REDIS_REPLY_ARRAY && k + 1 < e->elements; k += 2)
                if (!strcmp(e->element[k]->str, "mode")) redis = !strcmp(e->element[k + 1]->str, "redis");
            all = redis;
        }
        if (r) freeReplyObject(r);
        if (c) redisFree(c);
        if (all) return 1;
        sleep_ms(10);
    }
    return 0;
}

#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_fixture.h"

#define HARNESS_MAX_DAEMONS 16
/* Every helper is static; a test file need not use them all. */
#define HARNESS_FN static __attribute__((unused))

typedef struct daemon_proc {
    pid_t pid;
    int valgrind;
    char dir[300];
    char sock[400];
    char config[400];
    char log[400];
    char vglog[400];
} daemon_proc;

static daemon_proc *harness_daemons[HARNESS_MAX_DAEMONS];

HARNESS_FN double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

HARNESS_FN void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The sluiced binary, or NULL with a message when SLUICE_BUILD_DIR is unset. */
HARNESS_FN const char *sluiced_path(void) {
    static char path[600];
    const char *dir = getenv("SLUICE_BUILD_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "SLUICE_BUILD_DIR is not set: run under ctest, or export "
                        "SLUICE_BUILD_DIR=<build dir> (the sluiced binary is <build dir>/agent/sluiced)\n");
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/agent/sluiced", dir);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "%s is missing or not executable (build the sluiced target)\n", path);
        return NULL;
    }
    return path;
}

HARNESS_FN int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Reads a whole (small) file into a malloc'd string, "" when missing. */
HARNESS_FN char *read_file_all(const char *path) {
    FILE *f = fopen(path, "r");
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    if (f) {
        size_t got;
        while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
            n += got;
            if (cap - n - 1 == 0) {
                char *nb = realloc(buf, cap * 2);
                if (!nb) break;
                buf = nb;
                cap *= 2;
            }
        }
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* Prepares a daemon in base/name: its socket and config paths. */
HARNESS_FN void daemon_init(daemon_proc *d, const char *base, const char *name) {
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "%.200s/%.40s", base, name);
    mkdir(d->dir, 0700);
    snprintf(d->sock, sizeof(d->sock), "%s/agent.sock", d->dir);
    snprintf(d->config, sizeof(d->config), "%s/sluiced.yaml", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/sluiced.log", d->dir);
    snprintf(d->vglog, sizeof(d->vglog), "%s/valgrind.log", d->dir);
}

/* Writes d's config: the agent section (socket, plus extra agent lines)
 * and the deployments text, against the Redis of fx. */
HARNESS_FN int daemon_configure(daemon_proc *d, const redis_fixture *fx, const char *agent_extra,
                            const char *deployments) {
    char text[8192];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  timeout_ms: 500\n  connect_timeout_ms: 500\n"
             "agent:\n  socket: %s\n  socket_mode: \"0600\"\n  log_level: debug\n%s"
             "deployments:\n%s",
             fx->sock, d->sock, agent_extra ? agent_extra : "", deployments);
    return write_file(d->config, text);
}

HARNESS_FN redisContext *daemon_connect(const daemon_proc *d) {
    struct timeval tv = {30, 0};
    redisContext *c = redisConnectUnixWithTimeout(d->sock, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* One PING over a fresh connection: 1 when PONG came back. */
HARNESS_FN int daemon_pings(const daemon_proc *d) {
    redisContext *c = daemon_connect(d);
    if (!c) return 0;
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

HARNESS_FN void harness_register(daemon_proc *d) {
    for (int i = 0; i < HARNESS_MAX_DAEMONS; i++) {
        if (!harness_daemons[i]) {
            harness_daemons[i] = d;
            return;
        }
    }
}

HARNESS_FN void harness_unregister(daemon_proc *d) {
    for (int i = 0; i < HARNESS_MAX_DAEMONS; i++)
        if (harness_daemons[i] == d) harness_daemons[i] = NULL;
}

/* Starts sluiced with extra arguments (NULL-terminated list after
 * "--config FILE"), under valgrind when d->valgrind. Waits until it answers
 * PING (bounded by timeout_ms). Returns 0, or -1 (the daemon exited or
 * never answered; its log says why). */
HARNESS_FN int daemon_start_args(daemon_proc *d, int timeout_ms) {
    const char *bin = sluiced_path();
    if (!bin) return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        if (d->valgrind) {
            char logopt[450];
            snprintf(logopt, sizeof(logopt), "--log-file=%s", d->vglog);
            execlp("valgrind", "valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                   "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99", "--track-fds=no",
                   logopt, bin, "--config", d->config, (char *)NULL);
        } else {
            execl(bin, bin, "--config", d->config, (char *)NULL);
        }
        _exit(127);
    }
    d->pid = pid;
    harness_register(d);
    double deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        if (daemon_pings(d)) return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            d->pid = 0;
            harness_unregister(d);
            char *log = read_file_all(d->log);
            fprintf(stderr, "sluiced exited during start (status %d); log:\n%s\n", st, log ? log : "");
            free(log);
            return -1;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "sluiced did not answer PING on %s within %d ms\n", d->sock, timeout_ms);
    return -1;
}

HARNESS_FN int daemon_start(daemon_proc *d) { return daemon_start_args(d, 10000); }

/* Waits for the daemon to exit (bounded); returns its wait status, or -1
 * after killing it when it did not exit in time. */
HARNESS_FN int daemon_wait(daemon_proc *d, int timeout_ms) {
    if (d->pid <= 0) return -1;
    double deadline = now_ms() + timeout_ms;
    int st = 0;
    while (now_ms() < deadline) {
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid) {
            d->pid = 0;
            harness_unregister(d);
            return st;
        }
        sleep_ms(5);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = 0;
    harness_unregister(d);
    return -1;
}

/* SIGTERM and wait: returns the exit code (0 for a clean drain), or -1. */
HARNESS_FN int daemon_stop(daemon_proc *d) {
    if (d->pid <= 0) return -1;
    kill(d->pid, SIGTERM);
    int st = daemon_wait(d, d->valgrind ? 60000 : 15000);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Kills every daemon still running (teardown after a failure). */
HARNESS_FN void harness_kill_all(void) {
    for (int i = 0; i < HARNESS_MAX_DAEMONS; i++) {
        daemon_proc *d = harness_daemons[i];
        if (d && d->pid > 0) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
            d->pid = 0;
        }
        harness_daemons[i] = NULL;
    }
}

/* Runs argv (argv[0] looked up in PATH) with stdout and stderr captured
 * into out (NUL-terminated, truncated to outlen). Returns the exit code,
 * or -1 when it could not run or was killed. stdin_text (optional) is
 * written to its stdin. */
HARNESS_FN int run_capture(char *const argv[], const char *stdin_text, char *out, size_t outlen) {
    int po[2], pi[2];
    if (pipe(po) != 0 || pipe(pi) != 0) return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        dup2(pi[0], 0);
        dup2(po[1], 1);
        dup2(po[1], 2);
        close(po[0]);
        close(pi[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(po[1]);
    close(pi[0]);
    if (stdin_text) {
        ssize_t w = write(pi[1], stdin_text, strlen(stdin_text));
        (void)w;
    }
    close(pi[1]);
    size_t n = 0;
    for (;;) {
        char tmp[4096];
        ssize_t r = read(po[0], tmp, sizeof(tmp));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r && n + 1 < outlen; i++) out[n++] = tmp[i];
    }
    if (outlen) out[n < outlen ? n : outlen - 1] = '\0';
    close(po[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A raw UNIX socket client, for bytes no client library would send. */
HARNESS_FN int raw_connect(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%.107s", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

HARNESS_FN int raw_send(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Reads until the peer closes or timeout_ms pass. Returns the bytes read
 * (NUL-terminated in buf) and sets *closed when the peer closed. */
HARNESS_FN size_t raw_read(int fd, char *buf, size_t cap, int timeout_ms, int *closed) {
    size_t n = 0;
    double deadline = now_ms() + timeout_ms;
    *closed = 0;
    while (n + 1 < cap) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

/* The value of "field:" in an INFO text, as a double (-1 when absent). */
HARNESS_FN double info_field(const char *info, const char *field) {
    size_t fl = strlen(field);
    for (const char *p = info; p && *p;) {
        if (!strncmp(p, field, fl) && p[fl] == ':') return atof(p + fl + 1);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

/* INFO of a daemon as a malloc'd string (NULL on failure). */
HARNESS_FN char *daemon_info(const daemon_proc *d) {
    redisContext *c = daemon_connect(d);
    if (!c) return NULL;
    redisReply *r = redisCommand(c, "INFO");
    char *s = NULL;
    if (r && r->type == REDIS_REPLY_STRING) s = strdup(r->str);
    if (r) freeReplyObject(r);
    redisFree(c);
    return s;
}

/* The value of a STATUS field for deployment dep, copied into out ("" if
 * absent or on error). */
HARNESS_FN void daemon_status_field(const daemon_proc *d, const char *dep, const char *field, char *out, size_t n) {
    out[0] = '\0';
    redisContext *c = daemon_connect(d);
    if (!c) return;
    redisReply *r = redisCommand(c, "STATUS %s", dep);
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, field) &&
                r->element[i + 1]->type == REDIS_REPLY_STRING) {
                snprintf(out, n, "%s", r->element[i + 1]->str);
                break;
            }
        }
    }
    if (r) freeReplyObject(r);
    redisFree(c);
}

/* Polls STATUS until field equals want (bounded). Returns 1 when it did. */
HARNESS_FN int daemon_wait_status(const daemon_proc *d, const char *dep, const char *field, const char *want,
                              int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    char v[128];
    while (now_ms() < deadline) {
        daemon_status_field(d, dep, field, v, sizeof(v));
        if (!strcmp(v, want)) return 1;
        sleep_ms(20);
    }
    return 0;
}

/* Waits until every deployment of the daemon is governed through Redis
 * (STATUS shows mode redis for each), bounded. Returns 1 when it is. */
HARNESS_FN int daemon_wait_redis(const daemon_proc *d, int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    while (now_ms() < deadline) {
        redisContext *c = daemon_connect(d);
        redisReply *r = c ? redisCommand(c, "STATUS") : NULL;
        int all = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
        for (size_t i = 0; all && i < r->elements; i++) {
            redisReply *e = r->element[i];
            int redis = 0;
            for (size_t k = 0; e->type == REDIS_REPLY_ARRAY && k + 1 < e->elements; k += 2)
                if (!strcmp(e->element[k]->str, "mode")) redis = !strcmp(e->element[k + 1]->str, "redis");
            all = redis;
        }
        if (r) freeReplyObject(r);
        if (c) redisFree(c);
        if (all) return 1;
        sleep_ms(10);
    }
    return 0;
}

#endif
