/* engine_local: without Redis, each call is decided by a local GCRA at
 * this agent's share; back with Redis, the local tail is handed over. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- local fallback ------------------------------------------------------- */

/* The share of the deployment's rate this agent may use alone. */
double local_share(const dep *d) {
    if (d->live_agents > 0) return 1.0 / (double)d->live_agents;
    return d->e->cfg->agent.fallback_share;
}

/* When the others may stop holding this agent's share and drop it
 * (lua/heartbeat.lua, abandon), giving the grants it was made with slots
 * from then on to the rest of the fleet: a call of its ran in Redis no
 * earlier than ran_after (the send of the latest one answered), Redis
 * scored it then plus its promise, and holds the share until that score
 * is agent_window_ms old (silent_hold_ms), then drops the agent; a
 * promise margin keeps clear of a late timer. */
double dep_lapse_at(const dep *d) {
    return d->ran_after + (double)engine_agent_window_ms(d->e) - (double)engine_promise_margin_ms(d->e);
}

/* Whether dep_lapse_at means anything: this agent is in the agents set
 * and Redis answered one of its calls. */
static int lapse_known(const dep *d) { return d->member && d->ran_after > 0; }

/* agent.fail: hold. Local slots at or after dep_lapse_at would overlap
 * the others' full rate: the agent refuses them. 0 (refuse every local
 * slot) when Redis never answered this agent or it left the agents set:
 * no share is held for it. (Before, the last reply's time less
 * redis.timeout_ms stood for the call's send: with a timeout longer than
 * the window that lay before every reply, and every local slot was
 * refused.) */
static double local_held_until(const dep *d) { return lapse_known(d) ? dep_lapse_at(d) : 0; }

/* Whether this agent may have been dropped by time t: a member, answered
 * once, and t at or past dep_lapse_at. It must then release no grant of
 * Redis' (engine_call.c). */
int dep_lapsed(const dep *d, double t) { return lapse_known(d) && t >= dep_lapse_at(d); }

/* The earliest local slot for cost c on one dimension (rate r per ms,
 * burst b), with the release-jitter margin of the reserve script: plan
 * against b - r J; a cost above that waits for a full bucket plus J. */
static double local_earliest(double tat, double r, double b, double c, double jitter_ms, double *jitter) {
    double j = fmin(jitter_ms, 0.5 * b / r);
    double room = b - j * r - c;
    *jitter = room < 0 ? j : 0;
    return room < 0 ? tat + j : tat - room / r;
}

/* The cost of a request in each dimension on d: a request, the combined
 * estimate (the larger of input and max output when split on a deployment
 * with tokens_rule max, as OpenAI counts), and its input and max output
 * (each the combined estimate when not split: an upper bound of both, as
 * the reserve script charges). */
static void request_costs(const dep *d, long long tokens, int split, long long input, long long output, int exact,
                          double cost[ENGINE_DIMS]) {
    /* Calibrated as the reserve script does (sl_cal_item), at the ratio
     * the last settle reply gave (1 before any): the input part times it,
     * rounded up; a combined figure only when it is above 1. */
    double r = d->rates[ENGINE_DIM_TOKENS].estimate_ratio;
    if (!exact && r > 0 && r != 1) {
        if (split && input > 0) {
            input = (long long)ceil((double)input * r - 1e-9);
            tokens = input + output;
        } else if (!split && r > 1 && tokens > 0) {
            tokens = (long long)ceil((double)tokens * r - 1e-9);
        }
    }
    cost[ENGINE_DIM_REQUESTS] = 1;
    cost[ENGINE_DIM_TOKENS] = (double)tokens;
    if (split && d->cfg && d->cfg->tokens_rule == CONFIG_TOKENS_MAX)
        cost[ENGINE_DIM_TOKENS] = (double)(input > output ? input : output);
    cost[ENGINE_DIM_INPUT] = (double)(split ? input : tokens);
    cost[ENGINE_DIM_OUTPUT] = (double)(split ? output : tokens);
}

/* The local slot of a request of costs cost on d: the slot (uv_now ms),
 * the reason when it is not now, the fence after it, and per dimension
 * the rate and the bucket's TAT before the grant (tat; the caller that
 * grants commits from them). Returns 0, or 1 when the request can never
 * fit (too_large). Changes nothing. */
