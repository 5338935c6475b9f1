/* simfleet: see simfleet.h. Callers live outside the engines' loops (like
 * the workers of sluiced or the threads of libsluice): their steps are
 * functions scheduled on uvsim's clock, and each caller has at most one
 * step pending, so nothing of theirs is allocated per call. */
#define _GNU_SOURCE
#include "simfleet.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "config.h"
#include "engine.h"
#include "ratelimit.h"
#include "simredis.h"
#include "sluice.h"
#include "timeutil.h"
#include "uvsim.h"

#define EPOCH_US ((uint64_t)SIMFLEET_EPOCH_MS * 1000)
/* The virtual wall clock at t = 0 of the current fleet (one per process). */
static uint64_t epoch_us = EPOCH_US;

typedef struct sim_agent {
    uv_loop_t loop;
    engine *e;
    int killed, stopped;
    int leaving, successor, started;
} sim_agent;

typedef struct caller {
    simfleet *f;
    int id;
    sim_caller_spec spec;
    int calls_left, attempt;
    size_t rec; /* the current attempt's record */
    /* The pending settle. */
    char grant_id[ENGINE_GRANT_ID_MAX];
    usage_rec usage;
    engine_outcome outcome;
    long long pause_ms;
    engine_seen seen;
    int have_seen, status;
    engine_call *call;   /* the acquire in progress, for a cancel */
    unsigned gen;        /* attempts made: a scheduled cancel names its attempt */
    int cancel_sent;     /* this attempt is cancelled once sent */
    unsigned cancel_gen; /* the attempt a scheduled cancel while waiting is for */
} caller;

struct simfleet {
    simfleet_opts o;
    redis_fixture *redis;
    simredis *net;
    sim_agent *agents;
    int nagents;
    caller **callers;
    int ncallers, capcallers, finished;
    sim_record *recs;
    size_t nrecs, caprecs;
    uint64_t rng;
    int failed, closing;
    char dir[256];
};

static uint64_t next_rand(simfleet *f) {
    uint64_t z = (f->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rel_ms(uint64_t us) { return (double)(us - epoch_us) / 1000.0; }
static uint64_t abs_us(double ms) { return epoch_us + (uint64_t)(ms * 1000.0 + 0.5); }
double simfleet_now_ms(void) { return rel_ms(uvsim_now_us()); }

/* A blocking command on the fixture's socket (FLUSHALL, CONFIG SET). */
static int redis_do(redis_fixture *fx, const char *fmt, ...) {
    redisContext *c = redis_fixture_connect(fx);
    if (!c) return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok ? 0 : -1;
}

/* An empty server that never forks to save (a background save would cost
 * real time and a restart would load it). */
static int redis_clean(redis_fixture *fx) {
    if (redis_do(fx, "CONFIG SET save %s", "") != 0) return -1;
    return redis_do(fx, "FLUSHALL");
}

/* ---- records ---------------------------------------------------------------------------- */

static size_t rec_new(simfleet *f, caller *c) {
    if (f->nrecs == f->caprecs) {
        size_t cap = f->caprecs ? 2 * f->caprecs : 1024;
        sim_record *n = realloc(f->recs, cap * sizeof(*n));
        if (!n) abort(); /* a test harness: out of memory ends the test */
        f->recs = n;
        f->caprecs = cap;
    }
    sim_record *r = &f->recs[f->nrecs];
    *r = (sim_record){
        c->id, c->spec.agent, c->attempt, simfleet_now_ms(), -1, -1, -1, -1, 0, "", -1, c->spec.lane, c->spec.tenant,
    };
    return f->nrecs++;
}

const sim_record *simfleet_records(const simfleet *f, size_t *n) {
    *n = f->nrecs;
    return f->recs;
}

uint64_t simfleet_trace_hash(const simfleet *f) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < f->nrecs; i++) {
        const sim_record *r = &f->recs[i];
        long long v[8] = {r->caller,
                          r->agent,
                          r->attempt,
                          (long long)(r->acquire_ms * 1000),
                          (long long)(r->slot_ms * 1000),
                          (long long)(r->send_ms * 1000),
                          (long long)(r->done_ms * 1000),
                          r->status};
        const unsigned char *p = (const unsigned char *)v;
        for (size_t k = 0; k < sizeof(v); k++) h = (h ^ p[k]) * 0x100000001b3ull;
    }
    return h;
}

