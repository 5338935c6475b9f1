/* test_sim_fleet: the real engine (lib/core built against uvsim) and the
 * real scripts (with the simulated clock) on virtual time: a fleet of
 * three agents sharing one redis-server.
 *
 * Proves: the same seed gives the same run byte for byte, another seed
 * another run; the fleet never over-offers (the send times replayed
 * through the provider's bucket reject nothing) and uses all of the quota
 * (makespan within 1 % of (N - burst) / rate); a 60-virtual-second run of
 * 300 callers takes under a second of real time (release build; printed
 * always); a release 20 ms early (uvsim's timer skew) is caught by the
 * replay; the fleet survives Redis stopped and restarted empty, and a
 * black-holed agent, without over-offering. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "realtime.h"

#include <hiredis/hiredis.h>

#include "redis_fixture.h"
#include "replay.h"
#include "simfleet.h"
#include "engine.h"
#include "uvsim.h"

static redis_fixture fx;

static int group_setup(void **state) { return redis_fixture_start(&fx, 0); }
static int group_teardown(void **state) {
    redis_fixture_stop(&fx);
    return 0;
}

#define RPM 600
#define BURST 10
static const char *yaml = "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
                          "deployments:\n  gpt:\n    rpm: 600\n    burst: { requests: 10 }\n"
                          "    max_wait_ms: 120000\n";

/* A trivial provider: every call succeeds after 100 ms; the test judges
 * the send times itself (replay). */
typedef struct trivial {
    unsigned long sends;
} trivial;

/* A 200 of 100 input and 50 output tokens, in latency_ms. */
static int answered(trivial *p, sim_outcome *out, double latency_ms) {
    p->sends++;
    out->status = 200;
    out->latency_ms = latency_ms;
    out->input = 100;
    out->output = 50;
    out->cache_read = 0;
    return 0;
}

static int trivial_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    (void)t_ms;
    (void)c;
    return answered(ud, out, 100);
}

static double real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* n callers of the gpt deployment on each of agents agents, asking
 * input 100 + max output 50 from 1000 ms (plus a seeded 0..jitter_ms),
 * calls each, up to 20 attempts, a max wait of 120 s; anonymous: asking
 * without naming themselves (by arrival alone, no turns). */
static void callers_on_each(simfleet *f, int agents, int n, double jitter_ms, int calls, int anonymous) {
    for (int a = 0; a < agents; a++) {
        sim_caller_spec sp = {.agent = a,
                              .deployment = "gpt",
                              .input = 100,
                              .output = 50,
                              .start_ms = 1000,
                              .jitter_ms = jitter_ms,
                              .calls = calls,
                              .max_wait_ms = 120000,
                              .max_attempts = 20,
                              .anonymous = anonymous};
        assert_int_equal(simfleet_add_callers(f, &sp, n), 0);
    }
}

typedef struct run_result {
    uint64_t hash;
    size_t sends, rejects, sheds, errors, throttled;
    double makespan_ms, real_ms;
    int done;
    engine_batch reserve; /* agent 0's reserve batches, learned from the scripts' @timed figure */
    long long tat_ms;     /* the requests schedule in Redis after the run (sluice:{gpt}:state requests_tat) */
    simfleet_stats st;
    engine_stats cut_agent; /* agent 2's engine counters at the end */
} run_result;

enum {
    F_NONE,
    F_REDIS_RESTART, /* Redis stopped at 20 s, restarted empty at 23 s */
    F_BLACKHOLE,     /* agent 1 black-holed 20 s .. 22 s */
    F_CUT,           /* agent 2 cut off 20 s .. 25 s */
    F_DESCHEDULE,    /* agent 0 frozen 20 s .. 20.5 s and 40 s .. 42 s */
    F_KILL,          /* agent 2 killed at 30 s */
    F_SLOW,          /* Redis 2 ms per batch, 50 us per script command, 10 s .. 40 s */
    F_EARLY,         /* mutation: agent 0's release timers 20 ms early */
    F_EARLY_SPREAD,  /* the same, callers arriving over 20 s (grants interleave) */
    F_CUT_HOLD,      /* agent 2 cut off 20 s .. 30 s; agent.fail: hold, a 3 s hold, redis.timeout_ms 5000;
                      * 40 callers an agent arriving over 40 s (a third of the rate: the schedule
                      * ends near now, so a local slot comes before the hold ends) */
};

/* F_CUT_HOLD's configuration: a Redis timeout longer than the others'
 * hold of a silent agent's share (silent_hold_ms 3000). */
