/* Unit tests for lib/core/engine_turn.c: the calls waiting on one queue go
 * in turn by caller. Each test drives the module as the engine does
 * (engine.c: arrive, then push; engine_reserve.c / engine_group.c: pick
 * and remove; engine_call.c: served at the grant, unserve when the call
 * asks again, leave when it is freed) on a queue it builds by hand, and
 * checks the order of the picks exactly. The guards the fleet tests do
 * not reach (a call past its max wait first, a count given back, the
 * credit bound, a new caller's start, a shared connection's share, the
 * forgetting) each have a test here that fails without them. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_internal.h"

#define NCALLS 200

typedef struct fx {
    engine *e;
    uint64_t now; /* the clock the module is given (uv_now in the engine) */
    call_list l;
    engine_call calls[NCALLS];
    int used;
} fx;

static int setup(void **state) {
    fx *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    f->e = calloc(1, sizeof(*f->e));
    if (!f->e) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    engine__turn_free(f->e);
    free(f->e);
    free(f);
    return 0;
}

static void clock_set(fx *f, uint64_t ms) { f->now = ms; }

/* A call of caller arrives on queue l (engine_acquire's order: its turn,
 * then the push); age is the wire's, as the engine sets it at arrival. */
static engine_call *arrive_on(fx *f, call_list *l, uint64_t caller, uint64_t age) {
    assert_true(f->used < NCALLS);
    engine_call *c = &f->calls[f->used++];
    memset(c, 0, sizeof(*c));
    c->e = f->e;
    c->caller = caller;
    c->start_ms = f->now;
    c->age_ms = age;
    c->max_wait_ms = 600000;
    engine__turn_arrive(f->e, c, l, f->now);
    engine__list_push(l, c);
    return c;
}

static engine_call *arrive(fx *f, uint64_t caller, uint64_t age) { return arrive_on(f, &f->l, caller, age); }

/* The next call picked from l, taken off it and granted. */
static engine_call *take_from(fx *f, call_list *l) {
    engine_call *c = engine__list_next(f->e, l, f->now);
    assert_non_null(c);
    engine__list_remove(l, c);
    engine__turn_served(c);
    return c;
}

static engine_call *take(fx *f) { return take_from(f, &f->l); }

static void done(fx *f, engine_call *c) { engine__turn_leave(c, f->now); }

/* A caller served one call after another, each answered before it asks
 * again: n calls. */
static void serve_serially(fx *f, uint64_t caller, int n) {
    for (int i = 0; i < n; i++) {
        engine_call *c = arrive(f, caller, (uint64_t)f->used);
        assert_ptr_equal(take(f), c);
        done(f, c);
    }
}

/* Two callers; B's answers come back faster, so B has asked again before
 * A's answer is in. A's next call goes ahead of B's waiting one and takes
 * its older age; the call passed gets A's. */
static void test_fewest_served_goes_first(void **state) {
    fx *f = *state;
    engine_call *a1 = arrive(f, 1, 10), *b1 = arrive(f, 2, 11);
    assert_ptr_equal(take(f), a1); /* a tie: by arrival */
    assert_ptr_equal(take(f), b1);
    done(f, b1);
    engine_call *b2 = arrive(f, 2, 20);
    assert_ptr_equal(take(f), b2);
    done(f, b2);
    engine_call *b3 = arrive(f, 2, 30);
    done(f, a1);
    engine_call *a2 = arrive(f, 1, 40);
    assert_int_equal(f->e->stats.turns_passed, 0);
    assert_ptr_equal(take(f), a2); /* A served once, B twice */
    assert_int_equal(f->e->stats.turns_passed, 1);
    assert_int_equal(a2->age_ms, 30); /* the oldest age it passed */
    assert_int_equal(b3->age_ms, 40);
    assert_ptr_equal(take(f), b3);
    assert_int_equal(f->e->stats.turns_passed, 1);
}

/* A call with no caller named goes with the fewest, by its place: it is
 * never passed by a caller's call behind it, nor passes one. */
static void test_unnamed_calls_go_by_arrival(void **state) {
    fx *f = *state;
    serve_serially(f, 1, 3);
    engine_call *x = arrive(f, 0, 100), *a = arrive(f, 1, 101), *y = arrive(f, 0, 102);
    assert_ptr_equal(take(f), x);
    assert_ptr_equal(take(f), a);
    assert_ptr_equal(take(f), y);
    assert_int_equal(f->e->stats.turns_passed, 0);
}

/* A call past its max wait is picked first, whoever its caller, so that
 * it is decided (shed) now; so is a group call past its deadline. */
