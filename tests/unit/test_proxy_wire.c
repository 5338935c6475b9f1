/* Unit tests for agent/proxy_wire: every route of the three APIs (OpenAI,
 * Azure OpenAI with deployments in the path and the v1 API, Anthropic) to
 * its deployment or group, by name and alias, with the estimate of its
 * body; every refusal with its status and the exact error body in the
 * API's shape (unknown path, method, api-version, body, model, the
 * body-format family, stream options, x-sluice-* headers, lanes and
 * tags); the error builders for 400, 401, 404, 413, 429 (Retry-After in
 * whole seconds rounded up, retry-after-ms) and 5xx in every shape.
 * Requests are real bytes read by http_reader. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http_server.h"
#include "proxy_wire.h"

static config *cfg;

static const char yaml[] =
    "deployments:\n"
    "  gpt-4o:\n    rpm: 600\n    tpm: 100000\n    aliases: [gpt-4o-2024-08-06, openai/gpt-4o]\n"
    "    lanes: { interactive: { priority: 0 }, batch: { priority: 1 } }\n    tags: [eu]\n"
    "  mini:\n    rpm: 600\n    style: openai\n"
    "  embed:\n    rpm: 600\n    style: custom\n    aliases: [text-embedding-3-small]\n"
    "  claude:\n    rpm: 60\n    style: anthropic\n    itpm: 10000\n    otpm: 2000\n    aliases: [claude-sonnet-4-5]\n"
    "groups:\n"
    "  gpt-4o-any:\n    members: [gpt-4o, mini]\n    aliases: [gpt-4o-fleet]\n"
    "  mixed:\n    members: [gpt-4o, claude]\n";

static int setup(void **state) {
    (void)state;
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
    return 0;
}

/* A request as the server would hand it: method, target, extra header
 * lines (each ending in \r\n), body. */
static http_msg *msg(const char *method, const char *target, const char *headers, const char *body) {
    static const http_limits lim = {.max_header_bytes = 32768, .max_body_bytes = 1 << 20};
    char text[16384];
    int n = snprintf(text, sizeof(text), "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\n\r\n%s", method, target,
                     headers ? headers : "", strlen(body), body);
    http_reader *r = http_reader_new(&lim);
    assert_int_equal(http_reader_feed(r, text, (size_t)n), (size_t)n);
    http_msg *m = http_reader_take(r);
    if (!m) fail_msg("the reader refused the test's request: %s", text);
    http_reader_free(r);
    return m;
}

static void parse_ok(const char *method, const char *target, const char *headers, const char *body,
                     proxy_request *out) {
    http_msg *m = msg(method, target, headers, body);
    proxy_error err;
    if (proxy_parse(cfg, m, out, &err) != 0) fail_msg("%s %s refused: %d %s", method, target, err.kind, err.message);
    http_msg_free(m);
}

/* Parses and expects a refusal of kind; returns the error body in the
 * request's shape (the caller frees it). */
static char *parse_refused(const char *method, const char *target, const char *headers, const char *body,
                           proxy_error_kind kind, const char *param) {
    http_msg *m = msg(method, target, headers, body);
    proxy_request r;
    proxy_error err;
    int rc = proxy_parse(cfg, m, &r, &err);
    if (rc == 0) fail_msg("%s %s was accepted, expected kind %d", method, target, kind);
    if (err.kind != kind) fail_msg("%s %s: kind %d (%s), want %d", method, target, err.kind, err.message, kind);
    if (param ? !err.param || strcmp(err.param, param) : err.param != NULL)
        fail_msg("%s %s: param %s, want %s", method, target, err.param ? err.param : "NULL", param ? param : "NULL");
    resp_buf b;
    resp_buf_init(&b);
    assert_int_equal(proxy_error_body(r.route.api, err.kind, err.message, err.param, &b), 0);
    assert_int_equal(resp_buf_append(&b, "", 1), 0);
    proxy_request_free(&r);
    http_msg_free(m);
    return b.data;
}