static const char *yaml_hold = "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
                               "  fail: hold\n  silent_hold_ms: 3000\n"
                               "deployments:\n  gpt:\n    rpm: 600\n    burst: { requests: 10 }\n"
                               "    max_wait_ms: 120000\n";

/* A provider model for the headers' path: a token bucket of the
 * configured rate and burst that answers 429 (Retry-After) when empty and
 * reports its limit and remaining count as Azure OpenAI does. */
typedef struct bucket_prov {
    double tokens, at_ms;
    unsigned long sends, throttled;
    char remaining[32];
} bucket_prov;

static int bucket_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    bucket_prov *p = ud;
    (void)c;
    p->tokens += (t_ms - p->at_ms) * (RPM / 60000.0);
    if (p->tokens > BURST) p->tokens = BURST;
    p->at_ms = t_ms;
    p->sends++;
    out->latency_ms = 100;
    out->headers[0] = (sim_header){"x-ratelimit-limit-requests", "600"};
    if (p->tokens >= 1 - 1e-9) {
        p->tokens -= 1;
        out->status = 200;
        out->input = 100;
        out->output = 50;
        out->cache_read = 0;
    } else {
        p->throttled++;
        out->status = 429;
        out->latency_ms = 5;
        out->headers[2] = (sim_header){"retry-after", "1"};
        out->nheaders = 3;
    }
    snprintf(p->remaining, sizeof(p->remaining), "%d", (int)p->tokens);
    out->headers[1] = (sim_header){"x-ratelimit-remaining-requests", p->remaining};
    if (!out->nheaders) out->nheaders = 2;
    return 0;
}

static void on_batch(void *ud, const char *kind, const char *name, const engine_batch *b) {
    run_result *res = ud;
    (void)name;
    if (!strcmp(kind, "deployment")) res->reserve = *b;
}

/* 3 agents x 100 callers, 2 calls each, on a 600 RPM deployment with a
 * burst of 10: about 60 virtual seconds of saturation, with one fault. */
static void fleet_run_with(uint64_t seed, int fault, sim_send_fn send, void *ud, run_result *res) {
    trivial prov = {0};
    simfleet_opts o = {.seed = seed,
                       .agents = 3,
                       .redis = &fx,
                       .yaml = fault == F_CUT_HOLD ? yaml_hold : yaml,
                       .redis_timeout_ms = fault == F_CUT_HOLD ? 5000 : 0,
                       .send = send ? send : trivial_send,
                       .send_ud = send ? ud : &prov};
    simfleet *f = NULL;
    double t0 = real_ms();
    assert_int_equal(simfleet_new(&o, &f), 0);
    callers_on_each(f, 3, fault == F_CUT_HOLD ? 40 : 100,
                    fault == F_EARLY_SPREAD ? 20000
                    : fault == F_CUT_HOLD   ? 40000
                                            : 50,
                    2, 0);
    switch (fault) {
    case F_REDIS_RESTART:
        assert_int_equal(simfleet_run_until(f, 20000), 0);
        simfleet_redis_stop(f);
        assert_int_equal(simfleet_run_until(f, 23000), 0);
        assert_int_equal(simfleet_redis_restart(f), 0);
        break;
    case F_BLACKHOLE:
        assert_int_equal(simfleet_run_until(f, 20000), 0);
        simfleet_agent_blackhole(f, 1, 1);
        assert_int_equal(simfleet_run_until(f, 22000), 0);
        simfleet_agent_blackhole(f, 1, 0);
        break;
    case F_CUT:
    case F_CUT_HOLD:
        assert_int_equal(simfleet_run_until(f, 20000), 0);
        simfleet_agent_cut(f, 2, 1);
        assert_int_equal(simfleet_run_until(f, fault == F_CUT ? 25000 : 30000), 0);
        simfleet_agent_cut(f, 2, 0);
        break;
    case F_DESCHEDULE:
        assert_int_equal(simfleet_run_until(f, 20000), 0);
        simfleet_agent_deschedule(f, 0, 500);
        assert_int_equal(simfleet_run_until(f, 40000), 0);
        simfleet_agent_deschedule(f, 0, 2000);
        break;
    case F_KILL:
        assert_int_equal(simfleet_run_until(f, 30000), 0);
        simfleet_agent_kill(f, 2);
        break;
    case F_SLOW:
        assert_int_equal(simfleet_run_until(f, 10000), 0);
        simfleet_redis_slow(f, 2000, 50);
        assert_int_equal(simfleet_run_until(f, 40000), 0);
        simfleet_redis_slow(f, 20, 2);
        break;
    case F_EARLY:
    case F_EARLY_SPREAD: simfleet_agent_timer_skew(f, 0, -20); break;
    default: break;
    }
    res->done = simfleet_run_done(f, 200000);
    assert_true(res->done >= 0);
    res->real_ms = real_ms() - t0;
    res->hash = simfleet_trace_hash(f);
    simfleet_get_stats(f, &res->st);
    size_t n;
    const sim_record *r = simfleet_records(f, &n);
    replay rp;
    replay_init(&rp);
    res->sends = res->sheds = res->errors = res->throttled = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].send_ms >= 0) {
            replay_add(&rp, r[i].send_ms, 1);
            res->sends++;
            if (r[i].status == 429) res->throttled++;
        } else if (r[i].status == 0) {
            res->sheds++;
        } else {
            res->errors++;
        }
    }
    res->rejects = replay_rejections(&rp, BURST, RPM / 60000.0, NULL);
    const char *dump = getenv("SIM_DUMP"); /* SIM_DUMP=<fault>: every record of that run */
    if (dump && atoi(dump) == fault) {
        for (size_t i = 0; i < n; i++)
            printf("rec caller %d agent %d attempt %d acquire %.3f slot %.3f send %.3f done %.3f status %d\n",
                   r[i].caller, r[i].agent, r[i].attempt, r[i].acquire_ms, r[i].slot_ms, r[i].send_ms, r[i].done_ms,
                   r[i].status);
    }
    res->makespan_ms = replay_makespan(&rp);
    replay_free(&rp);
    engine_foreach_batch(simfleet_engine(f, 0), on_batch, res);
    if (simfleet_engine(f, 2)) engine_get_stats(simfleet_engine(f, 2), &res->cut_agent);
    simfleet_free(f);
    redisContext *rc = redis_fixture_connect(&fx);
    assert_non_null(rc);
    redisReply *rr = redisCommand(rc, "HGET sluice:{gpt}:state requests_tat");
    res->tat_ms = rr && rr->type == REDIS_REPLY_STRING ? atoll(rr->str) : -1;
    if (rr) freeReplyObject(rr);
    redisFree(rc);
}

