/* engine_group: requests to a group. With one Redis (or Sentinel) the
 * group script decides among the members atomically; with Redis Cluster,
 * or when a member paces locally, the engine routes step by step. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- groups ------------------------------------------------------------------ */

group_stat *group_stats(engine *e, const char *name) {
    for (size_t i = 0; i < e->ngstats; i++)
        if (!strcmp(e->gstats[i].name, name)) return &e->gstats[i];
    group_stat *n = realloc(e->gstats, (e->ngstats + 1) * sizeof(*n));
    if (!n) return NULL;
    e->gstats = n;
    memset(&n[e->ngstats], 0, sizeof(n[0]));
    snprintf(n[e->ngstats].name, sizeof(n[0].name), "%s", name);
    return &n[e->ngstats++];
}

/* May member m serve a request with this tag and tenant (its tag, and the
 * tenant's in g)? */
static int group_allows_tt(const struct config_group *g, const struct config_deployment *m, const char *tag,
                           const char *tenant) {
    return config_has_tag(m, tag) && config_has_tag(m, config_group_tenant_tag(g, tenant));
}

static int group_allows(const struct config_group *g, const struct config_deployment *m, const engine_call *c) {
    return group_allows_tt(g, m, c->route->tag, c->route->tenant);
}

/* The weighted policy's turn: smooth weighted round-robin (as nginx does)
 * over the allowed members, each weighted by its rpm, so that over any
 * run of requests each member's share is within one request of its
 * weight's. Returns the member index, or -1 when none is allowed. take 0:
 * only says whose turn it is (ESTIMATE), the state stays as it was. */
static int group_turn_tt(engine *e, const struct config_group *g, const char *tag, const char *tenant, int take) {
    group_stat *gs = group_stats(e, g->name);
    if (!gs) return -1;
    double total = 0, w[CONFIG_GROUP_MAX] = {0};
    int best = -1;
    for (size_t i = 0; i < g->nmembers && i < CONFIG_GROUP_MAX; i++) {
        if (!group_allows_tt(g, g->members_[i], tag, tenant)) continue;
        w[i] = gs->swrr[i] + (double)g->members_[i]->rpm;
        total += (double)g->members_[i]->rpm;
        if (best < 0 || w[i] > w[best]) best = (int)i;
    }
    if (!take) return best;
    for (size_t i = 0; i < g->nmembers && i < CONFIG_GROUP_MAX; i++)
        if (group_allows_tt(g, g->members_[i], tag, tenant)) gs->swrr[i] = w[i];
    if (best >= 0) gs->swrr[best] -= total;
    return best;
}

static int group_turn(engine *e, const struct config_group *g, const engine_call *c) {
    return group_turn_tt(e, g, c->route->tag, c->route->tenant, 1);
}

/* c's first member to try, against g as it is now: a reload may have
 * reordered, retagged or taken out members since c's acquire chose its
 * turn (an index into the members then). Priority: the first member
 * allowed now; weighted: its turn while that member is allowed, else a
 * new turn. Returns it, or -1 when no member may serve c now. */
static int group_first(engine_call *c, const struct config_group *g) {
    int t = c->route->turn;
    if (g->policy == CONFIG_POLICY_WEIGHTED) {
        if (t < 0 || (size_t)t >= g->nmembers || !group_allows(g, g->members_[t], c)) t = group_turn(c->e, g, c);
    } else {
        t = -1;
        for (size_t i = 0; i < g->nmembers && t < 0; i++)
            if (group_allows(g, g->members_[i], c)) t = (int)i;
    }
    return c->route->turn = t;
}

/* Nobody may serve c (its TAG, its tenant's tag). */
static void group_shed_tag(engine_call *c) {
    engine_shed sh = {.reason = engine_shed_reasons[ENGINE_SHED_TAG], .retry_after_ms = -1};
    call_complete(c, SL_ESHED, &sh, NULL);
}