static void assert_json_field(const char *body, const char *path, const char *want) {
    json_error_t e;
    json_t *j = json_loads(body, 0, &e);
    if (!j) fail_msg("not JSON: %s", body);
    json_t *v = j;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, ".")) v = json_object_get(v, tok);
    if (!want) {
        if (!json_is_null(v)) fail_msg("%s: %s is not null", body, path);
    } else if (!json_is_string(v) || strcmp(json_string_value(v), want)) {
        fail_msg("%s: %s is not \"%s\"", body, path, want);
    }
    json_decref(j);
}

static void test_routes(void **state) {
    (void)state;
    static const struct {
        const char *target, *headers, *body;
        proxy_api api;
        proxy_op op;
        const char *name;
        long long in, out;
    } ok[] = {
        {"/v1/chat/completions", NULL,
         "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"12345678\"}],\"max_tokens\":40}",
         PROXY_API_OPENAI, PROXY_OP_CHAT, "gpt-4o", 4, 40}, /* 8 digits, half a token each */
        {"/v1/completions", NULL, "{\"model\":\"mini\",\"prompt\":\"abcd\",\"max_tokens\":3}", PROXY_API_OPENAI,
         PROXY_OP_COMPLETIONS, "mini", 1, 3},
        {"/v1/embeddings", NULL, "{\"model\":\"text-embedding-3-small\",\"input\":[\"abcd\",\"abcd\"]}",
         PROXY_API_OPENAI, PROXY_OP_EMBEDDINGS, "embed", 2, 0},
        {"/v1/responses", NULL, "{\"model\":\"openai/gpt-4o\",\"input\":\"abcdabcd\",\"max_output_tokens\":9}",
         PROXY_API_OPENAI, PROXY_OP_RESPONSES, "gpt-4o", 2, 9},
        {"/v1/messages", "anthropic-version: 2023-06-01\r\n",
         "{\"model\":\"claude-sonnet-4-5\",\"system\":\"abcd\",\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}],"
         "\"max_tokens\":100}",
         PROXY_API_ANTHROPIC, PROXY_OP_MESSAGES, "claude", 2, 100},
        {"/openai/deployments/gpt-4o/chat/completions?api-version=2024-06-01", NULL, "{\"messages\":[]}",
         PROXY_API_AZURE, PROXY_OP_CHAT, "gpt-4o", 0, 16},
        {"/openai/deployments/gpt-4o-2024-08-06/completions?api-version=2024-06-01", NULL, "{\"prompt\":\"abcd\"}",
         PROXY_API_AZURE, PROXY_OP_COMPLETIONS, "gpt-4o", 1, 16},
        {"/openai/deployments/embed/embeddings?x=1&api-version=2024-06-01", NULL, "{\"input\":\"abcdefgh\"}",
         PROXY_API_AZURE, PROXY_OP_EMBEDDINGS, "embed", 2, 0},
        {"/openai/deployments/gpt%2D4o/responses?api-version=preview", NULL, "{\"input\":\"x\"}", PROXY_API_AZURE,
         PROXY_OP_RESPONSES, "gpt-4o", 1, 16},
        {"/openai/v1/chat/completions", NULL, "{\"model\":\"gpt-4o-fleet\",\"messages\":[]}", PROXY_API_AZURE,
         PROXY_OP_CHAT, "gpt-4o-any", 0, 16},
        {"/openai/v1/completions", NULL, "{\"model\":\"gpt-4o\",\"prompt\":\"x\"}", PROXY_API_AZURE,
         PROXY_OP_COMPLETIONS, "gpt-4o", 1, 16},
        {"/openai/v1/embeddings", NULL, "{\"model\":\"embed\",\"input\":\"x\"}", PROXY_API_AZURE, PROXY_OP_EMBEDDINGS,
         "embed", 1, 0},
        {"/openai/v1/responses", NULL, "{\"model\":\"gpt-4o\",\"input\":\"x\"}", PROXY_API_AZURE, PROXY_OP_RESPONSES,
         "gpt-4o", 1, 16},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        proxy_request r;
        parse_ok("POST", ok[i].target, ok[i].headers, ok[i].body, &r);
        if (r.route.api != ok[i].api || r.route.op != ok[i].op || strcmp(r.name, ok[i].name) ||
            r.est.input != ok[i].in || r.est.output != ok[i].out)
            fail_msg("%s: api %d op %d name %s estimate %lld/%lld", ok[i].target, r.route.api, r.route.op, r.name,
                     r.est.input, r.est.output);
        /* The estimate is estimate.h's on the same body. */
        estimate e;
        estimate_api ea[] = {ESTIMATE_CHAT, ESTIMATE_COMPLETIONS, ESTIMATE_EMBEDDINGS, ESTIMATE_RESPONSES,
                             ESTIMATE_MESSAGES};
        estimate_request(r.body, ea[r.route.op], &e);
        assert_int_equal(e.input, r.est.input);
        assert_int_equal(e.output, r.est.output);
        assert_int_equal(r.split, 1); /* the proxy always books its two parts */
        assert_int_equal(r.max_wait_ms, -1);
        assert_int_equal(r.deadline_ms, -1);
        proxy_request_free(&r);
    }
    proxy_request r;
    parse_ok("POST", "/openai/deployments/gpt%2D4o/chat/completions?api-version=1", NULL, "{}", &r);
    assert_string_equal(r.model, "gpt-4o");
    assert_true(r.route.model_in_path);
    assert_string_equal(r.route.api_version, "1");
    assert_non_null(r.target.deployment);
    proxy_request_free(&r);
    parse_ok("POST", "/v1/chat/completions", NULL, "{\"model\":\"gpt-4o-any\",\"messages\":[]}", &r);
    assert_null(r.target.deployment);
    assert_string_equal(r.target.group->name, "gpt-4o-any");
    proxy_request_free(&r);
}

