/* backend_daemon: daemon mode. A client of the local sluiced on its UNIX
 * socket, on the governor's loop thread.
 *
 * ACQUIRE holds its connection until the slot (sluiced answers at the
 * slot), and sluiced answers a connection's commands in order, so every
 * acquire gets a connection of its own: a slow slot never delays another
 * caller's reply. Connections are reused from a small idle pool.
 *
 * Giving up on an acquire (sl_cancel, a deadline, sl_close) half-closes
 * its connection and reads it to the end (dconn_abandon): sluiced takes
 * the end of input as the caller going away and cancels the command, which
 * gives the reservation back; but a grant it wrote before it saw the end
 * (the reply unread here, say while this thread was stalled) is no longer
 * its to cancel, so it is read here and settled as cancelled. Closing
 * blind would leave such a grant outstanding until its lease ran out.
 *
 * SETTLE, RETRY and PING share one control connection, pipelined. A
 * settle that carries provider headers may pause the deployment, so
 * acquires are held back while such a settle is unanswered: an acquire
 * made after sl_settle() returned never overtakes the pause. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dproto.h"
#include "gov.h"

#define DCONN_MAX_BUFFER (2 * 1024 * 1024)
#define DAEMON_STOP_GRACE_MS 1000

typedef enum dreq_kind { DREQ_ACQUIRE, DREQ_SETTLE, DREQ_RETRY, DREQ_PING, DREQ_ESTIMATE } dreq_kind;

typedef struct dconn dconn;
typedef struct dmn dmn;

/* One command waiting for its reply (or, for a deferred acquire, for its
 * turn). op is NULL once nobody wants the answer. */
typedef struct dreq {
    dreq_kind kind;
    gov_op *op;
    dconn *c;          /* NULL while deferred */
    int feedback;      /* a settle with headers */
    int retried;       /* an acquire re-sent after a stale pooled connection */
    struct dreq *next; /* in c's FIFO or d->deferred */
} dreq;

struct dconn {
    dmn *d;
    uv_pipe_t pipe;
    uv_connect_t connect_req;
    int connected, closing, is_ctl, reused, got_bytes;
    int draining; /* half-closed by dconn_abandon: read to the end, then closed */
    uv_shutdown_t shutdown_req;
    char *rbuf;
    size_t rlen, rcap;
    resp_buf pend;      /* written once connected */
    dreq *head, *tail;  /* replies expected, in order */
    dconn *prev, *next; /* d->conns */
    dconn *idle_next;   /* d->idle */
    int in_idle;
};

struct dmn {
    backend base;
    char path[108];
    gov_config gc;
    dconn *conns; /* every open connection */
    dconn *idle;
    int nidle;
    dconn *ctl;
    dreq *deferred, *deferred_tail;
    int feedback_inflight;
    int stopping, stop_timer_closing;
    uv_timer_t stop_timer;
    void (*done)(void *);
    void *done_arg;
};

typedef struct write_req {
    uv_write_t req;
    char *data;
} write_req;

static void dconn_close(dconn *c, int status, const char *msg);

/* The flags of op's estimate on the wire (dproto.h). */
static int marks_of(const gov_op *op) { return (op->exact ? DPROTO_EXACT : 0) | (op->partial ? DPROTO_PARTIAL : 0); }
static void dconn_abandon(dconn *c, int status, const char *msg);
static void dispatch_acquire(dmn *d, dreq *r);
static void maybe_stopped(dmn *d);

/* ---- replies to the governor ------------------------------------------------ */

/* Reports a failure for r (if anyone still wants it). */
static void dreq_fail(dmn *d, dreq *r, int status, const char *msg) {
    gov_op *op = r->op;
    r->op = NULL;
    if (op) op->be = NULL;
    if (!op || op->loop_done) return;
    if (r->kind == DREQ_ACQUIRE) gov_failed(op, status, msg);
    else gov_retried(op, status, 0, -1, msg);
}

static void feedback_done(dmn *d) {
    if (--d->feedback_inflight > 0) return;
    d->feedback_inflight = 0;
    dreq *list = d->deferred;
    d->deferred = d->deferred_tail = NULL;
    while (list) {
        dreq *r = list;
        list = r->next;
        r->next = NULL;
        if (!r->op) {
            free(r);
            continue;
        }
        dispatch_acquire(d, r);
    }
}

/* ---- connections ------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    free(w->data);
    free(w);
    /* A failed write shows up as a read error or EOF, which closes the
     * connection and fails what waits on it. */
}

