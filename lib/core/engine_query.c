/* engine_query: questions about one deployment: the retry budget
 * (RETRY) and its state (STATUS), asked of Redis or answered locally. */
#define _GNU_SOURCE
#include "engine_internal.h"
#include "timeutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- questions about a deployment (retry, status) ----------------------------- */

/* A question for Redis about one deployment, answered from the script's
 * reply, or locally on the next loop turn when Redis cannot be asked (so
 * the caller's callback never runs synchronously). */
typedef struct dep_query dep_query;
typedef void (*dep_query_answer)(dep_query *q, redisReply *r, int via_redis);

struct dep_query {
    engine *e;
    dep *d;
    union {
        engine_retry_cb retry;
        engine_status_cb status;
    } cb;
    void *arg;
    dep_query_answer answer; /* r: the reply if it is an array, else NULL */
    uv_timer_t timer;
};

static void on_query_timer_closed(uv_handle_t *h) { free(h->data); }

static void on_query_reply(void *arg, redisReply *r, const char *err) {
    dep_query *q = arg;
    engine *e = q->e;
    e->calls_out--;
    q->answer(q, (r && r->type == REDIS_REPLY_ARRAY) ? r : NULL, 1);
    free(q);
    engine__maybe_finish_stop(e);
}

static void on_query_local(uv_timer_t *t) {
    dep_query *q = t->data;
    q->answer(q, NULL, 0);
    uv_close((uv_handle_t *)&q->timer, on_query_timer_closed);
}

/* Asks script id about deployment, or answers locally. The caller sets
 * (*out)->cb and ->arg right after: answers never run synchronously. */
static int dep_query_start(engine *e, const char *deployment, script_id id, int argc, const char **argv,
                           dep_query_answer answer, dep_query **out) {
    if (e->stopping) return SL_ECLOSING;
    dep *d = dep_find(e, deployment);
    if (!d || !d->cfg) return SL_EUNKNOWN;
    dep_query *q = calloc(1, sizeof(*q));
    if (!q) return SL_ENOMEM;
    q->e = e;
    q->d = d;
    q->answer = answer;
    *out = q;
    if (dep_ready(d) && d->configured && rrouter_script(e->redis, id, d->keys, argc, argv, on_query_reply, q) == 0) {
        e->calls_out++;
        return 0;
    }
    uv_timer_init(e->loop, &q->timer);
    q->timer.data = q;
    uv_timer_start(&q->timer, on_query_local, 0, 0);
    return 0;
}

static void retry_answer(dep_query *q, redisReply *r, int via_redis) {
    engine *e = q->e;
    dep *d = q->d;
    long long allowed_r, balance_r, after_r;
    if (wire_read_retry(r, &allowed_r, &balance_r, &after_r) == 0) {
        int allowed = (int)allowed_r;
        if (allowed) e->stats.retries_allowed++, d->retries[0]++;
        else e->stats.retries_refused++, d->retries[1]++;
        q->cb.retry(q->arg, SL_OK, allowed, balance_r, after_r);
        return;
    }
    if (via_redis) {
        /* Redis failed mid-call: refuse (the safe answer for a retry). */
        e->stats.retries_refused++;
        d->retries[1]++;
        q->cb.retry(q->arg, SL_OK, 0, 0, 1000);
        return;
    }
    /* Without Redis the fleet's successes are unknown: allow only the floor
     * (min_per_s, burst min_per_s x ttl_s), at this agent's share, from a
     * local GCRA bucket. */
    double share = local_share(d);
    double per_ms = (double)d->cfg->retry_budget.min_per_s * share / 1000.0;
    double burst = fmax(1.0, floor((double)(d->cfg->retry_budget.min_per_s * d->cfg->retry_budget.ttl_s) * share));
    double now = (double)uv_now(e->loop);
    int allowed = 0;
    long long wait_ms = 1000;
    if (per_ms > 0) {
        double tat = fmax(d->local_retry_tat, now);
        if (tat - now <= (burst - 1) / per_ms) {
            allowed = 1;
            d->local_retry_tat = tat + 1.0 / per_ms;
        } else {
            wait_ms = (long long)ceil(tat - now - (burst - 1) / per_ms);
        }
    }
    if (allowed) e->stats.retries_allowed++, d->retries[0]++;
    else e->stats.retries_refused++, d->retries[1]++;
    long long balance = 0;
    if (per_ms > 0) balance = (long long)floor(burst - fmax(0.0, d->local_retry_tat - now) * per_ms);
    q->cb.retry(q->arg, SL_OK, allowed, balance > 0 ? balance : 0, allowed ? 0 : wait_ms);
}

