/* Unit tests for the pure public pieces of libsluice: sl_verdict_of()
 * (class, retryability, outcome, pause, usage of one response),
 * sl_backoff_ms() (deadline-aware, server wait as a floor), the versioned
 * structs (an older, smaller caller struct is never written past its
 * size), the usage record mapped to and from sl_usage at the API edge,
 * and the effective max wait of a request with a deadline. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gov.h"
#include "sluice.h"
#include "verdict.h"

static sl_verdict verdict(int status, int timed_out, const char *body, const sl_header *h, size_t nh) {
    sl_verdict v;
    sl_verdict_init(&v);
    assert_int_equal(sl_verdict_of(status, timed_out, body, body ? strlen(body) : 0, h, nh, 0, &v), 0);
    return v;
}

static void test_verdicts(void **state) {
    sl_verdict v = verdict(200, 0, "{\"usage\":{\"total_tokens\":21}}", NULL, 0);
    assert_int_equal(v.cls, SL_CLASS_OK);
    assert_int_equal(v.outcome, SL_OUTCOME_OK);
    assert_int_equal(v.tokens, 21);
    assert_int_equal(v.pause_ms, -1);
    assert_false(v.retryable);

    sl_header h429[] = {{"Retry-After", "2"}, {"x-ratelimit-remaining-requests", "0"}};
    v = verdict(429, 0, "{\"error\":{\"code\":\"rate_limit_exceeded\"}}", h429, 2);
    assert_int_equal(v.cls, SL_CLASS_RATE_LIMITED);
    assert_int_equal(v.outcome, SL_OUTCOME_THROTTLED);
    assert_true(v.retryable);
    assert_int_equal(v.pause_ms, 2000);
    assert_int_equal(v.tokens, 0);
    assert_string_equal(v.code, "rate_limit_exceeded");

    /* retry-after-ms beats Retry-After. */
    sl_header hms[] = {{"retry-after", "9"}, {"retry-after-ms", "1500"}};
    v = verdict(429, 0, "", hms, 2);
    assert_int_equal(v.pause_ms, 1500);

    v = verdict(429, 0, "{\"error\":{\"code\":\"insufficient_quota\",\"type\":\"insufficient_quota\"}}", NULL, 0);
    assert_int_equal(v.cls, SL_CLASS_QUOTA_EXHAUSTED);
    assert_false(v.retryable);
    assert_int_equal(v.outcome, SL_OUTCOME_QUOTA);
    assert_int_equal(v.tokens, 0);
    assert_int_equal(v.pause_ms, -1);
    /* A quota stop's reset is the pause: it says when the deployment may
     * be used again (as for a 429, unlike for a success). */
    sl_header qh[] = {{"x-ratelimit-remaining-tokens", "0"}, {"x-ratelimit-reset-tokens", "45s"}};
    v = verdict(429, 0, "{\"error\":{\"code\":\"insufficient_quota\"}}", qh, 2);
    assert_int_equal(v.outcome, SL_OUTCOME_QUOTA);
    assert_true(v.pause_ms >= 44000 && v.pause_ms <= 45000);
    /* x-should-retry never makes a quota stop retryable. */
    sl_header yes[] = {{"x-should-retry", "true"}, {"retry-after", "20"}};
    v = verdict(429, 0, "{\"error\":{\"code\":\"insufficient_quota\"}}", yes, 2);
    assert_false(v.retryable);
    assert_int_equal(v.outcome, SL_OUTCOME_QUOTA);
    assert_int_equal(v.pause_ms, 20000);

    v = verdict(503, 0, "upstream overloaded", NULL, 0);
    assert_int_equal(v.cls, SL_CLASS_OVERLOADED);
    assert_true(v.retryable);
    assert_int_equal(v.tokens, -1);

    sl_header no[] = {{"x-should-retry", "false"}};
    v = verdict(503, 0, "", no, 1);
    assert_false(v.retryable);

    v = verdict(0, 1, NULL, NULL, 0);
    assert_int_equal(v.cls, SL_CLASS_TIMEOUT);
    assert_true(v.retryable);
    v = verdict(0, 0, NULL, NULL, 0);
    assert_int_equal(v.cls, SL_CLASS_TRANSPORT);

    /* A wait beyond the cap is flagged, not clamped. */
    sl_header far[] = {{"Retry-After", "600"}};
    v = verdict(429, 0, "", far, 1);
    assert_int_equal(v.pause_ms, 600000);
    assert_true(v.over_cap);

    /* Remaining 0 with a reset pauses a throttled response, not a success:
     * on a success it is the steady state of a fleet at its quota. */
    sl_header empty[] = {{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "1s"}};
    v = verdict(200, 0, "{}", empty, 2);
    assert_int_equal(v.pause_ms, -1);
    v = verdict(429, 0, "", empty, 2);
    assert_int_equal(v.pause_ms, 1000);
    /* A Retry-After on a success still counts. */
    sl_header ra[] = {{"Retry-After", "2"}};
    v = verdict(200, 0, "{}", ra, 1);
    assert_int_equal(v.pause_ms, 2000);

    assert_string_equal(sl_class_name(SL_CLASS_OVERLOADED), "overloaded");
    assert_string_equal(sl_class_name(99), "unknown");
    sl_verdict bad;
    sl_verdict_init(&bad);
    assert_int_equal(sl_verdict_of(200, 0, NULL, 0, NULL, 2, 0, &bad), SL_EINVAL);
}

