#include "mock_ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_map.h"

#define MOCK_LEDGER_OTHER "(other)"

typedef struct adjust_list {
    double *ms;
    int64_t *v;
    uint64_t *id;
    size_t n, cap;
    int truncated;
} adjust_list;

typedef struct ledger_entry {
    mock_counts c;
    /* Deployments only: accept times and what each charged per bucket,
     * and the output give-backs. */
    double *accept_ms;
    uint32_t *accept_tokens, *accept_input, *accept_output;
    uint64_t *accept_id;
    size_t n_accepts, cap_accepts;
    int truncated;
    double *refund_ms;
    uint32_t *refund;
    uint64_t *refund_id;
    size_t n_refunds, cap_refunds;
    int refunds_truncated;
    /* The corrections at the end of a call, signed, per MOCK_ADJUST_*: the
     * token bucket (Bedrock: input + output x burndown against input +
     * max_tokens) and the output bucket (Anthropic's current rule: the
     * output generated against the 1 taken at admission). */
    adjust_list adj[MOCK_ADJUST_KINDS];
} ledger_entry;

struct mock_ledger {
    mock_counts totals;
    mock_map deployments;
    mock_map clients;
    mock_map credentials; /* fingerprint -> counts, like clients */
    size_t max_clients, max_accepts;
    double since_ms;
};

static void counts_zero(mock_counts *c) {
    memset(c, 0, sizeof(*c));
    c->first_accept_ms = c->last_accept_ms = -1;
}

static void entry_free(void *p) {
    ledger_entry *e = p;
    if (!e) return;
    free(e->accept_ms);
    free(e->accept_tokens);
    free(e->accept_input);
    free(e->accept_output);
    free(e->accept_id);
    free(e->refund_ms);
    free(e->refund);
    free(e->refund_id);
    for (int k = 0; k < MOCK_ADJUST_KINDS; k++) {
        free(e->adj[k].ms);
        free(e->adj[k].v);
        free(e->adj[k].id);
    }
    free(e);
}

mock_ledger *mock_ledger_new(size_t max_clients, size_t max_accepts) {
    mock_ledger *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    counts_zero(&l->totals);
    mock_map_init(&l->deployments);
    mock_map_init(&l->clients);
    mock_map_init(&l->credentials);
    l->max_clients = max_clients;
    l->max_accepts = max_accepts;
    return l;
}

void mock_ledger_free(mock_ledger *l) {
    if (!l) return;
    mock_map_free(&l->deployments, entry_free);
    mock_map_free(&l->clients, entry_free);
    mock_map_free(&l->credentials, entry_free);
    free(l);
}

static ledger_entry *entry_get(mock_map *m, const char *key) {
    ledger_entry *e = mock_map_get(m, key);
    if (e) return e;
    e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    counts_zero(&e->c);
    if (mock_map_put(m, key, e) != 0) {
        free(e);
        return NULL;
    }
    return e;
}

/* The entry of key in a map capped at max entries (clients, credentials). */
static ledger_entry *capped_get(mock_map *m, size_t max, const char *key) {
    ledger_entry *e = mock_map_get(m, key);
    if (e) return e;
    /* One slot stays free for "(other)". */
    if (m->count + 1 >= max) key = MOCK_LEDGER_OTHER;
    return entry_get(m, key);
}

static void counts_add(mock_counts *c, mock_outcome o, double t_ms, const mock_charge *ch) {
    c->requests++;
    switch (o) {
    case MOCK_ACCEPTED:
        c->accepted++;
        c->tokens_charged += ch->charged;
        c->tokens_reported += ch->reported;
        if (c->first_accept_ms < 0) c->first_accept_ms = t_ms;
        c->last_accept_ms = t_ms;
        break;
    case MOCK_NO_QUOTA:
        c->insufficient_quota++;
        c->status_429++;
        break;
    case MOCK_RATE_LIMITED: c->status_429++; break;
    case MOCK_UNAVAILABLE: c->status_503++; break;
    case MOCK_BAD_REQUEST: c->status_400++; break;
    case MOCK_NOT_FOUND: c->status_404++; break;
    case MOCK_OTHER_ERROR: c->other_errors++; break;
    case MOCK_NO_CREDIT:
        c->insufficient_quota++;
        c->status_400++;
        break;
    case MOCK_INJECTED_429:
        c->injected_429++;
        c->status_429++;
        break;
    }
}

