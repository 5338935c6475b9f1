/* libFuzzer target for the RESP request parser (lib/core/resp.c).
 *
 * Input: 2 bytes of seed, then the client's bytes. The seed picks the
 * limits and the schedule of chunk sizes (1..32 bytes, through feed() or
 * prepare()/commit()). Checked properties:
 *  - no crash, leak or UB, whatever the bytes and the split;
 *  - split invariance: the commands and the final verdict (need more, or
 *    the exact error) equal those of parsing the whole input at once;
 *  - round trip: each command, written back with resp_add_bulk_array(),
 *    parses to the same argv.
 *
 * resp.c is included rather than linked: sluice_engine is not built with
 * coverage instrumentation, and libFuzzer needs the parser's edges. The
 * archive's copy of resp.o is then never pulled in. */
#include "resp.c"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A flat record of commands: for each, argc then (len, bytes) per arg. */
typedef struct trace {
    resp_buf b;
    int verdict;
    char msg[160];
} trace;

static void record(trace *t, const resp_command *c) {
    if (resp_buf_append(&t->b, &c->argc, sizeof(c->argc))) abort();
    for (int i = 0; i < c->argc; i++) {
        if (c->argv[i][c->argvlen[i]] != '\0') abort(); /* NUL-terminated */
        if (resp_buf_append(&t->b, &c->argvlen[i], sizeof(size_t))) abort();
        if (resp_buf_append(&t->b, c->argv[i], c->argvlen[i])) abort();
    }
}

/* Writes c back as a multibulk and checks it parses to the same argv. */
static void roundtrip(const resp_command *c, const resp_limits *lim) {
    resp_buf out = {0};
    if (resp_add_bulk_array(&out, c->argv, c->argvlen, (size_t)c->argc)) abort();
    /* Inline arguments are not bound by max_bulk, and the multibulk form is
     * longer than the inline one: size the limits to this command. */
    resp_limits big = *lim;
    big.max_bulk = out.len;
    big.max_buffer = out.len + 1;
    resp_parser *p = resp_parser_new(&big);
    if (!p) abort();
    resp_command d;
    if (resp_parser_feed(p, out.data, out.len) || resp_parser_next(p, &d) != 1) abort();
    if (d.argc != c->argc) abort();
    for (int i = 0; i < c->argc; i++)
        if (d.argvlen[i] != c->argvlen[i] || memcmp(d.argv[i], c->argv[i], c->argvlen[i])) abort();
    if (resp_parser_next(p, &d) != 0 || resp_parser_pending(p) != 0) abort();
    resp_parser_free(p);
    resp_buf_free(&out);
}

static int drain(resp_parser *p, trace *t, const resp_limits *lim) {
    resp_command c;
    int rc;
    while ((rc = resp_parser_next(p, &c)) == 1) {
        if (c.argc < 1 || (size_t)c.argc > lim->max_args) abort();
        record(t, &c);
        if (t->verdict == 0) roundtrip(&c, lim);
    }
    return rc;
}

static void finish(trace *t, resp_parser *p, int rc) {
    t->verdict = rc;
    snprintf(t->msg, sizeof(t->msg), "%s", resp_parser_error(p));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    uint32_t seed = (uint32_t)data[0] << 8 | data[1];
    data += 2;
    size -= 2;

    resp_limits lim;
    resp_limits_init(&lim);
    if (seed & 1) { /* small limits, still far above the input size buffer-wise */
        lim.max_args = 1 + (seed >> 1 & 7);
        lim.max_bulk = 1 + (seed >> 4 & 63);
        lim.max_inline = 1 + (seed >> 10 & 63);
    }

    /* The reference: everything at once. */
    trace whole = {0};
    resp_parser *p = resp_parser_new(&lim);
    if (!p) abort();
    int rc = resp_parser_feed(p, data, size);
    if (rc == 0) rc = drain(p, &whole, &lim);
    finish(&whole, p, rc);
    resp_parser_free(p);

    /* The same bytes in chunks. */
    trace split = {0};
    split.verdict = 1; /* skip round trips the second time */
    p = resp_parser_new(&lim);
    if (!p) abort();
    uint32_t x = seed * 2654435761u + 1;
    size_t off = 0;
    rc = 0;
    while (off < size && rc == 0) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        size_t k = 1 + x % 32;
        if (k > size - off) k = size - off;
        if (x & 0x100) {
            rc = resp_parser_feed(p, data + off, k);
        } else {
            char *buf;
            size_t avail;
            rc = resp_parser_prepare(p, k, &buf, &avail);
            if (rc == 0) {
                if (avail == 0) abort();
                if (k > avail) k = avail;
                memcpy(buf, data + off, k);
                rc = resp_parser_commit(p, k);
            }
        }
        off += k;
        if (rc == 0) rc = drain(p, &split, &lim);
    }
    if (rc == 0) rc = drain(p, &split, &lim);
    finish(&split, p, rc);
    if (rc == 0 && resp_parser_pending(p) > size) abort();
    resp_parser_free(p);

    if (whole.verdict != split.verdict || strcmp(whole.msg, split.msg) != 0) abort();
    if (whole.b.len != split.b.len || (whole.b.len && memcmp(whole.b.data, split.b.data, whole.b.len))) abort();
    resp_buf_free(&whole.b);
    resp_buf_free(&split.b);

    /* A tiny buffer limit must fail cleanly, never overflow. */
    lim.max_buffer = 1 + seed % 64;
    p = resp_parser_new(&lim);
    if (!p) abort();
    trace tiny = {0};
    tiny.verdict = 1;
    rc = 0;
    for (off = 0; off < size && rc == 0; off += 7) {
        size_t k = size - off < 7 ? size - off : 7;
        rc = resp_parser_feed(p, data + off, k);
        if (rc == 0) rc = drain(p, &tiny, &lim);
    }
    resp_parser_free(p);
    resp_buf_free(&tiny.b);
    return 0;
}
