/* caller: an sl_caller, the part of the governed call that meets the event
 * loop. See gcall.h for the split with gcall.c. Its transfers run on the
 * libcurl multi driver (curlm.h): the sockets libcurl names are passed on
 * to sl_loop.watch, and libcurl's timeout and every call's own waits
 * share the loop's one timer through a binary heap, so an adapter
 * provides a single timer whatever the number of calls. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "gcall.h"
#include "verdict.h"

void sl_loop_init_size(sl_loop *l, size_t size) {
    if (!l || size < sizeof(size_t)) return;
    memset(l, 0, size);
    l->size = size;
}

/* ---- references -------------------------------------------------------------- */

void caller_ref(sl_caller *c) {
    pthread_mutex_lock(&c->mu);
    c->refs++;
    pthread_mutex_unlock(&c->mu);
}

void caller_unref(sl_caller *c) {
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left) return;
    pthread_mutex_destroy(&c->mu);
    free(c->heap);
    free(c);
}

void gcall_ref(sl_call *call) {
    pthread_mutex_lock(&call->c->mu);
    call->refs++;
    pthread_mutex_unlock(&call->c->mu);
}

void gcall_unref(sl_call *call) {
    sl_caller *c = call->c;
    pthread_mutex_lock(&c->mu);
    int left = --call->refs;
    pthread_mutex_unlock(&c->mu);
    if (!left) gcall_free(call);
}

/* ---- the timer -------------------------------------------------------------------- */

/* Arms the loop's timer for the earliest of libcurl's timeout and the
 * heap's top, when that changed. */
static void caller_rearm(sl_caller *c) {
    if (!c->attached || c->free_pending) return;
    int64_t due = c->curl_due;
    if (c->nheap && (due < 0 || c->heap[0]->due < due)) due = c->heap[0]->due;
    if (due == c->armed_due) return;
    c->armed_due = due;
    long long ms = -1;
    if (due >= 0) {
        int64_t now = sl_now_ms();
        ms = due > now ? (long long)(due - now) : 0;
    }
    c->loop.timer(c->loop.data, ms);
}

static void heap_set(sl_caller *c, size_t i, sl_call *call) {
    c->heap[i] = call;
    call->heap_i = i;
}

static void heap_up(sl_caller *c, size_t i) {
    sl_call *x = c->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c->heap[p]->due <= x->due) break;
        heap_set(c, i, c->heap[p]);
        i = p;
    }
    heap_set(c, i, x);
}

static void heap_down(sl_caller *c, size_t i) {
    sl_call *x = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        int64_t best = x->due;
        if (l < c->nheap && c->heap[l]->due < best) m = l, best = c->heap[l]->due;
        if (l + 1 < c->nheap && c->heap[l + 1]->due < best) m = l + 1;
        if (m == i) break;
        heap_set(c, i, c->heap[m]);
        i = m;
    }
    heap_set(c, i, x);
}

static void heap_remove(sl_caller *c, sl_call *call) {
    size_t i = call->heap_i;
    if (i == GCALL_NOT_QUEUED) return;
    call->heap_i = GCALL_NOT_QUEUED;
    sl_call *last = c->heap[--c->nheap];
    if (i == c->nheap) return;
    heap_set(c, i, last);
    heap_up(c, i);
    heap_down(c, last->heap_i);
}

/* The heap holds at most one entry per live call: sl_call_start makes room
 * for its call up front, so a wait never fails for memory. */
int caller_reserve(sl_caller *c) {
    if (c->nlive + 1 <= c->heapcap) return 0;
    size_t cap = c->heapcap ? c->heapcap * 2 : 16;
    sl_call **h = realloc(c->heap, cap * sizeof(*h));
    if (!h) return SL_ENOMEM;
    c->heap = h;
    c->heapcap = cap;
    return 0;
}

void caller_sleep(sl_caller *c, sl_call *call, int64_t due) {
    heap_remove(c, call);
    call->due = due;
    heap_set(c, c->nheap++, call);
    heap_up(c, call->heap_i);
    caller_rearm(c);
}

void caller_unsleep(sl_caller *c, sl_call *call) {
    heap_remove(c, call);
    caller_rearm(c);
}

/* ---- libcurl multi --------------------------------------------------------------- */

/* The multi driver's loop: its sockets are the adapter's (sl_loop.watch),
 * its timeout shares the loop's one timer with the heap. */
static int caller_watch(void *data, int fd, int events, void **sock) {
    sl_caller *c = data;
    return c->loop.watch(c->loop.data, fd, events, sock);
}

static void caller_curl_timer(void *data, long long ms) {
    sl_caller *c = data;
    c->curl_due = ms < 0 ? -1 : sl_now_ms() + ms;
    caller_rearm(c);
}

/* A transfer ended, outside libcurl's callbacks (so the call may start the
 * next one from here); none is delivered once the caller is being freed. */
static void caller_transfer_done(void *arg, CURLcode cc) {
    sl_call *call = arg;
    if (call->c->free_pending) return;
    gcall_transfer_done(call, (int)cc);
}

int caller_add_transfer(sl_caller *c, sl_call *call) {
    return curlm_add(c->multi, &call->xfer, call->easy, caller_transfer_done, call);
}

void caller_abort_transfer(sl_caller *c, sl_call *call) {
    (void)c;
    curlm_remove(&call->xfer);
}

/* ---- the caller -------------------------------------------------------------------- */

