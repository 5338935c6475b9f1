/* test_groups: deployment groups end to end (issue 8), judged on the
 * providers' own ledgers.
 *
 * Each test brings up a private redis-server, three `sluice mock`
 * providers (mock_fixture), each serving one deployment with its own quota
 * (600, 300 and 150 RPM, bursts of two seconds of quota, tagged eu, eu,
 * us), and a sluiced (sluiced_fixture) whose group gpt-4o lists them in
 * that priority order. Workers are threads (worker_call): ACQUIRE gpt-4o
 * on sluiced, POST to the member the grant names at the endpoint it
 * gives, SETTLE with the outcome and the provider's headers; a call that
 * fails (429, 503, no answer) is tried again by acquiring from the group
 * again. Proven:
 *   - saturated, the fleet gets the sum of the members' quotas (each
 *     member at >= 85 % of its quota over a 12 s window, the group at
 *     >= 93 %) with at most 1 % 429s over the whole run;
 *   - with capacity to spare (80 % of the primary's quota), every request
 *     is served by the primary and the others see none;
 *   - the primary's provider starts answering 503 (POST /control): its
 *     breaker opens within the breaker's window and the traffic moves to
 *     the others (the primary then sees only the half-open probes); no
 *     request is lost (each succeeds exactly once, over all ledgers);
 *     when the provider recovers, a probe closes the breaker and the
 *     traffic is back on the primary;
 *   - residency under load: requests with TAG eu and those of tenant acme
 *     (restricted to eu in the group) never reach the us member's ledger,
 *     flow on both eu members, while untagged traffic does use the us
 *     member; a tag no member carries is shed `tag`.
 * Waits are bounded polls (wait_until), never a sleep in the hope that
 * something happened; the fixed pacing steps only shape the load.
 * Skipped when sluiced or sluice are not built. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "mock_fixture.h"
#include "proc.h"
#include "redis_fixture.h"
#include "sluiced_fixture.h"
#include "worker_call.h"

#define GROUP "gpt-4o"
#define NMEMBERS 3
#define MAX_WORKERS 48
#define MAX_ATTEMPTS 20   /* provider calls per request before it counts as lost */
#define MAX_SHEDS 200     /* sheds per request before it counts as lost */
#define MAX_WAIT_MS 10000 /* MAXWAIT of every ACQUIRE */
#define HTTP_TIMEOUT_MS 15000L
#define JOIN_MS 30000 /* bound on the workers' stop: MAXWAIT plus a call */

typedef struct member_def {
    const char *name;
    int rpm;
    int burst; /* two seconds of quota, at the mock and in sluiced */
    const char *tag;
} member_def;

static const member_def members[NMEMBERS] = {
    {"ptu-norway", 600, 20, "eu"},
    {"paygo-sweden", 300, 10, "eu"},
    {"paygo-us", 150, 5, "us"},
};

/* ---- the world: Redis, three providers, sluiced ------------------------------ */

typedef struct world {
    redis_fixture redis;
    sluiced_fixture agent;
    mock_fixture mock[NMEMBERS];
    int up;
} world;

static world W;

static int have_binaries(void) {
    if (!sluiced_fixture_binary() || !mock_fixture_binary()) {
        fprintf(stderr, "test_groups: SKIPPED: build sluiced and sluice first\n");
        return 0;
    }
    return 1;
}

/* Brings everything up; group_extra is more YAML under the group (its
 * breaker, its tenants), indented by four spaces. */
