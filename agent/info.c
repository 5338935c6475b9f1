/* info: INFO sections. See info.h; the fields are listed in
 * docs/protocol.md. */
#define _POSIX_C_SOURCE 200809L

#include "info.h"
#include "timeutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "classes.h"
#include "config.h"
#include "engine.h"
#include "memory.h"
#include "proxy.h"

typedef struct info_out {
    resp_buf *b;
    int err;
} info_out;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
line(info_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (resp_buf_vprintf(o->b, RESP_PRINTF_LINE, fmt, ap) != 0) o->err = 1;
    va_end(ap);
}

static double ratio(unsigned long long a, unsigned long long b) { return b ? (double)a / (double)b : 0.0; }

/* Patience as text: within / answered with 4 decimals, "" before any
 * request was answered (no ratio yet, rather than a made-up one). */
static const char *patience_text(unsigned long long answered, unsigned long long within, char *buf, size_t n) {
    if (answered) snprintf(buf, n, "%.4f", (double)within / (double)answered);
    else if (n) buf[0] = '\0';
    return buf;
}

static void section_server(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    engine *e = server_engine(s);
    const config *cfg = engine_config(e);
    long long now = wall_clock_ms();
    line(o, "# Server");
    line(o, "sluice_version:%s", SLUICE_VERSION);
    line(o, "process_id:%ld", (long)getpid());
    line(o, "agent_id:%s", engine_agent_id(e));
    line(o, "config_file:%s", st->config_path);
    line(o, "socket:%s", cfg->agent.socket);
    line(o, "metrics:%s", cfg->agent.metrics[0] ? cfg->agent.metrics : "off");
    line(o, "log_level:%s", config_log_level_name(cfg->agent.log_level));
    line(o, "libuv_version:%s", uv_version_string());
    line(o, "uptime_in_seconds:%lld", (now - st->started_ms) / 1000);
    line(o, "config_reloads_ok:%llu", st->reloads_ok);
    line(o, "config_reloads_failed:%llu", st->reloads_failed);
    if (st->last_reload_ms) line(o, "last_reload_seconds_ago:%lld", (now - st->last_reload_ms) / 1000);
    line(o, "last_reload_error:%s", st->last_reload_error);
}

static void section_clients(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    const config *cfg = engine_config(server_engine(s));
    line(o, "# Clients");
    line(o, "connected_clients:%llu", st->connected);
    line(o, "max_clients:%lld", cfg->agent.max_clients);
    line(o, "max_client_buffer:%lld", cfg->agent.max_client_buffer);
    line(o, "max_client_pipeline:%lld", cfg->agent.max_client_pipeline);
    line(o, "client_idle_timeout_ms:%lld", cfg->agent.client_idle_timeout_ms);
    line(o, "total_connections_received:%llu", st->connections_received);
    line(o, "rejected_connections:%llu", st->rejected_max_clients);
    line(o, "closed_protocol_error:%llu", st->closed_protocol_error);
    line(o, "closed_buffer_limit:%llu", st->closed_buffer_limit);
    line(o, "closed_idle_timeout:%llu", st->closed_idle_timeout);
    /* Not counting this INFO command, which is pending while it renders. */
    line(o, "blocked_commands:%llu", st->pending_replies ? st->pending_replies - 1 : 0);
    line(o, "paused_clients:%llu", st->paused_clients);
}

static void section_deployments(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    const config *cfg = engine_config(server_engine(s));
    line(o, "# Deployments");
    line(o, "deployments:%zu", cfg->ndeployments);
    /* Keyed by position, the name a field: a name may hold ':' (a Bedrock
     * model id), and INFO parsers cut the key at the first one. */
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        const struct config_deployment *d = &cfg->deployments[i];
        line(o,
             "deployment%zu:name=%s,rpm=%lld,tpm=%lld,burst_requests=%lld,burst_tokens=%lld,max_concurrency=%lld,"
             "rpd=%lld,tpd=%lld,max_wait_ms=%lld,jitter_ms=%lld,style=%s,itpm=%lld,otpm=%lld,"
             "burst_input_tokens=%lld,burst_output_tokens=%lld,refund_tokens=%d,refund_input_tokens=%d,"
             "refund_output_tokens=%d",
             i, d->name, d->rpm, d->tpm, d->burst.requests, d->burst.tokens, d->max_concurrency, d->rpd, d->tpd,
             d->max_wait_ms, d->jitter_ms, config_style_name(d->style), d->itpm, d->otpm, d->burst.input_tokens,
             d->burst.output_tokens, d->refunds.tokens, d->refunds.input_tokens, d->refunds.output_tokens);
    }
}

