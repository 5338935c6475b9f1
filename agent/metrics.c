/* metrics: the Prometheus endpoint. See metrics.h. */
#define _POSIX_C_SOURCE 200809L

#include "metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classes.h"
#include "config.h"
#include "engine.h"
#include "proxy.h"
#include "sluice.h"

#define METRICS_REQUEST_MAX 8192
#define METRICS_MAX_CONNS 64
#define METRICS_SWEEP_MS 1000

typedef struct mconn {
    uv_tcp_t tcp; /* first: the handle's memory is the connection's */
    struct metrics *m;
    char req[METRICS_REQUEST_MAX];
    size_t len;
    uint64_t since;
    int closing;
    uv_write_t wr;
    char *resp;
    struct mconn *prev, *next;
} mconn;

struct metrics {
    uv_loop_t *loop;
    server *s;
    uv_tcp_t listener;
    int listener_open;
    uv_timer_t sweep;
    int handles_open; /* listener, sweep timer */
    size_t nconns;    /* connections whose memory is not yet freed */
    mconn *conns;
    int closing;
    void (*done)(void *);
    void *done_arg;
};

/* ---- rendering ---------------------------------------------------------------- */

typedef struct text_out {
    resp_buf *b;
    int err;
} text_out;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
emit(text_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (resp_buf_vprintf(o->b, 0, fmt, ap) != 0) o->err = 1;
    va_end(ap);
}

static void head(text_out *o, const char *name, const char *type, const char *help) {
    emit(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(text_out *o, const char *name, const char *type, const char *help, double v) {
    head(o, name, type, help);
    emit(o, "%s %.17g\n", name, v);
}

/* A label value with \, " and newline escaped. */
static void label_escape(const char *s, char *dst, size_t n) {
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '\\' || *s == '"') {
            dst[k++] = '\\';
            dst[k++] = *s;
        } else if (*s == '\n') {
            dst[k++] = '\\';
            dst[k++] = 'n';
        } else {
            dst[k++] = *s;
        }
    }
    dst[k] = '\0';
}

/* A wait histogram's buckets, sum and count; labels: the series' other
 * labels ("a=\"x\",b=\"y\""), or "". */
static void wait_histogram(text_out *o, const char *name, const char *labels, const unsigned long long *hist,
                           unsigned long long sum_ms) {
    const char *sep = labels[0] ? "," : "";
    unsigned long long cum = 0;
    for (int i = 0; i < ENGINE_WAIT_BUCKETS; i++) {
        cum += hist[i];
        emit(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, (double)engine_wait_bounds_ms[i] / 1000.0, cum);
    }
    cum += hist[ENGINE_WAIT_BUCKETS];
    emit(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, cum);
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    emit(o, "%s_sum%s%s%s %.3f\n", name, open, labels, close, (double)sum_ms / 1000.0);
    emit(o, "%s_count%s%s%s %llu\n", name, open, labels, close, cum);
}

/* The labels of a lane or tenant row: deployment="..",<kind>="..". */
static void row_labels(const classes_row *r, const char *kind, char *buf, size_t n) {
    char dep[2 * CONFIG_NAME_MAX + 1], name[2 * CONFIG_NAME_MAX + 1];
    label_escape(r->deployment, dep, sizeof(dep));
    label_escape(r->name, name, sizeof(name));
    snprintf(buf, n, "deployment=\"%s\",%s=\"%s\"", dep, kind, name);
}

/* One counter or gauge family over the rows: field picks the value. */
static void row_family(text_out *o, const char *name, const char *type, const char *help, const char *kind,
                       const classes_row *rows, size_t n, size_t field) {
    head(o, name, type, help);
    char labels[6 * CONFIG_NAME_MAX + 64];
    for (size_t i = 0; i < n; i++) {
        row_labels(&rows[i], kind, labels, sizeof(labels));
        const unsigned long long *v = (const unsigned long long *)((const char *)&rows[i].st + field);
        emit(o, "%s{%s} %llu\n", name, labels, *v);
    }
}

