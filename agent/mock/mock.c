#define _POSIX_C_SOURCE 200809L
#include "mock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_internal.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

/* ---- randomness: xoshiro256**, seeded by splitmix64 -------------------- */

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        s[i] = z ^ (z >> 31);
    }
}

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [lo, hi]; the modulo bias is below 2^-40 for our ranges. */
uint64_t mock_rng_range(uint64_t s[4], uint64_t lo, uint64_t hi) {
    return hi <= lo ? lo : lo + rng_next(s) % (hi - lo + 1);
}

double mock_rng_unit(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* ---- formatting helpers ----------------------------------------------- */

/* A duration the way Go's time.Duration prints it ("250ms", "1s", "1.5s",
 * "1m0s"), which is what OpenAI's x-ratelimit-reset-* headers use. */
void mock_fmt_duration(char *out, size_t n, uint64_t ms) {
    unsigned long long h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
    int k = 0, digits = 3;
    if (ms < 1000) {
        if (ms == 0) snprintf(out, n, "0s");
        else snprintf(out, n, "%llums", (unsigned long long)ms);
        return;
    }
    if (h) k = snprintf(out, n, "%lluh%llum", h, m);
    else if (m) k = snprintf(out, n, "%llum", m);
    if (k < 0 || (size_t)k >= n) return;
    if (frac == 0) {
        snprintf(out + k, n - (size_t)k, "%llus", s);
        return;
    }
    while (frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    snprintf(out + k, n - (size_t)k, "%llu.%0*llus", s, digits, frac);
}

void mock_call_header(mock_call *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->headers + c->hlen, sizeof(c->headers) - c->hlen, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof(c->headers) - c->hlen) c->hlen += (size_t)n;
}

uint64_t mock_ceil_ms(double ms) { return ms <= 0 ? 0 : (uint64_t)ceil(ms - 1e-9); }

/* ---- deployments ------------------------------------------------------ */

int mock_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MOCK_NAME_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == '.'))
            return 0;
    return 1;
}

double mock_capacity(const mock *m, mock_dim dim, double per_min) {
    return m->burst_set[dim] > 0 ? m->burst_set[dim] : fmax(1, floor(per_min / 6));
}

/* Full buckets at now_ms with the limits d already has. */
static void dep_fill(const mock *m, mock_deployment *d, double now_ms) {
    for (int k = 0; k < MOCK_DIMS; k++)
        if (d->per_min[k] > 0)
            mock_bucket_init(&d->b[k], mock_capacity(m, (mock_dim)k, d->per_min[k]), d->per_min[k] / 60000.0, now_ms);
}

/* A new deployment with the current default limits. */
static mock_deployment *dep_new(const mock *m, double now_ms) {
    mock_deployment *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    memcpy(d->per_min, m->per_min, sizeof(d->per_min));
    dep_fill(m, d, now_ms);
    return d;
}

mock_deployment *mock_dep_get(mock *m, const char *name, double now_ms) {
    mock_deployment *d = mock_map_get(&m->deps, name);
    if (d || m->opt.n_deployments > 0 || m->deps.count >= MOCK_MAX_DEPLOYMENTS) return d;
    if (!(d = dep_new(m, now_ms))) return NULL;
    if (mock_map_put(&m->deps, name, d) != 0) {
        free(d);
        return NULL;
    }
    return d;
}

void mock_dep_refill(mock_deployment *d, double now_ms) {
    for (int k = 0; k < MOCK_DIMS; k++)
        if (d->per_min[k] > 0) mock_bucket_refill(&d->b[k], now_ms);
}

double mock_dep_admit(mock_deployment *d, const double cost[MOCK_DIMS], mock_dim *longest) {
    double wait = 0;
    *longest = MOCK_REQUESTS;
    for (int k = 0; k < MOCK_DIMS; k++) {
        if (d->per_min[k] <= 0 || cost[k] < 0) continue;
        double w = mock_bucket_wait_ms(&d->b[k], cost[k]);
        if (w > wait) {
            wait = w;
            *longest = (mock_dim)k;
        }
    }
    if (wait > 0) return wait;
    for (int k = 0; k < MOCK_DIMS; k++)
        if (d->per_min[k] > 0 && cost[k] >= 0) mock_bucket_take(&d->b[k], cost[k]);
    return 0;
}

void mock_dep_set_limit(const mock *m, mock_deployment *d, mock_dim dim, double per_min, double now_ms) {
    if (per_min <= 0) {
        d->per_min[dim] = 0;
        return;
    }
    double cap = mock_capacity(m, dim, per_min);
    if (d->per_min[dim] > 0) mock_bucket_set(&d->b[dim], cap, per_min / 60000.0, now_ms);
    else mock_bucket_init(&d->b[dim], cap, per_min / 60000.0, now_ms);
    d->per_min[dim] = per_min;
}

int mock_call_resolve(mock_call *c, const char *name, char *buf, size_t n) {
    if (!mock_name_ok(name)) return -1;
    snprintf(buf, n, "%s", name);
    c->dep = mock_dep_get(c->m, buf, c->now_ms);
    if (!c->dep) return -2;
    c->deployment = buf;
    mock_dep_refill(c->dep, c->now_ms);
    return 0;
}