typedef struct dim_lines {
    info_out *o;
    size_t n;
} dim_lines;

static void dim_line(void *ud, const char *deployment, const char *dim, const engine_dim_rates *r) {
    dim_lines *dl = ud;
    line(dl->o,
         "dimension%zu:deployment=%s,dimension=%s,configured=%.0f,limit=%.2f,effective=%.2f,outside=%.2f,held=%.2f,"
         "known=%d,estimate_ratio=%.4f",
         dl->n++, deployment, dim, r->configured, r->limit, r->effective, r->outside, r->held, r->known,
         r->estimate_ratio);
}

static void count_dim(void *ud, const char *deployment, const char *dim, const engine_dim_rates *r) {
    (*(size_t *)ud)++;
}

/* The rates per dimension as the fleet runs them (from the last settle
 * reply): the limit in force (lower when the provider's headers said so),
 * the effective rate and others' use of the key, per minute. */
static void section_dimensions(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    size_t n = 0;
    line(o, "# Dimensions");
    engine_foreach_dim(server_engine(s), count_dim, &n);
    line(o, "dimensions:%zu", n);
    line(o, "limit_changes:%llu", es->limit_changes);
    dim_lines dl = {o, 0};
    engine_foreach_dim(server_engine(s), dim_line, &dl);
}

typedef struct batch_lines {
    info_out *o;
    size_t n;
} batch_lines;

static void batch_line(void *ud, const char *kind, const char *name, const engine_batch *b) {
    batch_lines *bl = ud;
    line(bl->o, "batch%zu:%s=%s,cap=%zu,item_us=%.1f,fixed_us=%.1f,last_items=%zu,last_us=%.0f,calls=%llu", bl->n++,
         kind, name, b->cap, b->item_us, b->fixed_us, b->last_items, b->last_us, b->calls);
}

static void count_batch(void *ud, const char *kind, const char *name, const engine_batch *b) { (*(size_t *)ud)++; }

/* Redis calls; per deployment, its settles and per group (batch<i>), the
 * items the next call may carry under redis.max_script_ms and the Redis
 * time per item and per call learned from the calls. */
static void section_redis(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    const config *cfg = engine_config(server_engine(s));
    long long now = wall_clock_ms();
    line(o, "# Redis");
    line(o, "mode:%s", es->mode);
    line(o, "mode_since_seconds_ago:%lld", (now - es->mode_since_ms) / 1000);
    line(o, "fail:%s", config_fail_name(cfg->agent.fail));
    line(o, "redis_connected:%d", es->redis_up);
    /* Under Cluster or Sentinel the url's address is unused: the seeds or
     * the master's name say where the agent looks. */
    if (cfg->redis.ncluster)
        line(o, "redis_endpoint:cluster:%s%s", cfg->redis.cluster[0], cfg->redis.ncluster > 1 ? ",..." : "");
    else if (cfg->redis.nsentinels) line(o, "redis_endpoint:sentinel:%s/%d", cfg->redis.sentinel_master, cfg->redis.db);
    else if (cfg->redis.unix_path[0]) line(o, "redis_endpoint:unix:%s", cfg->redis.unix_path);
    else line(o, "redis_endpoint:%s:%d/%d", cfg->redis.host, cfg->redis.port, cfg->redis.db);
    line(o, "redis_last_error:%s", es->redis_error ? es->redis_error : "");
    line(o, "redis_calls:%llu", es->redis_calls);
    line(o, "redis_errors:%llu", es->redis_errors);
    line(o, "redis_timeouts:%llu", es->redis_timeouts);
    line(o, "redis_noscript_reloads:%llu", es->noscript_reloads);
    line(o, "reserve_calls:%llu", es->reserve_calls);
    line(o, "reserve_items:%llu", es->reserve_items);
    line(o, "settle_calls:%llu", es->settle_calls);
    line(o, "settle_items:%llu", es->settle_items);
    line(o, "redis_calls_per_grant:%.4f", ratio(es->redis_calls, es->grants));
    line(o, "reserve_calls_per_grant:%.4f", ratio(es->reserve_calls, es->grants - es->grants_local));
    line(o, "max_script_ms:%g", cfg->redis.max_script_ms);
    line(o, "script_calls_over_bound:%llu", es->script_over_bound);
    size_t n = 0;
    engine_foreach_batch(server_engine(s), count_batch, &n);
    line(o, "batches:%zu", n);
    batch_lines bl = {o, 0};
    engine_foreach_batch(server_engine(s), batch_line, &bl);
}

