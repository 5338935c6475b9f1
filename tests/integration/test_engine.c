/* test_engine: the agent engine on a libuv loop against a real redis-server.
 *
 * Proves coalescing (Redis calls per grant well under 1 with many callers),
 * release at the slot with zero over-offer on a bucket replay of the
 * release times, cancellation giving the reservation back, local fallback
 * at the agent's share (1 / live agents, from the heartbeats) when Redis is
 * killed, rejoining when it returns, and transparent script reload after
 * FLUSHALL. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <uv.h>

#include "config.h"
#include "costmodel.h"
#include "engine.h"
#include "engine_status.h"
#include "redis_fixture.h"
#include "loop.h"
#include "realtime.h"
#include "replay.h"
#include "script_call.h"
#include "sluice.h"

static redis_fixture fx;

static int group_setup(void **state) { return redis_fixture_start(&fx, 0); }
static int group_teardown(void **state) {
    redis_fixture_stop(&fx);
    return 0;
}

/* fallback_share 0.9 is the share before any heartbeat was seen; it differs
 * from the share the heartbeats give in the fallback test (1/3), so a
 * fallback that ignored them would show. */
/* max_script_ms: redis.max_script_ms as written, NULL for its default. */
/* The configuration text, loaded; fails the test when it does not load. */
static config *config_of(const char *text) {
    char err[512];
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    return cfg;
}

static config *make_config_bound(const char *max_script_ms, const char *deployments) {
    char text[4096];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  timeout_ms: 300\n  connect_timeout_ms: 300\n%s%s%s"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n  fallback_share: 0.9\n"
             "deployments:\n%s",
             fx.sock, max_script_ms ? "  max_script_ms: " : "", max_script_ms ? max_script_ms : "",
             max_script_ms ? "\n" : "", deployments);
    return config_of(text);
}

typedef struct world {
    uv_loop_t loop;
    engine *e;
    int done_count, target;
    uv_timer_t stopper;
} world;

static void on_stopped(void *arg) { (void)arg; }

static void world_init_cfg(world *w, config *cfg, const char *agent) {
    memset(w, 0, sizeof(*w));
    uv_loop_init(&w->loop);
    assert_int_equal(engine_new(&w->loop, cfg, agent, &w->e), 0);
    engine_start(w->e);
}

static void world_init_bound(world *w, const char *max_script_ms, const char *deployments, const char *agent) {
    world_init_cfg(w, make_config_bound(max_script_ms, deployments), agent);
}

static void world_init(world *w, const char *deployments, const char *agent) {
    world_init_bound(w, NULL, deployments, agent);
}

static void world_close(world *w) {
    engine_stop(w->e, on_stopped, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    engine_free(w->e);
    assert_int_equal(uv_loop_close(&w->loop), 0);
}

/* Runs the loop until pred(w) holds or ms pass (tests/support/loop.h). */
typedef struct until_arg {
    world *w;
    int (*pred)(world *);
} until_arg;
static int until_done(void *a) { return ((until_arg *)a)->pred(((until_arg *)a)->w); }
static int run_until(world *w, int (*pred)(world *), uint64_t ms) {
    until_arg u = {w, pred};
    return loop_run_until(&w->loop, until_done, &u, ms);
}

static int connected(world *w) {
    engine_stats s;
    engine_get_stats(w->e, &s);
    return s.redis_up;
}

static int all_done(world *w) { return w->done_count >= w->target; }

/* STATUS of one deployment (tests/support/engine_status.h). */
static void status_field(world *w, const char *dep, const char *field, char *out, size_t n) {
    engine_status_field(&w->loop, w->e, dep, field, out, n);
}

/* Waits (running the loop) until STATUS field equals want, for at most
 * ms; fails the test naming what it waited for. */
static void wait_status(world *w, const char *dep, const char *field, const char *want, uint64_t ms) {
    char v[128];
    if (!engine_status_wait(&w->loop, w->e, dep, field, want, ms, v, sizeof(v)))
        fail_msg("STATUS %s %s is \"%s\" after %llu ms, waited for \"%s\"", dep, field, v, (unsigned long long)ms,
                 want);
}

/* ---- acquires ----------------------------------------------------------- */

typedef struct acq {
    world *w;
    int status;
    engine_grant g;
    char reason[16];
    uint64_t at;      /* uv_now at the callback */
    uint64_t planned; /* the release the engine planned (engine_grant.planned_ms) */
    int called;
} acq;

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    acq *a = arg;
    a->status = status;
    a->called++;
    a->at = uv_now(&a->w->loop);
    if (g) {
        a->g = *g;
        a->planned = g->planned_ms;
        assert_true(g->planned_ms <= a->at); /* released at its plan or later, never earlier */
    }
    if (shed) snprintf(a->reason, sizeof(a->reason), "%s", shed->reason);
    a->w->done_count++;
}

/* n callers of one loop turn acquire dep; returns when all are answered
 * (10 s at most) with the latest release. Each was granted once; its
 * planned release is added to *rp (initialised here): the governor's
 * decision, which a loaded machine does not move (a late timer bunches
 * callbacks that were planned apart); *t0 is when they asked. */
static uint64_t burst_of(world *w, const char *dep, acq *a, int n, replay *rp, uint64_t *t0) {
    w->target = n;
    *t0 = uv_now(&w->loop);
    for (int i = 0; i < n; i++) {
        a[i] = (acq){.w = w};
        assert_int_equal(engine_acquire(w->e, dep, 0, 60000, NULL, NULL, on_acquired, &a[i], NULL), 0);
    }
    assert_true(run_until(w, all_done, 10000));
    replay_init(rp);
    uint64_t last = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(a[i].status, SL_OK);
        assert_int_equal(a[i].called, 1);
        replay_add(rp, (double)a[i].planned, 1);
        if (a[i].at > last) last = a[i].at;
    }
    return last;
}