static int local_slot(const dep *d, const double cost[ENGINE_DIMS], double *slot, const char **why, double *fence_out,
                      double rate[ENGINE_DIMS], double tat[ENGINE_DIMS]) {
    static const int reasons[ENGINE_DIMS] = {ENGINE_SHED_RPM, ENGINE_SHED_TPM, ENGINE_SHED_ITPM, ENGINE_SHED_OTPM};
    const engine *e = d->e;
    const struct config_deployment *cfg = d->cfg;
    for (int k = ENGINE_DIM_TOKENS; k < ENGINE_DIMS; k++)
        if (d->rates[k].configured > 0 && cost[k] > d->rates[k].configured) return 1;
    double share = local_share(d), now = (double)uv_now(e->loop), fence = 0, j;
    const char *reason = engine_shed_reasons[ENGINE_SHED_RPM];
    /* The local bucket is empty where the fleet's schedule ends: grants
     * Redis already made keep being released. Other agents keep extending
     * that schedule at the full rate until Redis takes this agent for
     * silent and holds its share back, when the promise of its last call
     * that reached Redis passes (dep_agent_arg): of the last call answered,
     * or of the last one sent, which may have arrived (and of the last
     * group call, which promises silent_ms). Assume the schedule's reach
     * past now (the backlog, as last seen) held until then. The token
     * backlog is the longest of the token dimensions'. */
    double held_from = fmax(fmax(d->seen_until, d->sent_at > 0 ? d->sent_at + ENGINE_ARRIVAL_PAD_MS + d->g_sent : 0),
                            d->cfg->group_ ? e->group_sent_at + (double)engine_silent_ms(e) : 0);
    double fleet_req = fmax(d->fleet_tat_req, held_from + d->fleet_backlog_req);
    double fleet_tok = fmax(d->fleet_tat_tok, held_from + d->fleet_backlog_tok);
    double s = fmax(now, d->local_last_slot);
    double jit = (double)cfg->jitter_ms;
    for (int k = 0; k < ENGINE_DIMS; k++) {
        const engine_dim_rates *dr = &d->rates[k];
        rate[k] = 0;
        tat[k] = d->local_tat[k];
        if (dr->configured <= 0) continue;
        /* The fleet's rate before silent agents' shares were held back
         * (one of them is this agent's share now). */
        double per_min =
            dr->known && dr->effective > 0 ? fmin(dr->effective + dr->held, dr->configured) : dr->configured;
        double limit = dr->known && dr->limit > 0 ? fmin(dr->limit, dr->configured) : dr->configured;
        rate[k] = per_min * share / 60000.0;
        double burst = fmax(1.0, floor(d->burst_cfg[k] * share * limit / dr->configured));
        double fleet = k == ENGINE_DIM_REQUESTS ? fleet_req : fleet_tok;
        tat[k] = fmax(d->local_tat[k], fleet + burst / rate[k]);
        double t = local_earliest(tat[k], rate[k], burst, cost[k], jit, &j);
        fence = fmax(fence, j);
        if (t > s) {
            s = t;
            reason = engine_shed_reasons[reasons[k]];
        }
    }
    if ((double)d->paused_until > s) {
        s = (double)d->paused_until;
        reason = engine_shed_reasons[ENGINE_SHED_PAUSED];
    }
    *slot = s;
    *why = reason;
    *fence_out = fence;
    return 0;
}

/* Decides one call with a local GCRA at this agent's share of the rate.
 * Same rules as the reserve script, on uv_now; never unlimited. Each
 * dimension runs at the rate Redis last reported the fleet at (a lower
 * limit the provider's headers gave, less others' use), else the
 * configured one. */
