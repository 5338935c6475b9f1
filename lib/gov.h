/* gov: the inside of an sl_gov, shared by the front end (gov.c, the
 * public functions) and the two backends (backend_engine.c: the agent
 * engine in-process; backend_daemon.c: a client of sluiced).
 *
 * Every governor owns one thread running one libuv loop. Public calls,
 * made on any thread, become operations (gov_op) pushed on a
 * mutex-protected queue and announced with uv_async_send(); the loop
 * thread hands them to the backend, and backends report back through the
 * gov_* completion functions below, on the loop thread. A blocking caller
 * waits on its operation's condition variable (with its deadline); an
 * asynchronous caller gets its callback on the loop thread.
 *
 * Life of an operation: refs are counted under gov->mu; the submitter and
 * the loop each hold one while they use it. An acquire that is cancelled
 * (sl_cancel, or a blocking caller whose deadline passed) is marked
 * OPS_CANCELED under the mutex and put on the cancel list for the
 * loop, which tells the backend; a grant that was made meanwhile is given
 * back (settled as cancelled), never leaked. */
#ifndef SLUICE_LIB_GOV_H
#define SLUICE_LIB_GOV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "sluice.h"
#include "usage_rec.h"

#define GOV_NAME_MAX 64 /* deployment, lane, tenant names (config.h: CONFIG_NAME_MAX) */
#define GOV_ID_MAX 96   /* grant ids (engine.h: ENGINE_GRANT_ID_MAX) */
#define GOV_MSG_MAX 256

typedef enum gov_op_kind { OP_ACQUIRE, OP_SETTLE, OP_RETRY, OP_PING, OP_STOP, OP_ESTIMATE } gov_op_kind;
typedef enum gov_op_state { OPS_ACTIVE, OPS_DONE, OPS_CANCELED } gov_op_state;

typedef struct gov_op gov_op;
typedef struct backend backend;

struct gov_op {
    gov_op_kind kind;
    sl_gov *gov;
    int refs;              /* under gov->mu */
    gov_op_state state;    /* under gov->mu */
    gov_op *qnext;         /* gov->queue, under gov->mu */
    gov_op *lprev, *lnext; /* gov->live (cancellable async acquires), under gov->mu */

    /* The request (read-only once queued). */
    char dep[GOV_NAME_MAX + 1]; /* a deployment or a group */
    char lane[GOV_NAME_MAX + 1], tenant[GOV_NAME_MAX + 1], tag[GOV_NAME_MAX + 1];
    long long tokens, max_wait_ms;
    int split;   /* input and output given (docs/providers.md) */
    int exact;   /* the estimate is the provider's own count (EXACT) */
    int partial; /* the estimate guesses part of the prompt (PARTIAL) */
    long long input, output;
    uint64_t caller;       /* the thread that asked (gov_thread_caller) */
    long long eff_wait_ms; /* max wait at dispatch (deadline applied), < 0 default */
    int64_t deadline_ms;   /* sl_now_ms() clock, 0 none */
    int64_t timeout_ms;    /* RETRY/PING: answer within this, 0 none */
    /* OP_SETTLE */
    char grant_id[GOV_ID_MAX];
    usage_rec actual; /* what the provider reported (cache_write -1: sl_usage has none) */
    sl_outcome outcome;
    long long pause_ms; /* from the headers, -1 none */
    sl_header *hdrs;    /* the recognised headers, one allocation */
    size_t nhdrs;
    gov_op *cnext;      /* gov->cancels: cancel requests, under gov->mu */
    sl_grant *pregrant; /* allocated up front, so a grant is never lost to OOM */

    /* Completion. */
    int async;
    sl_acquire_cb acb;
    sl_retry_cb rcb;
    void *arg;
    sl_call_id id;
    pthread_cond_t cv; /* blocking callers */
    int has_cv;

    /* The result, written on the loop thread before state = OPS_DONE. */
    int status;
    char gid[GOV_ID_MAX];
    char member[GOV_NAME_MAX + 1]; /* the deployment granted (a group's member) */
    char *endpoint;                /* a group member's endpoint (malloc'd), NULL: "" */
    long long waited_ms, granted_tokens;
    int local;
    char reason[24];
    long long retry_after_ms;
    int allowed; /* RETRY: allowed; ESTIMATE: granted */
    char msg[GOV_MSG_MAX];

