/* test_sim_budget: budgets in money on virtual time (issue 25): the real
 * engines and the real scripts (lua/budget.lua) against a provider that
 * bills as its price list says, from t = 0 on fixed seeds.
 *
 * Proves:
 *   - never over: 3 agents, 64 callers with random usage and random
 *     cancels (before the slot, and after the send, when the provider
 *     bills what it produced and nobody says what), demand ten times a
 *     daily budget: the provider's bill never exceeds the budget, on every
 *     seed (SIM_BUDGET_SEEDS, default 4);
 *   - all of it usable: what the budget charged for the requests granted
 *     before the first `budget` shed is at least 98 % of it (a request
 *     cancelled after the send is charged its reservation: the provider
 *     billed an unknown part of it; the provider's own bill is printed);
 *   - the ledger in Redis (day_spent) is exactly those charges: at least
 *     the provider's bill and at most the budget;
 *   - boundaries in a time zone with daylight saving (America/New_York):
 *     a daily budget renews at local midnight, the shed's retry-after
 *     says exactly when, and the day after the spring change is 23 hours
 *     long; a monthly budget renews on the first of the month at local
 *     midnight.
 *
 * The provider's prices are its price list's (USD 2.50 and 10.00 per
 * million input and output tokens), written here apart from the
 * configuration's; the midnights are computed here from the calendar
 * (the US rule: daylight time from the second Sunday of March, 2:00),
 * apart from lib/core/tz.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "engine.h"
#include "redis_fixture.h"
#include "simfleet.h"
#include "uvsim.h"

static redis_fixture fx;

static int group_setup(void **state) {
    (void)state;
    return redis_fixture_start(&fx, 0);
}
static int group_teardown(void **state) {
    (void)state;
    redis_fixture_stop(&fx);
    return 0;
}

/* The provider's price list, per token in 1e-12 USD. */
#define PRICE_IN_PICO 2500000LL   /* USD 2.50 per million */
#define PRICE_OUT_PICO 10000000LL /* USD 10.00 per million */

typedef struct biller {
    uint64_t rng;
    int random_usage;
    long long bill_pico; /* everything it produced */
    size_t sends;
    double *send_t;         /* per send: its time, */
    long long *send_cost;   /* and what it billed */
    long long *send_charge; /* and what the budget is to charge (1e-6 USD): the bill rounded up, or the
                                  reservation of one cancelled after the send (nobody says what it used) */
    size_t cap;
} biller;

static uint64_t brand(biller *b) {
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return b->rng;
}

static int bill_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    biller *b = ud;
    out->status = 200;
    out->latency_ms = 400 + (double)(brand(b) % 400);
    /* Within the caller's estimate: a prompt counted at most as large as
     * the caller said, any output up to its max. */
    out->input = b->random_usage ? c->input - (long long)(brand(b) % (uint64_t)(c->input / 10 + 1)) : c->input;
    out->output = b->random_usage ? (long long)(brand(b) % (uint64_t)(c->output + 1)) : c->output;
    out->cache_read = 0;
    long long cost = out->input * PRICE_IN_PICO + out->output * PRICE_OUT_PICO;
    b->bill_pico += cost;
    if (b->sends == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4096;
        b->send_t = realloc(b->send_t, b->cap * sizeof(*b->send_t));
        b->send_cost = realloc(b->send_cost, b->cap * sizeof(*b->send_cost));
        b->send_charge = realloc(b->send_charge, b->cap * sizeof(*b->send_charge));
        if (!b->send_t || !b->send_cost || !b->send_charge) return -1;
    }
    b->send_t[b->sends] = t_ms;
    b->send_cost[b->sends] = cost;
    long long max = c->input * PRICE_IN_PICO + c->output * PRICE_OUT_PICO;
    b->send_charge[b->sends] = ((c->cancelled ? max : cost) + 999999) / 1000000;
    b->sends++;
    return 0;
}

static long long redis_field(const char *key, const char *field) {
    redisContext *rc = redis_fixture_connect(&fx);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "HGET %s %s", key, field);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

/* ---- never over, all usable ---- */

#define BUDGET_USD 20
static const char *fleet_yaml = "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
                                "deployments:\n  gpt:\n    rpm: 100000\n    tpm: 100000000\n"
                                "    max_wait_ms: 2000\n"
                                "    price: { input: 2.5, output: 10, currency: USD }\n"
                                "budgets:\n  team:\n    tenant: t1\n    currency: USD\n    daily: 20\n";

