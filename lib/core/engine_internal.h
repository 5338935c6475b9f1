/* engine_internal.h: what the engine's files share (lib/core/engine*.c);
 * nothing outside them includes it. The public interface is engine.h.
 *
 * The files, by concern:
 *   engine.c         the public API: create, acquire, cancel, settle,
 *                    feedback, reload, stop, stats; logging
 *   engine_dep.c     deployments and their lane and tenant classes
 *   engine_call.c    a call's life after the decision: release timers,
 *                    pauses, completion (the caller's callback, once)
 *   engine_reserve.c coalesced reserve calls and deferrals
 *   engine_group.c   groups: the group script (one Redis) and routing
 *                    step by step (Redis Cluster, fallbacks)
 *   engine_settle.c  coalesced settles and what their replies report
 *   engine_local.c   pacing at this agent's share without Redis, and the
 *                    hand-over back to Redis after an outage
 *   engine_redis.c   the flush once per loop turn, configure, heartbeat,
 *                    Redis up and down
 *   engine_query.c   questions about one deployment (RETRY, STATUS)
 *   engine_estimate.c ESTIMATE (the reserve script run dry) and patience
 *   engine_batch.c   how many items a reserve or settle call may carry
 *                    (redis.max_script_ms), learned from the calls' times
 * Every script call's arguments are encoded and every reply decoded in
 * wire.c (wire.h): these files name fields, never argv[] or element[]
 * positions of the reserve, group, settle and heartbeat forms.
 *
 * Names: what concerns one thing keeps its thing's prefix (dep_, call_,
 * group_, local_); the rest shared between these files is engine__ (as
 * libuv's uv__), never a generic global name such as list_push.
 */
#ifndef SLUICE_ENGINE_INTERNAL_H
#define SLUICE_ENGINE_INTERNAL_H

#include "engine.h"

#include <stdint.h>

#include "costmodel.h"
#include "rrouter.h"
#include "scripts.h"
#include "sluice.h"
#include "wire.h"

#define RESERVE_BATCH_MAX 128
#define SETTLE_BATCH_MAX 256
/* How long plain settles wait to share a call. */
#define ENGINE_SETTLE_DELAY_MS 5
/* How long a deployment waits after a cluster redirect or TRYAGAIN. */
#define ENGINE_REDIRECT_HOLD_MS 20
/* A caller released this much later than its slot gives the slot back
 * and asks again (on_release): a quarter of the default burst (a second
 * of the rate), so loop lag is absorbed and a stall is not a burst. */
#define ENGINE_LATE_RELEASE_MS 250
/* A stretch learned later than this after Redis made it is applied as if
 * learned this late: a clock step must not move held callers wildly. */
#define ENGINE_RETIME_LAG_MAX_MS 5000
/* A re-timing anchored ahead of now (a compression keeps what is due before
 * its anchor: a bucket's worth, a local tail, a dense stretch) is applied
 * from its anchor up to this far ahead: the longest wait a grant has. */
#define ENGINE_RETIME_AHEAD_MAX_MS 600000
/* Items of one lane and tenant per reserve call on a deployment with lanes
 * or tenants: after a deferral the rest of the class would be deferred
 * too, so sending its whole backlog would only cost Redis time. */
#define ENGINE_CLASS_BATCH 8
/* The calls waiting on one queue go in turn by caller (engine_turn.c):
 * how many of a queue's first calls a pick compares, the buckets of the
 * table of callers, how long a caller with no call out is remembered, and
 * how far below the most served a caller's count is kept. */
#define ENGINE_TURN_SCAN 64
#define ENGINE_TURN_BUCKETS 1024
#define ENGINE_TURN_FORGET_MS 10000
#define ENGINE_TURN_CREDIT 4
/* The share of redis.max_script_ms a script call aims at, by the script's
 * own measure. That measure leaves out the script text's definitions, the
 * arguments made Lua strings and the reply's encoding (it covers 0.80 to
 * 0.91 of Redis' own time per call: bench_reserve --timed), and the same
 * call's time varies widely from one call to the next on a busy host (the
 * per-item time learned moved between 7 and 35 µs in a fleet run): aiming
 * at half the bound had a third to a sixth of the calls of 1 ms or more
 * that aiming at 75 % had, with the same grants per second (bench_agent
 * --redis-time, docs/benchmarks.md). */
