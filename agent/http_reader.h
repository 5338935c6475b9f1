/* http_reader: HTTP/1.1 requests out of the bytes a client sends, as the
 * daemon's HTTP proxy reads them.
 *
 * A reader is fed a connection's bytes, split however the kernel delivers
 * them, and yields one complete request at a time (an http_msg: method,
 * target, path, query, headers, body, keep-alive), parsed by
 * libhttp-parser 2.9 (Content-Length and chunked bodies, trailers read
 * and dropped). It stops at the end of each request, so pipelined bytes
 * after it stay with the caller until the request is answered: requests
 * are handled one at a time, in order. It enforces the limits it is given
 * before anything grows past them:
 *   - the request line and headers, counted as sent: more than
 *     max_header_bytes, or more than HTTP_READER_MAX_HEADERS fields: 431;
 *   - the body: a Content-Length above max_body_bytes is refused as soon
 *     as the headers end, a chunked body when it gets there: 413;
 *   - anything malformed (a bad request line, header, length or chunk):
 *     400; an HTTP version other than 1.x: 505.
 * After an error the reader reads nothing more: the caller answers with
 * the status (where HTTP allows it) and closes the connection.
 *
 * Depends on libhttp-parser only: no I/O, no event loop, no globals.
 * Single-threaded per reader. Ownership: http_reader_new() returns a
 * reader freed by http_reader_free() (NULL is a no-op); a message taken
 * with http_reader_take() is the caller's, freed by http_msg_free(). */
#ifndef SLUICE_HTTP_READER_H
#define SLUICE_HTTP_READER_H

#include <stddef.h>

/* Header fields of one request (a request with more is answered 431). */
#define HTTP_READER_MAX_HEADERS 100

typedef struct http_limits {
    size_t max_header_bytes; /* the request line and headers (and trailers), as sent */
    size_t max_body_bytes;
} http_limits;

/* One request. Strings are NUL-terminated and borrowed from the message. */
typedef struct http_msg http_msg;

const char *http_msg_method(const http_msg *m); /* "POST", "GET", ... */
const char *http_msg_target(const http_msg *m); /* as sent: "/v1/chat/completions?x=1" */
const char *http_msg_path(const http_msg *m);   /* the target's path, "" when it has none */
const char *http_msg_query(const http_msg *m);  /* the query without '?', "" when none */
/* The value of the first header with this name (ASCII case-insensitive),
 * without surrounding whitespace, or NULL. */
const char *http_msg_header(const http_msg *m, const char *name);
/* How many headers named name there are (case-insensitive). */
size_t http_msg_header_count(const http_msg *m, const char *name);
/* Header i (0-based, in the order sent) of http_msg_nheaders(). */
size_t http_msg_nheaders(const http_msg *m);
void http_msg_header_at(const http_msg *m, size_t i, const char **name, const char **value);
/* The body (with chunked framing removed), followed by a NUL that len
 * does not count; never NULL. */
const char *http_msg_body(const http_msg *m, size_t *len);
int http_msg_is_head(const http_msg *m);    /* HEAD: a response has no body */
int http_msg_keep_alive(const http_msg *m); /* the connection may carry another request */
int http_msg_http10(const http_msg *m);     /* HTTP/1.0: no chunked responses */

void http_msg_free(http_msg *m);

/* 1 when s[0..n) is a token (RFC 9110 5.6.2), as a field name must be. */
int http_token_ok(const char *s, size_t n);

/* 1 when a and b are equal ignoring ASCII case (field names). */
int http_name_eq(const char *a, const char *b);

typedef struct http_reader http_reader;

/* A reader with the given limits (copied). NULL when out of memory. */
http_reader *http_reader_new(const http_limits *lim);
void http_reader_free(http_reader *r);

/* Where the reader is. */
typedef enum http_reader_state {
    HTTP_READER_IDLE = 0, /* between requests: nothing of the next one yet */
    HTTP_READER_HEAD,     /* reading a request line and headers */
    HTTP_READER_BODY,     /* reading a body */
    HTTP_READER_DONE,     /* a complete request waits for http_reader_take() */
    HTTP_READER_ERROR,    /* malformed or too large: http_reader_error() says what */
    HTTP_READER_END       /* the last request was taken (no keep-alive): reads nothing more */
} http_reader_state;

http_reader_state http_reader_get_state(const http_reader *r);

/* Sets the limits (copied) for the requests that start from now on. */
void http_reader_set_limits(http_reader *r, const http_limits *lim);

/* Reads up to len bytes. Returns how many it consumed: less than len when
 * a request is complete (DONE: the rest belongs to the requests after it;
 * feed it again after http_reader_take()), on an error, or at END. In
 * DONE, ERROR and END it consumes nothing. */
size_t http_reader_feed(http_reader *r, const char *data, size_t len);

/* The complete request (DONE), handed to the caller; the reader goes on
 * to the next one (IDLE), or to END when this one does not keep the
 * connection alive. NULL in any other state. */
http_msg *http_reader_take(http_reader *r);

/* In ERROR: the status to answer (400, 413, 431, 505; 500 when out of
 * memory) and a short reason. 0 otherwise. */
int http_reader_error(const http_reader *r, const char **reason);

/* The request being read, as far as it is known (its path once the
 * request line is in, its headers once they are), for shaping an error
 * answer; NULL before a request started. Borrowed until the next feed. */
const http_msg *http_reader_current(const http_reader *r);

/* 1 once a byte of the next request arrived (leading blank lines too). */
int http_reader_started(const http_reader *r);

/* 1 once, in BODY, when the request said `Expect: 100-continue` and none
 * of its body has come yet: the caller sends `100 Continue`. Clears it. */
int http_reader_wants_continue(http_reader *r);

#endif
