/* cfgtab: the table-driven YAML loader. See cfgtab.h for the contract.
 *
 * How it works: libyaml's document API loads the file into a node tree
 * (with line marks). walk_map() matches each mapping key against the
 * schema's rows, whose keys are dotted paths relative to one struct: an
 * exact match is a value to parse, a prefix of some rows is a nested
 * mapping, anything else is an unknown key. A CFG_T_LIST row holds named
 * entries, each filled from its own schema. Defaults are YAML text parsed
 * by the same code as the file. After a struct is filled, its schema's
 * finish hook applies cross-field rules and derived defaults. */
#define _POSIX_C_SOURCE 200809L

#include "cfgtab.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#define CFG_PATH_MAX 512        /* longest key path in messages */
#define CFG_FILE_MAX (16 << 20) /* refuse larger config files */
#define CFG_INT_SANE 1e9        /* maxima at or above this are sanity caps */

struct cfg_ctx {
    const char *name;    /* file name for messages */
    const char *basedir; /* for relative paths, NULL: cwd */
    yaml_document_t *doc;
    char *err;
    size_t errlen;
    char path[CFG_PATH_MAX]; /* key path of the current position */
    size_t pathlen;
};

/* ---- messages ---- */

static void cfg_vfail(cfg_ctx *ctx, int line, const char *key, const char *fmt, va_list ap) {
    if (!ctx->err || ctx->errlen == 0) return;
    int n;
    if (line <= 0) n = snprintf(ctx->err, ctx->errlen, "%s: ", ctx->name);
    else if (key) n = snprintf(ctx->err, ctx->errlen, "%s:%d: key '%s': ", ctx->name, line, key);
    else n = snprintf(ctx->err, ctx->errlen, "%s:%d: ", ctx->name, line);
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

/* An error that is about no key (syntax, I/O). */
int cfg_fail_plain(cfg_ctx *ctx, int line, const char *fmt, ...) {
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
    return len == 0 || (len == 1 && s[0] == '~') ||
           (len == 4 && (!strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")));
}

/* ---- value parsers ---- */

#define FIELD(base, off, type) ((type *)(void *)((char *)(base) + (off)))

static void fmt_num(char *out, size_t n, double v) {
    if (fabs(v) < 1e17 && v == floor(v)) snprintf(out, n, "%.0f", v);
    else snprintf(out, n, "%g", v);
}

/* "a positive integer", "an integer between 1 and 60000", ... */
static void describe_int(const cfg_row *r, char *out, size_t n) {
    char lo[32], hi[32];
    fmt_num(lo, sizeof(lo), r->min);
    fmt_num(hi, sizeof(hi), r->max);
    const char *what = r->type == CFG_T_BYTES ? "a size in bytes" : "an integer";
    if (r->max >= CFG_INT_SANE && r->type == CFG_T_INT) {
        if (r->min == 1) snprintf(out, n, "a positive integer");
        else if (r->min == 0) snprintf(out, n, "a non-negative integer");
        else snprintf(out, n, "%s >= %s", what, lo);
    } else {
        snprintf(out, n, "%s between %s and %s", what, lo, hi);
    }
}

/* "(0, 1]", "> 0", ... */
static void describe_range(const cfg_row *r, char *out, size_t n) {
    char lo[32], hi[32];
    fmt_num(lo, sizeof(lo), r->min);
    fmt_num(hi, sizeof(hi), r->max);
    if (isinf(r->max)) snprintf(out, n, "%s %s", (r->flags & CFG_MIN_OPEN) ? ">" : ">=", lo);
    else
        snprintf(out, n, "%c%s, %s%c", (r->flags & CFG_MIN_OPEN) ? '(' : '[', lo, hi,
                 (r->flags & CFG_MAX_OPEN) ? ')' : ']');
}

/* What a row accepts, as in "must be <this>". */
static void describe_row(const cfg_row *r, char *out, size_t n) {
    char range[64];
    switch (r->type) {
    case CFG_T_INT:
    case CFG_T_BYTES: describe_int(r, out, n); return;
    case CFG_T_DOUBLE:
        describe_range(r, range, sizeof(range));
        snprintf(out, n, isinf(r->max) ? "a number %s" : "a number in %s", range);
        return;
    case CFG_T_BOOL: snprintf(out, n, "true or false"); return;
    case CFG_T_MODE: snprintf(out, n, "an octal file mode from \"0000\" to \"0777\""); return;
    case CFG_T_STR: snprintf(out, n, "a string"); return;
    case CFG_T_LIST: snprintf(out, n, "a mapping"); return;
    case CFG_T_STRS: snprintf(out, n, "a list of strings"); return;
    case CFG_T_ENUM: {
        size_t k = (size_t)snprintf(out, n, "one of ");
        for (int i = 0; r->names[i] && k < n; i++)
            k += (size_t)snprintf(out + k, n - k, "%s%s", i ? ", " : "", r->names[i]);
        return;
    }
    }
}

int cfg_parse_decimal(const char *s, size_t len, long long *out) {
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
        if (v > ((unsigned long long)LLONG_MAX - d) / 10) overflow = 1;
        else v = v * 10 + d;
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
    if (r->type == CFG_T_BYTES) {
        static const struct {
            const char *sfx;
            long long mult;
        } units[] = {
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
    int ok = cfg_parse_decimal(s, digits, &v);
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
        if (r->max >= CFG_INT_SANE && r->type == CFG_T_INT && (double)v > r->max)
            snprintf(why, whylen, "must be at most %s, got %s", hi, gotq);
        else snprintf(why, whylen, "must be %s, got %s", desc, gotq);
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
    if (bad || v < r->min || v > r->max || ((r->flags & CFG_MIN_OPEN) && v == r->min) ||
        ((r->flags & CFG_MAX_OPEN) && v == r->max)) {
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
        if (s[i] < '0' || s[i] > '7' || v > 0777) bad = 1;
        else v = v * 8 + (unsigned)(s[i] - '0');
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
    if (len == 0 && (r->flags & CFG_NONEMPTY)) {
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
    if (r->flags & CFG_NOECHO) snprintf(gotq, sizeof(gotq), "a value not repeated here");
    else cfg_quote(s, len, gotq, sizeof(gotq));
    switch (r->type) {
    case CFG_T_INT:
    case CFG_T_BYTES: return set_int(r, base, s, len, gotq, why, whylen);
    case CFG_T_DOUBLE: return set_double(r, base, s, len, gotq, why, whylen);
    case CFG_T_BOOL: return set_bool(r, base, s, len, gotq, why, whylen);
    case CFG_T_ENUM: return set_enum(r, base, s, len, gotq, why, whylen);
    case CFG_T_MODE: return set_mode(r, base, s, len, gotq, why, whylen);
    case CFG_T_STR: return set_str(r, base, s, len, gotq, why, whylen);
    case CFG_T_LIST:
    case CFG_T_STRS: break;
    }
    snprintf(why, whylen, "internal error: not a scalar key");
    return -1;
}

/* ---- defaults, free ---- */

void cfg_free_rows(const cfg_schema *sc, void *base) {
    for (size_t i = 0; i < sc->nrows; i++) {
        const cfg_row *r = &sc->rows[i];
        if (r->type == CFG_T_STR) {
            char **f = FIELD(base, r->off, char *);
            free(*f);
            *f = NULL;
        } else if (r->type == CFG_T_STRS) {
            char **arr = *FIELD(base, r->off, char **);
            size_t n = *FIELD(base, r->count_off, size_t);
            for (size_t j = 0; j < n; j++) free(arr[j]);
            free(arr);
            *FIELD(base, r->off, char **) = NULL;
            *FIELD(base, r->count_off, size_t) = 0;
        } else if (r->type == CFG_T_LIST) {
            char *arr = *FIELD(base, r->off, char *);
            size_t n = *FIELD(base, r->count_off, size_t);
            for (size_t j = 0; j < n; j++) {
                void *elem = arr + j * r->sub->size;
                free(*FIELD(elem, r->sub->name_off, char *));
                cfg_free_rows(r->sub, elem);
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
        if (r->type == CFG_T_LIST || r->type == CFG_T_STRS) continue;
        if (r->def) rc = set_value(r, base, r->def, strlen(r->def), why, sizeof(why));
        else if (r->type == CFG_T_STR) rc = set_value(r, base, "", 0, why, sizeof(why));
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
static void suggest(const cfg_schema *sc, const char *prefix, const char *key, size_t klen, char *out, size_t outlen) {
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

/* The schema's message for the unknown key prefix+key, or NULL. */
static const char *known_mistake(const cfg_schema *sc, const char *prefix, const char *key, size_t klen) {
    for (const cfg_hint *h = sc->hints; h && h->key; h++)
        if (!strcmp(h->prefix, prefix) && strlen(h->key) == klen && !memcmp(h->key, key, klen)) return h->msg;
    return NULL;
}

static int walk_map(cfg_ctx *ctx, cfg_entity *ent, yaml_node_t *map, const char *prefix);

/* A row reached a second time through another spelling of its path
 * ("burst.requests: 3" beside "burst: {requests: 2}", "redis.url" beside
 * "redis: {url: ...}"): a duplicate key, as two equal keys in one mapping. */
static int given_twice(cfg_ctx *ctx, cfg_entity *ent, size_t idx, yaml_node_t *val) {
    if (!(ent->seen & ((uint64_t)1 << idx))) return 0;
    return cfg_fail(ctx, node_line(val), "duplicate key (first given on line %d)", ent->lines[idx]);
}

static int set_row(cfg_ctx *ctx, cfg_entity *ent, const cfg_row *r, size_t idx, yaml_node_t *val) {
    char why[512];
    if (given_twice(ctx, ent, idx, val) != 0) return -1;
    if (node_is_null(val) && !(r->flags & CFG_REQUIRED)) return 0; /* keep the default */
    if (node_is_null(val) || val->type != YAML_SCALAR_NODE) {
        describe_row(r, why, sizeof(why));
        return cfg_fail(ctx, node_line(val), "must be %s, got %s", why, node_is_null(val) ? "nothing" : node_kind(val));
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
        if ((r->flags & CFG_REQUIRED) && r->type != CFG_T_LIST && !(ent->seen & ((uint64_t)1 << i))) {
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
    if (given_twice(ctx, ent, idx, val) != 0) return -1;
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

/* One string of a CFG_STRS row into *out, checked by the row's check. item
 * is its 1-based place in the list, 0 for a scalar given as the whole
 * value (then the message names no item). */
static int strs_item(cfg_ctx *ctx, const cfg_row *r, yaml_node_t *it, size_t item, char **out) {
    const char *v = (const char *)it->data.scalar.value;
    char why[160], at[32] = "";
    if (item) snprintf(at, sizeof(at), "item %zu ", item);
    if (r->check && r->check(v, why, sizeof(why)) != 0) {
        char gotq[128];
        cfg_quote(v, it->data.scalar.length, gotq, sizeof(gotq));
        return cfg_fail(ctx, node_line(it), "%s%s, got %s", at, why, gotq);
    }
    *out = cfg_strndup(v, it->data.scalar.length);
    if (!*out) return cfg_fail(ctx, node_line(it), "out of memory");
    return 0;
}

/* A YAML list of strings: each item must be a scalar that passes the row's
 * check; the array is NULL-terminated. One scalar is a list of one
 * ("listen: 127.0.0.1:8790" as "listen: [127.0.0.1:8790]"), for every
 * such key alike; a null (nothing given) leaves the list absent. */
static int walk_strs(cfg_ctx *ctx, cfg_entity *ent, const cfg_row *r, size_t idx, yaml_node_t *val) {
    if (given_twice(ctx, ent, idx, val) != 0) return -1;
    ent->seen |= (uint64_t)1 << idx;
    ent->lines[idx] = node_line(val);
    if (node_is_null(val)) return 0;
    if (val->type != YAML_SEQUENCE_NODE && val->type != YAML_SCALAR_NODE)
        return cfg_fail(ctx, node_line(val), "must be a string or a list of strings, got %s", node_kind(val));
    char ***arr = FIELD(ent->base, r->off, char **);
    size_t *count = FIELD(ent->base, r->count_off, size_t);
    int scalar = val->type == YAML_SCALAR_NODE;
    size_t n = scalar ? 1 : (size_t)(val->data.sequence.items.top - val->data.sequence.items.start);
    if (n == 0) return cfg_fail(ctx, node_line(val), "must not be an empty list");
    char **a = calloc(n + 1, sizeof(char *));
    if (!a) return cfg_fail(ctx, node_line(val), "out of memory");
    *arr = a;
    if (scalar) {
        if (strs_item(ctx, r, val, 0, &a[0]) != 0) return -1;
        *count = 1;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *it = yaml_document_get_node(ctx->doc, val->data.sequence.items.start[i]);
        if (!it || it->type != YAML_SCALAR_NODE || node_is_null(it))
            return cfg_fail(ctx, node_line(it ? it : val), "item %zu must be a string, got %s", i + 1,
                            it ? node_kind(it) : "nothing");
        if (strs_item(ctx, r, it, i + 1, &a[i]) != 0) return -1;
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
        if (k->type != YAML_SCALAR_NODE)
            return cfg_fail(ctx, node_line(k), "keys must be strings, got %s", node_kind(k));
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
        if (fits && (!r || (v->type == YAML_MAPPING_NODE && r->type != CFG_T_LIST && r->type != CFG_T_STRS))) {
            /* A key may be both a value and a mapping of finer keys
             * ("refund: false" or "refund: {tokens: false}"): a mapping
             * goes to the rows below it. */
            full[plen + klen] = '.';
            full[plen + klen + 1] = '\0';
            nested = has_rows_under(sc, full);
            if (nested) r = NULL;
            else if (r) full[plen + klen] = '\0';
        }
        if (r && r->type == CFG_T_LIST) {
            rc = walk_list(ctx, ent, r, idx, v);
        } else if (r && r->type == CFG_T_STRS) {
            rc = walk_strs(ctx, ent, r, idx, v);
        } else if (r) {
            rc = set_row(ctx, ent, r, idx, v);
        } else if (nested) {
            if (node_is_null(v)) rc = 0;
            else if (v->type != YAML_MAPPING_NODE)
                rc = cfg_fail(ctx, node_line(v), "must be a mapping, got %s", node_kind(v));
            else rc = walk_map(ctx, ent, v, full);
        } else {
            char hint[72];
            const char *known;
            suggest(sc, prefix, key, klen, hint, sizeof(hint));
            if (hint[0]) rc = cfg_fail(ctx, node_line(k), "unknown key (did you mean '%s'?)", hint);
            else if ((known = known_mistake(sc, prefix, key, klen)) != NULL)
                rc = cfg_fail(ctx, node_line(k), "%s", known);
            else rc = cfg_fail(ctx, node_line(k), "unknown key");
        }
        if (rc) return -1;
        cfg_path_pop(ctx, old);
    }
    return 0;
}

/* ---- for finish hooks ---- */

int cfg_entity_fail(cfg_ctx *ctx, cfg_entity *ent, const char *key, const char *fmt, ...) {
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

int cfg_entity_seen(const cfg_entity *ent, const char *key) {
    size_t idx;
    return find_row(ent->schema, key, &idx) && (ent->seen & ((uint64_t)1 << idx));
}

const char *cfg_basedir(const cfg_ctx *ctx) { return ctx->basedir; }

char *cfg_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void cfg_errno_text(int e, char *buf, size_t n) {
    if (strerror_r(e, buf, n) != 0) snprintf(buf, n, "error %d", e);
}

/* ---- loading ---- */

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

int cfg_load(const cfg_schema *root, const char *name, const char *basedir, const char *text, size_t len, void **out,
             char *err, size_t errlen) {
    cfg_ctx ctx = {.name = name, .basedir = basedir, .err = err, .errlen = errlen};
    yaml_parser_t ps;
    yaml_document_t doc;
    void *base = NULL;
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
    yaml_node_t *top = yaml_document_get_root_node(&doc);
    if (!top) {
        cfg_fail_plain(&ctx, 1, "%s", root->if_empty ? root->if_empty : "the file is empty");
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
    if (top->type != YAML_MAPPING_NODE) {
        cfg_fail_plain(&ctx, node_line(top), "the top level must be a mapping, got %s", node_kind(top));
        goto done;
    }
    base = calloc(1, root->size);
    if (!base || (root->init && root->init(base, name) != 0)) {
        cfg_fail_plain(&ctx, 1, "out of memory");
        goto done;
    }
    if (apply_defaults(&ctx, root, base) != 0) goto done;
    cfg_entity ent = {.schema = root, .base = base, .line = node_line(top)};
    if (walk_map(&ctx, &ent, top, "") != 0 || finish_entity(&ctx, &ent) != 0) goto done;
    *out = base;
    base = NULL;
    rc = 0;
done:
    if (base) {
        if (root->destroy) root->destroy(base);
        else {
            cfg_free_rows(root, base);
            free(base);
        }
    }
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&ps);
    return rc;
}

/* Reads a whole file of at most CFG_FILE_MAX bytes. */
static int read_file(cfg_ctx *ctx, const char *path, char **text, size_t *len) {
    char msg[128];
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        cfg_errno_text(errno, msg, sizeof(msg));
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
                cfg_errno_text(errno, msg, sizeof(msg));
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

int cfg_load_file(const cfg_schema *root, const char *path, void **out, char *err, size_t errlen) {
    cfg_ctx ctx = {.name = path, .err = err, .errlen = errlen};
    char *text;
    size_t len;
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    if (read_file(&ctx, path, &text, &len) != 0) return -1;
    /* Relative paths in the file are found next to it. */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? cfg_strndup(path, slash == path ? 1 : (size_t)(slash - path)) : NULL;
    int rc;
    if (slash && !dir) rc = cfg_fail_plain(&ctx, 0, "out of memory");
    else rc = cfg_load(root, path, dir ? dir : ".", text ? text : "", len, out, err, errlen);
    free(dir);
    free(text);
    return rc;
}

/* ---- schema listing ---- */

static void foreach_rows(const cfg_schema *sc, const char *prefix, void (*fn)(const cfg_key_info *, void *), void *ud) {
    for (size_t i = 0; i < sc->nrows; i++) {
        const cfg_row *r = &sc->rows[i];
        char path[256], range[96] = "", type[96];
        snprintf(path, sizeof(path), "%s%s", prefix, r->key);
        switch (r->type) {
        case CFG_T_INT: snprintf(type, sizeof(type), "integer"); break;
        case CFG_T_BYTES: snprintf(type, sizeof(type), "size"); break;
        case CFG_T_DOUBLE: snprintf(type, sizeof(type), "number"); break;
        case CFG_T_BOOL: snprintf(type, sizeof(type), "boolean"); break;
        case CFG_T_MODE: snprintf(type, sizeof(type), "mode"); break;
        case CFG_T_STR: snprintf(type, sizeof(type), "string"); break;
        case CFG_T_LIST: snprintf(type, sizeof(type), "mapping of %s", r->sub->what); break;
        case CFG_T_STRS: snprintf(type, sizeof(type), "list of strings"); break;
        case CFG_T_ENUM: {
            size_t n = (size_t)snprintf(type, sizeof(type), "one of ");
            for (int j = 0; r->names[j] && n < sizeof(type); j++)
                n += (size_t)snprintf(type + n, sizeof(type) - n, "%s%s", j ? ", " : "", r->names[j]);
            break;
        }
        }
        if (r->type == CFG_T_INT || r->type == CFG_T_BYTES) {
            char lo[32], hi[32];
            fmt_num(lo, sizeof(lo), r->min);
            fmt_num(hi, sizeof(hi), r->max);
            snprintf(range, sizeof(range), "%s..%s", lo, hi);
        } else if (r->type == CFG_T_DOUBLE) {
            describe_range(r, range, sizeof(range));
        } else if (r->type == CFG_T_MODE) {
            snprintf(range, sizeof(range), "0000..0777");
        }
        cfg_key_info info = {
            .path = path,
            .type = type,
            .def = r->def ? r->def : "",
            .range = range,
            .required = (r->flags & CFG_REQUIRED) != 0,
            .doc = r->doc,
        };
        fn(&info, ud);
        if (r->type == CFG_T_LIST) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s%s.<name>.", prefix, r->key);
            foreach_rows(r->sub, sub, fn, ud);
        }
    }
}

void cfg_foreach_key(const cfg_schema *sc, void (*fn)(const cfg_key_info *info, void *ud), void *ud) {
    foreach_rows(sc, "", fn, ud);
}
