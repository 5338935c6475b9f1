#define _POSIX_C_SOURCE 200809L
#include "rconn.h"

#include "redis_uv.h"
#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"

/* Reconnect attempts start 100 ms apart, doubling, at most 1 s apart
 * (jittered to [d/2, d)), counted from each attempt's start: an attempt
 * that hangs (a black hole: its handshake goes unanswered until its
 * timeout) does not add a backoff to its wait, so a healed path is tried
 * within 1 s (issue 23). */
#define RECONNECT_BASE_MS 100
#define RECONNECT_CAP_MS 1000

typedef enum rc_state { RC_DOWN, RC_CONNECTING, RC_HANDSHAKE, RC_READY } rc_state;

struct rconn {
    uv_loop_t *loop;
    rconn_events ev;
    void *ud;
    /* Configuration, copied. */
    char *host, *unix_path, *username, *password;
    int port, db;
    long long timeout_ms, connect_timeout_ms;

    redisAsyncContext *ac;
    rc_state state;
    uv_timer_t retry_timer;   /* reconnect backoff */
    uv_timer_t connect_timer; /* connect + handshake timeout */
    int attempts;
    uint64_t attempt_at; /* uv_now at the last attempt's start */
    int started, closing, handles_open;
    int plain;            /* RCONN_PLAIN: no AUTH/SELECT/SCRIPT LOAD */
    unsigned long ncalls; /* calls not yet freed */
    void (*done)(void *);
    void *done_arg;
    unsigned long long rng;
    char last_error[256];
    rconn_stats stats;
};

typedef struct rcall {
    rconn *c;
    rconn_reply_cb cb;
    void *arg;
    uv_timer_t timer;
    int refs;    /* the pending hiredis callback + the timer handle */
    int done;    /* cb has run */
    int retried; /* NOSCRIPT already handled once */
    int asking;  /* send ASKING first (Redis Cluster slot migration) */
    int id;      /* script_id, or -1 for a plain command */
    char *cmd;   /* the formatted EVALSHA, kept to resend after NOSCRIPT */
    long long cmdlen;
} rcall;

static void rconn_connect(rconn *c);
static void rconn_drop(rconn *c, const char *why);

static char *dup_str(const char *s) {
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d) memcpy(d, s ? s : "", n + 1);
    return d;
}

static void set_error(rconn *c, const char *prefix, const char *detail) {
    snprintf(c->last_error, sizeof(c->last_error), "%s%s%s", prefix, detail && *detail ? ": " : "",
             detail ? detail : "");
}

static unsigned long long next_rand(rconn *c) {
    unsigned long long z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- lifetime ------------------------------------------------------------ */

static void maybe_free(rconn *c) {
    if (!c->closing || c->handles_open > 0 || c->ncalls > 0) return;
    void (*done)(void *) = c->done;
    void *arg = c->done_arg;
    if (c->password) {
        memset(c->password, 0, strlen(c->password));
        free(c->password);
    }
    free(c->host);
    free(c->unix_path);
    free(c->username);
    free(c);
    if (done) done(arg);
}

static void on_handle_closed(uv_handle_t *h) {
    rconn *c = h->data;
    c->handles_open--;
    maybe_free(c);
}

static void call_release(rcall *k) {
    if (--k->refs > 0) return;
    rconn *c = k->c;
    free(k->cmd);
    free(k);
    c->ncalls--;
    maybe_free(c);
}

static void on_call_timer_closed(uv_handle_t *h) { call_release(h->data); }

static void call_finish(rcall *k, redisReply *r, const char *err) {
    if (k->done) return;
    k->done = 1;
    uv_timer_stop(&k->timer);
    uv_close((uv_handle_t *)&k->timer, on_call_timer_closed);
    if (!r) k->c->stats.errors++;
    k->cb(k->arg, r, err);
}

/* ---- calls --------------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
    rcall *k = privdata;
    rconn *c = k->c;
    redisReply *r = reply;
    if (!k->done && k->id >= 0 && r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 &&
        !k->retried && c->ac == ac && c->state == RC_READY) {
        /* Redis lost the script (restart, flush): load it and send the call
         * again on the same pipeline; the caller never sees NOSCRIPT. */
        const script *s = scripts_get((script_id)k->id);
        k->retried = 1;
        c->stats.noscript_reloads++;
        if (redisAsyncCommand(ac, NULL, NULL, "SCRIPT LOAD %b", s->source, s->len) == REDIS_OK &&
            (!k->asking || redisAsyncCommand(ac, NULL, NULL, "ASKING") == REDIS_OK) &&
            redisAsyncFormattedCommand(ac, on_reply, k, k->cmd, (size_t)k->cmdlen) == REDIS_OK)
            return; /* the hiredis reference moves to the resent call */
    }
    if (r && r->type == REDIS_REPLY_ERROR) c->stats.errors++;
    call_finish(k, r, r ? NULL : (c->last_error[0] ? c->last_error : "connection lost"));
    call_release(k);
}

