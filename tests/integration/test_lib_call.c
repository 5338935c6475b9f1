/* test_lib_call: the asynchronous governed call (sl_caller, sl_call_start)
 * on a libuv loop through the adapter of sluice_uv.h, against the local
 * HTTP provider of test_lib_harness.h and a real Redis, embedded and
 * through a real sluiced (two, for the fleet). Judged by what the provider
 * logged and by Redis' own status of each deployment (settled_*,
 * outstanding_grants, retries_refused), never by sleeping. Proves:
 *   - many calls run at once on one loop (a request given as url, headers
 *     and body, or as your easy handle, whose CURLOPT_PRIVATE is kept), the
 *     report has the usage split, the hooks run once per attempt, and a
 *     prepare hook that refuses gives the slot back;
 *   - the deadline is kept (a slow provider, a failing one, no time at
 *     all), with other calls on the same loop meanwhile, and also when the
 *     governor's thread is stalled and answers nothing, in both forms;
 *   - the fleet's retry budget ends the retries, fleet-wide: once one agent
 *     spent it, the other's first RETRY is refused;
 *   - cancelling while waiting for a slot, mid-send (request written:
 *     settled failed; still connecting: cancelled) and mid-backoff leaves no
 *     grant outstanding; AFTER_SEND lets the attempt finish;
 *   - every Retry-After form (delay-seconds, HTTP-date, retry-after-ms) is
 *     waited, at least the time asked for;
 *   - insufficient_quota is never retried and settles as quota;
 *   - retry_shed waits a shed's hint and asks again;
 *   - sl_caller_free with calls in every state runs no callback and leaves
 *     nothing outstanding;
 *   - the loop interface needs nothing of libuv: a poll(2) loop of the
 *     test's own runs eight calls whose backoffs overlap on one timer. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <uv.h>

#include "loop.h"
#include "sluice.h"
#include "sluice_uv.h"
#include "test_lib_harness.h"

static void deployments(const char *p, char *out, size_t n) {
    snprintf(out, n,
             "  %s-ok:\n    rpm: 60000\n"
             "  %s-deadline:\n    rpm: 60000\n"
             "  %s-budget:\n    rpm: 60000\n    retry_budget: { ttl_s: 2, min_per_s: 1, percent: 0 }\n"
             "  %s-wait:\n    rpm: 6\n    burst: {requests: 1}\n    max_wait_ms: 60000\n"
             "  %s-send:\n    rpm: 60000\n"
             "  %s-backoff:\n    rpm: 60000\n"
             "  %s-ra-s:\n    rpm: 60000\n"
             "  %s-ra-date:\n    rpm: 60000\n"
             "  %s-ra-ms:\n    rpm: 60000\n"
             "  %s-quota:\n    rpm: 60000\n"
             "  %s-shed:\n    rpm: 120\n    burst: {requests: 1}\n"
             "  %s-free:\n    rpm: 6\n    burst: {requests: 1}\n    max_wait_ms: 60000\n"
             "  %s-free429:\n    rpm: 60000\n",
             p, p, p, p, p, p, p, p, p, p, p, p, p);
}

static lib_suite S = {.name = "test_lib_call", .tag = "call", .deps = deployments, .with_web = 1};

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

/* ---- one loop, one caller --------------------------------------------------------- */

typedef struct env {
    int mode;
    uv_loop_t loop;
    sl_gov *g;
    sl_caller *c;
} env;

static void env_open(env *e, int mode, int which) {
    memset(e, 0, sizeof(*e));
    e->mode = mode;
    assert_int_equal(uv_loop_init(&e->loop), 0);
    e->g = open_gov(mode, which);
    assert_int_equal(sl_caller_new(e->g, &e->c), 0);
    assert_int_equal(sl_uv_attach(e->c, &e->loop), 0);
}

/* Frees the caller, runs the loop until the adapter's handles are closed
 * (uv_run returns when nothing is left), closes the governor. */
static void env_close(env *e) {
    sl_caller_free(e->c);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    sl_close(e->g);
}

static void on_tick(uv_timer_t *t) { (void)t; }

/* loop_run_until() with a 5 ms tick, for conditions the loop does not
 * signal (the provider's log, Redis' status). */
static int run_until(env *e, int (*pred)(void *), void *arg, int ms) {
    uv_timer_t tick;
    uv_timer_init(&e->loop, &tick);
    uv_timer_start(&tick, on_tick, 5, 5);
    int ok = loop_run_until(&e->loop, pred, arg, (uint64_t)ms);
    uv_timer_stop(&tick);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(&e->loop, UV_RUN_NOWAIT);
    return ok;
}

#define RUN_UNTIL_OR_FAIL(e, pred, arg, ms, what)                                                                      \
    do {                                                                                                               \
        if (!run_until((e), (pred), (arg), (ms))) fail_msg("timed out after %d ms waiting for %s", (ms), (what));      \
    } while (0)

/* What one call did, as its callbacks saw it. */
typedef struct result {
    int done, status, prepared, attempted, state_in_cb;
    int64_t done_at;
    sl_call_report rep;
    sl_call *call;
    int prepare_rc;     /* what the prepare hook returns */
    int hook_cancel_rc; /* sl_call_cancel's from the attempted hook */
    int cancel_in_prepare;
} result;

static int is_done(void *arg) { return ((result *)arg)->done; }

static void on_done(void *arg, sl_call *call, int status, sl_call_report *rep) {
    result *r = arg;
    assert_int_equal(r->done, 0);
    r->done = 1;
    r->done_at = sl_now_ms();
    r->status = status;
    r->state_in_cb = sl_call_state(call);
    r->rep = *rep;
    rep->body = NULL; /* ours now */
}

static int on_prepare(void *arg, sl_call *call, const sl_grant *grant, void *easy) {
    result *r = arg;
    assert_non_null(grant);
    assert_non_null(easy);
    r->prepared++;
    if (r->cancel_in_prepare) assert_int_equal(sl_call_cancel(call, SL_CANCEL_NOW), 0);
    return r->prepare_rc;
}

static void on_attempted(void *arg, sl_call *call, const sl_verdict *v, int curl_code) {
    (void)call, (void)v, (void)curl_code;
    ((result *)arg)->attempted++;
}