/* The HTTP proxy's connections and answers (zero when it is off). */
static void http_metrics(text_out *o, server *s) {
    const struct proxy *p = server_proxy(s);
    http_stats hs;
    proxy_stats ps;
    memset(&hs, 0, sizeof(hs));
    memset(&ps, 0, sizeof(ps));
    if (p) proxy_get_stats(p, &ps, &hs);
    one(o, "sluice_http_connections", "gauge", "Open HTTP proxy connections.", (double)hs.connections);
    one(o, "sluice_http_connections_rejected_total", "counter",
        "HTTP connections refused over agent.http.max_connections.", (double)hs.rejected_max_connections);
    one(o, "sluice_http_requests_total", "counter", "HTTP requests handed to the proxy.", (double)hs.requests);
    head(o, "sluice_http_responses_total", "counter", "HTTP responses, by status class.");
    for (int k = 1; k <= 5; k++) emit(o, "sluice_http_responses_total{code=\"%dxx\"} %llu\n", k, hs.responses[k]);
    head(o, "sluice_http_closed_total", "counter", "HTTP connections the agent closed or refused, by reason.");
    const struct {
        const char *reason;
        unsigned long long n;
    } rows[] = {
        {"bad_request", hs.refused_bad_request},      {"too_large", hs.refused_too_large},
        {"header_timeout", hs.closed_header_timeout}, {"body_timeout", hs.closed_body_timeout},
        {"idle_timeout", hs.closed_idle_timeout},     {"write_timeout", hs.closed_write_timeout},
        {"client_gone", hs.closed_client_gone},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        emit(o, "sluice_http_closed_total{reason=\"%s\"} %llu\n", rows[i].reason, rows[i].n);
    one(o, "sluice_http_calls", "gauge", "Proxied requests in progress (waiting, upstream or backing off).",
        (double)ps.live);
    head(o, "sluice_http_proxy_total", "counter", "What the proxy did with the requests it governed, by event.");
    const struct {
        const char *event;
        unsigned long long n;
    } ev[] = {
        {"forwarded", ps.forwarded},
        {"answered_upstream", ps.answered},
        {"streamed", ps.streamed},
        {"shed", ps.shed},
        {"retried", ps.retried},
        {"retry_refused", ps.retries_refused},
        {"upstream_error", ps.upstream_errors},
        {"upstream_timeout", ps.upstream_timeouts},
        {"client_gone", ps.abandoned},
        {"client_gone_waiting", ps.abandoned_waiting},
        {"no_endpoint", ps.errors[PROXY_ERR_NO_ENDPOINT]},
        {"unauthorized", ps.unauthorized},
        {"injected", ps.injected},
        {"observed", ps.observed},
        {"observe_error", ps.observe_errors},
    };
    for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++)
        emit(o, "sluice_http_proxy_total{event=\"%s\"} %llu\n", ev[i].event, ev[i].n);
    head(o, "sluice_http_would_wait_total", "counter",
         "Observe mode: forwarded requests whose slot lay ahead (governing would have made them wait).");
    emit(o, "sluice_http_would_wait_total %llu\n", ps.would_wait);
    head(o, "sluice_http_would_wait_seconds_total", "counter", "Observe mode: the sum of those waits.");
    emit(o, "sluice_http_would_wait_seconds_total %.3f\n", (double)ps.would_wait_ms / 1000.0);
    head(o, "sluice_http_would_shed_total", "counter",
         "Observe mode: forwarded requests governing would have answered 429, by shed reason.");
    for (int i = 0; i < ENGINE_SHED_REASONS; i++)
        emit(o, "sluice_http_would_shed_total{reason=\"%s\"} %llu\n", engine_shed_reasons[i],
             ps.would_shed_by_reason[i]);
}

#define ROW_FIELD(f) offsetof(engine_class_stats, f)

static void class_metrics(text_out *o, const classes *c) {
    const classes_row *l = c->lanes, *t = c->tenants;
    size_t nl = c->nlanes, nt = c->ntenants;
    row_family(o, "sluice_lane_acquires_total", "counter", "ACQUIREs of the lane.", "lane", l, nl, ROW_FIELD(acquires));
    row_family(o, "sluice_lane_grants_total", "counter", "Slots granted to the lane.", "lane", l, nl,
               ROW_FIELD(grants));
    row_family(o, "sluice_lane_sheds_total", "counter", "Acquires of the lane shed.", "lane", l, nl, ROW_FIELD(sheds));
    row_family(o, "sluice_lane_deferrals_total", "counter",
               "Times Redis deferred a request of the lane (its slot beyond the lane's horizon).", "lane", l, nl,
               ROW_FIELD(deferrals));
    row_family(o, "sluice_lane_tokens_reserved_total", "counter", "Estimated tokens of the lane's grants.", "lane", l,
               nl, ROW_FIELD(tokens));
    row_family(o, "sluice_lane_queued", "gauge", "Acquires of the lane held by this agent, not yet decided.", "lane", l,
               nl, ROW_FIELD(queued));
    head(o, "sluice_lane_wait_seconds", "histogram", "Time from ACQUIRE to the release of its slot, by lane.");
    char labels[6 * CONFIG_NAME_MAX + 64];
    for (size_t i = 0; i < nl; i++) {
        row_labels(&l[i], "lane", labels, sizeof(labels));
        wait_histogram(o, "sluice_lane_wait_seconds", labels, l[i].st.wait_hist, l[i].st.wait_sum_ms);
    }
    row_family(o, "sluice_tenant_acquires_total", "counter", "ACQUIREs of the tenant.", "tenant", t, nt,
               ROW_FIELD(acquires));
    row_family(o, "sluice_tenant_grants_total", "counter", "Slots granted to the tenant.", "tenant", t, nt,
               ROW_FIELD(grants));
    row_family(o, "sluice_tenant_tokens_reserved_total", "counter", "Estimated tokens of the tenant's grants.",
               "tenant", t, nt, ROW_FIELD(tokens));
    row_family(o, "sluice_tenant_sheds_total", "counter", "Acquires of the tenant shed.", "tenant", t, nt,
               ROW_FIELD(sheds));
    row_family(o, "sluice_tenant_deferrals_total", "counter", "Times Redis deferred a request of the tenant.", "tenant",
               t, nt, ROW_FIELD(deferrals));
    row_family(o, "sluice_tenant_queued", "gauge", "Acquires of the tenant held by this agent, not yet decided.",
               "tenant", t, nt, ROW_FIELD(queued));
}

