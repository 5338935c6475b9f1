/* Unit tests for lib/http/retry_after: Retry-After values (delay-seconds
 * and the three HTTP-date forms), the millisecond headers, precedence and
 * the cap flag. "Now" is fixed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "httpdate.h"
#include "retry_after.h"

/* 2023-11-14T22:13:20.000Z, a Tuesday. */
#define NOW_MS INT64_C(1700000000000)

typedef struct vec {
    const char *in;
    int64_t want;
} vec;

static void check_table(const vec *v, size_t n, int64_t now_ms, bool ms_form) {
    for (size_t i = 0; i < n; i++) {
        int64_t got = ms_form ? retry_after_parse_ms(v[i].in, strlen(v[i].in))
                              : retry_after_parse(v[i].in, strlen(v[i].in), now_ms);
        if (got != v[i].want) fail_msg("\"%s\": got %lld want %lld", v[i].in, (long long)got, (long long)v[i].want);
    }
}

static void test_delay_seconds(void **state) {
    (void)state;
    static const vec v[] = {
        {"120", 120000},
        {"0", 0},
        {"1", 1000},
        {"007", 7000},
        {"  30 \t", 30000},
        {"\t5", 5000},
        {"3155759999", INT64_C(3155759999000)},
        {"3155760000", RETRY_AFTER_MAX_MS},
        {"3155760001", RETRY_AFTER_MAX_MS},
        {"99999999999999999999999999999999999999", RETRY_AFTER_MAX_MS},
        {"9223372036854775807", RETRY_AFTER_MAX_MS},
        {"18446744073709551616", RETRY_AFTER_MAX_MS},
        /* garbage is absent, never 0 */
        {"", -1},
        {"   ", -1},
        {"soon", -1},
        {"inf", -1},
        {"Infinity", -1},
        {"nan", -1},
        {"NaN", -1},
        {"-10", -1},
        {"-0", -1},
        {"+5", -1},
        {"1.5", -1},
        {"1.", -1},
        {".5", -1},
        {"1e3", -1},
        {"0x10", -1},
        {"10 s", -1},
        {"10s", -1},
        {"10,20", -1},
        {"1 2", -1},
        {"\xd9\xa1", -1}, /* ARABIC-INDIC DIGIT ONE */
        {"\r5", -1},
        {"5\n", -1},
    };
    check_table(v, sizeof v / sizeof v[0], NOW_MS, false);
    assert_int_equal(retry_after_parse(NULL, 3, NOW_MS), -1);
    /* Length is honoured: "12" of "123". */
    assert_int_equal(retry_after_parse("123", 2, NOW_MS), 12000);
}

static void test_http_dates(void **state) {
    (void)state;
    static const vec v[] = {
        /* 30 s after now in each form */
        {"Tue, 14 Nov 2023 22:13:50 GMT", 30000},
        {"Tuesday, 14-Nov-23 22:13:50 GMT", 30000},
        {"Tue Nov 14 22:13:50 2023", 30000},
        {"  Tue, 14 Nov 2023 22:13:50 GMT\t ", 30000},
        /* a date now or in the past is 0, never negative */
        {"Tue, 14 Nov 2023 22:13:20 GMT", 0},
        {"Tue, 14 Nov 2023 22:13:19 GMT", 0},
        {"Sun, 06 Nov 1994 08:49:37 GMT", 0},
        {"Sunday, 06-Nov-94 08:49:37 GMT", 0},
        {"Sun Nov  6 08:49:37 1994", 0},
        {"Thu, 01 Jan 1970 00:00:00 GMT", 0},
        {"Sat, 01 Jan 0000 00:00:00 GMT", 0},
        /* far future saturates */
        {"Fri, 31 Dec 9999 23:59:59 GMT", RETRY_AFTER_MAX_MS},
        /* garbage dates are absent */
        {"Mon, 14 Nov 2023 22:13:50 GMT", -1},  /* weekday does not match */
        {"Tux, 14 Nov 2023 22:13:50 GMT", -1},  /* not a weekday */
        {"Tue, 14 Nov 20230 22:13:50 GMT", -1}, /* five-digit year */
        {"Thu, 30 Feb 2023 22:13:50 GMT", -1},  /* Feb 30 */
        {"Tue, 14 Nov 2023 25:13:50 GMT", -1},  /* hour 25 */
        {"Tue, 14 Nov 2023 22:13:50 GMT x", -1},
        {"Tue, 14 Nov 2023 22:13:50 GMTx", -1},
        {"Tue, 14 Nov 2023 22:13:50", -1},
        {"2023-11-14T22:13:50Z", -1},
        {"Tue Nov 14 22:13:50 2023 GMT", -1},
    };
    check_table(v, sizeof v / sizeof v[0], NOW_MS, false);

    /* Sub-second now: a date has whole seconds, the delay is exact ms. */
    assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:50 GMT", 29, NOW_MS + 250), 29750);
    assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:20 GMT", 29, NOW_MS + 250), 0);
    /* Any date up to the saturation point gives its exact distance. */
    for (int64_t d = 1; d < INT64_C(3155760000); d = d * 3 + 7) {
        char buf[HTTPDATE_BUFSZ];
        assert_int_equal(httpdate_format(NOW_MS / 1000 + d, buf, sizeof buf), HTTPDATE_IMF_LEN);
        assert_int_equal(retry_after_parse(buf, HTTPDATE_IMF_LEN, NOW_MS), d * 1000);
    }
    /* Extreme now values do not overflow. */
    assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:50 GMT", 29, INT64_MIN), RETRY_AFTER_MAX_MS);
    assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:50 GMT", 29, INT64_MAX), 0);
    assert_int_equal(retry_after_parse("Tue, 14 Nov 2023 22:13:50 GMT", 29, -1), INT64_C(1700000030001));
}

