/* Unit tests for tests/sim/world: each provider's rule on hand-computed
 * cases (windows, charges at admission and at the end, the tokenizers),
 * the header forms, Pacific midnights across both DST changes, the
 * neighbours, stray 429s, real limits and their change, the ledger's
 * summaries and its digest. Worlds here have no noise and fixed outputs
 * and latencies unless a test says otherwise. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "world.h"

/* A world with nothing random: no token noise, output = out x max_tokens,
 * latency 500 ms. */
static sim_world_cfg plain(sim_provider p, double out) {
    sim_world_cfg c;
    sim_world_cfg_init(&c, p);
    c.token_noise = 0;
    c.out_lo = c.out_hi = out;
    c.lat_lo_ms = c.lat_hi_ms = 500;
    return c;
}

static sim_response send_at(sim_world *w, double t, long long chars, sim_lang lang, long long max_tokens,
                            long long cached) {
    sim_request rq = {.t_ms = t, .chars = chars, .lang = lang, .max_tokens = max_tokens, .cached = cached, .tag = 7};
    sim_response r;
    sim_world_send(w, &rq, &r);
    return r;
}

static sim_response en(sim_world *w, double t, long long chars, long long max_tokens) {
    return send_at(w, t, chars, SIM_LANG_EN, max_tokens, 0);
}

static const char *hdr(const sim_response *r, const char *name) {
    for (int i = 0; i < r->nheaders; i++)
        if (strcmp(r->name[i], name) == 0) return r->value[i];
    return NULL;
}

static void assert_hdr(const sim_response *r, const char *name, const char *want) {
    const char *got = hdr(r, name);
    if (!got) fail_msg("header %s missing", name);
    if (strcmp(got, want) != 0) fail_msg("header %s: got \"%s\" want \"%s\"", name, got, want);
}

static const sim_entry *last_entry(const sim_world *w) { return sim_world_ledger_at(w, sim_world_ledger_len(w) - 1); }

static void assert_near(double got, double want) {
    if (fabs(got - want) > 1e-6 * fmax(1, fabs(want))) fail_msg("got %.9g want %.9g", got, want);
}

static void test_tokenizers(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_OPENAI, 1);
    sim_world *w = sim_world_new(&c, 1);
    assert_non_null(w);
    assert_int_equal(sim_world_prompt_tokens(w, 4000, SIM_LANG_EN), 1000);
    assert_int_equal(sim_world_prompt_tokens(w, 4001, SIM_LANG_EN), 1001);
    assert_int_equal(sim_world_prompt_tokens(w, 3000, SIM_LANG_CODE), 1000);
    assert_int_equal(sim_world_prompt_tokens(w, 1000, SIM_LANG_CJK), 800);
    sim_world_free(w);
    /* With noise, each request's count stays within +-3 % of the mean. */
    c.token_noise = 0.03;
    w = sim_world_new(&c, 2);
    for (int i = 0; i < 50; i++) {
        sim_request rq = {.t_ms = i, .chars = 40000, .lang = SIM_LANG_EN, .max_tokens = 1, .tag = (uint64_t)i};
        sim_response r;
        sim_world_send(w, &rq, &r);
        assert_true(r.input_tokens >= 9700 && r.input_tokens <= 10300);
    }
    sim_world_free(w);
    /* A limit the provider does not have is refused. */
    c = plain(SIM_ANTHROPIC, 1);
    c.tpm = 1000;
    assert_null(sim_world_new(&c, 1));
    sim_world_free(NULL);
}

/* Azure at 600 RPM: more than 10 requests in any second are refused. */
static void test_azure_1s_window(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 1);
    c.rpm = 600;
    sim_world *w = sim_world_new(&c, 1);
    for (int i = 0; i < 10; i++) assert_int_equal(en(w, i, 40, 10).status, 200);
    sim_response r = en(w, 10, 40, 10);
    assert_int_equal(r.status, 429);
    assert_int_equal(last_entry(w)->refused_by, SIM_DIM_REQUESTS);
    assert_near(r.retry_after_ms, 990); /* the request at 0 leaves the window at 1000 */
    assert_hdr(&r, "retry-after", "1");
    assert_hdr(&r, "retry-after-ms", "990");
    assert_int_equal(en(w, 999, 40, 10).status, 429);
    r = en(w, 1000, 40, 10);
    assert_int_equal(r.status, 200);
    /* The 10 s form of the requests headers: 600/6 = 100, 11 sent. */
    assert_hdr(&r, "x-ratelimit-limit-requests", "100");
    assert_hdr(&r, "x-ratelimit-remaining-requests", "89");
    assert_int_equal(en(w, 1000.5, 40, 10).status, 429); /* (0.5, 1000.5] holds 1..9 and 1000 */
    assert_int_equal(sim_world_count(w, SIM_WHO_FLEET, 429), 3);
    assert_int_equal(sim_world_count(w, SIM_WHO_FLEET, 200), 11);
    sim_world_free(w);
}

