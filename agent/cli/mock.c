#define _POSIX_C_SOURCE 200809L
#include "mock.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_bucket.h"
#include "mock_http.h"
#include "mock_map.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

#define MOCK_NAME_MAX 64
#define MOCK_CLIENT_MAX 128
#define MOCK_MAX_DEPLOYMENTS 1024
#define MOCK_MAX_CLIENTS 4096
#define MOCK_MAX_ACCEPTS 4000000
#define MOCK_MAX_TOKENS 1000000
#define MOCK_DEFAULT_MAX_TOKENS 16
#define MOCK_NEIGHBOUR "(neighbour)"

typedef struct mock_deployment {
    mock_bucket req;
    mock_bucket tok; /* unused when tpm == 0 */
} mock_deployment;

struct mock {
    uv_loop_t *loop;
    mock_options opt;
    char *host;
    char **fixed;          /* copies of opt.deployments */
    double burst, token_burst;
    mock_http *http;
    mock_ledger *ledger;
    mock_map deps;         /* name -> mock_deployment */
    uint64_t t0_ns;
    uint64_t rng[4];
    uint64_t next_id;
    uv_timer_t neighbour;
    int neighbour_live;
    double neighbour_due_ms;
    int pending_closes;
    int port;
    void (*done)(mock *, void *);
    void *done_arg;
};

/* One chat call while it is being decided. */
typedef struct mock_call {
    mock *m;
    mock_http_req *req;
    double now_ms;
    int azure;                 /* Azure error shapes, else OpenAI's */
    const char *client;
    const char *deployment;    /* NULL until routed */
    mock_deployment *dep;
    char api_version[32];
    char headers[1024];
    size_t hlen;
} mock_call;

/* ---- randomness: xoshiro256**, seeded by splitmix64 -------------------- */

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        s[i] = z ^ (z >> 31);
    }
}

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [lo, hi]; the modulo bias is below 2^-40 for our ranges. */
static uint64_t rng_range(uint64_t s[4], uint64_t lo, uint64_t hi) {
    return hi <= lo ? lo : lo + rng_next(s) % (hi - lo + 1);
}

