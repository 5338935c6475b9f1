/* cfgtab: a table-driven loader that fills C structs from one YAML file.
 *
 * A schema (cfg_schema) is a table of rows (cfg_row): each names a key by
 * its dotted path relative to one struct ("redis.url", "burst.requests"),
 * its type, the field's offset, a default written as YAML text, a range,
 * flags and a one-sentence doc. cfg_load() parses one YAML document with
 * libyaml, allocates the root struct, applies the defaults (parsed by the
 * same code as the file, so a default can never bypass validation), walks
 * the mappings matching each key against the rows and fills the fields.
 * Unknown keys (with a "did you mean" hint for a near miss), duplicate
 * keys, missing required keys and bad values are errors, reported in one
 * message naming the file, the 1-based line and the full key path:
 *   sluiced.yaml:12: key 'deployments.gpt-4o.rpm': must be a positive integer, got "abc"
 * A CFG_T_LIST row holds named entries ("deployments"), each filled from
 * its own sub-schema. After a struct is filled, its schema's finish hook
 * applies cross-field rules and derived defaults, failing through
 * cfg_entity_fail() so that its messages have the same form.
 *
 * Which keys exist is not decided here: a schema module (config.c for
 * sluiced) owns the tables, the hooks and the public API. This header is
 * internal to agent/.
 *
 * Depends on libyaml and POSIX stdio. No globals; never prints, aborts or
 * exits; reentrant. Ownership: every string and array the loader allocates
 * belongs to the struct it filled; cfg_free_rows() releases them, and the
 * root schema's destroy hook releases a whole root struct. */
#ifndef SLUICE_CFGTAB_H
#define SLUICE_CFGTAB_H

#include <stddef.h>
#include <stdint.h>

#define CFG_MAX_ROWS 64 /* rows per schema (one bit each in cfg_entity.seen) */

typedef enum cfg_type {
    CFG_T_INT,    /* long long, decimal */
    CFG_T_BYTES,  /* long long, decimal with an optional k/kb/m/mb/g/gb suffix */
    CFG_T_DOUBLE, /* double */
    CFG_T_BOOL,   /* int, 0 or 1 */
    CFG_T_ENUM,   /* int, index into names */
    CFG_T_MODE,   /* int, octal permission bits */
    CFG_T_STR,    /* char *, never NULL */
    CFG_T_LIST,   /* array of named entries of a sub-schema, plus a count */
    CFG_T_STRS    /* char **, a YAML list of strings (each checked), plus a count */
} cfg_type;

#define CFG_REQUIRED 1u  /* must be given */
#define CFG_DERIVED 2u   /* no static default: the finish hook computes it */
#define CFG_MIN_OPEN 4u  /* min is exclusive (numbers) */
#define CFG_MAX_OPEN 8u  /* max is exclusive (numbers) */
#define CFG_NONEMPTY 16u /* strings: "" is not allowed */
#define CFG_NOECHO 32u   /* messages never repeat the value (it may hold a secret) */

typedef struct cfg_ctx cfg_ctx; /* one load in progress; opaque */
typedef struct cfg_schema cfg_schema;

/* Checks a string value; on failure writes "must be ..." into why and
 * returns non-zero. */
typedef int (*cfg_check_fn)(const char *s, char *why, size_t whylen);

typedef struct cfg_row {
    const char *key; /* dotted path within the schema's struct */
    cfg_type type;
    size_t off;               /* field offset */
    const char *def;          /* default as YAML text, NULL: zero / "" */
    double min, max;          /* numbers */
    unsigned flags;           /* CFG_REQUIRED, ... */
    const char *const *names; /* CFG_T_ENUM, NULL-terminated */
    cfg_check_fn check;       /* CFG_T_STR and CFG_T_STRS items, optional */
    const cfg_schema *sub;    /* CFG_T_LIST */
    size_t count_off;         /* CFG_T_LIST, CFG_T_STRS: offset of the size_t count */
    const char *doc;
} cfg_row;

/* A known mistake: the unknown key `key` directly under `prefix` ("redis.")
 * gets msg (the whole message after the location) instead of "unknown key". */
typedef struct cfg_hint {
    const char *prefix;
    const char *key;
    const char *msg;
} cfg_hint;

/* One struct being filled: the root or one named entry. Finish hooks read
 * base; the rest is the loader's. */
typedef struct cfg_entity {
    const cfg_schema *schema;
    void *base;
    int line;                /* where the entity starts */
    uint64_t seen;           /* rows given in the file */
    int lines[CFG_MAX_ROWS]; /* the line of each given row's value */
} cfg_entity;

struct cfg_schema {
    const char *what; /* "deployment", for messages */
    const cfg_row *rows;
    size_t nrows;    /* <= CFG_MAX_ROWS */
    size_t size;     /* size of the struct (list elements and the root) */
    size_t name_off; /* list entries: char *name (owned by the entry) */
    size_t line_off; /* list entries: int line */
    int (*check_name)(const char *name, size_t len, char *why, size_t whylen); /* list entries */
    /* Cross-field rules and derived defaults, after the rows are filled
     * and the required ones checked; fails through cfg_entity_fail(). */
    int (*finish)(cfg_ctx *ctx, cfg_entity *ent);
    const cfg_hint *hints; /* optional, ends with a NULL key */
    /* The root schema only: */
    const char *if_empty;                      /* the message for a document with nothing in it */
    int (*init)(void *base, const char *name); /* after zeroing, before defaults; -1: out of memory */
    void (*destroy)(void *base);               /* frees a root struct in any state of filling */
};

#if defined(__GNUC__)
#define CFG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CFG_PRINTF(a, b)
#endif

