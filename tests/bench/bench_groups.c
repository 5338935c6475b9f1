/* bench_groups: a batch over a deployment group against LiteLLM-style
 * "429 then cool down" routing, side by side on the same three providers.
 *
 * Three `sluice mock` providers stand for three deployments of one model
 * with different quotas (3000, 1500 and 750 RPM by default, each with a
 * burst of two seconds of its quota). A batch of N requests (all known at
 * the start) is worked off by W concurrent workers of one process, once
 * per scenario and round:
 *
 *   sluice       the workers ACQUIRE a group of the three on sluiced, call
 *                the member the grant names and SETTLE; a failed call
 *                acquires again (in practice: never)
 *   prioN        no sluice. A router shared by the process's workers, as
 *                LiteLLM's with order-based routing: try the members in
 *                priority order, skipping those cooling down; a 429 puts
 *                the member in cool-down for N seconds (LiteLLM's
 *                cooldown_time, 5 s by default) and the call is tried on
 *                the next member at once; when every member is cooling
 *                down the worker waits for the first to come back (kinder
 *                than LiteLLM, which raises and leaves the retry to the
 *                caller)
 *   shuffleN     the same, but the member is drawn at random weighted by
 *                its RPM among those not cooling down (LiteLLM's default
 *                simple-shuffle with rpm weights)
 *
 * Every scenario of every round uses fresh deployment names on the mocks
 * (the mock makes a deployment, with full buckets, on first use) and, for
 * sluice, a fresh group in sluiced's configuration, so no run inherits an
 * emptied bucket. Each round runs the scenarios in a rotated order.
 * Measured: the makespan (the batch's start to its last answer), the 429s
 * each provider's ledger counted, and each member's share of the accepted
 * calls. Prints one line per run and a table of medians; asserts nothing.
 *
 * Usage: bench_groups [--requests N] [--rounds R] [--scenarios LIST] ... (--help)
 * Needs SLUICE_BUILD_DIR (the build directory: agent/sluiced and sluice). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "mock_fixture.h"
#include "proc.h"
#include "redis_fixture.h"
#include "sluiced_fixture.h"
#include "worker_call.h"
#include "bench_opts.h"

#define NMEMBERS 3
#define MAX_WORKERS 256
#define MAX_SCENARIOS 8
#define MAX_ROUNDS 20
#define MAX_ATTEMPTS 10000       /* per request: a bound, never reached in a sane run */
#define SLUICE_MAXWAIT_MS 600000 /* the batch waits as long as it takes */
#define HTTP_TIMEOUT_MS 60000L

/* ---- options --------------------------------------------------------------------- */

typedef struct opts {
    double requests, rounds, workers, burst_s, service_lo, service_hi, spill_ms, jitter_ms, seed;
    double rpm[NMEMBERS];
    const char *scenarios;
    int help;
} opts;

#define O(f) offsetof(opts, f)
static const opt_row opt_rows[] = {
    {"--requests", OPT_NUM, O(requests), 1, 1e6, "requests in the batch (1000)"},
    {"--rounds", OPT_NUM, O(rounds), 1, MAX_ROUNDS, "rounds of every scenario (3)"},
    {"--workers", OPT_NUM, O(workers), 1, MAX_WORKERS, "concurrent workers (64)"},
    {"--rpm1", OPT_NUM, O(rpm[0]), 60, 1e6, "the primary's quota, requests per minute (3000)"},
    {"--rpm2", OPT_NUM, O(rpm[1]), 60, 1e6, "the second member's quota (1500)"},
    {"--rpm3", OPT_NUM, O(rpm[2]), 60, 1e6, "the third member's quota (750)"},
    {"--burst-s", OPT_NUM, O(burst_s), 0.1, 60, "each provider's burst, in seconds of its quota (2)"},
    {"--service-lo", OPT_NUM, O(service_lo), 0, 60000, "the mocks' service time, low end, ms (50)"},
    {"--service-hi", OPT_NUM, O(service_hi), 0, 60000, "the mocks' service time, high end, ms (150)"},
    {"--spill-ms", OPT_NUM, O(spill_ms), 0, 3600000, "the group's spill_ms (500)"},
    {"--jitter-ms", OPT_NUM, O(jitter_ms), 0, 10000, "the members' jitter_ms in sluiced (20)"},
    {"--seed", OPT_NUM, O(seed), 0, 1e15, "seed of the mocks and the shuffle (1)"},
    {"--scenarios", OPT_STR, O(scenarios), 0, 0, "comma-separated: sluice, prioN, shuffleN (N: cool-down s)"},
    {"--help", OPT_FLAG, O(help), 0, 0, "show this help"},
};
#define NOPTS (sizeof(opt_rows) / sizeof(opt_rows[0]))
#define DEFAULT_SCENARIOS "sluice,prio5,prio1,shuffle5"

