/* estimate: admission estimates from request bodies. See estimate.h. */
#include "estimate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The weight of an ASCII digit or punctuation mark, in quarter tokens
 * (a letter, a space or a control character weighs 1). */
#define PUNCT_QUARTERS 2

/* A code point's weight in quarter tokens, from its UTF-8 lead byte: for
 * one byte (ASCII) 1, or PUNCT_QUARTERS for a digit or punctuation
 * (0x21..0x40, 0x5B..0x60, 0x7B..0x7E: the tokenizers split numbers into
 * groups of a few digits and most marks into tokens of their own); 2 for
 * two bytes (Latin accents, Greek, Cyrillic, Hebrew, Arabic), 4 for three
 * (CJK, kana, Hangul, Indic scripts, Thai), 8 for four (emoji, rare Han).
 * A byte that is neither a lead byte nor a continuation (0xF8..0xFF)
 * weighs as one byte. */
static long long lead_quarters(unsigned char b) {
    if ((b >= 0x21 && b <= 0x40) || (b >= 0x5B && b <= 0x60) || (b >= 0x7B && b <= 0x7E)) return PUNCT_QUARTERS;
    if (b < 0xC0) return 1;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 4;
    if (b < 0xF8) return 8;
    return 1;
}

long long estimate_text_quarters(const char *s, size_t len) {
    long long q = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)s[i];
        if ((b & 0xC0) != 0x80) q += lead_quarters(b);
    }
    return q;
}

long long estimate_text_tokens(long long quarters) { return quarters > 0 ? (quarters + 3) / 4 : 0; }

static long long string_quarters(const json_t *v) {
    return json_is_string(v) ? estimate_text_quarters(json_string_value(v), json_string_length(v)) : 0;
}

/* The punctuation of an object or array of n members: its two brackets
 * and n - 1 commas. */
static long long container_marks(size_t n) { return PUNCT_QUARTERS * (n ? (long long)n + 1 : 2); }

/* The weight of a JSON value written as compact JSON: a string's text
 * (without the escapes JSON would add) and its quotes, a number's
 * shortest text, the punctuation of objects and arrays (PUNCT_QUARTERS a
 * mark), and their keys. Tool definitions and tool-call arguments given as JSON
 * are counted so: the providers render them into the prompt. A value that
 * is not there (NULL) and levels deeper than ESTIMATE_JSON_DEPTH weigh
 * nothing. */
static long long json_quarters(const json_t *v, int depth) {
    char num[64];
    long long n = 0;
    size_t i;
    const char *key;
    json_t *x;
    if (!v || depth > ESTIMATE_JSON_DEPTH) return 0;
    switch (json_typeof(v)) {
    case JSON_STRING: return string_quarters(v) + 2 * PUNCT_QUARTERS;
    case JSON_INTEGER:
        n = snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return n > 0 ? estimate_text_quarters(num, (size_t)n) : 0;
    case JSON_REAL:
        /* The shortest of 15 and 17 digits that reads back as the value
         * (0.1, not 0.10000000000000001). */
        n = snprintf(num, sizeof(num), "%.15g", json_real_value(v));
        if (n > 0 && strtod(num, NULL) != json_real_value(v))
            n = snprintf(num, sizeof(num), "%.17g", json_real_value(v));
        return n > 0 ? estimate_text_quarters(num, (size_t)n) : 0;
    case JSON_TRUE: return 4;
    case JSON_FALSE: return 5;
    case JSON_NULL: return 4;
    case JSON_OBJECT:
        /* Braces, commas; each key's quotes and colon. */
        n = container_marks(json_object_size(v));
        json_object_foreach((json_t *)v, key, x) {
            n += estimate_text_quarters(key, strlen(key)) + 3 * PUNCT_QUARTERS + json_quarters(x, depth + 1);
        }
        return n;
    case JSON_ARRAY:
        n = container_marks(json_array_size(v));
        json_array_foreach(v, i, x) n += json_quarters(x, depth + 1);
        return n;
    }
    return 0;
}

/* The parts a prompt's text does not weigh: guessed (estimate.media). */
typedef struct media_guess {
    long long tokens, parts;
} media_guess;

