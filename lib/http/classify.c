/* classify: HTTP status + body + x-should-retry -> class and retryability.
 * The decision table is in docs/http-feedback.md; keep them in step. */
#define _POSIX_C_SOURCE 200809L
#include "classify.h"

#include "lex.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* Concurrent json_loadb() calls are safe only when jansson was built with
 * atomic builtins (its one-time hash seed set-up and refcounts use them). */
#ifndef JANSSON_THREAD_SAFE_REFCOUNT
#error "classify.c needs a jansson built with __atomic or __sync builtins"
#endif

static const struct {
    const char *name;
    bool retryable;
} class_info[CLASSIFY__COUNT] = {
#define CLASSIFY_INFO_(sym, name, retry) {name, retry},
    CLASSIFY_CLASS_MAP(CLASSIFY_INFO_)
#undef CLASSIFY_INFO_
};

const char *classify_name(classify_class cls) {
    if ((int)cls < 0 || (int)cls >= CLASSIFY__COUNT) return "unknown";
    return class_info[cls].name;
}

bool classify_retryable(classify_class cls) {
    if ((int)cls < 0 || (int)cls >= CLASSIFY__COUNT) return false;
    return class_info[cls].retryable;
}

/* Case-insensitive search for a lowercase needle in a counted haystack. */
static bool contains(const char *hay, size_t hlen, const char *needle) {
    size_t n = strlen(needle);
    if (hay == NULL || n == 0 || hlen < n) return false;
    for (size_t i = 0; i + n <= hlen; i++) {
        size_t k = 0;
        while (k < n && lower(hay[i + k]) == needle[k]) k++;
        if (k == n) return true;
    }
    return false;
}

/* What the body says, whether or not it was JSON. */
typedef struct facts {
    const char *code; /* error.code, "" when absent (borrowed from out) */
    const char *type; /* error.type, "" when absent */
    const char *text; /* where wording is searched: the message, else the raw body */
    size_t text_len;
    bool rpc_exhausted; /* error.status "RESOURCE_EXHAUSTED" (Google's 429) */
} facts;

static void copy_field(char dst[CLASSIFY_FIELD_SZ], json_t *v) {
    dst[0] = '\0';
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = strlen(s);
        if (n >= CLASSIFY_FIELD_SZ) n = CLASSIFY_FIELD_SZ - 1;
        memcpy(dst, s, n);
        dst[n] = '\0';
    } else if (json_is_integer(v)) {
        snprintf(dst, CLASSIFY_FIELD_SZ, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    }
}

/* A google.protobuf.Duration as JSON ("26s", "0.5s", "1.000340s") in ms,
 * rounded up; -1 when v is not one (or beyond a day). */
static long long duration_ms(const json_t *v) {
    const char *s = json_string_value(v);
    if (!s) return -1;
    long long whole = 0, frac_ms = 0, scale = 100;
    size_t i = 0;
    int digits = 0, extra = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        whole = whole * 10 + (s[i] - '0');
        if (whole > 86400) return -1;
    }
    if (s[i] == '.') {
        for (i++; s[i] >= '0' && s[i] <= '9'; i++, digits++) {
            if (scale > 0) frac_ms += (s[i] - '0') * scale, scale /= 10;
            else if (s[i] != '0') extra = 1;
        }
    }
    if (!digits || s[i] != 's' || s[i + 1] != '\0') return -1;
    return whole * 1000 + frac_ms + extra;
}

/* The retryDelay of a RetryInfo among error.details (Google's errors). */
static long long retry_info_ms(const json_t *details) {
    size_t i;
    json_t *d;
    json_array_foreach(details, i, d) {
        const char *type = json_string_value(json_object_get(d, "@type"));
        if (type && strstr(type, "google.rpc.RetryInfo")) return duration_ms(json_object_get(d, "retryDelay"));
    }
    return -1;
}

/* Fills out->code, out->type and the message from a parsed body:
 *   {"error": {"code": .., "type": .., "message": ..}}           OpenAI, Azure
 *   {"type": "error", "error": {"type": .., "message": ..}}      Anthropic
 *   {"error": "message"}, {"code": .., "message": ..}            others
 *   [ {...} ]                                                    first element */
static void read_json(json_t *root, classify_result *out, facts *f) {
    if (json_is_array(root)) root = json_array_get(root, 0);
    if (!json_is_object(root)) return;
    json_t *err = json_object_get(root, "error");
    json_t *holder = json_is_object(err) ? err : root;
    copy_field(out->code, json_object_get(holder, "code"));
    copy_field(out->type, json_object_get(holder, "type"));
    if (holder == root && strcmp(out->type, "error") == 0) out->type[0] = '\0';
    /* Anthropic names a spend stop in error.details.error_code. */
    json_t *det = json_object_get(holder, "details");
    if (out->code[0] == '\0' && json_is_object(det)) copy_field(out->code, json_object_get(det, "error_code"));
    if (json_is_array(det)) out->retry_delay_ms = retry_info_ms(det);
    json_t *st = json_object_get(holder, "status");
    f->rpc_exhausted = json_is_string(st) && strcmp(json_string_value(st), "RESOURCE_EXHAUSTED") == 0;
    /* Without a message string the raw body stays the text searched. */
    json_t *msg = json_is_string(err) ? err : json_object_get(holder, "message");
    if (json_is_string(msg)) {
        f->text = json_string_value(msg);
        f->text_len = json_string_length(msg);
    }
}

