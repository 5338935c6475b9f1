/* test_scripts: the Lua quota engine against a real redis-server.
 *
 * The server runs as a one-node Redis Cluster that owns every slot, so any
 * script call whose keys span two slots fails here as it would in
 * production. Time is never slept: waits come from the replies, and where
 * a test needs time to pass it shifts the scripts' clock with the test-only
 * limits field test_clock_offset_ms. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "proc.h"
#include "replay.h"
#include "script_test.h"

/* ---- helpers ------------------------------------------------------------ */

/* The workers of the random workloads run reserve() and settle1() on
 * their own threads, where a cmocka assertion cannot unwind (it longjmps
 * into the main thread's test: the process dies with no message). There
 * CHECK records the first failure and unwinds the worker alone; the main
 * thread then fails the test with it. On the main thread it is a cmocka
 * failure as usual. */
static __thread jmp_buf *t_unwind;
static __thread char t_why[512];

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            if (t_unwind) {                                                                                            \
                snprintf(t_why, sizeof(t_why), __VA_ARGS__);                                                           \
                longjmp(*t_unwind, 1);                                                                                 \
            }                                                                                                          \
            fail_msg(__VA_ARGS__);                                                                                     \
        }                                                                                                              \
    } while (0)

typedef struct verdict {
    int granted, deferred; /* a deferral (kind 2) is neither granted nor shed */
    long long id, wait_ms, tokens, retry_after_ms;
    char reason[32];
} verdict;

/* Reserves n items; returns the server time in ms (from now_us). */
static double reserve(redisContext *c, const char *dep, int n, const long long *tokens, const long long *maxwait,
                      verdict *out, long long *paused_ms) {
    const char *argv[1 + 2 * 256];
    char buf[1 + 2 * 256][24];
    CHECK(n <= 256, "reserve: %d items", n);
    snprintf(buf[0], sizeof(buf[0]), "%d", n);
    argv[0] = buf[0];
    for (int i = 0; i < n; i++) {
        snprintf(buf[1 + 2 * i], 24, "%lld", tokens[i]);
        snprintf(buf[2 + 2 * i], 24, "%lld", maxwait[i]);
        argv[1 + 2 * i] = buf[1 + 2 * i];
        argv[2 + 2 * i] = buf[2 + 2 * i];
    }
    redisReply *r = script_call(c, SCRIPT_RESERVE, dep, 1 + 2 * n, argv);
    CHECK(r != NULL, "reserve: no reply (%s)", c->errstr);
    CHECK(r->type != REDIS_REPLY_ERROR, "reserve: %s", r->str);
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)(5 + n),
          "reserve: a reply of type %d with %zu elements", r->type, r->elements);
    double now_ms = (double)r->element[0]->integer / 1000.0;
    if (paused_ms) *paused_ms = r->element[1]->integer;
    for (int i = 0; i < n; i++) {
        redisReply *it = r->element[5 + i];
        memset(&out[i], 0, sizeof(out[i]));
        long long kind = it->element[0]->integer;
        out[i].granted = kind == 1;
        out[i].deferred = kind == 2;
        if (out[i].granted) {
            CHECK(it->elements == 4, "reserve: a grant of %zu elements", it->elements);
            out[i].id = it->element[1]->integer;
            out[i].wait_ms = it->element[2]->integer;
            out[i].tokens = it->element[3]->integer;
            CHECK(out[i].wait_ms >= 0 && out[i].wait_ms <= maxwait[i], "reserve: a wait of %lld ms, max wait %lld",
                  out[i].wait_ms, maxwait[i]);
        } else {
            CHECK(kind == 0 || kind == 2, "reserve: a verdict of kind %lld", kind);
            CHECK(it->elements == 3, "reserve: a %s of %zu elements", kind ? "deferral" : "shed", it->elements);
            snprintf(out[i].reason, sizeof(out[i].reason), "%s", it->element[1]->str);
            out[i].retry_after_ms = it->element[2]->integer;
        }
    }
    freeReplyObject(r);
    return now_ms;
}

static verdict reserve1(redisContext *c, const char *dep, long long tokens, long long maxwait, double *now_ms) {
    verdict v;
    double now = reserve(c, dep, 1, &tokens, &maxwait, &v, NULL);
    if (now_ms) *now_ms = now;
    return v;
}

/* Settles one item; returns the result string ("settled", ...) in res. */
static double settle1(redisContext *c, const char *dep, const char *id, long long actual, const char *outcome,
                      long long pause_ms, char *res, size_t reslen) {
    char a[24], p[24];
    snprintf(a, sizeof(a), "%lld", actual);
    snprintf(p, sizeof(p), "%lld", pause_ms);
    redisReply *r = script_callv(c, SCRIPT_SETTLE, dep, "1", id, a, outcome, p, NULL);
    CHECK(r != NULL, "settle: no reply (%s)", c->errstr);
    CHECK(r->type != REDIS_REPLY_ERROR, "settle: %s", r->str);
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 5, "settle: a reply of type %d with %zu elements", r->type,
          r->elements);
    if (res) snprintf(res, reslen, "%s", r->element[4]->str);
    double now = (double)r->element[0]->integer / 1000.0;
    freeReplyObject(r);
    return now;
}

/* A dump of every key of a deployment, to prove a call changed nothing. */
static char *dump_state(redisContext *c, const char *dep) {
    static const char *const what[] = {"limits", "state", "grants", "leases",     "refq:requests", "refq:tokens",
                                       "daily",  "retry", "agents", "refq:input", "refq:output"};
    return dump_keys(c, dep, what, sizeof(what) / sizeof(*what));
}
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static long long rng_range(uint64_t *s, long long lo, long long hi) {
    return lo + (long long)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* ---- never over-offer: random workloads, several concurrent callers ------ */

typedef struct workload {
    const char *dep;
    long long rpm, tpm, burst_r, burst_t;
    uint64_t seed;
    int steps;
} workload;

typedef struct caller {
    const workload *w;
    int index;
    redisContext *c;
    pthread_mutex_t *mu;
    replay *req, *tok;
    long long grants, sheds, refunded_units, cancels;
    char why[600]; /* the first failure on this worker, "" when none */
} caller;

typedef struct outstanding {
    long long id, est;
    double slot;
    size_t ev_req, ev_tok; /* replay event indexes, to drop a cancelled send */
} outstanding;

static void *caller_main(void *arg) {
    caller *k = arg;
    const workload *w = k->w;
    uint64_t rng = w->seed * 7919 + (uint64_t)k->index;
    outstanding *volatile out = calloc(4096, sizeof(*out));
    size_t nout = 0;
    volatile double server_now = 0;
    jmp_buf unwind;
    if (setjmp(unwind)) {
        /* A CHECK failed on this thread (never with the mutex held):
         * report it to the main thread. */
        snprintf(k->why, sizeof(k->why), "caller %d: %s", k->index, t_why);
        t_unwind = NULL;
        free(out);
        return NULL;
    }
    t_unwind = &unwind;
    for (int step = 0; step < w->steps; step++) {
        int op = (int)rng_range(&rng, 0, 99);
        if (op < 10) {
            {
                redisReply *ar = redisCommand(k->c, "HINCRBYFLOAT sluice:{%s}:limits test_clock_offset_ms %f", w->dep,
                                              (double)rng_range(&rng, 0, 400));
                CHECK(ar && ar->type == REDIS_REPLY_STRING, "advance: %s", ar ? "not a number" : k->c->errstr);
                freeReplyObject(ar);
            }
        } else if (op < 60) {
            int n = (int)rng_range(&rng, 1, 8);
            long long tokens[8], maxwait[8];
            verdict v[8];
            for (int i = 0; i < n; i++) {
                int t = (int)rng_range(&rng, 0, 99);
                if (t < 80) tokens[i] = rng_range(&rng, 1, w->burst_t / 2);
                else if (t < 95) tokens[i] = rng_range(&rng, w->burst_t / 2, w->burst_t);
                else tokens[i] = rng_range(&rng, w->burst_t, 2 * w->burst_t);
                maxwait[i] = rng_range(&rng, 0, 99) < 70 ? 600000 : rng_range(&rng, 0, 500);
            }
            server_now = reserve(k->c, w->dep, n, tokens, maxwait, v, NULL);
            pthread_mutex_lock(k->mu);
            for (int i = 0; i < n; i++) {
                if (!v[i].granted) {
                    k->sheds++;
                    continue;
                }
                double slot = server_now + (double)v[i].wait_ms;
                outstanding o = {v[i].id, tokens[i], slot, k->req->n, k->tok->n};
                replay_add(k->req, slot, 1);
                replay_add(k->tok, slot, (double)tokens[i]);
                if (nout < 4096) out[nout++] = o;
                k->grants++;
            }
            pthread_mutex_unlock(k->mu);
        } else if (nout > 0) {
            size_t i = (size_t)rng_range(&rng, 0, (long long)nout - 1);
            outstanding o = out[i];
            char id[24], res[32];
            snprintf(id, sizeof(id), "%lld", o.id);
            if (o.slot > server_now + 1) {
                /* Not started: give it back, and the send never happens. */
                if (rng_range(&rng, 0, 3) != 0) continue;
                settle1(k->c, w->dep, id, -1, "cancelled", -1, res, sizeof(res));
                pthread_mutex_lock(k->mu);
                k->req->ev[o.ev_req].amount = 0;
                k->tok->ev[o.ev_tok].amount = 0;
                pthread_mutex_unlock(k->mu);
                k->cancels++;
            } else {
                int kind = (int)rng_range(&rng, 0, 99);
                if (kind < 85) {
                    /* The provider here is Azure OpenAI's (the default
                     * profile's): the estimate was charged at admission and
                     * stays charged whatever the usage (docs/providers.md),
                     * so the model's bucket gets nothing back. A governor
                     * that refunded it would over-offer, and this replay
                     * would find it. */
                    long long actual = rng_range(&rng, 0, o.est);
                    settle1(k->c, w->dep, id, actual, "ok", -1, res, sizeof(res));
                    if (strcmp(res, "settled") == 0 && actual < o.est) k->refunded_units += o.est - actual;
                } else if (kind < 93) {
                    settle1(k->c, w->dep, id, -1, "failed", -1, res, sizeof(res));
                } else {
                    settle1(k->c, w->dep, id, -1, "throttled", rng_range(&rng, -1, 300), res, sizeof(res));
                }
            }
            out[i] = out[--nout];
        }
    }
    t_unwind = NULL;
    free(out);
    return NULL;
}

/* Runs one workload; returns the tokens the scripts gave back. */
static double run_workload(const workload *w, int ncallers) {
    char rpm[24], tpm[24], br[24], bt[24];
    snprintf(rpm, sizeof(rpm), "%lld", w->rpm);
    snprintf(tpm, sizeof(tpm), "%lld", w->tpm);
    snprintf(br, sizeof(br), "%lld", w->burst_r);
    snprintf(bt, sizeof(bt), "%lld", w->burst_t);
    configure_on(rc, w->dep, "rpm", rpm, "tpm", tpm, "burst_requests", br, "burst_tokens", bt, "aimd_interval_ms",
                 "300", NULL);
    replay req, tok;
    replay_init(&req);
    replay_init(&tok);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    caller callers[8];
    pthread_t th[8];
    for (int i = 0; i < ncallers; i++) {
        callers[i] = (caller){.w = w, .index = i, .mu = &mu, .req = &req, .tok = &tok};
        callers[i].c = redis_fixture_connect(&fx);
        assert_non_null(callers[i].c);
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &callers[i]), 0);
    }
    long long grants = 0, sheds = 0, refunded = 0, cancels = 0;
    for (int i = 0; i < ncallers; i++) {
        pthread_join(th[i], NULL);
        redisFree(callers[i].c);
        if (callers[i].why[0]) fail_msg("%s: %s", w->dep, callers[i].why);
        grants += callers[i].grants;
        sheds += callers[i].sheds;
        refunded += callers[i].refunded_units;
        cancels += callers[i].cancels;
    }
    double first_r = 0, first_t = 0;
    size_t rej_r = replay_rejections(&req, (double)w->burst_r, (double)w->rpm / 60000.0, &first_r);
    size_t rej_t = replay_rejections(&tok, (double)w->burst_t, (double)w->tpm / 60000.0, &first_t);
    double given_back = hash_num(rc, w->dep, "state", "tokens_refunded");
    if (rej_t && getenv("SLUICE_TEST_DUMP")) {
        for (size_t i = 0; i < tok.n; i++)
            if (fabs(tok.ev[i].t_ms - first_t) < 3000)
                print_message("    ev t=%.3f amount=%.0f%s\n", tok.ev[i].t_ms - first_t, tok.ev[i].amount,
                              tok.ev[i].t_ms == first_t ? "  <== first reject" : "");
    }
    print_message("  %s: %lld grants, %lld sheds, %lld cancels, refunds asked %lld / given %.0f "
                  "tokens, scale %.3f, decreases %.0f; rejections: requests %zu, tokens %zu\n",
                  w->dep, grants, sheds, cancels, refunded, given_back, status_num(rc, w->dep, "rate_scale"),
                  hash_num(rc, w->dep, "state", "decreases"), rej_r, rej_t);
    /* The workload must have exercised what it claims to. */
    assert_true(grants > 150);
    assert_true(sheds > 0);
    assert_true(cancels > 0);
    assert_int_equal(rej_r, 0);
    assert_int_equal(rej_t, 0);
    replay_free(&req);
    replay_free(&tok);
    return given_back;
}

