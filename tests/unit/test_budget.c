/* test_budget: what a request costs in money (lib/core/budget.h), against
 * sums worked out by hand from the providers' price lists. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "budget.h"

/* USD 2.50 / 10.00 per million, cache reads 1.25, writes 2.50 (OpenAI's
 * gpt-4o list); Anthropic's Sonnet: 3 / 15, reads 0.30, writes 3.75. */
static const budget_price gpt = {2500000, 10000000, 1250000, 2500000};
static const budget_price sonnet = {3000000, 15000000, 300000, 3750000};

static void test_max_cost(void **state) {
    (void)state;
    /* 1000 in, 1000 out: 0.0025 + 0.01 = 0.0125 USD = 12500 micro. */
    assert_int_equal(budget_max_cost(&gpt, 1, 2000, 1000, 1000), 12500);
    /* Sonnet: the input at the cache-write price (dearer): 1000 x 3.75
     * + 1000 x 15 = 3750 + 15000. */
    assert_int_equal(budget_max_cost(&sonnet, 1, 2000, 1000, 1000), 18750);
    /* Without the split, every token at the dearest price (output). */
    assert_int_equal(budget_max_cost(&gpt, 0, 2000, -1, -1), 20000);
    /* Rounded up: 1 token at 2.50 per million is 2.5 micro -> 3. */
    assert_int_equal(budget_max_cost(&gpt, 1, 1, 1, 0), 3);
    assert_int_equal(budget_max_cost(&gpt, 1, 0, 0, 0), 0);
    /* A cache read priced above the input (allowed): the input reserved at it. */
    const budget_price odd = {1000000, 1000000, 5000000, 0};
    assert_int_equal(budget_max_cost(&odd, 1, 1000, 1000, 0), 5000);
    /* Beyond any budget: saturates (a product that would overflow), never
     * wraps to a small or negative cost. */
    const budget_price dear = {1000000000000LL, 1000000000000LL, 0, 0};
    long long huge = budget_max_cost(&dear, 1, 0, 1000000000000000LL, 1000000000000000LL);
    assert_true(huge >= 1000000000000000LL);
    assert_true(budget_max_cost(&dear, 0, 1000000000000000LL, -1, -1) == huge);
}

static void test_actual_cost(void **state) {
    (void)state;
    /* 1000 in of which 400 cache reads, 100 out: 600 x 2.5 + 400 x 1.25 +
     * 100 x 10 = 1500 + 500 + 1000. */
    usage_rec u = {1100, 1000, 100, 400, -1};
    assert_int_equal(budget_actual_cost(&gpt, &u, 12500, 2000), 3000);
    /* Sonnet: 1000 in, 200 read, 300 written, 500 out: 500 x 3 + 200 x 0.3
     * + 300 x 3.75 + 500 x 15 = 1500 + 60 + 1125 + 7500. */
    usage_rec s = {1500, 1000, 500, 200, 300};
    assert_int_equal(budget_actual_cost(&sonnet, &s, 100000, 2000), 10185);
    /* Only the combined count: at the dearest price, at most the
     * reservation when within the reserved tokens. */
    usage_rec t = {1500, -1, -1, -1, -1};
    assert_int_equal(budget_actual_cost(&gpt, &t, 12500, 2000), 12500);
    assert_int_equal(budget_actual_cost(&gpt, &t, 99999, 2000), 15000);
    usage_rec big = {3000, -1, -1, -1, -1};
    assert_int_equal(budget_actual_cost(&gpt, &big, 12500, 2000), 30000);
    /* Nothing known: the reservation. */
    usage_rec none = {-1, -1, -1, -1, -1};
    assert_int_equal(budget_actual_cost(&gpt, &none, 12500, 2000), 12500);
    /* Reads and writes beyond the input are cut to it. */
    usage_rec odd = {100, 100, 0, 80, 80};
    assert_int_equal(budget_actual_cost(&gpt, &odd, 0, 0), (80 * 1250000LL + 20 * 2500000LL + 999999) / 1000000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_cost),
        cmocka_unit_test(test_actual_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