void mock_fmt_rfc3339(char *out, size_t n, double unix_ms) {
    long long ms = (long long)ceil(unix_ms - 1e-6);
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) {
        snprintf(out, n, "1970-01-01T00:00:00.000Z");
        return;
    }
    snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

uint64_t mock_draw_output(mock *m, uint64_t max_tokens) {
    uint64_t lo = m->opt.completion_tokens, hi = m->opt.completion_tokens_max;
    if (lo) {
        uint64_t n = hi > lo ? mock_rng_range(m->rng, lo, hi) : lo;
        return n < max_tokens ? n : max_tokens;
    }
    return mock_rng_range(m->rng, 1, max_tokens);
}

uint64_t mock_retry_after_s(uint64_t ms) {
    uint64_t s = (ms + 999) / 1000;
    return s < 1 ? 1 : s;
}

/* ---- responses -------------------------------------------------------- */

static const char *outcome_name(mock_outcome o) {
    static const char *names[] = {"accepted", "429",   "429-quota",  "503",         "400",
                                  "404",      "error", "400-credit", "429-injected"};
    return names[o];
}

/* Counts the call in the ledger, logs it and adds the request id. An
 * accepted call gets a mock_pending as its request's udata, so the ledger
 * hears when it is abandoned. Returns -1 when that cannot be allocated
 * (the call is counted all the same). */
static int call_record(mock_call *c, int status, mock_outcome o, const mock_charge *ch, const mock_events *e) {
    mock *m = c->m;
    mock_ledger_ref ref;
    /* The ledger lists each accept under the id its answer carries. */
    mock_charge rec = {0};
    if (ch) rec = *ch;
    rec.id = m->next_id + 1;
    mock_ledger_record(m->ledger, c->deployment, c->client, o, c->now_ms, &rec, &ref);
    mock_ledger_credential(m->ledger, c->credential, o, c->now_ms, &rec, &ref);
    if (m->opt.log)
        fprintf(m->opt.log, "%.3f %s %s %s %d %s\n", c->now_ms, c->client, c->deployment ? c->deployment : "-",
                mock_http_path(c->req), status, outcome_name(o));
    ++m->next_id;
    if (c->style == MOCK_ANTHROPIC)
        mock_call_header(c, "request-id: req_mock_%llu\r\n", (unsigned long long)m->next_id);
    else mock_call_header(c, "x-request-id: mock-%llu\r\n", (unsigned long long)m->next_id);
    if (o != MOCK_ACCEPTED) return 0;
    mock_pending *p = calloc(1, sizeof(*p));
    if (!p) return -1;
    p->m = m;
    p->ref = ref;
    p->id = rec.id;
    p->dep = c->dep;
    p->settle = c->settle;
    if (e) {
        p->nevents = e->n;
        memcpy(p->generated, e->generated, sizeof(p->generated));
    }
    mock_http_set_udata(c->req, p);
    return 0;
}

static void call_oom(mock_call *c) {
    static const char oom[] = "{\"error\":{\"code\":\"500\",\"message\":\"out of memory\"}}";
    mock_http_respond(c->req, 500, c->headers, oom, sizeof(oom) - 1, 0);
}

/* Sends body (a JSON value, consumed) with status, counts the call in the
 * ledger and logs it. */
void mock_call_finish(mock_call *c, int status, mock_outcome o, json_t *body, const mock_charge *ch,
                      uint64_t delay_ms) {
    char *text = body ? json_dumps(body, MOCK_JSON_FLAGS) : NULL;
    json_decref(body);
    if (call_record(c, status, o, ch, NULL) != 0) {
        free(text);
        text = NULL;
    }
    if (!text) {
        call_oom(c);
        return;
    }
    mock_http_respond(c->req, status, c->headers, text, strlen(text), delay_ms);
    free(text);
}

void mock_call_finish_stream(mock_call *c, mock_events *e, const mock_charge *ch, uint64_t start_ms,
                             uint64_t service_ms) {
    mock_http_piece pieces[MOCK_STREAM_MAX_EVENTS];
    if (call_record(c, 200, MOCK_ACCEPTED, ch, e) != 0 || e->oom || e->n == 0) {
        mock_events_free(e);
        call_oom(c);
        return;
    }
    /* The first event goes out with the headers; the last one when the
     * service time is over, as the non-streamed answer would. */
    for (size_t i = 0; i < e->n; i++)
        pieces[i] = (mock_http_piece){e->text[i], e->len[i], start_ms + (e->n > 1 ? service_ms * i / (e->n - 1) : 0)};
    mock_http_respond_stream(c->req, 200, c->headers, "text/event-stream", pieces, e->n);
    mock_events_free(e);
}

