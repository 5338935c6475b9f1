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
 * (BENCH_BUDGET=1: every acquire also draws from a budget in money)
 *
 * bench_agent --redis-time [seconds (3)] [rounds (3)] [bounds (1,0)]:
 * Redis' own figures for redis.max_script_ms (docs/benchmarks.md). A fleet
 * of 3 sluiced on one private redis-server, 1000 callers spread over them
 * looping ACQUIRE -> SETTLE on a plentiful deployment (Redis is the
 * bottleneck), closed loop and in waves, then the same over a group of 3
 * members; each with every max_script_ms in bounds (by default 1, the
 * default, and 0, no bound), the rows in a rotating order per round. Per
 * row, from Redis: INFO commandstats (evalsha calls and usec_per_call),
 * the main thread's CPU, the slow log at 1000 µs (every reserve and settle
 * call of 1 ms or more, and the longest), the latency monitor at 1 ms
 * (LATENCY LATEST, the `command` event); from the agents' INFO: reserve
 * items per call; from /proc: Redis' involuntary context switches (each
 * may stretch a call). BENCH_SLOWLOG=1 also prints each slow reserve call
 * (items, µs) and the agents' batch lines (cap, learned times) on stderr.
 *
 * Needs SLUICE_BUILD_DIR (the build directory) to find sluiced. */
#define _GNU_SOURCE
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

#include "redis_fixture.h"
#include "script_call.h"
#include "scripts.h"
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
    int idle; /* waves: done, waiting for the next wave */
} caller;

static long long grants_done;
static int running;
/* --redis-time's waves: every wave_ms each idle caller asks once (0: each
 * caller asks again as soon as its SETTLE is answered). */
static int wave_ms;
static caller *wave_callers;
static int wave_n;
/* What the callers ask: the plentiful deployment, or (--redis-time) a group. */
static const char *acquire_cmd = "ACQUIRE bench TOKENS 1 MAXWAIT 60000";

static void on_settled(redisAsyncContext *ac, void *reply, void *priv);

static void on_acquired(redisAsyncContext *ac, void *reply, void *priv) {
    caller *c = priv;
    redisReply *r = reply;
    if (!r) return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1) {
        grants_done++;
        redisAsyncCommand(ac, on_settled, c, "SETTLE %s TOKENS 1 STATUS ok", r->element[0]->str);
    } else if (running) {
        redisAsyncCommand(ac, on_acquired, c, acquire_cmd);
    }
}

static void on_settled(redisAsyncContext *ac, void *reply, void *priv) {
    caller *c = priv;
    if (!reply || !running) return;
    if (wave_ms > 0) c->idle = 1;
    else redisAsyncCommand(ac, on_acquired, c, acquire_cmd);
}

static void on_wave(uv_timer_t *t) {
    (void)t;
    for (int i = 0; i < wave_n && running; i++)
        if (wave_callers[i].idle) {
            wave_callers[i].idle = 0;
            redisAsyncCommand(wave_callers[i].ac, on_acquired, &wave_callers[i], acquire_cmd);
        }
}

static void on_stop_timer(uv_timer_t *t) {
    running = 0;
    uv_stop(t->loop);
}

/* Grants per second of ncallers callers, caller i on socks[i % nsocks]. */
static double throughput_over(const char *const *socks, int nsocks, int ncallers, double seconds) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    caller *cs = calloc((size_t)ncallers, sizeof(*cs));
    for (int i = 0; i < ncallers; i++) {
        cs[i].ac = redisAsyncConnectUnix(socks[i % nsocks]);
        if (!cs[i].ac || cs[i].ac->err) {
            fprintf(stderr, "bench_agent: connect %d failed\n", i);
            exit(1);
        }
        redisLibuvAttach(cs[i].ac, &loop);
    }
    grants_done = 0;
    running = 1;
    double t0 = now_us();
    for (int i = 0; i < ncallers; i++) redisAsyncCommand(cs[i].ac, on_acquired, &cs[i], acquire_cmd);
    uv_timer_t stop, wave;
    uv_timer_init(&loop, &stop);
    uv_timer_init(&loop, &wave);
    uv_timer_start(&stop, on_stop_timer, (uint64_t)(seconds * 1000), 0);
    wave_callers = cs;
    wave_n = ncallers;
    if (wave_ms > 0) uv_timer_start(&wave, on_wave, (uint64_t)wave_ms, (uint64_t)wave_ms);
    uv_run(&loop, UV_RUN_DEFAULT);
    double elapsed = (now_us() - t0) / 1e6;
    long long g = grants_done;
    for (int i = 0; i < ncallers; i++) redisAsyncFree(cs[i].ac);
    uv_close((uv_handle_t *)&stop, NULL);
    uv_close((uv_handle_t *)&wave, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    free(cs);
    return (double)g / elapsed;
}

