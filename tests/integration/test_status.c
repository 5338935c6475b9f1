/* test_status: `sluice status` and `sluice top` against a live fleet.
 *
 * Starts a private redis-server and a sluiced (sluiced_fixture) with two
 * deployments, makes some grants through sluiced's socket (ACQUIRE /
 * SETTLE, as any worker does), then runs the built `sluice status` and
 * `sluice top` and checks what they print: from Redis with the config
 * (--config), and from sluiced (--socket); a third deployment has lanes
 * and tenants, shown as tables of their own and as flat JSON fields; a
 * group of d and e shows its members side by side, with e out of quota.
 * Skipped when sluiced is not built. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "redis_fixture.h"
#include "sluiced_fixture.h"

static redis_fixture redis;
static sluiced_fixture agent;
static int up;
static char sluice_bin[4096];

/* What one run of the CLI printed. */
typedef struct output {
    int code;
    char out[65536];
    char err[8192];
} output;

static output o;

static int world_down(void **state);

static int world_up(void **state) {
    (void)state;
    const char *dir = getenv("SLUICE_BUILD_DIR");
    snprintf(sluice_bin, sizeof(sluice_bin), "%s/sluice", dir ? dir : ".");
    if (access(sluice_bin, X_OK) != 0 || !sluiced_fixture_binary()) {
        fprintf(stderr, "test_status: SKIPPED: sluice or sluiced is not built\n");
        return 0;
    }
    if (redis_fixture_start(&redis, 0) != 0) return -1;
    up = 1; /* from here on, world_down cleans up, also after a failure */
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "redis: {url: \"unix://%s\"}\n"
             "agent: {socket: \"%%SOCK%%\", heartbeat_ms: 200}\n"
             "deployments:\n"
             "  d:\n"
             "    rpm: 600\n"
             "    burst: {requests: 10}\n"
             "    tags: [eu]\n"
             "  e:\n"
             "    rpm: 60\n"
             "    tpm: 100000\n"
             "    rpd: 1000000\n"
             "  l:\n"
             "    rpm: 600\n"
             "    tenant_idle_ms: 3600000\n" /* a and b stay active through the tests */
             "    lanes: {interactive: {priority: 0, headroom: 0.25}, batch: {priority: 1}}\n"
             "    tenants: {a: {weight: 3}, b: {weight: 1, ceiling_rpm: 120, daily_tokens: 5000}}\n"
             "    price: {input: 1, output: 2, currency: USD}\n"
             "groups:\n"
             "  g: {members: [e, d]}\n"
             "budgets:\n"
             "  bteam: {tenant: b, deployment: l, currency: USD, daily: 50}\n",
             redis.sock);
    if (sluiced_fixture_start(&agent, yaml) != 0) return world_down(state), -1;
    /* Some traffic on d: grants, settled ok. */
    redisContext *c = redisConnectUnix(agent.sock);
    if (!c || c->err) {
        if (c) redisFree(c);
        return world_down(state), -1;
    }
    /* On Redis first: a grant made before the engine connected is local,
     * and Redis' granted_total would not count it (a loaded machine). */
    int on_redis = 0;
    for (int i = 0; i < 1000 && !on_redis; i++) {
        redisReply *r = redisCommand(c, "INFO");
        on_redis = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "redis_connected:1");
        if (r) freeReplyObject(r);
        if (!on_redis) usleep(10000);
    }
    if (!on_redis) {
        redisFree(c);
        return world_down(state), -1;
    }
    for (int i = 0; i < 5; i++) {
        redisReply *r = redisCommand(c, "ACQUIRE d TOKENS 100");
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
            if (r) freeReplyObject(r);
            redisFree(c);
            return world_down(state), -1;
        }
        redisReply *s = redisCommand(c, "SETTLE %s TOKENS 50 STATUS ok", r->element[0]->str);
        freeReplyObject(r);
        if (s) freeReplyObject(s);
    }
    /* On l: two batch grants for tenant a, one interactive for b. */
    const char *lcmds[] = {"ACQUIRE l TOKENS 10 LANE batch TENANT a", "ACQUIRE l TOKENS 10 LANE batch TENANT a",
                           "ACQUIRE l TOKENS 30 TENANT b"};
    for (size_t i = 0; i < sizeof(lcmds) / sizeof(lcmds[0]); i++) {
        redisReply *r = redisCommand(c, lcmds[i]);
        int ok = r && r->type == REDIS_REPLY_ARRAY;
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return world_down(state), -1;
        }
    }
    redisFree(c);
    return 0;
}