static void world_up(const char *group_extra) {
    if (!have_binaries()) skip();
    memset(&W, 0, sizeof(W));
    W.up = 1;
    assert_int_equal(redis_fixture_start(&W.redis, 0), 0);
    for (int i = 0; i < NMEMBERS; i++) {
        char rpm[16], burst[16], seed[16];
        snprintf(rpm, sizeof(rpm), "%d", members[i].rpm);
        snprintf(burst, sizeof(burst), "%d", members[i].burst);
        snprintf(seed, sizeof(seed), "%d", i + 1);
        const char *args[] = {"--deployment", members[i].name, "--rpm",  rpm,  "--burst", burst,
                              "--service-ms", "20-60",         "--seed", seed, NULL};
        assert_int_equal(mock_fixture_start(&W.mock[i], args, 10000), 0);
    }
    char yaml[4096];
    int n = snprintf(yaml, sizeof(yaml),
                     "redis: {url: \"unix://%s\"}\n"
                     "agent: {socket: \"%%SOCK%%\", heartbeat_ms: 200}\n"
                     "deployments:\n",
                     W.redis.sock);
    for (int i = 0; i < NMEMBERS; i++) /* jitter_ms: ASan-built workers on a small machine send late. */
        n += snprintf(yaml + n, sizeof(yaml) - (size_t)n,
                      "  %s: {rpm: %d, burst: {requests: %d}, jitter_ms: 100, endpoint: \"http://127.0.0.1:%d\", "
                      "tags: [%s]}\n",
                      members[i].name, members[i].rpm, members[i].burst, W.mock[i].port, members[i].tag);
    n += snprintf(yaml + n, sizeof(yaml) - (size_t)n,
                  "groups:\n"
                  "  " GROUP ":\n"
                  "    members: [%s, %s, %s]\n"
                  "    spill_ms: 500\n"
                  "%s",
                  members[0].name, members[1].name, members[2].name, group_extra ? group_extra : "");
    assert_true(n > 0 && (size_t)n < sizeof(yaml));
    assert_int_equal(sluiced_fixture_start(&W.agent, yaml), 0);
}

/* ---- workers ----------------------------------------------------------------- */

/* One request of an open-loop run: when it arrives and who served it. */
typedef struct job {
    double arrive_ms; /* proc_now_ms() */
    int member;       /* index of the member that answered 200, -1 */
    int attempts, sheds;
    double done_ms;
    atomic_int state; /* 0 pending, 1 served, -1 lost */
} job;

typedef struct fleet fleet;

typedef struct worker {
    fleet *f;
    pthread_t tid;
    int started;
    atomic_int finished;
    worker_call call;
    char client[48];
    const char *tag, *tenant;
    long long seq;
    /* Counts, read once the thread is joined. */
    long long served, n429, n503, other, sheds, lost, errors;
    long long by_member[NMEMBERS];
    long long not_allowed; /* grants on a member outside the worker's tag */
    char error[256];
} worker;

struct fleet {
    worker w[MAX_WORKERS];
    int n;
    job *jobs; /* open loop when set: each job once, at its arrival */
    size_t njobs;
    atomic_size_t next;
    atomic_int stop;               /* closed loop: start no new request */
    atomic_int inflight[NMEMBERS]; /* granted on the member, its answer not back yet */
    atomic_int abort;              /* give up at once (teardown after a failure) */
};

static fleet F;

static int member_index(const char *name) {
    for (int i = 0; i < NMEMBERS; i++)
        if (strcmp(members[i].name, name) == 0) return i;
    return -1;
}

/* Sleeps until t_ms or the abort, in short steps. Returns 1 when aborted. */
static int worker_sleep_until(fleet *f, double t_ms) {
    while (proc_now_ms() < t_ms) {
        if (atomic_load(&f->abort)) return 1;
        double left = t_ms - proc_now_ms();
        proc_sleep_ms(left > 20 ? 20 : (int)ceil(left));
    }
    return atomic_load(&f->abort);
}

static void worker_fail(worker *w, const char *what) {
    w->errors++;
    if (!w->error[0]) snprintf(w->error, sizeof(w->error), "%s: %.200s", what, w->call.error);
}