static void on_call_timeout(uv_timer_t *t) {
    rcall *k = t->data;
    rconn *c = k->c;
    char msg[96];
    snprintf(msg, sizeof(msg), "Redis did not answer within %lld ms", c->timeout_ms);
    c->stats.timeouts++;
    call_finish(k, NULL, msg);
    /* A server that does not answer in time is treated as gone. */
    if (c->state == RC_READY) rconn_drop(c, msg);
}

/* Sends a formatted command (taking ownership of cmd) with a timeout. */
static int rconn_send(rconn *c, char *cmd, long long cmdlen, int id, int asking, rconn_reply_cb cb, void *arg) {
    rcall *k = calloc(1, sizeof(*k));
    if (!k) {
        free(cmd);
        return SL_ENOMEM;
    }
    k->c = c;
    k->cb = cb;
    k->arg = arg;
    k->id = id;
    k->asking = asking;
    k->cmd = cmd;
    k->cmdlen = cmdlen;
    k->refs = 2;
    if ((asking && redisAsyncCommand(c->ac, NULL, NULL, "ASKING") != REDIS_OK) ||
        redisAsyncFormattedCommand(c->ac, on_reply, k, k->cmd, (size_t)k->cmdlen) != REDIS_OK) {
        free(k->cmd);
        free(k);
        return SL_EREDIS;
    }
    c->ncalls++;
    c->stats.calls++;
    uv_timer_init(c->loop, &k->timer);
    k->timer.data = k;
    uv_timer_start(&k->timer, on_call_timeout, (uint64_t)c->timeout_ms, 0);
    return 0;
}

/* EVALSHA over nkeys keys, formatted once (kept for a NOSCRIPT resend). */
static int script_send(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                       const size_t *argvlen, int flags, rconn_reply_cb cb, void *arg) {
    if (!c || c->state != RC_READY || !c->ac || c->closing) return SL_EUNAVAIL;
    if (argc < 0 || nkeys < 1) return SL_EINVAL;
    int n = 3 + nkeys + argc;
    char nk[12];
    const char **av = malloc(sizeof(*av) * (size_t)n);
    size_t *al = malloc(sizeof(*al) * (size_t)n);
    if (!av || !al || scripts_evalsha_argv_n(id, keys, nkeys, argc, argv, argvlen, av, al, nk) < 0) {
        int rc = (!av || !al) ? SL_ENOMEM : SL_EINVAL;
        free(av);
        free(al);
        return rc;
    }
    char *cmd = NULL;
    long long len = redisFormatCommandArgv(&cmd, n, av, al);
    free(av);
    free(al);
    if (len < 0 || !cmd) return SL_ENOMEM;
    return rconn_send(c, cmd, len, (int)id, (flags & RCONN_ASKING) != 0, cb, arg);
}

int rconn_script_ex(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                    const size_t *argvlen, int flags, rconn_reply_cb cb, void *arg) {
    return script_send(c, id, keys, SCRIPTS_NKEYS, argc, argv, argvlen, flags, cb, arg);
}

int rconn_script_n(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                   const size_t *argvlen, rconn_reply_cb cb, void *arg) {
    return script_send(c, id, keys, nkeys, argc, argv, argvlen, 0, cb, arg);
}

int rconn_script(rconn *c, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                 const size_t *argvlen, rconn_reply_cb cb, void *arg) {
    return rconn_script_ex(c, id, keys, argc, argv, argvlen, 0, cb, arg);
}

int rconn_command(rconn *c, int argc, const char **argv, rconn_reply_cb cb, void *arg) {
    if (!c || c->state != RC_READY || !c->ac || c->closing) return SL_EUNAVAIL;
    char *cmd = NULL;
    long long len = redisFormatCommandArgv(&cmd, argc, argv, NULL);
    if (len < 0 || !cmd) return SL_ENOMEM;
    return rconn_send(c, cmd, len, -1, 0, cb, arg);
}

/* ---- connection ---------------------------------------------------------- */

static void on_retry_timer(uv_timer_t *t) { rconn_connect(t->data); }