/* Patience per class (deployment, lane, tenant; engine_foreach_class):
 * the requests answered, those answered within their deadline, and their
 * ratio (only for a class that has answered a request). */
typedef struct patience_out {
    text_out *o;
    int what; /* 0 answered, 1 within, 2 ratio */
} patience_out;

static void patience_metric(void *ud, const char *deployment, const char *lane, const char *tenant,
                            const engine_class_stats *st) {
    static const char *const names[3] = {"sluice_requests_answered_total", "sluice_requests_within_deadline_total",
                                         "sluice_patience_ratio"};
    patience_out *po = ud;
    char dl[2 * CONFIG_NAME_MAX + 1], ll[2 * CONFIG_NAME_MAX + 1], tl[2 * CONFIG_NAME_MAX + 1];
    label_escape(deployment, dl, sizeof(dl));
    label_escape(lane, ll, sizeof(ll));
    label_escape(tenant, tl, sizeof(tl));
    if (po->what < 2)
        emit(po->o, "%s{deployment=\"%s\",lane=\"%s\",tenant=\"%s\"} %llu\n", names[po->what], dl, ll, tl,
             po->what ? st->within : st->answered);
    else if (st->answered)
        emit(po->o, "%s{deployment=\"%s\",lane=\"%s\",tenant=\"%s\"} %.6f\n", names[2], dl, ll, tl,
             (double)st->within / (double)st->answered);
}

static void abandon_metric(void *ud, const char *deployment, const char *lane, const char *tenant,
                           const engine_class_stats *st) {
    patience_out *po = ud;
    char dl[2 * CONFIG_NAME_MAX + 1], ll[2 * CONFIG_NAME_MAX + 1], tl[2 * CONFIG_NAME_MAX + 1];
    label_escape(deployment, dl, sizeof(dl));
    label_escape(lane, ll, sizeof(ll));
    label_escape(tenant, tl, sizeof(tl));
    if (po->what == 0) {
        emit(po->o, "sluice_requests_abandoned_total{deployment=\"%s\",lane=\"%s\",tenant=\"%s\"} %llu\n", dl, ll, tl,
             st->abandoned);
    } else {
        char labels[8 * CONFIG_NAME_MAX];
        snprintf(labels, sizeof(labels), "deployment=\"%s\",lane=\"%s\",tenant=\"%s\"", dl, ll, tl);
        wait_histogram(po->o, "sluice_abandon_seconds", labels, st->abandon_hist, st->abandon_sum_ms);
    }
}

/* Per deployment: settles by outcome, RETRY answers by result. */
static void dep_count_metric(void *ud, const char *deployment, const engine_dep_counts *c) {
    patience_out *po = ud;
    char dl[2 * CONFIG_NAME_MAX + 1];
    label_escape(deployment, dl, sizeof(dl));
    if (po->what == 0) {
        for (int k = 0; k < ENGINE_OUTCOMES; k++)
            emit(po->o, "sluice_settle_outcomes_total{deployment=\"%s\",outcome=\"%s\"} %llu\n", dl,
                 engine_outcome_names[k], c->outcomes[k]);
    } else {
        emit(po->o, "sluice_deployment_retries_total{deployment=\"%s\",result=\"allowed\"} %llu\n", dl,
             c->retries_allowed);
        emit(po->o, "sluice_deployment_retries_total{deployment=\"%s\",result=\"refused\"} %llu\n", dl,
             c->retries_refused);
    }
}

/* The product figures of docs/operations.md "Reading the dashboard":
 * abandonment and time to abandon, outcomes (the share of failures that
 * are rate limits; attempts for retry amplification), retries. */
static void product_metrics(text_out *o, engine *e) {
    head(o, "sluice_requests_abandoned_total", "counter",
         "Requests whose caller left before they were answered, by deployment, lane and tenant.");
    patience_out po = {o, 0};
    engine_foreach_class(e, abandon_metric, &po);
    head(o, "sluice_abandon_seconds", "histogram", "Time from a request's arrival to its caller leaving unanswered.");
    po.what = 1;
    engine_foreach_class(e, abandon_metric, &po);
    head(o, "sluice_settle_outcomes_total", "counter",
         "Settled calls by how they ended (ok, throttled, failed, cancelled, quota): the provider attempts.");
    po.what = 0;
    engine_foreach_dep_counts(e, dep_count_metric, &po);
    head(o, "sluice_deployment_retries_total", "counter", "RETRY answers per deployment, by result.");
    po.what = 1;
    engine_foreach_dep_counts(e, dep_count_metric, &po);
}

