/* cmd_run: `sluice run`, a governed batch runner.
 *
 * Sends every request of a JSONL file to one deployment's endpoint, or to
 * the endpoint of the member of a group that each grant names
 * (run_target.c), paced by the fleet's budget through libsluice, and
 * appends one record per request to a results file (or the errors file),
 * so a rerun with the same files does only what is left.
 *
 * Each request (an item) is one governed call of libsluice (sl_call_start):
 * acquire, send, classify, settle, backoff and retry within the fleet's
 * retry budget and the request's deadline all happen there, the same code
 * as sl_curl_perform() and the proxy's. A shed acquire is not a failure:
 * the call waits the retry-after it was given and asks again (retry_shed),
 * within the deadline; a governor that cannot be reached is asked again
 * for RUN_UNAVAIL_GIVE_UP_MS. What stays here: the input, the files and
 * their resumability, sharding, the member's URL and body for each grant
 * (the call's prepare hook), the records, SIGINT and the progress line.
 *
 * Everything happens on one libuv loop on the main thread, to which the
 * libsluice caller is attached (sluice_uv.h): libcurl multi on the loop,
 * any number of transfers without a thread per request, and every
 * decision, settle and write on the loop thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <uv.h>

#include "cli_flags.h"
#include "cmd.h"
#include "config.h"
#include "run_args.h"
#include "run_files.h"
#include "run_input.h"
#include "run_target.h"
#include "sluice.h"
#include "sluice_uv.h"
#include "vocab.h"

/* The governor unreachable for this long ends a call, and so the run
 * (resumable). */
#define RUN_UNAVAIL_GIVE_UP_MS 30000
/* The progress line: refreshed every tick, the rate over RUN_RATE_TICKS. */
#define RUN_TICK_MS 500
#define RUN_RATE_TICKS 20
#define RUN_MIN_ATTEMPT_MS 1000
/* A connection that does not come up within this is a transport failure. */
#define RUN_CONNECT_TIMEOUT_MS 10000L

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
    {"--timeout-s", NULL, "S", CLI_DOUBLE, OPT(timeout_s), 0.001, 1e6, "limit of one HTTP attempt (default 600)"},
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
    fprintf(f, "usage: sluice run --deployment NAME --in REQUESTS.jsonl --out RESULTS.jsonl [OPTIONS]\n\n"
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
    fprintf(f, "  --header 'NAME: VALUE'     extra request header (repeatable), e.g. 'x-client-id: batch-7'\n\n"
               "exit: 0 all done, 1 some requests failed (see the errors file) or a runtime error,\n"
               "2 usage, 130/143/129 interrupted (SIGINT/SIGTERM/SIGHUP). The last stdout line is a JSON summary.\n"
               "See docs/cli.md.\n");
}

/* The shed reasons a record tells apart, in lib/core/vocab.h's words. */
enum {
#define RUN_SHED_ENUM(name, word, source) RUN_SHED_##name,
    SLUICE_SHED_REASON_MAP(RUN_SHED_ENUM)
#undef RUN_SHED_ENUM
};
static const char *const run_shed_words[] = {
#define RUN_SHED_WORD(name, word, source) word,
    SLUICE_SHED_REASON_MAP(RUN_SHED_WORD)
#undef RUN_SHED_WORD
};
#define SHED_WORD(name) run_shed_words[RUN_SHED_##name]

/* ---- state ------------------------------------------------------------------ */

typedef struct run run;
typedef struct item item;

struct item {
    run *r;
    item *prev, *next;
    json_t *id;
    char *key, *body;
    size_t body_len;
    long long input_tokens, output_tokens; /* the estimate split (run_estimate_split) */
    int partial;                           /* it guesses images, audio or files */
    int has_max_tokens;
    char lane[RUN_CLASS_NAME_MAX + 1];   /* "" = the deployment's default lane */
    char tenant[RUN_CLASS_NAME_MAX + 1]; /* "" = none */
    char tag[RUN_CLASS_NAME_MAX + 1];    /* "" = none */
    int has_model;                       /* the body names its model */
    char *sent;                          /* the body sent to the member, when not body itself */
    CURL *easy;                          /* the item's handle, reused by every attempt */
    sl_call *call;                       /* its governed call, NULL once ended */
    int64_t deadline_ms;                 /* 0 none */
};

struct run {
    run_cli cli;
    char **headers;
    int nheaders;
    config *cfg;
    run_target target; /* the deployment, or the group's members */
    char socket[512];
    char errors_path[4096]; /* OUT.errors.jsonl, when --errors is not given */
    long long shard_i, shard_n;

