/* Unit tests for agent/http_reader: requests out of bytes. A request read
 * whole, at every split point and byte by byte gives the same message;
 * pipelined requests come one at a time, in order; Content-Length and
 * chunked bodies (extensions, trailers); keep-alive by version and
 * Connection; Expect: 100-continue; and every refusal with its status:
 * the header limit exact to the byte wherever the input is cut (431), too
 * many fields (431), bodies over the limit before and after they arrive
 * (413), malformed lines, headers, lengths and chunks (400; HTTP/2
 * prior knowledge too), HTTP/2.0 and 0.9 request lines (505). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http_reader.h"

static const http_limits lim = {.max_header_bytes = 1024, .max_body_bytes = 4096};

static http_reader *reader(void) {
    http_reader *r = http_reader_new(&lim);
    assert_non_null(r);
    return r;
}

/* Feeds all of text (in pieces of at most step bytes) until a message
 * completes; returns it (NULL on error), with the bytes consumed. */
static http_msg *read_one(http_reader *r, const char *text, size_t len, size_t step, size_t *used) {
    size_t at = 0;
    while (at < len) {
        size_t n = len - at < step ? len - at : step;
        size_t got = http_reader_feed(r, text + at, n);
        at += got;
        http_reader_state s = http_reader_get_state(r);
        if (s == HTTP_READER_DONE) break;
        if (s == HTTP_READER_ERROR) break;
        assert_int_equal(got, n);
    }
    if (used) *used = at;
    return http_reader_take(r);
}

static const char post[] = "POST /v1/chat/completions?api-version=2024-06-01&x=1 HTTP/1.1\r\n"
                           "Host: 127.0.0.1:8790\r\n"
                           "Content-Type: application/json\r\n"
                           "X-Sluice-Lane:   batch  \r\n"
                           "x-sluice-tag: eu\r\n"
                           "X-Sluice-Tag: us\r\n"
                           "Empty:\r\n"
                           "Content-Length: 17\r\n"
                           "\r\n"
                           "{\"model\":\"gpt-4\"}";

static void check_post(const http_msg *m) {
    assert_non_null(m);
    assert_string_equal(http_msg_method(m), "POST");
    assert_string_equal(http_msg_target(m), "/v1/chat/completions?api-version=2024-06-01&x=1");
    assert_string_equal(http_msg_path(m), "/v1/chat/completions");
    assert_string_equal(http_msg_query(m), "api-version=2024-06-01&x=1");
    assert_string_equal(http_msg_header(m, "x-sluice-lane"), "batch");
    assert_string_equal(http_msg_header(m, "HOST"), "127.0.0.1:8790");
    assert_string_equal(http_msg_header(m, "x-sluice-tag"), "eu");
    assert_int_equal(http_msg_header_count(m, "X-SLUICE-TAG"), 2);
    assert_string_equal(http_msg_header(m, "empty"), "");
    assert_null(http_msg_header(m, "authorization"));
    assert_int_equal(http_msg_nheaders(m), 7);
    const char *n, *v;
    http_msg_header_at(m, 2, &n, &v);
    assert_string_equal(n, "X-Sluice-Lane");
    assert_string_equal(v, "batch");
    size_t blen;
    const char *b = http_msg_body(m, &blen);
    assert_int_equal(blen, 17);
    assert_memory_equal(b, "{\"model\":\"gpt-4\"}", 17);
    assert_true(http_msg_keep_alive(m));
    assert_false(http_msg_http10(m));
    assert_false(http_msg_is_head(m));
}

static void test_request_whole_and_split(void **state) {
    (void)state;
    size_t len = sizeof(post) - 1;
    for (size_t step = 1; step <= len; step++) {
        http_reader *r = reader();
        size_t used;
        http_msg *m = read_one(r, post, len, step, &used);
        assert_int_equal(used, len);
        check_post(m);
        assert_int_equal(http_reader_get_state(r), HTTP_READER_IDLE);
        http_msg_free(m);
        http_reader_free(r);
    }
    /* Two pieces cut at every offset. */
    for (size_t k = 0; k <= len; k++) {
        http_reader *r = reader();
        size_t a = http_reader_feed(r, post, k);
        assert_int_equal(a, k);
        size_t b = http_reader_feed(r, post + k, len - k);
        assert_int_equal(a + b, len);
        http_msg *m = http_reader_take(r);
        check_post(m);
        http_msg_free(m);
        http_reader_free(r);
    }
}

