/* http_reader: requests from bytes, over libhttp-parser. See
 * http_reader.h.
 *
 * A message keeps its request target and headers in one arena (the bytes
 * as parsed, NUL-terminated, with offsets), so the callbacks only append;
 * the arena is bounded by the header limit. The header limit is exact:
 * while a request's head is read, the parser is fed at most one byte past
 * what the limit leaves, so a head that is still not complete after that
 * is over the limit wherever the kernel split it. The parser pauses in
 * on_message_complete, which makes http_parser_execute() return with the
 * bytes after the request unconsumed. */
#define _POSIX_C_SOURCE 200809L

#include "http_reader.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

typedef struct hdr {
    size_t name, name_len, value, value_len; /* offsets into the arena */
} hdr;

struct http_msg {
    char *arena;
    size_t len, cap, limit;
    size_t target, target_len; /* the request target, as sent */
    size_t path, query;        /* NUL-terminated copies, 0 = none (the arena starts with a NUL) */
    int target_done;           /* the target is complete and NUL-terminated */
    hdr *hdrs;
    size_t nhdrs, hdr_cap;
    int in_value; /* the last header callback was a value */
    char *body;
    size_t body_len, body_cap;
    char method[16];
    int is_head, keep_alive, http10, expect_continue;
};

struct http_reader {
    http_parser p;
    http_limits lim;      /* of the request being read */
    http_limits next_lim; /* of the requests that start from now on */
    http_reader_state state;
    http_msg *cur;
    size_t head_bytes; /* bytes fed while reading the current head */
    size_t trailer_bytes;
    int error_status;
    const char *error_reason;
    int wants_continue;
};

/* ---- messages ---- */

static http_msg *msg_new(size_t limit) {
    http_msg *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->limit = limit;
    m->arena = malloc(256);
    if (!m->arena) {
        free(m);
        return NULL;
    }
    m->cap = 256;
    m->arena[0] = '\0'; /* offset 0 is the empty string */
    m->arena[1] = '\0';
    m->len = 1;
    return m;
}

void http_msg_free(http_msg *m) {
    if (!m) return;
    free(m->arena);
    free(m->hdrs);
    free(m->body);
    free(m);
}

/* Makes room for n more bytes and the NUL kept after them. 0, -1 when
 * out of memory, -2 when over the limit. */
static int arena_reserve(http_msg *m, size_t n) {
    if (m->len + n + 1 > m->limit) return -2;
    if (m->len + n + 1 <= m->cap) return 0;
    size_t cap = m->cap;
    while (cap < m->len + n + 1) cap *= 2;
    if (cap > m->limit) cap = m->limit;
    char *a = realloc(m->arena, cap);
    if (!a) return -1;
    m->arena = a;
    m->cap = cap;
    return 0;
}

/* Appends n bytes to the arena, always followed by a NUL (not counted),
 * so that the string being read is terminated at every moment. */
static int arena_add(http_msg *m, const char *s, size_t n) {
    int rc = arena_reserve(m, n);
    if (rc) return rc;
    memcpy(m->arena + m->len, s, n);
    m->len += n;
    m->arena[m->len] = '\0';
    return 0;
}

const char *http_msg_method(const http_msg *m) { return m->method; }
const char *http_msg_target(const http_msg *m) { return m->arena + m->target; }
const char *http_msg_path(const http_msg *m) { return m->arena + m->path; }
const char *http_msg_query(const http_msg *m) { return m->arena + m->query; }
int http_msg_is_head(const http_msg *m) { return m->is_head; }
int http_msg_keep_alive(const http_msg *m) { return m->keep_alive; }
int http_msg_http10(const http_msg *m) { return m->http10; }
size_t http_msg_nheaders(const http_msg *m) { return m->nhdrs; }

const char *http_msg_body(const http_msg *m, size_t *len) {
    if (len) *len = m->body_len;
    return m->body ? m->body : "";
}

int http_name_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a - 'A' + 'a') : *a;
        char y = *b >= 'A' && *b <= 'Z' ? (char)(*b - 'A' + 'a') : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}

int http_token_ok(const char *s, size_t n) {
    static const char extra[] = "!#$%&'*+-.^_`|~";
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr(extra, c))))
            return 0;
    }
    return 1;
}