/* Coalescing as such, without a bound on a call's time (redis.max_script_ms
 * 0: batches of up to 128 items, whatever they cost in Redis);
 * test_batches_under_script_bound has the bound. */
static void test_coalescing_and_release_at_slot(void **state) {
    world w;
    world_init_bound(&w, "0", "  coal:\n    rpm: 6000\n    burst: { requests: 10 }\n", "agent-a");
    assert_true(run_until(&w, connected, 3000));
    /* Let the limits reach Redis before the burst (one heartbeat turn). */
    uv_update_time(&w.loop);
    enum { N = 300 };
    static acq a[N];
    replay rp;
    uint64_t t0;
    /* 300 requests at 100/s after a burst of 10: about 2.9 s. */
    uint64_t last = burst_of(&w, "coal", a, N, &rp, &t0);
    engine_stats s;
    engine_get_stats(w.e, &s);
    double per_grant = (double)s.reserve_calls / N;
    double floor_ms = (N - 10) / (6000.0 / 60000.0);
    print_message("  %d grants, %llu reserve calls (%.3f per grant), makespan %llu ms (floor %.0f ms + %.0f)\n", N,
                  s.reserve_calls, per_grant, (unsigned long long)(last - t0), floor_ms,
                  (double)(last - t0) - floor_ms);
    /* Acquires of one loop turn go out as one reserve call of up to 128
     * items, one call in flight at a time: 300 callers are 3 calls. */
    assert_int_equal(s.reserve_calls, (N + 127) / 128);
    /* Callers are released at their slots: replaying the release times
     * through the provider's bucket rejects nothing. */
    assert_int_equal(replay_rejections(&rp, 10, 6000.0 / 60000.0, NULL), 0);
    /* And not later than needed: the floor is (300 - 10) / 100 per s; the
     * schedule adds the jitter margin (jitter_ms 10: one burst is planned
     * as 9.9, 10 ms), and the last release may come late by the loop's
     * timer latency (50 ms allowed, under the sanitizers on a loaded
     * machine). */
    assert_realtime((double)(last - t0) <= floor_ms + 10 + 50, "makespan %llu ms over the floor %.0f ms + 60",
                    (unsigned long long)(last - t0), floor_ms);
    replay_free(&rp);
    world_close(&w);
}

/* redis.max_script_ms under what any script call takes (10 µs): once the
 * engine has seen its first call's time (a call of COSTMODEL_FIRST_CAP
 * items, before anything is learned), every call carries one item. The
 * callers of one loop turn are still all granted, in arrival order (grant
 * numbers follow the acquires), released at their slots (the replay
 * rejects nothing) and as early as without the bound; their settles, all
 * queued in one turn, likewise go one per call after the first. */
static int all_settled(world *w) {
    engine_stats s;
    engine_get_stats(w->e, &s);
    return s.settle_items >= 300;
}

static void test_batches_under_script_bound(void **state) {
    world w;
    world_init_bound(&w, "0.01", "  bound:\n    rpm: 6000\n    burst: { requests: 10 }\n", "agent-b");
    assert_true(run_until(&w, connected, 3000));
    uv_update_time(&w.loop);
    enum { N = 300, FIRST = 16 };
    static acq a[N];
    replay rp;
    uint64_t t0, last = burst_of(&w, "bound", a, N, &rp, &t0);
    long long prev = -1;
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].g.local, 0);
        const char *num = strrchr(a[i].g.id, ':');
        assert_non_null(num);
        long long n = atoll(num + 1);
        if (n <= prev) fail_msg("caller %d got grant %lld after grant %lld: not in arrival order", i, n, prev);
        prev = n;
    }
    engine_stats s;
    engine_get_stats(w.e, &s);
    double floor_ms = (N - 10) / (6000.0 / 60000.0);
    char cap[32];
    status_field(&w, "bound", "agent_batch_cap", cap, sizeof(cap));
    print_message("  %d grants, %llu reserve calls, %llu over the bound, cap %s, makespan %llu ms (floor %.0f ms)\n", N,
                  s.reserve_calls, s.script_over_bound, cap, (unsigned long long)(last - t0), floor_ms);
    assert_int_equal(FIRST, COSTMODEL_FIRST_CAP);
    assert_int_equal(s.reserve_items, N);
    assert_int_equal(s.reserve_calls, 1 + (N - FIRST));
    assert_int_equal(s.script_over_bound, s.reserve_calls);
    assert_string_equal(cap, "1");
    assert_int_equal(replay_rejections(&rp, 10, 6000.0 / 60000.0, NULL), 0);
    assert_realtime((double)(last - t0) <= floor_ms + 10 + 50, "makespan %llu ms over the floor %.0f ms + 60",
                    (unsigned long long)(last - t0), floor_ms);
    replay_free(&rp);
    for (int i = 0; i < N; i++) assert_int_equal(engine_settle(w.e, a[i].g.id, 0, ENGINE_OK, -1), 0);
    assert_true(run_until(&w, all_settled, 10000));
    engine_get_stats(w.e, &s);
    print_message("  %d settles in %llu settle calls\n", N, s.settle_calls);
    assert_int_equal(s.settle_items, N);
    assert_int_equal(s.settle_calls, 1 + (N - FIRST));
    world_close(&w);
}

/* Under the same bound, a cancel queued behind a backlog of plain settles
 * goes first: it changes what the next reserve may take. 120 granted
 * callers settle in one loop turn, the last one's settle a cancel; the
 * first settle call (16 items, nothing learned yet) already carries the
 * cancel, so its grant is gone from Redis after one or two settle calls,
 * not after the ~105 one-item calls of the plain settles queued before it
 * (found in review). */
typedef struct grant_probe {
    world *w;
    const char *id;
    unsigned long long calls_when_gone;
} grant_probe;

static grant_probe probe;

