/* Unit tests for lib/sse_framer: a server-sent event stream split into
 * events, one callback per block a blank line ends.
 *
 * Each stream is fed whole, cut in two at every byte offset, cut in three
 * at every pair of offsets, and byte by byte, with and without
 * SSE_FRAMER_RAW, and must give the same events each time: CRLF, LF and
 * CR line ends (a CRLF cut between its two bytes), multi-line data,
 * comments, event names, the last event ID, fields without ':' or a
 * space, a BOM, and a last event without its blank line (not an event,
 * but held with SSE_FRAMER_RAW). With SSE_FRAMER_RAW the blocks' bytes
 * and what is held make up the stream, byte for byte. Also: data beyond
 * max_data is dropped, a callback stops the feed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sse_framer.h"

/* The blocks called back, written down one a line:
 *   type|id|data_lines|dropped|data   (data with LF shown as "\n")
 * and, with SSE_FRAMER_RAW, every block's bytes one after the other. */
typedef struct seen {
    char text[8192];
    size_t tlen;
    char raw[8192];
    size_t rlen;
    int calls;
    int stop_at; /* the call that returns -7; 0: none */
} seen;

static int on_event(void *ud, const sse_framer_event *ev) {
    seen *l = ud;
    l->calls++;
    assert_int_equal(strlen(ev->data), ev->data_len); /* NUL-terminated */
    char line[2048];
    size_t n = (size_t)snprintf(line, sizeof(line), "%s|%s|%u|%d|", ev->type, ev->id, ev->data_lines, ev->data_dropped);
    for (size_t i = 0; i < ev->data_len && n + 3 < sizeof(line); i++) {
        if (ev->data[i] == '\n') {
            line[n++] = '\\';
            line[n++] = 'n';
        } else {
            line[n++] = ev->data[i];
        }
    }
    line[n++] = '\n';
    assert_true(l->tlen + n < sizeof(l->text));
    memcpy(l->text + l->tlen, line, n);
    l->tlen += n;
    l->text[l->tlen] = '\0';
    if (ev->raw) {
        assert_true(l->rlen + ev->raw_len < sizeof(l->raw));
        memcpy(l->raw + l->rlen, ev->raw, ev->raw_len);
        l->rlen += ev->raw_len;
    } else {
        assert_int_equal(ev->raw_len, 0);
    }
    return l->calls == l->stop_at ? -7 : 0;
}

/* Feeds text (len bytes) cut at the ncut offsets in cuts (increasing).
 * With raw, checks that the blocks' bytes and the held bytes are the
 * stream. */
static void feed_cut(seen *l, const char *text, size_t len, const size_t *cuts, size_t ncut, int raw) {
    memset(l, 0, sizeof(*l));
    sse_framer *f = sse_framer_new(SIZE_MAX, raw ? SSE_FRAMER_RAW : 0, on_event, l);
    assert_non_null(f);
    size_t at = 0;
    for (size_t i = 0; i <= ncut; i++) {
        size_t to = i < ncut ? cuts[i] : len;
        assert_int_equal(sse_framer_feed(f, text + at, to - at), 0);
        at = to;
    }
    size_t hn;
    const char *held = sse_framer_held(f, &hn);
    if (raw) {
        assert_int_equal(l->rlen + hn, len);
        assert_memory_equal(l->raw, text, l->rlen);
        if (hn) assert_memory_equal(held, text + l->rlen, hn);
    } else {
        assert_null(held);
        assert_int_equal(hn, 0);
    }
    sse_framer_free(f);
}

/* Every way of cutting text into up to three pieces, and byte by byte,
 * raw and not, gives want (the blocks written down as in seen). Returns
 * what the raw framer held at the end of the whole feed. */
