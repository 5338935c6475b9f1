/* resp: RESP2 request parser and RESP2/RESP3 reply writer. See resp.h for
 * the contract.
 *
 * Parser layout: one byte buffer per client. [0, start) has been consumed,
 * [start, len) is the command being parsed (or returned) and whatever
 * follows it. Argument positions are stored relative to `start` so that a
 * compaction (memmove to the front) or a realloc only has to rebase three
 * offsets; argv pointers are built from them when a command completes. All
 * progress is kept in the struct, so feeding one byte at a time never
 * rescans more than a header line. */
#include "resp.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A "*N" or "$N" line longer than this (without CRLF) is garbage: a 64-bit
 * count has at most 20 digits. Redis waits for up to 64 KiB here; a small
 * cap lets us reject junk early. */
#define RESP_HEADER_MAX 32
/* Initial buffer size, and the size above which an idle buffer is freed. */
#define RESP_BUF_MIN 4096
#define RESP_BUF_SHRINK (64 * 1024)

enum { KIND_NONE = 0, KIND_MULTIBULK, KIND_INLINE };

/* Internal results of one parse step, besides 0 (need more) and errors. */
enum { STEP_COMMAND = 1, STEP_EMPTY = 2 };

struct resp_parser {
    resp_limits lim;
    char *buf;
    size_t cap, len;
    size_t start;       /* first byte of the current command */
    size_t pos;         /* next byte to parse */
    size_t scan;        /* inline: where the search for '\n' resumes */
    int kind;           /* KIND_*, decided by the command's first byte */
    int have_cmd;       /* a command was returned and is still borrowed */
    long long mb_left;  /* multibulk: arguments still to read, -1 before *N */
    long long bulk_len; /* multibulk: length of the next argument, -1 before $N */
    size_t argc, argcap;
    size_t *argoff; /* argument offsets, relative to start */
    size_t *arglen;
    const char **argv;
    int err; /* sticky error code, 0 when fine */
    char errmsg[160];
};

void resp_limits_init(resp_limits *lim) {
    lim->max_args = RESP_DEFAULT_MAX_ARGS;
    lim->max_bulk = RESP_DEFAULT_MAX_BULK;
    lim->max_inline = RESP_DEFAULT_MAX_INLINE;
    lim->max_buffer = RESP_DEFAULT_MAX_BUFFER;
}

resp_parser *resp_parser_new(const resp_limits *lim) {
    resp_parser *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    resp_limits_init(&p->lim);
    if (lim) {
        if (lim->max_args) p->lim.max_args = lim->max_args;
        if (lim->max_bulk) p->lim.max_bulk = lim->max_bulk;
        if (lim->max_inline) p->lim.max_inline = lim->max_inline;
        if (lim->max_buffer) p->lim.max_buffer = lim->max_buffer;
    }
    /* argc is an int in resp_command. */
    if (p->lim.max_args > INT_MAX) p->lim.max_args = INT_MAX;
    p->mb_left = -1;
    p->bulk_len = -1;
    return p;
}

