/* http_server: an HTTP/1.1 server on a libuv loop: listeners, the life of
 * their connections, requests read with http_reader.h and responses
 * written. sluiced's proxy serves on it (its agent.http settings come
 * through http_config.h), and so does the mock provider (mock_http.h):
 * one transport, two handlers.
 *
 * A server listens on TCP addresses and UNIX sockets, reads each
 * connection's requests with http_reader.h and hands each complete
 * request to the handler (on_request), one at a time per connection, in
 * order: the next request of a keep-alive connection is read only once
 * the response to the one before is complete (pipelined bytes wait,
 * bounded). It owns everything about a connection: the limits
 * (http_server_limits: max_connections, max_header_bytes,
 * max_body_bytes), the timeouts (header_timeout_ms: slowloris,
 * body_timeout_ms, idle_timeout_ms between requests and for a client
 * that does not read; 0: none), the answers to what it refuses itself
 * (400, 408, 413, 431, 505 and 503 over max_connections, in the shape
 * the handler's error_body hook gives, then the connection is closed),
 * and closing: after a last response it shuts the sending side and
 * drains what the client still sends for a moment, so the kernel never
 * answers with a reset that destroys the response.
 *
 * The handler's side of a request (http_request):
 *   - read it: http_request_msg() (method, path, query, headers, body),
 *     http_request_transport() (TCP or UNIX: who may be trusted with what
 *     is the handler's decision) and http_request_peer();
 *   - answer it exactly once, now or later from any loop callback:
 *     http_respond() with a whole body, or a stream: http_stream_begin(),
 *     http_stream_write() per piece (one chunk each, sent as it comes: an
 *     SSE event is never held back), http_stream_end();
 *   - back-pressure: http_stream_write() returns 1 when the client's
 *     write queue is above the bound (HTTP_WRITE_HIGH_WATER): the caller
 *     should pause its producer (stop reading upstream); the hook set
 *     with http_request_on_writable() runs once the queue is down to
 *     HTTP_WRITE_LOW_WATER, to resume it;
 *   - the client going away: the hook set with http_request_on_abandon()
 *     runs when the client disconnects (or times out, or the server
 *     closes) before the response is complete; the request is freed right
 *     after it, so the hook must make sure nothing touches it again (and
 *     must not answer it). Without a hook the request is kept until the
 *     handler answers it; every answering call then returns
 *     HTTP_ECANCELED, and the finishing one (http_respond,
 *     http_stream_end) frees it.
 * The request is freed by the call that finishes the response; the
 * handler must not touch it afterwards. Calls never re-enter on_request:
 * the next request of the connection is dispatched from the loop.
 *
 * Drain (http_server_close): no new connections; idle ones and ones
 * still sending a request are closed at once; a response in progress may
 * finish (its connection then closes) for drain_timeout_ms, after which
 * it is abandoned.
 *
 * Depends on libuv and http_reader only: no configuration, no governor
 * (the mock provider serves on it and must share none of the governor's
 * beliefs; tests/layout_check.sh checks what this file and its .c
 * include). Never prints: messages go to the log hook. Single-threaded
 * (the loop's). Errors are the negative HTTP_E* codes below. */
#ifndef SLUICE_HTTP_SERVER_H
#define SLUICE_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "http_reader.h"

/* Errors: the values of sluice.h's SL_E* of the same names (http_config.c
 * checks it), so the daemon's callers may compare with either. */
#define HTTP_EINVAL (-1)
#define HTTP_ENOMEM (-2)
#define HTTP_ECANCELED (-7)
#define HTTP_EIO (-11)

/* Log levels of the log hook: config.h's CONFIG_LOG_* (checked likewise). */
enum { HTTP_LOG_ERROR = 0, HTTP_LOG_WARN, HTTP_LOG_INFO, HTTP_LOG_DEBUG };

/* The write-queue bound of back-pressure: above HIGH a stream write says
 * "pause"; at or below LOW the writable hook runs. Bytes libuv holds that
 * the kernel did not take yet. */
#define HTTP_WRITE_HIGH_WATER (256 * 1024)
#define HTTP_WRITE_LOW_WATER (64 * 1024)

typedef struct http_server http_server;
typedef struct http_request http_request;

typedef enum http_transport { HTTP_TRANSPORT_TCP = 0, HTTP_TRANSPORT_UNIX = 1 } http_transport;

