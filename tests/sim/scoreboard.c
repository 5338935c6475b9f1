/* scoreboard: see scoreboard.h. The table of scenarios first, then the
 * run and the judge. */
#define _GNU_SOURCE
#include "scoreboard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "scenarios.h"
#include "simfleet.h"
#include "world.h"
#include "world_send.h"
#include "engine.h"
#include "redis_fixture.h"

enum {
    SB_REDIS_STOP = 1,
    SB_REDIS_RESTART,
    SB_BLACKHOLE,
    SB_UNBLACKHOLE,
    SB_DESCHEDULE,
    SB_KILL,
    SB_REDIS_RTT,  /* agent: the rtt's min in ms, ms: its max in ms (0, 0: back to 200..1000 us) */
    SB_REDIS_SLOW, /* ms: Redis' time per batch, in ms (0: back to 20 us) */
    SB_LEAVE       /* agent leaves gracefully; ms: its successor (-1: the others) */
};

typedef struct sb_fault {
    double at_ms;
    int kind, agent;
    double ms; /* deschedule */
} sb_fault;

#define SB_MAX_FAULTS 8

/* The bounds; a zero field is not checked. */
typedef struct sb_bounds {
    double max_429_pct;    /* of the fleet's attempts (after after_ms) */
    double after_ms;       /* 429s counted from here (virtual ms) */
    int max_429;           /* a count instead of a share (0: not checked) */
    double min_floor_pct;  /* floor / makespan */
    double max_window_x;   /* largest window (window_len_ms) / quota */
    double window_from_ms; /* windows that start from here (0: t = 0) */
    double max_p99_wait_ms;
    /* The rate the world charged (fleet and neighbours, the binding
     * dimension) from rate_from_ms to rate_to_ms (0: the fleet's last
     * admission), against the quota. */
    double rate_from_ms, min_rate_pct, rate_to_ms;
    /* The p99 wait of one lane's granted attempts. */
    const char *lane;
    double max_lane_p99_ms;
    /* Each tenant's share of the admitted requests while every tenant had
     * demand: within this many % (relative) of its weight's share. */
    double max_share_err_pct;
    /* Redis commands per agent per second from t = 0 to idle_ms. */
    double max_idle_cmds;
    double max_back_ms; /* the cut agent back on Redis after the cut ends */
    int max_failed;     /* calls that may fail (agent.fail: hold refuses; 0: none) */
} sb_bounds;

/* Callers beyond the row's own (which name no lane or tenant): on every
 * agent (or one), `callers` callers of `calls` calls each, in a lane and as a
 * tenant (NULL: none named), from start_ms plus a seeded 0..jitter_ms,
 * think_ms between calls. weight: the tenant's configured weight (the
 * row's yaml_extra says it to the governor; the judge reads it here). */
typedef struct sb_class {
    const char *lane, *tenant;
    int callers, calls;
    double start_ms, jitter_ms, think_ms;
    long long max_wait_ms; /* 0: 300000 as the row's; -1: the lane's */
    double weight;
    int only_agent;  /* 0: on every agent; k: on agent k - 1 only */
    int max_tokens;  /* 0: the row's */
    long long chars; /* 0: the row's; else this class's prompt (its estimate chars / 4) */
} sb_class;

#define SB_MAX_CLASSES 8

/* What some rows have beyond the rest: lanes, tenants, a group, idle. */
typedef struct sb_more {
    sb_class classes[SB_MAX_CLASSES];
    int nclasses;
    /* A group: the callers' deployment d is a group of nmembers members
     * d1, d2, ... in priority order, each a world of its own: the row's
     * world with its limits x member_scale[i] (group_extra: more of the
     * group's keys, indented 4; the row's yaml_extra is not used). */
    double member_scale[SB_MAX_MEMBERS];
    int nmembers;
    const char *group_extra;
    /* The idle cost's span: from t = 0 to idle_ms (0: not measured). */
    double idle_ms;
    /* The responses carry no usage (a stream without include_usage and
     * the proxy's stream_usage: off): settles say only the headers. */
    int no_usage;
    /* More agent: keys, indented 2 (agent.fail: hold). */
    const char *agent_extra;
    long long redis_timeout_ms; /* 0: simfleet's 250 */
    double agent_start_ms[8];   /* when each agent starts (0: at once) */
    int cancel_permille;        /* the row's callers cancel (sim_caller_spec) */
    /* The workload's language changes at lang_at_ms (0: never) to lang2. */
    double lang_at_ms;
    sim_lang lang2;
    /* Prompts per caller: the world is sent estimate x 4 characters
     * (classes with their own chars). */
    int per_caller_chars;
    /* Tenants' shares counted from here (0: t = 0): a tenant that arrives late. */
    double share_from_ms;
    /* A group's first member only: its world tweaked (a limit change). */
    void (*member0_tweak)(sim_world_cfg *c);
} sb_more;

struct sb_scenario {
    const char *name, *world, *what;
    void (*tweak)(sim_world_cfg *c); /* NULL: the world as scenarios.c has it */
    const char *style;               /* azure, openai, anthropic, bedrock, gemini, custom */
    const char *yaml_extra;          /* more deployment keys, indented 4 */
    int agents, callers, calls;      /* callers per agent */
    sim_lang lang;
    long long chars, max_tokens;
    sb_fault faults[SB_MAX_FAULTS];
    int nfaults;
    double deadline_ms; /* 0: 600 s */
    sb_bounds b;
    /* An expected failure: today's figure (NULL: expected to pass). */
    const char *xfail;
    const sb_more *more; /* NULL: none of it */
};

/* ---- world tweaks ---- */

static void paced_30(sim_world_cfg *c) {
    /* The issue's paced neighbour takes 30 % of the rate (the world's row
     * has a fifth). */
    c->nb[0].rate_per_min = 0.3 * c->tpm / 800.0;
}

static void small_rpm(sim_world_cfg *c) {
    c->rpm = 60;
    c->tpm = 1000000;
}

static void one_stray(sim_world_cfg *c) {
    /* One isolated 429 at 25 s, with room to spare. */
    c->nstray = 1;
    c->stray_ms[0] = 25000;
}

static void half_count(sim_world_cfg *c) {
    /* The provider's tokenizer counts an English character as an eighth
     * of a token: half of the callers' chars / 4. */
    c->tokens_per_char[SIM_LANG_EN] = 0.125;
}

static void cjk_3_5(sim_world_cfg *c) {
    /* 0.875 tokens a CJK character: 3.5 times the callers' chars / 4. */
    c->tokens_per_char[SIM_LANG_CJK] = 0.875;
}

static void short_answers(sim_world_cfg *c) {
    /* The issue's Anthropic case: prompts of ~300 tokens, max_tokens
     * 1000, answers of ~200 (0.15..0.25 of max), an output bucket three
     * max_tokens deep. */
    c->out_lo = 0.15;
    c->out_hi = 0.25;
    c->burst[SIM_DIM_OUTPUT] = 3000;
}

static void short_answers_tight(sim_world_cfg *c) {
    /* The same answers at a fifth of the output rate, where six callers
     * waiting on their answers fill the bucket (at 90 000 OTPM they
     * cannot: that row is bound by their own latencies). */
    short_answers(c);
    c->otpm = 18000;
}

static void lane_answers(sim_world_cfg *c) {
    /* Answers as long as their task, not their max_tokens: 150..250
     * tokens whatever the cap (so a lane asking max_tokens 1000 uses a
     * fifth of it, one asking 250 three fifths to all), in the issue's
     * bucket three max_tokens deep. */
    c->out_tokens_lo = 150;
    c->out_tokens_hi = 250;
    c->burst[SIM_DIM_OUTPUT] = 3000;
}

/* ---- situations the first library did not name (a red-team review) ---- */

static void rt_dip_restore(sim_world_cfg *c) {
    /* The provider lowers the limit by 35 % at 40 s and says so in its
     * headers, then restores it at 80 s. */
    c->change_at_ms = 40000;
    c->change_factor = 0.65;
    c->change2_at_ms = 80000;
    c->change2_factor = 1;
}

static void rt_dip_restore_openai(sim_world_cfg *c) {
    c->change_at_ms = 30000;
    c->change_factor = 0.6;
    c->change2_at_ms = 60000;
    c->change2_factor = 1;
}

static void rt_drop_openai(sim_world_cfg *c) {
    /* The drop alone (azure-limit-drops' OpenAI twin). */
    c->change_at_ms = 30000;
    c->change_factor = 0.6;
}

static void rt_openai_periodic(sim_world_cfg *c) {
    /* OpenAI with a neighbour bursting 20 (500 + 300 tokens each) every
     * 15 s from 10 s. */
    sim_neighbour nb = {.shape = SIM_NB_PERIODIC,
                        .chars = 2000,
                        .lang = SIM_LANG_EN,
                        .max_tokens = 300,
                        .start_ms = 10000,
                        .period_ms = 15000,
                        .burst = 20};
    c->nb[c->nneighbours++] = nb;
}

static void rt_long_streams(sim_world_cfg *c) {
    /* Long streaming answers: 8..15 s each. */
    c->lat_lo_ms = 8000;
    c->lat_hi_ms = 15000;
}

static void rt_openai_below(sim_world_cfg *c) { c->real_factor = 0.7; }

static void rt_openai_rises(sim_world_cfg *c) {
    c->real_factor = 0.6;
    c->change_at_ms = 60000;
    c->change_factor = 1;
}

static void rt_periodic_20(sim_world_cfg *c) {
    /* 20 requests every 15 s from 10 s (16 000 tokens a lump, 43 % of
     * the rate on average). */
    c->nb[0].burst = 20;
}

static void rt_ramp(sim_world_cfg *c) {
    /* A neighbour ramping from 0 to 50 % of the rate in four steps of
     * 12.5 % (10, 25, 40, 55 s): four paced users of the key. */
    for (int k = 0; k < 4; k++) {
        sim_neighbour nb = {.shape = SIM_NB_PACED,
                            .chars = 2000,
                            .lang = SIM_LANG_EN,
                            .max_tokens = 300,
                            .start_ms = 10000 + 15000 * k,
                            .rate_per_min = 0.125 * c->tpm / 800.0};
        c->nb[c->nneighbours++] = nb;
    }
}

static void rt_paced_sparse(sim_world_cfg *c) {
    /* One paced neighbour at 12.5 % of the rate from t = 0: a request of
     * 800 tokens every 2.56 s (sparser than one a second). */
    c->nb[0].rate_per_min = 0.125 * c->tpm / 800.0;
}

static void rt_overload(sim_world_cfg *c) {
    /* Anthropic overloaded (529) for 10 s from 30 s: not a quota signal. */
    c->overload_from_ms = 30000;
    c->overload_to_ms = 40000;
}

static void rt_long_answers(sim_world_cfg *c) {
    /* The issue's short answers (200 of 1000), then for 20 s from 40 s
     * answers of 800..1000: the learned output share is stale. */
    short_answers(c);
    c->long_from_ms = 40000;
    c->long_to_ms = 60000;
    c->out_lo2 = 0.8;
    c->out_hi2 = 1.0;
}

static void rt_long_answers_max(sim_world_cfg *c) {
    /* The same, the default answers (0.5..1.0 of max) and 20 s at the max. */
    c->long_from_ms = 40000;
    c->long_to_ms = 60000;
    c->out_lo2 = 1.0;
    c->out_hi2 = 1.0;
}

/* ---- the table ---- */

#define NO_FAULTS                                                                                                      \
    {                                                                                                                  \
        { 0, 0, 0, 0 }                                                                                                 \
    }
#define AZ_TRAFFIC 3, 50, 2, SIM_LANG_EN, 2000, 500
#define AZ_RPM_TRAFFIC 3, 50, 4, SIM_LANG_EN, 400, 50
/* The 60 RPM rows (small_rpm): 3 agents x 5 callers x 20 calls. */
#define SMALL_TRAFFIC 3, 5, 20, SIM_LANG_EN, 400, 50
#define ANTH_TRAFFIC(per_agent, calls) 3, per_agent, calls, SIM_LANG_EN, 2000, 1000
#define STD_AZ                                                                                                         \
    { .max_429_pct = 1, .min_floor_pct = 97, .max_window_x = 1.02, .max_p99_wait_ms = 300000 }
/* The issue bounds a fault by its 10 s window; the floor share is the
 * scoreboard's own (a fault may cost about a tenth). */
#define FAULT_B                                                                                                        \
    { .max_429_pct = 1, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000 }
/* A fault that ends at t (ms): as FAULT_B, and the fleet back at >= 95 % of
 * the rate from 2 s after it (issue 23: a healed path used within 1 s). */
#define FAULT_BACK(t)                                                                                                  \
    {                                                                                                                  \
        .max_429_pct = 1, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000,                        \
        .rate_from_ms = (t) + 2000, .min_rate_pct = 95                                                                 \
    }
/* The issue's partition row: as FAULT_BACK, and the cut agent back on
 * Redis within 1 s of the path's heal. */
#define FAULT_BACK_1S(t)                                                                                               \
    {                                                                                                                  \
        .max_429_pct = 1, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000,                        \
        .rate_from_ms = (t) + 2000, .min_rate_pct = 95, .max_back_ms = 1000                                            \
    }
#define STD_95                                                                                                         \
    { .max_429_pct = 1, .min_floor_pct = 95, .max_window_x = 1.02, .max_p99_wait_ms = 300000 }

/* Lanes: a batch lane saturating the quota from 1 s on every agent, and
 * one interactive caller (on agent 1) from 1..6 s, twelve calls 2 s
 * apart, with the lane's max wait (5 s): one at a time, so its wait is
 * the lanes' promise alone (behind lower lanes: one emission interval
 * plus lane_step_ms), not a queue of its own lane. */
