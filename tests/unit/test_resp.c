/* Unit tests for lib/core/resp: the RESP2 request parser (every split of the
 * input, hostile headers, limits) and the reply writer (byte-exact), in
 * RESP2 and RESP3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "resp.h"

/* ---- helpers ---- */

/* Appends a readable rendering of a command to out: arguments separated by
 * '|', bytes outside printable ASCII (and '|', '\\') as \xHH, a newline
 * after each command. */
static void render(char *out, size_t cap, const resp_command *c) {
    size_t n = strlen(out);
    for (int i = 0; i < c->argc; i++) {
        assert_non_null(c->argv[i]);
        assert_int_equal(c->argv[i][c->argvlen[i]], '\0'); /* NUL-terminated */
        for (size_t j = 0; j < c->argvlen[i]; j++) {
            unsigned char u = (unsigned char)c->argv[i][j];
            int w = (u >= 0x20 && u < 0x7f && u != '|' && u != '\\') ? snprintf(out + n, cap - n, "%c", u)
                                                                     : snprintf(out + n, cap - n, "\\x%02x", u);
            n += (size_t)w;
            assert_true(n < cap);
        }
        if (i + 1 < c->argc) out[n++] = '|';
    }
    out[n++] = '\n';
    out[n] = '\0';
    assert_true(n < cap);
}

/* Drains every complete command into out; returns the last next() code. */
static int drain(resp_parser *p, char *out, size_t cap) {
    resp_command c;
    int rc;
    while ((rc = resp_parser_next(p, &c)) == 1) render(out, cap, &c);
    return rc;
}

/* A stream mixing every form the parser accepts. */
static const char stream[] = "*1\r\n$4\r\nPING\r\n"
                             "*3\r\n$7\r\nACQUIRE\r\n$6\r\ngpt-4o\r\n$0\r\n\r\n"
                             "*0\r\n"                                /* empty: skipped */
                             "*-1\r\n"                               /* null: skipped */
                             "PING\r\n"                              /* inline */
                             "\r\n"                                  /* blank line: skipped */
                             "  SETTLE   g1  TOKENS\t12 \n"          /* inline, LF only, extra spaces */
                             "SET \"a b\\x41\\n\" 'it\\'s' \"\"\r\n" /* inline quoting */
                             "*2\r\n$3\r\nGET\r\n$5\r\na\0\r\nb\r\n" /* binary-safe bulk with NUL, CR, LF */
                             "*1\r\n$4\r\nQUIT\r\n";
static const char stream_expect[] = "PING\n"
                                    "ACQUIRE|gpt-4o|\n"
                                    "PING\n"
                                    "SETTLE|g1|TOKENS|12\n"
                                    "SET|a bA\\x0a|it's|\n"
                                    "GET|a\\x00\\x0d\\x0ab\n"
                                    "QUIT\n";
#define STREAM_LEN (sizeof(stream) - 1)

static resp_parser *new_parser(void) {
    resp_parser *p = resp_parser_new(NULL);
    assert_non_null(p);
    return p;
}

/* ---- parser: splits ---- */

static void test_whole_stream(void **state) {
    (void)state;
    resp_parser *p = new_parser();
    char out[1024] = "";
    assert_int_equal(resp_parser_feed(p, stream, STREAM_LEN), 0);
    assert_int_equal(drain(p, out, sizeof(out)), 0);
    assert_string_equal(out, stream_expect);
    assert_int_equal(resp_parser_pending(p), 0);
    resp_parser_free(p);
}

/* Two chunks, split at every position, parsing after each chunk. */
static void test_every_split(void **state) {
    (void)state;
    for (size_t cut = 0; cut <= STREAM_LEN; cut++) {
        resp_parser *p = new_parser();
        char out[1024] = "";
        assert_int_equal(resp_parser_feed(p, stream, cut), 0);
        assert_int_equal(drain(p, out, sizeof(out)), 0);
        assert_int_equal(resp_parser_feed(p, stream + cut, STREAM_LEN - cut), 0);
        assert_int_equal(drain(p, out, sizeof(out)), 0);
        if (strcmp(out, stream_expect) != 0) fail_msg("split at %zu: got\n%s", cut, out);
        resp_parser_free(p);
    }
}

