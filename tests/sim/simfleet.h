/* simfleet: a fleet of real engines (lib/core, built against uvsim) on
 * virtual time, sharing one real redis-server that runs the real scripts
 * with a simulated clock (simredis), with callers that acquire, send to a
 * provider model and settle as production callers do.
 *
 * Each engine is configured from YAML text through lib/core/config.h (the
 * production parser), its redis.url pointing at its own simredis socket.
 * A caller makes `calls` calls one after another: engine_acquire_req();
 * when released at its slot, the provider model's send() says what came
 * back (status, latency, usage, response headers); at t + latency the
 * caller settles with engine_settle_usage(), the headers read by the
 * production parser (lib/http/ratelimit.h, engine_seen_from_feedback) as
 * sluiced reads them (agent/commands.c). A shed or a 429 is tried again
 * (after the shed's retry-after hint, or at once) up to max_attempts.
 *
 * Every random choice comes from the seed (round trips, Redis' order is
 * the simulator's, callers' start offsets): the same seed gives the same
 * records, byte for byte (simfleet_trace_hash).
 *
 * Times given and reported are virtual ms since the fleet's start; the
 * virtual wall clock (what headers' dates and Redis' clock read) is
 * the fleet's epoch (SIMFLEET_EPOCH_MS unless opts.epoch_ms) + t.
 *
 * Callers live outside the engines' loops, like sluiced's clients: a
 * caller's acquire or settle runs the engine's entry point at once, and
 * what the engine does with it waits for its loop's next turn (for a
 * descheduled engine, until it thaws).
 *
 * One fleet per process at a time (uvsim is process-wide). */
#ifndef SLUICE_SIMFLEET_H
#define SLUICE_SIMFLEET_H

#include <stddef.h>
#include <stdint.h>

#include "redis_fixture.h"

/* 2026-01-01T00:00:00Z: the virtual wall clock at t = 0. */
#define SIMFLEET_EPOCH_MS 1767225600000LL
#define SIMFLEET_MAX_HEADERS 16

typedef struct simfleet simfleet;

typedef struct sim_header {
    const char *name, *value;
} sim_header;

/* One call as the provider sees it. Strings are valid during send(). */
typedef struct sim_call {
    int caller, agent, attempt; /* attempt: 1 for the first try */
    const char *deployment;     /* the deployment the grant is on */
    const char *grant_id;
    long long input, output; /* the caller's estimate (max output) */
    double acquire_ms;       /* when this attempt asked */
    int cancelled;           /* the caller cancels it once sent (sim_caller_spec.cancel_permille) */
} sim_call;

/* What the provider answered; send() fills it. Header strings need to be
 * valid only until send() returns. usage: -1 where unknown. */
typedef struct sim_outcome {
    int status;        /* 200, 429, 5xx */
    double latency_ms; /* from the send to the response's end (settle) */
    long long input, output, cache_read;
    size_t nheaders;
    sim_header headers[SIMFLEET_MAX_HEADERS];
} sim_outcome;

/* The provider model (tests/sim/world.h plugs in here). t_ms: the send
 * time. Returns 0, or -1 to fail the run (simfleet_run_until returns -1). */
typedef int (*sim_send_fn)(void *ud, double t_ms, const sim_call *c, sim_outcome *out);

typedef struct simfleet_opts {
    uint64_t seed;
    int agents;                 /* engines, 1..64 */
    redis_fixture *redis;       /* a started server; FLUSHALLed by simfleet_new */
    const char *yaml;           /* agent: and deployments: sections; simfleet adds redis: */
    long long redis_timeout_ms; /* redis.timeout_ms (0: 250) */
    sim_send_fn send;
    void *send_ud;
    uint32_t rtt_min_us, rtt_max_us; /* 0, 0: 200..1000 us */
    /* The virtual wall clock at t = 0 in Unix ms (0: SIMFLEET_EPOCH_MS),
     * so a world whose day starts elsewhere shares the fleet's clock. */
    int64_t epoch_ms;
    /* When each agent starts (virtual ms; NULL or 0: at once): an agent
     * that joins the fleet later (its engine created, not yet started). */
    const double *start_at_ms;
} simfleet_opts;

