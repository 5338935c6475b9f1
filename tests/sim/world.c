/* world: see world.h. Every rule here is a provider's, from its own
 * documentation as docs/providers.md ("The simulator's provider worlds")
 * cites it; nothing is taken from lua/ or lib/. */
#include "world.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_MS 60000.0
#define DAY_MS INT64_C(86400000)
#define HOUR_MS INT64_C(3600000)
#define EPS 1e-9

/* ---- time in Los Angeles (a fixed rule, no tz database) ---- */

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil) and back. */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int weekday(int64_t days) { return (int)(((days % 7) + 11) % 7); } /* 0 Sunday; 1970-01-01 a Thursday */

static int64_t nth_sunday(int64_t y, int month, int nth) {
    int64_t first = days_from_civil(y, month, 1);
    return first + (7 - weekday(first)) % 7 + 7 * (nth - 1);
}

/* Los Angeles' offset from UTC at unix_ms: PDT (-7 h) from the second
 * Sunday of March 02:00 PST (10:00 UTC) to the first Sunday of November
 * 02:00 PDT (09:00 UTC), PST (-8 h) otherwise. */
static int64_t pacific_offset(int64_t unix_ms) {
    int64_t y;
    int m, d;
    civil_from_days(floor_div(unix_ms - 8 * HOUR_MS, DAY_MS), &y, &m, &d);
    int64_t start = nth_sunday(y, 3, 2) * DAY_MS + 10 * HOUR_MS;
    int64_t end = nth_sunday(y, 11, 1) * DAY_MS + 9 * HOUR_MS;
    return unix_ms >= start && unix_ms < end ? -7 * HOUR_MS : -8 * HOUR_MS;
}

int64_t sim_pacific_day(int64_t unix_ms) { return floor_div(unix_ms + pacific_offset(unix_ms), DAY_MS); }

int64_t sim_pacific_next_midnight(int64_t unix_ms) {
    int64_t next = sim_pacific_day(unix_ms) + 1;
    int64_t pdt = next * DAY_MS + 7 * HOUR_MS;
    return pacific_offset(pdt) == -7 * HOUR_MS ? pdt : next * DAY_MS + 8 * HOUR_MS;
}

/* ---- header forms ---- */

int sim_fmt_duration(char *buf, size_t n, double ms) {
    long long t = llround(ms < 0 ? 0 : ms);
    if (t == 0) return snprintf(buf, n, "0s");
    if (t < 1000) return snprintf(buf, n, "%lldms", t);
    long long h = t / 3600000, m = (t / 60000) % 60, s = (t / 1000) % 60, frac = t % 1000;
    char hm[48] = "";
    if (h > 0) snprintf(hm, sizeof(hm), "%lldh%lldm", h, m);
    else if (m > 0) snprintf(hm, sizeof(hm), "%lldm", m);
    if (frac == 0) return snprintf(buf, n, "%s%llds", hm, s);
    char f[8];
    snprintf(f, sizeof(f), "%03lld", frac);
    for (int i = 2; i > 0 && f[i] == '0'; i--) f[i] = '\0';
    return snprintf(buf, n, "%s%lld.%ss", hm, s, f);
}

int sim_fmt_rfc3339(char *buf, size_t n, int64_t unix_ms) {
    int64_t days = floor_div(unix_ms, DAY_MS), sod = (unix_ms - days * DAY_MS) / 1000;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    return snprintf(buf, n, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y, m, d, (int)(sod / 3600),
                    (int)(sod / 60 % 60), (int)(sod % 60));
}

/* ---- randomness: splitmix64, the only source ---- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double unit_of(uint64_t x) { return (double)(x >> 11) * 0x1.0p-53; }

/* ---- limiters: a bucket, a window, a day ---- */

typedef struct bucket {
    double rate; /* per ms */
    double cap, level, last;
} bucket;

typedef struct wentry {
    double t, amt;
} wentry;

typedef struct window {
    double len_ms, limit;
    int enforce;
    wentry *q;
    size_t head, n, capq;
    double sum;
} window;

enum { LIM_NONE = 0, LIM_BUCKET, LIM_WINDOWS, LIM_DAY };

typedef struct dimstate {
    int kind;
    double configured; /* per minute (DAY: per day) */
    bucket b;
    window win[3];
    int nwin;
    long long day_count;
    int64_t day;
    double day_limit;
} dimstate;

enum { EV_END = 0, EV_NB, EV_CHANGE };

typedef struct event {
    double t;
    uint64_t seq;
    int kind;
    size_t idx;
} event;

/* What a request is, as the provider sees it. */
typedef struct facts {
    long long chars, prompt, cached, max_tokens, output;
} facts;

typedef struct provider_row provider_row;

struct sim_world {
    sim_world_cfg cfg;
    const provider_row *row;
    uint64_t seed, rng;
    double now, factor;
    dimstate d[SIM_DIMS];
    event *heap;
    size_t nheap, capheap;
    uint64_t evseq, reqseq;
    sim_entry *led;
    size_t nled, capled;
    int stray_next;
    size_t clock_errors;
    uint64_t nb_sent[SIM_MAX_NEIGHBOURS];
    double nb_allow[SIM_MAX_NEIGHBOURS]; /* a capped greedy neighbour's requests not yet sent */
    double nb_last[SIM_MAX_NEIGHBOURS];  /* its last tick */
};

