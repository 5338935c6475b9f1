/* mock_http: the mock provider's requests and timed answers on the
 * daemon's HTTP transport. See mock_http.h.
 *
 * A request with the handler becomes a mock_http_req around the
 * transport's http_request. Its answer is a schedule of pieces (a plain
 * response is one), released by a timer of its own as they come due: the
 * first starts the transport's response, the last finishes it. The
 * transport's abandon hook says when the client left first. A request the
 * transport refuses (malformed, too large) reaches the handler as a
 * mock_http_req around the refusal, whose answer goes into it. */
#define _POSIX_C_SOURCE 200809L
#include "mock_http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_server.h"

/* A demo fleet opens one connection per request in flight, all at once: a
 * short accept queue would turn that into SYN retries (1 s), which a
 * latency figure would then blame on the client. The kernel caps this at
 * net.core.somaxconn. */
#define MH_BACKLOG 4096
/* The request line and headers, as sent. */
#define MH_MAX_HEADER_BYTES (64 * 1024)

/* One scheduled piece of a response. */
typedef struct mh_piece {
    char *data;
    size_t len;
    uint64_t at_ms; /* due this long after the response started */
} mh_piece;

struct mock_http {
    uv_loop_t *loop;
    http_server *srv;
    mock_http_handlers h;
    int port;
    mock_http_req *live; /* requests with the handler's answer in progress */
    int timers;          /* their open timers */
    int closing, srv_closed;
    void (*done)(void *);
    void *done_arg;
};

struct mock_http_req {
    mock_http *srv;
    http_request *r;     /* NULL once finished, or gone (and for a refusal) */
    const http_msg *msg; /* the request (a refusal's: as far as it was read; may be NULL) */
    http_refusal *rf;    /* a refused request: its answer goes here */
    char peer[64];
    void *udata;
    /* the answer */
    int status, stream, begun;
    const char *ctype;
    char *hlines;     /* the handler's header lines, cut into hdr */
    http_header *hdr; /* names and values inside hlines */
    size_t nh;
    mh_piece *pieces;
    size_t npieces, released;
    uint64_t t_base; /* uv_now() when the response started */
    uv_timer_t timer;
    int timer_live, finished;
    mock_http_req *prev, *next;
};

static void srv_maybe_done(mock_http *s) {
    if (!s->closing || !s->srv_closed || s->timers > 0) return;
    void (*done)(void *) = s->done;
    void *arg = s->done_arg;
    http_server_free(s->srv);
    free(s);
    if (done) done(arg);
}

/* ---- requests --------------------------------------------------------- */

static void req_free(mock_http_req *q) {
    for (size_t i = 0; i < q->npieces; i++) free(q->pieces[i].data);
    free(q->pieces);
    free(q->hlines);
    free(q->hdr);
    free(q);
}

static void req_timer_closed(uv_handle_t *h) {
    mock_http_req *q = h->data;
    mock_http *s = q->srv;
    s->timers--;
    req_free(q);
    srv_maybe_done(s);
}

/* The server lets go of q: tells the handler, once, and frees q (after
 * its timer closed). */
static void req_finish(mock_http_req *q, int delivered) {
    mock_http *s = q->srv;
    if (q->finished) return;
    q->finished = 1;
    q->r = NULL;
    if (q->prev) q->prev->next = q->next;
    else if (s->live == q) s->live = q->next;
    if (q->next) q->next->prev = q->prev;
    void *udata = q->udata;
    q->udata = NULL;
    if (udata && s->h.on_done) s->h.on_done(udata, delivered, q->released, s->h.arg);
    if (q->timer_live) uv_close((uv_handle_t *)&q->timer, req_timer_closed);
    else req_free(q);
}

/* The transport's abandon hook: the client left (or the server closed)
 * before the answer was complete; the http_request goes right after. */
static void req_abandoned(void *ud) { req_finish(ud, 0); }

