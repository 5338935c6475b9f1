/* wire: the one boundary between the engine and the Lua scripts.
 *
 * Every script call's arguments are built here, by a typed encoder per
 * script form (the markers, the agent's promise, dry and timed runs, group
 * mode), and every reply is read here once into typed structs, as hiredis'
 * read.c decodes a reply once: the engine_*.c files name fields, never
 * argv[] positions or element[] indexes. The layouts are the scripts'
 * (lua/reserve.lua, lua/settle.lua, lua/heartbeat.lua; docs/redis-keys.md),
 * the words and numbers lib/core/vocab.h's tables. test_wire checks each
 * encoder's arguments and each decoder against replies written by hand;
 * the script tests run the same layouts against the scripts. */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "engine.h"
#include "vocab.h"

/* The kinds of a verdict (SLUICE_VERDICT_MAP): WIRE_SHED, WIRE_GRANT,
 * WIRE_DEFER. */
enum {
#define WIRE_VERDICT_ENUM(name, number) WIRE_##name = number,
    SLUICE_VERDICT_MAP(WIRE_VERDICT_ENUM)
#undef WIRE_VERDICT_ENUM
};

/* The argument markers (SLUICE_ARG_MARKER_MAP): WIRE_ARG_TIMED, ... */
#define WIRE_MARKER_STR(name, text) static const char WIRE_ARG_##name[] = text;
SLUICE_ARG_MARKER_MAP(WIRE_MARKER_STR)
#undef WIRE_MARKER_STR

/* ---- arguments --------------------------------------------------------- */

/* A script call's arguments, copied as they are added (the caller's
 * buffers may go right after). After wire_args_done, argv holds argc
 * pointers for rrouter_script; wire_args_free releases it all. An
 * allocation that fails marks the set (done then returns -1): callers add
 * without checking each step. */
typedef struct wire_args {
    const char **argv;
    int argc;
    size_t *off; /* where each argument starts in buf */
    size_t n, cap;
    char *buf;
    size_t len, bufcap;
    size_t count_at; /* the item count's argument, filled by done */
    size_t items;    /* items added so far */
    int oom;
} wire_args;

void wire_args_init(wire_args *a);
void wire_args_free(wire_args *a);
void wire_add(wire_args *a, const char *s);
void wire_add_ll(wire_args *a, long long v);
/* A place for an argument known only later (the agent's promise, whose
 * making has side effects: made only when the call goes): its index,
 * for wire_fill. Unfilled, it is "". */
size_t wire_slot(wire_args *a);
void wire_fill(wire_args *a, size_t slot, const char *s);
/* Adds the run's tail markers (WIRE_DRY: "@dry"; WIRE_TIMED: "@timed",
 * last), writes the item count where the form's head left a place for it,
 * and builds argv. Returns 0, or -1 when out of memory. */
enum { WIRE_DRY = 1, WIRE_TIMED = 2 };
int wire_args_done(wire_args *a, int flags);

/* ---- the reserve script --------------------------------------------------- */

/* An item's estimate: tokens, or input + output when split; exact when
 * the caller counted it (never calibrated: docs/redis-keys.md,
 * "Calibrated estimates"). */
typedef struct wire_estimate {
    long long tokens, input, output;
    int split, exact;
    int partial; /* teaches the calibration nothing (engine_req.partial) */
} wire_estimate;

/* The estimate as the scripts take it: "c" or "i+o", with a leading "="
 * when exact, else a leading "~" when partial. */
void wire_estimate_format(const wire_estimate *x, char *buf, size_t n);

/* Plain form: [agent] n, then per item (tokens, max_wait_ms) or, with
 * lanes or tenants (quads), (tokens, max_wait_ms, lane, tenant). agent:
 * dep_agent_arg's "@<id>/<promise>", or NULL (a dry run is no proof of
 * life). waited_ms >= 0 is how long the request has waited so far, sent
 * as "<max_wait_ms>:<waited_ms>" (lua/reserve.lua: on a deployment that
 * grants just in time, the longer waited asks with more of the horizon);
 * -1 sends the max wait alone. */
void wire_reserve_begin(wire_args *a, const char *agent);
void wire_reserve_item(wire_args *a, const wire_estimate *x, long long max_wait_ms, long long waited_ms,
                       const char *lane, const char *tenant);

/* Group form: [agent] group, m, spill_ms, policy, n, then per item
 * (tokens, max_wait_ms, lane, tenant, order): order the members to try,
 * 1-based, comma-separated; max_wait_ms and waited_ms as above. */