#define ENGINE_SCRIPT_BUDGET_SHARE 0.5
/* The answer to a call whose deployment a reload removed. */
#define ENGINE_MSG_REMOVED "deployment removed by a configuration reload"

/* CALL_BUDGET: a request that draws from budgets in money, waiting for
 * its reservation, then for the call it made (engine_budget.c). */
typedef enum call_state { CALL_PENDING, CALL_INFLIGHT, CALL_WAITING, CALL_DONE, CALL_BUDGET } call_state;

typedef struct dep dep;

/* A request to a group: the request as given, and the routing so far.
 * Allocated only for group calls (engine_call.route), freed with the call. */
typedef struct call_route {
    char group[CONFIG_NAME_MAX + 1];
    char lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1], tag[CONFIG_NAME_MAX + 1];
    int next;                       /* next member to try in order (spill phase) */
    int final_steps;                /* steps taken in the final phase */
    uint64_t deadline;              /* uv_now ms: the request's max wait ends */
    uint64_t est[CONFIG_GROUP_MAX]; /* member's slot as its shed said (uv ms); 0 unknown, UINT64_MAX never */
    engine_shed first;              /* the first member's shed, for the final answer */
    uint64_t health;                /* uv_now ms: the soonest a member out for health comes back, 0 none */
    int turn;                       /* the first member to try (the weighted policy's turn) */
    struct gq *gq;                  /* waiting in this group queue (one Redis / Sentinel) */
} call_route;

struct engine_call {
    engine *e;
    dep *d;
    engine_acquire_cb cb;
    void *arg;
    long long tokens, max_wait_ms;
    int split; /* the estimate came as input and max output */
    long long input, output;
    int exact;                /* the caller counted exactly: never calibrated */
    int partial;              /* the estimate leaves media out: teaches nothing (engine_req.partial) */
    uint64_t caller;          /* who asks (engine_req.caller), 0: nobody said */
    struct caller_turn *turn; /* its caller's turns on the queue it came to (engine_turn.c), NULL: none */
    double turn_inc;          /* what its grant added to its caller's count (0: not counted yet) */
    double turn_top;          /* the most served to a caller waiting on its queue, at the pick that sent it */
    call_state state;
    int canceled;
    uint64_t start_ms;   /* uv_now at acquire */
    uint64_t age_ms;     /* the wire's waited counts from it: start_ms, or an older call's (engine_turn.c) */
    uint64_t release_ms; /* uv_now at the slot */
    engine_grant grant;
    int cls;               /* index into d->classes */
    call_route *route;     /* a request to a group: its routing; NULL otherwise */
    int deferred;          /* Redis deferred it at least once */
    int lapsed;            /* held on a grant of Redis' past this agent's hold (dep_lapsed) */
    char defer_reason[16]; /* the last deferral's reason */
    uv_timer_t timer;      /* release timer; memory freed in its close callback */
    int timer_live;
    engine_call *prev, *next; /* in a class queue or d->waiting */
    struct budget_hold *bh;   /* CALL_BUDGET: its reservation (engine_budget.c) */
    engine_call *inner;       /* CALL_BUDGET: the call it made once reserved */
};

typedef struct call_list {
    engine_call *head, *tail;
    size_t n;
    uint64_t turn_tag; /* names the queue for its callers' turns (engine_turn.c), 0 until used */
    double turn_floor; /* the fewest served to a caller waiting here, at the last pick */
} call_list;

/* The requests of one lane and tenant class not yet sent to Redis, in
 * arrival order. Redis decides each class's head first; a deferral holds
 * the whole class until ask_at. */
typedef struct call_class {
    char lane[CONFIG_NAME_MAX + 1];   /* "" when the deployment has no lanes */
    char tenant[CONFIG_NAME_MAX + 1]; /* a configured tenant or "default" */
    call_list q;
    uint64_t ask_at; /* uv_now ms; 0 = ask now */
    engine_class_stats st;
} call_class;

typedef struct settle_item {
    char id[24]; /* the Redis grant number, or "-" */
    usage_rec usage;
    long long pause_ms;
    engine_outcome outcome;
    engine_seen seen;
} settle_item;

