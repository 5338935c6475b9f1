/* mock_bucket: the provider-side token bucket of the mock.
 *
 * A bucket of `capacity` units refilled continuously at `rate_per_ms`,
 * starting full. A cost fits when the level holds it; a cost larger than
 * the capacity fits only into a full bucket and leaves it in debt. A
 * refund gives units back, never above the capacity. Times are
 * milliseconds on one monotonic clock chosen by the caller.
 *
 * This is the provider's rule, written here on its own: the schedules a
 * test judges are replayed through tests/support/replay.c, a separate
 * implementation, and test_mock feeds the same random traces through both
 * and checks that they admit the same sends. The one deliberate
 * difference: the comparison here is exact, while the replay forgives a
 * millionth of a unit of rounding, so the mock is never the more lenient
 * of the two. */
#ifndef SLUICE_MOCK_BUCKET_H
#define SLUICE_MOCK_BUCKET_H

typedef struct mock_bucket {
    double capacity;
    double rate_per_ms;
    double level; /* may go negative after an oversize cost */
    double last_ms;
} mock_bucket;

/* A full bucket at now_ms. capacity and rate_per_ms must be > 0. */
void mock_bucket_init(mock_bucket *b, double capacity, double rate_per_ms, double now_ms);

/* Adds what flowed in since the last refill, up to the capacity. */
void mock_bucket_refill(mock_bucket *b, double now_ms);

/* 0 when cost fits now, else the time in ms until it will (> 0). Call after
 * mock_bucket_refill(). Never changes the bucket. */
double mock_bucket_wait_ms(const mock_bucket *b, double cost);

/* Takes cost (after a successful mock_bucket_wait_ms()). */
void mock_bucket_take(mock_bucket *b, double cost);

/* Gives amount (>= 0) back, up to the capacity (after mock_bucket_refill()). */
void mock_bucket_give(mock_bucket *b, double amount);

/* Changes the capacity and the rate from now_ms on: what flowed in until
 * now is added at the old rate, and the level is kept, capped at the new
 * capacity (a debt stays a debt). Both must be > 0. */
void mock_bucket_set(mock_bucket *b, double capacity, double rate_per_ms, double now_ms);

/* Time in ms until the bucket is full again (0 when full). */
double mock_bucket_reset_ms(const mock_bucket *b);

/* Whole units available now (0 when empty or in debt). */
double mock_bucket_remaining(const mock_bucket *b);

#endif
