/* backoff: full jitter, server-wait floors, deadlines. See backoff.h. */
#include "backoff.h"

#include <stddef.h>

static const char *const verdict_names[BACKOFF__COUNT] = {
#define BACKOFF_NAME_(sym, name) name,
    BACKOFF_VERDICT_MAP(BACKOFF_NAME_)
#undef BACKOFF_NAME_
};

const char *backoff_verdict_name(backoff_verdict v) {
    if ((int)v < 0 || (int)v >= BACKOFF__COUNT) return "unknown";
    return verdict_names[v];
}

void backoff_policy_init(backoff_policy *p) {
    if (p == NULL) return;
    p->base_ms = 500;
    p->cap_ms = 30000;
    p->server_wait_cap_ms = 120000;
    p->jitter_cap_ms = 1000;
    p->jitter_divisor = 4;
    p->min_attempt_ms = 1000;
    p->max_attempts = 0;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t at_least(int64_t v, int64_t lo) { return v < lo ? lo : v; }

/* a - b, saturated to the int64 range. */
static int64_t sat_sub(int64_t a, int64_t b) {
    if (b < 0 && a > INT64_MAX + b) return INT64_MAX;
    if (b > 0 && a < INT64_MIN + b) return INT64_MIN;
    return a - b;
}

uint64_t backoff_rand_next(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

int64_t backoff_rand_upto(uint64_t *state, int64_t hi) {
    if (hi <= 0) return 0;
    if (state == NULL) return hi;
    /* Rejection sampling: discard the low values that would make the
     * modulo biased. range <= 2^63, so at most half the draws are lost. */
    uint64_t range = (uint64_t)hi + 1;
    uint64_t threshold = (0 - range) % range;
    uint64_t r;
    do r = backoff_rand_next(state);
    while (r < threshold);
    return (int64_t)(r % range);
}

int64_t backoff_ceiling_ms(const backoff_policy *p, int attempt) {
    if (p == NULL) return 0;
    int64_t base = at_least(p->base_ms, 0);
    int64_t cap = at_least(p->cap_ms, 0);
    if (attempt < 0) attempt = 0;
    if (base == 0) return 0;
    if (attempt >= 63 || base > (cap >> attempt)) return cap;
    return min64(cap, base << attempt);
}

int64_t backoff_attempt_timeout_ms(int64_t now_ms, int64_t deadline_ms, int64_t delay_ms) {
    if (deadline_ms < 0) return -1;
    int64_t left = sat_sub(sat_sub(deadline_ms, now_ms), at_least(delay_ms, 0));
    return at_least(left, 0);
}

backoff_verdict backoff_next(const backoff_policy *p, int attempt, bool retryable, int64_t server_wait_ms,
                             int64_t now_ms, int64_t deadline_ms, uint64_t *rng, backoff_decision *out) {
    backoff_policy defaults;
    if (p == NULL) {
        backoff_policy_init(&defaults);
        p = &defaults;
    }
    out->delay_ms = -1;
    out->attempt_timeout_ms = -1;
    if (!retryable) return out->verdict = BACKOFF_GIVE_UP_NOT_RETRYABLE;
    if (p->max_attempts > 0 && attempt >= p->max_attempts) return out->verdict = BACKOFF_GIVE_UP_ATTEMPTS;
    if (server_wait_ms > at_least(p->server_wait_cap_ms, 0)) {
        out->delay_ms = server_wait_ms;
        return out->verdict = BACKOFF_GIVE_UP_SERVER_WAIT;
    }

    /* latest: the longest delay that still leaves min_attempt_ms. */
    int64_t latest = INT64_MAX;
    if (deadline_ms >= 0) {
        latest = sat_sub(sat_sub(deadline_ms, now_ms), at_least(p->min_attempt_ms, 1));
        if (latest < 0) return out->verdict = BACKOFF_GIVE_UP_DEADLINE;
    }

    int64_t delay;
    if (server_wait_ms >= 0) {
        if (server_wait_ms > latest) return out->verdict = BACKOFF_GIVE_UP_DEADLINE;
        int64_t jmax = min64(at_least(p->jitter_cap_ms, 0), server_wait_ms / at_least(p->jitter_divisor, 1));
        jmax = min64(jmax, latest - server_wait_ms);
        delay = server_wait_ms + backoff_rand_upto(rng, jmax);
    } else {
        delay = backoff_rand_upto(rng, min64(backoff_ceiling_ms(p, attempt), latest));
    }
    out->delay_ms = delay;
    out->attempt_timeout_ms = backoff_attempt_timeout_ms(now_ms, deadline_ms, delay);
    return out->verdict = BACKOFF_RETRY;
}