void mock_events_add(mock_events *e, const char *name, json_t *data, const char *raw, uint32_t generated) {
    char *json = data ? json_dumps(data, MOCK_JSON_FLAGS) : NULL;
    json_decref(data);
    if (!raw) raw = json;
    if (!raw || e->n == MOCK_STREAM_MAX_EVENTS) {
        e->oom = 1;
        free(json);
        return;
    }
    size_t n = strlen(raw) + (name ? strlen(name) + 8 : 0) + 9;
    char *t = malloc(n);
    if (!t) {
        e->oom = 1;
        free(json);
        return;
    }
    int len = name ? snprintf(t, n, "event: %s\ndata: %s\n\n", name, raw) : snprintf(t, n, "data: %s\n\n", raw);
    free(json);
    e->text[e->n] = t;
    e->len[e->n] = (size_t)len;
    e->generated[e->n] = generated;
    e->n++;
}

void mock_events_free(mock_events *e) {
    for (size_t i = 0; i < e->n; i++) free(e->text[i]);
    e->n = 0;
}

char *mock_words(uint64_t from, uint64_t count) {
    static const char *words[] = {"The", "mock", "says", "ok", "and", "counts", "every", "token", "it", "sees"};
    const size_t nw = sizeof(words) / sizeof(words[0]);
    if (from >= MOCK_TEXT_WORDS) count = 0;
    else if (count > MOCK_TEXT_WORDS - from) count = MOCK_TEXT_WORDS - from;
    char *text = malloc((size_t)count * 8 + 1);
    size_t len = 0;
    if (!text) return NULL;
    for (uint64_t i = from; i < from + count; i++) {
        const char *w = words[i % nw];
        if (i) text[len++] = ' ';
        memcpy(text + len, w, strlen(w));
        len += strlen(w);
    }
    text[len] = '\0';
    return text;
}

void mock_stream_split(uint64_t tokens, uint64_t cum[MOCK_STREAM_DELTAS], size_t *n) {
    size_t k = tokens < MOCK_STREAM_DELTAS ? (size_t)tokens : MOCK_STREAM_DELTAS;
    for (size_t i = 0; i < k; i++) cum[i] = tokens * (i + 1) / k;
    *n = k;
}

json_t *mock_azure_error(const char *code, const char *message) {
    return json_pack("{s{ssss}}", "error", "code", code, "message", message);
}

json_t *mock_openai_error(const char *message, const char *type, const char *param, const char *code) {
    return json_pack("{s{sssssoso}}", "error", "message", message, "type", type, "param",
                     param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
}

void mock_call_not_found(mock_call *c, json_t *body) { mock_call_finish(c, 404, MOCK_NOT_FOUND, body, NULL, 0); }

static int query_has(const char *q, const char *kv) {
    size_t n = strlen(kv);
    for (const char *p = q; (p = strstr(p, kv)) != NULL; p += n)
        if ((p == q || p[-1] == '&') && (p[n] == '\0' || p[n] == '&')) return 1;
    return 0;
}

static void route_stats(mock_call *c, const char *name) {
    mock *m = c->m;
    const char *q = mock_http_query(c->req);
    int reset_all = query_has(q, "reset=all"), reset = reset_all || query_has(q, "reset=1");
    json_t *stats = mock_stats(m);
    char *text = stats ? json_dumps(stats, MOCK_JSON_FLAGS) : NULL;
    json_decref(stats);
    (void)name;
    if (reset && text) mock_reset(m, reset_all);
    if (!text) {
        static const char oom[] = "{\"error\":{\"code\":\"500\",\"message\":\"out of memory\"}}";
        mock_http_respond(c->req, 500, NULL, oom, sizeof(oom) - 1, 0);
        return;
    }
    mock_http_respond(c->req, 200, "Cache-Control: no-store\r\n", text, strlen(text), 0);
    free(text);
}

/* A route matches a path equal to prefix, or, with a suffix, any
 * prefix<name>suffix where <name> has no '/'. Methods are checked after the
 * path, so a known path with the wrong method is a 405, not a 404. */
typedef struct mock_route {
    const char *method;
    const char *prefix;
    const char *suffix;
    void (*handler)(mock_call *c, const char *name);
} mock_route;

static const mock_route mock_routes[] = {
    {"POST", "/openai/deployments/", "/chat/completions", mock_route_azure},
    {"POST", "/v1/chat/completions", NULL, mock_route_openai},
    {"POST", "/openai/v1/chat/completions", NULL, mock_route_openai},
    {"POST", "/openai/deployments/", "/embeddings", mock_route_azure_embeddings},
    {"POST", "/v1/embeddings", NULL, mock_route_openai_embeddings},
    {"POST", "/openai/v1/embeddings", NULL, mock_route_openai_embeddings},
    {"POST", "/openai/deployments/", "/responses", mock_route_azure_responses},
    {"POST", "/openai/responses", NULL, mock_route_azure_responses_v},
    {"POST", "/v1/responses", NULL, mock_route_openai_responses},
    {"POST", "/openai/v1/responses", NULL, mock_route_openai_responses},
    {"POST", "/v1/messages", NULL, mock_route_anthropic},
    /* Not provider traffic: never counted in the ledger. */
    {"GET", "/stats", NULL, route_stats},
    {"POST", "/control", NULL, mock_route_control},
};

/* Matches path against r; the name of a parameterised route goes to name. */
static int route_match(const mock_route *r, const char *path, char *name, size_t n) {
    size_t pl = strlen(r->prefix);
    if (!r->suffix) return strcmp(path, r->prefix) == 0;
    size_t len = strlen(path), sl = strlen(r->suffix);
    if (len <= pl + sl || strncmp(path, r->prefix, pl) != 0 || strcmp(path + len - sl, r->suffix)) return 0;
    size_t nl = len - pl - sl;
    if (memchr(path + pl, '/', nl) || nl >= n) return 0;
    memcpy(name, path + pl, nl);
    name[nl] = '\0';
    return 1;
}

/* The client a request is counted under: x-client-id (printable ASCII,
 * at most MOCK_CLIENT_MAX bytes, anything else replaced by '_'), else the
 * peer's address. */
static void client_id(const mock_http_req *req, char *out, size_t n) {
    const char *id = mock_http_header(req, "x-client-id");
    size_t i = 0;
    if (!id || !*id) id = mock_http_peer(req);
    for (; id[i] && i + 1 < n; i++) out[i] = (id[i] > 0x20 && id[i] < 0x7f) ? id[i] : '_';
    out[i] = '\0';
}

void mock_credential_fingerprint(const mock_http_req *req, char *out, size_t n) {
    static const char *const names[] = {"authorization", "api-key", "x-api-key"};
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = mock_http_header(req, names[i]);
        char tail[5] = {0};
        if (!v) continue;
        size_t vl = strlen(v);
        if (vl >= 12) {
            for (size_t k = 0; k < 4; k++) {
                unsigned char ch = (unsigned char)v[vl - 4 + k];
                tail[k] = (ch > 0x20 && ch < 0x7f) ? (char)ch : '_';
            }
            tail[4] = '\0';
        }
        int w = snprintf(out + len, n - len, "%s%s:%s", len ? " " : "", names[i], vl >= 12 ? tail : "short");
        if (w < 0 || (size_t)w >= n - len) break;
        len += (size_t)w;
    }
    if (!len) snprintf(out, n, "%s", MOCK_NO_CREDENTIAL);
}

