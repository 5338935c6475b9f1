/* test_breaker: the fleet-wide circuit breaker and the hard-quota out
 * (docs/redis-keys.md, "Health") against a real redis-server.
 *
 * A one-node Redis Cluster, as in test_scripts. Time is never slept: where
 * a test needs time to pass it moves the scripts' clock with the test-only
 * limits field test_clock_offset_ms. Every test uses its own deployment. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "script_test.h"

/* ---- helpers ------------------------------------------------------------ */

#define MAXN 256

typedef struct verdict {
    int kind; /* 1 granted, 2 deferred, 0 shed */
    long long id, wait_ms, retry_after_ms;
    char reason[32];
} verdict;

/* Reserves n items of `tokens` each with max wait `maxwait`; with lanes
 * (lane != NULL) the quad form with that lane and tenant. Returns the
 * server time in ms. */
static double reserve_lane(const char *dep, int n, long long tokens, long long maxwait, const char *lane,
                           const char *tenant, verdict *out) {
    static char buf[1 + 4 * MAXN][24];
    const char *argv[1 + 4 * MAXN];
    int stride = lane ? 4 : 2, argc = 1;
    assert_true(n >= 1 && n <= MAXN);
    snprintf(buf[0], sizeof(buf[0]), "%d", n);
    argv[0] = buf[0];
    for (int i = 0; i < n; i++) {
        snprintf(buf[argc], 24, "%lld", tokens);
        argv[argc] = buf[argc];
        argc++;
        snprintf(buf[argc], 24, "%lld", maxwait);
        argv[argc] = buf[argc];
        argc++;
        if (lane) {
            argv[argc++] = lane;
            argv[argc++] = tenant;
        }
    }
    assert_int_equal(argc, 1 + stride * n);
    redisReply *r = script_call(rc, SCRIPT_RESERVE, dep, argc, argv);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, (size_t)(5 + n));
    double now_ms = (double)r->element[0]->integer / 1000.0;
    for (int i = 0; i < n; i++) {
        redisReply *it = r->element[5 + i];
        memset(&out[i], 0, sizeof(out[i]));
        out[i].kind = (int)it->element[0]->integer;
        if (out[i].kind == 1) {
            assert_int_equal(it->elements, 4);
            out[i].id = it->element[1]->integer;
            out[i].wait_ms = it->element[2]->integer;
        } else {
            assert_int_equal(it->elements, 3);
            snprintf(out[i].reason, sizeof(out[i].reason), "%s", it->element[1]->str);
            out[i].retry_after_ms = it->element[2]->integer;
        }
    }
    freeReplyObject(r);
    return now_ms;
}

static double reserve_n(const char *dep, int n, verdict *out) {
    return reserve_lane(dep, n, 1, 60000, NULL, NULL, out);
}

static int count_kind(const verdict *v, int n, int kind, const char *reason) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i].kind == kind && (!reason || strcmp(v[i].reason, reason) == 0)) k++;
    return k;
}

/* Settles n items with one outcome and pause; ids[i] < 0 means "-"
 * (feedback without a grant). Results go to res (may be NULL). Returns the
 * server time in ms. */
