/* curlm: libcurl's multi interface driven by an event loop, the one copy
 * of that glue for libsluice's caller (lib/caller.c, on whatever loop an
 * sl_loop describes) and sluiced's HTTP proxy (agent/proxy_call.c, on
 * the daemon's libuv loop).
 *
 * The pattern of libcurl's multi-uv example: the multi handle says which
 * sockets to watch (CURLMOPT_SOCKETFUNCTION) and when to call back
 * without socket activity (CURLMOPT_TIMERFUNCTION); the loop reports
 * back with curlm_socket() and curlm_timeout(), which run
 * curl_multi_socket_action() and hand every finished transfer to its
 * done hook. The hooks run outside libcurl's own callbacks, so a hook may
 * start another transfer, remove one, or free the driver. Connections
 * are reused across transfers (the multi handle's pool).
 *
 * The loop is reached through curlm_io (the watch and timer of an
 * sl_loop, in the same shapes); curlm_new_uv() fills one for a
 * uv_loop_t with one uv_poll_t per socket and one uv_timer_t.
 *
 * A transfer's record (curlm_xfer) is its owner's memory, embedded in
 * the owner's struct, so starting one allocates nothing of the driver's
 * and removing one that has ended is a no-op. While a transfer runs, its
 * easy handle's CURLOPT_PRIVATE is the driver's; the owner's value is
 * restored when it ends or is removed. Pausing a transfer
 * (CURL_WRITEFUNC_PAUSE, then curl_easy_pause() from the loop) is between
 * the owner and libcurl: libcurl asks the driver for the sockets and the
 * timeout that resume it.
 *
 * Depends on libcurl and libuv. Loop thread only. Never prints. Errors
 * are negative SL_E* codes. Internal to libsluice and sluiced. */
#ifndef SLUICE_LIB_CURLM_H
#define SLUICE_LIB_CURLM_H

#include <curl/curl.h>
#include <stddef.h>

struct uv_loop_s; /* uv_loop_t: <uv.h> is needed only by its callers */

typedef struct curlm curlm;

/* A transfer's end: result is libcurl's. Not called after curlm_remove(). */
typedef void (*curlm_done_fn)(void *arg, CURLcode result);

/* One transfer, in its owner's memory: zeroed before its first
 * curlm_add(); the fields are the driver's. */
typedef struct curlm_xfer {
    curlm *m; /* while it runs, else NULL */
    CURL *easy;
    curlm_done_fn done;
    void *arg;
    void *saved_private; /* the owner's CURLOPT_PRIVATE */
    struct curlm_xfer *prev, *next;
} curlm_xfer;

/* The loop, as the driver sees it (SL_LOOP_* events of sluice.h). */
typedef struct curlm_io {
    void *data;
    /* Watch fd for events (SL_LOOP_READ | SL_LOOP_WRITE), replacing what
     * was watched; events 0: stop watching it. *sock is the loop's slot
     * for fd (NULL the first time); it may change it. 0 or negative. */
    int (*watch)(void *data, int fd, int events, void **sock);
    /* Call curlm_timeout() in ms milliseconds (0: from the loop, not from
     * here), replacing the previous request; ms < 0: cancel it. */
    void (*timer)(void *data, long long ms);
    /* Optional: the driver is freed, after its last watch and timer
     * calls; nothing of io is called after it. */
    void (*close)(void *data);
} curlm_io;

/* A driver on the loop io describes (copied). Returns 0 or SL_ENOMEM. */
int curlm_new(const curlm_io *io, curlm **out);

/* A driver on a libuv loop: its own uv_poll_t per socket and uv_timer_t,
 * whose memory goes in their close callbacks once curlm_free() ran (the
 * loop must run). Returns 0 or SL_ENOMEM. */
int curlm_new_uv(struct uv_loop_s *loop, curlm **out);

/* Starts easy as transfer x; done(arg, result) runs once it ends.
 * Returns 0, SL_ECLOSING (the driver is being freed), SL_ENOMEM or
 * SL_EINVAL (x runs already, or libcurl refused easy: it is in use
 * elsewhere). On an error done will not run and easy is untouched. */
int curlm_add(curlm *m, curlm_xfer *x, CURL *easy, curlm_done_fn done, void *arg);

/* Stops x at once, if it runs; its done hook will not run. The easy
 * handle is its owner's again. Not from inside libcurl's callbacks. */
void curlm_remove(curlm_xfer *x);

/* Whether x runs (started, not ended nor removed). */
int curlm_xfer_running(const curlm_xfer *x);

/* The loop's reports: fd is ready for events (SL_LOOP_READ, _WRITE,
 * _ERROR); the timer fired. Each runs libcurl and the done hooks of the
 * transfers that ended. */
void curlm_socket(curlm *m, int fd, int events);
void curlm_timeout(curlm *m);

/* Transfers running. */
size_t curlm_running(const curlm *m);

/* Removes what still runs (no hooks), cleans the multi handle up and
 * closes io. From a done hook too: the driver's memory then goes when
 * the hook returns. NULL is a no-op. */
void curlm_free(curlm *m);

#endif