void resp_parser_free(resp_parser *p) {
    if (!p) return;
    free(p->buf);
    free(p->argoff);
    free(p->arglen);
    free(p->argv);
    free(p);
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
parser_fail(resp_parser *p, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
    va_end(ap);
    p->err = code;
    return code;
}

const char *resp_parser_error(const resp_parser *p) { return p->err ? p->errmsg : ""; }

/* Forgets the per-command state; the next command starts at `start`. */
static void parser_reset_command(resp_parser *p) {
    p->kind = KIND_NONE;
    p->mb_left = -1;
    p->bulk_len = -1;
    p->argc = 0;
    p->pos = p->scan = p->start;
}

/* Drops the command returned last (its bytes end at pos) and, when nothing
 * is buffered any more, rewinds the buffer and frees it if it grew large. */
static void parser_consume(resp_parser *p) {
    if (p->have_cmd) {
        p->have_cmd = 0;
        p->start = p->pos;
        parser_reset_command(p);
    }
    if (p->start == p->len && p->kind == KIND_NONE) {
        p->start = p->len = p->pos = p->scan = 0;
        if (p->cap > RESP_BUF_SHRINK) {
            free(p->buf);
            p->buf = NULL;
            p->cap = 0;
        }
    }
}

size_t resp_parser_pending(const resp_parser *p) { return p->have_cmd ? p->len - p->pos : p->len - p->start; }

/* Makes room for `want` more bytes after len. Moves the buffered bytes to
 * the front first when that is enough. */
static int parser_make_room(resp_parser *p, size_t want) {
    if (p->cap - p->len >= want) return 0;
    if (p->start > 0) {
        size_t n = p->len - p->start;
        memmove(p->buf, p->buf + p->start, n);
        p->pos -= p->start;
        p->scan -= p->start;
        p->len = n;
        p->start = 0;
        if (p->cap - p->len >= want) return 0;
    }
    if (want > SIZE_MAX / 2 - p->len) return parser_fail(p, RESP_ENOMEM, "out of memory");
    size_t need = p->len + want;
    size_t ncap = p->cap ? p->cap : RESP_BUF_MIN;
    while (ncap < need) ncap *= 2;
    char *nb = realloc(p->buf, ncap);
    if (!nb) return parser_fail(p, RESP_ENOMEM, "out of memory");
    p->buf = nb;
    p->cap = ncap;
    return 0;
}

static int parser_over_limit(resp_parser *p) {
    return parser_fail(p, RESP_ETOOBIG, "Protocol error: request buffer exceeds the limit of %zu bytes",
                       p->lim.max_buffer);
}

int resp_parser_feed(resp_parser *p, const void *data, size_t len) {
    if (p->err) return p->err;
    parser_consume(p);
    if (len == 0) return 0;
    if (len > p->lim.max_buffer - (p->len - p->start)) return parser_over_limit(p);
    int rc = parser_make_room(p, len);
    if (rc) return rc;
    memcpy(p->buf + p->len, data, len);
    p->len += len;
    return 0;
}

int resp_parser_prepare(resp_parser *p, size_t suggested, char **buf, size_t *avail) {
    if (p->err) return p->err;
    parser_consume(p);
    size_t used = p->len - p->start;
    /* One byte beyond the limit, so that commit() can tell "over". */
    size_t allowed = p->lim.max_buffer - used + 1;
    size_t want = suggested ? suggested : RESP_BUF_MIN;
    if (want > allowed) want = allowed;
    int rc = parser_make_room(p, want);
    if (rc) return rc;
    size_t room = p->cap - p->len;
    *buf = p->buf + p->len;
    *avail = room < allowed ? room : allowed;
    return 0;
}

int resp_parser_commit(resp_parser *p, size_t n) {
    if (p->err) return p->err;
    if (n > p->cap - p->len) n = p->cap - p->len; /* caller bug; stay in bounds */
    p->len += n;
    if (p->len - p->start > p->lim.max_buffer) return parser_over_limit(p);
    return 0;
}

/* Redis' string2ll rules: optional '-', no '+', no spaces, no leading zero
 * (except "0" itself), no overflow. Returns 1 when s[0..n) is such a number. */
static int parse_ll(const char *s, size_t n, long long *out) {
    size_t i = 0;
    int neg = 0;
    unsigned long long v = 0;
    if (n == 0) return 0;
    if (s[0] == '-') {
        neg = 1;
        if (++i == n) return 0;
    }
    if (s[i] == '0') {
        if (n - i != 1 || neg) return 0;
        *out = 0;
        return 1;
    }
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1) return 0;
        *out = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX) return 0;
        *out = (long long)v;
    }
    return 1;
}

/* Finds the CRLF that ends a header line starting at `from`. Returns 1 with
 * *cr at the '\r', 0 when more bytes are needed, or an error. */
