/* mock_internal: what the modules of the mock provider share.
 *
 * mock.c owns the server (deployments, routing, the neighbour, the public
 * API in mock.h); mock_openai.c holds the Azure / OpenAI front door (the
 * headers, errors, charge and admission every route of that family goes
 * through) and answers the chat routes, mock_embeddings.c the embeddings
 * routes, mock_responses.c the Responses API routes, mock_anthropic.c the
 * Anthropic Messages route and mock_control.c the POST /control route. A mock_call is one request while
 * it is decided; every route answers it through mock_call_finish(), which
 * also counts it in the ledger. Not part of the embedding API. */
#ifndef SLUICE_MOCK_INTERNAL_H
#define SLUICE_MOCK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uv.h>

#include "mock.h"
#include "mock_bucket.h"
#include "mock_http.h"
#include "mock_ledger.h"
#include "mock_map.h"

#define MOCK_NAME_MAX 64
#define MOCK_CLIENT_MAX 128
#define MOCK_MAX_DEPLOYMENTS 1024
#define MOCK_MAX_CLIENTS 4096
#define MOCK_MAX_ACCEPTS 4000000
#define MOCK_MAX_TOKENS 1000000
#define MOCK_DEFAULT_MAX_TOKENS 16
#define MOCK_NEIGHBOUR "(neighbour)"
/* The fingerprint of a request's credentials, at most this long. */
#define MOCK_CREDENTIAL_MAX 64
#define MOCK_NO_CREDENTIAL "(none)"
/* A streamed answer carries at most this many content deltas (each a
 * share of the completion), so a million-token answer is not a million
 * timer ticks. */
#define MOCK_STREAM_DELTAS 16
#define MOCK_STREAM_MAX_EVENTS (MOCK_STREAM_DELTAS + 8)
/* Words of text in an answer, at most (the usage says the rest). */
#define MOCK_TEXT_WORDS 2048

/* The buckets of a deployment. Azure / OpenAI calls take from REQUESTS and
 * TOKENS, Anthropic calls from REQUESTS, INPUT and OUTPUT. */
typedef enum mock_dim {
    MOCK_REQUESTS, /* rpm, burst */
    MOCK_TOKENS,   /* tpm, token_burst: the estimate */
    MOCK_INPUT,    /* itpm, input_burst: uncached input tokens */
    MOCK_OUTPUT,   /* otpm, output_burst: max_tokens, settled to the output */
    MOCK_DIMS
} mock_dim;

/* What an Anthropic call takes from the output bucket at admission under
 * its current rule (--anthropic-otpm generated): an exhausted bucket
 * refuses; the output generated is charged at the end. */
#define MOCK_OTPM_ADMISSION 1

/* A cost on a dimension the call does not touch. */
#define MOCK_NO_COST (-1.0)

typedef struct mock_deployment {
    /* The limits in force (per minute; 0: no such limit, never for
     * REQUESTS) and their buckets (unused while the limit is 0). */
    double per_min[MOCK_DIMS];
    mock_bucket b[MOCK_DIMS];
    /* Gemini's requests per day: the Pacific day they count in, and how
     * many were admitted in it. */
    long long day;
    double day_requests;
} mock_deployment;

struct mock {
    uv_loop_t *loop;
    mock_options opt;
    char *host;
    char **fixed;                /* copies of opt.deployments */
    double per_min[MOCK_DIMS];   /* the limits new deployments get */
    double burst_set[MOCK_DIMS]; /* capacities given by flag; 0: per_min / 6 */
    double wall0_ms;             /* Unix time in ms at t0: the clock of RFC 3339 resets */
    int headers;                 /* send the rate-limit headers */
    uint64_t inject_429;         /* chat calls still to be answered 429 (/control) */
    mock_http *http;
    mock_ledger *ledger;
    mock_map deps; /* name -> mock_deployment */
    uint64_t t0_ns;
    uint64_t rng[4];
    uint64_t next_id;
    uv_timer_t neighbour;
    int neighbour_live;
    double neighbour_due_ms;
    double greedy_allow, greedy_last_ms; /* a greedy neighbour's unspent rate, and when it last looked */
    int pending_closes;
    int port;
    void (*done)(mock *, void *);
    void *done_arg;
};