static void fleet_run(uint64_t seed, int fault, run_result *res) { fleet_run_with(seed, fault, NULL, NULL, res); }

static void test_determinism(void **state) {
    run_result a, b, c;
    fleet_run(7, F_NONE, &a);
    fleet_run(7, F_NONE, &b);
    fleet_run(8, F_NONE, &c);
    printf("determinism: seed 7 %016llx twice %016llx, seed 8 %016llx (%zu sends)\n", (unsigned long long)a.hash,
           (unsigned long long)b.hash, (unsigned long long)c.hash, a.sends);
    assert_true(a.hash == b.hash);
    assert_true(a.hash != c.hash);
}

static void test_never_over_offer(void **state) {
    run_result r;
    fleet_run(1, F_NONE, &r);
    double floor_ms = (double)(r.sends - BURST) / (RPM / 60000.0);
    printf("fleet: %zu sends, %zu sheds, %zu errors, %zu rejected by the bucket; makespan %.0f ms, floor %.0f ms "
           "(%.2f %%)\n",
           r.sends, r.sheds, r.errors, r.rejects, r.makespan_ms, floor_ms, 100.0 * r.makespan_ms / floor_ms);
    printf("cost: %.0f ms real for %.1f virtual s (%llu loop turns, %llu Redis batches, %llu commands)\n", r.real_ms,
           simfleet_now_ms() / 1000, r.st.turns, r.st.batches, r.st.commands);
    printf("scripts' clock: requests_tat %lld ms = t %.1f s on the virtual clock (real now: %.0f s later); "
           "reserve batches: %llu calls, %.1f us per item + %.1f us, cap %zu\n",
           r.tat_ms, (double)(r.tat_ms - SIMFLEET_EPOCH_MS) / 1000, (double)time(NULL) - SIMFLEET_EPOCH_MS / 1000.0,
           r.reserve.calls, r.reserve.item_us, r.reserve.fixed_us, r.reserve.cap);
    /* The scripts ran on the simulated clock, not Redis' TIME: the
     * schedule ends at the last send, on the virtual clock. */
    assert_true(llabs(r.tat_ms - (SIMFLEET_EPOCH_MS + (long long)(r.makespan_ms + 1000))) < 5000);
    assert_int_equal(r.done, 1);
    assert_int_equal(r.sends, 600);
    assert_int_equal(r.rejects, 0);
    assert_true(fabs(r.makespan_ms - floor_ms) <= 0.01 * floor_ms);
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
    /* Issue 22: 60 virtual seconds, 3 agents, 300 callers in 1 s (real
     * time: asserted only in the reliability run). */
    assert_realtime(r.real_ms <= 1000, "60 virtual seconds took %.0f ms of real time (bound 1000)", r.real_ms);
#endif
}

