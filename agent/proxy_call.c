/* proxy_call: one governed request of the HTTP proxy. See proxy_call.h. */
#define _GNU_SOURCE
#include "proxy_call.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "curlm.h"
#include "endpoint.h"
#include "gcall.h"
#include "proxy.h"
#include "proxy_auth.h"
#include "ratelimit.h"
#include "retry_after.h"
#include "sluice.h"
#include "sse_filter.h"
#include "timeutil.h"
#include "usage_sse.h"
#include "verdict.h"

/* The largest non-streamed answer buffered; more is a 502 (and its
 * estimate stands). */
#define PCALL_MAX_RESPONSE (64 * 1024 * 1024)
/* Upstream response headers kept per attempt. */
#define PCALL_MAX_HEADERS 128
/* The longest injected key header ("Authorization: Bearer " + the key;
 * config.c refuses keys over 4096 bytes). */
#define PCALL_KEY_LINE_MAX 4200
/* An attempt needs at least this long before the deadline. */
#define PCALL_MIN_ATTEMPT_MS 50

typedef struct pcall pcall;
typedef struct pshadow pshadow;

struct proxy_calls {
    uv_loop_t *loop;
    engine *e;
    proxy_stats *st;
    curlm *up; /* the upstream transfers (lib/curlm.h) */
    pcall *live;
    size_t nlive;
    pshadow *shadows; /* observe mode: acquires beside requests, until both ended */
    int closed;
};

/* A response header of the attempt: name and value in one allocation. */
typedef struct pc_header {
    char *name, *value;
} pc_header;

struct pcall {
    proxy_calls *set;
    pcall *prev, *next;
    http_request *r;           /* NULL once answered or abandoned */
    unsigned long long caller; /* its connection, for engine_req.caller */
    gcall_sm sm;               /* its step and its time, on the governed call's machine (gcall.h) */
    sl_call_opts o;            /* the machine's policy: the deadline, attempts, an attempt's time */
    int finished;              /* pcall_finish ran: the outcome is known */
    int retry_pending;         /* an engine_retry answer is on its way */
    int releasing;             /* the timer is closing; freed in its close callback */
    int inject;                /* send the deployment's own key, not the caller's (proxy_auth) */
    int observe;               /* agent.http.mode observe: forward at once, the acquire beside it */
    pshadow *shadow;           /* observe: that acquire, until this request's attempt ends */
    uv_timer_t timer;          /* the machine's timer: a backoff */

    /* The request, copied from the parse. */
    proxy_api api;
    proxy_op op;
    char name[CONFIG_NAME_MAX + 1];  /* the deployment or group */
    char model[PROXY_MODEL_MAX + 1]; /* as the request named it */
    int model_in_path;
    char api_version[64];
    char lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1], tag[CONFIG_NAME_MAX + 1];
    char client[CONFIG_NAME_MAX + 1]; /* the client key's name (agent.http.clients), "" when none */
    long long est_input, est_output;
    int split;
    int exact;               /* x-sluice-input-tokens: the input counted by the caller */
    int partial;             /* the estimate guessed images, audio or files: teaches nothing */
    long long verdict_pause; /* the attempt's verdict's pause (a body's retryDelay too), -1: none */
    long long max_wait_ms;
    int64_t started; /* sl_now_ms() */
    int stream, include_usage;
    json_t *body; /* the parsed body (our reference) */
    char *raw;    /* the body as sent */
    size_t raw_len;
    struct curl_slist *client_hdrs; /* the caller's headers that go upstream */

    /* The attempt. */
    engine_call *acq;
    char grant[ENGINE_GRANT_ID_MAX];
    char member[CONFIG_NAME_MAX + 1];
    long long waited_ms;
    int attempts; /* sent (the retries are the machine's) */
    CURL *easy;
    curlm_xfer xfer; /* easy's transfer on set->up */
    struct curl_slist *hdrs;
    char *sent; /* the body sent, when it differs from raw */
    char url[2048];

    /* Its response. */
    int status;
    pc_header rh[PCALL_MAX_HEADERS];
    size_t nrh;
    char *rbody;
    size_t rlen, rcap;
    int overflow;
    int streaming;   /* the client's stream has begun: no retry from here */
    int client_gone; /* found gone inside a libcurl callback */
    int want_pause, paused;
    usage_sse *sse;
    int strip_usage;    /* the usage was asked for on the client's behalf: its chunk is left out */
    sse_filter *filter; /* ... by this, when streaming */
};

static void shadow_end(pshadow *sh, engine_outcome outcome, const usage_rec *usage, long long pause,
                       const engine_seen *seen);

/* The monotonic clock of deadlines and backoffs: the machine's. */
static int64_t mono_ms(void) { return sl_now_ms(); }

/* ---- errors -------------------------------------------------------------------------- */

static const char json_ctype[] = "application/json";

void proxy_answer_error(proxy_stats *st, http_request *r, proxy_api api, proxy_error_kind kind, const char *message,
                        const char *param, const http_header *h, size_t nh) {
    resp_buf body;
    resp_buf_init(&body);
    st->errors[(unsigned)kind < PROXY_ERR_KINDS ? kind : PROXY_ERR_INTERNAL]++;
    if (proxy_error_body(api, kind, message, param, &body) != 0) {
        resp_buf_free(&body);
        http_respond(r, 500, NULL, 0, "text/plain", "out of memory\n", 14);
        return;
    }
    http_respond(r, proxy_error_status(kind), h, nh, json_ctype, body.data, body.len);
    resp_buf_free(&body);
}

/* ---- the end of a call ------------------------------------------------------------------ */

static void free_response(pcall *pc) {
    for (size_t i = 0; i < pc->nrh; i++) free(pc->rh[i].name);
    pc->nrh = 0;
    free(pc->rbody);
    pc->rbody = NULL;
    pc->rlen = pc->rcap = 0;
    pc->overflow = 0;
    pc->status = 0;
    usage_sse_free(pc->sse);
    pc->sse = NULL;
    sse_filter_free(pc->filter);
    pc->filter = NULL;
}

static void on_pcall_closed(uv_handle_t *h) {
    pcall *pc = h->data;
    free_response(pc);
    if (pc->easy) curl_easy_cleanup(pc->easy);
    curl_slist_free_all(pc->hdrs);
    curl_slist_free_all(pc->client_hdrs);
    free(pc->sent);
    free(pc->raw);
    json_decref(pc->body);
    free(pc);
}

/* Frees the call once nothing refers to it any more: the client's
 * request, a slot being waited for and a transfer are gone by now; an
 * answer from the retry budget may still be on its way. */
static void pcall_release(pcall *pc) {
    if (pc->retry_pending || pc->releasing) return;
    pc->releasing = 1;
    if (pc->shadow) { /* observe: nothing was sent (an error before the send) */
        shadow_end(pc->shadow, ENGINE_CANCELLED, NULL, -1, NULL);
        pc->shadow = NULL;
    }
    proxy_calls *set = pc->set;
    if (pc->prev) pc->prev->next = pc->next;
    else set->live = pc->next;
    if (pc->next) pc->next->prev = pc->prev;
    set->nlive--;
    set->st->live--;
    uv_timer_stop(&pc->timer);
    uv_close((uv_handle_t *)&pc->timer, on_pcall_closed);
}

