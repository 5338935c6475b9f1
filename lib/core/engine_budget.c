/* engine_budget: budgets in money (config budgets:, lua/budget.lua).
 *
 * A request that draws from any budget reserves its largest possible
 * cost (lib/core/budget.h: its input estimate at the deployment's learned
 * ratio, unless exact, and its max output) from all of them in one
 * atomic call first; a
 * request that does not fit is shed with reason `budget`, the budget's
 * name, what it has left and when it renews, and costs nothing. Once
 * reserved, the request asks for its slot as any other (the call it makes
 * is `inner`); a shed, an error or a cancel before the slot gives the
 * reservation back whole. The grant is remembered by its id, and its
 * settle corrects the reservation to what the call cost at the prices of
 * the deployment that served it; a grant never settled is charged in full
 * by Redis when its lease ends.
 *
 * The budgets' keys share one slot ({$budgets}), apart from the
 * deployments': the reservation and the slot are two steps, never one
 * script, so they work under Redis Cluster too. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "timeutil.h"
#include "tz.h"

const char *const engine_period_names[ENGINE_PERIODS] = {"day", "month", "total"};

#define BUDGET_MAP 1024
#define BUDGET_RETRY_MS 50         /* Redis not ready: ask again this often, within the max wait */
#define BUDGET_WAIT_MIN_MS 25      /* no room until requests in flight settle: ask again after 25, 50, 100, 200 ms */
#define BUDGET_WAIT_HINT_MS 1000   /* ... and the retry-after of a request that waited its max wait for it */
#define BUDGET_LOOK_MS 2000        /* how often the budgets are looked at for metrics and STATUS */
#define BUDGET_ZONE_DAYS 45        /* a zone's offsets are sent for this many days ahead */
#define BUDGET_LEASE_PAD_MS 5000LL /* a reservation outlives its call's max wait and lease by this */
#define BUDGET_BATCH 128           /* reservations per reserve call */
#define BUDGET_SETTLE_BATCH 256    /* settles per settle call */

typedef struct budget_hold {
    char rid[ENGINE_GRANT_ID_MAX + 160];
    long long amount, tokens;
    budget_price price;
    char currency[4];
    char name[CONFIG_NAME_MAX + 1], lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1];
    char tag[CONFIG_NAME_MAX + 1], client[CONFIG_NAME_MAX + 1];
    engine_req rq;
    uint64_t deadline;                  /* uv_now: asking Redis gives up (max wait) */
    unsigned waits;                     /* times Redis said "not now" */
    int asking;                         /* a reserve call is in flight */
    int queued;                         /* in the book's queue, to go in the next reserve call */
    struct engine_call *qprev, *qnext;  /* that queue */
    char names[1024];                   /* the budgets reserved from, comma-separated */
    char skip[1024];                    /* of those, the ones the serving member does not draw from */
    uint64_t expires;                   /* uv_now: the map forgets it (Redis charged it in full by then) */
    char grant_id[ENGINE_GRANT_ID_MAX]; /* once granted */
    char member[CONFIG_NAME_MAX + 1];   /* the deployment that served it */
    struct budget_hold *next;           /* in the map */
} budget_hold;

typedef struct spend_row {
    char deployment[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1], client[CONFIG_NAME_MAX + 1], currency[4];
    long long spent;
    unsigned long long requests;
} spend_row;

typedef struct budget_look {
    engine_budget_view v;
    char day[16], month[16];
} budget_look;

typedef struct budget_book {
    budget_hold *map[BUDGET_MAP];
    unsigned long long seq;
    char run[40];       /* this engine's run, in its reservation ids: a restart under the same agent id
                         * must not reuse the ids of reservations its last run still holds */
    const config *cfg;  /* the configuration the arrays below follow (compared, never read: a reload frees it) */
    size_t n;           /* the arrays' length */
    char **zone;        /* per budget: its offsets, "" for UTC */
    long long *zone_to; /* per budget: wall ms until which zone holds */
    budget_look *looks; /* per budget */
    int looking;
    unsigned gen, look_gen; /* reloads seen; the one the look in flight was asked under */
    uint64_t looked_at;
    spend_row *spend;
    size_t nspend, capspend;
    engine_call *calls;            /* in CALL_BUDGET */
    engine_call *askq, *asktail;   /* waiting to go in the next reserve call, in order */
    struct budget_settle *settles; /* waiting to go in the next settle call */
    size_t nsettles, capsettles;
} budget_book;

typedef struct budget_settle {
    char rid[ENGINE_GRANT_ID_MAX + 160];
    long long actual;
    char skip[1024];
} budget_settle;

static budget_book *book_get(engine *e) {
    if (!e->book) {
        static unsigned long long runs;
        e->book = calloc(1, sizeof(*e->book));
        if (e->book)
            snprintf(e->book->run, sizeof(e->book->run), "%llx.%llx", (unsigned long long)wall_clock_ms(),
                     __atomic_add_fetch(&runs, 1, __ATOMIC_RELAXED));
    }
    budget_book *b = e->book;
    if (!b || b->cfg == e->cfg) return b;
    /* A new configuration (engine__budget_reconfigure dropped the old
     * arrays): zones and looks follow its budgets. */
    size_t n = e->cfg->nbudgets ? e->cfg->nbudgets : 1;
    b->zone = calloc(n, sizeof(*b->zone));
    b->zone_to = calloc(n, sizeof(*b->zone_to));
    b->looks = calloc(n, sizeof(*b->looks));
    b->cfg = e->cfg;
    b->n = n;
    if (!b->zone || !b->zone_to || !b->looks) {
        free(b->zone);
        free(b->zone_to);
        free(b->looks);
        b->zone = NULL;
        b->zone_to = NULL;
        b->looks = NULL;
        b->cfg = NULL;
        b->n = 0;
        return NULL;
    }
    return b;
}