/* Only the 10 s window (60 RPM: 10 per 10 s): ten at once pass. */
static void test_azure_10s_window(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 1);
    c.rpm = 60;
    c.azure_windows = SIM_AZ_WIN_10S;
    sim_world *w = sim_world_new(&c, 1);
    for (int i = 0; i < 10; i++) assert_int_equal(en(w, 0, 40, 10).status, 200);
    sim_response r = en(w, 0, 40, 10);
    assert_int_equal(r.status, 429);
    assert_near(r.retry_after_ms, 10000);
    assert_int_equal(en(w, 9999, 40, 10).status, 429);
    assert_int_equal(en(w, 10000, 40, 10).status, 200);
    sim_world_free(w);
    /* Both windows: the second within a second is refused. */
    c.azure_windows = SIM_AZ_WIN_1S | SIM_AZ_WIN_10S;
    w = sim_world_new(&c, 1);
    assert_int_equal(en(w, 0, 40, 10).status, 200);
    assert_int_equal(en(w, 500, 40, 10).status, 429);
    assert_int_equal(en(w, 1000, 40, 10).status, 200);
    sim_world_free(w);
    /* Fixed windows aligned to the wall clock: 10 at the end of one second
     * and 10 at the start of the next all pass (20 in 20 ms). */
    c.rpm = 600;
    c.window_mode = SIM_WINDOW_FIXED;
    w = sim_world_new(&c, 1);
    for (int i = 0; i < 10; i++) assert_int_equal(en(w, 990 + i, 40, 10).status, 200);
    assert_int_equal(en(w, 999.5, 40, 10).status, 429);
    for (int i = 0; i < 10; i++) assert_int_equal(en(w, 1000 + i, 40, 10).status, 200);
    double at;
    assert_near(sim_world_max_window(w, SIM_DIM_REQUESTS, 1000, &at), 20);
    assert_near(at, 990);
    sim_world_free(w);
}

/* Azure TPM: prompt + max_tokens at admission, never given back. */
static void test_azure_tpm_never_refunded(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 0.01);
    c.tpm = 6000; /* a bucket of 6000, 0.1 token per ms */
    sim_world *w = sim_world_new(&c, 1);
    sim_response r = en(w, 0, 4000, 1000); /* 1000 + 1000 */
    assert_int_equal(r.status, 200);
    assert_int_equal(r.input_tokens, 1000);
    assert_int_equal(r.output_tokens, 10);
    assert_hdr(&r, "x-ratelimit-limit-tokens", "6000");
    assert_hdr(&r, "x-ratelimit-remaining-tokens", "4000");
    assert_int_equal(en(w, 0, 4000, 1000).status, 200);
    assert_int_equal(en(w, 0, 4000, 1000).status, 200);
    r = en(w, 0, 4000, 1000);
    assert_int_equal(r.status, 429);
    assert_int_equal(last_entry(w)->refused_by, SIM_DIM_TOKENS);
    assert_near(r.retry_after_ms, 20000);
    sim_world_advance(w, 1000); /* the three ended at 500 with 10 tokens each */
    assert_near(sim_world_level(w, SIM_DIM_TOKENS), 100);
    const sim_entry *e = sim_world_ledger_at(w, 0);
    assert_int_equal(e->charge[SIM_DIM_TOKENS], 2000);
    assert_int_equal(e->correction[SIM_DIM_TOKENS], 0);
    assert_true(e->flags & SIM_F_ENDED);
    assert_int_equal(en(w, 1000, 4000, 1000).status, 429);
    assert_int_equal(en(w, 20000, 4000, 1000).status, 200);
    sim_world_free(w);
    /* The variant that releases the unused max_tokens at the end, with a
     * latency of 500 + 2 ms per output token (10 tokens: ends at 520). */
    c.azure_release_at_end = 1;
    c.lat_per_token_ms = 2;
    w = sim_world_new(&c, 1);
    assert_near(en(w, 0, 4000, 1000).latency_ms, 520);
    assert_int_equal(last_entry(w)->correction[SIM_DIM_TOKENS], 10 - 1000);
    sim_world_advance(w, 520);
    assert_near(sim_world_level(w, SIM_DIM_TOKENS), 4000 + 52 + 990);
    sim_world_free(w);
}

