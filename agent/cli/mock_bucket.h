/* mock_bucket: the provider-side token bucket of the mock.
 *
 * A bucket of `capacity` units refilled continuously at `rate_per_ms`,
 * starting full. A cost fits when the level holds it; a cost larger than
 * the capacity fits only into a full bucket and leaves it in debt. This is
 * exactly the rule of tests/support/replay.c, so replaying the mock's
 * accept times through that replay never finds a rejection. Times are
 * milliseconds on one monotonic clock chosen by the caller. */
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

/* Time in ms until the bucket is full again (0 when full). */
double mock_bucket_reset_ms(const mock_bucket *b);

/* Whole units available now (0 when empty or in debt). */
double mock_bucket_remaining(const mock_bucket *b);

#endif