/* Parses text[0..len) (need not be NUL-terminated) as one YAML document
 * whose top level is a mapping, and fills a new struct of root->size bytes
 * from root's rows. name stands for the file in messages; basedir is what
 * relative paths in the file are resolved against (NULL: the working
 * directory; see cfg_basedir()). Returns 0 and the struct in *out (to be
 * freed by root->destroy), or -1 with *out = NULL and one message in err
 * (always NUL-terminated when errlen > 0; err may be NULL). */
int cfg_load(const cfg_schema *root, const char *name, const char *basedir, const char *text, size_t len, void **out,
             char *err, size_t errlen);

/* cfg_load() on the file at path (at most 16 MiB), with path as the name
 * and the file's directory as basedir. */
int cfg_load_file(const cfg_schema *root, const char *path, void **out, char *err, size_t errlen);

/* Frees what the loader allocated for sc's rows in the struct at base
 * (strings, string lists, list entries with their names) and clears those
 * fields. Not the struct itself. */
void cfg_free_rows(const cfg_schema *sc, void *base);

/* The directory relative paths are resolved against, or NULL for the
 * working directory. */
const char *cfg_basedir(const cfg_ctx *ctx);

/* Sets the load's message to "<file>:<line>: <text>" (or "<file>: <text>"
 * when line <= 0), about no key. Always returns -1. */
CFG_PRINTF(3, 4)
int cfg_fail_plain(cfg_ctx *ctx, int line, const char *fmt, ...);

/* For finish hooks: fails about `key` (a row key of ent's schema, or any
 * path below the entity), at the line where it was given, else at the
 * entity's line. Always returns -1. */
CFG_PRINTF(4, 5)
int cfg_entity_fail(cfg_ctx *ctx, cfg_entity *ent, const char *key, const char *fmt, ...);

/* 1 when the row `key` of ent's schema was given in the file. */
int cfg_entity_seen(const cfg_entity *ent, const char *key);

/* Decimal digits with an optional '-' in s[0..len): 1 and *out when they
 * parse, 0 on a syntax error, -1 on overflow. */
int cfg_parse_decimal(const char *s, size_t len, long long *out);

/* A NUL-terminated malloc'd copy of s[0..n), or NULL. */
char *cfg_strndup(const char *s, size_t n);

/* strerror_r() into buf, "error N" when it has no text. */
void cfg_errno_text(int e, char *buf, size_t n);

/* One row as text, for listings; valid during the callback only. */
typedef struct cfg_key_info {
    const char *path;  /* full key, list entries as <name>: "deployments.<name>.rpm" */
    const char *type;  /* "integer", "number", "boolean", "string", "size", "mode", "one of ..." */
    const char *def;   /* default as YAML text; "" when none or derived */
    const char *range; /* e.g. "1..60000", "(0, 1]", "" when free */
    int required;
    const char *doc;
} cfg_key_info;

/* Calls fn for every row of sc and, after a list row, of its sub-schema,
 * in table order. */
void cfg_foreach_key(const cfg_schema *sc, void (*fn)(const cfg_key_info *info, void *ud), void *ud);

/* Row initialisers: CFG_INT("rpm", struct_type, field, "default", min, max,
 * flags, "doc."), and so on. */
#define CFG_INT(k, st, f, d, lo, hi, fl, dc)                                                                           \
    {                                                                                                                  \
        .key = (k), .type = CFG_T_INT, .off = offsetof(st, f), .def = (d), .min = (lo), .max = (hi), .flags = (fl),    \
        .doc = (dc)                                                                                                    \
    }
#define CFG_BYTES(k, st, f, d, lo, hi, dc)                                                                             \
    { .key = (k), .type = CFG_T_BYTES, .off = offsetof(st, f), .def = (d), .min = (lo), .max = (hi), .doc = (dc) }
#define CFG_NUM(k, st, f, d, lo, hi, fl, dc)                                                                           \
    {                                                                                                                  \
        .key = (k), .type = CFG_T_DOUBLE, .off = offsetof(st, f), .def = (d), .min = (lo), .max = (hi), .flags = (fl), \
        .doc = (dc)                                                                                                    \
    }
#define CFG_BOOL(k, st, f, d, dc)                                                                                      \
    { .key = (k), .type = CFG_T_BOOL, .off = offsetof(st, f), .def = (d), .doc = (dc) }
#define CFG_ENUM(k, st, f, d, nm, dc)                                                                                  \
    { .key = (k), .type = CFG_T_ENUM, .off = offsetof(st, f), .def = (d), .names = (nm), .doc = (dc) }
#define CFG_MODE(k, st, f, d, dc)                                                                                      \
    { .key = (k), .type = CFG_T_MODE, .off = offsetof(st, f), .def = (d), .doc = (dc) }
#define CFG_STR(k, st, f, d, chk, dc)                                                                                  \
    { .key = (k), .type = CFG_T_STR, .off = offsetof(st, f), .def = (d), .check = (chk), .doc = (dc) }
#define CFG_STRF(k, st, f, d, chk, fl, dc)                                                                             \
    { .key = (k), .type = CFG_T_STR, .off = offsetof(st, f), .def = (d), .check = (chk), .flags = (fl), .doc = (dc) }
#define CFG_STRS(k, st, f, cnt, chk, dc)                                                                               \
    {                                                                                                                  \
        .key = (k), .type = CFG_T_STRS, .off = offsetof(st, f), .count_off = offsetof(st, cnt), .check = (chk),        \
        .doc = (dc)                                                                                                    \
    }
#define CFG_LIST(k, st, f, cnt, sb, fl, dc)                                                                            \
    {                                                                                                                  \
        .key = (k), .type = CFG_T_LIST, .off = offsetof(st, f), .count_off = offsetof(st, cnt), .sub = (sb),           \
        .flags = (fl), .doc = (dc)                                                                                     \
    }

#endif