#define LANES_YAML                                                                                                     \
    "    lanes:\n      interactive: { priority: 0, max_wait_ms: 5000 }\n"                                              \
    "      batch: { priority: 1, max_wait_ms: 600000 }\n"
static const sb_more fail_hold_more = {.agent_extra = "  fail: hold\n"};
/* Two lanes of one priority whose answers use different shares of their
 * max output: chat asks max_tokens 1000 (answers a fifth of it), batch
 * 250 (three fifths to all). */
#define ANTH_LANES_YAML "    lanes:\n      chat: { priority: 0 }\n      batch: { priority: 0 }\n"
static const sb_more anth_lanes_more = {
    .classes = {{.lane = "chat", .callers = 8, .calls = 13, .start_ms = 1000, .jitter_ms = 200, .max_tokens = 1000},
                {.lane = "batch", .callers = 8, .calls = 13, .start_ms = 1000, .jitter_ms = 200, .max_tokens = 250}},
    .nclasses = 2};
static const sb_more lanes_more = {
    .classes = {{.lane = "batch", .callers = 20, .calls = 2, .start_ms = 1000, .jitter_ms = 200},
                {.lane = "interactive",
                 .callers = 1,
                 .calls = 12,
                 .start_ms = 1000,
                 .jitter_ms = 5000,
                 .think_ms = 2000,
                 .max_wait_ms = -1,
                 .only_agent = 2}},
    .nclasses = 2};

/* Tenants weighted 3:2:1, each with the same demand on every agent. */
#define TENANTS_YAML                                                                                                   \
    "    tenants:\n      heavy: { weight: 3 }\n      medium: { weight: 2 }\n      light: { weight: 1 }\n"
static const sb_more tenants_more = {
    .classes = {{.tenant = "heavy", .callers = 8, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .weight = 3},
                {.tenant = "medium", .callers = 8, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .weight = 2},
                {.tenant = "light", .callers = 8, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .weight = 1}},
    .nclasses = 3};

/* A group of three Azure deployments: 150k, 90k and 60k TPM. */
static const sb_more group_more = {.member_scale = {1, 0.6, 0.4}, .nmembers = 3};

/* Idle: one call an agent at 1 s, nothing until 61 s, one more each. */
/* The partition row's traffic: agents 0 and 1 saturate with a short queue,
 * agent 2 has one caller, arriving with the cut at 30 s. */
static const sb_more blackhole_idle_more = {
    .classes = {{.callers = 4, .calls = 25, .start_ms = 1000, .jitter_ms = 200, .only_agent = 1},
                {.callers = 4, .calls = 25, .start_ms = 1000, .jitter_ms = 200, .only_agent = 2},
                {.callers = 1, .calls = 12, .start_ms = 30000, .only_agent = 3}},
    .nclasses = 3};

/* The same, request-bound as test_partition's idle-hole (10 callers on
 * each of two agents keep about 1.3 s of slots granted ahead): when the
 * cut agent comes back, the slots the others were granted at the held
 * rate (two thirds) are re-timed to the whole rate at once (heartbeat.lua,
 * the return), not released at the held spacing until that backlog
 * drains. */
static const sb_more blackhole_idle_rpm_more = {
    .classes = {{.callers = 20, .calls = 23, .start_ms = 1000, .jitter_ms = 200, .only_agent = 1},
                {.callers = 20, .calls = 23, .start_ms = 1000, .jitter_ms = 200, .only_agent = 2},
                {.callers = 1, .calls = 12, .start_ms = 30000, .only_agent = 3}},
    .nclasses = 3};

/* Issue 23: where the usage is missing, the remaining counts are the only
 * evidence of what the prompts cost. */
static const sb_more no_usage_more = {.no_usage = 1};

static const sb_more idle_more = {.classes = {{.callers = 1, .calls = 1, .start_ms = 1000, .jitter_ms = 200},
                                              {.callers = 1, .calls = 1, .start_ms = 61000, .jitter_ms = 200}},
                                  .nclasses = 2,
                                  .idle_ms = 61000};

/* Calibrated estimates (issue 23): <= 1 % 429s after the first 5 s and
 * at most 5 in all, >= 95 % of the floor, and the window as everywhere. */
#define CAL_B                                                                                                          \
    {                                                                                                                  \
        .max_429_pct = 1, .after_ms = 5000, .max_429 = 5, .min_floor_pct = 95, .max_window_x = 1.02,                   \
        .max_p99_wait_ms = 300000                                                                                      \
    }

/* A neighbour that leaves at 60 s: >= 95 % of the rate from 70 s, and the
 * windows from 5 s (nothing tells of a neighbour there from t = 0 before
 * two readings). */
#define LEAVES_B                                                                                                       \
    {                                                                                                                  \
        .max_429_pct = 2, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .rate_from_ms = 70000, \
        .min_rate_pct = 95, .window_from_ms = 5000                                                                     \
    }

/* A fleet that starts cold on prompts its callers' chars / 4 misjudges grants
 * just in time until the ratio is learned (docs/configuration.md). */
#define CAL_YAML "    estimate_learn_horizon_ms: 250\n"

static const sb_more rt_t1000_more = {.redis_timeout_ms = 1000};
static const sb_more rt_cancel_more = {.cancel_permille = 200};
/* Scale up: agents 0..2 with 50 callers x 2 calls from 1 s; agents 3..5
 * join at 40 s, their 25 callers x 2 calls each from 41 s. */
static const sb_more rt_scale_up_more = {
    .classes = {{.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .only_agent = 1},
                {.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .only_agent = 2},
                {.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .only_agent = 3},
                {.callers = 25, .calls = 2, .start_ms = 41000, .jitter_ms = 200, .only_agent = 4},
                {.callers = 25, .calls = 2, .start_ms = 41000, .jitter_ms = 200, .only_agent = 5},
                {.callers = 25, .calls = 2, .start_ms = 41000, .jitter_ms = 200, .only_agent = 6}},
    .nclasses = 6,
    .agent_start_ms = {0, 0, 0, 40000, 40000, 40000}};
/* A rolling restart: agents 0..2 carry the callers; each is replaced in
 * turn by a new agent (3, 4, 5) that starts as it leaves. */
static const sb_more rt_rolling_more = {
    .classes = {{.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .only_agent = 1},
                {.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .only_agent = 2},
                {.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .only_agent = 3}},
    .nclasses = 3,
    .agent_start_ms = {0, 0, 0, 30000, 45000, 60000}};
/* OpenAI, TPM-bound: a batch lane flooding from 1 s on every agent (20
 * callers x 5 calls each), one interactive caller on agent 1 (12 calls
 * 2 s apart, the lane's max wait 5 s), as the lanes row. */
static const sb_more rt_openai_lanes_more = {
    .classes = {{.lane = "batch", .callers = 20, .calls = 5, .start_ms = 1000, .jitter_ms = 200},
                {.lane = "interactive",
                 .callers = 1,
                 .calls = 12,
                 .start_ms = 1000,
                 .jitter_ms = 5000,
                 .think_ms = 2000,
                 .max_wait_ms = -1,
                 .only_agent = 2}},
    .nclasses = 2};

/* ---- a second red-team pass (session 29) ---- */

static void rt2_rise_above(sim_world_cfg *c) {
    /* The provider raises the limit to 1.5x the configured at 40 s and
     * says so in its headers: the configured limit is still the user's. */
    c->change_at_ms = 40000;
    c->change_factor = 1.5;
}
static void rt2_short_rise_above(sim_world_cfg *c) {
    short_answers(c);
    rt2_rise_above(c);
}
static void rt2_below_then_above(sim_world_cfg *c) {
    /* 60 % of the configured until 40 s, then 1.5x (both in the headers). */
    c->real_factor = 0.6;
    c->change_at_ms = 40000;
    c->change_factor = 1.5;
}
static void rt2_drop_half_40(sim_world_cfg *c) {
    c->change_at_ms = 40000;
    c->change_factor = 0.5;
}
static void rt2_drop_half_30(sim_world_cfg *c) {
    c->change_at_ms = 30000;
    c->change_factor = 0.5;
}
/* English to CJK at 40 s (3.2x the callers' chars / 4), and back. */
static const sb_more rt2_to_cjk_more = {.lang_at_ms = 40000, .lang2 = SIM_LANG_CJK};
static const sb_more rt2_to_en_more = {.lang_at_ms = 40000, .lang2 = SIM_LANG_EN};
/* Heavy-tailed prompts: on each agent 19 callers of 200-token prompts and
 * one of 20 000 (5 % of the calls), estimates exact. */
static const sb_more rt2_heavy_tail_more = {
    .classes = {{.callers = 19, .calls = 4, .start_ms = 1000, .jitter_ms = 200, .chars = 800},
                {.callers = 1, .calls = 4, .start_ms = 1000, .jitter_ms = 200, .chars = 80000}},
    .nclasses = 2,
    .per_caller_chars = 1};
/* Callers whose max wait is 2 s against a queue of about a minute: one on
 * each agent, 2 calls from 5 s (shed with the queue's length as the hint,
 * they come back when it has drained). */
static const sb_more rt2_short_wait_more = {
    .classes = {{.callers = 50, .calls = 2, .start_ms = 1000, .jitter_ms = 200},
                {.callers = 1, .calls = 2, .start_ms = 5000, .jitter_ms = 1000, .max_wait_ms = 2000}},
    .nclasses = 2};
/* One tenant floods: light (weight 1) with 30 callers an agent, heavy
 * (weight 3) 2, medium (2) 4. */
static const sb_more rt2_tenant_flood_more = {
    .classes = {{.tenant = "heavy", .callers = 2, .calls = 20, .start_ms = 1000, .jitter_ms = 200, .weight = 3},
                {.tenant = "medium", .callers = 4, .calls = 10, .start_ms = 1000, .jitter_ms = 200, .weight = 2},
                {.tenant = "light", .callers = 30, .calls = 2, .start_ms = 1000, .jitter_ms = 200, .weight = 1}},
    .nclasses = 3};
/* A group whose primary's real limit halves at 30 s (said in headers). */
static const sb_more rt2_group_drop_more = {
    .member_scale = {1, 0.6, 0.4}, .nmembers = 3, .member0_tweak = rt2_drop_half_30};

/* A group whose primary answers 429 with no rate-limit headers for 10 s
 * from 30 s (a storm: its own load, charged nothing). */
static void rt2_storm_429(sim_world_cfg *c) {
    c->overload_from_ms = 30000;
    c->overload_to_ms = 40000;
    c->overload_status = 429;
}
static const sb_more rt2_group_storm_more = {
    .member_scale = {1, 0.6, 0.4}, .nmembers = 3, .member0_tweak = rt2_storm_429};
/* The language changes with a short queue: 6 callers an agent, 20 calls
 * each, English until 40 s, then CJK. */
static const sb_more rt2_to_cjk_steady_more = {.lang_at_ms = 40000, .lang2 = SIM_LANG_CJK};

/* Tenants 3:1, the light one flooding from 1 s (a minute queued), the
 * heavy one arriving at 40 s. */
#define TENANTS2_YAML "    tenants:\n      heavy: { weight: 3 }\n      light: { weight: 1 }\n"
static const sb_more rt2_tenant_late_more = {
    .classes = {{.tenant = "light", .callers = 30, .calls = 3, .start_ms = 1000, .jitter_ms = 200, .weight = 1},
                {.tenant = "heavy", .callers = 4, .calls = 10, .start_ms = 40000, .jitter_ms = 200, .weight = 3}},
    .nclasses = 2,
    .share_from_ms = 40000};

