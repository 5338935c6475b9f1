/* test_daemon_estimate: ESTIMATE and patience as sluiced's callers see
 * them, against a private redis-server. Proves, over the socket:
 *   - ESTIMATE on an idle deployment says 0, from Redis;
 *   - after a burst that fills the schedule, its wait matches the wait the
 *     next ACQUIRE actually gets (within ESTIMATE_TOL_MS, once the time
 *     between the two is taken off), and 50 ESTIMATEs change nothing in
 *     Redis (DUMP of the deployment's keys before and after, the agents
 *     set aside: heartbeats write it) and the next ACQUIRE gets the very
 *     grant id and slot it would have had without them;
 *   - a group's ESTIMATE names the member that would serve it (the primary
 *     is full: its spill member), and lanes and tenants are accepted;
 *   - bad arguments get clear errors and the daemon keeps serving;
 *   - patience: 2 granted and 3 shed ACQUIREs count exactly 5 answered, 2
 *     within, in STATUS, INFO and the metrics; a lane and tenant's too;
 *   - with Redis gone, ESTIMATE answers from the local pacing and says so. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* The slack between ESTIMATE's wait and the wait the next ACQUIRE gets,
 * after the time between the two commands is taken off: the release
 * timer's and the loop's granularity (a few ms) on a loaded host. */
#define ESTIMATE_TOL_MS 40

static redis_fixture fx;
static daemon_proc dmn;
static int metrics_port;

/* full: 1 request/s, burst 3: after 3 grants the next slot is ~1 s away.
 * spare: plenty. g: full first, spare second, spill 100 ms.
 * pat: burst 2 at 1 request/s, for the patience counts.
 * lt: lanes and tenants. */
static const char *const deployments = "  full: { rpm: 60, burst: { requests: 3 }, max_wait_ms: 10000 }\n"
                                       "  spare: { rpm: 60000 }\n"
                                       "  pat: { rpm: 60, burst: { requests: 2 } }\n"
                                       "  lt:\n"
                                       "    rpm: 60\n"
                                       "    burst: { requests: 2 }\n"
                                       "    lanes: { hi: { priority: 0 }, lo: { priority: 1 } }\n"
                                       "    tenants: { acme: { weight: 2 } }\n"
                                       "groups:\n"
                                       "  g: { members: [full, spare], spill_ms: 100 }\n";

static int setup(void **state) {
    if (!sluiced_path() || redis_fixture_start(&fx, 0) != 0) return -1;
    metrics_port = free_tcp_port();
    char extra[128];
    snprintf(extra, sizeof(extra), "  metrics: 127.0.0.1:%d\n", metrics_port);
    daemon_init(&dmn, fx.dir, "estimate");
    if (daemon_configure(&dmn, &fx, extra, deployments) != 0 || daemon_start(&dmn) != 0) return -1;
    return daemon_wait_redis(&dmn, 10000) ? 0 : -1;
}

static int teardown(void **state) {
    if (dmn.pid > 0) daemon_stop(&dmn);
    harness_kill_all();
    redis_fixture_stop(&fx);
    return 0;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    return r;
}

