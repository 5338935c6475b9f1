/* Unit tests for lib/core/estimate: hand-computed estimates for every API
 * the proxy serves (chat, completions, embeddings, responses, messages),
 * and on chat and Anthropic bodies (fixed shapes and 2000 random ones with
 * text of one- to four-byte code points) the count of an independent oracle, and the same
 * estimate from `sluice run` (agent/cli/run_input.c, compiled in). */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "estimate.h"
#include "run_input.h"

static json_t *parse(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
    if (!j) fail_msg("bad JSON in the test (%s): %s", e.text, text);
    return j;
}

static const struct {
    const char *name;
    estimate_api api;
    const char *body;
    long long input, output;
} vectors[] = {
    /* 20 code points -> 5 tokens; max_tokens as given. */
    {"chat string", ESTIMATE_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"abcdefghijabcdefghij\"}],\"max_tokens\":100}", 5, 100},
    {"chat rounds up", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"abcde\"}],\"max_tokens\":1}", 2, 1},
    {"chat parts", ESTIMATE_CHAT,
     "{\"messages\":[{\"content\":[{\"type\":\"text\",\"text\":\"abcd\"},{\"type\":\"image_url\",\"image_url\":{"
     "\"url\":\"x\"}},{\"type\":\"text\",\"text\":\"efgh\"}]}]}",
     2 + 1105, 16},
    {"chat default output", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"abcd\"}]}", 1, 16},
    {"chat max_completion_tokens", ESTIMATE_CHAT, "{\"messages\":[],\"max_completion_tokens\":50}", 0, 50},
    {"chat max_tokens wins", ESTIMATE_CHAT, "{\"messages\":[],\"max_tokens\":7,\"max_completion_tokens\":50}", 0, 7},
    {"chat max_tokens null", ESTIMATE_CHAT, "{\"messages\":[],\"max_tokens\":null,\"max_completion_tokens\":50}", 0,
     50},
    {"chat zero max", ESTIMATE_CHAT, "{\"messages\":[],\"max_tokens\":0,\"max_completion_tokens\":50}", 0, 16},
    {"chat n", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"abcd\"}],\"max_tokens\":10,\"n\":3}", 1, 30},
    {"chat n capped", ESTIMATE_CHAT, "{\"messages\":[],\"max_tokens\":1,\"n\":100000}", 0, 128},
    /* Weighed by UTF-8 length: 'é' (two bytes) half a token, '€' (three)
     * one: 2 x 2 + 3 x 4 = 16 quarters -> 4 tokens. */
    {"chat utf-8", ESTIMATE_CHAT,
     "{\"messages\":[{\"content\":\"\\u00e9\\u00e9\\u20ac\\u20ac\\u20ac\"}],\"max_tokens\":2}", 4, 2},
    /* Japanese: a token a character (5); Cyrillic: half (6 -> 3); an
     * emoji (four bytes) two tokens. */
    {"chat japanese", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"\\u3053\\u3093\\u306b\\u3061\\u306f\"}]}", 5, 16},
    {"messages cyrillic", ESTIMATE_MESSAGES,
     "{\"messages\":[{\"content\":\"\\u043f\\u0440\\u0438\\u0432\\u0435\\u0442\"}],\"max_tokens\":1}", 3, 1},
    {"chat emoji", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"\\ud83d\\ude00a\"}],\"max_tokens\":1}", 3, 1},
    {"completions strings utf-8", ESTIMATE_COMPLETIONS, "{\"prompt\":[\"\\u00e9\",\"\\u00e9\\u00e9\\u00e9\"]}", 3, 32},
    /* Tools and tool calls weigh as their compact JSON would (its 70 marks
     * at half a token, the rest a quarter): 242 + 4 of text = 246 quarters
     * -> 62. */
    {"chat tools", ESTIMATE_CHAT,
     "{\"messages\":[{\"content\":\"abcd\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
     "\"description\":\"Weather of a "
     "city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":["
     "\"city\"]}}}],\"max_tokens\":1}",
     62, 1},
    /* A string weighs its text, not its escapes: 116 quarters -> 29. */
    {"chat tool_calls", ESTIMATE_CHAT,
     "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
     "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]}],\"max_tokens\":1}",
     29, 1},
    /* 2 + 44 + 23 = 69 -> 18. */
    {"chat legacy functions", ESTIMATE_CHAT,
     "{\"messages\":[{\"content\":\"ab\",\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}}],\"functions\":[{"
     "\"name\":\"f\"}]}",
     18, 16},
    /* Tools 138 (numbers by their text); tool_use name and input 17;
     * tool_results 12: 167 -> 42. */
    {"messages tools and blocks", ESTIMATE_MESSAGES,
     "{\"tools\":[{\"name\":\"t\",\"input_schema\":{\"type\":\"object\",\"x\":0.5,\"y\":-12,\"z\":true,\"w\":null,"
     "\"v\":false}}],\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"tu1\",\"name\":"
     "\"t\",\"input\":{\"q\":\"x\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
     "\"tu1\",\"content\":[{\"type\":\"text\",\"text\":\"abcdefgh\"}]},{\"type\":\"tool_result\",\"tool_use_id\":"
     "\"tu2\",\"content\":\"wxyz\"}]}],\"max_tokens\":5}",
     42, 5},
    /* Name 2 + arguments 13 + output 4 + tools 70 = 89 -> 23. */
    {"responses function call", ESTIMATE_RESPONSES,
     "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"fn\",\"arguments\":\"{\\\"a\\\":1}\"},{"
     "\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"done\"}],\"tools\":[{\"type\":\"function\","
     "\"name\":\"fn\",\"parameters\":{}}]}",
     23, 16},
    /* Structure 29 + two Han characters 4 each = 37 -> 10. */
    {"tools non-ascii", ESTIMATE_CHAT, "{\"messages\":[],\"tools\":[{\"description\":\"\\u65e5\\u672c\"}]}", 10, 16},
    /* Levels past ESTIMATE_JSON_DEPTH weigh nothing: 65 levels of two
     * brackets = 260 -> 65. */
    {"tools nested deep", ESTIMATE_CHAT,
     "{\"messages\":[],\"tools\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
     "[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
     "]}",
     65, 16},
    /* ASCII digits and punctuation weigh half a token: x, f and the spaces
     * 5 quarters, "=(1,2);" 14: 19 -> 5. */
    {"chat digits and marks", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"x = f(1, 2);\"}],\"max_tokens\":1}", 5, 1},
    /* A real weighs its shortest text: "0.1" (6), not 0.10000000000000001:
     * brackets 4, braces 4, x 1, its quotes and colon 6 = 21 -> 6. */
    {"tools real", ESTIMATE_CHAT, "{\"messages\":[],\"tools\":[{\"x\":0.1}]}", 6, 16},
    /* A max output beyond ESTIMATE_MAX_OUTPUT is taken as it, times n. */
    {"chat huge max_tokens", ESTIMATE_CHAT, "{\"messages\":[],\"max_tokens\":9223372036854775807,\"n\":2}", 0,
     2000000000000LL},
    {"chat nul counts", ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"\\u0000abcdefg\"}],\"max_tokens\":2}", 2, 2},
    {"messages system string", ESTIMATE_MESSAGES,
     "{\"system\":\"abcd\",\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}],\"max_tokens\":300}", 2, 300},
    {"messages system blocks", ESTIMATE_MESSAGES,
     "{\"system\":[{\"type\":\"text\",\"text\":\"abcdabcd\"}],\"messages\":[{\"content\":[{\"type\":\"text\",\"text\":"
     "\"abcd\"}]}],\"max_tokens\":1}",
     3, 1},
    {"messages n ignored", ESTIMATE_MESSAGES, "{\"messages\":[],\"max_tokens\":5,\"n\":4}", 0, 5},
    {"completions string", ESTIMATE_COMPLETIONS, "{\"prompt\":\"abcdefgh\",\"max_tokens\":9}", 2, 9},
    {"completions strings", ESTIMATE_COMPLETIONS, "{\"prompt\":[\"abcd\",\"abcd\",\"a\"]}", 3, 48},
    {"completions tokens", ESTIMATE_COMPLETIONS, "{\"prompt\":[1,2,3,4,5],\"max_tokens\":1}", 5, 1},
    {"completions token arrays", ESTIMATE_COMPLETIONS, "{\"prompt\":[[1,2],[3]],\"max_tokens\":1}", 3, 2},
    /* A batch of prompts: each answered n times up to max_tokens (OpenAI's
     * "n: how many completions to generate for each prompt"; the cookbook's
     * rate-limit count, completion tokens x len(prompt)). */
    {"completions batch", ESTIMATE_COMPLETIONS,
     "{\"prompt\":[\"abcd\",\"abcd\",\"abcd\",\"abcd\"],\"max_tokens\":100,\"n\":2}", 4, 800},
    {"completions batch capped", ESTIMATE_COMPLETIONS,
     "{\"prompt\":[\"\",\"\",\"\"],\"max_tokens\":9223372036854775807,\"n\":128}", 0, 128000000000000LL},
    {"completions suffix", ESTIMATE_COMPLETIONS, "{\"prompt\":\"abcd\",\"suffix\":\"abcd\",\"max_tokens\":1}", 2, 1},
    {"completions best_of", ESTIMATE_COMPLETIONS, "{\"prompt\":\"\",\"max_tokens\":10,\"n\":2,\"best_of\":3}", 0, 30},
    {"embeddings string", ESTIMATE_EMBEDDINGS, "{\"input\":\"abcdefghi\",\"model\":\"e\"}", 3, 0},
    {"embeddings strings", ESTIMATE_EMBEDDINGS, "{\"input\":[\"abcd\",\"efgh\"],\"max_tokens\":100}", 2, 0},
    {"embeddings tokens", ESTIMATE_EMBEDDINGS, "{\"input\":[[1,2,3],[4]]}", 4, 0},
    {"responses string", ESTIMATE_RESPONSES,
     "{\"input\":\"abcdefgh\",\"instructions\":\"abcd\",\"max_output_tokens\":64}", 3, 64},
    {"responses items", ESTIMATE_RESPONSES,
     "{\"input\":[{\"role\":\"user\",\"content\":\"abcd\"},{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
     "\"text\":\"abcd\"}]},{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"abcd\"}]}",
     3, 16},
    /* A function's output given as parts (openai-python 2.0.0): its text
     * 16 quarters -> 4. */
    {"responses function output parts", ESTIMATE_RESPONSES,
     "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":\"input_text\","
     "\"text\":\"abcdabcdabcdabcd\"}]}]}",
     4, 16},
    {"responses max_tokens ignored", ESTIMATE_RESPONSES, "{\"input\":\"\",\"max_tokens\":5}", 0, 16},
    {"not an object", ESTIMATE_CHAT, "[1,2,3]", 0, 16},
    {"embeddings not an object", ESTIMATE_EMBEDDINGS, "\"text\"", 0, 0},
    {"content not a string", ESTIMATE_CHAT,
     "{\"messages\":[{\"content\":42},{\"content\":{\"text\":\"abcd\"}},7],\"max_tokens\":1}", 0, 1},
};

static void test_vectors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        json_t *b = parse(vectors[i].body);
        estimate e;
        estimate_request(b, vectors[i].api, &e);
        if (e.input != vectors[i].input || e.output != vectors[i].output)
            fail_msg("%s: got input %lld output %lld, want %lld %lld", vectors[i].name, e.input, e.output,
                     vectors[i].input, vectors[i].output);
        json_decref(b);
    }
}