static void mock_on_request(mock_http_req *req, void *arg) {
    mock *m = arg;
    mock_call c = {.m = m, .req = req, .now_ms = mock_now_ms(m), .style = MOCK_AZURE};
    char client[MOCK_CLIENT_MAX + 1], name[MOCK_NAME_MAX + 2], credential[MOCK_CREDENTIAL_MAX + 1];
    const char *reason;
    client_id(req, client, sizeof(client));
    c.client = client;
    mock_credential_fingerprint(req, credential, sizeof(credential));
    c.credential = credential;
    int status = mock_http_error_status(req, &reason);
    if (status) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s: %s", status == 413 ? "request too large" : "malformed HTTP request", reason);
        mock_call_finish(&c, status, status == 400 ? MOCK_BAD_REQUEST : MOCK_OTHER_ERROR,
                         mock_openai_error(msg, "invalid_request_error", NULL, NULL), NULL, 0);
        return;
    }
    const char *path = mock_http_path(req), *method = mock_http_method(req);
    for (size_t i = 0; i < sizeof(mock_routes) / sizeof(mock_routes[0]); i++) {
        const mock_route *r = &mock_routes[i];
        if (!route_match(r, path, name, sizeof(name))) continue;
        if (strcmp(method, r->method) != 0) {
            char allow[64];
            snprintf(allow, sizeof(allow), "Allow: %s\r\n", r->method);
            mock_call_header(&c, "%s", allow);
            mock_call_finish(&c, 405, MOCK_OTHER_ERROR, mock_azure_error("405", "Method not allowed"), NULL, 0);
            return;
        }
        r->handler(&c, name);
        return;
    }
    mock_call_not_found(&c, mock_azure_error("404", "Resource not found"));
}

/* The end of an accepted Anthropic call: the output bucket gets back what
 * was charged and not generated, now, and the ledger lists it. */
/* A signed correction of bucket dim at the end of a call: adj more taken
 * (into debt if need be) or given back, listed in the ledger as kind. */
static void settle_correct(mock_pending *p, mock_dim dim, mock_adjust kind, int64_t adj) {
    if (adj == 0) return;
    double now = mock_now_ms(p->m);
    mock_bucket *b = &p->dep->b[dim];
    if (p->dep->per_min[dim] > 0) {
        mock_bucket_refill(b, now);
        if (adj > 0) mock_bucket_take(b, (double)adj);
        else mock_bucket_give(b, (double)-adj);
    }
    mock_ledger_adjust(p->m->ledger, &p->ref, kind, now, adj, p->id);
}