static void result_free(result *r) { sl_call_report_free(&r->rep); }

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

/* Starts a governed POST of path on deployment <mode>-<suffix>, as url,
 * headers and body (the call's own easy handle). */
static void start(env *e, const char *suffix, const char *path, sl_call_opts *o, result *r) {
    memset(r, 0, sizeof(*r));
    char dep[64], url[256];
    snprintf(dep, sizeof(dep), "%s-%s", prefix(e->mode), suffix);
    http_url(&S.web, path, url, sizeof(url));
    static const sl_header hdrs[] = {{"Content-Type", "application/json"}};
    static const char body[] = "{\"model\":\"gpt-4o\",\"messages\":[]}";
    sl_call_http h;
    sl_call_http_init(&h);
    h.url = url;
    h.headers = hdrs;
    h.nheaders = 1;
    h.body = body;
    h.body_len = strlen(body);
    h.prepare = on_prepare;
    h.attempted = on_attempted;
    o->deployment = dep;
    int rc = sl_call_start(e->c, o, &h, on_done, r, &r->call);
    if (rc != 0) fail_msg("sl_call_start: %s", sl_strerror(rc));
    /* Never from within the call that caused it. */
    assert_int_equal(r->done, 0);
}

static void run_done(env *e, result *r, int ms) { RUN_UNTIL_OR_FAIL(e, is_done, r, ms, "the call's callback"); }

/* ---- the provider's log and Redis' view ------------------------------------------------ */

typedef struct path_count {
    const char *prefix;
    int at_least;
} path_count;

static int count_path(const char *p) {
    pthread_mutex_lock(&S.web.mu);
    int n = 0;
    for (size_t i = 0; i < S.web.nlog; i++) n += strncmp(S.web.log[i].path, p, strlen(p)) == 0;
    pthread_mutex_unlock(&S.web.mu);
    return n;
}

static int provider_saw(void *arg) {
    path_count *pc = arg;
    return count_path(pc->prefix) >= pc->at_least;
}

static long long status_of(int mode, const char *suffix, const char *field) {
    char dep[64];
    snprintf(dep, sizeof(dep), "%s-%s", prefix(mode), suffix);
    return h_redis_status(&S.fx, dep, field);
}

/* Waits until Redis' field of <mode>-<suffix> equals want (a settle on its
 * way in the background reaching the fleet). */
typedef struct status_is {
    int mode;
    const char *suffix, *field;
    long long want;
} status_is;

static int status_reached(void *arg) {
    status_is *s = arg;
    return status_of(s->mode, s->suffix, s->field) == s->want;
}

static void wait_status(int mode, const char *suffix, const char *field, long long want) {
    status_is s = {mode, suffix, field, want};
    if (!proc_poll(status_reached, &s, 5000))
        fail_msg("timed out waiting for %s-%s %s == %lld in Redis (it is %lld)", prefix(mode), suffix, field, want,
                 status_of(mode, suffix, field));
}

typedef struct state_is {
    result *r;
    int state;
} state_is;

static int call_in_state(void *arg) {
    state_is *s = arg;
    return !s->r->done && sl_call_state(s->r->call) == s->state;
}

/* ---- many at once ------------------------------------------------------------------------ */

static void many_calls_one_loop(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    enum { N = 24 };
    static result r[N];
    static CURL *easy[N / 2];
    char url[256], dep[64];
    http_url(&S.web, "/ok", url, sizeof(url));
    snprintf(dep, sizeof(dep), "%s-ok", prefix(mode));
    int sentinel = 0;
    for (int i = 0; i < N; i++) {
        sl_call_opts o = opts(0, 10000);
        o.input_tokens = 30;
        o.output_tokens = 20;
        if (i % 2) {
            start(&e, "ok", "/ok", &o, &r[i]);
            continue;
        }
        /* Your own easy handle: set up by you, with your CURLOPT_PRIVATE. */
        memset(&r[i], 0, sizeof(r[i]));
        CURL *h = easy[i / 2] = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"model\":\"gpt-4o\",\"messages\":[]}");
        curl_easy_setopt(h, CURLOPT_PRIVATE, &sentinel);
        sl_call_http hh;
        sl_call_http_init(&hh);
        hh.easy = h;
        hh.prepare = on_prepare;
        hh.attempted = on_attempted;
        o.deployment = dep;
        assert_int_equal(sl_call_start(e.c, &o, &hh, on_done, &r[i], &r[i].call), 0);
    }
    /* All in progress at once: nothing blocks the loop. */
    path_count pc = {"/ok", N};
    RUN_UNTIL_OR_FAIL(&e, provider_saw, &pc, 10000, "every request at the provider");
    for (int i = 0; i < N; i++) run_done(&e, &r[i], 10000);
    for (int i = 0; i < N; i++) {
        if (r[i].status != 0) fail_msg("call %d: %s: %s", i, sl_strerror(r[i].status), r[i].rep.message);
        assert_int_equal(r[i].state_in_cb, SL_CALL_DONE);
        assert_int_equal(r[i].rep.attempts, 1);
        assert_int_equal(r[i].prepared, 1);
        assert_int_equal(r[i].attempted, 1);
        assert_int_equal(r[i].rep.http_status, 200);
        assert_string_equal(r[i].rep.outcome, "ok");
        assert_int_equal(r[i].rep.tokens, 42);
        assert_int_equal(r[i].rep.input_tokens, 30);
        assert_int_equal(r[i].rep.output_tokens, 12);
        assert_string_equal(r[i].rep.deployment, dep);
        assert_true(r[i].rep.within_deadline);
        assert_non_null(r[i].rep.body);
        assert_non_null(strstr(r[i].rep.body, "chatcmpl-1"));
        result_free(&r[i]);
    }
    for (int i = 0; i < N / 2; i++) {
        void *priv = NULL;
        curl_easy_getinfo(easy[i], CURLINFO_PRIVATE, (char **)&priv);
        assert_ptr_equal(priv, &sentinel);
        curl_easy_cleanup(easy[i]);
    }
    assert_int_equal(count_path("/ok"), N);

    /* 503 once: retried, the hooks run per attempt. */
    http_reset(&S.web, 1, 1);
    result f;
    sl_call_opts o = opts(0, 10000);
    start(&e, "ok", "/flaky?code=503", &o, &f);
    run_done(&e, &f, 10000);
    assert_int_equal(f.status, 0);
    assert_int_equal(f.rep.attempts, 2);
    assert_int_equal(f.rep.retries, 1);
    assert_int_equal(f.prepared, 2);
    assert_int_equal(f.attempted, 2);
    result_free(&f);

    /* A prepare hook that refuses: nothing is sent, the slot goes back. */
    long long cancelled = status_of(mode, "ok", "settled_cancelled");
    http_reset(&S.web, 0, 1);
    o = opts(0, 10000);
    memset(&f, 0, sizeof(f));
    f.prepare_rc = SL_EINVAL;
    char u2[256];
    http_url(&S.web, "/ok", u2, sizeof(u2));
    sl_call_http h;
    sl_call_http_init(&h);
    h.url = u2;
    h.prepare = on_prepare;
    o.deployment = dep;
    assert_int_equal(sl_call_start(e.c, &o, &h, on_done, &f, &f.call), 0);
    run_done(&e, &f, 10000);
    assert_int_equal(f.status, SL_EINVAL);
    assert_int_equal(f.rep.attempts, 0);
    assert_non_null(strstr(f.rep.message, "prepare hook"));
    result_free(&f);
    /* Cancelled from within the hook: the same, as SL_ECANCELED. */
    memset(&f, 0, sizeof(f));
    f.cancel_in_prepare = 1;
    assert_int_equal(sl_call_start(e.c, &o, &h, on_done, &f, &f.call), 0);
    run_done(&e, &f, 10000);
    assert_int_equal(f.status, SL_ECANCELED);
    assert_int_equal(f.rep.attempts, 0);
    result_free(&f);
    wait_status(mode, "ok", "settled_cancelled", cancelled + 2);
    assert_int_equal(count_path("/ok"), 0);
    env_close(&e);
}

