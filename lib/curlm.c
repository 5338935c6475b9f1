/* curlm: libcurl multi driven by an event loop. See curlm.h. */
#define _POSIX_C_SOURCE 200809L
#include "curlm.h"

#include <stdlib.h>
#include <uv.h>

#include "sluice.h"

struct curlm {
    CURLM *multi;
    curlm_io io;
    curlm_xfer *xfers; /* running */
    size_t nxfers;
    int depth;   /* dispatches in progress (curlm_socket, curlm_timeout) */
    int closing; /* curlm_free ran */
};

/* ---- transfers ---------------------------------------------------------------------- */

/* Takes x out of the multi handle and gives its owner the easy handle
 * (and its CURLOPT_PRIVATE) back. */
static void xfer_end(curlm_xfer *x) {
    curlm *m = x->m;
    curl_multi_remove_handle(m->multi, x->easy);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x->saved_private);
    if (x->prev) x->prev->next = x->next;
    else m->xfers = x->next;
    if (x->next) x->next->prev = x->prev;
    x->prev = x->next = NULL;
    x->m = NULL;
    m->nxfers--;
}

int curlm_add(curlm *m, curlm_xfer *x, CURL *easy, curlm_done_fn done, void *arg) {
    if (!m || !x || !easy || !done || x->m) return SL_EINVAL;
    if (m->closing) return SL_ECLOSING;
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, x);
    CURLMcode mc = curl_multi_add_handle(m->multi, easy);
    if (mc != CURLM_OK) {
        curl_easy_setopt(easy, CURLOPT_PRIVATE, priv);
        return mc == CURLM_OUT_OF_MEMORY ? SL_ENOMEM : SL_EINVAL;
    }
    x->m = m;
    x->easy = easy;
    x->done = done;
    x->arg = arg;
    x->saved_private = priv;
    x->prev = NULL;
    x->next = m->xfers;
    if (m->xfers) m->xfers->prev = x;
    m->xfers = x;
    m->nxfers++;
    return 0;
}

void curlm_remove(curlm_xfer *x) {
    if (x && x->m) xfer_end(x);
}

int curlm_xfer_running(const curlm_xfer *x) { return x && x->m; }

size_t curlm_running(const curlm *m) { return m ? m->nxfers : 0; }

/* Hands every finished transfer to its hook, from the loop: libcurl's
 * callbacks have returned, so a hook may start, remove or free. */
