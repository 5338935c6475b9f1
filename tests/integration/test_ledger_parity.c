/* test_ledger_parity: what sluice charged, per request and per dimension,
 * equals what the provider charged, to the token (issue 21).
 *
 * The real sluiced with its HTTP proxy, a private redis-server, and two
 * `sluice mock` providers (one without prompt caching, one that reads 40
 * tokens of every Anthropic prompt from its cache). Each case sends one
 * request at a time and waits for its settle to land in Redis (a
 * condition, not a sleep); then it compares, dimension by dimension:
 *
 *   sluice    the deployment's state in Redis: what the grant charged the
 *             schedule (<dim>_granted, plus <dim>_charged for a count
 *             above the estimate) and what the settle says the provider
 *             counted (<dim>_counted)
 *   provider  the mock's ledger: what the accept charged each bucket
 *             (accept_tokens, accept_input, accept_output), the output
 *             it gave back at the end (output_refund, Anthropic's 2025
 *             rule) or charged at the end (output_adjust, its current
 *             rule: 1 at admission, the output generated at the end)
 *
 * Paths: the proxy's chat completions (Azure, OpenAI), the Responses API,
 * embeddings and Anthropic Messages, streamed and not, with and without
 * cache reads; and the socket (ACQUIRE with TOKENS n and with INPUT/OUTPUT,
 * SETTLE with the usage split), where a combined estimate whose parts are
 * unknown must not be counted twice. Profiles: azure (tpm = prompt + max
 * output), openai (tpm = the larger of them), anthropic (itpm without
 * cache reads, otpm counted as generated: the mock's default, and the
 * profile's output_charge: expected, which charges the schedule the
 * learned expected output rather than the 1 Anthropic takes at admission).
 *
 * The mock counts a prompt as a quarter token per character of its text,
 * as sluice's estimate does for letters and spaces (the prompts here have
 * no digit or punctuation mark, which sluice weighs half a token), so the
 * estimate is exact here and every difference is an accounting rule. The mock draws each completion below
 * max_tokens: a settle that charged the usage instead of max_tokens, or
 * max_tokens twice, shows. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "http_client.h"
#include "mock_fixture.h"

static redis_fixture fx;
static mock_fixture mk;  /* no prompt cache */
static mock_fixture mkc; /* 40 tokens of each Anthropic prompt read from the cache */
static daemon_proc px;   /* sluiced with the proxy */
static int px_port;
static redisContext *rd; /* Redis, to read the deployments' state */

#define CACHE_READ 40

static const char deps_fmt[] =
    "  az:\n    rpm: 60000\n    tpm: 10000000\n    style: azure\n    api_version: 2024-10-21\n"
    "    endpoint: http://127.0.0.1:%d/\n"
    "  oa:\n    rpm: 60000\n    tpm: 10000000\n    style: openai\n    endpoint: http://127.0.0.1:%d\n"
    "  emb:\n    rpm: 60000\n    tpm: 10000000\n    style: openai\n    endpoint: http://127.0.0.1:%d\n"
    "  claude:\n    rpm: 60000\n    style: anthropic\n    itpm: 10000000\n    otpm: 10000000\n"
    "    endpoint: http://127.0.0.1:%d\n"
    "  claude-c:\n    rpm: 60000\n    style: anthropic\n    itpm: 10000000\n    otpm: 10000000\n"
    "    endpoint: http://127.0.0.1:%d\n";

