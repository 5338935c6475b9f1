/* bench_incident: the seeds' 03:00 incident replayed on the mock.
 *
 * A back-office import (P processes, each with a fixed number of requests
 * in progress, a backlog that never drains) and a customer-facing
 * assistant (one process, arrivals at a share of the quota, 10 % by
 * default, Poisson or evenly spaced) share one deployment of `sluice mock`
 * (burst one second of quota, the seed's 300-900 ms service time, real
 * time). The same fleet runs once per scenario, each against a fresh
 * deployment of the mock:
 *
 *   lanes     sluice; the assistant asks LANE interactive (priority 0), the
 *             import LANE batch (priority 1)
 *   headroom  the same with headroom 0.2 on the interactive lane
 *   onelane   sluice; nobody names a lane (one first-come-first-served queue)
 *   bucket    the seed's fix: every process paces itself with its own
 *             bucket (strict spacing, as the seed's harness); the import's P
 *             replicas divide the quota (rpm / P each, the seed's sizing
 *             advice), the assistant (one process) paces at the full quota;
 *             429s sleep Retry-After as sent (whole seconds), 10 attempts
 *   split     the seed's bucket with the quota divided over every process
 *             of the deployment, assistant included (rpm / (P + 1) each)
 *   storm     the incident itself: the import sends without pacing and
 *             retries with exponential backoff and full jitter (base 200 ms,
 *             ignores Retry-After, 10 attempts: the seed's strategy A); the
 *             assistant as in bucket
 *
 * Processes are thread groups of this program, each with its own pacer,
 * its own x-client-id at the mock, and, for sluice, its own sluiced (P + 1
 * agents on one private redis-server), so lanes are ordered across agents
 * through Redis as in a fleet. Every thread is one worker_call
 * (support/worker_call.h): HTTP to the mock, and for sluice RESP to its
 * agent (ACQUIRE, SETTLE with the provider's headers, RETRY).
 *
 * Measured per scenario, after a warm-up, over a window of wall time:
 *   - the assistant's wait: from the request's (scheduled) arrival to the
 *     send of the attempt the provider accepted, p50/p95/p99/max, for the
 *     requests arriving in the window (a request that gave up counts as an
 *     infinite wait); the wait its agent reported; end-to-end p95;
 *   - for sluice, the lane bound checked per request: one emission interval
 *     + lane_step_ms + jitter_ms, plus one interval per earlier assistant
 *     request still waiting (see lane_bound);
 *   - the assistant's 429s and sheds, as its client saw them;
 *   - from the provider's ledger (GET /stats at the window's edges): the
 *     import's and the assistant's accepted requests as a share of the
 *     quota, and the 429s in the window and over the scenario.
 * Prints a table; asserts nothing. The default run takes about 3 minutes.
 *
 * Usage: bench_incident [--rpm N] [--seconds S] [--warmup S] ... (--help)
 * Needs SLUICE_BUILD_DIR (the build directory: agent/sluiced and sluice). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "mock_fixture.h"
#include "proc.h"
#include "redis_fixture.h"
#include "sluiced_fixture.h"
#include "worker_call.h"
#include "bench_opts.h"

#define MAX_BATCH_PROCS 16
#define MAX_PROCS (MAX_BATCH_PROCS + 1)
#define MAX_CONCURRENCY 256
#define ASSISTANT_THREADS 128
#define ATTEMPTS 10           /* per request, as in the seed's harness */
#define BACKOFF_BASE_MS 200.0 /* the seed's strategy A */
#define MAX_TOKENS 64
#define HTTP_TIMEOUT_MS 60000L
#define RESP_TIMEOUT_MS 600000 /* longer than any wait for a slot here */
#define MAX_SHEDS 1000         /* a request shed this often gives up */
#define DRAIN_MS 120000        /* longest wait for the window's requests to finish */
#define THREAD_STACK (512 * 1024)
#define DEFAULT_SCENARIOS "lanes,onelane,bucket,split,headroom,storm"

/* ---- options ------------------------------------------------------------------ */

typedef struct opts {
    double rpm, burst, seconds, warmup, share;
    double service_lo, service_hi;
    double batch_procs, concurrency, lane_step_ms, jitter_ms, seed;
    const char *scenarios;
    const char *arrivals;
    int help;
} opts;

