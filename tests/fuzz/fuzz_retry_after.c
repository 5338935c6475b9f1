/* libFuzzer target: Retry-After values and the date parsers behind them.
 *
 * The first byte picks "now" (fixed points, so RFC 850 years are judged
 * against several eras); the rest is a header value. Invariants: every
 * delay is -1 or within 0..RETRY_AFTER_MAX_MS; a parsed HTTP-date formats
 * back and reparses to the same instant; an RFC 3339 time is consistent;
 * the accumulator agrees with the parsers and its cap flag. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "httpdate.h"
#include "retry_after.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_delay(int64_t d) {
    if (d < -1 || d > RETRY_AFTER_MAX_MS) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int64_t nows[] = {
        INT64_C(1700000000000), 0,         INT64_C(-1), INT64_C(4102444800000), /* 2100 */
        INT64_C(3500000000000), INT64_MIN, INT64_MAX,   INT64_C(-62167219200000),
    };
    if (size < 1) return 0;
    int64_t now_ms = nows[data[0] % (sizeof nows / sizeof nows[0])];
    const char *v = (const char *)data + 1;
    size_t n = size - 1;

    int64_t d = retry_after_parse(v, n, now_ms);
    check_delay(d);
    int64_t dms = retry_after_parse_ms(v, n);
    check_delay(dms);

    int64_t now_s = now_ms / 1000;
    int64_t t;
    if (httpdate_parse(v, n, now_s, &t) == 0) {
        char buf[HTTPDATE_BUFSZ];
        int64_t back;
        if (httpdate_format(t, buf, sizeof buf) != HTTPDATE_IMF_LEN) abort();
        if (httpdate_parse(buf, HTTPDATE_IMF_LEN, now_s, &back) != 0 || back != t) abort();
    }
    int64_t ms;
    if (httpdate_parse_rfc3339(v, n, &ms) == 0) {
        /* years 0000..9999 with offsets and a leap second */
        if (ms < INT64_C(-62167219200000) - 86400000 || ms > INT64_C(253402300800000) + 86400000) abort();
    }

    retry_after ra;
    retry_after_init(&ra, (int64_t)(data[0] >> 3) * 1000);
    static const char *const names[] = {"retry-after", "Retry-After-Ms", "x-ms-retry-after-ms", "x"};
    const char *name = names[data[0] & 3];
    bool rec = retry_after_add_header(&ra, name, strlen(name), v, n, now_ms);
    if (rec != ((data[0] & 3) != 3)) abort();
    check_delay(ra.delay_ms);
    if (ra.delay_ms >= 0 && ra.over_cap != (ra.delay_ms > ra.cap_ms)) abort();
    if (ra.delay_ms < 0 && (ra.over_cap || ra.source != RETRY_AFTER_SRC_NONE)) abort();
    if ((data[0] & 3) == 0 && ra.delay_ms != d) abort();
    if ((data[0] & 3) == 1 && ra.delay_ms != dms) abort();
    return 0;
}