static double throughput(const char *sock, int ncallers, double seconds) {
    return throughput_over(&sock, 1, ncallers, seconds);
}

/* ---- --redis-time: Redis' own figures under redis.max_script_ms ---------- */

enum { RT_AGENTS = 3, RT_CALLERS = 1000 };

typedef struct rt_run {
    double gps;                          /* grants per second */
    long long calls;                     /* evalsha calls */
    double usec_per_call;                /* evalsha, INFO commandstats */
    long long slow_reserve, slow_settle; /* calls of 1 ms or more (slow log) */
    long long max_us;                    /* the longest script call in the slow log, 0 none */
    long long latency_ms;                /* LATENCY LATEST: the `command` event's max, 0 none */
    double slow_items;                   /* the median items of the slow reserve calls, 0 none */
    double items_per_call;               /* reserve items per reserve call, over the agents */
    double cpu_per_call;                 /* Redis main thread CPU µs per evalsha call (INFO cpu) */
    long long preempted;                 /* Redis' involuntary context switches during the run */
} rt_run;

/* Redis' main thread CPU so far, µs (user + sys). */
static double main_cpu_us(redisContext *rc) {
    redisReply *r = redisCommand(rc, "INFO cpu");
    double us = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *u = strstr(r->str, "used_cpu_user_main_thread:"), *s = strstr(r->str, "used_cpu_sys_main_thread:");
        if (u) us += atof(u + strlen("used_cpu_user_main_thread:")) * 1e6;
        if (s) us += atof(s + strlen("used_cpu_sys_main_thread:")) * 1e6;
    }
    if (r) freeReplyObject(r);
    return us;
}

/* The times the kernel took the CPU from process pid (all its threads'
 * main: /proc/<pid>/status), or 0 when unreadable: each may stretch the
 * script call running then. */
static long long involuntary_switches(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long long n = 0;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "nonvoluntary_ctxt_switches:", 27)) n = atoll(line + 27);
    if (f) fclose(f);
    return n;
}

static long long info_num(const char *info, const char *key) {
    const char *p = strstr(info, key);
    return p ? atoll(p + strlen(key)) : 0;
}

static void rt_redis(redisContext *rc, const char *cmd) {
    redisReply *r = redisCommand(rc, cmd);
    if (!r || r->type == REDIS_REPLY_ERROR) fprintf(stderr, "bench_agent: %s: %s\n", cmd, r ? r->str : "no reply");
    if (r) freeReplyObject(r);
}

/* The agents' reserve items and calls so far (INFO); print: their batch
 * lines (cap, learned times) on stderr too. */
static void agents_reserves(sluiced_fixture *sf, long long *items, long long *calls, int print) {
    *items = *calls = 0;
    for (int i = 0; i < RT_AGENTS; i++) {
        redisContext *dc = sluiced_fixture_connect(&sf[i], 2000);
        redisReply *r = dc ? redisCommand(dc, "INFO redis") : NULL;
        if (r && r->type == REDIS_REPLY_STRING) {
            *items += info_num(r->str, "reserve_items:");
            *calls += info_num(r->str, "reserve_calls:");
            for (const char *p = r->str; print && (p = strstr(p, "batch")) != NULL; p++)
                if (p[5] >= '0' && p[5] <= '9') fprintf(stderr, "agent %d: %.*s\n", i, (int)strcspn(p, "\r\n"), p);
        }
        if (r) freeReplyObject(r);
        if (dc) redisFree(dc);
    }
}

