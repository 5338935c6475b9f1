/* costmodel: batch sizes under a time budget, learned. See costmodel.h. */
#include "costmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Two calls' sizes differ clearly when by this share of the larger (and
 * by one item at least): only such pairs give the fit a slope. */
#define COSTMODEL_MIN_SPREAD 0.2
/* Pairs the fit needs (of the 28 a full window has). */
#define COSTMODEL_MIN_PAIRS 3

void costmodel_init(costmodel *m) { memset(m, 0, sizeof(*m)); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t k) {
    qsort(v, k, sizeof(*v), cmp_double);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

/* The per-call part from the window: half a Theil-Sen intercept, or -1
 * when the sizes do not differ enough or the fit is not sane. */
static double fit_fixed(const costmodel *m, size_t k) {
    double slopes[COSTMODEL_WINDOW * (COSTMODEL_WINDOW - 1) / 2];
    size_t np = 0;
    for (size_t i = 0; i < k; i++)
        for (size_t j = i + 1; j < k; j++) {
            double ni = (double)m->n[i], nj = (double)m->n[j];
            double d = fabs(nj - ni), big = ni > nj ? ni : nj;
            if (d < 1.0 || d < COSTMODEL_MIN_SPREAD * big) continue;
            slopes[np++] = (m->t[j] - m->t[i]) / (nj - ni);
        }
    if (np < COSTMODEL_MIN_PAIRS) return -1;
    double b = median(slopes, np);
    if (!(b > 0)) return -1;
    double icpt[COSTMODEL_WINDOW];
    for (size_t i = 0; i < k; i++) icpt[i] = m->t[i] - b * (double)m->n[i];
    double a = median(icpt, k);
    if (!(a > 0)) return -1;
    /* Never above half the window's quickest call, which is at least the
     * true per-call part: stretched calls cannot raise it. */
    double quick = m->t[0];
    for (size_t i = 1; i < k; i++)
        if (m->t[i] < quick) quick = m->t[i];
    return 0.5 * (a < quick ? a : quick);
}

void costmodel_observe(costmodel *m, size_t n, double us) {
    if (n < 1 || !(us >= 0) || isinf(us)) return;
    size_t at = (size_t)(m->calls % COSTMODEL_WINDOW);
    m->t[at] = us;
    m->n[at] = n;
    m->calls++;
    m->last_us = us;
    m->last_n = n;
    size_t k = m->calls < COSTMODEL_WINDOW ? (size_t)m->calls : COSTMODEL_WINDOW;
    double f = fit_fixed(m, k);
    if (f >= 0) m->fixed_us = f;
    /* And at most half the window's quickest call on every call, not only
     * when a fit succeeds: a fit made while Redis was stretched (every
     * call several times its cost) could otherwise set a per-call part
     * near the budget, cap the batches at 1, and with only 1-item calls
     * left in the window no later fit could ever lower it. */
    double quick = m->t[0];
    for (size_t i = 1; i < k; i++)
        if (m->t[i] < quick) quick = m->t[i];
    if (m->fixed_us > 0.5 * quick) m->fixed_us = 0.5 * quick;
    /* Per item: the median over the newest calls, each after the per-call
     * part (at most half the call, so a cheap call cannot go negative). */
    size_t km = k < COSTMODEL_MEDIAN ? k : COSTMODEL_MEDIAN;
    double items[COSTMODEL_MEDIAN];
    for (size_t i = 0; i < km; i++) {
        size_t j = (size_t)((m->calls - 1 - i) % COSTMODEL_WINDOW);
        double fx = m->fixed_us < 0.5 * m->t[j] ? m->fixed_us : 0.5 * m->t[j];
        items[i] = (m->t[j] - fx) / (double)m->n[j];
    }
    m->item_us = median(items, km);
}

size_t costmodel_cap(const costmodel *m, double budget_us, size_t max) {
    if (max < 1) max = 1;
    if (!(budget_us > 0)) return max;
    if (m->item_us <= 0) return max < COSTMODEL_FIRST_CAP ? max : COSTMODEL_FIRST_CAP;
    double c = floor((budget_us - m->fixed_us) / m->item_us);
    if (!(c >= 1)) return 1;
    if (c >= (double)max) return max;
    return (size_t)c;
}
