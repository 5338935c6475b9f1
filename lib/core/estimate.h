/* estimate: the tokens a provider charges a request at admission, from its
 * JSON body, before it is sent.
 *
 * One rule for every caller (the proxy and `sluice run`): the prompt's text
 * is weighed by script, from each code point's UTF-8 length: a quarter
 * token for an ASCII letter, space or control character, half a token for
 * an ASCII digit or punctuation mark, half a token for two bytes (Latin
 * accents, Greek, Cyrillic, Hebrew, Arabic), one for three (Han, kana,
 * Hangul, Indic scripts, Thai), two for four (emoji); the sum is rounded
 * up. Measured against three providers' tokenizers (docs/providers.md,
 * "The prompt estimate"), this is at most 25 % below their count for
 * English, code, JSON, logs, CSV and CJK text (often above it), and
 * further below for Greek and Arabic on the older tokenizers; the
 * calibrated estimates learn the rest from the usage. The output
 * is the request's maximum output (max_tokens, else max_completion_tokens;
 * the Responses API's max_output_tokens), 16 when it gives none (OpenAI's
 * legacy default, and the mock's), times the completions asked for (n,
 * best_of) when more than one. Embeddings have no output.
 *
 * What counts as prompt text, per API:
 *   chat        the "content" of every message (a string, or the "text"
 *               of its parts), and a top-level "system" (below); the
 *               assistant's "tool_calls" and legacy "function_call", and
 *               the "tools" (and legacy "functions") offered, as JSON
 *   messages    the same: Anthropic's "system" (a string or text blocks)
 *               and the messages' content strings or text blocks; of a
 *               tool_use block its name and input (as JSON), of a
 *               tool_result block its content; the "tools", as JSON
 *   completions "prompt" (a string, strings, or token arrays: one token a
 *               number; each string of a list rounded up on its own) and
 *               "suffix"
 *   embeddings  "input" (the same forms as prompt)
 *   responses   "instructions" and "input" (a string, or items whose
 *               "content" is a string or text parts, tool outputs'
 *               "output" strings, function calls' "name" and
 *               "arguments"); the "tools", as JSON
 * JSON is weighed as its compact text would be (keys, strings without
 * their escapes, numbers, punctuation), by the same weights: the providers render tools into the
 * prompt, in forms of their own (Anthropic adds a tool-use system prompt
 * of a few hundred tokens, which the calibrated estimates learn).
 *
 * Images, audio and files are guessed, not weighed (their bytes are no
 * text): an image part (chat's image_url, the Responses API's
 * input_image, Anthropic's image block) as what its provider charges an
 * image at its usual largest, ESTIMATE_IMAGE_*; audio and files (PDF
 * documents) as nothing. out->media counts such parts: an estimate with
 * any is partial, and the proxy marks it so (engine_req.partial), since
 * the provider's count of such a request says nothing of how its text
 * weighs: learned from, a mix of them would set the ratio of every
 * request to theirs. An estimate below what the provider counted is
 * charged at settle (an overrun), never refunded.
 *
 * `sluice run` estimates with this too (agent/cli/run_input.c); the unit
 * test checks it against an independent count on 2000 random bodies.
 *
 * Depends on jansson only. Pure and thread-safe; never allocates. */
#ifndef SLUICE_ESTIMATE_H
#define SLUICE_ESTIMATE_H

#include <jansson.h>

/* The max output assumed when a request gives none. */
#define ESTIMATE_DEFAULT_OUTPUT 16
/* The largest max output an estimate takes from a body (larger ones are
 * taken as this: far above any model's, and no sum overflows). */
#define ESTIMATE_MAX_OUTPUT 1000000000000LL
/* JSON nested deeper than this in tools and tool calls weighs nothing. */
#define ESTIMATE_JSON_DEPTH 64
/* The most completions (n, best_of) an estimate multiplies by. */
#define ESTIMATE_MAX_CHOICES 128
/* An image part whose size is not in the body (a URL, a file id):
 * OpenAI's "low" detail (85 tokens); its "high" or "auto" detail at 1105
 * tokens, a 16:9 screenshot or the documentation's 2048 x 4096 example
 * (85 + 170 per 512 px tile after scaling to 768 px on the short side);
 * Anthropic's images up to about 1 600 tokens (width x height / 750,
 * resized beyond ~1.15 megapixels). An image whose bytes are in the body
 * (a base64 data URL, Anthropic's base64 source; PNG, JPEG, GIF, WebP) is
 * counted from its size by the same rules. The providers' own figures:
 * docs/providers.md, "The prompt estimate". */
#define ESTIMATE_IMAGE_LOW 85
#define ESTIMATE_IMAGE_TILE 170
#define ESTIMATE_IMAGE_HIGH 1105
#define ESTIMATE_IMAGE_ANTHROPIC 1600

/* The API a body is written for. */
typedef enum estimate_api {
    ESTIMATE_CHAT = 0,    /* OpenAI / Azure chat completions */
    ESTIMATE_COMPLETIONS, /* OpenAI / Azure legacy completions */
    ESTIMATE_EMBEDDINGS,  /* OpenAI / Azure embeddings */
    ESTIMATE_RESPONSES,   /* OpenAI / Azure Responses API */
    ESTIMATE_MESSAGES     /* Anthropic Messages API */
} estimate_api;

/* The estimate split as the rate limits count it: the prompt's tokens and
 * the maximum output. A deployment that counts combined tokens is charged
 * input + output; one that counts them apart (itpm, otpm) each part. */
typedef struct estimate {
    long long input, output;
    long long media; /* parts guessed, not weighed (images, audio, files): the estimate is partial */
} estimate;

/* The estimate of body (any JSON value; what is not an object estimates
 * as an empty request of that API) for api. */
void estimate_request(const json_t *body, estimate_api api, estimate *out);

/* Tokens of text that weighs this many quarter tokens: ceil(quarters / 4). */
long long estimate_text_tokens(long long quarters);

/* The weight of the UTF-8 bytes s[0..len) in quarter tokens: each byte
 * that is not a continuation byte (NULs count) weighs by the length its
 * lead byte announces, 2, 4 or 8 for two to four bytes; an ASCII byte 1,
 * or 2 for a digit or punctuation mark (0x21..0x40, 0x5B..0x60,
 * 0x7B..0x7E); a byte 0xF8..0xFF 1. Invalid UTF-8 is weighed, never
 * rejected. */
long long estimate_text_quarters(const char *s, size_t len);

#endif
