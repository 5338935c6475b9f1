/* budget: what a request costs in money. See budget.h. */
#define _GNU_SOURCE
#include "budget.h"

/* Beyond any budget (1e9 of a currency in 1e-6): a product that would
 * overflow is this, which no limit holds. */
#define COST_SATURATED (1LL << 60)

/* 1e-12 units to 1e-6, rounded up. */
static long long to_micro(long long pico) {
    if (pico >= COST_SATURATED) return COST_SATURATED;
    return pico <= 0 ? 0 : (pico + 999999) / 1000000;
}

static long long max2(long long a, long long b) { return a > b ? a : b; }

/* a x b + c, saturated (a, b, c >= 0). */
static long long mul_add(long long a, long long b, long long c) {
    long long m, s;
    if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, &s) || s > COST_SATURATED)
        return COST_SATURATED;
    return s;
}

long long budget_max_cost(const budget_price *p, int split, long long tokens, long long input, long long output) {
    /* An input token may turn out a cache read or write, whichever is dearer. */
    long long in_price = max2(p->input, max2(p->cache_write, p->cache_read));
    if (!split) {
        long long dearest = max2(in_price, p->output);
        return to_micro(mul_add(tokens > 0 ? tokens : 0, dearest, 0));
    }
    return to_micro(mul_add(input > 0 ? input : 0, in_price, mul_add(output > 0 ? output : 0, p->output, 0)));
}

long long budget_actual_cost(const budget_price *p, const usage_rec *u, long long reserved, long long reserved_tokens) {
    if (u->input >= 0 && u->output >= 0) {
        long long read = u->cache_read > 0 ? u->cache_read : 0;
        long long write = u->cache_write > 0 ? u->cache_write : 0;
        if (read > u->input) read = u->input;
        if (write > u->input - read) write = u->input - read;
        long long plain = u->input - read - write;
        long long out = u->output > 0 ? u->output : 0;
        return to_micro(mul_add(
            plain, p->input, mul_add(read, p->cache_read, mul_add(write, p->cache_write, mul_add(out, p->output, 0)))));
    }
    if (u->tokens >= 0) {
        long long dearest = max2(max2(p->input, p->cache_write), max2(p->output, p->cache_read));
        long long c = to_micro(mul_add(u->tokens, dearest, 0));
        return u->tokens <= reserved_tokens && c > reserved ? reserved : c;
    }
    return reserved;
}
