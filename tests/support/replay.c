#include "replay.h"

#include <stdlib.h>

void replay_init(replay *r) {
    r->ev = NULL;
    r->n = r->cap = 0;
}

void replay_free(replay *r) {
    free(r->ev);
    replay_init(r);
}

int replay_add(replay *r, double t_ms, double amount) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        replay_event *ev = realloc(r->ev, cap * sizeof(*ev));
        if (!ev) return -1;
        r->ev = ev;
        r->cap = cap;
    }
    r->ev[r->n] = (replay_event){t_ms, amount, r->n};
    r->n++;
    return 0;
}

static int by_time(const void *a, const void *b) {
    const replay_event *x = a, *y = b;
    if (x->t_ms != y->t_ms) return x->t_ms < y->t_ms ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

size_t replay_rejections(replay *r, double capacity, double rate_per_ms, double *first_reject) {
    /* Tolerance for float rounding of ms timestamps: a millionth of a unit. */
    const double eps = 1e-6;
    size_t rejected = 0;
    if (r->n == 0) return 0;
    qsort(r->ev, r->n, sizeof(*r->ev), by_time);
    double level = capacity, last = r->ev[0].t_ms;
    for (size_t i = 0; i < r->n; i++) {
        const replay_event *e = &r->ev[i];
        level += (e->t_ms - last) * rate_per_ms;
        if (level > capacity) level = capacity;
        last = e->t_ms;
        if (e->amount < 0) {
            level -= e->amount;
            if (level > capacity) level = capacity;
            continue;
        }
        double need = e->amount < capacity ? e->amount : capacity;
        if (level + eps * (need > 1 ? need : 1) >= need) {
            level -= e->amount;
        } else {
            if (rejected == 0 && first_reject) *first_reject = e->t_ms;
            rejected++;
        }
    }
    return rejected;
}

double replay_makespan(const replay *r) {
    double lo = 0, hi = 0;
    int seen = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->ev[i].amount <= 0) continue;
        if (!seen || r->ev[i].t_ms < lo) lo = r->ev[i].t_ms;
        if (!seen || r->ev[i].t_ms > hi) hi = r->ev[i].t_ms;
        seen = 1;
    }
    return hi - lo;
}
