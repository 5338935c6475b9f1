/* run_input: see run_input.h. */
#define _POSIX_C_SOURCE 200809L
#include "run_input.h"

#include "estimate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- run_set ------------------------------------------------------------------ */

static uint64_t key_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t find_slot(char **slots, size_t cap, const char *key) {
    size_t i = (size_t)key_hash(key) & (cap - 1);
    while (slots[i] && strcmp(slots[i], key) != 0) i = (i + 1) & (cap - 1);
    return i;
}

int run_set_has(const run_set *s, const char *key) {
    if (s->cap == 0) return 0;
    return s->slots[find_slot(s->slots, s->cap, key)] != NULL;
}

static int grow(run_set *s) {
    size_t cap = s->cap ? s->cap * 2 : 1024;
    char **slots = calloc(cap, sizeof(*slots));
    if (!slots) return -1;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i]) slots[find_slot(slots, cap, s->slots[i])] = s->slots[i];
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

int run_set_add(run_set *s, const char *key) {
    if ((s->n + 1) * 2 > s->cap && grow(s) != 0) return -1;
    size_t i = find_slot(s->slots, s->cap, key);
    if (s->slots[i]) return 0;
    s->slots[i] = strdup(key);
    if (!s->slots[i]) return -1;
    s->n++;
    return 1;
}

void run_set_free(run_set *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->slots[i]);
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

/* ---- requests ------------------------------------------------------------------ */

char *run_id_key(const json_t *id) {
    if (!json_is_string(id) && !json_is_integer(id)) return NULL;
    return json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
}

/* How run_request_parse() reads a line: duplicate keys make it not JSON. */
#define RUN_LINE_FLAGS JSON_REJECT_DUPLICATES

char *run_line_key(const char *line, size_t len, long long lineno) {
    json_t *body = json_loadb(line, len, RUN_LINE_FLAGS, NULL);
    json_t *id = json_object_get(body, "id");
    char *key = NULL;
    if (id && (json_is_string(id) || json_is_integer(id))) {
        key = run_id_key(id);
    } else {
        json_t *num = json_integer(lineno);
        key = num ? run_id_key(num) : NULL;
        json_decref(num);
    }
    json_decref(body);
    return key;
}

int run_line_blank(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r') return 0;
    return 1;
}

/* One body estimator for the proxy and `sluice run` (lib/core/estimate.c):
 * a chat body's rule also counts Anthropic's "system", so both styles'
 * bodies estimate alike. */
void run_estimate_split(const json_t *body, long long *input, long long *output) {
    estimate e;
    estimate_request(body, ESTIMATE_CHAT, &e);
    *input = e.input;
    *output = e.output;
}

long long run_estimate_tokens(const json_t *body) {
    long long in, out;
    run_estimate_split(body, &in, &out);
    return in + out;
}

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return -1;
}

int run_class_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > RUN_CLASS_NAME_MAX) return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

/* Takes the optional name field k ("lane", "tenant", "tag") out of body into dst.
 * Returns 0, or -1 with a message when it is not a valid name. */
static int take_class_name(json_t *body, const char *k, char *dst, size_t n, char *err, size_t errlen) {
    json_t *v = json_object_get(body, k);
    if (!v) return 0;
    const char *s = json_string_value(v);
    if (!s || strlen(s) != json_string_length(v) || !run_class_name_ok(s)) {
        snprintf(err, errlen, "\"%s\" must be a string of 1 to %d of A-Z a-z 0-9 . _ : -", k, RUN_CLASS_NAME_MAX);
        return -1;
    }
    snprintf(dst, n, "%s", s);
    json_object_del(body, k);
    return 0;
}

int run_request_parse(const char *line, size_t len, long long lineno, const char *model, run_request *out, char *err,
                      size_t errlen) {
    memset(out, 0, sizeof(*out));
    json_error_t je;
    json_t *body = json_loadb(line, len, RUN_LINE_FLAGS, &je);
    json_t *id = body ? json_object_get(body, "id") : NULL;
    if (id && (json_is_string(id) || json_is_integer(id))) out->id = json_incref(id);
    else out->id = json_integer(lineno);
    out->key = run_id_key(out->id);
    if (!out->id || !out->key) {
        json_decref(body);
        return fail(err, errlen, "out of memory");
    }
    if (!body) {
        snprintf(err, errlen, "not JSON: %s (column %d)", je.text, je.column);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(body)) {
        fail(err, errlen, "not a JSON object");
    } else if (id && !json_is_string(id) && !json_is_integer(id)) {
        fail(err, errlen, "\"id\" must be a string or an integer");
    } else if (!json_is_array(json_object_get(body, "messages")) ||
               json_array_size(json_object_get(body, "messages")) == 0) {
        fail(err, errlen, "\"messages\" must be a non-empty array");
    } else if (json_is_true(json_object_get(body, "stream"))) {
        fail(err, errlen, "\"stream\": true is not supported by sluice run");
    } else if (take_class_name(body, "lane", out->lane, sizeof(out->lane), err, errlen) != 0 ||
               take_class_name(body, "tenant", out->tenant, sizeof(out->tenant), err, errlen) != 0 ||
               take_class_name(body, "tag", out->tag, sizeof(out->tag), err, errlen) != 0) {
        /* err says which */
    } else {
        json_object_del(body, "id");
        if (model && !json_object_get(body, "model")) json_object_set_new(body, "model", json_string(model));
        out->has_model = json_object_get(body, "model") != NULL;
        estimate e;
        estimate_request(body, ESTIMATE_CHAT, &e);
        out->input_tokens = e.input;
        out->output_tokens = e.output;
        out->partial = e.media > 0;
        out->tokens = out->input_tokens + out->output_tokens;
        out->has_max_tokens = json_is_integer(json_object_get(body, "max_tokens"));
        out->body = json_dumps(body, JSON_COMPACT);
        if (!out->body) fail(err, errlen, "out of memory");
        else {
            out->body_len = strlen(out->body);
            rc = 0;
        }
    }
    json_decref(body);
    return rc;
}

void run_request_free(run_request *r) {
    json_decref(r->id);
    free(r->key);
    free(r->body);
    memset(r, 0, sizeof(*r));
}
