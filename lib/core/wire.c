/* wire: the scripts' arguments built, their replies read (wire.h). */
#define _GNU_SOURCE
#include "wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arguments --------------------------------------------------------- */

#define WIRE_NO_COUNT SIZE_MAX

void wire_args_init(wire_args *a) {
    memset(a, 0, sizeof(*a));
    a->count_at = WIRE_NO_COUNT;
}

void wire_args_free(wire_args *a) {
    free(a->argv);
    free(a->off);
    free(a->buf);
    wire_args_init(a);
}

/* Room for one more argument of len bytes (and its NUL). */
static int wire_room(wire_args *a, size_t len) {
    if (a->oom) return -1;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        size_t *off = realloc(a->off, cap * sizeof(*off));
        if (!off) return a->oom = 1, -1;
        a->off = off;
        a->cap = cap;
    }
    if (a->len + len + 1 > a->bufcap) {
        size_t cap = a->bufcap ? a->bufcap : 512;
        while (cap < a->len + len + 1) cap *= 2;
        char *buf = realloc(a->buf, cap);
        if (!buf) return a->oom = 1, -1;
        a->buf = buf;
        a->bufcap = cap;
    }
    return 0;
}

static void wire_addn(wire_args *a, const char *s, size_t len) {
    if (wire_room(a, len) != 0) return;
    a->off[a->n++] = a->len;
    memcpy(a->buf + a->len, s, len);
    a->len += len;
    a->buf[a->len++] = '\0';
}

void wire_add(wire_args *a, const char *s) { wire_addn(a, s ? s : "", s ? strlen(s) : 0); }

void wire_add_ll(wire_args *a, long long v) {
    char num[24];
    int w = snprintf(num, sizeof(num), "%lld", v);
    wire_addn(a, num, (size_t)w);
}

size_t wire_slot(wire_args *a) {
    size_t at = a->n;
    wire_addn(a, "", 0);
    return at;
}

void wire_fill(wire_args *a, size_t slot, const char *s) {
    size_t len = s ? strlen(s) : 0;
    if (slot >= a->n || wire_room(a, len) != 0) return;
    a->off[slot] = a->len;
    memcpy(a->buf + a->len, s ? s : "", len);
    a->len += len;
    a->buf[a->len++] = '\0';
}

/* A place for the item count, written by wire_args_done (the count is
 * known only once every item is in). */
static void wire_add_count(wire_args *a) { a->count_at = wire_slot(a); }

int wire_args_done(wire_args *a, int flags) {
    if (flags & WIRE_DRY) wire_add(a, WIRE_ARG_DRY);
    if (flags & WIRE_TIMED) wire_add(a, WIRE_ARG_TIMED);
    if (a->count_at != WIRE_NO_COUNT) {
        char count[24];
        snprintf(count, sizeof(count), "%zu", a->items);
        wire_fill(a, a->count_at, count);
    }
    if (a->oom) return -1;
    free(a->argv);
    a->argv = malloc((a->n ? a->n : 1) * sizeof(*a->argv));
    if (!a->argv) return a->oom = 1, -1;
    for (size_t i = 0; i < a->n; i++) a->argv[i] = a->buf + a->off[i];
    a->argc = (int)a->n;
    return 0;
}

/* ---- encoders ------------------------------------------------------------ */

void wire_estimate_format(const wire_estimate *x, char *buf, size_t n) {
    const char *ex = x->exact ? WIRE_ARG_EXACT : x->partial ? WIRE_ARG_PARTIAL : "";
    if (x->split) snprintf(buf, n, "%s%lld+%lld", ex, x->input, x->output);
    else snprintf(buf, n, "%s%lld", ex, x->tokens);
}

static void wire_add_estimate(wire_args *a, const wire_estimate *x) {
    char tok[64];
    wire_estimate_format(x, tok, sizeof(tok));
    wire_add(a, tok);
}

void wire_reserve_begin(wire_args *a, const char *agent) {
    if (agent) wire_add(a, agent);
    wire_add_count(a);
}

/* An item's max wait, and how long it has waited when known. */
static void wire_add_wait(wire_args *a, long long max_wait_ms, long long waited_ms) {
    if (waited_ms < 0) {
        wire_add_ll(a, max_wait_ms);
        return;
    }
    char buf[48];
    snprintf(buf, sizeof(buf), "%lld:%lld", max_wait_ms, waited_ms);
    wire_add(a, buf);
}

