/* test_daemon_http: the real sluiced with its HTTP proxy on, against a
 * private redis-server, driven by raw HTTP clients (support/http_client).
 *
 * Proves, on the wire: every route of the three APIs answered in its
 * shape (501 with what the proxy recognised: these deployments have no
 * endpoint, so nothing is forwarded; test_proxy forwards to a provider;
 * 404 for unknown paths and models; 400, 405), aliases, the UNIX
 * socket listener with agent.socket_mode; keep-alive with several
 * requests and pipelined requests answered in order; and the hostile
 * cases, each closing only that client, after each of which the daemon
 * still answers PING on its RESP socket and a good HTTP request: huge
 * headers (431), too many fields (431), an announced or a chunked body
 * too large (413), garbage (400), bad chunking (400), HTTP/2.0 (505), a
 * header trickled byte by byte past header_timeout_ms (408, then
 * closed), a body stalled past body_timeout_ms (408), an idle keep-alive
 * connection past idle_timeout_ms (closed), the connection limit (503,
 * and a new connection works once one is gone), and clients that
 * disconnect or reset mid-request. Also: SIGHUP applies new limits and
 * aliases and keeps the listeners (a changed listen waits for a restart,
 * a bad reload changes nothing), a remote address without allow_remote is
 * refused at file:line:key, SIGTERM drains and removes the socket, and in
 * a build without sanitizers a valgrind-clean session (tests/valgrind.sh).
 * Every wait is on a condition (a response, the close, INFO), bounded. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "http_client.h"

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

static const char deployments[] = "  gpt-4o:\n    rpm: 600\n    tpm: 100000\n    aliases: [gpt-4o-2024-08-06]\n"
                                  "  claude:\n    rpm: 60\n    style: anthropic\n    itpm: 10000\n    otpm: 2000\n";

typedef struct proxyd {
    daemon_proc d;
    int port;
    char http_sock[420];
} proxyd;

/* A daemon with the proxy on a free loopback port and a UNIX socket;
 * http_extra: more lines under agent.http (4 spaces of indent). */
static void start_proxyd(proxyd *p, const char *name, const char *http_extra) {
    daemon_init(&p->d, fx.dir, name);
    p->port = free_tcp_port();
    snprintf(p->http_sock, sizeof(p->http_sock), "%s/http.sock", p->d.dir);
    char agent[1024];
    snprintf(agent, sizeof(agent), "  http:\n    listen: [127.0.0.1:%d, unix:%s]\n%s", p->port, p->http_sock,
             http_extra ? http_extra : "");
    assert_int_equal(daemon_configure(&p->d, &fx, agent, deployments), 0);
    assert_int_equal(daemon_start(&p->d), 0);
}

static void assert_contains(const char *hay, const char *needle) {
    if (!hay || !strstr(hay, needle)) fail_msg("expected to find \"%s\" in:\n%s", needle, hay ? hay : "(null)");
}

static const char chat[] =
    "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"abcdefgh\"}],\"max_tokens\":32}";

/* The daemon serves both sockets: PING on RESP, and a good request on a
 * new HTTP connection is recognised (501: no endpoint; the target and
 * estimate). */
static void assert_alive(const proxyd *p, const char *after) {
    if (!daemon_pings(&p->d)) fail_msg("after %s: sluiced stopped answering PING", after);
    hc_conn c;
    if (hc_connect_tcp(&c, p->port) != 0) fail_msg("after %s: cannot connect to the HTTP port", after);
    hc_response r;
    if (hc_post(&c, "/v1/chat/completions", NULL, chat, &r, 10000) != 0) fail_msg("after %s: no HTTP answer", after);
    char v[64];
    if (r.status != 501 || !hc_header(&r, "x-sluice-target", v, sizeof(v)) || strcmp(v, "gpt-4o"))
        fail_msg("after %s: HTTP %d %s", after, r.status, r.body);
    hc_response_free(&r);
    hc_close(&c);
}

/* ---- routes, keep-alive, pipelining ------------------------------------------------ */

