/* gov: sl_open/sl_close, the operation queue, the loop thread, and the
 * acquire/settle/retry front end. See gov.h for the design. */
#define _GNU_SOURCE
#include "gov.h"
#include "verdict.h"
#include "timeutil.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "options.h"
#include "ratelimit.h"
#include "vocab.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.0.0"
#endif

struct sl_grant {
    sl_gov *gov;
    char id[GOV_ID_MAX];
    char dep[GOV_NAME_MAX + 1]; /* the deployment the slot is on */
    char *endpoint;             /* a group member's endpoint, NULL: "" */
    long long waited_ms, tokens;
    int local;
};

struct sl_gov {
    atomic_int refs; /* 1 while open + public calls in progress + grants held */
    pthread_mutex_t mu;
    gov_op *qhead, *qtail; /* operations for the loop, FIFO */
    gov_op *cancels;       /* acquires to cancel */
    gov_op *live;          /* async acquires that can still be cancelled */
    gov_op *stop_op;       /* allocated at open, so close never fails */
    int closing;           /* refuse new operations */
    int wake_open;         /* uv_async_send() allowed */
    int self_close;        /* sl_close() ran on the loop thread */
    sl_call_id next_id;
    uv_loop_t loop;
    uv_async_t wake;
    pthread_t thread;
    int loop_stopping; /* loop thread only */
    backend *be;
    gov_config gc;
    const char *mode;
};

/* ---- per-thread errors ---------------------------------------------------- */

typedef struct tls_error {
    const sl_gov *gov;
    int code;
    char msg[GOV_MSG_MAX];
    char reason[24];
    long long retry_after_ms;
} tls_error;

static _Thread_local tls_error tls_err;

/* The calling thread, numbered from 1 in the order threads first ask a
 * governor of this process. */
static atomic_ullong thread_seq;
static _Thread_local uint64_t tls_caller;

uint64_t gov_thread_caller(void) {
    if (!tls_caller) tls_caller = (uint64_t)atomic_fetch_add(&thread_seq, 1) + 1;
    return tls_caller;
}

static int set_err(const sl_gov *gov, int code, const char *reason, long long retry_after_ms, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int set_err(const sl_gov *gov, int code, const char *reason, long long retry_after_ms, const char *fmt, ...) {
    tls_err.gov = gov;
    tls_err.code = code;
    snprintf(tls_err.reason, sizeof(tls_err.reason), "%s", reason ? reason : "");
    tls_err.retry_after_ms = retry_after_ms;
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(tls_err.msg, sizeof(tls_err.msg), fmt, ap);
        va_end(ap);
    } else {
        snprintf(tls_err.msg, sizeof(tls_err.msg), "%s", sl_strerror(code));
    }
    return code;
}

static void clear_err(const sl_gov *gov) {
    if (tls_err.gov == gov) tls_err.code = 0;
}

const char *sl_errmsg(const sl_gov *gov) { return (tls_err.gov == gov && tls_err.code != 0) ? tls_err.msg : ""; }

const char *sl_shed_reason(const sl_gov *gov) {
    return (tls_err.gov == gov && tls_err.code != 0) ? tls_err.reason : "";
}

long long sl_retry_after_ms(const sl_gov *gov) {
    return (tls_err.gov == gov && tls_err.code != 0) ? tls_err.retry_after_ms : -1;
}

/* ---- small things ----------------------------------------------------------- */

const char *sl_version(void) { return SLUICE_VERSION; }

int64_t sl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *sl_mode(const sl_gov *gov) { return gov ? gov->mode : ""; }

void sl_options_init_size(sl_options *opt, size_t size) {
    if (!opt || size < sizeof(size_t)) return;
    memset(opt, 0, size);
    opt->size = size;
}

void sl_request_init_size(sl_request *req, size_t size) {
    if (!req || size < sizeof(size_t)) return;
    memset(req, 0, size);
    req->size = size;
    if (size >= offsetof(sl_request, max_wait_ms) + sizeof(req->max_wait_ms)) req->max_wait_ms = -1;
    if (size >= offsetof(sl_request, output_tokens) + sizeof(req->output_tokens))
        req->input_tokens = req->output_tokens = -1;
}

long long gov_effective_max_wait(long long max_wait_ms, int64_t deadline_ms, int64_t now_ms) {
    if (deadline_ms <= 0) return max_wait_ms;
    int64_t left = deadline_ms - now_ms;
    if (left <= 0) return -2;
    if (max_wait_ms < 0 || max_wait_ms > left) return left;
    return max_wait_ms;
}

static int valid_name(const char *s) {
    if (!s || !*s || strlen(s) > GOV_NAME_MAX) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '_' || *p == ':' || *p == '-'))
            return 0;
    return 1;
}

/* ---- references ---------------------------------------------------------------- */

static void gov_ref(sl_gov *g) { atomic_fetch_add(&g->refs, 1); }

static void gov_unref(sl_gov *g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static gov_op *op_new(sl_gov *g, gov_op_kind kind, int blocking) {
    gov_op *op = calloc(1, sizeof(*op));
    if (!op) return NULL;
    op->kind = kind;
    op->gov = g;
    op->refs = 1;
    op->state = OPS_ACTIVE;
    op->pause_ms = -1;
    op->retry_after_ms = -1;
    op->max_wait_ms = -1;
    op->eff_wait_ms = -1;
    op->caller = gov_thread_caller();
    if (blocking) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        int rc = pthread_cond_init(&op->cv, &ca);
        pthread_condattr_destroy(&ca);
        if (rc != 0) {
            free(op);
            return NULL;
        }
        op->has_cv = 1;
    }
    return op;
}