static void test_unknown_paths(void **state) {
    (void)state;
    char *b = parse_refused("POST", "/v1/models", NULL, "{}", PROXY_ERR_NOT_FOUND, NULL);
    assert_string_equal(b, "{\"error\":{\"message\":\"Invalid URL (POST /v1/models): sluice's proxy serves "
                           "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and /v1/messages\","
                           "\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}");
    free(b);
    /* The Anthropic SDK's other paths, and anything it sends. */
    b = parse_refused("POST", "/v1/messages/count_tokens", NULL, "{}", PROXY_ERR_NOT_FOUND, NULL);
    assert_json_field(b, "type", "error");
    assert_json_field(b, "error.type", "not_found_error");
    free(b);
    b = parse_refused("GET", "/v1/models", "anthropic-version: 2023-06-01\r\n", "", PROXY_ERR_NOT_FOUND, NULL);
    assert_json_field(b, "error.type", "not_found_error");
    free(b);
    b = parse_refused("POST", "/openai/deployments/gpt-4o/images/generations?api-version=1", NULL, "{}",
                      PROXY_ERR_NOT_FOUND, NULL);
    assert_json_field(b, "error.code", "404");
    free(b);
    b = parse_refused("POST", "/openai/deployments/a/b/chat/completions?api-version=1", NULL, "{}", PROXY_ERR_NOT_FOUND,
                      NULL);
    free(b);
    b = parse_refused("POST", "/v1/chat/completions/", NULL, "{}", PROXY_ERR_NOT_FOUND, NULL);
    free(b);
    b = parse_refused("POST", "/", NULL, "{}", PROXY_ERR_NOT_FOUND, NULL);
    free(b);
    /* A route asked with another method. */
    b = parse_refused("GET", "/v1/chat/completions", NULL, "", PROXY_ERR_METHOD, NULL);
    assert_json_field(b, "error.type", "invalid_request_error");
    free(b);
    b = parse_refused("PUT", "/v1/messages", NULL, "{}", PROXY_ERR_METHOD, NULL);
    assert_json_field(b, "error.type", "invalid_request_error");
    assert_json_field(b, "type", "error");
    free(b);
    /* Azure deployments need an api-version. */
    b = parse_refused("POST", "/openai/deployments/gpt-4o/chat/completions", NULL, "{}", PROXY_ERR_BAD_REQUEST,
                      "api-version");
    assert_json_field(b, "error.code", "BadRequest");
    free(b);
    b = parse_refused("POST", "/openai/deployments/gpt-4o/chat/completions?api-version=", NULL, "{}",
                      PROXY_ERR_BAD_REQUEST, "api-version");
    free(b);
    /* Names that decode to what no name may hold. */
    b = parse_refused("POST", "/openai/deployments/a%2Fb/chat/completions?api-version=1", NULL, "{}",
                      PROXY_ERR_MODEL_NOT_FOUND, NULL);
    assert_json_field(b, "error.code", "DeploymentNotFound");
    free(b);
    b = parse_refused("POST", "/openai/deployments/a%2/chat/completions?api-version=1", NULL, "{}",
                      PROXY_ERR_MODEL_NOT_FOUND, NULL);
    free(b);
}