static uint64_t next_rand(sim_world *w) {
    w->rng += UINT64_C(0x9e3779b97f4a7c15);
    return mix64(w->rng);
}

static void bucket_refill(bucket *b, double t, double step) {
    if (t <= b->last) return;
    double add = step > 0 ? (floor(t / step) - floor(b->last / step)) * step * b->rate : (t - b->last) * b->rate;
    if (b->level < b->cap) b->level = fmin(b->cap, b->level + add);
    b->last = t;
}

/* The ms from t until the bucket holds need (60 s when it never can). */
static double bucket_wait(const bucket *b, double need, double step) {
    if (b->level + EPS >= need) return 0;
    if (need > b->cap + EPS || b->rate <= 0) return MIN_MS;
    double wait = (need - b->level) / b->rate;
    if (step > 0) wait = ceil((b->last + wait) / step) * step - b->last;
    return wait;
}

static double window_id(const window *wi, double t, int64_t epoch) { return floor(((double)epoch + t) / wi->len_ms); }

static void window_expire(window *wi, double t, sim_window_mode mode, int64_t epoch) {
    while (wi->n > 0) {
        const wentry *e = &wi->q[wi->head];
        int old =
            mode == SIM_WINDOW_FIXED ? window_id(wi, e->t, epoch) < window_id(wi, t, epoch) : e->t <= t - wi->len_ms;
        if (!old) break;
        wi->sum -= e->amt;
        wi->head++;
        wi->n--;
    }
    if (wi->n == 0) {
        wi->head = 0;
        wi->sum = 0; /* no drift from the subtractions */
    }
}

static int window_add(window *wi, double t, double amt) {
    if (wi->head + wi->n == wi->capq) {
        if (wi->head > 0) {
            memmove(wi->q, wi->q + wi->head, wi->n * sizeof(*wi->q));
            wi->head = 0;
        }
        if (wi->n == wi->capq) {
            size_t cap = wi->capq ? wi->capq * 2 : 64;
            wentry *q = realloc(wi->q, cap * sizeof(*q));
            if (!q) return -1;
            wi->q = q;
            wi->capq = cap;
        }
    }
    wi->q[wi->head + wi->n++] = (wentry){t, amt};
    wi->sum += amt;
    return 0;
}

/* The ms from t until the (expired) window has room for need. */
static double window_wait(const window *wi, double t, double need, sim_window_mode mode, int64_t epoch) {
    if (wi->limit - wi->sum + EPS >= need) return 0;
    if (mode == SIM_WINDOW_FIXED || need > wi->limit + EPS)
        return (window_id(wi, t, epoch) + 1) * wi->len_ms - (double)epoch - t;
    double s = wi->sum;
    for (size_t i = 0; i < wi->n; i++) {
        const wentry *e = &wi->q[wi->head + i];
        s -= e->amt;
        if (wi->limit - s + EPS >= need) return e->t + wi->len_ms - t;
    }
    return wi->len_ms;
}

/* ---- the providers: what each charges when (a table, one row each) ---- */

struct provider_row {
    const char *name;
    int kind[SIM_DIMS]; /* the limiter of each dimension it has */
    /* The charges at admission, what must be in the bucket to be admitted
     * (need), and the correction when the response ends. */
    void (*charge)(const sim_world *w, const facts *f, long long *charge, long long *need, long long *corr);
    void (*headers)(sim_world *w, sim_response *out, int minus_one);
    int retry_form; /* on a 429: 0 no header, 1 retry-after (s), 2 and retry-after-ms */
};

static void charge_azure(const sim_world *w, const facts *f, long long *charge, long long *need, long long *corr) {
    /* "an estimated max processed-token count": the prompt as Azure counts
     * it plus max_tokens, added when the request arrives; nothing
     * documents a give-back. */
    charge[SIM_DIM_REQUESTS] = 1;
    charge[SIM_DIM_TOKENS] = f->prompt + f->max_tokens;
    if (w->cfg.azure_release_at_end) corr[SIM_DIM_TOKENS] = f->output - f->max_tokens;
}

static void charge_openai(const sim_world *w, const facts *f, long long *charge, long long *need, long long *corr) {
    /* "the maximum of max_tokens and the estimated number of tokens based
     * on the character count of your request": characters, not tokens. */
    long long est = (long long)ceil((double)f->chars / w->cfg.openai_chars_per_token - EPS);
    charge[SIM_DIM_REQUESTS] = 1;
    charge[SIM_DIM_TOKENS] = est > f->max_tokens ? est : f->max_tokens;
}

static void charge_anthropic(const sim_world *w, const facts *f, long long *charge, long long *need, long long *corr) {
    charge[SIM_DIM_REQUESTS] = 1;
    charge[SIM_DIM_INPUT] = f->prompt - f->cached; /* cache reads do not count toward ITPM */
    if (w->cfg.anthropic_output == SIM_OTPM_MAX_CORRECTED) {
        charge[SIM_DIM_OUTPUT] = f->max_tokens; /* estimated from max_tokens, adjusted at the end */
        corr[SIM_DIM_OUTPUT] = f->output - f->max_tokens;
    } else {
        charge[SIM_DIM_OUTPUT] = 0; /* counted as generated: charged when it ends */
        need[SIM_DIM_OUTPUT] = 1;   /* an empty bucket refuses (the doc is silent) */
        corr[SIM_DIM_OUTPUT] = f->output;
    }
}