#define O(f) offsetof(opts, f)
static const opt_row opt_rows[] = {
    {"--rpm", OPT_NUM, O(rpm), 60, 1e6, "the deployment's quota, requests per minute (1200)"},
    {"--burst", OPT_NUM, O(burst), 1, 1e6, "the provider's burst, and sluice's (rpm / 60: one second of quota)"},
    {"--seconds", OPT_NUM, O(seconds), 1, 3600, "measured window per scenario, s (20)"},
    {"--warmup", OPT_NUM, O(warmup), 0, 600, "warm-up before the window, s (8)"},
    {"--share", OPT_NUM, O(share), 0.001, 0.9, "the assistant's arrival rate as a share of the quota (0.10)"},
    {"--service-lo", OPT_NUM, O(service_lo), 0, 60000, "the mock's service time, low end, ms (300)"},
    {"--service-hi", OPT_NUM, O(service_hi), 0, 60000, "the mock's service time, high end, ms (900)"},
    {"--batch-procs", OPT_NUM, O(batch_procs), 1, MAX_BATCH_PROCS, "import processes P (3)"},
    {"--concurrency", OPT_NUM, O(concurrency), 1, MAX_CONCURRENCY,
     "requests in progress per import process, like sluice run -j (32)"},
    {"--lane-step-ms", OPT_NUM, O(lane_step_ms), 1, 10000, "sluice's lane_step_ms (10)"},
    {"--jitter-ms", OPT_NUM, O(jitter_ms), 0, 10000, "sluice's jitter_ms (10)"},
    {"--seed", OPT_NUM, O(seed), 0, 1e15, "seed of the arrivals and the mock (1)"},
    {"--arrivals", OPT_STR, O(arrivals), 0, 0, "the assistant's arrivals: poisson or fixed (evenly spaced) (poisson)"},
    {"--scenarios", OPT_STR, O(scenarios), 0, 0, "comma-separated, run in that order (" DEFAULT_SCENARIOS ")"},
    {"--help", OPT_FLAG, O(help), 0, 0, "show this help"},
};
#define NOPTS (sizeof(opt_rows) / sizeof(opt_rows[0]))

static int opts_parse(opts *o, int argc, char **argv) {
    return bench_opts_parse("bench_incident", opt_rows, NOPTS, o, argc, argv);
}

/* ---- scenarios ------------------------------------------------------------------ */

typedef enum client_kind {
    CLIENT_SLUICE, /* ACQUIRE, send, SETTLE with the headers, RETRY before another attempt */
    CLIENT_BUCKET, /* own pacer (strict spacing), sleeps Retry-After after a 429 */
    CLIENT_BACKOFF /* no pacing, exponential backoff with full jitter, ignores Retry-After */
} client_kind;

typedef struct scenario {
    const char *id;
    const char *label;
    const char *deployment; /* at the mock and in sluiced */
    client_kind import, assistant;
    const char *import_lane; /* LANE on ACQUIRE; NULL: none */
    const char *assistant_lane;
    int split; /* buckets: the quota over every process, not the import's only */
} scenario;

static const scenario scenarios[] = {
    {"lanes", "sluice, lanes", "inc-lanes", CLIENT_SLUICE, CLIENT_SLUICE, "batch", "interactive", 0},
    {"headroom", "sluice, lanes + headroom 0.2", "inc-headroom", CLIENT_SLUICE, CLIENT_SLUICE, "batch", "interactive",
     0},
    {"onelane", "sluice, one lane", "inc-onelane", CLIENT_SLUICE, CLIENT_SLUICE, NULL, NULL, 0},
    {"bucket", "per-process bucket", "inc-bucket", CLIENT_BUCKET, CLIENT_BUCKET, NULL, NULL, 0},
    {"split", "per-process bucket, split P+1", "inc-split", CLIENT_BUCKET, CLIENT_BUCKET, NULL, NULL, 1},
    {"storm", "no pacing, exp backoff", "inc-storm", CLIENT_BACKOFF, CLIENT_BUCKET, NULL, NULL, 0},
};
#define NSCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

/* ---- small helpers ----------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-quantile of sorted v (nearest rank). */
static double quantile(const double *v, size_t n, double p) {
    if (n == 0) return NAN;
    size_t i = (size_t)ceil(p * (double)n);
    return v[i == 0 ? 0 : i - 1];
}

/* ---- one scenario's run ------------------------------------------------------------ */

/* One request of the assistant: when it arrived and what happened to it. */
typedef struct ireq {
    double arrive_ms;
    double first_send_ms; /* first attempt sent, < 0: never */
    double send_ms;       /* the accepted attempt sent, < 0: none */
    double done_ms;       /* the response of the accepted attempt */
    double agent_wait_ms; /* sluice: the waits its agent reported, summed over ACQUIREs */
    int n429, sheds, ok;
    _Atomic int finished;
} ireq;

typedef struct run run;

/* One process of the fleet. */
typedef struct fleet_proc {
    run *r;
    int assistant; /* 1: the assistant, 0: an import replica */
    client_kind kind;
    const char *lane;
    char client_id[32];
    const char *agent_sock;
    double pace_ms; /* CLIENT_BUCKET: spacing of its sends */
    pthread_mutex_t pace_mu;
    double pace_next_ms;
    atomic_llong gave_up, errors;
} fleet_proc;

typedef struct thread_ctx {
    fleet_proc *p;
    pthread_t tid;
    worker_call wc; /* HTTP to the mock; RESP to the process's agent for sluice */
    int opened;
    uint64_t rng;
    long long seq;
} thread_ctx;