/* A response header. The name must be a token and the value must hold no
 * CR, LF or NUL; Content-Length, Transfer-Encoding, Connection,
 * Keep-Alive and Upgrade are the server's (HTTP_EINVAL). */
typedef struct http_header {
    const char *name, *value;
} http_header;

/* A growable byte string, NUL-terminated past len (data NULL while
 * empty). */
typedef struct http_buf {
    char *data;
    size_t len, cap;
} http_buf;

/* Appends n bytes. 0 or HTTP_ENOMEM. */
int http_buf_append(http_buf *b, const void *s, size_t n);
void http_buf_free(http_buf *b);

/* An answer the server gives itself (400, 408, 413, 431, 505), for the
 * handler's error_body hook to shape. */
typedef struct http_refusal {
    const http_msg *partial; /* the request as far as it was read, NULL when nothing was */
    const char *peer;        /* as http_request_peer() */
    int status;
    const char *reason;
    http_buf body;            /* the hook appends the body ... */
    const char *content_type; /* ... and sets its type (a static string) */
    http_buf head;            /* header lines added with http_refusal_header() */
} http_refusal;

/* Adds a header to a refusal (checked as http_respond() checks them).
 * 0, HTTP_EINVAL or HTTP_ENOMEM. */
int http_refusal_header(http_refusal *rf, const char *name, const char *value);

typedef struct http_server_hooks {
    /* A complete request. See the contract above. */
    void (*on_request)(http_request *r, void *arg);
    /* Optional: the answer the server gives itself, in the shape of the
     * API the request was for: appends rf->body, sets rf->content_type,
     * may add headers, and returns 0; -1 for the default plain text. */
    int (*error_body)(void *arg, http_refusal *rf);
    void *arg;
    /* Optional: a log line at an HTTP_LOG_* level; msg valid during the call. */
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
} http_server_hooks;

/* What a server allows. A timeout of 0 is none. */
typedef struct http_server_limits {
    size_t max_header_bytes, max_body_bytes;
    size_t max_connections;
    uint64_t
        header_timeout_ms; /* the request line and headers, from their first byte (the first request: from the accept) */
    uint64_t body_timeout_ms;  /* the body, from the end of the headers */
    uint64_t idle_timeout_ms;  /* between requests, and a client that takes none of its response */
    uint64_t drain_timeout_ms; /* http_server_close(): responses in progress may finish this long */
} http_server_limits;

/* Counters for INFO and metrics; the hot path only increments them. */
typedef struct http_stats {
    unsigned long long listeners;   /* gauge: listening sockets */
    unsigned long long connections; /* gauge: open connections */
    unsigned long long connections_total, rejected_max_connections;
    unsigned long long requests;                                   /* handed to the handler */
    unsigned long long responses[6];                               /* by class: [1] 1xx ... [5] 5xx; [0] unused */
    unsigned long long streams;                                    /* streamed responses begun */
    unsigned long long refused_bad_request;                        /* 400 and 505 answered by the server */
    unsigned long long refused_too_large;                          /* 413 and 431 */
    unsigned long long closed_header_timeout, closed_body_timeout; /* 408 */
    unsigned long long closed_idle_timeout;                        /* keep-alive connections idle too long */
    unsigned long long closed_write_timeout;                       /* clients not reading their response */
    unsigned long long closed_client_gone;                         /* the client left mid-request or mid-response */
    unsigned long long abandoned;      /* requests whose client left before the response was complete */
    unsigned long long paused_streams; /* gauge: streams told to pause */
} http_stats;

/* Creates a server on loop with the limits lim (copied). hooks->on_request
 * is required. Nothing listens until http_server_listen_tcp() or
 * http_server_listen_unix(). Returns 0, HTTP_EINVAL or HTTP_ENOMEM. */
int http_server_new(uv_loop_t *loop, const http_server_limits *lim, const http_server_hooks *hooks, http_server **out);

/* Takes new limits (a reload): new connections and new requests get
 * them; the listeners are not changed. */
void http_server_configure(http_server *s, const http_server_limits *lim);

/* Listens on host (an IPv4 or IPv6 address) and port (0: a free one,
 * see http_server_address) with an accept queue of backlog. Returns 0,
 * or a negative libuv error code with a message naming the address in
 * err (UV_EINVAL: host is not an address); what was opened stays open
 * until http_server_close. */