static void test_pipelined(void **state) {
    (void)state;
    const char two[] = "\r\nPOST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                       "GET /b?q HTTP/1.1\r\n\r\n"
                       "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n";
    size_t len = sizeof(two) - 1, at = 0;
    http_reader *r = reader();
    assert_false(http_reader_started(r));
    const char *paths[] = {"/a", "/b", "/c"}, *bodies[] = {"abc", "", "xyz"};
    for (int i = 0; i < 3; i++) {
        at += http_reader_feed(r, two + at, len - at);
        assert_int_equal(http_reader_get_state(r), HTTP_READER_DONE);
        /* Done: nothing more is consumed until the request is taken. */
        assert_int_equal(http_reader_feed(r, two + at, len - at), 0);
        http_msg *m = http_reader_take(r);
        assert_string_equal(http_msg_path(m), paths[i]);
        size_t bl;
        assert_string_equal(http_msg_body(m, &bl), bodies[i]);
        http_msg_free(m);
    }
    assert_int_equal(at, len);
    assert_null(http_reader_take(r));
    http_reader_free(r);
}

static void test_chunked(void **state) {
    (void)state;
    const char req[] = "POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
    http_reader *r = reader();
    size_t used;
    http_msg *m = read_one(r, req, sizeof(req) - 1, 3, &used);
    assert_non_null(m);
    size_t bl;
    const char *b = http_msg_body(m, &bl);
    assert_int_equal(bl, 11);
    assert_memory_equal(b, "hello world", 11);
    assert_null(http_msg_header(m, "x-trailer"));
    http_msg_free(m);
    http_reader_free(r);
}

/* Feeds text at once and in single bytes; both must end in error status. */
static void assert_refused(const char *text, size_t len, int status, const char *what) {
    for (int pass = 0; pass < 2; pass++) {
        http_reader *r = reader();
        size_t step = pass ? 1 : len;
        http_msg *m = read_one(r, text, len, step, NULL);
        const char *reason;
        int got = http_reader_error(r, &reason);
        if (m || got != status)
            fail_msg("%s (step %zu): got status %d (%s), message %p; want %d", what, step, got, reason, (void *)m,
                     status);
        assert_true(reason[0] != '\0');
        assert_int_equal(http_reader_get_state(r), HTTP_READER_ERROR);
        assert_int_equal(http_reader_feed(r, "x", 1), 0);
        http_msg_free(m);
        http_reader_free(r);
    }
}

static void test_malformed(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int status;
    } bad[] = {
        {"GARBAGE\r\n\r\n", 400},
        {"POST /x HTTP/x.1\r\n\r\n", 400},
        {"POST /x HTTP/1.1 junk\r\n\r\n", 400},
        {"POST /x HTTP/1.1\rX\n\r\n", 400},
        {"POST /x HTTP/1.1\r\n: v\r\n\r\n", 400},
        {"POST x HTTP/1.1\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nA\x01: b\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nA: b\x7f\r\n\r\n", 400},
        {"POST /x\r\n\r\n", 505},
        {"POST /x HTTP/1.1\r\nBad Header: x\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n;\r\n", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},
        {"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400},
        {"POST /x HTTP/2.0\r\n\r\n", 505},
        {"POST /x HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 413},
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400}, /* a TLS ClientHello */
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400},             /* HTTP/2 with prior knowledge */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "case %zu", i);
        assert_refused(bad[i].text, strlen(bad[i].text), bad[i].status, what);
    }
    /* A chunked body that outgrows the limit: 413 when it gets there. */
    char big[8192];
    int n = snprintf(big, sizeof(big), "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        n += snprintf(big + n, sizeof(big) - (size_t)n, "400\r\n");
        memset(big + n, 'a', 1024);
        n += 1024;
        n += snprintf(big + n, sizeof(big) - (size_t)n, "\r\n");
    }
    assert_refused(big, (size_t)n, 413, "chunked over the limit");
}

/* A head of exactly max_header_bytes is read; one byte more is 431,
 * wherever the input is cut. */
