/* profile_scenarios: the fleets that prove the provider profiles (issue
 * "Provider-faithful budgets"), shared by tests/integration/
 * test_profiles_fleet.c (which asserts) and tests/bench/bench_profiles.c
 * (which prints them beside the previous behaviour). Each is a fleet of 3
 * agents against one `sluice mock` counting as the provider it imitates;
 * `old` configures the governor as it was before provider profiles:
 * refund on (every dimension), every unexpected 429 cuts the rate by 0.7,
 * nothing learned from the headers. */
#ifndef SLUICE_PROFILE_SCENARIOS_H
#define SLUICE_PROFILE_SCENARIOS_H

#include <stdio.h>
#include <string.h>

#include "fleet.h"

#define SCEN_OLD ", refund: true, aimd: {min_throttles: 1}, adapt: {limits: false, outside: false}"

/* 400 characters: 100 input tokens as the mock counts them. */
#define SCEN_PROMPT_100                                                                                                \
    "the quick brown fox jumps over the lazy dog while the governor paces the fleet exactly at its quota "             \
    "the quick brown fox jumps over the lazy dog while the governor paces the fleet exactly at its quota "             \
    "the quick brown fox jumps over the lazy dog while the governor paces the fleet exactly at its quota "             \
    "the quick brown fox jumps over the lazy dog while the governor paces the fleet exactly at its quota "

/* Azure, token-bound: the estimate (100 + 300) is twice the usage (100 +
 * 100); 500 requests at 600 000 TPM, the request rate far above. */
static inline fleet_spec scen_azure_tokens(int old) {
    fleet_spec s = {.name = old ? "azure tokens (old)" : "azure tokens",
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 10,
                    .requests = 500,
                    .mock_args = {"--rpm", "6000", "--tpm", "600000", "--completion-tokens", "100", "--service-ms",
                                  "20-60", "--seed", "1", NULL},
                    .deployment = old ? "rpm: 6000, tpm: 600000" SCEN_OLD : "rpm: 6000, tpm: 600000",
                    .content = SCEN_PROMPT_100,
                    .max_tokens = 300,
                    .split = 1};
    return s;
}
/* (N x estimate - burst) / rate */
#define SCEN_AZURE_TOKENS_FLOOR_MS ((500.0 * 400 - 10000) / (600000.0 / 60000))

/* Anthropic, output-bound: input 300, max_tokens 1000, actual output 200;
 * 1500 requests at 600 000 OTPM (a one-second burst holds 10 max_tokens;
 * input and requests plentiful). mode 0: the anthropic profile; 1: one
 * combined tpm of ITPM + OTPM (what a single bucket would be set to); 2:
 * one combined tpm of the OTPM (the safe setting of a single bucket). */
#define SCEN_PROMPT_300 SCEN_PROMPT_100 SCEN_PROMPT_100 SCEN_PROMPT_100
static inline fleet_spec scen_anthropic_output(int mode) {
    static const char *const dep[3] = {"style: anthropic, rpm: 6000, itpm: 6000000, otpm: 600000",
                                       "style: custom, rpm: 6000, tpm: 6600000",
                                       "style: custom, rpm: 6000, tpm: 600000"};
    static const char *const name[3] = {"anthropic itpm+otpm", "anthropic as one tpm = itpm+otpm",
                                        "anthropic as one tpm = otpm"};
    fleet_spec s = {.name = name[mode],
                    .style = FLEET_ANTHROPIC,
                    .agents = 3,
                    .callers = 10,
                    .requests = 1500,
                    .mock_args = {"--rpm", "6000", "--itpm", "6000000", "--otpm", "600000", "--completion-tokens",
                                  "200", "--service-ms", "20-60", "--seed", "2", NULL},
                    .deployment = dep[mode],
                    .content = SCEN_PROMPT_300,
                    .max_tokens = 1000,
                    .split = 1};
    return s;
}
/* What the provider's accounting allows: the output actually used, less
 * one second of OTPM. */
#define SCEN_ANTHROPIC_FLOOR_MS ((1500.0 * 200 - 10000) / (600000.0 / 60000))

