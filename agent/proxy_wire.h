/* proxy_wire: the providers' wire formats, as the HTTP proxy reads
 * requests in them and answers errors in them (docs/protocol.md, "HTTP
 * proxy").
 *
 * Routes (POST only; another method on a route is 405):
 *   OpenAI     /v1/chat/completions, /v1/completions, /v1/embeddings,
 *              /v1/responses                       (model in the body)
 *   Azure      /openai/deployments/{name}/chat/completions, .../completions,
 *              .../embeddings, .../responses ?api-version=...
 *                                                  (model: the path's name)
 *              /openai/v1/chat/completions, ... (the v1 API: model in the body)
 *   Anthropic  /v1/messages                        (model in the body)
 * The model (or the Azure path's deployment) names a configured
 * deployment or group, by name or alias (config_model). Requests and
 * targets come in two families that share a body format: OpenAI and
 * Azure routes reach deployments of style azure, openai or custom;
 * /v1/messages reaches style anthropic (a group: every member must be of
 * the route's family).
 *
 * proxy_parse() checks a request the way a provider's front door would
 * (route, JSON body, model, stream and stream_options) plus sluice's own
 * headers (x-sluice-lane, -tenant, -tag: names as on the RESP socket;
 * x-sluice-max-wait-ms, x-sluice-deadline-ms: integers in ms), and
 * estimates its tokens (estimate.h) for the target's profile. What it
 * refuses comes back as a proxy_error; proxy_error_body() writes any
 * error in the shape of the API the request was for:
 *   OpenAI     {"error":{"message":..,"type":..,"param":..,"code":..}}
 *   Azure      {"error":{"code":..,"message":..}} (and "param" when one)
 *   Anthropic  {"type":"error","error":{"type":..,"message":..}}
 * from one table of error kinds (PROXY_ERROR_MAP). proxy_shed_answer()
 * is the 429 of a shed: the error body plus Retry-After (whole seconds,
 * rounded up) and retry-after-ms, which the SDKs' own retries honour.
 *
 * Depends on config, estimate, http_reader (the parsed message) and
 * jansson. Pure: no I/O, no globals. */
#ifndef SLUICE_PROXY_WIRE_H
#define SLUICE_PROXY_WIRE_H

#include <stddef.h>

#include <jansson.h>

#include "config.h"
#include "estimate.h"
#include "http_reader.h"
#include "resp.h"

/* Longest model name a request may give (an alias is at most
 * CONFIG_ALIAS_MAX; longer names are unknown). */
#define PROXY_MODEL_MAX 256
/* Largest x-sluice-max-wait-ms and x-sluice-deadline-ms: a week, as lanes. */
#define PROXY_WAIT_MAX_MS 604800000LL
/* The largest x-sluice-input-tokens a request may carry. */
#define PROXY_INPUT_TOKENS_MAX 1000000000LL

typedef enum proxy_api { PROXY_API_OPENAI = 0, PROXY_API_AZURE, PROXY_API_ANTHROPIC } proxy_api;

typedef enum proxy_op {
    PROXY_OP_CHAT = 0,
    PROXY_OP_COMPLETIONS,
    PROXY_OP_EMBEDDINGS,
    PROXY_OP_RESPONSES,
    PROXY_OP_MESSAGES
} proxy_op;

/* "openai", "azure", "anthropic"; "chat/completions", "messages", ... */
const char *proxy_api_name(proxy_api api);
const char *proxy_op_name(proxy_op op);

/* The error kinds: X(NAME, status, OpenAI type, OpenAI code, Azure code,
 * Anthropic type). NULL codes are JSON null. */
#define PROXY_ERROR_MAP(X)                                                                                             \
    X(BAD_REQUEST, 400, "invalid_request_error", NULL, "BadRequest", "invalid_request_error")                          \
    X(UNAUTHORIZED, 401, "invalid_request_error", "invalid_api_key", "401", "authentication_error")                    \
    X(NOT_FOUND, 404, "invalid_request_error", NULL, "404", "not_found_error")                                         \
    X(MODEL_NOT_FOUND, 404, "invalid_request_error", "model_not_found", "DeploymentNotFound", "not_found_error")       \
    X(METHOD, 405, "invalid_request_error", NULL, "405", "invalid_request_error")                                      \
    X(TIMEOUT, 408, "invalid_request_error", "timeout", "408", "invalid_request_error")                                \
    X(TOO_LARGE, 413, "invalid_request_error", "request_too_large", "413", "request_too_large")                        \
    X(HEADERS_TOO_LARGE, 431, "invalid_request_error", "request_header_fields_too_large", "431",                       \
      "invalid_request_error")                                                                                         \
    X(RATE_LIMITED, 429, "requests", "rate_limit_exceeded", "429", "rate_limit_error")                                 \
    X(INTERNAL, 500, "server_error", NULL, "InternalServerError", "api_error")                                         \
    X(NO_ENDPOINT, 501, "server_error", "not_implemented", "NotImplemented", "api_error")                              \
    X(BAD_GATEWAY, 502, "server_error", "bad_gateway", "BadGateway", "api_error")                                      \
    X(UNAVAILABLE, 503, "server_error", "service_unavailable", "ServiceUnavailable", "overloaded_error")               \
    X(GATEWAY_TIMEOUT, 504, "server_error", "timeout", "GatewayTimeout", "api_error")                                  \
    X(VERSION, 505, "invalid_request_error", NULL, "505", "invalid_request_error")

