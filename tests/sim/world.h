/* world: a deterministic provider world on virtual time, for the fleet
 * simulator (issue 22). One world is one provider deployment as the
 * provider's own documentation describes it (docs/providers.md, "The
 * simulator's provider worlds"): its buckets or windows per dimension, its
 * own token count of a prompt, what it charges at admission and corrects
 * when the response ends, the headers it sends in its own names and forms,
 * and the neighbours that draw from the same quota on their own schedule.
 * Every request, the fleet's and the neighbours', goes to a ledger with its
 * outcome and its charges, which the tests judge the fleet by.
 *
 * Independence: this module shares no code or constant with lua/ or lib/;
 * it depends on the C library and libm only. A model that shared the
 * governor's beliefs would prove nothing.
 *
 * Determinism: the only randomness is a PRNG seeded at sim_world_new(); the
 * same configuration, seed and sequence of calls give the same ledger byte
 * for byte (sim_world_digest()). Virtual time is in milliseconds since the
 * world's start, passed in every call and never decreasing; a call with a
 * time before the world's clock is taken at the world's clock and counted
 * (sim_world_clock_errors()). Single-threaded; no globals. */
#ifndef SLUICE_SIM_WORLD_H
#define SLUICE_SIM_WORLD_H

#include <stddef.h>
#include <stdint.h>

typedef enum sim_provider {
    SIM_AZURE = 0,
    SIM_OPENAI,
    SIM_ANTHROPIC,
    SIM_BEDROCK,
    SIM_GEMINI,
    SIM_PROVIDERS
} sim_provider;

typedef enum sim_lang { SIM_LANG_EN = 0, SIM_LANG_CODE, SIM_LANG_CJK, SIM_LANGS } sim_lang;

/* The dimensions a world limits and its ledger records, each in its own
 * units (requests or tokens). Which ones a provider has: azure, openai
 * REQUESTS + TOKENS; anthropic REQUESTS + INPUT + OUTPUT; bedrock
 * REQUESTS + TOKENS; gemini REQUESTS + INPUT (its input-only TPM) + DAY. */
typedef enum sim_dim {
    SIM_DIM_REQUESTS = 0, /* rpm */
    SIM_DIM_TOKENS,       /* tpm, combined */
    SIM_DIM_INPUT,        /* itpm (gemini: its TPM, input only) */
    SIM_DIM_OUTPUT,       /* otpm */
    SIM_DIM_DAY,          /* rpd: requests per day */
    SIM_DIMS
} sim_dim;

/* Anthropic's output rule: as the current documentation says (counted as
 * generated: charged when the response ends) or as the 2025 documentation
 * said (max_tokens at admission, corrected to the output at the end). */
typedef enum sim_otpm_rule { SIM_OTPM_GENERATED = 0, SIM_OTPM_MAX_CORRECTED } sim_otpm_rule;

/* How a window-evaluated limit (Azure's requests, Gemini's per-minute
 * limits) counts: any window of its length ending now (sliding), or the
 * wall-clock-aligned windows of the epoch (fixed). */
typedef enum sim_window_mode { SIM_WINDOW_SLIDING = 0, SIM_WINDOW_FIXED } sim_window_mode;

/* Azure's request windows (a mask): "typically 1 or 10 seconds". */
enum { SIM_AZ_WIN_1S = 1, SIM_AZ_WIN_10S = 2 };

/* What Azure's x-ratelimit-*-requests headers describe: the 10 s window
 * (limit RPM/6, as observed) or the minute (limit RPM). */
typedef enum sim_az_req_header { SIM_AZ_HDR_10S = 0, SIM_AZ_HDR_MINUTE } sim_az_req_header;

typedef enum sim_nb_shape {
    SIM_NB_NONE = 0,
    SIM_NB_PACED,    /* one request every 60000 / rate_per_min ms */
    SIM_NB_GREEDY,   /* every tick_ms, sends until it is refused once */
    SIM_NB_BURST,    /* burst requests at start_ms, once */
    SIM_NB_PERIODIC, /* burst requests at start_ms and every period_ms */
} sim_nb_shape;

/* A neighbour: another user of the same key. It acts in [start_ms,
 * leave_ms) (leave_ms 0: never leaves); its 429s are counted apart. */
typedef struct sim_neighbour {
    sim_nb_shape shape;
    double start_ms, leave_ms;
    double rate_per_min; /* paced; greedy: its own cap (0: none), what it refused retried each tick */
    double tick_ms;      /* greedy (0: 100) */
    int burst;           /* burst, periodic; greedy: a cap per tick (0: 1000) */
    double period_ms;    /* periodic */
    long long chars;     /* its requests' prompt, in characters */
    sim_lang lang;
    long long max_tokens, cached;
} sim_neighbour;

#define SIM_MAX_NEIGHBOURS 4
#define SIM_MAX_STRAYS 8