static void test_overdue_call_goes_first(void **state) {
    fx *f = *state;
    clock_set(f, 1000);
    serve_serially(f, 2, 5); /* A starts level with B */
    engine_call *a = arrive(f, 1, 1000), *b = arrive(f, 2, 1001);
    b->max_wait_ms = 500;
    clock_set(f, 1499);
    assert_ptr_equal(engine__list_next(f->e, &f->l, f->now), a);
    clock_set(f, 1501);
    assert_ptr_equal(take(f), b);
    assert_ptr_equal(take(f), a);

    /* A group call: its deadline decides, not its max wait. */
    struct gq *dummy = (struct gq *)&f->l;
    call_route r = {.gq = dummy, .deadline = 2000};
    a = arrive(f, 1, 1600);
    b = arrive(f, 2, 1601);
    b->route = &r;
    assert_ptr_equal(engine__list_next(f->e, &f->l, 1999), a);
    assert_ptr_equal(engine__list_next(f->e, &f->l, 2000), b);
}

/* A call that gives its grant back and asks again (engine_call.c's
 * call_reask: at the head of its queue) gives back what its grant added
 * to its caller's count: it keeps its turn. B has two calls out, so each
 * of its grants counts a half. Counted twice, A (at 2) would be above B
 * (1.5) and B's call would go first. */
static void test_asking_again_gives_the_count_back(void **state) {
    fx *f = *state;
    engine_call *b1 = arrive(f, 2, 1), *b2 = arrive(f, 2, 2), *a1 = arrive(f, 1, 3);
    assert_ptr_equal(take(f), b1); /* all at 1: by arrival; B at 1.5 */
    assert_ptr_equal(take(f), a1); /* A at 2 */
    engine__turn_unserve(a1);      /* a1 asks again: A at 1 */
    engine__list_push_front(&f->l, a1);
    assert_ptr_equal(take(f), a1); /* A at 2 */
    assert_ptr_equal(take(f), b2); /* B at 2 */
    /* Counted once a call: a grant given twice without a give-back
     * counts once. Counted again, A (at 3) would let B's call pass. */
    double inc = a1->turn_inc;
    assert_true(inc > 0);
    engine__turn_served(a1);
    assert_true(a1->turn_inc == inc);
    engine_call *a2 = arrive(f, 1, 4), *b3 = arrive(f, 2, 5);
    assert_ptr_equal(take(f), a2); /* A 2, B 2: by arrival */
    assert_ptr_equal(take(f), b3);
}

/* A caller long behind (its one call out while the other was served
 * twenty times) goes first for a few calls, not for twenty: its count is
 * brought to ENGINE_TURN_CREDIT below the most served waiting. */
static void test_credit_is_bounded(void **state) {
    fx *f = *state;
    engine_call *a = arrive(f, 1, 0);
    assert_ptr_equal(take(f), a);
    serve_serially(f, 2, 20);
    engine_call *b = arrive(f, 2, 1000);
    int ahead = 0;
    for (int i = 0; i < 30; i++) {
        done(f, a);
        a = arrive(f, 1, 2000 + (uint64_t)i);
        engine_call *c = take(f);
        if (c == b) break;
        assert_ptr_equal(c, a);
        ahead++;
    }
    assert_int_equal(ahead, ENGINE_TURN_CREDIT);
}

/* A new caller starts one above the fewest waiting: last in the round,
 * behind a caller that keeps its connection and has not had its turn in
 * this round yet. Started at the fewest, C would tie with B and go first
 * by arrival. */
static void test_new_caller_starts_behind(void **state) {
    fx *f = *state;
    engine_call *a1 = arrive(f, 1, 0), *b1 = arrive(f, 2, 1);
    assert_ptr_equal(take(f), a1);
    assert_ptr_equal(take(f), b1); /* A and B at 2 */
    done(f, a1);
    engine_call *a2 = arrive(f, 1, 2);
    assert_ptr_equal(take(f), a2);     /* the fewest waiting was 2; A at 3 */
    engine_call *c1 = arrive(f, 3, 3); /* starts at 3 */
    done(f, b1);
    engine_call *b2 = arrive(f, 2, 4); /* B at 2 */
    assert_ptr_equal(take(f), b2);
    assert_ptr_equal(take(f), c1);
}

/* A connection that carries many callers' calls at once (ioredis) counts
 * each call as a share of its calls out: four calls out, a quarter each,
 * so it is served four times a round beside a caller with one. */