static void test_many_calls_embedded(void **state) { many_calls_one_loop(EMBEDDED); }
static void test_many_calls_daemon(void **state) { many_calls_one_loop(DAEMON); }

/* ---- the deadline ------------------------------------------------------------------------ */

static void deadline_kept(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    /* At once on one loop: a provider slower than the deadline, one that
     * keeps failing, and a call with no time for even one attempt. */
    result slow, failing, none;
    sl_call_opts os = opts(0, 1500), of = opts(0, 1200), on = opts(0, 100);
    of.max_attempts = 100;
    start(&e, "deadline", "/slow?ms=4000", &os, &slow);
    start(&e, "deadline", "/503", &of, &failing);
    start(&e, "deadline", "/ok", &on, &none);
    run_done(&e, &none, 5000);
    run_done(&e, &failing, 5000);
    run_done(&e, &slow, 5000);

    double late = (double)(slow.done_at - os.deadline_ms);
    print_message("  [%s] slow provider: %s %.0f ms after the deadline: %s\n", prefix(mode), sl_strerror(slow.status),
                  late, slow.rep.message);
    assert_int_equal(slow.status, SL_EDEADLINE);
    assert_int_equal(slow.rep.attempts, 1);
    assert_true(slow.rep.within_deadline);
    assert_true(late <= DEADLINE_SLACK_MS);

    late = (double)(failing.done_at - of.deadline_ms);
    print_message("  [%s] failing provider: %s after %d attempts, %.0f ms before the deadline\n", prefix(mode),
                  sl_strerror(failing.status), failing.rep.attempts, -late);
    assert_true(failing.status == SL_EDEADLINE || failing.status == SL_ENORETRY);
    assert_true(failing.rep.attempts >= 2);
    assert_true(failing.rep.within_deadline);
    assert_true(late <= DEADLINE_SLACK_MS);

    assert_int_equal(none.status, SL_EDEADLINE);
    assert_string_equal(none.rep.outcome, "deadline");
    assert_int_equal(none.rep.attempts, 0);
    assert_int_equal(none.prepared, 0);
    result_free(&slow);
    result_free(&failing);
    result_free(&none);
    env_close(&e);
}

static void test_deadline_embedded(void **state) { deadline_kept(EMBEDDED); }
static void test_deadline_daemon(void **state) { deadline_kept(DAEMON); }

/* The deadline is kept on the caller's side even when the governor's own
 * thread does not answer: a callback that (against the rules) holds it
 * there stalls its timers and answers, as an engine busy on a loaded
 * machine would. Both forms still end at the deadline (less
 * min_attempt_ms, the last moment an attempt could start), nothing is
 * sent, and once the thread runs again no grant is left outstanding. The
 * thread is held until both forms have ended (not for a fixed time, which
 * a loaded machine could outlast), 20 s at most. */
typedef struct stall {
    atomic_int sleeping, release;
} stall;

static void on_stalling_acquire(void *arg, const sl_result *res) {
    stall *st = arg;
    st->sleeping = 1;
    for (int i = 0; i < 20000 && !st->release; i++) h_sleep(1);
    if (res->grant) sl_settle(res->grant, -1, SL_OUTCOME_CANCELLED, NULL, 0);
    st->sleeping = 2;
}

static int stall_started(void *arg) { return ((stall *)arg)->sleeping >= 1; }
static int stall_over(void *arg) { return ((stall *)arg)->sleeping == 2; }

