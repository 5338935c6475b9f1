/* retry_after: the server's "wait this long" headers, turned into a delay.
 *
 * Understands Retry-After (RFC 9110 §10.2.3: delay-seconds or an HTTP-date,
 * parsed by httpdate.h) and the millisecond variants retry-after-ms
 * (OpenAI, Azure) and x-ms-retry-after-ms (Azure), which take precedence.
 * Results are int64 milliseconds relative to the caller's now_ms: -1 means
 * absent or unusable, otherwise 0..RETRY_AFTER_MAX_MS. Garbage is never
 * turned into 0 (that would invite an immediate-retry loop); a date in the
 * past is 0; huge values saturate at RETRY_AFTER_MAX_MS. A delay longer than
 * the caller's cap (default RETRY_AFTER_DEFAULT_CAP_MS, as the OpenAI SDK)
 * is reported with over_cap set rather than clamped: the caller should not
 * retry now. Pure functions over caller-owned structs: no allocation, no
 * global state, thread-safe. Depends on httpdate.h. */
#ifndef SLUICE_RETRY_AFTER_H
#define SLUICE_RETRY_AFTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Saturation value for every delay and reset in lib/http: 100 years of
 * 365.25 days. Far below INT64_MAX, so now_ms + delay never overflows. */
#define RETRY_AFTER_MAX_MS INT64_C(3155760000000)
/* Longest server-requested wait that is still worth waiting for. */
#define RETRY_AFTER_DEFAULT_CAP_MS INT64_C(120000)

/* Which header supplied the delay, in increasing precedence. The two
 * millisecond headers share a rank (see retry_after_add_header()). */
typedef enum retry_after_source {
    RETRY_AFTER_SRC_NONE = 0,
    RETRY_AFTER_SRC_RETRY_AFTER,   /* Retry-After (seconds or HTTP-date) */
    RETRY_AFTER_SRC_X_MS_RETRY_MS, /* x-ms-retry-after-ms */
    RETRY_AFTER_SRC_RETRY_AFTER_MS /* retry-after-ms */
} retry_after_source;

/* Accumulates the Retry-After family of one response. Initialise with
 * retry_after_init(), feed every response header to
 * retry_after_add_header(), then read the fields. */
typedef struct retry_after {
    int64_t delay_ms;          /* -1 absent, else 0..RETRY_AFTER_MAX_MS */
    bool over_cap;             /* delay_ms > cap_ms: do not retry now */
    retry_after_source source; /* header that supplied delay_ms */
    int64_t cap_ms;            /* as given to retry_after_init() */
} retry_after;

/* Parses a Retry-After value: delay-seconds (1*DIGIT, no sign, no
 * fraction) or an HTTP-date (any of the three forms). Optional whitespace
 * (SP, HTAB) around the value is ignored. now_ms is the Unix time in ms
 * that a date is measured against (and that resolves RFC 850's two-digit
 * year). Returns the delay in ms, 0 for a date not after now, saturated at
 * RETRY_AFTER_MAX_MS, or -1 for anything else ("", "soon", "-10", "1.5",
 * "inf", "nan", an invalid or inconsistent date, trailing junk). */
int64_t retry_after_parse(const char *value, size_t len, int64_t now_ms);

/* Parses a retry-after-ms / x-ms-retry-after-ms value: 1*DIGIT with an
 * optional "." 1*DIGIT fraction, rounded up to a whole millisecond, OWS
 * allowed around it. Returns ms saturated at RETRY_AFTER_MAX_MS, or -1 for
 * anything else (sign, exponent, "inf", "nan", empty). */
int64_t retry_after_parse_ms(const char *value, size_t len);

/* Resets ra to "absent". cap_ms < 0 selects RETRY_AFTER_DEFAULT_CAP_MS;
 * cap_ms == 0 flags every positive delay as over the cap. */
void retry_after_init(retry_after *ra, int64_t cap_ms);

/* Offers one response header. name is matched without regard to case;
 * neither string needs a NUL. Returns true when the name belongs to the
 * family (even if the value was unusable and therefore ignored), false
 * otherwise. Precedence: a value from a higher-ranked header replaces one
 * from a lower rank and is never replaced by it; within one rank the
 * larger delay wins (on a tie the higher source enum), so the result does
 * not depend on header order. An unusable value changes nothing. */
bool retry_after_add_header(retry_after *ra, const char *name, size_t name_len, const char *value, size_t value_len,
                            int64_t now_ms);

/* "retry-after", "retry-after-ms", ... for logs; "none" for NONE. */
const char *retry_after_source_name(retry_after_source src);

#endif
