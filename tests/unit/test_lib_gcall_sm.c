/* Unit tests for gcall_sm (lib/gcall.h): the governed call's state
 * machine, which libsluice's sl_call and the daemon's HTTP proxy both run
 * on, driven here by a step table that only records what it is asked to
 * do. Checked: each step's enter runs on gcall_sm_go() and its result is
 * returned; a failed attempt's retry decision (not retryable, attempts
 * spent, a server's wait as the floor, the deadline; the same seed gives
 * the same delay); an allowed retry counts, waits from when it was
 * decided on the user's timer and enters the step named after it; a
 * wake-up outside a backoff does nothing; gcall_sm_stop() runs the
 * current step's stop (a backoff's timer stopped) once, then nothing. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gcall.h"
#include "sluice.h"

/* The user: what the machine asked of it. */
typedef struct rec {
    gcall_sm sm;
    int entered[SL_CALL_DONE]; /* enter calls by step */
    int stopped[SL_CALL_DONE]; /* stop calls by step */
    int enter_rc;              /* what enter returns */
    int sleeps;
    int64_t due; /* the last sleep's */
} rec;

#define REC_OF(m) ((rec *)(void *)((char *)(m)-offsetof(rec, sm)))

static int rec_enter(gcall_sm *m) {
    rec *r = REC_OF(m);
    r->entered[m->state]++;
    return r->enter_rc;
}

static void rec_stop(gcall_sm *m) { REC_OF(m)->stopped[m->state]++; }

static void rec_sleep(gcall_sm *m, int64_t due) {
    rec *r = REC_OF(m);
    r->sleeps++;
    r->due = due;
}

static const gcall_steps rec_steps = {
    .step =
        {
            [SL_CALL_ACQUIRING] = {rec_enter, rec_stop},
            [SL_CALL_SENDING] = {rec_enter, rec_stop},
            [SL_CALL_ASKING] = {rec_enter, NULL},
        },
    .sleep = rec_sleep,
};

static void rec_init(rec *r, uint64_t seed) {
    memset(r, 0, sizeof(*r));
    gcall_sm_init(&r->sm, &rec_steps, seed);
}

static sl_call_opts policy(int max_attempts, long long deadline_ms) {
    sl_call_opts o;
    sl_call_opts_init(&o);
    o.deployment = "d";
    o.max_attempts = max_attempts;
    o.min_attempt_ms = 50;
    o.deadline_ms = deadline_ms;
    return o;
}

static sl_verdict failure(int retryable, long long pause_ms) {
    sl_verdict v;
    sl_verdict_init(&v);
    v.cls = SL_CLASS_SERVER_ERROR;
    v.http_status = 503;
    v.retryable = retryable;
    v.pause_ms = pause_ms;
    return v;
}

static void test_go_enters_the_step(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 1);
    assert_int_equal(r.sm.state, SL_CALL_ACQUIRING);
    assert_int_equal(gcall_sm_go(&r.sm, SL_CALL_ACQUIRING), 0);
    assert_int_equal(r.entered[SL_CALL_ACQUIRING], 1);
    assert_int_equal(gcall_sm_go(&r.sm, SL_CALL_SENDING), 0);
    assert_int_equal(r.sm.state, SL_CALL_SENDING);
    assert_int_equal(r.entered[SL_CALL_SENDING], 1);
    r.enter_rc = SL_EUNAVAIL; /* the step could not begin: the user hears it */
    assert_int_equal(gcall_sm_go(&r.sm, SL_CALL_ASKING), SL_EUNAVAIL);
    assert_int_equal(r.sm.state, SL_CALL_ASKING);
    assert_int_equal(r.sleeps, 0);
}

static void test_retry_then_backoff_then_acquire(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 7);
    sl_call_opts o = policy(3, 0);
    sl_verdict v = failure(1, -1);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    int64_t before = sl_now_ms();
    long long d = gcall_sm_failed(&r.sm, &o, &v);
    assert_true(d >= 0 && d <= 500); /* full jitter below the first ceiling */
    assert_true(r.sm.decided >= before && r.sm.decided <= sl_now_ms());
    assert_int_equal(r.sm.delay, d);
    gcall_sm_go(&r.sm, SL_CALL_ASKING);
    assert_int_equal(r.entered[SL_CALL_ASKING], 1);
    gcall_sm_allowed(&r.sm);
    assert_int_equal(r.sm.retries, 1);
    assert_int_equal(r.sm.state, SL_CALL_BACKOFF);
    assert_int_equal(r.sleeps, 1);
    assert_int_equal(r.due, r.sm.decided + d); /* from the decision, not the answer */
    gcall_sm_wakeup(&r.sm);
    assert_int_equal(r.sm.state, SL_CALL_ACQUIRING);
    assert_int_equal(r.entered[SL_CALL_ACQUIRING], 1);
    /* The second failure: the ceiling doubles; the third is the last. */
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    d = gcall_sm_failed(&r.sm, &o, &v);
    assert_true(d >= 0 && d <= 1000);
    gcall_sm_allowed(&r.sm);
    gcall_sm_wakeup(&r.sm);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    assert_int_equal(gcall_sm_failed(&r.sm, &o, &v), SL_EATTEMPTS);
}

