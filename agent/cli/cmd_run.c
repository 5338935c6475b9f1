/* cmd_run: `sluice run`, a governed batch runner.
 *
 * Sends every request of a JSONL file to one deployment's endpoint, or to
 * the endpoint of the member of a group that each grant names
 * (run_target.c), paced by the fleet's budget through libsluice, and
 * appends one record per request to a results file (or the errors file),
 * so a rerun with the same files does only what is left.
 *
 * Everything happens on one libuv loop on the main thread:
 *   - HTTP: libcurl multi on the loop (run_http.c), any number of transfers
 *     without a thread per request;
 *   - libsluice: sl_acquire_async() and sl_may_retry_async() call back on
 *     the governor's own thread. The callback only copies the result into
 *     the request's preallocated event and queues it (a mutex and
 *     uv_async_send); the loop thread takes it from there. So every
 *     decision, every settle and every write happens on the loop thread,
 *     with no locks beyond that queue.
 *
 * One request (an item) goes through: acquire -> send -> settle ->
 * (success: record) or (failure: backoff + fleet retry budget + deadline
 * say retry: wait, acquire again; or record the failure). A shed acquire
 * (no slot within the max wait) is not a failure: the item waits the
 * retry-after it was given and asks again, within its deadline. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <uv.h>

#include "cli_flags.h"
#include "cmd.h"
#include "config.h"
#include "run_args.h"
#include "run_files.h"
#include "run_http.h"
#include "run_input.h"
#include "run_target.h"
#include "sluice.h"

#define RUN_MAX_HEADERS 64
/* The governor unreachable for this long stops the run (resumable). */
#define RUN_UNAVAIL_GIVE_UP_MS 30000
#define RUN_UNAVAIL_PAUSE_MS 1000
/* Every member of a group behind an open breaker: ask again after this. */
#define RUN_BREAKER_WAIT_MS 5000
/* The progress line: refreshed every tick, the rate over RUN_RATE_TICKS. */
#define RUN_TICK_MS 500
#define RUN_RATE_TICKS 20
/* An attempt is cut this long before the request's deadline. */
#define RUN_DEADLINE_MARGIN_MS 10
#define RUN_MIN_ATTEMPT_MS 1000

/* Which response headers a settle passes on (--settle-headers). */
enum { SETTLE_HDR_ALL = 0, SETTLE_HDR_RETRY_AFTER, SETTLE_HDR_NONE };

/* ---- options ------------------------------------------------------------------ */

typedef struct run_cli {
    const char *config, *deployment, *in, *out, *errors, *socket, *shard, *settle_headers, *lane, *tenant, *tag;
    long long concurrency, max_attempts;
    double deadline_s, timeout_s;
    int embedded, fsync, retry_errors, no_progress, help;
} run_cli;

#define OPT(f) offsetof(run_cli, f)

static const cli_flag run_flags[] = {
    {"--config", "-c", "FILE", CLI_STR, OPT(config), 0, 0,
     "sluiced configuration (deployments, endpoint, agent.socket); default $SLUICE_CONFIG"},
    {"--deployment", "-d", "NAME", CLI_STR, OPT(deployment), 0, 0,
     "the deployment, or group of deployments, to send to (required)"},
    {"--in", "-i", "FILE", CLI_STR, OPT(in), 0, 0, "requests, one chat-completions JSON per line (required)"},
    {"--out", "-o", "FILE", CLI_STR, OPT(out), 0, 0, "results, appended; ids already there are skipped (required)"},
    {"--errors", NULL, "FILE", CLI_STR, OPT(errors), 0, 0, "failures, appended (default OUT.errors.jsonl)"},
    {"--lane", NULL, "NAME", CLI_STR, OPT(lane), 0, 0,
     "lane of every request (default: the deployment's default lane); a line's \"lane\" overrides it"},
    {"--tenant", NULL, "NAME", CLI_STR, OPT(tenant), 0, 0,
     "tenant of every request (one not configured: the \"default\" class); a line's \"tenant\" overrides it"},
    {"--tag", NULL, "TAG", CLI_STR, OPT(tag), 0, 0,
     "only members carrying TAG may serve (a group; e.g. eu for data residency); a line's \"tag\" overrides it"},
    {"--concurrency", "-j", "N", CLI_INT, OPT(concurrency), 1, 100000,
     "requests in progress at once: waiting for a slot, in flight or backing off (default 32)"},
    {"--max-attempts", NULL, "N", CLI_INT, OPT(max_attempts), 1, 100,
     "HTTP attempts per request, the first included (default 5)"},
    {"--deadline-s", NULL, "S", CLI_DOUBLE, OPT(deadline_s), 0, 1e7,
     "patience per request, from when it is taken: slots, attempts and backoffs (0 = none, the default)"},
    {"--timeout-s", NULL, "S", CLI_DOUBLE, OPT(timeout_s), 0.001, 1e6,
     "limit of one HTTP attempt (default 600)"},
    {"--socket", NULL, "PATH", CLI_STR, OPT(socket), 0, 0, "sluiced socket (default: agent.socket of the config)"},
    {"--embedded", NULL, NULL, CLI_BOOL, OPT(embedded), 0, 0,
     "run the governor in this process (no sluiced needed), with the config's redis"},
    {"--shard", NULL, "I/N", CLI_STR, OPT(shard), 0, 0,
     "take only lines L with (L - 1) mod N == I, to split one file between processes"},
    {"--retry-errors", NULL, NULL, CLI_BOOL, OPT(retry_errors), 0, 0,
     "try again the ids that are only in the errors file"},
    {"--settle-headers", NULL, "WHICH", CLI_STR, OPT(settle_headers), 0, 0,
     "response headers passed to the governor: all (the default), retry-after, or none"},
    {"--fsync", NULL, NULL, CLI_BOOL, OPT(fsync), 0, 0, "fdatasync the files after every record"},
    {"--no-progress", NULL, NULL, CLI_BOOL, OPT(no_progress), 0, 0, "no progress line, even on a terminal"},
    {"--help", NULL, NULL, CLI_BOOL, OPT(help), 0, 0, "show this help"},
};

