/* engine_call: a call once decided: released at its slot (held through
 * provider pauses, shifted with the fleet), completed exactly once. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- calls: completion ------------------------------------------------------ */

static void on_call_timer_closed(uv_handle_t *h) { free(h->data); }

void call_free(engine_call *c) {
    engine__turn_leave(c, uv_now(c->e->loop));
    free(c->route);
    c->route = NULL;
    if (c->timer_live) {
        c->timer_live = 0;
        uv_close((uv_handle_t *)&c->timer, on_call_timer_closed);
    } else {
        free(c);
    }
}

static void record_wait(unsigned long long *hist, unsigned long long *sum, long long waited) {
    int b = 0;
    while (b < ENGINE_WAIT_BUCKETS && waited > engine_wait_bounds_ms[b]) b++;
    hist[b]++;
    *sum += (unsigned long long)(waited > 0 ? waited : 0);
}

/* The deployment c waited on shed it. A plain call completes with that
 * shed; a request to a group is asked of the next member (group_next), and
 * completes with the group's answer when none is left. */
void call_shed(engine_call *c, const engine_shed *shed) {
    engine_shed final = *shed;
    if (c->route && !c->canceled && !c->e->stopping) {
        if (group_next(c, shed, &final)) return; /* queued on the next member */
        shed = &final;
    }
    call_complete(c, SL_ESHED, shed, NULL);
}

/* Runs the caller's callback exactly once and frees the call: always the
 * end of it (rerouting a group's request happens before, in call_shed). */
int call_dep_removed(engine_call *c) {
    if (c->d->cfg) return 0;
    group_member_removed(c);
    return 1;
}

void call_complete(engine_call *c, int status, const engine_shed *shed, const char *msg) {
    engine *e = c->e;
    if (c->route) {
        group_stat *gs = group_stats(e, c->route->group);
        const struct config_group *g = config_group(e->cfg, c->route->group);
        if (gs && status == SL_OK) {
            gs->st.grants++;
            for (size_t i = 0; g && i < g->nmembers && i < CONFIG_GROUP_MAX; i++)
                if (!strcmp(g->members[i], c->d->name)) {
                    gs->st.member_grants[i]++;
                    if (i > 0) gs->st.spilled++;
                }
        } else if (gs && status == SL_ESHED) {
            gs->st.sheds++;
        }
    }
    engine_class_stats *ks = &c->d->classes[c->cls].st;
    c->state = CALL_DONE;
    c->grant.deployment = c->d->name;
    c->grant.endpoint = c->d->cfg ? c->d->cfg->endpoint : "";
    c->grant.group = c->route != NULL;
    if (status == SL_OK) {
        c->grant.waited_ms = (long long)(uv_now(e->loop) - c->start_ms);
        c->grant.planned_ms = c->release_ms ? c->release_ms : uv_now(e->loop);
        e->stats.grants++;
        e->stats.tokens_estimated += (unsigned long long)c->grant.tokens;
        if (c->grant.local) e->stats.grants_local++;
        record_wait(e->stats.wait_hist, &e->stats.wait_sum_ms, c->grant.waited_ms);
        record_wait(ks->wait_hist, &ks->wait_sum_ms, c->grant.waited_ms);
        ks->grants++;
        ks->tokens += (unsigned long long)c->grant.tokens;
    } else if (status == SL_ESHED) {
        e->stats.sheds++;
        e->stats.shed_by_reason[engine_shed_reason_index(shed->reason)]++;
        ks->sheds++;
    } else {
        e->stats.errors++;
    }
    if (!c->canceled) c->cb(c->arg, status, status == SL_OK ? &c->grant : NULL, shed, msg);
    call_free(c);
}

/* The Redis grant number inside "<deployment>:<n>", or NULL for local. */
const char *engine__grant_number(const char *id) {
    const char *colon = strrchr(id, ':');
    if (!colon || colon[1] == 'L' || colon[1] == '\0') return NULL;
    return colon + 1;
}

static void on_release(uv_timer_t *t);

/* Moves every held caller `shift` ms later, keeping their spacing: a pause
 * shifts the schedule instead of piling callers up at its end. A group's
 * request no member may serve waits here with no grant for its shed on
 * the next turn (engine_group.c, on_no_member): it has no slot to move,
 * and its timer is not a release. */
static void dep_shift_waiting(dep *d, double shift) {
    if (shift <= 0) return;
    uint64_t now = uv_now(d->e->loop);
    for (engine_call *c = d->waiting.head; c; c = c->next) {
        if (!c->grant.id[0]) continue;
        c->release_ms += (uint64_t)ceil(shift);
        uv_timer_start(&c->timer, on_release, c->release_ms > now ? c->release_ms - now : 0, 0);
    }
}

/* Re-times the callers held on Redis' grants after the fleet's schedule
 * was stretched (k > 1) or compressed (k < 1) from a time at (lua/common.lua
 * sl_rate_changed): a slot s after it becomes at + (s - at) k, with at
 * lag_ms before now (after, when negative). A compression learned late is
 * applied from now: anchored in the past it would release at once every
 * caller whose new slot passed meanwhile, a burst nobody planned. Local
 * grants follow the local schedule, not Redis'. */