static int cancel_landed(world *w) {
    redisContext *c = redis_fixture_connect(&fx);
    /* The engine's id is "<deployment>:<grant>"; Redis keeps the grant. */
    redisReply *r = c ? redisCommand(c, "HEXISTS sluice:{urgent}:grants %s", strrchr(probe.id, ':') + 1) : NULL;
    int gone = r && r->type == REDIS_REPLY_INTEGER && r->integer == 0;
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    if (gone) {
        engine_stats s;
        engine_get_stats(w->e, &s);
        probe.calls_when_gone = s.settle_calls;
    }
    return gone;
}

static void test_urgent_settles_first_under_bound(void **state) {
    world w;
    world_init_bound(&w, "0.01", "  urgent:\n    rpm: 60000\n", "agent-u");
    assert_true(run_until(&w, connected, 3000));
    enum { N = 120 };
    static acq a[N];
    replay rp;
    uint64_t t0;
    burst_of(&w, "urgent", a, N, &rp, &t0);
    replay_free(&rp);
    engine_stats s0;
    engine_get_stats(w.e, &s0);
    for (int i = 0; i < N - 1; i++) assert_int_equal(engine_settle(w.e, a[i].g.id, 0, ENGINE_OK, -1), 0);
    assert_int_equal(engine_settle(w.e, a[N - 1].g.id, 0, ENGINE_CANCELLED, -1), 0);
    probe = (grant_probe){.w = &w, .id = a[N - 1].g.id};
    assert_false(cancel_landed(&w)); /* held in Redis until its settle */
    assert_true(run_until(&w, cancel_landed, 10000));
    unsigned long long calls = probe.calls_when_gone - s0.settle_calls;
    print_message("  the cancel queued after %d plain settles landed within %llu settle calls\n", N - 1, calls);
    assert_true(calls <= 3); /* the first call, and the check may see the next ones sent */
    world_close(&w);
}

/* Tenants' classes take turns when batches are full: 40 requests of each
 * of two tenants, arriving alternately in one loop turn, on a deployment
 * with room for all, under a bound that makes every call after the first
 * carry one request. The first call takes 8 of each class (as before the
 * bound); after it the classes alternate, so the first 40 grants hold 20
 * of each (without the turns: 32 of the first tenant, whose class comes
 * first, and 8 of the second). */
static void test_tenants_take_turns_in_small_batches(void **state) {
    world w;
    world_init_bound(&w, "0.01",
                     "  turns:\n    rpm: 600000\n    burst: { requests: 1000 }\n    tenants:\n"
                     "      a: { weight: 1 }\n      b: { weight: 1 }\n",
                     "agent-t");
    assert_true(run_until(&w, connected, 3000));
    uv_update_time(&w.loop);
    enum { N = 80 };
    static acq a[N];
    w.target = N;
    for (int i = 0; i < N; i++) {
        a[i] = (acq){.w = &w};
        assert_int_equal(engine_acquire(w.e, "turns", 0, 60000, NULL, i % 2 ? "b" : "a", on_acquired, &a[i], NULL), 0);
    }
    assert_true(run_until(&w, all_done, 10000));
    /* By grant number: how many of the first N / 2 are tenant a's. */
    long long num[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].status, SL_OK);
        num[i] = atoll(strrchr(a[i].g.id, ':') + 1);
    }
    int first_a = 0, first_b = 0;
    for (int i = 0; i < N; i++) {
        int rank = 0;
        for (int j = 0; j < N; j++) rank += num[j] < num[i];
        if (rank < N / 2) *(i % 2 ? &first_b : &first_a) += 1;
    }
    print_message("  the first %d grants: %d of tenant a, %d of tenant b\n", N / 2, first_a, first_b);
    assert_true(first_a >= 18 && first_a <= 22);
    assert_true(first_b >= 18 && first_b <= 22);
    world_close(&w);
}

static void test_cancel_gives_the_slot_back(void **state) {
    world w;
    world_init(&w, "  cancel:\n    rpm: 60\n    burst: { requests: 1 }\n", "agent-c");
    assert_true(run_until(&w, connected, 3000));
    static acq a[3];
    engine_call *calls[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (acq){.w = &w};
        assert_int_equal(engine_acquire(w.e, "cancel", 0, 60000, NULL, NULL, on_acquired, &a[i], &calls[i]), 0);
    }
    w.target = 1;
    assert_true(run_until(&w, all_done, 3000)); /* the first is released at once */
    /* The second and third wait ~1 s and ~2 s. Cancel both: their callbacks
     * never run and their reservations go back, so a new caller takes the
     * cancelled tail slot (~2 s) instead of queuing behind it (~3 s). Slots
     * never move backwards, so it cannot take an earlier one. */
    engine_cancel(calls[1]);
    engine_cancel(calls[2]);
    static acq b;
    b = (acq){.w = &w};
    uint64_t t0 = uv_now(&w.loop);
    /* Let the cancels reach Redis first. */
    uv_run(&w.loop, UV_RUN_NOWAIT);
    w.target = 2;
    assert_int_equal(engine_acquire(w.e, "cancel", 0, 60000, NULL, NULL, on_acquired, &b, NULL), 0);
    assert_true(run_until(&w, all_done, 5000));
    assert_int_equal(a[1].called, 0);
    assert_int_equal(a[2].called, 0);
    assert_int_equal(b.status, SL_OK);
    engine_stats st;
    engine_get_stats(w.e, &st);
    if (getenv("SLUICE_TEST_DUMP")) {
        redisContext *rc = redis_fixture_connect(&fx);
        redisReply *r = redisCommand(rc, "HGETALL sluice:{cancel}:state");
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            print_message("    %s = %s\n", r->element[i]->str, r->element[i + 1]->str);
        freeReplyObject(r);
        r = redisCommand(rc, "LRANGE sluice:{cancel}:refq:requests 0 -1");
        for (size_t i = 0; i < r->elements; i++) print_message("    refq %s\n", r->element[i]->str);
        freeReplyObject(r);
        r = redisCommand(rc, "HGETALL sluice:{cancel}:limits");
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            print_message("    limit %s = %s\n", r->element[i]->str, r->element[i + 1]->str);
        freeReplyObject(r);
        redisFree(rc);
    }
    print_message("  after cancelling two waiters, the next waited %llu ms (settle calls %llu, items %llu)\n",
                  (unsigned long long)(b.at - t0), st.settle_calls, st.settle_items);
    assert_true(b.at - t0 < 2500);
    world_close(&w);
}