static double rng_unit(uint64_t s[4]) {
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* ---- formatting helpers ----------------------------------------------- */

/* A duration the way Go's time.Duration prints it ("250ms", "1s", "1.5s",
 * "1m0s"), which is what OpenAI's x-ratelimit-reset-* headers use. */
static void fmt_duration(char *out, size_t n, uint64_t ms) {
    unsigned long long h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
    int k = 0, digits = 3;
    if (ms < 1000) {
        if (ms == 0) snprintf(out, n, "0s");
        else snprintf(out, n, "%llums", (unsigned long long)ms);
        return;
    }
    if (h) k = snprintf(out, n, "%lluh%llum", h, m);
    else if (m) k = snprintf(out, n, "%llum", m);
    if (k < 0 || (size_t)k >= n) return;
    if (frac == 0) {
        snprintf(out + k, n - (size_t)k, "%llus", s);
        return;
    }
    while (frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    snprintf(out + k, n - (size_t)k, "%llu.%0*llus", s, digits, frac);
}

static void call_header(mock_call *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->headers + c->hlen, sizeof(c->headers) - c->hlen, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof(c->headers) - c->hlen) c->hlen += (size_t)n;
}

static uint64_t ceil_ms(double ms) {
    return ms <= 0 ? 0 : (uint64_t)ceil(ms - 1e-9);
}

/* ---- deployments ------------------------------------------------------ */

static int name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MOCK_NAME_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static void dep_fill(const mock *m, mock_deployment *d, double now_ms) {
    mock_bucket_init(&d->req, m->burst, m->opt.rpm / 60000.0, now_ms);
    if (m->opt.tpm > 0) mock_bucket_init(&d->tok, m->token_burst, m->opt.tpm / 60000.0, now_ms);
}

/* The deployment called name, created on first use unless the set is
 * fixed. NULL when it does not exist (or cannot be created). */
static mock_deployment *dep_get(mock *m, const char *name, double now_ms) {
    mock_deployment *d = mock_map_get(&m->deps, name);
    if (d || m->opt.n_deployments > 0 || m->deps.count >= MOCK_MAX_DEPLOYMENTS) return d;
    d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    dep_fill(m, d, now_ms);
    if (mock_map_put(&m->deps, name, d) != 0) {
        free(d);
        return NULL;
    }
    return d;
}

static void dep_refill(const mock *m, mock_deployment *d, double now_ms) {
    mock_bucket_refill(&d->req, now_ms);
    if (m->opt.tpm > 0) mock_bucket_refill(&d->tok, now_ms);
}

/* Admission of one request of `tokens` estimated tokens. Takes from both
 * buckets and returns 0 when both hold it; otherwise takes nothing and
 * returns the wait in ms until both will, with *by_tokens set when the
 * token limit is the longer wait. */
static double dep_admit(const mock *m, mock_deployment *d, double tokens, int *by_tokens) {
    double wr = mock_bucket_wait_ms(&d->req, 1);
    double wt = m->opt.tpm > 0 ? mock_bucket_wait_ms(&d->tok, tokens) : 0;
    *by_tokens = wt > wr;
    if (wr > 0 || wt > 0) return wr > wt ? wr : wt;
    mock_bucket_take(&d->req, 1);
    if (m->opt.tpm > 0) mock_bucket_take(&d->tok, tokens);
    return 0;
}

/* Digits worth printing for a configured limit: none when it is whole. */
static int decimals(double v) {
    return v == floor(v) ? 0 : 3;
}

/* Appends the x-ratelimit-* headers describing the buckets as they are now. */
static void call_ratelimit_headers(mock_call *c) {
    const mock *m = c->m;
    const mock_deployment *d = c->dep;
    char reset[32];
    fmt_duration(reset, sizeof(reset), ceil_ms(mock_bucket_reset_ms(&d->req)));
    call_header(c,
                "x-ratelimit-limit-requests: %.*f\r\nx-ratelimit-remaining-requests: %.0f\r\n"
                "x-ratelimit-reset-requests: %s\r\n",
                decimals(m->opt.rpm), m->opt.rpm, mock_bucket_remaining(&d->req), reset);
    if (m->opt.tpm > 0) {
        fmt_duration(reset, sizeof(reset), ceil_ms(mock_bucket_reset_ms(&d->tok)));
        call_header(c,
                    "x-ratelimit-limit-tokens: %.*f\r\nx-ratelimit-remaining-tokens: %.0f\r\n"
                    "x-ratelimit-reset-tokens: %s\r\n",
                    decimals(m->opt.tpm), m->opt.tpm, mock_bucket_remaining(&d->tok), reset);
    }
}

/* ---- responses -------------------------------------------------------- */

static const char *outcome_name(mock_outcome o) {
    static const char *names[] = {"accepted", "429", "429-quota", "503", "400", "404", "error"};
    return names[o];
}

/* Sends body (a JSON value, consumed) with status, counts the call in the
 * ledger and logs it. */
static void call_finish(mock_call *c, int status, mock_outcome o, json_t *body, uint64_t charged,
                        uint64_t reported, uint64_t delay_ms) {
    mock *m = c->m;
    mock_ledger_ref ref;
    char *text = body ? json_dumps(body, MOCK_JSON_FLAGS) : NULL;
    json_decref(body);
    mock_ledger_record(m->ledger, c->deployment, c->client, o, c->now_ms, charged, reported, &ref);
    if (o == MOCK_ACCEPTED) mock_http_set_udata(c->req, ref.deployment, ref.client);
    if (m->opt.log)
        fprintf(m->opt.log, "%.3f %s %s %s %d %s\n", c->now_ms, c->client,
                c->deployment ? c->deployment : "-", mock_http_path(c->req), status,
                outcome_name(o));
    call_header(c, "x-request-id: mock-%llu\r\n", (unsigned long long)++m->next_id);
    if (!text) {
        static const char oom[] = "{\"error\":{\"code\":\"500\",\"message\":\"out of memory\"}}";
        mock_http_respond(c->req, 500, c->headers, oom, sizeof(oom) - 1, 0);
        return;
    }
    mock_http_respond(c->req, status, c->headers, text, strlen(text), delay_ms);
    free(text);
}

static json_t *azure_error(const char *code, const char *message) {
    return json_pack("{s{ssss}}", "error", "code", code, "message", message);
}

static json_t *openai_error(const char *message, const char *type, const char *param,
                            const char *code) {
    return json_pack("{s{sssssoso}}", "error", "message", message, "type", type, "param",
                     param ? json_string(param) : json_null(), "code",
                     code ? json_string(code) : json_null());
}

static void call_bad_request(mock_call *c, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    call_finish(c, 400, MOCK_BAD_REQUEST, openai_error(msg, "invalid_request_error", param, NULL),
                0, 0, c->dep ? c->m->opt.slow_ms : 0);
}

static void call_not_found(mock_call *c, json_t *body) {
    call_finish(c, 404, MOCK_NOT_FOUND, body, 0, 0, 0);
}

/* ---- the chat endpoints ----------------------------------------------- */

/* Counts the code points of the messages' text: string contents and the
 * "text" of content parts. -1 when messages is not a non-empty array of
 * objects. */
static long long messages_chars(json_t *messages) {
    long long n = 0;
    size_t i;
    json_t *msg;
    if (!json_is_array(messages) || json_array_size(messages) == 0) return -1;
    json_array_foreach(messages, i, msg) {
        if (!json_is_object(msg)) return -1;
        json_t *content = json_object_get(msg, "content");
        const char *texts[64];
        size_t nt = 0, j;
        json_t *part;
        if (json_is_string(content)) {
            texts[nt++] = json_string_value(content);
        } else if (json_is_array(content)) {
            json_array_foreach(content, j, part) {
                const char *t = json_string_value(json_object_get(part, "text"));
                if (t && nt < sizeof(texts) / sizeof(texts[0])) texts[nt++] = t;
            }
        }
        for (size_t k = 0; k < nt; k++)
            for (const unsigned char *p = (const unsigned char *)texts[k]; *p; p++)
                if ((*p & 0xC0) != 0x80) n++;
    }
    return n;
}

static json_t *completion_body(mock *m, const char *model, uint64_t prompt, uint64_t completion,
                               uint64_t max_tokens) {
    static const char *words[] = {"The", "mock", "says", "ok", "and", "counts", "every",
                                  "token", "it", "sees"};
    size_t nwords = completion < 2048 ? (size_t)completion : 2048;
    char *text = malloc(nwords * 8 + 1);
    size_t len = 0;
    if (!text) return NULL;
    for (size_t i = 0; i < nwords; i++) {
        const char *w = words[i % (sizeof(words) / sizeof(words[0]))];
        if (i) text[len++] = ' ';
        memcpy(text + len, w, strlen(w));
        len += strlen(w);
    }
    text[len] = '\0';
    json_t *body = json_pack(
        "{sssssIss s[{sis{ssss}ss}] s{sIsIsI}}", "id", "chatcmpl-mock", "object",
        "chat.completion", "created", (json_int_t)time(NULL), "model", model, "choices", "index", 0,
        "message", "role", "assistant", "content", text, "finish_reason",
        completion >= max_tokens ? "length" : "stop", "usage", "prompt_tokens",
        (json_int_t)prompt, "completion_tokens", (json_int_t)completion, "total_tokens",
        (json_int_t)(prompt + completion));
    free(text);
    if (body) {
        char id[48];
        snprintf(id, sizeof(id), "chatcmpl-mock-%llu", (unsigned long long)m->next_id + 1);
        json_object_set_new(body, "id", json_string(id));
    }
    return body;
}

static void call_rate_limited(mock_call *c, double wait_ms, int by_tokens, double tokens) {
    const mock *m = c->m;
    uint64_t ms = ceil_ms(wait_ms), secs = (ms + 999) / 1000;
    char msg[512], dur[32];
    if (ms < 1) ms = 1;
    if (secs < 1) secs = 1;
    call_header(c, "Retry-After: %llu\r\nretry-after-ms: %llu\r\n", (unsigned long long)secs,
                (unsigned long long)ms);
    json_t *body;
    if (c->azure) {
        snprintf(msg, sizeof(msg),
                 "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
                 "%s have exceeded %s rate limit of your current OpenAI S0 pricing tier. Please "
                 "retry after %llu second%s. Please go here: https://aka.ms/oai/quotaincrease if "
                 "you would like to further increase the default rate limit.",
                 c->api_version, by_tokens ? "token" : "call", (unsigned long long)secs,
                 secs == 1 ? "" : "s");
        body = azure_error("429", msg);
    } else {
        fmt_duration(dur, sizeof(dur), ms);
        snprintf(msg, sizeof(msg),
                 "Rate limit reached for %s in organization org-mock on %s per min (%s): "
                 "Limit %.0f, Requested %.0f. Please try again in %s.",
                 c->deployment, by_tokens ? "tokens" : "requests", by_tokens ? "TPM" : "RPM",
                 by_tokens ? m->opt.tpm : m->opt.rpm, by_tokens ? tokens : 1.0, dur);
        body = openai_error(msg, by_tokens ? "tokens" : "requests", NULL, "rate_limit_exceeded");
    }
    call_finish(c, 429, MOCK_RATE_LIMITED, body, 0, 0, m->opt.slow_ms);
}

/* Resolves the deployment called name into c->dep and c->deployment
 * (copied to buf). Answers 404 and returns -1 when it does not exist. */
static int call_resolve(mock_call *c, const char *name, char *buf, size_t n) {
    char msg[256];
    if (name_ok(name)) {
        snprintf(buf, n, "%s", name);
        c->dep = dep_get(c->m, buf, c->now_ms);
        if (c->dep) {
            c->deployment = buf;
            dep_refill(c->m, c->dep, c->now_ms);
            return 0;
        }
        snprintf(msg, sizeof(msg),
                 "The API deployment %s does not exist on this mock (see sluice mock "
                 "--deployment).",
                 buf);
    } else {
        snprintf(msg, sizeof(msg),
                 "The API deployment for this resource does not exist (invalid name).");
    }
    call_not_found(c, c->azure ? azure_error("DeploymentNotFound", msg)
                               : openai_error(msg, "invalid_request_error", "model",
                                              "model_not_found"));
    return -1;
}

/* The body-dependent part of both chat routes. The deployment comes from
 * the path (Azure), resolved before the body is looked at, or from the
 * body's "model" (OpenAI). */
static void chat(mock_call *c, const char *deployment) {
    mock *m = c->m;
    size_t len;
    const char *raw = mock_http_body(c->req, &len);
    json_error_t jerr;
    char name[MOCK_NAME_MAX + 1];
    if (deployment && call_resolve(c, deployment, name, sizeof(name)) != 0) return;
    json_t *body = json_loadb(raw, len, 0, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        if (c->dep) call_ratelimit_headers(c);
        call_bad_request(c, NULL,
                         "We could not parse the JSON body of your request. (line %d: %s) "
                         "The API expects a JSON payload.",
                         jerr.line, body ? "not an object" : jerr.text);
        return;
    }
    if (!deployment) {
        deployment = json_string_value(json_object_get(body, "model"));
        if (!deployment) {
            json_decref(body);
            call_bad_request(c, "model", "you must provide a model parameter");
            return;
        }
        if (call_resolve(c, deployment, name, sizeof(name)) != 0) {
            json_decref(body);
            return;
        }
    }

    /* Validation, in the order the real front door reports it. */
    json_t *stream = json_object_get(body, "stream");
    long long chars = messages_chars(json_object_get(body, "messages"));
    json_t *mt = json_object_get(body, "max_tokens");
    const char *mt_name = "max_tokens";
    if (!mt || json_is_null(mt)) {
        mt = json_object_get(body, "max_completion_tokens");
        mt_name = "max_completion_tokens";
    }
    long long max_tokens = MOCK_DEFAULT_MAX_TOKENS;
    if (mt && !json_is_null(mt)) max_tokens = json_is_integer(mt) ? json_integer_value(mt) : -1;
    int streaming = json_is_true(stream);
    json_decref(body);
    if (streaming) {
        call_ratelimit_headers(c);
        call_bad_request(c, "stream",
                         "stream=true is not supported by sluice mock: send \"stream\": false "
                         "or leave it out.");
        return;
    }
    if (chars < 0) {
        call_ratelimit_headers(c);
        call_bad_request(c, "messages",
                         "'messages' must be a non-empty array of message objects.");
        return;
    }
    if (max_tokens < 1 || max_tokens > MOCK_MAX_TOKENS) {
        call_ratelimit_headers(c);
        call_bad_request(c, mt_name, "'%s' must be an integer between 1 and %d.", mt_name,
                         MOCK_MAX_TOKENS);
        return;
    }
    uint64_t prompt = (uint64_t)(chars + 3) / 4;
    uint64_t estimate = prompt + (uint64_t)max_tokens;

    if (m->opt.quota_exhausted) {
        call_ratelimit_headers(c);
        call_finish(c, 429, MOCK_NO_QUOTA,
                    openai_error("You exceeded your current quota, please check your plan and "
                                 "billing details. For more information on this error, read the "
                                 "docs: https://platform.openai.com/docs/guides/error-codes/"
                                 "api-errors.",
                                 "insufficient_quota", NULL, "insufficient_quota"),
                    0, 0, m->opt.slow_ms);
        return;
    }
    if (m->opt.fail_503 > 0 && rng_unit(m->rng) < m->opt.fail_503) {
        call_ratelimit_headers(c);
        if (m->opt.retry_after_503)
            call_header(c, "Retry-After: %u\r\n", m->opt.retry_after_503);
        call_finish(c, 503, MOCK_UNAVAILABLE,
                    c->azure ? azure_error("ServiceUnavailable",
                                           "The service is temporarily unable to process your "
                                           "request. Please try again later.")
                             : openai_error("The server is overloaded or not ready yet.",
                                            "server_error", NULL, NULL),
                    0, 0, m->opt.slow_ms);
        return;
    }
    int by_tokens;
    double wait = dep_admit(m, c->dep, (double)estimate, &by_tokens);
    call_ratelimit_headers(c);
    if (wait > 0) {
        call_rate_limited(c, wait, by_tokens, (double)estimate);
        return;
    }
    uint64_t completion = m->opt.completion_tokens
                              ? (m->opt.completion_tokens < (uint64_t)max_tokens
                                     ? m->opt.completion_tokens
                                     : (uint64_t)max_tokens)
                              : rng_range(m->rng, 1, (uint64_t)max_tokens);
    uint64_t delay = rng_range(m->rng, m->opt.service_ms_min, m->opt.service_ms_max) +
                     m->opt.slow_ms;
    call_finish(c, 200, MOCK_ACCEPTED,
                completion_body(m, name, prompt, completion, (uint64_t)max_tokens), estimate,
                prompt + completion, delay);
}

/* ---- routes ----------------------------------------------------------- */

static void route_azure(mock_call *c, const char *name) {
    const char *q = mock_http_query(c->req), *v = strstr(q, "api-version=");
    c->azure = 1;
    snprintf(c->api_version, sizeof(c->api_version), "unknown");
    if (v && (v == q || v[-1] == '&')) {
        size_t n = strcspn(v + 12, "&");
        if (n > 0 && n < sizeof(c->api_version)) {
            memcpy(c->api_version, v + 12, n);
            c->api_version[n] = '\0';
        }
    }
    chat(c, name);
}

static void route_openai(mock_call *c, const char *name) {
    (void)name;
    c->azure = 0;
    chat(c, NULL);
}

static int query_has(const char *q, const char *kv) {
    size_t n = strlen(kv);
    for (const char *p = q; (p = strstr(p, kv)) != NULL; p += n)
        if ((p == q || p[-1] == '&') && (p[n] == '\0' || p[n] == '&')) return 1;
    return 0;
}

static void route_stats(mock_call *c, const char *name) {
    mock *m = c->m;
    const char *q = mock_http_query(c->req);
    int reset_all = query_has(q, "reset=all"), reset = reset_all || query_has(q, "reset=1");
    json_t *stats = mock_stats(m);
    char *text = stats ? json_dumps(stats, MOCK_JSON_FLAGS) : NULL;
    json_decref(stats);
    (void)name;
    if (reset && text) mock_reset(m, reset_all);
    if (!text) {
        static const char oom[] = "{\"error\":{\"code\":\"500\",\"message\":\"out of memory\"}}";
        mock_http_respond(c->req, 500, NULL, oom, sizeof(oom) - 1, 0);
        return;
    }
    mock_http_respond(c->req, 200, "Cache-Control: no-store\r\n", text, strlen(text), 0);
    free(text);
}

/* Parses one control value: fail_503 in [0, 1], quota_exhausted 0 or 1.
 * Returns 0, or -1 when the text is not such a number. */
static int control_number(const char *v, size_t n, int boolean, double *out) {
    char buf[32], *end;
    if (n == 0 || n >= sizeof(buf)) return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    double d = strtod(buf, &end);
    if (*end || !(d >= 0 && d <= 1) || (boolean && d != 0 && d != 1)) return -1;
    *out = d;
    return 0;
}

/* Loopback peers only: the control changes what every client gets. */
static int peer_is_loopback(const char *peer) {
    return strncmp(peer, "127.", 4) == 0 || strcmp(peer, "::1") == 0 || strncmp(peer, "::ffff:127.", 11) == 0;
}

/* POST /control[?fail_503=P][&quota_exhausted=0|1]: changes the injected
 * failures of the running mock, keeping its ledger and buckets. Every pair
 * is checked before any is applied, so a bad request changes nothing.
 * Answers the settings now in force. Not counted in the ledger. */
static void route_control(mock_call *c, const char *name) {
    mock *m = c->m;
    const char *q = mock_http_query(c->req);
    double fail_503 = m->opt.fail_503, quota = m->opt.quota_exhausted;
    char msg[160];
    (void)name;
    if (!peer_is_loopback(mock_http_peer(c->req))) {
        static const char denied[] =
            "{\"error\":{\"code\":\"403\",\"message\":\"/control is served to loopback clients only\"}}";
        mock_http_respond(c->req, 403, NULL, denied, sizeof(denied) - 1, 0);
        return;
    }
    for (const char *p = q; *p;) {
        size_t len = strcspn(p, "&"), klen = strcspn(p, "=");
        const char *v = p + klen + 1;
        if (len == 0) { /* an empty pair ("a=1&&b=0") */
            p++;
            continue;
        }
        int bad = klen >= len;
        if (!bad && klen == 8 && strncmp(p, "fail_503", 8) == 0)
            bad = control_number(v, len - klen - 1, 0, &fail_503) != 0;
        else if (!bad && klen == 15 && strncmp(p, "quota_exhausted", 15) == 0)
            bad = control_number(v, len - klen - 1, 1, &quota) != 0;
        else
            bad = 1;
        if (bad) {
            snprintf(msg, sizeof(msg), "bad control '%.*s': expected fail_503=P (0..1) or quota_exhausted=0|1",
                     (int)(len < 64 ? len : 64), p);
            json_t *err = azure_error("400", msg);
            char *text = err ? json_dumps(err, MOCK_JSON_FLAGS) : NULL;
            json_decref(err);
            mock_http_respond(c->req, 400, NULL, text ? text : "{}", text ? strlen(text) : 2, 0);
            free(text);
            return;
        }
        p += len;
        if (*p == '&') p++;
    }
    mock_set_faults(m, fail_503, (int)quota);
    if (m->opt.log)
        fprintf(m->opt.log, "%.3f %s - /control 200 fail_503=%g quota_exhausted=%d\n", c->now_ms, c->client,
                m->opt.fail_503, m->opt.quota_exhausted);
    snprintf(msg, sizeof(msg), "{\"fail_503\":%.15g,\"quota_exhausted\":%s}", m->opt.fail_503,
             m->opt.quota_exhausted ? "true" : "false");
    mock_http_respond(c->req, 200, "Cache-Control: no-store\r\n", msg, strlen(msg), 0);
}

/* A route matches a path equal to prefix, or, with a suffix, any
 * prefix<name>suffix where <name> has no '/'. Methods are checked after the
 * path, so a known path with the wrong method is a 405, not a 404. */
typedef struct mock_route {
    const char *method;
    const char *prefix;
    const char *suffix;
    void (*handler)(mock_call *c, const char *name);
} mock_route;

static const mock_route mock_routes[] = {
    {"POST", "/openai/deployments/", "/chat/completions", route_azure},
    {"POST", "/v1/chat/completions", NULL, route_openai},
    {"POST", "/openai/v1/chat/completions", NULL, route_openai},
    /* Not provider traffic: never counted in the ledger. */
    {"GET", "/stats", NULL, route_stats},
    {"POST", "/control", NULL, route_control},
};

/* Matches path against r; the name of a parameterised route goes to name. */
static int route_match(const mock_route *r, const char *path, char *name, size_t n) {
    size_t pl = strlen(r->prefix);
    if (!r->suffix) return strcmp(path, r->prefix) == 0;
    size_t len = strlen(path), sl = strlen(r->suffix);
    if (len <= pl + sl || strncmp(path, r->prefix, pl) != 0 || strcmp(path + len - sl, r->suffix))
        return 0;
    size_t nl = len - pl - sl;
    if (memchr(path + pl, '/', nl) || nl >= n) return 0;
    memcpy(name, path + pl, nl);
    name[nl] = '\0';
    return 1;
}

/* The client a request is counted under: x-client-id (printable ASCII,
 * at most MOCK_CLIENT_MAX bytes, anything else replaced by '_'), else the
 * peer's address. */
static void client_id(const mock_http_req *req, char *out, size_t n) {
    const char *id = mock_http_header(req, "x-client-id");
    size_t i = 0;
    if (!id || !*id) id = mock_http_peer(req);
    for (; id[i] && i + 1 < n; i++) out[i] = (id[i] > 0x20 && id[i] < 0x7f) ? id[i] : '_';
    out[i] = '\0';
}

static void mock_on_request(mock_http_req *req, void *arg) {
    mock *m = arg;
    mock_call c = {.m = m, .req = req, .now_ms = mock_now_ms(m), .azure = 1};
    char client[MOCK_CLIENT_MAX + 1], name[MOCK_NAME_MAX + 2];
    const char *reason;
    client_id(req, client, sizeof(client));
    c.client = client;
    int status = mock_http_error_status(req, &reason);
    if (status) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s: %s",
                 status == 413 ? "request too large" : "malformed HTTP request", reason);
        call_finish(&c, status, status == 400 ? MOCK_BAD_REQUEST : MOCK_OTHER_ERROR,
                    openai_error(msg, "invalid_request_error", NULL, NULL), 0, 0, 0);
        return;
    }
    const char *path = mock_http_path(req), *method = mock_http_method(req);
    for (size_t i = 0; i < sizeof(mock_routes) / sizeof(mock_routes[0]); i++) {
        const mock_route *r = &mock_routes[i];
        if (!route_match(r, path, name, sizeof(name))) continue;
        if (strcmp(method, r->method) != 0) {
            char allow[64];
            snprintf(allow, sizeof(allow), "Allow: %s\r\n", r->method);
            call_header(&c, "%s", allow);
            call_finish(&c, 405, MOCK_OTHER_ERROR, azure_error("405", "Method not allowed"), 0, 0,
                        0);
            return;
        }
        r->handler(&c, name);
        return;
    }
    call_not_found(&c, azure_error("404", "Resource not found"));
}