static void run_fleet(uint64_t seed) {
    biller b = {.rng = seed * 0x9E3779B97F4A7C15ull + 1, .random_usage = 1};
    simfleet_opts o = {.seed = seed, .agents = 3, .redis = &fx, .yaml = fleet_yaml, .send = bill_send, .send_ud = &b};
    simfleet *f;
    assert_int_equal(simfleet_new(&o, &f), 0);
    for (int i = 0; i < 64; i++) {
        sim_caller_spec s = {.agent = i % 3,
                             .deployment = "gpt",
                             .input = 2000,
                             .output = 1000,
                             .start_ms = 10,
                             .jitter_ms = 500,
                             .calls = 320,
                             .think_ms = 0,
                             .max_wait_ms = 2000,
                             .max_attempts = 1,
                             .tenant = "t1",
                             .cancel_permille = 100};
        assert_int_equal(simfleet_add_callers(f, &s, 1), 0);
    }
    int done = simfleet_run_done(f, 3600000);
    assert_int_equal(done, 1);
    size_t n;
    const sim_record *r = simfleet_records(f, &n);
    double first_shed = -1;
    size_t sheds = 0, cancels = 0, grants = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].status == 0 && r[i].shed_reason && !strcmp(r[i].shed_reason, "budget")) {
            sheds++;
            if (first_shed < 0 || r[i].done_ms < first_shed) first_shed = r[i].done_ms;
        }
        if (r[i].status == -2) cancels++;
        if (r[i].status == 200) grants++;
    }
    long long before = 0, charged_before = 0, charged = 0;
    for (size_t i = 0; i < b.sends; i++) {
        charged += b.send_charge[i];
        if (first_shed < 0 || b.send_t[i] <= first_shed) {
            before += b.send_cost[i];
            charged_before += b.send_charge[i];
        }
    }
    long long budget_pico = (long long)BUDGET_USD * 1000000000000LL;
    long long day_spent = redis_field("sluice:{$budgets}:b:team", "day_spent");
    long long day_reserved = redis_field("sluice:{$budgets}:b:team", "day_reserved");
    printf("seed %llu: %zu sends, %zu cancelled waiting, %zu budget sheds; the provider's bill %.6f USD of %d "
           "(%.2f %%), %.2f %% before the first shed at %.1f s; charged %.2f %% before it; Redis day_spent "
           "%.6f, reserved %lld\n",
           (unsigned long long)seed, b.sends, cancels, sheds, (double)b.bill_pico / 1e12, BUDGET_USD,
           100.0 * (double)b.bill_pico / (double)budget_pico, 100.0 * (double)before / (double)budget_pico,
           first_shed / 1000, 100.0 * (double)charged_before * 1e6 / (double)budget_pico, (double)day_spent / 1e6,
           day_reserved);
    assert_true(sheds > 0);   /* demand exceeded it */
    assert_true(cancels > 0); /* cancels while waiting happened */
    assert_true(b.bill_pico <= budget_pico);
    /* The budget's spend before the first shed: a cancel after the send
     * is spent in full (the provider billed an unknown part of it). */
    assert_true(charged_before * 100 >= (long long)BUDGET_USD * 1000000 * 98);
    /* Redis' ledger is exactly the charges. */
    assert_int_equal(day_spent, charged);
    assert_true(day_spent * 1000000 >= b.bill_pico);
    assert_true(day_spent <= (long long)BUDGET_USD * 1000000);
    assert_int_equal(day_reserved, 0); /* every reservation settled */
    free(b.send_t);
    free(b.send_cost);
    free(b.send_charge);
    simfleet_free(f);
}

static void test_never_over_all_usable(void **state) {
    (void)state;
    const char *env = getenv("SIM_BUDGET_SEEDS");
    int seeds = env ? atoi(env) : 4;
    for (int s = 1; s <= seeds; s++) run_fleet((uint64_t)s);
}

/* ---- boundaries ---- */

/* UTC ms of a civil time (the test's own calendar). */
static long long utc_ms(int y, int mo, int d, int h, int mi) {
    struct tm t = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
    return (long long)timegm(&t) * 1000;
}

/* One caller asking every 20 s from epoch: 4 requests of USD 0.0125
 * each fit a limit of 0.05. Returns the records. */
static simfleet *run_clock(long long epoch_ms, const char *budget_yaml, biller *b, int calls) {
    static char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
             "deployments:\n  gpt:\n    rpm: 600\n    tpm: 1000000\n    max_wait_ms: 1000\n"
             "    price: { input: 2.5, output: 10, currency: USD }\n"
             "budgets:\n  team:\n    currency: USD\n    time_zone: America/New_York\n%s",
             budget_yaml);
    simfleet_opts o = {
        .seed = 1, .agents = 1, .redis = &fx, .yaml = yaml, .send = bill_send, .send_ud = b, .epoch_ms = epoch_ms};
    simfleet *f;
    assert_int_equal(simfleet_new(&o, &f), 0);
    sim_caller_spec s = {.agent = 0,
                         .deployment = "gpt",
                         .input = 1000,
                         .output = 1000,
                         .start_ms = 1000,
                         .calls = calls,
                         .think_ms = 20000,
                         .max_wait_ms = 1000,
                         .max_attempts = 1};
    assert_int_equal(simfleet_add_callers(f, &s, 1), 0);
    assert_int_equal(simfleet_run_done(f, 3600000), 1);
    return f;
}