static int world_down(void **state) {
    (void)state;
    if (!up) return 0;
    sluiced_fixture_stop(&agent, 0);
    redis_fixture_stop(&redis);
    up = 0;
    return 0;
}

/* Runs `sluice ARGS...` (NULL-terminated) into o. */
static void cli(const char *first, ...) {
    const char *argv[32];
    int n = 0, po[2], pe[2];
    argv[n++] = sluice_bin;
    argv[n++] = first;
    va_list ap;
    va_start(ap, first);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && n < 31;) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    assert_int_equal(pipe2(po, O_CLOEXEC), 0);
    assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    memset(&o, 0, sizeof(o));
    size_t lo = 0, le = 0;
    struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        assert_true(poll(p, 2, 30000) > 0);
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
            char *buf = i == 0 ? o.out + lo : o.err + le;
            size_t room = i == 0 ? sizeof(o.out) - 1 - lo : sizeof(o.err) - 1 - le;
            char sink[4096];
            ssize_t r = read(p[i].fd, room ? buf : sink, room ? room : sizeof(sink));
            if (r <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            } else if (room) {
                if (i == 0) lo += (size_t)r;
                else le += (size_t)r;
            }
        }
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    o.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const json_t *first_deployment(json_t *doc) {
    const json_t *arr = json_object_get(doc, "deployments");
    assert_true(json_is_array(arr));
    assert_true(json_array_size(arr) >= 1);
    return json_array_get(arr, 0);
}

static long long jint(const json_t *o_, const char *k) {
    const json_t *v = json_object_get(o_, k);
    if (!json_is_integer(v)) fail_msg("field %s is not an integer", k);
    return (long long)json_integer_value(v);
}

/* From Redis, with the config. */
static void test_status_json(void **state) {
    (void)state;
    if (!up) skip();
    cli("status", "--config", agent.config, "--json", "d", NULL);
    if (o.code != 0) fprintf(stderr, "stderr: %s\n", o.err);
    assert_int_equal(o.code, 0);
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "source")), "redis");
    const json_t *d = first_deployment(doc);
    assert_string_equal(json_string_value(json_object_get(d, "deployment")), "d");
    assert_int_equal(jint(d, "rpm"), 600);
    assert_int_equal(jint(d, "burst_requests"), 10);
    assert_true(jint(d, "granted_total") >= 5);
    assert_true(jint(d, "settled_ok") >= 5);
    assert_true(jint(d, "live_agents") >= 1);
    assert_true(jint(d, "retry_balance") > 0);
    assert_true(json_is_number(json_object_get(d, "effective_rpm")));
    json_decref(doc);
}

/* From sluiced's STATUS: the agent's view too. */
static void test_status_socket(void **state) {
    (void)state;
    if (!up) skip();
    cli("status", "--socket", agent.sock, "--json", NULL);
    assert_int_equal(o.code, 0);
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "source")), "sluiced");
    /* Without names or a config: every deployment sluiced has, in order. */
    const json_t *arr = json_object_get(doc, "deployments");
    assert_int_equal(json_array_size(arr), 3);
    const json_t *d = json_array_get(arr, 0);
    assert_string_equal(json_string_value(json_object_get(d, "mode")), "redis");
    assert_true(jint(d, "granted_total") >= 5);
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 1), "deployment")), "e");
    json_decref(doc);
}

