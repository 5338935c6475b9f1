/* test_uvsim: the libuv stand-in behaves as libuv does where lib/core can
 * tell: timers fire in (due time, start order) on the loop's cached ms
 * clock, repeat from their firing, and report their due time; a loop turn
 * runs timers, idle, poll, check, then close callbacks (libuv's
 * uv_run order); loops due at one instant each turn once, in an order
 * drawn from the seed; a loop turns only when it has something to do; a frozen
 * loop runs its overdue timers in one turn when it thaws; poll handles
 * report WRITABLE when asked and READABLE when woken with bytes waiting;
 * the virtual clock drives uv_now, uv_hrtime and uvsim_clock_gettime; a
 * call into a loop from outside it sees the time it runs at. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "uvsim.h"

#define T0 1000000000ull /* the virtual clock's start, us */

static char trace[512];
static void note(const char *fmt, ...) {
    size_t n = strlen(trace);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trace + n, sizeof(trace) - n, fmt, ap);
    va_end(ap);
}

static void on_timer(uv_timer_t *t) { note("%s@%llu ", (const char *)t->data, (unsigned long long)uv_now(t->loop)); }

static void test_timer_order(void **state) {
    uv_loop_t loop;
    uv_timer_t a, b, c, d;
    trace[0] = '\0';
    uvsim_reset(T0, 1);
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_timer_t *ts[] = {&a, &b, &c, &d};
    const char *names[] = {"a", "b", "c", "d"};
    const uint64_t after[] = {10, 10, 5, 0};
    for (int i = 0; i < 4; i++) {
        uv_timer_init(&loop, ts[i]);
        ts[i]->data = (void *)names[i];
        uv_timer_start(ts[i], on_timer, after[i], 0);
    }
    assert_int_equal(uv_timer_get_due_in(&a), 10);
    assert_int_equal(uvsim_run_until(T0 + 20000), 0);
    /* uv_now is the loop's ms clock: T0 is 1000000 ms. */
    assert_string_equal(trace, "d@1000000 c@1000005 a@1000010 b@1000010 ");
    assert_int_equal(uv_is_active((uv_handle_t *)&a), 0);
    for (int i = 0; i < 4; i++) uv_close((uv_handle_t *)ts[i], NULL);
    assert_int_equal(uvsim_run_until(T0 + 20000), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Loops due at one instant: each turns once, in an order drawn from the
 * seed (the same seed, the same order; the orders differ across seeds). */
static void tie_order(uint64_t seed, char *out, size_t n) {
    uv_loop_t loops[4];
    uv_timer_t ts[4];
    const char *names[] = {"a", "b", "c", "d"};
    trace[0] = '\0';
    uvsim_reset(T0, seed);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(uv_loop_init(&loops[i]), 0);
        uv_timer_init(&loops[i], &ts[i]);
        ts[i].data = (void *)names[i];
        uv_timer_start(&ts[i], on_timer, 7, 0);
    }
    assert_int_equal(uvsim_run_until(T0 + 20000), 0);
    snprintf(out, n, "%s", trace);
    for (int i = 0; i < 4; i++) uv_close((uv_handle_t *)&ts[i], NULL);
    assert_int_equal(uvsim_run_until(T0 + 20000), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(uv_loop_close(&loops[i]), 0);
}

static void test_tie_order(void **state) {
    char first[64], again[64], other[64];
    int differs = 0;
    tie_order(1, first, sizeof(first));
    tie_order(1, again, sizeof(again));
    assert_string_equal(first, again);
    for (int k = 0; k < 4; k++) /* each of the four exactly once */
        assert_non_null(strstr(first, (const char *[]){"a@1000007", "b@1000007", "c@1000007", "d@1000007"}[k]));
    assert_int_equal(strlen(first), 4 * strlen("a@1000007 "));
    for (uint64_t seed = 2; seed < 10; seed++) {
        tie_order(seed, other, sizeof(other));
        differs |= strcmp(first, other) != 0;
    }
    assert_true(differs);
}

static void test_timer_repeat(void **state) {
    uv_loop_t loop;
    uv_timer_t t;
    trace[0] = '\0';
    uvsim_reset(T0, 1);
    uv_loop_init(&loop);
    uv_timer_init(&loop, &t);
    t.data = "r";
    uv_timer_start(&t, on_timer, 7, 7);
    assert_int_equal(uvsim_run_until(T0 + 25000), 0);
    assert_string_equal(trace, "r@1000007 r@1000014 r@1000021 ");
    /* The loop's clock is the time of its last turn (21 ms); due at 28. */
    assert_int_equal(uv_timer_get_due_in(&t), 7);
    assert_int_equal(uv_now(&loop), 1000021);
    assert_int_equal(uvsim_now_us(), T0 + 25000);
    uv_close((uv_handle_t *)&t, NULL);
    uvsim_run_until(T0 + 25000);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static uv_idle_t idle;
static uv_check_t check;
static void on_idle(uv_idle_t *h) {
    note("idle ");
    uv_idle_stop(h);
}
static void on_closed(uv_handle_t *h) { note("closed:%s ", (const char *)h->data); }
static void on_check(uv_check_t *h) {
    note("check ");
    uv_check_stop(h);
    uv_close((uv_handle_t *)&idle, on_closed);
    uv_close((uv_handle_t *)&check, on_closed);
}
static void on_phase_timer(uv_timer_t *t) {
    note("timer ");
    uv_idle_start(&idle, on_idle);
    uv_check_start(&check, on_check);
}

static void test_phases(void **state) {
    uv_loop_t loop;
    uv_timer_t t;
    trace[0] = '\0';
    uvsim_reset(T0, 1);
    uv_loop_init(&loop);
    uv_timer_init(&loop, &t);
    uv_idle_init(&loop, &idle);
    uv_check_init(&loop, &check);
    idle.data = "idle";
    check.data = "check";
    uv_timer_start(&t, on_phase_timer, 3, 0);
    assert_int_equal(uvsim_run_until(T0 + 10000), 0);
    /* One turn at 3 ms: timers, idle, (poll), check, then the close
     * callbacks, the last closed first. */
    assert_string_equal(trace, "timer idle check closed:check closed:idle ");
    assert_int_equal(uvsim_loop_handles(&loop), 1);
    uv_close((uv_handle_t *)&t, NULL);
    uvsim_run_until(T0 + 10000);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static int checks_run;
static void count_check(uv_check_t *h) { checks_run++; }

/* A loop with only a check handle sleeps (libuv blocks in its poll): the
 * check runs only when the loop wakes for something else. */
static void test_loop_sleeps(void **state) {
    uv_loop_t a, b;
    uv_timer_t t;
    uv_check_t ck;
    trace[0] = '\0';
    checks_run = 0;
    uvsim_reset(T0, 1);
    uv_loop_init(&a);
    uv_loop_init(&b);
    uv_timer_init(&a, &t);
    t.data = "t";
    uv_timer_start(&t, on_timer, 5, 0);
    uv_check_init(&b, &ck);
    uv_check_start(&ck, count_check);
    assert_int_equal(uvsim_run_until(T0 + 10000), 0);
    assert_string_equal(trace, "t@1000005 ");
    assert_int_equal(checks_run, 0);
    uv_timer_t tb;
    uv_timer_init(&b, &tb);
    tb.data = "tb";
    uv_timer_start(&tb, on_timer, 1, 0);
    assert_int_equal(uvsim_run_until(T0 + 20000), 0);
    assert_int_equal(checks_run, 1); /* one turn of b, at 11 ms */
    uv_close((uv_handle_t *)&t, NULL);
    uv_close((uv_handle_t *)&tb, NULL);
    uv_close((uv_handle_t *)&ck, NULL);
    uvsim_run_until(T0 + 20000);
    assert_int_equal(uv_loop_close(&a), 0);
    assert_int_equal(uv_loop_close(&b), 0);
}

static void test_freeze(void **state) {
    uv_loop_t loop;
    uv_timer_t a, b;
    trace[0] = '\0';
    uvsim_reset(T0, 1);
    uv_loop_init(&loop);
    uv_timer_init(&loop, &a);
    uv_timer_init(&loop, &b);
    a.data = "a";
    b.data = "b";
    uv_timer_start(&a, on_timer, 10, 0);
    uv_timer_start(&b, on_timer, 20, 0);
    uvsim_run_until(T0 + 5000);
    uvsim_loop_freeze(&loop, T0 + 50000);
    assert_int_equal(uvsim_run_until(T0 + 49999), 0);
    assert_string_equal(trace, "");
    assert_int_equal(uvsim_run_until(T0 + 60000), 0);
    /* Both late, in one turn, in due order. */
    assert_string_equal(trace, "a@1000050 b@1000050 ");
    uv_close((uv_handle_t *)&a, NULL);
    uv_close((uv_handle_t *)&b, NULL);
    uvsim_run_until(T0 + 60000);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static int sv[2]; /* a socket pair: the poll handle's end, and the peer's */

static void on_poll(uv_poll_t *h, int status, int events) {
    note("%s%s@%llu ", events & UV_READABLE ? "R" : "", events & UV_WRITABLE ? "W" : "",
         (unsigned long long)(uvsim_now_us() - T0));
    if (events & UV_WRITABLE) uv_poll_start(h, UV_READABLE, on_poll);
    if (events & UV_READABLE) {
        char buf[16];
        ssize_t n = read(sv[0], buf, sizeof(buf));
        assert_true(n > 0);
    }
}

static void wake(void *arg) {
    uv_poll_t *h = arg;
    assert_int_equal(write(sv[1], "x", 1), 1);
    uvsim_poll_wake(h);
}

static void test_poll(void **state) {
    uv_loop_t loop;
    uv_poll_t p;
    trace[0] = '\0';
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    uvsim_reset(T0, 1);
    uv_loop_init(&loop);
    uv_poll_init(&loop, &p, sv[0]);
    uv_poll_start(&p, UV_READABLE | UV_WRITABLE, on_poll);
    uvsim_at(T0 + 1500, wake, &p);
    assert_int_equal(uvsim_run_until(T0 + 5000), 0);
    /* WRITABLE at once; READABLE when woken with a byte waiting (1.5 ms). */
    assert_string_equal(trace, "W@0 R@1500 ");
    assert_int_equal(uv_now(&loop), 1000001);
    assert_int_equal(uv_hrtime(), (T0 + 5000) * 1000);
    struct timespec ts;
    uvsim_clock_gettime(CLOCK_REALTIME, &ts);
    assert_int_equal(ts.tv_sec, (T0 + 5000) / 1000000);
    assert_int_equal(ts.tv_nsec / 1000, (T0 + 5000) % 1000000);
    uv_close((uv_handle_t *)&p, NULL);
    uvsim_run_until(T0 + 5000);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(sv[0]);
    close(sv[1]);
}

/* A call into a loop from outside it (an at-function: a caller's call into
 * its agent, an answer's settle) sees the time it runs at, as libuv's
 * callbacks see the time its poll returned at: uv_now, and a timer
 * started there is due from it. A frozen loop keeps its time. */
static uv_loop_t *outside_loop;
static uv_timer_t outside_timer;
static void from_outside(void *arg) {
    (void)arg;
    note("now@%llu ", (unsigned long long)uv_now(outside_loop));
    uv_timer_start(&outside_timer, on_timer, 3, 0);
}

static void test_outside_sees_now(void **state) {
    uv_loop_t loop, cold;
    uv_timer_t far;
    trace[0] = '\0';
    uvsim_reset(T0, 1);
    uv_loop_init(&loop);
    uv_loop_init(&cold);
    uv_timer_init(&loop, &far);
    far.data = "far";
    uv_timer_start(&far, on_timer, 1000, 0); /* the loop sleeps till then */
    uv_timer_init(&loop, &outside_timer);
    outside_timer.data = "t";
    outside_loop = &loop;
    uvsim_loop_freeze(&cold, T0 + 500000);
    uvsim_run_until(T0 + 2000);
    uvsim_at(T0 + 48000, from_outside, NULL);
    assert_int_equal(uvsim_run_until(T0 + 100000), 0);
    /* Dated at its last turn (1 000 000 ms) it would read 1000000 and its
     * timer would fire at 1000003. */
    assert_string_equal(trace, "now@1000048 t@1000051 ");
    outside_loop = &cold;
    uvsim_at(T0 + 200000, from_outside, NULL);
    trace[0] = '\0';
    assert_int_equal(uvsim_run_until(T0 + 200000), 0);
    assert_string_equal(trace, "now@1000000 ");
    uv_close((uv_handle_t *)&far, NULL);
    uv_close((uv_handle_t *)&outside_timer, NULL);
    uvsim_loop_freeze(&cold, 0);
    uvsim_run_until(T0 + 600000);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(uv_loop_close(&cold), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_order),  cmocka_unit_test(test_tie_order),
        cmocka_unit_test(test_timer_repeat), cmocka_unit_test(test_phases),
        cmocka_unit_test(test_loop_sleeps),  cmocka_unit_test(test_freeze),
        cmocka_unit_test(test_poll),         cmocka_unit_test(test_outside_sees_now),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
