#define _POSIX_C_SOURCE 200809L
#include "mock_http.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#define MH_MAX_HEADERS 64
#define MH_MAX_URL 8192
#define MH_MAX_HEADER_LEN 8192
/* After the last response on a closing connection, how long input is still
 * drained so the kernel does not answer it with a RST that could destroy
 * the response before the client read it. */
#define MH_LINGER_MS 2000

typedef struct mh_buf {
    char *p;
    size_t len, cap;
} mh_buf;

typedef struct mh_conn mh_conn;

/* One scheduled piece of a response (a plain response is a single one). */
typedef struct mh_piece {
    char *data;
    size_t len;
    uint64_t at_ms; /* due this long after the response started */
} mh_piece;

struct mock_http_req {
    mock_http *srv;
    mh_conn *c;          /* NULL once the connection is gone */
    mock_http_req *next; /* response queue order */
    int refs;            /* queue membership + a live timer */
    char method[16];
    mh_buf url, path, query, body;
    mh_buf hname[MH_MAX_HEADERS], hvalue[MH_MAX_HEADERS];
    size_t nheaders;
    int error_status;
    const char *error_reason;
    int keep_alive;
    int http_1_0;     /* an HTTP/1.0 client: no chunked encoding */
    mh_piece *pieces; /* the response, once answered */
    size_t npieces, released;
    uint64_t t_base; /* uv_now() when the response started */
    mh_buf out;      /* released bytes not yet written */
    int timer_live, timer_closing;
    uv_timer_t timer;
    void *udata;
};

struct mh_conn {
    uv_tcp_t tcp;
    uv_timer_t linger;
    uv_shutdown_t shutdown_req;
    mock_http *srv;
    mh_conn *prev, *next;
    http_parser parser;
    mock_http_req *cur;         /* the request being parsed */
    int in_value;               /* header parser state: last callback was a value */
    mock_http_req *head, *tail; /* answered or pending, in request order */
    size_t writes_pending;
    int handles; /* tcp + linger while open */
    int closing, stop_parsing, shutting;
    char peer[64];
    char rbuf[65536];
};

struct mock_http {
    uv_loop_t *loop;
    uv_tcp_t listener;
    mock_http_handlers h;
    size_t max_body;
    int port;
    mh_conn *conns;
    int handles; /* every open handle of ours */
    int closing;
    void (*done)(void *);
    void *done_arg;
};

typedef struct mh_write {
    uv_write_t w;
    char *data;
} mh_write;

static void conn_close(mh_conn *c);
static void conn_flush(mh_conn *c);

/* ---- small helpers ---------------------------------------------------- */

/* Appends n bytes, keeping a NUL after them. 0, -1 on allocation failure,
 * -2 when the result would exceed limit. */
static int buf_append(mh_buf *b, const char *s, size_t n, size_t limit) {
    if (n > limit || b->len > limit - n) return -2; /* no overflow, whatever n */
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static const char *buf_str(const mh_buf *b) { return b->p ? b->p : ""; }

static const char *mh_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 529: return "Overloaded";
    default: return "Unknown";
    }
}

static void srv_maybe_done(mock_http *s) {
    if (s->closing && s->handles == 0) {
        void (*done)(void *) = s->done;
        void *arg = s->done_arg;
        free(s);
        if (done) done(arg);
    }
}

/* ---- requests --------------------------------------------------------- */

static mock_http_req *req_new(mh_conn *c) {
    mock_http_req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->srv = c->srv;
    r->c = c;
    return r;
}

static void req_free(mock_http_req *r) {
    free(r->url.p);
    free(r->path.p);
    free(r->query.p);
    free(r->body.p);
    for (size_t i = 0; i < r->nheaders; i++) {
        free(r->hname[i].p);
        free(r->hvalue[i].p);
    }
    for (size_t i = 0; i < r->npieces; i++) free(r->pieces[i].data);
    free(r->pieces);
    free(r->out.p);
    free(r);
}