static void test_never_over_offer_random(void **state) {
    static const workload w[] = {
        {"rand-a", 600, 60000, 10, 5000, 1, 600},
        {"rand-b", 60, 150000, 10, 25000, 2, 600},
        {"rand-c", 6000, 90000, 1, 1500, 3, 600},
        {"rand-d", 1200, 20000, 5, 400, 4, 600},
    };
    double given = 0;
    for (size_t i = 0; i < sizeof(w) / sizeof(*w); i++) given += run_workload(&w[i], 3);
    /* Refunds happened (a saturated schedule rightly gives little back). */
    assert_true(given > 0);
}

/* ---- use all of it: 10 000 requests at 600 RPM --------------------------- */

static void test_use_all_of_it(void **state) {
    const char *dep = "useall";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "10", NULL);
    const int n = 10000, batch = 100;
    replay req;
    replay_init(&req);
    long long tokens[100], maxwait[100];
    verdict v[100];
    for (int i = 0; i < batch; i++) {
        tokens[i] = 0;
        maxwait[i] = 3600LL * 1000 * 24;
    }
    for (int done = 0; done < n; done += batch) {
        double now = reserve(rc, dep, batch, tokens, maxwait, v, NULL);
        for (int i = 0; i < batch; i++) {
            assert_true(v[i].granted);
            replay_add(&req, now + (double)v[i].wait_ms, 1);
        }
    }
    double span = replay_makespan(&req);
    double floor_ms = (double)(n - 10) / (600.0 / 60000.0);
    print_message("  makespan %.0f ms, floor (N - burst) / rate = %.0f ms, ratio %.5f\n", span, floor_ms,
                  span / floor_ms);
    /* The floor plus the jitter margin (10 ms: one send fenced late), to
     * the millisecond: 0.001 % of the floor. */
    assert_true(span >= floor_ms - 1e-6);
    assert_true(span <= floor_ms + 10 + 1);
    assert_int_equal(replay_rejections(&req, 10, 600.0 / 60000.0, NULL), 0);
    replay_free(&req);
}

/* ---- shed consumes nothing ---------------------------------------------- */

static void test_shed_consumes_nothing(void **state) {
    const char *dep = "shed";
    configure_on(rc, dep, "rpm", "60", "tpm", "6000", "burst_requests", "1", "burst_tokens", "100", "jitter_ms", "0",
                 NULL);
    verdict v = reserve1(rc, dep, 100, 0, NULL);
    assert_true(v.granted);
    assert_int_equal(v.wait_ms, 0);
    /* The bucket is empty for 1 s on both dimensions: a max wait of 0 sheds. */
    char *before = dump_state(rc, dep);
    double grants_before = hash_num(rc, dep, "state", "granted_total");
    v = reserve1(rc, dep, 50, 0, NULL);
    assert_false(v.granted);
    assert_string_equal(v.reason, "rpm");
    assert_true(v.retry_after_ms > 900 && v.retry_after_ms <= 1000);
    v = reserve1(rc, dep, 7000, 5000, NULL);
    assert_false(v.granted);
    assert_string_equal(v.reason, "too_large");
    assert_int_equal(v.retry_after_ms, -1);
    /* Only the shed counters moved: compare the schedule fields. */
    char *after = dump_state(rc, dep);
    assert_true(hash_num(rc, dep, "state", "granted_total") == grants_before);
    assert_true(hash_num(rc, dep, "state", "shed_total") == 2);
    /* limits, grants, leases, queues, daily, retry: byte-identical. */
    char *b = strstr(before, "grants="), *a = strstr(after, "grants=");
    assert_string_equal(b, a);
    free(before);
    free(after);
    double tat_r = hash_num(rc, dep, "state", "requests_tat");
    double tat_t = hash_num(rc, dep, "state", "tokens_tat");
    /* A grant after the sheds gets exactly the slot it would have had. */
    double now;
    v = reserve1(rc, dep, 50, 60000, &now);
    assert_true(v.granted);
    assert_true(fabs(now + (double)v.wait_ms - tat_r) < 1.0);
    assert_true(hash_num(rc, dep, "state", "tokens_tat") - tat_t > 499.0);
}

/* ---- settle: exact refunds and charges, the refund bound, expiry --------- */

static void test_settle_refund_and_charge_exact(void **state) {
    const char *dep = "settle";
    /* 60000 TPM = 1 token per ms; requests plentiful. The refund is the
     * opt-in of a provider that corrects its bucket to the actual usage
     * (test_profiles_script proves the defaults, which do not refund). */
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "10000",
                 "refund_tokens", "1", NULL);
    char res[32], id[24];
    verdict v = reserve1(rc, dep, 5000, 0, NULL);
    assert_true(v.granted);
    double tat0 = hash_num(rc, dep, "state", "tokens_tat");
    snprintf(id, sizeof(id), "%lld", v.id);
    settle1(rc, dep, id, 2000, "ok", -1, res, sizeof(res));
    assert_string_equal(res, "settled");
    double tat1 = hash_num(rc, dep, "state", "tokens_tat");
    assert_true(fabs((tat0 - tat1) - 3000.0) < 0.01);
    assert_true(hash_num(rc, dep, "state", "tokens_refunded") == 3000);
    /* Settling twice is harmless and reports the grant as unknown. */
    settle1(rc, dep, id, 0, "ok", -1, res, sizeof(res));
    assert_string_equal(res, "unknown");
    assert_true(hash_num(rc, dep, "state", "tokens_refunded") == 3000);

    /* Usage above the estimate is charged exactly. */
    v = reserve1(rc, dep, 1000, 0, NULL);
    double tat2 = hash_num(rc, dep, "state", "tokens_tat");
    snprintf(id, sizeof(id), "%lld", v.id);
    settle1(rc, dep, id, 1500, "ok", -1, res, sizeof(res));
    assert_true(fabs(hash_num(rc, dep, "state", "tokens_tat") - tat2 - 500.0) < 0.01);
    assert_true(hash_num(rc, dep, "state", "tokens_charged") == 500);

    /* With refund off, unused tokens stay charged. */
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "10000", "refund",
                 "0", NULL);
    v = reserve1(rc, dep, 1000, 60000, NULL);
    double tat3 = hash_num(rc, dep, "state", "tokens_tat");
    snprintf(id, sizeof(id), "%lld", v.id);
    settle1(rc, dep, id, 10, "ok", -1, res, sizeof(res));
    assert_true(hash_num(rc, dep, "state", "tokens_tat") == tat3);
}

