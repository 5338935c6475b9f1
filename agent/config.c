/* config: table-driven YAML configuration. See config.h for the contract.
 *
 * How it works: libyaml's document API loads the file into a node tree
 * (with line marks). A schema is a table of rows keyed by dotted paths
 * relative to one struct ("redis.url" in the root, "burst.requests" in a
 * deployment). walk_map() matches each mapping key against the rows: an
 * exact match is a value to parse, a prefix of some rows is a nested
 * mapping, anything else is an unknown key. A CT_LIST row ("deployments")
 * holds named entries, each filled from its own schema. Defaults are YAML
 * text parsed by the same code as the file, so a default can never bypass
 * validation. After a struct is filled, its schema's finish hook applies
 * cross-field rules and derived defaults. */
#define _POSIX_C_SOURCE 200809L

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <yaml.h>

#define CFG_MAX_ROWS 64              /* rows per schema (one bit each) */
#define CFG_PATH_MAX 512             /* longest key path in messages */
#define CFG_FILE_MAX (16 << 20)      /* refuse larger config files */
#define CFG_SECRET_MAX 4096          /* refuse larger password files */
#define CFG_INT_SANE 1e9             /* maxima at or above this are sanity caps */

typedef enum cfg_type {
    CT_INT,    /* long long, decimal */
    CT_BYTES,  /* long long, decimal with an optional k/kb/m/mb/g/gb suffix */
    CT_DOUBLE, /* double */
    CT_BOOL,   /* int, 0 or 1 */
    CT_ENUM,   /* int, index into names */
    CT_MODE,   /* int, octal permission bits */
    CT_STR,    /* char *, never NULL */
    CT_LIST,   /* array of named entries of a sub-schema, plus a count */
    CT_STRS    /* char **, a YAML list of strings (each checked), plus a count */
} cfg_type;

#define F_REQUIRED 1u /* must be given */
#define F_DERIVED  2u /* no static default: the finish hook computes it */
#define F_MIN_OPEN 4u /* min is exclusive (numbers) */
#define F_MAX_OPEN 8u /* max is exclusive (numbers) */
#define F_NONEMPTY 16u /* strings: "" is not allowed */

typedef struct cfg_ctx cfg_ctx;
typedef struct cfg_entity cfg_entity;
typedef struct cfg_schema cfg_schema;

/* Checks a string value; on failure writes "must be ..." into why. */
typedef int (*cfg_check_fn)(const char *s, char *why, size_t whylen);

typedef struct cfg_row {
    const char *key;          /* dotted path within the schema's struct */
    cfg_type type;
    size_t off;               /* field offset */
    const char *def;          /* default as YAML text, NULL: zero / "" */
    double min, max;          /* numbers */
    unsigned flags;
    const char *const *names; /* CT_ENUM, NULL-terminated */
    cfg_check_fn check;       /* CT_STR, optional */
    const cfg_schema *sub;    /* CT_LIST */
    size_t count_off;         /* CT_LIST: offset of the size_t count */
    const char *doc;
} cfg_row;

struct cfg_schema {
    const char *what;  /* "deployment", for messages */
    const cfg_row *rows;
    size_t nrows;
    size_t size;       /* CT_LIST element size */
    size_t name_off;   /* CT_LIST: char *name */
    size_t line_off;   /* CT_LIST: int line */
    int (*check_name)(const char *name, size_t len, char *why, size_t whylen);
    int (*finish)(cfg_ctx *ctx, cfg_entity *ent);
};

/* One struct being filled: the root config or one named entry. */
struct cfg_entity {
    const cfg_schema *schema;
    void *base;
    int line;                 /* where the entity starts */
    uint64_t seen;            /* rows given in the file */
    int lines[CFG_MAX_ROWS];  /* the line of each given row's value */
};

struct cfg_ctx {
    const char *name;         /* file name for messages */
    const char *basedir;      /* for relative paths, NULL: cwd */
    yaml_document_t *doc;
    char *err;
    size_t errlen;
    char path[CFG_PATH_MAX];  /* key path of the current position */
    size_t pathlen;
};

/* ---- messages ---- */

#if defined(__GNUC__)
#define CFG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CFG_PRINTF(a, b)
#endif

static void cfg_vfail(cfg_ctx *ctx, int line, const char *key, const char *fmt, va_list ap) {
    if (!ctx->err || ctx->errlen == 0) return;
    int n;
    if (line <= 0)
        n = snprintf(ctx->err, ctx->errlen, "%s: ", ctx->name);
    else if (key)
        n = snprintf(ctx->err, ctx->errlen, "%s:%d: key '%s': ", ctx->name, line, key);
    else
        n = snprintf(ctx->err, ctx->errlen, "%s:%d: ", ctx->name, line);
    if (n < 0) n = 0;
    if ((size_t)n < ctx->errlen) vsnprintf(ctx->err + n, ctx->errlen - (size_t)n, fmt, ap);
}

/* An error about the key at the current path. Always returns -1. */
CFG_PRINTF(3, 4)
static int cfg_fail(cfg_ctx *ctx, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cfg_vfail(ctx, line, ctx->pathlen ? ctx->path : NULL, fmt, ap);
    va_end(ap);
    return -1;
}

/* An error that is about no key (syntax, I/O). Always returns -1. */
CFG_PRINTF(3, 4)
static int cfg_fail_plain(cfg_ctx *ctx, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cfg_vfail(ctx, line, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends ".seg" (or "seg" at the top) to the path, escaping bytes that
 * are not printable; returns the previous length for cfg_path_pop(). */
static size_t cfg_path_push(cfg_ctx *ctx, const char *seg, size_t len) {
    size_t old = ctx->pathlen, n = old;
    const size_t room = sizeof(ctx->path) - 8; /* keep space for "..." */
    if (n && n < room) ctx->path[n++] = '.';
    for (size_t i = 0; i < len && n < room; i++) {
        unsigned char c = (unsigned char)seg[i];
        if (c >= 0x20 && c < 0x7f && c != '\'') {
            ctx->path[n++] = (char)c;
        } else {
            n += (size_t)snprintf(ctx->path + n, sizeof(ctx->path) - n, "\\x%02x", c);
        }
    }
    if (n >= room) {
        memcpy(ctx->path + room, "...", 4);
        n = room + 3;
    }
    ctx->path[n] = '\0';
    ctx->pathlen = n;
    return old;
}

static void cfg_path_pop(cfg_ctx *ctx, size_t old) {
    ctx->pathlen = old;
    ctx->path[old] = '\0';
}

/* Quotes a value for a message: "text" with escapes, cut after 40 bytes. */
static void cfg_quote(const char *s, size_t len, char *out, size_t outlen) {
    size_t n = 0;
    if (outlen < 16) {
        if (outlen) out[0] = '\0';
        return;
    }
    out[n++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40 || n + 8 >= outlen) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            out[n++] = (char)c;
        } else {
            n += (size_t)snprintf(out + n, outlen - n, "\\x%02x", c);
        }
    }
    out[n++] = '"';
    out[n] = '\0';
}

static int node_line(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

static const char *node_kind(const yaml_node_t *n) {
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a scalar";
}

/* A plain empty scalar, "~" or "null": the value was left out. */
static int node_is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *s = (const char *)n->data.scalar.value;
    size_t len = n->data.scalar.length;
    return len == 0 || (len == 1 && s[0] == '~') || (len == 4 && (!strcmp(s, "null") || !strcmp(s, "Null") ||
                                                                   !strcmp(s, "NULL")));
}

/* ---- value parsers ---- */

#define FIELD(base, off, type) ((type *)(void *)((char *)(base) + (off)))

static void fmt_num(char *out, size_t n, double v) {
    if (fabs(v) < 1e17 && v == floor(v))
        snprintf(out, n, "%.0f", v);
    else
        snprintf(out, n, "%g", v);
}

