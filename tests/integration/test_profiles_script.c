/* test_profiles_script: the provider profiles in the scripts themselves
 * (docs/providers.md), against a real redis-server with the test clock.
 *
 * - Charge rules per dimension: Azure's and OpenAI's combined tokens and
 *   Anthropic's input keep the estimate charged at admission (usage below
 *   it gives nothing back, a prompt longer than estimated is charged);
 *   Anthropic's output is corrected to the actual output; cache reads do
 *   not count toward the input; daily counters follow the actual usage.
 * - Evidence, not one 429: an isolated 429 only pauses; the rate is cut
 *   after aimd_min_throttles unexplained 429s within the window; a limit
 *   the headers report below the configured one is adopted and dropped
 *   again; others' use of the key, seen in the remaining counts, is
 *   estimated and taken off the rate, and given back when it stops.
 *
 * The provider of the last tests is simulated here from its documented
 * rule (a token bucket the fleet and a neighbour both draw from), not
 * from the scripts' arithmetic. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "script_test.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct grant {
    int granted;
    long long id, wait_ms;
    char reason[32];
    double now_ms; /* the server's clock at the reserve */
} grant;

/* Reserves one item whose estimate is tok ("n" or "i+o"). */
static grant reserve_tok(const char *dep, const char *tok, long long max_wait) {
    char w[24];
    snprintf(w, sizeof(w), "%lld", max_wait);
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "1", tok, w, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
    assert_int_equal(r->elements, 6);
    grant g = {0};
    g.now_ms = (double)r->element[0]->integer / 1000.0;
    redisReply *it = r->element[5];
    g.granted = it->element[0]->integer == 1;
    if (g.granted) {
        g.id = it->element[1]->integer;
        g.wait_ms = it->element[2]->integer;
    } else {
        snprintf(g.reason, sizeof(g.reason), "%s", it->element[1]->str);
    }
    freeReplyObject(r);
    return g;
}

/* Settles one grant in the feedback form: actual as the script takes it,
 * seen the headers ("-" for none). Returns the result word. */
