/* server: sluiced's UNIX socket listener and the life of its clients.
 *
 * A server accepts clients on agent.socket, feeds what they send to a RESP2
 * parser (resp.h) and hands each complete command to the command table
 * (commands.h). It owns everything about a connection: the limits
 * (agent.max_clients, max_client_buffer, max_client_pipeline,
 * client_idle_timeout_ms), the order of replies, back-pressure, closing,
 * and what the connection said about itself (HELLO's protocol, RESP2 until
 * HELLO 3; CLIENT SETNAME and SETINFO names), which every reply slot of
 * the client is written in and CLIENT LIST shows.
 *
 * Reply order. Every command gets a server_reply slot, appended to its
 * client's queue when the command is dispatched. A synchronous command
 * fills its slot at once; an asynchronous one (ACQUIRE waiting for its
 * slot, RETRY and STATUS waiting for Redis) fills it later. Bytes leave
 * only from the head of the queue, so a client that pipelines several
 * commands gets the replies in request order, while the engine still sees
 * all its ACQUIREs at once (and coalesces them). A client with
 * max_client_pipeline unfinished commands, or more than max_client_buffer
 * bytes of replies it does not read, is not read from until that drains.
 *
 * Disconnects. When a client goes away (EOF, error, protocol error, idle
 * timeout, QUIT, shutdown) each unfinished slot is either cancelled through
 * the hook its command set (ACQUIRE: engine_cancel, which gives the
 * reservation back) or orphaned: the command completes later into a slot
 * nobody reads, and the server frees it then.
 *
 * Depends on libuv, the engine and resp. Never prints: messages go to the
 * log hook given at creation. Single-threaded: use from the loop's thread.
 * Errors are negative SL_E* codes (sluice.h) unless stated. */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "engine.h"
#include "resp.h"

typedef struct server server;
typedef struct client client;
typedef struct server_reply server_reply;

/* A log line at a CONFIG_LOG_* level; msg is valid during the call. */
typedef void (*server_log_fn)(void *ud, int level, const char *msg);

typedef struct server_options {
    const char *config_path; /* shown in INFO; copied */
    server_log_fn log;       /* optional */
    void *log_ud;
} server_options;

/* Counters for INFO and metrics. The hot path only increments these; the
 * rates are computed by the server's periodic timer. */
typedef struct server_stats {
    unsigned long long connections_received, rejected_max_clients;
    unsigned long long closed_protocol_error; /* every protocol error, limits included */
    unsigned long long closed_buffer_limit;   /* ... of which a limit (size, count) was exceeded */
    unsigned long long closed_idle_timeout;
    unsigned long long commands, unknown_commands, arity_errors;
    unsigned long long settle_headers, settle_headers_recognised;
    unsigned long long reloads_ok, reloads_failed;
    unsigned long long connected, paused_clients; /* gauges */
    unsigned long long pending_replies;           /* gauge: commands not answered yet (the caller's own included) */
    double grants_per_sec, commands_per_sec, sheds_per_sec; /* over the last second */
    long long started_ms;                                   /* wall clock, ms */
    long long last_reload_ms;                               /* wall clock, 0 = never */
    const char *last_reload_error;                          /* "" after a good reload or none */
    const char *config_path;
    unsigned long long memory_trims; /* malloc_trim calls (memory.h) */
    long long memory_trimmed_bytes;  /* resident bytes they gave back */
} server_stats;

/* Creates a server for engine e (borrowed; it must outlive the server).
 * Limits are read from engine_config(e). Nothing listens until
 * server_listen(). Returns 0 or SL_ENOMEM. */
int server_new(uv_loop_t *loop, engine *e, const server_options *opt, server **out);

/* Listens on agent.socket with agent.socket_mode. A socket file that
 * exists is removed only when nothing answers on it; a live listener there
 * (another sluiced) or a file that is not a socket is an error. Returns 0,
 * or SL_EIO with a message in err. */
int server_listen(server *s, char *err, size_t errlen);

/* Takes the limits of the engine's current configuration (after
 * engine_reload). New clients get them at once; connected clients keep
 * their parser limits. The socket path and mode are not changed. */
void server_apply_config(server *s);

/* Records the outcome of a configuration reload for INFO and metrics;
 * error is NULL or "" on success. */
void server_note_reload(server *s, const char *error);

/* Stops accepting: closes the listener and removes the socket file (when
 * it is still the one this server created). Idempotent. */
void server_stop_accepting(server *s);

