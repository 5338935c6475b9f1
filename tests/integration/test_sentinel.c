/* test_sentinel: the engine follows a Sentinel failover.
 *
 * A master, one replica and three sentinels on loopback ports. The engine
 * asks the sentinels for the master, serves callers from Redis, keeps
 * serving them in fallback when the master is killed, and returns to Redis
 * on the promoted replica within seconds; the release times of the whole
 * run, across the failover, replay through the provider's bucket with zero
 * rejections. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include <uv.h>

#include "config.h"
#include "engine.h"
#include "redis_fixture.h"
#include "loop.h"
#include "realtime.h"
#include "replay.h"
#include "sluice.h"

static redis_fixture master, replica, sentinels[3];

static int info_has(redis_fixture *f, const char *section, const char *needle) {
    redisContext *c = redis_fixture_connect_tcp(f);
    if (!c) return 0;
    redisReply *r = redisCommand(c, "INFO %s", section);
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, needle) != NULL;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

static int wait_for(int (*pred)(void), int ms) {
    for (int waited = 0; waited < ms; waited += 20) {
        if (pred()) return 1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return pred();
}

static int replica_synced(void) { return info_has(&replica, "replication", "master_link_status:up"); }

static int sentinels_see_replica(void) {
    for (int i = 0; i < 3; i++)
        if (!info_has(&sentinels[i], "sentinel", "slaves=1,sentinels=3")) return 0;
    return 1;
}

static int group_setup(void **state) {
    char extra[64];
    if (redis_fixture_start_ex(&master, "", 0) != 0) return -1;
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d", master.port);
    if (redis_fixture_start_ex(&replica, extra, 0) != 0) return -1;
    for (int i = 0; i < 3; i++)
        if (redis_fixture_start_ex(&sentinels[i], "", master.port) != 0) return -1;
    if (!wait_for(replica_synced, 10000)) {
        fprintf(stderr, "replica did not sync\n");
        return -1;
    }
    if (!wait_for(sentinels_see_replica, 15000)) {
        fprintf(stderr, "sentinels did not discover each other and the replica\n");
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    for (int i = 0; i < 3; i++) redis_fixture_stop(&sentinels[i]);
    redis_fixture_stop(&replica);
    redis_fixture_stop(&master);
    return 0;
}

typedef struct world {
    uv_loop_t loop;
    engine *e;
    int done, target;
} world;

static void run_for(world *w, uint64_t ms) { loop_run_for(&w->loop, ms); }

static int ready(world *w) {
    engine_stats s;
    engine_get_stats(w->e, &s);
    return s.redis_up;
}

typedef struct acq {
    world *w;
    int status, local;
    uint64_t at;
} acq;

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    acq *a = arg;
    a->status = status;
    a->local = g ? g->local : 0;
    /* The release the engine planned, as test_cluster.c replays. */
    a->at = g ? g->planned_ms : uv_now(&a->w->loop);
    if (g) assert_true(g->planned_ms <= uv_now(&a->w->loop));
    a->w->done++;
}

static void test_failover_followed(void **state) {
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "redis:\n  sentinel:\n    master: mymaster\n"
             "    nodes: [127.0.0.1:%d, 127.0.0.1:%d, 127.0.0.1:%d]\n"
             "  timeout_ms: 500\n  connect_timeout_ms: 500\n"
             "agent:\n  socket: /tmp/unused.sock\n  heartbeat_ms: 200\n"
             "deployments:\n  gpt:\n    rpm: 3000\n    burst: { requests: 5 }\n",
             sentinels[0].port, sentinels[1].port, sentinels[2].port);
    config *cfg = NULL;
    if (config_load_string("test", text, strlen(text), &cfg, err, sizeof(err)) != 0) fail_msg("%s", err);
    world w = {0};
    uv_loop_init(&w.loop);
    assert_int_equal(engine_new(&w.loop, cfg, "agent-s", &w.e), 0);
    engine_start(w.e);
    for (int i = 0; i < 100 && !ready(&w); i++) run_for(&w, 50);
    assert_true(ready(&w));
    run_for(&w, 300);

    enum { N = 400 };
    static acq a[N];
    int issued = 0;
    uint64_t killed = 0, back_at = 0;
    w.target = N;
    while (issued < N) {
        if (issued == 60) {
            redis_fixture_kill(&master, 1);
            killed = uv_now(&w.loop);
        }
        for (int k = 0; k < 10 && issued < N; k++, issued++) {
            a[issued] = (acq){.w = &w};
            assert_int_equal(engine_acquire(w.e, "gpt", 0, 60000, NULL, NULL, on_acquired, &a[issued], NULL), 0);
        }
        run_for(&w, 200);
        for (int i = 0; i < issued && killed && !back_at; i++)
            if (a[i].at > killed && a[i].status == SL_OK && !a[i].local) back_at = a[i].at;
    }
    for (int i = 0; i < 200 && w.done < w.target; i++) run_for(&w, 100);
    assert_int_equal(w.done, N);
    int local = 0;
    replay rp;
    replay_init(&rp);
    for (int i = 0; i < N; i++) {
        assert_int_equal(a[i].status, SL_OK);
        local += a[i].local;
        replay_add(&rp, (double)a[i].at, 1);
    }
    size_t rej = replay_rejections(&rp, 5, 3000.0 / 60000.0, NULL);
    print_message("  master killed after 60 grants: %d local (fallback), back on Redis %llu ms after "
                  "the kill, promoted replica :%d, rejections %zu\n",
                  local, (unsigned long long)(back_at ? back_at - killed : 0), replica.port, rej);
    assert_true(local > 0);
    assert_true(back_at > 0 && back_at - killed < 15000);
    assert_true(info_has(&replica, "replication", "role:master"));
    /* One agent: its local schedule starts where its Redis grants end, and
     * at the rejoin its local tail is handed over to the promoted replica,
     * so the whole run fits the provider's bucket. Planned releases, each
     * converted to the engine's clock when its reply is read: a real-time
     * bound (test_cluster). */
    assert_realtime(rej == 0, "%zu rejections replaying the planned releases across the failover (bound 0)", rej);
    replay_free(&rp);
    engine_stop(w.e, NULL, NULL);
    uv_run(&w.loop, UV_RUN_DEFAULT);
    engine_free(w.e);
    assert_int_equal(uv_loop_close(&w.loop), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failover_followed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