static void pending_settle(mock_pending *p, uint64_t generated) {
    mock *m = p->m;
    if ((!p->settle.tokens && !p->settle.output) || p->settled) return;
    p->settled = 1;
    if (p->settle.tokens) {
        /* Bedrock: the token bucket held max_tokens for the output; the
         * call costs generated x burndown. */
        settle_correct(p, MOCK_TOKENS, MOCK_ADJUST_TOKENS,
                       (int64_t)llround((double)generated * p->settle.burndown) - (int64_t)p->settle.max_tokens);
        return;
    }
    if (p->settle.generated) {
        /* Anthropic's current rule: the output bucket took
         * MOCK_OTPM_ADMISSION at admission and is charged what was
         * generated. */
        settle_correct(p, MOCK_OUTPUT, MOCK_ADJUST_OUTPUT, (int64_t)generated - MOCK_OTPM_ADMISSION);
        return;
    }
    if (generated >= p->settle.max_tokens) return;
    uint64_t back = p->settle.max_tokens - generated;
    double now = mock_now_ms(m);
    mock_bucket *b = &p->dep->b[MOCK_OUTPUT];
    if (p->dep->per_min[MOCK_OUTPUT] > 0) {
        mock_bucket_refill(b, now);
        mock_bucket_give(b, (double)back);
    }
    mock_ledger_refund(m->ledger, &p->ref, now, back, p->id);
}

/* The whole answer is due: generated in full. */
static void mock_on_ready(void *udata, void *arg) {
    mock_pending *p = udata;
    (void)arg;
    pending_settle(p, p->settle.output_tokens);
}

/* A stream cut short generated what its events sent so far said; a plain
 * answer is generated whole (the provider notices the client only when it
 * writes), so it settles as if delivered, at the moment the client left. */
static void mock_on_done(void *udata, int delivered, size_t released, void *arg) {
    mock_pending *p = udata;
    (void)arg;
    if (!delivered) mock_ledger_abandoned(p->m->ledger, &p->ref);
    if (p->nevents == 0) pending_settle(p, p->settle.output_tokens);
    else pending_settle(p, released ? p->generated[released - 1] : 0);
    free(p);
}

/* ---- the noisy neighbour ---------------------------------------------- */

/* Every neighbour request costs 1 request and neighbour_tokens on each
 * token bucket the deployment has, never given back. Greedy, it stops at
 * a deployment's first refusal. Returns the most any deployment took. */
static uint64_t neighbour_send(mock *m, uint64_t count, int greedy) {
    uint64_t most = 0;
    double now = mock_now_ms(m);
    uint64_t n = m->opt.neighbour_tokens;
    const double cost[MOCK_DIMS] = {1, (double)n, (double)n, (double)n};
    const mock_charge ch = {.tokens = n, .input = n, .output = n, .charged = n, .reported = n};
    for (mock_map_entry *e = m->deps.first; e; e = e->next) {
        mock_deployment *d = e->value;
        mock_dep_refill(d, now);
        uint64_t took = 0;
        for (uint64_t i = 0; i < count; i++) {
            mock_dim longest;
            double wait = mock_dep_admit(d, cost, &longest);
            mock_ledger_record(m->ledger, e->key, MOCK_NEIGHBOUR, wait > 0 ? MOCK_RATE_LIMITED : MOCK_ACCEPTED, now,
                               &ch, NULL);
            if (wait > 0 && greedy) break;
            if (wait <= 0) took++;
        }
        if (took > most) most = took;
    }
    return most;
}

#define MOCK_GREEDY_TICK_MS 100

static void neighbour_tick(uv_timer_t *t) {
    mock *m = t->data;
    if (m->opt.neighbour_greedy) {
        double now = mock_now_ms(m);
        /* What was refused stays owed, up to 10 s of its rate: a client's
         * queue, not a debt that grows for as long as it is refused. */
        m->greedy_allow += (now - m->greedy_last_ms) * m->opt.neighbour_rpm / 60000.0;
        m->greedy_allow = fmin(m->greedy_allow, fmax(1.0, m->opt.neighbour_rpm / 6));
        m->greedy_last_ms = now;
        if (m->greedy_allow >= 1) m->greedy_allow -= (double)neighbour_send(m, (uint64_t)m->greedy_allow, 1);
        uv_timer_start(&m->neighbour, neighbour_tick, MOCK_GREEDY_TICK_MS, 0);
        return;
    }
    double interval = 60000.0 / m->opt.neighbour_rpm;
    neighbour_send(m, 1, 0);
    /* Due times advance by the exact interval, so the long-run rate is exact
     * even when the timer fires late. */
    m->neighbour_due_ms += interval;
    double delay = m->neighbour_due_ms - mock_now_ms(m);
    uv_timer_start(&m->neighbour, neighbour_tick, delay > 0 ? mock_ceil_ms(delay) : 0, 0);
}

/* ---- public API ------------------------------------------------------- */

void mock_options_init(mock_options *o) {
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8089;
    o->rpm = 60;
    o->service_ms_min = 300;
    o->service_ms_max = 900;
    o->seed = 1;
    o->max_body = 1 << 20;
    o->tokens_per_char = 0.25;
    o->cjk_tokens_per_char = 1;
}

static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return UV_EINVAL;
}

