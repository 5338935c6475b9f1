/* Unit tests for agent/proxy_auth: who may spend which provider key
 * through the HTTP proxy. Every combination of listener (TCP, UNIX),
 * target (pass-through, injecting; a deployment, a group), and what the
 * caller presents (nothing, its own provider key, a client key, in each of
 * the three headers), with the decision and that no refusal quotes a key;
 * the upstream header per style. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "http_reader.h"
#include "proxy_auth.h"

#define CHAT_KEY "chat-client-key-0123456789"
#define BATCH_KEY "batch-client-key-abcdefghij"
#define PROVIDER_KEY "sk-provider-secret-zzzz"

static config *cfg;

static int setup(void **state) {
    (void)state;
    setenv("T_CHAT_KEY", CHAT_KEY, 1);
    setenv("T_PROVIDER_KEY", PROVIDER_KEY, 1);
    FILE *f = fopen("test_proxy_auth.key", "w");
    if (!f) return -1;
    fputs(BATCH_KEY "\n", f);
    fclose(f);
    static const char yaml[] =
        "agent:\n"
        "  http:\n"
        "    clients:\n"
        "      chat: { key_env: T_CHAT_KEY, tenant: web, lane: interactive }\n"
        "      batch: { key_file: test_proxy_auth.key }\n"
        "deployments:\n"
        "  passthru: { rpm: 60, style: openai }\n"
        "  injected: { rpm: 60, style: azure, api_key_env: T_PROVIDER_KEY, inject_key: true }\n"
        "  claude: { rpm: 60, style: anthropic, api_key_env: T_PROVIDER_KEY, inject_key: true }\n"
        "  oai: { rpm: 60, style: openai, api_key_env: T_PROVIDER_KEY, inject_key: true }\n"
        "groups:\n"
        "  both: { members: [injected, oai] }\n";
    char err[512];
    if (config_load_string("t.yaml", yaml, strlen(yaml), &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    config_free(cfg);
    remove("test_proxy_auth.key");
    return 0;
}

static http_msg *msg(const char *headers) {
    static const http_limits lim = {.max_header_bytes = 32768, .max_body_bytes = 1 << 20};
    char text[4096];
    int n = snprintf(text, sizeof(text),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: 2\r\n\r\n{}", headers);
    http_reader *r = http_reader_new(&lim);
    assert_int_equal(http_reader_feed(r, text, (size_t)n), (size_t)n);
    http_msg *m = http_reader_take(r);
    if (!m) fail_msg("the reader refused the test's request: %s", text);
    http_reader_free(r);
    return m;
}

static config_target target(const char *model) {
    config_target t;
    if (config_model(cfg, model, &t) != 0) fail_msg("no model %s", model);
    return t;
}

/* Decides; returns 0/-1 and checks that a refusal is 401 and quotes no key. */
static int check(const char *model, int unix_socket, const char *headers, proxy_auth *a) {
    http_msg *m = msg(headers);
    config_target t = target(model);
    proxy_error err;
    int rc = proxy_auth_check(cfg, &t, unix_socket, m, a, &err);
    http_msg_free(m);
    if (rc != 0) {
        assert_int_equal(err.kind, PROXY_ERR_UNAUTHORIZED);
        assert_int_equal(proxy_error_status(err.kind), 401);
        assert_null(strstr(err.message, CHAT_KEY));
        assert_null(strstr(err.message, BATCH_KEY));
        assert_null(strstr(err.message, PROVIDER_KEY));
        assert_null(strstr(err.message, "sk-own"));
    }
    return rc;
}

static void test_pass_through(void **state) {
    (void)state;
    proxy_auth a;
    /* The caller's own key, or none (the provider will say 401): passed on. */
    assert_int_equal(check("passthru", 0, "Authorization: Bearer sk-own-key\r\n", &a), 0);
    assert_false(a.inject);
    assert_null(a.client);
    assert_int_equal(check("passthru", 0, "", &a), 0);
    assert_false(a.inject);
    assert_int_equal(check("passthru", 1, "api-key: sk-own-key\r\n", &a), 0);
    /* A client key is never sent to a provider. */
    assert_int_equal(check("passthru", 0, "Authorization: Bearer " CHAT_KEY "\r\n", &a), -1);
    assert_int_equal(check("passthru", 1, "x-api-key: " BATCH_KEY "\r\n", &a), -1);
}

/* Pass-through forwards every credential header: a client key in any of
 * them is refused, not only in the one that would name the client
 * (docs/security.md: "A sluice client key is never sent to a provider"). */
