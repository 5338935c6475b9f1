/* test_lib_curl: sl_curl_perform() and the capture pieces against a local
 * HTTP provider (test_lib_harness.h) that answers 200 with usage JSON, 429
 * with Retry-After, 503, quota errors and slow responses, in both modes
 * (embedded engine; a real sluiced, skipped with a message when it is not
 * built). Proves:
 *   - a success settles with the usage the provider reported;
 *   - 503 is retried with backoff, 429 after its Retry-After, a quota
 *     error never (it is settled as quota: the deployment is then shed
 *     "quota"); every retry asks the fleet's retry budget (a group's
 *     member's), which ends the call when spent;
 *   - deadlines are never exceeded (measured), including a slow provider
 *     and a retry loop that runs out of time;
 *   - a 429 with Retry-After pauses the whole fleet once: two governors
 *     (two agents) and seven more workers send nothing until the pause
 *     ends, then all succeed with no further 429;
 *   - the non-blocking capture pieces (for libcurl multi) classify and
 *     settle a response. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "sluice.h"
#include "test_lib_harness.h"

static void deployments(const char *p, char *out, size_t n) {
    snprintf(out, n,
             "  %s-ok:\n    rpm: 60000\n"
             "  %s-retry:\n    rpm: 60000\n"
             "  %s-deadline:\n    rpm: 60000\n"
             "  %s-budget:\n    rpm: 60000\n    retry_budget: { ttl_s: 2, min_per_s: 1, percent: 0 }\n"
             "  %s-fleet:\n    rpm: 60000\n"
             "  %s-quota:\n    rpm: 60000\n"
             "  %s-gm:\n    rpm: 60000\n"
             "  %s-gem:\n    rpm: 60000\n"
             /* Appended under deployments by the harness: the last key. */
             "groups:\n  %s-gw:\n    members: [%s-gm]\n",
             p, p, p, p, p, p, p, p, p, p);
}

static lib_suite S = {.name = "test_lib_curl", .tag = "curl", .deps = deployments, .with_web = 1};

static int group_setup(void **state) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return lib_suite_setup(&S);
}

static int group_teardown(void **state) {
    lib_suite_teardown(&S);
    curl_global_cleanup();
    return 0;
}

static int skip_without_daemon(int mode) { return lib_suite_skip(&S, mode); }

static sl_gov *open_gov(int mode, int which) { return lib_suite_open(&S, mode, which); }

static const char *prefix(int mode) { return mode == EMBEDDED ? "e" : "d"; }

/* One governed POST to path. */
static int call(sl_gov *g, int mode, const char *dep_suffix, const char *path, sl_call_opts *o, sl_call_report *rep) {
    char dep[64], url[256];
    snprintf(dep, sizeof(dep), "%s-%s", prefix(mode), dep_suffix);
    http_url(&S.web, path, url, sizeof(url));
    CURL *easy = curl_easy_init();
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, "{\"model\":\"gpt-4o\",\"messages\":[]}");
    o->deployment = dep;
    int rc = sl_curl_perform(g, easy, o, rep);
    curl_easy_cleanup(easy);
    return rc;
}

static sl_call_opts opts(long long tokens, double deadline_in) {
    sl_call_opts o;
    sl_call_opts_init(&o);
    o.tokens = tokens;
    o.backoff_base_ms = 100;
    o.backoff_cap_ms = 400;
    o.min_attempt_ms = 200;
    o.seed = 7;
    if (deadline_in > 0) o.deadline_ms = sl_now_ms() + (int64_t)deadline_in;
    return o;
}

static int count_status(int status, double *first_at) {
    pthread_mutex_lock(&S.web.mu);
    int n = 0;
    for (size_t i = 0; i < S.web.nlog; i++) {
        if (S.web.log[i].status != status) continue;
        if (n == 0 && first_at) *first_at = S.web.log[i].t_ms;
        n++;
    }
    pthread_mutex_unlock(&S.web.mu);
    return n;
}

/* ---- one call -------------------------------------------------------------------- */

