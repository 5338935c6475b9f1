#define _GNU_SOURCE
#include "worker_call.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "proc.h"

__attribute__((format(printf, 2, 3))) static void set_error(worker_call *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->error, sizeof(w->error), fmt, ap);
    va_end(ap);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    worker_call *w = ud;
    size_t len = sz * n, room = sizeof(w->body) - 1 - w->body_len, take = len < room ? len : room;
    memcpy(w->body + w->body_len, p, take);
    w->body_len += take;
    w->body[w->body_len] = '\0';
    return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    worker_call *w = ud;
    size_t len = sz * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        w->nh = 0; /* a new response (after a 100 Continue) */
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || w->nh == WORKER_CALL_MAX_HEADERS) return len;
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1, *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t vl = (size_t)(end - v);
    worker_header *h = &w->h[w->nh];
    if (nl == 0 || nl >= sizeof(h->name) || vl >= sizeof(h->value)) return len;
    for (size_t i = 0; i < nl; i++) h->name[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i]);
    h->name[nl] = '\0';
    memcpy(h->value, v, vl);
    h->value[vl] = '\0';
    w->nh++;
    return len;
}

int worker_call_open(worker_call *w, const char *agent_sock, int resp_timeout_ms, const char *client_id) {
    char idh[192];
    memset(w, 0, sizeof(*w));
    snprintf(idh, sizeof(idh), "x-client-id: %s", client_id);
    w->curl = curl_easy_init();
    w->hdrs = curl_slist_append(NULL, "content-type: application/json");
    if (w->hdrs) w->hdrs = curl_slist_append(w->hdrs, idh);
    if (w->hdrs) w->hdrs = curl_slist_append(w->hdrs, "Expect:");
    w->hdrs_anthropic = curl_slist_append(NULL, "content-type: application/json");
    if (w->hdrs_anthropic) w->hdrs_anthropic = curl_slist_append(w->hdrs_anthropic, idh);
    if (w->hdrs_anthropic) w->hdrs_anthropic = curl_slist_append(w->hdrs_anthropic, "Expect:");
    if (w->hdrs_anthropic) w->hdrs_anthropic = curl_slist_append(w->hdrs_anthropic, "anthropic-version: 2023-06-01");
    if (w->hdrs_anthropic) w->hdrs_anthropic = curl_slist_append(w->hdrs_anthropic, "x-api-key: test");
    if (!w->curl || !w->hdrs || !w->hdrs_anthropic) {
        set_error(w, "cannot set up libcurl");
        return -1;
    }
    curl_easy_setopt(w->curl, CURLOPT_HTTPHEADER, w->hdrs);
    curl_easy_setopt(w->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(w->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(w->curl, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(w->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(w->curl, CURLOPT_HEADERDATA, w);
    curl_easy_setopt(w->curl, CURLOPT_TCP_NODELAY, 1L);
    if (!agent_sock) return 0;
    /* Many workers connect at once: a full accept queue answers EAGAIN,
     * so a refused connect is tried again, within a bound. */
    struct timeval tv = {resp_timeout_ms / 1000, (long)(resp_timeout_ms % 1000) * 1000L};
    double deadline = proc_now_ms() + 10000;
    for (;;) {
        w->rc = redisConnectUnixWithTimeout(agent_sock, tv);
        if (w->rc && !w->rc->err) break;
        set_error(w, "cannot connect to sluiced at %s: %s", agent_sock, w->rc ? w->rc->errstr : "out of memory");
        if (w->rc) redisFree(w->rc);
        w->rc = NULL;
        if (proc_now_ms() > deadline) return -1;
        proc_sleep_ms(10);
    }
    redisSetTimeout(w->rc, tv);
    w->error[0] = '\0';
    return 0;
}

void worker_call_close(worker_call *w) {
    if (w->rc) redisFree(w->rc);
    if (w->curl) curl_easy_cleanup(w->curl);
    curl_slist_free_all(w->hdrs);
    curl_slist_free_all(w->hdrs_anthropic);
    w->rc = NULL;
    w->curl = NULL;
    w->hdrs = NULL;
    w->hdrs_anthropic = NULL;
}

redisReply *worker_call_command(worker_call *w, int argc, const char **argv) {
    if (!w->rc) return NULL;
    return redisCommandArgv(w->rc, argc, argv, NULL);
}

static void copy_str(char *dst, size_t n, const redisReply *r) {
    snprintf(dst, n, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
}

static worker_acquire acquire(worker_call *w, const char *name, long long tokens, long long input, long long output,
                              long long max_wait_ms, const char *tag, const char *tenant);

worker_acquire worker_call_acquire(worker_call *w, const char *name, long long tokens, long long max_wait_ms,
                                   const char *tag, const char *tenant) {
    return acquire(w, name, tokens, -1, -1, max_wait_ms, tag, tenant);
}

worker_acquire worker_call_acquire_split(worker_call *w, const char *name, long long input, long long output,
                                         long long max_wait_ms, const char *tag, const char *tenant) {
    return acquire(w, name, 0, input, output, max_wait_ms, tag, tenant);
}

static worker_acquire acquire(worker_call *w, const char *name, long long tokens, long long input, long long output,
                              long long max_wait_ms, const char *tag, const char *tenant) {
    const char *argv[16];
    char tok[32], in[32], out[32], mw[32];
    int argc = 0;
    argv[argc++] = "ACQUIRE";
    argv[argc++] = name;
    if (input >= 0) {
        snprintf(in, sizeof(in), "%lld", input);
        snprintf(out, sizeof(out), "%lld", output);
        argv[argc++] = "INPUT";
        argv[argc++] = in;
        argv[argc++] = "OUTPUT";
        argv[argc++] = out;
    } else {
        snprintf(tok, sizeof(tok), "%lld", tokens);
        argv[argc++] = "TOKENS";
        argv[argc++] = tok;
    }
    if (max_wait_ms >= 0) {
        snprintf(mw, sizeof(mw), "%lld", max_wait_ms);
        argv[argc++] = "MAXWAIT";
        argv[argc++] = mw;
    }
    if (tag) {
        argv[argc++] = "TAG";
        argv[argc++] = tag;
    }
    if (tenant) {
        argv[argc++] = "TENANT";
        argv[argc++] = tenant;
    }
    if (w->lane) {
        argv[argc++] = "LANE";
        argv[argc++] = w->lane;
    }
    w->grant[0] = w->member[0] = w->endpoint[0] = w->shed_reason[0] = '\0';
    w->waited_ms = w->retry_after_ms = 0;
    redisReply *r = worker_call_command(w, argc, argv);
    worker_acquire res = WORKER_ERROR;
    if (r && r->type == REDIS_REPLY_ARRAY && (r->elements == 3 || r->elements == 5) &&
        r->element[0]->type == REDIS_REPLY_STRING) {
        copy_str(w->grant, sizeof(w->grant), r->element[0]);
        w->waited_ms = r->element[1]->type == REDIS_REPLY_INTEGER ? r->element[1]->integer : 0;
        if (r->elements == 5) {
            copy_str(w->member, sizeof(w->member), r->element[3]);
            copy_str(w->endpoint, sizeof(w->endpoint), r->element[4]);
        } else {
            snprintf(w->member, sizeof(w->member), "%s", name);
        }
        res = WORKER_GRANTED;
    } else if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "SHED ", 5) == 0) {
        /* "SHED <reason> retry-after-ms=<n>" */
        const char *h = strstr(r->str, "retry-after-ms=");
        size_t n = strcspn(r->str + 5, " ");
        snprintf(w->shed_reason, sizeof(w->shed_reason), "%.*s", (int)n, r->str + 5);
        w->retry_after_ms = h ? strtoll(h + 15, NULL, 10) : 1000;
        res = WORKER_SHED;
    } else {
        set_error(w, "ACQUIRE %s: %s", name,
                  r ? (r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply")
                    : (w->rc ? w->rc->errstr : "no connection to sluiced"));
    }
    if (r) freeReplyObject(r);
    return res;
}

static long long usage_field(json_t *u, const char *name) {
    json_t *v = json_object_get(u, name);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* The usage of the last body: the total, and split as sluice settles it
 * (input: all of the prompt, cache reads included). */
static void read_usage(worker_call *w) {
    w->usage_tokens = w->usage_input = w->usage_output = w->usage_cache_read = -1;
    json_t *doc = json_loadb(w->body, w->body_len, 0, NULL);
    json_t *u = doc ? json_object_get(doc, "usage") : NULL;
    if (json_is_object(u)) {
        long long p = usage_field(u, "prompt_tokens"), c = usage_field(u, "completion_tokens");
        long long in = usage_field(u, "input_tokens"), out = usage_field(u, "output_tokens");
        long long cr = usage_field(u, "cache_read_input_tokens"), cc = usage_field(u, "cache_creation_input_tokens");
        if (p >= 0 && c >= 0) {
            w->usage_input = p;
            w->usage_output = c;
            w->usage_cache_read = 0;
        } else if (in >= 0 && out >= 0) {
            /* Anthropic: input_tokens is the part after the cache. */
            w->usage_cache_read = cr > 0 ? cr : 0;
            w->usage_input = in + w->usage_cache_read + (cc > 0 ? cc : 0);
            w->usage_output = out;
        }
        w->usage_tokens = usage_field(u, "total_tokens");
        if (w->usage_tokens < 0 && w->usage_input >= 0) w->usage_tokens = w->usage_input + w->usage_output;
    }
    json_decref(doc);
}

static long post(worker_call *w, const char *url, const char *body, struct curl_slist *hdrs, long timeout_ms) {
    w->status = 0;
    w->usage_tokens = w->usage_input = w->usage_output = w->usage_cache_read = -1;
    w->nh = 0;
    w->body_len = 0;
    w->body[0] = '\0';
    curl_easy_setopt(w->curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(w->curl, CURLOPT_URL, url);
    curl_easy_setopt(w->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(w->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(w->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    CURLcode rc = curl_easy_perform(w->curl);
    if (rc != CURLE_OK) {
        set_error(w, "POST %s: %s", url, curl_easy_strerror(rc));
        return 0;
    }
    curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &w->status);
    if (w->status == 200) read_usage(w);
    return w->status;
}

static long post_chat(worker_call *w, const char *endpoint, const char *deployment, const char *content, int max_tokens,
                      int stream, long timeout_ms) {
    char url[512], body[8192];
    snprintf(url, sizeof(url), "%s/openai/deployments/%s/chat/completions?api-version=2024-06-01", endpoint,
             deployment);
    /* content is the caller's plain text: no quotes or backslashes in it. */
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d%s}", content,
             max_tokens, stream ? ",\"stream\":true" : "");
    return post(w, url, body, w->hdrs, timeout_ms);
}

long worker_call_post(worker_call *w, const char *endpoint, const char *deployment, const char *content, int max_tokens,
                      long timeout_ms) {
    return post_chat(w, endpoint, deployment, content, max_tokens, 0, timeout_ms);
}

long worker_call_post_stream(worker_call *w, const char *endpoint, const char *deployment, const char *content,
                             int max_tokens, long timeout_ms) {
    return post_chat(w, endpoint, deployment, content, max_tokens, 1, timeout_ms);
}

long worker_call_post_v1(worker_call *w, const char *endpoint, const char *model, const char *content, int max_tokens,
                         long timeout_ms) {
    char url[512], body[8192];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", endpoint);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d}", model,
             content, max_tokens);
    return post(w, url, body, w->hdrs, timeout_ms);
}

long worker_call_post_messages(worker_call *w, const char *endpoint, const char *model, const char *content,
                               int max_tokens, long timeout_ms) {
    char url[512], body[8192];
    snprintf(url, sizeof(url), "%s/v1/messages", endpoint);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", model,
             max_tokens, content);
    return post(w, url, body, w->hdrs_anthropic, timeout_ms);
}

const char *worker_call_header(const worker_call *w, const char *name) {
    for (int i = 0; i < w->nh; i++)
        if (strcmp(w->h[i].name, name) == 0) return w->h[i].value;
    return NULL;
}

static int is_feedback_header(const char *name) {
    return strncmp(name, "retry-after", 11) == 0 || strncmp(name, "x-ratelimit-", 12) == 0 ||
           strncmp(name, "anthropic-ratelimit-", 20) == 0;
}

int worker_call_settle(worker_call *w, const char *outcome) {
    const char *argv[12 + 3 * WORKER_CALL_MAX_HEADERS];
    char tok[32], in[32], out[32], cr[32];
    int argc = 0, cancelled = strcmp(outcome, "cancelled") == 0;
    argv[argc++] = "SETTLE";
    argv[argc++] = w->grant;
    if (!cancelled && w->status == 200 && w->usage_input >= 0) {
        snprintf(in, sizeof(in), "%lld", w->usage_input);
        snprintf(out, sizeof(out), "%lld", w->usage_output);
        snprintf(cr, sizeof(cr), "%lld", w->usage_cache_read);
        argv[argc++] = "INPUT";
        argv[argc++] = in;
        argv[argc++] = "OUTPUT";
        argv[argc++] = out;
        argv[argc++] = "CACHE_READ";
        argv[argc++] = cr;
    } else if (!cancelled && w->status == 200 && w->usage_tokens >= 0) {
        snprintf(tok, sizeof(tok), "%lld", w->usage_tokens);
        argv[argc++] = "TOKENS";
        argv[argc++] = tok;
    }
    argv[argc++] = "STATUS";
    argv[argc++] = outcome;
    for (int i = 0; !cancelled && i < w->nh; i++) {
        if (!is_feedback_header(w->h[i].name)) continue;
        argv[argc++] = "HEADER";
        argv[argc++] = w->h[i].name;
        argv[argc++] = w->h[i].value;
    }
    redisReply *r = worker_call_command(w, argc, argv);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        set_error(w, "SETTLE %s: %s", w->grant,
                  r ? (r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply")
                    : (w->rc ? w->rc->errstr : "no connection to sluiced"));
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}
