/* Unit tests for lib/http/httpdate: the three HTTP-date forms, RFC 3339,
 * the IMF-fixdate formatter, and the calendar helpers against libc. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "httpdate.h"

/* 2023-11-14T22:13:20Z, a Tuesday. */
#define NOW_S INT64_C(1700000000)

static int parse(const char *s, int64_t now_s, int64_t *out) { return httpdate_parse(s, strlen(s), now_s, out); }

typedef struct date_vec {
    const char *in;
    int64_t want; /* epoch seconds */
} date_vec;

static void test_valid_forms(void **state) {
    (void)state;
    static const date_vec v[] = {
        /* The RFC 9110 example in its three forms. */
        {"Sun, 06 Nov 1994 08:49:37 GMT", 784111777},
        {"Sunday, 06-Nov-94 08:49:37 GMT", 784111777},
        {"Sun Nov  6 08:49:37 1994", 784111777},
        /* asctime with a two-digit day, and with a zero-padded one */
        {"Sun Nov 06 08:49:37 1994", 784111777},
        {"Wed Nov 16 08:49:37 1994", 784975777},
        /* names are case-insensitive */
        {"sun, 06 nov 1994 08:49:37 gmt", 784111777},
        {"SUNDAY, 06-NOV-94 08:49:37 GMT", 784111777},
        /* epoch edges, before 1970, leap day, last representable second */
        {"Thu, 01 Jan 1970 00:00:00 GMT", 0},
        {"Wed, 31 Dec 1969 23:59:59 GMT", -1},
        {"Tue, 29 Feb 2000 00:00:00 GMT", 951782400},
        {"Fri, 31 Dec 9999 23:59:59 GMT", INT64_C(253402300799)},
        {"Sat, 01 Jan 0000 00:00:00 GMT", INT64_C(-62167219200)},
        /* a leap second counts as the next minute's first second */
        {"Sat, 31 Dec 2016 23:59:60 GMT", 1483228800},
        {"Tue, 14 Nov 2023 22:13:20 GMT", NOW_S},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int64_t got = 12345;
        int rc = parse(v[i].in, NOW_S, &got);
        if (rc != 0 || got != v[i].want)
            fail_msg("\"%s\": rc %d got %lld want %lld", v[i].in, rc, (long long)got, (long long)v[i].want);
    }
}

static void test_invalid_forms(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "soon",
        "0",
        "1994-11-06T08:49:37Z",
        /* trailing or leading junk, whitespace included (trimming is the caller's) */
        "Sun, 06 Nov 1994 08:49:37 GMT ",
        " Sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMTx",
        "Sun, 06 Nov 1994 08:49:37 GMT+1",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 +0000",
        /* weekday wrong, unknown, or in the other form's spelling */
        "Mon, 06 Nov 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sundae, 06-Nov-94 08:49:37 GMT",
        "Sunday, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",
        "Monday, 06-Nov-94 08:49:37 GMT",
        "Mon Nov  6 08:49:37 1994",
        ", 06 Nov 1994 08:49:37 GMT",
        /* year */
        "Sun, 06 Nov 19940 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Nov 994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37 19940",
        /* impossible dates and times */
        "Thu, 30 Feb 2023 08:49:37 GMT",
        "Thu, 29 Feb 2001 00:00:00 GMT",
        "Tue, 29 Feb 1900 00:00:00 GMT",
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 25:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:37 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 November 1994 08:49:37 GMT",
        /* layout */
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun,06 Nov 1994 08:49:37 GMT",
        "Sun,  06 Nov 1994 08:49:37 GMT",
        "Sun, 06  Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 06 Nov 1994 08-49-37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov   6 08:49:37 1994",
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun  Nov  6 08:49:37 1994",
        "Sun, 0x Nov 1994 08:49:37 GMT",
        "Sun, -6 Nov 1994 08:49:37 GMT",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t got = 777;
        int rc = parse(bad[i], NOW_S, &got);
        if (rc != -1 || got != 777) fail_msg("\"%s\" accepted: rc %d got %lld", bad[i], rc, (long long)got);
    }
    int64_t got = 777;
    /* An embedded NUL and a length that cuts the string short. */
    assert_int_equal(httpdate_parse("Sun, 06 Nov 1994 08:49:37 GMT\0x", 31, NOW_S, &got), -1);
    assert_int_equal(httpdate_parse("Sun, 06 Nov 1994 08:49:37 GMT", 28, NOW_S, &got), -1);
    assert_int_equal(httpdate_parse(NULL, 0, NOW_S, &got), -1);
    assert_int_equal(httpdate_parse("Sun, 06 Nov 1994 08:49:37 GMT", 29, NOW_S, NULL), -1);
    assert_int_equal(got, 777);
}

