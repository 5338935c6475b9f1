/* test_rrouter: the router on its own, against real redis-servers.
 *
 * Proves: a seed that answers CLUSTER SLOTS with an error does not keep the
 * router from asking the other seeds; a sentinel that does not know the
 * master does not keep it from asking the others; a READONLY reply (the
 * Sentinel master was demoted while the connection stayed up) makes the
 * router ask the sentinels again at once; closing the router with routed
 * calls in flight (one of them being redirected) calls each callback once. */
#define _GNU_SOURCE
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
#include "loop.h"
#include "redis_fixture.h"
#include "realtime.h"
#include "rrouter.h"
#include "scripts.h"
#include "sluice.h"

static void noop_up(void *ud) { (void)ud; }
static void noop_down(void *ud, const char *why) { (void)ud, (void)why; }

static config_redis base_cfg(void) {
    config_redis c;
    memset(&c, 0, sizeof(c));
    c.host = "";
    c.unix_path = "";
    c.username = "";
    c.password = "";
    c.timeout_ms = 500;
    c.connect_timeout_ms = 500;
    return c;
}

/* A Sentinel configuration with one sentinel, s, asked for master; o holds
 * the address list the configuration points at. */
typedef struct one_sentinel {
    char addr[64];
    char *list[1];
} one_sentinel;

static config_redis sentinel_cfg(one_sentinel *o, const redis_fixture *s, char *master) {
    config_redis cfg = base_cfg();
    snprintf(o->addr, sizeof(o->addr), "127.0.0.1:%d", s->port);
    o->list[0] = o->addr;
    cfg.sentinel_master = master;
    cfg.sentinels = o->list;
    cfg.nsentinels = 1;
    return cfg;
}

static void cmd(redis_fixture *f, const char *fmt, ...) {
    redisContext *c = redis_fixture_connect_tcp(f);
    assert_non_null(c);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("%s: %s", fmt, r->str);
    freeReplyObject(r);
    redisFree(c);
}

typedef struct rt {
    uv_loop_t loop;
    rrouter *r;
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
} rt;

static int key_ready(void *a) {
    rt *t = a;
    return rrouter_ready(t->r, t->keys[0]);
}

/* The useful answers the router has had (slot maps read, masters found). */
static unsigned long long refreshes_of(rt *t) {
    rconn_stats st;
    unsigned long long red, ref;
    size_t n;
    rrouter_get_stats(t->r, &st, &red, &ref, &n);
    return ref;
}

static void rt_open(rt *t, config_redis *cfg) {
    memset(t, 0, sizeof(*t));
    uv_loop_init(&t->loop);
    assert_int_equal(scripts_keys("dep", t->keys), 0);
    rconn_events ev = {noop_up, noop_down};
    assert_int_equal(rrouter_new(&t->loop, cfg, ev, NULL, &t->r), 0);
    rrouter_start(t->r);
}

static int closed;
static void on_closed(void *arg) { (void)arg, closed++; }

static void rt_close(rt *t) {
    closed = 0;
    rrouter_close(t->r, on_closed, NULL);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, 1);
    assert_int_equal(uv_loop_close(&t->loop), 0);
}

/* ---- a seed that answers CLUSTER SLOTS with an error ----------------------- */

static void test_cluster_error_seed_does_not_stick(void **state) {
    redis_fixture plain, node;
    /* The first seed is a Redis without Cluster (a mistake in the list, or
     * a node denied CLUSTER SLOTS); the second serves every slot but is
     * down when the agent starts. */
    assert_int_equal(redis_fixture_start_ex(&plain, "", 0), 0);
    assert_int_equal(redis_fixture_start(&node, 1), 0);
    redis_fixture_kill(&node, 1);
    config_redis cfg = base_cfg();
    char s0[64], s1[64];
    snprintf(s0, sizeof(s0), "127.0.0.1:%d", plain.port);
    snprintf(s1, sizeof(s1), "127.0.0.1:%d", node.port);
    char *seeds[] = {s0, s1};
    cfg.cluster = seeds;
    cfg.ncluster = 2;
    rt t;
    rt_open(&t, &cfg);
    loop_run_for(&t.loop, 1500); /* the first seed was asked and said no */
    assert_int_equal(redis_fixture_restart(&node), 0);
    /* The second seed is up: the next refreshes must ask it. */
    int ok = loop_run_until(&t.loop, key_ready, &t, 6000);
    print_message("  slot map refreshes %llu, key ready %d\n", refreshes_of(&t), ok);
    assert_true(ok);
    rt_close(&t);
    redis_fixture_stop(&node);
    redis_fixture_stop(&plain);
}

