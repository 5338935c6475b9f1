/* engine: the agent's core, shared by the sluiced daemon and libsluice's
 * embedded mode (the same code, not a second implementation).
 *
 * One engine runs on one libuv loop and holds one Redis connection (rconn).
 * It turns the demand of all local callers into as few script calls as
 * possible: acquires that arrive in the same loop turn for one deployment
 * go to Redis as one `reserve` call (at most one in flight per deployment;
 * what arrives meanwhile rides the next call), settles likewise. Each
 * granted caller is released by a timer at its slot, never by polling. A
 * caller that cancels while waiting gives its reservation back.
 *
 * When Redis is unreachable the engine governs locally at its share of each
 * deployment's rate (rate / live agents, live agents read from the
 * heartbeats while Redis was reachable; agent.fallback_share before that),
 * or refuses when agent.fail is closed. It rejoins when Redis returns, once
 * its local schedule has drained, so the fleet stays within the quota.
 *
 * Threading: every function must be called on the loop's thread. Errors are
 * negative SL_E* codes (sluice.h). Callbacks never run synchronously from
 * the call that registers them; a function that returns an error never
 * calls its callback. Ownership is stated per function. */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stddef.h>
#include <uv.h>

#include "config.h"
#include "usage_rec.h"
#include "vocab.h"

typedef struct engine engine;

#define ENGINE_WAIT_BUCKETS 12
/* The shed reasons (lib/core/vocab.h): ENGINE_SHED_RPM ... ENGINE_SHED_OTHER,
 * indexes of engine_shed_reasons and engine_stats.shed_by_reason. */
enum {
#define ENGINE_SHED_ENUM(name, word, source) ENGINE_SHED_##name,
    SLUICE_SHED_REASON_MAP(ENGINE_SHED_ENUM)
#undef ENGINE_SHED_ENUM
        ENGINE_SHED_REASONS
};

/* The dimensions of a deployment's budget, in the scripts' order
 * (lua/common.lua, SL_DIMS; docs/providers.md says which provider counts
 * which): requests, combined tokens (tpm), input tokens (itpm), output
 * tokens (otpm). */
#define ENGINE_DIMS 4
enum { ENGINE_DIM_REQUESTS = 0, ENGINE_DIM_TOKENS, ENGINE_DIM_INPUT, ENGINE_DIM_OUTPUT };
extern const char *const engine_dim_names[ENGINE_DIMS]; /* "requests", "tokens", "input", "output" */

/* What one response's rate-limit headers said, per dimension: the limit
 * (per minute) and the remaining count; -1 where absent. */
typedef struct engine_seen {
    long long limit[ENGINE_DIMS], remaining[ENGINE_DIMS];
} engine_seen;

/* All fields -1. */
void engine_seen_init(engine_seen *s);

/* Fills s from the headers gathered in fb (lib/http/ratelimit.h), as
 * the settle script wants them: x-ratelimit-*-requests / -tokens and
 * anthropic-ratelimit-{requests,input-tokens,output-tokens}-*. The combined
 * tokens dimension takes only headers about combined tokens, never the
 * "most restrictive" stand-in ratelimit_get() gives for Anthropic. */
struct ratelimit_feedback;
void engine_seen_from_feedback(const struct ratelimit_feedback *fb, engine_seen *s);
typedef struct engine_call engine_call;

/* How a call ended (lib/core/vocab.h): ENGINE_OK, ENGINE_THROTTLED,
 * ENGINE_FAILED, ENGINE_CANCELLED, ENGINE_QUOTA (a hard quota error: the
 * deployment is out until its reset). */
typedef enum engine_outcome {
#define ENGINE_OUTCOME_ENUM(name, word) ENGINE_##name,
    SLUICE_OUTCOME_MAP(ENGINE_OUTCOME_ENUM)
#undef ENGINE_OUTCOME_ENUM
        ENGINE_OUTCOMES
} engine_outcome;
extern const char *const engine_outcome_names[ENGINE_OUTCOMES]; /* "ok", "throttled", ... */

/* The outcome named word (case-sensitive, as the protocol), or -1. */
int engine_outcome_index(const char *word);

#define ENGINE_GRANT_ID_MAX 96

