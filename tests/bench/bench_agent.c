/* bench_agent: the cost of going through sluiced, and what one agent serves.
 *
 * Starts a private redis-server and a real sluiced with a plentiful
 * deployment (every acquire is granted at once), then measures in one run:
 *  1. overhead: one ACQUIRE + SETTLE through the daemon from one blocking
 *     client, p50 and p99 in microseconds, next to the same work done
 *     directly (EVALSHA reserve + EVALSHA settle on Redis), rounds
 *     alternating so noise hits both alike;
 *  2. throughput: grants per second with 1, 64 and 1000 connected callers
 *     (hiredis async on libuv, each looping ACQUIRE -> SETTLE), and Redis
 *     script calls per grant (from Redis' own INFO commandstats, so
 *     reserve + settle + heartbeats all count).
 * Prints figures only. Usage: bench_agent [seconds per throughput run (3)]
 * Needs SLUICE_BUILD_DIR (the build directory) to find sluiced. */
#define _GNU_SOURCE
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

#include "redis_fixture.h"
#include "script_call.h"
#include "sluiced_fixture.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p) {
    qsort(v, n, sizeof(*v), cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static long long evalsha_calls(redisContext *rc) {
    redisReply *r = redisCommand(rc, "INFO commandstats");
    long long calls = 0;
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_evalsha:calls=") : NULL;
    if (p) calls = atoll(p + strlen("cmdstat_evalsha:calls="));
    if (r) freeReplyObject(r);
    return calls;
}

/* ---- 1. overhead ---------------------------------------------------------- */

static double via_daemon(redisContext *d) {
    double t0 = now_us();
    redisReply *r = redisCommand(d, "ACQUIRE bench TOKENS 1 MAXWAIT 60000");
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        fprintf(stderr, "bench_agent: ACQUIRE failed: %s\n", r && r->str ? r->str : "no reply");
        exit(1);
    }
    redisReply *s = redisCommand(d, "SETTLE %s TOKENS 1 STATUS ok", r->element[0]->str);
    if (!s || s->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_agent: SETTLE failed: %s\n", s && s->str ? s->str : "no reply");
        exit(1);
    }
    freeReplyObject(r);
    freeReplyObject(s);
    return now_us() - t0;
}

static double direct(redisContext *rc) {
    double t0 = now_us();
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, "bench", "1", "1", "60000", NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "bench_agent: reserve failed\n");
        exit(1);
    }
    char id[24];
    snprintf(id, sizeof(id), "%lld", r->element[5]->element[1]->integer);
    redisReply *s = script_callv(rc, SCRIPT_SETTLE, "bench", "1", id, "1", "ok", "-1", NULL);
    freeReplyObject(r);
    if (s) freeReplyObject(s);
    return now_us() - t0;
}

static double direct_reserve_only(redisContext *rc) {
    double t0 = now_us();
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, "bench", "1", "1", "60000", NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "bench_agent: reserve failed\n");
        exit(1);
    }
    freeReplyObject(r);
    return now_us() - t0;
}

/* ---- 2. throughput ---------------------------------------------------------- */

typedef struct caller {
    redisAsyncContext *ac;
} caller;

static long long grants_done;
static int running;

static void on_settled(redisAsyncContext *ac, void *reply, void *priv);

static void on_acquired(redisAsyncContext *ac, void *reply, void *priv) {
    caller *c = priv;
    redisReply *r = reply;
    if (!r) return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1) {
        grants_done++;
        redisAsyncCommand(ac, on_settled, c, "SETTLE %s TOKENS 1 STATUS ok", r->element[0]->str);
    } else if (running) {
        redisAsyncCommand(ac, on_acquired, c, "ACQUIRE bench TOKENS 1 MAXWAIT 60000");
    }
}

static void on_settled(redisAsyncContext *ac, void *reply, void *priv) {
    caller *c = priv;
    if (!reply || !running) return;
    redisAsyncCommand(ac, on_acquired, c, "ACQUIRE bench TOKENS 1 MAXWAIT 60000");
}

static void on_stop_timer(uv_timer_t *t) {
    running = 0;
    uv_stop(t->loop);
}