static int parser_header_line(resp_parser *p, size_t from, size_t *cr, const char *what) {
    size_t avail = p->len - from;
    size_t lim = avail < RESP_HEADER_MAX + 1 ? avail : RESP_HEADER_MAX + 1;
    const char *hit = memchr(p->buf + from, '\r', lim);
    if (!hit) {
        if (avail > RESP_HEADER_MAX)
            return parser_fail(p, RESP_EPROTO, "Protocol error: too big %s count string", what);
        return 0;
    }
    size_t at = (size_t)(hit - p->buf);
    if (at + 1 >= p->len) return 0;
    if (p->buf[at + 1] != '\n')
        return parser_fail(p, RESP_EPROTO, "Protocol error: invalid %s length", what[0] == 'm' ? "multibulk" : "bulk");
    *cr = at;
    return 1;
}

/* Grows the argument arrays to hold one more argument. */
static int parser_arg_room(resp_parser *p) {
    if (p->argc < p->argcap) return 0;
    size_t ncap = p->argcap ? p->argcap * 2 : 8;
    if (ncap > p->lim.max_args) ncap = p->lim.max_args;
    if (ncap <= p->argc) ncap = p->argc + 1;
    size_t *off = realloc(p->argoff, ncap * sizeof(*off));
    if (!off) return parser_fail(p, RESP_ENOMEM, "out of memory");
    p->argoff = off;
    size_t *len = realloc(p->arglen, ncap * sizeof(*len));
    if (!len) return parser_fail(p, RESP_ENOMEM, "out of memory");
    p->arglen = len;
    const char **argv = realloc(p->argv, ncap * sizeof(*argv));
    if (!argv) return parser_fail(p, RESP_ENOMEM, "out of memory");
    p->argv = argv;
    p->argcap = ncap;
    return 0;
}

static void parser_push_arg(resp_parser *p, size_t abs_off, size_t len) {
    p->argoff[p->argc] = abs_off - p->start;
    p->arglen[p->argc] = len;
    p->argc++;
}

static const char *printable_char(char c, char out[8]) {
    unsigned char u = (unsigned char)c;
    if (u >= 0x20 && u < 0x7f) {
        out[0] = c;
        out[1] = '\0';
    } else {
        snprintf(out, 8, "\\x%02x", u);
    }
    return out;
}

