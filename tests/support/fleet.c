/* fleet: see fleet.h. */
#define _GNU_SOURCE
#include "fleet.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "mock_fixture.h"
#include "proc.h"
#include "redis_fixture.h"
#include "sluiced_fixture.h"
#include "worker_call.h"

#define FLEET_MAX_AGENTS 4
#define FLEET_MAX_CALLERS 64
#define FLEET_MAX_WAIT_MS 120000
#define FLEET_HTTP_TIMEOUT_MS 15000L

typedef struct fleet fleet;

typedef struct worker {
    fleet *f;
    int agent, index;
    pthread_t tid;
    int started;
    double *sent; /* send times of the successful calls */
    size_t nsent, cap;
    long long attempts;
    int lost;
    char error[256];
} worker;

struct fleet {
    const fleet_spec *spec;
    redis_fixture redis;
    mock_fixture mock;
    sluiced_fixture agent[FLEET_MAX_AGENTS];
    char endpoint[64];
    long long input;       /* the input estimate of the prompt */
    atomic_int next;       /* the next request to take */
    atomic_int first_sent; /* 1 once a call went out */
    double t0;             /* proc_now_ms() at the start */
    double first_ms;       /* when the first call went out (from t0) */
    long long seen_429;    /* the fleet's 429s at the first look, -1 before it */
    pthread_mutex_t mu;
    worker w[FLEET_MAX_AGENTS * FLEET_MAX_CALLERS];
    int nw;
};

long long fleet_input_tokens(const char *content) {
    long long points = 0;
    for (const unsigned char *p = (const unsigned char *)content; *p; p++)
        if ((*p & 0xC0) != 0x80) points++;
    return (points + 3) / 4;
}

/* The 429s the ledger counts for the fleet's workers (clients "w..."). */
static long long ledger_fleet_429(json_t *ledger) {
    json_t *clients = json_object_get(ledger, "clients"), *v;
    const char *name;
    long long n = 0;
    json_object_foreach(clients, name, v) {
        if (name[0] == 'w') n += json_integer_value(json_object_get(v, "status_429"));
    }
    return n;
}

static void *worker_main(void *arg) {
    worker *k = arg;
    fleet *f = k->f;
    const fleet_spec *s = f->spec;
    worker_call w;
    char id[64];
    snprintf(id, sizeof(id), "w%d-%d", k->agent, k->index);
    char http_sock[sizeof(f->agent[0].sock) + 8];
    snprintf(http_sock, sizeof(http_sock), "%s.http", f->agent[k->agent].sock);
    if (worker_call_open(&w, s->proxy ? NULL : f->agent[k->agent].sock, FLEET_MAX_WAIT_MS + 5000, id) != 0) {
        snprintf(k->error, sizeof(k->error), "%s", w.error);
        worker_call_close(&w);
        return NULL;
    }
    if (s->proxy) curl_easy_setopt(w.curl, CURLOPT_UNIX_SOCKET_PATH, http_sock);
    const char *endpoint = s->proxy ? "http://localhost" : f->endpoint;
    for (;;) {
        int req = atomic_fetch_add(&f->next, 1);
        if (req >= s->requests) break;
        int done = 0, attempts = 0;
        while (!done && attempts < FLEET_MAX_ATTEMPTS) {
            worker_acquire a =
                s->proxy   ? WORKER_GRANTED
                : s->split ? worker_call_acquire_split(&w, "d", f->input, s->max_tokens, FLEET_MAX_WAIT_MS, NULL, NULL)
                           : worker_call_acquire(&w, "d", f->input + s->max_tokens, FLEET_MAX_WAIT_MS, NULL, NULL);
            if (a == WORKER_SHED) {
                long long ra = w.retry_after_ms;
                proc_sleep_ms((int)(ra > 0 && ra < 2000 ? ra : 100));
                continue;
            }
            if (a == WORKER_ERROR) {
                snprintf(k->error, sizeof(k->error), "%s", w.error);
                attempts = FLEET_MAX_ATTEMPTS;
                break;
            }
            double t = proc_now_ms() - f->t0;
            if (!atomic_exchange(&f->first_sent, 1)) {
                pthread_mutex_lock(&f->mu);
                f->first_ms = t;
                pthread_mutex_unlock(&f->mu);
            }
            long st = s->style == FLEET_ANTHROPIC ? worker_call_post_messages(&w, endpoint, "d", s->content,
                                                                              s->max_tokens, FLEET_HTTP_TIMEOUT_MS)
                      : s->style == FLEET_OPENAI_V1
                          ? worker_call_post_v1(&w, endpoint, "d", s->content, s->max_tokens, FLEET_HTTP_TIMEOUT_MS)
                      : s->stream
                          ? worker_call_post_stream(&w, endpoint, "d", s->content, s->max_tokens, FLEET_HTTP_TIMEOUT_MS)
                          : worker_call_post(&w, endpoint, "d", s->content, s->max_tokens, FLEET_HTTP_TIMEOUT_MS);
            attempts++;
            k->attempts++;
            if (s->proxy && st != 200) {
                /* The proxy answered for the fleet (its own shed, or the
                 * provider's 429 after its retries): ask again when it says. */
                const char *ra = worker_call_header(&w, "retry-after-ms");
                const char *ras = worker_call_header(&w, "retry-after");
                long long ms = ra ? atoll(ra) : ras ? 1000 * atoll(ras) : 100;
                proc_sleep_ms((int)(ms > 0 && ms < 2000 ? ms : ms <= 0 ? 10 : 2000));
                if (st == 0) {
                    snprintf(k->error, sizeof(k->error), "%s", w.error);
                    attempts = FLEET_MAX_ATTEMPTS;
                }
                continue;
            }
            if (!s->proxy) worker_call_settle(&w, st == 200 ? "ok" : st == 429 ? "throttled" : "failed");
            if (st == 200) {
                if (k->nsent == k->cap) {
                    size_t cap = k->cap ? 2 * k->cap : 256;
                    double *n = realloc(k->sent, cap * sizeof(*n));
                    if (!n) break;
                    k->sent = n;
                    k->cap = cap;
                }
                k->sent[k->nsent++] = t;
                done = 1;
            }
        }
        if (!done) k->lost++;
    }
    worker_call_close(&w);
    return NULL;
}

