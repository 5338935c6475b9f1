/* sse_framer: a server-sent event stream split into events. See
 * sse_framer.h.
 *
 * The framer keeps only the line being read (its field name; its value
 * goes straight to where the field says) and the block so far (data,
 * event name), plus the last event ID: one pass over the bytes, values
 * copied in runs up to the next line end. With SSE_FRAMER_RAW it also
 * keeps every byte fed since the last block ended; each feed appends its
 * bytes first, so a position in the chunk is a position in the raw
 * buffer, and a block's bytes are raw[raw_start, its end). */
#include "sse_framer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_MAX 16 /* longest field name kept ("data", "event", "id": shorter) */

enum { TARGET_NONE = 0, TARGET_DATA, TARGET_EVENT, TARGET_ID };

struct sse_framer {
    sse_framer_fn fn;
    void *ud;
    size_t max_data;
    int keep_raw;
    int stop;     /* a callback's value < 0: nothing more is read */
    int bom;      /* BOM bytes matched at the start; 3 once past it */
    int after_cr; /* the last byte was CR: an LF next ends nothing more */
    int pending;  /* keep_raw: a block ended by a CR that was the last byte fed */
    /* the line being read */
    size_t line_len; /* bytes of it so far */
    char field[FIELD_MAX];
    size_t flen;
    int field_long; /* longer than FIELD_MAX: no field we know */
    int in_value;   /* past the ':' */
    int skip_space; /* the next byte is the value's first: a space there is dropped */
    int target;     /* where value bytes go */
    char id_line[SSE_FRAMER_ID_MAX + 1];
    size_t id_line_len;
    int id_bad; /* the id: value has a NUL or is too long: ignored */
    /* the block being read */
    char *data;
    size_t dlen, dcap;
    unsigned data_lines;
    int data_dropped;
    char type[SSE_FRAMER_TYPE_MAX + 1];
    size_t tlen;
    int type_long;
    /* the stream */
    char id[SSE_FRAMER_ID_MAX + 1];
    char *raw;
    size_t raw_len, raw_cap, raw_start;
};

sse_framer *sse_framer_new(size_t max_data, int flags, sse_framer_fn fn, void *ud) {
    sse_framer *f = calloc(1, sizeof(*f));
    if (!f) return NULL;
    f->fn = fn;
    f->ud = ud;
    f->max_data = max_data;
    f->keep_raw = (flags & SSE_FRAMER_RAW) != 0;
    return f;
}

void sse_framer_free(sse_framer *f) {
    if (!f) return;
    free(f->data);
    free(f->raw);
    free(f);
}

const char *sse_framer_held(const sse_framer *f, size_t *len) {
    if (!f->keep_raw || !f->raw) {
        *len = 0;
        return f->keep_raw ? "" : NULL;
    }
    *len = f->raw_len - f->raw_start;
    return f->raw + f->raw_start;
}

/* Makes room for need bytes in *buf (capacity *cap). Returns 0 or -1. */
static int reserve(char **buf, size_t *cap, size_t need, size_t first) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    char *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* Calls back for the block that just ended; its bytes end at raw_end. */
static void dispatch(sse_framer *f, size_t raw_end) {
    sse_framer_event ev = {0};
    if (f->data) f->data[f->dlen] = '\0';
    ev.data = f->data ? f->data : "";
    ev.data_len = f->dlen;
    ev.data_lines = f->data_lines;
    ev.data_dropped = f->data_dropped;
    f->type[f->tlen] = '\0';
    ev.type = f->type_long ? "" : f->type;
    ev.type_long = f->type_long;
    ev.id = f->id;
    if (f->keep_raw) {
        ev.raw = f->raw + f->raw_start;
        ev.raw_len = raw_end - f->raw_start;
        f->raw_start = raw_end;
    }
    int rc = f->fn(f->ud, &ev);
    if (rc < 0) f->stop = rc;
    f->dlen = 0;
    f->data_lines = 0;
    f->data_dropped = 0;
    f->tlen = 0;
    f->type_long = 0;
}

static int append_data(sse_framer *f, const char *s, size_t n) {
    if (f->data_dropped || n == 0) return 0;
    if (f->dlen + n > f->max_data) {
        f->data_dropped = 1;
        f->dlen = 0;
        return 0;
    }
    if (reserve(&f->data, &f->dcap, f->dlen + n + 1, 256) != 0) {
        f->data_dropped = 1; /* the event's data is lost; the stream goes on */
        f->dlen = 0;
        return -1;
    }
    memcpy(f->data + f->dlen, s, n);
    f->dlen += n;
    return 0;
}

static int append_value(sse_framer *f, const char *s, size_t n) {
    if (f->target == TARGET_DATA) return append_data(f, s, n);
    if (f->target == TARGET_EVENT) {
        if (f->tlen + n > SSE_FRAMER_TYPE_MAX) {
            f->type_long = 1;
            return 0;
        }
        memcpy(f->type + f->tlen, s, n);
        f->tlen += n;
    } else if (f->target == TARGET_ID && !f->id_bad) {
        if (f->id_line_len + n > SSE_FRAMER_ID_MAX || memchr(s, '\0', n)) {
            f->id_bad = 1;
            return 0;
        }
        memcpy(f->id_line + f->id_line_len, s, n);
        f->id_line_len += n;
    }
    return 0;
}