static void test_models(void **state) {
    (void)state;
    char *b = parse_refused("POST", "/v1/chat/completions", NULL, "{\"model\":\"gpt-5\",\"messages\":[]}",
                            PROXY_ERR_MODEL_NOT_FOUND, "model");
    assert_string_equal(b, "{\"error\":{\"message\":\"The model `gpt-5` does not exist or you do not have access to "
                           "it (no deployment, group or alias of that name in sluice's configuration).\",\"type\":"
                           "\"invalid_request_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}");
    free(b);
    b = parse_refused("POST", "/v1/messages", NULL, "{\"model\":\"claude-9\",\"messages\":[],\"max_tokens\":1}",
                      PROXY_ERR_MODEL_NOT_FOUND, "model");
    assert_string_equal(
        b, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"model: claude-9\"}}");
    free(b);
    b = parse_refused("POST", "/openai/deployments/nope/chat/completions?api-version=1", NULL, "{}",
                      PROXY_ERR_MODEL_NOT_FOUND, NULL);
    assert_json_field(b, "error.code", "DeploymentNotFound");
    free(b);
    /* Names are case-sensitive. */
    free(parse_refused("POST", "/v1/chat/completions", NULL, "{\"model\":\"GPT-4o\"}", PROXY_ERR_MODEL_NOT_FOUND,
                       "model"));
    /* A model longer than any name. */
    char body[600];
    snprintf(body, sizeof(body), "{\"model\":\"%0300d\"}", 0);
    free(parse_refused("POST", "/v1/chat/completions", NULL, body, PROXY_ERR_MODEL_NOT_FOUND, "model"));
    free(parse_refused("POST", "/v1/chat/completions", NULL, "{\"model\":\"gpt\\u00004o\"}", PROXY_ERR_MODEL_NOT_FOUND,
                       "model"));
    /* The family of body formats: an Anthropic model on an OpenAI route
     * and back, and a group mixing the two. */
    b = parse_refused("POST", "/v1/chat/completions", NULL, "{\"model\":\"claude\"}", PROXY_ERR_BAD_REQUEST, "model");
    assert_json_field(b, "error.message",
                      "deployment 'claude' speaks the Anthropic Messages API (style anthropic): send this model to "
                      "/v1/messages");
    free(b);
    free(parse_refused("POST", "/v1/messages", NULL, "{\"model\":\"gpt-4o\"}", PROXY_ERR_BAD_REQUEST, "model"));
    free(parse_refused("POST", "/v1/chat/completions", NULL, "{\"model\":\"mixed\"}", PROXY_ERR_BAD_REQUEST, "model"));
    free(parse_refused("POST", "/openai/deployments/claude/chat/completions?api-version=1", NULL, "{}",
                       PROXY_ERR_BAD_REQUEST, "model"));
}

static void test_bodies(void **state) {
    (void)state;
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"", NULL},
        {"{\"model\":", NULL},
        {"[1,2]", NULL},
        {"\"text\"", NULL},
        {"{\"messages\":[]}", "model"},
        {"{\"model\":42}", "model"},
        {"{\"model\":\"\"}", "model"},
        {"{\"model\":\"gpt-4o\",\"stream\":\"yes\"}", "stream"},
        {"{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":7}", "stream_options"},
        {"{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", "stream_options"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *b = parse_refused("POST", "/v1/chat/completions", NULL, bad[i].body, PROXY_ERR_BAD_REQUEST, bad[i].param);
        assert_json_field(b, "error.type", "invalid_request_error");
        free(b);
    }
    proxy_request r;
    parse_ok("POST", "/v1/chat/completions", NULL,
             "{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &r);
    assert_true(r.stream);
    assert_true(r.include_usage);
    proxy_request_free(&r);
    parse_ok("POST", "/v1/chat/completions", NULL, "{\"model\":\"gpt-4o\",\"stream\":null,\"stream_options\":null}",
             &r);
    assert_false(r.stream);
    assert_false(r.include_usage);
    proxy_request_free(&r);
    parse_ok("POST", "/v1/messages", NULL, "{\"model\":\"claude\",\"stream\":true,\"max_tokens\":5}", &r);
    assert_true(r.stream);
    assert_false(r.include_usage);
    assert_true(r.split);
    proxy_request_free(&r);
}

