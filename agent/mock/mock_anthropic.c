/* mock_anthropic: the Anthropic Messages API of the mock provider
 * (POST /v1/messages): the request checks, admission against the
 * deployment's request, input-token and output-token buckets the way
 * Anthropic documents its limits, the answer (plain or streamed), and
 * Anthropic's error shapes and headers (docs/mock.md, "Anthropic style").
 *
 * Input tokens are the text of system and messages as the mock counts it
 * (mock_text_milli: a quarter token a character, one a CJK character),
 * less the cache reads of --cache-read-tokens (Anthropic does not count
 * those toward ITPM); they are charged at admission and never given back.
 * Output is charged max_tokens at admission and settled to what the answer
 * generated when it is done (mock.c, pending_settle()). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* {"type":"error","error":{"type":..,"message":..},"request_id":..}, the
 * id being that of the answer about to be counted. */
static json_t *anth_error(const mock *m, const char *type, const char *message) {
    char rid[48];
    snprintf(rid, sizeof(rid), "req_mock_%llu", (unsigned long long)m->next_id + 1);
    return json_pack("{sss{ssss}ss}", "type", "error", "error", "type", type, "message", message, "request_id", rid);
}

static void anth_fail(mock_call *c, int status, mock_outcome o, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mock_call_finish(c, status, o, anth_error(c->m, type, msg), NULL, c->dep ? c->m->opt.slow_ms : 0);
}

static int decimals(double v) { return v == floor(v) ? 0 : 3; }

/* anthropic-ratelimit-<what>-{limit,remaining,reset} of one bucket now; the
 * reset is the moment it is full again, as an absolute RFC 3339 time. A
 * token count's remaining is rounded to the nearest --anthropic-round
 * (Anthropic's page: "rounded to the nearest thousand"), halves up. */
static void dim_headers(mock_call *c, const char *what, double limit, const mock_bucket *b) {
    char reset[40];
    double rem = mock_bucket_remaining(b), q = c->m->opt.anthropic_round;
    if (q > 1 && strcmp(what, "requests") != 0) rem = q * floor(rem / q + 0.5);
    mock_fmt_rfc3339(reset, sizeof(reset), c->m->wall0_ms + c->now_ms + mock_bucket_reset_ms(b));
    mock_call_header(c,
                     "anthropic-ratelimit-%s-limit: %.*f\r\nanthropic-ratelimit-%s-remaining: "
                     "%.0f\r\nanthropic-ratelimit-%s-reset: %s\r\n",
                     what, decimals(limit), limit, what, rem, what, reset);
}

/* 1 when bucket a is more restrictive than b: fewer whole tokens left, or
 * as many and full again later. */
static int tighter(const mock_bucket *a, const mock_bucket *b) {
    double ra = mock_bucket_remaining(a), rb = mock_bucket_remaining(b);
    if (ra != rb) return ra < rb;
    return mock_bucket_reset_ms(a) > mock_bucket_reset_ms(b);
}

/* The rate-limit headers of every limited bucket, and -tokens-* as the most
 * restrictive of input and output (Anthropic's "most restrictive limit
 * currently in effect"). */
static void anth_ratelimit_headers(mock_call *c) {
    const mock_deployment *d = c->dep;
    int tok = -1;
    if (!c->m->headers) return;
    dim_headers(c, "requests", d->per_min[MOCK_REQUESTS], &d->b[MOCK_REQUESTS]);
    if (d->per_min[MOCK_INPUT] > 0) {
        dim_headers(c, "input-tokens", d->per_min[MOCK_INPUT], &d->b[MOCK_INPUT]);
        tok = MOCK_INPUT;
    }
    if (d->per_min[MOCK_OUTPUT] > 0) {
        dim_headers(c, "output-tokens", d->per_min[MOCK_OUTPUT], &d->b[MOCK_OUTPUT]);
        if (tok < 0 || tighter(&d->b[MOCK_OUTPUT], &d->b[tok])) tok = MOCK_OUTPUT;
    }
    if (tok >= 0) dim_headers(c, "tokens", d->per_min[tok], &d->b[tok]);
}

/* ---- the request ------------------------------------------------------ */

