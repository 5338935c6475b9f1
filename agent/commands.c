/* commands: the command table and its handlers. See commands.h and
 * docs/protocol.md (the replies documented there are produced here). */
#define _POSIX_C_SOURCE 200809L

#include "commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "info.h"
#include "ratelimit.h"
#include "sluice.h"
#include "timeutil.h"

/* Largest TOKENS / MAXWAIT accepted. */

/* ---- helpers ------------------------------------------------------------------------ */

static void reply_error(const command_req *q, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void reply_error(const command_req *q, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    resp_add_error(server_reply_buf(q->r), msg);
    server_reply_done(q->r, 0);
}

/* A printable rendering of an argument for messages: at most 64 bytes,
 * other bytes as \xNN. */
static const char *printable(const char *s, size_t len, char *out, size_t outlen) {
    size_t n = 0;
    for (size_t i = 0; i < len && n + 8 < outlen; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (i == 64) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        if (ch >= 0x20 && ch < 0x7f && ch != '\'') out[n++] = (char)ch;
        else n += (size_t)snprintf(out + n, outlen - n, "\\x%02x", ch);
    }
    out[n] = '\0';
    return out;
}

static int arg_is(const command_req *q, int i, const char *word) {
    return q->argvlen[i] == strlen(word) && strcasecmp(q->argv[i], word) == 0;
}

/* A non-negative decimal integer up to SLUICE_AMOUNT_MAX: 0, or -1 when s
 * is not one, -2 when it is larger. */
static int arg_uint(const char *s, size_t len, long long *out) {
    if (len == 0) return -1;
    long long v = 0;
    int big = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v > SLUICE_AMOUNT_MAX) big = 1;
        else v = v * 10 + (s[i] - '0');
    }
    if (big || v > SLUICE_AMOUNT_MAX) return -2;
    *out = v;
    return 0;
}

/* A deployment argument usable as a C string (no NUL inside, not too long). */
static int arg_name(const command_req *q, int i) {
    return q->argvlen[i] > 0 && q->argvlen[i] <= CONFIG_NAME_MAX && strlen(q->argv[i]) == q->argvlen[i];
}

/* The lower-case form of an upper-case command name. */
static const char *lowercase(const char *name, char *out, size_t outlen) {
    size_t i = 0;
    for (; name[i] && i + 1 < outlen; i++)
        out[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    out[i] = '\0';
    return out;
}

/* The error reply for an engine status that is not OK or SHED. */
static void add_engine_error(resp_buf *b, int status, const char *dep, const char *msg) {
    char p[160];
    switch (status) {
    case SL_EUNKNOWN:
        resp_add_errorf(b, "unknown deployment '%s'%s", printable(dep, strlen(dep), p, sizeof(p)),
                        msg ? " (removed by a configuration reload)" : "");
        break;
    case SL_EUNAVAIL: resp_add_errorf(b, "-%s %s", sluice_error_word(status), msg ? msg : sl_strerror(status)); break;
    case SL_ECLOSING: resp_add_error(b, SLUICE_REPLY_CLOSING); break;
    case SL_ENOMEM: resp_add_error(b, "out of memory"); break;
    default: resp_add_errorf(b, "%s", msg ? msg : sl_strerror(status)); break;
    }
}

/* ---- ACQUIRE ------------------------------------------------------------------------ */

typedef struct acquire_op {
    server *s;
    server_reply *r;
    engine_call *call;
    char dep[CONFIG_NAME_MAX + 1];
    char lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1];
    long long max_wait_ms; /* the deadline its patience is judged by (engine_max_wait) */
    uint64_t started_ms;   /* uv_now when it arrived */
} acquire_op;

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    acquire_op *op = arg;
    resp_buf *b = server_reply_buf(op->r);
    /* Patience: every ACQUIRE answered counts; within its deadline when
     * granted no later than its max wait (a provider's pause can hold a
     * grant past it). A group's grant counts on the member. */
    engine_note_patience(server_engine(op->s), status == SL_OK ? g->deployment : op->dep, op->lane, op->tenant,
                         status == SL_OK && g->waited_ms <= op->max_wait_ms);
    if (status == SL_OK) {
        /* A group's grant also names the member and its endpoint. */
        resp_add_array(b, g->group ? 5 : 3);
        resp_add_bulk_str(b, g->id);
        resp_add_integer(b, g->waited_ms);
        resp_add_integer(b, g->tokens);
        if (g->group) {
            resp_add_bulk_str(b, g->deployment);
            resp_add_bulk_str(b, g->endpoint);
        }
    } else if (status == SL_ESHED && shed->budget) {
        resp_add_errorf(b, "-%s %s retry-after-ms=%lld budget=%s period=%s left=%lld.%06lld currency=%s",
                        sluice_error_word(SL_ESHED), shed->reason, shed->retry_after_ms, shed->budget, shed->period,
                        shed->left_u / 1000000, shed->left_u % 1000000, shed->currency);
    } else if (status == SL_ESHED) {
        resp_add_errorf(b, "-%s %s retry-after-ms=%lld", sluice_error_word(SL_ESHED), shed->reason,
                        shed->retry_after_ms);
    } else {
        add_engine_error(b, status, op->dep, msg);
    }
    server_reply_done(op->r, 0);
    free(op);
}