/* The RFC 850 two-digit year is judged against now, not a fixed pivot. */
static void test_rfc850_year_relative_to_now(void **state) {
    (void)state;
    /* "Friday, 01-Jan-66 00:00:00 GMT": 2066 if it is within 50 years of
     * now, else 1966 (which is past: 0). */
    const char *s = "Friday, 01-Jan-66 00:00:00 GMT";
    int64_t jan2066 = httpdate_days_from_civil(2066, 1, 1) * 86400 * 1000;
    /* now in 2023: 2066 is 43 years ahead. */
    assert_int_equal(retry_after_parse(s, strlen(s), NOW_MS), jan2066 - NOW_MS);
    /* now in 2015: 2066 is 51 years ahead, so 1966, in the past. 1966-01-01
     * was a Saturday, so the Friday spelling no longer matches: absent. */
    int64_t now2015 = httpdate_days_from_civil(2015, 6, 1) * 86400 * 1000;
    assert_int_equal(retry_after_parse(s, strlen(s), now2015), -1);
    const char *s66 = "Saturday, 01-Jan-66 00:00:00 GMT";
    assert_int_equal(retry_after_parse(s66, strlen(s66), now2015), 0);
    assert_int_equal(retry_after_parse(s66, strlen(s66), NOW_MS), -1);
}

static void test_ms_headers(void **state) {
    (void)state;
    static const vec v[] = {
        {"1500", 1500},
        {"0", 0},
        {"0.0", 0},
        {"1500.2", 1501},
        {"1500.000", 1500},
        {"0.001", 1},
        {" 20 ", 20},
        {"3155760000000", RETRY_AFTER_MAX_MS},
        {"99999999999999999999999", RETRY_AFTER_MAX_MS},
        {"99999999999999999999999.5", RETRY_AFTER_MAX_MS},
        {"", -1},
        {"-1", -1},
        {"-0", -1},
        {"+1", -1},
        {"1e3", -1},
        {"inf", -1},
        {"nan", -1},
        {".5", -1},
        {"5.", -1},
        {"1,5", -1},
        {"1.5.5", -1},
        {"12ms", -1},
        {"Tue, 14 Nov 2023 22:13:50 GMT", -1},
    };
    check_table(v, sizeof v / sizeof v[0], NOW_MS, true);
    assert_int_equal(retry_after_parse_ms(NULL, 0), -1);
}

static bool add(retry_after *ra, const char *name, const char *value) {
    return retry_after_add_header(ra, name, strlen(name), value, strlen(value), NOW_MS);
}