/* A release 20 ms early must be caught by the replay: the schedule
 * tolerates lateness (jitter_ms, 10) only. Early on one agent, on every
 * agent (uvsim's global skew: all but the sends granted at once shift
 * together), or on one agent while callers arrive over 20 s (its slots
 * interleave with the others'): the replay rejects a send each time. Only
 * one: a rejected send consumes nothing (a provider's 429), so from there
 * the bucket holds a token the schedule does not count, which absorbs the
 * later early sends (0.2 of a token each). SIM_DUMP=<fault> prints a run's
 * records. */
static void test_early_release_caught(void **state) {
    run_result r, all, spread;
    fleet_run(1, F_EARLY, &r);
    uvsim_set_timer_skew_ms(-20);
    fleet_run(1, F_NONE, &all);
    uvsim_set_timer_skew_ms(0);
    fleet_run(1, F_EARLY_SPREAD, &spread);
    printf("release 20 ms early: on agent 0, %zu of %zu sends rejected by the bucket; on every agent, %zu of %zu; "
           "on agent 0 with callers arriving over 20 s, %zu of %zu\n",
           r.rejects, r.sends, all.rejects, all.sends, spread.rejects, spread.sends);
    assert_true(r.rejects > 0);
    assert_true(all.rejects > 0);
    assert_true(spread.rejects > 0);
}

/* Each fault: the fleet never over-offers, and the same seed replays the
 * same run. */
static void fault_case_into(int fault, const char *what, int all_done, run_result *out) {
    run_result r, again;
    fleet_run(3, fault, &r);
    printf("%s: %zu sends, %zu sheds, %zu errors, %zu rejected; makespan %.0f ms; %.0f ms real\n", what, r.sends,
           r.sheds, r.errors, r.rejects, r.makespan_ms, r.real_ms);
    fleet_run(3, fault, &again);
    assert_int_equal(r.rejects, 0);
    if (all_done) assert_int_equal(r.done, 1);
    assert_true(r.hash == again.hash);
    if (out) *out = r;
}

static void fault_case(int fault, const char *what, int all_done) { fault_case_into(fault, what, all_done, NULL); }

static void test_redis_restart(void **state) {
    fault_case(F_REDIS_RESTART, "Redis stopped at 20 s, restarted empty at 23 s", 1);
}
static void test_blackhole(void **state) { fault_case(F_BLACKHOLE, "agent 1 black-holed 20 s .. 22 s", 1); }
static void test_cut(void **state) { fault_case(F_CUT, "agent 2 cut off 20 s .. 25 s", 1); }
static void test_deschedule(void **state) {
    fault_case(F_DESCHEDULE, "agent 0 frozen 20 s .. 20.5 s and 40 s .. 42 s", 1);
}
static void test_kill(void **state) { fault_case(F_KILL, "agent 2 killed at 30 s", 0); }
static void test_slow_redis(void **state) { fault_case(F_SLOW, "Redis slow (2 ms a batch) 10 s .. 40 s", 1); }

/* agent.fail: hold with a Redis timeout (5 s) longer than the others'
 * hold of its share (3 s), on a deployment used at a third of its rate:
 * the cut-off agent still paces locally until the hold it can count on
 * ends (the send of its latest answered call + the hold), then refuses,
 * and never over-offers. Its local grants prove it: when the last reply
 * less the timeout stood for that send, the hold ended before every reply
 * and every local acquire was refused. */
static void test_cut_hold_long_timeout(void **state) {
    run_result r;
    fault_case_into(F_CUT_HOLD, "agent 2 cut off 20 s .. 30 s, fail: hold, timeout 5 s > hold 3 s", 0, &r);
    printf("  agent 2: %llu local grants, %llu errors\n", r.cut_agent.grants_local, r.cut_agent.errors);
    assert_true(r.cut_agent.grants_local > 0);
}