static int group_setup(void **state) {
    (void)state;
    if (!sluiced_path() || !mock_fixture_binary()) return -1;
    if (redis_fixture_start(&fx, 0) != 0) return -1;
    static const char *const args[] = {"--rpm",    "60000",        "--tpm", "10000000", "--itpm", "10000000", "--otpm",
                                       "10000000", "--service-ms", "5-15",  "--seed",   "21",     NULL};
    static const char *const cargs[] = {"--rpm",
                                        "60000",
                                        "--tpm",
                                        "10000000",
                                        "--itpm",
                                        "10000000",
                                        "--otpm",
                                        "10000000",
                                        "--service-ms",
                                        "5-15",
                                        "--seed",
                                        "22",
                                        "--cache-read-tokens",
                                        "40",
                                        NULL};
    if (mock_fixture_start(&mk, args, 10000) != 0) return -1;
    if (mock_fixture_start(&mkc, cargs, 10000) != 0) return -1;
    daemon_init(&px, fx.dir, "parity");
    px_port = free_tcp_port();
    char agent[256], deps[2048];
    snprintf(agent, sizeof(agent), "  http:\n    listen: [127.0.0.1:%d]\n", px_port);
    snprintf(deps, sizeof(deps), deps_fmt, mk.port, mk.port, mk.port, mk.port, mkc.port);
    if (daemon_configure(&px, &fx, agent, deps) != 0 || daemon_start(&px) != 0) return -1;
    if (!daemon_wait_redis(&px, 10000)) return -1;
    rd = redis_fixture_connect(&fx);
    return rd ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    if (rd) redisFree(rd);
    harness_kill_all();
    mock_fixture_stop(&mkc);
    mock_fixture_stop(&mk);
    redis_fixture_stop(&fx);
    return 0;
}

/* ---- the two sides ------------------------------------------------------------------------ */

enum { D_TOKENS, D_INPUT, D_OUTPUT, ND };
static const char *const dim_names[ND] = {"tokens", "input", "output"};

typedef struct sluice_side {
    double granted[ND], charged[ND], counted[ND];
    double settled;
} sluice_side;

typedef struct provider_side {
    double admitted[ND]; /* what the accepts charged each bucket */
    double refunded;     /* output given back at the end (2025 rule) */
    double adjusted;     /* output charged at the end (current rule) */
    double accepted;
} provider_side;

static double state_field(const char *dep, const char *field) {
    redisReply *r = redisCommand(rd, "HGET sluice:{%s}:state %s", dep, field);
    assert_non_null(r);
    double v = r->type == REDIS_REPLY_STRING ? atof(r->str) : 0;
    freeReplyObject(r);
    return v;
}

static sluice_side sluice_read(const char *dep) {
    sluice_side s;
    char f[64];
    for (int k = 0; k < ND; k++) {
        snprintf(f, sizeof(f), "%s_granted", dim_names[k]);
        s.granted[k] = state_field(dep, f);
        snprintf(f, sizeof(f), "%s_charged", dim_names[k]);
        s.charged[k] = state_field(dep, f);
        snprintf(f, sizeof(f), "%s_counted", dim_names[k]);
        s.counted[k] = state_field(dep, f);
    }
    s.settled = state_field(dep, "settled_ok");
    return s;
}

static double json_sum(const json_t *dep, const char *list) {
    const json_t *a = json_object_get(dep, list);
    double sum = 0;
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) sum += json_number_value(v);
    return sum;
}

static provider_side provider_read(const mock_fixture *m, const char *dep) {
    provider_side p = {{0}, 0, 0, 0};
    json_t *st = mock_fixture_stats(m, "");
    assert_non_null(st);
    const json_t *d = json_object_get(json_object_get(st, "deployments"), dep);
    if (d) {
        p.admitted[D_TOKENS] = json_sum(d, "accept_tokens");
        p.admitted[D_INPUT] = json_sum(d, "accept_input");
        p.admitted[D_OUTPUT] = json_sum(d, "accept_output");
        p.refunded = json_sum(d, "output_refund");
        p.adjusted = json_sum(d, "output_adjust");
        p.accepted = json_number_value(json_object_get(d, "accepted"));
    }
    json_decref(st);
    return p;
}

/* Waits until dep has settled `want` grants in Redis (bounded). */
static void wait_settled(const char *dep, double want) {
    double deadline = now_ms() + 15000;
    while (state_field(dep, "settled_ok") < want) {
        if (now_ms() > deadline) fail_msg("%s: the settle did not reach Redis within 15 s", dep);
        sleep_ms(5);
    }
}

