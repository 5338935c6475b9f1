/* gcall: the governed HTTP call (sl_call_start and sl_curl_perform), split
 * in two modules that share this header (prefixes gcall_ and caller_; the
 * core's engine has call_* of its own):
 *   caller.c  the sl_caller: the loop it is attached to (sl_loop), its
 *             libcurl multi driver (curlm.h) on that loop's sockets and timer,
 *             one timer heap for every call's waits, the hand-over of
 *             governor answers from the governor's thread, and the queue
 *             of completions delivered from the loop;
 *   gcall.c   one call's steps: acquire -> prepare -> send -> classify ->
 *             settle -> backoff -> retry budget -> acquire again, and
 *             cancellation at each of them.
 * curl.c runs a caller in blocking mode for sl_curl_perform(): a private
 * loop on the calling thread whose transfers are curl_easy_perform() on
 * the caller's handle (the loop has nothing else to do meanwhile, and the
 * handle's own connection cache carries over from call to call).
 *
 * Threads: everything runs on the loop's thread, except gcall_post() (the
 * governor's thread) and the reference counts, which both threads touch
 * under caller->mu. A call lives while it is referenced: by its owner
 * until its completion is delivered (or the caller is freed), and by each
 * governor answer on its way. A caller lives while its owner (until
 * sl_caller_free), a dispatch in progress or any call holds it. */
#ifndef SLUICE_LIB_GCALL_H
#define SLUICE_LIB_GCALL_H

#include <pthread.h>
#include <stdint.h>

#include "curlm.h"
#include "sluice.h"

/* What an answer from the governor's thread carries (copied there). */
typedef enum gcall_ev_kind { GCALL_EV_ACQUIRED, GCALL_EV_RETRY } gcall_ev_kind;

typedef struct gcall_ev {
    gcall_ev_kind kind;
    int status; /* acquire: SL_OK / SL_E*; retry: 1, 0, SL_E* */
    sl_grant *grant;
    char reason[24];
    long long retry_after_ms;
    char msg[256];
} gcall_ev;

struct sl_call {
    sl_caller *c;
    sl_call *prev, *next; /* c->live, until the call ends */
    sl_call *evnext;      /* c->events */
    sl_call *donenext;    /* c->done */
    int refs;             /* under c->mu */
    int state;            /* SL_CALL_* */
    int after;            /* what a BACKOFF leads to: ACQUIRING or ASKING */
    int stop_after_send;  /* SL_CANCEL_AFTER_SEND during a transfer */
    int cancelled;        /* sl_call_cancel() ended it */
    int in_hook;          /* a hook of this call is running */
    int acq_pending;      /* an acquire's answer is on its way */
    int ask_pending;      /* a retry-budget answer is on its way */

    sl_call_opts o; /* defaults applied; the strings below */
    char *dep, *lane, *tenant, *tag;
    sl_call_cb cb;
    int (*prepare)(void *arg, sl_call *call, const sl_grant *grant, void *easy);
    void (*attempted)(void *arg, sl_call *call, const sl_verdict *v, int curl_code);
    void *arg;

    void *easy; /* the caller's, or own_easy */
    int own_easy;
    curlm_xfer xfer;         /* its transfer on c->multi */
    struct curl_slist *hdrs; /* own_easy's headers */
    char *body;              /* own_easy's body */
    sl_capture *cap;

    sl_call_id acq;  /* the pending acquire, for sl_cancel */
    sl_grant *grant; /* held from the slot to the settle */
    char member[72]; /* the deployment of the grant */
    uint64_t rng;
    int64_t t0, decided;   /* start; when the backoff was decided */
    long long delay;       /* that backoff */
    int64_t unavail_since; /* the governor unreachable since, 0 */
    int64_t due;           /* its timer: a BACKOFF's end, or the deadline guard
                                    while it waits for the governor */
    size_t heap_i;         /* in c->heap, or GCALL_NOT_QUEUED */
    gcall_ev ev;           /* the one governor answer on its way */

    int status; /* the outcome, once ended */
    sl_call_report rep;
};

#define GCALL_NOT_QUEUED ((size_t)-1)

struct sl_caller {
    sl_gov *gov;
    sl_loop loop;
    int attached;
    int blocking; /* sl_curl_perform: transfers block, no multi */
    curlm *multi; /* the transfers' driver; NULL when blocking */

    pthread_mutex_t mu;
    int refs;                      /* under mu */
    int closed;                    /* under mu: sl_caller_free ran; no wake-ups */
    sl_call *events, *events_tail; /* answers from the governor's thread, under mu */

    sl_call *live; /* calls in progress (loop thread) */
    size_t nlive;
    sl_call *done, *done_tail; /* ended, to be delivered */
    int depth;                 /* dispatches in progress */
    int free_pending;          /* sl_caller_free during a dispatch */

    sl_call **heap; /* the calls' timers by due: backoffs, deadline guards */
    size_t nheap, heapcap;
    int64_t curl_due;  /* libcurl's timeout, -1 none */
    int64_t armed_due; /* what the loop's timer is armed for, -1 none */
};

/* caller.c */
int caller_create(sl_gov *gov, int blocking, sl_caller **out);
void caller_ref(sl_caller *c);
void caller_unref(sl_caller *c);
void gcall_ref(sl_call *call);
void gcall_unref(sl_call *call);
/* Governor thread: hands call->ev to the loop (or, the caller freed, gives
 * its grant back), and drops the answer's reference. */
void gcall_post(sl_call *call);
/* Loop thread. */
int caller_reserve(sl_caller *c); /* room for one more call's wait */
int caller_add_transfer(sl_caller *c, sl_call *call);
void caller_abort_transfer(sl_caller *c, sl_call *call);
void caller_sleep(sl_caller *c, sl_call *call, int64_t due);
void caller_unsleep(sl_caller *c, sl_call *call);
void caller_complete(sl_caller *c, sl_call *call);
void caller_enter(sl_caller *c);
void caller_leave(sl_caller *c);

/* gcall.c: the steps the caller drives. */
void gcall_answer(sl_call *call); /* call->ev arrived */
void gcall_transfer_done(sl_call *call, int curl_code);
void gcall_wakeup(sl_call *call); /* its BACKOFF ended */
/* Ends a call because its caller is freed: no callback. */
void gcall_discard(sl_call *call);
/* The last reference went: frees the struct, its strings and report. */
void gcall_free(sl_call *call);

/* curl.c: settles g with verdict v of the response captured in cap,
 * passing on the headers settle_headers lets through. */
int curl_settle_verdict(sl_grant *g, const sl_verdict *v, const sl_capture *cap, int settle_headers);
/* Resets easy's callbacks to libcurl's defaults, as sl_curl_perform leaves it. */
void curl_reset_easy(void *easy);
/* One header line as libcurl delivers it (CRLF included), for every
 * header callback (the capture's, the HTTP proxy's): a status line
 * (CURL_LINE_STATUS, *status its code or 0), a field (CURL_LINE_FIELD:
 * *name a malloc'd "name\0value" block the caller frees, *value inside
 * it, both trimmed), or anything else: the blank line, a continuation, a
 * malformed line, or a field lost to OOM (CURL_LINE_OTHER). */
enum { CURL_LINE_OTHER = 0, CURL_LINE_STATUS, CURL_LINE_FIELD };
int curl_header_line(const char *line, size_t n, int *status, char **name, char **value);

/* Moves the captured body out (NUL-terminated, the caller's), NULL when none. */
char *curl_capture_take(sl_capture *cap, size_t *len);

#endif