struct run {
    const opts *o;
    const scenario *sc;
    char endpoint[64]; /* the mock: http://127.0.0.1:PORT */
    fleet_proc procs[MAX_PROCS];
    int nprocs;
    thread_ctx *threads;
    int nthreads;
    ireq *reqs; /* the assistant's arrivals, in time order */
    size_t nreqs;
    atomic_size_t next_req;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: start barrier, stop, sleeps */
    int ready, failed, go, stop;
};

/* Sleeps until t_ms (CLOCK_MONOTONIC ms) or the stop. Returns 1 when stopped. */
static int run_sleep_until(run *r, double t_ms) {
    struct timespec ts = {(time_t)(t_ms / 1000), (long)(fmod(t_ms, 1000.0) * 1e6)};
    pthread_mutex_lock(&r->mu);
    while (!r->stop && proc_now_ms() < t_ms)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT) break;
    int stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stopped;
}

static int run_stopping(run *r) {
    pthread_mutex_lock(&r->mu);
    int s = r->stop;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* ---- the provider's answer and sluiced's retry budget ------------------------------- */

/* Retry-After in seconds, as the seed's client reads it: absent means 1. */
static double retry_after_s(const worker_call *w) {
    const char *v = worker_call_header(w, "retry-after");
    if (!v) return 1;
    char *end;
    long sec = strtol(v, &end, 10);
    return *end || sec < 0 ? 1 : (double)sec;
}

/* 1: the fleet's retry budget allows another attempt, 0: not, -1: error. */
static int sluice_retry(thread_ctx *t) {
    const char *argv[] = {"RETRY", t->p->r->sc->deployment};
    redisReply *r = worker_call_command(&t->wc, 2, argv);
    int res = -1;
    if (r && r->type == REDIS_REPLY_INTEGER) res = r->integer == 1;
    else if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NORETRY", 7) == 0) res = 0;
    if (r) freeReplyObject(r);
    return res;
}

/* ---- one request, the way the process's client behaves -------------------------------- */

/* Waits for the process's pacer (the seed's client-side bucket: strict
 * spacing, like its harness). Returns 1 when stopped. */
static int pace(thread_ctx *t) {
    fleet_proc *p = t->p;
    pthread_mutex_lock(&p->pace_mu);
    double now = proc_now_ms();
    if (p->pace_next_ms < now) p->pace_next_ms = now;
    double at = p->pace_next_ms;
    p->pace_next_ms += p->pace_ms;
    pthread_mutex_unlock(&p->pace_mu);
    return run_sleep_until(p->r, at);
}

/* SETTLE the last grant; a refusal is a client error (unless stopping). */
static void settle(thread_ctx *t, const char *outcome) {
    if (worker_call_settle(&t->wc, outcome) != 0 && !run_stopping(t->p->r)) {
        fprintf(stderr, "bench_incident: %s: %s\n", t->p->client_id, t->wc.error);
        atomic_fetch_add(&t->p->errors, 1);
    }
}

/* Sends one request until accepted or out of attempts. rec (the
 * assistant's) receives the times. Returns 1 when the provider accepted it. */
static int do_request(thread_ctx *t, ireq *rec) {
    fleet_proc *p = t->p;
    run *r = p->r;
    worker_call *w = &t->wc;
    char content[128];
    snprintf(content, sizeof(content), "%s request %lld: summarise this document in one line.", p->client_id, t->seq++);
    long long estimate = (long long)((strlen(content) + 3) / 4) + MAX_TOKENS; /* as the mock charges */
    int sheds = 0;
    for (int a = 0; a < ATTEMPTS; a++) {
        if (p->kind == CLIENT_SLUICE) {
            for (;;) {
                worker_acquire ar = worker_call_acquire(w, r->sc->deployment, estimate, -1, NULL, NULL);
                if (rec) rec->agent_wait_ms += (double)w->waited_ms;
                if (ar == WORKER_GRANTED) break;
                if (ar == WORKER_ERROR || ++sheds > MAX_SHEDS) {
                    if (!run_stopping(r)) {
                        fprintf(stderr, "bench_incident: %s: %s\n", p->client_id,
                                ar == WORKER_ERROR ? w->error : "shed too often");
                        atomic_fetch_add(&p->errors, 1);
                    }
                    return 0;
                }
                if (rec) rec->sheds++;
                double ms = w->retry_after_ms > 1 ? (double)w->retry_after_ms : 1;
                if (run_sleep_until(r, proc_now_ms() + ms)) return 0;
            }
        } else if (p->kind == CLIENT_BUCKET && pace(t)) {
            return 0;
        }
        double sent = proc_now_ms();
        if (rec && rec->first_send_ms < 0) rec->first_send_ms = sent;
        long status = worker_call_post(w, r->endpoint, r->sc->deployment, content, MAX_TOKENS, HTTP_TIMEOUT_MS);
        if (status == 200) {
            if (p->kind == CLIENT_SLUICE) settle(t, "ok");
            if (rec) {
                rec->send_ms = sent;
                rec->done_ms = proc_now_ms();
            }
            return 1;
        }
        if (status == 429) {
            if (rec) rec->n429++;
        } else if (!run_stopping(r)) {
            fprintf(stderr, "bench_incident: %s: %s\n", p->client_id, status ? "unexpected status" : w->error);
            atomic_fetch_add(&p->errors, 1);
        }
        if (p->kind == CLIENT_SLUICE) settle(t, status == 429 ? "throttled" : "failed");
        if (a + 1 == ATTEMPTS) break;
        switch (p->kind) {
        case CLIENT_SLUICE:
            if (sluice_retry(t) != 1) return 0;
            break;
        case CLIENT_BUCKET:
            if (run_sleep_until(r, proc_now_ms() + retry_after_s(w) * 1000.0)) return 0;
            break;
        case CLIENT_BACKOFF:
            if (run_sleep_until(r, proc_now_ms() + rng_uniform(&t->rng) * BACKOFF_BASE_MS * ldexp(1.0, a))) return 0;
            break;
        }
    }
    return 0;
}

/* ---- threads ------------------------------------------------------------------------- */

static int thread_setup(thread_ctx *t) {
    fleet_proc *p = t->p;
    t->opened = 1;
    if (worker_call_open(&t->wc, p->kind == CLIENT_SLUICE ? p->agent_sock : NULL, RESP_TIMEOUT_MS, p->client_id) != 0) {
        fprintf(stderr, "bench_incident: %s: %s\n", p->client_id, t->wc.error);
        return -1;
    }
    t->wc.lane = p->lane;
    return 0;
}

static void *thread_main(void *arg) {
    thread_ctx *t = arg;
    run *r = t->p->r;
    int ok = thread_setup(t) == 0;
    pthread_mutex_lock(&r->mu);
    r->ready++;
    r->failed += !ok;
    pthread_cond_broadcast(&r->cv);
    while (!r->go && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    int go = ok && r->go && !r->stop;
    pthread_mutex_unlock(&r->mu);
    if (!go) return NULL;
    if (!t->p->assistant) {
        while (!run_stopping(r))
            if (!do_request(t, NULL) && !run_stopping(r)) atomic_fetch_add(&t->p->gave_up, 1);
        return NULL;
    }
    for (;;) {
        size_t i = atomic_fetch_add(&r->next_req, 1);
        if (i >= r->nreqs) break;
        ireq *q = &r->reqs[i];
        if (run_sleep_until(r, q->arrive_ms)) break;
        q->ok = do_request(t, q);
        if (!q->ok && !run_stopping(r)) atomic_fetch_add(&t->p->gave_up, 1);
        atomic_store(&q->finished, 1);
    }
    return NULL;
}

static void thread_cleanup(thread_ctx *t) {
    if (t->opened) worker_call_close(&t->wc);
}

/* ---- the provider's ledger ------------------------------------------------------------ */

/* What the ledger counted for the scenario's deployment and its clients. */
typedef struct snap {
    long long accepted, n429; /* the deployment */
    long long cl_accepted[MAX_PROCS];
} snap;

static int ledger_snap(const mock_fixture *m, const run *r, snap *s) {
    char path[160];
    memset(s, 0, sizeof(*s));
    json_t *doc = mock_fixture_stats(m, "");
    if (!doc) return -1;
    snprintf(path, sizeof(path), "deployments/%s/accepted", r->sc->deployment);
    s->accepted = mock_fixture_count(doc, path);
    snprintf(path, sizeof(path), "deployments/%s/status_429", r->sc->deployment);
    s->n429 = mock_fixture_count(doc, path);
    for (int i = 0; i < r->nprocs; i++) {
        snprintf(path, sizeof(path), "clients/%s/accepted", r->procs[i].client_id);
        s->cl_accepted[i] = mock_fixture_count(doc, path);
    }
    json_decref(doc);
    return 0;
}

/* ---- results ------------------------------------------------------------------------- */

typedef struct result {
    int ok;
    size_t n;                           /* the assistant's requests arriving in the window */
    double p50, p95, p99, max, e2e_p95; /* ms; INFINITY when a request never got through */
    double first_p99;                   /* arrival to the first send */
    double agent_p99;                   /* sluice: the wait the assistant's agent reported */
    size_t over_bound;                  /* waits above the lane bound (see result_compute) */
    double worst_excess;                /* the largest wait minus its bound, ms */
    long long i429, isheds, igave_up, iunfinished;
    double import_share, assistant_share, util; /* of the quota, in the window (ledger) */
    long long win_429, all_429;                 /* ledger */
    long long import_gave_up, errors;
} result;

/* The lane bound of the assistant's request i: one emission interval plus
 * lane_step_ms plus jitter_ms behind the import, and one more interval for
 * each earlier assistant request still unsent when it arrived (a
 * deployment sends one request per interval; requests of one lane queue
 * behind each other). */
static double lane_bound(const run *r, size_t i) {
    const opts *o = r->o;
    double interval = 60000.0 / o->rpm;
    size_t ahead = 0;
    for (size_t j = 0; j < i; j++) {
        const ireq *p = &r->reqs[j];
        if (p->arrive_ms < r->reqs[i].arrive_ms && (p->first_send_ms < 0 || p->first_send_ms > r->reqs[i].arrive_ms))
            ahead++;
    }
    return interval * (double)(1 + ahead) + o->lane_step_ms + o->jitter_ms;
}

static void result_compute(const run *r, double ws, double we, const snap *s0, const snap *s1, const snap *s2,
                           result *res) {
    /* Per request of the window: accepted send, end to end, first send, agent's wait. */
    enum { W_SEND, W_E2E, W_FIRST, W_AGENT, W_N };
    double *v[W_N];
    size_t n = 0;
    int all = 1;
    for (int k = 0; k < W_N; k++) all &= (v[k] = calloc(r->nreqs + 1, sizeof(double))) != NULL;
    for (size_t i = 0; all && i < r->nreqs; i++) {
        const ireq *q = &r->reqs[i];
        if (q->arrive_ms < ws || q->arrive_ms >= we) continue;
        int got = q->ok && q->send_ms >= 0;
        v[W_SEND][n] = got ? q->send_ms - q->arrive_ms : INFINITY;
        v[W_E2E][n] = got ? q->done_ms - q->arrive_ms : INFINITY;
        v[W_FIRST][n] = q->first_send_ms >= 0 ? q->first_send_ms - q->arrive_ms : INFINITY;
        v[W_AGENT][n] = q->agent_wait_ms;
        double excess = v[W_SEND][n] - lane_bound(r, i);
        if (excess > 0) res->over_bound++;
        if (excess > res->worst_excess) res->worst_excess = excess;
        res->i429 += q->n429;
        res->isheds += q->sheds;
        if (!atomic_load(&q->finished)) res->iunfinished++;
        else if (!q->ok) res->igave_up++;
        n++;
    }
    for (int k = 0; all && k < W_N; k++) qsort(v[k], n, sizeof(double), cmp_double);
    if (all) {
        res->n = n;
        res->p50 = quantile(v[W_SEND], n, 0.50);
        res->p95 = quantile(v[W_SEND], n, 0.95);
        res->p99 = quantile(v[W_SEND], n, 0.99);
        res->max = n ? v[W_SEND][n - 1] : NAN;
        res->first_p99 = quantile(v[W_FIRST], n, 0.99);
        res->agent_p99 = r->sc->assistant == CLIENT_SLUICE ? quantile(v[W_AGENT], n, 0.99) : NAN;
        res->e2e_p95 = quantile(v[W_E2E], n, 0.95);
    }
    for (int k = 0; k < W_N; k++) free(v[k]);
    if (!all) return;

    double quota = r->o->rpm * (we - ws) / 60000.0;
    long long imp = 0, ass = 0;
    for (int i = 0; i < r->nprocs; i++) {
        long long d = s1->cl_accepted[i] - s0->cl_accepted[i];
        if (r->procs[i].assistant) ass += d;
        else {
            imp += d;
            res->import_gave_up += atomic_load(&r->procs[i].gave_up);
        }
        res->errors += atomic_load(&r->procs[i].errors);
    }
    res->import_share = (double)imp / quota;
    res->assistant_share = (double)ass / quota;
    res->util = (double)(s1->accepted - s0->accepted) / quota;
    res->win_429 = s1->n429 - s0->n429;
    res->all_429 = s2->n429;
    res->ok = 1;
}

/* ---- the services ------------------------------------------------------------------------ */

typedef struct services {
    redis_fixture redis;
    sluiced_fixture agents[MAX_PROCS];
    int nagents;
    mock_fixture mock;
} services;

static int start_mock(services *sv, const opts *o) {
    char rpm[32], burst[32], service[64], seed[32];
    snprintf(rpm, sizeof(rpm), "%.17g", o->rpm);
    snprintf(burst, sizeof(burst), "%.17g", o->burst);
    snprintf(service, sizeof(service), "%.0f-%.0f", o->service_lo, o->service_hi);
    snprintf(seed, sizeof(seed), "%.0f", o->seed);
    const char *args[] = {"--rpm", rpm, "--burst", burst, "--service-ms", service, "--seed", seed, NULL};
    return mock_fixture_start(&sv->mock, args, 10000);
}

/* The YAML of a sluice deployment of the benchmark; lanes when lanes != 0. */
static void deployment_yaml(char *buf, size_t n, const opts *o, const char *name, int lanes, const char *headroom) {
    int k = snprintf(buf, n,
                     "  %s:\n    rpm: %.0f\n    burst: { requests: %.0f }\n    max_wait_ms: 600000\n"
                     "    jitter_ms: %.0f\n",
                     name, o->rpm, o->burst, o->jitter_ms);
    if (lanes && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k,
                 "    lane_step_ms: %.0f\n    lanes:\n"
                 "      interactive: { priority: 0, max_wait_ms: 5000%s%s }\n"
                 "      batch: { priority: 1, max_wait_ms: 604800000 }\n",
                 o->lane_step_ms, headroom ? ", headroom: " : "", headroom ? headroom : "");
}

static int start_agents(services *sv, const opts *o, int n) {
    char yaml[4096], d1[512], d2[512], d3[512];
    deployment_yaml(d1, sizeof(d1), o, "inc-lanes", 1, NULL);
    deployment_yaml(d2, sizeof(d2), o, "inc-headroom", 1, "0.2");
    deployment_yaml(d3, sizeof(d3), o, "inc-onelane", 0, NULL);
    snprintf(yaml, sizeof(yaml),
             "redis:\n  url: unix://%s\n  timeout_ms: 1000\n"
             "agent:\n  socket: \"%%SOCK%%\"\n  metrics: \"\"\n  max_clients: 2048\n  log_level: warn\n"
             "deployments:\n%s%s%s",
             sv->redis.sock, d1, d2, d3);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "agent-%d", i + 1);
        if (sluiced_fixture_init(&sv->agents[i], sv->redis.dir, name) != 0 ||
            sluiced_fixture_write_config(&sv->agents[i], yaml) != 0 ||
            sluiced_fixture_launch(&sv->agents[i], NULL, 10000) != 0)
            return -1;
        sv->nagents = i + 1;
    }
    return 0;
}