/* Ends q's answer after a failed call: the transport's request is let go
 * (in whatever state it is) and the handler told it was not delivered. */
static void req_fail(mock_http_req *q) {
    if (q->r && http_stream_end(q->r) == HTTP_EINVAL) http_respond(q->r, 500, NULL, 0, NULL, "", 0);
    req_finish(q, 0);
}

/* The handler's header lines ("Name: value\r\n" each) as http_headers.
 * Returns -1 when out of memory. */
static int req_set_headers(mock_http_req *q, const char *first, const char *lines) {
    size_t fl = first ? strlen(first) : 0, ll = lines ? strlen(lines) : 0, n = 0;
    if (!(q->hlines = malloc(fl + ll + 1))) return -1;
    memcpy(q->hlines, first ? first : "", fl);
    memcpy(q->hlines + fl, lines ? lines : "", ll + 1);
    for (const char *p = q->hlines; (p = strstr(p, "\r\n")); p += 2) n++;
    if (n && !(q->hdr = calloc(n, sizeof(*q->hdr)))) return -1;
    for (char *p = q->hlines, *eol; (eol = strstr(p, "\r\n")); p = eol + 2) {
        *eol = '\0';
        char *colon = strchr(p, ':');
        if (!colon) continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        q->hdr[q->nh++] = (http_header){p, v};
    }
    return 0;
}

/* Sends every piece that is due: the first starts the response, the last
 * makes it ready (on_ready) and finishes it. Returns 1 when q is finished
 * (and must not be touched: it may be freed). */
static int req_release_due(mock_http_req *q) {
    mock_http *s = q->srv;
    uint64_t now = uv_now(s->loop);
    while (q->released < q->npieces && q->t_base + q->pieces[q->released].at_ms <= now) {
        mh_piece *p = &q->pieces[q->released];
        int rc = 0;
        if (q->stream && !q->begun) {
            rc = http_stream_begin(q->r, q->status, q->hdr, q->nh, q->ctype);
            if (rc == HTTP_EINVAL) rc = http_stream_begin(q->r, q->status, NULL, 0, q->ctype);
            q->begun = 1;
        }
        if (rc == 0 && q->stream && p->len > 0) rc = http_stream_write(q->r, p->data, p->len);
        if (rc < 0) {
            /* The connection went within the call (out of memory): the
             * request is ours to end. */
            req_fail(q);
            return 1;
        }
        q->released++;
        if (q->released < q->npieces) continue;
        if (q->udata && s->h.on_ready) s->h.on_ready(q->udata, s->h.arg);
        if (q->stream) {
            rc = http_stream_end(q->r);
        } else {
            rc = http_respond(q->r, q->status, q->hdr, q->nh, q->ctype, p->data, p->len);
            if (rc == HTTP_EINVAL) rc = http_respond(q->r, q->status, NULL, 0, q->ctype, p->data, p->len);
        }
        req_finish(q, rc == 0);
        return 1;
    }
    return 0;
}

static void req_timer_fired(uv_timer_t *t);

/* Sends what is due now and arms the timer for the rest. */
static void req_start(mock_http_req *q) {
    mock_http *s = q->srv;
    q->t_base = uv_now(s->loop);
    if (req_release_due(q)) return;
    if (!q->timer_live) {
        if (uv_timer_init(s->loop, &q->timer) != 0) {
            req_fail(q);
            return;
        }
        q->timer.data = q;
        q->timer_live = 1;
        s->timers++;
    }
    uint64_t due = q->t_base + q->pieces[q->released].at_ms, now = uv_now(s->loop);
    uv_timer_start(&q->timer, req_timer_fired, due > now ? due - now : 0, 0);
}

static void req_timer_fired(uv_timer_t *t) {
    mock_http_req *q = t->data;
    mock_http *s = q->srv;
    if (req_release_due(q)) return;
    uint64_t due = q->t_base + q->pieces[q->released].at_ms, now = uv_now(s->loop);
    uv_timer_start(&q->timer, req_timer_fired, due > now ? due - now : 0, 0);
}

