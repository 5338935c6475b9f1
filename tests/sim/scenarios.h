/* scenarios: the library of named provider worlds (issue 22), one row
 * each: a provider, its configured limits, and what makes the world hard
 * (neighbours, stray 429s, a real limit below or above the configured one
 * or changing mid-run, rough headers, an output rule, a Pacific day
 * across a DST change). A fleet scenario picks a world by name and
 * configures the governor with the world's configured limits (cfg.rpm,
 * tpm, itpm, otpm, rpd); the world counts by its real ones.
 *
 * Like world.c, it includes nothing of lib/ or lua/. */
#ifndef SLUICE_SIM_SCENARIOS_H
#define SLUICE_SIM_SCENARIOS_H

#include <stddef.h>

#include "world.h"

typedef struct sim_scenario {
    const char *name; /* "azure-greedy-neighbour" */
    const char *what; /* one sentence */
    void (*fill)(sim_world_cfg *cfg);
} sim_scenario;

size_t sim_scenario_count(void);
/* Borrowed, static; NULL past the end / for an unknown name. */
const sim_scenario *sim_scenario_at(size_t i);
const sim_scenario *sim_scenario_find(const char *name);

/* Fills *cfg with the named world (sim_world_cfg_init() first, then the
 * row's settings). Returns 0, or -1 for an unknown name (*cfg untouched). */
int sim_scenario_cfg(const char *name, sim_world_cfg *cfg);

#endif
