/* test_daemon_lanes: lanes and tenants as sluiced's callers and operators
 * see them, against a private redis-server.
 *
 * Proves that ACQUIRE with LANE and TENANT moves the per lane and per
 * tenant figures everywhere they are shown: the INFO lanes and tenants
 * sections, the Prometheus families (sluice_lane_*, sluice_tenant_*, with
 * configured classes present at zero before their first request), and
 * the STATUS fields from Redis (lane.<name>.*, tenant.<name>.*); that an
 * unknown tenant is charged to "default"; that a tenant ceiling sheds
 * with reason `ceiling` and a batch request behind an interactive backlog
 * is deferred, held (queued) and granted later; that an unknown lane is
 * an error naming the deployment's lanes, a malformed LANE or TENANT a
 * syntax error, and neither hurts the daemon. Each test uses its own
 * deployment, so the counters Redis keeps do not carry over. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

static redis_fixture fx;

static int group_setup(void **state) {
    if (!sluiced_path()) return -1;
    return redis_fixture_start(&fx, 0);
}

static int group_teardown(void **state) {
    harness_kill_all();
    redis_fixture_stop(&fx);
    return 0;
}

static int test_teardown(void **state) {
    harness_kill_all();
    return 0;
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) fail_msg("expected to find \"%s\" in:\n%s", needle, hay);
}

static void assert_lacks(const char *hay, const char *needle) {
    if (strstr(hay, needle)) fail_msg("did not expect \"%s\" in:\n%s", needle, hay);
}

/* GET /metrics into buf (headers included). */
static void scrape(int port, char *buf, size_t cap) {
    if (!http_get(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, cap)) fail_msg("no answer on the metrics port %d", port);
    assert_contains(buf, "HTTP/1.0 200 OK");
}

/* The INFO line of a lane or tenant (kind "lane"/"tenant") of dep, copied
 * into out without its "<kind><i>:" key; "" when there is none. */
static void class_line(const char *info, const char *kind, const char *dep, const char *name, char *out, size_t n) {
    char want[200];
    snprintf(want, sizeof(want), ":deployment=%s,%s=%s,", dep, kind, name);
    out[0] = '\0';
    for (const char *p = info; p && *p;) {
        const char *eol = strchr(p, '\r');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!strncmp(p, kind, strlen(kind)) && colon && !strncmp(colon, want, strlen(want))) {
            snprintf(out, n, "%.*s", (int)(len - (size_t)(colon + 1 - p)), colon + 1);
            return;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
}

/* A numeric field ("grants") of a lane or tenant INFO line, -1 when absent. */
static double class_field(const char *info, const char *kind, const char *dep, const char *name, const char *field) {
    char l[512], key[64];
    class_line(info, kind, dep, name, l, sizeof(l));
    snprintf(key, sizeof(key), ",%s=", field);
    const char *p = strstr(l, key);
    return p ? atof(p + strlen(key)) : -1;
}

static double status_num(const daemon_proc *d, const char *dep, const char *field) {
    char v[128];
    daemon_status_field(d, dep, field, v, sizeof(v));
    return v[0] ? atof(v) : -1;
}

/* A deployment with two lanes and three tenant classes (a, b, default). */
static void lanes_yaml(char *buf, size_t n, const char *dep, long long ceiling_rpm) {
    snprintf(buf, n,
             "  %s:\n    rpm: 600\n    tpm: 600000\n"
             "    lanes:\n"
             "      interactive: { priority: 0, max_wait_ms: 10000, headroom: 0.2 }\n"
             "      batch: { priority: 1, max_wait_ms: 60000 }\n"
             "    tenants:\n"
             "      a: { weight: 3 }\n"
             "      b: { weight: 1, ceiling_rpm: %lld }\n"
             "  plain:\n    rpm: 600\n",
             dep, ceiling_rpm);
}

static void start_daemon(daemon_proc *d, const char *name, int port, const char *deployments) {
    char extra[128] = "";
    if (port > 0) snprintf(extra, sizeof(extra), "  metrics: 127.0.0.1:%d\n", port);
    daemon_init(d, fx.dir, name);
    assert_int_equal(daemon_configure(d, &fx, extra, deployments), 0);
    assert_int_equal(daemon_start(d), 0);
    assert_true(daemon_wait_redis(d, 10000));
}

/* ACQUIRE, expecting a grant; returns its reserved tokens. */
static long long acquire_ok(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        fail_msg("expected a grant, got %s", r->type == REDIS_REPLY_ERROR ? r->str : "another reply");
    long long tokens = r->element[2]->integer;
    freeReplyObject(r);
    return tokens;
}

/* A command expected to fail; its error text into out. */
static void command_error(redisContext *c, char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR) fail_msg("expected an error reply to %s", fmt);
    snprintf(out, n, "%s", r->str);
    freeReplyObject(r);
}

