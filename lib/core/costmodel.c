/* costmodel: batch sizes under a time budget, learned. See costmodel.h. */
#include "costmodel.h"

#include <math.h>
#include <string.h>

/* Weight of the past in the fit and the mean, per call: about the last
 * five calls. */
#define COSTMODEL_DECAY 0.8
/* The fit needs sizes that differ: a standard deviation of at least this
 * share of the mean size (and of one item). A backlog sends batches of
 * about one size, whose times say little about the split; the figure
 * learned while the size still moved is kept then. */
#define COSTMODEL_MIN_SPREAD 0.2

void costmodel_init(costmodel *m) { memset(m, 0, sizeof(*m)); }

void costmodel_observe(costmodel *m, size_t n, double us) {
    if (n < 1 || !(us >= 0) || isinf(us)) return;
    double dn = (double)n;
    m->w = m->w * COSTMODEL_DECAY + 1.0;
    m->sn = m->sn * COSTMODEL_DECAY + dn;
    m->snn = m->snn * COSTMODEL_DECAY + dn * dn;
    m->st = m->st * COSTMODEL_DECAY + us;
    m->snt = m->snt * COSTMODEL_DECAY + dn * us;
    m->calls++;
    m->last_us = us;
    m->last_n = n;
    /* The per-call part: half the fit's intercept, when the recent calls
     * had different sizes and the fit is sane (both parts positive). */
    if (m->w >= 3.0) {
        double mn = m->sn / m->w, mt = m->st / m->w;
        double var = m->snn / m->w - mn * mn;
        double sd_min = COSTMODEL_MIN_SPREAD * mn > 1.0 ? COSTMODEL_MIN_SPREAD * mn : 1.0;
        if (var >= sd_min * sd_min) {
            double b = (m->snt / m->w - mn * mt) / var;
            double a = mt - b * mn;
            if (b > 0 && a > 0) m->fixed_us = 0.5 * a;
        }
    }
    /* The per-item figure: the larger of the recent calls' (their weighted
     * mean call) and this call's, each after the per-call part (at most
     * half the call, so that a cheap call cannot make it negative). The
     * mean keeps one lucky call from widening the batch; this call's alone
     * narrows it at once when the mix turns costly. */
    double mn = m->sn / m->w, mt = m->st / m->w;
    double f = m->fixed_us < 0.5 * mt ? m->fixed_us : 0.5 * mt;
    double mean_item = (mt - f) / mn;
    f = m->fixed_us < 0.5 * us ? m->fixed_us : 0.5 * us;
    double item = (us - f) / dn;
    m->item_us = item > mean_item ? item : mean_item;
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