static const sb_scenario table[] = {
    {"azure-standard", "azure-standard", "Azure standard: 1 s and 10 s request windows, nobody else", NULL, "azure",
     NULL, AZ_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-10s-only", "azure-10s-only", "Azure evaluating requests per 10 s only", NULL, "azure", NULL, AZ_TRAFFIC,
     NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-fixed-windows", "azure-fixed-windows", "Azure's request windows aligned to the clock", NULL, "azure", NULL,
     AZ_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    /* The same worlds request-bound (short prompts: 150 tokens a request
     * against 900 RPM), so Azure's 1 s / 10 s request windows decide. */
    {"azure-standard-rpm", "azure-standard", "Azure standard, request-bound: 150 tokens a request", NULL, "azure",
     "    requests_window_ms: 1000\n", AZ_RPM_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-10s-only-rpm", "azure-10s-only", "Azure 10 s only, request-bound", NULL, "azure", NULL, AZ_RPM_TRAFFIC,
     NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-fixed-windows-rpm", "azure-fixed-windows", "Azure fixed windows, request-bound", NULL, "azure", NULL,
     AZ_RPM_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-stray-429",
     "azure-stray-429",
     "one isolated 429 at 25 s costs <= 3 % of the makespan",
     one_stray,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 1, .min_floor_pct = 94, .max_window_x = 1.02, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    /* A neighbour there from t = 0, the provider's bucket full: nothing
     * tells of it before two readings of the remaining counts (a second
     * each); the windows are judged from 5 s on, as azure-real-below's. */
    {"azure-paced-neighbour",
     "azure-paced-neighbour",
     "a neighbour takes 30 % of the rate, evenly (windows from 5 s)",
     paced_30,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 2, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .window_from_ms = 5000},
     "window up to 1.021x (passes on 9 of seeds 1..10, recorded; 25 of 11..40; 6 of 1..10 before a conversion to a "
     "faster rate kept what the held sends would not give back as credit): a window holds one of the neighbour's "
     "requests more or less (3 % of it)",
     NULL},
    {"azure-greedy-neighbour",
     "azure-greedy-neighbour",
     "a neighbour takes every token from 30 s to 90 s (the whole rate: nothing is left)",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 5, .min_floor_pct = 90, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    {"azure-greedy-30",
     "azure-greedy-30",
     "the issue's greedy neighbour: every token it can, 30 % of the rate",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 2, .min_floor_pct = 90, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    {"azure-burst-neighbour",
     "azure-burst-neighbour",
     "a one-off burst of 40 at 20 s: <= 5 429s, within 5 %",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429 = 5, .min_floor_pct = 95, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    {"azure-periodic-neighbour",
     "azure-periodic-neighbour",
     "a neighbour bursts 10 every 15 s",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 2, .min_floor_pct = 90, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    {"azure-neighbour-leaves", "azure-neighbour-leaves",
     "a 40 % neighbour leaves at 60 s: >= 95 % from 70 s (windows from 5 s)", NULL, "azure", NULL, AZ_TRAFFIC,
     NO_FAULTS, 0, 0, LEAVES_B,
     "96.1..98.2 % of the rate after it left; passes on 9 of seeds 1..10 (recorded), 24 of 11..40; seed 1's "
     "window is 1.035x. 5 of 1..10 (10 of 11..40) before a full bucket's reading gave back the schedule's part "
     "past the held sends and a conversion to a faster rate kept what they would not give back as credit",
     NULL},
    /* Nothing tells the real limit before the first response's headers:
     * 429s are judged from t = 0 (none allowed beyond 1 %), the windows
     * from 5 s on, after the first responses. */
    {"azure-real-below",
     "azure-real-below",
     "the real limit is 20 % below the configured, said in headers (windows from 5 s)",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 1, .min_floor_pct = 95, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .window_from_ms = 5000},
     NULL,
     NULL},
    {"azure-real-above", "azure-real-above", "the real limit is 20 % above (the configured is the quota)", NULL,
     "azure", NULL, AZ_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-limit-drops",
     "azure-limit-drops",
     "the real limit halves at 60 s",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 2, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    {"azure-limit-rises",
     "azure-limit-rises",
     "the real limit is 60 % until 60 s, then as configured (windows from 5 s)",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 1, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .window_from_ms = 5000},
     NULL,
     NULL},
    {"azure-rough-headers", "azure-rough-headers", "a fifth of the responses without headers, a tenth with -1", NULL,
     "azure", NULL, AZ_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"azure-release-at-end", "azure-release-at-end", "Azure giving unused max_tokens back at the end", NULL, "azure",
     NULL, AZ_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ,
     "86.7..87.2 % of the floor: style azure never refunds, this world gives unused tokens back", NULL},
    {"azure-release-refund", "azure-release-at-end", "the same, the deployment configured refund: true", NULL, "azure",
     "    refund: true\n", AZ_TRAFFIC, NO_FAULTS, 0, 0, STD_AZ, NULL, NULL},
    {"cjk-estimate", "azure-standard", "CJK prompts: the world counts 0.8 a char, the callers estimate chars/4", NULL,
     "azure", CAL_YAML, 3, 50, 1, SIM_LANG_CJK, 2000, 500, NO_FAULTS, 0, 0, CAL_B, NULL, NULL},
    {"cjk-no-usage", "azure-standard",
     "CJK prompts (0.8 a char against chars/4) and no usage in the responses: the headers alone", NULL, "azure",
     CAL_YAML, 3, 50, 1, SIM_LANG_CJK, 2000, 500, NO_FAULTS, 0, 0, CAL_B,
     "window up to 1.071x (passes on 9 of seeds 1..10, 38 of 1..40; 1 of 10 before the ratio was read from the "
     "headers): on seed 9 the reading that accepts the first came 2.9 s after it, and what it charged for the first "
     "seconds came too late for the first window",
     &no_usage_more},
    {"no-usage-paced",
     "azure-paced-neighbour",
     "a paced 30 % neighbour on a deployment whose responses carry no usage (read as a ratio)",
     paced_30,
     "azure",
     CAL_YAML,
     AZ_TRAFFIC,
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 2, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .window_from_ms = 5000},
     "window up to 1.091x (passes on 5 of seeds 1..10, 6 while uvsim dated a call into an agent at its loop's last "
     "turn; 31 of 1..40 "
     "in session 18, 37 of 1..40 before the ratio was read from the headers): as "
     "azure-paced-neighbour, a window holds one of the neighbour's requests more or less, and each of "
     "the neighbour's first two readings is in force as a ratio for a second",
     &no_usage_more},
    {"no-usage-leaves", "azure-neighbour-leaves",
     "a 40 % neighbour leaves at 60 s, no usage: >= 95 % from 70 s (windows from 5 s)", NULL, "azure", CAL_YAML,
     AZ_TRAFFIC, NO_FAULTS, 0, 0, LEAVES_B,
     "63..90.7 % of the rate after it left, or a window from 5 s up to 1.143x (passes on 4 of seeds 1..10, 18 of "
     "1..40 since callers take turns, which moved seeds 3 and 7 to a miss; 5 of 1..10 and 15 of 1..40 before, 2 "
     "while uvsim dated a call into an agent at its loop's last turn; 14 of 1..40 then, 33 of 1..40 before the ratio "
     "was read from the headers): "
     "the neighbour's first readings are in force "
     "as a ratio for a second or two, two that agree by chance are taken for one until a third does not, and the "
     "fleet's schedule stays behind what that charged",
     &no_usage_more},
    {"estimate-3.5x", "azure-standard", "the world counts 3.5x the callers' estimate of the prompt (0.875 a CJK char)",
     cjk_3_5, "azure", CAL_YAML, 3, 50, 1, SIM_LANG_CJK, 2000, 500, NO_FAULTS, 0, 0, CAL_B, NULL, NULL},
    {"estimate-0.5x", "azure-standard",
     "the world counts half of the callers' estimate of the prompt (0.125 an English char)", half_count, "azure",
     CAL_YAML, 3, 50, 2, SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 0, CAL_B, NULL, NULL},
    {"openai-standard", "openai-standard", "OpenAI at 200k TPM / 500 RPM", NULL, "openai", NULL, 3, 50, 4, SIM_LANG_EN,
     2000, 500, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"openai-quantized", "openai-quantized", "OpenAI enforcing a minute's limits per second", NULL, "openai", NULL, 3,
     50, 4, SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-current-6", "anthropic-current", "Anthropic, OTPM on generated tokens, 6 callers", NULL, "anthropic",
     NULL, ANTH_TRAFFIC(2, 50), NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-current-24", "anthropic-current", "Anthropic, OTPM on generated tokens, 24 callers", NULL, "anthropic",
     NULL, ANTH_TRAFFIC(8, 13), NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-current-96", "anthropic-current", "Anthropic, OTPM on generated tokens, 96 callers", NULL, "anthropic",
     NULL, ANTH_TRAFFIC(32, 3), NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    /* The issue's row: answers of 200 of max_tokens 1000, a bucket three
     * max_tokens deep; OTPM counts what is generated (output_charge
     * expected, the style's default) and, beside it, the same world with
     * the max charged (output_charge max). A seed an expected failure
     * passes on is recorded as such in the baseline (a known XPASS); a
     * new pass fails the run until it is recorded. */
    {"anthropic-short-6", "anthropic-current", "Anthropic, answers 200 of 1000, 6 callers (expected output)",
     short_answers, "anthropic", NULL, 3, 2, 50, SIM_LANG_EN, 1200, 1000, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-short-6-tight", "anthropic-current", "the same, 6 callers at 18 000 OTPM (bound by the quota)",
     short_answers_tight, "anthropic", NULL, 3, 2, 50, SIM_LANG_EN, 1200, 1000, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-short-24", "anthropic-current", "Anthropic, answers 200 of 1000, 24 callers (expected output)",
     short_answers, "anthropic", NULL, 3, 8, 13, SIM_LANG_EN, 1200, 1000, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-short-96", "anthropic-current", "Anthropic, answers 200 of 1000, 96 callers (expected output)",
     short_answers, "anthropic", NULL, 3, 32, 3, SIM_LANG_EN, 1200, 1000, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-short-24-max", "anthropic-current", "the same, 24 callers, output_charge max (today's rule)",
     short_answers, "anthropic", "    output_charge: max\n", 3, 8, 13, SIM_LANG_EN, 1200, 1000, NO_FAULTS, 0, 0, STD_95,
     "28.9..29.6 % of the floor: the max output charged, answers of a fifth of it", NULL},
    {.name = "anthropic-lanes",
     .world = "anthropic-current",
     .what = "Anthropic, a chat lane using a fifth of its max output beside a batch lane using most of it",
     .tweak = lane_answers,
     .style = "anthropic",
     .yaml_extra = ANTH_LANES_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 1200,
     .max_tokens = 1000,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .lane = "chat",
           .max_lane_p99_ms = 20000},
     .more = &anth_lanes_more},
    {"anthropic-2025", "anthropic-2025", "Anthropic, max_tokens at admission corrected at the end", NULL, "anthropic",
     "    output_charge: max\n", ANTH_TRAFFIC(8, 13), NO_FAULTS, 0, 0, STD_95,
     "98.0..99.5 % of the floor (output): passes on 9 of seeds 1..10 (recorded); seed 10's window is 1.020x, "
     "just over the bound",
     NULL},
    {"anthropic-per-second", "anthropic-per-second", "Anthropic enforcing its RPM per second", NULL, "anthropic", NULL,
     ANTH_TRAFFIC(8, 13), NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"anthropic-greedy-neighbour",
     "anthropic-greedy-neighbour",
     "Anthropic 2025 with a greedy neighbour 20..80 s",
     NULL,
     "anthropic",
     "    output_charge: max\n",
     ANTH_TRAFFIC(8, 13),
     NO_FAULTS,
     0,
     0,
     {.max_429_pct = 5, .min_floor_pct = 90, .max_p99_wait_ms = 300000},
     NULL,
     NULL},
    {"bedrock-5x", "bedrock-claude4", "Bedrock: input + max reserved, output burned down at 5x", NULL, "bedrock",
     "    aliases: [anthropic.claude-sonnet-4-20250514-v1:0]\n", 3, 25, 2, SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 0,
     STD_95, NULL, NULL},
    {"bedrock-burndown-1", "bedrock-burndown-1", "Bedrock for a model outside the 5x list", NULL, "bedrock", NULL, 3,
     25, 2, SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"gemini-standard", "gemini-standard", "Gemini: input-only TPM, wall-clock minutes", NULL, "gemini", NULL, 3, 50, 6,
     SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 0, STD_95, NULL, NULL},
    {"gemini-rpd-spring", "gemini-rpd-spring", "Gemini: 300 a day, the Pacific day turns 10 min in (23 h)", NULL,
     "gemini", NULL, 3, 20, 7, SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 900000, STD_95, NULL, NULL},
    {"gemini-rpd-autumn", "gemini-rpd-autumn", "Gemini: 300 a day, the Pacific day turns 10 min in (25 h)", NULL,
     "gemini", NULL, 3, 20, 7, SIM_LANG_EN, 2000, 500, NO_FAULTS, 0, 900000, STD_95, NULL, NULL},
    {"fault-redis-restart",
     "azure-standard",
     "Redis stopped at 30 s for 3 s and restarted empty",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     {{30000, SB_REDIS_STOP, 0, 0}, {33000, SB_REDIS_RESTART, 0, 0}},
     2,
     0,
     FAULT_BACK(33000),
     NULL,
     NULL},
    /* A deployment whose request burst (1, a second's rate) is smaller
     * than the agent count, and Azure's 1 s window: two schedules that do
     * not share a clock cannot keep one request a second apart. */
    {"fault-redis-stop-small",
     "azure-standard",
     "60 RPM (burst 1, Azure's 1 s window): Redis stopped 20..40 s and restarted empty",
     small_rpm,
     "azure",
     NULL,
     SMALL_TRAFFIC,
     {{20000, SB_REDIS_STOP, 0, 0}, {40000, SB_REDIS_RESTART, 0, 0}},
     2,
     0,
     FAULT_B,
     "1..7 429s (passes on 1 of seeds 1..10): each agent paces locally at a third of the rate with a burst "
     "of one, and two agents' local schedules that start together send 10 ms apart, one in Azure's 1 s window; "
     "after the restart too, while the local tails drain",
     NULL},
    {"fault-blackhole-small",
     "azure-standard",
     "60 RPM (burst 1, Azure's 1 s window): one of 3 agents black-holed 20..40 s",
     small_rpm,
     "azure",
     NULL,
     SMALL_TRAFFIC,
     {{20000, SB_BLACKHOLE, 2, 0}, {40000, SB_UNBLACKHOLE, 2, 0}},
     2,
     0,
     FAULT_B,
     "5..7 429s: every local send of the cut agent is refused, during the cut and while "
     "its local tail drains after it: the others' schedule at two thirds of the rate sends every 1.5 s, so any "
     "send of a third schedule falls within 1 s of one of theirs; keeping a second apart needs the held share "
     "as slots the shared schedule skips, not as a lower rate",
     NULL},
    {"fault-blackhole",
     "azure-standard",
     "one of 3 agents black-holed 30..40 s while the others saturate",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     {{30000, SB_BLACKHOLE, 2, 0}, {40000, SB_UNBLACKHOLE, 2, 0}},
     2,
     0,
     FAULT_BACK(40000),
     NULL,
     NULL},
    /* Past the hold, with agent.fail: hold (the mode that never over-offers
     * however long a partition lasts): the others drop agent 2 at about
     * 51 s and take the grants it held with slots from then on
     * (lua/heartbeat.lua, abandon); it sends none of them, neither while
     * cut off nor once back (lib/core/engine_call.c, dep_lapsed). */
    {"fault-blackhole-long",
     "azure-standard",
     "one of 3 agents (fail: hold) black-holed 30..55 s, past the others' 20 s hold of its share",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     {{30000, SB_BLACKHOLE, 2, 0}, {55000, SB_UNBLACKHOLE, 2, 0}},
     2,
     0,
     /* hold refuses agent 2's new callers once its share is no longer
      * held (16..24 of its 100 calls, before this row's change too), and
      * the callers it held past that ask again at the schedule's end when
      * it is back: the floor share is lower than a short fault's. */
     {.max_429_pct = 1, .min_floor_pct = 80, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .max_failed = 30},
     NULL,
     &fail_hold_more},
    /* Issue 23's partition row: agent 2 had no callers before the cut
     * (its view of the fleet's schedule comes from its heartbeats alone),
     * one arrives with it; the others saturate with a short queue (4
     * callers each, about 2 s of the rate waiting), so the cut agent's
     * local sends fall where the fleet's own would. */
    {"fault-blackhole-idle",
     "azure-standard",
     "agent 2 black-holed 30..40 s: no callers before, one arrives with the cut; the others saturate",
     NULL,
     "azure",
     NULL,
     3,
     0,
     0,
     SIM_LANG_EN,
     2000,
     500,
     {{30000, SB_BLACKHOLE, 2, 0}, {40000, SB_UNBLACKHOLE, 2, 0}},
     2,
     0,
     FAULT_BACK_1S(40000),
     NULL,
     &blackhole_idle_more},
    {"fault-blackhole-idle-rpm",
     "azure-10s-only",
     "as fault-blackhole-idle, request-bound: the fleet at >= 95 % of the rate within 2 s of the heal",
     NULL,
     "azure",
     NULL,
     3,
     0,
     0,
     SIM_LANG_EN,
     400,
     50,
     {{30000, SB_BLACKHOLE, 2, 0}, {40000, SB_UNBLACKHOLE, 2, 0}},
     2,
     0,
     {.max_429_pct = 1,
      .min_floor_pct = 90,
      .max_window_x = 1.02,
      .max_p99_wait_ms = 300000,
      .rate_from_ms = 42000,
      .rate_to_ms = 46000,
      .min_rate_pct = 95,
      .max_back_ms = 1000},
     NULL,
     &blackhole_idle_rpm_more},
    {"fault-deschedule",
     "azure-standard",
     "one agent descheduled for 2 s at 30 s",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     {{30000, SB_DESCHEDULE, 1, 2000}},
     1,
     0,
     FAULT_B,
     NULL,
     NULL},
    {"fault-agent-killed",
     "azure-standard",
     "one agent killed at 30 s (its callers left out)",
     NULL,
     "azure",
     NULL,
     AZ_TRAFFIC,
     {{30000, SB_KILL, 2, 0}},
     1,
     300000,
     FAULT_B,
     "84.0..89.8 % of the floor (77.3..77.4 before its slots were given back): its share is held for 20 s "
     "as for a partition, and one factor from one anchor re-times the others' held sends into the room its "
     "slots leave, only as far as the densest stretch after the anchor allows",
     NULL},
    {.name = "lanes",
     .world = "azure-standard",
     .what = "a batch lane saturating, interactive callers arriving over time",
     .style = "azure",
     .yaml_extra = LANES_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 97,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .lane = "interactive",
           .max_lane_p99_ms = 420},
     .more = &lanes_more},
    {.name = "tenants",
     .world = "azure-standard",
     .what = "three tenants weighted 3:2:1 with equal demand",
     .style = "azure",
     .yaml_extra = TENANTS_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 97,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .max_share_err_pct = 10},
     .more = &tenants_more},
    {.name = "group",
     .world = "azure-standard",
     .what = "a group of three Azure deployments (150k, 90k, 60k TPM)",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1, .min_floor_pct = 93, .max_window_x = 1.02, .max_p99_wait_ms = 300000},
     .more = &group_more},
    {.name = "idle-cost",
     .world = "azure-standard",
     .what = "one call an agent, 60 s idle, one more: Redis commands an agent a second",
     .style = "azure",
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .max_idle_cmds = 1},
     .more = &idle_more},
    /* ---- red-team rows ---- */
    {.name = "azure-limit-dip",
     .world = "azure-standard",
     .what = "the real limit drops 35 % at 40 s (said in headers), restored at 80 s",
     .tweak = rt_dip_restore,
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 85000,
           .min_rate_pct = 95}},
    {.name = "openai-limit-dip",
     .world = "openai-standard",
     .what = "OpenAI: the real limit drops 40 % at 30 s (said in headers), restored at 60 s",
     .tweak = rt_dip_restore_openai,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 65000,
           .min_rate_pct = 95}},
    {.name = "openai-limit-drops",
     .world = "openai-standard",
     .what = "OpenAI: the real limit drops 40 % at 30 s (said in headers), for good",
     .tweak = rt_drop_openai,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 2, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000}},
    {.name = "anthropic-limit-dip",
     .world = "anthropic-current",
     .what = "Anthropic: the real limits drop 35 % at 40 s (said in headers), restored at 80 s",
     .tweak = rt_dip_restore,
     .style = "anthropic",
     .agents = 3,
     .callers = 8,
     .calls = 13,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 1000,
     .b = {.max_429_pct = 3,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 85000,
           .min_rate_pct = 95}},
    {.name = "openai-periodic-neighbour",
     .world = "openai-standard",
     .what = "OpenAI with a neighbour bursting 20 every 15 s from 10 s",
     .tweak = rt_openai_periodic,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3, .min_floor_pct = 95, .max_p99_wait_ms = 300000}},
    {.name = "openai-lanes",
     .world = "openai-standard",
     .what = "OpenAI TPM-bound: a batch lane flooding, an interactive trickle",
     .style = "openai",
     .yaml_extra = LANES_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .lane = "interactive",
           .max_lane_p99_ms = 420},
     .more = &rt_openai_lanes_more},
    {.name = "concurrency-streams",
     .world = "anthropic-current",
     .what = "answers streaming 8..15 s, max_concurrency 16 binding (24 callers)",
     .tweak = rt_long_streams,
     .style = "anthropic",
     .yaml_extra = "    max_concurrency: 16\n",
     .agents = 3,
     .callers = 8,
     .calls = 6,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 1000,
     .b = {.max_429_pct = 1, .max_window_x = 1.02, .max_p99_wait_ms = 300000}},
    {.name = "openai-real-below",
     .world = "openai-standard",
     .what = "OpenAI: the real limits are 70 % of the configured, said in headers (windows from 5 s)",
     .tweak = rt_openai_below,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .window_from_ms = 5000}},
    {.name = "openai-limit-rises",
     .world = "openai-standard",
     .what = "OpenAI: the real limits are 60 % until 60 s, then as configured (windows from 5 s)",
     .tweak = rt_openai_rises,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 90,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .window_from_ms = 5000}},
    {.name = "azure-periodic-20",
     .world = "azure-periodic-neighbour",
     .what = "a neighbour bursts 20 every 15 s from 10 s",
     .tweak = rt_periodic_20,
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3, .min_floor_pct = 95, .max_p99_wait_ms = 300000}},
    {.name = "azure-sparse-neighbour",
     .xfail = "seed 7's window 1.027x (passes on 9 of seeds 1..10, recorded): as azure-ramp-neighbour, a sparse "
              "neighbour read as gone after two empty spans",
     .world = "azure-paced-neighbour",
     .what = "a paced neighbour at 12.5 % of the rate (one request every 2.56 s), windows from 5 s",
     .tweak = rt_paced_sparse,
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 2,
           .min_floor_pct = 90,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .window_from_ms = 5000}},
    {.name = "azure-ramp-neighbour",
     .xfail = "window 1.026..1.054x, seed 8 1.190x: a neighbour of four paced users sending less than once a span is "
              "read as gone after two empty 1 s spans (observe's 'others stopped' rule) and relearned from 0; even a "
              "perfect reader needs a reading per step (about 1.0125..1.025x)",
     .world = "azure-standard",
     .what = "a neighbour ramps 0 -> 50 % of the rate in 12.5 % steps at 10, 25, 40, 55 s",
     .tweak = rt_ramp,
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3, .min_floor_pct = 95, .max_window_x = 1.02, .max_p99_wait_ms = 300000}},
    {.name = "fault-redis-slow",
     .xfail = "67.7..78.9 % of the floor, rate after 50.6..64.5 %: a round trip of 150..300 ms beside redis.timeout_ms "
              "250 flaps agents between Redis and local mode, each holding the others' shares in turn; the grants made "
              "then keep that spacing after Redis is fast again (fault-redis-slow-t1000, timeout_ms 1000, passes)",
     .world = "azure-standard",
     .what = "every Redis call takes 150..300 ms (round trip) from 30 s to 60 s, timeout 250 ms",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_REDIS_RTT, 150, 300}, {60000, SB_REDIS_RTT, 0, 0}},
     .nfaults = 2,
     .b = FAULT_BACK(60000)},
    {.name = "fault-redis-busy",
     .xfail = "rate after 92.3..95.0 %, seed 3 72.4 % of the floor (passes on 3 of seeds 1..10): agents flap between "
              "Redis and local mode while each batch takes 200 ms",
     .world = "azure-standard",
     .what = "Redis busy 200 ms per batch from 30 s to 45 s",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_REDIS_SLOW, 0, 200}, {45000, SB_REDIS_SLOW, 0, 0}},
     .nfaults = 2,
     .b = FAULT_BACK(45000)},
    {.name = "fault-cut-two",
     .xfail = "seeds 1, 4..7 and 9 at 69.7..95.4 % of the floor, rate after 60.1..93.0 % (passes on 4 of seeds "
              "1..10; 64.1..64.8 % before the fleet's part of a hand-over stopped counting twice): the re-timing at "
              "each return replays the held sends after the local tail, as if the tail took the whole rate first; "
              "never over the quota",
     .world = "azure-standard",
     .what = "agents 1 and 2 of 3 black-holed 30..40 s while all saturate",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_BLACKHOLE, 1, 0},
                {30000, SB_BLACKHOLE, 2, 0},
                {40000, SB_UNBLACKHOLE, 1, 0},
                {40000, SB_UNBLACKHOLE, 2, 0}},
     .nfaults = 4,
     .b = FAULT_BACK(40000)},
    {.name = "fault-cut-two-stagger",
     .xfail = "as fault-cut-two: 69.6..95.4 % of the floor on 7 of seeds 1..10 (64.1..65.2 % before), passes on 3",
     .world = "azure-standard",
     .what = "agents 1 and 2 of 3 black-holed from 30 s, back at 40 s and 44 s",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_BLACKHOLE, 1, 0},
                {30000, SB_BLACKHOLE, 2, 0},
                {40000, SB_UNBLACKHOLE, 1, 0},
                {44000, SB_UNBLACKHOLE, 2, 0}},
     .nfaults = 4,
     .b = FAULT_BACK(44000)},
    {.name = "fault-redis-slow-t1000",
     .world = "azure-standard",
     .what = "every Redis call takes 150..300 ms from 30 s to 60 s, redis.timeout_ms 1000",
     .style = "azure",
     .more = &rt_t1000_more,
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_REDIS_RTT, 150, 300}, {60000, SB_REDIS_RTT, 0, 0}},
     .nfaults = 2,
     .b = FAULT_BACK(60000)},
    {.name = "agents-scale-up",
     .world = "azure-standard",
     .what = "3 agents saturating, 3 more join at 40 s with callers of their own",
     .style = "azure",
     .agents = 6,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 42000,
           .min_rate_pct = 95},
     .more = &rt_scale_up_more},
    {.name = "agents-scale-down",
     .xfail = "81.4..81.8 % of the floor: agent-replaced with four of six agents leaving",
     .world = "azure-standard",
     .what = "6 agents saturating, 4 leave gracefully at 50 s (their callers move to the 2 left)",
     .style = "azure",
     .agents = 6,
     .callers = 20,
     .calls = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{50000, SB_LEAVE, 2, -1}, {50000, SB_LEAVE, 3, -1}, {50000, SB_LEAVE, 4, -1}, {50000, SB_LEAVE, 5, -1}},
     .nfaults = 4,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 52000,
           .min_rate_pct = 95}},
    {.name = "agents-rolling-restart",
     .xfail = "66.9..67.7 % of the floor: agent-replaced three times over",
     .world = "azure-standard",
     .what = "each of 3 agents replaced in turn (30, 45, 60 s) by a new one; callers reconnect",
     .style = "azure",
     .agents = 6,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_LEAVE, 0, 3}, {45000, SB_LEAVE, 1, 4}, {60000, SB_LEAVE, 2, 5}},
     .nfaults = 3,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 62000,
           .min_rate_pct = 95},
     .more = &rt_rolling_more},
    {.name = "azure-cancels",
     .world = "azure-standard",
     .what = "a fifth of the attempts cancelled by their callers (half while waiting, half once sent)",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1, .min_floor_pct = 95, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .max_failed = 1000},
     .more = &rt_cancel_more},
    {.name = "agent-replaced",
     .xfail =
         "85.3..86.1 % of the floor, rate after 81.7..82.9 %: the leaving agent's waiting callers are answered CLOSING "
         "and their reservations given back in the middle of the schedule; asking again on the new agent they are "
         "slotted at its end, and a send given back between committed ones is never reused (no hole list)",
     .world = "azure-standard",
     .what = "agent 0 of 3 replaced at 30 s by a new agent (its callers reconnect there)",
     .style = "azure",
     .agents = 6,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_LEAVE, 0, 3}},
     .nfaults = 1,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 95,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 32000,
           .min_rate_pct = 95},
     .more = &rt_rolling_more},
    {.name = "anthropic-overloaded",
     .world = "anthropic-current",
     .what = "Anthropic answers 529 overloaded 30..40 s: the rate must come back",
     .tweak = rt_overload,
     .style = "anthropic",
     .agents = 3,
     .callers = 8,
     .calls = 13,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 1000,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 90,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .rate_from_ms = 42000,
           .min_rate_pct = 95}},
    {.name = "anthropic-long-answers",
     .xfail = "seed 9 at 94.9 % of the floor (passes on 9 of seeds 1..10, recorded)",
     .world = "anthropic-current",
     .what = "answers 200 of 1000, then 800..1000 for 20 s from 40 s (output counted as generated)",
     .tweak = rt_long_answers,
     .style = "anthropic",
     .agents = 3,
     .callers = 8,
     .calls = 13,
     .lang = SIM_LANG_EN,
     .chars = 1200,
     .max_tokens = 1000,
     .b = STD_95},
    {.name = "anthropic-long-answers-max",
     .world = "anthropic-current",
     .what = "answers 0.5..1 of max, then all at the max for 20 s from 40 s",
     .tweak = rt_long_answers_max,
     .style = "anthropic",
     .agents = 3,
     .callers = 8,
     .calls = 13,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 1000,
     .b = STD_95},
    /* ---- a second red-team pass (session 29) ---- */
    {.name = "lang-switch-cjk",
     .xfail = "window 1.22..1.31x (1.91..1.93x before the held grants were stretched when the ratio rose), 0 429s: "
              "the CJK sends made at the English ratio before the fourth CJK answer moves the ratio's 90th percentile, "
              "which the stretch cannot take back (they were sent)",
     .world = "azure-standard",
     .what = "English prompts until 40 s, then CJK (3.2x the callers' chars / 4)",
     .style = "azure",
     .yaml_extra = CAL_YAML,
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = CAL_B,
     .more = &rt2_to_cjk_more},
    {.name = "lang-switch-en",
     .xfail = "80.0..81.0 % of the floor: the ratio in force (the 90th percentile of the last 32) stays 3.2 until 29 "
              "English answers are in, and the grants reserved at 3.2 are never compressed when it falls (cal_ahead "
              "acts on a rise only): the English calls run at 48 % of the rate for about a minute",
     .world = "azure-standard",
     .what = "CJK prompts until 40 s, then English (the learned 3.2x stale)",
     .style = "azure",
     .yaml_extra = CAL_YAML,
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_CJK,
     .chars = 2000,
     .max_tokens = 500,
     .b = CAL_B,
     .more = &rt2_to_en_more},
    {.name = "heavy-tail-prompts",
     .xfail = "window 1.36..1.62x, 0 429s, 97.7..99.6 % of the floor: a 20 500-token request is 75 % of a 10 s window; "
              "the schedule charges a send at its slot, so a 10 s window holds 10 s of the rate, the burst and one "
              "more request (at most 1.75x here; a minute's window 1.09x): the bound, not a miss of the rate",
     .world = "azure-standard",
     .what = "prompts of 200 tokens, 5 % of the calls 20 000",
     .style = "azure",
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 800,
     .max_tokens = 500,
     .b = STD_AZ,
     .more = &rt2_heavy_tail_more},
    {.name = "azure-rises-above",
     .world = "azure-standard",
     .what = "the real limit rises to 1.5x the configured at 40 s (said in headers)",
     .tweak = rt2_rise_above,
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = STD_AZ},
    {.name = "openai-rises-above",
     .world = "openai-standard",
     .what = "OpenAI: the real limit rises to 1.5x the configured at 40 s (said in headers)",
     .tweak = rt2_rise_above,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = STD_95},
    {.name = "fault-deschedule-5s",
     .world = "azure-standard",
     .what = "one agent descheduled for 5 s at 30 s, holding its grants",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_DESCHEDULE, 1, 5000}},
     .nfaults = 1,
     .b = FAULT_BACK(35000)},
    {.name = "agents-12",
     .world = "azure-standard",
     .what = "12 agents with 4 callers each",
     .style = "azure",
     .agents = 12,
     .callers = 4,
     .calls = 6,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = STD_AZ},
    {.name = "short-wait",
     .world = "azure-standard",
     .what = "a caller an agent with max wait 2 s against a minute's queue",
     .style = "azure",
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1, .min_floor_pct = 97, .max_window_x = 1.02, .max_p99_wait_ms = 300000, .max_failed = 30},
     .more = &rt2_short_wait_more},
    {.name = "tenants-flood",
     .world = "azure-standard",
     .what = "tenants 3:2:1 where the light one floods (30 callers an agent against 2 and 4)",
     .style = "azure",
     .yaml_extra = TENANTS_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 97,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .max_share_err_pct = 10},
     .more = &rt2_tenant_flood_more},
    {.name = "bedrock-limit-drops",
     .xfail = "9.4..11.0 % 429s (15.7 % after 120 s on seed 1), window 1.78..1.86x: without headers the drop shows "
              "only once Bedrock's minute-deep bucket is spent (63 s after it); then an unexplained 429 cuts the rate "
              "only when aimd.min_throttles (3) arrive within 10 s, rare at 0.7 requests a second, and the increase (5 "
              "% a quiet 5 s) climbs back above the real limit: the rate swings 117..170k TPM against 100k",
     .world = "bedrock-claude4",
     .what = "Bedrock (no rate-limit headers, 5x burn-down): the real limit halves at 40 s",
     .tweak = rt2_drop_half_40,
     .style = "bedrock",
     .yaml_extra = "    aliases: [anthropic.claude-sonnet-4-20250514-v1:0]\n",
     .agents = 3,
     .callers = 25,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000}},
    {.name = "group-primary-drops",
     .xfail = "77.4..78.7 % of the members' floor: the primary's grants were routed at reserve; its drop stretches "
              "them (sl_rate_changed) and they go out at its half rate until 88 s while d2 and d3 are idle from 61 s: "
              "a held grant is never moved to a member with room",
     .world = "azure-standard",
     .what = "a group (150k, 90k, 60k TPM) whose primary's real limit halves at 30 s (headers)",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000},
     .more = &rt2_group_drop_more},
    {.name = "lang-switch-cjk-steady",
     .xfail = "window 1.25..1.30x (1.67..1.69x before the stretch): as lang-switch-cjk with a queue of 20 s",
     .world = "azure-standard",
     .what = "English until 40 s, then CJK, with a short queue (6 callers an agent x 20 calls)",
     .style = "azure",
     .yaml_extra = CAL_YAML,
     .agents = 3,
     .callers = 6,
     .calls = 20,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = CAL_B,
     .more = &rt2_to_cjk_steady_more},
    {.name = "group-primary-storm",
     .world = "azure-standard",
     .what = "a group (150k, 90k, 60k TPM) whose primary answers 429 without headers 30..40 s",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1, .after_ms = 40000, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000},
     .more = &rt2_group_storm_more},
    {.name = "lanes-greedy-30",
     .world = "azure-greedy-30",
     .what = "lanes (batch flooding, an interactive trickle) beside the issue's greedy 30 % neighbour",
     .style = "azure",
     .yaml_extra = LANES_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     /* The lanes' promise at the rate the neighbour leaves: one emission
      * interval (1000 tokens at the effective rate, which reads as low as
      * 95 600 TPM: 628 ms) + lane_step_ms + jitter_ms. 420 ms is the
      * promise at the whole rate. */
     .b = {.max_429_pct = 2,
           .min_floor_pct = 90,
           .max_p99_wait_ms = 300000,
           .lane = "interactive",
           .max_lane_p99_ms = 650},
     .more = &lanes_more},
    {.name = "fault-deschedule-25s",
     .xfail = "89.6..93.0 % of the floor, rate after 91.5..98.8 %, seed 10's window 1.023x (passes on 5 of seeds "
              "1..10): the frozen agent's slots are holes for 20 s until the others drop it; its callers are slotted "
              "again at the schedule's end (their first calls wait up to 106 s)",
     .world = "azure-standard",
     .what = "one agent descheduled for 25 s at 30 s (past the others' 20 s hold of its share)",
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .faults = {{30000, SB_DESCHEDULE, 1, 25000}},
     .nfaults = 1,
     .b = FAULT_BACK(55000)},
    {.name = "lang-switch-en-steady",
     .xfail = "88.2..88.5 % of the floor: as lang-switch-en with a queue of 15 s",
     .world = "azure-standard",
     .what = "CJK until 40 s, then English, with a short queue (6 callers an agent x 20 calls)",
     .style = "azure",
     .yaml_extra = CAL_YAML,
     .agents = 3,
     .callers = 6,
     .calls = 20,
     .lang = SIM_LANG_CJK,
     .chars = 2000,
     .max_tokens = 500,
     .b = CAL_B,
     .more = &rt2_to_en_more},
    {.name = "anthropic-lang-switch",
     .xfail =
         "window 1.08..1.20x (input), the window across the switch (33..43 s on seed 1): with a queue of about 1 s "
         "the held grants are few; most of it is the CJK sends before the fourth CJK answer raises the ratio (the 90th "
         "percentile of 32 moves at the fourth), which a ratio that followed the first answer would shorten",
     .world = "anthropic-current",
     .what = "Anthropic input-bound (1000-token prompts, max_tokens 100): English until 40 s, then CJK",
     .style = "anthropic",
     .yaml_extra = CAL_YAML,
     .agents = 3,
     .callers = 8,
     .calls = 30,
     .lang = SIM_LANG_EN,
     .chars = 4000,
     .max_tokens = 100,
     .b = CAL_B,
     .more = &rt2_to_cjk_more},
    {.name = "tenants-late-arrival",
     .world = "azure-standard",
     .what = "tenants 3:1: the light one floods from 1 s, the heavy one arrives at 40 s",
     .style = "azure",
     .yaml_extra = TENANTS2_YAML,
     .agents = 3,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 97,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .max_share_err_pct = 10},
     .more = &rt2_tenant_late_more},
    {.name = "bedrock-limit-drops-mt1",
     .xfail = "3.2..3.5 % 429s (5.1 % after 120 s on seed 1), window 1.78..1.83x: with min_throttles 1 the cut follows "
              "every 429; the first window is the drop's first minute, which nothing tells",
     .world = "bedrock-claude4",
     .what = "bedrock-limit-drops with aimd.min_throttles 1 (every unexplained 429 cuts the rate)",
     .tweak = rt2_drop_half_40,
     .style = "bedrock",
     .yaml_extra = "    aliases: [anthropic.claude-sonnet-4-20250514-v1:0]\n    aimd:\n      min_throttles: 1\n",
     .agents = 3,
     .callers = 25,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 3, .min_floor_pct = 90, .max_window_x = 1.02, .max_p99_wait_ms = 300000}},
    {.name = "anthropic-rises-above",
     .world = "anthropic-current",
     .what = "Anthropic: the real limits rise to 1.5x the configured at 40 s (said in headers)",
     .tweak = rt2_rise_above,
     .style = "anthropic",
     .agents = 3,
     .callers = 8,
     .calls = 13,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 1000,
     .b = STD_95},
    {.name = "anthropic-short-rises-above",
     .world = "anthropic-current",
     .what = "the issue's short answers (a bucket three max_tokens deep), the limits 1.5x from 40 s",
     .tweak = rt2_short_rise_above,
     .style = "anthropic",
     .agents = 3,
     .callers = 8,
     .calls = 13,
     .lang = SIM_LANG_EN,
     .chars = 1200,
     .max_tokens = 1000,
     .b = STD_95},
    {.name = "azure-below-then-above",
     .world = "azure-standard",
     .what = "the real limit 60 % of the configured until 40 s, then 1.5x (headers): the configured caps it",
     .tweak = rt2_below_then_above,
     .style = "azure",
     .agents = 3,
     .callers = 50,
     .calls = 2,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 90,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .window_from_ms = 5000}},
    {.name = "openai-below-then-above",
     .world = "openai-standard",
     .what = "OpenAI: the real limit 60 % until 40 s, then 1.5x the configured (headers)",
     .tweak = rt2_below_then_above,
     .style = "openai",
     .agents = 3,
     .callers = 50,
     .calls = 4,
     .lang = SIM_LANG_EN,
     .chars = 2000,
     .max_tokens = 500,
     .b = {.max_429_pct = 1,
           .min_floor_pct = 90,
           .max_window_x = 1.02,
           .max_p99_wait_ms = 300000,
           .window_from_ms = 5000}},
};