typedef enum mock_style { MOCK_AZURE, MOCK_OPENAI, MOCK_ANTHROPIC } mock_style;

/* How an accepted Anthropic call settles its output bucket: max_tokens was
 * charged, max_tokens - generated is given back when the answer is done
 * (or the client gone). */
typedef struct mock_settle {
    int output; /* 1: settle the output bucket */
    uint64_t max_tokens;
    uint64_t output_tokens; /* what the whole answer generates */
    /* Bedrock: the token bucket, charged max_tokens for the output, is
     * corrected to output x burndown (up or down) at the end. */
    int tokens;
    double burndown;
    /* Anthropic's current rule (--anthropic-otpm generated): 1 output
     * token was taken at admission, the output generated is charged at
     * the end. */
    int generated;
} mock_settle;

/* One chat call while it is being decided. */
typedef struct mock_call {
    mock *m;
    mock_http_req *req;
    double now_ms;
    mock_style style;      /* the error shapes and headers, the charge rule */
    const char *operation; /* Azure's name of the operation, for its 429 message */
    const char *client;
    const char *credential; /* mock_credential_fingerprint() of the request */
    const char *deployment; /* NULL until routed */
    mock_deployment *dep;
    mock_settle settle; /* set by the route before an accept */
    char api_version[32];
    char headers[2048];
    size_t hlen;
} mock_call;

/* An accepted call until the server lets go of it (the request's udata):
 * where it was counted (for the abandoned count and the refunds) and how
 * it settles. */
typedef struct mock_pending {
    mock *m;
    mock_ledger_ref ref;
    uint64_t id; /* the answer's request id, for the ledger's give-backs */
    mock_deployment *dep;
    mock_settle settle;
    int settled;
    size_t nevents;                             /* a stream: its events, and the output */
    uint32_t generated[MOCK_STREAM_MAX_EVENTS]; /* generated once each is sent */
} mock_pending;

/* The events of a streamed answer, each already in its SSE form, with the
 * output tokens generated once it is sent. */
typedef struct mock_events {
    char *text[MOCK_STREAM_MAX_EVENTS];
    size_t len[MOCK_STREAM_MAX_EVENTS];
    uint32_t generated[MOCK_STREAM_MAX_EVENTS];
    size_t n;
    int oom;
} mock_events;

/* ---- mock.c ----------------------------------------------------------- */

/* The credentials req carried, as the ledger counts them: for each of the
 * headers Authorization, api-key and x-api-key that is present, in that
 * order and separated by spaces, "<name>:<last 4 characters of the
 * value>" ("authorization:x7Qa"), or "<name>:short" for a value under 12
 * characters, so that no secret is ever kept whole; bytes outside
 * printable ASCII become '_'. MOCK_NO_CREDENTIAL when none is present.
 * out has n >= MOCK_CREDENTIAL_MAX + 1 bytes. */
void mock_credential_fingerprint(const mock_http_req *req, char *out, size_t n);

/* Uniform in [lo, hi], and in [0, 1), from the mock's seeded sequence. */
uint64_t mock_rng_range(uint64_t s[4], uint64_t lo, uint64_t hi);
double mock_rng_unit(uint64_t s[4]);

/* A duration the way Go's time.Duration prints it ("250ms", "1.5s"). */
void mock_fmt_duration(char *out, size_t n, uint64_t ms);

/* ms rounded up to whole milliseconds (0 for ms <= 0). */
uint64_t mock_ceil_ms(double ms);

/* 1 when s is a valid deployment name. */
int mock_name_ok(const char *s);

