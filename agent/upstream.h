/* upstream: libcurl's multi interface on sluiced's libuv loop, for the
 * HTTP proxy's transfers to the providers.
 *
 * The pattern of libsluice's caller (lib/caller.c, lib/include/sluice_uv.h)
 * and of libcurl's multi-uv example: the multi handle says which sockets
 * to watch (CURLMOPT_SOCKETFUNCTION: one uv_poll_t each) and when to call
 * back without socket activity (CURLMOPT_TIMERFUNCTION: one uv_timer_t).
 * A transfer is an easy handle the caller prepared; when it ends, its
 * done hook gets libcurl's result from the loop, outside libcurl's own
 * callbacks, so the hook may clean the handle up or start another one.
 * Connections are reused across transfers (the multi handle's pool).
 *
 * Depends on libuv and libcurl. Loop thread only. Never prints. Errors
 * are negative SL_E* codes. */
#ifndef SLUICE_UPSTREAM_H
#define SLUICE_UPSTREAM_H

#include <curl/curl.h>
#include <uv.h>

typedef struct upstream upstream;

/* Called when a transfer ends (not after upstream_abort). */
typedef void (*upstream_done_fn)(void *arg, CURLcode result);

/* A driver on loop. Returns 0 or SL_ENOMEM. */
int upstream_new(uv_loop_t *loop, upstream **out);

/* Starts easy (its CURLOPT_PRIVATE is the driver's while it runs); done
 * runs once it ends. Returns 0, SL_ENOMEM or SL_EINVAL (libcurl refused
 * it: the handle is in use elsewhere). */
int upstream_start(upstream *u, CURL *easy, upstream_done_fn done, void *arg);

/* Stops a running transfer at once; its done hook will not run. The
 * handle is the caller's again. */
void upstream_abort(upstream *u, CURL *easy);

/* Transfers running. */
size_t upstream_running(const upstream *u);

/* Aborts what still runs (no hooks), closes the handles, and frees the
 * driver once they are closed (the loop must run). NULL is a no-op. */
void upstream_close(upstream *u);

#endif
