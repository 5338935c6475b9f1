/* Unit tests for the HTTP proxy's keys in lib/core/config: agent.http.*
 * (listeners parsed, the loopback rule, limits and their defaults) and
 * the model names a request may use (deployments' and groups' aliases,
 * config_model), with each error's exact message (file:line and key). */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"

static config *load_ok(const char *yaml) {
    config *cfg = NULL;
    char err[512];
    if (config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof(err)) != 0) fail_msg("%s", err);
    return cfg;
}

static void assert_load_error(const char *yaml, const char *want) {
    config *cfg = NULL;
    char err[512];
    int rc = config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof(err));
    if (rc == 0) {
        config_free(cfg);
        fail_msg("loaded, expected the error: %s", want);
    }
    assert_null(cfg);
    if (strcmp(err, want) != 0) fail_msg("error\n  got:  %s\n  want: %s", err, want);
}

#define DEPS "deployments:\n  d:\n    rpm: 60\n"

static void test_defaults_off(void **state) {
    (void)state;
    config *cfg = load_ok(DEPS);
    const config_http *h = &cfg->agent.http;
    assert_int_equal(h->nlisten, 0);
    assert_null(h->listeners);
    assert_int_equal(h->allow_remote, 0);
    assert_int_equal(h->max_connections, 1024);
    assert_int_equal(h->max_header_bytes, 32768);
    assert_int_equal(h->max_body_bytes, 8 << 20);
    assert_int_equal(h->header_timeout_ms, 10000);
    assert_int_equal(h->body_timeout_ms, 30000);
    assert_int_equal(h->idle_timeout_ms, 60000);
    assert_int_equal(h->drain_timeout_ms, 10000);
    config_free(cfg);
}

