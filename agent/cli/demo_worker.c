/* demo_worker: `sluice demo-worker`, one process of the demo's fleet.
 *
 * It sends its share of the demo's requests to the mock provider over HTTP
 * (libcurl, one easy handle per thread) the way one strategy of demo.h
 * says, and reports on stdout with the protocol of demo.h. Every request
 * has its own thread (up to DEMO_MAX_THREADS; beyond that threads take the
 * next request when theirs is done), so "all in flight" means what it says
 * in the seed's harness; the semaphore and the pacer are per process.
 *
 * The sluice strategy talks RESP2 to sluiced's socket with one blocking
 * hiredis connection per thread: ACQUIRE, send, SETTLE with the usage and
 * the rate-limit headers, and RETRY before another attempt. It does not
 * link libsluice on purpose: the demo shows the socket protocol any
 * language can speak.
 *
 * The prompt is one line (--prompt-chars 0) or exactly --prompt-chars
 * ASCII characters, so every request of the tokens scenario is charged
 * the same estimate, ceil(chars / 4) + --max-tokens.
 *
 * Durations the clients choose themselves (the backoff base, the seconds
 * of Retry-After they honour) are divided by --time-scale, so a time-scaled
 * run keeps the seed's dynamics. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "cli_flags.h"
#include "demo.h"

#define MAX_HEADERS 48        /* response headers kept per response */
#define MAX_BODY (256 * 1024) /* response body kept */
#define HTTP_TIMEOUT_MS 120000L
#define MAX_SHEDS_PER_REQUEST 1000 /* a request shed this often gives up */
#define THREAD_STACK (512 * 1024)

typedef struct worker_opts {
    const char *strategy;
    const char *worker_id;
    const char *url;
    const char *deployment;
    const char *socket;
    const char *settle_headers; /* all | none */
    long long requests;
    long long first;
    long long attempts;
    long long max_wait_ms;
    long long seed;
    long long prompt_chars; /* 0: a one-line prompt */
    long long max_tokens;
    double time_scale;
    double rpm;
    double tpm; /* strategy F paces at it */
    int help;
} worker_opts;

#define WOPT(f) offsetof(worker_opts, f)

static const cli_flag worker_flags[] = {
    {"--strategy", NULL, "ID", CLI_STR, WOPT(strategy), 0, 0, "A, B, C, D, E, sluice or proxy"},
    {"--worker-id", NULL, "NAME", CLI_STR, WOPT(worker_id), 0, 0, "x-client-id sent to the provider"},
    {"--url", NULL, "URL", CLI_STR, WOPT(url), 0, 0, "chat completions URL of the deployment"},
    {"--deployment", NULL, "NAME", CLI_STR, WOPT(deployment), 0, 0, "deployment name in sluiced"},
    {"--socket", NULL, "PATH", CLI_STR, WOPT(socket), 0, 0, "sluiced's socket (sluice strategy)"},
    {"--settle-headers", NULL, "all|none", CLI_STR, WOPT(settle_headers), 0, 0,
     "forward the provider's rate-limit headers with SETTLE (default all)"},
    {"--requests", NULL, "N", CLI_INT, WOPT(requests), 1, 1e7, "requests to send"},
    {"--first", NULL, "K", CLI_INT, WOPT(first), 0, 1e9, "index of the first request (for the prompts)"},
    {"--attempts", NULL, "N", CLI_INT, WOPT(attempts), 1, 1000, "attempts per request"},
    {"--max-wait-ms", NULL, "MS", CLI_INT, WOPT(max_wait_ms), 0, 86400000, "ACQUIRE MAXWAIT"},
    {"--seed", NULL, "S", CLI_INT, WOPT(seed), 0, 9007199254740992.0, "jitter seed"},
    {"--time-scale", NULL, "S", CLI_DOUBLE, WOPT(time_scale), 1e-3, 1e6, "divide client durations by S"},
    {"--rpm", NULL, "N", CLI_DOUBLE, WOPT(rpm), 1e-6, 1e9, "the quota (strategy E paces at it)"},
    {"--tpm", NULL, "N", CLI_DOUBLE, WOPT(tpm), 0, 1e12, "the token quota (strategy F paces at it)"},
    {"--prompt-chars", NULL, "N", CLI_INT, WOPT(prompt_chars), 0, 1000000,
     "characters of every prompt; 0 = one line (default 0)"},
    {"--max-tokens", NULL, "N", CLI_INT, WOPT(max_tokens), 1, 1000000, "max_tokens of every request (default 64)"},
    {"--help", NULL, NULL, CLI_BOOL, WOPT(help), 0, 0, "show this help"},
};
#define WORKER_NFLAGS (sizeof(worker_flags) / sizeof(worker_flags[0]))

