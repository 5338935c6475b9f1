/* test_partition: partial partitions of a 3-agent fleet, judged by the
 * provider's ledger (issue 15, the harness part).
 *
 * Each scenario starts its own fleet: one redis-server on a loopback port,
 * `sluice mock` as a 600 RPM deployment "d" (its own 10 s bucket: burst
 * 100), and 3 sluiced agents, each reaching Redis through its own TCP
 * relay (tests/support/relay.h), so one agent can be cut off while the
 * others keep Redis. 10 worker threads per agent (as tests/support/fleet.c:
 * ACQUIRE, POST to the mock, SETTLE with its headers) keep the demand far
 * above the quota (each call takes 100-300 ms; 30 callers could send 150
 * a second). The deployment's burst is 2 (so a correct fleet sends at most
 * 2 + 100 in any 10 s: 1.02 x the quota), heartbeat_ms 1000, the other
 * settings at their defaults (redis.timeout_ms 250, silent_hold_ms 20 s:
 * the expiry) unless a scenario says otherwise.
 *
 * Scenarios (10 s of traffic first, then the fault, then 20 s more):
 *   cut1        agent 1 cut from Redis for 10 s (the relay closes its
 *               connections and refuses new ones), then reconnected;
 *   cut1-hole   the same as a black hole (nothing forwarded, nothing
 *               closed: the agent's own timeouts must notice);
 *   cut2, cut2-hole   agents 1 and 2 of 3;
 *   kill9       agent 1 killed with SIGKILL (its workers stop), with
 *               agent.silent_hold_ms 3000 (the expiry: 3 heartbeats);
 *   long-hold   agent 1 cut for 14 s, longer than the expiry
 *               (silent_hold_ms 7000), with agent.fail: hold;
 *   long-open   the same with agent.fail: open (the control);
 *   idle-hole   issue 23's row: agent 1 has no callers before the cut, one
 *               arrives with it, and it is black-holed for 10 s while the
 *               other two saturate.
 *
 * Figures, from the mock's ledger (deployments.d.accept_ms) and the
 * workers' own logs: accepts per second; the largest number of accepts in
 * any 10 s window as a multiple of the quota; 429s over the run; each cut
 * agent's sends while cut, split into those on Redis grants and local
 * ones; after a kill, when the others are back at >= 95 % of the rate
 * (2 s windows).
 *
 * Bounds (issue 15), checked after the figures are printed, each reported
 * PASS or FAIL:
 *   - no 10 s window above 1.02 x the quota (long-open: above it, the
 *     control that the ledger shows an over-offer);
 *   - <= 1 % 429s;
 *   - a cut agent keeps serving its callers at its share: its local
 *     grants paced at 95..105 % of rate / 3, and its sends over the cut
 *     at least rate / 3 x (the cut - what the cut costs it) - 2, at most
 *     110 %. The cost (docs/operations.md): its local schedule starts
 *     once the others hold its share back (its last promise, at most a
 *     heartbeat and a quarter, + 50 ms for a late arrival) past the
 *     fleet's schedule (meanwhile its own Redis grants are released), its
 *     local bucket starts empty (one slot, 300 ms), and a black hole is
 *     noticed at redis.timeout_ms (250 ms): 1.6 s, or 1.85 s (84 % or
 *     81.5 % of a 10 s cut). 2 sends of slack: the slots of the fleet's
 *     schedule come to each agent in runs, so its part of that schedule
 *     at the cut is not exactly a third;
 *   - after a kill -9 the others at >= 95 % within its promise + the
 *     expiry + 2 s (1.25 + 3 + 2 s);
 *   - long-hold: the cut agent served locally, and no local send later
 *     than the expiry after the cut;
 *   - idle-hole (issue 23): the cut agent back in mode redis within 1 s
 *     of the heal (its one caller is not judged at a third of the rate),
 *     and the fleet back at >= 95 % of the rate within 2 s of it.
 * Harness checks (the cut really put the agent in local mode, it came
 * back to redis, traffic flowed) fail the scenario outright.
 *
 * Not in the default test run: it takes about 6 minutes (real-time
 * fleets). Build the target test_partition and run it with
 * SLUICE_BUILD_DIR set, or tests/reliability.sh partition
 * (docs/reliability.md). PARTITION_ONLY=<name> runs the scenarios whose
 * name contains it. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>

#include "check.h"
#include "ledger.h"
#include "mock_fixture.h"
#include "proc.h"
#include "redis_fixture.h"
#include "relay.h"
#include "sluiced_fixture.h"
#include "worker_call.h"

#define AGENTS 3
#define CALLERS 10
#define RPM 600.0
#define RATE_PER_MS (RPM / 60000.0)
#define BURST 2
#define HEARTBEAT_MS 1000
#define EXPIRY_MS (3 * HEARTBEAT_MS) /* the shortest expiry (silent_hold_ms at least 3 heartbeats) */
/* The longest promise an agent's call makes (a heartbeat and a quarter,
 * silent_ms) and how long after it a call may still arrive (ENGINE_ARRIVAL_PAD_MS). */