typedef struct engine_grant {
    char id[ENGINE_GRANT_ID_MAX]; /* "<deployment>:<n>", or "<deployment>:L<n>" when local */
    long long waited_ms;          /* from acquire to release */
    /* The release planned, on the engine's loop clock (uv_now): the slot
     * as Redis or the local schedule gave it, re-timed and paused as told,
     * or the time of the grant when it was released at once. A loaded
     * machine releases at it or later, never earlier: a verdict on the
     * governor's decisions replays these, not the times callers woke. */
    unsigned long long planned_ms;
    long long tokens;       /* the reserved estimate */
    int local;              /* granted by local fallback pacing */
    const char *deployment; /* the deployment (a group's member) the slot is on */
    const char *endpoint;   /* its endpoint from the configuration, "" if none */
    int group;              /* 1: asked of a group */
} engine_grant;

typedef struct engine_shed {
    const char *reason;       /* rpm tpm itpm otpm paused daily concurrency too_large lane
                                     ceiling tenant_daily breaker quota tag budget */
    long long retry_after_ms; /* -1: never (too_large); budget: until the period renews */
    /* reason budget: the budget that has no room, its period ("day",
     * "month", "total"), what it has left (1e-6 of its currency) and the
     * currency; NULL and 0 otherwise. */
    const char *budget, *period, *currency;
    long long left_u;
    int budget_waited; /* 1: it would fit once requests in flight settle, and waited its max wait for that */
} engine_shed;

/* Outcome of an acquire: status SL_OK with g, SL_ESHED with shed, or
 * another SL_E* code with msg (SL_EUNAVAIL, SL_ECLOSING, SL_EUNKNOWN when
 * the deployment was removed by a reload). Pointers are valid during the
 * call only. */
typedef void (*engine_acquire_cb)(void *arg, int status, const engine_grant *g, const engine_shed *shed,
                                  const char *msg);

/* Creates an engine on loop for cfg. The engine takes ownership of cfg
 * (freed by engine_free or replaced by engine_reload). agent_id names this
 * agent in the heartbeats ("" or NULL: cfg's agent.id, else hostname:pid).
 * Returns 0 or SL_E*; on error cfg is not taken. */
int engine_new(uv_loop_t *loop, config *cfg, const char *agent_id, engine **out);

/* Where the engine reports what an operator must see (it never prints):
 * Redis lost and back, script errors (a missing ACL permission), the mode
 * of a deployment changing. level is CONFIG_LOG_*; msg is valid during the
 * call. Optional; set before engine_start. */
typedef void (*engine_log_fn)(void *ud, int level, const char *msg);
void engine_set_log(engine *e, engine_log_fn fn, void *ud);

/* Connects to Redis and starts heartbeats. Acquires are accepted before
 * (they wait for the first connection attempt, then fall back). */
void engine_start(engine *e);

/* Asks for a slot. tokens: the estimate (>= 0); max_wait_ms < 0 takes the
 * lane's max_wait_ms, else the deployment's. lane: NULL or "" for the
 * deployment's default lane; a lane the deployment does not have is
 * SL_EINVAL (see config_lane). tenant: NULL or "" for none; a tenant the
 * deployment does not configure falls in its "default" class. cb runs at
 * the slot, or at once when shed. *call (optional) receives a handle for
 * engine_cancel, valid until cb runs. Returns 0, SL_EUNKNOWN (no such
 * deployment), SL_EINVAL, SL_ENOMEM or SL_ECLOSING.
 *
 * On a deployment with lanes or tenants, Redis may defer a request whose
 * slot lies beyond its horizon (docs/architecture.md, "Lanes and
 * tenants"): the engine holds it, per lane and tenant in order, and asks
 * again when Redis said capacity opens. */
int engine_acquire(engine *e, const char *deployment, long long tokens, long long max_wait_ms, const char *lane,
                   const char *tenant, engine_acquire_cb cb, void *arg, engine_call **call);

/* A request to a deployment or a group (ACQUIRE <name> ...). tag: only
 * group members carrying it may serve the request (NULL or "": any; a
 * tenant restricted in the group adds its own). */
