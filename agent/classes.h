/* classes: the engine's per (deployment, lane, tenant) counters summed by
 * lane and by tenant, and its per group counters, for INFO and the
 * metrics endpoint.
 *
 * classes_collect() takes a snapshot: one row per (deployment, lane) and
 * one per (deployment, tenant), each the sum of the engine classes
 * (engine_foreach_class) of that lane or tenant, sorted by deployment,
 * then name. Rows are seeded from the configuration, so every configured
 * lane and tenant has a row (zeros until it sees a request) and a counter
 * series exists before its first increment:
 *   - lanes: every lane of every deployment that has lanes, and any other
 *     class with a lane (one a reload removed);
 *   - tenants: every tenant of every deployment that has tenants, plus its
 *     "default" class (where unknown tenants go), and any class whose
 *     tenant is not "default" (one a reload removed). A deployment without
 *     tenants has no tenant rows: all its traffic is "default", the same
 *     as the deployment's totals.
 *
 * Depends on engine and config. Loop thread only (it reads the engine).
 * Ownership: the snapshot owns its rows; classes_free() releases them. */
#ifndef SLUICE_CLASSES_H
#define SLUICE_CLASSES_H

#include <stddef.h>

#include "config.h"
#include "engine.h"

typedef struct classes_row {
    char deployment[CONFIG_NAME_MAX + 1];
    char name[CONFIG_NAME_MAX + 1]; /* the lane's or the tenant's */
    engine_class_stats st;          /* summed, the queued gauge too */
} classes_row;

typedef struct classes {
    classes_row *lanes;
    size_t nlanes;
    classes_row *tenants;
    size_t ntenants;
} classes;

/* Fills *out with a snapshot of e's classes. Returns 0, or SL_ENOMEM
 * (then *out is empty and needs no free). */
int classes_collect(const engine *e, classes *out);

/* Frees the rows of c (not c itself) and empties it. NULL is a no-op. */
void classes_free(classes *c);

/* One group's figures (engine_foreach_group) with its members in priority
 * order: member_grants[i] is the grants on members[i]. */
typedef struct classes_group {
    char name[CONFIG_NAME_MAX + 1];
    size_t nmembers; /* 0 for a group a reload removed */
    char members[CONFIG_GROUP_MAX][CONFIG_NAME_MAX + 1];
    engine_group_stats st;
} classes_group;

/* A snapshot of e's groups: every configured group, in file order (zeros
 * until it sees a request, so its series exist from the start), then any
 * group with figures that a reload removed. Returns 0 with *out (free()
 * it; NULL when *n is 0) or SL_ENOMEM. */
int classes_groups(const engine *e, classes_group **out, size_t *n);

#endif