static void section_stats(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    line(o, "# Stats");
    line(o, "acquires:%llu", es->acquires);
    line(o, "grants:%llu", es->grants);
    line(o, "grants_local:%llu", es->grants_local);
    line(o, "grants_per_sec:%.2f", st->grants_per_sec);
    line(o, "sheds:%llu", es->sheds);
    line(o, "sheds_per_sec:%.2f", st->sheds_per_sec);
    for (int i = 0; i < ENGINE_SHED_REASONS; i++)
        line(o, "sheds_%s:%llu", engine_shed_reasons[i], es->shed_by_reason[i]);
    line(o, "deferrals:%llu", es->deferrals);
    line(o, "retimed:%llu", es->retimed);
    line(o, "late_reasks:%llu", es->late_reasks);
    line(o, "lapsed_held:%llu", es->lapsed_held);
    line(o, "acquire_errors:%llu", es->errors);
    line(o, "queued:%llu", es->queued);
    line(o, "waiting:%llu", es->waiting);
    line(o, "callers:%llu", es->callers);
    line(o, "turns_passed:%llu", es->turns_passed);
    line(o, "wait_avg_ms:%.2f", ratio(es->wait_sum_ms, es->grants));
    line(o, "cancels:%llu", es->cancels);
    line(o, "estimates:%llu", es->estimates);
    line(o, "estimates_local:%llu", es->estimates_local);
    line(o, "settles:%llu", es->settles);
    line(o, "throttled:%llu", es->throttled);
    line(o, "quota_errors:%llu", es->quota_events);
    line(o, "breaker_sheds:%llu", es->breaker_sheds);
    line(o, "settle_headers:%llu", st->settle_headers);
    line(o, "settle_headers_recognised:%llu", st->settle_headers_recognised);
    line(o, "settle_pauses:%llu", es->settle_pauses);
    line(o, "retries_allowed:%llu", es->retries_allowed);
    line(o, "retries_refused:%llu", es->retries_refused);
    line(o, "tokens_reserved:%llu", es->tokens_estimated);
    line(o, "tokens_actual:%llu", es->tokens_actual);
    line(o, "commands_processed:%llu", st->commands);
    line(o, "commands_per_sec:%.2f", st->commands_per_sec);
    line(o, "unknown_commands:%llu", st->unknown_commands);
    line(o, "arity_errors:%llu", st->arity_errors);
}

/* One line per lane or tenant row: an index key (names may hold ':',
 * which would end an INFO key) and comma-separated fields, like Redis'
 * slave0:ip=..,port=... Names are [A-Za-z0-9._:-], so no value holds a ','
 * or a '='. */
static void class_lines(info_out *o, const char *kind, const classes_row *rows, size_t n) {
    char p[32];
    line(o, "%ss:%zu", kind, n);
    for (size_t i = 0; i < n; i++) {
        const classes_row *r = &rows[i];
        line(o,
             "%s%zu:deployment=%s,%s=%s,acquires=%llu,grants=%llu,sheds=%llu,deferrals=%llu,queued=%llu,"
             "tokens_reserved=%llu,wait_avg_ms=%.2f,requests_answered=%llu,requests_within_deadline=%llu,patience=%s",
             kind, i, r->deployment, kind, r->name, r->st.acquires, r->st.grants, r->st.sheds, r->st.deferrals,
             r->st.queued, r->st.tokens, ratio(r->st.wait_sum_ms, r->st.grants), r->st.answered, r->st.within,
             patience_text(r->st.answered, r->st.within, p, sizeof(p)));
    }
}