static void patience_metrics(text_out *o, engine *e) {
    head(o, "sluice_requests_answered_total", "counter",
         "Requests answered (ACQUIREs on the socket, requests of the HTTP proxy), by deployment, lane and tenant.");
    patience_out po = {o, 0};
    engine_foreach_class(e, patience_metric, &po);
    head(o, "sluice_requests_within_deadline_total", "counter",
         "Requests answered within their deadline (granted no later than their max wait).");
    po.what = 1;
    engine_foreach_class(e, patience_metric, &po);
    head(o, "sluice_patience_ratio", "gauge",
         "Requests answered within their deadline over all requests answered (classes that answered any).");
    po.what = 2;
    engine_foreach_class(e, patience_metric, &po);
}

/* Per group: acquires, spills and sheds by group; grants by group and
 * member (every configured member has a series, zero until used). */
static void group_metrics(text_out *o, const classes_group *g, size_t n) {
    char gl[2 * CONFIG_NAME_MAX + 1], ml[2 * CONFIG_NAME_MAX + 1];
    static const struct {
        const char *name, *help;
        size_t field;
    } per_group[] = {
        {"sluice_group_acquires_total", "ACQUIREs of the group.", offsetof(engine_group_stats, acquires)},
        {"sluice_group_spilled_total", "Grants of the group on a member other than the primary.",
         offsetof(engine_group_stats, spilled)},
        {"sluice_group_sheds_total", "Acquires of the group shed (no allowed member within the max wait).",
         offsetof(engine_group_stats, sheds)},
    };
    for (size_t k = 0; k < sizeof(per_group) / sizeof(per_group[0]); k++) {
        head(o, per_group[k].name, "counter", per_group[k].help);
        for (size_t i = 0; i < n; i++) {
            label_escape(g[i].name, gl, sizeof(gl));
            const unsigned long long *v = (const unsigned long long *)((const char *)&g[i].st + per_group[k].field);
            emit(o, "%s{group=\"%s\"} %llu\n", per_group[k].name, gl, *v);
        }
    }
    head(o, "sluice_group_grants_total", "counter", "Grants of the group, by the member that served them.");
    for (size_t i = 0; i < n; i++) {
        label_escape(g[i].name, gl, sizeof(gl));
        for (size_t m = 0; m < g[i].nmembers; m++) {
            label_escape(g[i].members[m], ml, sizeof(ml));
            emit(o, "sluice_group_grants_total{group=\"%s\",member=\"%s\"} %llu\n", gl, ml, g[i].st.member_grants[m]);
        }
    }
}

/* Per deployment and dimension: the configured limit, the limit in force,
 * the effective rate and others' use, per minute (engine_foreach_dim). */
typedef struct dim_out {
    text_out *o;
    size_t field;
    const char *name;
} dim_out;

static void dim_metric(void *ud, const char *deployment, const char *dim, const engine_dim_rates *r) {
    dim_out *d = ud;
    char dl[2 * CONFIG_NAME_MAX + 1];
    label_escape(deployment, dl, sizeof(dl));
    double v = *(const double *)((const char *)r + d->field);
    emit(d->o, "%s{deployment=\"%s\",dimension=\"%s\"} %.3f\n", d->name, dl, dim, v);
}

static void dim_metrics(text_out *o, engine *e) {
    static const struct {
        const char *name, *help;
        size_t field;
    } fam[] = {
        {"sluice_limit_configured_per_minute", "The configured limit of the dimension.",
         offsetof(engine_dim_rates, configured)},
        {"sluice_limit_per_minute",
         "The limit in force: the configured one, or the lower one the provider's headers reported.",
         offsetof(engine_dim_rates, limit)},
        {"sluice_effective_rate_per_minute",
         "The rate the fleet runs the dimension at: the limit less others' use of the key (or silent agents' share), "
         "and AIMD.",
         offsetof(engine_dim_rates, effective)},
        {"sluice_outside_use_per_minute",
         "Others' use of the same key as estimated from the provider's remaining counts.",
         offsetof(engine_dim_rates, outside)},
        {"sluice_held_rate_per_minute",
         "The part of the rate kept out of the shared schedule for agents silent in Redis (cut off from it).",
         offsetof(engine_dim_rates, held)},
        {"sluice_estimate_ratio",
         "The ratio the dimension charges estimated input tokens at: the provider's prompt count over sluice's "
         "estimate, learned fleet-wide (a high quantile, decaying toward 1); 1 where not calibrated.",
         offsetof(engine_dim_rates, estimate_ratio)},
    };
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        head(o, fam[k].name, "gauge", fam[k].help);
        dim_out d = {o, fam[k].field, fam[k].name};
        engine_foreach_dim(e, dim_metric, &d);
    }
}

/* Per deployment and group: the next reserve call's cap and the learned
 * Redis time per item (engine_foreach_batch). */
typedef struct batch_out {
    text_out *o;
    int what; /* 0 cap, 1 item_us */
} batch_out;