/* ---- shared state of the process ------------------------------------------ */

typedef struct worker {
    const worker_opts *o;
    const demo_strategy *st;
    int threads;
    atomic_llong next; /* next request index to take */
    /* start barrier */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, failed, go;
    long long t0_ns;
    /* per-process gate (semaphore) and pacer */
    sem_t gate;
    pthread_mutex_t pace_mu;
    double pace_next_ms;
    /* totals, under mu */
    long long completed, gave_up, attempts, status_429, http_errors, transport_errors;
    long long sheds, retry_denied, sluice_errors, settle_errors;
    long long end_ns;
    double *latency_ms;
    size_t nlat;
} worker;

typedef struct header {
    char name[64];
    char value[256];
} header;

typedef struct response {
    long status;
    int transport_error;
    char *body;
    size_t len;
    header h[MAX_HEADERS];
    int nh;
} response;

typedef struct thread_ctx {
    worker *w;
    int index;
    pthread_t tid;
    CURL *curl;
    struct curl_slist *hdrs;
    redisContext *rc;
    uint64_t rng;
    response resp;
    char *content, *body; /* the request's prompt and JSON body */
    size_t body_size;
} thread_ctx;

/* ---- time -------------------------------------------------------------------- */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double now_ms(void) { return (double)now_ns() / 1e6; }

static void sleep_ms(double ms) {
    if (!(ms > 0)) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* splitmix64 */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

/* ---- output (the demo protocol) -------------------------------------------- */

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return; /* the demo is gone; PDEATHSIG will follow */
        p += k;
        n -= (size_t)k;
    }
}

/* ---- HTTP ---------------------------------------------------------------------- */

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    response *r = ud;
    size_t len = sz * n, room = MAX_BODY - r->len;
    size_t take = len < room ? len : room;
    memcpy(r->body + r->len, p, take);
    r->len += take;
    r->body[r->len] = '\0';
    return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    response *r = ud;
    size_t len = sz * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        r->nh = 0; /* a new response (after a 1xx): start over */
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || r->nh == MAX_HEADERS) return len;
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1, *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t vl = (size_t)(end - v);
    if (nl == 0 || nl >= sizeof(r->h[0].name) || vl >= sizeof(r->h[0].value)) return len;
    header *h = &r->h[r->nh++];
    for (size_t i = 0; i < nl; i++) h->name[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i]);
    h->name[nl] = '\0';
    memcpy(h->value, v, vl);
    h->value[vl] = '\0';
    return len;
}

static const char *find_header(const response *r, const char *name) {
    for (int i = 0; i < r->nh; i++)
        if (strcmp(r->h[i].name, name) == 0) return r->h[i].value;
    return NULL;
}

/* The headers a governor learns from: the Retry-After family and every
 * rate-limit header family (lib/http/ratelimit.h reads them). */
static int is_feedback_header(const char *name) {
    return strncmp(name, "retry-after", 11) == 0 || strncmp(name, "x-ms-retry-after", 16) == 0 ||
           strncmp(name, "x-ratelimit-", 12) == 0 || strncmp(name, "ratelimit", 9) == 0 ||
           strncmp(name, "anthropic-ratelimit-", 20) == 0;
}