static void test_routes_on_the_wire(void **state) {
    proxyd p;
    start_proxyd(&p, "routes", NULL);
    hc_conn c;
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    static const struct {
        const char *target, *headers, *body;
        int status;
        const char *has;
    } cases[] = {
        {"/v1/chat/completions", NULL, chat, 501,
         "{\"error\":{\"message\":\"sluice's HTTP proxy recognised this request (openai chat/completions, deployment "
         "'gpt-4o', estimate 2 input + 32 output tokens) but deployment 'gpt-4o' has no endpoint in "},
        {"/v1/embeddings", NULL, "{\"model\":\"gpt-4o-2024-08-06\",\"input\":\"abcd\"}", 501,
         "estimate 1 input + 0 output"},
        {"/v1/completions", NULL, "{\"model\":\"gpt-4o\",\"prompt\":\"abcd\",\"max_tokens\":2}", 501, "completions"},
        {"/v1/responses", NULL, "{\"model\":\"gpt-4o\",\"input\":\"abcd\",\"stream\":true}", 501, "streamed"},
        {"/v1/messages", "anthropic-version: 2023-06-01\r\n",
         "{\"model\":\"claude\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}]}", 501,
         "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"sluice's HTTP proxy recognised this "
         "request (anthropic messages, deployment 'claude', estimate 1 input + 100 output tokens)"},
        {"/openai/deployments/gpt-4o/chat/completions?api-version=2024-06-01", "api-key: k\r\n", "{\"messages\":[]}",
         501,
         "{\"error\":{\"code\":\"NotImplemented\",\"message\":\"sluice's HTTP proxy recognised this request (azure "
         "chat/completions, deployment 'gpt-4o'"},
        {"/v1/chat/completions", NULL, "{\"model\":\"gpt-9\"}", 404,
         "\"param\":\"model\",\"code\":\"model_not_found\"}}"},
        {"/v1/messages", NULL, "{\"model\":\"claude-9\",\"max_tokens\":1}", 404,
         "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"model: claude-9\"}}"},
        {"/openai/deployments/nope/embeddings?api-version=1", NULL, "{}", 404, "\"code\":\"DeploymentNotFound\""},
        {"/v1/models", NULL, "{}", 404, "Invalid URL (POST /v1/models)"},
        {"/v1/chat/completions", NULL, "not json", 400, "We could not parse the JSON body"},
        {"/v1/chat/completions", "x-sluice-lane: a b\r\n", chat, 400, "\"param\":\"x-sluice-lane\""},
        {"/v1/chat/completions", "x-sluice-max-wait-ms: 5000\r\nx-sluice-tenant: team-a\r\n", chat, 501, "gpt-4o"},
        {"/v1/chat/completions", "x-sluice-input-tokens: -3\r\n", chat, 400, "\"param\":\"x-sluice-input-tokens\""},
        {"/v1/chat/completions", "x-sluice-input-tokens: 12x\r\n", chat, 400, "must be an integer from 0"},
        {"/v1/chat/completions", "x-sluice-input-tokens: 77\r\n", chat, 501, "estimate 77 input"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hc_response r;
        assert_int_equal(hc_post(&c, cases[i].target, cases[i].headers, cases[i].body, &r, 10000), 0);
        if (r.status != cases[i].status) fail_msg("%s: status %d: %s", cases[i].target, r.status, r.body);
        assert_contains(r.body, cases[i].has);
        char v[64];
        assert_string_equal(hc_header(&r, "content-type", v, sizeof(v)), "application/json");
        assert_string_equal(hc_header(&r, "connection", v, sizeof(v)), "keep-alive");
        hc_response_free(&r);
    }
    /* The estimate and the target, in headers. */
    hc_response r;
    assert_int_equal(
        hc_post(&c, "/v1/messages", NULL,
                "{\"model\":\"claude\",\"system\":\"abcd\",\"max_tokens\":7,\"messages\":[{\"role\":\"user\","
                "\"content\":\"abcdabcd\"}],\"stream\":true}",
                &r, 10000),
        0);
    char v[64];
    assert_string_equal(hc_header(&r, "x-sluice-target", v, sizeof(v)), "claude");
    assert_string_equal(hc_header(&r, "x-sluice-estimate-input", v, sizeof(v)), "3");
    assert_string_equal(hc_header(&r, "x-sluice-estimate-output", v, sizeof(v)), "7");
    assert_string_equal(hc_header(&r, "x-sluice-stream", v, sizeof(v)), "yes");
    hc_response_free(&r);
    /* GET on a route: 405 with Allow. */
    assert_int_equal(hc_send_str(&c, "GET /v1/chat/completions HTTP/1.1\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 10000), 0);
    assert_int_equal(r.status, 405);
    assert_string_equal(hc_header(&r, "allow", v, sizeof(v)), "POST");
    hc_response_free(&r);
    /* Pipelined: three requests in one write, answered in their order. */
    char pipe[2048];
    const char *msgs = "{\"model\":\"claude\",\"max_tokens\":1}";
    const char *emb = "{\"model\":\"gpt-4o\",\"input\":\"abcd\"}"; /* sent in three chunks */
    size_t el = strlen(emb), c1 = 5, c2 = 11;
    int n = snprintf(pipe, sizeof(pipe),
                     "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s"
                     "POST /v1/messages HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s"
                     "POST /v1/embeddings HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "%zx\r\n%.*s\r\n%zx\r\n%.*s\r\n%zx\r\n%s\r\n0\r\n\r\n",
                     strlen(chat), chat, strlen(msgs), msgs, c1, (int)c1, emb, c2, (int)c2, emb + c1, el - c1 - c2,
                     emb + c1 + c2);
    assert_int_equal(hc_send(&c, pipe, (size_t)n), 0);
    const char *order[] = {"gpt-4o", "claude", "gpt-4o"};
    const char *what[] = {"openai chat/completions", "anthropic messages", "openai embeddings"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hc_read_response(&c, &r, 10000), 0);
        if (r.status != 501) fail_msg("pipelined %d: %d %s", i, r.status, r.body);
        assert_string_equal(hc_header(&r, "x-sluice-target", v, sizeof(v)), order[i]);
        assert_contains(r.body, what[i]);
        hc_response_free(&r);
    }
    hc_close(&c);
    /* The UNIX socket listener, with the RESP socket's mode. */
    assert_int_equal(hc_connect_unix(&c, p.http_sock), 0);
    assert_int_equal(hc_post(&c, "/v1/chat/completions", NULL, chat, &r, 10000), 0);
    assert_int_equal(r.status, 501);
    hc_response_free(&r);
    hc_close(&c);
    struct stat st;
    assert_int_equal(stat(p.http_sock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    char *info = daemon_info(&p.d);
    assert_contains(info, "# Http\r\nhttp_listeners:2\r\n");
    assert_contains(info, "http_governing:1\r\n");
    assert_true(info_field(info, "http_no_endpoint") >= 10);
    assert_true(info_field(info, "http_forwarded") == 0);
    assert_true(info_field(info, "http_requests") == 22);
    assert_true(info_field(info, "http_recognised_anthropic") >= 3);
    assert_true(info_field(info, "http_unknown_models") == 3);
    assert_true(info_field(info, "http_unknown_routes") == 1);
    assert_true(info_field(info, "http_connections_total") == 2);
    free(info);
    assert_int_equal(daemon_stop(&p.d), 0);
    /* The drain removed the socket file. */
    assert_int_equal(access(p.http_sock, F_OK), -1);
}

/* ---- hostile clients ------------------------------------------------------------------ */

/* Sends bytes on a new connection, reads the answer; returns its status
 * (0 when none) and whether the server closed the connection after it. */
static int one_shot(const proxyd *p, const char *bytes, size_t len, int *closed, char *body, size_t bodylen) {
    hc_conn c;
    assert_int_equal(hc_connect_tcp(&c, p->port), 0);
    hc_send(&c, bytes, len); /* may fail midway: the server may close first */
    hc_response r;
    int status = hc_read_response(&c, &r, 10000) == 0 ? r.status : 0;
    if (body) snprintf(body, bodylen, "%s", status ? r.body : "");
    if (status) hc_response_free(&r);
    *closed = hc_wait_closed(&c, 10000);
    hc_close(&c);
    return status;
}

static void test_hostile_requests(void **state) {
    proxyd p;
    start_proxyd(&p, "hostile", "    max_header_bytes: 2kb\n    max_body_bytes: 4kb\n");
    char big_header[4096], many[8192], big_body[8192], chunked[8192], body[4096];
    int n = snprintf(big_header, sizeof(big_header), "POST /v1/messages HTTP/1.1\r\nanthropic-version: 1\r\nX-Pad: ");
    memset(big_header + n, 'p', 2100);
    n += 2100;
    n += snprintf(big_header + n, sizeof(big_header) - (size_t)n, "\r\n\r\n");
    int m = snprintf(many, sizeof(many), "POST /v1/chat/completions HTTP/1.1\r\n");
    for (int i = 0; i < 101; i++) m += snprintf(many + m, sizeof(many) - (size_t)m, "h%d: v\r\n", i);
    m += snprintf(many + m, sizeof(many) - (size_t)m, "\r\n");
    int b = snprintf(big_body, sizeof(big_body), "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
    memset(big_body + b, 'x', 5000);
    b += 5000;
    int k = snprintf(chunked, sizeof(chunked),
                     "POST /openai/deployments/gpt-4o/chat/completions?api-version=1 HTTP/1.1\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        k += snprintf(chunked + k, sizeof(chunked) - (size_t)k, "400\r\n");
        memset(chunked + k, 'y', 1024);
        k += 1024;
        k += snprintf(chunked + k, sizeof(chunked) - (size_t)k, "\r\n");
    }
    static const char announce[] = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n";
    static const char garbage[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n";
    static const char bad_chunk[] = "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    static const char bad_chunk2[] = "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                     "5\r\nabcde\r\nfffffffffffffffffffff\r\n";
    static const char te_and_cl[] = "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                                    "Content-Length: 5\r\n\r\n0\r\n\r\n";
    static const char http2[] = "POST /v1/chat/completions HTTP/2.0\r\n\r\n";
    static const char prior[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    static const char space_name[] = "POST /v1/chat/completions HTTP/1.1\r\nBad Name: x\r\n\r\n";
    const struct {
        const char *name, *bytes;
        size_t len;
        int status;
        const char *has;
    } cases[] = {
        {"431 huge header", big_header, 0, 431,
         "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"sluice: request header "
         "fields too large\"}}"},
        {"431 too many fields", many, 0, 431, "\"code\":\"request_header_fields_too_large\""},
        {"413 announced", announce, sizeof(announce) - 1, 413, "\"code\":\"request_too_large\""},
        {"413 body", big_body, 0, 413, "request body too large"},
        {"413 chunked", chunked, 0, 413, "\"code\":\"413\""},
        {"400 garbage", garbage, sizeof(garbage) - 1, 400, "\"type\":\"invalid_request_error\""},
        {"400 bad chunk", bad_chunk, sizeof(bad_chunk) - 1, 400, "invalid character in chunk size header"},
        {"400 chunk overflow", bad_chunk2, sizeof(bad_chunk2) - 1, 400, "sluice: "},
        {"400 TE and CL", te_and_cl, sizeof(te_and_cl) - 1, 400, "unexpected content-length header"},
        {"505 HTTP/2.0", http2, sizeof(http2) - 1, 505, "only HTTP/1.0 and HTTP/1.1 are supported"},
        {"400 HTTP/2 prior knowledge", prior, sizeof(prior) - 1, 400, "invalid HTTP method"},
        {"400 space in a field name", space_name, sizeof(space_name) - 1, 400, "invalid header field name"},
    };
    size_t lens[] = {(size_t)n, (size_t)m, 0, (size_t)b, (size_t)k};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = cases[i].len ? cases[i].len : lens[i];
        int closed;
        int status = one_shot(&p, cases[i].bytes, len, &closed, body, sizeof(body));
        print_message("  %-28s -> %d, %s\n", cases[i].name, status, closed ? "closed" : "NOT CLOSED");
        if (status != cases[i].status)
            fail_msg("%s: status %d, want %d (%s)", cases[i].name, status, cases[i].status, body);
        assert_contains(body, cases[i].has);
        assert_true(closed);
        assert_alive(&p, cases[i].name);
    }
    char *info = daemon_info(&p.d);
    assert_true(info_field(info, "http_refused_too_large") == 5);
    assert_true(info_field(info, "http_refused_bad_request") == 7);
    free(info);
    assert_int_equal(daemon_stop(&p.d), 0);
}

static void test_slow_and_idle_clients(void **state) {
    proxyd p;
    start_proxyd(&p, "slow", "    header_timeout_ms: 600\n    body_timeout_ms: 600\n    idle_timeout_ms: 900\n");
    /* Slowloris: a request head trickled a byte every 50 ms is answered
     * 408 and closed once header_timeout_ms has passed since its first
     * byte, however long the trickle would go on. */
    hc_conn c;
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    const char *head =
        "POST /v1/chat/completions HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    double t0 = now_ms();
    size_t sent = 0;
    while (!c.closed && head[sent] && now_ms() - t0 < 10000) {
        if (hc_send(&c, head + sent, 1) != 0) break;
        sent++;
        hc_read_some(&c, 50); /* the trickle's pace; returns early when the server answers */
        if (c.buf && strstr(c.buf, "\r\n\r\n")) break;
    }
    double answered = now_ms() - t0;
    assert_non_null(c.buf);
    assert_contains(c.buf, "HTTP/1.1 408 Request Timeout");
    assert_contains(c.buf, "request headers not complete in time (agent.http.header_timeout_ms)");
    assert_true(hc_wait_closed(&c, 5000));
    print_message("  slowloris: %zu bytes trickled, 408 after %.0f ms (header_timeout_ms 600)\n", sent, answered);
    assert_true(answered >= 550 && answered < 3000);
    assert_true(head[sent] != '\0');
    hc_close(&c);
    assert_alive(&p, "slowloris");

    /* A body that stalls: 408 after body_timeout_ms. */
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    t0 = now_ms();
    assert_int_equal(hc_send_str(&c, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"model\":"),
                     0);
    hc_response r;
    assert_int_equal(hc_read_response(&c, &r, 10000), 0);
    double took = now_ms() - t0;
    assert_int_equal(r.status, 408);
    assert_contains(r.body, "agent.http.body_timeout_ms");
    hc_response_free(&r);
    assert_true(hc_wait_closed(&c, 5000));
    print_message("  stalled body: 408 after %.0f ms (body_timeout_ms 600)\n", took);
    assert_true(took >= 550);
    hc_close(&c);
    assert_alive(&p, "stalled body");

    /* An idle keep-alive connection is closed after idle_timeout_ms, with
     * no answer. */
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    assert_int_equal(hc_post(&c, "/v1/chat/completions", NULL, chat, &r, 10000), 0);
    hc_response_free(&r);
    t0 = now_ms();
    assert_true(hc_wait_closed(&c, 10000));
    took = now_ms() - t0;
    print_message("  idle keep-alive: closed after %.0f ms (idle_timeout_ms 900)\n", took);
    assert_true(took >= 850 && took < 5000);
    hc_close(&c);
    /* A new connection that sends nothing: closed after header_timeout_ms. */
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    t0 = now_ms();
    assert_true(hc_wait_closed(&c, 10000));
    took = now_ms() - t0;
    assert_true(took >= 550);
    assert_int_equal(c.len, 0);
    hc_close(&c);
    assert_alive(&p, "idle connections");
    char *info = daemon_info(&p.d);
    assert_true(info_field(info, "http_closed_header_timeout") == 2);
    assert_true(info_field(info, "http_closed_body_timeout") == 1);
    assert_true(info_field(info, "http_closed_idle_timeout") >= 1);
    free(info);
    assert_int_equal(daemon_stop(&p.d), 0);
}

static int http_connections_at_most(void *arg) {
    const proxyd *p = arg;
    return info_num(&p->d, "http_connections") <= 3;
}

static void test_connection_limit(void **state) {
    proxyd p;
    start_proxyd(&p, "limit", "    max_connections: 4\n    header_timeout_ms: 60000\n    idle_timeout_ms: 60000\n");
    hc_conn held[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(hc_connect_tcp(&held[i], p.port), 0);
        hc_response r;
        assert_int_equal(hc_post(&held[i], "/v1/chat/completions", NULL, chat, &r, 10000), 0); /* it is in */
        hc_response_free(&r);
    }
    /* The fifth is refused at once, the others are untouched. */
    hc_conn extra;
    assert_int_equal(hc_connect_tcp(&extra, p.port), 0);
    hc_response r;
    assert_int_equal(hc_read_response(&extra, &r, 10000), 0);
    assert_int_equal(r.status, 503);
    assert_contains(r.body, "agent.http.max_connections");
    hc_response_free(&r);
    assert_true(hc_wait_closed(&extra, 5000));
    hc_close(&extra);
    assert_int_equal(hc_post(&held[0], "/v1/chat/completions", NULL, chat, &r, 10000), 0);
    assert_int_equal(r.status, 501);
    hc_response_free(&r);
    if (!daemon_pings(&p.d)) fail_msg("PING failed at the HTTP connection limit");
    /* One goes: a new one is served again. */
    hc_close(&held[3]);
    PROC_POLL_OR_FAIL(http_connections_at_most, &p, 10000, "the closed connection to be gone");
    assert_int_equal(hc_connect_tcp(&extra, p.port), 0);
    assert_int_equal(hc_post(&extra, "/v1/chat/completions", NULL, chat, &r, 10000), 0);
    assert_int_equal(r.status, 501);
    hc_response_free(&r);
    hc_close(&extra);
    for (int i = 0; i < 3; i++) hc_close(&held[i]);
    assert_true(info_num(&p.d, "http_rejected_connections") == 1);
    assert_int_equal(daemon_stop(&p.d), 0);
}

static int gone_at_least(void *arg) {
    const proxyd *p = ((const proxyd **)arg)[0];
    double want = *((const double **)arg)[1];
    return info_num(&p->d, "http_closed_client_gone") >= want && info_num(&p->d, "http_connections") == 0;
}

static void test_clients_disconnecting(void **state) {
    proxyd p;
    start_proxyd(&p, "gone", NULL);
    static const char *const partial[] = {
        "POST /v1/chat/co",                                                                /* mid request line */
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Le",                                /* mid header */
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"model\"",      /* mid body */
        "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", /* mid chunk */
    };
    double want = 0;
    for (size_t i = 0; i < sizeof(partial) / sizeof(partial[0]); i++) {
        for (int reset = 0; reset <= 1; reset++) {
            hc_conn c;
            assert_int_equal(hc_connect_tcp(&c, p.port), 0);
            assert_int_equal(hc_send_str(&c, partial[i]), 0);
            if (reset) {
                /* A reset instead of a close. */
                struct linger lg = {1, 0};
                setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            }
            hc_close(&c);
            want++;
            const void *arg[2] = {&p, &want};
            PROC_POLL_OR_FAIL(gone_at_least, arg, 10000, "the daemon to see the client leave");
            char what[64];
            snprintf(what, sizeof(what), "a %s mid-request (%zu)", reset ? "reset" : "close", i);
            assert_alive(&p, what);
        }
    }
    /* A whole request, then gone before the answer is read. */
    for (int i = 0; i < 20; i++) {
        hc_conn c;
        assert_int_equal(hc_connect_tcp(&c, p.port), 0);
        char req[512];
        int n = snprintf(req, sizeof(req), "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(chat), chat);
        hc_send(&c, req, (size_t)n);
        hc_close(&c);
    }
    assert_alive(&p, "clients gone before their answers");
    assert_int_equal(daemon_stop(&p.d), 0);
}

/* ---- configuration, reload, drain ------------------------------------------------------- */

static void test_config_rules(void **state) {
    daemon_proc d;
    daemon_init(&d, fx.dir, "cfg");
    assert_int_equal(
        daemon_configure(&d, &fx, "  http:\n    listen:\n      - 127.0.0.1:1\n      - 0.0.0.0:8790\n", deployments), 0);
    char out[2048];
    char *argv[] = {(char *)sluiced_path(), "--check-config", d.config, NULL};
    assert_int_equal(run_capture(argv, NULL, out, sizeof(out)), 1);
    assert_contains(out, ":11: key 'agent.http.listen': item 2 (0.0.0.0:8790) is not a loopback address");
    assert_contains(out, "agent.http.allow_remote: true");
    /* A port already taken: the daemon says so and does not start. */
    int port = free_tcp_port();
    int blocker = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(blocker, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(blocker, 1), 0);
    char agent[256];
    snprintf(agent, sizeof(agent), "  http:\n    listen: [127.0.0.1:%d]\n", port);
    assert_int_equal(daemon_configure(&d, &fx, agent, deployments), 0);
    assert_int_not_equal(daemon_start(&d), 0);
    char *log = read_file_all(d.log);
    char want[128];
    snprintf(want, sizeof(want), "agent.http.listen: cannot listen on 127.0.0.1:%d: address already in use", port);
    assert_contains(log, want);
    free(log);
    close(blocker);
}

static int reloads_at_least(void *arg) {
    const proxyd *p = ((const proxyd **)arg)[0];
    double want = *((const double **)arg)[1];
    return info_num(&p->d, "config_reloads_ok") + info_num(&p->d, "config_reloads_failed") >= want;
}

static void reload_with(proxyd *p, const char *http_extra, const char *deps, double n) {
    char agent[1024];
    snprintf(agent, sizeof(agent), "  http:\n    listen: [127.0.0.1:%d, unix:%s]\n%s", p->port, p->http_sock,
             http_extra ? http_extra : "");
    assert_int_equal(daemon_configure(&p->d, &fx, agent, deps), 0);
    assert_int_equal(sluiced_fixture_signal(&p->d, SIGHUP), 0);
    const void *arg[2] = {p, &n};
    PROC_POLL_OR_FAIL(reloads_at_least, arg, 10000, "the reload");
}

static void test_reload(void **state) {
    proxyd p;
    start_proxyd(&p, "reload", NULL);
    char body[3000];
    int n = snprintf(body, sizeof(body), "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"");
    memset(body + n, 'z', 2000);
    n += 2000;
    snprintf(body + n, sizeof(body) - (size_t)n, "\"}]}");
    hc_conn c;
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    hc_response r;
    assert_int_equal(hc_post(&c, "/v1/chat/completions", NULL, body, &r, 10000), 0);
    assert_int_equal(r.status, 501);
    hc_response_free(&r);
    /* A smaller body limit and a new alias apply at once, to the open
     * connection's next request too. */
    char deps2[1024];
    snprintf(deps2, sizeof(deps2), "%s    aliases: [claude-sonnet-4-5]\n", deployments);
    reload_with(&p, "    max_body_bytes: 1kb\n", deps2, 1);
    assert_true(info_num(&p.d, "config_reloads_ok") == 1);
    assert_int_equal(hc_post(&c, "/v1/messages", NULL, "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":3}", &r, 10000),
                     0);
    assert_int_equal(r.status, 501);
    char v[64];
    assert_string_equal(hc_header(&r, "x-sluice-target", v, sizeof(v)), "claude");
    hc_response_free(&r);
    assert_int_equal(hc_post(&c, "/v1/chat/completions", NULL, body, &r, 10000), 0);
    assert_int_equal(r.status, 413);
    hc_response_free(&r);
    hc_close(&c);
    /* A bad reload (a remote address without allow_remote) changes nothing. */
    char agent_bad[1024];
    snprintf(agent_bad, sizeof(agent_bad), "  http:\n    listen: [0.0.0.0:%d]\n", p.port);
    assert_int_equal(daemon_configure(&p.d, &fx, agent_bad, deployments), 0);
    assert_int_equal(sluiced_fixture_signal(&p.d, SIGHUP), 0);
    double two = 2;
    const void *arg[2] = {&p, &two};
    PROC_POLL_OR_FAIL(reloads_at_least, arg, 10000, "the bad reload");
    assert_true(info_num(&p.d, "config_reloads_failed") == 1);
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    assert_int_equal(hc_post(&c, "/v1/messages", NULL, "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":3}", &r, 10000),
                     0);
    assert_int_equal(r.status, 501); /* the alias of the running configuration */
    hc_response_free(&r);
    hc_close(&c);
    /* A changed listen waits for a restart: the old listeners stay. */
    int other = free_tcp_port();
    char agent_new[1024];
    snprintf(agent_new, sizeof(agent_new), "  http:\n    listen: [127.0.0.1:%d]\n", other);
    assert_int_equal(daemon_configure(&p.d, &fx, agent_new, deployments), 0);
    assert_int_equal(sluiced_fixture_signal(&p.d, SIGHUP), 0);
    double three = 3;
    const void *arg3[2] = {&p, &three};
    PROC_POLL_OR_FAIL(reloads_at_least, arg3, 10000, "the third reload");
    char *log = read_file_all(p.d.log);
    assert_contains(log, "reload: agent.http.listen changed; it takes effect at the next restart");
    assert_contains(log, "reload failed, keeping the running configuration");
    assert_contains(log, "key 'agent.http.listen': item 1 (0.0.0.0:");
    free(log);
    assert_alive(&p, "the reloads");
    assert_int_equal(hc_connect_tcp(&c, other), -1);
    assert_int_equal(hc_connect_unix(&c, p.http_sock), 0);
    hc_close(&c);
    assert_int_equal(daemon_stop(&p.d), 0);
}

static void test_sigterm_drains(void **state) {
    proxyd p;
    start_proxyd(&p, "drain", NULL);
    hc_conn idle, partial;
    assert_int_equal(hc_connect_tcp(&idle, p.port), 0);
    hc_response r;
    assert_int_equal(hc_post(&idle, "/v1/chat/completions", NULL, chat, &r, 10000), 0);
    hc_response_free(&r);
    assert_int_equal(hc_connect_unix(&partial, p.http_sock), 0);
    assert_int_equal(hc_send_str(&partial, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\n{"), 0);
    assert_int_equal(sluiced_fixture_signal(&p.d, SIGTERM), 0);
    assert_true(hc_wait_closed(&idle, 10000));
    assert_true(hc_wait_closed(&partial, 10000));
    int st = daemon_wait(&p.d, 15000);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(access(p.http_sock, F_OK), -1);
    hc_conn c;
    assert_int_equal(hc_connect_tcp(&c, p.port), -1);
    hc_close(&idle);
    hc_close(&partial);
}

/* ---- valgrind ------------------------------------------------------------------------------ */

static void test_valgrind_http(void **state) {
    if (!valgrind_usable()) skip();
    proxyd p;
    daemon_init(&p.d, fx.dir, "valgrind");
    p.d.valgrind = 1;
    p.port = free_tcp_port();
    snprintf(p.http_sock, sizeof(p.http_sock), "%s/http.sock", p.d.dir);
    char agent[1024];
    snprintf(agent, sizeof(agent),
             "  http:\n    listen: [127.0.0.1:%d, unix:%s]\n    max_header_bytes: 2kb\n    max_body_bytes: 4kb\n"
             "    header_timeout_ms: 2000\n    max_connections: 8\n",
             p.port, p.http_sock);
    assert_int_equal(daemon_configure(&p.d, &fx, agent, deployments), 0);
    assert_int_equal(daemon_start_args(&p.d, 60000), 0);
    /* Every path of the server: routes and errors, pipelining, refusals
     * (431, 413, 400), a timeout, clients that leave, a reload, the drain
     * with a connection open. */
    hc_conn c;
    hc_response r;
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    const char *targets[] = {"/v1/chat/completions", "/v1/messages", "/v1/models", "/v1/embeddings"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(
            hc_post(&c, targets[i], NULL, i == 1 ? "{\"model\":\"claude\",\"max_tokens\":1}" : chat, &r, 30000), 0);
        hc_response_free(&r);
    }
    hc_close(&c);
    char big[3000];
    int n = snprintf(big, sizeof(big), "POST /v1/chat/completions HTTP/1.1\r\nX: ");
    memset(big + n, 'a', 2500);
    n += 2500;
    n += snprintf(big + n, sizeof(big) - (size_t)n, "\r\n\r\n");
    int closed;
    assert_int_equal(one_shot(&p, big, (size_t)n, &closed, NULL, 0), 431);
    const char announce[] = "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999\r\n\r\n";
    assert_int_equal(one_shot(&p, announce, sizeof(announce) - 1, &closed, NULL, 0), 413);
    assert_int_equal(one_shot(&p, "GARBAGE\r\n\r\n", 11, &closed, NULL, 0), 400);
    assert_int_equal(hc_connect_unix(&c, p.http_sock), 0);
    hc_send_str(&c, "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\n{");
    hc_close(&c);
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    hc_send_str(&c, "POST /v1/chat/comp");
    assert_true(hc_wait_closed(&c, 30000)); /* header_timeout_ms */
    hc_close(&c);
    sluiced_fixture_signal(&p.d, SIGHUP);
    assert_int_equal(hc_connect_tcp(&c, p.port), 0);
    assert_int_equal(hc_post(&c, "/v1/chat/completions", NULL, chat, &r, 30000), 0);
    hc_response_free(&r);
    assert_int_equal(daemon_stop(&p.d), 0);
    hc_close(&c);
    char *vg = read_file_all(p.d.vglog);
    const char *sum = strstr(vg, "ERROR SUMMARY:");
    print_message("  valgrind: %.*s\n", sum ? (int)strcspn(sum, "\n") : 0, sum ? sum : "");
    assert_non_null(sum);
    assert_contains(vg, "ERROR SUMMARY: 0 errors");
    if (!strstr(vg, "All heap blocks were freed")) {
        assert_contains(vg, "definitely lost: 0 bytes");
        assert_contains(vg, "indirectly lost: 0 bytes");
    }
    free(vg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_routes_on_the_wire, test_teardown),
        cmocka_unit_test_teardown(test_hostile_requests, test_teardown),
        cmocka_unit_test_teardown(test_slow_and_idle_clients, test_teardown),
        cmocka_unit_test_teardown(test_connection_limit, test_teardown),
        cmocka_unit_test_teardown(test_clients_disconnecting, test_teardown),
        cmocka_unit_test_teardown(test_config_rules, test_teardown),
        cmocka_unit_test_teardown(test_reload, test_teardown),
        cmocka_unit_test_teardown(test_sigterm_drains, test_teardown),
        cmocka_unit_test_teardown(test_valgrind_http, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