/* "a positive integer", "an integer between 1 and 60000", ... */
static void describe_int(const cfg_row *r, char *out, size_t n) {
    char lo[32], hi[32];
    fmt_num(lo, sizeof(lo), r->min);
    fmt_num(hi, sizeof(hi), r->max);
    const char *what = r->type == CT_BYTES ? "a size in bytes" : "an integer";
    if (r->max >= CFG_INT_SANE && r->type == CT_INT) {
        if (r->min == 1)
            snprintf(out, n, "a positive integer");
        else if (r->min == 0)
            snprintf(out, n, "a non-negative integer");
        else
            snprintf(out, n, "%s >= %s", what, lo);
    } else {
        snprintf(out, n, "%s between %s and %s", what, lo, hi);
    }
}

/* "(0, 1]", "> 0", ... */
static void describe_range(const cfg_row *r, char *out, size_t n) {
    char lo[32], hi[32];
    fmt_num(lo, sizeof(lo), r->min);
    fmt_num(hi, sizeof(hi), r->max);
    if (isinf(r->max))
        snprintf(out, n, "%s %s", (r->flags & F_MIN_OPEN) ? ">" : ">=", lo);
    else
        snprintf(out, n, "%c%s, %s%c", (r->flags & F_MIN_OPEN) ? '(' : '[', lo, hi,
                 (r->flags & F_MAX_OPEN) ? ')' : ']');
}

/* What a row accepts, as in "must be <this>". */
static void describe_row(const cfg_row *r, char *out, size_t n) {
    char range[64];
    switch (r->type) {
    case CT_INT:
    case CT_BYTES: describe_int(r, out, n); return;
    case CT_DOUBLE:
        describe_range(r, range, sizeof(range));
        snprintf(out, n, isinf(r->max) ? "a number %s" : "a number in %s", range);
        return;
    case CT_BOOL: snprintf(out, n, "true or false"); return;
    case CT_MODE: snprintf(out, n, "an octal file mode from \"0000\" to \"0777\""); return;
    case CT_STR: snprintf(out, n, "a string"); return;
    case CT_LIST: snprintf(out, n, "a mapping"); return;
    case CT_STRS: snprintf(out, n, "a list of strings"); return;
    case CT_ENUM: {
        size_t k = (size_t)snprintf(out, n, "one of ");
        for (int i = 0; r->names[i] && k < n; i++)
            k += (size_t)snprintf(out + k, n - k, "%s%s", i ? ", " : "", r->names[i]);
        return;
    }
    }
}

/* Decimal digits with an optional '-': 1 ok, 0 syntax error, -1 overflow. */
static int parse_decimal(const char *s, size_t len, long long *out) {
    size_t i = 0;
    int neg = 0;
    unsigned long long v = 0;
    if (len > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == len) return 0;
    int overflow = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > ((unsigned long long)LLONG_MAX - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
    }
    if (overflow) return -1;
    *out = neg ? -(long long)v : (long long)v;
    return 1;
}

static int ci_equal(const char *a, size_t alen, const char *b) {
    size_t blen = strlen(b);
    if (alen != blen) return 0;
    for (size_t i = 0; i < alen; i++) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
        if (x != y) return 0;
    }
    return 1;
}

static int set_int(const cfg_row *r, void *base, const char *s, size_t len, const char *gotq, char *why,
                   size_t whylen) {
    long long v = 0, mult = 1;
    char desc[96];
    describe_int(r, desc, sizeof(desc));
    size_t digits = len;
    if (r->type == CT_BYTES) {
        static const struct { const char *sfx; long long mult; } units[] = {
            {"gb", 1LL << 30}, {"g", 1LL << 30}, {"mb", 1LL << 20}, {"m", 1LL << 20},
            {"kb", 1LL << 10}, {"k", 1LL << 10}, {"b", 1},
        };
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t sl = strlen(units[i].sfx);
            if (len > sl && ci_equal(s + len - sl, sl, units[i].sfx)) {
                digits = len - sl;
                mult = units[i].mult;
                break;
            }
        }
    }
    int ok = parse_decimal(s, digits, &v);
    if (ok == 0 || (ok == 1 && v < 0 && r->min >= 0)) {
        snprintf(why, whylen, "must be %s, got %s", desc, gotq);
        return -1;
    }
    if (ok < 0 || v > LLONG_MAX / mult || v < LLONG_MIN / mult) {
        snprintf(why, whylen, "must be %s, got %s (out of range)", desc, gotq);
        return -1;
    }
    v *= mult;
    if ((double)v < r->min || (double)v > r->max) {
        char hi[32];
        fmt_num(hi, sizeof(hi), r->max);
        if (r->max >= CFG_INT_SANE && r->type == CT_INT && (double)v > r->max)
            snprintf(why, whylen, "must be at most %s, got %s", hi, gotq);
        else
            snprintf(why, whylen, "must be %s, got %s", desc, gotq);
        return -1;
    }
    *FIELD(base, r->off, long long) = v;
    return 0;
}

static int set_double(const cfg_row *r, void *base, const char *s, size_t len, const char *gotq, char *why,
                      size_t whylen) {
    char desc[96], buf[64];
    describe_row(r, desc, sizeof(desc));
    int digit = 0, bad = len == 0 || len >= sizeof(buf);
    for (size_t i = 0; i < len && !bad; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') digit = 1;
        else if (c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') bad = 1;
    }
    double v = 0;
    if (!bad && digit) {
        memcpy(buf, s, len);
        buf[len] = '\0';
        char *end;
        errno = 0;
        v = strtod(buf, &end);
        bad = end != buf + len || errno == ERANGE || !isfinite(v);
    } else {
        bad = 1;
    }
    if (bad || v < r->min || v > r->max || ((r->flags & F_MIN_OPEN) && v == r->min) ||
        ((r->flags & F_MAX_OPEN) && v == r->max)) {
        snprintf(why, whylen, "must be %s, got %s", desc, gotq);
        return -1;
    }
    *FIELD(base, r->off, double) = v;
    return 0;
}

static int set_bool(const cfg_row *r, void *base, const char *s, size_t len, const char *gotq, char *why,
                    size_t whylen) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (size_t i = 0; i < 3; i++) {
        if (ci_equal(s, len, yes[i])) {
            *FIELD(base, r->off, int) = 1;
            return 0;
        }
        if (ci_equal(s, len, no[i])) {
            *FIELD(base, r->off, int) = 0;
            return 0;
        }
    }
    snprintf(why, whylen, "must be true or false, got %s", gotq);
    return -1;
}

static int set_enum(const cfg_row *r, void *base, const char *s, size_t len, const char *gotq, char *why,
                    size_t whylen) {
    for (int i = 0; r->names[i]; i++) {
        if (strlen(r->names[i]) == len && !memcmp(r->names[i], s, len)) {
            *FIELD(base, r->off, int) = i;
            return 0;
        }
    }
    char desc[128];
    describe_row(r, desc, sizeof(desc));
    snprintf(why, whylen, "must be %s, got %s", desc, gotq);
    return -1;
}

static int set_mode(const cfg_row *r, void *base, const char *s, size_t len, const char *gotq, char *why,
                    size_t whylen) {
    unsigned v = 0;
    int bad = len == 0;
    for (size_t i = 0; i < len && !bad; i++) {
        if (s[i] < '0' || s[i] > '7' || v > 0777)
            bad = 1;
        else
            v = v * 8 + (unsigned)(s[i] - '0');
    }
    if (bad || v > 0777) {
        char desc[96];
        describe_row(r, desc, sizeof(desc));
        snprintf(why, whylen, "must be %s, got %s", desc, gotq);
        return -1;
    }
    *FIELD(base, r->off, int) = (int)v;
    return 0;
}

static int set_str(const cfg_row *r, void *base, const char *s, size_t len, const char *gotq, char *why,
                   size_t whylen) {
    if (len == 0 && (r->flags & F_NONEMPTY)) {
        snprintf(why, whylen, "must not be empty");
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            snprintf(why, whylen, "must not contain control characters, got %s", gotq);
            return -1;
        }
    }
    if (r->check && len > 0) {
        char reason[160];
        if (r->check(s, reason, sizeof(reason)) != 0) {
            snprintf(why, whylen, "%s, got %s", reason, gotq);
            return -1;
        }
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    char **field = FIELD(base, r->off, char *);
    free(*field);
    *field = copy;
    return 0;
}

