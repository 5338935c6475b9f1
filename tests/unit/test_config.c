/* Unit tests for lib/core/config: a full file, defaults, every rule's exact
 * message (file:line and key), secrets, and that the docs and the example
 * configuration stay true to the schema. Temp files live in a private
 * directory that the group teardown removes. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"

static char tmpdir[64];
static char cfgpath[128];

static int group_setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sluice-test-config-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(cfgpath, sizeof(cfgpath), "%s/sluiced.yaml", tmpdir);
    return 0;
}

static const char *const tmpfiles[] = {"sluiced.yaml", "pass.txt", "empty.pass", "two.pass", NULL};

static int group_teardown(void **state) {
    (void)state;
    char p[192];
    for (int i = 0; tmpfiles[i]; i++) {
        snprintf(p, sizeof(p), "%s/%s", tmpdir, tmpfiles[i]);
        unlink(p);
    }
    return rmdir(tmpdir);
}

static void write_file(const char *name, const char *text) {
    char p[192];
    snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* Writes yaml to the config file and loads it. */
static int load(const char *yaml, config **cfg, char *err, size_t errlen) {
    write_file("sluiced.yaml", yaml);
    return config_load(cfgpath, cfg, err, errlen);
}

static config *load_ok(const char *yaml) {
    config *cfg = NULL;
    char err[512];
    if (load(yaml, &cfg, err, sizeof(err)) != 0) fail_msg("unexpected error: %s", err);
    assert_non_null(cfg);
    return cfg;
}

static const char full_yaml[] = "# A full configuration, every key given.\n"
                                "redis:\n"
                                "  url: redis://sluice@10.0.0.5:6380/2\n"
                                "  password_file: pass.txt\n"
                                "  timeout_ms: 300\n"
                                "  connect_timeout_ms: 2000\n"
                                "agent:\n"
                                "  id: host-a\n"
                                "  socket: /tmp/sluice.sock\n"
                                "  socket_mode: \"0600\"\n"
                                "  metrics: \"[::1]:9464\"\n"
                                "  max_clients: 64\n"
                                "  max_client_buffer: 2mb\n"
                                "  client_idle_timeout_ms: 5000\n"
                                "  fail: closed\n"
                                "  fallback_share: 0.5\n"
                                "  heartbeat_ms: 500\n"
                                "  log_level: debug\n"
                                "deployments:\n"
                                "  gpt-4o:\n"
                                "    rpm: 60\n"
                                "    tpm: 150000\n"
                                "    burst: { requests: 10, tokens: 25000 }\n"
                                "    max_concurrency: 16\n"
                                "    lease_s: 90\n"
                                "    rpd: 10000\n"
                                "    tpd: 5000000\n"
                                "    max_wait_ms: 30000\n"
                                "    refund: false\n"
                                "    retry_budget: { ttl_s: 20, min_per_s: 2, percent: 12.5 }\n"
                                "    aimd: { decrease: 0.5, min_scale: 0.2, increase: 0.1, interval_s: 10 }\n"
                                "    endpoint: https://example.openai.azure.com\n"
                                "    api_key_env: AZURE_OPENAI_API_KEY\n"
                                "    style: azure\n"
                                "    api_version: 2024-06-01\n"
                                "  claude.sonnet:v1:\n"
                                "    rpm: 50\n"
                                "    style: openai\n";

static void test_full(void **state) {
    (void)state;
    write_file("pass.txt", "s3cret\n");
    config *cfg = load_ok(full_yaml);
    assert_string_equal(cfg->source, cfgpath);
    assert_string_equal(cfg->redis.url, "redis://sluice@10.0.0.5:6380/2");
    assert_string_equal(cfg->redis.host, "10.0.0.5");
    assert_int_equal(cfg->redis.port, 6380);
    assert_int_equal(cfg->redis.db, 2);
    assert_string_equal(cfg->redis.unix_path, "");
    assert_string_equal(cfg->redis.username, "sluice");
    assert_string_equal(cfg->redis.password, "s3cret");
    assert_string_equal(cfg->redis.password_file, "pass.txt");
    assert_int_equal(cfg->redis.timeout_ms, 300);
    assert_int_equal(cfg->redis.connect_timeout_ms, 2000);
    assert_string_equal(cfg->agent.id, "host-a");
    assert_string_equal(cfg->agent.socket, "/tmp/sluice.sock");
    assert_int_equal(cfg->agent.socket_mode, 0600);
    assert_string_equal(cfg->agent.metrics, "[::1]:9464");
    assert_string_equal(cfg->agent.metrics_host, "::1");
    assert_int_equal(cfg->agent.metrics_port, 9464);
    assert_int_equal(cfg->agent.max_clients, 64);
    assert_int_equal(cfg->agent.max_client_buffer, 2 << 20);
    assert_int_equal(cfg->agent.client_idle_timeout_ms, 5000);
    assert_int_equal(cfg->agent.fail, CONFIG_FAIL_CLOSED);
    assert_true(cfg->agent.fallback_share == 0.5);
    assert_int_equal(cfg->agent.heartbeat_ms, 500);
    assert_int_equal(cfg->agent.log_level, CONFIG_LOG_DEBUG);

    assert_int_equal(cfg->ndeployments, 2);
    const struct config_deployment *d = &cfg->deployments[0];
    assert_string_equal(d->name, "gpt-4o");
    assert_int_equal(d->line, 20);
    assert_int_equal(d->rpm, 60);
    assert_int_equal(d->tpm, 150000);
    assert_int_equal(d->burst.requests, 10);
    assert_int_equal(d->burst.tokens, 25000);
    assert_int_equal(d->max_concurrency, 16);
    assert_int_equal(d->lease_s, 90);
    assert_int_equal(d->rpd, 10000);
    assert_int_equal(d->tpd, 5000000);
    assert_int_equal(d->max_wait_ms, 30000);
    assert_int_equal(d->refund, 0);
    assert_int_equal(d->retry_budget.ttl_s, 20);
    assert_int_equal(d->retry_budget.min_per_s, 2);
    assert_true(d->retry_budget.percent == 12.5);
    assert_true(d->aimd.decrease == 0.5);
    assert_true(d->aimd.min_scale == 0.2);
    assert_true(d->aimd.increase == 0.1);
    assert_int_equal(d->aimd.interval_s, 10);
    assert_string_equal(d->endpoint, "https://example.openai.azure.com");
    assert_string_equal(d->api_key_env, "AZURE_OPENAI_API_KEY");
    assert_int_equal(d->style, CONFIG_STYLE_AZURE);
    assert_string_equal(d->api_version, "2024-06-01");

    d = &cfg->deployments[1];
    assert_string_equal(d->name, "claude.sonnet:v1");
    assert_int_equal(d->rpm, 50);
    assert_int_equal(d->style, CONFIG_STYLE_OPENAI);
    assert_ptr_equal(config_deployment(cfg, "claude.sonnet:v1"), d);
    assert_ptr_equal(config_deployment(cfg, "gpt-4o"), &cfg->deployments[0]);
    assert_null(config_deployment(cfg, "gpt-4"));
    assert_null(config_deployment(cfg, ""));
    config_free(cfg);
}

