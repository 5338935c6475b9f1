/* Unit tests for lib/http/ratelimit: value parsers, each provider's header
 * set, the IETF structured fields, precedence, order independence and the
 * implied pause. "Now" is fixed. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "ratelimit.h"

/* 2023-11-14T22:13:20.000Z */
#define NOW_MS INT64_C(1700000000000)
#define MAXMS RETRY_AFTER_MAX_MS

typedef struct vec {
    const char *in;
    int64_t want;
} vec;

typedef struct header {
    const char *name;
    const char *value;
} header;

static void feed(ratelimit_feedback *fb, const header *h, size_t n) {
    for (size_t i = 0; i < n; i++)
        ratelimit_add_header(fb, h[i].name, strlen(h[i].name), h[i].value, strlen(h[i].value), NOW_MS);
}

static void expect_dim(const ratelimit_feedback *fb, ratelimit_dim d, ratelimit_source src, int64_t limit,
                       int64_t remaining, int64_t reset_ms) {
    ratelimit_value v;
    ratelimit_source got = ratelimit_get(fb, d, &v);
    if (got != src || v.limit != limit || v.remaining != remaining || v.reset_ms != reset_ms)
        fail_msg("%s: got %s {%lld, %lld, %lld} want %s {%lld, %lld, %lld}", ratelimit_dim_name(d),
                 ratelimit_source_name(got), (long long)v.limit, (long long)v.remaining, (long long)v.reset_ms,
                 ratelimit_source_name(src), (long long)limit, (long long)remaining, (long long)reset_ms);
}