static void deadline_governor_stalled(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    char dep[64];
    snprintf(dep, sizeof(dep), "%s-deadline", prefix(mode));
    static stall st; /* the governor's thread may outlive a failed test */
    st.sleeping = 0;
    st.release = 0;
    sl_request sr;
    sl_request_init(&sr);
    sr.deployment = dep;
    assert_int_equal(sl_acquire_async(e.g, &sr, on_stalling_acquire, &st, NULL), 0);
    PROC_POLL_OR_FAIL(stall_started, &st, 5000, "the governor's thread stalled");
    result r;
    sl_call_opts o = opts(0, 1000);
    start(&e, "deadline", "/ok", &o, &r);
    int finished = run_until(&e, is_done, &r, 5000);
    double late = (double)(r.done_at - o.deadline_ms);
    /* sl_curl_perform: the same call on its private loop. */
    char url[256];
    http_url(&S.web, "/ok", url, sizeof(url));
    CURL *easy = curl_easy_init();
    curl_easy_setopt(easy, CURLOPT_URL, url);
    sl_call_opts b = opts(0, 1000);
    b.deployment = dep;
    sl_call_report rep;
    sl_call_report_init(&rep);
    int stalled = st.sleeping == 1;
    int rc = sl_curl_perform(e.g, easy, &b, &rep);
    double late_b = (double)(sl_now_ms() - b.deadline_ms);
    stalled = stalled && st.sleeping == 1;
    st.release = 1;
    print_message("  [%s] governor's thread stalled: sl_call_start %s %.0f ms after the deadline, sl_curl_perform %s "
                  "%.0f ms: %s\n",
                  prefix(mode), sl_strerror(r.status), late, sl_strerror(rc), late_b, rep.message);
    assert_true(finished);
    assert_int_equal(r.status, SL_EDEADLINE);
    assert_true(r.rep.within_deadline);
    assert_true(late <= DEADLINE_SLACK_MS);
    assert_int_equal(r.rep.attempts, 0);
    assert_true(stalled); /* both forms met a stalled thread, to the end */
    assert_int_equal(rc, SL_EDEADLINE);
    assert_true(rep.within_deadline);
    assert_true(late_b <= DEADLINE_SLACK_MS);
    assert_int_equal(rep.attempts, 0);
    PROC_POLL_OR_FAIL(stall_over, &st, 5000, "the governor's thread running again");
    assert_int_equal(count_path("/ok"), 0);
    wait_status(mode, "deadline", "outstanding_grants", 0);
    curl_easy_cleanup(easy);
    sl_call_report_free(&rep);
    result_free(&r);
    env_close(&e);
}

static void test_deadline_stalled_embedded(void **state) { deadline_governor_stalled(EMBEDDED); }
static void test_deadline_stalled_daemon(void **state) { deadline_governor_stalled(DAEMON); }

/* ---- the fleet's retry budget ---------------------------------------------------------------- */

static void retry_budget_fleet(int mode) {
    if (skip_without_daemon(mode)) return;
    env a, b;
    env_open(&a, mode, 0);
    env_open(&b, mode, 1); /* another agent of the fleet */
    http_reset(&S.web, 0, 1);
    long long refused = status_of(mode, "budget", "retries_refused");
    /* Budget floor: min_per_s 1 x ttl_s 2 = 2 retries, no successes. */
    result ra, rb;
    sl_call_opts o = opts(0, 0);
    o.max_attempts = 20;
    o.backoff_base_ms = 20;
    o.backoff_cap_ms = 50;
    start(&a, "budget", "/503", &o, &ra);
    run_done(&a, &ra, 10000);
    print_message("  [%s] agent 1: %s after %d attempts: %s\n", prefix(mode), sl_strerror(ra.status), ra.rep.attempts,
                  ra.rep.message);
    assert_int_equal(ra.status, SL_ENORETRY);
    assert_int_equal(ra.rep.attempts, 3);
    assert_int_equal(ra.rep.retries, 2);
    assert_string_equal(ra.rep.outcome, "retry_budget");
    assert_true(ra.rep.retry_after_ms > 0);
    /* The other agent's first retry is refused: the budget is the fleet's. */
    o = opts(0, 0);
    o.max_attempts = 20;
    start(&b, "budget", "/503", &o, &rb);
    run_done(&b, &rb, 10000);
    print_message("  [%s] agent 2: %s after %d attempts\n", prefix(mode), sl_strerror(rb.status), rb.rep.attempts);
    assert_int_equal(rb.status, SL_ENORETRY);
    assert_int_equal(rb.rep.attempts, 1);
    assert_int_equal(rb.rep.retries, 0);
    assert_true(status_of(mode, "budget", "retries_refused") >= refused + 2);
    result_free(&ra);
    result_free(&rb);
    env_close(&a);
    env_close(&b);
}

static void test_retry_budget_embedded(void **state) { retry_budget_fleet(EMBEDDED); }
static void test_retry_budget_daemon(void **state) { retry_budget_fleet(DAEMON); }

/* ---- cancellation ------------------------------------------------------------------------------ */

typedef struct grants_are {
    int mode;
    const char *suffix;
    long long want;
} grants_are;

static int grants_reached(void *arg) {
    grants_are *g = arg;
    return status_of(g->mode, g->suffix, "outstanding_grants") == g->want;
}

static void cancel_mid_wait(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    /* The burst (1) goes to a first call; the next slot is 10 s away. */
    result first, waiting;
    sl_call_opts o = opts(0, 0);
    start(&e, "wait", "/ok?wait", &o, &first);
    run_done(&e, &first, 5000);
    assert_int_equal(first.status, 0);
    wait_status(mode, "wait", "outstanding_grants", 0);
    long long cancelled = status_of(mode, "wait", "settled_cancelled");
    o = opts(0, 0);
    start(&e, "wait", "/ok?wait", &o, &waiting);
    /* Its reservation is in the fleet's schedule: outstanding in Redis. */
    grants_are g = {mode, "wait", 1};
    RUN_UNTIL_OR_FAIL(&e, grants_reached, &g, 5000, "the waiting call's reservation in Redis");
    assert_int_equal(sl_call_state(waiting.call), SL_CALL_ACQUIRING);
    assert_int_equal(sl_call_cancel(waiting.call, SL_CANCEL_NOW), 0);
    assert_int_equal(waiting.done, 0); /* delivered from the loop */
    assert_int_equal(sl_call_cancel(waiting.call, SL_CANCEL_NOW), SL_EALREADY);
    run_done(&e, &waiting, 2000);
    print_message("  [%s] cancelled while waiting: %s\n", prefix(mode), waiting.rep.message);
    assert_int_equal(waiting.status, SL_ECANCELED);
    assert_string_equal(waiting.rep.outcome, "cancelled");
    assert_int_equal(waiting.rep.attempts, 0);
    assert_int_equal(waiting.prepared, 0);
    assert_true(waiting.rep.elapsed_ms < 5000);
    /* The slot went back to the fleet. */
    wait_status(mode, "wait", "settled_cancelled", cancelled + 1);
    wait_status(mode, "wait", "outstanding_grants", 0);
    assert_int_equal(count_path("/ok?wait"), 1);
    result_free(&first);
    result_free(&waiting);
    env_close(&e);
}

