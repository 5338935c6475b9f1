#define _POSIX_C_SOURCE 200809L
#include "redis_uv.h"

#include <stdlib.h>

typedef struct redis_uv {
    redisAsyncContext *ac; /* NULL once hiredis cleaned up */
    uv_poll_t poll;
    int events;
} redis_uv;

static void on_poll(uv_poll_t *h, int status, int events) {
    redis_uv *p = h->data;
    if (status < 0) {
        /* The socket failed (a refused connect, a reset). hiredis finds out
         * what happened itself: a pending connect checks SO_ERROR in its
         * write handler, a connected socket fails its read. */
        if (!p->ac) return;
        if (!(p->ac->c.flags & REDIS_CONNECTED)) redisAsyncHandleWrite(p->ac);
        else redisAsyncHandleRead(p->ac);
        return;
    }
    if (p->ac && (events & UV_READABLE)) redisAsyncHandleRead(p->ac);
    if (p->ac && (events & UV_WRITABLE)) redisAsyncHandleWrite(p->ac);
}

static void set_events(redis_uv *p, int events) {
    p->events = events;
    if (events) uv_poll_start(&p->poll, events, on_poll);
    else uv_poll_stop(&p->poll);
}

static void add_read(void *d) { set_events(d, ((redis_uv *)d)->events | UV_READABLE); }
static void del_read(void *d) { set_events(d, ((redis_uv *)d)->events & ~UV_READABLE); }
static void add_write(void *d) { set_events(d, ((redis_uv *)d)->events | UV_WRITABLE); }
static void del_write(void *d) { set_events(d, ((redis_uv *)d)->events & ~UV_WRITABLE); }

static void on_closed(uv_handle_t *h) { free(h->data); }

static void cleanup(void *d) {
    redis_uv *p = d;
    p->ac = NULL; /* the context is being freed */
    uv_close((uv_handle_t *)&p->poll, on_closed);
}

int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop) {
    if (ac->ev.data) return REDIS_ERR;
    redis_uv *p = calloc(1, sizeof(*p));
    if (!p) return REDIS_ERR;
    if (uv_poll_init(loop, &p->poll, ac->c.fd) != 0) {
        free(p);
        return REDIS_ERR;
    }
    p->poll.data = p;
    p->ac = ac;
    ac->ev.data = p;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    return REDIS_OK;
}
