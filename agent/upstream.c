/* upstream: libcurl multi on libuv. See upstream.h. */
#define _POSIX_C_SOURCE 200809L
#include "upstream.h"

#include <stdlib.h>

#include "sluice.h"

/* One socket libcurl asked us to watch. */
typedef struct up_sock {
    uv_poll_t poll;
    curl_socket_t fd;
    upstream *u;
    struct up_sock *prev, *next;
} up_sock;

/* One running transfer. */
typedef struct up_xfer {
    CURL *easy;
    upstream_done_fn done;
    void *arg;
    struct up_xfer *prev, *next;
} up_xfer;

struct upstream {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    up_sock *socks;
    up_xfer *xfers;
    size_t nxfers;
    int open;    /* handles whose close callback has not run */
    int closing; /* upstream_close ran */
};

static void up_unref(upstream *u) {
    if (--u->open == 0 && u->closing) free(u);
}

static void on_sock_closed(uv_handle_t *h) {
    up_sock *s = h->data;
    upstream *u = s->u;
    free(s);
    up_unref(u);
}

static void sock_close(up_sock *s) {
    upstream *u = s->u;
    if (s->prev) s->prev->next = s->next;
    else u->socks = s->next;
    if (s->next) s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

/* Hands every finished transfer to its hook. */
static void check_done(upstream *u) {
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(u->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *easy = m->easy_handle;
        CURLcode cc = m->data.result;
        char *priv = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        up_xfer *x = (up_xfer *)(void *)priv;
        curl_multi_remove_handle(u->multi, easy);
        if (!x) continue;
        if (x->prev) x->prev->next = x->next;
        else u->xfers = x->next;
        if (x->next) x->next->prev = x->prev;
        u->nxfers--;
        upstream_done_fn done = x->done;
        void *arg = x->arg;
        free(x);
        done(arg, cc);
    }
}

static void on_poll(uv_poll_t *p, int status, int events) {
    up_sock *s = p->data;
    upstream *u = s->u;
    int flags = 0, running;
    if (status < 0) flags |= CURL_CSELECT_ERR;
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    curl_multi_socket_action(u->multi, s->fd, flags, &running);
    check_done(u);
}

static void on_timer(uv_timer_t *t) {
    upstream *u = t->data;
    int running;
    curl_multi_socket_action(u->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(u);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    upstream *u = userp;
    up_sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) sock_close(s);
        if (!u->closing) curl_multi_assign(u->multi, fd, NULL);
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
        curl_multi_assign(u->multi, fd, s);
    }
    int ev = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= UV_WRITABLE;
    return uv_poll_start(&s->poll, ev, on_poll) == 0 ? 0 : -1;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    upstream *u = userp;
    /* libcurl must not be re-entered from here: even a 0 ms timeout is
     * taken from the loop. */
    if (timeout_ms < 0) uv_timer_stop(&u->timer);
    else uv_timer_start(&u->timer, on_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

int upstream_new(uv_loop_t *loop, upstream **out) {
    *out = NULL;
    upstream *u = calloc(1, sizeof(*u));
    if (!u) return SL_ENOMEM;
    u->loop = loop;
    u->multi = curl_multi_init();
    if (!u->multi) {
        free(u);
        return SL_ENOMEM;
    }
    uv_timer_init(loop, &u->timer);
    u->timer.data = u;
    u->open = 1;
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);
    *out = u;
    return 0;
}

int upstream_start(upstream *u, CURL *easy, upstream_done_fn done, void *arg) {
    if (u->closing) return SL_ECLOSING;
    up_xfer *x = calloc(1, sizeof(*x));
    if (!x) return SL_ENOMEM;
    x->easy = easy;
    x->done = done;
    x->arg = arg;
    curl_easy_setopt(easy, CURLOPT_PRIVATE, x);
    CURLMcode mc = curl_multi_add_handle(u->multi, easy);
    if (mc != CURLM_OK) {
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        free(x);
        return mc == CURLM_OUT_OF_MEMORY ? SL_ENOMEM : SL_EINVAL;
    }
    x->next = u->xfers;
    if (u->xfers) u->xfers->prev = x;
    u->xfers = x;
    u->nxfers++;
    return 0;
}

void upstream_abort(upstream *u, CURL *easy) {
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    up_xfer *x = (up_xfer *)(void *)priv;
    curl_multi_remove_handle(u->multi, easy);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
    if (!x) return;
    if (x->prev) x->prev->next = x->next;
    else u->xfers = x->next;
    if (x->next) x->next->prev = x->prev;
    u->nxfers--;
    free(x);
}

size_t upstream_running(const upstream *u) { return u->nxfers; }

static void on_timer_closed(uv_handle_t *h) { up_unref(h->data); }

void upstream_close(upstream *u) {
    if (!u || u->closing) return;
    while (u->xfers) upstream_abort(u, u->xfers->easy);
    u->closing = 1;
    curl_multi_cleanup(u->multi);
    u->multi = NULL;
    while (u->socks) sock_close(u->socks);
    uv_timer_stop(&u->timer);
    uv_close((uv_handle_t *)&u->timer, on_timer_closed);
}
