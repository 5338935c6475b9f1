/* test_lib_harness: what libsluice's integration tests (test_lib.c,
 * test_lib_call.c, test_lib_curl.c) run against, besides redis_fixture:
 *   - a small local HTTP provider on 127.0.0.1 (plain sockets, one thread
 *     per connection) that answers 200 with usage JSON, 429 with
 *     Retry-After, 503, quota errors and slow responses (/ok, /flaky
 *     [?code=503 | ?form=date | ?form=ms&wait=MS], /429?ra=N, /503, /quota,
 *     /slow?ms=N, /big?bytes=N), and logs the arrival time, status and
 *     the wait a 429 asked for of every request;
 *   - lib_daemon: a sluiced (sluiced_fixture) on a private socket with the
 *     config these tests share;
 *   - Redis' own view of a deployment (the status script), to wait on a
 *     condition (a grant held, a pause applied) instead of a sleep;
 *   - lib_suite: the fixture the three suites share (Redis, two daemons,
 *     the HTTP provider, governors in either mode).
 * Requests are logged when their answer is decided: /slow's at arrival,
 * before its wait. Header-only, static functions: each test stays one
 * file plus this. */
#ifndef SLUICE_TEST_LIB_HARNESS_H
#define SLUICE_TEST_LIB_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "proc.h"
#include "redis_fixture.h"
#include "sluice.h"
#include "script_call.h"
#include "sluiced_fixture.h"

/* The two ways a test opens a governor. */
enum { EMBEDDED = 0, DAEMON = 1 };

/* How late a blocking call may return after its deadline: the OS waking
 * the thread, under ASan on a 2-core machine. */
#define DEADLINE_SLACK_MS 25.0

#define H_FN static __attribute__((unused))

H_FN double h_now(void) { return proc_now_ms(); }

H_FN void h_sleep(int ms) { proc_sleep_ms(ms); }

/* ---- the HTTP provider -------------------------------------------------------- */

#define HTTP_LOG_MAX 8192

typedef struct http_hit {
    double t_ms; /* arrival, h_now() */
    int status;
    char path[48];
    double wait_ms; /* /flaky's 429: the wait its headers ask for from now, else -1 */
} http_hit;

typedef struct http_server {
    int fd, port;
    pthread_t thread;
    volatile int stop;
    pthread_mutex_t mu;
    int active; /* connection threads running */
    http_hit log[HTTP_LOG_MAX];
    size_t nlog;
    int flaky_left; /* /flaky answers 429 while > 0 */
    int flaky_ra_s; /* its Retry-After */
} http_server;

typedef struct http_conn {
    http_server *s;
    int fd;
} http_conn;

static const char http_ok_body[] = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
                                   "\"message\":{\"role\":\"assistant\",\"content\":\"hi\"}}],"
                                   "\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":12,\"total_tokens\":42}}";

static long h_query(const char *path, const char *key, long def) {
    const char *q = strchr(path, '?');
    if (!q) return def;
    const char *p = strstr(q, key);
    return p ? strtol(p + strlen(key), NULL, 10) : def;
}

static void h_send(int fd, int status, const char *reason, const char *extra, const char *body) {
    char head[1024];
    size_t blen = strlen(body);
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s\r\n",
                     status, reason, blen, extra ? extra : "");
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) < 0) return;
    size_t off = 0;
    while (off < blen) {
        ssize_t w = send(fd, body + off, blen - off, MSG_NOSIGNAL);
        if (w <= 0) return;
        off += (size_t)w;
    }
}

