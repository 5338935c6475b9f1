/* test_group_script: reserve's group mode (lua/reserve.lua, reserve_group)
 * against a real redis-server: one script call decides which member of a
 * deployment group serves each item.
 *
 * A plain single Redis (not a Cluster): the group call names the keys of
 * several deployments, which only a single Redis or Sentinel allows. Every
 * test uses its own deployments. */
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

#define SCRIPT_TEST_CLUSTER 0
#include "script_test.h"

/* ---- helpers ------------------------------------------------------------ */

#define MAXN 128
#define MAXM 4

/* rpm 600, burst 10 (the routing example of docs/architecture.md). */
static void configure_std(const char *dep) { configure_on(rc, dep, "rpm", "600", "burst_requests", "10", NULL); }

/* The 9 x m keys of the members, in order. */
static int group_keys(int m, const char **members, char (*keys)[SCRIPTS_KEY_MAX]) {
    for (int j = 0; j < m; j++) assert_int_equal(scripts_keys(members[j], keys + SCRIPTS_NKEYS * j), 0);
    return SCRIPTS_NKEYS * m;
}

typedef struct gverdict {
    int kind;                                /* 1 granted, 2 deferred, 0 shed */
    int member;                              /* 1-based; 0 for a shed */
    long long id, wait_ms, tokens, after_ms; /* after_ms: ask_in or retry_after */
    char reason[32];
} gverdict;

/* The group call with raw ARGV strings (after 'group'); returns the reply. */
static redisReply *group_raw(int m, const char **members, int argc, const char **argv) {
    char keys[SCRIPTS_NKEYS * MAXM][SCRIPTS_KEY_MAX];
    assert_true(m <= MAXM);
    int nk = group_keys(m, members, keys);
    const char *av[1 + 5 + 5 * MAXN];
    av[0] = "group";
    for (int i = 0; i < argc; i++) av[1 + i] = argv[i];
    redisReply *r = script_call_keys(rc, SCRIPT_RESERVE, nk, keys, 1 + argc, av);
    assert_non_null(r);
    return r;
}

