/* rconn: one asynchronous Redis connection for the engine, on libuv.
 *
 * Wraps hiredis' async API (0.14, libuv adapter) with what it lacks:
 *   - a timeout per call (a uv_timer_t each; hiredis 0.14 has none). A call
 *     that times out gets its callback with an error at once, and the
 *     connection is dropped and re-established (a server that does not
 *     answer within the timeout is treated as gone);
 *   - a connect timeout, AUTH (ACL user + password) and SELECT on connect;
 *   - reconnect with capped, jittered exponential backoff;
 *   - running the embedded scripts by EVALSHA, loading them transparently
 *     on NOSCRIPT (Redis restarted or flushed) without the caller noticing.
 * Every call's callback runs exactly once, never synchronously from
 * rconn_script() (which returns an error instead when it cannot send).
 * Single-threaded: use from the loop's thread only. */
#ifndef SLUICE_RCONN_H
#define SLUICE_RCONN_H

#include <hiredis/hiredis.h>
#include <uv.h>

#include "config.h"
#include "scripts.h"

typedef struct rconn rconn;

/* reply is NULL when err is set (timeout, disconnect, not connected);
 * a Redis error reply is passed as a reply of type REDIS_REPLY_ERROR. The
 * reply is freed by rconn after the callback returns. */
typedef void (*rconn_reply_cb)(void *arg, redisReply *reply, const char *err);

typedef struct rconn_events {
    void (*up)(void *ud);                    /* connected, authenticated, ready */
    void (*down)(void *ud, const char *why); /* lost, or a connect attempt failed */
} rconn_events;

/* Creates a connection manager for cfg (copied; the password is kept in
 * memory only). Nothing happens until rconn_start(). Returns 0 or SL_E*. */
int rconn_new(uv_loop_t *loop, const config_redis *cfg, rconn_events ev, void *ud, rconn **out);

/* rconn_new with flags: RCONN_PLAIN connects without AUTH, SELECT or
 * script loading (for Sentinel connections). */
#define RCONN_PLAIN 1
int rconn_new_ex(uv_loop_t *loop, const config_redis *cfg, int flags, rconn_events ev, void *ud, rconn **out);

/* Starts connecting (and reconnecting whenever the connection is lost). */
void rconn_start(rconn *c);

/* Runs script id with the deployment's KEYS and argv. Returns 0 and calls
 * cb later, or a negative SL_E* (not connected: SL_EUNAVAIL) without
 * calling cb. argvlen may be NULL for NUL-terminated arguments. */
int rconn_script(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                 const size_t *argvlen, rconn_reply_cb cb, void *arg);

/* rconn_script with flags: RCONN_ASKING sends ASKING first on the same
 * pipeline (following a Redis Cluster ASK redirection). */
#define RCONN_ASKING 1
/* rconn_script with nkeys keys (a group's members' KEYS one after the
 * other); the rest as rconn_script_ex. */
int rconn_script_n(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                   const size_t *argvlen, rconn_reply_cb cb, void *arg);

int rconn_script_ex(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                    const size_t *argvlen, int flags, rconn_reply_cb cb, void *arg);

/* A plain command (NUL-terminated arguments), e.g. CLUSTER SLOTS, with the
 * same timeout and callback rules. */
int rconn_command(rconn *c, int argc, const char **argv, rconn_reply_cb cb, void *arg);

/* 1 when connected and ready. */
int rconn_ready(const rconn *c);

/* The last connection error ("" when none), for STATUS and logs. Never
 * contains the password. */
const char *rconn_last_error(const rconn *c);

/* Counters for INFO and metrics. */
typedef struct rconn_stats {
    unsigned long long calls, errors, timeouts, noscript_reloads, connects, disconnects;
} rconn_stats;
void rconn_get_stats(const rconn *c, rconn_stats *out);

/* Closes the connection (pending calls get their callbacks with an error)
 * and frees c once every handle is closed; done (optional) is called then. */
void rconn_close(rconn *c, void (*done)(void *arg), void *arg);

#endif