static void op_free(gov_op *op) {
    if (op->has_cv) pthread_cond_destroy(&op->cv);
    free(op->endpoint);
    free(op->hdrs);
    free(op->pregrant);
    free(op);
}

void gov_op_ref(gov_op *op) {
    pthread_mutex_lock(&op->gov->mu);
    op->refs++;
    pthread_mutex_unlock(&op->gov->mu);
}

void gov_op_unref(gov_op *op) {
    sl_gov *g = op->gov;
    pthread_mutex_lock(&g->mu);
    int left = --op->refs;
    pthread_mutex_unlock(&g->mu);
    if (left == 0) op_free(op);
}

/* ---- the queue -------------------------------------------------------------------- */

/* Under g->mu. */
static void wake_locked(sl_gov *g) {
    if (g->wake_open) uv_async_send(&g->wake);
}

/* Queues op for the loop, which takes over the caller's reference. Returns
 * 0 or SL_ECLOSING (then op is untouched). */
static int submit(sl_gov *g, gov_op *op, sl_call_id *id) {
    pthread_mutex_lock(&g->mu);
    if (g->closing) {
        pthread_mutex_unlock(&g->mu);
        return SL_ECLOSING;
    }
    if (op->async && op->kind == OP_ACQUIRE) {
        op->id = ++g->next_id;
        if (id) *id = op->id; /* before the unlock: then the loop may free op */
        op->lnext = g->live;
        if (g->live) g->live->lprev = op;
        g->live = op;
    }
    op->qnext = NULL;
    if (g->qtail) g->qtail->qnext = op;
    else g->qhead = op;
    g->qtail = op;
    wake_locked(g);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

/* Under g->mu. */
static void live_remove(sl_gov *g, gov_op *op) {
    if (op->lprev) op->lprev->lnext = op->lnext;
    else if (g->live == op) g->live = op->lnext;
    if (op->lnext) op->lnext->lprev = op->lprev;
    op->lprev = op->lnext = NULL;
}

/* Under g->mu: marks an active acquire cancelled and hands it to the loop. */
static void cancel_locked(sl_gov *g, gov_op *op) {
    op->state = OPS_CANCELED;
    if (op->async) live_remove(g, op);
    op->refs++; /* the cancel list's */
    op->cnext = g->cancels;
    g->cancels = op;
    wake_locked(g);
}

/* ---- the loop thread ------------------------------------------------------------------ */

static int on_loop_thread(const sl_gov *g) { return pthread_equal(pthread_self(), g->thread); }

int gov_on_own_thread(const sl_gov *g) { return on_loop_thread(g); }

static void on_timer_closed(uv_handle_t *h) { free(h); }

static void op_close_timer(gov_op *op) {
    if (!op->timer) return;
    uv_timer_stop(op->timer);
    uv_close((uv_handle_t *)op->timer, on_timer_closed);
    op->timer = NULL;
}

/* Fills gr from op's result; the endpoint moves from op to gr. */
static void grant_fill(sl_grant *gr, gov_op *op) {
    gr->gov = op->gov;
    snprintf(gr->id, sizeof(gr->id), "%s", op->gid);
    snprintf(gr->dep, sizeof(gr->dep), "%s", op->member[0] ? op->member : op->dep);
    gr->endpoint = op->endpoint;
    op->endpoint = NULL;
    gr->waited_ms = op->waited_ms;
    gr->tokens = op->granted_tokens;
    gr->local = op->local;
    gov_ref(op->gov);
}

/* Delivers op's result (loop thread), exactly once. */
static void finish(gov_op *op) {
    sl_gov *g = op->gov;
    op->loop_done = 1;
    op_close_timer(op);
    pthread_mutex_lock(&g->mu);
    if (op->state == OPS_CANCELED) {
        pthread_mutex_unlock(&g->mu);
        if (op->kind == OP_ACQUIRE && op->status == SL_OK) g->be->vt->give_back(g->be, op->gid);
        gov_op_unref(op);
        return;
    }
    op->state = OPS_DONE;
    if (!op->async) {
        pthread_cond_signal(&op->cv);
        pthread_mutex_unlock(&g->mu);
        gov_op_unref(op);
        return;
    }
    if (op->kind == OP_ACQUIRE) live_remove(g, op);
    pthread_mutex_unlock(&g->mu);
    if (op->kind == OP_ACQUIRE) {
        sl_grant *gr = NULL;
        if (op->status == SL_OK) {
            gr = op->pregrant;
            op->pregrant = NULL;
            grant_fill(gr, op);
        }
        sl_result r = {op->status, gr, op->status == SL_ESHED ? op->reason : "",
                       op->status == SL_ESHED ? op->retry_after_ms : -1, op->msg};
        op->acb(op->arg, &r);
    } else if (op->kind == OP_RETRY && op->rcb) {
        op->rcb(op->arg, op->status < 0 ? op->status : op->allowed, op->retry_after_ms);
    }
    gov_op_unref(op);
}

/* Sets op->msg, which msg may already be. */
static void set_msg(gov_op *op, const char *msg, int status) {
    if (msg == op->msg && *msg) return;
    snprintf(op->msg, sizeof(op->msg), "%s", msg && *msg ? msg : sl_strerror(status));
}

void gov_acquired(gov_op *op, const char *grant_id, long long waited_ms, long long tokens, int local,
                  const char *member, const char *endpoint) {
    snprintf(op->gid, sizeof(op->gid), "%s", grant_id);
    if (endpoint && *endpoint && !(op->endpoint = strdup(endpoint))) {
        /* Better no grant than one without the URL its call must go to. */
        op->gov->be->vt->give_back(op->gov->be, op->gid);
        gov_failed(op, SL_ENOMEM, "out of memory");
        return;
    }
    op->status = SL_OK;
    snprintf(op->member, sizeof(op->member), "%s", member ? member : "");
    op->waited_ms = waited_ms;
    op->granted_tokens = tokens;
    op->local = local;
    op->msg[0] = '\0';
    finish(op);
}

void gov_shed(gov_op *op, const char *reason, long long retry_after_ms, const char *msg) {
    op->status = SL_ESHED;
    snprintf(op->reason, sizeof(op->reason), "%s", reason ? reason : "other");
    op->retry_after_ms = retry_after_ms;
    if (msg && *msg) set_msg(op, msg, SL_ESHED);
    else if (retry_after_ms >= 0)
        snprintf(op->msg, sizeof(op->msg), "shed on '%s' (%s): retry after %lld ms", op->dep, op->reason,
                 retry_after_ms);
    else snprintf(op->msg, sizeof(op->msg), "shed on '%s' (%s): will never fit", op->dep, op->reason);
    finish(op);
}

void gov_estimated(gov_op *op, int granted, long long wait_ms, long long tokens, const char *deployment,
                   const char *reason, long long retry_after_ms, int local) {
    op->status = granted ? SL_OK : SL_ESHED;
    op->allowed = granted;
    op->waited_ms = granted ? wait_ms : -1;
    op->granted_tokens = tokens;
    snprintf(op->member, sizeof(op->member), "%s", deployment ? deployment : "");
    snprintf(op->reason, sizeof(op->reason), "%s", granted ? "" : reason ? reason : "other");
    op->retry_after_ms = granted ? -1 : retry_after_ms;
    op->local = local;
    if (granted) op->msg[0] = '\0';
    else if (retry_after_ms >= 0)
        snprintf(op->msg, sizeof(op->msg), "an acquire on '%s' would be shed now (%s): retry after %lld ms", op->dep,
                 op->reason, retry_after_ms);
    else
        snprintf(op->msg, sizeof(op->msg), "an acquire on '%s' would be shed now (%s): it will never fit", op->dep,
                 op->reason);
    finish(op);
}

void gov_failed(gov_op *op, int status, const char *msg) {
    op->status = status;
    set_msg(op, msg, status);
    finish(op);
}

void gov_retried(gov_op *op, int status, int allowed, long long retry_after_ms, const char *msg) {
    op->status = status;
    op->allowed = allowed;
    op->retry_after_ms = retry_after_ms;
    set_msg(op, msg, status);
    finish(op);
}

static void on_op_timer(uv_timer_t *t) {
    gov_op *op = t->data;
    sl_gov *g = op->gov;
    if (op->loop_done) return;
    g->be->vt->cancel(g->be, op);
    if (op->kind == OP_ACQUIRE)
        gov_failed(op, SL_ETIMEDOUT, "the deadline passed before the slot (reservation given back)");
    else gov_retried(op, SL_ETIMEDOUT, 0, -1, "no answer within call_timeout_ms");
}

static void op_arm_timer(sl_gov *g, gov_op *op, int64_t ms) {
    uv_timer_t *t = malloc(sizeof(*t));
    if (!t) return; /* a blocking caller still keeps its own deadline */
    uv_timer_init(&g->loop, t);
    t->data = op;
    uv_timer_start(t, on_op_timer, (uint64_t)(ms > 0 ? ms : 0), 0);
    op->timer = t;
}

static void on_backend_stopped(void *arg) {
    sl_gov *g = arg;
    pthread_mutex_lock(&g->mu);
    g->wake_open = 0;
    pthread_mutex_unlock(&g->mu);
    uv_close((uv_handle_t *)&g->wake, NULL);
}

static void dispatch(sl_gov *g, gov_op *op) {
    backend *be = g->be;
    int rc;
    switch (op->kind) {
    case OP_ACQUIRE: {
        pthread_mutex_lock(&g->mu);
        int canceled = op->state == OPS_CANCELED;
        pthread_mutex_unlock(&g->mu);
        if (canceled) {
            op->loop_done = 1;
            gov_op_unref(op);
            return;
        }
        int64_t now = sl_now_ms();
        op->eff_wait_ms = gov_effective_max_wait(op->max_wait_ms, op->deadline_ms, now);
        if (op->eff_wait_ms == -2) {
            gov_failed(op, SL_ETIMEDOUT, "the deadline passed before the acquire started");
            return;
        }
        /* A backend may fail op from within the call (a write error): hold
         * it so the timer is armed only on a live operation. */
        gov_op_ref(op);
        if ((rc = be->vt->acquire(be, op)) != 0) gov_failed(op, rc, op->msg);
        else if (op->deadline_ms > 0 && !op->loop_done) op_arm_timer(g, op, op->deadline_ms - now);
        gov_op_unref(op);
        return;
    }
    case OP_ESTIMATE:
        op->eff_wait_ms = gov_effective_max_wait(op->max_wait_ms, op->deadline_ms, sl_now_ms());
        if (op->eff_wait_ms == -2) {
            gov_retried(op, SL_ETIMEDOUT, 0, -1, "the deadline has passed");
            return;
        }
        /* fall through */
    case OP_RETRY:
    case OP_PING:
        gov_op_ref(op);
        rc = op->kind == OP_RETRY      ? be->vt->retry(be, op)
             : op->kind == OP_ESTIMATE ? be->vt->estimate(be, op)
                                       : (be->vt->ping ? be->vt->ping(be, op) : SL_EINVAL);
        if (rc != 0) gov_retried(op, rc, 0, -1, op->msg);
        else if (op->timeout_ms > 0 && !op->loop_done) op_arm_timer(g, op, op->timeout_ms);
        gov_op_unref(op);
        return;
    case OP_SETTLE:
        be->vt->settle(be, op);
        gov_op_unref(op);
        return;
    case OP_STOP:
        g->loop_stopping = 1;
        be->vt->stop(be, on_backend_stopped, g);
        gov_op_unref(op);
        return;
    }
}

static void run_cancels(sl_gov *g, gov_op *list) {
    while (list) {
        gov_op *op = list;
        list = op->cnext;
        if (!op->loop_done) {
            g->be->vt->cancel(g->be, op);
            op->loop_done = 1;
            op_close_timer(op);
            gov_op_unref(op); /* the loop's */
        }
        gov_op_unref(op); /* the cancel list's */
    }
}

static void on_wake(uv_async_t *h) {
    sl_gov *g = h->data;
    pthread_mutex_lock(&g->mu);
    gov_op *q = g->qhead, *c = g->cancels;
    g->qhead = g->qtail = NULL;
    g->cancels = NULL;
    pthread_mutex_unlock(&g->mu);
    /* Acquires before cancels: a cancel never overtakes its acquire. */
    while (q) {
        gov_op *op = q;
        q = op->qnext;
        dispatch(g, op);
    }
    run_cancels(g, c);
}

static void *gov_thread(void *arg) {
    sl_gov *g = arg;
    uv_run(&g->loop, UV_RUN_DEFAULT);
    /* Cancels that raced with the stop (the queue itself is empty: the
     * stop was the last operation accepted). */
    pthread_mutex_lock(&g->mu);
    gov_op *c = g->cancels;
    g->cancels = NULL;
    pthread_mutex_unlock(&g->mu);
    while (c) {
        gov_op *op = c;
        c = op->cnext;
        gov_op_unref(op);
    }
    g->be->vt->free(g->be);
    g->be = NULL;
    uv_run(&g->loop, UV_RUN_NOWAIT);
    uv_loop_close(&g->loop);
    pthread_mutex_lock(&g->mu);
    int self = g->self_close;
    pthread_mutex_unlock(&g->mu);
    if (self) {
        pthread_detach(pthread_self());
        gov_unref(g);
    }
    return NULL;
}

/* ---- open and close --------------------------------------------------------------------- */

/* Waits (blocking) until op, submitted by the caller with 2 references,
 * is done; the result is then in op. */
static void wait_done(sl_gov *g, gov_op *op) {
    pthread_mutex_lock(&g->mu);
    while (op->state == OPS_ACTIVE) pthread_cond_wait(&op->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void close_started(sl_gov *g);

int sl_open(const sl_options *opt, sl_gov **out) {
    if (out) *out = NULL;
    if (!opt || !out || opt->size < sizeof(size_t))
        return set_err(NULL, SL_EINVAL, NULL, -1, "sl_open: options and out are required (sl_options_init)");
    sl_options o;
    memset(&o, 0, sizeof(o));
    verdict_read(&o, sizeof(o), opt);
    int daemon = o.socket_path != NULL;
    if (daemon && (o.config_path || o.config_text || o.redis_url || o.deployments))
        return set_err(NULL, SL_EINVAL, NULL, -1,
                       "give either socket_path (daemon mode) or a configuration (embedded mode), not both");
    if (!daemon && !o.config_path && !o.config_text && !o.redis_url)
        return set_err(NULL, SL_EINVAL, NULL, -1, "no mode: set socket_path, or config_path / config_text / redis_url");

    sl_gov *g = calloc(1, sizeof(*g));
    if (!g) return set_err(NULL, SL_ENOMEM, NULL, -1, "out of memory");
    atomic_init(&g->refs, 1);
    g->gc.connect_timeout_ms = o.connect_timeout_ms > 0 ? o.connect_timeout_ms : 1000;
    g->gc.call_timeout_ms = o.call_timeout_ms > 0 ? o.call_timeout_ms : 5000;
    g->gc.max_idle_connections = o.max_idle_connections == 0  ? 8
                                 : o.max_idle_connections < 0 ? 0
                                                              : o.max_idle_connections;
    g->stop_op = op_new(g, OP_STOP, 0);
    if (!g->stop_op || pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g->stop_op);
        free(g);
        return set_err(NULL, SL_ENOMEM, NULL, -1, "out of memory");
    }
    char err[512] = "";
    int rc = uv_loop_init(&g->loop);
    if (rc != 0) {
        op_free(g->stop_op);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return set_err(NULL, SL_EIO, NULL, -1, "uv_loop_init: %s", uv_strerror(rc));
    }
    if (daemon) {
        rc = backend_daemon_new(g, &g->loop, o.socket_path, &g->gc, &g->be, err, sizeof(err));
    } else {
        config *cfg = NULL;
        rc = options_load_config(&o, &cfg, err, sizeof(err));
        if (rc == 0) {
            rc = backend_engine_new(g, &g->loop, cfg, o.agent_id, &g->be, err, sizeof(err));
            if (rc != 0) config_free(cfg);
        }
    }
    if (rc != 0) {
        uv_run(&g->loop, UV_RUN_NOWAIT);
        uv_loop_close(&g->loop);
        op_free(g->stop_op);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return set_err(NULL, rc, NULL, -1, "%s", err[0] ? err : sl_strerror(rc));
    }
    g->mode = g->be->vt->mode;
    uv_async_init(&g->loop, &g->wake, on_wake);
    g->wake.data = g;
    g->wake_open = 1;

    /* The loop thread takes no signals: the process' handlers stay where
     * the application put them, and a write to a closed socket is EPIPE
     * there, never a SIGPIPE that kills the process. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&g->thread, NULL, gov_thread, g);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        /* Stop the backend here, on this thread, as the loop thread would. */
        g->be->vt->stop(g->be, on_backend_stopped, g);
        uv_run(&g->loop, UV_RUN_DEFAULT);
        g->be->vt->free(g->be);
        uv_loop_close(&g->loop);
        op_free(g->stop_op);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return set_err(NULL, SL_ENOMEM, NULL, -1, "cannot start the governor thread: %s", strerror(rc));
    }

    /* Daemon mode: fail now, with the socket in the message, if sluiced
     * does not answer. Embedded: wait for the first connection attempt
     * (bounded by redis.connect_timeout_ms). */
    gov_op *ping = op_new(g, OP_PING, 1);
    if (!ping) {
        close_started(g);
        return set_err(NULL, SL_ENOMEM, NULL, -1, "out of memory");
    }
    ping->refs = 2;
    ping->timeout_ms = daemon ? g->gc.connect_timeout_ms : 0;
    submit(g, ping, NULL);
    wait_done(g, ping);
    rc = ping->status;
    if (rc != 0) {
        snprintf(err, sizeof(err), "%s", ping->msg);
        gov_op_unref(ping);
        close_started(g);
        return set_err(NULL, rc, NULL, -1, "%s", err);
    }
    gov_op_unref(ping);
    clear_err(g);
    *out = g;
    return 0;
}

/* Stops the loop thread and drops the open reference. */
static void close_started(sl_gov *g) {
    pthread_mutex_lock(&g->mu);
    if (g->closing) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    g->closing = 1;
    gov_op *stop = g->stop_op;
    g->stop_op = NULL;
    stop->qnext = NULL;
    if (g->qtail) g->qtail->qnext = stop;
    else g->qhead = stop;
    g->qtail = stop;
    wake_locked(g);
    if (on_loop_thread(g)) {
        g->self_close = 1;
        pthread_mutex_unlock(&g->mu);
        return;
    }
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    gov_unref(g);
}

void sl_close(sl_gov *gov) {
    if (gov) close_started(gov);
}

/* ---- acquire ------------------------------------------------------------------------------ */

static int fill_acquire(sl_gov *g, gov_op *op, const sl_request *req_in) {
    sl_request req;
    sl_request_init(&req);
    verdict_read(&req, sizeof(req), req_in);
    if (!valid_name(req.deployment))
        return set_err(g, SL_EINVAL, NULL, -1, "deployment must be 1-64 characters of [A-Za-z0-9._:-]");
    if (req.tokens < 0) return set_err(g, SL_EINVAL, NULL, -1, "tokens must be >= 0");
    /* The wire's bound, in both modes (sluiced refuses more). */
    if (req.tokens > SLUICE_AMOUNT_MAX || req.input_tokens > SLUICE_AMOUNT_MAX ||
        req.output_tokens > SLUICE_AMOUNT_MAX || req.max_wait_ms > SLUICE_AMOUNT_MAX)
        return set_err(g, SL_EINVAL, NULL, -1,
                       "tokens, input_tokens, output_tokens and max_wait_ms must be at most 10^15");
    if ((req.lane && !valid_name(req.lane)) || (req.tenant && !valid_name(req.tenant)) ||
        (req.tag && !valid_name(req.tag)))
        return set_err(g, SL_EINVAL, NULL, -1, "lane, tenant and tag must be 1-64 characters of [A-Za-z0-9._:-]");
    if (req.deadline_ms < 0) return set_err(g, SL_EINVAL, NULL, -1, "deadline_ms must be >= 0");
    if ((req.input_tokens < 0) != (req.output_tokens < 0))
        return set_err(g, SL_EINVAL, NULL, -1, "input_tokens and output_tokens go together (both >= 0, or both -1)");
    if (req.input_tokens >= 0 && req.tokens != 0 && req.tokens != req.input_tokens + req.output_tokens)
        return set_err(g, SL_EINVAL, NULL, -1,
                       "tokens must be input_tokens + output_tokens (or 0) when they are given");
    snprintf(op->dep, sizeof(op->dep), "%s", req.deployment);
    snprintf(op->lane, sizeof(op->lane), "%s", req.lane ? req.lane : "");
    snprintf(op->tenant, sizeof(op->tenant), "%s", req.tenant ? req.tenant : "");
    snprintf(op->tag, sizeof(op->tag), "%s", req.tag ? req.tag : "");
    op->split = req.input_tokens >= 0;
    op->exact = req.exact != 0;
    op->partial = req.partial != 0;
    op->input = req.input_tokens;
    op->output = req.output_tokens;
    op->tokens = op->split ? req.input_tokens + req.output_tokens : req.tokens;
    op->max_wait_ms = req.max_wait_ms;
    op->deadline_ms = req.deadline_ms;
    op->pregrant = calloc(1, sizeof(*op->pregrant));
    if (!op->pregrant) return set_err(g, SL_ENOMEM, NULL, -1, "out of memory");
    return 0;
}

static int check_gov(const sl_gov *g, int blocking) {
    if (!g) return SL_EINVAL;
    if (blocking && on_loop_thread(g))
        return set_err(g, SL_EINVAL, NULL, -1,
                       "blocking call from a governor callback (it would deadlock); use the async variant");
    return 0;
}

static void timespec_at(int64_t mono_ms, struct timespec *ts) {
    ts->tv_sec = (time_t)(mono_ms / 1000);
    ts->tv_nsec = (long)(mono_ms % 1000) * 1000000L;
}

/* The part both acquires share: check the governor and the request, make
 * the op and fill it. what names the missing argument for the message. */
static int acquire_op(sl_gov *g, const sl_request *req, int ok, int blocking, const char *what, gov_op **out) {
    *out = NULL;
    int rc = check_gov(g, blocking);
    if (rc) return rc;
    if (!req || !ok || req->size < sizeof(size_t))
        return set_err(g, SL_EINVAL, NULL, -1, "request and %s are required (sl_request_init)", what);
    gov_op *op = op_new(g, OP_ACQUIRE, blocking);
    if (!op) return set_err(g, SL_ENOMEM, NULL, -1, "out of memory");
    if ((rc = fill_acquire(g, op, req)) != 0) {
        op_free(op);
        return rc;
    }
    *out = op;
    return 0;
}

int sl_acquire(sl_gov *g, const sl_request *req, sl_grant **out) {
    if (out) *out = NULL;
    gov_op *op;
    int rc = acquire_op(g, req, out != NULL, 1, "out", &op);
    if (rc) return rc;
    gov_ref(g);
    op->refs = 2;
    if (submit(g, op, NULL) != 0) {
        op_free(op);
        rc = set_err(g, SL_ECLOSING, NULL, -1, "the governor is closed");
        gov_unref(g);
        return rc;
    }
    int timed_out = 0;
    pthread_mutex_lock(&g->mu);
    while (op->state == OPS_ACTIVE) {
        if (op->deadline_ms <= 0) {
            pthread_cond_wait(&op->cv, &g->mu);
            continue;
        }
        struct timespec ts;
        timespec_at(op->deadline_ms, &ts);
        if (pthread_cond_timedwait(&op->cv, &g->mu, &ts) == ETIMEDOUT && op->state == OPS_ACTIVE) {
            /* Leave now; the loop gives back whatever it gets. */
            cancel_locked(g, op);
            timed_out = 1;
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (timed_out) {
        rc = set_err(g, SL_ETIMEDOUT, NULL, -1, "the deadline passed before the slot on '%s' (reservation given back)",
                     op->dep);
    } else if (op->status == SL_OK) {
        sl_grant *gr = op->pregrant;
        op->pregrant = NULL;
        grant_fill(gr, op);
        *out = gr;
        clear_err(g);
        rc = 0;
    } else if (op->status == SL_ESHED) {
        rc = set_err(g, SL_ESHED, op->reason, op->retry_after_ms, "%s", op->msg);
    } else {
        rc = set_err(g, op->status, NULL, -1, "%s", op->msg);
    }
    gov_op_unref(op);
    gov_unref(g);
    return rc;
}

int sl_acquire_async(sl_gov *g, const sl_request *req, sl_acquire_cb cb, void *arg, sl_call_id *id) {
    if (id) *id = 0;
    gov_op *op;
    int rc = acquire_op(g, req, cb != NULL, 0, "callback", &op);
    if (rc) return rc;
    op->async = 1;
    op->acb = cb;
    op->arg = arg;
    if (submit(g, op, id) != 0) {
        op_free(op);
        return set_err(g, SL_ECLOSING, NULL, -1, "the governor is closed");
    }
    clear_err(g);
    return 0;
}

int sl_cancel(sl_gov *g, sl_call_id id) {
    if (!g) return SL_EINVAL;
    pthread_mutex_lock(&g->mu);
    gov_op *op = g->live;
    while (op && op->id != id) op = op->lnext;
    if (!op || op->state != OPS_ACTIVE) {
        pthread_mutex_unlock(&g->mu);
        return set_err(g, SL_EALREADY, NULL, -1, "no pending call %llu (it completed or was canceled)",
                       (unsigned long long)id);
    }
    cancel_locked(g, op);
    pthread_mutex_unlock(&g->mu);
    clear_err(g);
    return 0;
}

const char *sl_grant_id(const sl_grant *gr) { return gr ? gr->id : ""; }
const char *sl_grant_deployment(const sl_grant *gr) { return gr ? gr->dep : ""; }
const char *sl_grant_endpoint(const sl_grant *gr) { return gr && gr->endpoint ? gr->endpoint : ""; }
long long sl_grant_waited_ms(const sl_grant *gr) { return gr ? gr->waited_ms : -1; }
long long sl_grant_tokens(const sl_grant *gr) { return gr ? gr->tokens : -1; }
int sl_grant_local(const sl_grant *gr) { return gr ? gr->local : 0; }

/* ---- estimate ----------------------------------------------------------------------------------- */

void sl_estimate_result_init_size(sl_estimate_result *r, size_t size) {
    if (!r || size < sizeof(size_t)) return;
    memset(r, 0, size);
    r->size = size;
}

int sl_estimate(sl_gov *g, const sl_request *req, sl_estimate_result *out) {
    int rc = check_gov(g, 1);
    if (rc) return rc;
    if (!req || !out || req->size < sizeof(size_t) || out->size < sizeof(size_t))
        return set_err(g, SL_EINVAL, NULL, -1,
                       "request and out are required (sl_request_init, sl_estimate_result_init)");
    gov_op *op = op_new(g, OP_ESTIMATE, 1);
    if (!op) return set_err(g, SL_ENOMEM, NULL, -1, "out of memory");
    if ((rc = fill_acquire(g, op, req)) != 0) {
        op_free(op);
        return rc;
    }
    op->timeout_ms = g->gc.call_timeout_ms;
    gov_ref(g);
    op->refs = 2;
    if (submit(g, op, NULL) != 0) {
        op_free(op);
        gov_unref(g);
        return set_err(g, SL_ECLOSING, NULL, -1, "the governor is closed");
    }
    wait_done(g, op);
    sl_estimate_result r;
    memset(&r, 0, sizeof(r));
    r.size = out->size < sizeof(r) ? out->size : sizeof(r);
    rc = op->status;
    if (rc == SL_OK || rc == SL_ESHED) {
        r.granted = rc == SL_OK;
        r.wait_ms = r.granted ? op->waited_ms : -1;
        r.tokens = op->granted_tokens;
        snprintf(r.deployment, sizeof(r.deployment), "%s", op->member[0] ? op->member : op->dep);
        snprintf(r.reason, sizeof(r.reason), "%s", r.granted ? "" : op->reason);
        r.retry_after_ms = r.granted ? -1 : op->retry_after_ms;
        r.local = op->local;
        memcpy(out, &r, r.size);
    }
    if (rc == SL_OK) clear_err(g);
    else if (rc == SL_ESHED) set_err(g, SL_ESHED, op->reason, op->retry_after_ms, "%s", op->msg);
    else set_err(g, rc, NULL, -1, "%s", op->msg);
    gov_op_unref(op);
    gov_unref(g);
    return rc;
}

/* ---- settle and retry ------------------------------------------------------------------------- */

/* Keeps the headers the settle needs (those lib/http understands) in one
 * allocation, and the pause they imply (for the embedded engine; the
 * daemon parses the forwarded headers itself). */
static int settle_headers(gov_op *op, const sl_header *h, size_t n) {
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    int64_t now = (int64_t)wall_clock_ms();
    size_t keep = 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (!h[i].name || !h[i].value) continue;
        size_t nl = strlen(h[i].name), vl = strlen(h[i].value);
        if (ratelimit_add_header(&fb, h[i].name, nl, h[i].value, vl, now)) {
            keep++;
            bytes += nl + vl + 2;
        }
    }
    /* A quota error's reset counts like a 429's: it says when the
     * deployment may be used again. */
    op->pause_ms =
        ratelimit_settle_pause_ms(&fb, op->outcome == SL_OUTCOME_THROTTLED || op->outcome == SL_OUTCOME_QUOTA, NULL);
    /* As sluiced does: one bad header must not stop a deployment for days. */
    if (op->pause_ms > SLUICE_PAUSE_MAX_MS) op->pause_ms = SLUICE_PAUSE_MAX_MS;
    if (!keep) return 0;
    op->hdrs = malloc(keep * sizeof(sl_header) + bytes);
    if (!op->hdrs) return SL_ENOMEM;
    char *w = (char *)(op->hdrs + keep);
    ratelimit_feedback probe;
    for (size_t i = 0; i < n; i++) {
        if (!h[i].name || !h[i].value) continue;
        size_t nl = strlen(h[i].name), vl = strlen(h[i].value);
        ratelimit_init(&probe, -1);
        if (!ratelimit_add_header(&probe, h[i].name, nl, h[i].value, vl, now)) continue;
        sl_header *d = &op->hdrs[op->nhdrs++];
        memcpy(w, h[i].name, nl + 1);
        d->name = w;
        w += nl + 1;
        memcpy(w, h[i].value, vl + 1);
        d->value = w;
        w += vl + 1;
    }
    return 0;
}

int sl_settle(sl_grant *gr, long long actual_tokens, sl_outcome outcome, const sl_header *headers, size_t nheaders) {
    sl_usage u;
    sl_usage_init(&u);
    u.tokens = actual_tokens < 0 ? -1 : actual_tokens;
    return sl_settle_usage(gr, &u, outcome, headers, nheaders);
}

int sl_settle_usage(sl_grant *gr, const sl_usage *usage_in, sl_outcome outcome, const sl_header *headers,
                    size_t nheaders) {
    if (!gr) return SL_EINVAL;
    sl_gov *g = gr->gov;
    int rc = 0;
    gov_op *op = NULL;
    usage_rec u;
    verdict_usage_read(&u, usage_in);
    if ((int)outcome < SL_OUTCOME_OK || (int)outcome > SL_OUTCOME_QUOTA) {
        rc = set_err(g, SL_EINVAL, NULL, -1, "outcome must be one of SL_OUTCOME_*");
        goto out;
    }
    if (u.tokens > SLUICE_AMOUNT_MAX || u.input > SLUICE_AMOUNT_MAX || u.output > SLUICE_AMOUNT_MAX ||
        u.cache_read > SLUICE_AMOUNT_MAX || u.cache_write > SLUICE_AMOUNT_MAX) {
        rc = set_err(g, SL_EINVAL, NULL, -1, "usage: every count must be at most 10^15");
        goto out;
    }
    if ((u.input < 0) != (u.output < 0) || (u.cache_read >= 0 && (u.input < 0 || u.cache_read > u.input)) ||
        (u.tokens >= 0 && u.input >= 0 && u.tokens != u.input + u.output)) {
        rc = set_err(g, SL_EINVAL, NULL, -1,
                     "usage: input_tokens and output_tokens go together, cache_read_tokens is part of "
                     "input_tokens, tokens is their sum");
        goto out;
    }
    if (nheaders && !headers) {
        rc = set_err(g, SL_EINVAL, NULL, -1, "nheaders > 0 without headers");
        goto out;
    }
    op = op_new(g, OP_SETTLE, 0);
    if (!op) {
        rc = set_err(g, SL_ENOMEM, NULL, -1, "out of memory");
        goto out;
    }
    snprintf(op->grant_id, sizeof(op->grant_id), "%s", gr->id);
    snprintf(op->dep, sizeof(op->dep), "%s", gr->dep);
    /* Valid: input and output known together, cache_read within input. */
    op->actual = u;
    if (u.tokens < 0 && u.input >= 0) op->actual.tokens = u.input + u.output;
    op->outcome = outcome;
    if (settle_headers(op, headers, nheaders) != 0) {
        rc = set_err(g, SL_ENOMEM, NULL, -1, "out of memory");
        goto out;
    }
    if (submit(g, op, NULL) != 0) {
        rc = set_err(g, SL_ECLOSING, NULL, -1, "the governor is closed; the grant expires by its lease");
        goto out;
    }
    op = NULL;
    clear_err(g);
out:
    if (op) op_free(op);
    free(gr->endpoint);
    free(gr);
    gov_unref(g);
    return rc;
}

static gov_op *retry_op(sl_gov *g, const char *deployment, int blocking, int *rc) {
    if (!valid_name(deployment)) {
        *rc = set_err(g, SL_EINVAL, NULL, -1, "deployment must be 1-64 characters of [A-Za-z0-9._:-]");
        return NULL;
    }
    gov_op *op = op_new(g, OP_RETRY, blocking);
    if (!op) {
        *rc = set_err(g, SL_ENOMEM, NULL, -1, "out of memory");
        return NULL;
    }
    snprintf(op->dep, sizeof(op->dep), "%s", deployment);
    op->timeout_ms = g->gc.call_timeout_ms;
    return op;
}

int sl_may_retry(sl_gov *g, const char *deployment, long long *retry_after_ms) {
    if (retry_after_ms) *retry_after_ms = -1;
    int rc = check_gov(g, 1);
    if (rc) return rc;
    gov_op *op = retry_op(g, deployment, 1, &rc);
    if (!op) return rc;
    gov_ref(g);
    op->refs = 2;
    if (submit(g, op, NULL) != 0) {
        op_free(op);
        rc = set_err(g, SL_ECLOSING, NULL, -1, "the governor is closed");
        gov_unref(g);
        return rc;
    }
    wait_done(g, op);
    if (op->status < 0) {
        rc = set_err(g, op->status, NULL, -1, "%s", op->msg);
    } else if (op->allowed) {
        clear_err(g);
        rc = 1;
    } else {
        if (retry_after_ms) *retry_after_ms = op->retry_after_ms;
        set_err(g, SL_ENORETRY, "retry_budget", op->retry_after_ms,
                "the fleet's retry budget for '%s' is spent; it refills in %lld ms", op->dep, op->retry_after_ms);
        rc = 0;
    }
    gov_op_unref(op);
    gov_unref(g);
    return rc;
}

int sl_may_retry_async(sl_gov *g, const char *deployment, sl_retry_cb cb, void *arg) {
    int rc = check_gov(g, 0);
    if (rc) return rc;
    if (!cb) return set_err(g, SL_EINVAL, NULL, -1, "a callback is required");
    gov_op *op = retry_op(g, deployment, 0, &rc);
    if (!op) return rc;
    op->async = 1;
    op->rcb = cb;
    op->arg = arg;
    if (submit(g, op, NULL) != 0) {
        op_free(op);
        return set_err(g, SL_ECLOSING, NULL, -1, "the governor is closed");
    }
    clear_err(g);
    return 0;
}
