/* engine: the public API (engine.h): create, acquire, cancel, settle,
 * feedback, reload, stop and stats. The rest of the engine is split by
 * concern; engine_internal.h lists the files. */
#define _GNU_SOURCE
#include "engine_internal.h"
#include "timeutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ratelimit.h"

const long long engine_wait_bounds_ms[ENGINE_WAIT_BUCKETS] = {0,   1,    5,    10,    50,    100,
                                                              500, 1000, 5000, 10000, 30000, 60000};
const char *const engine_shed_reasons[ENGINE_SHED_REASONS] = {
#define ENGINE_SHED_WORD(name, word, source) word,
    SLUICE_SHED_REASON_MAP(ENGINE_SHED_WORD)
#undef ENGINE_SHED_WORD
};

const char *const engine_outcome_names[ENGINE_OUTCOMES] = {
#define ENGINE_OUTCOME_WORD(name, word) word,
    SLUICE_OUTCOME_MAP(ENGINE_OUTCOME_WORD)
#undef ENGINE_OUTCOME_WORD
};

int engine_outcome_index(const char *word) {
    for (int i = 0; i < ENGINE_OUTCOMES; i++)
        if (strcmp(word, engine_outcome_names[i]) == 0) return i;
    return -1;
}

const char *const engine_dim_names[ENGINE_DIMS] = {
#define ENGINE_DIM_NAME(name, word, letter, field) word,
    SLUICE_DIM_MAP(ENGINE_DIM_NAME)
#undef ENGINE_DIM_NAME
};

void engine_seen_init(engine_seen *s) {
    for (int i = 0; i < ENGINE_DIMS; i++) s->limit[i] = s->remaining[i] = -1;
}

void engine_seen_from_feedback(const ratelimit_feedback *fb, engine_seen *s) {
    static const ratelimit_dim from[ENGINE_DIMS] = {RATELIMIT_REQUESTS, RATELIMIT_TOKENS, RATELIMIT_INPUT_TOKENS,
                                                    RATELIMIT_OUTPUT_TOKENS};
    engine_seen_init(s);
    for (int i = 0; i < ENGINE_DIMS; i++) {
        ratelimit_value v;
        /* Each dimension from its own headers only: for Anthropic,
         * ratelimit_get() stands the more restrictive of input and output
         * in for combined tokens, which the input and output dimensions
         * see directly. */
        /* Only the providers' own headers count per minute. The generic
         * families (RateLimit, RateLimit-Policy, X-RateLimit-*) describe a
         * window of their own (w=1 is a second) or none: read as a minute
         * they would be adopted as the fleet's limit. Their pause still
         * counts (ratelimit_settle_pause_ms). */
        if (ratelimit_get_own(fb, from[i], &v) != RATELIMIT_SRC_PROVIDER) continue;
        s->limit[i] = v.limit;
        s->remaining[i] = v.remaining;
    }
}

int engine_shed_reason_index(const char *reason) {
    for (int i = 0; i < ENGINE_SHED_OTHER; i++)
        if (strcmp(reason, engine_shed_reasons[i]) == 0) return i;
    return ENGINE_SHED_OTHER;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void engine__elog(engine *e, int level, const char *fmt, ...) {
    if (!e->log) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    e->log(e->log_ud, level, msg);
}

/* A script failed for a reason that is not routine (not a redirect, not a
 * flushed deployment): remember it for STATUS and say it once. */
void dep_script_error(dep *d, const char *what, const char *err) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s failed: %s", what, err ? err : "no reply");
    if (strcmp(buf, d->script_error) != 0)
        engine__elog(d->e, CONFIG_LOG_ERROR, "deployment %s: %s (serving it locally meanwhile)", d->name, buf);
    snprintf(d->script_error, sizeof(d->script_error), "%s", buf);
}

/* ---- public API ---------------------------------------------------------------- */