/* The client went away while waiting: give the reservation back. Not
 * an answer: patience does not count it (docs/protocol.md, "Patience"). */
static void acquire_abandon(void *arg) {
    acquire_op *op = arg;
    engine *e = server_engine(op->s);
    engine_note_abandoned(e, op->dep, op->lane, op->tenant, (long long)(uv_now(server_loop(op->s)) - op->started_ms));
    engine_cancel(op->call);
    free(op);
}

/* The arguments ACQUIRE and ESTIMATE share, parsed. */
typedef struct req_args {
    char name[CONFIG_NAME_MAX + 1];
    char lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1], tag[CONFIG_NAME_MAX + 1];
    engine_req rq;
} req_args;

/* Parses <name> [TOKENS n | INPUT n OUTPUT m] [MAXWAIT ms] [LANE l]
 * [TENANT t] [TAG t] [EXACT] [PARTIAL] into *a. Returns 0, or -1 after replying the
 * error. */
static int parse_req(const command_req *q, req_args *a) {
    long long tokens = 0, maxwait = -1, input = -1, output = -1;
    int exact = 0, partial = 0;
    memset(a, 0, sizeof(*a));
    for (int i = 2; i < q->argc; i += 2) {
        char p[160];
        if (arg_is(q, i, "EXACT")) {
            /* A flag without a value: the estimate was counted exactly. */
            exact = 1;
            i--;
            continue;
        }
        if (arg_is(q, i, "PARTIAL")) {
            /* A flag without a value: the estimate guesses images, audio or
             * files, and teaches the calibration nothing. */
            partial = 1;
            i--;
            continue;
        }
        if (i + 1 >= q->argc) {
            reply_error(q, "syntax error: %s needs a value", printable(q->argv[i], q->argvlen[i], p, sizeof(p)));
            return -1;
        }
        if (arg_is(q, i, "TOKENS") || arg_is(q, i, "MAXWAIT") || arg_is(q, i, "INPUT") || arg_is(q, i, "OUTPUT")) {
            static const char *const words[] = {"TOKENS", "MAXWAIT", "INPUT", "OUTPUT"};
            long long *dst[] = {&tokens, &maxwait, &input, &output};
            int w = 0;
            while (!arg_is(q, i, words[w])) w++;
            long long v;
            int rc = arg_uint(q->argv[i + 1], q->argvlen[i + 1], &v);
            if (rc != 0) {
                char v1[160];
                if (rc == -2)
                    reply_error(q, "%s (%s %s)", sluice_req_error(SLUICE_REQ_TOO_MANY), words[w],
                                printable(q->argv[i + 1], q->argvlen[i + 1], v1, sizeof(v1)));
                else
                    reply_error(q, "%s must be a non-negative integer, got '%s'", words[w],
                                printable(q->argv[i + 1], q->argvlen[i + 1], v1, sizeof(v1)));
                return -1;
            }
            *dst[w] = v;
        } else if (arg_is(q, i, "LANE") || arg_is(q, i, "TENANT") || arg_is(q, i, "TAG")) {
            const char *what = arg_is(q, i, "LANE") ? "LANE" : arg_is(q, i, "TENANT") ? "TENANT" : "TAG";
            char *dst = what[1] == 'A' ? (what[0] == 'L' ? a->lane : a->tag) : a->tenant;
            /* Names as in the configuration (config_name_ok). */
            if (!config_name_ok(q->argv[i + 1], q->argvlen[i + 1])) {
                char v1[160];
                reply_error(q, "%s must be 1 to %d of A-Z a-z 0-9 . _ : -, got '%s'", what, CONFIG_NAME_MAX,
                            printable(q->argv[i + 1], q->argvlen[i + 1], v1, sizeof(v1)));
                return -1;
            }
            memcpy(dst, q->argv[i + 1], q->argvlen[i + 1]);
            dst[q->argvlen[i + 1]] = '\0';
        } else {
            reply_error(
                q,
                "syntax error: unknown option '%s' (expected TOKENS, INPUT, OUTPUT, MAXWAIT, LANE, TENANT, TAG, "
                "EXACT or PARTIAL)",
                printable(q->argv[i], q->argvlen[i], p, sizeof(p)));
            return -1;
        }
    }
    if (!arg_name(q, 1)) {
        char p[160];
        reply_error(q, "unknown deployment '%s'", printable(q->argv[1], q->argvlen[1], p, sizeof(p)));
        return -1;
    }
    memcpy(a->name, q->argv[1], q->argvlen[1] + 1);
    if ((input < 0) != (output < 0)) {
        reply_error(q, "syntax error: INPUT and OUTPUT go together (estimated input tokens, max output tokens)");
        return -1;
    }
    a->rq = (engine_req){.name = a->name,
                         .tokens = tokens,
                         .max_wait_ms = maxwait,
                         .lane = a->lane,
                         .tenant = a->tenant,
                         .tag = a->tag,
                         .split = input >= 0,
                         .input = input,
                         .output = output,
                         .exact = exact,
                         .partial = partial,
                         .caller = client_id(server_reply_client(q->r))};
    const char *why = engine_acquire_req_error(server_engine(q->s), &a->rq);
    if (why) {
        reply_error(q, "%s (deployment '%s')", why, a->name);
        return -1;
    }
    return 0;
}

