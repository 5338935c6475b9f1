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
void engine__queue_settle(dep *d, const char *id, const engine_usage *u, engine_outcome o, long long pause_ms,
                          const engine_seen *seen) {
    if (d->nsettles == d->capsettles) {
        size_t cap = d->capsettles ? d->capsettles * 2 : 64;
        settle_item *s = realloc(d->settles, cap * sizeof(*s));
        if (!s) return; /* best effort: the grant expires with its estimate */
        d->settles = s;
        d->capsettles = cap;
    }
    settle_item *it = &d->settles[d->nsettles++];
    snprintf(it->id, sizeof(it->id), "%s", id);
    if (u) it->usage = *u;
    else it->usage = (engine_usage){-1, -1, -1, -1, -1};
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
    uint64_t sent_ns; /* uv_hrtime at the send */
} settle_batch;

static int dim_index(const char *name) {
    for (int i = 0; i < ENGINE_DIMS; i++)
        if (!strcmp(engine_dim_names[i], name)) return i;
    return -1;
}

/* The rates a settle reply reports (name, limit in force, effective,
 * others' use, held back for silent agents, per dimension): kept for INFO
 * and metrics, and a limit the provider's headers lowered (or raised back)
 * is logged once. */
static void dep_follow_rates(dep *d, const redisReply *rates) {
    if (!rates || rates->type != REDIS_REPLY_ARRAY || rates->elements % 5) return;
    for (size_t i = 0; i + 4 < rates->elements; i += 5) {
        const redisReply *nm = rates->element[i];
        if (nm->type != REDIS_REPLY_STRING) continue;
        if (!strcmp(nm->str, "estimate")) {
            /* {estimate, ratio in force, learned, kept, learning}: the
             * local fallback charges at it (engine_local.c). */
            const redisReply *v = rates->element[i + 1];
            double r = v->type == REDIS_REPLY_STRING ? atof(v->str) : 0;
            if (r > 0) dep_set_est_ratio(d, r);
            continue;
        }
        int k = dim_index(nm->str);
        if (k < 0) continue;
        engine_dim_rates *dr = &d->rates[k];
        double limit = rates->element[i + 1]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 1]->str) : 0;
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
        dr->effective = rates->element[i + 2]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 2]->str) : 0;
        dr->outside = rates->element[i + 3]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 3]->str) : 0;
        dr->held = rates->element[i + 4]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 4]->str) : 0;
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
    /* The head (4), the items, the rates, the call's own time. */
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 5 + b->n)
        engine__batch_seen(e, &d->settle_cost, b->n, r, 5, b->sent_ns);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3) {
        dep_seen(d);
        long long paused = engine__reply_int(r->element[1]);
        if (paused > 0) {
            uint64_t until = uv_now(e->loop) + (uint64_t)paused;
            if (until > d->paused_until) d->paused_until = until;
        }
        if (r->element[2]->type == REDIS_REPLY_STRING) d->rate_scale = atof(r->element[2]->str);
        if (r->elements >= 4) dep_follow_shift(d, r->element[3], engine__reply_int(r->element[0]));
        if (r->elements >= 5 + b->n) dep_follow_rates(d, r->element[4 + b->n]);
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
    /* As many as fit under redis.max_script_ms; the rest go next. */
    size_t cap = engine__batch_cap(e, &d->settle_cost, SETTLE_BATCH_MAX);
    size_t n = d->nsettles < cap ? d->nsettles : cap;
    if (n < d->nsettles) urgent_first(d);
    /* The feedback form (lua/settle.lua): 'feedback', n, then per item the
     * grant, the usage ("-1", "n", "i+o" or "i+o+r"), the outcome, the
     * pause and what the headers said ("r=L/R,..." or "-"). */
    /* argv0[0]: who asks ("@<agent id>", lua/common.lua sl_silent); the
     * last: ENGINE_TIMED_ARG (the call's own time). */
    const char **argv0 = malloc(sizeof(*argv0) * (4 + 5 * n)), **argv = argv0 ? argv0 + 1 : NULL;
    char(*buf)[96] = malloc(sizeof(*buf) * (2 + 5 * n));
    settle_batch *b = malloc(sizeof(*b));
    if (!argv || !buf || !b) {
        free(argv0);
        free(buf);
        free(b);
        return;
    }
    static const char letters[ENGINE_DIMS] = {'r', 't', 'i', 'o'};
    argv[0] = "feedback";
    snprintf(buf[1], 96, "%zu", n);
    argv[1] = buf[1];
    for (size_t i = 0; i < n; i++) {
        settle_item *it = &d->settles[i];
        const engine_usage *u = &it->usage;
        size_t k = 2 + 5 * i;
        argv[k] = it->id;
        if (u->input >= 0 && u->output >= 0)
            snprintf(buf[k + 1], 96, "%lld+%lld+%lld", u->input, u->output, u->cache_read > 0 ? u->cache_read : 0);
        else snprintf(buf[k + 1], 96, "%lld", u->tokens < 0 ? -1 : u->tokens);
        argv[k + 1] = buf[k + 1];
        argv[k + 2] = engine_outcome_names[it->outcome];
        snprintf(buf[k + 3], 96, "%lld", it->pause_ms < 0 ? -1 : it->pause_ms);
        argv[k + 3] = buf[k + 3];
        size_t used = 0;
        for (int j = 0; j < ENGINE_DIMS && used < 80; j++) {
            if (it->seen.limit[j] < 0 && it->seen.remaining[j] < 0) continue;
            char lim[24] = "", rem[24] = "";
            if (it->seen.limit[j] >= 0) snprintf(lim, sizeof(lim), "%lld", it->seen.limit[j]);
            if (it->seen.remaining[j] >= 0) snprintf(rem, sizeof(rem), "%lld", it->seen.remaining[j]);
            int w = snprintf(buf[k + 4] + used, 96 - used, "%s%c=%.15s/%.15s", used ? "," : "", letters[j], lim, rem);
            if (w < 0 || (size_t)w >= 96 - used) break;
            used += (size_t)w;
        }
        if (!used) snprintf(buf[k + 4], 96, "-");
        argv[k + 4] = buf[k + 4];
    }
    b->d = d;
    b->n = n;
    argv[2 + 5 * n] = ENGINE_TIMED_ARG;
    argv0[0] = dep_agent_arg(d, 0);
    b->sent_ns = uv_hrtime();
    int rc = rrouter_script(e->redis, SCRIPT_SETTLE, d->keys, (int)(4 + 5 * n), argv0, on_settle, b);
    free(argv0);
    free(buf);
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
