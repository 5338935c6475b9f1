/* ratelimit: rate-limit response headers into per-dimension limit,
 * remaining and reset. See ratelimit.h and docs/http-feedback.md. */
#include "ratelimit.h"

#include "httpdate.h"
#include "lex.h"

/* RETRY_AFTER_MAX_MS in nanoseconds: 3.16e18, below INT64_MAX. */
#define MAX_NS (RETRY_AFTER_MAX_MS * INT64_C(1000000))

/* ---- lexical helpers ------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* when_ms - now_ms clamped to 0..RETRY_AFTER_MAX_MS, for any inputs. */
static int64_t relative_ms(int64_t when_ms, int64_t now_ms) {
    if (when_ms <= now_ms) return 0;
    if (now_ms < 0 && when_ms > INT64_MAX + now_ms) return RETRY_AFTER_MAX_MS;
    return min64(when_ms - now_ms, RETRY_AFTER_MAX_MS);
}

/* Parses 1*DIGIT ["." *DIGIT] starting at v[*i] and returns the value
 * times 10^scale (scale 0..9), rounded up, saturated at cap; -1 when no
 * digit starts the number. A "." must be followed by a digit unless
 * allow_bare_dot (Go's "1.s"). Advances *i past what it read. */
static int64_t read_fixed(const char *v, size_t len, size_t *i, int scale, int64_t cap, bool allow_bare_dot) {
    int64_t pow10 = 1;
    for (int k = 0; k < scale; k++) pow10 *= 10;
    size_t start = *i;
    int64_t acc = 0;
    bool sat = false;
    while (*i < len && is_digit(v[*i])) {
        int d = v[*i] - '0';
        if (!sat && acc > (cap - d) / 10) sat = true;
        else if (!sat) acc = acc * 10 + d;
        (*i)++;
    }
    if (*i == start) return -1;
    if (sat || acc > cap / pow10) sat = true;
    else acc *= pow10;
    if (*i < len && v[*i] == '.') {
        (*i)++;
        size_t fstart = *i;
        int64_t place = pow10;
        bool round_up = false;
        while (*i < len && is_digit(v[*i])) {
            int d = v[*i] - '0';
            place /= 10;
            if (place > 0) acc += d * place;
            else if (d != 0) round_up = true;
            (*i)++;
        }
        if (*i == fstart && !allow_bare_dot) return -1;
        if (round_up) acc++;
    }
    if (sat || acc > cap) acc = cap;
    return acc;
}

/* The whole (trimmed) value must be a fixed-point number. */
static int64_t parse_fixed(const char *v, size_t len, int scale, int64_t cap) {
    if (v == NULL) return -1;
    trim(&v, &len);
    size_t i = 0;
    int64_t x = read_fixed(v, len, &i, scale, cap, false);
    return (x >= 0 && i == len) ? x : -1;
}

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* ---- value parsers --------------------------------------------------- */

static const struct {
    const char *unit;
    int64_t ns;
} go_units[] = {
    {"ns", 1},
    {"us", INT64_C(1000)},
    {"\xc2\xb5s", INT64_C(1000)}, /* U+00B5 MICRO SIGN */
    {"\xce\xbcs", INT64_C(1000)}, /* U+03BC GREEK SMALL LETTER MU */
    {"ms", INT64_C(1000000)},
    {"s", INT64_C(1000000000)},
    {"m", INT64_C(60000000000)},
    {"h", INT64_C(3600000000000)},
};

static int64_t go_unit(const char *u, size_t n) {
    for (size_t k = 0; k < sizeof go_units / sizeof go_units[0]; k++) {
        const char *name = go_units[k].unit;
        size_t i = 0;
        while (i < n && name[i] != '\0' && name[i] == u[i]) i++;
        if (i == n && name[i] == '\0') return go_units[k].ns;
    }
    return -1;
}

/* Go's time.ParseDuration grammar without a sign: one or more
 * number-unit pairs, or "0". Sums in ns (saturating), then rounds up. */
