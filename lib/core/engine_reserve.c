/* engine_reserve: the reserve script, coalesced: every caller waiting on
 * a deployment rides one call per loop turn; a deferral holds a class
 * until Redis says capacity opens. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reserve --------------------------------------------------------------- */

/* A call the script did not run (a cluster redirection the router could
 * not follow, a slot being migrated): d holds ENGINE_REDIRECT_HOLD_MS,
 * then its batch (reserves, settles) goes again. */
void dep_redirect_hold(dep *d) {
    engine *e = d->e;
    e->stats.redirect_holds++;
    uint64_t until = uv_now(e->loop) + ENGINE_REDIRECT_HOLD_MS;
    if (until > d->hold_until) d->hold_until = until;
    uv_timer_start(&e->hold_timer, engine__on_hold_timer, ENGINE_REDIRECT_HOLD_MS, 0);
}

/* An item's estimate for the scripts (wire_estimate_format). */
void call_wire_estimate(const engine_call *c, wire_estimate *x) {
    *x = (wire_estimate){.tokens = c->tokens,
                         .input = c->input,
                         .output = c->output,
                         .split = c->split,
                         .exact = c->exact,
                         .partial = c->partial};
}

typedef struct reserve_batch {
    dep *d;
    size_t n;
    uint64_t sent_ns; /* uv_hrtime at the send */
    double sent_at;   /* uv_now at the send (dep_seen) */
    engine_call *items[RESERVE_BATCH_MAX];
} reserve_batch;

/* A call of a reply that is not to be decided: cancelled meanwhile (freed)
 * or the engine stopping (answered SL_ECLOSING). Returns 1 then. */
static int call_gone(engine *e, engine_call *c) {
    if (c->canceled) {
        call_free(c);
        return 1;
    }
    if (e->stopping) {
        call_complete(c, SL_ECLOSING, NULL, SLUICE_MSG_CLOSING);
        return 1;
    }
    return 0;
}

static void on_reserve(void *arg, redisReply *r, const char *err) {
    reserve_batch *b = arg;
    dep *d = b->d;
    engine *e = d->e;
    e->calls_out--;
    d->reserving--;
    wire_reserve_reply rr;
    int ok = wire_read_reserve(r, b->n, &rr) == 0;
    uint64_t now = uv_now(e->loop);
    if (ok) {
        engine__batch_seen(e, &d->cost, b->n, rr.script_us, b->sent_ns);
        if (rr.paused_ms > 0 && now + (uint64_t)rr.paused_ms > d->paused_until)
            d->paused_until = now + (uint64_t)rr.paused_ms;
        /* Where the fleet's schedule ends: local pacing starts there if
         * Redis is lost, so grants already made by Redis and local ones do
         * not stack. */
        dep_fleet_seen(d, rr.requests_backlog_ms, rr.tokens_backlog_ms);
        dep_seen(d, b->sent_at);
        /* Before the new grants: they are already behind any new shift. */
        dep_follow_shift(d, &rr.shift, rr.now_us);
    }
    int lost_limits = r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown deployment");
    /* A cluster redirection the router could not follow, or a slot being
     * migrated: hold this deployment briefly and send the batch again. */
    int redirect = r && r->type == REDIS_REPLY_ERROR && rrouter_is_redirect(r->str);
    if (ok) d->script_error[0] = '\0';
    else if (r && r->type == REDIS_REPLY_ERROR && !redirect && !lost_limits) dep_script_error(d, "reserve", r->str);
    if (redirect) dep_redirect_hold(d);
    if (lost_limits) {
        /* Redis lost our limits (flushed or restarted empty): write them
         * again; the batch waits for that and goes again, unseen by callers. */
        d->configured = 0;
        dep_configure(d);
    }
    /* Calls that go back to their class queues, at the head in their
     * order (they are older than anything queued behind them). They stay
     * CALL_INFLIGHT, on no list, until then: a callback run for another
     * item of this reply (a grant released at once, a shed) may cancel
     * one (engine_cancel leaves an in-flight call to this reply) or stop
     * the engine, and each is decided when it goes back. */
    engine_call *back[RESERVE_BATCH_MAX];
    size_t nback = 0;
    for (size_t i = 0; i < b->n; i++) {
        engine_call *c = b->items[i];
        if (!ok) {
            /* Timeout, lost connection, or an error: decide locally (the
             * call may have been applied in Redis; charging it twice is the
             * safe side). A canceled call just goes away. */
            if (call_gone(e, c)) continue;
            if (dep_ready(d) && (lost_limits || redirect || (d->configured && !(r && r->type == REDIS_REPLY_ERROR)))) {
                back[nback++] = c;
                continue;
            }
            local_decide(c);
            continue;
        }
        wire_verdict v;
        if (wire_read_verdict(rr.items, i, 0, 0, &v) != 0) {
            /* An item Redis' reply does not say: decided locally, as for
             * a reply that never came (a cancelled call goes away). */
            if (!call_gone(e, c)) local_decide(c);
            continue;
        }
        if (v.kind == WIRE_GRANT) {
            call_reply_granted(c, d, v.id, v.wait_ms, v.tokens);
        } else if (v.kind == WIRE_DEFER) {
            /* Deferred: beyond its horizon. The class waits until Redis
             * said capacity opens; the call keeps its place at the head. */
            if (call_gone(e, c)) continue;
            call_deferred(c, v.reason, v.after_ms, now);
            back[nback++] = c;
        } else {
            if (c->canceled) {
                call_free(c);
                continue;
            }
            const char *rs = v.reason ? v.reason : engine_shed_reasons[ENGINE_SHED_OTHER];
            engine_shed sh = {.reason = engine_shed_reasons[engine_shed_reason_index(rs)],
                              .retry_after_ms = v.after_ms};
            dep_health_seen(d, sh.reason, sh.retry_after_ms);
            call_shed(c, &sh);
        }
    }
    while (nback) {
        engine_call *c = back[--nback];
        if (!call_gone(e, c) && !call_dep_removed(c)) {
            c->state = CALL_PENDING;
            engine__class_push_front(d, c);
        }
    }
    free(b);
    if (d->npending) engine__flush_arm(e);
    engine__maybe_finish_stop(e);
}