static void test_no_retry(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 1);
    sl_call_opts o = policy(5, 0);
    sl_verdict fatal = failure(0, -1);
    assert_int_equal(gcall_sm_failed(&r.sm, &o, &fatal), SL_EFATAL);
    /* One attempt allowed: none left after it. */
    sl_call_opts once = policy(1, 0);
    sl_verdict v = failure(1, -1);
    assert_int_equal(gcall_sm_failed(&r.sm, &once, &v), SL_EATTEMPTS);
    /* A server's wait is the floor: it does not fit before the deadline. */
    sl_call_opts soon = policy(5, sl_now_ms() + 1000);
    sl_verdict wait = failure(1, 5000);
    assert_int_equal(gcall_sm_failed(&r.sm, &soon, &wait), SL_EDEADLINE);
    /* Beyond the cap of the server's wait worth waiting. */
    sl_verdict far = failure(1, 10 * 60 * 1000);
    assert_int_equal(gcall_sm_failed(&r.sm, &o, &far), SL_EDEADLINE);
    assert_int_equal(r.sm.retries, 0);
}

static void test_server_wait_floor_and_seed(void **state) {
    (void)state;
    rec a, b;
    rec_init(&a, 42);
    rec_init(&b, 42);
    sl_call_opts o = policy(5, 0);
    sl_verdict v = failure(1, 2000);
    long long da = gcall_sm_failed(&a.sm, &o, &v), db = gcall_sm_failed(&b.sm, &o, &v);
    assert_true(da >= 2000 && da <= 2500); /* the floor, jitter at most W/4 */
    assert_int_equal(da, db);
}

static void test_stop_by_step(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 1);
    gcall_sm_go(&r.sm, SL_CALL_ACQUIRING);
    gcall_sm_stop(&r.sm);
    assert_int_equal(r.stopped[SL_CALL_ACQUIRING], 1);
    assert_int_equal(r.sm.state, SL_CALL_DONE);
    gcall_sm_stop(&r.sm); /* ended: nothing more */
    gcall_sm_wakeup(&r.sm);
    assert_int_equal(r.stopped[SL_CALL_ACQUIRING], 1);
    assert_int_equal(r.entered[SL_CALL_ACQUIRING], 1);

    rec_init(&r, 1);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    gcall_sm_stop(&r.sm);
    assert_int_equal(r.stopped[SL_CALL_SENDING], 1);
    assert_int_equal(r.sleeps, 0);

    rec_init(&r, 1);
    gcall_sm_go(&r.sm, SL_CALL_ASKING); /* no stop: its answer is dropped when it comes */
    gcall_sm_stop(&r.sm);
    assert_int_equal(r.sm.state, SL_CALL_DONE);

    rec_init(&r, 1);
    gcall_sm_pause(&r.sm, sl_now_ms() + 1000, SL_CALL_ASKING);
    assert_int_equal(r.sleeps, 1);
    gcall_sm_stop(&r.sm);
    assert_int_equal(r.sleeps, 2);
    assert_int_equal(r.due, -1); /* the timer stopped */
    assert_int_equal(r.stopped[SL_CALL_ACQUIRING] + r.stopped[SL_CALL_SENDING], 0);
}

static void test_pause_leads_to_its_step(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 1);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    gcall_sm_wakeup(&r.sm); /* not in a backoff: nothing */
    assert_int_equal(r.sm.state, SL_CALL_SENDING);
    gcall_sm_pause(&r.sm, 123, SL_CALL_ASKING);
    assert_int_equal(r.sm.state, SL_CALL_BACKOFF);
    assert_int_equal(r.due, 123);
    gcall_sm_wakeup(&r.sm);
    assert_int_equal(r.sm.state, SL_CALL_ASKING);
    assert_int_equal(r.entered[SL_CALL_ASKING], 1);
    assert_int_equal(r.sm.retries, 0); /* a pause is no retry */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_go_enters_the_step), cmocka_unit_test(test_retry_then_backoff_then_acquire),
        cmocka_unit_test(test_no_retry),           cmocka_unit_test(test_server_wait_floor_and_seed),
        cmocka_unit_test(test_stop_by_step),       cmocka_unit_test(test_pause_leads_to_its_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
