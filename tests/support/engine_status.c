/* engine_status: see engine_status.h. */
#define _POSIX_C_SOURCE 200809L
#include "engine_status.h"

#include <stdio.h>
#include <string.h>

#include "loop.h"
#include "sluice.h"

typedef struct status_q {
    const char *field;
    char value[128];
    int answered, found;
} status_q;

static void on_status(void *arg, int status, size_t n, const char *const *fields, const char *const *values) {
    status_q *q = arg;
    q->answered = 1;
    for (size_t i = 0; status == SL_OK && i < n; i++)
        if (!strcmp(fields[i], q->field)) {
            snprintf(q->value, sizeof(q->value), "%s", values[i]);
            q->found = 1;
        }
}

static int answered(void *arg) { return ((status_q *)arg)->answered; }

int engine_status_field(uv_loop_t *loop, engine *e, const char *dep, const char *field, char *out, size_t n) {
    status_q q = {.field = field};
    if (engine_status(e, dep, on_status, &q) == 0 && !loop_run_until(loop, answered, &q, 3000)) {
        /* The engine still holds &q: an answer that did not come in time
         * is waited for without a bound (ctest's timeout ends a hang)
         * rather than leaving it a dangling pointer. */
        fprintf(stderr, "engine_status_field: no STATUS %s answer within 3 s\n", dep);
        while (!q.answered) uv_run(loop, UV_RUN_ONCE);
    }
    snprintf(out, n, "%s", q.value);
    return q.found;
}

int engine_status_wait(uv_loop_t *loop, engine *e, const char *dep, const char *field, const char *want, uint64_t ms,
                       char *last, size_t n) {
    char v[128] = "";
    uv_update_time(loop);
    uint64_t end = uv_now(loop) + ms;
    for (;;) {
        engine_status_field(loop, e, dep, field, v, sizeof(v));
        if (!strcmp(v, want)) break;
        if (uv_now(loop) >= end) {
            if (last) snprintf(last, n, "%s", v);
            return 0;
        }
        loop_run_for(loop, 10);
    }
    if (last) snprintf(last, n, "%s", v);
    return 1;
}