static void test_refund_never_exceeds_bucket(void **state) {
    /* Two grants of a full burst each: A now, B one burst later. Refunding
     * all of A while B is still scheduled must give nothing back: the
     * provider's bucket fills to its cap before B either way. */
    const char *dep = "refund-bound";
    configure_on(rc, dep, "rpm", "600000", "tpm", "60000", "burst_requests", "1000", "burst_tokens", "1000",
                 "jitter_ms", "0", NULL);
    clock_freeze(rc, dep, 1.8e12); /* b's wait, exactly */
    char res[32], id[24];
    verdict a = reserve1(rc, dep, 1000, 60000, NULL);
    verdict b = reserve1(rc, dep, 1000, 60000, NULL);
    assert_int_equal(a.wait_ms, 0);
    assert_int_equal(b.wait_ms, 1000);
    double tat = hash_num(rc, dep, "state", "tokens_tat");
    snprintf(id, sizeof(id), "%lld", a.id);
    settle1(rc, dep, id, 0, "ok", -1, res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(hash_num(rc, dep, "state", "tokens_refunded") == 0);
    assert_true(hash_num(rc, dep, "state", "tokens_tat") == tat);
    /* Cancelling B before its slot gives back its tokens and its request. */
    double tat_r = hash_num(rc, dep, "state", "requests_tat");
    snprintf(id, sizeof(id), "%lld", b.id);
    settle1(rc, dep, id, -1, "cancelled", -1, res, sizeof(res));
    assert_true(hash_num(rc, dep, "state", "tokens_refunded") > 990);
    assert_true(hash_num(rc, dep, "state", "tokens_tat") < tat - 990);
    assert_true(hash_num(rc, dep, "state", "requests_tat") < tat_r);
}

static void test_expired_grant_is_charged_and_reclaimed(void **state) {
    const char *dep = "expiry";
    configure_on(rc, dep, "rpm", "60000", "tpm", "60000", "burst_tokens", "10000", "lease_ms", "1000", NULL);
    verdict v = reserve1(rc, dep, 4000, 0, NULL);
    assert_true(v.granted);
    double tat = hash_num(rc, dep, "state", "tokens_tat");
    assert_true(status_num(rc, dep, "outstanding_grants") == 1);
    advance_on(rc, dep, 1500);
    /* The next call reclaims it; its estimate stays charged. */
    verdict w = reserve1(rc, dep, 0, 60000, NULL);
    assert_true(w.granted);
    assert_true(hash_num(rc, dep, "state", "expired_total") == 1);
    assert_true(hash_num(rc, dep, "state", "tokens_tat") >= tat);
    char res[32], id[24];
    snprintf(id, sizeof(id), "%lld", v.id);
    settle1(rc, dep, id, 0, "ok", -1, res, sizeof(res));
    assert_string_equal(res, "unknown");
    assert_true(hash_num(rc, dep, "state", "tokens_refunded") == 0);
}

/* ---- retry budget -------------------------------------------------------- */

static int retry(redisContext *c, const char *dep, const char *mode, long long *balance) {
    redisReply *r = script_callv(c, SCRIPT_RETRY, dep, mode, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("retry: %s", r->str);
    int ok = (int)r->element[0]->integer;
    if (balance) *balance = r->element[1]->integer;
    if (!ok) assert_true(r->element[2]->integer > 0);
    freeReplyObject(r);
    return ok;
}

static void test_retry_budget_boundaries(void **state) {
    const char *dep = "retry";
    configure_on(rc, dep, "rpm", "600000", "retry_ttl_ms", "10000", "retry_min_per_s", "1", "retry_percent", "10",
                 NULL);
    long long bal;
    /* The floor: min 1/s x 10 s = exactly 10 retries with no successes. */
    assert_true(retry(rc, dep, "peek", &bal) && bal == 10);
    for (int i = 0; i < 10; i++) assert_int_equal(retry(rc, dep, "withdraw", NULL), 1);
    assert_int_equal(retry(rc, dep, "withdraw", &bal), 0);
    assert_int_equal(bal, 0);
    /* 9 successes at 10 % are not yet one retry; the 10th is. */
    char res[32], id[24];
    for (int i = 0; i < 10; i++) {
        verdict v = reserve1(rc, dep, 0, 60000, NULL);
        snprintf(id, sizeof(id), "%lld", v.id);
        settle1(rc, dep, id, -1, "ok", -1, res, sizeof(res));
        if (i == 8) assert_int_equal(retry(rc, dep, "peek", NULL), 0);
    }
    assert_int_equal(retry(rc, dep, "withdraw", NULL), 1);
    assert_int_equal(retry(rc, dep, "withdraw", NULL), 0);
    /* Failures deposit nothing. */
    verdict v = reserve1(rc, dep, 0, 60000, NULL);
    snprintf(id, sizeof(id), "%lld", v.id);
    settle1(rc, dep, id, -1, "failed", -1, res, sizeof(res));
    assert_int_equal(retry(rc, dep, "peek", NULL), 0);
    /* After the ttl everything has expired: the floor is back, whole. */
    advance_on(rc, dep, 10001);
    assert_true(retry(rc, dep, "peek", &bal) && bal == 10);
    assert_true(hash_num(rc, dep, "state", "retries_allowed") == 11);
    assert_true(hash_num(rc, dep, "state", "retries_refused") == 2);
}

/* ---- feedback: pause once, AIMD ----------------------------------------- */

static void test_pause_is_idempotent(void **state) {
    const char *dep = "pause";
    configure_on(rc, dep, "rpm", "600000", NULL);
    char res[32];
    double t0 = 0;
    for (int i = 0; i < 50; i++) {
        double t = settle1(rc, dep, "-", -1, "throttled", 2000, res, sizeof(res));
        assert_string_equal(res, "feedback");
        if (i == 0) t0 = t;
    }
    /* Fifty reports of one 429: one pause, ending 2 s after the first report
     * plus the time the reports took, not 50 x 2 s. */
    double until = hash_num(rc, dep, "state", "paused_until");
    assert_true(until >= t0 + 2000 && until < t0 + 2000 + 1000);
    assert_true(hash_num(rc, dep, "state", "pauses") == 1);
    assert_true(hash_num(rc, dep, "state", "throttles_seen") == 50);
    /* No slot starts before the pause ends; a short max wait is shed with
     * reason paused. */
    double now;
    verdict v = reserve1(rc, dep, 0, 60000, &now);
    assert_true(v.granted);
    assert_true(now + (double)v.wait_ms >= until);
    v = reserve1(rc, dep, 0, 10, NULL);
    assert_false(v.granted);
    assert_string_equal(v.reason, "paused");
    /* No AIMD from reports without a grant. */
    assert_true(status_num(rc, dep, "rate_scale") == 1.0);
}

/* A pause shifts the outstanding schedule behind it, spacing kept, instead
 * of piling the granted callers up at its end. */
static void test_pause_shifts_the_backlog(void **state) {
    const char *dep = "pause-shift";
    configure_on(rc, dep, "rpm", "600", "burst_requests", "1", "jitter_ms", "0", NULL);
    long long tokens[5] = {0, 0, 0, 0, 0}, maxwait[5] = {60000, 60000, 60000, 60000, 60000};
    verdict v[5];
    double t0 = reserve(rc, dep, 5, tokens, maxwait, v, NULL);
    for (int i = 0; i < 5; i++) assert_true(v[i].granted && llabs(v[i].wait_ms - 100 * i) <= 1);
    double tat = hash_num(rc, dep, "state", "requests_tat");
    char res[32];
    double t1 = settle1(rc, dep, "-", -1, "throttled", 1000, res, sizeof(res));
    double shift = hash_num(rc, dep, "state", "pause_shift_ms");
    /* The pause started at t1 (nothing paused before): the shift is 1000. */
    assert_true(fabs(shift - 1000) < 0.01);
    assert_true(fabs(hash_num(rc, dep, "state", "requests_tat") - (tat + 1000)) < 0.01);
    /* The next grant comes after the five shifted ones (last at t0 + 1400). */
    double now;
    verdict n = reserve1(rc, dep, 0, 60000, &now);
    assert_true(n.granted);
    print_message("  backlog shifted by %.0f ms; next slot at +%.0f ms from the first grant (paused from +%.0f)\n",
                  shift, now + (double)n.wait_ms - t0, t1 - t0);
    assert_true(now + (double)n.wait_ms >= t0 + 1500 - 1);
    assert_true(now + (double)n.wait_ms <= t1 + 1500 + 1);
}

static void test_aimd_lowers_and_restores(void **state) {
    const char *dep = "aimd";
    /* aimd_min_throttles 1: every unexplained 429 is evidence here (the
     * default of 3 is proven in test_profiles_script). */
    configure_on(rc, dep, "rpm", "6000", "burst_requests", "1", "jitter_ms", "0", "aimd_decrease", "0.5",
                 "aimd_min_scale", "0.2", "aimd_increase", "0.1", "aimd_interval_ms", "1000", "aimd_min_throttles", "1",
                 NULL);
    char res[32], id[24];
    verdict a = reserve1(rc, dep, 0, 600000, NULL);
    verdict b = reserve1(rc, dep, 0, 600000, NULL);
    snprintf(id, sizeof(id), "%lld", a.id);
    settle1(rc, dep, id, -1, "throttled", -1, res, sizeof(res));
    assert_true(status_num(rc, dep, "rate_scale") == 0.5);
    assert_true(status_num(rc, dep, "effective_rpm") == 3000);
    /* B was reserved before the decrease: its 429 is the same event. */
    snprintf(id, sizeof(id), "%lld", b.id);
    settle1(rc, dep, id, -1, "throttled", -1, res, sizeof(res));
    assert_true(status_num(rc, dep, "rate_scale") == 0.5);
    /* Reserved after the decrease: a new signal, x0.5 again, then the floor. */
    for (int i = 0; i < 3; i++) {
        verdict c = reserve1(rc, dep, 0, 600000, NULL);
        snprintf(id, sizeof(id), "%lld", c.id);
        settle1(rc, dep, id, -1, "throttled", -1, res, sizeof(res));
    }
    assert_true(status_num(rc, dep, "rate_scale") == 0.2);
    assert_true(hash_num(rc, dep, "state", "decreases") == 3);
    /* The lowered rate is what the schedule uses: 1200 RPM = 50 ms apart. */
    double t1, t2;
    advance_on(rc, dep, 500);
    verdict x = reserve1(rc, dep, 0, 600000, &t1);
    verdict y = reserve1(rc, dep, 0, 600000, &t2);
    double gap = (t2 + (double)y.wait_ms) - (t1 + (double)x.wait_ms);
    assert_true(gap > 49 && gap < 51);
    /* Quiet time restores additively: +0.1 per second, up to 1. */
    advance_on(rc, dep, 3000);
    assert_true(fabs(status_num(rc, dep, "rate_scale") - 0.5) < 1e-9);
    reserve1(rc, dep, 0, 600000, NULL);
    assert_true(fabs(hash_num(rc, dep, "state", "rate_scale") - 0.5) < 1e-9);
    advance_on(rc, dep, 60000);
    assert_true(status_num(rc, dep, "rate_scale") == 1.0);
}

/* ---- concurrency leases -------------------------------------------------- */

static void test_concurrency_cap_and_reclaim(void **state) {
    const char *dep = "conc";
    configure_on(rc, dep, "rpm", "600000", "max_concurrency", "2", "lease_ms", "5000", NULL);
    verdict a = reserve1(rc, dep, 0, 1000, NULL);
    verdict b = reserve1(rc, dep, 0, 1000, NULL);
    verdict c = reserve1(rc, dep, 0, 1000, NULL);
    assert_true(a.granted && b.granted);
    assert_false(c.granted);
    assert_string_equal(c.reason, "concurrency");
    assert_true(c.retry_after_ms >= 1);
    /* Every lease out: a request with time left waits for one (deferred,
     * asking again), one without is shed. Shed at once, the callers
     * whose streams ended first took every lease freed and the others
     * spent their attempts (concurrency-streams). */
    assert_true(c.deferred);
    verdict now = reserve1(rc, dep, 0, 0, NULL);
    assert_false(now.granted || now.deferred);
    assert_string_equal(now.reason, "concurrency");
    char res[32], id[24];
    snprintf(id, sizeof(id), "%lld", a.id);
    settle1(rc, dep, id, -1, "ok", -1, res, sizeof(res));
    c = reserve1(rc, dep, 0, 1000, NULL);
    assert_true(c.granted);
    assert_false(reserve1(rc, dep, 0, 1000, NULL).granted);
    /* Crashed holders: after the lease, both slots come back. */
    advance_on(rc, dep, 5001);
    assert_true(reserve1(rc, dep, 0, 1000, NULL).granted);
    assert_true(reserve1(rc, dep, 0, 1000, NULL).granted);
    assert_true(hash_num(rc, dep, "state", "expired_total") == 2);
}

/* ---- daily limits -------------------------------------------------------- */

static void test_daily_resets_at_utc_midnight(void **state) {
    const char *dep = "daily";
    configure_on(rc, dep, "rpm", "600000", "tpm", "600000", "burst_tokens", "100000", "rpd", "3", "tpd", "1000", NULL);
    /* Move the clock to 2 s before the next UTC midnight. */
    double now;
    reserve1(rc, dep, 0, 0, &now);
    double to_midnight = 86400000.0 - fmod(now, 86400000.0);
    advance_on(rc, dep, to_midnight - 2000);
    assert_true(reserve1(rc, dep, 100, 0, NULL).granted);
    verdict big = reserve1(rc, dep, 950, 0, NULL);
    assert_false(big.granted);
    assert_string_equal(big.reason, "daily");
    assert_true(reserve1(rc, dep, 100, 0, NULL).granted);
    verdict v = reserve1(rc, dep, 100, 0, NULL);
    assert_false(v.granted);
    assert_string_equal(v.reason, "daily");
    assert_true(v.retry_after_ms > 1000 && v.retry_after_ms <= 2000);
    assert_true(status_num(rc, dep, "today_requests") == 3);
    verdict huge = reserve1(rc, dep, 5000, 0, NULL);
    assert_string_equal(huge.reason, "too_large");
    advance_on(rc, dep, 2001);
    assert_true(reserve1(rc, dep, 100, 0, NULL).granted);
    assert_true(status_num(rc, dep, "today_requests") == 1);
    assert_true(status_num(rc, dep, "today_tokens") == 100);
}

/* ---- budgets in money (lua/budget.lua) ------------------------------------ */

/* One budget "b" of daily/total limits (1e-6 units), UTC. reserve/settle
 * over the {$budgets} keys; the reply's first element. */
static redisReply *budget_call(int nb, const char *const *names, int argc, const char **argv) {
    char keys[8][SCRIPTS_KEY_MAX];
    snprintf(keys[0], SCRIPTS_KEY_MAX, "sluice:{$budgets}:held");
    snprintf(keys[1], SCRIPTS_KEY_MAX, "sluice:{$budgets}:leases");
    snprintf(keys[2], SCRIPTS_KEY_MAX, "sluice:{$budgets}:clock");
    for (int i = 0; i < nb; i++) snprintf(keys[3 + i], SCRIPTS_KEY_MAX, "sluice:{$budgets}:b:%s", names[i]);
    redisReply *r = script_call_keys(rc, SCRIPT_BUDGET, 3 + nb, keys, argc, argv);
    assert_non_null(r);
    return r;
}

static long long budget_reserve(const char *rid, const char *amount, const char *lease, const char *daily,
                                const char *total, long long *out) {
    const char *name = "b";
    const char *argv[] = {"reserve", "1", "b", "USD", daily, "0", total, "", "0.8", "1", rid, amount, lease, "1", "1"};
    redisReply *all = budget_call(1, &name, 15, argv);
    if (all->type == REDIS_REPLY_ERROR) fail_msg("budget reserve: %s", all->str);
    assert_int_equal(all->type, REDIS_REPLY_ARRAY);
    assert_int_equal(all->elements, 1);
    redisReply *r = all->element[0];
    long long v = r->element[0]->integer;
    for (size_t i = 0; out && i < r->elements && i < 6; i++)
        out[i] = r->element[i]->type == REDIS_REPLY_INTEGER ? r->element[i]->integer
                 : r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, "b day") ? 1
                                                                                                     : 0;
    freeReplyObject(all);
    return v;
}

static void budget_settle(const char *rid, const char *actual, long long want_found) {
    const char *argv[] = {"settle", "1", rid, actual, ""};
    redisReply *r = budget_call(0, NULL, 5, argv);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("budget settle: %s", r->str);
    assert_int_equal(r->element[0]->integer, want_found);
    freeReplyObject(r);
}

static long long budget_field(const char *f) {
    redisReply *r = redisCommand(rc, "HGET sluice:{$budgets}:b:b %s", f);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

/* Redis restarted empty (or lost the state hash: eviction, a failover to
 * a replica behind): the agents still hold the grants made before, and
 * settle them. The grants made after must not reuse their ids, or an old
 * grant's settle (here a cancel) settles a new grant someone else holds:
 * its slot is given back while it is still sent, and its own settle is
 * "unknown". */
static void test_grant_ids_survive_lost_state(void **state) {
    (void)state;
    const char *dep = "lost-ids";
    configure_on(rc, dep, "rpm", "60", "burst_requests", "1", "jitter_ms", "0", NULL);
    long long tok[3] = {1, 1, 1}, mw[3] = {100000, 100000, 100000};
    verdict before[3], after[3];
    reserve(rc, dep, 3, tok, mw, before, NULL);
    for (int i = 0; i < 3; i++) assert_true(before[i].granted);
    /* Redis empty: every key of the deployment gone, limits written again. */
    redisReply *r = redisCommand(rc,
                                 "DEL sluice:{%s}:limits sluice:{%s}:state sluice:{%s}:grants sluice:{%s}:leases "
                                 "sluice:{%s}:refq:requests sluice:{%s}:refq:tokens",
                                 dep, dep, dep, dep, dep, dep);
    assert_non_null(r);
    freeReplyObject(r);
    configure_on(rc, dep, "rpm", "60", "burst_requests", "1", "jitter_ms", "0", NULL);
    advance_on(rc, dep, 5); /* a restart takes a moment */
    reserve(rc, dep, 3, tok, mw, after, NULL);
    for (int i = 0; i < 3; i++) {
        assert_true(after[i].granted);
        for (int j = 0; j < 3; j++) assert_true(after[i].id != before[j].id);
    }
    /* The old holder of the last grant gives it up: nothing of the new. */
    char id[32], res[32];
    snprintf(id, sizeof(id), "%lld", before[2].id);
    settle1(rc, dep, id, -1, "cancelled", -1, res, sizeof(res));
    assert_string_equal(res, "unknown");
    snprintf(id, sizeof(id), "%lld", after[2].id);
    settle1(rc, dep, id, -1, "cancelled", -1, res, sizeof(res));
    assert_string_equal(res, "settled");
}

/* Reserve at the largest cost, shed what can never fit, wait what fits
 * once in-flight requests settle, settle to the actual, charge a lease's
 * end in full; everything in one cluster slot. */
static void test_budget_reserve_settle_expire(void **state) {
    (void)state;
    redisReply *z = redisCommand(rc, "DEL sluice:{$budgets}:b:b sluice:{$budgets}:held sluice:{$budgets}:leases");
    freeReplyObject(z);
    long long out[6];
    /* 100 units a day: 60 + 40 fit; 1 more does not, and with 100 held
     * it may once they settle for less: "not now" (2). */
    assert_int_equal(budget_reserve("r1", "60", "60000", "100", "0", out), 1);
    assert_int_equal(out[1], 40);
    assert_int_equal(budget_reserve("r2", "40", "60000", "100", "0", out), 1);
    assert_int_equal(out[1], 0);
    /* warn_at 0.8 crossed by this grant: the reply names the budget and the period. */
    assert_int_equal(out[2], 1);
    const char *name = "b";
    const char *argv2[] = {"reserve", "1", "b", "USD", "100", "0", "0", "", "0.8", "1", "r2w", "0", "60000", "1", "1"};
    redisReply *w = budget_call(1, &name, 15, argv2);
    assert_int_equal(w->element[0]->element[0]->integer, 1);
    assert_int_equal(w->element[0]->element[2]->type, REDIS_REPLY_INTEGER); /* once per period: not again */
    freeReplyObject(w);
    budget_settle("r2w", "0", 1);
    assert_int_equal(budget_reserve("r3", "1", "60000", "100", "0", out), 2);
    assert_int_equal(budget_field("sheds"), 0); /* "not now" is no shed */
    /* 101 can never fit the day: shed, and never renews (more than the limit). */
    assert_int_equal(budget_reserve("r4", "101", "60000", "100", "0", out), 0);
    assert_int_equal(out[4], -1);
    /* r1 cost 10 of its 60: 50 come back. */
    budget_settle("r1", "10", 1);
    assert_int_equal(budget_field("day_spent"), 10);
    assert_int_equal(budget_field("day_reserved"), 40);
    assert_int_equal(budget_reserve("r3", "50", "60000", "100", "0", out), 1);
    /* Now spent 10, held 90: 1 more is "not now"; after r2 settles at 40
     * (its whole reservation) and r3 at 50, nothing is left: a shed
     * that renews at the next UTC midnight (within a day). */
    budget_settle("r2", "40", 1);
    budget_settle("r3", "50", 1);
    assert_int_equal(budget_field("day_spent"), 100);
    assert_int_equal(budget_field("day_reserved"), 0);
    assert_int_equal(budget_reserve("r5", "1", "60000", "100", "0", out), 0);
    assert_true(out[4] > 0 && out[4] <= 86400000);
    assert_int_equal(budget_field("sheds"), 2);
    budget_settle("r1", "10", 0); /* settled already: nothing found */
    assert_int_equal(budget_field("day_spent"), 100);
    /* A total budget: a reservation nobody settles is charged in full at
     * its lease end (1 ms here), on the next call. */
    z = redisCommand(rc, "DEL sluice:{$budgets}:b:b");
    freeReplyObject(z);
    assert_int_equal(budget_reserve("r6", "30", "1", "0", "100", out), 1);
    redisReply *t = redisCommand(rc, "HSET sluice:{$budgets}:clock test_clock_offset_ms 10");
    freeReplyObject(t);
    assert_int_equal(budget_reserve("r7", "70", "60000", "0", "100", out), 1);
    assert_int_equal(budget_field("total_spent"), 30);
    assert_int_equal(budget_field("total_reserved"), 70);
    assert_int_equal(budget_field("expired"), 1);
    t = redisCommand(rc, "DEL sluice:{$budgets}:clock");
    freeReplyObject(t);
    /* Bad arguments: an error, nothing written. */
    const char *bad[] = {"settle", "1", "r7", "-3", ""};
    redisReply *r = budget_call(0, NULL, 5, bad);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    assert_int_equal(budget_field("total_reserved"), 70);
    /* r7 asked again (the agent's first call timed out after Redis ran
     * it): granted, not reserved twice; its settle releases it all. */
    assert_int_equal(budget_reserve("r7", "70", "60000", "0", "100", out), 1);
    assert_int_equal(budget_field("total_reserved"), 70);
    budget_settle("r7", "0", 1);
    assert_int_equal(budget_field("total_reserved"), 0);
    assert_int_equal(budget_field("total_spent"), 30);
    /* Two budgets in one reservation (a group's request: its own and a
     * member's); the settle skips the member that did not serve it. */
    const char *two[2] = {"b", "m"};
    const char *argv3[] = {"reserve", "2",   "b", "USD", "0", "0",  "100", "",      "0.8", "m", "USD", "0",
                           "0",       "100", "",  "0.8", "1", "r9", "20",  "60000", "2",   "1", "2"};
    redisReply *g = budget_call(2, two, 23, argv3);
    assert_int_equal(g->element[0]->element[0]->integer, 1);
    freeReplyObject(g);
    /* Several items in one call, in order, each all or none: 50 and 30
     * fit the 80 left of m's total, the third (20) then waits for room. */
    const char *argv4[] = {"reserve", "2",     "b", "USD", "0",  "0",  "1000",  "",      "0.8", "m", "USD", "0",
                           "0",       "100",   "",  "0.8", "3",  "x1", "50",    "60000", "2",   "1", "2",   "x2",
                           "30",      "60000", "1", "2",   "x3", "20", "60000", "2",     "1",   "2"};
    g = budget_call(2, two, 34, argv4);
    assert_int_equal(g->elements, 3);
    assert_int_equal(g->element[0]->element[0]->integer, 1);
    assert_int_equal(g->element[1]->element[0]->integer, 1);
    assert_int_equal(g->element[2]->element[0]->integer, 2);
    freeReplyObject(g);
    for (int i = 0; i < 2; i++) {
        const char *st0[] = {"settle", "1", i ? "x2" : "x1", "0", ""};
        g = budget_call(0, NULL, 5, st0);
        freeReplyObject(g);
    }
    const char *st[] = {"settle", "1", "r9", "15", "m"};
    g = budget_call(0, NULL, 5, st);
    assert_int_equal(g->element[0]->integer, 1);
    freeReplyObject(g);
    assert_int_equal(budget_field("total_spent"), 45);
    redisReply *m = redisCommand(rc, "HMGET sluice:{$budgets}:b:m total_spent total_reserved");
    assert_string_equal(m->element[0]->str, "0");
    assert_string_equal(m->element[1]->str, "0");
    freeReplyObject(m);
}

/* ---- keys, hash tags, bad arguments -------------------------------------- */

static void test_keys_share_one_slot(void **state) {
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    assert_int_equal(scripts_keys("gpt-4o", keys), 0);
    long long slot = -1;
    for (int i = 0; i < SCRIPTS_NKEYS; i++) {
        redisReply *r = redisCommand(rc, "CLUSTER KEYSLOT %s", keys[i]);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (i == 0) slot = r->integer;
        assert_int_equal(r->integer, slot);
        freeReplyObject(r);
    }
    assert_int_equal(scripts_keys("a{b}", keys), -1);
    assert_int_equal(scripts_keys("", keys), -1);
    assert_int_equal(scripts_keys("has space", keys), -1);
    /* A call whose keys span two slots is refused by the cluster node, and a
     * call with keys of another layout is refused by the script. */
    const script *s = scripts_get(SCRIPT_STATUS);
    redisReply *r = redisCommand(rc, "EVAL %s 9 sluice:{a}:limits sluice:{b}:state k3 k4 k5 k6 k7 k8 k9", s->source);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "CROSSSLOT"));
    freeReplyObject(r);
    r = redisCommand(rc, "EVAL %s 9 sluice:{a}:limits sluice:{a}:x k3 k4 k5 k6 k7 k8 k9", s->source);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

static void expect_error(const char *dep, script_id id, const char *want, ...) {
    const char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, want);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) argv[argc++] = a;
    va_end(ap);
    char *before = dump_state(rc, dep);
    redisReply *r = script_call(rc, id, dep, argc, argv);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    if (!strstr(r->str, want)) fail_msg("error '%s' does not mention '%s'", r->str, want);
    freeReplyObject(r);
    char *after = dump_state(rc, dep);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