static int dconn_flush(dconn *c) {
    if (!c->connected || c->closing || c->pend.len == 0) return 0;
    write_req *w = malloc(sizeof(*w));
    if (!w) return SL_ENOMEM;
    size_t len = 0;
    w->data = resp_buf_detach(&c->pend, &len);
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write);
    if (rc != 0) {
        free(w->data);
        free(w);
        return SL_EIO;
    }
    return 0;
}

static void dreq_push(dconn *c, dreq *r) {
    r->c = c;
    r->next = NULL;
    if (c->tail) c->tail->next = r;
    else c->head = r;
    c->tail = r;
}

static void idle_remove(dmn *d, dconn *c) {
    if (!c->in_idle) return;
    dconn **pp = &d->idle;
    while (*pp && *pp != c) pp = &(*pp)->idle_next;
    if (*pp) *pp = c->idle_next;
    c->idle_next = NULL;
    c->in_idle = 0;
    d->nidle--;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    dconn *c = h->data;
    if (c->rcap - c->rlen < 4096) {
        size_t cap = c->rcap ? c->rcap * 2 : 8192;
        char *nb = cap <= DCONN_MAX_BUFFER + 8192 ? realloc(c->rbuf, cap) : NULL;
        if (!nb) {
            *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
            return;
        }
        c->rbuf = nb;
        c->rcap = cap;
    }
    *buf = uv_buf_init(c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

/* A connection that has answered its acquire goes back to the pool. */
static void dconn_release(dmn *d, dconn *c) {
    if (d->stopping || c->closing || c->draining || c->head || c->rlen || d->nidle >= d->gc.max_idle_connections) {
        if (!c->closing) dconn_close(c, SL_ECLOSING, "");
        return;
    }
    c->idle_next = d->idle;
    d->idle = c;
    c->in_idle = 1;
    c->reused = 1;
    d->nidle++;
}

static void handle_reply(dmn *d, dconn *c, dreq *r, const rreply *rep) {
    char msg[GOV_MSG_MAX];
    gov_op *op = r->op;
    switch (r->kind) {
    case DREQ_ACQUIRE: {
        dproto_grant g = {0};
        char reason[24];
        long long ra;
        int rc = dproto_acquire_reply(rep, &g, reason, sizeof(reason), &ra, msg, sizeof(msg));
        if (op) {
            op->be = NULL;
            if (rc == SL_OK) {
                gov_acquired(op, g.id, g.waited_ms, g.tokens, g.local, g.member, g.endpoint);
            } else {
                if (rc == SL_EPROTO && g.id[0]) d->base.vt->give_back(&d->base, g.id);
                if (rc == SL_ESHED) gov_shed(op, reason, ra, NULL);
                else gov_failed(op, rc, msg);
            }
        } else if (rc == SL_OK || (rc == SL_EPROTO && g.id[0])) {
            d->base.vt->give_back(&d->base, g.id);
        }
        break;
    }
    case DREQ_SETTLE: break; /* fire and forget: an unknown grant has nobody to tell */
    case DREQ_RETRY: {
        int allowed;
        long long ra;
        int rc = dproto_retry_reply(rep, &allowed, &ra, msg, sizeof(msg));
        if (op) {
            op->be = NULL;
            if (!op->loop_done) gov_retried(op, rc, allowed, ra, msg);
        }
        break;
    }
    case DREQ_ESTIMATE: {
        dproto_estimate_result e;
        int rc = dproto_estimate_reply(rep, &e, msg, sizeof(msg));
        if (op) {
            op->be = NULL;
            if (op->loop_done) break;
            if (rc == SL_OK || rc == SL_ESHED)
                gov_estimated(op, rc == SL_OK, e.wait_ms, e.tokens, e.deployment, e.reason, e.retry_after_ms, e.local);
            else gov_retried(op, rc, 0, -1, msg);
        }
        break;
    }
    case DREQ_PING: {
        int rc = dproto_ok_reply(rep, msg, sizeof(msg));
        if (op) {
            op->be = NULL;
            if (!op->loop_done) gov_retried(op, rc, rc == SL_OK, -1, msg);
        }
        break;
    }
    }
    if (r->feedback) feedback_done(d);
    free(r);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    dconn *c = s->data;
    dmn *d = c->d;
    if (nread < 0) {
        char msg[GOV_MSG_MAX];
        snprintf(msg, sizeof(msg), "sluiced closed the connection (%s)",
                 nread == UV_EOF ? "EOF" : uv_strerror((int)nread));
        dconn_close(c, SL_EIO, msg);
        return;
    }
    c->rlen += (size_t)nread;
    if (nread > 0) c->got_bytes = 1;
    for (;;) {
        rreply *rep = NULL;
        size_t used = 0;
        char err[128];
        int rc = rreply_parse(c->rbuf, c->rlen, &rep, &used, err, sizeof(err));
        if (rc == 0) {
            if (c->rlen > DCONN_MAX_BUFFER) dconn_close(c, SL_EPROTO, "sluiced: reply too large");
            return;
        }
        if (rc < 0) {
            char msg[GOV_MSG_MAX];
            snprintf(msg, sizeof(msg), "sluiced: malformed reply: %s", rc == -2 ? "out of memory" : err);
            dconn_close(c, rc == -2 ? SL_ENOMEM : SL_EPROTO, msg);
            return;
        }
        memmove(c->rbuf, c->rbuf + used, c->rlen - used);
        c->rlen -= used;
        dreq *r = c->head;
        if (!r) {
            rreply_free(rep);
            dconn_close(c, SL_EPROTO, "sluiced: a reply nobody asked for");
            return;
        }
        c->head = r->next;
        if (!c->head) c->tail = NULL;
        int was_acquire = r->kind == DREQ_ACQUIRE;
        handle_reply(d, c, r, rep);
        rreply_free(rep);
        if (c->closing) return;
        if (was_acquire) {
            dconn_release(d, c);
            return;
        }
        if (c->is_ctl && !c->head && d->stopping) {
            dconn_close(c, SL_ECLOSING, "");
            return;
        }
    }
}

static void on_connect(uv_connect_t *req, int status) {
    dconn *c = req->handle->data;
    if (c->closing) return;
    if (status < 0) {
        char msg[GOV_MSG_MAX];
        snprintf(msg, sizeof(msg), "cannot connect to sluiced at '%s': %s", c->d->path, uv_strerror(status));
        dconn_close(c, SL_EUNAVAIL, msg);
        return;
    }
    c->connected = 1;
    int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    if (rc == 0) rc = dconn_flush(c);
    if (rc != 0) dconn_close(c, SL_EIO, "cannot use the connection to sluiced");
}

static dconn *dconn_new(dmn *d) {
    dconn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->d = d;
    if (uv_pipe_init(d->base.loop, &c->pipe, 0) != 0) {
        free(c);
        return NULL;
    }
    c->pipe.data = c;
    c->next = d->conns;
    if (d->conns) d->conns->prev = c;
    d->conns = c;
    uv_pipe_connect(&c->connect_req, &c->pipe, d->path, on_connect);
    return c;
}

static void on_conn_closed(uv_handle_t *h) {
    dconn *c = h->data;
    dmn *d = c->d;
    if (c->prev) c->prev->next = c->next;
    else d->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c->rbuf);
    resp_buf_free(&c->pend);
    free(c);
    maybe_stopped(d);
}

/* Closes c and fails everything still waiting on it with status/msg. An
 * acquire that met a stale pooled connection (closed by sluiced while
 * idle) is sent again once on a fresh one. */
static void dconn_close(dconn *c, int status, const char *msg) {
    dmn *d = c->d;
    if (c->closing) return;
    c->closing = 1;
    idle_remove(d, c);
    if (d->ctl == c) d->ctl = NULL;
    dreq *list = c->head;
    c->head = c->tail = NULL;
    int stale = c->reused && !c->got_bytes;
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
    while (list) {
        dreq *r = list;
        list = r->next;
        r->next = NULL;
        r->c = NULL;
        if (r->kind == DREQ_ACQUIRE && r->op && stale && !r->retried && !d->stopping && status == SL_EIO) {
            r->retried = 1;
            dispatch_acquire(d, r);
            continue;
        }
        int fb = r->feedback;
        dreq_fail(d, r, status, msg);
        free(r);
        if (fb) feedback_done(d);
    }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    dconn *c = req->handle->data;
    /* UV_ECANCELED: closed meanwhile (the close callback has not run yet). */
    if (status < 0 && status != UV_ECANCELED && !c->closing) dconn_close(c, SL_EIO, "");
}

/* Gives up on the acquire connection c: fails what waits on it with
 * status/msg now and, when its ACQUIRE may have reached sluiced,
 * half-closes c and reads it to the end rather than closing it. sluiced
 * sees the end of input, cancels what it has not answered (the
 * reservation goes back) and closes; a grant it had already written comes
 * in here with nobody waiting for it, and handle_reply settles it as
 * cancelled. sluiced closes its side as soon as its replies are written,
 * so a draining connection lives about one round trip; be_stop's grace
 * period closes any still draining then. */
static void dconn_abandon(dconn *c, int status, const char *msg) {
    dmn *d = c->d;
    if (c->closing || c->draining) return;
    for (dreq *r = c->head; r; r = r->next) dreq_fail(d, r, status, msg);
    idle_remove(d, c);
    /* Not connected: nothing was written, sluiced has nothing to answer. */
    if (!c->connected || !c->head || uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->pipe, on_shutdown) != 0) {
        dconn_close(c, status, msg);
        return;
    }
    c->draining = 1;
}