/* ---- an unknown endpoint ------------------------------------------------------ */

/* A node that prefers no endpoint (cluster-preferred-endpoint-type
 * unknown-endpoint) names its slots' masters with a NULL host: the
 * client connects to the node it asked, at the port given (the CLUSTER
 * SLOTS documentation). Those slots were left unmapped. */
static void test_cluster_unknown_endpoint(void **state) {
    redis_fixture node;
    assert_int_equal(redis_fixture_start(&node, 1), 0);
    cmd(&node, "CONFIG SET cluster-preferred-endpoint-type unknown-endpoint");
    config_redis cfg = base_cfg();
    char s0[64];
    snprintf(s0, sizeof(s0), "127.0.0.1:%d", node.port);
    char *seeds[] = {s0};
    cfg.cluster = seeds;
    cfg.ncluster = 1;
    rt t;
    rt_open(&t, &cfg);
    int ok = loop_run_until(&t.loop, key_ready, &t, 6000);
    print_message("  slots of a NULL endpoint mapped to the node asked: %d\n", ok);
    assert_true(ok);
    rt_close(&t);
    redis_fixture_stop(&node);
}

/* ---- a sentinel that does not know the master ------------------------------- */

static void test_sentinel_unknown_master_does_not_stick(void **state) {
    redis_fixture master, s0, s1;
    assert_int_equal(redis_fixture_start_ex(&master, "", 0), 0);
    assert_int_equal(redis_fixture_start_ex(&s0, "", master.port), 0);
    assert_int_equal(redis_fixture_start_ex(&s1, "", master.port), 0);
    /* s0 forgets the master (a sentinel restarted without its config, or
     * one not configured yet); s1, the only one that knows, is down when
     * the agent starts. */
    cmd(&s0, "SENTINEL REMOVE mymaster");
    redis_fixture_kill(&s1, 1);
    config_redis cfg = base_cfg();
    char a0[64], a1[64];
    snprintf(a0, sizeof(a0), "127.0.0.1:%d", s0.port);
    snprintf(a1, sizeof(a1), "127.0.0.1:%d", s1.port);
    char *sentinels[] = {a0, a1};
    cfg.sentinel_master = "mymaster";
    cfg.sentinels = sentinels;
    cfg.nsentinels = 2;
    rt t;
    rt_open(&t, &cfg);
    loop_run_for(&t.loop, 1500);
    assert_int_equal(redis_fixture_restart(&s1), 0);
    int ok = loop_run_until(&t.loop, key_ready, &t, 6000);
    print_message("  master found through the second sentinel: %d\n", ok);
    assert_true(ok);
    rt_close(&t);
    redis_fixture_stop(&s1);
    redis_fixture_stop(&s0);
    redis_fixture_stop(&master);
}

/* ---- Sentinel mode with no master to use says why ---------------------------- */

static int downs;
static char down_why[256];
static void count_down(void *ud, const char *why) {
    (void)ud;
    downs++;
    snprintf(down_why, sizeof(down_why), "%s", why ? why : "");
}

/* A master name the sentinels do not monitor (a typo in
 * redis.sentinel.master), then every sentinel down: the agent paces
 * locally, and rrouter_last_error() (INFO redis_last_error, STATUS
 * redis_error) and the down event (the log's "Redis unreachable") must
 * say why, once per reason. They said nothing. */