static void test_shed_when_slot_beyond_max_wait(void **state) {
    world w;
    world_init(&w, "  shed:\n    rpm: 60\n    burst: { requests: 1 }\n", "agent-s");
    assert_true(run_until(&w, connected, 3000));
    static acq a[2];
    w.target = 2;
    for (int i = 0; i < 2; i++) {
        a[i] = (acq){.w = &w};
        assert_int_equal(engine_acquire(w.e, "shed", 0, 100, NULL, NULL, on_acquired, &a[i], NULL), 0);
    }
    assert_true(run_until(&w, all_done, 3000));
    assert_int_equal(a[0].status, SL_OK);
    assert_int_equal(a[1].status, SL_ESHED);
    assert_string_equal(a[1].reason, "rpm");
    assert_int_equal(engine_acquire(w.e, "nope", 0, 100, NULL, NULL, on_acquired, &a[0], NULL), SL_EUNKNOWN);
    world_close(&w);
}

static int is_down(world *w) { return !connected(w); }

/* A provider pause arriving while callers wait for their slots moves them
 * behind the pause with their spacing kept: the release times still fit
 * the provider's bucket (burst 1), none bunch at the pause's end. */
static void test_pause_keeps_held_callers_spaced(void **state) {
    world w;
    /* The default jitter margin (10 ms): timers fire a little late, and the
     * schedule spaces callers so that this stays within the bucket. */
    world_init(&w, "  held:\n    rpm: 600\n    burst: { requests: 1 }\n", "agent-h");
    assert_true(run_until(&w, connected, 3000));
    enum { N = 6 };
    static acq a[N];
    w.target = 1;
    for (int i = 0; i < N; i++) {
        a[i] = (acq){.w = &w};
        assert_int_equal(engine_acquire(w.e, "held", 0, 60000, NULL, NULL, on_acquired, &a[i], NULL), 0);
    }
    assert_true(run_until(&w, all_done, 3000)); /* the first goes at once */
    uint64_t t0 = uv_now(&w.loop);
    assert_int_equal(engine_feedback(w.e, "held", ENGINE_THROTTLED, 1000), 0);
    w.target = N;
    assert_true(run_until(&w, all_done, 10000));
    replay rp;
    replay_init(&rp);
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].status, SL_OK);
        replay_add(&rp, (double)a[i].planned, 1);
        if (i > 0) print_message("  caller %d planned at +%llu ms\n", i, (unsigned long long)(a[i].planned - t0));
    }
    /* Held callers moved behind the pause ... */
    for (int i = 1; i < N; i++) assert_true(a[i].planned - t0 >= 1000);
    /* ... and still fit a burst-1 bucket at 10/s. */
    assert_int_equal(replay_rejections(&rp, 1, 600.0 / 60000.0, NULL), 0);
    replay_free(&rp);
    world_close(&w);
}

/* Two more agents of the fleet, as heartbeats every 100 ms while the timer
 * runs (each entry expires after the engine's window, 3 heartbeats). */
typedef struct peers {
    redisContext *c;
    uv_timer_t t;
} peers;

static void on_peers(uv_timer_t *t) {
    peers *p = t->data;
    freeReplyObject(script_callv(p->c, SCRIPT_HEARTBEAT, "fb", "agent-f2", "600", NULL));
    freeReplyObject(script_callv(p->c, SCRIPT_HEARTBEAT, "fb", "agent-f3", "600", NULL));
}