/* One fleet run: 3 agents with max_script_ms bound, RT_CALLERS callers
 * asking deployment or group name. */
static int rt_once(redis_fixture *rf, redisContext *rc, const char *bound, int group, int wave, double secs,
                   rt_run *out) {
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "redis:\n  url: unix://%s\n  timeout_ms: 1000\n  max_script_ms: %s\n"
             "agent:\n  socket: %%SOCK%%\n  max_clients: 4096\n  log_level: warn\n"
             "deployments:\n"
             "  bench: { rpm: 1000000000, tpm: 1000000000000, burst: { requests: 1000000, tokens: 1000000000 },"
             " lease_s: 1, max_wait_ms: 60000 }\n"
             "  m1: { rpm: 1000000000, tpm: 1000000000000, burst: { requests: 1000000, tokens: 1000000000 },"
             " lease_s: 1, max_wait_ms: 60000 }\n"
             "  m2: { rpm: 1000000000, tpm: 1000000000000, burst: { requests: 1000000, tokens: 1000000000 },"
             " lease_s: 1, max_wait_ms: 60000 }\n"
             "  m3: { rpm: 1000000000, tpm: 1000000000000, burst: { requests: 1000000, tokens: 1000000000 },"
             " lease_s: 1, max_wait_ms: 60000 }\n"
             "groups:\n  grp: { members: [m1, m2, m3], spill_ms: 200, max_wait_ms: 60000 }\n",
             rf->sock, bound);
    sluiced_fixture sf[RT_AGENTS];
    const char *socks[RT_AGENTS];
    int started = 0;
    for (; started < RT_AGENTS; started++) {
        if (sluiced_fixture_start(&sf[started], yaml) != 0) break;
        socks[started] = sf[started].sock;
    }
    if (started < RT_AGENTS) {
        for (int i = 0; i < started; i++) sluiced_fixture_stop(&sf[i], 0);
        return -1;
    }
    acquire_cmd = group ? "ACQUIRE grp TOKENS 1 MAXWAIT 60000" : "ACQUIRE bench TOKENS 1 MAXWAIT 60000";
    /* A short run first (connections made, the engines' first calls),
     * then the measured one from reset counters. */
    wave_ms = wave;
    throughput_over(socks, RT_AGENTS, RT_CALLERS, 0.5);
    long long items0, calls0;
    agents_reserves(sf, &items0, &calls0, 0);
    rt_redis(rc, "CONFIG RESETSTAT");
    rt_redis(rc, "SLOWLOG RESET");
    rt_redis(rc, "LATENCY RESET");
    double cpu0 = main_cpu_us(rc);
    long long sw0 = involuntary_switches(rf->pid);
    out->gps = throughput_over(socks, RT_AGENTS, RT_CALLERS, secs);
    double cpu1 = main_cpu_us(rc);
    out->preempted = involuntary_switches(rf->pid) - sw0;
    redisReply *r = redisCommand(rc, "INFO commandstats");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "cmdstat_evalsha:");
        out->calls = p ? info_num(p, "calls=") : 0;
        const char *u = p ? strstr(p, "usec_per_call=") : NULL;
        out->usec_per_call = u ? atof(u + strlen("usec_per_call=")) : 0;
    }
    if (r) freeReplyObject(r);
    out->cpu_per_call = out->calls > 0 ? (cpu1 - cpu0) / (double)out->calls : 0;
    out->slow_reserve = out->slow_settle = out->max_us = 0;
    double slow_items[1024];
    size_t nslow = 0;
    const char *reserve_sha = scripts_get(SCRIPT_RESERVE)->sha, *settle_sha = scripts_get(SCRIPT_SETTLE)->sha;
    r = redisCommand(rc, "SLOWLOG GET -1");
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 || e->element[3]->type != REDIS_REPLY_ARRAY) continue;
        redisReply *args = e->element[3];
        if (args->elements < 2 || strcasecmp(args->element[0]->str, "evalsha") != 0) continue;
        long long us = e->element[2]->integer;
        if (us > out->max_us) out->max_us = us;
        if (!strcmp(args->element[1]->str, reserve_sha)) {
            out->slow_reserve++;
            /* Its items from its argument count (the slow log keeps 31
             * and says how many more): EVALSHA sha numkeys KEYS, then n
             * pairs and @timed, or group's 5 and n quintuples and @timed. */
            long long argc = (long long)args->elements;
            const char *more = args->element[args->elements - 1]->str;
            if (more && !strncmp(more, "... (", 5)) argc = (long long)args->elements - 1 + atoll(more + 5);
            double items = group ? (double)(argc - 3 - 33 - 5 - 1) / 5 : (double)(argc - 3 - 11 - 1 - 1) / 2;
            if (nslow < sizeof(slow_items) / sizeof(slow_items[0])) slow_items[nslow++] = items;
            if (getenv("BENCH_SLOWLOG")) fprintf(stderr, "slow reserve: %.0f items, %lld us\n", items, us);
        } else if (!strcmp(args->element[1]->str, settle_sha)) out->slow_settle++;
    }
    if (r) freeReplyObject(r);
    out->slow_items = nslow ? pct(slow_items, nslow, 0.5) : 0;
    out->latency_ms = 0;
    r = redisCommand(rc, "LATENCY LATEST");
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type == REDIS_REPLY_ARRAY && e->elements >= 4 && !strcmp(e->element[0]->str, "command"))
            out->latency_ms = e->element[3]->integer;
    }
    if (r) freeReplyObject(r);
    long long items, calls;
    agents_reserves(sf, &items, &calls, getenv("BENCH_SLOWLOG") != NULL);
    out->items_per_call = calls > calls0 ? (double)(items - items0) / (double)(calls - calls0) : 0;
    for (int i = 0; i < RT_AGENTS; i++) sluiced_fixture_stop(&sf[i], 0);
    return 0;
}