static double settle_n(const char *dep, int n, const long long *ids, const char *outcome, long long pause_ms,
                       char (*res)[16]) {
    static char buf[1 + 4 * MAXN][24];
    const char *argv[1 + 4 * MAXN];
    assert_true(n >= 1 && n <= MAXN);
    snprintf(buf[0], 24, "%d", n);
    argv[0] = buf[0];
    for (int i = 0; i < n; i++) {
        int b = 1 + 4 * i;
        if (ids[i] < 0) snprintf(buf[b], 24, "-");
        else snprintf(buf[b], 24, "%lld", ids[i]);
        snprintf(buf[b + 1], 24, "-1");
        snprintf(buf[b + 2], 24, "%s", outcome);
        snprintf(buf[b + 3], 24, "%lld", pause_ms);
        for (int j = 0; j < 4; j++) argv[b + j] = buf[b + j];
    }
    redisReply *r = script_call(rc, SCRIPT_SETTLE, dep, 1 + 4 * n, argv);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("settle: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, (size_t)(4 + n));
    for (int i = 0; res && i < n; i++) snprintf(res[i], 16, "%s", r->element[4 + i]->str);
    double now = (double)r->element[0]->integer / 1000.0;
    freeReplyObject(r);
    return now;
}

static double settle1(const char *dep, long long id, const char *outcome, long long pause_ms, char *res) {
    char r1[1][16];
    double now = settle_n(dep, 1, &id, outcome, pause_ms, r1);
    if (res) snprintf(res, 16, "%s", r1[0]);
    return now;
}

/* n requests through the whole path: reserved (all granted at once, the
 * deployments here have room) and settled with `outcome`. Returns the
 * settle's server time. */
static double requests(const char *dep, int n, const char *outcome) {
    verdict v[MAXN];
    long long ids[MAXN];
    reserve_n(dep, n, v);
    for (int i = 0; i < n; i++) {
        assert_int_equal(v[i].kind, 1);
        ids[i] = v[i].id;
    }
    char res[MAXN][16];
    double now = settle_n(dep, n, ids, outcome, -1, res);
    for (int i = 0; i < n; i++) assert_string_equal(res[i], "settled");
    return now;
}

static double hget(const char *dep, const char *field) { return hash_num(rc, dep, "state", field); }

static int hexists(const char *dep, const char *field) {
    redisReply *r = redisCommand(rc, "HEXISTS sluice:{%s}:state %s", dep, field);
    assert_non_null(r);
    int v = (int)r->integer;
    freeReplyObject(r);
    return v;
}

static void assert_breaker(const char *dep, const char *want) {
    char buf[64];
    assert_string_equal(status_text(rc, dep, "breaker_state", buf, sizeof(buf)), want);
}

/* A dump of every key of a deployment after the state hash (grants,
 * leases, refund queues, daily, retry, agents), to prove a call consumed
 * nothing: sheds only move the state's counters. */
static char *dump_rest(const char *dep) {
    static const char *const what[] = {"grants", "leases", "refq:requests", "refq:tokens", "daily", "retry", "agents"};
    return dump_keys(rc, dep, what, sizeof(what) / sizeof(*what));
}

/* A deployment with room for everything the tests send at once, the
 * breaker on at `ratio` with a minimum of 20 and a 10 s window. */
static void configure_breaker(const char *dep, const char *ratio) {
    configure_on(rc, dep, "rpm", "600000", "burst_requests", "10000", "breaker_failure_ratio", ratio,
                 "breaker_min_requests", "20", "breaker_window_ms", "10000", "breaker_break_ms", "5000", NULL);
}

/* ---- off by default ----------------------------------------------------- */

static void test_off_by_default(void **state) {
    (void)state;
    const char *dep = "off";
    configure_on(rc, dep, "rpm", "600000", "burst_requests", "10000", NULL);
    requests(dep, 100, "failed");
    long long dash[100];
    for (int i = 0; i < 100; i++) dash[i] = -1;
    settle_n(dep, 100, dash, "failed", -1, NULL);
    /* Nothing of the breaker was written, and traffic flows. */
    assert_false(hexists(dep, "breaker_state"));
    assert_false(hexists(dep, "breaker_window"));
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 0);
    assert_true(status_num(rc, dep, "breaker_opened_total") == 0);
    verdict v[100];
    reserve_n(dep, 100, v);
    assert_int_equal(count_kind(v, 100, 1, NULL), 100);
    assert_true(status_num(rc, dep, "settled_failed") == 100);
    assert_true(status_num(rc, dep, "shed_breaker") == 0);
}

/* ---- opening: the minimum and the ratio --------------------------------- */

static void test_min_requests_gate(void **state) {
    (void)state;
    const char *dep = "min";
    configure_breaker(dep, "0.5");
    /* 19 failures of 19: every one a failure, but below the minimum. */
    requests(dep, 19, "failed");
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 19);
    assert_true(status_num(rc, dep, "breaker_failures") == 19);
    /* The 20th settle (even an ok) reaches the minimum: 19/20 >= 0.5. */
    requests(dep, 1, "ok");
    assert_breaker(dep, "open");
    assert_true(status_num(rc, dep, "breaker_opened_total") == 1);
}