void local_decide(engine_call *c) {
    dep *d = c->d;
    engine *e = c->e;
    if (call_dep_removed(c)) return;
    if (e->cfg->agent.fail == CONFIG_FAIL_CLOSED) {
        call_complete(c, SL_EUNAVAIL, NULL, LOCAL_CLOSED_MSG);
        return;
    }
    double cost[ENGINE_DIMS], rate[ENGINE_DIMS], tat[ENGINE_DIMS], s, fence;
    const char *reason;
    request_costs(d, c->tokens, c->split, c->input, c->output, c->exact, cost);
    if (local_slot(d, cost, &s, &reason, &fence, rate, tat)) {
        engine_shed sh = {.reason = engine_shed_reasons[ENGINE_SHED_TOO_LARGE], .retry_after_ms = -1};
        call_shed(c, &sh);
        return;
    }
    if (e->cfg->agent.fail == CONFIG_FAIL_HOLD && s >= local_held_until(d)) {
        call_complete(c, SL_EUNAVAIL, NULL,
                      "Redis is unreachable for longer than the others hold this agent's share back "
                      "(agent.silent_hold_ms) and agent.fail is hold: refusing");
        return;
    }
    /* Against what is left of its max wait, as the reserve script is told
     * (engine__call_left_ms): a call that waited already (deferred, held
     * through the connect grace, timed out in flight, a group's step) does
     * not get its whole max wait again from now. */
    uint64_t now = uv_now(e->loop);
    double wait = s - (double)now, left = fmax(0.0, (double)engine__call_left_ms(c, now));
    if (wait > left) {
        engine_shed sh = {.reason = reason, .retry_after_ms = (long long)ceil(wait - left)};
        call_shed(c, &sh);
        return;
    }
    for (int k = 0; k < ENGINE_DIMS; k++) {
        d->local_tat[k] = tat[k];
        if (rate[k] > 0) d->local_tat[k] = fmax(tat[k], s) + cost[k] / rate[k];
        if (rate[k] > 0) d->local_sent[k] += cost[k];
    }
    d->local_last_slot = s + fence;
    d->local_seq++;
    snprintf(c->grant.id, sizeof(c->grant.id), "%s:L%llu", d->name, d->local_seq);
    c->grant.tokens = c->tokens;
    c->grant.local = 1;
    call_granted(c, (long long)ceil(wait));
}

int local_estimate(const dep *d, const engine_req *rq, long long max_wait_ms, engine_estimate *out) {
    if (d->e->cfg->agent.fail == CONFIG_FAIL_CLOSED) return SL_EUNAVAIL;
    double cost[ENGINE_DIMS], rate[ENGINE_DIMS], tat[ENGINE_DIMS], s, fence;
    const char *reason;
    long long tokens = rq->split ? rq->input + rq->output : rq->tokens;
    request_costs(d, tokens, rq->split, rq->input, rq->output, rq->exact, cost);
    out->local = 1;
    out->tokens = tokens;
    out->deployment = d->name;
    if (local_slot(d, cost, &s, &reason, &fence, rate, tat)) {
        out->granted = 0;
        out->wait_ms = -1;
        out->reason = engine_shed_reasons[ENGINE_SHED_TOO_LARGE];
        out->retry_after_ms = -1;
        return 0;
    }
    /* agent.fail hold: past the others' hold of this agent's share, an
     * acquire is refused (local_decide), and so is the estimate. */
    if (d->e->cfg->agent.fail == CONFIG_FAIL_HOLD && s >= local_held_until(d)) return SL_EUNAVAIL;
    double wait = s - (double)uv_now(d->e->loop);
    out->wait_ms = wait > 0 ? (long long)ceil(wait) : 0;
    out->granted = wait <= (double)max_wait_ms;
    out->reason = out->granted ? "" : reason;
    out->retry_after_ms = out->granted ? -1 : (long long)ceil(wait - (double)max_wait_ms);
    return 0;
}

/* Redis mode is used when connected, the deployment's limits are written,
 * and the local schedule from an outage has drained (so the fleet's total
 * stays within the quota when agents rejoin). */
int dep_uses_redis(const dep *d) { return dep_ready(d) && d->configured && (d->handed_over || dep_local_drained(d)); }

void dep_fleet_seen(dep *d, long long backlog_req_ms, long long backlog_tok_ms) {
    double now = (double)uv_now(d->e->loop);
    d->fleet_backlog_req = (double)backlog_req_ms;
    d->fleet_backlog_tok = (double)backlog_tok_ms;
    d->fleet_tat_req = now + d->fleet_backlog_req;
    d->fleet_tat_tok = now + d->fleet_backlog_tok;
}

/* The fleet's schedule as this agent last saw it (its last reserve reply
 * or heartbeat) still reaches past now: grants Redis made, to this agent's
 * callers or others', may still be waiting for their slot. */
int dep_fleet_pending(const dep *d) {
    double now = (double)uv_now(d->e->loop);
    return d->fleet_tat_req > now || d->fleet_tat_tok > now;
}

