/* prop_sim: see prop_sim.h. */
#include "prop_sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "script_call.h"

uint64_t prop_splitmix(void *ud) {
    uint64_t *s = ud;
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct sim {
    redisContext *c;
    const prop_cfg *cfg;
    prop_rand_fn rnd;
    void *ud;
    double now; /* the scripts' clock as last seen (ms) */
    char *err;
    size_t errlen;
} sim;

static long long pick(sim *s, long long lo, long long hi) {
    if (hi <= lo) return lo;
    return lo + (long long)(s->rnd(s->ud) % (uint64_t)(hi - lo + 1));
}

static int chance(sim *s, int percent) { return pick(s, 0, 99) < percent; }

static int fail(sim *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sets the scripts' clock to t. The clock is set, not shifted ("=<ms>",
 * lua/common.lua sl_now): the real time that passes between two calls,
 * more on a loaded machine, does not move it, so a seed decides the same
 * run everywhere. */
static int clock_set(sim *s, double t) {
    redisReply *r = redisCommand(s->c, "HSET sluice:{%s}:limits test_clock_offset_ms =%.3f", s->cfg->dep, t);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r) freeReplyObject(r);
        return fail(s, "moving the test clock failed");
    }
    freeReplyObject(r);
    s->now = t;
    return 0;
}

/* Moves it to t, never back. */
static int clock_to(sim *s, double t) { return t <= s->now + 1e-3 ? 0 : clock_set(s, t); }

/* The schedule's fields of the state hash, as one string (for "a shed
 * consumes nothing"). */
static char *schedule_of(sim *s) {
    static const char *const fields[] = {"requests_tat",     "tokens_tat",     "input_tat",     "output_tat",
                                         "requests_granted", "tokens_granted", "input_granted", "output_granted",
                                         "last_slot",        "next_grant"};
    size_t n = sizeof(fields) / sizeof(*fields);
    redisReply *r =
        redisCommand(s->c, "HMGET sluice:{%s}:state %s %s %s %s %s %s %s %s %s %s", s->cfg->dep, fields[0], fields[1],
                     fields[2], fields[3], fields[4], fields[5], fields[6], fields[7], fields[8], fields[9]);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != n) {
        if (r) freeReplyObject(r);
        return NULL;
    }
    size_t cap = 1024, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; out && i < n; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s;",
                                r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "");
    freeReplyObject(r);
    return out;
}

/* Whether a shed consumed something: a schedule (schedule_of) that moved
 * on. Only the TATs (the first four fields) may move back: the reserve
 * applies the lazy AIMD increase first, and an increase gives back the
 * debt a decrease converted (lua/common.lua, sl_rate_changed); anything
 * else changed is a shed that consumed. */
static int schedule_consumed(const char *before, const char *after) {
    for (int i = 0; *before || *after; i++) {
        size_t nb = strcspn(before, ";"), na = strcspn(after, ";");
        if (nb != na || strncmp(before, after, nb) != 0) {
            if (i >= 4 || nb == 0 || na == 0 || strtod(after, NULL) > strtod(before, NULL)) return 1;
        }
        before += nb + (before[nb] == ';');
        after += na + (after[na] == ';');
    }
    return 0;
}

typedef enum { C_IDLE, C_GRANTED, C_SENT } cstate;

typedef struct caller {
    cstate st;
    double t; /* its next event */
    long long id, est_in, max_out, prompt, cache_read, output;
    double slot, sent_at;
    int cancel; /* it gives the slot back before it comes */
} caller;

