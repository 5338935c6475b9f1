/* test_lanes: lanes and tenants through real agents (engines) against a
 * real redis-server, in real time.
 *
 * Several engines share one libuv loop, each with its own Redis connection
 * and agent id: a fleet in one process. Unlike test_lanes_sim (the Lua
 * policy over minutes of simulated time), this proves the agent's side:
 * requests held per lane and tenant, deferrals answered by asking again
 * when Redis said, and every caller released at its slot. The releases
 * the engines planned (engine_grant.planned_ms, on the shared loop clock)
 * are replayed through the provider's bucket: a loaded machine fires the
 * timers late and bunches the callbacks, but does not move the plans;
 * every callback comes at its plan or later. Timing bounds carry the
 * release jitter the schedule tolerates (jitter_ms) plus loop latency
 * under the sanitizers. */
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
#include "engine.h"
#include "engine_status.h"
#include "loop.h"
#include "redis_fixture.h"
#include "replay.h"
#include "sluice.h"

static redis_fixture fx;

static int group_setup(void **state) {
    (void)state;
    return redis_fixture_start(&fx, 0);
}
static int group_teardown(void **state) {
    (void)state;
    redis_fixture_stop(&fx);
    return 0;
}

#define MAXE 5

typedef struct fleet {
    uv_loop_t loop;
    engine *e[MAXE];
    int n;
    const char *dep;
} fleet;

static config *make_config(const char *deployments) {
    char text[4096], err[512];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  timeout_ms: 1000\n  connect_timeout_ms: 1000\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n"
             "deployments:\n%s",
             fx.sock, deployments);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    return cfg;
}

static int all_up(void *arg) {
    fleet *f = arg;
    for (int i = 0; i < f->n; i++) {
        engine_stats s;
        engine_get_stats(f->e[i], &s);
        if (!s.redis_up) return 0;
    }
    return 1;
}

/* deployments: the YAML of one deployment, named dep. */
static void fleet_init(fleet *f, int n, const char *dep, const char *deployment) {
    memset(f, 0, sizeof(*f));
    f->dep = dep;
    char deployments[2048];
    snprintf(deployments, sizeof(deployments), "  %s:\n%s", dep, deployment);
    uv_loop_init(&f->loop);
    f->n = n;
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "agent-%d", i);
        assert_int_equal(engine_new(&f->loop, make_config(deployments), id, &f->e[i]), 0);
        engine_start(f->e[i]);
    }
    assert_true(loop_run_until(&f->loop, all_up, f, 5000));
    /* Every agent has written the limits (STATUS says mode redis only
     * then), so the first requests meet the configured lanes and tenants. */
    for (int i = 0; i < n; i++) {
        char v[128];
        if (!engine_status_wait(&f->loop, f->e[i], dep, "mode", "redis", 5000, v, sizeof(v)))
            fail_msg("agent-%d: STATUS %s mode is \"%s\" after 5 s, waited for \"redis\"", i, dep, v);
    }
}

static void on_stopped(void *arg) { (void)arg; }

