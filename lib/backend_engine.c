/* backend_engine: embedded mode. The agent engine (lib/core/engine.c, the
 * same code sluiced runs) on the governor's loop thread; this file only
 * translates between gov operations and engine calls. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gov.h"
#include "ratelimit.h"

_Static_assert((int)SL_OUTCOME_OK == (int)ENGINE_OK && (int)SL_OUTCOME_THROTTLED == (int)ENGINE_THROTTLED &&
                   (int)SL_OUTCOME_FAILED == (int)ENGINE_FAILED && (int)SL_OUTCOME_CANCELLED == (int)ENGINE_CANCELLED &&
                   (int)SL_OUTCOME_QUOTA == (int)ENGINE_QUOTA,
               "sl_outcome and engine_outcome must agree");

typedef struct eng_backend {
    backend base;
    engine *e;
} eng_backend;

static engine *eng(backend *b) { return ((eng_backend *)b)->e; }

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    gov_op *op = arg;
    op->be = NULL;
    if (status == SL_OK)
        gov_acquired(op, g->id, g->waited_ms, g->tokens, g->local, g->deployment, g->group ? g->endpoint : "");
    else if (status == SL_ESHED) gov_shed(op, shed->reason, shed->retry_after_ms, NULL);
    else gov_failed(op, status, msg);
}

/* The engine's request of op (an acquire or an estimate). */
static engine_req op_req(const gov_op *op) {
    engine_req rq = {.name = op->dep,
                     .tokens = op->tokens,
                     .max_wait_ms = op->eff_wait_ms,
                     .lane = op->lane,
                     .tenant = op->tenant,
                     .tag = op->tag,
                     .split = op->split,
                     .input = op->input,
                     .output = op->output,
                     .exact = op->exact,
                     .partial = op->partial,
                     .caller = op->caller};
    return rq;
}

/* op->msg for an engine call on op's request that returned rc; the
 * messages are sluiced's (agent/commands.c), so both modes read alike. */
static void op_error(backend *b, gov_op *op, int rc) {
    const config *cfg = engine_config(eng(b));
    if (rc == SL_EUNKNOWN)
        snprintf(op->msg, sizeof(op->msg), "unknown deployment%s '%s'", cfg->ngroups ? " or group" : "", op->dep);
    else if (rc == SL_ECLOSING) snprintf(op->msg, sizeof(op->msg), "the governor is shutting down");
    else if (rc == SL_EINVAL && op->tag[0] && config_deployment(cfg, op->dep) &&
             !config_has_tag(config_deployment(cfg, op->dep), op->tag))
        snprintf(op->msg, sizeof(op->msg), "deployment '%s' does not carry tag '%s'", op->dep, op->tag);
    else if (rc == SL_EINVAL && op->lane[0]) {
        char lanes[160];
        config_lane_names(config_deployment(cfg, op->dep), lanes, sizeof(lanes));
        int n = snprintf(op->msg, sizeof(op->msg), "unknown lane '%s' for deployment '%s'", op->lane, op->dep);
        if (n > 0 && (size_t)n < sizeof(op->msg))
            snprintf(op->msg + n, sizeof(op->msg) - (size_t)n, " (its lanes: %.*s)", 120, lanes);
    } else if (rc != 0) snprintf(op->msg, sizeof(op->msg), "%s", sl_strerror(rc));
}

static void on_estimated(void *arg, int status, const engine_estimate *est, const char *msg) {
    gov_op *op = arg;
    if (!op->loop_done) {
        if (status == SL_OK)
            gov_estimated(op, est->granted, est->wait_ms, est->tokens, est->deployment, est->reason,
                          est->retry_after_ms, est->local);
        else gov_retried(op, status, 0, -1, msg);
    }
    gov_op_unref(op);
}

static int be_estimate(backend *b, gov_op *op) {
    engine_req rq = op_req(op);
    const char *why = engine_acquire_req_error(eng(b), &rq);
    if (why) {
        snprintf(op->msg, sizeof(op->msg), "%s (deployment '%s')", why, op->dep);
        return SL_EINVAL;
    }
    gov_op_ref(op); /* the engine holds op until its callback */
    int rc = engine_estimate_req(eng(b), &rq, on_estimated, op);
    if (rc != 0) {
        gov_op_unref(op);
        op_error(b, op, rc);
    }
    return rc;
}

static int be_acquire(backend *b, gov_op *op) {
    engine_call *call = NULL;
    engine_req rq = op_req(op);
    const char *why = engine_acquire_req_error(eng(b), &rq);
    if (why) {
        snprintf(op->msg, sizeof(op->msg), "%s (deployment '%s')", why, op->dep);
        return SL_EINVAL;
    }
    int rc = engine_acquire_req(eng(b), &rq, on_acquired, op, &call);
    op_error(b, op, rc);
    op->be = call;
    return rc;
}

static void be_cancel(backend *b, gov_op *op) {
    /* An acquire: its callback will not run and its reservation goes
     * back. A retry cannot be withdrawn: its callback sees loop_done. */
    if (op->kind == OP_ACQUIRE && op->be) engine_cancel(op->be);
    op->be = NULL;
}

static void be_give_back(backend *b, const char *grant_id) {
    engine_settle(eng(b), grant_id, -1, ENGINE_CANCELLED, -1);
}