void http_msg_header_at(const http_msg *m, size_t i, const char **name, const char **value) {
    *name = m->arena + m->hdrs[i].name;
    *value = m->arena + m->hdrs[i].value;
}

const char *http_msg_header(const http_msg *m, const char *name) {
    size_t n = http_msg_nheaders(m);
    for (size_t i = 0; i < n; i++)
        if (http_name_eq(m->arena + m->hdrs[i].name, name)) return m->arena + m->hdrs[i].value;
    return NULL;
}

size_t http_msg_header_count(const http_msg *m, const char *name) {
    size_t n = http_msg_nheaders(m), k = 0;
    for (size_t i = 0; i < n; i++)
        if (http_name_eq(m->arena + m->hdrs[i].name, name)) k++;
    return k;
}

/* ---- the parser's callbacks ---- */

static int fail(http_reader *r, int status, const char *reason) {
    if (!r->error_status) {
        r->error_status = status;
        r->error_reason = reason;
    }
    return -1;
}

static int arena_fail(http_reader *r, int rc) {
    return rc == -1 ? fail(r, 500, "out of memory") : fail(r, 431, "request header fields too large");
}

static int on_message_begin(http_parser *p) {
    http_reader *r = p->data;
    /* The head as stored (target, names, values, their NULs, the path
     * and query copied) fits in twice the bytes sent; the exact limit is
     * http_reader_feed()'s. */
    r->cur = msg_new(2 * r->lim.max_header_bytes + 4 * HTTP_READER_MAX_HEADERS + 16);
    if (!r->cur) return fail(r, 500, "out of memory");
    r->state = HTTP_READER_HEAD;
    r->trailer_bytes = 0;
    return 0;
}

static int copy_part(http_reader *r, const struct http_parser_url *u, int f, size_t *off);

/* The target is complete (at the first header or the end of the head):
 * its path and query are taken out, so that even an error answered
 * before the headers end knows the path. */
static int end_target(http_reader *r) {
    http_msg *m = r->cur;
    if (m->target_done) return 0;
    m->target_done = 1;
    int rc = arena_add(m, "", 1);
    if (rc) return arena_fail(r, rc);
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (!m->target_len ||
        http_parser_parse_url(m->arena + m->target, m->target_len, r->p.method == HTTP_CONNECT, &u) != 0)
        return fail(r, 400, "malformed request target");
    if (copy_part(r, &u, UF_PATH, &m->path) != 0 || copy_part(r, &u, UF_QUERY, &m->query) != 0) return -1;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
    http_reader *r = p->data;
    http_msg *m = r->cur;
    if (!m->target_len) m->target = m->len;
    int rc = arena_add(m, at, len);
    if (rc) return arena_fail(r, rc);
    m->target_len += len;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
    http_reader *r = p->data;
    http_msg *m = r->cur;
    if (r->state == HTTP_READER_BODY) {
        /* A trailer: read and dropped, within the header limit. */
        r->trailer_bytes += len;
        return r->trailer_bytes > r->lim.max_header_bytes ? fail(r, 431, "trailer fields too large") : 0;
    }
    if (end_target(r) != 0) return -1;
    int rc;
    if (m->in_value || m->nhdrs == 0) {
        if (m->nhdrs && (rc = arena_add(m, "", 1)) != 0) return arena_fail(r, rc); /* ends the last value */
        if (m->nhdrs == HTTP_READER_MAX_HEADERS + 1) return fail(r, 431, "too many header fields");
        if (m->nhdrs == m->hdr_cap) {
            size_t cap = m->hdr_cap ? m->hdr_cap * 2 : 16;
            hdr *h = realloc(m->hdrs, cap * sizeof(*h));
            if (!h) return fail(r, 500, "out of memory");
            m->hdrs = h;
            m->hdr_cap = cap;
        }
        m->hdrs[m->nhdrs++] = (hdr){m->len, 0, 0, 0};
        m->in_value = 0;
    }
    if ((rc = arena_add(m, at, len)) != 0) return arena_fail(r, rc);
    m->hdrs[m->nhdrs - 1].name_len += len;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
    http_reader *r = p->data;
    http_msg *m = r->cur;
    if (r->state == HTTP_READER_BODY) {
        r->trailer_bytes += len;
        return r->trailer_bytes > r->lim.max_header_bytes ? fail(r, 431, "trailer fields too large") : 0;
    }
    int rc;
    hdr *h = &m->hdrs[m->nhdrs - 1];
    if (!m->in_value) {
        if ((rc = arena_add(m, "", 1)) != 0) return arena_fail(r, rc); /* ends the name */
        h->value = m->len;
        m->in_value = 1;
    }
    if ((rc = arena_add(m, at, len)) != 0) return arena_fail(r, rc);
    h->value_len += len;
    return 0;
}