size_t group_ask_order(engine *e, const struct config_group *g, const engine_req *rq, int order[CONFIG_GROUP_MAX]) {
    const char *tag = rq->tag ? rq->tag : "", *tenant = rq->tenant ? rq->tenant : "";
    size_t n = 0;
    if (g->policy == CONFIG_POLICY_WEIGHTED) {
        int t = group_turn_tt(e, g, tag, tenant, 0);
        if (t >= 0) order[n++] = t;
        return n;
    }
    for (size_t i = 0; i < g->nmembers && i < CONFIG_GROUP_MAX; i++)
        if (group_allows_tt(g, g->members_[i], tag, tenant)) order[n++] = (int)i;
    return n;
}

/* Queues c on member m of its group, allowed to wait step_ms there. */
static int call_target(engine_call *c, const struct config_deployment *m, long long step_ms) {
    engine *e = c->e;
    dep *d = dep_find(e, m->name);
    if (!d || !d->cfg) return -1;
    const struct config_lane *l = config_lane(d->cfg, c->route->lane);
    if (!l) l = config_lane(d->cfg, NULL); /* a member without that lane: its default */
    const struct config_tenant *t = config_tenant(d->cfg, c->route->tenant);
    int cls = dep_class(d, l ? l->name : "", t ? t->name : "default");
    if (cls < 0) return -1;
    c->d = d;
    c->cls = cls;
    c->deferred = 0;
    c->max_wait_ms = (long long)(uv_now(e->loop) - c->start_ms) + (step_ms > 0 ? step_ms : 0);
    c->state = CALL_PENDING;
    engine__class_push(d, c);
    d->classes[cls].st.acquires++;
    engine__flush_arm(e);
    return 0;
}

/* After member c->d shed c: records when that member could serve it and
 * queues c on the next member to try. Returns 1 when c was queued again, 0
 * when the group has nobody left (then *final is the answer). Spill phase:
 * the allowed members in order, each allowed to wait up to spill_ms.
 * Final phase: the allowed member whose slot (learned from its shed) is
 * soonest within the request's max wait, allowed to wait for it. */
int group_next(engine_call *c, const engine_shed *shed, engine_shed *final) {
    engine *e = c->e;
    const struct config_group *g = config_group(e->cfg, c->route->group);
    if (!g) return 0;
    uint64_t now = uv_now(e->loop);
    int idx = -1;
    for (size_t i = 0; i < g->nmembers; i++)
        if (!strcmp(g->members[i], c->d->name)) idx = (int)i;
    int why = engine_shed_reason_index(shed->reason);
    int health = why == ENGINE_SHED_BREAKER || why == ENGINE_SHED_QUOTA;
    int never = shed->retry_after_ms < 0 || health || why == ENGINE_SHED_TOO_LARGE || why == ENGINE_SHED_DAILY ||
                why == ENGINE_SHED_TENANT_DAILY;
    if (health && shed->retry_after_ms >= 0) {
        uint64_t back = now + (uint64_t)shed->retry_after_ms;
        if (!c->route->health || back < c->route->health) c->route->health = back;
    }
    if (idx >= 0) {
        long long step_left = c->max_wait_ms - (long long)(now - c->start_ms);
        c->route->est[idx] =
            never ? UINT64_MAX : now + (uint64_t)(step_left > 0 ? step_left : 0) + (uint64_t)shed->retry_after_ms;
    }
    if (!c->route->first.reason) c->route->first = *shed;
    long long left = c->route->deadline > now ? (long long)(c->route->deadline - now) : 0;
    /* Spill phase (priority: the members in order; weighted: only the
     * member whose turn it was, then the final phase). */
    while (g->policy == CONFIG_POLICY_PRIORITY && c->route->next < (int)g->nmembers) {
        const struct config_deployment *m = g->members_[c->route->next++];
        if (!group_allows(g, m, c)) continue;
        if (call_target(c, m, left < g->spill_ms ? left : g->spill_ms) == 0) return 1;
    }
    /* Final phase: the member that can serve it soonest. Its shed said
     * when that member's next slot was; this agent's own requests queued
     * there since will take a slot each first (requests deciding together
     * from the same figures would otherwise all pick the same member).
     * The step may wait only a little past that estimate: when others took
     * the slot meanwhile, the shed brings a newer figure and the choice is
     * made again. After 3 rounds per member it waits for good. */
    int best = -1;
    uint64_t soonest = UINT64_MAX, best_interval = 0;
    for (size_t i = 0; i < g->nmembers; i++) {
        const struct config_deployment *m = g->members_[i];
        if (!group_allows(g, m, c) || !c->route->est[i] || c->route->est[i] == UINT64_MAX) continue;
        dep *md = dep_find(e, m->name);
        uint64_t interval = (uint64_t)(60000 / (m->rpm > 0 ? m->rpm : 1)) + 1;
        uint64_t score = c->route->est[i] + (md ? (uint64_t)md->npending * interval : 0);
        if (score < soonest) {
            soonest = score;
            best = (int)i;
            best_interval = interval;
        }
    }
    if (best >= 0 && soonest <= c->route->deadline) {
        long long step = left;
        if (++c->route->final_steps < 3 * (int)g->nmembers) {
            long long until = (long long)(soonest > now ? soonest - now : 0) + 2 * (long long)best_interval;
            if (until < step) step = until;
        }
        if (call_target(c, g->members_[best], step) == 0) return 1;
    }
    if (best >= 0) soonest = c->route->est[best];
    final->reason = c->route->first.reason ? c->route->first.reason : shed->reason;
    /* The hint: when the soonest member could serve it, or when a member
     * out for health (breaker, quota) comes back; -1 only when none can. */
    if (c->route->health && c->route->health < soonest) soonest = c->route->health;
    final->retry_after_ms = soonest == UINT64_MAX          ? -1
                            : soonest > c->route->deadline ? (long long)(soonest - c->route->deadline) + 1
                                                           : (long long)(soonest > now ? soonest - now : 1);
    if (final->retry_after_ms == 0) final->retry_after_ms = 1;
    return 0;
}