struct dep {
    engine *e;
    char name[CONFIG_NAME_MAX + 1];
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    const struct config_deployment *cfg; /* NULL when removed by a reload */
    call_class *classes;                 /* not yet sent to Redis, by lane and tenant */
    size_t nclasses, capclasses;
    size_t npending;                              /* calls in all class queues */
    call_list waiting;                            /* granted, timer armed */
    int reserving;                                /* reserve calls in flight (at most 1) */
    costmodel cost;                               /* its reserve calls' time in Redis, learned */
    costmodel settle_cost;                        /* its settle calls' */
    unsigned long long outcomes[ENGINE_OUTCOMES]; /* settles by outcome */
    unsigned long long retries[2];                /* RETRY answers: allowed, refused */
    size_t turn;                                  /* the classes of one priority take turns going first */
    settle_item *settles;
    size_t nsettles, capsettles;
    int settling;
    int settle_urgent; /* a cancel, pause or full batch: flush settles now */
    int configured;    /* limits written on the current connection */
    int configuring;
    long long live_agents;                       /* from the last heartbeat, 0 = unknown */
    double rate_scale;                           /* last known */
    uint64_t paused_until;                       /* uv_now ms; callers are held until then */
    double applied_shift;                        /* Redis' pause_shift_ms already applied to held callers */
    double applied_retime;                       /* Redis' running sum of log stretch already applied */
    int shift_known;                             /* applied_shift was read from Redis at least once */
    uint64_t hold_until;                         /* uv_now ms; no reserve before (cluster redirect) */
    double local_tat[ENGINE_DIMS];               /* local fallback schedule per dimension, uv_now ms */
    double local_retry_tat;                      /* local retry floor bucket, uv_now ms */
    double local_last_slot;                      /* local slots stay monotone, like Redis' */
    double local_sent[ENGINE_DIMS];              /* units granted locally, not yet reported to Redis */
    double reporting[ENGINE_DIMS];               /* those of them the hand-over in flight reports */
    double fleet_tat_req, fleet_tat_tok;         /* the fleet's schedule end per dimension, last seen, uv_now ms */
    double fleet_backlog_req, fleet_backlog_tok; /* how far it reached past now then */
    double lost_at;                              /* uv_now when its Redis node was lost, 0 when not lost */
    /* Proof of life (dep_agent_arg): every script call names this agent
     * and promises its next call within g ms; Redis takes it for silent
     * when that passes (lua/common.lua sl_silent). */
    char arg[160];                       /* "@<agent id>/<g>" of the last call */
    double g_sent;                       /* g of the last call sent */
    double sent_at;                      /* uv_now of the last call sent */
    double renew_at;                     /* uv_now: the next call is due (a heartbeat if nothing else goes) */
    double seen_until;                   /* uv_now: what Redis was promised, as of the replies */
    double ran_after;                    /* uv_now: a call of this agent ran in Redis no earlier (dep_seen) */
    double hb_sent;                      /* uv_now: the oldest heartbeat in flight was sent no earlier */
    int hb_out;                          /* heartbeats (and hand-overs) in flight */
    double used_at;                      /* uv_now of the last use (acquire, settle) or of the join */
    int member;                          /* in the agents set (joined, not left) */
    int handing_over, handed_over;       /* the local tail was pushed into Redis after an outage */
    char script_error[256];              /* the last error a script returned, "" after a success */
    engine_dim_rates rates[ENGINE_DIMS]; /* from the last settle reply */
    double est_ratio;                    /* the estimate ratio in the last settle reply; 0 = none seen */
    double burst_cfg[ENGINE_DIMS];       /* the configured bursts */
    uint64_t breaker_until, quota_until; /* uv_now ms: health sheds seen until then (logged once) */
    unsigned long long local_seq;
    dep *next;
};

/* A group's requests waiting for the group script, which decides among the
 * members atomically (one Redis or Sentinel: every member's keys are on one
 * server). With Redis Cluster, members live in different slots and the
 * engine routes step by step instead (group_next). */
typedef struct gq {
    char name[CONFIG_NAME_MAX + 1];
    call_list q;
    int reserving;
    costmodel cost; /* its group calls' time in Redis, learned */
    struct gq *next;
} gq;

typedef struct group_stat {
    char name[CONFIG_NAME_MAX + 1];
    engine_group_stats st;
    double swrr[CONFIG_GROUP_MAX]; /* weighted policy: smooth weighted round-robin state */
} group_stat;