/* The headers' path: a provider bucket that reports its limit and
 * remaining count (and Retry-After on a 429) as Azure does; the settles
 * carry them through the production parser. A fleet that never
 * over-offers meets no 429. */
static void test_bucket_provider_headers(void **state) {
    bucket_prov p = {.tokens = BURST};
    run_result r;
    fleet_run_with(5, F_NONE, bucket_send, &p, &r);
    double floor_ms = (double)(r.sends - BURST) / (RPM / 60000.0);
    printf("provider bucket with headers: %zu sends, %lu throttled (429), makespan %.0f ms (%.2f %% of the floor)\n",
           r.sends, p.throttled, r.makespan_ms, 100.0 * r.makespan_ms / floor_ms);
    assert_int_equal(p.throttled, 0);
    assert_int_equal(r.rejects, 0);
    assert_true(fabs(r.makespan_ms - floor_ms) <= 0.01 * floor_ms);
}

/* A figure, not a bound: 10 agents x 100 callers x 6 calls at 6000 RPM
 * (burst 100) for a virtual minute: what a virtual minute of a ten-times
 * busier fleet costs in real time. Never over-offers either. */
static void test_scale_figure(void **state) {
    static const char *big = "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
                             "deployments:\n  gpt:\n    rpm: 6000\n    burst: { requests: 100 }\n"
                             "    max_wait_ms: 120000\n";
    trivial prov = {0};
    simfleet_opts o = {.seed = 9, .agents = 10, .redis = &fx, .yaml = big, .send = trivial_send, .send_ud = &prov};
    simfleet *f = NULL;
    double t0 = real_ms();
    assert_int_equal(simfleet_new(&o, &f), 0);
    callers_on_each(f, 10, 100, 50, 6, 0);
    assert_int_equal(simfleet_run_done(f, 200000), 1);
    double ms = real_ms() - t0;
    simfleet_stats st;
    simfleet_get_stats(f, &st);
    size_t n, sends = 0;
    const sim_record *r = simfleet_records(f, &n);
    replay rp;
    replay_init(&rp);
    for (size_t i = 0; i < n; i++)
        if (r[i].send_ms >= 0) {
            replay_add(&rp, r[i].send_ms, 1);
            sends++;
        }
    size_t rejects = replay_rejections(&rp, 100, 6000 / 60000.0, NULL);
    double floor_ms = (double)(sends - 100) / 0.1;
    printf("scale: 10 agents x 100 callers, %zu sends at 6000 RPM in %.1f virtual s (%.2f %% of the floor), %zu "
           "rejected; %.0f ms real (%llu turns, %llu Redis batches)\n",
           sends, simfleet_now_ms() / 1000, 100.0 * replay_makespan(&rp) / floor_ms, rejects, ms, st.turns, st.batches);
    replay_free(&rp);
    simfleet_free(f);
    assert_int_equal(sends, 6000);
    assert_int_equal(rejects, 0);
}

/* One run of lanes "small" (input 50, output 200) and "big" (input 50,
 * output big_output), 8 callers of each on every agent, 40 calls each:
 * the second lane's sends and all sends in the first 20 s. */
static void lanes_case(int agents, long long big_output, size_t *big_out, size_t *all_out) {
    static const char *lanes_yaml = "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
                                    "deployments:\n  gpt:\n    rpm: 6000\n    tpm: 60000\n    horizon_ms: 250\n"
                                    "    max_wait_ms: 300000\n"
                                    "    lanes:\n      small: { priority: 0 }\n      big: { priority: 0 }\n";
    trivial prov = {0};
    simfleet_opts o = {
        .seed = 3, .agents = agents, .redis = &fx, .yaml = lanes_yaml, .send = trivial_send, .send_ud = &prov};
    simfleet *f = NULL;
    assert_int_equal(simfleet_new(&o, &f), 0);
    for (int a = 0; a < agents; a++) {
        sim_caller_spec sp = {.agent = a,
                              .deployment = "gpt",
                              .input = 50,
                              .output = 200,
                              .start_ms = 1000,
                              .jitter_ms = 50,
                              .calls = 40,
                              .max_wait_ms = 300000,
                              .max_attempts = 20,
                              .lane = "small"};
        assert_int_equal(simfleet_add_callers(f, &sp, 8), 0);
        sp.output = big_output;
        sp.lane = "big";
        assert_int_equal(simfleet_add_callers(f, &sp, 8), 0);
    }
    assert_int_equal(simfleet_run_until(f, 21000), 0);
    size_t n, big = 0, all = 0;
    const sim_record *r = simfleet_records(f, &n);
    for (size_t i = 0; i < n; i++) {
        if (r[i].send_ms < 0 || r[i].send_ms > 21000) continue;
        all++;
        big += (r[i].caller % 16) >= 8; /* callers 8..15 of each agent ask 1000 */
    }
    printf("lanes of one priority, %d agents, %lld against 200 output: %zu of %zu sends in the first 20 s from the "
           "second lane\n",
           agents, big_output, big, all);
    simfleet_free(f);
    *big_out = big, *all_out = all;
}

