/* backoff: how long to wait before the next attempt, within a deadline.
 *
 * backoff_next() turns (attempt number, retryability, the server's
 * requested wait, now, deadline) into either a delay that ends strictly
 * before the deadline, leaving at least min_attempt_ms for the attempt
 * itself, or a verdict to give up now with the reason. Without a server
 * wait it uses "full jitter":
 *     delay = uniform[0, min(cap_ms, base_ms * 2^attempt)]
 * With a server wait W (Retry-After and friends), W is a floor and jitter
 * is only ever added on top, to spread a fleet that got the same W:
 *     delay = W + uniform[0, min(jitter_cap_ms, W / jitter_divisor)]
 * A W above server_wait_cap_ms gives up at once (the server asks for more
 * than is worth waiting). Near the deadline the upper bound of the draw is
 * lowered, never the floor; if even the floor does not fit, give up.
 *
 * Randomness comes from a caller-owned splitmix64 state (a uint64_t), so
 * tests are deterministic and threads need no shared state; rand() is never
 * used. All arithmetic saturates; any attempt number is safe. No
 * allocation, no globals, thread-safe. Depends on nothing. */
#ifndef SLUICE_BACKOFF_H
#define SLUICE_BACKOFF_H

#include <stdbool.h>
#include <stdint.h>

/* X(enum suffix, name) */
#define BACKOFF_VERDICT_MAP(X)                                                                                         \
    X(RETRY, "retry") /* wait delay_ms, then try again */                                                              \
    X(GIVE_UP_NOT_RETRYABLE, "not_retryable")                                                                          \
    X(GIVE_UP_ATTEMPTS, "attempts_exhausted")                                                                          \
    X(GIVE_UP_SERVER_WAIT, "server_wait_beyond_cap")                                                                   \
    X(GIVE_UP_DEADLINE, "deadline")

typedef enum backoff_verdict {
#define BACKOFF_ENUM_(sym, name) BACKOFF_##sym,
    BACKOFF_VERDICT_MAP(BACKOFF_ENUM_)
#undef BACKOFF_ENUM_
        BACKOFF__COUNT
} backoff_verdict;

/* Fill with backoff_policy_init(); fields may then be changed. Negative
 * values are treated as 0; jitter_divisor < 1 as 1; min_attempt_ms < 1
 * as 1 (so a delay always ends strictly before the deadline). */
typedef struct backoff_policy {
    int64_t base_ms;            /* first full-jitter ceiling, default 500 */
    int64_t cap_ms;             /* largest full-jitter ceiling, default 30000 */
    int64_t server_wait_cap_ms; /* longest server wait worth waiting, default 120000 */
    int64_t jitter_cap_ms;      /* most jitter added to a server wait, default 1000 */
    int64_t jitter_divisor;     /* jitter at most W / divisor, default 4 */
    int64_t min_attempt_ms;     /* budget an attempt needs after the delay, default 1000 */
    int max_attempts;           /* retries allowed (attempt < max); 0 = unlimited, default 0 */
} backoff_policy;

void backoff_policy_init(backoff_policy *p);

typedef struct backoff_decision {
    backoff_verdict verdict;
    int64_t delay_ms;           /* RETRY: the delay; GIVE_UP_SERVER_WAIT: the server's wait; else -1 */
    int64_t attempt_timeout_ms; /* RETRY with a deadline: deadline - (now + delay), >= min_attempt_ms;
                                   -1 without a deadline or when giving up */
} backoff_decision;

/* Decides what to do after a failed attempt.
 *   attempt         retries already made (0 before the first retry)
 *   retryable       from classify_result.retryable; false gives up at once
 *   server_wait_ms  the server's requested wait (ratelimit_pause_ms() or
 *                   retry_after.delay_ms), -1 when none
 *   now_ms          current time (any epoch, same as deadline_ms)
 *   deadline_ms     when the caller stops caring; < 0 for no deadline
 *   rng             splitmix64 state, advanced when a random draw is made
 *                   (NULL: no jitter, the upper bound of the draw is used)
 * Checks in this order: not retryable, attempts exhausted, server wait
 * beyond cap, deadline. A RETRY delay d satisfies now + d + min_attempt_ms
 * <= deadline. Fills *out (non-NULL) and returns out->verdict. */
backoff_verdict backoff_next(const backoff_policy *p, int attempt, bool retryable, int64_t server_wait_ms,
                             int64_t now_ms, int64_t deadline_ms, uint64_t *rng, backoff_decision *out);

/* The full-jitter ceiling min(cap_ms, base_ms * 2^attempt), overflow-safe
 * for every attempt (negative attempts count as 0). */
int64_t backoff_ceiling_ms(const backoff_policy *p, int attempt);

/* Per-attempt timeout: the budget left once the planned delay is over,
 * deadline - (now + delay), at least 0; -1 when deadline_ms < 0. */
int64_t backoff_attempt_timeout_ms(int64_t now_ms, int64_t deadline_ms, int64_t delay_ms);

/* splitmix64: advances *state and returns the next 64 random bits. Any
 * seed, 0 included, is fine. */
uint64_t backoff_rand_next(uint64_t *state);

/* Uniform integer in [0, hi] (hi >= 0; hi < 0 yields 0), unbiased. */
int64_t backoff_rand_upto(uint64_t *state, int64_t hi);

/* "retry", "not_retryable", "attempts_exhausted", "server_wait_beyond_cap",
 * "deadline"; "unknown" otherwise. */
const char *backoff_verdict_name(backoff_verdict v);

#endif