/* ---- commands -------------------------------------------------------------------- */

static dconn *ctl_conn(dmn *d) {
    if (!d->ctl || d->ctl->closing) {
        d->ctl = dconn_new(d);
        if (d->ctl) d->ctl->is_ctl = 1;
    }
    return d->ctl;
}

/* Sends r's command (already appended to c->pend by the caller). */
static int dconn_send(dconn *c, dreq *r) {
    dreq_push(c, r);
    if (dconn_flush(c) != 0) {
        dconn_close(c, SL_EIO, "cannot write to sluiced");
        return 0; /* r was failed by the close */
    }
    return 0;
}

static void dispatch_acquire(dmn *d, dreq *r) {
    gov_op *op = r->op;
    if (d->feedback_inflight > 0) {
        r->next = NULL;
        if (d->deferred_tail) d->deferred_tail->next = r;
        else d->deferred = r;
        d->deferred_tail = r;
        return;
    }
    dconn *c = d->idle;
    if (c) idle_remove(d, c);
    else c = dconn_new(d);
    if (!c) {
        dreq_fail(d, r, SL_ENOMEM, "out of memory");
        free(r);
        return;
    }
    if (dproto_acquire_split(&c->pend, op->dep, op->tokens, op->split ? op->input : -1, op->split ? op->output : -1,
                             op->eff_wait_ms, op->lane, op->tenant, op->tag, marks_of(op)) != 0) {
        dreq_fail(d, r, SL_ENOMEM, "out of memory");
        free(r);
        dconn_release(d, c);
        return;
    }
    c->got_bytes = 0;
    dconn_send(c, r);
}