size_t sb_count(void) { return sizeof(table) / sizeof(table[0]); }
const sb_scenario *sb_at(size_t i) { return i < sb_count() ? &table[i] : NULL; }
const sb_scenario *sb_find(const char *name) {
    for (size_t i = 0; name && i < sb_count(); i++)
        if (strcmp(table[i].name, name) == 0) return &table[i];
    return NULL;
}
const char *sb_name(const sb_scenario *s) { return s->name; }
const char *sb_world(const sb_scenario *s) { return s->world; }
const char *sb_what(const sb_scenario *s) { return s->what; }
const char *sb_xfail(const sb_scenario *s) { return s->xfail; }

static const sb_more no_more;

static const sb_more *more_of(const sb_scenario *s) { return s->more ? s->more : &no_more; }

/* ---- the provider ---- */

/* The worlds: one, or a group's members (w[i] serves deployment d<i+1>). */
typedef struct sb_prov {
    sim_world *w[SB_MAX_MEMBERS];
    sim_world_cfg wc[SB_MAX_MEMBERS];
    int n;
    const sb_scenario *s;
    sim_response last;
} sb_prov;

/* The world that serves the grant's deployment: the one world, or the
 * group member the grant names ("d2": w[1]); NULL for a name no world
 * serves (the run fails). */
