/* Unit tests for lib/http/backoff: the full-jitter ceiling, server-wait
 * floors, deadlines, verdicts, the RNG, and properties over many seeds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backoff.h"

#define NOW INT64_C(1700000000000)

static void test_policy_defaults(void **state) {
    (void)state;
    backoff_policy p;
    memset(&p, 0x77, sizeof p);
    backoff_policy_init(&p);
    assert_int_equal(p.base_ms, 500);
    assert_int_equal(p.cap_ms, 30000);
    assert_int_equal(p.server_wait_cap_ms, 120000);
    assert_int_equal(p.jitter_cap_ms, 1000);
    assert_int_equal(p.jitter_divisor, 4);
    assert_int_equal(p.min_attempt_ms, 1000);
    assert_int_equal(p.max_attempts, 0);
    backoff_policy_init(NULL); /* no crash */
}

static void test_ceiling(void **state) {
    (void)state;
    backoff_policy p;
    backoff_policy_init(&p);
    static const struct {
        int attempt;
        int64_t want;
    } v[] = {
        {0, 500},    {1, 1000},   {2, 2000},   {5, 16000},    {6, 30000},         {7, 30000}, {61, 30000},
        {62, 30000}, {63, 30000}, {64, 30000}, {1000, 30000}, {INT32_MAX, 30000}, {-1, 500},  {INT32_MIN, 500},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (backoff_ceiling_ms(&p, v[i].attempt) != v[i].want)
            fail_msg("attempt %d: got %lld want %lld", v[i].attempt, (long long)backoff_ceiling_ms(&p, v[i].attempt),
                     (long long)v[i].want);

    /* No cap to speak of: exact powers of two until the int64 edge. */
    p.base_ms = 1;
    p.cap_ms = INT64_MAX;
    assert_int_equal(backoff_ceiling_ms(&p, 10), 1024);
    assert_int_equal(backoff_ceiling_ms(&p, 61), INT64_C(1) << 61);
    assert_int_equal(backoff_ceiling_ms(&p, 62), INT64_C(1) << 62);
    assert_int_equal(backoff_ceiling_ms(&p, 63), INT64_MAX); /* 2^63 overflows */
    assert_int_equal(backoff_ceiling_ms(&p, 200), INT64_MAX);
    p.base_ms = 3;
    assert_int_equal(backoff_ceiling_ms(&p, 61), INT64_C(3) << 61);
    assert_int_equal(backoff_ceiling_ms(&p, 62), INT64_MAX); /* 3 * 2^62 overflows */
    p.base_ms = INT64_MAX;
    p.cap_ms = 30000;
    assert_int_equal(backoff_ceiling_ms(&p, 1), 30000);
    assert_int_equal(backoff_ceiling_ms(&p, 0), 30000);
    p.base_ms = 0;
    assert_int_equal(backoff_ceiling_ms(&p, 5), 0);
    p.base_ms = -5;
    assert_int_equal(backoff_ceiling_ms(&p, 5), 0);
    p.base_ms = 100;
    p.cap_ms = -1;
    assert_int_equal(backoff_ceiling_ms(&p, 5), 0);
    assert_int_equal(backoff_ceiling_ms(NULL, 5), 0);
}

static void test_rng(void **state) {
    (void)state;
    /* splitmix64 reference outputs for seed 0. */
    uint64_t s = 0;
    assert_int_equal(backoff_rand_next(&s), UINT64_C(0xE220A8397B1DCDAF));
    assert_int_equal(backoff_rand_next(&s), UINT64_C(0x6E789E6AA1B965F4));
    assert_int_equal(backoff_rand_next(&s), UINT64_C(0x06C45D188009454F));

    s = 1;
    assert_int_equal(backoff_rand_upto(&s, 0), 0);
    assert_int_equal(s, 1); /* no draw for an empty range */
    assert_int_equal(backoff_rand_upto(&s, -5), 0);
    assert_int_equal(backoff_rand_upto(NULL, 77), 77);

    /* every value of a small range appears, none outside it */
    int seen[4] = {0};
    for (int i = 0; i < 10000; i++) {
        int64_t r = backoff_rand_upto(&s, 3);
        assert_in_range(r, 0, 3);
        seen[r]++;
    }
    for (int i = 0; i < 4; i++) assert_in_range(seen[i], 2200, 2800);
    /* Unbiased for a huge range: with hi + 1 = 3 * 2^61, 2/3 of uniform
     * draws fall below 2^62; a plain modulo would put 3/4 there (sd 37). */
    int below = 0;
    for (int i = 0; i < 6000; i++)
        if (backoff_rand_upto(&s, INT64_C(3) * (INT64_C(1) << 61) - 1) < (INT64_C(1) << 62)) below++;
    assert_in_range(below, 3800, 4200);
    /* full range */
    for (int i = 0; i < 1000; i++) {
        int64_t r = backoff_rand_upto(&s, INT64_MAX);
        assert_true(r >= 0);
    }
}

static void test_verdicts(void **state) {
    (void)state;
    backoff_policy p;
    backoff_policy_init(&p);
    backoff_decision d;
    uint64_t rng = 99;

    assert_int_equal(backoff_next(&p, 0, false, -1, NOW, -1, &rng, &d), BACKOFF_GIVE_UP_NOT_RETRYABLE);
    assert_int_equal(d.delay_ms, -1);
    assert_int_equal(d.attempt_timeout_ms, -1);
    /* not retryable wins over everything else */
    assert_int_equal(backoff_next(&p, 0, false, 999999, NOW, NOW - 5, &rng, &d), BACKOFF_GIVE_UP_NOT_RETRYABLE);

    p.max_attempts = 3;
    assert_int_equal(backoff_next(&p, 2, true, -1, NOW, -1, &rng, &d), BACKOFF_RETRY);
    assert_int_equal(backoff_next(&p, 3, true, -1, NOW, -1, &rng, &d), BACKOFF_GIVE_UP_ATTEMPTS);
    assert_int_equal(d.delay_ms, -1);
    p.max_attempts = 0;
    assert_int_equal(backoff_next(&p, 1000000, true, -1, NOW, -1, &rng, &d), BACKOFF_RETRY);
    assert_in_range(d.delay_ms, 0, 30000);

    /* server wait beyond the cap: give up at once, report the wait */
    assert_int_equal(backoff_next(&p, 0, true, 120001, NOW, -1, &rng, &d), BACKOFF_GIVE_UP_SERVER_WAIT);
    assert_int_equal(d.delay_ms, 120001);
    assert_int_equal(backoff_next(&p, 0, true, 120000, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 121000); /* 120000 + min(1000, 30000) */
    /* ... checked before the deadline */
    assert_int_equal(backoff_next(&p, 0, true, 500000, NOW, NOW + 10, &rng, &d), BACKOFF_GIVE_UP_SERVER_WAIT);

    /* deadline already passed, or too close for an attempt */
    assert_int_equal(backoff_next(&p, 0, true, -1, NOW, NOW - 1, &rng, &d), BACKOFF_GIVE_UP_DEADLINE);
    assert_int_equal(backoff_next(&p, 0, true, -1, NOW, NOW, &rng, &d), BACKOFF_GIVE_UP_DEADLINE);
    assert_int_equal(backoff_next(&p, 0, true, -1, NOW, NOW + 999, &rng, &d), BACKOFF_GIVE_UP_DEADLINE);
    assert_int_equal(d.delay_ms, -1);
    assert_int_equal(d.attempt_timeout_ms, -1);
    assert_int_equal(backoff_next(&p, 0, true, -1, NOW, NOW + 1000, &rng, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 0);
    assert_int_equal(d.attempt_timeout_ms, 1000);

    assert_string_equal(backoff_verdict_name(BACKOFF_RETRY), "retry");
    assert_string_equal(backoff_verdict_name(BACKOFF_GIVE_UP_NOT_RETRYABLE), "not_retryable");
    assert_string_equal(backoff_verdict_name(BACKOFF_GIVE_UP_ATTEMPTS), "attempts_exhausted");
    assert_string_equal(backoff_verdict_name(BACKOFF_GIVE_UP_SERVER_WAIT), "server_wait_beyond_cap");
    assert_string_equal(backoff_verdict_name(BACKOFF_GIVE_UP_DEADLINE), "deadline");
    assert_string_equal(backoff_verdict_name(BACKOFF__COUNT), "unknown");
}

static void test_exact_delays(void **state) {
    (void)state;
    backoff_policy p;
    backoff_policy_init(&p);
    backoff_decision d;

    /* Without an RNG the upper bound is used: plain exponential backoff. */
    assert_int_equal(backoff_next(&p, 3, true, -1, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 4000);
    assert_int_equal(d.attempt_timeout_ms, -1);
    assert_int_equal(backoff_next(&p, 3, true, -1, NOW, NOW + 3500, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 2500); /* lowered to fit min_attempt_ms */
    assert_int_equal(d.attempt_timeout_ms, 1000);

    /* Full jitter draws exactly rand_upto(ceiling) from the same state. */
    uint64_t a = 12345, b = 12345;
    assert_int_equal(backoff_next(&p, 4, true, -1, NOW, -1, &a, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, backoff_rand_upto(&b, 8000));
    assert_int_equal(a, b);

    /* Server wait: floor plus upward jitter up to min(jitter_cap, W/4). */
    assert_int_equal(backoff_next(&p, 0, true, 2000, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 2500);
    assert_int_equal(backoff_next(&p, 0, true, 20000, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 21000);
    assert_int_equal(backoff_next(&p, 0, true, 0, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 0);
    a = b = 777;
    assert_int_equal(backoff_next(&p, 9, true, 2000, NOW, -1, &a, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 2000 + backoff_rand_upto(&b, 500));

    /* Near the deadline the jitter shrinks, the floor does not. */
    assert_int_equal(backoff_next(&p, 0, true, 10000, NOW, NOW + 11200, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 10200);
    assert_int_equal(d.attempt_timeout_ms, 1000);
    assert_int_equal(backoff_next(&p, 0, true, 10000, NOW, NOW + 11000, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 10000);
    assert_int_equal(backoff_next(&p, 0, true, 10000, NOW, NOW + 10999, NULL, &d), BACKOFF_GIVE_UP_DEADLINE);

    /* Policy edge values are sanitised. */
    p.min_attempt_ms = 0; /* treated as 1: a delay still ends before the deadline */
    assert_int_equal(backoff_next(&p, 0, true, 5000, NOW, NOW + 5000, NULL, &d), BACKOFF_GIVE_UP_DEADLINE);
    assert_int_equal(backoff_next(&p, 0, true, 5000, NOW, NOW + 5001, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 5000);
    assert_int_equal(d.attempt_timeout_ms, 1);
    p.jitter_divisor = 0;  /* treated as 1 */
    p.jitter_cap_ms = -10; /* treated as 0 */
    assert_int_equal(backoff_next(&p, 0, true, 5000, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 5000);
    p.jitter_cap_ms = 100000;
    assert_int_equal(backoff_next(&p, 0, true, 5000, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 10000);
    /* a NULL policy means the defaults */
    assert_int_equal(backoff_next(NULL, 1, true, -1, NOW, -1, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 1000);
}

static void test_attempt_timeout(void **state) {
    (void)state;
    assert_int_equal(backoff_attempt_timeout_ms(1000, 5000, 1500), 2500);
    assert_int_equal(backoff_attempt_timeout_ms(1000, 5000, 0), 4000);
    assert_int_equal(backoff_attempt_timeout_ms(1000, 5000, -3), 4000);
    assert_int_equal(backoff_attempt_timeout_ms(1000, 2000, 5000), 0);
    assert_int_equal(backoff_attempt_timeout_ms(1000, -1, 5), -1);
    assert_int_equal(backoff_attempt_timeout_ms(INT64_MIN, INT64_MAX, 0), INT64_MAX);
    assert_int_equal(backoff_attempt_timeout_ms(INT64_MAX, 0, INT64_MAX), 0);
    backoff_decision d;
    backoff_policy p;
    backoff_policy_init(&p);
    /* extreme clocks do not overflow */
    assert_int_equal(backoff_next(&p, 70, true, -1, INT64_MIN, INT64_MAX, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 30000);
    assert_int_equal(d.attempt_timeout_ms, INT64_MAX - 30000);
    assert_int_equal(backoff_next(&p, 70, true, -1, INT64_MAX - 5, INT64_MAX, NULL, &d), BACKOFF_GIVE_UP_DEADLINE);
    assert_int_equal(backoff_next(&p, 0, true, 120000, INT64_MAX - 200000, INT64_MAX, NULL, &d), BACKOFF_RETRY);
    assert_int_equal(d.delay_ms, 121000);
}

/* Properties over 10,000 seeds: never past the deadline, floor respected,
 * jitter within its bounds, verdicts justified. */
static void test_properties(void **state) {
    (void)state;
    backoff_policy p;
    backoff_policy_init(&p);
    uint64_t meta = 2024;
    int retries = 0, deadline_give_ups = 0;
    for (int seed = 0; seed < 10000; seed++) {
        uint64_t rng = (uint64_t)seed;
        int attempt = (int)(backoff_rand_next(&meta) % 80);
        int64_t wait = (backoff_rand_next(&meta) % 3 == 0) ? -1 : (int64_t)(backoff_rand_next(&meta) % 130000);
        int64_t deadline = (backoff_rand_next(&meta) % 5 == 0) ? -1 : NOW + (int64_t)(backoff_rand_next(&meta) % 60000);
        backoff_decision d;
        backoff_verdict v = backoff_next(&p, attempt, true, wait, NOW, deadline, &rng, &d);
        int64_t latest = deadline < 0 ? INT64_MAX : deadline - NOW - p.min_attempt_ms;
        switch (v) {
        case BACKOFF_RETRY:
            retries++;
            assert_true(d.delay_ms >= 0);
            if (deadline >= 0) {
                assert_true(NOW + d.delay_ms < deadline);
                assert_true(NOW + d.delay_ms + p.min_attempt_ms <= deadline);
                assert_int_equal(d.attempt_timeout_ms, deadline - NOW - d.delay_ms);
            } else {
                assert_int_equal(d.attempt_timeout_ms, -1);
            }
            if (wait >= 0) {
                int64_t j = wait / 4 < 1000 ? wait / 4 : 1000;
                assert_in_range(d.delay_ms, wait, wait + j);
            } else {
                assert_in_range(d.delay_ms, 0, backoff_ceiling_ms(&p, attempt));
            }
            break;
        case BACKOFF_GIVE_UP_SERVER_WAIT:
            assert_true(wait > 120000);
            assert_int_equal(d.delay_ms, wait);
            break;
        case BACKOFF_GIVE_UP_DEADLINE:
            deadline_give_ups++;
            assert_true(deadline >= 0);
            assert_true(latest < 0 || wait > latest);
            break;
        default: fail_msg("unexpected verdict %s", backoff_verdict_name(v));
        }
    }
    /* the mix exercised both branches */
    assert_true(retries > 3000);
    assert_true(deadline_give_ups > 1000);

    /* Full jitter is spread over the whole range: mean near half the ceiling. */
    uint64_t rng = 5;
    double sum = 0;
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < 10000; i++) {
        backoff_decision d;
        backoff_next(&p, 10, true, -1, NOW, -1, &rng, &d);
        sum += (double)d.delay_ms;
        lo = d.delay_ms < lo ? d.delay_ms : lo;
        hi = d.delay_ms > hi ? d.delay_ms : hi;
    }
    assert_in_range((int64_t)(sum / 10000), 14000, 16000);
    assert_true(lo < 300);
    assert_true(hi > 29700);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_defaults),
        cmocka_unit_test(test_ceiling),
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_exact_delays),
        cmocka_unit_test(test_attempt_timeout),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