/* OpenAI: the larger of max_tokens and the character-based estimate. */
static void test_openai_max_rule(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_OPENAI, 1);
    c.tpm = 100000;
    c.rpm = 600;
    sim_world *w = sim_world_new(&c, 1);
    sim_response r = en(w, 0, 4000, 300);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 1000);
    assert_hdr(&r, "x-ratelimit-remaining-tokens", "99000");
    assert_hdr(&r, "x-ratelimit-reset-tokens", "600ms"); /* 1000 at 100000 per minute */
    r = en(w, 0, 400, 2000);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 2000);
    assert_hdr(&r, "x-ratelimit-reset-tokens", "1.8s");
    /* CJK: OpenAI's own count is 800, its rate-limit estimate 1000 / 4. */
    r = send_at(w, 0, 1000, SIM_LANG_CJK, 100, 0);
    assert_int_equal(r.input_tokens, 800);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 250);
    assert_hdr(&r, "x-ratelimit-limit-requests", "600");
    assert_hdr(&r, "x-ratelimit-remaining-requests", "597");
    assert_hdr(&r, "x-ratelimit-reset-requests", "300ms");
    assert_hdr(&r, "x-ratelimit-limit-tokens", "100000");
    sim_world_free(w);
}

static void test_duration_and_time_forms(void **state) {
    (void)state;
    static const struct {
        double ms;
        const char *want;
    } v[] = {{0, "0s"},           {250, "250ms"},      {1500, "1.5s"}, {360000, "6m0s"},   {12.4, "12ms"},
             {61234, "1m1.234s"}, {3723000, "1h2m3s"}, {1000, "1s"},   {59999, "59.999s"}, {1050, "1.05s"}};
    char buf[32];
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        sim_fmt_duration(buf, sizeof(buf), v[i].ms);
        if (strcmp(buf, v[i].want) != 0) fail_msg("%.1f ms: got %s want %s", v[i].ms, buf, v[i].want);
    }
    sim_fmt_rfc3339(buf, sizeof(buf), INT64_C(1767571200000) + 61000);
    assert_string_equal(buf, "2026-01-05T00:01:01Z");
    sim_fmt_rfc3339(buf, sizeof(buf), INT64_C(1772956800000));
    assert_string_equal(buf, "2026-03-08T08:00:00Z");
}

/* Anthropic, 2025 wording: ITPM without cache reads; OTPM max_tokens at
 * admission, the unused part given back at the end. */
static void test_anthropic_max_corrected(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_ANTHROPIC, 0.25);
    c.itpm = 60000;
    c.otpm = 6000; /* 0.1 per ms */
    c.anthropic_output = SIM_OTPM_MAX_CORRECTED;
    sim_world *w = sim_world_new(&c, 1);
    sim_response r = send_at(w, 0, 8000, SIM_LANG_EN, 1000, 1500); /* 2000 prompt, 1500 from the cache */
    assert_int_equal(r.status, 200);
    assert_int_equal(r.input_tokens, 2000);
    assert_int_equal(r.cache_read, 1500);
    assert_int_equal(r.output_tokens, 250);
    const sim_entry *e = last_entry(w);
    assert_int_equal(e->charge[SIM_DIM_INPUT], 500);
    assert_int_equal(e->charge[SIM_DIM_OUTPUT], 1000);
    assert_int_equal(e->correction[SIM_DIM_OUTPUT], -750);
    /* Remaining rounded to the nearest thousand: 59500 reads 60000. */
    assert_hdr(&r, "anthropic-ratelimit-input-tokens-remaining", "60000");
    assert_hdr(&r, "anthropic-ratelimit-output-tokens-remaining", "5000");
    assert_hdr(&r, "anthropic-ratelimit-output-tokens-limit", "6000");
    assert_hdr(&r, "anthropic-ratelimit-output-tokens-reset", "2026-01-05T00:00:10Z");
    assert_null(hdr(&r, "x-ratelimit-remaining-tokens"));
    sim_world_advance(w, 500);
    assert_near(sim_world_level(w, SIM_DIM_OUTPUT), 5000 + 50 + 750);
    sim_world_free(w);
}