static int req_complete(const mock_http_req *r) { return r->npieces > 0 && r->released == r->npieces; }

/* The server lets go of r: tells the handler, once. */
static void req_done(mock_http_req *r, int delivered) {
    mock_http *s = r->srv;
    void *udata = r->udata;
    r->udata = NULL;
    if (udata && s->h.on_done) s->h.on_done(udata, delivered, r->released, s->h.arg);
}

static void req_unref(mock_http_req *r) {
    if (--r->refs == 0) req_free(r);
}

static void req_enqueue(mh_conn *c, mock_http_req *r) {
    r->refs++;
    r->next = NULL;
    if (c->tail) c->tail->next = r;
    else c->head = r;
    c->tail = r;
}

static void req_timer_closed(uv_handle_t *h) {
    mock_http_req *r = h->data;
    mock_http *s = r->srv;
    r->timer_live = 0;
    s->handles--;
    req_unref(r);
    srv_maybe_done(s);
}

/* Moves every piece that is due into the output. Returns -1 when out of
 * memory. The last one makes the response ready (on_ready). */
static int req_release_due(mock_http_req *r) {
    mock_http *s = r->srv;
    uint64_t now = uv_now(s->loop);
    while (r->released < r->npieces && r->t_base + r->pieces[r->released].at_ms <= now) {
        mh_piece *p = &r->pieces[r->released];
        if (p->len > 0 && buf_append(&r->out, p->data, p->len, SIZE_MAX) != 0) return -1;
        free(p->data);
        p->data = NULL;
        r->released++;
        if (r->released == r->npieces && r->udata && s->h.on_ready) s->h.on_ready(r->udata, s->h.arg);
    }
    return 0;
}

static void req_timer_fired(uv_timer_t *t);

/* Arms the timer for the next piece, or closes it when none is left.
 * Returns -1 when no timer could be had. */
static int req_schedule(mock_http_req *r) {
    mock_http *s = r->srv;
    if (r->released == r->npieces) {
        if (r->timer_live && !r->timer_closing) {
            r->timer_closing = 1;
            uv_close((uv_handle_t *)&r->timer, req_timer_closed);
        }
        return 0;
    }
    if (!r->timer_live) {
        if (uv_timer_init(s->loop, &r->timer) != 0) return -1;
        r->timer.data = r;
        r->timer_live = 1;
        r->refs++;
        s->handles++;
    }
    uint64_t due = r->t_base + r->pieces[r->released].at_ms, now = uv_now(s->loop);
    uv_timer_start(&r->timer, req_timer_fired, due > now ? due - now : 0, 0);
    return 0;
}

static void req_timer_fired(uv_timer_t *t) {
    mock_http_req *r = t->data;
    mh_conn *c = r->c;
    if (!c) return;
    if (req_release_due(r) != 0) {
        conn_close(c);
        return;
    }
    if (req_schedule(r) != 0) {
        conn_close(c);
        return;
    }
    conn_flush(c);
}

/* ---- connections ------------------------------------------------------ */

static void conn_handle_closed(uv_handle_t *h) {
    mh_conn *c = h->data;
    mock_http *s = c->srv;
    s->handles--;
    if (--c->handles == 0) free(c);
    srv_maybe_done(s);
}

/* Closes the connection at once. Responses not yet written are dropped and
 * reported to on_done as not delivered. */
static void conn_close(mh_conn *c) {
    mock_http *s = c->srv;
    if (c->closing) return;
    c->closing = 1;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    while (c->head) {
        mock_http_req *r = c->head;
        c->head = r->next;
        r->c = NULL;
        req_done(r, 0);
        if (r->timer_live && !r->timer_closing) {
            r->timer_closing = 1;
            uv_close((uv_handle_t *)&r->timer, req_timer_closed);
        }
        req_unref(r);
    }
    c->tail = NULL;
    if (c->cur) {
        req_free(c->cur);
        c->cur = NULL;
    }
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
    uv_close((uv_handle_t *)&c->linger, conn_handle_closed);
}