static int64_t go_duration_ms(const char *v, size_t len) {
    if (len == 1 && v[0] == '0') return 0;
    int64_t total = 0;
    bool sat = false;
    size_t i = 0;
    if (len == 0) return -1;
    while (i < len) {
        /* Integer part, saturating at MAX_NS (any unit is >= 1 ns). */
        size_t s = i;
        int64_t ip = 0;
        bool ipsat = false;
        while (i < len && is_digit(v[i])) {
            int d = v[i] - '0';
            if (ipsat || ip > (MAX_NS - d) / 10) ipsat = true;
            else ip = ip * 10 + d;
            i++;
        }
        bool had_int = i > s;
        size_t fs = i, fe = i;
        if (i < len && v[i] == '.') {
            i++;
            fs = i;
            while (i < len && is_digit(v[i])) i++;
            fe = i;
        }
        if (!had_int && fe == fs) return -1;
        size_t us = i;
        while (i < len && !is_digit(v[i]) && v[i] != '.') i++;
        int64_t unit = go_unit(v + us, i - us);
        if (unit < 0) return -1;
        if (sat) continue;
        if (ipsat || ip > (MAX_NS - total) / unit) {
            sat = true;
            continue;
        }
        total += ip * unit;
        int64_t place = unit;
        for (size_t k = fs; k < fe && place > 0; k++) {
            place /= 10;
            int64_t add = (v[k] - '0') * place;
            if (add > MAX_NS - total) {
                sat = true;
                break;
            }
            total += add;
        }
    }
    if (sat) return RETRY_AFTER_MAX_MS;
    int64_t ms = total / 1000000 + (total % 1000000 != 0);
    return min64(ms, RETRY_AFTER_MAX_MS);
}

int64_t ratelimit_parse_duration_ms(const char *value, size_t len) {
    if (value == NULL) return -1;
    trim(&value, &len);
    int64_t plain = parse_fixed(value, len, 3, RETRY_AFTER_MAX_MS);
    if (plain >= 0) return plain;
    return go_duration_ms(value, len);
}

int64_t ratelimit_parse_count(const char *value, size_t len) {
    if (value == NULL) return -1;
    trim(&value, &len);
    size_t i = 0;
    int64_t x = read_fixed(value, len, &i, 0, RATELIMIT_COUNT_MAX, false);
    /* read_fixed accepted a fraction; a count has none. */
    for (size_t k = 0; k < i; k++)
        if (!is_digit(value[k])) return -1;
    return (x >= 0 && i == len) ? x : -1;
}

/* A count that may be followed by a list of quota policies, as some
 * X-RateLimit-Limit and RateLimit-Limit senders do ("100, 100;w=60"). */
static int64_t parse_leading_count(const char *value, size_t len) {
    trim(&value, &len);
    size_t i = 0;
    while (i < len && is_digit(value[i])) i++;
    size_t n = i;
    while (i < len && is_ows(value[i])) i++;
    if (n == 0 || (i < len && value[i] != ',' && value[i] != ';')) return -1;
    return ratelimit_parse_count(value, n);
}

int64_t ratelimit_parse_epoch_reset_ms(const char *value, size_t len, int64_t now_ms) {
    /* Parsed in ms; saturating at 1e17 keeps every branch exact. */
    int64_t x = parse_fixed(value, len, 3, INT64_C(100000000000000000));
    if (x < 0) return -1;
    if (x < INT64_C(1000000000) * 1000) /* < 1e9 s: delta-seconds */
        return min64(x, RETRY_AFTER_MAX_MS);
    if (x < INT64_C(1000000000000) * 1000) /* < 1e12: Unix seconds */
        return relative_ms(x, now_ms);
    /* >= 1e12: Unix milliseconds; x is in thousandths of a ms. */
    return relative_ms(x / 1000 + (x % 1000 != 0), now_ms);
}

static int64_t parse_rfc3339_reset_ms(const char *v, size_t len, int64_t now_ms) {
    trim(&v, &len);
    int64_t when;
    if (httpdate_parse_rfc3339(v, len, &when) != 0) return -1;
    return relative_ms(when, now_ms);
}

