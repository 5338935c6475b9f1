/* gcall: one governed HTTP call's steps (see gcall.h). Every decision is
 * taken on the loop's thread:
 *
 *   ACQUIRING  sl_acquire_async() with the call's deadline less
 *              min_attempt_ms; its answer comes through gcall_post() and
 *              gcall_answer(). A shed ends the call, or with retry_shed
 *              waits its hint (BACKOFF) and asks again; a governor that
 *              cannot be reached is asked again every second for
 *              unavailable_ms.
 *   SENDING    the prepare hook, then the transfer (libcurl multi, or
 *              curl_easy_perform in blocking mode), cut to the deadline.
 *              Its end: classify (sl_capture_verdict), settle with the
 *              usage and headers, the attempted hook, then success, or
 *              sl_backoff_ms() decides whether a retry fits.
 *   ASKING     sl_may_retry_async() on the member that failed: yes sleeps
 *              until the backoff ends (BACKOFF) and acquires again, no
 *              ends the call (SL_ENORETRY).
 *
 * A call ends exactly once (gcall_finish): the report is completed, what
 * the call holds is released, and its completion queued for the loop. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcall.h"
#include "verdict.h"
#include "vocab.h"

/* Every allowed member behind an open breaker, with no hint: ask again. */
#define GCALL_BREAKER_WAIT_MS 5000
/* The governor unreachable: ask again after this. */
#define GCALL_UNAVAIL_PAUSE_MS 1000

/* The shed reasons, in the words of lib/core/vocab.h's table. */
enum {
#define GCALL_SHED_ENUM(name, word, source) GCALL_SHED_##name,
    SLUICE_SHED_REASON_MAP(GCALL_SHED_ENUM)
#undef GCALL_SHED_ENUM
};
static const char *const gcall_shed_words[] = {
#define GCALL_SHED_WORD(name, word, source) word,
    SLUICE_SHED_REASON_MAP(GCALL_SHED_WORD)
#undef GCALL_SHED_WORD
};
#define SHED_WORD(name) gcall_shed_words[GCALL_SHED_##name]

/* ---- the state machine (gcall.h) ------------------------------------------------------ */

void gcall_sm_init(gcall_sm *m, const gcall_steps *steps, const sl_call_opts *o, uint64_t seed) {
    memset(m, 0, sizeof(*m));
    m->steps = steps;
    m->o = o;
    m->state = m->after = SL_CALL_ACQUIRING;
    m->rng = seed;
}

int gcall_sm_go(gcall_sm *m, int state) {
    m->state = state;
    const gcall_step *s = &m->steps->step[state];
    return s->enter ? s->enter(m) : 0;
}

void gcall_sm_pause(gcall_sm *m, int64_t due, int then) {
    m->state = SL_CALL_BACKOFF;
    m->after = then;
    m->steps->sleep(m, due);
}

/* A step entered from a backoff ends the call itself when it cannot begin
 * (there is no one else to tell): what its enter returns is not used. */
void gcall_sm_wakeup(gcall_sm *m) {
    if (m->state == SL_CALL_BACKOFF) gcall_sm_go(m, m->after);
}

int gcall_sm_slot_left(const gcall_sm *m, int64_t now, int64_t *by, long long *left) {
    *by = -1;
    *left = -1;
    if (m->o->deadline_ms <= 0) return 0;
    *by = m->o->deadline_ms - m->o->min_attempt_ms;
    *left = *by > now ? *by - now : 0;
    return *by > now ? 0 : SL_EDEADLINE;
}

int gcall_sm_wait_fits(const gcall_sm *m, int64_t now, long long wait_ms) {
    return m->o->deadline_ms <= 0 || now + wait_ms + m->o->min_attempt_ms <= m->o->deadline_ms;
}

long long gcall_sm_attempt_ms(const gcall_sm *m, int64_t now) {
    long long limit = m->o->attempt_timeout_ms > 0 ? m->o->attempt_timeout_ms : -1;
    if (m->o->deadline_ms > 0) {
        long long left = m->o->deadline_ms - now - GCALL_DEADLINE_MARGIN_MS;
        if (left < 1) left = 1;
        if (limit < 0 || left < limit) limit = left;
    }
    return limit;
}