static void test_defaults(void **state) {
    (void)state;
    config *cfg = load_ok("deployments:\n  gpt-4o:\n    rpm: 60\n");
    assert_string_equal(cfg->redis.url, "redis://127.0.0.1:6379");
    assert_string_equal(cfg->redis.host, "127.0.0.1");
    assert_int_equal(cfg->redis.port, 6379);
    assert_int_equal(cfg->redis.db, 0);
    assert_string_equal(cfg->redis.username, "");
    assert_string_equal(cfg->redis.password, "");
    assert_string_equal(cfg->redis.password_file, "");
    assert_string_equal(cfg->redis.password_env, "");
    assert_int_equal(cfg->redis.timeout_ms, 250);
    assert_int_equal(cfg->redis.connect_timeout_ms, 1000);
    assert_true(cfg->redis.max_script_ms == 1.0);
    assert_string_equal(cfg->agent.id, "");
    assert_string_equal(cfg->agent.socket, "/run/sluice/agent.sock");
    assert_int_equal(cfg->agent.socket_mode, 0660);
    assert_string_equal(cfg->agent.metrics, "");
    assert_string_equal(cfg->agent.metrics_host, "");
    assert_int_equal(cfg->agent.metrics_port, 0);
    assert_int_equal(cfg->agent.max_clients, 1024);
    assert_int_equal(cfg->agent.max_client_buffer, 1048576);
    assert_int_equal(cfg->agent.client_idle_timeout_ms, 30000);
    assert_int_equal(cfg->agent.fail, CONFIG_FAIL_OPEN);
    assert_true(cfg->agent.fallback_share == 0.25);
    assert_int_equal(cfg->agent.heartbeat_ms, 1000);
    assert_int_equal(cfg->agent.log_level, CONFIG_LOG_INFO);
    assert_int_equal(cfg->ndeployments, 1);
    const struct config_deployment *d = config_deployment(cfg, "gpt-4o");
    assert_non_null(d);
    assert_int_equal(d->line, 2);
    assert_int_equal(d->rpm, 60);
    assert_int_equal(d->tpm, 0);
    assert_int_equal(d->burst.requests, 1);
    assert_int_equal(d->burst.tokens, 1);
    assert_int_equal(d->max_concurrency, 0);
    assert_int_equal(d->lease_s, 120);
    assert_int_equal(d->rpd, 0);
    assert_int_equal(d->tpd, 0);
    assert_int_equal(d->max_wait_ms, 60000);
    /* As Azure counts (the default style): tokens charged at admission,
     * never refunded; output tokens (other profiles) corrected. */
    assert_int_equal(d->style, CONFIG_STYLE_AZURE);
    assert_int_equal(d->refunds.tokens, 0);
    assert_int_equal(d->refunds.input_tokens, 0);
    assert_int_equal(d->refunds.output_tokens, 1);
    assert_int_equal(d->itpm, 0);
    assert_int_equal(d->otpm, 0);
    assert_int_equal(d->aimd.min_throttles, 3);
    assert_int_equal(d->aimd.window_s, 10);
    assert_int_equal(d->adapt.limits, 1);
    assert_int_equal(d->adapt.outside, 1);
    assert_int_equal(d->retry_budget.ttl_s, 10);
    assert_int_equal(d->retry_budget.min_per_s, 1);
    assert_true(d->retry_budget.percent == 10);
    assert_true(d->aimd.decrease == 0.7);
    assert_true(d->aimd.min_scale == 0.1);
    assert_true(d->aimd.increase == 0.05);
    assert_int_equal(d->aimd.interval_s, 5);
    assert_string_equal(d->endpoint, "");
    assert_string_equal(d->api_key_env, "");
    assert_int_equal(d->style, CONFIG_STYLE_AZURE);
    assert_string_equal(d->api_version, "");
    config_free(cfg);

    /* Burst defaults to one second of rate; a given burst wins per field;
     * "~" and an empty value keep the default. */
    cfg = load_ok("deployments:\n"
                  "  a: {rpm: 600, tpm: 150000}\n"
                  "  b: {rpm: 600, tpm: 150000, burst: {tokens: 7}}\n"
                  "  c: {rpm: 59, tpm: 59, lease_s: ~, refund: }\n"
                  "  d: {rpm: 1, burst: ~}\n");
    assert_int_equal(cfg->deployments[0].burst.requests, 10);
    assert_int_equal(cfg->deployments[0].burst.tokens, 2500);
    assert_int_equal(cfg->deployments[1].burst.requests, 10);
    assert_int_equal(cfg->deployments[1].burst.tokens, 7);
    assert_int_equal(cfg->deployments[2].burst.requests, 1);
    assert_int_equal(cfg->deployments[2].burst.tokens, 1);
    assert_int_equal(cfg->deployments[2].lease_s, 120);
    /* refund: ~ is no override: each dimension keeps its profile default. */
    assert_int_equal(cfg->deployments[2].refund, 0);
    assert_int_equal(cfg->deployments[2].refunds.tokens, 0);
    assert_int_equal(cfg->deployments[2].refunds.output_tokens, 1);
    config_free(cfg);
}

/* Provider profiles: the dimensions each has, their bursts, and the charge
 * rule per dimension with the refund override (docs/providers.md). */
/* redis.max_script_ms: a number of ms, fractions allowed, 0 = no bound. */
static void test_max_script_ms(void **state) {
    (void)state;
    static const struct {
        const char *v;
        double want;
    } ok[] = {{"0.5", 0.5}, {"0", 0}, {"2", 2}, {"1000", 1000}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char yaml[256];
        snprintf(yaml, sizeof(yaml), "redis:\n  max_script_ms: %s\ndeployments:\n  d: { rpm: 1 }\n", ok[i].v);
        config *cfg = load_ok(yaml);
        assert_true(cfg->redis.max_script_ms == ok[i].want);
        config_free(cfg);
    }
}

static void test_profiles(void **state) {
    config *cfg = load_ok("deployments:\n"
                          "  claude: {style: anthropic, rpm: 50, itpm: 30000, otpm: 8000}\n"
                          "  gemini: {style: custom, rpm: 60, itpm: 60000, burst: {input_tokens: 500}}\n"
                          "  off: {rpm: 600, tpm: 150000, refund: false}\n"
                          "  on: {style: custom, rpm: 600, tpm: 9000, otpm: 900,\n"
                          "       refund: true, refund.output_tokens: false}\n"
                          "  mixed: {style: custom, rpm: 600, otpm: 900, refund: {tokens: true}}\n");
    const struct config_deployment *c = config_deployment(cfg, "claude");
    assert_int_equal(c->style, CONFIG_STYLE_ANTHROPIC);
    assert_int_equal(c->itpm, 30000);
    assert_int_equal(c->otpm, 8000);
    assert_int_equal(c->tpm, 0);
    assert_int_equal(c->burst.input_tokens, 500); /* one second of itpm */
    assert_int_equal(c->burst.output_tokens, 133);
    assert_int_equal(c->refunds.input_tokens, 0);  /* charged at admission */
    assert_int_equal(c->refunds.output_tokens, 1); /* corrected to the actual output */
    c = config_deployment(cfg, "gemini");
    assert_int_equal(c->style, CONFIG_STYLE_CUSTOM);
    assert_int_equal(c->burst.input_tokens, 500);
    assert_int_equal(c->otpm, 0);
    c = config_deployment(cfg, "off");
    assert_int_equal(c->refunds.tokens, 0);
    assert_int_equal(c->refunds.output_tokens, 0);
    c = config_deployment(cfg, "on");
    assert_int_equal(c->refunds.tokens, 1);
    assert_int_equal(c->refunds.input_tokens, 1);
    assert_int_equal(c->refunds.output_tokens, 0); /* refund.<dim> wins over refund */
    c = config_deployment(cfg, "mixed");
    assert_int_equal(c->refunds.tokens, 1);
    assert_int_equal(c->refunds.output_tokens, 1);
    assert_true(c->output_burndown == 1);
    config_free(cfg);
}