/* The events, each at its time after the first call went out. */
static void *events_main(void *arg) {
    fleet *f = arg;
    const fleet_spec *s = f->spec;
    while (!atomic_load(&f->first_sent) && atomic_load(&f->next) < s->requests) proc_sleep_ms(5);
    pthread_mutex_lock(&f->mu);
    double base = f->first_ms;
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < s->nevents; i++) {
        while (proc_now_ms() - f->t0 < base + s->events[i].at_ms && atomic_load(&f->next) < s->requests + f->nw)
            proc_sleep_ms(5);
        if (!s->events[i].control) {
            json_t *l = f->seen_429 < 0 ? mock_fixture_stats(&f->mock, "") : NULL;
            if (l) f->seen_429 = ledger_fleet_429(l);
            json_decref(l);
            continue;
        }
        char q[256];
        snprintf(q, sizeof(q), "?%s", s->events[i].control);
        if (mock_fixture_control(&f->mock, q) != 200)
            fprintf(stderr, "fleet %s: POST /control%s was refused\n", s->name, q);
    }
    return NULL;
}

/* FLEET_TRACE=field,field,...: prints those STATUS fields of agent 0
 * every 500 ms while the fleet runs (for looking into a run by hand). */
static void *trace_main(void *arg) {
    fleet *f = arg;
    const char *want = getenv("FLEET_TRACE");
    redisContext *c = sluiced_fixture_connect(&f->agent[0], 2000);
    while (c && atomic_load(&f->next) < f->spec->requests + f->nw) {
        redisReply *r = redisCommand(c, "STATUS d");
        char line[1024];
        size_t used = (size_t)snprintf(line, sizeof(line), "  trace %6.0f ms:", proc_now_ms() - f->t0);
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
            const char *k = r->element[i]->str;
            size_t kl = strlen(k);
            const char *hit = strstr(want, k);
            if (!hit || (hit != want && hit[-1] != ',') || (hit[kl] && hit[kl] != ',')) continue;
            const redisReply *v = r->element[i + 1];
            if (v->type == REDIS_REPLY_INTEGER)
                used += (size_t)snprintf(line + used, sizeof(line) - used, " %s=%lld", k, v->integer);
            else used += (size_t)snprintf(line + used, sizeof(line) - used, " %s=%s", k, v->str);
            if (used >= sizeof(line)) break;
        }
        if (r) freeReplyObject(r);
        fprintf(stderr, "%s\n", line);
        proc_sleep_ms(500);
    }
    if (c) redisFree(c);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The agents' INFO counters of Redis trouble and local pacing, summed. */
