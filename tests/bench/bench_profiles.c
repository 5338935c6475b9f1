/* bench_profiles: provider-faithful budgets against the behaviour before
 * them, side by side in one run, judged by the `sluice mock` ledger.
 *
 * The scenarios are those of test_profiles_fleet (tests/support/
 * profile_scenarios.h): 3 sluiced agents sharing one Redis, 10 to 30
 * worker threads each, one `sluice mock` counting as the provider it
 * imitates. Each runs twice: with the defaults of today, and configured
 * as sluice was before provider profiles ("old": refund on, every
 * unexpected 429 cuts the rate by 0.7, nothing learned from the headers).
 * The Anthropic workload also runs with one combined tpm, set to ITPM +
 * OTPM and to OTPM, the two ways a single token bucket can be set.
 *
 * Printed per run: requests, attempts, 429s the provider counted for the
 * fleet, makespan, the floor the provider's accounting allows and the
 * share of it reached, and the scenario's own figure (the neighbour's
 * period, the recovery). Rounds rotate the order; the table gives
 * medians. Asserts nothing.
 *
 * Usage: bench_profiles [--rounds R] [--scenarios LIST] (--help)
 * Needs SLUICE_BUILD_DIR (the build directory: agent/sluiced and sluice). */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "bench_opts.h"
#include "fleet.h"
#include "profile_scenarios.h"

typedef struct opts {
    double rounds;
    const char *scenarios;
    int help;
} opts;

static const opt_row rows[] = {
    {"--rounds", OPT_NUM, offsetof(opts, rounds), 1, 20, "rounds (default 1)"},
    {"--scenarios", OPT_STR, offsetof(opts, scenarios), 0, 0,
     "comma-separated: azure,anthropic,stray,neighbour,burst,callers,rounded,limit,cjk,nousage,half,greedy,paced,"
     "bedrock "
     "(default all)"},
    {"--help", OPT_FLAG, offsetof(opts, help), 0, 0, "this text"},
};

typedef struct run_def {
    const char *key; /* the scenario family */
    fleet_spec spec;
    double floor_ms; /* 0: none */
    int kind; /* 0 makespan vs floor, 1 neighbour, 2 lower limit, 3 floor and 429s after 5 s, 4 the neighbour too,
                 5 Anthropic's callers: the floor from the output the mock counted, 6 Bedrock: the floor
                 from the tokens the mock counted (reserved, then adjusted), and its largest 10 s window */
} run_def;

#define MAX_RUNS 40
#define MAX_ROUNDS 20

typedef struct figures {
    double makespan, share, r429, extra;
    long long attempts, n429;
} figures;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One ledger event: a count of the tokens bucket at a time. */
typedef struct tok_event {
    double ms, v;
} tok_event;

static int cmp_event(const void *a, const void *b) {
    const tok_event *x = a, *y = b;
    return x->ms < y->ms ? -1 : x->ms > y->ms;
}

/* Bedrock's count of the fleet's tokens from the mock's ledger: each
 * accept's reservation (accept_tokens at accept_ms) and each adjustment at
 * the end (tokens_adjust at tokens_adjust_ms), in time order. *total gets
 * their sum; returns the largest sum in a window [s, s + 10 s) starting at
 * an event, over the 10 s quota plus the bucket (tpm / 6 + burst), as the
 * scoreboard judges a window. -1 when the ledger lacks the lists. */
static double bedrock_window(const json_t *ledger, double tpm, double burst, double *total) {
    const json_t *d = json_object_get(json_object_get(ledger, "deployments"), "d");
    const json_t *at = json_object_get(d, "accept_ms"), *tk = json_object_get(d, "accept_tokens");
    const json_t *adj_at = json_object_get(d, "tokens_adjust_ms"), *adj = json_object_get(d, "tokens_adjust");
    *total = 0;
    if (!json_is_array(at) || !json_is_array(tk) || !json_is_array(adj_at) || !json_is_array(adj)) return -1;
    size_t na = json_array_size(at), nj = json_array_size(adj_at), n = 0;
    tok_event *e = calloc(na + nj + 1, sizeof(*e));
    if (!e) return -1;
    for (size_t i = 0; i < na; i++)
        e[n++] =
            (tok_event){json_number_value(json_array_get(at, i)), (double)json_integer_value(json_array_get(tk, i))};
    for (size_t i = 0; i < nj; i++)
        e[n++] = (tok_event){json_number_value(json_array_get(adj_at, i)),
                             (double)json_integer_value(json_array_get(adj, i))};
    qsort(e, n, sizeof(*e), cmp_event);
    double best = -1, sum = 0;
    for (size_t i = 0, j = 0; i < n; i++) {
        *total += e[i].v;
        while (j < n && e[j].ms < e[i].ms + 10000) sum += e[j++].v;
        double x = sum / (tpm / 6 + burst);
        if (x > best) best = x;
        sum -= e[i].v;
    }
    free(e);
    return best;
}