/* The readable table: a header and one row per deployment of the config. */
static void test_status_table(void **state) {
    (void)state;
    if (!up) skip();
    cli("status", "--config", agent.config, NULL);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "DEPLOYMENT"));
    assert_non_null(strstr(o.out, "\nd "));
    assert_non_null(strstr(o.out, "\ne "));
    assert_non_null(strstr(o.out, "100000")); /* e's tpm */
    /* Deployments without lanes or tenants: no tables for them. */
    cli("status", "--config", agent.config, "d", "e", NULL);
    assert_int_equal(o.code, 0);
    assert_null(strstr(o.out, "LANE"));
    assert_null(strstr(o.out, "TENANT"));
    /* TODAY.REQ: a number where rpd or tpd counts the day (e), "-" where
     * nothing counts it (d), never a 0 that reads as nothing sent. */
    const char *head = strstr(o.out, "DEPLOYMENT");
    assert_non_null(head);
    int col = -1, k = 0;
    char word[64];
    for (const char *p = head; *p && *p != '\n' && col < 0; k++) {
        int n = 0;
        while (*p == ' ') p++;
        while (*p && *p != ' ' && *p != '\n' && n < 63) word[n++] = *p++;
        word[n] = '\0';
        if (!strcmp(word, "TODAY.REQ")) col = k;
    }
    assert_true(col > 0);
    for (int r = 0; r < 2; r++) {
        const char *row = strstr(o.out, r ? "\ne " : "\nd ");
        assert_non_null(row);
        row++;
        for (int i = 0; i <= col; i++) {
            int n = 0;
            while (*row == ' ') row++;
            while (*row && *row != ' ' && *row != '\n' && n < 63) word[n++] = *row++;
            word[n] = '\0';
        }
        if (r == 0) assert_string_equal(word, "-");
        else assert_true(word[0] >= '0' && word[0] <= '9');
    }
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

/* top: N frames, then exit; rates from the counters' deltas. */
static void test_top_frames(void **state) {
    (void)state;
    if (!up) skip();
    cli("top", "--config", agent.config, "--iterations", "2", "--interval-ms", "200", "d", "e", NULL);
    assert_int_equal(o.code, 0);
    assert_int_equal(count(o.out, "sluice top "), 2);
    assert_int_equal(count(o.out, "GRANTS/S"), 2);
    /* Not a terminal: no escape sequences. */
    assert_null(strchr(o.out, '\033'));

    cli("top", "--socket", agent.sock, "--json", "-n", "2", "--interval-ms", "200", "d", NULL);
    assert_int_equal(o.code, 0);
    assert_int_equal(count(o.out, "\n"), 2);
    char *nl = strchr(o.out, '\n');
    *nl = '\0';
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    const json_t *rates = json_object_get(first_deployment(doc), "rates");
    assert_true(json_is_object(rates));
    assert_true(json_is_number(json_object_get(rates, "grants_per_s")));
    assert_true(json_number_value(json_object_get(rates, "quota_per_s")) > 9.99);
    json_decref(doc);
}

/* An unknown deployment is a clear error, exit 1; the others still print. */
static void test_unknown_deployment(void **state) {
    (void)state;
    if (!up) skip();
    cli("status", "--config", agent.config, "nope", NULL);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "unknown deployment 'nope'"));
    cli("status", "--config", agent.config, "--json", "d", "nope", NULL);
    assert_int_equal(o.code, 1);
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "deployments")), 1);
    json_decref(doc);
    cli("status", "--socket", agent.sock, "nope", NULL);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "unknown deployment 'nope'"));
    /* Only unknown names asked for: the error alone, not the budgets. */
    assert_string_equal(o.out, "");
    cli("status", "--socket", agent.sock, NULL);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "bteam"));
    /* Usage errors: 2; no sluiced on the socket: 1. */
    cli("status", "--bogus", NULL);
    assert_int_equal(o.code, 2);
    cli("status", "--socket", "/nonexistent/agent.sock", NULL);
    assert_int_equal(o.code, 1);
}

/* A production file whose HTTP proxy injects a provider key and has client
 * keys: status and top never serve the proxy, so they read neither (the
 * operator's shell holds no provider key, the key files are the agent's). */
static void assert_row(const char *out, const char *words);

