#define _GNU_SOURCE
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "ratelimit.h"
#include "rrouter.h"
#include "scripts.h"
#include "sluice.h"

#define RESERVE_BATCH_MAX 128
#define SETTLE_BATCH_MAX 256
/* How long plain settles wait to share a call. */
#define ENGINE_SETTLE_DELAY_MS 5
/* How long a deployment waits after a cluster redirect or TRYAGAIN. */
#define ENGINE_REDIRECT_HOLD_MS 20
/* Items of one lane and tenant per reserve call on a deployment with lanes
 * or tenants: after a deferral the rest of the class would be deferred
 * too, so sending its whole backlog would only cost Redis time. */
#define ENGINE_CLASS_BATCH 8

const long long engine_wait_bounds_ms[ENGINE_WAIT_BUCKETS] = {0,   1,    5,    10,    50,    100,
                                                              500, 1000, 5000, 10000, 30000, 60000};
const char *const engine_shed_reasons[ENGINE_SHED_REASONS] = {
    "rpm",  "tpm",     "paused",       "daily",   "concurrency", "too_large", "lane",
    "ceiling", "tenant_daily", "breaker", "quota", "tag", "itpm", "otpm", "share", "other"};

const char *const engine_dim_names[ENGINE_DIMS] = {"requests", "tokens", "input", "output"};

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
        if (ratelimit_get_own(fb, from[i], &v) == RATELIMIT_SRC_NONE) continue;
        s->limit[i] = v.limit;
        s->remaining[i] = v.remaining;
    }
}

int engine_shed_reason_index(const char *reason) {
    for (int i = 0; i < ENGINE_SHED_REASONS - 1; i++)
        if (strcmp(reason, engine_shed_reasons[i]) == 0) return i;
    return ENGINE_SHED_REASONS - 1;
}

typedef enum call_state { CALL_PENDING, CALL_INFLIGHT, CALL_WAITING, CALL_DONE } call_state;

typedef struct dep dep;

struct engine_call {
    engine *e;
    dep *d;
    engine_acquire_cb cb;
    void *arg;
    long long tokens, max_wait_ms;
    int split;                /* the estimate came as input and max output */
    long long input, output;
    call_state state;
    int canceled;
    uint64_t start_ms;        /* uv_now at acquire */
    uint64_t release_ms;      /* uv_now at the slot */
    engine_grant grant;
    int cls;                  /* index into d->classes */
    /* Asked of a group: the request as given, and the routing so far. */
    char group[CONFIG_NAME_MAX + 1];
    char lane_req[CONFIG_NAME_MAX + 1], tenant_req[CONFIG_NAME_MAX + 1], tag[CONFIG_NAME_MAX + 1];
    int gnext;                /* next member to try in order (spill phase) */
    int gfinal;               /* steps taken in the final phase */
    uint64_t gdeadline;       /* uv_now ms: the request's max wait ends */
    uint64_t gest[CONFIG_GROUP_MAX]; /* member's slot as its shed said (uv ms); 0 unknown, UINT64_MAX never */
    engine_shed gfirst;       /* the first member's shed, for the final answer */
    uint64_t ghealth;         /* uv_now ms: the soonest a member out for health comes back, 0 none */
    int gturn;                /* the first member to try (the weighted policy's turn) */
    int gfinal_answer;        /* decided by the group script: no more routing */
    struct gq *gq;            /* waiting in this group queue (one Redis / Sentinel) */
    int deferred;             /* Redis deferred it at least once */
    char defer_reason[16];    /* the last deferral's reason */
    uv_timer_t timer;         /* release timer; memory freed in its close callback */
    int timer_live;
    engine_call *prev, *next; /* in a class queue or d->waiting */
};

typedef struct call_list {
    engine_call *head, *tail;
    size_t n;
} call_list;

/* The requests of one lane and tenant class not yet sent to Redis, in
 * arrival order. Redis decides each class's head first; a deferral holds
 * the whole class until ask_at. */
typedef struct call_class {
    char lane[CONFIG_NAME_MAX + 1];   /* "" when the deployment has no lanes */
    char tenant[CONFIG_NAME_MAX + 1]; /* a configured tenant or "default" */
    call_list q;
    uint64_t ask_at;                  /* uv_now ms; 0 = ask now */
    engine_class_stats st;
} call_class;

typedef struct settle_item {
    char id[24];              /* the Redis grant number, or "-" */
    engine_usage usage;
    long long pause_ms;
    engine_outcome outcome;
    engine_seen seen;
} settle_item;

struct dep {
    engine *e;
    char name[CONFIG_NAME_MAX + 1];
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    const struct config_deployment *cfg; /* NULL when removed by a reload */
    call_class *classes;      /* not yet sent to Redis, by lane and tenant */
    size_t nclasses, capclasses;
    size_t npending;          /* calls in all class queues */
    call_list waiting;        /* granted, timer armed */
    int reserving;            /* reserve calls in flight (at most 1) */
    settle_item *settles;
    size_t nsettles, capsettles;
    int settling;
    int settle_urgent;        /* a cancel, pause or full batch: flush settles now */
    int configured;           /* limits written on the current connection */
    int configuring;
    long long live_agents;    /* from the last heartbeat, 0 = unknown */
    double rate_scale;        /* last known */
    uint64_t paused_until;    /* uv_now ms; callers are held until then */
    double applied_shift;     /* Redis' pause_shift_ms already applied to held callers */
    int shift_known;          /* applied_shift was read from Redis at least once */
    uint64_t hold_until;      /* uv_now ms; no reserve before (cluster redirect) */
    double local_tat[ENGINE_DIMS]; /* local fallback schedule per dimension, uv_now ms */
    double local_retry_tat;   /* local retry floor bucket, uv_now ms */
    double local_last_slot;   /* local slots stay monotone, like Redis' */
    double fleet_tat_req, fleet_tat_tok; /* the fleet's schedule end per dimension, last seen, uv_now ms */
    double fleet_backlog_req, fleet_backlog_tok; /* how far it reached past now then */
    double lost_at;           /* uv_now when its Redis node was lost, 0 when not lost */
    int handing_over, handed_over; /* the local tail was pushed into Redis after an outage */
    char script_error[256];   /* the last error a script returned, "" after a success */
    engine_dim_rates rates[ENGINE_DIMS]; /* from the last settle reply */
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
    rrouter *redis;
    uv_timer_t hold_timer;    /* re-flushes after a cluster redirect hold */
    uv_timer_t settle_timer;  /* flushes delayed settles */
    uv_timer_t defer_timer;   /* flushes when a deferred class may ask again */
    uint64_t start_ms;        /* uv_now at engine_start */
    int ever_ready, ever_down; /* the first connection attempt has resolved */
    int settle_due;           /* the settle window expired */
    engine_log_fn log;
    void *log_ud;
    dep *deps;
    uv_check_t flush_check;   /* flushes coalesced work after each poll */
    uv_idle_t flush_idle;     /* keeps the poll from blocking while work is queued */
    uv_timer_t heartbeat_timer;
    int flush_armed;
    int handles_open;
    int stopping, stopped;
    int calls_out;            /* our script calls in flight (any kind) */
    void (*stop_done)(void *);
    void *stop_arg;
    int redis_up;
    long long mode_since_ms;
    engine_stats stats;
    group_stat *gstats;
    size_t ngstats;
    gq *gqs;
};

static void flush_arm(engine *e);
static void on_hold_timer(uv_timer_t *t);
static void on_settle_timer(uv_timer_t *t);
static void dep_configure(dep *d);
static void maybe_finish_stop(engine *e);

static long long wall_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void elog(engine *e, int level, const char *fmt, ...) {
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
static void dep_script_error(dep *d, const char *what, const char *err) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s failed: %s", what, err ? err : "no reply");
    if (strcmp(buf, d->script_error) != 0)
        elog(d->e, CONFIG_LOG_ERROR, "deployment %s: %s (serving it locally meanwhile)", d->name, buf);
    snprintf(d->script_error, sizeof(d->script_error), "%s", buf);
}

/* ---- lists ---------------------------------------------------------------- */

static void list_push(call_list *l, engine_call *c) {
    c->prev = l->tail;
    c->next = NULL;
    if (l->tail) l->tail->next = c;
    else l->head = c;
    l->tail = c;
    l->n++;
}

static void list_push_front(call_list *l, engine_call *c) {
    c->prev = NULL;
    c->next = l->head;
    if (l->head) l->head->prev = c;
    else l->tail = c;
    l->head = c;
    l->n++;
}

static void list_remove(call_list *l, engine_call *c) {
    if (c->prev) c->prev->next = c->next;
    else l->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else l->tail = c->prev;
    c->prev = c->next = NULL;
    l->n--;
}

static engine_call *list_pop(call_list *l) {
    engine_call *c = l->head;
    if (c) list_remove(l, c);
    return c;
}

/* ---- deployments ---------------------------------------------------------- */

static dep *dep_find(engine *e, const char *name) {
    for (dep *d = e->deps; d; d = d->next)
        if (strcmp(d->name, name) == 0) return d;
    return NULL;
}

/* The Redis node serving this deployment is connected. */
static int dep_ready(const dep *d) { return rrouter_ready(d->e->redis, d->keys[0]); }

/* The configured limit (per minute) and burst of dimension k of c; 0 when
 * the deployment does not have it. */
static void cfg_dim(const struct config_deployment *c, int k, double *limit, double *burst) {
    static const size_t lim_off[ENGINE_DIMS] = {
        offsetof(struct config_deployment, rpm), offsetof(struct config_deployment, tpm),
        offsetof(struct config_deployment, itpm), offsetof(struct config_deployment, otpm)};
    static const size_t burst_off[ENGINE_DIMS] = {
        offsetof(struct config_deployment, burst.requests), offsetof(struct config_deployment, burst.tokens),
        offsetof(struct config_deployment, burst.input_tokens), offsetof(struct config_deployment, burst.output_tokens)};
    *limit = (double)*(const long long *)((const char *)c + lim_off[k]);
    *burst = (double)*(const long long *)((const char *)c + burst_off[k]);
}

/* Points d at its (new) configuration: the rates start as configured until
 * a settle reply says what the fleet runs at. */
static void dep_set_cfg(dep *d, const struct config_deployment *cfg) {
    d->cfg = cfg;
    if (!cfg) return;
    for (int k = 0; k < ENGINE_DIMS; k++) {
        double limit, burst;
        cfg_dim(cfg, k, &limit, &burst);
        d->rates[k] = (engine_dim_rates){limit, limit, limit, 0, 0};
        d->burst_cfg[k] = burst;
    }
}

