/* engine_estimate: what a request would get now, reserving nothing
 * (ESTIMATE), and patience: the requests answered within their deadline
 * (engine_note_patience). See engine.h.
 *
 * An estimate asks the reserve script itself, run dry (lua/reserve.lua,
 * '@dry': it decides as a reserve would and writes nothing), of each
 * deployment concerned, or asks the local pacing (engine_local.c) where an
 * acquire would be paced locally. A group's request is asked of the
 * members the group script would ask, each with the request's whole max
 * wait, and the group script's rule picks the member from their answers. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct est_op est_op;

/* One deployment asked: a group's member, or the deployment itself. */
typedef struct est_member {
    est_op *op;
    dep *d;
    char lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1]; /* its class (reserve's quads) */
    engine_estimate est;
    char reason[16]; /* est.reason's storage when it came from Redis */
    int status;      /* SL_OK, or SL_EUNAVAIL (fail closed) */
} est_member;

struct est_op {
    engine *e;
    engine_estimate_cb cb;
    void *arg;
    engine_req rq;
    long long max_wait_ms;
    int group;          /* a group's request (its configuration may be reloaded meanwhile) */
    long long spill_ms; /* the group's spill_ms when asked */
    size_t n, left;
    est_member m[CONFIG_GROUP_MAX];
    uv_timer_t timer; /* answers on the next turn when no Redis call is out */
    int timer_live;
};

static void est_free_timer(uv_handle_t *h) { free(h->data); }

/* The group script's rule (lua/reserve.lua, reserve_group) on the members'
 * answers, each asked with the whole max wait w: the first member in order
 * whose slot is within min(spill_ms, w); else the one whose slot is
 * soonest within w; else a shed with the first member's reason and, as
 * a hint, when the soonest could serve it (or comes back from a health
 * shed). */
static void est_pick(est_op *op, engine_estimate *out, int *status) {
    long long w = op->max_wait_ms, ws = op->spill_ms < w ? op->spill_ms : w;
    est_member *best = NULL;
    long long soon = -1;
    for (size_t t = 0; t < op->n; t++) {
        est_member *m = &op->m[t];
        if (m->status != SL_OK) continue;
        if (m->est.granted && m->est.wait_ms <= ws) {
            *out = m->est;
            out->group = 1;
            return;
        }
        int why = m->est.granted ? ENGINE_SHED_RPM : engine_shed_reason_index(m->est.reason);
        int rate = m->est.granted || why == ENGINE_SHED_RPM || why == ENGINE_SHED_TPM || why == ENGINE_SHED_ITPM ||
                   why == ENGINE_SHED_OTPM || why == ENGINE_SHED_PAUSED || why == ENGINE_SHED_LANE ||
                   why == ENGINE_SHED_CEILING;
        int back = why == ENGINE_SHED_BREAKER || why == ENGINE_SHED_QUOTA || why == ENGINE_SHED_CONCURRENCY;
        if (rate && m->est.wait_ms >= 0) {
            if (m->est.wait_ms <= w && (!best || m->est.wait_ms < best->est.wait_ms)) best = m;
            if (soon < 0 || m->est.wait_ms < soon) soon = m->est.wait_ms;
        } else if (back && m->est.retry_after_ms >= 0) {
            if (soon < 0 || m->est.retry_after_ms < soon) soon = m->est.retry_after_ms;
        }
    }
    if (best) {
        *out = best->est;
        out->granted = 1;
        out->reason = "";
        out->retry_after_ms = -1;
        out->group = 1;
        return;
    }
    /* Nobody within the max wait: the first member's verdict names it. */
    est_member *first = NULL;
    for (size_t t = 0; t < op->n && !first; t++)
        if (op->m[t].status == SL_OK) first = &op->m[t];
    if (!first) {
        *status = op->n ? op->m[0].status : SL_OK;
        memset(out, 0, sizeof(*out));
        out->deployment = "";
        out->reason = engine_shed_reasons[ENGINE_SHED_TAG];
        out->retry_after_ms = -1;
        out->wait_ms = -1;
        out->max_wait_ms = w;
        out->group = 1;
        return;
    }
    *out = first->est;
    out->granted = 0;
    out->group = 1;
    out->deployment = "";
    if (first->est.granted) out->reason = engine_shed_reasons[ENGINE_SHED_RPM];
    out->retry_after_ms = soon < 0 ? -1 : soon > w ? soon - w : soon > 0 ? soon : 1;
    out->wait_ms = soon;
}

/* Every member answered: the caller's callback, then the op goes. */
static void est_finish(est_op *op) {
    engine_estimate out;
    int status = SL_OK;
    if (op->group) {
        est_pick(op, &out, &status);
    } else {
        out = op->m[0].est;
        status = op->m[0].status;
    }
    out.max_wait_ms = op->max_wait_ms;
    op->e->stats.estimates++;
    if (status == SL_OK && out.local) op->e->stats.estimates_local++;
    if (status == SL_OK) op->cb(op->arg, SL_OK, &out, NULL);
    else op->cb(op->arg, status, NULL, status == SL_EUNAVAIL ? LOCAL_CLOSED_MSG : sl_strerror(status));
    if (op->timer_live) uv_close((uv_handle_t *)&op->timer, est_free_timer);
    else free(op);
}