static void conn_linger_expired(uv_timer_t *t) { conn_close(t->data); }

static void conn_shutdown_done(uv_shutdown_t *req, int status) {
    mh_conn *c = req->data;
    if (status < 0 && !c->closing) conn_close(c);
}

/* Once nothing more will be parsed and everything is written, ends the
 * connection with a FIN, then drains whatever the peer still sends until
 * it closes (or MH_LINGER_MS passes), so no RST can destroy the answer. */
static void conn_maybe_finish(mh_conn *c) {
    if (c->closing || !c->stop_parsing || c->head || c->writes_pending || c->shutting) return;
    c->shutting = 1;
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, conn_shutdown_done) != 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->linger, conn_linger_expired, MH_LINGER_MS, 0);
}

static void conn_write_done(uv_write_t *w, int status) {
    mh_write *mw = (mh_write *)w;
    mh_conn *c = w->handle->data;
    free(mw->data);
    free(mw);
    c->writes_pending--;
    if (c->closing) return;
    if (status < 0) conn_close(c);
    else conn_maybe_finish(c);
}

/* Writes the bytes in b (taking them over). 0, or -1 when the write could
 * not even be queued. */
static int conn_write(mh_conn *c, mh_buf *b) {
    mh_write *mw = malloc(sizeof(*mw));
    if (!mw) return -1;
    mw->data = b->p;
    uv_buf_t ub = uv_buf_init(mw->data, (unsigned)b->len);
    memset(b, 0, sizeof(*b));
    c->writes_pending++;
    if (uv_write(&mw->w, (uv_stream_t *)&c->tcp, &ub, 1, conn_write_done) != 0) {
        c->writes_pending--;
        free(mw->data);
        free(mw);
        return -1;
    }
    return 0;
}

/* Writes what is due of the responses at the head of the queue, in order:
 * a stream in progress holds back the ones behind it. */
static void conn_flush(mh_conn *c) {
    while (!c->closing && c->head) {
        mock_http_req *r = c->head;
        if (r->out.len > 0 && conn_write(c, &r->out) != 0) {
            conn_close(c);
            return;
        }
        if (!req_complete(r)) break;
        c->head = r->next;
        if (!c->head) c->tail = NULL;
        r->c = NULL;
        req_done(r, 1);
        req_unref(r);
    }
    conn_maybe_finish(c);
}

/* Hands a finished (or failed) request to the handler. */
static void conn_dispatch(mh_conn *c, mock_http_req *r) {
    mock_http *s = c->srv;
    req_enqueue(c, r);
    s->h.on_request(r, s->h.arg);
}

/* Turns the current parse failure into an error request for the handler. */
static void conn_parse_error(mh_conn *c, int status, const char *reason) {
    mock_http_req *r = c->cur;
    c->cur = NULL;
    c->stop_parsing = 1;
    if (!r) r = req_new(c);
    if (!r) {
        conn_close(c);
        return;
    }
    if (!r->error_status) {
        r->error_status = status;
        r->error_reason = reason;
    }
    r->keep_alive = 0;
    conn_dispatch(c, r);
}

/* ---- http_parser callbacks -------------------------------------------- */

static int on_message_begin(http_parser *p) {
    mh_conn *c = p->data;
    if (c->closing || c->stop_parsing) return -1;
    c->cur = req_new(c);
    c->in_value = 0;
    return c->cur ? 0 : -1;
}

static int cur_fail(mh_conn *c, int rc, int status, const char *reason) {
    if (c->cur && !c->cur->error_status) {
        c->cur->error_status = rc == -1 ? 500 : status;
        c->cur->error_reason = rc == -1 ? "out of memory" : reason;
    }
    return -1;
}

