/* curl: libcurl integration. A capture (header and bounded body
 * recording for one easy handle), settle-from-capture, and
 * sl_curl_perform(), the governed call (gcall.c) run to its end on the
 * calling thread. The capture pieces never block, for libcurl-multi
 * workers. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gcall.h"
#include "gov.h"
#include "ratelimit.h"
#include "sluice.h"
#include "timeutil.h"
#include "verdict.h"

#define CAPTURE_MAX_HEADERS 256

struct sl_capture {
    size_t max_body;
    int status;
    int overflow;
    char *body;
    size_t blen, bcap;
    sl_header hdr[CAPTURE_MAX_HEADERS]; /* name and value share one allocation */
    size_t nh;
};

/* ---- capture ---------------------------------------------------------------- */

static void clear_headers(sl_capture *c) {
    for (size_t i = 0; i < c->nh; i++) free((char *)c->hdr[i].name);
    c->nh = 0;
}

void sl_capture_reset(sl_capture *c) {
    if (!c) return;
    clear_headers(c);
    c->status = 0;
    c->overflow = 0;
    c->blen = 0;
    if (c->body) c->body[0] = '\0';
}

int sl_capture_new(size_t max_body, sl_capture **out) {
    if (!out) return SL_EINVAL;
    *out = calloc(1, sizeof(**out));
    if (!*out) return SL_ENOMEM;
    (*out)->max_body = max_body ? max_body : 16 * 1024 * 1024;
    return 0;
}

void sl_capture_free(sl_capture *c) {
    if (!c) return;
    clear_headers(c);
    free(c->body);
    free(c);
}

static int is_ows(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

int curl_header_line(const char *line, size_t n, int *status, char **name, char **value) {
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        size_t i = 5;
        while (i < n && line[i] != ' ') i++;
        while (i < n && line[i] == ' ') i++;
        int st = 0, digits = 0;
        while (i < n && digits < 3 && line[i] >= '0' && line[i] <= '9') {
            st = st * 10 + (line[i++] - '0');
            digits++;
        }
        *status = digits == 3 ? st : 0;
        return CURL_LINE_STATUS;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line || is_ows(line[0])) return CURL_LINE_OTHER;
    size_t nl = (size_t)(colon - line), vb = nl + 1, ve = n;
    while (vb < ve && is_ows(line[vb])) vb++;
    while (ve > vb && is_ows(line[ve - 1])) ve--;
    char *mem = malloc(nl + 1 + (ve - vb) + 1);
    if (!mem) return CURL_LINE_OTHER; /* a header lost to OOM only weakens the feedback */
    memcpy(mem, line, nl);
    mem[nl] = '\0';
    memcpy(mem + nl + 1, line + vb, ve - vb);
    mem[nl + 1 + (ve - vb)] = '\0';
    *name = mem;
    *value = mem + nl + 1;
    return CURL_LINE_FIELD;
}

/* One header line as libcurl delivers it (CRLF included). A status line
 * starts a new response: interim (1xx) and redirect responses are
 * forgotten, so what remains is the final response's. */
static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    sl_capture *c = ud;
    size_t n = size * nitems;
    int st;
    char *name, *value;
    switch (curl_header_line(line, n, &st, &name, &value)) {
    case CURL_LINE_STATUS:
        clear_headers(c);
        c->blen = 0;
        c->status = st;
        break;
    case CURL_LINE_FIELD:
        if (c->nh == CAPTURE_MAX_HEADERS) {
            free(name);
            break;
        }
        c->hdr[c->nh].name = name;
        c->hdr[c->nh].value = value;
        c->nh++;
        break;
    default: break;
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    sl_capture *c = ud;
    size_t n = size * nmemb;
    if (n > c->max_body - c->blen) {
        c->overflow = 1;
        return 0; /* aborts the transfer (CURLE_WRITE_ERROR) */
    }
    if (c->blen + n + 1 > c->bcap) {
        size_t cap = c->bcap ? c->bcap : 4096;
        while (cap < c->blen + n + 1) cap *= 2;
        char *nb = realloc(c->body, cap);
        if (!nb) return 0;
        c->body = nb;
        c->bcap = cap;
    }
    memcpy(c->body + c->blen, data, n);
    c->blen += n;
    c->body[c->blen] = '\0';
    return n;
}