static void test_bad_arguments_change_nothing(void **state) {
    const char *dep = "bad";
    configure_on(rc, dep, "rpm", "60", "tpm", "1000", NULL);
    reserve1(rc, dep, 10, 1000, NULL);
    expect_error(dep, SCRIPT_RESERVE, "tokens must be a non-negative integer", "1", "-5", "10", NULL);
    expect_error(dep, SCRIPT_RESERVE, "tokens must be", "2", "5", "10", "abc", "10", NULL);
    expect_error(dep, SCRIPT_RESERVE, "max_wait_ms", "1", "5", "1e3", NULL);
    expect_error(dep, SCRIPT_RESERVE, "ARGV must be", "3", "5", "10", NULL);
    expect_error(dep, SCRIPT_RESERVE, "ARGV must be", NULL);
    expect_error(dep, SCRIPT_SETTLE, "outcome must be", "1", "1", "5", "great", "-1", NULL);
    expect_error(dep, SCRIPT_SETTLE, "actual must be", "1", "1", "-7", "ok", "-1", NULL);
    expect_error(dep, SCRIPT_SETTLE, "bad grant id", "1", "x1", "5", "ok", "-1", NULL);
    expect_error(dep, SCRIPT_SETTLE, "pause_ms", "1", "1", "5", "ok", "soon", NULL);
    expect_error(dep, SCRIPT_RETRY, "mode must be", "maybe", NULL);
    expect_error(dep, SCRIPT_CONFIGURE, "field 'rpm' must be", "rpm", "-60", NULL);
    expect_error(dep, SCRIPT_CONFIGURE, "field 'rpm' must be", "rpm", "sixty", NULL);
    expect_error(dep, SCRIPT_CONFIGURE, "unknown field 'rmp'", "rmp", "60", NULL);
    expect_error(dep, SCRIPT_CONFIGURE, "field 'aimd_decrease'", "rpm", "60", "aimd_decrease", "1.5", NULL);
    expect_error(dep, SCRIPT_CONFIGURE, "field 'rpm' is required", "tpm", "60", NULL);
    expect_error(dep, SCRIPT_CONFIGURE, "field 'retry_percent'", "rpm", "60", "retry_percent", "nan", NULL);
    expect_error("nosuch", SCRIPT_RESERVE, "unknown deployment 'nosuch'", "1", "5", "10", NULL);
    expect_error("nosuch", SCRIPT_SETTLE, "unknown deployment 'nosuch'", "1", "1", "5", "ok", "-1", NULL);
    expect_error("nosuch", SCRIPT_STATUS, "unknown deployment 'nosuch'", NULL);
    expect_error(dep, SCRIPT_HEARTBEAT, "window_ms", "agent-1", "0", NULL);
}

