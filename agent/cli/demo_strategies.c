/* demo_strategies: the client strategies `sluice demo` compares and its
 * scenarios. The seed article's five (its table and harness: A-E), each
 * run by every one of the P processes on its own, F (E paced by tokens,
 * seed 003's "token-aware limiter"), sluice, and proxy: B's unmodified HTTP
 * client (libcurl, no libsluice, no ACQUIRE) whose URL is sluiced's HTTP
 * proxy. */
#include "demo.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

const demo_strategy demo_strategies[DEMO_NSTRATEGIES] = {
    {"A", "A exp backoff", 0, DEMO_WAIT_BACKOFF, 0,
     "all requests in flight, exponential backoff with full jitter (base 200 ms), ignores Retry-After", 0},
    {"B", "B Retry-After", 0, DEMO_WAIT_RETRY_AFTER, 0, "all requests in flight, sleeps Retry-After", 0},
    {"C", "C sem(4) + Retry-After", 4, DEMO_WAIT_RETRY_AFTER, 0,
     "semaphore of 4 in flight per process, sleeps Retry-After", 0},
    {"D", "D sem(1) + Retry-After", 1, DEMO_WAIT_RETRY_AFTER, 0,
     "one in flight per process (serial), sleeps Retry-After", 0},
    {"E", "E token bucket + sem(4)", 4, DEMO_WAIT_RETRY_AFTER, DEMO_PACE_REQUESTS,
     "each process paces itself at the full quota, semaphore of 4, sleeps Retry-After", 0},
    {"F", "F TPM bucket + sem(4)", 4, DEMO_WAIT_RETRY_AFTER, DEMO_PACE_TOKENS,
     "each process paces itself at the full token quota (its estimate per TPM), semaphore of 4, sleeps "
     "Retry-After (needs a TPM)",
     0},
    {"sluice", "sluice (shared budget)", 0, DEMO_WAIT_SLUICE, 0,
     "all requests in flight, each waits for its slot from sluiced (ACQUIRE), SETTLEs, "
     "asks RETRY before another attempt",
     0},
    {"proxy", "proxy (sluiced HTTP)", 8, DEMO_WAIT_RETRY_AFTER, 0,
     "a plain HTTP client, 8 in flight per process as an SDK's pool would be, sleeps Retry-After, with its URL "
     "on sluiced's HTTP proxy: no library, no ACQUIRE",
     1},
};

const demo_strategy *demo_strategy_find(const char *id) {
    if (strcasecmp(id, "S") == 0) id = "sluice";
    for (int i = 0; i < DEMO_NSTRATEGIES; i++)
        if (strcasecmp(demo_strategies[i].id, id) == 0) return &demo_strategies[i];
    return NULL;
}

/* The tokens scenario: an Azure-style deployment of 600 RPM and 120 000 TPM,
 * prompts of 800 characters and max_tokens 200, so each request is charged
 * 200 + 200 = 400 tokens and the deployment serves 300 of them a minute:
 * TPM binds at half the RPM. 150 requests make the token floor (60 000 -
 * 2 000) / 2 000 per s = 29 s, the requests scenario's. The token burst is
 * one second of quota, sluiced's default burst.tokens. */
const demo_scenario demo_scenarios[DEMO_NSCENARIOS] = {
    {"requests", "the seed article's: short prompts, RPM binds (600 RPM, burst 10, 300 requests)", "A,B,C,D,E,sluice",
     "", 300, 10, 0, 0, 64, 1},
    {"tokens",
     "seed 003's everyday case: 800-character prompts, max_tokens 200, TPM binds (600 RPM, 120000 TPM, "
     "150 requests), sluice through its HTTP proxy, one sluiced per process",
     "A,B,E,F,proxy", "tokens-", 150, 10, 120000, 800, 200, 0},
};

const demo_scenario *demo_scenario_find(const char *name) {
    for (int i = 0; i < DEMO_NSCENARIOS; i++)
        if (strcasecmp(demo_scenarios[i].name, name) == 0) return &demo_scenarios[i];
    return NULL;
}

void demo_prompt(long long chars, long long idx, char *out) {
    static const char filler[] = " Keep the names, the dates and the amounts; leave out the boilerplate.";
    int n = snprintf(out, 128, "Summarise document %lld of the nightly import in one line.", idx);
    if (chars == 0) return;
    for (size_t k = 0; (long long)n < chars; k++, n++) out[n] = filler[k % (sizeof(filler) - 1)];
    out[chars] = '\0';
}

long long demo_estimate(long long chars, long long max_tokens, long long idx) {
    char buf[128];
    if (chars > 0) return (chars + 3) / 4 + max_tokens;
    demo_prompt(0, idx, buf);
    return (long long)((strlen(buf) + 3) / 4) + max_tokens;
}