static void test_listeners(void **state) {
    (void)state;
    config *cfg = load_ok("agent:\n  http:\n    listen: [127.0.0.1:8790, \"[::1]:8791\", unix:/run/s/http.sock,"
                          " 127.9.9.9:1, \"[::ffff:127.0.0.1]:2\"]\n"
                          "    max_header_bytes: 2kb\n    max_body_bytes: 1mb\n    max_connections: 7\n"
                          "    header_timeout_ms: 150\n    body_timeout_ms: 250\n    idle_timeout_ms: 350\n"
                          "    drain_timeout_ms: 0\n" DEPS);
    const config_http *h = &cfg->agent.http;
    assert_int_equal(h->nlisten, 5);
    assert_int_equal(h->listeners[0].kind, CONFIG_LISTEN_TCP);
    assert_string_equal(h->listeners[0].host, "127.0.0.1");
    assert_int_equal(h->listeners[0].port, 8790);
    assert_true(h->listeners[0].loopback);
    assert_string_equal(h->listeners[1].host, "::1");
    assert_int_equal(h->listeners[1].port, 8791);
    assert_true(h->listeners[1].loopback);
    assert_int_equal(h->listeners[2].kind, CONFIG_LISTEN_UNIX);
    assert_string_equal(h->listeners[2].path, "/run/s/http.sock");
    assert_true(h->listeners[3].loopback);
    assert_true(h->listeners[4].loopback);
    assert_int_equal(h->max_header_bytes, 2048);
    assert_int_equal(h->max_body_bytes, 1 << 20);
    assert_int_equal(h->max_connections, 7);
    assert_int_equal(h->header_timeout_ms, 150);
    assert_int_equal(h->body_timeout_ms, 250);
    assert_int_equal(h->idle_timeout_ms, 350);
    assert_int_equal(h->drain_timeout_ms, 0);
    config_free(cfg);

    /* Not loopback: refused unless allowed, at the list's line. */
    assert_load_error("agent:\n  http:\n    listen:\n      - 127.0.0.1:8790\n      - 0.0.0.0:8790\n" DEPS,
                      "t.yaml:4: key 'agent.http.listen': item 2 (0.0.0.0:8790) is not a loopback address: any host "
                      "that can reach it could spend the quota; set agent.http.allow_remote: true to serve other "
                      "hosts (docs/security.md)");
    assert_load_error("agent:\n  http: { listen: [\"[::]:1\"] }\n" DEPS,
                      "t.yaml:2: key 'agent.http.listen': item 1 ([::]:1) is not a loopback address: any host that "
                      "can reach it could spend the quota; set agent.http.allow_remote: true to serve other hosts "
                      "(docs/security.md)");
    cfg = load_ok("agent:\n  http:\n    listen: [0.0.0.0:8790, \"[::]:8790\", 10.1.2.3:80]\n"
                  "    allow_remote: true\n" DEPS);
    assert_false(cfg->agent.http.listeners[0].loopback);
    assert_false(cfg->agent.http.listeners[2].loopback);
    config_free(cfg);

    /* Syntax, at the item's line. */
    assert_load_error("agent:\n  http:\n    listen: [localhost:8790]\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 1 must be a numeric IPv4 address or a bracketed IPv6 "
                      "one (no host names), with a port, got \"localhost:8790\"");
    assert_load_error("agent:\n  http:\n    listen: [127.0.0.1]\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 1 must be ADDRESS:PORT (127.0.0.1:8790, [::1]:8790) "
                      "or unix:/path, with a port in 1..65535, got \"127.0.0.1\"");
    assert_load_error("agent:\n  http:\n    listen: [127.0.0.1:0]\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 1 must be ADDRESS:PORT (127.0.0.1:8790, [::1]:8790) "
                      "or unix:/path, with a port in 1..65535, got \"127.0.0.1:0\"");
    assert_load_error("agent:\n  http:\n    listen: [\"::1:80\"]\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 1 must be ADDRESS:PORT (127.0.0.1:8790, [::1]:8790) "
                      "or unix:/path, with a port in 1..65535, got \"::1:80\"");
    assert_load_error("agent:\n  http:\n    listen: [unix:relative.sock]\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 1 must be unix:/absolute/path for a UNIX socket, got "
                      "\"unix:relative.sock\"");
    assert_load_error("agent:\n  socket: /tmp/a.sock\n  http:\n    listen: [unix:/tmp/a.sock]\n" DEPS,
                      "t.yaml:4: key 'agent.http.listen': item 1 (unix:/tmp/a.sock) is agent.socket, the RESP socket");
    assert_load_error("agent:\n  http:\n    listen: [127.0.0.1:1, 127.0.0.1:1]\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 2 (127.0.0.1:1) is given twice");
    /* One address as a scalar is a list of one; a bad one is refused with
     * the same message at its line, naming no item. */
    cfg = load_ok("agent:\n  http:\n    listen: 127.0.0.1:8790\n" DEPS);
    assert_int_equal(cfg->agent.http.nlisten, 1);
    assert_string_equal(cfg->agent.http.listen[0], "127.0.0.1:8790");
    assert_null(cfg->agent.http.listen[1]);
    assert_int_equal(cfg->agent.http.listeners[0].kind, CONFIG_LISTEN_TCP);
    assert_int_equal(cfg->agent.http.listeners[0].port, 8790);
    assert_true(cfg->agent.http.listeners[0].loopback);
    config_free(cfg);
    cfg = load_ok("agent:\n  http: {listen: \"unix:/run/s/http.sock\"}\n" DEPS);
    assert_int_equal(cfg->agent.http.nlisten, 1);
    assert_int_equal(cfg->agent.http.listeners[0].kind, CONFIG_LISTEN_UNIX);
    assert_string_equal(cfg->agent.http.listeners[0].path, "/run/s/http.sock");
    config_free(cfg);
    assert_load_error("agent:\n  http:\n    listen: 127.0.0.1\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': must be ADDRESS:PORT (127.0.0.1:8790, [::1]:8790) "
                      "or unix:/path, with a port in 1..65535, got \"127.0.0.1\"");
    assert_load_error("agent:\n  http:\n    listen: localhost:8790\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': must be a numeric IPv4 address or a bracketed IPv6 one "
                      "(no host names), with a port, got \"localhost:8790\"");
    assert_load_error("agent:\n  http:\n    listen: 0.0.0.0:8790\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': item 1 (0.0.0.0:8790) is not a loopback address: any host "
                      "that can reach it could spend the quota; set agent.http.allow_remote: true to serve other "
                      "hosts (docs/security.md)");
    assert_load_error("agent:\n  http:\n    listen: {a: 1}\n" DEPS,
                      "t.yaml:3: key 'agent.http.listen': must be a string or a list of strings, got a mapping");
    assert_load_error("agent:\n  http:\n    max_header_bytes: 1mb\n" DEPS,
                      "t.yaml:3: key 'agent.http.max_header_bytes': must be a size in bytes between 1024 and 65536, "
                      "got \"1mb\"");
    assert_load_error("agent:\n  http:\n    lisen: [127.0.0.1:1]\n" DEPS,
                      "t.yaml:3: key 'agent.http.lisen': unknown key (did you mean 'listen'?)");
}