static void test_header_limit_exact(void **state) {
    (void)state;
    for (int over = 0; over <= 1; over++) {
        char head[2048];
        const char *start = "GET /p HTTP/1.1\r\nX-Pad: ";
        size_t n = strlen(start);
        memcpy(head, start, n);
        size_t pad = lim.max_header_bytes + (size_t)over - n - 4; /* "\r\n\r\n" ends it */
        memset(head + n, 'p', pad);
        n += pad;
        memcpy(head + n, "\r\n\r\n", 4);
        n += 4;
        assert_int_equal(n, lim.max_header_bytes + (size_t)over);
        for (size_t step = 1; step <= n; step += step < 16 ? 1 : 97) {
            http_reader *r = reader();
            http_msg *m = read_one(r, head, n, step, NULL);
            if (over) {
                assert_null(m);
                assert_int_equal(http_reader_error(r, NULL), 431);
                /* The path was read before the limit hit: an error answer
                 * can be shaped by it. */
                assert_string_equal(http_msg_path(http_reader_current(r)), "/p");
            } else {
                assert_non_null(m);
                assert_int_equal(strlen(http_msg_header(m, "x-pad")), pad);
            }
            http_msg_free(m);
            http_reader_free(r);
        }
    }
    /* A flood of blank lines before a request counts too. */
    char blank[2100];
    memset(blank, '\n', sizeof(blank));
    assert_refused(blank, sizeof(blank), 431, "blank lines");
    /* Trailers count against the same limit. */
    char tr[4096];
    int k = snprintf(tr, sizeof(tr), "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ");
    memset(tr + k, 't', 1100);
    k += 1100;
    k += snprintf(tr + k, sizeof(tr) - (size_t)k, "\r\n\r\n");
    assert_refused(tr, (size_t)k, 431, "trailers");
}

static void test_header_count(void **state) {
    (void)state;
    http_limits big = {.max_header_bytes = 65536, .max_body_bytes = 10};
    for (int extra = 0; extra <= 1; extra++) {
        char req[8192];
        int n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\n");
        for (int i = 0; i < HTTP_READER_MAX_HEADERS + extra; i++)
            n += snprintf(req + n, sizeof(req) - (size_t)n, "h%d: v\r\n", i);
        n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
        http_reader *r = http_reader_new(&big);
        http_reader_feed(r, req, (size_t)n);
        http_msg *m = http_reader_take(r);
        if (extra) {
            assert_null(m);
            assert_int_equal(http_reader_error(r, NULL), 431);
        } else {
            assert_non_null(m);
            assert_int_equal(http_msg_nheaders(m), HTTP_READER_MAX_HEADERS);
        }
        http_msg_free(m);
        http_reader_free(r);
    }
}

static void test_keep_alive_rules(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int keep, http10;
    } cases[] = {
        {"GET / HTTP/1.1\r\n\r\n", 1, 0},
        {"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", 0, 0},
        {"GET / HTTP/1.0\r\n\r\n", 0, 1},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1, 1},
        {"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        http_reader *r = reader();
        size_t len = strlen(cases[i].text);
        assert_int_equal(http_reader_feed(r, cases[i].text, len), len);
        http_msg *m = http_reader_take(r);
        assert_non_null(m);
        assert_int_equal(http_msg_keep_alive(m), cases[i].keep);
        assert_int_equal(http_msg_http10(m), cases[i].http10);
        assert_int_equal(http_reader_get_state(r), cases[i].keep ? HTTP_READER_IDLE : HTTP_READER_END);
        /* After the last request nothing more is read. */
        if (!cases[i].keep) assert_int_equal(http_reader_feed(r, "GET / HTTP/1.1\r\n\r\n", 18), 0);
        http_msg_free(m);
        http_reader_free(r);
    }
}

static void test_expect_and_forms(void **state) {
    (void)state;
    http_reader *r = reader();
    const char *head = "POST /v1/messages HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    assert_int_equal(http_reader_feed(r, head, strlen(head)), strlen(head));
    assert_true(http_reader_started(r));
    assert_int_equal(http_reader_get_state(r), HTTP_READER_BODY);
    assert_true(http_reader_wants_continue(r));
    assert_false(http_reader_wants_continue(r));
    http_reader_feed(r, "{}", 2);
    http_msg *m = http_reader_take(r);
    assert_non_null(m);
    http_msg_free(m);
    /* Absolute form, HEAD. */
    const char *abs = "HEAD http://example.com/v1/embeddings?a=b HTTP/1.1\r\n\r\n";
    http_reader_feed(r, abs, strlen(abs));
    m = http_reader_take(r);
    assert_string_equal(http_msg_path(m), "/v1/embeddings");
    assert_string_equal(http_msg_query(m), "a=b");
    assert_true(http_msg_is_head(m));
    http_msg_free(m);
    http_reader_free(r);
    http_reader_free(NULL);
    http_msg_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_whole_and_split),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_header_limit_exact),
        cmocka_unit_test(test_header_count),
        cmocka_unit_test(test_keep_alive_rules),
        cmocka_unit_test(test_expect_and_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