static void test_sluice_headers(void **state) {
    (void)state;
    proxy_request r;
    parse_ok("POST", "/v1/chat/completions",
             "X-Sluice-Lane: batch\r\nx-sluice-tenant: team.a:1\r\nx-sluice-tag: eu\r\nx-sluice-max-wait-ms: 0\r\n"
             "x-sluice-deadline-ms: 604800000\r\n",
             "{\"model\":\"gpt-4o\"}", &r);
    assert_string_equal(r.lane, "batch");
    assert_string_equal(r.tenant, "team.a:1");
    assert_string_equal(r.tag, "eu");
    assert_int_equal(r.max_wait_ms, 0);
    assert_int_equal(r.deadline_ms, 604800000);
    proxy_request_free(&r);
    /* On a group any lane and tag may go (members that have them). */
    parse_ok("POST", "/v1/chat/completions", "x-sluice-lane: bulk\r\nx-sluice-tag: us\r\n",
             "{\"model\":\"gpt-4o-any\"}", &r);
    proxy_request_free(&r);
    static const struct {
        const char *headers, *param;
    } bad[] = {
        {"x-sluice-lane: has space\r\n", "x-sluice-lane"},
        {"x-sluice-lane: \r\n", "x-sluice-lane"},
        {"x-sluice-tenant: a{b}\r\n", "x-sluice-tenant"},
        {"x-sluice-tenant: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", "x-sluice-tenant"},
        {"x-sluice-tag: a\r\nX-Sluice-Tag: b\r\n", "x-sluice-tag"},
        {"x-sluice-max-wait-ms: -1\r\n", "x-sluice-max-wait-ms"},
        {"x-sluice-max-wait-ms: 1.5\r\n", "x-sluice-max-wait-ms"},
        {"x-sluice-max-wait-ms: 604800001\r\n", "x-sluice-max-wait-ms"},
        {"x-sluice-max-wait-ms: 99999999999\r\n", "x-sluice-max-wait-ms"},
        {"x-sluice-deadline-ms: 0\r\n", "x-sluice-deadline-ms"},
        {"x-sluice-deadline-ms: soon\r\n", "x-sluice-deadline-ms"},
        {"x-sluice-lane: bulk\r\n", "x-sluice-lane"},
        {"x-sluice-tag: us\r\n", "x-sluice-tag"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        free(parse_refused("POST", "/v1/chat/completions", bad[i].headers, "{\"model\":\"gpt-4o\"}",
                           PROXY_ERR_BAD_REQUEST, bad[i].param));
    char *b = parse_refused("POST", "/v1/chat/completions", "x-sluice-lane: bulk\r\n", "{\"model\":\"gpt-4o\"}",
                            PROXY_ERR_BAD_REQUEST, "x-sluice-lane");
    assert_json_field(b, "error.message",
                      "unknown lane 'bulk' for deployment 'gpt-4o' (its lanes: interactive, batch)");
    assert_json_field(b, "error.param", "x-sluice-lane");
    free(b);
    /* A lane on a deployment without lanes is an error, as on the socket. */
    free(parse_refused("POST", "/v1/chat/completions", "x-sluice-lane: batch\r\n", "{\"model\":\"mini\"}",
                       PROXY_ERR_BAD_REQUEST, "x-sluice-lane"));
}

/* The builders, in every shape. */
static void test_error_builders(void **state) {
    (void)state;
    static const struct {
        proxy_error_kind kind;
        int status;
        const char *otype, *acode, *antype;
    } rows[] = {
        {PROXY_ERR_BAD_REQUEST, 400, "invalid_request_error", "BadRequest", "invalid_request_error"},
        {PROXY_ERR_UNAUTHORIZED, 401, "invalid_request_error", "401", "authentication_error"},
        {PROXY_ERR_NOT_FOUND, 404, "invalid_request_error", "404", "not_found_error"},
        {PROXY_ERR_TOO_LARGE, 413, "invalid_request_error", "413", "request_too_large"},
        {PROXY_ERR_RATE_LIMITED, 429, "requests", "429", "rate_limit_error"},
        {PROXY_ERR_INTERNAL, 500, "server_error", "InternalServerError", "api_error"},
        {PROXY_ERR_NO_ENDPOINT, 501, "server_error", "NotImplemented", "api_error"},
        {PROXY_ERR_BAD_GATEWAY, 502, "server_error", "BadGateway", "api_error"},
        {PROXY_ERR_GATEWAY_TIMEOUT, 504, "server_error", "GatewayTimeout", "api_error"},
        {PROXY_ERR_UNAVAILABLE, 503, "server_error", "ServiceUnavailable", "overloaded_error"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        assert_int_equal(proxy_error_status(rows[i].kind), rows[i].status);
        for (int api = 0; api < 3; api++) {
            resp_buf b;
            resp_buf_init(&b);
            assert_int_equal(
                proxy_error_body((proxy_api)api, rows[i].kind, "why \"quoted\"\n", api == 2 ? NULL : "p", &b), 0);
            resp_buf_append(&b, "", 1);
            if (api == PROXY_API_OPENAI) {
                assert_json_field(b.data, "error.type", rows[i].otype);
                assert_json_field(b.data, "error.message", "why \"quoted\"\n");
                assert_json_field(b.data, "error.param", "p");
            } else if (api == PROXY_API_AZURE) {
                assert_json_field(b.data, "error.code", rows[i].acode);
                assert_json_field(b.data, "error.message", "why \"quoted\"\n");
            } else {
                assert_json_field(b.data, "type", "error");
                assert_json_field(b.data, "error.type", rows[i].antype);
            }
            resp_buf_free(&b);
        }
    }
    assert_int_equal(proxy_error_kind_of(404), PROXY_ERR_NOT_FOUND);
    assert_int_equal(proxy_error_kind_of(431), PROXY_ERR_HEADERS_TOO_LARGE);
    assert_int_equal(proxy_error_kind_of(408), PROXY_ERR_TIMEOUT);
    assert_int_equal(proxy_error_kind_of(505), PROXY_ERR_VERSION);
    assert_int_equal(proxy_error_kind_of(418), PROXY_ERR_BAD_REQUEST);
    assert_int_equal(proxy_error_kind_of(502), PROXY_ERR_BAD_GATEWAY);
    assert_int_equal(proxy_error_kind_of(504), PROXY_ERR_GATEWAY_TIMEOUT);
    assert_int_equal(proxy_error_kind_of(599), PROXY_ERR_INTERNAL);
    assert_int_equal(proxy_error_kind_of(400), PROXY_ERR_BAD_REQUEST);
}

static void test_shed_answer(void **state) {
    (void)state;
    static const struct {
        long long ms;
        const char *seconds;
    } waits[] = {{0, "0"}, {1, "1"}, {999, "1"}, {1000, "1"}, {1001, "2"}, {61500, "62"}};
    for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
        resp_buf b;
        resp_buf_init(&b);
        http_header h[2];
        proxy_retry_headers st;
        assert_int_equal(proxy_shed_answer(PROXY_API_OPENAI, "tpm", waits[i].ms, &b, h, &st), 2);
        assert_string_equal(h[0].name, "retry-after");
        assert_string_equal(h[0].value, waits[i].seconds);
        assert_string_equal(h[1].name, "retry-after-ms");
        char ms[24];
        snprintf(ms, sizeof(ms), "%lld", waits[i].ms);
        assert_string_equal(h[1].value, ms);
        resp_buf_append(&b, "", 1);
        assert_json_field(b.data, "error.type", "tokens");
        assert_json_field(b.data, "error.code", "rate_limit_exceeded");
        resp_buf_free(&b);
    }
    resp_buf b;
    resp_buf_init(&b);
    http_header h[2];
    proxy_retry_headers st;
    assert_int_equal(proxy_shed_answer(PROXY_API_ANTHROPIC, "otpm", 250, &b, h, &st), 2);
    resp_buf_append(&b, "", 1);
    assert_json_field(b.data, "error.type", "rate_limit_error");
    resp_buf_reset(&b);
    assert_int_equal(proxy_shed_answer(PROXY_API_AZURE, "too_large", -1, &b, h, &st), 0);
    resp_buf_append(&b, "", 1);
    assert_json_field(b.data, "error.code", "429");
    resp_buf_reset(&b);
    assert_int_equal(proxy_shed_answer(PROXY_API_OPENAI, "rpm", 5, &b, h, &st), 2);
    resp_buf_append(&b, "", 1);
    assert_json_field(b.data, "error.type", "requests");
    /* A budget in money: OpenAI's insufficient_quota, the budget, what is
     * left and when it renews; no Retry-After for a total. */
    resp_buf_reset(&b);
    assert_int_equal(proxy_budget_answer(PROXY_API_OPENAI, "team", "day", 1234567, "USD", 61000, &b, h, &st), 2);
    resp_buf_append(&b, "", 1);
    assert_json_field(b.data, "error.type", "insufficient_quota");
    assert_non_null(strstr(b.data, "budget 'team' has 1.234567 USD left this day"));
    assert_non_null(strstr(b.data, "renews in 61 s"));
    assert_string_equal(h[0].value, "61");
    resp_buf_reset(&b);
    assert_int_equal(proxy_budget_answer(PROXY_API_ANTHROPIC, "ci", "total", 0, "EUR", -1, &b, h, &st), 0);
    resp_buf_append(&b, "", 1);
    assert_json_field(b.data, "error.type", "rate_limit_error");
    assert_non_null(strstr(b.data, "it never renews"));
    resp_buf_free(&b);
}

static void test_api_of(void **state) {
    (void)state;
    assert_int_equal(proxy_api_of("/openai/deployments/x", 0), PROXY_API_AZURE);
    assert_int_equal(proxy_api_of("/openai", 1), PROXY_API_AZURE);
    assert_int_equal(proxy_api_of("/v1/messages", 0), PROXY_API_ANTHROPIC);
    assert_int_equal(proxy_api_of("/v1/complete", 0), PROXY_API_ANTHROPIC);
    assert_int_equal(proxy_api_of("/v1/models", 1), PROXY_API_ANTHROPIC);
    assert_int_equal(proxy_api_of("/v1/chat/completions", 1), PROXY_API_OPENAI);
    assert_int_equal(proxy_api_of("/v1/models", 0), PROXY_API_OPENAI);
    assert_int_equal(proxy_api_of("", 0), PROXY_API_OPENAI);
    assert_string_equal(proxy_api_name(PROXY_API_AZURE), "azure");
    assert_string_equal(proxy_op_name(PROXY_OP_MESSAGES), "messages");
}

/* Azure's api-versions that take stream_options: from 2024-09-01(-preview)
 * on, and every form that is not a date. */
static void test_azure_stream_options(void **state) {
    (void)state;
    assert_false(proxy_azure_stream_options("2024-06-01"));
    assert_false(proxy_azure_stream_options("2024-08-01-preview"));
    assert_false(proxy_azure_stream_options("2023-05-15"));
    assert_true(proxy_azure_stream_options("2024-09-01-preview"));
    assert_true(proxy_azure_stream_options("2024-10-21"));
    assert_true(proxy_azure_stream_options("2025-04-01-preview"));
    assert_true(proxy_azure_stream_options(""));
    assert_true(proxy_azure_stream_options("v1"));
    assert_true(proxy_azure_stream_options("preview"));
    assert_true(proxy_azure_stream_options(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_azure_stream_options),
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_unknown_paths),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_bodies),
        cmocka_unit_test(test_sluice_headers),
        cmocka_unit_test(test_error_builders),
        cmocka_unit_test(test_shed_answer),
        cmocka_unit_test(test_api_of),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