/* The field of the line is known (at its ':' or its end): where its value
 * goes. A new data line is joined to the block's data with LF. */
static int start_value(sse_framer *f) {
    int rc = 0;
    f->target = TARGET_NONE;
    if (f->field_long) return 0;
    if (f->flen == 4 && !memcmp(f->field, "data", 4)) {
        f->target = TARGET_DATA;
        if (f->data_lines++ > 0) rc = append_data(f, "\n", 1);
    } else if (f->flen == 5 && !memcmp(f->field, "event", 5)) {
        f->target = TARGET_EVENT;
        f->tlen = 0;
        f->type_long = 0;
    } else if (f->flen == 2 && !memcmp(f->field, "id", 2)) {
        f->target = TARGET_ID;
        f->id_line_len = 0;
        f->id_bad = 0;
    }
    return rc;
}

/* A line other than a blank one ended. */
static int end_line(sse_framer *f) {
    int rc = 0;
    if (!f->in_value) rc = start_value(f); /* a line without ':' is a field with an empty value */
    if (f->target == TARGET_ID && !f->id_bad) {
        memcpy(f->id, f->id_line, f->id_line_len);
        f->id[f->id_line_len] = '\0';
    }
    f->line_len = 0;
    f->flen = 0;
    f->field_long = 0;
    f->in_value = 0;
    f->skip_space = 0;
    f->target = TARGET_NONE;
    return rc;
}

/* Reads len bytes; byte i of data is raw[base + i] when keep_raw. */
static int scan(sse_framer *f, const char *data, size_t len, size_t base) {
    static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
    int rc = 0;
    size_t i = 0;
    if (f->pending && len > 0) {
        /* The block's blank line ended in the CR fed last: its LF, if
         * this is one, is the block's too. */
        f->pending = 0;
        if (data[0] == '\n') {
            f->after_cr = 0;
            i = 1;
        }
        dispatch(f, base + i);
        if (f->stop) return f->stop;
    }
    while (i < len) {
        unsigned char c = (unsigned char)data[i];
        if (f->bom < 3) {
            if (c == bom[f->bom]) {
                f->bom++;
                i++;
                continue;
            }
            /* Not a BOM after all: the bytes matched are the stream's own
             * (no line end among them: nothing is dispatched). */
            int matched = f->bom;
            f->bom = 3;
            if (matched && scan(f, (const char *)bom, (size_t)matched, 0) != 0) rc = -1;
        }
        if (f->after_cr) {
            f->after_cr = 0;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            int blank = f->line_len == 0;
            if (!blank && end_line(f) != 0) rc = -1;
            i++;
            if (c == '\r') {
                if (i < len && data[i] == '\n') i++;
                else if (i == len) f->after_cr = 1;
            }
            if (blank) {
                if (f->keep_raw && f->after_cr) {
                    f->pending = 1; /* the next byte may be this line end's LF */
                    continue;
                }
                dispatch(f, base + i);
                if (f->stop) return f->stop;
            }
            continue;
        }
        f->line_len++;
        if (!f->in_value) {
            if (c == ':') {
                f->in_value = 1;
                f->skip_space = 1;
                if (f->flen > 0 && start_value(f) != 0) rc = -1; /* ":..." is a comment */
            } else if (f->flen < sizeof(f->field)) {
                f->field[f->flen++] = (char)c;
            } else {
                f->field_long = 1;
            }
            i++;
            continue;
        }
        if (f->skip_space) {
            f->skip_space = 0;
            if (c == ' ') {
                i++;
                continue;
            }
        }
        size_t j = i;
        while (j < len && data[j] != '\r' && data[j] != '\n') j++;
        f->line_len += j - i - 1;
        if (append_value(f, data + i, j - i) != 0) rc = -1;
        i = j;
    }
    return rc;
}

int sse_framer_feed(sse_framer *f, const char *data, size_t len) {
    if (f->stop) return f->stop;
    size_t base = 0;
    if (f->keep_raw) {
        /* All the room this feed can need, taken first: it then reads
         * all of data or (out of memory) none of it. An event's data
         * grows by at most a byte per byte fed. */
        size_t most = f->dlen + len < f->max_data ? f->dlen + len : f->max_data;
        if (reserve(&f->raw, &f->raw_cap, f->raw_len + len, 4096) != 0 ||
            reserve(&f->data, &f->dcap, most + 1, 256) != 0)
            return -1;
        if (len) memcpy(f->raw + f->raw_len, data, len);
        base = f->raw_len;
        f->raw_len += len;
    }
    int rc = scan(f, data, len, base);
    if (f->stop) return f->stop;
    if (f->keep_raw && f->raw_start > 0) {
        memmove(f->raw, f->raw + f->raw_start, f->raw_len - f->raw_start);
        f->raw_len -= f->raw_start;
        f->raw_start = 0;
    }
    return rc;
}