static void batch_metric(void *ud, const char *kind, const char *name, const engine_batch *b) {
    batch_out *bo = ud;
    char nl[2 * CONFIG_NAME_MAX + 1];
    label_escape(name, nl, sizeof(nl));
    /* A deployment's settles: the deployment label and call="settle". */
    int settle = !strcmp(kind, "settle");
    const char *label = settle ? "deployment" : kind, *call = settle ? "settle" : "reserve";
    if (bo->what == 0) emit(bo->o, "sluice_batch_cap{%s=\"%s\",call=\"%s\"} %zu\n", label, nl, call, b->cap);
    else emit(bo->o, "sluice_batch_item_seconds{%s=\"%s\",call=\"%s\"} %.9f\n", label, nl, call, b->item_us / 1e6);
}

static void batch_metrics(text_out *o, engine *e) {
    head(o, "sluice_batch_cap", "gauge",
         "Items the next reserve or settle call may carry under redis.max_script_ms (at most 128 and 256).");
    batch_out bo = {o, 0};
    engine_foreach_batch(e, batch_metric, &bo);
    head(o, "sluice_batch_item_seconds", "gauge",
         "Redis time per item of a reserve or settle call, learned from the calls' own times (0 before any call).");
    bo.what = 1;
    engine_foreach_batch(e, batch_metric, &bo);
}

/* Budgets in money (engine_foreach_budget): per budget and period, in
 * the currency. what: 0 limit, 1 spent, 2 reserved, 3 remaining. */
typedef struct budget_out {
    text_out *o;
    int what; /* 0 limit, 1 spent, 2 reserved, 3 remaining, 4 warn */
    const char *name;
    const config *cfg;
} budget_out;

static void budget_metric(void *ud, const engine_budget_view *v) {
    budget_out *bo = ud;
    /* The budget's scope as labels: "" where it takes any. */
    const struct config_budget *cb = NULL;
    for (size_t i = 0; i < bo->cfg->nbudgets && !cb; i++)
        if (!strcmp(bo->cfg->budgets[i].name, v->name)) cb = &bo->cfg->budgets[i];
    char bl[2 * CONFIG_NAME_MAX + 1], tl[2 * CONFIG_NAME_MAX + 1], cl[2 * CONFIG_NAME_MAX + 1];
    char dl[2 * CONFIG_NAME_MAX + 1];
    label_escape(v->name, bl, sizeof(bl));
    label_escape(cb ? cb->tenant : "", tl, sizeof(tl));
    label_escape(cb ? cb->client : "", cl, sizeof(cl));
    label_escape(cb ? cb->deployment : "", dl, sizeof(dl));
    for (int p = 0; p < ENGINE_PERIODS; p++) {
        if (!v->limit[p]) continue;
        long long held = v->spent[p] + v->reserved[p];
        double x;
        if (bo->what == 0) x = (double)v->limit[p] / 1e6;
        else if (bo->what == 1) x = (double)v->spent[p] / 1e6;
        else if (bo->what == 2) x = (double)v->reserved[p] / 1e6;
        else if (bo->what == 3) x = held < v->limit[p] ? (double)(v->limit[p] - held) / 1e6 : 0;
        else x = (double)held >= v->warn_at * (double)v->limit[p] ? 1 : 0;
        emit(bo->o,
             "%s{budget=\"%s\",period=\"%s\",currency=\"%s\",tenant=\"%s\",client=\"%s\",deployment=\"%s\"} %.6f\n",
             bo->name, bl, engine_period_names[p], v->currency, tl, cl, dl, x);
    }
}

static void spend_metric(void *ud, const char *deployment, const char *tenant, const char *client_name,
                         const char *currency, long long spent_u, unsigned long long requests) {
    text_out *o = ud;
    (void)requests;
    char dl[2 * CONFIG_NAME_MAX + 1], tl[2 * CONFIG_NAME_MAX + 1], cl[2 * CONFIG_NAME_MAX + 1];
    label_escape(deployment, dl, sizeof(dl));
    label_escape(tenant, tl, sizeof(tl));
    label_escape(client_name, cl, sizeof(cl));
    emit(o, "sluice_spend_total{deployment=\"%s\",tenant=\"%s\",client=\"%s\",currency=\"%s\"} %.6f\n", dl, tl, cl,
         currency, (double)spent_u / 1e6);
}

static void budget_metrics(text_out *o, engine *e) {
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"sluice_budget_limit", "A budget's limit for the period (day, month, total), in its currency."},
        {"sluice_budget_spent", "What the fleet spent from the budget in the current period (Redis, every 2 s)."},
        {"sluice_budget_reserved",
         "What requests in flight hold of the budget: their largest possible cost, until their settle."},
        {"sluice_budget_remaining", "What the budget has left in the period: limit less spent and reserved."},
        {"sluice_budget_warn",
         "1 while the budget's spent and reserved are at or past its warn_at share of the period's limit (the soft "
         "limit)."},
    };
    for (int k = 0; k < 5; k++) {
        head(o, fam[k].name, "gauge", fam[k].help);
        budget_out bo = {o, k, fam[k].name, engine_config(e)};
        engine_foreach_budget(e, budget_metric, &bo);
    }
    head(o, "sluice_spend_total", "counter",
         "What this agent's settled requests cost at their deployment's prices, in the currency.");
    engine_foreach_spend(e, spend_metric, o);
}