static void test_parse_duration(void **state) {
    (void)state;
    static const vec v[] = {
        {"1s", 1000},
        {"6m0s", 360000},
        {"1m30.5s", 90500},
        {"12ms", 12},
        {"1h2m3s", 3723000},
        {"0.5s", 500},
        {".5s", 500},
        {"1.s", 1000},
        {"100us", 1}, /* rounded up to a whole ms */
        {"1500us", 2},
        {"1000us", 1},
        {"2\xc2\xb5s", 1}, /* µs, MICRO SIGN */
        {"3\xce\xbcs", 1}, /* μs, GREEK MU */
        {"100ns", 1},
        {"0.000001ms", 1},
        {"1ms1ns", 2},
        {"1s1s", 2000},
        {"0", 0},
        {"0s", 0},
        {"0h0m0s", 0},
        {"59m59.999s", 3599999},
        {"2h", 7200000},
        {" 7s\t", 7000},
        /* plain seconds, as some providers send */
        {"20", 20000},
        {"1", 1000},
        {"0.5", 500},
        {"1.0005", 1001},
        {"007", 7000},
        /* saturation */
        {"9999999999h", MAXMS},
        {"99999999999999999999s", MAXMS},
        {"99999999999999999999", MAXMS},
        {"876600h", MAXMS}, /* exactly 100 years of 365.25 days */
        {"876599h", INT64_C(3155756400000)},
        {"1h99999999999999999999ns", MAXMS},
        /* invalid */
        {"", -1},
        {"  ", -1},
        {"1x", -1},
        {"s", -1},
        {".s", -1},
        {"-1s", -1},
        {"+1s", -1},
        {"-1", -1},
        {"1h-2m", -1},
        {"1.5.5s", -1},
        {"1 s", -1},
        {"1s 2m", -1},
        {"1sjunk", -1},
        {"1S", -1},
        {"1H", -1},
        {"1e3s", -1},
        {"inf", -1},
        {"nan", -1},
        {"1.", -1},
        {"1d", -1},
        {"1\xc2s", -1},
        {"2024-01-01T00:00:30Z", -1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int64_t got = ratelimit_parse_duration_ms(v[i].in, strlen(v[i].in));
        if (got != v[i].want) fail_msg("\"%s\": got %lld want %lld", v[i].in, (long long)got, (long long)v[i].want);
    }
    assert_int_equal(ratelimit_parse_duration_ms(NULL, 2), -1);
}

static void test_parse_count_and_epoch(void **state) {
    (void)state;
    static const vec counts[] = {
        {"100", 100},
        {" 5 ", 5},
        {"0", 0},
        {"007", 7},
        {"9007199254740992", RATELIMIT_COUNT_MAX},
        {"9007199254740993", RATELIMIT_COUNT_MAX},
        {"99999999999999999999999", RATELIMIT_COUNT_MAX},
        {"", -1},
        {"-1", -1},
        {"+1", -1},
        {"1.5", -1},
        {"1.", -1},
        {"abc", -1},
        {"1e3", -1},
        {"10, 20", -1},
        {"nan", -1},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int64_t got = ratelimit_parse_count(counts[i].in, strlen(counts[i].in));
        if (got != counts[i].want)
            fail_msg("count \"%s\": got %lld want %lld", counts[i].in, (long long)got, (long long)counts[i].want);
    }
    static const vec epochs[] = {
        {"1700000030", 30000}, /* Unix seconds */
        {"1700000030.5", 30500},
        {"1700000030500", 30500}, /* Unix milliseconds */
        {"1700000030500.2", 30501},
        {"1699999999", 0}, /* past */
        {"1000000000", 0}, /* 2001: past */
        {"30", 30000},     /* small: delta-seconds */
        {"0", 0},
        {"0.25", 250},
        {"999999999", INT64_C(999999999000)},
        {"99999999999999999999999", MAXMS},
        {"", -1},
        {"-5", -1},
        {"soon", -1},
        {"30s", -1},
        {"1e9", -1},
        {"Tue, 14 Nov 2023 22:13:50 GMT", -1},
    };
    for (size_t i = 0; i < sizeof epochs / sizeof epochs[0]; i++) {
        int64_t got = ratelimit_parse_epoch_reset_ms(epochs[i].in, strlen(epochs[i].in), NOW_MS);
        if (got != epochs[i].want)
            fail_msg("epoch \"%s\": got %lld want %lld", epochs[i].in, (long long)got, (long long)epochs[i].want);
    }
    /* extreme now */
    assert_int_equal(ratelimit_parse_epoch_reset_ms("1700000030", 10, INT64_MIN), MAXMS);
    assert_int_equal(ratelimit_parse_epoch_reset_ms("1700000030", 10, INT64_MAX), 0);
}

static void test_openai(void **state) {
    (void)state;
    static const header h[] = {
        {"x-ratelimit-limit-requests", "60"},       {"x-ratelimit-remaining-requests", "0"},
        {"x-ratelimit-reset-requests", "1s"},       {"x-ratelimit-limit-tokens", "150000"},
        {"x-ratelimit-remaining-tokens", "149000"}, {"x-ratelimit-reset-tokens", "6m0s"},
        {"content-type", "application/json"},
    };
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    feed(&fb, h, sizeof h / sizeof h[0]);
    assert_int_equal(fb.recognised, 6);
    assert_int_equal(fb.invalid, 0);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, 60, 0, 1000);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, 150000, 149000, 360000);
    expect_dim(&fb, RATELIMIT_INPUT_TOKENS, RATELIMIT_SRC_NONE, -1, -1, -1);
    bool over = true;
    assert_int_equal(ratelimit_pause_ms(&fb, &over), 1000);
    assert_false(over);
    assert_int_equal(fb.retry.delay_ms, -1);

    /* Tokens exhausted for 6 minutes: the pause is over the cap. */
    static const header h2[] = {
        {"X-RateLimit-Remaining-Tokens", "0"},
        {"X-RateLimit-Reset-Tokens", "6m0s"},
        {"X-RateLimit-Remaining-Requests", "10"},
        {"X-RateLimit-Reset-Requests", "20ms"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, h2, sizeof h2 / sizeof h2[0]);
    assert_int_equal(ratelimit_pause_ms(&fb, &over), 360000);
    assert_true(over);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 360000);
}

static void test_azure(void **state) {
    (void)state;
    static const header h[] = {
        {"x-ratelimit-remaining-requests", "0"},
        {"x-ratelimit-remaining-tokens", "149984"},
        {"Retry-After", "20"},
        {"retry-after-ms", "19876"},
        {"x-ms-retry-after-ms", "19876"},
        {"apim-request-id", "abc"},
    };
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    feed(&fb, h, sizeof h / sizeof h[0]);
    assert_int_equal(fb.recognised, 5);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, -1, 0, -1);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, -1, 149984, -1);
    assert_int_equal(fb.retry.delay_ms, 19876);
    assert_int_equal(fb.retry.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 19876);

    /* remaining 0 without a reset and without Retry-After: no pause known. */
    ratelimit_init(&fb, -1);
    feed(&fb, h, 2);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), -1);
}

