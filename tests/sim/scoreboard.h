/* scoreboard: every fleet scenario of issue 22 on fixed seeds, judged by
 * the provider world's own ledger (project issue 22, item 3).
 *
 * A scenario is a row of a table (scoreboard.c): a world (a scenarios.h
 * name and tweaks to its configuration), the governor's YAML as a user
 * would write it (the world's configured limits, the provider's style),
 * the traffic (agents, callers per agent, calls each, the prompt in
 * characters of a language, max output), faults at virtual times, and
 * the bounds it must meet. sb_run() runs one scenario on one seed: the
 * real engines and scripts (simfleet) send to the world; the figures come
 * from the world's ledger, never from the governor's beliefs:
 *   - attempts and 429s of the fleet;
 *   - failed: calls whose caller gave up (out of attempts, or not done by
 *     the scenario's deadline), a killed agent's callers left out;
 *   - makespan: the first to the last fleet request the world admitted;
 *   - the floor: per rate dimension, everything the world counted in the
 *     fleet's span (the fleet's charges with their corrections either
 *     way, as the provider's own count ends; the neighbours' admitted
 *     requests within the span) less the burst, passed at the quota (the
 *     lower of the configured and the real limit, as it changes); the
 *     largest over dimensions; when the calls outgrow a daily limit, the
 *     time to the provider's next day and the rest at the rate;
 *   - the largest 10 s window of any rate dimension (fleet and
 *     neighbours, net of give-backs) against 10 s of the quota at its
 *     start plus the burst. A figure above 100 % of the floor, or a
 *     window above 1x, means more went through than the quota: the
 *     world's deeper bucket (Azure's holds a minute) let it pass;
 *   - p99 wait (slot - acquire) of the granted attempts, over all and
 *     per lane (the lane the caller named; "-" for none);
 *   - with tenants: each tenant's share of the fleet's admitted requests
 *     from t = 0 until the first tenant's last admission (while every
 *     tenant had demand), against its weight's share;
 *   - with a group: the deployment the callers ask is a group whose
 *     members are worlds of their own; the figures are summed over the
 *     members' ledgers, the floor passes at the sum of their quotas, the
 *     window is the largest of any member;
 *   - idle cost: Redis commands per agent per second from t = 0 to the
 *     row's idle_ms.
 * A scenario the controller misses today is marked expected-failure with
 * today's figure: a miss prints XFAIL, a pass prints XPASS and fails the
 * run (strict), so the list stays true.
 *
 * Depends on simfleet (the engines, a redis_fixture) and the worlds
 * (world.h, scenarios.h). One run at a time per process (uvsim). */
#ifndef SLUICE_SIM_SCOREBOARD_H
#define SLUICE_SIM_SCOREBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "redis_fixture.h"

typedef struct sb_scenario sb_scenario;

#define SB_MAX_LANES 4
#define SB_MAX_TENANTS 4
#define SB_MAX_MEMBERS 4

/* A lane's or a tenant's figure. name "-": the default. */
typedef struct sb_lane_figure {
    const char *name;
    size_t granted;
    double p99_wait_ms;
} sb_lane_figure;

typedef struct sb_tenant_figure {
    const char *name;
    size_t admitted;            /* requests the world admitted until share_until_ms */
    double share_pct, want_pct; /* of all tenants' admitted; want: weight / sum */
} sb_tenant_figure;

/* One scenario on one seed. -1 for a figure not measured. */
typedef struct sb_result {
    uint64_t seed;
    size_t attempts, throttled;             /* the fleet's, in the world's ledger */
    size_t attempts_after, throttled_after; /* from the bound's after_ms */
    int failed, done;
    double makespan_ms, floor_ms, floor_pct; /* floor_pct: floor / makespan x 100 */
    double window_x;                         /* largest window (window_len_ms) / quota */
    const char *window_dim;
    double window_at_ms; /* where the largest window starts (virtual ms) */
    double p99_wait_ms;
    sb_lane_figure lanes[SB_MAX_LANES]; /* in the order first granted */
    int nlanes;
    sb_tenant_figure tenants[SB_MAX_TENANTS]; /* the row's tenants, in its order */
    int ntenants;
    double share_until_ms;                  /* the tenants' window: [0, this) */
    double share_err_pct;                   /* the largest |share / want - 1|, x 100; -1 */
    size_t member_admitted[SB_MAX_MEMBERS]; /* a group's: fleet requests per member */
    int nmembers;
    double idle_cmds;      /* Redis commands per agent per second to idle_ms, -1 */
    double rate_after_pct; /* the rate_after bound's figure, -1 */
    /* From the end of a cut (SB_UNBLACKHOLE) to its agent back on Redis
     * (connected again, engine_stats.redis_up), -1. */
    double back_ms;
    double real_ms;
    int missed;          /* bounds missed */
    char why[160];       /* the first missed bound, "" */
    const char *verdict; /* "PASS", "FAIL", "XFAIL", "XPASS" */
} sb_result;

size_t sb_count(void);
const sb_scenario *sb_at(size_t i); /* NULL past the end */
const sb_scenario *sb_find(const char *name);
const char *sb_name(const sb_scenario *s);
const char *sb_world(const sb_scenario *s);
const char *sb_what(const sb_scenario *s);
/* The expected failure's note with today's figure, or NULL. */
const char *sb_xfail(const sb_scenario *s);

/* Runs s on seed against the started fixture. Returns 0 (r filled, its
 * verdict set) or -1 (the simulator failed: no verdict). */
int sb_run(const sb_scenario *s, uint64_t seed, redis_fixture *fx, sb_result *r);

/* One line for r, as the scoreboard prints it, into buf. */
void sb_format(const sb_scenario *s, const sb_result *r, char *buf, size_t n);

#endif