/* Anthropic, current wording: output counted as generated, at the end. */
static void test_anthropic_generated(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_ANTHROPIC, 0.25);
    c.otpm = 6000;
    sim_world *w = sim_world_new(&c, 1);
    assert_int_equal(en(w, 0, 8000, 1000).status, 200);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_OUTPUT], 0);
    assert_int_equal(last_entry(w)->correction[SIM_DIM_OUTPUT], 250);
    assert_near(sim_world_level(w, SIM_DIM_OUTPUT), 6000);
    sim_world_advance(w, 500);
    assert_near(sim_world_level(w, SIM_DIM_OUTPUT), 5750);
    sim_world_free(w);
    /* An emptied bucket refuses until it refills to one token. */
    c = plain(SIM_ANTHROPIC, 1);
    c.otpm = 600; /* 0.01 per ms */
    w = sim_world_new(&c, 1);
    assert_int_equal(en(w, 0, 400, 1000).status, 200);
    sim_world_advance(w, 500);
    assert_near(sim_world_level(w, SIM_DIM_OUTPUT), -400);
    sim_response r = en(w, 600, 400, 1000);
    assert_int_equal(r.status, 429);
    assert_int_equal(last_entry(w)->refused_by, SIM_DIM_OUTPUT);
    assert_near(r.retry_after_ms, 40000); /* from -399 to 1 at 0.01 per ms */
    assert_hdr(&r, "retry-after", "40");
    sim_world_free(w);
}

/* Bedrock: input + max_tokens reserved, settled to input + 5 x output. */
static void test_bedrock_burndown(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_BEDROCK, 0.05);
    c.tpm = 60000; /* 1 per ms */
    sim_world *w = sim_world_new(&c, 1);
    sim_response r = en(w, 0, 4000, 2000);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.nheaders, 0);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 3000);
    assert_int_equal(last_entry(w)->correction[SIM_DIM_TOKENS], 100 * 5 - 2000);
    sim_world_advance(w, 500);
    assert_near(sim_world_level(w, SIM_DIM_TOKENS), 57000 + 500 + 1500);
    sim_world_free(w);
    c = plain(SIM_BEDROCK, 0.8);
    c.tpm = 60000;
    w = sim_world_new(&c, 1);
    en(w, 0, 4000, 2000);
    assert_int_equal(last_entry(w)->correction[SIM_DIM_TOKENS], 1600 * 5 - 2000);
    sim_world_advance(w, 500);
    assert_near(sim_world_level(w, SIM_DIM_TOKENS), 57500 - 6000);
    /* Cache reads are in neither sum. */
    send_at(w, 500, 4000, SIM_LANG_EN, 100, 400);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 600 + 100);
    sim_world_free(w);
}

/* Gemini: the TPM counts input only, in wall-clock minutes. */
static void test_gemini_input_only(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_GEMINI, 1);
    c.itpm = 10000;
    c.rpm = 1000;
    sim_world *w = sim_world_new(&c, 1);
    for (int i = 0; i < 10; i++) assert_int_equal(en(w, i, 4000, 100000).status, 200);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_INPUT], 1000);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 0);
    sim_response r = en(w, 10, 4000, 1);
    assert_int_equal(r.status, 429);
    assert_int_equal(last_entry(w)->refused_by, SIM_DIM_INPUT);
    assert_near(r.retry_after_ms, 59990); /* the next minute on the clock */
    assert_int_equal(r.nheaders, 0);      /* Gemini's delay is in the body */
    assert_int_equal(en(w, 60000, 4000, 1).status, 200);
    sim_world_free(w);
}