static void test_redis_killed_local_fallback_then_rejoin(void **state) {
    world w;
    /* Three agents' heartbeats say live = 3, so the fallback share is a
     * third (fallback_share, 0.9, is only for an agent that never saw a
     * heartbeat). */
    world_init(&w, "  fb:\n    rpm: 1200\n    burst: { requests: 2 }\n", "agent-f1");
    assert_true(run_until(&w, connected, 3000));
    peers p = {.c = redis_fixture_connect(&fx)};
    assert_non_null(p.c);
    uv_timer_init(&w.loop, &p.t);
    p.t.data = &p;
    uv_timer_start(&p.t, on_peers, 0, 100);
    wait_status(&w, "fb", "agent_live_agents", "3", 5000);
    static acq warm;
    warm = (acq){.w = &w};
    w.done_count = 0;
    w.target = 1;
    assert_int_equal(engine_acquire(w.e, "fb", 0, 60000, NULL, NULL, on_acquired, &warm, NULL), 0);
    assert_true(run_until(&w, all_done, 3000));
    assert_false(warm.g.local);

    uv_close((uv_handle_t *)&p.t, NULL);
    redisFree(p.c);
    redis_fixture_kill(&fx, 1);
    enum { N = 40 };
    static acq a[N];
    w.done_count = 0;
    w.target = N;
    uint64_t t0 = uv_now(&w.loop);
    for (int i = 0; i < N; i++) {
        a[i] = (acq){.w = &w};
        assert_int_equal(engine_acquire(w.e, "fb", 0, 60000, NULL, NULL, on_acquired, &a[i], NULL), 0);
    }
    assert_true(run_until(&w, all_done, 15000));
    assert_true(is_down(&w));
    replay rp;
    replay_init(&rp);
    uint64_t last = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].status, SL_OK);
        assert_true(a[i].g.local);
        replay_add(&rp, (double)a[i].planned, 1);
        if (a[i].planned > last) last = a[i].planned;
    }
    /* Local pacing at a third of 1200 RPM: one per 150 ms, burst
     * max(1, floor(2 / 3)) = 1. The replay proves it never exceeds the
     * share; the span that it is the share and not less. With a burst of 1
     * each local slot also waits the jitter margin (jitter_ms 10, as the
     * reserve script plans a cost of a whole burst), so 40 grants span 39
     * intervals of 160 ms. The planned releases are replayed; a plan made
     * late (the loop busy when a call came in) may add to the span (100 ms
     * allowed). A share of 1/4 would take 39 x 210 ms. */
    double interval = 60000.0 / (1200.0 / 3.0), span = replay_makespan(&rp);
    size_t rej = replay_rejections(&rp, 1, 1.0 / interval, NULL);
    print_message("  fallback: %d local grants, the first %llu ms after the kill, spanning %.0f ms (share 1/3 of "
                  "1200 RPM: 39 x (%.0f + 10) = %.0f ms), %zu rejections\n",
                  N, (unsigned long long)(last - t0 - (uint64_t)span), span, interval, (N - 1) * (interval + 10), rej);
    assert_int_equal(rej, 0);
    assert_true(span <= (N - 1) * (interval + 10) + 100);
    replay_free(&rp);

    /* Status says so. */
    engine_stats s;
    engine_get_stats(w.e, &s);
    assert_string_equal(s.mode, "local");
    assert_true(s.redis_error[0] != '\0');
    char share[64];
    status_field(&w, "fb", "local_share", share, sizeof(share));
    assert_string_equal(share, "0.3333");

    /* Redis returns: the agent reconnects by itself, and once its local
     * schedule has drained it uses Redis again. */
    assert_int_equal(redis_fixture_restart(&fx), 0);
    assert_true(run_until(&w, connected, 10000));
    wait_status(&w, "fb", "mode", "redis", 5000);
    /* ... having told the fleet of its 40 local grants (the hand-over):
     * read against the provider's remaining counts they are its own
     * sends, not a neighbour's use. Redis came back empty, so these are
     * exactly this agent's. */
    wait_status(&w, "fb", "local_requests", "40", 5000);
    static acq back;
    back = (acq){.w = &w};
    w.done_count = 0;
    w.target = 1;
    assert_int_equal(engine_acquire(w.e, "fb", 0, 60000, NULL, NULL, on_acquired, &back, NULL), 0);
    assert_true(run_until(&w, all_done, 3000));
    assert_int_equal(back.status, SL_OK);
    assert_false(back.g.local);
    world_close(&w);
}

static void test_flushall_reloads_scripts_transparently(void **state) {
    world w;
    world_init(&w, "  fl:\n    rpm: 60000\n", "agent-fl");
    assert_true(run_until(&w, connected, 3000));
    static acq a, b;
    a = (acq){.w = &w};
    w.target = 1;
    assert_int_equal(engine_acquire(w.e, "fl", 0, 1000, NULL, NULL, on_acquired, &a, NULL), 0);
    assert_true(run_until(&w, all_done, 3000));
    assert_false(a.g.local);
    redisContext *c = redis_fixture_connect(&fx);
    freeReplyObject(redisCommand(c, "SCRIPT FLUSH"));
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    redisFree(c);
    b = (acq){.w = &w};
    w.done_count = 0;
    assert_int_equal(engine_acquire(w.e, "fl", 0, 1000, NULL, NULL, on_acquired, &b, NULL), 0);
    assert_true(run_until(&w, all_done, 3000));
    assert_int_equal(b.status, SL_OK);
    engine_stats s;
    engine_get_stats(w.e, &s);
    print_message("  after FLUSHALL: grant %s (local=%d), noscript reloads %llu\n", b.g.id, b.g.local,
                  s.noscript_reloads);
    assert_true(s.noscript_reloads >= 1);
    world_close(&w);
}

static int has_error(world *w) {
    engine_stats s;
    engine_get_stats(w->e, &s);
    return s.redis_error && s.redis_error[0] != '\0' && !strstr(s.redis_error, "connect failed");
}

/* Misconfigured credentials are a clear error, not a silent fallback. */
static void expect_credentials_error(const char *user, const char *password, const char *want) {
    char text[1024], err[512];
    setenv("SLUICE_TEST_REDIS_PASSWORD", password, 1);
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  username: %s\n  password_env: SLUICE_TEST_REDIS_PASSWORD\n"
             "  timeout_ms: 300\n  connect_timeout_ms: 300\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n"
             "deployments:\n  acl:\n    rpm: 60\n",
             fx.sock, user);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("%s", err);
    world w;
    memset(&w, 0, sizeof(w));
    uv_loop_init(&w.loop);
    assert_int_equal(engine_new(&w.loop, cfg, "agent-acl", &w.e), 0);
    engine_start(w.e);
    assert_true(run_until(&w, has_error, 5000));
    engine_stats s;
    engine_get_stats(w.e, &s);
    print_message("  user %s: mode %s, redis_error \"%s\"\n", user, s.mode, s.redis_error);
    assert_false(s.redis_up);
    assert_non_null(strstr(s.redis_error, want));
    world_close(&w);
}

static void test_wrong_password_and_missing_acl_are_clear_errors(void **state) {
    redisContext *c = redis_fixture_connect(&fx);
    freeReplyObject(redisCommand(c, "ACL SETUSER sluice-ok on >right ~sluice:* +@all"));
    freeReplyObject(redisCommand(c, "ACL SETUSER sluice-noscript on >right ~sluice:* +@all -@scripting"));
    redisFree(c);
    expect_credentials_error("sluice-ok", "wrong", "AUTH failed: WRONGPASS");
    expect_credentials_error("sluice-noscript", "right", "SCRIPT LOAD failed: NOPERM");
}

static char logged[1024];
static void capture_log(void *ud, int level, const char *msg) {
    if (level == CONFIG_LOG_ERROR) snprintf(logged, sizeof(logged), "%s", msg);
}

/* A user that may load the scripts but not run a command they call (TIME):
 * each call fails, and that is an error in STATUS and the log, not a
 * silent fallback. */