/* Bedrock: tpm corrected at the end (refund.tokens on), the burndown 5 for
 * the 5x Claude models named by the deployment or an alias, else 1. */
static void test_bedrock_profile(void **state) {
    (void)state;
    config *cfg = load_ok("deployments:\n"
                          "  us.anthropic.claude-sonnet-4-20250514-v1:0: {style: bedrock, rpm: 200, tpm: 200000}\n"
                          "  opus: {style: bedrock, rpm: 50, tpm: 50000, aliases: [anthropic.claude-opus-4-1-v1:0]}\n"
                          "  titan: {style: bedrock, rpm: 50, tpm: 50000}\n"
                          "  set: {style: bedrock, rpm: 50, tpm: 50000, output_burndown: 2.5, refund: false}\n"
                          "  mine: {style: custom, rpm: 50, tpm: 50000, output_burndown: 3}\n");
    const struct config_deployment *c = config_deployment(cfg, "us.anthropic.claude-sonnet-4-20250514-v1:0");
    assert_int_equal(c->style, CONFIG_STYLE_BEDROCK);
    assert_string_equal(config_style_name(c->style), "bedrock");
    assert_true(c->output_burndown == 5);
    assert_int_equal(c->refunds.tokens, 1);
    assert_int_equal(c->horizon_ms, 250); /* corrected at the end: just in time */
    assert_true(config_deployment(cfg, "opus")->output_burndown == 5);
    assert_true(config_deployment(cfg, "titan")->output_burndown == 1);
    c = config_deployment(cfg, "set");
    assert_true(c->output_burndown == 2.5);
    assert_int_equal(c->refunds.tokens, 0);
    c = config_deployment(cfg, "mine");
    assert_true(c->output_burndown == 3);
    assert_int_equal(c->refunds.tokens, 0);
    assert_string_equal(c->daily_reset, "");
    config_free(cfg);
    /* Gemini: input tokens only, its day at midnight Pacific time. */
    cfg = load_ok("deployments:\n"
                  "  flash: {style: gemini, rpm: 1000, itpm: 1000000, rpd: 10000}\n"
                  "  utc: {style: gemini, rpm: 10, daily_reset: UTC}\n");
    c = config_deployment(cfg, "flash");
    assert_int_equal(c->style, CONFIG_STYLE_GEMINI);
    assert_string_equal(c->daily_reset, "America/Los_Angeles");
    assert_int_equal(c->refunds.input_tokens, 0);
    assert_string_equal(config_deployment(cfg, "utc")->daily_reset, "UTC");
    config_free(cfg);
}

/* Flow style throughout, from memory; deployments keep file order and the
 * lookup finds each among many. */
static void test_flow_and_order(void **state) {
    (void)state;
    char yaml[8192];
    size_t n = (size_t)snprintf(yaml, sizeof(yaml),
                                "{redis: {url: \"unix:///var/run/redis.sock\"}, agent: {socket_mode: 660},"
                                " deployments: {");
    for (int i = 99; i >= 0; i--)
        n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "d%02d: {rpm: %d}%s", i, i + 1, i ? ", " : "}}");
    config *cfg = NULL;
    char err[256];
    assert_int_equal(config_load_string("mem", yaml, n, &cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg->source, "mem");
    assert_string_equal(cfg->redis.unix_path, "/var/run/redis.sock");
    assert_string_equal(cfg->redis.host, "");
    assert_int_equal(cfg->redis.port, 0);
    assert_int_equal(cfg->agent.socket_mode, 0660);
    assert_int_equal(cfg->ndeployments, 100);
    for (int i = 0; i < 100; i++) {
        char name[8];
        snprintf(name, sizeof(name), "d%02d", i);
        assert_string_equal(cfg->deployments[99 - i].name, name);
        const struct config_deployment *d = config_deployment(cfg, name);
        assert_non_null(d);
        assert_int_equal(d->rpm, i + 1);
    }
    config_free(cfg);

    /* Not NUL-terminated: only len bytes count. */
    const char text[] = "deployments: {a: {rpm: 5}}GARBAGE";
    assert_int_equal(config_load_string(NULL, text, sizeof(text) - 1 - 7, &cfg, err, sizeof(err)), 0);
    config_free(cfg);
}

/* Accepted Redis URL forms and what they parse to. */
/* Every list-of-strings key takes one string as a list of one, checked
 * like an item: the same config as with the brackets. */
static void test_one_string_is_a_list(void **state) {
    (void)state;
    config *cfg = load_ok("redis:\n  cluster: 127.0.0.1:7000\n"
                          "deployments:\n  a:\n    rpm: 1\n    tags: eu\n    aliases: model-a\n"
                          "groups:\n  g:\n    members: a\n    aliases: model-g\n");
    assert_int_equal(cfg->redis.ncluster, 1);
    assert_string_equal(cfg->redis.cluster[0], "127.0.0.1:7000");
    assert_null(cfg->redis.cluster[1]);
    const struct config_deployment *d = config_deployment(cfg, "a");
    assert_non_null(d);
    assert_int_equal(d->ntags, 1);
    assert_string_equal(d->tags[0], "eu");
    assert_int_equal(d->naliases, 1);
    assert_string_equal(d->aliases[0], "model-a");
    const struct config_group *g = config_group(cfg, "g");
    assert_non_null(g);
    assert_int_equal(g->nmembers, 1);
    assert_string_equal(g->members[0], "a");
    assert_int_equal(g->naliases, 1);
    assert_string_equal(g->aliases[0], "model-g");
    config_free(cfg);
    cfg = load_ok("redis:\n  sentinel:\n    master: m\n    nodes: 127.0.0.1:26379\n"
                  "deployments:\n  a:\n    rpm: 1\n");
    assert_int_equal(cfg->redis.nsentinels, 1);
    assert_string_equal(cfg->redis.sentinels[0], "127.0.0.1:26379");
    config_free(cfg);
}