static void test_anthropic(void **state) {
    (void)state;
    static const header h[] = {
        {"anthropic-ratelimit-requests-limit", "50"},
        {"anthropic-ratelimit-requests-remaining", "0"},
        {"anthropic-ratelimit-requests-reset", "2023-11-14T22:13:50Z"},
        {"anthropic-ratelimit-tokens-limit", "40000"},
        {"anthropic-ratelimit-tokens-remaining", "39000"},
        {"anthropic-ratelimit-tokens-reset", "2023-11-14T22:13:21.5+00:00"},
        {"anthropic-ratelimit-input-tokens-limit", "30000"},
        {"anthropic-ratelimit-input-tokens-remaining", "0"},
        {"anthropic-ratelimit-input-tokens-reset", "2023-11-14T23:14:20+01:00"},
        {"anthropic-ratelimit-output-tokens-limit", "8000"},
        {"anthropic-ratelimit-output-tokens-remaining", "8000"},
        {"anthropic-ratelimit-output-tokens-reset", "2023-11-14T22:13:20Z"},
    };
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    feed(&fb, h, sizeof h / sizeof h[0]);
    assert_int_equal(fb.recognised, 12);
    assert_int_equal(fb.invalid, 0);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, 50, 0, 30000);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, 40000, 39000, 1500);
    expect_dim(&fb, RATELIMIT_INPUT_TOKENS, RATELIMIT_SRC_PROVIDER, 30000, 0, 60000);
    expect_dim(&fb, RATELIMIT_OUTPUT_TOKENS, RATELIMIT_SRC_PROVIDER, 8000, 8000, 0);
    /* largest reset among exhausted dimensions */
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 60000);
    /* Retry-After wins over resets, even a shorter one */
    ratelimit_add_header(&fb, "retry-after", 11, "45", 2, NOW_MS);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 45000);

    /* A reset in the past is 0; a bad timestamp is ignored and counted. */
    ratelimit_init(&fb, -1);
    static const header h2[] = {
        {"anthropic-ratelimit-requests-remaining", "0"},
        {"anthropic-ratelimit-requests-reset", "2023-11-14T22:00:00Z"},
        {"anthropic-ratelimit-tokens-reset", "2023-11-14T22:13:50"},
        {"anthropic-ratelimit-tokens-remaining", "-3"},
    };
    feed(&fb, h2, sizeof h2 / sizeof h2[0]);
    assert_int_equal(fb.recognised, 4);
    assert_int_equal(fb.invalid, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, -1, 0, 0);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_NONE, -1, -1, -1);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 0);
}