static void check_done(curlm *m) {
    CURLMsg *msg;
    int left;
    while (!m->closing && (msg = curl_multi_info_read(m->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL *easy = msg->easy_handle;
        CURLcode cc = msg->data.result;
        char *priv = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        curlm_xfer *x = (curlm_xfer *)(void *)priv;
        if (!x || x->m != m || x->easy != easy) {
            curl_multi_remove_handle(m->multi, easy); /* not ours: cannot happen */
            continue;
        }
        xfer_end(x);
        x->done(x->arg, cc);
    }
}

/* ---- the loop's reports ------------------------------------------------------------ */

static void dispatch_leave(curlm *m) {
    if (--m->depth == 0 && m->closing) free(m);
}

void curlm_socket(curlm *m, int fd, int events) {
    if (!m || m->closing) return;
    int flags = 0, running;
    if (events & SL_LOOP_READ) flags |= CURL_CSELECT_IN;
    if (events & SL_LOOP_WRITE) flags |= CURL_CSELECT_OUT;
    if (events & SL_LOOP_ERROR) flags |= CURL_CSELECT_ERR;
    m->depth++;
    curl_multi_socket_action(m->multi, (curl_socket_t)fd, flags, &running);
    check_done(m);
    dispatch_leave(m);
}

void curlm_timeout(curlm *m) {
    if (!m || m->closing) return;
    int running;
    m->depth++;
    curl_multi_socket_action(m->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(m);
    dispatch_leave(m);
}

/* ---- libcurl's requests ------------------------------------------------------------- */

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    curlm *m = userp;
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= SL_LOOP_READ;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= SL_LOOP_WRITE;
    void *slot = socketp;
    int rc = m->io.watch(m->io.data, (int)fd, events, &slot);
    /* (During curl_multi_cleanup the multi handle takes no assignments.) */
    if (slot != socketp && !m->closing) curl_multi_assign(m->multi, fd, slot);
    return rc < 0 ? -1 : 0;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    curlm *m = userp;
    /* libcurl must not be re-entered from here: the loop's timer, even at
     * 0 ms, calls back from the loop. */
    m->io.timer(m->io.data, timeout_ms < 0 ? -1 : (long long)timeout_ms);
    return 0;
}

/* ---- the driver ----------------------------------------------------------------------- */

int curlm_new(const curlm_io *io, curlm **out) {
    if (!out) return SL_EINVAL;
    *out = NULL;
    if (!io || !io->watch || !io->timer) return SL_EINVAL;
    curlm *m = calloc(1, sizeof(*m));
    if (!m) return SL_ENOMEM;
    m->io = *io;
    m->multi = curl_multi_init();
    if (!m->multi) {
        free(m);
        return SL_ENOMEM;
    }
    curl_multi_setopt(m->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(m->multi, CURLMOPT_SOCKETDATA, m);
    curl_multi_setopt(m->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(m->multi, CURLMOPT_TIMERDATA, m);
    *out = m;
    return 0;
}

void curlm_free(curlm *m) {
    if (!m || m->closing) return;
    while (m->xfers) xfer_end(m->xfers);
    m->closing = 1;
    curl_multi_cleanup(m->multi);
    m->multi = NULL;
    if (m->io.close) m->io.close(m->io.data);
    if (m->depth == 0) free(m);
}

/* ---- on libuv -------------------------------------------------------------------------- */

typedef struct uvio uvio;

/* One socket libcurl asked to watch. */
typedef struct uvio_sock {
    uv_poll_t poll;
    int fd;
    uvio *u;
    struct uvio_sock *prev, *next;
} uvio_sock;

/* The loop of a curlm_new_uv driver. It lives until its handles are
 * closed, which is after the driver. */
typedef struct uvio {
    uv_loop_t *loop;
    curlm *m;
    uv_timer_t timer;
    uvio_sock *socks; /* every socket with an open poll handle */
    int open;         /* handles whose close callback has not run */
} uvio;

static void uvio_unref(uvio *u) {
    if (--u->open == 0) free(u);
}

static void uvio_on_sock_closed(uv_handle_t *h) {
    uvio_sock *s = h->data;
    uvio *u = s->u;
    free(s);
    uvio_unref(u);
}

static void uvio_on_timer_closed(uv_handle_t *h) { uvio_unref(h->data); }

static void uvio_sock_close(uvio_sock *s) {
    uvio *u = s->u;
    if (s->prev) s->prev->next = s->next;
    else u->socks = s->next;
    if (s->next) s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, uvio_on_sock_closed);
}

static void uvio_on_poll(uv_poll_t *p, int status, int events) {
    uvio_sock *s = p->data;
    int ev = 0;
    if (status < 0) ev |= SL_LOOP_ERROR;
    if (events & UV_READABLE) ev |= SL_LOOP_READ;
    if (events & UV_WRITABLE) ev |= SL_LOOP_WRITE;
    curlm_socket(s->u->m, s->fd, ev);
}

static int uvio_watch(void *data, int fd, int events, void **sock) {
    uvio *u = data;
    uvio_sock *s = *sock;
    if (events == 0) {
        if (s) uvio_sock_close(s);
        *sock = NULL;
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s) return -1;
        if (uv_poll_init_socket(u->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->u = u;
        s->poll.data = s;
        s->next = u->socks;
        if (u->socks) u->socks->prev = s;
        u->socks = s;
        u->open++;
        *sock = s;
    }
    int ev = 0;
    if (events & SL_LOOP_READ) ev |= UV_READABLE;
    if (events & SL_LOOP_WRITE) ev |= UV_WRITABLE;
    return uv_poll_start(&s->poll, ev, uvio_on_poll) == 0 ? 0 : -1;
}

static void uvio_on_timer(uv_timer_t *t) { curlm_timeout(((uvio *)t->data)->m); }

static void uvio_timer(void *data, long long ms) {
    uvio *u = data;
    if (ms < 0) uv_timer_stop(&u->timer);
    else uv_timer_start(&u->timer, uvio_on_timer, (uint64_t)ms, 0);
}

static void uvio_close(void *data) {
    uvio *u = data;
    u->m = NULL;
    while (u->socks) uvio_sock_close(u->socks);
    uv_timer_stop(&u->timer);
    uv_close((uv_handle_t *)&u->timer, uvio_on_timer_closed);
}

int curlm_new_uv(uv_loop_t *loop, curlm **out) {
    if (!out) return SL_EINVAL;
    *out = NULL;
    if (!loop) return SL_EINVAL;
    uvio *u = calloc(1, sizeof(*u));
    if (!u) return SL_ENOMEM;
    u->loop = loop;
    curlm_io io = {u, uvio_watch, uvio_timer, uvio_close};
    int rc = curlm_new(&io, &u->m);
    if (rc != 0) {
        free(u);
        return rc;
    }
    uv_timer_init(loop, &u->timer);
    u->timer.data = u;
    u->open = 1;
    *out = u->m;
    return 0;
}