static int opts_parse(opts *o, int argc, char **argv) {
    return bench_opts_parse("bench_groups", opt_rows, NOPTS, o, argc, argv);
}

/* ---- scenarios --------------------------------------------------------------------- */

typedef enum sc_kind { SC_SLUICE, SC_PRIO, SC_SHUFFLE } sc_kind;

typedef struct scenario {
    sc_kind kind;
    double cooldown_s;
    char id[32];
    char label[80];
} scenario;

static int scenarios_parse(const char *list, scenario *out, int *n) {
    char buf[256];
    char *save = NULL;
    snprintf(buf, sizeof(buf), "%s", list);
    *n = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        scenario *s = &out[*n];
        char *end;
        memset(s, 0, sizeof(*s));
        if (*n == MAX_SCENARIOS) {
            fprintf(stderr, "bench_groups: at most %d scenarios\n", MAX_SCENARIOS);
            return -1;
        }
        if (strcmp(t, "sluice") == 0) {
            s->kind = SC_SLUICE;
            snprintf(s->label, sizeof(s->label), "sluice group");
        } else if (strncmp(t, "prio", 4) == 0 || strncmp(t, "shuffle", 7) == 0) {
            s->kind = t[1] == 'r' ? SC_PRIO : SC_SHUFFLE;
            const char *num = t + (s->kind == SC_PRIO ? 4 : 7);
            s->cooldown_s = strtod(num, &end);
            if (!*num || *end || !(s->cooldown_s > 0 && s->cooldown_s <= 600)) {
                fprintf(stderr, "bench_groups: '%s': the cool-down must be in (0, 600] s\n", t);
                return -1;
            }
            snprintf(s->label, sizeof(s->label), "%s, 429 -> cool down %g s",
                     s->kind == SC_PRIO ? "priority order" : "rpm-weighted shuffle", s->cooldown_s);
        } else {
            fprintf(stderr, "bench_groups: unknown scenario '%s' (sluice, prioN, shuffleN)\n", t);
            return -1;
        }
        snprintf(s->id, sizeof(s->id), "%s", t);
        (*n)++;
    }
    return *n > 0 ? 0 : -1;
}

/* ---- one run: a scenario's batch in one round ------------------------------------------- */

typedef struct services {
    redis_fixture redis;
    sluiced_fixture agent;
    mock_fixture mock[NMEMBERS];
    char endpoint[NMEMBERS][64];
    int burst[NMEMBERS];
} services;

/* A run's names: its members' deployments on the mocks and its group. */
static void run_names(int sc, int round, char dep[NMEMBERS][48], char *group, size_t glen) {
    snprintf(group, glen, "g%d-r%d", sc, round);
    for (int i = 0; i < NMEMBERS; i++) snprintf(dep[i], 48, "s%d-r%d-m%d", sc, round, i + 1);
}

typedef struct run {
    const opts *o;
    const services *sv;
    const scenario *sc;
    char dep[NMEMBERS][48];
    char group[48];
    size_t n;
    atomic_size_t next;
    /* The start barrier. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, failed, go;
    double t0;
    /* Results. */
    pthread_mutex_t done_mu;
    double t_last;
    size_t served;
    atomic_llong sends, lost, errors, cooldowns;
    /* The router of the cool-down scenarios, shared by the workers. */
    pthread_mutex_t router_mu;
    double cool_until[NMEMBERS];
    uint64_t rng;
} run;