#define SILENT_MS (HEARTBEAT_MS + HEARTBEAT_MS / 4)
#define PAD_MS 50
#define TIMEOUT_MS 250 /* redis.timeout_ms, the default */
#define WARM_MS 10000
#define FAULT_MS 10000
#define AFTER_MS 20000
#define WINDOW_MS 10000.0
#define QUOTA_10S (RATE_PER_MS * WINDOW_MS)
#define MAX_WAIT_MS 60000
#define SAMPLES 1024

typedef struct scenario {
    const char *name;
    int ncut;         /* agents 1..ncut are cut (0: none) */
    relay_mode how;   /* RELAY_CUT or RELAY_BLACKHOLE */
    int kill;         /* kill -9 agent 1 instead */
    int hold_ms;      /* agent.silent_hold_ms (0: the default, 20 heartbeats) */
    int cut_ms;       /* how long the cut lasts (0: FAULT_MS) */
    const char *fail; /* agent.fail (NULL: open) */
    int idle1;        /* agent 1 has no callers until the cut, then one */
} scenario;

/* The expiry after which the others stop holding a silent agent's share
 * back (and stop counting it live), from its promise: agent.silent_hold_ms,
 * at least 3 heartbeats (lib/core/engine_internal.h). */
static int expiry_ms(const scenario *s) {
    int h = s->hold_ms > 0 ? s->hold_ms : 20 * HEARTBEAT_MS;
    return h > EXPIRY_MS ? h : EXPIRY_MS;
}

typedef struct send_rec {
    double t; /* local ms (proc_now_ms) when the call went out */
    long status;
    int local; /* the grant was decided locally (id <deployment>:L<n>) */
} send_rec;

typedef struct pworker {
    struct pfleet *f;
    int agent, index;
    pthread_t tid;
    int started;
    send_rec *rec;
    size_t n, cap;
    long long errors;
    char error[256];
} pworker;

typedef struct sample {
    double t;
    char mode[AGENTS][16];
    long long live[AGENTS];
    double effective_rpm, outside_rpm; /* agent 0's STATUS (the shared state in Redis) */
} sample;

typedef struct pfleet {
    redis_fixture redis;
    mock_fixture mock;
    relay *relay[AGENTS];
    sluiced_fixture agent[AGENTS];
    char endpoint[64];
    double offset; /* local = ledger + offset */
    atomic_int stop;
    atomic_int dead[AGENTS]; /* killed on purpose: its workers stop */
    int idle1;               /* scenario.idle1 */
    atomic_int go1;          /* idle1: agent 1's caller may start */
    pworker w[AGENTS * CALLERS];
    pthread_t sampler;
    int have_sampler;
    sample samples[SAMPLES];
    atomic_int nsamples;
} pfleet;

static int nfail;
static char harness_err[512]; /* the first harness failure: the scenario fails after cleaning up */

static void harness_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void harness_fail(const char *fmt, ...) {
    if (harness_err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(harness_err, sizeof(harness_err), fmt, ap);
    va_end(ap);
    printf("  HARNESS %s\n", harness_err);
}

/* A bound of the issue (check.h): printed PASS or FAIL, counted. */
#define BOUND(cond, ...) CHECK(&nfail, cond, __VA_ARGS__)

/* ---- workers ---------------------------------------------------------------------- */

static void rec_add(pworker *k, double t, long status, int local) {
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        send_rec *n = realloc(k->rec, cap * sizeof(*n));
        if (!n) return;
        k->rec = n;
        k->cap = cap;
    }
    k->rec[k->n++] = (send_rec){t, status, local};
}