/* Back on Redis, what the outage left has to go first (dep_hand_over):
 * local grants still to be released, the fleet's schedule as last seen
 * still ahead, or local grants Redis has not been told of. */
int dep_needs_hand_over(const dep *d) {
    if (d->handed_over) return 0;
    int unreported = 0;
    for (int k = 0; k < ENGINE_DIMS; k++) unreported |= d->local_sent[k] > 0;
    return !dep_local_drained(d) || dep_fleet_pending(d) || unreported;
}

/* No local grant is still to be released. */
int dep_local_drained(const dep *d) {
    double now = (double)uv_now(d->e->loop);
    int drained = 1;
    for (int k = 0; k < ENGINE_DIMS; k++) drained &= d->local_tat[k] <= now;
    return drained;
}

static void on_handover(void *arg, redisReply *r, const char *err) {
    dep *d = arg;
    d->e->calls_out--;
    d->handing_over = 0;
    double sent_at = dep_hb_answered(d);
    long long live = dep_heartbeat_reply(d, r);
    if (live >= 0) {
        /* Redis counts them now (grants made meanwhile wait for the next). */
        for (int k = 0; k < ENGINE_DIMS; k++) d->local_sent[k] = fmax(0.0, d->local_sent[k] - d->reporting[k]);
        d->handed_over = 1;
        d->member = 1;
        if (live > 0) d->live_agents = live;
        dep_seen(d, sent_at);
    }
    engine__flush_arm(d->e);
    engine__maybe_finish_stop(d->e);
}

/* Back from an outage with local grants still to be released, or with
 * the fleet's schedule as last seen still ahead: hand both over in one
 * heartbeat ("busy"), then use Redis at once. The fleet's part (its
 * schedule as last seen) is pushed past: it matters when Redis came back
 * without its state (restarted empty, a failover that lost the last
 * writes): the grants the old schedule made are still being released,
 * and the new one would start from an empty bucket beside them (twice the
 * rate for the old schedule's reach, measured by the soak); when Redis
 * kept its state, its schedule already reaches that far and the push
 * costs nothing. The local tail is handed over as what it is: grants at
 * this agent's share of the rate until its end. Redis keeps that share
 * out of the shared schedule for the slots before the end
 * (lua/common.lua sl_dim_hold), so the others use the rest of the rate
 * beside it: pushing the shared schedule past the whole tail left the
 * rest unused for its length (a 10 s cut with a long queue: a 7 s hole
 * at a third of the rate, measured by the simulator). */
void dep_hand_over(dep *d) {
    engine *e = d->e;
    if (d->handing_over || d->handed_over) return;
    double now = (double)uv_now(e->loop);
    /* The heartbeat takes one token figure for every token dimension: the
     * longest local token schedule (the safe side). */
    double ttail = 0;
    for (int k = ENGINE_DIM_TOKENS; k < ENGINE_DIMS; k++) ttail = fmax(ttail, d->local_tat[k] - now);
    wire_busy busy = {.fleet_requests_ms = (long long)ceil(fmax(0.0, d->fleet_tat_req - now)),
                      .fleet_tokens_ms = (long long)ceil(fmax(0.0, d->fleet_tat_tok - now)),
                      .local_requests_ms = (long long)ceil(fmax(0.0, d->local_tat[ENGINE_DIM_REQUESTS] - now)),
                      .local_tokens_ms = (long long)ceil(ttail),
                      /* The share local_slot paced at: the rate Redis held
                       * back for it. */
                      .share = fmin(1.0, local_share(d))};
    /* And the units granted locally (requests, tokens, input, output), for
     * the fleet's count of them (STATUS local_requests). */
    for (int k = 0; k < ENGINE_DIMS; k++) {
        d->reporting[k] = floor(d->local_sent[k]);
        busy.sent[k] = d->reporting[k];
    }
    wire_args a;
    wire_args_init(&a);
    wire_heartbeat_busy(&a, dep_agent_arg(d, 1), e->agent_id, engine_agent_window_ms(e), &busy);
    int rc = wire_args_done(&a, 0);
    if (rc == 0) rc = rrouter_script(e->redis, SCRIPT_HEARTBEAT, d->keys, a.argc, a.argv, on_handover, d);
    wire_args_free(&a);
    if (rc == 0) {
        e->calls_out++;
        dep_hb_sent(d);
        d->handing_over = 1;
    }
}