/* Replies the error of an engine call on a's request that returned rc. */
static void reply_req_error(const command_req *q, int rc, const req_args *a) {
    const config *cfg = engine_config(server_engine(q->s));
    char p[160];
    if (rc == SL_EINVAL && a->tag[0])
        resp_add_errorf(server_reply_buf(q->r),
                        "deployment '%s' does not carry tag '%s' (TAG applies to groups and tagged deployments)",
                        a->name, a->tag);
    else if (rc == SL_EUNKNOWN && cfg->ngroups)
        resp_add_errorf(server_reply_buf(q->r), "unknown deployment or group '%s'",
                        printable(a->name, strlen(a->name), p, sizeof(p)));
    else if (rc == SL_EINVAL && a->lane[0]) {
        char lanes[256];
        config_lane_names(config_deployment(cfg, a->name), lanes, sizeof(lanes));
        resp_add_errorf(server_reply_buf(q->r), "unknown lane '%s' for deployment '%s' (its lanes: %s)", a->lane,
                        a->name, lanes);
    } else {
        add_engine_error(server_reply_buf(q->r), rc, a->name, NULL);
    }
    server_reply_done(q->r, 0);
}

static void cmd_acquire(const command_req *q) {
    req_args a;
    if (parse_req(q, &a) != 0) return;
    acquire_op *op = calloc(1, sizeof(*op));
    if (!op) {
        reply_error(q, "out of memory");
        return;
    }
    op->s = q->s;
    op->r = q->r;
    memcpy(op->dep, a.name, sizeof(op->dep));
    memcpy(op->lane, a.lane, sizeof(op->lane));
    memcpy(op->tenant, a.tenant, sizeof(op->tenant));
    op->max_wait_ms = engine_max_wait(server_engine(q->s), &a.rq);
    op->started_ms = uv_now(server_loop(q->s));
    int rc = engine_acquire_req(server_engine(q->s), &a.rq, on_acquired, op, &op->call);
    if (rc != 0) {
        reply_req_error(q, rc, &a);
        free(op);
        return;
    }
    server_reply_on_abandon(q->r, acquire_abandon, op);
}

/* ---- ESTIMATE ----------------------------------------------------------------------- */

static void on_estimated(void *arg, int status, const engine_estimate *est, const char *msg) {
    server_reply *r = arg;
    resp_buf *b = server_reply_buf(r);
    const char *source = est && est->local ? "local" : "redis";
    if (status != SL_OK) {
        add_engine_error(b, status, "", msg);
    } else if (est->granted) {
        resp_add_array(b, 4);
        resp_add_integer(b, est->wait_ms);
        resp_add_integer(b, est->tokens);
        resp_add_bulk_str(b, est->deployment);
        resp_add_bulk_str(b, source);
    } else {
        /* As ACQUIRE would shed it now, and where the answer came from. */
        resp_add_errorf(b, "-%s %s retry-after-ms=%lld source=%s", sluice_error_word(SL_ESHED), est->reason,
                        est->retry_after_ms, source);
    }
    server_reply_done(r, 0);
}

static void cmd_estimate(const command_req *q) {
    req_args a;
    if (parse_req(q, &a) != 0) return;
    int rc = engine_estimate_req(server_engine(q->s), &a.rq, on_estimated, q->r);
    if (rc != 0) reply_req_error(q, rc, &a);
    /* No abandon hook: a client that leaves orphans the reply, freed when
     * the engine answers (nothing was reserved). */
}

/* ---- SETTLE ------------------------------------------------------------------------- */