/* The one place where a request's final outcome is known: answered (by
 * the provider's response, a shed or an error) or abandoned by its
 * client. answered says whether the client got an answer, within whether
 * that happened within the request's deadline (always, without one).
 * The patience figure counts here (engine_note_patience: requests
 * answered within their deadline over all requests, per deployment, lane
 * and tenant; the deployment that served, else the name asked for). */
static void pcall_finish(pcall *pc, int answered) {
    if (pc->finished) return;
    pc->finished = 1;
    pc->sm.state = SL_CALL_DONE;
    int within = gcall_sm_within(&pc->sm, mono_ms());
    if (!answered) {
        pc->set->st->abandoned++;
        engine_note_abandoned(pc->set->e, pc->member[0] ? pc->member : pc->name, pc->lane, pc->tenant,
                              mono_ms() - pc->started);
        return; /* as on the socket: a request its client gave up on is not counted */
    }
    engine_note_patience(pc->set->e, pc->member[0] ? pc->member : pc->name, pc->lane, pc->tenant, within);
}

/* ---- settling -------------------------------------------------------------------------- */

/* Settles the attempt's grant with outcome, the usage u (NULL: the
 * estimate stands) and the evidence of the response headers, as SETTLE
 * does: the pause they ask for (Retry-After; a reset at remaining 0 when
 * throttled or out of quota) and what they say of the limits. */

static void settle(pcall *pc, engine_outcome outcome, const usage_rec *u) {
    if (!pc->grant[0] && !pc->shadow) return;
    usage_rec usage = USAGE_REC_UNKNOWN;
    if (u && u->tokens >= 0) {
        usage.tokens = u->tokens;
        /* Split only when the parts add up, as libsluice's settle does. */
        if (u->input >= 0 && u->output >= 0 && u->tokens == u->input + u->output) {
            usage.input = u->input;
            usage.output = u->output;
            usage.cache_read = u->cache_read >= 0 && u->cache_read <= u->input ? u->cache_read : -1;
            usage.cache_write = u->cache_write >= 0 && u->cache_write <= u->input ? u->cache_write : -1;
        }
    }
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    long long wall = wall_clock_ms();
    for (size_t i = 0; i < pc->nrh; i++)
        ratelimit_add_header(&fb, pc->rh[i].name, strlen(pc->rh[i].name), pc->rh[i].value, strlen(pc->rh[i].value),
                             wall);
    long long pause =
        pc->nrh
            ? (long long)ratelimit_settle_pause_ms(&fb, outcome == ENGINE_THROTTLED || outcome == ENGINE_QUOTA, NULL)
            : -1;
    /* No header said how long: the body may (Gemini's RetryInfo). */
    if (pause < 0 && outcome == ENGINE_THROTTLED && pc->verdict_pause >= 0) pause = pc->verdict_pause;
    if (pause > SLUICE_PAUSE_MAX_MS) pause = SLUICE_PAUSE_MAX_MS;
    engine_seen seen;
    engine_seen_from_feedback(&fb, &seen);
    if (pc->shadow) { /* observe: the grant beside the request takes it, now or when it comes */
        pshadow *sh = pc->shadow;
        pc->shadow = NULL;
        shadow_end(sh, outcome, &usage, pause, pc->nrh ? &seen : NULL);
        return;
    }
    engine_settle_usage(pc->set->e, pc->grant, &usage, outcome, pause, pc->nrh ? &seen : NULL);
    pc->grant[0] = '\0';
}

/* ---- answers ------------------------------------------------------------------------------ */

/* What the proxy adds to an answer (docs/protocol.md, "HTTP proxy"): the
 * deployment that served, the wait for the slot, the attempts, and the
 * fleet's budget of that deployment per dimension: the limit in force and
 * the rate the fleet runs at (per minute). */
typedef struct sluice_headers {
    http_header h[16];
    size_t n;
    char store[16][40];
    const char *member;
} sluice_headers;

static void add_num(sluice_headers *s, const char *name, long long v) {
    if (s->n >= 16) return;
    snprintf(s->store[s->n], sizeof(s->store[s->n]), "%lld", v);
    s->h[s->n] = (http_header){name, s->store[s->n]};
    s->n++;
}

static void on_dim(void *ud, const char *deployment, const char *dim, const engine_dim_rates *r) {
    sluice_headers *s = ud;
    if (strcmp(deployment, s->member) != 0) return;
    static const struct {
        const char *dim, *limit, *effective;
    } names[] = {
        {"requests", "x-sluice-ratelimit-limit-requests", "x-sluice-ratelimit-effective-requests"},
        {"tokens", "x-sluice-ratelimit-limit-tokens", "x-sluice-ratelimit-effective-tokens"},
        {"input", "x-sluice-ratelimit-limit-input-tokens", "x-sluice-ratelimit-effective-input-tokens"},
        {"output", "x-sluice-ratelimit-limit-output-tokens", "x-sluice-ratelimit-effective-output-tokens"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(dim, names[i].dim) != 0) continue;
        add_num(s, names[i].limit, (long long)(r->limit + 0.5));
        add_num(s, names[i].effective, (long long)(r->effective + 0.5));
    }
}

static void sluice_headers_fill(const pcall *pc, sluice_headers *s) {
    s->n = 0;
    s->member = pc->member;
    if (pc->member[0]) {
        s->h[s->n++] = (http_header){"x-sluice-deployment", pc->member};
        add_num(s, "x-sluice-waited-ms", pc->waited_ms);
        add_num(s, "x-sluice-attempts", pc->attempts);
        engine_foreach_dim(pc->set->e, on_dim, s);
    }
}

/* Headers of the provider's answer that are the connection's, not the
 * response's, or that the server writes itself. */
static int hop_by_hop(const char *name) {
    static const char *const names[] = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade",
                                        "te",         "trailer",    "content-length",   "content-type"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(name, names[i])) return 1;
    return 0;
}

static const char *response_header(const pcall *pc, const char *name) {
    for (size_t i = pc->nrh; i-- > 0;)
        if (!strcasecmp(pc->rh[i].name, name)) return pc->rh[i].value;
    return NULL;
}

/* The provider's headers to pass on, then ours, into h (cap entries). */
static size_t answer_headers(const pcall *pc, sluice_headers *s, http_header *h, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < pc->nrh && n < cap; i++) {
        const char *name = pc->rh[i].name;
        if (hop_by_hop(name) || !strncasecmp(name, "x-sluice-", 9) || !http_token_ok(name, strlen(name))) continue;
        h[n++] = (http_header){name, pc->rh[i].value};
    }
    sluice_headers_fill(pc, s);
    for (size_t i = 0; i < s->n && n < cap; i++) h[n++] = s->h[i];
    return n;
}

