/* test_sse_filter: OpenAI's usage-only chunk left out of a stream, every
 * other byte passed through unchanged, however the stream is cut.
 *
 * Properties, over every split of each stream into two pieces and over
 * random splits into many: the output is the input less exactly the
 * usage-only events; it does not depend on the split; each event is
 * passed once it is complete (never an event's first half alone). Also:
 * CR, LF and CRLF line ends; a chunk with choices and usage (kept); a
 * chunk with empty choices and no usage (kept); an event longer than the
 * bound turns the filter into a pass-through; the receiver's pause and
 * departure are reported. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sse_filter.h"

typedef struct sink {
    char *data;
    size_t len, cap;
    int calls;
    int answer; /* what out returns */
} sink;

static int sink_out(void *ud, const char *data, size_t len) {
    sink *s = ud;
    if (s->len + len + 1 > s->cap) {
        s->cap = (s->len + len + 1) * 2;
        s->data = realloc(s->data, s->cap);
        assert_non_null(s->data);
    }
    memcpy(s->data + s->len, data, len);
    s->len += len;
    s->data[s->len] = '\0';
    s->calls++;
    return s->answer;
}

#define ROLE "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}],\"usage\":null}\n\n"
#define TEXT "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
#define USAGE "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n"
#define DONE "data: [DONE]\n\n"

/* Feeds text cut at the offsets in cuts (n of them, increasing) and
 * flushes; returns what passed (the caller frees). */
static char *run(const char *text, const size_t *cuts, size_t n, unsigned *dropped) {
    sink s = {0};
    sse_filter *f = sse_filter_new(sink_out, &s);
    assert_non_null(f);
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i <= n; i++) {
        size_t to = i < n ? cuts[i] : len;
        assert_true(sse_filter_feed(f, text + at, to - at) >= 0);
        at = to;
    }
    assert_int_equal(sse_filter_flush(f), 0);
    if (dropped) *dropped = sse_filter_dropped(f);
    sse_filter_free(f);
    if (!s.data) s.data = calloc(1, 1);
    return s.data;
}

/* Every split into two pieces gives want. */
static void every_split(const char *in, const char *want, unsigned want_dropped) {
    for (size_t c = 0; c <= strlen(in); c++) {
        unsigned d;
        char *got = run(in, &c, 1, &d);
        if (strcmp(got, want) != 0) fail_msg("cut at %zu: got\n%s\nwant\n%s", c, got, want);
        assert_int_equal(d, want_dropped);
        free(got);
    }
}

static void test_usage_chunk_left_out(void **state) {
    (void)state;
    every_split(ROLE TEXT TEXT USAGE DONE, ROLE TEXT TEXT DONE, 1);
}

static void test_line_ends(void **state) {
    (void)state;
    static const char crlf[] = "data: {\"choices\":[],\"usage\":{\"total_tokens\":7}}\r\n\r\ndata: [DONE]\r\n\r\n";
    every_split(crlf, "data: [DONE]\r\n\r\n", 1);
    static const char cr[] = ": comment\rdata: {\"choices\":[],\r\rdata: \"usage\":{}}\r\rdata: [DONE]\r\r";
    /* Two data lines joined by LF make one JSON text: not the first event
     * (a comment and half an object), the second (the other half) neither:
     * each event is judged alone. */
    every_split(cr, cr, 0);
    static const char joined[] = "data: {\"choices\":[],\ndata: \"usage\":{\"total_tokens\":1}}\n\n" DONE;
    every_split(joined, DONE, 1);
}

static void test_others_kept(void **state) {
    (void)state;
    /* Choices with usage (a provider that puts usage on the last text
     * chunk), empty choices without usage, usage null, Anthropic's
     * events, and an event with fields besides data. */
    static const char in[] =
        "data: {\"choices\":[{\"index\":0,\"delta\":{}}],\"usage\":{\"total_tokens\":7}}\n\n"
        "data: {\"choices\":[]}\n\n"
        "data: {\"choices\":[],\"usage\":null}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n"
        "id: 7\nretry: 100\ndata: {\"choices\":[],\"usage\":\"x\"}\n\n";
    every_split(in, in, 0);
}