typedef struct bworker {
    run *r;
    pthread_t tid;
    worker_call call;
    char client[64];
    char error[256];
} bworker;

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int member_of(const run *r, const char *dep) {
    for (int i = 0; i < NMEMBERS; i++)
        if (strcmp(r->dep[i], dep) == 0) return i;
    return -1;
}

/* The router's pick: a member not cooling down (first in order, or drawn
 * by RPM weight), or -1 with *wait_until set to when the first comes back. */
static int router_pick(run *r, double now, double *wait_until) {
    int pick = -1;
    double total = 0, soonest = INFINITY;
    pthread_mutex_lock(&r->router_mu);
    for (int i = 0; i < NMEMBERS; i++) {
        if (r->cool_until[i] > now) {
            soonest = fmin(soonest, r->cool_until[i]);
            continue;
        }
        if (r->sc->kind == SC_PRIO) {
            pick = i;
            break;
        }
        total += r->o->rpm[i];
    }
    if (r->sc->kind == SC_SHUFFLE && total > 0) {
        double x = (double)(rng_next(&r->rng) >> 11) * 0x1.0p-53 * total;
        for (int i = 0; i < NMEMBERS; i++) {
            if (r->cool_until[i] > now) continue;
            pick = i;
            if ((x -= r->o->rpm[i]) < 0) break;
        }
    }
    pthread_mutex_unlock(&r->router_mu);
    *wait_until = soonest;
    return pick;
}

static void router_cool(run *r, int m, double now) {
    pthread_mutex_lock(&r->router_mu);
    double until = now + r->sc->cooldown_s * 1000;
    if (until > r->cool_until[m]) r->cool_until[m] = until;
    pthread_mutex_unlock(&r->router_mu);
    atomic_fetch_add(&r->cooldowns, 1);
}

static void worker_error(bworker *b) {
    atomic_fetch_add(&b->r->errors, 1);
    if (!b->error[0]) snprintf(b->error, sizeof(b->error), "%s", b->call.error);
}

/* One request of the batch, until a provider accepted it. */
static int do_request(bworker *b, size_t i) {
    run *r = b->r;
    worker_call *c = &b->call;
    char content[64];
    snprintf(content, sizeof(content), "batch item %zu", i);
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        int m;
        const char *endpoint;
        if (r->sc->kind == SC_SLUICE) {
            worker_acquire a = worker_call_acquire(c, r->group, 24, SLUICE_MAXWAIT_MS, NULL, NULL);
            if (a == WORKER_SHED) {
                double ra = c->retry_after_ms > 0 ? (double)c->retry_after_ms : 1;
                proc_sleep_ms((int)fmin(ra, 1000));
                continue;
            }
            if (a == WORKER_ERROR || (m = member_of(r, c->member)) < 0) {
                worker_error(b);
                return 0;
            }
            endpoint = c->endpoint;
        } else {
            double until;
            while ((m = router_pick(r, proc_now_ms(), &until)) < 0) {
                double left = until - proc_now_ms();
                if (left > 0) proc_sleep_ms((int)ceil(left));
            }
            endpoint = r->sv->endpoint[m];
        }
        atomic_fetch_add(&r->sends, 1);
        long status = worker_call_post(c, endpoint, r->dep[m], content, 16, HTTP_TIMEOUT_MS);
        if (r->sc->kind == SC_SLUICE && worker_call_settle(c, status == 200   ? "ok"
                                                              : status == 429 ? "throttled"
                                                                              : "failed") != 0)
            worker_error(b);
        if (status == 200) return 1;
        if (status == 429 && r->sc->kind != SC_SLUICE) router_cool(r, m, proc_now_ms());
        else if (status != 429) worker_error(b);
    }
    return 0;
}