void wire_reserve_item(wire_args *a, const wire_estimate *x, long long max_wait_ms, long long waited_ms,
                       const char *lane, const char *tenant) {
    wire_add_estimate(a, x);
    wire_add_wait(a, max_wait_ms, waited_ms);
    if (lane) {
        wire_add(a, lane);
        wire_add(a, tenant);
    }
    a->items++;
}

void wire_group_begin(wire_args *a, const char *agent, size_t members, long long spill_ms, const char *policy) {
    if (agent) wire_add(a, agent);
    wire_add(a, WIRE_ARG_GROUP);
    wire_add_ll(a, (long long)members);
    wire_add_ll(a, spill_ms);
    wire_add(a, policy);
    wire_add_count(a);
}

void wire_group_item(wire_args *a, const wire_estimate *x, long long max_wait_ms, long long waited_ms, const char *lane,
                     const char *tenant, const char *order) {
    wire_add_estimate(a, x);
    wire_add_wait(a, max_wait_ms, waited_ms);
    wire_add(a, lane);
    wire_add(a, tenant);
    wire_add(a, order);
    a->items++;
}

void wire_settle_begin(wire_args *a, const char *agent) {
    if (agent) wire_add(a, agent);
    wire_add(a, WIRE_ARG_FEEDBACK);
    wire_add_count(a);
}

void wire_settle_item(wire_args *a, const char *grant, const usage_rec *u, engine_outcome o, long long pause_ms,
                      const engine_seen *seen) {
    static const char letters[ENGINE_DIMS] = {
#define WIRE_DIM_LETTER(name, word, letter, field) letter,
        SLUICE_DIM_MAP(WIRE_DIM_LETTER)
#undef WIRE_DIM_LETTER
    };
    char buf[128];
    wire_add(a, grant);
    if (u && u->input >= 0 && u->output >= 0)
        snprintf(buf, sizeof(buf), "%lld+%lld+%lld", u->input, u->output, u->cache_read > 0 ? u->cache_read : 0);
    else snprintf(buf, sizeof(buf), "%lld", !u || u->tokens < 0 ? -1 : u->tokens);
    wire_add(a, buf);
    wire_add(a, engine_outcome_names[o]);
    wire_add_ll(a, pause_ms < 0 ? -1 : pause_ms);
    size_t used = 0;
    for (int j = 0; seen && j < ENGINE_DIMS && used < 80; j++) {
        if (seen->limit[j] < 0 && seen->remaining[j] < 0) continue;
        char lim[24] = "", rem[24] = "";
        if (seen->limit[j] >= 0) snprintf(lim, sizeof(lim), "%lld", seen->limit[j]);
        if (seen->remaining[j] >= 0) snprintf(rem, sizeof(rem), "%lld", seen->remaining[j]);
        int w = snprintf(buf + used, 96 - used, "%s%c=%.15s/%.15s", used ? "," : "", letters[j], lim, rem);
        if (w < 0 || (size_t)w >= 96 - used) break;
        used += (size_t)w;
    }
    if (!used) snprintf(buf, sizeof(buf), "-");
    else buf[used] = '\0';
    wire_add(a, buf);
    a->items++;
}

/* ---- configure, heartbeat, retry, status --------------------------------- */

void wire_configure_field(wire_args *a, const char *field, const char *value) {
    wire_add(a, field);
    wire_add(a, value);
}

void wire_heartbeat(wire_args *a, const char *agent, const char *agent_id, long long window_ms, int leave) {
    if (agent) wire_add(a, agent);
    wire_add(a, agent_id);
    wire_add_ll(a, window_ms);
    if (leave) wire_add(a, "leave");
}

void wire_heartbeat_busy(wire_args *a, const char *agent, const char *agent_id, long long window_ms,
                         const wire_busy *b) {
    char num[32];
    wire_heartbeat(a, agent, agent_id, window_ms, 0);
    wire_add(a, "busy");
    wire_add_ll(a, b->fleet_requests_ms);
    wire_add_ll(a, b->fleet_tokens_ms);
    for (int k = 0; k < ENGINE_DIMS; k++) {
        snprintf(num, sizeof(num), "%.0f", b->sent[k]);
        wire_add(a, num);
    }
    wire_add_ll(a, b->local_requests_ms);
    wire_add_ll(a, b->local_tokens_ms);
    snprintf(num, sizeof(num), "%.6f", b->share);
    wire_add(a, num);
}