static void section_lanes(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    classes c;
    line(o, "# Lanes");
    if (classes_collect(server_engine(s), &c) != 0) {
        o->err = 1;
        return;
    }
    class_lines(o, "lane", c.lanes, c.nlanes);
    classes_free(&c);
}

static void section_tenants(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    classes c;
    line(o, "# Tenants");
    if (classes_collect(server_engine(s), &c) != 0) {
        o->err = 1;
        return;
    }
    class_lines(o, "tenant", c.tenants, c.ntenants);
    classes_free(&c);
}

typedef struct patience_lines {
    info_out *o;
    size_t n;
    int count_only;
} patience_lines;

static void patience_line(void *ud, const char *deployment, const char *lane, const char *tenant,
                          const engine_class_stats *st) {
    patience_lines *pl = ud;
    if (!st->answered) return;
    if (pl->count_only) {
        pl->n++;
        return;
    }
    char p[32];
    line(pl->o,
         "patience%zu:deployment=%s,lane=%s,tenant=%s,requests_answered=%llu,requests_within_deadline=%llu,"
         "patience=%s",
         pl->n++, deployment, lane, tenant, st->answered, st->within,
         patience_text(st->answered, st->within, p, sizeof(p)));
}

/* Patience: the requests answered within their deadline over all
 * requests answered (ACQUIREs on the socket, the proxy's requests), in
 * total and per class (deployment, lane, tenant) that answered any. */
static void section_patience(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    char p[32];
    line(o, "# Patience");
    line(o, "requests_answered:%llu", es->answered);
    line(o, "requests_within_deadline:%llu", es->within);
    line(o, "patience:%s", patience_text(es->answered, es->within, p, sizeof(p)));
    patience_lines pl = {o, 0, 1};
    engine_foreach_class(server_engine(s), patience_line, &pl);
    line(o, "patience_classes:%zu", pl.n);
    pl.n = 0;
    pl.count_only = 0;
    engine_foreach_class(server_engine(s), patience_line, &pl);
}

/* Budgets in money: one line per budget and period,
 * budget<i>:name=..,period=day,currency=USD,limit=..,spent=..,reserved=..,
 * left=..,renews_in_ms=..,warn=0|1 (amounts in the currency, as the last
 * look at Redis found them, every 2 s), then what this agent's settles
 * cost, spend<k>:deployment=..,tenant=..,client=..,currency=..,spent=..,
 * requests=... */
typedef struct budget_lines {
    info_out *o;
    size_t n;
} budget_lines;

static void budget_line(void *ud, const engine_budget_view *v) {
    budget_lines *bl = ud;
    for (int p = 0; p < ENGINE_PERIODS; p++) {
        if (!v->limit[p]) continue;
        long long left = v->limit[p] - v->spent[p] - v->reserved[p];
        long long renew = p == ENGINE_PERIOD_TOTAL ? -1 : v->renew_ms[p];
        int warn = v->limit[p] && (double)(v->spent[p] + v->reserved[p]) >= v->warn_at * (double)v->limit[p];
        line(bl->o,
             "budget%zu:name=%s,period=%s,currency=%s,limit=%.6f,spent=%.6f,reserved=%.6f,left=%.6f,"
             "renews_in_ms=%lld,warn=%d,known=%d",
             bl->n++, v->name, engine_period_names[p], v->currency, (double)v->limit[p] / 1e6,
             (double)v->spent[p] / 1e6, (double)v->reserved[p] / 1e6, (double)(left > 0 ? left : 0) / 1e6,
             v->known ? renew : -1, warn, v->known);
    }
}

static void spend_line(void *ud, const char *deployment, const char *tenant, const char *client_name,
                       const char *currency, long long spent_u, unsigned long long requests) {
    budget_lines *bl = ud;
    line(bl->o, "spend%zu:deployment=%s,tenant=%s,client=%s,currency=%s,spent=%.6f,requests=%llu", bl->n++, deployment,
         tenant, client_name, currency, (double)spent_u / 1e6, requests);
}

