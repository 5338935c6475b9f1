/* mock_http: the mock provider's side of HTTP: its requests, and answers
 * that come due on the mock's clock, served on the daemon's HTTP/1.1
 * transport (agent/http_server.h, which reads requests with
 * http_reader.h; a transport holds no belief about providers, so the
 * mock may share it: tests/layout_check.sh).
 *
 * The transport parses requests (libhttp-parser), keeps connections
 * alive and answers pipelined requests in order, one at a time: the next
 * request of a connection goes to the handler once the answer to the one
 * before is complete. A response may be delayed by a libuv timer, or
 * streamed: a schedule of pieces, each due some time after the response
 * starts, sent with chunked transfer encoding (Server-Sent Events), one
 * write per piece. Nothing here ever blocks the loop. Malformed input and
 * oversize requests are handed to the handler as a request whose
 * mock_http_error_status() is non-zero (400, 413, 431, 505), so the
 * handler shapes and counts the error; the connection is closed after
 * that response.
 *
 * Ownership: a mock_http_req belongs to the server. The handler must call
 * mock_http_respond() or mock_http_respond_stream() exactly once before it
 * returns (delays are the server's business); after that the request must
 * not be touched. What the handler needs to know later goes in udata,
 * which comes back through on_ready and on_done.
 * Depends on libuv and the transport. Single-threaded (the loop's). */
#ifndef SLUICE_MOCK_HTTP_H
#define SLUICE_MOCK_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

typedef struct mock_http mock_http;
typedef struct mock_http_req mock_http_req;

typedef struct mock_http_handlers {
    /* A complete request (or an error). Must answer it before returning. */
    void (*on_request)(mock_http_req *req, void *arg);
    /* Optional, for requests with udata: the whole response is due (its
     * delay has passed; a stream: its last piece is due). Not called when
     * the connection went first. */
    void (*on_ready)(void *udata, void *arg);
    /* Optional, for requests with udata, exactly once: the server lets go
     * of the request. delivered is 1 when the whole response was handed to
     * the socket, 0 when the connection went first (the client left, or
     * the server closed); released is how many pieces were due by then (a
     * plain response is one piece). udata may be freed here. */
    void (*on_done)(void *udata, int delivered, size_t released, void *arg);
    void *arg;
} mock_http_handlers;

/* Binds host:port (port 0 picks a free port) and starts accepting.
 * max_body caps a request body (413 beyond). Returns 0 or a negative libuv
 * error code; on error nothing is left open and *out is untouched. */
int mock_http_start(uv_loop_t *loop, const char *host, int port, size_t max_body, const mock_http_handlers *h,
                    mock_http **out);

/* The bound port. */
int mock_http_port(const mock_http *s);

/* Stops listening and closes every connection (pending responses are
 * abandoned). done(arg) runs once every handle is closed and the server is
 * freed. s must not be used after this call. */
void mock_http_close(mock_http *s, void (*done)(void *arg), void *arg);

/* Request accessors. Strings are NUL-terminated, borrowed, valid until the
 * response. */
const char *mock_http_method(const mock_http_req *r);
const char *mock_http_path(const mock_http_req *r);  /* without the query */
const char *mock_http_query(const mock_http_req *r); /* "" when none */
const char *mock_http_body(const mock_http_req *r, size_t *len);
/* The value of the first header with this name (case-insensitive), or NULL. */
const char *mock_http_header(const mock_http_req *r, const char *name);
/* The peer's address without the port, e.g. "127.0.0.1". */
const char *mock_http_peer(const mock_http_req *r);
/* 0 for a well-formed request, else the status the transport refused it
 * with (400, 413, 431, 505) and a short reason. */
int mock_http_error_status(const mock_http_req *r, const char **reason);

/* Handler data kept with the request until on_done. Set it before the
 * response: a response due at once may be ready and done inside
 * mock_http_respond(). */
void mock_http_set_udata(mock_http_req *r, void *udata);

/* Answers the request: status, extra header lines (each ending in "\r\n",
 * may be NULL), a JSON body, and a delay in ms before the response may be
 * sent (0: as soon as the responses before it are). Content-Type,
 * Content-Length and Connection are added here. The body is copied. */
void mock_http_respond(mock_http_req *r, int status, const char *headers, const char *body, size_t body_len,
                       uint64_t delay_ms);

/* One piece of a streamed body, due at_ms after the response starts. */
typedef struct mock_http_piece {
    const char *data;
    size_t len;
    uint64_t at_ms;
} mock_http_piece;

/* Answers the request with a body sent piece by piece: the status line and
 * headers go out with the first piece, at pieces[0].at_ms; each later
 * piece when it is due (at_ms must not decrease; n >= 1). Content-Type is
 * content_type, the body uses chunked transfer encoding (an HTTP/1.0
 * client gets it delimited by the end of the connection instead, and no
 * further request is read), Connection is added. The pieces are copied. */
void mock_http_respond_stream(mock_http_req *r, int status, const char *headers, const char *content_type,
                              const mock_http_piece *pieces, size_t n);

#endif