/* Budgets in money when Redis is out of reach (agent.fail: closed): an
 * acquire is answered on a later turn, never from within the call; a
 * cancel while it waits to ask again frees it; engine_stop answers the
 * ones still waiting with SL_ECLOSING (ASan checks the lifetimes); a
 * request without an estimate is refused at once. */
typedef struct budget_seen {
    int calls, status;
} budget_seen;

static void on_budget_acquired(void *arg, int status, const engine_grant *g, const engine_shed *sh, const char *msg) {
    (void)g;
    (void)sh;
    (void)msg;
    budget_seen *s = arg;
    s->calls++;
    s->status = status;
}

static void test_budget_calls_without_redis(void **state) {
    (void)state;
    char text[2048], err[512];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s.gone\n  timeout_ms: 100\n  connect_timeout_ms: 100\n"
             "agent:\n  socket: /tmp/unused.sock\n  fail: closed\n"
             "deployments:\n  bd:\n    rpm: 600\n    price: { input: 1, output: 2, currency: EUR }\n"
             "budgets:\n  all:\n    currency: EUR\n    monthly: 10\n",
             fx.sock);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    uv_loop_t loop;
    uv_loop_init(&loop);
    engine *e;
    assert_int_equal(engine_new(&loop, cfg, "budget-test", &e), 0);
    engine_start(e);
    budget_seen quick = {0}, cancelled = {0}, waiting = {0}, none = {0};
    engine_req rq = {.name = "bd", .split = 1, .input = 100, .output = 100, .max_wait_ms = 0};
    engine_call *call = NULL;
    assert_int_equal(engine_acquire_req(e, &rq, on_budget_acquired, &quick, &call), 0);
    assert_non_null(call);
    assert_int_equal(quick.calls, 0); /* never from within the call */
    rq.max_wait_ms = 60000;
    assert_int_equal(engine_acquire_req(e, &rq, on_budget_acquired, &cancelled, &call), 0);
    engine_call *to_cancel = call;
    assert_int_equal(engine_acquire_req(e, &rq, on_budget_acquired, &waiting, &call), 0);
    engine_req empty = {.name = "bd", .max_wait_ms = 1000};
    assert_int_equal(engine_acquire_req(e, &empty, on_budget_acquired, &none, NULL), SL_EINVAL);
    assert_non_null(engine_acquire_req_error(e, &empty));
    /* A few turns: the quick one is answered (Redis out of reach, no wait
     * left), the others wait to ask again. */
    for (int i = 0; i < 20 && !quick.calls; i++) uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(quick.calls, 1);
    assert_int_equal(quick.status, SL_EUNAVAIL);
    engine_cancel(to_cancel);
    engine_stop(e, on_stopped, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(cancelled.calls, 0);
    assert_int_equal(waiting.calls, 1);
    assert_int_equal(waiting.status, SL_ECLOSING);
    assert_int_equal(none.calls, 0);
    /* A settle after the stop is harmless. */
    assert_int_equal(engine_settle(e, "bd:1", 10, ENGINE_OK, -1), 0);
    engine_free(e);
    uv_loop_close(&loop);
}

/* An agent restarted under the same id (agent.id, or hostname:pid with
 * pid 1 in a container) while a reservation of its last run is still
 * held in Redis (until that lease ends): the new run's requests must
 * reserve their own amounts, never be taken for the old ones "asked
 * again" (granted with nothing reserved, over the limit). */
static int budget_answered(void *arg) { return ((budget_seen *)arg)->calls > 0; }

static engine *budget_engine(uv_loop_t *loop, const char *id) {
    char text[2048], err[512];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n"
             "agent:\n  socket: /tmp/unused.sock\n  fail: closed\n"
             "deployments:\n  bd:\n    rpm: 600\n    price: { input: 1, output: 2, currency: EUR }\n"
             "budgets:\n  all:\n    currency: EUR\n    daily: 0.5\n",
             fx.sock);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    engine *e;
    assert_int_equal(engine_new(loop, cfg, id, &e), 0);
    engine_start(e);
    return e;
}

