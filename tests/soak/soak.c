/* soak: a 3-agent fleet under demand above its quota for N minutes, with a
 * fault every few seconds, judged by the provider's ledger and by the
 * state the fleet leaves behind (issue 15). Not part of the default test
 * run: tests/reliability.sh soak (docs/reliability.md).
 *
 *   sluice_soak [--minutes N] [--seed S] [--gap LO-HI] [--faults LIST] [--keep] [--quiet]
 *
 * The fleet: one redis-server (loopback port and socket), `sluice mock` as
 * a 600 RPM deployment "d" (its 10 s bucket), 3 sluiced agents each
 * reaching Redis through its own TCP relay (tests/support/relay.h). The
 * deployment: burst 3 (so a correct fleet sends at most 3 + the quota in
 * any 10 s, and the one extra burst a Redis restart may cost stays under
 * 5 %), lease_s 15, heartbeat 1 s, everything else at its default.
 *
 * The load, per agent:
 *   - one `sluice run` slot (-j 8): JSONL batches of 150 lines (50 in a
 *     soak of 3 minutes or less), one after
 *     the other; a run that stops early (its agent gone for 30 s, killed)
 *     is run again on the same files (it resumes);
 *   - 3 raw socket clients (threads): ACQUIRE d over the agent's UNIX
 *     socket, POST to the mock, SETTLE with the answer's headers; told to
 *     disconnect (a fault), one drops its connection where it is: while
 *     its ACQUIRE waits, or holding a grant mid-call (never settled).
 * That is 33 callers, able to send several times the quota.
 *
 * Faults, one at a time, the next 3-8 s (--gap) after the last one ended,
 * chosen at random from the seeded generator (the seed is printed; the
 * same seed gives the same sequence of choices):
 *   kill     kill -9 agent 1 or 2 and restart it 0.5-3 s later (agent 0
 *            is never killed, so one agent lives the whole soak for the
 *            RSS check)
 *   stop     SIGSTOP Redis for 2 s, then SIGCONT
 *   restart  restart Redis empty (SIGKILL, same port, no persistence)
 *   cut      cut one agent from Redis through its relay for 2-10 s
 *            (connections closed, connects refused), then reopen it
 *   kick     2-6 raw clients disconnect: while waiting or mid-call
 *   reload   the rate changes (600 <-> 540 RPM): every agent's file is
 *            rewritten and each gets SIGHUP (the fleet's procedure, see
 *            docs/operations.md), the mock's limit is set to match
 *            (POST /control?rpm=)
 *   killrun  kill -9 a `sluice run` process; it is run again and resumes
 *
 * --faults LIST restricts the choice (e.g. --faults restart: that fault alone;
 * --faults none: the load alone, a baseline).
 *
 * At the end the faults stop (anything still broken is healed), the
 * batches in progress are finished, the raw clients stop, and the fleet
 * is left idle. Invariants, printed with their figures, each PASS or FAIL
 * (exit status 1 when any fails):
 *   - <= 1 % of the requests at the mock answered 429, over the whole soak;
 *   - no 10 s window with more accepts than 1.05 x the quota of that
 *     window (the integral of the mock's limit over it);
 *   - every line of every `sluice run` input answered exactly once (one
 *     record in its results or errors file);
 *   - the RSS of each agent (each incarnation that lived 2 minutes) and
 *     Redis' used_memory within 10 % of their value one minute in (a
 *     third of the soak when shorter than 3 minutes: 40 s of a 2-minute
 *     one; Redis: that far into the soak; its restarts start it empty
 *     again);
 *   - `sluice:{d}:grants` (HLEN) and `sluice:{d}:leases` (ZCARD) back to 0
 *     once the fleet is idle: at once or as the leases end (lease_s), with
 *     nobody calling (what is left then is reported, and a single ACQUIRE
 *     is made to show whether it is reclaimed);
 *   - no agent exit but the injected kills (wait statuses; SIGTERM at the
 *     end drains to exit 0), no sanitizer report or crash in the logs.
 *
 * All children are started from the main thread (PR_SET_PDEATHSIG ties
 * them to it); the raw clients and the relays are threads. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "ledger.h"
#include "mock_fixture.h"
#include "check.h"
#include "proc.h"
#include "redis_fixture.h"
#include "relay.h"
#include "sluiced_fixture.h"
#include "worker_call.h"

#define AGENTS 3
#define RAW_PER_AGENT 3
#define RUN_CONCURRENCY "8"
/* Lines per `sluice run` batch: 150, or 50 for a soak of 3 minutes or
 * less (set from --minutes), so the batches in progress when the faults
 * stop finish within its 1-minute drain (one agent's third of the rate
 * takes about 15 s for 50 lines). */
static int batch_lines = 150;
#define RPM_HIGH 600
#define RPM_LOW 540
#define BURST 3
#define LEASE_S 15
#define HEARTBEAT_MS 1000
#define MAX_WAIT_MS 60000
#define RAW_MAX_WAIT_MS 30000
#define WINDOW_MS 10000.0
#define WINDOW_BOUND 1.05
/* The memory figures' reference: one minute in, or a third of a soak of
 * less than 3 minutes (set from --minutes). An incarnation is checked when
 * it lived on for the same time after it, less 10 s. */
static double baseline_ms = 60000.0;
#define MAX_FAULTS 4096
#define MAX_BATCHES 4096
#define MAX_INCARNATIONS 512
#define MAX_RATES 1024
/* How long the batches in progress may take to finish after the faults
 * stop: 5 minutes, or 1 minute for a soak of 3 minutes or less (the CI
 * variant; a healthy fleet finishes in 5-40 s). Set from --minutes. */
static double drain_ms = 300000.0;

/* ---- options and the seeded generator ----------------------------------------------- */

typedef struct options {
    double minutes;
    unsigned long long seed;
    double gap_lo, gap_hi; /* seconds between faults */
    int keep, quiet;
    unsigned kinds; /* bit per fault_kind allowed (--faults) */
} options;

static unsigned long long rng_state;