/* Three chunks at every pair of positions. */
static void test_every_double_split(void **state) {
    (void)state;
    for (size_t a = 0; a <= STREAM_LEN; a++) {
        for (size_t b = a; b <= STREAM_LEN; b++) {
            resp_parser *p = new_parser();
            char out[1024] = "";
            assert_int_equal(resp_parser_feed(p, stream, a), 0);
            assert_int_equal(drain(p, out, sizeof(out)), 0);
            assert_int_equal(resp_parser_feed(p, stream + a, b - a), 0);
            assert_int_equal(drain(p, out, sizeof(out)), 0);
            assert_int_equal(resp_parser_feed(p, stream + b, STREAM_LEN - b), 0);
            assert_int_equal(drain(p, out, sizeof(out)), 0);
            if (strcmp(out, stream_expect) != 0) fail_msg("split at %zu,%zu: got\n%s", a, b, out);
            resp_parser_free(p);
        }
    }
}

/* One byte at a time; pending() says when a command is half-written. */
static void test_byte_at_a_time(void **state) {
    (void)state;
    resp_parser *p = new_parser();
    char out[1024] = "";
    for (size_t i = 0; i < STREAM_LEN; i++) {
        assert_int_equal(resp_parser_feed(p, stream + i, 1), 0);
        assert_int_equal(drain(p, out, sizeof(out)), 0);
    }
    assert_string_equal(out, stream_expect);
    assert_int_equal(resp_parser_pending(p), 0);
    resp_parser_free(p);
}

/* The zero-copy path (libuv alloc/read) with tiny reads. */
static void test_prepare_commit(void **state) {
    (void)state;
    for (size_t chunk = 1; chunk <= 7; chunk++) {
        resp_parser *p = new_parser();
        char out[1024] = "";
        size_t off = 0;
        while (off < STREAM_LEN) {
            char *buf;
            size_t avail;
            assert_int_equal(resp_parser_prepare(p, chunk, &buf, &avail), 0);
            assert_true(avail >= 1);
            size_t n = STREAM_LEN - off < chunk ? STREAM_LEN - off : chunk;
            if (n > avail) n = avail;
            memcpy(buf, stream + off, n);
            off += n;
            assert_int_equal(resp_parser_commit(p, n), 0);
            assert_int_equal(drain(p, out, sizeof(out)), 0);
        }
        assert_string_equal(out, stream_expect);
        resp_parser_free(p);
    }
}

/* A command stays valid until the next call, and pending() counts only the
 * bytes after it. */
static void test_pending_and_lifetime(void **state) {
    (void)state;
    resp_parser *p = new_parser();
    resp_command c;
    const char in[] = "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n*1\r\n$4\r\nPI";
    assert_int_equal(resp_parser_feed(p, in, sizeof(in) - 1), 0);
    assert_int_equal(resp_parser_next(p, &c), 1);
    assert_int_equal(c.argc, 2);
    assert_memory_equal(c.argv[0], "ECHO", 5);
    assert_memory_equal(c.argv[1], "hi", 3);
    assert_int_equal(c.argvlen[1], 2);
    assert_int_equal(resp_parser_pending(p), strlen("*1\r\n$4\r\nPI"));
    assert_int_equal(resp_parser_next(p, &c), 0);
    assert_int_equal(resp_parser_pending(p), strlen("*1\r\n$4\r\nPI"));
    assert_int_equal(resp_parser_feed(p, "NG\r\n", 4), 0);
    assert_int_equal(resp_parser_next(p, &c), 1);
    assert_int_equal(c.argc, 1);
    assert_string_equal(c.argv[0], "PING");
    assert_int_equal(resp_parser_pending(p), 0);
    assert_int_equal(resp_parser_next(p, &c), 0);
    assert_string_equal(resp_parser_error(p), "");
    resp_parser_free(p);
}