static void test_opens_exactly_at_the_ratio(void **state) {
    (void)state;
    const char *dep = "ratio";
    configure_breaker(dep, "0.5");
    requests(dep, 20, "ok");
    /* k failures after 20 oks: k / (20 + k) >= 0.5 first at k = 20. */
    for (int k = 1; k <= 19; k++) {
        requests(dep, 1, "failed");
        assert_breaker(dep, "closed");
    }
    assert_true(status_num(rc, dep, "breaker_requests") == 39);
    assert_true(status_num(rc, dep, "breaker_failures") == 19);
    double now = requests(dep, 1, "failed");
    assert_breaker(dep, "open");
    assert_true(status_num(rc, dep, "breaker_opened_total") == 1);
    assert_true(fabs(hget(dep, "breaker_open_until") - (now + 5000)) < 0.01);
}

static void test_only_failures_count(void **state) {
    (void)state;
    const char *dep = "kinds";
    configure_breaker(dep, "0.5");
    /* 429s are the rate's business, cancels are not answers, a repeated
     * settle of the same grant is "unknown": none of them counts. */
    requests(dep, 40, "throttled");
    requests(dep, 40, "cancelled");
    verdict v[1];
    reserve_n(dep, 1, v);
    char res[16];
    settle1(dep, v[0].id, "failed", -1, res);
    assert_string_equal(res, "settled");
    for (int i = 0; i < 30; i++) {
        settle1(dep, v[0].id, "failed", -1, res);
        assert_string_equal(res, "unknown");
    }
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 1);
    assert_true(status_num(rc, dep, "breaker_failures") == 1);
    /* Feedback without a grant ("-") does count: 19 more failures open it. */
    long long dash[19];
    for (int i = 0; i < 19; i++) dash[i] = -1;
    settle_n(dep, 19, dash, "failed", -1, NULL);
    assert_breaker(dep, "open");
}

/* ---- open: everything shed, nothing consumed ---------------------------- */

/* Opens dep's breaker (20 failures of 20); returns breaker_open_until. */
static double trip(const char *dep) {
    requests(dep, 20, "failed");
    assert_breaker(dep, "open");
    return hget(dep, "breaker_open_until");
}

static void test_open_sheds_and_consumes_nothing(void **state) {
    (void)state;
    const char *dep = "open";
    configure_breaker(dep, "0.5");
    double until = trip(dep);
    char *before = dump_rest(dep);
    double tat = hget(dep, "requests_tat"), granted = hget(dep, "granted_total");
    double last_slot = hget(dep, "last_slot"), next = hget(dep, "next_grant");
    verdict v[50];
    int sheds = 0;
    for (int call = 0; call < 3; call++) {
        double now = reserve_n(dep, 50, v);
        assert_int_equal(count_kind(v, 50, 0, "breaker"), 50);
        for (int i = 0; i < 50; i++) {
            double want = ceil(until - now - 1e-6);
            assert_true(fabs((double)v[i].retry_after_ms - want) <= 1);
        }
        sheds += 50;
        advance_on(rc, dep, 1000);
    }
    /* The retry-after follows the break down: 2 s of 5 s are left. */
    double now = reserve_n(dep, 1, v);
    assert_string_equal(v[0].reason, "breaker");
    /* (Real time runs on between the calls too: under load it can eat
     * into the 2 s; the exact check is the next one.) */
    assert_true(v[0].retry_after_ms <= 2000 && v[0].retry_after_ms >= 1500);
    assert_true(fabs((double)v[0].retry_after_ms - (until - now)) <= 1);
    sheds++;
    char *after = dump_rest(dep);
    assert_string_equal(before, after);
    free(before);
    free(after);
    assert_true(hget(dep, "requests_tat") == tat);
    assert_true(hget(dep, "last_slot") == last_slot);
    assert_true(hget(dep, "next_grant") == next);
    assert_true(hget(dep, "granted_total") == granted);
    assert_true(status_num(rc, dep, "shed_breaker") == sheds);
    assert_true(status_num(rc, dep, "shed_total") == sheds);
    assert_true(status_num(rc, dep, "breaker_open_ms") <= 2000);
    assert_true(status_num(rc, dep, "breaker_open_ms") >= 1500); /* real time runs on too */
}