/* 1 when c counts input and output tokens apart. */
static int cfg_split(const struct config_deployment *c) { return c->itpm > 0 || c->otpm > 0; }

static dep *dep_add(engine *e, const struct config_deployment *cfg) {
    dep *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->e = e;
    snprintf(d->name, sizeof(d->name), "%s", cfg->name);
    if (scripts_keys(d->name, d->keys) != 0) {
        free(d);
        return NULL;
    }
    dep_set_cfg(d, cfg);
    d->rate_scale = 1.0;
    d->next = e->deps;
    e->deps = d;
    return d;
}

/* ---- lane and tenant classes -------------------------------------------------- */

/* The class of (lane, tenant) on d, created on first use; -1 on ENOMEM. */
static int dep_class(dep *d, const char *lane, const char *tenant) {
    for (size_t i = 0; i < d->nclasses; i++)
        if (!strcmp(d->classes[i].lane, lane) && !strcmp(d->classes[i].tenant, tenant)) return (int)i;
    if (d->nclasses == d->capclasses) {
        size_t cap = d->capclasses ? d->capclasses * 2 : 4;
        call_class *nc = realloc(d->classes, cap * sizeof(*nc));
        if (!nc) return -1;
        d->classes = nc;
        d->capclasses = cap;
    }
    call_class *k = &d->classes[d->nclasses];
    memset(k, 0, sizeof(*k));
    snprintf(k->lane, sizeof(k->lane), "%s", lane);
    snprintf(k->tenant, sizeof(k->tenant), "%s", tenant);
    return (int)d->nclasses++;
}

static void class_push(dep *d, engine_call *c) {
    list_push(&d->classes[c->cls].q, c);
    d->npending++;
    d->e->stats.queued++;
}

static void class_push_front(dep *d, engine_call *c) {
    list_push_front(&d->classes[c->cls].q, c);
    d->npending++;
    d->e->stats.queued++;
}

static void class_remove(dep *d, engine_call *c) {
    list_remove(&d->classes[c->cls].q, c);
    d->npending--;
    d->e->stats.queued--;
}

/* Any call not yet sent (for fallback, reload and stop: order across
 * classes does not matter there). */
static engine_call *dep_pop_any(dep *d) {
    for (size_t i = 0; i < d->nclasses; i++) {
        engine_call *c = d->classes[i].q.head;
        if (c) {
            class_remove(d, c);
            return c;
        }
    }
    return NULL;
}

/* The lane's priority for ordering a batch (0 without lanes). */
static long long class_priority(const dep *d, const call_class *k) {
    const struct config_lane *l = d->cfg ? config_lane(d->cfg, k->lane) : NULL;
    return l ? l->priority : 0;
}

/* ---- calls: completion ------------------------------------------------------ */

static void on_call_timer_closed(uv_handle_t *h) { free(h->data); }

