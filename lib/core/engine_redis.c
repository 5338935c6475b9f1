/* engine_redis: the flush once per loop turn (settles, then reserves),
 * writing the limits (configure), the heartbeat, and Redis coming and
 * going. */
#define _GNU_SOURCE
#include "engine_internal.h"
#include "timeutil.h"
#include "tz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- flushing (once per loop turn) ------------------------------------------ */

static void on_flush(uv_check_t *h) {
    engine *e = h->data;
    e->flush_armed = 0;
    uv_check_stop(&e->flush_check);
    uv_idle_stop(&e->flush_idle);
    /* Settles first: a cancel gives its slot back before the next reserve.
     * Plain settles wait for their window (settle_due) so that acquires
     * flushing every turn do not send them one by one. */
    int due = e->settle_due || e->stopping;
    e->settle_due = 0;
    engine__budget_flush(e);
    for (dep *d = e->deps; d; d = d->next) {
        if (due || d->settle_urgent) {
            d->settle_urgent = 0;
            dep_flush_settles(d);
            if (d->nsettles && !uv_is_active((uv_handle_t *)&e->settle_timer))
                uv_timer_start(&e->settle_timer, engine__on_settle_timer, ENGINE_SETTLE_DELAY_MS, 0);
        }
        dep_flush_reserves(d);
    }
    for (gq *q = e->gqs; q; q = q->next) engine__gq_flush(e, q);
    /* Classes Redis deferred ask again when it said capacity opens. */
    uint64_t now = uv_now(e->loop), next = 0;
    for (dep *d = e->deps; d; d = d->next)
        for (size_t i = 0; i < d->nclasses; i++) {
            call_class *k = &d->classes[i];
            if (k->q.n && k->ask_at > now && (!next || k->ask_at < next)) next = k->ask_at;
        }
    if (next && !e->stopping) uv_timer_start(&e->defer_timer, engine__on_hold_timer, next - now, 0);
}

static void on_idle(uv_idle_t *h) { (void)h; }

void engine__on_hold_timer(uv_timer_t *t) { engine__flush_arm(t->data); }

void engine__on_settle_timer(uv_timer_t *t) {
    engine *e = t->data;
    e->settle_due = 1;
    engine__flush_arm(e);
}

void engine__flush_arm(engine *e) {
    if (e->flush_armed || e->stopped) return;
    e->flush_armed = 1;
    uv_check_start(&e->flush_check, on_flush);
    uv_idle_start(&e->flush_idle, on_idle);
}

/* ---- configure and heartbeat ------------------------------------------------ */

static void on_configure(void *arg, redisReply *r, const char *err) {
    dep *d = arg;
    engine *e = d->e;
    e->calls_out--;
    d->configuring = 0;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        d->configured = 1;
        d->script_error[0] = '\0';
    } else {
        d->configured = 0;
        e->stats.errors++;
        if (r && r->type == REDIS_REPLY_ERROR) dep_script_error(d, "configure", r->str);
    }
    engine__flush_arm(e); /* pending callers go to Redis, or local on failure */
    engine__maybe_finish_stop(e);
}

