/* usage_sse: usage from a server-sent event stream, incrementally. See
 * usage_sse.h.
 *
 * The reader keeps only the line being read (its field name, the data of
 * the event so far) and the counts: one pass over the bytes, values copied
 * in runs up to the next line end. */
#include "usage_sse.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_MAX 16 /* longest field name kept ("data", "event": shorter) */
#define EVENT_MAX 48 /* longest event name kept */

enum { TARGET_NONE = 0, TARGET_DATA, TARGET_EVENT };

struct usage_sse {
    int bom;      /* BOM bytes matched at the start; 3 once past it */
    int after_cr; /* the last byte was CR: an LF next ends nothing more */
    /* the line being read */
    size_t line_len; /* bytes of it so far */
    char field[FIELD_MAX];
    size_t flen;
    int field_long; /* longer than FIELD_MAX: no field we know */
    int in_value;   /* past the ':' */
    int skip_space; /* the next byte is the value's first: a space there is dropped */
    int target;     /* where value bytes go */
    /* the event being read */
    char *data;
    size_t dlen, dcap;
    int data_lines;
    int data_long; /* its data exceeded USAGE_SSE_MAX_EVENT */
    char event[EVENT_MAX];
    size_t elen;
    int event_long;
    /* what the stream said */
    usage_counts most; /* per field, the largest seen; -1 unseen */
    usage_sse_state st;
};

usage_sse *usage_sse_new(void) {
    usage_sse *r = calloc(1, sizeof(*r));
    if (r) r->most = (usage_counts){-1, -1, -1, -1, -1};
    return r;
}

void usage_sse_free(usage_sse *r) {
    if (!r) return;
    free(r->data);
    free(r);
}

static int contains(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, k)) return 1;
    return 0;
}

static int is_name(const usage_sse *r, const char *name) {
    return !r->event_long && r->elen == strlen(name) && !memcmp(r->event, name, r->elen);
}

static void keep_most(long long *slot, long long v) {
    if (v > *slot) *slot = v;
}

/* The top level of data is an object with an "error" member (OpenAI's
 * and Azure's errors in a stream). */
static int data_is_error(const char *data, size_t len) {
    if (!contains(data, len, "\"error\"")) return 0;
    json_error_t e;
    json_t *j = json_loadb(data, len, 0, &e);
    int yes = json_is_object(j) && json_object_get(j, "error") != NULL;
    json_decref(j);
    return yes;
}

static void dispatch(usage_sse *r) {
    if (r->data_lines > 0) {
        usage_sse_state *st = &r->st;
        const char *d = r->data ? r->data : "";
        size_t n = r->data_long ? 0 : r->dlen;
        st->events++;
        if (r->data_long) st->oversized++;
        if (is_name(r, "message_stop") || is_name(r, "response.completed") || is_name(r, "response.incomplete") ||
            is_name(r, "response.failed") || (n == 6 && !memcmp(d, "[DONE]", 6)))
            st->done = 1;
        if (is_name(r, "error") || data_is_error(d, n)) st->error = 1;
        usage_counts u;
        if (n && contains(d, n, "\"usage\"") && usage_split(d, n, &u) == 0) {
            st->usage_events++;
            keep_most(&r->most.input, u.input);
            keep_most(&r->most.output, u.output);
            keep_most(&r->most.cache_read, u.cache_read);
            keep_most(&r->most.cache_write, u.cache_write);
            keep_most(&r->most.tokens, u.tokens);
            /* Anthropic's message_start counts the input and one output
             * token: the output is final only in message_delta. */
            if (!is_name(r, "message_start") && !contains(d, n, "\"type\":\"message_start\"")) st->final_usage = 1;
        }
    }
    r->dlen = 0;
    r->data_lines = 0;
    r->data_long = 0;
    r->elen = 0;
    r->event_long = 0;
}

