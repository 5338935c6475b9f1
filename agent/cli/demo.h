/* demo: what `sluice demo` (the orchestrator, cmd_demo.c) and its worker
 * processes (`sluice demo-worker`, demo_worker.c) share: the table of client
 * strategies and the line protocol on the worker's pipes.
 *
 * The strategies are the seed article's five (A-E), F (E's client paced by
 * tokens instead of requests), sluice, and proxy (the same plain client as
 * B pointed at sluiced's HTTP proxy). Every one
 * runs as the same fleet of P independent worker processes; a row of
 * demo_strategies says how one process behaves: how many of its requests
 * may be in flight, how it waits after a 429, whether it paces itself, and
 * whether it asks sluiced for a slot first.
 *
 * Worker protocol. The demo starts each worker with its flags (see
 * demo_worker.c), the worker's stdin and stdout are pipes:
 *   worker -> demo   "ready\n"          threads and connections are set up
 *   demo -> worker   "go <t0_ns>\n"     start now; t0 is CLOCK_MONOTONIC in
 *                                       ns, the instant latencies count from
 *   worker -> demo   "done\n"           one request finished (per request)
 *   worker -> demo   "result <json>\n"  the worker's totals, then it exits 0
 * CLOCK_MONOTONIC is system-wide on Linux, so the demo and its workers
 * share one clock. No dependencies. */
#ifndef SLUICE_DEMO_H
#define SLUICE_DEMO_H

#include <stddef.h>

/* How a process waits after a 429. */
typedef enum demo_wait {
    DEMO_WAIT_BACKOFF,     /* exponential backoff, full jitter; ignores Retry-After */
    DEMO_WAIT_RETRY_AFTER, /* sleeps the Retry-After the provider sent */
    DEMO_WAIT_SLUICE       /* settles the 429 with sluiced (a fleet-wide pause), asks RETRY */
} demo_wait;

/* What a process's client-side bucket paces, at the full quota. */
typedef enum demo_pace {
    DEMO_PACE_NONE,
    DEMO_PACE_REQUESTS, /* one request per 60000 / rpm ms */
    DEMO_PACE_TOKENS    /* a request's estimate per tpm: estimate x 60000 / tpm ms */
} demo_pace;

typedef struct demo_strategy {
    const char *id;   /* "A".."F", "sluice", "proxy": what --strategies takes */
    const char *name; /* the table's label */
    int in_flight;    /* per process; 0 = all of its requests (N/P) */
    demo_wait wait;
    demo_pace paced;      /* a client-side bucket at the full quota, per process */
    const char *describe; /* one line for --help and docs */
    int via_proxy;        /* plain HTTP to sluiced's HTTP proxy instead of the provider */
} demo_strategy;

#define DEMO_NSTRATEGIES 8

/* The strategies in table order: A, B, C, D, E, F, sluice, proxy. */
extern const demo_strategy demo_strategies[DEMO_NSTRATEGIES];

/* The strategy called id (case-insensitive; "S" means sluice), or NULL. */
const demo_strategy *demo_strategy_find(const char *id);

/* A scenario: the deployment's limits and the requests' shape, and the rows
 * run by default. "requests" is the seed article's (RPM binds); "tokens" is
 * seed 003's everyday case (TPM binds first: long prompts against a
 * deployment whose RPM is nowhere near reached). A value < 0 in rpm means
 * 60 x the time scale; agents 0 means one sluiced per worker process. */
typedef struct demo_scenario {
    const char *name;
    const char *describe;           /* one line for --help */
    const char *strategies;         /* the default --strategies */
    const char *dep_tag;            /* put in the deployment names: "", "tokens-" */
    long long requests, burst, tpm; /* the token burst is tpm / 60 */
    int prompt_chars;               /* 0: a one-line prompt of about 60 characters */
    int max_tokens;
    int agents;
} demo_scenario;

#define DEMO_NSCENARIOS 2

extern const demo_scenario demo_scenarios[DEMO_NSCENARIOS];

/* The scenario called name (case-insensitive), or NULL. */
const demo_scenario *demo_scenario_find(const char *name);

/* The prompt of request idx into out (chars + 128 bytes): exactly chars
 * ASCII characters, or a one-line prompt when chars is 0. No character
 * needs escaping in JSON. */
void demo_prompt(long long chars, long long idx, char *out);

/* What the provider charges request idx at admission, ceil(chars / 4) +
 * max_tokens (the estimate of docs/mock.md), for demo_prompt's prompt. */
long long demo_estimate(long long chars, long long max_tokens, long long idx);

/* The seed article's scenario, which time scale 1 reproduces. */
#define DEMO_SEED_RPM 60.0
#define DEMO_SEED_SERVICE_MIN_MS 300.0
#define DEMO_SEED_SERVICE_MAX_MS 900.0
#define DEMO_SEED_BACKOFF_BASE_MS 200.0

/* Most threads (requests in flight) a worker process runs. */
#define DEMO_MAX_THREADS 512

/* The worker subcommand (hidden from `sluice --help`). */
int cmd_demo_worker(int argc, char **argv);

#endif