/* n items (tokens, max_wait, order each; lanes and tenants empty). */
static void group_call(int m, const char **members, long long spill, const char *policy, int n, const long long *tokens,
                       const long long *maxwait, const char **order, gverdict *out) {
    static char buf[4 + 5 * MAXN][24];
    const char *argv[4 + 5 * MAXN];
    assert_true(n <= MAXN);
    snprintf(buf[0], 24, "%d", m);
    snprintf(buf[1], 24, "%lld", spill);
    snprintf(buf[2], 24, "%s", policy);
    snprintf(buf[3], 24, "%d", n);
    for (int i = 0; i < 4; i++) argv[i] = buf[i];
    for (int i = 0; i < n; i++) {
        int b = 4 + 5 * i;
        snprintf(buf[b], 24, "%lld", tokens[i]);
        snprintf(buf[b + 1], 24, "%lld", maxwait[i]);
        argv[b] = buf[b];
        argv[b + 1] = buf[b + 1];
        argv[b + 2] = "";
        argv[b + 3] = "";
        argv[b + 4] = order[i];
    }
    redisReply *r = group_raw(m, members, 4 + 5 * n, argv);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("group reserve: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, (size_t)(1 + n));
    assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
    for (int i = 0; i < n; i++) {
        redisReply *it = r->element[1 + i];
        memset(&out[i], 0, sizeof(out[i]));
        out[i].kind = (int)it->element[0]->integer;
        if (out[i].kind == 1) {
            assert_int_equal(it->elements, 5);
            /* {1, grant_id, wait_ms, tokens, member}: the plain verdict,
             * the member added (lua/common.lua sl_on_member). */
            out[i].id = it->element[1]->integer;
            out[i].wait_ms = it->element[2]->integer;
            out[i].tokens = it->element[3]->integer;
            out[i].member = (int)it->element[4]->integer;
            assert_true(out[i].wait_ms >= 0 && out[i].wait_ms <= maxwait[i]);
            assert_int_equal(out[i].tokens, tokens[i]);
        } else if (out[i].kind == 2) {
            assert_int_equal(it->elements, 4);
            snprintf(out[i].reason, sizeof(out[i].reason), "%s", it->element[1]->str);
            out[i].after_ms = it->element[2]->integer;
            out[i].member = (int)it->element[3]->integer;
        } else {
            assert_int_equal(out[i].kind, 0);
            assert_int_equal(it->elements, 3);
            snprintf(out[i].reason, sizeof(out[i].reason), "%s", it->element[1]->str);
            out[i].after_ms = it->element[2]->integer;
            assert_true(out[i].after_ms == -1 || out[i].after_ms >= 1);
        }
        if (out[i].kind) {
            /* The member is one the order allows. */
            char o[64], *save = NULL;
            int ok = 0;
            snprintf(o, sizeof(o), "%s", order[i]);
            for (char *t = strtok_r(o, ",", &save); t; t = strtok_r(NULL, ",", &save))
                if (atoi(t) == out[i].member) ok = 1;
            assert_true(ok);
        }
    }
    freeReplyObject(r);
}

/* One item. */
static gverdict group1(int m, const char **members, long long spill, const char *policy, long long tokens,
                       long long maxwait, const char *order) {
    gverdict v;
    group_call(m, members, spill, policy, 1, &tokens, &maxwait, &order, &v);
    return v;
}

static double hget(const char *dep, const char *field) { return hash_num(rc, dep, "state", field); }

static char *hget_str(const char *dep, const char *field) {
    redisReply *r = redisCommand(rc, "HGET sluice:{%s}:state %s", dep, field);
    assert_non_null(r);
    char *s = strdup(r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return s;
}

static long long hlen_grants(const char *dep) {
    redisReply *r = redisCommand(rc, "HLEN sluice:{%s}:grants", dep);
    assert_non_null(r);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Every key of a deployment as text (state fields sorted), to prove a call
 * changed nothing at all. */
static char *dump_all(const char *dep) {
    static const char *const what[] = {"state", "grants", "leases", "refq:requests", "refq:tokens", "daily"};
    return dump_keys(rc, dep, what, sizeof(what) / sizeof(*what));
}

static int count_on(const gverdict *v, int n, int kind, int member) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i].kind == kind && (member == 0 || v[i].member == member)) k++;
    return k;
}

/* Each member's grants in Redis are exactly its grants in the replies
 * (want[j]), and every grant id is distinct per member. */
static void assert_ledger(int m, const char **members, const long long *want) {
    for (int j = 0; j < m; j++) {
        assert_int_equal((long long)hget(members[j], "granted_total"), want[j]);
        assert_int_equal(hlen_grants(members[j]), want[j]);
    }
}

/* ---- tests -------------------------------------------------------------- */

/* Spare capacity: every item lands on the first member of its order, at
 * once, and nothing else is touched. */
static void test_spare_first_of_order(void **state) {
    (void)state;
    const char *mem[3] = {"sp-a", "sp-b", "sp-c"};
    for (int j = 0; j < 3; j++) configure_std(mem[j]);
    long long tok[6] = {1, 1, 1, 1, 1, 1}, mw[6] = {5000, 5000, 5000, 5000, 5000, 5000};
    const char *order[6] = {"1,2,3", "1,2,3", "2,1,3", "3,1,2", "1", "2,3"};
    gverdict v[6];
    group_call(3, mem, 200, "priority", 6, tok, mw, order, v);
    int want_m[6] = {1, 1, 2, 3, 1, 2};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(v[i].kind, 1);
        assert_int_equal(v[i].member, want_m[i]);
        assert_int_equal(v[i].wait_ms, 0);
    }
    /* Grant ids follow each member's own sequence, as the plain reserve's
     * (which starts from the clock, never behind ids handed out before). */
    assert_int_equal(v[1].id, v[0].id + 1);
    assert_int_equal(v[4].id, v[0].id + 2);
    assert_true(v[2].id > 0);
    assert_int_equal(v[5].id, v[2].id + 1);
    long long want[3] = {3, 2, 1};
    assert_ledger(3, mem, want);
    for (int j = 0; j < 3; j++) assert_true(hget(mem[j], "shed_total") == 0);
}