static void fleet_close(fleet *f) {
    for (int i = 0; i < f->n; i++) engine_stop(f->e[i], on_stopped, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    for (int i = 0; i < f->n; i++) engine_free(f->e[i]);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

typedef struct req {
    fleet *f;
    int kind;           /* caller's tag: lane or tenant index */
    uint64_t asked, at; /* uv_now at acquire and at release */
    uint64_t planned;   /* the release the engine planned (engine_grant.planned_ms) */
    int status, called;
    engine_call *call;
} req;

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    (void)shed;
    (void)msg;
    req *r = arg;
    r->status = status;
    r->called++;
    r->call = NULL;
    r->at = uv_now(&r->f->loop);
    if (g) {
        r->planned = g->planned_ms;
        assert_true(g->planned_ms <= r->at); /* released at its plan or later, never earlier */
    }
}

static void acquire(fleet *f, int agent, req *r, int kind, const char *lane, const char *tenant) {
    *r = (req){.f = f, .kind = kind, .asked = uv_now(&f->loop)};
    assert_int_equal(engine_acquire(f->e[agent], f->dep, 0, 600000, lane, tenant, on_acquired, r, &r->call), 0);
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* ---- lanes --------------------------------------------------------------- */

/* The interactive request's timer, every 500 ms. */
typedef struct ticker {
    fleet *f;
    req *reqs;
    int n, max;
    uv_timer_t t;
} ticker;

static void on_tick(uv_timer_t *t) {
    ticker *k = t->data;
    if (k->n < k->max) acquire(k->f, 3, &k->reqs[k->n++], 0, "interactive", NULL);
}

static void test_interactive_through_agents(void **state) {
    (void)state;
    fleet f;
    /* 1200 rpm: one request per 50 ms. */
    fleet_init(&f, 4, "lanes",
               "    rpm: 1200\n    lanes:\n      interactive: { priority: 0, max_wait_ms: 5000 }\n"
               "      batch: { priority: 1, max_wait_ms: 600000 }\n");
    enum { NB = 450, NI = 30 };
    static req batch[3][NB], inter[NI];
    uint64_t t0 = uv_now(&f.loop);
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < NB; i++) acquire(&f, a, &batch[a][i], 1, "batch", NULL);
    ticker k = {.f = &f, .reqs = inter, .max = NI};
    uv_timer_init(&f.loop, &k.t);
    k.t.data = &k;
    uv_timer_start(&k.t, on_tick, 250, 500);
    /* A fixed window of load is what is measured (utilisation over it);
     * it cannot be cut short unnoticed: 29 of the 30 interactive requests
     * must be granted, the 29th is asked at 14.25 s. */
    loop_run_for(&f.loop, 15500);
    uv_close((uv_handle_t *)&k.t, NULL);
    uint64_t t1 = uv_now(&f.loop);

    replay rp;
    replay_init(&rp);
    uint64_t waits[NI];
    size_t ni = 0, nb = 0;
    for (int i = 0; i < k.n; i++) {
        assert_int_equal(inter[i].called, 1);
        assert_int_equal(inter[i].status, SL_OK);
        waits[ni++] = inter[i].at - inter[i].asked;
        replay_add(&rp, (double)inter[i].planned, 1);
    }
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < NB; i++)
            if (batch[a][i].called) {
                assert_int_equal(batch[a][i].status, SL_OK);
                nb++;
                replay_add(&rp, (double)batch[a][i].planned, 1);
            }
    qsort(waits, ni, sizeof(waits[0]), cmp_u64);
    size_t total = ni + nb;
    double span = (double)(t1 - t0);
    double util = (double)total / (20.0 + span / 50.0);
    size_t rej = replay_rejections(&rp, 20, 1200.0 / 60000.0, NULL);
    engine_stats s[4];
    unsigned long long calls = 0, deferrals = 0;
    for (int a = 0; a < 4; a++) {
        engine_get_stats(f.e[a], &s[a]);
        calls += s[a].reserve_calls;
        deferrals += s[a].deferrals;
    }
    print_message("  interactive %zu: wait p50 %llu, max %llu ms; batch %zu; utilisation %.4f over %.1f s; "
                  "%llu reserve calls, %llu deferrals; %zu rejections\n",
                  ni, (unsigned long long)waits[ni / 2], (unsigned long long)waits[ni - 1], nb, util, span / 1000,
                  calls, deferrals, rej);
    assert_true(ni >= 29);
    /* One interval (50) + lane_step_ms (10) + jitter_ms (10) + loop latency. */
    assert_true(waits[ni - 1] <= 50 + 10 + 10 + 20);
    assert_true(util >= 0.97);
    assert_int_equal(rej, 0);
    /* The batch agents were deferred and asked again (the mechanism ran). */
    assert_true(deferrals > 0);
    /* Give the rest back: cancel what is still held. */
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < NB; i++)
            if (!batch[a][i].called && batch[a][i].call) engine_cancel(batch[a][i].call);
    replay_free(&rp);
    fleet_close(&f);
}

/* ---- tenants ------------------------------------------------------------- */