/* The bucket capacity for a limit of per_min on dimension dim: the flag's,
 * else max(1, floor(per_min / 6)), 10 s of quota. */
double mock_capacity(const mock *m, mock_dim dim, double per_min);

/* The deployment called name, created on first use unless the set is
 * fixed. NULL when it does not exist (or cannot be created). */
mock_deployment *mock_dep_get(mock *m, const char *name, double now_ms);

/* Refills the deployment's buckets up to now_ms. */
void mock_dep_refill(mock_deployment *d, double now_ms);

/* Admission of one call costing cost[dim] on each dimension (MOCK_NO_COST
 * where it takes nothing; a dimension without a limit is skipped). Takes
 * from every bucket and returns 0 when all of them hold their cost;
 * otherwise takes nothing and returns the wait in ms until all will, with
 * *longest the dimension of the longest wait. Call after
 * mock_dep_refill(). */
double mock_dep_admit(mock_deployment *d, const double cost[MOCK_DIMS], mock_dim *longest);

/* Changes the limit of one dimension of d from now_ms on (see
 * mock_bucket_set(); a limit switched on starts with a full bucket). */
void mock_dep_set_limit(const mock *m, mock_deployment *d, mock_dim dim, double per_min, double now_ms);

/* Resolves the deployment called name into c->dep and c->deployment
 * (copied to buf of n >= MOCK_NAME_MAX + 1 bytes) and refills it. 0, -1
 * when the name is invalid, -2 when there is no such deployment. */
int mock_call_resolve(mock_call *c, const char *name, char *buf, size_t n);

/* The limits of d (NULL: the defaults) as {"rpm", "burst", "tpm", ...}. */
json_t *mock_limits_json(const mock *m, const mock_deployment *d);

/* "2025-01-02T03:04:05.678Z": Unix time unix_ms, rounded up to the ms. */
void mock_fmt_rfc3339(char *out, size_t n, double unix_ms);

/* Appends one header line (fmt must end in "\r\n") to the call's answer. */
void mock_call_header(mock_call *c, const char *fmt, ...);

/* Sends body (a JSON value, consumed) with status after delay_ms, counts
 * the call in the ledger (ch: what an accept charged) and logs it. */
void mock_call_finish(mock_call *c, int status, mock_outcome o, json_t *body, const mock_charge *ch, uint64_t delay_ms);

/* Answers an accepted call with a stream of Server-Sent Events (e, whose
 * texts are freed): the first at start_ms, the others spread evenly over
 * the next service_ms, one write each. Counted like mock_call_finish(). */
void mock_call_finish_stream(mock_call *c, mock_events *e, const mock_charge *ch, uint64_t start_ms,
                             uint64_t service_ms);

/* The output tokens of an accepted answer: --completion-tokens capped by
 * max_tokens, else uniform in [1, max_tokens]. */
uint64_t mock_draw_output(mock *m, uint64_t max_tokens);

/* The whole-second wait of a Retry-After: ceil(ms / 1000), at least 1. */
uint64_t mock_retry_after_s(uint64_t ms);

/* Appends one event: "event: NAME" when name is not NULL, then "data: "
 * and data (a JSON value, consumed; or raw when it is NULL). */
void mock_events_add(mock_events *e, const char *name, json_t *data, const char *raw, uint32_t generated);

/* Frees what mock_events_add() made (after an error). */
void mock_events_free(mock_events *e);

/* Writes words [from, from + count) of the mock's answer text into a new
 * string, each preceded by a space except the very first word of the
 * answer; the answer stops after MOCK_TEXT_WORDS words. NULL when out of
 * memory. */
char *mock_words(uint64_t from, uint64_t count);

/* Splits an answer of `tokens` tokens into the content deltas of a stream:
 * *n deltas, delta i ending at cum[i] tokens (cum has MOCK_STREAM_DELTAS
 * entries). */
void mock_stream_split(uint64_t tokens, uint64_t cum[MOCK_STREAM_DELTAS], size_t *n);