int caller_create(sl_gov *gov, int blocking, sl_caller **out) {
    *out = NULL;
    sl_caller *c = calloc(1, sizeof(*c));
    if (!c) return SL_ENOMEM;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return SL_ENOMEM;
    }
    c->gov = gov;
    c->refs = 1;
    c->blocking = blocking;
    c->curl_due = c->armed_due = -1;
    if (!blocking) {
        curlm_io io = {c, caller_watch, caller_curl_timer, NULL};
        if (curlm_new(&io, &c->multi) != 0) {
            pthread_mutex_destroy(&c->mu);
            free(c);
            return SL_ENOMEM;
        }
    }
    *out = c;
    return 0;
}

int sl_caller_new(sl_gov *gov, sl_caller **out) {
    if (out) *out = NULL;
    if (!gov || !out) return SL_EINVAL;
    return caller_create(gov, 0, out);
}

int sl_caller_attach(sl_caller *c, const sl_loop *l) {
    if (!c || !l || l->size < sizeof(size_t) || c->attached || c->free_pending) return SL_EINVAL;
    sl_loop full;
    sl_loop_init(&full);
    verdict_read(&full, sizeof(full), l);
    if (!full.watch || !full.timer || !full.wake) return SL_EINVAL;
    c->loop = full;
    c->attached = 1;
    return 0;
}

/* Asks the loop for a dispatch (completions queued outside one). */
static void caller_wake_self(sl_caller *c) {
    pthread_mutex_lock(&c->mu);
    if (!c->closed && c->attached) c->loop.wake(c->loop.data);
    pthread_mutex_unlock(&c->mu);
}

void caller_complete(sl_caller *c, sl_call *call) {
    call->donenext = NULL;
    if (c->done_tail) c->done_tail->donenext = call;
    else c->done = call;
    c->done_tail = call;
    if (c->depth == 0) caller_wake_self(c);
}

/* An answer for a caller being freed: its grant goes back. */
static void drop_answer(sl_call *call) {
    if (call->ev.kind == GCALL_EV_ACQUIRED && call->ev.grant) {
        sl_settle(call->ev.grant, -1, SL_OUTCOME_CANCELLED, NULL, 0);
        call->ev.grant = NULL;
    }
    gcall_unref(call);
}

void gcall_post(sl_call *call) {
    sl_caller *c = call->c;
    pthread_mutex_lock(&c->mu);
    if (c->closed) {
        pthread_mutex_unlock(&c->mu);
        drop_answer(call);
        return;
    }
    call->evnext = NULL;
    if (c->events_tail) c->events_tail->evnext = call;
    else c->events = call;
    c->events_tail = call;
    /* Under the mutex: sl_caller_free sets closed under it before the
     * loop's close, so no wake-up reaches a closed loop. */
    c->loop.wake(c->loop.data);
    pthread_mutex_unlock(&c->mu);
}

static sl_call *take_events(sl_caller *c) {
    pthread_mutex_lock(&c->mu);
    sl_call *list = c->events;
    c->events = c->events_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    return list;
}

/* Everything sl_caller_free does, once no dispatch is in progress. */
static void caller_do_free(sl_caller *c) {
    for (sl_call *call = take_events(c), *next; call; call = next) {
        next = call->evnext;
        drop_answer(call);
    }
    while (c->live) gcall_discard(c->live);
    while (c->done) {
        sl_call *call = c->done;
        c->done = call->donenext;
        gcall_unref(call);
    }
    c->done_tail = NULL;
    curlm_free(c->multi);
    c->multi = NULL;
    if (c->attached && c->loop.close) c->loop.close(c->loop.data);
    caller_unref(c);
}

void sl_caller_free(sl_caller *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    int again = c->closed;
    c->closed = 1;
    pthread_mutex_unlock(&c->mu);
    if (again) return;
    c->free_pending = 1;
    if (c->depth == 0) caller_do_free(c);
}

void caller_enter(sl_caller *c) {
    caller_ref(c);
    c->depth++;
}

/* Delivers the completions (each callback may start or cancel calls, or
 * free the caller), then finishes a free asked for meanwhile. */
void caller_leave(sl_caller *c) {
    while (c->done && !c->free_pending) {
        sl_call *call = c->done;
        c->done = call->donenext;
        if (!c->done) c->done_tail = NULL;
        call->cb(call->arg, call, call->status, &call->rep);
        gcall_unref(call);
    }
    if (--c->depth == 0 && c->free_pending) caller_do_free(c);
    else caller_rearm(c);
    caller_unref(c);
}

void sl_caller_io(sl_caller *c, int fd, int events) {
    if (!c || !c->multi) return;
    caller_enter(c);
    if (!c->free_pending) curlm_socket(c->multi, fd, events);
    caller_leave(c);
}

void sl_caller_timer(sl_caller *c) {
    if (!c) return;
    caller_enter(c);
    c->armed_due = -1; /* one-shot: it fired */
    int64_t now = sl_now_ms();
    if (!c->free_pending && c->multi && c->curl_due >= 0 && c->curl_due <= now) {
        c->curl_due = -1;
        curlm_timeout(c->multi);
    }
    /* The calls due by now. Each step then waits for an answer or a later
     * time (a 0 ms wait is due again at once, and its step is an acquire
     * or a question that answers later), so this ends. */
    while (!c->free_pending && c->nheap && c->heap[0]->due <= now) {
        sl_call *call = c->heap[0];
        heap_remove(c, call);
        gcall_wakeup(call);
    }
    caller_leave(c);
}

void sl_caller_wake(sl_caller *c) {
    if (!c) return;
    caller_enter(c);
    for (sl_call *call = take_events(c), *next; call; call = next) {
        next = call->evnext;
        if (c->free_pending) drop_answer(call);
        else gcall_answer(call);
    }
    caller_leave(c);
}