static void services_stop(services *sv) {
    for (int i = 0; i < sv->nagents; i++) sluiced_fixture_stop(&sv->agents[i], 0);
    sv->nagents = 0;
    mock_fixture_stop(&sv->mock);
    redis_fixture_stop(&sv->redis);
}

/* ---- one scenario ---------------------------------------------------------------------- */

/* The assistant's arrivals at share x rpm from t0 to end_ms, Poisson or
 * evenly spaced; the same schedule (relative to t0) in every scenario. */
static int make_arrivals(run *r, double t0, double end_ms) {
    const opts *o = r->o;
    double rate_per_ms = o->share * o->rpm / 60000.0;
    size_t cap = (size_t)((end_ms - t0) * rate_per_ms * 2 + 64);
    r->reqs = calloc(cap, sizeof(ireq));
    if (!r->reqs) return -1;
    uint64_t rng = (uint64_t)o->seed * 0x2545f4914f6cdd1dULL + 17;
    double t = t0;
    for (;;) {
        int fixed = strcmp(o->arrivals, "fixed") == 0;
        t += fixed ? 1.0 / rate_per_ms : -log(1.0 - rng_uniform(&rng)) / rate_per_ms;
        if (t >= end_ms || r->nreqs == cap) break;
        ireq *q = &r->reqs[r->nreqs++];
        q->arrive_ms = t;
        q->first_send_ms = q->send_ms = q->done_ms = -1;
    }
    return 0;
}

