/* info: the INFO command's text, Redis-style sections of "field:value"
 * lines (`# Server`, `# Clients`, `# Deployments`, `# Redis`, `# Stats`,
 * `# Lanes`, `# Tenants`, `# Groups`, `# Http`), built from the server's
 * and the engine's counters (per lane, tenant and group: classes.h) and
 * the HTTP proxy's (proxy.h). Read-only: nothing
 * here changes state, so INFO can be called as often as wanted.
 *
 * Depends on server, engine and classes. Loop thread only. */
#ifndef SLUICE_INFO_H
#define SLUICE_INFO_H

#include "resp.h"
#include "server.h"

/* Appends the text of section (case-insensitive: server, clients,
 * deployments, redis, stats, lanes, tenants, groups, http; "", "all", "default" or
 * "everything" for all of them; an unknown section gives no text, as in
 * Redis) to out, lines ending in CRLF. Returns 0 or RESP_ENOMEM. */
int info_render(server *s, const char *section, resp_buf *out);

/* Names of the sections, in order, NULL-terminated. */
extern const char *const info_sections[];

#endif
