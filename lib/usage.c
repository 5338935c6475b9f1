/* usage: token usage from a provider response body. See usage.h. */
#include "usage.h"

#include <jansson.h>
#include <string.h>

/* A count above this is no provider's usage (sl_settle_usage() refuses
 * one: SLUICE_AMOUNT_MAX); it would overflow the sums below. */
#define USAGE_COUNT_MAX 1000000000000000LL

typedef struct tally {
    long long total, input, output, cache_read, cache_write; /* -1 unseen; the largest seen */
    int absurd;                                              /* a count above USAGE_COUNT_MAX was seen */
} tally;

static void keep_max(tally *t, long long *slot, json_t *v) {
    if (!json_is_integer(v)) return;
    json_int_t n = json_integer_value(v);
    if (n > USAGE_COUNT_MAX) t->absurd = 1;
    else if (n >= 0 && n > *slot) *slot = (long long)n;
}

static void tally_usage(tally *t, json_t *u) {
    if (!json_is_object(u)) return;
    keep_max(t, &t->total, json_object_get(u, "total_tokens"));
    /* OpenAI chat/completions: prompt + completion; Anthropic and the
     * Responses API: input (+ cache creation, which Anthropic bills as
     * input) + output. */
    long long in = -1, out = -1, cache = -1, read = -1;
    keep_max(t, &in, json_object_get(u, "prompt_tokens"));
    keep_max(t, &in, json_object_get(u, "input_tokens"));
    keep_max(t, &cache, json_object_get(u, "cache_creation_input_tokens"));
    keep_max(t, &out, json_object_get(u, "completion_tokens"));
    keep_max(t, &out, json_object_get(u, "output_tokens"));
    /* Reads from the prompt cache: Anthropic reports them beside
     * input_tokens (which excludes them), OpenAI inside prompt_tokens
     * (prompt_tokens_details.cached_tokens; the Responses API's
     * input_tokens_details). The input is always all of the prompt. */
    int beside = 0;
    keep_max(t, &read, json_object_get(u, "cache_read_input_tokens"));
    if (read >= 0) beside = 1;
    keep_max(t, &read, json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    keep_max(t, &read, json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens"));
    if (in >= 0 && cache > 0) in += cache;
    if (in >= 0 && beside && read > 0) in += read;
    if (in > t->input) t->input = in;
    if (out > t->output) t->output = out;
    if (read > t->cache_read) t->cache_read = read;
    if (cache > t->cache_write) t->cache_write = cache;
}

static void tally_event(tally *t, json_t *root) {
    if (!json_is_object(root)) return;
    tally_usage(t, json_object_get(root, "usage"));
    json_t *inner = json_object_get(root, "response"); /* Responses API events */
    if (json_is_object(inner)) tally_usage(t, json_object_get(inner, "usage"));
    inner = json_object_get(root, "message"); /* Anthropic message_start */
    if (json_is_object(inner)) tally_usage(t, json_object_get(inner, "usage"));
}

static void tally_json(tally *t, const char *s, size_t n) {
    json_error_t err;
    json_t *root = json_loadb(s, n, JSON_DECODE_ANY, &err);
    if (!root) return;
    tally_event(t, root);
    json_decref(root);
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Each `data:` line of an event stream is one JSON document (multi-line
 * data fields are not used by the providers for usage events). */
static void tally_sse(tally *t, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - s) : n;
        size_t b = i, e = end;
        if (e - b >= 5 && memcmp(s + b, "data:", 5) == 0) {
            b += 5;
            while (b < e && is_ws(s[b])) b++;
            while (e > b && is_ws(s[e - 1])) e--;
            if (e > b && s[b] == '{') tally_json(t, s + b, e - b);
        }
        i = end + 1;
    }
}

int usage_split(const char *body, size_t len, usage_rec *out) {
    *out = USAGE_REC_UNKNOWN;
    if (!body || len == 0 || len > USAGE_MAX_BODY) return -1;
    tally t = {-1, -1, -1, -1, -1, 0};
    size_t i = 0;
    while (i < len && is_ws(body[i])) i++;
    if (i < len && body[i] == '{') tally_json(&t, body + i, len - i);
    else tally_sse(&t, body, len);
    if (t.absurd) return -1; /* the body's usage is no count: the estimate stands */
    if (t.input >= 0 || t.output >= 0) {
        out->input = t.input > 0 ? t.input : 0;
        out->output = t.output > 0 ? t.output : 0;
        out->cache_read = t.cache_read > 0 ? (t.cache_read < out->input ? t.cache_read : out->input) : 0;
        out->cache_write =
            t.cache_write > 0
                ? (t.cache_write < out->input - out->cache_read ? t.cache_write : out->input - out->cache_read)
                : 0;
    }
    /* The combined count: all of the prompt and the output, which is what
     * total_tokens says where a provider sends it. A total above the two
     * with the prompt known is output the parts leave out: Gemini's
     * OpenAI-compatible usage counts the thinking tokens in total_tokens
     * and not in completion_tokens (as OpenAI's completion_tokens counts
     * its reasoning tokens); the split then still adds up, as
     * sl_settle_usage() and the settles' input and output need. */
    if (t.input >= 0 || t.output >= 0) out->tokens = out->input + out->output;
    if (t.total > out->tokens) {
        if (t.input >= 0) out->output = t.total - out->input;
        out->tokens = t.total;
    }
    return out->tokens >= 0 ? 0 : -1;
}

long long usage_tokens(const char *body, size_t len) {
    usage_rec u;
    return usage_split(body, len, &u) == 0 ? u.tokens : -1;
}