static void configure(sim *s, prop_stats *out) {
    const prop_cfg *k = s->cfg;
    char rpm[24], a[24], b[24], ba[24], bb[24], jit[24];
    const char *argv[40];
    int n = 0;
    long long r = (long long[]){600, 1200, 6000}[pick(s, 0, 2)];
    snprintf(rpm, sizeof(rpm), "%lld", r);
    argv[n++] = "rpm";
    argv[n++] = rpm;
    out->rpm = r;
    if (k->profile == PM_ANTHROPIC) {
        long long it = (long long[]){30000, 60000, 120000}[pick(s, 0, 2)];
        long long ot = (long long[]){12000, 24000, 60000}[pick(s, 0, 2)];
        snprintf(a, sizeof(a), "%lld", it);
        snprintf(b, sizeof(b), "%lld", ot);
        snprintf(ba, sizeof(ba), "%lld", it / 60);
        snprintf(bb, sizeof(bb), "%lld", ot / 60);
        argv[n++] = "itpm";
        argv[n++] = a;
        argv[n++] = "otpm";
        argv[n++] = b;
        argv[n++] = "burst_input";
        argv[n++] = ba;
        argv[n++] = "burst_output";
        argv[n++] = bb;
        out->itpm = it;
        out->otpm = ot;
    } else {
        long long tp = (long long[]){30000, 60000, 150000}[pick(s, 0, 2)];
        snprintf(a, sizeof(a), "%lld", tp);
        snprintf(ba, sizeof(ba), "%lld", tp / 60);
        argv[n++] = "tpm";
        argv[n++] = a;
        argv[n++] = "burst_tokens";
        argv[n++] = ba;
        out->tpm = tp;
    }
    static const char *const refund_f[3] = {"refund_tokens", "refund_input", "refund_output"};
    int refund_v[3] = {k->refund_tokens, k->refund_input, k->refund_output};
    for (int i = 0; i < 3; i++) {
        if (refund_v[i] < 0) continue;
        argv[n++] = refund_f[i];
        argv[n++] = refund_v[i] ? "1" : "0";
    }
    if (k->legacy) {
        /* Only the older scripts' fields. */
        n = k->refund_tokens >= 0 ? n - 2 : n;
        if (k->refund_tokens >= 0) {
            argv[n++] = "refund";
            argv[n++] = k->refund_tokens ? "1" : "0";
        }
    }
    if (k->jitter_ms >= 0) {
        snprintf(jit, sizeof(jit), "%lld", k->jitter_ms);
        argv[n++] = "jitter_ms";
        argv[n++] = jit;
    }
    argv[n++] = "quota_hold_ms";
    argv[n++] = "1000";
    redisReply *rep = script_call(s->c, SCRIPT_CONFIGURE, k->dep, n, argv);
    if (rep) freeReplyObject(rep);
}

/* The limits the provider has (its documented buckets at the configured
 * rates and bursts). */
static void model_limits(const prop_stats *st, pm_profile p, pm_limits *lim) {
    memset(lim, 0, sizeof(*lim));
    lim->per_minute[PM_REQUESTS] = (double)st->rpm;
    lim->burst[PM_REQUESTS] = st->rpm / 60 > 1 ? (double)(st->rpm / 60) : 1;
    if (p == PM_ANTHROPIC) {
        lim->per_minute[PM_INPUT] = (double)st->itpm;
        lim->burst[PM_INPUT] = (double)(st->itpm / 60);
        lim->per_minute[PM_OUTPUT] = (double)st->otpm;
        lim->burst[PM_OUTPUT] = (double)(st->otpm / 60);
    } else {
        lim->per_minute[PM_TOKENS] = (double)st->tpm;
        lim->burst[PM_TOKENS] = (double)(st->tpm / 60);
    }
}

static double reply_now(const redisReply *r) { return (double)r->element[0]->integer / 1000.0; }