static double throughput(const char *sock, int ncallers, double seconds) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    caller *cs = calloc((size_t)ncallers, sizeof(*cs));
    for (int i = 0; i < ncallers; i++) {
        cs[i].ac = redisAsyncConnectUnix(sock);
        if (!cs[i].ac || cs[i].ac->err) {
            fprintf(stderr, "bench_agent: connect %d failed\n", i);
            exit(1);
        }
        redisLibuvAttach(cs[i].ac, &loop);
    }
    grants_done = 0;
    running = 1;
    double t0 = now_us();
    for (int i = 0; i < ncallers; i++)
        redisAsyncCommand(cs[i].ac, on_acquired, &cs[i], "ACQUIRE bench TOKENS 1 MAXWAIT 60000");
    uv_timer_t stop;
    uv_timer_init(&loop, &stop);
    uv_timer_start(&stop, on_stop_timer, (uint64_t)(seconds * 1000), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    double elapsed = (now_us() - t0) / 1e6;
    long long g = grants_done;
    for (int i = 0; i < ncallers; i++) redisAsyncFree(cs[i].ac);
    uv_close((uv_handle_t *)&stop, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    free(cs);
    return (double)g / elapsed;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3.0;
    if (secs <= 0) {
        fprintf(stderr, "usage: bench_agent [seconds per throughput run]\n");
        return 2;
    }
    struct rlimit rl = {8192, 8192};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) fprintf(stderr, "bench_agent: could not raise the fd limit\n");
    redis_fixture rf;
    if (redis_fixture_start(&rf, 0) != 0) return 1;
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "redis:\n  url: unix://%s\n  timeout_ms: 1000\n"
             "agent:\n  socket: %%SOCK%%\n  max_clients: 4096\n  log_level: warn\n"
             "deployments:\n  bench:\n    rpm: 1000000000\n    tpm: 1000000000000\n"
             "    burst: { requests: 1000000, tokens: 1000000000 }\n    lease_s: 1\n    max_wait_ms: 60000\n",
             rf.sock);
    sluiced_fixture sf;
    if (sluiced_fixture_start(&sf, yaml) != 0) {
        redis_fixture_stop(&rf);
        return 1;
    }
    redisContext *rc = redis_fixture_connect(&rf);
    redisContext *dc = redisConnectUnix(sf.sock);

    enum { ROUNDS = 5, PER = 400 };
    static double d_lat[ROUNDS * PER], r_lat[ROUNDS * PER], o_lat[ROUNDS * PER];
    size_t nd = 0, nr = 0, no = 0;
    for (int i = 0; i < 50; i++) {
        via_daemon(dc);
        direct(rc);
    }
    for (int k = 0; k < ROUNDS; k++) {
        for (int i = 0; i < PER; i++) d_lat[nd++] = via_daemon(dc);
        for (int i = 0; i < PER; i++) r_lat[nr++] = direct(rc);
        for (int i = 0; i < PER; i++) o_lat[no++] = direct_reserve_only(rc);
    }
    double d50 = pct(d_lat, nd, 0.5), d99 = pct(d_lat, nd, 0.99);
    double r50 = pct(r_lat, nr, 0.5), r99 = pct(r_lat, nr, 0.99);
    double o50 = pct(o_lat, no, 0.5), o99 = pct(o_lat, no, 0.99);
    printf("ACQUIRE + SETTLE overhead, one blocking client, %d samples each, alternating rounds\n"
           "(SETTLE is answered at once and coalesced, so the daemon path costs about one\n"
           "reserve round trip plus the socket hop):\n\n", ROUNDS * PER);
    printf("| path | p50 us | p99 us |\n|---|---:|---:|\n");
    printf("| through sluiced (ACQUIRE + SETTLE on the socket) | %.0f | %.0f |\n", d50, d99);
    printf("| direct to Redis (EVALSHA reserve + EVALSHA settle) | %.0f | %.0f |\n", r50, r99);
    printf("| direct to Redis, one EVALSHA reserve round trip | %.0f | %.0f |\n", o50, o99);
    printf("| sluiced vs reserve + settle direct | %.2f | %.2f |\n", d50 / r50, d99 / r99);
    printf("| sluiced vs one EVALSHA round trip | %.2f | %.2f |\n\n", d50 / o50, d99 / o99);

    int callers[] = {1, 64, 1000};
    printf("grants per second through one agent (%.1f s per run):\n\n", secs);
    printf("| callers | grants/s | Redis script calls per grant |\n|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof(callers) / sizeof(*callers); i++) {
        long long before = evalsha_calls(rc);
        double gps = throughput(sf.sock, callers[i], secs);
        long long after = evalsha_calls(rc);
        double per = grants_done > 0 ? (double)(after - before) / (double)grants_done : 0;
        printf("| %d | %.0f | %.3f |\n", callers[i], gps, per);
    }
    redisFree(dc);
    redisFree(rc);
    sluiced_fixture_stop(&sf, 0);
    redis_fixture_stop(&rf);
    return 0;
}
