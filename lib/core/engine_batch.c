/* engine_batch: how many items a reserve or settle call may carry so that
 * it holds Redis under redis.max_script_ms, learned per deployment (its
 * reserves and its settles apart) and per group queue (lib/core/costmodel.h)
 * from the calls' own times.
 *
 * The time: the scripts, asked with a last ARGV "@timed" (WIRE_TIMED), append
 * their own time in µs to the reply (TIME at their start and end; TIME is
 * gettimeofday and runs during a script). What that leaves out (the script
 * text's definitions, the arguments, the reply's encoding) is why a call
 * aims at ENGINE_SCRIPT_BUDGET_SHARE of the bound. A reply without the figure, or
 * with 0 (a Redis whose TIME stood still during a script), is measured by
 * its round trip instead: longer than the script, so the batches are
 * smaller, never larger. */
#define _GNU_SOURCE
#include "engine_internal.h"

size_t engine__batch_cap(const engine *e, const costmodel *m, size_t max) {
    return costmodel_cap(m, e->cfg->redis.max_script_ms * 1000.0 * ENGINE_SCRIPT_BUDGET_SHARE, max);
}

/* A call of n items was answered; script_us the script's own time as the
 * reply said it (-1: not said); sent at sent_ns (uv_hrtime). */
void engine__batch_seen(engine *e, costmodel *m, size_t n, long long script_us, uint64_t sent_ns) {
    double us = script_us > 0 ? (double)script_us : -1;
    /* script_calls_over_bound counts the script's own time only; the
     * round trip (no figure in the reply) feeds the model, an upper bound
     * that can only make batches smaller. */
    int own = us >= 0;
    if (!own) us = (double)(uv_hrtime() - sent_ns) / 1000.0;
    costmodel_observe(m, n, us);
    if (own && e->cfg->redis.max_script_ms > 0 && us >= e->cfg->redis.max_script_ms * 1000.0)
        e->stats.script_over_bound++;
}

static void batch_report(const engine *e, const costmodel *m, size_t max, engine_batch *b) {
    b->cap = engine__batch_cap(e, m, max);
    b->item_us = m->item_us;
    b->fixed_us = m->fixed_us;
    b->last_items = m->last_n;
    b->last_us = m->last_us;
    b->calls = m->calls;
}

void engine_foreach_batch(const engine *e, engine_batch_fn fn, void *ud) {
    engine_batch b;
    for (const dep *d = e->deps; d; d = d->next) {
        if (!d->cfg) continue;
        batch_report(e, &d->cost, RESERVE_BATCH_MAX, &b);
        fn(ud, "deployment", d->name, &b);
        batch_report(e, &d->settle_cost, SETTLE_BATCH_MAX, &b);
        fn(ud, "settle", d->name, &b);
    }
    for (const gq *q = e->gqs; q; q = q->next) {
        batch_report(e, &q->cost, RESERVE_BATCH_MAX, &b);
        fn(ud, "group", q->name, &b);
    }
}