/* RFC 850's two-digit year: the RFC 9110 rule relative to now. */
static void test_rfc850_two_digit_year(void **state) {
    (void)state;
    static const char *const wk[7] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
    static const struct {
        int now_year;
        int yy;
        int want_year;
    } v[] = {
        {2023, 94, 1994}, /* 2094 is > 50 years ahead */
        {2023, 73, 2073}, /* exactly 50 years ahead stays */
        {2023, 74, 1974}, {2023, 23, 2023}, {2023, 30, 2030}, {2023, 0, 2000},  {2023, 99, 1999},
        {2080, 31, 2031}, {2080, 30, 2130}, /* 2030 is 50 years behind: the window moves up */
        {2080, 10, 2110}, {1999, 49, 2049}, {1999, 50, 1950}, {1970, 20, 2020}, {1970, 21, 1921},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int64_t now_s = httpdate_days_from_civil(v[i].now_year, 6, 15) * 86400;
        int64_t days = httpdate_days_from_civil(v[i].want_year, 1, 1);
        char buf[64];
        snprintf(buf, sizeof buf, "%s, 01-Jan-%02d 00:00:00 GMT", wk[httpdate_weekday(days)], v[i].yy);
        int64_t got = 0;
        int rc = parse(buf, now_s, &got);
        if (rc != 0 || got != days * 86400)
            fail_msg("now %d \"%s\": rc %d got %lld want %lld", v[i].now_year, buf, rc, (long long)got,
                     (long long)(days * 86400));
    }
    /* Near year 0 or 9999 the window would leave 0000..9999: rejected
     * (found by fuzz_retry_after). The weekdays are those of the years the
     * window would produce (-6 and 10040), so only the range rejects them. */
    int64_t got = 5;
    char lo[64], hi[64];
    snprintf(lo, sizeof lo, "%s, 06-Nov-94 08:49:37 GMT", wk[httpdate_weekday(httpdate_days_from_civil(-6, 11, 6))]);
    snprintf(hi, sizeof hi, "%s, 01-Jan-40 00:00:00 GMT", wk[httpdate_weekday(httpdate_days_from_civil(10040, 1, 1))]);
    int64_t year0 = httpdate_days_from_civil(0, 1, 1) * 86400;
    int64_t year9990 = httpdate_days_from_civil(9990, 1, 1) * 86400;
    assert_int_equal(parse(lo, year0, &got), -1);
    assert_int_equal(parse(hi, year9990, &got), -1);
    assert_int_equal(parse("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MIN, &got), -1);
    assert_int_equal(parse("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MAX, &got), -1);
    assert_int_equal(got, 5);
    /* ... while the same strings are fine in range: 1994, and 2045 (a Sunday). */
    assert_int_equal(parse("Sunday, 06-Nov-94 08:49:37 GMT", NOW_S, &got), 0);
    assert_int_equal(got, 784111777);
    assert_int_equal(parse("Sunday, 01-Jan-45 00:00:00 GMT", NOW_S, &got), 0);
    assert_int_equal(got, httpdate_days_from_civil(2045, 1, 1) * 86400);
}

static void test_rfc3339(void **state) {
    (void)state;
    static const struct {
        const char *in;
        int64_t want; /* ms, or -1 for invalid */
    } v[] = {
        {"2024-01-01T00:00:30Z", INT64_C(1704067230000)},
        {"2024-01-01t00:00:30z", INT64_C(1704067230000)},
        {"2024-01-01 00:00:30Z", INT64_C(1704067230000)},
        {"2024-01-01T00:00:30.5Z", INT64_C(1704067230500)},
        {"2024-01-01T00:00:30.123Z", INT64_C(1704067230123)},
        {"2024-01-01T00:00:30.123000Z", INT64_C(1704067230123)},
        {"2024-01-01T00:00:30.1230001Z", INT64_C(1704067230124)}, /* rounded up */
        {"2024-01-01T00:00:30.000000001Z", INT64_C(1704067230001)},
        {"2024-01-01T01:00:30+01:00", INT64_C(1704067230000)},
        {"2023-12-31T23:00:30-01:00", INT64_C(1704067230000)},
        {"2024-01-01T05:45:30.25+05:45", INT64_C(1704067230250)},
        {"2024-01-01T00:00:30-00:00", INT64_C(1704067230000)},
        {"1970-01-01T00:00:00Z", 0},
        {"2024-02-29T00:00:00Z", INT64_C(1709164800000)},
        {"2016-12-31T23:59:60Z", INT64_C(1483228800000)},
        /* invalid */
        {"", -1},
        {"2024-01-01T00:00:30", -1},
        {"2024-01-01T00:00:30+0100", -1},
        {"2024-01-01T00:00:30+01", -1},
        {"2024-01-01T00:00:30+24:00", -1},
        {"2024-01-01T00:00:30+01:60", -1},
        {"2024-13-01T00:00:30Z", -1},
        {"2024-00-01T00:00:30Z", -1},
        {"2023-02-29T00:00:30Z", -1},
        {"2024-02-30T00:00:30Z", -1},
        {"2024-01-01T24:00:00Z", -1},
        {"2024-01-01T00:00:30.Z", -1},
        {"2024-01-01T00:00:30Zjunk", -1},
        {"2024-01-01T00:00:30Z ", -1},
        {"20240101T000030Z", -1},
        {"2024-1-01T00:00:30Z", -1},
        {"2024-01-01X00:00:30Z", -1},
        {"12024-01-01T00:00:30Z", -1},
        {"Sun, 06 Nov 1994 08:49:37 GMT", -1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int64_t got = -7;
        int rc = httpdate_parse_rfc3339(v[i].in, strlen(v[i].in), &got);
        int64_t res = rc == 0 ? got : -1;
        if (res != v[i].want || (rc != 0 && got != -7))
            fail_msg("\"%s\": rc %d got %lld want %lld", v[i].in, rc, (long long)got, (long long)v[i].want);
    }
}

static void test_format(void **state) {
    (void)state;
    char buf[HTTPDATE_BUFSZ];
    assert_int_equal(httpdate_format(784111777, buf, sizeof buf), HTTPDATE_IMF_LEN);
    assert_string_equal(buf, "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_int_equal(httpdate_format(0, buf, sizeof buf), HTTPDATE_IMF_LEN);
    assert_string_equal(buf, "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_int_equal(httpdate_format(-1, buf, sizeof buf), HTTPDATE_IMF_LEN);
    assert_string_equal(buf, "Wed, 31 Dec 1969 23:59:59 GMT");
    assert_int_equal(httpdate_format(INT64_C(253402300799), buf, sizeof buf), HTTPDATE_IMF_LEN);
    assert_string_equal(buf, "Fri, 31 Dec 9999 23:59:59 GMT");
    assert_int_equal(httpdate_format(INT64_C(-62167219200), buf, sizeof buf), HTTPDATE_IMF_LEN);
    assert_string_equal(buf, "Sat, 01 Jan 0000 00:00:00 GMT");

    memcpy(buf, "untouched", 10);
    assert_int_equal(httpdate_format(INT64_C(253402300800), buf, sizeof buf), -1);
    assert_int_equal(httpdate_format(INT64_C(-62167219201), buf, sizeof buf), -1);
    assert_int_equal(httpdate_format(INT64_MAX, buf, sizeof buf), -1);
    assert_int_equal(httpdate_format(INT64_MIN, buf, sizeof buf), -1);
    assert_int_equal(httpdate_format(0, buf, HTTPDATE_BUFSZ - 1), -1);
    assert_int_equal(httpdate_format(0, NULL, 64), -1);
    assert_string_equal(buf, "untouched");
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Format and parse agree with each other and with libc's gmtime_r. */
static void test_roundtrip_against_libc(void **state) {
    (void)state;
    static const char *const mon[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    static const char *const wk[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    uint64_t rng = 42;
    for (int i = 0; i < 20000; i++) {
        /* 1900..2199 against libc; whole 0000..9999 for the round trip. */
        int64_t t = (int64_t)(splitmix(&rng) % UINT64_C(9467280000)) - INT64_C(2208988800);
        char buf[HTTPDATE_BUFSZ], want[64];
        assert_int_equal(httpdate_format(t, buf, sizeof buf), HTTPDATE_IMF_LEN);
        time_t tt = (time_t)t;
        struct tm tm;
        assert_non_null(gmtime_r(&tt, &tm));
        snprintf(want, sizeof want, "%s, %02d %s %04d %02d:%02d:%02d GMT", wk[tm.tm_wday], tm.tm_mday, mon[tm.tm_mon],
                 tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        assert_string_equal(buf, want);
        int64_t back = 0;
        assert_int_equal(parse(buf, NOW_S, &back), 0);
        assert_int_equal(back, t);

        int64_t any = (int64_t)(splitmix(&rng) % UINT64_C(315537897600)) - INT64_C(62167219200);
        assert_int_equal(httpdate_format(any, buf, sizeof buf), HTTPDATE_IMF_LEN);
        assert_int_equal(parse(buf, NOW_S, &back), 0);
        assert_int_equal(back, any);
    }
}

static void test_calendar_helpers(void **state) {
    (void)state;
    assert_int_equal(httpdate_days_from_civil(1970, 1, 1), 0);
    assert_int_equal(httpdate_days_from_civil(2000, 3, 1), 11017);
    assert_int_equal(httpdate_days_from_civil(1969, 12, 31), -1);
    assert_int_equal(httpdate_weekday(0), 4);  /* Thursday */
    assert_int_equal(httpdate_weekday(-1), 3); /* Wednesday */
    assert_int_equal(httpdate_weekday(-4), 0);
    assert_int_equal(httpdate_weekday(-5), 6);
    assert_int_equal(httpdate_days_in_month(2000, 2), 29);
    assert_int_equal(httpdate_days_in_month(1900, 2), 28);
    assert_int_equal(httpdate_days_in_month(2024, 2), 29);
    assert_int_equal(httpdate_days_in_month(2023, 2), 28);
    assert_int_equal(httpdate_days_in_month(2023, 4), 30);
    assert_int_equal(httpdate_days_in_month(2023, 12), 31);
    assert_int_equal(httpdate_days_in_month(2023, 0), 0);
    assert_int_equal(httpdate_days_in_month(2023, 13), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_forms),
        cmocka_unit_test(test_invalid_forms),
        cmocka_unit_test(test_rfc850_two_digit_year),
        cmocka_unit_test(test_rfc3339),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_roundtrip_against_libc),
        cmocka_unit_test(test_calendar_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