static int append_data(usage_sse *r, const char *s, size_t n) {
    if (r->data_long || n == 0) return 0;
    if (r->dlen + n > USAGE_SSE_MAX_EVENT) {
        r->data_long = 1;
        r->dlen = 0;
        return 0;
    }
    if (r->dlen + n > r->dcap) {
        size_t cap = r->dcap ? r->dcap : 256;
        while (cap < r->dlen + n) cap *= 2;
        char *p = realloc(r->data, cap);
        if (!p) {
            r->data_long = 1; /* the event is lost; the stream goes on */
            r->dlen = 0;
            return -1;
        }
        r->data = p;
        r->dcap = cap;
    }
    memcpy(r->data + r->dlen, s, n);
    r->dlen += n;
    return 0;
}

static int append_value(usage_sse *r, const char *s, size_t n) {
    if (r->target == TARGET_DATA) return append_data(r, s, n);
    if (r->target == TARGET_EVENT) {
        if (r->elen + n > sizeof(r->event)) {
            r->event_long = 1;
            return 0;
        }
        memcpy(r->event + r->elen, s, n);
        r->elen += n;
    }
    return 0;
}

/* The field of the line is known (at its ':' or its end): where its value
 * goes. A new data line is joined to the event's data with LF. */
static int start_value(usage_sse *r) {
    int rc = 0;
    r->target = TARGET_NONE;
    if (r->field_long) return 0;
    if (r->flen == 4 && !memcmp(r->field, "data", 4)) {
        r->target = TARGET_DATA;
        if (r->data_lines++ > 0) rc = append_data(r, "\n", 1);
    } else if (r->flen == 5 && !memcmp(r->field, "event", 5)) {
        r->target = TARGET_EVENT;
        r->elen = 0;
        r->event_long = 0;
    }
    return rc;
}

static int end_line(usage_sse *r) {
    int rc = 0;
    if (r->line_len == 0) {
        dispatch(r);
    } else if (!r->in_value) {
        rc = start_value(r); /* a line without ':' is a field with an empty value */
    }
    r->line_len = 0;
    r->flen = 0;
    r->field_long = 0;
    r->in_value = 0;
    r->skip_space = 0;
    r->target = TARGET_NONE;
    return rc;
}

int usage_sse_feed(usage_sse *r, const char *data, size_t len) {
    static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
    int rc = 0;
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)data[i];
        if (r->bom < 3) {
            if (c == bom[r->bom]) {
                r->bom++;
                i++;
                continue;
            }
            /* Not a BOM after all: the bytes matched are the stream's own. */
            int matched = r->bom;
            r->bom = 3;
            if (matched && usage_sse_feed(r, (const char *)bom, (size_t)matched) != 0) rc = -1;
        }
        if (r->after_cr) {
            r->after_cr = 0;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            if (end_line(r) != 0) rc = -1;
            r->after_cr = c == '\r';
            i++;
            continue;
        }
        r->line_len++;
        if (!r->in_value) {
            if (c == ':') {
                r->in_value = 1;
                r->skip_space = 1;
                if (r->flen > 0 && start_value(r) != 0) rc = -1; /* ":..." is a comment */
            } else if (r->flen < sizeof(r->field)) {
                r->field[r->flen++] = (char)c;
            } else {
                r->field_long = 1;
            }
            i++;
            continue;
        }
        if (r->skip_space) {
            r->skip_space = 0;
            if (c == ' ') {
                i++;
                continue;
            }
        }
        size_t j = i;
        while (j < len && data[j] != '\r' && data[j] != '\n') j++;
        r->line_len += j - i - 1;
        if (append_value(r, data + i, j - i) != 0) rc = -1;
        i = j;
    }
    return rc;
}

int usage_sse_result(const usage_sse *r, usage_counts *out) {
    *out = (usage_counts){-1, -1, -1, -1, -1};
    if (!r->st.usage_events) return -1;
    out->input = r->most.input > 0 ? r->most.input : 0;
    out->output = r->most.output > 0 ? r->most.output : 0;
    long long cache = r->most.cache_read > 0 ? r->most.cache_read : 0;
    out->cache_read = cache < out->input ? cache : out->input;
    long long write = r->most.cache_write > 0 ? r->most.cache_write : 0;
    out->cache_write = write < out->input - out->cache_read ? write : out->input - out->cache_read;
    out->tokens = out->input + out->output;
    if (r->most.tokens > out->tokens) out->tokens = r->most.tokens;
    return 0;
}

void usage_sse_get_state(const usage_sse *r, usage_sse_state *out) { *out = r->st; }