int engine_new(uv_loop_t *loop, config *cfg, const char *agent_id, engine **out) {
    *out = NULL;
    engine *e = calloc(1, sizeof(*e));
    if (!e) return SL_ENOMEM;
    e->loop = loop;
    e->cfg = cfg;
    if (agent_id && *agent_id) {
        snprintf(e->agent_id, sizeof(e->agent_id), "%s", agent_id);
    } else if (cfg->agent.id[0]) {
        snprintf(e->agent_id, sizeof(e->agent_id), "%s", cfg->agent.id);
    } else {
        char host[64] = "localhost";
        gethostname(host, sizeof(host) - 1);
        snprintf(e->agent_id, sizeof(e->agent_id), "%s:%ld", host, (long)getpid());
    }
    snprintf(e->agent_arg, sizeof(e->agent_arg), "@%s", e->agent_id);
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        if (!dep_add(e, &cfg->deployments[i])) {
            for (dep *d = e->deps, *nx; d; d = nx) {
                nx = d->next;
                free(d);
            }
            free(e);
            return SL_EINVAL;
        }
    }
    rconn_events ev = {engine__on_redis_up, engine__on_redis_down};
    int rc = rrouter_new(loop, &cfg->redis, ev, e, &e->redis);
    if (rc != 0) {
        for (dep *d = e->deps, *nx; d; d = nx) {
            nx = d->next;
            free(d);
        }
        free(e);
        return rc;
    }
    uv_check_init(loop, &e->flush_check);
    uv_idle_init(loop, &e->flush_idle);
    uv_timer_init(loop, &e->heartbeat_timer);
    uv_timer_init(loop, &e->hold_timer);
    e->hold_timer.data = e;
    uv_timer_init(loop, &e->settle_timer);
    e->settle_timer.data = e;
    uv_timer_init(loop, &e->defer_timer);
    e->defer_timer.data = e;
    e->flush_check.data = e;
    e->flush_idle.data = e;
    e->heartbeat_timer.data = e;
    e->handles_open = 6;
    e->mode_since_ms = wall_clock_ms();
    *out = e;
    return 0;
}

void engine_start(engine *e) {
    e->start_ms = uv_now(e->loop);
    rrouter_start(e->redis);
    uint64_t tick = (uint64_t)engine_tick_ms(e);
    uv_timer_start(&e->heartbeat_timer, engine__on_heartbeat_timer, tick, tick);
}

int engine_acquire(engine *e, const char *deployment, long long tokens, long long max_wait_ms, const char *lane,
                   const char *tenant, engine_acquire_cb cb, void *arg, engine_call **out) {
    engine_req rq = {.name = deployment, .tokens = tokens, .max_wait_ms = max_wait_ms, .lane = lane, .tenant = tenant};
    return engine_acquire_req(e, &rq, cb, arg, out);
}

static int name_ok(const char *s) { return !s || strlen(s) <= CONFIG_NAME_MAX; }

const char *engine_acquire_req_error(const engine *e, const engine_req *rq) {
    if (!rq || !rq->name) return NULL;
    if (rq->tokens > SLUICE_AMOUNT_MAX || rq->max_wait_ms > SLUICE_AMOUNT_MAX ||
        (rq->split && (rq->input > SLUICE_AMOUNT_MAX || rq->output > SLUICE_AMOUNT_MAX)))
        return sluice_req_error(SLUICE_REQ_TOO_MANY);
    if (rq->split && (rq->input < 0 || rq->output < 0)) return sluice_req_error(SLUICE_REQ_SPLIT_NEGATIVE);
    if (rq->split && rq->tokens != 0 && rq->tokens != rq->input + rq->output)
        return sluice_req_error(SLUICE_REQ_SPLIT_SUM);
    if (rq->tokens <= 0 && (!rq->split || rq->input + rq->output <= 0) && engine__budget_applies_any(e, rq))
        return sluice_req_error(SLUICE_REQ_BUDGET_ESTIMATE);
    if (rq->split || rq->tokens <= 0) return NULL;
    const struct config_deployment *d = config_deployment(e->cfg, rq->name);
    const struct config_group *g = d ? NULL : config_group(e->cfg, rq->name);
    int need = d ? engine__cfg_split(d) : 0;
    for (size_t i = 0; g && i < g->nmembers; i++) need |= engine__cfg_split(g->members_[i]);
    if (need) return sluice_req_error(d ? SLUICE_REQ_SPLIT_NEEDED : SLUICE_REQ_SPLIT_NEEDED_GROUP);
    return NULL;
}

