/* engine_settle: settles, coalesced per deployment, and what their
 * replies say (pauses, the rate scale, the limits the fleet runs at). */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cancels, hard quota errors and provider pauses: they change what the
 * next reserve may take, so they go at once and first. */
static int settle_is_urgent(const settle_item *it) {
    return it->outcome == ENGINE_CANCELLED || it->outcome == ENGINE_QUOTA || it->pause_ms >= 0;
}

/* Queues one settle item for d's next settle call. u: the usage (NULL:
 * unknown); seen: what the headers said (NULL: nothing). */
/* Room for n more settle items in d's queue: 0, or -1 (out of memory). */
static int settles_room(dep *d, size_t n) {
    if (d->nsettles + n <= d->capsettles) return 0;
    size_t cap = d->capsettles ? d->capsettles * 2 : 64;
    while (cap < d->nsettles + n) cap *= 2;
    settle_item *s = realloc(d->settles, cap * sizeof(*s));
    if (!s) return -1;
    d->settles = s;
    d->capsettles = cap;
    return 0;
}

void engine__queue_settle(dep *d, const char *id, const usage_rec *u, engine_outcome o, long long pause_ms,
                          const engine_seen *seen) {
    if (settles_room(d, 1) != 0) return; /* best effort: the grant expires with its estimate */
    settle_item *it = &d->settles[d->nsettles++];
    snprintf(it->id, sizeof(it->id), "%s", id);
    if (u) it->usage = *u;
    else it->usage = USAGE_REC_UNKNOWN;
    it->outcome = o;
    it->pause_ms = pause_ms;
    if (seen) it->seen = *seen;
    else engine_seen_init(&it->seen);
    /* Azure's x-ratelimit-*-requests describe its short evaluation window
     * (a 120 RPM deployment answers limit 20, a 300 RPM one remaining 50
     * of 50: RPM / 6, ten seconds), not the minute (docs/providers.md):
     * read as a per-minute limit they cut the fleet to a sixth. Undefined
     * in Microsoft's documentation, so they are not taken as evidence. */
    if (d->cfg && d->cfg->style == CONFIG_STYLE_AZURE) {
        it->seen.limit[ENGINE_DIM_REQUESTS] = -1;
        it->seen.remaining[ENGINE_DIM_REQUESTS] = -1;
    }
    engine *e = d->e;
    /* Cancels and provider pauses go at once (a cancel must land before the
     * next reserve); plain settles wait up to ENGINE_SETTLE_DELAY_MS so the
     * settles of callers working one at a time share a call. */
    if (settle_is_urgent(it) || d->nsettles >= 64 || e->stopping) {
        d->settle_urgent = 1;
        engine__flush_arm(e);
    } else if (!uv_is_active((uv_handle_t *)&e->settle_timer)) {
        uv_timer_start(&e->settle_timer, engine__on_settle_timer, ENGINE_SETTLE_DELAY_MS, 0);
    }
}

/* ---- settle ---------------------------------------------------------------- */

typedef struct settle_batch {
    dep *d;
    size_t n;
    uint64_t sent_ns;    /* uv_hrtime at the send */
    double sent_at;      /* uv_now at the send (dep_seen) */
    settle_item items[]; /* what was sent: queued again when the script did not run */
} settle_batch;

/* A settle the script never ran (a cluster redirection the router could
 * not follow, TRYAGAIN during a slot migration, CLUSTERDOWN) goes back to
 * the front of the queue, and the deployment holds as for a reserve:
 * dropped, its usage correction and its concurrency slot were lost until
 * the grant's lease ran out. */
static void requeue_settles(dep *d, const settle_item *items, size_t n) {
    if (settles_room(d, n) != 0) return; /* best effort: the grants expire with their estimates */
    memmove(d->settles + n, d->settles, d->nsettles * sizeof(*d->settles));
    memcpy(d->settles, items, n * sizeof(*items));
    d->nsettles += n;
    dep_redirect_hold(d);
}

static int dim_index(const char *name) {
    for (int i = 0; i < ENGINE_DIMS; i++)
        if (!strcmp(engine_dim_names[i], name)) return i;
    return -1;
}

/* The rates a settle reply reports (name, limit in force, effective,
 * others' use, held back for silent agents, per dimension): kept for INFO
 * and metrics, and a limit the provider's headers lowered (or raised back)
 * is logged once. */
