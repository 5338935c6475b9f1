/* test_group_routing: ACQUIRE <group> through real engines against a real
 * redis-server, in real time.
 *
 * Proves the engine's routing rules with counts: with capacity to spare
 * everything stays on the primary; past spill_ms requests spill to the next
 * member in order, and once every member is past it, to the soonest; one
 * request never holds reservations on two members (the members' granted
 * counters in Redis add up to exactly the requests granted); tags restrict
 * the members for good; every member's release times replay through its
 * provider bucket without a rejection. The end-to-end proofs against mock
 * providers (429s, breakers, residency on the providers' ledgers) are in
 * test_groups.
 *
 * On one Redis the engine asks the group script, which decides among the
 * members atomically; with Redis Cluster (members in different slots) it
 * routes step by step. test_group_routing_cluster.c runs this same file on
 * a one-node Redis Cluster, so both paths are proven by the same tests. */
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
#include <hiredis/hiredis.h>
#include <uv.h>

#include "config.h"
#include "engine.h"
#include "loop.h"
#include "redis_fixture.h"
#include "realtime.h"
#include "replay.h"
#include "sluice.h"

#ifndef ROUTING_CLUSTER
#define ROUTING_CLUSTER 0
#endif

static redis_fixture fx;

static int group_setup(void **state) {
    (void)state;
    return redis_fixture_start(&fx, ROUTING_CLUSTER);
}
static int group_teardown(void **state) {
    (void)state;
    redis_fixture_stop(&fx);
    return 0;
}

typedef struct world {
    uv_loop_t loop;
    engine *e[2];
    int n;
} world;

/* redis_extra: more lines of the redis section ("  key: value\n"). */
static void world_init_ex(world *w, int n, const char *redis_extra, const char *yaml) {
    char text[4096], err[512];
    memset(w, 0, sizeof(*w));
    uv_loop_init(&w->loop);
    w->n = n;
    for (int i = 0; i < n; i++) {
        if (ROUTING_CLUSTER)
            snprintf(text, sizeof(text),
                     "redis:\n  cluster: [127.0.0.1:%d]\n  timeout_ms: 1000\n%s"
                     "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n%s",
                     fx.port, redis_extra, yaml);
        else
            snprintf(text, sizeof(text),
                     "redis:\n  url: unix://%s\n  timeout_ms: 1000\n%s"
                     "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n%s",
                     fx.sock, redis_extra, yaml);
        config *cfg = NULL;
        if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
        char id[32];
        snprintf(id, sizeof(id), "agent-%d", i);
        assert_int_equal(engine_new(&w->loop, cfg, id, &w->e[i]), 0);
        engine_start(w->e[i]);
    }
    loop_run_for(&w->loop, 300);
}

static void world_init(world *w, int n, const char *yaml) { world_init_ex(w, n, "", yaml); }

static void on_stopped(void *arg) { (void)arg; }

static void world_close(world *w) {
    for (int i = 0; i < w->n; i++) engine_stop(w->e[i], on_stopped, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    for (int i = 0; i < w->n; i++) engine_free(w->e[i]);
    assert_int_equal(uv_loop_close(&w->loop), 0);
}

typedef struct req {
    world *w;
    int status, called;
    char member[CONFIG_NAME_MAX + 1], endpoint[128], reason[16];
    long long retry_after;
    uint64_t asked, at; /* uv_now at acquire and at release */
    uint64_t planned;   /* the release the engine planned (engine_grant.planned_ms) */
} req;

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    (void)msg;
    req *r = arg;
    r->status = status;
    r->called++;
    r->at = uv_now(&r->w->loop);
    if (g) {
        r->planned = g->planned_ms;
        assert_true(g->planned_ms <= r->at); /* released at its plan or later, never earlier */
        snprintf(r->member, sizeof(r->member), "%s", g->deployment);
        snprintf(r->endpoint, sizeof(r->endpoint), "%s", g->endpoint);
        assert_int_equal(g->group, 1);
        /* The grant id names the member it was reserved on. */
        assert_int_equal(strncmp(g->id, g->deployment, strlen(g->deployment)), 0);
    }
    if (shed) {
        snprintf(r->reason, sizeof(r->reason), "%s", shed->reason);
        r->retry_after = shed->retry_after_ms;
    }
}