/* The oracle: the count of chat and Anthropic bodies written apart from
 * lib/core/estimate.c: the text of "system" and of every message's content
 * (a string, or the "text" of its parts), each code point decoded to its
 * value and weighed by its range (U+0000..007F a quarter token, a half
 * for a digit or punctuation (ctype's, in the C locale), ..07FF a half,
 * ..FFFF one, above two), the sum rounded up once; max_tokens, else
 * max_completion_tokens, else 16. Strings are counted to their end. The
 * weights are kept in quarters so the sum is exact. An image part is what
 * docs/providers.md says its provider charges at its usual largest: chat's
 * image_url 85 tokens at detail "low", else 1105; an Anthropic image block
 * 1600. */
static long long oracle_points(const json_t *v) {
    long long q = 0;
    const unsigned char *p = (const unsigned char *)json_string_value(v);
    size_t len = json_string_length(v);
    for (size_t i = 0; p && i < len;) {
        unsigned long cp;
        size_t n;
        if (p[i] < 0x80) cp = p[i], n = 1;
        else if ((p[i] & 0xE0) == 0xC0) cp = p[i] & 0x1Fu, n = 2;
        else if ((p[i] & 0xF0) == 0xE0) cp = p[i] & 0x0Fu, n = 3;
        else cp = p[i] & 0x07u, n = 4;
        for (size_t k = 1; k < n && i + k < len; k++) cp = (cp << 6) | (p[i + k] & 0x3Fu);
        i += n;
        if (cp < 0x80) q += isdigit((int)cp) || ispunct((int)cp) ? 2 : 1;
        else q += cp < 0x800 ? 2 : cp < 0x10000 ? 4 : 8;
    }
    return q;
}