static void dep_retime_waiting(dep *d, double k, double lag_ms) {
    uint64_t now = uv_now(d->e->loop);
    double at = (double)now - lag_ms;
    if (k < 1 && at < (double)now) at = (double)now;
    for (engine_call *c = d->waiting.head; c; c = c->next) {
        if (c->grant.local || (double)c->release_ms <= at) continue;
        double t = at + ((double)c->release_ms - at) * k;
        c->release_ms = t > (double)now ? (uint64_t)ceil(t) : now;
        uv_timer_start(&c->timer, on_release, c->release_ms - now, 0);
        d->e->stats.retimed++;
    }
    /* A class told to ask again later was told so by the schedule before;
     * compressed, the answer may come sooner: ask at the re-timed time. */
    if (k < 1) {
        for (size_t i = 0; i < d->nclasses; i++) {
            call_class *q = &d->classes[i];
            if ((double)q->ask_at > at) q->ask_at = (uint64_t)ceil(at + ((double)q->ask_at - at) * k);
            if (q->ask_at < now) q->ask_at = now;
        }
        if (d->npending) engine__flush_arm(d->e);
    }
}

/* Follows Redis' running pause shift and re-timing (the pause_shift_ms
 * field of reserve and settle replies: "<shift>" or "<shift>:<sum of log
 * k>:<at ms>"; redis_now_us the reply's own time): held callers move by
 * the shift's growth and are re-timed by the change of the sum, so every
 * agent moves what it holds the way Redis moved its schedule. A field
 * without the sum (Redis lost its state) only resets what was applied. */
void dep_follow_shift(dep *d, const wire_shift *s, long long redis_now_us) {
    double total = s->total_ms, lg = s->retime_log, at = s->retime_at_ms;
    if (d->shift_known && total > d->applied_shift) dep_shift_waiting(d, total - d->applied_shift);
    if (d->shift_known && at > 0 && fabs(lg - d->applied_retime) > 1e-12) {
        double lag = (double)redis_now_us / 1000.0 - at;
        if (!(lag > -ENGINE_RETIME_AHEAD_MAX_MS)) lag = -ENGINE_RETIME_AHEAD_MAX_MS;
        if (lag > ENGINE_RETIME_LAG_MAX_MS) lag = ENGINE_RETIME_LAG_MAX_MS;
        dep_retime_waiting(d, exp(lg - d->applied_retime), lag);
    }
    d->applied_shift = total;
    d->applied_retime = lg;
    d->shift_known = 1;
}

/* A pause learned by this agent. In Redis mode the reply of the settle that
 * carries it brings the shift; locally the local schedule shifts here. */
void dep_pause(dep *d, long long pause_ms, int local) {
    uint64_t now = uv_now(d->e->loop), until = now + (uint64_t)pause_ms;
    uint64_t base = d->paused_until > now ? d->paused_until : now;
    if (until <= base) return;
    if (local) {
        double shift = (double)(until - base);
        dep_shift_waiting(d, shift);
        for (int k = 0; k < ENGINE_DIMS; k++)
            if (d->local_tat[k] > (double)now) d->local_tat[k] += shift;
        if (d->local_last_slot > (double)now) d->local_last_slot += shift;
    }
    d->paused_until = until;
}

/* A caller taken off the waiting list gives its grant of Redis' back
 * (cancelled) and asks again at the head of its class: through Redis, or
 * locally when Redis is away. */
static void call_reask(engine_call *c) {
    dep *d = c->d;
    const char *num = engine__grant_number(c->grant.id);
    if (num) engine__queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
    if (call_dep_removed(c)) return;
    c->lapsed = 0;
    c->state = CALL_PENDING;
    engine__turn_unserve(c); /* it keeps its place, and its turn */
    engine__class_push_front(d, c);
    engine__flush_arm(c->e);
}

static void on_release(uv_timer_t *t) {
    engine_call *c = t->data;
    dep *d = c->d;
    uint64_t now = uv_now(c->e->loop);
    if (d->paused_until > now) {
        /* The provider paused the deployment after this grant was made:
         * hold the caller until the pause ends, like every other agent. */
        c->release_ms = d->paused_until;
        uv_timer_start(&c->timer, on_release, d->paused_until - now, 0);
        return;
    }
    int redis_grant = !c->grant.local && !c->canceled && !c->e->stopping;
    /* Away from Redis past the others' hold of this agent's share (no
     * answer since, dep_lapsed): Redis gives the slots from then on to the others
     * (lua/heartbeat.lua, abandon), so this one is not sent. The caller
     * stays held until Redis answers (dep_lapse_sweep asks again then), at
     * most until its max wait passes: a local slot would be sent beside the
     * others' whole rate (agent.fail: open) or refused (hold, closed). */
    double give_up = (double)c->start_ms + (double)c->max_wait_ms;
    if (redis_grant && dep_lapsed(d, (double)now) && (double)now < give_up) {
        if (!c->lapsed) c->e->stats.lapsed_held++;
        c->lapsed = 1;
        uv_timer_start(&c->timer, on_release, (uint64_t)ceil(give_up - (double)now), 0);
        return;
    }
    engine__list_remove(&d->waiting, c);
    c->e->stats.waiting--;
    /* Released long after its slot (the process was descheduled, the loop
     * blocked): every slot that passed meanwhile would go at once, a burst
     * the fleet's schedule never planned. A grant of Redis' is given back
     * (cancelled; its slot has passed, so nothing is refunded) and the call
     * asks again. So does one held past the hold whose max wait passed. */
    if (redis_grant && (c->lapsed || (now > c->release_ms + ENGINE_LATE_RELEASE_MS && dep_ready(d)))) {
        if (!c->lapsed) c->e->stats.late_reasks++;
        call_reask(c);
        return;
    }
    call_complete(c, SL_OK, NULL, NULL);
}