static int parse_multibulk(resp_parser *p) {
    size_t cr;
    int rc;
    long long n;
    if (p->mb_left < 0) {
        rc = parser_header_line(p, p->start, &cr, "mbulk");
        if (rc <= 0) return rc;
        if (!parse_ll(p->buf + p->start + 1, cr - p->start - 1, &n))
            return parser_fail(p, RESP_EPROTO, "Protocol error: invalid multibulk length");
        p->pos = cr + 2;
        if (n <= 0) return STEP_EMPTY; /* Redis ignores *0 and *-1 */
        if ((unsigned long long)n > p->lim.max_args)
            return parser_fail(p, RESP_ETOOBIG, "Protocol error: invalid multibulk length %lld (limit %zu)", n,
                               p->lim.max_args);
        p->mb_left = n;
        p->argc = 0;
        p->bulk_len = -1;
    }
    while (p->mb_left > 0) {
        if (p->bulk_len < 0) {
            if (p->pos >= p->len) return 0;
            if (p->buf[p->pos] != '$') {
                char tmp[8];
                return parser_fail(p, RESP_EPROTO, "Protocol error: expected '$', got '%s'",
                                   printable_char(p->buf[p->pos], tmp));
            }
            rc = parser_header_line(p, p->pos, &cr, "bulk");
            if (rc <= 0) return rc;
            if (!parse_ll(p->buf + p->pos + 1, cr - p->pos - 1, &n) || n < 0)
                return parser_fail(p, RESP_EPROTO, "Protocol error: invalid bulk length");
            if ((unsigned long long)n > p->lim.max_bulk)
                return parser_fail(p, RESP_ETOOBIG, "Protocol error: invalid bulk length %lld (limit %zu)", n,
                                   p->lim.max_bulk);
            /* The whole command has to fit in the buffer: say so now rather
             * than after the client has sent megabytes. */
            size_t sofar = cr + 2 - p->start;
            if ((size_t)n + 2 > p->lim.max_buffer || sofar > p->lim.max_buffer - ((size_t)n + 2))
                return parser_fail(p, RESP_ETOOBIG,
                                   "Protocol error: invalid bulk length %lld (request buffer limit %zu)", n,
                                   p->lim.max_buffer);
            rc = parser_arg_room(p);
            if (rc) return rc;
            p->pos = cr + 2;
            p->bulk_len = n;
        }
        size_t need = (size_t)p->bulk_len + 2;
        if (p->len - p->pos < need) return 0;
        size_t end = p->pos + (size_t)p->bulk_len;
        if (p->buf[end] != '\r' || p->buf[end + 1] != '\n')
            return parser_fail(p, RESP_EPROTO, "Protocol error: expected CRLF after bulk data");
        parser_push_arg(p, p->pos, (size_t)p->bulk_len);
        p->buf[end] = '\0';
        p->pos = end + 2;
        p->mb_left--;
        p->bulk_len = -1;
    }
    return STEP_COMMAND;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int parser_unbalanced(resp_parser *p) {
    return parser_fail(p, RESP_EPROTO, "Protocol error: unbalanced quotes in request");
}

/* Splits the line [s, e) into arguments in place, with the quoting rules of
 * Redis' sdssplitargs(): "..." with \n \r \t \b \a \xHH escapes, '...' with
 * \' only, and a closing quote must be followed by a space or the end. The
 * decoded text is never longer than its source, so it is written over it
 * and NUL-terminated; buf[e] exists (it is the line's '\r' or '\n'). */
static int split_inline(resp_parser *p, size_t s, size_t e) {
    char *b = p->buf;
    size_t r = s;
    for (;;) {
        while (r < e && is_space(b[r])) r++;
        if (r >= e) return 0;
        if (p->argc >= p->lim.max_args)
            return parser_fail(p, RESP_ETOOBIG, "Protocol error: too many arguments in inline request (limit %zu)",
                               p->lim.max_args);
        int rc = parser_arg_room(p);
        if (rc) return rc;
        size_t w = r, arg = r;
        int inq = 0, insq = 0, done = 0;
        while (!done) {
            if (inq) {
                if (r >= e) return parser_unbalanced(p);
                if (b[r] == '\\' && r + 3 < e && b[r + 1] == 'x' && hex_val(b[r + 2]) >= 0 && hex_val(b[r + 3]) >= 0) {
                    b[w++] = (char)(hex_val(b[r + 2]) * 16 + hex_val(b[r + 3]));
                    r += 4;
                } else if (b[r] == '\\' && r + 1 < e) {
                    char c;
                    switch (b[r + 1]) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: c = b[r + 1]; break;
                    }
                    b[w++] = c;
                    r += 2;
                } else if (b[r] == '"') {
                    if (r + 1 < e && !is_space(b[r + 1])) return parser_unbalanced(p);
                    r++;
                    done = 1;
                } else {
                    b[w++] = b[r++];
                }
            } else if (insq) {
                if (r >= e) return parser_unbalanced(p);
                if (b[r] == '\\' && r + 1 < e && b[r + 1] == '\'') {
                    b[w++] = '\'';
                    r += 2;
                } else if (b[r] == '\'') {
                    if (r + 1 < e && !is_space(b[r + 1])) return parser_unbalanced(p);
                    r++;
                    done = 1;
                } else {
                    b[w++] = b[r++];
                }
            } else if (r >= e) {
                done = 1;
            } else {
                switch (b[r]) {
                case ' ':
                case '\n':
                case '\r':
                case '\t':
                case '\0':
                    r++; /* consume the separator before the NUL goes in */
                    done = 1;
                    break;
                case '"':
                    inq = 1;
                    r++;
                    break;
                case '\'':
                    insq = 1;
                    r++;
                    break;
                default: b[w++] = b[r++]; break;
                }
            }
        }
        b[w] = '\0';
        parser_push_arg(p, arg, w - arg);
    }
}

