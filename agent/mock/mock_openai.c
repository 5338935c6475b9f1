/* mock_openai: the Azure OpenAI / OpenAI front door of the mock provider,
 * shared by its chat, embeddings (mock_embeddings.c) and Responses
 * (mock_responses.c) routes: the rate-limit headers, the error shapes, the
 * charge each provider documents, the faults and admission; and the chat
 * completions routes themselves (docs/mock.md, "How a chat call is
 * decided"). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_internal.h"

/* Digits worth printing for a configured limit: none when it is whole. */
static int decimals(double v) { return v == floor(v) ? 0 : 3; }

/* Appends the x-ratelimit-* headers of one bucket as it is now. */
static void dim_headers(mock_call *c, const char *what, double limit, const mock_bucket *b) {
    char reset[32];
    mock_fmt_duration(reset, sizeof(reset), mock_ceil_ms(mock_bucket_reset_ms(b)));
    mock_call_header(c,
                     "x-ratelimit-limit-%s: %.*f\r\nx-ratelimit-remaining-%s: %.0f\r\n"
                     "x-ratelimit-reset-%s: %s\r\n",
                     what, decimals(limit), limit, what, mock_bucket_remaining(b), what, reset);
}

/* Whose rules an OpenAI-style call follows (a mock_compat; the Azure
 * routes: MOCK_COMPAT_OPENAI, never another). */
static int mock_oai_compat(const mock_call *c) {
    return c->style == MOCK_OPENAI ? c->m->opt.compat : MOCK_COMPAT_OPENAI;
}

/* Appends the x-ratelimit-* headers describing the buckets as they are
 * now (none while the headers are switched off). */
void mock_oai_headers(mock_call *c) {
    const mock_deployment *d = c->dep;
    if (!c->m->headers || mock_oai_compat(c) != MOCK_COMPAT_OPENAI) return;
    dim_headers(c, "requests", d->per_min[MOCK_REQUESTS], &d->b[MOCK_REQUESTS]);
    if (d->per_min[MOCK_TOKENS] > 0) dim_headers(c, "tokens", d->per_min[MOCK_TOKENS], &d->b[MOCK_TOKENS]);
}

void mock_oai_bad_request(mock_call *c, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->dep) mock_oai_headers(c);
    mock_call_finish(c, 400, MOCK_BAD_REQUEST, mock_openai_error(msg, "invalid_request_error", param, NULL), NULL,
                     c->dep ? c->m->opt.slow_ms : 0);
}

/* Kana, Han ideographs (and their extensions), Hangul syllables, CJK
 * punctuation and the full-width forms: the scripts a BPE tokenizer
 * trained mostly on English splits into about a token a character. */
static int cjk_point(uint32_t cp) {
    return (cp >= 0x3000 && cp <= 0x30FF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
           (cp >= 0xAC00 && cp <= 0xD7AF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFF00 && cp <= 0xFFEF) ||
           (cp >= 0x20000 && cp <= 0x3FFFF);
}

long long mock_text_milli(const mock *m, const char *s) {
    long long plain = llround(m->opt.tokens_per_char * 1000.0), cjk = llround(m->opt.cjk_tokens_per_char * 1000.0);
    long long n = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp = *p;
        int more = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
        if (more) cp &= 0x3F >> more;
        p++;
        for (; more > 0 && (*p & 0xC0) == 0x80; more--, p++) cp = (cp << 6) | (*p & 0x3F);
        n += cjk_point(cp) ? cjk : plain;
    }
    return n;
}

uint64_t mock_tokens(long long milli) { return milli > 0 ? (uint64_t)((milli + 999) / 1000) : 0; }

uint64_t mock_oai_charge(const mock_call *c, uint64_t prompt, uint64_t max_output) {
    switch (mock_oai_compat(c)) {
    case MOCK_COMPAT_BEDROCK: return prompt + max_output; /* input + max_tokens, corrected at the end */
    case MOCK_COMPAT_GEMINI: return prompt;               /* "Tokens per minute (input)" */
    default: break;
    }
    if (c->style == MOCK_OPENAI && c->m->opt.openai_tpm == MOCK_OPENAI_TPM_MAX)
        return prompt > max_output ? prompt : max_output;
    return prompt + max_output;
}

