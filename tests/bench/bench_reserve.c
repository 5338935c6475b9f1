/* bench_reserve: reserve decisions per second against a local redis-server.
 *
 * Starts its own redis-server on a private socket, configures a deployment
 * whose budget is plentiful (every item is granted at once), and measures,
 * in one run and alternating rounds so machine noise hits all alike:
 *   - reserve with batches of 1, 10 and 100 items from one blocking client
 *     (calls/s and decisions/s = items/s);
 *   - redis-benchmark running the same EVALSHA (batch of 1) with 1 client,
 *     and with 50 clients, as the reference for what the server sustains.
 * Two more rows: batches of 10 on a deployment with lanes and two
 * tenants (every item granted: the fair-share path), and batches of 10
 * that are all deferred (what an agent's asking again costs).
 * Prints medians of the rounds and the ratios. Not a test: nothing is
 * asserted. Usage: bench_reserve [rounds (5)] [seconds per round (1)]. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_fixture.h"
#include "script_call.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Calls reserve on dep with `batch` items for `seconds`; returns calls per
 * second. lane NULL: plain pairs; else quads in that lane, tenants a and b
 * taking turns. */
static double run_batch_on(redisContext *c, const char *dep, int batch, double seconds, const char *lane) {
    const char *argv[1 + 4 * 100];
    char n[8];
    int stride = lane ? 4 : 2;
    snprintf(n, sizeof(n), "%d", batch);
    argv[0] = n;
    for (int i = 0; i < batch; i++) {
        argv[1 + stride * i] = "100";
        argv[2 + stride * i] = "60000";
        if (lane) {
            argv[3 + stride * i] = lane;
            argv[4 + stride * i] = i % 2 ? "a" : "b";
        }
    }
    long calls = 0;
    double t0 = now_s(), t;
    do {
        redisReply *r = script_call(c, SCRIPT_RESERVE, dep, 1 + stride * batch, argv);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "bench_reserve: reserve failed: %s\n", r && r->str ? r->str : "no reply");
            exit(1);
        }
        freeReplyObject(r);
        calls++;
    } while ((t = now_s()) - t0 < seconds);
    return (double)calls / (t - t0);
}

static double run_batch(redisContext *c, int batch, double seconds) {
    return run_batch_on(c, "bench", batch, seconds, NULL);
}

