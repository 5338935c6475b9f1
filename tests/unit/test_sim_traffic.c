/* Unit tests for agent/cli/sim_traffic (the traffic of `sluice sim`,
 * compiled into this test): repeated --lane and --tenant taken out of
 * argv, the quota in requests a minute under each tokens rule, the demand
 * (its count, one arrival per slice of the span, shares, the seed) and a
 * JSONL trace (defaults, order, errors with file and line). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "sim_traffic.h"

static config *load(const char *deployments) {
    char text[2048], err[512];
    snprintf(text, sizeof(text), "redis: {url: \"unix:///tmp/x.sock\"}\nagent: {socket: /tmp/a.sock}\n%s", deployments);
    config *c = NULL;
    if (config_load_string("t.yaml", text, strlen(text), &c, err, sizeof(err)) != 0) fail_msg("config: %s", err);
    return c;
}

static void test_shares_collect(void **state) {
    (void)state;
    char *argv[] = {"sim", "--lane", "a=1", "--seed", "3", "--lane=b=3", "--tenant", "t=2", "--json", NULL};
    int argc = 9;
    sim_shares lanes = {0}, tenants = {0};
    assert_int_equal(sim_shares_collect(&argc, argv, &lanes, &tenants), 0);
    assert_int_equal(argc, 4);
    assert_string_equal(argv[1], "--seed");
    assert_string_equal(argv[2], "3");
    assert_string_equal(argv[3], "--json");
    assert_int_equal(lanes.n, 2);
    assert_string_equal(lanes.v[1].name, "b");
    assert_true(lanes.total == 4.0);
    assert_int_equal(tenants.n, 1);
    static const char *const bad[] = {"a", "a=", "a=0", "a=-1", "=1", "a=1x", "a b=1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *av[] = {"sim", "--lane", (char *)bad[i], NULL};
        int ac = 3;
        sim_shares l = {0}, t = {0};
        assert_int_equal(sim_shares_collect(&ac, av, &l, &t), -1);
    }
    char *last[] = {"sim", "--tenant", NULL};
    int ac = 2;
    assert_int_equal(sim_shares_collect(&ac, last, &lanes, &tenants), -1);
}

static void test_quota(void **state) {
    (void)state;
    config *c = load("deployments:\n"
                     "  az: {rpm: 900, tpm: 150000}\n"
                     "  oa: {rpm: 600, tpm: 100000, style: openai, tokens_rule: max}\n"
                     "  an: {rpm: 50, itpm: 30000, otpm: 8000, style: anthropic}\n");
    assert_true(sim_traffic_quota_per_min(config_deployment(c, "az"), 500, 500) == 150.0);
    assert_true(sim_traffic_quota_per_min(config_deployment(c, "az"), 50, 50) == 900.0);
    assert_true(sim_traffic_quota_per_min(config_deployment(c, "oa"), 800, 200) == 125.0);
    assert_true(sim_traffic_quota_per_min(config_deployment(c, "an"), 500, 500) == 16.0);
    config_free(c);
}

static void test_demand(void **state) {
    (void)state;
    config *c = load("deployments:\n  d: {rpm: 600}\n");
    const struct config_deployment *d = config_deployment(c, "d");
    sim_shares lanes = {0}, tenants = {0};
    char *argv[] = {"sim", "--lane", "x=1", "--lane", "y=3", NULL};
    int argc = 5;
    assert_int_equal(sim_shares_collect(&argc, argv, &lanes, &tenants), 0);
    sim_demand dm = {7, 1.5, 60, 100, 100};
    sim_reqs a = {0}, b = {0}, other = {0};
    assert_int_equal(sim_traffic_demand(d, &dm, &lanes, &tenants, &a), 0);
    assert_int_equal(a.n, 900);
    size_t ny = 0;
    for (size_t i = 0; i < a.n; i++) {
        double slice = 60000.0 / 900;
        assert_true(a.v[i].t_ms >= slice * (double)i && a.v[i].t_ms < slice * (double)(i + 1));
        assert_true(a.v[i].input == 100 && a.v[i].output == 100);
        assert_string_equal(a.v[i].tenant, "");
        ny += strcmp(a.v[i].lane, "y") == 0;
    }
    assert_true(ny > 600 && ny < 750); /* about 3 in 4 */
    assert_int_equal(sim_traffic_demand(d, &dm, &lanes, &tenants, &b), 0);
    assert_memory_equal(a.v, b.v, a.n * sizeof(*a.v));
    dm.seed = 8;
    assert_int_equal(sim_traffic_demand(d, &dm, &lanes, &tenants, &other), 0);
    assert_int_equal(other.n, 900);
    assert_true(memcmp(a.v, other.v, a.n * sizeof(*a.v)) != 0);
    assert_true(sim_traffic_seed(7, "d") != sim_traffic_seed(7, "e"));
    sim_reqs_free(&a);
    sim_reqs_free(&b);
    sim_reqs_free(&other);
    config_free(c);
}

static void write_trace(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_trace(void **state) {
    (void)state;
    config *c = load("deployments:\n  d: {rpm: 600}\n  e: {rpm: 60}\n");
    char path[] = "/tmp/test_sim_traffic-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_trace(path, "# past requests\n"
                      "{\"t_ms\": 30, \"deployment\": \"e\", \"input\": 7, \"max_tokens\": 9, \"tenant\": \"t\"}\n"
                      "\n"
                      "{\"t_ms\": 10.5, \"lane\": \"batch\"}\n");
    sim_reqs r = {0};
    assert_int_equal(sim_traffic_load_trace(path, c, "c.yaml", 500, 200, &r), 0);
    assert_int_equal(r.n, 2);
    assert_true(r.v[0].t_ms == 10.5); /* sorted by time */
    assert_string_equal(r.v[0].deployment, "");
    assert_string_equal(r.v[0].lane, "batch");
    assert_true(r.v[0].input == 500 && r.v[0].output == 200);
    assert_string_equal(r.v[1].deployment, "e");
    assert_string_equal(r.v[1].tenant, "t");
    assert_true(r.v[1].input == 7 && r.v[1].output == 9);
    sim_reqs_free(&r);
    static const char *const bad[] = {
        "{\"t_ms\": 1}\nnot json\n",                 /* line 2 */
        "{\"deployment\": \"d\"}\n",                 /* no t_ms */
        "{\"t_ms\": -1}\n",                          /* negative */
        "{\"t_ms\": 1, \"deployment\": \"nope\"}\n", /* unknown deployment */
        "{\"t_ms\": 1, \"input_tokens\": 0}\n",      /* not a count */
        "{\"t_ms\": 1, \"lane\": \"a b\"}\n",        /* not a name */
        "# nothing\n\n",                             /* no requests */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_trace(path, bad[i]);
        assert_int_equal(sim_traffic_load_trace(path, c, "c.yaml", 500, 200, &r), -1);
        sim_reqs_free(&r);
    }
    unlink(path);
    assert_int_equal(sim_traffic_load_trace(path, c, "c.yaml", 500, 200, &r), -1); /* no such file */
    config_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_collect),
        cmocka_unit_test(test_quota),
        cmocka_unit_test(test_demand),
        cmocka_unit_test(test_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