static void on_est_timer(uv_timer_t *t) { est_finish(t->data); }

/* m answered locally (Redis not used for it, or its call failed). */
static void est_local(est_member *m) { m->status = local_estimate(m->d, &m->op->rq, m->op->max_wait_ms, &m->est); }

static void on_est_reply(void *arg, redisReply *r, const char *err) {
    est_member *m = arg;
    est_op *op = m->op;
    engine *e = op->e;
    e->calls_out--;
    /* The reserve reply of one item, run dry: its verdict carries the
     * wait to its slot last (wire_read_verdict). */
    wire_reserve_reply rr;
    wire_verdict v;
    if (wire_read_reserve(r, 1, &rr) != 0 || wire_read_verdict(rr.items, 0, WIRE_DRY, 0, &v) != 0) {
        /* A timeout, a lost connection or an error: as an acquire would be
         * decided then, locally. */
        est_local(m);
    } else {
        engine_estimate *x = &m->est;
        x->local = 0;
        x->deployment = m->d->name;
        x->tokens = op->rq.split ? op->rq.input + op->rq.output : op->rq.tokens;
        x->granted = v.kind != WIRE_SHED;
        x->wait_ms = v.kind == WIRE_GRANT ? v.wait_ms : v.dry_wait_ms;
        if (v.kind != WIRE_SHED && x->wait_ms < 0) x->wait_ms = 0;
        x->retry_after_ms = v.kind == WIRE_SHED ? v.after_ms : -1;
        if (v.kind == WIRE_SHED) {
            const char *rs = v.reason ? v.reason : "";
            snprintf(m->reason, sizeof(m->reason), "%s", engine_shed_reasons[engine_shed_reason_index(rs)]);
            x->reason = m->reason;
        } else {
            x->reason = "";
        }
    }
    if (--op->left == 0) est_finish(op);
    engine__maybe_finish_stop(e);
}

/* Asks m: the reserve script run dry when an acquire would go to Redis,
 * else the local pacing at once. Returns 1 when a Redis call is out. */
static int est_ask(est_member *m) {
    est_op *op = m->op;
    engine *e = op->e;
    dep *d = m->d;
    if (!dep_uses_redis(d)) {
        est_local(m);
        return 0;
    }
    wire_estimate x = {.tokens = op->rq.split ? op->rq.input + op->rq.output : op->rq.tokens,
                       .split = op->rq.split,
                       .input = op->rq.input,
                       .output = op->rq.output,
                       .exact = op->rq.exact,
                       .partial = op->rq.partial};
    /* No "@<agent>" first: a dry run is no proof of life (it writes
     * nothing, the agents set included). */
    int quads = d->cfg->nlanes || d->cfg->ntenants;
    wire_args a;
    wire_args_init(&a);
    wire_reserve_begin(&a, NULL);
    wire_reserve_item(&a, &x, op->max_wait_ms, 0, quads ? m->lane : NULL, m->tenant);
    int rc = wire_args_done(&a, WIRE_DRY);
    if (rc == 0) rc = rrouter_script(e->redis, SCRIPT_RESERVE, d->keys, a.argc, a.argv, on_est_reply, m);
    wire_args_free(&a);
    if (rc != 0) {
        est_local(m);
        return 0;
    }
    e->calls_out++;
    return 1;
}

/* m's class on its deployment, as an acquire would be queued (a lane it
 * does not have: SL_EINVAL for a deployment asked by name; its default
 * lane for a group's member). */
static int est_class(est_member *m, const engine_req *rq, int member) {
    const struct config_deployment *cfg = m->d->cfg;
    const struct config_lane *l = config_lane(cfg, rq->lane);
    if (!l && rq->lane && rq->lane[0]) {
        if (!member) return SL_EINVAL;
        l = config_lane(cfg, NULL);
    }
    const struct config_tenant *t = config_tenant(cfg, rq->tenant);
    snprintf(m->lane, sizeof(m->lane), "%s", l ? l->name : "");
    snprintf(m->tenant, sizeof(m->tenant), "%s", t ? t->name : "default");
    return 0;
}

long long engine_max_wait(const engine *e, const engine_req *rq) {
    if (!rq || !rq->name) return -1;
    if (rq->max_wait_ms >= 0) return rq->max_wait_ms;
    const struct config_deployment *d = config_deployment(e->cfg, rq->name);
    if (!d) {
        const struct config_group *g = config_group(e->cfg, rq->name);
        return g ? g->max_wait_ms : -1;
    }
    const struct config_lane *l = config_lane(d, rq->lane);
    if (l && l->max_wait_ms >= 0) return l->max_wait_ms;
    return d->max_wait_ms;
}

static int name_ok(const char *s) { return !s || strlen(s) <= CONFIG_NAME_MAX; }