static long long oracle_content(const json_t *content, estimate_api api, long long *images) {
    long long n = 0;
    size_t j;
    json_t *part;
    if (json_is_string(content)) return oracle_points(content);
    json_array_foreach(content, j, part) {
        n += oracle_points(json_object_get(part, "text"));
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *detail = json_string_value(json_object_get(json_object_get(part, "image_url"), "detail"));
        if (api == ESTIMATE_CHAT && type && !strcmp(type, "image_url"))
            *images += detail && !strcmp(detail, "low") ? 85 : 1105;
        if (api == ESTIMATE_MESSAGES && type && !strcmp(type, "image")) *images += 1600;
    }
    return n;
}

static void oracle_split(const json_t *body, estimate_api api, long long *input, long long *output) {
    long long images = 0;
    long long n = oracle_content(json_object_get(body, "system"), api, &images);
    size_t i;
    json_t *msg;
    json_array_foreach(json_object_get(body, "messages"), i, msg) {
        n += oracle_content(json_object_get(msg, "content"), api, &images);
    }
    json_t *mt = json_object_get(body, "max_tokens");
    if (!json_is_integer(mt)) mt = json_object_get(body, "max_completion_tokens");
    *input = (n + 3) / 4 + images;
    *output = json_is_integer(mt) && json_integer_value(mt) > 0 ? (long long)json_integer_value(mt) : 16;
}