static void call_free(engine_call *c) {
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

/* ---- groups ------------------------------------------------------------------ */

static group_stat *group_stats(engine *e, const char *name) {
    for (size_t i = 0; i < e->ngstats; i++)
        if (!strcmp(e->gstats[i].name, name)) return &e->gstats[i];
    group_stat *n = realloc(e->gstats, (e->ngstats + 1) * sizeof(*n));
    if (!n) return NULL;
    e->gstats = n;
    memset(&n[e->ngstats], 0, sizeof(n[0]));
    snprintf(n[e->ngstats].name, sizeof(n[0].name), "%s", name);
    return &n[e->ngstats++];
}

/* The weighted policy's turn: smooth weighted round-robin (as nginx does)
 * over the allowed members, each weighted by its rpm, so that over any
 * run of requests each member's share is within one request of its
 * weight's. Returns the member index, or -1 when none is allowed. */
static int group_allows(const struct config_group *g, const struct config_deployment *m, const engine_call *c);
static int group_turn(engine *e, const struct config_group *g, const engine_call *c) {
    group_stat *gs = group_stats(e, g->name);
    if (!gs) return -1;
    double total = 0;
    int best = -1;
    for (size_t i = 0; i < g->nmembers && i < CONFIG_GROUP_MAX; i++) {
        if (!group_allows(g, g->members_[i], c)) continue;
        double w = (double)g->members_[i]->rpm;
        gs->swrr[i] += w;
        total += w;
        if (best < 0 || gs->swrr[i] > gs->swrr[best]) best = (int)i;
    }
    if (best >= 0) gs->swrr[best] -= total;
    return best;
}

/* May member m serve this request (its tag, and the tenant's in g)? */
static int group_allows(const struct config_group *g, const struct config_deployment *m, const engine_call *c) {
    return config_has_tag(m, c->tag) && config_has_tag(m, config_group_tenant_tag(g, c->tenant_req));
}

static void flush_arm(engine *e);

/* Queues c on member m of its group, allowed to wait step_ms there. */
static int call_target(engine_call *c, const struct config_deployment *m, long long step_ms) {
    engine *e = c->e;
    dep *d = dep_find(e, m->name);
    if (!d || !d->cfg) return -1;
    const struct config_lane *l = config_lane(d->cfg, c->lane_req);
    if (!l) l = config_lane(d->cfg, NULL); /* a member without that lane: its default */
    const struct config_tenant *t = config_tenant(d->cfg, c->tenant_req);
    int cls = dep_class(d, l ? l->name : "", t ? t->name : "default");
    if (cls < 0) return -1;
    c->d = d;
    c->cls = cls;
    c->deferred = 0;
    c->max_wait_ms = (long long)(uv_now(e->loop) - c->start_ms) + (step_ms > 0 ? step_ms : 0);
    c->state = CALL_PENDING;
    class_push(d, c);
    d->classes[cls].st.acquires++;
    flush_arm(e);
    return 0;
}

/* After member c->d shed c: records when that member could serve it and
 * queues c on the next member to try. Returns 1 when c was queued again, 0
 * when the group has nobody left (then *final is the answer). Spill phase:
 * the allowed members in order, each allowed to wait up to spill_ms.
 * Final phase: the allowed member whose slot (learned from its shed) is
 * soonest within the request's max wait, allowed to wait for it. */
static int group_next(engine_call *c, const engine_shed *shed, engine_shed *final) {
    engine *e = c->e;
    const struct config_group *g = config_group(e->cfg, c->group);
    if (!g) return 0;
    uint64_t now = uv_now(e->loop);
    int idx = -1;
    for (size_t i = 0; i < g->nmembers; i++)
        if (!strcmp(g->members[i], c->d->name)) idx = (int)i;
    const char *r = shed->reason;
    int never = shed->retry_after_ms < 0 || !strcmp(r, "breaker") || !strcmp(r, "quota") ||
                !strcmp(r, "too_large") || !strcmp(r, "daily") || !strcmp(r, "tenant_daily");
    if ((!strcmp(r, "breaker") || !strcmp(r, "quota")) && shed->retry_after_ms >= 0) {
        uint64_t back = now + (uint64_t)shed->retry_after_ms;
        if (!c->ghealth || back < c->ghealth) c->ghealth = back;
    }
    if (idx >= 0) {
        long long step_left = c->max_wait_ms - (long long)(now - c->start_ms);
        c->gest[idx] = never ? UINT64_MAX : now + (uint64_t)(step_left > 0 ? step_left : 0) + (uint64_t)shed->retry_after_ms;
    }
    if (!c->gfirst.reason) c->gfirst = *shed;
    long long left = c->gdeadline > now ? (long long)(c->gdeadline - now) : 0;
    /* Spill phase (priority: the members in order; weighted: only the
     * member whose turn it was, then the final phase). */
    while (g->policy == CONFIG_POLICY_PRIORITY && c->gnext < (int)g->nmembers) {
        const struct config_deployment *m = g->members_[c->gnext++];
        if (!group_allows(g, m, c)) continue;
        if (call_target(c, m, left < g->spill_ms ? left : g->spill_ms) == 0) return 1;
    }
    /* Final phase: the member that can serve it soonest. Its shed said
     * when that member's next slot was; this agent's own requests queued
     * there since will take a slot each first (requests deciding together
     * from the same figures would otherwise all pick the same member).
     * The step may wait only a little past that estimate: when others took
     * the slot meanwhile, the shed brings a newer figure and the choice is
     * made again. After 3 rounds per member it waits for good. */
    int best = -1;
    uint64_t soonest = UINT64_MAX, best_interval = 0;
    for (size_t i = 0; i < g->nmembers; i++) {
        const struct config_deployment *m = g->members_[i];
        if (!group_allows(g, m, c) || !c->gest[i] || c->gest[i] == UINT64_MAX) continue;
        dep *md = dep_find(e, m->name);
        uint64_t interval = (uint64_t)(60000 / (m->rpm > 0 ? m->rpm : 1)) + 1;
        uint64_t score = c->gest[i] + (md ? (uint64_t)md->npending * interval : 0);
        if (score < soonest) {
            soonest = score;
            best = (int)i;
            best_interval = interval;
        }
    }
    if (best >= 0 && soonest <= c->gdeadline) {
        long long step = left;
        if (++c->gfinal < 3 * (int)g->nmembers) {
            long long until = (long long)(soonest > now ? soonest - now : 0) + 2 * (long long)best_interval;
            if (until < step) step = until;
        }
        if (call_target(c, g->members_[best], step) == 0) return 1;
    }
    if (best >= 0) soonest = c->gest[best];
    final->reason = c->gfirst.reason ? c->gfirst.reason : shed->reason;
    /* The hint: when the soonest member could serve it, or when a member
     * out for health (breaker, quota) comes back; -1 only when none can. */
    if (c->ghealth && c->ghealth < soonest) soonest = c->ghealth;
    final->retry_after_ms = soonest == UINT64_MAX ? -1
                            : soonest > c->gdeadline ? (long long)(soonest - c->gdeadline) + 1
                                                     : (long long)(soonest > now ? soonest - now : 1);
    if (final->retry_after_ms == 0) final->retry_after_ms = 1;
    return 0;
}

/* Runs the caller's callback exactly once and frees the call. */
static void call_complete(engine_call *c, int status, const engine_shed *shed, const char *msg) {
    engine *e = c->e;
    engine_shed final = {shed ? shed->reason : NULL, shed ? shed->retry_after_ms : -1};
    if (c->group[0] && status == SL_ESHED && !c->canceled && !c->gfinal_answer) {
        if (!e->stopping && group_next(c, shed, &final)) return; /* asked of the next member */
        shed = &final;
    }
    if (c->group[0]) {
        group_stat *gs = group_stats(e, c->group);
        const struct config_group *g = config_group(e->cfg, c->group);
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
    c->grant.group = c->group[0] != 0;
    if (status == SL_OK) {
        c->grant.waited_ms = (long long)(uv_now(e->loop) - c->start_ms);
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

/* Queues one settle item for d's next settle call. u: the usage (NULL:
 * unknown); seen: what the headers said (NULL: nothing). */
static void queue_settle(dep *d, const char *id, const engine_usage *u, engine_outcome o, long long pause_ms,
                         const engine_seen *seen) {
    if (d->nsettles == d->capsettles) {
        size_t cap = d->capsettles ? d->capsettles * 2 : 64;
        settle_item *s = realloc(d->settles, cap * sizeof(*s));
        if (!s) return; /* best effort: the grant expires with its estimate */
        d->settles = s;
        d->capsettles = cap;
    }
    settle_item *it = &d->settles[d->nsettles++];
    snprintf(it->id, sizeof(it->id), "%s", id);
    if (u) it->usage = *u;
    else it->usage = (engine_usage){-1, -1, -1, -1};
    it->outcome = o;
    it->pause_ms = pause_ms;
    if (seen) it->seen = *seen;
    else engine_seen_init(&it->seen);
    engine *e = d->e;
    /* Cancels and provider pauses go at once (a cancel must land before the
     * next reserve); plain settles wait up to ENGINE_SETTLE_DELAY_MS so the
     * settles of callers working one at a time share a call. */
    if (o == ENGINE_CANCELLED || o == ENGINE_QUOTA || pause_ms >= 0 || d->nsettles >= 64 || e->stopping) {
        d->settle_urgent = 1;
        flush_arm(e);
    } else if (!uv_is_active((uv_handle_t *)&e->settle_timer)) {
        uv_timer_start(&e->settle_timer, on_settle_timer, ENGINE_SETTLE_DELAY_MS, 0);
    }
}

/* The Redis grant number inside "<deployment>:<n>", or NULL for local. */
static const char *grant_number(const char *id) {
    const char *colon = strrchr(id, ':');
    if (!colon || colon[1] == 'L' || colon[1] == '\0') return NULL;
    return colon + 1;
}

static void on_release(uv_timer_t *t);

/* Moves every held caller `shift` ms later, keeping their spacing: a pause
 * shifts the schedule instead of piling callers up at its end. */
static void dep_shift_waiting(dep *d, double shift) {
    if (shift <= 0) return;
    uint64_t now = uv_now(d->e->loop);
    for (engine_call *c = d->waiting.head; c; c = c->next) {
        c->release_ms += (uint64_t)ceil(shift);
        uv_timer_start(&c->timer, on_release, c->release_ms > now ? c->release_ms - now : 0, 0);
    }
}

/* Follows Redis' running pause shift (pause_shift_ms in replies): held
 * callers move by its growth, so every agent shifts by the same amount. */
static void dep_follow_shift(dep *d, double total) {
    if (d->shift_known && total > d->applied_shift) dep_shift_waiting(d, total - d->applied_shift);
    d->applied_shift = total; /* also resets when Redis lost its state */
    d->shift_known = 1;
}

/* A pause learned by this agent. In Redis mode the reply of the settle that
 * carries it brings the shift; locally the local schedule shifts here. */
static void dep_pause(dep *d, long long pause_ms, int local) {
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

static void on_release(uv_timer_t *t) {
    engine_call *c = t->data;
    dep *d = c->d;
    uint64_t now = uv_now(c->e->loop);
    if (d->paused_until > now) {
        /* The provider paused the deployment after this grant was made:
         * hold the caller until the pause ends, like every other agent. */
        uv_timer_start(&c->timer, on_release, d->paused_until - now, 0);
        return;
    }
    list_remove(&d->waiting, c);
    c->e->stats.waiting--;
    call_complete(c, SL_OK, NULL, NULL);
}

/* A grant: release the caller now or at its slot. */
static void call_granted(engine_call *c, long long wait_ms) {
    engine *e = c->e;
    dep *d = c->d;
    if (c->canceled) {
        const char *num = grant_number(c->grant.id);
        if (num) queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
        call_free(c);
        return;
    }
    uint64_t now = uv_now(e->loop);
    uint64_t at = now + (uint64_t)(wait_ms > 0 ? wait_ms : 0);
    if (d->paused_until > at) at = d->paused_until;
    if (at <= now) {
        call_complete(c, SL_OK, NULL, NULL);
        return;
    }
    c->state = CALL_WAITING;
    c->release_ms = at;
    uv_timer_init(e->loop, &c->timer);
    c->timer.data = c;
    c->timer_live = 1;
    uv_timer_start(&c->timer, on_release, at - now, 0);
    list_push(&d->waiting, c);
    e->stats.waiting++;
}

/* ---- local fallback ------------------------------------------------------- */

/* The share of the deployment's rate this agent may use alone. */
static double local_share(const dep *d) {
    if (d->live_agents > 0) return 1.0 / (double)d->live_agents;
    return d->e->cfg->agent.fallback_share;
}

/* The earliest local slot for cost c on one dimension (rate r per ms,
 * burst b), with the release-jitter margin of the reserve script: plan
 * against b - r J; a cost above that waits for a full bucket plus J. */
static double local_earliest(double tat, double r, double b, double c, double jitter_ms,
                             double *jitter) {
    double j = fmin(jitter_ms, 0.5 * b / r);
    double room = b - j * r - c;
    *jitter = room < 0 ? j : 0;
    return room < 0 ? tat + j : tat - room / r;
}

/* The cost of c in each dimension: a request, the combined estimate, and
 * its input and max output (each the combined estimate when not split:
 * an upper bound of both, as the reserve script charges). */
static void call_costs(const engine_call *c, double cost[ENGINE_DIMS]) {
    cost[ENGINE_DIM_REQUESTS] = 1;
    cost[ENGINE_DIM_TOKENS] = (double)c->tokens;
    cost[ENGINE_DIM_INPUT] = (double)(c->split ? c->input : c->tokens);
    cost[ENGINE_DIM_OUTPUT] = (double)(c->split ? c->output : c->tokens);
}

/* Decides one call with a local GCRA at this agent's share of the rate.
 * Same rules as the reserve script, on uv_now; never unlimited. Each
 * dimension runs at the rate Redis last reported the fleet at (a lower
 * limit the provider's headers gave, less others' use), else the
 * configured one. */
static void local_decide(engine_call *c) {
    static const char *const reasons[ENGINE_DIMS] = {"rpm", "tpm", "itpm", "otpm"};
    dep *d = c->d;
    engine *e = c->e;
    const struct config_deployment *cfg = d->cfg;
    if (e->cfg->agent.fail == CONFIG_FAIL_CLOSED) {
        call_complete(c, SL_EUNAVAIL, NULL,
                      "Redis is unreachable and agent.fail is closed: refusing to pace locally");
        return;
    }
    double cost[ENGINE_DIMS], rate[ENGINE_DIMS] = {0}, burst[ENGINE_DIMS] = {0};
    call_costs(c, cost);
    for (int k = ENGINE_DIM_TOKENS; k < ENGINE_DIMS; k++) {
        if (d->rates[k].configured > 0 && cost[k] > d->rates[k].configured) {
            engine_shed sh = {"too_large", -1};
            call_complete(c, SL_ESHED, &sh, NULL);
            return;
        }
    }
    double share = local_share(d), now = (double)uv_now(e->loop), fence = 0, j;
    const char *reason = "rpm";
    /* The local bucket is empty where the fleet's schedule ends: grants
     * Redis already made keep being released. Other agents kept extending
     * that schedule after our last look, so assume its reach past now (the
     * backlog) held until Redis was lost. The token backlog is the longest
     * of the token dimensions'. */
    double fleet_req = fmax(d->fleet_tat_req, d->lost_at + d->fleet_backlog_req);
    double fleet_tok = fmax(d->fleet_tat_tok, d->lost_at + d->fleet_backlog_tok);
    double s = fmax(now, d->local_last_slot);
    double jit = (double)cfg->jitter_ms;
    for (int k = 0; k < ENGINE_DIMS; k++) {
        const engine_dim_rates *dr = &d->rates[k];
        if (dr->configured <= 0) continue;
        double per_min = dr->known && dr->effective > 0 ? fmin(dr->effective, dr->configured) : dr->configured;
        double limit = dr->known && dr->limit > 0 ? fmin(dr->limit, dr->configured) : dr->configured;
        rate[k] = per_min * share / 60000.0;
        burst[k] = fmax(1.0, floor(d->burst_cfg[k] * share * limit / dr->configured));
        double fleet = k == ENGINE_DIM_REQUESTS ? fleet_req : fleet_tok;
        d->local_tat[k] = fmax(d->local_tat[k], fleet + burst[k] / rate[k]);
        double t = local_earliest(d->local_tat[k], rate[k], burst[k], cost[k], jit, &j);
        fence = fmax(fence, j);
        if (t > s) {
            s = t;
            reason = reasons[k];
        }
    }
    if ((double)d->paused_until > s) {
        s = (double)d->paused_until;
        reason = "paused";
    }
    double wait = s - now;
    if (wait > (double)c->max_wait_ms) {
        engine_shed sh = {reason, (long long)ceil(wait - (double)c->max_wait_ms)};
        call_complete(c, SL_ESHED, &sh, NULL);
        return;
    }
    for (int k = 0; k < ENGINE_DIMS; k++)
        if (rate[k] > 0) d->local_tat[k] = fmax(d->local_tat[k], s) + cost[k] / rate[k];
    d->local_last_slot = s + fence;
    d->local_seq++;
    snprintf(c->grant.id, sizeof(c->grant.id), "%s:L%llu", d->name, d->local_seq);
    c->grant.tokens = c->tokens;
    c->grant.local = 1;
    call_granted(c, (long long)ceil(wait));
}

/* Redis mode is used when connected, the deployment's limits are written,
 * and the local schedule from an outage has drained (so the fleet's total
 * stays within the quota when agents rejoin). */
static int dep_uses_redis(const dep *d) {
    double now = (double)uv_now(d->e->loop);
    int drained = 1;
    for (int k = 0; k < ENGINE_DIMS; k++) drained &= d->local_tat[k] <= now;
    return dep_ready(d) && d->configured && (d->handed_over || drained);
}

static void on_handover(void *arg, redisReply *r, const char *err) {
    dep *d = arg;
    d->e->calls_out--;
    d->handing_over = 0;
    if (r && r->type == REDIS_REPLY_INTEGER) d->handed_over = 1;
    flush_arm(d->e);
    maybe_finish_stop(d->e);
}

/* Back from an outage with local grants still to be released: push the
 * shared schedule past them (heartbeat "busy"), then use Redis at once. */
static void dep_hand_over(dep *d) {
    engine *e = d->e;
    if (d->handing_over || d->handed_over) return;
    double now = (double)uv_now(e->loop);
    char window[24], breq[24], btok[24];
    snprintf(window, sizeof(window), "%lld", e->cfg->agent.heartbeat_ms * 3);
    /* The heartbeat takes one token figure for every token dimension: the
     * longest local token schedule (the safe side). */
    double tok = 0;
    for (int k = ENGINE_DIM_TOKENS; k < ENGINE_DIMS; k++) tok = fmax(tok, d->local_tat[k] - now);
    snprintf(breq, sizeof(breq), "%.0f", ceil(fmax(0.0, d->local_tat[ENGINE_DIM_REQUESTS] - now)));
    snprintf(btok, sizeof(btok), "%.0f", ceil(tok));
    const char *argv[5] = {e->agent_id, window, "busy", breq, btok};
    if (rrouter_script(e->redis, SCRIPT_HEARTBEAT, d->keys, 5, argv, on_handover, d) == 0) {
        e->calls_out++;
        d->handing_over = 1;
    }
}

/* ---- reserve --------------------------------------------------------------- */

/* An item's estimate for the reserve script: "c", or "i+o" when split. */
static void call_tokens_arg(const engine_call *c, char *buf, size_t n) {
    if (c->split) snprintf(buf, n, "%lld+%lld", c->input, c->output);
    else snprintf(buf, n, "%lld", c->tokens);
}

typedef struct reserve_batch {
    dep *d;
    size_t n;
    engine_call *items[RESERVE_BATCH_MAX];
} reserve_batch;

static long long reply_int(const redisReply *r) {
    if (!r) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING) return atoll(r->str);
    return 0;
}

/* A shed for health (breaker open, out of quota) is news once per period:
 * it is logged when it starts, so an operator sees a member leave. */
static void dep_health_seen(dep *d, const char *reason, long long retry_after_ms) {
    int breaker = !strcmp(reason, "breaker"), quota = !strcmp(reason, "quota");
    if (!breaker && !quota) return;
    uint64_t now = uv_now(d->e->loop), until = now + (uint64_t)(retry_after_ms > 0 ? retry_after_ms : 0);
    uint64_t *seen = breaker ? &d->breaker_until : &d->quota_until;
    if (now > *seen)
        elog(d->e, CONFIG_LOG_WARN, "deployment %s: %s for %lld ms; requests are shed with reason %s%s", d->name,
             breaker ? "circuit breaker open (server errors or timeouts past its threshold)" : "out of quota",
             retry_after_ms, reason, d->cfg && d->cfg->group_ ? " and its group routes to the other members" : "");
    if (until > *seen) *seen = until;
    if (breaker) d->e->stats.breaker_sheds++;
}

/* A grant from a reserve reply (plain or group): release the caller at its
 * slot, or give the slot back when the agent is stopping. */
static void call_reply_granted(engine_call *c, dep *d, long long grant, long long wait_ms, long long tokens) {
    snprintf(c->grant.id, sizeof(c->grant.id), "%s:%lld", d->name, grant);
    c->grant.tokens = tokens;
    c->grant.local = 0;
    if (c->e->stopping) {
        /* Stopped while this call was in flight: give the slot back. */
        queue_settle(d, grant_number(c->grant.id), NULL, ENGINE_CANCELLED, -1, NULL);
        c->gfinal_answer = 1;
        if (c->canceled) call_free(c);
        else call_complete(c, SL_ECLOSING, NULL, "the agent is shutting down");
        return;
    }
    call_granted(c, wait_ms);
}

/* A deferral from a reserve reply (plain or group): c's class on c->d
 * waits until Redis said capacity opens (ask_in ms); the caller queues c
 * again. */
static void call_deferred(engine_call *c, const redisReply *reason, long long ask_in, uint64_t now) {
    call_class *k = &c->d->classes[c->cls];
    uint64_t at = now + (uint64_t)(ask_in > 0 ? ask_in : 1);
    if (at > k->ask_at) k->ask_at = at;
    c->deferred = 1;
    snprintf(c->defer_reason, sizeof(c->defer_reason), "%s", reason->type == REDIS_REPLY_STRING ? reason->str : "rpm");
    c->e->stats.deferrals++;
    k->st.deferrals++;
    c->state = CALL_PENDING;
}

static void on_reserve(void *arg, redisReply *r, const char *err) {
    reserve_batch *b = arg;
    dep *d = b->d;
    engine *e = d->e;
    e->calls_out--;
    d->reserving--;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 5 + b->n;
    uint64_t now = uv_now(e->loop);
    if (ok) {
        long long paused = reply_int(r->element[1]);
        if (paused > 0 && now + (uint64_t)paused > d->paused_until) d->paused_until = now + (uint64_t)paused;
        /* Where the fleet's schedule ends: local pacing starts there if
         * Redis is lost, so grants already made by Redis and local ones do
         * not stack. */
        d->fleet_backlog_req = (double)reply_int(r->element[2]);
        d->fleet_backlog_tok = (double)reply_int(r->element[3]);
        d->fleet_tat_req = (double)now + d->fleet_backlog_req;
        d->fleet_tat_tok = (double)now + d->fleet_backlog_tok;
        /* Before the new grants: they are already behind any new shift. */
        dep_follow_shift(d, (double)reply_int(r->element[4]));
    }
    int lost_limits = r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown deployment");
    /* A cluster redirection the router could not follow, or a slot being
     * migrated: hold this deployment briefly and send the batch again. */
    int redirect = r && r->type == REDIS_REPLY_ERROR && rrouter_is_redirect(r->str);
    if (ok) d->script_error[0] = '\0';
    else if (r && r->type == REDIS_REPLY_ERROR && !redirect && !lost_limits) dep_script_error(d, "reserve", r->str);
    if (redirect) {
        e->stats.redirect_holds++;
        d->hold_until = uv_now(e->loop) + ENGINE_REDIRECT_HOLD_MS;
        uv_timer_start(&e->hold_timer, on_hold_timer, ENGINE_REDIRECT_HOLD_MS, 0);
    }
    if (lost_limits) {
        /* Redis lost our limits (flushed or restarted empty): write them
         * again; the batch waits for that and goes again, unseen by callers. */
        d->configured = 0;
        dep_configure(d);
    }
    /* Calls that go back to their class queues, at the head in their
     * order (they are older than anything queued behind them). */
    engine_call *back[RESERVE_BATCH_MAX];
    size_t nback = 0;
    for (size_t i = 0; i < b->n; i++) {
        engine_call *c = b->items[i];
        if (!ok) {
            /* Timeout, lost connection, or an error: decide locally (the
             * call may have been applied in Redis; charging it twice is the
             * safe side). A canceled call just goes away. */
            if (c->canceled) {
                call_free(c);
                continue;
            }
            if (e->stopping) {
                call_complete(c, SL_ECLOSING, NULL, "the agent is shutting down");
                continue;
            }
            if (dep_ready(d) && (lost_limits || redirect ||
                                 (d->configured && !(r && r->type == REDIS_REPLY_ERROR)))) {
                c->state = CALL_PENDING;
                back[nback++] = c;
                continue;
            }
            local_decide(c);
            continue;
        }
        redisReply *it = r->element[5 + i];
        if (it->type != REDIS_REPLY_ARRAY || it->elements < 3) {
            local_decide(c);
            continue;
        }
        long long kind = reply_int(it->element[0]);
        if (kind == 1 && it->elements >= 4) {
            call_reply_granted(c, d, reply_int(it->element[1]), reply_int(it->element[2]), reply_int(it->element[3]));
        } else if (kind == 2) {
            /* Deferred: beyond its horizon. The class waits until Redis
             * said capacity opens; the call keeps its place at the head. */
            if (c->canceled) {
                call_free(c);
                continue;
            }
            if (e->stopping) {
                call_complete(c, SL_ECLOSING, NULL, "the agent is shutting down");
                continue;
            }
            call_deferred(c, it->element[1], reply_int(it->element[2]), now);
            back[nback++] = c;
        } else {
            if (c->canceled) {
                call_free(c);
                continue;
            }
            const char *rs = it->element[1]->type == REDIS_REPLY_STRING ? it->element[1]->str : "other";
            engine_shed sh = {engine_shed_reasons[engine_shed_reason_index(rs)], reply_int(it->element[2])};
            dep_health_seen(d, sh.reason, sh.retry_after_ms);
            call_complete(c, SL_ESHED, &sh, NULL);
        }
    }
    while (nback) class_push_front(d, back[--nback]);
    free(b);
    if (d->npending) flush_arm(e);
    maybe_finish_stop(e);
}

/* The classes that may ask now, by lane priority (stable). */
static size_t dep_ready_classes(dep *d, uint64_t now, size_t *order) {
    size_t n = 0;
    for (size_t i = 0; i < d->nclasses; i++) {
        call_class *k = &d->classes[i];
        if (!k->q.n || k->ask_at > now) continue;
        size_t j = n++;
        long long p = class_priority(d, k);
        while (j > 0 && class_priority(d, &d->classes[order[j - 1]]) > p) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    return n;
}

/* Sheds a call that Redis deferred past its max wait. */
static int call_expired(engine_call *c, uint64_t now, long long *left) {
    *left = c->max_wait_ms - (long long)(now - c->start_ms);
    if (*left >= 0) return 0;
    if (!c->deferred) {
        *left = 0;
        return 0;
    }
    engine_shed sh = {engine_shed_reasons[engine_shed_reason_index(c->defer_reason)], 1};
    call_complete(c, SL_ESHED, &sh, NULL);
    return 1;
}

static void dep_flush_reserves(dep *d) {
    engine *e = d->e;
    if (!d->npending) return;
    if (!dep_uses_redis(d)) {
        /* Before the first connection attempt resolves, hold the callers
         * (bounded by the connect timeout); after that, pace locally. */
        if (dep_ready(d) && !d->configured) return; /* configure in flight */
        if (dep_ready(d)) {
            dep_hand_over(d); /* callers wait for it (one round trip) */
            return;
        }
        uint64_t grace = (uint64_t)e->cfg->redis.connect_timeout_ms + 500;
        uint64_t now = uv_now(e->loop);
        if (!e->ever_ready && !e->ever_down && now - e->start_ms < grace) {
            uv_timer_start(&e->hold_timer, on_hold_timer, e->start_ms + grace - now, 0);
            return;
        }
        engine_call *c;
        while ((c = dep_pop_any(d)) != NULL) local_decide(c);
        return;
    }
    if (d->reserving) return; /* what arrives now rides the next call */
    uint64_t now = uv_now(e->loop);
    if (d->hold_until > now) return; /* the hold timer flushes again */
    size_t *order = malloc(d->nclasses * sizeof(*order));
    if (!order) return;
    size_t nready = dep_ready_classes(d, now, order);
    if (!nready) {
        free(order);
        return; /* the defer timer flushes again */
    }
    reserve_batch *b = calloc(1, sizeof(*b));
    if (!b) {
        free(order);
        return;
    }
    b->d = d;
    /* Lanes and tenants go as quads, highest lane first, tenants of one
     * lane taking turns, a few per class; otherwise plain pairs. */
    int quads = d->cfg && (d->cfg->nlanes || d->cfg->ntenants);
    size_t per_class = quads ? ENGINE_CLASS_BATCH : RESERVE_BATCH_MAX;
    size_t stride = quads ? 4 : 2;
    const char **argv = malloc(sizeof(*argv) * (1 + 4 * RESERVE_BATCH_MAX));
    char(*buf)[48] = malloc(sizeof(*buf) * (1 + 2 * RESERVE_BATCH_MAX));
    /* Copies: shedding an expired group call below may queue it on another
     * class and move d->classes. */
    char(*names)[2][CONFIG_NAME_MAX + 1] = quads ? malloc(sizeof(*names) * RESERVE_BATCH_MAX) : NULL;
    if (!argv || !buf || (quads && !names)) {
        free(argv);
        free(buf);
        free(names);
        free(b);
        free(order);
        return;
    }
    for (size_t i = 0; i < nready && b->n < RESERVE_BATCH_MAX;) {
        size_t j = i;
        long long p = class_priority(d, &d->classes[order[i]]);
        while (j < nready && class_priority(d, &d->classes[order[j]]) == p) j++;
        for (size_t round = 0; round < per_class && b->n < RESERVE_BATCH_MAX; round++) {
            int any = 0;
            for (size_t g = i; g < j && b->n < RESERVE_BATCH_MAX; g++) {
                call_class *k = &d->classes[order[g]];
                engine_call *c = k->q.head;
                if (!c) continue;
                class_remove(d, c);
                long long left;
                if (call_expired(c, now, &left)) {
                    any = 1;
                    continue;
                }
                any = 1;
                c->state = CALL_INFLIGHT;
                size_t at = 1 + stride * b->n;
                call_tokens_arg(c, buf[1 + 2 * b->n], sizeof(buf[0]));
                snprintf(buf[2 + 2 * b->n], sizeof(buf[0]), "%lld", left);
                argv[at] = buf[1 + 2 * b->n];
                argv[at + 1] = buf[2 + 2 * b->n];
                if (quads) {
                    memcpy(names[b->n][0], k->lane, sizeof(names[0][0]));
                    memcpy(names[b->n][1], k->tenant, sizeof(names[0][1]));
                    argv[at + 2] = names[b->n][0];
                    argv[at + 3] = names[b->n][1];
                }
                b->items[b->n++] = c;
            }
            if (!any) break;
        }
        i = j;
    }
    free(order);
    if (!b->n) {
        free(argv);
        free(buf);
        free(names);
        free(b);
        if (d->npending) flush_arm(e);
        return;
    }
    snprintf(buf[0], sizeof(buf[0]), "%zu", b->n);
    argv[0] = buf[0];
    int rc = rrouter_script(e->redis, SCRIPT_RESERVE, d->keys, (int)(1 + stride * b->n), argv, on_reserve, b);
    free(argv);
    free(buf);
    free(names);
    if (rc != 0) {
        for (size_t i = 0; i < b->n; i++) {
            if (b->items[i]->canceled) call_free(b->items[i]);
            else local_decide(b->items[i]);
        }
        free(b);
        return;
    }
    e->calls_out++;
    d->reserving++;
    e->stats.reserve_calls++;
    e->stats.reserve_items += b->n;
}

/* ---- groups decided by one script (one Redis or Sentinel) ------------------ */

static int group_atomic(const engine *e) { return strcmp(rrouter_mode(e->redis), "cluster") != 0; }

static gq *gq_get(engine *e, const char *name) {
    for (gq *q = e->gqs; q; q = q->next)
        if (!strcmp(q->name, name)) return q;
    gq *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    snprintf(q->name, sizeof(q->name), "%s", name);
    q->next = e->gqs;
    e->gqs = q;
    return q;
}

/* c's class on member d (for its figures, and if d holds it later). */
static int member_class(engine_call *c, dep *d) {
    const struct config_lane *l = d->cfg ? config_lane(d->cfg, c->lane_req) : NULL;
    if (!l && d->cfg) l = config_lane(d->cfg, NULL);
    const struct config_tenant *t = d->cfg ? config_tenant(d->cfg, c->tenant_req) : NULL;
    return dep_class(d, l ? l->name : "", t ? t->name : "default");
}

/* Routes c step by step from the member whose turn it is (Redis Cluster,
 * members not all in Redis mode, or the group script failing). */
static int group_route_steps(engine_call *c) {
    const struct config_group *g = config_group(c->e->cfg, c->group);
    if (!g || c->gturn < 0 || (size_t)c->gturn >= g->nmembers) return -1;
    uint64_t now = uv_now(c->e->loop);
    long long left = c->gdeadline > now ? (long long)(c->gdeadline - now) : 0;
    c->gnext = c->gturn + 1;
    return call_target(c, g->members_[c->gturn], left < g->spill_ms ? left : g->spill_ms);
}

/* Answers every request still queued on q with status. */
static void gq_drain(gq *q, int status, const char *msg) {
    engine_call *c;
    while ((c = list_pop(&q->q)) != NULL) {
        c->e->stats.queued--;
        c->gq = NULL;
        c->gfinal_answer = 1;
        call_complete(c, status, NULL, msg);
    }
}

static void gq_fallback(engine_call *c) {
    if (group_route_steps(c) != 0) {
        c->gfinal_answer = 1;
        call_complete(c, SL_EUNKNOWN, NULL, "group removed by a configuration reload");
    }
}

typedef struct gq_batch {
    gq *q;
    size_t n, m;
    dep *md[CONFIG_GROUP_MAX];
    engine_call *items[RESERVE_BATCH_MAX];
} gq_batch;

static void on_group_reserve(void *arg, redisReply *r, const char *err) {
    (void)err;
    gq_batch *b = arg;
    gq *q = b->q;
    engine *e = b->md[0]->e;
    e->calls_out--;
    q->reserving = 0;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 + b->n;
    if (!ok && r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str))
        elog(e, CONFIG_LOG_WARN, "group %s: the group script failed (%s); routing member by member", q->name, r->str);
    uint64_t now = uv_now(e->loop);
    for (size_t i = 0; i < b->n; i++) {
        engine_call *c = b->items[i];
        c->gq = NULL;
        redisReply *it = ok ? r->element[1 + i] : NULL;
        long long kind = it && it->type == REDIS_REPLY_ARRAY && it->elements >= 3 ? reply_int(it->element[0]) : -1;
        long long j = kind == 1 || kind == 2 ? reply_int(it->element[1]) - 1 : 0;
        if ((kind == 1 || kind == 2) && (j < 0 || (size_t)j >= b->m || it->elements < 4)) kind = -1;
        if (kind == 1 && it->elements < 5) kind = -1;
        dep *d = kind == 1 || kind == 2 ? b->md[j] : NULL;
        if (c->canceled) {
            if (kind == 1) {
                char num[24];
                snprintf(num, sizeof(num), "%lld", reply_int(it->element[2]));
                queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
            }
            call_free(c);
            continue;
        }
        if (e->stopping && kind != 1) {
            c->gfinal_answer = 1;
            call_complete(c, SL_ECLOSING, NULL, "the agent is shutting down");
            continue;
        }
        if (kind == 1) {
            int cls = member_class(c, d);
            if (cls >= 0) {
                c->d = d;
                c->cls = cls;
            }
            call_reply_granted(c, d, reply_int(it->element[2]), reply_int(it->element[3]), reply_int(it->element[4]));
        } else if (kind == 2) {
            /* Deferred on that member (its lanes or tenants): held in its
             * class and asked there again; no more spilling. */
            int cls = member_class(c, d);
            if (cls < 0) {
                gq_fallback(c);
                continue;
            }
            c->d = d;
            c->cls = cls;
            const struct config_group *g = config_group(e->cfg, c->group);
            c->gnext = g ? (int)g->nmembers : 0;
            c->max_wait_ms = (long long)(c->gdeadline > c->start_ms ? c->gdeadline - c->start_ms : 0);
            call_deferred(c, it->element[2], reply_int(it->element[3]), now);
            class_push(d, c);
        } else if (kind == 0) {
            c->gfinal_answer = 1;
            const char *rs = it->element[1]->type == REDIS_REPLY_STRING ? it->element[1]->str : "other";
            engine_shed sh = {engine_shed_reasons[engine_shed_reason_index(rs)], reply_int(it->element[2])};
            call_complete(c, SL_ESHED, &sh, NULL);
        } else {
            gq_fallback(c);
        }
    }
    free(b);
    if (q->q.n) flush_arm(e);
    maybe_finish_stop(e);
}

static void gq_flush(engine *e, gq *q) {
    if (q->reserving || !q->q.n) return;
    const struct config_group *g = config_group(e->cfg, q->name);
    engine_call *c;
    if (!g) {
        gq_drain(q, SL_EUNKNOWN, "group removed by a configuration reload");
        return;
    }
    uint64_t now = uv_now(e->loop);
    gq_batch *b = calloc(1, sizeof(*b));
    if (!b) return;
    b->q = q;
    b->m = g->nmembers;
    int ready = group_atomic(e);
    for (size_t i = 0; i < g->nmembers; i++) {
        b->md[i] = dep_find(e, g->members[i]);
        if (!b->md[i] || !b->md[i]->cfg || !dep_uses_redis(b->md[i]) || b->md[i]->hold_until > now) ready = 0;
    }
    if (!ready) {
        /* A member paces locally or its limits are being written: each
         * member decides for itself, step by step. */
        free(b);
        while ((c = list_pop(&q->q)) != NULL) {
            e->stats.queued--;
            c->gq = NULL;
            gq_fallback(c);
        }
        return;
    }
    size_t m = g->nmembers, nk = SCRIPTS_NKEYS * m;
    char(*keys)[SCRIPTS_KEY_MAX] = malloc(nk * sizeof(*keys));
    const char **argv = malloc(sizeof(*argv) * (5 + 5 * RESERVE_BATCH_MAX));
    char(*buf)[64] = malloc(sizeof(*buf) * (4 + 3 * RESERVE_BATCH_MAX));
    if (!keys || !argv || !buf) {
        free(keys);
        free(argv);
        free(buf);
        free(b);
        return;
    }
    for (size_t i = 0; i < m; i++) memcpy(keys[SCRIPTS_NKEYS * i], b->md[i]->keys, sizeof(b->md[i]->keys));
    snprintf(buf[0], 64, "%zu", m);
    snprintf(buf[1], 64, "%lld", g->spill_ms);
    argv[0] = "group";
    argv[1] = buf[0];
    argv[2] = buf[1];
    argv[3] = g->policy == CONFIG_POLICY_WEIGHTED ? "weighted" : "priority";
    while (b->n < RESERVE_BATCH_MAX && (c = list_pop(&q->q)) != NULL) {
        e->stats.queued--;
        size_t k = b->n;
        char *tok = buf[4 + 3 * k], *left = buf[5 + 3 * k], *order = buf[6 + 3 * k];
        long long l = c->gdeadline > now ? (long long)(c->gdeadline - now) : 0;
        call_tokens_arg(c, tok, 64);
        snprintf(left, 64, "%lld", l);
        /* The members it may use, the one whose turn it is first. */
        size_t used = (size_t)snprintf(order, 64, "%d", c->gturn + 1);
        for (size_t i = 0; i < m && used < 60; i++)
            if ((int)i != c->gturn && group_allows(g, g->members_[i], c))
                used += (size_t)snprintf(order + used, 64 - used, ",%zu", i + 1);
        argv[5 + 5 * k] = tok;
        argv[6 + 5 * k] = left;
        argv[7 + 5 * k] = c->lane_req;
        argv[8 + 5 * k] = c->tenant_req;
        argv[9 + 5 * k] = order;
        c->state = CALL_INFLIGHT;
        b->items[b->n++] = c;
    }
    snprintf(buf[2], 64, "%zu", b->n);
    argv[4] = buf[2];
    int rc = rrouter_script_n(e->redis, SCRIPT_RESERVE, keys, (int)nk, (int)(5 + 5 * b->n), argv, on_group_reserve, b);
    free(keys);
    free(argv);
    free(buf);
    if (rc != 0) {
        for (size_t i = 0; i < b->n; i++) {
            b->items[i]->gq = NULL;
            if (b->items[i]->canceled) call_free(b->items[i]);
            else gq_fallback(b->items[i]);
        }
        free(b);
        return;
    }
    q->reserving = 1;
    e->calls_out++;
    e->stats.reserve_calls++;
    e->stats.reserve_items += b->n;
}

/* ---- settle ---------------------------------------------------------------- */

typedef struct settle_batch {
    dep *d;
    size_t n;
} settle_batch;

static int dim_index(const char *name) {
    for (int i = 0; i < ENGINE_DIMS; i++)
        if (!strcmp(engine_dim_names[i], name)) return i;
    return -1;
}

/* The rates a settle reply reports (name, limit in force, effective,
 * others' use, per dimension): kept for INFO and metrics, and a limit the
 * provider's headers lowered (or raised back) is logged once. */
static void dep_follow_rates(dep *d, const redisReply *rates) {
    if (!rates || rates->type != REDIS_REPLY_ARRAY || rates->elements % 4) return;
    for (size_t i = 0; i + 3 < rates->elements; i += 4) {
        const redisReply *nm = rates->element[i];
        if (nm->type != REDIS_REPLY_STRING) continue;
        int k = dim_index(nm->str);
        if (k < 0) continue;
        engine_dim_rates *dr = &d->rates[k];
        double limit = rates->element[i + 1]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 1]->str) : 0;
        double was = dr->known ? dr->limit : dr->configured;
        if (limit > 0 && fabs(limit - was) > 0.5) {
            d->e->stats.limit_changes++;
            if (limit + 0.5 < dr->configured)
                elog(d->e, CONFIG_LOG_WARN,
                     "deployment %s: the provider reports a %s limit of %.0f per minute, below the %.0f configured: "
                     "the fleet runs at %.0f",
                     d->name, engine_dim_names[k], limit, dr->configured, limit);
            else
                elog(d->e, CONFIG_LOG_INFO, "deployment %s: the provider reports the configured %s limit again (%.0f per minute)",
                     d->name, engine_dim_names[k], limit);
        }
        dr->limit = limit;
        dr->effective = rates->element[i + 2]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 2]->str) : 0;
        dr->outside = rates->element[i + 3]->type == REDIS_REPLY_STRING ? atof(rates->element[i + 3]->str) : 0;
        dr->known = 1;
    }
}