static long long budget_hget(const char *f) {
    redisContext *c = redis_fixture_connect(&fx);
    redisReply *r = redisCommand(c, "HGET sluice:{$budgets}:b:all %s", f);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

static void test_budget_restart_same_id_reserves_again(void **state) {
    (void)state;
    redisContext *c = redis_fixture_connect(&fx);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    redisFree(c);
    /* 100000 in at EUR 1 and 100000 out at EUR 2 per million: 0.3 EUR. */
    engine_req rq = {.name = "bd", .split = 1, .input = 100000, .output = 100000, .exact = 1, .max_wait_ms = 2000};
    uv_loop_t loop;
    uv_loop_init(&loop);
    engine *e1 = budget_engine(&loop, "fixed-id");
    budget_seen first = {0};
    assert_int_equal(engine_acquire_req(e1, &rq, on_budget_acquired, &first, NULL), 0);
    assert_true(loop_run_until(&loop, budget_answered, &first, 5000));
    assert_int_equal(first.status, SL_OK);
    /* The agent goes away before the settle: Redis charges it at its lease end. */
    engine_stop(e1, on_stopped, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    engine_free(e1);
    assert_int_equal(budget_hget("day_reserved"), 300000);
    /* Restarted, same id: 0.3 more would take the day to 0.6 of 0.5. */
    engine *e2 = budget_engine(&loop, "fixed-id");
    budget_seen second = {0};
    rq.max_wait_ms = 300;
    assert_int_equal(engine_acquire_req(e2, &rq, on_budget_acquired, &second, NULL), 0);
    assert_true(loop_run_until(&loop, budget_answered, &second, 5000));
    long long reserved = budget_hget("day_reserved");
    engine_stop(e2, on_stopped, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    engine_free(e2);
    uv_loop_close(&loop);
    fprintf(stderr, "second acquire: status %d, day_reserved %lld\n", second.status, reserved);
    assert_int_equal(second.status, SL_ESHED);
    assert_int_equal(reserved, 300000);
}

static void test_script_permission_error_is_loud(void **state) {
    redisContext *c = redis_fixture_connect(&fx);
    freeReplyObject(redisCommand(c, "ACL SETUSER sluice-notime on >right ~sluice:* +@all -time"));
    redisFree(c);
    char text[1024], err[512];
    setenv("SLUICE_TEST_REDIS_PASSWORD", "right", 1);
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  username: sluice-notime\n  password_env: SLUICE_TEST_REDIS_PASSWORD\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n"
             "deployments:\n  notime:\n    rpm: 600\n",
             fx.sock);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("%s", err);
    world w;
    memset(&w, 0, sizeof(w));
    uv_loop_init(&w.loop);
    assert_int_equal(engine_new(&w.loop, cfg, "agent-notime", &w.e), 0);
    logged[0] = '\0';
    engine_set_log(w.e, capture_log, NULL);
    engine_start(w.e);
    assert_true(run_until(&w, connected, 3000));
    /* At start, before any caller: */
    assert_true(run_until(&w, has_error, 3000));
    engine_stats s0;
    engine_get_stats(w.e, &s0);
    print_message("  at start: redis_error \"%s\"\n", s0.redis_error);
    assert_non_null(strstr(s0.redis_error, "heartbeat failed"));
    static acq a;
    a = (acq){.w = &w};
    w.target = 1;
    assert_int_equal(engine_acquire(w.e, "notime", 0, 1000, NULL, NULL, on_acquired, &a, NULL), 0);
    assert_true(run_until(&w, all_done, 3000));
    assert_int_equal(a.status, SL_OK);
    assert_true(a.g.local);
    engine_stats s;
    engine_get_stats(w.e, &s);
    print_message("  redis_error \"%s\"\n  log: %s\n", s.redis_error, logged);
    /* Every script call of this user fails alike: the latest error is the
     * reserve's or a heartbeat's (every 200 ms, and per deployment since
     * heartbeats reclaim expired grants), whichever came last. */
    if (!strstr(s.redis_error, "reserve failed") && !strstr(s.redis_error, "heartbeat failed"))
        fail_msg("redis_error names neither the reserve nor the heartbeat: %s", s.redis_error);
    assert_non_null(strstr(s.redis_error, "can't run this command"));
    assert_non_null(strstr(logged, "notime"));
    assert_non_null(strstr(logged, "can't run this command"));
    world_close(&w);
}

/* ---- a call's lifecycle at awkward moments ------------------------------ */

/* A caller whose callback cancels another call of the same reserve reply.
 * B's max wait is 0 (shed); its callback cancels A, which the same reply
 * deferred. A deferred call is on no list until the reply is done with
 * (it goes back to the head of its class then): cancelled meanwhile it is
 * freed there, never pushed back (ASan: a use after free), and the class
 * queue and its counts are left whole, so C, deferred beside it, is
 * granted. */
typedef struct canceler {
    acq a;
    engine_call *call;       /* this acquire, while it waits */
    struct canceler *victim; /* cancelled from this one's callback */
} canceler;

static void on_canceler(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    canceler *k = arg;
    k->call = NULL;
    on_acquired(&k->a, status, g, shed, msg);
    if (k->victim && k->victim->call) {
        engine_cancel(k->victim->call);
        k->victim->call = NULL;
    }
}

static void test_cancel_from_a_callback_of_the_same_reply(void **state) {
    world w;
    world_init(&w, "  cx:\n    rpm: 60\n    horizon_ms: 100\n", "agent-cx");
    assert_true(run_until(&w, connected, 3000));
    wait_status(&w, "cx", "mode", "redis", 5000);
    static canceler x, c, a, b;
    canceler *k[] = {&x, &c, &a, &b};
    for (int i = 0; i < 4; i++) *k[i] = (canceler){.a = {.w = &w}};
    b.victim = &a;
    /* One loop turn: one reserve call. X takes the burst (1), C and A are
     * beyond the horizon (deferred), B cannot wait (shed). */
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            engine_acquire(w.e, "cx", 0, k[i] == &b ? 0 : 600000, NULL, NULL, on_canceler, k[i], &k[i]->call), 0);
    w.target = 3; /* X, B, then C at its slot, about 1 s later */
    assert_true(run_until(&w, all_done, 5000));
    assert_int_equal(x.a.status, SL_OK);
    assert_int_equal(b.a.status, SL_ESHED);
    assert_int_equal(c.a.called, 1);
    assert_int_equal(c.a.status, SL_OK);
    assert_int_equal(a.a.called, 0); /* cancelled: its callback never runs */
    engine_stats s;
    engine_get_stats(w.e, &s);
    assert_int_equal(s.queued, 0);
    assert_int_equal(s.cancels, 1);
    world_close(&w);
}

/* A call decided locally (Redis did not answer in time) is held to what is
 * left of its max wait, not to the whole of it again from the decision.
 * Three grants take the schedule's next 2 s; Redis is paused, so A's
 * reserve times out after redis.timeout_ms (1 s here) and A is decided
 * locally with 3.7 s of its 4.7 s left. Whatever the decision, its planned
 * release is within its max wait of its acquire (a local slot 5.1 s after
 * it was granted before the fix). */
static void test_local_decision_counts_the_wait_spent(void **state) {
    char text[1024];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  timeout_ms: 1000\n  connect_timeout_ms: 1000\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n"
             "deployments:\n  lw:\n    rpm: 60\n",
             fx.sock);
    world w;
    world_init_cfg(&w, config_of(text), "agent-lw");
    assert_true(run_until(&w, connected, 3000));
    wait_status(&w, "lw", "mode", "redis", 5000);
    static acq x[3], a;
    w.target = 1;
    for (int i = 0; i < 3; i++) {
        x[i] = (acq){.w = &w};
        assert_int_equal(engine_acquire(w.e, "lw", 0, 600000, NULL, NULL, on_acquired, &x[i], NULL), 0);
    }
    assert_true(run_until(&w, all_done, 3000)); /* the first, at once */
    redisContext *rc = redis_fixture_connect(&fx);
    assert_non_null(rc);
    freeReplyObject(redisCommand(rc, "CLIENT PAUSE 3000 ALL"));
    redisFree(rc);
    a = (acq){.w = &w};
    uint64_t t0 = uv_now(&w.loop);
    w.done_count = 0;
    w.target = 3; /* x[1], x[2] and a */
    assert_int_equal(engine_acquire(w.e, "lw", 0, 4700, NULL, NULL, on_acquired, &a, NULL), 0);
    assert_true(run_until(&w, all_done, 10000));
    print_message("  A: status %d, local %d, planned +%lld ms (max wait 4700)\n", a.status, a.g.local,
                  a.status == SL_OK ? (long long)(a.planned - t0) : -1LL);
    if (a.status == SL_OK) assert_true(a.planned - t0 <= 4700);
    else assert_int_equal(a.status, SL_ESHED);
    world_close(&w);
}

