/* libFuzzer target for the HTTP proxy's request path: raw bytes through
 * the request reader (agent/http_reader.c, over libhttp-parser), each
 * request through the route, the body parse and the estimate
 * (agent/proxy_wire.c, lib/core/estimate.c) against a configuration with
 * every style, aliases, a group and lanes, and every error body in every
 * shape; the same bytes through the SSE usage reader (lib/usage_sse.c).
 *
 * The first byte picks the size of the pieces the rest is fed in, so the
 * fuzzer explores split points too. Checked: no crash, leak or UB; the
 * reader consumes no more than it is given and refuses with a status it
 * documents; an accepted request maps to what config_model says and has
 * a sane estimate, and a credential decision by proxy_auth's rules that
 * quotes no key; a refusal has a known kind and a message; every error
 * body is JSON; and the SSE reader gives the same counts fed in pieces as
 * fed whole. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "http_reader.h"
#include "proxy_auth.h"
#include "proxy_wire.h"
#include "usage_sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CLIENT_KEY "fuzz-client-key-0123456789"
#define FUZZ_PROVIDER_KEY "sk-fuzz-provider-key"

static const char yaml[] =
    "agent:\n  http:\n    clients:\n      c: { key_env: FUZZ_CLIENT_KEY, tenant: t, lane: a }\n"
    "deployments:\n"
    "  gpt-4o:\n    rpm: 600\n    tpm: 100000\n    aliases: [gpt-4o-2024-08-06]\n"
    "    lanes: { a: { priority: 0 }, b: { priority: 1 } }\n    tags: [eu]\n"
    "  mini:\n    rpm: 60\n    style: openai\n"
    "  embed:\n    rpm: 60\n    style: custom\n    api_key_env: FUZZ_PROVIDER_KEY\n    inject_key: true\n"
    "  claude:\n    rpm: 60\n    style: anthropic\n    itpm: 100\n    otpm: 100\n    aliases: [claude-sonnet-4-5]\n"
    "groups:\n  g:\n    members: [gpt-4o, mini]\n    aliases: [gpt-4o-fleet]\n";

static config *cfg;

static void check_json(const resp_buf *b) {
    json_error_t e;
    json_t *j = json_loadb(b->data, b->len, 0, &e);
    if (!json_is_object(j)) abort();
    json_decref(j);
}

static void error_bodies(proxy_error_kind kind, const char *message, const char *param) {
    for (int api = 0; api < 3; api++) {
        resp_buf b;
        resp_buf_init(&b);
        if (proxy_error_body((proxy_api)api, kind, message, param, &b) != 0) abort();
        check_json(&b);
        resp_buf_free(&b);
    }
}

static void one_request(const http_msg *m) {
    proxy_request r;
    proxy_error err;
    memset(&err, 0, sizeof(err));
    if (proxy_parse(cfg, m, &r, &err) == 0) {
        config_target t;
        if (config_model(cfg, r.model, &t) != 0 || t.deployment != r.target.deployment || t.group != r.target.group)
            abort();
        if (!r.name || r.est.input < 0 || r.est.output < 0 || !r.body) abort();
        if (r.route.op == PROXY_OP_EMBEDDINGS && r.est.output != 0) abort();
        error_bodies(PROXY_ERR_NO_ENDPOINT, r.model, NULL);
        /* Credentials: a decision for either listener; an injecting TCP
         * request is served only with the client key; no refusal quotes a
         * key. */
        for (int unix_socket = 0; unix_socket < 2; unix_socket++) {
            proxy_auth a;
            proxy_error ae;
            if (proxy_auth_check(cfg, &r.target, unix_socket, m, &a, &ae) == 0) {
                if (a.inject && !unix_socket && !a.client) abort();
                if (a.client && strcmp(a.client->name, "c") != 0) abort();
                if (!a.inject && a.client) abort();
            } else if (ae.kind != PROXY_ERR_UNAUTHORIZED || strstr(ae.message, FUZZ_CLIENT_KEY) ||
                       strstr(ae.message, FUZZ_PROVIDER_KEY)) {
                abort();
            }
        }
    } else {
        if ((unsigned)err.kind >= PROXY_ERR_KINDS || !memchr(err.message, '\0', sizeof(err.message))) abort();
        if ((unsigned)r.route.api > PROXY_API_ANTHROPIC) abort();
        error_bodies(err.kind, err.message, err.param);
    }
    proxy_request_free(&r);
    /* Accessors over whatever was read. */
    size_t n = http_msg_nheaders(m), len;
    for (size_t i = 0; i < n; i++) {
        const char *name, *value;
        http_msg_header_at(m, i, &name, &value);
        if (!name || !value) abort();
    }
    if (!http_msg_body(m, &len) || !http_msg_path(m) || !http_msg_query(m) || !http_msg_target(m)) abort();
}

static void sse_same(const char *text, size_t len, size_t step) {
    usage_sse *whole = usage_sse_new(), *cut = usage_sse_new();
    if (!whole || !cut) abort();
    usage_sse_feed(whole, text, len);
    for (size_t at = 0; at < len; at += step) usage_sse_feed(cut, text + at, len - at < step ? len - at : step);
    usage_rec a, b;
    usage_sse_state sa, sb;
    int ra = usage_sse_result(whole, &a), rb = usage_sse_result(cut, &b);
    usage_sse_get_state(whole, &sa);
    usage_sse_get_state(cut, &sb);
    if (ra != rb || memcmp(&a, &b, sizeof(a)) || memcmp(&sa, &sb, sizeof(sa))) abort();
    if (ra == 0 && (a.input < 0 || a.output < 0 || a.cache_read > a.input || a.tokens < a.input + a.output)) abort();
    usage_sse_free(whole);
    usage_sse_free(cut);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!cfg) {
        char err[256];
        setenv("FUZZ_CLIENT_KEY", FUZZ_CLIENT_KEY, 1);
        setenv("FUZZ_PROVIDER_KEY", FUZZ_PROVIDER_KEY, 1);
        if (config_load_string("fuzz.yaml", yaml, sizeof(yaml) - 1, &cfg, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_proxy: %s\n", err);
            abort();
        }
    }
    if (size < 1) return 0;
    size_t step = 1 + data[0] % 64;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    static const http_limits lim = {.max_header_bytes = 2048, .max_body_bytes = 65536};
    http_reader *rd = http_reader_new(&lim);
    if (!rd) abort();
    size_t at = 0;
    int requests = 0;
    while (at <= len && requests < 64) {
        size_t n = len - at < step ? len - at : step;
        size_t got = http_reader_feed(rd, text + at, n);
        if (got > n) abort();
        at += got;
        http_reader_state st = http_reader_get_state(rd);
        if (st == HTTP_READER_DONE) {
            http_msg *m = http_reader_take(rd);
            if (!m) abort();
            one_request(m);
            http_msg_free(m);
            requests++;
            continue;
        }
        if (st == HTTP_READER_ERROR) {
            const char *reason;
            int status = http_reader_error(rd, &reason);
            if (status != 400 && status != 413 && status != 431 && status != 500 && status != 505) abort();
            const http_msg *partial = http_reader_current(rd);
            if (partial)
                (void)proxy_api_of(http_msg_path(partial), http_msg_header(partial, "anthropic-version") != NULL);
            error_bodies(proxy_error_kind_of(status), reason, NULL);
            break;
        }
        if (st == HTTP_READER_END || at == len) break;
        if (got < n) abort(); /* short only when done or refused */
    }
    http_reader_free(rd);
    sse_same(text, len, step);
    return 0;
}