static void test_redis_urls(void **state) {
    (void)state;
    struct {
        const char *url, *host, *unix_path, *user;
        int port, db;
    } ok[] = {
        {"redis://10.1.2.3", "10.1.2.3", "", "", 6379, 0},
        {"redis://cache.internal:7000/", "cache.internal", "", "", 7000, 0},
        {"redis://cache.internal:7000/15", "cache.internal", "", "", 7000, 15},
        {"\"redis://[::1]:6380/3\"", "::1", "", "", 6380, 3},
        {"\"redis://[fe80::1]\"", "fe80::1", "", "", 6379, 0},
        {"unix:///run/redis/redis.sock", "", "/run/redis/redis.sock", "", 0, 0},
        {"redis://sluice@h:1/2", "h", "", "sluice", 1, 2},
    };
    setenv("SLUICE_TEST_PW2", "pw", 1);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char yaml[256];
        snprintf(yaml, sizeof(yaml),
                 "redis:\n  url: %s\n  password_env: SLUICE_TEST_PW2\n"
                 "deployments: {a: {rpm: 1}}\n",
                 ok[i].url);
        config *cfg = load_ok(yaml);
        assert_string_equal(cfg->redis.host, ok[i].host);
        assert_string_equal(cfg->redis.unix_path, ok[i].unix_path);
        assert_string_equal(cfg->redis.username, ok[i].user);
        assert_int_equal(cfg->redis.port, ok[i].port);
        assert_int_equal(cfg->redis.db, ok[i].db);
        assert_string_equal(cfg->redis.password, "pw");
        config_free(cfg);
    }
    unsetenv("SLUICE_TEST_PW2");
}

/* ---- the table of bad configurations ---- */

typedef struct bad_case {
    const char *yaml;
    const char *msg; /* the message after "<file>" */
} bad_case;

#define DEP "deployments:\n  gpt-4o:\n"

#define PRICED DEP "    rpm: 1\n    price: { input: 2.5, output: 10, currency: USD }\n"