static void test_sentinel_without_master_says_why(void **state) {
    redis_fixture master, s0;
    assert_int_equal(redis_fixture_start_ex(&master, "", 0), 0);
    assert_int_equal(redis_fixture_start_ex(&s0, "", master.port), 0);
    one_sentinel os;
    config_redis cfg = sentinel_cfg(&os, &s0, "nosuchmaster");
    rt t;
    memset(&t, 0, sizeof(t));
    uv_loop_init(&t.loop);
    assert_int_equal(scripts_keys("dep", t.keys), 0);
    rconn_events ev = {noop_up, count_down};
    downs = 0;
    down_why[0] = '\0';
    assert_int_equal(rrouter_new(&t.loop, &cfg, ev, NULL, &t.r), 0);
    rrouter_start(t.r);
    loop_run_for(&t.loop, 2500); /* the sentinel was asked twice or more */
    print_message("  unknown master: last error '%s', %d down events\n", rrouter_last_error(t.r), downs);
    assert_false(rrouter_any_ready(t.r));
    assert_non_null(strstr(rrouter_last_error(t.r), "nosuchmaster"));
    assert_int_equal(downs, 1);
    assert_non_null(strstr(down_why, "nosuchmaster"));
    redis_fixture_kill(&s0, 1);
    loop_run_for(&t.loop, 1500);
    print_message("  sentinel down: last error '%s', %d down events\n", rrouter_last_error(t.r), downs);
    assert_non_null(strstr(rrouter_last_error(t.r), os.addr));
    assert_true(downs >= 2); /* the connection lost, then refused */
    rt_close(&t);
    redis_fixture_stop(&s0);
    redis_fixture_stop(&master);
}

/* ---- the caller's config freed while the router lives (a SIGHUP) ----------- */

/* engine_reload() frees the configuration the router was made from; a node
 * found afterwards (here the Sentinel master, reachable only after the
 * reload; in Cluster mode any node of a new slot map) must still be
 * connected to with the user and password of the start. */
static void test_sentinel_master_found_after_config_freed(void **state) {
    redis_fixture master, s0;
    assert_int_equal(redis_fixture_start_ex(&master, "", 0), 0);
    assert_int_equal(redis_fixture_start_ex(&s0, "", master.port), 0);
    cmd(&master, "CONFIG SET requirepass sentinel-test-secret");
    redis_fixture_kill(&s0, 1); /* down until after the "reload" */
    one_sentinel os;
    config_redis cfg = sentinel_cfg(&os, &s0, "mymaster");
    char *user = strdup("default"), *pass = strdup("sentinel-test-secret");
    assert_non_null(user);
    assert_non_null(pass);
    cfg.username = user;
    cfg.password = pass;
    rt t;
    rt_open(&t, &cfg);
    loop_run_for(&t.loop, 300);
    /* The reload: the old configuration's strings are wiped and freed. */
    memset(pass, 'x', strlen(pass));
    memset(user, 'x', strlen(user));
    free(pass);
    free(user);
    cfg.username = cfg.password = NULL;
    assert_int_equal(redis_fixture_restart(&s0), 0);
    int ok = loop_run_until(&t.loop, key_ready, &t, 6000);
    print_message("  master found and authenticated after the config was freed: %d\n", ok);
    assert_true(ok);
    rt_close(&t);
    redis_fixture_stop(&s0);
    redis_fixture_stop(&master);
}

/* ---- READONLY under Sentinel ------------------------------------------------ */

typedef struct reply_seen {
    int n;
    char first[128];
    int ok;
} reply_seen;

static void on_reply(void *arg, redisReply *r, const char *err) {
    reply_seen *s = arg;
    s->n++;
    s->ok = r && r->type != REDIS_REPLY_ERROR;
    snprintf(s->first, sizeof(s->first), "%s", r ? (r->type == REDIS_REPLY_ERROR ? r->str : "(reply)") : err);
}

static int seen_reply(void *a) { return ((reply_seen *)a)->n > 0; }

typedef struct refresh_wait {
    rt *t;
    unsigned long long from;
} refresh_wait;

static int refreshed(void *a) {
    refresh_wait *w = a;
    return refreshes_of(w->t) > w->from && rrouter_ready(w->t->r, w->t->keys[0]);
}

