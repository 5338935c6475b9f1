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
