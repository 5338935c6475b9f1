/* mock: a stand-in provider to test against (`sluice mock`; users may run
 * it too, to try a fleet without a provider key): Azure OpenAI, OpenAI,
 * Anthropic, Bedrock- and Gemini-compatible front doors with the
 * providers' rate limits as their documentation describes them, and its
 * own ledger. It shares no code with lib/ or lua/ (docs/mock.md).
 *
 * Serves POST /openai/deployments/<name>/chat/completions (Azure style),
 * POST /v1/chat/completions and /openai/v1/chat/completions (OpenAI style,
 * deployment = "model" from the body), the same two styles of embeddings
 * and of the Responses API, POST /v1/messages (Anthropic style,
 * with its request, input-token and output-token buckets), GET /stats
 * (the ledger) and POST /control (faults, the neighbour, injected 429s,
 * headers and limits changed at run time). Each
 * deployment has a request bucket (rpm, burst) and optionally a token
 * bucket (tpm, token_burst); admission charges 1 request and the estimate
 * of the messages' text (its tokenizer: a quarter token a character, one
 * a CJK character) + max_tokens (16 when absent), as
 * Azure does, or on the OpenAI-style routes the larger of the two, as
 * OpenAI documents. Rejections are 429 with Retry-After and retry-after-ms;
 * every deployment response carries x-ratelimit-* headers. Accepted calls
 * are answered after a service time drawn from a range, on a libuv timer,
 * or with "stream": true as Server-Sent Events spread over that time.
 * docs/mock.md describes the wire behaviour and the ledger JSON.
 *
 * Embedding: mock_start() on any libuv loop, mock_stop() to close every
 * handle; the loop's thread is the only one that may call these functions.
 * Depends on libuv, jansson and (through mock_http) the daemon's HTTP
 * transport, agent/http_server.h, on libhttp-parser. */
#ifndef SLUICE_MOCK_H
#define SLUICE_MOCK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <uv.h>

#include "mock_ledger.h"

typedef struct mock mock;

/* Filled by mock_options_init(); new fields are only ever added at the end. */
typedef struct mock_options {
    const char *host;               /* bind address, default "127.0.0.1" */
    int port;                       /* 0: any free port (see mock_port()) */
    double rpm;                     /* requests per minute per deployment, > 0 */
    double burst;                   /* request bucket size; 0: max(1, rpm / 6) */
    double tpm;                     /* tokens per minute; 0: no token limit */
    double token_burst;             /* token bucket size; 0: max(1, tpm / 6) */
    unsigned service_ms_min;        /* service time of an accepted call, drawn */
    unsigned service_ms_max;        /* uniformly in [min, max] */
    unsigned slow_ms;               /* added to every chat response */
    unsigned completion_tokens;     /* 0: uniform in [1, max_tokens]; else min(this, max_tokens) */
    unsigned completion_tokens_max; /* above completion_tokens: uniform in [that, this], capped alike */
    double neighbour_rpm;           /* requests/min another tenant takes from every deployment */
    unsigned neighbour_tokens;      /* tokens each neighbour request charges */
    int neighbour_greedy;           /* the neighbour takes what it can, as soon as it can, up to its rpm */
    double fail_503;                /* probability of an injected 503, in [0, 1] */
    unsigned retry_after_503;       /* Retry-After (s) on injected 503s; 0: none */
    int quota_exhausted;            /* every chat call: 429 insufficient_quota */
    uint64_t seed;                  /* PRNG seed (service time, tokens, 503s) */
    const char *const *deployments; /* if n_deployments > 0: only these exist */
    size_t n_deployments;
    size_t max_body;            /* request body cap in bytes (413 beyond) */
    FILE *log;                  /* one line per request, or NULL */
    double itpm;                /* Anthropic input tokens per minute; 0: no limit */
    double input_burst;         /* input bucket size; 0: max(1, itpm / 6) */
    double otpm;                /* Anthropic output tokens per minute; 0: no limit */
    double output_burst;        /* output bucket size; 0: max(1, otpm / 6) */
    unsigned cache_read_tokens; /* Anthropic: input tokens read from the cache per call */
    int no_headers;             /* send no rate-limit headers */
    int openai_tpm;             /* the charge of the OpenAI-style routes: a mock_openai_tpm */
    int compat;                 /* whose OpenAI-compatible endpoint those routes are: a mock_compat */
    double burndown;            /* bedrock: quota tokens per output token; 0: by model (5 or 1) */
    double rpd;                 /* gemini: requests per Pacific day per deployment; 0: no limit */
    double wall_start_ms;       /* the wall clock (Unix ms) at start; 0: the real one */
    int anthropic_otpm;         /* how the Messages route counts OTPM: a mock_anthropic_otpm */
    unsigned anthropic_round;   /* Messages: token remaining counts rounded to the nearest this many; 0, 1: exact */
    double tokens_per_char;     /* the tokenizer: tokens a code point of text (default 0.25) */
    double cjk_tokens_per_char; /* ... and a code point of kana, Han or Hangul (default 1) */
} mock_options;