static void success_and_retries(int mode) {
    if (skip_without_daemon(mode)) return;
    sl_gov *g = open_gov(mode, 0);
    sl_call_report rep;
    sl_call_report_init(&rep);

    http_reset(&S.web, 0, 1);
    sl_call_opts o = opts(100, 5000);
    assert_int_equal(call(g, mode, "ok", "/ok", &o, &rep), 0);
    assert_int_equal(rep.attempts, 1);
    assert_int_equal(rep.http_status, 200);
    assert_string_equal(rep.outcome, "ok");
    assert_int_equal(rep.tokens, 42);
    assert_true(rep.within_deadline);
    assert_non_null(rep.body);
    assert_non_null(strstr(rep.body, "chatcmpl-1"));
    assert_int_equal(rep.body_len, strlen(rep.body));
    assert_string_equal(rep.message, "");

    /* 503 once: retried after a full-jitter backoff. */
    http_reset(&S.web, 1, 1);
    o = opts(100, 5000);
    assert_int_equal(call(g, mode, "retry", "/flaky?code=503", &o, &rep), 0);
    assert_int_equal(rep.attempts, 2);
    assert_string_equal(rep.outcome, "ok");

    /* 429 with Retry-After: 1, once: the retry waits at least that long. */
    http_reset(&S.web, 1, 1);
    o = opts(100, 5000);
    double t0 = h_now();
    assert_int_equal(call(g, mode, "retry", "/flaky", &o, &rep), 0);
    double took = h_now() - t0;
    double t429 = 0;
    assert_int_equal(count_status(429, &t429), 1);
    pthread_mutex_lock(&S.web.mu);
    double t200 = S.web.log[S.web.nlog - 1].t_ms;
    pthread_mutex_unlock(&S.web.mu);
    print_message("  [%s] 429 Retry-After 1 s: retried %.0f ms after it, done in %.0f ms, %d attempts\n", prefix(mode),
                  t200 - t429, took, rep.attempts);
    assert_int_equal(rep.attempts, 2);
    assert_true(t200 - t429 >= 1000);
    assert_true(took < 2500);

    /* A quota error is never retried, and says so. It is settled as
     * quota: the deployment is out for the fleet (an hour by default, as
     * the provider gave no reset), so the next call is shed at once. */
    http_reset(&S.web, 0, 1);
    o = opts(100, 5000);
    assert_int_equal(call(g, mode, "quota", "/quota", &o, &rep), SL_EFATAL);
    print_message("  [%s] quota: %s\n", prefix(mode), rep.message);
    assert_int_equal(rep.attempts, 1);
    assert_string_equal(rep.outcome, "quota_exhausted");
    assert_non_null(strstr(rep.message, "insufficient_quota"));
    assert_non_null(strstr(rep.message, "not retryable"));
    /* The settle is on its way in the background: the out is the fleet's
     * once Redis holds it. */
    char qdep[64];
    snprintf(qdep, sizeof(qdep), "%s-quota", prefix(mode));
    h_wait_redis_status(&S.fx, qdep, "quota_out_ms", 1, 3000);
    o = opts(100, 0);
    o.max_wait_ms = 0;
    int rc = call(g, mode, "quota", "/ok", &o, &rep);
    print_message("  [%s] then: %s (%s)\n", prefix(mode), rep.message, rep.outcome);
    assert_int_equal(rc, SL_ESHED);
    assert_string_equal(rep.outcome, "shed");
    assert_non_null(strstr(rep.message, "(quota)"));
    assert_true(rep.retry_after_ms > 3000000);

    /* A group behind one gateway URL: the retry asks the fleet's retry
     * budget of the member (the group has none of its own). */
    http_reset(&S.web, 1, 1);
    o = opts(100, 5000);
    assert_int_equal(call(g, mode, "gw", "/flaky?code=503", &o, &rep), 0);
    assert_int_equal(rep.attempts, 2);

    /* Bodies are bounded. */
    sl_call_opts ob = opts(0, 5000);
    ob.max_body = 1000;
    assert_int_equal(call(g, mode, "ok", "/big?bytes=100000", &ob, &rep), SL_ETOOBIG);
    sl_call_report_free(&rep);
    sl_close(g);
}

static void test_success_and_retries_embedded(void **state) { success_and_retries(EMBEDDED); }
static void test_success_and_retries_daemon(void **state) { success_and_retries(DAEMON); }