typedef struct sim_world_cfg {
    sim_provider provider;
    /* The configured limits, per minute (rpd: per day); 0: no such limit.
     * burst: a bucket's capacity per dimension (0: a minute's quota, which
     * is what Anthropic's "replenished up to your maximum limit" says). */
    double rpm, tpm, itpm, otpm, rpd;
    double burst[SIM_DIMS];
    /* A bucket's refill: continuous (0) or in steps of this many ms. */
    double refill_step_ms;
    sim_window_mode window_mode; /* azure requests, gemini per minute */
    int azure_windows;           /* SIM_AZ_WIN_* mask (default both) */
    sim_az_req_header azure_req_header;
    sim_otpm_rule anthropic_output;
    double bedrock_burndown;       /* output multiplier (default 5) */
    double openai_chars_per_token; /* its character-based estimate (default 4) */
    /* The provider's tokenizer: tokens per character per language
     * (defaults: EN 1/4, CODE 1/3, CJK 0.8) and a seeded noise of +-noise
     * (a fraction, default 0.03) per request. */
    double tokens_per_char[SIM_LANGS];
    double token_noise;
    /* Output tokens: uniform in [out_lo, out_hi] x max_tokens (defaults
     * 0.5 and 1.0; equal for a fixed fraction). Latency: uniform in
     * [lat_lo_ms, lat_hi_ms] (defaults 500, 2000); a 429 takes reject_ms.
     * With out_tokens_hi > 0 the answers' length is the task's, not its
     * max_tokens': uniform in [out_tokens_lo, out_tokens_hi] tokens,
     * capped by max_tokens. */
    double out_lo, out_hi;
    double out_tokens_lo, out_tokens_hi;
    double lat_lo_ms, lat_hi_ms, reject_ms;
    /* Real limits: factor x configured (default 1), changing to
     * change_factor at change_at_ms (0: never). Headers tell the real. */
    double real_factor, change_at_ms, change_factor;
    /* A second change (0: never), after the first: e.g. a limit lowered
     * for a while and restored (Azure and OpenAI say the limit in force
     * in their x-ratelimit-limit-* headers). */
    double change2_at_ms, change2_factor;
    /* Overloaded (Anthropic's 529 overloaded_error, "everybody's load,
     * not your quota"): every request in [overload_from_ms,
     * overload_to_ms) is answered overload_status (0: 529) after
     * reject_ms, charged nothing, with no rate-limit headers. */
    double overload_from_ms, overload_to_ms;
    int overload_status;
    /* Longer answers for a while: a request admitted in [long_from_ms,
     * long_to_ms) answers out_lo2..out_hi2 x max_tokens (capped by it). */
    double long_from_ms, long_to_ms, out_lo2, out_hi2;
    /* Stray 429s: the first fleet request at or after each time is refused
     * although every bucket had room, and charged nothing. */
    double stray_ms[SIM_MAX_STRAYS];
    int nstray;
    double stray_retry_ms; /* what the stray 429 says (default 1000) */
    /* Headers: remaining token counts rounded to this unit (default 1000
     * for Anthropic, 1 otherwise); the probability that a response has no
     * rate-limit headers at all; that its token limit and remaining read
     * -1 (and the reset 0), as Azure sends on some APIs. */
    double hdr_round_tokens, hdr_omit_prob, hdr_minus_one_prob;
    /* The wall clock at t = 0, in Unix ms (reset times, Pacific days,
     * fixed windows). Default 2026-01-05T00:00:00Z. */
    int64_t epoch_ms;
    sim_neighbour nb[SIM_MAX_NEIGHBOURS];
    int nneighbours;
    /* Added to an admitted response's latency per output token (default
     * 0): a long answer takes longer, so its end-of-request correction
     * comes later. */
    double lat_per_token_ms;
    /* Azure: give the unused part of max_tokens back when the response
     * ends (default 0: never), the reading of a Microsoft answer that the
     * documentation does not confirm (docs/providers.md). */
    int azure_release_at_end;
} sim_world_cfg;

/* Fills *cfg with the defaults for provider (no limits set, no neighbours,
 * no strays, factor 1). Set the limits after. */
void sim_world_cfg_init(sim_world_cfg *cfg, sim_provider provider);

typedef struct sim_request {
    double t_ms;
    long long chars; /* the prompt, in characters */
    sim_lang lang;
    long long max_tokens;
    long long cached; /* prompt tokens read from the provider's cache */
    uint64_t tag;     /* the caller's, copied to the ledger */
} sim_request;

#define SIM_MAX_HEADERS 16

typedef struct sim_response {
    int status; /* 200 or 429 */
    double latency_ms;
    /* Usage as the provider reports it: input_tokens is all of the prompt
     * (cache reads included), cache_read the part read from the cache. */
    long long input_tokens, output_tokens, cache_read;
    int nheaders;
    char name[SIM_MAX_HEADERS][64], value[SIM_MAX_HEADERS][64];
    /* What the provider says to wait on a 429 (header or, for Gemini, the
     * body's retryDelay); 0 when it says nothing. */
    double retry_after_ms;
} sim_response;