static size_t every_cut(const char *text, const char *want) {
    size_t len = strlen(text);
    seen l;
    for (int raw = 0; raw <= 1; raw++) {
        feed_cut(&l, text, len, NULL, 0, raw);
        if (strcmp(l.text, want) != 0) fail_msg("whole, raw %d: got\n%s\nwant\n%s", raw, l.text, want);
        for (size_t a = 0; a <= len; a++)
            for (size_t b = a; b <= len; b++) {
                size_t cuts[2] = {a, b};
                feed_cut(&l, text, len, cuts, 2, raw);
                if (strcmp(l.text, want) != 0)
                    fail_msg("cut at %zu and %zu, raw %d: got\n%s\nwant\n%s", a, b, raw, l.text, want);
            }
        size_t *bytes = malloc(len * sizeof(*bytes));
        for (size_t i = 0; i < len; i++) bytes[i] = i;
        feed_cut(&l, text, len, bytes, len, raw);
        free(bytes);
        if (strcmp(l.text, want) != 0) fail_msg("byte by byte, raw %d: got\n%s\nwant\n%s", raw, l.text, want);
    }
    feed_cut(&l, text, len, NULL, 0, 1);
    return len - l.rlen;
}

static void test_line_ends(void **state) {
    (void)state;
    static const char want[] = "||0|0|\n" /* the leading blank line: no data */
                               "||1|0|a\n"
                               "||1|0|b\n"
                               "||1|0|c\n";
    every_cut("\ndata: a\n\n", "||0|0|\n||1|0|a\n");
    assert_int_equal(every_cut("\r\ndata: a\r\n\r\ndata: b\r\rdata: c\n\n", want), 0);
    /* CRLF cut between CR and LF at every offset: every_cut does it; the
     * LF of the last blank line is the block's own (raw), never the next
     * one's. */
    seen l;
    static const char crlf[] = "data: x\r\n\r\ndata: y\r\n\r\n";
    size_t cut = strlen("data: x\r\n\r");
    feed_cut(&l, crlf, strlen(crlf), &cut, 1, 1);
    assert_string_equal(l.text, "||1|0|x\n||1|0|y\n");
    assert_memory_equal(l.raw, crlf, strlen(crlf));
    /* A CR last is not yet known to be a CRLF: the raw framer waits for
     * the next byte before calling back; the plain one does not. */
    sse_framer *f = sse_framer_new(SIZE_MAX, SSE_FRAMER_RAW, on_event, &l);
    memset(&l, 0, sizeof(l));
    assert_int_equal(sse_framer_feed(f, "data: x\r\r", 9), 0);
    assert_int_equal(l.calls, 0);
    size_t hn;
    sse_framer_held(f, &hn);
    assert_int_equal(hn, 9);
    assert_int_equal(sse_framer_feed(f, "\n", 1), 0);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.rlen, 10);
    sse_framer_held(f, &hn);
    assert_int_equal(hn, 0);
    sse_framer_free(f);
    f = sse_framer_new(SIZE_MAX, 0, on_event, &l);
    memset(&l, 0, sizeof(l));
    assert_int_equal(sse_framer_feed(f, "data: x\r\r", 9), 0);
    assert_int_equal(l.calls, 1);
    assert_int_equal(sse_framer_feed(f, "\ndata: y\n\n", 10), 0);
    assert_string_equal(l.text, "||1|0|x\n||1|0|y\n"); /* the LF ended the CR's line: no blank line */
    sse_framer_free(f);
}

static void test_multiline_data_and_fields(void **state) {
    (void)state;
    /* data: lines joined with LF; an empty data line; "data" without ':'
     * is an empty data line; no space after ':' and two spaces (one is
     * kept); the last event: wins; unknown and long fields are ignored. */
    every_cut("data: {\"a\":\ndata:1}\ndata\ndata:  two\n\n"
              "event: x\nevent: message_stop\nretry: 10\nabcdefghijklmnopqrstuvwxyz: 1\ndata: z\n\n"
              "data:\n\n",
              "||4|0|{\"a\":\\n1}\\n\\n two\n"
              "message_stop||1|0|z\n"
              "||1|0|\n");
}