static void *worker_main(void *arg) {
    pworker *k = arg;
    pfleet *f = k->f;
    worker_call w;
    char id[32];
    snprintf(id, sizeof(id), "w%d-%d", k->agent, k->index);
    if (f->idle1 && k->agent == 1) {
        /* One caller arrives with the cut; the others never do. */
        if (k->index > 0) return NULL;
        while (!atomic_load(&f->go1) && !atomic_load(&f->stop)) proc_sleep_ms(5);
    }
    int open = worker_call_open(&w, f->agent[k->agent].sock, MAX_WAIT_MS + 5000, id) == 0;
    while (!atomic_load(&f->stop) && !atomic_load(&f->dead[k->agent])) {
        if (!open) {
            worker_call_close(&w);
            proc_sleep_ms(100);
            open = worker_call_open(&w, f->agent[k->agent].sock, MAX_WAIT_MS + 5000, id) == 0;
            continue;
        }
        worker_acquire a = worker_call_acquire(&w, "d", 20, MAX_WAIT_MS, NULL, NULL);
        if (a == WORKER_SHED) {
            long long ra = w.retry_after_ms;
            proc_sleep_ms((int)(ra > 0 && ra < 2000 ? ra : 100));
            continue;
        }
        if (a == WORKER_ERROR) {
            if (!atomic_load(&f->dead[k->agent])) {
                k->errors++;
                snprintf(k->error, sizeof(k->error), "%s", w.error);
            }
            open = 0;
            continue;
        }
        double t = proc_now_ms();
        int local = strstr(w.grant, ":L") != NULL;
        long st = worker_call_post(&w, f->endpoint, "d", "hello from a partition test", 20, 15000);
        rec_add(k, t, st, local);
        if (worker_call_settle(&w, st == 200   ? "ok"
                                   : st == 429 ? "throttled"
                                               : "failed") != 0 &&
            !atomic_load(&f->dead[k->agent]))
            k->errors++;
    }
    worker_call_close(&w);
    return NULL;
}

/* ---- the sampler: each agent's STATUS d every 200 ms ------------------------------ */

static void status_of(const sluiced_fixture *a, char *mode, size_t n, long long *live, double *eff, double *out) {
    snprintf(mode, n, "?");
    *live = -1;
    if (eff) *eff = -1;
    if (out) *out = -1;
    redisContext *c = sluiced_fixture_connect(a, 1000);
    redisReply *r = c ? redisCommand(c, "STATUS d") : NULL;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
        if (!k || !v) continue;
        if (!strcmp(k, "mode")) snprintf(mode, n, "%s", v);
        if (!strcmp(k, "agent_live_agents")) *live = atoll(v);
        if (eff && !strcmp(k, "effective_rpm")) *eff = atof(v);
        if (out && !strcmp(k, "outside_rpm")) *out = atof(v);
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
}

static void *sampler_main(void *arg) {
    pfleet *f = arg;
    while (!atomic_load(&f->stop)) {
        int i = atomic_load(&f->nsamples);
        if (i >= SAMPLES) break;
        sample *s = &f->samples[i];
        s->t = proc_now_ms();
        for (int a = 0; a < AGENTS; a++) {
            if (atomic_load(&f->dead[a])) {
                snprintf(s->mode[a], sizeof(s->mode[a]), "dead");
                s->live[a] = -1;
            } else {
                status_of(&f->agent[a], s->mode[a], sizeof(s->mode[a]), &s->live[a], a == 0 ? &s->effective_rpm : NULL,
                          a == 0 ? &s->outside_rpm : NULL);
            }
        }
        atomic_store(&f->nsamples, i + 1);
        proc_sleep_ms(200);
    }
    return NULL;
}

/* The first sample at or after from where agent a's mode is (or is not,
 * when negate) want; -1 when none. */
static double first_mode(pfleet *f, int a, double from, const char *want, int negate) {
    int n = atomic_load(&f->nsamples);
    for (int i = 0; i < n; i++)
        if (f->samples[i].t >= from && (strcmp(f->samples[i].mode[a], want) == 0) != negate) return f->samples[i].t;
    return -1;
}

static double first_live(pfleet *f, int a, double from, long long want) {
    int n = atomic_load(&f->nsamples);
    for (int i = 0; i < n; i++)
        if (f->samples[i].t >= from && f->samples[i].live[a] == want) return f->samples[i].t;
    return -1;
}

/* ---- the fleet -------------------------------------------------------------------- */

static void fleet_stop(pfleet *f) {
    atomic_store(&f->stop, 1);
    for (int i = 0; i < AGENTS * CALLERS; i++)
        if (f->w[i].started) pthread_join(f->w[i].tid, NULL);
    if (f->have_sampler) pthread_join(f->sampler, NULL);
    f->have_sampler = 0;
    for (int i = AGENTS - 1; i >= 0; i--)
        if (f->agent[i].pid > 0) sluiced_fixture_stop(&f->agent[i], 0);
    for (int i = 0; i < AGENTS; i++) {
        relay_stop(f->relay[i]);
        f->relay[i] = NULL;
    }
    mock_fixture_stop(&f->mock);
    redis_fixture_stop(&f->redis);
    for (int i = 0; i < AGENTS * CALLERS; i++) free(f->w[i].rec);
}