typedef struct engine_req {
    const char *name;      /* a deployment or a group */
    long long tokens;      /* the combined estimate: input + max output */
    long long max_wait_ms; /* < 0: the lane's, the group's or the deployment's */
    const char *lane, *tenant, *tag;
    /* split: the estimate is given as input and max output (then tokens is
     * their sum, or 0). A deployment that counts input and output tokens
     * apart (itpm, otpm) needs the split for any tokens > 0: SL_EINVAL
     * otherwise (engine_acquire_req_error() says why). */
    int split;
    long long input, output;
    /* exact: the caller counted its estimate exactly (its own tokenizer):
     * charged as given, never multiplied by the deployment's learned
     * ratio, and it teaches the ratio nothing (ACQUIRE ... EXACT). */
    int exact;
    /* partial: the estimate leaves part of the prompt out or guesses it
     * (images, audio, files: estimate.h): calibrated like any estimate,
     * but it teaches the ratio nothing, which a mix of such requests would
     * otherwise push to their own ratio for every request. */
    int partial;
    /* client: the client key of the HTTP proxy the request came with
     * (agent.http.clients.NAME), NULL or "" for none: a budget scoped to
     * a client draws only from its requests. */
    const char *client;
    /* caller: who asks (a connection to the agent's socket or its HTTP
     * proxy), 0 for nobody said. The calls waiting on one lane and tenant
     * of a deployment, or on a group, go in turn by caller: the caller
     * served fewest times there first, ties and calls with no caller by
     * arrival (lib/core/engine_turn.c). */
    unsigned long long caller;
} engine_req;

/* engine_acquire() for a deployment or a group. A group request goes to
 * its first allowed member whose slot is within the group's spill_ms;
 * when none is, to the allowed member that can serve it soonest within
 * its max wait; a member's shed consumes nothing, so one request never
 * holds reservations on two members. A member whose breaker is open or
 * that is out of quota sheds at once and is passed over. No allowed member
 * at all: shed "tag" (retry_after -1). The grant names the member. */
int engine_acquire_req(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **call);

/* When engine_acquire_req() returned SL_EINVAL because the estimate does
 * not fit the deployment's dimensions (TOKENS without INPUT and OUTPUT on
 * a deployment that counts them apart, or a split that does not add up):
 * the reason, for the caller's error message; NULL when that was not the
 * problem. Static text. */
const char *engine_acquire_req_error(const engine *e, const engine_req *rq);

/* The max wait engine_acquire_req() would give rq: rq->max_wait_ms when
 * >= 0, else the group's, the lane's or the deployment's; -1 when rq names
 * nothing configured. */
long long engine_max_wait(const engine *e, const engine_req *rq);

/* What a request would get now, reserving nothing (ESTIMATE). */
typedef struct engine_estimate {
    int granted;              /* 1: it would get a slot (Redis deferring it included: held until then); 0: shed */
    long long wait_ms;        /* granted: the wait to its slot; shed: the wait to the slot it found beyond its max
                                 wait, -1 when the decision came before a slot was looked for (too_large, breaker...) */
    long long tokens;         /* the estimate that would be reserved */
    long long max_wait_ms;    /* the max wait it was judged against (engine_max_wait) */
    const char *deployment;   /* the deployment, or the group's member that would serve it ("" when none would) */
    const char *reason;       /* shed: its reason (engine_shed_reasons); "" when granted */
    long long retry_after_ms; /* shed: the hint, -1 never; granted: -1 */
    int local;                /* 1: from this agent's local pacing (Redis unreachable, or not yet handed back),
                                 0: from the fleet's schedule in Redis */
    int group;                /* 1: asked of a group */
} engine_estimate;

/* est is valid during the call only. status SL_OK with est, or SL_EUNAVAIL
 * (Redis unreachable and agent.fail closed) / SL_ECLOSING with msg. */
typedef void (*engine_estimate_cb)(void *arg, int status, const engine_estimate *est, const char *msg);

/* The wait rq would get now, reserving nothing: the reserve script's own
 * decision run dry in Redis (lua/reserve.lua, '@dry': it writes nothing),
 * against the deployment's shared schedule; or, where an acquire would be
 * paced locally (Redis unreachable), the local pacing's decision without
 * committing it. A group: each member the group would ask is estimated,
 * and the member chosen by the group script's rule (the first within
 * spill_ms in order, else the soonest within the max wait) is the answer.
 * Requests this agent holds but has not yet sent to Redis are not
 * counted (they are sent within a loop turn). cb never runs from within
 * the call. Returns 0, or SL_EUNKNOWN, SL_EINVAL (as engine_acquire_req),
 * SL_ENOMEM, SL_ECLOSING (then cb never runs). */
int engine_estimate_req(engine *e, const engine_req *rq, engine_estimate_cb cb, void *arg);

/* Patience: one request answered, within its deadline or not. The daemon
 * calls it once per ACQUIRE it answers (agent/commands.c), the HTTP proxy
 * once per proxied request when its final answer is known. deployment may
 * be a group (counted on its first member); lane and tenant as the request
 * named them (NULL or "": the default lane, none; a lane the deployment
 * does not have counts on its default lane; an unknown tenant on
 * "default"). Returns 0, SL_EUNKNOWN (nothing of that name is configured)
 * or SL_ENOMEM. */