/* Copies the text of the port's peer ("127.0.0.1:5000", "[::1]:5000")
 * without the port. */
static void peer_host(char *out, size_t n, const char *peer) {
    const char *from = peer, *to = strrchr(peer, ':');
    if (peer[0] == '[') {
        from = peer + 1;
        to = strchr(from, ']');
    }
    size_t len = to ? (size_t)(to - from) : strlen(from);
    if (len == 0 || !strcmp(peer, "?")) {
        snprintf(out, n, "unknown");
        return;
    }
    snprintf(out, n, "%.*s", (int)len, from);
}

/* ---- the transport's hooks -------------------------------------------- */

static void on_request(http_request *r, void *arg) {
    mock_http *s = arg;
    mock_http_req *q = calloc(1, sizeof(*q));
    if (!q) {
        http_respond(r, 500, NULL, 0, NULL, "", 0);
        return;
    }
    q->srv = s;
    q->r = r;
    q->msg = http_request_msg(r);
    peer_host(q->peer, sizeof(q->peer), http_request_peer(r));
    q->next = s->live;
    if (s->live) s->live->prev = q;
    s->live = q;
    http_request_on_abandon(r, req_abandoned, q);
    s->h.on_request(q, s->h.arg);
}

/* A request the transport refuses: the handler answers it like any
 * other, into the refusal. */
static int on_refusal(void *arg, http_refusal *rf) {
    mock_http *s = arg;
    mock_http_req q = {.srv = s, .msg = rf->partial, .rf = rf};
    peer_host(q.peer, sizeof(q.peer), rf->peer);
    s->h.on_request(&q, s->h.arg);
    if (q.udata) {
        q.released = 1;
        if (s->h.on_ready) s->h.on_ready(q.udata, s->h.arg);
        if (s->h.on_done) s->h.on_done(q.udata, 1, 1, s->h.arg);
    }
    return q.status ? 0 : -1;
}

/* ---- public API ------------------------------------------------------- */

static void srv_free_after_failed_start(void *arg) { http_server_free(arg); }

int mock_http_start(uv_loop_t *loop, const char *host, int port, size_t max_body, const mock_http_handlers *h,
                    mock_http **out) {
    if (!h || !h->on_request || port < 0 || port > 65535) return UV_EINVAL;
    mock_http *s = calloc(1, sizeof(*s));
    if (!s) return UV_ENOMEM;
    s->loop = loop;
    s->h = *h;
    /* No timeouts and no connection limit: a stand-in for a provider
     * waits as long as its clients do. */
    http_server_limits lim = {
        .max_header_bytes = MH_MAX_HEADER_BYTES, .max_body_bytes = max_body, .max_connections = SIZE_MAX};
    http_server_hooks hooks = {.on_request = on_request, .error_body = on_refusal, .arg = s};
    char err[256];
    int rc = http_server_new(loop, &lim, &hooks, &s->srv);
    if (rc != 0) {
        free(s);
        return rc == HTTP_ENOMEM ? UV_ENOMEM : UV_EINVAL;
    }
    rc = http_server_listen_tcp(s->srv, host, port, MH_BACKLOG, err, sizeof(err));
    if (rc != 0) {
        /* The server goes once its listener is closed. */
        http_server_close(s->srv, srv_free_after_failed_start, s->srv);
        free(s);
        return rc;
    }
    s->port = http_server_port(s->srv, 0);
    *out = s;
    return 0;
}

int mock_http_port(const mock_http *s) { return s->port; }

static void srv_closed(void *arg) {
    mock_http *s = arg;
    s->srv_closed = 1;
    srv_maybe_done(s);
}

