/* costmodel: how many items one script call may carry so that it stays
 * under a time budget (redis.max_script_ms), learned from the calls' own
 * times. Redis runs one script at a time, so a call's time is every other
 * client's wait: the engine sizes each reserve batch by costmodel_cap()
 * and feeds each reply's time back with costmodel_observe(). Pure: no
 * I/O, no allocation, no clock; one model per deployment and per group
 * queue (their items cost differently).
 *
 * A call of n items is modelled as fixed + n x item µs, from the last
 * COSTMODEL_WINDOW calls, with medians so that a call stretched by
 * something else (Redis descheduled on a busy host, a fork) moves
 * neither figure:
 *   - fixed, the per-call part, is half the intercept of a Theil-Sen fit
 *     (the median of the slopes between calls of clearly different sizes,
 *     the median of the intercepts; at most the window's quickest call)
 *     when there are enough such pairs, else the last figure (0 at first):
 *     deliberately low, so that the per-item
 *     part errs high. With any fixed part between 0 and the true one, the
 *     time a call of n items predicts for a larger size overestimates
 *     that size's, so growing never overshoots: the batch converges from
 *     below to the size whose time is the budget, without oscillating.
 *   - item, the per-item part, is the median of (time - fixed) / n over
 *     the last COSTMODEL_MEDIAN calls: a mix turning costly (deferrals
 *     are cheap, grants are not) narrows the batch after a few calls, and
 *     one or two stretched calls do not. */
#ifndef SLUICE_COSTMODEL_H
#define SLUICE_COSTMODEL_H

#include <stddef.h>

/* Items of the first call, before anything was learned: small enough to
 * stay under a 1 ms budget with any of today's scripts on a slow node. */
#define COSTMODEL_FIRST_CAP 16

#define COSTMODEL_WINDOW 8
#define COSTMODEL_MEDIAN 5

typedef struct costmodel {
    double fixed_us;            /* per call (a low estimate), µs */
    double item_us;             /* per item, µs; 0 until the first call */
    double t[COSTMODEL_WINDOW]; /* the last calls' times (µs), a ring */
    size_t n[COSTMODEL_WINDOW]; /* and their items */
    double last_us;             /* the last call's time, µs */
    size_t last_n;              /* and its items */
    unsigned long long calls;   /* calls observed */
} costmodel;

/* Nothing learned yet (all zero, as calloc leaves it). */
void costmodel_init(costmodel *m);

/* One call of n items took us µs (n >= 1, us >= 0; anything else is
 * ignored). */
void costmodel_observe(costmodel *m, size_t n, double us);

/* The items the next call may carry so that it takes at most budget_us:
 * between 1 and max (max >= 1). budget_us <= 0: no bound (max).
 * COSTMODEL_FIRST_CAP (at most max) before the first observation. */
size_t costmodel_cap(const costmodel *m, double budget_us, size_t max);

#endif
