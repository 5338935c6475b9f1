/* commands: the commands sluiced serves on its socket, as a table.
 *
 * Each row is {name, arity, handler, flags, syntax, help}. Names match
 * without regard to case. arity counts the command name, Redis-style: N
 * means exactly N arguments, -N at least N. A handler gets its reply slot
 * (server.h) and either fills and finishes it at once or keeps it until
 * the engine answers (ACQUIRE, RETRY, STATUS); the server sends replies in
 * request order either way. docs/protocol.md documents every reply.
 *
 * Depends on server, engine, info and lib/http (ratelimit.h) for the
 * provider headers forwarded with SETTLE. Loop thread only. */
#ifndef SLUICE_COMMANDS_H
#define SLUICE_COMMANDS_H

#include <stddef.h>

#include "resp.h"
#include "server.h"

/* Command flags, shown by COMMAND. */
#define CMD_FAST 1u       /* answers at once */
#define CMD_BLOCKING 2u   /* may wait (for a slot, or for Redis) */
#define CMD_CONNECTION 4u /* about the connection itself */

typedef struct command_req {
    server *s;
    client *c;
    server_reply *r; /* this command's reply slot */
    int argc;
    const char *const *argv; /* borrowed from the parser: copy what outlives the call */
    const size_t *argvlen;
} command_req;

typedef struct command {
    const char *name; /* upper case */
    int arity;
    void (*handler)(const command_req *req);
    unsigned flags;
    const char *syntax; /* "ACQUIRE <deployment> [TOKENS n] ..." */
    const char *help;   /* one sentence */
} command;

/* Runs one complete command from client c: finds it in the table, checks
 * its arity and calls its handler with a fresh reply slot. Errors (unknown
 * command, wrong arity) are replies; the client stays. Returns 0, or
 * SL_ENOMEM when no reply slot could be made (the caller closes the
 * client: its reply stream can no longer be kept in order). */
int commands_dispatch(server *s, client *c, const resp_command *cmd);

/* The command called name (len bytes, any case), or NULL. */
const command *commands_find(const char *name, size_t len);

/* The whole table, n rows. */
const command *commands_table(size_t *n);

/* "fast", "blocking", ... for flag bit f. */
const char *commands_flag_name(unsigned f);

#endif
