/* libFuzzer target for libsluice's RESP2 reply parser (lib/core/rreply.c).
 *
 * Input: 1 byte of seed (the chunk size schedule), then the bytes a
 * sluiced connection might deliver. Checked properties:
 *  - no crash, leak or UB, whatever the bytes;
 *  - split invariance: the replies and the final verdict found by parsing
 *    the bytes as they arrive in chunks (re-parsing the unconsumed tail
 *    each time, as backend_daemon.c does) equal those of parsing it whole;
 *  - a partial reply never consumes anything;
 *  - round trip: each reply, written back as RESP2, parses to a tree that
 *    writes back to the same bytes.
 *
 * rreply.c is included rather than linked, as fuzz_resp.c does, so that
 * libFuzzer sees its edges. */
#include "../../lib/core/rreply.c"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct out {
    char *b;
    size_t n, cap;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n) cap *= 2;
        o->b = realloc(o->b, cap);
        if (!o->b) abort();
        o->cap = cap;
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void write_reply(out *o, const rreply *r) {
    char head[64];
    int n;
    switch (r->type) {
    case RREPLY_STATUS:
    case RREPLY_ERROR:
        put(o, r->type == RREPLY_STATUS ? "+" : "-", 1);
        put(o, r->str, r->len);
        put(o, "\r\n", 2);
        break;
    case RREPLY_INTEGER:
        n = snprintf(head, sizeof(head), ":%lld\r\n", r->integer);
        put(o, head, (size_t)n);
        break;
    case RREPLY_BULK:
        n = snprintf(head, sizeof(head), "$%zu\r\n", r->len);
        put(o, head, (size_t)n);
        put(o, r->str, r->len);
        put(o, "\r\n", 2);
        break;
    case RREPLY_NIL: put(o, "$-1\r\n", 5); break;
    case RREPLY_ARRAY:
        n = snprintf(head, sizeof(head), "*%zu\r\n", r->elements);
        put(o, head, (size_t)n);
        for (size_t i = 0; i < r->elements; i++) write_reply(o, r->element[i]);
        break;
    }
}

/* Parses everything available: the replies written back into trace, and
 * the last verdict (0 need more, -1 malformed). */
static int parse_stream(const uint8_t *data, size_t size, unsigned seed, out *trace) {
    size_t fed = 0, start = 0;
    int verdict = 0;
    while (fed < size) {
        size_t chunk = seed ? 1 + (seed + fed) % 32 : size;
        fed = fed + chunk > size ? size : fed + chunk;
        for (;;) {
            rreply *r = NULL;
            size_t used = 0;
            int rc = rreply_parse((const char *)data + start, fed - start, &r, &used, NULL, 0);
            if (rc == 0) {
                if (used != 0 || r) abort();
                verdict = 0;
                break;
            }
            if (rc < 0) {
                if (r) abort();
                return -1;
            }
            if (used == 0 || used > fed - start) abort();
            write_reply(trace, r);
            put(trace, "|", 1);
            /* Round trip. */
            out again = {0};
            write_reply(&again, r);
            rreply *r2 = NULL;
            size_t used2 = 0;
            if (rreply_parse(again.b, again.n, &r2, &used2, NULL, 0) != 1 || used2 != again.n) abort();
            out twice = {0};
            write_reply(&twice, r2);
            if (twice.n != again.n || memcmp(twice.b, again.b, again.n) != 0) abort();
            free(again.b);
            free(twice.b);
            rreply_free(r2);
            rreply_free(r);
            start += used;
            verdict = 1;
        }
    }
    return verdict;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned seed = data[0];
    data++;
    size--;
    out whole = {0}, split = {0};
    int v1 = parse_stream(data, size, 0, &whole);
    int v2 = parse_stream(data, size, seed | 1, &split);
    /* A malformed input may be detected at a different reply boundary
     * only if the earlier replies differ, which they must not. */
    if (v1 == -1 || v2 == -1) {
        if (v1 != v2) abort();
    }
    if (whole.n != split.n || (whole.n && memcmp(whole.b, split.b, whole.n) != 0)) abort();
    free(whole.b);
    free(split.b);
    return 0;
}