static void cmd_settle(const command_req *q) {
    server_stats *st = server_counters(q->s);
    long long actual = -1, in = -1, out = -1, cache_read = -1, cache_write = -1;
    engine_outcome outcome = ENGINE_OK;
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    long long now = wall_clock_ms();
    int headers = 0;
    char p[160];
    for (int i = 2; i < q->argc;) {
        if (arg_is(q, i, "HEADER")) {
            if (i + 2 >= q->argc) {
                reply_error(q, "syntax error: HEADER needs a name and a value");
                return;
            }
            headers++;
            st->settle_headers++;
            if (ratelimit_add_header(&fb, q->argv[i + 1], q->argvlen[i + 1], q->argv[i + 2], q->argvlen[i + 2], now))
                st->settle_headers_recognised++;
            i += 3;
            continue;
        }
        if (i + 1 >= q->argc) {
            reply_error(q, "syntax error: %s needs a value", printable(q->argv[i], q->argvlen[i], p, sizeof(p)));
            return;
        }
        if (arg_is(q, i, "TOKENS") || arg_is(q, i, "INPUT") || arg_is(q, i, "OUTPUT") || arg_is(q, i, "CACHE_READ") ||
            arg_is(q, i, "CACHE_WRITE")) {
            static const char *const words[] = {"TOKENS", "INPUT", "OUTPUT", "CACHE_READ", "CACHE_WRITE"};
            long long *dst[] = {&actual, &in, &out, &cache_read, &cache_write};
            int w = 0;
            while (!arg_is(q, i, words[w])) w++;
            if (arg_uint(q->argv[i + 1], q->argvlen[i + 1], dst[w]) != 0) {
                reply_error(q, "%s must be a non-negative integer, got '%s'", words[w],
                            printable(q->argv[i + 1], q->argvlen[i + 1], p, sizeof(p)));
                return;
            }
        } else if (arg_is(q, i, "STATUS")) {
            int found = 0;
            for (int k = 0; k < ENGINE_OUTCOMES && !found; k++) {
                if (arg_is(q, i + 1, engine_outcome_names[k])) {
                    outcome = (engine_outcome)k;
                    found = 1;
                }
            }
            if (!found) {
                reply_error(q, "STATUS must be ok, throttled, failed, cancelled or quota, got '%s'",
                            printable(q->argv[i + 1], q->argvlen[i + 1], p, sizeof(p)));
                return;
            }
        } else {
            reply_error(q,
                        "syntax error: unknown option '%s' (expected TOKENS, INPUT, OUTPUT, CACHE_READ, CACHE_WRITE, "
                        "STATUS or HEADER)",
                        printable(q->argv[i], q->argvlen[i], p, sizeof(p)));
            return;
        }
        i += 2;
    }
    /* A quota error's reset, like a 429's, says when the deployment may be
     * used again (the settle script holds it out until then). */
    long long pause =
        headers
            ? (long long)ratelimit_settle_pause_ms(&fb, outcome == ENGINE_THROTTLED || outcome == ENGINE_QUOTA, NULL)
            : -1;
    if (pause > SLUICE_PAUSE_MAX_MS) pause = SLUICE_PAUSE_MAX_MS;
    if ((in < 0) != (out < 0)) {
        reply_error(q, "syntax error: INPUT and OUTPUT go together (the usage the provider reported)");
        return;
    }
    if (cache_read >= 0 && (in < 0 || cache_read > in)) {
        reply_error(q, "CACHE_READ is the part of INPUT read from the prompt cache: it needs INPUT and is at most it");
        return;
    }
    if (cache_write >= 0 && (in < 0 || cache_write + (cache_read > 0 ? cache_read : 0) > in)) {
        reply_error(q, "CACHE_WRITE is the part of INPUT written to the prompt cache: it needs INPUT and, with "
                       "CACHE_READ, is at most it");
        return;
    }
    if (actual >= 0 && in >= 0 && actual != in + out) {
        reply_error(q, "TOKENS must be INPUT + OUTPUT when all three are given");
        return;
    }
    usage_rec usage = {actual, in, out, cache_read, cache_write};
    engine_seen seen;
    engine_seen_from_feedback(&fb, &seen);
    const char *id = q->argv[1];
    int rc = strlen(id) == q->argvlen[1]
                 ? engine_settle_usage(server_engine(q->s), id, &usage, outcome, pause, headers ? &seen : NULL)
                 : SL_EINVAL;
    if (rc == SL_EINVAL) {
        reply_error(q, "invalid grant id '%s' (expected <deployment>:<n> or <deployment>:L<n>, as ACQUIRE gave it)",
                    printable(id, q->argvlen[1], p, sizeof(p)));
        return;
    }
    if (rc == SL_EUNKNOWN) {
        reply_error(q, "unknown deployment in grant id '%s'", printable(id, q->argvlen[1], p, sizeof(p)));
        return;
    }
    if (rc != 0) {
        reply_error(q, "%s", sl_strerror(rc));
        return;
    }
    resp_add_simple(server_reply_buf(q->r), "OK");
    server_reply_done(q->r, 0);
}

/* ---- RETRY -------------------------------------------------------------------------- */

static void on_retry(void *arg, int status, int allowed, long long balance, long long retry_after_ms) {
    server_reply *r = arg;
    resp_buf *b = server_reply_buf(r);
    if (status != SL_OK) add_engine_error(b, status, "", NULL);
    else if (allowed) resp_add_integer(b, 1);
    else
        resp_add_errorf(b, "-%s retry budget spent, retry-after-ms=%lld", sluice_error_word(SL_ENORETRY),
                        retry_after_ms);
    server_reply_done(r, 0);
}

static void cmd_retry(const command_req *q) {
    char p[160];
    int rc = arg_name(q, 1) ? engine_retry(server_engine(q->s), q->argv[1], on_retry, q->r) : SL_EUNKNOWN;
    if (rc == SL_EUNKNOWN) {
        reply_error(q, "unknown deployment '%s'", printable(q->argv[1], q->argvlen[1], p, sizeof(p)));
        return;
    }
    if (rc != 0) {
        add_engine_error(server_reply_buf(q->r), rc, "", NULL);
        server_reply_done(q->r, 0);
    }
    /* No abandon hook: a client that leaves orphans the slot, freed when
     * the engine answers. */
}

/* ---- STATUS ------------------------------------------------------------------------- */

typedef struct status_op {
    server_reply *r;
    size_t n, left;
    resp_buf *parts; /* one per deployment */
    struct status_part {
        struct status_op *op;
        size_t idx;
        char dep[CONFIG_NAME_MAX + 1];
    } * args;
    int all; /* STATUS without a deployment: an array of arrays */
} status_op;

static void status_free(status_op *op) {
    for (size_t i = 0; i < op->n; i++) resp_buf_free(&op->parts[i]);
    free(op->parts);
    free(op->args);
    free(op);
}

static void status_finish(status_op *op) {
    resp_buf *b = server_reply_buf(op->r);
    if (op->all) resp_add_array(b, op->n);
    for (size_t i = 0; i < op->n; i++) resp_buf_append(b, op->parts[i].data, op->parts[i].len);
    server_reply_done(op->r, 0);
    status_free(op);
}