/* Answers with the provider's buffered response. */
static void answer_upstream(pcall *pc) {
    http_header h[PCALL_MAX_HEADERS + 16];
    sluice_headers s;
    size_t nh = answer_headers(pc, &s, h, sizeof(h) / sizeof(h[0]));
    const char *ctype = response_header(pc, "content-type");
    if (ctype && strpbrk(ctype, "\r\n")) ctype = NULL;
    http_request *r = pc->r;
    pc->r = NULL;
    pc->set->st->answered++;
    if (http_respond(r, pc->status, h, nh, ctype, pc->rbody ? pc->rbody : "", pc->rlen) == SL_EINVAL)
        http_respond(r, 502, NULL, 0, json_ctype, "{}", 2); /* a status the server does not take */
    pcall_finish(pc, 1);
}

/* Answers with one of the proxy's own errors. */
static void answer_error(pcall *pc, proxy_error_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void answer_error(pcall *pc, proxy_error_kind kind, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sluice_headers s;
    sluice_headers_fill(pc, &s);
    http_request *r = pc->r;
    pc->r = NULL;
    proxy_answer_error(pc->set->st, r, pc->api, kind, msg, NULL, s.h, s.n);
    pcall_finish(pc, 1);
}

/* The 429 of a shed: Retry-After, retry-after-ms and the provider's shape. */
static void answer_shed(pcall *pc, const engine_shed *shed) {
    resp_buf body;
    resp_buf_init(&body);
    http_header h[4 + 16];
    proxy_retry_headers store;
    int budget = shed->budget != NULL;
    int n = budget ? proxy_budget_answer(pc->api, shed->budget, shed->period, shed->left_u, shed->currency,
                                         shed->retry_after_ms, &body, h, &store)
                   : proxy_shed_answer(pc->api, shed->reason, shed->retry_after_ms, &body, h, &store);
    /* The fleet's budget of the deployment asked for (a group has none of
     * its own), as on a granted answer: what the client was shed against. */
    sluice_headers sb;
    sb.n = 0;
    sb.member = pc->name;
    engine_foreach_dim(pc->set->e, on_dim, &sb);
    pc->set->st->shed++;
    if (n < 0) {
        resp_buf_free(&body);
        answer_error(pc, PROXY_ERR_INTERNAL, "out of memory");
        return;
    }
    h[n++] = (http_header){"x-sluice-shed", shed->reason ? shed->reason : "other"};
    /* A budget spent does not come back on a retry: the SDKs that honour
     * it (OpenAI's, Anthropic's) give up at once. One that waited for
     * requests in flight to settle may fit soon: no such header. */
    if (budget && !shed->budget_waited) h[n++] = (http_header){"x-should-retry", "false"};
    for (size_t i = 0; i < sb.n; i++) h[n++] = sb.h[i];
    http_request *r = pc->r;
    pc->r = NULL;
    http_respond(r, 429, h, (size_t)n, json_ctype, body.data, body.len);
    resp_buf_free(&body);
    pcall_finish(pc, 1);
}

/* ---- the upstream request -------------------------------------------------------------- */

/* The caller's request headers that are not forwarded: the connection's
 * own, those libcurl writes for the body it sends, Accept-Encoding (the
 * proxy reads the usage from the answer, so it asks for it unencoded),
 * and sluice's own x-sluice-*. */
static int not_forwarded(const char *name, const char *connection) {
    static const char *const names[] = {"host",
                                        "connection",
                                        "keep-alive",
                                        "proxy-connection",
                                        "te",
                                        "trailer",
                                        "upgrade",
                                        "transfer-encoding",
                                        "content-length",
                                        "expect",
                                        "accept-encoding",
                                        "proxy-authorization"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(name, names[i])) return 1;
    if (!strncasecmp(name, "x-sluice-", 9)) return 1;
    /* Names the Connection header lists are hop-by-hop too. */
    size_t nl = strlen(name);
    for (const char *p = connection; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        size_t k = strcspn(p, " \t,");
        if (k == nl && !strncasecmp(p, name, nl)) return 1;
        p += k;
    }
    return 0;
}

/* Copies the caller's forwardable headers as "Name: value" lines. */
static int copy_client_headers(pcall *pc, const http_msg *m) {
    const char *connection = http_msg_header(m, "connection");
    for (size_t i = 0; i < http_msg_nheaders(m); i++) {
        const char *name, *value;
        http_msg_header_at(m, i, &name, &value);
        if (not_forwarded(name, connection)) continue;
        if (pc->inject && proxy_auth_is_credential(name)) continue; /* a client key, or the caller's own */
        size_t n = strlen(name) + strlen(value) + 3;
        char *line = malloc(n);
        if (!line) return SL_ENOMEM;
        snprintf(line, n, "%s: %s", name, value);
        struct curl_slist *t = curl_slist_append(pc->client_hdrs, line);
        explicit_bzero(line, n);
        free(line);
        if (!t) return SL_ENOMEM;
        pc->client_hdrs = t;
    }
    return 0;
}

static int has_header(const struct curl_slist *l, const char *name) {
    size_t n = strlen(name);
    for (; l; l = l->next)
        if (!strncasecmp(l->data, name, n) && l->data[n] == ':') return 1;
    return 0;
}

/* THE place where the headers of a request to deployment d are built:
 * the caller's own (its credentials, Authorization, api-key or
 * x-api-key, and the provider's headers: anthropic-version,
 * anthropic-beta, openai-organization, ...) unchanged, plus what the
 * deployment's API needs and the caller left out (content-type, an
 * anthropic-version), and no 100-continue handshake. By default the
 * proxy holds no provider key: it grants nothing the caller did not
 * already have (docs/security.md). With inject_key (pc->inject) the
 * caller's credential headers were dropped (copy_client_headers) and the
 * deployment's key goes in the header its style uses. Returns the list
 * (the caller's), or NULL when out of memory or no key is loaded. */
static struct curl_slist *proxy_call_upstream_headers(const pcall *pc, const struct config_deployment *d) {
    struct curl_slist *l = NULL, *t;
    for (const struct curl_slist *c = pc->client_hdrs; c; c = c->next) {
        if (!(t = curl_slist_append(l, c->data))) goto oom;
        l = t;
    }
    if (!has_header(pc->client_hdrs, "content-type")) {
        if (!(t = curl_slist_append(l, "Content-Type: application/json"))) goto oom;
        l = t;
    }
    if (d->style == CONFIG_STYLE_ANTHROPIC && !has_header(pc->client_hdrs, "anthropic-version")) {
        char v[160];
        snprintf(v, sizeof(v), "anthropic-version: %s", endpoint_anthropic_version(d));
        if (!(t = curl_slist_append(l, v))) goto oom;
        l = t;
    }
    if (pc->inject) {
        char key[PCALL_KEY_LINE_MAX];
        int kn = proxy_auth_upstream_header(d, key, sizeof(key));
        t = kn > 0 ? curl_slist_append(l, key) : NULL; /* libcurl copies it */
        explicit_bzero(key, sizeof(key));
        if (!t) goto oom; /* no key loaded (a reload turned inject_key off): never send it bare */
        l = t;
    }
    if (!(t = curl_slist_append(l, "Expect:"))) goto oom;
    return t;
oom:
    curl_slist_free_all(l);
    return NULL;
}

/* The body for deployment d: the caller's bytes unchanged, unless (a) a
 * group's member is not the model the request named (its "model" becomes
 * the member's name; an Azure deployment route names it in the path
 * instead), or (b) an OpenAI-format stream that did not ask for its
 * usage goes to a deployment with stream_usage: inject (stream_options.
 * include_usage is added, so the usage can be settled; not for an Azure
 * api-version that predates it). Sets *len;
 * returns the body, NULL when out of memory. */
static const char *request_body(pcall *pc, const struct config_deployment *d, size_t *len) {
    int rename = !pc->model_in_path && d->style != CONFIG_STYLE_AZURE && strcmp(pc->model, d->name) != 0 &&
                 strcmp(pc->name, d->name) != 0;
    /* (An Azure api-version older than stream_options would refuse the
     * request: the request's own version, else the deployment's.) */
    const char *v = pc->model_in_path && pc->api_version[0] ? pc->api_version : d->api_version;
    int inject = pc->stream && !pc->include_usage && d->stream_usage == CONFIG_STREAM_USAGE_INJECT &&
                 d->style != CONFIG_STYLE_ANTHROPIC && (pc->op == PROXY_OP_CHAT || pc->op == PROXY_OP_COMPLETIONS) &&
                 (d->style != CONFIG_STYLE_AZURE || proxy_azure_stream_options(v));
    free(pc->sent);
    pc->sent = NULL;
    pc->strip_usage = inject;
    if (!rename && !inject) {
        *len = pc->raw_len;
        return pc->raw;
    }
    json_t *b = json_copy(pc->body); /* shallow: the members are shared, the object is ours */
    if (!b) return NULL;
    int bad = 0;
    if (rename) bad |= json_object_set_new(b, "model", json_string(d->name));
    if (inject) {
        json_t *so = json_object_get(b, "stream_options");
        json_t *nso = json_is_object(so) ? json_copy(so) : json_object();
        bad |= !nso || json_object_set_new(nso, "include_usage", json_true());
        bad |= json_object_set_new(b, "stream_options", nso);
    }
    pc->sent = bad ? NULL : json_dumps(b, JSON_COMPACT);
    json_decref(b);
    if (!pc->sent) return NULL;
    *len = strlen(pc->sent);
    return pc->sent;
}

/* ---- libcurl's callbacks ------------------------------------------------------------------ */

static void begin_stream(pcall *pc);

/* One header line of the answer. A status line starts a new response
 * (1xx and redirects are forgotten). The blank line ends the headers: a
 * 2xx event stream starts the client's stream there. */
static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    pcall *pc = ud;
    size_t n = size * nitems;
    if (pc->client_gone) return 0;
    int st;
    char *name, *value;
    switch (curl_header_line(line, n, &st, &name, &value)) {
    case CURL_LINE_STATUS:
        for (size_t i = 0; i < pc->nrh; i++) free(pc->rh[i].name);
        pc->nrh = 0;
        pc->status = st;
        return n;
    case CURL_LINE_FIELD:
        if (pc->nrh == PCALL_MAX_HEADERS) free(name);
        else pc->rh[pc->nrh++] = (pc_header){name, value};
        return n;
    default: break;
    }
    if (n <= 2 && (n == 0 || line[0] == '\r' || line[0] == '\n')) {
        if (pc->status >= 200 && pc->status < 300 && !pc->streaming) {
            const char *ct = response_header(pc, "content-type");
            if (ct && !strncasecmp(ct, "text/event-stream", 17)) begin_stream(pc);
        }
        return pc->client_gone ? 0 : n;
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    pcall *pc = ud;
    size_t n = size * nmemb;
    if (pc->client_gone) return 0;
    if (pc->streaming) {
        if (pc->want_pause) {
            /* The client's queue is over its bound: these bytes come again
             * once it is writable (CURLPAUSE_CONT). */
            pc->paused = 1;
            return CURL_WRITEFUNC_PAUSE;
        }
        if (pc->sse) usage_sse_feed(pc->sse, data, n);
        int rc = pc->filter ? sse_filter_feed(pc->filter, data, n) : http_stream_write(pc->r, data, n);
        if (rc < 0) {
            pc->client_gone = 1;
            return 0;
        }
        if (rc == 1) pc->want_pause = 1;
        return n;
    }
    if (n > PCALL_MAX_RESPONSE - pc->rlen) {
        pc->overflow = 1;
        return 0;
    }
    if (pc->rlen + n + 1 > pc->rcap) {
        size_t cap = pc->rcap ? pc->rcap : 4096;
        while (cap < pc->rlen + n + 1) cap *= 2;
        char *nb = realloc(pc->rbody, cap);
        if (!nb) {
            pc->overflow = 1;
            return 0;
        }
        pc->rbody = nb;
        pc->rcap = cap;
    }
    memcpy(pc->rbody + pc->rlen, data, n);
    pc->rlen += n;
    pc->rbody[pc->rlen] = '\0';
    return n;
}

/* The client read enough: the transfer goes on. */
static void on_writable(void *ud) {
    pcall *pc = ud;
    pc->want_pause = 0;
    if (pc->paused && pc->easy) {
        pc->paused = 0;
        curl_easy_pause(pc->easy, CURLPAUSE_CONT);
    }
}

/* What the usage filter passes goes to the client. */
static int filter_out(void *ud, const char *data, size_t len) {
    pcall *pc = ud;
    return http_stream_write(pc->r, data, len);
}

/* A 2xx event stream: the status and headers go to the client now, the
 * events as they come, whole events at a time (so that a stream cut
 * short ends with our error event, never inside one of the provider's),
 * less the usage chunk when the usage was asked for on the client's
 * behalf (sse_filter.h). */
static void begin_stream(pcall *pc) {
    pc->sse = usage_sse_new();
    if (pc->sse) {
        pc->filter = sse_filter_new(filter_out, pc);
        if (!pc->filter) {
            usage_sse_free(pc->sse);
            pc->sse = NULL;
        } else if (!pc->strip_usage) {
            sse_filter_set_strip(pc->filter, 0);
        }
    }
    if (!pc->sse) {
        pc->client_gone = 1; /* the transfer stops; the client gets a 502 */
        return;
    }
    http_header h[PCALL_MAX_HEADERS + 16];
    sluice_headers s;
    size_t nh = answer_headers(pc, &s, h, sizeof(h) / sizeof(h[0]));
    const char *ctype = response_header(pc, "content-type");
    if (ctype && strpbrk(ctype, "\r\n")) ctype = "text/event-stream";
    int rc = http_stream_begin(pc->r, pc->status, h, nh, ctype);
    if (rc == SL_EINVAL) rc = http_stream_begin(pc->r, pc->status, NULL, 0, "text/event-stream");
    pc->streaming = 1;
    pc->set->st->streamed++;
    if (rc != 0) {
        pc->client_gone = 1; /* gone, or its connection closed: the request is orphaned */
        return;
    }
    http_request_on_writable(pc->r, on_writable, pc);
}

/* ---- steps -------------------------------------------------------------------------------- */

static void on_transfer_done(void *arg, CURLcode cc);

/* The classes of engine_acquire_req's refusals and errors, answered. */
static void answer_engine_error(pcall *pc, int status, const char *msg) {
    switch (status) {
    case SL_EUNKNOWN:
        answer_error(pc, PROXY_ERR_MODEL_NOT_FOUND, "'%s' is no longer in sluice's configuration (removed by a reload)",
                     pc->name);
        break;
    case SL_EUNAVAIL:
    case SL_ECLOSING:
        answer_error(pc, PROXY_ERR_UNAVAILABLE, "sluice cannot grant a slot now: %s", msg ? msg : sl_strerror(status));
        break;
    default: answer_error(pc, PROXY_ERR_INTERNAL, "sluice: %s", msg ? msg : sl_strerror(status)); break;
    }
}

#define PCALL_OF(m) ((pcall *)(void *)((char *)(m)-offsetof(pcall, sm)))

static int step_send(gcall_sm *m) {
    pcall *pc = PCALL_OF(m);
    const config *cfg = engine_config(pc->set->e);
    const struct config_deployment *d = config_deployment(cfg, pc->member);
    if (!d || !d->endpoint[0]) {
        settle(pc, ENGINE_CANCELLED, NULL);
        answer_error(pc, PROXY_ERR_NO_ENDPOINT,
                     "deployment '%s' has no endpoint in sluice's configuration (deployments.%s.endpoint): sluice "
                     "cannot forward the request",
                     pc->member, pc->member);
        pcall_release(pc);
        return 0;
    }
    const char *v = pc->model_in_path && d->style == CONFIG_STYLE_AZURE ? pc->api_version : NULL;
    size_t blen = 0;
    const char *body = request_body(pc, d, &blen);
    curl_slist_free_all(pc->hdrs);
    pc->hdrs = body ? proxy_call_upstream_headers(pc, d) : NULL;
    if (!pc->easy) pc->easy = curl_easy_init();
    else curl_easy_reset(pc->easy);
    if (!pc->hdrs || !pc->easy || endpoint_url(d, proxy_op_name(pc->op), v, pc->url, sizeof(pc->url)) != 0) {
        settle(pc, ENGINE_CANCELLED, NULL);
        answer_error(pc, PROXY_ERR_INTERNAL, "sluice: out of memory, the URL of '%s' is too long%s", pc->member,
                     pc->inject ? ", or its key (inject_key) is no longer loaded" : "");
        pcall_release(pc);
        return 0;
    }
    const config_http *hc = &cfg->agent.http;
    pc->o.attempt_timeout_ms = hc->upstream_timeout_ms; /* as the configuration says now */
    long long limit = gcall_sm_attempt_ms(m, mono_ms());
    CURL *e = pc->easy;
    curl_easy_setopt(e, CURLOPT_URL, pc->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, pc->hdrs);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, pc);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, pc);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)limit);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)hc->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    free_response(pc);
    pc->want_pause = pc->paused = 0;
    int rc = curlm_add(pc->set->up, &pc->xfer, e, on_transfer_done, pc);
    if (rc != 0) {
        settle(pc, ENGINE_CANCELLED, NULL);
        answer_error(pc, PROXY_ERR_UNAVAILABLE, "sluice: cannot start the upstream transfer: %s", sl_strerror(rc));
        pcall_release(pc);
        return 0;
    }
    pc->attempts++;
    pc->set->st->forwarded++;
    if (pc->inject) pc->set->st->injected++;
    return 0;
}