static void test_pacific_midnight(void **state) {
    (void)state;
    /* Spring: midnight PST on March 8 2026, then PDT on March 9. */
    assert_int_equal(sim_pacific_next_midnight(INT64_C(1772955000000)), INT64_C(1772956800000));
    assert_int_equal(sim_pacific_next_midnight(INT64_C(1772956800000)), INT64_C(1773039600000));
    /* Autumn: midnight PDT on November 1, then PST on November 2 (25 h). */
    assert_int_equal(sim_pacific_next_midnight(INT64_C(1793514600000)), INT64_C(1793516400000));
    assert_int_equal(sim_pacific_next_midnight(INT64_C(1793516400000)), INT64_C(1793606400000));
    assert_int_equal(sim_pacific_day(INT64_C(1772956800000)) - sim_pacific_day(INT64_C(1772956799999)), 1);
}

/* Gemini RPD resets at midnight Pacific, across both DST changes. */
static void test_gemini_rpd(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_GEMINI, 1);
    c.rpd = 2;
    c.epoch_ms = INT64_C(1772955000000); /* 2026-03-07 23:30 PST */
    sim_world *w = sim_world_new(&c, 1);
    assert_int_equal(en(w, 0, 40, 1).status, 200);
    assert_int_equal(en(w, 1, 40, 1).status, 200);
    sim_response r = en(w, 2, 40, 1);
    assert_int_equal(r.status, 429);
    assert_int_equal(last_entry(w)->refused_by, SIM_DIM_DAY);
    assert_near(r.retry_after_ms, 1800000 - 2);
    assert_int_equal(en(w, 1800000, 40, 1).status, 200); /* March 8 begins (PST) */
    assert_int_equal(en(w, 1800001, 40, 1).status, 200);
    r = en(w, 1800002, 40, 1);
    assert_int_equal(r.status, 429);
    assert_near(r.retry_after_ms, 23.0 * 3600000 - 2); /* a 23-hour day */
    assert_int_equal(en(w, 1800000 + 23.0 * 3600000 - 1, 40, 1).status, 429);
    assert_int_equal(en(w, 1800000 + 23.0 * 3600000, 40, 1).status, 200);
    sim_world_free(w);

    c.rpd = 1;
    c.epoch_ms = INT64_C(1793514600000); /* 2026-10-31 23:30 PDT */
    w = sim_world_new(&c, 1);
    assert_int_equal(en(w, 0, 40, 1).status, 200);
    assert_near(en(w, 1, 40, 1).retry_after_ms, 1800000 - 1);
    assert_int_equal(en(w, 1800000, 40, 1).status, 200);
    assert_near(en(w, 1800001, 40, 1).retry_after_ms, 25.0 * 3600000 - 1); /* a 25-hour day */
    sim_world_free(w);
}

static void test_header_options(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 1);
    c.tpm = 1000;
    c.hdr_omit_prob = 1;
    sim_world *w = sim_world_new(&c, 1);
    sim_response r = en(w, 0, 400, 100);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.nheaders, 0);
    r = en(w, 0, 4000, 1000); /* 2000 > the whole bucket: refused, says 60 s */
    assert_int_equal(r.status, 429);
    assert_int_equal(r.nheaders, 2);
    assert_hdr(&r, "retry-after", "60");
    sim_world_free(w);
    c.hdr_omit_prob = 0;
    c.hdr_minus_one_prob = 1;
    w = sim_world_new(&c, 1);
    r = en(w, 0, 400, 100);
    assert_hdr(&r, "x-ratelimit-limit-tokens", "-1");
    assert_hdr(&r, "x-ratelimit-remaining-tokens", "-1");
    assert_hdr(&r, "x-ratelimit-reset-tokens", "0");
    sim_world_free(w);
    /* About half the responses lose their headers at 0.5. */
    c.hdr_minus_one_prob = 0;
    c.hdr_omit_prob = 0.5;
    c.tpm = 1e9;
    w = sim_world_new(&c, 3);
    int bare = 0;
    for (int i = 0; i < 200; i++) bare += en(w, i, 40, 1).nheaders == 0;
    assert_true(bare > 70 && bare < 130);
    sim_world_free(w);
}

