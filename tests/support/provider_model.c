/* provider_model: see provider_model.h. The rules are the providers'
 * (docs/providers.md cites where each is documented); keep this file free
 * of anything taken from the governor's scripts. */
#include "provider_model.h"

#include <string.h>

void pm_init(provider_model *m, pm_profile profile, const pm_limits *lim) {
    memset(m, 0, sizeof(*m));
    m->profile = profile;
    m->lim = *lim;
    for (int d = 0; d < PM_DIMS; d++) replay_init(&m->ev[d]);
}

void pm_free(provider_model *m) {
    for (int d = 0; d < PM_DIMS; d++) replay_free(&m->ev[d]);
}

static int charge(provider_model *m, int dim, double t, double amount) {
    if (m->lim.per_minute[dim] <= 0 || amount == 0) return 0;
    return replay_add(&m->ev[dim], t, amount);
}

int pm_admit(provider_model *m, double t, long long prompt, long long cache_read, long long max_tokens) {
    int rc = charge(m, PM_REQUESTS, t, 1);
    switch (m->profile) {
    case PM_AZURE:
    case PM_OPENAI:
        /* Azure: "prompt text and count, the max_tokens parameter" make the
         * estimated max processed-token count charged as the request
         * arrives; nothing is given back. OpenAI counts cached prompt
         * tokens toward TPM like any other. A request always costs at least
         * one unit: a replay event of 0 would be no send at all. */
        rc |= charge(m, PM_TOKENS, t, (double)(prompt + max_tokens));
        break;
    case PM_ANTHROPIC:
        /* Input tokens per minute: the prompt, less what is read from the
         * prompt cache (not counted for current models), at admission. The
         * output bucket holds max_tokens until the response ends. */
        rc |= charge(m, PM_INPUT, t, (double)(prompt - cache_read));
        rc |= charge(m, PM_OUTPUT, t, (double)max_tokens);
        break;
    }
    return rc;
}

int pm_complete(provider_model *m, double t, long long max_tokens, long long output) {
    if (m->profile != PM_ANTHROPIC || output >= max_tokens) return 0;
    /* "adjusted at the end of the request to reflect the actual number of
     * output tokens": the unused part comes back when the response ends. */
    return charge(m, PM_OUTPUT, t, -(double)(max_tokens - output));
}

size_t pm_rejections(provider_model *m, int dim, double *first) {
    if (m->lim.per_minute[dim] <= 0) return 0;
    return replay_rejections(&m->ev[dim], m->lim.burst[dim], m->lim.per_minute[dim] / 60000.0, first);
}

const char *pm_dim_name(int dim) {
    static const char *const names[PM_DIMS] = {"requests", "tokens", "input", "output"};
    return dim >= 0 && dim < PM_DIMS ? names[dim] : "?";
}