static void ask(world *w, int agent, req *r, const char *name, long long max_wait, const char *tenant,
                const char *tag) {
    *r = (req){.w = w, .asked = uv_now(&w->loop)};
    engine_req rq = {.name = name, .max_wait_ms = max_wait, .tenant = tenant, .tag = tag};
    assert_int_equal(engine_acquire_req(w->e[agent], &rq, on_acquired, r, NULL), 0);
}

typedef struct all_arg {
    req *r;
    int n;
} all_arg;

static int all_called(void *arg) {
    all_arg *a = arg;
    for (int i = 0; i < a->n; i++)
        if (!a->r[i].called) return 0;
    return 1;
}

static long long granted_total(const char *dep) {
    redisContext *c = redisConnectUnix(fx.sock);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "HGET sluice:{%s}:state granted_total", dep);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

#define GROUP_YAML(p)                                                                                                  \
    "deployments:\n"                                                                                                   \
    "  " p "a: { rpm: 600, burst: { requests: 10 }, endpoint: \"http://a.example\", tags: [eu] }\n"                    \
    "  " p "b: { rpm: 600, burst: { requests: 10 }, endpoint: \"http://b.example\", tags: [eu] }\n"                    \
    "  " p "c: { rpm: 600, burst: { requests: 10 }, endpoint: \"http://c.example\", tags: [us] }\n"                    \
    "groups:\n"                                                                                                        \
    "  " p "g:\n"                                                                                                      \
    "    members: [" p "a, " p "b, " p "c]\n"                                                                          \
    "    spill_ms: 200\n"                                                                                              \
    "    tenants:\n"                                                                                                   \
    "      acme: { tag: us }\n"

/* Every one of the n requests granted; on[m] of them on member m (names
 * "<p>a", "<p>b", "<p>c"), each planned release added to rp[m]
 * (initialised here: the plan, which a loaded machine does not move, not
 * the callback, which it delays and bunches); first: the earliest ask,
 * last: the latest release. */
static void tally(const req *r, int n, int on[3], replay rp[3], uint64_t *first, uint64_t *last) {
    *first = UINT64_MAX;
    *last = 0;
    for (int m = 0; m < 3; m++) {
        on[m] = 0;
        replay_init(&rp[m]);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(r[i].status, SL_OK);
        int m = r[i].member[1] - 'a';
        assert_true(m >= 0 && m < 3);
        on[m]++;
        replay_add(&rp[m], (double)r[i].planned, 1);
        if (r[i].asked < *first) *first = r[i].asked;
        if (r[i].at > *last) *last = r[i].at;
    }
}

static void test_spare_capacity_stays_on_primary(void **state) {
    (void)state;
    world w;
    world_init(&w, 2, GROUP_YAML("s"));
    enum { N = 10 };
    req r[N];
    for (int i = 0; i < N; i++) ask(&w, i % 2, &r[i], "sg", 5000, NULL, NULL);
    all_arg a = {r, N};
    assert_true(loop_run_until(&w.loop, all_called, &a, 5000));
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].status, SL_OK);
        assert_string_equal(r[i].member, "sa");
        assert_string_equal(r[i].endpoint, "http://a.example");
    }
    assert_int_equal(granted_total("sa"), N);
    assert_int_equal(granted_total("sb") + granted_total("sc"), 0);
    world_close(&w);
}