void dep_configure(dep *d) {
    engine *e = d->e;
    if (!d->cfg || d->configuring || !dep_ready(d) || e->stopping) return;
    const struct config_deployment *c = d->cfg;
    /* The configure script's fields (docs/redis-keys.md), from the YAML:
     * 34 scalars, the lane and tenant settings, one per lane and tenant. */
    size_t cap = 48 + c->nlanes + c->ntenants;
    struct kv {
        char name[CONFIG_NAME_MAX + 16];
        char val[96];
    } *kv = calloc(cap, sizeof(*kv));
    if (!kv) return;
    int n = 0;
#define F(name_, fmt, ...)                                                                                             \
    (snprintf(kv[n].name, sizeof(kv[n].name), "%s", (name_)),                                                          \
     snprintf(kv[n].val, sizeof(kv[n].val), fmt, __VA_ARGS__), n++)
    F("rpm", "%lld", c->rpm);
    F("tpm", "%lld", c->tpm);
    F("itpm", "%lld", c->itpm);
    F("otpm", "%lld", c->otpm);
    F("burst_requests", "%lld", c->burst.requests);
    F("requests_window_ms", "%lld", c->requests_window_ms);
    F("pause_max_ms", "%lld", c->pause_max_ms);
    F("burst_tokens", "%lld", c->burst.tokens);
    F("burst_input", "%lld", c->burst.input_tokens);
    F("burst_output", "%lld", c->burst.output_tokens);
    F("rpd", "%lld", c->rpd);
    F("tpd", "%lld", c->tpd);
    F("max_concurrency", "%lld", c->max_concurrency);
    F("lease_ms", "%lld", c->lease_s * 1000);
    F("refund_tokens", "%d", c->refunds.tokens ? 1 : 0);
    F("refund_input", "%d", c->refunds.input_tokens ? 1 : 0);
    F("refund_output", "%d", c->refunds.output_tokens ? 1 : 0);
    F("adapt_limits", "%d", c->adapt.limits ? 1 : 0);
    F("adapt_outside", "%d", c->adapt.outside ? 1 : 0);
    F("retry_ttl_ms", "%lld", c->retry_budget.ttl_s * 1000);
    F("retry_min_per_s", "%lld", c->retry_budget.min_per_s);
    F("retry_percent", "%.6g", c->retry_budget.percent);
    F("aimd_decrease", "%.6g", c->aimd.decrease);
    F("aimd_min_scale", "%.6g", c->aimd.min_scale);
    F("aimd_increase", "%.6g", c->aimd.increase);
    F("aimd_interval_ms", "%lld", c->aimd.interval_s * 1000);
    F("aimd_min_throttles", "%lld", c->aimd.min_throttles);
    F("aimd_window_ms", "%lld", c->aimd.window_s * 1000);
    F("jitter_ms", "%lld", c->jitter_ms);
    F("refund_lag_ms", "%lld", c->refund_lag_ms);
    F("tokens_rule", "%s", c->tokens_rule == CONFIG_TOKENS_MAX ? "max" : "sum");
    if (c->output_burndown != 1) F("output_burndown", "%.6g", c->output_burndown);
    F("horizon_ms", "%lld", c->horizon_ms);
    F("estimate_exact", "%d", c->estimate == CONFIG_ESTIMATE_EXACT ? 1 : 0);
    F("output_charge", "%s", c->output_charge == CONFIG_OUTPUT_EXPECTED ? "expected" : "max");
    F("estimate_half_life_ms", "%lld", c->estimate_half_life_s * 1000);
    F("estimate_learn_horizon_ms", "%lld", c->estimate_learn_horizon_ms);
    F("silent_ms", "%lld", engine_silent_ms(e));
    F("agent_window_ms", "%lld", engine_agent_window_ms(e));
    F("silent_hold_ms", "%lld", engine_silent_hold_ms(e));
    if (c->nlanes || c->ntenants) {
        F("tenant_idle_ms", "%lld", c->tenant_idle_ms);
        F("lane_step_ms", "%lld", c->lane_step_ms);
    }
    if (c->default_lane[0]) F("default_lane", "%s", c->default_lane);
    if (c->group_) {
        /* A group member: the group's circuit breaker (docs/redis-keys.md). */
        F("breaker_failure_ratio", "%.6g", c->group_->breaker.failure_ratio);
        F("breaker_min_requests", "%lld", c->group_->breaker.min_requests);
        F("breaker_window_ms", "%lld", c->group_->breaker.window_s * 1000);
        F("breaker_break_ms", "%lld", c->group_->breaker.break_s * 1000);
    }
    for (size_t i = 0; i < c->nlanes; i++) {
        const struct config_lane *l = &c->lanes[i];
        snprintf(kv[n].name, sizeof(kv[n].name), "lane.%s", l->name);
        snprintf(kv[n].val, sizeof(kv[n].val), "%lld,%lld,%.6g", l->priority, l->horizon_ms, l->headroom);
        n++;
    }
    for (size_t i = 0; i < c->ntenants; i++) {
        const struct config_tenant *t = &c->tenants[i];
        snprintf(kv[n].name, sizeof(kv[n].name), "tenant.%s", t->name);
        snprintf(kv[n].val, sizeof(kv[n].val), "%.6g,%lld,%lld,%lld", t->weight, t->ceiling_rpm, t->ceiling_tpm,
                 t->daily_tokens);
        n++;
    }
#undef F
    wire_args a;
    wire_args_init(&a);
    for (int i = 0; i < n; i++) wire_configure_field(&a, kv[i].name, kv[i].val);
    /* The day of the daily limits in a time zone (daily_reset): its
     * offsets from two days ago to ten years on, which lua/common.lua's
     * sl_day reads (Redis has no tz database). Rewritten at every
     * configure (start, reload, Redis back). */
    char *zone = NULL;
    if (c->daily_reset[0]) {
        tz_zone *z = NULL;
        if (tz_load(NULL, c->daily_reset, &z, NULL, 0) == 0) {
            long long now = wall_clock_ms(), to = now + 3653LL * 86400000;
            int len = tz_changes(z, now - 2 * 86400000LL, to, NULL, 0);
            zone = len > 0 ? malloc((size_t)len + 1) : NULL;
            if (zone && tz_changes(z, now - 2 * 86400000LL, to, zone, (size_t)len + 1) == len)
                wire_configure_field(&a, "day_zone", zone);
            tz_free(z);
        }
    }
    if (wire_args_done(&a, 0) == 0 &&
        rrouter_script(e->redis, SCRIPT_CONFIGURE, d->keys, a.argc, a.argv, on_configure, d) == 0) {
        d->configuring = 1;
        e->calls_out++;
    }
    wire_args_free(&a);
    free(zone);
    free(kv);
}