static void *bworker_main(void *arg) {
    bworker *b = arg;
    run *r = b->r;
    int ok = worker_call_open(&b->call, r->sc->kind == SC_SLUICE ? r->sv->agent.sock : NULL, SLUICE_MAXWAIT_MS + 10000,
                              b->client) == 0;
    if (!ok) snprintf(b->error, sizeof(b->error), "%s", b->call.error);
    pthread_mutex_lock(&r->mu);
    r->ready++;
    r->failed += !ok;
    pthread_cond_broadcast(&r->cv);
    while (!r->go) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (!ok || r->go < 0) return NULL;
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n) break;
        if (!do_request(b, i)) {
            atomic_fetch_add(&r->lost, 1);
            continue;
        }
        double t = proc_now_ms();
        pthread_mutex_lock(&r->done_mu);
        if (t > r->t_last) r->t_last = t;
        r->served++;
        pthread_mutex_unlock(&r->done_mu);
    }
    return NULL;
}

typedef struct result {
    int ok;
    double makespan_ms;
    long long sends, cooldowns, lost, errors;
    long long n429[NMEMBERS], accepted[NMEMBERS];
} result;

static int run_once(const opts *o, const services *sv, const scenario *sc, int sc_index, int round, result *res) {
    static bworker workers[MAX_WORKERS];
    run r;
    int nw = (int)o->workers;
    memset(&r, 0, sizeof(r));
    memset(res, 0, sizeof(*res));
    r.o = o;
    r.sv = sv;
    r.sc = sc;
    r.n = (size_t)o->requests;
    r.rng = (uint64_t)o->seed * 1000003u + (uint64_t)round * 7919u + (uint64_t)sc_index;
    run_names(sc_index, round, r.dep, r.group, sizeof(r.group));
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_mutex_init(&r.done_mu, NULL);
    pthread_mutex_init(&r.router_mu, NULL);
    int started = 0;
    for (; started < nw; started++) {
        bworker *b = &workers[started];
        memset(b, 0, sizeof(*b));
        b->r = &r;
        snprintf(b->client, sizeof(b->client), "%s-w%d", sc->id, started);
        if (pthread_create(&b->tid, NULL, bworker_main, b) != 0) break;
    }
    pthread_mutex_lock(&r.mu);
    while (r.ready < started) pthread_cond_wait(&r.cv, &r.mu);
    int go = started == nw && r.failed == 0;
    r.t0 = proc_now_ms();
    r.go = go ? 1 : -1;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    for (int i = 0; i < started; i++) {
        pthread_join(workers[i].tid, NULL);
        if (workers[i].error[0]) fprintf(stderr, "bench_groups: %s: %s\n", workers[i].client, workers[i].error);
        worker_call_close(&workers[i].call);
    }
    res->ok = go && r.served == r.n;
    res->makespan_ms = r.t_last - r.t0;
    res->sends = atomic_load(&r.sends);
    res->cooldowns = atomic_load(&r.cooldowns);
    res->lost = atomic_load(&r.lost);
    res->errors = atomic_load(&r.errors);
    for (int i = 0; i < NMEMBERS; i++) {
        char path[128];
        json_t *l = mock_fixture_stats(&sv->mock[i], "");
        if (!l) {
            res->ok = 0;
            continue;
        }
        snprintf(path, sizeof(path), "deployments/%s/status_429", r.dep[i]);
        res->n429[i] = mock_fixture_count(l, path);
        snprintf(path, sizeof(path), "deployments/%s/accepted", r.dep[i]);
        res->accepted[i] = mock_fixture_count(l, path);
        json_decref(l);
    }
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.done_mu);
    pthread_mutex_destroy(&r.router_mu);
    return res->ok ? 0 : -1;
}

/* ---- services --------------------------------------------------------------------- */