static void test_aliases(void **state) {
    (void)state;
    config *cfg =
        load_ok("deployments:\n"
                "  gpt-4o:\n    rpm: 60\n    aliases: [gpt-4o-2024-08-06, openai/gpt-4o]\n"
                "  claude:\n    rpm: 60\n    style: anthropic\n    itpm: 100\n    aliases: [claude-sonnet-4-5]\n"
                "groups:\n  eu:\n    members: [gpt-4o]\n    aliases: [gpt-4o-eu]\n");
    config_target t;
    assert_int_equal(config_model(cfg, "gpt-4o", &t), 0);
    assert_string_equal(t.deployment->name, "gpt-4o");
    assert_null(t.group);
    assert_int_equal(config_model(cfg, "openai/gpt-4o", &t), 0);
    assert_string_equal(t.deployment->name, "gpt-4o");
    assert_int_equal(config_model(cfg, "gpt-4o-2024-08-06", &t), 0);
    assert_string_equal(t.deployment->name, "gpt-4o");
    assert_int_equal(config_model(cfg, "claude-sonnet-4-5", &t), 0);
    assert_string_equal(t.deployment->name, "claude");
    assert_true(config_counts_apart(t.deployment));
    assert_int_equal(config_model(cfg, "eu", &t), 0);
    assert_string_equal(t.group->name, "eu");
    assert_null(t.deployment);
    assert_int_equal(config_model(cfg, "gpt-4o-eu", &t), 0);
    assert_string_equal(t.group->name, "eu");
    assert_int_equal(config_model(cfg, "GPT-4O", &t), -1);
    assert_null(t.deployment);
    assert_int_equal(config_model(cfg, "", &t), -1);
    assert_int_equal(config_model(cfg, NULL, &t), -1);
    config_target g;
    assert_int_equal(config_model(cfg, "gpt-4o", &g), 0);
    assert_false(config_counts_apart(g.deployment));
    config_free(cfg);

    assert_load_error("deployments:\n  a:\n    rpm: 1\n  b:\n    rpm: 1\n    aliases: [a]\n",
                      "t.yaml:4: key 'deployments.b.aliases': 'a' already names deployment 'a'");
    assert_load_error("deployments:\n  a:\n    rpm: 1\n    aliases: [m]\n  b:\n    rpm: 1\n    aliases: [m]\n",
                      "t.yaml:5: key 'deployments.b.aliases': 'm' already names deployment 'a'");
    assert_load_error("deployments:\n  a:\n    rpm: 1\ngroups:\n  g:\n    members: [a]\n    aliases: [a]\n",
                      "t.yaml:5: key 'groups.g.aliases': 'a' already names deployment 'a'");
    assert_load_error("deployments:\n  a:\n    rpm: 1\n    aliases: [\"has space\"]\n",
                      "t.yaml:4: key 'deployments.a.aliases': item 1 must be 1 to 128 bytes of printable ASCII "
                      "without spaces, got \"has space\"");
}

static void test_name_rule(void **state) {
    (void)state;
    assert_true(config_name_ok("a", 1));
    assert_true(config_name_ok("A-z_0.9:x", 9));
    assert_false(config_name_ok("", 0));
    assert_false(config_name_ok("a b", 3));
    assert_false(config_name_ok("a{b}", 4));
    assert_false(config_name_ok("a\0b", 3));
    char longname[66];
    memset(longname, 'x', sizeof(longname));
    assert_true(config_name_ok(longname, 64));
    assert_false(config_name_ok(longname, 65));
}

/* agent.http.mode, agent.http.clients and deployments.<name>.inject_key:
 * keys read at load, never quoted in a message. */