static int parse_inline(resp_parser *p) {
    const char *nl = memchr(p->buf + p->scan, '\n', p->len - p->scan);
    if (!nl) {
        p->scan = p->len;
        if (p->len - p->start > p->lim.max_inline)
            return parser_fail(p, RESP_ETOOBIG, "Protocol error: too big inline request");
        return 0;
    }
    size_t eol = (size_t)(nl - p->buf);
    if (eol - p->start > p->lim.max_inline)
        return parser_fail(p, RESP_ETOOBIG, "Protocol error: too big inline request");
    size_t end = eol;
    if (end > p->start && p->buf[end - 1] == '\r') end--;
    p->argc = 0;
    int rc = split_inline(p, p->start, end);
    if (rc) return rc;
    p->pos = eol + 1;
    return p->argc ? STEP_COMMAND : STEP_EMPTY;
}

int resp_parser_next(resp_parser *p, resp_command *cmd) {
    if (p->err) return p->err;
    parser_consume(p);
    for (;;) {
        if (p->kind == KIND_NONE) {
            if (p->start >= p->len) return 0;
            p->kind = p->buf[p->start] == '*' ? KIND_MULTIBULK : KIND_INLINE;
            p->pos = p->scan = p->start;
        }
        int rc = p->kind == KIND_INLINE ? parse_inline(p) : parse_multibulk(p);
        if (rc == STEP_EMPTY) {
            p->start = p->pos;
            parser_reset_command(p);
            parser_consume(p);
            continue;
        }
        if (rc != STEP_COMMAND) return rc;
        for (size_t i = 0; i < p->argc; i++) p->argv[i] = p->buf + p->start + p->argoff[i];
        p->have_cmd = 1;
        cmd->argc = (int)p->argc;
        cmd->argv = p->argv;
        cmd->argvlen = p->arglen;
        return 1;
    }
}

/* ---- reply writer ---- */

/* The wire forms that depend on the protocol, indexed by is3(): the RESP2
 * one is what Redis sends a RESP2 client for the same reply. Every
 * resp_add_* that differs between the versions looks its form up here. */
enum { NULL_BULK, NULL_ARRAY };
static const char *const null_wire[][2] = {
    [NULL_BULK] = {"$-1\r\n", "_\r\n"},
    [NULL_ARRAY] = {"*-1\r\n", "_\r\n"},
};

/* Aggregates: the type byte, and how many elements each counts for in the
 * header (a RESP2 map is a flat array of keys and values). */
enum { AGG_ARRAY, AGG_MAP, AGG_SET };
static const struct {
    char type[2];
    size_t per[2];
} aggregate_wire[] = {
    [AGG_ARRAY] = {{'*', '*'}, {1, 1}},
    [AGG_MAP] = {{'*', '%'}, {2, 1}},
    [AGG_SET] = {{'*', '~'}, {1, 1}},
};

static int is3(const resp_buf *b) { return b->proto == RESP_PROTO_3; }

void resp_buf_init(resp_buf *b) {
    b->data = NULL;
    b->len = b->cap = 0;
    b->proto = 0;
}

void resp_buf_free(resp_buf *b) {
    if (!b) return;
    free(b->data);
    resp_buf_init(b);
}

void resp_buf_reset(resp_buf *b) { b->len = 0; }