static sim_world *world_of(sb_prov *p, const char *dep) {
    if (!more_of(p->s)->nmembers) return p->w[0];
    if (!dep || dep[0] != 'd' || dep[1] < '1' || dep[1] > '0' + p->n || dep[2]) return NULL;
    return p->w[dep[1] - '1'];
}

/* The prompt is the scenario's characters in its language (the world
 * counts them its own way); the caller's estimate, chars / 4 (as a caller that counts for
 * itself may; the proxy's estimate of a body weighs by script), is what
 * sluice was told. */
static int sb_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    sb_prov *p = ud;
    sim_world *w = world_of(p, c->deployment);
    if (!w) return -1;
    const sb_more *xm = more_of(p->s);
    sim_request rq = {.t_ms = t_ms,
                      .chars = xm->per_caller_chars ? c->input * 4 : p->s->chars,
                      .lang = xm->lang_at_ms > 0 && c->acquire_ms >= xm->lang_at_ms ? xm->lang2 : p->s->lang,
                      .max_tokens = c->output,
                      .cached = 0,
                      .tag = (uint64_t)c->caller};
    sim_world_answer(w, &rq, &p->last, out);
    if (more_of(p->s)->no_usage) out->input = out->output = out->cache_read = -1;
    if (out->status != 200 && getenv("SB_DUMP")) {
        printf("world %d at %.3f retry %.0f ms:", out->status, t_ms, p->last.retry_after_ms);
        for (int i = 0; i < p->last.nheaders; i++) printf(" %s=%s", p->last.name[i], p->last.value[i]);
        printf("\n");
    }
    return 0;
}