/* Two lanes of one priority on a deployment granting just in time
 * (horizon_ms 250): one asks 250 tokens a request, the other 1000 (more
 * than the bucket's tolerance), both with more demand than the rate. Each
 * lane gets its turn: each has at least 30 % of the sends of the first
 * 20 s (by count; half when they alternate exactly). Judged on its whole
 * slot, the small lane's items took every room a settle made and the
 * large lane waited for the small one's demand to end; judged on the
 * schedule ahead of it with its own span taken as its cost at the rate,
 * the large one (which waits for a full bucket) asked first every time
 * and the small one waited. */
static void test_lanes_of_one_priority_take_turns(void **state) {
    (void)state;
    size_t big, all;
    lanes_case(2, 950, &big, &all);
    assert_true(all > 20);
    assert_true(big * 10 >= all * 3);
    assert_true((all - big) * 10 >= all * 3);
    /* Equal sizes, three agents: at least 40 % each (31 of 69; 22 of 69
     * while the first class of a call that was not full was always the
     * same one). */
    lanes_case(3, 200, &big, &all);
    assert_true(all > 40);
    assert_true(big * 10 >= all * 4);
    assert_true((all - big) * 10 >= all * 4);
}

/* A provider whose answers take 1.2..2 s (the short answers' response
 * times), by caller and attempt. */
static int slow_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    trivial *p = ud;
    (void)t_ms;
    uint64_t z = (uint64_t)(c->caller * 7919 + c->agent * 104729) + (uint64_t)(p->sends + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return answered(p, out, 1200 + (double)(z % 800));
}

/* The oldest request goes first, on any agent: three agents of eight
 * callers each on a deployment granting just in time (horizon_ms 250) at
 * 7.5 requests a second, every caller asking again when its answer (1.2
 * to 2 s) is in. No request is sent ahead of one that has waited 250 ms
 * longer, on seeds 1..5. A class Redis told to ask again asks when its
 * head may be granted; when it asked at its youngest item's time (the
 * latest of the reply's deferrals), another agent's younger request
 * asked first: 38..77 of 192 sends went ahead of a request waiting up to
 * 1.5 s longer, the agents' callers drifted apart, and the last ones'
 * calls ran one response time after another at the end
 * (anthropic-short-24). The callers do not name themselves: by arrival
 * alone, without the turns of test_callers_take_turns (which pass a
 * request ahead of older ones of its own agent and give it their age). */
static void test_oldest_request_goes_first(void **state) {
    (void)state;
    static const char *round_yaml =
        "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
        "deployments:\n  gpt:\n    rpm: 450\n    horizon_ms: 250\n    max_wait_ms: 120000\n";
    for (uint64_t seed = 1; seed <= 5; seed++) {
        trivial prov = {0};
        simfleet_opts o = {
            .seed = seed, .agents = 3, .redis = &fx, .yaml = round_yaml, .send = slow_send, .send_ud = &prov};
        simfleet *f = NULL;
        assert_int_equal(simfleet_new(&o, &f), 0);
        callers_on_each(f, 3, 8, 200, 8, 1);
        assert_int_equal(simfleet_run_done(f, 300000), 1);
        size_t n, inv = 0, sends = 0;
        double worst = 0;
        const sim_record *r = simfleet_records(f, &n);
        for (size_t i = 0; i < n; i++) {
            if (r[i].send_ms < 0) continue;
            sends++;
            for (size_t j = 0; j < n; j++) {
                if (r[j].send_ms < 0 || r[j].acquire_ms >= r[i].acquire_ms - 250 || r[j].send_ms <= r[i].send_ms)
                    continue;
                inv++;
                if (r[i].acquire_ms - r[j].acquire_ms > worst) worst = r[i].acquire_ms - r[j].acquire_ms;
            }
        }
        printf("seed %llu: %zu sends, %zu sent ahead of a request older by 250 ms or more (at most %.0f ms older)\n",
               (unsigned long long)seed, sends, inv, worst);
        simfleet_free(f);
        assert_int_equal(sends, 192);
        assert_int_equal(inv, 0);
    }
}

