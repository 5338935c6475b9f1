/* usage_sse: usage from a server-sent event stream, incrementally. See
 * usage_sse.h.
 *
 * The stream is split into events by sse_framer (which keeps only the
 * line being read and the event's data); the reader keeps the counts. */
#include "usage_sse.h"

#include "sse_framer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct usage_sse {
    sse_framer *framer;
    usage_rec most; /* per field, the largest seen; -1 unseen */
    usage_sse_state st;
};

static int on_event(void *ud, const sse_framer_event *ev);

usage_sse *usage_sse_new(void) {
    usage_sse *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->framer = sse_framer_new(USAGE_SSE_MAX_EVENT, 0, on_event, r);
    if (!r->framer) {
        free(r);
        return NULL;
    }
    r->most = USAGE_REC_UNKNOWN;
    return r;
}

void usage_sse_free(usage_sse *r) {
    if (!r) return;
    sse_framer_free(r->framer);
    free(r);
}

static int contains(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, k)) return 1;
    return 0;
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

static int on_event(void *ud, const sse_framer_event *ev) {
    usage_sse *r = ud;
    if (ev->data_lines == 0) return 0; /* no event: comments, blank lines */
    usage_sse_state *st = &r->st;
    const char *d = ev->data, *t = ev->type;
    size_t n = ev->data_len;
    st->events++;
    if (ev->data_dropped) st->oversized++;
    if (!strcmp(t, "message_stop") || !strcmp(t, "response.completed") || !strcmp(t, "response.incomplete") ||
        !strcmp(t, "response.failed") || (n == 6 && !memcmp(d, "[DONE]", 6)))
        st->done = 1;
    if (!strcmp(t, "error") || data_is_error(d, n)) st->error = 1;
    usage_rec u;
    if (n && contains(d, n, "\"usage\"") && usage_split(d, n, &u) == 0) {
        st->usage_events++;
        keep_most(&r->most.input, u.input);
        keep_most(&r->most.output, u.output);
        keep_most(&r->most.cache_read, u.cache_read);
        keep_most(&r->most.cache_write, u.cache_write);
        keep_most(&r->most.tokens, u.tokens);
        /* Anthropic's message_start counts the input and one output
         * token: the output is final only in message_delta. */
        if (strcmp(t, "message_start") != 0 && !contains(d, n, "\"type\":\"message_start\"")) st->final_usage = 1;
    }
    return 0;
}

int usage_sse_feed(usage_sse *r, const char *data, size_t len) { return sse_framer_feed(r->framer, data, len); }

int usage_sse_result(const usage_sse *r, usage_rec *out) {
    *out = USAGE_REC_UNKNOWN;
    if (!r->st.usage_events) return -1;
    out->input = r->most.input > 0 ? r->most.input : 0;
    out->output = r->most.output > 0 ? r->most.output : 0;
    long long cache = r->most.cache_read > 0 ? r->most.cache_read : 0;
    out->cache_read = cache < out->input ? cache : out->input;
    long long write = r->most.cache_write > 0 ? r->most.cache_write : 0;
    out->cache_write = write < out->input - out->cache_read ? write : out->input - out->cache_read;
    out->tokens = out->input + out->output;
    /* A total above the parts: output they leave out (usage.c). */
    if (r->most.tokens > out->tokens) {
        if (r->most.input >= 0) out->output = r->most.tokens - out->input;
        out->tokens = r->most.tokens;
    }
    return 0;
}

void usage_sse_get_state(const usage_sse *r, usage_sse_state *out) { *out = r->st; }