/* An image part's guess: OpenAI's "low" detail, else what the API's
 * provider charges an image at its usual largest (estimate.h). */
/* ---- an image's size from its bytes ---- */

/* A base64 reader over a string, decoding on demand (the estimate never
 * allocates): next() gives a byte, or -1 at the end or at a character
 * that is not base64. At most IMAGE_SCAN_MAX bytes are read. */
#define IMAGE_SCAN_MAX (1u << 20)

typedef struct b64_reader {
    const char *s;
    size_t len, pos, out;
    unsigned acc;
    int bits;
} b64_reader;

static int b64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

static int b64_next(b64_reader *r) {
    if (r->out >= IMAGE_SCAN_MAX) return -1;
    while (r->bits < 8) {
        if (r->pos >= r->len) return -1;
        int v = b64_value(r->s[r->pos++]);
        if (v < 0) return -1;
        r->acc = (r->acc << 6) | (unsigned)v;
        r->bits += 6;
    }
    r->bits -= 8;
    r->out++;
    return (int)((r->acc >> r->bits) & 0xFFu);
}

/* n bytes into b; 0, or -1 when the data ends first. */
static int b64_read(b64_reader *r, unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int c = b64_next(r);
        if (c < 0) return -1;
        b[i] = (unsigned char)c;
    }
    return 0;
}

static long be16(const unsigned char *b) { return (long)b[0] << 8 | b[1]; }
static long le16(const unsigned char *b) { return (long)b[1] << 8 | b[0]; }
static long le24(const unsigned char *b) { return (long)b[2] << 16 | (long)b[1] << 8 | b[0]; }
static long be32(const unsigned char *b) { return (long)b[0] << 24 | (long)b[1] << 16 | (long)b[2] << 8 | b[3]; }

/* A JPEG's size: its first start-of-frame segment (SOF0..SOF15 but DHT,
 * JPG and DAC), after segments skipped by their lengths. */
static int jpeg_size(b64_reader *r, long *w, long *h) {
    unsigned char b[7];
    for (;;) {
        int c = b64_next(r);
        if (c < 0) return -1;
        if (c != 0xFF) continue;
        int m;
        while ((m = b64_next(r)) == 0xFF) {}
        if (m < 0) return -1;
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* no length */
        if (b64_read(r, b, 2) != 0) return -1;
        long seglen = be16(b);
        if (seglen < 2) return -1;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (b64_read(r, b, 5) != 0) return -1;
            *h = be16(b + 1);
            *w = be16(b + 3);
            return 0;
        }
        for (long k = 2; k < seglen; k++)
            if (b64_next(r) < 0) return -1;
    }
}

/* The pixel size of an image from the start of its base64 bytes: PNG,
 * GIF, WebP (VP8, VP8L, VP8X) or JPEG. 0, or -1 when it cannot be read. */
static int image_size(const char *b64, size_t len, long *w, long *h) {
    b64_reader r = {b64, len, 0, 0, 0, 0};
    unsigned char b[30];
    if (b64_read(&r, b, 2) != 0) return -1;
    if (b[0] == 0xFF && b[1] == 0xD8) return jpeg_size(&r, w, h);
    if (b64_read(&r, b + 2, 28) != 0) return -1;
    if (!memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4)) {
        *w = be32(b + 16), *h = be32(b + 20);
    } else if (!memcmp(b, "GIF8", 4)) {
        *w = le16(b + 6), *h = le16(b + 8);
    } else if (!memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) {
        if (!memcmp(b + 12, "VP8X", 4)) *w = le24(b + 24) + 1, *h = le24(b + 27) + 1;
        else if (!memcmp(b + 12, "VP8L", 4)) {
            unsigned long v = (unsigned long)b[21] | (unsigned long)b[22] << 8 | (unsigned long)b[23] << 16 |
                              (unsigned long)b[24] << 24;
            *w = (long)(v & 0x3FFFu) + 1, *h = (long)((v >> 14) & 0x3FFFu) + 1;
        } else if (!memcmp(b + 12, "VP8 ", 4)) *w = le16(b + 26) & 0x3FFF, *h = le16(b + 28) & 0x3FFF;
        else return -1;
    } else {
        return -1;
    }
    return *w > 0 && *h > 0 ? 0 : -1;
}