/* One request until a provider accepted it. Returns 1 when served. */
static int worker_request(worker *w, job *jb) {
    fleet *f = w->f;
    worker_call *c = &w->call;
    char content[96];
    int attempts = 0, sheds = 0;
    snprintf(content, sizeof(content), "%s request %lld", w->client, w->seq++);
    while (attempts < MAX_ATTEMPTS && sheds < MAX_SHEDS && !atomic_load(&f->abort)) {
        worker_acquire a = worker_call_acquire(c, GROUP, 24, MAX_WAIT_MS, w->tag, w->tenant);
        if (a == WORKER_SHED) {
            w->sheds++;
            sheds++;
            double wait = c->retry_after_ms > 0 && c->retry_after_ms < 200 ? (double)c->retry_after_ms : 200;
            if (worker_sleep_until(f, proc_now_ms() + wait)) break;
            continue;
        }
        if (a == WORKER_ERROR) {
            worker_fail(w, "acquire");
            break;
        }
        int m = member_index(c->member);
        if (m < 0) {
            snprintf(c->error, sizeof(c->error), "granted on unknown member '%s'", c->member);
            worker_fail(w, "acquire");
            break;
        }
        if (!jb && atomic_load(&f->stop)) { /* closed loop, stopping: never sent */
            worker_call_settle(c, "cancelled");
            return 0;
        }
        if (w->tag && strcmp(members[m].tag, w->tag) != 0) w->not_allowed++;
        if (w->tenant && strcmp(members[m].tag, "eu") != 0) w->not_allowed++;
        attempts++;
        atomic_fetch_add(&f->inflight[m], 1);
        long status = worker_call_post(c, c->endpoint, c->member, content, 16, HTTP_TIMEOUT_MS);
        atomic_fetch_sub(&f->inflight[m], 1);
        const char *outcome = status == 200 ? "ok" : status == 429 ? "throttled" : "failed";
        if (status == 200) w->served++, w->by_member[m]++;
        else if (status == 429) w->n429++;
        else if (status == 503) w->n503++;
        else w->other++;
        if (worker_call_settle(c, outcome) != 0) worker_fail(w, "settle");
        if (status == 200) {
            if (jb) {
                jb->member = m;
                jb->attempts = attempts;
                jb->sheds = sheds;
                jb->done_ms = proc_now_ms();
            }
            return 1;
        }
    }
    w->lost++;
    if (jb) {
        jb->attempts = attempts;
        jb->sheds = sheds;
    }
    return 0;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    fleet *f = w->f;
    if (f->jobs) {
        for (;;) {
            size_t i = atomic_fetch_add(&f->next, 1);
            if (i >= f->njobs) break;
            job *jb = &f->jobs[i];
            if (worker_sleep_until(f, jb->arrive_ms)) break;
            atomic_store(&jb->state, worker_request(w, jb) ? 1 : -1);
        }
    } else {
        while (!atomic_load(&f->stop) && !atomic_load(&f->abort)) worker_request(w, NULL);
    }
    atomic_store(&w->finished, 1);
    return NULL;
}

/* Adds a worker (before fleet_start). */
static void fleet_add(fleet *f, const char *client, const char *tag, const char *tenant) {
    assert_true(f->n < MAX_WORKERS);
    worker *w = &f->w[f->n++];
    memset(w, 0, sizeof(*w));
    w->f = f;
    snprintf(w->client, sizeof(w->client), "%s", client);
    w->tag = tag;
    w->tenant = tenant;
}

static void fleet_start(fleet *f) {
    for (int i = 0; i < f->n; i++) {
        worker *w = &f->w[i];
        if (worker_call_open(&w->call, W.agent.sock, MAX_WAIT_MS + 5000, w->client) != 0)
            fail_msg("worker %s: %s", w->client, w->call.error);
    }
    for (int i = 0; i < f->n; i++) {
        assert_int_equal(pthread_create(&f->w[i].tid, NULL, worker_main, &f->w[i]), 0);
        f->w[i].started = 1;
    }
}