/* A marker named by the body: equal to code or type, or inside the text. */
static bool says(const facts *f, const char *marker) {
    return strcmp(f->code, marker) == 0 || strcmp(f->type, marker) == 0 || contains(f->text, f->text_len, marker);
}

static bool says_quota(const facts *f, int status) {
    if (says(f, "insufficient_quota") || says(f, "billing_error") || says(f, "billing_hard_limit_reached") ||
        says(f, "enforced_spend_limit_reached"))
        return true;
    /* Anthropic's spend limits: "You have reached your [specified]
     * [workspace] API usage limits ... You will regain access on <date>"
     * (400 for a limit set in the console, 429 for the tier's cap). */
    if ((status == 400 || status == 429) && contains(f->text, f->text_len, "api usage limits")) return true;
    /* OpenAI's insufficient_quota wording; Gemini words its per-minute 429
     * RESOURCE_EXHAUSTED (with a retryDelay) the same, and that is a rate
     * limit. */
    if (!f->rpc_exhausted && contains(f->text, f->text_len, "exceeded your current quota")) return true;
    /* Anthropic: a permission or invalid-request error about credit. */
    if ((strcmp(f->type, "permission_error") == 0 || status == 400 || status == 403) &&
        (contains(f->text, f->text_len, "credit balance") || contains(f->text, f->text_len, "purchase credits")))
        return true;
    /* A 403 that talks about quota, billing or credit is a quota stop, not
     * an auth problem. (429 bodies are not searched for "quota": Azure's
     * rate-limit messages link to a quota-increase page.) */
    if (status == 403 && (contains(f->text, f->text_len, "quota") || contains(f->text, f->text_len, "billing") ||
                          contains(f->text, f->text_len, "credit")))
        return true;
    return false;
}

static classify_class by_status(int status) {
    switch (status) {
    case 401:
    case 403: return CLASSIFY_AUTH;
    case 402: return CLASSIFY_QUOTA_EXHAUSTED;
    case 408: return CLASSIFY_TIMEOUT;
    case 429: return CLASSIFY_RATE_LIMITED;
    case 503:
    case 529: return CLASSIFY_OVERLOADED;
    default: break;
    }
    if (status >= 500) return CLASSIFY_SERVER_ERROR;
    return CLASSIFY_BAD_REQUEST; /* 3xx, other 4xx */
}

/* x-should-retry: 1 true, 0 false, -1 absent or unrecognised. */
static int should_retry(const char *v, size_t len) {
    if (v == NULL) return -1;
    while (len > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
    if (len == 4 && contains(v, len, "true")) return 1;
    if (len == 5 && contains(v, len, "false")) return 0;
    return -1;
}

static classify_class decide(const classify_input *in, classify_result *out) {
    if (in->transport == CLASSIFY_NET_TIMEOUT) return CLASSIFY_TIMEOUT;
    if (in->transport != CLASSIFY_NET_NONE) return CLASSIFY_TRANSPORT;
    int status = in->status;
    if (status < 200 || status > 599) return CLASSIFY_TRANSPORT; /* no response, or no valid final status */
    if (status < 300) return CLASSIFY_OK;

    facts f = {out->code, out->type, in->body, in->body_len, false};
    if (in->body == NULL) f.text_len = 0;
    json_t *root = NULL;
    if (in->body != NULL && in->body_len > 0 && in->body_len <= CLASSIFY_MAX_JSON_BODY) {
        json_error_t jerr;
        root = json_loadb(in->body, in->body_len, JSON_ALLOW_NUL, &jerr);
        if (root != NULL) read_json(root, out, &f);
    }

    classify_class cls;
    if (says_quota(&f, status)) cls = CLASSIFY_QUOTA_EXHAUSTED;
    else if (says(&f, "context_length_exceeded")) cls = CLASSIFY_BAD_REQUEST;
    else if (says(&f, "overloaded_error")) cls = CLASSIFY_OVERLOADED;
    else cls = by_status(status);
    json_decref(root);
    return cls;
}

classify_class classify_response(const classify_input *in, classify_result *out) {
    static const classify_input none = {0, CLASSIFY_NET_NONE, NULL, 0, NULL, 0};
    classify_result scratch;
    if (out == NULL) out = &scratch;
    if (in == NULL) in = &none;
    out->code[0] = '\0';
    out->type[0] = '\0';
    out->overridden = false;
    out->retry_delay_ms = -1;
    out->cls = decide(in, out);
    out->retryable = classify_retryable(out->cls);
    int sr = should_retry(in->should_retry, in->should_retry_len);
    bool pinned = out->cls == CLASSIFY_QUOTA_EXHAUSTED || out->cls == CLASSIFY_OK;
    if (sr == 0 && out->retryable) {
        out->retryable = false;
        out->overridden = true;
    } else if (sr == 1 && !out->retryable && !pinned) {
        out->retryable = true;
        out->overridden = true;
    }
    return out->cls;
}

classify_class classify_status_body(int status, const char *body, size_t body_len, classify_result *out) {
    classify_input in = {status, CLASSIFY_NET_NONE, body, body_len, NULL, 0};
    return classify_response(&in, out);
}