int sl_capture_attach(sl_capture *c, void *easy) {
    if (!c || !easy) return SL_EINVAL;
    sl_capture_reset(c);
    if (curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_HEADERDATA, c) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, c) != CURLE_OK)
        return SL_EINVAL;
    return 0;
}

int sl_capture_overflow(const sl_capture *c) { return c ? c->overflow : 0; }
int sl_capture_status(const sl_capture *c) { return c ? c->status : 0; }

const char *sl_capture_body(const sl_capture *c, size_t *len) {
    if (len) *len = c ? c->blen : 0;
    return (c && c->body) ? c->body : "";
}

const char *sl_capture_header(const sl_capture *c, const char *name) {
    if (!c || !name) return NULL;
    for (size_t i = c->nh; i-- > 0;)
        if (strcasecmp(c->hdr[i].name, name) == 0) return c->hdr[i].value;
    return NULL;
}

size_t sl_capture_headers(const sl_capture *c, const sl_header **out) {
    if (out) *out = c ? c->hdr : NULL;
    return c ? c->nh : 0;
}

static void capture_verdict(const sl_capture *c, int curl_code, long long cap_ms, sl_verdict *v) {
    int status = c->status;
    int timed_out = curl_code == CURLE_OPERATION_TIMEDOUT;
    /* A transfer that failed before the response was complete is a
     * transport failure, unless the body was only cut by our own limit. */
    if (curl_code != CURLE_OK && !c->overflow) status = 0;
    verdict_compute(status, timed_out, c->body, c->blen, c->hdr, c->nh, cap_ms, v);
    if (c->overflow) v->tokens = v->input_tokens = v->output_tokens = v->cache_read_tokens = -1;
}

int sl_capture_verdict(const sl_capture *c, int curl_code, long long retry_after_cap_ms, sl_verdict *out) {
    if (!c || !out || out->size < sizeof(size_t)) return SL_EINVAL;
    sl_verdict v;
    capture_verdict(c, curl_code, retry_after_cap_ms, &v);
    verdict_write(out, &v, sizeof(v));
    return 0;
}

static int is_retry_after(const char *name) {
    return strcasecmp(name, "retry-after") == 0 || strcasecmp(name, "retry-after-ms") == 0 ||
           strcasecmp(name, "x-ms-retry-after-ms") == 0;
}

/* The wait a throttled verdict read from the body (Gemini's 429: no
 * Retry-After, a google.rpc.RetryInfo retryDelay) where the headers the
 * settle is given ask none: the settle reads headers only (the agent
 * parses them again), so it goes to it as a retry-after-ms header; -1
 * when there is none to add. */
static long long body_pause_ms(const sl_verdict *v, const sl_header *h, size_t n) {
    if (v->outcome != SL_OUTCOME_THROTTLED || v->pause_ms < 0) return -1;
    ratelimit_feedback fb;
    ratelimit_init(&fb, -1);
    int64_t now = (int64_t)wall_clock_ms();
    for (size_t i = 0; i < n; i++)
        if (h[i].name && h[i].value)
            ratelimit_add_header(&fb, h[i].name, strlen(h[i].name), h[i].value, strlen(h[i].value), now);
    return ratelimit_settle_pause_ms(&fb, true, NULL) >= 0 ? -1 : v->pause_ms;
}

/* Settles g with the verdict's outcome and usage, split where the body
 * said (each dimension is then corrected as its provider counts), and the
 * headers settle_headers lets through, with the body's wait where they
 * ask none (body_pause_ms). */