static void schedule_reconnect(rconn *c) {
    if (c->closing) return;
    unsigned long long d = RECONNECT_BASE_MS;
    for (int i = 0; i < c->attempts && d < RECONNECT_CAP_MS; i++) d *= 2;
    if (d > RECONNECT_CAP_MS) d = RECONNECT_CAP_MS;
    /* Jitter in [d/2, d): agents that lost Redis together do not all
     * knock at once when it returns. */
    d = d / 2 + next_rand(c) % (d / 2 + 1);
    c->attempts++;
    uint64_t spent = uv_now(c->loop) - c->attempt_at;
    uv_timer_start(&c->retry_timer, on_retry_timer, spent < d ? d - spent : 0, 0);
}

/* Forgets the current context (hiredis frees it) and plans a reconnect. */
static void rconn_drop(rconn *c, const char *why) {
    redisAsyncContext *ac = c->ac;
    rc_state was = c->state;
    uv_timer_stop(&c->connect_timer);
    c->ac = NULL;
    c->state = RC_DOWN;
    if (why) set_error(c, why, NULL);
    if (ac) {
        ac->data = NULL; /* our disconnect callback ignores it now */
        redisAsyncFree(ac);
    }
    if (was != RC_DOWN && !c->closing) {
        c->stats.disconnects++;
        if (c->ev.down) c->ev.down(c->ud, c->last_error);
    }
    schedule_reconnect(c);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    rconn *c = ac->data;
    if (!c || c->ac != ac) return; /* already dropped by us */
    c->ac = NULL;
    if (status != REDIS_OK || ac->err) set_error(c, "connection lost", ac->errstr);
    else set_error(c, "connection closed", NULL);
    rc_state was = c->state;
    c->state = RC_DOWN;
    uv_timer_stop(&c->connect_timer);
    if (!c->closing) {
        c->stats.disconnects++;
        if (was != RC_DOWN && c->ev.down) c->ev.down(c->ud, c->last_error);
        schedule_reconnect(c);
    }
}

static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata) {
    rconn *c = ac->data;
    redisReply *r = reply;
    const char *step = privdata;
    if (!c || c->ac != ac || c->state != RC_HANDSHAKE) return;
    if (!r) return; /* disconnect: on_disconnect handles it */
    if (r->type == REDIS_REPLY_ERROR) {
        char msg[200];
        snprintf(msg, sizeof(msg), "%s failed: %s", step, r->str);
        /* Do not free the context from inside its callback chain: defer. */
        set_error(c, msg, NULL);
        c->state = RC_DOWN;
        c->ac = NULL;
        ac->data = NULL;
        redisAsyncFree(ac); /* deferred by hiredis until the callback returns */
        c->stats.disconnects++;
        uv_timer_stop(&c->connect_timer);
        if (c->ev.down) c->ev.down(c->ud, c->last_error);
        schedule_reconnect(c);
        return;
    }
    if (strcmp(step, "PING") == 0) {
        uv_timer_stop(&c->connect_timer);
        c->state = RC_READY;
        c->attempts = 0;
        c->last_error[0] = '\0';
        c->stats.connects++;
        if (c->ev.up) c->ev.up(c->ud);
    }
}

static void on_connect_timeout(uv_timer_t *t);

static void on_connect(const redisAsyncContext *cac, int status) {
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    rconn *c = ac->data;
    if (!c || c->ac != ac) return;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        set_error(c, "connect failed", ac->errstr);
        c->ac = NULL;
        c->state = RC_DOWN;
        uv_timer_stop(&c->connect_timer);
        if (c->ev.down) c->ev.down(c->ud, c->last_error);
        schedule_reconnect(c);
        return;
    }
    c->state = RC_HANDSHAKE;
    /* The handshake is calls like any other: bounded by the call timeout
     * (a server that does not answer in time is treated as gone), not by
     * what is left of the connect timeout. */
    uv_timer_start(&c->connect_timer, on_connect_timeout, (uint64_t)c->timeout_ms, 0);
    if (c->plain) {
        redisAsyncCommand(ac, on_handshake, "PING", "PING");
        return;
    }
    if (c->password[0]) {
        if (c->username[0]) redisAsyncCommand(ac, on_handshake, "AUTH", "AUTH %s %s", c->username, c->password);
        else redisAsyncCommand(ac, on_handshake, "AUTH", "AUTH %s", c->password);
    }
    if (c->db != 0) redisAsyncCommand(ac, on_handshake, "SELECT", "SELECT %d", c->db);
    /* Load every script now, so the first use of each is not a NOSCRIPT
     * round trip that would reorder it behind later calls, and so missing
     * script permissions (ACL) show up as a connect error. */
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        const script *s = scripts_get((script_id)i);
        redisAsyncCommand(ac, on_handshake, "SCRIPT LOAD", "SCRIPT LOAD %b", s->source, s->len);
    }
    redisAsyncCommand(ac, on_handshake, "PING", "PING");
}