/* The base64 bytes of a data URL ("data:image/png;base64,...") or NULL. */
static const char *data_url_bytes(const char *url, size_t *len) {
    if (!url || strncmp(url, "data:", 5) != 0) return NULL;
    const char *comma = strchr(url, ',');
    if (!comma || comma - url < 12 || strncmp(comma - 7, ";base64", 7) != 0) return NULL;
    *len = strlen(comma + 1);
    return comma + 1;
}

/* OpenAI's tile rule (the images and vision guide, "Calculating costs"):
 * scaled to fit 2048 x 2048, then so that the short side is 768 (never
 * up), 85 + 170 per 512 px tile. */
static long long openai_image_tokens(double w, double h) {
    double f = fmin(1.0, 2048.0 / fmax(w, h));
    w *= f, h *= f;
    f = fmin(1.0, 768.0 / fmin(w, h));
    w *= f, h *= f;
    return ESTIMATE_IMAGE_LOW + ESTIMATE_IMAGE_TILE * (long long)(ceil(w / 512) * ceil(h / 512));
}

/* Anthropic's (the vision page): width x height / 750, the long edge
 * scaled to at most 1568 px first, and never above about 1600 tokens. */
static long long anthropic_image_tokens(double w, double h) {
    double f = fmin(1.0, 1568.0 / fmax(w, h));
    long long t = (long long)ceil(w * f * h * f / 750);
    return t < ESTIMATE_IMAGE_ANTHROPIC ? t : ESTIMATE_IMAGE_ANTHROPIC;
}

/* An image part's guess: from its size when its bytes are in the body (a
 * data URL, a base64 source), else what its provider charges an image at
 * its usual largest; OpenAI's "low" detail is 85 whatever the size. */
static long long image_tokens(const json_t *part, estimate_api api) {
    const char *b64 = NULL;
    size_t len = 0;
    long w = 0, h = 0;
    if (api == ESTIMATE_MESSAGES) {
        /* {"type":"image","source":{"type":"base64","data":...}} */
        const json_t *src = json_object_get(part, "source");
        const char *type = json_string_value(json_object_get(src, "type"));
        if (type && !strcmp(type, "base64")) {
            b64 = json_string_value(json_object_get(src, "data"));
            len = b64 ? json_string_length(json_object_get(src, "data")) : 0;
        }
        if (b64 && image_size(b64, len, &w, &h) == 0) return anthropic_image_tokens((double)w, (double)h);
        return ESTIMATE_IMAGE_ANTHROPIC;
    }
    /* chat: {"type":"image_url","image_url":{"url":...,"detail":...}};
     * responses: {"type":"input_image","image_url":...,"detail":...}. */
    const json_t *detail = json_object_get(part, "detail");
    const json_t *img = json_object_get(part, "image_url");
    if (!detail && json_is_object(img)) detail = json_object_get(img, "detail");
    const char *d = json_string_value(detail);
    if (d && !strcmp(d, "low")) return ESTIMATE_IMAGE_LOW;
    b64 = data_url_bytes(json_string_value(json_is_object(img) ? json_object_get(img, "url") : img), &len);
    if (b64 && image_size(b64, len, &w, &h) == 0) return openai_image_tokens((double)w, (double)h);
    return ESTIMATE_IMAGE_HIGH;
}

/* Whether a part of this type is one the estimate cannot weigh, in the
 * API's own part types: an image (1), audio or a file (2), or neither
 * (0). Chat: image_url, input_audio, file; Anthropic's messages: image,
 * document; the Responses API: input_image, input_audio, input_file. */