/* Open loop: n jobs arriving every interval_ms from now + lead_ms. */
static void fleet_jobs(fleet *f, size_t n, double interval_ms, double lead_ms) {
    f->jobs = calloc(n, sizeof(job));
    assert_non_null(f->jobs);
    f->njobs = n;
    double t0 = proc_now_ms() + lead_ms;
    for (size_t i = 0; i < n; i++) {
        f->jobs[i].arrive_ms = t0 + interval_ms * (double)i;
        f->jobs[i].member = -1;
    }
}

/* Paces the test: sleeps until t_ms (proc_now_ms), if it is ahead. */
static void sleep_until(double t_ms) {
    double left = t_ms - proc_now_ms();
    if (left > 0) proc_sleep_ms((int)ceil(left));
}

/* Polls pred(arg) every 10 ms for at most ms; returns its last value. */
static int wait_until(int (*pred)(void *), void *arg, int ms) {
    double deadline = proc_now_ms() + ms;
    for (;;) {
        if (pred(arg)) return 1;
        if (proc_now_ms() > deadline) return pred(arg);
        proc_sleep_ms(10);
    }
}

static int primary_idle(void *arg) { return atomic_load(&((fleet *)arg)->inflight[0]) == 0; }

static int all_finished(void *arg) {
    fleet *f = arg;
    for (int i = 0; i < f->n; i++)
        if (f->w[i].started && !atomic_load(&f->w[i].finished)) return 0;
    return 1;
}

/* Stops (closed loop) or lets the jobs run out (open loop) within ms, then
 * joins every worker and closes its connections. Returns 1 when all had
 * finished in time. */
static int fleet_finish(fleet *f, int ms) {
    atomic_store(&f->stop, 1);
    int in_time = wait_until(all_finished, f, ms);
    if (!in_time) {
        atomic_store(&f->abort, 1);
        wait_until(all_finished, f, JOIN_MS); /* a blocked ACQUIRE times out */
    }
    for (int i = 0; i < f->n; i++) {
        worker *w = &f->w[i];
        if (w->started && atomic_load(&w->finished)) {
            pthread_join(w->tid, NULL);
            w->started = 0;
        }
        worker_call_close(&w->call);
    }
    return in_time;
}

/* Sums of the workers' counts. */
typedef struct fleet_sum {
    long long served, n429, n503, other, sheds, lost, errors, not_allowed;
    long long by_member[NMEMBERS];
    const char *error;
} fleet_sum;

static fleet_sum fleet_total(const fleet *f) {
    fleet_sum s = {0};
    for (int i = 0; i < f->n; i++) {
        const worker *w = &f->w[i];
        s.served += w->served;
        s.n429 += w->n429;
        s.n503 += w->n503;
        s.other += w->other;
        s.sheds += w->sheds;
        s.lost += w->lost;
        s.errors += w->errors;
        s.not_allowed += w->not_allowed;
        for (int m = 0; m < NMEMBERS; m++) s.by_member[m] += w->by_member[m];
        if (!s.error && w->error[0]) s.error = w->error;
    }
    return s;
}

static int teardown(void **state) {
    (void)state;
    if (F.n) {
        atomic_store(&F.abort, 1);
        fleet_finish(&F, JOIN_MS);
    }
    free(F.jobs);
    memset(&F, 0, sizeof(F));
    if (!W.up) return 0;
    sluiced_fixture_stop(&W.agent, 0);
    for (int i = 0; i < NMEMBERS; i++) mock_fixture_stop(&W.mock[i]);
    redis_fixture_stop(&W.redis);
    memset(&W, 0, sizeof(W));
    return 0;
}

/* ---- the providers' ledgers and sluiced's STATUS -------------------------- */

static json_t *ledger(int m, const char *query) {
    json_t *l = mock_fixture_stats(&W.mock[m], query);
    if (!l) fail_msg("cannot read the ledger of %s", members[m].name);
    return l;
}

static long long ledger_count(int m, const char *field) {
    char path[128];
    json_t *l = ledger(m, "");
    snprintf(path, sizeof(path), "totals/%s", field);
    long long v = mock_fixture_count(l, path);
    json_decref(l);
    return v;
}