/* In use now: callers queued or waiting for their slot, or settles queued. */
static int dep_in_use(const dep *d) { return d->npending || d->waiting.n || d->nsettles; }

/* The first ARGV of every script call of this agent on d: "@<id>/<g>",
 * its proof of life with the promise of its next call within g ms
 * (lua/common.lua sl_silent). The promise follows the agent's own pace:
 * twice the time since its previous call, between a quarter heartbeat and
 * silent_ms, so an agent that calls Redis often is taken for silent soon
 * after it is cut off, and one that calls seldom costs nothing more. A
 * heartbeat sent to keep a promise (keepalive) doubles it, so a pause
 * costs a few of them before the pace of one a heartbeat. Schedules that
 * heartbeat if nothing else goes before (engine__on_heartbeat_timer). keepalive:
 * 0 for a reserve or settle, 1 for a heartbeat. */
const char *dep_agent_arg(dep *d, int keepalive) {
    engine *e = d->e;
    double now = (double)uv_now(e->loop);
    /* A heartbeat before the promise is due (the interval's refresh of the
     * live count) keeps it as it is. */
    if (keepalive && now < d->renew_at) keepalive = 2;
    double g = keepalive == 2 ? d->g_sent : keepalive ? 2 * d->g_sent : 2 * (now - d->sent_at);
    g = fmin(fmax(g, (double)engine_min_promise_ms(e)), (double)engine_silent_ms(e));
    snprintf(d->arg, sizeof(d->arg), "%s/%.0f", e->agent_arg, g);
    d->g_sent = g;
    d->sent_at = now;
    if (!keepalive) d->used_at = now;
    /* Renewed half-way through a short promise, a quarter heartbeat (at
     * least 250 ms) before the end of a long one (whichever is sooner): within a tick of that, with what Redis may
     * have kept of an older call (an eighth of g, sl_silent) to spare. */
    d->renew_at = now + g - fmin(g / 2, (double)engine_promise_margin_ms(e));
    return d->arg;
}

