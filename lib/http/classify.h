/* classify: what an LLM provider's response means for the caller.
 *
 * From the HTTP status, the response body and the optional x-should-retry
 * header, classify_response() decides one class (rate limited, quota
 * exhausted, overloaded, bad request, auth, server error, timeout,
 * transport, ok) and whether a retry can help. The body is read as JSON
 * with jansson when it is JSON (error.code, error.type, error.message,
 * the top-level type of Anthropic errors, the first element of an array
 * body); otherwise, and in addition, substring checks on the raw body
 * apply. The rules are a table in docs/http-feedback.md.
 *
 * x-should-retry: "false" always makes a response non-retryable; "true"
 * makes every class retryable except QUOTA_EXHAUSTED and OK: a billing or
 * quota stop does not clear by retrying, and a retry storm against it only
 * burns the fleet's retry budget (the OpenAI SDK lets the header override
 * everything; sluice deliberately does not for quota).
 *
 * Thread-safe and free of global state of its own; jansson allocates while
 * parsing (its one-time hash seed set-up uses atomic builtins; classify.c
 * refuses to build against a jansson without them). Bodies
 * larger than CLASSIFY_MAX_JSON_BODY are not parsed as JSON. Depends on
 * jansson. */
#ifndef SLUICE_CLASSIFY_H
#define SLUICE_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>

#define CLASSIFY_MAX_JSON_BODY (256 * 1024)
/* Size of the code/type buffers in classify_result, NUL included. */
#define CLASSIFY_FIELD_SZ 64

/* X(enum suffix, name, retryable by default) */
#define CLASSIFY_CLASS_MAP(X)                                                                                          \
    X(OK, "ok", false)                                                                                                 \
    X(RATE_LIMITED, "rate_limited", true)                                                                              \
    X(QUOTA_EXHAUSTED, "quota_exhausted", false)                                                                       \
    X(OVERLOADED, "overloaded", true)                                                                                  \
    X(BAD_REQUEST, "bad_request", false)                                                                               \
    X(AUTH, "auth", false)                                                                                             \
    X(SERVER_ERROR, "server_error", true)                                                                              \
    X(TIMEOUT, "timeout", true)                                                                                        \
    X(TRANSPORT, "transport", true)

typedef enum classify_class {
#define CLASSIFY_ENUM_(sym, name, retry) CLASSIFY_##sym,
    CLASSIFY_CLASS_MAP(CLASSIFY_ENUM_)
#undef CLASSIFY_ENUM_
        CLASSIFY__COUNT
} classify_class;

/* What went wrong below HTTP, when nothing (or nothing complete) came back. */
typedef enum classify_transport {
    CLASSIFY_NET_NONE = 0, /* a response arrived (status is meaningful) */
    CLASSIFY_NET_TIMEOUT,  /* the attempt timed out */
    CLASSIFY_NET_ERROR     /* connect/TLS/reset/protocol error */
} classify_transport;

/* The facts about one attempt. Zero-initialise, then fill what you have:
 * {0} alone means "no response, no detail" and classifies as TRANSPORT. */
typedef struct classify_input {
    int status;                   /* HTTP status, 0 when there was no response */
    classify_transport transport; /* wins over status when not NONE */
    const char *body;             /* response body, need not be NUL-terminated; may be NULL */
    size_t body_len;
    const char *should_retry; /* x-should-retry value or NULL */
    size_t should_retry_len;
} classify_input;

typedef struct classify_result {
    classify_class cls;
    bool retryable;               /* after x-should-retry */
    bool overridden;              /* x-should-retry changed retryable */
    char code[CLASSIFY_FIELD_SZ]; /* error.code from a JSON body, "" when absent, truncated */
    char type[CLASSIFY_FIELD_SZ]; /* error.type (or Anthropic's error.type), "" when absent */
    /* Google's RetryInfo in error.details ("retryDelay": "26s", a
     * google.protobuf.Duration: decimal seconds and "s"), in ms rounded
     * up; -1 when the body gives none (Gemini's 429 carries no
     * Retry-After header). */
    long long retry_delay_ms;
} classify_result;

/* Classifies one attempt into *out (both non-NULL; a NULL in is treated as
 * {0}). Returns out->cls. Never fails: unreadable bodies fall back to the
 * status and substring rules. */
classify_class classify_response(const classify_input *in, classify_result *out);

/* Shorthand for status and body only. */
classify_class classify_status_body(int status, const char *body, size_t body_len, classify_result *out);

/* "ok", "rate_limited", ...; "unknown" for a value out of range. Static. */
const char *classify_name(classify_class cls);

/* The class's default retryability (before x-should-retry). */
bool classify_retryable(classify_class cls);

#endif