#define RUN_NFLAGS (sizeof(run_flags) / sizeof(run_flags[0]))

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: sluice run --deployment NAME --in REQUESTS.jsonl --out RESULTS.jsonl [OPTIONS]\n\n"
            "Sends each request to the deployment's endpoint (from the config: endpoint,\n"
            "api_key_env, style, api_version), paced by the fleet's shared budget, retrying\n"
            "only when the response class, the fleet's retry budget and the deadline allow.\n"
            "NAME may be a group: each request then goes to the member its grant names,\n"
            "with that member's endpoint, style, api_version and key.\n"
            "Any number of runs on any number of hosts share the quota through Redis.\n"
            "Results are appended one JSON line per id; a rerun skips the ids already done.\n"
            "A line may name its \"id\", \"lane\", \"tenant\" and \"tag\"; they are taken out before sending.\n"
            "Ctrl-C stops taking work and lets calls in flight finish; twice cancels them.\n\n"
            "options:\n");
    cli_print_flags(f, run_flags, RUN_NFLAGS);
    fprintf(f,
            "  --header 'NAME: VALUE'     extra request header (repeatable), e.g. 'x-client-id: batch-7'\n\n"
            "exit: 0 all done, 1 some requests failed (see the errors file) or a runtime error,\n"
            "2 usage, 130/143 interrupted (SIGINT/SIGTERM). The last stdout line is a JSON summary.\n"
            "See docs/cli.md.\n");
}

/* ---- state ------------------------------------------------------------------ */

typedef struct run run;
typedef struct item item;

typedef enum ev_kind { EV_ACQUIRED, EV_RETRY } ev_kind;

/* What a governor callback reported; lives in its item (an item waits for
 * at most one callback at a time), so a callback never allocates. */
typedef struct run_event {
    struct run_event *next;
    item *it;
    ev_kind kind;
    int status;               /* SL_OK / SL_E*; EV_RETRY: 1, 0 or SL_E* */
    sl_grant *grant;
    char reason[24];
    long long retry_after_ms;
    char msg[256];
} run_event;

typedef enum item_state {
    IT_ACQUIRE,  /* waiting for the governor's answer (a slot) */
    IT_SEND,     /* HTTP attempt in flight */
    IT_ASK,      /* asking the fleet's retry budget */
    IT_SLEEP     /* backoff, or waiting a shed's retry-after */
} item_state;

struct item {
    run *r;
    item *prev, *next;
    json_t *id;
    char *key, *body;
    size_t body_len;
    long long tokens;
    long long input_tokens, output_tokens; /* the estimate split (run_estimate_split) */
    int has_max_tokens;
    char lane[RUN_CLASS_NAME_MAX + 1];   /* "" = the deployment's default lane */
    char tenant[RUN_CLASS_NAME_MAX + 1]; /* "" = none */
    char tag[RUN_CLASS_NAME_MAX + 1];    /* "" = none */
    int has_model;            /* the body names its model */
    char member[RUN_CLASS_NAME_MAX + 1]; /* the deployment of the current (or last) attempt */
    char *sent;               /* the body sent to it, when not body itself (a group's "model") */
    item_state state;
    item_state after_sleep;   /* IT_ACQUIRE or IT_ASK */
    sl_call_id call;
    int pending;              /* a governor callback will come */
    run_event ev;
    sl_grant *grant;
    CURL *easy;
    sl_capture *cap;
    uv_timer_t timer;
    int attempts;
    long long waited_ms, delay_ms;
    int64_t deadline_ms;      /* 0 none */
    sl_verdict last;          /* of the last attempt */
    int last_curl;
    int have_last;
};

struct run {
    run_cli cli;
    char **headers;
    int nheaders;
    config *cfg;
    run_target target;        /* the deployment, or the group's members */
    char socket[512];
    long long shard_i, shard_n;

    sl_gov *gov;
    uv_loop_t loop;
    uv_async_t wake;
    uv_signal_t sigint, sigterm;
    uv_timer_t tick;
    run_http *http;
    pthread_mutex_t mu;
    run_event *events;        /* pushed by callbacks, newest first */

    FILE *in;
    char *line;
    size_t linecap;
    long long lineno;
    int in_eof;
    run_set seen;             /* ids with a record, and those taken by this run */
    run_file out, err;
    sl_call_opts policy;
    uint64_t rng;

    item *live;
    int nlive;
    int hdr_mode;             /* SETTLE_HDR_* */
    long long total, done_before, ok, failed, attempts, status_429, retries, sheds;
    long long *member_ok;     /* successes per member, in target order */
    int stopping;             /* 1: no new work; 2: cancel calls in flight too */
    int stop_sig;
    int fatal;
    char fatal_msg[512];
    int shut;
    int64_t t0, unavail_since;
    int tty;
    int64_t tick_t[RUN_RATE_TICKS];
    long long tick_done[RUN_RATE_TICKS];
    int tick_n;
};

static void fill(run *r);
static void item_acquire(item *it);
static void item_ask(item *it);
static void maybe_finish(run *r);
static void on_item_timer(uv_timer_t *t);

/* ---- small helpers ------------------------------------------------------------------ */

