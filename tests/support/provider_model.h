/* provider_model: how each provider counts a call against its rate limits,
 * written from the providers' documentation (docs/providers.md), not from
 * lua/. A test records what the fleet sent and what the provider answered;
 * the model turns each call into the charges (and give-backs) the provider
 * makes, per dimension, as replay.c events, and replays them through a
 * bucket of the configured rate and burst. A rejection is a call the real
 * provider would have answered 429: the governor over-offered.
 *
 *   azure, openai  requests: 1 at admission. tokens: the prompt as the
 *                  provider counts it plus max_tokens, at admission, never
 *                  given back (Azure's "estimated max processed-token
 *                  count"; OpenAI counts cached prompt tokens too).
 *   anthropic      requests: 1. input: the prompt less what was read from
 *                  the prompt cache, at admission, for good. output:
 *                  max_tokens at admission, corrected to the actual output
 *                  when the response ends (the unused part given back then).
 *
 * Not thread-safe; one model per test. */
#ifndef SLUICE_PROVIDER_MODEL_H
#define SLUICE_PROVIDER_MODEL_H

#include <stddef.h>

#include "replay.h"

typedef enum pm_profile { PM_AZURE = 0, PM_OPENAI, PM_ANTHROPIC } pm_profile;

enum { PM_REQUESTS = 0, PM_TOKENS, PM_INPUT, PM_OUTPUT, PM_DIMS };

typedef struct pm_limits {
    double per_minute[PM_DIMS]; /* 0: the provider has no such limit */
    double burst[PM_DIMS];      /* the bucket's capacity */
} pm_limits;

typedef struct provider_model {
    pm_profile profile;
    pm_limits lim;
    replay ev[PM_DIMS];
} provider_model;

void pm_init(provider_model *m, pm_profile profile, const pm_limits *lim);
void pm_free(provider_model *m);

/* A call admitted at t: its prompt as the provider counts it (prompt), the
 * part read from the prompt cache (cache_read), and max_tokens. Returns 0
 * or -1 on allocation failure. */
int pm_admit(provider_model *m, double t, long long prompt, long long cache_read, long long max_tokens);

/* The response of a call admitted with max_tokens ended at t with output
 * tokens generated: Anthropic gives the rest of its output charge back;
 * Azure and OpenAI change nothing. */
int pm_complete(provider_model *m, double t, long long max_tokens, long long output);

/* Rejections of dimension dim when every event is replayed in time order
 * (0 for a dimension the provider does not limit); *first the time of the
 * first one (optional). */
size_t pm_rejections(provider_model *m, int dim, double *first);

/* "requests", "tokens", "input", "output". */
const char *pm_dim_name(int dim);

#endif
