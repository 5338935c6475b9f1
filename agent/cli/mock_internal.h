/* mock_internal: what the modules of the mock provider share.
 *
 * mock.c owns the server (deployments, routing, the neighbour, the public
 * API in mock.h); mock_openai.c answers the Azure / OpenAI chat routes and
 * mock_control.c the POST /control route. A mock_call is one request while
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
/* A streamed answer carries at most this many content deltas (each a
 * share of the completion), so a million-token answer is not a million
 * timer ticks. */
#define MOCK_STREAM_DELTAS 16
#define MOCK_STREAM_MAX_EVENTS (MOCK_STREAM_DELTAS + 8)
/* Words of text in an answer, at most (the usage says the rest). */
#define MOCK_TEXT_WORDS 2048

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

/* An accepted call until the server lets go of it (the request's udata):
 * where it was counted, for the abandoned count. */
typedef struct mock_pending {
    mock *m;
    mock_ledger_ref ref;
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

/* Uniform in [lo, hi], and in [0, 1), from the mock's seeded sequence. */
uint64_t mock_rng_range(uint64_t s[4], uint64_t lo, uint64_t hi);
double mock_rng_unit(uint64_t s[4]);

/* A duration the way Go's time.Duration prints it ("250ms", "1.5s"). */
void mock_fmt_duration(char *out, size_t n, uint64_t ms);

/* ms rounded up to whole milliseconds (0 for ms <= 0). */
uint64_t mock_ceil_ms(double ms);

/* 1 when s is a valid deployment name. */
int mock_name_ok(const char *s);

/* The deployment called name, created on first use unless the set is
 * fixed. NULL when it does not exist (or cannot be created). */
mock_deployment *mock_dep_get(mock *m, const char *name, double now_ms);

/* Refills the deployment's buckets up to now_ms. */
void mock_dep_refill(const mock *m, mock_deployment *d, double now_ms);

/* Admission of one request of `tokens` estimated tokens. Takes from both
 * buckets and returns 0 when both hold it; otherwise takes nothing and
 * returns the wait in ms until both will, with *by_tokens set when the
 * token limit is the longer wait. */
double mock_dep_admit(const mock *m, mock_deployment *d, double tokens, int *by_tokens);

/* Appends one header line (fmt must end in "\r\n") to the call's answer. */
void mock_call_header(mock_call *c, const char *fmt, ...);

/* Sends body (a JSON value, consumed) with status, counts the call in the
 * ledger and logs it. */
void mock_call_finish(mock_call *c, int status, mock_outcome o, json_t *body, uint64_t charged,
                      uint64_t reported, uint64_t delay_ms);

/* Answers an accepted call with a stream of Server-Sent Events (e, whose
 * texts are freed): the first at start_ms, the others spread evenly over
 * the next service_ms, one write each. Counted like mock_call_finish(). */
void mock_call_finish_stream(mock_call *c, mock_events *e, uint64_t charged, uint64_t reported,
                             uint64_t start_ms, uint64_t service_ms);

/* Appends one event: "event: NAME" when name is not NULL, then "data: "
 * and data (a JSON value, consumed; or raw when it is NULL). */
void mock_events_add(mock_events *e, const char *name, json_t *data, const char *raw,
                     uint32_t generated);

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
json_t *mock_openai_error(const char *message, const char *type, const char *param,
                          const char *code);

/* Answers 404 with body (consumed). */
void mock_call_not_found(mock_call *c, json_t *body);

/* ---- mock_openai.c ---------------------------------------------------- */

/* POST /openai/deployments/<name>/chat/completions (Azure style) and
 * POST /v1/chat/completions (OpenAI style; name is unused). */
void mock_route_azure(mock_call *c, const char *name);
void mock_route_openai(mock_call *c, const char *name);

/* ---- mock_control.c --------------------------------------------------- */

/* POST /control. */
void mock_route_control(mock_call *c, const char *name);

#endif