/* ---- IETF structured fields (RFC 8941 subset) ------------------------ */

typedef struct cursor {
    const char *p;
    const char *end;
} cursor;

typedef enum sf_type { SF_INT, SF_DEC, SF_STRING, SF_TOKEN, SF_BOOL, SF_BYTES } sf_type;

typedef struct sf_item {
    sf_type type;
    int64_t i;     /* SF_INT */
    uint64_t hash; /* SF_STRING / SF_TOKEN: FNV-1a of the (unescaped) text */
} sf_item;

/* One list or dictionary member with the parameters we care about. */
typedef struct sf_member {
    bool keyed;      /* key=value (dictionary) rather than a bare item */
    const char *key; /* keyed only */
    size_t key_len;
    sf_item value;   /* for a keyed member without "=", SF_BOOL */
    int64_t r, t, q; /* parameters, -1 when absent */
} sf_member;

static bool c_eat(cursor *c, char ch) {
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static void c_skip_sp(cursor *c) {
    while (c->p < c->end && *c->p == ' ') c->p++;
}

static void c_skip_ows(cursor *c) {
    while (c->p < c->end && is_ows(*c->p)) c->p++;
}

static bool is_tchar(char ch) {
    if (is_alpha(ch) || is_digit(ch)) return true;
    switch (ch) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~': return true;
    default: return false;
    }
}

static bool sf_bare_item(cursor *c, sf_item *it) {
    if (c->p >= c->end) return false;
    char ch = *c->p;
    if (ch == '-' || is_digit(ch)) {
        bool neg = c_eat(c, '-');
        int64_t v = 0;
        int n = 0;
        while (c->p < c->end && is_digit(*c->p)) {
            if (++n > 15) return false;
            v = v * 10 + (*c->p++ - '0');
        }
        if (n == 0) return false;
        if (c_eat(c, '.')) {
            int f = 0;
            while (c->p < c->end && is_digit(*c->p)) {
                c->p++;
                f++;
            }
            if (n > 12 || f < 1 || f > 3) return false;
            it->type = SF_DEC;
            return true;
        }
        it->type = SF_INT;
        it->i = neg ? -v : v;
        return true;
    }
    if (ch == '"') {
        c->p++;
        uint64_t h = UINT64_C(14695981039346656037);
        for (;;) {
            if (c->p >= c->end) return false;
            char s = *c->p++;
            if (s == '"') break;
            if (s == '\\') {
                if (c->p >= c->end || (*c->p != '"' && *c->p != '\\')) return false;
                s = *c->p++;
            } else if ((unsigned char)s < 0x20 || (unsigned char)s > 0x7e) {
                return false;
            }
            h ^= (unsigned char)s;
            h *= UINT64_C(1099511628211);
        }
        it->type = SF_STRING;
        it->hash = h;
        return true;
    }
    if (is_alpha(ch) || ch == '*') {
        const char *s = c->p;
        while (c->p < c->end && (is_tchar(*c->p) || *c->p == ':' || *c->p == '/')) c->p++;
        it->type = SF_TOKEN;
        it->hash = fnv1a(s, (size_t)(c->p - s));
        return true;
    }
    if (ch == '?') {
        c->p++;
        if (!(c_eat(c, '0') || c_eat(c, '1'))) return false;
        it->type = SF_BOOL;
        return true;
    }
    if (ch == ':') {
        c->p++;
        while (c->p < c->end && (is_alpha(*c->p) || is_digit(*c->p) || *c->p == '+' || *c->p == '/' || *c->p == '='))
            c->p++;
        if (!c_eat(c, ':')) return false;
        it->type = SF_BYTES;
        return true;
    }
    return false;
}

/* key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ),
 * accepted here in either case. */