/* Copies part f of the target (parsed by http_parser_parse_url) into the
 * arena as a string; *off = 0 (the empty string) when it is absent. */
static int copy_part(http_reader *r, const struct http_parser_url *u, int f, size_t *off) {
    http_msg *m = r->cur;
    *off = 0;
    if (!(u->field_set & (1 << f))) return 0;
    size_t len = u->field_data[f].len, from = m->target + u->field_data[f].off;
    int rc = arena_reserve(m, len + 1);
    if (rc) return arena_fail(r, rc);
    *off = m->len;
    memmove(m->arena + m->len, m->arena + from, len); /* the target is in the arena too */
    m->len += len;
    m->arena[m->len++] = '\0';
    m->arena[m->len] = '\0';
    return 0;
}

/* Header values without the whitespace around them (the parser strips
 * what leads, and sometimes not what trails). */
static void trim_values(http_msg *m) {
    for (size_t i = 0; i < m->nhdrs; i++) {
        hdr *h = &m->hdrs[i];
        if (!h->value) continue; /* a field without a value: "" */
        while (h->value_len &&
               (m->arena[h->value + h->value_len - 1] == ' ' || m->arena[h->value + h->value_len - 1] == '\t'))
            m->arena[h->value + --h->value_len] = '\0';
    }
}

