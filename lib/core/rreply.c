/* rreply: RESP2 reply parser. See rreply.h.
 *
 * One recursive descent runs twice: first without building, to learn that
 * a whole reply is there (so a reply arriving in many pieces costs no
 * allocation until it is complete), then building the tree. */
#include "rreply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cursor {
    const char *buf;
    size_t len, pos;
    int build;
    char *err;
    size_t errlen;
} cursor;

enum { R_OK = 1, R_MORE = 0, R_BAD = -1, R_NOMEM = -2 };

static int bad(cursor *c, const char *fmt, ...) {
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return R_BAD;
}

/* Finds the CRLF ending the line that starts at c->pos; *eol is the index
 * of its CR. */
static int line_end(cursor *c, size_t *eol) {
    const char *s = c->buf + c->pos;
    size_t n = c->len - c->pos;
    const char *cr = memchr(s, '\r', n);
    if (!cr) return n > RREPLY_MAX_BULK ? bad(c, "line too long") : R_MORE;
    size_t i = (size_t)(cr - s);
    if (i + 1 >= n) return R_MORE;
    if (s[i + 1] != '\n') return bad(c, "CR not followed by LF");
    *eol = c->pos + i;
    return R_OK;
}

/* A signed decimal of at most 18 digits, the whole of [from, to). */
static int parse_ll(const char *s, size_t n, long long *out) {
    size_t i = 0;
    int neg = 0;
    if (n && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n || n - i > 18) return -1;
    long long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static int node(cursor *c, rreply_type t, rreply **out) {
    if (!c->build) return R_OK;
    rreply *r = calloc(1, sizeof(*r));
    if (!r) return R_NOMEM;
    r->type = t;
    *out = r;
    return R_OK;
}

static int set_str(rreply *r, const char *s, size_t n) {
    r->str = malloc(n + 1);
    if (!r->str) return R_NOMEM;
    memcpy(r->str, s, n);
    r->str[n] = '\0';
    r->len = n;
    return R_OK;
}

static int parse_one(cursor *c, int depth, rreply **out) {
    if (c->pos >= c->len) return R_MORE;
    char type = c->buf[c->pos];
    size_t eol = 0;
    int rc = line_end(c, &eol);
    if (rc != R_OK) return rc;
    const char *body = c->buf + c->pos + 1;
    size_t blen = eol - c->pos - 1;
    size_t next = eol + 2;
    switch (type) {
    case '+':
    case '-': {
        c->pos = next;
        if ((rc = node(c, type == '+' ? RREPLY_STATUS : RREPLY_ERROR, out)) != R_OK) return rc;
        return c->build ? set_str(*out, body, blen) : R_OK;
    }
    case ':': {
        long long v;
        if (parse_ll(body, blen, &v) != 0) return bad(c, "bad integer reply");
        c->pos = next;
        if ((rc = node(c, RREPLY_INTEGER, out)) != R_OK) return rc;
        if (c->build) (*out)->integer = v;
        return R_OK;
    }
    case '$': {
        long long n;
        if (parse_ll(body, blen, &n) != 0 || n < -1) return bad(c, "bad bulk length");
        if (n > RREPLY_MAX_BULK) return bad(c, "bulk string of %lld bytes is over the limit", n);
        if (n == -1) {
            c->pos = next;
            return node(c, RREPLY_NIL, out);
        }
        size_t need = (size_t)n + 2;
        if (c->len - next < need) return R_MORE;
        if (c->buf[next + (size_t)n] != '\r' || c->buf[next + (size_t)n + 1] != '\n')
            return bad(c, "bulk string not followed by CRLF");
        c->pos = next + need;
        if ((rc = node(c, RREPLY_BULK, out)) != R_OK) return rc;
        return c->build ? set_str(*out, c->buf + next, (size_t)n) : R_OK;
    }
    case '*': {
        long long n;
        if (parse_ll(body, blen, &n) != 0 || n < -1) return bad(c, "bad array length");
        if (n > RREPLY_MAX_ELEMENTS) return bad(c, "array of %lld elements is over the limit", n);
        c->pos = next;
        if (n == -1) return node(c, RREPLY_NIL, out);
        if (depth >= RREPLY_MAX_DEPTH) return bad(c, "arrays nested too deep");
        if ((rc = node(c, RREPLY_ARRAY, out)) != R_OK) return rc;
        rreply *a = c->build ? *out : NULL;
        if (a && n > 0) {
            a->element = calloc((size_t)n, sizeof(*a->element));
            if (!a->element) return R_NOMEM;
        }
        for (long long i = 0; i < n; i++) {
            rreply *child = NULL;
            rc = parse_one(c, depth + 1, &child);
            if (a && child) a->element[a->elements++] = child; /* freed with a on error */
            if (rc != R_OK) return rc;
        }
        return R_OK;
    }
    default: return bad(c, "unexpected reply type byte 0x%02x", (unsigned char)type);
    }
}

int rreply_parse(const char *buf, size_t len, rreply **out, size_t *consumed, char *err, size_t errlen) {
    *out = NULL;
    *consumed = 0;
    if (err && errlen) err[0] = '\0';
    cursor c = {buf, len, 0, 0, err, errlen};
    rreply *ignored = NULL;
    int rc = parse_one(&c, 0, &ignored);
    if (rc != R_OK) return rc;
    size_t end = c.pos;
    c.pos = 0;
    c.build = 1;
    rreply *r = NULL;
    rc = parse_one(&c, 0, &r);
    if (rc != R_OK) {
        rreply_free(r);
        return rc == R_NOMEM ? R_NOMEM : R_BAD;
    }
    *out = r;
    *consumed = end;
    return R_OK;
}

void rreply_free(rreply *r) {
    if (!r) return;
    for (size_t i = 0; i < r->elements; i++) rreply_free(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}
