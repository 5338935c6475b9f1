/* mock_embeddings: the embeddings routes of the mock provider (Azure
 * POST /openai/deployments/<name>/embeddings, OpenAI POST /v1/embeddings
 * and /openai/v1/embeddings): the checks of "input", the prompt tokens, and
 * an answer in OpenAI's shape (docs/mock.md, "Embeddings"). Admission is
 * the front door's of mock_openai.c; an embedding has no output, so the
 * charge is the prompt tokens under either provider's rule. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* OpenAI's limits on a request: inputs per request, vector size. */
#define EMB_MAX_INPUTS 2048
#define EMB_MAX_DIMENSIONS 3072
/* The length of the mock's vectors when "dimensions" is not given: small,
 * since nothing reads them. */
#define EMB_DIMENSIONS 8

/* The tokens of one token array (every element an integer); -1 when it is
 * empty or holds anything else. */
static long long token_array(json_t *a) {
    size_t i;
    json_t *t;
    if (json_array_size(a) == 0) return -1;
    json_array_foreach(a, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0) return -1;
    }
    return (long long)json_array_size(a);
}

/* The prompt tokens of "input" and its number of inputs: a string, an
 * array of strings, an array of token integers (one input), or an array of
 * token arrays. Each string is its mock_text_milli() rounded up, each token
 * integer one. -1 when input has none of these forms, or holds an empty
 * string or array. */