static void mock_on_abandon(void *udata[2], void *arg) {
    mock *m = arg;
    mock_ledger_ref ref = {udata[0], udata[1]};
    mock_ledger_abandoned(m->ledger, &ref);
}

/* ---- the noisy neighbour ---------------------------------------------- */

static void neighbour_tick(uv_timer_t *t) {
    mock *m = t->data;
    double now = mock_now_ms(m), interval = 60000.0 / m->opt.neighbour_rpm;
    for (mock_map_entry *e = m->deps.first; e; e = e->next) {
        mock_deployment *d = e->value;
        int by_tokens;
        dep_refill(m, d, now);
        double wait = dep_admit(m, d, (double)m->opt.neighbour_tokens, &by_tokens);
        mock_ledger_record(m->ledger, e->key, MOCK_NEIGHBOUR,
                           wait > 0 ? MOCK_RATE_LIMITED : MOCK_ACCEPTED, now,
                           m->opt.neighbour_tokens, m->opt.neighbour_tokens, NULL);
    }
    /* Due times advance by the exact interval, so the long-run rate is exact
     * even when the timer fires late. */
    m->neighbour_due_ms += interval;
    double delay = m->neighbour_due_ms - mock_now_ms(m);
    uv_timer_start(&m->neighbour, neighbour_tick, delay > 0 ? ceil_ms(delay) : 0, 0);
}