void resp_buf_consume(resp_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

char *resp_buf_detach(resp_buf *b, size_t *len) {
    char *d = b->data;
    int proto = b->proto;
    if (len) *len = b->len;
    resp_buf_init(b);
    b->proto = proto;
    return d;
}

/* Ensures room for `extra` more bytes, or fails leaving b untouched. */
static int buf_reserve(resp_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) return RESP_ENOMEM;
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) {
            ncap = need;
            break;
        }
        ncap *= 2;
    }
    char *nd = realloc(b->data, ncap);
    if (!nd) return RESP_ENOMEM;
    b->data = nd;
    b->cap = ncap;
    return 0;
}

int resp_buf_append(resp_buf *b, const void *data, size_t len) {
    if (len == 0) return 0;
    int rc = buf_reserve(b, len);
    if (rc) return rc;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

/* Writes s with CR and LF replaced by spaces. Room must be reserved. */
static void buf_put_line_safe(resp_buf *b, const char *s, size_t n) {
    char *d = b->data + b->len;
    for (size_t i = 0; i < n; i++) d[i] = (s[i] == '\r' || s[i] == '\n') ? ' ' : s[i];
    b->len += n;
}

static void buf_put(resp_buf *b, const void *s, size_t n) {
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
}

int resp_add_simple(resp_buf *b, const char *s) {
    size_t n = strlen(s);
    if (n > SIZE_MAX - 3) return RESP_ENOMEM;
    int rc = buf_reserve(b, n + 3);
    if (rc) return rc;
    buf_put(b, "+", 1);
    buf_put_line_safe(b, s, n);
    buf_put(b, "\r\n", 2);
    return 0;
}

int resp_add_error(resp_buf *b, const char *msg) {
    size_t n = strlen(msg);
    int own = msg[0] == '-';
    if (n > SIZE_MAX - 8) return RESP_ENOMEM;
    int rc = buf_reserve(b, n + (own ? 2 : 7));
    if (rc) return rc;
    if (!own) buf_put(b, "-ERR ", 5);
    buf_put_line_safe(b, msg, n);
    buf_put(b, "\r\n", 2);
    return 0;
}

int resp_add_errorf(resp_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    int rc;
    if (n < 0) {
        rc = resp_add_error(b, "formatting error");
    } else if ((size_t)n < sizeof(small)) {
        rc = resp_add_error(b, small);
    } else {
        char *big = malloc((size_t)n + 1);
        if (!big) {
            va_end(ap2);
            return RESP_ENOMEM;
        }
        vsnprintf(big, (size_t)n + 1, fmt, ap2);
        rc = resp_add_error(b, big);
        free(big);
    }
    va_end(ap2);
    return rc;
}

/* Appends a type byte, a decimal number and CRLF, e.g. ":-12\r\n". */
static int buf_put_header(resp_buf *b, char type, int neg, unsigned long long v) {
    char tmp[32];
    size_t i = sizeof(tmp);
    tmp[--i] = '\n';
    tmp[--i] = '\r';
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (neg) tmp[--i] = '-';
    tmp[--i] = type;
    return resp_buf_append(b, tmp + i, sizeof(tmp) - i);
}

static size_t header_size(unsigned long long v) {
    size_t n = 3; /* type byte and CRLF */
    do {
        n++;
        v /= 10;
    } while (v);
    return n;
}

int resp_add_integer(resp_buf *b, long long n) {
    unsigned long long v = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    return buf_put_header(b, ':', n < 0, v);
}

int resp_add_bulk(resp_buf *b, const void *data, size_t len) {
    size_t h = header_size(len);
    if (len > SIZE_MAX - h - 2) return RESP_ENOMEM;
    int rc = buf_reserve(b, h + len + 2);
    if (rc) return rc;
    buf_put_header(b, '$', 0, len); /* cannot fail: room is reserved */
    buf_put(b, data, len);
    buf_put(b, "\r\n", 2);
    return 0;
}

int resp_add_bulk_str(resp_buf *b, const char *s) { return s ? resp_add_bulk(b, s, strlen(s)) : resp_add_null(b); }

int resp_add_bulkf(resp_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return -EINVAL;
    }
    size_t len = (size_t)n;
    size_t h = header_size(len);
    int rc = buf_reserve(b, h + len + 2 + 1); /* +1: vsnprintf's NUL */
    if (rc) {
        va_end(ap2);
        return rc;
    }
    buf_put_header(b, '$', 0, len);
    vsnprintf(b->data + b->len, len + 1, fmt, ap2);
    va_end(ap2);
    b->len += len;
    buf_put(b, "\r\n", 2);
    return 0;
}