static unsigned long long rng_next(void) {
    /* splitmix64: one stream from the seed, used by the main thread only */
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(double lo, double hi) {
    return lo + (hi - lo) * ((double)(rng_next() >> 11) / 9007199254740992.0);
}

static int rng_int(int n) { return (int)(rng_next() % (unsigned long long)n); }

/* ---- the soak's state ---------------------------------------------------------------- */

typedef enum fault_kind { F_KILL, F_STOP, F_RESTART, F_CUT, F_KICK, F_RELOAD, F_KILLRUN, F__COUNT } fault_kind;
static const char *const fault_names[F__COUNT] = {"kill", "stop", "restart", "cut", "kick", "reload", "killrun"};

typedef struct fault {
    fault_kind kind;
    int target;    /* agent, runner, or the number of clients kicked */
    double t0, t1; /* local ms: when it began and ended */
    char detail[96];
} fault;

typedef struct incarnation {
    int agent;
    pid_t pid;
    double start, base_t, last_t;
    long base_kb, last_kb;
    long long base_heap, last_heap, max_kb; /* heap in use (INFO memory) at the same samples; the largest RSS */
    long long trims;                        /* INFO memory's memory_trims, last seen */
    int killed;                             /* ended by an injected kill */
} incarnation;

typedef struct batch {
    int runner, index, lines;
    int runs; /* sluice run processes started on it */
    char in[400], out[400], errors[450];
} batch;

typedef struct runner {
    int agent;
    pid_t pid;
    int batch; /* index into batches, -1 when none */
    double started;
    double rerun_at;    /* local ms: the batch is run again from then (0: now) */
    long long exits[8]; /* how runs ended: 0, 1, signalled, other */
} runner;

typedef struct rawc {
    struct soak *s;
    int agent, index;
    pthread_t tid;
    int started;
    atomic_int kick;  /* set by a kick fault: drop the connection where you are */
    atomic_int state; /* 0 idle, 1 waiting for a slot, 2 in a call */
    long long grants, local_grants, sheds, calls, ok, http429, errors, kicked_waiting, kicked_calling, settle_errors,
        reconnects;
    long long shed_rpm, shed_other;
    char last_shed[160];
    char last_error[300];
} rawc;

typedef struct soak {
    options opt;
    char dir[300];
    redis_fixture redis;
    mock_fixture mock;
    relay *relay[AGENTS];
    sluiced_fixture agent[AGENTS];
    int agent_up[AGENTS];
    char endpoint[64];
    double offset; /* local = ledger + offset */
    double t0, t_end;
    int rpm;
    /* the mock's limit over time, on the ledger's clock */
    double rate_t[MAX_RATES];
    int rate_rpm[MAX_RATES];
    int nrates;
    fault faults[MAX_FAULTS];
    int nfaults;
    incarnation inc[MAX_INCARNATIONS];
    int ninc, cur_inc[AGENTS];
    long long unexpected_exits, injected_kills;
    char unexpected[1024];
    batch batches[MAX_BATCHES];
    int nbatches;
    runner run[AGENTS];
    int stop_batches;
    rawc raw[AGENTS * RAW_PER_AGENT];
    atomic_int raw_stop;
    /* Redis' used_memory */
    double mem_base_t, mem_last_t;
    long long mem_base, mem_last, mem_max;
    int redis_stopped;
    /* the shared schedule's reach past now (requests_tat - TIME), sampled every second */
    double reach_t[4096], reach_ms[4096], reach_eff[4096], reach_out[4096];
    int nreach;
} soak;

static int nfail, nskip;

/* An invariant that cannot be checked in this run (too short): SKIP. */
#define SKIPPED(...)                                                                                                   \
    do {                                                                                                               \
        nskip++;                                                                                                       \
        printf("  SKIP ");                                                                                             \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
    } while (0)

/* An invariant of issue 15 (check.h): PASS or FAIL, counted. */
#define INVARIANT(cond, ...) CHECK(&nfail, cond, __VA_ARGS__)

static double rel_s(const soak *s, double t) { return (t - s->t0) / 1000; }

static void say(const soak *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const soak *s, const char *fmt, ...) {
    if (s->opt.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    printf("[%7.1f s] ", s->t0 > 0 ? rel_s(s, proc_now_ms()) : 0.0);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* ---- agents --------------------------------------------------------------------------- */

static int write_agent_config(soak *s, int a, int rpm) {
    char tmp[450], yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "redis: {url: \"redis://127.0.0.1:%d\"}\n"
             "agent: {socket: \"%s\", id: agent%d, heartbeat_ms: %d, max_clients: 512, log_level: info}\n"
             "deployments:\n"
             "  d: {rpm: %d, burst: {requests: %d}, endpoint: \"%s\", max_wait_ms: %d, lease_s: %d}\n",
             relay_port(s->relay[a]), s->agent[a].sock, a, HEARTBEAT_MS, rpm, BURST, s->endpoint, MAX_WAIT_MS, LEASE_S);
    snprintf(tmp, sizeof(tmp), "%s.tmp", s->agent[a].config);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fputs(yaml, f);
    if (fclose(f) != 0) return -1;
    return rename(tmp, s->agent[a].config);
}

static void inc_begin(soak *s, int a) {
    if (s->ninc >= MAX_INCARNATIONS) {
        s->cur_inc[a] = -1;
        return;
    }
    incarnation *i = &s->inc[s->ninc];
    memset(i, 0, sizeof(*i));
    i->agent = a;
    i->pid = s->agent[a].pid;
    i->start = proc_now_ms();
    i->base_t = -1;
    s->cur_inc[a] = s->ninc++;
}

static int agent_launch(soak *s, int a) {
    if (sluiced_fixture_launch(&s->agent[a], NULL, 10000) != 0) return -1;
    s->agent_up[a] = 1;
    inc_begin(s, a);
    return 0;
}

/* The agent's pid exited (without reaping it)? */
static int exited(pid_t pid) {
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return pid > 0 && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

static void describe_status(int st, char *buf, size_t n) {
    if (st < 0) snprintf(buf, n, "unknown (killed after the wait)");
    else if (WIFEXITED(st)) snprintf(buf, n, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(buf, n, "signal %d%s", WTERMSIG(st), WCOREDUMP(st) ? " (core)" : "");
    else snprintf(buf, n, "status 0x%x", st);
}

static void check_agents(soak *s) {
    for (int a = 0; a < AGENTS; a++) {
        if (!s->agent_up[a] || !exited(s->agent[a].pid)) continue;
        int st = sluiced_fixture_wait(&s->agent[a], 1000);
        char d[64];
        describe_status(st, d, sizeof(d));
        s->unexpected_exits++;
        size_t used = strlen(s->unexpected);
        snprintf(s->unexpected + used, sizeof(s->unexpected) - used, "%sagent%d at %.1f s: %s", used ? "; " : "", a,
                 rel_s(s, proc_now_ms()), d);
        say(s, "UNEXPECTED: agent%d exited (%s); restarting it", a, d);
        s->agent_up[a] = 0;
        if (agent_launch(s, a) != 0) say(s, "agent%d could not be restarted", a);
    }
}

static long rss_kb(pid_t pid) {
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

static long long redis_used_memory(const soak *s) {
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectUnixWithTimeout(s->redis.sock, tv);
    long long v = -1;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "INFO memory");
        const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "used_memory:") : NULL;
        if (p) v = atoll(p + 12);
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return v;
}

/* The shared state as agent 0's STATUS d shows it: the schedule's reach
 * past now (requests_backlog_ms: a reach beyond a caller's max wait sheds
 * it), the effective rate and the estimate of others' use of the key
 * (outside_rpm, from the provider's headers). */
static void sample_status(soak *s) {
    if (s->nreach >= 4096 || !s->agent_up[0]) return;
    redisContext *c = sluiced_fixture_connect(&s->agent[0], 1000);
    redisReply *r = c ? redisCommand(c, "STATUS d") : NULL;
    double reach = -1, eff = -1, out = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
        if (!k || !v) continue;
        if (!strcmp(k, "requests_backlog_ms")) reach = atof(v);
        else if (!strcmp(k, "effective_rpm")) eff = atof(v);
        else if (!strcmp(k, "outside_rpm")) out = atof(v);
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    if (reach < 0) return; /* no answer from Redis through agent 0 (cut, stopped) */
    if (out >= 60 && !s->opt.quiet) {
        /* Others' use seen where the soak has none: the estimator's state,
         * to tell why. */
        struct timeval tv = {1, 0};
        redisContext *rc = redisConnectUnixWithTimeout(s->redis.sock, tv);
        redisReply *h = rc && !rc->err ? redisCommand(rc, "HMGET sluice:{d}:state requests_obs requests_outside_ms "
                                                          "requests_deficit requests_cap obs_after requests_tat")
                                       : NULL;
        if (h && h->type == REDIS_REPLY_ARRAY && h->elements == 6)
            say(s, "outside_rpm %.0f (effective %.0f, reach %.1f s): obs %s, x %s/ms, deficit %s, cap %s, obs_after %s",
                out, eff, reach / 1000, h->element[0]->str ? h->element[0]->str : "-",
                h->element[1]->str ? h->element[1]->str : "-", h->element[2]->str ? h->element[2]->str : "-",
                h->element[3]->str ? h->element[3]->str : "-", h->element[4]->str ? h->element[4]->str : "-");
        if (h) freeReplyObject(h);
        if (rc) redisFree(rc);
    }
    s->reach_t[s->nreach] = proc_now_ms();
    s->reach_eff[s->nreach] = eff;
    s->reach_out[s->nreach] = out;
    s->reach_ms[s->nreach++] = reach;
}

/* An agent's heap in use (INFO memory), -1 when it does not answer. */
static long long agent_heap(soak *s, int a, long long *trims) {
    redisContext *c = sluiced_fixture_connect(&s->agent[a], 1000);
    redisReply *r = c ? redisCommand(c, "INFO memory") : NULL;
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "heap_in_use:") : NULL;
    long long v = p ? atoll(p + 12) : -1;
    const char *t = p ? strstr(r->str, "memory_trims:") : NULL;
    if (t && trims) *trims = atoll(t + 13);
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return v;
}

static void sample_memory(soak *s) {
    double now = proc_now_ms();
    for (int a = 0; a < AGENTS; a++) {
        if (!s->agent_up[a] || s->cur_inc[a] < 0) continue;
        incarnation *i = &s->inc[s->cur_inc[a]];
        long kb = rss_kb(i->pid);
        if (kb <= 0) continue;
        long long heap = agent_heap(s, a, &i->trims);
        if (i->base_t < 0 && now - i->start >= baseline_ms) {
            i->base_t = now;
            i->base_kb = kb;
            i->base_heap = heap;
        }
        i->last_t = now;
        i->last_kb = kb;
        i->last_heap = heap;
        if (kb > i->max_kb) i->max_kb = kb;
    }
    if (s->redis_stopped) return;
    long long m = redis_used_memory(s);
    if (m <= 0) return;
    if (s->mem_base_t <= 0 && now - s->t0 >= baseline_ms) {
        s->mem_base_t = now;
        s->mem_base = m;
    }
    s->mem_last_t = now;
    s->mem_last = m;
    if (m > s->mem_max) s->mem_max = m;
}

/* ---- raw socket clients ---------------------------------------------------------------- */

static redisContext *raw_connect_agent(rawc *k) {
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectUnixWithTimeout(k->s->agent[k->agent].sock, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    struct timeval rt = {RAW_MAX_WAIT_MS / 1000 + 10, 0};
    redisSetTimeout(c, rt);
    return c;
}

/* Sends ACQUIRE and waits for its reply, watching the kick flag. Returns
 * the reply, or NULL: kicked (*kicked set) or the connection failed. */
static redisReply *raw_acquire(rawc *k, redisContext *c, int *kicked) {
    *kicked = 0;
    if (redisAppendCommand(c, "ACQUIRE d TOKENS 20 MAXWAIT %d", RAW_MAX_WAIT_MS) != REDIS_OK) return NULL;
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) return NULL;
    double deadline = proc_now_ms() + RAW_MAX_WAIT_MS + 10000;
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(c, &reply) != REDIS_OK) return NULL;
        if (reply) return reply;
        if (atomic_exchange(&k->kick, 0)) {
            *kicked = 1;
            return NULL;
        }
        if (proc_now_ms() > deadline) return NULL;
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0 && redisBufferRead(c) != REDIS_OK) return NULL;
    }
}