static void test_cancel_mid_wait_embedded(void **state) { cancel_mid_wait(EMBEDDED); }
static void test_cancel_mid_wait_daemon(void **state) { cancel_mid_wait(DAEMON); }

/* A listener that completes no more connections: its accept queue is
 * full, so a connect to it stays in progress (SYNs dropped). */
typedef struct stuck_listener {
    int fd, port, fill[4];
} stuck_listener;

static void stuck_open(stuck_listener *s) {
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s->fd, 0), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    for (int i = 0; i < 4; i++) {
        s->fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(s->fill[i], (struct sockaddr *)&a, sizeof(a));
    }
}

static void stuck_close(stuck_listener *s) {
    for (int i = 0; i < 4; i++) close(s->fill[i]);
    close(s->fd);
}

static void cancel_mid_send(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    long long failed = status_of(mode, "send", "settled_failed");
    long long cancelled = status_of(mode, "send", "settled_cancelled");
    long long ok = status_of(mode, "send", "settled_ok");

    /* The request is at the provider, its answer 3 s away: aborted, and
     * settled as failed (the provider may have counted it). */
    result r;
    sl_call_opts o = opts(0, 0);
    start(&e, "send", "/slow?ms=3000", &o, &r);
    path_count pc = {"/slow", 1};
    RUN_UNTIL_OR_FAIL(&e, provider_saw, &pc, 5000, "the request at the provider");
    assert_int_equal(sl_call_state(r.call), SL_CALL_SENDING);
    assert_int_equal(sl_call_cancel(r.call, SL_CANCEL_NOW), 0);
    run_done(&e, &r, 2000);
    print_message("  [%s] %s\n", prefix(mode), r.rep.message);
    assert_int_equal(r.status, SL_ECANCELED);
    assert_int_equal(r.rep.attempts, 1);
    assert_true(r.rep.elapsed_ms < 2500);
    wait_status(mode, "send", "settled_failed", failed + 1);
    wait_status(mode, "send", "outstanding_grants", 0);
    assert_int_equal(status_of(mode, "send", "settled_cancelled"), cancelled);
    result_free(&r);

    /* Still connecting (nothing written): the slot goes back. */
    stuck_listener st;
    stuck_open(&st);
    char url[128], dep[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/stuck", st.port);
    snprintf(dep, sizeof(dep), "%s-send", prefix(mode));
    memset(&r, 0, sizeof(r));
    sl_call_http h;
    sl_call_http_init(&h);
    h.url = url;
    o = opts(0, 0);
    o.deployment = dep;
    assert_int_equal(sl_call_start(e.c, &o, &h, on_done, &r, &r.call), 0);
    state_is sending = {&r, SL_CALL_SENDING};
    RUN_UNTIL_OR_FAIL(&e, call_in_state, &sending, 5000, "the call connecting");
    grants_are one = {mode, "send", 1};
    RUN_UNTIL_OR_FAIL(&e, grants_reached, &one, 5000, "its grant in Redis");
    assert_int_equal(sl_call_state(r.call), SL_CALL_SENDING);
    assert_int_equal(sl_call_cancel(r.call, SL_CANCEL_NOW), 0);
    run_done(&e, &r, 2000);
    print_message("  [%s] %s\n", prefix(mode), r.rep.message);
    assert_int_equal(r.status, SL_ECANCELED);
    assert_int_equal(r.rep.attempts, 0);
    wait_status(mode, "send", "settled_cancelled", cancelled + 1);
    wait_status(mode, "send", "outstanding_grants", 0);
    assert_int_equal(status_of(mode, "send", "settled_failed"), failed + 1);
    result_free(&r);
    stuck_close(&st);

    /* AFTER_SEND: the attempt in flight finishes, and counts. */
    o = opts(0, 0);
    start(&e, "send", "/slow?ms=300", &o, &r);
    pc.at_least = 2;
    RUN_UNTIL_OR_FAIL(&e, provider_saw, &pc, 5000, "the second request at the provider");
    assert_int_equal(sl_call_cancel(r.call, SL_CANCEL_AFTER_SEND), 0);
    run_done(&e, &r, 5000);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.rep.attempts, 1);
    wait_status(mode, "send", "settled_ok", ok + 1);
    result_free(&r);
    env_close(&e);
}

static void test_cancel_mid_send_embedded(void **state) { cancel_mid_send(EMBEDDED); }
static void test_cancel_mid_send_daemon(void **state) { cancel_mid_send(DAEMON); }

static void cancel_mid_backoff(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    long long throttled = status_of(mode, "backoff", "settled_throttled");
    /* A 429 asking for 3 s: the call backs off at least that long. */
    result r;
    sl_call_opts o = opts(0, 0);
    start(&e, "backoff", "/429?ra=3", &o, &r);
    state_is backoff = {&r, SL_CALL_BACKOFF};
    RUN_UNTIL_OR_FAIL(&e, call_in_state, &backoff, 5000, "the call backing off");
    assert_int_equal(r.attempted, 1);
    int64_t t = sl_now_ms();
    assert_int_equal(sl_call_cancel(r.call, SL_CANCEL_NOW), 0);
    run_done(&e, &r, 2000);
    print_message("  [%s] %s, %lld ms after the cancel\n", prefix(mode), r.rep.message, (long long)(r.done_at - t));
    assert_int_equal(r.status, SL_ECANCELED);
    assert_int_equal(r.rep.attempts, 1);
    assert_int_equal(r.rep.http_status, 429);
    assert_int_equal(r.rep.retries, 1);
    assert_true(r.done_at - t < 1000);
    /* The attempt's grant was settled (throttled); none is held. */
    wait_status(mode, "backoff", "settled_throttled", throttled + 1);
    wait_status(mode, "backoff", "outstanding_grants", 0);
    assert_int_equal(count_path("/429"), 1);
    result_free(&r);
    env_close(&e);
}