/* ---- 1. counters everywhere ------------------------------------------------------------ */

static void test_counters_by_lane_and_tenant(void **state) {
    int port = free_tcp_port();
    assert_true(port > 0);
    char yaml[1024];
    lanes_yaml(yaml, sizeof(yaml), "d", 0);
    daemon_proc d;
    start_daemon(&d, "counters", port, yaml);

    /* Before any request: every configured class is there, at zero. */
    static char body[1 << 17];
    scrape(port, body, sizeof(body));
    assert_contains(body, "# TYPE sluice_lane_grants_total counter");
    assert_contains(body, "# TYPE sluice_lane_wait_seconds histogram");
    assert_contains(body, "# TYPE sluice_lane_queued gauge");
    assert_true(metric(body, "sluice_lane_grants_total{deployment=\"d\",lane=\"batch\"}") == 0);
    assert_true(metric(body, "sluice_lane_grants_total{deployment=\"d\",lane=\"interactive\"}") == 0);
    assert_true(metric(body, "sluice_tenant_grants_total{deployment=\"d\",tenant=\"b\"}") == 0);
    assert_true(metric(body, "sluice_tenant_grants_total{deployment=\"d\",tenant=\"default\"}") == 0);
    assert_true(metric(body, "sluice_deferrals_total") == 0);

    redisContext *c = daemon_connect(&d);
    assert_non_null(c);
    for (int i = 0; i < 3; i++) assert_int_equal(acquire_ok(c, "ACQUIRE d TOKENS 10 LANE batch TENANT a"), 10);
    /* No lane: the default (highest) lane; an unknown tenant: "default". */
    assert_int_equal(acquire_ok(c, "ACQUIRE d TOKENS 7 TENANT nobody"), 7);
    /* A deployment without lanes or tenants has no rows of either. */
    acquire_ok(c, "ACQUIRE plain TOKENS 1");
    redisFree(c);

    char *info = daemon_info(&d);
    assert_non_null(info);
    assert_contains(info, "# Lanes\r\nlanes:2\r\n");
    assert_contains(info, "# Tenants\r\ntenants:3\r\n");
    assert_contains(info, "deferrals:0");
    char l[512];
    class_line(info, "lane", "d", "batch", l, sizeof(l));
    print_message("  INFO lane: %s\n", l);
    assert_contains(l, "acquires=3,grants=3,sheds=0,deferrals=0,queued=0,tokens_reserved=30,");
    assert_true(class_field(info, "lane", "d", "interactive", "grants") == 1);
    assert_true(class_field(info, "lane", "d", "interactive", "tokens_reserved") == 7);
    assert_true(class_field(info, "tenant", "d", "a", "grants") == 3);
    assert_true(class_field(info, "tenant", "d", "a", "tokens_reserved") == 30);
    assert_true(class_field(info, "tenant", "d", "b", "acquires") == 0);
    assert_true(class_field(info, "tenant", "d", "default", "grants") == 1);
    assert_true(class_field(info, "tenant", "d", "nobody", "grants") == -1);
    /* Lane and tenant rows only: # Dimensions lists every deployment. */
    char *lanes = strstr(info, "# Lanes");
    assert_non_null(lanes);
    const char *dims = strstr(info, "# Dimensions");
    assert_true(dims && dims < lanes);
    /* (up to the next section after # Tenants: # Patience lists every class) */
    char *end = strstr(lanes, "# Groups");
    if (end) *end = '\0';
    assert_lacks(lanes, "deployment=plain");
    free(info);
    /* One section alone. */
    redisContext *c2 = daemon_connect(&d);
    redisReply *r = redisCommand(c2, "INFO tenants");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_contains(r->str, "# Tenants");
    assert_lacks(r->str, "# Lanes");
    freeReplyObject(r);
    redisFree(c2);

    scrape(port, body, sizeof(body));
    assert_true(metric(body, "sluice_lane_acquires_total{deployment=\"d\",lane=\"batch\"}") == 3);
    assert_true(metric(body, "sluice_lane_grants_total{deployment=\"d\",lane=\"batch\"}") == 3);
    assert_true(metric(body, "sluice_lane_grants_total{deployment=\"d\",lane=\"interactive\"}") == 1);
    assert_true(metric(body, "sluice_lane_sheds_total{deployment=\"d\",lane=\"batch\"}") == 0);
    assert_true(metric(body, "sluice_lane_tokens_reserved_total{deployment=\"d\",lane=\"batch\"}") == 30);
    assert_true(metric(body, "sluice_lane_queued{deployment=\"d\",lane=\"batch\"}") == 0);
    assert_true(metric(body, "sluice_lane_wait_seconds_bucket{deployment=\"d\",lane=\"batch\",le=\"+Inf\"}") == 3);
    assert_true(metric(body, "sluice_lane_wait_seconds_count{deployment=\"d\",lane=\"batch\"}") == 3);
    assert_true(metric(body, "sluice_lane_wait_seconds_sum{deployment=\"d\",lane=\"batch\"}") >= 0);
    assert_true(metric(body, "sluice_tenant_grants_total{deployment=\"d\",tenant=\"a\"}") == 3);
    assert_true(metric(body, "sluice_tenant_tokens_reserved_total{deployment=\"d\",tenant=\"a\"}") == 30);
    assert_true(metric(body, "sluice_tenant_grants_total{deployment=\"d\",tenant=\"default\"}") == 1);
    assert_true(metric(body, "sluice_tenant_tokens_reserved_total{deployment=\"d\",tenant=\"default\"}") == 7);
    assert_true(metric(body, "sluice_tenant_sheds_total{deployment=\"d\",tenant=\"a\"}") == 0);
    assert_true(metric(body, "sluice_tenant_deferrals_total{deployment=\"d\",tenant=\"a\"}") == 0);
    assert_true(metric(body, "sluice_grants_total{mode=\"redis\"}") == 5);
    /* No lane or tenant series of it (the per-dimension rates cover every
     * deployment). */
    for (const char *ln = body; ln && *ln; ln = strchr(ln, '\n') ? strchr(ln, '\n') + 1 : NULL) {
        if (strncmp(ln, "sluice_lane_", 12) && strncmp(ln, "sluice_tenant_", 14)) continue;
        const char *eol = strchr(ln, '\n');
        char one[512];
        snprintf(one, sizeof(one), "%.*s", (int)(eol ? eol - ln : (long)strlen(ln)), ln);
        assert_lacks(one, "deployment=\"plain\"");
    }

    /* Redis' view, through STATUS. */
    assert_true(status_num(&d, "d", "lane.batch.granted_total") == 3);
    assert_true(status_num(&d, "d", "lane.interactive.granted_total") == 1);
    assert_true(status_num(&d, "d", "lane.batch.share") > 0);
    assert_true(status_num(&d, "d", "tenant.a.granted_total") == 3);
    assert_true(status_num(&d, "d", "tenant.a.tokens_total") == 30);
    assert_true(status_num(&d, "d", "tenant.a.weight") == 3);
    assert_true(status_num(&d, "d", "tenant.default.granted_total") == 1);
    assert_true(status_num(&d, "d", "deferred_total") == 0);
    assert_true(status_num(&d, "plain", "deferred_total") == 0);
    assert_true(status_num(&d, "plain", "lane.batch.granted_total") == -1);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- 2. sheds and deferrals ------------------------------------------------------------ */

/* Tenant b's ceiling (120 rpm: a burst of 2) sheds with reason ceiling. */
static void test_ceiling_sheds(void **state) {
    int port = free_tcp_port();
    assert_true(port > 0);
    char yaml[1024];
    lanes_yaml(yaml, sizeof(yaml), "c", 120);
    daemon_proc d;
    start_daemon(&d, "ceiling", port, yaml);
    redisContext *c = daemon_connect(&d);
    int grants = 0, sheds = 0;
    for (int i = 0; i < 5; i++) {
        redisReply *r = redisCommand(c, "ACQUIRE c TENANT b MAXWAIT 0");
        assert_non_null(r);
        if (r->type == REDIS_REPLY_ARRAY) {
            grants++;
        } else {
            assert_int_equal(r->type, REDIS_REPLY_ERROR);
            assert_contains(r->str, "SHED ceiling retry-after-ms=");
            sheds++;
        }
        freeReplyObject(r);
    }
    redisFree(c);
    print_message("  tenant b at its ceiling: %d grants, %d sheds\n", grants, sheds);
    assert_true(sheds >= 1);
    char *info = daemon_info(&d);
    assert_true(info_field(info, "sheds_ceiling") == sheds);
    assert_true(class_field(info, "tenant", "c", "b", "sheds") == sheds);
    assert_true(class_field(info, "tenant", "c", "b", "grants") == grants);
    assert_true(class_field(info, "lane", "c", "interactive", "sheds") == sheds);
    free(info);
    static char body[1 << 17];
    scrape(port, body, sizeof(body));
    assert_true(metric(body, "sluice_sheds_total{reason=\"ceiling\"}") == sheds);
    assert_true(metric(body, "sluice_tenant_sheds_total{deployment=\"c\",tenant=\"b\"}") == sheds);
    assert_true(metric(body, "sluice_lane_sheds_total{deployment=\"c\",lane=\"interactive\"}") == sheds);
    assert_true(status_num(&d, "c", "tenant.b.shed_total") == sheds);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A batch request behind a second or more of interactive backlog lies
 * beyond its lane's horizon: Redis defers it, the agent holds it (queued)
 * and grants it once the backlog has drained. */
static void test_batch_deferred_behind_interactive(void **state) {
    int port = free_tcp_port();
    assert_true(port > 0);
    char yaml[1024];
    lanes_yaml(yaml, sizeof(yaml), "q", 0);
    daemon_proc d;
    start_daemon(&d, "defer", port, yaml);
    redisContext *c = daemon_connect(&d);
    enum { N = 30 };
    for (int i = 0; i < N; i++) redisAppendCommand(c, "ACQUIRE q LANE interactive TENANT a MAXWAIT 10000");
    int done = 0;
    while (!done) assert_int_equal(redisBufferWrite(c, &done), REDIS_OK);
    /* Once the interactive backlog is reserved (a second or more ahead),
     * the batch request arrives. */
    double end = now_ms() + 20000, backlog = -1;
    while (now_ms() < end && (backlog = status_num(&d, "q", "requests_backlog_ms")) < 1000) sleep_ms(5);
    if (backlog < 1000) fail_msg("the interactive backlog never reached 1 s (last %.0f ms)", backlog);
    redisContext *cb = daemon_connect(&d);
    assert_non_null(cb);
    redisAppendCommand(cb, "ACQUIRE q LANE batch TENANT a MAXWAIT 60000");
    done = 0;
    while (!done) assert_int_equal(redisBufferWrite(cb, &done), REDIS_OK);

    /* While it is held: the deferral counted, the lane's queue gauge 1. */
    end = now_ms() + 20000;
    int seen_queued = 0;
    double deferrals = 0;
    static char body[1 << 17];
    while (now_ms() < end && !seen_queued) {
        char *info = daemon_info(&d);
        assert_non_null(info);
        deferrals = class_field(info, "lane", "q", "batch", "deferrals");
        seen_queued = class_field(info, "lane", "q", "batch", "queued") == 1 && deferrals >= 1;
        if (seen_queued) {
            assert_true(info_field(info, "deferrals") >= 1);
            assert_true(class_field(info, "tenant", "q", "a", "deferrals") >= 1);
            assert_true(class_field(info, "tenant", "q", "a", "queued") >= 1);
            assert_true(class_field(info, "lane", "q", "batch", "grants") == 0);
            scrape(port, body, sizeof(body));
        }
        free(info);
        if (!seen_queued) sleep_ms(5);
    }
    if (!seen_queued) fail_msg("the batch request was never seen held after a deferral");
    assert_true(metric(body, "sluice_lane_queued{deployment=\"q\",lane=\"batch\"}") == 1);
    assert_true(metric(body, "sluice_tenant_queued{deployment=\"q\",tenant=\"a\"}") >= 1);
    assert_true(metric(body, "sluice_tenant_deferrals_total{deployment=\"q\",tenant=\"a\"}") >= 1);
    assert_true(metric(body, "sluice_lane_deferrals_total{deployment=\"q\",lane=\"batch\"}") >= 1);
    assert_true(metric(body, "sluice_deferrals_total") >= 1);

    /* Every reply is a grant, the batch one too. */
    for (int i = 0; i <= N; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(i < N ? c : cb, (void **)&r), REDIS_OK);
        if (r->type != REDIS_REPLY_ARRAY) fail_msg("reply %d: %s", i, r->type == REDIS_REPLY_ERROR ? r->str : "?");
        freeReplyObject(r);
    }
    redisFree(c);
    redisFree(cb);
    char *info = daemon_info(&d);
    assert_true(class_field(info, "lane", "q", "batch", "grants") == 1);
    assert_true(class_field(info, "lane", "q", "batch", "queued") == 0);
    assert_true(class_field(info, "lane", "q", "interactive", "grants") == N);
    free(info);
    assert_true(status_num(&d, "q", "lane.batch.deferred_total") >= 1);
    assert_true(status_num(&d, "q", "deferred_total") >= 1);
    assert_true(status_num(&d, "q", "lane.batch.granted_total") == 1);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- 3. errors ------------------------------------------------------------------------- */

static void test_lane_errors(void **state) {
    char yaml[1024];
    lanes_yaml(yaml, sizeof(yaml), "e", 0);
    daemon_proc d;
    start_daemon(&d, "errors", 0, yaml);
    redisContext *c = daemon_connect(&d);
    char err[512];
    command_error(c, err, sizeof(err), "ACQUIRE e LANE nope");
    assert_string_equal(err, "ERR unknown lane 'nope' for deployment 'e' (its lanes: interactive, batch)");
    command_error(c, err, sizeof(err), "ACQUIRE plain LANE batch");
    assert_string_equal(err, "ERR unknown lane 'batch' for deployment 'plain' (its lanes: none)");
    command_error(c, err, sizeof(err), "ACQUIRE e LANE %s", "a b");
    assert_contains(err, "ERR LANE must be 1 to 64 of A-Z a-z 0-9 . _ : -, got 'a b'");
    char long_name[66];
    memset(long_name, 'x', 65);
    long_name[65] = '\0';
    command_error(c, err, sizeof(err), "ACQUIRE e LANE %s", long_name);
    assert_contains(err, "ERR LANE must be 1 to 64");
    command_error(c, err, sizeof(err), "ACQUIRE e TENANT %s", "t/1");
    assert_contains(err, "ERR TENANT must be 1 to 64");
    command_error(c, err, sizeof(err), "ACQUIRE e TENANT %s", "");
    assert_contains(err, "ERR TENANT must be 1 to 64");
    command_error(c, err, sizeof(err), "ACQUIRE e LANE");
    assert_contains(err, "ERR syntax error");
    /* A 64-character name is fine (a tenant not configured: "default"). */
    char name64[65];
    memset(name64, 't', 64);
    name64[64] = '\0';
    acquire_ok(c, "ACQUIRE e TENANT %s", name64);
    /* Lane names are case-sensitive, option words are not. */
    command_error(c, err, sizeof(err), "ACQUIRE e lane BATCH");
    assert_contains(err, "unknown lane 'BATCH'");
    acquire_ok(c, "ACQUIRE e lane batch tenant a");
    redisFree(c);
    /* The daemon serves on; nothing refused was counted as an acquire. */
    assert_true(daemon_pings(&d));
    char *info = daemon_info(&d);
    assert_true(info_field(info, "acquires") == 2);
    assert_true(class_field(info, "lane", "e", "batch", "acquires") == 1);
    assert_true(class_field(info, "lane", "e", "interactive", "acquires") == 1);
    assert_true(class_field(info, "tenant", "e", "default", "grants") == 1);
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_counters_by_lane_and_tenant, test_teardown),
        cmocka_unit_test_teardown(test_ceiling_sheds, test_teardown),
        cmocka_unit_test_teardown(test_batch_deferred_behind_interactive, test_teardown),
        cmocka_unit_test_teardown(test_lane_errors, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
