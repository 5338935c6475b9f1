/* Unit tests for lib/gov's gov_thread_caller: in embedded mode each
 * thread that asks is a caller of the engine's turns (engine_req.caller),
 * as a connection is in sluiced. One thread keeps one number, other
 * threads get others, and none is 0 (the engine's "nobody said"). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>

#include "gov.h"

enum { NTHREADS = 8 };

static void *ask(void *arg) {
    uint64_t *out = arg;
    out[0] = gov_thread_caller();
    out[1] = gov_thread_caller();
    return NULL;
}

static void test_one_number_per_thread(void **state) {
    (void)state;
    uint64_t mine = gov_thread_caller();
    assert_true(mine != 0);
    assert_true(gov_thread_caller() == mine);
    uint64_t got[NTHREADS][2];
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, ask, got[i]), 0);
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        assert_true(got[i][0] != 0);
        assert_true(got[i][0] == got[i][1]);
        assert_true(got[i][0] != mine);
        for (int j = 0; j < i; j++) assert_true(got[i][0] != got[j][0]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_number_per_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