static void test_cancel_mid_backoff_embedded(void **state) { cancel_mid_backoff(EMBEDDED); }
static void test_cancel_mid_backoff_daemon(void **state) { cancel_mid_backoff(DAEMON); }

/* sl_call_cancel from the attempted hook, after a failure that would be
 * retried (503, three attempts allowed): the call ends SL_ECANCELED with
 * that one attempt; the provider sees one request. The call decided
 * whether to try again before the hook ran, so it took another slot and
 * sent once more (attempts 2, the provider saw 2). */
static void on_attempted_cancel(void *arg, sl_call *call, const sl_verdict *v, int curl_code) {
    (void)v;
    (void)curl_code;
    result *r = arg;
    r->attempted++;
    if (r->attempted == 1) r->hook_cancel_rc = sl_call_cancel(call, SL_CANCEL_NOW);
}

static void cancel_in_attempted(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    result r;
    memset(&r, 0, sizeof(r));
    sl_call_opts o = opts(0, 0);
    o.max_attempts = 3;
    char dep[64], url[256];
    snprintf(dep, sizeof(dep), "%s-backoff", prefix(mode));
    http_url(&S.web, "/503", url, sizeof(url));
    sl_call_http h;
    sl_call_http_init(&h);
    h.url = url;
    h.attempted = on_attempted_cancel;
    o.deployment = dep;
    assert_int_equal(sl_call_start(e.c, &o, &h, on_done, &r, &r.call), 0);
    run_done(&e, &r, 10000);
    print_message("  [%s] cancelled in the attempted hook: status %s, attempts %d, provider saw %d\n", prefix(mode),
                  sl_strerror(r.status), r.rep.attempts, count_path("/503"));
    assert_int_equal(r.hook_cancel_rc, 0);
    assert_int_equal(r.status, SL_ECANCELED);
    assert_int_equal(r.rep.attempts, 1);
    assert_int_equal(r.attempted, 1);
    assert_int_equal(count_path("/503"), 1);
    result_free(&r);
    env_close(&e);
}

static void test_cancel_in_attempted_embedded(void **state) { cancel_in_attempted(EMBEDDED); }
static void test_cancel_in_attempted_daemon(void **state) { cancel_in_attempted(DAEMON); }

/* ---- Retry-After ------------------------------------------------------------------------------ */

/* The time between the 429 and the request after it, and the wait the
 * 429 asked for. */
static void gap_after_429(double *gap, double *asked) {
    pthread_mutex_lock(&S.web.mu);
    *gap = *asked = -1;
    for (size_t i = 0; i + 1 < S.web.nlog; i++) {
        if (S.web.log[i].status != 429) continue;
        *asked = S.web.log[i].wait_ms;
        *gap = S.web.log[i + 1].t_ms - S.web.log[i].t_ms;
        break;
    }
    pthread_mutex_unlock(&S.web.mu);
}

static void retry_after_forms(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    static const struct {
        const char *suffix, *path, *form;
    } forms[] = {
        {"ra-s", "/flaky", "delay-seconds (Retry-After: 1)"},
        {"ra-date", "/flaky?form=date", "HTTP-date (Retry-After: 1-2 s ahead)"},
        {"ra-ms", "/flaky?form=ms&wait=700", "retry-after-ms: 700"},
    };
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        http_reset(&S.web, 1, 1);
        result r;
        sl_call_opts o = opts(0, 10000);
        start(&e, forms[i].suffix, forms[i].path, &o, &r);
        run_done(&e, &r, 8000);
        double gap, asked;
        gap_after_429(&gap, &asked);
        print_message("  [%s] %s: asked %.0f ms, retried after %.0f ms (hint %lld ms)\n", prefix(mode), forms[i].form,
                      asked, gap, r.rep.retry_after_ms);
        assert_int_equal(r.status, 0);
        assert_int_equal(r.rep.attempts, 2);
        assert_int_equal(r.rep.status_429, 1);
        assert_true(asked > 0);
        /* At least what was asked (less 1 ms of clock rounding). Not much
         * more: the jitter (at most a quarter of the wait) and the slot
         * after the fleet's pause, which starts when the settle reaches
         * Redis; 500 ms of slack for a loaded machine. */
        assert_true(gap >= asked - 1);
        assert_true(gap <= asked + asked / 4 + 500);
        assert_true(r.rep.retry_after_ms >= (long long)asked - 1000 && r.rep.retry_after_ms <= (long long)asked + 5);
        result_free(&r);
    }
    env_close(&e);
}

static void test_retry_after_forms_embedded(void **state) { retry_after_forms(EMBEDDED); }
static void test_retry_after_forms_daemon(void **state) { retry_after_forms(DAEMON); }

/* ---- quota ------------------------------------------------------------------------------------- */

static void quota_never_retried(int mode) {
    if (skip_without_daemon(mode)) return;
    env e;
    env_open(&e, mode, 0);
    http_reset(&S.web, 0, 1);
    long long settled = status_of(mode, "quota", "settled_quota");
    result r;
    sl_call_opts o = opts(0, 10000);
    o.retry_shed = 1; /* even so: out of quota is not waited for */
    start(&e, "quota", "/quota", &o, &r);
    run_done(&e, &r, 5000);
    print_message("  [%s] quota: %s\n", prefix(mode), r.rep.message);
    assert_int_equal(r.status, SL_EFATAL);
    assert_int_equal(r.rep.attempts, 1);
    assert_int_equal(r.rep.retries, 0);
    assert_int_equal(r.rep.cls, SL_CLASS_QUOTA_EXHAUSTED);
    assert_string_equal(r.rep.outcome, "quota_exhausted");
    assert_string_equal(r.rep.code, "insufficient_quota");
    assert_int_equal(count_path("/quota"), 1);
    /* Settled as quota: the deployment is out for the fleet. */
    wait_status(mode, "quota", "settled_quota", settled + 1);
    char dep[64];
    snprintf(dep, sizeof(dep), "%s-quota", prefix(mode));
    h_wait_redis_status(&S.fx, dep, "quota_out_ms", 1, 3000);
    result_free(&r);
    o = opts(0, 10000);
    o.retry_shed = 1;
    start(&e, "quota", "/ok", &o, &r);
    run_done(&e, &r, 5000);
    assert_int_equal(r.status, SL_ESHED);
    assert_string_equal(r.rep.shed_reason, "quota");
    assert_int_equal(r.rep.attempts, 0);
    assert_true(r.rep.elapsed_ms < 1000);
    result_free(&r);
    env_close(&e);
}