static long long info_num(const char *info, const char *field) {
    char key[64];
    snprintf(key, sizeof(key), "\n%s:", field);
    const char *at = strstr(info, key);
    return at ? strtoll(at + strlen(key), NULL, 10) : 0;
}

static void read_health(fleet *f, fleet_result *out) {
    for (int a = 0; a < f->spec->agents; a++) {
        redisContext *c = sluiced_fixture_connect(&f->agent[a], 5000);
        redisReply *r = c ? redisCommand(c, "INFO") : NULL;
        if (r && r->type == REDIS_REPLY_STRING) {
            out->redis_timeouts += info_num(r->str, "redis_timeouts");
            out->redis_errors += info_num(r->str, "redis_errors");
            out->grants_local += info_num(r->str, "grants_local");
        }
        if (r) freeReplyObject(r);
        if (c) redisFree(c);
    }
}

/* STATUS d of agent 0 as "field=value " text. */
static void read_status(fleet *f, fleet_result *out) {
    redisContext *c = sluiced_fixture_connect(&f->agent[0], 5000);
    redisReply *r = c ? redisCommand(c, "STATUS d") : NULL;
    size_t used = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        char val[64];
        if (v->type == REDIS_REPLY_INTEGER) snprintf(val, sizeof(val), "%lld", v->integer);
        else snprintf(val, sizeof(val), "%s", v->type == REDIS_REPLY_STRING ? v->str : "");
        int w = snprintf(out->status + used, sizeof(out->status) - used, "%s=%s ", k->str, val);
        if (w < 0 || (size_t)w >= sizeof(out->status) - used) break;
        used += (size_t)w;
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
}