/* ---- public API ------------------------------------------------------- */

void mock_options_init(mock_options *o) {
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8089;
    o->rpm = 60;
    o->service_ms_min = 300;
    o->service_ms_max = 900;
    o->seed = 1;
    o->max_body = 1 << 20;
}

static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return UV_EINVAL;
}

static int options_check(const mock_options *o, char *err, size_t n) {
    if (!o->host || !*o->host) return fail(err, n, "host must not be empty");
    if (o->port < 0 || o->port > 65535) return fail(err, n, "port must be in 0..65535");
    if (!(o->rpm > 0) || !isfinite(o->rpm)) return fail(err, n, "rpm must be > 0");
    if (o->burst < 0 || !isfinite(o->burst)) return fail(err, n, "burst must be >= 0");
    if (o->tpm < 0 || !isfinite(o->tpm)) return fail(err, n, "tpm must be >= 0");
    if (o->token_burst < 0 || !isfinite(o->token_burst))
        return fail(err, n, "token burst must be >= 0");
    if (o->service_ms_min > o->service_ms_max)
        return fail(err, n, "service time range is empty (%u > %u)", o->service_ms_min,
                    o->service_ms_max);
    if (o->neighbour_rpm < 0 || !isfinite(o->neighbour_rpm) || o->neighbour_rpm > 600000)
        return fail(err, n, "neighbour rpm must be in 0..600000");
    if (!(o->fail_503 >= 0 && o->fail_503 <= 1))
        return fail(err, n, "503 probability must be in [0, 1]");
    if (o->max_body < 1) return fail(err, n, "max body must be >= 1");
    for (size_t i = 0; i < o->n_deployments; i++)
        if (!o->deployments[i] || !name_ok(o->deployments[i]))
            return fail(err, n,
                        "deployment name '%s' is invalid (1-%d of A-Z a-z 0-9 . _ -)",
                        o->deployments[i] ? o->deployments[i] : "", MOCK_NAME_MAX);
    if (o->n_deployments > MOCK_MAX_DEPLOYMENTS)
        return fail(err, n, "at most %d deployments", MOCK_MAX_DEPLOYMENTS);
    return 0;
}

