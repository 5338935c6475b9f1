/* ratelimit: what a provider's response headers say about its quota.
 *
 * A ratelimit_feedback accumulates the headers of ONE response, fed one at
 * a time with ratelimit_add_header(), and answers per dimension (requests,
 * tokens, and Anthropic's input and output tokens) the limit, the
 * remaining count and the time until reset, plus the Retry-After family
 * (retry_after.h) and the pause that all of it implies. Understood:
 *   - OpenAI / Azure OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}
 *     (reset as a Go duration "6m0s", or plain seconds "20", "0.5")
 *   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
 *     output-tokens}-{limit,remaining,reset} (reset as RFC 3339)
 *   - IETF draft-ietf-httpapi-ratelimit-headers: RateLimit and
 *     RateLimit-Policy in the structured-field forms of draft-07
 *     ("limit=10, remaining=0, reset=5") and draft-08 and later
 *     ("\"default\";r=0;t=30" with "\"default\";q=100;w=60"), and the split
 *     RateLimit-Limit / -Remaining / -Reset of drafts up to 06
 *   - the de-facto X-RateLimit-Limit / -Remaining / -Reset (reset in Unix
 *     seconds; a value below 1e9 is taken as delta-seconds, a value of 1e12
 *     or more as Unix milliseconds)
 *   - Retry-After, retry-after-ms, x-ms-retry-after-ms (via retry_after.h)
 * The generic families (IETF, X-RateLimit-*) describe the request
 * dimension. Precedence and merging are documented at ratelimit_get() and
 * in docs/http-feedback.md; the outcome never depends on header order.
 *
 * All times are int64 milliseconds; -1 means absent. Counts saturate at
 * RATELIMIT_COUNT_MAX, times at RETRY_AFTER_MAX_MS. The struct lives in
 * caller memory; nothing allocates, nothing is global, functions on
 * distinct structs are thread-safe. Depends on retry_after.h, httpdate.h. */
#ifndef SLUICE_RATELIMIT_H
#define SLUICE_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retry_after.h"

/* Counts above this (2^53, exact in a double) saturate. */
#define RATELIMIT_COUNT_MAX (INT64_C(1) << 53)
/* RateLimit-Policy entries remembered per response; more are ignored and
 * flagged in ratelimit_feedback.policies_dropped. */
#define RATELIMIT_IETF_MAX_POLICIES 8

typedef enum ratelimit_dim {
    RATELIMIT_REQUESTS = 0,
    RATELIMIT_TOKENS,        /* combined tokens (OpenAI; Anthropic's most restrictive) */
    RATELIMIT_INPUT_TOKENS,  /* Anthropic only */
    RATELIMIT_OUTPUT_TOKENS, /* Anthropic only */
    RATELIMIT_DIMS
} ratelimit_dim;

/* Header families in increasing precedence. For each dimension the
 * highest-ranked family that said anything about it supplies the whole
 * answer (limit, remaining and reset together); lower families are
 * ignored for that dimension, whatever the order the headers came in. */
typedef enum ratelimit_source {
    RATELIMIT_SRC_NONE = 0,
    RATELIMIT_SRC_X_GENERIC,  /* X-RateLimit-Limit / -Remaining / -Reset */
    RATELIMIT_SRC_IETF_SPLIT, /* RateLimit-Limit / -Remaining / -Reset (drafts <= 06) */
    RATELIMIT_SRC_IETF,       /* RateLimit (+ RateLimit-Policy) (drafts >= 07) */
    RATELIMIT_SRC_PROVIDER,   /* x-ratelimit-*-{requests,tokens}, anthropic-ratelimit-* */
    RATELIMIT_SRC__COUNT
} ratelimit_source;

/* One dimension's state. reset_ms is relative to the now_ms passed to
 * ratelimit_add_header() (0 when the reset time has passed). */
typedef struct ratelimit_value {
    int64_t limit;     /* -1 absent */
    int64_t remaining; /* -1 absent */
    int64_t reset_ms;  /* -1 absent */
} ratelimit_value;

/* The accumulator. Fields marked public may be read directly; the rest is
 * private to ratelimit.c (read it through ratelimit_get()). */
typedef struct ratelimit_feedback {
    /* public */
    retry_after retry;     /* Retry-After family; retry.over_cap is the cap flag */
    int recognised;        /* headers whose name this module knows */
    int invalid;           /* ... of which the value was rejected (and ignored) */
    bool policies_dropped; /* more than RATELIMIT_IETF_MAX_POLICIES policies */

    /* private */
    ratelimit_value val[RATELIMIT_SRC__COUNT][RATELIMIT_DIMS];
    ratelimit_value ietf_best; /* most restrictive RateLimit item so far */
    uint64_t ietf_best_name;   /* FNV-1a of its policy name, 0 for draft-07 */
    bool ietf_have;
    int npolicies;
    struct {
        uint64_t name;
        int64_t quota;
    } policy[RATELIMIT_IETF_MAX_POLICIES];
} ratelimit_feedback;