static void on_status(void *arg, int status, size_t n, const char *const *fields, const char *const *values) {
    struct status_part *a = arg;
    status_op *op = a->op;
    resp_buf *b = &op->parts[a->idx];
    if (status != SL_OK) {
        add_engine_error(b, status, a->dep, NULL);
    } else {
        size_t k = 1;
        for (size_t i = 0; i < n; i++)
            if (strcmp(fields[i], "deployment") != 0) k++;
        resp_add_map(b, k); /* RESP2: the flat field/value array of HGETALL */
        resp_add_bulk_str(b, "deployment");
        resp_add_bulk_str(b, a->dep);
        for (size_t i = 0; i < n; i++) {
            if (strcmp(fields[i], "deployment") == 0) continue;
            resp_add_bulk_str(b, fields[i]);
            resp_add_bulk_str(b, values[i]);
        }
    }
    if (--op->left == 0) status_finish(op);
}

static void cmd_status(const command_req *q) {
    engine *e = server_engine(q->s);
    const config *cfg = engine_config(e);
    char p[160];
    if (q->argc > 2) {
        reply_error(q, "wrong number of arguments for 'status' command");
        return;
    }
    if (q->argc == 2 && (!arg_name(q, 1) || !config_deployment(cfg, q->argv[1]))) {
        reply_error(q, "unknown deployment '%s'", printable(q->argv[1], q->argvlen[1], p, sizeof(p)));
        return;
    }
    status_op *op = calloc(1, sizeof(*op));
    size_t n = q->argc == 2 ? 1 : cfg->ndeployments;
    if (op) {
        op->parts = calloc(n, sizeof(*op->parts));
        op->args = calloc(n, sizeof(*op->args));
    }
    if (!op || !op->parts || !op->args) {
        if (op) status_free(op);
        reply_error(q, "out of memory");
        return;
    }
    op->r = q->r;
    op->n = n;
    for (size_t i = 0; i < n; i++) op->parts[i].proto = server_reply_buf(q->r)->proto;
    op->left = n + 1; /* one extra, released below, so no callback can finish early */
    op->all = q->argc == 1;
    for (size_t i = 0; i < n; i++) {
        struct status_part *a = &op->args[i];
        a->op = op;
        a->idx = i;
        snprintf(a->dep, sizeof(a->dep), "%s", q->argc == 2 ? q->argv[1] : cfg->deployments[i].name);
        int rc = engine_status(e, a->dep, on_status, a);
        if (rc != 0) {
            add_engine_error(&op->parts[i], rc, a->dep, NULL);
            op->left--;
        }
    }
    /* Callbacks never run synchronously, so this cannot be the last
     * reference unless every call failed at once. */
    if (--op->left == 0) status_finish(op);
}

/* ---- INFO, PING, QUIT, HELP, COMMAND ------------------------------------------------- */

static void cmd_info(const command_req *q) {
    if (q->argc > 2) {
        reply_error(q, "wrong number of arguments for 'info' command");
        return;
    }
    resp_buf text;
    resp_buf_init(&text);
    char section[32] = "";
    if (q->argc == 2)
        snprintf(section, sizeof(section), "%.*s", (int)(q->argvlen[1] < 31 ? q->argvlen[1] : 31), q->argv[1]);
    if (info_render(q->s, section, &text) != 0) {
        resp_buf_free(&text);
        reply_error(q, "out of memory");
        return;
    }
    resp_add_verbatim(server_reply_buf(q->r), "txt", text.data, text.len);
    resp_buf_free(&text);
    server_reply_done(q->r, 0);
}

static void cmd_ping(const command_req *q) {
    if (q->argc > 2) {
        reply_error(q, "wrong number of arguments for 'ping' command");
        return;
    }
    if (q->argc == 2) resp_add_bulk(server_reply_buf(q->r), q->argv[1], q->argvlen[1]);
    else resp_add_simple(server_reply_buf(q->r), "PONG");
    server_reply_done(q->r, 0);
}

static void cmd_quit(const command_req *q) {
    resp_add_simple(server_reply_buf(q->r), "OK");
    server_reply_done(q->r, 1);
}

static void cmd_help(const command_req *q) {
    size_t n;
    const command *t = commands_table(&n);
    resp_buf *b = server_reply_buf(q->r);
    resp_add_array(b, 2 * n + 1);
    resp_add_simple(b, "sluiced commands (see docs/protocol.md):");
    for (size_t i = 0; i < n; i++) {
        resp_add_simple(b, t[i].syntax);
        char line[300];
        snprintf(line, sizeof(line), "    %s", t[i].help);
        resp_add_simple(b, line);
    }
    server_reply_done(q->r, 0);
}

/* One COMMAND entry: name, arity, flags, first key, last key, step. */
static void add_command_info(resp_buf *b, const command *c) {
    char lower[32];
    size_t nflags = 0;
    for (unsigned f = 1; f <= CMD_CONNECTION; f <<= 1)
        if (c->flags & f) nflags++;
    resp_add_array(b, 6);
    resp_add_bulk_str(b, lowercase(c->name, lower, sizeof(lower)));
    resp_add_integer(b, c->arity);
    resp_add_set(b, nflags);
    for (unsigned f = 1; f <= CMD_CONNECTION; f <<= 1)
        if (c->flags & f) resp_add_simple(b, commands_flag_name(f));
    resp_add_integer(b, 0);
    resp_add_integer(b, 0);
    resp_add_integer(b, 0);
}