/* What engine_acquire_req() refuses at once, before any budget is asked. */
static int acquire_check(engine *e, const engine_req *rq, engine_acquire_cb cb) {
    if (e->stopping) return SL_ECLOSING;
    if (!cb || !rq || !rq->name || rq->tokens < 0 || !name_ok(rq->lane) || !name_ok(rq->tenant) || !name_ok(rq->tag) ||
        !name_ok(rq->client))
        return SL_EINVAL;
    if (engine_acquire_req_error(e, rq)) return SL_EINVAL;
    dep *d = dep_find(e, rq->name);
    if (!d || !d->cfg) return config_group(e->cfg, rq->name) ? 0 : SL_EUNKNOWN;
    if (rq->tag && rq->tag[0] && !config_has_tag(d->cfg, rq->tag)) return SL_EINVAL;
    if (!config_lane(d->cfg, rq->lane) && rq->lane && rq->lane[0]) return SL_EINVAL;
    return 0;
}

int engine_acquire_req(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **out) {
    if (out) *out = NULL;
    int rc = acquire_check(e, rq, cb);
    if (rc != 0) return rc;
    /* A request that draws from a budget in money reserves it first
     * (engine_budget.c), then comes back to engine__acquire_direct(). */
    rc = engine__budget_acquire(e, rq, cb, arg, out);
    if (rc != 1) return rc;
    return engine__acquire_direct(e, rq, cb, arg, out);
}

int engine__acquire_direct(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **out) {
    if (out) *out = NULL;
    if (e->stopping) return SL_ECLOSING;
    if (!cb || !rq || !rq->name || rq->tokens < 0 || !name_ok(rq->lane) || !name_ok(rq->tenant) || !name_ok(rq->tag))
        return SL_EINVAL;
    if (engine_acquire_req_error(e, rq)) return SL_EINVAL;
    const char *lane = rq->lane, *tenant = rq->tenant;
    dep *d = dep_find(e, rq->name);
    if (!d || !d->cfg) {
        const struct config_group *g = config_group(e->cfg, rq->name);
        if (!g) return SL_EUNKNOWN;
        return group_acquire(e, g, rq, cb, arg, out);
    }
    if (rq->tag && rq->tag[0] && !config_has_tag(d->cfg, rq->tag)) return SL_EINVAL;
    const struct config_lane *l = config_lane(d->cfg, lane);
    if (!l && lane && lane[0]) return SL_EINVAL;
    const struct config_tenant *t = config_tenant(d->cfg, tenant);
    int cls = dep_class(d, l ? l->name : "", t ? t->name : "default");
    if (cls < 0) return SL_ENOMEM;
    engine_call *c = calloc(1, sizeof(*c));
    if (!c) return SL_ENOMEM;
    c->e = e;
    c->d = d;
    c->cb = cb;
    c->arg = arg;
    call_estimate(c, rq);
    c->cls = cls;
    if (rq->max_wait_ms >= 0) c->max_wait_ms = rq->max_wait_ms;
    else if (l && l->max_wait_ms >= 0) c->max_wait_ms = l->max_wait_ms;
    else c->max_wait_ms = d->cfg->max_wait_ms;
    c->start_ms = c->age_ms = uv_now(e->loop);
    c->state = CALL_PENDING;
    engine__turn_arrive(e, c, &d->classes[cls].q, c->start_ms);
    engine__class_push(d, c);
    e->stats.acquires++;
    d->classes[cls].st.acquires++;
    engine__flush_arm(e);
    if (out) *out = c;
    return 0;
}

void engine_cancel(engine_call *c) {
    if (!c || c->state == CALL_DONE || c->canceled) return;
    engine *e = c->e;
    dep *d = c->d;
    c->canceled = 1;
    e->stats.cancels++;
    switch (c->state) {
    case CALL_PENDING:
        if (c->route && c->route->gq) {
            engine__list_remove(&c->route->gq->q, c);
            e->stats.queued--;
            c->route->gq = NULL;
        } else {
            engine__class_remove(d, c);
        }
        call_free(c);
        break;
    case CALL_INFLIGHT: break; /* on_reserve gives a grant back and frees the call */
    case CALL_WAITING: {
        const char *num = engine__grant_number(c->grant.id);
        if (num) engine__queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
        engine__list_remove(&d->waiting, c);
        e->stats.waiting--;
        uv_timer_stop(&c->timer);
        c->state = CALL_DONE;
        call_free(c);
        break;
    }
    case CALL_DONE: break;
    case CALL_BUDGET: engine__budget_cancel(c); break;
    }
}