static void on_settle(void *arg, redisReply *r, const char *err) {
    settle_batch *b = arg;
    dep *d = b->d;
    engine *e = d->e;
    e->calls_out--;
    d->settling--;
    if (r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str)) dep_script_error(d, "settle", r->str);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3) {
        long long paused = reply_int(r->element[1]);
        if (paused > 0) {
            uint64_t until = uv_now(e->loop) + (uint64_t)paused;
            if (until > d->paused_until) d->paused_until = until;
        }
        if (r->element[2]->type == REDIS_REPLY_STRING) d->rate_scale = atof(r->element[2]->str);
        if (r->elements >= 4) dep_follow_shift(d, (double)reply_int(r->element[3]));
        if (r->elements == 5 + b->n) dep_follow_rates(d, r->element[4 + b->n]);
    }
    free(b);
    if (d->nsettles) {
        d->settle_urgent = 1; /* they waited behind the call in flight */
        flush_arm(e);
    }
    maybe_finish_stop(e);
}

static void dep_flush_settles(dep *d) {
    engine *e = d->e;
    if (!d->nsettles || d->settling) return;
    if (!dep_ready(d) || !d->configured) {
        if (!dep_ready(d)) d->nsettles = 0; /* Redis is gone: grants expire there */
        return;
    }
    size_t n = d->nsettles < SETTLE_BATCH_MAX ? d->nsettles : SETTLE_BATCH_MAX;
    /* The feedback form (lua/settle.lua): 'feedback', n, then per item the
     * grant, the usage ("-1", "n", "i+o" or "i+o+r"), the outcome, the
     * pause and what the headers said ("r=L/R,..." or "-"). */
    const char **argv = malloc(sizeof(*argv) * (2 + 5 * n));
    char(*buf)[96] = malloc(sizeof(*buf) * (2 + 5 * n));
    settle_batch *b = malloc(sizeof(*b));
    if (!argv || !buf || !b) {
        free(argv);
        free(buf);
        free(b);
        return;
    }
    static const char *const outcomes[] = {"ok", "throttled", "failed", "cancelled", "quota"};
    static const char letters[ENGINE_DIMS] = {'r', 't', 'i', 'o'};
    argv[0] = "feedback";
    snprintf(buf[1], 96, "%zu", n);
    argv[1] = buf[1];
    for (size_t i = 0; i < n; i++) {
        settle_item *it = &d->settles[i];
        const engine_usage *u = &it->usage;
        size_t k = 2 + 5 * i;
        argv[k] = it->id;
        if (u->input >= 0 && u->output >= 0)
            snprintf(buf[k + 1], 96, "%lld+%lld+%lld", u->input, u->output, u->cache_read > 0 ? u->cache_read : 0);
        else
            snprintf(buf[k + 1], 96, "%lld", u->tokens < 0 ? -1 : u->tokens);
        argv[k + 1] = buf[k + 1];
        argv[k + 2] = outcomes[it->outcome];
        snprintf(buf[k + 3], 96, "%lld", it->pause_ms < 0 ? -1 : it->pause_ms);
        argv[k + 3] = buf[k + 3];
        size_t used = 0;
        for (int j = 0; j < ENGINE_DIMS && used < 80; j++) {
            if (it->seen.limit[j] < 0 && it->seen.remaining[j] < 0) continue;
            char lim[24] = "", rem[24] = "";
            if (it->seen.limit[j] >= 0) snprintf(lim, sizeof(lim), "%lld", it->seen.limit[j]);
            if (it->seen.remaining[j] >= 0) snprintf(rem, sizeof(rem), "%lld", it->seen.remaining[j]);
            int w = snprintf(buf[k + 4] + used, 96 - used, "%s%c=%.15s/%.15s", used ? "," : "", letters[j], lim, rem);
            if (w < 0 || (size_t)w >= 96 - used) break;
            used += (size_t)w;
        }
        if (!used) snprintf(buf[k + 4], 96, "-");
        argv[k + 4] = buf[k + 4];
    }
    b->d = d;
    b->n = n;
    int rc = rrouter_script(e->redis, SCRIPT_SETTLE, d->keys, (int)(2 + 5 * n), argv, on_settle, b);
    free(argv);
    free(buf);
    if (rc != 0) {
        free(b);
        return;
    }
    memmove(d->settles, d->settles + n, (d->nsettles - n) * sizeof(*d->settles));
    d->nsettles -= n;
    e->calls_out++;
    d->settling++;
    e->stats.settle_calls++;
    e->stats.settle_items += n;
}

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
    for (dep *d = e->deps; d; d = d->next) {
        if (due || d->settle_urgent) {
            d->settle_urgent = 0;
            dep_flush_settles(d);
            if (d->nsettles && !uv_is_active((uv_handle_t *)&e->settle_timer))
                uv_timer_start(&e->settle_timer, on_settle_timer, ENGINE_SETTLE_DELAY_MS, 0);
        }
        dep_flush_reserves(d);
    }
    for (gq *q = e->gqs; q; q = q->next) gq_flush(e, q);
    /* Classes Redis deferred ask again when it said capacity opens. */
    uint64_t now = uv_now(e->loop), next = 0;
    for (dep *d = e->deps; d; d = d->next)
        for (size_t i = 0; i < d->nclasses; i++) {
            call_class *k = &d->classes[i];
            if (k->q.n && k->ask_at > now && (!next || k->ask_at < next)) next = k->ask_at;
        }
    if (next && !e->stopping) uv_timer_start(&e->defer_timer, on_hold_timer, next - now, 0);
}