/* The estimate equals the oracle's count, and `sluice run` uses it: the
 * bodies it governs (chat completions and Anthropic messages). */
static void assert_same_as_run(const json_t *body, estimate_api api, const char *what) {
    estimate e;
    long long in = -1, out = -1, oin = -1, oout = -1;
    estimate_request(body, api, &e);
    oracle_split(body, api, &oin, &oout);
    if (e.input != oin || e.output != oout) {
        char *text = json_dumps(body, JSON_COMPACT);
        fail_msg("%s: estimate %lld/%lld, the oracle %lld/%lld for %s", what, e.input, e.output, oin, oout,
                 text ? text : "?");
    }
    run_estimate_split(body, &in, &out);
    if (api == ESTIMATE_CHAT && (e.input != in || e.output != out))
        fail_msg("%s: sluice run estimates %lld/%lld, the proxy %lld/%lld", what, in, out, e.input, e.output);
}

static const char *const fixed_bodies[] = {
    "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"system\",\"content\":\"You are "
    "terse.\"},{\"role\":\"user\",\"content\":\"Say hi\"}],\"max_tokens\":64}",
    "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"describe\"},{"
    "\"type\":\"image_url\",\"image_url\":{\"url\":\"data:...\"}}]}]}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":4096}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-3}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"12\"}",
    "{\"model\":\"claude\",\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello, "
    "Claude\"}],\"max_tokens\":1024}",
    "{\"system\":[{\"type\":\"text\",\"text\":\"S\",\"cache_control\":{\"type\":\"ephemeral\"}}],\"messages\":[{"
    "\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"caf\\u00e9 \\u2603 "
    "\\ud83d\\ude00\"}]}],\"max_tokens\":10}",
    "{\"messages\":[]}",
    "{}",
    "{\"messages\":\"not an array\",\"system\":7}",
};