static void test_status_without_proxy_secrets(void **state) {
    (void)state;
    if (!up) skip();
    char path[4200];
    snprintf(path, sizeof(path), "%s.secrets.yaml", agent.config);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "redis: {url: \"unix://%s\"}\n"
            "agent:\n"
            "  http:\n"
            "    listen: 127.0.0.1:1\n"
            "    clients:\n"
            "      chat: {key_file: /nonexistent/sluice-test/chat.key, tenant: chat}\n"
            "      batch: {key_env: SLUICE_TEST_UNSET_CLIENT_KEY}\n"
            "deployments:\n"
            "  d: {rpm: 600, burst: {requests: 10}, tags: [eu]}\n"
            "  k: {rpm: 60, endpoint: \"http://127.0.0.1:1\", api_key_env: SLUICE_TEST_UNSET_KEY, inject_key: true}\n",
            redis.sock);
    fclose(f);
    unsetenv("SLUICE_TEST_UNSET_KEY");
    unsetenv("SLUICE_TEST_UNSET_CLIENT_KEY");
    cli("status", "--config", path, "d", NULL);
    if (o.code != 0) fail_msg("status exited %d: %s", o.code, o.err);
    assert_row(o.out, "d 600");
    cli("top", "--config", path, "-n", "1", "d", NULL);
    if (o.code != 0) fail_msg("top exited %d: %s", o.code, o.err);
    unlink(path);
}

/* Fails unless a line of out starts with the space-separated words
 * (compared whole, column by column; "*" matches any one). */
static void assert_row(const char *out, const char *words) {
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char line[512], w[512];
        snprintf(line, sizeof(line), "%.*s", (int)strcspn(p, "\n"), p);
        snprintf(w, sizeof(w), "%s", words);
        char *sl = NULL, *sw = NULL;
        char *tl = strtok_r(line, " ", &sl), *tw = strtok_r(w, " ", &sw);
        while (tl && tw && (!strcmp(tw, "*") || !strcmp(tl, tw))) {
            tl = strtok_r(NULL, " ", &sl);
            tw = strtok_r(NULL, " ", &sw);
        }
        if (!tw) return;
    }
    fail_msg("no row '%s' in:\n%s", words, out);
}

/* Lanes and tenants: their own tables, and flat fields in --json. */
static void test_status_lanes_and_tenants(void **state) {
    (void)state;
    if (!up) skip();
    cli("status", "--config", agent.config, "l", NULL);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "LANE "));
    assert_non_null(strstr(o.out, "TENANT "));
    /* lane, share, horizon (the scheduler's), granted, deferred, shed */
    assert_row(o.out, "l batch 75.0% * 2 0 0");
    assert_row(o.out, "l interactive 100.0% * 1 0 0");
    /* tenant, weight, active, share, ceil.rpm, ceil.tpm, daily.tok,
     * today.tok, granted, tokens, excess, shed */
    assert_row(o.out, "l a 3 yes 75.0% - - - 0 2 20 0 0");
    assert_row(o.out, "l b 1 yes 25.0% 120 - 5000 30 1 30 0 0");
    assert_row(o.out, "l default 1 no 0.0% - - - 0 0 0 0 0");

    cli("status", "--socket", agent.sock, "--json", "l", NULL);
    assert_int_equal(o.code, 0);
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    const json_t *l = first_deployment(doc);
    assert_int_equal(jint(l, "lane.batch.granted_total"), 2);
    assert_int_equal(jint(l, "lane.interactive.granted_total"), 1);
    assert_int_equal(jint(l, "lane.batch.horizon_ms") >= 0, 1);
    assert_true(json_is_number(json_object_get(l, "lane.batch.share")));
    assert_int_equal(jint(l, "tenant.a.granted_total"), 2);
    assert_int_equal(jint(l, "tenant.a.tokens_total"), 20);
    assert_int_equal(jint(l, "tenant.b.ceiling_rpm"), 120);
    assert_int_equal(jint(l, "tenant.b.today_tokens"), 30);
    assert_int_equal(jint(l, "tenant.default.granted_total"), 0);
    assert_int_equal(jint(l, "deferred_total"), 0);
    json_decref(doc);

    /* top: a rate column on each table. */
    cli("top", "--config", agent.config, "-n", "1", "--interval-ms", "100", "l", NULL);
    assert_int_equal(o.code, 0);
    assert_int_equal(count(o.out, "GRANTS/S"), 3);
}

/* Word k (0-based) of the first line whose first words are prefix ("*"
 * matches any one), into w; fails when there is none. */