static bool sf_key(cursor *c, const char **k, size_t *klen) {
    if (c->p >= c->end || !(is_alpha(*c->p) || *c->p == '*')) return false;
    const char *s = c->p;
    while (c->p < c->end &&
           (is_alpha(*c->p) || is_digit(*c->p) || *c->p == '_' || *c->p == '-' || *c->p == '.' || *c->p == '*'))
        c->p++;
    *k = s;
    *klen = (size_t)(c->p - s);
    return true;
}

/* A known parameter must be a non-negative integer; anything else there
 * makes the whole field unusable (a negative "remaining" is nonsense). */
static bool sf_params(cursor *c, sf_member *m) {
    while (c_eat(c, ';')) {
        c_skip_sp(c);
        const char *k;
        size_t kl;
        if (!sf_key(c, &k, &kl)) return false;
        sf_item v = {SF_BOOL, 1, 0};
        if (c_eat(c, '=') && !sf_bare_item(c, &v)) return false;
        int64_t *slot = NULL;
        if (name_eq(k, kl, "r")) slot = &m->r;
        else if (name_eq(k, kl, "t")) slot = &m->t;
        else if (name_eq(k, kl, "q")) slot = &m->q;
        if (slot != NULL) {
            if (v.type != SF_INT || v.i < 0) return false;
            *slot = v.i;
        }
    }
    return true;
}

static bool sf_member_parse(cursor *c, sf_member *m) {
    m->keyed = false;
    m->key = NULL;
    m->key_len = 0;
    m->r = m->t = m->q = -1;
    cursor save = *c;
    const char *k;
    size_t kl;
    if (sf_key(c, &k, &kl) && c->p < c->end && *c->p == '=') {
        c->p++;
        m->keyed = true;
        m->key = k;
        m->key_len = kl;
        if (!sf_bare_item(c, &m->value)) return false;
    } else {
        *c = save;
        if (!sf_bare_item(c, &m->value)) return false;
    }
    return sf_params(c, m);
}

/* Advances past the separator after a member. Returns 1 when another
 * member follows, 0 at the end, -1 on a syntax error. */
static int sf_next(cursor *c) {
    c_skip_ows(c);
    if (c->p == c->end) return 0;
    if (!c_eat(c, ',')) return -1;
    c_skip_ows(c);
    return c->p == c->end ? -1 : 1;
}

static int64_t inf_if_absent(int64_t v) { return v < 0 ? INT64_MAX : v; }

/* A total order on RateLimit items: lower remaining, then later reset,
 * then lower limit, then policy name hash. Keeping the maximum under a
 * total order makes the outcome independent of header order. */
static bool ietf_more_restrictive(const ratelimit_value *a, uint64_t an, const ratelimit_value *b, uint64_t bn) {
    if (inf_if_absent(a->remaining) != inf_if_absent(b->remaining))
        return inf_if_absent(a->remaining) < inf_if_absent(b->remaining);
    if (a->reset_ms != b->reset_ms) return a->reset_ms > b->reset_ms;
    if (inf_if_absent(a->limit) != inf_if_absent(b->limit)) return inf_if_absent(a->limit) < inf_if_absent(b->limit);
    return an < bn;
}

static int64_t secs_to_ms(int64_t s) { return s > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS : s * 1000; }

/* RateLimit: a draft-07 dictionary (limit, remaining, reset) and/or
 * draft-08+ items ("name";r=..;t=..). Commits only a fully parsed field. */
