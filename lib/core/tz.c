/* tz: see tz.h. RFC 8536 (TZif) and POSIX's TZ rule for the footer. */
#include "tz.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TZ_DIR "/usr/share/zoneinfo"
#define TZ_MAX_FILE (1 << 20)
#define DAY_S 86400LL

/* A POSIX TZ rule's change: month m, week w (5 = last), weekday d (0 =
 * Sunday), at local time secs of the day. */
typedef struct tz_mrule {
    int m, w, d;
    long long secs;
} tz_mrule;

struct tz_zone {
    long long *at; /* transition times, s since the epoch, ascending */
    int *off;      /* the offset (s) from each transition on */
    size_t n;
    int off0;       /* before the first transition */
    int has_rule;   /* the footer's rule applies after the last transition */
    int std, dst;   /* its offsets (s, east of UTC) */
    int has_dst;    /* std only when 0 */
    tz_mrule start; /* to dst */
    tz_mrule end;   /* back to std */
};

static long long be(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v = (v << 8) | p[i];
    if (bytes == 4) return (long long)(int32_t)(uint32_t)v;
    return (long long)(int64_t)v;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant). */
static long long days_from_civil(long long y, int m, int d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static long long year_of(long long t) {
    long long z = (t >= 0 ? t : t - (DAY_S - 1)) / DAY_S + 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    long long m = mp + (mp < 10 ? 3 : -9);
    return yoe + era * 400 + (m <= 2);
}

static int month_days(long long y, int m) {
    static const int md[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : md[m - 1];
}

/* The UTC second of r's change in year y, made in local time of offset. */
static long long mrule_at(const tz_mrule *r, long long y, int offset) {
    long long first = days_from_civil(y, r->m, 1);
    int dow1 = (int)(((first % 7) + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
    int day = 1 + (r->d - dow1 + 7) % 7 + 7 * (r->w - 1);
    while (day > month_days(y, r->m)) day -= 7;
    return (first + day - 1) * DAY_S + r->secs - offset;
}

/* ---- the footer's POSIX TZ rule ---- */

static int parse_name(const char **p) {
    const char *s = *p;
    if (*s == '<') {
        while (*s && *s != '>') s++;
        if (*s != '>') return -1;
        *p = s + 1;
        return 0;
    }
    const char *b = s;
    while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')) s++;
    if (s - b < 3) return -1;
    *p = s;
    return 0;
}

/* [+-]hh[:mm[:ss]] into *secs. */
static int parse_hms(const char **p, long long *secs) {
    const char *s = *p;
    int sign = 1;
    if (*s == '+' || *s == '-') sign = *s++ == '-' ? -1 : 1;
    if (*s < '0' || *s > '9') return -1;
    long long v[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        if (k && *s != ':') break;
        if (k) s++;
        if (*s < '0' || *s > '9') return -1;
        while (*s >= '0' && *s <= '9') v[k] = v[k] * 10 + (*s++ - '0');
        if (v[k] > 167) return -1;
    }
    *secs = sign * (v[0] * 3600 + v[1] * 60 + v[2]);
    *p = s;
    return 0;
}

static int parse_mrule(const char **p, tz_mrule *r) {
    const char *s = *p;
    if (*s++ != 'M') return -1; /* Jn and n are not used by current zones */
    char *e;
    long m = strtol(s, &e, 10);
    if (e == s || *e != '.' || m < 1 || m > 12) return -1;
    s = e + 1;
    long w = strtol(s, &e, 10);
    if (e == s || *e != '.' || w < 1 || w > 5) return -1;
    s = e + 1;
    long d = strtol(s, &e, 10);
    if (e == s || d < 0 || d > 6) return -1;
    s = e;
    r->m = (int)m, r->w = (int)w, r->d = (int)d, r->secs = 7200;
    if (*s == '/') {
        s++;
        if (parse_hms(&s, &r->secs) != 0) return -1;
    }
    *p = s;
    return 0;
}

static int parse_rule(tz_zone *z, const char *s) {
    long long off;
    if (parse_name(&s) != 0 || parse_hms(&s, &off) != 0) return -1;
    z->std = (int)-off; /* POSIX offsets are west of UTC */
    z->dst = z->std + 3600;
    if (!*s) {
        z->has_rule = 1;
        return 0;
    }
    if (parse_name(&s) != 0) return -1;
    if (*s && *s != ',') {
        if (parse_hms(&s, &off) != 0) return -1;
        z->dst = (int)-off;
    }
    if (*s++ != ',' || parse_mrule(&s, &z->start) != 0 || *s++ != ',' || parse_mrule(&s, &z->end) != 0 || *s) return -1;
    z->has_dst = 1;
    z->has_rule = 1;
    return 0;
}

/* ---- the file ---- */

static int fail(char *err, size_t n, const char *fmt, const char *a, const char *b) {
    if (err && n) snprintf(err, n, fmt, a, b);
    return -1;
}

static int name_ok(const char *name) {
    if (!name[0] || name[0] == '/' || strlen(name) > 255) return 0;
    for (const char *p = name; *p; p++) {
        char c = *p;
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '/' || c == '_' ||
                 c == '-' || c == '+';
        if (!ok) return 0;
        if (c == '/' && p[1] == '/') return 0;
    }
    return !strstr(name, "..");
}

/* Parses the data block at p (version v: 4- or 8-byte times) of a file
 * ending at end into z; *next: the byte after it. */
static int parse_block(tz_zone *z, const unsigned char *p, const unsigned char *end, int tbytes,
                       const unsigned char **next) {
    if (end - p < 44 || memcmp(p, "TZif", 4) != 0) return -1;
    long long isut = be(p + 20, 4), isstd = be(p + 24, 4), leap = be(p + 28, 4), timecnt = be(p + 32, 4),
              typecnt = be(p + 36, 4), charcnt = be(p + 40, 4);
    if (isut < 0 || isstd < 0 || leap < 0 || timecnt < 0 || typecnt < 1 || charcnt < 0 || timecnt > 100000 ||
        typecnt > 256)
        return -1;
    p += 44;
    long long need = timecnt * tbytes + timecnt + typecnt * 6 + charcnt + leap * (tbytes + 4) + isstd + isut;
    if (end - p < need) return -1;
    const unsigned char *times = p, *idx = p + timecnt * tbytes, *types = idx + timecnt;
    free(z->at);
    free(z->off);
    z->at = calloc((size_t)timecnt + 1, sizeof(*z->at));
    z->off = calloc((size_t)timecnt + 1, sizeof(*z->off));
    if (!z->at || !z->off) return -1;
    for (long long i = 0; i < timecnt; i++) {
        if (idx[i] >= typecnt) return -1;
        z->at[i] = be(times + i * tbytes, tbytes);
        if (i && z->at[i] <= z->at[i - 1]) return -1;
        z->off[i] = (int)be(types + 6 * idx[i], 4);
    }
    z->n = (size_t)timecnt;
    z->off0 = (int)be(types, 4); /* RFC 8536: type 0 before the first transition */
    *next = p + need;
    return 0;
}

int tz_load(const char *dir, const char *name, tz_zone **out, char *err, size_t errlen) {
    *out = NULL;
    if (!name || !name_ok(name)) return fail(err, errlen, "not a time zone name: '%s'%s", name ? name : "", "");
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir ? dir : TZ_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "unknown time zone '%s' (no %s in the tz database; install tzdata)", name, path);
    unsigned char *buf = malloc(TZ_MAX_FILE);
    size_t len = buf ? fread(buf, 1, TZ_MAX_FILE, f) : 0;
    fclose(f);
    tz_zone *z = calloc(1, sizeof(*z));
    if (!buf || !z) {
        free(buf);
        free(z);
        return fail(err, errlen, "out of memory loading time zone '%s'%s", name, "");
    }
    const unsigned char *end = buf + len, *next = NULL;
    int rc = parse_block(z, buf, end, 4, &next);
    if (rc == 0 && buf[4] >= '2') {
        /* Version 2+: the 64-bit block follows, then the footer. */
        rc = parse_block(z, next, end, 8, &next);
        if (rc == 0 && next < end && *next == '\n') {
            const unsigned char *nl = memchr(next + 1, '\n', (size_t)(end - next - 1));
            if (!nl) {
                rc = -1;
            } else if (nl > next + 1) {
                char rule[128];
                size_t rl = (size_t)(nl - next - 1);
                if (rl >= sizeof(rule) || (memcpy(rule, next + 1, rl), rule[rl] = '\0', parse_rule(z, rule) != 0))
                    z->has_rule = 0; /* an unsupported rule: the transitions alone */
            }
        }
    }
    free(buf);
    if (rc != 0) {
        tz_free(z);
        return fail(err, errlen, "time zone '%s': %s is not a TZif file", name, path);
    }
    *out = z;
    return 0;
}

void tz_free(tz_zone *z) {
    if (!z) return;
    free(z->at);
    free(z->off);
    free(z);
}

static long long floor_div(long long a, long long b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

/* The rule's offset at t (s), past the last transition. */
static int rule_offset(const tz_zone *z, long long t) {
    if (!z->has_dst) return z->std;
    long long y = year_of(t);
    long long s = mrule_at(&z->start, y, z->std), e = mrule_at(&z->end, y, z->dst);
    int in_dst = s < e ? (t >= s && t < e) : !(t >= e && t < s);
    return in_dst ? z->dst : z->std;
}

static int offset_s(const tz_zone *z, long long t) {
    if (z->n == 0 || t < z->at[0]) return z->n == 0 && z->has_rule ? rule_offset(z, t) : z->off0;
    if (t >= z->at[z->n - 1] && z->has_rule) return rule_offset(z, t);
    size_t lo = 0, hi = z->n; /* the last transition at or before t */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (z->at[mid] <= t) lo = mid;
        else hi = mid;
    }
    return z->off[lo];
}

long long tz_offset_ms(const tz_zone *z, long long t_ms) {
    return (long long)offset_s(z, floor_div(t_ms, 1000)) * 1000;
}

long long tz_next_change_ms(const tz_zone *z, long long t_ms) {
    long long t = floor_div(t_ms, 1000);
    for (size_t i = 0; i < z->n; i++)
        if (z->at[i] > t && z->off[i] != offset_s(z, z->at[i] - 1)) return z->at[i] * 1000;
    if (!z->has_rule || !z->has_dst) return -1;
    long long from = z->n && t < z->at[z->n - 1] ? z->at[z->n - 1] : t;
    for (long long y = year_of(from); y <= year_of(from) + 2; y++) {
        long long c[2] = {mrule_at(&z->start, y, z->std), mrule_at(&z->end, y, z->dst)};
        if (c[0] > c[1]) {
            long long x = c[0];
            c[0] = c[1], c[1] = x;
        }
        for (int k = 0; k < 2; k++)
            if (c[k] > from && c[k] > t && offset_s(z, c[k]) != offset_s(z, c[k] - 1)) return c[k] * 1000;
    }
    return -1;
}

int tz_changes(const tz_zone *z, long long from_ms, long long to_ms, char *buf, size_t n) {
    size_t k = 0;
    int w = snprintf(buf, n, "%lld", tz_offset_ms(z, from_ms));
    if (w < 0) return -1;
    k = (size_t)w;
    for (long long t = tz_next_change_ms(z, from_ms); t >= 0 && t <= to_ms; t = tz_next_change_ms(z, t)) {
        w = snprintf(k < n ? buf + k : NULL, k < n ? n - k : 0, ",%lld,%lld", t, tz_offset_ms(z, t));
        if (w < 0) return -1;
        k += (size_t)w;
    }
    return (int)k;
}