int gcall_sm_within(const gcall_sm *m, int64_t now) { return m->o->deadline_ms <= 0 || now <= m->o->deadline_ms; }

long long gcall_sm_failed(gcall_sm *m, const sl_verdict *v) {
    int64_t now = sl_now_ms();
    /* The attempt number is the retries so far: each allowed retry leads
     * to exactly one more attempt, or the call ends. */
    long long delay = sl_backoff_ms(m->o, m->retries, v, now, &m->rng);
    if (delay >= 0) {
        m->decided = now;
        m->delay = delay;
    }
    return delay;
}

int gcall_sm_attempt_end(gcall_sm *m, const sl_verdict *v, int may_retry) {
    if (m->steps->settle(m, v)) may_retry = 0;
    if (v->cls == SL_CLASS_OK) return 0;
    long long delay = gcall_sm_failed(m, v);
    if (delay < 0) return (int)delay;
    if (!may_retry) return SL_ECANCELED;
    int rc = gcall_sm_go(m, SL_CALL_ASKING);
    return rc ? rc : 1; /* enter's errors are SL_E*, negative */
}

void gcall_sm_allowed(gcall_sm *m) {
    m->retries++;
    gcall_sm_pause(m, m->decided + m->delay, SL_CALL_ACQUIRING);
}

void gcall_sm_stop(gcall_sm *m) {
    int state = m->state;
    if (state == SL_CALL_BACKOFF) m->steps->sleep(m, -1);
    else if (state >= 0 && state < SL_CALL_DONE && m->steps->step[state].stop) m->steps->step[state].stop(m);
    m->state = SL_CALL_DONE;
}

/* ---- sl_call's steps ---------------------------------------------------------------------- */

#define CALL_OF(m) ((sl_call *)(void *)((char *)(m)-offsetof(sl_call, sm)))

static int step_acquire(gcall_sm *m);
static int step_send(gcall_sm *m);
static int step_ask(gcall_sm *m);
static void stop_acquire(gcall_sm *m);
static void stop_send(gcall_sm *m);
static void call_sleep(gcall_sm *m, int64_t due);
static int call_settle(gcall_sm *m, const sl_verdict *v);

/* sl_call's row of each step. ASKING holds nothing: its answer is dropped
 * when it comes. */
static const gcall_steps call_steps = {
    .step =
        {
            [SL_CALL_ACQUIRING] = {step_acquire, stop_acquire},
            [SL_CALL_SENDING] = {step_send, stop_send},
            [SL_CALL_ASKING] = {step_ask, NULL},
        },
    .sleep = call_sleep,
    .settle = call_settle,
};

static void end(sl_call *call, int status, const char *outcome, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

void sl_call_http_init_size(sl_call_http *h, size_t size) {
    if (!h || size < sizeof(size_t)) return;
    memset(h, 0, size);
    h->size = size;
}

/* ---- ending ---------------------------------------------------------------------- */

/* Gives back what the call holds: an own easy handle is cleaned up, the
 * caller's gets libcurl's default callbacks back. */
static void gcall_release(sl_call *call) {
    if (call->easy) {
        if (call->own_easy) curl_easy_cleanup(call->easy);
        else curl_reset_easy(call->easy);
    }
    call->easy = NULL;
    curl_slist_free_all(call->hdrs);
    call->hdrs = NULL;
    free(call->body);
    call->body = NULL;
    sl_capture_free(call->cap);
    call->cap = NULL;
}

static void unlink_live(sl_call *call) {
    sl_caller *c = call->c;
    if (call->prev) call->prev->next = call->next;
    else if (c->live == call) c->live = call->next;
    if (call->next) call->next->prev = call->prev;
    call->prev = call->next = NULL;
    c->nlive--;
}

static void gcall_finish(sl_call *call) {
    sl_call_report *r = &call->rep;
    caller_unsleep(call->c, call); /* a backoff, or a deadline guard */
    int64_t now = sl_now_ms();
    r->elapsed_ms = now - call->t0;
    r->within_deadline = gcall_sm_within(&call->sm, now);
    r->retries = call->sm.retries;
    if (call->cap) r->body = curl_capture_take(call->cap, &r->body_len);
    unlink_live(call);
    gcall_release(call);
    call->sm.state = SL_CALL_DONE;
    caller_complete(call->c, call);
}

static void end(sl_call *call, int status, const char *outcome, const char *fmt, ...) {
    if (outcome) call->rep.outcome = outcome;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->rep.message, sizeof(call->rep.message), fmt, ap);
    va_end(ap);
    call->status = status;
    gcall_finish(call);
}