static void on_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    pcall *pc = arg;
    pc->acq = NULL;
    if (status == SL_OK) {
        snprintf(pc->grant, sizeof(pc->grant), "%s", g->id);
        snprintf(pc->member, sizeof(pc->member), "%s", g->deployment);
        pc->waited_ms += g->waited_ms;
        gcall_sm_go(&pc->sm, SL_CALL_SENDING);
        return;
    }
    if (status == SL_ESHED) answer_shed(pc, shed);
    else answer_engine_error(pc, status, msg);
    pcall_release(pc);
}

/* ---- observe mode ------------------------------------------------------------------------- */

/* agent.http.mode: observe. A request goes upstream at once, once, to the
 * deployment it names (a group: its first member), as it would without
 * the proxy; beside it the same acquire runs on the engine, so the
 * shared schedule fills exactly as it would under governing, and what
 * that acquire answers is what governing would have done: a wait (the
 * slot lay ahead) or a shed. Its grant is settled with the request's
 * outcome and usage, whichever of the two ends last. */
struct pshadow {
    proxy_calls *set;
    pshadow *prev, *next;
    engine_call *acq; /* NULL once answered (or cancelled) */
    char grant[ENGINE_GRANT_ID_MAX];
    char name[CONFIG_NAME_MAX + 1], lane[CONFIG_NAME_MAX + 1], tenant[CONFIG_NAME_MAX + 1]; /* the request's */
    int answered;                                                                           /* the acquire answered */
    int ended; /* the request's attempt ended: its settle is below */
    engine_outcome outcome;
    usage_rec usage;
    long long pause;
    int have_seen;
    engine_seen seen;
};