static const bad_case bad_cases[] = {
    /* prices and budgets in money (issue 25) */
    {DEP "    rpm: 1\n    price: { input: -1, output: 10, currency: USD }\n", "@price.input"},
    {DEP "    rpm: 1\n    price: { input: abc, output: 10, currency: USD }\n", "@price.input"},
    {DEP "    rpm: 1\n    price: { input: 2.5, output: 10, currency: usd }\n", "@price.currency"},
    {DEP "    rpm: 1\n    price: { input: 2.5, output: 10, currency: XYZ }\n", "@price.currency"},
    {DEP "    rpm: 1\n    price: { input: 2.5, output: 10 }\n", "@price"},
    {DEP "    rpm: 1\n    price: { input: 0.0000001, output: 10, currency: USD }\n", "@price.input"},
    {PRICED "budgets:\n  team:\n    currency: USD\n    daily: -5\n", "@budgets.team.daily"},
    {PRICED "budgets:\n  team:\n    currency: USD\n    daily: lots\n", "@budgets.team.daily"},
    {PRICED "budgets:\n  team:\n    currency: EURO\n    daily: 5\n", "@budgets.team.currency"},
    {PRICED "budgets:\n  team:\n    daily: 5\n", "@budgets.team.currency"},
    {PRICED "budgets:\n  team:\n    currency: USD\n", "@budgets.team.daily"},
    {PRICED "budgets:\n  team:\n    currency: EUR\n    daily: 5\n", "@budgets.team.currency"},
    {PRICED "budgets:\n  team:\n    currency: USD\n    daily: 5\n    time_zone: Mars/Base\n",
     "@budgets.team.time_zone"},
    {PRICED "budgets:\n  team:\n    currency: USD\n    daily: 5\n    deployment: nope\n", "@budgets.team.deployment"},
    {PRICED "budgets:\n  team:\n    currency: USD\n    daily: 5\n    client: nope\n", "@budgets.team.client"},
    {PRICED "  other:\n    rpm: 1\nbudgets:\n  team:\n    currency: USD\n    monthly: 5\n", "@budgets.team"},
    /* a budget on one member of a group with an unpriced member: every
     * request to the group would be refused (priced at its dearest) */
    {PRICED "  other:\n    rpm: 1\ngroups:\n  g:\n    members: [gpt-4o, other]\nbudgets:\n  team:\n    currency: USD\n"
            "    daily: 5\n    deployment: gpt-4o\n",
     "@budgets.team"},
    /* lanes and tenants */
    {DEP "    rpm: 1\n    lanes:\n      hi: { headroom: 0.6 }\n      mid: { priority: 1, headroom: 0.5 }\n"
         "      lo: { priority: 2 }\n",
     ":7: key 'deployments.gpt-4o.lanes.lo': the headroom of the lanes above it adds up to 1.1: it must stay below 1"},
    {DEP "    rpm: 1\n    lanes:\n      a: {}\n    default_lane: b\n",
     ":6: key 'deployments.gpt-4o.default_lane': names no lane of this deployment: 'b'"},
    {DEP "    rpm: 1\n    default_lane: b\n",
     ":4: key 'deployments.gpt-4o.default_lane': 'b' given but the deployment has no lanes"},
    {DEP "    rpm: 1\n    lanes:\n      \"a b\": {}\n",
     ":5: key 'deployments.gpt-4o.lanes.a b': invalid name: use 1 to 64 of A-Z a-z 0-9 . _ : -"},
    {DEP "    rpm: 1\n    lanes:\n      a: { headroom: 1 }\n",
     ":5: key 'deployments.gpt-4o.lanes.a.headroom': must be a number in [0, 1), got \"1\""},
    {DEP "    rpm: 1\n    tenants:\n      t: { weight: 0 }\n",
     ":5: key 'deployments.gpt-4o.tenants.t.weight': must be a number in (0, 1000000], got \"0\""},
    {DEP "    rpm: 1\n    tenants:\n      t: { ceiling: 5 }\n",
     ":5: key 'deployments.gpt-4o.tenants.t.ceiling': unknown key"},
    {DEP "    rpm: 1\n    lanes:\n      a: { max_wait_ms: -2 }\n",
     ":5: key 'deployments.gpt-4o.lanes.a.max_wait_ms': must be an integer between -1 and 604800000, got \"-2\""},
    {"redis:\n  max_script_ms: -1\n" DEP "    rpm: 1\n",
     ":2: key 'redis.max_script_ms': must be a number in [0, 1000], got \"-1\""},
    {"redis:\n  max_script_ms: 1ms\n" DEP "    rpm: 1\n",
     ":2: key 'redis.max_script_ms': must be a number in [0, 1000], got \"1ms\""},
    /* beyond one Redis */
    {"redis:\n  cluster: nope\n" DEP "    rpm: 1\n",
     ":2: key 'redis.cluster': must be host:port with a port in 1..65535, got \"nope\""},
    {"redis:\n  cluster: {a: 1}\n" DEP "    rpm: 1\n",
     ":2: key 'redis.cluster': must be a string or a list of strings, got a mapping"},
    {"redis:\n  cluster: []\n" DEP "    rpm: 1\n", ":2: key 'redis.cluster': must not be an empty list"},
    {"redis:\n  cluster: [127.0.0.1:7000, nope]\n" DEP "    rpm: 1\n",
     ":2: key 'redis.cluster': item 2 must be host:port with a port in 1..65535, got \"nope\""},
    {"redis:\n  cluster: [\"127.0.0.1:7000\", \"10.0.0.\\t1:7001\"]\n" DEP "    rpm: 1\n",
     ":2: key 'redis.cluster': item 2 must be host:port with a port in 1..65535, got \"10.0.0.\\x091:7001\""},
    {"redis:\n  sentinel:\n    master: m\n" DEP "    rpm: 1\n",
     ":1: key 'redis.sentinel.nodes': Sentinel needs both redis.sentinel.master and redis.sentinel.nodes"},
    {"redis:\n  cluster: [a:1]\n  sentinel:\n    master: m\n    nodes: [b:2]\n" DEP "    rpm: 1\n",
     ":1: key 'redis.sentinel': give either redis.cluster or redis.sentinel, not both"},
    /* numbers */
    {DEP "    rpm: abc\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \"abc\""},
    {DEP "    rpm: -5\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \"-5\""},
    {DEP "    rpm: 0\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \"0\""},
    {DEP "    rpm: 10x\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \"10x\""},
    {DEP "    rpm: 1.5\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \"1.5\""},
    {DEP "    rpm: \" 60\"\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \" 60\""},
    {DEP "    rpm: 99999999999999999999\n",
     ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got \"99999999999999999999\" (out of range)"},
    {DEP "    rpm: 2000000000\n", ":3: key 'deployments.gpt-4o.rpm': must be at most 1000000000, got \"2000000000\""},
    {DEP "    rpm:\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got nothing"},
    {DEP "    rpm: [1]\n", ":3: key 'deployments.gpt-4o.rpm': must be a positive integer, got a list"},
    {DEP "    rpm: 60\n    tpm: -1\n", ":4: key 'deployments.gpt-4o.tpm': must be a non-negative integer, got \"-1\""},
    {DEP "    rpm: 60\n    lease_s: 0\n",
     ":4: key 'deployments.gpt-4o.lease_s': must be an integer between 1 and 86400, got \"0\""},
    {"redis:\n  timeout_ms: 60001\n" DEP "    rpm: 1\n",
     ":2: key 'redis.timeout_ms': must be an integer between 1 and 60000, got \"60001\""},
    {"agent:\n  max_client_buffer: 12q\n" DEP "    rpm: 1\n",
     ":2: key 'agent.max_client_buffer': must be a size in bytes between 1024 and 1073741824, got \"12q\""},
    {"agent:\n  max_client_buffer: 2gb\n" DEP "    rpm: 1\n",
     ":2: key 'agent.max_client_buffer': must be a size in bytes between 1024 and 1073741824, got \"2gb\""},
    {"agent:\n  fallback_share: 0\n" DEP "    rpm: 1\n",
     ":2: key 'agent.fallback_share': must be a number in (0, 1], got \"0\""},
    {"agent:\n  fallback_share: 1.01\n" DEP "    rpm: 1\n",
     ":2: key 'agent.fallback_share': must be a number in (0, 1], got \"1.01\""},
    {"agent:\n  fallback_share: .nan\n" DEP "    rpm: 1\n",
     ":2: key 'agent.fallback_share': must be a number in (0, 1], got \".nan\""},
    {DEP "    rpm: 1\n    aimd: {decrease: 1}\n",
     ":4: key 'deployments.gpt-4o.aimd.decrease': must be a number in (0, 1), got \"1\""},
    {DEP "    rpm: 1\n    aimd: {min_scale: 0}\n",
     ":4: key 'deployments.gpt-4o.aimd.min_scale': must be a number in (0, 1], got \"0\""},
    {DEP "    rpm: 1\n    aimd:\n      increase: 0\n",
     ":5: key 'deployments.gpt-4o.aimd.increase': must be a number in (0, 1], got \"0\""},
    {DEP "    rpm: 1\n    retry_budget: {percent: -1}\n",
     ":4: key 'deployments.gpt-4o.retry_budget.percent': must be a number in [0, 1000], got \"-1\""},
    {DEP "    rpm: 1\n    burst: {requests: 0}\n",
     ":4: key 'deployments.gpt-4o.burst.requests': must be a positive integer, got \"0\""},
    /* other types */
    {DEP "    rpm: 1\n    refund: maybe\n",
     ":4: key 'deployments.gpt-4o.refund': must be true or false, got \"maybe\""},
    {DEP "    rpm: 1\n    style: Azure\n", ":4: key 'deployments.gpt-4o.style': must be one of azure, openai, "
                                           "anthropic, custom, bedrock, gemini, got \"Azure\""},
    /* provider profiles: a dimension the profile does not have, at its key */
    {DEP "    rpm: 1\n    tpm: 1000\n    itpm: 500\n",
     ":5: key 'deployments.gpt-4o.itpm': style azure has combined tokens (tpm): input and output are not limited "
     "apart; use style custom to configure any dimension (docs/providers.md)"},
    {DEP "    rpm: 1\n    style: openai\n    burst: {output_tokens: 9}\n",
     ":5: key 'deployments.gpt-4o.burst.output_tokens': style openai has combined tokens (tpm): input and output "
     "are not limited apart; use style custom to configure any dimension (docs/providers.md)"},
    {DEP "    rpm: 1\n    style: anthropic\n    otpm: 100\n    tpm: 1000\n",
     ":6: key 'deployments.gpt-4o.tpm': style anthropic has input and output tokens apart (itpm, otpm), no "
     "combined tpm; use style custom to configure any dimension (docs/providers.md)"},
    {DEP "    rpm: 1\n    style: anthropic\n    refund: {tokens: true}\n",
     ":5: key 'deployments.gpt-4o.refund.tokens': style anthropic has input and output tokens apart (itpm, otpm), "
     "no combined tpm; use style custom to configure any dimension (docs/providers.md)"},
    {DEP "    rpm: 1\n    style: bedrock\n    itpm: 100\n",
     ":5: key 'deployments.gpt-4o.itpm': style bedrock has combined tokens (tpm): input and output are not limited "
     "apart; use style custom to configure any dimension (docs/providers.md)"},
    {DEP "    rpm: 1\n    tpm: 1000\n    output_burndown: 5\n",
     ":5: key 'deployments.gpt-4o.output_burndown': applies to styles bedrock and custom only (style is azure)"},
    {DEP "    rpm: 1\n    style: bedrock\n    tpm: 1000\n    output_burndown: 0\n",
     ":6: key 'deployments.gpt-4o.output_burndown': must be a number in (0, 100], got \"0\""},
    {DEP "    rpm: 1\n    style: custom\n    itpm: 1000\n    output_burndown: 2\n",
     ":6: key 'deployments.gpt-4o.output_burndown': counts output tokens in the combined tokens (tpm), which this "
     "deployment does not limit"},
    {DEP "    rpm: 1\n    style: custom\n    tpm: 1000\n    output_burndown: 2\n    tokens_rule: max\n",
     ":7: key 'deployments.gpt-4o.tokens_rule': max cannot go with an output burndown (input + output x burndown is "
     "a sum)"},
    {DEP "    rpm: 1\n    rpd: 300\n    daily_reset: Mars/Olympus_Mons\n",
     ":5: key 'deployments.gpt-4o.daily_reset': unknown time zone 'Mars/Olympus_Mons' (no "
     "/usr/share/zoneinfo/Mars/Olympus_Mons in the tz database; install tzdata)"},
    {DEP "    rpm: 1\n    style: gemini\n    tpm: 1000\n",
     ":5: key 'deployments.gpt-4o.tpm': style gemini has input tokens only (itpm: its \"Tokens per minute "
     "(input)\"); use style custom to configure any dimension (docs/providers.md)"},
    {DEP "    rpm: 1\n    style: anthropic\n    itpm: -1\n",
     ":5: key 'deployments.gpt-4o.itpm': must be a non-negative integer, got \"-1\""},
    {DEP "    rpm: 1\n    refund: {output: true}\n", ":4: key 'deployments.gpt-4o.refund.output': unknown key"},
    {DEP "    rpm: 1\n    aimd: {min_throttles: 0}\n",
     ":4: key 'deployments.gpt-4o.aimd.min_throttles': must be an integer between 1 and 1000, got \"0\""},
    {"agent:\n  fail: maybe\n" DEP "    rpm: 1\n",
     ":2: key 'agent.fail': must be one of open, closed, hold, got \"maybe\""},
    {"agent:\n  log_level: trace\n" DEP "    rpm: 1\n",
     ":2: key 'agent.log_level': must be one of error, warn, info, debug, got \"trace\""},
    {"agent:\n  socket_mode: \"0999\"\n" DEP "    rpm: 1\n",
     ":2: key 'agent.socket_mode': must be an octal file mode from \"0000\" to \"0777\", got \"0999\""},
    {"agent:\n  socket_mode: \"01000\"\n" DEP "    rpm: 1\n",
     ":2: key 'agent.socket_mode': must be an octal file mode from \"0000\" to \"0777\", got \"01000\""},
    {"agent:\n  socket: \"\"\n" DEP "    rpm: 1\n", ":2: key 'agent.socket': must not be empty"},
    {"agent:\n  socket: \"/tmp/a\\x01b\"\n" DEP "    rpm: 1\n",
     ":2: key 'agent.socket': must not contain control characters, got \"/tmp/a\\x01b\""},
    {"agent:\n  socket: {a: 1}\n" DEP "    rpm: 1\n", ":2: key 'agent.socket': must be a string, got a mapping"},
    {"agent:\n  metrics: localhost\n" DEP "    rpm: 1\n",
     ":2: key 'agent.metrics': must be HOST:PORT with a port in 1..65535 (like 127.0.0.1:9464), or empty to "
     "disable, got \"localhost\""},
    {"agent:\n  metrics: \"h:0\"\n" DEP "    rpm: 1\n",
     ":2: key 'agent.metrics': must be HOST:PORT with a port in 1..65535 (like 127.0.0.1:9464), or empty to "
     "disable, got \"h:0\""},
    {"agent:\n  id: \"a b\"\n" DEP "    rpm: 1\n",
     ":2: key 'agent.id': must be at most 128 bytes without spaces, got \"a b\""},
    {DEP "    rpm: 1\n    endpoint: ftp://x\n",
     ":4: key 'deployments.gpt-4o.endpoint': must be an http:// or https:// URL with a host, got \"ftp://x\""},
    {DEP "    rpm: 1\n    api_key_env: 1KEY\n",
     ":4: key 'deployments.gpt-4o.api_key_env': must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), "
     "got \"1KEY\""},
    {DEP "    rpm: 1\n    style: openai\n    api_version: 2024-06-01\n",
     ":5: key 'deployments.gpt-4o.api_version': applies to styles azure and anthropic only (style is openai)"},
    /* structure */
    {DEP "    rpm: 1\n    rpmm: 5\n", ":4: key 'deployments.gpt-4o.rpmm': unknown key (did you mean 'rpm'?)"},
    {DEP "    rpm: 1\n    burst: {request: 1}\n",
     ":4: key 'deployments.gpt-4o.burst.request': unknown key (did you mean 'requests'?)"},
    {DEP "    rpm: 1\n    colour: red\n", ":4: key 'deployments.gpt-4o.colour': unknown key"},
    {"deployment:\n  a: {rpm: 1}\n", ":1: key 'deployment': unknown key (did you mean 'deployments'?)"},
    {"redis:\n  password: hunter2\n" DEP "    rpm: 1\n",
     ":2: key 'redis.password': unknown key: a password is never written in the configuration, use "
     "password_file or password_env"},
    {DEP "    rpm: 1\n    rpm: 2\n", ":4: key 'deployments.gpt-4o.rpm': duplicate key (first given on line 3)"},
    {"redis: {}\nredis: {}\n" DEP "    rpm: 1\n", ":2: key 'redis': duplicate key (first given on line 1)"},
    {DEP "    rpm: 1\n    burst: {requests: 1}\n    burst: {tokens: 1}\n",
     ":5: key 'deployments.gpt-4o.burst': duplicate key (first given on line 4)"},
    /* the same key spelled as a dotted path and as a nested mapping */
    {DEP "    rpm: 1\n    burst: {requests: 2}\n    burst.requests: 3\n",
     ":5: key 'deployments.gpt-4o.burst.requests': duplicate key (first given on line 4)"},
    {"redis:\n  url: redis://a:1\nredis.url: redis://b:2\n" DEP "    rpm: 1\n",
     ":3: key 'redis.url': duplicate key (first given on line 2)"},
    {"redis:\n  cluster: [a:1]\nredis.cluster: [b:2]\n" DEP "    rpm: 1\n",
     ":3: key 'redis.cluster': duplicate key (first given on line 2)"},
    {DEP "    rpm: 1\n  gpt-4o:\n    rpm: 2\n",
     ":4: key 'deployments.gpt-4o': duplicate deployment (first defined on line 2)"},
    {DEP "    tpm: 5\n", ":2: key 'deployments.gpt-4o.rpm': required key is missing"},
    {"deployments:\n  gpt-4o:\n", ":2: key 'deployments.gpt-4o.rpm': required key is missing"},
    {"deployments:\n  gpt-4o: 60\n",
     ":2: key 'deployments.gpt-4o': must be a mapping of deployment settings, got a scalar"},
    {"deployments:\n  \"gpt{4o}\": {rpm: 1}\n",
     ":2: key 'deployments.gpt{4o}': invalid deployment name: use 1 to 64 of A-Z a-z 0-9 . _ : -"},
    {"deployments:\n  \"a b\": {rpm: 1}\n",
     ":2: key 'deployments.a b': invalid deployment name: use 1 to 64 of A-Z a-z 0-9 . _ : -"},
    {"deployments:\n  \"\": {rpm: 1}\n",
     ":2: key 'deployments.': invalid deployment name: use 1 to 64 of A-Z a-z 0-9 . _ : -"},
    {"deployments:\n  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: {rpm: 1}\n",
     ":2: key 'deployments.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa': invalid deployment "
     "name: use 1 to 64 of A-Z a-z 0-9 . _ : -"},
    {"deployments: [gpt-4o]\n", ":1: key 'deployments': must be a mapping of deployment names to settings, got a list"},
    {"deployments: {}\n", ":1: key 'deployments': at least one deployment is required"},
    {"deployments:\n", ":1: key 'deployments': at least one deployment is required"},
    {"redis:\n  timeout_ms: 10\n", ":1: key 'deployments': at least one deployment is required"},
    {"redis: [1, 2]\n" DEP "    rpm: 1\n", ":1: key 'redis': must be a mapping, got a list"},
    {DEP "    rpm: 1\n    burst: 5\n", ":4: key 'deployments.gpt-4o.burst': must be a mapping, got a scalar"},
    {"? [a]\n: 1\n", ":1: keys must be strings, got a list"},
    {"- a\n- b\n", ":1: the top level must be a mapping, got a list"},
    {"", ":1: the configuration is empty (at least one deployment is required)"},
    {"# only a comment\n", ":1: the configuration is empty (at least one deployment is required)"},
    {DEP "    rpm: 1\n---\nredis: {}\n", ":5: only one YAML document is allowed"},
    {DEP "    rpm: [1\n",
     ":4: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence at line 3)"},
    {DEP "\trpm: 1\n", ":3: YAML syntax error: found character that cannot start any token (while scanning for the "
                       "next token at line 3)"},
    /* redis */
    {"redis:\n  url: redis://user:hunter2@h:6379\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': a password in the URL is not allowed: use redis.password_file or redis.password_env"},
    {"redis:\n  url: \"redis://:hunter2@h\"\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': a password in the URL is not allowed: use redis.password_file or redis.password_env"},
    {"redis:\n  url: \"redis://:hunter2@h\\t\"\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': must not contain control characters, got a value not repeated here"},
    {"redis:\n  url: rediss://h\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': TLS (rediss://) is not supported by this build"},
    {"redis:\n  url: http://h\n" DEP "    rpm: 1\n", ":2: key 'redis.url': must start with redis:// or unix://"},
    {"redis:\n  url: redis://h:70000\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': the port must be a number in 1..65535"},
    {"redis:\n  url: redis://:6379\n" DEP "    rpm: 1\n", ":2: key 'redis.url': the host is empty"},
    {"redis:\n  url: redis://h/x\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': the database after '/' must be a non-negative integer"},
    {"redis:\n  url: redis://u@h:1/q2\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': the database after '/' must be a non-negative integer"},
    {"redis:\n  url: unix://redis.sock\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': a unix:// URL needs an absolute path (unix:///path/to/redis.sock)"},
    {"redis:\n  url: redis://u@h\n  username: v\n  password_env: HOME\n" DEP "    rpm: 1\n",
     ":3: key 'redis.username': the user is already given in redis.url"},
    {"redis:\n  username: u\n" DEP "    rpm: 1\n",
     ":2: key 'redis.username': a user needs a password: set redis.password_file or redis.password_env"},
    {"redis:\n  password_file: pass.txt\n  password_env: HOME\n" DEP "    rpm: 1\n",
     ":3: key 'redis.password_env': give either redis.password_file or redis.password_env, not both"},
    {"redis:\n  password_env: SLUICE_TEST_SURELY_UNSET\n" DEP "    rpm: 1\n",
     ":2: key 'redis.password_env': environment variable SLUICE_TEST_SURELY_UNSET is not set"},
    {"redis:\n  url: redis://h/2\n  cluster: [a:1]\n" DEP "    rpm: 1\n",
     ":2: key 'redis.url': Redis Cluster has database 0 only: remove the database after '/' (redis.cluster)"},
    {"redis:\n  password_env: SLUICE_TEST_EMPTY\n" DEP "    rpm: 1\n",
     ":2: key 'redis.password_env': environment variable SLUICE_TEST_EMPTY is empty"},
};