/* Spill: 90 items in one call on three members of 600 rpm, burst 10, spill
 * 200 ms: the primary while within 200 ms, then the next, then the soonest:
 * counts within one of each other, waits bounded by a balanced schedule,
 * and each member's ledger in Redis is exactly its grants in the reply. */
static void test_spill_balance(void **state) {
    (void)state;
    const char *mem[3] = {"bal-a", "bal-b", "bal-c"};
    for (int j = 0; j < 3; j++) configure_std(mem[j]);
    enum { N = 90 };
    long long tok[N], mw[N];
    const char *order[N];
    for (int i = 0; i < N; i++) tok[i] = 1, mw[i] = 60000, order[i] = "1,2,3";
    gverdict v[N];
    group_call(3, mem, 200, "priority", N, tok, mw, order, v);
    long long cnt[3];
    long long maxwait = 0;
    for (int j = 0; j < 3; j++) cnt[j] = count_on(v, N, 1, j + 1);
    assert_int_equal(cnt[0] + cnt[1] + cnt[2], N);
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 3; k++) assert_true(llabs(cnt[j] - cnt[k]) <= 1);
    for (int i = 0; i < N; i++)
        if (v[i].wait_ms > maxwait) maxwait = v[i].wait_ms;
    /* 30 per member at 100 ms after a burst of ~10: about 2 s. */
    assert_true(maxwait <= 2200);
    /* The first items spill in order: member 1 first, while within 200 ms. */
    assert_int_equal(v[0].member, 1);
    for (int i = 0; i < N; i++)
        if (v[i].member == 2) {
            for (int k = 0; k < i; k++) assert_int_equal(v[k].member, 1);
            break;
        }
    print_message("spill balance: %lld / %lld / %lld, max wait %lld ms\n", cnt[0], cnt[1], cnt[2], maxwait);
    assert_ledger(3, mem, cnt);
    for (int j = 0; j < 3; j++) assert_true(hget(mem[j], "shed_total") == 0);
}

/* The order restricts the members: an item allowed only on member 3 is
 * never placed elsewhere, even when 1 and 2 are idle and 3 is full. */
static void test_order_restricts(void **state) {
    (void)state;
    const char *mem[3] = {"or-a", "or-b", "or-c"};
    for (int j = 0; j < 3; j++) configure_std(mem[j]);
    enum { N = 40 };
    long long tok[N], mw[N];
    const char *order[N];
    for (int i = 0; i < N; i++) tok[i] = 1, mw[i] = 1000, order[i] = "3";
    gverdict v[N];
    group_call(3, mem, 200, "priority", N, tok, mw, order, v);
    int granted = count_on(v, N, 1, 3);
    assert_int_equal(count_on(v, N, 1, 0), granted); /* no grant elsewhere */
    assert_true(granted >= 15 && granted <= 22);     /* ~10 at once + 10 in a second */
    assert_int_equal(count_on(v, N, 0, 0), N - granted);
    for (int i = 0; i < N; i++)
        if (v[i].kind == 0) {
            assert_string_equal(v[i].reason, "rpm");
            assert_true(v[i].after_ms >= 1);
        }
    long long want[3] = {0, 0, granted};
    assert_ledger(3, mem, want);
    /* The final sheds are counted on member 3 (the first tried) only. */
    assert_int_equal((long long)hget(mem[2], "shed_total"), N - granted);
    assert_true(hget(mem[0], "shed_total") == 0 && hget(mem[1], "shed_total") == 0);
}

/* Nobody can make it: the shed consumes nothing on any member, carries the
 * first member's reason and when the soonest could serve it past the max
 * wait, and is counted once, on the first member. */