typedef struct sim_world sim_world;

/* A new world at t = 0, or NULL (allocation failure, or a cfg it cannot
 * model: an unknown provider). The cfg is copied. */
sim_world *sim_world_new(const sim_world_cfg *cfg, uint64_t seed);
void sim_world_free(sim_world *w); /* NULL is a no-op */

/* Runs the world up to t_ms: neighbours act, responses end (and their
 * corrections are charged), a limit change happens, each at its own time,
 * in time order (ties in the order they were scheduled). */
void sim_world_advance(sim_world *w, double t_ms);

/* One fleet request at rq->t_ms (the world advances there first): the
 * admission decision and the response, written to *out. Its ledger entry
 * is the last one (sim_world_ledger_len() - 1) until the world next
 * advances. Headers by provider: azure x-ratelimit-{limit,remaining}-
 * {requests,tokens}, retry-after and retry-after-ms on a 429; openai
 * x-ratelimit-{limit,remaining,reset}-{requests,tokens}, retry-after;
 * anthropic anthropic-ratelimit-{requests,input-tokens,output-tokens}-
 * {limit,remaining,reset}, retry-after; bedrock and gemini none. */
void sim_world_send(sim_world *w, const sim_request *rq, sim_response *out);

/* The provider's own count of a prompt (without the per-request noise),
 * for a scenario to state its ratio to the governor's estimate. */
long long sim_world_prompt_tokens(const sim_world *w, long long chars, sim_lang lang);

/* The ledger. An entry per request, admitted or not, in the order they
 * were decided. charge[d] is what dimension d was charged at admission;
 * correction[d] what was charged (> 0) or given back (< 0) at t_end_ms. */
enum { SIM_WHO_ALL = -1, SIM_WHO_FLEET = 0, SIM_WHO_NEIGHBOURS = 1 };
enum { SIM_F_STRAY = 1, SIM_F_ENDED = 2 };

typedef struct sim_entry {
    uint64_t seq, tag;
    double t_ms, t_end_ms, latency_ms;
    int who; /* 0 the fleet, k >= 1 neighbour k - 1 */
    int status;
    int refused_by; /* the dimension that refused it, or -1 */
    unsigned flags;
    long long prompt_tokens, cached, max_tokens, output_tokens;
    long long charge[SIM_DIMS], correction[SIM_DIMS];
} sim_entry;

size_t sim_world_ledger_len(const sim_world *w);
/* Borrowed; valid until the next advance or send. NULL past the end. */
const sim_entry *sim_world_ledger_at(const sim_world *w, size_t i);

/* Requests of who (SIM_WHO_FLEET, SIM_WHO_NEIGHBOURS or SIM_WHO_ALL) with
 * that status (0: any). */
size_t sim_world_count(const sim_world *w, int who, int status);

/* The largest amount charged to dimension dim (fleet and neighbours) in
 * any window [s, s + window_ms): admissions at their times and later
 * charges (corrections > 0) at theirs; give-backs are not subtracted.
 * *at (optional): the window's start. */
double sim_world_max_window(const sim_world *w, int dim, double window_ms, double *at);

/* 64-bit FNV-1a of every ledger entry, for "the same seed gives the same
 * ledger". */
uint64_t sim_world_digest(const sim_world *w);

/* Introspection for tests and scenarios: the world's clock; a dimension's
 * real limit now (per minute; DAY per day; 0 none); a bucket's level now
 * (window-evaluated dimensions: what the window leaves); calls with a time
 * before the clock. */
double sim_world_now(const sim_world *w);
double sim_world_limit(const sim_world *w, int dim);
double sim_world_level(sim_world *w, int dim);
size_t sim_world_clock_errors(const sim_world *w);

/* The Unix ms of the first midnight in Los Angeles after unix_ms (US rule
 * since 2007: DST from the second Sunday of March 2:00 to the first Sunday
 * of November 2:00), and the Los Angeles day number (days since
 * 1970-01-01 in local time) of unix_ms. */
int64_t sim_pacific_next_midnight(int64_t unix_ms);
int64_t sim_pacific_day(int64_t unix_ms);

/* "azure", "openai", "anthropic", "bedrock", "gemini"; "requests",
 * "tokens", "input", "output", "day" (NULL when out of range). */
const char *sim_provider_name(sim_provider p);
const char *sim_dim_name(int dim);

/* Header helpers, exposed for the tests: a duration in Go's form as OpenAI
 * sends it ("6m0s", "1.5s", "250ms"), and an RFC 3339 UTC time to the
 * second ("2026-01-05T00:01:00Z"). Return the length written. */
int sim_fmt_duration(char *buf, size_t n, double ms);
int sim_fmt_rfc3339(char *buf, size_t n, int64_t unix_ms);

#endif