static void test_random_splits(void **state) {
    (void)state;
    static const char in[] = ROLE TEXT ": keepalive\n\n" TEXT USAGE DONE;
    static const char want[] = ROLE TEXT ": keepalive\n\n" TEXT DONE;
    srand(15);
    for (int round = 0; round < 500; round++) {
        size_t cuts[32], n = (size_t)(rand() % 32), len = strlen(in);
        for (size_t i = 0; i < n; i++) cuts[i] = (size_t)rand() % (len + 1);
        for (size_t i = 1; i < n; i++) /* sort */
            for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
                size_t t = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = t;
            }
        char *got = run(in, cuts, n, NULL);
        assert_string_equal(got, want);
        free(got);
    }
}

/* Passed events are whole: nothing of an event goes out before its blank
 * line has come. */
static void test_whole_events(void **state) {
    (void)state;
    sink s = {0};
    sse_filter *f = sse_filter_new(sink_out, &s);
    static const char half[] = "data: {\"choices\":[{\"delta\":{\"content\":\"hel";
    assert_int_equal(sse_filter_feed(f, half, strlen(half)), 0);
    assert_int_equal(s.len, 0);
    assert_int_equal(sse_filter_feed(f, "lo\"}}]}\n", 8), 0);
    assert_int_equal(s.len, 0);
    assert_int_equal(sse_filter_feed(f, "\n", 1), 0);
    assert_int_equal(s.len, strlen(half) + 9);
    /* What the stream ends with, blank line or not, is passed at the end. */
    assert_int_equal(sse_filter_feed(f, "data: [DO", 9), 0);
    assert_int_equal(sse_filter_flush(f), 0);
    assert_int_equal(s.len, strlen(half) + 9 + 9);
    sse_filter_free(f);
    free(s.data);
}

static void test_long_event_passes_through(void **state) {
    (void)state;
    sink s = {0};
    sse_filter *f = sse_filter_new(sink_out, &s);
    size_t n = SSE_FILTER_MAX_EVENT + 100;
    char *big = malloc(n);
    memset(big, 'x', n);
    memcpy(big, "data: ", 6);
    assert_int_equal(sse_filter_feed(f, big, n), 0);
    assert_int_equal(s.len, n); /* passed as it came, though incomplete */
    /* From here on everything passes, the usage chunk too. */
    assert_int_equal(sse_filter_feed(f, "\n\n" USAGE, 2 + strlen(USAGE)), 0);
    assert_int_equal(s.len, n + 2 + strlen(USAGE));
    assert_int_equal(sse_filter_flush(f), 0);
    sse_filter_free(f);
    free(big);
    free(s.data);
}

static void test_receiver_pause_and_gone(void **state) {
    (void)state;
    sink s = {.answer = 1};
    sse_filter *f = sse_filter_new(sink_out, &s);
    assert_int_equal(sse_filter_feed(f, TEXT TEXT, strlen(TEXT TEXT)), 1);
    assert_int_equal(s.calls, 2);
    s.answer = -1;
    assert_true(sse_filter_feed(f, TEXT TEXT, strlen(TEXT TEXT)) < 0);
    assert_int_equal(s.calls, 3); /* stopped at the first refusal */
    assert_true(sse_filter_feed(f, TEXT, strlen(TEXT)) < 0);
    assert_int_equal(s.calls, 3);
    sse_filter_free(f);
    free(s.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_chunk_left_out),
        cmocka_unit_test(test_line_ends),
        cmocka_unit_test(test_others_kept),
        cmocka_unit_test(test_random_splits),
        cmocka_unit_test(test_whole_events),
        cmocka_unit_test(test_long_event_passes_through),
        cmocka_unit_test(test_receiver_pause_and_gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