int metrics_render(server *s, resp_buf *b) {
    engine *e = server_engine(s);
    const config *cfg = engine_config(e);
    engine_stats es;
    server_stats st;
    engine_get_stats(e, &es);
    server_get_stats(s, &st);
    text_out o = {b, 0};
    char id[300];
    label_escape(engine_agent_id(e), id, sizeof(id));
    head(&o, "sluice_info", "gauge", "Version and agent id of this sluiced.");
    emit(&o, "sluice_info{version=\"%s\",agent_id=\"%s\"} 1\n", SLUICE_VERSION, id);

    one(&o, "sluice_acquires_total", "counter", "ACQUIRE calls handed to the engine.", (double)es.acquires);
    head(&o, "sluice_grants_total", "counter", "Slots granted, by how they were decided.");
    emit(&o, "sluice_grants_total{mode=\"redis\"} %llu\n", es.grants - es.grants_local);
    emit(&o, "sluice_grants_total{mode=\"local\"} %llu\n", es.grants_local);
    head(&o, "sluice_sheds_total", "counter", "Acquires shed (no slot within the max wait), by reason.");
    for (int i = 0; i < ENGINE_SHED_REASONS; i++)
        emit(&o, "sluice_sheds_total{reason=\"%s\"} %llu\n", engine_shed_reasons[i], es.shed_by_reason[i]);
    one(&o, "sluice_acquire_errors_total", "counter",
        "Acquires answered with an error (fail closed, shutdown, removed deployment).", (double)es.errors);

    one(&o, "sluice_deferrals_total", "counter",
        "Times Redis deferred a request (its slot beyond its lane's or tenant's horizon); the agent asks again.",
        (double)es.deferrals);
    one(&o, "sluice_retimed_total", "counter",
        "Held callers moved because a limit from the headers re-timed the fleet's schedule.", (double)es.retimed);
    one(&o, "sluice_late_reasks_total", "counter",
        "Callers released long after their slot (a stalled loop) that gave it back and asked again.",
        (double)es.late_reasks);
    one(&o, "sluice_lapsed_held_total", "counter",
        "Callers whose grant of Redis' lay past the others' hold of this agent's share while it was away from "
        "Redis: held until Redis answered (at most their max wait), then asked again.",
        (double)es.lapsed_held);

    head(&o, "sluice_wait_seconds", "histogram", "Time from ACQUIRE to the release of its slot.");
    wait_histogram(&o, "sluice_wait_seconds", "", es.wait_hist, es.wait_sum_ms);

    one(&o, "sluice_queued_acquires", "gauge", "Acquires not yet decided.", (double)es.queued);
    one(&o, "sluice_waiting_acquires", "gauge", "Acquires granted and waiting for their slot.", (double)es.waiting);
    one(&o, "sluice_grants_per_second", "gauge", "Grants per second over the last second.", st.grants_per_sec);
    one(&o, "sluice_settles_total", "counter", "SETTLE calls accepted.", (double)es.settles);
    one(&o, "sluice_provider_throttled_total", "counter", "Provider 429s reported (SETTLE STATUS throttled).",
        (double)es.throttled);
    one(&o, "sluice_settle_pauses_total", "counter", "Settles whose forwarded headers asked for a pause.",
        (double)es.settle_pauses);
    one(&o, "sluice_provider_quota_errors_total", "counter",
        "Hard quota errors reported (SETTLE STATUS quota): each takes its deployment out until the reset.",
        (double)es.quota_events);
    one(&o, "sluice_breaker_sheds_total", "counter",
        "Requests a deployment's open circuit breaker turned away (a group's member included, even when "
        "another member then served).",
        (double)es.breaker_sheds);
    one(&o, "sluice_cancels_total", "counter", "Waiting acquires cancelled (client gone).", (double)es.cancels);
    head(&o, "sluice_estimates_total", "counter", "ESTIMATEs answered, by where the answer came from.");
    emit(&o, "sluice_estimates_total{source=\"redis\"} %llu\n", es.estimates - es.estimates_local);
    emit(&o, "sluice_estimates_total{source=\"local\"} %llu\n", es.estimates_local);
    patience_metrics(&o, e);
    product_metrics(&o, e);
    head(&o, "sluice_retries_total", "counter", "RETRY answers, by result.");
    emit(&o, "sluice_retries_total{result=\"allowed\"} %llu\n", es.retries_allowed);
    emit(&o, "sluice_retries_total{result=\"refused\"} %llu\n", es.retries_refused);
    one(&o, "sluice_tokens_reserved_total", "counter", "Estimated tokens of the grants handed out.",
        (double)es.tokens_estimated);
    one(&o, "sluice_tokens_actual_total", "counter", "Actual tokens reported by SETTLE.", (double)es.tokens_actual);
    one(&o, "sluice_limit_changes_total", "counter",
        "Limits adopted from the provider's headers (or dropped when they report the configured one again).",
        (double)es.limit_changes);
    dim_metrics(&o, e);
    budget_metrics(&o, e);

    one(&o, "sluice_redis_calls_total", "counter", "Redis script calls.", (double)es.redis_calls);
    one(&o, "sluice_redis_errors_total", "counter", "Redis calls that failed.", (double)es.redis_errors);
    one(&o, "sluice_redis_timeouts_total", "counter", "Redis calls that timed out.", (double)es.redis_timeouts);
    one(&o, "sluice_redis_noscript_reloads_total", "counter", "Scripts reloaded after NOSCRIPT.",
        (double)es.noscript_reloads);
    one(&o, "sluice_reserve_calls_total", "counter", "Coalesced reserve calls.", (double)es.reserve_calls);
    one(&o, "sluice_reserve_items_total", "counter", "Acquires carried by reserve calls.", (double)es.reserve_items);
    one(&o, "sluice_script_over_bound_total", "counter",
        "Reserve and settle calls whose own time in Redis reached redis.max_script_ms.", (double)es.script_over_bound);
    batch_metrics(&o, e);
    one(&o, "sluice_redis_up", "gauge", "1 when connected to Redis.", (double)es.redis_up);
    one(&o, "sluice_fallback_mode", "gauge", "1 while governing locally (Redis unreachable).",
        strcmp(es.mode, "redis") != 0 ? 1.0 : 0.0);

    one(&o, "sluice_clients", "gauge", "Connected clients.", (double)st.connected);
    one(&o, "sluice_clients_max", "gauge", "agent.max_clients.", (double)cfg->agent.max_clients);
    one(&o, "sluice_clients_rejected_total", "counter", "Connections refused over agent.max_clients.",
        (double)st.rejected_max_clients);
    head(&o, "sluice_clients_closed_total", "counter", "Clients closed by the agent, by reason.");
    emit(&o, "sluice_clients_closed_total{reason=\"protocol_error\"} %llu\n", st.closed_protocol_error);
    emit(&o, "sluice_clients_closed_total{reason=\"buffer_limit\"} %llu\n", st.closed_buffer_limit);
    emit(&o, "sluice_clients_closed_total{reason=\"idle_timeout\"} %llu\n", st.closed_idle_timeout);
    one(&o, "sluice_commands_total", "counter", "Commands processed.", (double)st.commands);
    head(&o, "sluice_config_reloads_total", "counter", "SIGHUP reloads, by result.");
    emit(&o, "sluice_config_reloads_total{result=\"ok\"} %llu\n", st.reloads_ok);
    emit(&o, "sluice_config_reloads_total{result=\"failed\"} %llu\n", st.reloads_failed);

    http_metrics(&o, s);

    classes c;
    if (classes_collect(e, &c) != 0) return RESP_ENOMEM;
    class_metrics(&o, &c);
    classes_free(&c);
    classes_group *g;
    size_t ng;
    if (classes_groups(e, &g, &ng) != 0) return RESP_ENOMEM;
    group_metrics(&o, g, ng);
    free(g);
    return o.err ? RESP_ENOMEM : 0;
}