int engine_estimate_req(engine *e, const engine_req *rq, engine_estimate_cb cb, void *arg) {
    if (e->stopping) return SL_ECLOSING;
    if (!cb || !rq || !rq->name || rq->tokens < 0 || !name_ok(rq->lane) || !name_ok(rq->tenant) || !name_ok(rq->tag))
        return SL_EINVAL;
    if (engine_acquire_req_error(e, rq)) return SL_EINVAL;
    dep *d = dep_find(e, rq->name);
    const struct config_group *g = NULL;
    if (!d || !d->cfg) {
        g = config_group(e->cfg, rq->name);
        if (!g) return SL_EUNKNOWN;
        d = NULL;
    } else if (rq->tag && rq->tag[0] && !config_has_tag(d->cfg, rq->tag)) {
        return SL_EINVAL;
    }
    est_op *op = calloc(1, sizeof(*op));
    if (!op) return SL_ENOMEM;
    op->e = e;
    op->cb = cb;
    op->arg = arg;
    op->rq = *rq;
    op->rq.lane = op->rq.tenant = op->rq.tag = op->rq.name = NULL; /* the strings are the caller's */
    op->group = g != NULL;
    op->spill_ms = g ? g->spill_ms : 0;
    op->max_wait_ms = engine_max_wait(e, rq);
    if (g) {
        int order[CONFIG_GROUP_MAX];
        size_t n = group_ask_order(e, g, rq, order);
        for (size_t i = 0; i < n; i++) {
            est_member *m = &op->m[op->n];
            m->op = op;
            m->d = dep_find(e, g->members[order[i]]);
            if (!m->d || !m->d->cfg) continue;
            est_class(m, rq, 1);
            op->n++;
        }
    } else {
        est_member *m = &op->m[0];
        m->op = op;
        m->d = d;
        if (est_class(m, rq, 0) != 0) {
            free(op);
            return SL_EINVAL;
        }
        op->n = 1;
    }
    /* The asks: left counts the Redis calls out, plus one held here so
     * that no reply can finish the op before every member was asked. */
    op->left = 1;
    for (size_t i = 0; i < op->n; i++) op->left += (size_t)est_ask(&op->m[i]);
    if (--op->left == 0) {
        /* Nothing went to Redis: answer on the next turn (callbacks never
         * run from within the call that registers them). */
        uv_timer_init(e->loop, &op->timer);
        op->timer.data = op;
        op->timer_live = 1;
        uv_timer_start(&op->timer, on_est_timer, 0, 0);
    }
    return 0;
}

/* ---- patience ---------------------------------------------------------------- */

/* The class stats of a request named so (see engine_note_patience), or
 * NULL with *rc set. */
static engine_class_stats *class_of(engine *e, const char *deployment, const char *lane, const char *tenant, int *rc) {
    *rc = SL_EUNKNOWN;
    if (!deployment) return NULL;
    dep *d = dep_find(e, deployment);
    if (!d || !d->cfg) {
        /* A group's request that no member served: its first member, where
         * the group script counts the shed. */
        const struct config_group *g = config_group(e->cfg, deployment);
        d = g && g->nmembers ? dep_find(e, g->members[0]) : NULL;
        if (!d || !d->cfg) return NULL;
    }
    const struct config_lane *l = config_lane(d->cfg, lane && strlen(lane) <= CONFIG_NAME_MAX ? lane : NULL);
    if (!l) l = config_lane(d->cfg, NULL);
    const struct config_tenant *t = config_tenant(d->cfg, tenant && strlen(tenant) <= CONFIG_NAME_MAX ? tenant : NULL);
    int cls = dep_class(d, l ? l->name : "", t ? t->name : "default");
    if (cls < 0) {
        *rc = SL_ENOMEM;
        return NULL;
    }
    *rc = 0;
    return &d->classes[cls].st;
}

int engine_note_patience(engine *e, const char *deployment, const char *lane, const char *tenant, int within_deadline) {
    int rc;
    engine_class_stats *st = class_of(e, deployment, lane, tenant, &rc);
    if (!st) return rc;
    st->answered++;
    e->stats.answered++;
    if (within_deadline) {
        st->within++;
        e->stats.within++;
    }
    return 0;
}

int engine_note_abandoned(engine *e, const char *deployment, const char *lane, const char *tenant,
                          long long waited_ms) {
    int rc;
    engine_class_stats *st = class_of(e, deployment, lane, tenant, &rc);
    if (!st) return rc;
    if (waited_ms < 0) waited_ms = 0;
    st->abandoned++;
    int b = 0;
    while (b < ENGINE_WAIT_BUCKETS && waited_ms > engine_wait_bounds_ms[b]) b++;
    st->abandon_hist[b]++;
    st->abandon_sum_ms += (unsigned long long)waited_ms;
    return 0;
}

int engine_note_observed(engine *e, const char *deployment, const char *lane, const char *tenant, long long waited_ms,
                         int shed) {
    int rc;
    engine_class_stats *st = class_of(e, deployment, lane, tenant, &rc);
    if (!st) return rc;
    if (shed) st->would_shed++;
    else if (waited_ms > 0) {
        st->would_wait++;
        st->would_wait_ms += (unsigned long long)waited_ms;
    }
    return 0;
}
