/* http_server: HTTP/1.1 listeners and connections. See http_server.h.
 *
 * A connection's life: accepted (or refused with 503 over
 * max_connections) -> reading a request (header, then body timeout) ->
 * the request with the handler (no read timeout; the bytes the client
 * sends meanwhile are buffered up to HTTP_PENDING_MAX, then reading
 * pauses) -> its response written -> the next request, or idle (idle
 * timeout) -> closing. Closing is either at once (the client left, a
 * timeout without a response, the drain) or after a last response: the
 * writes drain, the sending side is shut and whatever the client still
 * sends is read and dropped for up to HTTP_LINGER_MS, then the handles
 * close. A connection has two handles (the stream and one timer for
 * every deadline); its memory goes in the last close callback.
 *
 * Input is read into a per-connection buffer allocated only while there
 * are bytes in it, so idle connections hold no buffer. */
#define _POSIX_C_SOURCE 200809L

#include "http_server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_PENDING_MAX (64 * 1024) /* bytes buffered while a request is with the handler */
#define HTTP_READ_CHUNK (64 * 1024)
#define HTTP_LINGER_MS 2000         /* after a last response: input drained this long at most */
#define HTTP_LINGER_BYTES (1 << 20) /* ... and this much */

typedef struct http_conn http_conn;

/* What a connection waits for, which decides its deadline. */
enum {
    PHASE_WAIT = 0, /* the first byte of a request: header_timeout_ms for the first, idle_timeout_ms after */
    PHASE_HEAD,     /* the rest of the request line and headers: header_timeout_ms */
    PHASE_BODY,     /* the body: body_timeout_ms */
    PHASE_HANDLER   /* the handler's response: no read deadline */
};

typedef struct listener {
    union {
        uv_handle_t h;
        uv_stream_t s;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } io;
    http_server *srv;
    http_transport kind;
    int open;
    int port;               /* TCP: the bound port */
    http_unix_hooks uhooks; /* UNIX: the caller's part */
    char name[140];
} listener;

struct http_request {
    http_conn *c; /* NULL once the connection is gone (orphaned) */
    http_msg *msg;
    int streaming, head_only, chunked, close_after;
    int want_writable; /* a stream write said pause: call on_writable at the low mark */
    int in_call;       /* inside the handler's own call: a close orphans r, no hook */
    void (*abandon)(void *ud);
    void *abandon_ud;
    void (*writable)(void *ud);
    void *writable_ud;
};

struct http_conn {
    union {
        uv_handle_t h;
        uv_stream_t s;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } io; /* first: the stream's data points at the conn */
    uv_timer_t timer;
    uv_shutdown_t shutdown_req;
    http_server *srv;
    http_transport kind;
    unsigned long long id;
    char peer[64];
    http_reader *rd;
    http_request *req; /* with the handler, NULL when none */
    char *in;          /* unparsed input */
    size_t in_len, in_cap;
    size_t writes_out;
    int handles; /* open handles: the stream and the timer */
    int reading, closing, lingering, shut;
    int peer_eof; /* the client shut its side after a whole request */
    int final;    /* no request is read after the current response */
    int in_process, process_again;
    int gone_counted;
    size_t lingered;
    int phase; /* PHASE_* */
    unsigned long long nrequests;
    uint64_t since;          /* start of the phase */
    uint64_t write_progress; /* last time a write completed, or was queued onto an empty queue */
    uint64_t linger_since;
    http_conn *prev, *next;
};

typedef struct write_req {
    uv_write_t w;
    http_conn *c;
    size_t len;
    char data[];
} write_req;

struct http_server {
    uv_loop_t *loop;
    http_server_hooks hooks;
    listener **ls;
    size_t nls;
    /* limits */
    http_limits lim;
    size_t max_connections;
    uint64_t header_ms, body_ms, idle_ms, drain_ms; /* 0: none (drain: at once) */
    http_conn *conns;
    size_t nconns; /* connections whose memory is not yet freed */
    unsigned long long next_id;
    http_stats st;
    int closing, handles_open; /* listeners + the drain timer */
    uv_timer_t drain;
    int drain_active; /* the drain timer runs (closed with the last connection) */
    void (*done)(void *);
    void *done_arg;
};

static void conn_process(http_conn *c);
static void conn_arm(http_conn *c);
static void conn_close(http_conn *c);
static void conn_update_reading(http_conn *c);
static void on_server_handle_closed(uv_handle_t *h);

