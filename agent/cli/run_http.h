/* run_http: libcurl multi driven by a libuv loop, for `sluice run`.
 *
 * One multi handle whose sockets are watched with uv_poll_t handles and
 * whose timeout is one uv_timer_t (curl_multi_socket_action, the
 * "multi_socket" API): any number of transfers on the loop's thread, no
 * thread per request, connections reused across transfers. A finished
 * transfer is taken off the multi handle and handed to the done callback
 * with its CURLcode; the callback may add new transfers.
 *
 * Depends on libcurl and libuv. Not thread-safe: everything happens on the
 * loop's thread. Ownership: easy handles stay the caller's; run_http_close()
 * frees the module once its libuv handles are closed (the loop must run). */
#ifndef SLUICE_RUN_HTTP_H
#define SLUICE_RUN_HTTP_H

#include <curl/curl.h>
#include <uv.h>

typedef struct run_http run_http;

/* A transfer ended (taken off the multi handle already). */
typedef void (*run_http_done_cb)(void *ud, CURL *easy, CURLcode result);

/* Returns 0 and *out, or -1 (out of memory, or curl_multi_init failed). */
int run_http_new(uv_loop_t *loop, run_http_done_cb done, void *ud, run_http **out);

/* Starts the transfer set up on easy. Returns 0, or -1 (curl refused it:
 * then done is never called for it). */
int run_http_add(run_http *h, CURL *easy);

/* Aborts a transfer that has not finished; done is not called for it. */
void run_http_abort(run_http *h, CURL *easy);

/* Transfers in progress. */
int run_http_running(const run_http *h);

/* Cleans up the multi handle (abort the transfers still running first),
 * closes the libuv handles and frees h once they are closed. NULL is a
 * no-op. */
void run_http_close(run_http *h);

#endif