static int run_one(const run_def *d, figures *f) {
    fleet_result r;
    if (fleet_run(&d->spec, &r) != 0) return -1;
    memset(f, 0, sizeof(*f));
    f->makespan = fleet_makespan(&r);
    f->attempts = r.attempts;
    f->n429 = r.fleet_429;
    /* Through the proxy the workers see one attempt a request: the
     * provider's calls are those plus the 429s the proxy retried. */
    double calls = (double)r.attempts + (d->spec.proxy ? (double)r.fleet_429 : 0);
    f->r429 = calls > 0 ? 100.0 * (double)r.fleet_429 / calls : 0;
    f->share = d->floor_ms > 0 && f->makespan > 0 ? 100.0 * d->floor_ms / f->makespan : 0;
    if (d->kind == 1) {
        double from = r.events_base_ms + SCEN_NB_FROM_MS, to = r.events_base_ms + SCEN_NB_TO_MS;
        /* While the neighbour runs: the fleet's share of what it leaves. */
        f->share = 100.0 * (double)fleet_sent_between(&r, from, to) / ((600.0 - 180) / 60000 * (to - from));
        /* After it stops: the first 2 s window at >= 95 % of the full rate. */
        f->extra = -1;
        for (double t = to; t + 2000 <= r.last_send_ms; t += 500)
            if ((double)fleet_sent_between(&r, t, t + 2000) >= 0.95 * 20) {
                f->extra = (t + 2000 - to) / 1000;
                break;
            }
    } else if (d->kind == 5) {
        json_t *tot = json_object_get(r.ledger, "totals");
        double reported = (double)json_integer_value(json_object_get(tot, "tokens_reported"));
        double out = reported - (double)r.succeeded * SCEN_ANTHROPIC_CALLERS_INPUT;
        f->share = f->makespan > 0 ? 100.0 * SCEN_ANTHROPIC_CALLERS_FLOOR_OF(out) / f->makespan : 0;
    } else if (d->kind == 6) {
        double total;
        f->extra = bedrock_window(r.ledger, SCEN_BEDROCK_TPM, SCEN_BEDROCK_BURST, &total);
        f->share =
            f->makespan > 0 ? 100.0 * (total - SCEN_BEDROCK_BURST) / (SCEN_BEDROCK_TPM / 60000) / f->makespan : 0;
    } else if (d->kind == 2) {
        double from = r.first_send_ms + 12000;
        size_t n = fleet_sent_between(&r, from, r.last_send_ms + 1);
        f->share = n > 1 ? 100.0 * (double)(n - 1) / (r.last_send_ms - from) * 60000 / 480 : 0;
    }
    printf("  %-36s %4d req %5lld attempts %4lld 429s (%5.2f %%) makespan %7.0f ms  %s %6.1f %%", d->spec.name,
           r.requests, r.attempts, r.fleet_429, f->r429, f->makespan,
           d->kind == 1   ? "of what the neighbour leaves"
           : d->kind == 2 ? "of 480 RPM from 12 s"
                          : "of the floor",
           f->share);
    if (d->kind == 4) printf("  neighbour took %lld, refused %lld", r.neighbour_accepted, r.neighbour_429);
    if (d->kind == 6) printf("  largest 10 s window %.3fx the quota + burst", f->extra);
    if (d->kind == 3) {
        long long after = r.fleet_429_seen >= 0 ? r.fleet_429 - r.fleet_429_seen : -1;
        printf("  429s after 5 s: %lld", after);
    }
    if (d->kind == 1) {
        if (f->extra >= 0) printf("  full rate %.1f s after it stops", f->extra);
        else printf("  full rate not reached after it stops");
    }
    printf("\n");
    fflush(stdout);
    fleet_result_free(&r);
    return 0;
}