static void stop_work(run *r, int level);
static void set_fatal(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_fatal(run *r, const char *fmt, ...) {
    if (r->fatal) return;
    r->fatal = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fatal_msg, sizeof(r->fatal_msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%ssluice run: %s\n", r->tty ? "\r\033[K" : "", r->fatal_msg);
    stop_work(r, 2);
}

static long long done_now(const run *r) { return r->done_before + r->ok + r->failed; }

static void fmt_duration(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* ---- records ------------------------------------------------------------------ */

static void write_record(run *r, run_file *f, json_t *rec) {
    char err[512];
    if (!rec) {
        set_fatal(r, "out of memory");
        return;
    }
    if (run_file_append(f, rec, err, sizeof(err)) != 0) set_fatal(r, "%s", err);
    json_decref(rec);
}

/* The provider's error message in a JSON error body, else NULL. */
static const char *body_error_message(json_t *body) {
    json_t *e = json_object_get(body, "error");
    if (json_is_string(e)) return json_string_value(e);
    return json_string_value(json_object_get(e, "message"));
}

/* Records a failure. classification: the class of the last response, or
 * what ended the request before any (bad_input, deadline, too_large...). */
static void record_failure(run *r, json_t *id, const char *classification, const char *reason,
                           int http_status, int attempts, long long waited_ms, const char *code,
                           const char *message) {
    json_t *rec = json_pack("{sOsssssisisIss}", "id", id, "classification", classification, "reason", reason,
                            "status", http_status, "attempts", attempts, "waited_ms", (json_int_t)waited_ms,
                            "message", message ? message : "");
    if (rec && http_status == 0) json_object_set_new(rec, "status", json_null());
    if (rec && code && *code) json_object_set_new(rec, "code", json_string(code));
    write_record(r, &r->err, rec);
    r->failed++;
}

/* ---- the event queue (governor thread -> loop thread) ------------------------------------------ */

static void push_event(run *r, run_event *ev) {
    pthread_mutex_lock(&r->mu);
    ev->next = r->events;
    r->events = ev;
    pthread_mutex_unlock(&r->mu);
    uv_async_send(&r->wake);
}

/* On the governor's thread: copy and hand over, nothing else. */
static void on_acquired(void *arg, const sl_result *res) {
    item *it = arg;
    run_event *ev = &it->ev;
    ev->it = it;
    ev->kind = EV_ACQUIRED;
    ev->status = res->status;
    ev->grant = res->grant;
    snprintf(ev->reason, sizeof(ev->reason), "%s", res->shed_reason ? res->shed_reason : "");
    ev->retry_after_ms = res->retry_after_ms;
    snprintf(ev->msg, sizeof(ev->msg), "%s", res->message ? res->message : "");
    push_event(it->r, ev);
}

static void on_retry_answer(void *arg, int status, long long retry_after_ms) {
    item *it = arg;
    run_event *ev = &it->ev;
    ev->it = it;
    ev->kind = EV_RETRY;
    ev->status = status;
    ev->grant = NULL;
    ev->reason[0] = '\0';
    ev->retry_after_ms = retry_after_ms;
    ev->msg[0] = '\0';
    push_event(it->r, ev);
}

/* ---- items ------------------------------------------------------------------ */

static void on_item_closed(uv_handle_t *h) {
    item *it = h->data;
    json_decref(it->id);
    free(it->key);
    free(it->body);
    free(it->sent);
    sl_capture_free(it->cap);
    free(it);
}

/* The item leaves: recorded, or dropped to be done by a rerun. */
static void item_end(item *it) {
    run *r = it->r;
    if (it->grant) sl_settle(it->grant, -1, SL_OUTCOME_CANCELLED, NULL, 0);
    it->grant = NULL;
    if (it->easy) curl_easy_cleanup(it->easy);
    it->easy = NULL;
    if (it->prev) it->prev->next = it->next;
    else r->live = it->next;
    if (it->next) it->next->prev = it->prev;
    r->nlive--;
    uv_timer_stop(&it->timer);
    uv_close((uv_handle_t *)&it->timer, on_item_closed);
    fill(r);
    maybe_finish(r);
}

static void item_fail(item *it, const char *classification, const char *reason, const char *message) {
    const sl_verdict *v = it->have_last ? &it->last : NULL;
    record_failure(it->r, it->id, classification, reason, v ? v->http_status : 0, it->attempts, it->waited_ms,
                   v ? v->code : NULL, message);
    item_end(it);
}

static void item_sleep(item *it, long long ms, item_state then) {
    it->state = IT_SLEEP;
    it->after_sleep = then;
    uv_timer_start(&it->timer, on_item_timer, (uint64_t)(ms > 0 ? ms : 0), 0);
}

static void on_item_timer(uv_timer_t *t) {
    item *it = t->data;
    if (it->after_sleep == IT_ASK) item_ask(it);
    else item_acquire(it);
}

/* The governor could not be reached (sluiced restarting, say): pause the
 * item and ask again, unless that has lasted too long for the run. */
static void item_unavailable(item *it, item_state then, const char *msg) {
    run *r = it->r;
    int64_t now = sl_now_ms();
    if (r->unavail_since == 0) r->unavail_since = now;
    if (now - r->unavail_since > RUN_UNAVAIL_GIVE_UP_MS) {
        set_fatal(r, "the governor is unavailable for %d s: %s", RUN_UNAVAIL_GIVE_UP_MS / 1000, msg);
        item_end(it);
        return;
    }
    item_sleep(it, RUN_UNAVAIL_PAUSE_MS, then);
}

static void item_acquire(item *it) {
    run *r = it->r;
    if (r->stopping) {
        item_end(it);
        return;
    }
    sl_request req;
    sl_request_init(&req);
    req.deployment = r->cli.deployment;
    /* Split: each dimension of the member takes its part (docs/providers.md). */
    req.input_tokens = it->input_tokens;
    req.output_tokens = it->output_tokens;
    req.lane = it->lane[0] ? it->lane : NULL;
    req.tenant = it->tenant[0] ? it->tenant : NULL;
    req.tag = it->tag[0] ? it->tag : NULL;
    if (it->deadline_ms > 0) {
        /* Leave an attempt's worth of time after the slot. */
        req.deadline_ms = it->deadline_ms - RUN_MIN_ATTEMPT_MS;
        if (req.deadline_ms <= sl_now_ms()) {
            item_fail(it, it->have_last ? sl_class_name(it->last.cls) : "deadline", "deadline",
                      "no time left before the deadline for an attempt");
            return;
        }
    }
    it->state = IT_ACQUIRE;
    it->pending = 1;
    int rc = sl_acquire_async(r->gov, &req, on_acquired, it, &it->call);
    if (rc != 0) {
        /* The callback will not run: queue the same answer ourselves, so
         * it is handled from the loop like any other (no recursion). */
        run_event *ev = &it->ev;
        ev->it = it;
        ev->kind = EV_ACQUIRED;
        ev->status = rc;
        ev->grant = NULL;
        ev->reason[0] = '\0';
        ev->retry_after_ms = -1;
        snprintf(ev->msg, sizeof(ev->msg), "%s", sl_errmsg(r->gov));
        push_event(r, ev);
    }
}

static void item_ask(item *it) {
    run *r = it->r;
    if (r->stopping) {
        item_end(it);
        return;
    }
    it->state = IT_ASK;
    it->pending = 1;
    /* The budget of the deployment that failed (a group has none). */
    int rc = sl_may_retry_async(r->gov, it->member, on_retry_answer, it);
    if (rc != 0) {
        run_event *ev = &it->ev;
        ev->it = it;
        ev->kind = EV_RETRY;
        ev->status = rc;
        ev->grant = NULL;
        ev->retry_after_ms = -1;
        snprintf(ev->msg, sizeof(ev->msg), "%s", sl_errmsg(r->gov));
        push_event(r, ev);
    }
}

/* Sends the item to m, the deployment its grant is on. */
static void item_send(item *it, const run_member *m) {
    run *r = it->r;
    CURL *e = curl_easy_init();
    size_t blen = 0;
    free(it->sent);
    const char *body = e ? run_target_body(m, it->body, it->body_len, it->has_model,
                                                  it->has_max_tokens ? 0 : it->output_tokens, &blen, &it->sent) : NULL;
    if (!body || (!it->cap && sl_capture_new(0, &it->cap) != 0)) {
        if (e) curl_easy_cleanup(e);
        set_fatal(r, "out of memory");
        item_end(it);
        return;
    }
    it->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, m->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, m->hdrs);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, it);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    long long limit = (long long)(r->cli.timeout_s * 1000);
    if (it->deadline_ms > 0) {
        long long left = it->deadline_ms - sl_now_ms() - RUN_DEADLINE_MARGIN_MS;
        if (left < limit) limit = left > 1 ? left : 1;
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)limit);
    sl_capture_attach(it->cap, e);
    it->state = IT_SEND;
    if (run_http_add(r->http, e) != 0) {
        set_fatal(r, "libcurl refused a transfer");
        item_end(it);
    }
}

static int is_retry_after(const char *name) {
    return strcasecmp(name, "retry-after") == 0 || strcasecmp(name, "retry-after-ms") == 0 ||
           strcasecmp(name, "x-ms-retry-after-ms") == 0;
}

/* Settles the item's grant with the response: its usage, its outcome, and
 * the headers --settle-headers lets through (all by default: the agent
 * decides what they mean; retry-after keeps only the waits the provider
 * asks for, none leaves the schedule alone). */
static void settle(run *r, item *it, const sl_verdict *v) {
    const sl_header *all = NULL;
    size_t n = sl_capture_headers(it->cap, &all), k = 0;
    sl_header keep[64];
    /* The usage split where the body said: input (cache reads included),
     * output, cache reads; each dimension is corrected as its provider
     * counts. */
    sl_usage u;
    sl_usage_init(&u);
    u.tokens = v->tokens;
    if (v->tokens >= 0 && v->input_tokens >= 0 && v->output_tokens >= 0 &&
        v->tokens == v->input_tokens + v->output_tokens) {
        u.input_tokens = v->input_tokens;
        u.output_tokens = v->output_tokens;
        u.cache_read_tokens = v->cache_read_tokens;
    }
    if (r->hdr_mode == SETTLE_HDR_ALL) {
        sl_settle_usage(it->grant, &u, v->outcome, all, n);
    } else {
        for (size_t i = 0; r->hdr_mode == SETTLE_HDR_RETRY_AFTER && i < n && k < 64; i++)
            if (is_retry_after(all[i].name)) keep[k++] = all[i];
        sl_settle_usage(it->grant, &u, v->outcome, k ? keep : NULL, k);
    }
    it->grant = NULL;
}

/* A transfer ended: settle, then record, retry or give up. */
static void on_http_done(void *ud, CURL *easy, CURLcode cc) {
    run *r = ud;
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    item *it = (item *)(void *)priv;
    curl_easy_cleanup(easy);
    it->easy = NULL;
    free(it->sent);
    it->sent = NULL;
    it->attempts++;
    r->attempts++;
    sl_verdict v;
    sl_verdict_init(&v);
    sl_capture_verdict(it->cap, (int)cc, 0, &v);
    settle(r, it, &v);
    it->last = v;
    it->last_curl = (int)cc;
    it->have_last = 1;
    if (v.http_status == 429) r->status_429++;
    size_t blen = 0;
    const char *btext = sl_capture_body(it->cap, &blen);
    json_t *body = blen ? json_loadb(btext, blen, 0, NULL) : NULL;

    if (sl_capture_overflow(it->cap)) {
        json_decref(body);
        item_fail(it, "too_big", "too_big", "the response is larger than 16 MiB");
        return;
    }
    if (v.cls == SL_CLASS_OK) {
        json_t *rec = json_pack("{sOsisOsisI}", "id", it->id, "status", v.http_status, "response",
                                body ? body : json_null(), "attempts", it->attempts, "waited_ms",
                                (json_int_t)it->waited_ms);
        if (rec && !body) json_object_set_new(rec, "response_text", blen ? json_stringn(btext, blen) : json_string(""));
        /* A group's record says which member answered. */
        if (rec && r->target.group) json_object_set_new(rec, "deployment", json_string(it->member));
        json_decref(body);
        write_record(r, &r->out, rec);
        r->ok++;
        for (size_t i = 0; i < r->target.n; i++)
            if (!strcmp(r->target.members[i].dep->name, it->member)) r->member_ok[i]++;
        item_end(it);
        return;
    }
    char msg[512];
    const char *pm = body_error_message(body);
    if (pm) snprintf(msg, sizeof(msg), "%s", pm);
    else if (cc != CURLE_OK) snprintf(msg, sizeof(msg), "%s", curl_easy_strerror(cc));
    else snprintf(msg, sizeof(msg), "HTTP %d", v.http_status);
    json_decref(body);

    sl_call_opts o = r->policy;
    o.deadline_ms = it->deadline_ms;
    long long delay = sl_backoff_ms(&o, it->attempts - 1, &v, sl_now_ms(), &r->rng);
    if (delay < 0) {
        const char *reason = delay == SL_EFATAL      ? "not_retryable"
                             : delay == SL_EATTEMPTS ? "attempts"
                                                     : "deadline";
        item_fail(it, sl_class_name(v.cls), reason, msg);
        return;
    }
    if (r->stopping) {
        item_end(it); /* retryable: a rerun does it */
        return;
    }
    it->delay_ms = delay;
    item_ask(it);
}

/* ---- governor answers, on the loop thread ---------------------------------------------------------- */

static void handle_acquired(item *it, run_event *ev) {
    run *r = it->r;
    if (ev->status == SL_OK) {
        r->unavail_since = 0;
        it->grant = ev->grant;
        it->waited_ms += sl_grant_waited_ms(ev->grant);
        if (r->stopping) {
            item_end(it); /* gives the slot back */
            return;
        }
        /* The member the grant is on: it must be one of ours, with our
         * endpoint for it (the daemon's config and ours disagree else). */
        const char *dep = sl_grant_deployment(ev->grant);
        const run_member *m = run_target_member(&r->target, dep);
        if (!m) {
            set_fatal(r, "the governor granted a slot on '%s', which is not a member of '%s' in %s", dep,
                      r->cli.deployment, r->cli.config);
            item_end(it);
            return;
        }
        snprintf(it->member, sizeof(it->member), "%s", dep);
        item_send(it, m);
        return;
    }
    if (r->stopping) {
        item_end(it);
        return;
    }
    switch (ev->status) {
    case SL_ESHED: {
        r->sheds++;
        r->unavail_since = 0;
        long long ra = ev->retry_after_ms;
        if (strcmp(ev->reason, "quota") == 0) {
            /* Out of quota until the provider's reset (billing, a monthly
             * budget): a batch does not wait for that. A rerun does it. */
            item_fail(it, "quota_exhausted", "quota", ev->msg);
            return;
        }
        /* Every allowed member's breaker is open: their providers fail.
         * That passes; ask again a little later. */
        if (ra < 0 && strcmp(ev->reason, "breaker") == 0) ra = RUN_BREAKER_WAIT_MS;
        if (ra < 0 || strcmp(ev->reason, "too_large") == 0) {
            /* Never: too large, or no member may serve it (tag). */
            item_fail(it, strcmp(ev->reason, "tag") == 0 ? "tag" : "too_large", "shed", ev->msg);
            return;
        }
        if (it->deadline_ms > 0 && sl_now_ms() + ra + RUN_MIN_ATTEMPT_MS > it->deadline_ms) {
            item_fail(it, it->have_last ? sl_class_name(it->last.cls) : "deadline", "deadline", ev->msg);
            return;
        }
        it->waited_ms += ra;
        item_sleep(it, ra, IT_ACQUIRE);
        return;
    }
    case SL_ETIMEDOUT:
        item_fail(it, it->have_last ? sl_class_name(it->last.cls) : "deadline", "deadline", ev->msg);
        return;
    case SL_ECLOSING: /* sluiced is shutting down (ours closes only when idle) */
    case SL_EUNAVAIL:
    case SL_EIO:
    case SL_EPROTO:
    case SL_EREDIS:
        item_unavailable(it, IT_ACQUIRE, ev->msg);
        return;
    default:
        /* Unknown deployment, invalid request: no request can succeed. */
        set_fatal(r, "%s: %s", sl_strerror(ev->status), ev->msg);
        item_end(it);
        return;
    }
}

static void handle_retry(item *it, run_event *ev) {
    run *r = it->r;
    if (r->stopping) {
        item_end(it);
        return;
    }
    if (ev->status == 1) {
        r->unavail_since = 0;
        r->retries++;
        item_sleep(it, it->delay_ms, IT_ACQUIRE);
        return;
    }
    if (ev->status == 0) {
        char msg[300];
        snprintf(msg, sizeof(msg), "%s (HTTP %d); the fleet's retry budget is spent",
                 sl_class_name(it->last.cls), it->last.http_status);
        item_fail(it, sl_class_name(it->last.cls), "retry_budget", msg);
        return;
    }
    if (ev->status == SL_EUNKNOWN || ev->status == SL_EINVAL) {
        set_fatal(r, "%s: %s", sl_strerror(ev->status), ev->msg);
        item_end(it);
        return;
    }
    item_unavailable(it, IT_ASK, ev->msg[0] ? ev->msg : sl_strerror(ev->status));
}

static void on_wake(uv_async_t *a) {
    run *r = a->data;
    pthread_mutex_lock(&r->mu);
    run_event *list = r->events;
    r->events = NULL;
    pthread_mutex_unlock(&r->mu);
    /* Oldest first. */
    run_event *rev = NULL;
    while (list) {
        run_event *n = list->next;
        list->next = rev;
        rev = list;
        list = n;
    }
    while (rev) {
        run_event *ev = rev;
        rev = ev->next;
        item *it = ev->it;
        it->pending = 0;
        if (ev->kind == EV_ACQUIRED) handle_acquired(it, ev);
        else handle_retry(it, ev);
    }
    maybe_finish(r);
}

/* ---- input ------------------------------------------------------------------ */

static int in_shard(const run *r, long long lineno) { return (lineno - 1) % r->shard_n == r->shard_i; }

/* A lane the target does not have, or a tag none of its members carries:
 * -1 with the message (the run's flags, or one line). */
static int check_classes(const run *r, const char *lane, const char *tag, char *err, size_t errlen) {
    const char *kind = r->target.group ? "group" : "deployment";
    if (lane[0] && !run_target_has_lane(&r->target, lane)) {
        char lanes[256];
        run_target_lane_names(&r->target, lanes, sizeof(lanes));
        snprintf(err, errlen, "unknown lane '%s' for %s '%s' (its lanes: %s)", lane, kind, r->cli.deployment, lanes);
        return -1;
    }
    if (tag[0] && !run_target_has_tag(&r->target, tag)) {
        if (r->target.group)
            snprintf(err, errlen, "no member of group '%s' carries tag '%s'", r->cli.deployment, tag);
        else
            snprintf(err, errlen, "deployment '%s' does not carry tag '%s'", r->cli.deployment, tag);
        return -1;
    }
    return 0;
}

/* Takes input lines until concurrency requests are in progress. */
static void fill(run *r) {
    char err[512];
    while (!r->stopping && !r->fatal && !r->in_eof && r->nlive < r->cli.concurrency) {
        ssize_t n = getline(&r->line, &r->linecap, r->in);
        if (n < 0) {
            if (ferror(r->in)) set_fatal(r, "%s: read error: %s", r->cli.in, strerror(errno));
            r->in_eof = 1;
            break;
        }
        r->lineno++;
        size_t len = (size_t)n;
        while (len && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) len--;
        if (!in_shard(r, r->lineno) || run_line_blank(r->line, len)) continue;
        run_request req;
        /* An openai-style deployment's model is its name; a group's member
         * gets its own when the request is sent (run_target_body). */
        const struct config_deployment *only = r->target.group ? NULL : r->target.members[0].dep;
        int rc = run_request_parse(r->line, len, r->lineno,
                                   only && only->style == CONFIG_STYLE_OPENAI ? r->cli.deployment : NULL, &req, err,
                                   sizeof(err));
        if (!req.key) {
            set_fatal(r, "out of memory");
            run_request_free(&req);
            break;
        }
        if (run_set_has(&r->seen, req.key)) { /* done before, or a duplicate id */
            run_request_free(&req);
            continue;
        }
        if (run_set_add(&r->seen, req.key) < 0) {
            set_fatal(r, "out of memory");
            run_request_free(&req);
            break;
        }
        const char *lane = req.lane[0] ? req.lane : r->cli.lane ? r->cli.lane : "";
        const char *tenant = req.tenant[0] ? req.tenant : r->cli.tenant ? r->cli.tenant : "";
        const char *tag = req.tag[0] ? req.tag : r->cli.tag ? r->cli.tag : "";
        /* Checked here, so that one line's typo fails that line only. */
        if (rc == 0) rc = check_classes(r, lane, tag, err, sizeof(err));
        if (rc != 0) {
            char msg[600];
            snprintf(msg, sizeof(msg), "line %lld: %s", r->lineno, err);
            record_failure(r, req.id, "bad_input", "bad_input", 0, 0, 0, NULL, msg);
            run_request_free(&req);
            continue;
        }
        item *it = calloc(1, sizeof(*it));
        if (!it) {
            run_request_free(&req);
            set_fatal(r, "out of memory");
            break;
        }
        it->r = r;
        it->id = req.id;
        it->key = req.key;
        it->body = req.body;
        it->body_len = req.body_len;
        it->tokens = req.tokens;
        it->input_tokens = req.input_tokens;
        it->output_tokens = req.output_tokens;
        it->has_max_tokens = req.has_max_tokens;
        snprintf(it->lane, sizeof(it->lane), "%s", lane);
        snprintf(it->tenant, sizeof(it->tenant), "%s", tenant);
        snprintf(it->tag, sizeof(it->tag), "%s", tag);
        it->has_model = req.has_model;
        if (r->cli.deadline_s > 0) it->deadline_ms = sl_now_ms() + (int64_t)(r->cli.deadline_s * 1000);
        uv_timer_init(&r->loop, &it->timer);
        it->timer.data = it;
        it->next = r->live;
        if (r->live) r->live->prev = it;
        r->live = it;
        r->nlive++;
        item_acquire(it);
    }
}

/* First pass over the input: how many distinct ids this run owns (its
 * shard) and how many of them already have a record. */
static int count_input(run *r, char *err, size_t errlen) {
    FILE *f = fopen(r->cli.in, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", r->cli.in, strerror(errno));
        return -1;
    }
    run_set ids = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (!in_shard(r, lineno) || run_line_blank(line, len)) continue;
        json_t *j = json_loadb(line, len, 0, NULL);
        json_t *id = json_object_get(j, "id");
        json_t *num = (id && (json_is_string(id) || json_is_integer(id))) ? NULL : json_integer(lineno);
        char *key = run_id_key(num ? num : id);
        json_decref(num);
        json_decref(j);
        int added = key ? run_set_add(&ids, key) : -1;
        if (added < 0) {
            free(key);
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        if (added == 1) {
            r->total++;
            if (run_set_has(&r->seen, key)) r->done_before++;
        }
        free(key);
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error: %s", r->cli.in, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    run_set_free(&ids);
    return rc;
}

/* ---- progress ------------------------------------------------------------------ */

static double recent_rate(const run *r) {
    if (r->tick_n < 2) return NAN;
    int newest = (r->tick_n - 1) % RUN_RATE_TICKS;
    int oldest = r->tick_n > RUN_RATE_TICKS ? r->tick_n % RUN_RATE_TICKS : 0;
    double dt = (double)(r->tick_t[newest] - r->tick_t[oldest]) / 1000.0;
    return dt > 0 ? (double)(r->tick_done[newest] - r->tick_done[oldest]) / dt : NAN;
}

static void print_progress(run *r) {
    int waiting = 0, flight = 0;
    for (item *it = r->live; it; it = it->next) {
        if (it->state == IT_SEND) flight++;
        else if (it->state == IT_ACQUIRE || (it->state == IT_SLEEP && it->after_sleep == IT_ACQUIRE)) waiting++;
    }
    double rate = recent_rate(r), quota = (double)r->target.rpm / 60.0;
    long long left = r->total - done_now(r);
    char eta[32], rs[32];
    fmt_duration(eta, sizeof(eta), rate > 0 ? (double)left / rate : NAN);
    if (isfinite(rate)) snprintf(rs, sizeof(rs), "%.1f/s", rate);
    else snprintf(rs, sizeof(rs), "-");
    fprintf(stderr,
            "\r\033[K%lld/%lld done (%.0f%%)  %s of %.1f/s quota  ETA %s  429s %lld  retries %lld  "
            "waiting %d  in flight %d  failed %lld%s",
            done_now(r), r->total, r->total ? 100.0 * (double)done_now(r) / (double)r->total : 100.0, rs, quota,
            left > 0 ? eta : "0s", r->status_429, r->retries, waiting, flight, r->failed,
            r->stopping ? "  (stopping)" : "");
    fflush(stderr);
}

static void on_tick(uv_timer_t *t) {
    run *r = t->data;
    int k = r->tick_n % RUN_RATE_TICKS;
    r->tick_t[k] = sl_now_ms();
    r->tick_done[k] = done_now(r);
    r->tick_n++;
    if (r->tty && !r->cli.no_progress) print_progress(r);
}

/* ---- stopping ------------------------------------------------------------------ */

/* level 1: take no new work; cancel acquires and backoffs (their slots go
 * back), let calls in flight finish. level 2: abort those too. */
static void stop_work(run *r, int level) {
    if (r->stopping >= level) return;
    r->stopping = level;
    item *it = r->live;
    while (it) {
        item *next = it->next;
        if (it->state == IT_SLEEP) {
            item_end(it);
        } else if (it->state == IT_ACQUIRE && it->pending) {
            /* 0: the callback will not run (the slot went back). Else the
             * callback is on its way and gives the grant back. */
            if (sl_cancel(r->gov, it->call) == 0) {
                it->pending = 0;
                item_end(it);
            }
        } else if (it->state == IT_SEND && level >= 2 && it->easy) {
            run_http_abort(r->http, it->easy);
            /* Sent: the provider may have counted it, so not "cancelled". */
            sl_settle(it->grant, -1, SL_OUTCOME_FAILED, NULL, 0);
            it->grant = NULL;
            item_end(it);
        }
        it = next;
    }
    maybe_finish(r);
}

static void on_signal(uv_signal_t *s, int sig) {
    run *r = s->data;
    if (!r->stop_sig) r->stop_sig = sig;
    int level = r->stopping + 1;
    if (level > 2) return;
    fprintf(stderr, "%ssluice run: %s: %s\n", r->tty ? "\r\033[K" : "", sig == SIGINT ? "SIGINT" : "SIGTERM",
            level == 1 ? "stopping; calls in flight finish (again to cancel them)"
                       : "cancelling the calls in flight");
    stop_work(r, level);
}

static void on_closed_noop(uv_handle_t *h) { (void)h; }

/* Ends the run once nothing is in progress any more. */
static void maybe_finish(run *r) {
    if (r->shut || r->nlive > 0) return;
    if (!r->in_eof && !r->stopping && !r->fatal) return;
    r->shut = 1;
    if (r->tty && !r->cli.no_progress) {
        on_tick(&r->tick);
        fprintf(stderr, "\n");
    }
    uv_close((uv_handle_t *)&r->tick, on_closed_noop);
    uv_close((uv_handle_t *)&r->sigint, on_closed_noop);
    uv_close((uv_handle_t *)&r->sigterm, on_closed_noop);
    run_http_close(r->http);
    r->http = NULL;
    /* Delivers the settles made; no callback is pending (nothing is live). */
    sl_close(r->gov);
    r->gov = NULL;
    uv_close((uv_handle_t *)&r->wake, on_closed_noop);
}

/* ---- setup ------------------------------------------------------------------ */

static const char *default_config(void) {
    const char *env = getenv("SLUICE_CONFIG");
    if (env && *env) return env;
    return access("/etc/sluice/sluiced.yaml", R_OK) == 0 ? "/etc/sluice/sluiced.yaml" : NULL;
}

/* Parses the flags and loads everything. Returns 0, or the exit status. */
static int setup(run *r, int argc, char **argv) {
    run_args a;
    if (run_args_split("run", run_flags, RUN_NFLAGS, "--header", argc, argv, &a) != 0) return 2;
    r->cli.concurrency = 32;
    r->cli.max_attempts = 5;
    r->cli.timeout_s = 600;
    int rc = cli_parse("run", run_flags, RUN_NFLAGS, &r->cli, a.nflags, a.flags);
    r->headers = a.multi;
    r->nheaders = a.nmulti;
    a.multi = NULL;
    if (rc == 0 && a.npos > 0) {
        fprintf(stderr, "sluice run: unexpected argument '%s' (see sluice run --help)\n", a.pos[0]);
        rc = -1;
    }
    run_args_free(&a);
    if (rc != 0) return 2;
    if (r->cli.help) {
        run_usage(stdout);
        return -1;
    }
    if (!r->cli.config) r->cli.config = default_config();
    const char *missing = !r->cli.deployment ? "--deployment" : !r->cli.in ? "--in" : !r->cli.out ? "--out"
                          : !r->cli.config ? "--config (or SLUICE_CONFIG)" : NULL;
    if (missing) {
        fprintf(stderr, "sluice run: %s is required (see sluice run --help)\n", missing);
        return 2;
    }
    if (r->cli.embedded && r->cli.socket) {
        fprintf(stderr, "sluice run: give --socket or --embedded, not both\n");
        return 2;
    }
    const char *hm = r->cli.settle_headers ? r->cli.settle_headers : "all";
    if (strcmp(hm, "retry-after") == 0) r->hdr_mode = SETTLE_HDR_RETRY_AFTER;
    else if (strcmp(hm, "all") == 0) r->hdr_mode = SETTLE_HDR_ALL;
    else if (strcmp(hm, "none") == 0) r->hdr_mode = SETTLE_HDR_NONE;
    else {
        fprintf(stderr, "sluice run: --settle-headers: expected all, retry-after or none, got '%s'\n", hm);
        return 2;
    }
    r->shard_i = 0;
    r->shard_n = 1;
    if (r->cli.shard) {
        char tail;
        if (sscanf(r->cli.shard, "%lld/%lld%c", &r->shard_i, &r->shard_n, &tail) != 2 || r->shard_n < 1 ||
            r->shard_i < 0 || r->shard_i >= r->shard_n) {
            fprintf(stderr, "sluice run: --shard: expected I/N with 0 <= I < N, got '%s'\n", r->cli.shard);
            return 2;
        }
    }
    static const char *const class_flags[] = {"--lane", "--tenant", "--tag"};
    const char *class_values[] = {r->cli.lane, r->cli.tenant, r->cli.tag};
    for (int i = 0; i < 3; i++) {
        if (class_values[i] && !run_class_name_ok(class_values[i])) {
            fprintf(stderr, "sluice run: %s: expected 1 to %d of A-Z a-z 0-9 . _ : -, got '%s'\n", class_flags[i],
                    RUN_CLASS_NAME_MAX, class_values[i]);
            return 2;
        }
    }
    char err[1024];
    if (config_load(r->cli.config, &r->cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice run: %s\n", err);
        return 1;
    }
    if (run_target_open(&r->target, r->cfg, r->cli.deployment, r->headers, r->nheaders, err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice run: %s\n", err);
        return 1;
    }
    r->member_ok = calloc(r->target.n, sizeof(*r->member_ok));
    if (!r->member_ok) {
        fprintf(stderr, "sluice run: out of memory\n");
        return 1;
    }
    /* A flag's mistake stops the run before anything is sent. */
    const char *flag = check_classes(r, r->cli.lane ? r->cli.lane : "", "", err, sizeof(err)) != 0  ? "--lane"
                       : check_classes(r, "", r->cli.tag ? r->cli.tag : "", err, sizeof(err)) != 0 ? "--tag"
                                                                                                     : NULL;
    if (flag) {
        fprintf(stderr, "sluice run: %s: %s in %s\n", flag, err, r->cli.config);
        return 1;
    }

    /* The files: results first (their ids are done), then errors. */
    char errors_path[4096];
    if (!r->cli.errors) {
        snprintf(errors_path, sizeof(errors_path), "%s.errors.jsonl", r->cli.out);
        r->cli.errors = errors_path;
    }
    size_t recs, bad, erecs, ebad;
    if (run_file_open(&r->out, r->cli.out, r->cli.fsync, &r->seen, &recs, &bad, err, sizeof(err)) != 0 ||
        run_file_open(&r->err, r->cli.errors, r->cli.fsync, r->cli.retry_errors ? NULL : &r->seen, &erecs, &ebad,
                      err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice run: %s\n", err);
        return 1;
    }
    if (bad + ebad > 0)
        fprintf(stderr, "sluice run: warning: %zu line(s) of %s / %s are not records with an id (ignored)\n",
                bad + ebad, r->cli.out, r->cli.errors);
    r->cli.errors = r->err.path;
    if (count_input(r, err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice run: %s\n", err);
        return 1;
    }
    r->in = fopen(r->cli.in, "r");
    if (!r->in) {
        fprintf(stderr, "sluice run: %s: %s\n", r->cli.in, strerror(errno));
        return 1;
    }

    /* The governor. */
    sl_options o;
    sl_options_init(&o);
    char agent_id[160], host[64] = "";
    if (r->cli.embedded) {
        gethostname(host, sizeof(host) - 1);
        snprintf(agent_id, sizeof(agent_id), "sluice-run:%s:%ld", host[0] ? host : "host", (long)getpid());
        o.config_path = r->cli.config;
        o.agent_id = agent_id;
    } else {
        snprintf(r->socket, sizeof(r->socket), "%s", r->cli.socket ? r->cli.socket : r->cfg->agent.socket);
        o.socket_path = r->socket;
    }
    if (sl_open(&o, &r->gov) != 0) {
        fprintf(stderr, "sluice run: %s%s\n", sl_errmsg(NULL),
                r->cli.embedded ? "" : " (is sluiced running? --embedded runs without it)");
        return 1;
    }
    sl_call_opts_init(&r->policy);
    r->policy.deployment = r->cli.deployment;
    r->policy.max_attempts = (int)r->cli.max_attempts;
    r->policy.min_attempt_ms = RUN_MIN_ATTEMPT_MS;
    r->rng = (uint64_t)sl_now_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
    return 0;
}

static void print_summary(run *r, int code) {
    double secs = (double)(sl_now_ms() - r->t0) / 1000.0;
    long long remaining = r->total - done_now(r);
    if (remaining < 0) remaining = 0;
    json_t *s = json_pack("{sssssIsIsIsIsIsIsIsIsIsIsfss ss}", "deployment", r->cli.deployment, "mode",
                          r->cli.embedded ? "embedded" : "daemon", "total", (json_int_t)r->total, "done_before",
                          (json_int_t)r->done_before, "ok", (json_int_t)r->ok, "failed", (json_int_t)r->failed,
                          "remaining", (json_int_t)remaining, "attempts", (json_int_t)r->attempts, "status_429",
                          (json_int_t)r->status_429, "retries", (json_int_t)r->retries, "sheds",
                          (json_int_t)r->sheds, "elapsed_ms", (json_int_t)(secs * 1000), "rate_per_s",
                          secs > 0 ? (double)r->ok / secs : 0.0, "out", r->cli.out, "errors", r->cli.errors);
    if (s) {
        json_object_set_new(s, "interrupted", r->stop_sig == SIGINT    ? json_string("SIGINT")
                                              : r->stop_sig == SIGTERM ? json_string("SIGTERM")
                                                                       : json_null());
        json_object_set_new(s, "error", r->fatal ? json_string(r->fatal_msg) : json_null());
        json_object_set_new(s, "exit", json_integer(code));
        /* A group: the successes of each member. */
        json_t *members = r->target.group && r->member_ok ? json_object() : NULL;
        for (size_t i = 0; members && i < r->target.n; i++)
            json_object_set_new(members, r->target.members[i].dep->name, json_integer((json_int_t)r->member_ok[i]));
        if (members) json_object_set_new(s, "members", members);
        char *text = json_dumps(s, JSON_COMPACT);
        if (text) printf("%s\n", text);
        free(text);
        json_decref(s);
    }
    fflush(stdout);
    if (r->tty)
        fprintf(stderr,
                "sluice run: %lld ok, %lld failed, %lld left of %lld (%lld done before); %lld attempts, "
                "%lld 429s, %lld retries in %.1f s\n",
                r->ok, r->failed, remaining, r->total, r->done_before, r->attempts, r->status_429, r->retries, secs);
}

static void teardown(run *r) {
    item *it = r->live;
    while (it) { /* only after a failed start: nothing was sent */
        item *next = it->next;
        free(it);
        it = next;
    }
    if (r->gov) sl_close(r->gov);
    if (r->in) fclose(r->in);
    free(r->line);
    run_file_close(&r->out);
    run_file_close(&r->err);
    run_set_free(&r->seen);
    run_target_close(&r->target);
    free(r->member_ok);
    free(r->headers);
    config_free(r->cfg);
}

int cmd_run(int argc, char **argv) {
    run *r = calloc(1, sizeof(*r));
    if (!r) {
        fprintf(stderr, "sluice run: out of memory\n");
        return 1;
    }
    r->out.fd = r->err.fd = -1;
    r->t0 = sl_now_ms();
    r->tty = isatty(2);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int code = setup(r, argc, argv);
    if (code != 0) {
        teardown(r);
        free(r);
        curl_global_cleanup();
        return code < 0 ? 0 : code;
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&r->loop);
    pthread_mutex_init(&r->mu, NULL);
    uv_async_init(&r->loop, &r->wake, on_wake);
    r->wake.data = r;
    uv_signal_init(&r->loop, &r->sigint);
    uv_signal_init(&r->loop, &r->sigterm);
    r->sigint.data = r->sigterm.data = r;
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    uv_timer_init(&r->loop, &r->tick);
    r->tick.data = r;
    uv_timer_start(&r->tick, on_tick, 0, RUN_TICK_MS);
    if (run_http_new(&r->loop, on_http_done, r, &r->http) != 0) {
        fprintf(stderr, "sluice run: cannot start libcurl multi\n");
        set_fatal(r, "cannot start libcurl multi");
        r->in_eof = 1;
    } else {
        fill(r);
    }
    maybe_finish(r);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);
    pthread_mutex_destroy(&r->mu);

    code = r->stop_sig ? 128 + r->stop_sig : (r->fatal || r->failed > 0 || done_now(r) < r->total) ? 1 : 0;
    print_summary(r, code);
    teardown(r);
    free(r);
    curl_global_cleanup();
    return code;
}