typedef struct sim_caller_spec {
    int agent; /* the engine it asks */
    const char *deployment;
    long long input, output; /* estimate: input, max output */
    double start_ms;         /* the first acquire (plus a seeded 0..jitter_ms) */
    double jitter_ms;
    int calls;                 /* calls, one after another */
    double think_ms;           /* between a call's end and the next */
    long long max_wait_ms;     /* -1: the deployment's */
    int max_attempts;          /* tries per call (shed, 429, error); 0: 1 */
    const char *lane, *tenant; /* NULL: the default lane, tenant (borrowed for the run) */
    const char *client;        /* NULL: none (engine_req.client; borrowed for the run) */
    /* Cancels, per mille of attempts (from the seed): half of them while
     * waiting for the slot (engine_cancel at a time drawn in the max
     * wait; the grant wins a tie), half after the send (the provider
     * already has it: send() is told with sim_call.cancelled set, and the
     * caller settles it cancelled without usage). */
    int cancel_permille;
    /* Asks without naming itself (engine_req.caller 0): its calls go by
     * their arrival alone, as before callers took turns. */
    int anonymous;
    /* Names this id instead of its own (callers naming one id are one
     * connection carrying several callers' calls at once). */
    unsigned long long shared_id;
} sim_caller_spec;

/* One attempt. Times in virtual ms since the start; -1 when it did not
 * happen. */
typedef struct sim_record {
    int caller, agent, attempt;
    double acquire_ms;
    double slot_ms; /* acquire + the grant's waited_ms */
    double send_ms; /* released (and sent) */
    double done_ms; /* settled, or shed / failed */
    int status;     /* HTTP status; 0: shed; -1: an acquire error; -2: cancelled while waiting */
    int sl_status;  /* the acquire's SL_* status */
    const char *shed_reason;
    long long retry_after_ms;  /* a shed's hint, -1 otherwise */
    const char *lane, *tenant; /* the caller's (NULL: the default; borrowed) */
} sim_record;

int simfleet_new(const simfleet_opts *o, simfleet **out);

/* n callers with spec (all on spec->agent). Returns 0 or -1. */
int simfleet_add_callers(simfleet *f, const sim_caller_spec *spec, int n);

/* Runs until virtual t_ms. Returns 0, or -1 (a livelock, send() failed). */
int simfleet_run_until(simfleet *f, double t_ms);

/* Runs until every caller made all its calls or t_ms passed; returns 1
 * when they all did, 0 when time ran out, -1 as simfleet_run_until. */
int simfleet_run_done(simfleet *f, double t_ms);

double simfleet_now_ms(void);

/* The records, in the order attempts began (borrowed). */
const sim_record *simfleet_records(const simfleet *f, size_t *n);

/* FNV-1a over every record's caller, agent, attempt, times (us) and
 * status: equal for equal runs. */
uint64_t simfleet_trace_hash(const simfleet *f);

/* Faults, at the current virtual time (run to it first). Redis stopped
 * (SIGKILL) and started again empty; slow (per batch service time, per
 * command modelled time in the scripts); an agent cut off (on/off),
 * black-holed (on/off), descheduled (its loop frozen for ms) or killed
 * (frozen and cut for good: no settles, no goodbye). */
int simfleet_redis_stop(simfleet *f);
int simfleet_redis_restart(simfleet *f);
void simfleet_redis_slow(simfleet *f, uint32_t service_us, uint32_t cmd_us);
void simfleet_redis_rtt(simfleet *f, uint32_t rtt_min_us, uint32_t rtt_max_us);
void simfleet_agent_cut(simfleet *f, int agent, int on);
void simfleet_agent_blackhole(simfleet *f, int agent, int on);
void simfleet_agent_deschedule(simfleet *f, int agent, double ms);
void simfleet_agent_kill(simfleet *f, int agent);
/* A graceful leave (engine_stop: its waiting callers answered
 * SL_ECLOSING, its heartbeats deregistered). Its callers then ask
 * successor, or (successor < 0) the agents still running, spread by
 * caller id, as clients behind a load balancer would. */
void simfleet_agent_leave(simfleet *f, int agent, int successor);

/* A mutation for tests: the agent's timers longer than |ms| fire ms from
 * their due time (negative: early), as a release timer gone wrong would. */
void simfleet_agent_timer_skew(simfleet *f, int agent, double ms);

/* What the run cost: loop turns, batches and commands Redis ran. */
typedef struct simfleet_stats {
    unsigned long long turns, batches, commands, connects;
} simfleet_stats;
void simfleet_get_stats(const simfleet *f, simfleet_stats *out);

/* The engine of an agent (borrowed; for stats and status). */
struct engine *simfleet_engine(simfleet *f, int agent);

/* Stops every engine (killed ones cut off from Redis), frees everything.
 * NULL is a no-op. */
void simfleet_free(simfleet *f);

#endif