static void cmd_command(const command_req *q) {
    size_t n;
    const command *t = commands_table(&n);
    resp_buf *b = server_reply_buf(q->r);
    char p[160];
    if (q->argc == 1) {
        resp_add_array(b, n);
        for (size_t i = 0; i < n; i++) add_command_info(b, &t[i]);
    } else if (arg_is(q, 1, "COUNT")) {
        resp_add_integer(b, (long long)n);
    } else if (arg_is(q, 1, "HELP") && q->argc == 2) {
        cmd_help(q); /* redis-cli answers HELP itself; COMMAND HELP reaches us */
        return;
    } else if (arg_is(q, 1, "DOCS")) {
        resp_add_map(b, 0); /* redis-cli falls back to its own help */
    } else if (arg_is(q, 1, "LIST")) {
        resp_add_array(b, n);
        for (size_t i = 0; i < n; i++) resp_add_bulk_str(b, t[i].name);
    } else if (arg_is(q, 1, "INFO")) {
        resp_add_array(b, (size_t)(q->argc - 2));
        for (int i = 2; i < q->argc; i++) {
            const command *c = commands_find(q->argv[i], q->argvlen[i]);
            if (c) add_command_info(b, c);
            else resp_add_null_array(b);
        }
    } else {
        reply_error(q, "unknown subcommand '%s' of COMMAND (try COUNT, DOCS, HELP, INFO or LIST)",
                    printable(q->argv[1], q->argvlen[1], p, sizeof(p)));
        return;
    }
    server_reply_done(q->r, 0);
}

/* ---- HELLO, CLIENT, SELECT, AUTH: what stock clients send on connect ---------------- */

/* sluiced has no passwords: who may connect to the socket may acquire, and
 * the socket's owner, group and mode decide who that is (docs/security.md).
 * A client configured with a password is refused rather than let in with
 * it ignored, so nobody believes a password protects the quota. Clients
 * without one (the default of redis-py and ioredis) never send AUTH. */
static const char auth_refused[] =
    "AUTH is not supported: sluiced has no passwords, the socket's file mode decides who may connect "
    "(docs/security.md); remove the password from the client's settings";

/* Redis' rule for client names and library attributes: printable ASCII
 * without spaces ('!' to '~'), so that CLIENT LIST splits on spaces and
 * nothing a client says can fake another field or line. sluiced also caps
 * the length, as every client's names are kept. NULL when v is fine, else
 * the error message (what: "client names", "lib-name", ...). */
static const char *attr_invalid(const char *v, size_t len, const char *what, char *msg, size_t msglen) {
    if (len > CLIENT_ATTR_MAX) {
        snprintf(msg, msglen, "%s cannot be longer than %d bytes", what, CLIENT_ATTR_MAX);
        return msg;
    }
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '!' || v[i] > '~') {
            snprintf(msg, msglen, "%s cannot contain spaces, newlines or special characters", what);
            return msg;
        }
    }
    return NULL;
}

/* HELLO [protover [AUTH username password] [SETNAME clientname]]: as in
 * Redis, nothing changes unless every option is good, and the reply (a map)
 * is already in the protocol asked for. */
static void cmd_hello(const command_req *q) {
    int proto = client_proto(q->c);
    char p[160], msg[160];
    if (q->argc >= 2) {
        if (arg_is(q, 1, "2")) {
            proto = RESP_PROTO_2;
        } else if (arg_is(q, 1, "3")) {
            proto = RESP_PROTO_3;
        } else {
            reply_error(q, "-NOPROTO unsupported protocol version");
            return;
        }
    }
    int auth = 0, name = -1;
    for (int i = 2; i < q->argc; i++) {
        if (arg_is(q, i, "AUTH") && i + 2 < q->argc) {
            auth = 1;
            i += 2;
        } else if (arg_is(q, i, "SETNAME") && i + 1 < q->argc) {
            name = ++i;
        } else {
            reply_error(q, "syntax error in HELLO option '%s'", printable(q->argv[i], q->argvlen[i], p, sizeof(p)));
            return;
        }
    }
    if (auth) {
        reply_error(q, "%s", auth_refused);
        return;
    }
    if (name > 0) {
        if (attr_invalid(q->argv[name], q->argvlen[name], "client names", msg, sizeof(msg))) {
            reply_error(q, "%s", msg);
            return;
        }
        client_attr_set(q->c, CLIENT_ATTR_NAME, q->argv[name], q->argvlen[name]);
    }
    client_set_proto(q->c, q->r, proto);
    resp_buf *b = server_reply_buf(q->r);
    resp_add_map(b, 7);
    resp_add_bulk_str(b, "server");
    resp_add_bulk_str(b, "sluiced");
    resp_add_bulk_str(b, "version");
    resp_add_bulk_str(b, SLUICE_VERSION);
    resp_add_bulk_str(b, "proto");
    resp_add_integer(b, proto);
    resp_add_bulk_str(b, "id");
    resp_add_integer(b, (long long)client_id(q->c));
    resp_add_bulk_str(b, "mode");
    resp_add_bulk_str(b, "standalone");
    resp_add_bulk_str(b, "role");
    resp_add_bulk_str(b, "master");
    resp_add_bulk_str(b, "modules");
    resp_add_array(b, 0);
    server_reply_done(q->r, 0);
}