    sl_gov *gov;
    uv_loop_t loop;
    sl_caller *caller; /* the governed calls, on loop */
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t tick;

    FILE *in;
    char *line;
    size_t linecap;
    long long lineno;
    int in_eof;
    run_set seen; /* ids with a record, and those taken by this run */
    run_set errs; /* ids with a record in the errors file */
    run_file out, err;
    sl_call_opts policy; /* every call's, but deadline and classes */

    item *live;
    int nlive;
    long long total, done_before, ok, failed, attempts, status_429, retries, sheds;
    long long failed_before; /* ids of the input only in the errors file (not retried) */
    long long *member_ok;    /* successes per member, in target order */
    int stopping;            /* 1: no new work; 2: cancel calls in flight too */
    int stop_sig;
    int fatal;
    char fatal_msg[512];
    int shut;
    int64_t t0;
    int tty;
    int64_t tick_t[RUN_RATE_TICKS];
    long long tick_done[RUN_RATE_TICKS];
    int tick_n;
};

static void fill(run *r);
static void maybe_finish(run *r);
static int check_classes(const run *r, const char *lane, const char *tag, char *err, size_t errlen);
static int count_input(run *r, char *err, size_t errlen);

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
static void record_failure(run *r, json_t *id, const char *classification, const char *reason, int http_status,
                           int attempts, long long waited_ms, const char *code, const char *message) {
    json_t *rec = json_pack("{sOsssssisisIss}", "id", id, "classification", classification, "reason", reason, "status",
                            http_status, "attempts", attempts, "waited_ms", (json_int_t)waited_ms, "message",
                            message ? message : "");
    if (rec && http_status == 0) json_object_set_new(rec, "status", json_null());
    if (rec && code && *code) json_object_set_new(rec, "code", json_string(code));
    write_record(r, &r->err, rec);
    r->failed++;
}

/* ---- items ------------------------------------------------------------------ */

/* The item leaves: recorded, or dropped to be done by a rerun. Its call
 * has ended (or never started). */
static void item_end(item *it) {
    run *r = it->r;
    if (it->easy) curl_easy_cleanup(it->easy);
    if (it->prev) it->prev->next = it->next;
    else r->live = it->next;
    if (it->next) it->next->prev = it->prev;
    r->nlive--;
    json_decref(it->id);
    free(it->key);
    free(it->body);
    free(it->sent);
    free(it);
    fill(r);
    maybe_finish(r);
}

/* The call's prepare hook: the grant names the deployment the attempt goes
 * to (a group's member); send to its URL, with its headers and body. */
static int item_prepare(void *arg, sl_call *call, const sl_grant *grant, void *easy) {
    (void)call;
    item *it = arg;
    run *r = it->r;
    const char *dep = sl_grant_deployment(grant);
    const run_member *m = run_target_member(&r->target, dep);
    if (!m) {
        /* The daemon's config and ours disagree. */
        set_fatal(r, "the governor granted a slot on '%s', which is not a member of '%s' in %s", dep, r->cli.deployment,
                  r->cli.config);
        return SL_EINVAL;
    }
    size_t blen = 0;
    free(it->sent);
    it->sent = NULL;
    const char *body = run_target_body(m, it->body, it->body_len, it->has_model,
                                       it->has_max_tokens ? 0 : it->output_tokens, &blen, &it->sent);
    if (!body) {
        set_fatal(r, "out of memory");
        return SL_ENOMEM;
    }
    curl_easy_setopt(easy, CURLOPT_URL, m->url);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, m->hdrs);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
    return 0;
}

/* The call's attempted hook: the live counters of the progress line. */
static void item_attempted(void *arg, sl_call *call, const sl_verdict *v, int curl_code) {
    (void)call, (void)curl_code;
    item *it = arg;
    it->r->attempts++;
    if (v->http_status == 429) it->r->status_429++;
}