/* ---- callers ------------------------------------------------------------------------------ */

static void caller_acquire(void *arg);

/* The current call is over (done, or out of attempts): the next one. */
static void caller_next_call(caller *c) {
    simfleet *f = c->f;
    c->attempt = 1;
    if (--c->calls_left <= 0) {
        f->finished++;
        return;
    }
    uvsim_at(uvsim_now_us() + (uint64_t)(c->spec.think_ms * 1000), caller_acquire, c);
}

/* Tries the current call again after wait_ms, or gives it up. */
static void caller_retry(caller *c, double wait_ms) {
    int max = c->spec.max_attempts > 0 ? c->spec.max_attempts : 1;
    if (c->attempt >= max) {
        caller_next_call(c);
        return;
    }
    c->attempt++;
    uvsim_at(uvsim_now_us() + (uint64_t)(wait_ms * 1000), caller_acquire, c);
}

static void caller_settle(void *arg) {
    caller *c = arg;
    simfleet *f = c->f;
    if (f->closing) return;
    sim_agent *a = &f->agents[c->spec.agent];
    f->recs[c->rec].done_ms = simfleet_now_ms();
    if (c->cancel_sent) {
        /* The caller gave up on a sent request: nobody says what it used. */
        usage_rec none = {-1, -1, -1, -1, -1};
        if (!a->killed) engine_settle_usage(a->e, c->grant_id, &none, ENGINE_CANCELLED, -1, NULL);
        caller_next_call(c);
        return;
    }
    if (!a->killed && !a->leaving)
        engine_settle_usage(a->e, c->grant_id, &c->usage, c->outcome, c->pause_ms, c->have_seen ? &c->seen : NULL);
    if (c->status == 429 || c->status >= 500) caller_retry(c, 0);
    else caller_next_call(c);
}

/* A cancel while waiting, if the attempt it names is still waiting. */
static void caller_cancel(void *arg) {
    caller *c = arg;
    simfleet *f = c->f;
    if (f->closing || c->cancel_gen != c->gen || !c->call || f->agents[c->spec.agent].killed) return;
    engine_cancel(c->call);
    c->call = NULL;
    f->recs[c->rec].status = -2;
    f->recs[c->rec].done_ms = simfleet_now_ms();
    caller_next_call(c);
}

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    caller *c = arg;
    simfleet *f = c->f;
    (void)msg;
    c->call = NULL;
    if (f->closing) return;
    sim_record *r = &f->recs[c->rec];
    r->sl_status = status;
    if (status == SL_ESHED) {
        r->status = 0;
        r->done_ms = simfleet_now_ms();
        r->shed_reason = shed->reason;
        r->retry_after_ms = shed->retry_after_ms;
        caller_retry(c, shed->retry_after_ms > 0 ? (double)shed->retry_after_ms : 1);
        return;
    }
    if (status != SL_OK) {
        r->status = -1;
        r->done_ms = simfleet_now_ms();
        caller_retry(c, 100);
        return;
    }
    double now = simfleet_now_ms();
    r->slot_ms = r->acquire_ms + (double)g->waited_ms;
    r->send_ms = now;
    sim_call call = {.caller = c->id,
                     .agent = c->spec.agent,
                     .attempt = c->attempt,
                     .deployment = g->deployment,
                     .grant_id = g->id,
                     .input = c->spec.input,
                     .output = c->spec.output,
                     .acquire_ms = r->acquire_ms,
                     .cancelled = c->cancel_sent};
    sim_outcome out;
    memset(&out, 0, sizeof(out));
    out.input = out.output = out.cache_read = -1;
    if (f->o.send(f->o.send_ud, now, &call, &out) != 0) {
        f->failed = 1;
        return;
    }
    r->status = out.status;
    snprintf(c->grant_id, sizeof(c->grant_id), "%s", g->id);
    c->status = out.status;
    c->outcome = out.status == 429 ? ENGINE_THROTTLED : out.status >= 400 ? ENGINE_FAILED : ENGINE_OK;
    long long tokens = out.input >= 0 && out.output >= 0 ? out.input + out.output : -1;
    c->usage = (usage_rec){tokens, out.input, out.output, out.cache_read, -1};
    /* The headers as sluiced reads a SETTLE's (agent/commands.c), at the
     * virtual wall time the response ends. */
    c->pause_ms = -1;
    c->have_seen = out.nheaders > 0;
    engine_seen_init(&c->seen);
    if (out.nheaders) {
        ratelimit_feedback fb;
        ratelimit_init(&fb, -1);
        int64_t at = (int64_t)(epoch_us / 1000) + (int64_t)(now + out.latency_ms);
        for (size_t i = 0; i < out.nheaders && i < SIMFLEET_MAX_HEADERS; i++)
            ratelimit_add_header(&fb, out.headers[i].name, strlen(out.headers[i].name), out.headers[i].value,
                                 strlen(out.headers[i].value), at);
        engine_seen_from_feedback(&fb, &c->seen);
        c->pause_ms = ratelimit_settle_pause_ms(&fb, c->outcome == ENGINE_THROTTLED, NULL);
        if (c->pause_ms > SLUICE_PAUSE_MAX_MS) c->pause_ms = SLUICE_PAUSE_MAX_MS;
    }
    double latency = c->cancel_sent ? out.latency_ms / 2 : out.latency_ms;
    uvsim_at(uvsim_now_us() + (uint64_t)(latency * 1000), caller_settle, c);
}