/* The grant of an attempt that will not happen goes back. */
static void give_back(sl_call *call) {
    if (!call->grant) return;
    sl_settle(call->grant, -1, SL_OUTCOME_CANCELLED, NULL, 0);
    call->grant = NULL;
}

/* SENDING's stop: aborts the transfer in flight and settles its grant:
 * failed (the estimate stays charged) once any byte of the request went
 * out, since the provider may have admitted and counted it; cancelled
 * (the slot goes back) when nothing did. call->sent_some says which. */
static void stop_send(gcall_sm *m) {
    sl_call *call = CALL_OF(m);
    sl_caller *c = call->c;
    if (!c->blocking) caller_abort_transfer(c, call);
    long sent = 0;
    curl_easy_getinfo(call->easy, CURLINFO_REQUEST_SIZE, &sent);
    if (call->grant) sl_settle(call->grant, -1, sent > 0 ? SL_OUTCOME_FAILED : SL_OUTCOME_CANCELLED, NULL, 0);
    call->grant = NULL;
    sl_capture_reset(call->cap); /* half a response is no body */
    call->sent_some = sent > 0;
}

/* ACQUIRING's stop: an acquire on its way is cancelled (0: its answer will
 * never come; else it is dropped, its grant given back, when it comes),
 * and a grant held (the prepare hook's) goes back. */
static void stop_acquire(gcall_sm *m) {
    sl_call *call = CALL_OF(m);
    if (call->acq_pending && sl_cancel(call->c->gov, call->acq) == 0) {
        call->acq_pending = 0;
        gcall_unref(call);
    }
    give_back(call);
}

/* ---- waiting --------------------------------------------------------------------- */

static void call_sleep(gcall_sm *m, int64_t due) {
    sl_call *call = CALL_OF(m);
    if (due < 0) caller_unsleep(call->c, call);
    else caller_sleep(call->c, call, due);
}

static void acquire_too_late(sl_call *call);
static void answer_too_late(sl_call *call);

/* The call's timer fired: the end of a backoff, or, while it waits for
 * the governor, its deadline guard. */
void gcall_wakeup(sl_call *call) {
    if (call->sm.state == SL_CALL_ACQUIRING) acquire_too_late(call);
    else if (call->sm.state == SL_CALL_ASKING) answer_too_late(call);
    else gcall_sm_wakeup(&call->sm);
}

/* The deadline, kept on the caller's loop whatever the governor's thread
 * does: an answer it is slow to give (an engine busy connecting on a
 * loaded machine) must not keep the call past it. The latest moment an
 * attempt can start is the deadline less min_attempt_ms. */
static void guard_deadline(sl_call *call) {
    int64_t by;
    long long left;
    gcall_sm_slot_left(&call->sm, sl_now_ms(), &by, &left);
    if (by >= 0) caller_sleep(call->c, call, by);
}

/* The governor could not answer (sluiced restarting, Redis gone with
 * fail-closed): worth asking again while unavailable_ms lasts. An error
 * returned by the call itself (sync) with SL_ECLOSING is our own governor
 * closing, which asking again cannot change. SL_ETIMEDOUT is the same
 * silence for the retry-budget question (call_timeout_ms), but the
 * deadline for an acquire. */
static int governor_away(sl_call *call, int status, int sync, int asking) {
    if (call->o.unavailable_ms <= 0) return 0;
    if (status != SL_EUNAVAIL && status != SL_EIO && status != SL_EPROTO && status != SL_EREDIS &&
        !(status == SL_ECLOSING && !sync) && !(status == SL_ETIMEDOUT && asking))
        return 0;
    int64_t now = sl_now_ms();
    if (!call->unavail_since) call->unavail_since = now;
    return now - call->unavail_since <= call->o.unavailable_ms;
}

