/* libFuzzer target: response classification.
 *
 * Bytes 0-1 choose the status (-50..949), byte 2 the transport flag and
 * x-should-retry value; the rest is the body. Invariants: the class is in
 * range and named; code/type are NUL-terminated within their buffers;
 * quota and ok are never retryable; without x-should-retry the
 * retryability is the class default; overridden is consistent. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const xsr[] = {NULL, "true", "false", " TRUE ", "maybe", ""};
    if (size < 3) return 0;
    classify_input in;
    memset(&in, 0, sizeof in);
    in.status = (int)(((unsigned)data[0] << 8 | data[1]) % 1000) - 50;
    in.transport = (classify_transport)(data[2] % 3 == 0 ? (data[2] / 3) % 3 : 0);
    const char *sr = xsr[(data[2] >> 4) % 6];
    in.should_retry = sr;
    in.should_retry_len = sr ? strlen(sr) : 0;
    in.body = (const char *)data + 3;
    in.body_len = size - 3;

    classify_result out;
    classify_class c = classify_response(&in, &out);
    if (c != out.cls || (int)c < 0 || (int)c >= CLASSIFY__COUNT) abort();
    if (strcmp(classify_name(c), "unknown") == 0) abort();
    if (memchr(out.code, '\0', sizeof out.code) == NULL || memchr(out.type, '\0', sizeof out.type) == NULL) abort();
    if ((c == CLASSIFY_QUOTA_EXHAUSTED || c == CLASSIFY_OK) && out.retryable) abort();
    if (out.overridden != (out.retryable != classify_retryable(c))) abort();
    if (sr == NULL && out.overridden) abort();
    if (in.transport == CLASSIFY_NET_TIMEOUT && c != CLASSIFY_TIMEOUT) abort();
    if (in.status >= 200 && in.status < 300 && in.transport == CLASSIFY_NET_NONE && c != CLASSIFY_OK) abort();
    return 0;
}