static int run_scenario(services *sv, const opts *o, const scenario *sc, result *res) {
    run *r = calloc(1, sizeof(*r));
    if (!r) return -1;
    int rc = -1, nbatch = (int)o->batch_procs, started = 0;
    r->o = o;
    r->sc = sc;
    snprintf(r->endpoint, sizeof(r->endpoint), "http://127.0.0.1:%d", sv->mock.port);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&r->next_req, 0);

    /* The fleet: P import replicas, then the assistant, each with its agent. */
    r->nprocs = nbatch + 1;
    for (int i = 0; i < r->nprocs; i++) {
        fleet_proc *p = &r->procs[i];
        p->r = r;
        p->assistant = i == nbatch;
        p->kind = p->assistant ? sc->assistant : sc->import;
        p->lane = p->assistant ? sc->assistant_lane : sc->import_lane;
        p->agent_sock = sv->agents[i].sock;
        pthread_mutex_init(&p->pace_mu, NULL);
        if (p->assistant) snprintf(p->client_id, sizeof(p->client_id), "assistant");
        else snprintf(p->client_id, sizeof(p->client_id), "import-%d", i + 1);
        double per = sc->split ? o->rpm / (nbatch + 1) : p->assistant ? o->rpm : o->rpm / nbatch;
        p->pace_ms = 60000.0 / per;
    }
    r->nthreads = nbatch * (int)o->concurrency + ASSISTANT_THREADS;
    r->threads = calloc((size_t)r->nthreads, sizeof(thread_ctx));
    if (!r->threads) goto out;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (; started < r->nthreads; started++) {
        thread_ctx *t = &r->threads[started];
        int pi = started < nbatch * (int)o->concurrency ? started / (int)o->concurrency : nbatch;
        t->p = &r->procs[pi];
        t->rng = (uint64_t)o->seed * 7919u + (uint64_t)started;
        if (pthread_create(&t->tid, &attr, thread_main, t) != 0) {
            fprintf(stderr, "bench_incident: cannot start thread %d: %s\n", started, strerror(errno));
            break;
        }
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&r->mu);
    while (r->ready < started) pthread_cond_wait(&r->cv, &r->mu);
    int ok = started == r->nthreads && r->failed == 0;
    pthread_mutex_unlock(&r->mu);

    snap s0, s1, s2;
    double t0 = proc_now_ms(), ws = t0 + o->warmup * 1000, we = ws + o->seconds * 1000;
    if (ok && make_arrivals(r, t0, we) != 0) ok = 0;
    pthread_mutex_lock(&r->mu);
    if (ok) r->go = 1;
    else r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (!ok) goto join;

    proc_sleep_ms((int)(ws - proc_now_ms()));
    ok = ledger_snap(&sv->mock, r, &s0) == 0;
    proc_sleep_ms((int)(we - proc_now_ms()));
    ok = ledger_snap(&sv->mock, r, &s1) == 0 && ok;
    /* The import keeps pushing until the window's last request is through. */
    for (double until = proc_now_ms() + DRAIN_MS; proc_now_ms() < until; proc_sleep_ms(50)) {
        size_t open = 0;
        for (size_t i = 0; i < r->nreqs; i++) open += !atomic_load(&r->reqs[i].finished);
        if (open == 0) break;
    }
    ok = ledger_snap(&sv->mock, r, &s2) == 0 && ok;

