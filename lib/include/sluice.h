/* sluice.h: the public C API of libsluice, a fleet-wide quota governor for
 * LLM API calls.
 *
 * This header is the whole API. Names are prefixed sl_ / SL_. Functions
 * return 0 (or a documented non-negative value) or a negative SL_E* code;
 * sl_strerror() names a code and sl_errmsg() gives the detail. The library
 * never aborts, exits or prints; it returns an error.
 *
 * A worker opens one governor (sl_gov) per process and shares it between
 * all its threads. Before each provider call it acquires a grant (waiting
 * for its slot in the fleet's schedule), makes the call, and settles the
 * grant with what the provider said. On a failure it asks sl_may_retry()
 * before retrying. sl_curl_perform() does all of that around one libcurl
 * easy handle; sl_call_start() does it asynchronously, for any number of
 * calls at once on an event loop the application owns (<sluice_uv.h>
 * attaches it to libuv). The guide with a complete worker is
 * docs/library.md.
 *
 * Two modes, one API:
 *   daemon    socket_path: talk to the local `sluiced` on its UNIX socket;
 *   embedded  config_path / config_text / redis_url: run the agent engine
 *             (the same code as sluiced) on a background thread.
 *
 * Versioned structs. Every struct the caller fills (sl_options,
 * sl_request, sl_call_opts) or that the library fills in caller memory
 * (sl_call_report, sl_verdict) starts with `size`. Initialise it with the
 * matching *_init() macro, which records the size the caller was compiled
 * with; the library reads or writes only that much, so a struct can grow
 * at its end without breaking old callers. Zero in a field means "the
 * default" unless stated otherwise.
 *
 * Ownership. A returned `const char *` is borrowed (its lifetime is stated);
 * a returned `char *` is the caller's. Every *_new / *_open has a
 * *_free / *_close that accepts NULL. Strings passed in are copied when the
 * library needs them after the call returns.
 *
 * Threading. Everything taking an sl_gov is thread-safe unless stated:
 * many threads may share one governor, and a slow slot for one caller
 * never blocks another. The callbacks of sl_acquire_async() and
 * sl_may_retry_async() run on the governor's internal thread; they must
 * not block and must not call the blocking functions (sl_acquire,
 * sl_may_retry, sl_curl_perform), which return SL_EINVAL there. The
 * governed calls (sl_caller, sl_call) belong to the thread of the loop
 * they are attached to, and so do their callbacks. */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SL_API __attribute__((visibility("default")))
#else
#define SL_API
#endif

/* ---- errors -------------------------------------------------------------- */

/* Error codes: X(name, value, message). One table generates the enum and
 * sl_strerror(), as libuv's UV_ERRNO_MAP does. New codes are added at the
 * end; values never change. */
#define SL_ERRNO_MAP(X)                                                                                                \
    X(OK, 0, "success")                                                                                                \
    X(EINVAL, -1, "invalid argument")                                                                                  \
    X(ENOMEM, -2, "out of memory")                                                                                     \
    X(ESHED, -3, "shed: no slot within the max wait (see the retry-after and reason)")                                 \
    X(EUNKNOWN, -4, "unknown deployment")                                                                              \
    X(ETIMEDOUT, -5, "timed out")                                                                                      \
    X(EUNAVAIL, -6, "governor unavailable (sluiced unreachable, or no Redis and fail-closed)")                         \
    X(ECANCELED, -7, "canceled")                                                                                       \
    X(ECLOSING, -8, "the governor is shutting down")                                                                   \
    X(EREDIS, -9, "Redis error")                                                                                       \
    X(EPROTO, -10, "protocol error")                                                                                   \
    X(EIO, -11, "I/O error")                                                                                           \
    X(ENORETRY, -12, "the fleet's retry budget is spent")                                                              \
    X(EDEADLINE, -13, "the deadline would pass before the next attempt")                                               \
    X(EFATAL, -14, "not retryable: the provider refused for good (quota, auth, request)")                              \
    X(EALREADY, -15, "the call already completed or was canceled")                                                     \
    X(EATTEMPTS, -16, "the attempts allowed are used up")                                                              \
    X(ETOOBIG, -17, "the response is larger than the configured limit")

typedef enum sl_errno {
#define SL_ERRNO_ENUM(name, value, msg) SL_##name = value,
    SL_ERRNO_MAP(SL_ERRNO_ENUM)
#undef SL_ERRNO_ENUM
} sl_errno;

/* A static message for code; "unknown error" for values not in the table. */
SL_API const char *sl_strerror(int code);

/* The version of this header, for compile-time tests:
 *   #if SLUICE_VERSION_NUMBER >= 200   (0.2.0 or later)
 * MAJOR * 10000 + MINOR * 100 + PATCH. CMake reads the project's version
 * from these three lines: they are its one source. */
#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0
#define SLUICE_VERSION_NUMBER (SLUICE_VERSION_MAJOR * 10000 + SLUICE_VERSION_MINOR * 100 + SLUICE_VERSION_PATCH)

/* The version of the library loaded at run time, "MAJOR.MINOR.PATCH"
 * (compare with the header's to catch a stale libsluice.so). Static. */
SL_API const char *sl_version(void);

/* The clock of every deadline in this API: CLOCK_MONOTONIC in ms. A
 * deadline 2 s from now is sl_now_ms() + 2000. Thread-safe. */
SL_API int64_t sl_now_ms(void);

/* ---- the governor -------------------------------------------------------- */

typedef struct sl_gov sl_gov;

