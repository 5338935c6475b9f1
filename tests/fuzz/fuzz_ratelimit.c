/* libFuzzer target: rate-limit headers.
 *
 * The input is a header block, "name:value" per line. It is fed to one
 * accumulator in order and to another in reverse order. Invariants: every
 * value is -1 or non-negative and within its saturation bound; the pause
 * is -1 or within 0..RETRY_AFTER_MAX_MS; both orders give the same answer
 * (unless the policy table overflowed, the documented exception); the
 * value parsers stay in range on the raw input too. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW_MS INT64_C(1700000000000)
#define MAX_LINES 64

typedef struct line {
    const char *name, *value;
    size_t nlen, vlen;
} line;

static void check_ms(int64_t v) {
    if (v < -1 || v > RETRY_AFTER_MAX_MS) abort();
}

static void check_fb(const ratelimit_feedback *fb) {
    for (int d = 0; d < RATELIMIT_DIMS; d++) {
        ratelimit_value v;
        ratelimit_source s = ratelimit_get(fb, (ratelimit_dim)d, &v);
        if (v.limit < -1 || v.limit > RATELIMIT_COUNT_MAX || v.remaining < -1 || v.remaining > RATELIMIT_COUNT_MAX)
            abort();
        check_ms(v.reset_ms);
        if (s == RATELIMIT_SRC_NONE && (v.limit != -1 || v.remaining != -1 || v.reset_ms != -1)) abort();
    }
    bool over;
    int64_t p = ratelimit_pause_ms(fb, &over);
    check_ms(p);
    if (over != (p > fb->retry.cap_ms)) abort();
    if (fb->invalid > fb->recognised) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    check_ms(ratelimit_parse_duration_ms(s, size));
    check_ms(ratelimit_parse_epoch_reset_ms(s, size, NOW_MS));
    int64_t c = ratelimit_parse_count(s, size);
    if (c < -1 || c > RATELIMIT_COUNT_MAX) abort();

    line lines[MAX_LINES];
    size_t n = 0;
    size_t i = 0;
    while (i < size && n < MAX_LINES) {
        size_t e = i;
        while (e < size && s[e] != '\n') e++;
        size_t colon = i;
        while (colon < e && s[colon] != ':') colon++;
        if (colon < e) {
            lines[n].name = s + i;
            lines[n].nlen = colon - i;
            lines[n].value = s + colon + 1;
            lines[n].vlen = e - colon - 1;
            n++;
        }
        i = e + 1;
    }

    ratelimit_feedback a, b;
    ratelimit_init(&a, -1);
    ratelimit_init(&b, 5000);
    for (size_t k = 0; k < n; k++)
        ratelimit_add_header(&a, lines[k].name, lines[k].nlen, lines[k].value, lines[k].vlen, NOW_MS);
    for (size_t k = n; k-- > 0;)
        ratelimit_add_header(&b, lines[k].name, lines[k].nlen, lines[k].value, lines[k].vlen, NOW_MS);
    check_fb(&a);
    check_fb(&b);

    if (a.recognised != b.recognised || a.invalid != b.invalid) abort();
    if (a.retry.delay_ms != b.retry.delay_ms || a.retry.source != b.retry.source) abort();
    if (!a.policies_dropped && !b.policies_dropped) {
        for (int d = 0; d < RATELIMIT_DIMS; d++) {
            ratelimit_value va, vb;
            if (ratelimit_get(&a, (ratelimit_dim)d, &va) != ratelimit_get(&b, (ratelimit_dim)d, &vb)) abort();
            if (memcmp(&va, &vb, sizeof va) != 0) abort();
        }
        if (ratelimit_pause_ms(&a, NULL) != ratelimit_pause_ms(&b, NULL)) abort();
    }
    return 0;
}