static int on_url(http_parser *p, const char *at, size_t len) {
    mh_conn *c = p->data;
    if (c->closing || !c->cur) return -1;
    int rc = buf_append(&c->cur->url, at, len, MH_MAX_URL);
    return rc ? cur_fail(c, rc, 400, "request target too long") : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
    mh_conn *c = p->data;
    if (c->closing || !c->cur) return -1;
    mock_http_req *r = c->cur;
    if (c->in_value || r->nheaders == 0) {
        if (r->nheaders == MH_MAX_HEADERS) return cur_fail(c, -2, 400, "too many headers");
        r->nheaders++;
        c->in_value = 0;
    }
    int rc = buf_append(&r->hname[r->nheaders - 1], at, len, MH_MAX_HEADER_LEN);
    return rc ? cur_fail(c, rc, 400, "header too long") : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
    mh_conn *c = p->data;
    if (c->closing || !c->cur) return -1;
    mock_http_req *r = c->cur;
    c->in_value = 1;
    int rc = buf_append(&r->hvalue[r->nheaders - 1], at, len, MH_MAX_HEADER_LEN);
    return rc ? cur_fail(c, rc, 400, "header too long") : 0;
}

static int on_headers_complete(http_parser *p) {
    mh_conn *c = p->data;
    if (c->closing || !c->cur) return -1;
    mock_http_req *r = c->cur;
    struct http_parser_url u;
    int rc = 0;
    snprintf(r->method, sizeof(r->method), "%s", http_method_str((enum http_method)p->method));
    http_parser_url_init(&u);
    if (r->url.len == 0 || http_parser_parse_url(r->url.p, r->url.len, 0, &u) != 0)
        return cur_fail(c, -2, 400, "malformed request target");
    if (u.field_set & (1 << UF_PATH))
        rc = buf_append(&r->path, r->url.p + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len, MH_MAX_URL);
    if (rc == 0 && (u.field_set & (1 << UF_QUERY)))
        rc = buf_append(&r->query, r->url.p + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len, MH_MAX_URL);
    if (rc) return cur_fail(c, rc, 400, "malformed request target");
    /* Content-Length is known here; refuse an oversize body before it comes. */
    if (p->content_length != ULLONG_MAX && p->content_length > c->srv->max_body)
        return cur_fail(c, -2, 413, "request body too large");
    r->http_1_0 = p->http_major == 1 && p->http_minor == 0;
    const char *expect = mock_http_header(r, "expect");
    if (expect && strcasecmp(expect, "100-continue") == 0 && p->http_minor >= 1) {
        /* An interim answer, queued like a response that is due at once. */
        mock_http_req *i = req_new(c);
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!i || !(i->pieces = calloc(1, sizeof(*i->pieces)))) {
            free(i);
            return cur_fail(c, -1, 500, NULL);
        }
        i->npieces = i->released = 1;
        if (buf_append(&i->out, cont, sizeof(cont) - 1, SIZE_MAX) != 0) {
            req_free(i);
            return cur_fail(c, -1, 500, NULL);
        }
        req_enqueue(c, i);
        conn_flush(c);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
    mh_conn *c = p->data;
    if (c->closing || !c->cur) return -1;
    int rc = buf_append(&c->cur->body, at, len, c->srv->max_body);
    return rc ? cur_fail(c, rc, 413, "request body too large") : 0;
}

static int on_message_complete(http_parser *p) {
    mh_conn *c = p->data;
    if (c->closing || !c->cur) return -1;
    mock_http_req *r = c->cur;
    c->cur = NULL;
    r->keep_alive = http_should_keep_alive(p);
    if (!r->keep_alive) {
        /* The last request on this connection: ignore anything after it. */
        c->stop_parsing = 1;
        http_parser_pause(p, 1);
    }
    conn_dispatch(c, r);
    return 0;
}

static const http_parser_settings mh_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- libuv callbacks -------------------------------------------------- */

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    mh_conn *c = h->data;
    *buf = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    mh_conn *c = st->data;
    if (c->closing) return;
    if (nread == UV_EOF) {
        /* HTTP clients do not half-close: the peer is gone, and whatever
         * it was still waiting for is abandoned. */
        conn_close(c);
        return;
    }
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->stop_parsing) return; /* draining after the last response */
    http_parser_execute(&c->parser, &mh_settings, buf->base, (size_t)nread);
    if (c->closing) return;
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e != HPE_OK && e != HPE_PAUSED && !c->stop_parsing) {
        conn_parse_error(c, 400, http_errno_description(e));
    } else if (c->parser.upgrade && !c->stop_parsing) {
        conn_parse_error(c, 400, "protocol upgrade is not supported");
    }
}