void engine__budget_reconfigure(engine *e) {
    budget_book *b = e->book;
    if (!b) return;
    /* The arrays follow the old configuration's budgets: dropped now (a
     * look in flight is then ignored), made again on first use. */
    for (size_t i = 0; b->zone && i < b->n; i++) free(b->zone[i]);
    free(b->zone);
    free(b->zone_to);
    free(b->looks);
    b->zone = NULL;
    b->zone_to = NULL;
    b->looks = NULL;
    b->cfg = NULL;
    b->n = 0;
    b->gen++;
}

void engine__budget_free(engine *e) {
    budget_book *b = e->book;
    if (!b) return;
    for (size_t i = 0; i < BUDGET_MAP; i++)
        for (budget_hold *h = b->map[i], *nx; h; h = nx) {
            nx = h->next;
            free(h);
        }
    for (size_t i = 0; b->zone && i < b->n; i++) free(b->zone[i]);
    free(b->zone);
    free(b->zone_to);
    free(b->looks);
    free(b->spend);
    free(b->settles);
    free(b);
    e->book = NULL;
}

/* ---- which budgets, at what price ---- */

static int budget_applies(const config *cfg, const struct config_budget *b, const engine_req *rq) {
    if (b->tenant[0] && (!rq->tenant || strcmp(b->tenant, rq->tenant))) return 0;
    if (b->client[0] && (!rq->client || strcmp(b->client, rq->client))) return 0;
    if (!b->deployment[0] || !strcmp(b->deployment, rq->name)) return 1;
    /* A budget of a group covers a request to one of its members. */
    const struct config_group *g = config_group(cfg, b->deployment);
    for (size_t i = 0; g && i < g->nmembers; i++)
        if (!strcmp(g->members[i], rq->name)) return 1;
    /* A request to a group draws from the budgets of every member it may
     * be served by (the serving member's keep the charge at the settle). */
    g = config_group(cfg, rq->name);
    for (size_t i = 0; g && i < g->nmembers; i++)
        if (!strcmp(g->members[i], b->deployment)) return 1;
    return 0;
}

static void price_of(const struct config_deployment *d, budget_price *p) {
    *p = (budget_price){d->price.input_p, d->price.output_p, d->price.cache_read_p, d->price.cache_write_p};
}

/* The price a request to name is reserved at: its deployment's, or for a
 * group each part at its dearest member's. Returns 0 or -1 (no price). */
static int price_for(const config *cfg, const char *name, budget_price *p, char currency[4]) {
    const struct config_deployment *d = config_deployment(cfg, name);
    if (d) {
        if (!d->price.currency[0]) return -1;
        price_of(d, p);
        snprintf(currency, 4, "%s", d->price.currency);
        return 0;
    }
    const struct config_group *g = config_group(cfg, name);
    if (!g) return -1;
    *p = (budget_price){0, 0, 0, 0};
    currency[0] = '\0';
    for (size_t i = 0; i < g->nmembers; i++) {
        const struct config_deployment *m = g->members_[i];
        if (!m->price.currency[0]) return -1;
        budget_price q;
        price_of(m, &q);
        if (q.input > p->input) p->input = q.input;
        if (q.output > p->output) p->output = q.output;
        if (q.cache_read > p->cache_read) p->cache_read = q.cache_read;
        if (q.cache_write > p->cache_write) p->cache_write = q.cache_write;
        snprintf(currency, 4, "%s", m->price.currency);
    }
    return currency[0] ? 0 : -1;
}

/* Budget i's time zone as the script reads it ("" for UTC), recomputed
 * from the tz database every day. */
static const char *zone_of(engine *e, budget_book *b, size_t i) {
    const struct config_budget *cb = &e->cfg->budgets[i];
    if (!cb->time_zone[0]) return "";
    long long now = wall_clock_ms();
    if (b->zone[i] && now < b->zone_to[i]) return b->zone[i];
    tz_zone *z = NULL;
    if (tz_load(NULL, cb->time_zone, &z, NULL, 0) != 0) return b->zone[i] ? b->zone[i] : "";
    long long from = now - 2 * 86400000LL, to = now + BUDGET_ZONE_DAYS * 86400000LL;
    int len = tz_changes(z, from, to, NULL, 0);
    char *s = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (s && tz_changes(z, from, to, s, (size_t)len + 1) == len) {
        free(b->zone[i]);
        b->zone[i] = s;
        b->zone_to[i] = now + 86400000LL;
    } else {
        free(s);
    }
    tz_free(z);
    return b->zone[i] ? b->zone[i] : "";
}

/* ---- the script's arguments ---- */

/* The keys of a call over the budgets in idx (nb of them): the three
 * the script always takes, then one hash per budget. NULL when out of
 * memory; *nkeys their number. */
static char (*budget_keys(const engine *e, const size_t *idx, size_t nb, int *nkeys))[SCRIPTS_KEY_MAX] {
    char(*keys)[SCRIPTS_KEY_MAX] = calloc(3 + nb, sizeof(*keys));
    if (!keys) return NULL;
    snprintf(keys[0], SCRIPTS_KEY_MAX, "sluice:{$budgets}:held");
    snprintf(keys[1], SCRIPTS_KEY_MAX, "sluice:{$budgets}:leases");
    snprintf(keys[2], SCRIPTS_KEY_MAX, "sluice:{$budgets}:clock");
    for (size_t k = 0; k < nb; k++)
        snprintf(keys[3 + k], SCRIPTS_KEY_MAX, "sluice:{$budgets}:b:%s", e->cfg->budgets[idx[k]].name);
    *nkeys = 3 + (int)nb;
    return keys;
}