typedef struct sl_options {
    size_t size; /* set by sl_options_init() */

    /* Daemon mode: the UNIX socket of the local sluiced. */
    const char *socket_path;

    /* Embedded mode: exactly one of these three (and no socket_path).
     * config_path  a sluiced YAML file (docs/configuration.md);
     * config_text  the same YAML as text;
     * redis_url    with `deployments`: the YAML of the deployments mapping,
     *              e.g. "{gpt-4o: {rpm: 60, tpm: 150000}}" (flow or block).
     * Settings other than redis.url and deployments then take defaults. */
    const char *config_path;
    const char *config_text;
    const char *redis_url;
    const char *deployments;
    const char *agent_id; /* embedded: name in the fleet's heartbeats;
                                    NULL: agent.id of the config, else host:pid */

    long long connect_timeout_ms; /* daemon: connecting (and the PING at open); 0: 1000 */
    long long call_timeout_ms;    /* replies that are not a slot (sl_may_retry); 0: 5000 */
    int max_idle_connections;     /* daemon: idle ACQUIRE connections kept; 0: 8, < 0: none */
} sl_options;

SL_API void sl_options_init_size(sl_options *opt, size_t size);
#define sl_options_init(opt) sl_options_init_size((opt), sizeof(*(opt)))

/* Opens a governor. On success returns 0 and *out (the caller's; close it
 * with sl_close()). On error returns SL_E*, sets *out to NULL, and
 * sl_errmsg(NULL) on this thread tells why (a config error names the file,
 * line and key; a daemon that does not answer names the socket).
 * Daemon mode checks at once that sluiced answers (PING); embedded mode
 * starts connecting to Redis in the background: acquires made before the
 * connection resolves wait for it, then fall back to local pacing if Redis
 * is unreachable (as sluiced does). opt and its strings are copied. */
SL_API int sl_open(const sl_options *opt, sl_gov **out);

/* Closes gov: refuses new calls with SL_ECLOSING, answers every waiting
 * caller with SL_ECLOSING (giving waiting reservations back), delivers the
 * settles already made, and stops the internal thread. Grants still held
 * may be settled afterwards: that returns SL_ECLOSING and frees them.
 * NULL is a no-op. Called from a callback, it returns at once and the
 * internal thread finishes the close by itself. */
SL_API void sl_close(sl_gov *gov);

/* The detail of the last error of the calling thread on gov ("" when its
 * last call on gov succeeded). sl_errmsg(NULL): the last failed sl_open()
 * of this thread. Borrowed, valid until this thread's next call on gov. */
SL_API const char *sl_errmsg(const sl_gov *gov);

/* After SL_ESHED from this thread's last call on gov: the reason ("rpm",
 * "tpm", "paused", "daily", "concurrency", "too_large", "lane", "ceiling",
 * "tenant_daily", "breaker", "quota", "tag"; docs/protocol.md) and the hint
 * after which asking again can succeed (ms; -1 = never, e.g. too_large, or
 * "tag": no member of the group may serve the request). After
 * SL_ENORETRY, the reason is "retry_budget". Otherwise "" and -1.
 * Borrowed like sl_errmsg(). */
SL_API const char *sl_shed_reason(const sl_gov *gov);
SL_API long long sl_retry_after_ms(const sl_gov *gov);

/* "daemon" or "embedded". Static. */
SL_API const char *sl_mode(const sl_gov *gov);

/* ---- acquire ------------------------------------------------------------- */

typedef struct sl_grant sl_grant;

typedef struct sl_request {
    size_t size;            /* set by sl_request_init() */
    const char *deployment; /* required: a deployment, or a group of
                                    them (the grant names the member) */
    long long tokens;       /* estimate: prompt + max output (0: requests only);
                                    see input_tokens below */
    long long max_wait_ms;  /* longest wait for the slot; < 0 (the default
                                    set by init): the deployment's max_wait_ms,
                                    or with a deadline, the time left */
    int64_t deadline_ms;    /* absolute, on sl_now_ms(); 0: none */
    const char *lane;       /* NULL: the deployment's default lane; a
                                    lane it does not have is SL_EINVAL */
    const char *tenant;     /* NULL: none; an unconfigured tenant
                                    falls in the "default" class */
    const char *tag;        /* NULL: any. With a group, only members
                                    carrying this tag may serve (none may:
                                    SL_ESHED "tag", never); with a
                                    deployment, one without it is SL_EINVAL */
    /* The estimate split as the provider counts it (docs/providers.md):
     * the input tokens and the max output tokens (max_tokens). Give both
     * (>= 0; tokens is then their sum, or 0) or neither (-1, set by
     * init). A deployment that counts input and output apart (style
     * anthropic: itpm, otpm) needs them whenever the call has tokens:
     * tokens alone is SL_EINVAL there. */
    long long input_tokens;
    long long output_tokens;
    /* Nonzero: the estimate was counted with the provider's own tokenizer
     * and is charged as given, never multiplied by the deployment's
     * learned estimate ratio, and teaches it nothing (ACQUIRE ... EXACT;
     * a deployment configured `estimate: exact` treats every call so).
     * 0 by init. */
    int exact;
    /* Nonzero: the estimate leaves part of the prompt out or guesses it
     * (images, audio, files): multiplied by the learned ratio like any
     * other, but it teaches the ratio nothing (ACQUIRE ... PARTIAL; needs
     * a sluiced that knows PARTIAL in daemon mode). 0 by init. */
    int partial;
} sl_request;

SL_API void sl_request_init_size(sl_request *req, size_t size);
#define sl_request_init(req) sl_request_init_size((req), sizeof(*(req)))

