/* test_daemon_groups: deployment groups as sluiced's callers and operators
 * see them, against a private redis-server.
 *
 * One sluiced with three groups of members with different rates and tags.
 * Proves, over the socket, with counts:
 *   - with capacity to spare every grant of a group is on its primary
 *     (20 sequential ACQUIREs within its burst), and the reply has five
 *     elements: grant id, waited, tokens, the member and its endpoint;
 *   - once the primary's burst is used its next slot is beyond spill_ms,
 *     so grants spill to the next member in order, and to the one after
 *     when that one is full too;
 *   - TAG restricts the members: over many ACQUIREs never a member without
 *     the tag; a tenant restricted in the group likewise, and a tenant's
 *     tag and the request's both apply; no allowed member at all is
 *     `-SHED tag retry-after-ms=-1`; a deployment without the tag is an
 *     error;
 *   - an unknown group is an error and the daemon keeps serving;
 *   - INFO groups and the metrics families (sluice_group_*, and
 *     sluice_sheds_total{reason="tag"}) move by exactly the requests made;
 *   - SETTLE STATUS quota is accepted: the member is out of quota
 *     (STATUS quota_out_ms) and its group routes around it, while a
 *     deployment out of quota sheds `quota` on its own; both count in
 *     INFO quota_errors and sluice_provider_quota_errors_total.
 * The tests share one daemon and run in order; each group's deployments
 * are used by one test only, so the counters Redis keeps do not mix. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

static redis_fixture fx;
static daemon_proc dmn;
static int metrics_port;

/* g1: priority and spill. p1 has a burst of 20 at 1 request/s, so after
 * 20 grants its next slot is ~1 s away, beyond spill_ms; s1 has a burst
 * of 3; t1 plenty.
 * g2: tags. a2 (us) is the primary with room; b2 (eu) and c2 (eu, us)
 * have small bursts. Tenant acme is restricted to eu.
 * g3: the quota out. q1 and q2 both have room.
 * plain: a deployment out of any group. */
static const char *const deployments =
    "  p1: { rpm: 60, burst: { requests: 20 }, endpoint: \"http://p1.example\", tags: [eu] }\n"
    "  s1: { rpm: 60, burst: { requests: 3 }, endpoint: \"http://s1.example\", tags: [eu] }\n"
    "  t1: { rpm: 60000, endpoint: \"http://t1.example/v1\", tags: [us] }\n"
    "  a2: { rpm: 60000, endpoint: \"http://a2.example\", tags: [us] }\n"
    "  b2: { rpm: 600, burst: { requests: 5 }, endpoint: \"http://b2.example\", tags: [eu] }\n"
    "  c2: { rpm: 600, burst: { requests: 5 }, tags: [eu, us] }\n"
    "  q1: { rpm: 60000, endpoint: \"http://q1.example\" }\n"
    "  q2: { rpm: 60000, endpoint: \"http://q2.example\" }\n"
    "  plain: { rpm: 60000 }\n"
    "groups:\n"
    "  g1: { members: [p1, s1, t1], spill_ms: 200, max_wait_ms: 5000 }\n"
    "  g2:\n"
    "    members: [a2, b2, c2]\n"
    "    spill_ms: 0\n"
    "    tenants: { acme: { tag: eu } }\n"
    "  g3: { members: [q1, q2], spill_ms: 100 }\n";

static int group_setup(void **state) {
    if (!sluiced_path() || redis_fixture_start(&fx, 0) != 0) return -1;
    metrics_port = free_tcp_port();
    char extra[128];
    snprintf(extra, sizeof(extra), "  metrics: 127.0.0.1:%d\n", metrics_port);
    daemon_init(&dmn, fx.dir, "groups");
    if (daemon_configure(&dmn, &fx, extra, deployments) != 0 || daemon_start(&dmn) != 0) return -1;
    return daemon_wait_redis(&dmn, 10000) ? 0 : -1;
}