static void on_idle(uv_idle_t *h) { (void)h; }

static void on_hold_timer(uv_timer_t *t) { flush_arm(t->data); }

static void on_settle_timer(uv_timer_t *t) {
    engine *e = t->data;
    e->settle_due = 1;
    flush_arm(e);
}

static void flush_arm(engine *e) {
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
    flush_arm(e); /* pending callers go to Redis, or local on failure */
    maybe_finish_stop(e);
}

static void dep_configure(dep *d) {
    engine *e = d->e;
    if (!d->cfg || d->configuring || !dep_ready(d) || e->stopping) return;
    const struct config_deployment *c = d->cfg;
    /* The configure script's fields (docs/redis-keys.md), from the YAML:
     * 30 scalars, the lane and tenant settings, one per lane and tenant. */
    size_t cap = 40 + c->nlanes + c->ntenants;
    struct kv {
        char name[CONFIG_NAME_MAX + 16];
        char val[96];
    } *kv = calloc(cap, sizeof(*kv));
    const char **argv = calloc(2 * cap, sizeof(*argv));
    if (!kv || !argv) {
        free(kv);
        free(argv);
        return;
    }
    int n = 0;
#define F(name_, fmt, ...) \
    (snprintf(kv[n].name, sizeof(kv[n].name), "%s", (name_)), snprintf(kv[n].val, sizeof(kv[n].val), fmt, __VA_ARGS__), n++)
    F("rpm", "%lld", c->rpm);
    F("tpm", "%lld", c->tpm);
    F("itpm", "%lld", c->itpm);
    F("otpm", "%lld", c->otpm);
    F("burst_requests", "%lld", c->burst.requests);
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
    F("horizon_ms", "%lld", c->horizon_ms);
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
    for (int i = 0; i < n; i++) {
        argv[2 * i] = kv[i].name;
        argv[2 * i + 1] = kv[i].val;
    }
    if (rrouter_script(e->redis, SCRIPT_CONFIGURE, d->keys, 2 * n, argv, on_configure, d) == 0) {
        d->configuring = 1;
        e->calls_out++;
    }
    free(kv);
    free(argv);
}