join:
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    /* Threads blocked in ACQUIRE: end their connections (the agent gives
     * their reservations back); the fds stay open until the join. */
    for (int i = 0; i < started; i++)
        if (r->threads[i].wc.rc) shutdown(r->threads[i].wc.rc->fd, SHUT_RDWR);
    for (int i = 0; i < started; i++) pthread_join(r->threads[i].tid, NULL);
    for (int i = 0; i < started; i++) thread_cleanup(&r->threads[i]);
    if (ok) {
        result_compute(r, ws, we, &s0, &s1, &s2, res);
        rc = res->ok ? 0 : -1;
    }
out:
    for (int i = 0; i < r->nprocs; i++) pthread_mutex_destroy(&r->procs[i].pace_mu);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->threads);
    free(r->reqs);
    free(r);
    return rc;
}

/* ---- report ------------------------------------------------------------------------------- */

static void fmt_ms(char *buf, size_t n, double v) {
    if (isinf(v)) snprintf(buf, n, "inf");
    else if (isnan(v)) snprintf(buf, n, "-");
    else if (v >= 10000) snprintf(buf, n, "%.1f s", v / 1000);
    else snprintf(buf, n, "%.0f", v);
}

static void print_header(const opts *o) {
    double interval = 60000.0 / o->rpm;
    printf("bench_incident: the 03:00 incident on `sluice mock`\n"
           "deployment %.0f RPM, burst %.0f, service %.0f-%.0f ms; import: %.0f processes x %.0f requests in "
           "progress (never drains);\nassistant: %s arrivals at %.0f %% of the quota (%.0f RPM), its own process; "
           "warm-up %.0f s, window %.0f s per scenario.\n"
           "lane bound: interval %.1f ms + lane_step_ms %.0f + jitter_ms %.0f = %.1f ms, plus one interval per "
           "earlier assistant request still waiting\n\n",
           o->rpm, o->burst, o->service_lo, o->service_hi, o->batch_procs, o->concurrency, o->arrivals, o->share * 100,
           o->share * o->rpm, o->warmup, o->seconds, interval, o->lane_step_ms, o->jitter_ms,
           interval + o->lane_step_ms + o->jitter_ms);
    printf("%-30s %4s %7s %7s %7s %7s %6s %7s %7s %7s %7s %5s %5s %6s %6s %5s %9s\n", "scenario", "n", "p50 ms",
           "p95 ms", "p99 ms", "max ms", ">bound", "excess", "1st p99", "agt p99", "e2e p95", "i429", "ished", "import",
           "assist", "util", "429s w/all");
}