/* RPM-bound (600 RPM, 3 agents x 30 callers, 300 requests), one stray 429
 * injected 10 s in (a release a little late: retry-after-ms 100). */
static inline fleet_spec scen_stray_429(int old, int inject) {
    fleet_spec s = {.name = inject ? (old ? "one stray 429 (old)" : "one stray 429") : "no 429",
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 30,
                    .requests = 300,
                    .mock_args = {"--rpm", "600", "--service-ms", "20-60", "--seed", "3", NULL},
                    .deployment = old ? "rpm: 600" SCEN_OLD : "rpm: 600",
                    .content = "hello",
                    .max_tokens = 16,
                    .split = 0,
                    .events = {{10000, "inject_429=1"}},
                    .nevents = inject ? 1 : 0};
    return s;
}
#define SCEN_STRAY_FLOOR_MS ((300.0 - 10) / (600.0 / 60000))

/* A neighbour takes 180 of 600 RPM from 5 s to 25 s after the start. 30
 * callers: the slots already granted when the neighbour leaves (about
 * callers / rate ahead) keep their spacing, so the full rate is back
 * after them. */
#define SCEN_NB_FROM_MS 5000.0
#define SCEN_NB_TO_MS 25000.0
static inline fleet_spec scen_neighbour(int old) {
    fleet_spec s = {.name = old ? "neighbour 30 % (old)" : "neighbour 30 %",
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 10,
                    .requests = 360,
                    .mock_args = {"--rpm", "600", "--service-ms", "20-60", "--seed", "4", NULL},
                    .deployment = old ? "rpm: 600" SCEN_OLD : "rpm: 600",
                    .content = "hello",
                    .max_tokens = 16,
                    .split = 0,
                    .events = {{SCEN_NB_FROM_MS, "neighbour_rpm=180"}, {SCEN_NB_TO_MS, "neighbour_rpm=0"}},
                    .nevents = 2};
    return s;
}

/* A neighbour's one-off burst of 40 requests of 800 tokens 5 s after the
 * start (issue 23's table), token-bound as the scoreboard's row:
 * Azure at 300 000 TPM (the mock's bucket holds 50 000, Azure's 10 s),
 * 450 requests of 100 + 300 tokens; the burst takes 32 000 at once.
 * (Azure style reads no requests headers, so an RPM-bound burst would go
 * unseen: the 10 s bucket absorbs it.) */
#define SCEN_BURST_AT_MS 5000.0
static inline fleet_spec scen_burst_neighbour(int old) {
    fleet_spec s = {.name = old ? "neighbour burst of 40 (old)" : "neighbour burst of 40",
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 10,
                    .requests = 450,
                    .mock_args = {"--rpm", "6000", "--tpm", "300000", "--completion-tokens", "100", "--service-ms",
                                  "20-60", "--seed", "6", NULL},
                    .deployment = old ? "rpm: 6000, tpm: 300000" SCEN_OLD : "rpm: 6000, tpm: 300000",
                    .content = SCEN_PROMPT_100,
                    .max_tokens = 300,
                    .split = 1,
                    .events = {{SCEN_BURST_AT_MS, "neighbour_tokens=800&neighbour_burst=40"}},
                    .nevents = 1};
    return s;
}
/* The fleet's tokens and the burst's, less the fleet's own burst (a
 * second of TPM), at the rate: within 5 % of it is the goal. */
#define SCEN_BURST_FLOOR_MS ((450.0 * 400 + 40 * 800 - 5000) / (300000.0 / 60000))

/* Issue 23's neighbours at 30 % of the TPM (112.5 requests of 800 tokens
 * a minute, from the mock's start), token-bound as the burst row: Azure
 * at 300 000 TPM (its bucket holds 10 s, 50 000 tokens), 450 requests of
 * 100 + 300 tokens. The goal: <= 2 % 429s, >= 90 % of what it leaves.
 *  - greedy: it takes every token it can, as it refills. 10 callers an
 *    agent. (With a one-second bucket a fleet paced at the full rate keeps
 *    it below one 800-token request: the neighbour never gets in.)
 *  - paced: it sends evenly. 50 callers an agent (60 000 tokens, 12 s of
 *    the rate, granted ahead before the neighbour shows in the headers):
 *    above 100 % of the floor the fleet took the neighbour's share while
 *    Azure's 10 s bucket lasted (the scoreboard's azure-paced-neighbour,
 *    in real time). */