static void settle_fb(const char *dep, long long id, const char *actual, const char *outcome, long long pause_ms,
                      const char *seen, char *res, size_t reslen) {
    char ids[24], p[24];
    if (id < 0) snprintf(ids, sizeof(ids), "-");
    else snprintf(ids, sizeof(ids), "%lld", id);
    snprintf(p, sizeof(p), "%lld", pause_ms);
    redisReply *r = script_callv(rc, SCRIPT_SETTLE, dep, "feedback", "1", ids, actual, outcome, p, seen, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("settle: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    /* now, paused, scale, shift, the result, the rates */
    assert_int_equal(r->elements, 6);
    assert_int_equal(r->element[5]->type, REDIS_REPLY_ARRAY);
    if (res) snprintf(res, reslen, "%s", r->element[4]->str);
    freeReplyObject(r);
}

static double state_num(const char *dep, const char *field) { return hash_num(rc, dep, "state", field); }

/* ---- charge rules --------------------------------------------------------- */

/* Azure / OpenAI: the estimate (prompt + max output) was charged at
 * admission and stays charged. */
static void test_combined_tokens_never_refunded(void **state) {
    const char *dep = "azure";
    /* 60000 TPM = 1 token per ms; requests plentiful; a daily budget so the
     * daily counter shows. */
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "10000", "tpd",
                 "100000000", "estimate_exact", "1", NULL);
    grant g = reserve_tok(dep, "300+1000", 0);
    assert_true(g.granted);
    double tat0 = state_num(dep, "tokens_tat");
    char res[32];
    /* Used 200 of the prompt and 100 of the output: Azure counted 300 +
     * 1000 at admission (its own estimate) and gives nothing back. */
    settle_fb(dep, g.id, "200+100", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(state_num(dep, "tokens_tat") == tat0);
    assert_true(state_num(dep, "tokens_refunded") == 0);
    /* The daily counter and the usage figures follow the actual usage. */
    assert_true(hash_num(rc, dep, "daily", "tokens") == 300);
    assert_true(state_num(dep, "tokens_actual") == 300);
    assert_true(state_num(dep, "tokens_estimated") == 1300);

    /* A prompt longer than estimated: the provider counted 450 + 1000, so
     * 150 more are charged (at the tail, the earliest the fleet learns). */
    g = reserve_tok(dep, "300+1000", 0);
    assert_true(g.granted);
    double tat1 = state_num(dep, "tokens_tat");
    settle_fb(dep, g.id, "450+100", "ok", -1, "-", res, sizeof(res));
    assert_true(fabs(state_num(dep, "tokens_tat") - tat1 - 150.0) < 0.01);
    assert_true(state_num(dep, "tokens_charged") == 150);

    /* No max_tokens in the request: estimated at the default 16, but the
     * answer ran to 900 (Azure reserves the model's whole output for such
     * a request): at least 300 + 900 counted, 884 more charged. */
    g = reserve_tok(dep, "300+16", 0);
    assert_true(g.granted);
    double tat15 = state_num(dep, "tokens_tat");
    double charged15 = state_num(dep, "tokens_charged");
    settle_fb(dep, g.id, "300+900", "ok", -1, "-", res, sizeof(res));
    assert_true(fabs(state_num(dep, "tokens_tat") - tat15 - 884.0) < 0.01);
    assert_true(state_num(dep, "tokens_charged") - charged15 == 884);

    /* Only the combined figures known: an overrun of the combined count is
     * charged, usage below it gives nothing back. */
    g = reserve_tok(dep, "1300", 0);
    double tat2 = state_num(dep, "tokens_tat");
    settle_fb(dep, g.id, "1500", "ok", -1, "-", res, sizeof(res));
    assert_true(fabs(state_num(dep, "tokens_tat") - tat2 - 200.0) < 0.01);
    g = reserve_tok(dep, "1300", 0);
    double tat3 = state_num(dep, "tokens_tat");
    settle_fb(dep, g.id, "500", "ok", -1, "-", res, sizeof(res));
    assert_true(state_num(dep, "tokens_tat") == tat3);
    assert_true(state_num(dep, "tokens_refunded") == 0);

    /* The opt-in (refund.tokens: true) gives the unused part back. */
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "10000",
                 "refund_tokens", "1", "estimate_exact", "1", NULL);
    g = reserve_tok(dep, "1000", 0);
    double tat4 = state_num(dep, "tokens_tat");
    settle_fb(dep, g.id, "400", "ok", -1, "-", res, sizeof(res));
    assert_true(fabs(tat4 - state_num(dep, "tokens_tat") - 600.0) < 0.01);
}

/* The grant record of id on dep, field k (1-based), into out. */
static void record_field(const char *dep, long long id, int k, char *out, size_t n) {
    redisReply *r = redisCommand(rc, "HGET sluice:{%s}:grants %lld", dep, id);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *p = r->str;
    for (int i = 1; i < k && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    size_t len = p ? strcspn(p, ",") : 0;
    if (len >= n) len = n - 1;
    memcpy(out, p ? p : "", len);
    out[len] = '\0';
    freeReplyObject(r);
}

/* A Bedrock-like deployment at 60000 TPM (a token a ms) with room for
 * every grant at once, refunds on, with output_burndown burndown (NULL:
 * none). */
static void configure_bedrock(const char *dep, const char *burndown) {
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "100000",
                 "refund_tokens", "1", burndown ? "output_burndown" : NULL, burndown, NULL);
}

/* Bedrock (style bedrock, output_burndown 5): the provider reserves input
 * + max output at admission and counts input + 5 x output at the end, up
 * or down (refund_tokens 1). The grant charges input + the larger of the
 * max output and the expected output burned down: the bound (5 x max)
 * before any answer is known, twice the largest share seen until four
 * are, then the 80th percentile of the answers' shares (SL_OUT_BURN_Q);
 * never below the max output (what Bedrock holds). The record says the
 * output part it charged (field 12, "t<k>"); the settle corrects to the
 * count. */
static void test_bedrock_burndown(void **state) {
    (void)state;
    const char *dep = "bedrock";
    configure_bedrock(dep, "5");
    char res[32], f12[32];
    double tat = state_num(dep, "tokens_tat");
    grant g = reserve_tok(dep, "300+1000", 0);
    assert_true(g.granted);
    /* No answer known: 300 + 5 x 1000. */
    assert_true(fabs(state_num(dep, "tokens_tat") - fmax(tat, g.now_ms) - 5300.0) < 0.01);
    record_field(dep, g.id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "t5000");
    /* 300 in, 400 out: Bedrock counts 300 + 2000 = 2300, 3000 below the
     * 5300 charged: given back (the schedule is ahead of now). */
    tat = state_num(dep, "tokens_tat");
    settle_fb(dep, g.id, "300+400", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(fabs(tat - state_num(dep, "tokens_tat") - 3000.0) < 0.01);
    assert_true(state_num(dep, "tokens_counted") == 2300);
    assert_true(state_num(dep, "tokens_actual") == 700); /* the usage itself */
    /* One answer at 0.4 of its max: twice that, 300 + 5 x 800 = 4300. */
    tat = state_num(dep, "tokens_tat");
    g = reserve_tok(dep, "300+1000", 0);
    assert_true(fabs(state_num(dep, "tokens_tat") - tat - 4300.0) < 0.01);
    record_field(dep, g.id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "t4000");
    /* 300 in, 1000 out: 5300 counted, 1000 above the charge. */
    tat = state_num(dep, "tokens_tat");
    settle_fb(dep, g.id, "300+1000", "ok", -1, "-", res, sizeof(res));
    assert_true(fabs(state_num(dep, "tokens_tat") - tat - 1000.0) < 0.01);
    assert_true(state_num(dep, "tokens_charged") == 1000);
    assert_true(state_num(dep, "tokens_counted") == 7600);
    /* Five answers known (0.4, 1, 0.5, 0.6, 0.7): the 80th percentile is
     * 0.7, 300 + 3500. */
    static const char *const outs[] = {"300+500", "300+600", "300+700"};
    for (size_t i = 0; i < 3; i++) {
        g = reserve_tok(dep, "300+1000", 0);
        settle_fb(dep, g.id, outs[i], "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
    }
    tat = state_num(dep, "tokens_tat");
    g = reserve_tok(dep, "300+1000", 0);
    assert_true(fabs(state_num(dep, "tokens_tat") - tat - 3800.0) < 0.01);
    record_field(dep, g.id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "t3500");
    settle_fb(dep, g.id, "300+700", "ok", -1, "-", res, sizeof(res));

    /* Before any answer, a request whose bound (input + 5 x max) is above
     * the limit is charged the limit, not shed too_large forever: 1000 +
     * 32000 x 5 against 60000 TPM is charged 1000 + 59000. */
    configure_bedrock("bedrock-big", "5");
    g = reserve_tok("bedrock-big", "1000+32000", 0);
    assert_true(g.granted);
    record_field("bedrock-big", g.id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "t59000");

    /* Short answers (a tenth of the max): the burned-down expectation is
     * below the max output Bedrock holds at admission, so the grant
     * charges input + max, as Bedrock reserves. */
    const char *short_dep = "bedrock-short";
    configure_bedrock(short_dep, "5");
    for (int i = 0; i < 5; i++) {
        g = reserve_tok(short_dep, "300+1000", 0);
        settle_fb(short_dep, g.id, "300+100", "ok", -1, "-", res, sizeof(res));
    }
    tat = state_num(short_dep, "tokens_tat");
    g = reserve_tok(short_dep, "300+1000", 0);
    assert_true(fabs(state_num(short_dep, "tokens_tat") - tat - 1300.0) < 0.01);
    record_field(short_dep, g.id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "");

    /* Without the burndown (a model outside the 5x list): input + max
     * output, the usage counted. */
    const char *one = "bedrock-1x";
    configure_bedrock(one, NULL);
    tat = state_num(one, "tokens_tat");
    g = reserve_tok(one, "300+1000", 0);
    assert_true(fabs(state_num(one, "tokens_tat") - fmax(tat, g.now_ms) - 1300.0) < 0.01);
    settle_fb(one, g.id, "300+400", "ok", -1, "-", res, sizeof(res));
    assert_true(state_num(one, "tokens_counted") == 700);
}

/* A combined estimate whose parts are unknown is never counted twice: the
 * usage arrives split (prompt, completion) but the grant knows only its
 * total, so the settle compares the usage as a whole (issue 21: the
 * proxy's combined 400 was recorded as input 400 and output 400, and a
 * split usage of 200 + 150 charged 200 + 400 = 600, 200 more than Azure's
 * 400). The same request booked with its parts is charged prompt + max
 * output, exactly. Charges are read from tokens_granted + tokens_charged
 * - tokens_refunded, the schedule's own count. */
static double charged_total(const char *dep) {
    return state_num(dep, "tokens_granted") + state_num(dep, "tokens_charged") - state_num(dep, "tokens_refunded");
}

/* A field of dep's limits hash as written by configure ("" when absent). */
static const char *limits_text(const char *dep, const char *field, char *buf, size_t len) {
    redisReply *r = redisCommand(rc, "HGET sluice:{%s}:limits %s", dep, field);
    assert_non_null(r);
    snprintf(buf, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return buf;
}

static void test_combined_estimate_not_counted_twice(void **state) {
    const char *dep = "azure-split";
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "10000",
                 "estimate_exact", "1", NULL);
    char res[32];
    struct {
        const char *est, *usage;
        double charged; /* what Azure charged: its prompt + max output */
    } cases[] = {
        {"400", "200+150", 400},     /* combined, usage below it */
        {"400", "200+150+50", 400},  /* with cache reads (Azure counts them) */
        {"200+200", "200+150", 400}, /* parts known: prompt + max output */
        {"200+200", "260+10", 460},  /* a longer prompt than estimated */
        {"400", "300+150", 450},     /* combined, usage above it: the overrun */
        {"200+200", "200+150", 400},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double before = charged_total(dep);
        grant g = reserve_tok(dep, cases[i].est, 0);
        assert_true(g.granted);
        settle_fb(dep, g.id, cases[i].usage, "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
        double got = charged_total(dep) - before;
        if (fabs(got - cases[i].charged) > 1e-6)
            fail_msg("case %zu (%s settled %s): charged %.3f, the provider %.0f", i, cases[i].est, cases[i].usage, got,
                     cases[i].charged);
    }
}

/* OpenAI (tokens_rule max): "the maximum of max_tokens and the estimated
 * number of tokens based on the character count of your request". The
 * grant charges the larger part; the settle charges the prompt as counted
 * when it is the larger and above the grant, and gives nothing back. */
static void test_openai_max_rule(void **state) {
    const char *dep = "openai-max";
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "10000",
                 "tokens_rule", "max", "estimate_exact", "1", NULL);
    char rule[16];
    assert_string_equal(limits_text(dep, "tokens_rule", rule, sizeof(rule)), "max");
    char res[32];
    struct {
        const char *est, *usage;
        double at_grant, charged;
    } cases[] = {
        {"200+300", "200+100", 300, 300}, /* max output binds */
        {"500+100", "480+100", 500, 500}, /* the prompt binds, usage below */
        {"500+100", "560+90", 500, 560},  /* a longer prompt: 60 more */
        {"250+300", "350+20", 300, 350},  /* the prompt turned out larger */
        {"400", "200+150", 400, 400},     /* combined: parts unknown */
        {"400", "500+10", 400, 500},      /* combined, prompt above it */
        {"200+16", "200+900", 200, 900},  /* no max_tokens: the answer ran past the default */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double before = charged_total(dep);
        grant g = reserve_tok(dep, cases[i].est, 0);
        assert_true(g.granted);
        double grant_charge = charged_total(dep) - before;
        settle_fb(dep, g.id, cases[i].usage, "ok", -1, "-", res, sizeof(res));
        double got = charged_total(dep) - before;
        if (fabs(grant_charge - cases[i].at_grant) > 1e-6 || fabs(got - cases[i].charged) > 1e-6)
            fail_msg("case %zu (%s settled %s): %.3f at the grant, %.3f in all; the provider %.0f, %.0f", i,
                     cases[i].est, cases[i].usage, grant_charge, got, cases[i].at_grant, cases[i].charged);
    }
    /* A cancel before the slot gives back exactly what the grant charged. */
    dep = "openai-max-cancel";
    configure_on(rc, dep, "rpm", "60", "tpm", "60000", "burst_requests", "1", "burst_tokens", "10000", "tokens_rule",
                 "max", "estimate_exact", "1", NULL);
    grant a = reserve_tok(dep, "100+300", 0);
    grant b = reserve_tok(dep, "100+300", 5000);
    assert_true(a.granted && b.granted && b.wait_ms > 0);
    double before = charged_total(dep);
    settle_fb(dep, b.id, "-1", "cancelled", -1, "-", res, sizeof(res));
    assert_true(fabs(before - charged_total(dep) - 300.0) < 1e-6);
    /* A bad rule is refused and changes nothing. */
    redisReply *r = script_callv(rc, SCRIPT_CONFIGURE, dep, "rpm", "60", "tokens_rule", "min", NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "tokens_rule"));
    freeReplyObject(r);
    assert_string_equal(limits_text(dep, "tokens_rule", rule, sizeof(rule)), "max");
}

/* Anthropic: input charged at admission (cache reads not counted), output
 * charged as max_tokens and corrected to the actual output. */
static void test_anthropic_input_and_output(void **state) {
    const char *dep = "claude";
    configure_on(rc, dep, "rpm", "600000", "itpm", "60000", "otpm", "60000", "burst_requests", "1000", "burst_input",
                 "10000", "burst_output", "10000", "estimate_exact", "1", NULL);
    grant g = reserve_tok(dep, "300+1000", 0);
    assert_true(g.granted);
    double in0 = state_num(dep, "input_tat"), out0 = state_num(dep, "output_tat");
    /* The input bucket took the input, the output bucket the max output. */
    assert_true(state_num(dep, "input_granted") == 300);
    assert_true(state_num(dep, "output_granted") == 1000);
    char res[32];
    settle_fb(dep, g.id, "300+200+0", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(state_num(dep, "input_tat") == in0);
    assert_true(fabs(out0 - state_num(dep, "output_tat") - 800.0) < 0.01);
    assert_true(state_num(dep, "output_refunded") == 800);
    assert_true(state_num(dep, "input_refunded") == 0);

    /* Cache reads do not count toward the input, and the provider never
     * took them: 1200 with 400 read from the cache was counted at
     * admission as 1200 - 400 = 800, so 200 of the 1000 estimated are
     * given back (the cache reads; nothing of an estimate above the
     * prompt would be); 1500 with 200 read counted 1300 (300 charged). */
    g = reserve_tok(dep, "1000+100", 0);
    double in1 = state_num(dep, "input_tat"), c1 = state_num(dep, "input_counted");
    settle_fb(dep, g.id, "1200+50+400", "ok", -1, "-", res, sizeof(res));
    assert_true(state_num(dep, "input_counted") - c1 == 800);
    assert_true(state_num(dep, "input_tat") <= in1);
    assert_true(fabs(in1 - state_num(dep, "input_tat") - state_num(dep, "input_refunded")) < 0.01);
    assert_true(state_num(dep, "input_refunded") <= 200);
    g = reserve_tok(dep, "1000+100", 0);
    double in3 = state_num(dep, "input_tat"), c3 = state_num(dep, "input_counted");
    settle_fb(dep, g.id, "900+50+300", "ok", -1, "-", res, sizeof(res));
    /* 900 with 300 from the cache: counted as the 1000 estimated less the
     * 300 (600 the provider's own count; the estimate's excess is not
     * given back, the cache reads are). */
    assert_true(state_num(dep, "input_counted") - c3 == 700);
    assert_true(state_num(dep, "input_tat") <= in3);
    g = reserve_tok(dep, "1000+100", 0);
    double in2 = state_num(dep, "input_tat");
    settle_fb(dep, g.id, "1500+50+200", "ok", -1, "-", res, sizeof(res));
    assert_true(fabs(state_num(dep, "input_tat") - in2 - 300.0) < 0.01);
    assert_true(state_num(dep, "input_charged") == 300);

    /* An estimate given as one figure is charged to both input and output
     * (an upper bound of each: never under-charged). */
    double ig = state_num(dep, "input_granted"), og = state_num(dep, "output_granted");
    g = reserve_tok(dep, "500", 0);
    assert_true(g.granted);
    assert_true(state_num(dep, "input_granted") - ig == 500);
    assert_true(state_num(dep, "output_granted") - og == 500);

    /* A request larger than a dimension's per-minute limit never fits. */
    g = reserve_tok(dep, "100+70000", 60000);
    assert_false(g.granted);
    assert_string_equal(g.reason, "too_large");
}

/* requests_window_ms (Azure counts requests per 1 s window): one send at
 * a time, no burst, spaced (W + J) / count so that a send up to J late
 * never puts one more in a window. 600 RPM, W 1000, J 10: 10 a second,
 * 101 ms apart. */
static void test_requests_window(void **state) {
    (void)state;
    const char *dep = "azwin";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "10", "requests_window_ms", "1000", NULL);
    double prev = 0;
    for (int i = 0; i < 12; i++) {
        grant g = reserve_tok(dep, "0", 600000);
        assert_true(g.granted);
        double slot = g.now_ms + (double)g.wait_ms;
        if (i == 0) assert_true(g.wait_ms <= 1); /* the first at once */
        if (i > 0) assert_true(fabs(slot - prev - 101.0) <= 1.0);
        prev = slot;
    }
    /* Without the window the burst goes at once (10 less the jitter's
     * tenth of a request: 9). */
    configure_on(rc, "azbucket", "rpm", "600", "burst_requests", "10", "jitter_ms", "10", NULL);
    for (int i = 0; i < 9; i++) assert_true(reserve_tok("azbucket", "0", 600000).wait_ms <= 1);
}

/* output_charge expected (Anthropic's current rule): once four answers
 * said how much of their max output they use, the output bucket charges
 * the 90th percentile of that share, not the max; an answer above it is
 * charged as it was counted, and max charged stays the rule without the
 * option. */
static void test_expected_output(void **state) {
    (void)state;
    const char *dep = "outexp";
    configure_on(rc, dep, "rpm", "600000", "itpm", "600000", "otpm", "60000", "burst_requests", "1000", "burst_input",
                 "10000", "burst_output", "10000", "estimate_exact", "1", "output_charge", "expected", NULL);
    char res[32];
    /* Learning: the max output before the first answer, then the largest
     * share seen (0.2) times 1 + 1 / n for n answers known: 400, 300, 267
     * (rounded up). */
    static const double learning[] = {1000, 400, 300, 267};
    for (int i = 0; i < 4; i++) {
        double before = state_num(dep, "output_granted");
        grant g = reserve_tok(dep, "300+1000", 0);
        assert_true(g.granted);
        assert_true(state_num(dep, "output_granted") - before == learning[i]);
        settle_fb(dep, g.id, i == 3 ? "300+250+0" : "300+200+0", "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
    }
    /* Four shares 0.2, 0.2, 0.2, 0.25: the 90th percentile is 0.25. */
    assert_true(fabs(state_num(dep, "output_ratio") - 0.25) < 1e-9);
    double before = state_num(dep, "output_granted");
    grant g = reserve_tok(dep, "300+1000", 0);
    assert_true(g.granted);
    assert_true(state_num(dep, "output_granted") - before == 250);
    /* A long answer: 600 counted, 350 more than charged. */
    double charged = state_num(dep, "output_charged"), refunded = state_num(dep, "output_refunded");
    settle_fb(dep, g.id, "300+600+0", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(state_num(dep, "output_charged") - charged == 350);
    assert_true(state_num(dep, "output_refunded") == refunded);
    /* The long answer is one more share (0.6, now the 90th percentile of
     * five); a short one is given back from that, not from the max. */
    assert_true(fabs(state_num(dep, "output_ratio") - 0.6) < 1e-9);
    before = state_num(dep, "output_granted");
    g = reserve_tok(dep, "300+1000", 0);
    assert_true(state_num(dep, "output_granted") - before == 600);
    refunded = state_num(dep, "output_refunded");
    settle_fb(dep, g.id, "300+100+0", "ok", -1, "-", res, sizeof(res));
    assert_true(state_num(dep, "output_refunded") - refunded <= 500);
    /* Without the option the max is charged whatever was learned. */
    configure_on(rc, dep, "rpm", "600000", "itpm", "600000", "otpm", "60000", "burst_requests", "1000", "burst_input",
                 "10000", "burst_output", "10000", "estimate_exact", "1", "output_charge", "max", NULL);
    before = state_num(dep, "output_granted");
    g = reserve_tok(dep, "300+1000", 0);
    assert_true(state_num(dep, "output_granted") - before == 1000);
    /* A bad value is refused by name. */
    redisReply *r = script_callv(rc, SCRIPT_CONFIGURE, dep, "rpm", "600", "output_charge", "most", NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "output_charge"));
    freeReplyObject(r);
}

/* One item (tokens, max_wait 0, lane) on dep: the grant, as reserve_tok. */
static grant reserve_in_lane(const char *dep, const char *tok, const char *lane) {
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "1", tok, "0", lane, "", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
    assert_int_equal(r->elements, 6);
    grant g = {0};
    redisReply *it = r->element[5];
    g.granted = it->element[0]->integer == 1;
    if (g.granted) g.id = it->element[1]->integer;
    freeReplyObject(r);
    return g;
}

/* The expected output is learned per lane as well (issue 23: "learned per
 * deployment and lane"): a chat lane of short answers beside a batch lane
 * of long ones is charged its own share once it has four answers, not the
 * mix's 90th percentile; a lane still learning is charged the
 * deployment's. The grant record names the lane (field 16). */
static void test_expected_output_per_lane(void **state) {
    (void)state;
    const char *dep = "outlane";
    configure_on(rc, dep, "rpm", "600000", "itpm", "600000", "otpm", "60000", "burst_requests", "1000", "burst_input",
                 "100000", "burst_output", "100000", "estimate_exact", "1", "output_charge", "expected", "lane.chat",
                 "0,-1,0", "lane.batch", "0,-1,0", "lane.bulk", "0,-1,0", NULL);
    char res[32], f16[32];
    for (int i = 0; i < 4; i++) {
        grant g = reserve_in_lane(dep, "300+1000", "chat");
        assert_true(g.granted);
        record_field(dep, g.id, 16, f16, sizeof(f16));
        assert_string_equal(f16, "chat");
        settle_fb(dep, g.id, "300+100+0", "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
        g = reserve_in_lane(dep, "300+1000", "batch");
        assert_true(g.granted);
        settle_fb(dep, g.id, "300+900+0", "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
    }
    /* The deployment's 90th percentile of the eight is 0.9; each lane has
     * its own. */
    assert_true(fabs(state_num(dep, "output_ratio") - 0.9) < 1e-9);
    assert_true(fabs(state_num(dep, "l.chat.output_ratio") - 0.1) < 1e-9);
    assert_true(fabs(state_num(dep, "l.batch.output_ratio") - 0.9) < 1e-9);
    double before = state_num(dep, "output_granted");
    grant g = reserve_in_lane(dep, "300+1000", "chat");
    assert_true(g.granted);
    assert_true(state_num(dep, "output_granted") - before == 100);
    before = state_num(dep, "output_granted");
    g = reserve_in_lane(dep, "300+1000", "batch");
    assert_true(state_num(dep, "output_granted") - before == 900);
    /* A lane with no answers yet: the deployment's share. */
    before = state_num(dep, "output_granted");
    g = reserve_in_lane(dep, "300+1000", "bulk");
    assert_true(state_num(dep, "output_granted") - before == 900);
    record_field(dep, g.id, 16, f16, sizeof(f16));
    assert_string_equal(f16, "bulk");
    /* A deployment without lanes: the record ends before field 16. */
    configure_on(rc, "outnolane", "rpm", "600000", "itpm", "600000", "otpm", "60000", "burst_output", "100000",
                 "estimate_exact", "1", "output_charge", "expected", NULL);
    g = reserve_tok("outnolane", "300+1000", 0);
    assert_true(g.granted);
    record_field("outnolane", g.id, 16, f16, sizeof(f16));
    assert_string_equal(f16, "");
}

/* The dimension that binds names the shed: itpm or otpm. */
static void test_split_dimensions_bind(void **state) {
    const char *dep = "bind";
    /* 6000 ITPM / OTPM: 100 per second each, bursts of 100. */
    configure_on(rc, dep, "rpm", "600000", "itpm", "6000", "otpm", "6000", "burst_requests", "1000", "burst_input",
                 "100", "burst_output", "100", "jitter_ms", "0", NULL);
    grant g = reserve_tok(dep, "10+100", 0);
    assert_true(g.granted);
    g = reserve_tok(dep, "10+50", 0);
    assert_false(g.granted);
    assert_string_equal(g.reason, "otpm");
    g = reserve_tok(dep, "100+0", 0);
    assert_false(g.granted);
    assert_string_equal(g.reason, "itpm");
}

/* ---- evidence, not one 429 ------------------------------------------------ */

static void test_isolated_429_only_pauses(void **state) {
    const char *dep = "stray";
    configure_on(rc, dep, "rpm", "6000", "burst_requests", "1", "jitter_ms", "0", NULL);
    char res[32];
    /* Two unexplained 429s: a pause each, no decrease. */
    for (int i = 0; i < 2; i++) {
        grant g = reserve_tok(dep, "0", 600000);
        settle_fb(dep, g.id, "-1", "throttled", 50, "-", res, sizeof(res));
        assert_true(status_num(rc, dep, "rate_scale") == 1.0);
    }
    assert_true(state_num(dep, "pauses") >= 1);
    /* The window passes: the count starts again. */
    advance_on(rc, dep, 11000);
    grant g = reserve_tok(dep, "0", 600000);
    settle_fb(dep, g.id, "-1", "throttled", -1, "-", res, sizeof(res));
    assert_true(status_num(rc, dep, "rate_scale") == 1.0);
    /* 429s whose headers tell the bucket's state are evidence for the
     * headers' rules, not for AIMD. */
    for (int i = 0; i < 3; i++) {
        g = reserve_tok(dep, "0", 600000);
        settle_fb(dep, g.id, "-1", "throttled", -1, "r=6000/0", res, sizeof(res));
    }
    assert_true(status_num(rc, dep, "rate_scale") == 1.0);
    /* Three unexplained ones within the window: the provider is tighter
     * than configured and says nothing: x0.7 once. */
    for (int i = 0; i < 3; i++) {
        g = reserve_tok(dep, "0", 600000);
        settle_fb(dep, g.id, "-1", "throttled", -1, "-", res, sizeof(res));
    }
    assert_true(fabs(status_num(rc, dep, "rate_scale") - 0.7) < 1e-9);
    assert_true(fabs(status_num(rc, dep, "effective_rpm") - 4200) < 0.01);
    assert_true(state_num(dep, "decreases") == 1);
}

static void test_reported_limit_adopted(void **state) {
    const char *dep = "adopt";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
    char res[32];
    grant g = reserve_tok(dep, "0", 600000);
    settle_fb(dep, g.id, "-1", "ok", -1, "r=480/79", res, sizeof(res));
    assert_true(status_num(rc, dep, "adopted_rpm") == 480);
    assert_true(fabs(status_num(rc, dep, "effective_rpm") - 480) < 0.01);
    assert_true(state_num(dep, "limit_changes") == 1);
    /* The schedule runs at the adopted limit: slots 125 ms apart once the
     * (scaled) burst of 8 is used. */
    double last = 0, gap = 0;
    for (int i = 0; i < 12; i++) {
        grant x = reserve_tok(dep, "0", 600000);
        assert_true(x.granted);
        double slot = x.now_ms + (double)x.wait_ms;
        if (i > 0) gap = slot - last;
        last = slot;
    }
    assert_true(fabs(gap - 125.0) <= 1.0);
    /* The same report again changes nothing; the configured limit again
     * drops the adoption. */
    settle_fb(dep, -1, "-1", "ok", -1, "r=480/40", res, sizeof(res));
    assert_true(state_num(dep, "limit_changes") == 1);
    settle_fb(dep, -1, "-1", "ok", -1, "r=600/40", res, sizeof(res));
    assert_true(status_num(rc, dep, "adopted_rpm") == 0);
    assert_true(fabs(status_num(rc, dep, "effective_rpm") - 600) < 0.01);
    assert_true(state_num(dep, "limit_changes") == 2);
    /* A limit above the configured one is not adopted. */
    settle_fb(dep, -1, "-1", "ok", -1, "r=900/40", res, sizeof(res));
    assert_true(status_num(rc, dep, "adopted_rpm") == 0);
}

/* A provider's request bucket (capacity, refill per ms) that the fleet and
 * a neighbour both draw from, as a token-bucket provider documents it. */
typedef struct provider {
    double level, cap, rate, at;
} provider;

static int provider_admit(provider *p, double t, double cost) {
    if (t > p->at) {
        p->level = fmin(p->cap, p->level + (t - p->at) * p->rate);
        p->at = t;
    }
    if (p->level + 1e-9 >= cost) {
        p->level -= cost;
        return 1;
    }
    return 0;
}

/* Output counted as generated (output_charge expected) gives back what an
 * answer did not use as far as the sends since the grant's slot allow:
 * the provider never took it, and its bucket may have wasted the refill
 * the fleet held back meanwhile. Taken at admission and given back at
 * the end (output_charge max, Anthropic's 2025 rule), the bound starts
 * at the answer's end. A at T (charged 1000, the max before any answer),
 * B at T + 100 (slot about T + 1000: 1000 a second, a burst of 1000), A
 * settles at T + 1300 having used 200. (With the first answer known, B,
 * still out, is charged twice its share from then on and gives the rest
 * back: output_ahead, test_first_answer_gives_back_the_grants_out; A's
 * own give-back is the rest of output_refunded.) */
static void clock_at(const char *dep, double t);
static void test_expected_output_given_back_from_the_send(void **state) {
    (void)state;
    const char *rule[2] = {"expected", "max"};
    const double want[2] = {0, 800};
    const double T = 1800000000000.0;
    for (int k = 0; k < 2; k++) {
        char dep[32], res[32];
        snprintf(dep, sizeof(dep), "outsince%d", k);
        configure_on(rc, dep, "rpm", "600000", "itpm", "6000000", "otpm", "60000", "burst_requests", "1000",
                     "burst_input", "100000", "burst_output", "1000", "estimate_exact", "1", "output_charge", rule[k],
                     NULL);
        clock_at(dep, T);
        grant a = reserve_tok(dep, "300+1000", 5000);
        assert_true(a.granted);
        assert_int_equal(a.wait_ms, 0);
        clock_at(dep, T + 100);
        grant b = reserve_tok(dep, "300+1000", 5000);
        assert_true(b.granted);
        /* (Its slot before T + 1050: the bound from A's end leaves it out.) */
        if (!(b.wait_ms > 800 && b.wait_ms < 950)) fail_msg("B waits %lld ms", b.wait_ms);
        clock_at(dep, T + 1300);
        settle_fb(dep, a.id, "300+200+0", "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
        assert_true(fabs(state_num(dep, "output_refunded") - state_num(dep, "output_ahead") - want[k]) < 0.5);
        assert_true(state_num(dep, "output_ahead") == (k == 0 ? 600 : 0));
    }
}

/* dep with lanes chat and batch, expected output, room for every grant
 * at once (a token a ms of output). */
static void configure_chat_batch(const char *dep) {
    configure_on(rc, dep, "rpm", "600000", "itpm", "6000000", "otpm", "60000", "burst_requests", "1000", "burst_input",
                 "100000", "burst_output", "100000", "estimate_exact", "1", "output_charge", "expected", "lane.chat",
                 "0,-1,0", "lane.batch", "0,-1,0", NULL);
}

/* The first answer known gives back, at once, what the grants still out
 * were charged above the share it teaches (lua/settle.lua, out_ahead):
 * three grants at the max (1000) before any answer; the first answers
 * 200 (a fifth), so a grant is charged twice that from now on (400), and
 * the other two give 600 each back then, not when they end. Their
 * records say 400, which their settles correct. At a frozen clock, a
 * bucket deep enough that no bound holds any of it back. */
static void test_first_answer_gives_back_the_grants_out(void **state) {
    (void)state;
    const char *dep = "outahead";
    const double T = 1800000000000.0;
    char res[32], f12[32];
    configure_on(rc, dep, "rpm", "600000", "itpm", "6000000", "otpm", "60000", "burst_requests", "1000", "burst_input",
                 "100000", "burst_output", "100000", "estimate_exact", "1", "output_charge", "expected", NULL);
    clock_freeze(rc, dep, T);
    grant g[3];
    for (int i = 0; i < 3; i++) {
        g[i] = reserve_tok(dep, "300+1000", 0);
        assert_true(g[i].granted);
    }
    assert_true(state_num(dep, "output_granted") == 3000);
    clock_freeze(rc, dep, T + 1000);
    settle_fb(dep, g[0].id, "300+200+0", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    /* Its own 800, and 600 from each of the two out. */
    assert_true(state_num(dep, "output_ahead") == 1200);
    assert_true(state_num(dep, "output_refunded") == 2000);
    for (int i = 1; i < 3; i++) {
        record_field(dep, g[i].id, 12, f12, sizeof(f12));
        assert_string_equal(f12, "400");
    }
    /* The schedule holds 200 + 400 + 400: the output bucket's TAT is a
     * second past the clock (60 000 a minute: 1 a ms). */
    assert_true(fabs(state_num(dep, "output_tat") - (T + 1000)) < 1e-6);
    /* The second answers 300: corrected from 400, not from the max; the
     * share learned is now 0.3 (1.5 x 0.3 = 0.45 > 0.4: nothing more). */
    settle_fb(dep, g[1].id, "300+300+0", "ok", -1, "-", res, sizeof(res));
    assert_true(state_num(dep, "output_refunded") == 2100);
    assert_true(state_num(dep, "output_ahead") == 1200);
    record_field(dep, g[2].id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "400");
    /* A lane's grant follows its lane's share: the deployment's while the
     * lane learns (then its own, reserve.lua's item_out_r). Two chat
     * grants at the max; the first answers 100: the other is charged
     * twice that from now on and gives 800 back. */
    const char *ldep = "outaheadl";
    configure_chat_batch(ldep);
    clock_freeze(rc, ldep, T);
    grant c1 = reserve_in_lane(ldep, "300+1000", "chat"), c2 = reserve_in_lane(ldep, "300+1000", "chat");
    assert_true(c1.granted && c2.granted);
    clock_freeze(rc, ldep, T + 1000);
    settle_fb(ldep, c1.id, "300+100+0", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(state_num(ldep, "output_ahead") == 800);
    record_field(ldep, c2.id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "200");
    /* Then its own, once it has four answers: batch answers of 900 teach
     * the deployment 0.9, so chat grants are charged 900 while the chat
     * lane learns; its fourth answer of 100 makes its share 0.1, and the
     * chat grant still out gives back 800 (the deployment's share does
     * not move: the 90th percentile of four 0.9s and the chat answers). */
    const char *mdep = "outaheadm";
    configure_chat_batch(mdep);
    clock_freeze(rc, mdep, T);
    for (int i = 0; i < 4; i++) {
        grant b = reserve_in_lane(mdep, "300+1000", "batch");
        assert_true(b.granted);
        settle_fb(mdep, b.id, "300+900+0", "ok", -1, "-", res, sizeof(res));
    }
    assert_true(fabs(state_num(mdep, "output_ratio") - 0.9) < 1e-9);
    grant c[5];
    for (int i = 0; i < 5; i++) {
        c[i] = reserve_in_lane(mdep, "300+1000", "chat");
        assert_true(c[i].granted);
    }
    record_field(mdep, c[4].id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "900");
    clock_freeze(rc, mdep, T + 1000);
    for (int i = 0; i < 4; i++) {
        double ahead = state_num(mdep, "output_ahead");
        settle_fb(mdep, c[i].id, "300+100+0", "ok", -1, "-", res, sizeof(res));
        assert_string_equal(res, "settled");
        /* Nothing before the fourth: the lane still learns. */
        assert_true(state_num(mdep, "output_ahead") - ahead == (i == 3 ? 800 : 0));
    }
    record_field(mdep, c[4].id, 12, f12, sizeof(f12));
    assert_string_equal(f12, "100");
}

typedef struct sim_result {
    int sent, rejected;
    double outside_rpm, effective_rpm;
    double max_outside; /* the largest requests_outside after any settle */
} sim_result;

/* Sets dep's script clock to t (ms) and holds it there (clock_freeze):
 * every script reads t until the clock is set or moved (advance_on)
 * again. The simulations set the clock to each slot rather than moving
 * it on by the distance to it: moved on, the clock kept the real time
 * every call took, which added up over a run; on a slow machine the
 * fleet's slots drifted apart, it sent below the provider's refill, the
 * bucket stayed full and the readings told nothing. Set to t with Redis'
 * TIME running on from there (t plus one round trip at the next call),
 * the real time between the calls still moved the readings' spans: the
 * header calibration's neighbour run failed on a loaded machine (its
 * reading never dropped). Frozen, no verdict here depends on the load. */
static void clock_at(const char *dep, double t) { clock_freeze(rc, dep, t); }

/* Runs the fleet (demand above the quota) for ms of the test clock against
 * p, with a neighbour taking neighbour_rpm from the same bucket, settling
 * every grant with the remaining the provider reports. The script clock is
 * set to each slot (clock_at), so the run is the same however long the
 * calls take. */
static sim_result simulate(const char *dep, provider *p, double neighbour_rpm, double ms) {
    sim_result out = {0};
    grant g = reserve_tok(dep, "0", 600000);
    double start = g.now_ms, clock = g.now_ms, next_nb = start;
    char res[32];
    while (clock < start + ms) {
        assert_true(g.granted);
        double slot = g.now_ms + (double)g.wait_ms;
        /* The neighbour's sends before this one. */
        while (neighbour_rpm > 0 && next_nb <= slot) {
            provider_admit(p, next_nb, 1);
            next_nb += 60000.0 / neighbour_rpm;
        }
        if (slot > clock) clock = slot;
        clock_at(dep, clock);
        int ok = provider_admit(p, slot, 1);
        char seen[64];
        snprintf(seen, sizeof(seen), "r=600/%.0f", floor(fmax(0, p->level)));
        settle_fb(dep, g.id, "-1", ok ? "ok" : "throttled", -1, seen, res, sizeof(res));
        out.sent++;
        if (!ok) out.rejected++;
        out.max_outside = fmax(out.max_outside, state_num(dep, "requests_outside"));
        if (getenv("SIM_DEBUG") && out.sent % 10 == 0)
            print_message("    t=%.0f R=%.1f x=%.6f deficit=%.1f outside=%.1f obs=%s\n", slot - start, p->level,
                          state_num(dep, "requests_outside_ms"), state_num(dep, "requests_deficit"),
                          state_num(dep, "requests_outside"), "");
        g = reserve_tok(dep, "0", 600000);
    }
    out.outside_rpm = status_num(rc, dep, "outside_rpm");
    out.effective_rpm = status_num(rc, dep, "effective_rpm");
    return out;
}

/* A lease runs from the grant's slot where its agent holds it: a grant the
 * schedule was stretched past lease_ms is not reclaimed before it is sent
 * (its settle then unknown). 60 grants 100 ms apart (after a burst of 10),
 * lease 3 s, the backlog stretched twice at once: at 9 s the leases of
 * the 20 last (stretched slots past 6 s) run on, the 40 first end (39:
 * grant 10 was settled, telling the lower limit). Before, all 59. */
static void test_stretched_grants_keep_their_lease(void **state) {
    (void)state;
    const char *dep = "stretch-lease";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", "lease_ms", "3000", NULL);
    clock_at(dep, 1000000);
    grant g[60];
    for (int i = 0; i < 60; i++) {
        g[i] = reserve_tok(dep, "0", 600000);
        assert_true(g[i].granted);
    }
    char ids[24], res[32];
    snprintf(ids, sizeof(ids), "%lld", g[9].id);
    settle_fb(dep, g[9].id, "-1", "ok", -1, "r=300/0", res, sizeof(res));
    assert_true(fabs(state_num(dep, "retime") - log(2.0)) < 1e-9);
    clock_at(dep, 1009000);
    grant late = reserve_tok(dep, "0", 600000);
    assert_true(late.granted);
    print_message("  stretched 2x, lease 3 s: %.0f reclaimed at 9 s of 60 granted\n", state_num(dep, "expired_total"));
    assert_true(state_num(dep, "expired_total") == 39);
    clock_at(dep, 1010500);
    settle_fb(dep, g[59].id, "-1", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
}

/* A lower limit the headers report re-times what is already granted: the
 * schedule's backlog stretches by old / new, the replies carry the stretch
 * for the agents to re-time the callers they hold ("<shift>:<log K>:<at>"),
 * and a response to a grant made before the one that told the new limit
 * (older news) does not flap it back. */
static void test_lower_limit_retimes_grants(void **state) {
    (void)state;
    const char *dep = "retime";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
    clock_at(dep, 1000000);
    grant g[30];
    for (int i = 0; i < 30; i++) {
        g[i] = reserve_tok(dep, "0", 600000);
        assert_true(g[i].granted);
    }
    /* 10 at once, then 100 ms apart: TAT is 30 x 100 ms past now (the
     * burst is its tolerance). */
    double tat0 = state_num(dep, "requests_tat") - g[29].now_ms;
    assert_true(tat0 > 2900 && tat0 < 3100);
    assert_false(state_num(dep, "retime") > 0);
    /* Grant 10 (9 granted before it) reports 300 a minute. */
    clock_at(dep, 1000000);
    char ids[24];
    snprintf(ids, sizeof(ids), "%lld", g[9].id);
    redisReply *r = script_callv(rc, SCRIPT_SETTLE, dep, "feedback", "1", ids, "-1", "ok", "-1", "r=300/0", NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    double now = (double)r->element[0]->integer / 1000.0;
    assert_int_equal(r->element[3]->type, REDIS_REPLY_STRING);
    double lg = -1, at = -1;
    long long shift = -1;
    assert_int_equal(sscanf(r->element[3]->str, "%lld:%lf:%lf", &shift, &lg, &at), 3);
    freeReplyObject(r);
    assert_int_equal(shift, 0);
    assert_true(fabs(lg - log(2.0)) < 1e-9);
    assert_true(fabs(at - now) < 1.0);
    assert_true(status_num(rc, dep, "adopted_rpm") == 300);
    /* The backlog is twice as long: every slot granted now comes twice as
     * far from now (the agents move their held callers the same way). */
    double tat1 = state_num(dep, "requests_tat") - now;
    assert_true(fabs(tat1 - 2 * (tat0 - (now - g[29].now_ms))) < 5);
    /* The next reserve carries the same stretch, and its slot follows the
     * stretched backlog at the new rate. */
    clock_at(dep, 1000000);
    redisReply *rr = script_callv(rc, SCRIPT_RESERVE, dep, "1", "0", "600000", NULL);
    assert_non_null(rr);
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rr->element[4]->type, REDIS_REPLY_STRING);
    assert_non_null(strstr(rr->element[4]->str, ":0.693147"));
    freeReplyObject(rr);
    /* Grant 5 (4 before it) was sent before grant 10: its limit is older
     * news and changes nothing; grant 20's is news. */
    char res[32];
    settle_fb(dep, g[4].id, "-1", "ok", -1, "r=600/0", res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(status_num(rc, dep, "adopted_rpm") == 300);
    assert_true(state_num(dep, "limit_changes") == 1);
    settle_fb(dep, g[19].id, "-1", "ok", -1, "r=600/0", res, sizeof(res));
    assert_true(status_num(rc, dep, "adopted_rpm") == 0);
    assert_true(state_num(dep, "limit_changes") == 2);
    /* A raised limit does not re-time: the sum of log K stays. */
    assert_true(fabs(state_num(dep, "retime") - log(2.0)) < 1e-9);
}

/* Others' use read in the headers re-times the grants already made, as a
 * lower limit does (settle.lua, observe): a backlog granted before a
 * neighbour was seen stretches by about 1 / (1 - its share) once two
 * readings show it, and is compressed back once it stops. The test holds
 * the backlog as an agent does, moving every slot not yet sent by each
 * reply's re-timing ("<shift>:<sum of log K>:<at>", engine_call.c
 * dep_retime_waiting), and reads the provider's bucket at those slots. */
static void test_outside_use_retimes_grants(void **state) {
    (void)state;
    const char *dep = "nbretime";
    enum { N = 200 };
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
    clock_at(dep, 2000000);
    static grant g[N];
    static double slot[N];
    for (int i = 0; i < N; i++) {
        g[i] = reserve_tok(dep, "0", 600000);
        assert_true(g[i].granted);
        slot[i] = g[i].now_ms + (double)g[i].wait_ms;
    }
    /* 20 s of sends at 600 RPM, granted before anyone else was seen. */
    assert_true(slot[N - 1] - slot[0] > 18000);
    double t0 = slot[0], leave = t0 + 12000, next_nb = t0, applied = 0, most = 0;
    provider p = {100, 100, 600.0 / 60000.0, t0};
    int rejected = 0, sent_nb = 0;
    for (int i = 0; i < N; i++) {
        double t = slot[i];
        /* A neighbour at 180 RPM (30 %) until 12 s. */
        for (; next_nb <= t && next_nb < leave; next_nb += 60000.0 / 180) sent_nb += provider_admit(&p, next_nb, 1);
        clock_at(dep, t);
        int ok = provider_admit(&p, t, 1);
        rejected += !ok;
        char ids[24], seen[32];
        snprintf(ids, sizeof(ids), "%lld", g[i].id);
        snprintf(seen, sizeof(seen), "r=600/%.0f", floor(fmax(0, p.level)));
        redisReply *r =
            script_callv(rc, SCRIPT_SETTLE, dep, "feedback", "1", ids, "-1", ok ? "ok" : "throttled", "-1", seen, NULL);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_string_equal(r->element[4]->str, "settled");
        double lg = 0, at = 0;
        long long shift = 0;
        if (r->element[3]->type == REDIS_REPLY_STRING) sscanf(r->element[3]->str, "%lld:%lf:%lf", &shift, &lg, &at);
        freeReplyObject(r);
        if (fabs(lg - applied) > 1e-12) {
            double k = exp(lg - applied);
            if (k < 1 && at < t) at = t;
            for (int j = i + 1; j < N; j++)
                if (slot[j] > at) slot[j] = at + (slot[j] - at) * k;
            applied = lg;
        }
        if (t < leave && applied > most) most = applied;
    }
    print_message("  neighbour 180 RPM until 12 s: backlog stretched %.3fx at most, %.3fx after it left; %d 429s, "
                  "the neighbour sent %d\n",
                  exp(most), exp(applied), rejected, sent_nb);
    /* Seen while it is there: the backlog goes at about 420 RPM, not 600
     * (1 / 0.7 = 1.43; whole counts read in 2 s spans are rough). */
    assert_true(exp(most) > 1.25 && exp(most) < 1.65);
    /* Gone: the backlog left is compressed back most of the way. */
    assert_true(applied < most - 0.2);
    assert_true(rejected <= 2);
}

/* One fleet on dep sending prompts of 500 estimated (+ 500 max output)
 * that the provider counts as count each, one at a time, the responses
 * without usage, for 70 s of the test clock; a neighbour takes nb_cost
 * every nb_every_ms (0: none). What the fleet was charged from 10 s on
 * (a share of the limit, 1000 a second) and the 429s. */
typedef struct hdr_result {
    int sends, rejected, deferred;
    double fleet_rate;
} hdr_result;

static hdr_result hdr_run(const char *dep, double count, double nb_every_ms, double nb_cost) {
    configure_on(rc, dep, "rpm", "6000", "tpm", "60000", "burst_tokens", "2000", "jitter_ms", "0",
                 "estimate_learn_horizon_ms", "250", NULL);
    provider p = {60000, 60000, 60000.0 / 60000.0, 0};
    grant g = reserve_tok(dep, "500+500", 600000);
    double start = g.now_ms, counted = 0, clock = start, nb_at = start + 500;
    p.at = start;
    hdr_result out = {0};
    char res[32], seen[64];
    while (1) {
        /* Learning, an item is granted no further ahead than 250 ms: a
         * caller deferred asks again 100 ms later. */
        for (int k = 0; !g.granted && k < 1000; k++, out.deferred++) {
            clock += 100;
            clock_at(dep, clock);
            g = reserve_tok(dep, "500+500", 600000);
        }
        assert_true(g.granted);
        double slot = g.now_ms + (double)g.wait_ms;
        if (slot > start + 70000) break;
        for (; nb_every_ms > 0 && nb_at <= slot; nb_at += nb_every_ms) provider_admit(&p, nb_at, nb_cost);
        clock = slot;
        clock_at(dep, slot);
        int ok = provider_admit(&p, slot, count);
        out.rejected += !ok;
        out.sends++;
        if (ok && slot >= start + 10000) counted += count;
        snprintf(seen, sizeof(seen), "t=60000/%.0f", floor(fmax(0, p.level)));
        settle_fb(dep, g.id, "-1", ok ? "ok" : "throttled", -1, seen, res, sizeof(res));
        assert_string_equal(res, "settled");
        g = reserve_tok(dep, "500+500", 600000);
    }
    out.fleet_rate = counted / 60000.0;
    return out;
}

/* Calibration from the headers alone (settle.lua, hdr_calibrate): the
 * responses carry no usage, the provider counts 3.2x the estimate's input
 * part (a CJK prompt against chars / 4), and its remaining tokens are all
 * the fleet hears. The ratio is learned from the spans of the remaining
 * counts (before, it stayed 1 and the excess read as others' use), the
 * shortfall of the sends before it was learned is charged as debt, and
 * from then on the provider counts the limit's rate, not more. A
 * neighbour's excess does not scale with the fleet's prompts: its
 * readings disagree, and it stays others' use, never a ratio. */
static void test_header_calibration(void **state) {
    (void)state;
    hdr_result a = hdr_run("hdrcal", 2100, 0, 0);
    double ratio = state_num("hdrcal", "estimate_ratio");
    print_message("  no usage, the provider counting 3.2x the input: ratio %.4f learned from %g readings, %d sends, "
                  "%d 429s, %d deferrals, counted from 10 s %.3f of the limit, others' use read %.1f a minute\n",
                  ratio, state_num("hdrcal", "estimate_samples"), a.sends, a.rejected, a.deferred, a.fleet_rate,
                  state_num("hdrcal", "tokens_outside"));
    assert_true(ratio >= 3.1 && ratio <= 3.4);
    assert_int_equal(a.rejected, 0);
    assert_true(a.fleet_rate >= 0.93 && a.fleet_rate <= 1.02);
    assert_true(state_num("hdrcal", "tokens_outside") == 0);
    assert_true(state_num("hdrcal", "estimate_header_off") == 0);
    /* Counted as estimated, a neighbour taking 3 000 every 10 s (30 %): the
     * provider's bucket, a minute deep and near full, hides part of it from
     * others' use (observe: a full bucket may have wasted refill). */
    hdr_result b = hdr_run("hdrnb", 1000, 10000, 3000);
    double rb = state_num("hdrnb", "estimate_ratio");
    print_message("  no usage, exact prompts, a neighbour of 30 %%: ratio %.4f, header reading dropped %g times, %d "
                  "429s, fleet %.3f of the limit from 10 s, others' use read %.1f a minute\n",
                  rb, state_num("hdrnb", "estimate_header_off"), b.rejected, b.fleet_rate,
                  state_num("hdrnb", "tokens_outside"));
    /* Not a ratio: dropped, the fleet charged as estimated (a first reading
     * taken at once read the neighbour's 3 000 as a ratio of 7, which no
     * later reading corrected, and the fleet sent 57 % of the limit). */
    assert_true(state_num("hdrnb", "estimate_header_off") >= 1);
    assert_true(rb <= 1.1);
    assert_true(b.rejected <= 1);
    assert_true(b.fleet_rate >= 0.65);
}

static void test_outside_use_followed(void **state) {
    const char *dep = "neighbour";
    /* 600 RPM; the fleet plans with a burst of 10 (one second); the
     * provider's bucket holds 100 (ten seconds, as Azure evaluates). */
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
    provider p = {100, 100, 600.0 / 60000.0, 0};
    /* Alone: nobody else is seen, no 429. */
    grant first = reserve_tok(dep, "0", 0);
    p.at = first.now_ms;
    sim_result a = simulate(dep, &p, 0, 10000);
    print_message("  alone: %d sent, %d rejected, outside %.1f RPM, effective %.1f\n", a.sent, a.rejected,
                  a.outside_rpm, a.effective_rpm);
    assert_int_equal(a.rejected, 0);
    assert_true(a.outside_rpm == 0);
    /* A neighbour takes 180 RPM (30 %): within 20 s it is seen, and the
     * fleet leaves it room: few 429s, at least 85 % of what it leaves. */
    sim_result b = simulate(dep, &p, 180, 20000);
    print_message("  neighbour 180 RPM: %d sent, %d rejected, outside %.1f RPM, effective %.1f\n", b.sent, b.rejected,
                  b.outside_rpm, b.effective_rpm);
    assert_true(b.rejected <= b.sent / 10);
    assert_true(b.outside_rpm > 180 * 0.7 && b.outside_rpm < 180 * 1.5);
    sim_result c = simulate(dep, &p, 180, 20000);
    print_message("  neighbour, next 20 s: %d sent (%.0f %% of the 420 RPM left), %d rejected, outside %.1f RPM\n",
                  c.sent, 100.0 * c.sent / (420.0 * 20 / 60), c.rejected, c.outside_rpm);
    assert_int_equal(c.rejected, 0);
    assert_true(c.sent >= 0.85 * 420.0 * 20 / 60);
    /* It stops: within 10 s the fleet is back at 95 % of the full rate. */
    sim_result d = simulate(dep, &p, 0, 10000);
    print_message("  neighbour gone, 10 s later: outside %.1f RPM, effective %.1f, %d rejected\n", d.outside_rpm,
                  d.effective_rpm, d.rejected);
    assert_true(d.effective_rpm >= 0.95 * 600);
    assert_int_equal(d.rejected, 0);
}

/* The input tokens of a fleet sending prompts of 300..700 tokens (a fixed
 * sequence) against p for ms of the test clock, with a neighbour taking
 * neighbour_per_s of them, the remaining reported rounded to the nearest
 * thousand as Anthropic's are ("rounded to the nearest thousand"). The
 * largest input_outside (per minute) after any settle. */
static double rounded_run(const char *dep, provider *p, double neighbour_per_s, double ms, int *sent) {
    static const int cost[] = {300, 700, 450, 620, 380, 510, 690, 330, 560, 410};
    double most = 0;
    grant g = reserve_tok(dep, "300+0", 600000);
    double start = g.now_ms, clock = g.now_ms, nb_at = start;
    char res[32], seen[64], tok[32], actual[32];
    for (int i = 0; clock < start + ms; i++) {
        assert_true(g.granted);
        int c = cost[i % 10];
        double slot = g.now_ms + (double)g.wait_ms;
        for (; neighbour_per_s > 0 && nb_at <= slot; nb_at += 100) provider_admit(p, nb_at, neighbour_per_s / 10);
        if (slot > clock) clock = slot;
        clock_at(dep, clock);
        int ok = provider_admit(p, slot, c);
        if (sent) *sent += ok;
        snprintf(seen, sizeof(seen), "i=60000/%.0f", 1000 * floor(fmax(0, p->level) / 1000 + 0.5));
        snprintf(actual, sizeof(actual), "%d+0+0", c);
        settle_fb(dep, g.id, actual, ok ? "ok" : "throttled", -1, seen, res, sizeof(res));
        most = fmax(most, state_num(dep, "input_outside"));
        snprintf(tok, sizeof(tok), "%d+0", cost[(i + 1) % 10]);
        g = reserve_tok(dep, tok, 600000);
    }
    return most;
}

/* Rounded remaining counts are read as rounded (settle.lua, observe()).
 * Read as exact, a count one rounding below the cap seen made a full
 * bucket look like a neighbour (the scoreboard's anthropic-current rows
 * read 386 000 input tokens a minute, and the re-timing that followed held
 * back the output's give-backs: 86.6..98.6 % of the floor, 97.2..99.9 %
 * since); and the steps of 1 000 swamped a real neighbour's signal over
 * one-second spans, which this test shows: read as exact, a neighbour
 * taking 30 % of an input-bound fleet's bucket was never seen (0 a minute
 * after 90 s). Read as rounded, over spans long enough that two roundings
 * are noise, it is (17 813 of its 18 000), and a fleet alone, at half the
 * input rate or bound by it, reads nobody. */
static void test_rounded_counts(void **state) {
    (void)state;
    const char *dep = "rounded";
    configure_on(rc, dep, "rpm", "60", "itpm", "60000", "burst_requests", "1", "burst_input", "1000", "estimate_exact",
                 "1", "jitter_ms", "0", NULL);
    provider p = {60000, 60000, 60000.0 / 60000.0, 0};
    p.at = reserve_tok(dep, "1+0", 0).now_ms;
    int sent = 0;
    double alone = rounded_run(dep, &p, 0, 30000, &sent);
    print_message("  alone at half the input rate, counts rounded: %d sent in 30 s, others' use read at most %.1f a "
                  "minute, input schedule %.0f ms ahead\n",
                  sent, alone, state_num(dep, "input_tat") - p.at);
    assert_true(alone == 0);
    assert_true(state_num(dep, "input_hdr_exact") == 0);
    const char *nb = "rounded_nb";
    configure_on(rc, nb, "rpm", "600000", "itpm", "60000", "burst_requests", "1000", "burst_input", "1000",
                 "estimate_exact", "1", "jitter_ms", "0", NULL);
    provider q = {60000, 60000, 60000.0 / 60000.0, 0};
    q.at = reserve_tok(nb, "1+0", 0).now_ms;
    double quiet = rounded_run(nb, &q, 0, 20000, NULL);
    double seen = rounded_run(nb, &q, 300, 90000, NULL);
    print_message("  input-bound, alone: read at most %.1f; a neighbour of 18 000 a minute: read at most %.1f, %.1f "
                  "at the end\n",
                  quiet, seen, state_num(nb, "input_outside"));
    assert_true(quiet == 0);
    assert_true(seen > 0.5 * 18000 && seen < 1.5 * 18000);
    /* One count that is not a whole thousand marks the counts exact. */
    char res[32];
    grant g = reserve_tok(dep, "300+0", 600000);
    settle_fb(dep, g.id, "300+0+0", "ok", -1, "i=60000/12345", res, sizeof(res));
    assert_true(state_num(dep, "input_hdr_exact") == 1);
}

/* An outage of ms (Redis stopped): the fleet's agents pace locally at the
 * full rate (as a whole fleet does, each at its share), sending to the
 * provider with no reserve. A call sent just before it is still in flight:
 * its response (the remaining at its send) comes back only after the
 * outage. Back, one agent hands over and reports its local grants when
 * report is set, then the call in flight settles. Returns the local sends. */
static int outage(const char *dep, provider *p, double ms, int report) {
    grant g = reserve_tok(dep, "0", 600000);
    assert_true(g.granted);
    double t = g.now_ms + (double)g.wait_ms;
    clock_at(dep, t);
    int ok = provider_admit(p, t, 1);
    char seen[64];
    snprintf(seen, sizeof(seen), "r=600/%.0f", floor(fmax(0, p->level)));
    int n = 0;
    for (double slot = t + 60000.0 / 600; slot < t + ms; slot += 60000.0 / 600) n += provider_admit(p, slot, 1);
    clock_at(dep, t + ms);
    if (report) {
        char sent[16];
        snprintf(sent, sizeof(sent), "%d", n);
        redisReply *r =
            script_callv(rc, SCRIPT_HEARTBEAT, dep, "agent-1", "600", "busy", "0", "0", sent, "0", "0", "0", NULL);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
        freeReplyObject(r);
        assert_true(status_num(rc, dep, "local_requests") == n);
    }
    char res[32];
    settle_fb(dep, g.id, "-1", ok ? "ok" : "throttled", -1, seen, res, sizeof(res));
    assert_string_equal(res, "settled");
    return n;
}

/* Settles one grant throttled at the pinned time t, the 429 asking for
 * pause_ms: returns the pause the reply says is left (ms). */
static long long throttled_at(const char *dep, double t, long long pause_ms) {
    clock_at(dep, t);
    grant g = reserve_tok(dep, "0", 600000);
    char ids[24], p[24];
    snprintf(ids, sizeof(ids), "%lld", g.granted ? g.id : -1LL);
    snprintf(p, sizeof(p), "%lld", pause_ms);
    redisReply *r =
        script_callv(rc, SCRIPT_SETTLE, dep, "feedback", "1", g.granted ? ids : "-", "-1", "throttled", p, "-", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("settle: %s", r->str);
    long long left = r->element[1]->integer;
    freeReplyObject(r);
    return left;
}

/* 429s in a row back off fleet-wide (pause_max_ms): one arriving after the
 * last pause ended doubles it; one arriving within it is one of the same
 * sends and changes nothing; after a quiet spell the count starts again;
 * pause_max_ms caps it. Times are pinned with margins of 500 ms over the
 * few ms a call takes. */
static void test_429s_in_a_row_back_off(void **state) {
    const char *dep = "streak";
    configure_on(rc, dep, "rpm", "6000", "burst_requests", "1", "jitter_ms", "0", NULL);
    double t0 = reserve_tok(dep, "0", 0).now_ms + 1000;
    assert_int_equal(throttled_at(dep, t0, 1000), 1000);
    assert_int_equal(throttled_at(dep, t0 + 1500, 1000), 2000);
    assert_int_equal(throttled_at(dep, t0 + 4000, 1000), 4000);
    /* within that pause (it ends at about t0 + 8000): no doubling (a doubling
     * would leave 8000) */
    long long left = throttled_at(dep, t0 + 5000, 1000);
    if (!(left > 2500 && left < 3500)) fail_msg("the pause left: %lld ms, not about 3000", left);
    assert_true(state_num(dep, "pause_doublings") == 2);
    /* quiet for longer than the last pause: the count starts again */
    assert_int_equal(throttled_at(dep, t0 + 12500, 1000), 1000);
    /* capped */
    const char *capped = "streak-capped";
    configure_on(rc, capped, "rpm", "6000", "burst_requests", "1", "jitter_ms", "0", "pause_max_ms", "1500", NULL);
    t0 = reserve_tok(capped, "0", 0).now_ms + 1000;
    assert_int_equal(throttled_at(capped, t0, 1000), 1000);
    assert_int_equal(throttled_at(capped, t0 + 1500, 1000), 1500);
    assert_int_equal(throttled_at(capped, t0 + 3500, 1000), 1500);
    /* off: each 429 as it says */
    const char *off = "streak-off";
    configure_on(rc, off, "rpm", "6000", "burst_requests", "1", "jitter_ms", "0", "pause_max_ms", "0", NULL);
    t0 = reserve_tok(off, "0", 0).now_ms + 1000;
    assert_int_equal(throttled_at(off, t0, 1000), 1000);
    assert_int_equal(throttled_at(off, t0 + 1500, 1000), 1000);
}

/* The fleet's own local sends are not a neighbour's use. After an outage
 * in which the agents paced locally (5 s at the full rate), the provider's
 * remaining counts are lower by what they sent than the fleet's counts
 * explain. With the hand-over (heartbeat busy restarts the estimate: the
 * base of the readings is dropped, and a reading of a send before the
 * hand-over, here the call in flight across the outage, is no base,
 * obs_after), the estimate of others' use stays at nothing at every
 * settle and the fleet sends at its full rate: its burst, then one slot
 * per 100 ms. Without it (the control, as before the hand-over reported),
 * the same outage reads as others' use (one span's lump, repaid once) and
 * the fleet idles for it: proof that the provider's bucket was low enough for
 * the local sends to show (a full bucket wastes the refill they take, and
 * would let any estimator pass). Every value is on the script clock. */
static void test_local_sends_are_the_fleets_own(void **state) {
    sim_result after[2];
    for (int report = 0; report < 2; report++) {
        const char *dep = report ? "local-reported" : "local-unreported";
        configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
        provider p = {100, 100, 600.0 / 60000.0, 0};
        grant first = reserve_tok(dep, "0", 0);
        p.at = first.now_ms;
        sim_result a = simulate(dep, &p, 0, 10000);
        assert_true(a.max_outside == 0);
        assert_int_equal(a.rejected, 0);
        /* The fleet ran at the provider's refill: its bucket is down by the
         * fleet's burst, well below what the readings take for full. */
        double level = p.level;
        assert_true(level < p.cap - 5);
        int local = outage(dep, &p, 5000, report);
        after[report] = simulate(dep, &p, 0, 5000);
        print_message("  %s: provider at %.1f before the outage, %d local sends; after it %d sent, %d rejected, "
                      "outside at most %.1f RPM (%.1f at the end), effective %.1f\n",
                      report ? "reported" : "unreported", level, local, after[report].sent, after[report].rejected,
                      after[report].max_outside, after[report].outside_rpm, after[report].effective_rpm);
        assert_int_equal(local, 49);
    }
    /* Reported: nothing read as others' use, the burst of 10 and 50 slots. */
    assert_true(after[1].max_outside == 0);
    assert_true(after[1].outside_rpm == 0);
    assert_true(after[1].effective_rpm == 600);
    assert_int_equal(after[1].rejected, 0);
    assert_int_equal(after[1].sent, 10 + 5000 * 600 / 60000);
    /* Unreported: the 49 local sends read as others' use, in one span: a
     * lump charged to the schedule once (settle.lua, observe()), not a
     * lasting rate (of the reading only its bound, a tenth of the rate,
     * enters the smoothed rate: 3 % of it), and the fleet sends little
     * more than half as much (the lump is charged a span after it is
     * read, once the next span shows it was no neighbour's start). */
    assert_true(after[0].max_outside > 0 && after[0].max_outside <= 0.03 * 600 + 1e-6);
    assert_true(after[0].sent < 0.6 * after[1].sent);
}

static long long script_int(redisReply *r) {
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("script: %s", r->str);
    /* A heartbeat answers {live, pause_shift_ms, now_us, requests_backlog_ms,
     * tokens_backlog_ms}. */
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer
                  : r->type == REDIS_REPLY_ARRAY && r->elements == 5 && r->element[0]->type == REDIS_REPLY_INTEGER
                      ? r->element[0]->integer
                      : -1;
    freeReplyObject(r);
    return v;
}

/* A Redis stop of 2 s: the three agents of the fleet lose it at once and
 * pace locally (a third of the rate each), so the provider's bucket loses
 * 20 units the fleet's counts do not have. The first response after it is
 * read while every agent is still silent (none has handed over): the
 * estimate of others' use must not take those sends for a neighbour. (The
 * held share subtracted before covered only the agents other than the one
 * settling, two thirds: the rest read as 200 RPM of others' use.) Then the
 * agents hand over, reporting what they sent, and leave; the fleet runs on
 * at its rate. */
static void test_silent_fleet_not_a_neighbour(void **state) {
    const char *dep = "stopped";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", "silent_ms", "1250",
                 "agent_window_ms", "3000", "silent_hold_ms", "20000", NULL);
    provider p = {100, 100, 600.0 / 60000.0, 0};
    grant first = reserve_tok(dep, "0", 0);
    p.at = first.now_ms;
    sim_result warm = simulate(dep, &p, 0, 10000);
    assert_true(warm.outside_rpm == 0);
    static const char *const agents[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(script_int(script_callv(rc, SCRIPT_HEARTBEAT, dep, agents[i], "3000", NULL)), i + 1);
    /* Redis stops for 2 s: the agents send 20 locally. */
    double t = status_num(rc, dep, "now_us") / 1000.0;
    int local = 0;
    for (double slot = t + 50; slot < t + 2000; slot += 100) local += provider_admit(&p, slot, 1);
    advance_on(rc, dep, 2000);
    /* Back: agent a's first call, a reserve and its settle with the
     * provider's remaining. */
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "@a/1000", "1", "0", "600000", NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long id = r->element[5]->element[1]->integer;
    double slot = (double)r->element[0]->integer / 1000.0 + (double)r->element[5]->element[2]->integer;
    freeReplyObject(r);
    advance_on(rc, dep, slot - status_num(rc, dep, "now_us") / 1000.0);
    int ok = provider_admit(&p, slot, 1);
    char ids[24], seen[64];
    snprintf(ids, sizeof(ids), "%lld", id);
    snprintf(seen, sizeof(seen), "r=600/%.0f", floor(fmax(0, p.level)));
    r = script_callv(rc, SCRIPT_SETTLE, dep, "@a/1000", "feedback", "1", ids, "-1", ok ? "ok" : "throttled", "-1", seen,
                     NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    double silent = status_num(rc, dep, "silent_agents"), outside = status_num(rc, dep, "outside_rpm");
    /* The hand-overs, each with its third of the local sends, then they
     * leave (the rest of the run is the fleet without agents). */
    for (int i = 0; i < 3; i++) {
        char sent[16];
        snprintf(sent, sizeof(sent), "%d", local / 3 + (i < local % 3));
        script_int(
            script_callv(rc, SCRIPT_HEARTBEAT, dep, agents[i], "3000", "busy", "0", "0", sent, "0", "0", "0", NULL));
        script_int(script_callv(rc, SCRIPT_HEARTBEAT, dep, agents[i], "3000", "leave", NULL));
    }
    sim_result after = simulate(dep, &p, 0, 5000);
    print_message("  Redis stopped 2 s, %d local sends: first reading with %.0f agents silent: outside %.1f RPM; 5 s "
                  "after the hand-overs: %d sent, %d rejected, outside %.1f RPM, local_requests %.0f\n",
                  local, silent, outside, after.sent, after.rejected, after.outside_rpm,
                  status_num(rc, dep, "local_requests"));
    assert_true(silent >= 2);
    assert_true(outside == 0);
    assert_true(after.outside_rpm == 0);
    assert_int_equal(after.rejected, 0);
    assert_true(after.sent >= 0.95 * 600 * 5 / 60);
    assert_true(status_num(rc, dep, "local_requests") == local);
}

/* A provider's bucket read full (wasting refill) owes nothing: a schedule
 * whose TAT runs 5 s past the sends it granted (debt, or stretches for
 * others' rate that the held grants did not take) comes back to them at
 * the first full reading, and counts schedule_forgiven. The same reading
 * two below full leaves it: a deep bucket a little below its cap may
 * still be owed what the last seconds over-sent. Without this, the gap
 * held the fleet idle after a neighbour left (azure-neighbour-leaves). */
static void test_full_bucket_forgives_the_schedule(void **state) {
    (void)state;
    const double T = 1800000000000.0;
    const int rem_at[2] = {599, 597}; /* cap 600, full 598 (one send and one unit) */
    for (int k = 0; k < 2; k++) {
        char dep[32], res[32], seen[32];
        snprintf(dep, sizeof(dep), "forgive%d", k);
        configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
        /* The base reading: the bucket full (cap 600). */
        clock_at(dep, T);
        grant g = reserve_tok(dep, "0", 0);
        assert_true(g.granted);
        settle_fb(dep, g.id, "-1", "ok", -1, "r=600/599", res, sizeof(res));
        /* 3 s on (a span of 20 sends at least): three sends held ahead,
         * and a schedule 5 s past them. */
        clock_at(dep, T + 3000);
        g = reserve_tok(dep, "0", 0);
        assert_true(g.granted && g.wait_ms == 0);
        for (int i = 0; i < 12; i++) assert_true(reserve_tok(dep, "0", 60000).granted);
        double cg = state_num(dep, "requests_cmt"), tat = state_num(dep, "requests_tat");
        assert_true(cg > T + 3000 && fabs(tat - cg) < 1e-6);
        redisReply *r = redisCommand(rc, "HSET sluice:{%s}:state requests_tat %.3f", dep, tat + 5000);
        assert_non_null(r);
        freeReplyObject(r);
        snprintf(seen, sizeof(seen), "r=600/%d", rem_at[k]);
        settle_fb(dep, g.id, "-1", "ok", -1, seen, res, sizeof(res));
        assert_string_equal(res, "settled");
        double after = state_num(dep, "requests_tat");
        print_message("  remaining %d of 600: TAT %.0f ms past the held sends -> %.0f, forgiven %.0f\n", rem_at[k],
                      tat + 5000 - cg, after - cg, state_num(dep, "schedule_forgiven"));
        if (k == 0) {
            /* Where the held sends' replay ends: the last one's slot and
             * its 100 ms at 10 a second. */
            assert_true(after <= cg + 100 + 1e-6);
            assert_true(state_num(dep, "schedule_forgiven") == 1);
        } else {
            assert_true(fabs(after - (tat + 5000)) < 1e-6);
            assert_true(state_num(dep, "schedule_forgiven") == 0);
        }
    }
}

/* Others' rate read lower, then back (a paced neighbour's readings swing
 * both ways): the schedule converts to the faster rate and back, while
 * the held sends keep their slots. The faster conversion cannot go below
 * the held sends; what it could not take back is kept as credit
 * (requests_credit, in ms) and taken off the slower one. Lost, each swing
 * moved the schedule's end outward (azure-neighbour-leaves: 5 s past the
 * held sends after a minute). At a frozen clock T, from a TAT t0 and held
 * sends ending at c: the end is c + (t0 - T) / 2, where it was c + (c - T). */
static void test_rate_swing_keeps_credit(void **state) {
    (void)state;
    const char *dep = "swing";
    const double T = 1800000000000.0;
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", "jitter_ms", "0", NULL);
    clock_freeze(rc, dep, T);
    redisReply *r = redisCommand(rc, "HSET sluice:{%s}:state requests_outside 300", dep);
    assert_non_null(r);
    freeReplyObject(r);
    for (int i = 0; i < 30; i++) assert_true(reserve_tok(dep, "0", 60000).granted);
    double t0 = state_num(dep, "requests_tat"), c = state_num(dep, "requests_cmt");
    assert_true(c > T + 2000 && t0 >= c);
    /* Others gone: twice the rate; the schedule stops at the held sends. */
    r = redisCommand(rc, "HSET sluice:{%s}:state requests_outside 0", dep);
    freeReplyObject(r);
    assert_false(reserve_tok(dep, "0", 0).granted);
    assert_true(fabs(state_num(dep, "requests_tat") - c) < 1e-6);
    double credit = state_num(dep, "requests_credit");
    assert_true(fabs(credit - (c - (T + (t0 - T) / 2))) < 1e-3);
    /* Back: half the rate again. */
    r = redisCommand(rc, "HSET sluice:{%s}:state requests_outside 300", dep);
    freeReplyObject(r);
    assert_false(reserve_tok(dep, "0", 0).granted);
    double end = state_num(dep, "requests_tat");
    print_message("  held sends end %.0f ms on, the schedule %.0f; after a swing and back %.0f (without credit %.0f)\n",
                  c - T, t0 - T, end - T, 2 * (c - T));
    assert_true(fabs(end - (c + (t0 - T) / 2)) < 1e-3);
    assert_true(end < T + 2 * (c - T) - 100);
}

/* One reserve item with its max wait field as sent (wait: "<max>" or
 * "<max>:<waited>"). Returns 1 granted (*ms its wait), 2 deferred (*ms
 * when to ask again). */
static int reserve_waited(const char *dep, const char *wait, long long *ms) {
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "1", "1", wait, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
    redisReply *it = r->element[5];
    int kind = (int)it->element[0]->integer;
    *ms = kind == 1 ? it->element[2]->integer : kind == 2 ? it->element[2]->integer : -1;
    freeReplyObject(r);
    return kind;
}

/* On a deployment that grants just in time (horizon_ms), an item asks
 * with the part of the horizon its wait so far earns (lua/reserve.lua,
 * SL_AGE_FULL_MS = 2000: all of it from 2 s on): a request that has just
 * arrived is granted only a slot that is due, and the older ones take
 * the room first. At a frozen clock, 1 request a second, horizon 4 s. */
static void test_horizon_grows_with_the_wait(void **state) {
    (void)state;
    const char *dep = "agehz";
    const double T = 1800000000000.0;
    configure_on(rc, dep, "rpm", "60", "burst_requests", "1", "jitter_ms", "0", "horizon_ms", "4000", NULL);
    clock_freeze(rc, dep, T);
    /* Each step: the field sent, the verdict (1 granted, 2 deferred) and
     * its wait or ask time, in order against the one schedule. */
    static const struct {
        const char *wait;
        int kind;
        long long ms;
    } steps[] = {
        {"60000:0", 1, 0},       /* due now */
        {"60000:0", 2, 1000},    /* the next slot 1 s off; just arrived: no horizon, asks again then */
        {"60000:400", 2, 200},   /* 800 ms of horizon, still short */
        {"60000:500", 1, 1000},  /* 1 s of horizon: granted */
        {"60000:999", 2, 2},     /* the slot 2 s off: 2 ms short */
        {"60000:1000", 1, 2000}, /* enough */
        {"60000:2000", 1, 3000}, /* from 2 s of waiting, the whole horizon */
        {"60000", 1, 4000},      /* sent without its wait (an older agent): the whole horizon too */
        {"60000:100000", 2, 1000},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(*steps); i++) {
        long long ms = -1;
        int kind = reserve_waited(dep, steps[i].wait, &ms);
        if (kind != steps[i].kind || ms != steps[i].ms)
            fail_msg("step %zu (%s): kind %d in %lld ms, expected %d in %lld", i, steps[i].wait, kind, ms,
                     steps[i].kind, steps[i].ms);
    }
    /* A malformed wait is refused, naming the field. */
    static const char *const bad[] = {"60000:", ":5", "60000:-1", "60000:1:2", "1e3:5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "1", "1", bad[i], NULL);
        assert_non_null(r);
        if (r->type != REDIS_REPLY_ERROR) fail_msg("max wait '%s' was accepted", bad[i]);
        assert_non_null(strstr(r->str, "max_wait_ms must be"));
        freeReplyObject(r);
    }
}

static void test_feedback_form_checked(void **state) {
    const char *dep = "fbbad";
    configure_on(rc, dep, "rpm", "600", NULL);
    grant g = reserve_tok(dep, "0", 0);
    char id[24];
    snprintf(id, sizeof(id), "%lld", g.id);
    static const char *const bad_seen[] = {"r600/1", "x=1/2", "r=a/1", "r=1/2,", "r=1/2;t=3/4", "r=1234567890123456/1"};
    for (size_t i = 0; i < sizeof(bad_seen) / sizeof(*bad_seen); i++) {
        redisReply *r = script_callv(rc, SCRIPT_SETTLE, dep, "feedback", "1", id, "-1", "ok", "-1", bad_seen[i], NULL);
        assert_non_null(r);
        if (r->type != REDIS_REPLY_ERROR) fail_msg("seen '%s' was accepted", bad_seen[i]);
        assert_non_null(strstr(r->str, "seen must be"));
        freeReplyObject(r);
    }
    static const char *const bad_actual[] = {"1+", "+1", "1+2+3+4", "5+1+6", "-2", "a"};
    for (size_t i = 0; i < sizeof(bad_actual) / sizeof(*bad_actual); i++) {
        redisReply *r = script_callv(rc, SCRIPT_SETTLE, dep, "feedback", "1", id, bad_actual[i], "ok", "-1", "-", NULL);
        assert_non_null(r);
        if (r->type != REDIS_REPLY_ERROR) fail_msg("actual '%s' was accepted", bad_actual[i]);
        freeReplyObject(r);
    }
    /* Nothing was settled by the refused calls. */
    char res[32];
    settle_fb(dep, g.id, "-1", "ok", -1, "-", res, sizeof(res));
    assert_string_equal(res, "settled");
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "1", "1+x", "0", NULL);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combined_tokens_never_refunded),
        cmocka_unit_test(test_expected_output_given_back_from_the_send),
        cmocka_unit_test(test_first_answer_gives_back_the_grants_out),
        cmocka_unit_test(test_bedrock_burndown),
        cmocka_unit_test(test_combined_estimate_not_counted_twice),
        cmocka_unit_test(test_full_bucket_forgives_the_schedule),
        cmocka_unit_test(test_rate_swing_keeps_credit),
        cmocka_unit_test(test_horizon_grows_with_the_wait),
        cmocka_unit_test(test_openai_max_rule),
        cmocka_unit_test(test_anthropic_input_and_output),
        cmocka_unit_test(test_requests_window),
        cmocka_unit_test(test_expected_output),
        cmocka_unit_test(test_expected_output_per_lane),
        cmocka_unit_test(test_split_dimensions_bind),
        cmocka_unit_test(test_isolated_429_only_pauses),
        cmocka_unit_test(test_reported_limit_adopted),
        cmocka_unit_test(test_lower_limit_retimes_grants),
        cmocka_unit_test(test_stretched_grants_keep_their_lease),
        cmocka_unit_test(test_outside_use_retimes_grants),
        cmocka_unit_test(test_header_calibration),
        cmocka_unit_test(test_outside_use_followed),
        cmocka_unit_test(test_rounded_counts),
        cmocka_unit_test(test_local_sends_are_the_fleets_own),
        cmocka_unit_test(test_silent_fleet_not_a_neighbour),
        cmocka_unit_test(test_429s_in_a_row_back_off),
        cmocka_unit_test(test_feedback_form_checked),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