/* Waits for a slot and returns a grant in *out (the caller's: settle it).
 * Never waits past req->deadline_ms: the wait allowed is capped by the
 * time left, so a slot beyond it is shed at once (SL_ESHED, with the
 * reason and a retry-after hint from sl_shed_reason() and
 * sl_retry_after_ms()); if the slot still slips past the deadline (a
 * fleet-wide pause arrived meanwhile), the reservation is given back and
 * SL_ETIMEDOUT is returned at the deadline.
 * For a group, the member is chosen by the agent (docs/protocol.md,
 * ACQUIRE): sl_grant_deployment() and sl_grant_endpoint() name it.
 * Returns 0, SL_ESHED, SL_ETIMEDOUT, SL_EUNKNOWN (no such deployment or
 * group), SL_EUNAVAIL (fail-closed without Redis, or sluiced unreachable),
 * SL_ECLOSING, SL_EINVAL, SL_ENOMEM, SL_EIO. Blocks the calling thread
 * only. */
SL_API int sl_acquire(sl_gov *gov, const sl_request *req, sl_grant **out);

/* What an asynchronous acquire produced. Valid during the callback only,
 * except `grant`, which becomes the callback's to settle. */
typedef struct sl_result {
    int status;               /* SL_OK or SL_E*, as sl_acquire() returns */
    sl_grant *grant;          /* SL_OK: the grant (settle it), else NULL */
    const char *shed_reason;  /* SL_ESHED: as sl_shed_reason(), else "" */
    long long retry_after_ms; /* SL_ESHED: the hint, -1 never/none */
    const char *message;      /* detail, "" when none; never NULL */
} sl_result;

typedef void (*sl_acquire_cb)(void *arg, const sl_result *r);

/* Names one asynchronous call, for sl_cancel(). Never reused by a gov. */
typedef uint64_t sl_call_id;

/* The asynchronous sl_acquire(): returns 0 at once and later runs cb
 * exactly once on the governor's thread (never from within this call),
 * with the same outcomes; a deadline is enforced by a timer. *id
 * (optional) names the call for sl_cancel(). On an error return cb never
 * runs. req is copied. */
SL_API int sl_acquire_async(sl_gov *gov, const sl_request *req, sl_acquire_cb cb, void *arg, sl_call_id *id);

/* Cancels an asynchronous acquire whose callback has not started: returns
 * 0 and the callback will never run; a reservation already made is given
 * back to the fleet. Returns SL_EALREADY when the callback has started or
 * run (then it owns the grant), SL_EINVAL for a NULL gov. Thread-safe,
 * also from a callback. */
SL_API int sl_cancel(sl_gov *gov, sl_call_id id);

/* Borrowed accessors, valid until the grant is settled. */
SL_API const char *sl_grant_id(const sl_grant *g); /* "<deployment>:<n>", or "<deployment>:L<n>" when granted locally */
/* The deployment the slot is on: the one asked for, or for a group the
 * member chosen. Send the call there, and ask sl_may_retry() about it. */
SL_API const char *sl_grant_deployment(const sl_grant *g);
/* For a group, the chosen member's endpoint from the configuration
 * (deployments.<name>.endpoint); "" when it has none or when the request
 * named a deployment. */
SL_API const char *sl_grant_endpoint(const sl_grant *g);
SL_API long long sl_grant_waited_ms(const sl_grant *g); /* from acquire to the slot */
SL_API long long sl_grant_tokens(const sl_grant *g);    /* the reserved estimate */
SL_API int sl_grant_local(const sl_grant *g);           /* 1: paced locally (Redis down) */

/* ---- estimate ------------------------------------------------------------ */

/* What an acquire would get now (ESTIMATE, docs/protocol.md), reserving
 * nothing: so a product can say "about 20 seconds" before it commits. */
typedef struct sl_estimate_result {
    size_t size;              /* set by sl_estimate_result_init() */
    int granted;              /* 1: a slot within the max wait; 0: it would be shed */
    long long wait_ms;        /* granted: the wait to the slot; -1 when shed */
    long long tokens;         /* the estimate that would be reserved */
    char deployment[65];      /* the deployment, or the group's member that would serve it */
    char reason[24];          /* shed: the reason (as sl_shed_reason()); "" when granted */
    long long retry_after_ms; /* shed: the hint, -1 never; -1 when granted */
    int local;                /* 1: from the agent's local pacing (Redis unreachable), 0: the fleet's schedule */
} sl_estimate_result;

SL_API void sl_estimate_result_init_size(sl_estimate_result *r, size_t size);
#define sl_estimate_result_init(r) sl_estimate_result_init_size((r), sizeof(*(r)))

/* The wait sl_acquire(gov, req) would get now, computed by the same
 * decision (the reserve script run dry in Redis, or the local pacing
 * without Redis), reserving nothing and changing nothing. req as for
 * sl_acquire(); its deadline, if any, caps the max wait judged against.
 * Fills *out and returns 0 when a slot is within the max wait, SL_ESHED
 * when the acquire would be shed (out and sl_shed_reason() /
 * sl_retry_after_ms() say why and when), or SL_EUNKNOWN, SL_EINVAL,
 * SL_EUNAVAIL, SL_ETIMEDOUT (call_timeout_ms), SL_ECLOSING, SL_ENOMEM,
 * SL_EIO. Blocking, like sl_may_retry(). */
SL_API int sl_estimate(sl_gov *gov, const sl_request *req, sl_estimate_result *out);

/* ---- settle and retry ---------------------------------------------------- */