static void mock_free(mock *m) {
    if (!m) return;
    mock_map_free(&m->deps, free);
    mock_ledger_free(m->ledger);
    if (m->fixed)
        for (size_t i = 0; i < m->opt.n_deployments; i++) free(m->fixed[i]);
    free(m->fixed);
    free(m->host);
    free(m);
}

int mock_start(uv_loop_t *loop, const mock_options *o, mock **out, char *err, size_t errlen) {
    int rc = options_check(o, err, errlen);
    if (rc) return rc;
    mock *m = calloc(1, sizeof(*m));
    if (!m) return fail(err, errlen, "out of memory"), UV_ENOMEM;
    m->loop = loop;
    m->opt = *o;
    m->t0_ns = uv_hrtime();
    mock_map_init(&m->deps);
    m->host = strdup(o->host);
    m->ledger = mock_ledger_new(MOCK_MAX_CLIENTS, MOCK_MAX_ACCEPTS);
    m->fixed = o->n_deployments ? calloc(o->n_deployments, sizeof(char *)) : NULL;
    if (!m->host || !m->ledger || (o->n_deployments && !m->fixed)) goto oom;
    m->opt.host = m->host;
    m->opt.deployments = (const char *const *)m->fixed;
    m->burst = o->burst > 0 ? o->burst : fmax(1, floor(o->rpm / 6));
    m->token_burst = o->token_burst > 0 ? o->token_burst : fmax(1, floor(o->tpm / 6));
    rng_seed(m->rng, o->seed);
    for (size_t i = 0; i < o->n_deployments; i++) {
        mock_deployment *d;
        if (!(m->fixed[i] = strdup(o->deployments[i]))) goto oom;
        if (mock_map_get(&m->deps, m->fixed[i])) continue;
        if (!(d = calloc(1, sizeof(*d)))) goto oom;
        dep_fill(m, d, 0);
        if (mock_map_put(&m->deps, m->fixed[i], d) != 0) {
            free(d);
            goto oom;
        }
    }
    mock_http_handlers h = {mock_on_request, mock_on_abandon, m};
    rc = mock_http_start(loop, m->host, o->port, o->max_body, &h, &m->http);
    if (rc != 0) {
        fail(err, errlen, "cannot listen on %s:%d: %s", o->host, o->port,
             rc == UV_EINVAL ? "the host is not an IP address" : uv_strerror(rc));
        mock_free(m);
        return rc;
    }
    m->port = mock_http_port(m->http);
    if (o->neighbour_rpm > 0) {
        uv_timer_init(loop, &m->neighbour);
        m->neighbour.data = m;
        m->neighbour_live = 1;
        m->neighbour_due_ms = 60000.0 / o->neighbour_rpm;
        uv_timer_start(&m->neighbour, neighbour_tick, ceil_ms(m->neighbour_due_ms), 0);
    }
    *out = m;
    return 0;
oom:
    mock_free(m);
    return fail(err, errlen, "out of memory"), UV_ENOMEM;
}