/* Checks a content value (a string, or an array of content blocks each
 * with a string "type"; text blocks need a string "text") and adds the
 * tokens of its text (mock_text_milli) to *n. With text_only (system) every block must
 * be a text block. 0, or -1 with the problem, "<where>...: ...", in why. */
static int content_milli(const mock *m, json_t *v, int text_only, const char *where, long long *n, char *why,
                         size_t wn) {
    size_t i;
    json_t *block;
    if (json_is_string(v)) {
        *n += mock_text_milli(m, json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) {
        snprintf(why, wn, "%s: Input should be a valid string or a list of %s blocks", where,
                 text_only ? "text" : "content");
        return -1;
    }
    json_array_foreach(v, i, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        const char *text = json_string_value(json_object_get(block, "text"));
        if (!json_is_object(block)) {
            snprintf(why, wn, "%s.%zu: Input should be a valid dictionary", where, i);
            return -1;
        }
        if (!type) {
            snprintf(why, wn, "%s.%zu.type: Field required", where, i);
            return -1;
        }
        if (text_only && strcmp(type, "text") != 0) {
            snprintf(why, wn, "%s.%zu.type: Input should be 'text'", where, i);
            return -1;
        }
        if (strcmp(type, "text") == 0) {
            if (!text) {
                snprintf(why, wn, "%s.%zu.text: Field required", where, i);
                return -1;
            }
            *n += mock_text_milli(m, text);
        }
    }
    return 0;
}

/* Checks "messages" (a non-empty list of {role: user|assistant, content})
 * and counts the tokens of their text (mock_text_milli). 0, or -1 with why.
 */
static int messages_milli(const mock *m, json_t *msgs, long long *n, char *why, size_t wn) {
    size_t i;
    json_t *msg;
    if (!msgs || json_is_null(msgs)) return snprintf(why, wn, "messages: Field required"), -1;
    if (!json_is_array(msgs)) return snprintf(why, wn, "messages: Input should be a valid list"), -1;
    if (json_array_size(msgs) == 0) return snprintf(why, wn, "messages: at least one message is required"), -1;
    json_array_foreach(msgs, i, msg) {
        char where[48];
        if (!json_is_object(msg)) return snprintf(why, wn, "messages.%zu: Input should be a valid dictionary", i), -1;
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0))
            return snprintf(why, wn, "messages.%zu.role: Input should be 'user' or 'assistant'", i), -1;
        json_t *content = json_object_get(msg, "content");
        if (!content) return snprintf(why, wn, "messages.%zu.content: Field required", i), -1;
        snprintf(where, sizeof(where), "messages.%zu.content", i);
        if (content_milli(m, content, 0, where, n, why, wn) != 0) return -1;
    }
    return 0;
}

/* ---- the answer ------------------------------------------------------- */

static json_t *usage_json(uint64_t uncached, uint64_t cached, uint64_t output) {
    return json_pack("{sIsIsIsI}", "input_tokens", (json_int_t)uncached, "output_tokens", (json_int_t)output,
                     "cache_read_input_tokens", (json_int_t)cached, "cache_creation_input_tokens", (json_int_t)0);
}

/* The Message: content (text, or none yet), stop reason (or null) and
 * usage (consumed). */
static json_t *message_json(const mock *m, const char *model, const char *text, const char *stop, json_t *usage) {
    char id[48];
    snprintf(id, sizeof(id), "msg_mock_%llu", (unsigned long long)m->next_id + 1);
    json_t *content = text ? json_pack("[{ssss}]", "type", "text", "text", text) : json_array();
    return json_pack("{sssssssssososnso}", "id", id, "type", "message", "role", "assistant", "model", model, "content",
                     content, "stop_reason", stop ? json_string(stop) : json_null(), "stop_sequence", "usage", usage);
}

/* The events of a streamed Message: message_start (the input usage, 1
 * output token so far), one text block in deltas, message_delta with the
 * stop reason and the cumulative output, message_stop. */