/* An ESTIMATE grant reply: [wait, tokens, deployment, source]. */
static long long est_wait(redisReply *r, const char *dep, const char *source) {
    if (r->type != REDIS_REPLY_ARRAY) fail_msg("ESTIMATE: %s", r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
    assert_string_equal(r->element[2]->str, dep);
    assert_string_equal(r->element[3]->str, source);
    return r->element[0]->integer;
}

static void assert_error(redisReply *r, const char *needle) {
    if (r->type != REDIS_REPLY_ERROR || !strstr(r->str, needle))
        fail_msg("expected an error with \"%s\", got type %d %s", needle, r->type, r->str ? r->str : "");
}

static void test_idle_is_zero(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    redisReply *r = cmd(c, "ESTIMATE full");
    assert_int_equal(est_wait(r, "full", "redis"), 0);
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE full TOKENS 100");
    assert_int_equal(est_wait(r, "full", "redis"), 0);
    assert_int_equal(r->element[1]->integer, 100);
    freeReplyObject(r);
    redisFree(c);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* DUMPs of the deployment's keys (not its agents set), concatenated; the
 * limits hash as its sorted field=value pairs, since the daemon's
 * configure may rewrite it with the same contents in another order. */
static size_t dump_keys(redisContext *rc, const char *dep, char *out, size_t cap) {
    static const char *const suffix[] = {"state", "grants", "leases",     "refq:requests", "refq:tokens",
                                         "daily", "retry",  "refq:input", "refq:output"};
    size_t n = 0;
    redisReply *h = cmd(rc, "HGETALL sluice:{%s}:limits", dep);
    assert_int_equal(h->type, REDIS_REPLY_ARRAY);
    char **pairs = calloc(h->elements / 2 + 1, sizeof(*pairs));
    assert_non_null(pairs);
    for (size_t i = 0; i + 1 < h->elements; i += 2)
        assert_true(asprintf(&pairs[i / 2], "%s=%s", h->element[i]->str, h->element[i + 1]->str) > 0);
    qsort(pairs, h->elements / 2, sizeof(*pairs), cmp_str);
    n += (size_t)snprintf(out + n, cap - n, "limits=");
    for (size_t i = 0; i < h->elements / 2; i++) {
        n += (size_t)snprintf(out + n, cap - n, "%s;", pairs[i]);
        free(pairs[i]);
    }
    free(pairs);
    freeReplyObject(h);
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        redisReply *r = cmd(rc, "DUMP sluice:{%s}:%s", dep, suffix[i]);
        n += (size_t)snprintf(out + n, cap - n, "%s=", suffix[i]);
        if (r->type == REDIS_REPLY_STRING && n + r->len < cap) {
            memcpy(out + n, r->str, r->len);
            n += r->len;
        }
        freeReplyObject(r);
    }
    return n;
}

static void test_matches_next_acquire_and_writes_nothing(void **state) {
    redisContext *c = daemon_connect(&dmn), *rc = redis_fixture_connect(&fx);
    assert_non_null(c);
    assert_non_null(rc);
    /* The burst: 3 grants at once (the test before asked only ESTIMATE). */
    /* (Grant ids follow Redis' clock: increasing, not consecutive.) */
    long long last_id = 0;
    for (int i = 1; i <= 3; i++) {
        redisReply *r = cmd(c, "ACQUIRE full");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(strncmp(r->element[0]->str, "full:", 5), 0);
        long long id = atoll(r->element[0]->str + 5);
        assert_true(id > last_id);
        last_id = id;
        freeReplyObject(r);
    }
    static char before[1 << 16], after[1 << 16];
    size_t nb = dump_keys(rc, "full", before, sizeof(before));
    long long first = -1;
    for (int i = 0; i < 50; i++) {
        redisReply *r = cmd(c, "ESTIMATE full");
        long long w = est_wait(r, "full", "redis");
        if (first < 0) first = w;
        assert_true(w > 500 && w <= 1000 + 20); /* the next slot is about a second after the burst */
        assert_true(w <= first);                /* time passes; nothing was taken */
        freeReplyObject(r);
    }
    size_t na = dump_keys(rc, "full", after, sizeof(after));
    assert_int_equal(na, nb);
    assert_memory_equal(before, after, nb);
    /* The estimate just before the ACQUIRE, and what the ACQUIRE gets. */
    double t0 = now_ms();
    redisReply *r = cmd(c, "ESTIMATE full");
    long long est = est_wait(r, "full", "redis");
    freeReplyObject(r);
    double t1 = now_ms();
    r = cmd(c, "ACQUIRE full");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    /* (The ESTIMATEs wrote nothing: the keys above.) */
    assert_int_equal(strncmp(r->element[0]->str, "full:", 5), 0);
    assert_true(atoll(r->element[0]->str + 5) > last_id);
    long long waited = r->element[1]->integer;
    freeReplyObject(r);
    double between = t1 - t0;
    printf("ESTIMATE %lld ms; the next ACQUIRE %.1f ms later waited %lld ms (sum %.1f)\n", est, between, waited,
           waited + between);
    assert_true(fabs((double)waited + between - (double)est) <= ESTIMATE_TOL_MS);
    redisFree(rc);
    redisFree(c);
}

static void test_group_lanes_tenants(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    /* full's next slot is beyond spill_ms: the group would spill to spare. */
    redisReply *r = cmd(c, "ESTIMATE g");
    assert_int_equal(est_wait(r, "spare", "redis"), 0);
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE g MAXWAIT 0");
    assert_int_equal(est_wait(r, "spare", "redis"), 0);
    freeReplyObject(r);
    /* A group that only its full member may serve, within 100 ms: shed. */
    r = cmd(c, "ESTIMATE full MAXWAIT 100");
    assert_error(r, "SHED rpm retry-after-ms=");
    assert_non_null(strstr(r->str, "source=redis"));
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE lt LANE lo TENANT acme");
    assert_int_equal(est_wait(r, "lt", "redis"), 0);
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE lt LANE hi TENANT nobody INPUT 10 OUTPUT 5");
    assert_int_equal(est_wait(r, "lt", "redis"), 0);
    assert_int_equal(r->element[1]->integer, 15);
    freeReplyObject(r);
    redisFree(c);
}

static void test_bad_arguments(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    redisReply *r = cmd(c, "ESTIMATE nope");
    assert_error(r, "unknown deployment or group 'nope'");
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE full TOKENS x");
    assert_error(r, "TOKENS must be a non-negative integer");
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE full INPUT 5");
    assert_error(r, "syntax error");
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE full INPUT 5 OUTPUT 1 TOKENS 9");
    assert_error(r, "TOKENS must be INPUT + OUTPUT");
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE lt LANE zz");
    assert_error(r, "unknown lane 'zz' for deployment 'lt' (its lanes: hi, lo)");
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE full BOGUS 1");
    assert_error(r, "unknown option 'BOGUS'");
    freeReplyObject(r);
    r = cmd(c, "ESTIMATE");
    assert_error(r, "wrong number of arguments for 'estimate'");
    freeReplyObject(r);
    r = cmd(c, "PING");
    assert_string_equal(r->str, "PONG");
    freeReplyObject(r);
    redisFree(c);
}

/* The INFO line of the patience class (dep, lane, tenant), "" if none. */
static void patience_line(const char *info, const char *dep, const char *lane, const char *tenant, char *out,
                          size_t n) {
    char want[200];
    snprintf(want, sizeof(want), ":deployment=%s,lane=%s,tenant=%s,", dep, lane, tenant);
    out[0] = '\0';
    for (const char *p = info; p && *p;) {
        const char *eol = strchr(p, '\r');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (!strncmp(p, "patience", 8) && colon && !strncmp(colon, want, strlen(want))) {
            snprintf(out, n, "%.*s", (int)len, p);
            return;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
}

static void assert_contains(const char *hay, const char *needle) {
    if (!hay || !strstr(hay, needle)) fail_msg("expected to find \"%s\" in:\n%s", needle, hay ? hay : "(null)");
}

static void test_patience_counts(void **state) {
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    double answered0 = info_num(&dmn, "requests_answered"), within0 = info_num(&dmn, "requests_within_deadline");
    /* pat's burst is 2: 2 grants at once (the second 10 ms later: the
     * jitter margin), then 3 sheds (the next slot is a second away). */
    int granted = 0, shed = 0;
    for (int i = 0; i < 5; i++) {
        redisReply *r = cmd(c, "ACQUIRE pat MAXWAIT 100");
        if (r->type == REDIS_REPLY_ARRAY) granted++;
        else if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "SHED", 4)) shed++;
        freeReplyObject(r);
    }
    assert_int_equal(granted, 2);
    assert_int_equal(shed, 3);
    /* lt, lane lo, tenant acme: 2 grants (its burst), 1 shed. */
    for (int i = 0; i < 3; i++) freeReplyObject(cmd(c, "ACQUIRE lt MAXWAIT 100 LANE lo TENANT acme"));
    char v[64];
    daemon_status_field(&dmn, "pat", "agent_requests_answered", v, sizeof(v));
    assert_string_equal(v, "5");
    daemon_status_field(&dmn, "pat", "agent_requests_within_deadline", v, sizeof(v));
    assert_string_equal(v, "2");
    daemon_status_field(&dmn, "pat", "agent_patience", v, sizeof(v));
    assert_string_equal(v, "0.4000");
    daemon_status_field(&dmn, "lt", "tenant.acme.agent_requests_answered", v, sizeof(v));
    assert_string_equal(v, "3");
    daemon_status_field(&dmn, "lt", "lane.lo.agent_requests_within_deadline", v, sizeof(v));
    assert_string_equal(v, "2");
    daemon_status_field(&dmn, "lt", "lane.hi.agent_patience", v, sizeof(v));
    assert_string_equal(v, ""); /* nothing answered on that lane */

    char *info = daemon_info(&dmn);
    assert_non_null(info);
    /* Every ACQUIRE answered so far: the 4 on full before, and these 8. */
    assert_true(info_field(info, "requests_answered") == answered0 + 8);
    assert_true(info_field(info, "requests_within_deadline") == within0 + 4);
    char line[512];
    patience_line(info, "pat", "", "default", line, sizeof(line));
    assert_contains(line, "requests_answered=5,requests_within_deadline=2,patience=0.4000");
    patience_line(info, "lt", "lo", "acme", line, sizeof(line));
    assert_contains(line, "requests_answered=3,requests_within_deadline=2,patience=0.6667");
    assert_contains(info, ",tenant=acme,acquires=3,grants=2,sheds=1,");
    assert_contains(info, "requests_answered=3,requests_within_deadline=2,patience=0.6667");
    free(info);

    static char body[1 << 18];
    assert_true(http_get(metrics_port, "GET /metrics HTTP/1.0\r\n\r\n", body, sizeof(body)) > 0);
    assert_true(metric(body, "sluice_requests_answered_total{deployment=\"pat\",lane=\"\",tenant=\"default\"}") == 5);
    assert_true(
        metric(body, "sluice_requests_within_deadline_total{deployment=\"pat\",lane=\"\",tenant=\"default\"}") == 2);
    assert_true(fabs(metric(body, "sluice_patience_ratio{deployment=\"pat\",lane=\"\",tenant=\"default\"}") - 0.4) <
                1e-9);
    assert_true(metric(body, "sluice_requests_answered_total{deployment=\"lt\",lane=\"lo\",tenant=\"acme\"}") == 3);
    assert_true(metric(body, "sluice_estimates_total{source=\"redis\"}") > 50);
    redisFree(c);
}

/* Last: Redis goes away for good. */
static void test_local_without_redis(void **state) {
    redis_fixture_kill(&fx, 1);
    redisContext *c = daemon_connect(&dmn);
    assert_non_null(c);
    /* The first answer may still come from a call that found the
     * connection gone (then locally too); poll until the agent knows. */
    double until = now_ms() + 10000;
    long long w = -1;
    while (now_ms() < until) {
        redisReply *r = cmd(c, "ESTIMATE spare");
        if (r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[3]->str, "local")) {
            w = est_wait(r, "spare", "local");
            freeReplyObject(r);
            break;
        }
        freeReplyObject(r);
        sleep_ms(20);
    }
    /* The local pacing's own wait (it starts where the fleet's schedule
     * was last seen to end, until Redis would take this agent for silent):
     * the ACQUIRE that follows waits as long, granted locally. */
    assert_true(w >= 0);
    double t0 = now_ms();
    redisReply *r = cmd(c, "ESTIMATE spare");
    long long est = est_wait(r, "spare", "local");
    freeReplyObject(r);
    double t1 = now_ms();
    r = cmd(c, "ACQUIRE spare");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_non_null(strstr(r->element[0]->str, ":L"));
    long long waited = r->element[1]->integer;
    freeReplyObject(r);
    printf("local: ESTIMATE %lld ms; the ACQUIRE %.1f ms later waited %lld ms\n", est, t1 - t0, waited);
    assert_true(fabs((double)waited + (t1 - t0) - (double)est) <= ESTIMATE_TOL_MS);
    r = cmd(c, "ESTIMATE pat MAXWAIT 0");
    assert_error(r, "SHED");
    assert_non_null(strstr(r->str, "source=local"));
    freeReplyObject(r);
    assert_true(info_num(&dmn, "estimates_local") >= 2);
    redisFree(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_is_zero),        cmocka_unit_test(test_matches_next_acquire_and_writes_nothing),
        cmocka_unit_test(test_group_lanes_tenants), cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_patience_counts),     cmocka_unit_test(test_local_without_redis),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