/* A 1 MiB argument (the default limit) passes; one more byte does not. */
static void test_max_bulk_exact(void **state) {
    (void)state;
    size_t n = RESP_DEFAULT_MAX_BULK;
    char *big = malloc(n + 64);
    assert_non_null(big);
    int h = snprintf(big, 64, "*1\r\n$%zu\r\n", n);
    memset(big + h, 'x', n);
    memcpy(big + h + n, "\r\n", 2);
    resp_parser *p = new_parser();
    resp_command c = {0};
    /* In 64 KiB reads, as libuv would deliver it. */
    size_t total = (size_t)h + n + 2, off = 0;
    while (off < total) {
        size_t k = total - off < 65536 ? total - off : 65536;
        assert_int_equal(resp_parser_feed(p, big + off, k), 0);
        off += k;
        int rc = resp_parser_next(p, &c);
        assert_int_equal(rc, off == total ? 1 : 0);
    }
    assert_int_equal(c.argc, 1);
    assert_int_equal(c.argvlen[0], n);
    assert_int_equal(c.argv[0][n - 1], 'x');
    resp_parser_free(p);

    p = new_parser();
    h = snprintf(big, 64, "*1\r\n$%zu\r\n", n + 1);
    assert_int_equal(resp_parser_feed(p, big, (size_t)h), 0);
    assert_int_equal(resp_parser_next(p, &c), RESP_ETOOBIG);
    resp_parser_free(p);
    free(big);
}

/* ---- parser: hostile input ---- */

typedef struct bad_case {
    const char *input;
    size_t len; /* 0: strlen */
    int code;
    const char *msg; /* exact message */
} bad_case;

static const bad_case bad_cases[] = {
    {"*999999999\r\n", 0, RESP_ETOOBIG, "Protocol error: invalid multibulk length 999999999 (limit 1024)"},
    {"*1025\r\n", 0, RESP_ETOOBIG, "Protocol error: invalid multibulk length 1025 (limit 1024)"},
    {"*1\r\n$536870912\r\n", 0, RESP_ETOOBIG, "Protocol error: invalid bulk length 536870912 (limit 1048576)"},
    {"*99999999999999999999\r\n", 0, RESP_EPROTO, "Protocol error: invalid multibulk length"},
    {"*abc\r\n", 0, RESP_EPROTO, "Protocol error: invalid multibulk length"},
    {"*\r\n", 0, RESP_EPROTO, "Protocol error: invalid multibulk length"},
    {"*01\r\n", 0, RESP_EPROTO, "Protocol error: invalid multibulk length"},
    {"* 1\r\n", 0, RESP_EPROTO, "Protocol error: invalid multibulk length"},
    {"*1\rX", 0, RESP_EPROTO, "Protocol error: invalid multibulk length"},
    {"*1\r\nx", 0, RESP_EPROTO, "Protocol error: expected '$', got 'x'"},
    {"*1\r\n\0", 5, RESP_EPROTO, "Protocol error: expected '$', got '\\x00'"},
    {"*2\r\n$1\r\na\r\n:1\r\n", 0, RESP_EPROTO, "Protocol error: expected '$', got ':'"},
    {"*1\r\n$-1\r\n", 0, RESP_EPROTO, "Protocol error: invalid bulk length"},
    {"*1\r\n$abc\r\n", 0, RESP_EPROTO, "Protocol error: invalid bulk length"},
    {"*1\r\n$1x\r\n", 0, RESP_EPROTO, "Protocol error: invalid bulk length"},
    {"*1\r\n$3\r\nfooXY", 0, RESP_EPROTO, "Protocol error: expected CRLF after bulk data"},
    {"*111111111111111111111111111111111111", 0, RESP_EPROTO, "Protocol error: too big mbulk count string"},
    {"*1\r\n$111111111111111111111111111111111", 0, RESP_EPROTO, "Protocol error: too big bulk count string"},
    {"SET \"abc\r\n", 0, RESP_EPROTO, "Protocol error: unbalanced quotes in request"},
    {"SET \"abc\"def\r\n", 0, RESP_EPROTO, "Protocol error: unbalanced quotes in request"},
    {"SET 'abc\r\n", 0, RESP_EPROTO, "Protocol error: unbalanced quotes in request"},
};

static void test_bad_inputs(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case *bc = &bad_cases[i];
        size_t len = bc->len ? bc->len : strlen(bc->input);
        /* Whole and byte by byte: the verdict must not depend on the split,
         * and it must come as soon as the offending header is complete. */
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            resp_parser *p = new_parser();
            resp_command c;
            int rc = 0;
            for (size_t off = 0; off < len && rc == 0;) {
                size_t k = bytewise ? 1 : len;
                assert_int_equal(resp_parser_feed(p, bc->input + off, k), 0);
                off += k;
                while ((rc = resp_parser_next(p, &c)) == 1) {}
            }
            if (rc != bc->code || strcmp(resp_parser_error(p), bc->msg) != 0)
                fail_msg("case %zu (%s): rc %d msg \"%s\"", i, bytewise ? "bytewise" : "whole", rc,
                         resp_parser_error(p));
            /* Sticky. */
            assert_int_equal(resp_parser_next(p, &c), bc->code);
            assert_int_equal(resp_parser_feed(p, "PING\r\n", 6), bc->code);
            char *b;
            size_t avail;
            assert_int_equal(resp_parser_prepare(p, 16, &b, &avail), bc->code);
            resp_parser_free(p);
        }
    }
}

