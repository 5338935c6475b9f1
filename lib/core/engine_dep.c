/* engine_dep: deployments (their configuration and rates as configured)
 * and the lane and tenant classes their callers queue in. */
#define _GNU_SOURCE
#include "engine_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- deployments ---------------------------------------------------------- */

dep *dep_find(engine *e, const char *name) {
    for (dep *d = e->deps; d; d = d->next)
        if (strcmp(d->name, name) == 0) return d;
    return NULL;
}

/* The Redis node serving this deployment is connected. */
int dep_ready(const dep *d) { return rrouter_ready(d->e->redis, d->keys[0]); }

/* The configured limit (per minute) and burst of dimension k of c; 0 when
 * the deployment does not have it. */
static void cfg_dim(const struct config_deployment *c, int k, double *limit, double *burst) {
    static const size_t lim_off[ENGINE_DIMS] = {
        offsetof(struct config_deployment, rpm), offsetof(struct config_deployment, tpm),
        offsetof(struct config_deployment, itpm), offsetof(struct config_deployment, otpm)};
    static const size_t burst_off[ENGINE_DIMS] = {offsetof(struct config_deployment, burst.requests),
                                                  offsetof(struct config_deployment, burst.tokens),
                                                  offsetof(struct config_deployment, burst.input_tokens),
                                                  offsetof(struct config_deployment, burst.output_tokens)};
    *limit = (double)*(const long long *)((const char *)c + lim_off[k]);
    *burst = (double)*(const long long *)((const char *)c + burst_off[k]);
}

/* Points d at its (new) configuration: the rates start as configured until
 * a settle reply says what the fleet runs at. */
void dep_set_cfg(dep *d, const struct config_deployment *cfg) {
    d->cfg = cfg;
    if (!cfg) return;
    for (int k = 0; k < ENGINE_DIMS; k++) {
        double limit, burst;
        cfg_dim(cfg, k, &limit, &burst);
        d->rates[k] = (engine_dim_rates){limit, limit, limit, 0, 0, 0, 1};
        d->burst_cfg[k] = burst;
    }
    dep_set_est_ratio(d, d->est_ratio);
}

/* The estimate ratio r (0: none seen) as d's dimensions charge it: the
 * dimensions that charge the prompt (tokens, input) at r, unless the
 * deployment's estimates are exact. */
void dep_set_est_ratio(dep *d, double r) {
    d->est_ratio = r;
    double v = r > 0 && d->cfg && d->cfg->estimate != CONFIG_ESTIMATE_EXACT ? r : 1;
    d->rates[ENGINE_DIM_TOKENS].estimate_ratio = v;
    d->rates[ENGINE_DIM_INPUT].estimate_ratio = v;
}

/* 1 when c counts input and output tokens apart. */
int engine__cfg_split(const struct config_deployment *c) { return c->itpm > 0 || c->otpm > 0; }

dep *dep_add(engine *e, const struct config_deployment *cfg) {
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
int dep_class(dep *d, const char *lane, const char *tenant) {
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

void engine__class_push(dep *d, engine_call *c) {
    engine__list_push(&d->classes[c->cls].q, c);
    d->npending++;
    d->e->stats.queued++;
}

void engine__class_push_front(dep *d, engine_call *c) {
    engine__list_push_front(&d->classes[c->cls].q, c);
    d->npending++;
    d->e->stats.queued++;
}

void engine__class_remove(dep *d, engine_call *c) {
    engine__list_remove(&d->classes[c->cls].q, c);
    d->npending--;
    d->e->stats.queued--;
}

/* Any call not yet sent (for fallback, reload and stop: order across
 * classes does not matter there). */
engine_call *dep_pop_any(dep *d) {
    for (size_t i = 0; i < d->nclasses; i++) {
        engine_call *c = d->classes[i].q.head;
        if (c) {
            engine__class_remove(d, c);
            return c;
        }
    }
    return NULL;
}

/* The lane's priority for ordering a batch (0 without lanes). */
long long engine__class_priority(const dep *d, const call_class *k) {
    const struct config_lane *l = d->cfg ? config_lane(d->cfg, k->lane) : NULL;
    return l ? l->priority : 0;
}

/* A shed for health (breaker open, out of quota) is news once per period:
 * it is logged when it starts, so an operator sees a member leave. */
void dep_health_seen(dep *d, const char *reason, long long retry_after_ms) {
    int why = engine_shed_reason_index(reason);
    int breaker = why == ENGINE_SHED_BREAKER, quota = why == ENGINE_SHED_QUOTA;
    if (!breaker && !quota) return;
    uint64_t now = uv_now(d->e->loop), until = now + (uint64_t)(retry_after_ms > 0 ? retry_after_ms : 0);
    uint64_t *seen = breaker ? &d->breaker_until : &d->quota_until;
    if (now > *seen)
        engine__elog(
            d->e, CONFIG_LOG_WARN, "deployment %s: %s for %lld ms; requests are shed with reason %s%s", d->name,
            breaker ? "circuit breaker open (server errors or timeouts past its threshold)" : "out of quota",
            retry_after_ms, reason, d->cfg && d->cfg->group_ ? " and its group routes to the other members" : "");
    if (until > *seen) *seen = until;
    if (breaker) d->e->stats.breaker_sheds++;
}
