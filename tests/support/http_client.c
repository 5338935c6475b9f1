/* http_client: see http_client.h. */
#define _GNU_SOURCE
#include "http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void conn_init(hc_conn *c, int fd) {
    memset(c, 0, sizeof(*c));
    c->fd = fd;
}

int hc_connect_tcp(hc_conn *c, int port) {
    conn_init(c, -1);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    conn_init(c, fd);
    return 0;
}

int hc_connect_unix(hc_conn *c, const char *path) {
    conn_init(c, -1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    conn_init(c, fd);
    return 0;
}

void hc_close(hc_conn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    conn_init(c, -1);
}

int hc_send(hc_conn *c, const void *data, size_t len) {
    const char *p = data;
    while (len) {
        ssize_t w = send(c->fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int hc_send_str(hc_conn *c, const char *s) { return hc_send(c, s, strlen(s)); }

/* Reads once (waiting up to ms). 1 read something, 0 timeout, -1 closed. */
static int read_once(hc_conn *c, int ms) {
    if (c->closed) return -1;
    struct pollfd p = {c->fd, POLLIN, 0};
    int rc = poll(&p, 1, ms < 0 ? 0 : ms);
    if (rc <= 0) return 0;
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        while (cap - c->len < 65536) cap *= 2;
        char *b = realloc(c->buf, cap + 1);
        if (!b) return -1;
        c->buf = b;
        c->cap = cap;
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (n < 0 && errno == EINTR) return 1;
    if (n <= 0) {
        c->closed = 1;
        return -1;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    return 1;
}

size_t hc_read_some(hc_conn *c, int timeout_ms) {
    read_once(c, timeout_ms);
    return c->len;
}

int hc_wait_closed(hc_conn *c, int timeout_ms) {
    double deadline = now_ms() + timeout_ms;
    while (!c->closed) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) return 0;
        if (read_once(c, left) < 0) break;
        c->len = 0; /* dropped */
    }
    return 1;
}

static void take(hc_conn *c, size_t n) {
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
    if (c->buf) c->buf[c->len] = '\0';
}

static const char *find_header(const char *head, const char *name, size_t *vlen) {
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (!strncasecmp(line, name, nl) && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            *vlen = e ? (size_t)(e - v) : strlen(v);
            return v;
        }
    }
    return NULL;
}

const char *hc_header(const hc_response *r, const char *name, char *out, size_t n) {
    size_t vl;
    const char *v = r->head ? find_header(r->head, name, &vl) : NULL;
    if (!v) return NULL;
    snprintf(out, n, "%.*s", (int)vl, v);
    return out;
}

void hc_response_free(hc_response *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* Waits until cond(c) or the deadline; -1 timeout, -2 closed first. */
static int wait_for(hc_conn *c, double deadline, int (*ready)(const hc_conn *c, void *arg), void *arg) {
    while (!ready(c, arg)) {
        if (c->closed) return -2;
        int left = (int)(deadline - now_ms());
        if (left <= 0) return -1;
        read_once(c, left);
    }
    return 0;
}

static int has_head(const hc_conn *c, void *arg) { return c->buf && strstr(c->buf, "\r\n\r\n") != NULL; }

static int has_bytes(const hc_conn *c, void *arg) { return c->len >= *(size_t *)arg; }

static int has_line(const hc_conn *c, void *arg) { return c->buf && memmem(c->buf, c->len, "\r\n", 2) != NULL; }

int hc_read_response(hc_conn *c, hc_response *r, int timeout_ms) {
    memset(r, 0, sizeof(*r));
    double deadline = now_ms() + timeout_ms;
    int rc = wait_for(c, deadline, has_head, NULL);
    if (rc) return rc;
    size_t hl = (size_t)(strstr(c->buf, "\r\n\r\n") - c->buf) + 4;
    r->head = strndup(c->buf, hl);
    take(c, hl);
    if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1) return -2;
    char v[64];
    size_t cap = 1024, len = 0;
    char *body = malloc(cap + 1);
    if (!body) return -2;
    int no_body = r->status / 100 == 1 || r->status == 204 || r->status == 304;
    if (no_body) {
        /* nothing */
    } else if (hc_header(r, "content-length", v, sizeof(v))) {
        size_t want = (size_t)strtoull(v, NULL, 10);
        rc = wait_for(c, deadline, has_bytes, &want);
        if (rc) {
            free(body);
            return rc;
        }
        free(body);
        body = malloc(want + 1);
        if (want) memcpy(body, c->buf, want);
        len = want;
        take(c, want);
    } else if (hc_header(r, "transfer-encoding", v, sizeof(v)) && !strcasecmp(v, "chunked")) {
        r->chunked = 1;
        for (;;) {
            if ((rc = wait_for(c, deadline, has_line, NULL)) != 0) {
                free(body);
                return rc;
            }
            size_t size = (size_t)strtoull(c->buf, NULL, 16);
            take(c, (size_t)((char *)memmem(c->buf, c->len, "\r\n", 2) - c->buf) + 2);
            size_t want = size + 2;
            if ((rc = wait_for(c, deadline, has_bytes, &want)) != 0) {
                free(body);
                return rc;
            }
            if (size == 0) {
                take(c, 2);
                break;
            }
            if (len + size > cap) {
                while (len + size > cap) cap *= 2;
                body = realloc(body, cap + 1);
            }
            memcpy(body + len, c->buf, size);
            len += size;
            take(c, want);
            r->chunks++;
        }
    } else {
        /* Delimited by the end of the connection. */
        while (!c->closed) {
            int left = (int)(deadline - now_ms());
            if (left <= 0) {
                free(body);
                return -1;
            }
            read_once(c, left);
        }
        free(body);
        body = malloc(c->len + 1);
        if (c->len) memcpy(body, c->buf, c->len);
        len = c->len;
        take(c, c->len);
    }
    body[len] = '\0';
    r->body = body;
    r->body_len = len;
    return 0;
}

int hc_post(hc_conn *c, const char *target, const char *headers, const char *body, hc_response *r, int timeout_ms) {
    size_t n = strlen(target) + (headers ? strlen(headers) : 0) + strlen(body) + 128;
    char *req = malloc(n);
    if (!req) return -1;
    int k = snprintf(
        req, n, "POST %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n%s",
        target, headers ? headers : "", strlen(body), body);
    int rc = hc_send(c, req, (size_t)k);
    free(req);
    return rc ? -1 : hc_read_response(c, r, timeout_ms);
}
