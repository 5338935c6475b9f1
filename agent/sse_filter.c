/* sse_filter: see sse_filter.h. */
#define _GNU_SOURCE
#include "sse_filter.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

struct sse_filter {
    sse_filter_out out;
    void *ud;
    char *buf;
    size_t len, cap;
    size_t scan;    /* bytes of buf already scanned for the event's end */
    int line_start; /* the scan is at the start of a line */
    int through;    /* pass-through from here on */
    int gone;       /* out returned < 0 */
    unsigned dropped;
};

sse_filter *sse_filter_new(sse_filter_out out, void *ud) {
    sse_filter *f = calloc(1, sizeof(*f));
    if (!f) return NULL;
    f->out = out;
    f->ud = ud;
    f->line_start = 1;
    return f;
}

void sse_filter_free(sse_filter *f) {
    if (!f) return;
    free(f->buf);
    free(f);
}

unsigned sse_filter_dropped(const sse_filter *f) { return f->dropped; }

/* Passes data on; folds out's answer into *rc. */
static void pass(sse_filter *f, const char *data, size_t len, int *rc) {
    if (f->gone || len == 0) return;
    int r = f->out(f->ud, data, len);
    if (r < 0) {
        f->gone = 1;
        *rc = r;
    } else if (r == 1 && *rc == 0) {
        *rc = 1;
    }
}

/* The data of an event (its data: lines joined with LF), into a new
 * string; NULL when it has none or memory ran out. */
static char *event_data(const char *ev, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    size_t dl = 0;
    int any = 0;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && ev[e] != '\r' && ev[e] != '\n') e++;
        if (e - i >= 5 && memcmp(ev + i, "data:", 5) == 0) {
            size_t v = i + 5;
            if (v < e && ev[v] == ' ') v++;
            if (any) d[dl++] = '\n';
            memcpy(d + dl, ev + v, e - v);
            dl += e - v;
            any = 1;
        }
        i = e;
        if (i < n && ev[i] == '\r') i++;
        if (i < n && ev[i] == '\n') i++;
    }
    d[dl] = '\0';
    if (!any) {
        free(d);
        return NULL;
    }
    return d;
}

/* The usage-only chunk: a JSON object whose "choices" is an empty array
 * and whose "usage" is an object. */
static int usage_only(const char *ev, size_t n) {
    /* Most events are text: look for the two names before parsing. */
    if (!memmem(ev, n, "\"usage\"", 7) || !memmem(ev, n, "\"choices\"", 9)) return 0;
    char *d = event_data(ev, n);
    if (!d) return 0;
    json_t *j = json_loads(d, 0, NULL);
    free(d);
    json_t *ch = json_object_get(j, "choices");
    int yes = json_is_array(ch) && json_array_size(ch) == 0 && json_is_object(json_object_get(j, "usage"));
    json_decref(j);
    return yes;
}

/* Finds the end of the first complete event in buf from f->scan on: the
 * offset just past its blank line, or 0 when it has not arrived. A CR at
 * the end of what came may be the first half of a CRLF: wait for more
 * (flush passes it as it is). */
static size_t event_end(sse_filter *f) {
    size_t i = f->scan;
    while (i < f->len) {
        char c = f->buf[i];
        if (c != '\r' && c != '\n') {
            f->line_start = 0;
            i++;
            continue;
        }
        size_t t = i + 1;
        if (c == '\r') {
            if (t == f->len) break; /* CR last: maybe a CRLF */
            if (f->buf[t] == '\n') t++;
        }
        if (f->line_start) {
            f->scan = 0;
            f->line_start = 1;
            return t;
        }
        f->line_start = 1;
        i = t;
    }
    f->scan = i;
    return 0;
}

/* Holds data; passes the complete events in it, leaving out usage-only
 * chunks. Returns 0, -1 when out of memory (data not taken) or -2 when
 * the event held grew too long (data taken). */
static int take(sse_filter *f, const char *data, size_t len, int *rc) {
    if (f->len + len > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        while (cap < f->len + len) cap *= 2;
        char *nb = realloc(f->buf, cap);
        if (!nb) return -1;
        f->buf = nb;
        f->cap = cap;
    }
    if (len == 0) return 0;
    memcpy(f->buf + f->len, data, len);
    f->len += len;
    size_t end;
    while (!f->gone && (end = event_end(f)) > 0) {
        if (usage_only(f->buf, end)) f->dropped++;
        else pass(f, f->buf, end, rc);
        memmove(f->buf, f->buf + end, f->len - end);
        f->len -= end;
    }
    if (f->len > SSE_FILTER_MAX_EVENT) return -2;
    return 0;
}

int sse_filter_feed(sse_filter *f, const char *data, size_t len) {
    int rc = 0;
    if (f->gone) return -1;
    if (f->through) {
        pass(f, data, len, &rc);
        return rc;
    }
    int t = take(f, data, len, &rc);
    if (t != 0) {
        /* Out of memory, or an event too long to be usage: what is held
         * goes on as it came, and so does the rest of the stream. */
        f->through = 1;
        pass(f, f->buf, f->len, &rc);
        f->len = 0;
        if (t == -1) pass(f, data, len, &rc);
    }
    return rc;
}

int sse_filter_flush(sse_filter *f) {
    int rc = 0;
    if (f->gone) return -1;
    pass(f, f->buf, f->len, &rc);
    f->len = 0;
    return rc;
}