static void test_late_results_while_open_are_ignored(void **state) {
    (void)state;
    const char *dep = "late";
    configure_breaker(dep, "0.5");
    /* 10 grants out before the breaker opens, settled while it is open. */
    verdict v[10];
    long long ids[10];
    reserve_n(dep, 10, v);
    for (int i = 0; i < 10; i++) ids[i] = v[i].id;
    double until = trip(dep);
    advance_on(rc, dep, 1000);
    settle_n(dep, 5, ids, "failed", -1, NULL);
    settle_n(dep, 5, ids + 5, "ok", -1, NULL);
    assert_breaker(dep, "open");
    assert_true(hget(dep, "breaker_open_until") == until);
    assert_true(status_num(rc, dep, "breaker_opened_total") == 1);
    assert_true(status_num(rc, dep, "breaker_requests") == 0);
}

/* ---- half-open: one probe ----------------------------------------------- */

/* Past dep's break: several calls of many items grant exactly one probe.
 * Returns its grant id. */
static long long one_probe(const char *dep) {
    advance_on(rc, dep, 5001);
    assert_breaker(dep, "half_open");
    long long probe = -1;
    int grants = 0;
    for (int call = 0; call < 4; call++) {
        verdict v[40];
        reserve_n(dep, 40, v);
        for (int i = 0; i < 40; i++) {
            if (v[i].kind == 1) {
                grants++;
                probe = v[i].id;
                assert_int_equal(call, 0);
                assert_int_equal(i, 0);
            } else {
                assert_int_equal(v[i].kind, 0);
                assert_string_equal(v[i].reason, "breaker");
                assert_int_equal(v[i].retry_after_ms, 1000);
            }
        }
    }
    assert_int_equal(grants, 1);
    assert_breaker(dep, "half_open");
    assert_true(hget(dep, "breaker_probe") == (double)probe);
    return probe;
}

static void test_probe_ok_closes(void **state) {
    (void)state;
    const char *dep = "probe_ok";
    configure_breaker(dep, "0.5");
    /* Grants from before the break settle while half-open: not the probe,
     * so they decide nothing. */
    verdict old[3];
    long long ids[3];
    reserve_n(dep, 3, old);
    for (int i = 0; i < 3; i++) ids[i] = old[i].id;
    trip(dep);
    long long probe = one_probe(dep);
    settle_n(dep, 3, ids, "failed", -1, NULL);
    assert_breaker(dep, "half_open");
    assert_true(status_num(rc, dep, "breaker_probes_total") == 1);
    char res[16];
    settle1(dep, probe, "ok", -1, res);
    assert_string_equal(res, "settled");
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 0);
    assert_true(status_num(rc, dep, "breaker_closed_total") == 1);
    verdict v[100];
    reserve_n(dep, 100, v);
    assert_int_equal(count_kind(v, 100, 1, NULL), 100);
    /* A closed breaker starts over: 19 failures (below the minimum) in a
     * fresh window leave it closed. */
    requests(dep, 19, "failed");
    assert_breaker(dep, "closed");
}

static void test_probe_failed_reopens(void **state) {
    (void)state;
    const char *dep = "probe_failed";
    configure_breaker(dep, "0.5");
    trip(dep);
    long long probe = one_probe(dep);
    double now = settle1(dep, probe, "failed", -1, NULL);
    assert_breaker(dep, "open");
    assert_true(fabs(hget(dep, "breaker_open_until") - (now + 5000)) < 0.01);
    assert_true(status_num(rc, dep, "breaker_opened_total") == 2);
    verdict v[10];
    now = reserve_n(dep, 10, v);
    assert_int_equal(count_kind(v, 10, 0, "breaker"), 10);
    assert_true(v[0].retry_after_ms > 4900 && v[0].retry_after_ms <= 5000);
    /* And after that break, a new probe. */
    long long probe2 = one_probe(dep);
    assert_true(probe2 > probe);
    assert_true(status_num(rc, dep, "breaker_probes_total") == 2);
}