static void test_spill_in_order_then_soonest(void **state) {
    (void)state;
    world w;
    world_init(&w, 2, GROUP_YAML("p"));
    enum { N = 90 };
    static req r[N];
    for (int i = 0; i < N; i++) ask(&w, i % 2, &r[i], "pg", 20000, NULL, NULL);
    all_arg a = {r, N};
    assert_true(loop_run_until(&w.loop, all_called, &a, 20000));
    int on[3], late = 0;
    uint64_t first, last;
    replay rp[3];
    tally(r, N, on, rp, &first, &last);
    for (int i = 0; i < N; i++)
        if (r[i].planned - r[i].asked > 200 + 30) late++;
    long long ga = granted_total("pa"), gb = granted_total("pb"), gc = granted_total("pc");
    print_message("  %d requests at once: %d / %d / %d on the three members, %d waited past spill_ms; "
                  "Redis granted %lld / %lld / %lld; makespan %llu ms (floor 2000)\n",
                  N, on[0], on[1], on[2], late, ga, gb, gc, (unsigned long long)(last - first));
    /* Never two reservations for one request. */
    assert_int_equal(ga, on[0]);
    assert_int_equal(gb, on[1]);
    assert_int_equal(gc, on[2]);
    /* In order: each member's burst plus what fits within spill_ms (10 +
     * 2 at 600 rpm) before the next is used, and all three are used. */
    assert_true(on[0] >= 12 && on[1] >= 12 && on[2] >= 12);
    /* The rest went to whichever was soonest (counting the requests this
     * agent already queued there): the load ends balanced. */
    assert_true(abs(on[0] - on[2]) <= 3 && abs(on[0] - on[1]) <= 3);
    /* Beyond the spill phase requests do wait (90 > 3 x 12), and the group
     * is used as one pool: (90 - 3 bursts) / (3 x 10 per s) = 2 s. */
    assert_true(late > 0);
    assert_realtime(last - first <= 2500, "makespan %llu ms over 2500 ms", (unsigned long long)(last - first));
    for (int m = 0; m < 3; m++) {
        assert_int_equal(replay_rejections(&rp[m], 10, 600.0 / 60000.0, NULL), 0);
        replay_free(&rp[m]);
    }
    world_close(&w);
}

/* redis.max_script_ms under what any call takes (10 µs): the group's calls
 * are split like a deployment's, one request per call once the first
 * call's time is known (on one Redis: 1 call of COSTMODEL_FIRST_CAP, then
 * one each, 16 + 74 for 90), and the routing is what it is without the
 * bound: every request granted once, the members' counts in Redis adding
 * up to the requests, no rejection on any member's replay, the group used
 * as one pool. Under Cluster the engine routes step by step (plain reserves
 * on the members, bounded the same way). */
static void test_group_calls_split_under_script_bound(void **state) {
    (void)state;
    world w;
    world_init_ex(&w, 1, "  max_script_ms: 0.01\n", GROUP_YAML("x"));
    enum { N = 90, FIRST = 16 };
    static req r[N];
    engine_stats s0, s;
    engine_get_stats(w.e[0], &s0);
    for (int i = 0; i < N; i++) ask(&w, 0, &r[i], "xg", 20000, NULL, NULL);
    all_arg a = {r, N};
    assert_true(loop_run_until(&w.loop, all_called, &a, 20000));
    int on[3];
    uint64_t first, last;
    replay rp[3];
    tally(r, N, on, rp, &first, &last);
    engine_get_stats(w.e[0], &s);
    unsigned long long calls = s.reserve_calls - s0.reserve_calls;
    print_message("  %d requests: %d / %d / %d on the members in %llu reserve calls, makespan %llu ms (floor 2000)\n",
                  N, on[0], on[1], on[2], calls, (unsigned long long)(last - first));
    assert_int_equal(granted_total("xa"), on[0]);
    assert_int_equal(granted_total("xb"), on[1]);
    assert_int_equal(granted_total("xc"), on[2]);
    assert_true(on[0] >= 12 && on[1] >= 12 && on[2] >= 12);
    assert_realtime(last - first <= 2500, "makespan %llu ms over 2500 ms", (unsigned long long)(last - first));
    for (int m = 0; m < 3; m++) {
        assert_int_equal(replay_rejections(&rp[m], 10, 600.0 / 60000.0, NULL), 0);
        replay_free(&rp[m]);
    }
    if (!ROUTING_CLUSTER) assert_int_equal(calls, 1 + (N - FIRST));
    else assert_true(calls >= N - 3 * FIRST); /* each member's first call may carry FIRST */
    world_close(&w);
}