static int redis_time(double secs, int rounds, const char *bounds) {
    if (rounds < 1 || rounds > 64) rounds = 3;
    redis_fixture rf;
    if (redis_fixture_start(&rf, 0) != 0) return 1;
    redisContext *rc = redis_fixture_connect(&rf);
    rt_redis(rc, "CONFIG SET latency-monitor-threshold 1");
    rt_redis(rc, "CONFIG SET slowlog-log-slower-than 1000");
    rt_redis(rc, "CONFIG SET slowlog-max-len 100000");
    /* Redis keeps its priority; this process and the agents it starts
     * (which inherit it) step back, so that what is measured is Redis'
     * time and not this benchmark's own load preempting it. */
    if (setpriority(PRIO_PROCESS, 0, 10) != 0) fprintf(stderr, "bench_agent: could not lower the priority\n");
    /* The rows: one deployment and a group, closed loop and waves, each
     * with every bound asked for (default "1,0"). */
    enum { MAXROWS = 4 * 8 };
    struct {
        char name[96], bound[16];
        int group, wave;
    } rows[MAXROWS];
    int nrows = 0;
    char list[128];
    snprintf(list, sizeof(list), "%s", bounds);
    for (int wave = 0; wave <= 50; wave += 50)
        for (int group = 0; group <= 1; group++) {
            char copy[128];
            memcpy(copy, list, sizeof(copy));
            for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && nrows < MAXROWS;
                 tok = strtok_r(NULL, ",", &save)) {
                snprintf(rows[nrows].bound, sizeof(rows[nrows].bound), "%s", tok);
                snprintf(rows[nrows].name, sizeof(rows[nrows].name), "%s, %s, max_script_ms %s",
                         group ? "group of 3" : "one deployment", wave ? "waves of 1000 every 50 ms" : "closed loop",
                         tok);
                rows[nrows].group = group;
                rows[nrows].wave = wave;
                nrows++;
            }
        }
    enum { NF = 10 };
    const int NROWS = nrows;
    static rt_run runs[MAXROWS][64];
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < NROWS; j++) {
            int i = (j + k) % NROWS;
            rt_run *o = &runs[i][k];
            if (rt_once(&rf, rc, rows[i].bound, rows[i].group, rows[i].wave, secs, o) != 0) {
                fprintf(stderr, "bench_agent: could not start the fleet\n");
                redisFree(rc);
                redis_fixture_stop(&rf);
                return 1;
            }
            fprintf(stderr,
                    "round %d: %s: %.0f grants/s, %lld evalsha at %.1f us (cpu %.1f us), items/call %.1f, "
                    "slow %lld reserve (median %.0f items) %lld settle, max %lld us, latency %lld ms, "
                    "Redis preempted %lld times\n",
                    k + 1, rows[i].name, o->gps, o->calls, o->usec_per_call, o->cpu_per_call, o->items_per_call,
                    o->slow_reserve, o->slow_items, o->slow_settle, o->max_us, o->latency_ms, o->preempted);
        }
    printf("Redis' own figures: 3 agents on one Redis, 1000 callers over them (ACQUIRE -> SETTLE), %d rounds of\n"
           "%.1f s per row, rows in a rotating order; medians. slow = script calls of 1 ms or more in Redis' slow\n"
           "log (their items: the median slow reserve call's); latency = LATENCY LATEST's `command` event, ms\n"
           "(0 = none at 1 ms); preempted = Redis' involuntary context switches during the row:\n\n",
           rounds, secs);
    printf("| fleet | grants/s | evalsha usec_per_call | Redis CPU µs per call | reserve items/call | slow reserve | "
           "their items | slow settle | longest µs | latency ms | preempted |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < NROWS; i++) {
        double v[NF][64], med[NF];
        for (int k = 0; k < rounds; k++) {
            const rt_run *o = &runs[i][k];
            double f[NF] = {o->gps,
                            o->usec_per_call,
                            o->cpu_per_call,
                            o->items_per_call,
                            (double)o->slow_reserve,
                            o->slow_items,
                            (double)o->slow_settle,
                            (double)o->max_us,
                            (double)o->latency_ms,
                            (double)o->preempted};
            for (int x = 0; x < NF; x++) v[x][k] = f[x];
        }
        for (int x = 0; x < NF; x++) med[x] = pct(v[x], (size_t)rounds, 0.5);
        printf("| %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", rows[i].name, med[0],
               med[1], med[2], med[3], med[4], med[5], med[6], med[7], med[8], med[9]);
    }
    redisFree(rc);
    redis_fixture_stop(&rf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--redis-time")) {
        struct rlimit rl = {8192, 8192};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) fprintf(stderr, "bench_agent: could not raise the fd limit\n");
        return redis_time(argc > 2 ? atof(argv[2]) : 3.0, argc > 3 ? atoi(argv[3]) : 3, argc > 4 ? argv[4] : "1,0");
    }
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
    /* BENCH_BUDGET=1: every acquire also draws from a budget in money
     * (one that never binds): the cost of its reservation and settle. */
    int budget = getenv("BENCH_BUDGET") != NULL;
    snprintf(yaml, sizeof(yaml),
             "redis:\n  url: unix://%s\n  timeout_ms: 1000\n"
             "agent:\n  socket: %%SOCK%%\n  max_clients: 4096\n  log_level: warn\n"
             "deployments:\n  bench:\n    rpm: 1000000000\n    tpm: 1000000000000\n"
             "    burst: { requests: 1000000, tokens: 1000000000 }\n    lease_s: 1\n    max_wait_ms: 60000\n%s",
             rf.sock,
             budget ? "    price: { input: 1, output: 1, currency: USD }\n"
                      "budgets:\n  all: { currency: USD, total: 1000000000 }\n"
                    : "");
    if (budget) printf("bench_agent: every acquire draws from a budget in money (BENCH_BUDGET)\n");
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
           "reserve round trip plus the socket hop):\n\n",
           ROUNDS * PER);
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