/* ---- groups decided by one script (one Redis or Sentinel) ------------------ */

static int group_atomic(const engine *e) { return strcmp(rrouter_mode(e->redis), "cluster") != 0; }

static gq *gq_get(engine *e, const char *name) {
    for (gq *q = e->gqs; q; q = q->next)
        if (!strcmp(q->name, name)) return q;
    gq *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    snprintf(q->name, sizeof(q->name), "%s", name);
    q->next = e->gqs;
    e->gqs = q;
    return q;
}

/* c's class on member d (for its figures, and if d holds it later). */
static int member_class(engine_call *c, dep *d) {
    const struct config_lane *l = d->cfg ? config_lane(d->cfg, c->route->lane) : NULL;
    if (!l && d->cfg) l = config_lane(d->cfg, NULL);
    const struct config_tenant *t = d->cfg ? config_tenant(d->cfg, c->route->tenant) : NULL;
    return dep_class(d, l ? l->name : "", t ? t->name : "default");
}

/* Routes c step by step from the member whose turn it is (Redis Cluster,
 * members not all in Redis mode, or the group script failing). */
static int group_route_steps(engine_call *c) {
    const struct config_group *g = config_group(c->e->cfg, c->route->group);
    if (!g || c->route->turn < 0 || (size_t)c->route->turn >= g->nmembers) return -1;
    uint64_t now = uv_now(c->e->loop);
    long long left = c->route->deadline > now ? (long long)(c->route->deadline - now) : 0;
    c->route->next = c->route->turn + 1;
    return call_target(c, g->members_[c->route->turn], left < g->spill_ms ? left : g->spill_ms);
}

/* Answers every request still queued on q with status. */
void engine__gq_drain(gq *q, int status, const char *msg) {
    engine_call *c;
    while ((c = engine__list_pop(&q->q)) != NULL) {
        c->e->stats.queued--;
        c->route->gq = NULL;
        call_complete(c, status, NULL, msg);
    }
}

static void gq_fallback(engine_call *c) {
    const struct config_group *g = config_group(c->e->cfg, c->route->group);
    if (g && group_first(c, g) < 0) {
        group_shed_tag(c);
        return;
    }
    if (group_route_steps(c) != 0) {
        call_complete(c, SL_EUNKNOWN, NULL, "group removed by a configuration reload");
    }
}