static void deadlines(int mode) {
    if (skip_without_daemon(mode)) return;
    sl_gov *g = open_gov(mode, 0);
    sl_call_report rep;
    sl_call_report_init(&rep);
    /* A provider slower than the deadline: the attempt is cut, and there
     * is no time for another. */
    http_reset(&S.web, 0, 1);
    sl_call_opts o = opts(0, 1500);
    int64_t deadline = o.deadline_ms;
    double t0 = h_now();
    int rc = call(g, mode, "deadline", "/slow?ms=4000", &o, &rep);
    double took = h_now() - t0;
    double late = (double)(sl_now_ms() - deadline);
    print_message("  [%s] slow provider: %s after %.0f ms (%.1f ms after the deadline), outcome %s: %s\n", prefix(mode),
                  sl_strerror(rc), took, late, rep.outcome, rep.message);
    assert_int_equal(rc, SL_EDEADLINE);
    assert_true(rep.within_deadline);
    assert_true(late <= DEADLINE_SLACK_MS);
    assert_int_equal(rep.attempts, 1);

    /* A provider that keeps failing: retries stop when the next one would
     * not fit before the deadline. */
    http_reset(&S.web, 0, 1);
    o = opts(0, 1200);
    o.max_attempts = 100;
    deadline = o.deadline_ms;
    rc = call(g, mode, "deadline", "/503", &o, &rep);
    late = (double)(sl_now_ms() - deadline);
    print_message("  [%s] failing provider: %s after %d attempts (%.1f ms before the deadline)\n", prefix(mode),
                  sl_strerror(rc), rep.attempts, -late);
    assert_true(rc == SL_EDEADLINE || rc == SL_ENORETRY);
    assert_true(rep.attempts >= 2);
    assert_true(rep.within_deadline);
    assert_true(late <= DEADLINE_SLACK_MS);

    /* Too little time for even one attempt. */
    o = opts(0, 100);
    assert_int_equal(call(g, mode, "deadline", "/ok", &o, &rep), SL_EDEADLINE);
    assert_int_equal(rep.attempts, 0);
    sl_call_report_free(&rep);
    sl_close(g);
}

static void test_deadlines_embedded(void **state) { deadlines(EMBEDDED); }
static void test_deadlines_daemon(void **state) { deadlines(DAEMON); }

static void retry_budget(int mode) {
    if (skip_without_daemon(mode)) return;
    sl_gov *g = open_gov(mode, 0);
    sl_call_report rep;
    sl_call_report_init(&rep);
    http_reset(&S.web, 0, 1);
    sl_call_opts o = opts(0, 0);
    o.max_attempts = 20;
    o.backoff_base_ms = 20;
    o.backoff_cap_ms = 50;
    /* Budget floor: min_per_s 1 x ttl_s 2 = 2 retries, no successes. */
    int rc = call(g, mode, "budget", "/503", &o, &rep);
    print_message("  [%s] always 503: %s after %d attempts: %s\n", prefix(mode), sl_strerror(rc), rep.attempts,
                  rep.message);
    assert_int_equal(rc, SL_ENORETRY);
    assert_int_equal(rep.attempts, 3);
    assert_string_equal(rep.outcome, "retry_budget");
    assert_true(rep.retry_after_ms > 0);
    sl_call_report_free(&rep);
    sl_close(g);
}

static void test_retry_budget_embedded(void **state) { retry_budget(EMBEDDED); }
static void test_retry_budget_daemon(void **state) { retry_budget(DAEMON); }

/* ---- the fleet pauses once ---------------------------------------------------------- */

typedef struct fleet_worker {
    sl_gov *g;
    int mode, rc;
    sl_call_report rep;
    pthread_t t;
} fleet_worker;

static void *fleet_main(void *arg) {
    fleet_worker *w = arg;
    sl_call_opts o = opts(50, 10000);
    sl_call_report_init(&w->rep);
    w->rc = call(w->g, w->mode, "fleet", "/flaky", &o, &w->rep);
    return NULL;
}

static int saw_429(void *arg) {
    (void)arg;
    return count_status(429, NULL) > 0;
}