static void message_events(const mock *m, mock_events *e, const char *model, uint64_t uncached, uint64_t cached,
                           uint64_t output, const char *stop) {
    uint64_t cum[MOCK_STREAM_DELTAS], done = 0;
    size_t k;
    mock_events_add(e, "message_start",
                    json_pack("{ssso}", "type", "message_start", "message",
                              message_json(m, model, NULL, NULL, usage_json(uncached, cached, 1))),
                    NULL, 0);
    mock_events_add(e, "content_block_start",
                    json_pack("{sssis{ssss}}", "type", "content_block_start", "index", 0, "content_block", "type",
                              "text", "text", ""),
                    NULL, 0);
    mock_stream_split(output, cum, &k);
    for (size_t i = 0; i < k; i++) {
        char *text = mock_words(done, cum[i] - done);
        mock_events_add(e, "content_block_delta",
                        text ? json_pack("{sssis{ssss}}", "type", "content_block_delta", "index", 0, "delta", "type",
                                         "text_delta", "text", text)
                             : NULL,
                        NULL, (uint32_t)cum[i]);
        free(text);
        done = cum[i];
    }
    mock_events_add(e, "content_block_stop", json_pack("{sssi}", "type", "content_block_stop", "index", 0), NULL,
                    (uint32_t)output);
    mock_events_add(e, "message_delta",
                    json_pack("{sss{sssn}s{sI}}", "type", "message_delta", "delta", "stop_reason", stop,
                              "stop_sequence", "usage", "output_tokens", (json_int_t)output),
                    NULL, (uint32_t)output);
    mock_events_add(e, "message_stop", json_pack("{ss}", "type", "message_stop"), NULL, (uint32_t)output);
}

/* A 429 in Anthropic's shape: retry-after in whole seconds (at least 1),
 * the limit named by the dimension that made the call wait. */
static void anth_rate_limited(mock_call *c, double wait_ms, mock_dim longest, mock_outcome o) {
    static const char *what[MOCK_DIMS] = {"requests", "tokens", "input tokens", "output tokens"};
    const mock_deployment *d = c->dep;
    uint64_t ms = mock_ceil_ms(wait_ms);
    mock_call_header(c, "retry-after: %llu\r\n", (unsigned long long)mock_retry_after_s(ms));
    anth_fail(c, 429, o, "rate_limit_error",
              "This request would exceed the rate limit for your organization (org-mock) of "
              "%.*f %s per minute (model %s). For details, refer to: "
              "https://docs.claude.com/en/api/rate-limits. You can see the response headers "
              "for current usage. Please reduce the prompt length or the maximum tokens "
              "requested, or try again later.",
              decimals(d->per_min[longest]), d->per_min[longest], what[longest], c->deployment);
}