void group_member_removed(engine_call *c) {
    if (!c->route || c->canceled || c->e->stopping || !config_group(c->e->cfg, c->route->group)) {
        call_complete(c, SL_EUNKNOWN, NULL, ENGINE_MSG_REMOVED);
        return;
    }
    gq_fallback(c);
}

typedef struct gq_batch {
    gq *q;
    size_t n, m;
    uint64_t sent_ns; /* uv_hrtime at the send */
    dep *md[CONFIG_GROUP_MAX];
    engine_call *items[RESERVE_BATCH_MAX];
} gq_batch;

static void on_group_reserve(void *arg, redisReply *r, const char *err) {
    (void)err;
    gq_batch *b = arg;
    gq *q = b->q;
    engine *e = b->md[0]->e;
    e->calls_out--;
    q->reserving = 0;
    wire_group_reply gr;
    int ok = wire_read_group(r, b->n, &gr) == 0;
    if (ok) engine__batch_seen(e, &q->cost, b->n, gr.script_us, b->sent_ns);
    if (!ok && r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str))
        engine__elog(e, CONFIG_LOG_WARN, "group %s: the group script failed (%s); routing member by member", q->name,
                     r->str);
    uint64_t now = uv_now(e->loop);
    int deferred = 0;
    for (size_t i = 0; i < b->n; i++) {
        engine_call *c = b->items[i];
        c->route->gq = NULL;
        wire_verdict v;
        int kind = ok && wire_read_verdict(gr.items, i, 0, 1, &v) == 0 ? v.kind : -1;
        if (kind != -1 && kind != WIRE_SHED && (size_t)v.member >= b->m) kind = -1;
        dep *d = kind == WIRE_GRANT || kind == WIRE_DEFER ? b->md[v.member] : NULL;
        if (c->canceled) {
            if (kind == WIRE_GRANT) {
                char num[24];
                snprintf(num, sizeof(num), "%lld", v.id);
                engine__queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
            }
            call_free(c);
            continue;
        }
        if (e->stopping && kind != WIRE_GRANT) {
            call_complete(c, SL_ECLOSING, NULL, SLUICE_MSG_CLOSING);
            continue;
        }
        if (kind == WIRE_GRANT) {
            int cls = member_class(c, d);
            if (cls >= 0) {
                c->d = d;
                c->cls = cls;
            }
            call_reply_granted(c, d, v.id, v.wait_ms, v.tokens);
        } else if (kind == WIRE_DEFER) {
            /* Deferred on that member (its lanes or tenants): held in its
             * class and asked there again; no more spilling. A member a
             * reload removed meanwhile has no class to ask from: the call
             * is routed again among the group's members now. */
            int cls = d->cfg ? member_class(c, d) : -1;
            if (cls < 0) {
                gq_fallback(c);
                continue;
            }
            c->d = d;
            c->cls = cls;
            const struct config_group *g = config_group(e->cfg, c->route->group);
            c->route->next = g ? (int)g->nmembers : 0;
            c->max_wait_ms = (long long)(c->route->deadline > c->start_ms ? c->route->deadline - c->start_ms : 0);
            call_deferred(c, v.reason, v.after_ms, now);
            c->state = CALL_PENDING;
            engine__class_push(d, c);
            deferred = 1;
        } else if (kind == WIRE_SHED) {
            const char *rs = v.reason ? v.reason : engine_shed_reasons[ENGINE_SHED_OTHER];
            engine_shed sh = {.reason = engine_shed_reasons[engine_shed_reason_index(rs)],
                              .retry_after_ms = v.after_ms};
            call_complete(c, SL_ESHED, &sh, NULL);
        } else {
            gq_fallback(c);
        }
    }
    free(b);
    /* The flush sends what queued meanwhile, and sets the timer that asks
     * again for a class a member deferred. */
    if (q->q.n || deferred) engine__flush_arm(e);
    engine__maybe_finish_stop(e);
}