/* Bedrock's models whose output burns down the quota at 5x: "The burndown
 * rate for the following models is 5x for output tokens (1 output token
 * consumes 5 tokens from your quotas)" (docs.aws.amazon.com/bedrock/latest/
 * userguide/quotas-token-burndown.html: Claude Opus 4, Claude Sonnet 4,
 * Claude 3.7 Sonnet), matched in the model ID the body names; "all other
 * models" 1. --burndown overrides it. */
static double oai_burndown(const mock *m, const char *model) {
    static const char *const five[] = {"claude-opus-4", "claude-sonnet-4", "claude-3-7-sonnet"};
    if (m->opt.burndown > 0) return m->opt.burndown;
    for (size_t i = 0; i < sizeof(five) / sizeof(five[0]); i++)
        if (model && strstr(model, five[i])) return 5;
    return 1;
}

/* ---- Gemini's day ------------------------------------------------------ */

/* Gemini: "Requests per day (RPD) quotas reset at midnight Pacific time"
 * (ai.google.dev/gemini-api/docs/rate-limits). Pacific time is UTC-8, and
 * UTC-7 from the second Sunday of March at 2:00 local (10:00 UTC) to the
 * first Sunday of November at 2:00 local (9:00 UTC), the US rule since
 * 2007. Days are counted from the Unix epoch. */