/* The live count of a heartbeat's reply {live, pause_shift_ms, now_us,
 * requests_backlog_ms, tokens_backlog_ms}. */
static long long hb_live(const redisReply *r) {
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("heartbeat: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 5);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_INTEGER);
    return r->element[0]->integer;
}

static void test_heartbeat_counts_live_agents(void **state) {
    const char *dep = "hb";
    configure_on(rc, dep, "rpm", "60", NULL);
    redisReply *r;
    const char *ids[] = {"a1", "a2", "a3"};
    for (int i = 0; i < 3; i++) {
        r = script_callv(rc, SCRIPT_HEARTBEAT, dep, ids[i], "3000", NULL);
        assert_int_equal(hb_live(r), i + 1);
        freeReplyObject(r);
    }
    r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "a3", "3000", "leave", NULL);
    assert_int_equal(hb_live(r), 2);
    freeReplyObject(r);
    advance_on(rc, dep, 2000);
    r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "a1", "3000", NULL);
    assert_int_equal(hb_live(r), 2);
    freeReplyObject(r);
    advance_on(rc, dep, 1500);
    /* a2 was last seen 3.5 s ago: gone. */
    r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "a1", "3000", NULL);
    assert_int_equal(hb_live(r), 1);
    freeReplyObject(r);
    assert_true(status_num(rc, dep, "live_agents") == 1);
}

/* A heartbeat says how far the fleet's schedule reaches past now, as a
 * reserve's reply head does: an agent without callers of its own knows
 * where local pacing would have to start should it lose Redis. */
static void test_heartbeat_reports_the_backlog(void **state) {
    (void)state;
    const char *dep = "hbb";
    configure_on(rc, dep, "rpm", "60", "tpm", "60000", NULL);
    redisReply *r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "idle", "3000", NULL);
    assert_int_equal(hb_live(r), 1);
    assert_int_equal(r->element[3]->integer, 0);
    assert_int_equal(r->element[4]->integer, 0);
    freeReplyObject(r);
    long long req = -1, tok = -1;
    double t0 = 0;
    for (int i = 0; i < 5; i++) {
        t0 = proc_now_ms();
        r = script_callv(rc, SCRIPT_RESERVE, dep, "1", "1000", "600000", NULL);
        assert_non_null(r);
        if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
        req = r->element[2]->integer;
        tok = r->element[3]->integer;
        freeReplyObject(r);
    }
    assert_true(req > 2000); /* a slot a second: five of them reach seconds ahead */
    assert_true(tok > 0);
    /* Redis' clock runs on (the test only moves it further): the backlog
     * is what the reserve said, less the time since, to the millisecond. */
    double t1 = proc_now_ms();
    r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "idle", "3000", NULL);
    double el = proc_now_ms() - t0 + 1;
    assert_int_equal(hb_live(r), 1);
    long long hreq = r->element[3]->integer, htok = r->element[4]->integer;
    freeReplyObject(r);
    assert_true(hreq <= req && hreq >= req - (long long)el - 1);
    assert_true(htok <= tok && htok >= tok - (long long)el - 1);
    advance_on(rc, dep, 1000);
    r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "idle", "3000", NULL);
    el = proc_now_ms() - t1 + 1;
    long long h2 = r->element[3]->integer;
    freeReplyObject(r);
    assert_true(h2 <= hreq - 1000 && h2 >= hreq - 1000 - (long long)el - 1);
}

/* Partition safety (lua/common.lua sl_silent): an agent whose promise
 * passed is silent and its share is held back from the shared rate (and
 * shown); a late call of a silent agent does not bring it back, its
 * heartbeat does; a silent agent's share is held until silent_hold_ms, and
 * an agent that left holds nothing. */
static long long reserve_as(const char *dep, const char *who, double *slot) {
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, who, "1", "0", "600000", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
    assert_int_equal(r->elements, 6);
    assert_int_equal(r->element[5]->element[0]->integer, 1);
    if (slot) *slot = (double)r->element[0]->integer / 1000.0 + (double)r->element[5]->element[2]->integer;
    long long id = r->element[5]->element[1]->integer;
    freeReplyObject(r);
    return id;
}