static void test_same_as_run_fixed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(fixed_bodies) / sizeof(fixed_bodies[0]); i++) {
        json_t *b = parse(fixed_bodies[i]);
        assert_same_as_run(b, ESTIMATE_CHAT, "chat");
        assert_same_as_run(b, ESTIMATE_MESSAGES, "messages");
        json_decref(b);
    }
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Text of random length mixing 1- to 4-byte code points (never NUL: run
 * stops at a NUL, as its header says). */
static json_t *random_text(void) {
    static const char *const pieces[] = {
        "a", "Z", " ", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xe3\x81\x82", "\n", "0", "\xd0\xbf", ",", "{"};
    char buf[512];
    size_t n = 0, want = next_rand() % 120;
    for (size_t i = 0; i < want; i++) {
        const char *p = pieces[next_rand() % (sizeof(pieces) / sizeof(pieces[0]))];
        size_t l = strlen(p);
        if (n + l >= sizeof(buf)) break;
        memcpy(buf + n, p, l);
        n += l;
    }
    return json_stringn(buf, n);
}

static json_t *random_content(void) {
    if (next_rand() % 2) return random_text();
    json_t *parts = json_array();
    for (uint64_t k = next_rand() % 4; k > 0; k--) {
        if (next_rand() % 4 == 0) json_array_append_new(parts, json_pack("{ss}", "type", "image_url"));
        else json_array_append_new(parts, json_pack("{ssso}", "type", "text", "text", random_text()));
    }
    return parts;
}

static void test_same_as_run_random(void **state) {
    (void)state;
    for (int i = 0; i < 2000; i++) {
        json_t *b = json_object();
        json_t *msgs = json_array();
        for (uint64_t k = next_rand() % 6; k > 0; k--)
            json_array_append_new(msgs, json_pack("{ssso}", "role", "user", "content", random_content()));
        json_object_set_new(b, "messages", msgs);
        if (next_rand() % 3 == 0) json_object_set_new(b, "system", random_content());
        switch (next_rand() % 5) {
        case 0: break;
        case 1: json_object_set_new(b, "max_tokens", json_integer((json_int_t)(next_rand() % 5000))); break;
        case 2: json_object_set_new(b, "max_completion_tokens", json_integer((json_int_t)(next_rand() % 5000))); break;
        case 3:
            json_object_set_new(b, "max_tokens", json_null());
            json_object_set_new(b, "max_completion_tokens", json_integer((json_int_t)(next_rand() % 9)));
            break;
        default: json_object_set_new(b, "max_tokens", json_integer(-(json_int_t)(next_rand() % 3))); break;
        }
        assert_same_as_run(b, ESTIMATE_CHAT, "random chat");
        assert_same_as_run(b, ESTIMATE_MESSAGES, "random messages");
        json_decref(b);
    }
}

static void test_helpers(void **state) {
    (void)state;
    assert_int_equal(estimate_text_tokens(0), 0);
    assert_int_equal(estimate_text_tokens(1), 1);
    assert_int_equal(estimate_text_tokens(4), 1);
    assert_int_equal(estimate_text_tokens(5), 2);
    assert_int_equal(estimate_text_tokens(-3), 0);
    /* An emoji (8 quarters), 'a', NUL and 'b' (1 each). */
    assert_int_equal(estimate_text_quarters("\xf0\x9f\x98\x80"
                                            "a\0b",
                                            7),
                     11);
    /* Han (4), Cyrillic (2); a stray continuation byte weighs nothing and
     * a byte 0xFF one. */
    assert_int_equal(estimate_text_quarters("\xe6\x97\xa5\xd0\xbf\x80\xff", 7), 7);
    estimate e = {-1, -1, -1};
    estimate_request(NULL, ESTIMATE_MESSAGES, &e);
    assert_int_equal(e.input, 0);
    assert_int_equal(e.output, ESTIMATE_DEFAULT_OUTPUT);
}

/* `sluice run` estimates every body as chat, Anthropic's too (style
 * anthropic speaks /v1/messages): an image block there is what Anthropic
 * charges for it, and a partial estimate (it teaches the ratio nothing),
 * as the proxy's /v1/messages estimate of the same body. */
static void run_anthropic_media(void) {
    static const char *const bodies[] = {
        "{\"model\":\"claude\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://x/y.jpg\"}},{\"type\":\"text\",\"text\":"
        "\"describe this\"}]}]}",
        "{\"model\":\"claude\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"document\",\"source\":{\"type\":\"base64\",\"media_type\":\"application/pdf\",\"data\":\"AAAA\"}},{"
        "\"type\":\"text\",\"text\":\"summarize\"}]}]}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        json_t *b = parse(bodies[i]);
        estimate want;
        estimate_request(b, ESTIMATE_MESSAGES, &want);
        json_decref(b);
        run_request rq;
        char err[256];
        assert_int_equal(run_request_parse(bodies[i], strlen(bodies[i]), 1, NULL, &rq, err, sizeof(err)), 0);
        if (rq.input_tokens != want.input || rq.partial != (want.media > 0))
            fail_msg("%s: sluice run estimates input %lld partial %d, /v1/messages %lld partial %d", bodies[i],
                     rq.input_tokens, rq.partial, want.input, want.media > 0);
        run_request_free(&rq);
    }
}

/* Images, audio and files: guessed per API as docs/providers.md says, and
 * counted in media (a partial estimate, which teaches nothing). */
static void test_media_parts(void **state) {
    (void)state;
    static const struct {
        estimate_api api;
        const char *body;
        long long input, media;
    } v[] = {
        {ESTIMATE_CHAT, "{\"messages\":[{\"content\":\"abcd\"}]}", 1, 0},
        {ESTIMATE_CHAT,
         "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\",\"detail\":\"low\"}}]}]}",
         85, 1},
        {ESTIMATE_CHAT,
         "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\",\"detail\":\"auto\"}},{"
         "\"type\":\"input_audio\",\"input_audio\":{\"data\":\"AAAA\",\"format\":\"wav\"}}]}]}",
         1105, 2},
        {ESTIMATE_CHAT, "{\"messages\":[{\"content\":[{\"type\":\"file\",\"file\":{\"file_id\":\"f\"}}]}]}", 0, 1},
        {ESTIMATE_MESSAGES,
         "{\"messages\":[{\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"data\":\"AAAA\"}},{"
         "\"type\":\"text\",\"text\":\"abcd\"}]}]}",
         1601, 1},
        {ESTIMATE_MESSAGES,
         "{\"messages\":[{\"content\":[{\"type\":\"tool_result\",\"content\":[{\"type\":\"image\",\"source\":{}}]},{"
         "\"type\":\"document\",\"source\":{}}]}]}",
         1600, 2},
        /* Another API's part type is nothing of this one's. */
        {ESTIMATE_MESSAGES, "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", 0, 0},
        {ESTIMATE_RESPONSES,
         "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\",\"detail\":"
         "\"low\"},{\"type\":\"input_image\",\"file_id\":\"f\"},{\"type\":\"input_file\",\"file_id\":\"g\"}]}]}",
         85 + 1105, 3},
        /* Input the provider keeps (a previous response's chain, a
         * conversation, a stored prompt) is billed but not in the body:
         * partial. */
        {ESTIMATE_RESPONSES, "{\"input\":\"abcd\",\"previous_response_id\":\"resp_1\"}", 1, 1},
        {ESTIMATE_RESPONSES, "{\"input\":\"abcd\",\"conversation\":\"conv_1\"}", 1, 1},
        {ESTIMATE_RESPONSES, "{\"input\":\"abcd\",\"prompt\":{\"id\":\"pmpt_1\"}}", 1, 1},
        {ESTIMATE_RESPONSES, "{\"input\":\"abcd\",\"previous_response_id\":null,\"conversation\":null}", 1, 0},
        /* An image a function returned (function_call_output parts). */
        {ESTIMATE_RESPONSES,
         "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":\"input_image\","
         "\"image_url\":\"x\"}]}]}",
         1105, 1},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        json_t *b = json_loads(v[i].body, 0, NULL);
        assert_non_null(b);
        estimate e;
        estimate_request(b, v[i].api, &e);
        if (e.input != v[i].input || e.media != v[i].media)
            fail_msg("%s: input %lld media %lld, want %lld %lld", v[i].body, e.input, e.media, v[i].input, v[i].media);
        json_decref(b);
    }
    run_anthropic_media();
}

/* ---- images counted from their size ---- */

static void b64_encode(const unsigned char *in, size_t n, char *out) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[k++] = t[v >> 18 & 63];
        out[k++] = t[v >> 12 & 63];
        out[k++] = i + 1 < n ? t[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[k] = '\0';
}

/* The first bytes of an image of w x h in a format: what the estimate
 * reads of it (the rest of the file does not matter). */
static size_t image_head(const char *fmt, long w, long h, unsigned char *b) {
    memset(b, 0, 64);
    if (!strcmp(fmt, "png")) {
        memcpy(b, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
        for (int i = 0; i < 4; i++)
            b[16 + i] = (unsigned char)(w >> (24 - 8 * i)), b[20 + i] = (unsigned char)(h >> (24 - 8 * i));
        return 33;
    }
    if (!strcmp(fmt, "gif")) {
        memcpy(b, "GIF89a", 6);
        b[6] = (unsigned char)w, b[7] = (unsigned char)(w >> 8), b[8] = (unsigned char)h,
        b[9] = (unsigned char)(h >> 8);
        return 40;
    }
    if (!strcmp(fmt, "webp")) {
        memcpy(b, "RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0", 20);
        for (int i = 0; i < 3; i++)
            b[24 + i] = (unsigned char)((w - 1) >> (8 * i)), b[27 + i] = (unsigned char)((h - 1) >> (8 * i));
        return 40;
    }
    /* JPEG: SOI, an APP0 segment of 16, then SOF0 (length 17, precision 8,
     * height, width). */
    static const unsigned char app0[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F',
                                         0,    1,    1,    0,    0,    1,    0,   1,   0,   0};
    memcpy(b, app0, sizeof(app0));
    unsigned char *f = b + sizeof(app0);
    f[0] = 0xFF, f[1] = 0xC0, f[2] = 0, f[3] = 17, f[4] = 8;
    f[5] = (unsigned char)(h >> 8), f[6] = (unsigned char)h, f[7] = (unsigned char)(w >> 8), f[8] = (unsigned char)w;
    return sizeof(app0) + 20;
}

/* The documented rules, worked by hand: OpenAI scales to fit 2048 x 2048,
 * then the short side to 768, 85 + 170 a 512 px tile; Anthropic
 * width x height / 750, the long edge at most 1568, at most ~1600. */
static void test_image_sizes(void **state) {
    (void)state;
    static const struct {
        estimate_api api;
        const char *fmt, *detail;
        long w, h;
        long long tokens;
    } v[] = {
        {ESTIMATE_CHAT, "png", "auto", 1024, 1024, 765},   /* 768 x 768: 4 tiles */
        {ESTIMATE_CHAT, "jpeg", "high", 1920, 1080, 1105}, /* 1365 x 768: 6 tiles */
        {ESTIMATE_CHAT, "gif", NULL, 512, 512, 255},       /* 1 tile, never scaled up */
        {ESTIMATE_CHAT, "webp", NULL, 4096, 2048, 1105},   /* 2048 x 1024, then 1536 x 768 */
        {ESTIMATE_CHAT, "png", "low", 4096, 4096, 85},
        {ESTIMATE_RESPONSES, "png", NULL, 1024, 1024, 765},
        {ESTIMATE_MESSAGES, "png", NULL, 1000, 1000, 1334}, /* 1 000 000 / 750, up */
        {ESTIMATE_MESSAGES, "jpeg", NULL, 200, 200, 54},
        {ESTIMATE_MESSAGES, "gif", NULL, 2000, 1000, 1600}, /* 1568 x 784: 1639, at most 1600 */
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        unsigned char head[64];
        char b64[128], body[512];
        b64_encode(head, image_head(v[i].fmt, v[i].w, v[i].h, head), b64);
        char detail[32] = "";
        if (v[i].detail) snprintf(detail, sizeof(detail), ",\"detail\":\"%s\"", v[i].detail);
        if (v[i].api == ESTIMATE_CHAT)
            snprintf(
                body, sizeof(body),
                "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/%s;base64,"
                "%s\"%s}}]}]}",
                v[i].fmt, b64, detail);
        else if (v[i].api == ESTIMATE_RESPONSES)
            snprintf(
                body, sizeof(body),
                "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"data:image/%s;"
                "base64,%s\"%s}]}]}",
                v[i].fmt, b64, detail);
        else
            snprintf(body, sizeof(body),
                     "{\"messages\":[{\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":"
                     "\"image/%s\",\"data\":\"%s\"}}]}]}",
                     v[i].fmt, b64);
        json_t *b = json_loads(body, 0, NULL);
        assert_non_null(b);
        estimate e;
        estimate_request(b, v[i].api, &e);
        if (e.input != v[i].tokens || e.media != 1)
            fail_msg("%s %ldx%ld (api %d): %lld tokens, media %lld; want %lld", v[i].fmt, v[i].w, v[i].h, (int)v[i].api,
                     e.input, e.media, v[i].tokens);
        json_decref(b);
    }
    /* Bytes that are no image, or cut short: the usual largest. */
    const char *bad[] = {
        "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/"
        "png;base64,AAAA\"}}]}]}",
        "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/"
        "png;base64,!!\"}}]}]}",
        "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png,rawbytes\"}}]}]}",
        "{\"messages\":[{\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"/9j/\"}}]}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *b = json_loads(bad[i], 0, NULL);
        assert_non_null(b);
        estimate e;
        estimate_request(b, ESTIMATE_CHAT, &e);
        if (e.input != 1105) fail_msg("%s: %lld tokens, want the usual largest 1105", bad[i], e.input);
        json_decref(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_media_parts),
        cmocka_unit_test(test_image_sizes),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_same_as_run_fixed),
        cmocka_unit_test(test_same_as_run_random),
        cmocka_unit_test(test_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