static void be_settle(backend *b, gov_op *op) {
    /* Errors (a malformed id, a deployment removed) have nobody to go to:
     * sl_settle() does not wait, like the agent's coalesced settles. The
     * headers kept are read again for what the settle script learns from
     * them, as sluiced reads the forwarded ones (agent/commands.c). */
    engine_seen seen;
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    for (size_t i = 0; i < op->nhdrs; i++)
        ratelimit_add_header(&fb, op->hdrs[i].name, strlen(op->hdrs[i].name), op->hdrs[i].value,
                             strlen(op->hdrs[i].value), 0);
    engine_seen_from_feedback(&fb, &seen);
    engine_settle_usage(eng(b), op->grant_id, &op->actual, (engine_outcome)op->outcome, op->pause_ms,
                        op->nhdrs ? &seen : NULL);
}

static void on_retry(void *arg, int status, int allowed, long long balance, long long retry_after_ms) {
    gov_op *op = arg;
    if (!op->loop_done) gov_retried(op, status, allowed, allowed ? -1 : retry_after_ms, NULL);
    gov_op_unref(op);
}

static int be_retry(backend *b, gov_op *op) {
    gov_op_ref(op); /* the engine holds op until its callback */
    int rc = engine_retry(eng(b), op->dep, on_retry, op);
    if (rc != 0) {
        gov_op_unref(op);
        if (rc == SL_EUNKNOWN) snprintf(op->msg, sizeof(op->msg), "unknown deployment '%s'", op->dep);
    }
    return rc;
}

/* sl_open() waits until the engine is ready: connected to Redis with
 * every deployment's limits written (so the first acquires and retries
 * are decided by the fleet's state), or its first connection attempt
 * failed (then it paces locally, as sluiced does), or the connect timeout
 * passed. Readiness is polled: engine_status() reports mode "redis" once a
 * deployment is configured on the current connection. */
static void on_first_connect_poll(uv_timer_t *t);

typedef struct first_connect {
    uv_timer_t timer;
    engine *e;
    gov_op *op;
    uint64_t until;
    int asking;    /* status replies outstanding */
    int not_ready; /* deployments not in "redis" mode this round */
    int closing;
} first_connect;

static void on_first_connect_closed(uv_handle_t *h) { free(h->data); }

static void first_connect_done(first_connect *fc) {
    if (fc->closing) return;
    fc->closing = 1;
    uv_timer_stop(&fc->timer);
    if (!fc->op->loop_done) gov_retried(fc->op, SL_OK, 1, -1, NULL);
    gov_op_unref(fc->op);
    uv_close((uv_handle_t *)&fc->timer, on_first_connect_closed);
}

static void round_done(first_connect *fc) {
    if (fc->not_ready == 0) first_connect_done(fc);
    else uv_timer_start(&fc->timer, on_first_connect_poll, 5, 5);
}

static void on_ready_status(void *arg, int status, size_t n, const char *const *fields, const char *const *values) {
    first_connect *fc = arg;
    int redis = 0;
    for (size_t i = 0; status == SL_OK && i < n; i++)
        if (strcmp(fields[i], "mode") == 0) redis = strcmp(values[i], "redis") == 0;
    if (!redis) fc->not_ready++;
    if (--fc->asking == 0) round_done(fc);
}

static void on_first_connect_poll(uv_timer_t *t) {
    first_connect *fc = t->data;
    engine_stats st;
    engine_get_stats(fc->e, &st);
    if (uv_now(t->loop) >= fc->until || (!st.redis_up && st.redis_error[0])) {
        first_connect_done(fc);
        return;
    }
    if (!st.redis_up) return;
    /* Connected: ask every deployment whether its limits are written. */
    uv_timer_stop(t);
    const config *cfg = engine_config(fc->e);
    fc->asking = 1; /* held while asking, so no reply finishes the round early */
    fc->not_ready = 0;
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        fc->asking++;
        if (engine_status(fc->e, cfg->deployments[i].name, on_ready_status, fc) != 0) {
            fc->asking--;
            fc->not_ready++;
        }
    }
    if (--fc->asking == 0) round_done(fc);
}

static int be_ping(backend *b, gov_op *op) {
    first_connect *fc = calloc(1, sizeof(*fc));
    if (!fc) {
        snprintf(op->msg, sizeof(op->msg), "out of memory");
        return SL_ENOMEM;
    }
    fc->e = eng(b);
    fc->op = op;
    const config *cfg = engine_config(fc->e);
    fc->until = uv_now(b->loop) + (uint64_t)cfg->redis.connect_timeout_ms + 250;
    gov_op_ref(op);
    uv_timer_init(b->loop, &fc->timer);
    fc->timer.data = fc;
    uv_timer_start(&fc->timer, on_first_connect_poll, 2, 5);
    return 0;
}

static void be_stop(backend *b, void (*done)(void *), void *arg) { engine_stop(eng(b), done, arg); }

static void be_free(backend *b) {
    if (!b) return;
    engine_free(eng(b));
    free(b);
}

static const backend_vt engine_vt = {
    "embedded", be_acquire, be_cancel, be_give_back, be_settle, be_retry, be_ping, be_estimate, be_stop, be_free,
};

int backend_engine_new(sl_gov *gov, uv_loop_t *loop, struct config *cfg, const char *agent_id, backend **out, char *err,
                       size_t errlen) {
    *out = NULL;
    eng_backend *b = calloc(1, sizeof(*b));
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return SL_ENOMEM;
    }
    int rc = engine_new(loop, cfg, agent_id, &b->e);
    if (rc != 0) {
        free(b);
        snprintf(err, errlen, "cannot start the engine: %s", sl_strerror(rc));
        return rc;
    }
    b->base.vt = &engine_vt;
    b->base.gov = gov;
    b->base.loop = loop;
    engine_start(b->e);
    *out = &b->base;
    return 0;
}