static bool apply_ietf_ratelimit(ratelimit_feedback *fb, const char *v, size_t len) {
    trim(&v, &len);
    cursor c = {v, v + len};
    if (len == 0) return false;
    ratelimit_value dict = {-1, -1, -1};
    bool have_dict = false;
    ratelimit_value best = {-1, -1, -1};
    uint64_t best_name = 0;
    bool have_best = false;
    for (;;) {
        sf_member m;
        if (!sf_member_parse(&c, &m)) return false;
        if (m.keyed) {
            int64_t *slot = NULL;
            bool secs = false;
            if (name_eq(m.key, m.key_len, "limit")) slot = &dict.limit;
            else if (name_eq(m.key, m.key_len, "remaining")) slot = &dict.remaining;
            else if (name_eq(m.key, m.key_len, "reset")) {
                slot = &dict.reset_ms;
                secs = true;
            }
            if (slot != NULL) {
                if (m.value.type != SF_INT || m.value.i < 0) return false;
                *slot = secs ? secs_to_ms(m.value.i) : min64(m.value.i, RATELIMIT_COUNT_MAX);
                have_dict = true;
            }
        } else if ((m.value.type == SF_STRING || m.value.type == SF_TOKEN) && (m.r >= 0 || m.t >= 0)) {
            ratelimit_value cand = {-1, m.r < 0 ? -1 : min64(m.r, RATELIMIT_COUNT_MAX), m.t < 0 ? -1 : secs_to_ms(m.t)};
            if (!have_best || ietf_more_restrictive(&cand, m.value.hash, &best, best_name)) {
                best = cand;
                best_name = m.value.hash;
                have_best = true;
            }
        }
        int more = sf_next(&c);
        if (more < 0) return false;
        if (more == 0) break;
    }
    if (have_dict && (!have_best || ietf_more_restrictive(&dict, 0, &best, best_name))) {
        best = dict;
        best_name = 0;
        have_best = true;
    }
    if (have_best && (!fb->ietf_have || ietf_more_restrictive(&best, best_name, &fb->ietf_best, fb->ietf_best_name))) {
        fb->ietf_best = best;
        fb->ietf_best_name = best_name;
        fb->ietf_have = true;
    }
    return true;
}

static void add_policy(ratelimit_feedback *fb, uint64_t name, int64_t q) {
    for (int i = 0; i < fb->npolicies; i++) {
        if (fb->policy[i].name == name) {
            fb->policy[i].quota = min64(fb->policy[i].quota, q);
            return;
        }
    }
    if (fb->npolicies == RATELIMIT_IETF_MAX_POLICIES) {
        fb->policies_dropped = true;
        return;
    }
    fb->policy[fb->npolicies].name = name;
    fb->policy[fb->npolicies].quota = q;
    fb->npolicies++;
}

/* RateLimit-Policy: items "name";q=..;w=..; only names and quotas matter
 * here (they give a RateLimit item its limit). Other members are ignored. */
static bool apply_ietf_policy(ratelimit_feedback *fb, const char *v, size_t len) {
    trim(&v, &len);
    if (len == 0) return false;
    /* Validate the whole field before committing anything. */
    for (int pass = 0; pass < 2; pass++) {
        cursor c = {v, v + len};
        for (;;) {
            sf_member m;
            if (!sf_member_parse(&c, &m)) return false;
            if (pass == 1 && !m.keyed && (m.value.type == SF_STRING || m.value.type == SF_TOKEN) && m.q >= 0)
                add_policy(fb, m.value.hash, min64(m.q, RATELIMIT_COUNT_MAX));
            int more = sf_next(&c);
            if (more < 0) return false;
            if (more == 0) break;
        }
    }
    return true;
}

/* ---- the header table ------------------------------------------------ */

typedef enum hkind {
    K_COUNT,      /* strict non-negative integer */
    K_COUNT_LEAD, /* integer, optionally followed by ", ..." or "; ..." */
    K_DURATION,   /* Go duration or plain seconds */
    K_RFC3339,    /* absolute RFC 3339 time */
    K_DELTA_SECS, /* delta-seconds, integer or decimal */
    K_EPOCH,      /* X-RateLimit-Reset heuristics */
    K_IETF,       /* RateLimit */
    K_IETF_POLICY /* RateLimit-Policy */
} hkind;

typedef enum hfield { F_LIMIT, F_REMAINING, F_RESET } hfield;

typedef struct header_row {
    const char *name;
    unsigned char kind;   /* hkind */
    unsigned char dim;    /* ratelimit_dim */
    unsigned char field;  /* hfield */
    unsigned char source; /* ratelimit_source */
} header_row;

