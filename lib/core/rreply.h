/* rreply: a RESP2 reply parser, the client half that lib/core/resp.c (the
 * request parser of sluiced) does not have.
 *
 * rreply_parse() looks at the bytes received so far on a connection and
 * either returns one complete reply as a tree (simple string, error,
 * integer, bulk string, null, array), says that more bytes are needed, or
 * rejects the input as malformed. It never reads past len and never trusts
 * a length it was sent: bulk lengths, array sizes and nesting depth are
 * bounded by the limits below, checked before any allocation. Pure: no
 * I/O, no globals, never prints or aborts; a reply tree is owned by the
 * caller and freed with rreply_free() (NULL is a no-op). */
#ifndef SLUICE_RREPLY_H
#define SLUICE_RREPLY_H

#include <stddef.h>

#define RREPLY_MAX_BULK (1024 * 1024) /* bytes in one bulk string */
#define RREPLY_MAX_ELEMENTS 65536     /* elements in one array */
#define RREPLY_MAX_DEPTH 8            /* nested arrays */

typedef enum rreply_type {
    RREPLY_STATUS = 1, /* +OK */
    RREPLY_ERROR,      /* -ERR ... (str holds the text after '-') */
    RREPLY_INTEGER,    /* :42 */
    RREPLY_BULK,       /* $3 foo */
    RREPLY_NIL,        /* $-1 or *-1 */
    RREPLY_ARRAY       /* *n */
} rreply_type;

typedef struct rreply {
    rreply_type type;
    long long integer; /* RREPLY_INTEGER */
    char *str;         /* STATUS, ERROR, BULK: NUL-terminated (bulk may hold NULs) */
    size_t len;
    size_t elements; /* ARRAY */
    struct rreply **element;
} rreply;

/* Parses one reply from buf[0..len). Returns 1 with *out (the caller's) and
 * *consumed (bytes it took), 0 when the reply is not complete yet (nothing
 * is consumed), -1 on malformed input or an exceeded limit (message in err,
 * when errlen > 0), or -2 when out of memory. */
int rreply_parse(const char *buf, size_t len, rreply **out, size_t *consumed, char *err, size_t errlen);

void rreply_free(rreply *r);

#endif