/* Parses s[0..len) into the row's field. why gets the full reason. */
static int set_value(const cfg_row *r, void *base, const char *s, size_t len, char *why, size_t whylen) {
    char gotq[128];
    cfg_quote(s, len, gotq, sizeof(gotq));
    switch (r->type) {
    case CT_INT:
    case CT_BYTES: return set_int(r, base, s, len, gotq, why, whylen);
    case CT_DOUBLE: return set_double(r, base, s, len, gotq, why, whylen);
    case CT_BOOL: return set_bool(r, base, s, len, gotq, why, whylen);
    case CT_ENUM: return set_enum(r, base, s, len, gotq, why, whylen);
    case CT_MODE: return set_mode(r, base, s, len, gotq, why, whylen);
    case CT_STR: return set_str(r, base, s, len, gotq, why, whylen);
    case CT_LIST:
    case CT_STRS: break;
    }
    snprintf(why, whylen, "internal error: not a scalar key");
    return -1;
}

/* ---- string checkers ---- */

static int check_socket_path(const char *s, char *why, size_t n) {
    const size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    if (strlen(s) > max) {
        snprintf(why, n, "must be at most %zu bytes (a UNIX socket path)", max);
        return -1;
    }
    return 0;
}

/* host:port or [v6]:port with a port in 1..65535. On success *host and
 * *hostlen locate the host without brackets and *port is set. */
static int split_hostport(const char *s, const char **host, size_t *hostlen, int *port) {
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close == s + 1 || close[1] != ':') return -1;
        *host = s + 1;
        *hostlen = (size_t)(close - s - 1);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s) return -1;
        for (const char *p = s; p < colon; p++)
            if (*p == ':' || *p == ' ' || *p == '/') return -1;
        *host = s;
        *hostlen = (size_t)(colon - s);
    }
    long long v;
    if (parse_decimal(colon + 1, strlen(colon + 1), &v) != 1 || v < 1 || v > 65535) return -1;
    *port = (int)v;
    return 0;
}

static int check_hostport(const char *s, char *why, size_t whylen);

/* A Redis node address: host:port, never empty. */
static int check_node_addr(const char *s, char *why, size_t whylen) {
    if (!s[0] || check_hostport(s, why, whylen) != 0) {
        snprintf(why, whylen, "must be host:port with a port in 1..65535");
        return -1;
    }
    return 0;
}

static int check_hostport(const char *s, char *why, size_t n) {
    const char *h;
    size_t hl;
    int port;
    if (split_hostport(s, &h, &hl, &port) != 0) {
        snprintf(why, n, "must be HOST:PORT with a port in 1..65535 (like 127.0.0.1:9464), or empty to disable");
        return -1;
    }
    return 0;
}