void wire_group_begin(wire_args *a, const char *agent, size_t members, long long spill_ms, const char *policy);
void wire_group_item(wire_args *a, const wire_estimate *x, long long max_wait_ms, long long waited_ms, const char *lane,
                     const char *tenant, const char *order);

/* ---- the settle script (feedback form) ----------------------------------- */

/* [agent] feedback, n, then per item: the grant, the usage ("-1", "n" or
 * "i+o+r"), the outcome, the pause ms (-1: none) and what the headers said
 * ("-" or "r=L/R,t=L/R,..." by SLUICE_DIM_MAP's letters). u: NULL when
 * unknown; seen: NULL when nothing. */
void wire_settle_begin(wire_args *a, const char *agent);
void wire_settle_item(wire_args *a, const char *grant, const usage_rec *u, engine_outcome o, long long pause_ms,
                      const engine_seen *seen);

/* ---- configure, heartbeat, retry, status ---------------------------------- */

/* configure: field value pairs (docs/redis-keys.md, the limits hash). */
void wire_configure_field(wire_args *a, const char *field, const char *value);

/* heartbeat: [agent] agent_id, window_ms, and "leave" when leaving. */
void wire_heartbeat(wire_args *a, const char *agent, const char *agent_id, long long window_ms, int leave);

/* The hand-over heartbeat after an outage ("busy"): where the fleet's
 * schedule was last seen to end, the units granted locally per
 * dimension, where the local schedule ends, and the share it paced at. */
typedef struct wire_busy {
    long long fleet_requests_ms, fleet_tokens_ms;
    double sent[ENGINE_DIMS];
    long long local_requests_ms, local_tokens_ms;
    double share;
} wire_busy;
void wire_heartbeat_busy(wire_args *a, const char *agent, const char *agent_id, long long window_ms,
                         const wire_busy *b);

/* retry: "withdraw" (one retry from the fleet's budget). */
void wire_retry_withdraw(wire_args *a);
/* status: the window in ms within which an agent counts as live. */
void wire_status(wire_args *a, long long window_ms);

/* A retry reply {allowed, balance, retry_after_ms}: 0, or -1. */
int wire_read_retry(const redisReply *r, long long *allowed, long long *balance, long long *retry_after_ms);

/* The next field of a status reply (field, value pairs; an integer value
 * as text in num), after *pos (start at 0): 1 with them filled, 0 at the
 * end. */
int wire_status_field_next(const redisReply *r, size_t *pos, const char **field, const char **value, char num[24]);
/* How many fields a status reply holds. */
size_t wire_status_fields(const redisReply *r);

/* ---- the budget script (lua/budget.lua) ---------------------------------- */

/* One budget's fields as every form sends them: name, currency, the
 * daily, monthly and total limits (1e-6 of the currency; 0: none), the
 * zone's offsets (tz.h's spec) and warn_at. */
typedef struct wire_budget {
    const char *name, *currency;
    long long daily_u, monthly_u, total_u;
    const char *zone;
    double warn_at;
} wire_budget;

/* op ("reserve" or "status"), then the nb budgets: begin, then nb times
 * wire_budget_one. Reserve then takes its items: n, then per item (rid,
 * amount, lease_ms, k, k x the 1-based index of a budget sent). */
void wire_budget_begin(wire_args *a, const char *op, size_t nb);
void wire_budget_one(wire_args *a, const wire_budget *b);
void wire_budget_items(wire_args *a);
void wire_budget_reserve_item(wire_args *a, const char *rid, long long amount_u, long long lease_ms, size_t k,
                              const unsigned char *which);
/* settle, n, then per item (rid, actual, skip: the budgets it does not
 * charge, comma-separated names). */
void wire_budget_settle_begin(wire_args *a);
void wire_budget_settle_item(wire_args *a, const char *rid, long long actual_u, const char *skip);

/* A reservation's verdict: {1, left, warn} granted (warn: "<budget>
 * <period>[; ...]" first past their warn_at, or NULL); {0 | 2, name,
 * period, left, renew_ms, limit} shed, or not now (2: room once requests
 * in flight settle). */
typedef struct wire_budget_verdict {
    int kind;
    long long left_u;
    const char *warn;
    const char *name, *period;
    long long renew_ms, limit_u;
} wire_budget_verdict;

/* Item i of a reserve reply of n items; 0, or -1 when malformed. */
int wire_read_budget_verdict(const redisReply *r, size_t n, size_t i, wire_budget_verdict *v);

