/* budget: what a request costs in money, exactly (budgets in money,
 * docs/configuration.md "Budgets"). Pure: no I/O, no allocation, no
 * clock.
 *
 * Prices are per token in 1e-12 of the currency (config.h's price.*_p:
 * a price per million tokens with up to six decimals is an integer
 * there); costs are in 1e-6 of the currency, rounded up, so that a cost
 * is never less than what the provider bills. */
#ifndef SLUICE_BUDGET_H
#define SLUICE_BUDGET_H

#include "engine.h"

typedef struct budget_price {
    long long input, output, cache_read, cache_write; /* 1e-12 of the currency per token */
} budget_price;

/* The largest a request of this estimate may cost: every input token at
 * the dearest of the input, cache-read and cache-write prices, every output token of
 * the max output at the output price. Without the split (split 0) every
 * token at the dearest price. In 1e-6 of the currency, rounded up. */
long long budget_max_cost(const budget_price *p, int split, long long tokens, long long input, long long output);

/* What a call cost as the provider bills it: the input less its cache
 * reads and writes at the input price, the cache reads and writes at
 * theirs, the output at the output price. usage with input and output
 * unknown (-1): tokens (when known) at the dearest price, at most the
 * reservation when they are within the reserved tokens; nothing known:
 * the reservation (reserved). 1e-6 of the currency, rounded up. */
long long budget_actual_cost(const budget_price *p, const usage_rec *u, long long reserved, long long reserved_tokens);

#endif
