/* demo_strategies: the client strategies `sluice demo` compares. The
 * seed article's five (its table and harness: A-E), each run by every one
 * of the P processes on its own, sluice, and proxy: B's unmodified HTTP
 * client (libcurl, no libsluice, no ACQUIRE) whose URL is sluiced's HTTP
 * proxy. */
#include "demo.h"

#include <strings.h>

const demo_strategy demo_strategies[DEMO_NSTRATEGIES] = {
    {"A", "A exp backoff", 0, DEMO_WAIT_BACKOFF, 0,
     "all requests in flight, exponential backoff with full jitter (base 200 ms), ignores Retry-After", 0},
    {"B", "B Retry-After", 0, DEMO_WAIT_RETRY_AFTER, 0, "all requests in flight, sleeps Retry-After", 0},
    {"C", "C sem(4) + Retry-After", 4, DEMO_WAIT_RETRY_AFTER, 0,
     "semaphore of 4 in flight per process, sleeps Retry-After", 0},
    {"D", "D sem(1) + Retry-After", 1, DEMO_WAIT_RETRY_AFTER, 0,
     "one in flight per process (serial), sleeps Retry-After", 0},
    {"E", "E token bucket + sem(4)", 4, DEMO_WAIT_RETRY_AFTER, 1,
     "each process paces itself at the full quota, semaphore of 4, sleeps Retry-After", 0},
    {"sluice", "sluice (shared budget)", 0, DEMO_WAIT_SLUICE, 0,
     "all requests in flight, each waits for its slot from sluiced (ACQUIRE), SETTLEs, "
     "asks RETRY before another attempt",
     0},
    {"proxy", "proxy (sluiced HTTP)", 0, DEMO_WAIT_RETRY_AFTER, 0,
     "B's plain HTTP client (all in flight, sleeps Retry-After) with its URL on sluiced's HTTP proxy: no "
     "library, no ACQUIRE",
     1},
};

const demo_strategy *demo_strategy_find(const char *id) {
    if (strcasecmp(id, "S") == 0) id = "sluice";
    for (int i = 0; i < DEMO_NSTRATEGIES; i++)
        if (strcasecmp(demo_strategies[i].id, id) == 0) return &demo_strategies[i];
    return NULL;
}