static void test_tags_restrict_members(void **state) {
    (void)state;
    world w;
    world_init(&w, 1, GROUP_YAML("t"));
    enum { N = 40 };
    static req r[N];
    /* TAG eu: a and b only, even when both are busy and c is idle. */
    for (int i = 0; i < N; i++) ask(&w, 0, &r[i], "tg", 20000, NULL, "eu");
    all_arg a = {r, N};
    assert_true(loop_run_until(&w.loop, all_called, &a, 20000));
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].status, SL_OK);
        assert_true(!strcmp(r[i].member, "ta") || !strcmp(r[i].member, "tb"));
    }
    assert_int_equal(granted_total("tc"), 0);
    /* Tenant acme is restricted to us: c only. */
    for (int i = 0; i < 12; i++) ask(&w, 0, &r[i], "tg", 20000, "acme", NULL);
    a.n = 12;
    assert_true(loop_run_until(&w.loop, all_called, &a, 20000));
    for (int i = 0; i < 12; i++) {
        assert_int_equal(r[i].status, SL_OK);
        assert_string_equal(r[i].member, "tc");
    }
    /* acme asking for eu: nobody may serve it. */
    ask(&w, 0, &r[0], "tg", 20000, "acme", "eu");
    a.n = 1;
    assert_true(loop_run_until(&w.loop, all_called, &a, 2000));
    assert_int_equal(r[0].status, SL_ESHED);
    assert_string_equal(r[0].reason, "tag");
    assert_int_equal(r[0].retry_after, -1);
    /* A short max wait no member can meet: shed, and nothing reserved. */
    long long before = granted_total("ta") + granted_total("tb") + granted_total("tc");
    for (int i = 0; i < 40; i++) ask(&w, 0, &r[i], "tg", 0, NULL, "eu");
    a.n = 40;
    assert_true(loop_run_until(&w.loop, all_called, &a, 5000));
    int shed = 0, ok = 0;
    for (int i = 0; i < 40; i++) {
        if (r[i].status == SL_ESHED) {
            shed++;
            assert_true(r[i].retry_after > 0);
        } else {
            assert_int_equal(r[i].status, SL_OK);
            ok++;
        }
    }
    long long after = granted_total("ta") + granted_total("tb") + granted_total("tc");
    print_message("  max wait 0 under load: %d granted, %d shed; Redis granted %lld more\n", ok, shed, after - before);
    assert_true(shed > 0);
    assert_int_equal(after - before, ok);
    world_close(&w);
}

/* A request no member may serve is shed on the next turn, even when a
 * pause moves the member's held callers in the same turn: it waits on the
 * first member's list with no grant, and a pause's shift used to restart
 * its timer as a release (5 s later here, then granted with no grant id).
 * Without Redis (an address nobody listens on) the pause applies at once,
 * in the turn of engine_feedback. */
static void test_no_member_shed_through_a_pause(void **state) {
    (void)state;
    world w;
    char text[4096], err[512];
    memset(&w, 0, sizeof(w));
    uv_loop_init(&w.loop);
    w.n = 1;
    snprintf(text, sizeof(text),
             "redis:\n  url: unix:///tmp/sluice-nobody-%d.sock\n  timeout_ms: 200\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n%s",
             (int)getpid(), GROUP_YAML("n"));
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    assert_int_equal(engine_new(&w.loop, cfg, "agent-0", &w.e[0]), 0);
    engine_start(w.e[0]);
    loop_run_for(&w.loop, 300);
    req r;
    ask(&w, 0, &r, "ng", 20000, "acme", "eu");
    assert_int_equal(engine_feedback(w.e[0], "na", ENGINE_THROTTLED, 5000), 0);
    all_arg a = {&r, 1};
    assert_true(loop_run_until(&w.loop, all_called, &a, 2000));
    assert_int_equal(r.called, 1);
    assert_int_equal(r.status, SL_ESHED);
    assert_string_equal(r.reason, "tag");
    world_close(&w);
}

