/* libFuzzer target for the configuration loader (lib/core/config.c, the
 * schema, over lib/core/cfgtab.c, the YAML engine) through
 * config_load_string(). Checked: no crash, leak or UB; a failure leaves
 * *out NULL and a message that starts with the name; a success yields a
 * config whose invariants hold (at least one deployment, every string
 * non-NULL, every deployment found by name, burst and ranges sane).
 *
 * Both files are linked from sluice_engine: with SLUICE_FUZZ the whole
 * project is compiled with -fsanitize=fuzzer-no-link, so libFuzzer sees
 * their edges. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    config *cfg = (config *)1;
    char err[256];
    int rc = config_load_string("fuzz.yaml", (const char *)data, size, &cfg, err, sizeof(err));
    if (rc != 0) {
        if (rc != -1 || cfg != NULL || strncmp(err, "fuzz.yaml:", 10) != 0) abort();
        if (!memchr(err, '\0', sizeof(err))) abort();
        return 0;
    }
    if (!cfg || cfg->ndeployments < 1) abort();
    if (!cfg->redis.host || !cfg->redis.unix_path || !cfg->redis.password || !cfg->agent.metrics_host) abort();
    if ((cfg->redis.host[0] != '\0') == (cfg->redis.unix_path[0] != '\0')) abort();
    if (cfg->agent.socket_mode < 0 || cfg->agent.socket_mode > 0777) abort();
    if (!(cfg->agent.fallback_share > 0 && cfg->agent.fallback_share <= 1)) abort();
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        const struct config_deployment *d = &cfg->deployments[i];
        if (config_deployment(cfg, d->name) != d) abort();
        if (d->rpm < 1 || d->burst.requests < 1 || d->burst.tokens < 1) abort();
        if (!d->endpoint || !d->api_key_env || !d->api_version) abort();
        if (!(d->aimd.decrease > 0 && d->aimd.decrease < 1)) abort();
    }
    config_free(cfg);
    return 0;
}