void engine__gq_flush(engine *e, gq *q) {
    if (q->reserving || !q->q.n) return;
    const struct config_group *g = config_group(e->cfg, q->name);
    engine_call *c;
    if (!g) {
        engine__gq_drain(q, SL_EUNKNOWN, "group removed by a configuration reload");
        return;
    }
    uint64_t now = uv_now(e->loop);
    gq_batch *b = calloc(1, sizeof(*b));
    if (!b) return;
    b->q = q;
    b->m = g->nmembers;
    int ready = group_atomic(e);
    for (size_t i = 0; i < g->nmembers; i++) {
        b->md[i] = dep_find(e, g->members[i]);
        if (!b->md[i] || !b->md[i]->cfg || !dep_uses_redis(b->md[i]) || b->md[i]->hold_until > now) ready = 0;
    }
    if (!ready) {
        /* A member paces locally or its limits are being written: each
         * member decides for itself, step by step. */
        free(b);
        while ((c = engine__list_pop(&q->q)) != NULL) {
            e->stats.queued--;
            c->route->gq = NULL;
            gq_fallback(c);
        }
        return;
    }
    size_t m = g->nmembers, nk = SCRIPTS_NKEYS * m;
    char(*keys)[SCRIPTS_KEY_MAX] = malloc(nk * sizeof(*keys));
    if (!keys) {
        free(b);
        return;
    }
    for (size_t i = 0; i < m; i++) memcpy(keys[SCRIPTS_NKEYS * i], b->md[i]->keys, sizeof(b->md[i]->keys));
    /* From this agent ("@<agent id>", a proof of life: lua/common.lua
     * sl_silent), timed. */
    wire_args a;
    wire_args_init(&a);
    wire_group_begin(&a, e->agent_arg, m, g->spill_ms, g->policy == CONFIG_POLICY_WEIGHTED ? "weighted" : "priority");
    /* Under redis.max_script_ms, like a deployment's batch; the rest wait
     * for the next call, in order. */
    size_t cap = engine__batch_cap(e, &q->cost, RESERVE_BATCH_MAX), nnone = 0;
    engine_call *none[RESERVE_BATCH_MAX]; /* no member allowed now: shed once the call is out */
    while (b->n + nnone < cap && (c = engine__list_next(e, &q->q, now)) != NULL) {
        engine__list_remove(&q->q, c);
        e->stats.queued--;
        if (group_first(c, g) < 0) {
            c->route->gq = NULL;
            none[nnone++] = c;
            continue;
        }
        long long l = c->route->deadline > now ? (long long)(c->route->deadline - now) : 0;
        /* The members it may use, the one whose turn it is first. */
        char order[64];
        size_t used = (size_t)snprintf(order, sizeof(order), "%d", c->route->turn + 1);
        for (size_t i = 0; i < m && used < 60; i++)
            if ((int)i != c->route->turn && group_allows(g, g->members_[i], c))
                used += (size_t)snprintf(order + used, sizeof(order) - used, ",%zu", i + 1);
        wire_estimate x;
        call_wire_estimate(c, &x);
        wire_group_item(&a, &x, l, (long long)(now - c->age_ms), c->route->lane, c->route->tenant, order);
        c->state = CALL_INFLIGHT;
        b->items[b->n++] = c;
    }
    for (size_t i = 0; i < nnone; i++) group_shed_tag(none[i]);
    if (!b->n) {
        wire_args_free(&a);
        free(keys);
        free(b);
        return;
    }
    e->group_sent_at = (double)uv_now(e->loop);
    b->sent_ns = uv_hrtime();
    int rc = wire_args_done(&a, WIRE_TIMED);
    if (rc == 0) rc = rrouter_script_n(e->redis, SCRIPT_RESERVE, keys, (int)nk, a.argc, a.argv, on_group_reserve, b);
    wire_args_free(&a);
    free(keys);
    if (rc != 0) {
        for (size_t i = 0; i < b->n; i++) {
            b->items[i]->route->gq = NULL;
            if (b->items[i]->canceled) call_free(b->items[i]);
            else gq_fallback(b->items[i]);
        }
        free(b);
        return;
    }
    q->reserving = 1;
    e->calls_out++;
    e->stats.reserve_calls++;
    e->stats.reserve_items += b->n;
}