static void on_heartbeat(void *arg, redisReply *r, const char *err) {
    dep *d = arg;
    d->e->calls_out--;
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0) d->live_agents = r->integer;
    /* The first heartbeat follows the connect: a script that cannot run
     * (an ACL without a command it calls) shows here, before any caller. */
    if (r && r->type == REDIS_REPLY_ERROR && !rrouter_is_redirect(r->str)) dep_script_error(d, "heartbeat", r->str);
    maybe_finish_stop(d->e);
}

static void dep_heartbeat(dep *d, int leave) {
    engine *e = d->e;
    char window[24];
    snprintf(window, sizeof(window), "%lld", e->cfg->agent.heartbeat_ms * 3);
    const char *argv[3] = {e->agent_id, window, "leave"};
    if (rrouter_script(e->redis, SCRIPT_HEARTBEAT, d->keys, leave ? 3 : 2, argv, on_heartbeat, d) == 0)
        e->calls_out++;
}

static void on_heartbeat_timer(uv_timer_t *t) {
    engine *e = t->data;
    for (dep *d = e->deps; d; d = d->next) {
        if (!d->cfg || !dep_ready(d)) continue;
        if (!d->configured) dep_configure(d);
        dep_heartbeat(d, 0);
    }
}

static void on_redis_up(void *ud) {
    engine *e = ud;
    e->ever_ready = 1;
    int any = rrouter_any_ready(e->redis);
    if (any && !e->redis_up) elog(e, CONFIG_LOG_INFO, "Redis connected (%s): using the shared budget", rrouter_mode(e->redis));
    if (any && !e->redis_up) e->mode_since_ms = wall_ms();
    e->redis_up = any;
    e->stats.redis_up = any;
    /* Write limits wherever the serving node is ready and they are not
     * (a node came up, or the cluster's slot map moved a deployment). */
    for (dep *d = e->deps; d; d = d->next) {
        if (d->cfg && dep_ready(d) && !d->configured && !d->configuring) {
            dep_configure(d);
            dep_heartbeat(d, 0);
        }
    }
}