/* The comparison of one request: the provider's charge per dimension
 * (admission less the give-back) against what sluice counted, and the
 * admission charge against what sluice's grant charged the schedule for
 * the dimensions charged at admission for good (tokens, and the output's
 * max_tokens before its correction). Dimensions the deployment does not
 * have are 0 on both sides. */
static void compare(const char *what, const char *dep, const sluice_side *s0, const sluice_side *s1,
                    const provider_side *p0, const provider_side *p1, int cached) {
    double prov[ND], adm[ND], counted[ND], sched[ND];
    for (int k = 0; k < ND; k++) {
        adm[k] = p1->admitted[k] - p0->admitted[k];
        prov[k] = adm[k];
        counted[k] = s1->counted[k] - s0->counted[k];
        sched[k] = (s1->granted[k] - s0->granted[k]) + (s1->charged[k] - s0->charged[k]);
    }
    prov[D_OUTPUT] -= p1->refunded - p0->refunded;
    prov[D_OUTPUT] += p1->adjusted - p0->adjusted;
    /* The current rule takes 1 output token at admission, whatever the
     * schedule charged (the expected output): no admission to compare. */
    int generated = p1->adjusted != p0->adjusted;
    if (p1->accepted - p0->accepted != 1)
        fail_msg("%s: the provider accepted %.0f requests", what, p1->accepted - p0->accepted);
    int bad = 0;
    for (int k = 0; k < ND; k++) {
        if (counted[k] != prov[k]) bad = 1;
    }
    /* What the schedule was charged at admission: the whole of tpm (never
     * given back), otpm's max_tokens, itpm's estimate (the cache reads
     * are the provider's own saving, given back at the settle). */
    if (sched[D_TOKENS] != adm[D_TOKENS]) bad = 1;
    if (!generated && (s1->granted[D_OUTPUT] - s0->granted[D_OUTPUT]) != adm[D_OUTPUT]) bad = 1;
    if (generated && adm[D_OUTPUT] != 1) bad = 1;
    if (sched[D_INPUT] != adm[D_INPUT] + (cached ? CACHE_READ : 0)) bad = 1;
    print_message("%-34s %-8s provider t/i/o %6.0f %6.0f %6.0f  sluice counted %6.0f %6.0f %6.0f  schedule %6.0f "
                  "%6.0f %6.0f\n",
                  what, dep, prov[0], prov[1], prov[2], counted[0], counted[1], counted[2], sched[0], sched[1],
                  sched[2]);
    if (bad) fail_msg("%s (%s): sluice's charge differs from the provider's ledger (line above)", what, dep);
}

/* ---- the proxy ------------------------------------------------------------------------------ */

typedef struct pcase {
    const char *what, *dep, *target, *headers, *body;
    int cached; /* sent to the caching provider */
} pcase;

#define AZ_H "api-key: az-key-0123456789\r\n"
#define OA_H "Authorization: Bearer sk-parity-0123456789\r\n"
#define AN_H "x-api-key: an-key-0123456789\r\nanthropic-version: 2023-06-01\r\n"
#define AZ_T "/openai/deployments/az/chat/completions?api-version=2024-10-21"

/* 400 characters of prompt: 100 tokens. */
#define P400                                                                                                           \
    "The fleet sends exactly what the provider accepts  no more and no less  counted the way that provider counts "    \
    "themz Each worker asks for a slot before it sends  every slot comes from one shared budget in Redis  drawn by "   \
    "atomic scripts  so three replicas never offer three times the quotaz Retries are rationed fleet wide and a "      \
    "pause is taken once by the whole fleet  not once by every callerzzzzzzzz"

