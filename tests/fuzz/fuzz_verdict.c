/* libFuzzer target for libsluice's response verdict (lib/verdict.c,
 * lib/usage.c): the class, pause and usage of an arbitrary response, and
 * the backoff that follows.
 *
 * Input: 2 bytes of status, 1 byte of flags, 2 bytes of deadline budget,
 * then header lines ("name: value\n") up to a blank line, then the body.
 * Checked properties:
 *  - no crash, leak or UB (jansson parses the body twice: classify, usage);
 *  - pause_ms is -1 or within [0, RETRY_AFTER_MAX_MS]; tokens >= -1;
 *  - the outcome follows the class (ok / throttled / failed);
 *  - sl_backoff_ms() gives a delay >= the server's pause (when it is
 *    under the cap) that, with min_attempt_ms, fits the deadline; or one
 *    of SL_EFATAL, SL_EATTEMPTS, SL_EDEADLINE.
 *
 * The sources are included rather than linked so libFuzzer sees them. */
#define _POSIX_C_SOURCE 200809L
#include "../../lib/usage.c"
#include "../../lib/verdict.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_H 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 5) return 0;
    int status = (data[0] << 8 | data[1]) % 700;
    int flags = data[2];
    int64_t budget = data[3] << 8 | data[4];
    data += 5;
    size -= 5;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    sl_header h[MAX_H];
    size_t nh = 0;
    char *p = text, *end = text + size;
    while (p < end && nh < MAX_H) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        *nl = '\0';
        if (p == nl) {
            p = nl + 1;
            break;
        }
        char *colon = strchr(p, ':');
        if (colon) {
            *colon = '\0';
            h[nh].name = p;
            h[nh].value = colon + 1;
            nh++;
        }
        p = nl + 1;
    }
    const char *body = p;
    size_t blen = (size_t)(end - p);
    sl_verdict v;
    verdict_compute(status, flags & 1, body, blen, h, nh, (flags & 2) ? 5000 : -1, &v);
    if (v.pause_ms < -1 || v.pause_ms > RETRY_AFTER_MAX_MS) abort();
    if (v.tokens < -1) abort();
    if (v.cls < 0 || v.cls >= SL_CLASS__COUNT) abort();
    if (v.cls == SL_CLASS_OK && v.outcome != SL_OUTCOME_OK) abort();
    if (v.cls == SL_CLASS_RATE_LIMITED && v.outcome != SL_OUTCOME_THROTTLED) abort();
    if (v.cls == SL_CLASS_QUOTA_EXHAUSTED && v.outcome != SL_OUTCOME_QUOTA) abort();
    if (v.cls != SL_CLASS_OK && v.cls != SL_CLASS_RATE_LIMITED && v.cls != SL_CLASS_QUOTA_EXHAUSTED &&
        v.outcome != SL_OUTCOME_FAILED)
        abort();
    if (sl_usage_tokens(body, blen) < -1) abort();

    sl_call_opts o;
    sl_call_opts_init(&o);
    o.deployment = "d";
    o.retry_after_cap_ms = (flags & 2) ? 5000 : 0;
    o.min_attempt_ms = 1 + (flags >> 4);
    int64_t now = 1000000;
    if (flags & 4) o.deadline_ms = now + budget;
    uint64_t rng = (uint64_t)flags * 7919u;
    long long d = sl_backoff_ms(&o, (flags >> 3) & 7, &v, now, &rng);
    if (d >= 0) {
        if (!v.retryable) abort();
        if (o.deadline_ms && now + d + o.min_attempt_ms > o.deadline_ms) abort();
        if (v.pause_ms >= 0 && d < v.pause_ms) abort();
    } else if (d != SL_EFATAL && d != SL_EATTEMPTS && d != SL_EDEADLINE) {
        abort();
    }
    free(text);
    return 0;
}
