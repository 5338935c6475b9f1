/* proxy_call: one governed request of the HTTP proxy, from the slot to
 * the answer (docs/architecture.md, "The path of a proxied call").
 *
 * A call copies what it needs from the parsed request (a reload may free
 * the configuration it was parsed against), then:
 *   ACQUIRING  engine_acquire_req() on the daemon's engine with the
 *              estimate (split when the target counts input and output
 *              apart), lane, tenant, tag and the max wait (x-sluice-max-
 *              wait-ms, capped by x-sluice-deadline-ms). A shed is the
 *              provider-shaped 429 with Retry-After and retry-after-ms.
 *   SENDING    to the granted deployment (a group: the member the grant
 *              names; the body's "model" becomes the member's name), with
 *              the caller's own headers (credentials included) and the
 *              hop-by-hop ones dropped: proxy_call_upstream_headers().
 *              A 2xx text/event-stream answer goes to the client event by
 *              event as it arrives (back-pressure pauses libcurl), its
 *              usage read by usage_sse; any other answer is buffered
 *              (bounded), classified (verdict_compute) and passed on.
 *              Each attempt is settled with its outcome, usage and the
 *              provider's rate-limit headers, as SETTLE does.
 *   ASKING     a retryable failure (429 that is not a hard quota, 5xx,
 *              connect errors and timeouts) before any byte reached the
 *              client asks the fleet's retry budget (engine_retry) when
 *              agent.http.max_attempts and the deadline leave room;
 *   BACKOFF    then waits (full jitter, Retry-After as a floor) and
 *              acquires again.
 * The client leaving gives the slot back while waiting for it
 * (engine_cancel), aborts the transfer and settles what was used during
 * it, and stops a backoff.
 * These steps are the rows of the proxy's step table on libsluice's
 * governed-call state machine (gcall_sm, lib/gcall.h): the machine holds
 * the step, decides the retry (agent.http.max_attempts, the backoff, the
 * deadline) and runs the backoff on the call's timer; the proxy supplies
 * how each step is done and what the client is answered.
 *
 * Depends on the engine, http_server, proxy_wire, libsluice's gcall_sm
 * and curlm (libcurl multi on the loop), endpoint, usage_sse, verdict,
 * classify and ratelimit. Loop thread only. Never prints. */
#ifndef SLUICE_PROXY_CALL_H
#define SLUICE_PROXY_CALL_H

#include <stddef.h>
#include <uv.h>

#include "engine.h"
#include "http_server.h"
#include "proxy_wire.h"

struct proxy_stats;
struct proxy_auth;
typedef struct proxy_calls proxy_calls;

/* The calls of one proxy on loop, governed by e (borrowed), counted in st
 * (borrowed). Returns 0 or SL_ENOMEM. */
int proxy_calls_new(uv_loop_t *loop, engine *e, struct proxy_stats *st, proxy_calls **out);

/* Governs request r as parsed into pr (copied; pr stays the caller's),
 * with the credentials auth decided (proxy_auth_check: injected or passed
 * through; a client key's tenant and lane replace the request's). From
 * here the call answers r. */
void proxy_call_start(proxy_calls *set, http_request *r, const proxy_request *pr, const struct proxy_auth *auth);

/* Calls in progress. */
size_t proxy_calls_live(const proxy_calls *set);

/* Ends every call still in progress (after the server's drain their
 * clients are gone), stops the upstream transfers and closes the
 * handles; the loop must run for them to close. */
void proxy_calls_close(proxy_calls *set);

/* Frees a closed set (after the loop ran). NULL is a no-op. */
void proxy_calls_free(proxy_calls *set);

/* Answers r with an error of kind in api's shape (and headers h), counted
 * in st. */
void proxy_answer_error(struct proxy_stats *st, http_request *r, proxy_api api, proxy_error_kind kind,
                        const char *message, const char *param, const http_header *h, size_t nh);

#endif