static void run_case(const pcase *c) {
    const mock_fixture *m = c->cached ? &mkc : &mk;
    sluice_side s0 = sluice_read(c->dep);
    provider_side p0 = provider_read(m, c->dep);
    hc_conn conn;
    assert_int_equal(hc_connect_tcp(&conn, px_port), 0);
    hc_response r;
    assert_int_equal(hc_post(&conn, c->target, c->headers, c->body, &r, 20000), 0);
    if (r.status != 200) fail_msg("%s: HTTP %d: %s", c->what, r.status, r.body ? r.body : "");
    hc_response_free(&r);
    hc_close(&conn);
    wait_settled(c->dep, s0.settled + 1);
    sluice_side s1 = sluice_read(c->dep);
    provider_side p1 = provider_read(m, c->dep);
    compare(c->what, c->dep, &s0, &s1, &p0, &p1, c->cached);
}

static void test_proxy_paths(void **state) {
    (void)state;
    static const pcase cases[] = {
        /* Azure: prompt + max output. */
        {"azure chat", "az", AZ_T, AZ_H,
         "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief\"},{\"role\":\"user\",\"content\":\"" P400
         "\"}],\"max_tokens\":120}",
         0},
        {"azure chat streamed", "az", AZ_T, AZ_H,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"" P400 "\"}],\"max_tokens\":200,\"stream\":true}", 0},
        {"azure chat, no max_tokens", "az", AZ_T, AZ_H,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}", 0},
        {"azure chat, max_completion_tokens", "az", AZ_T, AZ_H,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"" P400 "\"}],\"max_completion_tokens\":33}", 0},
        /* OpenAI: the larger of the prompt and max output. */
        {"openai chat, prompt binds", "oa", "/v1/chat/completions", OA_H,
         "{\"model\":\"oa\",\"messages\":[{\"role\":\"user\",\"content\":\"" P400 P400 "\"}],\"max_tokens\":50}", 0},
        {"openai chat, max_tokens binds", "oa", "/v1/chat/completions", OA_H,
         "{\"model\":\"oa\",\"messages\":[{\"role\":\"user\",\"content\":\"" P400 "\"}],\"max_tokens\":300}", 0},
        {"openai chat streamed", "oa", "/v1/chat/completions", OA_H,
         "{\"model\":\"oa\",\"messages\":[{\"role\":\"user\",\"content\":\"" P400
         "\"}],\"max_tokens\":90,\"stream\":true}",
         0},
        {"openai responses", "oa", "/v1/responses", OA_H,
         "{\"model\":\"oa\",\"instructions\":\"Be brief\",\"input\":\"" P400 "\",\"max_output_tokens\":150}", 0},
        {"openai responses streamed", "oa", "/v1/responses", OA_H,
         "{\"model\":\"oa\",\"input\":[{\"role\":\"user\",\"content\":\"" P400 P400
         "\"}],\"max_output_tokens\":60,\"stream\":true}",
         0},
        {"openai embeddings", "emb", "/v1/embeddings", OA_H, "{\"model\":\"emb\",\"input\":\"" P400 "\"}", 0},
        {"openai embeddings, a list", "emb", "/v1/embeddings", OA_H,
         "{\"model\":\"emb\",\"input\":[\"" P400 "\",\"short one\"]}", 0},
        {"azure embeddings", "az", "/openai/deployments/az/embeddings?api-version=2024-10-21", AZ_H,
         "{\"input\":\"" P400 "\"}", 0},
        /* Anthropic: input at admission (cache reads not counted), output
         * max_tokens corrected to what was generated. */
        {"anthropic messages", "claude", "/v1/messages", AN_H,
         "{\"model\":\"claude\",\"system\":\"Be brief\",\"max_tokens\":180,\"messages\":[{\"role\":\"user\","
         "\"content\":\"" P400 "\"}]}",
         0},
        {"anthropic messages streamed", "claude", "/v1/messages", AN_H,
         "{\"model\":\"claude\",\"max_tokens\":250,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":\"text\",\"text\":\"" P400 "\"}]}]}",
         0},
        {"anthropic messages, cache reads", "claude-c", "/v1/messages", AN_H,
         "{\"model\":\"claude-c\",\"max_tokens\":180,\"messages\":[{\"role\":\"user\",\"content\":\"" P400 "\"}]}", 1},
        {"anthropic streamed, cache reads", "claude-c", "/v1/messages", AN_H,
         "{\"model\":\"claude-c\",\"max_tokens\":75,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":"
         "\"" P400 P400 "\"}]}",
         1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) run_case(&cases[i]);
    /* Every case again, so that each deployment's figures are compared
     * after others were settled too (the sums, not a first request). */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) run_case(&cases[i]);
}