static void record_success(run *r, item *it, const sl_call_report *rep) {
    json_t *body = rep->body_len ? json_loadb(rep->body, rep->body_len, 0, NULL) : NULL;
    json_t *rec =
        json_pack("{sOsisOsisI}", "id", it->id, "status", rep->http_status, "response", body ? body : json_null(),
                  "attempts", rep->attempts, "waited_ms", (json_int_t)rep->waited_ms);
    if (rec && !body)
        json_object_set_new(rec, "response_text",
                            rep->body_len ? json_stringn(rep->body, rep->body_len) : json_string(""));
    /* A group's record says which member answered. */
    if (rec && r->target.group) json_object_set_new(rec, "deployment", json_string(rep->deployment));
    json_decref(body);
    write_record(r, &r->out, rec);
    r->ok++;
    for (size_t i = 0; i < r->target.n; i++)
        if (!strcmp(r->target.members[i].dep->name, rep->deployment)) r->member_ok[i]++;
}

/* Records the failure that ended a call: its classification (the class of
 * the last response, or what decided without one), reason, and message
 * (the provider's, else libcurl's, else sluice's). */
static void record_call_failure(run *r, item *it, int status, const sl_call_report *rep) {
    const char *cls = rep->cls >= 0 ? sl_class_name(rep->cls) : NULL, *reason;
    const char *classification = cls ? cls : "deadline";
    switch (status) {
    case SL_EFATAL: reason = "not_retryable"; break;
    case SL_EATTEMPTS: reason = "attempts"; break;
    case SL_ENORETRY: reason = "retry_budget"; break;
    case SL_ETOOBIG: classification = reason = "too_big"; break;
    case SL_ESHED:
        /* Out of quota until the provider's reset (billing, a monthly
         * budget): a batch does not wait for that, a rerun does it. Or it
         * never fits: too large, or no member may serve it (tag). */
        reason = strcmp(rep->shed_reason, SHED_WORD(QUOTA)) == 0 ? "quota" : "shed";
        classification = !strcmp(rep->shed_reason, SHED_WORD(QUOTA)) ? sl_class_name(SL_CLASS_QUOTA_EXHAUSTED)
                         : !strcmp(rep->shed_reason, SHED_WORD(TAG)) ? "tag"
                                                                     : "too_large";
        break;
    default: reason = "deadline"; break; /* SL_EDEADLINE, SL_ETIMEDOUT */
    }
    json_t *body = rep->body_len ? json_loadb(rep->body, rep->body_len, 0, NULL) : NULL;
    const char *pm = status == SL_ETOOBIG ? "the response is larger than 16 MiB" : body_error_message(body);
    const char *msg = pm                                     ? pm
                      : rep->curl_code != 0 && rep->attempts ? curl_easy_strerror((CURLcode)rep->curl_code)
                                                             : rep->message;
    record_failure(r, it->id, classification, reason, rep->http_status, rep->attempts, rep->waited_ms, rep->code, msg);
    json_decref(body);
}

/* A call ended: record it, or stop the run, or leave it for a rerun. */
static void item_done(void *arg, sl_call *call, int status, sl_call_report *rep) {
    (void)call;
    item *it = arg;
    run *r = it->r;
    it->call = NULL;
    r->retries += rep->retries;
    r->sheds += rep->sheds;
    switch (status) {
    case 0: record_success(r, it, rep); break;
    case SL_ECANCELED: /* stopping: a rerun does it */ break;
    case SL_EFATAL:
    case SL_EATTEMPTS:
    case SL_ENORETRY:
    case SL_ETOOBIG:
    case SL_ESHED:
    case SL_EDEADLINE:
    case SL_ETIMEDOUT: record_call_failure(r, it, status, rep); break;
    case SL_EUNAVAIL:
    case SL_EIO:
    case SL_EPROTO:
    case SL_EREDIS:
    case SL_ECLOSING: /* sluiced is shutting down (ours closes only when idle) */
        set_fatal(r, "the governor is unavailable for %d s: %s", RUN_UNAVAIL_GIVE_UP_MS / 1000, rep->message);
        break;
    default:
        /* Unknown deployment, invalid request: no request can succeed. */
        set_fatal(r, "%s: %s", sl_strerror(status), rep->message);
        break;
    }
    item_end(it);
}

/* Starts the item's governed call. */
static void item_start(item *it) {
    run *r = it->r;
    CURL *e = it->easy = curl_easy_init();
    if (!e) {
        set_fatal(r, "out of memory");
        item_end(it);
        return;
    }
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, RUN_CONNECT_TIMEOUT_MS);
    sl_call_opts o = r->policy;
    o.deadline_ms = it->deadline_ms;
    /* Split: each dimension of the member takes its part (docs/providers.md). */
    o.input_tokens = it->input_tokens;
    o.output_tokens = it->output_tokens;
    o.partial = it->partial;
    o.lane = it->lane[0] ? it->lane : NULL;
    o.tenant = it->tenant[0] ? it->tenant : NULL;
    o.tag = it->tag[0] ? it->tag : NULL;
    sl_call_http h;
    sl_call_http_init(&h);
    h.easy = e;
    h.prepare = item_prepare;
    h.attempted = item_attempted;
    int rc = sl_call_start(r->caller, &o, &h, item_done, it, &it->call);
    if (rc != 0) {
        set_fatal(r, "cannot start a call: %s", sl_strerror(rc));
        item_end(it);
    }
}