static int be_acquire(backend *b, gov_op *op) {
    dmn *d = (dmn *)b;
    dreq *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(op->msg, sizeof(op->msg), "out of memory");
        return SL_ENOMEM;
    }
    r->kind = DREQ_ACQUIRE;
    r->op = op;
    op->be = r;
    dispatch_acquire(d, r);
    return 0;
}

static void be_cancel(backend *b, gov_op *op) {
    dmn *d = (dmn *)b;
    dreq *r = op->be;
    op->be = NULL;
    if (!r) return;
    r->op = NULL;
    if (r->kind != DREQ_ACQUIRE) return; /* the reply is dropped when it comes */
    if (r->c) {
        dconn_abandon(r->c, SL_ECANCELED, "");
        return;
    }
    /* Deferred: unlink and drop. */
    dreq **pp = &d->deferred, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = r->next;
        if (d->deferred_tail == r) d->deferred_tail = prev;
        free(r);
    }
}

/* Queues a command on the control connection. Returns 0, or SL_ENOMEM
 * with nothing sent (op untouched). */
static int send_ctl(dmn *d, dreq_kind kind, gov_op *op, int feedback,
                    int (*build)(resp_buf *, const gov_op *, const void *), const void *ud) {
    dreq *r = calloc(1, sizeof(*r));
    dconn *c = r ? ctl_conn(d) : NULL;
    if (!r || !c || build(&c->pend, op, ud) != 0) {
        free(r);
        if (op) snprintf(op->msg, sizeof(op->msg), "out of memory");
        return SL_ENOMEM;
    }
    r->kind = kind;
    r->op = op;
    r->feedback = feedback;
    if (op) op->be = r;
    if (feedback) d->feedback_inflight++;
    dconn_send(c, r);
    return 0;
}

typedef struct settle_args {
    const char *id;
    usage_rec usage;
    sl_outcome outcome;
    const sl_header *h;
    size_t nh;
} settle_args;

static int build_settle(resp_buf *b, const gov_op *op, const void *ud) {
    const settle_args *a = ud;
    return dproto_settle_usage(b, a->id, &a->usage, a->outcome, a->h, a->nh);
}

static void be_give_back(backend *b, const char *grant_id) {
    settle_args a = {grant_id, USAGE_REC_UNKNOWN, SL_OUTCOME_CANCELLED, NULL, 0};
    send_ctl((dmn *)b, DREQ_SETTLE, NULL, 0, build_settle, &a);
}