static void srv_on_connection(uv_stream_t *server, int status) {
    mock_http *s = server->data;
    if (status < 0 || s->closing) return;
    mh_conn *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->linger);
    c->tcp.data = c->linger.data = c;
    c->handles = 2;
    s->handles += 2;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    snprintf(c->peer, sizeof(c->peer), "unknown");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof(c->peer));
        else if (ss.ss_family == AF_INET6) uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof(c->peer));
    }
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) != 0) conn_close(c);
}

/* ---- public API ------------------------------------------------------- */

static void srv_listener_closed(uv_handle_t *h) {
    mock_http *s = h->data;
    s->handles--;
    srv_maybe_done(s);
}

static void srv_free_after_failed_start(uv_handle_t *h) { free(h->data); }

int mock_http_start(uv_loop_t *loop, const char *host, int port, size_t max_body, const mock_http_handlers *h,
                    mock_http **out) {
    struct sockaddr_storage ss;
    int rc;
    if (!h || !h->on_request || port < 0 || port > 65535) return UV_EINVAL;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return UV_EINVAL;
    mock_http *s = calloc(1, sizeof(*s));
    if (!s) return UV_ENOMEM;
    s->loop = loop;
    s->h = *h;
    s->max_body = max_body;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    /* A demo fleet opens one connection per request in flight, all at
     * once: a short accept queue would turn that into SYN retries (1 s),
     * which a latency figure would then blame on the client. The kernel
     * caps this at net.core.somaxconn. */
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 4096, srv_on_connection);
    if (rc == 0) {
        int len = sizeof(ss);
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    }
    if (rc != 0) {
        /* The memory goes with the handle's close callback. */
        uv_close((uv_handle_t *)&s->listener, srv_free_after_failed_start);
        return rc;
    }
    s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    s->handles = 1;
    *out = s;
    return 0;
}

int mock_http_port(const mock_http *s) { return s->port; }

void mock_http_close(mock_http *s, void (*done)(void *), void *arg) {
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    uv_close((uv_handle_t *)&s->listener, srv_listener_closed);
    while (s->conns) conn_close(s->conns);
}

const char *mock_http_method(const mock_http_req *r) { return r->method; }

const char *mock_http_path(const mock_http_req *r) { return buf_str(&r->path); }

const char *mock_http_query(const mock_http_req *r) { return buf_str(&r->query); }

const char *mock_http_body(const mock_http_req *r, size_t *len) {
    if (len) *len = r->body.len;
    return buf_str(&r->body);
}

const char *mock_http_header(const mock_http_req *r, const char *name) {
    for (size_t i = 0; i < r->nheaders; i++)
        if (r->hname[i].p && strcasecmp(r->hname[i].p, name) == 0) return buf_str(&r->hvalue[i]);
    return NULL;
}

const char *mock_http_peer(const mock_http_req *r) { return r->c ? r->c->peer : "unknown"; }

int mock_http_error_status(const mock_http_req *r, const char **reason) {
    if (reason) *reason = r->error_reason ? r->error_reason : "";
    return r->error_status;
}

void mock_http_set_udata(mock_http_req *r, void *udata) { r->udata = udata; }

/* Starts the response whose pieces are set: sends what is due now and
 * arms the timer for the rest. */
static void req_start(mock_http_req *r) {
    mh_conn *c = r->c;
    r->t_base = uv_now(c->srv->loop);
    if (req_release_due(r) != 0 || req_schedule(r) != 0) {
        conn_close(c);
        return;
    }
    conn_flush(c);
}

/* "HTTP/1.1 <status> <reason>\r\n" + fixed + headers + "\r\n" into a new
 * buffer, or NULL when out of memory. */