/* A call in flight when a reload removes its deployment, and Redis lost
 * before it answers: the call comes back to the removed deployment and is
 * answered as the reload answers those queued there (SL_EUNKNOWN), not
 * paced locally on a configuration that is gone (a NULL dereference). */
static void test_reload_removes_a_deployment_under_a_call(void **state) {
    world w;
    world_init(&w, "  rx:\n    rpm: 60\n  ry:\n    rpm: 60\n", "agent-rx");
    assert_true(run_until(&w, connected, 3000));
    wait_status(&w, "rx", "mode", "redis", 5000);
    redisContext *rc = redis_fixture_connect(&fx);
    assert_non_null(rc);
    freeReplyObject(redisCommand(rc, "CLIENT PAUSE 5000 ALL"));
    redisFree(rc);
    static acq a;
    a = (acq){.w = &w};
    w.target = 1;
    assert_int_equal(engine_acquire(w.e, "rx", 0, 60000, NULL, NULL, on_acquired, &a, NULL), 0);
    loop_run_for(&w.loop, 50); /* its reserve is in flight */
    assert_int_equal(engine_reload(w.e, make_config_bound(NULL, "  ry:\n    rpm: 60\n")), 0);
    redis_fixture_kill(&fx, 1);
    assert_true(run_until(&w, all_done, 5000));
    assert_int_equal(a.called, 1);
    assert_int_equal(a.status, SL_EUNKNOWN);
    world_close(&w);
    assert_int_equal(redis_fixture_restart(&fx), 0);
}

/* agent.heartbeat_ms and agent.silent_hold_ms take effect at the next
 * start (docs/configuration.md): a reload that changes them keeps the
 * running ones. The heartbeat timer ticks at the first value; promises
 * and the silent limit written to Redis at the new one would promise
 * what it cannot keep (a live agent taken for silent). */
static void test_reload_keeps_the_heartbeat(void **state) {
    world w;
    world_init(&w, "  hb:\n    rpm: 600\n", "agent-hb");
    assert_true(run_until(&w, connected, 3000));
    wait_status(&w, "hb", "mode", "redis", 5000);
    redisContext *rc = redis_fixture_connect(&fx);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "HGET sluice:{hb}:limits silent_ms");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    long long before = atoll(r->str);
    freeReplyObject(r);
    char text[1024];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  timeout_ms: 300\n  connect_timeout_ms: 300\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 5000\n  fallback_share: 0.9\n"
             "deployments:\n  hb:\n    rpm: 1200\n",
             fx.sock);
    assert_int_equal(engine_reload(w.e, config_of(text)), 0);
    /* The reload's new rpm reaches Redis with the configure that also
     * writes silent_ms: wait for the rpm. */
    for (int i = 0; i < 100; i++) {
        loop_run_for(&w.loop, 50);
        r = redisCommand(rc, "HGET sluice:{hb}:limits rpm");
        int done = r->type == REDIS_REPLY_STRING && atoll(r->str) == 1200;
        freeReplyObject(r);
        if (done) break;
    }
    r = redisCommand(rc, "HMGET sluice:{hb}:limits rpm silent_ms");
    print_message("  after a reload to heartbeat_ms 5000: rpm %s, silent_ms %s (was %lld)\n",
                  r->element[0]->str ? r->element[0]->str : "-", r->element[1]->str ? r->element[1]->str : "-", before);
    assert_int_equal(atoll(r->element[0]->str), 1200);
    assert_int_equal(atoll(r->element[1]->str), before);
    freeReplyObject(r);
    redisFree(rc);
    world_close(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coalescing_and_release_at_slot),
        cmocka_unit_test(test_batches_under_script_bound),
        cmocka_unit_test(test_urgent_settles_first_under_bound),
        cmocka_unit_test(test_tenants_take_turns_in_small_batches),
        cmocka_unit_test(test_cancel_gives_the_slot_back),
        cmocka_unit_test(test_shed_when_slot_beyond_max_wait),
        cmocka_unit_test(test_pause_keeps_held_callers_spaced),
        cmocka_unit_test(test_flushall_reloads_scripts_transparently),
        cmocka_unit_test(test_redis_killed_local_fallback_then_rejoin),
        cmocka_unit_test(test_wrong_password_and_missing_acl_are_clear_errors),
        cmocka_unit_test(test_script_permission_error_is_loud),
        cmocka_unit_test(test_budget_calls_without_redis),
        cmocka_unit_test(test_budget_restart_same_id_reserves_again),
        cmocka_unit_test(test_cancel_from_a_callback_of_the_same_reply),
        cmocka_unit_test(test_local_decision_counts_the_wait_spent),
        cmocka_unit_test(test_reload_removes_a_deployment_under_a_call),
        cmocka_unit_test(test_reload_keeps_the_heartbeat),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