#define PROV RATELIMIT_SRC_PROVIDER
#define REQ RATELIMIT_REQUESTS
#define TOK RATELIMIT_TOKENS
#define ITOK RATELIMIT_INPUT_TOKENS
#define OTOK RATELIMIT_OUTPUT_TOKENS

static const header_row header_rows[] = {
    /* OpenAI, Azure OpenAI */
    {"x-ratelimit-limit-requests", K_COUNT, REQ, F_LIMIT, PROV},
    {"x-ratelimit-remaining-requests", K_COUNT, REQ, F_REMAINING, PROV},
    {"x-ratelimit-reset-requests", K_DURATION, REQ, F_RESET, PROV},
    {"x-ratelimit-limit-tokens", K_COUNT, TOK, F_LIMIT, PROV},
    {"x-ratelimit-remaining-tokens", K_COUNT, TOK, F_REMAINING, PROV},
    {"x-ratelimit-reset-tokens", K_DURATION, TOK, F_RESET, PROV},
    /* Anthropic */
    {"anthropic-ratelimit-requests-limit", K_COUNT, REQ, F_LIMIT, PROV},
    {"anthropic-ratelimit-requests-remaining", K_COUNT, REQ, F_REMAINING, PROV},
    {"anthropic-ratelimit-requests-reset", K_RFC3339, REQ, F_RESET, PROV},
    {"anthropic-ratelimit-tokens-limit", K_COUNT, TOK, F_LIMIT, PROV},
    {"anthropic-ratelimit-tokens-remaining", K_COUNT, TOK, F_REMAINING, PROV},
    {"anthropic-ratelimit-tokens-reset", K_RFC3339, TOK, F_RESET, PROV},
    {"anthropic-ratelimit-input-tokens-limit", K_COUNT, ITOK, F_LIMIT, PROV},
    {"anthropic-ratelimit-input-tokens-remaining", K_COUNT, ITOK, F_REMAINING, PROV},
    {"anthropic-ratelimit-input-tokens-reset", K_RFC3339, ITOK, F_RESET, PROV},
    {"anthropic-ratelimit-output-tokens-limit", K_COUNT, OTOK, F_LIMIT, PROV},
    {"anthropic-ratelimit-output-tokens-remaining", K_COUNT, OTOK, F_REMAINING, PROV},
    {"anthropic-ratelimit-output-tokens-reset", K_RFC3339, OTOK, F_RESET, PROV},
    /* IETF draft-ietf-httpapi-ratelimit-headers */
    {"ratelimit", K_IETF, REQ, F_LIMIT, RATELIMIT_SRC_IETF},
    {"ratelimit-policy", K_IETF_POLICY, REQ, F_LIMIT, RATELIMIT_SRC_IETF},
    {"ratelimit-limit", K_COUNT_LEAD, REQ, F_LIMIT, RATELIMIT_SRC_IETF_SPLIT},
    {"ratelimit-remaining", K_COUNT_LEAD, REQ, F_REMAINING, RATELIMIT_SRC_IETF_SPLIT},
    {"ratelimit-reset", K_DELTA_SECS, REQ, F_RESET, RATELIMIT_SRC_IETF_SPLIT},
    /* de facto */
    {"x-ratelimit-limit", K_COUNT_LEAD, REQ, F_LIMIT, RATELIMIT_SRC_X_GENERIC},
    {"x-ratelimit-remaining", K_COUNT_LEAD, REQ, F_REMAINING, RATELIMIT_SRC_X_GENERIC},
    {"x-ratelimit-reset", K_EPOCH, REQ, F_RESET, RATELIMIT_SRC_X_GENERIC},
};

#undef PROV
#undef REQ
#undef TOK
#undef ITOK
#undef OTOK

static const ratelimit_value absent = {-1, -1, -1};

void ratelimit_init(ratelimit_feedback *fb, int64_t cap_ms) {
    if (fb == NULL) return;
    retry_after_init(&fb->retry, cap_ms);
    fb->recognised = 0;
    fb->invalid = 0;
    fb->policies_dropped = false;
    for (int s = 0; s < RATELIMIT_SRC__COUNT; s++)
        for (int d = 0; d < RATELIMIT_DIMS; d++) fb->val[s][d] = absent;
    fb->ietf_best = absent;
    fb->ietf_best_name = 0;
    fb->ietf_have = false;
    fb->npolicies = 0;
}