int engine_settle(engine *e, const char *grant_id, long long actual_tokens, engine_outcome outcome,
                  long long pause_ms) {
    usage_rec u = {actual_tokens < 0 ? -1 : actual_tokens, -1, -1, -1, -1};
    return engine_settle_usage(e, grant_id, &u, outcome, pause_ms, NULL);
}

int engine_settle_usage(engine *e, const char *grant_id, const usage_rec *usage, engine_outcome outcome,
                        long long pause_ms, const engine_seen *seen) {
    usage_rec u = usage ? *usage : USAGE_REC_UNKNOWN;
    /* One figure for the combined usage: input + output when only those
     * were given; input and output together or not at all; cache reads
     * within the input. */
    if ((u.input < 0) != (u.output < 0)) return SL_EINVAL;
    if (u.input >= 0 && u.tokens < 0) u.tokens = u.input + u.output;
    if (u.cache_read >= 0 && (u.input < 0 || u.cache_read > u.input)) return SL_EINVAL;
    const char *colon = grant_id ? strrchr(grant_id, ':') : NULL;
    if (!colon || colon == grant_id || (size_t)(colon - grant_id) > CONFIG_NAME_MAX) return SL_EINVAL;
    if (outcome < ENGINE_OK || outcome >= ENGINE_OUTCOMES) return SL_EINVAL;
    const char *num = colon + 1;
    int local = num[0] == 'L';
    const char *digits = local ? num + 1 : num;
    if (!*digits || strlen(digits) > 15 || strspn(digits, "0123456789") != strlen(digits)) return SL_EINVAL;
    char name[CONFIG_NAME_MAX + 1];
    memcpy(name, grant_id, (size_t)(colon - grant_id));
    name[colon - grant_id] = '\0';
    dep *d = dep_find(e, name);
    if (!d || !d->cfg) return SL_EUNKNOWN;
    e->stats.settles++;
    if (pause_ms >= 0) e->stats.settle_pauses++;
    d->outcomes[outcome]++;
    if (outcome == ENGINE_THROTTLED) e->stats.throttled++;
    if (outcome == ENGINE_QUOTA) {
        e->stats.quota_events++;
        engine__elog(e, CONFIG_LOG_WARN,
                     "deployment %s: the provider reported a hard quota error: it is out until its reset%s", d->name,
                     d->cfg->group_ ? " (its group routes to the other members)" : "");
    }
    if (u.tokens >= 0) e->stats.tokens_actual += (unsigned long long)u.tokens;
    engine__budget_settle(e, grant_id, &u, outcome);
    /* With Redis, the settle's reply brings the pause and its shift for the
     * whole fleet (one round trip later); without, it applies here. */
    if (pause_ms > 0 && !dep_uses_redis(d)) dep_pause(d, pause_ms, 1);
    if (local) {
        /* A local grant: only its feedback reaches Redis (if reachable). */
        if (outcome == ENGINE_THROTTLED || outcome == ENGINE_QUOTA || pause_ms >= 0 || seen)
            engine__queue_settle(d, "-", NULL, outcome, pause_ms, seen);
        return 0;
    }
    engine__queue_settle(d, num, &u, outcome, pause_ms, seen);
    return 0;
}

int engine_feedback(engine *e, const char *deployment, engine_outcome outcome, long long pause_ms) {
    return engine_feedback_seen(e, deployment, outcome, pause_ms, NULL);
}

int engine_feedback_seen(engine *e, const char *deployment, engine_outcome outcome, long long pause_ms,
                         const engine_seen *seen) {
    dep *d = dep_find(e, deployment);
    if (!d || !d->cfg) return SL_EUNKNOWN;
    if (outcome == ENGINE_THROTTLED) e->stats.throttled++;
    /* With Redis, the settle's reply brings the pause and its shift for the
     * whole fleet (one round trip later); without, it applies here. */
    if (pause_ms > 0 && !dep_uses_redis(d)) dep_pause(d, pause_ms, 1);
    engine__queue_settle(d, "-", NULL, outcome, pause_ms, seen);
    return 0;
}