static void *h_conn_main(void *arg) {
    http_conn *c = arg;
    http_server *s = c->s;
    char req[8192];
    size_t n = 0;
    /* Read the head and a Content-Length body (requests are small). */
    while (n < sizeof(req) - 1) {
        ssize_t r = recv(c->fd, req + n, sizeof(req) - 1 - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
        req[n] = '\0';
        char *end = strstr(req, "\r\n\r\n");
        if (!end) continue;
        const char *cl = strcasestr(req, "content-length:");
        size_t want = cl ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
        if (n >= (size_t)(end + 4 - req) + want) break;
    }
    req[n] = '\0';
    double t = h_now();
    char path[256] = "";
    sscanf(req, "%*s %255s", path);
    /* Decide the response, log it (before sending, so a client that
     * returns finds its request in the log), then send it. */
    int status = 200;
    const char *reason = "OK", *body = http_ok_body;
    char extra[160] = "", *big = NULL, gbody[320];
    double wait_ms = -1;
    int slow_ms = 0;
    if (strncmp(path, "/ok", 3) == 0) {
        snprintf(extra, sizeof(extra), "x-ratelimit-remaining-requests: 100\r\n");
    } else if (strncmp(path, "/flaky", 6) == 0) {
        pthread_mutex_lock(&s->mu);
        int fail = s->flaky_left > 0;
        if (fail) s->flaky_left--;
        int ra = s->flaky_ra_s;
        pthread_mutex_unlock(&s->mu);
        if (fail && h_query(path, "code=", 429) == 503) {
            status = 503;
            body = "{\"error\":{\"message\":\"overloaded\"}}";
        } else if (fail) {
            status = 429;
            const char *form = strstr(path, "form=");
            if (form && strncmp(form + 5, "date", 4) == 0) {
                /* Retry-After as an HTTP-date (IMF-fixdate): ra s after the
                 * next whole second, so the wait is in (ra, ra + 1] s. */
                struct timespec w;
                clock_gettime(CLOCK_REALTIME, &w);
                time_t at = w.tv_sec + ra + 1;
                struct tm tm;
                gmtime_r(&at, &tm);
                char date[64];
                strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
                snprintf(extra, sizeof(extra), "Retry-After: %s\r\n", date);
                wait_ms = (double)at * 1000 - ((double)w.tv_sec * 1000 + (double)w.tv_nsec / 1e6);
            } else if (form && strncmp(form + 5, "gemini", 6) == 0) {
                /* Gemini's 429: no Retry-After, the wait is the body's
                 * google.rpc.RetryInfo retryDelay. */
                snprintf(gbody, sizeof(gbody),
                         "{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota, please "
                         "check your plan and billing details.\",\"status\":\"RESOURCE_EXHAUSTED\","
                         "\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
                         "\"retryDelay\":\"%ds\"}]}}",
                         ra);
                wait_ms = ra * 1000.0;
                body = gbody;
            } else if (form && strncmp(form + 5, "ms", 2) == 0) {
                long ms = h_query(path, "wait=", 700);
                snprintf(extra, sizeof(extra), "retry-after-ms: %ld\r\n", ms);
                wait_ms = (double)ms;
            } else {
                snprintf(extra, sizeof(extra), "Retry-After: %d\r\nx-ratelimit-remaining-requests: 0\r\n", ra);
                wait_ms = ra * 1000.0;
            }
            if (body == http_ok_body)
                body = "{\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached\"}}";
        }
    } else if (strncmp(path, "/429", 4) == 0) {
        status = 429;
        snprintf(extra, sizeof(extra), "Retry-After: %ld\r\n", h_query(path, "ra=", 1));
        body = "{\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached\"}}";
    } else if (strncmp(path, "/503", 4) == 0) {
        status = 503;
        body = "{\"error\":{\"message\":\"The server is overloaded\"}}";
    } else if (strncmp(path, "/quota", 6) == 0) {
        status = 429;
        body = "{\"error\":{\"code\":\"insufficient_quota\",\"type\":\"insufficient_quota\","
               "\"message\":\"You exceeded your current quota\"}}";
    } else if (strncmp(path, "/slow", 5) == 0) {
        slow_ms = (int)h_query(path, "ms=", 1000);
    } else if (strncmp(path, "/big", 4) == 0) {
        size_t len = (size_t)h_query(path, "bytes=", 100000);
        big = malloc(len + 1);
        memset(big, 'x', len);
        big[len] = '\0';
        body = big;
    } else {
        status = 404;
        body = "{}";
    }
    if (status == 429) reason = "Too Many Requests";
    if (status == 503) reason = "Service Unavailable";
    if (status == 404) reason = "Not Found";
    pthread_mutex_lock(&s->mu);
    if (s->nlog < HTTP_LOG_MAX) {
        http_hit *h = &s->log[s->nlog++];
        h->t_ms = t;
        h->status = status;
        h->wait_ms = wait_ms;
        snprintf(h->path, sizeof(h->path), "%.47s", path);
    }
    pthread_mutex_unlock(&s->mu);
    /* /slow is logged on arrival: a test can tell a request in progress. */
    if (slow_ms) h_sleep(slow_ms);
    h_send(c->fd, status, reason, extra, body);
    free(big);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c);
    return NULL;
}