static void on_redis_down(void *ud, const char *why) {
    engine *e = ud;
    e->ever_down = 1;
    int any = rrouter_any_ready(e->redis);
    elog(e, any ? CONFIG_LOG_WARN : CONFIG_LOG_ERROR, "Redis unreachable: %s; %s", why ? why : "connection lost",
         e->cfg->agent.fail == CONFIG_FAIL_CLOSED ? "refusing (agent.fail: closed)" : "pacing locally at this agent's share");
    if (!any && e->redis_up) e->mode_since_ms = wall_ms();
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
    flush_arm(e); /* queued callers are decided locally now */
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
    rconn_events ev = {on_redis_up, on_redis_down};
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
    e->mode_since_ms = wall_ms();
    *out = e;
    return 0;
}

void engine_start(engine *e) {
    e->start_ms = uv_now(e->loop);
    rrouter_start(e->redis);
    uint64_t hb = (uint64_t)e->cfg->agent.heartbeat_ms;
    uv_timer_start(&e->heartbeat_timer, on_heartbeat_timer, hb, hb);
}

int engine_acquire(engine *e, const char *deployment, long long tokens, long long max_wait_ms,
                   const char *lane, const char *tenant, engine_acquire_cb cb, void *arg,
                   engine_call **out) {
    engine_req rq = {.name = deployment, .tokens = tokens, .max_wait_ms = max_wait_ms, .lane = lane, .tenant = tenant};
    return engine_acquire_req(e, &rq, cb, arg, out);
}

static int name_ok(const char *s) { return !s || strlen(s) <= CONFIG_NAME_MAX; }

static void on_no_member(uv_timer_t *t) {
    engine_call *c = t->data;
    list_remove(&c->d->waiting, c);
    c->e->stats.waiting--;
    engine_shed sh = {"tag", -1};
    call_complete(c, SL_ESHED, &sh, NULL);
}

static void call_estimate(engine_call *c, const engine_req *rq);

/* A request to a group: routed by group_next() from its first member. */
static int group_acquire(engine *e, const struct config_group *g, const engine_req *rq, engine_acquire_cb cb,
                         void *arg, engine_call **out) {
    engine_call *c = calloc(1, sizeof(*c));
    if (!c) return SL_ENOMEM;
    c->e = e;
    c->cb = cb;
    c->arg = arg;
    call_estimate(c, rq);
    snprintf(c->group, sizeof(c->group), "%s", g->name);
    snprintf(c->lane_req, sizeof(c->lane_req), "%s", rq->lane ? rq->lane : "");
    snprintf(c->tenant_req, sizeof(c->tenant_req), "%s", rq->tenant ? rq->tenant : "");
    snprintf(c->tag, sizeof(c->tag), "%s", rq->tag ? rq->tag : "");
    c->start_ms = uv_now(e->loop);
    c->gdeadline = c->start_ms + (uint64_t)(rq->max_wait_ms >= 0 ? rq->max_wait_ms : g->max_wait_ms);
    e->stats.acquires++;
    group_stat *gs = group_stats(e, g->name);
    if (gs) gs->st.acquires++;
    int first = -1;
    for (size_t i = 0; i < g->nmembers && first < 0; i++)
        if (group_allows(g, g->members_[i], c)) first = (int)i;
    if (first < 0) {
        /* Nobody may serve it: shed on the next turn (callbacks never run
         * from the call that registers them). */
        c->d = dep_find(e, g->members[0]);
        c->cls = c->d ? dep_class(c->d, "", "default") : -1;
        if (c->cls < 0) {
            free(c);
            return SL_ENOMEM;
        }
        c->gnext = (int)g->nmembers;
        c->gfirst = (engine_shed){"tag", -1};
        c->state = CALL_WAITING;
        uv_timer_init(e->loop, &c->timer);
        c->timer.data = c;
        c->timer_live = 1;
        uv_timer_start(&c->timer, on_no_member, 0, 0);
        list_push(&c->d->waiting, c);
        e->stats.waiting++;
    } else {
        if (g->policy == CONFIG_POLICY_WEIGHTED) first = group_turn(e, g, c);
        c->gturn = first;
        gq *q = group_atomic(e) ? gq_get(e, g->name) : NULL;
        dep *d = dep_find(e, g->members[first]);
        int cls = d ? member_class(c, d) : -1;
        if (q && cls >= 0) {
            /* One Redis: the group script decides among the members. */
            c->d = d;
            c->cls = cls;
            d->classes[cls].st.acquires++;
            c->state = CALL_PENDING;
            c->gq = q;
            list_push(&q->q, c);
            e->stats.queued++;
            flush_arm(e);
        } else if (group_route_steps(c) != 0) {
            free(c);
            return SL_ENOMEM;
        }
    }
    if (out) *out = c;
    return 0;
}

const char *engine_acquire_req_error(const engine *e, const engine_req *rq) {
    if (!rq || !rq->name) return NULL;
    if (rq->split && (rq->input < 0 || rq->output < 0))
        return "INPUT and OUTPUT must be non-negative integers";
    if (rq->split && rq->tokens != 0 && rq->tokens != rq->input + rq->output)
        return "TOKENS must be INPUT + OUTPUT when all three are given";
    if (rq->split || rq->tokens <= 0) return NULL;
    const struct config_deployment *d = config_deployment(e->cfg, rq->name);
    const struct config_group *g = d ? NULL : config_group(e->cfg, rq->name);
    int need = d ? cfg_split(d) : 0;
    for (size_t i = 0; g && i < g->nmembers; i++) need |= cfg_split(g->members_[i]);
    if (need)
        return d ? "this deployment counts input and output tokens apart (itpm, otpm): give INPUT and OUTPUT, "
                   "not TOKENS"
                 : "a member of this group counts input and output tokens apart (itpm, otpm): give INPUT and "
                   "OUTPUT, not TOKENS";
    return NULL;
}

/* Copies the estimate of rq into c (tokens the sum of a split). */
static void call_estimate(engine_call *c, const engine_req *rq) {
    c->split = rq->split;
    c->input = rq->split ? rq->input : -1;
    c->output = rq->split ? rq->output : -1;
    c->tokens = rq->split ? rq->input + rq->output : rq->tokens;
}

int engine_acquire_req(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **out) {
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
    c->start_ms = uv_now(e->loop);
    c->state = CALL_PENDING;
    class_push(d, c);
    e->stats.acquires++;
    d->classes[cls].st.acquires++;
    flush_arm(e);
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
        if (c->gq) {
            list_remove(&c->gq->q, c);
            e->stats.queued--;
            c->gq = NULL;
        } else {
            class_remove(d, c);
        }
        call_free(c);
        break;
    case CALL_INFLIGHT:
        break; /* on_reserve gives a grant back and frees the call */
    case CALL_WAITING: {
        const char *num = grant_number(c->grant.id);
        if (num) queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
        list_remove(&d->waiting, c);
        e->stats.waiting--;
        uv_timer_stop(&c->timer);
        c->state = CALL_DONE;
        call_free(c);
        break;
    }
    case CALL_DONE:
        break;
    }
}

