/* proxy_auth: who may spend which provider key through the HTTP proxy
 * (docs/security.md, "Who may spend the provider key").
 *
 * By default the proxy holds no key: the caller's own credentials
 * (Authorization, api-key, x-api-key) go upstream unchanged, so the proxy
 * grants nothing the caller did not already have. A deployment with
 * inject_key sends the key of its api_key_env instead; then a caller on a
 * TCP listener (which any local process can reach) must present a client
 * key of agent.http.clients as its API key, in whichever of the three
 * headers its SDK uses, and its requests count as that client's tenant
 * and lane. On the UNIX-socket listener the file system is the gate, as
 * for the RESP socket: a client key is optional there (and still binds
 * tenant and lane when given). A client key never goes upstream: offered
 * for a deployment that passes credentials through, it is refused.
 *
 * Depends on config and http_reader. Pure: no I/O, no globals; never
 * copies a key anywhere but the upstream header it builds. */
#ifndef SLUICE_PROXY_AUTH_H
#define SLUICE_PROXY_AUTH_H

#include <stddef.h>

#include "config.h"
#include "http_reader.h"
#include "proxy_wire.h"

/* What a request may do with credentials. */
typedef struct proxy_auth {
    int inject;                              /* upstream gets the deployment's key, not the caller's */
    const struct config_http_client *client; /* the client key presented, or NULL (borrowed from the config) */
} proxy_auth;

/* Decides for request m to target t (from proxy_parse on cfg), which came
 * over a UNIX socket when unix_socket. Returns 0 with *out, or -1 with
 * *err (UNAUTHORIZED, in words that never quote a key). */
int proxy_auth_check(const config *cfg, const config_target *t, int unix_socket, const http_msg *m, proxy_auth *out,
                     proxy_error *err);

/* 1 when header `name` carries a credential (Authorization, api-key,
 * x-api-key, any case): with a->inject it is not forwarded. */
int proxy_auth_is_credential(const char *name);

/* The credential header that goes upstream to deployment d when a->inject:
 * "api-key: KEY", "x-api-key: KEY" or "Authorization: Bearer KEY" by d's
 * style, written into buf (wipe it after use). Returns its length, or -1
 * when it does not fit or d has no key loaded. */
int proxy_auth_upstream_header(const struct config_deployment *d, char *buf, size_t n);

#endif