/* A field of STATUS <deployment> on sluiced, into out ("" when absent). */
static void status_field(const char *dep, const char *field, char *out, size_t n) {
    redisContext *rc = sluiced_fixture_connect(&W.agent, 5000);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "STATUS %s", dep);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ARRAY) fail_msg("STATUS %s: %s", dep, r->type == REDIS_REPLY_ERROR ? r->str : "?");
    out[0] = '\0';
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, field) == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            snprintf(out, n, "%s", r->element[i + 1]->str);
    freeReplyObject(r);
    redisFree(rc);
}

static long long status_int(const char *dep, const char *field) {
    char v[64];
    status_field(dep, field, v, sizeof(v));
    return strtoll(v, NULL, 10);
}

/* Prints what each worker saw, for a failure's diagnosis. */
static void fleet_print(const char *what, const fleet *f) {
    fleet_sum s = fleet_total(f);
    fprintf(stderr,
            "test_groups: %s: served %lld (on %s %lld, %s %lld, %s %lld), 429 %lld, 503 %lld, other %lld, "
            "sheds %lld, lost %lld, errors %lld%s%s\n",
            what, s.served, members[0].name, s.by_member[0], members[1].name, s.by_member[1], members[2].name,
            s.by_member[2], s.n429, s.n503, s.other, s.sheds, s.lost, s.errors, s.error ? ": " : "",
            s.error ? s.error : "");
}

/* ---- (a) saturated: the sum of the quotas, <= 1 % 429s ------------------------ */

static void test_saturated_fleet_gets_the_sum(void **state) {
    enum { WORKERS = 32, WARMUP_MS = 2000, WINDOW_MS = 12000 };
    (void)state;
    world_up(NULL);
    for (int i = 0; i < WORKERS; i++) {
        char id[32];
        snprintf(id, sizeof(id), "sat-%d", i);
        fleet_add(&F, id, NULL, NULL);
    }
    fleet_start(&F);
    /* The bursts go in the first moments; the window sees the rates. Both
     * are fixed spans of load, what is measured: a warm-up cut short would
     * leave burst in the window, which the bound util <= 1.05 below sees
     * (each burst is 2 s of quota: 1.17 over the 12 s). */
    proc_sleep_ms(WARMUP_MS);
    long long req = 0, n429 = 0;
    for (int m = 0; m < NMEMBERS; m++) {
        json_t *l = ledger(m, "?reset=1"); /* the warm-up's counts; buckets kept */
        req += mock_fixture_count(l, "totals/requests");
        n429 += mock_fixture_count(l, "totals/status_429");
        json_decref(l);
    }
    proc_sleep_ms(WINDOW_MS);
    double got = 0, quota = 0, util[NMEMBERS];
    long long acc[NMEMBERS];
    for (int m = 0; m < NMEMBERS; m++) {
        json_t *l = ledger(m, "");
        double span = json_real_value(json_object_get(l, "now_ms")) - json_real_value(json_object_get(l, "since_ms"));
        acc[m] = mock_fixture_count(l, "totals/accepted");
        double q = members[m].rpm / 60000.0 * span;
        util[m] = (double)acc[m] / q;
        got += (double)acc[m];
        quota += q;
        json_decref(l);
    }
    int finished = fleet_finish(&F, JOIN_MS);
    for (int m = 0; m < NMEMBERS; m++) { /* the window and the stop */
        req += ledger_count(m, "requests");
        n429 += ledger_count(m, "status_429");
    }
    fleet_print("saturated", &F);
    fprintf(stderr,
            "test_groups: saturated, %d ms window: %s %lld (%.1f %% of its quota), %s %lld (%.1f %%), %s %lld "
            "(%.1f %%); group %.1f %% of the sum; 429s %lld of %lld requests (%.2f %%)\n",
            WINDOW_MS, members[0].name, acc[0], 100 * util[0], members[1].name, acc[1], 100 * util[1], members[2].name,
            acc[2], 100 * util[2], 100 * got / quota, n429, req, req ? 100.0 * (double)n429 / (double)req : 0);
    assert_true(finished);
    fleet_sum s = fleet_total(&F);
    assert_int_equal(s.errors, 0);
    assert_true(req > 0);
    assert_true((double)n429 <= 0.01 * (double)req);
    for (int m = 0; m < NMEMBERS; m++) assert_true(util[m] >= 0.85 && util[m] <= 1.05);
    assert_true(got >= 0.93 * quota);
}

