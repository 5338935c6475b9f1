/* verdict: the public face of lib/http for one response (classify, the
 * pause its headers ask for, the usage its body reports) and the
 * deadline-aware backoff between attempts. Pure functions. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backoff.h"
#include "classify.h"
#include "ratelimit.h"
#include "usage.h"
#include "verdict.h"

#define SL_CLASS_CHECK(name, text)                                                                                     \
    _Static_assert((int)SL_CLASS_##name == (int)CLASSIFY_##name, "sl_class " #name " drifted");
SL_CLASS_MAP(SL_CLASS_CHECK)
#undef SL_CLASS_CHECK

const char *sl_class_name(int cls) {
    if (cls < 0 || cls >= SL_CLASS__COUNT) return "unknown";
    return classify_name((classify_class)cls);
}

long long sl_usage_tokens(const char *body, size_t len) { return usage_tokens(body, len); }

int sl_usage_of(const char *body, size_t len, sl_usage *out) {
    if (!out || out->size < sizeof(size_t) || (len && !body)) return SL_EINVAL;
    usage_rec u;
    int rc = usage_split(body, len, &u);
    verdict_usage_write(out, &u);
    return rc == 0 ? 0 : SL_EUNKNOWN;
}

void verdict_usage_read(usage_rec *out, const sl_usage *in) {
    sl_usage full;
    sl_usage_init(&full);
    if (in && in->size >= sizeof(size_t)) verdict_read(&full, sizeof(full), in);
    *out = USAGE_REC_UNKNOWN;
    out->tokens = full.tokens < 0 ? -1 : full.tokens;
    out->input = full.input_tokens < 0 ? -1 : full.input_tokens;
    out->output = full.output_tokens < 0 ? -1 : full.output_tokens;
    out->cache_read = full.cache_read_tokens < 0 ? -1 : full.cache_read_tokens;
}

void verdict_usage_write(sl_usage *out, const usage_rec *in) {
    sl_usage full;
    sl_usage_init(&full);
    full.tokens = in->tokens;
    full.input_tokens = in->input;
    full.output_tokens = in->output;
    full.cache_read_tokens = in->cache_read;
    verdict_write(out, &full, sizeof(full));
}

void verdict_write(void *out, const void *full, size_t full_size) {
    size_t n = *(const size_t *)out;
    if (n > full_size) n = full_size;
    if (n > sizeof(size_t))
        memcpy((char *)out + sizeof(size_t), (const char *)full + sizeof(size_t), n - sizeof(size_t));
}

void verdict_read(void *full, size_t full_size, const void *in) {
    size_t n = *(const size_t *)in;
    if (n > full_size) n = full_size;
    if (n > sizeof(size_t))
        memcpy((char *)full + sizeof(size_t), (const char *)in + sizeof(size_t), n - sizeof(size_t));
}

void sl_usage_init_size(sl_usage *u, size_t size) {
    if (!u || size < sizeof(size_t)) return;
    memset(u, 0, size);
    u->size = size;
    long long *f = &u->tokens;
    for (size_t i = 0; i < 4 && offsetof(sl_usage, tokens) + (i + 1) * sizeof(long long) <= size; i++) f[i] = -1;
}

void sl_verdict_init_size(sl_verdict *v, size_t size) {
    if (!v || size < sizeof(size_t)) return;
    memset(v, 0, size);
    v->size = size;
}

void sl_call_opts_init_size(sl_call_opts *o, size_t size) {
    if (!o || size < sizeof(size_t)) return;
    memset(o, 0, size);
    o->size = size;
    if (size >= offsetof(sl_call_opts, max_wait_ms) + sizeof(o->max_wait_ms)) o->max_wait_ms = -1;
    if (size >= offsetof(sl_call_opts, output_tokens) + sizeof(o->output_tokens))
        o->input_tokens = o->output_tokens = -1;
}

void verdict_opts(sl_call_opts *full, const sl_call_opts *in) {
    sl_call_opts_init(full);
    if (in) verdict_read(full, sizeof(*full), in);
    full->size = sizeof(*full);
    if (full->max_attempts <= 0) full->max_attempts = 5;
    if (full->backoff_base_ms <= 0) full->backoff_base_ms = 500;
    if (full->backoff_cap_ms <= 0) full->backoff_cap_ms = 30000;
    if (full->retry_after_cap_ms <= 0) full->retry_after_cap_ms = RETRY_AFTER_DEFAULT_CAP_MS;
    if (full->min_attempt_ms <= 0) full->min_attempt_ms = 1000;
    if (full->max_body == 0) full->max_body = 16 * 1024 * 1024;
}

static int64_t wall_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void verdict_compute(int status, int timed_out, const char *body, size_t body_len, const sl_header *h, size_t nh,
                     long long cap_ms, sl_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->size = sizeof(*v);
    v->input_tokens = v->output_tokens = v->cache_read_tokens = -1;
    classify_input in = {0};
    in.status = status;
    in.transport = status == 0 ? (timed_out ? CLASSIFY_NET_TIMEOUT : CLASSIFY_NET_ERROR) : CLASSIFY_NET_NONE;
    in.body = body;
    in.body_len = body ? body_len : 0;
    ratelimit_feedback fb;
    ratelimit_init(&fb, cap_ms > 0 ? cap_ms : -1);
    int64_t now = wall_now_ms();
    for (size_t i = 0; i < nh; i++) {
        if (!h[i].name || !h[i].value) continue;
        size_t nl = strlen(h[i].name), vl = strlen(h[i].value);
        if (strcasecmp(h[i].name, "x-should-retry") == 0) {
            in.should_retry = h[i].value;
            in.should_retry_len = vl;
        }
        ratelimit_add_header(&fb, h[i].name, nl, h[i].value, vl, now);
    }
    classify_result cr;
    classify_response(&in, &cr);
    bool over = false;
    v->cls = (int)cr.cls;
    v->retryable = cr.retryable;
    v->http_status = status;
    /* A quota stop's reset, like a 429's, says when the deployment may be
     * used again: the settle takes it out (or pauses it) until then. */
    v->pause_ms =
        ratelimit_settle_pause_ms(&fb, cr.cls == CLASSIFY_RATE_LIMITED || cr.cls == CLASSIFY_QUOTA_EXHAUSTED, &over);
    /* No header said how long (Gemini's 429): its body's retryDelay. */
    if (v->pause_ms < 0 && cr.cls == CLASSIFY_RATE_LIMITED && cr.retry_delay_ms >= 0) {
        v->pause_ms = cr.retry_delay_ms;
        over = cap_ms > 0 && v->pause_ms > cap_ms;
    }
    v->over_cap = over;
    snprintf(v->code, sizeof(v->code), "%s", cr.code);
    switch (cr.cls) {
    case CLASSIFY_OK: {
        v->outcome = SL_OUTCOME_OK;
        usage_rec u;
        usage_split(body, in.body_len, &u);
        v->tokens = u.tokens;
        v->input_tokens = u.input;
        v->output_tokens = u.output;
        v->cache_read_tokens = u.cache_read;
        break;
    }
    case CLASSIFY_RATE_LIMITED:
        v->outcome = SL_OUTCOME_THROTTLED;
        v->tokens = 0; /* refused before any work */
        break;
    case CLASSIFY_QUOTA_EXHAUSTED:
        /* Out of quota for the whole fleet until the reset, and never
         * retried (classify: not retryable, whatever x-should-retry says). */
        v->outcome = SL_OUTCOME_QUOTA;
        v->tokens = 0;
        break;
    case CLASSIFY_BAD_REQUEST:
    case CLASSIFY_AUTH:
        v->outcome = SL_OUTCOME_FAILED;
        v->tokens = 0;
        break;
    default: /* 5xx, timeouts, transport: the work may have been done */
        v->outcome = SL_OUTCOME_FAILED;
        v->tokens = -1;
        break;
    }
}