static void fleet_start(pfleet *f, const scenario *s) {
    memset(f, 0, sizeof(*f));
    f->idle1 = s->idle1;
    assert_int_equal(redis_fixture_start_ex(&f->redis, "", 0), 0);
    const char *margs[] = {"--deployment", "d", "--rpm", "600", "--service-ms", "100-300", "--seed", "15", NULL};
    assert_int_equal(mock_fixture_start(&f->mock, margs, 10000), 0);
    double err_ms;
    assert_int_equal(ledger_clock_offset(&f->mock, &f->offset, &err_ms), 0);
    snprintf(f->endpoint, sizeof(f->endpoint), "http://127.0.0.1:%d", f->mock.port);
    for (int i = 0; i < AGENTS; i++) {
        char err[256], name[16], yaml[2048];
        f->relay[i] = relay_start(f->redis.port, 0, err, sizeof(err));
        if (!f->relay[i]) fail_msg("relay_start: %s", err);
        snprintf(name, sizeof(name), "agent%d", i);
        snprintf(yaml, sizeof(yaml),
                 "redis: {url: \"redis://127.0.0.1:%d\"}\n"
                 "agent: {socket: \"%%SOCK%%\", id: %s, heartbeat_ms: %d, silent_hold_ms: %d, fail: %s, "
                 "max_clients: 256, log_level: info}\n"
                 "deployments:\n"
                 "  d: {rpm: %d, burst: {requests: %d}, endpoint: \"%s\", max_wait_ms: %d}\n",
                 relay_port(f->relay[i]), name, HEARTBEAT_MS, s->hold_ms, s->fail ? s->fail : "open", (int)RPM, BURST,
                 f->endpoint, MAX_WAIT_MS);
        assert_int_equal(sluiced_fixture_init(&f->agent[i], f->redis.dir, name), 0);
        assert_int_equal(sluiced_fixture_write_config(&f->agent[i], yaml), 0);
        assert_int_equal(sluiced_fixture_launch(&f->agent[i], NULL, 10000), 0);
    }
    /* Every agent sees the 3 of them before the traffic starts. */
    for (int i = 0; i < AGENTS; i++) {
        double deadline = proc_now_ms() + 10000;
        char mode[16];
        long long live = 0;
        while (proc_now_ms() < deadline) {
            status_of(&f->agent[i], mode, sizeof(mode), &live, NULL, NULL);
            if (live == AGENTS && !strcmp(mode, "redis")) break;
            proc_sleep_ms(50);
        }
        if (live != AGENTS) fail_msg("agent%d sees %lld live agents, not %d", i, live, AGENTS);
    }
    for (int a = 0; a < AGENTS; a++)
        for (int c = 0; c < CALLERS; c++) {
            pworker *k = &f->w[a * CALLERS + c];
            k->f = f;
            k->agent = a;
            k->index = c;
            k->started = pthread_create(&k->tid, NULL, worker_main, k) == 0;
        }
    f->have_sampler = pthread_create(&f->sampler, NULL, sampler_main, f) == 0;
}

/* The agents' WARN and ERROR lines (at most 20 each), and how many of each. */
static void print_agent_logs(const pfleet *f) {
    for (int a = 0; a < AGENTS; a++) {
        FILE *l = fopen(f->agent[a].log, "r");
        char line[1024];
        int warn = 0, error = 0;
        while (l && fgets(line, sizeof(line), l)) {
            int w = strstr(line, " WARN: ") != NULL, e = strstr(line, " ERROR: ") != NULL;
            warn += w;
            error += e;
            if ((w || e) && warn + error <= 20) printf("    agent%d log: %s", a, line);
        }
        if (l) fclose(l);
        printf("  agent%d log: %d WARN, %d ERROR lines\n", a, warn, error);
    }
}

static size_t sends_between(const pfleet *f, int agent, double from, double to) {
    size_t n = 0;
    for (int i = 0; i < AGENTS * CALLERS; i++) {
        const pworker *k = &f->w[i];
        if (k->agent != agent) continue;
        for (size_t j = 0; j < k->n; j++) n += k->rec[j].t >= from && k->rec[j].t < to;
    }
    return n;
}

/* Agent a's sends in [from, to): how many were granted by Redis and how
 * many locally, the last Redis one, the first and last local ones (-1
 * when none). */
typedef struct split {
    size_t redis, local;
    double last_redis, first_local, last_local;
} split;

static split split_between(const pfleet *f, int agent, double from, double to) {
    split r = {0, 0, -1, -1, -1};
    for (int i = 0; i < AGENTS * CALLERS; i++) {
        const pworker *k = &f->w[i];
        if (k->agent != agent) continue;
        for (size_t j = 0; j < k->n; j++) {
            double t = k->rec[j].t;
            if (t < from || t >= to) continue;
            if (k->rec[j].local) {
                r.local++;
                if (r.first_local < 0 || t < r.first_local) r.first_local = t;
                if (t > r.last_local) r.last_local = t;
            } else {
                r.redis++;
                if (t > r.last_redis) r.last_redis = t;
            }
        }
    }
    return r;
}