static void test_accumulator_precedence(void **state) {
    (void)state;
    retry_after ra;
    retry_after_init(&ra, -1);
    assert_int_equal(ra.delay_ms, -1);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_NONE);
    assert_false(ra.over_cap);
    assert_int_equal(ra.cap_ms, RETRY_AFTER_DEFAULT_CAP_MS);

    /* retry-after-ms beats Retry-After, in either order. */
    assert_true(add(&ra, "Retry-After", "2"));
    assert_int_equal(ra.delay_ms, 2000);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER);
    assert_true(add(&ra, "retry-after-ms", "1500"));
    assert_int_equal(ra.delay_ms, 1500);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);
    assert_true(add(&ra, "Retry-After", "60"));
    assert_int_equal(ra.delay_ms, 1500);

    retry_after_init(&ra, -1);
    assert_true(add(&ra, "RETRY-AFTER-MS", "1500"));
    assert_true(add(&ra, "retry-after", "2"));
    assert_int_equal(ra.delay_ms, 1500);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);

    /* x-ms-retry-after-ms also beats Retry-After ... */
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after", "1"));
    assert_true(add(&ra, "X-MS-Retry-After-Ms", "2500"));
    assert_int_equal(ra.delay_ms, 2500);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_X_MS_RETRY_MS);
    /* ... and shares its rank with retry-after-ms: the larger wins. */
    assert_true(add(&ra, "retry-after-ms", "2000"));
    assert_int_equal(ra.delay_ms, 2500);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_X_MS_RETRY_MS);
    assert_true(add(&ra, "retry-after-ms", "3000"));
    assert_int_equal(ra.delay_ms, 3000);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);
    /* a tie goes to the higher source, whatever the order */
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after-ms", "700"));
    assert_true(add(&ra, "x-ms-retry-after-ms", "700"));
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "x-ms-retry-after-ms", "700"));
    assert_true(add(&ra, "retry-after-ms", "700"));
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER_MS);

    /* Duplicate Retry-After: the larger. */
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after", "10"));
    assert_true(add(&ra, "retry-after", "5"));
    assert_int_equal(ra.delay_ms, 10000);

    /* An unusable value is recognised but changes nothing. */
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after", "5"));
    assert_true(add(&ra, "retry-after-ms", "soon"));
    assert_true(add(&ra, "retry-after", "nan"));
    assert_int_equal(ra.delay_ms, 5000);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_RETRY_AFTER);
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after", ""));
    assert_int_equal(ra.delay_ms, -1);
    assert_int_equal(ra.source, RETRY_AFTER_SRC_NONE);

    /* Other names are not ours. */
    assert_false(add(&ra, "retry-afte", "5"));
    assert_false(add(&ra, "retry-after-", "5"));
    assert_false(add(&ra, "retry-after-s", "5"));
    assert_false(add(&ra, "x-retry-after", "5"));
    assert_false(add(&ra, "", "5"));
    assert_false(retry_after_add_header(&ra, "retry-after", 5, "5", 1, NOW_MS));
    assert_false(retry_after_add_header(NULL, "retry-after", 11, "5", 1, NOW_MS));
    assert_int_equal(ra.delay_ms, -1);

    assert_string_equal(retry_after_source_name(RETRY_AFTER_SRC_NONE), "none");
    assert_string_equal(retry_after_source_name(RETRY_AFTER_SRC_RETRY_AFTER), "retry-after");
    assert_string_equal(retry_after_source_name(RETRY_AFTER_SRC_RETRY_AFTER_MS), "retry-after-ms");
    assert_string_equal(retry_after_source_name(RETRY_AFTER_SRC_X_MS_RETRY_MS), "x-ms-retry-after-ms");
}

static void test_cap_flag(void **state) {
    (void)state;
    retry_after ra;
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after", "120"));
    assert_int_equal(ra.delay_ms, 120000);
    assert_false(ra.over_cap);
    assert_true(add(&ra, "retry-after", "121"));
    assert_int_equal(ra.delay_ms, 121000); /* flagged, not clamped */
    assert_true(ra.over_cap);

    /* A lower over-cap value from a higher rank clears the flag. */
    assert_true(add(&ra, "retry-after-ms", "500"));
    assert_int_equal(ra.delay_ms, 500);
    assert_false(ra.over_cap);

    retry_after_init(&ra, 5000);
    assert_true(add(&ra, "retry-after", "6"));
    assert_true(ra.over_cap);
    retry_after_init(&ra, 5000);
    assert_true(add(&ra, "retry-after-ms", "5000"));
    assert_false(ra.over_cap);

    retry_after_init(&ra, 0);
    assert_true(add(&ra, "retry-after", "0"));
    assert_false(ra.over_cap);
    assert_true(add(&ra, "retry-after", "1"));
    assert_true(ra.over_cap);

    /* A saturated delay is over any sane cap. */
    retry_after_init(&ra, -1);
    assert_true(add(&ra, "retry-after", "999999999999999999999"));
    assert_int_equal(ra.delay_ms, RETRY_AFTER_MAX_MS);
    assert_true(ra.over_cap);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delay_seconds),
        cmocka_unit_test(test_http_dates),
        cmocka_unit_test(test_rfc850_year_relative_to_now),
        cmocka_unit_test(test_ms_headers),
        cmocka_unit_test(test_accumulator_precedence),
        cmocka_unit_test(test_cap_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