static void test_bad_configs(void **state) {
    (void)state;
    setenv("SLUICE_TEST_EMPTY", "", 1);
    unsetenv("SLUICE_TEST_SURELY_UNSET");
    write_file("pass.txt", "pw\n");
    size_t plen = strlen(cfgpath);
    int failures = 0;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        config *cfg = (config *)&failures; /* must be reset to NULL */
        char err[512];
        int rc = load(bad_cases[i].yaml, &cfg, err, sizeof(err));
        char want[256];
        const char *msg = bad_cases[i].msg;
        if (msg[0] == '@') {
            /* The key named, at a line, whatever the words (budgets' rows:
             * test_budget_errors prints them for the docs). */
            snprintf(want, sizeof(want), "key '%s%s'", strncmp(msg + 1, "budgets", 7) ? "deployments.gpt-4o." : "",
                     msg + 1);
            int named = rc == -1 && !cfg && !strncmp(err, cfgpath, plen) && err[plen] == ':' && err[plen + 1] >= '1' &&
                        err[plen + 1] <= '9' && strstr(err + plen, want);
            if (!named) {
                print_error("case %zu:\n  want %s:<line>: %s...\n  got  %s (rc %d)\n", i, cfgpath, want, err, rc);
                failures++;
            } else {
                print_message("  %s\n", err + plen);
            }
            if (rc == 0) config_free(cfg);
            continue;
        }
        if (rc != -1 || cfg != NULL || strncmp(err, cfgpath, plen) != 0 || strcmp(err + plen, bad_cases[i].msg)) {
            print_error("case %zu:\n  want %s%s\n  got  %s (rc %d)\n", i, cfgpath, bad_cases[i].msg, err, rc);
            failures++;
        }
        if (strstr(err, "hunter2")) {
            print_error("case %zu: the message leaks the password: %s\n", i, err);
            failures++;
        }
        if (rc == 0) config_free(cfg);
    }
    assert_int_equal(failures, 0);
}