/* ---- stopping ------------------------------------------------------------------ */

/* level 1: take no new work; cancel waiting calls (their slots go back),
 * let attempts in flight finish without retrying. level 2: abort those
 * too (a grant whose request went out is settled as failed: the provider
 * may have counted it). The calls' callbacks end the items. */
static void stop_work(run *r, int level) {
    if (r->stopping >= level) return;
    r->stopping = level;
    for (item *it = r->live; it; it = it->next)
        if (it->call) sl_call_cancel(it->call, level >= 2 ? SL_CANCEL_NOW : SL_CANCEL_AFTER_SEND);
    maybe_finish(r);
}

static void on_signal(uv_signal_t *s, int sig) {
    run *r = s->data;
    if (!r->stop_sig) r->stop_sig = sig;
    int level = r->stopping + 1;
    if (level > 2) return;
    fprintf(stderr, "%ssluice run: %s: %s\n", r->tty ? "\r\033[K" : "",
            sig == SIGINT   ? "SIGINT"
            : sig == SIGHUP ? "SIGHUP"
                            : "SIGTERM",
            level == 1 ? "stopping; calls in flight finish (again to cancel them)" : "cancelling the calls in flight");
    stop_work(r, level);
}

static void on_closed_noop(uv_handle_t *h) { (void)h; }

static void on_tick(uv_timer_t *t);

/* Ends the run once nothing is in progress any more: the handles close,
 * and uv_run returns. The governor is closed after it (teardown), which
 * delivers the settles made. */
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
    uv_close((uv_handle_t *)&r->sighup, on_closed_noop);
    sl_caller_free(r->caller);
    r->caller = NULL;
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
        if (r->target.group) snprintf(err, errlen, "no member of group '%s' carries tag '%s'", r->cli.deployment, tag);
        else snprintf(err, errlen, "deployment '%s' does not carry tag '%s'", r->cli.deployment, tag);
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
        it->input_tokens = req.input_tokens;
        it->output_tokens = req.output_tokens;
        it->partial = req.partial;
        it->has_max_tokens = req.has_max_tokens;
        snprintf(it->lane, sizeof(it->lane), "%s", lane);
        snprintf(it->tenant, sizeof(it->tenant), "%s", tenant);
        snprintf(it->tag, sizeof(it->tag), "%s", tag);
        it->has_model = req.has_model;
        if (r->cli.deadline_s > 0) it->deadline_ms = sl_now_ms() + (int64_t)(r->cli.deadline_s * 1000);
        it->next = r->live;
        if (r->live) r->live->prev = it;
        r->live = it;
        r->nlive++;
        item_start(it);
    }
}

/* First pass over the input: how many distinct ids this run owns (its
 * shard) and how many of them already have a record. An id belongs to the
 * shard of its first line: a later line of this shard repeating an id
 * first seen on another shard's line is skipped (added to seen), so a
 * duplicate id is sent once by the fleet of shards, as by one run. */