static int group_teardown(void **state) {
    if (dmn.pid > 0) daemon_stop(&dmn);
    harness_kill_all();
    redis_fixture_stop(&fx);
    return 0;
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) fail_msg("expected to find \"%s\" in:\n%s", needle, hay);
}

/* GET /metrics into buf (headers included). */
static void scrape(char *buf, size_t cap) {
    if (!http_get(metrics_port, "GET /metrics HTTP/1.0\r\n\r\n", buf, cap))
        fail_msg("no answer on the metrics port %d", metrics_port);
    assert_contains(buf, "HTTP/1.0 200 OK");
}

/* The INFO line of group g ("group<i>:group=g,...") or of its member m
 * ("group_member<k>:group=g,member=m,..."), without its key; "" if none. */
static void group_line(const char *info, const char *g, const char *m, char *out, size_t n) {
    char want[200];
    if (m) snprintf(want, sizeof(want), ":group=%s,member=%s,", g, m);
    else snprintf(want, sizeof(want), ":group=%s,members=", g);
    const char *key = m ? "group_member" : "group";
    out[0] = '\0';
    for (const char *p = info; p && *p;) {
        const char *eol = strchr(p, '\r');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!strncmp(p, key, strlen(key)) && colon && !strncmp(colon, want, strlen(want))) {
            snprintf(out, n, "%.*s", (int)(len - (size_t)(colon + 1 - p)), colon + 1);
            return;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
}

static double group_field(const char *info, const char *g, const char *m, const char *field) {
    char l[512], key[64];
    group_line(info, g, m, l, sizeof(l));
    snprintf(key, sizeof(key), ",%s=", field);
    const char *p = strstr(l, key);
    return p ? atof(p + strlen(key)) : -1;
}

static char *info_groups(void) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "INFO groups");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char *s = strdup(r->str);
    freeReplyObject(r);
    redisFree(c);
    return s;
}

static double status_num(const char *dep, const char *field) {
    char v[128];
    daemon_status_field(&dmn, dep, field, v, sizeof(v));
    return v[0] ? atof(v) : -1;
}

/* One ACQUIRE's outcome: the member granted ("" for a shed or an error)
 * and the endpoint, or the error text. */
typedef struct answer {
    char member[72];
    char endpoint[128];
    char id[96];
    char error[256];
} answer;

static void read_answer(redisReply *r, answer *a) {
    memset(a, 0, sizeof(*a));
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(a->error, sizeof(a->error), "%s", r->str);
    } else {
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 5)
            fail_msg("expected a group's grant (5 elements), got type %d with %zu", r->type, r->elements);
        assert_int_equal(r->element[0]->type, REDIS_REPLY_STRING);
        assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->element[3]->type, REDIS_REPLY_STRING);
        assert_int_equal(r->element[4]->type, REDIS_REPLY_STRING);
        snprintf(a->id, sizeof(a->id), "%s", r->element[0]->str);
        snprintf(a->member, sizeof(a->member), "%s", r->element[3]->str);
        snprintf(a->endpoint, sizeof(a->endpoint), "%s", r->element[4]->str);
        /* The grant is the member's. */
        size_t ml = strlen(a->member);
        assert_int_equal(strncmp(a->id, a->member, ml), 0);
        assert_int_equal(a->id[ml], ':');
    }
    freeReplyObject(r);
}