/* The classes that may ask now, by lane priority (stable). */
static size_t dep_ready_classes(dep *d, uint64_t now, size_t *order) {
    size_t n = 0;
    for (size_t i = 0; i < d->nclasses; i++) {
        call_class *k = &d->classes[i];
        if (!k->q.n || k->ask_at > now) continue;
        size_t j = n++;
        long long p = engine__class_priority(d, k);
        while (j > 0 && engine__class_priority(d, &d->classes[order[j - 1]]) > p) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    return n;
}

/* Sheds a call that Redis deferred past its max wait. */
static int call_expired(engine_call *c, uint64_t now, long long *left) {
    *left = engine__call_left_ms(c, now);
    if (*left >= 0) return 0;
    if (!c->deferred) {
        *left = 0;
        return 0;
    }
    engine_shed sh = {.reason = engine_shed_reasons[engine_shed_reason_index(c->defer_reason)], .retry_after_ms = 1};
    call_shed(c, &sh);
    return 1;
}

void dep_flush_reserves(dep *d) {
    engine *e = d->e;
    if (!d->npending) return;
    if (!dep_uses_redis(d)) {
        /* Before the first connection attempt resolves, hold the callers
         * (bounded by the connect timeout); after that, pace locally. */
        if (dep_ready(d) && !d->configured) return; /* configure in flight */
        if (dep_ready(d)) {
            dep_hand_over(d); /* callers wait for it (one round trip) */
            return;
        }
        uint64_t grace = (uint64_t)e->cfg->redis.connect_timeout_ms + 500;
        uint64_t now = uv_now(e->loop);
        if (!e->ever_ready && !e->ever_down && now - e->start_ms < grace) {
            uv_timer_start(&e->hold_timer, engine__on_hold_timer, e->start_ms + grace - now, 0);
            return;
        }
        engine_call *c;
        while ((c = dep_pop_any(d)) != NULL) local_decide(c);
        return;
    }
    if (d->reserving) return; /* what arrives now rides the next call */
    uint64_t now = uv_now(e->loop);
    if (d->hold_until > now) return; /* the hold timer flushes again */
    size_t *order = malloc(d->nclasses * sizeof(*order));
    if (!order) return;
    size_t nready = dep_ready_classes(d, now, order);
    if (!nready) {
        free(order);
        return; /* the defer timer flushes again */
    }
    reserve_batch *b = calloc(1, sizeof(*b));
    if (!b) {
        free(order);
        return;
    }
    b->d = d;
    /* Lanes and tenants go as quads, highest lane first, tenants of one
     * lane taking turns, a few per class; otherwise plain pairs. */
    int quads = d->cfg && (d->cfg->nlanes || d->cfg->ntenants);
    size_t per_class = quads ? ENGINE_CLASS_BATCH : RESERVE_BATCH_MAX;
    /* The items this call may carry under redis.max_script_ms; the rest
     * ride the next call, in order, once this one is answered. */
    size_t cap = engine__batch_cap(e, &d->cost, RESERVE_BATCH_MAX);
    /* The arguments are copied as they go (shedding an expired group call
     * below may queue it on another class and move d->classes). Who asks
     * ("@<agent id>/<promise>", a proof of life: lua/common.lua sl_silent)
     * is filled in once the call is sure to go: dep_agent_arg() records
     * the promise as made. */
    wire_args a;
    wire_args_init(&a);
    size_t agent_at = wire_slot(&a);
    wire_reserve_begin(&a, NULL);
    int shared = 0; /* some priority had two classes or more ready */
    for (size_t i = 0; i < nready && b->n < cap;) {
        size_t j = i;
        long long p = engine__class_priority(d, &d->classes[order[i]]);
        while (j < nready && engine__class_priority(d, &d->classes[order[j]]) == p) j++;
        if (j - i > 1) shared = 1;
        for (size_t round = 0; round < per_class && b->n < cap; round++) {
            int any = 0;
            /* The classes of one priority take turns: each call starts one
             * class after where the previous call started. */
            for (size_t t = 0; t < j - i && b->n < cap; t++) {
                size_t g = i + (t + d->turn) % (j - i);
                call_class *k = &d->classes[order[g]];
                engine_call *c = engine__list_next(e, &k->q, now);
                if (!c) continue;
                engine__class_remove(d, c);
                long long left;
                if (call_expired(c, now, &left)) {
                    any = 1;
                    continue;
                }
                any = 1;
                c->state = CALL_INFLIGHT;
                wire_estimate x;
                call_wire_estimate(c, &x);
                wire_reserve_item(&a, &x, left, (long long)(now - c->age_ms), quads ? k->lane : NULL, k->tenant);
                b->items[b->n++] = c;
            }
            if (!any) break;
        }
        i = j;
    }
    free(order);
    if (!b->n) {
        wire_args_free(&a);
        free(b);
        if (d->npending) engine__flush_arm(e);
        return;
    }
    /* Every call where classes of one priority met starts one class
     * further the next time: the first item of a call takes the room a
     * settle just made, so a class that always went first (the turn was
     * reset after each call that was not full) kept the deployment to
     * itself while it had demand, and a lane of one priority beside it
     * waited (anthropic-lanes: the chat lane's p99 wait 45 s against the
     * batch lane's 4 s). Calls where a class asked alone do not move it,
     * so a class that is ready only now and then still gets its turns. */
    if (shared) d->turn++;
    wire_fill(&a, agent_at, dep_agent_arg(d, 0));
    b->sent_ns = uv_hrtime();
    b->sent_at = d->sent_at;
    int rc = wire_args_done(&a, WIRE_TIMED);
    if (rc == 0) rc = rrouter_script(e->redis, SCRIPT_RESERVE, d->keys, a.argc, a.argv, on_reserve, b);
    wire_args_free(&a);
    if (rc != 0) {
        for (size_t i = 0; i < b->n; i++) {
            if (b->items[i]->canceled) call_free(b->items[i]);
            else local_decide(b->items[i]);
        }
        free(b);
        return;
    }
    e->calls_out++;
    d->reserving++;
    e->stats.reserve_calls++;
    e->stats.reserve_items += b->n;
}
