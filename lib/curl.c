/* curl: libcurl integration. A capture (header and bounded body
 * recording for one easy handle), settle-from-capture, and
 * sl_curl_perform(), the governed, deadline-bound retry loop around one
 * request. The capture pieces never block, for libcurl-multi workers. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sluice.h"
#include "verdict.h"

#define CAPTURE_MAX_HEADERS 256
/* An attempt ends this long before the caller's deadline. */
#define CURL_DEADLINE_MARGIN_MS 10

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

/* One header line as libcurl delivers it (CRLF included). A status line
 * starts a new response: interim (1xx) and redirect responses are
 * forgotten, so what remains is the final response's. */
static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    sl_capture *c = ud;
    size_t n = size * nitems;
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        clear_headers(c);
        c->blen = 0;
        c->status = 0;
        size_t i = 5;
        while (i < n && line[i] != ' ') i++;
        while (i < n && line[i] == ' ') i++;
        int st = 0, digits = 0;
        while (i < n && digits < 3 && line[i] >= '0' && line[i] <= '9') {
            st = st * 10 + (line[i++] - '0');
            digits++;
        }
        if (digits == 3) c->status = st;
        return n;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line || is_ows(line[0]) || c->nh == CAPTURE_MAX_HEADERS) return n;
    size_t nl = (size_t)(colon - line);
    size_t vb = nl + 1, ve = n;
    while (vb < ve && is_ows(line[vb])) vb++;
    while (ve > vb && is_ows(line[ve - 1])) ve--;
    char *mem = malloc(nl + 1 + (ve - vb) + 1);
    if (!mem) return n; /* a header lost to OOM only weakens the feedback */
    memcpy(mem, line, nl);
    mem[nl] = '\0';
    memcpy(mem + nl + 1, line + vb, ve - vb);
    mem[nl + 1 + (ve - vb)] = '\0';
    c->hdr[c->nh].name = mem;
    c->hdr[c->nh].value = mem + nl + 1;
    c->nh++;
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

/* Settles g with the verdict's outcome and usage, split where the body
 * said (each dimension is then corrected as its provider counts). */
static int settle_verdict(sl_grant *g, const sl_verdict *v, const sl_capture *c) {
    sl_usage u;
    sl_usage_init(&u);
    u.tokens = v->tokens;
    if (v->tokens >= 0 && v->input_tokens >= 0 && v->output_tokens >= 0 &&
        v->tokens == v->input_tokens + v->output_tokens) {
        u.input_tokens = v->input_tokens;
        u.output_tokens = v->output_tokens;
        u.cache_read_tokens = v->cache_read_tokens;
    }
    return sl_settle_usage(g, &u, v->outcome, c->hdr, c->nh);
}

int sl_settle_capture(sl_grant *g, const sl_capture *c, int curl_code) {
    if (!c) return sl_settle(g, -1, SL_OUTCOME_FAILED, NULL, 0);
    sl_verdict v;
    capture_verdict(c, curl_code, -1, &v);
    return settle_verdict(g, &v, c);
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

static void sleep_until(int64_t mono_ms) {
    struct timespec ts = {(time_t)(mono_ms / 1000), (long)(mono_ms % 1000) * 1000000L};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void reset_easy(void *easy) {
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, NULL);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, NULL);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, NULL);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, stdout);
}

static void finish_report(sl_call_report *out, sl_call_report *r, sl_capture *c) {
    if (out && out->size >= offsetof(sl_call_report, body_len) + sizeof(out->body_len) && c && c->body) {
        r->body = c->body;
        r->body_len = c->blen;
        c->body = NULL;
        c->bcap = c->blen = 0;
    }
    if (out) verdict_write(out, r, sizeof(*r));
}