/* Closes every client: unfinished commands are answered with why (an
 * error reply such as "-CLOSING ..."), replies are flushed (for at most
 * about a second), then the connections are closed. When all clients and
 * the server's own handles are closed, done (optional) runs; then call
 * server_free(). Implies server_stop_accepting(). */
void server_close(server *s, const char *why, void (*done)(void *arg), void *arg);

/* Frees a closed server. NULL is a no-op. */
void server_free(server *s);

/* The HTTP proxy beside the socket (NULL when agent.http.listen is off),
 * for INFO and metrics; borrowed, it must outlive its use here. */
struct proxy;
void server_set_proxy(server *s, struct proxy *p);
struct proxy *server_proxy(const server *s);

/* Borrowed accessors, for commands, INFO and metrics. */
engine *server_engine(server *s);
uv_loop_t *server_loop(server *s);
void server_get_stats(const server *s, server_stats *out);
/* The stats the commands bump. */
server_stats *server_counters(server *s);
/* Logs at a CONFIG_LOG_* level through the hook. */
void server_log(server *s, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- reply slots (for commands.c) ---------------------------------------- */

/* Appends a new, unfinished slot to c's reply queue. Returns NULL when out
 * of memory. */
server_reply *server_reply_new(client *c);

/* The bytes of the reply: append with resp_add_*(). */
resp_buf *server_reply_buf(server_reply *r);

/* Sets the hook run when the client goes away before the slot is done:
 * cancel(arg) must make sure the command will never touch r again (the
 * server frees r right after). Without a hook an abandoned slot is kept
 * until server_reply_done(). */
void server_reply_on_abandon(server_reply *r, void (*cancel)(void *arg), void *arg);

/* Marks the slot finished: its bytes go out once every earlier slot of the
 * client is finished too. On a slot whose client is gone this frees it.
 * close_after: close the client after this reply (QUIT). r is invalid
 * after the call. */
void server_reply_done(server_reply *r, int close_after);

/* The client of a slot, NULL once the client is gone. */
client *server_reply_client(const server_reply *r);

/* The server of a client. */
server *client_server(const client *c);

/* A number identifying the client in logs, CLIENT ID and HELLO: 1, 2, ...
 * in connection order, never reused while the server runs. */
unsigned long long client_id(const client *c);

/* ---- what a connection says about itself (HELLO, CLIENT) ------------------ */

/* The protocol its replies are written in: RESP_PROTO_2 (the default) or
 * RESP_PROTO_3. A reply slot takes the client's protocol when it is made
 * (server_reply_new), so a switch applies from the next command on;
 * client_set_proto() also sets it on the slot of the command that asks,
 * given as r (may be NULL). */
int client_proto(const client *c);
void client_set_proto(client *c, server_reply *r, int proto);

/* Names a client gives itself, shown by CLIENT LIST. The caller validates
 * the value (commands.c, Redis' rules); it is stored as is. */
typedef enum client_attr {
    CLIENT_ATTR_NAME,     /* CLIENT SETNAME, HELLO ... SETNAME */
    CLIENT_ATTR_LIB_NAME, /* CLIENT SETINFO LIB-NAME */
    CLIENT_ATTR_LIB_VER,  /* CLIENT SETINFO LIB-VER */
    CLIENT_NATTRS
} client_attr;
#define CLIENT_ATTR_MAX 128 /* bytes of one value */

/* The value, "" when none was set. Borrowed, valid until it is set again. */
const char *client_attr_get(const client *c, client_attr a);

/* Sets the value (len 0 clears it). Returns 0, or SL_EINVAL when longer
 * than CLIENT_ATTR_MAX. */
int client_attr_set(client *c, client_attr a, const char *value, size_t len);

/* Records the command c runs (a static string: the command table's name)
 * for CLIENT LIST's cmd=. */
void client_note_command(client *c, const char *name);

/* Appends CLIENT LIST's line for c, without the line end: Redis 7.2's
 * fields, `id=.. addr=.. laddr=.. fd=.. name=.. age=.. idle=.. ... cmd=..
 * ... resp=.. lib-name=.. lib-ver=..` (ages in seconds). Nothing else
 * about the client is shown: not its arguments, grants, deployments or
 * peer credentials. Returns 0 or RESP_ENOMEM. */
int client_describe(const client *c, resp_buf *out);

/* Appends client_describe() of every open client, oldest first, each line
 * ending in LF (Redis' CLIENT LIST). Returns 0 or RESP_ENOMEM. */
int server_describe_clients(server *s, resp_buf *out);

#endif
