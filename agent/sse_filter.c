/* sse_filter: see sse_filter.h. The stream is split into events by
 * lib/sse_framer (which holds each event's bytes until its blank line);
 * the filter decides which pass. */
#define _GNU_SOURCE
#include "sse_filter.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sse_framer.h"

struct sse_filter {
    sse_filter_out out;
    void *ud;
    sse_framer *framer; /* keeps each event's bytes until it is complete */
    int rc;             /* the out answers of the feed under way, folded */
    int through;        /* pass-through from here on */
    int gone;           /* out returned < 0 */
    int keep_usage;     /* sse_filter_set_strip(f, 0) */
    unsigned dropped;
};

static int on_event(void *ud, const sse_framer_event *ev);

sse_filter *sse_filter_new(sse_filter_out out, void *ud) {
    sse_filter *f = calloc(1, sizeof(*f));
    if (!f) return NULL;
    f->out = out;
    f->ud = ud;
    f->framer = sse_framer_new(SIZE_MAX, SSE_FRAMER_RAW, on_event, f);
    if (!f->framer) {
        free(f);
        return NULL;
    }
    return f;
}

void sse_filter_free(sse_filter *f) {
    if (!f) return;
    sse_framer_free(f->framer);
    free(f);
}

unsigned sse_filter_dropped(const sse_filter *f) { return f->dropped; }

void sse_filter_set_strip(sse_filter *f, int strip) { f->keep_usage = !strip; }

/* Passes data on; folds out's answer into f->rc. */
static void pass(sse_filter *f, const char *data, size_t len) {
    if (f->gone || len == 0) return;
    int r = f->out(f->ud, data, len);
    if (r < 0) {
        f->gone = 1;
        f->rc = r;
    } else if (r == 1 && f->rc == 0) {
        f->rc = 1;
    }
}

/* The usage-only chunk: a JSON object whose "choices" is an empty array
 * and whose "usage" is an object. */
static int usage_only(const sse_framer_event *ev) {
    /* Most events are text: look for the two names before parsing. */
    if (ev->data_lines == 0 || !memmem(ev->data, ev->data_len, "\"usage\"", 7) ||
        !memmem(ev->data, ev->data_len, "\"choices\"", 9))
        return 0;
    json_t *j = json_loads(ev->data, 0, NULL);
    json_t *ch = json_object_get(j, "choices");
    int yes = json_is_array(ch) && json_array_size(ch) == 0 && json_is_object(json_object_get(j, "usage"));
    json_decref(j);
    return yes;
}

/* A complete event (or a block without data: comments, blank lines) is
 * passed as it came, or left out. */
static int on_event(void *ud, const sse_framer_event *ev) {
    sse_filter *f = ud;
    if (!f->keep_usage && usage_only(ev)) f->dropped++;
    else pass(f, ev->raw, ev->raw_len);
    return f->gone ? -1 : 0;
}

/* What the framer holds goes on as it came. */
static void pass_held(sse_filter *f) {
    size_t n;
    const char *held = sse_framer_held(f->framer, &n);
    pass(f, held, n);
}

int sse_filter_feed(sse_filter *f, const char *data, size_t len) {
    f->rc = 0;
    if (f->gone) return -1;
    if (f->through) {
        pass(f, data, len);
        return f->rc;
    }
    int t = sse_framer_feed(f->framer, data, len);
    if (f->gone) return f->rc;
    size_t held;
    sse_framer_held(f->framer, &held);
    if (t != 0 || held > SSE_FILTER_MAX_EVENT) {
        /* Out of memory (the framer took none of data), or an event too
         * long to be usage: what is held goes on as it came, and so does
         * the rest of the stream. */
        f->through = 1;
        pass_held(f);
        if (t != 0) pass(f, data, len);
    }
    return f->rc;
}

int sse_filter_flush(sse_filter *f) {
    f->rc = 0;
    if (f->gone) return -1;
    if (!f->through) pass_held(f);
    f->through = 1; /* the stream ended: nothing more is held */
    return f->rc;
}