static void test_quota_embedded(void **state) { quota_never_retried(EMBEDDED); }
static void test_quota_daemon(void **state) { quota_never_retried(DAEMON); }

/* ---- sheds --------------------------------------------------------------------------------------- */

static void test_retry_shed(void **state) {
    env e;
    env_open(&e, EMBEDDED, 0);
    http_reset(&S.web, 0, 1);
    /* 120 rpm, burst 1: after the first, a slot every 500 ms; max wait 0
     * sheds with a hint instead of waiting. */
    /* Decided by the fleet's schedule: this engine has joined e-shed in
     * Redis (a call made before the connection resolves is paced locally,
     * and its tail handed over costs one more slot: engine_local.c). */
    h_wait_redis_status(&S.fx, "e-shed", "live_agents", 1, 5000);
    result a, b, c;
    sl_call_opts o = opts(0, 10000);
    o.max_wait_ms = 0;
    start(&e, "shed", "/ok", &o, &a);
    run_done(&e, &a, 5000);
    assert_int_equal(a.status, 0);
    o = opts(0, 10000);
    o.max_wait_ms = 0;
    start(&e, "shed", "/ok", &o, &b);
    run_done(&e, &b, 5000);
    print_message("  shed: %s, hint %lld ms: %s\n", sl_strerror(b.status), b.rep.retry_after_ms, b.rep.message);
    assert_int_equal(b.status, SL_ESHED);
    assert_string_equal(b.rep.shed_reason, "rpm");
    assert_int_equal(b.rep.sheds, 1);
    /* The emission interval (500 ms) at most, plus the release jitter. */
    if (!(b.rep.retry_after_ms > 0 && b.rep.retry_after_ms <= 600))
        print_message("  the fleet then: effective_rpm %lld, silent_agents %lld, live_agents %lld, backlog %lld ms\n",
                      status_of(EMBEDDED, "shed", "effective_rpm"), status_of(EMBEDDED, "shed", "silent_agents"),
                      status_of(EMBEDDED, "shed", "live_agents"), status_of(EMBEDDED, "shed", "requests_backlog_ms"));
    assert_true(b.rep.retry_after_ms > 0 && b.rep.retry_after_ms <= 600);
    /* retry_shed: waits the hint, asks again, succeeds. */
    o = opts(0, 10000);
    o.max_wait_ms = 0;
    o.retry_shed = 1;
    start(&e, "shed", "/ok", &o, &c);
    run_done(&e, &c, 5000);
    print_message("  retry_shed: %d sheds, waited %lld ms\n", c.rep.sheds, c.rep.waited_ms);
    assert_int_equal(c.status, 0);
    assert_true(c.rep.sheds >= 1);
    assert_true(c.rep.waited_ms > 0);
    assert_int_equal(c.rep.attempts, 1);
    result_free(&a);
    result_free(&b);
    result_free(&c);
    env_close(&e);
}

/* ---- freeing the caller ------------------------------------------------------------------------- */

static void test_free_with_calls_in_progress(void **state) {
    env e;
    env_open(&e, EMBEDDED, 0);
    http_reset(&S.web, 0, 1);
    result burst, waiting, sending, backoff;
    sl_call_opts o = opts(0, 0);
    start(&e, "free", "/ok", &o, &burst);
    run_done(&e, &burst, 5000);
    wait_status(EMBEDDED, "free", "outstanding_grants", 0);
    long long cancelled = status_of(EMBEDDED, "free", "settled_cancelled");
    long long failed = status_of(EMBEDDED, "free", "settled_failed");
    o = opts(0, 0);
    start(&e, "free", "/ok", &o, &waiting); /* 10 s from its slot */
    o = opts(0, 0);
    start(&e, "send", "/slow?ms=2000", &o, &sending); /* at the provider */
    o = opts(0, 0);
    start(&e, "free429", "/429?ra=3", &o, &backoff); /* backing off */
    state_is s1 = {&sending, SL_CALL_SENDING}, s2 = {&backoff, SL_CALL_BACKOFF};
    path_count pc = {"/slow", 1};
    RUN_UNTIL_OR_FAIL(&e, provider_saw, &pc, 5000, "the slow request at the provider");
    RUN_UNTIL_OR_FAIL(&e, call_in_state, &s1, 5000, "a call sending");
    RUN_UNTIL_OR_FAIL(&e, call_in_state, &s2, 5000, "a call backing off");
    grants_are g = {EMBEDDED, "free", 1};
    RUN_UNTIL_OR_FAIL(&e, grants_reached, &g, 5000, "the waiting call's reservation");
    long long send_failed = status_of(EMBEDDED, "send", "settled_failed");
    sl_caller_free(e.c);
    uv_run(&e.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&e.loop), 0);
    /* No callback ran; every slot went back or was settled. */
    assert_int_equal(waiting.done + sending.done + backoff.done, 0);
    wait_status(EMBEDDED, "free", "settled_cancelled", cancelled + 1);
    wait_status(EMBEDDED, "free", "outstanding_grants", 0);
    wait_status(EMBEDDED, "send", "settled_failed", send_failed + 1);
    wait_status(EMBEDDED, "send", "outstanding_grants", 0);
    wait_status(EMBEDDED, "free429", "outstanding_grants", 0);
    assert_int_equal(status_of(EMBEDDED, "free", "settled_failed"), failed);
    result_free(&burst);
    sl_close(e.g);
}

/* ---- another loop: poll(2) ------------------------------------------------------------ */

/* The smallest sl_loop there is: poll(2) over the watched sockets and a
 * pipe for the wake-up (write(2) is safe from any thread), one deadline
 * for the timer. It shows the interface asks nothing of libuv. */
typedef struct psock {
    int fd, events;
    struct psock *next;
} psock;

typedef struct ploop {
    psock *socks;
    int64_t due; /* -1: disarmed */
    int pipe[2];
    int closed;
} ploop;