static int services_start(services *sv, const opts *o, const scenario *scs, int nsc) {
    memset(sv, 0, sizeof(*sv));
    if (redis_fixture_start(&sv->redis, 0) != 0) return -1;
    for (int i = 0; i < NMEMBERS; i++) {
        char rpm[32], burst[32], service[64], seed[32];
        sv->burst[i] = (int)fmax(1, round(o->rpm[i] / 60.0 * o->burst_s));
        snprintf(rpm, sizeof(rpm), "%g", o->rpm[i]);
        snprintf(burst, sizeof(burst), "%d", sv->burst[i]);
        snprintf(service, sizeof(service), "%.0f-%.0f", o->service_lo, o->service_hi);
        snprintf(seed, sizeof(seed), "%.0f", o->seed + i);
        const char *args[] = {"--rpm", rpm, "--burst", burst, "--service-ms", service, "--seed", seed, NULL};
        if (mock_fixture_start(&sv->mock[i], args, 10000) != 0) return -1;
        snprintf(sv->endpoint[i], sizeof(sv->endpoint[i]), "http://127.0.0.1:%d", sv->mock[i].port);
    }
    /* One group of fresh deployments per sluice scenario and round. */
    size_t cap = 4096 + (size_t)nsc * MAX_ROUNDS * 1024, len = 0;
    char *yaml = malloc(cap);
    if (!yaml) return -1;
    len +=
        (size_t)snprintf(yaml + len, cap - len,
                         "redis: {url: \"unix://%s\"}\nagent: {socket: \"%%SOCK%%\"}\ndeployments:\n", sv->redis.sock);
    for (int k = 0; k < nsc; k++)
        for (int rd = 0; scs[k].kind == SC_SLUICE && rd < (int)o->rounds; rd++) {
            char dep[NMEMBERS][48], group[48];
            run_names(k, rd, dep, group, sizeof(group));
            for (int i = 0; i < NMEMBERS; i++)
                len += (size_t)snprintf(yaml + len, cap - len,
                                        "  %s: {rpm: %.0f, burst: {requests: %d}, jitter_ms: %.0f, endpoint: \"%s\"}\n",
                                        dep[i], o->rpm[i], sv->burst[i], o->jitter_ms, sv->endpoint[i]);
        }
    len += (size_t)snprintf(yaml + len, cap - len, "groups:\n");
    int ngroups = 0;
    for (int k = 0; k < nsc; k++)
        for (int rd = 0; scs[k].kind == SC_SLUICE && rd < (int)o->rounds; rd++, ngroups++) {
            char dep[NMEMBERS][48], group[48];
            run_names(k, rd, dep, group, sizeof(group));
            len += (size_t)snprintf(yaml + len, cap - len, "  %s: {members: [%s, %s, %s], spill_ms: %.0f}\n", group,
                                    dep[0], dep[1], dep[2], o->spill_ms);
        }
    if (ngroups == 0) { /* no sluice scenario: a placeholder, sluiced still starts */
        len = (size_t)snprintf(yaml, cap,
                               "redis: {url: \"unix://%s\"}\nagent: {socket: \"%%SOCK%%\"}\n"
                               "deployments:\n  unused: {rpm: 60}\n",
                               sv->redis.sock);
    }
    int rc = len < cap ? sluiced_fixture_start(&sv->agent, yaml) : -1;
    free(yaml);
    return rc;
}

static void services_stop(services *sv) {
    sluiced_fixture_stop(&sv->agent, 0);
    for (int i = 0; i < NMEMBERS; i++) mock_fixture_stop(&sv->mock[i]);
    redis_fixture_stop(&sv->redis);
}