static void print_row(const scenario *sc, const result *r) {
    if (!r->ok) {
        printf("%-30s (failed, see above)\n", sc->label);
        return;
    }
    char p50[16], p95[16], p99[16], mx[16], exc[16], f99[16], a99[16], e95[16], all[32];
    fmt_ms(p50, sizeof(p50), r->p50);
    fmt_ms(p95, sizeof(p95), r->p95);
    fmt_ms(p99, sizeof(p99), r->p99);
    fmt_ms(mx, sizeof(mx), r->max);
    fmt_ms(exc, sizeof(exc), sc->assistant == CLIENT_SLUICE ? r->worst_excess : NAN);
    fmt_ms(f99, sizeof(f99), r->first_p99);
    fmt_ms(a99, sizeof(a99), r->agent_p99);
    fmt_ms(e95, sizeof(e95), r->e2e_p95);
    snprintf(all, sizeof(all), "%lld/%lld", r->win_429, r->all_429);
    char over[16];
    snprintf(over, sizeof(over), "%zu", r->over_bound);
    printf("%-30s %4zu %7s %7s %7s %7s %6s %7s %7s %7s %7s %5lld %5lld %5.1f%% %5.1f%% %4.0f%% %9s\n", sc->label, r->n,
           p50, p95, p99, mx, sc->assistant == CLIENT_SLUICE ? over : "-", exc, f99, a99, e95, r->i429, r->isheds,
           r->import_share * 100, r->assistant_share * 100, r->util * 100, all);
    if (r->igave_up || r->iunfinished || r->import_gave_up || r->errors)
        printf("%-30s   assistant gave up %lld, unfinished %lld; import gave up %lld; client errors %lld\n", "",
               r->igave_up, r->iunfinished, r->import_gave_up, r->errors);
}