/* Gemini's per-minute 429 (RESOURCE_EXHAUSTED with a RetryInfo, no
 * Retry-After header) is a throttle, not a hard quota stop: as a quota
 * stop without a reset it would take the deployment out for
 * quota_hold_ms (an hour) fleet-wide. */
static void test_gemini_rate_limit(void **state) {
    (void)state;
    const char *body = "{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota, please check "
                       "your plan and billing details.\",\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":"
                       "\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"26s\"}]}}";
    sl_verdict v = verdict(429, 0, body, NULL, 0);
    print_message("gemini 429: class %s outcome %d retryable %d pause_ms %lld\n", sl_class_name(v.cls), (int)v.outcome,
                  (int)v.retryable, (long long)v.pause_ms);
    assert_int_equal(v.cls, SL_CLASS_RATE_LIMITED);
    assert_int_equal(v.outcome, SL_OUTCOME_THROTTLED);
    assert_true(v.retryable);
    /* Its RetryInfo is the pause (no header says one). */
    assert_int_equal(v.pause_ms, 26000);
    /* The same wrapped in an array (the OpenAI-compatible endpoint), a
     * fraction rounded up to the ms, and a header that wins. */
    v = verdict(429, 0,
                "[{\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type."
                "googleapis.com/google.rpc.QuotaFailure\"},{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
                "\"retryDelay\":\"0.5004s\"}]}}]",
                NULL, 0);
    assert_int_equal(v.pause_ms, 501);
    sl_header ra = {"retry-after", "3"};
    v = verdict(429, 0, body, &ra, 1);
    assert_int_equal(v.pause_ms, 3000);
    /* Not a duration: no pause from it. */
    v = verdict(429, 0,
                "{\"error\":{\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/"
                "google.rpc.RetryInfo\",\"retryDelay\":\"26\"}]}}",
                NULL, 0);
    assert_true(v.pause_ms < 0);
}