static char *head_new(int status, const char *fixed, const char *headers, size_t *len) {
    size_t hl = headers ? strlen(headers) : 0, fl = strlen(fixed);
    char line[64];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", status, mh_reason(status));
    char *h = malloc((size_t)n + fl + hl + 3);
    if (!h) return NULL;
    memcpy(h, line, (size_t)n);
    memcpy(h + n, fixed, fl);
    if (hl) memcpy(h + n + fl, headers, hl);
    memcpy(h + n + fl + hl, "\r\n", 3);
    *len = (size_t)n + fl + hl + 2;
    return h;
}

void mock_http_respond(mock_http_req *r, int status, const char *headers, const char *body, size_t body_len,
                       uint64_t delay_ms) {
    mh_conn *c = r->c;
    char fixed[160];
    size_t hlen;
    if (!c) return; /* cannot happen while the handler runs */
    snprintf(fixed, sizeof(fixed), "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: %s\r\n",
             body_len, r->keep_alive ? "keep-alive" : "close");
    char *head = head_new(status, fixed, headers, &hlen);
    r->pieces = calloc(1, sizeof(*r->pieces));
    char *all = head && r->pieces ? realloc(head, hlen + body_len + 1) : NULL;
    if (!all) {
        /* Without memory the response cannot be kept in order: drop the
         * connection rather than answer out of sequence. */
        free(head);
        conn_close(c);
        return;
    }
    if (body_len) memcpy(all + hlen, body, body_len);
    r->pieces[0] = (mh_piece){all, hlen + body_len, delay_ms};
    r->npieces = 1;
    req_start(r);
}

void mock_http_respond_stream(mock_http_req *r, int status, const char *headers, const char *content_type,
                              const mock_http_piece *pieces, size_t n) {
    mh_conn *c = r->c;
    char fixed[256];
    size_t hlen;
    if (!c || n == 0) return;
    /* HTTP/1.0 has no chunked encoding: the end of the connection ends the
     * body, so nothing after this request may be read or answered. */
    int chunked = !r->http_1_0;
    if (!chunked && r->keep_alive) {
        r->keep_alive = 0;
        c->stop_parsing = 1;
        http_parser_pause(&c->parser, 1);
    }
    snprintf(fixed, sizeof(fixed), "Content-Type: %s\r\nCache-Control: no-cache\r\n%sConnection: %s\r\n", content_type,
             chunked ? "Transfer-Encoding: chunked\r\n" : "", r->keep_alive ? "keep-alive" : "close");
    char *head = head_new(status, fixed, headers, &hlen);
    r->pieces = calloc(n, sizeof(*r->pieces));
    if (!head || !r->pieces) goto oom;
    r->npieces = n;
    for (size_t i = 0; i < n; i++) {
        mh_buf b = {0};
        char size[24];
        size_t sl = (size_t)snprintf(size, sizeof(size), "%zx\r\n", pieces[i].len); /* < 24: a size_t in hex */
        int rc = i == 0 ? buf_append(&b, head, hlen, SIZE_MAX) : 0;
        /* An empty piece is only a moment; framed, it would end the body. */
        if (rc == 0 && chunked && pieces[i].len > 0) rc = buf_append(&b, size, sl, SIZE_MAX);
        if (rc == 0 && pieces[i].len > 0) rc = buf_append(&b, pieces[i].data, pieces[i].len, SIZE_MAX);
        if (rc == 0 && chunked && pieces[i].len > 0) rc = buf_append(&b, "\r\n", 2, SIZE_MAX);
        if (rc == 0 && chunked && i == n - 1) rc = buf_append(&b, "0\r\n\r\n", 5, SIZE_MAX);
        if (rc != 0) {
            free(b.p);
            goto oom;
        }
        r->pieces[i] = (mh_piece){b.p, b.len, pieces[i].at_ms};
    }
    free(head);
    req_start(r);
    return;
oom:
    free(head);
    conn_close(c);
}