int sl_curl_perform(sl_gov *gov, void *easy, const sl_call_opts *opts_in, sl_call_report *out) {
    sl_call_report r;
    memset(&r, 0, sizeof(r));
    r.size = sizeof(r);
    r.tokens = -1;
    r.retry_after_ms = -1;
    r.outcome = "error";
    int64_t t0 = sl_now_ms();
    if (out && out->size >= offsetof(sl_call_report, body) + sizeof(out->body)) {
        /* A report reused without sl_call_report_free() would leak. */
        free(out->body);
        out->body = NULL;
    }
    if (!gov || !easy || !opts_in || opts_in->size < sizeof(size_t) || !opts_in->deployment) {
        snprintf(r.message, sizeof(r.message), "gov, easy and opts (with a deployment) are required");
        r.within_deadline = 1;
        finish_report(out, &r, NULL);
        return SL_EINVAL;
    }
    sl_call_opts o;
    verdict_opts(&o, opts_in);
    uint64_t rng = o.seed ? o.seed : (uint64_t)t0 * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&r;
    sl_capture *c = NULL;
    int rc = sl_capture_new(o.max_body, &c);
    if (rc != 0) {
        snprintf(r.message, sizeof(r.message), "out of memory");
        finish_report(out, &r, NULL);
        return rc;
    }
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    for (int retries = 0;; retries++) {
        /* Acquire, leaving an attempt's worth of time before the deadline. */
        sl_request req;
        sl_request_init(&req);
        req.deployment = o.deployment;
        req.tokens = o.tokens;
        req.input_tokens = o.input_tokens;
        req.output_tokens = o.output_tokens;
        req.max_wait_ms = o.max_wait_ms;
        req.lane = o.lane;
        req.tenant = o.tenant;
        req.tag = o.tag;
        if (o.deadline_ms > 0) {
            req.deadline_ms = o.deadline_ms - o.min_attempt_ms;
            if (req.deadline_ms <= sl_now_ms()) {
                rc = SL_EDEADLINE;
                r.outcome = "deadline";
                snprintf(r.message, sizeof(r.message),
                         "'%s': less than min_attempt_ms (%lld) left before the deadline", o.deployment,
                         o.min_attempt_ms);
                break;
            }
        }
        sl_grant *g = NULL;
        rc = sl_acquire(gov, &req, &g);
        /* The acquire ran out of the call's time (its deadline is the call's
         * minus min_attempt_ms): for the call that is the deadline, as when
         * the backoff finds no time left. */
        if (rc == SL_ETIMEDOUT && o.deadline_ms > 0) rc = SL_EDEADLINE;
        if (rc != 0) {
            r.outcome = rc == SL_ESHED ? "shed" : rc == SL_EDEADLINE ? "deadline" : "error";
            r.retry_after_ms = sl_retry_after_ms(gov);
            snprintf(r.message, sizeof(r.message), "%s", sl_errmsg(gov));
            break;
        }
        r.waited_ms += sl_grant_waited_ms(g);
        /* The deployment the attempt goes to (a group's member): its retry
         * budget is the one to ask. The grant is gone after the settle. */
        char member[72];
        snprintf(member, sizeof(member), "%s", sl_grant_deployment(g));

        /* One attempt, bounded by the time left. */
        sl_capture_attach(c, easy);
        if (o.deadline_ms > 0) {
            /* Cut the attempt a little before the deadline, so that the
             * settle and the return also happen within it. */
            int64_t left = o.deadline_ms - sl_now_ms() - CURL_DEADLINE_MARGIN_MS;
            curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)(left > 1 ? left : 1));
        }
        CURLcode cc = curl_easy_perform(easy);
        r.attempts++;
        sl_verdict v;
        capture_verdict(c, (int)cc, o.retry_after_cap_ms, &v);
        settle_verdict(g, &v, c);
        r.http_status = v.http_status;
        r.curl_code = (int)cc;
        r.outcome = sl_class_name(v.cls);
        if (v.pause_ms >= 0) r.retry_after_ms = v.pause_ms;
        if (c->overflow) {
            rc = SL_ETOOBIG;
            snprintf(r.message, sizeof(r.message), "'%s': the response is larger than max_body (%zu bytes)",
                     o.deployment, o.max_body);
            break;
        }
        if (v.cls == SL_CLASS_OK) {
            rc = 0;
            r.tokens = v.tokens;
            r.message[0] = '\0';
            break;
        }

        /* Retry only when the class, the deadline and the fleet allow. */
        int64_t decided = sl_now_ms();
        long long delay = sl_backoff_ms(&o, retries, &v, decided, &rng);
        const char *what = cc != CURLE_OK ? curl_easy_strerror(cc) : "";
        if (delay < 0) {
            rc = (int)delay;
            if (rc == SL_EDEADLINE) r.outcome = "deadline";
            if (rc == SL_EATTEMPTS) r.outcome = "attempts";
            snprintf(r.message, sizeof(r.message), "'%s': %s (HTTP %d%s%s%s%s); %s", o.deployment,
                     sl_class_name(v.cls), v.http_status, v.code[0] ? ", " : "", v.code, *what ? ", " : "",
                     what,
                     rc == SL_EFATAL      ? "not retryable"
                     : rc == SL_EATTEMPTS ? "no attempts left"
                     : v.over_cap         ? "the server's wait is beyond retry_after_cap_ms"
                                          : "no time left before the deadline for another attempt");
            break;
        }
        long long budget_ra = -1;
        int allowed = sl_may_retry(gov, member, &budget_ra);
        if (allowed != 1) {
            rc = allowed == 0 ? SL_ENORETRY : allowed;
            r.outcome = allowed == 0 ? "retry_budget" : "error";
            if (allowed == 0) r.retry_after_ms = budget_ra;
            snprintf(r.message, sizeof(r.message), "'%s': %s (HTTP %d) and %s", o.deployment,
                     sl_class_name(v.cls), v.http_status,
                     allowed == 0 ? "the fleet's retry budget is spent" : sl_errmsg(gov));
            break;
        }
        sleep_until(decided + delay);
    }
    reset_easy(easy);
    int64_t end = sl_now_ms();
    r.elapsed_ms = end - t0;
    r.within_deadline = o.deadline_ms <= 0 || end <= o.deadline_ms;
    finish_report(out, &r, c);
    sl_capture_free(c);
    return rc;
}