static void test_backoff(void **state) {
    sl_call_opts o;
    sl_call_opts_init(&o);
    o.deployment = "d";
    o.backoff_base_ms = 100;
    o.backoff_cap_ms = 1000;
    o.min_attempt_ms = 200;
    uint64_t rng = 42;
    sl_verdict v = verdict(503, 0, "", NULL, 0);
    /* Full jitter within the ceiling. */
    for (int i = 0; i < 200; i++) {
        long long d = sl_backoff_ms(&o, 0, &v, 1000, &rng);
        assert_true(d >= 0 && d <= 100);
        d = sl_backoff_ms(&o, 3, &v, 1000, &rng);
        assert_true(d >= 0 && d <= 800);
    }
    /* Attempts: max_attempts 5 means retries 0..3 are allowed. */
    assert_true(sl_backoff_ms(&o, 3, &v, 1000, &rng) >= 0);
    assert_int_equal(sl_backoff_ms(&o, 4, &v, 1000, &rng), SL_EATTEMPTS);
    /* Not retryable. */
    sl_verdict bad = verdict(400, 0, "{\"error\":{\"code\":\"context_length_exceeded\"}}", NULL, 0);
    assert_int_equal(sl_backoff_ms(&o, 0, &bad, 1000, &rng), SL_EFATAL);
    /* A server wait is a floor; with a deadline the delay plus an attempt
     * must fit before it, else give up now. */
    sl_header h[] = {{"Retry-After", "2"}};
    sl_verdict rl = verdict(429, 0, "", h, 1);
    long long d = sl_backoff_ms(&o, 0, &rl, 1000, &rng);
    assert_true(d >= 2000 && d <= 2500);
    o.deadline_ms = 1000 + 2000 + 200; /* exactly the floor plus min_attempt_ms */
    d = sl_backoff_ms(&o, 0, &rl, 1000, &rng);
    assert_int_equal(d, 2000);
    o.deadline_ms = 1000 + 2000 + 199;
    assert_int_equal(sl_backoff_ms(&o, 0, &rl, 1000, &rng), SL_EDEADLINE);
    /* A server wait above the cap: do not retry now. */
    o.deadline_ms = 0;
    sl_header far[] = {{"Retry-After", "600"}};
    sl_verdict f = verdict(429, 0, "", far, 1);
    assert_int_equal(sl_backoff_ms(&o, 0, &f, 1000, &rng), SL_EDEADLINE);
    assert_int_equal(sl_backoff_ms(NULL, 0, &f, 1000, &rng), SL_EINVAL);
}

/* A caller compiled against a smaller sl_verdict (only up to outcome). */
typedef struct old_verdict {
    size_t size;
    int cls, retryable, http_status;
    sl_outcome outcome;
    long long canary;
} old_verdict;

static void test_versioned_structs(void **state) {
    old_verdict ov;
    memset(&ov, 0, sizeof(ov));
    ov.size = offsetof(old_verdict, canary);
    ov.canary = 0x5151;
    assert_int_equal(sl_verdict_of(429, 0, "", 0, NULL, 0, 0, (sl_verdict *)&ov), 0);
    assert_int_equal(ov.cls, SL_CLASS_RATE_LIMITED);
    assert_int_equal(ov.outcome, SL_OUTCOME_THROTTLED);
    assert_int_equal(ov.canary, 0x5151);
    assert_int_equal(ov.size, offsetof(old_verdict, canary));

    sl_request r;
    sl_request_init(&r);
    assert_int_equal(r.size, sizeof(r));
    assert_int_equal(r.max_wait_ms, -1);
    assert_int_equal(r.deadline_ms, 0);
    sl_call_opts o;
    sl_call_opts_init(&o);
    assert_int_equal(o.max_wait_ms, -1);
    sl_call_report rep;
    sl_call_report_init(&rep);
    assert_null(rep.body);
    sl_call_report_free(&rep);
    sl_call_report_free(NULL);
}

/* A caller compiled against an sl_usage of tokens alone. */
typedef struct old_usage {
    size_t size;
    long long tokens;
    long long canary;
} old_usage;