static void *raw_main(void *arg) {
    rawc *k = arg;
    soak *s = k->s;
    worker_call w; /* the HTTP side (and the settle, on our connection) */
    char id[32];
    snprintf(id, sizeof(id), "raw%d-%d", k->agent, k->index);
    if (worker_call_open(&w, NULL, 0, id) != 0) {
        snprintf(k->last_error, sizeof(k->last_error), "%s", w.error);
        worker_call_close(&w);
        return NULL;
    }
    redisContext *c = NULL;
    while (!atomic_load(&s->raw_stop)) {
        if (!c) {
            c = raw_connect_agent(k);
            if (!c) {
                proc_sleep_ms(200);
                continue;
            }
            k->reconnects++;
        }
        atomic_store(&k->state, 1);
        int kicked;
        redisReply *r = raw_acquire(k, c, &kicked);
        if (!r) {
            atomic_store(&k->state, 0);
            if (kicked) k->kicked_waiting++;
            else {
                k->errors++;
                snprintf(k->last_error, sizeof(k->last_error), "ACQUIRE: %s", c->err ? c->errstr : "no reply");
            }
            redisFree(c);
            c = NULL;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            atomic_store(&k->state, 0);
            if (!strncmp(r->str, "SHED ", 5)) {
                k->sheds++;
                if (!strncmp(r->str, "SHED rpm ", 9)) k->shed_rpm++;
                else k->shed_other++;
                snprintf(k->last_shed, sizeof(k->last_shed), "%s", r->str);
                const char *h = strstr(r->str, "retry-after-ms=");
                long long ra = h ? atoll(h + 15) : 1000;
                proc_sleep_ms((int)(ra > 0 && ra < 2000 ? ra : 200));
            } else {
                k->errors++; /* CLOSING while an agent drains, ... */
                snprintf(k->last_error, sizeof(k->last_error), "%s", r->str);
                proc_sleep_ms(100);
            }
            freeReplyObject(r);
            continue;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->element[0]->type != REDIS_REPLY_STRING) {
            k->errors++;
            snprintf(k->last_error, sizeof(k->last_error), "unexpected ACQUIRE reply type %d", r->type);
            freeReplyObject(r);
            redisFree(c);
            c = NULL;
            continue;
        }
        snprintf(w.grant, sizeof(w.grant), "%s", r->element[0]->str);
        k->grants++;
        k->local_grants += strstr(w.grant, ":L") != NULL;
        freeReplyObject(r);
        atomic_store(&k->state, 2);
        long st = worker_call_post(&w, s->endpoint, "d", "a soak request from a raw client", 16, 15000);
        k->calls++;
        k->ok += st == 200;
        k->http429 += st == 429;
        if (atomic_exchange(&k->kick, 0)) {
            /* Mid-call: the grant goes unsettled; its lease reclaims it. */
            k->kicked_calling++;
            atomic_store(&k->state, 0);
            redisFree(c);
            c = NULL;
            continue;
        }
        w.rc = c;
        if (worker_call_settle(&w, st == 200 ? "ok" : st == 429 ? "throttled" : "failed") != 0) {
            k->settle_errors++;
            snprintf(k->last_error, sizeof(k->last_error), "%s", w.error);
            if (c->err) {
                redisFree(c);
                c = NULL;
            }
        }
        w.rc = NULL;
        atomic_store(&k->state, 0);
    }
    if (c) redisFree(c);
    worker_call_close(&w);
    return NULL;
}

/* ---- sluice run batches ------------------------------------------------------------------ */

static int new_batch(soak *s, int rix) {
    if (s->nbatches >= MAX_BATCHES) return -1;
    batch *b = &s->batches[s->nbatches];
    memset(b, 0, sizeof(*b));
    b->runner = rix;
    b->index = s->nbatches;
    b->lines = batch_lines;
    snprintf(b->in, sizeof(b->in), "%.300s/runs/r%d-b%d.jsonl", s->dir, rix, b->index);
    snprintf(b->out, sizeof(b->out), "%.300s/runs/r%d-b%d.out.jsonl", s->dir, rix, b->index);
    snprintf(b->errors, sizeof(b->errors), "%.300s/runs/r%d-b%d.out.jsonl.errors.jsonl", s->dir, rix, b->index);
    FILE *f = fopen(b->in, "w");
    if (!f) return -1;
    for (int i = 0; i < b->lines; i++)
        fprintf(f,
                "{\"id\":\"r%d-b%d-%d\",\"messages\":[{\"role\":\"user\",\"content\":\"soak request %d of batch %d\"}],"
                "\"max_tokens\":16}\n",
                rix, b->index, i, i, b->index);
    if (fclose(f) != 0) return -1;
    return s->nbatches++;
}

static int start_run(soak *s, int r) {
    runner *rn = &s->run[r];
    batch *b = &s->batches[rn->batch];
    const char *bin = mock_fixture_binary();
    char log[450];
    snprintf(log, sizeof(log), "%s/runs/r%d-b%d.log", s->dir, r, b->index);
    char *argv[] = {(char *)bin,
                    "run",
                    "-c",
                    s->agent[rn->agent].config,
                    "-d",
                    "d",
                    "--in",
                    b->in,
                    "--out",
                    b->out,
                    "-j",
                    RUN_CONCURRENCY,
                    "--no-progress",
                    NULL};
    rn->pid = proc_spawn(argv, log, 1);
    if (rn->pid < 0) {
        rn->pid = 0;
        return -1;
    }
    b->runs++;
    rn->started = proc_now_ms();
    return 0;
}

/* The ids of a JSONL file with their counts added to ids (a jansson
 * object id -> count). Returns the lines read. */
