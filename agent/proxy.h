/* proxy: sluiced's HTTP proxy, the request handler behind http_server.
 *
 * Each request is read and checked by proxy_wire (route, body, model to a
 * configured deployment or group, stream, the estimate, the x-sluice-*
 * headers) against the engine's current configuration; what it refuses is
 * answered in the shape of the request's API (404 for an unknown path or
 * model, 405, 400), and so are the server's own refusals (400, 408, 413,
 * 431, 503, 505: the error_body hook).
 *
 * A request that maps to a deployment or group is governed by
 * proxy_call (proxy_call.h): a slot acquired on the engine in-process
 * with the estimate and the x-sluice-* headers, the request forwarded to
 * the granted deployment's endpoint with the caller's own credentials
 * (pass-through: the proxy holds no provider key), the provider's answer
 * passed back (a 2xx event stream event by event, usage read with
 * usage_sse), each attempt settled with its usage and the provider's
 * headers, retryable failures retried under the fleet's retry budget. A
 * target without an endpoint is answered 501 with what the proxy made of
 * the request (x-sluice-target, -estimate-input, -estimate-output,
 * -stream). docs/protocol.md, "HTTP proxy", has the wire contract.
 *
 * Depends on http_server, proxy_wire, proxy_call and the engine.
 * Never prints: messages go to the log hook. Loop thread only. Errors are
 * negative SL_E* codes. */
#ifndef SLUICE_PROXY_H
#define SLUICE_PROXY_H

#include <stddef.h>
#include <uv.h>

#include "engine.h"
#include "http_server.h"
#include "proxy_wire.h"

typedef struct proxy proxy;

/* What the proxy made of the requests it was handed. */
typedef struct proxy_stats {
    unsigned long long by_api[3];               /* recognised requests, by proxy_api */
    unsigned long long errors[PROXY_ERR_KINDS]; /* answered with the proxy's own error, by kind */
    unsigned long long forwarded;               /* attempts sent upstream (retries included) */
    unsigned long long streamed;                /* event streams passed through to the client */
    unsigned long long shed;                    /* answered 429 by the fleet's budget */
    unsigned long long retried;                 /* attempts retried under the fleet's retry budget */
    unsigned long long retries_refused;         /* retries the fleet's retry budget refused */
    unsigned long long upstream_errors;         /* attempts that failed: 429, 5xx, transport, timeout */
    unsigned long long upstream_timeouts;       /* ... of which timed out (agent.http.upstream_timeout_ms) */
    unsigned long long answered;                /* answered with the provider's response */
    unsigned long long abandoned;               /* clients gone before their answer was complete */
    unsigned long long abandoned_waiting;       /* ... of which while waiting for a slot (given back) */
    unsigned long long live;                    /* gauge: calls in progress */
    unsigned long long unauthorized;            /* refused 401 by the credential rules (proxy_auth) */
    unsigned long long injected;                /* requests sent with a deployment's own key (inject_key) */
    /* agent.http.mode: observe. Each request goes upstream at once while
     * its acquire runs beside it; what that acquire answered is what
     * governing would have done. */
    unsigned long long observed;          /* requests forwarded at once */
    unsigned long long would_wait;        /* ... whose slot lay ahead (waited_ms > 0) */
    unsigned long long would_wait_ms;     /* ... the sum of those waits */
    unsigned long long would_wait_max_ms; /* ... the longest */
    unsigned long long would_shed;        /* ... that would have been answered 429 */
    unsigned long long would_shed_by_reason[ENGINE_SHED_REASONS];
    unsigned long long observe_errors; /* ... whose acquire failed (not a shed): nothing recorded */
} proxy_stats;

/* A proxy for engine e (borrowed; it must outlive the proxy), with its
 * HTTP server on loop. log (optional) gets the server's lines. Returns 0,
 * SL_EINVAL or SL_ENOMEM. */
int proxy_new(uv_loop_t *loop, engine *e, void (*log)(void *ud, int level, const char *msg), void *log_ud, proxy **out);

/* Listens on agent.http.listen. Returns 0 or SL_EIO with a message. */
int proxy_listen(proxy *p, char *err, size_t errlen);

/* After engine_reload: the server takes the new limits (the listeners
 * stay; the routes read the new deployments and aliases at once). */
void proxy_apply_config(proxy *p);

void proxy_stop_accepting(proxy *p);

/* Drains the server (see http_server_close); done (optional) runs when
 * it is closed; then proxy_free(). */
void proxy_close(proxy *p, void (*done)(void *arg), void *arg);

void proxy_free(proxy *p);

void proxy_get_stats(const proxy *p, proxy_stats *ps, http_stats *hs);

/* The server (for its addresses). */
const http_server *proxy_server(const proxy *p);

#endif