static void shadow_free(pshadow *sh) {
    proxy_calls *set = sh->set;
    if (sh->prev) sh->prev->next = sh->next;
    else set->shadows = sh->next;
    if (sh->next) sh->next->prev = sh->prev;
    free(sh);
}

/* Both ended: the grant (if any) takes the request's settle. */
static void shadow_settle(pshadow *sh) {
    if (sh->grant[0])
        engine_settle_usage(sh->set->e, sh->grant, &sh->usage, sh->outcome, sh->pause,
                            sh->have_seen ? &sh->seen : NULL);
    shadow_free(sh);
}

static void shadow_end(pshadow *sh, engine_outcome outcome, const usage_rec *usage, long long pause,
                       const engine_seen *seen) {
    sh->ended = 1;
    sh->outcome = outcome;
    sh->usage = usage ? *usage : USAGE_REC_UNKNOWN;
    sh->pause = pause;
    sh->have_seen = seen != NULL;
    if (seen) sh->seen = *seen;
    if (sh->answered) shadow_settle(sh);
}

static void on_shadow_acquired(void *arg, int status, const engine_grant *g, const engine_shed *shed, const char *msg) {
    (void)msg;
    pshadow *sh = arg;
    proxy_stats *st = sh->set->st;
    sh->acq = NULL;
    sh->answered = 1;
    if (status == SL_OK) {
        snprintf(sh->grant, sizeof(sh->grant), "%s", g->id);
        engine_note_observed(sh->set->e, g->deployment, sh->lane, sh->tenant, g->waited_ms, 0);
        if (g->waited_ms > 0) {
            st->would_wait++;
            st->would_wait_ms += (unsigned long long)g->waited_ms;
            if ((unsigned long long)g->waited_ms > st->would_wait_max_ms)
                st->would_wait_max_ms = (unsigned long long)g->waited_ms;
        }
    } else if (status == SL_ESHED) {
        int i = engine_shed_reason_index(shed->reason);
        engine_note_observed(sh->set->e, sh->name, sh->lane, sh->tenant, 0, 1);
        st->would_shed++;
        if (i >= 0 && i < ENGINE_SHED_REASONS) st->would_shed_by_reason[i]++;
    } else st->observe_errors++;
    if (sh->ended) shadow_settle(sh);
}