/* ---- the judge ---- */

/* The world's configured limit of a rate dimension, per minute. */
static double configured(const sim_world_cfg *c, int d) {
    switch (d) {
    case SIM_DIM_REQUESTS: return c->rpm;
    case SIM_DIM_TOKENS: return c->tpm;
    case SIM_DIM_INPUT: return c->itpm;
    case SIM_DIM_OUTPUT: return c->otpm;
    default: return 0;
    }
}

/* The quota per ms at t: the lower of the configured limit and the real
 * one (factor x configured, as the world changes it). The governor is
 * told the configured limit; a real limit above it is not the user's. */
static double quota_at(const sim_world_cfg *c, int d, double t) {
    double f = c->real_factor > 0 ? c->real_factor : 1;
    if (c->change_at_ms > 0 && t >= c->change_at_ms) f = c->change_factor > 0 ? c->change_factor : 1;
    if (c->change2_at_ms > 0 && t >= c->change2_at_ms) f = c->change2_factor > 0 ? c->change2_factor : 1;
    return configured(c, d) * fmin(1, f) / 60000.0;
}

/* The burst the floor allows: none for Azure's requests (its 10 s window
 * allows RPM / 6 and no more), else the lower of what the world allows at
 * once (a bucket's capacity, a minute's window) and the governor's burst
 * (its default, a second of the rate). */
static double burst_of(const sim_world_cfg *c, int d) {
    if (c->provider == SIM_AZURE && d == SIM_DIM_REQUESTS) return 0;
    double lim = configured(c, d);
    double world = c->burst[d] > 0 ? c->burst[d] : lim;
    return fmin(world, fmax(1, floor(lim / 60)));
}

/* What dimension d of entry e counts in the end: its admission charge and
 * its correction, either way (Anthropic's 2025 rule and Azure's
 * release-at-end give back; that is the provider's own count). */
static double net_charge(const sim_entry *e, int d) { return (double)e->charge[d] + (double)e->correction[d]; }

typedef struct sb_event {
    double t, amt;
} sb_event;

static int cmp_event(const void *a, const void *b) {
    double x = ((const sb_event *)a)->t, y = ((const sb_event *)b)->t;
    return x < y ? -1 : x > y;
}

/* The quota of d over [t, t + len): a limit that rises mid-window counts
 * at each rate for its part (the fleet may use the new one once the
 * headers say it); one that drops counts at the rate in force at t (its
 * first news comes with a response after the drop: what was sent before
 * that was within the limit everyone knew). */
static double quota_over(const sim_world_cfg *c, int d, double t, double len) {
    double q0 = quota_at(c, d, t), sum = 0, at = t;
    double ch[2] = {c->change_at_ms, c->change2_at_ms};
    for (int i = 0; i < 2; i++) {
        if (!(ch[i] > at && ch[i] < t + len)) continue;
        sum += quota_at(c, d, at) * (ch[i] - at);
        at = ch[i];
    }
    sum += quota_at(c, d, at) * (t + len - at);
    return fmax(q0 * len, sum);
}

/* The largest ratio, over windows [s, s + len), of what the world charged
 * d in it (fleet and neighbours: admissions at their times, corrections
 * either way at theirs) to the quota of the window (quota_over)
 * plus the burst. Like sim_world_max_window, but against a quota that
 * changes (a limit that drops or rises: each part of the window at its
 * rate) and net of give-backs. */
static double max_window_ratio(const sim_world_cfg *c, const sim_world *w, int d, double len, double from_ms,
                               double *at) {
    size_t n = sim_world_ledger_len(w), k = 0;
    sb_event *ev = malloc((2 * n + 1) * sizeof(*ev));
    if (!ev) return -1;
    for (size_t i = 0; i < n; i++) {
        const sim_entry *e = sim_world_ledger_at(w, i);
        if (e->status != 200) continue;
        if (e->charge[d]) ev[k++] = (sb_event){e->t_ms, (double)e->charge[d]};
        if (e->correction[d]) ev[k++] = (sb_event){e->t_end_ms, (double)e->correction[d]};
    }
    qsort(ev, k, sizeof(*ev), cmp_event);
    double best = 0, sum = 0, b = burst_of(c, d);
    for (size_t i = 0, j = 0; i < k; i++) {
        while (j < k && ev[j].t < ev[i].t + len) sum += ev[j++].amt;
        double q = quota_over(c, d, ev[i].t, len) + b;
        if (ev[i].t >= from_ms && q > 0 && sum / q > best) best = sum / q, *at = ev[i].t;
        sum -= ev[i].amt;
    }
    free(ev);
    return best;
}

/* How long a window of d is judged over. 10 s, the slice Azure
 * evaluates in and short enough to show a burst a minute-deep bucket
 * hides (a window above 1x with 0 429s). A minute where the world counts
 * d when the answer ends (Anthropic's output, counted as generated): the
 * fleet sets the sends, the ends move by the spread of the answers'
 * lengths and latencies, which no pace of sends sets, and Anthropic's
 * bucket is continuously replenished over its minute, with no slices. A
 * sustained excess shows in a minute as much as in 10 s. */
static double window_len_ms(const sim_world_cfg *c, int d) {
    if (c->provider == SIM_ANTHROPIC && d == SIM_DIM_OUTPUT && c->anthropic_output == SIM_OTPM_GENERATED) return 60000;
    return 10000;
}

/* The time from t0 for the quota of d to pass amount. */
static double pass_ms(const sim_world_cfg *c, int d, double t0, double amount) {
    if (amount <= 0) return 0;
    double t = t0;
    double ch[2] = {c->change_at_ms, c->change2_at_ms};
    for (int i = 0; i < 2; i++) {
        if (!(ch[i] > 0 && t < ch[i])) continue;
        double q = quota_at(c, d, t);
        double seg = (ch[i] - t) * q;
        if (seg >= amount) return t - t0 + amount / q;
        amount -= seg;
        t = ch[i];
    }
    return t - t0 + amount / quota_at(c, d, t);
}

/* The time from t0 for a group's members together (each at its quota of
 * d, as its limits change) to pass amount. */
static double pass_ms_group(const sb_prov *p, int d, double t0, double amount) {
    if (amount <= 0) return 0;
    double t = t0;
    for (;;) {
        double q = 0, next = -1;
        for (int m = 0; m < p->n; m++) {
            q += quota_at(&p->wc[m], d, t);
            double ch[2] = {p->wc[m].change_at_ms, p->wc[m].change2_at_ms};
            for (int i = 0; i < 2; i++)
                if (ch[i] > t && (next < 0 || ch[i] < next)) next = ch[i];
        }
        if (q <= 0) return 0;
        if (next < 0 || (next - t) * q >= amount) return t - t0 + amount / q;
        amount -= (next - t) * q;
        t = next;
    }
}

static double percentile(double *v, size_t n, double p) {
    if (!n) return 0;
    for (size_t i = 1; i < n; i++) /* insertion sort: n is a few hundred */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    size_t k = (size_t)ceil(p * (double)n) - 1;
    return v[k < n ? k : n - 1];
}

/* The fleet's admissions of every world, for the first and the last. */
static void fleet_span(const sb_prov *p, double *t0, double *t1) {
    *t0 = *t1 = -1;
    for (int m = 0; m < p->n; m++)
        for (size_t i = 0, n = sim_world_ledger_len(p->w[m]); i < n; i++) {
            const sim_entry *e = sim_world_ledger_at(p->w[m], i);
            if (e->who != 0 || e->status != 200) continue;
            if (*t0 < 0 || e->t_ms < *t0) *t0 = e->t_ms;
            if (e->t_ms > *t1) *t1 = e->t_ms;
        }
}

/* What the world counted of d in the fleet's span [t0, t1]: the fleet's
 * admissions (with their corrections) and the neighbours' within it. */
static double counted(const sim_world *w, int d, double t0, double t1) {
    double total = 0;
    for (size_t i = 0, n = sim_world_ledger_len(w); i < n; i++) {
        const sim_entry *e = sim_world_ledger_at(w, i);
        if (e->status != 200) continue;
        if (e->who != 0 && (e->t_ms < t0 || e->t_ms > t1)) continue;
        total += net_charge(e, d);
    }
    return total;
}

/* The callers' own bound: a caller sends its next call when the last one
 * has answered, so its admissions span at least the latencies of all its
 * admitted calls but the last (the world's, which no governor changes).
 * The largest over the callers (a request's tag is its caller). Six
 * callers waiting on their answers cannot fill a bucket the quota floor
 * assumes full. */
static double serial_ms(const sb_prov *p) {
    size_t ntag = 0;
    for (int m = 0; m < p->n; m++)
        for (size_t i = 0, n = sim_world_ledger_len(p->w[m]); i < n; i++) {
            const sim_entry *e = sim_world_ledger_at(p->w[m], i);
            if (e->who == 0 && e->tag + 1 > ntag) ntag = e->tag + 1;
        }
    double *sum = calloc(ntag ? ntag : 1, sizeof(double)), *last = calloc(ntag ? ntag : 1, sizeof(double));
    double best = 0;
    if (sum && last) {
        for (int m = 0; m < p->n; m++)
            for (size_t i = 0, n = sim_world_ledger_len(p->w[m]); i < n; i++) {
                const sim_entry *e = sim_world_ledger_at(p->w[m], i);
                if (e->who != 0 || e->status != 200) continue;
                sum[e->tag] += e->latency_ms;
                last[e->tag] = e->latency_ms; /* the ledger is in the order of admission */
            }
        for (size_t c = 0; c < ntag; c++)
            if (sum[c] - last[c] > best) best = sum[c] - last[c];
    }
    free(sum);
    free(last);
    return best;
}

static void judge_world(const sb_scenario *s, const sb_prov *p, sb_result *r) {
    const sim_world_cfg *wc = &p->wc[0];
    double t0, t1;
    fleet_span(p, &t0, &t1);
    for (int m = 0; m < p->n; m++) {
        const sim_world *w = p->w[m];
        size_t fleet_ok = 0;
        r->attempts += sim_world_count(w, SIM_WHO_FLEET, 0);
        r->throttled += sim_world_count(w, SIM_WHO_FLEET, 429);
        if (getenv("SB_NB"))
            fprintf(stderr, "neighbours: %zu sent, %zu admitted\n", sim_world_count(w, SIM_WHO_NEIGHBOURS, 0),
                    sim_world_count(w, SIM_WHO_NEIGHBOURS, 200));
        for (size_t i = 0, n = sim_world_ledger_len(w); i < n; i++) {
            const sim_entry *e = sim_world_ledger_at(w, i);
            if (e->who != 0) continue;
            fleet_ok += e->status == 200;
            if (e->t_ms < s->b.after_ms) continue;
            r->attempts_after++;
            if (e->status == 429) r->throttled_after++;
        }
        if (more_of(s)->nmembers) r->member_admitted[r->nmembers++] = fleet_ok;
    }
    r->makespan_ms = t0 >= 0 ? t1 - t0 : 0;
    double floor_ms = 0, best_window = 0, binding_q = 0;
    int binding = -1;
    for (int d = SIM_DIM_REQUESTS; d <= SIM_DIM_OUTPUT; d++) {
        if (configured(wc, d) <= 0) continue;
        /* A group's members pass their sum at the sum of their quotas,
         * each as its limits change (pass_ms_group). */
        double total = 0, b = 0;
        for (int m = 0; m < p->n; m++) {
            total += counted(p->w[m], d, t0, t1);
            b += burst_of(&p->wc[m], d);
            double at = 0;
            double len = window_len_ms(&p->wc[m], d);
            double x = max_window_ratio(&p->wc[m], p->w[m], d, len, s->b.window_from_ms, &at);
            if (x > best_window)
                best_window = x, r->window_dim = len > 10000 ? "output/1m" : sim_dim_name(d), r->window_at_ms = at;
        }
        double f = p->n == 1 ? pass_ms(wc, d, t0, total - b) : pass_ms_group(p, d, t0, total - b);
        if (f > floor_ms) floor_ms = f, binding = d;
    }
    double demand = (double)s->agents * s->callers * s->calls;
    if (wc->rpd > 0 && t0 >= 0 && demand > wc->rpd) {
        /* The fleet's calls outgrow the provider's day: the rest pass
         * from its next day (Gemini's: Pacific midnight) at the rate. */
        double next = (double)(sim_pacific_next_midnight(wc->epoch_ms + (int64_t)t0) - wc->epoch_ms);
        double f = next - t0 + (demand - wc->rpd) / quota_at(wc, SIM_DIM_REQUESTS, next);
        if (f > floor_ms) floor_ms = f, binding = SIM_DIM_REQUESTS;
    }
    double serial = serial_ms(p);
    if (serial > floor_ms) floor_ms = serial;
    r->floor_ms = floor_ms;
    r->floor_pct = r->makespan_ms > 0 ? 100.0 * floor_ms / r->makespan_ms : 0;
    r->window_x = best_window;
    r->rate_after_pct = -1;
    double to = s->b.rate_to_ms > 0 && s->b.rate_to_ms < t1 ? s->b.rate_to_ms : t1;
    if (s->b.rate_from_ms > 0 && binding >= 0 && to > s->b.rate_from_ms) {
        const sim_world *w = p->w[0];
        double got = 0;
        for (size_t i = 0, n = sim_world_ledger_len(w); i < n; i++) {
            const sim_entry *e = sim_world_ledger_at(w, i);
            if (e->status != 200 || e->t_ms < s->b.rate_from_ms || e->t_ms >= to) continue;
            got += net_charge(e, binding);
        }
        binding_q = pass_ms(wc, binding, s->b.rate_from_ms, got);
        r->rate_after_pct = 100.0 * binding_q / (to - s->b.rate_from_ms);
    }
}