static void test_probe_without_verdict_reprobes(void **state) {
    (void)state;
    const char *dep = "probe_lost";
    configure_on(rc, dep, "rpm", "600000", "burst_requests", "10000", "breaker_failure_ratio", "0.5",
                 "breaker_min_requests", "20", "breaker_window_ms", "10000", "breaker_break_ms", "5000", "lease_ms",
                 "2000", NULL);
    trip(dep);
    long long probe = one_probe(dep);
    /* The probe's worker goes silent: its lease expires and the next call
     * reclaims it and sends a new probe (a silent worker says nothing
     * about the provider). */
    advance_on(rc, dep, 2001);
    verdict v[10];
    reserve_n(dep, 10, v);
    assert_int_equal(count_kind(v, 10, 1, NULL), 1);
    assert_int_equal(v[0].kind, 1);
    long long probe2 = v[0].id;
    assert_true(probe2 > probe);
    assert_true(status_num(rc, dep, "expired_total") == 1);
    /* The old probe's late settle is unknown and decides nothing. */
    char res[16];
    settle1(dep, probe, "ok", -1, res);
    assert_string_equal(res, "unknown");
    assert_breaker(dep, "half_open");
    /* A 429 on the probe is no verdict either: the next call re-probes. */
    settle1(dep, probe2, "throttled", -1, res);
    assert_string_equal(res, "settled");
    assert_breaker(dep, "half_open");
    reserve_n(dep, 10, v);
    assert_int_equal(count_kind(v, 10, 1, NULL), 1);
    settle1(dep, v[0].id, "ok", -1, NULL);
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_probes_total") == 3);
    assert_true(status_num(rc, dep, "breaker_opened_total") == 1);
}

/* ---- the window slides -------------------------------------------------- */

static void test_window_slides(void **state) {
    (void)state;
    const char *dep = "slide";
    configure_breaker(dep, "0.5"); /* 10 s window in 1 s slices */
    requests(dep, 15, "failed");
    advance_on(rc, dep, 8500);
    /* Still within the window: 15 of 15 counted. */
    assert_true(status_num(rc, dep, "breaker_requests") == 15);
    assert_true(status_num(rc, dep, "breaker_failures") == 15);
    advance_on(rc, dep, 2600);
    /* 11.1 s later the slice has left the window. */
    assert_true(status_num(rc, dep, "breaker_requests") == 0);
    requests(dep, 5, "failed");
    /* 5 of 5 now, not 20 of 20: closed. */
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 5);
    advance_on(rc, dep, 3000);
    requests(dep, 14, "failed");
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 19);
    requests(dep, 1, "failed");
    assert_breaker(dep, "open");
    /* The window field never holds more than its live slices. */
    assert_true(status_num(rc, dep, "breaker_opened_total") == 1);
}

/* ---- hard quota --------------------------------------------------------- */