/* Without combined tokens headers, TOKENS is the tighter of input/output. */
static void test_tokens_fold(void **state) {
    (void)state;
    ratelimit_feedback fb;
    static const header lower_fraction[] = {
        {"anthropic-ratelimit-input-tokens-limit", "1000"},
        {"anthropic-ratelimit-input-tokens-remaining", "500"},
        {"anthropic-ratelimit-output-tokens-limit", "100"},
        {"anthropic-ratelimit-output-tokens-remaining", "10"},
        {"anthropic-ratelimit-output-tokens-reset", "2023-11-14T22:13:25Z"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, lower_fraction, 5);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, 100, 10, 5000);

    static const header exhausted_first[] = {
        {"anthropic-ratelimit-input-tokens-limit", "1000"},
        {"anthropic-ratelimit-input-tokens-remaining", "0"},
        {"anthropic-ratelimit-input-tokens-reset", "2023-11-14T22:13:22Z"},
        {"anthropic-ratelimit-output-tokens-limit", "100"},
        {"anthropic-ratelimit-output-tokens-remaining", "1"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, exhausted_first, 5);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, 1000, 0, 2000);

    static const header both_exhausted[] = {
        {"anthropic-ratelimit-input-tokens-remaining", "0"},
        {"anthropic-ratelimit-input-tokens-reset", "2023-11-14T22:13:22Z"},
        {"anthropic-ratelimit-output-tokens-remaining", "0"},
        {"anthropic-ratelimit-output-tokens-reset", "2023-11-14T22:13:29Z"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, both_exhausted, 4);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, -1, 0, 9000);

    static const header only_output[] = {
        {"anthropic-ratelimit-output-tokens-remaining", "7"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, only_output, 1);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, -1, 7, -1);

    /* Combined tokens headers, when present, are used as they are. */
    static const header combined[] = {
        {"anthropic-ratelimit-input-tokens-remaining", "0"},
        {"anthropic-ratelimit-tokens-remaining", "50"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, combined, 2);
    expect_dim(&fb, RATELIMIT_TOKENS, RATELIMIT_SRC_PROVIDER, -1, 50, -1);
}

static void test_ietf_new_style(void **state) {
    (void)state;
    ratelimit_feedback fb;
    static const header h[] = {
        {"RateLimit-Policy", "\"default\";q=100;w=60"},
        {"RateLimit", "\"default\";r=0;t=30"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, h, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 100, 0, 30000);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 30000);
    /* policy after the RateLimit field: same answer */
    static const header rev[] = {
        {"ratelimit", "\"default\";r=0;t=30"},
        {"ratelimit-policy", "\"default\";q=100;w=60"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, rev, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 100, 0, 30000);
    /* Retry-After wins over t */
    ratelimit_add_header(&fb, "Retry-After", 11, "5", 1, NOW_MS);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 5000);

    /* Several policies: the most restrictive item, with its own quota. */
    static const header multi[] = {
        {"RateLimit-Policy", "\"burst\";q=10;w=1, \"daily\";q=1000;w=86400"},
        {"RateLimit", "\"burst\";r=5;t=1, \"daily\";r=0;t=3600"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, multi, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 1000, 0, 3600000);
    assert_int_equal(fb.invalid, 0);

    /* Token names, extra parameters, no matching policy, no t. */
    static const header tok[] = {
        {"RateLimit", "default;r=3;pk=:cHJvamVjdDEyMw==:, other;r=4;t=2"},
        {"RateLimit-Policy", "\"nomatch\";q=9;qu=\"requests\""},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, tok, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, -1, 3, -1);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), -1);
    assert_int_equal(fb.invalid, 0);

    /* Equal remaining: the later reset is the tighter one. */
    static const header tie[] = {
        {"RateLimit", "\"a\";r=0;t=10"},
        {"RateLimit", "\"b\";r=0;t=20, \"c\";r=1;t=99"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, tie, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, -1, 0, 20000);
}

static void test_ietf_old_styles(void **state) {
    (void)state;
    ratelimit_feedback fb;
    static const header dict[] = {{"RateLimit", "limit=10, remaining=0, reset=5"}};
    ratelimit_init(&fb, -1);
    feed(&fb, dict, 1);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 10, 0, 5000);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 5000);

    static const header dict2[] = {{"RateLimit", "remaining=7,limit=10;w=1,reset=0,policy=\"x\""}};
    ratelimit_init(&fb, -1);
    feed(&fb, dict2, 1);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 10, 7, 0);

    static const header split[] = {
        {"RateLimit-Limit", "100, 100;w=60"},
        {"RateLimit-Remaining", "0"},
        {"RateLimit-Reset", "7"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, split, 3);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF_SPLIT, 100, 0, 7000);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 7000);
}

static void test_ietf_malformed(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "\"default\";r=-1;t=30",
        "\"default\";r=0;t=30,",
        "\"default\";r=0;t=30,,\"x\";r=1",
        "\"unterminated;r=0",
        "\"default\";r=1.5",
        "\"default\";r=\"0\"",
        "\"default\";r=0;t=30 junk",
        "\"default\";;r=0",
        "\"default\";r=1234567890123456",
        "limit=10, remaining=-1, reset=5",
        "limit=10, remaining=zero",
        "\"bad\\q\";r=0",
        "\"ctl\x01\";r=0",
        "(\"inner\");r=0",
        "=5",
        ",",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ratelimit_feedback fb;
        ratelimit_init(&fb, -1);
        assert_true(ratelimit_add_header(&fb, "RateLimit", 9, bad[i], strlen(bad[i]), NOW_MS));
        ratelimit_value v;
        if (fb.invalid != 1 || ratelimit_get(&fb, RATELIMIT_REQUESTS, &v) != RATELIMIT_SRC_NONE)
            fail_msg("RateLimit \"%s\" was accepted", bad[i]);
    }
    /* A bad policy field commits nothing, not even its valid members. */
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    static const header h[] = {
        {"RateLimit-Policy", "\"default\";q=100, \"x\";q=-1"},
        {"RateLimit", "\"default\";r=0;t=30"},
    };
    feed(&fb, h, 2);
    assert_int_equal(fb.invalid, 1);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, -1, 0, 30000);
}

