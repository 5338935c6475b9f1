/* uvsim: libuv on virtual time (see uvsim.h). Handles keep their state in
 * a record of ours (hrec), found through the handle's private
 * handle_queue[0]; a loop's record (lrec) hangs on its internal_fields.
 * Nothing of the real libuv runs, so its private fields are ours.
 *
 * Timers live in a list of their own and a heap per loop ordered by (due,
 * start sequence), the order libuv runs them in, so a turn costs the loop's
 * other handles and the timers due, not every pending timer (an engine has
 * one per waiting call: tens of thousands in `sluice sim`). The heap is
 * lazy: a stop or restart leaves the old entry, skipped when it comes to
 * the top; a closed timer's record lives until its last entry leaves. */
#define _GNU_SOURCE
#include "uvsim.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum hkind { K_TIMER, K_IDLE, K_CHECK, K_POLL } hkind;

typedef struct lrec lrec;
typedef struct hrec {
    uv_handle_t *h;
    lrec *L;
    hkind kind;
    int active, closing;
    uint64_t due_ms, repeat_ms, seq; /* timers */
    uv_timer_cb tcb;
    uv_idle_cb icb;
    uv_check_cb ccb;
    uv_poll_cb pcb;
    int fd, events, wake; /* polls */
    uv_close_cb close_cb;
    struct hrec *prev, *next, *next_closing;
    int inheap, dead; /* timers: entries in the heap; closed, freed when inheap is 0 */
} hrec;

typedef struct tm_ev {
    uint64_t due_ms, seq;
    hrec *r;
} tm_ev;

struct lrec {
    uv_loop_t *loop;
    uint64_t time_ms, timer_seq, frozen_until;
    int64_t skew_ms;
    hrec *head, *tail, *closing;
    hrec *thead, *ttail; /* timers, apart: the phases never walk them */
    tm_ev *theap;
    size_t ntheap, captheap;
    int nhandles;
    lrec *next;
};

typedef struct at_ev {
    uint64_t t, seq;
    uvsim_fn fn;
    void *arg;
} at_ev;

static struct {
    uint64_t now_us, seed, clock_calls, at_seq, turns, tie;
    int64_t skew_ms;
    lrec *loops;
    at_ev *heap;
    size_t nheap, capheap;
    const uvsim_io *io;
    void *io_ud;
} S;

#define NEVER UINT64_MAX

static void handle_unlink(hrec *r);

/* ---- the clock and scheduled functions -------------------------------------------- */

void uvsim_reset(uint64_t start_us, uint64_t seed) {
    S.now_us = start_us;
    S.seed = seed;
    S.tie = seed;
    S.clock_calls = 0;
    S.turns = 0;
    S.nheap = 0;
}

uint64_t uvsim_now_us(void) { return S.now_us; }
uint64_t uvsim_turns(void) { return S.turns; }

int uvsim_clock_gettime(clockid_t id, struct timespec *ts) {
    (void)id;
    uint64_t sub = (S.seed + S.clock_calls++) % 1000;
    ts->tv_sec = (time_t)(S.now_us / 1000000);
    ts->tv_nsec = (long)((S.now_us % 1000000) * 1000 + sub);
    return 0;
}

pid_t uvsim_getpid(void) { return 4242; }

