/* httpdate: strict parsers and a formatter for the timestamps found in HTTP
 * header values.
 *
 * httpdate_parse() reads the three HTTP-date forms of RFC 9110 §5.6.7
 * (IMF-fixdate, the obsolete RFC 850 form with its two-digit year, and C's
 * asctime() form) and httpdate_parse_rfc3339() reads the RFC 3339
 * timestamps that Anthropic sends in its rate-limit reset headers.
 * httpdate_format() writes IMF-fixdate (for the mock provider and tests).
 * Calendar arithmetic is proleptic Gregorian on int64, independent of the
 * C library's time zone and locale: no gmtime/timegm, no global state, no
 * allocation. Every function is pure and thread-safe. Depends on nothing
 * but the C standard library. Whitespace around a value is the caller's
 * business (see retry_after.h); these parsers reject it. */
#ifndef SLUICE_HTTPDATE_H
#define SLUICE_HTTPDATE_H

#include <stddef.h>
#include <stdint.h>

/* Length of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") and the buffer
 * size httpdate_format() needs for it plus the terminating NUL. */
#define HTTPDATE_IMF_LEN 29
#define HTTPDATE_BUFSZ (HTTPDATE_IMF_LEN + 1)

/* Parses an HTTP-date in any of its three forms:
 *   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"
 *   RFC 850      "Sunday, 06-Nov-94 08:49:37 GMT"
 *   asctime      "Sun Nov  6 08:49:37 1994"  (day padded with a space, or
 *                                             two digits)
 * Day and month names and "GMT" are matched without regard to case; the
 * layout (separators, digit counts, single spaces) is exact and nothing may
 * follow the date. The date must exist (no Feb 30, no hour 24), the
 * weekday must be the date's real weekday, years have exactly four digits
 * (two in RFC 850). Second 60 (a leap second) is accepted and counts as the
 * first second of the next minute.
 *
 * RFC 850's two-digit year is resolved against now_s (Unix seconds) as RFC
 * 9110 asks: the year with those last two digits in the century of now;
 * if that is more than 50 years after now's year it moves back 100 years,
 * and if it is 50 or more years before now's year it moves forward 100
 * years. The result always lies in (now_year - 50, now_year + 50]; a
 * year outside 0000..9999 (possible only for a now near those ends) is an
 * error, so every accepted date can be written back by httpdate_format().
 *
 * s need not be NUL-terminated. On success stores the Unix time in seconds
 * (negative before 1970) in *out_s and returns 0; on any error returns -1
 * and leaves *out_s untouched. */
int httpdate_parse(const char *s, size_t len, int64_t now_s, int64_t *out_s);

/* Parses an RFC 3339 date-time: "2024-01-01T00:00:30Z",
 * "2024-01-01T00:00:30.25+01:00". The separator may be 'T', 't' or a single
 * space (RFC 3339 §5.6 note); the zone is 'Z', 'z' or +hh:mm / -hh:mm (hh
 * at most 23, mm at most 59). Fractional seconds of any length are rounded
 * up to the next millisecond, so a caller that waits until the result never
 * wakes early. The same calendar rules as httpdate_parse() apply. On
 * success stores Unix time in milliseconds in *out_ms and returns 0; on
 * error returns -1 and leaves *out_ms untouched. */
int httpdate_parse_rfc3339(const char *s, size_t len, int64_t *out_ms);

/* Writes epoch_s (Unix seconds) as an IMF-fixdate plus NUL into buf.
 * Returns HTTPDATE_IMF_LEN, or -1 when bufsz < HTTPDATE_BUFSZ or the year
 * falls outside 0000..9999 (buf is then left untouched). */
int httpdate_format(int64_t epoch_s, char *buf, size_t bufsz);

/* Calendar helpers, exposed for the other parsers and the tests. Days are
 * counted from 1970-01-01 (day 0); month is 1..12, day 1..31. */
int64_t httpdate_days_from_civil(int64_t year, int month, int day);
/* 0 = Sunday ... 6 = Saturday, for a day number as above. */
int httpdate_weekday(int64_t days);
/* Number of days in month (1..12) of year, 0 for an invalid month. */
int httpdate_days_in_month(int64_t year, int month);

#endif