void mock_http_close(mock_http *s, void (*done)(void *), void *arg) {
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    /* Pending answers are abandoned: nothing more comes due, and the
     * transport closes their connections (no drain time). */
    for (mock_http_req *q = s->live; q; q = q->next)
        if (q->timer_live) uv_timer_stop(&q->timer);
    http_server_close(s->srv, srv_closed, s);
}

const char *mock_http_method(const mock_http_req *q) { return q->msg ? http_msg_method(q->msg) : ""; }

const char *mock_http_path(const mock_http_req *q) { return q->msg ? http_msg_path(q->msg) : ""; }

const char *mock_http_query(const mock_http_req *q) { return q->msg ? http_msg_query(q->msg) : ""; }

const char *mock_http_body(const mock_http_req *q, size_t *len) {
    if (q->msg) return http_msg_body(q->msg, len);
    if (len) *len = 0;
    return "";
}

const char *mock_http_header(const mock_http_req *q, const char *name) {
    return q->msg ? http_msg_header(q->msg, name) : NULL;
}

const char *mock_http_peer(const mock_http_req *q) { return q->peer; }

int mock_http_error_status(const mock_http_req *q, const char **reason) {
    if (reason) *reason = q->rf ? q->rf->reason : "";
    return q->rf ? q->rf->status : 0;
}

void mock_http_set_udata(mock_http_req *q, void *udata) { q->udata = udata; }

/* A refused request's answer: the body and headers go into the refusal
 * (its status is the transport's). */
static void refusal_answer(mock_http_req *q, int status, const char *headers, const char *body, size_t len) {
    http_refusal *rf = q->rf;
    q->status = status;
    if (req_set_headers(q, NULL, headers) == 0)
        for (size_t i = 0; i < q->nh; i++) http_refusal_header(rf, q->hdr[i].name, q->hdr[i].value);
    free(q->hlines);
    free(q->hdr);
    q->hlines = NULL;
    q->hdr = NULL;
    rf->content_type = "application/json";
    if (http_buf_append(&rf->body, body, len) != 0) q->status = 0;
}

void mock_http_respond(mock_http_req *q, int status, const char *headers, const char *body, size_t body_len,
                       uint64_t delay_ms) {
    if (q->rf) {
        refusal_answer(q, status, headers, body, body_len);
        return;
    }
    if (!q->r || q->npieces) return; /* cannot happen while the handler runs */
    q->status = status;
    q->ctype = "application/json";
    q->pieces = calloc(1, sizeof(*q->pieces));
    char *copy = malloc(body_len + 1);
    if (!q->pieces || !copy || req_set_headers(q, NULL, headers) != 0) {
        /* Without memory the answer cannot be kept: a bare 500. */
        free(copy);
        req_fail(q);
        return;
    }
    if (body_len) memcpy(copy, body, body_len);
    q->pieces[0] = (mh_piece){copy, body_len, delay_ms};
    q->npieces = 1;
    req_start(q);
}

void mock_http_respond_stream(mock_http_req *q, int status, const char *headers, const char *content_type,
                              const mock_http_piece *pieces, size_t n) {
    if (n == 0) return;
    if (q->rf) {
        refusal_answer(q, status, headers, pieces[0].data, pieces[0].len);
        return;
    }
    if (!q->r || q->npieces) return;
    q->status = status;
    q->stream = 1;
    q->ctype = content_type;
    q->pieces = calloc(n, sizeof(*q->pieces));
    int oom = !q->pieces || req_set_headers(q, "Cache-Control: no-cache\r\n", headers) != 0;
    for (size_t i = 0; !oom && i < n; i++) {
        char *copy = malloc(pieces[i].len + 1);
        if (!copy) {
            oom = 1;
            break;
        }
        if (pieces[i].len) memcpy(copy, pieces[i].data, pieces[i].len);
        q->pieces[i] = (mh_piece){copy, pieces[i].len, pieces[i].at_ms};
        q->npieces = i + 1;
    }
    if (oom) {
        req_fail(q);
        return;
    }
    req_start(q);
}