static void test_quota_out_until_reset(void **state) {
    (void)state;
    const char *dep = "quota";
    /* The breaker on with a minimum of 1: a quota error must not trip it. */
    configure_on(rc, dep, "rpm", "600000", "burst_requests", "10000", "breaker_failure_ratio", "0.5",
                 "breaker_min_requests", "1", "quota_hold_ms", "7000", NULL);
    verdict v[20];
    reserve_n(dep, 20, v);
    double tat = hget(dep, "requests_tat");
    char res[16];
    double now = settle1(dep, v[0].id, "quota", 20000, res);
    assert_string_equal(res, "settled");
    assert_true(fabs(hget(dep, "quota_until") - (now + 20000)) < 0.01);
    /* Not a rate pause: the schedule did not move, no pause, no shift. */
    assert_true(hget(dep, "requests_tat") == tat);
    assert_true(status_num(rc, dep, "paused_ms") == 0);
    assert_false(hexists(dep, "pause_shift_ms"));
    assert_true(status_num(rc, dep, "pauses") == 0);
    assert_breaker(dep, "closed");
    assert_true(status_num(rc, dep, "breaker_requests") == 0);
    assert_true(status_num(rc, dep, "quota_events_total") == 1);
    assert_true(status_num(rc, dep, "settled_quota") == 1);
    assert_true(status_num(rc, dep, "quota_out_ms") > 19000); /* 20 s, less real time since */
    /* Everything is shed `quota` until the reset, consuming nothing. */
    char *before = dump_rest(dep);
    double rnow = reserve_n(dep, 20, v + 0);
    assert_int_equal(count_kind(v, 20, 0, "quota"), 20);
    assert_true(fabs((double)v[0].retry_after_ms - (now + 20000 - rnow)) <= 1);
    char *after = dump_rest(dep);
    assert_string_equal(before, after);
    free(before);
    free(after);
    assert_true(hget(dep, "requests_tat") == tat);
    assert_true(status_num(rc, dep, "shed_quota") == 20);
    /* More reports of the same out (feedback without a grant, a shorter
     * reset) neither shorten it nor count as new events. */
    long long dash[5] = {-1, -1, -1, -1, -1};
    settle_n(dep, 5, dash, "quota", 10000, NULL);
    assert_true(fabs(hget(dep, "quota_until") - (now + 20000)) < 0.01);
    assert_true(status_num(rc, dep, "quota_events_total") == 1);
    advance_on(rc, dep, 19000);
    reserve_n(dep, 1, v);
    assert_string_equal(v[0].reason, "quota");
    assert_true(v[0].retry_after_ms <= 1000);
    advance_on(rc, dep, 1001);
    assert_true(status_num(rc, dep, "quota_out_ms") == 0);
    reserve_n(dep, 20, v);
    assert_int_equal(count_kind(v, 20, 1, NULL), 20);
    /* No reset given (-1): out for quota_hold_ms, a second event. */
    now = settle1(dep, -1, "quota", -1, res);
    assert_string_equal(res, "feedback");
    assert_true(fabs(hget(dep, "quota_until") - (now + 7000)) < 0.01);
    assert_true(status_num(rc, dep, "quota_events_total") == 2);
    rnow = reserve_n(dep, 1, v);
    assert_string_equal(v[0].reason, "quota");
    assert_true(fabs((double)v[0].retry_after_ms - (now + 7000 - rnow)) <= 1);
    advance_on(rc, dep, 7001);
    reserve_n(dep, 1, v);
    assert_int_equal(v[0].kind, 1);
    assert_breaker(dep, "closed");
}

/* ---- lanes and tenants: health first, deferrals undisturbed ------------- */

static void test_health_before_lanes(void **state) {
    (void)state;
    const char *dep = "lanes";
    configure_on(rc, dep, "rpm", "60", "burst_requests", "1", "lane.hi", "0,-1,0", "lane.lo", "1,0,0",
                 "breaker_failure_ratio", "0.5", "breaker_min_requests", "1", "breaker_break_ms", "5000", NULL);
    /* The bucket is empty after one grant: the low lane's next items are
     * deferred (its horizon is 0), as without a breaker. */
    verdict v[4];
    reserve_lane(dep, 1, 1, 60000, "hi", "", v);
    assert_int_equal(v[0].kind, 1);
    reserve_lane(dep, 2, 1, 60000, "lo", "", v);
    assert_int_equal(v[0].kind, 2);
    assert_int_equal(v[1].kind, 2);
    /* One failure opens it: every item is shed `breaker`, none deferred. */
    requests(dep, 1, "failed");
    assert_breaker(dep, "open");
    reserve_lane(dep, 4, 1, 60000, "lo", "", v);
    assert_int_equal(count_kind(v, 4, 0, "breaker"), 4);
    reserve_lane(dep, 4, 1, 60000, "hi", "", v);
    assert_int_equal(count_kind(v, 4, 0, "breaker"), 4);
    assert_true(status_num(rc, dep, "lane.lo.shed_total") == 4);
    assert_true(status_num(rc, dep, "lane.hi.shed_total") == 4);
    assert_true(status_num(rc, dep, "lane.lo.deferred_total") == 2);
    /* Half-open: the first grant is the probe, the rest are shed. */
    advance_on(rc, dep, 5001);
    reserve_lane(dep, 3, 1, 60000, "lo", "", v);
    assert_int_equal(v[0].kind, 1);
    assert_int_equal(count_kind(v + 1, 2, 0, "breaker"), 2);
    assert_true(hget(dep, "breaker_probe") == (double)v[0].id);
    /* Closed again, the low lane defers behind the probe's slot as before. */
    settle1(dep, v[0].id, "ok", -1, NULL);
    assert_breaker(dep, "closed");
    reserve_lane(dep, 2, 1, 60000, "lo", "", v);
    assert_int_equal(v[0].kind, 2);
    assert_int_equal(v[1].kind, 2);
    assert_true(status_num(rc, dep, "lane.lo.deferred_total") == 4);
    assert_true(status_num(rc, dep, "lane.lo.shed_total") == 6);
}