static void http_post(thread_ctx *t, const char *body) {
    response *r = &t->resp;
    r->status = 0;
    r->transport_error = 0;
    r->len = 0;
    r->body[0] = '\0';
    r->nh = 0;
    curl_easy_setopt(t->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(t->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    CURLcode rc = curl_easy_perform(t->curl);
    if (rc != CURLE_OK) {
        r->transport_error = 1;
        return;
    }
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &r->status);
}

/* usage.total_tokens of a completion, -1 if absent. */
static long long usage_tokens(const response *r) {
    json_t *doc = json_loadb(r->body, r->len, 0, NULL);
    json_t *v = doc ? json_object_get(json_object_get(doc, "usage"), "total_tokens") : NULL;
    long long n = json_is_integer(v) ? (long long)json_integer_value(v) : -1;
    json_decref(doc);
    return n;
}

/* Retry-After in seconds as the seed's harness reads it: absent means 1. */
static double retry_after_s(const response *r) {
    const char *v = find_header(r, "retry-after");
    if (!v || !*v) return 1;
    char *end;
    errno = 0;
    long s = strtol(v, &end, 10);
    if (*end || errno || s < 0) return 1;
    return (double)s;
}

/* ---- sluiced (RESP2 over the UNIX socket) ----------------------------------- */

/* The number after "retry-after-ms=" in an error, or fallback. */
static double retry_after_ms_in(const char *s, double fallback) {
    const char *p = s ? strstr(s, "retry-after-ms=") : NULL;
    if (!p) return fallback;
    double v = strtod(p + 15, NULL);
    return v >= 0 ? v : fallback;
}

typedef enum acq_result { ACQ_GRANTED, ACQ_SHED, ACQ_ERROR } acq_result;

static acq_result sluice_acquire(thread_ctx *t, long long tokens, char *grant, size_t glen, double *retry_ms) {
    const worker_opts *o = t->w->o;
    char tok[32], mw[32];
    snprintf(tok, sizeof(tok), "%lld", tokens);
    snprintf(mw, sizeof(mw), "%lld", o->max_wait_ms);
    const char *argv[] = {"ACQUIRE", o->deployment, "TOKENS", tok, "MAXWAIT", mw};
    redisReply *r = redisCommandArgv(t->rc, 6, argv, NULL);
    acq_result res = ACQ_ERROR;
    if (!r) {
        fprintf(stderr, "sluice demo-worker %s: sluiced: %s\n", o->worker_id, t->rc->errstr);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING) {
        snprintf(grant, glen, "%s", r->element[0]->str);
        res = ACQ_GRANTED;
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "SHED", 4) == 0) {
        *retry_ms = retry_after_ms_in(r->str, 1000);
        res = ACQ_SHED;
    } else {
        fprintf(stderr, "sluice demo-worker %s: ACQUIRE: %s\n", o->worker_id,
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    if (r) freeReplyObject(r);
    return res;
}

static void sluice_settle(thread_ctx *t, const char *grant, long long tokens, const char *status) {
    worker *w = t->w;
    const response *resp = &t->resp;
    const char *argv[6 + 3 * MAX_HEADERS];
    char tok[32];
    int argc = 0;
    argv[argc++] = "SETTLE";
    argv[argc++] = grant;
    if (tokens >= 0) {
        snprintf(tok, sizeof(tok), "%lld", tokens);
        argv[argc++] = "TOKENS";
        argv[argc++] = tok;
    }
    argv[argc++] = "STATUS";
    argv[argc++] = status;
    if (strcmp(w->o->settle_headers, "none") != 0) {
        for (int i = 0; i < resp->nh; i++) {
            if (!is_feedback_header(resp->h[i].name)) continue;
            argv[argc++] = "HEADER";
            argv[argc++] = resp->h[i].name;
            argv[argc++] = resp->h[i].value;
        }
    }
    redisReply *r = redisCommandArgv(t->rc, argc, argv, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "sluice demo-worker %s: SETTLE %s: %s\n", w->o->worker_id, grant, r ? r->str : t->rc->errstr);
        pthread_mutex_lock(&w->mu);
        w->settle_errors++;
        pthread_mutex_unlock(&w->mu);
    }
    if (r) freeReplyObject(r);
}

/* 1: the fleet's retry budget allows another attempt; 0: it does not;
 * -1: sluiced failed. */
static int sluice_retry(thread_ctx *t) {
    const char *argv[] = {"RETRY", t->w->o->deployment};
    redisReply *r = redisCommandArgv(t->rc, 2, argv, NULL);
    int res = -1;
    if (r && r->type == REDIS_REPLY_INTEGER) res = r->integer == 1;
    else if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NORETRY", 7) == 0) res = 0;
    else
        fprintf(stderr, "sluice demo-worker %s: RETRY: %s\n", t->w->o->worker_id,
                r ? (r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply") : t->rc->errstr);
    if (r) freeReplyObject(r);
    return res;
}

/* ---- one request ------------------------------------------------------------- */

/* Takes the next slot of the process's bucket: one request at the full
 * RPM, or (DEMO_PACE_TOKENS) the request's estimate at the full TPM. */
static void pace(worker *w, long long estimate) {
    double interval = w->st->paced == DEMO_PACE_TOKENS ? (double)estimate * 60000.0 / w->o->tpm : 60000.0 / w->o->rpm;
    pthread_mutex_lock(&w->pace_mu);
    double now = now_ms();
    if (w->pace_next_ms < now) w->pace_next_ms = now;
    double d = w->pace_next_ms - now;
    w->pace_next_ms += interval;
    pthread_mutex_unlock(&w->pace_mu);
    sleep_ms(d);
}

typedef enum req_end { REQ_COMPLETED, REQ_GAVE_UP } req_end;

static void count(worker *w, long long *field) {
    pthread_mutex_lock(&w->mu);
    (*field)++;
    pthread_mutex_unlock(&w->mu);
}

static req_end run_request(thread_ctx *t, long long idx) {
    worker *w = t->w;
    const worker_opts *o = w->o;
    const demo_strategy *st = w->st;
    char *content = t->content, *body = t->body;
    demo_prompt(o->prompt_chars, idx, content);
    snprintf(body, t->body_size, "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%lld}", content,
             o->max_tokens);
    long long estimate = (long long)((strlen(content) + 3) / 4) + o->max_tokens; /* as the mock charges */
    int sheds = 0;
    for (long long a = 0; a < o->attempts; a++) {
        char grant[128] = "";
        if (st->wait == DEMO_WAIT_SLUICE) {
            for (;;) {
                double retry_ms = 0;
                acq_result ar = sluice_acquire(t, estimate, grant, sizeof(grant), &retry_ms);
                if (ar == ACQ_GRANTED) break;
                if (ar == ACQ_ERROR || ++sheds > MAX_SHEDS_PER_REQUEST) {
                    count(w, &w->sluice_errors);
                    return REQ_GAVE_UP;
                }
                count(w, &w->sheds);
                sleep_ms(retry_ms > 1 ? retry_ms : 1);
            }
        }
        if (st->paced != DEMO_PACE_NONE) pace(w, estimate);
        if (st->in_flight > 0)
            while (sem_wait(&w->gate) != 0 && errno == EINTR) {}
        count(w, &w->attempts);
        http_post(t, body);
        if (st->in_flight > 0) sem_post(&w->gate);

        const response *r = &t->resp;
        if (!r->transport_error && r->status == 200) {
            if (st->wait == DEMO_WAIT_SLUICE) sluice_settle(t, grant, usage_tokens(r), "ok");
            long long end = now_ns();
            pthread_mutex_lock(&w->mu);
            w->completed++;
            w->latency_ms[w->nlat++] = (double)(end - w->t0_ns) / 1e6;
            pthread_mutex_unlock(&w->mu);
            return REQ_COMPLETED;
        }
        if (r->transport_error) count(w, &w->transport_errors);
        else if (r->status == 429) count(w, &w->status_429);
        else count(w, &w->http_errors);
        int last = a + 1 == o->attempts;

        switch (st->wait) {
        case DEMO_WAIT_SLUICE: {
            /* A 429 pauses the deployment for the whole fleet (the headers
             * carry the pause); the next ACQUIRE waits it out. */
            sluice_settle(t, grant, -1, r->status == 429 ? "throttled" : "failed");
            if (last) break;
            int ok = sluice_retry(t);
            if (ok < 0) {
                count(w, &w->sluice_errors);
                return REQ_GAVE_UP;
            }
            if (ok == 0) {
                count(w, &w->retry_denied);
                return REQ_GAVE_UP;
            }
            break;
        }
        case DEMO_WAIT_BACKOFF:
            if (!last) sleep_ms(rng_uniform(&t->rng) * DEMO_SEED_BACKOFF_BASE_MS * ldexp(1.0, (int)a) / o->time_scale);
            break;
        case DEMO_WAIT_RETRY_AFTER:
            if (!last) sleep_ms(retry_after_s(r) * 1000.0 / o->time_scale);
            break;
        }
    }
    return REQ_GAVE_UP;
}

/* ---- threads ----------------------------------------------------------------- */

static int thread_setup(thread_ctx *t) {
    const worker_opts *o = t->w->o;
    t->resp.body = malloc(MAX_BODY + 1);
    t->content = malloc((size_t)o->prompt_chars + 128);
    t->body_size = (size_t)o->prompt_chars + 256;
    t->body = malloc(t->body_size);
    t->curl = curl_easy_init();
    char client[160];
    snprintf(client, sizeof(client), "x-client-id: %s", o->worker_id);
    t->hdrs = curl_slist_append(NULL, "content-type: application/json");
    if (t->hdrs) t->hdrs = curl_slist_append(t->hdrs, client);
    if (t->hdrs) t->hdrs = curl_slist_append(t->hdrs, "Expect:");
    if (!t->resp.body || !t->content || !t->body || !t->curl || !t->hdrs) {
        fprintf(stderr, "sluice demo-worker %s: out of memory\n", o->worker_id);
        return -1;
    }
    curl_easy_setopt(t->curl, CURLOPT_URL, o->url);
    curl_easy_setopt(t->curl, CURLOPT_HTTPHEADER, t->hdrs);
    curl_easy_setopt(t->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t->curl, CURLOPT_TIMEOUT_MS, HTTP_TIMEOUT_MS);
    curl_easy_setopt(t->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(t->curl, CURLOPT_WRITEDATA, &t->resp);
    curl_easy_setopt(t->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(t->curl, CURLOPT_HEADERDATA, &t->resp);
    curl_easy_setopt(t->curl, CURLOPT_TCP_NODELAY, 1L);
    if (t->w->st->wait == DEMO_WAIT_SLUICE) {
        /* A whole fleet connects at once; a full accept queue answers
         * EAGAIN, so try again for a while before giving up. */
        struct timeval ct = {5, 0};
        for (int tries = 0;; tries++) {
            t->rc = redisConnectUnixWithTimeout(o->socket, ct);
            if ((t->rc && !t->rc->err) || tries == 200) break;
            if (t->rc) redisFree(t->rc);
            t->rc = NULL;
            sleep_ms(10 + (double)(rng_next(&t->rng) % 40));
        }
        if (!t->rc || t->rc->err) {
            fprintf(stderr, "sluice demo-worker %s: cannot connect to sluiced at %s: %s\n", o->worker_id, o->socket,
                    t->rc ? t->rc->errstr : "out of memory");
            return -1;
        }
        /* ACQUIRE blocks up to MAXWAIT; give the reply that and a margin. */
        struct timeval rt = {(time_t)(o->max_wait_ms / 1000 + 60), 0};
        redisSetTimeout(t->rc, rt);
    }
    return 0;
}

static void *thread_main(void *arg) {
    thread_ctx *t = arg;
    worker *w = t->w;
    int ok = thread_setup(t) == 0;
    pthread_mutex_lock(&w->mu);
    w->ready++;
    if (!ok) w->failed++;
    pthread_cond_broadcast(&w->cv);
    while (!w->go) pthread_cond_wait(&w->cv, &w->mu);
    int run = w->go > 0 && ok;
    pthread_mutex_unlock(&w->mu);
    if (!run) return NULL;
    for (;;) {
        long long idx = atomic_fetch_add(&w->next, 1);
        if (idx >= w->o->requests) break;
        if (run_request(t, w->o->first + idx) == REQ_GAVE_UP) count(w, &w->gave_up);
        long long end = now_ns();
        pthread_mutex_lock(&w->mu);
        if (end > w->end_ns) w->end_ns = end;
        pthread_mutex_unlock(&w->mu);
        write_all(1, "done\n", 5);
    }
    return NULL;
}

static void thread_cleanup(thread_ctx *t) {
    if (t->rc) redisFree(t->rc);
    if (t->curl) curl_easy_cleanup(t->curl);
    curl_slist_free_all(t->hdrs);
    free(t->resp.body);
    free(t->content);
    free(t->body);
}

/* ---- the process ------------------------------------------------------------- */

static void print_result(worker *w) {
    json_t *lat = json_array();
    for (size_t i = 0; i < w->nlat; i++) json_array_append_new(lat, json_real(w->latency_ms[i]));
    json_t *doc = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o}", "worker",
                            w->o->worker_id, "strategy", w->st->id, "requests", (json_int_t)w->o->requests, "completed",
                            (json_int_t)w->completed, "gave_up", (json_int_t)w->gave_up, "attempts",
                            (json_int_t)w->attempts, "status_429", (json_int_t)w->status_429, "http_errors",
                            (json_int_t)w->http_errors, "transport_errors", (json_int_t)w->transport_errors, "sheds",
                            (json_int_t)w->sheds, "retry_denied", (json_int_t)w->retry_denied, "sluice_errors",
                            (json_int_t)w->sluice_errors, "settle_errors", (json_int_t)w->settle_errors, "end_ms",
                            w->end_ns > 0 ? (double)(w->end_ns - w->t0_ns) / 1e6 : 0.0, "latency_ms", lat);
    char *s = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    if (s) {
        write_all(1, "result ", 7);
        write_all(1, s, strlen(s));
        write_all(1, "\n", 1);
    } else {
        fprintf(stderr, "sluice demo-worker %s: out of memory building the result\n", w->o->worker_id);
    }
    free(s);
    json_decref(doc);
}

/* Reads "go <t0_ns>" from stdin. Returns 0, or -1 on EOF or garbage. */
static int read_go(long long *t0) {
    char line[64];
    size_t n = 0;
    while (n + 1 < sizeof(line)) {
        ssize_t k = read(0, line + n, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        if (line[n] == '\n') break;
        n++;
    }
    line[n] = '\0';
    return sscanf(line, "go %lld", t0) == 1 ? 0 : -1;
}

int cmd_demo_worker(int argc, char **argv) {
    worker_opts o = {.settle_headers = "all",
                     .requests = 1,
                     .attempts = 10,
                     .max_wait_ms = 60000,
                     .max_tokens = 64,
                     .seed = 1,
                     .time_scale = 1,
                     .rpm = 60};
    if (cli_parse("demo-worker", worker_flags, WORKER_NFLAGS, &o, argc, argv) != 0) return 2;
    if (o.help) {
        printf("usage: sluice demo-worker [OPTIONS]\n\n"
               "One worker process of `sluice demo` (started by it; not meant to be run by hand).\n\n");
        cli_print_flags(stdout, worker_flags, WORKER_NFLAGS);
        return 0;
    }
    const demo_strategy *st = o.strategy ? demo_strategy_find(o.strategy) : NULL;
    if (!st || !o.url || !o.worker_id || (st->wait == DEMO_WAIT_SLUICE && (!o.socket || !o.deployment)) ||
        (st->paced == DEMO_PACE_TOKENS && o.tpm <= 0) ||
        (strcmp(o.settle_headers, "all") != 0 && strcmp(o.settle_headers, "none") != 0)) {
        fprintf(stderr, "sluice demo-worker: needs --strategy, --url, --worker-id (and --socket, --deployment "
                        "for sluice, --tpm for F); --settle-headers is all or none\n");
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sluice demo-worker: curl_global_init failed\n");
        return 1;
    }
    worker w;
    memset(&w, 0, sizeof(w));
    w.o = &o;
    w.st = st;
    w.threads = (int)(o.requests < DEMO_MAX_THREADS ? o.requests : DEMO_MAX_THREADS);
    atomic_init(&w.next, 0);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_mutex_init(&w.pace_mu, NULL);
    sem_init(&w.gate, 0, (unsigned)(st->in_flight > 0 ? st->in_flight : 1));
    w.latency_ms = calloc((size_t)o.requests, sizeof(double));
    thread_ctx *tc = calloc((size_t)w.threads, sizeof(*tc));
    int rc = 1, started = 0;
    if (!w.latency_ms || !tc) {
        fprintf(stderr, "sluice demo-worker: out of memory\n");
        goto out;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (; started < w.threads; started++) {
        tc[started].w = &w;
        tc[started].index = started;
        tc[started].rng = (uint64_t)o.seed * 0x100000001b3ULL + (uint64_t)o.first * 7919u + (uint64_t)started;
        if (pthread_create(&tc[started].tid, &attr, thread_main, &tc[started]) != 0) {
            fprintf(stderr, "sluice demo-worker: cannot start thread %d: %s\n", started, strerror(errno));
            break;
        }
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&w.mu);
    while (w.ready < started) pthread_cond_wait(&w.cv, &w.mu);
    int ok = started == w.threads && w.failed == 0;
    pthread_mutex_unlock(&w.mu);
    long long t0 = 0;
    if (ok) {
        write_all(1, "ready\n", 6);
        ok = read_go(&t0) == 0;
    }
    pthread_mutex_lock(&w.mu);
    w.t0_ns = t0;
    w.go = ok ? 1 : -1;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    for (int i = 0; i < started; i++) pthread_join(tc[i].tid, NULL);
    if (ok) {
        print_result(&w);
        rc = 0;
    }
out:
    if (tc)
        for (int i = 0; i < started; i++) thread_cleanup(&tc[i]);
    free(tc);
    free(w.latency_ms);
    sem_destroy(&w.gate);
    pthread_mutex_destroy(&w.pace_mu);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    curl_global_cleanup();
    return rc;
}
