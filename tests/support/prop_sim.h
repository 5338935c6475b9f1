/* prop_sim: a property test of the scripts as a fleet uses them.
 *
 * Simulated callers, driven by a source of choices (a seeded PRNG in the
 * test, the input bytes under libFuzzer), reserve, send at their slot (a
 * little late, within the jitter the schedule tolerates), cancel before
 * their slot, settle with usage below and at the estimate, fail, see 429s
 * with and without Retry-After, hit a hard quota, and pause, against a
 * real Redis with the scripts' test clock moved to each event's time.
 * Every call the provider admitted is replayed through provider_model.c,
 * the provider's documented accounting: a rejection there is an
 * over-offer. Each shed reserve is checked to consume nothing.
 *
 * The choices come from rnd(ud): any 64-bit values, so a fuzzer's bytes
 * are as good as a PRNG's. */
#ifndef SLUICE_PROP_SIM_H
#define SLUICE_PROP_SIM_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "provider_model.h"

typedef uint64_t (*prop_rand_fn)(void *ud);

typedef struct prop_cfg {
    const char *dep; /* the deployment (configured here) */
    pm_profile profile;
    int callers; /* 1..16 */
    int events;  /* steps to run */
    /* Overrides of the deployment's defaults, for showing that the model
     * catches a wrong rule: -1 keeps the default. */
    int refund_tokens, refund_input, refund_output;
    long long jitter_ms; /* < 0: the default (10) */
    long long late_ms;   /* sends start up to this late; < 0: jitter_ms */
    /* Speak the scripts' older forms (one combined token figure per item,
     * settle quads): to run this target against the scripts before
     * provider profiles (azure only). */
    int legacy;
} prop_cfg;

typedef struct prop_stats {
    size_t reserves, grants, sheds, cancels, sends, oks, throttles, failures, quotas;
    size_t rejections[PM_DIMS];
    double first_rejection[PM_DIMS]; /* ms from the run's start, where rejections[d] > 0 */
    size_t shed_changed;             /* sheds that moved the schedule on (must be 0) */
    double span_ms;                  /* simulated time covered */
    long long rpm, tpm, itpm, otpm;
} prop_stats;

/* Runs one simulation on connection c. Returns 0, or -1 with err set when
 * a script call failed (the simulation itself, not a property: those are
 * in *out for the caller to assert). */
int prop_run(redisContext *c, const prop_cfg *cfg, prop_rand_fn rnd, void *ud, prop_stats *out, char *err,
             size_t errlen);

/* splitmix64, for seeded runs: ud points at the uint64_t state. */
uint64_t prop_splitmix(void *ud);

#endif
