/* http_config: sluiced's agent.http settings applied to an http_server
 * (http_server.h), the transport the daemon shares with the mock
 * provider: the limits and timeouts, and the listeners, UNIX sockets made
 * as the RESP socket is (unixsock.h: a stale file replaced, the owner,
 * group and mode set before anyone may connect, the file removed when the
 * server stops accepting, when still ours).
 *
 * Depends on config and unixsock. Never prints. Errors are negative SL_E*
 * codes (sluice.h), which http_server.h's HTTP_E* equal. */
#ifndef SLUICE_HTTP_CONFIG_H
#define SLUICE_HTTP_CONFIG_H

#include <stddef.h>

#include "config.h"
#include "http_server.h"

/* The limits of agent.http in cfg. */
void http_config_limits(const config *cfg, http_server_limits *out);

/* A server on loop with the limits of cfg. Returns as http_server_new(). */
int http_config_server(uv_loop_t *loop, const config *cfg, const http_server_hooks *hooks, http_server **out);

/* Takes the limits of cfg (a reload). */
void http_config_apply(http_server *s, const config *cfg);

/* Listens on every agent.http.listen entry of cfg. Returns 0, or SL_EIO
 * (SL_ENOMEM) with a message naming the address in err; what was opened
 * stays open until http_server_close. */
int http_config_listen(http_server *s, const config *cfg, char *err, size_t errlen);

#endif