static void charge_bedrock(const sim_world *w, const facts *f, long long *charge, long long *need, long long *corr) {
    /* Reserved at the start: input + max_tokens; at the end: input +
     * output x the burndown rate. Cache reads are not in either sum. */
    long long in = f->prompt - f->cached;
    charge[SIM_DIM_REQUESTS] = 1;
    charge[SIM_DIM_TOKENS] = in + f->max_tokens;
    corr[SIM_DIM_TOKENS] = llround((double)f->output * w->cfg.bedrock_burndown) - f->max_tokens;
}

static void charge_gemini(const sim_world *w, const facts *f, long long *charge, long long *need, long long *corr) {
    charge[SIM_DIM_REQUESTS] = 1;
    charge[SIM_DIM_INPUT] = f->prompt; /* "Tokens per minute (input)" */
    charge[SIM_DIM_DAY] = 1;
}

static void headers_azure(sim_world *w, sim_response *out, int minus_one);
static void headers_openai(sim_world *w, sim_response *out, int minus_one);
static void headers_anthropic(sim_world *w, sim_response *out, int minus_one);
static void headers_none(sim_world *w, sim_response *out, int minus_one) {}
static void retry_headers(sim_response *out, int form);

static const provider_row providers[SIM_PROVIDERS] = {
    [SIM_AZURE] = {"azure", {LIM_WINDOWS, LIM_BUCKET, 0, 0, 0}, charge_azure, headers_azure, 2},
    [SIM_OPENAI] = {"openai", {LIM_BUCKET, LIM_BUCKET, 0, 0, 0}, charge_openai, headers_openai, 1},
    [SIM_ANTHROPIC] = {"anthropic", {LIM_BUCKET, 0, LIM_BUCKET, LIM_BUCKET, 0}, charge_anthropic, headers_anthropic, 1},
    [SIM_BEDROCK] = {"bedrock", {LIM_BUCKET, LIM_BUCKET, 0, 0, 0}, charge_bedrock, headers_none, 0},
    [SIM_GEMINI] = {"gemini", {LIM_WINDOWS, 0, LIM_WINDOWS, 0, LIM_DAY}, charge_gemini, headers_none, 0},
};

/* ---- configuration ---- */

void sim_world_cfg_init(sim_world_cfg *cfg, sim_provider provider) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->provider = provider;
    cfg->window_mode = provider == SIM_GEMINI ? SIM_WINDOW_FIXED : SIM_WINDOW_SLIDING;
    cfg->azure_windows = SIM_AZ_WIN_1S | SIM_AZ_WIN_10S;
    cfg->azure_req_header = SIM_AZ_HDR_10S;
    cfg->anthropic_output = SIM_OTPM_GENERATED;
    cfg->bedrock_burndown = 5;
    cfg->openai_chars_per_token = 4;
    cfg->tokens_per_char[SIM_LANG_EN] = 0.25;
    cfg->tokens_per_char[SIM_LANG_CODE] = 1.0 / 3.0;
    cfg->tokens_per_char[SIM_LANG_CJK] = 0.8;
    cfg->token_noise = 0.03;
    cfg->out_lo = 0.5;
    cfg->out_hi = 1.0;
    cfg->lat_lo_ms = 500;
    cfg->lat_hi_ms = 2000;
    cfg->reject_ms = 5;
    cfg->real_factor = 1;
    cfg->change_factor = 1;
    cfg->stray_retry_ms = 1000;
    cfg->hdr_round_tokens = provider == SIM_ANTHROPIC ? 1000 : 1;
    cfg->epoch_ms = days_from_civil(2026, 1, 5) * DAY_MS;
}

static double configured_limit(const sim_world_cfg *c, int dim) {
    switch (dim) {
    case SIM_DIM_REQUESTS: return c->rpm;
    case SIM_DIM_TOKENS: return c->tpm;
    case SIM_DIM_INPUT: return c->itpm;
    case SIM_DIM_OUTPUT: return c->otpm;
    case SIM_DIM_DAY: return c->rpd;
    default: return 0;
    }
}

/* The limiters at the current factor. A change refills the buckets to now
 * at the old rate first and keeps what the windows hold. */
static void setup_limits(sim_world *w, int first) {
    const sim_world_cfg *c = &w->cfg;
    for (int d = 0; d < SIM_DIMS; d++) {
        dimstate *s = &w->d[d];
        double real = s->configured * w->factor;
        if (s->kind == LIM_BUCKET) {
            if (!first) bucket_refill(&s->b, w->now, c->refill_step_ms);
            s->b.rate = real / MIN_MS;
            s->b.cap = c->burst[d] > 0 ? c->burst[d] * w->factor : real;
            if (first) s->b.level = s->b.cap, s->b.last = 0;
            if (s->b.level > s->b.cap) s->b.level = s->b.cap;
        } else if (s->kind == LIM_WINDOWS) {
            for (int i = 0; i < s->nwin; i++) {
                double per = real * s->win[i].len_ms / MIN_MS;
                /* A count of requests in a window is whole (at least one). */
                s->win[i].limit = d == SIM_DIM_REQUESTS ? fmax(1, floor(per + EPS)) : per;
            }
        } else if (s->kind == LIM_DAY) {
            s->day_limit = floor(real + EPS);
        }
    }
}