static void row_word(const char *out, const char *prefix, int k, char *w, size_t n) {
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char line[512], pre[256];
        snprintf(line, sizeof(line), "%.*s", (int)strcspn(p, "\n"), p);
        snprintf(pre, sizeof(pre), "%s", prefix);
        char *words[32], *sl = NULL, *sp = NULL;
        int nw = 0;
        for (char *t = strtok_r(line, " ", &sl); t && nw < 32; t = strtok_r(NULL, " ", &sl)) words[nw++] = t;
        int i = 0, match = 1;
        for (char *t = strtok_r(pre, " ", &sp); t && match; t = strtok_r(NULL, " ", &sp), i++)
            match = i < nw && (!strcmp(t, "*") || !strcmp(t, words[i]));
        if (match && k < nw) {
            snprintf(w, n, "%s", words[k]);
            return;
        }
    }
    fail_msg("no row '%s' with a word %d in:\n%s", prefix, k, out);
}

/* A group: one row per member, in priority order, with the breaker and
 * the quota out; from Redis (the config says the members) and from
 * sluiced alone (its INFO groups says them). */
static void test_status_group(void **state) {
    (void)state;
    if (!up) skip();
    /* e's provider said insufficient_quota, reset in 30 s. */
    redisContext *c = redisConnectUnix(agent.sock);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "ACQUIRE g TOKENS 1");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 5);
    char id[96];
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    assert_string_equal(r->element[3]->str, "e");
    freeReplyObject(r);
    r = redisCommand(c, "SETTLE %s STATUS quota HEADER retry-after 30", id);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
    char w[64] = "-";
    for (int i = 0; i < 100 && !strcmp(w, "-"); i++) {
        cli("status", "--config", agent.config, "g", NULL);
        assert_int_equal(o.code, 0);
        row_word(o.out, "g e 0 -", 7, w, sizeof(w)); /* QUOTA.OUT */
        if (!strcmp(w, "-")) usleep(20000);
    }
    print_message("%s", o.out);
    assert_non_null(strstr(o.out, "GROUP "));
    assert_non_null(strstr(o.out, "BREAKER"));
    /* group, member, #, tags, eff.rpm, backlog, breaker, quota.out */
    assert_row(o.out, "g e 0 - 60 * closed");
    assert_true(w[strlen(w) - 1] == 's' && atof(w) > 25 && atof(w) <= 30);
    assert_row(o.out, "d 1 eu 600 * closed -");
    /* Named as a group only: no deployments table. */
    assert_null(strstr(o.out, "DEPLOYMENT"));

    /* A deployment's own row has the breaker and the quota out too. */
    cli("status", "--config", agent.config, "e", NULL);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "QUOTA.OUT"));
    row_word(o.out, "e 60", 14, w, sizeof(w));
    assert_true(w[strlen(w) - 1] == 's');
    row_word(o.out, "e 60", 13, w, sizeof(w));
    assert_string_equal(w, "closed");

    /* From sluiced alone: the members from its INFO groups. */
    cli("status", "--socket", agent.sock, "g", NULL);
    assert_int_equal(o.code, 0);
    assert_row(o.out, "g e 0 - 60 * closed");
    assert_row(o.out, "d 1 - 600 * closed -");
    cli("status", "--socket", agent.sock, "--json", "g", NULL);
    assert_int_equal(o.code, 0);
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    const json_t *g = json_array_get(json_object_get(doc, "groups"), 0);
    assert_string_equal(json_string_value(json_object_get(g, "group")), "g");
    assert_int_equal(json_array_size(json_object_get(g, "members")), 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(g, "members"), 0)), "e");
    const json_t *e = first_deployment(doc);
    assert_string_equal(json_string_value(json_object_get(e, "deployment")), "e");
    assert_true(jint(e, "quota_out_ms") > 0);
    assert_string_equal(json_string_value(json_object_get(e, "breaker_state")), "closed");
    json_decref(doc);

    /* By default every group of the config follows the deployments. */
    cli("status", "--config", agent.config, NULL);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "DEPLOYMENT"));
    assert_row(o.out, "g e 0 -");
    /* top: the group's table has its rate column. */
    cli("top", "--config", agent.config, "-n", "1", "--interval-ms", "100", "g", NULL);
    assert_int_equal(o.code, 0);
    assert_int_equal(count(o.out, "GRANTS/S"), 1);
    /* An unknown name is neither. */
    cli("status", "--config", agent.config, "nope", NULL);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "not a deployment or group of the config"));
}

