/* scripts: the embedded Redis scripts (lua/NAME.lua) and their SHA1 digests.
 *
 * The build embeds every lua/<name>.lua, prefixed with lua/common.lua, into
 * the binary (see lua/embed.cmake), so nothing depends on an install path.
 * This module finds a script by name and computes the SHA1 that Redis uses
 * for EVALSHA, so a caller can try EVALSHA first and fall back to SCRIPT
 * LOAD on NOSCRIPT. No I/O; thread-safe after scripts_init(). */
#ifndef SLUICE_SCRIPTS_H
#define SLUICE_SCRIPTS_H

#include <stddef.h>

typedef enum script_id {
    SCRIPT_CONFIGURE = 0,
    SCRIPT_RESERVE,
    SCRIPT_SETTLE,
    SCRIPT_RETRY,
    SCRIPT_HEARTBEAT,
    SCRIPT_STATUS,
    SCRIPT__COUNT
} script_id;

typedef struct script {
    const char *name;   /* "reserve", ... */
    const char *source; /* full text sent with SCRIPT LOAD */
    size_t len;
    char sha[41];       /* lowercase hex SHA1 of source */
} script;

/* Returns the script, its SHA computed on first use. Never NULL for a
 * valid id. */
const script *scripts_get(script_id id);

/* Finds a script by name; NULL when unknown. */
const script *scripts_find(const char *name);

/* SHA1 of buf as 40 lowercase hex digits plus NUL in out. */
void scripts_sha1_hex(const void *buf, size_t len, char out[41]);

#endif