static void settle_ok(redisContext *c, const answer *a) {
    redisReply *r = redisCommand(c, "SETTLE %s TOKENS 1 STATUS ok", a->id);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* ---- priority and spill ---------------------------------------------------------------- */

static void test_primary_then_spill(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    answer a;
    /* Within the primary's burst: all on p1. */
    for (int i = 0; i < 20; i++) {
        read_answer(redisCommand(c, "ACQUIRE g1 TOKENS 1"), &a);
        if (strcmp(a.member, "p1") != 0) fail_msg("grant %d: %s%s, not on the primary", i, a.member, a.error);
        assert_string_equal(a.endpoint, "http://p1.example");
        settle_ok(c, &a);
    }
    /* p1's next slot is ~1 s away, beyond spill_ms 200: s1 (burst 3), then
     * t1, the next in order with room. */
    const char *want[] = {"s1", "s1", "s1", "t1", "t1"};
    const char *endpoint[] = {"http://s1.example", "http://s1.example", "http://s1.example", "http://t1.example/v1",
                              "http://t1.example/v1"};
    for (int i = 0; i < 5; i++) {
        read_answer(redisCommand(c, "ACQUIRE g1 TOKENS 1"), &a);
        if (strcmp(a.member, want[i]) != 0) fail_msg("spill %d: got %s%s, wanted %s", i, a.member, a.error, want[i]);
        assert_string_equal(a.endpoint, endpoint[i]);
        settle_ok(c, &a);
    }
    /* TAG eu: only p1 and s1 may serve, both full: the soonest of them
     * within the max wait (~1 s), never t1. */
    double t0 = now_ms();
    read_answer(redisCommand(c, "ACQUIRE g1 TOKENS 1 TAG eu"), &a);
    double took = now_ms() - t0;
    print_message("  TAG eu with the eu members full: %s after %.0f ms\n", a.member, took);
    assert_true(!strcmp(a.member, "p1") || !strcmp(a.member, "s1"));
    assert_true(took > 300);
    settle_ok(c, &a);
    redisFree(c);

    /* The agent's figures: 26 acquires, all granted, 6 spilled (3 s1 and
     * 2 t1 before the TAG eu one; that went to p1 or s1). */
    char *info = info_groups();
    assert_contains(info, "# Groups\r\ngroups:3\r\n");
    assert_true(group_field(info, "g1", NULL, "acquires") == 26);
    assert_true(group_field(info, "g1", NULL, "grants") == 26);
    assert_true(group_field(info, "g1", NULL, "sheds") == 0);
    double p1 = group_field(info, "g1", "p1", "grants"), s1 = group_field(info, "g1", "s1", "grants");
    assert_true(p1 + s1 == 24 && (p1 == 20 || p1 == 21));
    assert_true(group_field(info, "g1", NULL, "spilled") == 26 - p1);
    assert_true(group_field(info, "g1", "t1", "grants") == 2);
    assert_true(group_field(info, "g1", "p1", "priority") == 0);
    assert_true(group_field(info, "g1", "t1", "priority") == 2);
    free(info);
    char body[65536];
    scrape(body, sizeof(body));
    assert_true(metric(body, "sluice_group_acquires_total{group=\"g1\"}") == 26);
    assert_true(metric(body, "sluice_group_grants_total{group=\"g1\",member=\"p1\"}") == p1);
    assert_true(metric(body, "sluice_group_grants_total{group=\"g1\",member=\"t1\"}") == 2);
    assert_true(metric(body, "sluice_group_spilled_total{group=\"g1\"}") == 26 - p1);
    assert_true(metric(body, "sluice_group_sheds_total{group=\"g1\"}") == 0);
    /* Groups not used yet have their series, at zero. */
    assert_true(metric(body, "sluice_group_grants_total{group=\"g3\",member=\"q2\"}") == 0);
}

/* ---- tags and tenants ------------------------------------------------------------------ */

/* Sends n pipelined ACQUIREs (fmt), counts the grants per member into
 * counts (a2, b2, c2) and returns the sheds; fails on anything else. */
static int burst_of(redisContext *c, int n, int counts[3], const char *fmt, ...) {
    for (int i = 0; i < n; i++) {
        va_list ap;
        va_start(ap, fmt);
        assert_int_equal(redisvAppendCommand(c, fmt, ap), REDIS_OK);
        va_end(ap);
    }
    int sheds = 0;
    static const char *const names[] = {"a2", "b2", "c2"};
    answer *as = calloc((size_t)n, sizeof(*as));
    assert_non_null(as);
    for (int i = 0; i < n; i++) {
        void *rv = NULL;
        assert_int_equal(redisGetReply(c, &rv), REDIS_OK);
        read_answer(rv, &as[i]);
    }
    /* Settled once every reply is in: the connection is pipelined. */
    for (int i = 0; i < n; i++) {
        const answer *a = &as[i];
        if (a->error[0]) {
            if (strncmp(a->error, "SHED ", 5) != 0) fail_msg("unexpected error: %s", a->error);
            sheds++;
            continue;
        }
        int k = -1;
        for (int m = 0; m < 3; m++)
            if (!strcmp(a->member, names[m])) k = m;
        assert_true(k >= 0);
        counts[k]++;
        settle_ok(c, a);
    }
    free(as);
    return sheds;
}

static void test_tags_restrict_members(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    /* No tag: the primary has room for all. */
    int any[3] = {0};
    assert_int_equal(burst_of(c, 30, any, "ACQUIRE g2 MAXWAIT 0"), 0);
    assert_int_equal(any[0], 30);
    /* TAG eu: b2 and c2 only (a burst each, then shed), never a2. */
    int eu[3] = {0};
    int shed = burst_of(c, 40, eu, "ACQUIRE g2 MAXWAIT 0 TAG eu");
    print_message("  TAG eu: a2 %d, b2 %d, c2 %d, shed %d\n", eu[0], eu[1], eu[2], shed);
    assert_int_equal(eu[0], 0);
    assert_true(eu[1] >= 3 && eu[2] >= 3 && shed > 0);
    assert_int_equal(eu[1] + eu[2] + shed, 40);
    /* Tenant acme is restricted to eu in g2: never a2 either. */
    int acme[3] = {0};
    shed = burst_of(c, 20, acme, "ACQUIRE g2 MAXWAIT 0 TENANT acme");
    assert_int_equal(acme[0], 0);
    assert_int_equal(acme[1] + acme[2] + shed, 20);
    /* Another tenant is not restricted. */
    int other[3] = {0};
    assert_int_equal(burst_of(c, 5, other, "ACQUIRE g2 MAXWAIT 0 TENANT zed"), 0);
    assert_int_equal(other[0], 5);
    /* acme's tag and the request's both apply: eu and us is c2 alone. */
    int both[3] = {0};
    shed = burst_of(c, 10, both, "ACQUIRE g2 MAXWAIT 0 TENANT acme TAG us");
    assert_int_equal(both[0] + both[1], 0);
    assert_int_equal(both[2] + shed, 10);

    /* Nobody carries the tag: shed "tag", never, and nothing reserved. */
    redisReply *r = redisCommand(c, "ACQUIRE g2 TAG apac");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "SHED tag retry-after-ms=-1");
    freeReplyObject(r);
    r = redisCommand(c, "ACQUIRE g1 TAG us TENANT x MAXWAIT 0");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY); /* t1 carries us */
    freeReplyObject(r);
    /* A deployment that does not carry the tag is an error. */
    r = redisCommand(c, "ACQUIRE a2 TAG eu");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_contains(r->str, "deployment 'a2' does not carry tag 'eu'");
    freeReplyObject(r);
    /* A deployment asked directly answers with three elements. */
    r = redisCommand(c, "ACQUIRE a2 TAG us");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    freeReplyObject(r);
    redisFree(c);

    char *info = info_groups();
    int sheds_g2 = 40 - eu[1] - eu[2] + 20 - acme[1] - acme[2] + 10 - both[2] + 1;
    assert_true(group_field(info, "g2", NULL, "acquires") == 106);
    assert_true(group_field(info, "g2", NULL, "sheds") == sheds_g2);
    assert_true(group_field(info, "g2", "a2", "grants") == 35);
    free(info);
    char body[65536];
    scrape(body, sizeof(body));
    assert_true(metric(body, "sluice_sheds_total{reason=\"tag\"}") == 1);
    assert_true(metric(body, "sluice_group_sheds_total{group=\"g2\"}") == sheds_g2);
}