static void test_shed_consumes_nothing(void **state) {
    (void)state;
    const char *mem[3] = {"sh-a", "sh-b", "sh-c"};
    for (int j = 0; j < 3; j++) configure_std(mem[j]);
    /* Fill the members unevenly: 1 reaches ~3 s, 2 ~2 s, 3 ~1 s. */
    long long n_fill[3] = {40, 30, 20};
    for (int j = 0; j < 3; j++) {
        long long tok[40], mw[40];
        const char *order[40];
        char one[4];
        snprintf(one, sizeof(one), "%d", j + 1);
        for (int i = 0; i < n_fill[j]; i++) tok[i] = 1, mw[i] = 60000, order[i] = one;
        gverdict v[40];
        group_call(3, mem, 200, "priority", (int)n_fill[j], tok, mw, order, v);
        assert_int_equal(count_on(v, (int)n_fill[j], 1, j + 1), n_fill[j]);
    }
    char *before[3];
    double tat[3];
    for (int j = 0; j < 3; j++) {
        before[j] = dump_all(mem[j]);
        tat[j] = hget(mem[j], "requests_tat");
    }
    /* Max wait 300 ms: none can. */
    gverdict s = group1(3, mem, 200, "priority", 1, 300, "1,2,3");
    assert_int_equal(s.kind, 0);
    assert_string_equal(s.reason, "rpm");
    print_message("shed: retry after %lld ms\n", s.after_ms);
    /* The soonest is member 3: 20 sends at 100 ms less a burst of 9.9,
     * its next slot ~1110 ms away: retry ~810 ms past the max wait. */
    assert_true(s.after_ms >= 750 && s.after_ms <= 811);
    for (int j = 0; j < 3; j++) {
        assert_true(hget(mem[j], "requests_tat") == tat[j]);
        char *after = dump_all(mem[j]);
        /* Only the first member's shed counters moved. */
        if (j > 0) assert_string_equal(before[j], after);
        free(after);
        free(before[j]);
    }
    assert_int_equal((long long)hget(mem[0], "shed_total"), 1);
    assert_int_equal((long long)hget(mem[0], "shed_rpm"), 1);
    assert_true(hget(mem[1], "shed_total") == 0 && hget(mem[2], "shed_total") == 0);
    assert_int_equal((long long)hget(mem[0], "granted_total"), 40);
    /* With room to wait it goes to the soonest (member 3), not the first. */
    gverdict g = group1(3, mem, 200, "priority", 1, 5000, "1,2,3");
    assert_int_equal(g.kind, 1);
    assert_int_equal(g.member, 3);
    assert_true(g.wait_ms >= 800 && g.wait_ms <= 1200);
    /* Too large everywhere: never. */
    configure_on(rc, "big-a", "rpm", "600", "burst_requests", "10", "tpm", "1000", NULL);
    configure_on(rc, "big-b", "rpm", "600", "burst_requests", "10", "tpm", "1000", NULL);
    const char *big[2] = {"big-a", "big-b"};
    gverdict t = group1(2, big, 200, "priority", 5000, 1000, "2,1");
    assert_int_equal(t.kind, 0);
    assert_string_equal(t.reason, "too_large");
    assert_int_equal(t.after_ms, -1);
    assert_true(hget("big-b", "shed_too_large") == 1 && hget("big-a", "shed_total") == 0);
}

/* Members out for health (quota, breaker) are passed over; when all are
 * out the shed says when the first comes back. */