static long count_ids(const char *path, json_t *ids, long *bad) {
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    long n = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *id = j ? json_object_get(j, "id") : NULL;
        if (json_is_string(id)) {
            json_t *c = json_object_get(ids, json_string_value(id));
            json_object_set_new(ids, json_string_value(id), json_integer(c ? json_integer_value(c) + 1 : 1));
            n++;
        } else if (bad) {
            (*bad)++;
        }
        json_decref(j);
    }
    free(line);
    if (f) fclose(f);
    return n;
}

/* How many of b's ids have no record yet. */
static int batch_remaining(const batch *b) {
    json_t *ids = json_object();
    count_ids(b->out, ids, NULL);
    count_ids(b->errors, ids, NULL);
    int left = b->lines - (int)json_object_size(ids);
    json_decref(ids);
    return left;
}

static void check_runners(soak *s) {
    for (int r = 0; r < AGENTS; r++) {
        runner *rn = &s->run[r];
        if (rn->rerun_at > 0) {
            if (proc_now_ms() < rn->rerun_at) continue;
            rn->rerun_at = 0;
            if (start_run(s, r) != 0) say(s, "cannot rerun batch %d", rn->batch);
            continue;
        }
        if (rn->pid > 0) {
            int st;
            if (!proc_wait(rn->pid, 0, &st)) continue;
            rn->pid = 0;
            int kind = WIFEXITED(st) ? (WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 1 ? 1 : 3) : 2;
            rn->exits[kind]++;
            batch *b = &s->batches[rn->batch];
            int left = batch_remaining(b);
            if (kind == 3) say(s, "sluice run on batch %d: exit %d (see its log)", b->index, WEXITSTATUS(st));
            if (left > 0) {
                /* Stopped early or killed: run it again, it resumes (a
                 * second later: a run started while its agent is down
                 * stops at once). */
                rn->rerun_at = proc_now_ms() + 1000;
                continue;
            }
            rn->batch = -1;
        }
        if (rn->batch < 0 && !s->stop_batches) {
            rn->batch = new_batch(s, r);
            if (rn->batch < 0 || start_run(s, r) != 0) {
                say(s, "cannot start a batch for runner %d", r);
                rn->batch = -1;
            }
        }
    }
}

/* ---- faults ------------------------------------------------------------------------------------ */

typedef struct active {
    int on;
    fault *f;
    double until; /* local ms: when to end it */
} active;

static void note_rate(soak *s, int rpm) {
    if (s->nrates >= MAX_RATES) return;
    s->rate_t[s->nrates] = proc_now_ms() - s->offset;
    s->rate_rpm[s->nrates++] = rpm;
}

static fault *fault_new(soak *s, fault_kind k, int target) {
    if (s->nfaults >= MAX_FAULTS) return NULL;
    fault *f = &s->faults[s->nfaults++];
    memset(f, 0, sizeof(*f));
    f->kind = k;
    f->target = target;
    f->t0 = f->t1 = proc_now_ms();
    return f;
}

static void fault_begin(soak *s, active *act) {
    fault_kind allowed[F__COUNT];
    int na = 0;
    for (int i = 0; i < F__COUNT; i++)
        if (s->opt.kinds & (1u << i)) allowed[na++] = (fault_kind)i;
    if (na == 0) return;
    fault_kind k = allowed[rng_int(na)];
    fault *f = NULL;
    act->on = 0;
    switch (k) {
    case F_KILL: {
        int a = 1 + rng_int(AGENTS - 1);
        double down = rng_uniform(500, 3000);
        f = fault_new(s, k, a);
        if (!f) return;
        if (s->cur_inc[a] >= 0) s->inc[s->cur_inc[a]].killed = 1;
        sluiced_fixture_stop(&s->agent[a], 1);
        s->agent_up[a] = 0;
        s->injected_kills++;
        snprintf(f->detail, sizeof(f->detail), "agent%d down for %.1f s", a, down / 1000);
        act->until = proc_now_ms() + down;
        break;
    }
    case F_STOP:
        f = fault_new(s, k, 0);
        if (!f) return;
        kill(s->redis.pid, SIGSTOP);
        s->redis_stopped = 1;
        snprintf(f->detail, sizeof(f->detail), "Redis stopped for 2 s");
        act->until = proc_now_ms() + 2000;
        break;
    case F_RESTART: {
        f = fault_new(s, k, 0);
        if (!f) return;
        double t = proc_now_ms();
        int rc = redis_fixture_restart(&s->redis);
        snprintf(f->detail, sizeof(f->detail), "Redis restarted empty in %.0f ms%s", proc_now_ms() - t,
                 rc ? " (FAILED)" : "");
        act->until = proc_now_ms();
        break;
    }
    case F_CUT: {
        int a = rng_int(AGENTS);
        double len = rng_uniform(2000, 10000);
        f = fault_new(s, k, a);
        if (!f) return;
        int rc = relay_set_mode(s->relay[a], RELAY_CUT);
        snprintf(f->detail, sizeof(f->detail), "agent%d cut from Redis for %.1f s%s", a, len / 1000,
                 rc ? " (relay FAILED)" : "");
        act->until = proc_now_ms() + len;
        break;
    }
    case F_KICK: {
        int n = 2 + rng_int(5), waiting = 0, calling = 0, idle = 0;
        f = fault_new(s, k, n);
        if (!f) return;
        for (int i = 0; i < n; i++) {
            rawc *c = &s->raw[rng_int(AGENTS * RAW_PER_AGENT)];
            int st = atomic_load(&c->state);
            waiting += st == 1;
            calling += st == 2;
            idle += st == 0;
            atomic_store(&c->kick, 1);
        }
        snprintf(f->detail, sizeof(f->detail), "%d raw clients told to disconnect (%d waiting, %d in a call, %d idle)",
                 n, waiting, calling, idle);
        act->until = proc_now_ms();
        break;
    }
    case F_RELOAD: {
        int rpm = s->rpm == RPM_HIGH ? RPM_LOW : RPM_HIGH;
        f = fault_new(s, k, rpm);
        if (!f) return;
        char q[64];
        int bad = 0;
        for (int a = 0; a < AGENTS; a++) bad |= write_agent_config(s, a, rpm) != 0;
        snprintf(q, sizeof(q), "?rpm=%d", rpm);
        bad |= mock_fixture_control(&s->mock, q) != 200;
        note_rate(s, rpm);
        for (int a = 0; a < AGENTS; a++)
            if (s->agent_up[a]) sluiced_fixture_signal(&s->agent[a], SIGHUP);
        s->rpm = rpm;
        snprintf(f->detail, sizeof(f->detail), "rate %d -> %d RPM (files, SIGHUP, mock)%s",
                 rpm == RPM_HIGH ? RPM_LOW : RPM_HIGH, rpm, bad ? " (FAILED)" : "");
        act->until = proc_now_ms();
        break;
    }
    case F_KILLRUN: {
        int r = rng_int(AGENTS);
        f = fault_new(s, k, r);
        if (!f) return;
        if (s->run[r].pid > 0) {
            kill(s->run[r].pid, SIGKILL);
            snprintf(f->detail, sizeof(f->detail), "sluice run %d (batch %d) killed", r, s->run[r].batch);
        } else {
            snprintf(f->detail, sizeof(f->detail), "sluice run %d: none running", r);
        }
        act->until = proc_now_ms();
        break;
    }
    default: return;
    }
    act->on = 1;
    act->f = f;
    say(s, "fault %d: %s: %s", s->nfaults, fault_names[k], f->detail);
}

static void fault_end(soak *s, active *act) {
    fault *f = act->f;
    switch (f->kind) {
    case F_KILL:
        if (agent_launch(s, f->target) != 0) say(s, "agent%d did not restart", f->target);
        break;
    case F_STOP:
        kill(s->redis.pid, SIGCONT);
        s->redis_stopped = 0;
        break;
    case F_CUT:
        if (relay_set_mode(s->relay[f->target], RELAY_PASS) != 0) say(s, "relay %d did not reopen", f->target);
        break;
    default: break;
    }
    f->t1 = proc_now_ms();
    act->on = 0;
}