/* The lane's figure in r, added the first time it is seen; NULL when
 * the table is full. */
static sb_lane_figure *lane_of(sb_result *r, const char *lane) {
    const char *name = lane ? lane : "-";
    for (int i = 0; i < r->nlanes; i++)
        if (!strcmp(r->lanes[i].name, name)) return &r->lanes[i];
    if (r->nlanes == SB_MAX_LANES) return NULL;
    r->lanes[r->nlanes] = (sb_lane_figure){name, 0, 0};
    return &r->lanes[r->nlanes++];
}

/* The granted attempts' waits, from the call to its release on the
 * simulator's own clock (send_ms; not the engine's waited_ms, a figure of
 * the governor's, on its loop's cached clock): over all, then lane by
 * lane. */
static void judge_waits(const sim_record *rec, size_t n, int killed_agent, sb_result *r) {
    double *waits = malloc((n ? n : 1) * sizeof(double));
    if (!waits) {
        r->p99_wait_ms = -1;
        return;
    }
    size_t nw = 0;
    for (size_t i = 0; i < n; i++) {
        if (rec[i].agent == killed_agent || rec[i].send_ms < 0 || rec[i].acquire_ms < 0) continue;
        waits[nw++] = rec[i].send_ms - rec[i].acquire_ms;
        sb_lane_figure *l = lane_of(r, rec[i].lane);
        if (l) l->granted++;
    }
    r->p99_wait_ms = percentile(waits, nw, 0.99);
    for (int k = 0; k < r->nlanes; k++) {
        nw = 0;
        for (size_t i = 0; i < n; i++) {
            if (rec[i].agent == killed_agent || rec[i].send_ms < 0 || rec[i].acquire_ms < 0) continue;
            if (strcmp(rec[i].lane ? rec[i].lane : "-", r->lanes[k].name) == 0)
                waits[nw++] = rec[i].send_ms - rec[i].acquire_ms;
        }
        r->lanes[k].p99_wait_ms = percentile(waits, nw, 0.99);
    }
    free(waits);
}

/* Each tenant's share of the fleet's admitted requests (the worlds'
 * ledgers; a request's tag is its caller) from t = 0 until the first
 * tenant's last admission: while every tenant still had demand, so the
 * shares are the governor's choice, not the callers' running out. */
static void judge_tenants(const sb_scenario *s, const sb_prov *p, const sim_record *rec, size_t n, sb_result *r) {
    int ncallers = 0;
    for (size_t i = 0; i < n; i++)
        if (rec[i].caller + 1 > ncallers) ncallers = rec[i].caller + 1;
    int *tenant = malloc((size_t)(ncallers ? ncallers : 1) * sizeof(int));
    if (!tenant) return;
    for (int c = 0; c < ncallers; c++) tenant[c] = -1;
    double wsum = 0;
    const sb_more *x = more_of(s);
    for (int k = 0; k < x->nclasses; k++) {
        const sb_class *c = &x->classes[k];
        if (!c->tenant || r->ntenants == SB_MAX_TENANTS) continue;
        r->tenants[r->ntenants++] = (sb_tenant_figure){c->tenant, 0, 0, c->weight};
        wsum += c->weight;
        for (size_t i = 0; i < n; i++)
            if (rec[i].tenant && !strcmp(rec[i].tenant, c->tenant)) tenant[rec[i].caller] = r->ntenants - 1;
    }
    double last[SB_MAX_TENANTS] = {0};
    for (int m = 0; m < p->n; m++)
        for (size_t i = 0, ln = sim_world_ledger_len(p->w[m]); i < ln; i++) {
            const sim_entry *e = sim_world_ledger_at(p->w[m], i);
            if (e->who != 0 || e->status != 200 || e->tag >= (uint64_t)ncallers || tenant[e->tag] < 0) continue;
            if (e->t_ms > last[tenant[e->tag]]) last[tenant[e->tag]] = e->t_ms;
        }
    r->share_until_ms = -1;
    for (int k = 0; k < r->ntenants; k++)
        if (r->share_until_ms < 0 || last[k] < r->share_until_ms) r->share_until_ms = last[k];
    size_t all = 0;
    for (int m = 0; m < p->n; m++)
        for (size_t i = 0, ln = sim_world_ledger_len(p->w[m]); i < ln; i++) {
            const sim_entry *e = sim_world_ledger_at(p->w[m], i);
            if (e->who != 0 || e->status != 200 || e->tag >= (uint64_t)ncallers || tenant[e->tag] < 0) continue;
            if (e->t_ms >= r->share_until_ms || e->t_ms < x->share_from_ms) continue;
            r->tenants[tenant[e->tag]].admitted++;
            all++;
        }
    r->share_err_pct = 0;
    for (int k = 0; k < r->ntenants; k++) {
        sb_tenant_figure *t = &r->tenants[k];
        t->want_pct = wsum > 0 ? 100.0 * t->want_pct / wsum : 0;
        t->share_pct = all ? 100.0 * (double)t->admitted / (double)all : 0;
        double err = t->want_pct > 0 ? 100.0 * fabs(t->share_pct / t->want_pct - 1) : 0;
        if (err > r->share_err_pct) r->share_err_pct = err;
    }
    free(tenant);
}

/* The calls of every agent's callers: the row's and its classes'. */
static long long calls_of(const sb_scenario *s) {
    long long n = (long long)s->callers * s->calls * s->agents;
    const sb_more *x = more_of(s);
    for (int k = 0; k < x->nclasses; k++)
        n += (long long)x->classes[k].callers * x->classes[k].calls * (x->classes[k].only_agent ? 1 : s->agents);
    return n;
}

static void judge_records(const sb_scenario *s, const sb_prov *p, simfleet *f, int killed_agent, sb_result *r) {
    size_t n;
    const sim_record *rec = simfleet_records(f, &n);
    long long ok = 0;
    int dump = getenv("SB_DUMP") != NULL;
    for (size_t i = 0; i < n; i++) {
        if (dump)
            printf("rec caller %d agent %d attempt %d acquire %.3f slot %.3f send %.3f done %.3f status %d sl %d %s "
                   "%lld %s %s\n",
                   rec[i].caller, rec[i].agent, rec[i].attempt, rec[i].acquire_ms, rec[i].slot_ms, rec[i].send_ms,
                   rec[i].done_ms, rec[i].status, rec[i].sl_status, rec[i].shed_reason ? rec[i].shed_reason : "",
                   rec[i].retry_after_ms, rec[i].lane ? rec[i].lane : "-", rec[i].tenant ? rec[i].tenant : "-");
        if (rec[i].agent != killed_agent && rec[i].status == 200) ok++;
    }
    /* A killed agent's callers are left out (the rows with a kill have
     * no classes: each agent has the same callers). */
    long long calls = calls_of(s);
    if (killed_agent >= 0) calls -= calls / s->agents;
    r->failed = (int)(calls - ok);
    judge_waits(rec, n, killed_agent, r);
    r->share_err_pct = -1;
    judge_tenants(s, p, rec, n, r);
    if (!r->ntenants) r->share_err_pct = -1;
}

static void miss(sb_result *r, const char *fmt, double got, double bound) {
    if (!r->missed) snprintf(r->why, sizeof(r->why), fmt, got, bound);
    r->missed++;
}

static void judge_bounds(const sb_scenario *s, sb_result *r) {
    const sb_bounds *b = &s->b;
    if (r->failed > b->max_failed) miss(r, "failed %.0f > %.0f", (double)r->failed, (double)b->max_failed);
    if (b->max_429_pct > 0) {
        double after = r->attempts_after ? 100.0 * (double)r->throttled_after / (double)r->attempts_after : 0;
        if (after > b->max_429_pct) miss(r, "429s %.2f %% > %.2f %%", after, b->max_429_pct);
    }
    if (b->max_429 > 0 && r->throttled > (size_t)b->max_429)
        miss(r, "429s %.0f > %.0f", (double)r->throttled, b->max_429);
    if (b->min_floor_pct > 0 && r->floor_pct < b->min_floor_pct)
        miss(r, "floor %.1f %% < %.1f %%", r->floor_pct, b->min_floor_pct);
    if (b->max_window_x > 0 && r->window_x > b->max_window_x)
        miss(r, "window %.3fx > %.3fx", r->window_x, b->max_window_x);
    if (b->max_p99_wait_ms > 0 && r->p99_wait_ms > b->max_p99_wait_ms)
        miss(r, "p99 wait %.0f ms > %.0f ms", r->p99_wait_ms, b->max_p99_wait_ms);
    if (b->min_rate_pct > 0 && r->rate_after_pct < b->min_rate_pct)
        miss(r, "rate after %.1f %% < %.1f %%", r->rate_after_pct, b->min_rate_pct);
    if (b->lane && b->max_lane_p99_ms > 0) {
        const sb_lane_figure *l = NULL;
        for (int i = 0; i < r->nlanes; i++)
            if (!strcmp(r->lanes[i].name, b->lane)) l = &r->lanes[i];
        if (!l) miss(r, "lane not granted: %.0f of %.0f", 0, 0);
        else if (l->p99_wait_ms > b->max_lane_p99_ms)
            miss(r, "lane p99 wait %.0f ms > %.0f ms", l->p99_wait_ms, b->max_lane_p99_ms);
    }
    if (b->max_share_err_pct > 0 && (r->share_err_pct < 0 || r->share_err_pct > b->max_share_err_pct))
        miss(r, "tenant share off by %.1f %% > %.1f %%", r->share_err_pct, b->max_share_err_pct);
    if (b->max_idle_cmds > 0 && (r->idle_cmds < 0 || r->idle_cmds > b->max_idle_cmds))
        miss(r, "idle %.2f commands/agent/s > %.2f", r->idle_cmds, b->max_idle_cmds);
    if (b->max_back_ms > 0 && (r->back_ms < 0 || r->back_ms > b->max_back_ms))
        miss(r, "back %.0f ms > %.0f ms", r->back_ms, b->max_back_ms);
    if (s->xfail) r->verdict = r->missed ? "XFAIL" : "XPASS";
    else r->verdict = r->missed ? "FAIL" : "PASS";
}

/* ---- the run ---- */

static double real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* One deployment's YAML (name, the world's configured limits in the
 * provider's style) into buf at *k. */
static void yaml_deployment(const sb_scenario *s, const sim_world_cfg *wc, const char *name, char *buf, size_t n,
                            int *k) {
    static const struct {
        const char *key;
        size_t off;
    } lims[] = {{"tpm", offsetof(sim_world_cfg, tpm)},
                {"itpm", offsetof(sim_world_cfg, itpm)},
                {"otpm", offsetof(sim_world_cfg, otpm)},
                {"rpd", offsetof(sim_world_cfg, rpd)}};
    if (*k < 0 || (size_t)*k >= n) return;
    *k += snprintf(buf + *k, n - (size_t)*k, "  %s:\n    style: %s\n    rpm: %.0f\n    max_wait_ms: 300000\n", name,
                   s->style, wc->rpm);
    for (size_t i = 0; i < sizeof(lims) / sizeof(lims[0]) && *k > 0 && (size_t)*k < n; i++) {
        double v = *(const double *)((const char *)wc + lims[i].off);
        if (v > 0) *k += snprintf(buf + *k, n - (size_t)*k, "    %s: %.0f\n", lims[i].key, v);
    }
}

/* The governor's YAML, as a user would write it for the worlds: each
 * one's configured limits in the provider's style; a group's members
 * d1, d2, ... in priority order under the group d. */
static void yaml_for(const sb_scenario *s, const sb_prov *p, char *buf, size_t n) {
    const sb_more *x = more_of(s);
    int k = snprintf(buf, n, "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n%sdeployments:\n",
                     x->agent_extra ? x->agent_extra : "");
    if (!x->nmembers) {
        yaml_deployment(s, &p->wc[0], "d", buf, n, &k);
        if (s->yaml_extra && k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "%s", s->yaml_extra);
        return;
    }
    for (int m = 0; m < p->n; m++) {
        char name[16];
        snprintf(name, sizeof(name), "d%d", m + 1);
        yaml_deployment(s, &p->wc[m], name, buf, n, &k);
    }
    if (k > 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, "groups:\n  d:\n    members: [");
    for (int m = 0; m < p->n && k > 0 && (size_t)k < n; m++)
        k += snprintf(buf + k, n - (size_t)k, "%sd%d", m ? ", " : "", m + 1);
    if (k > 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, "]\n    max_wait_ms: 300000\n");
    if (x->group_extra && k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "%s", x->group_extra);
}