/* redis-benchmark running the same EVALSHA; returns requests per second. */
static double run_redis_benchmark(const redis_fixture *fx, int clients, int pipeline, long n) {
    const script *s = scripts_get(SCRIPT_RESERVE);
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX], cmd[2048];
    scripts_keys("bench", keys);
    int len = snprintf(cmd, sizeof(cmd), "redis-benchmark -s %s -n %ld -c %d -P %d --csv EVALSHA %s 9",
                       fx->sock, n, clients, pipeline, s->sha);
    for (int i = 0; i < SCRIPTS_NKEYS; i++)
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " '%s'", keys[i]);
    snprintf(cmd + len, sizeof(cmd) - (size_t)len, " 1 100 60000 2>/dev/null");
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[512];
    double rps = 0;
    while (fgets(line, sizeof(line), p)) {
        /* CSV: "test","rps",... ; the data line starts with "EVALSHA. */
        char *q = strstr(line, "\",\"");
        if (strncmp(line, "\"EVALSHA", 8) == 0 && q) rps = atof(q + 3);
    }
    pclose(p);
    return rps;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    double secs = argc > 2 ? atof(argv[2]) : 1.0;
    if (rounds < 1 || rounds > 50 || secs <= 0) {
        fprintf(stderr, "usage: bench_reserve [rounds 1..50] [seconds per round]\n");
        return 2;
    }
    redis_fixture fx;
    if (redis_fixture_start(&fx, 0) != 0) return 1;
    redisContext *c = redis_fixture_connect(&fx);
    redisReply *r = script_callv(c, SCRIPT_CONFIGURE, "bench", "rpm", "100000000000", "tpm",
                                 "100000000000000", "burst_requests", "100000000",
                                 "burst_tokens", "1000000000", "lease_ms", "1000", NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "bench_reserve: configure failed\n");
        return 1;
    }
    freeReplyObject(r);
    /* The same plentiful budget with lanes and tenants: every item granted
     * (the fair-share path: plan, virtual clock, tenant and lane state). */
    r = script_callv(c, SCRIPT_CONFIGURE, "bench-lt", "rpm", "100000000000", "tpm", "100000000000000",
                     "burst_requests", "100000000", "burst_tokens", "1000000000", "lease_ms", "1000",
                     "lane.interactive", "0,-1,0.2", "lane.batch", "1,-1,0", "tenant.a", "3,0,0,0", "tenant.b",
                     "1,0,0,0", NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) return 1;
    freeReplyObject(r);
    /* A deployment whose schedule is a day ahead: every batch item is
     * deferred (the cost of an agent asking again). */
    r = script_callv(c, SCRIPT_CONFIGURE, "bench-df", "rpm", "1", "lane.interactive", "0,-1,0", "lane.batch",
                     "1,-1,0", NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) return 1;
    freeReplyObject(r);
    for (int i = 0; i < 2; i++) freeReplyObject(script_callv(c, SCRIPT_RESERVE, "bench-df", "1", "0", "86400000",
                                                             "interactive", "", NULL));
    /* Load the script once so redis-benchmark's EVALSHA finds it. */
    freeReplyObject(script_callv(c, SCRIPT_STATUS, "bench", NULL));

    enum { B1, B10, B100, RB1, RB50, LT10, DF10, NCOL };
    double v[NCOL][50];
    long rb_n = (long)(20000 * secs);
    for (int k = 0; k < rounds; k++) {
        v[B1][k] = run_batch(c, 1, secs);
        v[B10][k] = run_batch(c, 10, secs);
        v[B100][k] = run_batch(c, 100, secs);
        v[RB1][k] = run_redis_benchmark(&fx, 1, 1, rb_n);
        v[RB50][k] = run_redis_benchmark(&fx, 50, 1, rb_n * 4);
        v[LT10][k] = run_batch_on(c, "bench-lt", 10, secs, "batch");
        v[DF10][k] = run_batch_on(c, "bench-df", 10, secs, "batch");
    }
    double m[NCOL];
    for (int i = 0; i < NCOL; i++) m[i] = median(v[i], rounds);
    printf("reserve decisions per second, median of %d rounds (%.1f s each), one run:\n\n", rounds,
           secs);
    printf("| client | calls/s | decisions/s | vs redis-benchmark 1 client |\n");
    printf("|---|---:|---:|---:|\n");
    printf("| bench_reserve, batch 1, 1 client | %.0f | %.0f | %.2f |\n", m[B1], m[B1], m[B1] / m[RB1]);
    printf("| bench_reserve, batch 10, 1 client | %.0f | %.0f | %.2f |\n", m[B10], m[B10] * 10,
           m[B10] * 10 / m[RB1]);
    printf("| bench_reserve, batch 100, 1 client | %.0f | %.0f | %.2f |\n", m[B100], m[B100] * 100,
           m[B100] * 100 / m[RB1]);
    printf("| bench_reserve, batch 10, lanes + 2 tenants, all granted | %.0f | %.0f | %.2f |\n", m[LT10],
           m[LT10] * 10, m[LT10] * 10 / m[RB1]);
    printf("| bench_reserve, batch 10, lower lane, all deferred | %.0f | %.0f | %.2f |\n", m[DF10], m[DF10] * 10,
           m[DF10] * 10 / m[RB1]);
    printf("| redis-benchmark EVALSHA reserve (1 item), 1 client | %.0f | %.0f | 1.00 |\n", m[RB1],
           m[RB1]);
    printf("| redis-benchmark EVALSHA reserve (1 item), 50 clients | %.0f | %.0f | %.2f |\n", m[RB50],
           m[RB50], m[RB50] / m[RB1]);
    redisFree(c);
    redis_fixture_stop(&fx);
    return 0;
}
