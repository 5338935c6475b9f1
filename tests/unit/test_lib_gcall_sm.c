/* Unit tests for gcall_sm (lib/gcall.h): the governed call's state
 * machine, which libsluice's sl_call and the daemon's HTTP proxy both run
 * on, driven here by a step table that only records what it is asked to
 * do. Checked: each step's enter runs on gcall_sm_go() and its result is
 * returned; the call's time (the latest slot, an attempt's limit with
 * its margin, whether a wait fits, within the deadline); the end of an
 * attempt (settled once, success, a retry entering ASKING, the reasons
 * there is none); a failed attempt's retry decision (not retryable, attempts
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
    sl_call_opts o;            /* the call's policy */
    int settled;               /* settle calls */
    int settled_cls;           /* the last settle's verdict class */
    int stop_in_settle;        /* the settle says: do not try again (a cancel from the hook) */
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

static int rec_settle(gcall_sm *m, const sl_verdict *v) {
    rec *r = REC_OF(m);
    r->settled++;
    r->settled_cls = v->cls;
    return r->stop_in_settle;
}

static const gcall_steps rec_steps = {
    .step =
        {
            [SL_CALL_ACQUIRING] = {rec_enter, rec_stop},
            [SL_CALL_SENDING] = {rec_enter, rec_stop},
            [SL_CALL_ASKING] = {rec_enter, NULL},
        },
    .sleep = rec_sleep,
    .settle = rec_settle,
};

/* The policy: max_attempts, an absolute deadline (0: none), an attempt
 * needs 50 ms. */
static void policy(rec *r, int max_attempts, long long deadline_ms) {
    sl_call_opts_init(&r->o);
    r->o.deployment = "d";
    r->o.max_attempts = max_attempts;
    r->o.min_attempt_ms = 50;
    r->o.deadline_ms = deadline_ms;
}

static void rec_init(rec *r, uint64_t seed) {
    memset(r, 0, sizeof(*r));
    policy(r, 3, 0);
    gcall_sm_init(&r->sm, &rec_steps, &r->o, seed);
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
    sl_verdict v = failure(1, -1);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    int64_t before = sl_now_ms();
    long long d = gcall_sm_failed(&r.sm, &v);
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
    d = gcall_sm_failed(&r.sm, &v);
    assert_true(d >= 0 && d <= 1000);
    gcall_sm_allowed(&r.sm);
    gcall_sm_wakeup(&r.sm);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    assert_int_equal(gcall_sm_failed(&r.sm, &v), SL_EATTEMPTS);
}

static void test_no_retry(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 1);
    policy(&r, 5, 0);
    sl_verdict fatal = failure(0, -1);
    assert_int_equal(gcall_sm_failed(&r.sm, &fatal), SL_EFATAL);
    /* One attempt allowed: none left after it. */
    policy(&r, 1, 0);
    sl_verdict v = failure(1, -1);
    assert_int_equal(gcall_sm_failed(&r.sm, &v), SL_EATTEMPTS);
    /* A server's wait is the floor: it does not fit before the deadline. */
    policy(&r, 5, sl_now_ms() + 1000);
    sl_verdict wait = failure(1, 5000);
    assert_int_equal(gcall_sm_failed(&r.sm, &wait), SL_EDEADLINE);
    /* Beyond the cap of the server's wait worth waiting. */
    policy(&r, 5, 0);
    sl_verdict far = failure(1, 10 * 60 * 1000);
    assert_int_equal(gcall_sm_failed(&r.sm, &far), SL_EDEADLINE);
    assert_int_equal(r.sm.retries, 0);
}