static int media_kind(const char *type, estimate_api api) {
    static const struct {
        estimate_api api;
        const char *type;
        int kind;
    } kinds[] = {
        {ESTIMATE_CHAT, "image_url", 1},
        {ESTIMATE_CHAT, "input_audio", 2},
        {ESTIMATE_CHAT, "file", 2},
        {ESTIMATE_MESSAGES, "image", 1},
        {ESTIMATE_MESSAGES, "document", 2},
        {ESTIMATE_RESPONSES, "input_image", 1},
        {ESTIMATE_RESPONSES, "input_audio", 2},
        {ESTIMATE_RESPONSES, "input_file", 2},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i].api == api && !strcmp(type, kinds[i].type)) return kinds[i].kind;
    return 0;
}

/* A content value: a string, or an array of parts whose "text" counts
 * (OpenAI's content parts, Anthropic's blocks, the Responses API's
 * input_text parts); of Anthropic's tool_use blocks the name and the
 * input, of its tool_result blocks the content (a string or blocks, the
 * same way, one level). Images, audio and files are guessed into *m. */
static long long content_quarters_at(const json_t *content, int depth, estimate_api api, media_guess *m) {
    if (json_is_string(content)) return string_quarters(content);
    long long n = 0;
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        n += string_quarters(json_object_get(part, "text"));
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!type) continue;
        if (!strcmp(type, "tool_use")) {
            n += string_quarters(json_object_get(part, "name")) + json_quarters(json_object_get(part, "input"), 0);
        } else if (!strcmp(type, "tool_result") && depth == 0) {
            n += content_quarters_at(json_object_get(part, "content"), depth + 1, api, m);
        } else {
            /* A chat body may be Anthropic's (`sluice run` estimates
             * every body as chat): its image and document blocks, types
             * no chat part has, are guessed as Anthropic's. */
            estimate_api mapi = api;
            int kind = media_kind(type, api);
            if (!kind && api == ESTIMATE_CHAT && (kind = media_kind(type, ESTIMATE_MESSAGES)) != 0)
                mapi = ESTIMATE_MESSAGES;
            if (kind == 1) m->tokens += image_tokens(part, mapi);
            if (kind) m->parts++;
        }
    }
    return n;
}

static long long content_quarters(const json_t *content, estimate_api api, media_guess *m) {
    return content_quarters_at(content, 0, api, m);
}

/* A prompt or embeddings input: a string, an array of strings, an array
 * of token ids (each a token), or an array of such arrays. Returns quarter
 * tokens in *quarters and exact tokens in *tokens. Each string of an array
 * is an input of its own, tokenized apart: it is rounded up on its own
 * (into *tokens), as a provider counts each of them. */
static void prompt_size(const json_t *v, long long *quarters, long long *tokens) {
    size_t i;
    json_t *x;
    if (json_is_string(v)) {
        *quarters += string_quarters(v);
        return;
    }
    json_array_foreach(v, i, x) {
        if (json_is_string(x)) {
            *tokens += estimate_text_tokens(string_quarters(x));
        } else if (json_is_integer(x)) {
            (*tokens)++;
        } else if (json_is_array(x)) {
            size_t j;
            json_t *t;
            json_array_foreach(x, j, t) {
                if (json_is_integer(t)) (*tokens)++;
            }
        }
    }
}

/* The prompts of a completions body: each string or token array of an
 * array of them is a prompt of its own, answered with completions of its
 * own ("n: how many completions to generate for each prompt"); a string
 * or one token array (an array of numbers) is one. */
static long long prompts(const json_t *v) {
    long long k = 0;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (json_is_string(x) || json_is_array(x)) k++;
    }
    return k > 1 ? k : 1;
}

/* The maximum output a body asks for: the first of keys that is an
 * integer (a later key is looked at only when an earlier one is not an
 * integer at all), when positive, at most ESTIMATE_MAX_OUTPUT (so that
 * times the completions and plus the input it cannot overflow); else the
 * default. */
static long long max_output(const json_t *body, const char *k1, const char *k2) {
    json_t *mt = json_object_get(body, k1);
    if (!json_is_integer(mt) && k2) mt = json_object_get(body, k2);
    if (json_is_integer(mt) && json_integer_value(mt) > 0)
        return json_integer_value(mt) > ESTIMATE_MAX_OUTPUT ? ESTIMATE_MAX_OUTPUT : (long long)json_integer_value(mt);
    return ESTIMATE_DEFAULT_OUTPUT;
}