int mock_port(const mock *m) {
    return m->port;
}

double mock_now_ms(const mock *m) {
    /* Whole microseconds: printed with 15 significant digits (the ledger's
     * JSON precision) such a time reads back as the very same double, so a
     * replay of the accept times sees exactly what the buckets saw. */
    return (double)((uv_hrtime() - m->t0_ns) / 1000) / 1000.0;
}

json_t *mock_stats(const mock *m) {
    const mock_options *o = &m->opt;
    json_t *stats = mock_ledger_json(m->ledger);
    if (!stats) return NULL;
    json_t *fixed = json_array();
    for (size_t i = 0; i < o->n_deployments; i++) json_array_append_new(fixed, json_string(m->fixed[i]));
    json_t *cfg = json_pack(
        "{ss si sf sf sf sf s[ii] si si sf si sf si sb sI so sI}", "host", o->host, "port",
        mock_port(m), "rpm", o->rpm, "burst", m->burst, "tpm", o->tpm, "token_burst",
        o->tpm > 0 ? m->token_burst : 0.0, "service_ms", (int)o->service_ms_min,
        (int)o->service_ms_max, "slow_ms", (int)o->slow_ms, "completion_tokens",
        (int)o->completion_tokens, "neighbour_rpm", o->neighbour_rpm, "neighbour_tokens",
        (int)o->neighbour_tokens, "fail_503", o->fail_503, "retry_after_503",
        (int)o->retry_after_503, "quota_exhausted", o->quota_exhausted, "seed",
        (json_int_t)o->seed, "deployments", fixed, "max_body", (json_int_t)o->max_body);
    if (!cfg || json_object_set_new(stats, "config", cfg) != 0 ||
        json_object_set_new(stats, "now_ms", json_real(mock_now_ms(m))) != 0 ||
        json_object_set_new(stats, "version", json_string(SLUICE_VERSION)) != 0) {
        json_decref(stats);
        return NULL;
    }
    /* The live bucket levels, next to the counts of each deployment. */
    json_t *deps = json_object_get(stats, "deployments");
    double now = mock_now_ms(m);
    for (mock_map_entry *e = m->deps.first; e; e = e->next) {
        json_t *d = json_object_get(deps, e->key);
        mock_deployment copy = *(mock_deployment *)e->value;
        if (!d) continue;
        dep_refill(m, &copy, now);
        json_object_set_new(d, "remaining_requests", json_real(copy.req.level));
        if (o->tpm > 0) json_object_set_new(d, "remaining_tokens", json_real(copy.tok.level));
    }
    return stats;
}

