/* Unit tests for tests/support/replay.c, the provider's token bucket that
 * every "zero rejections" claim is judged by. Each case is small enough to
 * compute by hand; the comment above each assertion gives the arithmetic.
 *
 * The bucket (replay.h): starts full at the first event, refills at
 * rate_per_ms up to capacity, admits a send when it holds the cost (or is
 * full, for a cost above the capacity, which then leaves it in debt), and
 * a rejected send consumes nothing. Refunds (negative amounts) add to the
 * level, never above the capacity. Events are taken in time order, ties
 * in insertion order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "replay.h"

/* Replays the (t, amount) pairs through a bucket of cap and rate; returns
 * the rejections, the first rejection's time in *first (-1 when none). */
static size_t run(const double (*ev)[2], size_t n, double cap, double rate, double *first) {
    replay r;
    replay_init(&r);
    for (size_t i = 0; i < n; i++) assert_int_equal(replay_add(&r, ev[i][0], ev[i][1]), 0);
    double f = -1;
    size_t rej = replay_rejections(&r, cap, rate, &f);
    if (first) *first = f;
    replay_free(&r);
    return rej;
}

#define RUN(ev, cap, rate, first) run(ev, sizeof(ev) / sizeof(ev[0]), cap, rate, first)

static void test_empty_and_init(void **state) {
    replay r;
    replay_init(&r);
    assert_int_equal(r.n, 0);
    double first = 123;
    /* Nothing to judge: no rejections, *first untouched. */
    assert_int_equal(replay_rejections(&r, 1, 1, &first), 0);
    assert_true(first == 123);
    assert_true(replay_makespan(&r) == 0);
    replay_free(&r);
    replay_free(&r); /* safe twice: free resets */
    assert_null(r.ev);
}

/* The bucket starts full: `capacity` sends at once are admitted, one more
 * is not. */
static void test_capacity(void **state) {
    /* cap 3, 1 per second: three at t=0 take 3, the fourth finds 0. */
    static const double ev[][2] = {{0, 1}, {0, 1}, {0, 1}, {0, 1}};
    double first;
    assert_int_equal(RUN(ev, 3, 0.001, &first), 1);
    assert_true(first == 0);
    /* The same three alone: none rejected. */
    assert_int_equal(run(ev, 3, 3, 0.001, &first), 0);
    assert_true(first == -1);
    /* Full at the first event whatever its time (no history before it). */
    static const double late[][2] = {{1e9, 1}, {1e9, 1}, {1e9, 1}, {1e9, 1}};
    assert_int_equal(RUN(late, 3, 0.001, &first), 1);
    assert_true(first == 1e9);
}

/* Refill: rate_per_ms units per ms. */
static void test_refill(void **state) {
    /* cap 1, 0.01/ms = one per 100 ms: sends 100 ms apart are exact. */
    static const double spaced[][2] = {{0, 1}, {100, 1}, {200, 1}, {300, 1}, {400, 1}};
    assert_int_equal(RUN(spaced, 1, 0.01, NULL), 0);
    /* 99 ms after the first the bucket holds 0.99 < 1: rejected. */
    static const double early[][2] = {{0, 1}, {99, 1}};
    double first;
    assert_int_equal(RUN(early, 1, 0.01, &first), 1);
    assert_true(first == 99);
    /* Float tolerance: a millionth of a unit. 100 - 1e-5 ms leaves the
     * bucket 1e-7 short: admitted; 100 - 1e-3 ms leaves it 1e-5 short:
     * rejected. */
    static const double within[][2] = {{0, 1}, {100 - 1e-5, 1}};
    assert_int_equal(RUN(within, 1, 0.01, NULL), 0);
    static const double beyond[][2] = {{0, 1}, {100 - 1e-3, 1}};
    assert_int_equal(RUN(beyond, 1, 0.01, NULL), 1);
    /* Costs above 1 refill proportionally: cap 10, rate 0.01/ms; 10 at 0
     * empties it, 3 at 300 ms finds exactly 3, 1 at 350 ms finds 0.5. */
    static const double costs[][2] = {{0, 10}, {300, 3}, {350, 1}};
    assert_int_equal(RUN(costs, 10, 0.01, &first), 1);
    assert_true(first == 350);
}

/* Lateness at the cap: an idle bucket refills only up to its capacity, so
 * a release that comes late cannot be made up by the next ones coming
 * early. */