static void dep_follow_rates(dep *d, const wire_settle_reply *s) {
    wire_rate rt;
    size_t pos = 0;
    while (wire_rate_next(s, &pos, &rt)) {
        if (!strcmp(rt.name, "estimate")) {
            /* {estimate, ratio in force, learned, kept, learning}: the
             * local fallback charges at it (engine_local.c). */
            if (rt.limit > 0) dep_set_est_ratio(d, rt.limit);
            continue;
        }
        int k = dim_index(rt.name);
        if (k < 0) continue;
        engine_dim_rates *dr = &d->rates[k];
        double limit = rt.limit;
        double was = dr->known ? dr->limit : dr->configured;
        if (limit > 0 && fabs(limit - was) > 0.5) {
            d->e->stats.limit_changes++;
            if (limit + 0.5 < dr->configured)
                engine__elog(
                    d->e, CONFIG_LOG_WARN,
                    "deployment %s: the provider reports a %s limit of %.0f per minute, below the %.0f configured: "
                    "the fleet runs at %.0f",
                    d->name, engine_dim_names[k], limit, dr->configured, limit);
            else
                engine__elog(d->e, CONFIG_LOG_INFO,
                             "deployment %s: the provider reports the configured %s limit again (%.0f per minute)",
                             d->name, engine_dim_names[k], limit);
        }
        dr->limit = limit;
        dr->effective = rt.effective;
        dr->outside = rt.outside;
        dr->held = rt.held;
        dr->known = 1;
    }
}

static void on_settle(void *arg, redisReply *r, const char *err) {
    settle_batch *b = arg;
    dep *d = b->d;
    engine *e = d->e;
    e->calls_out--;
    d->settling--;
    if (r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str)) dep_script_error(d, "settle", r->str);
    if (r && r->type == REDIS_REPLY_ERROR && rrouter_is_redirect(r->str) && d->cfg && !e->stopping)
        requeue_settles(d, b->items, b->n);
    wire_settle_reply sr;
    if (wire_read_settle(r, b->n, &sr) == 0) {
        if (sr.rates) engine__batch_seen(e, &d->settle_cost, b->n, sr.script_us, b->sent_ns);
        dep_seen(d, b->sent_at);
        if (sr.paused_ms > 0) {
            uint64_t until = uv_now(e->loop) + (uint64_t)sr.paused_ms;
            if (until > d->paused_until) d->paused_until = until;
        }
        if (sr.rate_scale >= 0) d->rate_scale = sr.rate_scale;
        if (sr.has_shift) dep_follow_shift(d, &sr.shift, sr.now_us);
        dep_follow_rates(d, &sr);
    }
    free(b);
    if (d->nsettles) {
        d->settle_urgent = 1; /* they waited behind the call in flight */
        engine__flush_arm(e);
    }
    engine__maybe_finish_stop(e);
}

/* When not every settle fits in this call: the urgent ones first (in
 * their order, then the others in theirs), so that a cancel or a pause
 * queued behind a backlog of plain settles still lands before the next
 * reserve (found in review). Settles of different grants are independent
 * otherwise. Left as it is when there is no memory for the copy. */
static void urgent_first(dep *d) {
    settle_item *tmp = malloc(d->nsettles * sizeof(*tmp));
    if (!tmp) return;
    size_t k = 0;
    for (size_t i = 0; i < d->nsettles; i++)
        if (settle_is_urgent(&d->settles[i])) tmp[k++] = d->settles[i];
    for (size_t i = 0; i < d->nsettles; i++)
        if (!settle_is_urgent(&d->settles[i])) tmp[k++] = d->settles[i];
    memcpy(d->settles, tmp, d->nsettles * sizeof(*tmp));
    free(tmp);
}

void dep_flush_settles(dep *d) {
    engine *e = d->e;
    if (!d->nsettles || d->settling) return;
    if (!dep_ready(d) || !d->configured) {
        if (!dep_ready(d)) d->nsettles = 0; /* Redis is gone: grants expire there */
        return;
    }
    if (d->hold_until > uv_now(e->loop)) return; /* the hold timer flushes again */
    /* As many as fit under redis.max_script_ms; the rest go next. */
    size_t cap = engine__batch_cap(e, &d->settle_cost, SETTLE_BATCH_MAX);
    size_t n = d->nsettles < cap ? d->nsettles : cap;
    if (n < d->nsettles) urgent_first(d);
    /* The feedback form (lua/settle.lua, wire_settle_item), from this
     * agent ("@<agent id>", lua/common.lua sl_silent), timed. */
    settle_batch *b = malloc(sizeof(*b) + n * sizeof(b->items[0]));
    if (!b) return;
    memcpy(b->items, d->settles, n * sizeof(b->items[0]));
    wire_args a;
    wire_args_init(&a);
    wire_settle_begin(&a, dep_agent_arg(d, 0));
    for (size_t i = 0; i < n; i++) {
        const settle_item *it = &d->settles[i];
        wire_settle_item(&a, it->id, &it->usage, it->outcome, it->pause_ms, &it->seen);
    }
    b->d = d;
    b->n = n;
    b->sent_ns = uv_hrtime();
    b->sent_at = d->sent_at;
    int rc = wire_args_done(&a, WIRE_TIMED);
    if (rc == 0) rc = rrouter_script(e->redis, SCRIPT_SETTLE, d->keys, a.argc, a.argv, on_settle, b);
    wire_args_free(&a);
    if (rc != 0) {
        free(b);
        return;
    }
    memmove(d->settles, d->settles + n, (d->nsettles - n) * sizeof(*d->settles));
    d->nsettles -= n;
    e->calls_out++;
    d->settling++;
    e->stats.settle_calls++;
    e->stats.settle_items += n;
}