static void test_neighbours(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 1);
    c.tpm = 60000;
    c.nneighbours = 4;
    c.nb[0] = (sim_neighbour){.shape = SIM_NB_PACED, .rate_per_min = 30, .chars = 400, .max_tokens = 100};
    c.nb[1] =
        (sim_neighbour){.shape = SIM_NB_PACED, .rate_per_min = 30, .leave_ms = 30000, .chars = 400, .max_tokens = 100};
    c.nb[2] = (sim_neighbour){.shape = SIM_NB_BURST, .start_ms = 1000, .burst = 5, .chars = 400, .max_tokens = 100};
    c.nb[3] =
        (sim_neighbour){.shape = SIM_NB_PERIODIC, .period_ms = 10000, .burst = 3, .chars = 400, .max_tokens = 100};
    sim_world *w = sim_world_new(&c, 1);
    sim_world_advance(w, 35000);
    size_t per[5] = {0};
    for (size_t i = 0; i < sim_world_ledger_len(w); i++) per[sim_world_ledger_at(w, i)->who]++;
    assert_int_equal(per[1], 18); /* 0, 2000, ..., 34000 */
    assert_int_equal(per[2], 15); /* 0, 2000, ..., 28000: left at 30000 */
    assert_int_equal(per[3], 5);
    assert_int_equal(per[4], 12); /* 0, 10000, 20000, 30000 */
    assert_int_equal(sim_world_count(w, SIM_WHO_NEIGHBOURS, 200), 50);
    assert_int_equal(sim_world_count(w, SIM_WHO_FLEET, 0), 0);
    sim_world_free(w);

    /* A greedy neighbour takes the whole bucket first, and gets a 429 on
     * each tick; the fleet finds nothing left. */
    c = plain(SIM_AZURE, 1);
    c.tpm = 6000;
    c.nneighbours = 1;
    c.nb[0] = (sim_neighbour){.shape = SIM_NB_GREEDY, .tick_ms = 100, .chars = 400, .max_tokens = 100};
    w = sim_world_new(&c, 1);
    sim_response r = en(w, 50, 400, 100);
    assert_int_equal(r.status, 429);
    assert_int_equal(sim_world_count(w, SIM_WHO_NEIGHBOURS, 200), 30); /* 6000 / 200 */
    assert_int_equal(sim_world_count(w, SIM_WHO_NEIGHBOURS, 429), 1);
    sim_world_advance(w, 100);
    assert_int_equal(sim_world_count(w, SIM_WHO_NEIGHBOURS, 429), 2);
    assert_int_equal(sim_world_count(w, SIM_WHO_FLEET, 429), 1);
    sim_world_free(w);
}

/* A stray 429: refused with room to spare, charged nothing. */
static void test_stray_429(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 1);
    c.tpm = 60000;
    c.nstray = 1;
    c.stray_ms[0] = 5000;
    sim_world *w = sim_world_new(&c, 1);
    assert_int_equal(en(w, 4000, 4000, 1000).status, 200);
    sim_response r = en(w, 5000, 4000, 1000);
    assert_int_equal(r.status, 429);
    assert_true(last_entry(w)->flags & SIM_F_STRAY);
    assert_int_equal(last_entry(w)->charge[SIM_DIM_TOKENS], 0);
    assert_near(r.retry_after_ms, 1000);
    assert_hdr(&r, "retry-after", "1");
    assert_near(sim_world_level(w, SIM_DIM_TOKENS), 59000);
    assert_int_equal(en(w, 5001, 4000, 1000).status, 200);
    sim_world_free(w);
}

/* Real limits 0.8 x configured, then 1.2 x from 10 s; headers say so. */
static void test_real_limit_and_change(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_AZURE, 1);
    c.tpm = 60000;
    c.real_factor = 0.8;
    c.change_at_ms = 10000;
    c.change_factor = 1.2;
    sim_world *w = sim_world_new(&c, 1);
    sim_response r = en(w, 0, 4000, 1000);
    assert_hdr(&r, "x-ratelimit-limit-tokens", "48000");
    assert_hdr(&r, "x-ratelimit-remaining-tokens", "46000");
    sim_world_advance(w, 20000); /* full (48000) at 10000, then 1.2 per ms */
    assert_near(sim_world_limit(w, SIM_DIM_TOKENS), 72000);
    assert_near(sim_world_level(w, SIM_DIM_TOKENS), 60000);
    r = en(w, 20000, 4000, 1000);
    assert_hdr(&r, "x-ratelimit-limit-tokens", "72000");
    sim_world_free(w);
}

