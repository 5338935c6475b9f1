/* classes: see classes.h. */
#define _POSIX_C_SOURCE 200809L
#include "classes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

typedef struct row_list {
    classes_row *rows;
    size_t n, cap;
    int err;
} row_list;

/* The row of (deployment, name), added with zeros when missing; NULL on
 * ENOMEM (and list->err set). Linear: a deployment has a few lanes and at
 * most a few hundred tenants, and this runs per INFO or scrape only. */
static classes_row *row_get(row_list *l, const char *deployment, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->rows[i].deployment, deployment) && !strcmp(l->rows[i].name, name)) return &l->rows[i];
    if (l->err) return NULL;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        classes_row *nr = realloc(l->rows, cap * sizeof(*nr));
        if (!nr) {
            l->err = 1;
            return NULL;
        }
        l->rows = nr;
        l->cap = cap;
    }
    classes_row *r = &l->rows[l->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->deployment, sizeof(r->deployment), "%s", deployment);
    snprintf(r->name, sizeof(r->name), "%s", name);
    return r;
}

static void add_stats(engine_class_stats *to, const engine_class_stats *st) {
    to->acquires += st->acquires;
    to->grants += st->grants;
    to->sheds += st->sheds;
    to->deferrals += st->deferrals;
    to->tokens += st->tokens;
    for (int b = 0; b <= ENGINE_WAIT_BUCKETS; b++) to->wait_hist[b] += st->wait_hist[b];
    to->wait_sum_ms += st->wait_sum_ms;
    to->queued += st->queued;
    to->answered += st->answered;
    to->within += st->within;
}

typedef struct collect_ctx {
    const config *cfg;
    row_list lanes, tenants;
} collect_ctx;

static void on_class(void *ud, const char *deployment, const char *lane, const char *tenant,
                     const engine_class_stats *st) {
    collect_ctx *c = ud;
    if (lane[0]) {
        classes_row *r = row_get(&c->lanes, deployment, lane);
        if (r) add_stats(&r->st, st);
    }
    const struct config_deployment *d = config_deployment(c->cfg, deployment);
    if ((d && d->ntenants > 0) || strcmp(tenant, "default") != 0) {
        classes_row *r = row_get(&c->tenants, deployment, tenant);
        if (r) add_stats(&r->st, st);
    }
}

static int row_cmp(const void *a, const void *b) {
    const classes_row *x = a, *y = b;
    int c = strcmp(x->deployment, y->deployment);
    return c ? c : strcmp(x->name, y->name);
}

int classes_collect(const engine *e, classes *out) {
    memset(out, 0, sizeof(*out));
    collect_ctx c;
    memset(&c, 0, sizeof(c));
    c.cfg = engine_config(e);
    for (size_t i = 0; i < c.cfg->ndeployments; i++) {
        const struct config_deployment *d = &c.cfg->deployments[i];
        for (size_t k = 0; k < d->nlanes; k++) row_get(&c.lanes, d->name, d->lanes[k].name);
        for (size_t k = 0; k < d->ntenants; k++) row_get(&c.tenants, d->name, d->tenants[k].name);
        if (d->ntenants > 0) row_get(&c.tenants, d->name, "default");
    }
    engine_foreach_class(e, on_class, &c);
    if (c.lanes.err || c.tenants.err) {
        free(c.lanes.rows);
        free(c.tenants.rows);
        return SL_ENOMEM;
    }
    if (c.lanes.n) qsort(c.lanes.rows, c.lanes.n, sizeof(classes_row), row_cmp);
    if (c.tenants.n) qsort(c.tenants.rows, c.tenants.n, sizeof(classes_row), row_cmp);
    out->lanes = c.lanes.rows;
    out->nlanes = c.lanes.n;
    out->tenants = c.tenants.rows;
    out->ntenants = c.tenants.n;
    return 0;
}

void classes_free(classes *c) {
    if (!c) return;
    free(c->lanes);
    free(c->tenants);
    memset(c, 0, sizeof(*c));
}

/* ---- groups ---------------------------------------------------------------------- */

typedef struct group_list {
    classes_group *rows;
    size_t n, cap;
    int err;
} group_list;

static classes_group *group_row(group_list *l, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->rows[i].name, name)) return &l->rows[i];
    if (l->err) return NULL;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        classes_group *nr = realloc(l->rows, cap * sizeof(*nr));
        if (!nr) {
            l->err = 1;
            return NULL;
        }
        l->rows = nr;
        l->cap = cap;
    }
    classes_group *r = &l->rows[l->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    return r;
}

static void on_group(void *ud, const char *group, const engine_group_stats *st) {
    classes_group *r = group_row(ud, group);
    if (r) r->st = *st;
}

int classes_groups(const engine *e, classes_group **out, size_t *n) {
    *out = NULL;
    *n = 0;
    const config *cfg = engine_config(e);
    group_list l = {0};
    for (size_t i = 0; i < cfg->ngroups; i++) {
        const struct config_group *g = &cfg->groups[i];
        classes_group *r = group_row(&l, g->name);
        for (size_t k = 0; r && k < g->nmembers && k < CONFIG_GROUP_MAX; k++) {
            snprintf(r->members[k], sizeof(r->members[k]), "%s", g->members[k]);
            r->nmembers++;
        }
    }
    engine_foreach_group(e, on_group, &l);
    if (l.err) {
        free(l.rows);
        return SL_ENOMEM;
    }
    *out = l.rows;
    *n = l.n;
    return 0;
}