static void test_shared_connection_counts_a_share(void **state) {
    fx *f = *state;
    engine_call *m[4];
    for (int i = 0; i < 4; i++) m[i] = arrive(f, 7, (uint64_t)i);
    engine_call *s = arrive(f, 8, 10);
    assert_ptr_equal(take(f), m[0]); /* all at 1: by arrival; M at 1.25 */
    assert_ptr_equal(take(f), s);    /* S at 2 */
    done(f, s);
    s = arrive(f, 8, 11);
    assert_ptr_equal(take(f), m[1]); /* 1.5 */
    assert_ptr_equal(take(f), m[2]); /* 1.75 */
    assert_ptr_equal(take(f), m[3]); /* 2 */
    assert_ptr_equal(take(f), s);
}

/* A caller with no call out is forgotten ENGINE_TURN_FORGET_MS after its
 * last (the table is swept at most once in that time); one with a call
 * out is kept however long it waits. */
static void test_idle_callers_are_forgotten(void **state) {
    fx *f = *state;
    clock_set(f, 0);
    serve_serially(f, 1, 3); /* A's last at 0 */
    arrive(f, 2, 0);
    assert_int_equal(f->e->nturns, 2);
    clock_set(f, ENGINE_TURN_FORGET_MS - 1);
    arrive(f, 3, 0);
    assert_int_equal(f->e->nturns, 3); /* A kept at 9 999 ms */
    clock_set(f, ENGINE_TURN_FORGET_MS);
    arrive(f, 4, 0);
    assert_int_equal(f->e->nturns, 3); /* A forgotten at 10 000; B and C wait */
    clock_set(f, 5 * ENGINE_TURN_FORGET_MS);
    arrive(f, 5, 0);
    assert_int_equal(f->e->nturns, 4); /* B, C, D wait, however long */
}

/* A group's call moved to a member's queue keeps its caller's count of
 * the group's queue; served there beside the member's callers, it is not
 * lifted to their counts (their scale says nothing of the group's).
 * Lifted (to 4 below B's 21), A would no longer pass D on the group's
 * queue. */
static void test_moved_call_keeps_its_queue_scale(void **state) {
    fx *f = *state;
    call_list member = {0};
    serve_serially(f, 4, 2); /* D at 3 on the group's queue */
    for (int i = 0; i < 20; i++) {
        engine_call *b = arrive_on(f, &member, 2, (uint64_t)i);
        assert_ptr_equal(take_from(f, &member), b);
        done(f, b);
    }
    engine_call *keep = arrive_on(f, &member, 2, 100); /* B at 21 waits on the member */
    engine_call *a = arrive(f, 1, 200);                /* A: new on the group's queue, at 3 */
    engine__list_remove(&f->l, a);
    engine__list_push_front(&member, a);        /* moved to the member */
    assert_ptr_equal(take_from(f, &member), a); /* no caller of the member's: with the fewest */
    serve_serially(f, 4, 3);                    /* D at 6 while A's call is out */
    done(f, a);
    engine_call *d = arrive(f, 4, 300), *a2 = arrive(f, 1, 301);
    assert_ptr_equal(take(f), a2); /* A at 4, D at 6 */
    assert_ptr_equal(take(f), d);
    (void)keep;
}

/* A pick compares the first ENGINE_TURN_SCAN calls: a caller behind
 * deeper in the queue waits by arrival until it is within them. */
static void test_scan_is_bounded(void **state) {
    fx *f = *state;
    engine_call *a = arrive(f, 1, 0);
    assert_ptr_equal(take(f), a);
    serve_serially(f, 2, 3);
    engine_call *head = NULL;
    for (int i = 0; i < ENGINE_TURN_SCAN; i++) {
        engine_call *c = arrive(f, 2, 100 + (uint64_t)i);
        if (!head) head = c;
    }
    done(f, a);
    a = arrive(f, 1, 1000);
    assert_ptr_equal(engine__list_next(f->e, &f->l, f->now), head);
    engine__list_remove(&f->l, head);
    assert_ptr_equal(engine__list_next(f->e, &f->l, f->now), a);
}

/* With no caller known, the head, ages as they came: the engine without a
 * daemon names none. (A fast path: the scan would find no caller either.) */
static void test_no_callers_is_arrival_order(void **state) {
    fx *f = *state;
    engine_call *x = arrive(f, 0, 5), *y = arrive(f, 0, 1);
    assert_int_equal(f->e->nturns, 0);
    assert_ptr_equal(take(f), x);
    assert_ptr_equal(take(f), y);
    assert_int_equal(x->age_ms, 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fewest_served_goes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unnamed_calls_go_by_arrival, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overdue_call_goes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_asking_again_gives_the_count_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_caller_starts_behind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_connection_counts_a_share, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_callers_are_forgotten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_moved_call_keeps_its_queue_scale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_callers_is_arrival_order, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