static void test_health_skipped(void **state) {
    (void)state;
    const char *mem[3] = {"he-a", "he-b", "he-c"};
    for (int j = 0; j < 3; j++)
        configure_on(rc, mem[j], "rpm", "600", "burst_requests", "10", "breaker_failure_ratio", "0.5",
                     "breaker_min_requests", "20", "breaker_window_ms", "10000", "breaker_break_ms", "5000", NULL);
    /* Member 1 out for quota for 8 s. */
    redisReply *r = script_callv(rc, SCRIPT_SETTLE, mem[0], "1", "-", "-1", "quota", "8000", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("settle: %s", r->str);
    freeReplyObject(r);
    /* Member 2's breaker opened by 20 failures. */
    const char *argv[1 + 4 * 20];
    argv[0] = "20";
    for (int i = 0; i < 20; i++) {
        argv[1 + 4 * i] = "-";
        argv[2 + 4 * i] = "-1";
        argv[3 + 4 * i] = "failed";
        argv[4 + 4 * i] = "-1";
    }
    r = script_call(rc, SCRIPT_SETTLE, mem[1], 1 + 4 * 20, argv);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("settle: %s", r->str);
    freeReplyObject(r);
    char *bs = hget_str(mem[1], "breaker_state");
    assert_string_equal(bs, "open");
    free(bs);
    /* Items go to member 3. */
    long long tok[5] = {1, 1, 1, 1, 1}, mw[5] = {1000, 1000, 1000, 1000, 1000};
    const char *order[5] = {"1,2,3", "2,1,3", "1,2,3", "2,3,1", "3,1,2"};
    gverdict v[5];
    group_call(3, mem, 200, "priority", 5, tok, mw, order, v);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(v[i].kind, 1);
        assert_int_equal(v[i].member, 3);
    }
    long long want[3] = {0, 0, 5};
    assert_ledger(3, mem, want);
    /* Only 1 and 2 allowed: shed with the first's reason, retry when the
     * breaker (5 s) ends, past the max wait of 1 s: ~4 s. */
    gverdict s = group1(3, mem, 200, "priority", 1, 1000, "1,2");
    assert_int_equal(s.kind, 0);
    assert_string_equal(s.reason, "quota");
    assert_true(s.after_ms >= 3500 && s.after_ms <= 4000);
    s = group1(3, mem, 200, "priority", 1, 1000, "2,1");
    assert_int_equal(s.kind, 0);
    assert_string_equal(s.reason, "breaker");
    assert_true(hget(mem[0], "shed_quota") == 1 && hget(mem[1], "shed_breaker") == 1);
    assert_true(hget(mem[0], "shed_total") == 1 && hget(mem[1], "shed_total") == 1);
    want[0] = 0, want[1] = 0;
    assert_ledger(3, mem, want);
    /* Waiting long enough is not a grant either: a member out now is
     * never reserved ahead (the agent asks again when it comes back). */
    s = group1(3, mem, 200, "priority", 1, 10000, "2,1");
    assert_int_equal(s.kind, 0);
    assert_string_equal(s.reason, "breaker");
    assert_true(s.after_ms >= 1 && s.after_ms <= 5000);
}

/* weighted: only the head of the order (the turn) is tried with spill;
 * then the soonest of those tried, which is the head itself. priority on
 * the same state spills to the idle member. */
static void test_weighted_head_only(void **state) {
    (void)state;
    const char *mem[2] = {"we-a", "we-b"};
    for (int j = 0; j < 2; j++) configure_std(mem[j]);
    enum { N = 20 };
    long long tok[N], mw[N];
    const char *order[N];
    for (int i = 0; i < N; i++) tok[i] = 1, mw[i] = 60000, order[i] = "1";
    gverdict v[N];
    group_call(2, mem, 200, "weighted", N, tok, mw, order, v);
    assert_int_equal(count_on(v, N, 1, 1), N);
    /* Member 1's slot is now ~1 s away, member 2 idle. */
    gverdict w = group1(2, mem, 200, "weighted", 1, 5000, "1,2");
    assert_int_equal(w.kind, 1);
    assert_int_equal(w.member, 1);
    assert_true(w.wait_ms > 200);
    gverdict p = group1(2, mem, 200, "priority", 1, 5000, "1,2");
    assert_int_equal(p.kind, 1);
    assert_int_equal(p.member, 2);
    assert_int_equal(p.wait_ms, 0);
    /* The head's turn on the idle member: granted there at once. */
    w = group1(2, mem, 200, "weighted", 1, 5000, "2,1");
    assert_int_equal(w.kind, 1);
    assert_int_equal(w.member, 2);
    /* Head beyond max wait: shed, the other member is not asked. */
    w = group1(2, mem, 200, "weighted", 1, 300, "1,2");
    assert_int_equal(w.kind, 0);
    assert_string_equal(w.reason, "rpm");
    long long want[2] = {N + 1, 2};
    assert_ledger(2, mem, want);
}

