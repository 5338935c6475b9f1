/* retry_after: Retry-After, retry-after-ms, x-ms-retry-after-ms. */
#include "retry_after.h"

#include "httpdate.h"
#include "lex.h"

/* Reads 1*DIGIT from v[*i..len), saturating at cap. */
static bool read_uint(const char *v, size_t len, size_t *i, int64_t cap, int64_t *out) {
    size_t start = *i;
    int64_t acc = 0;
    while (*i < len && is_digit(v[*i])) {
        int d = v[*i] - '0';
        if (acc > (cap - d) / 10) acc = cap;
        else acc = acc * 10 + d;
        (*i)++;
    }
    if (*i == start) return false;
    *out = acc;
    return true;
}

int64_t retry_after_parse(const char *value, size_t len, int64_t now_ms) {
    if (value == NULL) return -1;
    trim(&value, &len);
    if (len == 0) return -1;
    if (is_digit(value[0])) {
        size_t i = 0;
        int64_t secs;
        /* Saturating in seconds at MAX/1000 keeps the product exact. */
        if (!read_uint(value, len, &i, RETRY_AFTER_MAX_MS / 1000, &secs) || i != len) return -1;
        return secs * 1000;
    }
    int64_t now_s = now_ms / 1000 - (now_ms % 1000 < 0);
    int64_t when_s;
    if (httpdate_parse(value, len, now_s, &when_s) != 0) return -1;
    /* when_s is within years 0..9999 (|when_s| < 2.6e11), so the product
     * fits; now_ms is arbitrary, hence the care in the subtraction. */
    int64_t when_ms = when_s * 1000;
    if (now_ms >= when_ms) return 0;
    if (now_ms < 0 && when_ms > INT64_MAX + now_ms) return RETRY_AFTER_MAX_MS;
    int64_t d = when_ms - now_ms;
    return d > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS : d;
}

int64_t retry_after_parse_ms(const char *value, size_t len) {
    if (value == NULL) return -1;
    trim(&value, &len);
    size_t i = 0;
    int64_t ms;
    if (!read_uint(value, len, &i, RETRY_AFTER_MAX_MS, &ms)) return -1;
    if (i < len && value[i] == '.') {
        i++;
        size_t start = i;
        bool nonzero = false;
        while (i < len && is_digit(value[i])) {
            if (value[i] != '0') nonzero = true;
            i++;
        }
        if (i == start) return -1;
        if (nonzero && ms < RETRY_AFTER_MAX_MS) ms++;
    }
    return i == len ? ms : -1;
}

/* The family, with the parser and rank of each member. */
static const struct {
    const char *name;
    retry_after_source src;
    int rank;
} family[] = {
    {"retry-after", RETRY_AFTER_SRC_RETRY_AFTER, 1},
    {"x-ms-retry-after-ms", RETRY_AFTER_SRC_X_MS_RETRY_MS, 2},
    {"retry-after-ms", RETRY_AFTER_SRC_RETRY_AFTER_MS, 2},
};

static int rank_of(retry_after_source src) {
    for (size_t i = 0; i < sizeof family / sizeof family[0]; i++)
        if (family[i].src == src) return family[i].rank;
    return 0;
}

void retry_after_init(retry_after *ra, int64_t cap_ms) {
    if (ra == NULL) return;
    ra->delay_ms = -1;
    ra->over_cap = false;
    ra->source = RETRY_AFTER_SRC_NONE;
    ra->cap_ms = cap_ms < 0 ? RETRY_AFTER_DEFAULT_CAP_MS : cap_ms;
}

bool retry_after_add_header(retry_after *ra, const char *name, size_t name_len, const char *value, size_t value_len,
                            int64_t now_ms) {
    if (ra == NULL || name == NULL) return false;
    for (size_t i = 0; i < sizeof family / sizeof family[0]; i++) {
        if (!name_eq(name, name_len, family[i].name)) continue;
        retry_after_source src = family[i].src;
        int64_t d = src == RETRY_AFTER_SRC_RETRY_AFTER ? retry_after_parse(value, value_len, now_ms)
                                                       : retry_after_parse_ms(value, value_len);
        if (d < 0) return true;
        int cur = rank_of(ra->source);
        bool take = family[i].rank > cur ||
                    (family[i].rank == cur && (d > ra->delay_ms || (d == ra->delay_ms && src > ra->source)));
        if (take) {
            ra->delay_ms = d;
            ra->source = src;
            ra->over_cap = d > ra->cap_ms;
        }
        return true;
    }
    return false;
}

const char *retry_after_source_name(retry_after_source src) {
    switch (src) {
    case RETRY_AFTER_SRC_RETRY_AFTER: return "retry-after";
    case RETRY_AFTER_SRC_X_MS_RETRY_MS: return "x-ms-retry-after-ms";
    case RETRY_AFTER_SRC_RETRY_AFTER_MS: return "retry-after-ms";
    case RETRY_AFTER_SRC_NONE: break;
    }
    return "none";
}
