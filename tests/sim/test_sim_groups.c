/* test_sim_groups: requests to a deployment group decided by the group
 * script (one Redis), on virtual time: the real engine (lib/core built
 * against uvsim) and the real scripts.
 *
 * Proves, each against a plain deployment of the same limits and traffic:
 *   - a request the group script defers on a member (its horizon) is asked
 *     again when Redis said, though nothing else happens in the agent;
 *   - a request granted by the group script is held, like a plain one,
 *     when its slot lies past the time the others may drop this agent
 *     (cut off from Redis: dep_lapsed), instead of being sent into slots
 *     the rest of the fleet now owns. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine.h"
#include "redis_fixture.h"
#include "simfleet.h"

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

typedef struct provider {
    double latency_ms;
} provider;

static int send_ok(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    (void)t_ms;
    (void)c;
    provider *p = ud;
    out->status = 200;
    out->latency_ms = p->latency_ms;
    out->input = 100;
    out->output = 50;
    out->cache_read = 0;
    return 0;
}

/* One member m; the group g of it alone. */
#define YAML(member_extra)                                                                                             \
    "agent:\n  socket: /tmp/sim-unused.sock\n  heartbeat_ms: 200\n"                                                    \
    "deployments:\n"                                                                                                   \
    "  m: { rpm: 60, burst: { requests: 1 }, max_wait_ms: 60000" member_extra " }\n"                                   \
    "groups:\n"                                                                                                        \
    "  g: { members: [m], spill_ms: 5000, max_wait_ms: 60000 }\n"

static simfleet *fleet(const char *yaml, provider *p) {
    simfleet_opts o = {.seed = 1, .agents = 1, .redis = &fx, .yaml = yaml, .send = send_ok, .send_ud = p};
    simfleet *f = NULL;
    assert_int_equal(simfleet_new(&o, &f), 0);
    return f;
}

static void callers(simfleet *f, const char *name, int n, long long max_wait_ms) {
    sim_caller_spec sp = {.agent = 0,
                          .deployment = name,
                          .input = 100,
                          .output = 50,
                          .start_ms = 1000,
                          .calls = 1,
                          .max_wait_ms = max_wait_ms,
                          .max_attempts = 1};
    assert_int_equal(simfleet_add_callers(f, &sp, n), 0);
}

/* Two requests at once on a member of one request a second that grants
 * only slots that are due (horizon_ms 0): the first is sent at once, the
 * second is deferred for a second and must be sent then. The first call
 * takes 100 s to answer, so nothing else (no settle) wakes the agent. */
static double deferred_send(const char *name) {
    provider p = {.latency_ms = 100000};
    simfleet *f = fleet(YAML(", horizon_ms: 0"), &p);
    callers(f, name, 2, 10000);
    assert_true(simfleet_run_until(f, 20000) == 0);
    size_t n;
    const sim_record *r = simfleet_records(f, &n);
    double last = -1;
    int sent = 0;
    for (size_t i = 0; i < n; i++) {
        print_message("  %s: caller %d acquire %.0f send %.0f done %.0f status %d %s\n", name, r[i].caller,
                      r[i].acquire_ms, r[i].send_ms, r[i].done_ms, r[i].status,
                      r[i].shed_reason ? r[i].shed_reason : "");
        if (r[i].send_ms >= 0) {
            sent++;
            if (r[i].send_ms > last) last = r[i].send_ms;
        }
    }
    simfleet_free(f);
    return sent == 2 ? last : -1;
}

static void test_group_deferral_asks_again(void **state) {
    (void)state;
    double plain = deferred_send("m"), group = deferred_send("g");
    print_message("  the deferred request sent at %.0f ms (plain), %.0f ms (group)\n", plain, group);
    assert_true(plain >= 1900 && plain <= 2500);
    assert_true(group >= 1900 && group <= 2500);
}

/* 12 requests at once on one request a second, granted 0..11 s ahead;
 * the agent is cut off from Redis (black-holed) from 1.5 s to 30 s. Its
 * share is held by the others until about 4 s after its last call that
 * reached Redis (heartbeat_ms 200: a 4 s hold), so the grants with slots
 * after that (about 5.2 s) belong to the others: none may be sent before
 * the agent is back. Returns the sends in [6 s, 30 s). */
static int lapsed_sends(const char *name) {
    provider p = {.latency_ms = 100};
    simfleet *f = fleet(YAML(""), &p);
    callers(f, name, 12, 60000);
    assert_true(simfleet_run_until(f, 1500) == 0);
    simfleet_agent_blackhole(f, 0, 1);
    assert_true(simfleet_run_until(f, 30000) == 0);
    simfleet_agent_blackhole(f, 0, 0);
    assert_true(simfleet_run_until(f, 90000) == 0);
    engine_stats st;
    engine_get_stats(simfleet_engine(f, 0), &st);
    size_t n;
    const sim_record *r = simfleet_records(f, &n);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].send_ms >= 6000 && r[i].send_ms < 30000) bad++;
    print_message("  %s: %d of %zu attempts sent between 6 s and 30 s (cut off), lapsed_held %llu\n", name, bad, n,
                  (unsigned long long)st.lapsed_held);
    simfleet_free(f);
    return bad;
}

static void test_group_grant_held_when_lapsed(void **state) {
    (void)state;
    assert_int_equal(lapsed_sends("m"), 0);
    assert_int_equal(lapsed_sends("g"), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_deferral_asks_again),
        cmocka_unit_test(test_group_grant_held_when_lapsed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