static void test_x_ratelimit_generic(void **state) {
    (void)state;
    ratelimit_feedback fb;
    static const header h[] = {
        {"X-RateLimit-Limit", "5000"},
        {"X-RateLimit-Remaining", "0"},
        {"X-RateLimit-Reset", "1700000060"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, h, 3);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_X_GENERIC, 5000, 0, 60000);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), 60000);

    static const header delta[] = {
        {"x-ratelimit-remaining", "0"},
        {"x-ratelimit-reset", "12"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, delta, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_X_GENERIC, -1, 0, 12000);
}

/* A more specific family replaces a generic one for the whole dimension,
 * whichever came first. */
static void test_precedence(void **state) {
    (void)state;
    ratelimit_feedback fb;
    static const header h[] = {
        {"X-RateLimit-Remaining", "0"}, {"X-RateLimit-Reset", "60"},     {"RateLimit-Remaining", "0"},
        {"RateLimit-Reset", "50"},      {"RateLimit", "\"d\";r=0;t=40"}, {"x-ratelimit-remaining-requests", "10"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, h, 6);
    /* provider says 10 left, no reset: nothing from the generic families */
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, -1, 10, -1);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), -1);

    ratelimit_init(&fb, -1);
    feed(&fb, h, 5);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, -1, 0, 40000);
    ratelimit_init(&fb, -1);
    feed(&fb, h, 4);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF_SPLIT, -1, 0, 50000);
    ratelimit_init(&fb, -1);
    feed(&fb, h, 2);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_X_GENERIC, -1, 0, 60000);

    /* Reverse order: same. */
    ratelimit_init(&fb, -1);
    for (int i = 5; i >= 0; i--)
        ratelimit_add_header(&fb, h[i].name, strlen(h[i].name), h[i].value, strlen(h[i].value), NOW_MS);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, -1, 10, -1);

    /* Repeats within a family merge conservatively. */
    static const header rep[] = {
        {"x-ratelimit-limit-requests", "100"},   {"x-ratelimit-limit-requests", "60"},
        {"x-ratelimit-remaining-requests", "5"}, {"x-ratelimit-remaining-requests", "3"},
        {"x-ratelimit-remaining-requests", "4"}, {"x-ratelimit-reset-requests", "2s"},
        {"x-ratelimit-reset-requests", "1s"},
    };
    ratelimit_init(&fb, -1);
    feed(&fb, rep, 7);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_PROVIDER, 60, 3, 2000);
}

static void test_recognition(void **state) {
    (void)state;
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    assert_false(ratelimit_add_header(&fb, "content-type", 12, "x", 1, NOW_MS));
    assert_false(ratelimit_add_header(&fb, "x-ratelimit-reset-request", 25, "1s", 2, NOW_MS));
    assert_false(ratelimit_add_header(&fb, "x-ratelimit-reset-requestss", 27, "1s", 2, NOW_MS));
    assert_false(ratelimit_add_header(&fb, "", 0, "1s", 2, NOW_MS));
    assert_false(ratelimit_add_header(NULL, "retry-after", 11, "1", 1, NOW_MS));
    assert_int_equal(fb.recognised, 0);
    /* recognised but invalid: counted, ignored */
    assert_true(ratelimit_add_header(&fb, "x-ratelimit-reset-requests", 26, "1x", 2, NOW_MS));
    assert_true(ratelimit_add_header(&fb, "RETRY-AFTER", 11, "soon", 4, NOW_MS));
    assert_true(ratelimit_add_header(&fb, "x-ratelimit-remaining-requests", 30, NULL, 0, NOW_MS));
    assert_int_equal(fb.recognised, 3);
    assert_int_equal(fb.invalid, 3);
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_NONE, -1, -1, -1);
    assert_int_equal(ratelimit_pause_ms(&fb, NULL), -1);
    /* name length is honoured */
    assert_true(ratelimit_add_header(&fb, "retry-after-ms-and-more", 14, "250", 3, NOW_MS));
    assert_int_equal(fb.retry.delay_ms, 250);
    assert_int_equal(ratelimit_pause_ms(NULL, NULL), -1);
    ratelimit_value v;
    assert_int_equal(ratelimit_get(NULL, RATELIMIT_REQUESTS, &v), RATELIMIT_SRC_NONE);
    assert_int_equal(v.limit, -1);
    assert_int_equal(ratelimit_get(&fb, RATELIMIT_DIMS, &v), RATELIMIT_SRC_NONE);

    assert_string_equal(ratelimit_dim_name(RATELIMIT_REQUESTS), "requests");
    assert_string_equal(ratelimit_dim_name(RATELIMIT_TOKENS), "tokens");
    assert_string_equal(ratelimit_dim_name(RATELIMIT_INPUT_TOKENS), "input_tokens");
    assert_string_equal(ratelimit_dim_name(RATELIMIT_OUTPUT_TOKENS), "output_tokens");
    assert_string_equal(ratelimit_dim_name(RATELIMIT_DIMS), "?");
    assert_string_equal(ratelimit_source_name(RATELIMIT_SRC_IETF), "ratelimit");
    assert_string_equal(ratelimit_source_name(RATELIMIT_SRC_PROVIDER), "provider");
}