static void test_client_keys_and_injection(void **state) {
    (void)state;
    setenv("TCP_CLIENT_KEY", "a-client-key-of-20-b", 1);
    setenv("TCP_SHORT_KEY", "short", 1);
    setenv("TCP_PROVIDER_KEY", "sk-provider-0000", 1);
    unsetenv("TCP_UNSET_KEY");
    config *cfg = load_ok(DEPS);
    assert_int_equal(cfg->agent.http.mode, CONFIG_HTTP_GOVERN);
    assert_int_equal(cfg->agent.http.nclients, 0);
    assert_false(cfg->deployments[0].inject_key);
    assert_null(cfg->deployments[0].api_key_);
    config_free(cfg);

    cfg = load_ok("agent:\n  http:\n    mode: observe\n    clients:\n"
                  "      web: { key_env: TCP_CLIENT_KEY, tenant: web, lane: fast }\n"
                  "deployments:\n  d:\n    rpm: 60\n    api_key_env: TCP_PROVIDER_KEY\n    inject_key: true\n");
    assert_int_equal(cfg->agent.http.mode, CONFIG_HTTP_OBSERVE);
    assert_int_equal(cfg->agent.http.nclients, 1);
    assert_string_equal(cfg->agent.http.clients[0].name, "web");
    assert_string_equal(cfg->agent.http.clients[0].tenant, "web");
    assert_string_equal(cfg->agent.http.clients[0].lane, "fast");
    assert_string_equal(cfg->deployments[0].api_key_, "sk-provider-0000");
    assert_ptr_equal(config_http_client_by_key(cfg, "a-client-key-of-20-b", 20), &cfg->agent.http.clients[0]);
    assert_null(config_http_client_by_key(cfg, "a-client-key-of-20-b", 19));
    assert_null(config_http_client_by_key(cfg, "a-client-key-of-20-bb", 21));
    assert_null(config_http_client_by_key(cfg, "b-client-key-of-20-b", 20));
    assert_null(config_http_client_by_key(cfg, "", 0));
    config_free(cfg);

    assert_load_error("agent:\n  http:\n    mode: shadow\n" DEPS,
                      "t.yaml:3: key 'agent.http.mode': must be one of govern, observe, got \"shadow\"");
    assert_load_error("agent:\n  http:\n    clients:\n      web:\n        tenant: web\n" DEPS,
                      "t.yaml:4: key 'agent.http.clients.web.key_env': give either key_env or key_file (exactly one)");
    assert_load_error("agent:\n  http:\n    clients:\n      web:\n        key_env: TCP_CLIENT_KEY\n"
                      "        key_file: /nonexistent\n" DEPS,
                      "t.yaml:6: key 'agent.http.clients.web.key_file': give either key_env or key_file (exactly one)");
    assert_load_error("agent:\n  http:\n    clients:\n      web:\n        key_env: TCP_UNSET_KEY\n" DEPS,
                      "t.yaml:5: key 'agent.http.clients.web.key_env': environment variable TCP_UNSET_KEY is not set");
    /* Too short: the message says so without the key. */
    assert_load_error("agent:\n  http:\n    clients:\n      web:\n        key_env: TCP_SHORT_KEY\n" DEPS,
                      "t.yaml:5: key 'agent.http.clients.web.key_env': the key has 5 bytes; a client key needs at "
                      "least 16");
    assert_load_error(
        "agent:\n  http:\n    clients:\n      web:\n        key_file: /nonexistent/k\n" DEPS,
        "t.yaml:5: key 'agent.http.clients.web.key_file': cannot read \"/nonexistent/k\": No such file or "
        "directory");
    assert_load_error("agent:\n  http:\n    clients:\n      a: { key_env: TCP_CLIENT_KEY }\n"
                      "      b: { key_env: TCP_CLIENT_KEY }\n" DEPS,
                      "t.yaml:5: key 'agent.http.clients.b': the same key as client 'a' (each client needs its own "
                      "key, or the tenant it counts as is ambiguous)");
    assert_load_error("agent:\n  http:\n    clients:\n      web: { key_env: TCP_CLIENT_KEY, tenant: \"a b\" }\n" DEPS,
                      "t.yaml:4: key 'agent.http.clients.web.tenant': invalid name: use 1 to 64 of A-Z a-z 0-9 . _ : "
                      "-, got \"a b\"");
    assert_load_error("deployments:\n  d:\n    rpm: 60\n    inject_key: true\n",
                      "t.yaml:4: key 'deployments.d.inject_key': needs api_key_env: the variable holding the key to "
                      "inject");
    assert_load_error("deployments:\n  d:\n    rpm: 60\n    api_key_env: TCP_UNSET_KEY\n    inject_key: true\n",
                      "t.yaml:4: key 'deployments.d.api_key_env': environment variable TCP_UNSET_KEY is not set");
    /* api_key_env alone (for sluice run) is read later, by sluice run. */
    cfg = load_ok("deployments:\n  d:\n    rpm: 60\n    api_key_env: TCP_UNSET_KEY\n");
    assert_null(cfg->deployments[0].api_key_);
    config_free(cfg);
    assert_load_error("deployments:\n  a: { rpm: 60, api_key_env: TCP_PROVIDER_KEY, inject_key: true }\n"
                      "  b: { rpm: 60 }\ngroups:\n  g:\n    members: [a, b]\n",
                      "t.yaml:5: key 'groups.g.members': 'b' has inject_key false but 'a' has true: the HTTP proxy "
                      "must treat a caller's credentials alike for every member");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_off),
        cmocka_unit_test(test_listeners),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_name_rule),
        cmocka_unit_test(test_client_keys_and_injection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