static void test_lateness_at_the_cap(void **state) {
    /* cap 2, one per 100 ms. Empty at 0; idle until 1000 ms it holds 2
     * (not 10): two sends pass, the third is rejected. */
    static const double idle[][2] = {{0, 1}, {0, 1}, {1000, 1}, {1000, 1}, {1000, 1}};
    double first;
    assert_int_equal(RUN(idle, 2, 0.01, &first), 1);
    assert_true(first == 1000);
    /* cap 1, one per 100 ms: the slot at 100 is released 20 ms late (120).
     * The bucket was full at 100 and cannot hold the 0.2 it would have
     * gained by 120, so the on-time send at 200 finds 0.8: rejected. */
    static const double late[][2] = {{0, 1}, {120, 1}, {200, 1}};
    assert_int_equal(RUN(late, 1, 0.01, &first), 1);
    assert_true(first == 200);
    /* With a burst of 2 the same late release fits (that slack is what
     * the schedule's jitter margin plans for): at 120 it holds 2 - 1 + 1.2
     * capped to 2, leaving 1; at 200: 1.8 >= 1. */
    assert_int_equal(RUN(late, 2, 0.01, NULL), 0);
}

/* A cost above the capacity is admitted only into a full bucket, and
 * leaves it in debt. */
static void test_cost_above_capacity(void **state) {
    /* cap 5, rate 0.01/ms. 8 into the full bucket: admitted, level -3.
     * 1 at 300 ms: level 0, rejected. 1 at 400 ms: level 1, admitted (the
     * rejection at 300 took nothing), level 0. */
    static const double debt[][2] = {{0, 8}, {300, 1}, {400, 1}};
    double first;
    assert_int_equal(RUN(debt, 5, 0.01, &first), 1);
    assert_true(first == 300);
    /* 8 into a bucket holding 4.9 (one unit taken, 90 ms of refill): not
     * full, rejected; at 100 ms it is full again: admitted. */
    static const double notfull[][2] = {{0, 1}, {90, 8}, {100, 8}};
    assert_int_equal(RUN(notfull, 5, 0.01, &first), 1);
    assert_true(first == 90);
    /* After the debt, full again 800 ms later (-3 + 8): the next 8 passes
     * exactly then, one ms earlier it does not. */
    static const double again[][2] = {{0, 8}, {800, 8}};
    assert_int_equal(RUN(again, 5, 0.01, NULL), 0);
    static const double again_early[][2] = {{0, 8}, {799, 8}};
    assert_int_equal(RUN(again_early, 5, 0.01, NULL), 1);
}

/* A rejected send consumes nothing (like a provider's 429). */
static void test_rejection_consumes_nothing(void **state) {
    /* cap 1, one per 100 ms: 0 passes; 50 is rejected; 100 finds a full
     * bucket, because the rejection at 50 took nothing. Were it charged,
     * 100 would find 0.5 and fail too. */
    static const double ev[][2] = {{0, 1}, {50, 1}, {100, 1}};
    double first;
    assert_int_equal(RUN(ev, 1, 0.01, &first), 1);
    assert_true(first == 50);
    /* Every rejection counts; *first is the earliest. */
    static const double many[][2] = {{0, 1}, {10, 1}, {20, 1}, {30, 1}, {100, 1}};
    assert_int_equal(RUN(many, 1, 0.01, &first), 3);
    assert_true(first == 10);
}

/* Events are replayed in time order whatever the insertion order; events
 * at the same time in insertion order. */