/* A heartbeat (or hand-over) of d goes out: the oldest in flight was
 * sent no earlier than this (dep_hb_answered). */
void dep_hb_sent(dep *d) {
    if (d->hb_out++ == 0) d->hb_sent = (double)uv_now(d->e->loop);
}

/* Its reply (or failure) came: when the call it answers was sent, at the
 * earliest. Replies come in the order of the calls (one connection);
 * with more in flight the oldest's time stands for them all. */
double dep_hb_answered(dep *d) {
    double s = d->hb_sent;
    if (d->hb_out > 0) d->hb_out--;
    return s;
}

/* A reply to a call that named this agent, sent at sent_at (uv_now):
 * Redis counts it live until the promise of that call passes (at the
 * latest), and it ran there no earlier than sent_at (dep_lapsed). */
void dep_seen(dep *d, double sent_at) {
    dep_lapse_sweep(d);
    if (sent_at > d->ran_after) d->ran_after = sent_at;
    double now = (double)uv_now(d->e->loop);
    d->seen_until = fmax(d->seen_until, now + d->g_sent);
}

/* A heartbeat's reply: the live agents of d. After a leave this agent is
 * not among them, but should it have to pace d without Redis it would be
 * one more: its fallback share counts itself. */
static void dep_counted(dep *d, long long live, double sent_at) {
    /* Sent when there was nothing to hand over (dep_announce): nothing is
     * left to hand over after it either, until the next outage. */
    d->handed_over = 1;
    if (!d->member) live++;
    else dep_seen(d, sent_at);
    if (live > 0) d->live_agents = live;
}

/* One deployment's heartbeat reply: {live, pause_shift_ms, now_us,
 * requests_backlog_ms, tokens_backlog_ms} (lua/heartbeat.lua; without the
 * backlogs, or a bare count, from older scripts). Follows the pause shift
 * and re-timing it carries, keeps where the fleet's schedule ends (as a
 * reserve's reply does: an agent without callers knows it too, should it
 * lose Redis), and returns the live count, or -1 when r is not a
 * heartbeat's reply. */
long long dep_heartbeat_reply(dep *d, const redisReply *r) {
    wire_heartbeat_reply h;
    if (wire_read_heartbeat(r, &h) != 0) return -1;
    return dep_heartbeat_seen(d, &h);
}

long long dep_heartbeat_seen(dep *d, const wire_heartbeat_reply *h) {
    if (h->has_shift) dep_follow_shift(d, &h->shift, h->now_us);
    if (h->requests_backlog_ms >= 0) dep_fleet_seen(d, h->requests_backlog_ms, h->tokens_backlog_ms);
    return h->live;
}

static void on_heartbeat(void *arg, redisReply *r, const char *err) {
    dep *d = arg;
    d->e->calls_out--;
    double sent_at = dep_hb_answered(d);
    long long live = dep_heartbeat_reply(d, r);
    if (live >= 0) dep_counted(d, live, sent_at);
    /* The first heartbeat follows the connect: a script that cannot run
     * (an ACL without a command it calls) shows here, before any caller. */
    if (r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str)) dep_script_error(d, "heartbeat", r->str);
    engine__maybe_finish_stop(d->e);
}

void dep_heartbeat(dep *d, int leave) {
    engine *e = d->e;
    wire_args a;
    wire_args_init(&a);
    wire_heartbeat(&a, dep_agent_arg(d, 1), e->agent_id, engine_agent_window_ms(e), leave);
    if (wire_args_done(&a, 0) == 0 &&
        rrouter_script(e->redis, SCRIPT_HEARTBEAT, d->keys, a.argc, a.argv, on_heartbeat, d) == 0) {
        e->calls_out++;
        dep_hb_sent(d);
        d->member = !leave;
    }
    wire_args_free(&a);
}