/* ---- acquire ------------------------------------------------------------------------ */

/* The governor's thread: copy the answer, hand it over. */
static void on_acquired(void *arg, const sl_result *r) {
    sl_call *call = arg;
    gcall_ev *ev = &call->ev;
    ev->kind = GCALL_EV_ACQUIRED;
    ev->status = r->status;
    ev->grant = r->grant;
    snprintf(ev->reason, sizeof(ev->reason), "%s", r->shed_reason ? r->shed_reason : "");
    ev->retry_after_ms = r->retry_after_ms;
    snprintf(ev->msg, sizeof(ev->msg), "%s", r->message ? r->message : "");
    gcall_post(call);
}

static int prepare(sl_call *call);

static void handle_acquired(sl_call *call, int sync) {
    gcall_ev *ev = &call->ev;
    sl_call_opts *o = &call->o;
    sl_call_report *r = &call->rep;
    int st = ev->status;
    if (st == SL_OK) {
        call->unavail_since = 0;
        call->grant = ev->grant;
        ev->grant = NULL;
        r->waited_ms += sl_grant_waited_ms(call->grant);
        /* The deployment the attempt goes to (a group's member): its retry
         * budget is the one to ask, and the grant is gone after the settle. */
        snprintf(call->member, sizeof(call->member), "%s", sl_grant_deployment(call->grant));
        snprintf(r->deployment, sizeof(r->deployment), "%s", call->member);
        if (prepare(call) == 0) gcall_sm_go(&call->sm, SL_CALL_SENDING);
        return;
    }
    if (st == SL_ESHED) {
        call->unavail_since = 0;
        r->sheds++;
        r->retry_after_ms = ev->retry_after_ms;
        long long ra = ev->retry_after_ms;
        /* Out of quota lasts until the provider's reset, and too large
         * never fits: neither is worth waiting for. */
        if (o->retry_shed && strcmp(ev->reason, SHED_WORD(QUOTA)) != 0 &&
            strcmp(ev->reason, SHED_WORD(TOO_LARGE)) != 0) {
            if (ra < 0 && strcmp(ev->reason, SHED_WORD(BREAKER)) == 0) ra = GCALL_BREAKER_WAIT_MS;
            if (ra >= 0) {
                int64_t now = sl_now_ms();
                if (!gcall_sm_wait_fits(&call->sm, now, ra)) {
                    end(call, SL_EDEADLINE, "deadline", "%s", ev->msg);
                    return;
                }
                r->waited_ms += ra;
                gcall_sm_pause(&call->sm, now + ra, SL_CALL_ACQUIRING);
                return;
            }
        }
        snprintf(r->shed_reason, sizeof(r->shed_reason), "%s", ev->reason);
        end(call, SL_ESHED, "shed", "%s", ev->msg);
        return;
    }
    /* The acquire ran out of the call's time (its deadline is the call's
     * minus min_attempt_ms): for the call that is the deadline, as when the
     * backoff finds no time left. */
    if (st == SL_ETIMEDOUT && o->deadline_ms > 0) {
        end(call, SL_EDEADLINE, "deadline", "%s", ev->msg);
        return;
    }
    if (governor_away(call, st, sync, 0)) {
        gcall_sm_pause(&call->sm, sl_now_ms() + GCALL_UNAVAIL_PAUSE_MS, SL_CALL_ACQUIRING);
        return;
    }
    end(call, st, "error", "%s", ev->msg[0] ? ev->msg : sl_strerror(st));
}