int fleet_run(const fleet_spec *s, fleet_result *out) {
    memset(out, 0, sizeof(*out));
    if (s->agents < 1 || s->agents > FLEET_MAX_AGENTS || s->callers < 1 || s->callers > FLEET_MAX_CALLERS) {
        fprintf(stderr, "fleet %s: agents 1..%d, callers 1..%d\n", s->name, FLEET_MAX_AGENTS, FLEET_MAX_CALLERS);
        return -1;
    }
    if (!sluiced_fixture_binary() || !mock_fixture_binary()) return -1;
    fleet *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    f->spec = s;
    pthread_mutex_init(&f->mu, NULL);
    f->input = fleet_input_tokens(s->content);
    f->seen_429 = -1;
    int rc = -1, agents = 0;
    const char *args[FLEET_MAX_ARGS + 8];
    int na = 0;
    args[na++] = "--deployment";
    args[na++] = "d";
    for (int i = 0; i < FLEET_MAX_ARGS && s->mock_args[i]; i++) args[na++] = s->mock_args[i];
    args[na] = NULL;
    if (redis_fixture_start(&f->redis, 0) != 0) goto out;
    if (mock_fixture_start(&f->mock, args, 10000) != 0) goto out_redis;
    snprintf(f->endpoint, sizeof(f->endpoint), "http://127.0.0.1:%d", f->mock.port);
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "redis: {url: \"unix://%s\"}\n"
             "agent: {socket: \"%%SOCK%%\", heartbeat_ms: 200, max_clients: 256%s}\n"
             "deployments:\n"
             "  d: {%s, endpoint: \"%s\", max_wait_ms: %d}\n",
             f->redis.sock, s->proxy ? ", http: {listen: \"unix:%SOCK%.http\", max_connections: 512}" : "",
             s->deployment, f->endpoint, FLEET_MAX_WAIT_MS);
    for (; agents < s->agents; agents++) {
        char name[16];
        snprintf(name, sizeof(name), "agent%d", agents);
        if (sluiced_fixture_init(&f->agent[agents], f->redis.dir, name) != 0 ||
            sluiced_fixture_write_config(&f->agent[agents], yaml) != 0 ||
            sluiced_fixture_launch(&f->agent[agents], NULL, 10000) != 0)
            goto out_agents;
    }
    f->t0 = proc_now_ms();
    pthread_t ev, tr;
    int have_ev = pthread_create(&ev, NULL, events_main, f) == 0;
    int have_tr = getenv("FLEET_TRACE") && pthread_create(&tr, NULL, trace_main, f) == 0;
    for (int a = 0; a < s->agents; a++)
        for (int c = 0; c < s->callers; c++) {
            worker *k = &f->w[f->nw++];
            k->f = f;
            k->agent = a;
            k->index = c;
            k->started = pthread_create(&k->tid, NULL, worker_main, k) == 0;
        }
    for (int i = 0; i < f->nw; i++)
        if (f->w[i].started) pthread_join(f->w[i].tid, NULL);
    atomic_store(&f->next, s->requests + f->nw + 1);
    if (have_ev) pthread_join(ev, NULL);
    if (have_tr) pthread_join(tr, NULL);
    out->requests = s->requests;
    for (int i = 0; i < f->nw; i++) {
        worker *k = &f->w[i];
        if (!k->started) out->lost++;
        if (k->error[0]) fprintf(stderr, "fleet %s: worker %d-%d: %s\n", s->name, k->agent, k->index, k->error);
        out->attempts += k->attempts;
        out->lost += k->lost;
        out->nsend += k->nsent;
    }
    out->send_ms = calloc(out->nsend ? out->nsend : 1, sizeof(double));
    size_t at = 0;
    for (int i = 0; out->send_ms && i < f->nw; i++) {
        memcpy(out->send_ms + at, f->w[i].sent, f->w[i].nsent * sizeof(double));
        at += f->w[i].nsent;
    }
    if (out->send_ms) qsort(out->send_ms, out->nsend, sizeof(double), cmp_double);
    out->succeeded = (int)out->nsend;
    if (out->nsend) {
        out->first_send_ms = out->send_ms[0];
        out->last_send_ms = out->send_ms[out->nsend - 1];
    }
    out->events_base_ms = f->first_ms;
    read_status(f, out);
    read_health(f, out);
    out->ledger = mock_fixture_stats(&f->mock, "");
    if (out->ledger) {
        json_t *clients = json_object_get(out->ledger, "clients");
        const char *name;
        json_t *v;
        json_object_foreach(clients, name, v) {
            if (!strcmp(name, "(neighbour)")) {
                out->neighbour_accepted = json_integer_value(json_object_get(v, "accepted"));
                out->neighbour_429 = json_integer_value(json_object_get(v, "status_429"));
            }
        }
        out->fleet_429 = ledger_fleet_429(out->ledger);
        json_t *acc = json_object_get(json_object_get(json_object_get(out->ledger, "deployments"), "d"), "accept_ms");
        if (s->proxy && json_array_size(acc) > 0) {
            /* The workers' clocks say when they asked the proxy, not when it
             * sent: the provider's accept times do, moved so that the first
             * is when the first worker asked. */
            size_t n = json_array_size(acc);
            double *t = calloc(n, sizeof(double));
            for (size_t i = 0; t && i < n; i++) t[i] = json_number_value(json_array_get(acc, i));
            if (t) {
                qsort(t, n, sizeof(double), cmp_double);
                double base = t[0];
                for (size_t i = 0; i < n; i++) t[i] = t[i] - base + f->first_ms;
                free(out->send_ms);
                out->send_ms = t;
                out->nsend = n;
                out->first_send_ms = t[0];
                out->last_send_ms = t[n - 1];
            }
        }
        out->fleet_429_seen = f->seen_429;
        out->injected_429 = mock_fixture_count(out->ledger, "deployments/d/injected_429");
        rc = 0;
    }
out_agents:
    for (int i = agents - 1; i >= 0; i--) sluiced_fixture_stop(&f->agent[i], 0);
    mock_fixture_stop(&f->mock);
out_redis:
    redis_fixture_stop(&f->redis);
out:
    for (int i = 0; i < f->nw; i++) free(f->w[i].sent);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return rc;
}

void fleet_result_free(fleet_result *r) {
    free(r->send_ms);
    json_decref(r->ledger);
    memset(r, 0, sizeof(*r));
}

size_t fleet_sent_between(const fleet_result *r, double from_ms, double to_ms) {
    size_t n = 0;
    for (size_t i = 0; i < r->nsend; i++)
        if (r->send_ms[i] >= from_ms && r->send_ms[i] < to_ms) n++;
    return n;
}

double fleet_makespan(const fleet_result *r) { return r->nsend > 1 ? r->last_send_ms - r->first_send_ms : 0; }

double fleet_longest_gap(const fleet_result *r) {
    double g = 0;
    for (size_t i = 1; i < r->nsend; i++)
        if (r->send_ms[i] - r->send_ms[i - 1] > g) g = r->send_ms[i] - r->send_ms[i - 1];
    return g;
}

double fleet_status_num(const fleet_result *r, const char *field) {
    char key[96];
    snprintf(key, sizeof(key), "%s=", field);
    for (const char *p = r->status; (p = strstr(p, key)) != NULL; p++)
        if (p == r->status || p[-1] == ' ') return atof(p + strlen(key));
    return -1;
}