void mock_reset(mock *m, int buckets) {
    double now = mock_now_ms(m);
    mock_ledger_reset(m->ledger, now);
    if (buckets)
        for (mock_map_entry *e = m->deps.first; e; e = e->next) dep_fill(m, e->value, now);
}

int mock_set_faults(mock *m, double fail_503, int quota_exhausted) {
    if (!(fail_503 >= 0 && fail_503 <= 1)) return UV_EINVAL;
    m->opt.fail_503 = fail_503;
    m->opt.quota_exhausted = quota_exhausted != 0;
    return 0;
}

void mock_totals(const mock *m, mock_counts *out) {
    mock_ledger_totals(m->ledger, out);
}

static void mock_closed_one(mock *m) {
    if (--m->pending_closes > 0) return;
    if (m->done) m->done(m, m->done_arg);
    mock_free(m);
}

static void mock_http_closed(void *arg) {
    mock_closed_one(arg);
}

static void mock_neighbour_closed(uv_handle_t *h) {
    mock_closed_one(h->data);
}

void mock_stop(mock *m, void (*done)(mock *, void *), void *arg) {
    m->done = done;
    m->done_arg = arg;
    m->pending_closes = 1 + m->neighbour_live;
    if (m->neighbour_live) uv_close((uv_handle_t *)&m->neighbour, mock_neighbour_closed);
    mock_http_close(m->http, mock_http_closed, m);
}