static int step_acquire(gcall_sm *m) {
    sl_call *call = CALL_OF(m);
    sl_caller *c = call->c;
    sl_call_opts *o = &call->o;
    sl_request req;
    sl_request_init(&req);
    req.deployment = o->deployment;
    req.tokens = o->tokens;
    req.input_tokens = o->input_tokens;
    req.output_tokens = o->output_tokens;
    req.exact = o->exact;
    req.partial = o->partial;
    req.max_wait_ms = o->max_wait_ms;
    req.lane = o->lane;
    req.tenant = o->tenant;
    req.tag = o->tag;
    /* Leave an attempt's worth of time after the slot. */
    int64_t by;
    long long left;
    if (gcall_sm_slot_left(m, sl_now_ms(), &by, &left) != 0) {
        end(call, SL_EDEADLINE, "deadline", "'%s': less than min_attempt_ms (%lld) left before the deadline",
            o->deployment, o->min_attempt_ms);
        return 0;
    }
    if (by >= 0) req.deadline_ms = by;
    call->acq_pending = 1;
    gcall_ref(call); /* the answer's */
    int rc = sl_acquire_async(c->gov, &req, on_acquired, call, &call->acq);
    if (rc == 0) guard_deadline(call);
    if (rc != 0) {
        /* No answer will come: this is it. */
        call->acq_pending = 0;
        gcall_unref(call);
        gcall_ev *ev = &call->ev;
        ev->kind = GCALL_EV_ACQUIRED;
        ev->status = rc;
        ev->grant = NULL;
        ev->reason[0] = '\0';
        ev->retry_after_ms = -1;
        snprintf(ev->msg, sizeof(ev->msg), "%s", sl_errmsg(c->gov));
        handle_acquired(call, 1);
    }
    return 0;
}

/* ---- send ------------------------------------------------------------------------------ */

/* The prepare hook, on the grant, before SENDING (a cancel from it finds
 * the call still ACQUIRING: the slot goes back). 0: the attempt goes
 * ahead; else the call ended. */
static int prepare(sl_call *call) {
    if (!call->prepare) return 0;
    call->in_hook = 1;
    int rc = call->prepare(call->arg, call, call->grant, call->easy);
    call->in_hook = 0;
    if (call->sm.state == SL_CALL_DONE) return SL_ECANCELED; /* cancelled from the hook */
    if (rc != 0) {
        give_back(call);
        end(call, rc, "error", "'%s': the prepare hook refused the attempt: %s", call->o.deployment, sl_strerror(rc));
    }
    return rc;
}

static int step_send(gcall_sm *m) {
    sl_call *call = CALL_OF(m);
    sl_caller *c = call->c;
    sl_call_opts *o = &call->o;
    sl_capture_attach(call->cap, call->easy);
    long long limit = gcall_sm_attempt_ms(m, sl_now_ms());
    if (limit >= 0) curl_easy_setopt(call->easy, CURLOPT_TIMEOUT_MS, (long)limit);
    if (c->blocking) {
        CURLcode cc = curl_easy_perform(call->easy);
        gcall_transfer_done(call, (int)cc);
        return 0;
    }
    int rc = caller_add_transfer(c, call);
    if (rc != 0) {
        give_back(call);
        end(call, rc, "error", "'%s': libcurl refused the transfer (is the easy handle in use elsewhere?)",
            o->deployment);
    }
    return 0;
}

/* The settle of an attempt (gcall_sm_attempt_end): the grant with the
 * verdict, the usage and the headers; the report; the attempted hook.
 * Nonzero when the hook cancelled the call (sl_call_cancel from it: the
 * call ends SL_ECANCELED rather than try again). */
static int call_settle(gcall_sm *m, const sl_verdict *v) {
    sl_call *call = CALL_OF(m);
    sl_call_report *r = &call->rep;
    curl_settle_verdict(call->grant, v, call->cap, call->o.settle_headers);
    call->grant = NULL;
    r->http_status = v->http_status;
    r->curl_code = call->cc;
    r->cls = v->cls;
    r->outcome = sl_class_name(v->cls);
    snprintf(r->code, sizeof(r->code), "%s", v->code);
    if (v->http_status == 429) r->status_429++;
    if (v->pause_ms >= 0) r->retry_after_ms = v->pause_ms;
    if (call->attempted) {
        call->in_hook = 1;
        call->attempted(call->arg, call, v, call->cc);
        call->in_hook = 0;
    }
    return call->stop_after_send;
}