static void *h_accept_main(void *arg) {
    http_server *s = arg;
    while (!s->stop) {
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) continue;
        http_conn *c = malloc(sizeof(*c));
        c->s = s;
        c->fd = fd;
        pthread_mutex_lock(&s->mu);
        s->active++;
        pthread_mutex_unlock(&s->mu);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, h_conn_main, c) != 0) {
            close(fd);
            free(c);
            pthread_mutex_lock(&s->mu);
            s->active--;
            pthread_mutex_unlock(&s->mu);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

/* Starts the provider on an ephemeral loopback port. Returns 0 or -1. */
H_FN int http_start(http_server *s) {
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0) return -1;
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (bind(s->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s->fd, 256) != 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->thread, NULL, h_accept_main, s) == 0 ? 0 : -1;
}

H_FN void http_stop(http_server *s) {
    s->stop = 1;
    pthread_join(s->thread, NULL);
    close(s->fd);
    for (int i = 0; i < 1000; i++) { /* connection threads finish their reply */
        pthread_mutex_lock(&s->mu);
        int active = s->active;
        pthread_mutex_unlock(&s->mu);
        if (!active) break;
        h_sleep(5);
    }
}

H_FN void http_reset(http_server *s, int flaky_left, int flaky_ra_s) {
    pthread_mutex_lock(&s->mu);
    s->nlog = 0;
    s->flaky_left = flaky_left;
    s->flaky_ra_s = flaky_ra_s;
    pthread_mutex_unlock(&s->mu);
}

H_FN void http_url(const http_server *s, const char *path, char *buf, size_t n) {
    snprintf(buf, n, "http://127.0.0.1:%d%s", s->port, path);
}

/* ---- Redis' view -------------------------------------------------------------- */

/* A numeric field of Redis' own status of dep (the status script, over a
 * new connection to fx), -1 when absent. */
H_FN long long h_redis_status(const redis_fixture *fx, const char *dep, const char *field) {
    redisContext *c = redis_fixture_connect(fx);
    if (!c) return -1;
    redisReply *r = script_callv(c, SCRIPT_STATUS, dep, NULL);
    long long v = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, field) != 0) continue;
        redisReply *x = r->element[i + 1];
        v = x->type == REDIS_REPLY_INTEGER ? x->integer : (x->type == REDIS_REPLY_STRING ? atoll(x->str) : -1);
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return v;
}

typedef struct h_status_at_least {
    const redis_fixture *fx;
    const char *dep, *field;
    long long want;
} h_status_at_least;

H_FN int h_status_reached(void *arg) {
    h_status_at_least *w = arg;
    return h_redis_status(w->fx, w->dep, w->field) >= w->want;
}

/* Waits (bounded) until Redis' status of dep has field >= want: a caller
 * holds its grant (outstanding_grants), a settle reached the fleet
 * (paused_ms, quota_out_ms, settled_*). Fails the cmocka test (include
 * cmocka.h first) when it does not come within ms. */
H_FN void h_wait_redis_status(const redis_fixture *fx, const char *dep, const char *field, long long want, int ms) {
    h_status_at_least w = {fx, dep, field, want};
    char what[160];
    snprintf(what, sizeof(what), "%s %s >= %lld in Redis' status", dep, field, want);
    PROC_POLL_OR_FAIL(h_status_reached, &w, ms, what);
}

/* An engine has joined the fleet when it is in some deployment's agents
 * zset (it announces every configured deployment once Redis is up,
 * engine__on_redis_up). Until then its calls are paced locally, and a local tail
 * handed over costs one more slot (engine_local.c): a test that judges
 * the fleet's schedule waits for this first. */