int http_server_listen_tcp(http_server *s, const char *host, int port, int backlog, char *err, size_t errlen);

/* The caller's part in a UNIX socket's life: secure (optional) runs
 * after the bind and before anyone may connect (0, or -1 with a message
 * in err: the listen fails); release (optional) runs once when the
 * listener closes (or the server is freed without it). */
typedef struct http_unix_hooks {
    int (*secure)(void *ud, const char *path, char *err, size_t errlen);
    void (*release)(void *ud);
    void *ud;
} http_unix_hooks;

/* Listens on a UNIX socket at path (nothing may be there). Returns as
 * http_server_listen_tcp() (UV_EPERM when secure failed). uh is taken
 * whatever the outcome: its release runs once, at the latest when the
 * server is freed. */
int http_server_listen_unix(http_server *s, const char *path, int backlog, const http_unix_hooks *uh, char *err,
                            size_t errlen);

/* Stops accepting: closes the listeners (their release hooks run).
 * Idempotent. */
void http_server_stop_accepting(http_server *s);

/* Drains and closes (see above); done (optional) runs once every handle
 * is closed; then call http_server_free(). Implies stop_accepting. */
void http_server_close(http_server *s, void (*done)(void *arg), void *arg);

/* Frees a closed server. NULL is a no-op. */
void http_server_free(http_server *s);

void http_server_get_stats(const http_server *s, http_stats *out);

/* Hands msg to the log hook at an HTTP_LOG_* level (the caller's lines
 * about this server, next to its own). */
void http_server_log(http_server *s, int level, const char *msg);

/* The bound address of listener i (TCP: "127.0.0.1:8790" with the real
 * port when 0 was asked; UNIX: "unix:/path"), or NULL past the last. */
const char *http_server_address(const http_server *s, size_t i);
/* The bound TCP port of listener i; 0 for a UNIX socket or past the last. */
int http_server_port(const http_server *s, size_t i);

/* ---- a request ---------------------------------------------------------- */

const http_msg *http_request_msg(const http_request *r);
http_transport http_request_transport(const http_request *r);
/* "127.0.0.1:53122", "[::1]:40000", or "unix" (a UNIX socket peer). */
const char *http_request_peer(const http_request *r);
/* The connection's number: 1, 2, ... in accept order. */
unsigned long long http_request_conn_id(const http_request *r);
/* 1 once the client is gone (a request without an abandon hook). */
int http_request_gone(const http_request *r);

void http_request_on_abandon(http_request *r, void (*fn)(void *ud), void *ud);
void http_request_on_writable(http_request *r, void (*fn)(void *ud), void *ud);

/* Answers with status (200..599), headers h[0..nh), Content-Type
 * content_type (NULL: none) and the body (copied; HEAD: not sent, its
 * length is). Finishes and frees r. Returns 0, HTTP_EINVAL (bad status or
 * header: nothing is sent and r stays the handler's), HTTP_ENOMEM (the
 * connection is closed), HTTP_ECANCELED (the client was gone). */
int http_respond(http_request *r, int status, const http_header *h, size_t nh, const char *content_type,
                 const void *body, size_t len);

/* Starts a streamed answer: the status line and headers go out now, the
 * body follows in http_stream_write() pieces, chunked (to an HTTP/1.0
 * client: delimited by closing the connection). Returns 0, HTTP_EINVAL,
 * HTTP_ENOMEM, HTTP_ECANCELED. */
int http_stream_begin(http_request *r, int status, const http_header *h, size_t nh, const char *content_type);

/* Sends data[0..len) now as one chunk (copied). Returns 0, 1 when the
 * producer should pause (see on_writable), HTTP_ECANCELED when the client
 * is gone, HTTP_ENOMEM (the connection is closed), HTTP_EINVAL (no stream). */
int http_stream_write(http_request *r, const void *data, size_t len);

/* Ends the stream. Finishes and frees r. Returns 0, HTTP_ECANCELED,
 * HTTP_ENOMEM, HTTP_EINVAL (no stream: r stays the handler's). */
int http_stream_end(http_request *r);

/* Bytes of r's response written and not yet taken by the client's
 * kernel buffer. */
size_t http_request_queued(const http_request *r);

/* The reason phrase of a status ("Not Found"), "Status" when unknown. */
const char *http_status_text(int status);

#endif