static void section_budgets(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    (void)st;
    line(o, "# Budgets");
    line(o, "budgets:%zu", engine_config(server_engine(s))->nbudgets);
    line(o, "budget_reserves:%llu", es->budget_reserves);
    line(o, "budget_sheds:%llu", es->shed_by_reason[ENGINE_SHED_BUDGET]);
    line(o, "budget_errors:%llu", es->budget_errors);
    line(o, "budget_unchecked:%llu", es->budget_unchecked);
    line(o, "budget_warnings:%llu", es->budget_warnings);
    budget_lines bl = {o, 0};
    engine_foreach_budget(server_engine(s), budget_line, &bl);
    bl.n = 0;
    engine_foreach_spend(server_engine(s), spend_line, &bl);
}

/* One line per group and one per (group, member), in the style of the
 * lane rows: group<i>:group=..,acquires=.. and group_member<k>:group=..,
 * member=..,priority=<index in members>,grants=... A request counts once
 * for its group (acquires, then grants or sheds), whichever members it
 * was asked of; spilled counts the grants not on the primary. */
static void section_groups(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    classes_group *g;
    size_t n;
    line(o, "# Groups");
    if (classes_groups(server_engine(s), &g, &n) != 0) {
        o->err = 1;
        return;
    }
    line(o, "groups:%zu", n);
    size_t nm = 0;
    for (size_t i = 0; i < n; i++) {
        line(o, "group%zu:group=%s,members=%zu,acquires=%llu,grants=%llu,spilled=%llu,sheds=%llu", i, g[i].name,
             g[i].nmembers, g[i].st.acquires, g[i].st.grants, g[i].st.spilled, g[i].st.sheds);
        nm += g[i].nmembers;
    }
    line(o, "group_members:%zu", nm);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t m = 0; m < g[i].nmembers; m++)
            line(o, "group_member%zu:group=%s,member=%s,priority=%zu,grants=%llu", k++, g[i].name, g[i].members[m], m,
                 g[i].st.member_grants[m]);
    free(g);
}

/* The HTTP proxy (agent.http): its listeners, connections, what it
 * answered, and the requests it governed and forwarded. */
static void section_http(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    const config *cfg = engine_config(server_engine(s));
    const struct proxy *p = server_proxy(s);
    proxy_stats ps;
    http_stats hs;
    memset(&ps, 0, sizeof(ps));
    memset(&hs, 0, sizeof(hs));
    if (p) proxy_get_stats(p, &ps, &hs);
    line(o, "# Http");
    line(o, "http_listeners:%llu", hs.listeners);
    char addrs[512] = "";
    size_t used = 0;
    for (size_t i = 0; p && http_server_address(proxy_server(p), i) && used < sizeof(addrs); i++)
        used += (size_t)snprintf(addrs + used, sizeof(addrs) - used, "%s%s", i ? "," : "",
                                 http_server_address(proxy_server(p), i));
    line(o, "http_listen:%s", addrs);
    line(o, "http_governing:%d", p ? 1 : 0);
    line(o, "http_connections:%llu", hs.connections);
    line(o, "http_max_connections:%lld", cfg->agent.http.max_connections);
    line(o, "http_max_header_bytes:%lld", cfg->agent.http.max_header_bytes);
    line(o, "http_max_body_bytes:%lld", cfg->agent.http.max_body_bytes);
    line(o, "http_connections_total:%llu", hs.connections_total);
    line(o, "http_rejected_connections:%llu", hs.rejected_max_connections);
    line(o, "http_requests:%llu", hs.requests);
    for (int k = 1; k <= 5; k++) line(o, "http_responses_%dxx:%llu", k, hs.responses[k]);
    line(o, "http_streams:%llu", hs.streams);
    line(o, "http_paused_streams:%llu", hs.paused_streams);
    line(o, "http_refused_bad_request:%llu", hs.refused_bad_request);
    line(o, "http_refused_too_large:%llu", hs.refused_too_large);
    line(o, "http_closed_header_timeout:%llu", hs.closed_header_timeout);
    line(o, "http_closed_body_timeout:%llu", hs.closed_body_timeout);
    line(o, "http_closed_idle_timeout:%llu", hs.closed_idle_timeout);
    line(o, "http_closed_write_timeout:%llu", hs.closed_write_timeout);
    line(o, "http_closed_client_gone:%llu", hs.closed_client_gone);
    line(o, "http_abandoned:%llu", hs.abandoned);
    for (int a = 0; a < 3; a++) line(o, "http_recognised_%s:%llu", proxy_api_name((proxy_api)a), ps.by_api[a]);
    line(o, "http_unknown_routes:%llu", ps.errors[PROXY_ERR_NOT_FOUND]);
    line(o, "http_unknown_models:%llu", ps.errors[PROXY_ERR_MODEL_NOT_FOUND]);
    line(o, "http_bad_requests:%llu", ps.errors[PROXY_ERR_BAD_REQUEST]);
    line(o, "http_no_endpoint:%llu", ps.errors[PROXY_ERR_NO_ENDPOINT]);
    line(o, "http_calls:%llu", ps.live);
    line(o, "http_forwarded:%llu", ps.forwarded);
    line(o, "http_answered_upstream:%llu", ps.answered);
    line(o, "http_streamed:%llu", ps.streamed);
    line(o, "http_shed:%llu", ps.shed);
    line(o, "http_retried:%llu", ps.retried);
    line(o, "http_retries_refused:%llu", ps.retries_refused);
    line(o, "http_upstream_errors:%llu", ps.upstream_errors);
    line(o, "http_upstream_timeouts:%llu", ps.upstream_timeouts);
    line(o, "http_gone:%llu", ps.abandoned);
    line(o, "http_gone_waiting:%llu", ps.abandoned_waiting);
    line(o, "http_unauthorized:%llu", ps.unauthorized);
    line(o, "http_injected:%llu", ps.injected);
    line(o, "http_mode:%s", cfg->agent.http.mode == CONFIG_HTTP_OBSERVE ? "observe" : "govern");
    line(o, "http_observed:%llu", ps.observed);
    line(o, "http_would_wait:%llu", ps.would_wait);
    line(o, "http_would_wait_ms:%llu", ps.would_wait_ms);
    line(o, "http_would_wait_max_ms:%llu", ps.would_wait_max_ms);
    line(o, "http_would_shed:%llu", ps.would_shed);
    for (int i = 0; i < ENGINE_SHED_REASONS; i++)
        if (ps.would_shed_by_reason[i])
            line(o, "http_would_shed_%s:%llu", engine_shed_reasons[i], ps.would_shed_by_reason[i]);
    line(o, "http_observe_errors:%llu", ps.observe_errors);
}

