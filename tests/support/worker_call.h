/* worker_call: one worker's provider calls, as a fleet's worker makes them.
 *
 * A worker_call holds a blocking RESP connection to sluiced (optional) and
 * a libcurl easy handle (its connections to the providers are kept alive).
 * worker_call_acquire() asks sluiced for a slot on a deployment or a group
 * and keeps the grant (a group's grant names the member and its
 * endpoint); worker_call_post() sends an Azure-style chat completion to an
 * endpoint and keeps the answer's status, feedback headers and usage;
 * worker_call_settle() closes the grant with an outcome, the used tokens
 * and those headers, as docs/protocol.md asks. Without sluiced the same
 * handle is a plain HTTP client (the baselines of the benchmarks).
 *
 * One worker_call per thread; nothing here is shared. The process must
 * call curl_global_init() before the first worker_call_open(). Depends on
 * hiredis, libcurl and jansson. Functions never print: what went wrong is
 * in w->error. */
#ifndef SLUICE_WORKER_CALL_H
#define SLUICE_WORKER_CALL_H

#include <stddef.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>

#define WORKER_CALL_MAX_HEADERS 32

typedef enum worker_acquire {
    WORKER_GRANTED,
    WORKER_SHED, /* shed_reason and retry_after_ms say why and when */
    WORKER_ERROR /* error says what */
} worker_acquire;

typedef struct worker_header {
    char name[64]; /* lower case */
    char value[256];
} worker_header;

typedef struct worker_call {
    redisContext *rc; /* sluiced, NULL when none */
    const char *lane; /* LANE on every ACQUIRE, NULL for none (set after open; borrowed) */
    CURL *curl;
    struct curl_slist *hdrs;
    struct curl_slist *hdrs_anthropic; /* the same plus anthropic-version */
    /* The last ACQUIRE. */
    char grant[128];    /* "<member>:<n>" */
    char member[65];    /* the deployment the slot is on */
    char endpoint[256]; /* its endpoint; "" for a plain deployment */
    long long waited_ms;
    char shed_reason[32];
    long long retry_after_ms;
    /* The last response: status 0 when the transport failed. */
    long status;
    long long usage_tokens;                                /* usage.total_tokens of a 200, -1 when absent */
    long long usage_input, usage_output, usage_cache_read; /* the usage split, -1 when absent */
    worker_header h[WORKER_CALL_MAX_HEADERS];
    int nh;
    char body[8192];
    size_t body_len;
    char error[256];
} worker_call;

/* Opens the handle. agent_sock: sluiced's socket, or NULL for HTTP only;
 * RESP commands time out after resp_timeout_ms (more than any MAXWAIT
 * used). client_id goes out as x-client-id on every call, so the mock's
 * ledger counts the worker by name. Returns 0 or -1 (error set); close it
 * either way. */
int worker_call_open(worker_call *w, const char *agent_sock, int resp_timeout_ms, const char *client_id);

/* Frees what the handle holds; safe on a zeroed or half-opened handle. */
void worker_call_close(worker_call *w);

/* ACQUIRE name [TOKENS tokens] [MAXWAIT max_wait_ms when >= 0] [TAG tag]
 * [TENANT tenant] [LANE w->lane] (tag, tenant and w->lane NULL for none). */
worker_acquire worker_call_acquire(worker_call *w, const char *name, long long tokens, long long max_wait_ms,
                                   const char *tag, const char *tenant);

/* ACQUIRE name INPUT input OUTPUT output, otherwise as above. */
worker_acquire worker_call_acquire_split(worker_call *w, const char *name, long long input, long long output,
                                         long long max_wait_ms, const char *tag, const char *tenant);

/* POST endpoint/openai/deployments/<deployment>/chat/completions with one
 * user message and max_tokens; at most timeout_ms. Returns the status (0:
 * no answer, error set). */
long worker_call_post(worker_call *w, const char *endpoint, const char *deployment, const char *content, int max_tokens,
                      long timeout_ms);

/* POST endpoint/v1/messages (Anthropic's Messages API: model, max_tokens,
 * one user message; anthropic-version set), otherwise as above. */
/* The same, streamed ("stream": true, no stream_options): the body is the
 * events as sent, no usage is read from it. */
long worker_call_post_stream(worker_call *w, const char *endpoint, const char *deployment, const char *content,
                             int max_tokens, long timeout_ms);
long worker_call_post_messages(worker_call *w, const char *endpoint, const char *model, const char *content,
                               int max_tokens, long timeout_ms);
/* POST endpoint/v1/chat/completions ("model", one user message,
 * max_tokens: the OpenAI-compatible route), otherwise as worker_call_post. */
long worker_call_post_v1(worker_call *w, const char *endpoint, const char *model, const char *content, int max_tokens,
                         long timeout_ms);

/* The value of a header of the last response (name in lower case), or NULL. */
const char *worker_call_header(const worker_call *w, const char *name);

/* SETTLE the last grant with STATUS outcome (ok, throttled, failed,
 * cancelled), the usage when known (INPUT, OUTPUT and CACHE_READ when the
 * body split it, else TOKENS), and the last response's retry-after*,
 * x-ratelimit-* and anthropic-ratelimit-* headers (none for cancelled).
 * Returns 0, or -1 when sluiced refused it (error set). */
int worker_call_settle(worker_call *w, const char *outcome);

/* Sends a command (argv form) on the handle's sluiced connection; the
 * reply is the caller's (freeReplyObject), NULL on a connection error. */
redisReply *worker_call_command(worker_call *w, int argc, const char **argv);

#endif