void gcall_transfer_done(sl_call *call, int cc) {
    sl_call_opts *o = &call->o;
    sl_call_report *r = &call->rep;
    r->attempts++;
    call->cc = cc;
    sl_verdict v;
    sl_verdict_init(&v);
    sl_capture_verdict(call->cap, cc, o->retry_after_cap_ms, &v);
    /* Settled, then retried only when the class, the deadline and the
     * fleet allow (and the body fitted, and no cancel waits). */
    int overflow = sl_capture_overflow(call->cap);
    int rc = gcall_sm_attempt_end(&call->sm, &v, !overflow && !call->stop_after_send);
    if (rc == 1) return; /* ASKING */
    if (overflow) {
        end(call, SL_ETOOBIG, NULL, "'%s': the response is larger than max_body (%zu bytes)", o->deployment,
            o->max_body);
        return;
    }
    if (rc == 0) {
        r->tokens = v.tokens;
        r->input_tokens = v.input_tokens;
        r->output_tokens = v.output_tokens;
        r->cache_read_tokens = v.cache_read_tokens;
        end(call, 0, NULL, "%s", "");
        return;
    }
    if (rc == SL_ECANCELED) {
        end(call, SL_ECANCELED, "cancelled", "'%s': %s (HTTP %d); cancelled before the retry", o->deployment,
            sl_class_name(v.cls), v.http_status);
        return;
    }
    const char *what = cc != CURLE_OK ? curl_easy_strerror((CURLcode)cc) : "";
    end(call, rc,
        rc == SL_EDEADLINE   ? "deadline"
        : rc == SL_EATTEMPTS ? "attempts"
                             : NULL,
        "'%s': %s (HTTP %d%s%s%s%s); %s", o->deployment, sl_class_name(v.cls), v.http_status, v.code[0] ? ", " : "",
        v.code, *what ? ", " : "", what,
        rc == SL_EFATAL      ? "not retryable"
        : rc == SL_EATTEMPTS ? "no attempts left"
        : v.over_cap         ? "the server's wait is beyond retry_after_cap_ms"
                             : "no time left before the deadline for another attempt");
}

/* ---- the fleet's retry budget ---------------------------------------------------------- */

static void on_retry_answer(void *arg, int status, long long retry_after_ms) {
    sl_call *call = arg;
    gcall_ev *ev = &call->ev;
    ev->kind = GCALL_EV_RETRY;
    ev->status = status;
    ev->grant = NULL;
    ev->reason[0] = '\0';
    ev->retry_after_ms = retry_after_ms;
    ev->msg[0] = '\0';
    gcall_post(call);
}

static void handle_retry(sl_call *call, int sync) {
    gcall_ev *ev = &call->ev;
    sl_call_report *r = &call->rep;
    const char *dep = call->o.deployment, *cls = sl_class_name(r->cls);
    if (ev->status == 1) {
        call->unavail_since = 0;
        gcall_sm_allowed(&call->sm);
        return;
    }
    if (ev->status == 0) {
        call->unavail_since = 0;
        r->retry_after_ms = ev->retry_after_ms;
        end(call, SL_ENORETRY, "retry_budget", "'%s': %s (HTTP %d) and the fleet's retry budget is spent", dep, cls,
            r->http_status);
        return;
    }
    if (governor_away(call, ev->status, sync, 1)) {
        gcall_sm_pause(&call->sm, sl_now_ms() + GCALL_UNAVAIL_PAUSE_MS, SL_CALL_ASKING);
        return;
    }
    end(call, ev->status, "error", "'%s': %s (HTTP %d) and %s", dep, cls, r->http_status,
        ev->msg[0] ? ev->msg : sl_strerror(ev->status));
}

static int step_ask(gcall_sm *m) {
    sl_call *call = CALL_OF(m);
    sl_caller *c = call->c;
    call->ask_pending = 1;
    gcall_ref(call); /* the answer's */
    int rc = sl_may_retry_async(c->gov, call->member, on_retry_answer, call);
    if (rc == 0) guard_deadline(call);
    if (rc != 0) {
        call->ask_pending = 0;
        gcall_unref(call);
        gcall_ev *ev = &call->ev;
        ev->kind = GCALL_EV_RETRY;
        ev->status = rc;
        ev->retry_after_ms = -1;
        snprintf(ev->msg, sizeof(ev->msg), "%s", sl_errmsg(c->gov));
        handle_retry(call, 1);
    }
    return 0;
}