typedef enum sl_outcome {
    SL_OUTCOME_OK = 0,    /* the provider served the call */
    SL_OUTCOME_THROTTLED, /* 429 rate limited: feeds the fleet's AIMD */
    SL_OUTCOME_FAILED,    /* any other failure */
    SL_OUTCOME_CANCELLED, /* not sent: gives the reservation back */
    SL_OUTCOME_QUOTA      /* a hard quota error (insufficient_quota,
                                    billing): takes the deployment out for
                                    the whole fleet until the reset the
                                    headers give (else the agent's hold) */
} sl_outcome;

/* One response header, NUL-terminated name and value. */
typedef struct sl_header {
    const char *name;
    const char *value;
} sl_header;

/* What the provider reported a call used; -1 (init) where unknown. */
typedef struct sl_usage {
    size_t size;            /* set by sl_usage_init() */
    long long tokens;       /* combined: input + output */
    long long input_tokens; /* all of the prompt, cache reads and writes included */
    long long output_tokens;
    long long cache_read_tokens; /* the part of input_tokens read from the
                                    provider's prompt cache (Anthropic does
                                    not count it toward its input limit) */
} sl_usage;

SL_API void sl_usage_init_size(sl_usage *u, size_t size);
#define sl_usage_init(u) sl_usage_init_size((u), sizeof(*(u)))

/* Closes grant g with what happened, and frees g (always, even on error).
 * actual_tokens: the usage the provider reported (< 0: unknown, the
 * estimate stands). headers: the provider's response headers (all of
 * them, or NULL/0): Retry-After, retry-after-ms, x-ratelimit-*,
 * anthropic-ratelimit-*, RateLimit are understood; a wait they ask for
 * pauses the deployment once for the whole fleet, and acquires made on
 * this governor after sl_settle() returns see the pause. Does not wait for
 * Redis: settles are coalesced and sent in the background (sl_close()
 * delivers those still queued). Returns 0, SL_EINVAL (bad outcome, or a
 * malformed grant), SL_ECLOSING, SL_ENOMEM. Safe from callbacks. */
SL_API int sl_settle(sl_grant *g, long long actual_tokens, sl_outcome outcome, const sl_header *headers,
                     size_t nheaders);

/* sl_settle() with the usage per dimension (usage may be NULL: unknown).
 * Each dimension of the deployment is corrected as its provider counts
 * (docs/providers.md): Azure's and OpenAI's tokens and Anthropic's input
 * keep the estimate charged at admission (only a larger count is
 * charged), Anthropic's output is corrected to output_tokens. The
 * headers' limits and remaining counts are news for the whole fleet (a
 * lower limit is adopted, others' use of the key taken off the rate).
 * input_tokens and output_tokens go together; cache_read_tokens needs
 * input_tokens and is at most it; tokens, when given with them, is their
 * sum: SL_EINVAL otherwise. Returns as sl_settle(). */
SL_API int sl_settle_usage(sl_grant *g, const sl_usage *usage, sl_outcome outcome, const sl_header *headers,
                           size_t nheaders);

/* May the fleet retry a failed call on deployment now? Takes one retry
 * from the fleet's retry budget when it answers yes. Returns 1 (retry), 0
 * (do not; *retry_after_ms, optional, says when the budget refills, and
 * sl_shed_reason() is "retry_budget"), or SL_EUNKNOWN, SL_ETIMEDOUT
 * (call_timeout_ms), SL_EUNAVAIL, SL_ECLOSING, SL_EINVAL. Blocking. */
SL_API int sl_may_retry(sl_gov *gov, const char *deployment, long long *retry_after_ms);

/* status: 1, 0 or SL_E* as sl_may_retry() returns. */
typedef void (*sl_retry_cb)(void *arg, int status, long long retry_after_ms);

/* The asynchronous sl_may_retry(): cb runs once on the governor's thread.
 * Returns 0, or SL_E* (then cb never runs). */
SL_API int sl_may_retry_async(sl_gov *gov, const char *deployment, sl_retry_cb cb, void *arg);

/* ---- provider responses -------------------------------------------------- */

/* Response classes: X(name, text). Same order as lib/http/classify.h. */
#define SL_CLASS_MAP(X)                                                                                                \
    X(OK, "ok")                                                                                                        \
    X(RATE_LIMITED, "rate_limited")       /* 429: retry after the wait */                                              \
    X(QUOTA_EXHAUSTED, "quota_exhausted") /* billing/quota: never retry */                                             \
    X(OVERLOADED, "overloaded")           /* 503/529: retry with backoff */                                            \
    X(BAD_REQUEST, "bad_request")         /* 4xx, context too long: never retry */                                     \
    X(AUTH, "auth")                       /* 401/403: never retry */                                                   \
    X(SERVER_ERROR, "server_error")       /* 5xx: retry within budget */                                               \
    X(TIMEOUT, "timeout")                 /* the attempt timed out */                                                  \
    X(TRANSPORT, "transport")             /* connect/TLS/reset */

typedef enum sl_class {
#define SL_CLASS_ENUM(name, text) SL_CLASS_##name,
    SL_CLASS_MAP(SL_CLASS_ENUM)
#undef SL_CLASS_ENUM
        SL_CLASS__COUNT
} sl_class;

/* "ok", "rate_limited", ...; "unknown" out of range. Static. */
SL_API const char *sl_class_name(int cls);

/* What one provider response means. Filled by sl_verdict_of() or
 * sl_capture_verdict(). */