static void test_usage_edge(void **state) {
    /* In: the four public counts, a negative one unknown, cache_write
     * unknown (sl_usage has none). */
    sl_usage pub;
    sl_usage_init(&pub);
    pub.tokens = 1100;
    pub.input_tokens = 1000;
    pub.output_tokens = 100;
    pub.cache_read_tokens = -7;
    usage_rec u;
    verdict_usage_read(&u, &pub);
    assert_int_equal(u.tokens, 1100);
    assert_int_equal(u.input, 1000);
    assert_int_equal(u.output, 100);
    assert_int_equal(u.cache_read, -1);
    assert_int_equal(u.cache_write, -1);
    /* NULL, unsized, or an older caller's struct: what it does not carry
     * is unknown. */
    u.tokens = 5;
    verdict_usage_read(&u, NULL);
    assert_int_equal(u.tokens, -1);
    assert_int_equal(u.input, -1);
    assert_int_equal(u.cache_write, -1);
    old_usage ou = {offsetof(old_usage, canary), 42, 0x5151};
    verdict_usage_read(&u, (const sl_usage *)&ou);
    assert_int_equal(u.tokens, 42);
    assert_int_equal(u.input, -1);
    assert_int_equal(u.output, -1);

    /* Out: within the caller's size; cache_write stays inside. */
    usage_rec full = {1500, 1000, 500, 200, 300};
    sl_usage_init(&pub);
    verdict_usage_write(&pub, &full);
    assert_int_equal(pub.size, sizeof(pub));
    assert_int_equal(pub.tokens, 1500);
    assert_int_equal(pub.input_tokens, 1000);
    assert_int_equal(pub.output_tokens, 500);
    assert_int_equal(pub.cache_read_tokens, 200);
    ou.tokens = 0;
    verdict_usage_write((sl_usage *)&ou, &full);
    assert_int_equal(ou.tokens, 1500);
    assert_int_equal(ou.canary, 0x5151);
    assert_int_equal(ou.size, offsetof(old_usage, canary));
}

static void test_effective_max_wait(void **state) {
    assert_int_equal(gov_effective_max_wait(-1, 0, 1000), -1); /* the deployment's */
    assert_int_equal(gov_effective_max_wait(500, 0, 1000), 500);
    assert_int_equal(gov_effective_max_wait(-1, 3000, 1000), 2000); /* the time left */
    assert_int_equal(gov_effective_max_wait(500, 3000, 1000), 500);
    assert_int_equal(gov_effective_max_wait(5000, 3000, 1000), 2000);
    assert_int_equal(gov_effective_max_wait(0, 3000, 1000), 0);
    assert_int_equal(gov_effective_max_wait(-1, 1000, 1000), -2); /* passed */
}

static void test_strings(void **state) {
    assert_string_equal(sl_strerror(SL_ESHED), "shed: no slot within the max wait (see the retry-after and reason)");
    assert_string_equal(sl_strerror(SL_ETOOBIG), "the response is larger than the configured limit");
    assert_string_equal(sl_strerror(12345), "unknown error");
    assert_non_null(strchr(sl_version(), '.'));
    /* The library built from this tree is the header's version. */
    char hdr[32];
    snprintf(hdr, sizeof(hdr), "%d.%d.%d", SLUICE_VERSION_MAJOR, SLUICE_VERSION_MINOR, SLUICE_VERSION_PATCH);
    assert_string_equal(sl_version(), hdr);
    assert_int_equal(SLUICE_VERSION_NUMBER,
                     SLUICE_VERSION_MAJOR * 10000 + SLUICE_VERSION_MINOR * 100 + SLUICE_VERSION_PATCH);
    int64_t a = sl_now_ms(), b = sl_now_ms();
    assert_true(b >= a && a > 0);
    assert_string_equal(sl_errmsg(NULL), "");
    sl_options o;
    sl_options_init(&o);
    sl_gov *g = (sl_gov *)1;
    assert_int_equal(sl_open(&o, &g), SL_EINVAL);
    assert_null(g);
    assert_non_null(strstr(sl_errmsg(NULL), "no mode"));
    o.socket_path = "/x";
    o.redis_url = "redis://x";
    assert_int_equal(sl_open(&o, &g), SL_EINVAL);
    assert_non_null(strstr(sl_errmsg(NULL), "not both"));
    sl_options_init(&o);
    o.config_text = "deployments:\n  d:\n    rpm: abc\n";
    assert_int_equal(sl_open(&o, &g), SL_EINVAL);
    assert_non_null(strstr(sl_errmsg(NULL), "deployments.d.rpm"));
    sl_options_init(&o);
    o.redis_url = "redis://127.0.0.1:1";
    assert_int_equal(sl_open(&o, &g), SL_EINVAL);
    assert_non_null(strstr(sl_errmsg(NULL), "needs deployments"));
    sl_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_gemini_rate_limit),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_versioned_structs),
        cmocka_unit_test(test_effective_max_wait),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_usage_edge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