static uint32_t u32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

/* Grows a list to cap elements: 0, or -1 (the list is unchanged). */
static int grow_ms(double **p, size_t cap) {
    double *n = realloc(*p, cap * sizeof(*n));
    if (!n) return -1;
    *p = n;
    return 0;
}

static int grow_u32(uint32_t **p, size_t cap) {
    uint32_t *n = realloc(*p, cap * sizeof(*n));
    if (!n) return -1;
    *p = n;
    return 0;
}

static int grow_u64(uint64_t **p, size_t cap) {
    uint64_t *n = realloc(*p, cap * sizeof(*n));
    if (!n) return -1;
    *p = n;
    return 0;
}

static int entry_add_accept(mock_ledger *l, ledger_entry *e, double t_ms, const mock_charge *ch) {
    if (e->n_accepts >= l->max_accepts) {
        e->truncated = 1;
        return 0;
    }
    if (e->n_accepts == e->cap_accepts) {
        size_t cap = e->cap_accepts ? e->cap_accepts * 2 : 64;
        if (grow_ms(&e->accept_ms, cap) || grow_u32(&e->accept_tokens, cap) || grow_u32(&e->accept_input, cap) ||
            grow_u32(&e->accept_output, cap) || grow_u64(&e->accept_id, cap))
            return -1;
        e->cap_accepts = cap;
    }
    e->accept_ms[e->n_accepts] = t_ms;
    e->accept_tokens[e->n_accepts] = u32(ch->tokens);
    e->accept_input[e->n_accepts] = u32(ch->input);
    e->accept_output[e->n_accepts] = u32(ch->output);
    e->accept_id[e->n_accepts] = ch->id;
    e->n_accepts++;
    return 0;
}

int mock_ledger_record(mock_ledger *l, const char *deployment, const char *client, mock_outcome o, double t_ms,
                       const mock_charge *ch, mock_ledger_ref *ref) {
    static const mock_charge none;
    int rc = 0;
    ledger_entry *d = NULL, *c;
    if (!ch) ch = &none;
    counts_add(&l->totals, o, t_ms, ch);
    if (deployment) {
        d = entry_get(&l->deployments, deployment);
        if (d) {
            counts_add(&d->c, o, t_ms, ch);
            if (o == MOCK_ACCEPTED && entry_add_accept(l, d, t_ms, ch) != 0) rc = -1;
        } else {
            rc = -1;
        }
    }
    c = capped_get(&l->clients, l->max_clients, client);
    if (c) counts_add(&c->c, o, t_ms, ch);
    else rc = -1;
    if (ref) {
        ref->deployment = d;
        ref->client = c;
        ref->credential = NULL;
    }
    return rc;
}

int mock_ledger_credential(mock_ledger *l, const char *credential, mock_outcome o, double t_ms, const mock_charge *ch,
                           mock_ledger_ref *ref) {
    static const mock_charge none;
    ledger_entry *e = capped_get(&l->credentials, l->max_clients, credential);
    if (ref) ref->credential = e;
    if (!e) return -1;
    counts_add(&e->c, o, t_ms, ch ? ch : &none);
    return 0;
}

void mock_ledger_refund(mock_ledger *l, const mock_ledger_ref *ref, double t_ms, uint64_t amount, uint64_t id) {
    ledger_entry *e = ref->deployment;
    if (!e) return;
    if (e->n_refunds >= l->max_accepts) {
        e->refunds_truncated = 1;
        return;
    }
    if (e->n_refunds == e->cap_refunds) {
        size_t cap = e->cap_refunds ? e->cap_refunds * 2 : 64;
        if (grow_ms(&e->refund_ms, cap) || grow_u32(&e->refund, cap) || grow_u64(&e->refund_id, cap)) return;
        e->cap_refunds = cap;
    }
    e->refund_ms[e->n_refunds] = t_ms;
    e->refund[e->n_refunds] = u32(amount);
    e->refund_id[e->n_refunds] = id;
    e->n_refunds++;
}