void gcall_answer(sl_call *call) {
    gcall_ev *ev = &call->ev;
    if (ev->kind == GCALL_EV_ACQUIRED) call->acq_pending = 0;
    else call->ask_pending = 0;
    if (call->sm.state != SL_CALL_DONE) caller_unsleep(call->c, call); /* the deadline guard */
    if (call->sm.state == SL_CALL_DONE) {
        /* Cancelled while the answer was on its way: a slot goes back. */
        if (ev->kind == GCALL_EV_ACQUIRED && ev->grant) sl_settle(ev->grant, -1, SL_OUTCOME_CANCELLED, NULL, 0);
        ev->grant = NULL;
    } else if (ev->kind == GCALL_EV_ACQUIRED) {
        handle_acquired(call, 0);
    } else {
        handle_retry(call, 0);
    }
    gcall_unref(call); /* the answer's; the owner's is still held */
}

/* The deadline passed before the slot: the acquire is cancelled (its
 * reservation goes back, also when the answer is on its way). */
static void acquire_too_late(sl_call *call) {
    gcall_sm_stop(&call->sm);
    end(call, SL_EDEADLINE, "deadline", "'%s': the deadline passed before the slot (reservation given back)",
        call->o.deployment);
}

/* The deadline left no time for an attempt before the retry budget
 * answered; the answer is dropped when it comes. */
static void answer_too_late(sl_call *call) {
    end(call, SL_EDEADLINE, "deadline", "'%s': %s (HTTP %d); no answer from the fleet's retry budget in time",
        call->o.deployment, sl_class_name(call->rep.cls), call->rep.http_status);
}

/* ---- start, cancel, state ------------------------------------------------------------------ */

void gcall_free(sl_call *call) {
    sl_caller *c = call->c;
    free(call->dep);
    free(call->lane);
    free(call->tenant);
    free(call->tag);
    free(call->rep.body);
    free(call);
    caller_unref(c);
}

/* NULL stays NULL; else a copy, or -1 in *bad when out of memory. */
static char *dup_opt(const char *s, int *bad) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *bad = 1;
    return d;
}

/* An easy handle of the call's own, for a request given as url, headers
 * and body. */
static int own_easy(sl_call *call, const sl_call_http *h) {
    CURL *e = curl_easy_init();
    if (!e) return SL_ENOMEM;
    call->easy = e;
    call->own_easy = 1;
    /* The list lives in call->hdrs from its first line on, so that
     * gcall_release frees a half-built one too. */
    for (size_t i = 0; i < h->nheaders; i++) {
        if (!h->headers[i].name || !h->headers[i].value) continue;
        size_t n = strlen(h->headers[i].name) + strlen(h->headers[i].value) + 3;
        char *line = malloc(n);
        if (!line) return SL_ENOMEM;
        snprintf(line, n, "%s: %s", h->headers[i].name, h->headers[i].value);
        struct curl_slist *t = curl_slist_append(call->hdrs, line);
        free(line);
        if (!t) return SL_ENOMEM;
        call->hdrs = t;
    }
    /* libcurl's 100-continue handshake costs a round trip (or a second
     * against servers that ignore it) on bodies over 1 KiB. */
    struct curl_slist *t = curl_slist_append(call->hdrs, "Expect:");
    if (!t) return SL_ENOMEM;
    call->hdrs = t;
    if (curl_easy_setopt(e, CURLOPT_URL, h->url) != CURLE_OK) return SL_EINVAL;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->hdrs);
    if (h->body) {
        call->body = malloc(h->body_len + 1);
        if (!call->body) return SL_ENOMEM;
        memcpy(call->body, h->body, h->body_len);
        call->body[h->body_len] = '\0';
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)h->body_len);
    }
    return 0;
}