static long long days_from_civil(long long y, int mo, int d) {
    y -= mo <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The n-th (1-based) Sunday of month mo of year y, as a day number. */
static long long nth_sunday(long long y, int mo, int n) {
    long long first = days_from_civil(y, mo, 1);
    long long wd = ((first % 7) + 7 + 4) % 7; /* 1970-01-01 was a Thursday (4) */
    return first + (7 - wd) % 7 + 7 * (n - 1);
}

static long long civil_year(long long day) {
    long long y = 1970 + day / 366;
    while (days_from_civil(y + 1, 1, 1) <= day) y++;
    while (days_from_civil(y, 1, 1) > day) y--;
    return y;
}

/* The offset of Pacific time from UTC at unix_ms, in ms (-8 h or -7 h). */
static double pacific_offset_ms(double unix_ms) {
    const double h = 3600000.0, day = 86400000.0;
    long long y = civil_year((long long)floor(unix_ms / day));
    double dst_on = (double)nth_sunday(y, 3, 2) * day + 10 * h;
    double dst_off = (double)nth_sunday(y, 11, 1) * day + 9 * h;
    return unix_ms >= dst_on && unix_ms < dst_off ? -7 * h : -8 * h;
}

/* The Pacific day (days since the Unix epoch, local) of unix_ms. */
static long long pacific_day(double unix_ms) {
    return (long long)floor((unix_ms + pacific_offset_ms(unix_ms)) / 86400000.0);
}

/* The Unix ms of the next midnight Pacific time after unix_ms. */
static double pacific_next_midnight(double unix_ms) {
    long long next = pacific_day(unix_ms) + 1;
    /* Midnight is local: its UTC instant uses the offset in force then
     * (the same as 2 h before it, no change happens at midnight). */
    double guess = (double)next * 86400000.0 + 8 * 3600000.0;
    return (double)next * 86400000.0 - pacific_offset_ms(guess - 2 * 3600000.0);
}

/* ---- the chat endpoints ----------------------------------------------- */

/* Counts the messages' text (mock_text_milli): string contents and the
 * "text" of content parts. -1 when messages is not a non-empty array of
 * objects. */
static long long messages_milli(const mock *m, json_t *messages) {
    long long n = 0;
    size_t i, j;
    json_t *msg, *part;
    if (!json_is_array(messages) || json_array_size(messages) == 0) return -1;
    json_array_foreach(messages, i, msg) {
        if (!json_is_object(msg)) return -1;
        json_t *content = json_object_get(msg, "content");
        if (json_is_string(content)) {
            n += mock_text_milli(m, json_string_value(content));
        } else if (json_is_array(content)) {
            /* Every part counts, however many there are. */
            json_array_foreach(content, j, part) {
                const char *t = json_string_value(json_object_get(part, "text"));
                if (t) n += mock_text_milli(m, t);
            }
        }
    }
    return n;
}

static json_t *completion_body(mock *m, const char *model, uint64_t prompt, uint64_t completion, uint64_t max_tokens) {
    char *text = mock_words(0, completion);
    if (!text) return NULL;
    json_t *body = json_pack(
        "{sssssIss s[{sis{ssss}ss}] s{sIsIsI}}", "id", "chatcmpl-mock", "object", "chat.completion", "created",
        (json_int_t)time(NULL), "model", model, "choices", "index", 0, "message", "role", "assistant", "content", text,
        "finish_reason", completion >= max_tokens ? "length" : "stop", "usage", "prompt_tokens", (json_int_t)prompt,
        "completion_tokens", (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion));
    free(text);
    if (body) {
        char id[48];
        snprintf(id, sizeof(id), "chatcmpl-mock-%llu", (unsigned long long)m->next_id + 1);
        json_object_set_new(body, "id", json_string(id));
    }
    return body;
}

/* One chat.completion.chunk of a streamed answer; with include_usage every
 * chunk but the last says "usage": null, as OpenAI's do. */
static json_t *chunk_new(mock *m, const char *model, json_t *choices, int include_usage) {
    char id[48];
    snprintf(id, sizeof(id), "chatcmpl-mock-%llu", (unsigned long long)m->next_id + 1);
    json_t *j = json_pack("{sssssIssso}", "id", id, "object", "chat.completion.chunk", "created",
                          (json_int_t)time(NULL), "model", model, "choices", choices);
    if (j && include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

static json_t *chunk_choice(json_t *delta, const char *finish) {
    return json_pack("[{siso so}]", "index", 0, "delta", delta, "finish_reason",
                     finish ? json_string(finish) : json_null());
}

/* The events of a streamed chat completion: the role, the content in
 * deltas, the finish reason, the usage (only with include_usage, with
 * empty choices) and [DONE]. */
static void completion_events(mock *m, mock_events *e, const char *model, uint64_t prompt, uint64_t completion,
                              uint64_t max_tokens, int include_usage) {
    uint64_t cum[MOCK_STREAM_DELTAS], done = 0;
    size_t k;
    mock_events_add(
        e, NULL,
        chunk_new(m, model, chunk_choice(json_pack("{ssss}", "role", "assistant", "content", ""), NULL), include_usage),
        NULL, 0);
    mock_stream_split(completion, cum, &k);
    for (size_t i = 0; i < k; i++) {
        char *text = mock_words(done, cum[i] - done);
        json_t *delta = text ? json_pack("{ss}", "content", text) : NULL;
        free(text);
        mock_events_add(e, NULL, chunk_new(m, model, chunk_choice(delta, NULL), include_usage), NULL, (uint32_t)cum[i]);
        done = cum[i];
    }
    mock_events_add(
        e, NULL,
        chunk_new(m, model, chunk_choice(json_object(), completion >= max_tokens ? "length" : "stop"), include_usage),
        NULL, (uint32_t)completion);
    if (include_usage) {
        json_t *u = chunk_new(m, model, json_array(), 0);
        if (u)
            json_object_set_new(u, "usage",
                                json_pack("{sIsIsI}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                                          (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion)));
        mock_events_add(e, NULL, u, NULL, (uint32_t)completion);
    }
    mock_events_add(e, NULL, NULL, "[DONE]", (uint32_t)completion);
}

/* Answers 429: the call must wait wait_ms, the longest on the token
 * bucket when by_tokens. Counted as outcome o (injected or not). */
static void call_rate_limited(mock_call *c, double wait_ms, int by_tokens, double tokens, mock_outcome o) {
    const mock *m = c->m;
    const mock_deployment *d = c->dep;
    uint64_t ms = mock_ceil_ms(wait_ms), secs;
    char msg[512], dur[32];
    if (ms < 1) ms = 1;
    secs = mock_retry_after_s(ms);
    json_t *body;
    if (mock_oai_compat(c) == MOCK_COMPAT_BEDROCK) {
        /* Bedrock's ThrottlingException: no Retry-After, no limits said. */
        mock_call_header(c, "x-amzn-ErrorType: ThrottlingException\r\n");
        body = json_pack("{ss}", "message", "Too many tokens, please wait before trying again.");
        mock_call_finish(c, 429, o, body, NULL, m->opt.slow_ms);
        return;
    }
    if (mock_oai_compat(c) == MOCK_COMPAT_GEMINI) {
        /* Google's RESOURCE_EXHAUSTED with its RetryInfo; no Retry-After. */
        char delay[32];
        snprintf(delay, sizeof(delay), "%llus", (unsigned long long)secs);
        body = json_pack("{s{sisssss[{ssss}]}}", "error", "code", 429, "message",
                         "You exceeded your current quota, please check your plan and billing details.", "status",
                         "RESOURCE_EXHAUSTED", "details", "@type", "type.googleapis.com/google.rpc.RetryInfo",
                         "retryDelay", delay);
        mock_call_finish(c, 429, o, body, NULL, m->opt.slow_ms);
        return;
    }
    mock_call_header(c, "Retry-After: %llu\r\nretry-after-ms: %llu\r\n", (unsigned long long)secs,
                     (unsigned long long)ms);
    if (c->style == MOCK_AZURE) {
        snprintf(msg, sizeof(msg),
                 "Requests to the %s Operation under Azure OpenAI API version "
                 "%s have exceeded %s rate limit of your current OpenAI S0 pricing tier. Please "
                 "retry after %llu second%s. Please go here: https://aka.ms/oai/quotaincrease if "
                 "you would like to further increase the default rate limit.",
                 c->operation ? c->operation : "ChatCompletions_Create", c->api_version, by_tokens ? "token" : "call",
                 (unsigned long long)secs, secs == 1 ? "" : "s");
        body = mock_azure_error("429", msg);
    } else {
        mock_fmt_duration(dur, sizeof(dur), ms);
        snprintf(msg, sizeof(msg),
                 "Rate limit reached for %s in organization org-mock on %s per min (%s): "
                 "Limit %.0f, Requested %.0f. Please try again in %s.",
                 c->deployment, by_tokens ? "tokens" : "requests", by_tokens ? "TPM" : "RPM",
                 d->per_min[by_tokens ? MOCK_TOKENS : MOCK_REQUESTS], by_tokens ? tokens : 1.0, dur);
        body = mock_openai_error(msg, by_tokens ? "tokens" : "requests", NULL, "rate_limit_exceeded");
    }
    mock_call_finish(c, 429, o, body, NULL, m->opt.slow_ms);
}

/* Resolves the deployment called name into c->dep and c->deployment
 * (copied to buf). Answers 404 and returns -1 when it does not exist. */
static int call_resolve(mock_call *c, const char *name, char *buf, size_t n) {
    char msg[256];
    int rc = mock_call_resolve(c, name, buf, n);
    if (rc == 0) return 0;
    if (rc == -2) {
        snprintf(msg, sizeof(msg),
                 "The API deployment %s does not exist on this mock (see sluice mock "
                 "--deployment).",
                 buf);
    } else {
        snprintf(msg, sizeof(msg), "The API deployment for this resource does not exist (invalid name).");
    }
    mock_call_not_found(c, c->style == MOCK_AZURE
                               ? mock_azure_error("DeploymentNotFound", msg)
                               : mock_openai_error(msg, "invalid_request_error", "model", "model_not_found"));
    return -1;
}

json_t *mock_oai_body(mock_call *c, const char *deployment, char *name, size_t n) {
    size_t len;
    const char *raw = mock_http_body(c->req, &len);
    json_error_t jerr;
    if (deployment && call_resolve(c, deployment, name, n) != 0) return NULL;
    json_t *body = json_loadb(raw, len, 0, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        mock_oai_bad_request(c, NULL,
                             "We could not parse the JSON body of your request. (line %d: %s) "
                             "The API expects a JSON payload.",
                             jerr.line, body ? "not an object" : jerr.text);
        return NULL;
    }
    if (deployment) return body;
    deployment = json_string_value(json_object_get(body, "model"));
    if (!deployment) {
        json_decref(body);
        mock_oai_bad_request(c, "model", "you must provide a model parameter");
        return NULL;
    }
    if (call_resolve(c, deployment, name, n) != 0) {
        json_decref(body);
        return NULL;
    }
    return body;
}

int mock_oai_admit(mock_call *c, uint64_t charge) {
    mock *m = c->m;
    if (m->opt.quota_exhausted) {
        mock_oai_headers(c);
        mock_call_finish(c, 429, MOCK_NO_QUOTA,
                         mock_openai_error("You exceeded your current quota, please check your "
                                           "plan and billing details. For more information on "
                                           "this error, read the docs: https://platform.openai."
                                           "com/docs/guides/error-codes/api-errors.",
                                           "insufficient_quota", NULL, "insufficient_quota"),
                         NULL, m->opt.slow_ms);
        return -1;
    }
    if (m->opt.fail_503 > 0 && mock_rng_unit(m->rng) < m->opt.fail_503) {
        mock_oai_headers(c);
        if (m->opt.retry_after_503) mock_call_header(c, "Retry-After: %u\r\n", m->opt.retry_after_503);
        mock_call_finish(
            c, 503, MOCK_UNAVAILABLE,
            c->style == MOCK_AZURE
                ? mock_azure_error("ServiceUnavailable", "The service is temporarily unable to process "
                                                         "your request. Please try again later.")
                : mock_openai_error("The server is overloaded or not ready yet.", "server_error", NULL, NULL),
            NULL, m->opt.slow_ms);
        return -1;
    }
    if (m->inject_429 > 0) {
        /* A release slightly ahead of the bucket: refused with the true
         * headers and the time one request takes to refill, nothing
         * charged. */
        m->inject_429--;
        mock_oai_headers(c);
        call_rate_limited(c, 60000.0 / c->dep->per_min[MOCK_REQUESTS], 0, (double)charge, MOCK_INJECTED_429);
        return -1;
    }
    mock_deployment *d = c->dep;
    int rpd = mock_oai_compat(c) == MOCK_COMPAT_GEMINI && m->opt.rpd > 0;
    if (rpd) {
        double wall = m->wall0_ms + c->now_ms;
        long long day = pacific_day(wall);
        if (day != d->day) d->day = day, d->day_requests = 0;
        if (d->day_requests + 1 > m->opt.rpd) {
            call_rate_limited(c, pacific_next_midnight(wall) - wall, 0, (double)charge, MOCK_RATE_LIMITED);
            return -1;
        }
    }
    const double cost[MOCK_DIMS] = {1, (double)charge, MOCK_NO_COST, MOCK_NO_COST};
    mock_dim longest;
    double wait = mock_dep_admit(d, cost, &longest);
    mock_oai_headers(c);
    if (wait > 0) {
        call_rate_limited(c, wait, longest == MOCK_TOKENS, (double)charge, MOCK_RATE_LIMITED);
        return -1;
    }
    if (rpd) d->day_requests += 1;
    return 0;
}

/* A dated api-version ("YYYY-MM-DD[-preview]") before 2024-09-01. */
static int azure_before_stream_options(const char *v) {
    int y, mo, dd, n = 0;
    if (sscanf(v, "%4d-%2d-%2d%n", &y, &mo, &dd, &n) != 3 || n != 10) return 0;
    return y * 10000 + mo * 100 + dd < 20240901;
}

/* The body-dependent part of both chat routes. The deployment comes from
 * the path (Azure), resolved before the body is looked at, or from the
 * body's "model" (OpenAI). */
static void chat(mock_call *c, const char *deployment) {
    mock *m = c->m;
    char name[MOCK_NAME_MAX + 1];
    json_t *body = mock_oai_body(c, deployment, name, sizeof(name));
    if (!body) return;

    /* Validation, in the order the real front door reports it. */
    json_t *stream = json_object_get(body, "stream");
    json_t *sopt = json_object_get(body, "stream_options");
    json_t *iu = json_object_get(sopt, "include_usage");
    int stream_bad = stream && !json_is_null(stream) && !json_is_boolean(stream);
    int streaming = json_is_true(stream);
    int sopt_given = sopt && !json_is_null(sopt);
    int sopt_bad = sopt_given && (!json_is_object(sopt) || (iu && !json_is_null(iu) && !json_is_boolean(iu)));
    int include_usage = json_is_true(iu);
    long long milli = messages_milli(m, json_object_get(body, "messages"));
    json_t *mt = json_object_get(body, "max_tokens");
    const char *mt_name = "max_tokens";
    if (!mt || json_is_null(mt)) {
        mt = json_object_get(body, "max_completion_tokens");
        mt_name = "max_completion_tokens";
    }
    long long max_tokens = MOCK_DEFAULT_MAX_TOKENS;
    if (mt && !json_is_null(mt)) max_tokens = json_is_integer(mt) ? json_integer_value(mt) : -1;
    json_decref(body);
    if (stream_bad) {
        mock_oai_bad_request(c, "stream", "'stream' must be a boolean.");
        return;
    }
    if (sopt_given && !streaming) {
        mock_oai_bad_request(c, "stream_options",
                             "The 'stream_options' parameter is only allowed when 'stream' is "
                             "enabled.");
        return;
    }
    if (sopt_bad) {
        mock_oai_bad_request(c, "stream_options",
                             "'stream_options' must be an object whose 'include_usage' is a "
                             "boolean.");
        return;
    }
    /* Azure's REST specification has stream_options from api-version
     * 2024-09-01-preview (stable 2024-10-21); an older dated version
     * refuses it as an unknown argument. */
    if (sopt_given && c->style == MOCK_AZURE && azure_before_stream_options(c->api_version)) {
        mock_oai_bad_request(c, NULL, "Unrecognized request argument supplied: stream_options");
        return;
    }
    if (milli < 0) {
        mock_oai_bad_request(c, "messages", "'messages' must be a non-empty array of message objects.");
        return;
    }
    if (max_tokens < 1 || max_tokens > MOCK_MAX_TOKENS) {
        mock_oai_bad_request(c, mt_name, "'%s' must be an integer between 1 and %d.", mt_name, MOCK_MAX_TOKENS);
        return;
    }
    uint64_t prompt = mock_tokens(milli);
    uint64_t charge = mock_oai_charge(c, prompt, (uint64_t)max_tokens);
    if (mock_oai_admit(c, charge) != 0) return;
    uint64_t completion = mock_draw_output(m, (uint64_t)max_tokens);
    uint64_t service = mock_rng_range(m->rng, m->opt.service_ms_min, m->opt.service_ms_max);
    uint64_t delay = service + m->opt.slow_ms;
    mock_charge ch = {.tokens = charge, .charged = charge, .reported = prompt + completion};
    if (mock_oai_compat(c) == MOCK_COMPAT_BEDROCK)
        c->settle = (mock_settle){.tokens = 1,
                                  .max_tokens = (uint64_t)max_tokens,
                                  .output_tokens = completion,
                                  .burndown = oai_burndown(m, name)};
    if (streaming) {
        mock_events e = {0};
        completion_events(m, &e, name, prompt, completion, (uint64_t)max_tokens, include_usage);
        mock_call_finish_stream(c, &e, &ch, m->opt.slow_ms, service);
        return;
    }
    mock_call_finish(c, 200, MOCK_ACCEPTED, completion_body(m, name, prompt, completion, (uint64_t)max_tokens), &ch,
                     delay);
}

/* ---- routes ----------------------------------------------------------- */

void mock_oai_style(mock_call *c, mock_style style, const char *operation) {
    const char *q = mock_http_query(c->req), *v = strstr(q, "api-version=");
    c->style = style;
    c->operation = operation;
    snprintf(c->api_version, sizeof(c->api_version), "unknown");
    if (style != MOCK_AZURE) return;
    if (v && (v == q || v[-1] == '&')) {
        size_t n = strcspn(v + 12, "&");
        if (n > 0 && n < sizeof(c->api_version)) {
            memcpy(c->api_version, v + 12, n);
            c->api_version[n] = '\0';
        }
    }
}

void mock_route_azure(mock_call *c, const char *name) {
    mock_oai_style(c, MOCK_AZURE, "ChatCompletions_Create");
    chat(c, name);
}

void mock_route_openai(mock_call *c, const char *name) {
    (void)name;
    mock_oai_style(c, MOCK_OPENAI, "ChatCompletions_Create");
    chat(c, NULL);
}