/* The completions a body asks for: the larger of n and best_of, 1 to
 * ESTIMATE_MAX_CHOICES. */
static long long choices(const json_t *body) {
    long long c = 1;
    const char *keys[] = {"n", "best_of"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(body, keys[i]);
        if (json_is_integer(v) && json_integer_value(v) > c) c = (long long)json_integer_value(v);
    }
    return c > ESTIMATE_MAX_CHOICES ? ESTIMATE_MAX_CHOICES : c;
}

void estimate_request(const json_t *body, estimate_api api, estimate *out) {
    long long quarters = 0, tokens = 0;
    media_guess m = {0, 0};
    size_t i;
    json_t *item;
    out->input = out->output = out->media = 0;
    if (!json_is_object(body)) body = NULL;
    switch (api) {
    case ESTIMATE_CHAT:
    case ESTIMATE_MESSAGES:
        /* "system": Anthropic's system prompt (a string or text blocks). */
        quarters = content_quarters(json_object_get(body, "system"), api, &m);
        json_array_foreach(json_object_get(body, "messages"), i, item) {
            quarters += content_quarters(json_object_get(item, "content"), api, &m);
            /* An assistant's tool calls (chat: tool_calls, the legacy
             * function_call), as JSON. */
            quarters += json_quarters(json_object_get(item, "tool_calls"), 0);
            quarters += json_quarters(json_object_get(item, "function_call"), 0);
        }
        /* The tools offered (chat and messages: tools; chat's legacy
         * functions), as JSON. */
        quarters += json_quarters(json_object_get(body, "tools"), 0);
        quarters += json_quarters(json_object_get(body, "functions"), 0);
        out->output = max_output(body, "max_tokens", "max_completion_tokens");
        if (api == ESTIMATE_CHAT) out->output *= choices(body);
        break;
    case ESTIMATE_COMPLETIONS:
        prompt_size(json_object_get(body, "prompt"), &quarters, &tokens);
        quarters += string_quarters(json_object_get(body, "suffix"));
        out->output = max_output(body, "max_tokens", NULL) * choices(body);
        /* Every prompt of a batch is answered up to max_tokens (n times),
         * at most ESTIMATE_MAX_OUTPUT x ESTIMATE_MAX_CHOICES in all. */
        {
            long long k = prompts(json_object_get(body, "prompt"));
            long long cap = ESTIMATE_MAX_OUTPUT * ESTIMATE_MAX_CHOICES;
            out->output = out->output > cap / k ? cap : out->output * k;
        }
        break;
    case ESTIMATE_EMBEDDINGS: prompt_size(json_object_get(body, "input"), &quarters, &tokens); break;
    case ESTIMATE_RESPONSES: {
        json_t *input = json_object_get(body, "input");
        quarters = string_quarters(json_object_get(body, "instructions")) + string_quarters(input);
        json_array_foreach(input, i, item) {
            quarters += content_quarters(json_object_get(item, "content"), api, &m);
            /* A tool's output: a string, or (function_call_output since
             * 2025-09) input_text, input_image and input_file parts. */
            quarters += content_quarters(json_object_get(item, "output"), api, &m);
            /* A function call of the model's: its name and arguments. */
            quarters +=
                string_quarters(json_object_get(item, "name")) + string_quarters(json_object_get(item, "arguments"));
        }
        quarters += json_quarters(json_object_get(body, "tools"), 0);
        /* A conversation kept by the provider (previous_response_id,
         * conversation) or a stored prompt (prompt): input the body does
         * not hold, billed as input. The estimate is partial: the count
         * of such a request says nothing of how its text weighs. */
        {
            const json_t *conv = json_object_get(body, "conversation"), *prompt = json_object_get(body, "prompt");
            if (json_is_string(json_object_get(body, "previous_response_id")) || (conv && !json_is_null(conv)) ||
                (prompt && !json_is_null(prompt)))
                m.parts++;
        }
        out->output = max_output(body, "max_output_tokens", NULL);
        break;
    }
    }
    out->input = estimate_text_tokens(quarters) + tokens + m.tokens;
    out->media = m.parts;
}