struct engine {
    uv_loop_t *loop;
    config *cfg;
    char agent_id[128];
    char agent_arg[130];  /* "@<agent id>": the group script's first ARGV (no promise: silent_ms) */
    double group_sent_at; /* uv_now of the last group script call */
    double refresh_at;    /* uv_now: every deployment in use gets a heartbeat then (the live count) */
    rrouter *redis;
    uv_timer_t hold_timer;     /* re-flushes after a cluster redirect hold */
    uv_timer_t settle_timer;   /* flushes delayed settles */
    uv_timer_t defer_timer;    /* flushes when a deferred class may ask again */
    uint64_t start_ms;         /* uv_now at engine_start */
    int ever_ready, ever_down; /* the first connection attempt has resolved */
    int settle_due;            /* the settle window expired */
    engine_log_fn log;
    void *log_ud;
    dep *deps;
    uv_check_t flush_check; /* flushes coalesced work after each poll */
    uv_idle_t flush_idle;   /* keeps the poll from blocking while work is queued */
    uv_timer_t heartbeat_timer;
    int flush_armed;
    int handles_open;
    int stopping, stopped;
    int calls_out; /* our script calls in flight (any kind) */
    void (*stop_done)(void *);
    void *stop_arg;
    int redis_up;
    long long mode_since_ms;
    engine_stats stats;
    group_stat *gstats;
    size_t ngstats;
    gq *gqs;
    struct budget_book *book; /* budgets in money (engine_budget.c); NULL until first used */
    /* Each caller's count of calls served, per queue (engine_turn.c). */
    struct caller_turn *turns[ENGINE_TURN_BUCKETS];
    size_t nturns;
    uint64_t turns_swept_ms;
    uint64_t turn_tags; /* the last call_list.turn_tag given */
};

/* Partition safety (lua/common.lua sl_silent, docs/operations.md "Part of
 * the fleet loses Redis"). Each script call of an agent promises its next
 * one within g (dep_agent_arg: from a quarter heartbeat to a heartbeat and
 * a quarter, silent_ms, which is also what Redis assumes without a
 * promise; the quarter at least 250 ms); a heartbeat goes out when nothing else did in time. Once a
 * promise passes, Redis takes the agent for silent and keeps its share out
 * of the shared schedule until it is back or agent.silent_hold_ms (20
 * heartbeats, at least 3) have passed; it counts as live (the fallback
 * share) as long (agent_window_ms). With agent.fail: hold a cut-off agent
 * paces locally only until then (local_held_until). It leaves a deployment it has not used
 * for 30 heartbeats (engine_idle_leave_ms). */
/* How long after it was sent a call may still reach Redis, at most: a
 * cut or closed connection answers nothing later. */
#define ENGINE_ARRIVAL_PAD_MS 50.0
static inline long long engine_silent_hold_ms(const engine *e);
/* How long after its promise passed an agent still counts: live for the
 * fallback share, and its share held back (one expiry: a share held back
 * is a share the others' fallback must count too); at least 3
 * heartbeats. */
static inline long long engine_agent_window_ms(const engine *e) {
    long long w = e->cfg->agent.heartbeat_ms * 3, h = engine_silent_hold_ms(e);
    return h > w ? h : w;
}
/* A quarter heartbeat, and never under 250 ms: the margin a promise keeps
 * against a late timer or a slow reply on a loaded host (a promise broken
 * by that takes a live agent for silent and holds its share back). */
static inline long long engine_promise_margin_ms(const engine *e) {
    long long q = e->cfg->agent.heartbeat_ms / 4;
    return q < 250 ? 250 : q;
}
static inline long long engine_silent_ms(const engine *e) {
    return e->cfg->agent.heartbeat_ms + engine_promise_margin_ms(e);
}
static inline long long engine_min_promise_ms(const engine *e) { return engine_promise_margin_ms(e); }
static inline long long engine_silent_hold_ms(const engine *e) {
    long long h = e->cfg->agent.silent_hold_ms;
    return h > 0 ? h : e->cfg->agent.heartbeat_ms * 20;
}
static inline long long engine_idle_leave_ms(const engine *e) { return e->cfg->agent.heartbeat_ms * 30; }
/* The heartbeat timer's period: fine enough to keep a busy promise. */
static inline long long engine_tick_ms(const engine *e) {
    long long t = e->cfg->agent.heartbeat_ms / 16;
    return t < 5 ? 5 : t;
}

/* ---- lists ---------------------------------------------------------------- */

static inline void engine__list_push(call_list *l, engine_call *c) {
    c->prev = l->tail;
    c->next = NULL;
    if (l->tail) l->tail->next = c;
    else l->head = c;
    l->tail = c;
    l->n++;
}

