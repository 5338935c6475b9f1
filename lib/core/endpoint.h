/* endpoint: where a deployment's requests go upstream, from its
 * endpoint, style and api_version in the configuration. One builder for
 * every sender: `sluice run` (agent/cli/run_target.c) and sluiced's HTTP
 * proxy (agent/proxy_call.c).
 *
 * URLs (op is the API path after /v1/: "chat/completions", "messages",
 * "embeddings", ...):
 *   azure              <endpoint>/openai/deployments/<name>/<op>[?api-version=V]
 *   openai, custom     <endpoint>[/v1]/<op>      (/v1 unless the endpoint ends in it)
 *   anthropic          <endpoint>[/v1]/<op>
 * A trailing '/' of the endpoint is dropped. V is api_version when given,
 * else the deployment's api_version; without either no query is added.
 *
 * Depends on config. Pure: no I/O, no globals, never prints. */
#ifndef SLUICE_ENDPOINT_H
#define SLUICE_ENDPOINT_H

#include <stddef.h>

#include "config.h"

/* Writes d's URL for op into out (size n). Returns 0, or -1 when d has no
 * endpoint or the URL does not fit (out is then ""). */
int endpoint_url(const struct config_deployment *d, const char *op, const char *api_version, char *out, size_t n);

/* The header that carries a provider key in d's style: "api-key" (azure),
 * "x-api-key" (anthropic), "Authorization" (openai, custom; its value is
 * "Bearer <key>"). Static text. */
const char *endpoint_key_header(int style);

/* What precedes the key in that header's value: "Bearer " (openai,
 * custom) or "". Static text. */
const char *endpoint_key_prefix(int style);

/* The anthropic-version a deployment of style anthropic sends when the
 * request gives none: its api_version, else Anthropic's 2023-06-01. */
const char *endpoint_anthropic_version(const struct config_deployment *d);

#endif