/* The sheds and grants of a run: sheds' times (ms since epoch) and their
 * retry-after, in order. */
typedef struct clock_seen {
    double shed_at[16];
    long long retry[16];
    double grant_at[32];
    int nshed, ngrant;
} clock_seen;

static void seen_of(simfleet *f, clock_seen *cs) {
    memset(cs, 0, sizeof(*cs));
    size_t n;
    const sim_record *r = simfleet_records(f, &n);
    for (size_t i = 0; i < n; i++) {
        if (r[i].status == 0 && cs->nshed < 16) {
            assert_string_equal(r[i].shed_reason, "budget");
            cs->shed_at[cs->nshed] = r[i].done_ms;
            cs->retry[cs->nshed++] = r[i].retry_after_ms;
        } else if (r[i].status == 200 && cs->ngrant < 32) {
            cs->grant_at[cs->ngrant++] = r[i].send_ms;
        }
    }
}

/* |retry - (at - shed)| within 50 ms (the script reads the clock a few
 * commands after the shed was decided, the reply travels). */
static void assert_renews_at(double shed_ms, long long retry, long long epoch, long long at) {
    double want = (double)(at - epoch) - shed_ms;
    printf("  shed at +%.1f s: retry-after %lld ms, the calendar says %.0f ms\n", shed_ms / 1000, retry, want);
    assert_true(retry >= want - 50 && retry <= want + 50);
}

static void test_daily_renews_at_local_midnight_across_dst(void **state) {
    (void)state;
    /* 2026-03-07 23:58 EST (UTC-5): two minutes before the day of the
     * spring change, which runs from 05:00Z to 04:00Z next day (23 h). */
    long long epoch = utc_ms(2026, 3, 8, 4, 58);
    long long m1 = utc_ms(2026, 3, 8, 5, 0), m2 = utc_ms(2026, 3, 9, 4, 0);
    biller b = {.rng = 7};
    simfleet *f = run_clock(epoch, "    daily: 0.05\n", &b, 14);
    clock_seen cs;
    seen_of(f, &cs);
    /* Calls at 1, 21, ..., 261 s: 4 fit before midnight (120 s), the 5th
     * (81 s) and 6th (101 s) are shed until it; 4 more fit from 121 s on,
     * then the rest are shed until the next midnight, 23 h later. */
    printf("daily, America/New_York across the spring change: %d granted, %d shed\n", cs.ngrant, cs.nshed);
    assert_int_equal(cs.ngrant, 8);
    assert_int_equal(cs.nshed, 6);
    assert_renews_at(cs.shed_at[0], cs.retry[0], epoch, m1);
    assert_renews_at(cs.shed_at[1], cs.retry[1], epoch, m1);
    assert_true(cs.grant_at[4] >= (double)(m1 - epoch));
    for (int i = 2; i < cs.nshed; i++) assert_renews_at(cs.shed_at[i], cs.retry[i], epoch, m2);
    assert_true(m2 - m1 == 23 * 3600000LL); /* the calendar's own check */
    free(b.send_t);
    free(b.send_cost);
    free(b.send_charge);
    simfleet_free(f);
}

static void test_monthly_renews_on_the_first(void **state) {
    (void)state;
    /* 2026-03-31 23:58 EDT (UTC-4): April starts at 04:00Z. */
    long long epoch = utc_ms(2026, 4, 1, 3, 58);
    long long m = utc_ms(2026, 4, 1, 4, 0), may = utc_ms(2026, 5, 1, 4, 0);
    biller b = {.rng = 9};
    simfleet *f = run_clock(epoch, "    monthly: 0.05\n", &b, 14);
    clock_seen cs;
    seen_of(f, &cs);
    printf("monthly, America/New_York: %d granted, %d shed\n", cs.ngrant, cs.nshed);
    assert_int_equal(cs.ngrant, 8);
    assert_int_equal(cs.nshed, 6);
    assert_renews_at(cs.shed_at[0], cs.retry[0], epoch, m);
    assert_renews_at(cs.shed_at[1], cs.retry[1], epoch, m);
    for (int i = 2; i < cs.nshed; i++) assert_renews_at(cs.shed_at[i], cs.retry[i], epoch, may);
    free(b.send_t);
    free(b.send_cost);
    free(b.send_charge);
    simfleet_free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_daily_renews_at_local_midnight_across_dst),
        cmocka_unit_test(test_monthly_renews_on_the_first),
        cmocka_unit_test(test_never_over_all_usable),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