static inline fleet_spec scen_neighbour_30(int greedy, int old) {
    fleet_spec s = {.name = greedy ? (old ? "greedy neighbour 30 % (old)" : "greedy neighbour 30 %")
                                   : (old ? "paced neighbour 30 % (old)" : "paced neighbour 30 %"),
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = greedy ? 10 : 50,
                    .requests = 450,
                    .mock_args = {"--rpm", "6000", "--tpm", "300000", "--completion-tokens", "100", "--neighbour-rpm",
                                  "112.5", "--neighbour-tokens", "800", "--service-ms", "20-60", "--seed",
                                  greedy ? "10" : "12", greedy ? "--neighbour-greedy" : NULL, NULL},
                    .deployment = old ? "rpm: 6000, tpm: 300000" SCEN_OLD : "rpm: 6000, tpm: 300000",
                    .content = SCEN_PROMPT_100,
                    .max_tokens = 300,
                    .split = 1};
    return s;
}
static inline fleet_spec scen_greedy_neighbour(int old) { return scen_neighbour_30(1, old); }
static inline fleet_spec scen_paced_neighbour(int old) { return scen_neighbour_30(0, old); }
/* The fleet's tokens less its configured burst (a second of TPM; it does
 * not know Azure's bucket holds ten), at the 70 % either neighbour leaves. */
#define SCEN_GREEDY_FLOOR_MS ((450.0 * 400 - 5000) / (0.7 * 300000.0 / 60000))

/* Anthropic's OTPM with the short answers (input 300, max_tokens
 * 1000, output 150..250 as the simulator's anthropic-short rows) and a
 * bucket three max_tokens deep, at 6, 24 or 96 callers (3 agents): more
 * demand must never mean less throughput. The
 * mock counts the output generated (Anthropic's current rule); reserve_max
 * configures the fleet to reserve max_tokens instead (output_charge: max,
 * the behaviour before output_charge existed). */
static inline fleet_spec scen_anthropic_callers(int per_agent, int reserve_max) {
    static char name[2][3][64];
    int k = per_agent <= 2 ? 0 : per_agent <= 8 ? 1 : 2;
    snprintf(name[reserve_max][k], sizeof(name[reserve_max][k]), "anthropic short answers, %d callers%s", 3 * per_agent,
             reserve_max ? " (max)" : "");
    fleet_spec s = {.name = name[reserve_max][k],
                    .style = FLEET_ANTHROPIC,
                    .agents = 3,
                    .callers = per_agent,
                    .requests = 600,
                    .mock_args = {"--rpm", "6000", "--itpm", "6000000", "--otpm", "120000", "--output-burst", "3000",
                                  "--completion-tokens", "150-250", "--service-ms", "200-600", "--seed", "7", NULL},
                    .deployment = reserve_max
                                      ? "style: anthropic, rpm: 6000, itpm: 6000000, otpm: 120000, output_charge: max"
                                      : "style: anthropic, rpm: 6000, itpm: 6000000, otpm: 120000",
                    .content = SCEN_PROMPT_300,
                    .max_tokens = 1000,
                    .split = 1};
    return s;
}
/* The output actually used (about 200 a request: the mock's ledger's
 * tokens less SCEN_ANTHROPIC_CALLERS_INPUT a request), less the bucket's
 * three max_tokens, at the OTPM. */
#define SCEN_ANTHROPIC_CALLERS_INPUT 300
#define SCEN_ANTHROPIC_CALLERS_FLOOR_OF(output) (((double)(output)-3000) / (120000.0 / 60000))