/* ---- the socket ----------------------------------------------------------------------------- */

/* ACQUIRE on the daemon's socket with est (TOKENS n or INPUT i OUTPUT o),
 * the request sent straight to the mock, SETTLE with the usage it
 * reported, split. A combined estimate whose parts are unknown is never
 * counted twice: the schedule keeps n charged, as Azure keeps its
 * estimate, and charges no more. */
static void socket_case(const char *what, const char *est, long long max_tokens) {
    const char *dep = "az";
    sluice_side s0 = sluice_read(dep);
    provider_side p0 = provider_read(&mk, dep);
    redisContext *c = daemon_connect(&px);
    assert_non_null(c);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "ACQUIRE %s %s", dep, est);
    redisReply *g = redisCommand(c, cmd);
    assert_non_null(g);
    if (g->type != REDIS_REPLY_ARRAY || g->elements < 3)
        fail_msg("%s: ACQUIRE answered %s", what, g->str ? g->str : "?");
    char id[96];
    snprintf(id, sizeof(id), "%s", g->element[0]->str);
    freeReplyObject(g);

    char body[1024];
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"" P400 "\"}],\"max_tokens\":%lld}",
             max_tokens);
    hc_conn conn;
    assert_int_equal(hc_connect_tcp(&conn, mk.port), 0);
    hc_response r;
    assert_int_equal(hc_post(&conn, AZ_T, AZ_H, body, &r, 20000), 0);
    assert_int_equal(r.status, 200);
    json_t *resp = json_loads(r.body, 0, NULL);
    assert_non_null(resp);
    json_t *u = json_object_get(resp, "usage");
    long long pt = json_integer_value(json_object_get(u, "prompt_tokens"));
    long long ct = json_integer_value(json_object_get(u, "completion_tokens"));
    json_decref(resp);
    hc_response_free(&r);
    hc_close(&conn);
    assert_true(ct < max_tokens); /* the mock drew below max_tokens: a double count would show */

    redisReply *s = redisCommand(c, "SETTLE %s INPUT %lld OUTPUT %lld", id, pt, ct);
    assert_non_null(s);
    assert_int_not_equal(s->type, REDIS_REPLY_ERROR);
    freeReplyObject(s);
    redisFree(c);
    wait_settled(dep, s0.settled + 1);
    sluice_side s1 = sluice_read(dep);
    provider_side p1 = provider_read(&mk, dep);
    double sched = (s1.granted[D_TOKENS] - s0.granted[D_TOKENS]) + (s1.charged[D_TOKENS] - s0.charged[D_TOKENS]);
    double adm = p1.admitted[D_TOKENS] - p0.admitted[D_TOKENS];
    print_message("%-34s %-8s provider tokens %6.0f  sluice's schedule %6.0f (usage %lld + %lld)\n", what, dep, adm,
                  sched, pt, ct);
    if (sched != adm) fail_msg("%s: the schedule was charged %.0f tokens, the provider %.0f", what, sched, adm);
}

static void test_socket_paths(void **state) {
    (void)state;
    /* The caller's estimate equals the provider's: 100 prompt + 200. */
    socket_case("socket TOKENS (parts unknown)", "TOKENS 300", 200);
    socket_case("socket INPUT/OUTPUT", "INPUT 100 OUTPUT 200", 200);
    socket_case("socket TOKENS again", "TOKENS 300", 200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proxy_paths),
        cmocka_unit_test(test_socket_paths),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