/* ---- the final figures ---------------------------------------------------------------------------- */

/* The mock's limit integrated over [a, b) (ledger ms): requests allowed. */
static double quota_of(double a, double b, void *ud) {
    const soak *s = ud;
    double q = 0;
    for (int i = 0; i < s->nrates; i++) {
        double from = fmax(a, s->rate_t[i]);
        double to = fmin(b, i + 1 < s->nrates ? s->rate_t[i + 1] : INFINITY);
        if (to > from) q += (to - from) * s->rate_rpm[i] / 60000.0;
    }
    return q;
}

static void print_faults_near(const soak *s, double from_ledger, double to_ledger) {
    for (int i = 0; i < s->nfaults; i++) {
        const fault *f = &s->faults[i];
        double a = f->t0 - s->offset, b = f->t1 - s->offset;
        if (b >= from_ledger && a <= to_ledger)
            printf("        fault %d at %.1f s: %s: %s\n", i + 1, rel_s(s, f->t0), fault_names[f->kind], f->detail);
    }
}

/* Episodes of 10 s windows above the bound: windows over it whose starts
 * are within 10 s of each other form one episode. Prints each (the first
 * 30) with the faults around it; returns how many. */
typedef struct episode {
    double first, last, worst, worst_at, quota;
    size_t count;
} episode;

/* Accepts per second over [from, to) (ledger ms), a fault's start marked
 * with its name. */
static void print_per_second(const soak *s, const double *t, size_t n, double from, double to) {
    char line[4096];
    size_t used = (size_t)snprintf(line, sizeof(line), "        accepts/s from %.0f s:", rel_s(s, from + s->offset));
    for (double a = from; a < to && used < sizeof(line) - 64; a += 1000) {
        for (int i = 0; i < s->nfaults; i++) {
            double f0 = s->faults[i].t0 - s->offset;
            if (f0 >= a && f0 < a + 1000)
                used += (size_t)snprintf(line + used, sizeof(line) - used, " [%s]", fault_names[s->faults[i].kind]);
        }
        used += (size_t)snprintf(line + used, sizeof(line) - used, " %zu", ledger_count(t, n, a, a + 1000));
    }
    printf("%s\n", line);
}

static void episode_print(const soak *s, const double *t, size_t n, int k, const episode *e) {
    if (k > 30) return;
    printf("    episode %d: windows from %.1f to %.1f s, worst %.3f x (%zu accepts, quota %.1f, from %.1f s)\n", k,
           rel_s(s, e->first + s->offset), rel_s(s, e->last + s->offset), e->worst, e->count, e->quota,
           rel_s(s, e->worst_at + s->offset));
    print_faults_near(s, e->first - 10000, e->last + WINDOW_MS);
    print_per_second(s, t, n, e->first - 10000, e->last + WINDOW_MS);
}

static int window_episodes(const soak *s, const double *t, size_t n) {
    int episodes = 0, open = 0;
    episode e = {0};
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (j < i) j = i;
        while (j < n && t[j] < t[i] + WINDOW_MS) j++;
        double q = quota_of(t[i], t[i] + WINDOW_MS, (void *)s);
        double ratio = q > 0 ? (double)(j - i) / q : 0;
        if (ratio <= WINDOW_BOUND) continue;
        if (open && t[i] - e.last > WINDOW_MS) {
            episode_print(s, t, n, ++episodes, &e);
            open = 0;
        }
        if (!open) {
            e = (episode){t[i], t[i], 0, t[i], 0, 0};
            open = 1;
        }
        e.last = t[i];
        if (ratio > e.worst) {
            e.worst = ratio;
            e.worst_at = t[i];
            e.count = j - i;
            e.quota = q;
        }
    }
    if (open) episode_print(s, t, n, ++episodes, &e);
    return episodes;
}

/* Counts log lines: ERROR, WARN, and anything that looks like a crash. */
static void scan_log(const char *path, long *errors, long *warns, long *crash, char *first_crash, size_t n) {
    FILE *f = fopen(path, "r");
    char line[2048];
    *errors = *warns = *crash = 0;
    first_crash[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        *errors += strstr(line, " ERROR: ") != NULL;
        *warns += strstr(line, " WARN: ") != NULL;
        if (strstr(line, "AddressSanitizer") || strstr(line, "runtime error:") || strstr(line, "LeakSanitizer") ||
            strstr(line, "Assertion") || strstr(line, "Segmentation") || strstr(line, "core dumped") ||
            strstr(line, "panic")) {
            if (!*crash) snprintf(first_crash, n, "%s", line);
            (*crash)++;
        }
    }
    if (f) fclose(f);
}

/* Counts the ERROR lines by message (their text after the level, with
 * numbers and addresses kept): the five most common. */
static void top_errors(const char *path, const char *tag) {
    FILE *f = fopen(path, "r");
    char line[2048];
    json_t *count = json_object();
    while (f && fgets(line, sizeof(line), f)) {
        char *p = strstr(line, tag);
        if (!p) continue;
        p += strlen(tag);
        p[strcspn(p, "\n")] = '\0';
        /* Drop the parts that vary: ports and durations. */
        char key[160];
        size_t k = 0;
        for (; *p && k + 1 < sizeof(key); p++)
            if (!(*p >= '0' && *p <= '9')) key[k++] = *p;
        key[k] = '\0';
        json_t *c = json_object_get(count, key);
        json_object_set_new(count, key, json_integer(c ? json_integer_value(c) + 1 : 1));
    }
    if (f) fclose(f);
    for (int shown = 0; shown < 5 && json_object_size(count); shown++) {
        const char *best = NULL, *key;
        json_t *v;
        long long bn = 0;
        json_object_foreach(count, key, v) {
            if (json_integer_value(v) > bn) {
                bn = json_integer_value(v);
                best = key;
            }
        }
        if (!best) break;
        printf("      %5lld x%s\n", bn, best);
        json_object_del(count, best);
    }
    json_decref(count);
}

static long long redis_int(const soak *s, const char *cmd) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(s->redis.sock, tv);
    long long v = -1;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, cmd);
        if (r && r->type == REDIS_REPLY_INTEGER) v = r->integer;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return v;
}

/* Redis' clock in ms. */
static long long redis_time_ms(const soak *s) {
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(s->redis.sock, tv);
    long long v = -1;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "TIME");
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
            v = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return v;
}

/* One ACQUIRE and a cancelling SETTLE through agent 0: a reserve and a
 * settle script run, and each reclaims expired leases. */
static int sweep_call(soak *s) {
    redisContext *c = sluiced_fixture_connect(&s->agent[0], MAX_WAIT_MS + 5000);
    int ok = 0;
    redisReply *r = c ? redisCommand(c, "ACQUIRE d MAXWAIT %d", MAX_WAIT_MS) : NULL;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3 && r->element[0]->type == REDIS_REPLY_STRING) {
        redisReply *q = redisCommand(c, "SETTLE %s STATUS cancelled", r->element[0]->str);
        ok = q && q->type == REDIS_REPLY_STATUS;
        if (q) freeReplyObject(q);
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return ok;
}