/* Accepts per second (ledger) from `from` for `secs` seconds, as one line;
 * marks the seconds where the fault started and ended. */
static void print_per_second(const double *acc, size_t n, double from, int secs, double fault_at, double fault_end) {
    char line[4096];
    size_t used = (size_t)snprintf(line, sizeof(line), "  accepts per second from %.0f s:", (from - fault_at) / 1000);
    for (int s = 0; s < secs && used < sizeof(line) - 32; s++) {
        double a = from + s * 1000.0;
        const char *mark = fabs(a - fault_at) < 500                     ? " |fault|"
                           : fault_end > 0 && fabs(a - fault_end) < 500 ? " |end|"
                                                                        : "";
        used += (size_t)snprintf(line + used, sizeof(line) - used, "%s %zu", mark, ledger_count(acc, n, a, a + 1000));
    }
    printf("%s\n", line);
}

/* 2 s windows [v, v + 2 s) every 100 ms from the kill: the start of the
 * first one from which the rate is at >= 95 % and stays there (every
 * window starting up to 4 s later too); -1 when never. The fleet is "back"
 * from that moment; the window's end is when a 2 s meter would show it. */
static double recovered_from(const double *acc, size_t n, double kill, double end) {
    const double w = 2000, need = 0.95 * RATE_PER_MS * w;
    for (double u = kill; u + w + 4000 <= end; u += 100) {
        int ok = 1;
        for (double v = u; ok && v <= u + 4000; v += 100) ok = (double)ledger_count(acc, n, v, v + w) >= need;
        if (ok) return u;
    }
    return -1;
}