static void caller_acquire(void *arg) {
    caller *c = arg;
    simfleet *f = c->f;
    if (f->closing) return;
    sim_agent *a = &f->agents[c->spec.agent];
    if (a->leaving) {
        /* Its agent left: the caller's client reconnects elsewhere. */
        int to = a->successor;
        if (to < 0) {
            int live[64], n = 0;
            for (int i = 0; i < f->nagents; i++)
                if (!f->agents[i].leaving && !f->agents[i].killed && f->agents[i].started) live[n++] = i;
            to = n ? live[c->id % n] : -1;
        }
        if (to >= 0) {
            c->spec.agent = to;
            a = &f->agents[to];
        }
    }
    c->rec = rec_new(f, c);
    if (a->killed) {
        /* Its agent is gone: the caller's worker went with it. */
        f->recs[c->rec].status = -1;
        f->recs[c->rec].sl_status = SL_EUNAVAIL;
        f->finished++;
        return;
    }
    engine_req rq = {.name = c->spec.deployment,
                     .tokens = c->spec.input + c->spec.output,
                     .max_wait_ms = c->spec.max_wait_ms,
                     .lane = c->spec.lane,
                     .tenant = c->spec.tenant,
                     .client = c->spec.client,
                     .split = 1,
                     .input = c->spec.input,
                     .output = c->spec.output,
                     .caller = c->spec.anonymous   ? 0
                               : c->spec.shared_id ? c->spec.shared_id
                                                   : (unsigned long long)c->id + 1};
    c->gen++;
    c->cancel_sent = 0;
    int cancel_wait = 0;
    if (c->spec.cancel_permille > 0 && (int)(next_rand(f) % 1000) < c->spec.cancel_permille) {
        if (next_rand(f) % 2) c->cancel_sent = 1;
        else cancel_wait = 1;
    }
    c->call = NULL;
    int rc = engine_acquire_req(a->e, &rq, on_acquired, c, &c->call);
    if (rc == 0 && cancel_wait) {
        c->cancel_gen = c->gen;
        long long mw = c->spec.max_wait_ms > 0 ? c->spec.max_wait_ms : 1000;
        uvsim_at(uvsim_now_us() + (uint64_t)(next_rand(f) % (uint64_t)(mw * 1000)), caller_cancel, c);
    }
    if (rc != 0) {
        f->recs[c->rec].status = -1;
        f->recs[c->rec].sl_status = rc;
        f->recs[c->rec].done_ms = simfleet_now_ms();
        caller_retry(c, 100);
    }
}