static int p_watch(void *data, int fd, int events, void **sock) {
    ploop *pl = data;
    psock *s = *sock;
    if (events == 0) {
        for (psock **pp = &pl->socks; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        free(s);
        *sock = NULL;
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s) return -1;
        s->fd = fd;
        s->next = pl->socks;
        pl->socks = s;
        *sock = s;
    }
    s->events = events;
    return 0;
}

static void p_timer(void *data, long long ms) {
    ploop *pl = data;
    pl->due = ms < 0 ? -1 : sl_now_ms() + ms;
}

static void p_wake(void *data) {
    ploop *pl = data;
    char b = 1;
    ssize_t w = write(pl->pipe[1], &b, 1); /* full: a wake-up is pending anyway */
    (void)w;
}

static void p_close(void *data) { ((ploop *)data)->closed = 1; }

/* One turn: wait for a socket, the pipe or the timer, then dispatch. */
static void p_turn(ploop *pl, sl_caller *c) {
    struct pollfd fds[65];
    int n = 0;
    fds[n++] = (struct pollfd){pl->pipe[0], POLLIN, 0};
    for (psock *s = pl->socks; s && n < 65; s = s->next)
        fds[n++] = (struct pollfd){
            s->fd, (short)((s->events & SL_LOOP_READ ? POLLIN : 0) | (s->events & SL_LOOP_WRITE ? POLLOUT : 0)), 0};
    int64_t now = sl_now_ms();
    int timeout = pl->due < 0 ? 50 : pl->due > now ? (int)(pl->due - now) : 0;
    if (poll(fds, (nfds_t)n, timeout) < 0) return;
    if (fds[0].revents & POLLIN) {
        char buf[64];
        while (read(pl->pipe[0], buf, sizeof(buf)) == (ssize_t)sizeof(buf)) {}
        sl_caller_wake(c);
    }
    for (int i = 1; i < n && !pl->closed; i++) {
        int ev = (fds[i].revents & POLLIN ? SL_LOOP_READ : 0) | (fds[i].revents & POLLOUT ? SL_LOOP_WRITE : 0) |
                 (fds[i].revents & (POLLERR | POLLHUP) ? SL_LOOP_ERROR : 0);
        if (ev) sl_caller_io(c, fds[i].fd, ev);
    }
    if (!pl->closed && pl->due >= 0 && sl_now_ms() >= pl->due) {
        pl->due = -1;
        sl_caller_timer(c);
    }
}

static void test_poll_loop(void **state) {
    sl_gov *g = open_gov(EMBEDDED, 0);
    ploop pl = {.due = -1};
    assert_int_equal(pipe2(pl.pipe, O_NONBLOCK | O_CLOEXEC), 0);
    sl_caller *c;
    assert_int_equal(sl_caller_new(g, &c), 0);
    sl_loop l;
    sl_loop_init(&l);
    l.data = &pl;
    l.watch = p_watch;
    l.timer = p_timer;
    l.wake = p_wake;
    l.close = p_close;
    assert_int_equal(sl_caller_attach(c, &l), 0);
    assert_int_equal(sl_caller_attach(c, &l), SL_EINVAL); /* once */
    /* Eight calls, each failing once (503) and backing off its own full-
     * jitter delay: the caller's one timer serves all the waits at once. */
    enum { N = 8 };
    http_reset(&S.web, N, 1);
    result r[N];
    char url[256];
    http_url(&S.web, "/flaky?code=503", url, sizeof(url));
    for (int i = 0; i < N; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        sl_call_opts o = opts(0, 10000);
        o.deployment = "e-ok";
        o.seed = (uint64_t)i + 1;
        o.backoff_base_ms = 400;
        sl_call_http h;
        sl_call_http_init(&h);
        h.url = url;
        h.attempted = on_attempted;
        assert_int_equal(sl_call_start(c, &o, &h, on_done, &r[i], &r[i].call), 0);
    }
    int64_t end = sl_now_ms() + 10000;
    for (int done = 0; done < N && sl_now_ms() < end;) {
        p_turn(&pl, c);
        done = 0;
        for (int i = 0; i < N; i++) done += r[i].done;
    }
    for (int i = 0; i < N; i++) {
        if (!r[i].done) fail_msg("call %d did not end", i);
        if (r[i].status != 0) fail_msg("call %d: %s: %s", i, sl_strerror(r[i].status), r[i].rep.message);
        assert_int_equal(r[i].rep.attempts, 2);
        assert_int_equal(r[i].attempted, 2);
        result_free(&r[i]);
    }
    assert_int_equal(count_path("/flaky"), 2 * N);
    sl_caller_free(c);
    assert_true(pl.closed);
    assert_null(pl.socks); /* every watch ended */
    close(pl.pipe[0]);
    close(pl.pipe[1]);
    sl_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_calls_embedded),
        cmocka_unit_test(test_many_calls_daemon),
        cmocka_unit_test(test_deadline_embedded),
        cmocka_unit_test(test_deadline_daemon),
        cmocka_unit_test(test_deadline_stalled_embedded),
        cmocka_unit_test(test_deadline_stalled_daemon),
        cmocka_unit_test(test_retry_budget_embedded),
        cmocka_unit_test(test_retry_budget_daemon),
        cmocka_unit_test(test_cancel_mid_wait_embedded),
        cmocka_unit_test(test_cancel_mid_wait_daemon),
        cmocka_unit_test(test_cancel_mid_send_embedded),
        cmocka_unit_test(test_cancel_mid_send_daemon),
        cmocka_unit_test(test_cancel_mid_backoff_embedded),
        cmocka_unit_test(test_cancel_mid_backoff_daemon),
        cmocka_unit_test(test_cancel_in_attempted_embedded),
        cmocka_unit_test(test_cancel_in_attempted_daemon),
        cmocka_unit_test(test_retry_after_forms_embedded),
        cmocka_unit_test(test_retry_after_forms_daemon),
        cmocka_unit_test(test_quota_embedded),
        cmocka_unit_test(test_quota_daemon),
        cmocka_unit_test(test_retry_shed),
        cmocka_unit_test(test_free_with_calls_in_progress),
        cmocka_unit_test(test_poll_loop),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