static int at_less(const at_ev *a, const at_ev *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

int uvsim_at(uint64_t t_us, uvsim_fn fn, void *arg) {
    if (S.nheap == S.capheap) {
        size_t cap = S.capheap ? 2 * S.capheap : 256;
        at_ev *h = realloc(S.heap, cap * sizeof(*h));
        if (!h) return -1;
        S.heap = h;
        S.capheap = cap;
    }
    at_ev e = {t_us < S.now_us ? S.now_us : t_us, S.at_seq++, fn, arg};
    size_t i = S.nheap++;
    while (i > 0 && at_less(&e, &S.heap[(i - 1) / 2])) {
        S.heap[i] = S.heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S.heap[i] = e;
    return 0;
}

static at_ev at_pop(void) {
    at_ev top = S.heap[0], last = S.heap[--S.nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= S.nheap) break;
        if (c + 1 < S.nheap && at_less(&S.heap[c + 1], &S.heap[c])) c++;
        if (!at_less(&S.heap[c], &last)) break;
        S.heap[i] = S.heap[c];
        i = c;
    }
    if (S.nheap) S.heap[i] = last;
    return top;
}

void uvsim_set_timer_skew_ms(int64_t skew_ms) { S.skew_ms = skew_ms; }

void uvsim_drop_scheduled(void) { S.nheap = 0; }

void uvsim_set_io(const uvsim_io *io, void *ud) {
    S.io = io;
    S.io_ud = ud;
}

/* ---- loops and handles --------------------------------------------------------------- */

static lrec *L_of(const uv_loop_t *loop) { return loop->internal_fields; }
static hrec *R_of(const uv_handle_t *h) { return h->handle_queue[0]; }

/* The most loops at once: uvsim_run_until shuffles the due ones in an
 * array of this size. */
#define UVSIM_MAX_LOOPS 64

int uv_loop_init(uv_loop_t *loop) {
    memset(loop, 0, sizeof(*loop));
    size_t n = 0;
    for (lrec *l = S.loops; l; l = l->next) n++;
    if (n >= UVSIM_MAX_LOOPS) return UV_EINVAL;
    lrec *L = calloc(1, sizeof(*L));
    if (!L) return UV_ENOMEM;
    L->loop = loop;
    L->time_ms = S.now_us / 1000;
    loop->internal_fields = L;
    lrec **p = &S.loops;
    while (*p) p = &(*p)->next;
    *p = L;
    return 0;
}

static void heap_drain(lrec *L);

int uv_loop_close(uv_loop_t *loop) {
    lrec *L = L_of(loop);
    if (!L) return 0;
    if (L->nhandles > 0) return UV_EBUSY;
    heap_drain(L);
    free(L->theap);
    for (lrec **p = &S.loops; *p; p = &(*p)->next)
        if (*p == L) {
            *p = L->next;
            break;
        }
    free(L);
    loop->internal_fields = NULL;
    return 0;
}

void uvsim_loop_discard(uv_loop_t *loop) {
    lrec *L = L_of(loop);
    if (!L) return;
    heap_drain(L);
    while (L->head || L->thead) {
        hrec *r = L->head ? L->head : L->thead;
        handle_unlink(r);
        r->h->handle_queue[0] = NULL;
        free(r);
    }
    L->closing = NULL;
    uv_loop_close(loop);
}

int uvsim_loop_handles(uv_loop_t *loop) { return L_of(loop)->nhandles; }

void uvsim_loop_timer_skew_ms(uv_loop_t *loop, int64_t skew_ms) { L_of(loop)->skew_ms = skew_ms; }

void uvsim_loop_freeze(uv_loop_t *loop, uint64_t until_us) { L_of(loop)->frozen_until = until_us; }

static hrec *handle_add(uv_loop_t *loop, uv_handle_t *h, uv_handle_type type, hkind kind) {
    lrec *L = L_of(loop);
    hrec *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    void *data = h->data;
    memset(h, 0, sizeof(*h));
    h->data = data;
    h->loop = loop;
    h->type = type;
    h->handle_queue[0] = r;
    r->h = h;
    r->L = L;
    r->kind = kind;
    r->fd = -1;
    hrec **head = kind == K_TIMER ? &L->thead : &L->head, **tail = kind == K_TIMER ? &L->ttail : &L->tail;
    r->prev = *tail;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
    L->nhandles++;
    return r;
}

static void handle_unlink(hrec *r) {
    lrec *L = r->L;
    hrec **head = r->kind == K_TIMER ? &L->thead : &L->head, **tail = r->kind == K_TIMER ? &L->ttail : &L->tail;
    if (r->prev) r->prev->next = r->next;
    else *head = r->next;
    if (r->next) r->next->prev = r->prev;
    else *tail = r->prev;
    L->nhandles--;
}

/* A closed handle's record: freed now, or (a timer with heap entries)
 * when its last entry leaves the heap. */
static void hrec_release(hrec *r) {
    if (r->inheap > 0) r->dead = 1;
    else free(r);
}

/* ---- the timer heap ------------------------------------------------------------------ */

static int tm_less(const tm_ev *a, const tm_ev *b) {
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static int heap_push(lrec *L, hrec *r) {
    if (L->ntheap == L->captheap) {
        size_t cap = L->captheap ? 2 * L->captheap : 64;
        tm_ev *h = realloc(L->theap, cap * sizeof(*h));
        if (!h) return -1;
        L->theap = h;
        L->captheap = cap;
    }
    tm_ev e = {r->due_ms, r->seq, r};
    size_t i = L->ntheap++;
    while (i > 0 && tm_less(&e, &L->theap[(i - 1) / 2])) {
        L->theap[i] = L->theap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    L->theap[i] = e;
    r->inheap++;
    return 0;
}

/* Removes the top entry and lets go of its record. */
static void heap_pop(lrec *L) {
    hrec *r = L->theap[0].r;
    tm_ev last = L->theap[--L->ntheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= L->ntheap) break;
        if (c + 1 < L->ntheap && tm_less(&L->theap[c + 1], &L->theap[c])) c++;
        if (!tm_less(&L->theap[c], &last)) break;
        L->theap[i] = L->theap[c];
        i = c;
    }
    if (L->ntheap) L->theap[i] = last;
    if (--r->inheap == 0 && r->dead) free(r);
}

/* The timer due first (an entry that is still the timer's current start),
 * after dropping stale entries; NULL when none is pending. */
static hrec *heap_top(lrec *L) {
    while (L->ntheap) {
        const tm_ev *e = &L->theap[0];
        const hrec *r = e->r;
        if (!r->dead && r->active && !r->closing && r->seq == e->seq && r->due_ms == e->due_ms) return e->r;
        heap_pop(L);
    }
    return NULL;
}

/* Empties the heap (a loop closed or discarded). */
static void heap_drain(lrec *L) {
    while (L->ntheap) heap_pop(L);
}

uint64_t uv_now(const uv_loop_t *loop) { return L_of(loop)->time_ms; }
uint64_t uv_hrtime(void) { return S.now_us * 1000; }

int uv_is_active(const uv_handle_t *h) {
    hrec *r = R_of(h);
    return r && r->active && !r->closing;
}

int uv_is_closing(const uv_handle_t *h) {
    hrec *r = R_of(h);
    return r && r->closing;
}

void uv_close(uv_handle_t *h, uv_close_cb cb) {
    hrec *r = R_of(h);
    if (!r || r->closing) return;
    if (r->kind == K_POLL && S.io && S.io->close) S.io->close(S.io_ud, (uv_poll_t *)h);
    r->active = 0;
    r->closing = 1;
    r->close_cb = cb;
    r->next_closing = r->L->closing; /* libuv: the last closed runs first */
    r->L->closing = r;
}

/* timers */
int uv_timer_init(uv_loop_t *loop, uv_timer_t *t) {
    return handle_add(loop, (uv_handle_t *)t, UV_TIMER, K_TIMER) ? 0 : UV_ENOMEM;
}

int uv_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t timeout, uint64_t repeat) {
    hrec *r = R_of((uv_handle_t *)t);
    if (!r || r->closing || !cb) return UV_EINVAL;
    int64_t skew = S.skew_ms + r->L->skew_ms;
    if (skew < 0 && timeout > (uint64_t)-skew) timeout -= (uint64_t)-skew;
    else if (skew > 0) timeout += (uint64_t)skew;
    uint64_t due = r->L->time_ms + timeout;
    if (due < timeout) due = NEVER; /* overflow */
    r->tcb = cb;
    r->due_ms = due;
    r->repeat_ms = repeat;
    r->seq = r->L->timer_seq++;
    r->active = 1;
    if (heap_push(r->L, r) != 0) {
        r->active = 0;
        return UV_ENOMEM;
    }
    return 0;
}

int uv_timer_stop(uv_timer_t *t) {
    hrec *r = R_of((uv_handle_t *)t);
    if (r) r->active = 0;
    return 0;
}

uint64_t uv_timer_get_due_in(const uv_timer_t *t) {
    hrec *r = R_of((const uv_handle_t *)t);
    if (!r || !r->active) return 0;
    return r->due_ms <= r->L->time_ms ? 0 : r->due_ms - r->L->time_ms;
}

/* idle and check */
int uv_idle_init(uv_loop_t *loop, uv_idle_t *h) {
    return handle_add(loop, (uv_handle_t *)h, UV_IDLE, K_IDLE) ? 0 : UV_ENOMEM;
}
int uv_idle_start(uv_idle_t *h, uv_idle_cb cb) {
    hrec *r = R_of((uv_handle_t *)h);
    if (!r || r->closing || !cb) return UV_EINVAL;
    r->icb = cb;
    r->active = 1;
    return 0;
}
int uv_idle_stop(uv_idle_t *h) {
    hrec *r = R_of((uv_handle_t *)h);
    if (r) r->active = 0;
    return 0;
}
int uv_check_init(uv_loop_t *loop, uv_check_t *h) {
    return handle_add(loop, (uv_handle_t *)h, UV_CHECK, K_CHECK) ? 0 : UV_ENOMEM;
}
int uv_check_start(uv_check_t *h, uv_check_cb cb) {
    hrec *r = R_of((uv_handle_t *)h);
    if (!r || r->closing || !cb) return UV_EINVAL;
    r->ccb = cb;
    r->active = 1;
    return 0;
}
int uv_check_stop(uv_check_t *h) {
    hrec *r = R_of((uv_handle_t *)h);
    if (r) r->active = 0;
    return 0;
}

/* polls */
int uv_poll_init(uv_loop_t *loop, uv_poll_t *h, int fd) {
    hrec *r = handle_add(loop, (uv_handle_t *)h, UV_POLL, K_POLL);
    if (!r) return UV_ENOMEM;
    r->fd = fd;
    if (S.io && S.io->open) S.io->open(S.io_ud, h, fd);
    return 0;
}
int uv_poll_start(uv_poll_t *h, int events, uv_poll_cb cb) {
    hrec *r = R_of((uv_handle_t *)h);
    if (!r || r->closing || !cb) return UV_EINVAL;
    if (!(r->events & UV_READABLE) && (events & UV_READABLE)) r->wake = 1; /* bytes may wait already */
    r->pcb = cb;
    r->events = events;
    r->active = events != 0;
    return 0;
}
int uv_poll_stop(uv_poll_t *h) {
    hrec *r = R_of((uv_handle_t *)h);
    if (r) {
        r->active = 0;
        r->events = 0;
    }
    return 0;
}

void uvsim_poll_wake(uv_poll_t *h) {
    hrec *r = R_of((uv_handle_t *)h);
    if (r) r->wake = 1;
}

/* ---- the driver ---------------------------------------------------------------------------- */

static int poll_ready(const hrec *r) {
    if (!r->active) return 0;
    return (r->events & UV_WRITABLE) || (r->wake && (r->events & UV_READABLE));
}

/* When loop L next has something to do (NEVER: nothing). */
static uint64_t loop_wake(lrec *L) {
    if (L->frozen_until == NEVER) return NEVER;
    uint64_t w = NEVER;
    if (L->closing) w = S.now_us;
    for (const hrec *r = L->head; r && w > S.now_us; r = r->next) {
        if (!r->active) continue;
        if (r->kind == K_IDLE || (r->kind == K_POLL && poll_ready(r))) w = S.now_us;
    }
    const hrec *t = w > S.now_us ? heap_top(L) : NULL;
    if (t) {
        uint64_t tw = t->due_ms >= NEVER / 1000 ? NEVER : t->due_ms * 1000;
        if (tw < w) w = tw;
    }
    if (w != NEVER && L->frozen_until > w) w = L->frozen_until;
    return w;
}

static int fd_readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

static void run_timers(lrec *L) {
    for (;;) {
        hrec *m = heap_top(L);
        if (!m || m->due_ms > L->time_ms) return;
        heap_pop(L); /* m stays: it is open (not dead) */
        m->active = 0;
        if (m->repeat_ms) uv_timer_start((uv_timer_t *)m->h, m->tcb, m->repeat_ms, m->repeat_ms);
        m->tcb((uv_timer_t *)m->h);
    }
}

static void turn(lrec *L) {
    S.turns++;
    L->time_ms = S.now_us / 1000;
    run_timers(L);
    /* Handles started by a callback of this phase wait for the next turn,
     * as in libuv (it walks a copy of the queue): the list is walked up to
     * its tail as it was when the phase began. */
    hrec *tail = L->tail;
    for (hrec *r = L->head; r; r = r->next) {
        if (r->kind == K_IDLE && r->active && !r->closing) r->icb((uv_idle_t *)r->h);
        if (r == tail) break;
    }
    tail = L->tail;
    for (hrec *r = L->head; r; r = r->next) {
        if (r->kind == K_POLL && r->active && !r->closing) {
            int ev = 0;
            if (r->events & UV_WRITABLE) ev |= UV_WRITABLE;
            if (r->wake && (r->events & UV_READABLE)) {
                r->wake = 0;
                if (fd_readable(r->fd)) ev |= UV_READABLE;
            }
            if (ev) {
                r->pcb((uv_poll_t *)r->h, 0, ev);
                if ((ev & UV_WRITABLE) && !r->closing && S.io && S.io->wrote) S.io->wrote(S.io_ud, (uv_poll_t *)r->h);
                /* Level-triggered, as epoll is for libuv: what the callback
                 * left unread is still readable next turn. */
                if (!r->closing && (r->events & UV_READABLE) && fd_readable(r->fd)) r->wake = 1;
            }
        }
        if (r == tail) break;
    }
    tail = L->tail;
    for (hrec *r = L->head; r; r = r->next) {
        if (r->kind == K_CHECK && r->active && !r->closing) r->ccb((uv_check_t *)r->h);
        if (r == tail) break;
    }
    hrec *c = L->closing;
    L->closing = NULL;
    while (c) {
        hrec *nx = c->next_closing;
        uv_handle_t *h = c->h;
        uv_close_cb cb = c->close_cb;
        handle_unlink(c);
        h->handle_queue[0] = NULL;
        hrec_release(c);
        if (cb) cb(h);
        c = nx;
    }
}

/* What runs from outside the loops (a caller's call into its agent's
 * engine, an answer's settle) reaches a process as a wake-up does, and
 * libuv updates a loop's time when its poll returns: the callbacks see
 * the time they run at. Left at the loop's last turn, an idle agent's
 * uv_now was up to a timer's interval old there: a call's start (and the
 * wait it reports) was dated that much early, and a timer started from
 * it fired that much early. A frozen loop keeps its time. */
static void loops_wake_time(void) {
    uint64_t ms = S.now_us / 1000;
    for (lrec *L = S.loops; L; L = L->next)
        if (L->frozen_until <= S.now_us && L->time_ms < ms) L->time_ms = ms;
}

int uvsim_run_until(uint64_t t_us) {
    unsigned long spins = 0;
    for (;;) {
        uint64_t next = S.nheap ? S.heap[0].t : NEVER;
        for (lrec *L = S.loops; L; L = L->next) {
            uint64_t w = loop_wake(L);
            if (w < next) next = w;
        }
        if (next > t_us) {
            if (S.now_us < t_us) S.now_us = t_us;
            return 0;
        }
        if (next > S.now_us) {
            S.now_us = next;
            spins = 0;
        } else if (++spins > 1000000) {
            fprintf(stderr, "uvsim: a loop keeps turning at t = %llu us\n", (unsigned long long)S.now_us);
            return -1;
        }
        if (S.nheap && S.heap[0].t <= S.now_us) loops_wake_time();
        while (S.nheap && S.heap[0].t <= S.now_us) {
            at_ev e = at_pop();
            e.fn(e.arg);
        }
        /* The loops due now turn in an order drawn from the seed, as a
         * network breaks the ties of calls sent at the same moment. */
        lrec *due[UVSIM_MAX_LOOPS];
        size_t nd = 0;
        for (lrec *L = S.loops; L; L = L->next)
            if (nd < UVSIM_MAX_LOOPS && loop_wake(L) <= S.now_us) due[nd++] = L;
        for (size_t i = nd; i > 1; i--) {
            S.tie = S.tie * 6364136223846793005ull + 1442695040888963407ull;
            size_t j = (size_t)((S.tie >> 33) % i);
            lrec *t = due[i - 1];
            due[i - 1] = due[j];
            due[j] = t;
        }
        for (size_t i = 0; i < nd; i++) turn(due[i]);
    }
}