static void on_no_member(uv_timer_t *t) {
    engine_call *c = t->data;
    engine__list_remove(&c->d->waiting, c);
    c->e->stats.waiting--;
    engine_shed sh = {.reason = engine_shed_reasons[ENGINE_SHED_TAG], .retry_after_ms = -1};
    call_shed(c, &sh);
}

/* A request to a group: routed by group_next() from its first member. */
int group_acquire(engine *e, const struct config_group *g, const engine_req *rq, engine_acquire_cb cb, void *arg,
                  engine_call **out) {
    engine_call *c = calloc(1, sizeof(*c));
    call_route *rt = calloc(1, sizeof(*rt));
    if (!c || !rt) {
        free(c);
        free(rt);
        return SL_ENOMEM;
    }
    c->e = e;
    c->cb = cb;
    c->arg = arg;
    c->route = rt;
    call_estimate(c, rq);
    snprintf(c->route->group, sizeof(c->route->group), "%s", g->name);
    snprintf(c->route->lane, sizeof(c->route->lane), "%s", rq->lane ? rq->lane : "");
    snprintf(c->route->tenant, sizeof(c->route->tenant), "%s", rq->tenant ? rq->tenant : "");
    snprintf(c->route->tag, sizeof(c->route->tag), "%s", rq->tag ? rq->tag : "");
    c->start_ms = c->age_ms = uv_now(e->loop);
    c->route->deadline = c->start_ms + (uint64_t)(rq->max_wait_ms >= 0 ? rq->max_wait_ms : g->max_wait_ms);
    /* Its max wait as a plain call's (routing step by step gives each step
     * its own): a grant the group script makes is held through this
     * agent's lapse until then (on_release), like any other. */
    c->max_wait_ms = (long long)(c->route->deadline - c->start_ms);
    e->stats.acquires++;
    group_stat *gs = group_stats(e, g->name);
    if (gs) gs->st.acquires++;
    int first = -1;
    for (size_t i = 0; i < g->nmembers && first < 0; i++)
        if (group_allows(g, g->members_[i], c)) first = (int)i;
    if (first < 0) {
        /* Nobody may serve it: shed on the next turn (callbacks never run
         * from the call that registers them). */
        c->d = dep_find(e, g->members[0]);
        c->cls = c->d ? dep_class(c->d, "", "default") : -1;
        if (c->cls < 0) {
            free(rt);
            free(c);
            return SL_ENOMEM;
        }
        c->route->next = (int)g->nmembers;
        c->route->first = (engine_shed){.reason = engine_shed_reasons[ENGINE_SHED_TAG], .retry_after_ms = -1};
        c->state = CALL_WAITING;
        uv_timer_init(e->loop, &c->timer);
        c->timer.data = c;
        c->timer_live = 1;
        uv_timer_start(&c->timer, on_no_member, 0, 0);
        engine__list_push(&c->d->waiting, c);
        e->stats.waiting++;
    } else {
        if (g->policy == CONFIG_POLICY_WEIGHTED) first = group_turn(e, g, c);
        c->route->turn = first;
        gq *q = group_atomic(e) ? gq_get(e, g->name) : NULL;
        dep *d = dep_find(e, g->members[first]);
        int cls = d ? member_class(c, d) : -1;
        if (q && cls >= 0) {
            /* One Redis: the group script decides among the members. */
            c->d = d;
            c->cls = cls;
            d->classes[cls].st.acquires++;
            c->state = CALL_PENDING;
            c->route->gq = q;
            engine__turn_arrive(e, c, &q->q, uv_now(e->loop));
            engine__list_push(&q->q, c);
            e->stats.queued++;
            engine__flush_arm(e);
        } else if (group_route_steps(c) != 0) {
            free(rt);
            free(c);
            return SL_ENOMEM;
        }
    }
    if (out) *out = c;
    return 0;
}