static int heap_push(sim_world *w, double t, int kind, size_t idx) {
    if (w->nheap == w->capheap) {
        size_t cap = w->capheap ? w->capheap * 2 : 64;
        event *h = realloc(w->heap, cap * sizeof(*h));
        if (!h) return -1;
        w->heap = h;
        w->capheap = cap;
    }
    event e = {t, w->evseq++, kind, idx};
    size_t i = w->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (w->heap[p].t < e.t || (w->heap[p].t == e.t && w->heap[p].seq < e.seq)) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = e;
    return 0;
}

static int ev_less(const event *a, const event *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static event heap_pop(sim_world *w) {
    event top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const event *best = &last;
        if (l < w->nheap && ev_less(&w->heap[l], best)) m = l, best = &w->heap[l];
        if (r < w->nheap && ev_less(&w->heap[r], best)) m = r;
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (w->nheap > 0) w->heap[i] = last;
    return top;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

sim_world *sim_world_new(const sim_world_cfg *cfg, uint64_t seed) {
    if (!cfg || (unsigned)cfg->provider >= SIM_PROVIDERS || cfg->nstray < 0 || cfg->nstray > SIM_MAX_STRAYS ||
        cfg->nneighbours < 0 || cfg->nneighbours > SIM_MAX_NEIGHBOURS)
        return NULL;
    const provider_row *row = &providers[cfg->provider];
    for (int d = 0; d < SIM_DIMS; d++)
        if (configured_limit(cfg, d) > 0 && row->kind[d] == LIM_NONE) return NULL; /* a limit it does not have */
    sim_world *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->cfg = *cfg;
    w->row = row;
    w->seed = seed;
    w->rng = mix64(seed ^ UINT64_C(0x5eed5eed5eed5eed));
    w->factor = cfg->real_factor > 0 ? cfg->real_factor : 1;
    if (w->cfg.change_factor <= 0) w->cfg.change_factor = 1;
    qsort(w->cfg.stray_ms, (size_t)w->cfg.nstray, sizeof(double), cmp_double);
    for (int d = 0; d < SIM_DIMS; d++) {
        dimstate *s = &w->d[d];
        s->configured = configured_limit(cfg, d);
        s->kind = s->configured > 0 ? row->kind[d] : LIM_NONE;
        if (s->kind != LIM_WINDOWS) continue;
        if (cfg->provider == SIM_AZURE) {
            /* 1 s and 10 s as configured, and the minute for the headers. */
            s->nwin = 3;
            s->win[0] = (window){.len_ms = 1000, .enforce = (cfg->azure_windows & SIM_AZ_WIN_1S) != 0};
            s->win[1] = (window){.len_ms = 10000, .enforce = (cfg->azure_windows & SIM_AZ_WIN_10S) != 0};
            s->win[2] = (window){.len_ms = MIN_MS, .enforce = 0};
        } else {
            s->nwin = 1;
            s->win[0] = (window){.len_ms = MIN_MS, .enforce = 1};
        }
    }
    setup_limits(w, 1);
    int rc = 0;
    if (cfg->change_at_ms > 0) rc |= heap_push(w, cfg->change_at_ms, EV_CHANGE, 0);
    if (cfg->change2_at_ms > 0) rc |= heap_push(w, cfg->change2_at_ms, EV_CHANGE, 1);
    for (int k = 0; k < cfg->nneighbours; k++)
        if (cfg->nb[k].shape != SIM_NB_NONE) rc |= heap_push(w, cfg->nb[k].start_ms, EV_NB, (size_t)k);
    if (rc) {
        sim_world_free(w);
        return NULL;
    }
    return w;
}

void sim_world_free(sim_world *w) {
    if (!w) return;
    for (int d = 0; d < SIM_DIMS; d++)
        for (int i = 0; i < w->d[d].nwin; i++) free(w->d[d].win[i].q);
    free(w->heap);
    free(w->led);
    free(w);
}

/* ---- the provider's token count ---- */

static long long count_tokens(const sim_world *w, long long chars, sim_lang lang, double noise) {
    if (chars <= 0) return 0;
    if ((unsigned)lang >= SIM_LANGS) lang = SIM_LANG_EN;
    double t = ceil((double)chars * w->cfg.tokens_per_char[lang] * (1 + noise) - EPS);
    return t < 0 ? 0 : (long long)t;
}

long long sim_world_prompt_tokens(const sim_world *w, long long chars, sim_lang lang) {
    return count_tokens(w, chars, lang, 0);
}

/* ---- limiter state, for admission and headers ---- */

static void dim_sync(sim_world *w, int d, double t) {
    dimstate *s = &w->d[d];
    if (s->kind == LIM_BUCKET) bucket_refill(&s->b, t, w->cfg.refill_step_ms);
    else if (s->kind == LIM_WINDOWS)
        for (int i = 0; i < s->nwin; i++) window_expire(&s->win[i], t, w->cfg.window_mode, w->cfg.epoch_ms);
    else if (s->kind == LIM_DAY) {
        int64_t day = sim_pacific_day(w->cfg.epoch_ms + (int64_t)floor(t));
        if (day != s->day) s->day = day, s->day_count = 0;
    }
}

/* The ms until dimension d could admit need (0: now). */
static double dim_wait(sim_world *w, int d, double t, double need) {
    dimstate *s = &w->d[d];
    double wait = 0;
    if (s->kind == LIM_BUCKET) wait = bucket_wait(&s->b, need, w->cfg.refill_step_ms);
    else if (s->kind == LIM_WINDOWS) {
        for (int i = 0; i < s->nwin; i++)
            if (s->win[i].enforce)
                wait = fmax(wait, window_wait(&s->win[i], t, need, w->cfg.window_mode, w->cfg.epoch_ms));
    } else if (s->kind == LIM_DAY && need > 0 && (double)s->day_count + need > s->day_limit + EPS) {
        int64_t now = w->cfg.epoch_ms + (int64_t)floor(t);
        wait = (double)(sim_pacific_next_midnight(now) - now);
    }
    return wait;
}

static int dim_charge(sim_world *w, int d, double t, long long amt) {
    dimstate *s = &w->d[d];
    if (s->kind == LIM_BUCKET) {
        s->b.level -= (double)amt;
        if (s->b.level > s->b.cap) s->b.level = s->b.cap; /* a give-back beyond full is lost */
    } else if (s->kind == LIM_WINDOWS && amt > 0) {
        for (int i = 0; i < s->nwin; i++)
            if (window_add(&s->win[i], t, (double)amt)) return -1;
    } else if (s->kind == LIM_DAY) s->day_count += amt;
    return 0;
}

/* ---- requests ---- */

static sim_entry *ledger_push(sim_world *w) {
    if (w->nled == w->capled) {
        size_t cap = w->capled ? w->capled * 2 : 256;
        sim_entry *l = realloc(w->led, cap * sizeof(*l));
        if (!l) return NULL;
        w->led = l;
        w->capled = cap;
    }
    sim_entry *e = &w->led[w->nled++];
    memset(e, 0, sizeof(*e));
    return e;
}

/* Decides one request at t (fleet when who == 0) and fills *out when given.
 * Returns the status (200, 429), or -1 when out of memory. */
static int decide(sim_world *w, double t, int who, const sim_request *rq, int stray, sim_response *out) {
    const sim_world_cfg *c = &w->cfg;
    /* The same four draws for every request, whatever its outcome. */
    double u_lat = unit_of(next_rand(w)), u_out = unit_of(next_rand(w));
    double u_omit = unit_of(next_rand(w)), u_neg = unit_of(next_rand(w));
    uint64_t h = mix64(w->seed ^ mix64(rq->tag ^ mix64((uint64_t)rq->chars * 31 + (uint64_t)rq->lang)));
    facts f = {.chars = rq->chars, .max_tokens = rq->max_tokens < 0 ? 0 : rq->max_tokens};
    f.prompt = count_tokens(w, rq->chars, rq->lang, c->token_noise * (2 * unit_of(h) - 1));
    f.cached = rq->cached < 0 ? 0 : rq->cached > f.prompt ? f.prompt : rq->cached;
    if (c->out_tokens_hi > 0) f.output = llround(c->out_tokens_lo + (c->out_tokens_hi - c->out_tokens_lo) * u_out);
    else if (c->long_to_ms > 0 && t >= c->long_from_ms && t < c->long_to_ms)
        f.output = llround((double)f.max_tokens * (c->out_lo2 + (c->out_hi2 - c->out_lo2) * u_out));
    else f.output = llround((double)f.max_tokens * (c->out_lo + (c->out_hi - c->out_lo) * u_out));
    if (f.output > f.max_tokens) f.output = f.max_tokens;
    if (f.output < 0) f.output = 0;

    long long charge[SIM_DIMS] = {0}, need[SIM_DIMS], corr[SIM_DIMS] = {0};
    for (int d = 0; d < SIM_DIMS; d++) need[d] = -1;
    w->row->charge(w, &f, charge, need, corr);
    for (int d = 0; d < SIM_DIMS; d++)
        if (need[d] < 0) need[d] = charge[d];

    sim_entry *e = ledger_push(w);
    if (!e) return -1;
    e->seq = w->reqseq++;
    e->tag = rq->tag;
    e->t_ms = t;
    e->who = who;
    e->refused_by = -1;
    e->prompt_tokens = f.prompt;
    e->cached = f.cached;
    e->max_tokens = f.max_tokens;

    double retry = 0;
    for (int d = 0; d < SIM_DIMS; d++) dim_sync(w, d, t);
    if (c->overload_to_ms > 0 && t >= c->overload_from_ms && t < c->overload_to_ms) {
        e->status = c->overload_status ? c->overload_status : 529;
    } else if (stray) {
        e->status = 429;
        e->flags |= SIM_F_STRAY;
        retry = c->stray_retry_ms;
    } else {
        for (int d = 0; d < SIM_DIMS; d++) {
            double wait = dim_wait(w, d, t, (double)need[d]);
            if (wait > 0) {
                if (e->refused_by < 0) e->refused_by = d;
                retry = fmax(retry, wait);
            }
        }
        e->status = e->refused_by < 0 ? 200 : 429;
    }
    if (e->status == 200) {
        e->output_tokens = f.output;
        e->latency_ms = c->lat_lo_ms + (c->lat_hi_ms - c->lat_lo_ms) * u_lat + c->lat_per_token_ms * (double)f.output;
        e->t_end_ms = t + e->latency_ms;
        for (int d = 0; d < SIM_DIMS; d++) {
            e->charge[d] = charge[d];
            e->correction[d] = corr[d];
            if (dim_charge(w, d, t, charge[d])) return -1;
        }
        if (heap_push(w, e->t_end_ms, EV_END, w->nled - 1)) return -1;
    } else {
        e->latency_ms = c->reject_ms;
        e->t_end_ms = t + c->reject_ms;
        e->flags |= SIM_F_ENDED;
    }
    if (!out) return e->status;
    memset(out, 0, sizeof(*out));
    out->status = e->status;
    out->latency_ms = e->latency_ms;
    if (e->status == 200) {
        out->input_tokens = f.prompt;
        out->output_tokens = f.output;
        out->cache_read = f.cached;
    }
    out->retry_after_ms = e->status == 429 && c->provider != SIM_BEDROCK ? retry : 0;
    if (e->status != 200 && e->status != 429) return e->status; /* overloaded: no headers */
    /* Rate-limit headers may be missing; a 429's Retry-After is not. */
    if (u_omit >= c->hdr_omit_prob) w->row->headers(w, out, u_neg < c->hdr_minus_one_prob);
    retry_headers(out, w->row->retry_form);
    return e->status;
}

static void add_hdr(sim_response *out, const char *name, const char *fmt, ...) {
    if (out->nheaders >= SIM_MAX_HEADERS) return;
    snprintf(out->name[out->nheaders], sizeof(out->name[0]), "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->value[out->nheaders], sizeof(out->value[0]), fmt, ap);
    va_end(ap);
    out->nheaders++;
}

typedef struct gauge {
    double limit, remaining, reset_ms;
} gauge;

/* What dimension d looks like now: a bucket's per-minute limit, what it
 * holds, and the ms until it is full again; a window's (win) limit, room
 * and the ms until it is empty. */
static gauge gauge_of(sim_world *w, int d, int win) {
    dimstate *s = &w->d[d];
    gauge g = {0, 0, 0};
    if (s->kind == LIM_BUCKET) {
        g.limit = s->configured * w->factor;
        g.remaining = fmax(0, floor(s->b.level + EPS));
        g.reset_ms = s->b.rate > 0 ? fmax(0, (s->b.cap - s->b.level) / s->b.rate) : 0;
    } else if (s->kind == LIM_WINDOWS) {
        const window *wi = &s->win[win];
        g.limit = wi->limit;
        g.remaining = fmax(0, floor(wi->limit - wi->sum + EPS));
        if (wi->n > 0)
            g.reset_ms =
                w->cfg.window_mode == SIM_WINDOW_FIXED
                    ? (window_id(wi, w->now, w->cfg.epoch_ms) + 1) * wi->len_ms - (double)w->cfg.epoch_ms - w->now
                    : wi->q[wi->head + wi->n - 1].t + wi->len_ms - w->now;
    }
    return g;
}

static double round_to(double x, double unit) { return unit > 1 ? floor(x / unit + 0.5) * unit : x; }

static void retry_headers(sim_response *out, int form) {
    if (out->status != 429 || form == 0) return;
    long long s = (long long)ceil(out->retry_after_ms / 1000.0 - EPS);
    add_hdr(out, "retry-after", "%lld", s < 1 ? 1 : s);
    if (form == 2) add_hdr(out, "retry-after-ms", "%lld", (long long)ceil(out->retry_after_ms - EPS));
}

static void headers_azure(sim_world *w, sim_response *out, int minus_one) {
    if (w->d[SIM_DIM_REQUESTS].kind != LIM_NONE) {
        gauge g = gauge_of(w, SIM_DIM_REQUESTS, w->cfg.azure_req_header == SIM_AZ_HDR_10S ? 1 : 2);
        add_hdr(out, "x-ratelimit-limit-requests", "%.0f", g.limit);
        add_hdr(out, "x-ratelimit-remaining-requests", "%.0f", g.remaining);
    }
    if (w->d[SIM_DIM_TOKENS].kind != LIM_NONE) {
        gauge g = gauge_of(w, SIM_DIM_TOKENS, 0);
        if (minus_one) {
            add_hdr(out, "x-ratelimit-limit-tokens", "-1");
            add_hdr(out, "x-ratelimit-remaining-tokens", "-1");
            add_hdr(out, "x-ratelimit-reset-tokens", "0");
        } else {
            add_hdr(out, "x-ratelimit-limit-tokens", "%.0f", g.limit);
            add_hdr(out, "x-ratelimit-remaining-tokens", "%.0f", round_to(g.remaining, w->cfg.hdr_round_tokens));
        }
    }
}

static void headers_openai(sim_world *w, sim_response *out, int minus_one) {
    char dur[32];
    if (w->d[SIM_DIM_REQUESTS].kind != LIM_NONE) {
        gauge g = gauge_of(w, SIM_DIM_REQUESTS, 0);
        add_hdr(out, "x-ratelimit-limit-requests", "%.0f", g.limit);
        add_hdr(out, "x-ratelimit-remaining-requests", "%.0f", g.remaining);
        sim_fmt_duration(dur, sizeof(dur), g.reset_ms);
        add_hdr(out, "x-ratelimit-reset-requests", "%s", dur);
    }
    if (w->d[SIM_DIM_TOKENS].kind != LIM_NONE) {
        gauge g = gauge_of(w, SIM_DIM_TOKENS, 0);
        sim_fmt_duration(dur, sizeof(dur), minus_one ? 0 : g.reset_ms);
        add_hdr(out, "x-ratelimit-limit-tokens", "%.0f", minus_one ? -1 : g.limit);
        add_hdr(out, "x-ratelimit-remaining-tokens", "%.0f",
                minus_one ? -1 : round_to(g.remaining, w->cfg.hdr_round_tokens));
        add_hdr(out, "x-ratelimit-reset-tokens", "%s", dur);
    }
}

static void headers_anthropic(sim_world *w, sim_response *out, int minus_one) {
    static const struct {
        int dim;
        const char *prefix;
        int tokens;
    } rows[] = {
        {SIM_DIM_REQUESTS, "anthropic-ratelimit-requests", 0},
        {SIM_DIM_INPUT, "anthropic-ratelimit-input-tokens", 1},
        {SIM_DIM_OUTPUT, "anthropic-ratelimit-output-tokens", 1},
    };
    char name[64], when[40];
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (w->d[rows[i].dim].kind == LIM_NONE) continue;
        gauge g = gauge_of(w, rows[i].dim, 0);
        int neg = minus_one && rows[i].tokens;
        double rem = rows[i].tokens ? round_to(g.remaining, w->cfg.hdr_round_tokens) : g.remaining;
        /* The reset: when the bucket is full again, to the second above. */
        int64_t full = w->cfg.epoch_ms + (int64_t)ceil((w->now + g.reset_ms) / 1000.0 - EPS) * 1000;
        sim_fmt_rfc3339(when, sizeof(when), full);
        snprintf(name, sizeof(name), "%s-limit", rows[i].prefix);
        add_hdr(out, name, "%.0f", neg ? -1 : g.limit);
        snprintf(name, sizeof(name), "%s-remaining", rows[i].prefix);
        add_hdr(out, name, "%.0f", neg ? -1 : rem);
        snprintf(name, sizeof(name), "%s-reset", rows[i].prefix);
        add_hdr(out, name, "%s", when);
    }
}

/* ---- the event loop ---- */

static void end_request(sim_world *w, size_t idx) {
    sim_entry *e = &w->led[idx];
    for (int d = 0; d < SIM_DIMS; d++) {
        if (e->correction[d] == 0) continue;
        dim_sync(w, d, e->t_end_ms);
        dim_charge(w, d, e->t_end_ms, e->correction[d]);
    }
    e->flags |= SIM_F_ENDED;
}

static void neighbour_act(sim_world *w, size_t k, double t) {
    const sim_neighbour *nb = &w->cfg.nb[k];
    if (nb->leave_ms > 0 && t >= nb->leave_ms) return;
    sim_request rq = {
        .t_ms = t, .chars = nb->chars, .lang = nb->lang, .max_tokens = nb->max_tokens, .cached = nb->cached};
    int n = 1;
    double next = -1;
    switch (nb->shape) {
    case SIM_NB_PACED:
        if (nb->rate_per_min > 0) next = t + MIN_MS / nb->rate_per_min;
        break;
    case SIM_NB_GREEDY:
        n = nb->burst > 0 ? nb->burst : 1000;
        next = t + (nb->tick_ms > 0 ? nb->tick_ms : 100);
        if (nb->rate_per_min > 0) {
            /* Capped: what its own rate allows since the last tick, and
             * what the provider refused before, sent as soon as it can. */
            double since = w->nb_last[k] > 0 ? t - w->nb_last[k] : 0;
            w->nb_last[k] = t;
            w->nb_allow[k] += since * nb->rate_per_min / MIN_MS;
            if ((double)n > w->nb_allow[k]) n = (int)w->nb_allow[k];
        }
        break;
    case SIM_NB_BURST: n = nb->burst; break;
    case SIM_NB_PERIODIC:
        n = nb->burst;
        if (nb->period_ms > 0) next = t + nb->period_ms;
        break;
    default: return;
    }
    for (int i = 0; i < n; i++) {
        rq.tag = ((uint64_t)(k + 1) << 48) | w->nb_sent[k]++;
        int st = decide(w, t, (int)k + 1, &rq, 0, NULL);
        if (st < 0 || (nb->shape == SIM_NB_GREEDY && st != 200)) break;
        if (nb->shape == SIM_NB_GREEDY && nb->rate_per_min > 0) w->nb_allow[k] -= 1;
    }
    if (next >= 0 && (nb->leave_ms <= 0 || next < nb->leave_ms)) heap_push(w, next, EV_NB, k);
}

void sim_world_advance(sim_world *w, double t_ms) {
    if (t_ms < w->now) {
        w->clock_errors++;
        t_ms = w->now;
    }
    while (w->nheap > 0 && w->heap[0].t <= t_ms) {
        event ev = heap_pop(w);
        if (ev.t > w->now) w->now = ev.t;
        switch (ev.kind) {
        case EV_END: end_request(w, ev.idx); break;
        case EV_NB: neighbour_act(w, ev.idx, ev.t); break;
        case EV_CHANGE:
            w->factor = ev.idx ? (w->cfg.change2_factor > 0 ? w->cfg.change2_factor : 1) : w->cfg.change_factor;
            setup_limits(w, 0);
            break;
        }
    }
    w->now = t_ms;
}

void sim_world_send(sim_world *w, const sim_request *rq, sim_response *out) {
    double t = rq->t_ms;
    if (t < w->now) {
        w->clock_errors++;
        t = w->now;
    }
    sim_world_advance(w, t);
    int stray = 0;
    if (w->stray_next < w->cfg.nstray && t >= w->cfg.stray_ms[w->stray_next]) {
        stray = 1;
        w->stray_next++;
    }
    if (decide(w, t, 0, rq, stray, out) < 0) {
        memset(out, 0, sizeof(*out));
        out->status = 500; /* the world ran out of memory: no verdict */
    }
}

/* ---- the ledger and its summaries ---- */

size_t sim_world_ledger_len(const sim_world *w) { return w->nled; }

const sim_entry *sim_world_ledger_at(const sim_world *w, size_t i) { return i < w->nled ? &w->led[i] : NULL; }

size_t sim_world_count(const sim_world *w, int who, int status) {
    size_t n = 0;
    for (size_t i = 0; i < w->nled; i++) {
        const sim_entry *e = &w->led[i];
        if (who == SIM_WHO_FLEET && e->who != 0) continue;
        if (who == SIM_WHO_NEIGHBOURS && e->who == 0) continue;
        if (status != 0 && e->status != status) continue;
        n++;
    }
    return n;
}

typedef struct amount {
    double t, amt;
} amount;

static int cmp_amount(const void *a, const void *b) {
    return cmp_double(&((const amount *)a)->t, &((const amount *)b)->t);
}

double sim_world_max_window(const sim_world *w, int dim, double window_ms, double *at) {
    if (at) *at = 0;
    if (dim < 0 || dim >= SIM_DIMS) return 0;
    amount *a = malloc((2 * w->nled + 1) * sizeof(*a));
    if (!a) return -1;
    size_t n = 0;
    for (size_t i = 0; i < w->nled; i++) {
        const sim_entry *e = &w->led[i];
        if (e->status != 200) continue;
        if (e->charge[dim] > 0) a[n++] = (amount){e->t_ms, (double)e->charge[dim]};
        if (e->correction[dim] > 0 && (e->flags & SIM_F_ENDED))
            a[n++] = (amount){e->t_end_ms, (double)e->correction[dim]};
    }
    qsort(a, n, sizeof(*a), cmp_amount);
    double best = 0, sum = 0;
    for (size_t i = 0, j = 0; i < n; i++) {
        while (j < n && a[j].t < a[i].t + window_ms) sum += a[j++].amt;
        if (sum > best) {
            best = sum;
            if (at) *at = a[i].t;
        }
        sum -= a[i].amt;
    }
    free(a);
    return best;
}

static uint64_t fnv(uint64_t h, int64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= ((uint64_t)v >> (8 * i)) & 0xff;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

uint64_t sim_world_digest(const sim_world *w) {
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < w->nled; i++) {
        const sim_entry *e = &w->led[i];
        int64_t v[] = {(int64_t)e->seq,
                       (int64_t)e->tag,
                       llround(e->t_ms * 1000),
                       llround(e->t_end_ms * 1000),
                       llround(e->latency_ms * 1000),
                       e->who,
                       e->status,
                       e->refused_by,
                       (int64_t)e->flags,
                       e->prompt_tokens,
                       e->cached,
                       e->max_tokens,
                       e->output_tokens};
        for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) h = fnv(h, v[k]);
        for (int d = 0; d < SIM_DIMS; d++) h = fnv(fnv(h, e->charge[d]), e->correction[d]);
    }
    return h;
}

double sim_world_now(const sim_world *w) { return w->now; }

double sim_world_limit(const sim_world *w, int dim) {
    if (dim < 0 || dim >= SIM_DIMS || w->d[dim].kind == LIM_NONE) return 0;
    return w->d[dim].configured * w->factor;
}

double sim_world_level(sim_world *w, int dim) {
    if (dim < 0 || dim >= SIM_DIMS) return 0;
    dimstate *s = &w->d[dim];
    dim_sync(w, dim, w->now);
    switch (s->kind) {
    case LIM_BUCKET: return s->b.level;
    case LIM_WINDOWS: {
        double room = INFINITY;
        for (int i = 0; i < s->nwin; i++)
            if (s->win[i].enforce) room = fmin(room, s->win[i].limit - s->win[i].sum);
        return room;
    }
    case LIM_DAY: return s->day_limit - (double)s->day_count;
    default: return 0;
    }
}

size_t sim_world_clock_errors(const sim_world *w) { return w->clock_errors; }

const char *sim_provider_name(sim_provider p) { return (unsigned)p < SIM_PROVIDERS ? providers[p].name : NULL; }

const char *sim_dim_name(int dim) {
    static const char *const names[SIM_DIMS] = {"requests", "tokens", "input", "output", "day"};
    return dim >= 0 && dim < SIM_DIMS ? names[dim] : NULL;
}