static void test_max_window_and_clock(void **state) {
    (void)state;
    sim_world_cfg c = plain(SIM_ANTHROPIC, 0.5);
    c.otpm = 60000;
    c.rpm = 100;
    sim_world *w = sim_world_new(&c, 1);
    en(w, 0, 400, 1000);
    en(w, 5000, 400, 1000);
    en(w, 12000, 400, 1000);
    sim_world_advance(w, 20000);
    double at = -1;
    /* Output charged when each ended: 500 at 500, 5500 and 12500. */
    assert_near(sim_world_max_window(w, SIM_DIM_OUTPUT, 10000, &at), 1000);
    assert_near(at, 500);
    assert_near(sim_world_max_window(w, SIM_DIM_REQUESTS, 10000, NULL), 2);
    assert_near(sim_world_max_window(w, SIM_DIM_REQUESTS, 20000, NULL), 3);
    en(w, 19000, 400, 1000); /* before the clock: taken at 20000 */
    assert_int_equal(sim_world_clock_errors(w), 1);
    assert_near(last_entry(w)->t_ms, 20000);
    sim_world_free(w);
}

/* The same seed and calls give the same ledger; another seed another. */
static uint64_t scenario(uint64_t seed, double step) {
    sim_world_cfg c;
    sim_world_cfg_init(&c, SIM_ANTHROPIC);
    c.rpm = 300;
    c.itpm = 40000;
    c.otpm = 8000;
    c.anthropic_output = SIM_OTPM_MAX_CORRECTED;
    c.hdr_omit_prob = 0.1;
    c.nstray = 1;
    c.stray_ms[0] = 30000;
    c.nneighbours = 2;
    c.nb[0] = (sim_neighbour){.shape = SIM_NB_PACED, .rate_per_min = 40, .chars = 2000, .max_tokens = 300};
    c.nb[1] = (sim_neighbour){
        .shape = SIM_NB_PERIODIC, .start_ms = 5000, .period_ms = 15000, .burst = 4, .chars = 900, .max_tokens = 500};
    sim_world *w = sim_world_new(&c, seed);
    for (int i = 0; i < 400; i++) {
        /* How often the caller advances the world changes nothing. */
        if (step > 0)
            for (double t = fmax(0, i * 150.0 - 150) + step; t < i * 150.0; t += step) sim_world_advance(w, t);
        sim_request rq = {.t_ms = i * 150.0,
                          .chars = 1000 + (i * 37) % 3000,
                          .lang = (sim_lang)(i % 3),
                          .max_tokens = 200 + (i * 13) % 600,
                          .cached = i % 5 == 0 ? 100 : 0,
                          .tag = (uint64_t)i};
        sim_response r;
        sim_world_send(w, &rq, &r);
    }
    sim_world_advance(w, 70000);
    uint64_t d = sim_world_digest(w);
    sim_world_free(w);
    return d;
}

static void test_digest(void **state) {
    (void)state;
    uint64_t d = scenario(42, 0);
    assert_true(d == scenario(42, 0));
    assert_true(d == scenario(42, 7));
    assert_true(d != scenario(43, 0));
    assert_string_equal(sim_provider_name(SIM_BEDROCK), "bedrock");
    assert_string_equal(sim_dim_name(SIM_DIM_OUTPUT), "output");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizers),
        cmocka_unit_test(test_azure_1s_window),
        cmocka_unit_test(test_azure_10s_window),
        cmocka_unit_test(test_azure_tpm_never_refunded),
        cmocka_unit_test(test_openai_max_rule),
        cmocka_unit_test(test_duration_and_time_forms),
        cmocka_unit_test(test_anthropic_max_corrected),
        cmocka_unit_test(test_anthropic_generated),
        cmocka_unit_test(test_bedrock_burndown),
        cmocka_unit_test(test_gemini_input_only),
        cmocka_unit_test(test_pacific_midnight),
        cmocka_unit_test(test_gemini_rpd),
        cmocka_unit_test(test_header_options),
        cmocka_unit_test(test_neighbours),
        cmocka_unit_test(test_stray_429),
        cmocka_unit_test(test_real_limit_and_change),
        cmocka_unit_test(test_max_window_and_clock),
        cmocka_unit_test(test_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