static int check_env_name(const char *s, char *why, size_t n) {
    int ok = (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_';
    for (const char *p = s; *p && ok; p++)
        ok = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
    if (!ok) {
        snprintf(why, n, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
        return -1;
    }
    return 0;
}

static int check_token(const char *s, char *why, size_t n) {
    if (strlen(s) > 128 || strpbrk(s, " ")) {
        snprintf(why, n, "must be at most 128 bytes without spaces");
        return -1;
    }
    return 0;
}

static int check_http_url(const char *s, char *why, size_t n) {
    const char *rest = NULL;
    if (!strncmp(s, "https://", 8)) rest = s + 8;
    else if (!strncmp(s, "http://", 7)) rest = s + 7;
    if (!rest || !*rest || *rest == '/' || strchr(s, ' ')) {
        snprintf(why, n, "must be an http:// or https:// URL with a host");
        return -1;
    }
    return 0;
}

/* [A-Za-z0-9._:-]{1,64}: the name becomes a Redis hash tag, so no braces. */
static int check_deployment_name(const char *s, size_t len, char *why, size_t n) {
    int ok = len >= 1 && len <= CONFIG_NAME_MAX;
    for (size_t i = 0; i < len && ok; i++) {
        char c = s[i];
        ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
             c == '_' || c == ':' || c == '-';
    }
    if (!ok) {
        snprintf(why, n, "invalid deployment name: use 1 to %d of A-Z a-z 0-9 . _ : -", CONFIG_NAME_MAX);
        return -1;
    }
    return 0;
}

/* ---- the schema ---- */

static const char *const fail_names[] = {"open", "closed", NULL};
static const char *const level_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const style_names[] = {"azure", "openai", NULL};

#define R_INT(k, st, f, d, lo, hi, fl, dc) \
    {.key = (k), .type = CT_INT, .off = offsetof(st, f), .def = (d), .min = (lo), .max = (hi), .flags = (fl), .doc = (dc)}
#define R_BYTES(k, st, f, d, lo, hi, dc) \
    {.key = (k), .type = CT_BYTES, .off = offsetof(st, f), .def = (d), .min = (lo), .max = (hi), .doc = (dc)}
#define R_NUM(k, st, f, d, lo, hi, fl, dc) \
    {.key = (k), .type = CT_DOUBLE, .off = offsetof(st, f), .def = (d), .min = (lo), .max = (hi), .flags = (fl), .doc = (dc)}
#define R_BOOL(k, st, f, d, dc) {.key = (k), .type = CT_BOOL, .off = offsetof(st, f), .def = (d), .doc = (dc)}
#define R_ENUM(k, st, f, d, nm, dc) \
    {.key = (k), .type = CT_ENUM, .off = offsetof(st, f), .def = (d), .names = (nm), .doc = (dc)}
#define R_MODE(k, st, f, d, dc) {.key = (k), .type = CT_MODE, .off = offsetof(st, f), .def = (d), .doc = (dc)}
#define R_STR(k, st, f, d, chk, dc) \
    {.key = (k), .type = CT_STR, .off = offsetof(st, f), .def = (d), .check = (chk), .doc = (dc)}
#define R_STRF(k, st, f, d, chk, fl, dc) \
    {.key = (k), .type = CT_STR, .off = offsetof(st, f), .def = (d), .check = (chk), .flags = (fl), .doc = (dc)}
#define R_STRS(k, st, f, cnt, chk, dc) \
    {.key = (k), .type = CT_STRS, .off = offsetof(st, f), .count_off = offsetof(st, cnt), .check = (chk), \
     .doc = (dc)}
#define R_LIST(k, st, f, cnt, sb, fl, dc) \
    {.key = (k), .type = CT_LIST, .off = offsetof(st, f), .count_off = offsetof(st, cnt), .sub = (sb), \
     .flags = (fl), .doc = (dc)}

typedef struct config_deployment cfg_deployment;

static int deployment_finish(cfg_ctx *ctx, cfg_entity *ent);
static int root_finish(cfg_ctx *ctx, cfg_entity *ent);

static const cfg_row deployment_rows[] = {
    R_INT("rpm", cfg_deployment, rpm, NULL, 1, 1e9, F_REQUIRED, "Requests per minute the provider allows."),
    R_INT("tpm", cfg_deployment, tpm, "0", 0, 1e12, 0, "Tokens per minute the provider allows; 0 = no token limit."),
    R_INT("burst.requests", cfg_deployment, burst.requests, NULL, 1, 1e9, F_DERIVED,
          "Requests that may go at once on a full bucket; default max(1, rpm/60), one second of rate."),
    R_INT("burst.tokens", cfg_deployment, burst.tokens, NULL, 1, 1e12, F_DERIVED,
          "Tokens that may go at once on a full bucket; default max(1, tpm/60)."),
    R_INT("max_concurrency", cfg_deployment, max_concurrency, "0", 0, 1000000, 0,
          "Fleet-wide cap on requests in flight; 0 = no cap."),
    R_INT("lease_s", cfg_deployment, lease_s, "120", 1, 86400, 0,
          "Seconds a concurrency lease or an unsettled grant lives after its slot."),
    R_INT("rpd", cfg_deployment, rpd, "0", 0, 1e12, 0, "Requests per UTC day; 0 = unlimited."),
    R_INT("tpd", cfg_deployment, tpd, "0", 0, 1e15, 0, "Tokens per UTC day; 0 = unlimited."),
    R_INT("max_wait_ms", cfg_deployment, max_wait_ms, "60000", 0, 86400000, 0,
          "Longest wait for ACQUIRE without MAXWAIT; a longer wait is shed at once."),
    R_BOOL("refund", cfg_deployment, refund, "true", "Settle returns unused estimated tokens to the budget."),
    R_INT("retry_budget.ttl_s", cfg_deployment, retry_budget.ttl_s, "10", 1, 3600, 0,
          "Window in seconds over which successes earn retries."),
    R_INT("retry_budget.min_per_s", cfg_deployment, retry_budget.min_per_s, "1", 0, 1000000, 0,
          "Retries per second always allowed, whatever the successes."),
    R_NUM("retry_budget.percent", cfg_deployment, retry_budget.percent, "10", 0, 1000, 0,
          "Retries allowed as a percentage of successes in the window."),
    R_NUM("aimd.decrease", cfg_deployment, aimd.decrease, "0.7", 0, 1, F_MIN_OPEN | F_MAX_OPEN,
          "Factor applied to the effective rate on an unexpected 429."),
    R_NUM("aimd.min_scale", cfg_deployment, aimd.min_scale, "0.1", 0, 1, F_MIN_OPEN,
          "Lowest effective rate, as a share of the configured rate."),
    R_NUM("aimd.increase", cfg_deployment, aimd.increase, "0.05", 0, 1, F_MIN_OPEN,
          "Share of the configured rate given back after each quiet interval."),
    R_INT("aimd.interval_s", cfg_deployment, aimd.interval_s, "5", 1, 3600, 0,
          "Seconds without a 429 before the effective rate is raised."),
    R_STR("endpoint", cfg_deployment, endpoint, NULL, check_http_url, "Provider base URL, for `sluice run`."),
    R_STR("api_key_env", cfg_deployment, api_key_env, NULL, check_env_name,
          "Environment variable holding the provider API key, for `sluice run`."),
    R_ENUM("style", cfg_deployment, style, "azure", style_names, "API style of the endpoint: azure or openai."),
    R_STR("api_version", cfg_deployment, api_version, NULL, check_token, "api-version query parameter (azure style)."),
    R_INT("jitter_ms", cfg_deployment, jitter_ms, "10", 0, 10000, 0,
          "Release jitter in ms the schedule tolerates: callers may start this late without exceeding the burst."),
};
_Static_assert(sizeof(deployment_rows) / sizeof(deployment_rows[0]) <= CFG_MAX_ROWS, "too many rows");

static const cfg_schema deployment_schema = {
    .what = "deployment",
    .rows = deployment_rows,
    .nrows = sizeof(deployment_rows) / sizeof(deployment_rows[0]),
    .size = sizeof(cfg_deployment),
    .name_off = offsetof(cfg_deployment, name),
    .line_off = offsetof(cfg_deployment, line),
    .check_name = check_deployment_name,
    .finish = deployment_finish,
};

static const cfg_row root_rows[] = {
    R_STRF("redis.url", config, redis.url, "redis://127.0.0.1:6379", NULL, F_NONEMPTY,
          "Redis to share the budget in: redis://[user@]host[:port][/db] or unix:///path/to/redis.sock."),
    R_STR("redis.username", config, redis.username, NULL, check_token, "ACL user (also possible as user@ in the URL)."),
    R_STR("redis.password_file", config, redis.password_file, NULL, NULL,
          "File holding the Redis password, read at load; one trailing newline is stripped."),
    R_STR("redis.password_env", config, redis.password_env, NULL, check_env_name,
          "Environment variable holding the Redis password."),
    R_INT("redis.timeout_ms", config, redis.timeout_ms, "250", 1, 60000, 0, "Timeout of each Redis call."),
    R_INT("redis.connect_timeout_ms", config, redis.connect_timeout_ms, "1000", 1, 60000, 0,
          "Timeout of connecting to Redis."),
    R_STRS("redis.cluster", config, redis.cluster, redis.ncluster, check_node_addr,
           "Redis Cluster seed nodes (host:port); the agent routes by hash slot. Replaces redis.url's address."),
    R_STR("redis.sentinel.master", config, redis.sentinel_master, NULL, check_token,
          "Sentinel: name of the monitored master; with redis.sentinel.nodes."),
    R_STRS("redis.sentinel.nodes", config, redis.sentinels, redis.nsentinels, check_node_addr,
           "Sentinel nodes (host:port) asked for the master's address."),
    R_STR("agent.id", config, agent.id, NULL, check_token, "Name of this agent in the fleet; empty = hostname:pid."),
    R_STRF("agent.socket", config, agent.socket, "/run/sluice/agent.sock", check_socket_path, F_NONEMPTY,
          "UNIX socket the agent serves (RESP2)."),
    R_MODE("agent.socket_mode", config, agent.socket_mode, "0660", "Permission bits of the socket, in octal."),
    R_STR("agent.socket_owner", config, agent.socket_owner, NULL, check_token,
          "User (name or uid) that owns the socket; empty = the user sluiced runs as."),
    R_STR("agent.socket_group", config, agent.socket_group, NULL, check_token,
          "Group (name or gid) of the socket, whose members may acquire; empty = sluiced's group."),
    R_STR("agent.metrics", config, agent.metrics, NULL, check_hostport,
          "host:port of the Prometheus endpoint; empty = off."),
    R_INT("agent.max_clients", config, agent.max_clients, "1024", 1, 1000000, 0, "Most clients connected at once."),
    R_BYTES("agent.max_client_buffer", config, agent.max_client_buffer, "1048576", 1024, 1 << 30,
            "Bytes buffered per client before it is closed."),
    R_INT("agent.client_idle_timeout_ms", config, agent.client_idle_timeout_ms, "30000", 100, 86400000, 0,
          "A half-written command older than this closes its client."),
    R_ENUM("agent.fail", config, agent.fail, "open", fail_names,
           "While Redis is unreachable: open = pace locally at a share of the rate, closed = refuse."),
    R_NUM("agent.fallback_share", config, agent.fallback_share, "0.25", 0, 1, F_MIN_OPEN,
          "Share of each deployment's rate used in fallback before the live agents are known."),
    R_INT("agent.heartbeat_ms", config, agent.heartbeat_ms, "1000", 100, 60000, 0,
          "How often the agent announces itself in Redis."),
    R_ENUM("agent.log_level", config, agent.log_level, "info", level_names, "How much the agent logs."),
    R_INT("agent.max_client_pipeline", config, agent.max_client_pipeline, "1024", 1, 1000000, 0,
          "Unfinished commands (waiting ACQUIREs) one client may have before the agent stops reading from it."),
    R_LIST("deployments", config, deployments, ndeployments, &deployment_schema, F_REQUIRED,
           "The governed deployments, by name."),
};
_Static_assert(sizeof(root_rows) / sizeof(root_rows[0]) <= CFG_MAX_ROWS, "too many rows");

static const cfg_schema root_schema = {
    .what = "configuration",
    .rows = root_rows,
    .nrows = sizeof(root_rows) / sizeof(root_rows[0]),
    .size = sizeof(config),
    .finish = root_finish,
};

/* ---- defaults, free ---- */

static void free_entity(const cfg_schema *sc, void *base) {
    for (size_t i = 0; i < sc->nrows; i++) {
        const cfg_row *r = &sc->rows[i];
        if (r->type == CT_STR) {
            char **f = FIELD(base, r->off, char *);
            free(*f);
            *f = NULL;
        } else if (r->type == CT_STRS) {
            char **arr = *FIELD(base, r->off, char **);
            size_t n = *FIELD(base, r->count_off, size_t);
            for (size_t j = 0; j < n; j++) free(arr[j]);
            free(arr);
            *FIELD(base, r->off, char **) = NULL;
            *FIELD(base, r->count_off, size_t) = 0;
        } else if (r->type == CT_LIST) {
            char *arr = *FIELD(base, r->off, char *);
            size_t n = *FIELD(base, r->count_off, size_t);
            for (size_t j = 0; j < n; j++) {
                void *elem = arr + j * r->sub->size;
                free(*FIELD(elem, r->sub->name_off, char *));
                free_entity(r->sub, elem);
            }
            free(arr);
            *FIELD(base, r->off, char *) = NULL;
            *FIELD(base, r->count_off, size_t) = 0;
        }
    }
}

static int apply_defaults(cfg_ctx *ctx, const cfg_schema *sc, void *base) {
    for (size_t i = 0; i < sc->nrows; i++) {
        const cfg_row *r = &sc->rows[i];
        char why[256];
        int rc = 0;
        if (r->type == CT_LIST || r->type == CT_STRS) continue;
        if (r->def)
            rc = set_value(r, base, r->def, strlen(r->def), why, sizeof(why));
        else if (r->type == CT_STR)
            rc = set_value(r, base, "", 0, why, sizeof(why));
        if (rc) return cfg_fail_plain(ctx, 0, "internal error: default of '%s': %s", r->key, why);
    }
    return 0;
}

/* ---- the walk ---- */

static const cfg_row *find_row(const cfg_schema *sc, const char *key, size_t *idx) {
    for (size_t i = 0; i < sc->nrows; i++) {
        if (!strcmp(sc->rows[i].key, key)) {
            if (idx) *idx = i;
            return &sc->rows[i];
        }
    }
    return NULL;
}

/* Does some row live under the mapping `prefix` ("burst.")? */
static int has_rows_under(const cfg_schema *sc, const char *prefix) {
    size_t n = strlen(prefix);
    for (size_t i = 0; i < sc->nrows; i++)
        if (!strncmp(sc->rows[i].key, prefix, n)) return 1;
    return 0;
}

static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    size_t row[65];
    if (la > 64 || lb > 64) return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The key under prefix closest to key, if it is close (a typo). */
static void suggest(const cfg_schema *sc, const char *prefix, const char *key, size_t klen, char *out,
                    size_t outlen) {
    size_t plen = strlen(prefix), best = 3;
    out[0] = '\0';
    for (size_t i = 0; i < sc->nrows; i++) {
        const char *k = sc->rows[i].key;
        if (strncmp(k, prefix, plen)) continue;
        const char *seg = k + plen, *dot = strchr(seg, '.');
        size_t sl = dot ? (size_t)(dot - seg) : strlen(seg);
        size_t d = edit_distance(key, klen, seg, sl);
        if (d < best && d < sl && sl < outlen) {
            best = d;
            memcpy(out, seg, sl);
            out[sl] = '\0';
        }
    }
}

static int walk_map(cfg_ctx *ctx, cfg_entity *ent, yaml_node_t *map, const char *prefix);

static int set_row(cfg_ctx *ctx, cfg_entity *ent, const cfg_row *r, size_t idx, yaml_node_t *val) {
    char why[512];
    if (node_is_null(val) && !(r->flags & F_REQUIRED)) return 0; /* keep the default */
    if (node_is_null(val) || val->type != YAML_SCALAR_NODE) {
        describe_row(r, why, sizeof(why));
        return cfg_fail(ctx, node_line(val), "must be %s, got %s", why,
                        node_is_null(val) ? "nothing" : node_kind(val));
    }
    const char *s = (const char *)val->data.scalar.value;
    size_t len = val->data.scalar.length;
    if (set_value(r, ent->base, s, len, why, sizeof(why)) != 0) return cfg_fail(ctx, node_line(val), "%s", why);
    ent->seen |= (uint64_t)1 << idx;
    ent->lines[idx] = node_line(val);
    return 0;
}

/* Fills, validates and finishes one entity's required rows and hook. The
 * path must name the entity. */
static int finish_entity(cfg_ctx *ctx, cfg_entity *ent) {
    const cfg_schema *sc = ent->schema;
    for (size_t i = 0; i < sc->nrows; i++) {
        const cfg_row *r = &sc->rows[i];
        if ((r->flags & F_REQUIRED) && r->type != CT_LIST && !(ent->seen & ((uint64_t)1 << i))) {
            size_t old = cfg_path_push(ctx, r->key, strlen(r->key));
            cfg_fail(ctx, ent->line, "required key is missing");
            cfg_path_pop(ctx, old);
            return -1;
        }
    }
    return sc->finish ? sc->finish(ctx, ent) : 0;
}

static int walk_list(cfg_ctx *ctx, cfg_entity *ent, const cfg_row *r, size_t idx, yaml_node_t *val) {
    const cfg_schema *sub = r->sub;
    ent->seen |= (uint64_t)1 << idx;
    ent->lines[idx] = node_line(val);
    if (node_is_null(val)) return 0;
    if (val->type != YAML_MAPPING_NODE)
        return cfg_fail(ctx, node_line(val), "must be a mapping of %s names to settings, got %s", sub->what,
                        node_kind(val));
    char **arr = FIELD(ent->base, r->off, char *);
    size_t *count = FIELD(ent->base, r->count_off, size_t);
    for (yaml_node_pair_t *pr = val->data.mapping.pairs.start; pr < val->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(ctx->doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(ctx->doc, pr->value);
        if (!k || !v) return cfg_fail(ctx, node_line(val), "internal error: dangling YAML node");
        if (k->type != YAML_SCALAR_NODE)
            return cfg_fail(ctx, node_line(k), "%s names must be strings, got %s", sub->what, node_kind(k));
        const char *name = (const char *)k->data.scalar.value;
        size_t nlen = k->data.scalar.length;
        size_t old = cfg_path_push(ctx, name, nlen);
        char why[160];
        if (sub->check_name && sub->check_name(name, nlen, why, sizeof(why)) != 0) {
            cfg_fail(ctx, node_line(k), "%s", why);
            return -1;
        }
        for (size_t j = 0; j < *count; j++) {
            void *prev = *arr + j * sub->size;
            if (!strcmp(*FIELD(prev, sub->name_off, char *), name)) {
                cfg_fail(ctx, node_line(k), "duplicate %s (first defined on line %d)", sub->what,
                         *FIELD(prev, sub->line_off, int));
                return -1;
            }
        }
        /* Grow at powers of two; the count goes up before anything is
         * allocated inside the element so that an error frees it. */
        size_t n = *count;
        if ((n & (n - 1)) == 0) {
            size_t ncap = n ? n * 2 : 1;
            char *na = realloc(*arr, ncap * sub->size);
            if (!na) return cfg_fail(ctx, node_line(k), "out of memory");
            *arr = na;
        }
        void *elem = *arr + n * sub->size;
        memset(elem, 0, sub->size);
        *count = n + 1;
        char *copy = malloc(nlen + 1);
        if (!copy) return cfg_fail(ctx, node_line(k), "out of memory");
        memcpy(copy, name, nlen + 1);
        *FIELD(elem, sub->name_off, char *) = copy;
        *FIELD(elem, sub->line_off, int) = node_line(k);
        if (apply_defaults(ctx, sub, elem) != 0) return -1;
        cfg_entity child = {.schema = sub, .base = elem, .line = node_line(k)};
        if (!node_is_null(v)) {
            if (v->type != YAML_MAPPING_NODE) {
                cfg_fail(ctx, node_line(v), "must be a mapping of %s settings, got %s", sub->what, node_kind(v));
                return -1;
            }
            if (walk_map(ctx, &child, v, "") != 0) return -1;
        }
        if (finish_entity(ctx, &child) != 0) return -1;
        cfg_path_pop(ctx, old);
    }
    return 0;
}

/* A YAML list of strings: each item must be a scalar that passes the row's
 * check; the array is NULL-terminated. */
static char *dup_range(const char *s, size_t len);

static int walk_strs(cfg_ctx *ctx, cfg_entity *ent, const cfg_row *r, size_t idx, yaml_node_t *val) {
    ent->seen |= (uint64_t)1 << idx;
    ent->lines[idx] = node_line(val);
    if (node_is_null(val)) return 0;
    if (val->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ctx, node_line(val), "must be a list of strings, got %s", node_kind(val));
    char ***arr = FIELD(ent->base, r->off, char **);
    size_t *count = FIELD(ent->base, r->count_off, size_t);
    size_t n = (size_t)(val->data.sequence.items.top - val->data.sequence.items.start);
    if (n == 0) return cfg_fail(ctx, node_line(val), "must not be an empty list");
    char **a = calloc(n + 1, sizeof(char *));
    if (!a) return cfg_fail(ctx, node_line(val), "out of memory");
    *arr = a;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *it = yaml_document_get_node(ctx->doc, val->data.sequence.items.start[i]);
        if (!it || it->type != YAML_SCALAR_NODE || node_is_null(it))
            return cfg_fail(ctx, node_line(it ? it : val), "item %zu must be a string, got %s", i + 1,
                            it ? node_kind(it) : "nothing");
        const char *v = (const char *)it->data.scalar.value;
        char why[160];
        if (r->check && r->check(v, why, sizeof(why)) != 0)
            return cfg_fail(ctx, node_line(it), "item %zu %s, got \"%s\"", i + 1, why, v);
        a[i] = dup_range(v, it->data.scalar.length);
        if (!a[i]) return cfg_fail(ctx, node_line(it), "out of memory");
        *count = i + 1;
    }
    return 0;
}

static int walk_map(cfg_ctx *ctx, cfg_entity *ent, yaml_node_t *map, const char *prefix) {
    const cfg_schema *sc = ent->schema;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(ctx->doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(ctx->doc, pr->value);
        if (!k || !v) return cfg_fail(ctx, node_line(map), "internal error: dangling YAML node");
        if (k->type != YAML_SCALAR_NODE) return cfg_fail(ctx, node_line(k), "keys must be strings, got %s", node_kind(k));
        const char *key = (const char *)k->data.scalar.value;
        size_t klen = k->data.scalar.length;
        size_t old = cfg_path_push(ctx, key, klen);
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pr; q++) {
            yaml_node_t *qk = yaml_document_get_node(ctx->doc, q->key);
            if (qk && qk->type == YAML_SCALAR_NODE && qk->data.scalar.length == klen &&
                !memcmp(qk->data.scalar.value, key, klen)) {
                cfg_fail(ctx, node_line(k), "duplicate key (first given on line %d)", node_line(qk));
                return -1;
            }
        }
        char full[256];
        size_t plen = strlen(prefix);
        int fits = plen + klen + 2 < sizeof(full) && memchr(key, '\0', klen) == NULL;
        const cfg_row *r = NULL;
        size_t idx = 0;
        if (fits) {
            memcpy(full, prefix, plen);
            memcpy(full + plen, key, klen);
            full[plen + klen] = '\0';
            r = find_row(sc, full, &idx);
        }
        int rc, nested = 0;
        if (!r && fits) {
            full[plen + klen] = '.';
            full[plen + klen + 1] = '\0';
            nested = has_rows_under(sc, full);
        }
        if (r && r->type == CT_LIST) {
            rc = walk_list(ctx, ent, r, idx, v);
        } else if (r && r->type == CT_STRS) {
            rc = walk_strs(ctx, ent, r, idx, v);
        } else if (r) {
            rc = set_row(ctx, ent, r, idx, v);
        } else if (nested) {
            if (node_is_null(v))
                rc = 0;
            else if (v->type != YAML_MAPPING_NODE)
                rc = cfg_fail(ctx, node_line(v), "must be a mapping, got %s", node_kind(v));
            else
                rc = walk_map(ctx, ent, v, full);
        } else {
            char hint[72];
            suggest(sc, prefix, key, klen, hint, sizeof(hint));
            if (hint[0])
                rc = cfg_fail(ctx, node_line(k), "unknown key (did you mean '%s'?)", hint);
            else if (!strcmp(prefix, "redis.") && klen == 8 && !memcmp(key, "password", 8))
                rc = cfg_fail(ctx, node_line(k),
                              "unknown key: a password is never written in the configuration, use "
                              "password_file or password_env");
            else
                rc = cfg_fail(ctx, node_line(k), "unknown key");
        }
        if (rc) return -1;
        cfg_path_pop(ctx, old);
    }
    return 0;
}

/* ---- cross-field rules ---- */

/* Fails about `key` (relative to the entity whose path is current), at the
 * line where it was given, else at the entity's line. */
CFG_PRINTF(4, 5)
static int entity_fail(cfg_ctx *ctx, cfg_entity *ent, const char *key, const char *fmt, ...) {
    size_t idx;
    int line = ent->line;
    if (find_row(ent->schema, key, &idx) && (ent->seen & ((uint64_t)1 << idx))) line = ent->lines[idx];
    size_t old = cfg_path_push(ctx, key, strlen(key));
    va_list ap;
    va_start(ap, fmt);
    cfg_vfail(ctx, line, ctx->path, fmt, ap);
    va_end(ap);
    cfg_path_pop(ctx, old);
    return -1;
}

static int entity_seen(const cfg_entity *ent, const char *key) {
    size_t idx;
    return find_row(ent->schema, key, &idx) && (ent->seen & ((uint64_t)1 << idx));
}

static int deployment_finish(cfg_ctx *ctx, cfg_entity *ent) {
    cfg_deployment *d = ent->base;
    if (!entity_seen(ent, "burst.requests")) d->burst.requests = d->rpm / 60 > 1 ? d->rpm / 60 : 1;
    if (!entity_seen(ent, "burst.tokens")) d->burst.tokens = d->tpm / 60 > 1 ? d->tpm / 60 : 1;
    if (d->api_version[0] && d->style != CONFIG_STYLE_AZURE)
        return entity_fail(ctx, ent, "api_version", "applies to style azure only (style is %s)",
                           config_style_name(d->style));
    return 0;
}

static char *dup_range(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static void replace_str(char **dst, char *src) {
    free(*dst);
    *dst = src;
}

/* Never echoes the URL: it might hold a password. */
static int parse_redis_url(cfg_ctx *ctx, cfg_entity *ent, config *cfg, char **user) {
    const char *url = cfg->redis.url;
    config_redis *r = &cfg->redis;
    *user = NULL;
    if (strpbrk(url, " \t")) return entity_fail(ctx, ent, "redis.url", "must not contain spaces");
    if (!strncmp(url, "unix://", 7)) {
        const char *path = url + 7;
        if (path[0] != '/')
            return entity_fail(ctx, ent, "redis.url", "a unix:// URL needs an absolute path (unix:///path/to/redis.sock)");
        if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return entity_fail(ctx, ent, "redis.url", "the socket path is too long for a UNIX socket");
        if (strchr(path, '?')) return entity_fail(ctx, ent, "redis.url", "query parameters are not supported");
        char *p = dup_range(path, strlen(path)), *h = dup_range("", 0);
        if (!p || !h) {
            free(p);
            free(h);
            return entity_fail(ctx, ent, "redis.url", "out of memory");
        }
        replace_str(&r->unix_path, p);
        replace_str(&r->host, h);
        r->port = 0;
        r->db = 0;
        return 0;
    }
    if (!strncmp(url, "rediss://", 9))
        return entity_fail(ctx, ent, "redis.url", "TLS (rediss://) is not supported by this build");
    if (strncmp(url, "redis://", 8))
        return entity_fail(ctx, ent, "redis.url", "must start with redis:// or unix://");
    const char *auth = url + 8;
    const char *slash = strchr(auth, '/');
    const char *end = slash ? slash : auth + strlen(auth);
    const char *at = NULL;
    for (const char *p = auth; p < end; p++)
        if (*p == '@') at = p;
    const char *hostport = auth;
    if (at) {
        if (memchr(auth, ':', (size_t)(at - auth)))
            return entity_fail(ctx, ent, "redis.url",
                               "a password in the URL is not allowed: use redis.password_file or redis.password_env");
        if (at == auth) return entity_fail(ctx, ent, "redis.url", "the user name before '@' is empty");
        *user = dup_range(auth, (size_t)(at - auth));
        if (!*user) return entity_fail(ctx, ent, "redis.url", "out of memory");
        hostport = at + 1;
    }
    if (strchr(url, '?')) return entity_fail(ctx, ent, "redis.url", "query parameters are not supported");
    const char *hs, *he, *portp = NULL;
    if (hostport[0] == '[') {
        const char *close = memchr(hostport, ']', (size_t)(end - hostport));
        if (!close) return entity_fail(ctx, ent, "redis.url", "unterminated '[' in the host");
        hs = hostport + 1;
        he = close;
        if (close + 1 < end) {
            if (close[1] != ':') return entity_fail(ctx, ent, "redis.url", "junk after ']' in the host");
            portp = close + 2;
        }
    } else {
        hs = hostport;
        he = memchr(hostport, ':', (size_t)(end - hostport));
        if (he)
            portp = he + 1;
        else
            he = end;
    }
    if (he == hs) return entity_fail(ctx, ent, "redis.url", "the host is empty");
    long long port = 6379, db = 0;
    if (portp && (parse_decimal(portp, (size_t)(end - portp), &port) != 1 || port < 1 || port > 65535))
        return entity_fail(ctx, ent, "redis.url", "the port must be a number in 1..65535");
    if (slash && slash[1] &&
        (parse_decimal(slash + 1, strlen(slash + 1), &db) != 1 || db < 0 || db > INT_MAX))
        return entity_fail(ctx, ent, "redis.url", "the database after '/' must be a non-negative integer");
    char *h = dup_range(hs, (size_t)(he - hs)), *u = dup_range("", 0);
    if (!h || !u) {
        free(h);
        free(u);
        return entity_fail(ctx, ent, "redis.url", "out of memory");
    }
    replace_str(&r->host, h);
    replace_str(&r->unix_path, u);
    r->port = (int)port;
    r->db = (int)db;
    return 0;
}

static void errno_text(int e, char *buf, size_t n) {
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
}

/* Reads the password file: a regular file of at most CFG_SECRET_MAX bytes,
 * opened without blocking so that a FIFO or device cannot hang a load. */
static int read_secret_file(cfg_ctx *ctx, cfg_entity *ent, const char *file, char **out) {
    char full[PATH_MAX];
    *out = NULL;
    if (file[0] != '/' && ctx->basedir) {
        if ((size_t)snprintf(full, sizeof(full), "%s/%s", ctx->basedir, file) >= sizeof(full))
            return entity_fail(ctx, ent, "redis.password_file", "the path is too long");
        file = full;
    }
    char msg[128];
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        errno_text(errno, msg, sizeof(msg));
        return entity_fail(ctx, ent, "redis.password_file", "cannot read \"%s\": %s", file, msg);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return entity_fail(ctx, ent, "redis.password_file", "\"%s\" is not a regular file", file);
    }
    char *buf = malloc(CFG_SECRET_MAX + 1);
    if (!buf) {
        close(fd);
        return entity_fail(ctx, ent, "redis.password_file", "out of memory");
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, CFG_SECRET_MAX + 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            errno_text(errno, msg, sizeof(msg));
            close(fd);
            free(buf);
            return entity_fail(ctx, ent, "redis.password_file", "cannot read \"%s\": %s", file, msg);
        }
        if (n == 0) break;
        len += (size_t)n;
        if (len > CFG_SECRET_MAX) break;
    }
    close(fd);
    const char *problem = NULL;
    if (len > CFG_SECRET_MAX) problem = "is larger than 4096 bytes";
    while (!problem && len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) len--;
    if (!problem && len == 0) problem = "is empty";
    if (!problem && (memchr(buf, '\n', len) || memchr(buf, '\r', len) || memchr(buf, '\0', len)))
        problem = "must hold the password on one line";
    if (problem) {
        memset(buf, 0, CFG_SECRET_MAX + 1);
        free(buf);
        return entity_fail(ctx, ent, "redis.password_file", "\"%s\" %s", file, problem);
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

static void wipe_free(char *s) {
    if (!s) return;
    volatile char *v = s;
    while (*v) *v++ = '\0';
    free(s);
}

static int root_finish(cfg_ctx *ctx, cfg_entity *ent) {
    config *cfg = ent->base;
    config_redis *r = &cfg->redis;
    char *user = NULL;
    if (parse_redis_url(ctx, ent, cfg, &user) != 0) {
        free(user); /* set before a later part of the URL failed */
        return -1;
    }
    if (user) {
        if (r->username[0]) {
            free(user);
            return entity_fail(ctx, ent, "redis.username", "the user is already given in redis.url");
        }
        replace_str(&r->username, user);
    }
    if (r->ncluster && (r->sentinel_master[0] || r->nsentinels))
        return entity_fail(ctx, ent, "redis.sentinel", "give either redis.cluster or redis.sentinel, not both");
    if (!r->sentinel_master[0] != !r->nsentinels)
        return entity_fail(ctx, ent, r->nsentinels ? "redis.sentinel.master" : "redis.sentinel.nodes",
                           "Sentinel needs both redis.sentinel.master and redis.sentinel.nodes");
    if (r->password_file[0] && r->password_env[0])
        return entity_fail(ctx, ent, "redis.password_env",
                           "give either redis.password_file or redis.password_env, not both");
    char *secret = NULL;
    if (r->password_file[0]) {
        if (read_secret_file(ctx, ent, r->password_file, &secret) != 0) return -1;
    } else if (r->password_env[0]) {
        const char *v = getenv(r->password_env);
        if (!v) return entity_fail(ctx, ent, "redis.password_env", "environment variable %s is not set", r->password_env);
        if (!v[0]) return entity_fail(ctx, ent, "redis.password_env", "environment variable %s is empty", r->password_env);
        secret = dup_range(v, strlen(v));
        if (!secret) return entity_fail(ctx, ent, "redis.password_env", "out of memory");
    }
    if (secret) {
        wipe_free(r->password);
        r->password = secret;
    }
    if (r->username[0] && !r->password[0])
        return entity_fail(ctx, ent, "redis.username",
                           "a user needs a password: set redis.password_file or redis.password_env");

    config_agent *a = &cfg->agent;
    if (a->metrics[0]) {
        const char *h;
        size_t hl;
        if (split_hostport(a->metrics, &h, &hl, &a->metrics_port) == 0) {
            char *mh = dup_range(h, hl);
            if (!mh) return entity_fail(ctx, ent, "agent.metrics", "out of memory");
            replace_str(&a->metrics_host, mh);
        }
    }
    if (cfg->ndeployments == 0) return entity_fail(ctx, ent, "deployments", "at least one deployment is required");
    return 0;
}

/* ---- loading ---- */

static int by_name_cmp(const void *a, const void *b) {
    const struct config_deployment *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int by_name_key(const void *key, const void *elem) {
    const struct config_deployment *const *d = elem;
    return strcmp(key, (*d)->name);
}

static int line_of_offset(const char *text, size_t len, size_t off) {
    int line = 1;
    for (size_t i = 0; i < off && i < len; i++)
        if (text[i] == '\n') line++;
    return line;
}

static int yaml_error(cfg_ctx *ctx, const yaml_parser_t *ps, const char *text, size_t len) {
    const char *problem = ps->problem ? ps->problem : "unknown error";
    if (ps->error == YAML_MEMORY_ERROR) return cfg_fail_plain(ctx, 1, "out of memory while parsing YAML");
    if (ps->error == YAML_READER_ERROR)
        return cfg_fail_plain(ctx, line_of_offset(text, len, ps->problem_offset), "YAML error: %s", problem);
    if (ps->context)
        return cfg_fail_plain(ctx, (int)ps->problem_mark.line + 1, "YAML syntax error: %s (%s at line %d)", problem,
                              ps->context, (int)ps->context_mark.line + 1);
    return cfg_fail_plain(ctx, (int)ps->problem_mark.line + 1, "YAML syntax error: %s", problem);
}

/* Allocates empty strings for the fields that are not rows, so that every
 * char * of a config is non-NULL. */
static int init_derived(config *cfg) {
    char **fields[] = {&cfg->redis.host, &cfg->redis.unix_path, &cfg->redis.password, &cfg->agent.metrics_host};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        *fields[i] = calloc(1, 1);
        if (!*fields[i]) return -1;
    }
    return 0;
}

static int load_common(const char *name, const char *basedir, const char *text, size_t len, config **out,
                       char *err, size_t errlen) {
    cfg_ctx ctx = {.name = name, .basedir = basedir, .err = err, .errlen = errlen};
    yaml_parser_t ps;
    yaml_document_t doc;
    config *cfg = NULL;
    int rc = -1, have_doc = 0;
    if (err && errlen) err[0] = '\0';
    *out = NULL;
    if (!yaml_parser_initialize(&ps)) return cfg_fail_plain(&ctx, 1, "out of memory");
    yaml_parser_set_input_string(&ps, (const unsigned char *)text, len);
    if (!yaml_parser_load(&ps, &doc)) {
        yaml_error(&ctx, &ps, text, len);
        goto done;
    }
    have_doc = 1;
    ctx.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        cfg_fail_plain(&ctx, 1, "the configuration is empty (at least one deployment is required)");
        goto done;
    }
    {
        yaml_document_t extra;
        if (!yaml_parser_load(&ps, &extra)) {
            yaml_error(&ctx, &ps, text, len);
            goto done;
        }
        yaml_node_t *xroot = yaml_document_get_root_node(&extra);
        int xline = xroot ? node_line(xroot) : 0;
        yaml_document_delete(&extra);
        if (xroot) {
            cfg_fail_plain(&ctx, xline, "only one YAML document is allowed");
            goto done;
        }
    }
    if (root->type != YAML_MAPPING_NODE) {
        cfg_fail_plain(&ctx, node_line(root), "the top level must be a mapping, got %s", node_kind(root));
        goto done;
    }
    cfg = calloc(1, sizeof(*cfg));
    if (!cfg || init_derived(cfg) != 0 || !(cfg->source = dup_range(name, strlen(name)))) {
        cfg_fail_plain(&ctx, 1, "out of memory");
        goto done;
    }
    if (apply_defaults(&ctx, &root_schema, cfg) != 0) goto done;
    cfg_entity ent = {.schema = &root_schema, .base = cfg, .line = node_line(root)};
    if (walk_map(&ctx, &ent, root, "") != 0 || finish_entity(&ctx, &ent) != 0) goto done;
    cfg->by_name_ = malloc(cfg->ndeployments * sizeof(*cfg->by_name_));
    if (!cfg->by_name_) {
        cfg_fail_plain(&ctx, 1, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < cfg->ndeployments; i++) cfg->by_name_[i] = &cfg->deployments[i];
    qsort(cfg->by_name_, cfg->ndeployments, sizeof(*cfg->by_name_), by_name_cmp);
    *out = cfg;
    cfg = NULL;
    rc = 0;
done:
    config_free(cfg);
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&ps);
    return rc;
}

int config_load_string(const char *name, const char *text, size_t len, config **out, char *err, size_t errlen) {
    return load_common(name ? name : "<string>", NULL, text, len, out, err, errlen);
}

/* Reads a whole file of at most CFG_FILE_MAX bytes. */
static int read_file(cfg_ctx *ctx, const char *path, char **text, size_t *len) {
    char msg[128];
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        errno_text(errno, msg, sizeof(msg));
        return cfg_fail_plain(ctx, 0, "cannot open: %s", msg);
    }
    size_t cap = 0, n = 0;
    char *buf = NULL;
    int rc = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= CFG_FILE_MAX) {
                rc = cfg_fail_plain(ctx, 0, "larger than %d bytes", CFG_FILE_MAX);
                break;
            }
            size_t ncap = cap ? cap * 2 : 4096;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                rc = cfg_fail_plain(ctx, 0, "out of memory");
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                errno_text(errno, msg, sizeof(msg));
                rc = cfg_fail_plain(ctx, 0, "cannot read: %s", msg);
            }
            break;
        }
    }
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