/* ---- errors -------------------------------------------------------------------------- */

static void test_unknown_group(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "ACQUIRE nope TOKENS 1");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "ERR unknown deployment or group 'nope'");
    freeReplyObject(r);
    r = redisCommand(c, "ACQUIRE g1 TAG");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = redisCommand(c, "ACQUIRE g1 TAG %s", "not a tag");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_contains(r->str, "TAG must be");
    freeReplyObject(r);
    /* It serves on. */
    answer a;
    read_answer(redisCommand(c, "ACQUIRE g3 TOKENS 1"), &a);
    assert_string_equal(a.member, "q1");
    settle_ok(c, &a);
    redisFree(c);
    assert_true(daemon_pings(&dmn));
}

/* ---- the quota outcome ------------------------------------------------------------------ */

static void test_settle_quota(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    answer a;
    read_answer(redisCommand(c, "ACQUIRE g3 TOKENS 1"), &a);
    assert_string_equal(a.member, "q1");
    /* The provider said insufficient_quota, reset in 30 s. */
    redisReply *r = redisCommand(c, "SETTLE %s TOKENS 0 STATUS quota HEADER retry-after 30", a.id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    /* The settle is coalesced and sent in the background: once it is in,
     * q1 is out and the group routes around it, at once. */
    int moved = 0;
    for (double end = now_ms() + 5000; !moved && now_ms() < end;) {
        read_answer(redisCommand(c, "ACQUIRE g3 TOKENS 1 MAXWAIT 0"), &a);
        assert_string_equal(a.error, "");
        moved = !strcmp(a.member, "q2");
        settle_ok(c, &a);
        if (!moved) sleep_ms(20);
    }
    assert_true(moved);
    for (int i = 0; i < 10; i++) {
        read_answer(redisCommand(c, "ACQUIRE g3 TOKENS 1 MAXWAIT 0"), &a);
        assert_string_equal(a.member, "q2");
        assert_string_equal(a.endpoint, "http://q2.example");
        settle_ok(c, &a);
    }
    double out = status_num("q1", "quota_out_ms");
    print_message("  q1: quota_out_ms %.0f, quota_events_total %.0f\n", out, status_num("q1", "quota_events_total"));
    assert_true(out > 25000 && out <= 30000);
    assert_true(status_num("q1", "quota_events_total") == 1);
    assert_true(status_num("q2", "quota_out_ms") == 0);

    /* Out of any group: a deployment out of quota sheds `quota`, with the
     * time left as the hint. */
    r = redisCommand(c, "ACQUIRE plain");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    char id[96];
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    freeReplyObject(r);
    r = redisCommand(c, "SETTLE %s STATUS QUOTA HEADER retry-after 20", id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    int shed = 0;
    for (double end = now_ms() + 5000; !shed && now_ms() < end;) {
        r = redisCommand(c, "ACQUIRE plain MAXWAIT 0");
        if (r->type == REDIS_REPLY_ERROR) {
            print_message("  plain: %s\n", r->str);
            assert_int_equal(strncmp(r->str, "SHED quota retry-after-ms=", 26), 0);
            long long ra = atoll(r->str + 26);
            assert_true(ra > 15000 && ra <= 20000);
            shed = 1;
        } else {
            redisReply *s = redisCommand(c, "SETTLE %s STATUS cancelled", r->element[0]->str);
            freeReplyObject(s);
            sleep_ms(20);
        }
        freeReplyObject(r);
    }
    assert_true(shed);
    r = redisCommand(c, "SETTLE plain:1 STATUS bogus");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_contains(r->str, "STATUS must be ok, throttled, failed, cancelled or quota");
    freeReplyObject(r);
    redisFree(c);
    char body[65536];
    scrape(body, sizeof(body));
    assert_true(metric(body, "sluice_sheds_total{reason=\"quota\"}") >= 1);
    assert_true(metric(body, "sluice_provider_quota_errors_total") == 2);
    char *info = daemon_info(&dmn);
    assert_non_null(info);
    assert_true(info_field(info, "quota_errors") == 2);
    free(info);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primary_then_spill),
        cmocka_unit_test(test_tags_restrict_members),
        cmocka_unit_test(test_unknown_group),
        cmocka_unit_test(test_settle_quota),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