/* ---- secrets ---- */

static void test_password_sources(void **state) {
    (void)state;
    config *cfg;
    char err[512];
    char yaml[512];

    /* Relative to the config file's directory; CRLF stripped. */
    write_file("pass.txt", "pa ss\r\n");
    cfg = load_ok("redis:\n  password_file: pass.txt\ndeployments: {a: {rpm: 1}}\n");
    assert_string_equal(cfg->redis.password, "pa ss");
    config_free(cfg);

    /* Absolute path, no trailing newline. */
    write_file("pass.txt", "abc");
    snprintf(yaml, sizeof(yaml), "redis:\n  password_file: %s/pass.txt\ndeployments: {a: {rpm: 1}}\n", tmpdir);
    cfg = load_ok(yaml);
    assert_string_equal(cfg->redis.password, "abc");
    config_free(cfg);

    /* From the environment, with an ACL user. */
    setenv("SLUICE_TEST_PW", "from-env", 1);
    cfg = load_ok("redis:\n  username: sluice\n  password_env: SLUICE_TEST_PW\ndeployments: {a: {rpm: 1}}\n");
    assert_string_equal(cfg->redis.password, "from-env");
    assert_string_equal(cfg->redis.username, "sluice");
    config_free(cfg);
    unsetenv("SLUICE_TEST_PW");

    struct {
        const char *file, *content, *why;
    } bad[] = {
        {"missing.pass", NULL, "cannot read \"%s/missing.pass\": No such file or directory"},
        {"empty.pass", "\n", "\"%s/empty.pass\" is empty"},
        {"two.pass", "a\nb\n", "\"%s/two.pass\" must hold the secret on one line"},
        {".", NULL, "\"%s/.\" is not a regular file"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (bad[i].content) write_file(bad[i].file, bad[i].content);
        snprintf(yaml, sizeof(yaml), "redis:\n  password_file: %s\ndeployments: {a: {rpm: 1}}\n", bad[i].file);
        cfg = NULL;
        assert_int_equal(load(yaml, &cfg, err, sizeof(err)), -1);
        assert_null(cfg);
        char why[256], want[512];
        snprintf(why, sizeof(why), bad[i].why, tmpdir);
        snprintf(want, sizeof(want), "%s:2: key 'redis.password_file': %s", cfgpath, why);
        assert_string_equal(err, want);
    }
}

/* ---- API edges ---- */

static void test_api_edges(void **state) {
    (void)state;
    config *cfg = NULL;
    char err[512];
    config_free(NULL);
    assert_null(config_deployment(NULL, "a"));

    /* A missing file names itself. */
    assert_int_equal(config_load("/nonexistent/sluiced.yaml", &cfg, err, sizeof(err)), -1);
    assert_string_equal(err, "/nonexistent/sluiced.yaml: cannot open: No such file or directory");

    /* No error buffer, or a tiny one: no crash, NUL-terminated. */
    assert_int_equal(config_load_string("x", "deployments: {}", 15, &cfg, NULL, 0), -1);
    char tiny[8];
    assert_int_equal(config_load_string("x", "deployments: {}", 15, &cfg, tiny, sizeof(tiny)), -1);
    assert_string_equal(tiny, "x:1: ke");

    /* Every key is reachable through the name used in messages. */
    assert_int_equal(config_load_string(NULL, "a: 1", 4, &cfg, err, sizeof(err)), -1);
    assert_string_equal(err, "<string>:1: key 'a': unknown key");

    assert_string_equal(config_fail_name(CONFIG_FAIL_CLOSED), "closed");
    assert_string_equal(config_fail_name(CONFIG_FAIL_HOLD), "hold");
    assert_string_equal(config_log_level_name(CONFIG_LOG_WARN), "warn");
    assert_string_equal(config_style_name(CONFIG_STYLE_OPENAI), "openai");
    assert_string_equal(config_style_name(7), "?");
    assert_string_equal(config_fail_name(-1), "?");
}

/* ---- the docs and the example stay true ---- */

typedef struct doc_check {
    const char *text;
    int keys, missing;
} doc_check;

static void check_key_documented(const config_key_info *info, void *ud) {
    doc_check *dc = ud;
    char needle[300];
    snprintf(needle, sizeof(needle), "`%s`", info->path);
    dc->keys++;
    if (!strstr(dc->text, needle)) {
        print_error("docs/configuration.md does not document %s\n", needle);
        dc->missing++;
    }
    assert_non_null(info->doc);
    assert_non_null(info->type);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static void test_docs_cover_schema(void **state) {
    (void)state;
    const char *src = getenv("SLUICE_SOURCE_DIR");
    if (!src) skip();
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", src);
    char *text = slurp(path);
    if (!text) fail_msg("cannot read %s", path);
    doc_check dc = {.text = text};
    config_foreach_key(check_key_documented, &dc);
    free(text);
    assert_true(dc.keys >= 39); /* the walk reached the deployment rows */
    assert_int_equal(dc.missing, 0);
}

/* Prices and budgets load as given: per token in 1e-12, limits in 1e-6. */
static void test_budgets(void **state) {
    (void)state;
    setenv("SLUICE_TEST_CLIENT_KEY", "sk-ci-0123456789abcdef", 1);
    config *cfg =
        load_ok("agent:\n  http:\n    listen: 127.0.0.1:8790\n    clients:\n"
                "      ci: { key_env: SLUICE_TEST_CLIENT_KEY, tenant: t }\n"
                "deployments:\n"
                "  gpt:\n    rpm: 10\n    price: { input: 2.5, output: 10, cache_read: 1.25, currency: USD }\n"
                "  claude:\n    rpm: 10\n    style: anthropic\n"
                "    price: { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75, currency: USD }\n"
                "groups:\n  both: { members: [gpt, claude] }\n"
                "budgets:\n"
                "  team: { tenant: t, currency: USD, daily: 50, monthly: 1000, time_zone: Europe/Oslo }\n"
                "  ci: { client: ci, currency: USD, total: 12.345678, warn_at: 0.5 }\n"
                "  group: { deployment: both, currency: USD, monthly: 100 }\n");
    const struct config_deployment *g = config_deployment(cfg, "gpt"), *c = config_deployment(cfg, "claude");
    assert_int_equal(g->price.input_p, 2500000);
    assert_int_equal(g->price.output_p, 10000000);
    assert_int_equal(g->price.cache_read_p, 1250000);
    assert_int_equal(g->price.cache_write_p, 2500000); /* defaults to input */
    assert_int_equal(c->price.cache_write_p, 3750000);
    assert_string_equal(c->price.currency, "USD");
    assert_int_equal(cfg->nbudgets, 3);
    assert_string_equal(cfg->budgets[0].name, "team");
    assert_int_equal(cfg->budgets[0].daily_u, 50000000);
    assert_int_equal(cfg->budgets[0].monthly_u, 1000000000);
    assert_int_equal(cfg->budgets[0].total_u, 0);
    assert_string_equal(cfg->budgets[0].time_zone, "Europe/Oslo");
    assert_true(cfg->budgets[0].warn_at == 0.8);
    assert_int_equal(cfg->budgets[1].total_u, 12345678);
    assert_true(cfg->budgets[1].warn_at == 0.5);
    assert_string_equal(cfg->budgets[2].deployment, "both");
    config_free(cfg);
    assert_true(config_currency_ok("EUR") && config_currency_ok("JPY") && !config_currency_ok("EURO") &&
                !config_currency_ok("eur") && !config_currency_ok(""));
}

static void test_example_loads(void **state) {
    (void)state;
    const char *src = getenv("SLUICE_SOURCE_DIR");
    if (!src) skip();
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/deploy/sluiced.example.yaml", src);
    config *cfg = NULL;
    if (config_load(path, &cfg, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_true(cfg->ndeployments >= 1);
    assert_non_null(config_deployment(cfg, "gpt-4o"));
    config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_max_script_ms),
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_flow_and_order),
        cmocka_unit_test(test_redis_urls),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_password_sources),
        cmocka_unit_test(test_api_edges),
        cmocka_unit_test(test_docs_cover_schema),
        cmocka_unit_test(test_example_loads),
        cmocka_unit_test(test_one_string_is_a_list),
        cmocka_unit_test(test_bedrock_profile),
        cmocka_unit_test(test_budgets),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
