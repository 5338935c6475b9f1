#include "mock_bucket.h"

#include <math.h>

void mock_bucket_init(mock_bucket *b, double capacity, double rate_per_ms, double now_ms) {
    b->capacity = capacity;
    b->rate_per_ms = rate_per_ms;
    b->level = capacity;
    b->last_ms = now_ms;
}

void mock_bucket_refill(mock_bucket *b, double now_ms) {
    if (now_ms > b->last_ms) {
        b->level += (now_ms - b->last_ms) * b->rate_per_ms;
        if (b->level > b->capacity) b->level = b->capacity;
        b->last_ms = now_ms;
    }
}

double mock_bucket_wait_ms(const mock_bucket *b, double cost) {
    double need = cost < b->capacity ? cost : b->capacity;
    if (b->level >= need) return 0;
    return (need - b->level) / b->rate_per_ms;
}

void mock_bucket_take(mock_bucket *b, double cost) { b->level -= cost; }

void mock_bucket_give(mock_bucket *b, double amount) {
    b->level += amount;
    if (b->level > b->capacity) b->level = b->capacity;
}

void mock_bucket_set(mock_bucket *b, double capacity, double rate_per_ms, double now_ms) {
    mock_bucket_refill(b, now_ms);
    b->capacity = capacity;
    b->rate_per_ms = rate_per_ms;
    if (b->level > capacity) b->level = capacity;
}

double mock_bucket_reset_ms(const mock_bucket *b) {
    if (b->level >= b->capacity) return 0;
    return (b->capacity - b->level) / b->rate_per_ms;
}

double mock_bucket_remaining(const mock_bucket *b) { return b->level > 0 ? floor(b->level) : 0; }