static void heartbeat_as(const char *dep, const char *id, const char *extra) {
    redisReply *r = script_callv(rc, SCRIPT_HEARTBEAT, dep, id, "3000", extra, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("heartbeat: %s", r->str);
    freeReplyObject(r);
}

/* The status of dep shows n silent agents and runs at rpm. */
static void expect_silent(const char *dep, double n, double rpm) {
    assert_true(status_num(rc, dep, "silent_agents") == n);
    assert_true(fabs(status_num(rc, dep, "effective_rpm") - rpm) < 1);
}

/* 6000 RPM one at a time, an agent silent 1250 ms after its promise,
 * counted live for 3 s, its share held 10 s. */
static void configure_silent(const char *dep) {
    configure_on(rc, dep, "rpm", "6000", "burst_requests", "1", "jitter_ms", "0", "silent_ms", "1250",
                 "agent_window_ms", "3000", "silent_hold_ms", "10000", NULL);
}

static void test_silent_share_held(void **state) {
    const char *dep = "silent";
    configure_silent(dep);
    heartbeat_as(dep, "a1", NULL);
    heartbeat_as(dep, "a2", NULL);
    heartbeat_as(dep, "a3", NULL);
    reserve_as(dep, "@a1/250", NULL);
    expect_silent(dep, 0, 6000);
    /* a1 and a2 go on, a3 says nothing for 1.5 s: silent. */
    advance_on(rc, dep, 1000);
    heartbeat_as(dep, "a1", NULL);
    heartbeat_as(dep, "a2", NULL);
    advance_on(rc, dep, 500);
    double s1, s2;
    reserve_as(dep, "@a1/250", &s1);
    reserve_as(dep, "@a1/250", &s2);
    expect_silent(dep, 1, 4000);
    assert_true(fabs(status_num(rc, dep, "held_rpm") - 2000) < 1);
    /* 4000 RPM: 15 ms apart. */
    print_message("  held: slots %.1f ms apart\n", s2 - s1);
    assert_true(s2 - s1 > 14 && s2 - s1 < 16); /* waits are whole ms */
    /* A late call of a3 (sent before it fell silent) changes nothing. */
    reserve_as(dep, "@a3/250", NULL);
    expect_silent(dep, 1, 4000);
    /* Its heartbeat (the hand-over after a reconnect) brings it back. */
    heartbeat_as(dep, "a3", NULL);
    expect_silent(dep, 0, 6000);
    /* A busy promise (250 ms) runs out sooner than a heartbeat's. */
    reserve_as(dep, "@a2/250", NULL);
    advance_on(rc, dep, 400);
    heartbeat_as(dep, "a1", NULL);
    expect_silent(dep, 1, 4000);
    /* a2 stays away: held until silent_hold_ms after its promise passed,
     * though its heartbeat expired (3 s) long before. */
    for (int i = 0; i < 9; i++) {
        advance_on(rc, dep, 1000);
        heartbeat_as(dep, "a1", NULL);
        heartbeat_as(dep, "a3", NULL);
    }
    expect_silent(dep, 1, 4000);
    assert_true(status_num(rc, dep, "live_agents") == 2);
    advance_on(rc, dep, 1000);
    heartbeat_as(dep, "a1", NULL);
    expect_silent(dep, 0, 6000);
    /* An agent that leaves holds nothing back. */
    heartbeat_as(dep, "a3", "leave");
    advance_on(rc, dep, 2000);
    heartbeat_as(dep, "a1", NULL);
    expect_silent(dep, 0, 6000);
}

/* An agent's return (heartbeat busy, lua/heartbeat.lua): the share held
 * for it is free, and the slots the others were granted at the held rate
 * are re-timed toward the whole rate (the reply's retime: sum of log K <
 * 0), so the next grant comes before the end of the old schedule; with
 * a local tail still held, nothing is re-timed. On a frozen clock
 * (clock_freeze): how far the compression goes depends on where now is among
 * the held slots, which real time passing between the calls would move. */
static void test_return_retimes(void **state) {
    const double T = 1.8e12; /* a fixed now */
    const char *dep = "return";
    configure_silent(dep);
    clock_freeze(rc, dep, T);
    heartbeat_as(dep, "a1", NULL);
    heartbeat_as(dep, "a2", NULL);
    heartbeat_as(dep, "a3", NULL);
    clock_freeze(rc, dep, T + 1000);
    heartbeat_as(dep, "a1", NULL);
    heartbeat_as(dep, "a2", NULL);
    clock_freeze(rc, dep, T + 1500);
    /* a3 silent: 4000 RPM, 15 ms apart; 40 slots reach 600 ms ahead. */
    double first = 0, last = 0;
    for (int i = 0; i < 40; i++) reserve_as(dep, "@a1/250", i == 0 ? &first : &last);
    expect_silent(dep, 1, 4000);
    assert_true(last - first > 580);
    /* a3 is back with nothing of its own left to send. */
    redisReply *r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "a3", "3000", "busy", "0", "0", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("heartbeat: %s", r->str);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_STRING); /* "<shift>:<sum of log K>:<at>" */
    assert_true(strncmp(r->element[1]->str, "0:", 2) == 0);    /* no pause: "0", not "-0" */
    double lg = 0;
    assert_int_equal(sscanf(r->element[1]->str, "%*[^:]:%lf", &lg), 1);
    print_message("  return: retime %s (K %.3f)\n", r->element[1]->str, exp(lg));
    /* Toward 4000 / 6000, as far as the held sends conform: all the way. */
    assert_true(fabs(lg - log(4000.0 / 6000.0)) < 1e-6);
    freeReplyObject(r);
    expect_silent(dep, 0, 6000);
    double next = 0;
    reserve_as(dep, "@a1/250", &next);
    print_message("  return: the next slot %.1f ms after the first, the old schedule ended at %.1f\n", next - first,
                  last + 15 - first);
    assert_true(next < last);

    /* The same with a3's local tail still held (its sends beside the
     * schedule's): no re-timing. */
    const char *dep2 = "return_tail";
    configure_silent(dep2);
    clock_freeze(rc, dep2, T);
    heartbeat_as(dep2, "a1", NULL);
    heartbeat_as(dep2, "a3", NULL);
    clock_freeze(rc, dep2, T + 1500);
    heartbeat_as(dep2, "a1", NULL);
    for (int i = 0; i < 40; i++) reserve_as(dep2, "@a1/250", NULL);
    r = script_callv(rc, SCRIPT_HEARTBEAT, dep2, "a3", "3000", "busy", "0", "0", "0", "0", "0", "0", "2000", "2000",
                     "0.5", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("heartbeat: %s", r->str);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER); /* never re-timed */
    freeReplyObject(r);
}

/* The stand-ins (?unknown:<i>) in dep's agents set. */
static long long stand_ins(const char *dep) {
    redisReply *r = redisCommand(rc, "ZRANGE sluice:{%s}:agents 0 -1", dep);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long n = 0;
    for (size_t i = 0; i < r->elements; i++) n += !strncmp(r->element[i]->str, "?unknown:", 9);
    freeReplyObject(r);
    return n;
}

/* After Redis lost the agents set: a hand-over from an agent it does not
 * know holds a stand-in for each agent its share says it paced beside;
 * an unknown agent's plain heartbeat (it had nothing to hand over) takes
 * one's place, a known agent's does not. */
static void test_plain_return_takes_a_stand_in(void **state) {
    (void)state;
    const char *dep = "standins";
    configure_silent(dep);
    redisReply *r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "a1", "3000", "busy", "0", "0", "0", "0", "0", "0", "2000",
                                 "2000", "0.333333", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("heartbeat: %s", r->str);
    freeReplyObject(r);
    assert_int_equal(stand_ins(dep), 2);
    heartbeat_as(dep, "a1", NULL);
    assert_int_equal(stand_ins(dep), 2);
    heartbeat_as(dep, "a2", NULL);
    assert_int_equal(stand_ins(dep), 1);
    heartbeat_as(dep, "a2", NULL);
    assert_int_equal(stand_ins(dep), 1);
    heartbeat_as(dep, "a3", NULL);
    assert_int_equal(stand_ins(dep), 0);
    heartbeat_as(dep, "a4", NULL); /* none left: a newcomer is just counted */
    assert_int_equal(stand_ins(dep), 0);
}

/* A grant not yet due when a pause shifts the schedule is held by its
 * agent to the pause's end: its lease moves with it. Before, pauses adding
 * up to lease_ms reclaimed it before it was sent: the concurrency cap let
 * another grant run beside it and its own settle was "unknown". */
static void test_pause_moves_leases(void **state) {
    (void)state;
    const char *dep = "pause-lease";
    configure_on(rc, dep, "rpm", "60", "burst_requests", "1", "jitter_ms", "0", "max_concurrency", "1", NULL);
    double t0 = 1796500000000.0;
    clock_freeze(rc, dep, t0);
    verdict a = reserve1(rc, dep, 1, 300000, NULL);
    assert_true(a.granted);
    char id[32], res[32];
    snprintf(id, sizeof(id), "%lld", a.id);
    clock_freeze(rc, dep, t0 + 500);
    settle1(rc, dep, id, 1, "ok", -1, res, sizeof(res));
    verdict b = reserve1(rc, dep, 1, 300000, NULL);
    assert_true(b.granted);
    assert_int_equal(b.wait_ms, 500);
    /* Another call's 429 pauses the fleet 130 s: b is released after it. */
    clock_freeze(rc, dep, t0 + 600);
    settle1(rc, dep, "-", -1, "throttled", 130000, res, sizeof(res));
    /* 125 s on, b still waits for its shifted slot: it holds the cap. */
    clock_freeze(rc, dep, t0 + 125000);
    verdict c = reserve1(rc, dep, 1, 300000, NULL);
    assert_false(c.granted);
    assert_string_equal(c.reason, "concurrency");
    assert_int_equal(hash_num(rc, dep, "state", "expired_total"), 0);
    clock_freeze(rc, dep, t0 + 160000);
    snprintf(id, sizeof(id), "%lld", b.id);
    settle1(rc, dep, id, 1, "ok", -1, res, sizeof(res));
    assert_string_equal(res, "settled");
}

/* A reserve call whose second item is bad is an error and holds nothing:
 * its first item must not stay held without its amount in the budget
 * (a later request then fitted beside it, and both spent: 1200 of a
 * daily 1000). */
static void test_budget_bad_item_holds_nothing(void **state) {
    (void)state;
    const char *name = "bad";
    const char *argv[] = {"reserve", "1",   "bad",   "USD", "1000", "0",  "0",  "",      "0.8", "2",
                          "q1",      "600", "60000", "1",   "1",    "q2", "-5", "60000", "1",   "1"};
    redisReply *r = budget_call(1, &name, 20, argv);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = redisCommand(rc, "HGET sluice:{$budgets}:held q1");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    r = redisCommand(rc, "ZSCORE sluice:{$budgets}:leases q1");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
}

/* status on a limits hash without some field (written by hand, as
 * docs/redis-keys.md says to try a limit: HDEL packed too; or by an older
 * configure): every field still answers with its value beside it. */
static void test_status_with_fields_absent(void **state) {
    (void)state;
    const char *dep = "status-absent";
    configure_on(rc, dep, "rpm", "600", NULL);
    redisReply *r = redisCommand(rc, "HDEL sluice:{%s}:limits packed max_concurrency rpd burst_tokens", dep);
    assert_non_null(r);
    freeReplyObject(r);
    char buf[64];
    assert_string_equal(status_text(rc, dep, "max_concurrency", buf, sizeof(buf)), "0");
    assert_string_equal(status_text(rc, dep, "rpd", buf, sizeof(buf)), "0");
    assert_true(status_num(rc, dep, "retry_balance") == 10);
    assert_true(status_num(rc, dep, "burst_requests") == 10);
}

/* dep holds n outstanding grants: n records, n leases. */
static void expect_outstanding(const char *dep, long long n) {
    redisReply *r = redisCommand(rc, "HLEN sluice:{%s}:grants", dep);
    assert_int_equal(r->integer, n);
    freeReplyObject(r);
    r = redisCommand(rc, "ZCARD sluice:{%s}:leases", dep);
    assert_int_equal(r->integer, n);
    freeReplyObject(r);
}

/* The dropped-agent tests' deployment: 60 RPM one at a time, an agent
 * silent 1250 ms after its promise, counted live 3 s, its share held 10 s;
 * the clock frozen at T, a1 and a2 joined. */
static void dropped_setup(const char *dep, double T) {
    configure_on(rc, dep, "rpm", "60", "burst_requests", "1", "jitter_ms", "0", "silent_ms", "1250", "agent_window_ms",
                 "3000", "silent_hold_ms", "10000", NULL);
    clock_freeze(rc, dep, T);
    heartbeat_as(dep, "a1", NULL);
    heartbeat_as(dep, "a2", NULL);
}

/* a1's heartbeat at t: the re-timing its reply names (the log of K, and
 * the anchor), from "<shift>:<sum of log K>:<at>". */
static void dropped_beat(const char *dep, double t, double *lg, double *at) {
    clock_freeze(rc, dep, t);
    redisReply *r = script_callv(rc, SCRIPT_HEARTBEAT, dep, "a1", "3000", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("heartbeat: %s", r->str);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_STRING);
    assert_int_equal(sscanf(r->element[1]->str, "%*[^:]:%lf:%lf", lg, at), 2);
    freeReplyObject(r);
}

/* An agent dropped after its hold (killed) sends none of its grants: a
 * heartbeat that drops it gives back those still ahead and re-times the
 * sends the others hold into the room they leave (lua/heartbeat.lua,
 * abandon). 60 RPM one at a time; a1 and a2 take turns, 40 slots 1 s
 * apart; a2 falls silent at T + 250 ms, its share is held 10 s and it is
 * dropped by a1's heartbeat at T + 11 s. Every verdict on a frozen clock. */