static void run_scenario(const scenario *s) {
    if (getenv("PARTITION_ONLY") && !strstr(s->name, getenv("PARTITION_ONLY"))) skip();
    if (!sluiced_fixture_binary() || !mock_fixture_binary()) {
        fprintf(stderr, "test_partition: SKIPPED: build sluiced and sluice first\n");
        skip();
    }
    nfail = 0;
    harness_err[0] = '\0';
    static pfleet f;
    fleet_start(&f, s);
    const int cut_ms = s->cut_ms > 0 ? s->cut_ms : FAULT_MS;
    double t0 = proc_now_ms(), t_fault = t0 + WARM_MS, t_heal = -1;
    double t_end = t_fault + (s->kill ? AFTER_MS : cut_ms + AFTER_MS);
    int faulted = 0, healed = 0;
    while (proc_now_ms() < t_end) {
        double now = proc_now_ms();
        if (!faulted && now >= t_fault) {
            faulted = 1;
            t_fault = proc_now_ms();
            if (s->kill) {
                atomic_store(&f.dead[1], 1);
                sluiced_fixture_stop(&f.agent[1], 1);
            } else {
                for (int i = 1; i <= s->ncut; i++)
                    if (relay_set_mode(f.relay[i], s->how) != 0) harness_fail("relay %d: mode not applied", i);
                atomic_store(&f.go1, 1);
            }
        }
        if (faulted && !healed && !s->kill && now >= t_fault + cut_ms) {
            healed = 1;
            for (int i = 1; i <= s->ncut; i++)
                if (relay_set_mode(f.relay[i], RELAY_PASS) != 0) harness_fail("relay %d: pass not applied", i);
            t_heal = proc_now_ms();
        }
        proc_sleep_ms(10);
    }
    /* Stop taking slots; the last calls finish before the ledger is read. */
    atomic_store(&f.stop, 1);
    for (int i = 0; i < AGENTS * CALLERS; i++)
        if (f.w[i].started) pthread_join(f.w[i].tid, NULL);
    for (int i = 0; i < AGENTS * CALLERS; i++) f.w[i].started = 0;
    json_t *ledger = mock_fixture_stats(&f.mock, "");
    size_t n = 0;
    double *acc = ledger ? ledger_accepts(ledger, "d", &n) : NULL;
    if (n < 100) {
        harness_fail("the mock accepted %zu calls (no ledger, or no traffic)", n);
        free(acc);
        json_decref(ledger);
        fleet_stop(&f);
        fail_msg("%s", harness_err);
    }
    /* Everything on the ledger's clock from here. */
    double lf = t_fault - f.offset, lh = t_heal > 0 ? t_heal - f.offset : -1, lend = t_end - f.offset;
    long long requests = mock_fixture_count(ledger, "deployments/d/requests");
    long long n429 = mock_fixture_count(ledger, "deployments/d/status_429");
    long long errors = 0;
    for (int i = 0; i < AGENTS * CALLERS; i++) {
        errors += f.w[i].errors;
        if (f.w[i].errors)
            printf("  worker %d-%d: %lld errors, last: %s\n", f.w[i].agent, f.w[i].index, f.w[i].errors, f.w[i].error);
    }

    printf("  scenario %s: %s; %lld requests at the mock, %zu accepted, %lld 429s; %lld worker errors\n", s->name,
           s->kill        ? "agent 1 killed with SIGKILL"
           : s->ncut == 1 ? (s->how == RELAY_CUT ? "agent 1 cut (closed, refused)" : "agent 1 black-holed")
                          : (s->how == RELAY_CUT ? "agents 1, 2 cut (closed, refused)" : "agents 1, 2 black-holed"),
           requests, n, n429, errors);
    print_per_second(acc, n, lf - WARM_MS, (int)((lend - lf + WARM_MS) / 1000), lf, lh);
    double at;
    size_t first_win = ledger_max_window(acc, n, WINDOW_MS, acc[0], acc[0] + 1, &at);
    size_t max10 = ledger_max_window(acc, n, WINDOW_MS, acc[0], lend, &at);
    printf("  largest 10 s window: %zu accepts = %.3f x the quota (%.0f), starting at %+.1f s from the fault "
           "(the first window: %zu)\n",
           max10, (double)max10 / QUOTA_10S, QUOTA_10S, (at - lf) / 1000, first_win);
    double fault_len = s->kill ? AFTER_MS : cut_ms;
    size_t during = ledger_count(acc, n, lf, lf + fault_len);
    printf("  fleet during the fault [0, %.0f s): %.2f accepts/s (rate %.1f/s, %.2f x)\n", fault_len / 1000,
           (double)during / (fault_len / 1000), RATE_PER_MS * 1000, (double)during / (fault_len * RATE_PER_MS));
    if (!s->kill) {
        size_t after = ledger_count(acc, n, lh, lh + 10000);
        printf("  fleet in the 10 s after the reconnect: %.2f accepts/s (%.2f x)\n", (double)after / 10,
               (double)after / (10000 * RATE_PER_MS));
    }
    for (int a = 0; a < AGENTS; a++) {
        double sends = (double)sends_between(&f, a, t_fault, t_fault + fault_len) / (fault_len / 1000);
        double before = (double)sends_between(&f, a, t_fault - 5000, t_fault) / 5;
        printf("  agent%d: %.2f sends/s in the 5 s before the fault, %.2f/s during it (rate/3 = %.2f/s)%s\n", a, before,
               sends, RATE_PER_MS * 1000 / 3,
               s->kill && a == 1 ? " [killed]" : (a >= 1 && a <= s->ncut ? " [cut]" : ""));
    }
    for (int a = 0; a < AGENTS; a++) {
        char line[2048];
        size_t used = (size_t)snprintf(line, sizeof(line), "  agent%d sends per second from -10 s:", a);
        for (double u = t_fault - WARM_MS; u < t_end && used < sizeof(line) - 16; u += 1000)
            used += (size_t)snprintf(line + used, sizeof(line) - used, " %zu", sends_between(&f, a, u, u + 1000));
        printf("%s\n", line);
    }
    print_agent_logs(&f);
    {
        /* The shared state's effective rate: the provider's headers (others'
         * use of the key, adapt.outside) move it. One figure a second. */
        char line[2048];
        size_t used = (size_t)snprintf(line, sizeof(line), "  effective_rpm (outside_rpm) per second from -10 s:");
        int ns = atomic_load(&f.nsamples);
        double next = t_fault - WARM_MS;
        for (int i = 0; i < ns && used < sizeof(line) - 24; i++) {
            if (f.samples[i].t < next) continue;
            next += 1000;
            used += (size_t)snprintf(line + used, sizeof(line) - used, " %.0f(%.0f)", f.samples[i].effective_rpm,
                                     f.samples[i].outside_rpm);
        }
        printf("%s\n", line);
    }
    relay_counts rc;
    for (int a = 1; a <= s->ncut; a++) {
        double local_at = first_mode(&f, a, t_fault, "local", 0);
        double back_at = first_mode(&f, a, t_heal, "redis", 0);
        relay_get_counts(f.relay[a], &rc);
        printf("  agent%d: STATUS mode local %.0f ms after the cut, redis %.0f ms after the reconnect; relay: %lld "
               "connections accepted, %lld closed by the cut, %lld held, %lld bytes up, %lld down\n",
               a, local_at < 0 ? -1 : local_at - t_fault, back_at < 0 ? -1 : back_at - t_heal, rc.accepted,
               rc.closed_by_cut, rc.held, rc.bytes_up, rc.bytes_down);
        if (local_at < 0 || local_at > t_heal) harness_fail("agent%d never reported mode local while cut", a);
        if (back_at < 0) harness_fail("agent%d never came back to mode redis", a);
    }
    double recovered = -1;
    if (s->idle1) {
        double back_at = first_mode(&f, 1, t_heal, "redis", 0);
        recovered = recovered_from(acc, n, lh, lend);
        printf("  idle-hole: agent1 back in mode redis %.0f ms after the heal; the fleet at >= 95 %% of the rate "
               "from %.0f ms after it (every 2 s window from then, for 4 s)\n",
               back_at < 0 ? -1 : back_at - t_heal, recovered < 0 ? -1 : recovered - lh);
        BOUND(back_at >= 0 && back_at - t_heal <= 1000, "idle-hole: agent1 back within 1 s of the heal: %.0f ms",
              back_at < 0 ? -1 : back_at - t_heal);
        /* Issue 23: within 2 s (the slots granted at the held rate are
         * re-timed at the return, lua/heartbeat.lua; before, they were
         * released as granted, about 3 s of them here). */
        BOUND(recovered >= 0 && recovered - lh <= 2000,
              "idle-hole: the fleet at >= 95 %% of the rate within 2 s of the heal: %.0f ms",
              recovered < 0 ? -1 : recovered - lh);
    }
    if (s->kill) {
        double expired = first_live(&f, 0, t_fault, AGENTS - 1);
        recovered = recovered_from(acc, n, lf, lend);
        printf("  agent0 saw %d live agents %.0f ms after the kill (expiry: its promise, at most %d ms, + "
               "silent_hold_ms %d ms); the others at >= 95 %% of the rate from %.0f ms after the kill on (every 2 s "
               "window from then, for 4 s; the first one ends at %.0f ms)\n",
               AGENTS - 1, expired < 0 ? -1 : expired - t_fault, SILENT_MS, expiry_ms(s),
               recovered < 0 ? -1 : recovered - lf, recovered < 0 ? -1 : recovered - lf + 2000);
    }

    /* The bounds of issue 15. */
    const int control = s->ncut > 0 && s->cut_ms >= expiry_ms(s) && !(s->fail && !strcmp(s->fail, "hold"));
    if (control)
        BOUND((double)max10 > 1.02 * QUOTA_10S,
              "control (agent.fail: open, the cut outlasting the expiry): the ledger shows the over-offer after the "
              "expiry: largest %zu (%.3f x)",
              max10, (double)max10 / QUOTA_10S);
    else
        BOUND((double)max10 <= 1.02 * QUOTA_10S, "no 10 s window above 1.02 x the quota: largest %zu (%.3f x)", max10,
              (double)max10 / QUOTA_10S);
    BOUND(n429 * 100 <= requests, "<= 1 %% 429s: %lld of %lld requests (%.2f %%)", n429, requests,
          requests ? 100.0 * (double)n429 / (double)requests : 0.0);
    /* The cut agents while cut. A cut that outlasts the expiry is judged
     * below (agent.fail: hold stops at it; open over-offers after it). */
    const double share = RATE_PER_MS * 1000 / AGENTS, cut_s = (t_heal - t_fault) / 1000;
    const int long_cut = s->ncut > 0 && cut_ms + 0.0 >= expiry_ms(s);
    for (int a = 1; a <= s->ncut; a++) {
        split sp = split_between(&f, a, t_fault, t_heal);
        /* Once local, its pacing: the local sends' spacing against the share. */
        double local_rate = sp.local >= 2 && sp.last_local > sp.first_local
                                ? (double)(sp.local - 1) / ((sp.last_local - sp.first_local) / 1000)
                                : -1;
        /* What the cut costs it, documented (docs/operations.md): it waits
         * until the others hold its share back (its last promise, at most
         * SILENT_MS, + PAD_MS) past the fleet's schedule, its local bucket
         * starts empty there (one slot, 1 / share), and a black hole is
         * noticed at redis.timeout_ms. Its Redis grants cover its part of
         * the fleet's schedule meanwhile. Two sends of slack: its callers'
         * part of the schedule at the cut is theirs, not exactly a third
         * (slots come to each agent in runs). */
        double cost_ms = SILENT_MS + PAD_MS + 1000 / share + (s->how == RELAY_BLACKHOLE ? TIMEOUT_MS : 0);
        printf("  agent%d while cut: %zu sends on Redis grants (the last %.0f ms after the cut), %zu local (the first "
               "%.0f ms after the cut, the last %.0f ms after it); local pacing %.2f/s (share %.2f/s, %.0f %%)\n",
               a, sp.redis, sp.last_redis < 0 ? -1 : sp.last_redis - t_fault, sp.local,
               sp.first_local < 0 ? -1 : sp.first_local - t_fault, sp.last_local < 0 ? -1 : sp.last_local - t_fault,
               local_rate, share, local_rate < 0 ? 0 : 100 * local_rate / share);
        if (s->idle1) continue; /* one caller: judged above */
        if (long_cut) {
            if (s->fail && !strcmp(s->fail, "hold"))
                BOUND(sp.local > 0 && sp.last_local - t_fault <= expiry_ms(s),
                      "agent%d (agent.fail: hold) served locally, and no local send later than the expiry "
                      "(%d ms) after the cut: %zu local sends, the last %.0f ms after the cut",
                      a, expiry_ms(s), sp.local, sp.last_local < 0 ? -1 : sp.last_local - t_fault);
            continue;
        }
        double sends = (double)(sp.redis + sp.local), floor_ = share * (cut_s - cost_ms / 1000) - 2;
        BOUND(sends >= floor_ && sends <= 1.10 * share * cut_s,
              "agent%d at its share while cut: %.0f sends in %.1f s (%.0f %% of rate/3), at least rate/3 x (the cut - "
              "%.0f ms) - 2 = %.1f, at most 110 %%",
              a, sends, cut_s, 100 * sends / (share * cut_s), cost_ms, floor_);
        BOUND(local_rate >= 0.95 * share && local_rate <= 1.05 * share,
              "agent%d paces its local grants at its share (95..105 %% of rate/3): %.2f/s (%.0f %%)", a, local_rate,
              local_rate < 0 ? 0 : 100 * local_rate / share);
    }
    if (s->kill) {
        /* The others stop holding the killed agent's share back once its
         * last promise (at most SILENT_MS) and the expiry passed; 2 s more
         * to reach >= 95 %. */
        int bound = SILENT_MS + expiry_ms(s) + 2000;
        BOUND(recovered >= 0 && recovered - lf <= bound,
              "after kill -9 the others at >= 95 %% within its promise + the expiry + 2 s (%d + %d + 2000 = %d ms): "
              "%.0f ms",
              SILENT_MS, expiry_ms(s), bound, recovered < 0 ? -1 : recovered - lf);
    }
    free(acc);
    json_decref(ledger);
    fleet_stop(&f);
    if (harness_err[0]) fail_msg("%s: harness: %s", s->name, harness_err);
    if (nfail) fail_msg("%s: %d bound(s) of issue 15 failed (figures above)", s->name, nfail);
}

