/* replay: the provider's token bucket, used to judge a schedule.
 *
 * Tests collect what the governor granted (send time and cost per
 * dimension, plus refunds at settle time) and replay it in time order
 * through a bucket of the configured capacity and rate. A send is admitted
 * when the bucket holds its cost, or is full when the cost exceeds the
 * capacity (a request larger than the burst is admitted only into a full
 * bucket and leaves it in debt). Rejections are counted; a rejected send
 * consumes nothing, like a provider's 429. */
#ifndef SLUICE_REPLAY_H
#define SLUICE_REPLAY_H

#include <stddef.h>

typedef struct replay_event {
    double t_ms;   /* send (or refund) time, ms on the server's clock */
    double amount; /* > 0: a send of this cost; < 0: a refund */
    size_t seq;    /* insertion order, breaks ties (set by replay_add) */
} replay_event;

typedef struct replay {
    replay_event *ev;
    size_t n, cap;
} replay;

void replay_init(replay *r);
void replay_free(replay *r);
/* Returns 0 or -1 on allocation failure. */
int replay_add(replay *r, double t_ms, double amount);

/* Replays every event in time order through a bucket that starts full.
 * rate_per_ms is the refill rate. Returns the number of rejected sends;
 * *first_reject (optional) receives the time of the first one. */
size_t replay_rejections(replay *r, double capacity, double rate_per_ms, double *first_reject);

/* The span from the first to the last send (ms), 0 when fewer than two. */
double replay_makespan(const replay *r);

#endif