static int do_reserve(sim *s, caller *k, prop_stats *out) {
    const prop_cfg *cfg = s->cfg;
    /* Estimates mostly well inside a burst, some near it, a few above. */
    long long scale = cfg->profile == PM_ANTHROPIC ? out->otpm / 60 : out->tpm / 120;
    k->est_in = pick(s, 1, chance(s, 90) ? scale / 3 + 1 : scale);
    k->max_out = pick(s, 1, chance(s, 90) ? scale / 2 + 1 : scale);
    char tok[48], wait[24];
    if (cfg->legacy) snprintf(tok, sizeof(tok), "%lld", k->est_in + k->max_out);
    else snprintf(tok, sizeof(tok), "%lld+%lld", k->est_in, k->max_out);
    long long w = chance(s, 75) ? 600000 : pick(s, 0, 500);
    snprintf(wait, sizeof(wait), "%lld", w);
    char *before = schedule_of(s);
    redisReply *r = script_callv(s->c, SCRIPT_RESERVE, cfg->dep, "1", tok, wait, NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
        int rc = fail(s, "reserve failed: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
        if (r) freeReplyObject(r);
        free(before);
        return rc;
    }
    s->now = fmax(s->now, reply_now(r));
    out->reserves++;
    redisReply *it = r->element[5];
    if (it->element[0]->integer == 1) {
        out->grants++;
        k->id = it->element[1]->integer;
        k->slot = reply_now(r) + (double)it->element[2]->integer;
        k->st = C_GRANTED;
        k->cancel = k->slot > s->now + 2 && chance(s, 12);
        if (k->cancel) {
            k->t = s->now + (double)pick(s, 0, (long long)(k->slot - s->now) - 1);
        } else {
            long long late = cfg->late_ms >= 0 ? cfg->late_ms : (cfg->jitter_ms >= 0 ? cfg->jitter_ms : 10);
            k->t = k->slot + (double)pick(s, 0, late * 1000) / 1000.0;
        }
    } else {
        out->sheds++;
        char *after = schedule_of(s);
        if (!before || !after || schedule_consumed(before, after)) {
            out->shed_changed++;
            if (getenv("SLUICE_PROP_DEBUG")) {
                fprintf(stderr, "shed %s: before %s\n           after  %s\n", it->element[1]->str,
                        before ? before : "?", after ? after : "?");
                redisReply *h = redisCommand(s->c, "HGETALL sluice:{%s}:state", cfg->dep);
                for (size_t x = 0; h && x + 1 < h->elements; x += 2)
                    if (strstr(h->element[x]->str, "rate") || strstr(h->element[x]->str, "scale") ||
                        strstr(h->element[x]->str, "decrease") || strstr(h->element[x]->str, "paused"))
                        fprintf(stderr, "    %s = %s\n", h->element[x]->str, h->element[x + 1]->str);
                if (h) freeReplyObject(h);
            }
        }
        free(after);
        long long ra = it->element[0]->integer == 0 ? it->element[2]->integer : 100;
        k->st = C_IDLE;
        k->t = s->now + (double)(ra > 0 && ra < 5000 ? ra : pick(s, 1, 1000));
    }
    freeReplyObject(r);
    free(before);
    return 0;
}

static int do_settle(sim *s, caller *k, const char *usage, const char *outcome, long long pause_ms) {
    char id[24], p[24];
    snprintf(id, sizeof(id), "%lld", k->id);
    snprintf(p, sizeof(p), "%lld", pause_ms);
    redisReply *r = s->cfg->legacy ? script_callv(s->c, SCRIPT_SETTLE, s->cfg->dep, "1", id, usage, outcome, p, NULL)
                                   : script_callv(s->c, SCRIPT_SETTLE, s->cfg->dep, "feedback", "1", id, usage, outcome,
                                                  p, "-", NULL);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        int rc = fail(s, "settle failed: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
        if (r) freeReplyObject(r);
        return rc;
    }
    s->now = fmax(s->now, reply_now(r));
    freeReplyObject(r);
    return 0;
}

int prop_run(redisContext *c, const prop_cfg *cfg, prop_rand_fn rnd, void *ud, prop_stats *out, char *err,
             size_t errlen) {
    sim s = {c, cfg, rnd, ud, 0, err, errlen};
    memset(out, 0, sizeof(*out));
    if (cfg->callers < 1 || cfg->callers > 16) return fail(&s, "callers must be 1..16");
    configure(&s, out);
    redisReply *t = script_callv(c, SCRIPT_STATUS, cfg->dep, NULL);
    if (!t || t->type != REDIS_REPLY_ARRAY) {
        if (t) freeReplyObject(t);
        return fail(&s, "status failed (is the deployment configured?)");
    }
    for (size_t i = 0; i + 1 < t->elements; i += 2)
        if (!strcmp(t->element[i]->str, "now_us")) s.now = atof(t->element[i + 1]->str) / 1000.0;
    freeReplyObject(t);
    /* From here the scripts' clock is the run's own (clock_to), from a
     * whole millisecond: the scripts round waits to milliseconds, so a
     * start's fraction would change the run. */
    if (clock_set(&s, ceil(s.now) + 1) != 0) return -1;
    double start = s.now;
    pm_limits lim;
    model_limits(out, cfg->profile, &lim);
    provider_model m;
    pm_init(&m, cfg->profile, &lim);
    caller k[16];
    memset(k, 0, sizeof(k));
    for (int i = 0; i < cfg->callers; i++) k[i].t = s.now + (double)pick(&s, 0, 200);
    int rc = 0;
    for (int step = 0; step < cfg->events && rc == 0; step++) {
        int i = 0;
        for (int j = 1; j < cfg->callers; j++)
            if (k[j].t < k[i].t) i = j;
        caller *q = &k[i];
        if ((rc = clock_to(&s, q->t)) != 0) break;
        char usage[64];
        switch (q->st) {
        case C_IDLE: rc = do_reserve(&s, q, out); break;
        case C_GRANTED:
            if (q->cancel) {
                /* Given back before its slot: the provider never sees it. */
                rc = do_settle(&s, q, "-1", "cancelled", -1);
                out->cancels++;
                q->st = C_IDLE;
                q->t = s.now + (double)pick(&s, 0, 300);
                break;
            }
            /* Sent: what the provider admits. The prompt it counts is at
             * most the estimate (estimates are upper bounds of the prompt:
             * docs/providers.md), some of it read from the cache. */
            q->sent_at = q->t;
            q->prompt = pick(&s, q->est_in / 2, q->est_in);
            q->cache_read = cfg->profile == PM_ANTHROPIC && chance(&s, 30) ? pick(&s, 0, q->prompt / 2) : 0;
            q->output = pick(&s, 0, q->max_out);
            q->st = C_SENT;
            q->t = q->sent_at + (double)pick(&s, 50, 2000);
            out->sends++;
            break;
        case C_SENT: {
            int roll = (int)pick(&s, 0, 99);
            if (roll < 86) {
                if (pm_admit(&m, q->sent_at, q->prompt, q->cache_read, q->max_out) != 0 ||
                    pm_complete(&m, q->t, q->max_out, q->output) != 0)
                    rc = fail(&s, "out of memory");
                if (cfg->legacy) snprintf(usage, sizeof(usage), "%lld", q->prompt + q->output);
                else snprintf(usage, sizeof(usage), "%lld+%lld+%lld", q->prompt, q->output, q->cache_read);
                if (rc == 0) rc = do_settle(&s, q, usage, "ok", -1);
                out->oks++;
            } else if (roll < 92) {
                /* A server error after the work was done: no usage. */
                if (pm_admit(&m, q->sent_at, q->prompt, q->cache_read, q->max_out) != 0) rc = fail(&s, "out of memory");
                if (rc == 0) rc = do_settle(&s, q, "-1", "failed", -1);
                out->failures++;
            } else if (roll < 99) {
                /* A 429: not admitted. Sometimes with a Retry-After. */
                rc = do_settle(&s, q, "-1", "throttled", chance(&s, 50) ? pick(&s, 0, 400) : -1);
                out->throttles++;
            } else {
                rc = do_settle(&s, q, "-1", "quota", pick(&s, 100, 800));
                out->quotas++;
            }
            q->st = C_IDLE;
            q->t = s.now + (double)pick(&s, 0, 300);
            break;
        }
        }
    }
    out->span_ms = s.now - start;
    for (int d = 0; d < PM_DIMS; d++) {
        out->rejections[d] = pm_rejections(&m, d, &out->first_rejection[d]);
        if (out->rejections[d]) out->first_rejection[d] -= start; /* from the run's start */
    }
    pm_free(&m);
    return rc;
}