/* Weighted: members take turns in proportion to their rpm (2:1:1), exactly
 * while each has room, whatever the order of the members. */
static void test_weighted_shares(void **state) {
    (void)state;
    world w;
    world_init(&w, 1,
               "deployments:\n"
               "  wa: { rpm: 300, burst: { requests: 40 } }\n"
               "  wb: { rpm: 600, burst: { requests: 40 } }\n"
               "  wc: { rpm: 300, burst: { requests: 40 } }\n"
               "groups:\n"
               "  wg: { members: [wa, wb, wc], policy: weighted }\n");
    enum { N = 40 };
    req r[N];
    for (int i = 0; i < N; i++) ask(&w, 0, &r[i], "wg", 5000, NULL, NULL);
    all_arg a = {r, N};
    assert_true(loop_run_until(&w.loop, all_called, &a, 5000));
    int on[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].status, SL_OK);
        on[r[i].member[1] - 'a']++;
        /* Within any prefix of the requests, each member is within one
         * request of its share. */
        int seen = i + 1;
        assert_true(fabs(on[1] - seen * 0.5) <= 1.0 && fabs(on[0] - seen * 0.25) <= 1.0);
    }
    print_message("  weighted 1:2:1 by rpm: %d / %d / %d\n", on[0], on[1], on[2]);
    assert_int_equal(on[0], 10);
    assert_int_equal(on[1], 20);
    assert_int_equal(on[2], 10);
    world_close(&w);
}

static void test_unknown_group_and_bad_tag(void **state) {
    (void)state;
    world w;
    world_init(&w, 1, GROUP_YAML("u"));
    req r;
    engine_req rq = {.name = "nope", .max_wait_ms = 100};
    assert_int_equal(engine_acquire_req(w.e[0], &rq, on_acquired, &r, NULL), SL_EUNKNOWN);
    /* A tag a plain deployment does not carry is an error, not a shed. */
    engine_req rq2 = {.name = "uc", .max_wait_ms = 100, .tag = "eu"};
    assert_int_equal(engine_acquire_req(w.e[0], &rq2, on_acquired, &r, NULL), SL_EINVAL);
    world_close(&w);
}

/* The configuration world_init_ex gives its engines, for a reload. */
static config *world_config(const char *yaml) {
    char text[4096], err[512];
    if (ROUTING_CLUSTER)
        snprintf(text, sizeof(text),
                 "redis:\n  cluster: [127.0.0.1:%d]\n  timeout_ms: 1000\n"
                 "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n%s",
                 fx.port, yaml);
    else
        snprintf(text, sizeof(text),
                 "redis:\n  url: unix://%s\n  timeout_ms: 1000\n"
                 "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n%s",
                 fx.sock, yaml);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    return cfg;
}

#define RELOAD_YAML(members)                                                                                           \
    "deployments:\n"                                                                                                   \
    "  ra: { rpm: 600, burst: { requests: 10 }, endpoint: \"http://a.example\", tags: [eu] }\n"                        \
    "  rb: { rpm: 600, burst: { requests: 10 }, endpoint: \"http://b.example\", tags: [eu] }\n"                        \
    "  rc: { rpm: 600, burst: { requests: 10 }, endpoint: \"http://c.example\", tags: [us] }\n"                        \
    "groups:\n"                                                                                                        \
    "  rg: { members: [" members "], spill_ms: 200 }\n"

/* A request queued for the group when a reload reorders the group's
 * members, or takes out the only one its TAG allows: it is decided over
 * the members the new configuration allows it (never on one without its
 * tag), or shed `tag` when there is none. */
