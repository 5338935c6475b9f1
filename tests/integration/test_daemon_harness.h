/* test_daemon_harness: what the daemon tests (test_daemon.c,
 * test_daemon_fleet.c) add to sluiced_fixture and redis_fixture.
 * Header-only, static functions, so each test executable stays one file
 * plus this.
 *
 * A daemon (daemon_proc, a sluiced_fixture) gets a private directory
 * (socket, config, log) under the Redis fixture's temp dir and a config
 * written by daemon_configure() against that Redis; sluiced_fixture starts
 * it (PR_SET_PDEATHSIG, bounded PING readiness) and records it, so that a
 * failed test's teardown (harness_kill_all) kills it. Besides: running a
 * command with its output captured, raw socket I/O for bytes no client
 * library would send, and INFO and STATUS readers. */
#ifndef SLUICE_TEST_DAEMON_HARNESS_H
#define SLUICE_TEST_DAEMON_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
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
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "proc.h"
#include "redis_fixture.h"
#include "sluiced_fixture.h"

/* Every helper is static; a test file need not use them all. */
#define HARNESS_FN static __attribute__((unused))

/* A sluiced of a test: pid, valgrind, dir, sock, config, log, vglog. */
typedef sluiced_fixture daemon_proc;

HARNESS_FN double now_ms(void) { return proc_now_ms(); }

HARNESS_FN void sleep_ms(int ms) { proc_sleep_ms(ms); }

/* The sluiced binary, or NULL with a message when SLUICE_BUILD_DIR is unset. */
HARNESS_FN const char *sluiced_path(void) { return sluiced_fixture_binary(); }

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
HARNESS_FN void daemon_init(daemon_proc *d, const char *base, const char *name) { sluiced_fixture_init(d, base, name); }

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
    return sluiced_fixture_write_config(d, text);
}

/* A connection whose connect and commands time out after 30 s, or NULL. */
HARNESS_FN redisContext *daemon_connect(const daemon_proc *d) { return sluiced_fixture_connect(d, 30000); }

/* One PING over a fresh connection: 1 when PONG came back. */
HARNESS_FN int daemon_pings(const daemon_proc *d) { return sluiced_fixture_ping(d, 30000); }

/* Starts sluiced on d->config, under valgrind when d->valgrind, and waits
 * until it answers PING (bounded by timeout_ms). Returns 0, or -1 (the
 * daemon exited or never answered; its log is on stderr). */
HARNESS_FN int daemon_start_args(daemon_proc *d, int timeout_ms) { return sluiced_fixture_launch(d, NULL, timeout_ms); }

HARNESS_FN int daemon_start(daemon_proc *d) { return daemon_start_args(d, 10000); }

/* Waits for the daemon to exit (bounded); returns its wait status, or -1
 * after killing it when it did not exit in time. */
HARNESS_FN int daemon_wait(daemon_proc *d, int timeout_ms) { return sluiced_fixture_wait(d, timeout_ms); }

/* SIGTERM and wait: returns the exit code (0 for a clean drain), or -1. */
HARNESS_FN int daemon_stop(daemon_proc *d) {
    int st = sluiced_fixture_stop(d, 0);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Kills every daemon still running (teardown after a failure). */
HARNESS_FN void harness_kill_all(void) { sluiced_fixture_kill_all(); }

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
/* ---- the metrics endpoint ---- */

/* A loopback TCP port free at the time of the call (for agent.metrics). */
HARNESS_FN int free_tcp_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* Sends request to 127.0.0.1:port and reads the answer (headers included)
 * into buf; returns its length, 0 when nothing answers. */
HARNESS_FN size_t http_get(int port, const char *request, char *buf, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    buf[0] = '\0';
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return 0;
    }
    raw_send(fd, request, strlen(request));
    int closed;
    size_t n = raw_read(fd, buf, cap, 5000, &closed);
    close(fd);
    return n;
}

/* The value of one series ("name{labels}") in a scrape, -1 when absent. */
HARNESS_FN double metric(const char *body, const char *series) {
    size_t n = strlen(series);
    for (const char *p = body; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ') return atof(p + n + 1);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return -1;
}

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

/* A field of the daemon's INFO, -1 when absent or unanswered. */
HARNESS_FN double info_num(const daemon_proc *d, const char *field) {
    char *info = daemon_info(d);
    double v = info ? info_field(info, field) : -1;
    free(info);
    return v;
}

/* Polls INFO every 10 ms until field >= min (bounded). Returns 1 when it
 * got there. */
HARNESS_FN int daemon_wait_info(const daemon_proc *d, const char *field, double min, int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        if (info_num(d, field) >= min) return 1;
        if (now_ms() >= deadline) return 0;
        sleep_ms(10);
    }
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

/* 1 when the binary was built with AddressSanitizer (valgrind cannot run it). */
HARNESS_FN int binary_is_sanitized(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 16];
    const char needle[] = "__asan_init";
    size_t n, keep = 0;
    int found = 0;
    while (!found && (n = fread(buf + keep, 1, sizeof(buf) - keep, f)) > 0) {
        n += keep;
        found = memmem(buf, n, needle, sizeof(needle) - 1) != NULL;
        keep = sizeof(needle) - 1;
        memmove(buf, buf + n - keep, keep);
    }
    fclose(f);
    return found;
}

/* Whether sluiced can run under valgrind here: 1, or 0 after saying why
 * not (valgrind missing, or sluiced built with the sanitizers; then the
 * caller skips: tests/valgrind.sh runs it on a plain build). */
HARNESS_FN int valgrind_usable(void) {
    char out[4096];
    char *probe[] = {"valgrind", "--version", NULL};
    if (run_capture(probe, NULL, out, sizeof(out)) != 0) {
        fprintf(stderr, "  SKIPPED: valgrind is not installed\n");
        return 0;
    }
    if (binary_is_sanitized(sluiced_path())) {
        fprintf(stderr, "  SKIPPED: sluiced is built with sanitizers (valgrind cannot run it); "
                        "tests/valgrind.sh runs this test on a plain build\n");
        return 0;
    }
    return 1;
}

#endif