static void slog(http_server *s, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void slog(http_server *s, int level, const char *fmt, ...) {
    if (!s->hooks.log) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s->hooks.log(s->hooks.log_ud, level, msg);
}

void http_server_log(http_server *s, int level, const char *msg) {
    if (s->hooks.log) s->hooks.log(s->hooks.log_ud, level, msg);
}

static void maybe_done(http_server *s) {
    if (!s->closing || s->handles_open > 0 || s->nconns > 0 || !s->done) return;
    void (*done)(void *) = s->done;
    s->done = NULL;
    done(s->done_arg);
}

/* ---- statuses and heads --------------------------------------------------------- */

const char *http_status_text(int status) {
    static const struct {
        int code;
        const char *text;
    } t[] = {
        {100, "Continue"},
        {200, "OK"},
        {201, "Created"},
        {202, "Accepted"},
        {204, "No Content"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {402, "Payment Required"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {409, "Conflict"},
        {413, "Content Too Large"},
        {415, "Unsupported Media Type"},
        {422, "Unprocessable Content"},
        {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {502, "Bad Gateway"},
        {503, "Service Unavailable"},
        {504, "Gateway Timeout"},
        {505, "HTTP Version Not Supported"},
        {529, "Site Overloaded"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (t[i].code == status) return t[i].text;
    return "Status";
}

int http_buf_append(http_buf *b, const void *s, size_t n) {
    if (n > SIZE_MAX - b->len - 1) return HTTP_ENOMEM;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
        char *p = realloc(b->data, cap);
        if (!p) return HTTP_ENOMEM;
        b->data = p;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

void http_buf_free(http_buf *b) {
    free(b->data);
    *b = (http_buf){0};
}

static int headers_ok(const http_header *h, size_t nh, const char *content_type) {
    static const char *const reserved[] = {"content-length", "transfer-encoding", "connection", "keep-alive",
                                           "upgrade"};
    if (content_type && strpbrk(content_type, "\r\n")) return 0;
    for (size_t i = 0; i < nh; i++) {
        if (!h[i].name || !http_token_ok(h[i].name, strlen(h[i].name)) || !h[i].value || strpbrk(h[i].value, "\r\n"))
            return 0;
        for (size_t k = 0; k < sizeof(reserved) / sizeof(reserved[0]); k++)
            if (http_name_eq(h[i].name, reserved[k])) return 0;
    }
    return 1;
}

int http_refusal_header(http_refusal *rf, const char *name, const char *value) {
    http_header h = {name, value};
    if (!headers_ok(&h, 1, NULL)) return HTTP_EINVAL;
    size_t len = rf->head.len;
    int rc = http_buf_append(&rf->head, name, strlen(name));
    if (!rc) rc = http_buf_append(&rf->head, ": ", 2);
    if (!rc) rc = http_buf_append(&rf->head, value, strlen(value));
    if (!rc) rc = http_buf_append(&rf->head, "\r\n", 2);
    if (rc) rf->head.len = len;
    return rc;
}

/* The status line and headers (h, then the ready lines when not NULL).
 * length < 0: no Content-Length (a stream, or a status without a body). */
static int build_head(http_buf *b, int status, const http_header *h, size_t nh, const char *content_type,
                      long long length, int chunked, int keep_alive, const http_buf *lines) {
    char line[128];
    int n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", status, http_status_text(status));
    int rc = http_buf_append(b, line, (size_t)n);
    if (!rc && content_type && *content_type) {
        rc = http_buf_append(b, "Content-Type: ", 14);
        if (!rc) rc = http_buf_append(b, content_type, strlen(content_type));
        if (!rc) rc = http_buf_append(b, "\r\n", 2);
    }
    for (size_t i = 0; !rc && i < nh; i++) {
        rc = http_buf_append(b, h[i].name, strlen(h[i].name));
        if (!rc) rc = http_buf_append(b, ": ", 2);
        if (!rc) rc = http_buf_append(b, h[i].value, strlen(h[i].value));
        if (!rc) rc = http_buf_append(b, "\r\n", 2);
    }
    if (!rc && lines && lines->len) rc = http_buf_append(b, lines->data, lines->len);
    if (!rc && length >= 0) {
        n = snprintf(line, sizeof(line), "Content-Length: %lld\r\n", length);
        rc = http_buf_append(b, line, (size_t)n);
    }
    if (!rc && chunked) rc = http_buf_append(b, "Transfer-Encoding: chunked\r\n", 28);
    if (!rc)
        rc = keep_alive ? http_buf_append(b, "Connection: keep-alive\r\n\r\n", 26)
                        : http_buf_append(b, "Connection: close\r\n\r\n", 21);
    return rc ? HTTP_ENOMEM : 0;
}

/* ---- writing ------------------------------------------------------------------------- */

static size_t queued(const http_conn *c) { return uv_stream_get_write_queue_size(&c->io.s); }

static void on_write(uv_write_t *w, int status) {
    write_req *wr = (write_req *)w;
    http_conn *c = wr->c;
    free(wr);
    c->writes_out--;
    if (c->closing) return;
    if (status < 0) {
        if (!c->gone_counted && !c->lingering) {
            c->gone_counted = 1;
            c->srv->st.closed_client_gone++;
        }
        slog(c->srv, HTTP_LOG_DEBUG, "http client %llu: write failed: %s", c->id, uv_strerror(status));
        conn_close(c);
        return;
    }
    c->write_progress = uv_now(c->srv->loop);
    http_request *r = c->req;
    if (r && r->want_writable && queued(c) <= HTTP_WRITE_LOW_WATER) {
        r->want_writable = 0;
        c->srv->st.paused_streams--;
        if (r->writable) r->writable(r->writable_ud); /* may finish r */
        if (c->closing) return;
    }
    /* The next request if this was the one holding it back, the shutdown
     * after a last response, the deadlines. */
    conn_process(c);
}

/* Queues bytes (copied) on the connection. 0, HTTP_ENOMEM, or HTTP_EIO (the
 * connection is closed then). */
static int conn_write(http_conn *c, const void *a, size_t alen, const void *b, size_t blen, const void *d,
                      size_t dlen) {
    size_t len = alen + blen + dlen;
    if (len == 0) return 0;
    write_req *wr = malloc(sizeof(*wr) + len);
    if (!wr) {
        conn_close(c);
        return HTTP_ENOMEM;
    }
    wr->c = c;
    wr->len = len;
    if (alen) memcpy(wr->data, a, alen);
    if (blen) memcpy(wr->data + alen, b, blen);
    if (dlen) memcpy(wr->data + alen + blen, d, dlen);
    if (queued(c) == 0) c->write_progress = uv_now(c->srv->loop);
    uv_buf_t ub = uv_buf_init(wr->data, (unsigned)len);
    int rc = uv_write(&wr->w, &c->io.s, &ub, 1, on_write);
    if (rc < 0) {
        free(wr);
        slog(c->srv, HTTP_LOG_DEBUG, "http client %llu: write failed: %s", c->id, uv_strerror(rc));
        conn_close(c);
        return HTTP_EIO;
    }
    c->writes_out++;
    return 0;
}

/* ---- requests ------------------------------------------------------------------------ */

static void req_free(http_request *r) {
    http_msg_free(r->msg);
    free(r);
}

static void on_conn_timer(uv_timer_t *t);

/* The response of c's request is complete: the request goes; the next
 * one is read from the loop (never from inside the handler's call). */
static void req_finished(http_request *r) {
    http_conn *c = r->c;
    if (r->want_writable && c) c->srv->st.paused_streams--;
    req_free(r);
    if (!c) return;
    c->req = NULL;
    c->phase = PHASE_WAIT;
    c->nrequests++;
    c->since = uv_now(c->srv->loop);
    if (c->closing || c->in_process) return;
    uv_timer_start(&c->timer, on_conn_timer, 0, 0);
}

/* The client is gone while r is with the handler. */
static void req_abandon(http_request *r) {
    http_conn *c = r->c;
    if (c) {
        c->req = NULL;
        c->srv->st.abandoned++;
        if (r->want_writable) {
            r->want_writable = 0;
            c->srv->st.paused_streams--;
        }
    }
    r->c = NULL;
    if (r->abandon && !r->in_call) {
        void (*fn)(void *) = r->abandon;
        r->abandon = NULL;
        fn(r->abandon_ud);
        req_free(r);
    }
    /* Without a hook, or during the handler's own call (which returns
     * HTTP_ECANCELED): orphaned, freed when the handler finishes it. */
}

const http_msg *http_request_msg(const http_request *r) { return r->msg; }
http_transport http_request_transport(const http_request *r) { return r->c ? r->c->kind : HTTP_TRANSPORT_TCP; }
const char *http_request_peer(const http_request *r) { return r->c ? r->c->peer : "gone"; }
unsigned long long http_request_conn_id(const http_request *r) { return r->c ? r->c->id : 0; }
int http_request_gone(const http_request *r) { return r->c == NULL; }
size_t http_request_queued(const http_request *r) { return r->c ? queued(r->c) : 0; }

void http_request_on_abandon(http_request *r, void (*fn)(void *ud), void *ud) {
    r->abandon = fn;
    r->abandon_ud = ud;
}

void http_request_on_writable(http_request *r, void (*fn)(void *ud), void *ud) {
    r->writable = fn;
    r->writable_ud = ud;
}

static void count_response(http_server *s, int status) {
    if (status >= 100 && status < 600) s->st.responses[status / 100]++;
}

/* Whether the connection stays open after r's response. */
static int keeps_alive(const http_request *r) {
    const http_conn *c = r->c;
    return http_msg_keep_alive(r->msg) && !c->srv->closing && !c->final;
}

/* After a call that wrote: 0 when r is still the connection's, else the
 * error (the connection closed and orphaned r). */
static int after_write(http_request *r, int rc) {
    r->in_call = 0;
    if (r->c) return rc;
    return rc ? rc : HTTP_ECANCELED;
}

int http_respond(http_request *r, int status, const http_header *h, size_t nh, const char *content_type,
                 const void *body, size_t len) {
    if (status < 200 || status > 599 || r->streaming || !headers_ok(h, nh, content_type)) return HTTP_EINVAL;
    http_conn *c = r->c;
    if (!c) {
        req_free(r);
        return HTTP_ECANCELED;
    }
    int keep = keeps_alive(r);
    int no_body = status == 204 || status == 304;
    http_buf head = {0};
    r->in_call = 1;
    int rc = build_head(&head, status, h, nh, content_type, no_body ? -1 : (long long)len, 0, keep, NULL);
    if (rc == 0) {
        if (!keep) c->final = 1;
        count_response(c->srv, status);
        int send_body = !no_body && !http_msg_is_head(r->msg);
        rc = conn_write(c, head.data, head.len, send_body ? body : NULL, send_body ? len : 0, NULL, 0);
    } else {
        conn_close(c);
    }
    http_buf_free(&head);
    rc = after_write(r, rc);
    if (rc == 0) req_finished(r);
    else req_free(r);
    return rc;
}

int http_stream_begin(http_request *r, int status, const http_header *h, size_t nh, const char *content_type) {
    if (status < 200 || status > 599 || r->streaming || !headers_ok(h, nh, content_type)) return HTTP_EINVAL;
    http_conn *c = r->c;
    if (!c) return HTTP_ECANCELED;
    r->streaming = 1;
    r->head_only = http_msg_is_head(r->msg);
    r->chunked = !http_msg_http10(r->msg) && !r->head_only;
    int keep = keeps_alive(r) && (r->chunked || r->head_only);
    if (!keep) c->final = 1;
    http_buf head = {0};
    r->in_call = 1;
    int rc = build_head(&head, status, h, nh, content_type, r->head_only ? 0 : -1, r->chunked, keep, NULL);
    if (rc == 0) {
        count_response(c->srv, status);
        c->srv->st.streams++;
        rc = conn_write(c, head.data, head.len, NULL, 0, NULL, 0);
    } else {
        conn_close(c);
    }
    http_buf_free(&head);
    return after_write(r, rc);
}

int http_stream_write(http_request *r, const void *data, size_t len) {
    if (!r->streaming) return HTTP_EINVAL;
    http_conn *c = r->c;
    if (!c) return HTTP_ECANCELED;
    if (len > 0 && !r->head_only) {
        char size[24];
        int n = r->chunked ? snprintf(size, sizeof(size), "%zx\r\n", len) : 0;
        r->in_call = 1;
        int rc = after_write(r, conn_write(c, size, (size_t)n, data, len, "\r\n", r->chunked ? 2 : 0));
        if (rc) return rc;
    }
    if (queued(c) > HTTP_WRITE_HIGH_WATER) {
        if (!r->want_writable) {
            r->want_writable = 1;
            c->srv->st.paused_streams++;
        }
        return 1;
    }
    return 0;
}

int http_stream_end(http_request *r) {
    if (!r->streaming) return HTTP_EINVAL;
    http_conn *c = r->c;
    if (!c) {
        req_free(r);
        return HTTP_ECANCELED;
    }
    r->in_call = 1;
    int rc = after_write(r, r->chunked ? conn_write(c, "0\r\n\r\n", 5, NULL, 0, NULL, 0) : 0);
    if (rc == 0) req_finished(r);
    else req_free(r);
    return rc;
}

/* ---- connections -------------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h) {
    http_conn *c = h->data;
    http_server *s = c->srv;
    if (--c->handles > 0) return;
    free(c->in);
    http_reader_free(c->rd);
    free(c);
    s->nconns--;
    s->st.connections--;
    if (s->closing && s->nconns == 0 && s->drain_active) {
        s->drain_active = 0;
        uv_timer_stop(&s->drain);
        uv_close((uv_handle_t *)&s->drain, on_server_handle_closed);
    }
    maybe_done(s);
}

/* Closes the connection now. A request with the handler is abandoned. */
static void conn_close(http_conn *c) {
    if (c->closing) return;
    http_server *s = c->srv;
    c->closing = 1;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    if (c->req) req_abandon(c->req);
    uv_close(&c->io.h, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

/* The client left (EOF, reset). Counted when it left in the middle of a
 * request or a response. */
static void conn_gone(http_conn *c, const char *why) {
    if (!c->req && c->phase == PHASE_WAIT && c->writes_out > 0 && !c->lingering && !c->peer_eof &&
        !strcmp(why, "disconnected")) {
        /* A client that shuts its sending side after its request (a
         * half-close) still gets the answer already on its way. */
        c->peer_eof = 1;
        c->final = 1;
        conn_update_reading(c);
        conn_arm(c);
        return;
    }
    int mid = c->req || c->phase == PHASE_HEAD || c->phase == PHASE_BODY || (c->final && !c->lingering);
    if (mid && !c->lingering && !c->gone_counted) {
        c->gone_counted = 1;
        c->srv->st.closed_client_gone++;
        slog(c->srv, HTTP_LOG_DEBUG, "http client %llu: %s mid-request; closing it", c->id, why);
    }
    conn_close(c);
}

/* After the last response is out: shut our side and drain theirs, so the
 * kernel has no unread input to answer with a reset. */
static void conn_maybe_shut(http_conn *c) {
    if (c->closing || !c->final || c->req || c->writes_out > 0 || c->shut) return;
    if (c->peer_eof) {
        conn_close(c); /* the client sends nothing more: nothing to drain */
        return;
    }
    c->shut = 1;
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, &c->io.s, NULL) != 0) {
        conn_close(c);
        return;
    }
    c->lingering = 1;
    c->linger_since = uv_now(c->srv->loop);
    c->in_len = 0;
    conn_update_reading(c);
    conn_arm(c);
}

/* Answers a request the server refuses itself; the connection closes
 * after it. */
static void conn_refuse(http_conn *c, int status, const char *reason) {
    http_server *s = c->srv;
    http_refusal rf = {.partial = http_reader_current(c->rd), .peer = c->peer, .status = status, .reason = reason};
    rf.content_type = "text/plain; charset=utf-8";
    if (!s->hooks.error_body || s->hooks.error_body(s->hooks.arg, &rf) != 0) {
        rf.body.len = rf.head.len = 0;
        rf.content_type = "text/plain; charset=utf-8";
        if (http_buf_append(&rf.body, reason, strlen(reason)) || http_buf_append(&rf.body, "\n", 1)) rf.body.len = 0;
    }
    http_buf head = {0};
    c->final = 1;
    if (build_head(&head, status, NULL, 0, rf.content_type, (long long)rf.body.len, 0, 0, &rf.head) == 0) {
        count_response(s, status);
        conn_write(c, head.data, head.len, rf.body.data, rf.body.len, NULL, 0);
    } else {
        conn_close(c);
    }
    http_buf_free(&head);
    http_buf_free(&rf.body);
    http_buf_free(&rf.head);
    slog(s, HTTP_LOG_DEBUG, "http client %llu: %d %s; closing it", c->id, status, reason);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    http_conn *c = h->data;
    if (c->in_cap - c->in_len < HTTP_READ_CHUNK / 4) {
        size_t cap = c->in_len + HTTP_READ_CHUNK;
        char *p = realloc(c->in, cap);
        if (!p) {
            *buf = uv_buf_init(NULL, 0); /* the read callback gets UV_ENOBUFS */
            return;
        }
        c->in = p;
        c->in_cap = cap;
    }
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    http_conn *c = st->data;
    if (c->closing) return;
    if (nread < 0) {
        conn_gone(c, nread == UV_EOF ? "disconnected" : uv_strerror((int)nread));
        return;
    }
    if (c->final) {
        /* Nothing more is read as a request: the bytes are dropped (while
         * lingering, up to a bound). */
        if (c->lingering && (c->lingered += (size_t)nread) > HTTP_LINGER_BYTES) conn_close(c);
        return;
    }
    c->in_len += (size_t)nread;
    conn_process(c);
}

/* Reads while a request may come, or to see the client leave while the
 * handler works (input buffered up to HTTP_PENDING_MAX), or to drain
 * after the last response. Frees the input buffer when it is empty. */
static void conn_update_reading(http_conn *c) {
    if (c->closing) return;
    int want = !c->peer_eof && (c->lingering || c->final || c->in_len < HTTP_PENDING_MAX);
    if (want && !c->reading) {
        if (uv_read_start(&c->io.s, on_alloc, on_read) == 0) c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop(&c->io.s);
        c->reading = 0;
    }
    if (c->final) c->in_len = 0;
    if (!c->in_len && c->in) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
}

/* Reads and dispatches what is buffered, while no request is with the
 * handler and the client takes its responses (below the high mark).
 * Never re-entered. */
static void conn_process(http_conn *c) {
    if (c->closing) return;
    if (c->in_process) {
        c->process_again = 1;
        return;
    }
    http_server *s = c->srv;
    c->in_process = 1;
    do {
        c->process_again = 0;
        while (!c->closing && !c->req && !c->final && queued(c) <= HTTP_WRITE_HIGH_WATER) {
            size_t used = http_reader_feed(c->rd, c->in ? c->in : "", c->in_len);
            if (used) {
                memmove(c->in, c->in + used, c->in_len - used);
                c->in_len -= used;
            }
            http_reader_state st = http_reader_get_state(c->rd);
            uint64_t now = uv_now(s->loop);
            if (c->phase == PHASE_WAIT && http_reader_started(c->rd)) {
                c->phase = PHASE_HEAD;
                c->since = now;
            }
            if (c->phase == PHASE_HEAD && st == HTTP_READER_BODY) {
                c->phase = PHASE_BODY;
                c->since = now;
            }
            if (http_reader_wants_continue(c->rd)) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (conn_write(c, cont, sizeof(cont) - 1, NULL, 0, NULL, 0) != 0) break;
            }
            if (st == HTTP_READER_DONE) {
                http_request *r = calloc(1, sizeof(*r));
                http_msg *m = http_reader_take(c->rd);
                if (!r || !m) {
                    free(r);
                    http_msg_free(m);
                    conn_close(c);
                    break;
                }
                r->c = c;
                r->msg = m;
                if (!http_msg_keep_alive(m)) c->final = 1;
                c->req = r;
                c->phase = PHASE_HANDLER;
                c->since = now;
                s->st.requests++;
                http_reader_set_limits(c->rd, &s->lim);
                s->hooks.on_request(r, s->hooks.arg);
                continue;
            }
            if (st == HTTP_READER_ERROR) {
                const char *reason;
                int status = http_reader_error(c->rd, &reason);
                if (status == 413 || status == 431) s->st.refused_too_large++;
                else s->st.refused_bad_request++;
                conn_refuse(c, status, reason);
            }
            break; /* more input needed, or refused */
        }
    } while (c->process_again && !c->closing);
    c->in_process = 0;
    if (c->closing) return;
    conn_update_reading(c);
    conn_maybe_shut(c);
    conn_arm(c);
}

/* ---- deadlines ------------------------------------------------------------------------ */

/* since + ms, or 0 (no deadline) when the timeout is 0 (none). */
static uint64_t after(uint64_t since, uint64_t ms) { return ms ? since + ms : 0; }

/* The next deadline of c by what it waits for; 0 when none. */
static uint64_t conn_deadline(const http_conn *c) {
    const http_server *s = c->srv;
    if (c->lingering) return c->linger_since + HTTP_LINGER_MS;
    uint64_t w = queued(c) > 0 ? after(c->write_progress, s->idle_ms) : 0; /* a client that does not read */
    uint64_t r = 0;
    if (!c->final) {
        if (c->phase == PHASE_WAIT) r = after(c->since, c->nrequests ? s->idle_ms : s->header_ms);
        else if (c->phase == PHASE_HEAD) r = after(c->since, s->header_ms);
        else if (c->phase == PHASE_BODY) r = after(c->since, s->body_ms);
    }
    if (!w) return r;
    if (!r) return w;
    return w < r ? w : r;
}

static void conn_arm(http_conn *c) {
    if (c->closing) return;
    uint64_t d = conn_deadline(c), now = uv_now(c->srv->loop);
    if (!d) {
        uv_timer_stop(&c->timer);
        return;
    }
    uv_timer_start(&c->timer, on_conn_timer, d > now ? d - now : 0, 0);
}

static void on_conn_timer(uv_timer_t *t) {
    http_conn *c = t->data;
    http_server *s = c->srv;
    if (c->closing) return;
    if (!c->req && !c->final) conn_process(c); /* a response finished: read the next request */
    else if (!c->req) conn_maybe_shut(c);      /* the last one: no write may be left to do it */
    if (c->closing) return;
    uint64_t now = uv_now(s->loop), d = conn_deadline(c);
    if (!d || d > now) {
        conn_arm(c);
        return;
    }
    if (c->lingering) {
        conn_close(c);
    } else if (queued(c) > 0 && s->idle_ms && now >= c->write_progress + s->idle_ms) {
        s->st.closed_write_timeout++;
        slog(s, HTTP_LOG_DEBUG, "http client %llu: took none of its response for %llu ms; closing it", c->id,
             (unsigned long long)s->idle_ms);
        conn_close(c);
    } else if (c->phase == PHASE_BODY) {
        s->st.closed_body_timeout++;
        conn_refuse(c, 408, "request body not complete in time (agent.http.body_timeout_ms)");
        conn_update_reading(c);
        conn_arm(c);
    } else if (c->phase == PHASE_HEAD) {
        s->st.closed_header_timeout++;
        conn_refuse(c, 408, "request headers not complete in time (agent.http.header_timeout_ms)");
        conn_update_reading(c);
        conn_arm(c);
    } else {
        /* Waiting for a request that never came: closed without an answer,
         * as servers do (a client may be sending one this very moment). */
        if (c->nrequests) s->st.closed_idle_timeout++;
        else s->st.closed_header_timeout++;
        conn_close(c);
    }
}

/* ---- accepting ------------------------------------------------------------------------- */

static void on_rejected_closed(uv_handle_t *h) { free(h); }

static void peer_name(http_conn *c) {
    snprintf(c->peer, sizeof(c->peer), c->kind == HTTP_TRANSPORT_UNIX ? "unix" : "?");
    if (c->kind == HTTP_TRANSPORT_UNIX) return;
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[48];
    if (uv_tcp_getpeername(&c->io.tcp, (struct sockaddr *)&ss, &len) != 0) return;
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    }
}

static int stream_init(uv_loop_t *loop, http_transport kind, void *h) {
    return kind == HTTP_TRANSPORT_TCP ? uv_tcp_init(loop, h) : uv_pipe_init(loop, h, 0);
}

/* Over max_connections (or closing): accepted, told, closed at once. */
static void refuse_connection(http_server *s, listener *l) {
    static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                              "Content-Length: 59\r\nConnection: close\r\n\r\n"
                              "sluiced: too many connections (agent.http.max_connections)\n";
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } *h = malloc(sizeof(*h));
    if (!h) return;
    stream_init(s->loop, l->kind, h);
    if (uv_accept(&l->io.s, (uv_stream_t *)h) == 0) {
        uv_buf_t b = uv_buf_init((char *)msg, sizeof(msg) - 1);
        uv_try_write((uv_stream_t *)h, &b, 1);
        if (!s->closing) {
            s->st.rejected_max_connections++;
            slog(s, HTTP_LOG_WARN, "refused an HTTP connection: max connections (%zu) reached", s->max_connections);
        }
    }
    uv_close((uv_handle_t *)h, on_rejected_closed);
}

static void on_connection(uv_stream_t *ls, int status) {
    listener *l = ls->data;
    http_server *s = l->srv;
    if (status < 0) {
        slog(s, HTTP_LOG_WARN, "http accept failed on %s: %s", l->name, uv_strerror(status));
        return;
    }
    if (s->closing || s->nconns >= s->max_connections) {
        refuse_connection(s, l);
        return;
    }
    http_conn *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->srv = s;
    c->kind = l->kind;
    stream_init(s->loop, l->kind, &c->io);
    uv_timer_init(s->loop, &c->timer);
    c->io.h.data = c->timer.data = c;
    c->handles = 2;
    s->nconns++;
    s->st.connections++;
    c->rd = http_reader_new(&s->lim);
    if (!c->rd || uv_accept(ls, &c->io.s) != 0) {
        c->closing = 1;
        uv_close(&c->io.h, on_conn_closed);
        uv_close((uv_handle_t *)&c->timer, on_conn_closed);
        return;
    }
    c->id = ++s->next_id;
    if (c->kind == HTTP_TRANSPORT_TCP) uv_tcp_nodelay(&c->io.tcp, 1);
    peer_name(c);
    c->since = uv_now(s->loop);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->st.connections_total++;
    conn_update_reading(c);
    conn_arm(c);
}

/* ---- the server ------------------------------------------------------------------------- */

static void take_limits(http_server *s, const http_server_limits *lim) {
    s->lim.max_header_bytes = lim->max_header_bytes;
    s->lim.max_body_bytes = lim->max_body_bytes;
    s->max_connections = lim->max_connections;
    s->header_ms = lim->header_timeout_ms;
    s->body_ms = lim->body_timeout_ms;
    s->idle_ms = lim->idle_timeout_ms;
    s->drain_ms = lim->drain_timeout_ms;
}

int http_server_new(uv_loop_t *loop, const http_server_limits *lim, const http_server_hooks *hooks, http_server **out) {
    *out = NULL;
    if (!lim || !hooks || !hooks->on_request) return HTTP_EINVAL;
    http_server *s = calloc(1, sizeof(*s));
    if (!s) return HTTP_ENOMEM;
    s->loop = loop;
    s->hooks = *hooks;
    take_limits(s, lim);
    *out = s;
    return 0;
}

void http_server_configure(http_server *s, const http_server_limits *lim) {
    take_limits(s, lim);
    /* Connections between requests read the next one with the new limits. */
    for (http_conn *c = s->conns; c; c = c->next) http_reader_set_limits(c->rd, &s->lim);
}

static void on_server_handle_closed(uv_handle_t *h) {
    http_server *s = h->data;
    s->handles_open--;
    maybe_done(s);
}

static void on_listener_closed(uv_handle_t *h) {
    listener *l = h->data;
    l->srv->handles_open--;
    maybe_done(l->srv);
}

/* A new listener, kept in s->ls (its handle must not move). */
static listener *listener_add(http_server *s, http_transport kind) {
    listener **ls = realloc(s->ls, (s->nls + 1) * sizeof(*ls));
    if (!ls) return NULL;
    s->ls = ls;
    listener *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    l->srv = s;
    l->kind = kind;
    s->ls[s->nls++] = l;
    return l;
}

/* The listener's handle is initialized: it is closed with the server. */
static void listener_opened(http_server *s, listener *l) {
    l->io.h.data = l;
    l->open = 1;
    s->handles_open++;
}

static int listener_listen(http_server *s, listener *l, int backlog, char *err, size_t errlen) {
    int rc = uv_listen(&l->io.s, backlog, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", l->name, uv_strerror(rc));
        return rc;
    }
    s->st.listeners++;
    return 0;
}

int http_server_listen_tcp(http_server *s, const char *host, int port, int backlog, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    int v6 = strchr(host, ':') != NULL;
    int rc = port < 0 || port > 65535 ? UV_EINVAL
             : v6                     ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)
                                      : uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
    if (rc != 0) {
        snprintf(err, errlen, "bad address %s: %s", host, uv_strerror(rc));
        return rc;
    }
    listener *l = listener_add(s, HTTP_TRANSPORT_TCP);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return UV_ENOMEM;
    }
    uv_tcp_init(s->loop, &l->io.tcp);
    listener_opened(s, l);
    rc = uv_tcp_bind(&l->io.tcp, (struct sockaddr *)&ss, 0);
    if (rc == 0) {
        int len = sizeof(ss);
        rc = uv_tcp_getsockname(&l->io.tcp, (struct sockaddr *)&ss, &len);
        l->port = v6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        snprintf(l->name, sizeof(l->name), v6 ? "[%s]:%d" : "%s:%d", host, l->port);
    } else {
        snprintf(l->name, sizeof(l->name), v6 ? "[%s]:%d" : "%s:%d", host, port);
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", l->name, uv_strerror(rc));
        return rc;
    }
    return listener_listen(s, l, backlog, err, errlen);
}

int http_server_listen_unix(http_server *s, const char *path, int backlog, const http_unix_hooks *uh, char *err,
                            size_t errlen) {
    listener *l = listener_add(s, HTTP_TRANSPORT_UNIX);
    if (!l) {
        if (uh && uh->release) uh->release(uh->ud);
        snprintf(err, errlen, "out of memory");
        return UV_ENOMEM;
    }
    if (uh) l->uhooks = *uh;
    snprintf(l->name, sizeof(l->name), "unix:%s", path);
    uv_pipe_init(s->loop, &l->io.pipe, 0);
    listener_opened(s, l);
    int rc = uv_pipe_bind(&l->io.pipe, path);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", l->name, uv_strerror(rc));
        return rc;
    }
    if (l->uhooks.secure && l->uhooks.secure(l->uhooks.ud, path, err, errlen) != 0) return UV_EPERM;
    return listener_listen(s, l, backlog, err, errlen);
}

/* The caller's part in a UNIX socket ends once. */
static void listener_release(listener *l) {
    void (*release)(void *) = l->uhooks.release;
    l->uhooks.release = NULL;
    if (release) release(l->uhooks.ud);
}

const char *http_server_address(const http_server *s, size_t i) { return i < s->nls ? s->ls[i]->name : NULL; }

int http_server_port(const http_server *s, size_t i) { return i < s->nls ? s->ls[i]->port : 0; }

void http_server_stop_accepting(http_server *s) {
    for (size_t i = 0; i < s->nls; i++) {
        listener *l = s->ls[i];
        if (l->open) {
            l->open = 0;
            uv_close(&l->io.h, on_listener_closed);
            if (s->st.listeners) s->st.listeners--;
        }
        listener_release(l);
    }
}

static void on_drain_timer(uv_timer_t *t) {
    http_server *s = t->data;
    if (s->conns)
        slog(s, HTTP_LOG_WARN, "drain: closing HTTP connections with responses still in progress after %llu ms",
             (unsigned long long)s->drain_ms);
    s->drain_active = 0;
    uv_close((uv_handle_t *)&s->drain, on_server_handle_closed);
    while (s->conns) conn_close(s->conns);
}

void http_server_close(http_server *s, void (*done)(void *arg), void *arg) {
    if (s->closing) return;
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    http_server_stop_accepting(s);
    for (http_conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (c->req) {
            c->final = 1; /* its response may finish; then it closes */
            conn_update_reading(c);
        } else if (c->final && (c->writes_out || c->lingering)) {
            /* a last response on its way out */
        } else {
            conn_close(c);
        }
    }
    uv_timer_init(s->loop, &s->drain);
    s->drain.data = s;
    s->handles_open++;
    if (s->nconns) {
        s->drain_active = 1;
        uv_timer_start(&s->drain, on_drain_timer, s->drain_ms, 0);
    } else {
        uv_close((uv_handle_t *)&s->drain, on_server_handle_closed);
    }
    maybe_done(s);
}

void http_server_free(http_server *s) {
    if (!s) return;
    for (size_t i = 0; i < s->nls; i++) {
        listener_release(s->ls[i]);
        free(s->ls[i]);
    }
    free(s->ls);
    free(s);
}

void http_server_get_stats(const http_server *s, http_stats *out) { *out = s->st; }