static void test_reload_keeps_tags(void **state) {
    (void)state;
    world w;
    world_init(&w, 1, RELOAD_YAML("ra, rb, rc"));
    req r;
    all_arg a = {&r, 1};
    /* TAG us: rc only, the third member. */
    ask(&w, 0, &r, "rg", 5000, NULL, "us");
    assert_int_equal(engine_reload(w.e[0], world_config(RELOAD_YAML("rc, ra, rb"))), 0);
    assert_true(loop_run_until(&w.loop, all_called, &a, 3000));
    print_message("  reordered: status %d on %s\n", r.status, r.member);
    assert_int_equal(r.status, SL_OK);
    assert_string_equal(r.member, "rc");
    if (!ROUTING_CLUSTER) { /* (under Cluster it is queued on rc at once) */
        ask(&w, 0, &r, "rg", 5000, NULL, "us");
        assert_int_equal(engine_reload(w.e[0], world_config(RELOAD_YAML("ra, rb"))), 0);
        assert_true(loop_run_until(&w.loop, all_called, &a, 3000));
        print_message("  rc taken out: status %d on %s, reason %s\n", r.status, r.member, r.reason);
        assert_int_equal(r.status, SL_ESHED);
        assert_string_equal(r.reason, "tag");
    }
    world_close(&w);
}

/* A request queued on a member when a reload takes that member out (the
 * deployment and its place in the group): it is routed again among the
 * members left, not answered "deployment removed". Under Cluster it is
 * queued on ra at once; on one Redis, in the group's queue. */
static void test_reload_removes_member(void **state) {
    (void)state;
    world w;
    world_init(&w, 1, RELOAD_YAML("ra, rb, rc"));
    req r;
    all_arg a = {&r, 1};
    ask(&w, 0, &r, "rg", 5000, NULL, "eu");
    assert_int_equal(engine_reload(w.e[0], world_config("deployments:\n"
                                                        "  rb: { rpm: 600, burst: { requests: 10 }, endpoint: "
                                                        "\"http://b.example\", tags: [eu] }\n"
                                                        "  rc: { rpm: 600, burst: { requests: 10 }, endpoint: "
                                                        "\"http://c.example\", tags: [us] }\n"
                                                        "groups:\n"
                                                        "  rg: { members: [rb, rc], spill_ms: 200 }\n")),
                     0);
    assert_true(loop_run_until(&w.loop, all_called, &a, 3000));
    print_message("  ra taken out: status %d on %s\n", r.status, r.member);
    assert_int_equal(r.status, SL_OK);
    assert_string_equal(r.member, "rb");
    world_close(&w);
}

typedef struct est_res {
    int called, status;
    long long wait_ms;
} est_res;

static void on_estimated(void *arg, int status, const engine_estimate *est, const char *msg) {
    (void)msg;
    est_res *x = arg;
    x->called++;
    x->status = status;
    x->wait_ms = est ? est->wait_ms : -1;
}

static int est_called(void *arg) { return ((est_res *)arg)->called; }

/* ESTIMATE of a group answered after a reload: the reload frees the
 * configuration the estimate was started on. */
static void test_estimate_across_a_reload(void **state) {
    (void)state;
    world w;
    world_init(&w, 1, RELOAD_YAML("ra, rb, rc"));
    est_res x = {0};
    engine_req rq = {.name = "rg", .max_wait_ms = 1000};
    assert_int_equal(engine_estimate_req(w.e[0], &rq, on_estimated, &x), 0);
    assert_int_equal(engine_reload(w.e[0], world_config(RELOAD_YAML("ra, rb, rc"))), 0);
    assert_true(loop_run_until(&w.loop, est_called, &x, 3000));
    assert_int_equal(x.called, 1);
    assert_int_equal(x.status, SL_OK);
    world_close(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spare_capacity_stays_on_primary),
        cmocka_unit_test(test_spill_in_order_then_soonest),
        cmocka_unit_test(test_group_calls_split_under_script_bound),
        cmocka_unit_test(test_tags_restrict_members),
        cmocka_unit_test(test_no_member_shed_through_a_pause),
        cmocka_unit_test(test_weighted_shares),
        cmocka_unit_test(test_unknown_group_and_bad_tag),
        cmocka_unit_test(test_reload_keeps_tags),
        cmocka_unit_test(test_reload_removes_member),
        cmocka_unit_test(test_estimate_across_a_reload),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