/* Redis answers again (dep_seen, before ran_after moves): when the others
 * may have dropped this agent meanwhile (dep_lapsed), its grants of Redis'
 * with slots from dep_lapse_at on went to them; their callers, and those
 * held at their slots since (on_release), ask again. */
void dep_lapse_sweep(dep *d) {
    double now = (double)uv_now(d->e->loop);
    if (!dep_lapsed(d, now) || d->e->stopping) return;
    double from = dep_lapse_at(d);
    engine_call *c = d->waiting.head;
    while (c) {
        engine_call *next = c->next;
        if (!c->grant.local && !c->canceled && (c->lapsed || (double)c->release_ms >= from)) {
            if (!c->lapsed) d->e->stats.lapsed_held++;
            uv_timer_stop(&c->timer);
            engine__list_remove(&d->waiting, c);
            d->e->stats.waiting--;
            call_reask(c);
        }
        c = next;
    }
}

/* A grant: release the caller now or at its slot. */
void call_granted(engine_call *c, long long wait_ms) {
    engine *e = c->e;
    dep *d = c->d;
    if (c->canceled) {
        const char *num = engine__grant_number(c->grant.id);
        if (num) engine__queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
        call_free(c);
        return;
    }
    engine__turn_served(c);
    uint64_t now = uv_now(e->loop);
    uint64_t at = now + (uint64_t)(wait_ms > 0 ? wait_ms : 0);
    if (d->paused_until > at) at = d->paused_until;
    if (at <= now) {
        c->release_ms = now;
        call_complete(c, SL_OK, NULL, NULL);
        return;
    }
    c->state = CALL_WAITING;
    c->release_ms = at;
    if (!c->timer_live) { /* a call asking again (on_release) has its timer */
        uv_timer_init(e->loop, &c->timer);
        c->timer.data = c;
        c->timer_live = 1;
    }
    uv_timer_start(&c->timer, on_release, at - now, 0);
    engine__list_push(&d->waiting, c);
    e->stats.waiting++;
}

/* A grant from a reserve reply (plain or group): release the caller at its
 * slot, or give the slot back when the agent is stopping. */
void call_reply_granted(engine_call *c, dep *d, long long grant, long long wait_ms, long long tokens) {
    snprintf(c->grant.id, sizeof(c->grant.id), "%s:%lld", d->name, grant);
    c->grant.tokens = tokens;
    c->grant.local = 0;
    if (c->e->stopping) {
        /* Stopped while this call was in flight: give the slot back. */
        engine__queue_settle(d, engine__grant_number(c->grant.id), NULL, ENGINE_CANCELLED, -1, NULL);
        if (c->canceled) call_free(c);
        else call_complete(c, SL_ECLOSING, NULL, SLUICE_MSG_CLOSING);
        return;
    }
    call_granted(c, wait_ms);
}

/* A deferral from a reserve reply (plain or group): c's class on c->d
 * waits until Redis said capacity opens (ask_in ms); the caller queues c
 * again. */
void call_deferred(engine_call *c, const char *reason, long long ask_in, uint64_t now) {
    call_class *k = &c->d->classes[c->cls];
    uint64_t at = now + (uint64_t)(ask_in > 0 ? ask_in : 1);
    /* The class asks again when its earliest item may be granted: its
     * head's time, not its youngest's (every item of a class in a reply
     * was ready, ask_at <= now, so the reply's first deferral sets it). */
    if (k->ask_at <= now || at < k->ask_at) k->ask_at = at;
    c->deferred = 1;
    snprintf(c->defer_reason, sizeof(c->defer_reason), "%s", reason ? reason : engine_shed_reasons[ENGINE_SHED_RPM]);
    c->e->stats.deferrals++;
    k->st.deferrals++;
}

/* Copies the estimate of rq into c (tokens the sum of a split). */
void call_estimate(engine_call *c, const engine_req *rq) {
    c->split = rq->split;
    c->input = rq->split ? rq->input : -1;
    c->output = rq->split ? rq->output : -1;
    c->tokens = rq->split ? rq->input + rq->output : rq->tokens;
    c->exact = rq->exact;
    c->partial = rq->partial;
    c->caller = rq->caller;
}