static void configure_call(rt *t, reply_seen *s) {
    const char *argv[] = {"rpm", "60"};
    memset(s, 0, sizeof(*s));
    assert_int_equal(rrouter_script(t->r, SCRIPT_CONFIGURE, t->keys, 2, argv, on_reply, s), 0);
    assert_true(loop_run_until(&t->loop, seen_reply, s, 2000));
}

static void test_sentinel_readonly_asks_again(void **state) {
    redis_fixture a, b, s;
    assert_int_equal(redis_fixture_start_ex(&a, "", 0), 0);
    assert_int_equal(redis_fixture_start_ex(&b, "", 0), 0);
    assert_int_equal(redis_fixture_start_ex(&s, "", a.port), 0);
    one_sentinel os;
    config_redis cfg = sentinel_cfg(&os, &s, "mymaster");
    rt t;
    rt_open(&t, &cfg);
    assert_true(loop_run_until(&t.loop, key_ready, &t, 5000));
    reply_seen rs;
    configure_call(&t, &rs);
    assert_true(rs.ok);
    /* The sentinel now names b; the router moves there at its next poll,
     * which this waits for: the poll after it is 5 s away. */
    cmd(&s, "SENTINEL REMOVE mymaster");
    cmd(&s, "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", b.port);
    refresh_wait w = {&t, refreshes_of(&t)};
    assert_true(loop_run_until(&t.loop, refreshed, &w, 7000));
    loop_run_for(&t.loop, 1300); /* past the poll 1 s after the move (b was not ready at it) */
    configure_call(&t, &rs);
    assert_true(rs.ok);
    /* b is demoted (its clients stay connected) and a is the master again. */
    cmd(&s, "SENTINEL REMOVE mymaster");
    cmd(&s, "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", a.port);
    cmd(&b, "REPLICAOF 127.0.0.1 %d", a.port);
    configure_call(&t, &rs);
    print_message("  on the demoted master: %s\n", rs.first);
    assert_int_equal(strncmp(rs.first, "READONLY", 8), 0);
    uint64_t t0 = uv_now(&t.loop);
    w.from = refreshes_of(&t);
    /* At once, where the old code waited for the next poll (about 4.6 s
     * away): a bound of real time, asserted by the reliability run
     * (tests/support/realtime.h); here the router must follow at all. */
    int moved = loop_run_until(&t.loop, refreshed, &w, 3000);
    uint64_t took = uv_now(&t.loop) - t0;
    print_message("  followed the sentinel %llu ms after READONLY: %d\n", (unsigned long long)took, moved);
    assert_realtime(moved, "followed the sentinel %llu ms after READONLY, bound 3000 ms", (unsigned long long)took);
    if (!moved) assert_true(loop_run_until(&t.loop, refreshed, &w, 10000));
    configure_call(&t, &rs);
    assert_true(rs.ok);
    rt_close(&t);
    redis_fixture_stop(&s);
    redis_fixture_stop(&b);
    redis_fixture_stop(&a);
}

/* ---- the URL's database under Sentinel ---------------------------------------- */

/* redis://host/2 with Sentinel: the master the sentinels name is that
 * Redis, and the agent's keys go to database 2 as `sluice status` (which
 * SELECTs it) reads them, not to database 0. */
static void test_sentinel_master_uses_url_db(void **state) {
    redis_fixture master, s0;
    assert_int_equal(redis_fixture_start_ex(&master, "", 0), 0);
    assert_int_equal(redis_fixture_start_ex(&s0, "", master.port), 0);
    one_sentinel os;
    config_redis cfg = sentinel_cfg(&os, &s0, "mymaster");
    cfg.db = 2;
    rt t;
    rt_open(&t, &cfg);
    assert_true(loop_run_until(&t.loop, key_ready, &t, 6000));
    reply_seen rs;
    configure_call(&t, &rs);
    assert_true(rs.ok);
    redisContext *c = redis_fixture_connect_tcp(&master);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "SELECT 2");
    assert_non_null(r);
    freeReplyObject(r);
    r = redisCommand(c, "EXISTS %s", t.keys[0]);
    assert_non_null(r);
    print_message("  %s in database 2: %lld\n", t.keys[0], r->integer);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(c);
    rt_close(&t);
    redis_fixture_stop(&s0);
    redis_fixture_stop(&master);
}

