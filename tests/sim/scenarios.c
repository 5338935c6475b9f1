/* scenarios: see scenarios.h. The limits are ordinary ones for each
 * provider (Azure's 6 RPM per 1000 TPM; tiers of the others' published
 * sizes); a neighbour's load is stated as a share of the token budget its
 * requests draw on. */
#include "scenarios.h"

#include <string.h>

/* A neighbour's typical request: 2000 English characters (500 tokens by
 * every provider's count) and max_tokens 300. */
static sim_neighbour nb_of(sim_nb_shape shape) {
    return (sim_neighbour){.shape = shape, .chars = 2000, .lang = SIM_LANG_EN, .max_tokens = 300, .tick_ms = 100};
}

static void add_nb(sim_world_cfg *c, sim_neighbour nb) {
    if (c->nneighbours < SIM_MAX_NEIGHBOURS) c->nb[c->nneighbours++] = nb;
}

/* Azure charges a neighbour's request 500 + 300 tokens. */
#define AZ_NB_TOKENS 800.0

static void azure_standard(sim_world_cfg *c) {
    sim_world_cfg_init(c, SIM_AZURE);
    c->tpm = 150000;
    c->rpm = 900;
}

static void azure_10s_only(sim_world_cfg *c) {
    azure_standard(c);
    c->azure_windows = SIM_AZ_WIN_10S;
}

static void azure_fixed_windows(sim_world_cfg *c) {
    azure_standard(c);
    c->window_mode = SIM_WINDOW_FIXED;
}

static void azure_paced_neighbour(sim_world_cfg *c) {
    azure_standard(c);
    sim_neighbour nb = nb_of(SIM_NB_PACED);
    nb.rate_per_min = 0.2 * c->tpm / AZ_NB_TOKENS; /* a fifth of the TPM */
    add_nb(c, nb);
}

static void azure_greedy_neighbour(sim_world_cfg *c) {
    azure_standard(c);
    sim_neighbour nb = nb_of(SIM_NB_GREEDY);
    nb.start_ms = 30000;
    nb.leave_ms = 90000;
    add_nb(c, nb);
}

/* The greedy neighbour: it takes every token it can, up to 30 %
 * of the rate; what the provider refuses it sends again on its next tick
 * (every 100 ms), so it grabs each refill before the fleet's next send. */
static void azure_greedy_30(sim_world_cfg *c) {
    azure_standard(c);
    sim_neighbour nb = nb_of(SIM_NB_GREEDY);
    nb.rate_per_min = 0.3 * c->tpm / AZ_NB_TOKENS;
    add_nb(c, nb);
}

static void azure_burst_neighbour(sim_world_cfg *c) {
    azure_standard(c);
    sim_neighbour nb = nb_of(SIM_NB_BURST);
    nb.start_ms = 20000;
    nb.burst = 40; /* 32000 tokens at once */
    add_nb(c, nb);
}

static void azure_periodic_neighbour(sim_world_cfg *c) {
    azure_standard(c);
    sim_neighbour nb = nb_of(SIM_NB_PERIODIC);
    nb.start_ms = 10000;
    nb.period_ms = 15000;
    nb.burst = 10; /* 32000 tokens a minute, in four lumps */
    add_nb(c, nb);
}

static void azure_neighbour_leaves(sim_world_cfg *c) {
    azure_standard(c);
    sim_neighbour nb = nb_of(SIM_NB_PACED);
    nb.rate_per_min = 0.4 * c->tpm / AZ_NB_TOKENS;
    nb.leave_ms = 60000;
    add_nb(c, nb);
}

static void azure_stray_429(sim_world_cfg *c) {
    azure_standard(c);
    static const double at[] = {10000, 25000, 40000, 55000};
    c->nstray = (int)(sizeof(at) / sizeof(at[0]));
    memcpy(c->stray_ms, at, sizeof(at));
    c->stray_retry_ms = 1000;
}

static void azure_real_below(sim_world_cfg *c) {
    azure_standard(c);
    c->real_factor = 0.8;
}

static void azure_real_above(sim_world_cfg *c) {
    azure_standard(c);
    c->real_factor = 1.2;
}

static void azure_limit_drops(sim_world_cfg *c) {
    azure_standard(c);
    c->change_at_ms = 60000;
    c->change_factor = 0.5;
}

static void azure_limit_rises(sim_world_cfg *c) {
    azure_standard(c);
    c->real_factor = 0.6;
    c->change_at_ms = 60000;
    c->change_factor = 1;
}

static void azure_rough_headers(sim_world_cfg *c) {
    azure_standard(c);
    c->hdr_omit_prob = 0.2;
    c->hdr_minus_one_prob = 0.1;
}

static void azure_release_at_end(sim_world_cfg *c) {
    azure_standard(c);
    c->azure_release_at_end = 1;
}

static void openai_standard(sim_world_cfg *c) {
    sim_world_cfg_init(c, SIM_OPENAI);
    c->rpm = 500;
    c->tpm = 200000;
}

static void openai_quantized(sim_world_cfg *c) {
    openai_standard(c);
    c->burst[SIM_DIM_REQUESTS] = c->rpm / 60; /* a minute enforced per second */
    c->burst[SIM_DIM_TOKENS] = c->tpm / 60;
}

static void anthropic_current(sim_world_cfg *c) {
    sim_world_cfg_init(c, SIM_ANTHROPIC);
    c->rpm = 1000;
    c->itpm = 450000;
    c->otpm = 90000;
    c->anthropic_output = SIM_OTPM_GENERATED;
}