int config_load(const char *path, config **out, char *err, size_t errlen) {
    cfg_ctx ctx = {.name = path, .err = err, .errlen = errlen};
    char *text;
    size_t len;
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    if (read_file(&ctx, path, &text, &len) != 0) return -1;
    /* Relative secrets are found next to the configuration. */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? dup_range(path, slash == path ? 1 : (size_t)(slash - path)) : NULL;
    int rc;
    if (slash && !dir)
        rc = cfg_fail_plain(&ctx, 0, "out of memory");
    else
        rc = load_common(path, dir ? dir : ".", text ? text : "", len, out, err, errlen);
    free(dir);
    free(text);
    return rc;
}

void config_free(config *cfg) {
    if (!cfg) return;
    free_entity(&root_schema, cfg);
    wipe_free(cfg->redis.password);
    free(cfg->redis.host);
    free(cfg->redis.unix_path);
    free(cfg->agent.metrics_host);
    free(cfg->by_name_);
    free(cfg->source);
    free(cfg);
}

const struct config_deployment *config_deployment(const config *cfg, const char *name) {
    if (!cfg || !name || !cfg->ndeployments) return NULL;
    const struct config_deployment *const *hit =
        bsearch(name, cfg->by_name_, cfg->ndeployments, sizeof(*cfg->by_name_), by_name_key);
    return hit ? *hit : NULL;
}