static int count_input(run *r, char *err, size_t errlen) {
    FILE *f = fopen(r->cli.in, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", r->cli.in, strerror(errno));
        return -1;
    }
    run_set ids = {0}, all = {0}; /* this shard's first lines' ids; every line's */
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (run_line_blank(line, len)) continue;
        int ours = in_shard(r, lineno);
        /* The key fill() will record this line under, whatever the line. */
        char *key = run_line_key(line, len, lineno);
        int first = key ? run_set_add(&all, key) : -1, added = 0;
        if (first >= 0 && ours) {
            if (first == 1) added = run_set_add(&ids, key);
            else if (!run_set_has(&ids, key)) added = run_set_add(&r->seen, key) < 0 ? -1 : 0; /* another shard's */
        }
        if (first < 0 || added < 0) {
            free(key);
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        if (added == 1) {
            r->total++;
            if (run_set_has(&r->seen, key)) {
                r->done_before++;
            } else if (!r->cli.retry_errors && run_set_has(&r->errs, key)) {
                /* Failed for good in an earlier run: done, but not a result. */
                r->done_before++;
                r->failed_before++;
            }
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
    run_set_free(&all);
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
        int st = it->call ? sl_call_state(it->call) : SL_CALL_DONE;
        if (st == SL_CALL_SENDING) flight++;
        else if (st == SL_CALL_ACQUIRING || st == SL_CALL_BACKOFF) waiting++;
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

/* ---- setup ------------------------------------------------------------------ */

/* A runtime failure before the run starts: the message on stderr, and in
 * the summary's "error" (printed all the same). Returns 1, the exit code. */
static int setup_fail(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int setup_fail(run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->fatal_msg, sizeof(r->fatal_msg), fmt, ap);
    va_end(ap);
    r->fatal = 1;
    fprintf(stderr, "sluice run: %s\n", r->fatal_msg);
    return 1;
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
    if (!r->cli.config) r->cli.config = cli_default_config();
    const char *missing = !r->cli.deployment ? "--deployment"
                          : !r->cli.in       ? "--in"
                          : !r->cli.out      ? "--out"
                          : !r->cli.config   ? "--config (or SLUICE_CONFIG)"
                                             : NULL;
    if (missing) {
        fprintf(stderr, "sluice run: %s is required (see sluice run --help)\n", missing);
        return 2;
    }
    if (r->cli.embedded && r->cli.socket) {
        fprintf(stderr, "sluice run: give --socket or --embedded, not both\n");
        return 2;
    }
    /* Which response headers a settle passes on: all (the agent decides
     * what they mean), retry-after (only the waits the provider asks for),
     * none (the schedule left alone). */
    sl_call_opts_init(&r->policy);
    const char *hm = r->cli.settle_headers ? r->cli.settle_headers : "all";
    if (strcmp(hm, "retry-after") == 0) r->policy.settle_headers = SL_SETTLE_HEADERS_RETRY_AFTER;
    else if (strcmp(hm, "all") == 0) r->policy.settle_headers = SL_SETTLE_HEADERS_ALL;
    else if (strcmp(hm, "none") == 0) r->policy.settle_headers = SL_SETTLE_HEADERS_NONE;
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
    if (config_load_flags(r->cli.config, CONFIG_LOAD_NO_PROXY_SECRETS, &r->cfg, err, sizeof(err)) != 0) {
        return setup_fail(r, "%s", err);
    }
    if (run_target_open(&r->target, r->cfg, r->cli.deployment, r->headers, r->nheaders, err, sizeof(err)) != 0) {
        return setup_fail(r, "%s", err);
    }
    r->member_ok = calloc(r->target.n, sizeof(*r->member_ok));
    if (!r->member_ok) {
        return setup_fail(r, "out of memory");
    }
    /* A flag's mistake stops the run before anything is sent. */
    const char *flag = check_classes(r, r->cli.lane ? r->cli.lane : "", "", err, sizeof(err)) != 0 ? "--lane"
                       : check_classes(r, "", r->cli.tag ? r->cli.tag : "", err, sizeof(err)) != 0 ? "--tag"
                                                                                                   : NULL;
    if (flag) {
        return setup_fail(r, "%s: %s in %s", flag, err, r->cli.config);
    }

    /* The files: results first (their ids are done), then errors. */
    if (!r->cli.errors) {
        snprintf(r->errors_path, sizeof(r->errors_path), "%s.errors.jsonl", r->cli.out);
        r->cli.errors = r->errors_path;
    }
    size_t recs, bad, erecs, ebad;
    if (run_file_open(&r->out, r->cli.out, r->cli.fsync, &r->seen, &recs, &bad, err, sizeof(err)) != 0 ||
        run_file_open(&r->err, r->cli.errors, r->cli.fsync, &r->errs, &erecs, &ebad, err, sizeof(err)) != 0) {
        return setup_fail(r, "%s", err);
    }
    if (bad + ebad > 0)
        fprintf(stderr, "sluice run: warning: %zu line(s) of %s / %s are not records with an id (ignored)\n",
                bad + ebad, r->cli.out, r->cli.errors);
    r->cli.errors = r->err.path;
    if (count_input(r, err, sizeof(err)) != 0) {
        return setup_fail(r, "%s", err);
    }
    /* Without --retry-errors, an id in the errors file is done: skipped. */
    for (size_t i = 0; !r->cli.retry_errors && i < r->errs.cap; i++) {
        if (r->errs.slots[i] && run_set_add(&r->seen, r->errs.slots[i]) < 0) return setup_fail(r, "out of memory");
    }
    r->in = fopen(r->cli.in, "r");
    if (!r->in) {
        return setup_fail(r, "%s: %s", r->cli.in, strerror(errno));
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
        return setup_fail(r, "%s%s", sl_errmsg(NULL),
                          r->cli.embedded ? "" : " (is sluiced running? --embedded runs without it)");
    }
    r->policy.deployment = r->cli.deployment;
    r->policy.max_attempts = (int)r->cli.max_attempts;
    r->policy.min_attempt_ms = RUN_MIN_ATTEMPT_MS;
    r->policy.attempt_timeout_ms = (long long)(r->cli.timeout_s * 1000);
    r->policy.retry_shed = 1;
    r->policy.unavailable_ms = RUN_UNAVAIL_GIVE_UP_MS;
    return 0;
}

static void print_summary(run *r, int code) {
    double secs = (double)(sl_now_ms() - r->t0) / 1000.0;
    long long remaining = r->total - done_now(r);
    if (remaining < 0) remaining = 0;
    json_t *s = json_pack("{sssssIsIsIsIsIsIsIsIsIsIsIsfss ss}", "deployment", r->cli.deployment, "mode",
                          r->cli.embedded ? "embedded" : "daemon", "total", (json_int_t)r->total, "done_before",
                          (json_int_t)r->done_before, "failed_before", (json_int_t)r->failed_before, "ok",
                          (json_int_t)r->ok, "failed", (json_int_t)r->failed, "remaining", (json_int_t)remaining,
                          "attempts", (json_int_t)r->attempts, "status_429", (json_int_t)r->status_429, "retries",
                          (json_int_t)r->retries, "sheds", (json_int_t)r->sheds, "elapsed_ms",
                          (json_int_t)(secs * 1000), "rate_per_s", secs > 0 ? (double)r->ok / secs : 0.0, "out",
                          r->cli.out, "errors", r->cli.errors ? r->cli.errors : "");
    if (s) {
        json_object_set_new(s, "interrupted",
                            r->stop_sig == SIGINT    ? json_string("SIGINT")
                            : r->stop_sig == SIGTERM ? json_string("SIGTERM")
                            : r->stop_sig == SIGHUP  ? json_string("SIGHUP")
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
    sl_caller_free(r->caller); /* only after a failed start: maybe_finish frees it */
    if (r->gov) sl_close(r->gov);
    if (r->in) fclose(r->in);
    free(r->line);
    run_file_close(&r->out);
    run_file_close(&r->err);
    run_set_free(&r->seen);
    run_set_free(&r->errs);
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
    /* A runtime failure of the setup still ends with the summary: the last
     * stdout line is one, always (a usage error, 2, has only its message). */
    if (code == 1) print_summary(r, 1);
    if (code != 0) {
        teardown(r);
        free(r);
        curl_global_cleanup();
        return code < 0 ? 0 : code;
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&r->loop);
    uv_signal_init(&r->loop, &r->sigint);
    uv_signal_init(&r->loop, &r->sigterm);
    uv_signal_init(&r->loop, &r->sighup);
    r->sigint.data = r->sigterm.data = r->sighup.data = r;
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    /* A hang-up (the ssh session of a run started without nohup) stops
     * it as SIGTERM does: killed by it, the calls the provider answered
     * were lost and sent again by the next run. */
    uv_signal_start(&r->sighup, on_signal, SIGHUP);
    uv_timer_init(&r->loop, &r->tick);
    r->tick.data = r;
    uv_timer_start(&r->tick, on_tick, 0, RUN_TICK_MS);
    int rc = sl_caller_new(r->gov, &r->caller);
    if (rc == 0) rc = sl_uv_attach(r->caller, &r->loop);
    if (rc != 0) {
        set_fatal(r, "cannot start the calls on the loop: %s", sl_strerror(rc));
        r->in_eof = 1;
    } else {
        fill(r);
    }
    maybe_finish(r);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);

    /* 1 while any id of the input has only a failure: this run's, or one an
     * earlier run recorded (a rerun after a crash does not make it a
     * success). */
    code = r->stop_sig                                                                     ? 128 + r->stop_sig
           : (r->fatal || r->failed > 0 || r->failed_before > 0 || done_now(r) < r->total) ? 1
                                                                                           : 0;
    print_summary(r, code);
    teardown(r);
    free(r);
    curl_global_cleanup();
    return code;
}