/* How the Anthropic route counts output tokens (docs/mock.md): as
 * Anthropic's rate-limit page says today, "OTPM ... based on the number of
 * output tokens generated ... max_tokens does not factor into OTPM" (the
 * bucket must hold 1 at admission, the output is charged at the end); or as
 * it said in 2025, max_tokens charged at admission and the unused part
 * given back at the end. */
typedef enum mock_anthropic_otpm { MOCK_ANTH_OTPM_GENERATED = 0, MOCK_ANTH_OTPM_MAX = 1 } mock_anthropic_otpm;

/* Whose OpenAI-compatible chat completions the OpenAI-style routes stand
 * in for (docs/mock.md, "Bedrock and Gemini"): OpenAI's own; Amazon
 * Bedrock's (input + max_tokens at admission, corrected at the end to
 * input + output x burndown; no rate-limit headers); the Gemini API's
 * (input-only TPM, requests per day reset at midnight Pacific time; no
 * rate-limit headers). */
typedef enum mock_compat { MOCK_COMPAT_OPENAI = 0, MOCK_COMPAT_BEDROCK = 1, MOCK_COMPAT_GEMINI = 2 } mock_compat;

/* How the OpenAI-style routes (/v1/..., /openai/v1/...) charge the token
 * bucket: OpenAI's documented rule, max(ceil(chars / 4), max_tokens), or
 * Azure's prompt + max_tokens. The Azure routes always charge the sum. */
typedef enum mock_openai_tpm { MOCK_OPENAI_TPM_MAX = 0, MOCK_OPENAI_TPM_SUM = 1 } mock_openai_tpm;

/* How the mock prints JSON: compact, reals with 15 significant digits. */
#define MOCK_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* Defaults: 127.0.0.1:8089, 60 RPM, burst 10, no TPM, 300-900 ms, 1 MiB
 * bodies, seed 1, every knob off. */
void mock_options_init(mock_options *o);

/* Validates o, binds and starts serving on loop. On success *out is the
 * mock (the options, strings included, are copied). Returns 0, or a
 * negative libuv error code with a message in err; on error nothing is left
 * running, but the loop must still be run once (uv_run) before it is
 * closed, to finish closing the listener. */
int mock_start(uv_loop_t *loop, const mock_options *o, mock **out, char *err, size_t errlen);

/* The port the mock listens on. */
int mock_port(const mock *m);

/* Milliseconds since mock_start(), the clock of the ledger. */
double mock_now_ms(const mock *m);

/* The /stats document: config, clock and the ledger. New reference owned
 * by the caller, NULL on allocation failure. */
json_t *mock_stats(const mock *m);

/* Zeroes the ledger; with buckets != 0 also refills every bucket. */
void mock_reset(mock *m, int buckets);

/* Changes the injected failures of a running mock (what --fail-503 and
 * --quota-exhausted set at start; POST /control does this over HTTP). The
 * ledger, the buckets and the random sequence carry on. Returns 0, or
 * UV_EINVAL (nothing changed) when fail_503 is not in [0, 1]. */
int mock_set_faults(mock *m, double fail_503, int quota_exhausted);

/* Starts, changes or stops (rpm 0) the noisy neighbour of a running mock
 * (what --neighbour-rpm, --neighbour-tokens and --neighbour-greedy set at
 * start). Paced, a new rate sends its first request one interval from
 * now. Greedy, it looks every 100 ms and sends what its rate allowed
 * since it started, less what it sent, until the provider refuses one
 * (counted as its 429): it takes every token as it refills, and what was
 * refused is sent as soon as the provider admits it. Returns 0, or
 * UV_EINVAL (nothing changed) when rpm is not in [0, 600000]. */
int mock_set_neighbour(mock *m, double rpm, unsigned tokens, int greedy);

/* The neighbour sends count requests at once, now, to every deployment
 * (each 1 request and neighbour_tokens; the ones that do not fit are
 * refused, counted as its 429s). */
void mock_neighbour_burst(mock *m, uint64_t count);

/* Applies a POST /control query ("neighbour_rpm=60&inject_429=2", without
 * the '?'; see docs/mock.md) to a running mock: every pair is checked
 * before any applies. Returns the HTTP status (200, 400, or 500 when out
 * of memory) and in *answer a JSON text (the settings in force, or the
 * error) for the caller to free(), or NULL. */
int mock_control(mock *m, const char *query, char **answer);

/* Copies the ledger's totals. */
void mock_totals(const mock *m, mock_counts *out);

/* Closes every handle of the mock (connections, timers, listener).
 * Responses still pending are dropped and counted as abandoned. Once every
 * handle is closed, done(m, arg) runs (it may still read m with
 * mock_stats() or mock_totals(): this is the final ledger), then m is
 * freed. done may be NULL. m must not be used after done returns. */
void mock_stop(mock *m, void (*done)(mock *m, void *arg), void *arg);

#endif
