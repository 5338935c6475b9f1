/* budget: what a request costs in money. See budget.h. */
#define _GNU_SOURCE
#include "budget.h"

/* 1e-12 units to 1e-6, rounded up. */
static long long to_micro(long long pico) { return pico <= 0 ? 0 : (pico + 999999) / 1000000; }

static long long max2(long long a, long long b) { return a > b ? a : b; }

long long budget_max_cost(const budget_price *p, int split, long long tokens, long long input, long long output) {
    long long in_price = max2(p->input, p->cache_write);
    if (!split) {
        long long dearest = max2(in_price, max2(p->output, p->cache_read));
        return to_micro((tokens > 0 ? tokens : 0) * dearest);
    }
    return to_micro((input > 0 ? input : 0) * in_price + (output > 0 ? output : 0) * p->output);
}

long long budget_actual_cost(const budget_price *p, const engine_usage *u, long long reserved,
                             long long reserved_tokens) {
    if (u->input >= 0 && u->output >= 0) {
        long long read = u->cache_read > 0 ? u->cache_read : 0;
        long long write = u->cache_write > 0 ? u->cache_write : 0;
        if (read > u->input) read = u->input;
        if (write > u->input - read) write = u->input - read;
        long long plain = u->input - read - write;
        return to_micro(plain * p->input + read * p->cache_read + write * p->cache_write + u->output * p->output);
    }
    if (u->tokens >= 0) {
        long long dearest = max2(max2(p->input, p->cache_write), max2(p->output, p->cache_read));
        long long c = to_micro(u->tokens * dearest);
        return u->tokens <= reserved_tokens && c > reserved ? reserved : c;
    }
    return reserved;
}