static void test_order_and_ties(void **state) {
    /* Inserted backwards: sorted by time, so no rejection. */
    static const double backwards[][2] = {{400, 1}, {300, 1}, {200, 1}, {100, 1}, {0, 1}};
    assert_int_equal(RUN(backwards, 1, 0.01, NULL), 0);
    /* cap 1, nearly no refill. At t=10 a send and a refund of 1: send
     * first finds 0.001 and is rejected, then the refund refills. */
    static const double send_first[][2] = {{0, 1}, {10, 1}, {10, -1}};
    double first;
    assert_int_equal(RUN(send_first, 1, 0.0001, &first), 1);
    assert_true(first == 10);
    /* Refund first: the send finds 1 and passes. */
    static const double refund_first[][2] = {{0, 1}, {10, -1}, {10, 1}};
    assert_int_equal(RUN(refund_first, 1, 0.0001, NULL), 0);
    /* Ties among sends: the first inserted is served first. cap 3: 2 then
     * 3 at t=0: 2 passes, 3 finds 1 (rejected); then 1 at t=0 passes. */
    static const double sends[][2] = {{0, 2}, {0, 3}, {0, 1}};
    assert_int_equal(RUN(sends, 3, 0.0001, NULL), 1);
    /* 3 then 2 then 1: 3 passes, 2 and 1 find 0: two rejections. */
    static const double sends2[][2] = {{0, 3}, {0, 2}, {0, 1}};
    assert_int_equal(RUN(sends2, 3, 0.0001, NULL), 2);
    /* seq is the insertion index. */
    replay r;
    replay_init(&r);
    for (int i = 0; i < 300; i++) assert_int_equal(replay_add(&r, (double)(i % 3), 1), 0);
    assert_int_equal(r.n, 300);
    for (size_t i = 0; i < r.n; i++) assert_int_equal(r.ev[i].seq, i);
    /* 300 sends at t = 0, 1, 2 ms with cap 100 and no meaningful refill:
     * the first 100 in time order pass: all the t=0 ones (inserted at
     * 0, 3, 6, ...). The sort is in place; events stay grouped by time in
     * insertion order. */
    assert_int_equal(replay_rejections(&r, 100, 1e-9, NULL), 200);
    for (size_t i = 0; i < 100; i++) {
        assert_true(r.ev[i].t_ms == 0);
        assert_int_equal(r.ev[i].seq, 3 * i);
    }
    replay_free(&r);
}

/* Refunds: negative amounts at the time the provider gives them back. */
static void test_refunds(void **state) {
    /* cap 2, no meaningful refill: 2 at 0 empties it; a refund of 1 at 10
     * lets one more pass at 20, and the next at 30 fails. */
    static const double ev[][2] = {{0, 2}, {10, -1}, {20, 1}, {30, 1}};
    double first;
    assert_int_equal(RUN(ev, 2, 1e-9, &first), 1);
    assert_true(first == 30);
    /* A refund never lifts the bucket above its capacity: a refund of 5
     * into a full bucket of 2 leaves 2: two pass, the third fails. */
    static const double over[][2] = {{0, -5}, {1, 1}, {2, 1}, {3, 1}};
    assert_int_equal(RUN(over, 2, 1e-9, &first), 1);
    assert_true(first == 3);
    /* A refund pays debt back: cap 5, rate 0.01/ms; 8 at 0 leaves -3; at
     * 1 ms it is -2.99 and a refund of 3 makes 0.01; at 2 ms 0.02 and a
     * refund of 5 makes 5.02, capped to 5: a send of 5 passes at 2 ms. */
    static const double debt[][2] = {{0, 8}, {1, -3}, {2, -5}, {2, 5}};
    assert_int_equal(RUN(debt, 5, 0.01, NULL), 0);
    /* A refund is neither a send nor a rejection. */
    static const double only[][2] = {{0, -1}, {5, -2}};
    assert_int_equal(RUN(only, 1, 0.01, NULL), 0);
}

static void test_makespan(void **state) {
    replay r;
    replay_init(&r);
    assert_int_equal(replay_add(&r, 500, 1), 0);
    /* One send: no span. */
    assert_true(replay_makespan(&r) == 0);
    /* First to last send, in any insertion order; refunds do not count. */
    assert_int_equal(replay_add(&r, 100, 1), 0);
    assert_int_equal(replay_add(&r, 50, -1), 0);
    assert_int_equal(replay_add(&r, 900, -1), 0);
    assert_int_equal(replay_add(&r, 300, 2), 0);
    assert_true(replay_makespan(&r) == 400);
    /* The same after replay_rejections sorted the events. */
    (void)replay_rejections(&r, 10, 1, NULL);
    assert_true(replay_makespan(&r) == 400);
    replay_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_init),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_refill),
        cmocka_unit_test(test_lateness_at_the_cap),
        cmocka_unit_test(test_cost_above_capacity),
        cmocka_unit_test(test_rejection_consumes_nothing),
        cmocka_unit_test(test_order_and_ties),
        cmocka_unit_test(test_refunds),
        cmocka_unit_test(test_makespan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
