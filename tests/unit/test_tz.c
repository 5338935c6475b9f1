/* test_tz: the tz module (lib/core/tz.c) on the system's tz database:
 * America/Los_Angeles around both 2026 DST changes (the transitions of
 * the file, and the footer's rule past its last one), UTC, bad names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tz.h"

#define H 3600000LL
/* 2026-03-08 10:00 UTC = 02:00 PST: clocks go to 03:00 PDT. */
#define SPRING_2026 1772964000000LL
/* 2026-11-01 09:00 UTC = 02:00 PDT: clocks go back to 01:00 PST. */
#define AUTUMN_2026 1793523600000LL

static tz_zone *load(const char *name) {
    tz_zone *z = NULL;
    char err[256];
    if (tz_load(NULL, name, &z, err, sizeof(err)) != 0) fail_msg("%s", err);
    return z;
}

static void test_los_angeles_2026(void **state) {
    (void)state;
    tz_zone *z = load("America/Los_Angeles");
    assert_true(tz_offset_ms(z, SPRING_2026 - 1) == -8 * H);
    assert_true(tz_offset_ms(z, SPRING_2026) == -7 * H);
    assert_true(tz_offset_ms(z, AUTUMN_2026 - 1) == -7 * H);
    assert_true(tz_offset_ms(z, AUTUMN_2026) == -8 * H);
    assert_true(tz_next_change_ms(z, SPRING_2026 - 30 * 24 * H) == SPRING_2026);
    assert_true(tz_next_change_ms(z, SPRING_2026) == AUTUMN_2026);
    /* The Pacific days of 2026-03-08 (23 h) and 2026-11-01 (25 h). */
    long long mar8 = 1772956800000LL, mar9 = mar8 + 23 * H; /* 08:00 UTC, then 07:00 */
    assert_true(tz_offset_ms(z, mar8) == -8 * H && tz_offset_ms(z, mar9) == -7 * H);
    long long nov1 = 1793516400000LL, nov2 = nov1 + 25 * H; /* 07:00 UTC, then 08:00 */
    assert_true(tz_offset_ms(z, nov1) == -7 * H && tz_offset_ms(z, nov2) == -8 * H);
    char buf[256];
    int n = tz_changes(z, SPRING_2026 - H, AUTUMN_2026 + H, buf, sizeof(buf));
    assert_true(n > 0 && (size_t)n < sizeof(buf));
    assert_string_equal(buf, "-28800000,1772964000000,-25200000,1793523600000,-28800000");
    /* Past the file's transitions (2037 in a fat file, 2007 in a slim
     * one), the footer's rule: 2040-03-11 10:00 UTC (second Sunday). */
    long long spring_2040 = 2215072800000LL;
    assert_true(tz_offset_ms(z, spring_2040 - 1) == -8 * H);
    assert_true(tz_offset_ms(z, spring_2040) == -7 * H);
    assert_true(tz_next_change_ms(z, spring_2040 - H) == spring_2040);
    tz_free(z);
}

static void test_utc_and_errors(void **state) {
    (void)state;
    tz_zone *z = load("UTC");
    assert_true(tz_offset_ms(z, SPRING_2026) == 0);
    assert_true(tz_next_change_ms(z, SPRING_2026) == -1);
    char buf[32];
    assert_int_equal(tz_changes(z, 0, SPRING_2026, buf, sizeof(buf)), 1);
    assert_string_equal(buf, "0");
    tz_free(z);
    tz_free(NULL);
    char err[256];
    z = (tz_zone *)err;
    assert_int_equal(tz_load(NULL, "Mars/Olympus_Mons", &z, err, sizeof(err)), -1);
    assert_null(z);
    assert_non_null(strstr(err, "unknown time zone 'Mars/Olympus_Mons'"));
    assert_int_equal(tz_load(NULL, "../etc/passwd", &z, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not a time zone name"));
    assert_int_equal(tz_load("/etc", "passwd", &z, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is not a TZif file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_los_angeles_2026),
        cmocka_unit_test(test_utc_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