/* ---- reload, stop, stats ------------------------------------------------------------ */

int engine_reload(engine *e, config *cfg) {
    config *old = e->cfg;
    /* Read at a start only (docs/configuration.md; sluiced's log says
     * so): the heartbeat timer ticks at the first heartbeat_ms, and the
     * promises and the others' hold follow these two, so a reload that
     * changed them would promise what the timer cannot keep. */
    cfg->agent.heartbeat_ms = old->agent.heartbeat_ms;
    cfg->agent.silent_hold_ms = old->agent.silent_hold_ms;
    /* So is the redis section but max_script_ms: the router keeps the
     * connections it made at the start, so the configuration in force
     * (INFO's redis_endpoint, the timeouts) must stay theirs. The new
     * file's redis strings go with the old configuration. */
    {
        config_redis started = old->redis;
        old->redis = cfg->redis;
        started.max_script_ms = cfg->redis.max_script_ms;
        cfg->redis = started;
    }
    /* And the listeners' settings, which INFO reports: the socket and the
     * metrics endpoint stay where they were opened. */
    {
        char *t;
        t = cfg->agent.socket, cfg->agent.socket = old->agent.socket, old->agent.socket = t;
        t = cfg->agent.socket_owner, cfg->agent.socket_owner = old->agent.socket_owner, old->agent.socket_owner = t;
        t = cfg->agent.socket_group, cfg->agent.socket_group = old->agent.socket_group, old->agent.socket_group = t;
        t = cfg->agent.metrics, cfg->agent.metrics = old->agent.metrics, old->agent.metrics = t;
        t = cfg->agent.metrics_host, cfg->agent.metrics_host = old->agent.metrics_host, old->agent.metrics_host = t;
        cfg->agent.metrics_port = old->agent.metrics_port;
        cfg->agent.socket_mode = old->agent.socket_mode;
    }
    for (dep *d = e->deps; d; d = d->next) d->cfg = NULL;
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        dep *d = dep_find(e, cfg->deployments[i].name);
        if (!d) d = dep_add(e, &cfg->deployments[i]);
        if (!d) continue;
        dep_set_cfg(d, &cfg->deployments[i]);
        d->configured = 0;
    }
    e->cfg = cfg;
    engine__budget_reconfigure(e);
    for (dep *d = e->deps; d; d = d->next) {
        if (d->cfg) {
            dep_configure(d);
            continue;
        }
        engine_call *c;
        while ((c = dep_pop_any(d)) != NULL) group_member_removed(c);
    }
    config_free(old);
    return 0;
}

const config *engine_config(const engine *e) { return e->cfg; }

void engine_set_log(engine *e, engine_log_fn fn, void *ud) {
    e->log = fn;
    e->log_ud = ud;
}

const char *engine_agent_id(const engine *e) { return e->agent_id; }

static void on_engine_handle_closed(uv_handle_t *h) {
    engine *e = h->data;
    if (--e->handles_open == 0 && e->stop_done) {
        void (*done)(void *) = e->stop_done;
        e->stop_done = NULL;
        done(e->stop_arg);
    }
}

static void on_redis_closed(void *arg) {
    engine *e = arg;
    e->redis = NULL;
    on_engine_handle_closed((uv_handle_t *)&e->heartbeat_timer);
}

void engine__maybe_finish_stop(engine *e) {
    if (!e->stopping || e->stopped) return;
    for (dep *d = e->deps; d; d = d->next)
        if (d->nsettles && dep_ready(d) && d->configured && !d->settling) dep_flush_settles(d);
    if (e->calls_out > 0) return;
    e->stopped = 1;
    uv_check_stop(&e->flush_check);
    uv_idle_stop(&e->flush_idle);
    uv_timer_stop(&e->heartbeat_timer);
    uv_close((uv_handle_t *)&e->flush_check, on_engine_handle_closed);
    uv_close((uv_handle_t *)&e->flush_idle, on_engine_handle_closed);
    uv_timer_stop(&e->hold_timer);
    uv_close((uv_handle_t *)&e->hold_timer, on_engine_handle_closed);
    uv_timer_stop(&e->settle_timer);
    uv_close((uv_handle_t *)&e->settle_timer, on_engine_handle_closed);
    uv_timer_stop(&e->defer_timer);
    uv_close((uv_handle_t *)&e->defer_timer, on_engine_handle_closed);
    /* The heartbeat timer's close is counted when Redis is closed too. */
    uv_close((uv_handle_t *)&e->heartbeat_timer, NULL);
    rrouter_close(e->redis, on_redis_closed, e);
}