/* op's head and the budgets in idx (lua/budget.lua; wire_budget_one). */
static void budget_args_head(engine *e, budget_book *b, wire_args *a, const char *op, const size_t *idx, size_t nb) {
    wire_budget_begin(a, op, nb);
    for (size_t k = 0; k < nb; k++) {
        const struct config_budget *cb = &e->cfg->budgets[idx[k]];
        wire_budget w = {.name = cb->name,
                         .currency = cb->currency,
                         .daily_u = cb->daily_u,
                         .monthly_u = cb->monthly_u,
                         .total_u = cb->total_u,
                         .zone = zone_of(e, b, idx[k]),
                         .warn_at = cb->warn_at};
        wire_budget_one(a, &w);
    }
}

/* ---- the map of grants to their reservations ---- */

static size_t map_slot(const char *id) {
    uint64_t h = 1469598103934665603ULL;
    for (; *id; id++) h = (h ^ (unsigned char)*id) * 1099511628211ULL;
    return (size_t)(h % BUDGET_MAP);
}

static void map_put(budget_book *b, budget_hold *h) {
    size_t s = map_slot(h->grant_id);
    h->next = b->map[s];
    b->map[s] = h;
}

static budget_hold *map_take(budget_book *b, const char *id) {
    for (budget_hold **p = &b->map[map_slot(id)]; *p; p = &(*p)->next)
        if (!strcmp((*p)->grant_id, id)) {
            budget_hold *h = *p;
            *p = h->next;
            return h;
        }
    return NULL;
}

/* ---- settles ---- */