int curl_settle_verdict(sl_grant *g, const sl_verdict *v, const sl_capture *c, int settle_headers) {
    sl_usage u;
    sl_usage_init(&u);
    u.tokens = v->tokens;
    if (v->tokens >= 0 && v->input_tokens >= 0 && v->output_tokens >= 0 &&
        v->tokens == v->input_tokens + v->output_tokens) {
        u.input_tokens = v->input_tokens;
        u.output_tokens = v->output_tokens;
        u.cache_read_tokens = v->cache_read_tokens;
    }
    if (settle_headers == SL_SETTLE_HEADERS_NONE) return sl_settle_usage(g, &u, v->outcome, NULL, 0);
    sl_header keep[CAPTURE_MAX_HEADERS + 1];
    size_t k = 0;
    for (size_t i = 0; i < c->nh; i++)
        if (settle_headers != SL_SETTLE_HEADERS_RETRY_AFTER || is_retry_after(c->hdr[i].name)) keep[k++] = c->hdr[i];
    char ms[24];
    long long bp = body_pause_ms(v, keep, k);
    if (bp >= 0) {
        snprintf(ms, sizeof(ms), "%lld", bp);
        keep[k++] = (sl_header){"retry-after-ms", ms};
    }
    return sl_settle_usage(g, &u, v->outcome, k ? keep : NULL, k);
}

char *curl_capture_take(sl_capture *c, size_t *len) {
    char *b = c->body;
    *len = b ? c->blen : 0;
    c->body = NULL;
    c->bcap = c->blen = 0;
    return b;
}

int sl_settle_capture(sl_grant *g, const sl_capture *c, int curl_code) {
    if (!c) return sl_settle(g, -1, SL_OUTCOME_FAILED, NULL, 0);
    sl_verdict v;
    capture_verdict(c, curl_code, -1, &v);
    return curl_settle_verdict(g, &v, c, SL_SETTLE_HEADERS_ALL);
}

/* ---- the report --------------------------------------------------------------- */

void sl_call_report_init_size(sl_call_report *r, size_t size) {
    if (!r || size < sizeof(size_t)) return;
    memset(r, 0, size);
    r->size = size;
}

void sl_call_report_free(sl_call_report *r) {
    if (!r || r->size < offsetof(sl_call_report, body) + sizeof(r->body)) return;
    free(r->body);
    r->body = NULL;
    if (r->size >= offsetof(sl_call_report, body_len) + sizeof(r->body_len)) r->body_len = 0;
}

/* ---- sl_curl_perform ------------------------------------------------------------------ */

void curl_reset_easy(void *easy) {
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, NULL);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, NULL);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, NULL);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, stdout);
}

/* Copies r (the library's) into the caller's report, as far as its size
 * reaches; the body goes along when the caller's report has room for it,
 * and is freed otherwise. */
static void finish_report(sl_call_report *out, sl_call_report *r) {
    if (!out || out->size < offsetof(sl_call_report, body_len) + sizeof(out->body_len)) {
        free(r->body);
        r->body = NULL;
        r->body_len = 0;
    }
    if (out) verdict_write(out, r, sizeof(*r));
}

/* The private loop of one sl_curl_perform(): the calling thread waits on a
 * condition variable for a wake-up (an answer from the governor's thread)
 * or its timer. No sockets: the caller is in blocking mode, its transfers
 * are curl_easy_perform() on the caller's handle. */
typedef struct block_loop {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;   /* under mu */
    int64_t due; /* the timer, loop thread only; -1 none */
    int done;    /* the call's completion ran */
    int status;
    sl_call_report rep;
} block_loop;

static int block_watch(void *data, int fd, int events, void **sock) {
    (void)data, (void)fd, (void)events, (void)sock;
    return SL_EINVAL; /* a blocking caller has no multi handle */
}

static void block_timer(void *data, long long ms) {
    block_loop *bl = data;
    bl->due = ms < 0 ? -1 : sl_now_ms() + ms;
}