int sl_call_start(sl_caller *c, const sl_call_opts *opts, const sl_call_http *http_in, sl_call_cb cb, void *arg,
                  sl_call **out) {
    if (out) *out = NULL;
    if (!c || !opts || opts->size < sizeof(size_t) || !opts->deployment || !http_in || http_in->size < sizeof(size_t) ||
        !cb || !c->attached)
        return SL_EINVAL;
    if (c->free_pending) return SL_ECLOSING;
    sl_call_http h;
    sl_call_http_init(&h);
    verdict_read(&h, sizeof(h), http_in);
    if ((!h.easy && !h.url) || (h.nheaders && !h.headers) || (h.body_len && !h.body)) return SL_EINVAL;
    if (caller_reserve(c) != 0) return SL_ENOMEM;
    sl_call *call = calloc(1, sizeof(*call));
    if (!call) return SL_ENOMEM;
    call->c = c;
    caller_ref(c);
    call->refs = 1; /* the owner's, until the completion is delivered */
    call->heap_i = GCALL_NOT_QUEUED;
    verdict_opts(&call->o, opts);
    int bad = 0;
    call->dep = dup_opt(call->o.deployment, &bad);
    call->lane = dup_opt(call->o.lane, &bad);
    call->tenant = dup_opt(call->o.tenant, &bad);
    call->tag = dup_opt(call->o.tag, &bad);
    call->o.deployment = call->dep;
    call->o.lane = call->lane;
    call->o.tenant = call->tenant;
    call->o.tag = call->tag;
    call->cb = cb;
    call->arg = arg;
    call->prepare = h.prepare;
    call->attempted = h.attempted;
    sl_call_report *r = &call->rep;
    sl_call_report_init(r);
    r->tokens = r->input_tokens = r->output_tokens = r->cache_read_tokens = -1;
    r->retry_after_ms = -1;
    r->cls = -1;
    r->outcome = "error";
    call->t0 = sl_now_ms();
    gcall_sm_init(&call->sm, &call_steps, &call->o,
                  call->o.seed ? call->o.seed : (uint64_t)call->t0 * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)call);
    int rc = bad ? SL_ENOMEM : sl_capture_new(call->o.max_body, &call->cap);
    if (rc == 0) {
        if (h.easy) call->easy = h.easy;
        else rc = own_easy(call, &h);
    }
    if (rc != 0) {
        if (!call->own_easy) call->easy = NULL; /* the caller's stays untouched */
        gcall_release(call);
        gcall_free(call);
        return rc;
    }
    curl_easy_setopt(call->easy, CURLOPT_NOSIGNAL, 1L);
    call->next = c->live;
    if (c->live) c->live->prev = call;
    c->live = call;
    c->nlive++;
    if (out) *out = call;
    gcall_sm_go(&call->sm, SL_CALL_ACQUIRING);
    return 0;
}

void gcall_discard(sl_call *call) {
    gcall_sm_stop(&call->sm);
    caller_unsleep(call->c, call); /* a deadline guard */
    give_back(call);
    unlink_live(call);
    gcall_release(call);
    gcall_unref(call); /* the owner's: no completion */
}

int sl_call_cancel(sl_call *call, int mode) {
    if (!call || (mode != SL_CANCEL_NOW && mode != SL_CANCEL_AFTER_SEND)) return SL_EINVAL;
    int state = call->sm.state;
    if (state == SL_CALL_DONE) return SL_EALREADY;
    /* From the attempted hook the transfer is over: the same as letting it
     * finish. */
    if (state == SL_CALL_SENDING && (mode == SL_CANCEL_AFTER_SEND || call->in_hook)) {
        call->stop_after_send = 1;
        return 0;
    }
    const char *where = state == SL_CALL_ACQUIRING
                            ? (call->acq_pending ? "while waiting for a slot (the reservation went back)"
                                                 : "before sending (the slot went back)") /* the prepare hook */
                        : state == SL_CALL_ASKING ? "while asking the fleet's retry budget"
                                                  : "while waiting for the next attempt";
    gcall_sm_stop(&call->sm);
    if (state == SL_CALL_SENDING && call->sent_some) {
        call->rep.attempts++;
        where = "mid-send (aborted; settled as failed: the provider may have counted it)";
    } else if (state == SL_CALL_SENDING) {
        where = "before the request went out (aborted; the slot went back)";
    }
    call->rep.outcome = "cancelled";
    snprintf(call->rep.message, sizeof(call->rep.message), "'%s': cancelled %s", call->o.deployment, where);
    call->status = SL_ECANCELED;
    gcall_finish(call);
    return 0;
}

int sl_call_state(const sl_call *call) { return call ? call->sm.state : SL_EINVAL; }