/* The next field of budget i's hash in a status reply (field, value as
 * text); 1 with them filled, 0 at the end. */
int wire_budget_field_next(const redisReply *r, size_t i, size_t *pos, const char **field, const char **value);
/* Whether a status reply lists budget i (a hash, maybe empty). */
int wire_budget_listed(const redisReply *r, size_t i);

/* ---- replies -------------------------------------------------------------- */

/* A pause shift as the scripts report it (lua/common.lua sl_shift_field):
 * the total shift in ms, and the latest re-timing (log of the factor, and
 * Redis' ms when it was made; at 0 when none). */
typedef struct wire_shift {
    double total_ms, retime_log, retime_at_ms;
} wire_shift;

/* A verdict (lua/common.lua sl_verdict): the one shape of plain and group
 * calls. grant: id, wait_ms, tokens; defer: reason, after_ms (ask again
 * then); shed: reason (NULL when not a word), after_ms (retry after; -1:
 * never). member: the group member that decided it, 0-based (-1 in a
 * plain call or on a group shed); dry_wait_ms: a dry run's wait to the
 * slot (-1 otherwise). */
typedef struct wire_verdict {
    int kind;
    long long id, wait_ms, tokens;
    const char *reason;
    long long after_ms;
    int member;
    long long dry_wait_ms;
} wire_verdict;

/* The head of a reserve reply (lua/reserve.lua reserve_head), and where
 * its items are. script_us: the script's own time (WIRE_TIMED; -1 when
 * absent or 0). */
typedef struct wire_reserve_reply {
    long long now_us, paused_ms, requests_backlog_ms, tokens_backlog_ms;
    wire_shift shift;
    const redisReply *const *items;
    size_t n;
    long long script_us;
} wire_reserve_reply;

/* A group reply: {now_us, items..., [script_us]}. */
typedef struct wire_group_reply {
    long long now_us;
    const redisReply *const *items;
    size_t n;
    long long script_us;
} wire_group_reply;

/* A settle reply: {now_us, paused_ms, rate_scale, shift, items..., rates,
 * [script_us]}. rate_scale < 0 when not given. */
typedef struct wire_settle_reply {
    long long now_us, paused_ms;
    double rate_scale;
    int has_shift;
    wire_shift shift;
    const redisReply *rates; /* NULL when absent: wire_rate_next reads it */
    long long script_us;
} wire_settle_reply;

/* A heartbeat reply: {live, pause_shift, now_us, requests_backlog_ms,
 * tokens_backlog_ms} (the backlogs -1 from older scripts). */
typedef struct wire_heartbeat_reply {
    long long live, now_us, requests_backlog_ms, tokens_backlog_ms;
    int has_shift;
    wire_shift shift;
} wire_heartbeat_reply;

/* One row of a settle reply's rates: a dimension (SLUICE_DIM_MAP's name)
 * with the limit in force, the effective rate, others' use and what is
 * held back for silent agents; or "estimate" with the ratio in force as
 * limit. */
typedef struct wire_rate {
    const char *name;
    double limit, effective, outside, held;
} wire_rate;

/* Each reads r, the reply of a call with n items (flags as sent), into
 * out. Returns 0, or -1 when r is not that reply (an error, a timeout, a
 * shape the scripts do not give). */
int wire_read_reserve(const redisReply *r, size_t n, wire_reserve_reply *out);
int wire_read_group(const redisReply *r, size_t n, wire_group_reply *out);
int wire_read_settle(const redisReply *r, size_t n, wire_settle_reply *out);
int wire_read_heartbeat(const redisReply *r, wire_heartbeat_reply *out);
/* Deployment i's heartbeat in the reply of one heartbeat call for n
 * deployments (one reply each, in the order of the keys). */
int wire_read_heartbeat_of(const redisReply *r, size_t n, size_t i, wire_heartbeat_reply *out);

/* Item i's verdict; flags WIRE_DRY as sent, group when the call was the
 * group form. Returns 0, or -1 when malformed (decided locally). */
int wire_read_verdict(const redisReply *const *items, size_t i, int flags, int group, wire_verdict *v);

/* The next rate row after *pos (start at 0); 1 with out filled, 0 at the
 * end. */
int wire_rate_next(const wire_settle_reply *s, size_t *pos, wire_rate *out);

/* An integer field as the scripts send numbers (an integer, or a numeric
 * string); 0 for anything else. */
long long wire_int(const redisReply *r);

#endif