/* Says this agent is alive for d (and joins its agents set). Back from an
 * outage with local grants still to be released, or with slots of the
 * fleet's schedule (as last seen) still ahead, the heartbeat is the
 * hand-over of that tail (dep_hand_over): a plain one first would count the agent live
 * again (the others stop holding its share back, lua/common.lua
 * sl_silent) while its tail is not yet behind the shared schedule. */
void dep_announce(dep *d) {
    if (dep_needs_hand_over(d)) dep_hand_over(d);
    else dep_heartbeat(d, 0);
}

/* The heartbeats of one tick on one Redis (or Sentinel): one script call
 * for all the deployments due (lua/heartbeat.lua, several at once). */
typedef struct hb_batch {
    engine *e;
    size_t n;
    dep *deps[];
} hb_batch;

static void on_heartbeats(void *arg, redisReply *r, const char *err) {
    hb_batch *b = arg;
    engine *e = b->e;
    e->calls_out--;
    for (size_t i = 0; i < b->n; i++) {
        dep *d = b->deps[i];
        double sent_at = dep_hb_answered(d);
        wire_heartbeat_reply h;
        long long live = wire_read_heartbeat_of(r, b->n, i, &h) == 0 ? dep_heartbeat_seen(d, &h) : -1;
        if (live >= 0) dep_counted(d, live, sent_at);
    }
    if (r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str) && b->n)
        dep_script_error(b->deps[0], "heartbeat", r->str);
    free(b);
    engine__maybe_finish_stop(e);
}

/* One heartbeat for the n deployments in deps (n >= 2, all ready and
 * handed over), or one leave (leave): the promise is the longest any of
 * them would make. On failure each goes its own way at the next tick. */
static void heartbeat_many(engine *e, dep **deps, size_t n, int leave) {
    hb_batch *b = malloc(sizeof(*b) + n * sizeof(dep *));
    char(*keys)[SCRIPTS_KEY_MAX] = malloc(n * SCRIPTS_NKEYS * sizeof(*keys));
    if (!b || !keys) {
        free(b);
        free(keys);
        return;
    }
    b->e = e;
    b->n = n;
    double g = 0;
    for (size_t i = 0; i < n; i++) {
        b->deps[i] = deps[i];
        memcpy(keys[i * SCRIPTS_NKEYS], deps[i]->keys, sizeof(deps[i]->keys));
        dep_agent_arg(deps[i], 1);
        g = fmax(g, deps[i]->g_sent);
    }
    char arg[sizeof(deps[0]->arg)];
    snprintf(arg, sizeof(arg), "%s/%.0f", e->agent_arg, g);
    double now = (double)uv_now(e->loop);
    for (size_t i = 0; i < n; i++) {
        deps[i]->g_sent = g;
        deps[i]->renew_at = now + g - fmin(g / 2, (double)engine_promise_margin_ms(e));
        deps[i]->member = !leave;
    }
    wire_args a;
    wire_args_init(&a);
    wire_heartbeat(&a, arg, e->agent_id, engine_agent_window_ms(e), leave);
    if (wire_args_done(&a, 0) == 0 && rrouter_script_n(e->redis, SCRIPT_HEARTBEAT, keys, (int)(n * SCRIPTS_NKEYS),
                                                       a.argc, a.argv, on_heartbeats, b) == 0) {
        e->calls_out++;
        for (size_t i = 0; i < n; i++) dep_hb_sent(deps[i]);
    } else {
        free(b);
    }
    wire_args_free(&a);
    free(keys);
}

/* Adds d to the list (grown by doubling); 0 when out of memory. */
static int dep_list_add(dep ***list, size_t *n, size_t *cap, dep *d) {
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        dep **g = realloc(*list, nc * sizeof(**list));
        if (!g) return 0;
        *list = g;
        *cap = nc;
    }
    (*list)[(*n)++] = d;
    return 1;
}