/* Merges one field conservatively: smallest limit and remaining, largest
 * reset. Each is a lattice operation, so order does not matter. */
static void merge_field(ratelimit_value *v, hfield f, int64_t x) {
    switch (f) {
    case F_LIMIT: v->limit = v->limit < 0 ? x : min64(v->limit, x); break;
    case F_REMAINING: v->remaining = v->remaining < 0 ? x : min64(v->remaining, x); break;
    case F_RESET:
        if (x > v->reset_ms) v->reset_ms = x;
        break;
    }
}

bool ratelimit_add_header(ratelimit_feedback *fb, const char *name, size_t name_len, const char *value,
                          size_t value_len, int64_t now_ms) {
    if (fb == NULL || name == NULL) return false;
    if (value == NULL) {
        value = "";
        value_len = 0;
    }
    if (retry_after_add_header(&fb->retry, name, name_len, value, value_len, now_ms)) {
        fb->recognised++;
        if (name_eq(name, name_len, "retry-after") ? retry_after_parse(value, value_len, now_ms) < 0
                                                   : retry_after_parse_ms(value, value_len) < 0)
            fb->invalid++;
        return true;
    }
    const header_row *row = NULL;
    for (size_t i = 0; i < sizeof header_rows / sizeof header_rows[0]; i++) {
        if (name_eq(name, name_len, header_rows[i].name)) {
            row = &header_rows[i];
            break;
        }
    }
    if (row == NULL) return false;
    fb->recognised++;
    int64_t x = -1;
    bool ok = true;
    switch ((hkind)row->kind) {
    case K_COUNT: x = ratelimit_parse_count(value, value_len); break;
    case K_COUNT_LEAD: x = parse_leading_count(value, value_len); break;
    case K_DURATION: x = ratelimit_parse_duration_ms(value, value_len); break;
    case K_RFC3339: x = parse_rfc3339_reset_ms(value, value_len, now_ms); break;
    case K_DELTA_SECS: x = parse_fixed(value, value_len, 3, RETRY_AFTER_MAX_MS); break;
    case K_EPOCH: x = ratelimit_parse_epoch_reset_ms(value, value_len, now_ms); break;
    case K_IETF: ok = apply_ietf_ratelimit(fb, value, value_len); break;
    case K_IETF_POLICY: ok = apply_ietf_policy(fb, value, value_len); break;
    }
    if (row->kind != K_IETF && row->kind != K_IETF_POLICY) {
        ok = x >= 0;
        if (ok) merge_field(&fb->val[row->source][row->dim], (hfield)row->field, x);
    }
    if (!ok) fb->invalid++;
    return true;
}

static bool has_any(const ratelimit_value *v) { return v->limit >= 0 || v->remaining >= 0 || v->reset_ms >= 0; }

/* The dimension as reported, without folding. */
static ratelimit_source get_raw(const ratelimit_feedback *fb, ratelimit_dim dim, ratelimit_value *out) {
    for (int s = RATELIMIT_SRC__COUNT - 1; s > RATELIMIT_SRC_NONE; s--) {
        ratelimit_value v = fb->val[s][dim];
        if (s == RATELIMIT_SRC_IETF) {
            if (dim != RATELIMIT_REQUESTS || !fb->ietf_have) continue;
            v = fb->ietf_best;
            for (int i = 0; v.limit < 0 && i < fb->npolicies; i++)
                if (fb->policy[i].name == fb->ietf_best_name) v.limit = fb->policy[i].quota;
        }
        if (has_any(&v)) {
            *out = v;
            return (ratelimit_source)s;
        }
    }
    *out = absent;
    return RATELIMIT_SRC_NONE;
}