static void apply_fault(simfleet *f, const sb_fault *x) {
    switch (x->kind) {
    case SB_REDIS_STOP: simfleet_redis_stop(f); break;
    case SB_REDIS_RESTART: simfleet_redis_restart(f); break;
    case SB_BLACKHOLE: simfleet_agent_blackhole(f, x->agent, 1); break;
    case SB_UNBLACKHOLE: simfleet_agent_blackhole(f, x->agent, 0); break;
    case SB_DESCHEDULE: simfleet_agent_deschedule(f, x->agent, x->ms); break;
    case SB_KILL: simfleet_agent_kill(f, x->agent); break;
    case SB_REDIS_RTT:
        if (x->agent || x->ms) simfleet_redis_rtt(f, (uint32_t)x->agent * 1000, (uint32_t)(x->ms * 1000));
        else simfleet_redis_rtt(f, 200, 1000);
        break;
    case SB_LEAVE: simfleet_agent_leave(f, x->agent, (int)x->ms); break;
    case SB_REDIS_SLOW: simfleet_redis_slow(f, x->ms > 0 ? (uint32_t)(x->ms * 1000) : 20, 2); break;
    default: break;
    }
}

static void trace_dim(void *ud, const char *dep, const char *dim, const engine_dim_rates *r) {
    (void)ud, (void)dep;
    printf(" %s limit %.0f effective %.0f outside %.0f held %.0f", dim, r->limit, r->effective, r->outside, r->held);
}

/* Runs to t_ms. With SB_TRACE set, in steps of 250 virtual ms, printing
 * each agent's rates per dimension (engine_foreach_dim: the limit it
 * believes, the effective rate, others' use it reads in the headers, the
 * silent agents' share it holds) after each step: the same run, stepped
 * (the trace hash does not change). */
static int run_to(simfleet *f, const sb_scenario *s, double t_ms) {
    if (!getenv("SB_TRACE")) return simfleet_run_until(f, t_ms) < 0 ? -1 : 0;
    for (double t = floor(simfleet_now_ms() / 250) * 250 + 250; t <= t_ms; t += 250) {
        if (simfleet_run_until(f, t) < 0) return -1;
        for (int a = 0; a < s->agents; a++) {
            printf("trace t %.0f agent %d:", t, a);
            engine_foreach_dim(simfleet_engine(f, a), trace_dim, NULL);
            printf("\n");
        }
    }
    return simfleet_run_until(f, t_ms) < 0 ? -1 : 0;
}

/* With SB_STATE, runs to t_ms in steps of 100 virtual ms, printing per
 * dimension the world's room (a bucket's level; a window's room) beside
 * the fleet's schedule in Redis (its TAT less now, in ms) and the output
 * share learned: where the fleet holds back room the provider has. A
 * single deployment's rows only (a group's members are d1, d2, ...). */
static int trace_state(simfleet *f, const sb_scenario *s, sb_prov *p, redis_fixture *fx, double t_ms) {
    static const char *const tat[SIM_DIMS] = {"requests_tat", "tokens_tat", "input_tat", "output_tat", NULL};
    redisContext *c = more_of(s)->nmembers ? NULL : redis_fixture_connect(fx);
    for (double t = floor(simfleet_now_ms() / 100) * 100 + 100; t <= t_ms; t += 100) {
        if (simfleet_run_until(f, t) < 0) {
            if (c) redisFree(c);
            return -1;
        }
        printf("state t %.0f", t);
        for (int d = SIM_DIM_REQUESTS; d <= SIM_DIM_OUTPUT && c; d++) {
            if (configured(&p->wc[0], d) <= 0) continue;
            redisReply *r = redisCommand(c, "HGET sluice:{d}:state %s", tat[d]);
            double ahead = r && r->type == REDIS_REPLY_STRING ? atof(r->str) - (double)p->wc[0].epoch_ms - t : 0;
            if (r) freeReplyObject(r);
            printf(" %s room %.0f tat-now %.0f", sim_dim_name(d), sim_world_level(p->w[0], d), ahead);
        }
        if (c && getenv("SB_FIELDS")) {
            char fl[256];
            snprintf(fl, sizeof(fl), "%s", getenv("SB_FIELDS"));
            for (char *tok = strtok(fl, ","); tok; tok = strtok(NULL, ",")) {
                redisReply *q = redisCommand(c, "HGET sluice:{d}:state %s", tok);
                printf(" %s=%s", tok, q && q->type == REDIS_REPLY_STRING ? q->str : "-");
                if (q) freeReplyObject(q);
            }
        }
        redisReply *r = c ? redisCommand(c, "HGET sluice:{d}:state output_ratio") : NULL;
        printf(" output_ratio %s\n", r && r->type == REDIS_REPLY_STRING ? r->str : "-");
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return 0;
}

/* The worlds of s on seed: one, or a group's members (the row's world,
 * its limits scaled; each its own seed). Returns 0 or -1. */
static int worlds_new(const sb_scenario *s, uint64_t seed, sb_prov *p) {
    sim_world_cfg wc;
    if (sim_scenario_cfg(s->world, &wc) != 0) return -1;
    if (s->tweak) s->tweak(&wc);
    /* The world and the fleet share one wall clock: the world's own epoch
     * where the row sets one (Gemini's Pacific days), else the fleet's. */
    sim_world_cfg dflt;
    sim_world_cfg_init(&dflt, wc.provider);
    if (wc.epoch_ms == dflt.epoch_ms) wc.epoch_ms = SIMFLEET_EPOCH_MS;
    const sb_more *x = more_of(s);
    p->n = x->nmembers ? x->nmembers : 1;
    for (int m = 0; m < p->n; m++) {
        p->wc[m] = wc;
        if (x->nmembers) {
            double k = x->member_scale[m];
            p->wc[m].rpm *= k, p->wc[m].tpm *= k, p->wc[m].itpm *= k, p->wc[m].otpm *= k, p->wc[m].rpd *= k;
        }
        if (m == 0 && x->member0_tweak) x->member0_tweak(&p->wc[m]);
        p->w[m] = sim_world_new(&p->wc[m], seed + 7919 * (uint64_t)m);
        if (!p->w[m]) return -1;
    }
    return 0;
}

static int add_callers(simfleet *f, const sb_scenario *s) {
    for (int a = 0; a < s->agents; a++) {
        sim_caller_spec sp = {.agent = a,
                              .deployment = "d",
                              .input = (s->chars + 3) / 4, /* the caller's estimate: chars / 4 */
                              .output = s->max_tokens,
                              .start_ms = 1000,
                              .jitter_ms = 200,
                              .calls = s->calls,
                              .max_wait_ms = 300000,
                              .max_attempts = 10,
                              .cancel_permille = more_of(s)->cancel_permille};
        if (s->callers > 0 && simfleet_add_callers(f, &sp, s->callers) != 0) return -1;
        for (int k = 0; k < more_of(s)->nclasses; k++) {
            const sb_class *c = &more_of(s)->classes[k];
            if (c->only_agent && c->only_agent != a + 1) continue;
            sim_caller_spec cs = sp;
            cs.lane = c->lane, cs.tenant = c->tenant;
            cs.calls = c->calls;
            cs.start_ms = c->start_ms, cs.jitter_ms = c->jitter_ms, cs.think_ms = c->think_ms;
            if (c->max_wait_ms) cs.max_wait_ms = c->max_wait_ms;
            if (c->max_tokens) cs.output = c->max_tokens;
            if (c->chars) cs.input = (c->chars + 3) / 4;
            if (simfleet_add_callers(f, &cs, c->callers) != 0) return -1;
        }
    }
    return 0;
}

int sb_run(const sb_scenario *s, uint64_t seed, redis_fixture *fx, sb_result *r) {
    memset(r, 0, sizeof(*r));
    r->seed = seed;
    r->window_dim = "-";
    r->window_at_ms = 0;
    r->idle_cmds = -1;
    r->back_ms = -1;
    sb_prov prov = {.s = s};
    if (worlds_new(s, seed, &prov) != 0) {
        for (int m = 0; m < SB_MAX_MEMBERS; m++) sim_world_free(prov.w[m]);
        return -1;
    }
    char yaml[4096];
    yaml_for(s, &prov, yaml, sizeof(yaml));
    simfleet_opts o = {.seed = seed,
                       .agents = s->agents,
                       .redis = fx,
                       .yaml = yaml,
                       .send = sb_send,
                       .send_ud = &prov,
                       .epoch_ms = prov.wc[0].epoch_ms,
                       .redis_timeout_ms = more_of(s)->redis_timeout_ms,
                       .start_at_ms = more_of(s)->agent_start_ms};
    simfleet *f = NULL;
    double t0 = real_ms();
    if (simfleet_new(&o, &f) != 0) {
        for (int m = 0; m < prov.n; m++) sim_world_free(prov.w[m]);
        return -1;
    }
    int rc = add_callers(f, s), killed = -1;
    double idle_ms = more_of(s)->idle_ms;
    if (rc == 0 && idle_ms > 0) {
        /* Redis' commands from t = 0 (the agents' start included). */
        rc = run_to(f, s, idle_ms);
        simfleet_stats st;
        simfleet_get_stats(f, &st);
        r->idle_cmds = (double)st.commands / s->agents / (idle_ms / 1000);
    }
    for (int i = 0; i < s->nfaults && rc == 0; i++) {
        rc = run_to(f, s, s->faults[i].at_ms);
        if (rc == 0) apply_fault(f, &s->faults[i]);
        if (s->faults[i].kind == SB_KILL) killed = s->faults[i].agent;
        /* The cut's end: step 10 ms at a time (the run does not change)
         * until its agent is connected to Redis again, at most 10 s. */
        if (rc == 0 && s->faults[i].kind == SB_UNBLACKHOLE && s->b.max_back_ms > 0) {
            double healed = s->faults[i].at_ms;
            for (double t = healed + 10; t <= healed + 10000 && rc == 0; t += 10) {
                rc = simfleet_run_until(f, t) < 0 ? -1 : 0;
                engine_stats st;
                engine_get_stats(simfleet_engine(f, s->faults[i].agent), &st);
                if (st.redis_up) {
                    r->back_ms = t - healed;
                    break;
                }
            }
        }
    }
    double deadline = s->deadline_ms > 0 ? s->deadline_ms : 600000;
    if (rc == 0 && getenv("SB_STATE")) rc = trace_state(f, s, &prov, fx, fmin(deadline, atof(getenv("SB_STATE"))));
    if (rc == 0 && getenv("SB_TRACE")) rc = run_to(f, s, fmin(deadline, atof(getenv("SB_TRACE"))));
    if (rc == 0) {
        int d = simfleet_run_done(f, deadline);
        if (d < 0) rc = -1;
        r->done = d == 1;
    }
    if (rc == 0) {
        for (int m = 0; m < prov.n; m++) sim_world_advance(prov.w[m], simfleet_now_ms());
        judge_world(s, &prov, r);
        judge_records(s, &prov, f, killed, r);
        judge_bounds(s, r);
    }
    r->real_ms = real_ms() - t0;
    simfleet_free(f);
    for (int m = 0; m < prov.n; m++) sim_world_free(prov.w[m]);
    return rc;
}

void sb_format(const sb_scenario *s, const sb_result *r, char *buf, size_t n) {
    double pct = r->attempts ? 100.0 * (double)r->throttled / (double)r->attempts : 0;
    int k =
        snprintf(buf, n,
                 "%-26s seed %-3llu attempts %4zu 429s %3zu (%5.2f %%) failed %3d makespan %6.1f s floor %6.1f s "
                 "(%5.1f %%) window %5.3fx %-8s p99 wait %6.1f s",
                 s->name, (unsigned long long)r->seed, r->attempts, r->throttled, pct, r->failed, r->makespan_ms / 1000,
                 r->floor_ms / 1000, r->floor_pct, r->window_x, r->window_dim, r->p99_wait_ms / 1000);
    if (r->nlanes > 1 || (r->nlanes == 1 && strcmp(r->lanes[0].name, "-") != 0))
        for (int i = 0; i < r->nlanes && k > 0 && (size_t)k < n; i++)
            k += snprintf(buf + k, n - (size_t)k, "%s%s %.2f s%s", i ? ", " : " (", r->lanes[i].name,
                          r->lanes[i].p99_wait_ms / 1000, i == r->nlanes - 1 ? ")" : "");
    for (int i = 0; i < r->ntenants && k > 0 && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%s%s %zu %.1f %% (%.1f)", i ? ", " : " tenants ", r->tenants[i].name,
                      r->tenants[i].admitted, r->tenants[i].share_pct, r->tenants[i].want_pct);
    if (r->ntenants && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " until %.1f s off %.1f %%", r->share_until_ms / 1000, r->share_err_pct);
    for (int i = 0; i < r->nmembers && k > 0 && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%s%zu", i ? "/" : " members ", r->member_admitted[i]);
    if (r->idle_cmds >= 0 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " idle %.2f cmd/agent/s", r->idle_cmds);
    if (k > 0 && (size_t)k < n && r->rate_after_pct >= 0)
        k += snprintf(buf + k, n - (size_t)k, " rate-after %5.1f %%", r->rate_after_pct);
    /* With SB_DUMP, where the largest window starts (the line stays the
     * same without it). */
    if (k > 0 && (size_t)k < n && getenv("SB_DUMP"))
        k += snprintf(buf + k, n - (size_t)k, " window-at %.1f s", r->window_at_ms / 1000);
    if (k > 0 && (size_t)k < n && r->back_ms >= 0)
        k += snprintf(buf + k, n - (size_t)k, " back %.2f s", r->back_ms / 1000);
    if (k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " %4.1f s real %s", r->real_ms / 1000, r->verdict);
    if (k > 0 && (size_t)k < n && r->missed) k += snprintf(buf + k, n - (size_t)k, " (%s)", r->why);
    if (k > 0 && (size_t)k < n && s->xfail) snprintf(buf + k, n - (size_t)k, " [expected: %s]", s->xfail);
}