static void cmd_auth(const command_req *q) { reply_error(q, "%s", auth_refused); }

/* SELECT 0 is a no-op so that clients configured with db 0 connect. */
static void cmd_select(const command_req *q) {
    char p[160];
    if (!arg_is(q, 1, "0")) {
        reply_error(q, "DB index is out of range: sluiced has one database, 0 (got '%s')",
                    printable(q->argv[1], q->argvlen[1], p, sizeof(p)));
        return;
    }
    resp_add_simple(server_reply_buf(q->r), "OK");
    server_reply_done(q->r, 0);
}

static void client_cmd_id(const command_req *q) {
    resp_add_integer(server_reply_buf(q->r), (long long)client_id(q->c));
    server_reply_done(q->r, 0);
}

static void client_cmd_getname(const command_req *q) {
    const char *name = client_attr_get(q->c, CLIENT_ATTR_NAME);
    resp_add_bulk_str(server_reply_buf(q->r), name[0] ? name : NULL);
    server_reply_done(q->r, 0);
}

static void client_cmd_setname(const command_req *q) {
    char msg[160];
    if (attr_invalid(q->argv[2], q->argvlen[2], "client names", msg, sizeof(msg))) {
        reply_error(q, "%s", msg);
        return;
    }
    client_attr_set(q->c, CLIENT_ATTR_NAME, q->argv[2], q->argvlen[2]);
    resp_add_simple(server_reply_buf(q->r), "OK");
    server_reply_done(q->r, 0);
}

/* The attributes CLIENT SETINFO sets (Redis 7.2's; any case). */
static const struct {
    const char *option;
    client_attr attr;
} setinfo_attrs[] = {
    {"lib-name", CLIENT_ATTR_LIB_NAME},
    {"lib-ver", CLIENT_ATTR_LIB_VER},
};

static void client_cmd_setinfo(const command_req *q) {
    char p[160], msg[160];
    for (size_t k = 0; k < sizeof(setinfo_attrs) / sizeof(setinfo_attrs[0]); k++) {
        if (!arg_is(q, 2, setinfo_attrs[k].option)) continue;
        if (attr_invalid(q->argv[3], q->argvlen[3], setinfo_attrs[k].option, msg, sizeof(msg))) {
            reply_error(q, "%s", msg);
            return;
        }
        client_attr_set(q->c, setinfo_attrs[k].attr, q->argv[3], q->argvlen[3]);
        resp_add_simple(server_reply_buf(q->r), "OK");
        server_reply_done(q->r, 0);
        return;
    }
    reply_error(q, "unknown attribute '%s' for CLIENT SETINFO (expected LIB-NAME or LIB-VER)",
                printable(q->argv[2], q->argvlen[2], p, sizeof(p)));
}

/* CLIENT LIST and CLIENT INFO: text, as in Redis (a verbatim string in
 * RESP3). */
static void reply_client_text(const command_req *q, int all) {
    resp_buf text;
    resp_buf_init(&text);
    int rc = all ? server_describe_clients(q->s, &text) : client_describe(q->c, &text);
    if (rc == 0 && !all) rc = resp_buf_append(&text, "\n", 1);
    if (rc != 0) {
        resp_buf_free(&text);
        reply_error(q, "out of memory");
        return;
    }
    resp_add_verbatim(server_reply_buf(q->r), "txt", text.data, text.len);
    resp_buf_free(&text);
    server_reply_done(q->r, 0);
}

static void client_cmd_list(const command_req *q) {
    if (q->argc > 2) {
        reply_error(q, "syntax error: sluiced's CLIENT LIST takes no options (no TYPE or ID filter)");
        return;
    }
    reply_client_text(q, 1);
}

static void client_cmd_info(const command_req *q) { reply_client_text(q, 0); }

/* CLIENT's subcommands. arity counts CLIENT and the subcommand, as the
 * command table does. Anything else (KILL, PAUSE, REPLY, TRACKING...) is
 * an error: no client may act on another or change how it is answered. */
static const struct {
    const char *name; /* lower case, as Redis names 'client|setname' */
    int arity;
    void (*handler)(const command_req *q);
} client_subcommands[] = {
    {"id", 2, client_cmd_id},           {"getname", 2, client_cmd_getname}, {"setname", 3, client_cmd_setname},
    {"setinfo", 4, client_cmd_setinfo}, {"list", -2, client_cmd_list},      {"info", 2, client_cmd_info},
};

static void cmd_client(const command_req *q) {
    char p[160];
    for (size_t k = 0; k < sizeof(client_subcommands) / sizeof(client_subcommands[0]); k++) {
        int arity = client_subcommands[k].arity;
        if (!arg_is(q, 1, client_subcommands[k].name)) continue;
        if ((arity > 0 && q->argc != arity) || (arity < 0 && q->argc < -arity)) {
            server_counters(q->s)->arity_errors++;
            reply_error(q, "wrong number of arguments for 'client|%s' command", client_subcommands[k].name);
            return;
        }
        client_subcommands[k].handler(q);
        return;
    }
    reply_error(q, "unknown subcommand '%s' of CLIENT (sluiced has ID, GETNAME, SETNAME, SETINFO, LIST and INFO)",
                printable(q->argv[1], q->argvlen[1], p, sizeof(p)));
}

