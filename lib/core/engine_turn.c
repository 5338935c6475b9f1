/* engine_turn: the calls waiting on one queue (a deployment's lane and
 * tenant, or a group) go in turn by caller: the call whose caller was
 * served longest ago goes first.
 *
 * A caller (engine_req.caller: a connection to the agent's socket or its
 * HTTP proxy) asks again when its last answer is in. By arrival alone, the
 * callers whose answers happened to take longer are served later every
 * time, fall a call or two behind the others, and a fleet's last calls run
 * one response time after another with the bucket idle between them
 * (anthropic-short-24: 94.3 % of the floor on seeds 2 and 8). By the time
 * each caller was last served, the one whose answer took longer goes first
 * among those waiting, and every caller is served once a round.
 *
 * A caller not served yet, and a call that names none, go by arrival. A
 * caller is forgotten ENGINE_TURN_FORGET_MS after it was last served: its
 * next call goes by its arrival, which is later than that and still ahead
 * of any caller served since. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stdlib.h>

typedef struct caller_turn {
    uint64_t id, seen_ms; /* seen: its last call's arrival or grant */
    double n;             /* its calls served, each a share of its calls out */
    size_t out;           /* its calls alive (waiting, asking, held) */
    struct caller_turn *next;
} caller_turn;

static size_t turn_bucket(uint64_t id) {
    id ^= id >> 33;
    id *= UINT64_C(0xff51afd7ed558ccd);
    id ^= id >> 33;
    return (size_t)(id & (ENGINE_TURN_BUCKETS - 1));
}

static caller_turn *turn_find(const engine *e, uint64_t id) {
    for (caller_turn *t = e->turns[turn_bucket(id)]; t; t = t->next)
        if (t->id == id) return t;
    return NULL;
}

/* The turn c takes: its caller's count, a call that names none at the
 * fewest of the callers waiting at the last pick. */
static double turn_key(const engine *e, const engine_call *c) {
    const caller_turn *t = c->caller ? turn_find(e, c->caller) : NULL;
    return t ? t->n : e->turn_floor;
}

engine_call *engine__list_next(engine *e, call_list *l) {
    engine_call *best = l->head;
    if (!best || !e->nturns) return best;
    double k = turn_key(e, best);
    size_t seen = 1;
    for (engine_call *c = best->next; c && seen < ENGINE_TURN_SCAN; c = c->next, seen++) {
        double ck = turn_key(e, c);
        if (ck < k) best = c, k = ck;
    }
    e->turn_floor = k;
    if (best != l->head) {
        e->stats.turns_passed++;
        /* It goes with the age of the call it passed, which goes with the
         * next one's, and so on to its own: the ages the queue shows Redis
         * (the wire's waited, which orders requests across agents) stay
         * those of its calls' arrivals. */
        uint64_t age = best->age_ms;
        for (engine_call *x = best->prev; x; x = x->prev) {
            uint64_t was = x->age_ms;
            x->age_ms = age;
            age = was;
        }
        best->age_ms = age;
    }
    return best;
}

/* Forgets the callers with no call alive and none for
 * ENGINE_TURN_FORGET_MS, at most once in that time. */
static void turn_sweep(engine *e, uint64_t now) {
    if (now - e->turns_swept_ms < ENGINE_TURN_FORGET_MS) return;
    e->turns_swept_ms = now;
    for (size_t b = 0; b < ENGINE_TURN_BUCKETS; b++)
        for (caller_turn **p = &e->turns[b]; *p;) {
            caller_turn *t = *p;
            if (!t->out && now - t->seen_ms >= ENGINE_TURN_FORGET_MS) {
                *p = t->next;
                free(t);
                e->nturns--;
            } else {
                p = &t->next;
            }
        }
}

void engine__turn_arrive(engine *e, engine_call *c) {
    if (!c->caller) return;
    uint64_t now = uv_now(e->loop);
    turn_sweep(e, now);
    caller_turn *t = turn_find(e, c->caller);
    if (!t) {
        /* Without memory the call goes at the fewest's turn: no error. */
        if (!(t = calloc(1, sizeof(*t)))) return;
        size_t b = turn_bucket(c->caller);
        t->id = c->caller;
        t->n = e->turn_floor;
        t->next = e->turns[b];
        e->turns[b] = t;
        e->nturns++;
    }
    t->out++;
    t->seen_ms = now;
    c->turn_counted = 1;
}

void engine__turn_leave(engine *e, engine_call *c) {
    if (!c->turn_counted) return;
    c->turn_counted = 0;
    caller_turn *t = turn_find(e, c->caller);
    if (t && t->out) t->out--;
}

void engine__turn_served(engine *e, const engine_call *c) {
    caller_turn *t = c->turn_counted ? turn_find(e, c->caller) : NULL;
    if (!t) return;
    /* A caller back after a pause starts at most ENGINE_TURN_CREDIT
     * behind the fewest waiting; a call counts as a share of the calls
     * its caller has out, so a connection carrying many callers' calls at
     * once has as many turns. */
    double lo = e->turn_floor - ENGINE_TURN_CREDIT;
    t->n = (t->n > lo ? t->n : lo) + 1.0 / (double)(t->out ? t->out : 1);
    t->seen_ms = uv_now(e->loop);
}

void engine__turn_free(engine *e) {
    for (size_t b = 0; b < ENGINE_TURN_BUCKETS; b++)
        for (caller_turn *t = e->turns[b], *nx; t; t = nx) {
            nx = t->next;
            free(t);
        }
    e->nturns = 0;
}
