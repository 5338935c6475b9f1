/* engine_turn: the calls waiting on one queue (a deployment's lane and
 * tenant, or a group) go in turn by caller: the call whose caller was
 * served fewest times there goes first.
 *
 * A caller (engine_req.caller: a connection to the agent's socket or its
 * HTTP proxy) asks again when its last answer is in. By arrival alone, the
 * callers whose answers happened to take longer are served later every
 * time, fall a call or two behind the others, and a fleet's last calls run
 * one response time after another with the bucket idle between them
 * (anthropic-short-24: 94.3 % of the floor on seeds 2 and 8). In turn,
 * the one whose answers took longer goes first among those waiting, and
 * every caller is served once a round.
 *
 * Counts are kept per caller and queue (the queue a call came to: a
 * deployment's lane and tenant, or a group's queue): a caller served
 * often on one deployment is not behind on another. A call counts as a
 * share of the calls its caller has out on that queue, so a connection
 * that carries many callers' calls at once has as many turns. A new
 * caller starts one above the fewest waiting (last in the round, so a
 * stream of new connections cannot pass a caller that keeps its own); a
 * caller's count is kept at most ENGINE_TURN_CREDIT below the most
 * served waiting when it is served (one long behind goes first for a few
 * calls); a caller with no call out is forgotten ENGINE_TURN_FORGET_MS
 * after its last. A call with no caller of the queue (none named, or a
 * group's call moved to a member) goes with the fewest, by its order. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stdlib.h>

typedef struct caller_turn {
    uint64_t id, tag; /* the caller and the queue (call_list.turn_tag) */
    uint64_t seen_ms; /* its last call's arrival or end */
    double n;         /* its calls served here, each a share of its calls out */
    size_t out;       /* its calls alive (waiting, asking, held) */
    struct caller_turn *next;
} caller_turn;

static size_t turn_bucket(uint64_t id, uint64_t tag) {
    uint64_t h = id ^ (tag * UINT64_C(0x9e3779b97f4a7c15));
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return (size_t)(h & (ENGINE_TURN_BUCKETS - 1));
}

static uint64_t list_tag(engine *e, call_list *l) {
    if (!l->turn_tag) l->turn_tag = ++e->turn_tags;
    return l->turn_tag;
}

/* c's caller's count on the queue tagged tag; -1 when c has none there. */
static double turn_count(const engine_call *c, uint64_t tag) {
    return c->turn && c->turn->tag == tag ? c->turn->n : -1;
}

static int overdue(const engine_call *c, uint64_t now) {
    if (c->route && c->route->gq) return c->route->deadline <= now;
    return engine__call_left_ms(c, now) < 0;
}

/* best, picked ahead of the calls from l's head, takes the oldest of
 * their ages; the calls from that one to best each take the next one's:
 * the ages the queue shows Redis stay those of its arrivals. */
static void take_oldest_age(call_list *l, engine_call *best) {
    engine_call *old = l->head;
    for (engine_call *x = l->head; x != best; x = x->next)
        if (x->age_ms < old->age_ms) old = x;
    if (old->age_ms >= best->age_ms) return;
    uint64_t age = best->age_ms;
    for (engine_call *x = best->prev;; x = x->prev) {
        uint64_t was = x->age_ms;
        x->age_ms = age;
        age = was;
        if (x == old) break;
    }
    best->age_ms = age;
}

engine_call *engine__list_next(engine *e, call_list *l, uint64_t now) {
    engine_call *head = l->head;
    if (!head || !e->nturns) return head;
    uint64_t tag = list_tag(e, l);
    /* The fewest and the most served to a caller of l waiting; an
     * overdue call first. */
    double least = -1, most = -1;
    size_t seen = 0;
    for (engine_call *c = head; c && seen < ENGINE_TURN_SCAN; c = c->next, seen++) {
        if (overdue(c, now)) return c;
        double n = turn_count(c, tag);
        if (n >= 0 && (least < 0 || n < least)) least = n;
        if (n > most) most = n;
    }
    if (least < 0) return head;
    l->turn_floor = least;
    /* The first call of the fewest (a call with no caller of l goes with
     * them): within the calls looked at, since the fewest is among them. */
    engine_call *best = head;
    while (turn_count(best, tag) > least) best = best->next;
    /* The credit is bounded on the scale of best's own queue: a group's
     * call moved to a member keeps its group count, which the member's
     * callers say nothing of. */
    if (turn_count(best, tag) >= 0) best->turn_top = most;
    if (best != head) {
        e->stats.turns_passed++;
        take_oldest_age(l, best);
    }
    return best;
}

/* Forgets the callers with no call out and none for
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

void engine__turn_arrive(engine *e, engine_call *c, call_list *l, uint64_t now) {
    if (!c->caller) return;
    uint64_t tag = list_tag(e, l);
    turn_sweep(e, now);
    size_t b = turn_bucket(c->caller, tag);
    caller_turn *t = e->turns[b];
    while (t && (t->id != c->caller || t->tag != tag)) t = t->next;
    if (!t) {
        /* Without memory the call goes with the fewest: no error. */
        if (!(t = calloc(1, sizeof(*t)))) return;
        t->id = c->caller;
        t->tag = tag;
        t->n = l->turn_floor + 1;
        t->next = e->turns[b];
        e->turns[b] = t;
        e->nturns++;
    }
    t->out++;
    t->seen_ms = now;
    c->turn = t;
}

void engine__turn_served(engine_call *c) {
    caller_turn *t = c->turn;
    if (!t || c->turn_inc > 0) return; /* counted once a call */
    double lo = c->turn_top - ENGINE_TURN_CREDIT, was = t->n;
    t->n = (t->n > lo ? t->n : lo) + 1.0 / (double)(t->out ? t->out : 1);
    c->turn_inc = t->n - was;
}

void engine__turn_unserve(engine_call *c) {
    if (!c->turn || c->turn_inc <= 0) return;
    c->turn->n -= c->turn_inc;
    c->turn_inc = 0;
}

void engine__turn_leave(engine_call *c, uint64_t now) {
    caller_turn *t = c->turn;
    if (!t) return;
    c->turn = NULL;
    if (t->out) t->out--;
    t->seen_ms = now;
}

void engine__turn_free(engine *e) {
    for (size_t b = 0; b < ENGINE_TURN_BUCKETS; b++)
        for (caller_turn *t = e->turns[b], *nx; t; t = nx) {
            nx = t->next;
            free(t);
        }
    e->nturns = 0;
}