typedef enum proxy_error_kind {
#define PROXY_ERROR_ENUM(name, status, otype, ocode, acode, antype) PROXY_ERR_##name,
    PROXY_ERROR_MAP(PROXY_ERROR_ENUM)
#undef PROXY_ERROR_ENUM
        PROXY_ERR_KINDS
} proxy_error_kind;

/* The HTTP status of a kind. */
int proxy_error_status(proxy_error_kind kind);

/* The kind an HTTP status stands for (the server's own refusals: 400,
 * 408, 413, 431, 503, 505; any other 4xx: BAD_REQUEST, 5xx: INTERNAL). */
proxy_error_kind proxy_error_kind_of(int status);

/* What a refusal says. param names the offending field ("model",
 * "stream", "x-sluice-lane"), or is NULL. */
typedef struct proxy_error {
    proxy_error_kind kind;
    const char *param;
    char message[320];
} proxy_error;

/* The API whose shape answers a request to path: Azure for /openai/...,
 * Anthropic for /v1/messages... and /v1/complete or when the request
 * carries an anthropic-version header, else OpenAI. */
proxy_api proxy_api_of(const char *path, int has_anthropic_version);

/* A matched route. */
typedef struct proxy_route {
    proxy_api api;
    proxy_op op;
    int model_in_path;                    /* Azure deployments: the model is the path's name */
    char deployment[PROXY_MODEL_MAX + 1]; /* ... percent-decoded */
    char api_version[64];                 /* Azure: api-version, "" when absent */
} proxy_route;

/* Matches a request line. Returns 0 with *out filled, or -1 with *err
 * (NOT_FOUND for an unknown path, METHOD for a route asked with another
 * method than POST, BAD_REQUEST for an Azure deployment route without
 * api-version). */
int proxy_route_match(const char *method, const char *path, const char *query, proxy_route *out, proxy_error *err);

/* A request as the proxy will govern it. */
typedef struct proxy_request {
    proxy_route route;
    config_target target;            /* borrowed from the config given to proxy_parse */
    const char *name;                /* the target's name (borrowed, as target) */
    char model[PROXY_MODEL_MAX + 1]; /* as the request named it */
    int stream;                      /* "stream": true */
    int include_usage;               /* "stream_options": {"include_usage": true} */
    estimate est;                    /* the prompt and the max output */
    int split;                       /* the estimate is booked as input + output (always, today) */
    int exact;                       /* x-sluice-input-tokens: the input counted by the caller, exactly */
    char lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1], tag[CONFIG_NAME_MAX + 1]; /* "" when not given */
    long long max_wait_ms; /* x-sluice-max-wait-ms, -1 when not given */
    long long deadline_ms; /* x-sluice-deadline-ms, -1 when not given */
    json_t *body;          /* the parsed body (the request's reference) */
} proxy_request;

/* Reads and checks request m against cfg (see above). Returns 0 with *out
 * filled (free with proxy_request_free; target and name are borrowed
 * from cfg, so copy them before a reload can free it), or -1 with *err
 * and out->route.api the API whose shape the answer takes (free out with
 * proxy_request_free either way). */
int proxy_parse(const config *cfg, const http_msg *m, proxy_request *out, proxy_error *err);

/* Whether an Azure OpenAI api-version takes stream_options (the usage of
 * a stream): the REST specification has it from 2024-09-01-preview on
 * (stable 2024-10-21); older versions answer 400 "Unrecognized request
 * argument supplied: stream_options". A version that is not a date
 * (empty, "v1", "latest", "preview": the newer API forms) takes it. */
int proxy_azure_stream_options(const char *api_version);

/* Frees what proxy_parse put in r (its body). */
void proxy_request_free(proxy_request *r);

/* Appends the error body of kind in api's shape, with message and param
 * (NULL: none), to out. Returns 0 or RESP_ENOMEM. */
int proxy_error_body(proxy_api api, proxy_error_kind kind, const char *message, const char *param, resp_buf *out);

/* The 429 of a shed: body (api's shape, saying reason and the wait) and
 * the two headers a client's retry honours, written into h[0..1] with
 * their values in storage (kept by the caller while h is used). A
 * retry_after_ms < 0 (never: too large for the quota) gives no headers.
 * Returns the number of headers (0 or 2), or -1 when out of memory. */
typedef struct proxy_retry_headers {
    char seconds[24], ms[24];
} proxy_retry_headers;
struct http_header;
int proxy_shed_answer(proxy_api api, const char *reason, long long retry_after_ms, resp_buf *body,
                      struct http_header *h, proxy_retry_headers *storage);

/* The 429 of a shed for a budget in money: the provider's shape with
 * OpenAI's type insufficient_quota, a message that names the budget, its
 * period, what it has left (1e-6 of currency) and when it renews, and
 * Retry-After until then (none when it never does). Returns as
 * proxy_shed_answer(). */
int proxy_budget_answer(proxy_api api, const char *budget, const char *period, long long left_u, const char *currency,
                        long long retry_after_ms, resp_buf *body, struct http_header *h, proxy_retry_headers *storage);

#endif