int sl_verdict_of(int status, int timed_out, const char *body, size_t body_len, const sl_header *headers,
                  size_t nheaders, long long retry_after_cap_ms, sl_verdict *out) {
    if (!out || out->size < sizeof(size_t) || (nheaders && !headers) || status < 0) return SL_EINVAL;
    sl_verdict v;
    verdict_compute(status, timed_out, body, body_len, headers, nheaders, retry_after_cap_ms, &v);
    verdict_write(out, &v, sizeof(v));
    return 0;
}

long long sl_backoff_ms(const sl_call_opts *o_in, int attempt, const sl_verdict *v_in, int64_t now_ms, uint64_t *rng) {
    if (!o_in || !v_in || o_in->size < sizeof(size_t) || v_in->size < sizeof(size_t) || attempt < 0) return SL_EINVAL;
    sl_call_opts o;
    verdict_opts(&o, o_in);
    sl_verdict v;
    sl_verdict_init(&v);
    v.pause_ms = -1;
    verdict_read(&v, sizeof(v), v_in);
    if (!v.retryable) return SL_EFATAL;
    if (attempt + 1 >= o.max_attempts) return SL_EATTEMPTS;
    backoff_policy p;
    backoff_policy_init(&p);
    p.base_ms = o.backoff_base_ms;
    p.cap_ms = o.backoff_cap_ms;
    p.server_wait_cap_ms = o.retry_after_cap_ms;
    p.min_attempt_ms = o.min_attempt_ms;
    p.max_attempts = 0;
    backoff_decision d;
    backoff_next(&p, attempt, true, v.pause_ms, now_ms, o.deadline_ms > 0 ? o.deadline_ms : -1, rng, &d);
    if (d.verdict == BACKOFF_RETRY) return d.delay_ms;
    if (d.verdict == BACKOFF_GIVE_UP_ATTEMPTS) return SL_EATTEMPTS;
    if (d.verdict == BACKOFF_GIVE_UP_NOT_RETRYABLE) return SL_EFATAL;
    return SL_EDEADLINE; /* the deadline, or a server wait beyond its cap */
}