int engine_note_patience(engine *e, const char *deployment, const char *lane, const char *tenant, int within_deadline);

/* Abandonment: one request whose caller left before it was answered
 * (a socket client gone while its ACQUIRE waited, an HTTP client gone
 * before its response), waited_ms after it arrived. Counted in the class
 * as engine_note_patience counts. Returns as engine_note_patience. */
int engine_note_abandoned(engine *e, const char *deployment, const char *lane, const char *tenant, long long waited_ms);

/* Per deployment: settles by outcome (engine_outcome order) and RETRY
 * answers, summed over this agent's calls. */
typedef struct engine_dep_counts {
    unsigned long long outcomes[ENGINE_OUTCOMES];
    unsigned long long retries_allowed, retries_refused;
} engine_dep_counts;
typedef void (*engine_dep_counts_fn)(void *ud, const char *deployment, const engine_dep_counts *c);
void engine_foreach_dep_counts(const engine *e, engine_dep_counts_fn fn, void *ud);

/* Observe mode (agent.http.mode: observe): what governing would have done
 * with one request that went upstream at once: its acquire granted a
 * slot waited_ms ahead (0: none), or shed it (shed). Counted in the class
 * as engine_note_patience counts; shown in STATUS (agent_would_*).
 * Returns as engine_note_patience. */
int engine_note_observed(engine *e, const char *deployment, const char *lane, const char *tenant, long long waited_ms,
                         int shed);

/* Per group figures, summed over this agent's requests. */
typedef struct engine_group_stats {
    unsigned long long acquires, grants, spilled, sheds;
    unsigned long long member_grants[16]; /* by member index */
} engine_group_stats;
typedef void (*engine_group_fn)(void *ud, const char *group, const engine_group_stats *st);
void engine_foreach_group(const engine *e, engine_group_fn fn, void *ud);

/* Per lane and tenant figures of one deployment, summed over this agent's
 * requests of that class. lane is "" on a deployment without lanes;
 * tenant is a configured tenant or "default". */
typedef struct engine_class_stats {
    unsigned long long acquires, grants, sheds, deferrals, tokens;
    unsigned long long wait_hist[ENGINE_WAIT_BUCKETS + 1];
    unsigned long long wait_sum_ms;
    unsigned long long queued; /* gauge: held (not yet granted) */
    /* Patience (engine_note_patience): requests answered, and of those the
     * ones answered within their deadline. */
    unsigned long long answered, within;
    /* Requests whose caller left before their answer (engine_note_abandoned),
     * and how long after arriving, as a histogram of engine_wait_bounds_ms. */
    unsigned long long abandoned;
    unsigned long long abandon_hist[ENGINE_WAIT_BUCKETS + 1];
    unsigned long long abandon_sum_ms;
    /* Observe mode of the HTTP proxy (engine_note_observed): requests
     * forwarded at once whose acquire said they would have waited (and
     * the sum of those waits), or would have been shed. */
    unsigned long long would_wait, would_wait_ms, would_shed;
} engine_class_stats;

/* Calls fn for every (deployment, lane, tenant) class that has seen a
 * request, in no particular order. Strings are valid during the call. */
typedef void (*engine_class_fn)(void *ud, const char *deployment, const char *lane, const char *tenant,
                                const engine_class_stats *st);
void engine_foreach_class(const engine *e, engine_class_fn fn, void *ud);

/* Cancels a call whose callback has not run: the callback will not run,
 * and a reservation already made is given back (settled as cancelled). */
void engine_cancel(engine_call *call);

/* Closes a grant. actual_tokens < 0: unknown (the estimate stands).
 * pause_ms >= 0: the provider asked the deployment to pause that long
 * (Retry-After, or remaining 0 with a reset), applied fleet-wide once.
 * Fire and forget: coalesced with other settles. Returns 0, SL_EINVAL (a
 * malformed grant id) or SL_EUNKNOWN (its deployment is not configured). */
int engine_settle(engine *e, const char *grant_id, long long actual_tokens, engine_outcome outcome, long long pause_ms);

/* engine_settle() with the usage per dimension and what the response's
 * rate-limit headers said (seen may be NULL). Each dimension is corrected
 * as its provider counts (docs/providers.md); the headers adopt a lower
 * limit and show others' use of the key, fleet-wide. */