static void test_comments_and_id(void **state) {
    (void)state;
    /* Comments are no data; a block of comments alone is called back with
     * no data line; the ID stays for later events until another sets it;
     * an id with a NUL is ignored; a ':' in a value is the value's. */
    static const char in[] = ": keep-alive\n\n"
                             "id: 7\n: between\ndata: a:b\n\n"
                             "data: c\n\n"
                             "id\ndata: d\n\n"
                             "id: 9\0x\ndata: e\n\n";
    size_t len = sizeof(in) - 1;
    seen l;
    for (int raw = 0; raw <= 1; raw++)
        for (size_t c = 0; c <= len; c++) {
            feed_cut(&l, in, len, &c, 1, raw);
            assert_string_equal(l.text, "||0|0|\n"
                                        "|7|1|0|a:b\n"
                                        "|7|1|0|c\n"
                                        "||1|0|d\n"
                                        "||1|0|e\n");
        }
}

static void test_bom(void **state) {
    (void)state;
    /* A leading BOM is skipped (raw keeps it); bytes that only start like
     * one are the first field's. */
    assert_int_equal(every_cut("\xEF\xBB\xBF"
                               "data: a\n\n",
                               "||1|0|a\n"),
                     0);
    every_cut("\xEF\xBB"
              "data: a\n\n",
              "||0|0|\n");
}

static void test_last_event_without_blank_line(void **state) {
    (void)state;
    /* What follows the last blank line is not an event (the spec discards
     * it); the raw framer holds its bytes, whatever the cuts. */
    assert_int_equal(every_cut("data: a\n\ndata: b\n", "||1|0|a\n"), strlen("data: b\n"));
    assert_int_equal(every_cut("data: a\n\ndata: b", "||1|0|a\n"), strlen("data: b"));
    assert_int_equal(every_cut("data: a\n\n: c", "||1|0|a\n"), 3);
}

static void test_max_data(void **state) {
    (void)state;
    seen l = {0};
    sse_framer *f = sse_framer_new(4, 0, on_event, &l);
    static const char in[] = "event: big\ndata: 12\ndata: 34\n\ndata: 1234\n\n";
    assert_int_equal(sse_framer_feed(f, in, strlen(in)), 0);
    assert_string_equal(l.text, "big||2|1|\n||1|0|1234\n");
    sse_framer_free(f);
    /* An event name too long to keep is reported as none. */
    memset(&l, 0, sizeof(l));
    f = sse_framer_new(SIZE_MAX, 0, on_event, &l);
    char name[200] = "event: ";
    memset(name + 7, 'n', SSE_FRAMER_TYPE_MAX + 1);
    strcpy(name + 7 + SSE_FRAMER_TYPE_MAX + 1, "\ndata: x\n\n");
    assert_int_equal(sse_framer_feed(f, name, strlen(name)), 0);
    assert_string_equal(l.text, "||1|0|x\n");
    sse_framer_free(f);
}

static void test_callback_stops(void **state) {
    (void)state;
    seen l = {0};
    l.stop_at = 2;
    sse_framer *f = sse_framer_new(SIZE_MAX, SSE_FRAMER_RAW, on_event, &l);
    static const char in[] = "data: a\n\ndata: b\n\ndata: c\n\n";
    assert_int_equal(sse_framer_feed(f, in, strlen(in)), -7);
    assert_int_equal(l.calls, 2);
    assert_int_equal(sse_framer_feed(f, in, strlen(in)), -7);
    assert_int_equal(l.calls, 2);
    sse_framer_free(f);
    sse_framer_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_ends),
        cmocka_unit_test(test_multiline_data_and_fields),
        cmocka_unit_test(test_comments_and_id),
        cmocka_unit_test(test_bom),
        cmocka_unit_test(test_last_event_without_blank_line),
        cmocka_unit_test(test_max_data),
        cmocka_unit_test(test_callback_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
