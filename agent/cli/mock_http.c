#define _POSIX_C_SOURCE 200809L
#include "mock_http.h"

#include <limits.h>
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

struct mock_http_req {
    mock_http *srv;
    mh_conn *c;              /* NULL once the connection is gone */
    mock_http_req *next;     /* response queue order */
    int refs;                /* queue membership + a live timer */
    char method[16];
    mh_buf url, path, query, body;
    mh_buf hname[MH_MAX_HEADERS], hvalue[MH_MAX_HEADERS];
    size_t nheaders;
    int error_status;
    const char *error_reason;
    int keep_alive;
    int interim;             /* a "100 Continue", not a request */
    char *resp;
    size_t resp_len;
    int ready;
    int timer_live, timer_closing;
    uv_timer_t timer;
    void *udata[2];
};

struct mh_conn {
    uv_tcp_t tcp;
    uv_timer_t linger;
    uv_shutdown_t shutdown_req;
    mock_http *srv;
    mh_conn *prev, *next;
    http_parser parser;
    mock_http_req *cur;          /* the request being parsed */
    int in_value;                /* header parser state: last callback was a value */
    mock_http_req *head, *tail;  /* answered or pending, in request order */
    size_t writes_pending;
    int handles;                 /* tcp + linger while open */
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
    int handles;                 /* every open handle of ours */
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
    if (b->len + n > limit) return -2;
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

static const char *buf_str(const mh_buf *b) {
    return b->p ? b->p : "";
}

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
    free(r->resp);
    free(r);
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

static void req_timer_fired(uv_timer_t *t) {
    mock_http_req *r = t->data;
    r->ready = 1;
    r->timer_closing = 1;
    uv_close((uv_handle_t *)&r->timer, req_timer_closed);
    if (r->c) conn_flush(r->c);
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
 * reported to on_abandon. */
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
        if (s->h.on_abandon && (r->udata[0] || r->udata[1])) s->h.on_abandon(r->udata, s->h.arg);
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

static void conn_linger_expired(uv_timer_t *t) {
    conn_close(t->data);
}

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

/* Writes every ready response at the head of the queue, in order. */
static void conn_flush(mh_conn *c) {
    while (!c->closing && c->head && c->head->ready) {
        mock_http_req *r = c->head;
        c->head = r->next;
        if (!c->head) c->tail = NULL;
        mh_write *mw = malloc(sizeof(*mw));
        if (!mw) {
            req_unref(r);
            conn_close(c);
            return;
        }
        mw->data = r->resp;
        r->resp = NULL;
        uv_buf_t b = uv_buf_init(mw->data, (unsigned)r->resp_len);
        r->c = NULL;
        req_unref(r);
        c->writes_pending++;
        if (uv_write(&mw->w, (uv_stream_t *)&c->tcp, &b, 1, conn_write_done) != 0) {
            c->writes_pending--;
            free(mw->data);
            free(mw);
            conn_close(c);
            return;
        }
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
        rc = buf_append(&r->path, r->url.p + u.field_data[UF_PATH].off,
                        u.field_data[UF_PATH].len, MH_MAX_URL);
    if (rc == 0 && (u.field_set & (1 << UF_QUERY)))
        rc = buf_append(&r->query, r->url.p + u.field_data[UF_QUERY].off,
                        u.field_data[UF_QUERY].len, MH_MAX_URL);
    if (rc) return cur_fail(c, rc, 400, "malformed request target");
    /* Content-Length is known here; refuse an oversize body before it comes. */
    if (p->content_length != ULLONG_MAX && p->content_length > c->srv->max_body)
        return cur_fail(c, -2, 413, "request body too large");
    const char *expect = mock_http_header(r, "expect");
    if (expect && strcasecmp(expect, "100-continue") == 0 && p->http_minor >= 1) {
        mock_http_req *i = req_new(c);
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!i || !(i->resp = malloc(sizeof(cont)))) {
            free(i);
            return cur_fail(c, -1, 500, NULL);
        }
        memcpy(i->resp, cont, sizeof(cont));
        i->resp_len = sizeof(cont) - 1;
        i->interim = i->ready = 1;
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
        if (ss.ss_family == AF_INET)
            uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof(c->peer));
        else if (ss.ss_family == AF_INET6)
            uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof(c->peer));
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

static void srv_free_after_failed_start(uv_handle_t *h) {
    free(h->data);
}

int mock_http_start(uv_loop_t *loop, const char *host, int port, size_t max_body,
                    const mock_http_handlers *h, mock_http **out) {
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

int mock_http_port(const mock_http *s) {
    return s->port;
}

void mock_http_close(mock_http *s, void (*done)(void *), void *arg) {
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    uv_close((uv_handle_t *)&s->listener, srv_listener_closed);
    while (s->conns) conn_close(s->conns);
}

const char *mock_http_method(const mock_http_req *r) {
    return r->method;
}

const char *mock_http_path(const mock_http_req *r) {
    return buf_str(&r->path);
}

const char *mock_http_query(const mock_http_req *r) {
    return buf_str(&r->query);
}

const char *mock_http_body(const mock_http_req *r, size_t *len) {
    if (len) *len = r->body.len;
    return buf_str(&r->body);
}

const char *mock_http_header(const mock_http_req *r, const char *name) {
    for (size_t i = 0; i < r->nheaders; i++)
        if (r->hname[i].p && strcasecmp(r->hname[i].p, name) == 0) return buf_str(&r->hvalue[i]);
    return NULL;
}

const char *mock_http_peer(const mock_http_req *r) {
    return r->c ? r->c->peer : "unknown";
}

int mock_http_error_status(const mock_http_req *r, const char **reason) {
    if (reason) *reason = r->error_reason ? r->error_reason : "";
    return r->error_status;
}

void mock_http_set_udata(mock_http_req *r, void *a, void *b) {
    r->udata[0] = a;
    r->udata[1] = b;
}

void mock_http_respond(mock_http_req *r, int status, const char *headers, const char *body,
                       size_t body_len, uint64_t delay_ms) {
    mh_conn *c = r->c;
    char head[256];
    if (!c) return; /* cannot happen while the handler runs */
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n",
                     status, mh_reason(status), body_len, r->keep_alive ? "keep-alive" : "close");
    size_t hl = headers ? strlen(headers) : 0;
    size_t total = (size_t)n + hl + 2 + body_len;
    r->resp = malloc(total);
    if (!r->resp) {
        /* Without memory the response cannot be kept in order: drop the
         * connection rather than answer out of sequence. */
        conn_close(c);
        return;
    }
    memcpy(r->resp, head, (size_t)n);
    if (hl) memcpy(r->resp + n, headers, hl);
    memcpy(r->resp + n + hl, "\r\n", 2);
    if (body_len) memcpy(r->resp + n + hl + 2, body, body_len);
    r->resp_len = total;
    if (delay_ms == 0 || uv_timer_init(c->srv->loop, &r->timer) != 0) {
        r->ready = 1;
        conn_flush(c);
        return;
    }
    r->timer.data = r;
    r->timer_live = 1;
    r->refs++;
    c->srv->handles++;
    uv_timer_start(&r->timer, req_timer_fired, delay_ms, 0);
}