int simfleet_add_callers(simfleet *f, const sim_caller_spec *spec, int n) {
    if (spec->agent < 0 || spec->agent >= f->nagents || spec->calls <= 0) return -1;
    for (int i = 0; i < n; i++) {
        if (f->ncallers == f->capcallers) {
            int cap = f->capcallers ? 2 * f->capcallers : 64;
            caller **nc = realloc(f->callers, (size_t)cap * sizeof(*nc));
            if (!nc) return -1;
            f->callers = nc;
            f->capcallers = cap;
        }
        caller *c = calloc(1, sizeof(*c));
        if (!c) return -1;
        c->f = f;
        c->id = f->ncallers;
        c->spec = *spec;
        c->calls_left = spec->calls;
        c->attempt = 1;
        f->callers[f->ncallers++] = c;
        double jit = spec->jitter_ms > 0 ? (double)(next_rand(f) % 1000000) / 1e6 * spec->jitter_ms : 0;
        uint64_t at = abs_us(spec->start_ms + jit);
        uvsim_at(at, caller_acquire, c);
    }
    return 0;
}

/* ---- the fleet ------------------------------------------------------------------------------ */

static void agent_start(void *arg) {
    sim_agent *a = arg;
    a->started = 1;
    engine_start(a->e);
}

int simfleet_new(const simfleet_opts *o, simfleet **out) {
    *out = NULL;
    if (o->agents < 1 || o->agents > 64 || !o->redis || !o->send) return -1;
    signal(SIGPIPE, SIG_IGN);
    simfleet *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    f->o = *o;
    f->redis = o->redis;
    f->rng = o->seed;
    epoch_us = o->epoch_ms > 0 ? (uint64_t)o->epoch_ms * 1000 : EPOCH_US;
    uvsim_reset(epoch_us, o->seed);
    if (redis_clean(f->redis) != 0) {
        free(f);
        return -1;
    }
    snprintf(f->dir, sizeof(f->dir), "%s", f->redis->dir);
    simredis_opts so = {f->redis->sock, f->dir, o->seed, o->rtt_min_us, o->rtt_max_us, 0, 0};
    if (simredis_new(&so, &f->net) != 0) {
        free(f);
        return -1;
    }
    f->agents = calloc((size_t)o->agents, sizeof(*f->agents));
    if (!f->agents) {
        simfleet_free(f);
        return -1;
    }
    for (int i = 0; i < o->agents; i++) {
        sim_agent *a = &f->agents[i];
        uv_loop_init(&a->loop);
        f->nagents++;
        char path[300], id[32], err[512];
        if (simredis_agent(f->net, &a->loop, path, sizeof(path)) != i) {
            simfleet_free(f);
            return -1;
        }
        size_t cap = strlen(o->yaml) + 1024;
        char *text = malloc(cap);
        if (!text) {
            simfleet_free(f);
            return -1;
        }
        snprintf(text, cap, "redis:\n  url: unix://%s\n  timeout_ms: %lld\n%s", path,
                 o->redis_timeout_ms > 0 ? o->redis_timeout_ms : 250, o->yaml);
        config *cfg = NULL;
        int rc = config_load_string("simfleet", text, strlen(text), &cfg, err, sizeof(err));
        free(text);
        snprintf(id, sizeof(id), "agent-%d", i);
        if (rc != 0 || engine_new(&a->loop, cfg, id, &a->e) != 0) {
            if (rc != 0) fprintf(stderr, "simfleet: config: %s\n", err);
            config_free(cfg);
            simfleet_free(f);
            return -1;
        }
        a->successor = -1;
        if (o->start_at_ms && o->start_at_ms[i] > 0) uvsim_at(abs_us(o->start_at_ms[i]), agent_start, a);
        else agent_start(a);
    }
    *out = f;
    return 0;
}

int simfleet_run_until(simfleet *f, double t_ms) {
    if (uvsim_run_until(abs_us(t_ms)) != 0) return -1;
    return f->failed ? -1 : 0;
}

int simfleet_run_done(simfleet *f, double t_ms) {
    /* Steps of 100 virtual ms: the check costs nothing next to a step. */
    for (double t = simfleet_now_ms(); f->finished < f->ncallers; t += 100) {
        if (t > t_ms) t = t_ms;
        if (simfleet_run_until(f, t) != 0) return -1;
        if (t >= t_ms) break;
    }
    return f->finished >= f->ncallers;
}