/* ---- connections --------------------------------------------------------------- */

static void maybe_done(metrics *m) {
    if (!m->closing || m->handles_open > 0 || m->nconns > 0 || !m->done) return;
    void (*done)(void *) = m->done;
    m->done = NULL;
    done(m->done_arg);
}

static void on_conn_closed(uv_handle_t *h) {
    mconn *c = (mconn *)h;
    metrics *m = c->m;
    free(c->resp);
    free(c);
    m->nconns--;
    maybe_done(m);
}

static void conn_close(mconn *c) {
    if (c->closing) return;
    c->closing = 1;
    metrics *m = c->m;
    if (c->prev) c->prev->next = c->next;
    else m->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_resp_written(uv_write_t *w, int status) {
    mconn *c = w->data;
    conn_close(c);
}

static void respond(mconn *c, const char *status, const char *ctype, const char *body, size_t blen, int head_only) {
    resp_buf b;
    resp_buf_init(&b);
    char hdr[256];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
                     ctype, blen);
    if (resp_buf_append(&b, hdr, (size_t)n) != 0 || (!head_only && blen && resp_buf_append(&b, body, blen) != 0)) {
        resp_buf_free(&b);
        conn_close(c);
        return;
    }
    size_t len = 0;
    c->resp = resp_buf_detach(&b, &len);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_buf_t ub = uv_buf_init(c->resp, (unsigned)len);
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &ub, 1, on_resp_written) != 0) conn_close(c);
}