void mock_ledger_adjust(mock_ledger *l, const mock_ledger_ref *ref, mock_adjust kind, double t_ms, int64_t amount,
                        uint64_t id) {
    ledger_entry *e = ref->deployment;
    ledger_entry *c[3] = {ref->deployment, ref->client, ref->credential};
    l->totals.tokens_charged += (uint64_t)amount; /* unsigned wrap: adds a negative amount */
    for (int i = 0; i < 3; i++)
        if (c[i]) c[i]->c.tokens_charged += (uint64_t)amount;
    if (!e || kind < 0 || kind >= MOCK_ADJUST_KINDS) return;
    adjust_list *a = &e->adj[kind];
    if (a->n >= l->max_accepts) {
        a->truncated = 1;
        return;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int64_t *v = realloc(a->v, cap * sizeof(*v));
        if (!v) return;
        a->v = v;
        if (grow_ms(&a->ms, cap) || grow_u64(&a->id, cap)) return;
        a->cap = cap;
    }
    a->ms[a->n] = t_ms;
    a->v[a->n] = amount;
    a->id[a->n] = id;
    a->n++;
}

void mock_ledger_abandoned(mock_ledger *l, const mock_ledger_ref *ref) {
    ledger_entry *d = ref->deployment, *c = ref->client, *k = ref->credential;
    l->totals.abandoned++;
    if (d) d->c.abandoned++;
    if (c) c->c.abandoned++;
    if (k) k->c.abandoned++;
}

static void map_reset(mock_map *m) {
    for (mock_map_entry *me = m->first; me; me = me->next) {
        ledger_entry *e = me->value;
        counts_zero(&e->c);
        e->n_accepts = 0;
        e->truncated = 0;
        e->n_refunds = 0;
        e->refunds_truncated = 0;
        for (int k = 0; k < MOCK_ADJUST_KINDS; k++) e->adj[k].n = 0, e->adj[k].truncated = 0;
    }
}

void mock_ledger_reset(mock_ledger *l, double now_ms) {
    counts_zero(&l->totals);
    map_reset(&l->deployments);
    map_reset(&l->clients);
    map_reset(&l->credentials);
    l->since_ms = now_ms;
}

void mock_ledger_totals(const mock_ledger *l, mock_counts *out) { *out = l->totals; }

int mock_ledger_deployment(const mock_ledger *l, const char *deployment, mock_counts *out) {
    const ledger_entry *e = mock_map_get(&l->deployments, deployment);
    if (!e) return -1;
    *out = e->c;
    return 0;
}

static json_t *ms_or_null(double ms) { return ms < 0 ? json_null() : json_real(ms); }

static json_t *counts_json(const mock_counts *c) {
    return json_pack("{sI sI sI sI sI sI sI sI sI sI sI sI so so}", "requests", (json_int_t)c->requests, "accepted",
                     (json_int_t)c->accepted, "status_429", (json_int_t)c->status_429, "insufficient_quota",
                     (json_int_t)c->insufficient_quota, "injected_429", (json_int_t)c->injected_429, "status_503",
                     (json_int_t)c->status_503, "status_400", (json_int_t)c->status_400, "status_404",
                     (json_int_t)c->status_404, "other_errors", (json_int_t)c->other_errors, "abandoned",
                     (json_int_t)c->abandoned, "tokens_charged", (json_int_t)c->tokens_charged, "tokens_reported",
                     (json_int_t)c->tokens_reported, "first_accept_ms", ms_or_null(c->first_accept_ms),
                     "last_accept_ms", ms_or_null(c->last_accept_ms));
}

/* The per-deployment lists: accepts (time, request id and charge per
 * bucket) and the output give-backs (time, amount, the accept's request
 * id), each in time order. */