/* A provider answering caller 0 in 3 s and every other caller in 0.5 s. */
static int one_slow_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    (void)t_ms;
    return answered(ud, out, c->caller == 0 ? 3000 : 500);
}

/* One agent at 2 requests a second, just in time, for the turns' tests;
 * and their callers' spec: 12 calls each from 1 s. */
static simfleet *turn_fleet(uint64_t seed, sim_send_fn send, trivial *prov) {
    static const char *turn_yaml = "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 1000\n"
                                   "deployments:\n  gpt:\n    rpm: 120\n    horizon_ms: 250\n    max_wait_ms: 300000\n";
    simfleet_opts o = {.seed = seed, .agents = 1, .redis = &fx, .yaml = turn_yaml, .send = send, .send_ud = prov};
    simfleet *f = NULL;
    assert_int_equal(simfleet_new(&o, &f), 0);
    return f;
}

static sim_caller_spec turn_callers(void) {
    return (sim_caller_spec){.agent = 0,
                             .deployment = "gpt",
                             .input = 100,
                             .output = 50,
                             .start_ms = 1000,
                             .jitter_ms = 200,
                             .calls = 12,
                             .max_wait_ms = 300000,
                             .max_attempts = 1};
}

/* Callers take turns: one agent, eight callers of 12 calls each at 2
 * requests a second (a turn every 4 s each), one of them answered in 3 s,
 * the others in 0.5 s. By arrival alone the slow one waits as long as the
 * others after each answer, so it makes a call every 6 s where they make
 * one every 3.6 s, and its last calls run alone after theirs, one answer
 * after another: the fleet ends 8..10 s after the quota would have let it
 * (the control: the same callers asking without naming themselves; more
 * than 5 s after). Taking turns, a caller served fewer times than another
 * goes first among those waiting, with the age of the oldest it passed
 * (the wire's waited, which Redis orders by): all end within the quota's
 * time and 2 s (measured: at it), the slow caller within 2 s of the
 * others (0.5 s), on seeds 1..3. */
static void test_callers_take_turns(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        for (int anonymous = 0; anonymous <= 1; anonymous++) {
            trivial prov = {0};
            simfleet *f = turn_fleet(seed, one_slow_send, &prov);
            sim_caller_spec sp = turn_callers();
            sp.anonymous = anonymous;
            assert_int_equal(simfleet_add_callers(f, &sp, 8), 0);
            assert_int_equal(simfleet_run_done(f, 300000), 1);
            size_t n, sends = 0;
            double first = -1, last = 0, slow_last = 0, others_last = 0;
            const sim_record *r = simfleet_records(f, &n);
            for (size_t i = 0; i < n; i++) {
                if (r[i].send_ms < 0) continue;
                sends++;
                if (first < 0 || r[i].send_ms < first) first = r[i].send_ms;
                if (r[i].send_ms > last) last = r[i].send_ms;
                double *l = r[i].caller == 0 ? &slow_last : &others_last;
                if (r[i].send_ms > *l) *l = r[i].send_ms;
            }
            /* The quota's time for the sends past the first second's 2. */
            double quota_ms = (double)(sends - 2) / (120 / 60000.0);
            printf("seed %llu %s: %zu sends in %.1f s (the quota's %.1f s); the slow caller's last %.1f s after "
                   "the others'\n",
                   (unsigned long long)seed, anonymous ? "by arrival" : "in turn", sends, (last - first) / 1000,
                   quota_ms / 1000, (slow_last - others_last) / 1000);
            simfleet_free(f);
            assert_int_equal(sends, 96);
            if (anonymous) {
                assert_true(last - first > quota_ms + 5000);
            } else {
                assert_true(last - first <= quota_ms + 2000);
                assert_true(slow_last - others_last <= 2000);
            }
        }
    }
}

/* A connection carrying many callers' calls at once has as many turns:
 * one agent, eight callers of 12 calls each on their own connections and
 * eight on one (a process that multiplexes its callers on one
 * connection), all answered in 0.1 s, 2 requests a second. Each call
 * counts as a share of its connection's calls out, so the shared
 * connection's callers make their calls as fast as the others (by the
 * time either half is done, the other has made at least 5 in 6 of its
 * calls); counted a whole turn each (the control, by hand), they had
 * made 13 when the others had made all 96. */
