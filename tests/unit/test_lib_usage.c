/* Unit tests for lib/usage (sl_usage_tokens): the usage objects of OpenAI
 * (chat, embeddings, Responses), Azure and Anthropic, whole bodies and
 * server-sent event streams, and bodies that report nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"
#include "usage.h"

static const struct {
    const char *name, *body;
    long long want;
} vectors[] = {
    {"openai chat", "{\"id\":\"c\",\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}", 21},
    {"total wins", "{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":30}}", 30},
    {"no total", "{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12}}", 21},
    {"embeddings", "{\"data\":[],\"usage\":{\"prompt_tokens\":8,\"total_tokens\":8}}", 8},
    {"prompt only", "{\"usage\":{\"prompt_tokens\":8}}", 8},
    {"responses api", "{\"usage\":{\"input_tokens\":36,\"output_tokens\":87,\"total_tokens\":123}}", 123},
    {"anthropic", "{\"type\":\"message\",\"usage\":{\"input_tokens\":25,\"output_tokens\":30}}", 55},
    {"anthropic cache",
     "{\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":100,"
     "\"cache_read_input_tokens\":500,\"output_tokens\":5}}",
     615},
    {"leading space", "  \n{\"usage\":{\"total_tokens\":3}}", 3},
    {"zero", "{\"usage\":{\"total_tokens\":0}}", 0},
    {"no usage", "{\"id\":\"x\",\"choices\":[]}", -1},
    {"usage not object", "{\"usage\":42}", -1},
    {"strings ignored", "{\"usage\":{\"total_tokens\":\"21\"}}", -1},
    {"negative ignored", "{\"usage\":{\"total_tokens\":-5,\"prompt_tokens\":4}}", 4},
    {"real numbers ignored", "{\"usage\":{\"total_tokens\":2.5}}", -1},
    {"array body", "[{\"usage\":{\"total_tokens\":3}}]", -1},
    /* Counts no provider reports (above 10^15, what sl_settle_usage()
     * takes) are no usage: summed, they overflowed (undefined behaviour;
     * the first read 1 token, the prompt lost). */
    {"absurd input",
     "{\"usage\":{\"input_tokens\":9223372036854775807,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}", -1},
    {"absurd prompt", "{\"usage\":{\"prompt_tokens\":9223372036854775800,\"completion_tokens\":100}}", -1},
    {"not json", "Too Many Requests", -1},
    {"truncated json", "{\"usage\":{\"total_tokens\":3", -1},
    {"empty", "", -1},
    {"openai stream",
     "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n"
     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}\n\n"
     "data: [DONE]\n\n",
     12},
    {"anthropic stream",
     "event: message_start\ndata: "
     "{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
     "event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n"
     "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\r\n\r\n",
     40},
    {"responses stream",
     "event: response.completed\ndata: "
     "{\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":4,\"total_"
     "tokens\":7}}}\n",
     7},
    {"stream without usage", "data: {\"choices\":[]}\n\ndata: [DONE]\n", -1},
    {"stream garbage lines", "data: {oops\ndata:\n: comment\ndata: {\"usage\":{\"total_tokens\":2}}", 2},
};

static void test_vectors(void **state) {
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        long long got = sl_usage_tokens(vectors[i].body, strlen(vectors[i].body));
        if (got != vectors[i].want) fail_msg("%s: got %lld, want %lld", vectors[i].name, got, vectors[i].want);
    }
}

/* The usage split for sl_settle_usage(): input is all of the prompt,
 * cache reads included; cache_read the part read from the cache. */
static const struct {
    const char *name, *body;
    long long tokens, input, output, cache_read;
} splits[] = {
    {"openai chat", "{\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}", 21, 9, 12, 0},
    {"openai cached",
     "{\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":12,\"total_tokens\":912,"
     "\"prompt_tokens_details\":{\"cached_tokens\":768}}}",
     912, 900, 12, 768},
    {"responses cached",
     "{\"usage\":{\"input_tokens\":300,\"output_tokens\":20,\"total_tokens\":320,"
     "\"input_tokens_details\":{\"cached_tokens\":256}}}",
     320, 300, 20, 256},
    {"anthropic", "{\"usage\":{\"input_tokens\":25,\"output_tokens\":30}}", 55, 25, 30, 0},
    {"anthropic cache",
     "{\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":100,"
     "\"cache_read_input_tokens\":500,\"output_tokens\":5}}",
     615, 610, 5, 500},
    {"anthropic stream",
     "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,"
     "\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n"
     "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n",
     45, 30, 15, 5},
    {"embeddings", "{\"usage\":{\"prompt_tokens\":8,\"total_tokens\":8}}", 8, 8, 0, 0},
    /* Gemini's OpenAI-compatible endpoint: total_tokens counts the
     * thinking tokens (thoughtsTokenCount), completion_tokens does not;
     * the thoughts are output (as OpenAI's completion_tokens counts its
     * reasoning tokens), so the split still adds up to the total. */
    {"gemini thinking", "{\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":9,\"total_tokens\":103}}", 103, 9, 94,
     0},
    {"gemini thoughts only", "{\"usage\":{\"prompt_tokens\":21,\"total_tokens\":81}}", 81, 21, 60, 0},
    {"total only", "{\"usage\":{\"total_tokens\":8}}", 8, -1, -1, -1},
    {"none", "{\"id\":\"x\"}", -1, -1, -1, -1},
};

static void test_split(void **state) {
    for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
        sl_usage u;
        sl_usage_init(&u);
        int rc = sl_usage_of(splits[i].body, strlen(splits[i].body), &u);
        if (u.tokens != splits[i].tokens || u.input_tokens != splits[i].input || u.output_tokens != splits[i].output ||
            u.cache_read_tokens != splits[i].cache_read)
            fail_msg("%s: got %lld = %lld + %lld (cache %lld), want %lld = %lld + %lld (cache %lld)", splits[i].name,
                     u.tokens, u.input_tokens, u.output_tokens, u.cache_read_tokens, splits[i].tokens, splits[i].input,
                     splits[i].output, splits[i].cache_read);
        assert_int_equal(rc, splits[i].tokens >= 0 ? 0 : SL_EUNKNOWN);
        /* What sl_settle_usage() takes: a split adds up to the total. */
        if (u.input_tokens >= 0 && u.tokens != u.input_tokens + u.output_tokens)
            fail_msg("%s: %lld != %lld + %lld: sl_settle_usage() refuses it", splits[i].name, u.tokens, u.input_tokens,
                     u.output_tokens);
    }
    sl_usage u;
    sl_usage_init(&u);
    assert_int_equal(sl_usage_of(NULL, 3, &u), SL_EINVAL);
    u.size = 0;
    assert_int_equal(sl_usage_of("{}", 2, &u), SL_EINVAL);
}

static void test_edges(void **state) {
    assert_int_equal(sl_usage_tokens(NULL, 10), -1);
    assert_int_equal(usage_tokens("{\"usage\":{\"total_tokens\":1}}", USAGE_MAX_BODY + 1), -1);
    /* Not NUL-terminated: only len bytes are read. */
    const char body[] = "{\"usage\":{\"total_tokens\":77}}XXXX";
    assert_int_equal(sl_usage_tokens(body, sizeof(body) - 5), 77);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