int engine_retry(engine *e, const char *deployment, engine_retry_cb cb, void *arg) {
    wire_args a;
    wire_args_init(&a);
    wire_retry_withdraw(&a);
    dep_query *q;
    int rc = wire_args_done(&a, 0) == 0 ? dep_query_start(e, deployment, SCRIPT_RETRY, a.argc, a.argv, retry_answer, &q)
                                        : SL_ENOMEM;
    wire_args_free(&a);
    if (rc == 0) {
        q->cb.retry = cb;
        q->arg = arg;
    }
    return rc;
}

#define STATUS_LOCAL_FIELDS 16 /* mode ... agent_script_fixed_us, agent_would_* */

/* The patience ratio as text: within / answered, "" before any answer. */
static void patience_text(char *buf, size_t n, unsigned long long answered, unsigned long long within) {
    if (answered) snprintf(buf, n, "%.4f", (double)within / (double)answered);
    else buf[0] = '\0';
}

static void status_emit(dep_query *q, redisReply *r) {
    engine *e = q->e;
    dep *d = q->d;
    size_t nr = wire_status_fields(r);
    /* This agent's patience: the deployment's, and by lane and by tenant
     * (3 fields each) on a deployment with lanes or tenants. */
    size_t nclass = d->cfg ? d->cfg->nlanes + d->cfg->ntenants + 1 : 0;
    /* Budgets in money it can draw from: 4 fields per period of each. */
    size_t nbud = 0;
    for (size_t i = 0; i < e->cfg->nbudgets; i++) nbud += (size_t)engine__budget_covers(e, i, d->name);
    size_t n = nr + STATUS_LOCAL_FIELDS + 3 + 3 * nclass + 12 * nbud;
    const char **f = calloc(n, sizeof(*f));
    const char **v = calloc(n, sizeof(*v));
    char(*buf)[64] = calloc(n, 64); /* formatted values, one slot per field */
    char(*names)[2 * CONFIG_NAME_MAX + 48] =
        calloc(3 * nclass + 12 * nbud + 1, sizeof(*names)); /* per class and budget field names */
    if (!f || !v || !buf || !names) {
        free(f);
        free(v);
        free(buf);
        free(names);
        q->cb.status(q->arg, SL_ENOMEM, 0, NULL, NULL);
        return;
    }
    size_t k = 0;
    uint64_t now = uv_now(e->loop);
#define FIELD_STR(name, val) (f[k] = (name), v[k] = (val), k++)
#define FIELD_FMT(name, ...) (f[k] = (name), snprintf(buf[k], 64, __VA_ARGS__), v[k] = buf[k], k++)
    FIELD_STR("mode", dep_uses_redis(d) ? "redis" : (e->cfg->agent.fail == CONFIG_FAIL_CLOSED ? "closed" : "local"));
    FIELD_FMT("mode_since_ms_ago", "%lld", wall_clock_ms() - e->mode_since_ms);
    FIELD_STR("redis", dep_ready(d) ? "connected" : "unreachable");
    FIELD_STR("redis_error", d->script_error[0] ? d->script_error : rrouter_last_error(e->redis));
    FIELD_FMT("queued", "%zu", d->npending);
    FIELD_FMT("waiting", "%zu", d->waiting.n);
    FIELD_FMT("agent_live_agents", "%lld", d->live_agents);
    FIELD_FMT("local_share", "%.4f", local_share(d));
    FIELD_FMT("agent_paused_ms", "%llu", (unsigned long long)(d->paused_until > now ? d->paused_until - now : 0));
    FIELD_FMT("agent_rate_scale", "%.4f", d->rate_scale);
    FIELD_FMT("agent_batch_cap", "%zu", engine__batch_cap(e, &d->cost, RESERVE_BATCH_MAX));
    FIELD_FMT("agent_script_item_us", "%.1f", d->cost.item_us);
    FIELD_FMT("agent_script_fixed_us", "%.1f", d->cost.fixed_us);
    unsigned long long answered = 0, within = 0;
    for (size_t i = 0; i < d->nclasses; i++) {
        answered += d->classes[i].st.answered;
        within += d->classes[i].st.within;
    }
    unsigned long long ww = 0, wwms = 0, ws = 0;
    for (size_t i = 0; i < d->nclasses; i++) {
        ww += d->classes[i].st.would_wait;
        wwms += d->classes[i].st.would_wait_ms;
        ws += d->classes[i].st.would_shed;
    }
    FIELD_FMT("agent_would_wait", "%llu", ww);
    FIELD_FMT("agent_would_wait_ms", "%llu", wwms);
    FIELD_FMT("agent_would_shed", "%llu", ws);
    FIELD_FMT("agent_requests_answered", "%llu", answered);
    FIELD_FMT("agent_requests_within_deadline", "%llu", within);
    f[k] = "agent_patience";
    patience_text(buf[k], 64, answered, within);
    v[k] = buf[k];
    k++;
    /* By lane, then by tenant: summed over the classes of that name. */
    size_t nn = 0;
    for (int kind = 0; kind < 2 && d->cfg; kind++) {
        size_t count = kind ? d->cfg->ntenants : d->cfg->nlanes;
        for (size_t j = 0; j < count + (kind && count); j++) {
            const char *name = kind ? (j < count ? d->cfg->tenants[j].name : "default") : d->cfg->lanes[j].name;
            if (kind && j == count && config_tenant(d->cfg, "default"))
                continue; /* a configured "default" tenant has its row already */
            unsigned long long a = 0, w = 0;
            for (size_t i = 0; i < d->nclasses; i++) {
                if (strcmp(kind ? d->classes[i].tenant : d->classes[i].lane, name) != 0) continue;
                a += d->classes[i].st.answered;
                w += d->classes[i].st.within;
            }
            static const char *const what[3] = {"agent_requests_answered", "agent_requests_within_deadline",
                                                "agent_patience"};
            for (int x = 0; x < 3; x++) {
                snprintf(names[nn], sizeof(names[0]), "%s.%s.%s", kind ? "tenant" : "lane", name, what[x]);
                f[k] = names[nn++];
                if (x == 2) patience_text(buf[k], 64, a, w);
                else snprintf(buf[k], 64, "%llu", x ? w : a);
                v[k] = buf[k];
                k++;
            }
        }
    }
    /* budget.<name>.<period>.limit|spent|reserved|left, in the currency. */
    for (size_t i = 0; i < e->cfg->nbudgets; i++) {
        if (!engine__budget_covers(e, i, d->name)) continue;
        engine_budget_view bv;
        engine__budget_view(e, i, &bv);
        for (int p = 0; p < ENGINE_PERIODS; p++) {
            long long left = bv.limit[p] - bv.spent[p] - bv.reserved[p];
            long long x[4] = {bv.limit[p], bv.spent[p], bv.reserved[p], left > 0 ? left : 0};
            static const char *const what[4] = {"limit", "spent", "reserved", "left"};
            for (int w = 0; w < 4 && bv.limit[p]; w++) {
                snprintf(names[nn], sizeof(names[0]), "budget.%s.%s.%s", bv.name, engine_period_names[p], what[w]);
                f[k] = names[nn++];
                snprintf(buf[k], 64, "%.6f", (double)x[w] / 1e6);
                v[k] = buf[k];
                k++;
            }
        }
    }
    const char *fname, *fval;
    char num[24];
    size_t pos = 0;
    while (wire_status_field_next(r, &pos, &fname, &fval, num)) {
        if (fval == num) FIELD_FMT(fname, "%s", num);
        else FIELD_STR(fname, fval);
    }
#undef FIELD_STR
#undef FIELD_FMT
    q->cb.status(q->arg, SL_OK, k, f, v);
    free(f);
    free(v);
    free(buf);
    free(names);
}

static void status_answer(dep_query *q, redisReply *r, int via_redis) { status_emit(q, r); }

int engine_status(engine *e, const char *deployment, engine_status_cb cb, void *arg) {
    wire_args a;
    wire_args_init(&a);
    wire_status(&a, e->cfg->agent.heartbeat_ms * 3);
    dep_query *q;
    int rc = wire_args_done(&a, 0) == 0
                 ? dep_query_start(e, deployment, SCRIPT_STATUS, a.argc, a.argv, status_answer, &q)
                 : SL_ENOMEM;
    wire_args_free(&a);
    if (rc == 0) {
        q->cb.status = cb;
        q->arg = arg;
    }
    return rc;
}