/* ---- (b) capacity to spare: everything on the primary ------------------------ */

static void test_spare_capacity_stays_on_the_primary(void **state) {
    /* 8 requests a second against the primary's 10 (burst 20), for 6 s:
     * more than the burst, so the rate matters, never more than the rate. */
    enum { WORKERS = 8, JOBS = 48 };
    (void)state;
    world_up(NULL);
    fleet_jobs(&F, JOBS, 125, 200);
    for (int i = 0; i < WORKERS; i++) {
        char id[32];
        snprintf(id, sizeof(id), "spare-%d", i);
        fleet_add(&F, id, NULL, NULL);
    }
    fleet_start(&F);
    int finished = fleet_finish(&F, JOBS * 125 + JOIN_MS);
    fleet_print("spare capacity", &F);
    assert_true(finished);
    for (size_t i = 0; i < F.njobs; i++) {
        assert_int_equal(atomic_load(&F.jobs[i].state), 1);
        assert_int_equal(F.jobs[i].member, 0);
        assert_int_equal(F.jobs[i].attempts, 1);
    }
    assert_int_equal(ledger_count(0, "accepted"), JOBS);
    assert_int_equal(ledger_count(0, "requests"), JOBS);
    assert_int_equal(ledger_count(1, "requests"), 0);
    assert_int_equal(ledger_count(2, "requests"), 0);
}

/* ---- (c) a member's provider fails: breaker, fail over, probe, back ------------ */

typedef struct status_wait {
    const char *dep, *field, *want;
} status_wait;

static int status_is(void *arg) {
    status_wait *s = arg;
    char v[64];
    status_field(s->dep, s->field, v, sizeof(v));
    return strcmp(v, s->want) == 0;
}

typedef struct count_wait {
    int member;
    const char *field;
    long long above;
} count_wait;

static int count_above(void *arg) {
    count_wait *c = arg;
    return ledger_count(c->member, c->field) > c->above;
}