typedef struct h_agent_at {
    const redis_fixture *fx;
    const char *agent;
} h_agent_at;

H_FN int h_agent_joined(void *arg) {
    h_agent_at *w = arg;
    redisContext *c = redis_fixture_connect(w->fx);
    if (!c) return 0;
    int in = 0;
    redisReply *keys = redisCommand(c, "KEYS sluice:{*}:agents");
    for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements && !in; i++) {
        redisReply *r = redisCommand(c, "ZSCORE %s %s", keys->element[i]->str, w->agent);
        in = r && r->type == REDIS_REPLY_STRING;
        if (r) freeReplyObject(r);
    }
    if (keys) freeReplyObject(keys);
    redisFree(c);
    return in;
}

/* Takes every other agent out of the agents sets the new engine joined.
 * An engine closed by an earlier test says no goodbye (sl_close does not
 * leave the deployments it announced: a gap, not a test's choice), so once
 * its promise lapses it counts as silent and the fleet holds its share
 * back (lua/common.lua, sl_silent): half the rate for the next few
 * seconds, which made the embedded tests here fail now and then (a shed
 * hint of 1709 ms where the fleet's is 710 ms, a slot at 2 s instead of
 * 1 s). The tests here are about one engine at a time. */
H_FN void h_forget_other_agents(const redis_fixture *fx, const char *agent) {
    redisContext *c = redis_fixture_connect(fx);
    if (!c) fail_msg("cannot connect to the test's Redis");
    /* Only the embedded engines' deployments (prefix e-): the daemons of
     * the suite keep theirs (d-). */
    redisReply *keys = redisCommand(c, "KEYS sluice:{e-*}:agents");
    for (size_t i = 0; keys && keys->type == REDIS_REPLY_ARRAY && i < keys->elements; i++) {
        redisReply *m = redisCommand(c, "ZRANGE %s 0 -1", keys->element[i]->str);
        for (size_t j = 0; m && m->type == REDIS_REPLY_ARRAY && j < m->elements; j++) {
            if (strcmp(m->element[j]->str, agent) == 0) continue;
            redisReply *z = redisCommand(c, "ZREM %s %s", keys->element[i]->str, m->element[j]->str);
            if (z) freeReplyObject(z);
        }
        if (m) freeReplyObject(m);
    }
    if (keys) freeReplyObject(keys);
    redisFree(c);
}

/* ---- sluiced -------------------------------------------------------------------- */

/* A sluiced the library talks to (sock is what sl_options.socket_path gets). */
typedef sluiced_fixture lib_daemon;

/* The sluiced binary, or NULL when it is not built (the daemon-mode tests
 * then skip, saying so). */
H_FN const char *lib_sluiced_path(void) { return sluiced_fixture_binary(); }

/* Starts sluiced in base/name against fx with the given deployments YAML
 * (indented under `deployments:`), as agent `name` with a 200 ms
 * heartbeat. Returns 0, or -1 with its log on stderr. */
H_FN int lib_daemon_start(lib_daemon *d, const redis_fixture *fx, const char *base, const char *name,
                          const char *deployments) {
    if (sluiced_fixture_init(d, base, name) != 0) return -1;
    char text[8192];
    if ((size_t)snprintf(text, sizeof(text),
                         "redis:\n  url: unix://%s\n  timeout_ms: 5000\n  connect_timeout_ms: 5000\n"
                         "agent:\n  id: %s\n  socket: %s\n  socket_mode: \"0600\"\n  heartbeat_ms: 200\n"
                         "deployments:\n%s",
                         fx->sock, name, d->sock, deployments) >= sizeof(text))
        return -1;
    if (sluiced_fixture_write_config(d, text) != 0) return -1;
    return sluiced_fixture_launch(d, NULL, 10000);
}

/* SIGTERM, and SIGKILL when it has not exited in time. */
H_FN void lib_daemon_stop(lib_daemon *d) { sluiced_fixture_stop(d, 0); }

/* ---- the suites' fixture -------------------------------------------------------- */