typedef struct sl_verdict {
    size_t size;        /* set by sl_verdict_init() */
    int cls;            /* sl_class */
    int retryable;      /* after x-should-retry */
    int http_status;    /* 0: no response */
    sl_outcome outcome; /* for sl_settle(): SL_OUTCOME_QUOTA for
                                    quota_exhausted, THROTTLED for
                                    rate_limited, FAILED for other errors */
    long long tokens;   /* usage reported by the provider, -1 unknown */
    long long pause_ms; /* wait the headers ask for (Retry-After, or,
                                    when rate limited or out of quota,
                                    remaining 0 with a reset), -1 none */
    int over_cap;       /* pause_ms beyond the cap: do not retry now */
    char code[64];      /* error.code of a JSON error body, "" */
    /* The usage split as sl_usage_of() reads it; -1 unknown. */
    long long input_tokens, output_tokens, cache_read_tokens;
} sl_verdict;

SL_API void sl_verdict_init_size(sl_verdict *v, size_t size);
#define sl_verdict_init(v) sl_verdict_init_size((v), sizeof(*(v)))

/* Classifies a response you received yourself. status 0 means no response
 * (transport: timed_out says whether it was a timeout). body may be NULL;
 * headers are the response's. retry_after_cap_ms <= 0: 120000. Fills *out
 * (its size set by sl_verdict_init()). Pure; returns 0 or SL_EINVAL. */
SL_API int sl_verdict_of(int status, int timed_out, const char *body, size_t body_len, const sl_header *headers,
                         size_t nheaders, long long retry_after_cap_ms, sl_verdict *out);

/* The tokens a provider response body reports: usage.total_tokens, else
 * prompt_tokens + completion_tokens (OpenAI, Azure), else input_tokens +
 * the cache reads and writes + output_tokens (Anthropic); server-sent
 * event streams are scanned for the usage of their events. -1 when none.
 * Pure. */
SL_API long long sl_usage_tokens(const char *body, size_t len);

/* The same usage split for sl_settle_usage(): fills *out (its size set by
 * sl_usage_init()) and returns 0, or SL_EINVAL for bad arguments, or
 * SL_EUNKNOWN when the body reports no usage (out then all -1).
 * input_tokens is all of the prompt: OpenAI's prompt_tokens, Anthropic's
 * input_tokens + cache_creation_input_tokens + cache_read_input_tokens;
 * cache_read_tokens OpenAI's prompt_tokens_details.cached_tokens or
 * Anthropic's cache_read_input_tokens; output_tokens the total less the
 * input where total_tokens is the larger (Gemini's OpenAI-compatible usage
 * leaves its thinking tokens out of completion_tokens), so that tokens is
 * always input_tokens + output_tokens. Pure. */
SL_API int sl_usage_of(const char *body, size_t len, sl_usage *out);

/* ---- libcurl ------------------------------------------------------------- */

/* The easy handles below are libcurl `CURL *`, passed as void * so this
 * header does not need curl.h; curl codes are CURLcode values. */

typedef struct sl_call_opts {
    size_t size;                  /* set by sl_call_opts_init() */
    const char *deployment;       /* required */
    long long tokens;             /* estimate for the acquire */
    long long max_wait_ms;        /* per acquire; < 0 (init): as sl_request */
    int64_t deadline_ms;          /* absolute, sl_now_ms(); 0: none. Covers
                                    every wait, attempt and backoff */
    const char *lane;             /* as sl_request */
    const char *tenant;           /* as sl_request */
    int max_attempts;             /* attempts in all, first included; 0: 5 */
    long long backoff_base_ms;    /* full jitter base; 0: 500 */
    long long backoff_cap_ms;     /* full jitter cap; 0: 30000 */
    long long retry_after_cap_ms; /* a server wait above this is not waited; 0: 120000 */
    long long min_attempt_ms;     /* an attempt needs this much time left; 0: 1000 */
    size_t max_body;              /* response bytes kept; 0: 16 MiB */
    uint64_t seed;                /* jitter seed; 0: from the clock */
    const char *tag;              /* as sl_request */
    long long input_tokens;       /* as sl_request; -1 (init): not split */
    long long output_tokens;
    /* Both forms (sl_curl_perform and sl_call_start) read the fields
     * below; zero keeps sl_curl_perform's behaviour. */
    int settle_headers;           /* which response headers a settle passes on:
                                    SL_SETTLE_HEADERS_ALL (0: the agent decides
                                    what they mean), _RETRY_AFTER (only the waits
                                    the provider asks for), _NONE */
    long long attempt_timeout_ms; /* limit of one attempt (CURLOPT_TIMEOUT_MS),
                                    cut to the deadline; 0: the deadline only */
    int retry_shed;               /* 1: a shed acquire waits its retry-after and
                                    asks again while the deadline leaves
                                    min_attempt_ms ("breaker" without a hint: 5 s);
                                    never for "quota", "too_large" or a hint of -1
                                    (never fits). 0: a shed ends the call */
    long long unavailable_ms;     /* the governor unreachable (SL_EUNAVAIL, SL_EIO,
                                    SL_EPROTO, SL_EREDIS, SL_ECLOSING answered by a
                                    sluiced that shuts down, no answer to the retry
                                    question within call_timeout_ms): ask again
                                    every second for up to this long; 0: end the call */
    int exact;                    /* as sl_request: the estimate is the provider's
                                    own count (EXACT); 0 by init */
    int partial;                  /* as sl_request: the estimate guesses images,
                                    audio or files (PARTIAL); 0 by init */
} sl_call_opts;