static void test_dropped_agent_gives_back(void **state) {
    const double T = 1.8e12;
    const char *dep = "dropped";
    dropped_setup(dep, T);
    long long a2_first = 0;
    for (int i = 0; i < 40; i++) {
        long long id = reserve_as(dep, i % 2 ? "@a2/250" : "@a1/250", NULL);
        if (i == 1) a2_first = id;
    }
    /* The record names its agent (field 13). */
    redisReply *r = redisCommand(rc, "HGET sluice:{%s}:grants %lld", dep, a2_first);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    int commas = 0;
    for (const char *p = r->str; *p; p++) commas += *p == ',';
    assert_int_equal(commas, 12);
    assert_true(strlen(r->str) > 3 && strcmp(r->str + strlen(r->str) - 3, ",a2") == 0);
    freeReplyObject(r);
    double tat0 = hash_num(rc, dep, "state", "requests_tat");
    assert_true(fabs(tat0 - (T + 40000)) < 1);
    /* Within the hold nothing is given back. */
    clock_freeze(rc, dep, T + 10000);
    heartbeat_as(dep, "a1", NULL);
    expect_outstanding(dep, 40);
    /* Past it: a2's 14 slots from T + 13 s on go back (T + 1, 3, .., 11 s
     * have passed), a1's 20 stay. */
    double lg = 0, at = 0;
    dropped_beat(dep, T + 11000, &lg, &at);
    expect_outstanding(dep, 26);
    assert_true(status_num(rc, dep, "abandoned_total") == 14);
    /* a1's 13 sends after the anchor (a bucket's worth and one send after
     * now: T + 13 s), 2 s apart, compress toward 1 s apart: K near 1/2
     * (a little less: the bucket's tolerance), and the schedule ends where
     * they do: replayed from the most the bucket can owe at now (T + 13 s),
     * the send at T + 12 s and those 13 end at T + 27 s. */
    double K = exp(lg), tat1 = hash_num(rc, dep, "state", "requests_tat");
    print_message("  dropped: K %.3f at T + %.0f ms, schedule end T + %.0f ms (was T + %.0f)\n", K, at - T, tat1 - T,
                  tat0 - T);
    assert_true(fabs(at - (T + 13000)) < 1);
    assert_true(K > 0.45 && K < 0.5 + 1e-6);
    assert_true(fabs(tat1 - (T + 27000)) < 1);
    /* The next grant comes at the new end. */
    double next = 0;
    reserve_as(dep, "@a1/250", &next);
    assert_true(fabs(next - tat1) < 2);
}

/* The same with a stretch only a1 had slots in (T + 13..22 s): one factor
 * from the first anchor (T + 13 s) could not compress past that stretch
 * (it runs at the whole rate), so the compression is anchored after it
 * and the sends 2 s apart there move to about 1 s apart. */
static void test_dropped_agent_dense_stretch(void **state) {
    const double T = 1.8e12;
    const char *dep = "dropped_dense";
    dropped_setup(dep, T);
    for (int i = 0; i < 53; i++) reserve_as(dep, (i < 13 || i > 22) && i % 2 ? "@a2/250" : "@a1/250", NULL);
    double tat0 = hash_num(rc, dep, "state", "requests_tat");
    assert_true(fabs(tat0 - (T + 53000)) < 1);
    double lg = 0, at = 0;
    dropped_beat(dep, T + 11000, &lg, &at);
    /* a2's slots from T + 13 s on: 23, 25, .., 51 s (15). */
    assert_true(hash_num(rc, dep, "state", "abandoned_total") == 15);
    double K = exp(lg), tat1 = hash_num(rc, dep, "state", "requests_tat");
    print_message("  dense: K %.3f at T + %.0f ms, schedule end T + %.0f ms (was T + %.0f)\n", K, at - T, tat1 - T,
                  tat0 - T);
    /* The fourth of ten anchors (13 s + 3 x 3.9 s): the sends at 26, 28, ..
     * 52 s toward 1 s apart, and the schedule ends where they do. */
    assert_true(fabs(at - (T + 24700)) < 1);
    assert_true(K > 0.45 && K < 0.5);
    assert_true(fabs(tat1 - (T + 39300)) < 1);
}

/* An agent id a record cannot hold (a comma) is left out of it. */
static void test_record_agent_comma(void **state) {
    const char *dep = "agentcomma";
    configure_on(rc, dep, "rpm", "60", NULL);
    long long id = reserve_as(dep, "@a,b/250", NULL);
    redisReply *r = redisCommand(rc, "HGET sluice:{%s}:grants %lld", dep, id);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_null(strstr(r->str, "a,b"));
    freeReplyObject(r);
    id = reserve_as(dep, "@ab/250", NULL);
    r = redisCommand(rc, "HGET sluice:{%s}:grants %lld", dep, id);
    assert_non_null(strstr(r->str, ",ab"));
    freeReplyObject(r);
}

/* A heartbeat reclaims grants whose lease ended, as a reserve does: a
 * fleet that stopped calling is left with none (counted expired). */
static void test_heartbeat_reclaims(void **state) {
    const char *dep = "hbreclaim";
    configure_on(rc, dep, "rpm", "600", "lease_ms", "1000", NULL);
    reserve_as(dep, "@a1/250", NULL);
    reserve_as(dep, "@a1/250", NULL);
    expect_outstanding(dep, 2);
    advance_on(rc, dep, 500);
    heartbeat_as(dep, "a1", NULL); /* within the lease: kept */
    expect_outstanding(dep, 2);
    advance_on(rc, dep, 2000);
    heartbeat_as(dep, "a1", NULL);
    expect_outstanding(dep, 0);
    assert_true(status_num(rc, dep, "expired_total") == 2);
}

/* ---- the packed limits and the grant record ------------------------------ */

/* One reserve item (tokens, max_wait, lane) on dep; its kind (1 granted,
 * 2 deferred, 0 shed) and, for a grant, its id in *id. */