static void observe_and_send(pcall *pc, const engine_req *rq) {
    proxy_calls *set = pc->set;
    const config *cfg = engine_config(set->e);
    config_target t;
    const struct config_deployment *d = NULL;
    if (config_model(cfg, pc->name, &t) == 0)
        d = t.deployment ? t.deployment : (t.group && t.group->nmembers ? t.group->members_[0] : NULL);
    if (!d) {
        answer_engine_error(pc, SL_EUNKNOWN, NULL);
        pcall_release(pc);
        return;
    }
    pshadow *sh = calloc(1, sizeof(*sh));
    set->st->observed++;
    if (sh) {
        sh->set = set;
        snprintf(sh->name, sizeof(sh->name), "%s", pc->name);
        snprintf(sh->lane, sizeof(sh->lane), "%s", pc->lane);
        snprintf(sh->tenant, sizeof(sh->tenant), "%s", pc->tenant);
        sh->next = set->shadows;
        if (set->shadows) set->shadows->prev = sh;
        set->shadows = sh;
        if (engine_acquire_req(set->e, rq, on_shadow_acquired, sh, &sh->acq) == 0) pc->shadow = sh;
        else {
            set->st->observe_errors++;
            shadow_free(sh);
        }
    } else set->st->observe_errors++;
    snprintf(pc->member, sizeof(pc->member), "%s", d->name);
    gcall_sm_go(&pc->sm, SL_CALL_SENDING);
}

static int step_acquire(gcall_sm *m) {
    pcall *pc = PCALL_OF(m);
    long long max_wait = pc->max_wait_ms;
    int64_t by;
    long long left;
    if (gcall_sm_slot_left(m, mono_ms(), &by, &left) != 0) {
        answer_error(pc, PROXY_ERR_GATEWAY_TIMEOUT,
                     "sluice: less than the %lld ms an attempt needs is left before the request's deadline "
                     "(x-sluice-deadline-ms); nothing was sent upstream",
                     pc->o.min_attempt_ms);
        pcall_release(pc);
        return 0;
    }
    if (left >= 0 && (max_wait < 0 || max_wait > left)) max_wait = left;
    engine_req rq = {.name = pc->name,
                     .tokens = pc->est_input + pc->est_output,
                     .max_wait_ms = max_wait,
                     .lane = pc->lane,
                     .tenant = pc->tenant,
                     .tag = pc->tag,
                     .split = pc->split,
                     .input = pc->split ? pc->est_input : -1,
                     .output = pc->split ? pc->est_output : -1,
                     .exact = pc->exact,
                     .partial = pc->partial,
                     .client = pc->client,
                     .caller = pc->caller};
    const char *why = engine_acquire_req_error(pc->set->e, &rq);
    if (why) {
        answer_error(pc, PROXY_ERR_BAD_REQUEST, "%s (deployment '%s')", why, pc->name);
        pcall_release(pc);
        return 0;
    }
    if (pc->observe) {
        observe_and_send(pc, &rq);
        return 0;
    }
    int rc = engine_acquire_req(pc->set->e, &rq, on_acquired, pc, &pc->acq);
    if (rc == 0) return 0;
    pc->acq = NULL;
    if (rc == SL_EINVAL)
        answer_error(pc, PROXY_ERR_BAD_REQUEST, "'%s' cannot serve this request (lane '%s', tag '%s')", pc->name,
                     pc->lane, pc->tag);
    else answer_engine_error(pc, rc, NULL);
    pcall_release(pc);
    return 0;
}

static void on_backoff_over(uv_timer_t *t) {
    pcall *pc = t->data;
    gcall_sm_wakeup(&pc->sm);
}

static void pcall_sleep(gcall_sm *m, int64_t due) {
    pcall *pc = PCALL_OF(m);
    if (due < 0) {
        uv_timer_stop(&pc->timer);
        return;
    }
    int64_t now = mono_ms();
    uv_timer_start(&pc->timer, on_backoff_over, (uint64_t)(due > now ? due - now : 0), 0);
}

static void on_retry_answer(void *arg, int status, int allowed, long long balance, long long retry_after_ms) {
    (void)balance, (void)retry_after_ms;
    pcall *pc = arg;
    pc->retry_pending = 0;
    if (pc->finished) { /* the client left meanwhile */
        pcall_release(pc);
        return;
    }
    if (status == SL_OK && allowed) {
        pc->set->st->retried++;
        gcall_sm_allowed(&pc->sm);
        return;
    }
    pc->set->st->retries_refused++;
    answer_upstream(pc);
    pcall_release(pc);
}

/* ASKING: the fleet's retry budget of the member that failed. */
static int step_ask(gcall_sm *m) {
    pcall *pc = PCALL_OF(m);
    pc->retry_pending = 1;
    int rc = engine_retry(pc->set->e, pc->member, on_retry_answer, pc);
    if (rc != 0) pc->retry_pending = 0;
    return rc;
}

/* The usage a stream reported so far, for its settle: 1 with *u filled,
 * 0 when none (the estimate stands). Anthropic's message_start counts
 * the input and the first output token only: a stream that ended before
 * its final usage (message_delta) was cut, left or failed with more
 * output generated than that, so its output is kept at the estimate's,
 * as a stream without any usage is. */
static int stream_usage(const pcall *pc, usage_rec *u) {
    if (!pc->sse || usage_sse_result(pc->sse, u) != 0) return 0;
    usage_sse_state ss;
    usage_sse_get_state(pc->sse, &ss);
    if (!ss.final_usage && u->output < pc->est_output) {
        u->output = pc->est_output;
        u->tokens = u->input + u->output;
    }
    return 1;
}

/* The settle of an attempt the client abandoned: a stream with the usage
 * it reported so far (none: the estimate stands); an answer under way
 * (the request went out) as cancelled, which keeps its charge (its slot
 * has begun) without feeding the breaker; nothing sent, cancelled too. */
static void settle_abandoned(pcall *pc) {
    usage_rec u;
    if (pc->streaming && stream_usage(pc, &u)) settle(pc, ENGINE_OK, &u);
    else if (pc->streaming) settle(pc, ENGINE_OK, NULL);
    else settle(pc, ENGINE_CANCELLED, NULL);
}