/* Error bodies in Azure's and in OpenAI's shape. */
json_t *mock_azure_error(const char *code, const char *message);
json_t *mock_openai_error(const char *message, const char *type, const char *param, const char *code);

/* Answers 404 with body (consumed). */
void mock_call_not_found(mock_call *c, json_t *body);

/* ---- mock_openai.c ---------------------------------------------------- */

/* The tokens of the UTF-8 text s as this mock counts them, in thousandths
 * of a token: opt.cjk_tokens_per_char for each code point of a CJK script,
 * opt.tokens_per_char for every other one (docs/mock.md). */
long long mock_text_milli(const mock *m, const char *s);

/* A sum of mock_text_milli() in whole tokens, rounded up (0 for <= 0). */
uint64_t mock_tokens(long long milli);

/* Sets the call's style and Azure operation name, and (Azure) its
 * api-version from the query string. Every route of the family calls it
 * first. */
void mock_oai_style(mock_call *c, mock_style style, const char *operation);

/* Parses the body: the deployment comes from the path (deployment, resolved
 * before the body is looked at, as Azure does) or, when deployment is NULL,
 * from the body's "model" (copied to name, n >= MOCK_NAME_MAX + 1 bytes in
 * both cases). Returns the body (the caller's reference), or NULL when the
 * call was answered (400 not a JSON object or no model, 404 no such
 * deployment). */
json_t *mock_oai_body(mock_call *c, const char *deployment, char *name, size_t n);

/* What a call of prompt tokens asking for at most max_output tokens costs
 * the token bucket at admission: Azure's "prompt estimate + max_tokens";
 * on the OpenAI-style routes, OpenAI's "maximum of max_tokens and the
 * estimated number of tokens based on the character count" (or the sum,
 * with --openai-tpm sum). */
uint64_t mock_oai_charge(const mock_call *c, uint64_t prompt, uint64_t max_output);

/* The rest of the front door once the body is valid: --quota-exhausted,
 * --fail-503, a pending inject_429, then admission of 1 request and charge
 * tokens. 0 when admitted (the rate-limit headers are appended); -1 when
 * the call was answered (429, 503). */
int mock_oai_admit(mock_call *c, uint64_t charge);

/* Appends the x-ratelimit-* headers of the call's deployment as they are
 * now (none while they are switched off, nor for Bedrock and Gemini, which
 * send none). */
void mock_oai_headers(mock_call *c);

/* Answers 400 in OpenAI's shape naming param (may be NULL), with the
 * rate-limit headers when the deployment is known. */
void mock_oai_bad_request(mock_call *c, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* POST /openai/deployments/<name>/chat/completions (Azure style) and
 * POST /v1/chat/completions (OpenAI style; name is unused). */
void mock_route_azure(mock_call *c, const char *name);
void mock_route_openai(mock_call *c, const char *name);

/* ---- mock_embeddings.c ------------------------------------------------ */

/* POST /openai/deployments/<name>/embeddings (Azure style) and
 * POST /v1/embeddings, /openai/v1/embeddings (OpenAI style). */
void mock_route_azure_embeddings(mock_call *c, const char *name);
void mock_route_openai_embeddings(mock_call *c, const char *name);

/* ---- mock_responses.c ------------------------------------------------- */

/* POST /openai/deployments/<name>/responses and /openai/responses (Azure
 * style; the latter names the model in the body) and POST /v1/responses,
 * /openai/v1/responses (OpenAI style). */
void mock_route_azure_responses(mock_call *c, const char *name);
void mock_route_azure_responses_v(mock_call *c, const char *name);
void mock_route_openai_responses(mock_call *c, const char *name);

/* ---- mock_anthropic.c ------------------------------------------------- */

/* POST /v1/messages. */
void mock_route_anthropic(mock_call *c, const char *name);

/* ---- mock_control.c --------------------------------------------------- */

/* POST /control. */
void mock_route_control(mock_call *c, const char *name);

#endif