/* For folding input and output tokens: is a the tighter constraint? */
static bool fold_tighter(const ratelimit_value *a, const ratelimit_value *b) {
    bool ae = a->remaining == 0, be = b->remaining == 0;
    if (ae != be) return ae;
    if (ae) return a->reset_ms >= b->reset_ms;
    if (a->remaining >= 0 && b->remaining >= 0) {
        if (a->limit > 0 && b->limit > 0)
            return (double)a->remaining / (double)a->limit <= (double)b->remaining / (double)b->limit;
        return a->remaining <= b->remaining;
    }
    if ((a->remaining >= 0) != (b->remaining >= 0)) return a->remaining >= 0;
    return a->reset_ms >= b->reset_ms;
}

ratelimit_source ratelimit_get_own(const ratelimit_feedback *fb, ratelimit_dim dim, ratelimit_value *out) {
    ratelimit_value dummy;
    if (out == NULL) out = &dummy;
    *out = absent;
    if (fb == NULL || (int)dim < 0 || (int)dim >= RATELIMIT_DIMS) return RATELIMIT_SRC_NONE;
    return get_raw(fb, dim, out);
}

ratelimit_source ratelimit_get(const ratelimit_feedback *fb, ratelimit_dim dim, ratelimit_value *out) {
    ratelimit_value dummy;
    if (out == NULL) out = &dummy;
    *out = absent;
    if (fb == NULL || (int)dim < 0 || (int)dim >= RATELIMIT_DIMS) return RATELIMIT_SRC_NONE;
    ratelimit_source src = get_raw(fb, dim, out);
    if (src != RATELIMIT_SRC_NONE || dim != RATELIMIT_TOKENS) return src;
    ratelimit_value in, outp;
    ratelimit_source sin = get_raw(fb, RATELIMIT_INPUT_TOKENS, &in);
    ratelimit_source sout = get_raw(fb, RATELIMIT_OUTPUT_TOKENS, &outp);
    if (sin == RATELIMIT_SRC_NONE && sout == RATELIMIT_SRC_NONE) return RATELIMIT_SRC_NONE;
    if (sout == RATELIMIT_SRC_NONE || (sin != RATELIMIT_SRC_NONE && fold_tighter(&in, &outp))) {
        *out = in;
        return sin;
    }
    *out = outp;
    return sout;
}

int64_t ratelimit_pause_ms(const ratelimit_feedback *fb, bool *over_cap) {
    if (over_cap != NULL) *over_cap = false;
    if (fb == NULL) return -1;
    int64_t pause = -1;
    if (fb->retry.delay_ms >= 0) {
        pause = fb->retry.delay_ms;
    } else {
        for (int d = 0; d < RATELIMIT_DIMS; d++) {
            ratelimit_value v;
            if (get_raw(fb, (ratelimit_dim)d, &v) != RATELIMIT_SRC_NONE && v.remaining == 0 && v.reset_ms > pause)
                pause = v.reset_ms;
        }
    }
    if (over_cap != NULL && pause > fb->retry.cap_ms) *over_cap = true;
    return pause;
}

int64_t ratelimit_settle_pause_ms(const ratelimit_feedback *fb, bool throttled, bool *over_cap) {
    if (over_cap != NULL) *over_cap = false;
    if (fb == NULL) return -1;
    if (fb->retry.delay_ms >= 0 || throttled) return ratelimit_pause_ms(fb, over_cap);
    return -1;
}

const char *ratelimit_dim_name(ratelimit_dim dim) {
    static const char *const names[RATELIMIT_DIMS] = {"requests", "tokens", "input_tokens", "output_tokens"};
    return ((int)dim >= 0 && (int)dim < RATELIMIT_DIMS) ? names[dim] : "?";
}

const char *ratelimit_source_name(ratelimit_source src) {
    static const char *const names[RATELIMIT_SRC__COUNT] = {"none", "x-ratelimit", "ratelimit-split", "ratelimit",
                                                            "provider"};
    return ((int)src >= 0 && (int)src < RATELIMIT_SRC__COUNT) ? names[src] : "?";
}