/* A half-written command just waits. */
static void test_half_command_waits(void **state) {
    (void)state;
    const char *partials[] = {"*", "*3\r", "*3\r\n$7\r\nACQ", "*1\r\n$4\r\nPING\r", "PIN", "SET \"a"};
    for (size_t i = 0; i < sizeof(partials) / sizeof(partials[0]); i++) {
        resp_parser *p = new_parser();
        resp_command c;
        assert_int_equal(resp_parser_feed(p, partials[i], strlen(partials[i])), 0);
        assert_int_equal(resp_parser_next(p, &c), 0);
        assert_int_equal(resp_parser_pending(p), strlen(partials[i]));
        resp_parser_free(p);
    }
}

static void test_limits(void **state) {
    (void)state;
    resp_limits lim;
    resp_limits_init(&lim);
    lim.max_args = 3;
    lim.max_bulk = 8;
    lim.max_inline = 16;
    lim.max_buffer = 64;
    resp_command c;

    /* Exactly max_args and max_bulk pass. */
    resp_parser *p = resp_parser_new(&lim);
    const char ok[] = "*3\r\n$1\r\na\r\n$8\r\n12345678\r\n$0\r\n\r\nA B C\r\n";
    assert_int_equal(resp_parser_feed(p, ok, sizeof(ok) - 1), 0);
    assert_int_equal(resp_parser_next(p, &c), 1);
    assert_int_equal(c.argc, 3);
    assert_int_equal(resp_parser_next(p, &c), 1);
    assert_int_equal(c.argc, 3);
    assert_int_equal(resp_parser_next(p, &c), 0);
    resp_parser_free(p);

    struct {
        const char *in;
        const char *msg;
    } over[] = {
        {"*4\r\n", "Protocol error: invalid multibulk length 4 (limit 3)"},
        {"*1\r\n$9\r\n", "Protocol error: invalid bulk length 9 (limit 8)"},
        {"A B C D\r\n", "Protocol error: too many arguments in inline request (limit 3)"},
        {"0123456789abcdefg", "Protocol error: too big inline request"},
        {"0123456789abcdefg\r\n", "Protocol error: too big inline request"},
    };
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        p = resp_parser_new(&lim);
        assert_int_equal(resp_parser_feed(p, over[i].in, strlen(over[i].in)), 0);
        assert_int_equal(resp_parser_next(p, &c), RESP_ETOOBIG);
        assert_string_equal(resp_parser_error(p), over[i].msg);
        resp_parser_free(p);
    }

    /* A bulk that cannot fit in the buffer limit is refused at its header. */
    lim.max_bulk = 1000;
    p = resp_parser_new(&lim);
    assert_int_equal(resp_parser_feed(p, "*1\r\n$60\r\n", 9), 0);
    assert_int_equal(resp_parser_next(p, &c), RESP_ETOOBIG);
    assert_string_equal(resp_parser_error(p), "Protocol error: invalid bulk length 60 (request buffer limit 64)");
    resp_parser_free(p);

    /* More unparsed bytes than max_buffer: feed refuses. */
    p = resp_parser_new(&lim);
    char junk[65];
    memset(junk, '*', sizeof(junk));
    assert_int_equal(resp_parser_feed(p, junk, 64), 0);
    assert_int_equal(resp_parser_feed(p, junk, 1), RESP_ETOOBIG);
    assert_string_equal(resp_parser_error(p), "Protocol error: request buffer exceeds the limit of 64 bytes");
    resp_parser_free(p);

    /* And so does commit, prepare never offering more than limit + 1. */
    p = resp_parser_new(&lim);
    char *b;
    size_t avail;
    assert_int_equal(resp_parser_prepare(p, 1000, &b, &avail), 0);
    assert_int_equal(avail, 65);
    memset(b, 'x', avail);
    assert_int_equal(resp_parser_commit(p, avail), RESP_ETOOBIG);
    resp_parser_free(p);

    /* Many pipelined commands larger in total than max_buffer are fine
     * when parsed as they arrive. */
    p = resp_parser_new(&lim);
    int got = 0;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(resp_parser_feed(p, "*1\r\n$4\r\nPING\r\n", 14), 0);
        while (resp_parser_next(p, &c) == 1) got++;
    }
    assert_int_equal(got, 1000);
    resp_parser_free(p);
}