/* What test_lib, test_lib_call and test_lib_curl each run against: one
 * private Redis, two sluiced daemons (agents "<tag>-d1" and "<tag>-d2")
 * serving the suite's deployments under the prefix "d", and, with
 * with_web, the local HTTP provider. Embedded governors get the same
 * deployments under the prefix "e", as agents "<tag>-agent-<n>". */
typedef void (*lib_deps_fn)(const char *prefix, char *out, size_t n);

typedef struct lib_suite {
    const char *name; /* the test program, for messages */
    const char *tag;  /* agent ids */
    lib_deps_fn deps;
    int with_web;
    redis_fixture fx;
    lib_daemon dmn[2];
    int have_daemon; /* sluiced is built and both daemons run */
    int next_agent;
    http_server web;
} lib_suite;

H_FN int lib_suite_setup(lib_suite *s) {
    if (redis_fixture_start(&s->fx, 0) != 0 || (s->with_web && http_start(&s->web) != 0)) return -1;
    if (!lib_sluiced_path()) {
        fprintf(stderr, "%s: $SLUICE_BUILD_DIR/agent/sluiced is not built: daemon mode is skipped\n", s->name);
        return 0;
    }
    char deps[4096], d1[32], d2[32];
    s->deps("d", deps, sizeof(deps));
    snprintf(d1, sizeof(d1), "%s-d1", s->tag);
    snprintf(d2, sizeof(d2), "%s-d2", s->tag);
    if (lib_daemon_start(&s->dmn[0], &s->fx, s->fx.dir, d1, deps) != 0 ||
        lib_daemon_start(&s->dmn[1], &s->fx, s->fx.dir, d2, deps) != 0)
        return -1;
    s->have_daemon = 1;
    return 0;
}

H_FN int lib_suite_teardown(lib_suite *s) {
    lib_daemon_stop(&s->dmn[0]);
    lib_daemon_stop(&s->dmn[1]);
    if (s->with_web) http_stop(&s->web);
    redis_fixture_stop(&s->fx);
    return 0;
}

/* True (and says so) when a daemon-mode test cannot run. */
H_FN int lib_suite_skip(const lib_suite *s, int mode) {
    if (mode == DAEMON && !s->have_daemon) {
        print_message("  daemon mode skipped: $SLUICE_BUILD_DIR/agent/sluiced is not built\n");
        return 1;
    }
    return 0;
}

/* A governor: embedded (its own engine, a new agent) or connected to
 * daemon `which`; fails the test when it cannot open. */
/* The engines' Redis timeouts are generous (5 s): no test here is about
 * losing Redis, and on a loaded machine a call that took over 500 ms cut
 * an embedded engine off, paced it locally and cost its tail one more slot
 * when it rejoined (test_lib's shed hint 1709 ms where the fleet's is
 * 710 ms, its cancelled tail slot missed by a second). */
H_FN sl_gov *lib_suite_open(lib_suite *s, int mode, int which) {
    sl_options o;
    sl_options_init(&o);
    char text[8192], agent[48];
    if (mode == DAEMON) {
        o.socket_path = s->dmn[which].sock;
    } else {
        char deps[4096];
        s->deps("e", deps, sizeof(deps));
        snprintf(text, sizeof(text),
                 "redis:\n  url: unix://%s\n  timeout_ms: 5000\n  connect_timeout_ms: 5000\n"
                 "agent:\n  heartbeat_ms: 200\ndeployments:\n%s",
                 s->fx.sock, deps);
        o.config_text = text;
        snprintf(agent, sizeof(agent), "%s-agent-%d", s->tag, ++s->next_agent);
        o.agent_id = agent;
    }
    sl_gov *g = NULL;
    int rc = sl_open(&o, &g);
    if (rc != 0) fail_msg("sl_open: %s: %s", sl_strerror(rc), sl_errmsg(NULL));
    if (mode != DAEMON) { /* the fleet's schedule from the first call */
        h_agent_at w = {&s->fx, agent};
        PROC_POLL_OR_FAIL(h_agent_joined, &w, 10000, "the embedded engine in Redis' agents");
        h_forget_other_agents(&s->fx, agent);
    }
    return g;
}

#endif