void wire_retry_withdraw(wire_args *a) { wire_add(a, "withdraw"); }

void wire_status(wire_args *a, long long window_ms) { wire_add_ll(a, window_ms); }

/* ---- the budget script ---------------------------------------------------- */

void wire_budget_begin(wire_args *a, const char *op, size_t nb) {
    wire_add(a, op);
    wire_add_ll(a, (long long)nb);
}

void wire_budget_one(wire_args *a, const wire_budget *b) {
    char warn[32];
    snprintf(warn, sizeof(warn), "%.6g", b->warn_at);
    wire_add(a, b->name);
    wire_add(a, b->currency);
    wire_add_ll(a, b->daily_u);
    wire_add_ll(a, b->monthly_u);
    wire_add_ll(a, b->total_u);
    wire_add(a, b->zone);
    wire_add(a, warn);
}

void wire_budget_items(wire_args *a) { wire_add_count(a); }

void wire_budget_reserve_item(wire_args *a, const char *rid, long long amount_u, long long lease_ms, size_t k,
                              const unsigned char *which) {
    wire_add(a, rid);
    wire_add_ll(a, amount_u);
    wire_add_ll(a, lease_ms);
    wire_add_ll(a, (long long)k);
    for (size_t j = 0; j < k; j++) wire_add_ll(a, which[j]);
    a->items++;
}

void wire_budget_settle_begin(wire_args *a) {
    wire_add(a, "settle");
    wire_add_count(a);
}

void wire_budget_settle_item(wire_args *a, const char *rid, long long actual_u, const char *skip) {
    wire_add(a, rid);
    wire_add_ll(a, actual_u > 0 ? actual_u : 0);
    wire_add(a, skip);
    a->items++;
}

/* ---- replies ------------------------------------------------------------- */

long long wire_int(const redisReply *r) {
    if (!r) return 0;
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING) return atoll(r->str);
    return 0;
}

/* The shift field: a number (the total), or "total:retime_log:at_ms". */
static void wire_read_shift(const redisReply *f, wire_shift *s) {
    s->total_ms = (double)wire_int(f);
    s->retime_log = s->retime_at_ms = 0;
    if (f && f->type == REDIS_REPLY_STRING) {
        const char *colon = strchr(f->str, ':');
        if (colon) {
            char *end;
            s->retime_log = strtod(colon + 1, &end);
            if (*end == ':') s->retime_at_ms = strtod(end + 1, NULL);
        }
    }
}

/* The script's own time, when r has the element past its fields. */
static long long wire_script_us(const redisReply *r, size_t fields) {
    if (r->elements != fields + 1) return -1;
    const redisReply *t = r->element[fields];
    return t->type == REDIS_REPLY_INTEGER && t->integer > 0 ? t->integer : -1;
}

static int wire_is_array(const redisReply *r) { return r && r->type == REDIS_REPLY_ARRAY; }

/* lua/reserve.lua reserve_head. */
enum { RESERVE_NOW, RESERVE_PAUSED, RESERVE_REQ_BACKLOG, RESERVE_TOK_BACKLOG, RESERVE_SHIFT, RESERVE_HEAD };

int wire_read_reserve(const redisReply *r, size_t n, wire_reserve_reply *out) {
    if (!wire_is_array(r) || (r->elements != RESERVE_HEAD + n && r->elements != RESERVE_HEAD + n + 1)) return -1;
    out->now_us = wire_int(r->element[RESERVE_NOW]);
    out->paused_ms = wire_int(r->element[RESERVE_PAUSED]);
    out->requests_backlog_ms = wire_int(r->element[RESERVE_REQ_BACKLOG]);
    out->tokens_backlog_ms = wire_int(r->element[RESERVE_TOK_BACKLOG]);
    wire_read_shift(r->element[RESERVE_SHIFT], &out->shift);
    out->items = (const redisReply *const *)r->element + RESERVE_HEAD;
    out->n = n;
    out->script_us = wire_script_us(r, RESERVE_HEAD + n);
    return 0;
}

