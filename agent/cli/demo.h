/* demo: what `sluice demo` (the orchestrator, cmd_demo.c) and its worker
 * processes (`sluice demo-worker`, demo_worker.c) share: the table of client
 * strategies and the line protocol on the worker's pipes.
 *
 * The strategies are the seed article's five (A-E), sluice, and proxy (the
 * same plain client as B pointed at sluiced's HTTP proxy). Every one
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

typedef struct demo_strategy {
    const char *id;   /* "A".."E", "sluice": what --strategies takes */
    const char *name; /* the table's label */
    int in_flight;    /* per process; 0 = all of its requests (N/P) */
    demo_wait wait;
    int paced;            /* a client-side token bucket at the full quota, per process */
    const char *describe; /* one line for --help and docs */
    int via_proxy;        /* plain HTTP to sluiced's HTTP proxy instead of the provider */
} demo_strategy;

#define DEMO_NSTRATEGIES 7

/* The strategies in table order: A, B, C, D, E, sluice, proxy. */
extern const demo_strategy demo_strategies[DEMO_NSTRATEGIES];

/* The strategy called id (case-insensitive; "S" means sluice), or NULL. */
const demo_strategy *demo_strategy_find(const char *id);

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