/* ---- bad configuration -------------------------------------------------- */

static void expect_configure_error(const char *dep, const char *field, const char *value) {
    redisReply *b = redisCommand(rc, "DUMP sluice:{%s}:limits", dep);
    assert_non_null(b);
    const char *argv[] = {"rpm", "60", field, value};
    redisReply *r = script_call(rc, SCRIPT_CONFIGURE, dep, 4, argv);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    char want[96];
    snprintf(want, sizeof(want), "field '%s' must be", field);
    if (!strstr(r->str, want)) fail_msg("error '%s' does not mention '%s'", r->str, want);
    freeReplyObject(r);
    redisReply *a = redisCommand(rc, "DUMP sluice:{%s}:limits", dep);
    assert_non_null(a);
    assert_int_equal(a->type, REDIS_REPLY_STRING);
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->str, b->str, a->len);
    freeReplyObject(a);
    freeReplyObject(b);
}

static void test_bad_configuration(void **state) {
    (void)state;
    const char *dep = "badcfg";
    configure_on(rc, dep, "rpm", "60", "breaker_failure_ratio", "0.25", NULL);
    static const char *bad[][2] = {
        {"breaker_failure_ratio", "1.5"},  {"breaker_failure_ratio", "-0.1"}, {"breaker_failure_ratio", "nan"},
        {"breaker_failure_ratio", "half"}, {"breaker_failure_ratio", "inf"},  {"breaker_min_requests", "0"},
        {"breaker_min_requests", "2.5"},   {"breaker_min_requests", "-3"},    {"breaker_window_ms", "999"},
        {"breaker_window_ms", "10s"},      {"breaker_break_ms", "99"},        {"breaker_break_ms", ""},
        {"quota_hold_ms", "999"},          {"quota_hold_ms", "-1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) expect_configure_error(dep, bad[i][0], bad[i][1]);
    /* The edges are accepted, and the defaults written for redis-cli. */
    configure_on(rc, dep, "rpm", "60", NULL);
    redisReply *r = redisCommand(rc,
                                 "HMGET sluice:{%s}:limits breaker_failure_ratio breaker_min_requests "
                                 "breaker_window_ms breaker_break_ms quota_hold_ms",
                                 dep);
    assert_non_null(r);
    assert_int_equal(r->elements, 5);
    assert_string_equal(r->element[0]->str, "0");
    assert_string_equal(r->element[1]->str, "20");
    assert_string_equal(r->element[2]->str, "30000");
    assert_string_equal(r->element[3]->str, "30000");
    assert_string_equal(r->element[4]->str, "3600000");
    freeReplyObject(r);
    configure_on(rc, dep, "rpm", "60", "breaker_failure_ratio", "1", "breaker_min_requests", "1", "breaker_window_ms",
                 "1000", "breaker_break_ms", "100", "quota_hold_ms", "1000", NULL);
    /* An unknown settle outcome names the new one in its message. */
    r = script_callv(rc, SCRIPT_SETTLE, dep, "1", "-", "-1", "quotas", "-1", NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "cancelled or quota"));
    freeReplyObject(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_by_default),
        cmocka_unit_test(test_min_requests_gate),
        cmocka_unit_test(test_opens_exactly_at_the_ratio),
        cmocka_unit_test(test_only_failures_count),
        cmocka_unit_test(test_open_sheds_and_consumes_nothing),
        cmocka_unit_test(test_late_results_while_open_are_ignored),
        cmocka_unit_test(test_probe_ok_closes),
        cmocka_unit_test(test_probe_failed_reopens),
        cmocka_unit_test(test_probe_without_verdict_reprobes),
        cmocka_unit_test(test_window_slides),
        cmocka_unit_test(test_quota_out_until_reset),
        cmocka_unit_test(test_health_before_lanes),
        cmocka_unit_test(test_bad_configuration),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