int main(int argc, char **argv) {
    opts o = {1, NULL, 0};
    if (bench_opts_parse("bench_profiles", rows, sizeof(rows) / sizeof(rows[0]), &o, argc, argv) != 0) return 2;
    if (o.help) {
        printf("bench_profiles: provider-faithful budgets against the previous behaviour, on sluice mock\n");
        for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) printf("  %-14s %s\n", rows[k].name, rows[k].help);
        return 0;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    run_def runs[MAX_RUNS];
    int n = 0;
    const char *want = o.scenarios;
#define WANT(k) (!want || strstr(want, k))
    if (WANT("azure")) {
        runs[n++] = (run_def){"azure", scen_azure_tokens(0), SCEN_AZURE_TOKENS_FLOOR_MS, 0};
        runs[n++] = (run_def){"azure", scen_azure_tokens(1), SCEN_AZURE_TOKENS_FLOOR_MS, 0};
    }
    if (WANT("anthropic")) {
        for (int m = 0; m < 3; m++)
            runs[n++] = (run_def){"anthropic", scen_anthropic_output(m), SCEN_ANTHROPIC_FLOOR_MS, 0};
    }
    if (WANT("stray")) {
        runs[n++] = (run_def){"stray", scen_stray_429(0, 0), SCEN_STRAY_FLOOR_MS, 0};
        runs[n++] = (run_def){"stray", scen_stray_429(0, 1), SCEN_STRAY_FLOOR_MS, 0};
        runs[n++] = (run_def){"stray", scen_stray_429(1, 1), SCEN_STRAY_FLOOR_MS, 0};
    }
    if (WANT("neighbour")) {
        runs[n++] = (run_def){"neighbour", scen_neighbour(0), 0, 1};
        runs[n++] = (run_def){"neighbour", scen_neighbour(1), 0, 1};
    }
    if (WANT("burst")) {
        runs[n++] = (run_def){"burst", scen_burst_neighbour(0), SCEN_BURST_FLOOR_MS, 0};
        runs[n++] = (run_def){"burst", scen_burst_neighbour(1), SCEN_BURST_FLOOR_MS, 0};
    }
    if (WANT("callers")) {
        static const int per_agent[] = {2, 8, 32};
        for (int k = 0; k < 3; k++) runs[n++] = (run_def){"callers", scen_anthropic_callers(per_agent[k], 0), 0, 5};
        runs[n++] = (run_def){"callers", scen_anthropic_callers(8, 1), 0, 5};
    }
    if (WANT("rounded")) runs[n++] = (run_def){"rounded", scen_anthropic_rounded(), SCEN_ANTHROPIC_ROUNDED_FLOOR_MS, 0};
    if (WANT("greedy")) {
        runs[n++] = (run_def){"greedy", scen_greedy_neighbour(0), SCEN_GREEDY_FLOOR_MS, 4};
        runs[n++] = (run_def){"greedy", scen_greedy_neighbour(1), SCEN_GREEDY_FLOOR_MS, 4};
    }
    if (WANT("paced")) {
        runs[n++] = (run_def){"paced", scen_paced_neighbour(0), SCEN_GREEDY_FLOOR_MS, 4};
        runs[n++] = (run_def){"paced", scen_paced_neighbour(1), SCEN_GREEDY_FLOOR_MS, 4};
    }
    if (WANT("cjk")) {
        for (int m = 0; m < 3; m++) runs[n++] = (run_def){"cjk", scen_cjk_proxy(m), SCEN_CJK_FLOOR_MS, 3};
    }
    if (WANT("nousage")) runs[n++] = (run_def){"nousage", scen_cjk_proxy(3), SCEN_CJK_FLOOR_MS, 3};
    if (WANT("half")) {
        runs[n++] = (run_def){"half", scen_half_count(0), SCEN_HALF_FLOOR_MS, 3};
        runs[n++] = (run_def){"half", scen_half_count(2), SCEN_HALF_FLOOR_MS, 3};
    }
    if (WANT("bedrock")) runs[n++] = (run_def){"bedrock", scen_bedrock_burndown(), 0, 6};
    if (WANT("limit")) {
        runs[n++] = (run_def){"limit", scen_lower_limit(0), 0, 2};
        runs[n++] = (run_def){"limit", scen_lower_limit(1), 0, 2};
    }
    if (n > MAX_RUNS) {
        fprintf(stderr, "bench_profiles: %d runs, at most %d\n", n, MAX_RUNS);
        return 2;
    }
    int rounds = (int)o.rounds;
    static double mk[MAX_RUNS][MAX_ROUNDS], sh[MAX_RUNS][MAX_ROUNDS], q[MAX_RUNS][MAX_ROUNDS], ex[MAX_RUNS][MAX_ROUNDS];
    int ok[MAX_RUNS] = {0};
    for (int round = 0; round < rounds; round++) {
        printf("round %d\n", round + 1);
        for (int k = 0; k < n; k++) {
            int i = (k + round) % n;
            figures f;
            if (run_one(&runs[i], &f) != 0) {
                fprintf(stderr, "bench_profiles: %s did not run\n", runs[i].spec.name);
                continue;
            }
            mk[i][ok[i]] = f.makespan;
            sh[i][ok[i]] = f.share;
            q[i][ok[i]] = f.r429;
            ex[i][ok[i]] = f.extra;
            ok[i]++;
        }
    }
    printf("\nmedians over %d round(s)\n%-36s %12s %10s %8s\n", rounds, "scenario", "makespan ms", "share %", "429 %");
    for (int i = 0; i < n; i++) {
        if (!ok[i]) continue;
        printf("%-36s %12.0f %10.1f %8.2f", runs[i].spec.name, median(mk[i], ok[i]), median(sh[i], ok[i]),
               median(q[i], ok[i]));
        if (runs[i].kind == 6) printf("  largest 10 s window %.3fx", median(ex[i], ok[i]));
        printf("\n");
    }
    curl_global_cleanup();
    return 0;
}