static void test_pass_through_client_key_anywhere(void **state) {
    (void)state;
    proxy_auth a;
    /* Beside the caller's own key, in another header. */
    assert_int_equal(check("passthru", 0, "Authorization: Bearer sk-own-key\r\napi-key: " CHAT_KEY "\r\n", &a), -1);
    assert_int_equal(check("passthru", 1, "api-key: sk-own-key\r\nx-api-key: " BATCH_KEY "\r\n", &a), -1);
    /* The second of a repeated header. */
    assert_int_equal(check("passthru", 0, "x-api-key: sk-own-key\r\nx-api-key: " CHAT_KEY "\r\n", &a), -1);
    /* Authorization without "Bearer ", or with another scheme. */
    assert_int_equal(check("passthru", 0, "Authorization: " CHAT_KEY "\r\n", &a), -1);
    assert_int_equal(check("passthru", 0, "Authorization: Token " BATCH_KEY "\r\n", &a), -1);
    assert_null(a.client);
    /* The caller's own keys only: still passed on. */
    assert_int_equal(check("passthru", 0, "Authorization: Bearer sk-own-key\r\napi-key: sk-own-2\r\n", &a), 0);
    assert_int_equal(check("passthru", 0, "Authorization: sk-own-key\r\n", &a), 0);
}

static void test_inject_over_tcp(void **state) {
    (void)state;
    proxy_auth a;
    /* No key, a wrong key, a provider key, a near miss: 401. */
    assert_int_equal(check("injected", 0, "", &a), -1);
    assert_int_equal(check("injected", 0, "api-key: sk-own-key\r\n", &a), -1);
    assert_int_equal(check("injected", 0, "api-key: " PROVIDER_KEY "\r\n", &a), -1);
    assert_int_equal(check("injected", 0, "api-key: " CHAT_KEY "x\r\n", &a), -1);
    assert_int_equal(check("injected", 0, "api-key: chat-client-key-012345678\r\n", &a), -1);
    assert_int_equal(check("injected", 0, "Authorization: Basic " CHAT_KEY "\r\n", &a), -1);
    /* A client key in each of the three headers: served as that client. */
    assert_int_equal(check("injected", 0, "Authorization: Bearer " CHAT_KEY "\r\n", &a), 0);
    assert_true(a.inject);
    assert_non_null(a.client);
    assert_string_equal(a.client->name, "chat");
    assert_string_equal(a.client->tenant, "web");
    assert_string_equal(a.client->lane, "interactive");
    assert_int_equal(check("claude", 0, "x-api-key: " BATCH_KEY "\r\n", &a), 0);
    assert_string_equal(a.client->name, "batch");
    assert_string_equal(a.client->tenant, "");
    assert_int_equal(check("oai", 0, "api-key: " CHAT_KEY "\r\n", &a), 0);
    assert_string_equal(a.client->name, "chat");
    /* A group of injecting members. */
    assert_int_equal(check("both", 0, "", &a), -1);
    assert_int_equal(check("both", 0, "authorization: bearer  " BATCH_KEY " \r\n", &a), 0);
    assert_true(a.inject);
    assert_string_equal(a.client->name, "batch");
}

static void test_inject_over_unix(void **state) {
    (void)state;
    proxy_auth a;
    /* The file system is the gate: no key needed, a client key still binds. */
    assert_int_equal(check("injected", 1, "", &a), 0);
    assert_true(a.inject);
    assert_null(a.client);
    assert_int_equal(check("injected", 1, "api-key: sk-own-key\r\n", &a), 0);
    assert_null(a.client);
    assert_int_equal(check("injected", 1, "api-key: " CHAT_KEY "\r\n", &a), 0);
    assert_string_equal(a.client->name, "chat");
}

static void test_upstream_header(void **state) {
    (void)state;
    char buf[256];
    assert_int_equal(proxy_auth_upstream_header(config_deployment(cfg, "injected"), buf, sizeof(buf)),
                     (int)strlen("api-key: " PROVIDER_KEY));
    assert_string_equal(buf, "api-key: " PROVIDER_KEY);
    proxy_auth_upstream_header(config_deployment(cfg, "claude"), buf, sizeof(buf));
    assert_string_equal(buf, "x-api-key: " PROVIDER_KEY);
    proxy_auth_upstream_header(config_deployment(cfg, "oai"), buf, sizeof(buf));
    assert_string_equal(buf, "Authorization: Bearer " PROVIDER_KEY);
    /* No key loaded (pass-through), or no room: nothing, and nothing left behind. */
    assert_int_equal(proxy_auth_upstream_header(config_deployment(cfg, "passthru"), buf, sizeof(buf)), -1);
    char small[12];
    assert_int_equal(proxy_auth_upstream_header(config_deployment(cfg, "injected"), small, sizeof(small)), -1);
    for (size_t i = 0; i < sizeof(small); i++) assert_int_equal(small[i], 0);
    assert_true(proxy_auth_is_credential("Authorization"));
    assert_true(proxy_auth_is_credential("API-KEY"));
    assert_true(proxy_auth_is_credential("x-api-key"));
    assert_false(proxy_auth_is_credential("anthropic-version"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_through),    cmocka_unit_test(test_pass_through_client_key_anywhere),
        cmocka_unit_test(test_inject_over_tcp), cmocka_unit_test(test_inject_over_unix),
        cmocka_unit_test(test_upstream_header),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