void mock_route_anthropic(mock_call *c, const char *unused) {
    mock *m = c->m;
    size_t len;
    const char *raw = mock_http_body(c->req, &len);
    json_error_t jerr;
    char name[MOCK_NAME_MAX + 1], why[256];
    (void)unused;
    c->style = MOCK_ANTHROPIC;
    const char *version = mock_http_header(c->req, "anthropic-version");
    if (!version || !*version) {
        anth_fail(c, 400, MOCK_BAD_REQUEST, "invalid_request_error", "anthropic-version: header is required");
        return;
    }
    json_t *body = json_loadb(raw, len, 0, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        anth_fail(c, 400, MOCK_BAD_REQUEST, "invalid_request_error",
                  "The request body is not a JSON object (line %d: %s).", jerr.line,
                  body ? "not an object" : jerr.text);
        return;
    }
    json_t *jmodel = json_object_get(body, "model");
    const char *model = json_string_value(jmodel);
    if (!model) {
        json_decref(body);
        anth_fail(c, 400, MOCK_BAD_REQUEST, "invalid_request_error",
                  jmodel ? "model: Input should be a valid string" : "model: Field required");
        return;
    }
    if (mock_call_resolve(c, model, name, sizeof(name)) != 0) {
        anth_fail(c, 404, MOCK_NOT_FOUND, "not_found_error", "model: %.*s", MOCK_NAME_MAX + 8, model);
        json_decref(body);
        return;
    }

    /* Every field is checked before anything is charged. */
    json_t *mt = json_object_get(body, "max_tokens"), *stream = json_object_get(body, "stream");
    json_t *system = json_object_get(body, "system");
    long long milli = 0, max_tokens = json_is_integer(mt) ? json_integer_value(mt) : 0;
    int bad = 1;
    if (!mt || json_is_null(mt)) snprintf(why, sizeof(why), "max_tokens: Field required");
    else if (!json_is_integer(mt)) snprintf(why, sizeof(why), "max_tokens: Input should be a valid integer");
    else if (max_tokens < 1) snprintf(why, sizeof(why), "max_tokens: Input should be greater than or equal to 1");
    else if (max_tokens > MOCK_MAX_TOKENS)
        snprintf(why, sizeof(why),
                 "max_tokens: %lld > %d, which is the maximum allowed number of output tokens "
                 "for %s",
                 max_tokens, MOCK_MAX_TOKENS, name);
    else if (messages_milli(m, json_object_get(body, "messages"), &milli, why, sizeof(why)) != 0)
        ;
    else if (system && !json_is_null(system) && content_milli(m, system, 1, "system", &milli, why, sizeof(why)) != 0)
        ;
    else if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        snprintf(why, sizeof(why), "stream: Input should be a valid boolean");
    else bad = 0;
    int streaming = json_is_true(stream);
    json_decref(body);
    if (bad) {
        anth_ratelimit_headers(c);
        anth_fail(c, 400, MOCK_BAD_REQUEST, "invalid_request_error", "%s", why);
        return;
    }

    uint64_t input = mock_tokens(milli);
    uint64_t cached = m->opt.cache_read_tokens < input ? m->opt.cache_read_tokens : input;
    uint64_t uncached = input - cached;
    if (m->opt.quota_exhausted) {
        /* What a spent prepaid balance gets: a 400, not a 429, so no
         * retry-after either. */
        anth_ratelimit_headers(c);
        anth_fail(c, 400, MOCK_NO_CREDIT, "invalid_request_error",
                  "Your credit balance is too low to access the Anthropic API. Please go to "
                  "Plans & Billing to upgrade or purchase credits.");
        return;
    }
    if (m->opt.fail_503 > 0 && mock_rng_unit(m->rng) < m->opt.fail_503) {
        anth_ratelimit_headers(c);
        if (m->opt.retry_after_503) mock_call_header(c, "retry-after: %u\r\n", m->opt.retry_after_503);
        anth_fail(c, 529, MOCK_UNAVAILABLE, "overloaded_error", "Overloaded");
        return;
    }
    if (m->inject_429 > 0) {
        /* As in mock_openai.c; Anthropic sends no retry-after-ms. */
        m->inject_429--;
        anth_ratelimit_headers(c);
        anth_rate_limited(c, 60000.0 / c->dep->per_min[MOCK_REQUESTS], MOCK_REQUESTS, MOCK_INJECTED_429);
        return;
    }
    int generated = m->opt.anthropic_otpm == MOCK_ANTH_OTPM_GENERATED;
    uint64_t held = generated ? MOCK_OTPM_ADMISSION : (uint64_t)max_tokens; /* the output bucket's at admission */
    const double cost[MOCK_DIMS] = {1, MOCK_NO_COST, (double)uncached, (double)held};
    mock_dim longest;
    double wait = mock_dep_admit(c->dep, cost, &longest);
    anth_ratelimit_headers(c);
    if (wait > 0) {
        anth_rate_limited(c, wait, longest, MOCK_RATE_LIMITED);
        return;
    }
    uint64_t output = mock_draw_output(m, (uint64_t)max_tokens);
    uint64_t service = mock_rng_range(m->rng, m->opt.service_ms_min, m->opt.service_ms_max);
    const char *stop = output >= (uint64_t)max_tokens ? "max_tokens" : "end_turn";
    mock_charge ch = {
        .input = uncached, .output = held, .charged = uncached + held, .reported = uncached + cached + output};
    c->settle =
        (mock_settle){.output = 1, .max_tokens = (uint64_t)max_tokens, .output_tokens = output, .generated = generated};
    if (streaming) {
        mock_events e = {0};
        message_events(m, &e, name, uncached, cached, output, stop);
        mock_call_finish_stream(c, &e, &ch, m->opt.slow_ms, service);
        return;
    }
    char *text = mock_words(0, output);
    json_t *msg = text ? message_json(m, name, text, stop, usage_json(uncached, cached, output)) : NULL;
    free(text);
    mock_call_finish(c, 200, MOCK_ACCEPTED, msg, &ch, service + m->opt.slow_ms);
}