static void test_tenants_through_agents(void **state) {
    (void)state;
    fleet f;
    fleet_init(&f, 2, "tenants",
               "    rpm: 1200\n    tenant_idle_ms: 1000\n    tenants:\n      heavy: { weight: 3 }\n"
               "      light: { weight: 1 }\n");
    enum { N = 600 };
    static req h[2][N], l[N];
    /* Both tenants on both agents: heavy from agent 0 and 1, light from 1. */
    for (int i = 0; i < N; i++) {
        acquire(&f, 0, &h[0][i], 0, NULL, "heavy");
        acquire(&f, 1, &h[1][i], 0, NULL, "heavy");
        acquire(&f, 1, &l[i], 1, NULL, "light");
    }
    uint64_t t0 = uv_now(&f.loop);
    /* Fixed windows of load are what is measured: 9 s of both tenants
     * (from 1 s on), then the heavy one alone from 5 s after the light one
     * goes idle. The counts below must fill them at the rate, so a window
     * cut short fails. */
    loop_run_for(&f.loop, 10000);
    uint64_t t_idle = uv_now(&f.loop);
    /* The light tenant goes idle: its callers give up. */
    for (int i = 0; i < N; i++)
        if (!l[i].called && l[i].call) engine_cancel(l[i].call);
    loop_run_for(&f.loop, 8000);
    uint64_t t_end = uv_now(&f.loop);
    size_t hv = 0, lt = 0, after = 0;
    replay rp;
    replay_init(&rp);
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < N; i++)
            if (h[a][i].called) {
                replay_add(&rp, (double)h[a][i].planned, 1);
                if (h[a][i].at >= t0 + 1000 && h[a][i].at < t_idle) hv++;
                if (h[a][i].at >= t_idle + 5000 && h[a][i].at < t_end) after++;
            }
    for (int i = 0; i < N; i++)
        if (l[i].called) {
            replay_add(&rp, (double)l[i].planned, 1);
            if (l[i].at >= t0 + 1000 && l[i].at < t_idle) lt++;
        }
    double ratio = (double)hv / (double)lt;
    double share_after = (double)after / ((double)(t_end - t_idle - 5000) / 50.0);
    size_t rej = replay_rejections(&rp, 20, 1200.0 / 60000.0, NULL);
    print_message("  heavy:light %zu:%zu = %.2f (3 wanted); heavy alone from 5 s after: %.1f %% of the rate; "
                  "%zu rejections\n",
                  hv, lt, ratio, 100 * share_after, rej);
    assert_true(ratio >= 2.7 && ratio <= 3.3);
    /* Both tenants together used the rate over those 9 s (20/s). */
    assert_true((double)(hv + lt) >= 0.97 * (double)(t_idle - t0 - 1000) / 50.0);
    assert_true(t_end - t_idle >= 7000);
    assert_true(share_after >= 0.95);
    assert_int_equal(rej, 0);
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < N; i++)
            if (!h[a][i].called && h[a][i].call) engine_cancel(h[a][i].call);
    replay_free(&rp);
    fleet_close(&f);
}

/* An unknown lane is refused. */
static void test_unknown_lane_refused(void **state) {
    (void)state;
    fleet f;
    fleet_init(&f, 1, "unknown", "    rpm: 600\n    lanes:\n      only: {}\n");
    req r;
    assert_int_equal(engine_acquire(f.e[0], f.dep, 0, 1000, "other", NULL, on_acquired, &r, NULL), SL_EINVAL);
    fleet_close(&f);
}

static int req_called(void *arg) { return ((req *)arg)->called > 0; }

typedef struct class_seen {
    const char *dep;
    unsigned long long default_grants, known_grants, other_classes;
} class_seen;

static void on_class(void *ud, const char *deployment, const char *lane, const char *tenant,
                     const engine_class_stats *st) {
    class_seen *c = ud;
    (void)lane;
    if (strcmp(deployment, c->dep) != 0) return;
    if (!strcmp(tenant, "default")) c->default_grants += st->grants;
    else if (!strcmp(tenant, "known")) c->known_grants += st->grants;
    else c->other_classes++;
}

/* A tenant the deployment does not configure falls in its one "default"
 * class: the agent queues it there, Redis counts its grant there
 * (tenant.default.* in STATUS), and no state is made for the name. */
static void test_unknown_tenant_in_default_class(void **state) {
    (void)state;
    fleet f;
    fleet_init(&f, 1, "unknownt", "    rpm: 600\n    tenants:\n      known: { weight: 1 }\n");
    char v[128];
    assert_true(engine_status_field(&f.loop, f.e[0], f.dep, "tenant.default.granted_total", v, sizeof(v)));
    assert_string_equal(v, "0");
    req r;
    acquire(&f, 0, &r, 0, NULL, "whoever");
    assert_true(loop_run_until(&f.loop, req_called, &r, 3000));
    assert_int_equal(r.status, SL_OK);
    /* The agent's side: the request was held in the default class. */
    class_seen c = {.dep = f.dep};
    engine_foreach_class(f.e[0], on_class, &c);
    print_message("  tenant \"whoever\": agent classes default %llu grants, known %llu, other classes %llu\n",
                  c.default_grants, c.known_grants, c.other_classes);
    assert_int_equal(c.default_grants, 1);
    assert_int_equal(c.known_grants, 0);
    assert_int_equal(c.other_classes, 0);
    /* Redis' side: the grant counts for the default class, none for the
     * configured tenant, and the name has no fields of its own. */
    assert_true(engine_status_field(&f.loop, f.e[0], f.dep, "tenant.default.granted_total", v, sizeof(v)));
    print_message("  STATUS: tenant.default.granted_total %s", v);
    assert_string_equal(v, "1");
    assert_true(engine_status_field(&f.loop, f.e[0], f.dep, "tenant.known.granted_total", v, sizeof(v)));
    print_message(", tenant.known.granted_total %s\n", v);
    assert_string_equal(v, "0");
    assert_false(engine_status_field(&f.loop, f.e[0], f.dep, "tenant.whoever.granted_total", v, sizeof(v)));
    fleet_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interactive_through_agents),
        cmocka_unit_test(test_tenants_through_agents),
        cmocka_unit_test(test_unknown_lane_refused),
        cmocka_unit_test(test_unknown_tenant_in_default_class),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