static void block_wake(void *data) {
    block_loop *bl = data;
    pthread_mutex_lock(&bl->mu);
    bl->woken = 1;
    pthread_cond_signal(&bl->cv);
    pthread_mutex_unlock(&bl->mu);
}

static void block_done(void *arg, sl_call *call, int status, sl_call_report *report) {
    (void)call;
    block_loop *bl = arg;
    bl->status = status;
    bl->rep = *report;
    report->body = NULL; /* moved */
    bl->done = 1;
}

/* Runs c's dispatches on this thread until the call is done. */
static void block_run(block_loop *bl, sl_caller *c) {
    while (!bl->done) {
        pthread_mutex_lock(&bl->mu);
        while (!bl->woken && (bl->due < 0 || sl_now_ms() < bl->due)) {
            if (bl->due < 0) {
                pthread_cond_wait(&bl->cv, &bl->mu);
            } else {
                struct timespec ts = {(time_t)(bl->due / 1000), (long)(bl->due % 1000) * 1000000L};
                pthread_cond_timedwait(&bl->cv, &bl->mu, &ts);
            }
        }
        int woken = bl->woken;
        bl->woken = 0;
        pthread_mutex_unlock(&bl->mu);
        if (woken) sl_caller_wake(c);
        if (!bl->done && bl->due >= 0 && sl_now_ms() >= bl->due) {
            bl->due = -1;
            sl_caller_timer(c);
        }
    }
}

static int block_init(block_loop *bl) {
    memset(bl, 0, sizeof(*bl));
    bl->due = -1;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&bl->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) return -1;
    if (pthread_mutex_init(&bl->mu, NULL) != 0) {
        pthread_cond_destroy(&bl->cv);
        return -1;
    }
    return 0;
}

/* The report of a call that could not start. */
static int perform_refused(sl_call_report *out, int rc, const char *msg) {
    sl_call_report r;
    sl_call_report_init(&r);
    r.tokens = r.input_tokens = r.output_tokens = r.cache_read_tokens = -1;
    r.retry_after_ms = -1;
    r.cls = -1;
    r.outcome = "error";
    r.within_deadline = 1;
    snprintf(r.message, sizeof(r.message), "%s", msg);
    finish_report(out, &r);
    return rc;
}

int sl_curl_perform(sl_gov *gov, void *easy, const sl_call_opts *opts, sl_call_report *out) {
    if (out && out->size >= offsetof(sl_call_report, body) + sizeof(out->body)) {
        /* A report reused without sl_call_report_free() would leak. */
        free(out->body);
        out->body = NULL;
    }
    if (!gov || !easy || !opts || opts->size < sizeof(size_t) || !opts->deployment)
        return perform_refused(out, SL_EINVAL, "gov, easy and opts (with a deployment) are required");
    /* Waiting here would stop the thread that brings the answers. */
    if (gov_on_own_thread(gov))
        return perform_refused(out, SL_EINVAL,
                               "blocking call from a governor callback (it would deadlock); use sl_call_start");
    block_loop bl;
    if (block_init(&bl) != 0) return perform_refused(out, SL_ENOMEM, "out of memory");
    sl_caller *c = NULL;
    int rc = caller_create(gov, 1, &c);
    if (rc == 0) {
        sl_loop l;
        sl_loop_init(&l);
        l.data = &bl;
        l.watch = block_watch;
        l.timer = block_timer;
        l.wake = block_wake;
        sl_caller_attach(c, &l);
        sl_call_http h;
        sl_call_http_init(&h);
        h.easy = easy;
        rc = sl_call_start(c, opts, &h, block_done, &bl, NULL);
    }
    if (rc == 0) block_run(&bl, c);
    sl_caller_free(c);
    pthread_mutex_destroy(&bl.mu);
    pthread_cond_destroy(&bl.cv);
    if (rc != 0) return perform_refused(out, rc, rc == SL_ENOMEM ? "out of memory" : sl_strerror(rc));
    finish_report(out, &bl.rep);
    return bl.status;
}