/* Lanes defer on their member: the deferral ends the search, though the
 * next member is idle (the item's lane holds it for that member). */
static void test_deferral_on_member(void **state) {
    (void)state;
    const char *mem[2] = {"df-a", "df-b"};
    configure_on(rc, mem[0], "rpm", "600", "burst_requests", "10", "lane.interactive", "0,-1,0", "lane.batch", "1,0,0",
                 "default_lane", "interactive", NULL);
    configure_std(mem[1]);
    enum { N = 10 };
    long long tok[N], mw[N];
    const char *order[N];
    for (int i = 0; i < N; i++) tok[i] = 1, mw[i] = 60000, order[i] = "1";
    gverdict v[N];
    group_call(2, mem, 200, "priority", N, tok, mw, order, v);
    assert_int_equal(count_on(v, N, 1, 1), N);
    /* The next slot on member 1 is within spill but not now: a batch item
     * (horizon 0) defers there. */
    const char *argv[9] = {"2", "200", "priority", "1", "1", "5000", "batch", "", "1,2"};
    redisReply *r = group_raw(2, mem, 9, argv);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    redisReply *it = r->element[1];
    assert_int_equal(it->elements, 4);
    assert_int_equal(it->element[0]->integer, 2);
    assert_string_equal(it->element[1]->str, "rpm");
    assert_true(it->element[2]->integer >= 1 && it->element[2]->integer <= 200);
    assert_int_equal(it->element[3]->integer, 1);
    freeReplyObject(r);
    assert_int_equal((long long)hget(mem[0], "deferred_total"), 1);
    assert_int_equal((long long)hget(mem[0], "l.batch.deferred_total"), 1);
    long long want[2] = {N, 0};
    assert_ledger(2, mem, want);
    assert_true(hget(mem[1], "shed_total") == 0 && hget(mem[0], "shed_total") == 0);
}

/* Bad arguments: a clear error, and nothing changed on any member. */
/* A partial estimate ('~', vocab.h PARTIAL: images guessed) in the group
 * form: granted on a member as the same estimate without the marker,
 * but its record keeps no raw input (field 11), so its settle teaches
 * the member's calibration nothing; a combined '~c' loses the marker. */
static void test_partial_item(void **state) {
    (void)state;
    const char *mem[2] = {"part-a", "part-b"};
    for (int j = 0; j < 2; j++) configure_on(rc, mem[j], "rpm", "600", "tpm", "1000000", NULL);
    const char *items[3] = {"100+10", "~100+10", "~110"};
    for (int k = 0; k < 3; k++) {
        const char *argv[9] = {"2", "200", "priority", "1", items[k], "5000", "", "", "1,2"};
        redisReply *r = group_raw(2, mem, 9, argv);
        if (r->type == REDIS_REPLY_ERROR) fail_msg("%s: %s", items[k], r->str);
        redisReply *it = r->element[1];
        assert_int_equal(it->element[0]->integer, 1);
        long long id = it->element[1]->integer;
        assert_int_equal(it->element[3]->integer, 110);
        int member = (int)it->element[4]->integer;
        freeReplyObject(r);
        redisReply *rec = redisCommand(rc, "HGET sluice:{%s}:grants %lld", mem[member - 1], id);
        assert_int_equal(rec->type, REDIS_REPLY_STRING);
        print_message("  %s: %s\n", items[k], rec->str);
        if (k == 0) assert_non_null(strstr(rec->str, ",,,100"));
        else assert_null(strstr(rec->str, ",,,100"));
        assert_null(strchr(rec->str, '~'));
        freeReplyObject(rec);
    }
}