static int add_null_form(resp_buf *b, int kind) {
    const char *w = null_wire[kind][is3(b)];
    return resp_buf_append(b, w, strlen(w));
}

int resp_add_null(resp_buf *b) { return add_null_form(b, NULL_BULK); }

int resp_add_null_array(resp_buf *b) { return add_null_form(b, NULL_ARRAY); }

static int add_aggregate(resp_buf *b, int kind, size_t n) {
    size_t per = aggregate_wire[kind].per[is3(b)];
    if (n > SIZE_MAX / per) return RESP_ENOMEM;
    return buf_put_header(b, aggregate_wire[kind].type[is3(b)], 0, n * per);
}

int resp_add_array(resp_buf *b, size_t n) { return add_aggregate(b, AGG_ARRAY, n); }

int resp_add_map(resp_buf *b, size_t n) { return add_aggregate(b, AGG_MAP, n); }

int resp_add_set(resp_buf *b, size_t n) { return add_aggregate(b, AGG_SET, n); }

int resp_add_verbatim(resp_buf *b, const char *fmt, const void *data, size_t len) {
    if (!is3(b)) return resp_add_bulk(b, data, len);
    /* The format is exactly three bytes and a colon: a client strips 4. */
    char prefix[4] = {' ', ' ', ' ', ':'};
    for (size_t i = 0; i < 3 && fmt[i]; i++) prefix[i] = fmt[i];
    if (len > SIZE_MAX - 64) return RESP_ENOMEM;
    size_t h = header_size(len + 4);
    int rc = buf_reserve(b, h + 4 + len + 2);
    if (rc) return rc;
    buf_put_header(b, '=', 0, len + 4); /* cannot fail: room is reserved */
    buf_put(b, prefix, 4);
    buf_put(b, data, len);
    buf_put(b, "\r\n", 2);
    return 0;
}

int resp_add_bulk_array(resp_buf *b, const char *const *items, const size_t *lens, size_t n) {
    const char *null = null_wire[NULL_BULK][is3(b)];
    size_t total = header_size(n);
    for (size_t i = 0; i < n; i++) {
        size_t add;
        if (!items[i]) {
            add = strlen(null);
        } else {
            size_t l = lens ? lens[i] : strlen(items[i]);
            if (l > SIZE_MAX / 2) return RESP_ENOMEM;
            add = header_size(l) + l + 2;
        }
        if (add > SIZE_MAX - total) return RESP_ENOMEM;
        total += add;
    }
    int rc = buf_reserve(b, total);
    if (rc) return rc;
    buf_put_header(b, '*', 0, n);
    for (size_t i = 0; i < n; i++) {
        if (!items[i]) {
            buf_put(b, null, strlen(null));
        } else {
            size_t l = lens ? lens[i] : strlen(items[i]);
            buf_put_header(b, '$', 0, l);
            buf_put(b, items[i], l);
            buf_put(b, "\r\n", 2);
        }
    }
    return 0;
}

int resp_buf_vprintf(resp_buf *b, unsigned flags, const char *fmt, va_list ap) {
    char small[514];
    int n = vsnprintf(small, 512, fmt, ap);
    if (n < 0) return 0;
    if (n > 511) n = 511;
    if (flags & RESP_PRINTF_LINE) {
        for (int i = 0; i < n; i++)
            if (small[i] == '\r' || small[i] == '\n') small[i] = ' ';
        small[n++] = '\r';
        small[n++] = '\n';
    }
    return resp_buf_append(b, small, (size_t)n);
}
