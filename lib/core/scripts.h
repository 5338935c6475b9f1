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
    SCRIPT_BUDGET, /* lua/budget.lua: its own KEYS (the {$budgets} slot) */
    SCRIPT__COUNT
} script_id;

typedef struct script {
    const char *name;   /* "reserve", ... */
    const char *source; /* full text sent with SCRIPT LOAD */
    size_t len;
    char sha[41]; /* lowercase hex SHA1 of source */
} script;

/* Every script takes the same KEYS for one deployment (lua/common.lua
 * documents them); all share the hash tag {deployment}. */
#define SCRIPTS_NKEYS 11
#define SCRIPTS_NKEYS_STR "11" /* the same, for EVALSHA */
#define SCRIPTS_NAME_MAX 64
#define SCRIPTS_KEY_MAX (SCRIPTS_NAME_MAX + 32)

/* Fills keys with the KEYS of deployment, in order. Returns 0, or -1 when
 * the name is empty, longer than SCRIPTS_NAME_MAX, or holds a brace or a
 * control character (it becomes a Redis hash tag). */
int scripts_keys(const char *deployment, char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX]);

/* Fills av/al (room for SCRIPTS_EVALSHA_ARGC(argc) entries) with
 * EVALSHA <sha> SCRIPTS_NKEYS <keys...> <argv...>. argvlen NULL: argv are C strings.
 * Returns the number of entries, or -1 for an unknown id. */
#define SCRIPTS_EVALSHA_ARGC(argc) (3 + SCRIPTS_NKEYS + (argc))
int scripts_evalsha_argv(script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                         const size_t *argvlen, const char **av, size_t *al);

/* Like scripts_evalsha_argv with nkeys keys (a group's members' KEYS one
 * after the other): room for 3 + nkeys + argc entries; nkeys_buf (at
 * least 12 bytes; may be NULL when nkeys is SCRIPTS_NKEYS) holds the key
 * count's text while av is used. */
int scripts_evalsha_argv_n(script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                           const size_t *argvlen, const char **av, size_t *al, char *nkeys_buf);

/* Returns the script, its SHA computed on first use. Never NULL for a
 * valid id. */
const script *scripts_get(script_id id);

/* Finds a script by name; NULL when unknown. */
const script *scripts_find(const char *name);

/* SHA1 of buf as 40 lowercase hex digits plus NUL in out. */
void scripts_sha1_hex(const void *buf, size_t len, char out[41]);

#endif