static void test_server_wait_floor_and_seed(void **state) {
    (void)state;
    rec a, b;
    rec_init(&a, 42);
    rec_init(&b, 42);
    policy(&a, 5, 0);
    policy(&b, 5, 0);
    sl_verdict v = failure(1, 2000);
    long long da = gcall_sm_failed(&a.sm, &v), db = gcall_sm_failed(&b.sm, &v);
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

/* The call's time, on fixed instants: the machine reads no clock here. */
static void test_the_calls_time(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 1);
    int64_t by;
    long long left;
    /* No deadline: no bound on the slot, the attempt's own limit only. */
    assert_int_equal(gcall_sm_slot_left(&r.sm, 1000, &by, &left), 0);
    assert_int_equal(by, -1);
    assert_int_equal(left, -1);
    assert_int_equal(gcall_sm_attempt_ms(&r.sm, 1000), -1);
    r.o.attempt_timeout_ms = 2000;
    assert_int_equal(gcall_sm_attempt_ms(&r.sm, 1000), 2000);
    assert_true(gcall_sm_wait_fits(&r.sm, 1000, 1000000));
    assert_true(gcall_sm_within(&r.sm, 1 << 30));
    /* A deadline at 10 000: the slot by 9 950 (an attempt needs 50). */
    r.o.deadline_ms = 10000;
    assert_int_equal(gcall_sm_slot_left(&r.sm, 1000, &by, &left), 0);
    assert_int_equal(by, 9950);
    assert_int_equal(left, 8950);
    assert_int_equal(gcall_sm_slot_left(&r.sm, 9949, &by, &left), 0);
    assert_int_equal(left, 1);
    assert_int_equal(gcall_sm_slot_left(&r.sm, 9950, &by, &left), SL_EDEADLINE);
    assert_int_equal(by, 9950); /* still said: the deadline guard's moment */
    assert_int_equal(left, 0);
    /* A wait fits when an attempt still follows it. */
    assert_true(gcall_sm_wait_fits(&r.sm, 1000, 8950));
    assert_false(gcall_sm_wait_fits(&r.sm, 1000, 8951));
    /* An attempt: its own limit, cut to end 10 ms before the deadline,
     * and at least 1 ms. */
    assert_int_equal(gcall_sm_attempt_ms(&r.sm, 1000), 2000);
    assert_int_equal(gcall_sm_attempt_ms(&r.sm, 9000), 10000 - 9000 - GCALL_DEADLINE_MARGIN_MS);
    assert_int_equal(gcall_sm_attempt_ms(&r.sm, 9995), 1);
    r.o.attempt_timeout_ms = 0;
    assert_int_equal(gcall_sm_attempt_ms(&r.sm, 1000), 10000 - 1000 - GCALL_DEADLINE_MARGIN_MS);
    assert_true(gcall_sm_within(&r.sm, 10000));
    assert_false(gcall_sm_within(&r.sm, 10001));
}

/* The end of an attempt: settled once whatever follows; success ends
 * nothing; a failure that may be retried enters ASKING; else why not. */
static void test_attempt_end(void **state) {
    (void)state;
    rec r;
    rec_init(&r, 3);
    sl_verdict ok;
    sl_verdict_init(&ok);
    ok.cls = SL_CLASS_OK;
    ok.http_status = 200;
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &ok, 1), 0);
    assert_int_equal(r.settled, 1);
    assert_int_equal(r.settled_cls, SL_CLASS_OK);
    assert_int_equal(r.sm.state, SL_CALL_SENDING); /* the user ends it */
    assert_int_equal(r.entered[SL_CALL_ASKING], 0);

    sl_verdict v = failure(1, -1);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &v, 1), 1);
    assert_int_equal(r.settled, 2);
    assert_int_equal(r.settled_cls, SL_CLASS_SERVER_ERROR);
    assert_int_equal(r.sm.state, SL_CALL_ASKING);
    assert_int_equal(r.entered[SL_CALL_ASKING], 1);

    /* The user will not retry (a cancel after the send, observe mode). */
    rec_init(&r, 3);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &v, 0), SL_ECANCELED);
    assert_int_equal(r.settled, 1);
    assert_int_equal(r.entered[SL_CALL_ASKING], 0);
    /* The user cancels from its attempted hook, which the settle runs:
     * asked after the settle, so no retry either (asked before it, the
     * call took another slot and sent once more). */
    rec_init(&r, 3);
    r.stop_in_settle = 1;
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &v, 1), SL_ECANCELED);
    assert_int_equal(r.settled, 1);
    assert_int_equal(r.entered[SL_CALL_ASKING], 0);
    rec_init(&r, 3);
    gcall_sm_go(&r.sm, SL_CALL_SENDING);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &v, 0), SL_ECANCELED);
    /* Not retryable wins over the user's no. */
    sl_verdict fatal = failure(0, -1);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &fatal, 0), SL_EFATAL);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &fatal, 1), SL_EFATAL);
    assert_int_equal(r.settled, 3);
    /* ASKING could not begin: its error. */
    r.enter_rc = SL_EUNAVAIL;
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &v, 1), SL_EUNAVAIL);
    /* No time for another attempt. */
    rec_init(&r, 3);
    r.o.deadline_ms = sl_now_ms() + 1000;
    sl_verdict wait = failure(1, 5000);
    assert_int_equal(gcall_sm_attempt_end(&r.sm, &wait, 1), SL_EDEADLINE);
    assert_int_equal(r.settled, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_go_enters_the_step), cmocka_unit_test(test_retry_then_backoff_then_acquire),
        cmocka_unit_test(test_no_retry),           cmocka_unit_test(test_server_wait_floor_and_seed),
        cmocka_unit_test(test_stop_by_step),       cmocka_unit_test(test_pause_leads_to_its_step),
        cmocka_unit_test(test_the_calls_time),     cmocka_unit_test(test_attempt_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