static int reserve_lane1(const char *dep, const char *tok, const char *maxwait, const char *lane, long long *id) {
    redisReply *r = script_callv(rc, SCRIPT_RESERVE, dep, "1", tok, maxwait, lane, "", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("reserve: %s", r->str);
    assert_int_equal(r->elements, 6);
    int kind = (int)r->element[5]->element[0]->integer;
    if (kind == 1 && id) *id = r->element[5]->element[1]->integer;
    freeReplyObject(r);
    return kind;
}

static char *hget_text(const char *key, const char *field) {
    redisReply *r = redisCommand(rc, "HGET %s %s", key, field);
    assert_non_null(r);
    char *v = strdup(r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return v;
}

/* ---- calibrated estimates (docs/redis-keys.md) ------------------------ */

/* The tokens field (the first) of grant id's record on dep, as a number. */
static long long record_tokens(const char *dep, long long id, char **rec_out) {
    char key[96], ids[24];
    snprintf(key, sizeof(key), "sluice:{%s}:grants", dep);
    snprintf(ids, sizeof(ids), "%lld", id);
    char *rec = hget_text(key, ids);
    long long v = atoll(rec);
    if (rec_out) *rec_out = rec;
    else free(rec);
    return v;
}

/* One settle of id on dep with usage (text) ok. */
static void settle_usage(const char *dep, long long id, const char *usage) {
    char ids[24];
    snprintf(ids, sizeof(ids), "%lld", id);
    redisReply *r = script_callv(rc, SCRIPT_SETTLE, dep, "1", ids, usage, "ok", "-1", NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("settle: %s", r->str);
    freeReplyObject(r);
}

static char *state_field(const char *dep, const char *f) {
    char key[96];
    snprintf(key, sizeof(key), "sluice:{%s}:state", dep);
    return hget_text(key, f);
}

/* The state hash of dep has field f equal to want. */
static void assert_state_field(const char *dep, const char *f, const char *want) {
    char *got = state_field(dep, f);
    assert_string_equal(got, want);
    free(got);
}

/* The provider counts 3.2x the estimate's input part: the settle learns
 * it, the next grant charges the input part at it (the max output as
 * given), and an exact item is charged as sent and teaches nothing. */
static void test_calibration_learns_and_applies(void **state) {
    (void)state;
    configure_on(rc, "cal", "rpm", "6000", "tpm", "1000000", NULL);
    long long id = 0;
    assert_int_equal(reserve_lane1("cal", "500+500", "60000", "", &id), 1);
    char *rec = NULL;
    assert_int_equal(record_tokens("cal", id, &rec), 1000);
    assert_non_null(strstr(rec, ",500,500,,,500")); /* the raw input estimate, field 11 */
    free(rec);
    settle_usage("cal", id, "1600+300");
    assert_state_field("cal", "estimate_ratio", "3.2000");
    assert_int_equal(reserve_lane1("cal", "500+500", "60000", "", &id), 1);
    assert_int_equal(record_tokens("cal", id, &rec), 1600 + 500);
    assert_non_null(strstr(rec, ",1600,500,,,500"));
    free(rec);
    /* Charged as the provider counts: the settle charges nothing more. */
    settle_usage("cal", id, "1600+200");
    assert_state_field("cal", "tokens_charged", "1100"); /* the first grant's 1100 only */
    /* Exact: charged as sent, no raw estimate, no sample. */
    assert_int_equal(reserve_lane1("cal", "=500+500", "60000", "", &id), 1);
    assert_int_equal(record_tokens("cal", id, &rec), 1000);
    assert_null(strstr(rec, ",,,"));
    free(rec);
    settle_usage("cal", id, "900+200");
    assert_state_field("cal", "estimate_samples", "2");
    /* Partial (an image the estimate guessed): calibrated like any other
     * (1600 + 500), but no raw estimate and no sample, however far the
     * provider's count is from it. */
    assert_int_equal(reserve_lane1("cal", "~500+500", "60000", "", &id), 1);
    assert_int_equal(record_tokens("cal", id, &rec), 1600 + 500);
    assert_null(strstr(rec, ",,,500")); /* no raw input estimate (field 11) */
    free(rec);
    settle_usage("cal", id, "9000+200");
    assert_state_field("cal", "estimate_samples", "2");
    assert_state_field("cal", "estimate_ratio", "3.2000");
    /* The same in a combined figure: times the ratio, the marker gone. */
    assert_int_equal(reserve_lane1("cal", "~1000", "60000", "", &id), 1);
    assert_int_equal(record_tokens("cal", id, &rec), 3200);
    assert_null(strchr(rec, '~'));
    free(rec);
    /* A combined figure: its parts unknown, times the ratio above 1. */
    assert_int_equal(reserve_lane1("cal", "1000", "60000", "", &id), 1);
    assert_int_equal(record_tokens("cal", id, NULL), 3200);
    /* The deployment counts exactly: nothing is calibrated. */
    configure_on(rc, "cal", "rpm", "6000", "tpm", "1000000", "estimate_exact", "1", NULL);
    assert_int_equal(reserve_lane1("cal", "500+500", "60000", "", &id), 1);
    assert_int_equal(record_tokens("cal", id, NULL), 1000);
}

/* Field k (1-based) of grant id's record on dep, or "" past its end. */
static void record_field(const char *dep, long long id, int k, char *out, size_t n) {
    char *rec = NULL;
    record_tokens(dep, id, &rec);
    const char *p = rec;
    for (int i = 1; i < k && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    size_t len = p ? strcspn(p, ",") : 0;
    snprintf(out, n, "%.*s", (int)len, p ? p : "");
    free(rec);
}

/* The first answer says the provider counts 3.2x the input estimate: the
 * grants still out, charged at the estimate, are charged the difference
 * at once (not when each settles, after their agents reserved what
 * follows), each record keeps it (field 17), and their own settles charge
 * only what is left. */
static void test_calibration_charges_grants_out_ahead(void **state) {
    (void)state;
    configure_on(rc, "cala", "rpm", "6000", "tpm", "1000000", NULL);
    long long a = 0, b = 0, c = 0;
    assert_int_equal(reserve_lane1("cala", "500+500", "60000", "", &a), 1);
    assert_int_equal(reserve_lane1("cala", "500+500", "60000", "", &b), 1);
    assert_int_equal(reserve_lane1("cala", "500+500", "60000", "", &c), 1);
    settle_usage("cala", a, "1600+300");
    assert_state_field("cala", "estimate_ratio", "3.2000");
    /* a's own 1100, and 1100 ahead for each of b and c. */
    assert_state_field("cala", "tokens_charged", "3300");
    assert_state_field("cala", "estimate_ahead", "2200");
    char f17[32];
    record_field("cala", b, 17, f17, sizeof(f17));
    assert_string_equal(f17, "1100");
    record_field("cala", c, 17, f17, sizeof(f17));
    assert_string_equal(f17, "1100");
    /* b counts what was charged ahead: nothing more. c counts 100 more
     * (ratio 3.4): only that. */
    settle_usage("cala", b, "1600+300");
    assert_state_field("cala", "tokens_charged", "3300");
    settle_usage("cala", c, "1700+300");
    assert_state_field("cala", "tokens_charged", "3400");
    /* A rise within the ratio's noise (3.4 to 3.6: under 10 %) charges
     * nothing ahead; each grant's usage charges its own. */
    long long d = 0, e = 0;
    assert_int_equal(reserve_lane1("cala", "500+500", "60000", "", &d), 1);
    assert_int_equal(reserve_lane1("cala", "500+500", "60000", "", &e), 1);
    assert_int_equal(record_tokens("cala", e, NULL), 1700 + 500);
    settle_usage("cala", d, "1800+300");
    assert_state_field("cala", "estimate_ratio", "3.6000");
    record_field("cala", e, 17, f17, sizeof(f17));
    assert_string_equal(f17, "");
    assert_state_field("cala", "tokens_charged", "3500");
}

/* The safe side: the 90th percentile of the kept ratios, not the mean;
 * a ratio below 1 lowers the charge (so the fleet uses the quota); a
 * combined figure is never lowered; without news the ratio decays toward
 * 1 with the half-life. */
static void test_calibration_quantile_low_and_decay(void **state) {
    (void)state;
    configure_on(rc, "calq", "rpm", "6000", "tpm", "1000000", "estimate_half_life_ms", "600000", NULL);
    /* Ten ratios 0.5 .. 0.95 (prompt 50 .. 95 of an estimate of 100). */
    for (int k = 0; k < 10; k++) {
        long long id = 0;
        assert_int_equal(reserve_lane1("calq", "=0+10", "60000", "", &id), 1);
        settle_usage("calq", id, "1+1"); /* exact: no sample */
        assert_int_equal(reserve_lane1("calq", "100+10", "60000", "", &id), 1);
        char u[32];
        snprintf(u, sizeof(u), "%d+5", 50 + 5 * k);
        settle_usage("calq", id, u);
    }
    assert_state_field("calq", "estimate_ratio", "0.9000"); /* the 9th of 10 */
    long long id = 0;
    assert_int_equal(reserve_lane1("calq", "100+10", "60000", "", &id), 1);
    assert_int_equal(record_tokens("calq", id, NULL), 90 + 10);
    assert_int_equal(reserve_lane1("calq", "110", "60000", "", &id), 1);
    assert_int_equal(record_tokens("calq", id, NULL), 110);
    /* A half-life later: halfway back to 1 (0.95), two: 0.975. */
    char *at = state_field("calq", "estimate_ratio_at");
    char older[64];
    snprintf(older, sizeof(older), "%.3f", atof(at) - 1200000);
    free(at);
    freeReplyObject(redisCommand(rc, "HSET sluice:{calq}:state estimate_ratio_at %s", older));
    assert_int_equal(reserve_lane1("calq", "1000+10", "60000", "", &id), 1);
    long long t = record_tokens("calq", id, NULL);
    assert_true(t >= 975 + 10 && t <= 976 + 10);
    /* STATUS shows the ratio in force and the one learned. */
    redisReply *r = script_callv(rc, SCRIPT_STATUS, "calq", NULL);
    assert_non_null(r);
    int seen = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (!strcmp(r->element[i]->str, "estimate_ratio")) {
            assert_true(atof(r->element[i + 1]->str) > 0.97 && atof(r->element[i + 1]->str) < 0.98);
            seen++;
        }
        if (!strcmp(r->element[i]->str, "estimate_ratio_learned")) {
            assert_string_equal(r->element[i + 1]->str, "0.9000");
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    freeReplyObject(r);
}

/* While learning (fewer than 4 fresh ratios) an item that teaches is not
 * granted beyond estimate_learn_horizon_ms (deferred); an exact one is. */
static void test_calibration_learning_horizon(void **state) {
    (void)state;
    configure_on(rc, "call", "rpm", "6000", "tpm", "6000", "burst_tokens", "100", "estimate_learn_horizon_ms", "250",
                 NULL);
    long long id = 0;
    assert_int_equal(reserve_lane1("call", "50+50", "60000", "", &id), 1);  /* now */
    assert_int_equal(reserve_lane1("call", "50+50", "60000", "", &id), 2);  /* 1 s ahead: deferred */
    assert_int_equal(reserve_lane1("call", "=50+50", "60000", "", &id), 1); /* exact: reserved ahead */
}

/* configure writes the fields (defaults too) and the packed form the
 * scripts read, with the plan only when there are lanes or tenants; a
 * hash without the packed field (an older configure) is read as before;
 * the grant record leaves out cin,cout without input or output tokens,
 * and settle still reads a record of the older scripts. */
static void test_limits_packed_and_records(void **state) {
    (void)state;
    configure_on(rc, "pk", "rpm", "60", "tpm", "1000", NULL);
    char *packed = hget_text("sluice:{pk}:limits", "packed");
    print_message("  packed: %s\n", packed);
    assert_non_null(strstr(packed, "\"v\":1"));
    assert_non_null(strstr(packed, "\"rpm\":60"));
    assert_null(strstr(packed, "\"plan\""));
    assert_null(strstr(packed, "jitter_ms")); /* a default: left out */
    free(packed);
    char *j = hget_text("sluice:{pk}:limits", "jitter_ms");
    assert_string_equal(j, "10"); /* the mirror has every field */
    free(j);
    /* Lanes: the plan is packed; both forms defer the lower lane alike. */
    const char *deps[2] = {"pkl", "pkl-old"};
    for (int k = 0; k < 2; k++) {
        configure_on(rc, deps[k], "rpm", "60", "burst_requests", "1", "lane.hi", "0,-1,0", "lane.lo", "1,0,0", NULL);
        char key[64];
        snprintf(key, sizeof(key), "sluice:{%s}:limits", deps[k]);
        char *p = hget_text(key, "packed");
        assert_non_null(strstr(p, "\"plan\""));
        free(p);
        if (k == 1) freeReplyObject(redisCommand(rc, "HDEL %s packed", key));
        assert_int_equal(reserve_lane1(deps[k], "1", "60000", "hi", NULL), 1);
        /* The next slot is a second away: lo (horizon 0) defers, hi waits. */
        assert_int_equal(reserve_lane1(deps[k], "1", "60000", "lo", NULL), 2);
        assert_int_equal(reserve_lane1(deps[k], "1", "60000", "hi", NULL), 1);
        assert_true(hash_num(rc, deps[k], "state", "l.lo.deferred_total") == 1);
    }
    /* Records: 8 fields without input/output tokens, 10 with, and for an item
     * the calibration learns from an 11th (the raw input estimate), then after
     * the 12th and 13th (empty here) the sums of the raw input and its charge
     * over the teaching grants so far (14th and 15th). */
    configure_on(rc, "rec-a", "rpm", "60", "tpm", "1000", NULL);
    configure_on(rc, "rec-b", "rpm", "60", "itpm", "1000", "otpm", "1000", NULL);
    long long ida = 0, idb = 0;
    assert_int_equal(reserve_lane1("rec-a", "100", "1000", "", &ida), 1);
    assert_int_equal(reserve_lane1("rec-b", "60+40", "1000", "", &idb), 1);
    char ids[24];
    snprintf(ids, sizeof(ids), "%lld", ida);
    char *ra = hget_text("sluice:{rec-a}:grants", ids);
    snprintf(ids, sizeof(ids), "%lld", idb);
    char *rb = hget_text("sluice:{rec-b}:grants", ids);
    print_message("  records: %s | %s\n", ra, rb);
    int na = 1, nb = 1;
    for (char *c = ra; *c; c++) na += *c == ',';
    for (char *c = rb; *c; c++) nb += *c == ',';
    assert_int_equal(na, 8);
    assert_int_equal(nb, 15);
    size_t lb = strlen(rb);
    assert_true(lb > 11 && !strcmp(rb + lb - 11, ",60,,,60,60"));
    /* An older record (tokens,slot,reserved,creq,ctok) settles. */
    char *comma = ra;
    for (int k = 0; k < 5; k++) comma = strchr(comma + 1, ',');
    *comma = 0;
    snprintf(ids, sizeof(ids), "%lld", ida);
    freeReplyObject(redisCommand(rc, "HSET sluice:{rec-a}:grants %s %s", ids, ra));
    char res[32];
    settle1(rc, "rec-a", ids, 70, "ok", -1, res, sizeof(res));
    assert_string_equal(res, "settled");
    assert_true(hash_num(rc, "rec-a", "state", "tokens_actual") == 70);
    free(ra);
    free(rb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_share_one_slot),
        cmocka_unit_test(test_budget_reserve_settle_expire),
        cmocka_unit_test(test_grant_ids_survive_lost_state),
        cmocka_unit_test(test_use_all_of_it),
        cmocka_unit_test(test_shed_consumes_nothing),
        cmocka_unit_test(test_settle_refund_and_charge_exact),
        cmocka_unit_test(test_refund_never_exceeds_bucket),
        cmocka_unit_test(test_expired_grant_is_charged_and_reclaimed),
        cmocka_unit_test(test_retry_budget_boundaries),
        cmocka_unit_test(test_pause_is_idempotent),
        cmocka_unit_test(test_pause_shifts_the_backlog),
        cmocka_unit_test(test_aimd_lowers_and_restores),
        cmocka_unit_test(test_concurrency_cap_and_reclaim),
        cmocka_unit_test(test_daily_resets_at_utc_midnight),
        cmocka_unit_test(test_bad_arguments_change_nothing),
        cmocka_unit_test(test_heartbeat_counts_live_agents),
        cmocka_unit_test(test_heartbeat_reports_the_backlog),
        cmocka_unit_test(test_heartbeat_reclaims),
        cmocka_unit_test(test_silent_share_held),
        cmocka_unit_test(test_plain_return_takes_a_stand_in),
        cmocka_unit_test(test_status_with_fields_absent),
        cmocka_unit_test(test_budget_bad_item_holds_nothing),
        cmocka_unit_test(test_pause_moves_leases),
        cmocka_unit_test(test_return_retimes),
        cmocka_unit_test(test_dropped_agent_gives_back),
        cmocka_unit_test(test_dropped_agent_dense_stretch),
        cmocka_unit_test(test_record_agent_comma),
        cmocka_unit_test(test_never_over_offer_random),
        cmocka_unit_test(test_limits_packed_and_records),
        cmocka_unit_test(test_calibration_learns_and_applies),
        cmocka_unit_test(test_calibration_charges_grants_out_ahead),
        cmocka_unit_test(test_calibration_quantile_low_and_decay),
        cmocka_unit_test(test_calibration_learning_horizon),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