int engine_settle_usage(engine *e, const char *grant_id, const usage_rec *usage, engine_outcome outcome,
                        long long pause_ms, const engine_seen *seen);

/* Provider feedback without a grant (e.g. a 429 on an ungoverned call). */
int engine_feedback(engine *e, const char *deployment, engine_outcome outcome, long long pause_ms);
int engine_feedback_seen(engine *e, const char *deployment, engine_outcome outcome, long long pause_ms,
                         const engine_seen *seen);

/* The rates of one dimension of a deployment, as the last settle reply
 * from Redis gave them (per minute): the configured limit, the limit in
 * force (lower when the provider's headers reported less), the effective
 * rate the fleet runs at (less others' use of the key, and AIMD) and
 * others' use as estimated from the headers. known is 0 before any settle
 * reply (the configured limit is then in every field). */
typedef struct engine_dim_rates {
    double configured, limit, effective, outside;
    int known;
    double held; /* per minute: the share of silent agents kept out of the shared schedule */
    /* The ratio the dimension's estimated input part is charged at (the
     * provider's prompt count / sluice's estimate, learned fleet-wide;
     * docs/redis-keys.md "Calibrated estimates"), as the last settle reply
     * gave it: 1 for requests and output tokens, before any news and on a
     * deployment whose estimates are exact. */
    double estimate_ratio;
} engine_dim_rates;
typedef void (*engine_dim_fn)(void *ud, const char *deployment, const char *dim, const engine_dim_rates *r);
/* Calls fn for every dimension every configured deployment has. */
void engine_foreach_dim(const engine *e, engine_dim_fn fn, void *ud);

/* How many items this agent's next reserve call of a deployment (kind
 * "deployment"), of a group decided by one script (kind "group") or its
 * next settle call of a deployment (kind "settle") may carry under
 * redis.max_script_ms, and the Redis time per call that sizes it, learned
 * from the calls' own times (lib/core/costmodel.h). */
typedef struct engine_batch {
    size_t cap;               /* items the next call may carry */
    double item_us, fixed_us; /* learned: per item, per call (a low estimate); 0 before any call */
    size_t last_items;        /* the last call's items */
    double last_us;           /* and its time in Redis */
    unsigned long long calls; /* calls observed */
} engine_batch;
typedef void (*engine_batch_fn)(void *ud, const char *kind, const char *name, const engine_batch *b);
/* Calls fn for every configured deployment (twice: "deployment" and
 * "settle") and every group that has had a group call. Strings are valid
 * during the call. */
void engine_foreach_batch(const engine *e, engine_batch_fn fn, void *ud);

/* Budgets in money (config budgets:), as the last look at Redis found
 * them (refreshed every few heartbeats): per period (day, month, total)
 * the limit (0 = none), what was spent and what is reserved, in 1e-6 of
 * the currency. known is 0 before the first look. */
enum { ENGINE_PERIOD_DAY = 0, ENGINE_PERIOD_MONTH, ENGINE_PERIOD_TOTAL, ENGINE_PERIODS };
extern const char *const engine_period_names[ENGINE_PERIODS]; /* "day", "month", "total" */
typedef struct engine_budget_view {
    const char *name, *currency;
    int known;
    long long limit[ENGINE_PERIODS], spent[ENGINE_PERIODS], reserved[ENGINE_PERIODS];
    long long renew_ms[2];   /* day, month: until the next one starts (as of the look) */
    const char *day, *month; /* the current ones, "2026-12-04", "2026-12"; "" before a look */
    double warn_at;
    unsigned long long granted, sheds, expired; /* fleet-wide, from Redis */
} engine_budget_view;
typedef void (*engine_budget_fn)(void *ud, const engine_budget_view *v);
void engine_foreach_budget(const engine *e, engine_budget_fn fn, void *ud);

/* What this agent's settled requests cost, by deployment (the member a
 * group request went to), tenant ("" none), client ("" none) and
 * currency: 1e-6 of the currency, counted at each settle. */
typedef void (*engine_spend_fn)(void *ud, const char *deployment, const char *tenant, const char *client,
                                const char *currency, long long spent_u, unsigned long long requests);
void engine_foreach_spend(const engine *e, engine_spend_fn fn, void *ud);

/* "May this deployment's fleet retry now?" cb gets status SL_OK with
 * allowed 1/0, the balance left and, when refused, a retry-after hint.
 * Returns 0 or SL_EUNKNOWN / SL_ECLOSING (then cb never runs). */