static void test_free_null(void **state) {
    (void)state;
    resp_parser_free(NULL);
    resp_buf_free(NULL);
}

/* ---- writer ---- */

#define ASSERT_BUF(b, lit)                                                                                             \
    do {                                                                                                               \
        assert_int_equal((b)->len, sizeof(lit) - 1);                                                                   \
        assert_memory_equal((b)->data, lit, sizeof(lit) - 1);                                                          \
    } while (0)

static void test_writer_scalars(void **state) {
    (void)state;
    resp_buf b;
    resp_buf_init(&b);
    assert_int_equal(resp_add_simple(&b, "OK"), 0);
    assert_int_equal(resp_add_simple(&b, "a\r\nb"), 0);
    assert_int_equal(resp_add_integer(&b, 0), 0);
    assert_int_equal(resp_add_integer(&b, -42), 0);
    assert_int_equal(resp_add_integer(&b, 9223372036854775807LL), 0);
    assert_int_equal(resp_add_integer(&b, -9223372036854775807LL - 1), 0);
    assert_int_equal(resp_add_bulk(&b, "a\0b", 3), 0);
    assert_int_equal(resp_add_bulk(&b, NULL, 0), 0);
    assert_int_equal(resp_add_bulk_str(&b, "hello"), 0);
    assert_int_equal(resp_add_bulk_str(&b, NULL), 0);
    assert_int_equal(resp_add_null(&b), 0);
    assert_int_equal(resp_add_array(&b, 0), 0);
    assert_int_equal(resp_add_array(&b, 12), 0);
    assert_int_equal(resp_add_null_array(&b), 0);
    assert_int_equal(resp_add_bulkf(&b, "%s=%d", "x", 10), 0);
    assert_int_equal(resp_add_bulkf(&b, "%s", ""), 0);
    ASSERT_BUF(&b, "+OK\r\n"
                   "+a  b\r\n"
                   ":0\r\n"
                   ":-42\r\n"
                   ":9223372036854775807\r\n"
                   ":-9223372036854775808\r\n"
                   "$3\r\na\0b\r\n"
                   "$0\r\n\r\n"
                   "$5\r\nhello\r\n"
                   "$-1\r\n"
                   "$-1\r\n"
                   "*0\r\n"
                   "*12\r\n"
                   "*-1\r\n"
                   "$4\r\nx=10\r\n"
                   "$0\r\n\r\n");
    resp_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
}