static void print_footer(void) {
    printf("\nn: the assistant's requests arriving in the window. p50..max: arrival to the send the provider\n"
           "accepted (a request that gave up counts as inf). >bound, excess (sluice rows): how many waited\n"
           "longer than the lane bound, and the largest excess. 1st p99: arrival to the first send. agt p99:\n"
           "the wait the assistant's agent reported (ACQUIRE's reply); the rest is the client side. e2e p95:\n"
           "arrival to the response. i429, ished: the assistant's 429s and sluice sheds. import, assist,\n"
           "util: accepted in the window per the mock's ledger, as a share of the quota. 429s w/all: the\n"
           "ledger's 429s in the window / over the whole scenario.\n");
}

static void usage(void) {
    printf("usage: bench_incident [OPTIONS]\n\nThe seeds' 03:00 incident (an import saturating a shared deployment "
           "while the\nassistant waits) replayed on sluice mock, per scenario. Needs SLUICE_BUILD_DIR.\n\n");
    for (size_t i = 0; i < NOPTS; i++) printf("  %-16s %s\n", opt_rows[i].name, opt_rows[i].help);
    printf("\nscenarios:\n");
    for (size_t i = 0; i < NSCENARIOS; i++) printf("  %-10s %s\n", scenarios[i].id, scenarios[i].label);
}

int main(int argc, char **argv) {
    opts o = {.rpm = 1200,
              .burst = -1,
              .seconds = 20,
              .warmup = 8,
              .share = 0.10,
              .service_lo = 300,
              .service_hi = 900,
              .batch_procs = 3,
              .concurrency = 32,
              .lane_step_ms = 10,
              .jitter_ms = 10,
              .seed = 1,
              .scenarios = DEFAULT_SCENARIOS,
              .arrivals = "poisson"};
    if (opts_parse(&o, argc, argv) != 0) return 2;
    if (o.help) {
        usage();
        return 0;
    }
    if (o.burst < 0) o.burst = fmax(1, floor(o.rpm / 60));
    if (strcmp(o.arrivals, "poisson") != 0 && strcmp(o.arrivals, "fixed") != 0) {
        fprintf(stderr, "bench_incident: --arrivals: poisson or fixed, got '%s'\n", o.arrivals);
        return 2;
    }
    if (o.service_lo > o.service_hi) {
        fprintf(stderr, "bench_incident: --service-lo exceeds --service-hi\n");
        return 2;
    }
    const scenario *run_list[NSCENARIOS];
    size_t nrun = 0;
    for (const char *s = o.scenarios; *s;) {
        size_t len = strcspn(s, ","), k;
        for (k = 0; k < NSCENARIOS; k++)
            if (strlen(scenarios[k].id) == len && strncmp(scenarios[k].id, s, len) == 0) break;
        if (k == NSCENARIOS || nrun == NSCENARIOS) {
            fprintf(stderr, "bench_incident: --scenarios: unknown or repeated '%.*s'\n", (int)len, s);
            return 2;
        }
        run_list[nrun++] = &scenarios[k];
        s += len + (s[len] == ',');
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return 1;

    static services sv;
    int rc = 1;
    if (redis_fixture_start(&sv.redis, 0) != 0) goto out;
    if (start_mock(&sv, &o) != 0 || start_agents(&sv, &o, (int)o.batch_procs + 1) != 0) goto out;
    print_header(&o);
    fflush(stdout);
    rc = 0;
    for (size_t i = 0; i < nrun; i++) {
        result res;
        memset(&res, 0, sizeof(res));
        if (run_scenario(&sv, &o, run_list[i], &res) != 0) rc = 1;
        print_row(run_list[i], &res);
        fflush(stdout);
    }
    print_footer();
out:
    services_stop(&sv);
    curl_global_cleanup();
    return rc;
}