static int options_check(const mock_options *o, char *err, size_t n) {
    if (!o->host || !*o->host) return fail(err, n, "host must not be empty");
    if (o->port < 0 || o->port > 65535) return fail(err, n, "port must be in 0..65535");
    if (!(o->rpm > 0) || !isfinite(o->rpm)) return fail(err, n, "rpm must be > 0");
    if (o->burst < 0 || !isfinite(o->burst)) return fail(err, n, "burst must be >= 0");
    if (o->tpm < 0 || !isfinite(o->tpm)) return fail(err, n, "tpm must be >= 0");
    if (o->token_burst < 0 || !isfinite(o->token_burst)) return fail(err, n, "token burst must be >= 0");
    if (o->itpm < 0 || !isfinite(o->itpm)) return fail(err, n, "itpm must be >= 0");
    if (o->input_burst < 0 || !isfinite(o->input_burst)) return fail(err, n, "input burst must be >= 0");
    if (o->otpm < 0 || !isfinite(o->otpm)) return fail(err, n, "otpm must be >= 0");
    if (o->output_burst < 0 || !isfinite(o->output_burst)) return fail(err, n, "output burst must be >= 0");
    if (o->service_ms_min > o->service_ms_max)
        return fail(err, n, "service time range is empty (%u > %u)", o->service_ms_min, o->service_ms_max);
    if (o->neighbour_rpm < 0 || !isfinite(o->neighbour_rpm) || o->neighbour_rpm > 600000)
        return fail(err, n, "neighbour rpm must be in 0..600000");
    if (!(o->fail_503 >= 0 && o->fail_503 <= 1)) return fail(err, n, "503 probability must be in [0, 1]");
    if (o->max_body < 1) return fail(err, n, "max body must be >= 1");
    if (o->openai_tpm != MOCK_OPENAI_TPM_MAX && o->openai_tpm != MOCK_OPENAI_TPM_SUM)
        return fail(err, n, "openai_tpm must be max or sum");
    if (o->anthropic_otpm != MOCK_ANTH_OTPM_GENERATED && o->anthropic_otpm != MOCK_ANTH_OTPM_MAX)
        return fail(err, n, "anthropic_otpm must be generated or max");
    if (o->anthropic_round > 1000000) return fail(err, n, "anthropic_round must be in 0..1000000");
    if (o->compat < MOCK_COMPAT_OPENAI || o->compat > MOCK_COMPAT_GEMINI)
        return fail(err, n, "compat must be openai, bedrock or gemini");
    if (!(o->burndown >= 0 && o->burndown <= 1000)) return fail(err, n, "burndown must be in 0..1000");
    if (o->burndown > 0 && o->compat != MOCK_COMPAT_BEDROCK) return fail(err, n, "burndown applies to compat bedrock");
    if (!(o->tokens_per_char >= 0.01 && o->tokens_per_char <= 10) ||
        !(o->cjk_tokens_per_char >= 0.01 && o->cjk_tokens_per_char <= 10))
        return fail(err, n, "tokens per character must be in 0.01..10");
    if (!(o->rpd >= 0 && o->rpd <= 1e12)) return fail(err, n, "rpd must be >= 0");
    if (o->rpd > 0 && o->compat != MOCK_COMPAT_GEMINI) return fail(err, n, "rpd applies to compat gemini");
    if (!(o->wall_start_ms >= 0 && o->wall_start_ms < 1e15)) return fail(err, n, "wall start must be Unix ms >= 0");
    for (size_t i = 0; i < o->n_deployments; i++)
        if (!o->deployments[i] || !mock_name_ok(o->deployments[i]))
            return fail(err, n, "deployment name '%s' is invalid (1-%d of A-Z a-z 0-9 . _ -)",
                        o->deployments[i] ? o->deployments[i] : "", MOCK_NAME_MAX);
    if (o->n_deployments > MOCK_MAX_DEPLOYMENTS) return fail(err, n, "at most %d deployments", MOCK_MAX_DEPLOYMENTS);
    return 0;
}

static void mock_free(mock *m) {
    if (!m) return;
    mock_map_free(&m->deps, free);
    mock_ledger_free(m->ledger);
    if (m->fixed)
        for (size_t i = 0; i < m->opt.n_deployments; i++) free(m->fixed[i]);
    free(m->fixed);
    free(m->host);
    free(m);
}