/* The end of a streamed answer: settled with the usage the stream
 * reported (none: the estimate stands, which is what Azure and OpenAI
 * charge anyway). An upstream cut short ends the client's stream with an
 * error event in the provider's shape. */
static void stream_done(pcall *pc, CURLcode cc) {
    usage_sse_state ss = {0};
    if (pc->sse) usage_sse_get_state(pc->sse, &ss);
    usage_rec u;
    int have = stream_usage(pc, &u);
    int ok = cc == CURLE_OK && !ss.error;
    /* A complete stream's last bytes go as they came; an event the
     * upstream cut short is left out, so the error event below is read
     * as one (appended to half an event, a client reads neither). */
    if (pc->filter && cc == CURLE_OK) sse_filter_flush(pc->filter);
    if (cc != CURLE_OK) {
        pc->set->st->upstream_errors++;
        if (cc == CURLE_OPERATION_TIMEDOUT) pc->set->st->upstream_timeouts++;
        resp_buf b;
        resp_buf_init(&b);
        char msg[256];
        snprintf(msg, sizeof(msg), "sluice: the upstream stream from '%s' ended early: %s", pc->member,
                 curl_easy_strerror(cc));
        if (resp_buf_append(&b, pc->api == PROXY_API_ANTHROPIC ? "event: error\ndata: " : "data: ",
                            pc->api == PROXY_API_ANTHROPIC ? 19 : 6) == 0 &&
            proxy_error_body(pc->api,
                             cc == CURLE_OPERATION_TIMEDOUT ? PROXY_ERR_GATEWAY_TIMEOUT : PROXY_ERR_BAD_GATEWAY, msg,
                             NULL, &b) == 0 &&
            resp_buf_append(&b, "\n\n", 2) == 0)
            http_stream_write(pc->r, b.data, b.len);
        resp_buf_free(&b);
    }
    settle(pc, ok ? ENGINE_OK : ENGINE_FAILED, have ? &u : NULL);
    http_request *r = pc->r;
    pc->r = NULL;
    pc->set->st->answered++;
    http_stream_end(r);
    pcall_finish(pc, 1);
    pcall_release(pc);
}

static void on_transfer_done(void *arg, CURLcode cc) {
    pcall *pc = arg;
    if (pc->client_gone) {
        /* Found gone inside a callback: r is orphaned, and finishing it
         * frees it. */
        settle_abandoned(pc);
        http_request *r = pc->r;
        pc->r = NULL;
        if (pc->streaming) http_stream_end(r);
        else http_respond(r, 502, NULL, 0, NULL, "", 0);
        pcall_finish(pc, 0);
        pcall_release(pc);
        return;
    }
    if (pc->streaming) {
        stream_done(pc, cc);
        return;
    }
    if (pc->overflow) {
        settle(pc, ENGINE_FAILED, NULL);
        answer_error(pc, PROXY_ERR_BAD_GATEWAY, "sluice: the answer of '%s' is larger than %d bytes", pc->member,
                     PCALL_MAX_RESPONSE);
        pcall_release(pc);
        return;
    }
    int status = cc == CURLE_OK ? pc->status : 0;
    sl_header hs[PCALL_MAX_HEADERS];
    for (size_t i = 0; i < pc->nrh; i++) hs[i] = (sl_header){pc->rh[i].name, pc->rh[i].value};
    sl_verdict v;
    verdict_compute(status, cc == CURLE_OPERATION_TIMEDOUT, pc->rbody, pc->rlen, hs, pc->nrh, -1, &v);
    pc->verdict_pause = v.pause_ms;
    if (v.cls != SL_CLASS_OK) {
        pc->set->st->upstream_errors++;
        if (cc == CURLE_OPERATION_TIMEDOUT) pc->set->st->upstream_timeouts++;
    }
    /* Settled, then retried when the machine finds another attempt fits
     * (agent.http.max_attempts as the configuration says now) and the
     * fleet's retry budget allows; observe mode never retries. */
    pc->o.max_attempts = engine_config(pc->set->e)->agent.http.max_attempts;
    if (gcall_sm_attempt_end(&pc->sm, &v, !pc->observe) == 1) return;
    if (status == 0) {
        answer_error(pc, cc == CURLE_OPERATION_TIMEDOUT ? PROXY_ERR_GATEWAY_TIMEOUT : PROXY_ERR_BAD_GATEWAY,
                     "sluice: no answer from '%s' after %d attempt%s: %s", pc->member, pc->attempts,
                     pc->attempts == 1 ? "" : "s", curl_easy_strerror(cc));
        pcall_release(pc);
        return;
    }
    answer_upstream(pc);
    pcall_release(pc);
}

/* The client left before its answer was complete. */
static void on_abandon(void *ud) {
    pcall *pc = ud;
    pc->r = NULL;
    gcall_sm_stop(&pc->sm);
    pcall_finish(pc, 0);
    pcall_release(pc);
}

/* The settle of a buffered attempt (gcall_sm_attempt_end): its usage,
 * with the cache writes the verdict does not carry for a budget's price
 * of them (lib/core/budget.h). It runs no hook: never a reason to stop. */
static int pcall_settle(gcall_sm *m, const sl_verdict *v) {
    pcall *pc = PCALL_OF(m);
    usage_rec u = {v->tokens, v->input_tokens, v->output_tokens, v->cache_read_tokens, -1};
    if (v->input_tokens >= 0 && engine_config(pc->set->e)->nbudgets) {
        usage_rec full;
        if (usage_split(pc->rbody, pc->rlen, &full) == 0) u.cache_write = full.cache_write;
    }
    settle(pc, (engine_outcome)v->outcome, v->tokens >= 0 ? &u : NULL);
    return 0;
}

/* ACQUIRING's stop: the reservation goes back. */
static void stop_acquire(gcall_sm *m) {
    pcall *pc = PCALL_OF(m);
    if (pc->acq) engine_cancel(pc->acq);
    pc->acq = NULL;
    pc->set->st->abandoned_waiting++;
}

/* SENDING's stop: the transfer ends, what it used is settled. */
static void stop_send(gcall_sm *m) {
    pcall *pc = PCALL_OF(m);
    curlm_remove(&pc->xfer);
    settle_abandoned(pc);
}

/* The proxy's row of each step. ASKING holds nothing: its answer is
 * dropped when it comes. */
static const gcall_steps pcall_steps = {
    .step =
        {
            [SL_CALL_ACQUIRING] = {step_acquire, stop_acquire},
            [SL_CALL_SENDING] = {step_send, stop_send},
            [SL_CALL_ASKING] = {step_ask, NULL},
        },
    .sleep = pcall_sleep,
    .settle = pcall_settle,
};

/* ---- start ---------------------------------------------------------------------------------- */