static int on_headers_complete(http_parser *p) {
    http_reader *r = p->data;
    http_msg *m = r->cur;
    if (end_target(r) != 0) return -1;
    if (m->nhdrs > HTTP_READER_MAX_HEADERS) return fail(r, 431, "too many header fields");
    for (size_t i = 0; i < m->nhdrs; i++) /* The parser, built without HTTP_PARSER_STRICT, lets spaces through. */
        if (!http_token_ok(m->arena + m->hdrs[i].name, m->hdrs[i].name_len))
            return fail(r, 400, "invalid header field name");
    trim_values(m);
    if (p->http_major != 1) return fail(r, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    const char *method = http_method_str((enum http_method)p->method);
    size_t ml = strlen(method);
    if (ml >= sizeof(m->method)) ml = sizeof(m->method) - 1;
    memcpy(m->method, method, ml);
    m->method[ml] = '\0';
    m->is_head = p->method == HTTP_HEAD;
    m->http10 = p->http_minor == 0;
    if (p->content_length != ULLONG_MAX && p->content_length > r->lim.max_body_bytes)
        return fail(r, 413, "request body too large");
    const char *expect = http_msg_header(m, "expect");
    if (expect && http_name_eq(expect, "100-continue") && !m->http10) m->expect_continue = 1;
    r->state = HTTP_READER_BODY;
    r->wants_continue = m->expect_continue && (p->content_length > 0 || (p->flags & F_CHUNKED));
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
    http_reader *r = p->data;
    http_msg *m = r->cur;
    r->wants_continue = 0;
    if (len > r->lim.max_body_bytes - m->body_len) return fail(r, 413, "request body too large");
    if (m->body_len + len + 1 > m->body_cap) {
        size_t cap = m->body_cap ? m->body_cap : 1024;
        while (cap < m->body_len + len + 1) cap *= 2;
        if (cap > r->lim.max_body_bytes + 1) cap = r->lim.max_body_bytes + 1;
        char *b = realloc(m->body, cap);
        if (!b) return fail(r, 500, "out of memory");
        m->body = b;
        m->body_cap = cap;
    }
    memcpy(m->body + m->body_len, at, len);
    m->body_len += len;
    m->body[m->body_len] = '\0';
    return 0;
}

static int on_message_complete(http_parser *p) {
    http_reader *r = p->data;
    http_msg *m = r->cur;
    /* An upgrade (or CONNECT) is answered as a plain request; the bytes
     * after it belong to another protocol, so nothing more is read. */
    m->keep_alive = http_should_keep_alive(p) && !p->upgrade;
    r->state = HTTP_READER_DONE;
    r->wants_continue = 0;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- the reader ---- */

http_reader *http_reader_new(const http_limits *lim) {
    http_reader *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->lim = r->next_lim = *lim;
    http_parser_init(&r->p, HTTP_REQUEST);
    r->p.data = r;
    return r;
}

void http_reader_free(http_reader *r) {
    if (!r) return;
    http_msg_free(r->cur);
    free(r);
}

http_reader_state http_reader_get_state(const http_reader *r) { return r->state; }

void http_reader_set_limits(http_reader *r, const http_limits *lim) {
    r->next_lim = *lim;
    if (r->state == HTTP_READER_IDLE && r->head_bytes == 0) r->lim = *lim;
}

static void parser_error(http_reader *r) {
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    int in_head = r->state == HTTP_READER_IDLE || r->state == HTTP_READER_HEAD;
    if (e == HPE_HEADER_OVERFLOW)
        fail(r, in_head ? 431 : 400, in_head ? "request header fields too large" : "malformed chunked body");
    else if (e >= HPE_CB_message_begin && e <= HPE_CB_chunk_complete)
        fail(r, 500, "out of memory"); /* a callback failed without saying why */
    else fail(r, 400, http_errno_description(e));
    r->state = HTTP_READER_ERROR;
}

size_t http_reader_feed(http_reader *r, const char *data, size_t len) {
    size_t done = 0;
    while (done < len && r->state != HTTP_READER_DONE && r->state != HTTP_READER_ERROR && r->state != HTTP_READER_END) {
        int in_head = r->state == HTTP_READER_IDLE || r->state == HTTP_READER_HEAD;
        size_t n = len - done;
        if (in_head) {
            /* A head that is not complete within the limit needs one byte
             * more: that byte is the error. */
            size_t left = r->lim.max_header_bytes - r->head_bytes;
            if (left == 0) {
                fail(r, 431, "request header fields too large");
                r->state = HTTP_READER_ERROR;
                break;
            }
            if (n > left) n = left;
        }
        size_t got = http_parser_execute(&r->p, &settings, data + done, n);
        done += got;
        enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
        if (r->error_status) {
            r->state = HTTP_READER_ERROR;
            break;
        }
        if (e != HPE_OK && e != HPE_PAUSED) {
            parser_error(r);
            break;
        }
        if (in_head && (r->state == HTTP_READER_IDLE || r->state == HTTP_READER_HEAD)) r->head_bytes += got;
        if (got < n && r->state != HTTP_READER_DONE) {
            /* The parser stopped without a reason it reports. */
            fail(r, 400, "malformed request");
            r->state = HTTP_READER_ERROR;
            break;
        }
    }
    return done;
}

http_msg *http_reader_take(http_reader *r) {
    if (r->state != HTTP_READER_DONE) return NULL;
    http_msg *m = r->cur;
    r->cur = NULL;
    r->head_bytes = 0;
    r->lim = r->next_lim;
    r->state = m->keep_alive ? HTTP_READER_IDLE : HTTP_READER_END;
    http_parser_pause(&r->p, 0);
    return m;
}

int http_reader_error(const http_reader *r, const char **reason) {
    if (r->state != HTTP_READER_ERROR) {
        if (reason) *reason = "";
        return 0;
    }
    if (reason) *reason = r->error_reason ? r->error_reason : "";
    return r->error_status;
}

const http_msg *http_reader_current(const http_reader *r) { return r->cur; }

int http_reader_started(const http_reader *r) { return r->head_bytes > 0 || r->state != HTTP_READER_IDLE; }

int http_reader_wants_continue(http_reader *r) {
    int w = r->wants_continue && r->state == HTTP_READER_BODY;
    r->wants_continue = 0;
    return w;
}