static void on_settle_reply(void *arg, redisReply *r, const char *err) {
    engine *e = arg;
    e->calls_out--;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        e->stats.budget_errors++;
        engine__elog(e, CONFIG_LOG_WARN,
                     "budget settle failed: %s (the reservations are charged in full at their "
                     "lease end)",
                     err ? err : (r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply"));
    }
    engine__maybe_finish_stop(e);
}

/* Sends the settles queued, BUDGET_SETTLE_BATCH per call; fire and
 * forget: one that never arrives is charged in full at its lease end. */
static void flush_settles(engine *e) {
    budget_book *b = e->book;
    if (!b || !b->nsettles) return;
    for (size_t from = 0; from < b->nsettles; from += BUDGET_SETTLE_BATCH) {
        size_t n = b->nsettles - from < BUDGET_SETTLE_BATCH ? b->nsettles - from : BUDGET_SETTLE_BATCH;
        int nkeys;
        char(*keys)[SCRIPTS_KEY_MAX] = e->redis ? budget_keys(e, NULL, 0, &nkeys) : NULL;
        if (!keys) continue;
        wire_args a;
        wire_args_init(&a);
        wire_budget_settle_begin(&a);
        for (size_t i = 0; i < n; i++) {
            const budget_settle *st = &b->settles[from + i];
            wire_budget_settle_item(&a, st->rid, st->actual, st->skip);
        }
        if (wire_args_done(&a, 0) == 0 &&
            rrouter_script_n(e->redis, SCRIPT_BUDGET, keys, nkeys, a.argc, a.argv, on_settle_reply, e) == 0)
            e->calls_out++;
        else e->stats.budget_errors++;
        wire_args_free(&a);
        free(keys);
    }
    b->nsettles = 0;
}

/* Corrects reservation rid to actual (1e-6 units), the budgets in skip
 * given it back whole: queued for this turn's settle call (at once while
 * the engine stops, so that it still reaches Redis). */
static void send_settle(engine *e, const char *rid, long long actual, const char *skip) {
    if (!strcmp(rid, "-")) return; /* let through unreserved (Redis was out of reach) */
    if (!e->redis) return;         /* stopped: Redis charges it in full at its lease end */
    budget_book *b = e->book;
    if (!b) return;
    if (b->nsettles == b->capsettles) {
        size_t cap = b->capsettles ? 2 * b->capsettles : 16;
        budget_settle *n = realloc(b->settles, cap * sizeof(*n));
        if (!n) return;
        b->settles = n;
        b->capsettles = cap;
    }
    budget_settle *st = &b->settles[b->nsettles++];
    snprintf(st->rid, sizeof(st->rid), "%s", rid);
    st->actual = actual;
    snprintf(st->skip, sizeof(st->skip), "%s", skip ? skip : "");
    if (e->stopping) flush_settles(e);
    else engine__flush_arm(e);
}

static void spend_add(engine *e, const budget_hold *h, long long cost) {
    budget_book *b = e->book;
    const char *dname = h->member[0] ? h->member : h->name;
    for (size_t i = 0; i < b->nspend; i++) {
        spend_row *s = &b->spend[i];
        if (!strcmp(s->deployment, dname) && !strcmp(s->tenant, h->tenant) && !strcmp(s->client, h->client) &&
            !strcmp(s->currency, h->currency)) {
            s->spent += cost;
            s->requests++;
            return;
        }
    }
    if (b->nspend == b->capspend) {
        size_t cap = b->capspend ? 2 * b->capspend : 8;
        spend_row *n = realloc(b->spend, cap * sizeof(*n));
        if (!n) return;
        b->spend = n;
        b->capspend = cap;
    }
    spend_row *s = &b->spend[b->nspend++];
    memset(s, 0, sizeof(*s));
    snprintf(s->deployment, sizeof(s->deployment), "%s", dname);
    snprintf(s->tenant, sizeof(s->tenant), "%s", h->tenant);
    snprintf(s->client, sizeof(s->client), "%s", h->client);
    snprintf(s->currency, sizeof(s->currency), "%s", h->currency);
    s->spent = cost;
    s->requests = 1;
}

void engine__budget_settle(engine *e, const char *grant_id, const usage_rec *u, engine_outcome o) {
    budget_book *b = e->book;
    budget_hold *h = b ? map_take(b, grant_id) : NULL;
    if (!h) return;
    long long cost;
    int known = u && (u->tokens >= 0 || u->input >= 0);
    if (o == ENGINE_THROTTLED || o == ENGINE_QUOTA) {
        /* Refused before any work: the providers bill nothing. */
        cost = 0;
    } else if (!known) {
        /* Sent, and nobody says what it cost: a cancel after the send, a
         * timeout or a 5xx whose work may have been done. */
        cost = h->amount;
    } else {
        cost = budget_actual_cost(&h->price, u, h->amount, h->tokens);
    }
    spend_add(e, h, cost);
    send_settle(e, h->rid, cost, h->skip);
    free(h);
}

/* ---- reservations ---- */

static void ask(engine_call *c);
static void on_retry_timer(uv_timer_t *t);

/* The calls in CALL_BUDGET, linked through prev / next (they are in no
 * other list), so that engine_stop answers those waiting on a timer. */
static void outer_link(engine *e, engine_call *c) {
    budget_book *b = e->book;
    c->prev = NULL;
    c->next = b->calls;
    if (b->calls) b->calls->prev = c;
    b->calls = c;
}

static void outer_unlink(engine_call *c) {
    budget_book *b = c->e->book;
    if (c->prev) c->prev->next = c->next;
    else if (b && b->calls == c) b->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void unqueue(engine_call *c);

static void budget_done(engine_call *c) {
    unqueue(c);
    outer_unlink(c);
    free(c->bh);
    c->bh = NULL;
    c->state = CALL_DONE;
    call_free(c);
}

/* Answers the caller and ends the call (the reservation already dealt with). */
static void budget_answer(engine_call *c, int status, const engine_grant *g, const engine_shed *sh, const char *msg) {
    if (!c->canceled) c->cb(c->arg, status, g, sh, msg);
    budget_done(c);
}

/* The budgets of h's reservation (by name, as sent) that a grant served
 * by member does not draw from: a group's request reserved from the
 * budgets of every member it might be served by. */
static void skip_of(engine *e, budget_hold *h, char *out, size_t n) {
    size_t used = 0;
    out[0] = '\0';
    engine_req rq = h->rq;
    rq.name = h->member;
    for (const char *p = h->names; *p;) {
        size_t len = strcspn(p, ",");
        for (size_t i = 0; i < e->cfg->nbudgets; i++) {
            const struct config_budget *cb = &e->cfg->budgets[i];
            if (strlen(cb->name) != len || strncmp(cb->name, p, len)) continue;
            if (!budget_applies(e->cfg, cb, &rq) && used + len + 2 < n)
                used += (size_t)snprintf(out + used, n - used, "%s%.*s", used ? "," : "", (int)len, p);
        }
        p += len;
        if (*p == ',') p++;
    }
}

/* The call made after the reservation has ended: a grant keeps the
 * reservation (until its settle), anything else gives it back. */
static void on_inner(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    engine_call *c = arg;
    engine *e = c->e;
    budget_hold *h = c->bh;
    c->inner = NULL;
    if (status == SL_OK && g) {
        snprintf(h->grant_id, sizeof(h->grant_id), "%s", g->id);
        snprintf(h->member, sizeof(h->member), "%s", g->deployment ? g->deployment : h->name);
        /* Settled at the prices of the member that served it, and only
         * to the budgets that member draws from. */
        const struct config_deployment *m = config_deployment(e->cfg, h->member);
        if (m && m->price.currency[0]) price_of(m, &h->price);
        skip_of(e, h, h->skip, sizeof(h->skip));
        h->expires = uv_now(e->loop) + (uint64_t)(m ? m->lease_s * 1000 : 120000) + BUDGET_LEASE_PAD_MS;
        budget_book *b = book_get(e);
        if (b) {
            map_put(b, h);
            c->bh = NULL;
        }
    } else {
        send_settle(e, h->rid, 0, "");
    }
    budget_answer(c, status, g, shed, msg);
}

/* On to the slot with what is left of the max wait. */
static int go_on(engine_call *c) {
    engine *e = c->e;
    budget_hold *h = c->bh;
    uint64_t now = uv_now(e->loop);
    h->rq.max_wait_ms = h->deadline > now ? (long long)(h->deadline - now) : 0;
    return engine__acquire_direct(e, &h->rq, on_inner, c, &c->inner);
}

/* Redis did not take the reservation (out of reach, an error, a
 * redirect): asked again within the max wait; then, with agent.fail:
 * open, on unbudgeted, else failed. */
static void budget_unreachable(engine_call *c, const char *why) {
    engine *e = c->e;
    budget_hold *h = c->bh;
    if (e->stopping) {
        budget_answer(c, SL_ECLOSING, NULL, NULL, SLUICE_MSG_CLOSING);
        return;
    }
    if (uv_now(e->loop) + BUDGET_RETRY_MS < h->deadline) {
        uv_timer_start(&c->timer, on_retry_timer, BUDGET_RETRY_MS, 0);
        return;
    }
    if (e->cfg->agent.fail == CONFIG_FAIL_OPEN) {
        e->stats.budget_unchecked++;
        /* Not reserved: nothing to give back or correct. */
        snprintf(h->rid, sizeof(h->rid), "-");
        int arc = go_on(c);
        if (arc == 0) return;
        budget_answer(c, arc, NULL, NULL, "the request could not be queued");
        return;
    }
    char msg[320];
    snprintf(msg, sizeof(msg),
             "a request that draws from a budget in money needs Redis for its reservation, and Redis did not take it "
             "within the max wait (%s; agent.fail is not open)",
             why);
    budget_answer(c, SL_EUNAVAIL, NULL, NULL, msg);
}

/* Item i of a reply r of n items (r NULL with err: the call failed). */
static void on_item(engine_call *c, const redisReply *r, size_t n, size_t i, const char *err) {
    engine *e = c->e;
    budget_hold *h = c->bh;
    h->asking = 0;
    wire_budget_verdict v;
    int ok = r && wire_read_budget_verdict(r, n, i, &v) == 0;
    int verdict = ok ? v.kind : -1;
    int granted = verdict == WIRE_GRANT;
    if (c->canceled || e->stopping) {
        if (granted) send_settle(e, h->rid, 0, "");
        budget_answer(c, SL_ECLOSING, NULL, NULL, SLUICE_MSG_CLOSING);
        engine__maybe_finish_stop(e);
        return;
    }
    if (!ok) {
        e->stats.budget_errors++;
        char why[200];
        snprintf(why, sizeof(why), "%s", err ? err : "a reply the budget script does not give");
        engine__elog(e, CONFIG_LOG_WARN, "budget: Redis did not take a reservation: %s", why);
        budget_unreachable(c, why);
        engine__maybe_finish_stop(e);
        return;
    }
    if (verdict == WIRE_DEFER) {
        /* Room once requests in flight settle: ask again, sooner at
         * first, while the max wait lasts; then shed, with a hint of when
         * in-flight requests will likely have settled. */
        uint64_t now = uv_now(e->loop);
        uint64_t delay = BUDGET_WAIT_MIN_MS << (h->waits < 3 ? h->waits : 3);
        h->waits++;
        if (now + delay <= h->deadline) {
            uv_timer_start(&c->timer, on_retry_timer, delay, 0);
            engine__maybe_finish_stop(e);
            return;
        }
    }
    if (!granted) {
        char name[CONFIG_NAME_MAX + 1] = "", period[8] = "";
        snprintf(name, sizeof(name), "%s", v.name);
        snprintf(period, sizeof(period), "%s", v.period);
        const char *pname = "total";
        for (int k = 0; k < ENGINE_PERIODS; k++)
            if (!strcmp(period, engine_period_names[k])) pname = engine_period_names[k];
        engine_shed sh = {.reason = engine_shed_reasons[ENGINE_SHED_BUDGET],
                          .retry_after_ms = verdict == WIRE_DEFER ? BUDGET_WAIT_HINT_MS : v.renew_ms,
                          .budget = name,
                          .period = pname,
                          .currency = h->currency,
                          .left_u = v.left_u,
                          .budget_waited = verdict == WIRE_DEFER};
        e->stats.sheds++;
        e->stats.shed_by_reason[ENGINE_SHED_BUDGET]++;
        budget_answer(c, SL_ESHED, NULL, &sh, NULL);
        engine__maybe_finish_stop(e);
        return;
    }
    e->stats.budget_reserves++;
    if (v.warn) {
        /* "<budget> <period>[; ...]": the limits this grant took past
         * their warn_at first. */
        for (const char *p = v.warn; p; p = strchr(p + 1, ';')) e->stats.budget_warnings++;
        engine__elog(e, CONFIG_LOG_WARN,
                     "budget %s passed warn_at (a request to %s, tenant '%s', client '%s'); the least any limit it "
                     "draws from has left is %.6f %s",
                     v.warn, h->name, h->tenant, h->client, (double)v.left_u / 1e6, h->currency);
    }
    int rc = go_on(c);
    if (rc != 0) {
        send_settle(e, h->rid, 0, "");
        budget_answer(c, rc, NULL, NULL, "the request could not be queued after its budget reservation");
    }
    engine__maybe_finish_stop(e);
}

static void on_retry_timer(uv_timer_t *t) { ask(t->data); }

/* Queues c for this turn's reserve call (engine__budget_flush). */
static void ask(engine_call *c) {
    engine *e = c->e;
    budget_hold *h = c->bh;
    budget_book *b = e->book;
    if (e->stopping || !e->redis || !b) {
        budget_answer(c, SL_ECLOSING, NULL, NULL, SLUICE_MSG_CLOSING);
        return;
    }
    if (h->queued) return;
    h->queued = 1;
    h->qnext = NULL;
    h->qprev = b->asktail;
    if (b->asktail) b->asktail->bh->qnext = c;
    else b->askq = c;
    b->asktail = c;
    engine__flush_arm(e);
}

static void unqueue(engine_call *c) {
    budget_book *b = c->e->book;
    budget_hold *h = c->bh;
    if (!h || !h->queued || !b) return;
    if (h->qprev) h->qprev->bh->qnext = h->qnext;
    else b->askq = h->qnext;
    if (h->qnext) h->qnext->bh->qprev = h->qprev;
    else b->asktail = h->qprev;
    h->qprev = h->qnext = NULL;
    h->queued = 0;
}

typedef struct reserve_batch {
    engine *e;
    size_t n;
    engine_call *calls[BUDGET_BATCH];
} reserve_batch;

static void on_reserve_reply(void *arg, redisReply *r, const char *err) {
    reserve_batch *rb = arg;
    engine *e = rb->e;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == rb->n;
    char why[200] = "";
    if (!ok) snprintf(why, sizeof(why), "%s", err ? err : (r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply"));
    /* The call counts as out until every item is answered: a stop that
     * finished at the first item's answer would close the router before
     * a later item's settle of a grant nobody will use went out. */
    for (size_t i = 0; i < rb->n; i++) on_item(rb->calls[i], ok ? r : NULL, rb->n, i, ok ? NULL : why);
    e->calls_out--;
    free(rb);
    engine__maybe_finish_stop(e);
}

/* The lease of h's reservation: its max wait, the longest lease of the
 * deployments it may be served by, and a pad. */
static long long lease_of(engine *e, engine_call *c) {
    budget_hold *h = c->bh;
    const struct config_deployment *d = config_deployment(e->cfg, h->name);
    const struct config_group *g = d ? NULL : config_group(e->cfg, h->name);
    long long lease_s = d ? d->lease_s : 0;
    for (size_t i = 0; g && i < g->nmembers; i++)
        if (g->members_[i]->lease_s > lease_s) lease_s = g->members_[i]->lease_s;
    return c->max_wait_ms + BUDGET_LEASE_PAD_MS + lease_s * 1000;
}

/* Sends one reserve call with up to BUDGET_BATCH queued calls: each
 * names its budgets by index into the call's list of budgets. */
static void flush_reserves_once(engine *e) {
    budget_book *b = book_get(e);
    if (!b) return;
    reserve_batch *rb = calloc(1, sizeof(*rb));
    size_t used[64], nused = 0; /* budget indexes in the configuration, in the call's order */
    /* Per call: its budgets as indexes into used (1-based), at most 64. */
    static const size_t per = 64;
    unsigned char(*which)[64] = calloc(BUDGET_BATCH, per);
    size_t nwhich[BUDGET_BATCH];
    if (!rb || !which) {
        free(rb);
        free(which);
        return;
    }
    rb->e = e;
    while (b->askq && rb->n < BUDGET_BATCH) {
        engine_call *c = b->askq;
        budget_hold *h = c->bh;
        /* Its budgets; a call whose budgets do not all fit the call's list
         * waits for the next call. */
        size_t idx[64], nb = 0, extra = 0;
        for (size_t i = 0; i < e->cfg->nbudgets && nb < 64; i++)
            if (budget_applies(e->cfg, &e->cfg->budgets[i], &h->rq)) idx[nb++] = i;
        for (size_t k = 0; k < nb; k++) {
            size_t j = 0;
            while (j < nused && used[j] != idx[k]) j++;
            if (j == nused) extra++;
        }
        if (nused + extra > 64) break;
        unqueue(c);
        if (!nb) {
            /* A reload took its budgets away: on without one. */
            snprintf(h->rid, sizeof(h->rid), "-");
            int arc = go_on(c);
            if (arc != 0) budget_answer(c, arc, NULL, NULL, "the request could not be queued");
            continue;
        }
        size_t hu = 0;
        h->names[0] = '\0';
        for (size_t k = 0; k < nb; k++) {
            size_t j = 0;
            while (j < nused && used[j] != idx[k]) j++;
            if (j == nused) used[nused++] = idx[k];
            which[rb->n][k] = (unsigned char)(j + 1);
            const char *nm = e->cfg->budgets[idx[k]].name;
            hu += (size_t)snprintf(h->names + hu, hu < sizeof(h->names) ? sizeof(h->names) - hu : 0, "%s%s",
                                   hu ? "," : "", nm);
        }
        nwhich[rb->n] = nb;
        h->asking = 1;
        rb->calls[rb->n++] = c;
    }
    if (!rb->n) {
        free(rb);
        free(which);
        return;
    }
    /* reserve, the budgets used, then the items (wire_budget_*). */
    int rc = -1, nkeys;
    char(*keys)[SCRIPTS_KEY_MAX] = budget_keys(e, used, nused, &nkeys);
    if (keys) {
        wire_args a;
        wire_args_init(&a);
        budget_args_head(e, b, &a, "reserve", used, nused);
        wire_budget_items(&a);
        for (size_t i = 0; i < rb->n; i++) {
            const budget_hold *h = rb->calls[i]->bh;
            wire_budget_reserve_item(&a, h->rid, h->amount, lease_of(e, rb->calls[i]), nwhich[i], which[i]);
        }
        if (wire_args_done(&a, 0) == 0 && rrouter_ready(e->redis, keys[0]))
            rc = rrouter_script_n(e->redis, SCRIPT_BUDGET, keys, nkeys, a.argc, a.argv, on_reserve_reply, rb);
        wire_args_free(&a);
        free(keys);
    }
    free(which);
    if (rc == 0) {
        e->calls_out++;
        return;
    }
    for (size_t i = 0; i < rb->n; i++) {
        rb->calls[i]->bh->asking = 0;
        budget_unreachable(rb->calls[i], "Redis is unreachable");
    }
    free(rb);
}

void engine__budget_flush(engine *e) {
    budget_book *b = e->book;
    if (!b) return;
    flush_settles(e);
    while (b->askq) {
        engine_call *head = b->askq;
        flush_reserves_once(e);
        if (b->askq == head) break; /* nothing taken (out of memory): the next turn */
    }
}

int engine__budget_applies_any(const engine *e, const engine_req *rq) {
    for (size_t i = 0; rq && rq->name && i < e->cfg->nbudgets; i++)
        if (budget_applies(e->cfg, &e->cfg->budgets[i], rq)) return 1;
    return 0;
}

int engine__budget_acquire(engine *e, const engine_req *rq, engine_acquire_cb cb, void *arg, engine_call **out) {
    if (!engine__budget_applies_any(e, rq)) return 1;
    /* A request without an estimate would reserve nothing. */
    if (rq->tokens <= 0 && (!rq->split || rq->input + rq->output <= 0)) return SL_EINVAL;
    budget_book *b = book_get(e);
    engine_call *c = calloc(1, sizeof(*c));
    budget_hold *h = calloc(1, sizeof(*h));
    if (!b || !c || !h) {
        free(c);
        free(h);
        return SL_ENOMEM;
    }
    if (price_for(e->cfg, rq->name, &h->price, h->currency) != 0) {
        /* The configuration forbids it (config.c budgets_finish). */
        free(c);
        free(h);
        return SL_EINVAL;
    }
    c->e = e;
    c->cb = cb;
    c->arg = arg;
    c->bh = h;
    c->state = CALL_BUDGET;
    c->start_ms = uv_now(e->loop);
    c->max_wait_ms = engine_max_wait(e, rq);
    if (c->max_wait_ms < 0) c->max_wait_ms = 0;
    uv_timer_init(e->loop, &c->timer);
    c->timer.data = c;
    c->timer_live = 1;
    snprintf(h->name, sizeof(h->name), "%s", rq->name);
    snprintf(h->lane, sizeof(h->lane), "%s", rq->lane ? rq->lane : "");
    snprintf(h->tenant, sizeof(h->tenant), "%s", rq->tenant ? rq->tenant : "");
    snprintf(h->tag, sizeof(h->tag), "%s", rq->tag ? rq->tag : "");
    snprintf(h->client, sizeof(h->client), "%s", rq->client ? rq->client : "");
    h->rq = *rq;
    h->rq.name = h->name;
    h->rq.lane = h->lane;
    h->rq.tenant = h->tenant;
    h->rq.tag = h->tag;
    h->rq.client = h->client;
    /* The input as the provider will count it: the caller's estimate at
     * the ratio the fleet learned (the dearest member's, for a group),
     * unless the caller counted it exactly. */
    double ratio = 1;
    const struct config_group *grp = config_group(e->cfg, rq->name);
    for (size_t i = 0; i < (grp ? grp->nmembers : 1); i++) {
        dep *d = dep_find(e, grp ? grp->members[i] : rq->name);
        if (d && d->est_ratio > ratio) ratio = d->est_ratio;
    }
    if (rq->exact) ratio = 1;
    long long input = rq->split ? (long long)ceil((double)rq->input * ratio) : -1;
    long long tokens = rq->split ? input + rq->output : (long long)ceil((double)rq->tokens * ratio);
    h->tokens = tokens;
    h->amount = budget_max_cost(&h->price, rq->split, tokens, input, rq->output);
    h->deadline = c->start_ms + (uint64_t)c->max_wait_ms;
    snprintf(h->rid, sizeof(h->rid), "%s:%s:%llu", e->agent_id, b->run, ++b->seq);
    outer_link(e, c);
    /* Asked in this turn's reserve call (the flush after the turn): an
     * answer never comes from within the call that asks. */
    ask(c);
    if (out) *out = c;
    return 0;
}

void engine__budget_cancel(engine_call *c) {
    engine *e = c->e;
    if (c->inner) {
        engine_cancel(c->inner); /* its callback will not run */
        e->stats.cancels--;      /* one cancel, counted by the outer call */
        c->inner = NULL;
        if (c->bh && strcmp(c->bh->rid, "-")) send_settle(e, c->bh->rid, 0, "");
        budget_done(c);
        return;
    }
    if (c->bh && c->bh->asking) return; /* the reservation's reply ends it (and gives back what it reserved) */
    /* Waiting to ask (again): nothing reserved. */
    unqueue(c);
    uv_timer_stop(&c->timer);
    budget_done(c);
}

void engine__budget_stop(engine *e) {
    budget_book *b = e->book;
    for (engine_call *c = b ? b->calls : NULL, *nx; c; c = nx) {
        nx = c->next;
        /* An inner call is answered by engine_stop's drain (on_inner); a
         * reservation in flight by its reply. */
        if (c->inner || (c->bh && c->bh->asking)) continue;
        unqueue(c);
        uv_timer_stop(&c->timer);
        budget_answer(c, SL_ECLOSING, NULL, NULL, SLUICE_MSG_CLOSING);
    }
}

/* ---- looks, for metrics and STATUS ---- */

static void on_look_reply(void *arg, redisReply *r, const char *err) {
    (void)err;
    engine *e = arg;
    budget_book *b = e->book;
    e->calls_out--;
    if (b) b->looking = 0;
    if (b && b->look_gen == b->gen && b->cfg == e->cfg && b->looks && r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements && i < e->cfg->nbudgets; i++) {
            budget_look *l = &b->looks[i];
            const char *f, *val;
            size_t pos = 0;
            while (wire_budget_field_next(r, i, &pos, &f, &val)) {
                long long n = atoll(val);
                if (!strcmp(f, "day")) snprintf(l->day, sizeof(l->day), "%s", val);
                else if (!strcmp(f, "month")) snprintf(l->month, sizeof(l->month), "%s", val);
                else if (!strcmp(f, "daily_limit")) l->v.limit[ENGINE_PERIOD_DAY] = n;
                else if (!strcmp(f, "monthly_limit")) l->v.limit[ENGINE_PERIOD_MONTH] = n;
                else if (!strcmp(f, "total_limit")) l->v.limit[ENGINE_PERIOD_TOTAL] = n;
                else if (!strcmp(f, "day_spent")) l->v.spent[ENGINE_PERIOD_DAY] = n;
                else if (!strcmp(f, "month_spent")) l->v.spent[ENGINE_PERIOD_MONTH] = n;
                else if (!strcmp(f, "total_spent")) l->v.spent[ENGINE_PERIOD_TOTAL] = n;
                else if (!strcmp(f, "day_reserved")) l->v.reserved[ENGINE_PERIOD_DAY] = n;
                else if (!strcmp(f, "month_reserved")) l->v.reserved[ENGINE_PERIOD_MONTH] = n;
                else if (!strcmp(f, "total_reserved")) l->v.reserved[ENGINE_PERIOD_TOTAL] = n;
                else if (!strcmp(f, "day_renew_ms")) l->v.renew_ms[0] = n;
                else if (!strcmp(f, "month_renew_ms")) l->v.renew_ms[1] = n;
                else if (!strcmp(f, "granted")) l->v.granted = (unsigned long long)n;
                else if (!strcmp(f, "sheds")) l->v.sheds = (unsigned long long)n;
                else if (!strcmp(f, "expired")) l->v.expired = (unsigned long long)n;
            }
            if (!wire_budget_listed(r, i)) continue;
            l->v.known = 1;
        }
    }
    engine__maybe_finish_stop(e);
}

void engine__budget_tick(engine *e) {
    budget_book *b = e->book;
    if (!e->cfg->nbudgets || e->stopping) return;
    if (!b) b = book_get(e);
    else b = book_get(e);
    if (!b) return;
    uint64_t now = uv_now(e->loop);
    /* Grants nobody settled: Redis charged them in full at their lease. */
    for (size_t i = 0; i < BUDGET_MAP; i++)
        for (budget_hold **p = &b->map[i]; *p;) {
            if ((*p)->expires <= now) {
                budget_hold *h = *p;
                *p = h->next;
                free(h);
            } else {
                p = &(*p)->next;
            }
        }
    if (b->looking || (b->looked_at && now - b->looked_at < BUDGET_LOOK_MS)) return;
    size_t nb = e->cfg->nbudgets > 64 ? 64 : e->cfg->nbudgets;
    size_t idx[64];
    for (size_t i = 0; i < nb; i++) idx[i] = i;
    int nkeys;
    char(*keys)[SCRIPTS_KEY_MAX] = budget_keys(e, idx, nb, &nkeys);
    if (!keys) return;
    wire_args a;
    wire_args_init(&a);
    budget_args_head(e, b, &a, "status", idx, nb);
    if (wire_args_done(&a, 0) == 0 && rrouter_ready(e->redis, keys[0]) &&
        rrouter_script_n(e->redis, SCRIPT_BUDGET, keys, nkeys, a.argc, a.argv, on_look_reply, e) == 0) {
        e->calls_out++;
        b->looking = 1;
        b->look_gen = b->gen;
        b->looked_at = now;
    }
    wire_args_free(&a);
    free(keys);
}

void engine__budget_view(const engine *e, size_t i, engine_budget_view *v) {
    const budget_book *b = e->book;
    const struct config_budget *cb = &e->cfg->budgets[i];
    memset(v, 0, sizeof(*v));
    if (b && b->cfg == e->cfg && b->looks) {
        *v = b->looks[i].v;
        v->day = b->looks[i].day;
        v->month = b->looks[i].month;
    } else {
        v->day = v->month = "";
    }
    v->name = cb->name;
    v->currency = cb->currency;
    v->warn_at = cb->warn_at;
    if (!v->known) {
        v->limit[ENGINE_PERIOD_DAY] = cb->daily_u;
        v->limit[ENGINE_PERIOD_MONTH] = cb->monthly_u;
        v->limit[ENGINE_PERIOD_TOTAL] = cb->total_u;
    }
}

int engine__budget_covers(const engine *e, size_t i, const char *deployment) {
    const struct config_budget *cb = &e->cfg->budgets[i];
    engine_req rq = {.name = deployment};
    if (cb->tenant[0] || cb->client[0]) {
        /* Scoped by who asks, not where: it can draw from any deployment
         * its deployment scope covers. */
        if (!cb->deployment[0]) return 1;
    }
    struct config_budget open = *cb;
    open.tenant = open.client = (char *)"";
    return budget_applies(e->cfg, &open, &rq);
}

void engine_foreach_budget(const engine *e, engine_budget_fn fn, void *ud) {
    for (size_t i = 0; i < e->cfg->nbudgets; i++) {
        engine_budget_view v;
        engine__budget_view(e, i, &v);
        fn(ud, &v);
    }
}

void engine_foreach_spend(const engine *e, engine_spend_fn fn, void *ud) {
    const budget_book *b = e->book;
    for (size_t i = 0; b && i < b->nspend; i++) {
        const spend_row *s = &b->spend[i];
        fn(ud, s->deployment, s->tenant, s->client, s->currency, s->spent, s->requests);
    }
}