static void be_settle(backend *b, gov_op *op) {
    settle_args a = {op->grant_id, op->actual, op->outcome, op->hdrs, op->nhdrs};
    /* The settle op is freed by the caller right after: nothing refers to it. */
    send_ctl((dmn *)b, DREQ_SETTLE, NULL, op->nhdrs > 0, build_settle, &a);
}

static int build_retry(resp_buf *b, const gov_op *op, const void *ud) { return dproto_retry(b, op->dep); }
static int build_ping(resp_buf *b, const gov_op *op, const void *ud) { return dproto_ping(b); }

static int be_retry(backend *b, gov_op *op) { return send_ctl((dmn *)b, DREQ_RETRY, op, 0, build_retry, NULL); }

static int be_ping(backend *b, gov_op *op) { return send_ctl((dmn *)b, DREQ_PING, op, 0, build_ping, NULL); }

static int build_estimate(resp_buf *b, const gov_op *op, const void *ud) {
    return dproto_estimate(b, op->dep, op->tokens, op->split ? op->input : -1, op->split ? op->output : -1,
                           op->eff_wait_ms, op->lane, op->tenant, op->tag, marks_of(op));
}

/* On the control connection: sluiced answers ESTIMATE at once (one Redis
 * round trip), as it answers RETRY. */
static int be_estimate(backend *b, gov_op *op) {
    return send_ctl((dmn *)b, DREQ_ESTIMATE, op, 0, build_estimate, NULL);
}

/* ---- stop ------------------------------------------------------------------------------- */

static void on_stop_timer_closed(uv_handle_t *h) {
    dmn *d = h->data;
    if (d->done) d->done(d->done_arg);
}

static void maybe_stopped(dmn *d) {
    if (!d->stopping || d->conns || d->stop_timer_closing) return;
    d->stop_timer_closing = 1;
    uv_timer_stop(&d->stop_timer);
    uv_close((uv_handle_t *)&d->stop_timer, on_stop_timer_closed);
}

static void on_stop_grace(uv_timer_t *t) {
    dmn *d = t->data;
    for (dconn *c = d->conns, *next; c; c = next) {
        next = c->next;
        if (c == d->ctl || c->draining) dconn_close(c, SL_ECLOSING, "the governor is shutting down");
    }
}

static void be_stop(backend *b, void (*done)(void *), void *arg) {
    dmn *d = (dmn *)b;
    d->stopping = 1;
    d->done = done;
    d->done_arg = arg;
    dreq *list = d->deferred;
    d->deferred = d->deferred_tail = NULL;
    while (list) {
        dreq *r = list;
        list = r->next;
        dreq_fail(d, r, SL_ECLOSING, "the governor is shutting down");
        free(r);
    }
    /* Every connection but the control one holds an acquire (given up on
     * as a cancel is, so that a grant already written is given back) or is
     * idle. */
    dconn *c = d->conns;
    while (c) {
        dconn *next = c->next;
        if (c != d->ctl) dconn_abandon(c, SL_ECLOSING, "the governor is shutting down");
        c = next;
    }
    if (d->ctl && !d->ctl->head) dconn_close(d->ctl, SL_ECLOSING, "");
    /* Settles still unanswered, and grants still to be read from the
     * connections given up on, get a moment to be delivered. */
    uv_timer_start(&d->stop_timer, on_stop_grace, DAEMON_STOP_GRACE_MS, 0);
    maybe_stopped(d);
}

static void be_free(backend *b) { free(b); }

static const backend_vt daemon_vt = {
    "daemon", be_acquire, be_cancel, be_give_back, be_settle, be_retry, be_ping, be_estimate, be_stop, be_free,
};

int backend_daemon_new(sl_gov *gov, uv_loop_t *loop, const char *socket_path, const gov_config *gc, backend **out,
                       char *err, size_t errlen) {
    *out = NULL;
    if (!*socket_path || strlen(socket_path) >= sizeof(((dmn *)0)->path)) {
        snprintf(err, errlen, "socket_path must be 1-107 bytes");
        return SL_EINVAL;
    }
    dmn *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return SL_ENOMEM;
    }
    d->base.vt = &daemon_vt;
    d->base.gov = gov;
    d->base.loop = loop;
    d->gc = *gc;
    snprintf(d->path, sizeof(d->path), "%s", socket_path);
    uv_timer_init(loop, &d->stop_timer);
    d->stop_timer.data = d;
    *out = &d->base;
    return 0;
}