typedef void (*engine_retry_cb)(void *arg, int status, int allowed, long long balance, long long retry_after_ms);
int engine_retry(engine *e, const char *deployment, engine_retry_cb cb, void *arg);

/* The live budget of one deployment as field/value string pairs: Redis'
 * view (the status script) merged with this agent's (mode, queues). fields
 * and values are valid during the callback only. */
typedef void (*engine_status_cb)(void *arg, int status, size_t n, const char *const *fields, const char *const *values);
int engine_status(engine *e, const char *deployment, engine_status_cb cb, void *arg);

/* Swaps in a new configuration (taking ownership; the old one is freed).
 * Deployments keep their state by name; new limits are written to Redis;
 * callers queued for a removed deployment get SL_EUNKNOWN. Returns 0. */
int engine_reload(engine *e, config *cfg);

/* The current configuration (borrowed). */
const config *engine_config(const engine *e);

/* Stops: refuses new acquires, answers every queued and waiting caller
 * with SL_ECLOSING (waiting reservations are given back), deregisters the
 * heartbeats, closes Redis, then calls done (optional). */
void engine_stop(engine *e, void (*done)(void *arg), void *arg);

/* Frees a stopped engine (after done ran). NULL is a no-op. */
void engine_free(engine *e);

/* Counters for INFO and metrics. The hot path only increments these. */
extern const long long engine_wait_bounds_ms[ENGINE_WAIT_BUCKETS]; /* upper bounds; +Inf last */

typedef struct engine_stats {
    unsigned long long acquires, grants, grants_local, sheds, errors;
    unsigned long long shed_by_reason[ENGINE_SHED_REASONS]; /* index: engine_shed_reason_index() */
    unsigned long long deferrals;                           /* items Redis deferred (lanes, tenants) */
    unsigned long long quota_events;                        /* settles reporting a hard quota error */
    unsigned long long breaker_sheds;                       /* requests shed by an open circuit breaker */
    unsigned long long wait_hist[ENGINE_WAIT_BUCKETS + 1];
    unsigned long long wait_sum_ms;
    unsigned long long settles, throttled, cancels;
    unsigned long long settle_pauses;              /* settles whose headers asked for a pause (socket and HTTP proxy) */
    unsigned long long estimates, estimates_local; /* ESTIMATEs answered, and of those from local pacing */
    unsigned long long answered, within;           /* patience, summed over the classes */
    unsigned long long retries_allowed, retries_refused;
    unsigned long long tokens_estimated, tokens_actual;
    unsigned long long limit_changes; /* limits adopted from (or dropped after) the headers, as seen here */
    unsigned long long budget_reserves, budget_errors; /* reservations in money made, and failed (Redis) */
    unsigned long long budget_unchecked; /* requests let through unbudgeted: Redis unreachable, agent.fail open */
    unsigned long long budget_warnings;  /* periods that crossed a budget's warn_at (this agent saw it) */
    unsigned long long redis_calls, redis_errors, redis_timeouts, noscript_reloads;
    unsigned long long reserve_calls, reserve_items, settle_calls, settle_items;
    unsigned long long
        script_over_bound; /* reserve and settle calls whose own time in Redis reached redis.max_script_ms */
    unsigned long long redirect_holds;    /* cluster redirects/TRYAGAIN that held a batch */
    unsigned long long late_reasks;       /* callers released long after their slot that asked again */
    unsigned long long lapsed_held;       /* callers whose grant of Redis' lay past this agent's hold: asked again */
    unsigned long long retimed;           /* held callers re-timed by a stretch of the fleet's schedule */
    unsigned long long cluster_redirects; /* MOVED/ASK followed by the router */
    unsigned long long slot_map_refreshes;
    size_t redis_nodes;
    unsigned long long queued, waiting; /* gauges: pending acquires, timers armed */
    unsigned long long callers;         /* gauge: callers known to take turns (engine_req.caller) */
    unsigned long long turns_passed;    /* calls sent ahead of an older one of their queue, taking their turn */
    int redis_up;                       /* gauge */
    long long mode_since_ms;            /* wall-clock ms when the mode last changed */
    const char *mode;                   /* "redis" or "local" */
    const char *redis_error;            /* last connection error, "" if none */
} engine_stats;

void engine_get_stats(const engine *e, engine_stats *out);

/* Reasons in engine_stats.shed_by_reason order. */
extern const char *const engine_shed_reasons[ENGINE_SHED_REASONS];
int engine_shed_reason_index(const char *reason);

/* The agent id used in heartbeats. */
const char *engine_agent_id(const engine *e);

#endif
