/* demo_strategies: the client strategies `sluice demo` compares. The
 * seed article's five (its table and harness: A-E), each run by every one
 * of the P processes on its own, and sluice. */
#include "demo.h"

#include <strings.h>

const demo_strategy demo_strategies[DEMO_NSTRATEGIES] = {
    {"A", "A exp backoff", 0, DEMO_WAIT_BACKOFF, 0,
     "all requests in flight, exponential backoff with full jitter (base 200 ms), ignores Retry-After"},
    {"B", "B Retry-After", 0, DEMO_WAIT_RETRY_AFTER, 0, "all requests in flight, sleeps Retry-After"},
    {"C", "C sem(4) + Retry-After", 4, DEMO_WAIT_RETRY_AFTER, 0,
     "semaphore of 4 in flight per process, sleeps Retry-After"},
    {"D", "D sem(1) + Retry-After", 1, DEMO_WAIT_RETRY_AFTER, 0,
     "one in flight per process (serial), sleeps Retry-After"},
    {"E", "E token bucket + sem(4)", 4, DEMO_WAIT_RETRY_AFTER, 1,
     "each process paces itself at the full quota, semaphore of 4, sleeps Retry-After"},
    {"sluice", "sluice (shared budget)", 0, DEMO_WAIT_SLUICE, 0,
     "all requests in flight, each waits for its slot from sluiced (ACQUIRE), SETTLEs, "
     "asks RETRY before another attempt"},
};

const demo_strategy *demo_strategy_find(const char *id) {
    if (strcasecmp(id, "S") == 0) id = "sluice";
    for (int i = 0; i < DEMO_NSTRATEGIES; i++)
        if (strcasecmp(demo_strategies[i].id, id) == 0) return &demo_strategies[i];
    return NULL;
}
