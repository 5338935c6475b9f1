/* endpoint: upstream URLs of deployments. See endpoint.h. */
#include "endpoint.h"

#include <stdio.h>
#include <string.h>

int endpoint_url(const struct config_deployment *d, const char *op, const char *api_version, char *out, size_t n) {
    if (n) out[0] = '\0';
    if (!d->endpoint[0] || !n) return -1;
    size_t elen = strlen(d->endpoint);
    while (elen && d->endpoint[elen - 1] == '/') elen--;
    const char *v = api_version && api_version[0] ? api_version : d->api_version;
    int w;
    if (d->style == CONFIG_STYLE_AZURE) {
        w = snprintf(out, n, "%.*s/openai/deployments/%s/%s%s%s", (int)elen, d->endpoint, d->name, op,
                     v[0] ? "?api-version=" : "", v);
    } else {
        int has_v1 = elen >= 3 && strncmp(d->endpoint + elen - 3, "/v1", 3) == 0;
        w = snprintf(out, n, "%.*s%s/%s", (int)elen, d->endpoint, has_v1 ? "" : "/v1", op);
    }
    if (w < 0 || (size_t)w >= n) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

const char *endpoint_key_header(int style) {
    switch (style) {
    case CONFIG_STYLE_AZURE: return "api-key";
    case CONFIG_STYLE_ANTHROPIC: return "x-api-key";
    default: return "Authorization";
    }
}

const char *endpoint_key_prefix(int style) {
    return style == CONFIG_STYLE_AZURE || style == CONFIG_STYLE_ANTHROPIC ? "" : "Bearer ";
}

const char *endpoint_anthropic_version(const struct config_deployment *d) {
    return d->api_version[0] ? d->api_version : "2023-06-01";
}