static void on_connect_timeout(uv_timer_t *t) {
    rconn *c = t->data;
    if (c->state == RC_CONNECTING || c->state == RC_HANDSHAKE) {
        char msg[96];
        if (c->state == RC_HANDSHAKE)
            snprintf(msg, sizeof(msg), "handshake not answered within %lld ms", c->timeout_ms);
        else snprintf(msg, sizeof(msg), "connect timed out after %lld ms", c->connect_timeout_ms);
        rconn_drop(c, msg);
    }
}

static void rconn_connect(rconn *c) {
    if (c->closing || c->state != RC_DOWN) return;
    c->attempt_at = uv_now(c->loop);
    redisAsyncContext *ac = c->unix_path[0] ? redisAsyncConnectUnix(c->unix_path) : redisAsyncConnect(c->host, c->port);
    if (!ac) {
        set_error(c, "connect failed", "out of memory");
        schedule_reconnect(c);
        return;
    }
    if (ac->err) {
        set_error(c, "connect failed", ac->errstr);
        redisAsyncFree(ac);
        if (c->ev.down) c->ev.down(c->ud, c->last_error);
        schedule_reconnect(c);
        return;
    }
    ac->data = c;
    if (redis_uv_attach(ac, c->loop) != REDIS_OK) {
        set_error(c, "connect failed", "cannot attach to the event loop");
        redisAsyncFree(ac);
        schedule_reconnect(c);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->state = RC_CONNECTING;
    uv_timer_start(&c->connect_timer, on_connect_timeout, (uint64_t)c->connect_timeout_ms, 0);
}

int rconn_new(uv_loop_t *loop, const config_redis *cfg, rconn_events ev, void *ud, rconn **out) {
    return rconn_new_ex(loop, cfg, 0, ev, ud, out);
}

int rconn_new_ex(uv_loop_t *loop, const config_redis *cfg, int flags, rconn_events ev, void *ud, rconn **out) {
    *out = NULL;
    rconn *c = calloc(1, sizeof(*c));
    if (!c) return SL_ENOMEM;
    c->loop = loop;
    c->ev = ev;
    c->ud = ud;
    c->host = dup_str(cfg->host);
    c->unix_path = dup_str(cfg->unix_path);
    c->username = dup_str(cfg->username);
    c->password = dup_str(cfg->password);
    c->port = cfg->port;
    c->db = cfg->db;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 250;
    c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 1000;
    if (!c->host || !c->unix_path || !c->username || !c->password) {
        free(c->host);
        free(c->unix_path);
        free(c->username);
        free(c->password);
        free(c);
        return SL_ENOMEM;
    }
    /* The reconnect jitter's seed: the time (two connections of one
     * process are made nanoseconds apart) and the process (agents started
     * together). No address: the simulated fleet (tests/sim) replays a
     * seed exactly, on its virtual clock and process id. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->rng =
        (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30) ^ ((unsigned long long)getpid() << 40);
    uv_timer_init(loop, &c->retry_timer);
    uv_timer_init(loop, &c->connect_timer);
    c->retry_timer.data = c;
    c->connect_timer.data = c;
    c->handles_open = 2;
    c->state = RC_DOWN;
    c->plain = (flags & RCONN_PLAIN) != 0;
    *out = c;
    return 0;
}

void rconn_start(rconn *c) {
    if (c->started) return;
    c->started = 1;
    rconn_connect(c);
}

int rconn_ready(const rconn *c) { return c && c->state == RC_READY; }

const char *rconn_last_error(const rconn *c) { return c->last_error; }

void rconn_get_stats(const rconn *c, rconn_stats *out) { *out = c->stats; }

void rconn_close(rconn *c, void (*done)(void *arg), void *arg) {
    if (!c) {
        if (done) done(arg);
        return;
    }
    if (c->closing) return;
    c->closing = 1;
    c->done = done;
    c->done_arg = arg;
    redisAsyncContext *ac = c->ac;
    c->ac = NULL;
    c->state = RC_DOWN;
    set_error(c, "closing", NULL);
    if (ac) {
        ac->data = NULL;
        redisAsyncFree(ac); /* pending calls get their callbacks, NULL reply */
    }
    uv_close((uv_handle_t *)&c->retry_timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->connect_timer, on_handle_closed);
}