/* sl_call_opts.settle_headers */
enum { SL_SETTLE_HEADERS_ALL = 0, SL_SETTLE_HEADERS_RETRY_AFTER = 1, SL_SETTLE_HEADERS_NONE = 2 };

SL_API void sl_call_opts_init_size(sl_call_opts *o, size_t size);
#define sl_call_opts_init(o) sl_call_opts_init_size((o), sizeof(*(o)))

/* What sl_curl_perform() (or an asynchronous call, sl_call_start) did.
 * The body belongs to the report: release it with sl_call_report_free(). */
typedef struct sl_call_report {
    size_t size;              /* set by sl_call_report_init() */
    int attempts;             /* HTTP attempts made */
    long long waited_ms;      /* total time waiting for slots (and for a
                                    shed's retry-after, with retry_shed) */
    long long elapsed_ms;     /* from the call to its return */
    int within_deadline;      /* 1: returned no later than the deadline (or none) */
    int http_status;          /* of the last attempt, 0 none */
    int curl_code;            /* CURLcode of the last attempt */
    const char *outcome;      /* class of the last attempt ("ok", "rate_limited", ...),
                                    or "shed", "deadline", "retry_budget", "attempts",
                                    "cancelled", "error" when that ended the call. Static */
    long long tokens;         /* usage of the successful attempt, -1 unknown */
    long long retry_after_ms; /* last hint (shed, retry budget, server), -1 */
    char *body;               /* last response body, NUL-terminated; may be NULL */
    size_t body_len;
    char message[256];      /* why it ended, "" on success */
    int retries;            /* retries the fleet's retry budget allowed */
    int sheds;              /* acquires that were shed */
    int status_429;         /* responses with HTTP status 429 */
    int cls;                /* sl_class of the last response; -1 none */
    char code[64];          /* its error.code ("insufficient_quota"), "" */
    char shed_reason[24];   /* the reason of the shed that ended the call, "" */
    char deployment[72];    /* the deployment of the last grant (a group's
                                    member): where the last attempt went; "" none */
    long long input_tokens; /* the successful attempt's usage split as
                                    sl_usage_of() reads it; -1 unknown */
    long long output_tokens;
    long long cache_read_tokens;
} sl_call_report;

SL_API void sl_call_report_init_size(sl_call_report *r, size_t size);
#define sl_call_report_init(r) sl_call_report_init_size((r), sizeof(*(r)))
/* Frees the body and resets the report. NULL is a no-op. */
SL_API void sl_call_report_free(sl_call_report *r);

/* Performs the request set up on easy, governed: acquire, perform, capture
 * the headers and (at most max_body bytes of) the body, classify, settle
 * with the usage the provider reported, and retry when the class is
 * retryable, the fleet's retry budget allows (sl_may_retry) and the
 * deadline leaves room (full-jitter backoff; a server-given wait is a
 * floor). sl_curl_perform is the only retry owner: turn every other retry
 * layer off. It sets on easy CURLOPT_HEADERFUNCTION/HEADERDATA,
 * CURLOPT_WRITEFUNCTION/WRITEDATA, CURLOPT_NOSIGNAL and, with a deadline,
 * CURLOPT_TIMEOUT_MS (the time left, less 10 ms for the settle), and resets the callbacks to
 * libcurl's defaults on return. report (optional, size set by
 * sl_call_report_init()) gets the details. A quota_exhausted response is
 * settled as SL_OUTCOME_QUOTA and never retried. opts->deployment may name
 * a group only when every member is reached at the URL set on easy (one
 * gateway): the URL is not changed per member; otherwise call sl_acquire()
 * and send to sl_grant_endpoint() yourself. Retries ask the fleet's retry
 * budget of the member that failed.
 * Returns 0 (a 2xx response), SL_EFATAL (not retryable: quota, auth, bad
 * request), SL_ENORETRY (fleet retry budget spent), SL_EDEADLINE (no time
 * for another attempt), SL_EATTEMPTS, SL_ESHED, SL_ETIMEDOUT, SL_ETOOBIG,
 * or another error of sl_acquire(). Blocking; thread-safe with one easy
 * handle per thread. */
SL_API int sl_curl_perform(sl_gov *gov, void *easy, const sl_call_opts *opts, sl_call_report *report);

/* Pieces for libcurl-multi and event-loop workers, none of which block.
 * A capture records the headers of the final response (interim 1xx and
 * redirect responses are dropped) and at most max_body bytes of its body.
 * One capture per easy handle; not thread-safe (one transfer, one owner). */
typedef struct sl_capture sl_capture;

/* max_body 0: 16 MiB. Returns 0, SL_ENOMEM. */
SL_API int sl_capture_new(size_t max_body, sl_capture **out);
SL_API void sl_capture_free(sl_capture *c);
/* Empties c and installs it on easy (header and write callbacks). */
SL_API int sl_capture_attach(sl_capture *c, void *easy);
SL_API void sl_capture_reset(sl_capture *c);
/* 1 when the body exceeded max_body (the transfer was aborted). */
SL_API int sl_capture_overflow(const sl_capture *c);
SL_API int sl_capture_status(const sl_capture *c);
/* NUL-terminated; borrowed until the next reset/attach/free. */
SL_API const char *sl_capture_body(const sl_capture *c, size_t *len);
/* The last value of header name (any case), or NULL. Borrowed likewise. */
SL_API const char *sl_capture_header(const sl_capture *c, const char *name);
/* All headers in arrival order; *out borrowed likewise. */
SL_API size_t sl_capture_headers(const sl_capture *c, const sl_header **out);
/* The verdict for the captured response and the transfer's CURLcode. */
SL_API int sl_capture_verdict(const sl_capture *c, int curl_code, long long retry_after_cap_ms, sl_verdict *out);
/* Settles g with the captured response (outcome, usage, headers); frees g.
 * Returns as sl_settle(). */