static int entry_lists(json_t *o, const ledger_entry *e) {
    json_t *t = json_array(), *id = json_array(), *k = json_array(), *in = json_array(), *out = json_array();
    json_t *rt = json_array(), *r = json_array(), *rid = json_array();
    if (json_object_set_new(o, "accept_ms", t) != 0 || json_object_set_new(o, "accept_id", id) != 0 ||
        json_object_set_new(o, "accept_tokens", k) != 0 || json_object_set_new(o, "accept_input", in) != 0 ||
        json_object_set_new(o, "accept_output", out) != 0 ||
        json_object_set_new(o, "accepts_truncated", json_boolean(e->truncated)) != 0 ||
        json_object_set_new(o, "output_refund_ms", rt) != 0 || json_object_set_new(o, "output_refund", r) != 0 ||
        json_object_set_new(o, "output_refund_id", rid) != 0 ||
        json_object_set_new(o, "refunds_truncated", json_boolean(e->refunds_truncated)) != 0)
        return -1;
    static const char *const kind[MOCK_ADJUST_KINDS] = {"tokens", "output"};
    int truncated = 0;
    for (int j = 0; j < MOCK_ADJUST_KINDS; j++) {
        const adjust_list *al = &e->adj[j];
        char name[32];
        json_t *at = json_array(), *a = json_array(), *aid = json_array();
        snprintf(name, sizeof(name), "%s_adjust_ms", kind[j]);
        if (json_object_set_new(o, name, at) != 0) return -1;
        snprintf(name, sizeof(name), "%s_adjust", kind[j]);
        if (json_object_set_new(o, name, a) != 0) return -1;
        snprintf(name, sizeof(name), "%s_adjust_id", kind[j]);
        if (json_object_set_new(o, name, aid) != 0) return -1;
        truncated |= al->truncated;
        for (size_t i = 0; i < al->n; i++)
            if (json_array_append_new(at, json_real(al->ms[i])) != 0 ||
                json_array_append_new(a, json_integer((json_int_t)al->v[i])) != 0 ||
                json_array_append_new(aid, json_integer((json_int_t)al->id[i])) != 0)
                return -1;
    }
    if (json_object_set_new(o, "adjusts_truncated", json_boolean(truncated)) != 0) return -1;
    for (size_t i = 0; i < e->n_accepts; i++)
        if (json_array_append_new(t, json_real(e->accept_ms[i])) != 0 ||
            json_array_append_new(id, json_integer((json_int_t)e->accept_id[i])) != 0 ||
            json_array_append_new(k, json_integer(e->accept_tokens[i])) != 0 ||
            json_array_append_new(in, json_integer(e->accept_input[i])) != 0 ||
            json_array_append_new(out, json_integer(e->accept_output[i])) != 0)
            return -1;
    for (size_t i = 0; i < e->n_refunds; i++)
        if (json_array_append_new(rt, json_real(e->refund_ms[i])) != 0 ||
            json_array_append_new(r, json_integer(e->refund[i])) != 0 ||
            json_array_append_new(rid, json_integer((json_int_t)e->refund_id[i])) != 0)
            return -1;
    return 0;
}

static json_t *map_json(const mock_map *m, int with_accepts) {
    json_t *obj = json_object();
    if (!obj) return NULL;
    for (const mock_map_entry *me = m->first; me; me = me->next) {
        const ledger_entry *e = me->value;
        if (e->c.requests == 0 && e->c.abandoned == 0) continue;
        json_t *o = counts_json(&e->c);
        if (!o) goto fail;
        if (with_accepts && entry_lists(o, e) != 0) {
            json_decref(o);
            goto fail;
        }
        if (json_object_set_new(obj, me->key, o) != 0) goto fail;
    }
    return obj;
fail:
    json_decref(obj);
    return NULL;
}

json_t *mock_ledger_json(const mock_ledger *l) {
    return json_pack("{sf so so so so}", "since_ms", l->since_ms, "totals", counts_json(&l->totals), "deployments",
                     map_json(&l->deployments, 1), "clients", map_json(&l->clients, 0), "credentials",
                     map_json(&l->credentials, 0));
}