void engine_stop(engine *e, void (*done)(void *arg), void *arg) {
    if (e->stopping) return;
    e->stopping = 1;
    e->stop_done = done;
    e->stop_arg = arg;
    engine__budget_stop(e);
    for (gq *q = e->gqs; q; q = q->next) engine__gq_drain(q, SL_ECLOSING, SLUICE_MSG_CLOSING);
    for (dep *d = e->deps; d; d = d->next) {
        engine_call *c;
        while ((c = dep_pop_any(d)) != NULL) call_complete(c, SL_ECLOSING, NULL, SLUICE_MSG_CLOSING);
        while (d->waiting.n) {
            c = engine__list_pop(&d->waiting);
            e->stats.waiting--;
            uv_timer_stop(&c->timer);
            const char *num = engine__grant_number(c->grant.id);
            if (num) engine__queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
            call_complete(c, SL_ECLOSING, NULL, SLUICE_MSG_CLOSING);
        }
        if (dep_ready(d) && d->cfg) dep_heartbeat(d, 1);
    }
    engine__maybe_finish_stop(e);
}

void engine_free(engine *e) {
    if (!e) return;
    for (dep *d = e->deps, *nx; d; d = nx) {
        nx = d->next;
        free(d->settles);
        free(d->classes);
        free(d);
    }
    free(e->gstats);
    engine__budget_free(e);
    engine__turn_free(e);
    for (gq *q = e->gqs, *nx; q; q = nx) {
        nx = q->next;
        free(q);
    }
    config_free(e->cfg);
    free(e);
}

void engine_foreach_dep_counts(const engine *e, engine_dep_counts_fn fn, void *ud) {
    for (const dep *d = e->deps; d; d = d->next) {
        if (!d->cfg) continue;
        engine_dep_counts c;
        memcpy(c.outcomes, d->outcomes, sizeof(c.outcomes));
        c.retries_allowed = d->retries[0];
        c.retries_refused = d->retries[1];
        fn(ud, d->name, &c);
    }
}

void engine_get_stats(const engine *e, engine_stats *out) {
    *out = e->stats;
    out->callers = e->nturns;
    if (e->redis) {
        rconn_stats rs;
        rrouter_get_stats(e->redis, &rs, &out->cluster_redirects, &out->slot_map_refreshes, &out->redis_nodes);
        out->redis_calls = rs.calls;
        out->redis_errors = rs.errors;
        out->redis_timeouts = rs.timeouts;
        out->noscript_reloads = rs.noscript_reloads;
        out->redis_error = rrouter_last_error(e->redis);
        for (const dep *d = e->deps; d && !out->redis_error[0]; d = d->next)
            if (d->script_error[0]) out->redis_error = d->script_error;
    } else {
        out->redis_error = "";
    }
    out->redis_up = e->redis_up;
    out->mode = e->redis_up ? "redis" : "local";
    out->mode_since_ms = e->mode_since_ms;
}

void engine_foreach_class(const engine *e, engine_class_fn fn, void *ud) {
    for (const dep *d = e->deps; d; d = d->next)
        for (size_t i = 0; i < d->nclasses; i++) {
            engine_class_stats st = d->classes[i].st;
            st.queued = d->classes[i].q.n;
            fn(ud, d->name, d->classes[i].lane, d->classes[i].tenant, &st);
        }
}

void engine_foreach_dim(const engine *e, engine_dim_fn fn, void *ud) {
    for (const dep *d = e->deps; d; d = d->next) {
        if (!d->cfg) continue;
        for (int k = 0; k < ENGINE_DIMS; k++)
            if (d->rates[k].configured > 0) fn(ud, d->name, engine_dim_names[k], &d->rates[k]);
    }
}

void engine_foreach_group(const engine *e, engine_group_fn fn, void *ud) {
    for (size_t i = 0; i < e->ngstats; i++) fn(ud, e->gstats[i].name, &e->gstats[i].st);
}