void proxy_call_start(proxy_calls *set, http_request *r, const proxy_request *pr, const proxy_auth *auth) {
    pcall *pc = calloc(1, sizeof(*pc));
    if (!pc) {
        proxy_answer_error(set->st, r, pr->route.api, PROXY_ERR_INTERNAL, "sluice: out of memory", NULL, NULL, 0);
        return;
    }
    pc->set = set;
    pc->r = r;
    /* Callers of the proxy apart from the socket's (server.c's ids). */
    pc->caller = http_request_conn_id(r) | (1ULL << 63);
    pc->api = pr->route.api;
    pc->op = pr->route.op;
    snprintf(pc->name, sizeof(pc->name), "%s", pr->name);
    snprintf(pc->model, sizeof(pc->model), "%s", pr->model);
    pc->model_in_path = pr->route.model_in_path;
    snprintf(pc->api_version, sizeof(pc->api_version), "%s", pr->route.api_version);
    memcpy(pc->lane, pr->lane, sizeof(pc->lane));
    memcpy(pc->tenant, pr->tenant, sizeof(pc->tenant));
    memcpy(pc->tag, pr->tag, sizeof(pc->tag));
    /* A client key binds its requests to the client's tenant and lane. */
    if (auth->client && auth->client->tenant[0]) snprintf(pc->tenant, sizeof(pc->tenant), "%s", auth->client->tenant);
    if (auth->client && auth->client->lane[0]) snprintf(pc->lane, sizeof(pc->lane), "%s", auth->client->lane);
    if (auth->client) snprintf(pc->client, sizeof(pc->client), "%s", auth->client->name);
    pc->inject = auth->inject;
    pc->observe = engine_config(set->e)->agent.http.mode == CONFIG_HTTP_OBSERVE;
    pc->est_input = pr->est.input;
    pc->est_output = pr->est.output;
    pc->split = pr->split;
    pc->exact = pr->exact;
    pc->partial = pr->est.media > 0;
    pc->verdict_pause = -1;
    pc->max_wait_ms = pr->max_wait_ms;
    pc->started = mono_ms();
    /* The proxy's policy on the machine: agent.http.max_attempts and
     * upstream_timeout_ms (read at each attempt), the backoff's
     * defaults (full jitter from 500 ms to 30 s, a server's wait as a
     * floor up to 2 minutes), an attempt's minimum, the deadline. */
    sl_call_opts_init(&pc->o);
    pc->o.deployment = pc->name;
    pc->o.retry_after_cap_ms = RETRY_AFTER_DEFAULT_CAP_MS;
    pc->o.min_attempt_ms = PCALL_MIN_ATTEMPT_MS;
    pc->o.deadline_ms = pr->deadline_ms >= 0 ? pc->started + pr->deadline_ms : 0;
    pc->stream = pr->stream;
    pc->include_usage = pr->include_usage;
    pc->body = json_incref(pr->body);
    gcall_sm_init(&pc->sm, &pcall_steps, &pc->o, (uint64_t)uv_hrtime() ^ (uint64_t)(uintptr_t)pc);
    const http_msg *m = http_request_msg(r);
    size_t len;
    const char *raw = http_msg_body(m, &len);
    pc->raw = malloc(len + 1);
    uv_timer_init(set->loop, &pc->timer);
    pc->timer.data = pc;
    pc->next = set->live;
    if (set->live) set->live->prev = pc;
    set->live = pc;
    set->nlive++;
    set->st->live++;
    set->st->by_api[pc->api]++;
    if (!pc->raw || copy_client_headers(pc, m) != 0) {
        answer_error(pc, PROXY_ERR_INTERNAL, "sluice: out of memory");
        pcall_release(pc);
        return;
    }
    memcpy(pc->raw, raw, len);
    pc->raw[len] = '\0';
    pc->raw_len = len;
    /* Refused before a slot is spent: a target that cannot be forwarded. */
    const config *cfg = engine_config(set->e);
    const struct config_group *g = pr->target.group;
    for (size_t i = 0; i < (g ? g->nmembers : 1); i++) {
        const struct config_deployment *d = g ? g->members_[i] : pr->target.deployment;
        if (d->endpoint[0]) continue;
        char in[24], out[24];
        snprintf(in, sizeof(in), "%lld", pr->est.input);
        snprintf(out, sizeof(out), "%lld", pr->est.output);
        http_header h[] = {
            {"x-sluice-target", pc->name},
            {"x-sluice-estimate-input", in},
            {"x-sluice-estimate-output", out},
            {"x-sluice-stream", pc->stream ? (pc->include_usage ? "usage" : "yes") : "no"},
        };
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "sluice's HTTP proxy recognised this request (%s %s, %s '%s', estimate %lld input + %lld output "
                 "tokens%s) but deployment '%s' has no endpoint in %s (deployments.%s.endpoint): nothing was sent "
                 "upstream",
                 proxy_api_name(pc->api), proxy_op_name(pc->op), g ? "group" : "deployment", pc->name, pr->est.input,
                 pr->est.output, pc->stream ? ", streamed" : "", d->name, cfg->source, d->name);
        http_request *rr = pc->r;
        pc->r = NULL;
        proxy_answer_error(set->st, rr, pc->api, PROXY_ERR_NO_ENDPOINT, msg, NULL, h, sizeof(h) / sizeof(h[0]));
        pcall_finish(pc, 1);
        pcall_release(pc);
        return;
    }
    http_request_on_abandon(r, on_abandon, pc);
    gcall_sm_go(&pc->sm, SL_CALL_ACQUIRING);
}

/* ---- the set ---------------------------------------------------------------------------------- */

int proxy_calls_new(uv_loop_t *loop, engine *e, proxy_stats *st, proxy_calls **out) {
    *out = NULL;
    proxy_calls *set = calloc(1, sizeof(*set));
    if (!set) return SL_ENOMEM;
    set->loop = loop;
    set->e = e;
    set->st = st;
    int rc = curlm_new_uv(loop, &set->up);
    if (rc != 0) {
        free(set);
        return rc;
    }
    *out = set;
    return 0;
}

size_t proxy_calls_live(const proxy_calls *set) { return set ? set->nlive : 0; }

void proxy_calls_close(proxy_calls *set) {
    if (!set || set->closed) return;
    set->closed = 1;
    /* After the drain every client is gone: what still runs holds a
     * transfer or waits; it ends here. */
    for (pcall *pc = set->live, *next; pc; pc = next) {
        next = pc->next;
        if (pc->releasing) continue;
        if (pc->r) {
            http_request_on_abandon(pc->r, NULL, NULL);
            on_abandon(pc); /* answered nothing: the request is the server's to free */
        } else {
            pc->retry_pending = 0;
            pcall_release(pc);
        }
    }
    /* Observe: the acquires still beside requests go back. */
    while (set->shadows) {
        pshadow *sh = set->shadows;
        if (sh->acq) engine_cancel(sh->acq);
        else if (sh->grant[0]) engine_settle_usage(set->e, sh->grant, &USAGE_REC_UNKNOWN, ENGINE_CANCELLED, -1, NULL);
        shadow_free(sh);
    }
    curlm_free(set->up);
    set->up = NULL;
}

void proxy_calls_free(proxy_calls *set) {
    if (!set) return;
    curlm_free(set->up);
    free(set);
}