struct engine *simfleet_engine(simfleet *f, int agent) {
    return agent >= 0 && agent < f->nagents ? f->agents[agent].e : NULL;
}

/* ---- faults --------------------------------------------------------------------------------- */

int simfleet_redis_stop(simfleet *f) {
    redis_fixture_kill(f->redis, 1);
    simredis_redis_down(f->net);
    return 0;
}

int simfleet_redis_restart(simfleet *f) {
    if (redis_fixture_restart(f->redis) != 0 || redis_clean(f->redis) != 0) return -1;
    simredis_redis_up(f->net);
    return 0;
}

void simfleet_redis_rtt(simfleet *f, uint32_t rtt_min_us, uint32_t rtt_max_us) {
    simredis_set_rtt(f->net, rtt_min_us, rtt_max_us);
}

void simfleet_redis_slow(simfleet *f, uint32_t service_us, uint32_t cmd_us) {
    simredis_set_service(f->net, service_us, cmd_us);
}

void simfleet_agent_cut(simfleet *f, int agent, int on) {
    if (agent >= 0 && agent < f->nagents && !f->agents[agent].killed) simredis_cut(f->net, agent, on);
}

void simfleet_agent_blackhole(simfleet *f, int agent, int on) { simredis_blackhole(f->net, agent, on); }

void simfleet_agent_deschedule(simfleet *f, int agent, double ms) {
    if (agent >= 0 && agent < f->nagents && !f->agents[agent].killed)
        uvsim_loop_freeze(&f->agents[agent].loop, uvsim_now_us() + (uint64_t)(ms * 1000));
}

void simfleet_agent_kill(simfleet *f, int agent) {
    if (agent < 0 || agent >= f->nagents) return;
    f->agents[agent].killed = 1;
    simredis_cut(f->net, agent, 1);
    uvsim_loop_freeze(&f->agents[agent].loop, UINT64_MAX);
}

void simfleet_agent_timer_skew(simfleet *f, int agent, double ms) {
    if (agent >= 0 && agent < f->nagents) uvsim_loop_timer_skew_ms(&f->agents[agent].loop, (int64_t)ms);
}

void simfleet_get_stats(const simfleet *f, simfleet_stats *out) {
    simredis_stats rs;
    simredis_get_stats(f->net, &rs);
    *out = (simfleet_stats){uvsim_turns(), rs.batches, rs.commands, rs.connects};
}

static void on_engine_stopped(void *arg) { ((sim_agent *)arg)->stopped = 1; }

void simfleet_agent_leave(simfleet *f, int agent, int successor) {
    if (agent < 0 || agent >= f->nagents) return;
    sim_agent *a = &f->agents[agent];
    if (a->killed || a->leaving || !a->started) return;
    a->leaving = 1;
    a->successor = successor;
    engine_stop(a->e, on_engine_stopped, a);
}

void simfleet_free(simfleet *f) {
    if (!f) return;
    f->closing = 1;
    for (int i = 0; i < f->nagents; i++) {
        sim_agent *a = &f->agents[i];
        if (!a->e || a->leaving) continue;
        if (!a->started) {
            a->stopped = 1; /* never started: nothing to stop */
            continue;
        }
        if (a->killed) uvsim_loop_freeze(&a->loop, 0); /* still cut: its goodbye reaches nobody */
        engine_stop(a->e, on_engine_stopped, a);
    }
    /* Virtual time for the stops (cancelled grants go back to Redis). */
    for (int k = 0; k < 600; k++) {
        int open = 0;
        for (int i = 0; i < f->nagents; i++) open += uvsim_loop_handles(&f->agents[i].loop);
        if (!open) break;
        if (uvsim_run_until(uvsim_now_us() + 100000) != 0) break;
    }
    for (int i = 0; i < f->nagents; i++) {
        sim_agent *a = &f->agents[i];
        if (a->e && a->stopped) engine_free(a->e);
        if (uv_loop_close(&a->loop) != 0) {
            fprintf(stderr, "simfleet: agent %d left handles open\n", i);
            uvsim_loop_discard(&a->loop);
        }
    }
    simredis_free(f->net);
    for (int i = 0; i < f->ncallers; i++) free(f->callers[i]);
    free(f->callers);
    free(f->agents);
    free(f->recs);
    free(f);
}