static inline void engine__list_push_front(call_list *l, engine_call *c) {
    c->prev = NULL;
    c->next = l->head;
    if (l->head) l->head->prev = c;
    else l->tail = c;
    l->head = c;
    l->n++;
}

static inline void engine__list_remove(call_list *l, engine_call *c) {
    if (c->prev) c->prev->next = c->next;
    else l->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else l->tail = c->prev;
    c->prev = c->next = NULL;
    l->n--;
}

/* ---- engine_turn.c: the calls of a queue in turn by caller ---- */

/* The call of l to send next (NULL: l is empty): first a call whose max
 * wait (a group call's deadline) has passed, so that it is decided; else
 * the one whose caller was served fewest times on l, ties and calls with
 * no caller of l by the order of l. Looks at the first ENGINE_TURN_SCAN
 * calls. A call picked ahead of others takes the oldest age among them
 * (age_ms, the wire's waited). The caller removes it from l. */
engine_call *engine__list_next(engine *e, call_list *l, uint64_t now);
/* c arrives on l at now (before it is pushed there); it was granted; it
 * asks again (its grant given back: its count too); it is freed at now. */
void engine__turn_arrive(engine *e, engine_call *c, call_list *l, uint64_t now);
void engine__turn_served(engine_call *c);
void engine__turn_unserve(engine_call *c);
void engine__turn_leave(engine_call *c, uint64_t now);
void engine__turn_free(engine *e);

/* What is left of c's max wait at now (negative: past it). */
static inline long long engine__call_left_ms(const engine_call *c, uint64_t now) {
    return c->max_wait_ms - (long long)(now - c->start_ms);
}

static inline engine_call *engine__list_pop(call_list *l) {
    engine_call *c = l->head;
    if (c) engine__list_remove(l, c);
    return c;
}

/* ---- engine.c ---- */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void engine__elog(engine *e, int level, const char *fmt, ...);
void dep_script_error(dep *d, const char *what, const char *err);
void engine__maybe_finish_stop(engine *e);

/* ---- engine_dep.c ---- */
dep *dep_find(engine *e, const char *name);
int dep_ready(const dep *d);
dep *dep_add(engine *e, const struct config_deployment *cfg);
void dep_set_cfg(dep *d, const struct config_deployment *cfg);
void dep_set_est_ratio(dep *d, double r);
int engine__cfg_split(const struct config_deployment *c);
int dep_class(dep *d, const char *lane, const char *tenant);
void engine__class_push(dep *d, engine_call *c);
void engine__class_push_front(dep *d, engine_call *c);
void engine__class_remove(dep *d, engine_call *c);
engine_call *dep_pop_any(dep *d);
long long engine__class_priority(const dep *d, const call_class *k);
void dep_health_seen(dep *d, const char *reason, long long retry_after_ms);

/* ---- engine_call.c ---- */
void call_estimate(engine_call *c, const engine_req *rq);
void call_granted(engine_call *c, long long wait_ms);
void call_reply_granted(engine_call *c, dep *d, long long grant, long long wait_ms, long long tokens);
void call_deferred(engine_call *c, const char *reason, long long ask_in, uint64_t now);
void call_shed(engine_call *c, const engine_shed *shed);
void call_complete(engine_call *c, int status, const engine_shed *shed, const char *msg);
void call_free(engine_call *c);
/* A call going back to its deployment's queue (or to local pacing) after
 * a reload removed that deployment: handled as the reload handles those
 * queued there (group_member_removed); returns 1 then, else 0. */
int call_dep_removed(engine_call *c);
const char *engine__grant_number(const char *id);
void dep_follow_shift(dep *d, const wire_shift *s, long long redis_now_us);
long long dep_heartbeat_reply(dep *d, const redisReply *r);
long long dep_heartbeat_seen(dep *d, const wire_heartbeat_reply *h);
void dep_pause(dep *d, long long pause_ms, int local);

/* ---- engine_reserve.c ---- */
void call_wire_estimate(const engine_call *c, wire_estimate *x);
void dep_flush_reserves(dep *d);

/* ---- engine_group.c ---- */
/* The members a group's request rq would be asked of, in the order the
 * group script asks them (weighted: only the member whose turn it is,
 * peeked without taking the turn); returns how many (0: none allowed). */
size_t group_ask_order(engine *e, const struct config_group *g, const engine_req *rq, int order[CONFIG_GROUP_MAX]);
int group_acquire(engine *e, const struct config_group *g, const engine_req *rq, engine_acquire_cb cb, void *arg,
                  engine_call **out);