/* ---- main ----------------------------------------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr, "usage: sluice_soak [--minutes N] [--seed S] [--gap LO-HI] [--faults LIST] [--keep] [--quiet]\n"
                    "  --minutes N   faults and load for N minutes (default 10; fractions allowed)\n"
                    "  --seed S      the seed of the fault choices (default: from the clock; printed)\n"
                    "  --gap LO-HI   seconds between faults (default 3-8)\n"
                    "  --faults LIST the faults to choose from, comma-separated (default all:\n"
                    "                kill,stop,restart,cut,kick,reload,killrun; none: load only)\n"
                    "  --keep        keep the working directory (logs, batches, results)\n"
                    "  --quiet       no line per fault\n"
                    "Needs SLUICE_BUILD_DIR (the build with agent/sluiced and sluice).\n");
}

static int parse_options(int argc, char **argv, options *o) {
    o->minutes = 10;
    o->seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 16);
    o->gap_lo = 3;
    o->gap_hi = 8;
    o->kinds = (1u << F__COUNT) - 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--minutes") && v) {
            o->minutes = atof(v);
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            o->seed = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--gap") && v) {
            if (sscanf(v, "%lf-%lf", &o->gap_lo, &o->gap_hi) != 2) return -1;
            i++;
        } else if (!strcmp(a, "--faults") && v) {
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", v);
            o->kinds = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int found = !strcmp(t, "none");
                for (int k = 0; k < F__COUNT; k++)
                    if (!strcmp(t, fault_names[k])) {
                        o->kinds |= 1u << k;
                        found = 1;
                    }
                if (!found) return -1;
            }
            i++;
        } else if (!strcmp(a, "--keep")) {
            o->keep = 1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else {
            return -1;
        }
    }
    if (o->minutes <= 0 || o->gap_lo < 0 || o->gap_hi < o->gap_lo) return -1;
    return 0;
}

int main(int argc, char **argv) {
    static soak S;
    soak *s = &S;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (parse_options(argc, argv, &s->opt) != 0) {
        usage();
        return 2;
    }
    if (!sluiced_fixture_binary() || !mock_fixture_binary()) return 2;
    if (s->opt.minutes < 3) baseline_ms = s->opt.minutes * 60000 / 3;
    if (s->opt.minutes <= 3) {
        drain_ms = 60000;
        batch_lines = 50;
    }
    rng_state = s->opt.seed;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char kinds[128] = "";
    for (int k = 0; k < F__COUNT; k++)
        if (s->opt.kinds & (1u << k))
            snprintf(kinds + strlen(kinds), sizeof(kinds) - strlen(kinds), "%s%s", kinds[0] ? "," : "", fault_names[k]);
    printf("sluice soak: %.1f minutes, seed %llu, faults every %g-%g s from {%s} (rerun: --minutes %g --seed %llu "
           "--gap %g-%g --faults %s)\n",
           s->opt.minutes, s->opt.seed, s->opt.gap_lo, s->opt.gap_hi, kinds[0] ? kinds : "none", s->opt.minutes,
           s->opt.seed, s->opt.gap_lo, s->opt.gap_hi, kinds[0] ? kinds : "none");

    /* The fleet. */
    if (proc_mkdtemp(s->dir, sizeof(s->dir), "sluice-soak") != 0) return 1;
    char runs[400];
    snprintf(runs, sizeof(runs), "%.300s/runs", s->dir);
    mkdir(runs, 0700);
    if (redis_fixture_start_ex(&s->redis, "", 0) != 0) return 1;
    char seedarg[32];
    snprintf(seedarg, sizeof(seedarg), "%llu", s->opt.seed % 1000000000ull);
    const char *margs[] = {"--deployment", "d", "--rpm", "600", "--service-ms", "100-400", "--seed", seedarg, NULL};
    if (mock_fixture_start(&s->mock, margs, 10000) != 0) return 1;
    if (ledger_clock_offset(&s->mock, &s->offset, NULL) != 0) return 1;
    snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d", s->mock.port);
    s->rpm = RPM_HIGH;
    s->rate_t[0] = -1e12;
    s->rate_rpm[0] = RPM_HIGH;
    s->nrates = 1;
    for (int a = 0; a < AGENTS; a++) {
        char err[256], name[16];
        s->relay[a] = relay_start(s->redis.port, 0, err, sizeof(err));
        if (!s->relay[a]) {
            fprintf(stderr, "relay: %s\n", err);
            return 1;
        }
        snprintf(name, sizeof(name), "agent%d", a);
        if (sluiced_fixture_init(&s->agent[a], s->dir, name) != 0 || write_agent_config(s, a, RPM_HIGH) != 0) return 1;
        s->cur_inc[a] = -1;
    }
    s->t0 = proc_now_ms();
    for (int a = 0; a < AGENTS; a++)
        if (agent_launch(s, a) != 0) return 1;
    printf("  dir %s; Redis on port %d, mock on %d, relays on %d %d %d\n", s->dir, s->redis.port, s->mock.port,
           relay_port(s->relay[0]), relay_port(s->relay[1]), relay_port(s->relay[2]));
    for (int r = 0; r < AGENTS; r++) {
        s->run[r].agent = r;
        s->run[r].batch = -1;
    }
    for (int i = 0; i < AGENTS * RAW_PER_AGENT; i++) {
        rawc *k = &s->raw[i];
        k->s = s;
        k->agent = i / RAW_PER_AGENT;
        k->index = i % RAW_PER_AGENT;
        k->started = pthread_create(&k->tid, NULL, raw_main, k) == 0;
    }

    /* The soak: load, faults, samples. */
    s->t_end = s->t0 + s->opt.minutes * 60000;
    active act = {0};
    double next_fault = s->t0 + 1000 * rng_uniform(s->opt.gap_lo, s->opt.gap_hi);
    double next_sample = s->t0, next_progress = s->t0 + 30000, next_reach = s->t0;
    while (proc_now_ms() < s->t_end) {
        double now = proc_now_ms();
        if (act.on && now >= act.until) {
            fault_end(s, &act);
            next_fault = proc_now_ms() + 1000 * rng_uniform(s->opt.gap_lo, s->opt.gap_hi);
        }
        if (!act.on && now >= next_fault) fault_begin(s, &act);
        check_agents(s);
        check_runners(s);
        if (now >= next_sample) {
            sample_memory(s);
            next_sample = now + 5000;
        }
        if (now >= next_reach) {
            sample_status(s);
            next_reach = now + 1000;
        }
        if (now >= next_progress) {
            long long g = 0, l = 0;
            for (int i = 0; i < AGENTS * RAW_PER_AGENT; i++) {
                g += s->raw[i].grants;
                l += s->raw[i].local_grants;
            }
            say(s,
                "progress: %d faults, %d batches, raw grants %lld (%lld local), Redis used_memory %lld, schedule reach "
                "%.1f s; agent0 RSS %ld kB, heap in use %lld kB",
                s->nfaults, s->nbatches, g, l, s->mem_last, s->nreach ? s->reach_ms[s->nreach - 1] / 1000 : -1.0,
                s->cur_inc[0] >= 0 ? s->inc[s->cur_inc[0]].last_kb : -1L,
                s->cur_inc[0] >= 0 ? s->inc[s->cur_inc[0]].last_heap / 1024 : -1LL);
            next_progress = now + 30000;
        }
        proc_sleep_ms(50);
    }
    if (act.on) fault_end(s, &act);
    sample_memory(s);
    double t_faults_end = proc_now_ms();
    say(s, "faults stopped; finishing the batches in progress");

    /* The end: finish the batches, stop the raw clients, go idle. */
    s->stop_batches = 1;
    atomic_store(&s->raw_stop, 1);
    for (int i = 0; i < AGENTS * RAW_PER_AGENT; i++)
        if (s->raw[i].started) pthread_join(s->raw[i].tid, NULL);
    double drain_deadline = proc_now_ms() + drain_ms;
    for (;;) {
        check_agents(s);
        check_runners(s);
        int busy = 0;
        for (int r = 0; r < AGENTS; r++) busy |= s->run[r].pid > 0 || s->run[r].rerun_at > 0;
        if (!busy || proc_now_ms() > drain_deadline) break;
        proc_sleep_ms(100);
    }
    for (int r = 0; r < AGENTS; r++)
        if (s->run[r].pid > 0) {
            /* Always said (not --quiet): what it was doing is the finding. */
            printf("  sluice run %d (batch %d) still running after %.0f s: killed; the end of its log:\n", r,
                   s->batches[s->run[r].batch].index, drain_ms / 1000);
            char log[450], line[512];
            snprintf(log, sizeof(log), "%.300s/runs/r%d-b%d.log", s->dir, r, s->batches[s->run[r].batch].index);
            FILE *l = fopen(log, "r");
            char last[5][512] = {{0}};
            int nl = 0;
            while (l && fgets(line, sizeof(line), l)) snprintf(last[nl++ % 5], sizeof(last[0]), "%s", line);
            if (l) fclose(l);
            for (int k = nl > 5 ? nl - 5 : 0; k < nl; k++) printf("    | %s", last[k % 5]);
            kill(s->run[r].pid, SIGKILL);
            proc_wait(s->run[r].pid, -1, NULL);
            s->run[r].pid = 0;
        }
    double t_idle = proc_now_ms();
    say(s, "idle (the batches took %.1f s to finish)", (t_idle - t_faults_end) / 1000);
    long long hlen0 = redis_int(s, "HLEN sluice:{d}:grants"), zcard0 = redis_int(s, "ZCARD sluice:{d}:leases");
    long long hlen = hlen0, zcard = zcard0;
    double zero_after = hlen == 0 && zcard == 0 ? 0 : -1;
    double wait_until = proc_now_ms() + (LEASE_S + 5) * 1000.0;
    while (zero_after < 0 && proc_now_ms() < wait_until) {
        proc_sleep_ms(500);
        hlen = redis_int(s, "HLEN sluice:{d}:grants");
        zcard = redis_int(s, "ZCARD sluice:{d}:leases");
        if (hlen == 0 && zcard == 0) zero_after = proc_now_ms() - t_idle;
    }
    long long now_ms = redis_time_ms(s), expired = -1, hlen_swept = hlen, zcard_swept = zcard;
    if (zero_after < 0) {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "ZCOUNT sluice:{d}:leases -inf %lld", now_ms);
        expired = redis_int(s, cmd);
        int swept = sweep_call(s);
        hlen_swept = redis_int(s, "HLEN sluice:{d}:grants");
        zcard_swept = redis_int(s, "ZCARD sluice:{d}:leases");
        if (!swept) say(s, "the sweeping ACQUIRE/SETTLE through agent0 failed");
    }

    /* The ledger. */
    json_t *ledger = mock_fixture_stats(&s->mock, "");
    size_t n = 0;
    double *acc = ledger ? ledger_accepts(ledger, "d", &n) : NULL;
    long long requests = mock_fixture_count(ledger, "deployments/d/requests");
    long long accepted = mock_fixture_count(ledger, "deployments/d/accepted");
    long long n429 = mock_fixture_count(ledger, "deployments/d/status_429");
    long long abandoned = mock_fixture_count(ledger, "deployments/d/abandoned");

    /* Stop the fleet: SIGTERM drains each agent to exit 0. */
    int term_status[AGENTS];
    for (int a = 0; a < AGENTS; a++) {
        term_status[a] = s->agent_up[a] ? sluiced_fixture_stop(&s->agent[a], 0) : -2;
        s->agent_up[a] = 0;
    }
    int mock_status = mock_fixture_stop(&s->mock);

    /* ---- figures ---- */
    double soak_s = (t_faults_end - s->t0) / 1000;
    printf("\n== soak figures (seed %llu, %.1f s of faults and load, then %.1f s to finish the batches) ==\n",
           s->opt.seed, soak_s, (t_idle - t_faults_end) / 1000);
    int per_kind[F__COUNT] = {0};
    for (int i = 0; i < s->nfaults; i++) per_kind[s->faults[i].kind]++;
    printf("  faults: %d:", s->nfaults);
    for (int k = 0; k < F__COUNT; k++) printf(" %s %d", fault_names[k], per_kind[k]);
    printf("\n");
    printf("  mock: %lld requests, %lld accepted, %lld 429s (%.3f %%), %lld abandoned; %.2f accepts/s over the soak "
           "(quota 10.0 or 9.0/s)\n",
           requests, accepted, n429, requests ? 100.0 * (double)n429 / (double)requests : 0.0, abandoned,
           (double)ledger_count(acc, n, s->t0 - s->offset, t_faults_end - s->offset) / soak_s);
    double at = -1, quota = 0;
    size_t cnt = 0;
    double worst = ledger_max_window_ratio(acc, n, WINDOW_MS, -1e12, 1e12, quota_of, s, &at, &cnt, &quota);
    printf("  largest 10 s window: %zu accepts against a quota of %.1f = %.3f x, from %.1f s\n", cnt, quota, worst,
           at < 0 ? -1 : rel_s(s, at + s->offset));
    if (at >= 0) print_faults_near(s, at - 10000, at + WINDOW_MS);
    {
        /* Fixed 10 s slices: accepts against the quota of each. */
        char line[8192];
        size_t used = (size_t)snprintf(line, sizeof(line), "  accepts / quota per 10 s:");
        for (double a = s->t0 - s->offset; a < t_faults_end - s->offset && used < sizeof(line) - 32; a += WINDOW_MS)
            used += (size_t)snprintf(line + used, sizeof(line) - used, " %zu/%.0f",
                                     ledger_count(acc, n, a, a + WINDOW_MS), quota_of(a, a + WINDOW_MS, s));
        printf("%s\n", line);
    }
    {
        /* The shared schedule's reach past now: the callers' wait. */
        char line[8192];
        double worst_reach = 0, worst_at = 0;
        int beyond = 0;
        size_t used = (size_t)snprintf(line, sizeof(line),
                                       "  per 10 s, from agent0's STATUS d: largest schedule reach past now in s "
                                       "(lowest effective_rpm, largest outside_rpm):");
        for (double a = s->t0; a < t_faults_end && used < sizeof(line) - 32; a += WINDOW_MS) {
            double m = -1, e = 1e18, o = -1;
            for (int i = 0; i < s->nreach; i++)
                if (s->reach_t[i] >= a && s->reach_t[i] < a + WINDOW_MS) {
                    m = fmax(m, s->reach_ms[i]);
                    e = fmin(e, s->reach_eff[i]);
                    o = fmax(o, s->reach_out[i]);
                }
            if (m < 0) used += (size_t)snprintf(line + used, sizeof(line) - used, " -");
            else used += (size_t)snprintf(line + used, sizeof(line) - used, " %.0f(%.0f,%.0f)", m / 1000, e, o);
        }
        for (int i = 0; i < s->nreach; i++) {
            if (s->reach_ms[i] > worst_reach) {
                worst_reach = s->reach_ms[i];
                worst_at = s->reach_t[i];
            }
            beyond += s->reach_ms[i] > MAX_WAIT_MS;
        }
        printf("%s\n", line);
        printf("  largest reach %.1f s at %.0f s; %d of %d one-second samples beyond the max wait (%d s: every "
               "acquire shed)\n",
               worst_reach / 1000, rel_s(s, worst_at), beyond, s->nreach, MAX_WAIT_MS / 1000);
    }
    printf("  10 s windows above %.2f x the quota:\n", WINDOW_BOUND);
    int episodes = window_episodes(s, acc, n);
    printf("    %d episode(s)\n", episodes);

    long lines = 0, answered_once = 0, missing = 0, duplicated = 0, in_errors = 0, bad = 0;
    long long reruns = 0;
    json_t *classes = json_object();
    for (int bi = 0; bi < s->nbatches; bi++) {
        batch *b = &s->batches[bi];
        json_t *ids = json_object(), *eids = json_object();
        count_ids(b->out, ids, &bad);
        count_ids(b->errors, eids, &bad);
        FILE *ef = fopen(b->errors, "r");
        char *line = NULL;
        size_t cap = 0;
        while (ef && getline(&line, &cap, ef) > 0) {
            json_t *j = json_loads(line, 0, NULL);
            const char *c = json_string_value(json_object_get(j, "classification"));
            const char *rs = json_string_value(json_object_get(j, "reason"));
            char key[96];
            snprintf(key, sizeof(key), "%s/%s", c ? c : "?", rs ? rs : "?");
            json_t *v = json_object_get(classes, key);
            json_object_set_new(classes, key, json_integer(v ? json_integer_value(v) + 1 : 1));
            json_decref(j);
        }
        free(line);
        if (ef) fclose(ef);
        for (int i = 0; i < b->lines; i++) {
            char id[64];
            snprintf(id, sizeof(id), "r%d-b%d-%d", b->runner, b->index, i);
            json_t *o = json_object_get(ids, id), *e = json_object_get(eids, id);
            long long c = (o ? json_integer_value(o) : 0) + (e ? json_integer_value(e) : 0);
            lines++;
            answered_once += c == 1;
            missing += c == 0;
            duplicated += c > 1;
            in_errors += e != NULL;
        }
        reruns += b->runs - 1;
        json_decref(ids);
        json_decref(eids);
    }
    long long run_exits[4] = {0};
    for (int r = 0; r < AGENTS; r++)
        for (int k = 0; k < 4; k++) run_exits[k] += s->run[r].exits[k];
    printf("  sluice run: %d batches, %ld lines: %ld answered once, %ld missing, %ld more than once, %ld in the errors "
           "files; %lld reruns (resumed); exits: %lld 0, %lld 1, %lld by a signal, %lld other\n",
           s->nbatches, lines, answered_once, missing, duplicated, in_errors, reruns, run_exits[0], run_exits[1],
           run_exits[2], run_exits[3]);
    {
        const char *key;
        json_t *v;
        json_object_foreach(classes, key, v) printf("    errors: %lld %s\n", (long long)json_integer_value(v), key);
    }
    json_decref(classes);
    long long rg = 0, rl = 0, rsh = 0, rc = 0, rok = 0, r429 = 0, rerr = 0, kw = 0, kc = 0, se = 0, shr = 0;
    const char *last_shed = "";
    for (int i = 0; i < AGENTS * RAW_PER_AGENT; i++) {
        rawc *k = &s->raw[i];
        rg += k->grants;
        rl += k->local_grants;
        rsh += k->sheds;
        rc += k->calls;
        rok += k->ok;
        r429 += k->http429;
        rerr += k->errors;
        kw += k->kicked_waiting;
        kc += k->kicked_calling;
        se += k->settle_errors;
        shr += k->shed_rpm;
        if (k->last_shed[0]) last_shed = k->last_shed;
    }
    printf("  raw clients (MAXWAIT %d): %lld grants (%lld local), %lld sheds (%lld rpm%s%s), %lld calls (%lld ok, %lld "
           "429), %lld disconnected while waiting, %lld mid-call, %lld errors, %lld failed settles\n",
           RAW_MAX_WAIT_MS, rg, rl, rsh, shr, last_shed[0] ? "; last: " : "", last_shed, rc, rok, r429, kw, kc, rerr,
           se);
    for (int i = 0; i < AGENTS * RAW_PER_AGENT; i++)
        if (s->raw[i].last_error[0])
            printf("    raw%d-%d last error: %s\n", s->raw[i].agent, s->raw[i].index, s->raw[i].last_error);

    int rss_checked = 0, rss_bad = 0, rss_young = 0;
    printf("  agent RSS (incarnations that lived about %.0f s: %.0f s in, and at their end):\n", 2 * baseline_ms / 1000,
           baseline_ms / 1000);
    for (int i = 0; i < s->ninc; i++) {
        incarnation *c = &s->inc[i];
        if (c->base_t < 0 || c->last_t - c->base_t < baseline_ms - 10000) {
            rss_young++;
            continue;
        }
        double change = (double)(c->last_kb - c->base_kb) / (double)c->base_kb;
        rss_checked++;
        rss_bad += fabs(change) > 0.10;
        printf(
            "    agent%d pid %d: %ld kB at %.0f s, %ld kB at %.0f s (%+.1f %%), largest %lld kB; heap in use %lld -> "
            "%lld kB, %lld trims%s\n",
            c->agent, (int)c->pid, c->base_kb, rel_s(s, c->base_t), c->last_kb, rel_s(s, c->last_t), 100 * change,
            c->max_kb, c->base_heap / 1024, c->last_heap / 1024, c->trims, c->killed ? " [then killed]" : "");
    }
    printf("    (%d shorter incarnations not checked)\n", rss_young);
    double mem_change = s->mem_base > 0 ? (double)(s->mem_last - s->mem_base) / (double)s->mem_base : 0;
    printf("  Redis used_memory: %lld at %.0f s, %lld at %.0f s (%+.1f %%), largest sample %lld\n", s->mem_base,
           rel_s(s, s->mem_base_t), s->mem_last, rel_s(s, s->mem_last_t), 100 * mem_change, s->mem_max);
    printf("  at idle: grants HLEN %lld, leases ZCARD %lld; ", hlen0, zcard0);
    if (zero_after >= 0) printf("both 0 %.1f s after the fleet went idle\n", zero_after / 1000);
    else
        printf("after %d s idle still %lld / %lld (%lld of the leases expired); after one ACQUIRE + SETTLE: %lld / "
               "%lld\n",
               LEASE_S + 5, hlen, zcard, expired, hlen_swept, zcard_swept);

    printf("  agents: %lld injected kills, %lld unexpected exits%s%s\n", s->injected_kills, s->unexpected_exits,
           s->unexpected_exits ? ": " : "", s->unexpected);
    long crashes = 0;
    int term_bad = 0;
    for (int a = 0; a < AGENTS; a++) {
        long e, w, c;
        char first[2048], d[64];
        scan_log(s->agent[a].log, &e, &w, &c, first, sizeof(first));
        describe_status(term_status[a], d, sizeof(d));
        term_bad |= !(term_status[a] >= 0 && WIFEXITED(term_status[a]) && WEXITSTATUS(term_status[a]) == 0);
        crashes += c;
        printf("    agent%d: SIGTERM at the end: %s; log: %ld ERROR, %ld WARN lines, %ld crash lines%s%s", a, d, e, w,
               c, c ? ": " : "", c ? first : "\n");
        top_errors(s->agent[a].log, " ERROR: ");
    }
    char md[64];
    describe_status(mock_status, md, sizeof(md));
    printf("  mock: SIGTERM at the end: %s\n", md);

    printf("\n== invariants ==\n");
    INVARIANT(n429 * 100 <= requests, "<= 1 %% 429s over the soak: %lld of %lld (%.3f %%)", n429, requests,
              requests ? 100.0 * (double)n429 / (double)requests : 0.0);
    INVARIANT(worst <= WINDOW_BOUND, "no 10 s window above %.2f x the quota: largest %.3f x (%d episodes above)",
              WINDOW_BOUND, worst, episodes);
    INVARIANT(lines > 0 && answered_once == lines,
              "every sluice run input answered exactly once: %ld of %ld (%ld missing, %ld duplicated)", answered_once,
              lines, missing, duplicated);
    if (rss_checked == 0)
        SKIPPED("agents' RSS within 10 %% of their value %.0f s in: no agent lived about %.0f s", baseline_ms / 1000,
                2 * baseline_ms / 1000);
    else
        INVARIANT(rss_bad == 0, "agents' RSS within 10 %% of their value %.0f s in: %d of %d", baseline_ms / 1000,
                  rss_checked - rss_bad, rss_checked);
    if (s->mem_base <= 0 || s->mem_last_t - s->mem_base_t < baseline_ms - 10000)
        SKIPPED("Redis used_memory within 10 %% of its value %.0f s in: the soak is too short", baseline_ms / 1000);
    else
        INVARIANT(fabs(mem_change) <= 0.10, "Redis used_memory within 10 %% of its value %.0f s in: %+.1f %%",
                  baseline_ms / 1000, 100 * mem_change);
    INVARIANT(zero_after >= 0, "grants and leases back to 0 with the fleet idle (no calls): %s",
              zero_after >= 0 ? "yes" : "no, see above");
    INVARIANT(s->unexpected_exits == 0 && !term_bad && crashes == 0,
              "no agent crash but the injected kills: %lld unexpected exits, %s at SIGTERM, %ld crash lines",
              s->unexpected_exits, term_bad ? "not all exit 0" : "all exit 0", crashes);
    printf("%s: %d invariant(s) failed, %d not checked (seed %llu)\n", nfail ? "FAIL" : "PASS", nfail, nskip,
           s->opt.seed);

    free(acc);
    json_decref(ledger);
    for (int a = 0; a < AGENTS; a++) relay_stop(s->relay[a]);
    redis_fixture_stop(&s->redis);
    if (!s->opt.keep) proc_rmtree(s->dir);
    else printf("kept %s\n", s->dir);
    curl_global_cleanup();
    return nfail ? 1 : 0;
}