static const char *enum_name(const char *const *names, size_t n, int v) {
    return v >= 0 && (size_t)v < n && names[v] ? names[v] : "?";
}

const char *config_fail_name(int fail) { return enum_name(fail_names, 2, fail); }
const char *config_log_level_name(int level) { return enum_name(level_names, 4, level); }
const char *config_style_name(int style) { return enum_name(style_names, 2, style); }

/* ---- schema listing ---- */

static void foreach_rows(const cfg_schema *sc, const char *prefix, void (*fn)(const config_key_info *, void *),
                         void *ud) {
    for (size_t i = 0; i < sc->nrows; i++) {
        const cfg_row *r = &sc->rows[i];
        char path[256], range[96] = "", type[96];
        snprintf(path, sizeof(path), "%s%s", prefix, r->key);
        switch (r->type) {
        case CT_INT: snprintf(type, sizeof(type), "integer"); break;
        case CT_BYTES: snprintf(type, sizeof(type), "size"); break;
        case CT_DOUBLE: snprintf(type, sizeof(type), "number"); break;
        case CT_BOOL: snprintf(type, sizeof(type), "boolean"); break;
        case CT_MODE: snprintf(type, sizeof(type), "mode"); break;
        case CT_STR: snprintf(type, sizeof(type), "string"); break;
        case CT_LIST: snprintf(type, sizeof(type), "mapping of %s", r->sub->what); break;
        case CT_STRS: snprintf(type, sizeof(type), "list of strings"); break;
        case CT_ENUM: {
            size_t n = (size_t)snprintf(type, sizeof(type), "one of ");
            for (int j = 0; r->names[j] && n < sizeof(type); j++)
                n += (size_t)snprintf(type + n, sizeof(type) - n, "%s%s", j ? ", " : "", r->names[j]);
            break;
        }
        }
        if (r->type == CT_INT || r->type == CT_BYTES) {
            char lo[32], hi[32];
            fmt_num(lo, sizeof(lo), r->min);
            fmt_num(hi, sizeof(hi), r->max);
            snprintf(range, sizeof(range), "%s..%s", lo, hi);
        } else if (r->type == CT_DOUBLE) {
            describe_range(r, range, sizeof(range));
        } else if (r->type == CT_MODE) {
            snprintf(range, sizeof(range), "0000..0777");
        }
        config_key_info info = {
            .path = path, .type = type, .def = r->def ? r->def : "", .range = range,
            .required = (r->flags & F_REQUIRED) != 0, .doc = r->doc,
        };
        fn(&info, ud);
        if (r->type == CT_LIST) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s%s.<name>.", prefix, r->key);
            foreach_rows(r->sub, sub, fn, ud);
        }
    }
}

void config_foreach_key(void (*fn)(const config_key_info *info, void *ud), void *ud) {
    foreach_rows(&root_schema, "", fn, ud);
}
