/* sluice_uv.h: the libuv adapter of libsluice's governed calls.
 *
 * Attaches an sl_caller (sluice.h, "governed calls on your event loop") to
 * a uv_loop_t the application owns:
 *
 *     sl_caller *c;
 *     sl_caller_new(gov, &c);
 *     sl_uv_attach(c, uv_default_loop());
 *     sl_call_start(c, &opts, &http, on_done, arg, &call);
 *     uv_run(uv_default_loop(), UV_RUN_DEFAULT);   // ... sl_caller_free(c) when done
 *
 * Header-only, like hiredis' adapters/libuv.h: it is compiled with the
 * application's libuv, and libsluice itself exports nothing for it. The
 * adapter keeps one uv_poll_t per socket libcurl uses, one uv_timer_t and
 * one uv_async_t (the governor's thread wakes the loop through it; it is
 * the only thread-safe part). These handles keep the loop alive while the
 * caller is attached: uv_run() returns once sl_caller_free() ran and they
 * are closed. Their memory is released in their close callbacks, so the
 * loop must run after sl_caller_free() (uv_run, or uv_loop_close fails
 * with UV_EBUSY). Depends on libuv >= 1.x and sluice.h. */
#ifndef SLUICE_UV_H
#define SLUICE_UV_H

#include <stdlib.h>
#include <uv.h>

#include "sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_uv__adapter sl_uv__adapter;

/* One watched socket. */
typedef struct sl_uv__sock {
    uv_poll_t poll;
    int fd;
    sl_uv__adapter *a;
    struct sl_uv__sock *prev, *next;
} sl_uv__sock;

struct sl_uv__adapter {
    uv_loop_t *loop;
    sl_caller *caller;
    uv_timer_t timer;
    uv_async_t async;
    sl_uv__sock *socks; /* every socket with an open poll handle */
    int open;           /* handles whose close callback has not run */
};

static inline void sl_uv__closed(sl_uv__adapter *a) {
    if (--a->open == 0) free(a);
}

static inline void sl_uv__on_sock_closed(uv_handle_t *h) {
    sl_uv__sock *s = (sl_uv__sock *)h->data;
    sl_uv__adapter *a = s->a;
    free(s);
    sl_uv__closed(a);
}

static inline void sl_uv__on_handle_closed(uv_handle_t *h) { sl_uv__closed((sl_uv__adapter *)h->data); }

static inline void sl_uv__sock_close(sl_uv__sock *s) {
    sl_uv__adapter *a = s->a;
    if (s->prev) s->prev->next = s->next;
    else a->socks = s->next;
    if (s->next) s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, sl_uv__on_sock_closed);
}

static inline void sl_uv__on_poll(uv_poll_t *p, int status, int events) {
    sl_uv__sock *s = (sl_uv__sock *)p->data;
    int ev = 0;
    if (status < 0) ev |= SL_LOOP_ERROR;
    if (events & UV_READABLE) ev |= SL_LOOP_READ;
    if (events & UV_WRITABLE) ev |= SL_LOOP_WRITE;
    sl_caller_io(s->a->caller, s->fd, ev);
}

static inline int sl_uv__watch(void *data, int fd, int events, void **sock) {
    sl_uv__adapter *a = (sl_uv__adapter *)data;
    sl_uv__sock *s = (sl_uv__sock *)*sock;
    if (events == 0) {
        if (s) sl_uv__sock_close(s);
        *sock = NULL;
        return 0;
    }
    if (!s) {
        s = (sl_uv__sock *)calloc(1, sizeof(*s));
        if (!s) return -1;
        if (uv_poll_init_socket(a->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->a = a;
        s->poll.data = s;
        s->next = a->socks;
        if (a->socks) a->socks->prev = s;
        a->socks = s;
        a->open++;
        *sock = s;
    }
    int uv_events = 0;
    if (events & SL_LOOP_READ) uv_events |= UV_READABLE;
    if (events & SL_LOOP_WRITE) uv_events |= UV_WRITABLE;
    return uv_poll_start(&s->poll, uv_events, sl_uv__on_poll) == 0 ? 0 : -1;
}

static inline void sl_uv__on_timer(uv_timer_t *t) { sl_caller_timer(((sl_uv__adapter *)t->data)->caller); }

static inline void sl_uv__timer(void *data, long long ms) {
    sl_uv__adapter *a = (sl_uv__adapter *)data;
    if (ms < 0) uv_timer_stop(&a->timer);
    else uv_timer_start(&a->timer, sl_uv__on_timer, (uint64_t)ms, 0);
}

static inline void sl_uv__on_async(uv_async_t *h) { sl_caller_wake(((sl_uv__adapter *)h->data)->caller); }

/* The one function libsluice calls from another thread. */
static inline void sl_uv__wake(void *data) { uv_async_send(&((sl_uv__adapter *)data)->async); }

static inline void sl_uv__close(void *data) {
    sl_uv__adapter *a = (sl_uv__adapter *)data;
    while (a->socks) sl_uv__sock_close(a->socks);
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->timer, sl_uv__on_handle_closed);
    uv_close((uv_handle_t *)&a->async, sl_uv__on_handle_closed);
}

/* Attaches caller c to loop (on the loop's thread). Returns 0, SL_ENOMEM,
 * SL_EIO (libuv refused a handle) or SL_EINVAL (c attached already). */
static inline int sl_uv_attach(sl_caller *c, uv_loop_t *loop) {
    if (!c || !loop) return SL_EINVAL;
    sl_uv__adapter *a = (sl_uv__adapter *)calloc(1, sizeof(*a));
    if (!a) return SL_ENOMEM;
    a->loop = loop;
    a->caller = c;
    if (uv_async_init(loop, &a->async, sl_uv__on_async) != 0) {
        free(a);
        return SL_EIO;
    }
    a->async.data = a;
    uv_timer_init(loop, &a->timer);
    a->timer.data = a;
    a->open = 2;
    sl_loop l;
    sl_loop_init(&l);
    l.data = a;
    l.watch = sl_uv__watch;
    l.timer = sl_uv__timer;
    l.wake = sl_uv__wake;
    l.close = sl_uv__close;
    int rc = sl_caller_attach(c, &l);
    if (rc != 0) sl_uv__close(a); /* freed once its handles are closed */
    return rc;
}

#ifdef __cplusplus
}
#endif
#endif
