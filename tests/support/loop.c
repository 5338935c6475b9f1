#define _POSIX_C_SOURCE 200809L
#include "loop.h"

static void on_deadline(uv_timer_t *t) { uv_stop(t->loop); }

static void close_timer(uv_loop_t *loop, uv_timer_t *t) {
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    uv_run(loop, UV_RUN_NOWAIT); /* finishes the close: t may go out of scope */
}

int loop_run_until(uv_loop_t *loop, int (*done)(void *arg), void *arg, uint64_t ms) {
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, on_deadline, ms, 0);
    while (!done(arg)) {
        if (uv_run(loop, UV_RUN_ONCE) == 0) break;
        if (!uv_is_active((uv_handle_t *)&t)) break;
    }
    close_timer(loop, &t);
    return done(arg);
}

void loop_run_for(uv_loop_t *loop, uint64_t ms) {
    uv_timer_t t;
    uv_timer_init(loop, &t);
    uv_timer_start(&t, on_deadline, ms, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    close_timer(loop, &t);
}