/* Resets fb to "nothing known". cap_ms is the Retry-After cap (< 0 for
 * RETRY_AFTER_DEFAULT_CAP_MS), see retry_after_init(). */
void ratelimit_init(ratelimit_feedback *fb, int64_t cap_ms);

/* Offers one response header; name (case-insensitive) and value need no
 * NUL and value may carry surrounding whitespace. now_ms is the Unix time
 * in ms at which the response arrived; relative results are measured from
 * it. Returns true when the name is one this module understands (the
 * Retry-After family included), even if its value was unusable: such a
 * value is ignored and counted in fb->invalid. Within one family and
 * dimension repeated values merge conservatively: the smallest limit, the
 * smallest remaining, the largest reset; among several RateLimit items the
 * most restrictive one (lowest remaining, then latest reset) is kept whole.
 * A field that fails to parse is ignored as a whole. */
bool ratelimit_add_header(ratelimit_feedback *fb, const char *name, size_t name_len, const char *value,
                          size_t value_len, int64_t now_ms);

/* Fills *out with what is known about dim, taken whole from the
 * highest-ranked family that reported on it, and returns that family
 * (RATELIMIT_SRC_NONE with all fields -1 when nothing is known). For
 * RATELIMIT_TOKENS with no combined tokens headers, the more restrictive of
 * the input and output token dimensions is returned (an exhausted one
 * first, the later reset among exhausted ones, else the lower fraction
 * remaining). For an IETF item without its own limit, the limit is the
 * quota (q) of the RateLimit-Policy entry with the same name. */
ratelimit_source ratelimit_get(const ratelimit_feedback *fb, ratelimit_dim dim, ratelimit_value *out);

/* ratelimit_get() without the stand-in: only what headers about dim itself
 * said (RATELIMIT_TOKENS is then never the input or output dimension's). */
ratelimit_source ratelimit_get_own(const ratelimit_feedback *fb, ratelimit_dim dim, ratelimit_value *out);

/* The pause this feedback implies, in ms from now_ms: the Retry-After
 * family's delay when present (it wins over any reset); otherwise the
 * largest reset_ms among dimensions whose remaining is 0 and whose reset
 * is known; otherwise -1. *over_cap (optional) is set when the pause
 * exceeds the Retry-After cap given to ratelimit_init(): do not retry now. */
int64_t ratelimit_pause_ms(const ratelimit_feedback *fb, bool *over_cap);

/* The pause a settle should apply to the whole fleet: Retry-After (and its
 * -ms variants) whenever present; the reset of a dimension whose remaining
 * is 0 only when the response was throttled. On a success, remaining 0 is
 * the steady state of a fleet running exactly at its quota: the schedule
 * already spaces the next send, and pausing until the bucket is full would
 * idle the quota. -1 when there is nothing to apply. */
int64_t ratelimit_settle_pause_ms(const ratelimit_feedback *fb, bool throttled, bool *over_cap);

/* The value parsers, exposed for tests and other callers. Each trims OWS
 * and returns -1 for an unusable value. */

/* A reset given as a Go duration (units ns, us, µs, μs, ms, s, m, h; an
 * integer or decimal before each unit; "0" alone; no sign) or as plain
 * non-negative decimal seconds ("20", "0.5"). Returns ms, rounded up to a
 * whole millisecond, saturated at RETRY_AFTER_MAX_MS. */
int64_t ratelimit_parse_duration_ms(const char *value, size_t len);

/* A non-negative decimal integer count, saturated at RATELIMIT_COUNT_MAX. */
int64_t ratelimit_parse_count(const char *value, size_t len);

/* An X-RateLimit-Reset value (integer or decimal): below 1e9 delta-seconds,
 * below 1e12 Unix seconds, else Unix milliseconds. Returns ms from now_ms,
 * 0 for a time already past, saturated at RETRY_AFTER_MAX_MS. */
int64_t ratelimit_parse_epoch_reset_ms(const char *value, size_t len, int64_t now_ms);

/* "requests", "tokens", "input_tokens", "output_tokens"; "?" otherwise. */
const char *ratelimit_dim_name(ratelimit_dim dim);
/* "none", "x-ratelimit", "ratelimit-split", "ratelimit", "provider". */
const char *ratelimit_source_name(ratelimit_source src);

#endif