SL_API int sl_settle_capture(sl_grant *g, const sl_capture *c, int curl_code);

/* The backoff before retry number attempt (0 for the first retry) after
 * verdict v, at now_ms, under o's policy and deadline: the delay in ms
 * (>= 0) or SL_EFATAL (not retryable), SL_EATTEMPTS, SL_EDEADLINE (the
 * delay plus min_attempt_ms would pass the deadline, or the server's wait
 * is beyond its cap). rng: caller-owned jitter state (any seed). Pure. */
SL_API long long sl_backoff_ms(const sl_call_opts *o, int attempt, const sl_verdict *v, int64_t now_ms, uint64_t *rng);

/* ---- governed calls on your event loop ------------------------------------ */

/* The asynchronous form of sl_curl_perform(): any number of governed calls
 * at once on an event loop the application owns, each going through
 * acquire (sl_acquire_async) -> send (libcurl multi) -> classify -> settle
 * (usage per dimension, the response headers) -> backoff -> retry, as
 * sl_curl_perform() does (it is built on this), and cancellable at every
 * step. docs/library.md has the guide and an example program.
 *
 * Two objects: an sl_caller, one per loop (a libcurl multi handle, the
 * calls' timers, the hand-over from the governor's thread), and an
 * sl_call, one governed request. A caller reaches its loop through an
 * sl_loop, four functions an adapter fills, the way hiredis' adapters
 * plug its async context into a loop: the libuv adapter is ready in
 * <sluice_uv.h> (sl_uv_attach); any other loop needs the four functions.
 *
 * Threads. Everything here belongs to the loop's thread: call sl_caller_*
 * and sl_call_* there only, and every callback (completion, hooks) runs
 * there, from within sl_caller_io(), sl_caller_timer() or sl_caller_wake(),
 * never from within the function that caused it. The one exception is
 * sl_loop.wake, which libsluice calls from the governor's internal thread
 * (where the asynchronous acquire and retry-budget answers arrive) to hand
 * them to the loop. One caller per loop is enough; callers on different
 * loops (threads) may share one governor. */

/* Events of sl_loop.watch and sl_caller_io(). */
#define SL_LOOP_READ 1
#define SL_LOOP_WRITE 2
#define SL_LOOP_ERROR 4 /* sl_caller_io() only: the socket failed */

/* What a loop adapter gives a caller. Fill with sl_loop_init(). */
typedef struct sl_loop {
    size_t size; /* set by sl_loop_init() */
    void *data;  /* the adapter's, passed to every function */
    /* Watch socket fd for events (SL_LOOP_READ | SL_LOOP_WRITE), replacing
     * what was watched; events 0: stop watching it (it is about to be
     * closed). *sock is the adapter's slot for this socket: NULL the first
     * time, then what the adapter stored there, until events 0 (the adapter
     * frees its state then). When fd is ready, call sl_caller_io(). Returns
     * 0, or < 0 (the transfer on fd fails). */
    int (*watch)(void *data, int fd, int events, void **sock);
    /* Arms the caller's one timer: call sl_caller_timer() once, ms (>= 0)
     * from now, replacing an earlier arming; ms < 0 disarms it. */
    void (*timer)(void *data, long long ms);
    /* From any thread: make the loop call sl_caller_wake() soon, on its
     * thread. Calls may be merged into one. Must not block. */
    void (*wake)(void *data);
    /* The caller is done with the loop (sl_caller_free): release the
     * watches, the timer and the wake-up. Nothing above is called after
     * it, and the adapter must not call sl_caller_* again. May be NULL. */
    void (*close)(void *data);
} sl_loop;

SL_API void sl_loop_init_size(sl_loop *l, size_t size);
#define sl_loop_init(l) sl_loop_init_size((l), sizeof(*(l)))

typedef struct sl_caller sl_caller;
typedef struct sl_call sl_call;

/* Makes a caller for governed calls on gov, which must outlive it (free
 * the callers before sl_close). It does nothing until attached to a loop.
 * Returns 0 and *out (the caller's: sl_caller_free it), SL_EINVAL, or
 * SL_ENOMEM (also when libcurl cannot make a multi handle). */
SL_API int sl_caller_new(sl_gov *gov, sl_caller **out);

/* Attaches c to the loop l describes (copied; watch, timer and wake are
 * required). Once per caller. Returns 0 or SL_EINVAL. */
SL_API int sl_caller_attach(sl_caller *c, const sl_loop *l);

/* Frees c. Calls still in progress end as sl_call_cancel(call,
 * SL_CANCEL_NOW) ends them (every slot they hold goes back, transfers are
 * aborted and your easy handles released) but their callbacks do not
 * run, nor do completions not yet delivered. Then the loop's close runs.
 * Answers still on their way from the governor's thread are dropped (a
 * grant among them is given back) when they arrive. Safe from within any
 * callback of c (the rest is done when it returns). NULL is a no-op. */
SL_API void sl_caller_free(sl_caller *c);

/* The adapter's entry points, on the loop's thread: fd (watched) is ready
 * for events (SL_LOOP_*); the timer fired; a wake-up came. Callbacks run
 * from within them. */
SL_API void sl_caller_io(sl_caller *c, int fd, int events);
SL_API void sl_caller_timer(sl_caller *c);
SL_API void sl_caller_wake(sl_caller *c);

