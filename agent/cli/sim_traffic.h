/* sim_traffic: the traffic `sluice sim` offers a simulated fleet: demand
 * as a multiple of a deployment's quota, split over lanes and tenants by
 * their shares (--lane NAME=SHARE, --tenant NAME=SHARE), or a JSONL trace
 * of past requests. Every random choice comes from a seed; a deployment's
 * draws depend on its name and the seed only, so simulating it alone gives
 * what it gets among the others.
 *
 * Messages go to stderr prefixed "sluice sim: " (this is the command's
 * own module). Depends on lib/core/config.h (names, deployments' limits)
 * and jansson (the trace). */
#ifndef SLUICE_SIM_TRAFFIC_H
#define SLUICE_SIM_TRAFFIC_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define SIM_TRAFFIC_NAME_MAX (CONFIG_NAME_MAX + 1)
#define SIM_MAX_SHARES 16

typedef struct sim_share {
    char name[SIM_TRAFFIC_NAME_MAX];
    double share;
} sim_share;

typedef struct sim_shares {
    sim_share v[SIM_MAX_SHARES];
    size_t n;
    double total;
} sim_shares;

/* One request of the traffic. Names "" mean the default lane / tenant. */
typedef struct sim_req {
    double t_ms;
    long long input, output;
    char deployment[SIM_TRAFFIC_NAME_MAX]; /* trace: "" = every simulated deployment */
    char lane[SIM_TRAFFIC_NAME_MAX], tenant[SIM_TRAFFIC_NAME_MAX];
} sim_req;

typedef struct sim_reqs {
    sim_req *v;
    size_t n, cap;
} sim_reqs;

/* The demand: seed, multiple of the quota, virtual seconds, and each
 * request's input and max output tokens. */
typedef struct sim_demand {
    uint64_t seed;
    double demand, seconds;
    long long input, output;
} sim_demand;

/* A deployment's own random stream's seed (the same with or without the
 * others). */
uint64_t sim_traffic_seed(uint64_t seed, const char *deployment);

/* Takes every --lane and --tenant (NAME=SHARE, "--lane X" or "--lane=X")
 * out of argv[1..] into lanes and tenants; argv keeps the rest, *argc
 * their count. Returns 0, or -1 after saying why. */
int sim_shares_collect(int *argc, char **argv, sim_shares *lanes, sim_shares *tenants);

/* Appends a zeroed request (NULL: out of memory). */
sim_req *sim_reqs_push(sim_reqs *r);
void sim_reqs_free(sim_reqs *r);

/* The quota of d in requests a minute for requests of in input and out
 * max output tokens: the least of each configured limit / the request's
 * charge to it, as the governor counts its estimate. */
double sim_traffic_quota_per_min(const struct config_deployment *d, long long in, long long out);

/* Appends dm->demand x d's quota for dm->seconds to out: one arrival in
 * each equal slice of the span, at a seeded point in it, lanes and
 * tenants drawn by their shares (none: "" each). Returns 0 or -1 (said
 * why). */
int sim_traffic_demand(const struct config_deployment *d, const sim_demand *dm, const sim_shares *lanes,
                       const sim_shares *tenants, sim_reqs *out);

/* Reads a trace: one JSON object a line, {"t_ms": 0, "deployment": "d",
 * "input_tokens": 800, "output_tokens": 200, "lane": "batch", "tenant":
 * "t"}, only t_ms required (tokens: input, output when absent; also
 * "input", "output", "max_tokens"); blank and # lines skipped. A
 * deployment must be in cfg (named cfg_name in messages). Sorted by time.
 * Returns 0, or -1 after saying why (file and line). */
int sim_traffic_load_trace(const char *path, const config *cfg, const char *cfg_name, long long input, long long output,
                           sim_reqs *out);

#endif
