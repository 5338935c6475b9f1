/* script_call: runs an embedded sluice script over a blocking hiredis
 * connection (EVALSHA, falling back to SCRIPT LOAD on NOSCRIPT), with the
 * deployment's KEYS. For tests and benchmarks; the agent has its own async
 * path. */
#ifndef SLUICE_SCRIPT_CALL_H
#define SLUICE_SCRIPT_CALL_H

#include <hiredis/hiredis.h>
#include "scripts.h"

/* Returns the reply (caller frees) or NULL on a connection error. */
redisReply *script_call(redisContext *c, script_id id, const char *deployment, int argc, const char **argv);

/* Same with explicit KEYS (nkeys of them: several deployments' keys for a
 * group call, which only a single Redis allows). */
redisReply *script_call_keys(redisContext *c, script_id id, int nkeys, char (*keys)[SCRIPTS_KEY_MAX], int argc,
                             const char **argv);

/* Same with a NULL-terminated list of string arguments. */
redisReply *script_callv(redisContext *c, script_id id, const char *deployment, ...);

#endif