/* What a call sends, and its hooks. Fill with sl_call_http_init(). */
typedef struct sl_call_http {
    size_t size; /* set by sl_call_http_init() */
    /* Either a CURL easy handle you set up (URL, headers, body, TLS ...),
     * which stays yours: every attempt adds it to the caller's multi
     * handle; the call sets on it what sl_curl_perform() sets (and
     * CURLOPT_PRIVATE while in flight, restored after) and resets the
     * callbacks when it ends. Do not use it elsewhere meanwhile. */
    void *easy;
    /* Or, with easy NULL, the request the call makes itself: */
    const char *url;
    const sl_header *headers; /* request headers (copied); "Expect:" is added */
    size_t nheaders;
    const char *body; /* POSTed when not NULL (copied); NULL: GET */
    size_t body_len;
    /* Optional hooks, with the arg given to sl_call_start(). prepare runs
     * before each attempt, with its grant (sl_grant_deployment(),
     * sl_grant_endpoint(): a group's member) and the easy handle about to
     * go: set what depends on the member (URL, key, the body's "model").
     * It returns 0 to send, or an SL_E* code that ends the call with it
     * (the slot goes back, unsent). attempted runs after each attempt, once
     * it is settled, with its verdict and CURLcode: for counting and
     * logging. The grant and verdict are borrowed for the hook's duration. */
    int (*prepare)(void *arg, sl_call *call, const sl_grant *grant, void *easy);
    void (*attempted)(void *arg, sl_call *call, const sl_verdict *v, int curl_code);
} sl_call_http;

SL_API void sl_call_http_init_size(sl_call_http *h, size_t size);
#define sl_call_http_init(h) sl_call_http_init_size((h), sizeof(*(h)))

/* A call ended. status: what sl_curl_perform() would return (0 for a 2xx
 * response, SL_EFATAL, SL_ENORETRY, SL_EDEADLINE, SL_EATTEMPTS, SL_ESHED,
 * SL_ETOOBIG, an acquire's error), or SL_ECANCELED after sl_call_cancel().
 * report is the library's, valid during the callback; to keep the body,
 * move it out (take report->body and set it to NULL; free() it later).
 * call is valid until the callback returns. */
typedef void (*sl_call_cb)(void *arg, sl_call *call, int status, sl_call_report *report);

/* Starts a governed call of opts (policy, deadline, deployment, estimate,
 * lane, tenant, tag: as sl_curl_perform) sending http, on c's loop. The
 * deadline is kept on the loop itself: while the call waits for the
 * governor (a slot, the retry budget's answer), its own timer ends it at
 * the deadline less min_attempt_ms (SL_EDEADLINE; a reservation goes back)
 * even if the governor's thread is slow to answer. The strings of opts and
 * http are copied. Returns 0 and *out (optional: the
 * call's handle, valid until its callback returns); cb then runs exactly
 * once, later, with the outcome, even one decided at once (no time left).
 * Returns SL_EINVAL (no deployment, no easy handle nor url, no cb, c not
 * attached), SL_ENOMEM or SL_ECLOSING (c is being freed): then cb never
 * runs. */
SL_API int sl_call_start(sl_caller *c, const sl_call_opts *opts, const sl_call_http *http, sl_call_cb cb, void *arg,
                         sl_call **out);

/* sl_call_cancel() modes. */
enum {
    SL_CANCEL_NOW = 0,       /* end the call now, a transfer in flight aborted */
    SL_CANCEL_AFTER_SEND = 1 /* let a transfer in flight finish (and settle),
                                    but take no further step */
};

/* Ends call, its callback then running with SL_ECANCELED (from the loop,
 * never from within this function) and the report of what was done. At
 * each step:
 *   waiting for a slot   the acquire is cancelled (sl_cancel); a
 *                        reservation already made goes back to the fleet
 *                        (settled as cancelled), also when its answer is
 *                        already on its way;
 *   sending (NOW)        the transfer is aborted. Its grant is settled
 *                        SL_OUTCOME_FAILED, usage unknown (the estimate
 *                        stays charged), once any byte of the request was
 *                        written: the provider may have admitted and
 *                        counted it, and giving the slot back would let the
 *                        fleet offer more than the quota. Settled CANCELLED
 *                        (the slot goes back) when nothing was written yet
 *                        (resolving, connecting, TLS);
 *   sending (AFTER_SEND) the attempt finishes and is settled as usual; an
 *                        outcome that ends the call anyway (success, not
 *                        retryable, no attempts or time left) is reported
 *                        as such, one that would be retried as SL_ECANCELED;
 *   asking the budget    the call ends; the answer is dropped when it comes
 *                        (a retry it allowed stays counted: the fleet's
 *                        budget errs on the side of fewer retries);
 *   backing off          no slot is held between attempts: the wait stops.
 * Returns 0, SL_EALREADY (the call has ended: its callback is queued or
 * running), or SL_EINVAL. */
SL_API int sl_call_cancel(sl_call *call, int mode);

/* Where a call is. */
enum {
    SL_CALL_ACQUIRING = 0, /* waiting for its slot */
    SL_CALL_SENDING,       /* an attempt in flight */
    SL_CALL_ASKING,        /* asking the fleet's retry budget */
    SL_CALL_BACKOFF,       /* waiting before the next step (a backoff,
                                    a shed's retry-after, the governor away) */
    SL_CALL_DONE           /* ended; the callback is queued or running */
};

/* SL_CALL_* for call, or SL_EINVAL for NULL. */
SL_API int sl_call_state(const sl_call *call);

#ifdef __cplusplus
}
#endif
#endif
