/* Unit tests for tests/sim/scenarios: every named world builds, runs a
 * plain client deterministically, and has the property its name promises
 * (neighbours act, strays strike, limits are what they should be). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scenarios.h"

/* 5 requests a second for two minutes, of 2000 characters (English, code
 * and CJK in turn) and max_tokens 300; the first response kept. */
static uint64_t run(const sim_scenario *s, uint64_t seed, sim_world **keep, sim_response *first) {
    sim_world_cfg c;
    s->fill(&c);
    sim_world *w = sim_world_new(&c, seed);
    if (!w) fail_msg("%s: no world", s->name);
    for (int i = 0; i < 600; i++) {
        sim_request rq = {
            .t_ms = i * 200.0, .chars = 2000, .lang = (sim_lang)(i % 3), .max_tokens = 300, .tag = (uint64_t)i};
        sim_response r;
        sim_world_send(w, &rq, &r);
        if (i == 0 && first) *first = r;
    }
    sim_world_advance(w, 130000);
    uint64_t d = sim_world_digest(w);
    if (keep) *keep = w;
    else sim_world_free(w);
    return d;
}

static const char *hdr(const sim_response *r, const char *name) {
    for (int i = 0; i < r->nheaders; i++)
        if (strcmp(r->name[i], name) == 0) return r->value[i];
    return "";
}

static void test_names(void **state) {
    (void)state;
    assert_true(sim_scenario_count() >= 20);
    for (size_t i = 0; i < sim_scenario_count(); i++) {
        const sim_scenario *s = sim_scenario_at(i);
        assert_ptr_equal(sim_scenario_find(s->name), s);
        assert_true(strlen(s->what) > 10);
    }
    assert_null(sim_scenario_at(sim_scenario_count()));
    assert_null(sim_scenario_find("azure-nonesuch"));
    sim_world_cfg c;
    memset(&c, 0x5a, sizeof(c));
    assert_int_equal(sim_scenario_cfg("azure-nonesuch", &c), -1);
    assert_int_equal(sim_scenario_cfg("bedrock-claude4", &c), 0);
    assert_int_equal(c.provider, SIM_BEDROCK);
}

static void test_each_runs_deterministically(void **state) {
    (void)state;
    for (size_t i = 0; i < sim_scenario_count(); i++) {
        const sim_scenario *s = sim_scenario_at(i);
        sim_world *w;
        uint64_t d = run(s, 11, &w, NULL);
        if (d != run(s, 11, NULL, NULL)) fail_msg("%s: two runs of seed 11 differ", s->name);
        if (sim_world_count(w, SIM_WHO_FLEET, 0) != 600) fail_msg("%s: the ledger lost requests", s->name);
        sim_world_cfg c;
        s->fill(&c);
        size_t theirs = sim_world_count(w, SIM_WHO_NEIGHBOURS, 0);
        if ((c.nneighbours > 0) != (theirs > 0)) fail_msg("%s: %zu neighbour requests", s->name, theirs);
        sim_world_free(w);
    }
}

static void test_promises(void **state) {
    (void)state;
    sim_world *w;
    sim_response first;
    run(sim_scenario_find("azure-stray-429"), 1, &w, NULL);
    size_t strays = 0;
    for (size_t i = 0; i < sim_world_ledger_len(w); i++)
        strays += (sim_world_ledger_at(w, i)->flags & SIM_F_STRAY) != 0;
    assert_int_equal(strays, 4);
    sim_world_free(w);

    run(sim_scenario_find("azure-real-below"), 1, &w, &first);
    assert_string_equal(hdr(&first, "x-ratelimit-limit-tokens"), "120000");
    sim_world_free(w);

    run(sim_scenario_find("azure-limit-drops"), 1, &w, NULL);
    assert_true(sim_world_limit(w, SIM_DIM_TOKENS) == 75000);
    sim_world_free(w);

    run(sim_scenario_find("anthropic-2025"), 1, &w, &first);
    assert_string_equal(hdr(&first, "anthropic-ratelimit-output-tokens-limit"), "90000");
    assert_int_equal(sim_world_ledger_at(w, 0)->charge[SIM_DIM_OUTPUT], 300);
    sim_world_free(w);

    run(sim_scenario_find("anthropic-current"), 1, &w, NULL);
    assert_int_equal(sim_world_ledger_at(w, 0)->charge[SIM_DIM_OUTPUT], 0);
    sim_world_free(w);

    /* The greedy neighbour leaves the fleet 429s while it is there only. */
    run(sim_scenario_find("azure-greedy-neighbour"), 1, &w, NULL);
    size_t before = 0, during = 0;
    for (size_t i = 0; i < sim_world_ledger_len(w); i++) {
        const sim_entry *e = sim_world_ledger_at(w, i);
        if (e->who != 0 || e->status != 429) continue;
        if (e->t_ms < 30000) before++;
        else if (e->t_ms >= 31000 && e->t_ms < 90000) during++;
    }
    assert_true(during > 10 * (before + 1));
    sim_world_free(w);

    sim_world_cfg c;
    sim_scenario_cfg("gemini-rpd-spring", &c);
    assert_true(sim_pacific_next_midnight(c.epoch_ms) - c.epoch_ms == 600000);
    sim_scenario_cfg("gemini-rpd-autumn", &c);
    int64_t midnight = sim_pacific_next_midnight(c.epoch_ms);
    assert_true(midnight - c.epoch_ms == 600000);
    assert_true(sim_pacific_next_midnight(midnight) - midnight == INT64_C(25) * 3600000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_each_runs_deterministically),
        cmocka_unit_test(test_promises),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