/* Anthropic's token remaining counts "rounded to the nearest thousand"
 * (the mock's --anthropic-round 1000), with an input limit the fleet uses
 * a sixth of (450 000 ITPM, prompts of 300): read as exact, a full input
 * bucket one rounding below the cap seen looked like a neighbour, and
 * the re-timing that followed held back the output's give-backs (the
 * simulator's anthropic-current rows, docs/simulator.md). 24 callers,
 * answers of 500..1000 of max_tokens 1000 (their 90th percentile charged,
 * the rest given back), the output bucket 3 000 deep. */
static inline fleet_spec scen_anthropic_rounded(void) {
    fleet_spec s = {.name = "anthropic, counts rounded to the thousand, 24 callers",
                    .style = FLEET_ANTHROPIC,
                    .agents = 3,
                    .callers = 8,
                    .requests = 200,
                    .mock_args = {"--rpm", "6000", "--itpm", "450000", "--otpm", "120000", "--output-burst", "3000",
                                  "--completion-tokens", "500-1000", "--service-ms", "200-600", "--anthropic-round",
                                  "1000", "--seed", "7", NULL},
                    .deployment = "style: anthropic, rpm: 6000, itpm: 450000, otpm: 120000",
                    .content = SCEN_PROMPT_300,
                    .max_tokens = 1000,
                    .split = 1};
    return s;
}
#define SCEN_ANTHROPIC_ROUNDED_FLOOR_MS ((200.0 * 750 - 3000) / (120000.0 / 60000))

/* Issue 23's first row in real time: an SDK through the agents' HTTP
 * proxy (8 requests in flight per agent) on a TPM-bound Azure deployment,
 * the prompts in Japanese. 252 characters: the mock counts 0.8 a
 * character (202 tokens), sluice's estimate is a quarter (63), so each
 * request costs the provider 302 with max_tokens 100 and the fleet's
 * first estimate 163. mode 0: the defaults; 1: the cold-start horizon
 * (estimate_learn_horizon_ms: 250, as the simulator's cjk-estimate row
 * runs); 2: nothing learned (estimate: exact, the behaviour before
 * calibration); 3: the calls streamed to a deployment with
 * stream_usage: off, so no usage comes back and the ratio is read from
 * the remaining counts (with the horizon of 1). */
#define SCEN_PROMPT_JA_18                                                                                              \
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x97\xe3\x83\xad\xe3\x83\xb3\xe3\x83\x97\xe3\x83\x88\xe3" \
    "\x81\xaf\xe3\x83\x88\xe3\x83\xbc\xe3\x82\xaf\xe3\x83\xb3\xe3\x81\x8c\xe5\xa4\x9a\xe3\x81\x84\xe3\x80\x82"
#define SCEN_PROMPT_JA_252                                                                                             \
    SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18        \
        SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18    \
            SCEN_PROMPT_JA_18 SCEN_PROMPT_JA_18
#define SCEN_CJK_REQUESTS 400
#define SCEN_CJK_LOOK_MS 5000.0
static inline fleet_spec scen_cjk_proxy(int mode) {
    static const char *const name[4] = {"japanese prompts, proxy", "japanese prompts, proxy, horizon 250",
                                        "japanese prompts, proxy (exact)",
                                        "japanese prompts, proxy, streamed, no usage, horizon 250"};
    static const char *const dep[4] = {"rpm: 6000, tpm: 120000",
                                       "rpm: 6000, tpm: 120000, estimate_learn_horizon_ms: 250",
                                       "rpm: 6000, tpm: 120000, estimate: exact",
                                       "rpm: 6000, tpm: 120000, estimate_learn_horizon_ms: 250, stream_usage: off"};
    fleet_spec s = {.name = name[mode],
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 8,
                    .requests = SCEN_CJK_REQUESTS,
                    .mock_args = {"--rpm", "6000", "--tpm", "120000", "--token-burst", "2000", "--completion-tokens",
                                  "100", "--cjk-tokens-per-char", "0.8", "--service-ms", "20-60", "--seed", "8", NULL},
                    .deployment = dep[mode],
                    .content = SCEN_PROMPT_JA_252,
                    .max_tokens = 100,
                    .proxy = 1,
                    .stream = mode == 3,
                    .events = {{SCEN_CJK_LOOK_MS, NULL}},
                    .nevents = 1};
    return s;
}
/* What the provider charges (302 a request), less its burst, at the rate. */
#define SCEN_CJK_FLOOR_MS ((SCEN_CJK_REQUESTS * 302.0 - 2000) / (120000.0 / 60000))