    /* Loop-thread state. */
    void *be;          /* the backend's per-call state */
    uv_timer_t *timer; /* deadline or reply timeout, NULL none */
    int loop_done;     /* answered, timed out or cancelled */
};

/* A backend runs on the loop thread only. */
typedef struct backend_vt {
    const char *mode; /* "embedded", "daemon" */
    /* Starts an acquire: returns 0 and reports later through gov_acquired /
     * gov_shed / gov_failed (never from within the call), or SL_E* with a
     * message in op->msg and reports nothing. */
    int (*acquire)(backend *b, gov_op *op);
    /* op will not be reported; a reservation already made goes back. */
    void (*cancel)(backend *b, gov_op *op);
    /* A grant nobody will use: settle it as cancelled. */
    void (*give_back)(backend *b, const char *grant_id);
    /* Fire and forget. */
    void (*settle)(backend *b, gov_op *op);
    /* Like acquire, reporting through gov_retried. */
    int (*retry)(backend *b, gov_op *op);
    /* Like acquire, reporting through gov_retried (allowed = 1). NULL: none. */
    int (*ping)(backend *b, gov_op *op);
    /* Like retry, reporting through gov_estimated (or gov_retried with an
     * error). */
    int (*estimate)(backend *b, gov_op *op);
    /* Answers everything in flight with SL_ECLOSING, delivers queued
     * settles (bounded in time), closes every handle, then calls done. */
    void (*stop)(backend *b, void (*done)(void *arg), void *arg);
    /* After done ran. */
    void (*free)(backend *b);
} backend_vt;

struct backend {
    const backend_vt *vt;
    sl_gov *gov;
    uv_loop_t *loop;
};

/* Options as the library uses them (defaults applied). */
typedef struct gov_config {
    long long connect_timeout_ms;
    long long call_timeout_ms;
    int max_idle_connections;
} gov_config;

/* A backend that keeps op beyond cancel() (a reply it cannot withdraw)
 * holds a reference meanwhile, and checks op->loop_done when the reply
 * comes. */
void gov_op_ref(gov_op *op);
void gov_op_unref(gov_op *op);

/* 1 on g's own loop thread (a callback), where nothing may wait for g. */
int gov_on_own_thread(const sl_gov *g);
/* The calling thread as the engine's caller (engine_req.caller): in
 * embedded mode a thread's calls wait in turn with other threads' (the
 * callers' turns, docs/architecture.md), as a connection's do in sluiced.
 * Threads are numbered from 1 in the order they first ask; never 0. */
uint64_t gov_thread_caller(void);

/* Completions, loop thread only. Each finishes op exactly once.
 * gov_acquired: member is the deployment the slot is on (NULL or "": the
 * one asked for), endpoint a group member's endpoint (NULL or "": none);
 * both are copied. */
void gov_acquired(gov_op *op, const char *grant_id, long long waited_ms, long long tokens, int local,
                  const char *member, const char *endpoint);
void gov_shed(gov_op *op, const char *reason, long long retry_after_ms, const char *msg);
void gov_failed(gov_op *op, int status, const char *msg);
void gov_retried(gov_op *op, int status, int allowed, long long retry_after_ms, const char *msg);
/* An ESTIMATE's answer: granted with wait_ms, or shed with reason and
 * retry_after_ms; tokens, the deployment (a group's member) and whether it
 * came from local pacing. */
void gov_estimated(gov_op *op, int granted, long long wait_ms, long long tokens, const char *deployment,
                   const char *reason, long long retry_after_ms, int local);

/* Backend constructors (caller thread, before the loop thread starts). */
struct config;
int backend_engine_new(sl_gov *gov, uv_loop_t *loop, struct config *cfg, const char *agent_id, backend **out, char *err,
                       size_t errlen);
int backend_daemon_new(sl_gov *gov, uv_loop_t *loop, const char *socket_path, const gov_config *gc, backend **out,
                       char *err, size_t errlen);

/* The effective max wait of a request at now: max_wait < 0 stays "the
 * deployment's" unless a deadline gives the time left; otherwise the
 * smaller of the two. Returns -2 when the deadline has passed. */
long long gov_effective_max_wait(long long max_wait_ms, int64_t deadline_ms, int64_t now_ms);

#endif
