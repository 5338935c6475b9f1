/* run_http: see run_http.h. The pattern is libcurl's multi-uv example:
 * CURLMOPT_SOCKETFUNCTION says which sockets to watch for what, and
 * CURLMOPT_TIMERFUNCTION when to call back without socket activity. */
#define _POSIX_C_SOURCE 200809L
#include "run_http.h"

#include <stdlib.h>

/* One watched socket. Freed in its close callback. */
typedef struct run_sock {
    uv_poll_t poll;
    curl_socket_t fd;
    run_http *h;
    struct run_sock *prev, *next;
} run_sock;

struct run_http {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    run_http_done_cb done;
    void *ud;
    run_sock *socks;  /* every socket with an open poll handle */
    int running;      /* transfers added and not finished */
    int closing;
    int pending;      /* libuv handles whose close callback has not run */
};

static void maybe_free(run_http *h) {
    if (h->closing && h->pending == 0) free(h);
}

static void on_sock_closed(uv_handle_t *handle) {
    run_sock *s = handle->data;
    run_http *h = s->h;
    free(s);
    h->pending--;
    maybe_free(h);
}

static void sock_close(run_sock *s) {
    run_http *h = s->h;
    if (s->prev) s->prev->next = s->next;
    else h->socks = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
    uv_poll_stop(&s->poll);
    h->pending++;
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

/* Hands every finished transfer to the callback. Runs outside any curl
 * callback, so the callback may add transfers. */
static void check_done(run_http *h) {
    CURLMsg *m;
    int left;
    while (!h->closing && (m = curl_multi_info_read(h->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *easy = m->easy_handle;
        CURLcode rc = m->data.result;
        curl_multi_remove_handle(h->multi, easy);
        h->running--;
        h->done(h->ud, easy, rc);
    }
}

static void on_poll(uv_poll_t *p, int status, int events) {
    run_sock *s = p->data;
    run_http *h = s->h;
    int flags = 0, still;
    if (status < 0) flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    curl_multi_socket_action(h->multi, s->fd, flags, &still);
    check_done(h);
}

static void on_timeout(uv_timer_t *t) {
    run_http *h = t->data;
    int still;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &still);
    check_done(h);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    run_http *h = userp;
    run_sock *s = socketp;
    if (h->closing && what != CURL_POLL_REMOVE) return 0;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(h->multi, fd, NULL);
            sock_close(s);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s) return -1;
        s->fd = fd;
        s->h = h;
        if (uv_poll_init_socket(h->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->poll.data = s;
        s->next = h->socks;
        if (h->socks) h->socks->prev = s;
        h->socks = s;
        curl_multi_assign(h->multi, fd, s);
    }
    int events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    run_http *h = userp;
    if (timeout_ms < 0) uv_timer_stop(&h->timer);
    else uv_timer_start(&h->timer, on_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

int run_http_new(uv_loop_t *loop, run_http_done_cb done, void *ud, run_http **out) {
    *out = NULL;
    run_http *h = calloc(1, sizeof(*h));
    if (!h) return -1;
    h->multi = curl_multi_init();
    if (!h->multi) {
        free(h);
        return -1;
    }
    h->loop = loop;
    h->done = done;
    h->ud = ud;
    uv_timer_init(loop, &h->timer);
    h->timer.data = h;
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    *out = h;
    return 0;
}

int run_http_add(run_http *h, CURL *easy) {
    if (h->closing || curl_multi_add_handle(h->multi, easy) != CURLM_OK) return -1;
    h->running++;
    return 0;
}

void run_http_abort(run_http *h, CURL *easy) {
    if (curl_multi_remove_handle(h->multi, easy) == CURLM_OK) h->running--;
}

int run_http_running(const run_http *h) { return h->running; }

static void on_timer_closed(uv_handle_t *handle) {
    run_http *h = handle->data;
    h->pending--;
    maybe_free(h);
}

void run_http_close(run_http *h) {
    if (!h || h->closing) return;
    h->closing = 1;
    /* The cleanup may still report sockets to remove; on_socket closes
     * their poll handles. Whatever remains is closed below. */
    curl_multi_cleanup(h->multi);
    h->multi = NULL;
    while (h->socks) sock_close(h->socks);
    uv_timer_stop(&h->timer);
    h->pending++;
    uv_close((uv_handle_t *)&h->timer, on_timer_closed);
}