static long long input_tokens(const mock *m, json_t *input, size_t *count) {
    size_t i;
    json_t *x;
    long long total = 0;
    *count = 1;
    if (json_is_string(input)) {
        long long p = mock_text_milli(m, json_string_value(input));
        return p > 0 ? (long long)mock_tokens(p) : -1;
    }
    if (!json_is_array(input) || json_array_size(input) == 0 || json_array_size(input) > EMB_MAX_INPUTS) return -1;
    json_t *first = json_array_get(input, 0);
    if (json_is_integer(first)) return token_array(input);
    json_array_foreach(input, i, x) {
        long long t;
        if (json_is_string(first) && json_is_string(x)) {
            long long p = mock_text_milli(m, json_string_value(x));
            t = p > 0 ? (long long)mock_tokens(p) : -1;
        } else if (json_is_array(first) && json_is_array(x)) {
            t = token_array(x);
        } else {
            return -1;
        }
        if (t < 0) return -1;
        total += t;
    }
    *count = json_array_size(input);
    return total;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The vector as OpenAI's base64 encoding carries it: the little-endian
 * float32 values, base64-encoded. */
static json_t *vector_base64(const float *v, size_t dims) {
    size_t n = dims * 4, k = 0;
    unsigned char *raw = malloc(n);
    char *out = malloc((n + 2) / 3 * 4 + 1);
    json_t *j = NULL;
    if (raw && out) {
        for (size_t i = 0; i < dims; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int b = 0; b < 4; b++) raw[i * 4 + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
        for (size_t i = 0; i < n; i += 3) {
            uint32_t w =
                (uint32_t)raw[i] << 16 | (i + 1 < n ? (uint32_t)raw[i + 1] << 8 : 0) | (i + 2 < n ? raw[i + 2] : 0);
            out[k++] = b64[w >> 18 & 63];
            out[k++] = b64[w >> 12 & 63];
            out[k++] = i + 1 < n ? b64[w >> 6 & 63] : '=';
            out[k++] = i + 2 < n ? b64[w & 63] : '=';
        }
        out[k] = '\0';
        j = json_string(out);
    }
    free(raw);
    free(out);
    return j;
}

/* {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...]}],
 * "model":..,"usage":{"prompt_tokens":P,"total_tokens":P}}; every input gets
 * the same small fixed vector. NULL when out of memory. */
static json_t *embeddings_body(const char *model, size_t count, size_t dims, int base64, uint64_t prompt) {
    float *v = malloc(dims * sizeof(*v));
    json_t *data = json_array(), *body = NULL;
    if (!v || !data) goto out;
    for (size_t i = 0; i < dims; i++) v[i] = (float)((double)((i * 37) % 100) / 100.0 - 0.5);
    for (size_t i = 0; i < count; i++) {
        json_t *vec;
        if (base64) {
            vec = vector_base64(v, dims);
        } else {
            vec = json_array();
            for (size_t d = 0; vec && d < dims; d++)
                if (json_array_append_new(vec, json_real(v[d])) != 0) {
                    json_decref(vec);
                    vec = NULL;
                }
        }
        json_t *item = json_pack("{sssIso}", "object", "embedding", "index", (json_int_t)i, "embedding", vec);
        if (!item || json_array_append_new(data, item) != 0) goto out;
    }
    body = json_pack("{sssOsss{sIsI}}", "object", "list", "data", data, "model", model, "usage", "prompt_tokens",
                     (json_int_t)prompt, "total_tokens", (json_int_t)prompt);
out:
    json_decref(data);
    free(v);
    return body;
}

/* The body-dependent part of both embeddings routes (see chat() in
 * mock_openai.c for where the deployment comes from). */
static void embeddings(mock_call *c, const char *deployment) {
    mock *m = c->m;
    char name[MOCK_NAME_MAX + 1];
    json_t *body = mock_oai_body(c, deployment, name, sizeof(name));
    if (!body) return;
    json_t *input = json_object_get(body, "input");
    json_t *fmt = json_object_get(body, "encoding_format"), *dim = json_object_get(body, "dimensions");
    const char *format = json_string_value(fmt);
    size_t count = 0;
    int missing = !input || json_is_null(input);
    long long tokens = missing ? -1 : input_tokens(c->m, input, &count);
    int fmt_bad = fmt && !json_is_null(fmt) && (!format || (strcmp(format, "float") && strcmp(format, "base64")));
    int base64 = format && !strcmp(format, "base64");
    long long dims = EMB_DIMENSIONS;
    if (dim && !json_is_null(dim)) dims = json_is_integer(dim) ? json_integer_value(dim) : -1;
    json_decref(body);
    if (missing) {
        mock_oai_bad_request(c, "input", "Missing required parameter: 'input'.");
        return;
    }
    if (tokens < 0) {
        mock_oai_bad_request(c, "input",
                             "'$.input' is invalid: it must be a non-empty string, an array of at most %d "
                             "non-empty strings, an array of token integers, or an array of non-empty token "
                             "arrays.",
                             EMB_MAX_INPUTS);
        return;
    }
    if (fmt_bad) {
        mock_oai_bad_request(c, "encoding_format", "'encoding_format' must be 'float' or 'base64'.");
        return;
    }
    if (dims < 1 || dims > EMB_MAX_DIMENSIONS) {
        mock_oai_bad_request(c, "dimensions", "'dimensions' must be an integer between 1 and %d.", EMB_MAX_DIMENSIONS);
        return;
    }
    uint64_t prompt = (uint64_t)tokens, charge = mock_oai_charge(c, prompt, 0);
    if (mock_oai_admit(c, charge) != 0) return;
    uint64_t service = mock_rng_range(m->rng, m->opt.service_ms_min, m->opt.service_ms_max);
    mock_charge ch = {.tokens = charge, .charged = charge, .reported = prompt};
    mock_call_finish(c, 200, MOCK_ACCEPTED, embeddings_body(name, count, (size_t)dims, base64, prompt), &ch,
                     service + m->opt.slow_ms);
}

void mock_route_azure_embeddings(mock_call *c, const char *name) {
    mock_oai_style(c, MOCK_AZURE, "Embeddings_Create");
    embeddings(c, name);
}

void mock_route_openai_embeddings(mock_call *c, const char *name) {
    (void)name;
    mock_oai_style(c, MOCK_OPENAI, "Embeddings_Create");
    embeddings(c, NULL);
}