static void test_cut1(void **state) { run_scenario(&(scenario){"cut1", 1, RELAY_CUT, 0, 0, 0, NULL, 0}); }
static void test_cut1_hole(void **state) {
    run_scenario(&(scenario){"cut1-hole", 1, RELAY_BLACKHOLE, 0, 0, 0, NULL, 0});
}
static void test_cut2(void **state) { run_scenario(&(scenario){"cut2", 2, RELAY_CUT, 0, 0, 0, NULL, 0}); }
static void test_cut2_hole(void **state) {
    run_scenario(&(scenario){"cut2-hole", 2, RELAY_BLACKHOLE, 0, 0, 0, NULL, 0});
}
/* A short expiry (3 heartbeats, the least there is): quick, and the bound
 * is judged from what is configured. */
static void test_kill9(void **state) { run_scenario(&(scenario){"kill9", 0, RELAY_PASS, 1, EXPIRY_MS, 0, NULL, 0}); }
/* A cut longer than the expiry (7 s, cut 14 s): with agent.fail: hold the
 * cut agent paces locally (from about 4 s: its promise and the fleet's
 * schedule come first) and stops granting before the others take its
 * share back; the control, agent.fail: open, over-offers after the
 * expiry. */
static void test_long_hold(void **state) {
    run_scenario(&(scenario){"long-hold", 1, RELAY_CUT, 0, 7000, 14000, "hold", 0});
}
static void test_long_open(void **state) {
    run_scenario(&(scenario){"long-open", 1, RELAY_CUT, 0, 7000, 14000, "open", 0});
}
static void test_idle_hole(void **state) {
    run_scenario(&(scenario){"idle-hole", 1, RELAY_BLACKHOLE, 0, 0, 0, NULL, 1});
}

static int teardown(void **state) {
    sluiced_fixture_kill_all();
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* a worker writing to a killed agent gets EPIPE */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_cut1, teardown),      cmocka_unit_test_teardown(test_cut1_hole, teardown),
        cmocka_unit_test_teardown(test_cut2, teardown),      cmocka_unit_test_teardown(test_cut2_hole, teardown),
        cmocka_unit_test_teardown(test_kill9, teardown),     cmocka_unit_test_teardown(test_long_hold, teardown),
        cmocka_unit_test_teardown(test_long_open, teardown), cmocka_unit_test_teardown(test_idle_hole, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