int group_next(engine_call *c, const engine_shed *shed, engine_shed *final);
/* c was queued on, or asked of, a deployment a reload took out: a request
 * to a group the new configuration still has is routed again among its
 * members as they are now; anything else is answered SL_EUNKNOWN. */
void group_member_removed(engine_call *c);
group_stat *group_stats(engine *e, const char *name);
void engine__gq_flush(engine *e, gq *q);
void engine__gq_drain(gq *q, int status, const char *msg);

/* ---- engine_settle.c ---- */
void engine__queue_settle(dep *d, const char *id, const usage_rec *u, engine_outcome o, long long pause_ms,
                          const engine_seen *seen);
void dep_flush_settles(dep *d);
/* Holds d's next reserve and settle calls after a redirect the router
 * could not follow (engine_reserve.c). */
void dep_redirect_hold(dep *d);

/* ---- engine_local.c ---- */
#define LOCAL_CLOSED_MSG "Redis is unreachable and agent.fail is closed: refusing to pace locally"
double local_share(const dep *d);
double dep_lapse_at(const dep *d);
int dep_lapsed(const dep *d, double t);
void dep_lapse_sweep(dep *d);
void local_decide(engine_call *c);
/* What local_decide() would decide for rq now against max_wait_ms, into
 * *out (local = 1), committing nothing. Returns 0, or SL_EUNAVAIL when
 * agent.fail is closed. */
int local_estimate(const dep *d, const engine_req *rq, long long max_wait_ms, engine_estimate *out);
int dep_uses_redis(const dep *d);
int dep_local_drained(const dep *d);
int dep_fleet_pending(const dep *d);
/* Where the fleet's schedule ends, from a reply that says how far it
 * reaches past now (reserve's head, a heartbeat): local pacing starts
 * there should Redis be lost, so grants Redis made and local ones do not
 * stack. */
void dep_fleet_seen(dep *d, long long backlog_req_ms, long long backlog_tok_ms);
int dep_needs_hand_over(const dep *d);
void dep_hand_over(dep *d);

/* ---- engine_budget.c ---- */
/* A request that draws from a budget in money: reserves its largest cost
 * first, then makes the call. Returns 1 when no budget applies (go on as
 * usual), 0 when taken (*out the call), or SL_E*. */
int engine__acquire_direct(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **out);
int engine__budget_acquire(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **out);
void engine__budget_cancel(engine_call *c);
/* A grant's settle: its budgets are corrected to what it cost. */
void engine__budget_settle(engine *e, const char *grant_id, const usage_rec *u, engine_outcome o);
void engine__budget_tick(engine *e);
/* Once per loop turn (engine_redis.c's flush): this turn's budget settles
 * and reservations, each kind in as few script calls as fit. */
void engine__budget_flush(engine *e);
/* Budget i's view (as engine_foreach_budget gives it); 1 when budget i
 * can draw from deployment name (its scope's deployment: none, name, or a
 * group name is a member of). */
void engine__budget_view(const engine *e, size_t i, engine_budget_view *v);
int engine__budget_covers(const engine *e, size_t i, const char *deployment);
void engine__budget_free(engine *e);
void engine__budget_reconfigure(engine *e);
/* engine_stop: answers the calls waiting to ask for a reservation. */
void engine__budget_stop(engine *e);
/* 1 when rq draws from any budget in money. */
int engine__budget_applies_any(const engine *e,
                               const engine_req *rq); /* engine_reload: before the old configuration is freed */

/* ---- engine_batch.c ---- */
size_t engine__batch_cap(const engine *e, const costmodel *m, size_t max);
void engine__batch_seen(engine *e, costmodel *m, size_t n, long long script_us, uint64_t sent_ns);

/* ---- engine_redis.c ---- */
void engine__flush_arm(engine *e);
void engine__on_hold_timer(uv_timer_t *t);
void engine__on_settle_timer(uv_timer_t *t);
void engine__on_heartbeat_timer(uv_timer_t *t);
void engine__on_redis_up(void *ud);
void engine__on_redis_down(void *ud, const char *why);
void dep_configure(dep *d);
void dep_heartbeat(dep *d, int leave);
void dep_announce(dep *d);
const char *dep_agent_arg(dep *d, int keepalive);
void dep_seen(dep *d, double sent_at);
void dep_hb_sent(dep *d);
double dep_hb_answered(dep *d);

#endif