static void test_policy_overflow(void **state) {
    (void)state;
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    const char *p = "\"p1\";q=1, \"p2\";q=2, \"p3\";q=3, \"p4\";q=4, \"p5\";q=5, "
                    "\"p6\";q=6, \"p7\";q=7, \"p8\";q=8";
    assert_true(ratelimit_add_header(&fb, "ratelimit-policy", 16, p, strlen(p), NOW_MS));
    assert_false(fb.policies_dropped);
    const char *p9 = "\"p9\";q=9, \"p1\";q=0";
    assert_true(ratelimit_add_header(&fb, "ratelimit-policy", 16, p9, strlen(p9), NOW_MS));
    assert_true(fb.policies_dropped);
    const char *r = "\"p1\";r=0;t=1";
    assert_true(ratelimit_add_header(&fb, "ratelimit", 9, r, strlen(r), NOW_MS));
    /* the duplicate p1 took the smaller quota */
    expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 0, 0, 1000);
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The outcome does not depend on the order the headers arrive in. */
static void test_order_independence(void **state) {
    (void)state;
    static const header h[] = {
        {"x-ratelimit-remaining-requests", "5"},
        {"x-ratelimit-remaining-requests", "3"},
        {"x-ratelimit-reset-requests", "2s"},
        {"x-ratelimit-reset-requests", "1m"},
        {"x-ratelimit-limit-tokens", "900"},
        {"x-ratelimit-limit-tokens", "1000"},
        {"anthropic-ratelimit-input-tokens-remaining", "0"},
        {"anthropic-ratelimit-input-tokens-reset", "2023-11-14T22:14:00Z"},
        {"anthropic-ratelimit-output-tokens-remaining", "0"},
        {"anthropic-ratelimit-output-tokens-reset", "2023-11-14T22:13:40Z"},
        {"RateLimit", "\"a\";r=0;t=10, \"b\";r=0;t=10"},
        {"RateLimit", "\"c\";r=0;t=10"},
        {"RateLimit-Policy", "\"a\";q=5, \"b\";q=6, \"c\";q=7"},
        {"X-RateLimit-Remaining", "0"},
        {"X-RateLimit-Reset", "99"},
        {"retry-after", "3"},
        {"retry-after", "4"},
        {"x-ms-retry-after-ms", "3999"},
        {"retry-after-ms", "3999"},
        {"x-ratelimit-reset-tokens", "bogus"},
    };
    enum { N = sizeof h / sizeof h[0] };
    ratelimit_feedback ref;
    ratelimit_init(&ref, -1);
    feed(&ref, h, N);
    ratelimit_value want[RATELIMIT_DIMS];
    ratelimit_source wsrc[RATELIMIT_DIMS];
    for (int d = 0; d < RATELIMIT_DIMS; d++) wsrc[d] = ratelimit_get(&ref, (ratelimit_dim)d, &want[d]);
    /* spot-check the reference itself */
    assert_int_equal(want[RATELIMIT_REQUESTS].remaining, 3);
    assert_int_equal(want[RATELIMIT_REQUESTS].reset_ms, 60000);
    assert_int_equal(want[RATELIMIT_TOKENS].limit, 900);
    assert_int_equal(ref.retry.delay_ms, 3999);
    assert_int_equal(ref.retry.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);
    assert_int_equal(ratelimit_pause_ms(&ref, NULL), 3999);

    uint64_t rng = 7;
    for (int round = 0; round < 2000; round++) {
        size_t idx[N];
        for (size_t i = 0; i < N; i++) idx[i] = i;
        for (size_t i = N - 1; i > 0; i--) {
            size_t j = (size_t)(splitmix(&rng) % (i + 1));
            size_t t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
        ratelimit_feedback fb;
        ratelimit_init(&fb, -1);
        for (size_t i = 0; i < N; i++)
            ratelimit_add_header(&fb, h[idx[i]].name, strlen(h[idx[i]].name), h[idx[i]].value, strlen(h[idx[i]].value),
                                 NOW_MS);
        for (int d = 0; d < RATELIMIT_DIMS; d++) {
            ratelimit_value v;
            assert_int_equal(ratelimit_get(&fb, (ratelimit_dim)d, &v), wsrc[d]);
            assert_memory_equal(&v, &want[d], sizeof v);
        }
        assert_int_equal(fb.retry.delay_ms, ref.retry.delay_ms);
        assert_int_equal(fb.retry.source, ref.retry.source);
        assert_int_equal(ratelimit_pause_ms(&fb, NULL), 3999);
        assert_int_equal(fb.invalid, 1);
    }

    /* The IETF-only part on its own, shuffled. */
    for (int round = 0; round < 200; round++) {
        ratelimit_feedback fb;
        ratelimit_init(&fb, -1);
        size_t order[3] = {10, 11, 12};
        for (size_t i = 2; i > 0; i--) {
            size_t j = (size_t)(splitmix(&rng) % (i + 1));
            size_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (size_t i = 0; i < 3; i++)
            ratelimit_add_header(&fb, h[order[i]].name, strlen(h[order[i]].name), h[order[i]].value,
                                 strlen(h[order[i]].value), NOW_MS);
        /* Three items tie on r and t; the tie goes to the lowest FNV-1a hash of
         * the name, which is "a" (so its quota, 5), in every order. */
        expect_dim(&fb, RATELIMIT_REQUESTS, RATELIMIT_SRC_IETF, 5, 0, 10000);
    }
}

/* What the settle learns (engine_seen: limits read as per minute, as
 * lua/settle.lua adopts them) from headers whose window is not a minute:
 * an IETF policy of 10 requests a second is 600 a minute, not 10. */
static void test_seen_window(void **state) {
    (void)state;
    static const header ietf[] = {
        {"RateLimit-Policy", "\"burst\";q=10;w=1"},
        {"RateLimit", "\"burst\";r=9;t=1"},
    };
    static const header generic[] = {
        {"X-RateLimit-Limit", "10"},
        {"X-RateLimit-Remaining", "9"},
    };
    const header *sets[] = {ietf, generic};
    for (int k = 0; k < 2; k++) {
        ratelimit_feedback fb;
        ratelimit_init(&fb, -1);
        feed(&fb, sets[k], 2);
        engine_seen s;
        engine_seen_from_feedback(&fb, &s);
        print_message("%s: seen requests limit %lld remaining %lld\n", sets[k][0].name, s.limit[ENGINE_DIM_REQUESTS],
                      s.remaining[ENGINE_DIM_REQUESTS]);
        assert_int_equal(s.limit[ENGINE_DIM_REQUESTS], -1);
        assert_int_equal(s.remaining[ENGINE_DIM_REQUESTS], -1);
    }
    /* The providers' own per-minute headers are taken as before. */
    static const header oai[] = {{"x-ratelimit-limit-requests", "480"}, {"x-ratelimit-remaining-requests", "479"}};
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    feed(&fb, oai, 2);
    engine_seen s;
    engine_seen_from_feedback(&fb, &s);
    assert_int_equal(s.limit[ENGINE_DIM_REQUESTS], 480);
    assert_int_equal(s.remaining[ENGINE_DIM_REQUESTS], 479);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_duration),  cmocka_unit_test(test_parse_count_and_epoch),
        cmocka_unit_test(test_openai),          cmocka_unit_test(test_azure),
        cmocka_unit_test(test_anthropic),       cmocka_unit_test(test_tokens_fold),
        cmocka_unit_test(test_ietf_new_style),  cmocka_unit_test(test_ietf_old_styles),
        cmocka_unit_test(test_ietf_malformed),  cmocka_unit_test(test_x_ratelimit_generic),
        cmocka_unit_test(test_precedence),      cmocka_unit_test(test_recognition),
        cmocka_unit_test(test_policy_overflow), cmocka_unit_test(test_order_independence),
        cmocka_unit_test(test_seen_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