static void handle_request(mconn *c) {
    /* Request line: METHOD SP target SP version. */
    char *sp1 = memchr(c->req, ' ', c->len);
    char *eol = memchr(c->req, '\n', c->len);
    if (!sp1 || !eol || sp1 > eol) {
        static const char bad[] = "bad request\n";
        respond(c, "400 Bad Request", "text/plain", bad, sizeof(bad) - 1, 0);
        return;
    }
    size_t mlen = (size_t)(sp1 - c->req);
    int is_get = mlen == 3 && !memcmp(c->req, "GET", 3);
    int is_head = mlen == 4 && !memcmp(c->req, "HEAD", 4);
    char *target = sp1 + 1;
    char *sp2 = memchr(target, ' ', (size_t)(eol - target));
    size_t tlen = sp2 ? (size_t)(sp2 - target) : (size_t)(eol - target);
    while (tlen && (target[tlen - 1] == '\r')) tlen--;
    if (!is_get && !is_head) {
        static const char body[] = "only GET and HEAD\n";
        respond(c, "405 Method Not Allowed", "text/plain", body, sizeof(body) - 1, 0);
        return;
    }
    int is_metrics = (tlen == 8 && !memcmp(target, "/metrics", 8)) || (tlen > 8 && !memcmp(target, "/metrics?", 9));
    if (!is_metrics) {
        static const char body[] = "not found: try /metrics\n";
        respond(c, "404 Not Found", "text/plain", body, sizeof(body) - 1, is_head);
        return;
    }
    resp_buf text;
    resp_buf_init(&text);
    if (metrics_render(c->m->s, &text) != 0) {
        resp_buf_free(&text);
        static const char body[] = "out of memory\n";
        respond(c, "500 Internal Server Error", "text/plain", body, sizeof(body) - 1, is_head);
        return;
    }
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text.data, text.len, is_head);
    resp_buf_free(&text);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    mconn *c = (mconn *)h;
    *buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - c->len));
}

static int request_complete(const mconn *c) {
    for (size_t i = 0; i + 1 < c->len; i++) {
        if (c->req[i] == '\n' && c->req[i + 1] == '\n') return 1;
        if (i + 3 < c->len && !memcmp(c->req + i, "\r\n\r\n", 4)) return 1;
    }
    return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    mconn *c = (mconn *)st;
    if (c->closing || c->resp) return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    if (request_complete(c)) {
        handle_request(c);
    } else if (c->len == sizeof(c->req)) {
        static const char body[] = "request too large\n";
        respond(c, "431 Request Header Fields Too Large", "text/plain", body, sizeof(body) - 1, 0);
    }
}

static void on_connection(uv_stream_t *l, int status) {
    metrics *m = l->data;
    if (status < 0) return;
    mconn *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->m = m;
    uv_tcp_init(m->loop, &c->tcp);
    m->nconns++;
    c->next = m->conns;
    if (m->conns) m->conns->prev = c;
    m->conns = c;
    c->since = uv_now(m->loop);
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 || m->nconns > METRICS_MAX_CONNS ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        conn_close(c);
}

static void on_sweep(uv_timer_t *t) {
    metrics *m = t->data;
    uint64_t now = uv_now(m->loop);
    for (mconn *c = m->conns, *nx; c; c = nx) {
        nx = c->next;
        if (now - c->since >= METRICS_REQUEST_TIMEOUT_MS) conn_close(c);
    }
}

/* ---- lifecycle ------------------------------------------------------------------ */

int metrics_new(uv_loop_t *loop, server *s, metrics **out) {
    *out = NULL;
    metrics *m = calloc(1, sizeof(*m));
    if (!m) return SL_ENOMEM;
    m->loop = loop;
    m->s = s;
    uv_timer_init(loop, &m->sweep);
    m->sweep.data = m;
    m->handles_open = 1;
    *out = m;
    return 0;
}

int metrics_listen(metrics *m, const char *host, int port, char *err, size_t errlen) {
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    uv_getaddrinfo_t req;
    int rc = uv_getaddrinfo(m->loop, &req, NULL, host, portstr, &hints); /* synchronous */
    if (rc < 0) {
        snprintf(err, errlen, "metrics: cannot resolve %s: %s", host, uv_strerror(rc));
        return SL_EIO;
    }
    uv_tcp_init(m->loop, &m->listener);
    m->listener.data = m;
    m->listener_open = 1;
    m->handles_open++;
    rc = uv_tcp_bind(&m->listener, req.addrinfo->ai_addr, 0);
    uv_freeaddrinfo(req.addrinfo);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&m->listener, 64, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "metrics: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        return SL_EIO;
    }
    uv_timer_start(&m->sweep, on_sweep, METRICS_SWEEP_MS, METRICS_SWEEP_MS);
    return 0;
}

static void on_handle_closed(uv_handle_t *h) {
    metrics *m = h->data;
    m->handles_open--;
    maybe_done(m);
}

void metrics_close(metrics *m, void (*done)(void *arg), void *arg) {
    if (m->closing) return;
    m->closing = 1;
    m->done = done;
    m->done_arg = arg;
    while (m->conns) conn_close(m->conns);
    if (m->listener_open) {
        m->listener_open = 0;
        uv_close((uv_handle_t *)&m->listener, on_handle_closed);
    }
    uv_timer_stop(&m->sweep);
    uv_close((uv_handle_t *)&m->sweep, on_handle_closed);
}

void metrics_free(metrics *m) { free(m); }
