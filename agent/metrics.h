/* metrics: the optional Prometheus endpoint (agent.metrics = host:port).
 *
 * A tiny HTTP/1.0 server on libuv TCP: `GET /metrics` (or HEAD) answers
 * the text exposition format 0.0.4 with the engine's and the server's
 * counters, then closes the connection. Anything else gets 404 or 405; a
 * request that is not complete within METRICS_REQUEST_TIMEOUT_MS, or larger
 * than 8 KiB, is dropped. Rendering only reads counters, so a scrape costs
 * the hot path nothing. The metric names are listed in docs/protocol.md.
 *
 * Depends on libuv, server and engine. Never prints. Loop thread only.
 * Errors are negative SL_E* codes. */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stddef.h>
#include <uv.h>

#include "resp.h"
#include "server.h"

#define METRICS_REQUEST_TIMEOUT_MS 5000

typedef struct metrics metrics;

/* Creates the endpoint for server s (borrowed; it must outlive m). */
int metrics_new(uv_loop_t *loop, server *s, metrics **out);

/* Listens on host:port (a name is resolved once, now). Returns 0, or
 * SL_EIO with a message in err. */
int metrics_listen(metrics *m, const char *host, int port, char *err, size_t errlen);

/* Closes the listener and every connection; done (optional) runs when all
 * handles are closed, then call metrics_free(). */
void metrics_close(metrics *m, void (*done)(void *arg), void *arg);

/* Frees a closed endpoint. NULL is a no-op. */
void metrics_free(metrics *m);

/* Appends the exposition text for s to out. Returns 0 or RESP_ENOMEM. */
int metrics_render(server *s, resp_buf *out);

#endif