static void test_shared_connection_keeps_its_turns(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        trivial prov = {0};
        simfleet *f = turn_fleet(seed, trivial_send, &prov);
        sim_caller_spec sp = turn_callers();
        assert_int_equal(simfleet_add_callers(f, &sp, 8), 0);
        sp.shared_id = 1000;
        assert_int_equal(simfleet_add_callers(f, &sp, 8), 0);
        assert_int_equal(simfleet_run_done(f, 600000), 1);
        size_t n, sends = 0;
        double own_last = 0, shared_last = 0;
        const sim_record *r = simfleet_records(f, &n);
        for (size_t i = 0; i < n; i++) {
            if (r[i].send_ms < 0) continue;
            sends++;
            double *l = r[i].caller < 8 ? &own_last : &shared_last;
            if (r[i].send_ms > *l) *l = r[i].send_ms;
        }
        /* What the other half had sent when the first half was done. */
        double done = own_last < shared_last ? own_last : shared_last;
        size_t own = 0, shared = 0;
        for (size_t i = 0; i < n; i++)
            if (r[i].send_ms >= 0 && r[i].send_ms <= done) (r[i].caller < 8 ? &own : &shared)[0]++;
        printf("seed %llu: %zu sends; when the first half was done (%.1f s) its own connections had made %zu, "
               "the shared one %zu\n",
               (unsigned long long)seed, sends, done / 1000, own, shared);
        simfleet_free(f);
        assert_int_equal(sends, 192);
        assert_true(own * 6 >= 96 * 5 && shared * 6 >= 96 * 5);
    }
}

/* New connections do not pass one that stays: one agent at 2 requests a
 * second, a caller that keeps its connection for 20 calls beside 150
 * callers of one call each on connections of their own, arriving over 60
 * s (2.5 a second, more than the rate: a queue grows). A new caller starts
 * one above the fewest waiting, last in the round, so the kept caller is
 * not passed by the ones that arrive after it: its mean wait is at most
 * theirs, on seeds 1..3 (measured: 4.1 s against 12-14 s). Started at
 * the fewest (one below), measured: 4.1 s against 10-12 s; the guard is
 * that a caller served more often than each new one is not left waiting
 * while new ones keep coming. */
static void test_new_connections_do_not_pass_a_kept_one(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        trivial prov = {0};
        simfleet *f = turn_fleet(seed, trivial_send, &prov);
        sim_caller_spec sp = turn_callers();
        sp.calls = 20;
        assert_int_equal(simfleet_add_callers(f, &sp, 1), 0);
        sp.calls = 1;
        sp.jitter_ms = 60000;
        assert_int_equal(simfleet_add_callers(f, &sp, 150), 0);
        assert_int_equal(simfleet_run_done(f, 600000), 1);
        size_t n, kept = 0, fresh = 0;
        double kept_wait = 0, fresh_wait = 0;
        const sim_record *r = simfleet_records(f, &n);
        for (size_t i = 0; i < n; i++) {
            if (r[i].send_ms < 0) continue;
            double w = r[i].send_ms - r[i].acquire_ms;
            if (r[i].caller == 0) kept++, kept_wait += w;
            else fresh++, fresh_wait += w;
        }
        printf("seed %llu: the kept caller's %zu calls waited %.1f s on average, the %zu new ones' %.1f s\n",
               (unsigned long long)seed, kept, kept_wait / (double)kept / 1000, fresh,
               fresh_wait / (double)fresh / 1000);
        simfleet_free(f);
        assert_int_equal(kept, 20);
        assert_int_equal(fresh, 150);
        assert_true(kept_wait / (double)kept <= fresh_wait / (double)fresh);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_over_offer),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_early_release_caught),
        cmocka_unit_test(test_bucket_provider_headers),
        cmocka_unit_test(test_redis_restart),
        cmocka_unit_test(test_blackhole),
        cmocka_unit_test(test_cut_hold_long_timeout),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_deschedule),
        cmocka_unit_test(test_kill),
        cmocka_unit_test(test_slow_redis),
        cmocka_unit_test(test_scale_figure),
        cmocka_unit_test(test_lanes_of_one_priority_take_turns),
        cmocka_unit_test(test_oldest_request_goes_first),
        cmocka_unit_test(test_callers_take_turns),
        cmocka_unit_test(test_shared_connection_keeps_its_turns),
        cmocka_unit_test(test_new_connections_do_not_pass_a_kept_one),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