static void test_writer_errors(void **state) {
    (void)state;
    resp_buf b = {0};
    assert_int_equal(resp_add_error(&b, "unknown command 'FOO'"), 0);
    assert_int_equal(resp_add_error(&b, "-SHED 1500 queue full"), 0);
    assert_int_equal(resp_add_error(&b, "bad\r\nframe\n"), 0);
    assert_int_equal(resp_add_error(&b, ""), 0);
    assert_int_equal(resp_add_errorf(&b, "unknown deployment '%s'", "gpt-5"), 0);
    assert_int_equal(resp_add_errorf(&b, "-%s %d", "SHED", 7), 0);
    ASSERT_BUF(&b, "-ERR unknown command 'FOO'\r\n"
                   "-SHED 1500 queue full\r\n"
                   "-ERR bad  frame \r\n"
                   "-ERR \r\n"
                   "-ERR unknown deployment 'gpt-5'\r\n"
                   "-SHED 7\r\n");
    resp_buf_reset(&b);
    assert_int_equal(b.len, 0);

    /* A message longer than the formatting fast path. */
    char longmsg[1000];
    memset(longmsg, 'm', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    assert_int_equal(resp_add_errorf(&b, "%s\n", longmsg), 0);
    assert_int_equal(b.len, 5 + 999 + 1 + 2);
    assert_memory_equal(b.data, "-ERR mmm", 8);
    assert_memory_equal(b.data + b.len - 3, " \r\n", 3);
    resp_buf_free(&b);
}

static void test_writer_arrays(void **state) {
    (void)state;
    resp_buf b = {0};
    const char *items[] = {"grant-1", NULL, "", "x"};
    assert_int_equal(resp_add_bulk_array(&b, items, NULL, 4), 0);
    const size_t lens[] = {2, 0, 0, 1};
    const char *bin[] = {"a\0", NULL, "ignored", "y"};
    assert_int_equal(resp_add_bulk_array(&b, bin, lens, 4), 0);
    assert_int_equal(resp_add_bulk_array(&b, NULL, NULL, 0), 0);
    ASSERT_BUF(&b, "*4\r\n$7\r\ngrant-1\r\n$-1\r\n$0\r\n\r\n$1\r\nx\r\n"
                   "*4\r\n$2\r\na\0\r\n$-1\r\n$0\r\n\r\n$1\r\ny\r\n"
                   "*0\r\n");
    resp_buf_free(&b);
}

static void test_writer_consume_detach(void **state) {
    (void)state;
    resp_buf b = {0};
    size_t n = 99;
    assert_null(resp_buf_detach(&b, &n));
    assert_int_equal(n, 0);
    assert_int_equal(resp_add_simple(&b, "OK"), 0);
    assert_int_equal(resp_add_integer(&b, 5), 0);
    resp_buf_consume(&b, 2);
    ASSERT_BUF(&b, "K\r\n:5\r\n");
    assert_int_equal(resp_buf_append(&b, "xy", 2), 0);
    char *d = resp_buf_detach(&b, &n);
    assert_non_null(d);
    assert_int_equal(n, 9);
    assert_memory_equal(d, "K\r\n:5\r\nxy", 9);
    free(d);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    resp_buf_consume(&b, 10);
    assert_int_equal(b.len, 0);
    /* Growth across many replies keeps earlier bytes. */
    for (int i = 0; i < 10000; i++) assert_int_equal(resp_add_integer(&b, i), 0);
    assert_memory_equal(b.data, ":0\r\n:1\r\n", 8);
    assert_memory_equal(b.data + b.len - 7, ":9999\r\n", 7);
    resp_buf_free(&b);
}

/* ---- writer: RESP3 and the RESP2 forms of its kinds ---- */

/* The same replies written in each protocol: the caller says what a reply
 * is, the buffer's proto decides its bytes. */
static void write_kinds(resp_buf *b) {
    assert_int_equal(resp_add_map(b, 2), 0);
    assert_int_equal(resp_add_bulk_str(b, "proto"), 0);
    assert_int_equal(resp_add_integer(b, 3), 0);
    assert_int_equal(resp_add_bulk_str(b, "modules"), 0);
    assert_int_equal(resp_add_array(b, 0), 0);
    assert_int_equal(resp_add_set(b, 2), 0);
    assert_int_equal(resp_add_simple(b, "fast"), 0);
    assert_int_equal(resp_add_simple(b, "connection"), 0);
    assert_int_equal(resp_add_null(b), 0);
    assert_int_equal(resp_add_bulk_str(b, NULL), 0);
    assert_int_equal(resp_add_null_array(b), 0);
    assert_int_equal(resp_add_verbatim(b, "txt", "# Server\r\nx:1\r\n", 15), 0);
    assert_int_equal(resp_add_verbatim(b, "txt", NULL, 0), 0);
    const char *items[] = {"a", NULL};
    assert_int_equal(resp_add_bulk_array(b, items, NULL, 2), 0);
    assert_int_equal(resp_add_map(b, 0), 0);
}

static void test_writer_resp2_forms(void **state) {
    (void)state;
    resp_buf b = {0};
    write_kinds(&b); /* proto 0, the zero value: RESP2 */
    const char expect[] = "*4\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"
                          "*2\r\n+fast\r\n+connection\r\n"
                          "$-1\r\n"
                          "$-1\r\n"
                          "*-1\r\n"
                          "$15\r\n# Server\r\nx:1\r\n\r\n"
                          "$0\r\n\r\n"
                          "*2\r\n$1\r\na\r\n$-1\r\n"
                          "*0\r\n";
    ASSERT_BUF(&b, expect);
    resp_buf_reset(&b);
    b.proto = RESP_PROTO_2;
    write_kinds(&b);
    ASSERT_BUF(&b, expect);
    resp_buf_free(&b);
}

static void test_writer_resp3_forms(void **state) {
    (void)state;
    resp_buf b = {0};
    b.proto = RESP_PROTO_3;
    write_kinds(&b);
    ASSERT_BUF(&b, "%2\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"
                   "~2\r\n+fast\r\n+connection\r\n"
                   "_\r\n"
                   "_\r\n"
                   "_\r\n"
                   "=19\r\ntxt:# Server\r\nx:1\r\n\r\n"
                   "=4\r\ntxt:\r\n"
                   "*2\r\n$1\r\na\r\n_\r\n"
                   "%0\r\n");
    /* What RESP2 and RESP3 share is byte-identical. */
    resp_buf_reset(&b);
    assert_int_equal(resp_add_simple(&b, "OK"), 0);
    assert_int_equal(resp_add_error(&b, "-NOPROTO unsupported protocol version"), 0);
    assert_int_equal(resp_add_integer(&b, -7), 0);
    assert_int_equal(resp_add_bulk(&b, "x", 1), 0);
    assert_int_equal(resp_add_array(&b, 3), 0);
    ASSERT_BUF(&b, "+OK\r\n-NOPROTO unsupported protocol version\r\n:-7\r\n$1\r\nx\r\n*3\r\n");
    resp_buf_free(&b);
    assert_int_equal(b.proto, 0); /* free leaves a RESP2 buffer */
}

/* The protocol survives what a reply buffer goes through on its way out
 * (reset, consume, detach), so a connection's replies stay in one version. */
static void test_writer_proto_kept(void **state) {
    (void)state;
    resp_buf b;
    resp_buf_init(&b);
    assert_int_equal(b.proto, 0);
    b.proto = RESP_PROTO_3;
    assert_int_equal(resp_add_null(&b), 0);
    resp_buf_consume(&b, 1);
    ASSERT_BUF(&b, "\r\n");
    resp_buf_reset(&b);
    assert_int_equal(resp_add_null(&b), 0);
    size_t n = 0;
    char *d = resp_buf_detach(&b, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(d, "_\r\n", 3);
    free(d);
    assert_int_equal(b.proto, RESP_PROTO_3);
    assert_int_equal(resp_add_map(&b, 1), 0);
    ASSERT_BUF(&b, "%1\r\n");
    resp_buf_free(&b);
    /* A map of n pairs whose RESP2 element count would overflow. */
    resp_buf c = {0};
    assert_int_equal(resp_add_map(&c, SIZE_MAX / 2 + 1), RESP_ENOMEM);
    assert_int_equal(c.len, 0);
    c.proto = RESP_PROTO_3;
    assert_int_equal(resp_add_map(&c, 5), 0);
    ASSERT_BUF(&c, "%5\r\n");
    resp_buf_free(&c);
}

/* What the writer produces, the parser reads back. */
static void test_roundtrip(void **state) {
    (void)state;
    resp_buf b = {0};
    const char *items[] = {"SETTLE", "g-42", "HEADER", "retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"};
    for (int i = 0; i < 50; i++) assert_int_equal(resp_add_bulk_array(&b, items, NULL, 5), 0);
    resp_parser *p = new_parser();
    assert_int_equal(resp_parser_feed(p, b.data, b.len), 0);
    resp_command c;
    int n = 0;
    while (resp_parser_next(p, &c) == 1) {
        assert_int_equal(c.argc, 5);
        for (int i = 0; i < 5; i++) assert_string_equal(c.argv[i], items[i]);
        n++;
    }
    assert_int_equal(n, 50);
    resp_parser_free(p);
    resp_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_stream),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_every_double_split),
        cmocka_unit_test(test_byte_at_a_time),
        cmocka_unit_test(test_prepare_commit),
        cmocka_unit_test(test_pending_and_lifetime),
        cmocka_unit_test(test_max_bulk_exact),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_half_command_waits),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_free_null),
        cmocka_unit_test(test_writer_scalars),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_arrays),
        cmocka_unit_test(test_writer_consume_detach),
        cmocka_unit_test(test_writer_resp2_forms),
        cmocka_unit_test(test_writer_resp3_forms),
        cmocka_unit_test(test_writer_proto_kept),
        cmocka_unit_test(test_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