/* Every tick: a deployment in use here gets a heartbeat when its last
 * call's promise is due to be renewed and nothing else went, and every
 * heartbeat interval in any case (its reply is the live count, the
 * fallback share); one unused for 30 heartbeats (engine_idle_leave_ms)
 * leaves the agents set, so an idle fleet makes no calls at all and the
 * fallback share counts the agents that use the deployment. On one Redis
 * (or Sentinel) the heartbeats of a tick go in one call whatever the
 * number of deployments: one call per agent per interval. */
void engine__on_heartbeat_timer(uv_timer_t *t) {
    engine *e = t->data;
    double now = (double)uv_now(e->loop);
    engine__budget_tick(e);
    int batch = strcmp(rrouter_mode(e->redis), "cluster") != 0;
    dep **lists[2] = {NULL, NULL}; /* due, leaving */
    size_t n[2] = {0, 0}, cap[2] = {0, 0};
    int refresh = now >= e->refresh_at;
    if (refresh) e->refresh_at = now + (double)e->cfg->agent.heartbeat_ms;
    for (dep *d = e->deps; d; d = d->next) {
        if (!d->cfg || !dep_ready(d)) continue;
        if (!d->configured) dep_configure(d);
        if (dep_in_use(d)) d->used_at = now;
        int in_use = now - d->used_at < (double)engine_idle_leave_ms(e);
        int plain = !dep_needs_hand_over(d);
        if (in_use && (refresh || now >= d->renew_at)) {
            if (!batch || !plain || !dep_list_add(&lists[0], &n[0], &cap[0], d)) dep_announce(d);
        } else if (!in_use && d->member) {
            if (!batch || !dep_list_add(&lists[1], &n[1], &cap[1], d)) dep_heartbeat(d, 1);
        }
    }
    for (int leave = 0; leave < 2; leave++) {
        if (n[leave] == 1) dep_heartbeat(lists[leave][0], leave);
        else if (n[leave] > 1) heartbeat_many(e, lists[leave], n[leave], leave);
        free(lists[leave]);
    }
}

void engine__on_redis_up(void *ud) {
    engine *e = ud;
    e->ever_ready = 1;
    int any = rrouter_any_ready(e->redis);
    if (any && !e->redis_up)
        engine__elog(e, CONFIG_LOG_INFO, "Redis connected (%s): using the shared budget", rrouter_mode(e->redis));
    if (any && !e->redis_up) e->mode_since_ms = wall_clock_ms();
    e->redis_up = any;
    e->stats.redis_up = any;
    /* Write limits wherever the serving node is ready and they are not
     * (a node came up, or the cluster's slot map moved a deployment). */
    for (dep *d = e->deps; d; d = d->next) {
        if (d->cfg && dep_ready(d) && !d->configured && !d->configuring) {
            dep_configure(d);
            d->used_at = (double)uv_now(e->loop); /* joins; leaves if unused */
            dep_announce(d);
        }
    }
}

void engine__on_redis_down(void *ud, const char *why) {
    engine *e = ud;
    e->ever_down = 1;
    int any = rrouter_any_ready(e->redis);
    engine__elog(e, any ? CONFIG_LOG_WARN : CONFIG_LOG_ERROR, "Redis unreachable: %s; %s",
                 why ? why : "connection lost",
                 e->cfg->agent.fail == CONFIG_FAIL_CLOSED ? "refusing (agent.fail: closed)"
                                                          : "pacing locally at this agent's share");
    if (!any && e->redis_up) e->mode_since_ms = wall_clock_ms();
    e->redis_up = any;
    e->stats.redis_up = any;
    for (dep *d = e->deps; d; d = d->next) {
        if (!dep_ready(d)) {
            if (d->configured || d->configuring) d->lost_at = (double)uv_now(e->loop);
            d->configured = 0;
            d->configuring = 0;
            d->handed_over = 0;
        }
    }
    engine__flush_arm(e); /* queued callers are decided locally now */
}