int wire_read_group(const redisReply *r, size_t n, wire_group_reply *out) {
    if (!wire_is_array(r) || (r->elements != 1 + n && r->elements != 2 + n)) return -1;
    out->now_us = wire_int(r->element[0]);
    out->items = (const redisReply *const *)r->element + 1;
    out->n = n;
    out->script_us = wire_script_us(r, 1 + n);
    return 0;
}

/* lua/settle.lua's feedback reply. */
enum { SETTLE_NOW, SETTLE_PAUSED, SETTLE_SCALE, SETTLE_SHIFT, SETTLE_HEAD };

int wire_read_settle(const redisReply *r, size_t n, wire_settle_reply *out) {
    if (!wire_is_array(r) || r->elements < SETTLE_SHIFT) return -1;
    out->now_us = wire_int(r->element[SETTLE_NOW]);
    out->paused_ms = wire_int(r->element[SETTLE_PAUSED]);
    const redisReply *sc = r->element[SETTLE_SCALE];
    out->rate_scale = sc->type == REDIS_REPLY_STRING ? atof(sc->str) : -1;
    out->has_shift = r->elements > SETTLE_SHIFT;
    if (out->has_shift) wire_read_shift(r->element[SETTLE_SHIFT], &out->shift);
    out->rates = r->elements >= SETTLE_HEAD + n + 1 ? r->element[SETTLE_HEAD + n] : NULL;
    out->script_us = wire_script_us(r, SETTLE_HEAD + n + 1);
    return 0;
}

int wire_read_heartbeat(const redisReply *r, wire_heartbeat_reply *out) {
    out->requests_backlog_ms = out->tokens_backlog_ms = -1;
    out->now_us = 0;
    out->has_shift = 0;
    if (!r) return -1;
    if (r->type == REDIS_REPLY_INTEGER) {
        out->live = r->integer;
        return 0;
    }
    if (!wire_is_array(r) || r->elements < 3 || r->element[0]->type != REDIS_REPLY_INTEGER) return -1;
    out->live = r->element[0]->integer;
    out->has_shift = 1;
    wire_read_shift(r->element[1], &out->shift);
    out->now_us = wire_int(r->element[2]);
    if (r->elements >= 5) {
        out->requests_backlog_ms = wire_int(r->element[3]);
        out->tokens_backlog_ms = wire_int(r->element[4]);
    }
    return 0;
}

int wire_read_verdict(const redisReply *const *items, size_t i, int flags, int group, wire_verdict *v) {
    const redisReply *it = items[i];
    memset(v, 0, sizeof(*v));
    v->kind = -1;
    v->member = -1;
    v->dry_wait_ms = -1;
    if (!wire_is_array(it) || it->elements < 3 || it->element[0]->type != REDIS_REPLY_INTEGER) return -1;
    long long kind = it->element[0]->integer;
    /* The kind's own fields, then the member (group, not on a shed), then
     * a dry run's wait. */
    size_t own = kind == WIRE_GRANT ? 4 : 3;
    size_t member = group && kind != WIRE_SHED ? 1 : 0, dry = (flags & WIRE_DRY) ? 1 : 0;
    if ((kind != WIRE_GRANT && kind != WIRE_DEFER && kind != WIRE_SHED) || it->elements != own + member + dry)
        return -1;
    v->kind = (int)kind;
    if (kind == WIRE_GRANT) {
        v->id = wire_int(it->element[1]);
        v->wait_ms = wire_int(it->element[2]);
        v->tokens = wire_int(it->element[3]);
    } else {
        v->reason = it->element[1]->type == REDIS_REPLY_STRING ? it->element[1]->str : NULL;
        v->after_ms = wire_int(it->element[2]);
    }
    if (member) {
        long long j = wire_int(it->element[own]);
        if (j < 1 || j > INT32_MAX) return v->kind = -1, -1;
        v->member = (int)(j - 1);
    }
    if (dry) v->dry_wait_ms = wire_int(it->element[own + member]);
    return 0;
}