/* ---- the table ------------------------------------------------------------------------ */

static const command command_table[] = {
    {"ACQUIRE", -2, cmd_acquire, CMD_BLOCKING,
     "ACQUIRE <deployment|group> [TOKENS n | INPUT n OUTPUT m] [MAXWAIT ms] [LANE name] [TENANT name] [TAG tag] "
     "[EXACT] [PARTIAL]",
     "Waits for a slot; replies [grant-id, waited-ms, reserved-tokens], or -SHED <reason> retry-after-ms=<n>."},
    {"ESTIMATE", -2, cmd_estimate, CMD_BLOCKING,
     "ESTIMATE <deployment|group> [TOKENS n | INPUT n OUTPUT m] [MAXWAIT ms] [LANE name] [TENANT name] [TAG tag] "
     "[EXACT] [PARTIAL]",
     "The wait an ACQUIRE would get now, reserving nothing; replies [wait-ms, tokens, deployment, redis|local], or "
     "-SHED <reason> retry-after-ms=<n> source=<redis|local>."},
    {"SETTLE", -2, cmd_settle, CMD_FAST,
     "SETTLE <grant-id> [TOKENS actual | INPUT a OUTPUT b [CACHE_READ c] [CACHE_WRITE w]] [STATUS "
     "ok|throttled|failed|cancelled|quota] "
     "[HEADER name value]...",
     "Closes a grant with its outcome and the provider's rate-limit headers; replies +OK."},
    {"RETRY", 2, cmd_retry, CMD_BLOCKING, "RETRY <deployment>",
     "Asks the fleet's retry budget; replies :1, or -NORETRY ... retry-after-ms=<n>."},
    {"STATUS", -1, cmd_status, CMD_BLOCKING, "STATUS [deployment]",
     "The live budget as field/value pairs (all deployments: an array of those)."},
    {"INFO", -1, cmd_info, CMD_FAST,
     "INFO [server|clients|deployments|dimensions|redis|stats|lanes|tenants|groups|patience|http|all]",
     "Agent state and counters as Redis-style text sections."},
    {"PING", -1, cmd_ping, CMD_FAST | CMD_CONNECTION, "PING [message]", "Replies PONG, or the message."},
    {"QUIT", -1, cmd_quit, CMD_FAST | CMD_CONNECTION, "QUIT", "Replies +OK and closes the connection."},
    {"COMMAND", -1, cmd_command, CMD_FAST | CMD_CONNECTION, "COMMAND [COUNT|DOCS|HELP|INFO name...|LIST]",
     "Describes the commands (for client libraries and redis-cli)."},
    {"HELP", 1, cmd_help, CMD_FAST | CMD_CONNECTION, "HELP", "This list."},
    {"HELLO", -1, cmd_hello, CMD_FAST | CMD_CONNECTION, "HELLO [2|3 [SETNAME name]]",
     "Chooses RESP2 or RESP3 for this connection; replies server, version, proto, id, mode, role, modules."},
    {"CLIENT", -2, cmd_client, CMD_FAST | CMD_CONNECTION,
     "CLIENT ID|GETNAME|SETNAME name|SETINFO LIB-NAME|LIB-VER value|LIST|INFO",
     "This connection's id and names, and the list of sluiced's connections."},
    {"SELECT", 2, cmd_select, CMD_FAST | CMD_CONNECTION, "SELECT 0",
     "Replies +OK: sluiced has one database, 0 (for clients that select it)."},
    {"AUTH", -2, cmd_auth, CMD_FAST | CMD_CONNECTION, "AUTH ...",
     "Refused: sluiced has no passwords; the socket's file mode decides who may connect."},
};

const command *commands_table(size_t *n) {
    *n = sizeof(command_table) / sizeof(command_table[0]);
    return command_table;
}

const command *commands_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof(command_table) / sizeof(command_table[0]); i++) {
        const command *c = &command_table[i];
        if (strlen(c->name) == len && strncasecmp(c->name, name, len) == 0) return c;
    }
    return NULL;
}

const char *commands_flag_name(unsigned f) {
    switch (f) {
    case CMD_FAST: return "fast";
    case CMD_BLOCKING: return "blocking";
    case CMD_CONNECTION: return "connection";
    default: return "?";
    }
}

int commands_dispatch(server *s, client *c, const resp_command *cmd) {
    server_reply *r = server_reply_new(c);
    if (!r) return SL_ENOMEM;
    command_req q = {s, c, r, cmd->argc, cmd->argv, cmd->argvlen};
    const command *k = commands_find(cmd->argv[0], cmd->argvlen[0]);
    char p[160];
    if (!k) {
        server_counters(s)->unknown_commands++;
        reply_error(&q, "unknown command '%s'", printable(cmd->argv[0], cmd->argvlen[0], p, sizeof(p)));
        return 0;
    }
    client_note_command(c, k->name);
    if ((k->arity > 0 && cmd->argc != k->arity) || (k->arity < 0 && cmd->argc < -k->arity)) {
        server_counters(s)->arity_errors++;
        char lower[32];
        reply_error(&q, "wrong number of arguments for '%s' command", lowercase(k->name, lower, sizeof(lower)));
        return 0;
    }
    k->handler(&q);
    return 0;
}