static void section_memory(info_out *o, server *s, const server_stats *st, const engine_stats *es) {
    (void)s;
    (void)es;
    memory_stats m;
    memory_sample(&m);
    line(o, "# Memory");
    line(o, "used_memory_rss:%lld", m.rss_bytes);
    line(o, "heap_in_use:%lld", m.heap_in_use);
    line(o, "heap_free:%lld", m.heap_free);
    line(o, "heap_mmapped:%lld", m.heap_mmapped);
    line(o, "memory_trims:%llu", st->memory_trims);
    line(o, "memory_trimmed_bytes:%lld", st->memory_trimmed_bytes);
}

typedef void (*section_fn)(info_out *o, server *s, const server_stats *st, const engine_stats *es);

/* The sections, in INFO order. */
static const struct {
    const char *name;
    section_fn fn;
} sections[] = {
    {"server", section_server},         {"clients", section_clients}, {"deployments", section_deployments},
    {"dimensions", section_dimensions}, {"redis", section_redis},     {"stats", section_stats},
    {"lanes", section_lanes},           {"tenants", section_tenants}, {"groups", section_groups},
    {"patience", section_patience},     {"http", section_http},       {"budgets", section_budgets},
    {"memory", section_memory},
};

const char *const info_sections[] = {"server",  "clients", "deployments", "dimensions", "redis",   "stats",  "lanes",
                                     "tenants", "groups",  "patience",    "http",       "budgets", "memory", NULL};

int info_render(server *s, const char *section, resp_buf *out) {
    int all = !section || !*section || !strcasecmp(section, "all") || !strcasecmp(section, "default") ||
              !strcasecmp(section, "everything");
    server_stats st;
    engine_stats es;
    server_get_stats(s, &st);
    engine_get_stats(server_engine(s), &es);
    info_out o = {out, 0};
    int first = 1;
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
        if (!all && strcasecmp(section, sections[i].name) != 0) continue;
        if (!first) line(&o, "%s", "");
        first = 0;
        sections[i].fn(&o, s, &st, &es);
    }
    return o.err ? RESP_ENOMEM : 0;
}