int engine_settle(engine *e, const char *grant_id, long long actual_tokens, engine_outcome outcome,
                  long long pause_ms) {
    engine_usage u = {actual_tokens < 0 ? -1 : actual_tokens, -1, -1, -1};
    return engine_settle_usage(e, grant_id, &u, outcome, pause_ms, NULL);
}

int engine_settle_usage(engine *e, const char *grant_id, const engine_usage *usage, engine_outcome outcome,
                        long long pause_ms, const engine_seen *seen) {
    engine_usage u = usage ? *usage : (engine_usage){-1, -1, -1, -1};
    /* One figure for the combined usage: input + output when only those
     * were given; input and output together or not at all; cache reads
     * within the input. */
    if ((u.input < 0) != (u.output < 0)) return SL_EINVAL;
    if (u.input >= 0 && u.tokens < 0) u.tokens = u.input + u.output;
    if (u.cache_read >= 0 && (u.input < 0 || u.cache_read > u.input)) return SL_EINVAL;
    const char *colon = grant_id ? strrchr(grant_id, ':') : NULL;
    if (!colon || colon == grant_id || (size_t)(colon - grant_id) > CONFIG_NAME_MAX) return SL_EINVAL;
    if (outcome < ENGINE_OK || outcome > ENGINE_QUOTA) return SL_EINVAL;
    const char *num = colon + 1;
    int local = num[0] == 'L';
    const char *digits = local ? num + 1 : num;
    if (!*digits || strlen(digits) > 15 || strspn(digits, "0123456789") != strlen(digits))
        return SL_EINVAL;
    char name[CONFIG_NAME_MAX + 1];
    memcpy(name, grant_id, (size_t)(colon - grant_id));
    name[colon - grant_id] = '\0';
    dep *d = dep_find(e, name);
    if (!d || !d->cfg) return SL_EUNKNOWN;
    e->stats.settles++;
    if (outcome == ENGINE_THROTTLED) e->stats.throttled++;
    if (outcome == ENGINE_QUOTA) {
        e->stats.quota_events++;
        elog(e, CONFIG_LOG_WARN,
             "deployment %s: the provider reported a hard quota error: it is out until its reset%s", d->name,
             d->cfg->group_ ? " (its group routes to the other members)" : "");
    }
    if (u.tokens >= 0) e->stats.tokens_actual += (unsigned long long)u.tokens;
    /* With Redis, the settle's reply brings the pause and its shift for the
     * whole fleet (one round trip later); without, it applies here. */
    if (pause_ms > 0 && !dep_uses_redis(d)) dep_pause(d, pause_ms, 1);
    if (local) {
        /* A local grant: only its feedback reaches Redis (if reachable). */
        if (outcome == ENGINE_THROTTLED || outcome == ENGINE_QUOTA || pause_ms >= 0 || seen)
            queue_settle(d, "-", NULL, outcome, pause_ms, seen);
        return 0;
    }
    queue_settle(d, num, &u, outcome, pause_ms, seen);
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
    queue_settle(d, "-", NULL, outcome, pause_ms, seen);
    return 0;
}

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
    maybe_finish_stop(e);
}

static void on_query_local(uv_timer_t *t) {
    dep_query *q = t->data;
    q->answer(q, NULL, 0);
    uv_close((uv_handle_t *)&q->timer, on_query_timer_closed);
}

/* Asks script id about deployment, or answers locally. The caller sets
 * (*out)->cb and ->arg right after: answers never run synchronously. */
static int dep_query_start(engine *e, const char *deployment, script_id id, int argc,
                           const char **argv, dep_query_answer answer, dep_query **out) {
    if (e->stopping) return SL_ECLOSING;
    dep *d = dep_find(e, deployment);
    if (!d || !d->cfg) return SL_EUNKNOWN;
    dep_query *q = calloc(1, sizeof(*q));
    if (!q) return SL_ENOMEM;
    q->e = e;
    q->d = d;
    q->answer = answer;
    *out = q;
    if (dep_ready(d) && d->configured &&
        rrouter_script(e->redis, id, d->keys, argc, argv, on_query_reply, q) == 0) {
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
    if (r && r->elements >= 3) {
        int allowed = (int)reply_int(r->element[0]);
        if (allowed) e->stats.retries_allowed++;
        else e->stats.retries_refused++;
        q->cb.retry(q->arg, SL_OK, allowed, reply_int(r->element[1]), reply_int(r->element[2]));
        return;
    }
    if (via_redis) {
        /* Redis failed mid-call: refuse (the safe answer for a retry). */
        e->stats.retries_refused++;
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
    if (allowed) e->stats.retries_allowed++;
    else e->stats.retries_refused++;
    long long balance = 0;
    if (per_ms > 0) balance = (long long)floor(burst - fmax(0.0, d->local_retry_tat - now) * per_ms);
    q->cb.retry(q->arg, SL_OK, allowed, balance > 0 ? balance : 0, allowed ? 0 : wait_ms);
}

int engine_retry(engine *e, const char *deployment, engine_retry_cb cb, void *arg) {
    const char *argv[1] = {"withdraw"};
    dep_query *q;
    int rc = dep_query_start(e, deployment, SCRIPT_RETRY, 1, argv, retry_answer, &q);
    if (rc == 0) {
        q->cb.retry = cb;
        q->arg = arg;
    }
    return rc;
}

#define STATUS_LOCAL_FIELDS 10

static void status_emit(dep_query *q, redisReply *r) {
    engine *e = q->e;
    dep *d = q->d;
    size_t nr = (r && r->type == REDIS_REPLY_ARRAY) ? r->elements / 2 : 0;
    size_t n = nr + STATUS_LOCAL_FIELDS;
    const char **f = calloc(n, sizeof(*f));
    const char **v = calloc(n, sizeof(*v));
    char(*buf)[64] = calloc(n, 64); /* formatted values, one slot per field */
    if (!f || !v || !buf) {
        free(f);
        free(v);
        free(buf);
        q->cb.status(q->arg, SL_ENOMEM, 0, NULL, NULL);
        return;
    }
    size_t k = 0;
    uint64_t now = uv_now(e->loop);
#define FIELD_STR(name, val) (f[k] = (name), v[k] = (val), k++)
#define FIELD_FMT(name, ...) (f[k] = (name), snprintf(buf[k], 64, __VA_ARGS__), v[k] = buf[k], k++)
    FIELD_STR("mode", dep_uses_redis(d) ? "redis"
                      : (e->cfg->agent.fail == CONFIG_FAIL_CLOSED ? "closed" : "local"));
    FIELD_FMT("mode_since_ms_ago", "%lld", wall_ms() - e->mode_since_ms);
    FIELD_STR("redis", dep_ready(d) ? "connected" : "unreachable");
    FIELD_STR("redis_error", d->script_error[0] ? d->script_error : rrouter_last_error(e->redis));
    FIELD_FMT("queued", "%zu", d->npending);
    FIELD_FMT("waiting", "%zu", d->waiting.n);
    FIELD_FMT("agent_live_agents", "%lld", d->live_agents);
    FIELD_FMT("local_share", "%.4f", local_share(d));
    FIELD_FMT("agent_paused_ms", "%llu",
              (unsigned long long)(d->paused_until > now ? d->paused_until - now : 0));
    FIELD_FMT("agent_rate_scale", "%.4f", d->rate_scale);
    for (size_t i = 0; i < nr; i++) {
        redisReply *fr = r->element[2 * i], *vr = r->element[2 * i + 1];
        if (fr->type != REDIS_REPLY_STRING) continue;
        if (vr->type == REDIS_REPLY_INTEGER) FIELD_FMT(fr->str, "%lld", vr->integer);
        else FIELD_STR(fr->str, vr->type == REDIS_REPLY_STRING ? vr->str : "");
    }
#undef FIELD_STR
#undef FIELD_FMT
    q->cb.status(q->arg, SL_OK, k, f, v);
    free(f);
    free(v);
    free(buf);
}

static void status_answer(dep_query *q, redisReply *r, int via_redis) { status_emit(q, r); }

int engine_status(engine *e, const char *deployment, engine_status_cb cb, void *arg) {
    char window[24];
    snprintf(window, sizeof(window), "%lld", e->cfg->agent.heartbeat_ms * 3);
    const char *argv[1] = {window};
    dep_query *q;
    int rc = dep_query_start(e, deployment, SCRIPT_STATUS, 1, argv, status_answer, &q);
    if (rc == 0) {
        q->cb.status = cb;
        q->arg = arg;
    }
    return rc;
}

/* ---- reload, stop, stats ------------------------------------------------------------ */

int engine_reload(engine *e, config *cfg) {
    config *old = e->cfg;
    for (dep *d = e->deps; d; d = d->next) d->cfg = NULL;
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        dep *d = dep_find(e, cfg->deployments[i].name);
        if (!d) d = dep_add(e, &cfg->deployments[i]);
        if (!d) continue;
        dep_set_cfg(d, &cfg->deployments[i]);
        d->configured = 0;
    }
    e->cfg = cfg;
    for (dep *d = e->deps; d; d = d->next) {
        if (d->cfg) {
            dep_configure(d);
            continue;
        }
        engine_call *c;
        while ((c = dep_pop_any(d)) != NULL)
            call_complete(c, SL_EUNKNOWN, NULL, "deployment removed by a configuration reload");
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

static void maybe_finish_stop(engine *e) {
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
    for (gq *q = e->gqs; q; q = q->next) gq_drain(q, SL_ECLOSING, "the agent is shutting down");
    for (dep *d = e->deps; d; d = d->next) {
        engine_call *c;
        while ((c = dep_pop_any(d)) != NULL) call_complete(c, SL_ECLOSING, NULL, "the agent is shutting down");
        while (d->waiting.n) {
            c = list_pop(&d->waiting);
            e->stats.waiting--;
            uv_timer_stop(&c->timer);
            const char *num = grant_number(c->grant.id);
            if (num) queue_settle(d, num, NULL, ENGINE_CANCELLED, -1, NULL);
            call_complete(c, SL_ECLOSING, NULL, "the agent is shutting down");
        }
        if (dep_ready(d) && d->cfg) dep_heartbeat(d, 1);
    }
    maybe_finish_stop(e);
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
    for (gq *q = e->gqs, *nx; q; q = nx) {
        nx = q->next;
        free(q);
    }
    config_free(e->cfg);
    free(e);
}

void engine_get_stats(const engine *e, engine_stats *out) {
    *out = e->stats;
    if (e->redis) {
        rconn_stats rs;
        rrouter_get_stats(e->redis, &rs, &out->cluster_redirects, &out->slot_map_refreshes,
                          &out->redis_nodes);
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