/* ---- close with routed calls in flight, one redirected ---------------------- */

static void test_close_during_redirect(void **state) {
    redis_fixture n0, n1;
    assert_int_equal(redis_fixture_start(&n0, 2), 0);
    assert_int_equal(redis_fixture_start(&n1, 2), 0);
    cmd(&n0, "CLUSTER MEET 127.0.0.1 %d", n1.port);
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    assert_int_equal(scripts_keys("dep", keys), 0);
    unsigned slot = rrouter_key_slot(keys[0], strlen(keys[0])), other = (slot + 1) % 16384;
    /* n0 serves every slot but one, n1 that one: both are in the map. */
    for (unsigned s = 0; s < 16384; s++)
        if (s != other) cmd(&n0, "CLUSTER ADDSLOTS %u", s);
    cmd(&n1, "CLUSTER ADDSLOTS %u", other);
    rt t;
    config_redis cfg = base_cfg();
    char s0[64];
    snprintf(s0, sizeof(s0), "127.0.0.1:%d", n0.port);
    char *seeds[] = {s0};
    cfg.cluster = seeds;
    cfg.ncluster = 1;
    rt_open(&t, &cfg);
    assert_true(loop_run_until(&t.loop, key_ready, &t, 5000));
    /* Wait until the router is connected to n1 too (gossip, then a refresh). */
    for (int i = 0; i < 100; i++) {
        rconn_stats st;
        unsigned long long red, ref;
        size_t n;
        rrouter_get_stats(t.r, &st, &red, &ref, &n);
        if (n >= 2 && st.connects >= 2) break;
        loop_run_for(&t.loop, 100);
    }
    /* Hand the deployment's slot to n1 behind the router's back: its next
     * call there gets MOVED and follows it. */
    redisContext *c1 = redis_fixture_connect_tcp(&n1);
    redisReply *id = redisCommand(c1, "CLUSTER MYID");
    assert_int_equal(id->type, REDIS_REPLY_STRING);
    cmd(&n0, "CLUSTER SETSLOT %u NODE %s", slot, id->str);
    cmd(&n1, "CLUSTER SETSLOT %u NODE %s", slot, id->str);
    freeReplyObject(id);
    redisFree(c1);
    enum { N = 20 };
    reply_seen rs[N];
    const char *argv[] = {"rpm", "60"};
    memset(rs, 0, sizeof(rs));
    for (int i = 0; i < N; i++)
        assert_int_equal(rrouter_script(t.r, SCRIPT_CONFIGURE, t.keys, 2, argv, on_reply, &rs[i]), 0);
    /* Run until the first MOVED was followed, then close. */
    unsigned long long red = 0;
    for (int i = 0; i < 2000; i++) {
        rconn_stats st;
        unsigned long long ref;
        size_t n;
        rrouter_get_stats(t.r, &st, &red, &ref, &n);
        if (red > 0) break;
        uv_run(&t.loop, UV_RUN_ONCE);
    }
    assert_true(red > 0);
    rt_close(&t);
    int answered = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(rs[i].n, 1);
        answered += rs[i].ok;
    }
    print_message("  %d calls, %llu redirected: each callback once, %d answered before the close (first: %s)\n", N, red,
                  answered, rs[0].first);
    redis_fixture_stop(&n1);
    redis_fixture_stop(&n0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_error_seed_does_not_stick),
        cmocka_unit_test(test_cluster_unknown_endpoint),
        cmocka_unit_test(test_sentinel_unknown_master_does_not_stick),
        cmocka_unit_test(test_sentinel_without_master_says_why),
        cmocka_unit_test(test_sentinel_master_found_after_config_freed),
        cmocka_unit_test(test_sentinel_readonly_asks_again),
        cmocka_unit_test(test_sentinel_master_uses_url_db),
        cmocka_unit_test(test_close_during_redirect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
