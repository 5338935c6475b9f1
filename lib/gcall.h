/* gcall: the governed HTTP call (sl_call_start and sl_curl_perform), split
 * in two modules that share this header (prefixes gcall_ and caller_; the
 * core's engine has call_* of its own):
 *   caller.c  the sl_caller: the loop it is attached to (sl_loop), its
 *             libcurl multi driver (curlm.h) on that loop's sockets and timer,
 *             one timer heap for every call's waits, the hand-over of
 *             governor answers from the governor's thread, and the queue
 *             of completions delivered from the loop;
 *   gcall.c   the governed call's state machine (gcall_sm: one step
 *             table, also run by the daemon's HTTP proxy) and sl_call's
 *             steps on it: acquire -> prepare -> send -> classify ->
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

/* ---- the state machine ------------------------------------------------------------
 * One governed call's steps, whoever governs it and however it sends:
 * libsluice's sl_call (below: the governor's async API, libcurl on the
 * caller's loop) and the daemon's HTTP proxy (agent/proxy_call.c: the
 * engine, the client's request streamed back) both run on it. The
 * machine holds the step a call is in, the call's time (its deadline and
 * what an attempt needs of it) and the end of each attempt; its user's
 * step table says how each step is done, and what it gives back when the
 * call ends during it:
 *   SL_CALL_ACQUIRING  ask for a slot by gcall_sm_slot_left(); granted:
 *                      gcall_sm_go(SENDING).
 *   SL_CALL_SENDING    one attempt, cut at gcall_sm_attempt_ms(); its
 *                      answer classified by the user into a verdict,
 *                      then gcall_sm_attempt_end(): settled (the table's
 *                      settle), and on a failure whether another attempt
 *                      fits (sl_backoff_ms: retryable, attempts, the
 *                      server's wait, the deadline): then ASKING.
 *   SL_CALL_ASKING     the fleet's retry budget; yes: gcall_sm_allowed()
 *                      waits out the backoff decided, then ACQUIRING.
 *   SL_CALL_BACKOFF    the user's one timer (steps->sleep); when it fires
 *                      the user calls gcall_sm_wakeup(), which enters the
 *                      step gcall_sm_pause() named.
 * The outcome and the answer are the user's; the machine never ends a
 * call itself. Times are sl_now_ms()'s clock. Loop thread only; no
 * allocation. */
typedef struct gcall_sm gcall_sm;

typedef struct gcall_step {
    /* Begins the step (NULL: nothing to do). Returns 0, or an error that
     * gcall_sm_go() returns: the step did not begin, the user decides. */
    int (*enter)(gcall_sm *m);
    /* The call ends during the step: give back what it holds (NULL:
     * nothing; a BACKOFF's timer is the machine's to stop). */
    void (*stop)(gcall_sm *m);
} gcall_step;

typedef struct gcall_steps {
    gcall_step step[SL_CALL_DONE]; /* by SL_CALL_*; BACKOFF's is the timer */
    /* Arms the call's one timer for due (sl_now_ms() clock; -1 stops
     * it). */
    void (*sleep)(gcall_sm *m, int64_t due);
    /* An attempt ended with verdict v (gcall_sm_attempt_end): its slot
     * goes back with what the attempt used. Returns nonzero when the call
     * must not try again whatever v says (cancelled meanwhile: the user's
     * hook ran here). */
    int (*settle)(gcall_sm *m, const sl_verdict *v);
} gcall_steps;

/* An attempt ends this long before the call's deadline, so that the
 * settle and the answer also happen within it. */
#define GCALL_DEADLINE_MARGIN_MS 10

struct gcall_sm {
    const gcall_steps *steps;
    /* The call's policy, the user's for the call's life: deadline_ms
     * (0: none), min_attempt_ms, attempt_timeout_ms, max_attempts, the
     * backoff and retry_after_cap_ms. */
    const sl_call_opts *o;
    int state;       /* SL_CALL_* */
    int after;       /* what a BACKOFF leads to */
    int retries;     /* retries the fleet allowed */
    int64_t decided; /* when the last backoff was decided */
    long long delay; /* that backoff */
    uint64_t rng;    /* the backoff's jitter (splitmix64) */
};

void gcall_sm_init(gcall_sm *m, const gcall_steps *steps, const sl_call_opts *o, uint64_t seed);
/* Enters step state (its table row's enter); returns what enter returned. */
int gcall_sm_go(gcall_sm *m, int state);
/* Waits (BACKOFF) until due, then enters step then. */
void gcall_sm_pause(gcall_sm *m, int64_t due, int then);
/* The timer of a BACKOFF fired. */
void gcall_sm_wakeup(gcall_sm *m);

/* The call's time. The latest moment a slot may come is the deadline
 * less min_attempt_ms (an attempt must fit after it): *by that moment
 * and *left the time until it (both -1 without a deadline), or
 * SL_EDEADLINE when it has passed. */
int gcall_sm_slot_left(const gcall_sm *m, int64_t now, int64_t *by, long long *left);
/* Whether a wait of wait_ms from now still leaves a slot in time. */
int gcall_sm_wait_fits(const gcall_sm *m, int64_t now, long long wait_ms);
/* An attempt's time limit from now: attempt_timeout_ms, cut to end
 * GCALL_DEADLINE_MARGIN_MS before the deadline (at least 1); -1 none. */
long long gcall_sm_attempt_ms(const gcall_sm *m, int64_t now);
/* Whether now is within the deadline (always, without one). */
int gcall_sm_within(const gcall_sm *m, int64_t now);

/* The end of an attempt, v its verdict (the user's classification of
 * the answer): the slot is settled (steps->settle), then 0 when it
 * succeeded; else, when another attempt fits and may_retry, the machine
 * enters ASKING and returns 1; else why not (< 0): SL_EFATAL (not
 * retryable), SL_EATTEMPTS, SL_EDEADLINE (no time left, or the server's
 * wait is beyond the cap), SL_ECANCELED (may_retry 0), or what ASKING's
 * enter returned. */
int gcall_sm_attempt_end(gcall_sm *m, const sl_verdict *v, int may_retry);
/* After a failed attempt: the delay before the next one (>= 0, kept for
 * gcall_sm_allowed), or why there is none (as gcall_sm_attempt_end). */
long long gcall_sm_failed(gcall_sm *m, const sl_verdict *v);
/* The fleet's retry budget allowed the retry: counted, and the backoff
 * decided by gcall_sm_failed runs (from when it was decided). */
void gcall_sm_allowed(gcall_sm *m);
/* Ends the call in whatever step it is: that step's stop (a BACKOFF's
 * timer stopped); the state becomes SL_CALL_DONE. */
void gcall_sm_stop(gcall_sm *m);

/* ---- sl_call ------------------------------------------------------------------------- */

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
    gcall_sm sm;          /* its step, retries and backoff */
    int stop_after_send;  /* SL_CANCEL_AFTER_SEND during a transfer */
    int sent_some;        /* the aborted attempt had sent bytes (abort_send) */
    int cancelled;        /* sl_call_cancel() ended it */
    int in_hook;          /* a hook of this call is running */
    int acq_pending;      /* an acquire's answer is on its way */
    int ask_pending;      /* a retry-budget answer is on its way */
    int cc;               /* the last attempt's CURLcode */

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

    sl_call_id acq;        /* the pending acquire, for sl_cancel */
    sl_grant *grant;       /* held from the slot to the settle */
    char member[72];       /* the deployment of the grant */
    int64_t t0;            /* start */
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