static void test_breaker_moves_traffic_and_probes_back(void **state) {
    /* 5 requests a second for 16 s: on the primary while it is healthy
     * (its quota is 10/s), on the others (7.5/s together) while it fails. */
    enum { WORKERS = 8, JOBS = 80, INTERVAL = 200, FAIL_AT = 3000, RECOVER_AT = 9000 };
    enum { WINDOW_S = 2, BREAK_S = 2, MIN_REQUESTS = 5 };
    const char *primary = members[0].name;
    char extra[256];
    (void)state;
    snprintf(extra, sizeof(extra), "    breaker: {failure_ratio: 0.5, min_requests: %d, window_s: %d, break_s: %d}\n",
             MIN_REQUESTS, WINDOW_S, BREAK_S);
    world_up(extra);
    fleet_jobs(&F, JOBS, INTERVAL, 100);
    double t0 = F.jobs[0].arrive_ms;
    for (int i = 0; i < WORKERS; i++) {
        char id[32];
        snprintf(id, sizeof(id), "fo-%d", i);
        fleet_add(&F, id, NULL, NULL);
    }
    fleet_start(&F);

    /* Healthy: the primary serves everything. */
    sleep_until(t0 + FAIL_AT);
    long long before = ledger_count(0, "accepted");
    assert_true(before > 0);
    assert_int_equal(ledger_count(1, "requests") + ledger_count(2, "requests"), 0);

    /* The primary's provider starts failing; its breaker opens within the
     * window and traffic moves to the others. */
    assert_int_equal(mock_fixture_control(&W.mock[0], "?fail_503=1"), 200);
    double t_fail = proc_now_ms();
    status_wait open = {primary, "breaker_state", "open"};
    int opened = wait_until(status_is, &open, WINDOW_S * 1000 + 3000);
    double t_open = proc_now_ms();
    fprintf(stderr, "test_groups: breaker open %.0f ms after the provider began failing (window %d s)\n",
            t_open - t_fail, WINDOW_S);
    assert_true(opened);
    assert_true(t_open - t_fail <= WINDOW_S * 1000 + 1000);
    /* The calls granted on the primary before the opening come back (a
     * probe is not due before the break ends). */
    assert_true(wait_until(primary_idle, &F, 5000));
    long long during0 = ledger_count(0, "requests");
    sleep_until(t0 + RECOVER_AT);
    long long during1 = ledger_count(0, "requests");
    double outage_ms = proc_now_ms() - t_open;
    /* While open, only the half-open probes reach the primary: one per
     * break at most, each failing and re-opening the breaker. */
    long long probes_max = (long long)ceil(outage_ms / (BREAK_S * 1000.0)) + 1;
    fprintf(stderr,
            "test_groups: %lld requests reached the failing primary in %.0f ms while its breaker was open "
            "(probes allowed: %lld)\n",
            during1 - during0, outage_ms, probes_max);
    assert_true(during1 - during0 <= probes_max);
    assert_true(ledger_count(1, "accepted") + ledger_count(2, "accepted") > 0);

    /* Recovery: a probe succeeds, the breaker closes, traffic comes back. */
    assert_int_equal(mock_fixture_control(&W.mock[0], "?fail_503=0"), 200);
    double t_rec = proc_now_ms();
    count_wait back = {0, "accepted", before};
    int came_back = wait_until(count_above, &back, BREAK_S * 1000 + 3000);
    status_wait closed = {primary, "breaker_state", "closed"};
    int is_closed = wait_until(status_is, &closed, 3000);
    double t_back = proc_now_ms();
    fprintf(stderr, "test_groups: the primary served again %.0f ms after its provider recovered (break %d s)\n",
            t_back - t_rec, BREAK_S);
    assert_true(came_back);
    assert_true(is_closed);

    int finished = fleet_finish(&F, (int)(t0 + JOBS * INTERVAL - proc_now_ms()) + JOIN_MS);
    fleet_print("fail over", &F);
    assert_true(finished);
    fleet_sum s = fleet_total(&F);
    assert_int_equal(s.errors, 0);
    /* No request lost: each served exactly once over the three ledgers. */
    size_t after = 0, after_on_primary = 0;
    for (size_t i = 0; i < F.njobs; i++) {
        job *jb = &F.jobs[i];
        if (atomic_load(&jb->state) != 1) fail_msg("request %zu was lost after %d attempts", i, jb->attempts);
        if (jb->arrive_ms > t_back + 500) {
            after++;
            after_on_primary += jb->member == 0;
        }
    }
    long long accepted = 0;
    for (int m = 0; m < NMEMBERS; m++) accepted += ledger_count(m, "accepted");
    assert_int_equal(accepted, JOBS);
    assert_true(ledger_count(0, "status_503") >= MIN_REQUESTS);
    /* Back on the primary: the requests that arrived after it closed. */
    fprintf(stderr, "test_groups: after recovery %zu of %zu requests on the primary\n", after_on_primary, after);
    assert_true(after >= 5);
    assert_true(after_on_primary * 10 >= after * 9);
    assert_true(status_int(primary, "breaker_opened_total") >= 1);
    assert_true(status_int(primary, "breaker_closed_total") >= 1);
    assert_true(status_int(primary, "breaker_probes_total") >= 1);
}

/* ---- (d) residency: eu requests never reach the us member ---------------------- */