/* ---- report --------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(void) {
    printf("usage: bench_groups [options]\n\n");
    for (size_t k = 0; k < NOPTS; k++) printf("  %-14s %s\n", opt_rows[k].name, opt_rows[k].help);
    printf("\nNeeds SLUICE_BUILD_DIR (agent/sluiced and sluice built there).\n");
}

int main(int argc, char **argv) {
    opts o = {.requests = 1000,
              .rounds = 3,
              .workers = 64,
              .burst_s = 2,
              .service_lo = 50,
              .service_hi = 150,
              .spill_ms = 500,
              .jitter_ms = 20,
              .seed = 1,
              .rpm = {3000, 1500, 750},
              .scenarios = DEFAULT_SCENARIOS};
    scenario scs[MAX_SCENARIOS];
    int nsc = 0;
    if (opts_parse(&o, argc, argv) != 0) return 2;
    if (o.help) {
        usage();
        return 0;
    }
    if (o.service_lo > o.service_hi || scenarios_parse(o.scenarios, scs, &nsc) != 0) {
        fprintf(stderr, "bench_groups: bad options (see --help)\n");
        return 2;
    }
    if (!sluiced_fixture_binary() || !mock_fixture_binary()) return 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    services sv;
    if (services_start(&sv, &o, scs, nsc) != 0) {
        fprintf(stderr, "bench_groups: cannot start redis, the mocks and sluiced\n");
        services_stop(&sv);
        return 1;
    }
    int rounds = (int)o.rounds;
    double rate = 0, burst = 0;
    for (int i = 0; i < NMEMBERS; i++) {
        rate += o.rpm[i] / 60000.0;
        burst += sv.burst[i];
    }
    double floor_ms = fmax(0, o.requests - burst) / rate + (o.service_lo + o.service_hi) / 2;
    printf("bench_groups: %.0f requests, %.0f workers, members %.0f/%.0f/%.0f RPM with bursts %d/%d/%d "
           "(%.1f s of quota), service %.0f-%.0f ms; floor (bursts, then the summed rate) %.0f ms\n",
           o.requests, o.workers, o.rpm[0], o.rpm[1], o.rpm[2], sv.burst[0], sv.burst[1], sv.burst[2], o.burst_s,
           o.service_lo, o.service_hi, floor_ms);
    static result res[MAX_SCENARIOS][MAX_ROUNDS];
    int failed = 0;
    for (int rd = 0; rd < rounds; rd++)
        for (int j = 0; j < nsc; j++) {
            int k = (j + rd) % nsc; /* rotated: no scenario always goes first */
            result *x = &res[k][rd];
            if (run_once(&o, &sv, &scs[k], k, rd, x) != 0) failed = 1;
            long long n429 = x->n429[0] + x->n429[1] + x->n429[2];
            printf("round %d %-10s makespan %7.0f ms (%.2fx floor)  429s %lld/%lld/%lld (%lld)  accepted %lld/%lld/%lld"
                   "  sends %lld  cool-downs %lld%s\n",
                   rd + 1, scs[k].id, x->makespan_ms, x->makespan_ms / floor_ms, x->n429[0], x->n429[1], x->n429[2],
                   n429, x->accepted[0], x->accepted[1], x->accepted[2], x->sends, x->cooldowns,
                   x->ok ? "" : "  (FAILED: requests lost or errors)");
            fflush(stdout);
        }
    /* The table: medians over the rounds. */
    double base = 0;
    for (int k = 0; k < nsc && base == 0; k++) {
        double mk[MAX_ROUNDS];
        for (int rd = 0; rd < rounds; rd++) mk[rd] = res[k][rd].makespan_ms;
        if (scs[k].kind == SC_SLUICE) base = median(mk, rounds);
    }
    printf(
        "\n| routing | makespan (median) | vs sluice | 429s %s / %s / %s | share %s / %s / %s | sends per request |\n",
        "m1", "m2", "m3", "m1", "m2", "m3");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < nsc; k++) {
        double mk[MAX_ROUNDS], q[NMEMBERS][MAX_ROUNDS], sh[NMEMBERS][MAX_ROUNDS], sends[MAX_ROUNDS];
        for (int rd = 0; rd < rounds; rd++) {
            const result *x = &res[k][rd];
            double acc = (double)(x->accepted[0] + x->accepted[1] + x->accepted[2]);
            mk[rd] = x->makespan_ms;
            sends[rd] = (double)x->sends / o.requests;
            for (int i = 0; i < NMEMBERS; i++) {
                q[i][rd] = (double)x->n429[i];
                sh[i][rd] = acc > 0 ? 100.0 * (double)x->accepted[i] / acc : 0;
            }
        }
        double m = median(mk, rounds);
        char ratio[32] = "";
        if (base > 0) snprintf(ratio, sizeof(ratio), "%.2fx", m / base);
        printf("| %s | %.2f s | %s | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f %% | %.2f |\n", scs[k].label, m / 1000,
               ratio, median(q[0], rounds), median(q[1], rounds), median(q[2], rounds), median(sh[0], rounds),
               median(sh[1], rounds), median(sh[2], rounds), median(sends, rounds));
    }
    printf("\nfloor: %.2f s (the bursts at once, then the members' summed rate, plus one mean service time)\n",
           floor_ms / 1000);
    services_stop(&sv);
    curl_global_cleanup();
    return failed;
}