/* An agent cut off from Redis (its promise passed 1.5 s ago, within the
 * hold of 20 heartbeats) is silent: the fleet holds its share and counts
 * it live (silent_agents, silent_share, the heartbeat's live count). The
 * AGENTS column, live_agents, must count it too (cli.md: "agents whose
 * heartbeat has not expired"); it counted only promises of the last 3
 * heartbeats, so it read 1 agent beside silent_share 0.5. */
static void test_live_agents_counts_silent(void **state) {
    (void)state;
    if (!up) skip();
    redisContext *a = redisConnectUnix(agent.sock), *r = redisConnectUnix(redis.sock);
    assert_true(a && !a->err && r && !r->err);
    redisReply *x = redisCommand(a, "ACQUIRE d"); /* this agent joins d's agents */
    assert_true(x && x->type == REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    x = redisCommand(r, "TIME");
    assert_true(x && x->type == REDIS_REPLY_ARRAY && x->elements == 2);
    long long now_ms = atoll(x->element[0]->str) * 1000 + atoll(x->element[1]->str) / 1000;
    freeReplyObject(x);
    x = redisCommand(r, "ZADD sluice:{d}:agents %lld ghost", now_ms - 1500);
    freeReplyObject(x);
    cli("status", "--config", agent.config, "--json", "d", NULL);
    assert_int_equal(o.code, 0);
    json_t *doc = json_loads(o.out, 0, NULL);
    assert_non_null(doc);
    const json_t *d = first_deployment(doc);
    print_message("  silent_agents %lld, live_agents %lld\n", jint(d, "silent_agents"), jint(d, "live_agents"));
    assert_int_equal(jint(d, "silent_agents"), 1);
    assert_int_equal(jint(d, "live_agents"), 2);
    json_decref(doc);
    x = redisCommand(a, "STATUS d"); /* the agent's STATUS: the same */
    assert_true(x && x->type == REDIS_REPLY_ARRAY);
    long long live = -1;
    for (size_t i = 0; i + 1 < x->elements; i += 2)
        if (!strcmp(x->element[i]->str, "live_agents")) live = atoll(x->element[i + 1]->str);
    freeReplyObject(x);
    assert_int_equal(live, 2);
    x = redisCommand(r, "ZREM sluice:{d}:agents ghost");
    freeReplyObject(x);
    redisFree(a);
    redisFree(r);
}

/* Times of a minute or more print as minutes and seconds, rounded once:
 * a deployment out for an hour (a quota settle without headers) showed
 * QUOTA.OUT "59m60s" for its first half second, and every such time
 * whose seconds rounded up read ":60". */
static void test_minutes_round_once(void **state) {
    (void)state;
    if (!up) skip();
    redisContext *r = redisConnectUnix(redis.sock);
    assert_true(r && !r->err);
    redisReply *x = redisCommand(r, "TIME");
    assert_true(x && x->type == REDIS_REPLY_ARRAY && x->elements == 2);
    long long now_ms = atoll(x->element[0]->str) * 1000 + atoll(x->element[1]->str) / 1000;
    freeReplyObject(x);
    /* 59 min 59.8 s left: 59m60s before, 60m00s now. */
    x = redisCommand(r, "HSET sluice:{l}:state quota_until %lld", now_ms + 3599800);
    freeReplyObject(x);
    cli("status", "--config", agent.config, "l", NULL);
    x = redisCommand(r, "HDEL sluice:{l}:state quota_until");
    freeReplyObject(x);
    redisFree(r);
    assert_int_equal(o.code, 0);
    print_message("%s", o.out);
    if (strstr(o.out, "m60s")) fail_msg("a time printed with 60 seconds:\n%s", o.out);
    assert_non_null(strstr(o.out, "60m00s"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_json),        cmocka_unit_test(test_status_socket),
        cmocka_unit_test(test_status_table),       cmocka_unit_test(test_top_frames),
        cmocka_unit_test(test_unknown_deployment), cmocka_unit_test(test_status_lanes_and_tenants),
        cmocka_unit_test(test_status_group),       cmocka_unit_test(test_live_agents_counts_silent),
        cmocka_unit_test(test_minutes_round_once), cmocka_unit_test(test_status_without_proxy_secrets),
    };
    return cmocka_run_group_tests(tests, world_up, world_down);
}