/* The calibration's other side: the provider counts half of sluice's
 * estimate (an eighth of a token a character), so a fleet that never
 * learns leaves part of the quota idle. 400 characters: 50 tokens to the
 * provider, 100 to the estimate; 150 and 200 with max_tokens. mode 0
 * learns (the defaults), mode 2 does not (estimate: exact). */
static inline fleet_spec scen_half_count(int mode) {
    fleet_spec s = {.name = mode ? "provider counts half (exact)" : "provider counts half",
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 8,
                    .requests = 600,
                    .mock_args = {"--rpm", "6000", "--tpm", "120000", "--token-burst", "2000", "--completion-tokens",
                                  "100", "--tokens-per-char", "0.125", "--service-ms", "20-60", "--seed", "9", NULL},
                    .deployment = mode ? "rpm: 6000, tpm: 120000, estimate: exact" : "rpm: 6000, tpm: 120000",
                    .content = SCEN_PROMPT_100,
                    .max_tokens = 100,
                    .proxy = 1,
                    .events = {{SCEN_CJK_LOOK_MS, NULL}},
                    .nevents = 1};
    return s;
}
#define SCEN_HALF_FLOOR_MS ((600 * 150.0 - 2000) / (120000.0 / 60000))

/* The provider's real limit is 480 RPM (and its headers say so, per
 * minute, as OpenAI documents its x-ratelimit-limit-requests); the fleet
 * is configured at 600. The deployment is style openai: an Azure one does
 * not read its requests headers (they describe Azure's 10 s window, a
 * sixth of the RPM; lib/core/engine_settle.c), while `sluice mock` sends
 * them per minute. */
static inline fleet_spec scen_lower_limit(int old) {
    fleet_spec s = {.name = old ? "limit 20 % lower (old)" : "limit 20 % lower",
                    .style = FLEET_AZURE,
                    .agents = 3,
                    .callers = 30,
                    .requests = 240,
                    .mock_args = {"--rpm", "480", "--service-ms", "20-60", "--seed", "5", NULL},
                    .deployment = old ? "rpm: 600, style: openai" SCEN_OLD : "rpm: 600, style: openai",
                    .content = "hello",
                    .max_tokens = 16,
                    .split = 0};
    return s;
}

/* Bedrock's token burndown (docs/providers.md, "Amazon Bedrock"): the
 * mock reserves input + max_tokens at admission and counts input + 5 x
 * output at the end, up or down (--compat bedrock --burndown 5); answers
 * of half to all of max_tokens 500 (as the scoreboard's bedrock-5x), a
 * second or two each; 1 200 000 TPM, its bucket one second deep (the
 * governor's default burst, so the floor is one it can reach). The
 * workers ask with INPUT/OUTPUT and settle with the usage, on the
 * OpenAI-compatible route. */
static inline fleet_spec scen_bedrock_burndown(void) {
    fleet_spec s = {.name = "bedrock, output burned down 5x",
                    .style = FLEET_OPENAI_V1,
                    .agents = 3,
                    .callers = 10,
                    .requests = 600,
                    .mock_args = {"--compat", "bedrock", "--burndown", "5", "--rpm", "6000", "--tpm", "1200000",
                                  "--token-burst", "20000", "--completion-tokens", "250-500", "--service-ms",
                                  "500-2000", "--seed", "4", NULL},
                    .deployment = "style: bedrock, rpm: 6000, tpm: 1200000, output_burndown: 5",
                    .content = SCEN_PROMPT_300,
                    .max_tokens = 500,
                    .split = 1};
    return s;
}
#define SCEN_BEDROCK_TPM 1200000.0
#define SCEN_BEDROCK_BURST (SCEN_BEDROCK_TPM / 60)

#endif