static void anthropic_2025(sim_world_cfg *c) {
    anthropic_current(c);
    c->anthropic_output = SIM_OTPM_MAX_CORRECTED;
}

static void anthropic_per_second(sim_world_cfg *c) {
    anthropic_current(c);
    c->burst[SIM_DIM_REQUESTS] = c->rpm / 60;
}

static void anthropic_greedy_neighbour(sim_world_cfg *c) {
    anthropic_2025(c);
    sim_neighbour nb = nb_of(SIM_NB_GREEDY);
    nb.start_ms = 20000;
    nb.leave_ms = 80000;
    add_nb(c, nb);
}

static void bedrock_claude4(sim_world_cfg *c) {
    sim_world_cfg_init(c, SIM_BEDROCK);
    c->rpm = 200;
    c->tpm = 200000;
    c->bedrock_burndown = 5;
}

static void bedrock_burndown_1(sim_world_cfg *c) {
    bedrock_claude4(c);
    c->bedrock_burndown = 1;
}

static void gemini_standard(sim_world_cfg *c) {
    sim_world_cfg_init(c, SIM_GEMINI);
    c->rpm = 1000;
    c->itpm = 1000000;
    c->rpd = 10000;
}

static void gemini_rpd_spring(sim_world_cfg *c) {
    gemini_standard(c);
    c->rpd = 300;
    c->epoch_ms = INT64_C(1772956200000); /* 2026-03-07 23:50 PST; the next day has 23 hours */
}

static void gemini_rpd_autumn(sim_world_cfg *c) {
    gemini_standard(c);
    c->rpd = 300;
    c->epoch_ms = INT64_C(1793515800000); /* 2026-10-31 23:50 PDT; the next day has 25 hours */
}

static const sim_scenario scenarios[] = {
    {"azure-standard", "Azure at 150k TPM / 900 RPM, 1 s and 10 s sliding windows, nobody else", azure_standard},
    {"azure-10s-only", "Azure evaluating requests per 10 s only: a second's burst passes", azure_10s_only},
    {"azure-fixed-windows", "Azure's request windows aligned to the clock: two windows' worth at a boundary",
     azure_fixed_windows},
    {"azure-paced-neighbour", "another user of the key takes a fifth of the TPM, evenly", azure_paced_neighbour},
    {"azure-greedy-neighbour", "from 30 s to 90 s another user takes every token as it refills",
     azure_greedy_neighbour},
    {"azure-greedy-30", "another user takes every token it can, up to 30 % of the TPM", azure_greedy_30},
    {"azure-burst-neighbour", "another user sends 40 requests at once at 20 s", azure_burst_neighbour},
    {"azure-periodic-neighbour", "another user sends 10 requests every 15 s from 10 s", azure_periodic_neighbour},
    {"azure-neighbour-leaves", "another user takes 40 % of the TPM and stops at 60 s", azure_neighbour_leaves},
    {"azure-stray-429", "four isolated 429s with room to spare (late releases)", azure_stray_429},
    {"azure-real-below", "the real limits are 80 % of the configured ones", azure_real_below},
    {"azure-real-above", "the real limits are 120 % of the configured ones", azure_real_above},
    {"azure-limit-drops", "the real limits halve at 60 s", azure_limit_drops},
    {"azure-limit-rises", "the real limits are 60 % until 60 s, then as configured", azure_limit_rises},
    {"azure-rough-headers", "a fifth of the responses without rate-limit headers, a tenth with -1",
     azure_rough_headers},
    {"azure-release-at-end", "Azure giving the unused max_tokens back when the response ends", azure_release_at_end},
    {"openai-standard", "OpenAI at 200k TPM / 500 RPM, charging max(max_tokens, chars / 4)", openai_standard},
    {"openai-quantized", "OpenAI enforcing a minute's limits per second", openai_quantized},
    {"anthropic-current", "Anthropic, output counted as generated (charged when it ends)", anthropic_current},
    {"anthropic-2025", "Anthropic, max_tokens at admission corrected at the end", anthropic_2025},
    {"anthropic-per-second", "Anthropic enforcing its RPM per second", anthropic_per_second},
    {"anthropic-greedy-neighbour", "Anthropic (2025 rule) with a greedy user of the key from 20 s to 80 s",
     anthropic_greedy_neighbour},
    {"bedrock-claude4", "Bedrock reserving input + max_tokens, output burned down at 5x", bedrock_claude4},
    {"bedrock-burndown-1", "Bedrock for a model outside the 5x list", bedrock_burndown_1},
    {"gemini-standard", "Gemini: input-only TPM, wall-clock minutes, 10000 requests a day", gemini_standard},
    {"gemini-rpd-spring", "Gemini's day resets at Pacific midnight 10 min in; the next day has 23 h",
     gemini_rpd_spring},
    {"gemini-rpd-autumn", "Gemini's day resets at Pacific midnight 10 min in; the next day has 25 h",
     gemini_rpd_autumn},
};

size_t sim_scenario_count(void) { return sizeof(scenarios) / sizeof(scenarios[0]); }

const sim_scenario *sim_scenario_at(size_t i) { return i < sim_scenario_count() ? &scenarios[i] : NULL; }

const sim_scenario *sim_scenario_find(const char *name) {
    for (size_t i = 0; name && i < sim_scenario_count(); i++)
        if (strcmp(scenarios[i].name, name) == 0) return &scenarios[i];
    return NULL;
}

int sim_scenario_cfg(const char *name, sim_world_cfg *cfg) {
    const sim_scenario *s = sim_scenario_find(name);
    if (!s) return -1;
    s->fill(cfg);
    return 0;
}