int mock_start(uv_loop_t *loop, const mock_options *o, mock **out, char *err, size_t errlen) {
    int rc = options_check(o, err, errlen);
    if (rc) return rc;
    mock *m = calloc(1, sizeof(*m));
    if (!m) return fail(err, errlen, "out of memory"), UV_ENOMEM;
    m->loop = loop;
    m->opt = *o;
    m->t0_ns = uv_hrtime();
    mock_map_init(&m->deps);
    m->host = strdup(o->host);
    m->ledger = mock_ledger_new(MOCK_MAX_CLIENTS, MOCK_MAX_ACCEPTS);
    m->fixed = o->n_deployments ? calloc(o->n_deployments, sizeof(char *)) : NULL;
    if (!m->host || !m->ledger || (o->n_deployments && !m->fixed)) goto oom;
    m->opt.host = m->host;
    m->opt.deployments = (const char *const *)m->fixed;
    m->per_min[MOCK_REQUESTS] = o->rpm;
    m->per_min[MOCK_TOKENS] = o->tpm;
    m->per_min[MOCK_INPUT] = o->itpm;
    m->per_min[MOCK_OUTPUT] = o->otpm;
    m->burst_set[MOCK_REQUESTS] = o->burst;
    m->burst_set[MOCK_TOKENS] = o->token_burst;
    m->burst_set[MOCK_INPUT] = o->input_burst;
    m->burst_set[MOCK_OUTPUT] = o->output_burst;
    m->headers = !o->no_headers;
    {
        /* The wall clock at t0, for reset times that must be absolute. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        m->wall0_ms = (double)ts.tv_sec * 1000 + ts.tv_nsec / 1e6 - (double)(uv_hrtime() - m->t0_ns) / 1e6;
        if (o->wall_start_ms > 0) m->wall0_ms = o->wall_start_ms;
    }
    rng_seed(m->rng, o->seed);
    for (size_t i = 0; i < o->n_deployments; i++) {
        mock_deployment *d;
        if (!(m->fixed[i] = strdup(o->deployments[i]))) goto oom;
        if (mock_map_get(&m->deps, m->fixed[i])) continue;
        if (!(d = dep_new(m, 0))) goto oom;
        if (mock_map_put(&m->deps, m->fixed[i], d) != 0) {
            free(d);
            goto oom;
        }
    }
    mock_http_handlers h = {mock_on_request, mock_on_ready, mock_on_done, m};
    rc = mock_http_start(loop, m->host, o->port, o->max_body, &h, &m->http);
    if (rc != 0) {
        fail(err, errlen, "cannot listen on %s:%d: %s", o->host, o->port,
             rc == UV_EINVAL ? "the host is not an IP address" : uv_strerror(rc));
        mock_free(m);
        return rc;
    }
    m->port = mock_http_port(m->http);
    /* The neighbour's timer exists from the start: /control may start it. */
    uv_timer_init(loop, &m->neighbour);
    m->neighbour.data = m;
    m->neighbour_live = 1;
    m->opt.neighbour_rpm = 0;
    m->opt.neighbour_greedy = 0;
    mock_set_neighbour(m, o->neighbour_rpm, o->neighbour_tokens, o->neighbour_greedy);
    *out = m;
    return 0;
oom:
    mock_free(m);
    return fail(err, errlen, "out of memory"), UV_ENOMEM;
}

int mock_port(const mock *m) { return m->port; }

double mock_now_ms(const mock *m) {
    /* Whole microseconds: printed with 15 significant digits (the ledger's
     * JSON precision) such a time reads back as the very same double, so a
     * replay of the accept times sees exactly what the buckets saw. */
    return (double)((uv_hrtime() - m->t0_ns) / 1000) / 1000.0;
}

static const char *const limit_names[MOCK_DIMS][2] = {
    {"rpm", "burst"}, {"tpm", "token_burst"}, {"itpm", "input_burst"}, {"otpm", "output_burst"}};

json_t *mock_limits_json(const mock *m, const mock_deployment *d) {
    json_t *j = json_object();
    for (int k = 0; j && k < MOCK_DIMS; k++) {
        double per_min = d ? d->per_min[k] : m->per_min[k], cap = 0;
        if (per_min > 0) cap = d ? d->b[k].capacity : mock_capacity(m, (mock_dim)k, per_min);
        if (json_object_set_new(j, limit_names[k][0], json_real(per_min)) != 0 ||
            json_object_set_new(j, limit_names[k][1], json_real(cap)) != 0) {
            json_decref(j);
            return NULL;
        }
    }
    return j;
}

json_t *mock_stats(const mock *m) {
    const mock_options *o = &m->opt;
    json_t *stats = mock_ledger_json(m->ledger);
    if (!stats) return NULL;
    json_t *fixed = json_array();
    for (size_t i = 0; i < o->n_deployments; i++) json_array_append_new(fixed, json_string(m->fixed[i]));
    /* The defaults new deployments get; each deployment says its own. */
    json_t *cfg = mock_limits_json(m, NULL);
    json_t *more = json_pack(
        "{ss si s[ii] si si sf si sf si sb sI so sI si sb sI ss}", "host", o->host, "port", mock_port(m), "service_ms",
        (int)o->service_ms_min, (int)o->service_ms_max, "slow_ms", (int)o->slow_ms, "completion_tokens",
        (int)o->completion_tokens, "neighbour_rpm", o->neighbour_rpm, "neighbour_tokens", (int)o->neighbour_tokens,
        "fail_503", o->fail_503, "retry_after_503", (int)o->retry_after_503, "quota_exhausted", o->quota_exhausted,
        "seed", (json_int_t)o->seed, "deployments", fixed, "max_body", (json_int_t)o->max_body, "cache_read_tokens",
        (int)o->cache_read_tokens, "headers", m->headers, "inject_429", (json_int_t)m->inject_429, "openai_tpm",
        o->openai_tpm == MOCK_OPENAI_TPM_SUM ? "sum" : "max");
    static const char *const compat_names[] = {"openai", "bedrock", "gemini"};
    if (more &&
        (json_object_set_new(more, "compat", json_string(compat_names[o->compat])) != 0 ||
         json_object_set_new(more, "burndown", json_real(o->burndown)) != 0 ||
         json_object_set_new(more, "rpd", json_real(o->rpd)) != 0 ||
         json_object_set_new(more, "neighbour_greedy", json_boolean(o->neighbour_greedy)) != 0 ||
         json_object_set_new(more, "tokens_per_char", json_real(o->tokens_per_char)) != 0 ||
         json_object_set_new(more, "cjk_tokens_per_char", json_real(o->cjk_tokens_per_char)) != 0 ||
         json_object_set_new(more, "anthropic_round", json_integer((json_int_t)o->anthropic_round)) != 0 ||
         json_object_set_new(
             more, "completion_tokens_max",
             json_integer((json_int_t)(o->completion_tokens_max > o->completion_tokens ? o->completion_tokens_max
                                                                                       : o->completion_tokens))) != 0 ||
         json_object_set_new(more, "anthropic_otpm",
                             json_string(o->anthropic_otpm == MOCK_ANTH_OTPM_MAX ? "max" : "generated")) != 0)) {
        json_decref(more);
        more = NULL;
    }
    if (!cfg || !more || json_object_update(cfg, more) != 0) {
        json_decref(cfg);
        cfg = NULL;
    }
    json_decref(more);
    if (!cfg || json_object_set_new(stats, "config", cfg) != 0 ||
        json_object_set_new(stats, "now_ms", json_real(mock_now_ms(m))) != 0 ||
        json_object_set_new(stats, "version", json_string(SLUICE_VERSION)) != 0) {
        json_decref(stats);
        return NULL;
    }
    /* The limits in force and the live bucket levels, next to the counts
     * of each deployment. */
    static const char *const level_names[MOCK_DIMS] = {"remaining_requests", "remaining_tokens", "remaining_input",
                                                       "remaining_output"};
    json_t *deps = json_object_get(stats, "deployments");
    double now = mock_now_ms(m);
    for (mock_map_entry *e = m->deps.first; e; e = e->next) {
        json_t *d = json_object_get(deps, e->key);
        mock_deployment copy = *(mock_deployment *)e->value;
        if (!d) continue;
        mock_dep_refill(&copy, now);
        json_object_set_new(d, "limits", mock_limits_json(m, &copy));
        for (int k = 0; k < MOCK_DIMS; k++)
            if (copy.per_min[k] > 0) json_object_set_new(d, level_names[k], json_real(copy.b[k].level));
    }
    return stats;
}

void mock_reset(mock *m, int buckets) {
    double now = mock_now_ms(m);
    mock_ledger_reset(m->ledger, now);
    if (buckets)
        for (mock_map_entry *e = m->deps.first; e; e = e->next) dep_fill(m, e->value, now);
}

int mock_set_neighbour(mock *m, double rpm, unsigned tokens, int greedy) {
    if (!(rpm >= 0 && rpm <= 600000)) return UV_EINVAL;
    m->opt.neighbour_tokens = tokens;
    greedy = greedy != 0;
    if (rpm == m->opt.neighbour_rpm && greedy == m->opt.neighbour_greedy) return 0;
    m->opt.neighbour_rpm = rpm;
    m->opt.neighbour_greedy = greedy;
    if (rpm == 0) {
        uv_timer_stop(&m->neighbour);
        return 0;
    }
    /* A new rate starts a new schedule: paced, the first request one
     * interval from now; greedy, its allowance from now. */
    double now = mock_now_ms(m);
    if (greedy) {
        m->greedy_allow = 0;
        m->greedy_last_ms = now;
        uv_timer_start(&m->neighbour, neighbour_tick, MOCK_GREEDY_TICK_MS, 0);
        return 0;
    }
    m->neighbour_due_ms = now + 60000.0 / rpm;
    uv_timer_start(&m->neighbour, neighbour_tick, mock_ceil_ms(60000.0 / rpm), 0);
    return 0;
}

void mock_neighbour_burst(mock *m, uint64_t count) { neighbour_send(m, count, 0); }

int mock_set_faults(mock *m, double fail_503, int quota_exhausted) {
    if (!(fail_503 >= 0 && fail_503 <= 1)) return UV_EINVAL;
    m->opt.fail_503 = fail_503;
    m->opt.quota_exhausted = quota_exhausted != 0;
    return 0;
}

void mock_totals(const mock *m, mock_counts *out) { mock_ledger_totals(m->ledger, out); }

static void mock_closed_one(mock *m) {
    if (--m->pending_closes > 0) return;
    if (m->done) m->done(m, m->done_arg);
    mock_free(m);
}

static void mock_http_closed(void *arg) { mock_closed_one(arg); }

static void mock_neighbour_closed(uv_handle_t *h) { mock_closed_one(h->data); }

void mock_stop(mock *m, void (*done)(mock *, void *), void *arg) {
    m->done = done;
    m->done_arg = arg;
    m->pending_closes = 1 + m->neighbour_live;
    if (m->neighbour_live) uv_close((uv_handle_t *)&m->neighbour, mock_neighbour_closed);
    mock_http_close(m->http, mock_http_closed, m);
}