static void fleet_pause_once(int mode) {
    if (skip_without_daemon(mode)) return;
    sl_gov *g1 = open_gov(mode, 0), *g2 = open_gov(mode, 1);
    http_reset(&S.web, 1, 1);
    /* The first call meets the 429 (Retry-After: 1) ... */
    enum { N = 8 };
    static fleet_worker w[N];
    memset(w, 0, sizeof(w));
    w[0] = (fleet_worker){.g = g1, .mode = mode};
    pthread_create(&w[0].t, NULL, fleet_main, &w[0]);
    double t429 = 0;
    PROC_POLL_OR_FAIL(saw_429, NULL, 2000, "the provider's 429");
    assert_int_equal(count_status(429, &t429), 1);
    /* Its settle reaches the fleet: Redis holds the pause. */
    char fdep[64];
    snprintf(fdep, sizeof(fdep), "%s-fleet", prefix(mode));
    h_wait_redis_status(&S.fx, fdep, "paused_ms", 1, 2000);
    /* ... then seven more workers on both agents: none sends before the
     * pause ends, and none meets another 429. */
    for (int i = 1; i < N; i++) {
        w[i] = (fleet_worker){.g = (i % 2) ? g2 : g1, .mode = mode};
        pthread_create(&w[i].t, NULL, fleet_main, &w[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(w[i].t, NULL);
    pthread_mutex_lock(&S.web.mu);
    double first_after = 1e18, last = 0;
    int after = 0;
    int total = 0;
    for (size_t i = 0; i < S.web.nlog; i++) {
        if (strncmp(S.web.log[i].path, "/flaky", 6) != 0) continue; /* a slow request of an earlier test */
        total++;
        if (S.web.log[i].t_ms <= t429) continue;
        after++;
        if (S.web.log[i].t_ms < first_after) first_after = S.web.log[i].t_ms;
        if (S.web.log[i].t_ms > last) last = S.web.log[i].t_ms;
    }
    pthread_mutex_unlock(&S.web.mu);
    print_message("  [%s] one 429 (Retry-After 1 s): the fleet's next %d requests went out from +%.0f to +%.0f ms\n",
                  prefix(mode), after, first_after - t429, last - t429);
    for (int i = 0; i < N; i++)
        if (w[i].rc != 0 || w[i].rep.attempts != (i == 0 ? 2 : 1))
            print_message("  worker %d: %s, %d attempts, %s: %s\n", i, sl_strerror(w[i].rc), w[i].rep.attempts,
                          w[i].rep.outcome, w[i].rep.message);
    assert_int_equal(count_status(429, NULL), 1);
    assert_int_equal(total, N + 1);
    assert_true(first_after - t429 >= 990);
    assert_true(last - t429 < 1600); /* paused once, not once per caller */
    for (int i = 0; i < N; i++) {
        assert_int_equal(w[i].rc, 0);
        assert_int_equal(w[i].rep.attempts, i == 0 ? 2 : 1);
        sl_call_report_free(&w[i].rep);
    }
    sl_close(g1);
    sl_close(g2);
}

static void test_fleet_pause_once_embedded(void **state) { fleet_pause_once(EMBEDDED); }
static void test_fleet_pause_once_daemon(void **state) { fleet_pause_once(DAEMON); }

/* ---- Gemini's 429: the pause is in the body ---------------------------------------- */

/* Gemini's 429 RESOURCE_EXHAUSTED carries no Retry-After header; its wait
 * is the body's google.rpc.RetryInfo retryDelay (docs/providers.md,
 * "Gemini API"). The governed call's settle pauses the deployment for the
 * whole fleet by it, as the proxy's does (test_proxy's
 * test_gemini_retry_delay): before, the settle passed the headers only,
 * the fleet never paused and the 429 counted as unexplained. */
static void gemini_retry_delay_pauses_fleet(int mode) {
    if (skip_without_daemon(mode)) return;
    sl_gov *g = open_gov(mode, 0);
    http_reset(&S.web, 1, 3);
    sl_call_opts o = opts(100, 10000);
    o.max_attempts = 1; /* the call ends with the 429; the settle is what is judged */
    sl_call_report rep;
    sl_call_report_init(&rep);
    call(g, mode, "gem", "/flaky?form=gemini", &o, &rep);
    print_message("  [%s] gemini 429: %s, retry_after_ms %lld\n", prefix(mode), rep.outcome, rep.retry_after_ms);
    assert_int_equal(rep.http_status, 429);
    assert_int_equal(rep.retry_after_ms, 3000); /* the verdict read the body's retryDelay */
    char gdep[64];
    snprintf(gdep, sizeof(gdep), "%s-gem", prefix(mode));
    h_wait_redis_status(&S.fx, gdep, "paused_ms", 1, 2000);
    sl_call_report_free(&rep);
    sl_close(g);
}

static void test_gemini_retry_delay_embedded(void **state) { gemini_retry_delay_pauses_fleet(EMBEDDED); }
static void test_gemini_retry_delay_daemon(void **state) { gemini_retry_delay_pauses_fleet(DAEMON); }

/* ---- the pieces for libcurl multi ----------------------------------------------------- */

static void test_capture_pieces(void **state) {
    sl_gov *g = open_gov(EMBEDDED, 0);
    sl_capture *c = NULL;
    assert_int_equal(sl_capture_new(0, &c), 0);
    char url[256];
    http_url(&S.web, "/429?ra=2", url, sizeof(url));
    CURL *easy = curl_easy_init();
    curl_easy_setopt(easy, CURLOPT_URL, url);
    sl_request r;
    sl_request_init(&r);
    r.deployment = "e-ok";
    sl_grant *gr = NULL;
    assert_int_equal(sl_acquire(g, &r, &gr), 0);
    assert_int_equal(sl_capture_attach(c, easy), 0);
    CURLcode cc = curl_easy_perform(easy);
    assert_int_equal(cc, CURLE_OK);
    assert_int_equal(sl_capture_status(c), 429);
    assert_string_equal(sl_capture_header(c, "RETRY-AFTER"), "2");
    assert_null(sl_capture_header(c, "x-nope"));
    const sl_header *hs;
    assert_true(sl_capture_headers(c, &hs) >= 3);
    size_t blen;
    assert_non_null(strstr(sl_capture_body(c, &blen), "rate_limit_exceeded"));
    sl_verdict v;
    sl_verdict_init(&v);
    assert_int_equal(sl_capture_verdict(c, cc, 0, &v), 0);
    assert_int_equal(v.cls, SL_CLASS_RATE_LIMITED);
    assert_int_equal(v.pause_ms, 2000);
    assert_int_equal(v.outcome, SL_OUTCOME_THROTTLED);
    sl_call_opts o = opts(0, 0);
    o.deployment = "e-ok";
    uint64_t rng = 1;
    long long d = sl_backoff_ms(&o, 0, &v, sl_now_ms(), &rng);
    assert_true(d >= 2000 && d <= 2500);
    assert_int_equal(sl_settle_capture(gr, c, cc), 0);
    /* The deployment is paused for the fleet now. */
    sl_request quick;
    sl_request_init(&quick);
    quick.deployment = "e-ok";
    quick.max_wait_ms = 100;
    assert_int_equal(sl_acquire(g, &quick, &gr), SL_ESHED);
    assert_string_equal(sl_shed_reason(g), "paused");
    /* A transport failure: nothing listens there. */
    curl_easy_setopt(easy, CURLOPT_URL, "http://127.0.0.1:1/");
    sl_capture_attach(c, easy);
    cc = curl_easy_perform(easy);
    assert_int_not_equal(cc, CURLE_OK);
    sl_capture_verdict(c, cc, 0, &v);
    assert_int_equal(v.cls, SL_CLASS_TRANSPORT);
    assert_true(v.retryable);
    curl_easy_cleanup(easy);
    sl_capture_free(c);
    sl_capture_free(NULL);
    sl_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_success_and_retries_embedded),
        cmocka_unit_test(test_success_and_retries_daemon),
        cmocka_unit_test(test_deadlines_embedded),
        cmocka_unit_test(test_deadlines_daemon),
        cmocka_unit_test(test_retry_budget_embedded),
        cmocka_unit_test(test_retry_budget_daemon),
        cmocka_unit_test(test_fleet_pause_once_embedded),
        cmocka_unit_test(test_fleet_pause_once_daemon),
        cmocka_unit_test(test_gemini_retry_delay_embedded),
        cmocka_unit_test(test_gemini_retry_delay_daemon),
        cmocka_unit_test(test_capture_pieces),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
