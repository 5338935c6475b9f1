/* http_client: a raw HTTP/1.1 client for the proxy's tests.
 *
 * A connection is a blocking socket (TCP to 127.0.0.1, or a UNIX socket)
 * with its own read buffer, so that a test can send any bytes (pipelined
 * requests, a header trickled one byte at a time, a bad chunk) and read
 * back the responses one by one: status, head and body, the body framed
 * by Content-Length, chunked encoding (de-chunked) or the end of the
 * connection. Every read is bounded by a timeout; nothing sleeps.
 *
 * Depends on POSIX sockets only. Functions return 0 or -1 and print
 * nothing. Not thread-safe per connection. */
#ifndef SLUICE_TEST_HTTP_CLIENT_H
#define SLUICE_TEST_HTTP_CLIENT_H

#include <stddef.h>

typedef struct hc_conn {
    int fd;
    char *buf; /* bytes read and not yet taken */
    size_t len, cap;
    int closed; /* the peer closed (EOF or reset) */
} hc_conn;

typedef struct hc_response {
    int status;
    char *head; /* the status line and headers, NUL-terminated */
    char *body; /* de-chunked, NUL-terminated */
    size_t body_len;
    int chunked; /* it came with Transfer-Encoding: chunked */
    int chunks;  /* how many chunks */
} hc_response;

int hc_connect_tcp(hc_conn *c, int port);
int hc_connect_unix(hc_conn *c, const char *path);
void hc_close(hc_conn *c);

int hc_send(hc_conn *c, const void *data, size_t len);
int hc_send_str(hc_conn *c, const char *s);

/* Reads one response within timeout_ms. Returns 0, -1 on a timeout, -2
 * when the connection ended before a whole response (what came is in
 * c->buf). A 1xx response is returned like any other. */
int hc_read_response(hc_conn *c, hc_response *r, int timeout_ms);
void hc_response_free(hc_response *r);

/* The value of header name in r (case-insensitive), copied into out; NULL
 * when absent. */
const char *hc_header(const hc_response *r, const char *name, char *out, size_t n);

/* Reads (and drops) until the peer closes; 1 when it did within
 * timeout_ms, 0 otherwise. */
int hc_wait_closed(hc_conn *c, int timeout_ms);

/* Reads what arrives within timeout_ms into c->buf (at least one byte, or
 * until closed). Returns the bytes now buffered. */
size_t hc_read_some(hc_conn *c, int timeout_ms);

/* Sends a POST with a JSON body (and extra header lines, each ending in
 * \r\n, or NULL) and reads its response. */
int hc_post(hc_conn *c, const char *target, const char *headers, const char *body, hc_response *r, int timeout_ms);

#endif