int wire_rate_next(const wire_settle_reply *s, size_t *pos, wire_rate *out) {
    const redisReply *rates = s->rates;
    if (!wire_is_array(rates) || rates->elements % 5) return 0;
    for (; *pos + 4 < rates->elements; *pos += 5) {
        const redisReply *const *row = (const redisReply *const *)rates->element + *pos;
        if (row[0]->type != REDIS_REPLY_STRING) continue;
        out->name = row[0]->str;
        out->limit = row[1]->type == REDIS_REPLY_STRING ? atof(row[1]->str) : 0;
        out->effective = row[2]->type == REDIS_REPLY_STRING ? atof(row[2]->str) : 0;
        out->outside = row[3]->type == REDIS_REPLY_STRING ? atof(row[3]->str) : 0;
        out->held = row[4]->type == REDIS_REPLY_STRING ? atof(row[4]->str) : 0;
        *pos += 5;
        return 1;
    }
    return 0;
}

int wire_read_budget_verdict(const redisReply *r, size_t n, size_t i, wire_budget_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->kind = -1;
    v->renew_ms = -1;
    if (!wire_is_array(r) || r->elements != n || i >= n) return -1;
    const redisReply *it = r->element[i];
    if (!wire_is_array(it) || it->elements < 3 || it->element[0]->type != REDIS_REPLY_INTEGER) return -1;
    long long kind = it->element[0]->integer;
    if (kind == WIRE_GRANT) {
        v->left_u = wire_int(it->element[1]);
        v->warn = it->element[2]->type == REDIS_REPLY_STRING ? it->element[2]->str : NULL;
    } else if (kind == WIRE_SHED || kind == WIRE_DEFER) {
        if (it->elements != 6) return -1;
        v->name = it->element[1]->type == REDIS_REPLY_STRING ? it->element[1]->str : "";
        v->period = it->element[2]->type == REDIS_REPLY_STRING ? it->element[2]->str : "";
        v->left_u = wire_int(it->element[3]);
        v->renew_ms = wire_int(it->element[4]);
        v->limit_u = wire_int(it->element[5]);
    } else {
        return -1;
    }
    v->kind = (int)kind;
    return 0;
}

int wire_budget_field_next(const redisReply *r, size_t i, size_t *pos, const char **field, const char **value) {
    if (!wire_is_array(r) || i >= r->elements) return 0;
    const redisReply *x = r->element[i];
    if (!wire_is_array(x)) return 0;
    for (; *pos + 1 < x->elements; *pos += 2) {
        const redisReply *f = x->element[*pos], *val = x->element[*pos + 1];
        if (f->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING) continue;
        *field = f->str;
        *value = val->str;
        *pos += 2;
        return 1;
    }
    return 0;
}

int wire_budget_listed(const redisReply *r, size_t i) {
    return wire_is_array(r) && i < r->elements && wire_is_array(r->element[i]);
}

int wire_read_retry(const redisReply *r, long long *allowed, long long *balance, long long *retry_after_ms) {
    if (!wire_is_array(r) || r->elements < 3) return -1;
    *allowed = wire_int(r->element[0]);
    *balance = wire_int(r->element[1]);
    *retry_after_ms = wire_int(r->element[2]);
    return 0;
}

size_t wire_status_fields(const redisReply *r) { return wire_is_array(r) ? r->elements / 2 : 0; }

int wire_status_field_next(const redisReply *r, size_t *pos, const char **field, const char **value, char num[24]) {
    if (!wire_is_array(r)) return 0;
    for (; *pos + 1 < r->elements; *pos += 2) {
        const redisReply *f = r->element[*pos], *v = r->element[*pos + 1];
        if (f->type != REDIS_REPLY_STRING) continue;
        *field = f->str;
        if (v->type == REDIS_REPLY_INTEGER) {
            snprintf(num, 24, "%lld", v->integer);
            *value = num;
        } else {
            *value = v->type == REDIS_REPLY_STRING ? v->str : "";
        }
        *pos += 2;
        return 1;
    }
    return 0;
}

int wire_read_heartbeat_of(const redisReply *r, size_t n, size_t i, wire_heartbeat_reply *out) {
    if (!wire_is_array(r) || r->elements != n || i >= n) return -1;
    return wire_read_heartbeat(r->element[i], out);
}