static void test_bad_argv(void **state) {
    (void)state;
    const char *mem[2] = {"bad-a", "bad-b"};
    for (int j = 0; j < 2; j++) configure_std(mem[j]);
    gverdict g = group1(2, mem, 200, "priority", 1, 1000, "1,2");
    assert_int_equal(g.kind, 1);
    char *before[2] = {dump_all(mem[0]), dump_all(mem[1])};
    struct {
        int argc;
        const char *argv[12];
        const char *want;
    } cases[] = {
        {9, {"2", "200", "priority", "1", "1", "1000", "", "", "3"}, "order"},
        {9, {"2", "200", "priority", "1", "1", "1000", "", "", "1,1"}, "order"},
        {9, {"2", "200", "priority", "1", "1", "1000", "", "", ""}, "order"},
        {9, {"2", "200", "priority", "1", "1", "1000", "", "", "1,"}, "order"},
        {9, {"2", "200", "priority", "1", "1", "1000", "", "", "0"}, "order"},
        {9, {"2", "200", "priority", "1", "x", "1000", "", "", "1"}, "tokens"},
        {9, {"2", "200", "priority", "1", "1", "-1", "", "", "1"}, "max_wait_ms"},
        {9, {"2", "200", "fastest", "1", "1", "1000", "", "", "1"}, "policy"},
        {9, {"2", "x", "priority", "1", "1", "1000", "", "", "1"}, "spill_ms"},
        {9, {"0", "200", "priority", "1", "1", "1000", "", "", "1"}, "m must"},
        {9, {"3", "200", "priority", "1", "1", "1000", "", "", "1"}, "KEYS"},
        {8, {"2", "200", "priority", "1", "1", "1000", "", ""}, "ARGV"},
        {9, {"2", "200", "priority", "2", "1", "1000", "", "", "1"}, "ARGV"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        redisReply *r = group_raw(2, mem, cases[c].argc, cases[c].argv);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        if (!strstr(r->str, "ERR sluice reserve: group:") || !strstr(r->str, cases[c].want))
            fail_msg("case %zu: %s", c, r->str);
        freeReplyObject(r);
    }
    /* A valid ARGV whose second member is unknown or whose keys are not
     * a member's layout: an error, before anything is decided. */
    const char *unk[2] = {"bad-a", "bad-nobody"};
    const char *ok[9] = {"2", "200", "priority", "1", "1", "1000", "", "", "1"};
    redisReply *r = group_raw(2, unk, 9, ok);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "member 2: unknown deployment 'bad-nobody'"));
    freeReplyObject(r);
    char keys[SCRIPTS_NKEYS * 2][SCRIPTS_KEY_MAX];
    group_keys(2, mem, keys);
    snprintf(keys[SCRIPTS_NKEYS + 3], SCRIPTS_KEY_MAX, "sluice:{bad-a}:leases");
    const char *av[10] = {"group"};
    for (int i = 0; i < 9; i++) av[1 + i] = ok[i];
    r = script_call_keys(rc, SCRIPT_RESERVE, SCRIPTS_NKEYS * 2, keys, 10, av);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "member 2: KEYS[4] must be sluice:{bad-b}:leases"));
    freeReplyObject(r);
    for (int j = 0; j < 2; j++) {
        char *after = dump_all(mem[j]);
        assert_string_equal(before[j], after);
        free(after);
        free(before[j]);
    }
    /* The plain mode still answers as before. */
    r = script_callv(rc, SCRIPT_RESERVE, "bad-a", "1", "1", "1000", NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 6);
    assert_int_equal(r->element[5]->element[0]->integer, 1);
    long long id = r->element[5]->element[1]->integer;
    freeReplyObject(r);
    r = redisCommand(rc, "HGET sluice:{bad-a}:state next_grant");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(atoll(r->str), id);
    freeReplyObject(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spare_first_of_order), cmocka_unit_test(test_spill_balance),
        cmocka_unit_test(test_order_restricts),      cmocka_unit_test(test_shed_consumes_nothing),
        cmocka_unit_test(test_health_skipped),       cmocka_unit_test(test_weighted_head_only),
        cmocka_unit_test(test_deferral_on_member),   cmocka_unit_test(test_bad_argv),
        cmocka_unit_test(test_partial_item),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