/* Sums a counter over the ledger's clients whose id starts with prefix. */
static long long clients_count(const json_t *l, const char *prefix, const char *field) {
    const char *id;
    json_t *c;
    long long n = 0;
    json_object_foreach(json_object_get(l, "clients"), id, c) {
        if (strncmp(id, prefix, strlen(prefix)) == 0) n += mock_fixture_count(c, field);
    }
    return n;
}

static void test_residency_holds_under_load(void **state) {
    enum { TAGGED = 10, TENANT = 10, ANY = 6, RUN_MS = 8000 };
    (void)state;
    world_up("    tenants:\n      acme: {tag: eu}\n");
    for (int i = 0; i < TAGGED + TENANT + ANY; i++) {
        char id[32];
        if (i < TAGGED) snprintf(id, sizeof(id), "eu-tag-%d", i);
        else if (i < TAGGED + TENANT) snprintf(id, sizeof(id), "eu-acme-%d", i);
        else snprintf(id, sizeof(id), "any-%d", i);
        fleet_add(&F, id, i < TAGGED ? "eu" : NULL, i >= TAGGED && i < TAGGED + TENANT ? "acme" : NULL);
    }
    fleet_start(&F);
    /* A fixed span of load: what is measured. Cut short it would fail the
     * counts below that need traffic on every member, not pass. */
    proc_sleep_ms(RUN_MS);

    /* A tag no member carries: shed at once, never routed elsewhere. */
    redisContext *rc = sluiced_fixture_connect(&W.agent, 5000);
    assert_non_null(rc);
    redisReply *r = redisCommand(rc, "ACQUIRE " GROUP " TAG apac");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_true(strncmp(r->str, "SHED tag", 8) == 0);
    freeReplyObject(r);
    redisFree(rc);

    int finished = fleet_finish(&F, JOIN_MS);
    fleet_print("residency", &F);
    assert_true(finished);
    fleet_sum s = fleet_total(&F);
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.not_allowed, 0);
    json_t *l[NMEMBERS];
    for (int m = 0; m < NMEMBERS; m++) l[m] = ledger(m, "");
    long long eu_on_us = clients_count(l[2], "eu-", "requests");
    long long any_on_us = clients_count(l[2], "any-", "accepted");
    long long req = 0, n429 = 0;
    for (int m = 0; m < NMEMBERS; m++) {
        req += mock_fixture_count(l[m], "totals/requests");
        n429 += mock_fixture_count(l[m], "totals/status_429");
    }
    fprintf(stderr,
            "test_groups: residency: eu-tag on %s %lld, on %s %lld; acme on %s %lld, on %s %lld; eu on %s %lld; "
            "untagged on %s %lld; 429s %lld of %lld\n",
            members[0].name, clients_count(l[0], "eu-tag-", "accepted"), members[1].name,
            clients_count(l[1], "eu-tag-", "accepted"), members[0].name, clients_count(l[0], "eu-acme-", "accepted"),
            members[1].name, clients_count(l[1], "eu-acme-", "accepted"), members[2].name, eu_on_us, members[2].name,
            any_on_us, n429, req);
    /* Zero eu requests on the us provider, though it had traffic. */
    assert_int_equal(eu_on_us, 0);
    assert_true(any_on_us > 0);
    /* Both eu members carried both kinds of eu traffic. */
    for (int m = 0; m < 2; m++) {
        assert_true(clients_count(l[m], "eu-tag-", "accepted") > 0);
        assert_true(clients_count(l[m], "eu-acme-", "accepted") > 0);
    }
    assert_true((double)n429 <= 0.01 * (double)req);
    for (int m = 0; m < NMEMBERS; m++) json_decref(l[m]);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_saturated_fleet_gets_the_sum, teardown),
        cmocka_unit_test_teardown(test_spare_capacity_stays_on_the_primary, teardown),
        cmocka_unit_test_teardown(test_breaker_moves_traffic_and_probes_back, teardown),
        cmocka_unit_test_teardown(test_residency_holds_under_load, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
