/* httpdate: HTTP-date (RFC 9110 §5.6.7) and RFC 3339 parsing, IMF-fixdate
 * formatting. See httpdate.h for the accepted grammar. */
#include "httpdate.h"

#include "lex.h"

#include <stdbool.h>

static const char *const wkday_short[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const wkday_long[7] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
static const char *const month_short[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* Floor division for a positive divisor. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b) != 0 && a < 0) q--;
    return q;
}

int64_t httpdate_days_from_civil(int64_t y, int m, int d) {
    /* Howard Hinnant's days_from_civil: exact over the whole int range we
     * feed it (years 0..9999 and a century either side). */
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t mp = m > 2 ? m - 3 : m + 9;
    int64_t doy = (153 * mp + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Inverse of httpdate_days_from_civil. */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

int httpdate_weekday(int64_t days) {
    /* 1970-01-01 was a Thursday (4). */
    int64_t w = (days + 4) % 7;
    return (int)(w < 0 ? w + 7 : w);
}

static bool is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int httpdate_days_in_month(int64_t year, int month) {
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month < 1 || month > 12) return 0;
    if (month == 2 && is_leap(year)) return 29;
    return dim[month - 1];
}

/* A read cursor over a length-delimited string. */
typedef struct cursor {
    const char *p;
    const char *end;
} cursor;

static bool at_end(const cursor *c) { return c->p == c->end; }

/* Consumes ch exactly. */
static bool eat(cursor *c, char ch) {
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* Consumes exactly n digits into *out. */
static bool digits(cursor *c, int n, int *out) {
    if (c->end - c->p < n) return false;
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(c->p[i])) return false;
        v = v * 10 + (c->p[i] - '0');
    }
    c->p += n;
    *out = v;
    return true;
}

/* Consumes one word of a table, case-insensitively, requiring that no
 * letter follows it. Returns its index or -1. */
static int word(cursor *c, const char *const *table, int n) {
    for (int i = 0; i < n; i++) {
        const char *w = table[i];
        const char *q = c->p;
        while (*w && q < c->end && lower(*q) == lower(*w)) {
            q++;
            w++;
        }
        if (*w == '\0' && (q == c->end || !((lower(*q) >= 'a' && lower(*q) <= 'z')))) {
            c->p = q;
            return i;
        }
    }
    return -1;
}

/* Consumes "GMT" in any case. */
static bool gmt(cursor *c) {
    static const char *const g[1] = {"GMT"};
    return word(c, g, 1) == 0;
}

/* time-of-day = hour ":" minute ":" second, each two digits. */
static bool time_of_day(cursor *c, int *h, int *mi, int *s) {
    return digits(c, 2, h) && eat(c, ':') && digits(c, 2, mi) && eat(c, ':') && digits(c, 2, s) && *h <= 23 &&
           *mi <= 59 && *s <= 60;
}

/* Validates the calendar fields and produces Unix seconds. wday is the
 * weekday named in the string, or -1 when the form has none. */
static bool assemble(int64_t y, int mon, int d, int h, int mi, int s, int wday, int64_t *out) {
    if (d < 1 || d > httpdate_days_in_month(y, mon)) return false;
    int64_t days = httpdate_days_from_civil(y, mon, d);
    if (wday >= 0 && httpdate_weekday(days) != wday) return false;
    *out = days * 86400 + (int64_t)h * 3600 + (int64_t)mi * 60 + s;
    return true;
}

static int64_t two_digit_year(int yy, int64_t now_s) {
    int64_t now_y;
    int m, d;
    civil_from_days(floor_div(now_s, 86400), &now_y, &m, &d);
    int64_t y = now_y - ((now_y % 100) + 100) % 100 + yy;
    if (y > now_y + 50) y -= 100;
    else if (y <= now_y - 50) y += 100;
    return y;
}

int httpdate_parse(const char *s, size_t len, int64_t now_s, int64_t *out_s) {
    if (s == NULL || out_s == NULL) return -1;
    cursor c = {s, s + len};
    int h, mi, sec, d, mon, y;
    int64_t t;

    cursor save = c;
    int wd = word(&c, wkday_short, 7);
    if (wd >= 0 && eat(&c, ',')) {
        /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
        if (!(eat(&c, ' ') && digits(&c, 2, &d) && eat(&c, ' '))) return -1;
        if ((mon = word(&c, month_short, 12)) < 0) return -1;
        if (!(eat(&c, ' ') && digits(&c, 4, &y) && eat(&c, ' ') && time_of_day(&c, &h, &mi, &sec) && eat(&c, ' ') &&
              gmt(&c) && at_end(&c)))
            return -1;
        if (!assemble(y, mon + 1, d, h, mi, sec, wd, &t)) return -1;
        *out_s = t;
        return 0;
    }
    if (wd >= 0 && eat(&c, ' ')) {
        /* asctime: "Sun Nov  6 08:49:37 1994" */
        if ((mon = word(&c, month_short, 12)) < 0 || !eat(&c, ' ')) return -1;
        if (eat(&c, ' ')) {
            if (!digits(&c, 1, &d)) return -1;
        } else if (!digits(&c, 2, &d)) {
            return -1;
        }
        if (!(eat(&c, ' ') && time_of_day(&c, &h, &mi, &sec) && eat(&c, ' ') && digits(&c, 4, &y) && at_end(&c)))
            return -1;
        if (!assemble(y, mon + 1, d, h, mi, sec, wd, &t)) return -1;
        *out_s = t;
        return 0;
    }
    c = save;
    wd = word(&c, wkday_long, 7);
    if (wd >= 0 && eat(&c, ',')) {
        /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
        int yy;
        if (!(eat(&c, ' ') && digits(&c, 2, &d) && eat(&c, '-'))) return -1;
        if ((mon = word(&c, month_short, 12)) < 0) return -1;
        if (!(eat(&c, '-') && digits(&c, 2, &yy) && eat(&c, ' ') && time_of_day(&c, &h, &mi, &sec) && eat(&c, ' ') &&
              gmt(&c) && at_end(&c)))
            return -1;
        /* Only an extreme now (around year 0 or 9999) can push the year
         * out of the range the other forms can express. */
        int64_t year = two_digit_year(yy, now_s);
        if (year < 0 || year > 9999 || !assemble(year, mon + 1, d, h, mi, sec, wd, &t)) return -1;
        *out_s = t;
        return 0;
    }
    return -1;
}

int httpdate_parse_rfc3339(const char *s, size_t len, int64_t *out_ms) {
    if (s == NULL || out_ms == NULL) return -1;
    cursor c = {s, s + len};
    int y, mon, d, h, mi, sec;
    if (!(digits(&c, 4, &y) && eat(&c, '-') && digits(&c, 2, &mon) && eat(&c, '-') && digits(&c, 2, &d))) return -1;
    if (!(eat(&c, 'T') || eat(&c, 't') || eat(&c, ' '))) return -1;
    if (!time_of_day(&c, &h, &mi, &sec)) return -1;
    int64_t frac_ms = 0;
    if (eat(&c, '.')) {
        int n = 0;
        bool round_up = false;
        while (!at_end(&c) && is_digit(*c.p)) {
            int dgt = *c.p - '0';
            if (n < 3) frac_ms = frac_ms * 10 + dgt;
            else if (dgt != 0) round_up = true;
            n++;
            c.p++;
        }
        if (n == 0) return -1;
        for (int i = n; i < 3; i++) frac_ms *= 10;
        if (round_up) frac_ms++;
    }
    int64_t offset_s = 0;
    if (eat(&c, 'Z') || eat(&c, 'z')) {
        /* UTC */
    } else {
        int sign;
        if (eat(&c, '+')) sign = 1;
        else if (eat(&c, '-')) sign = -1;
        else return -1;
        int oh, om;
        if (!(digits(&c, 2, &oh) && eat(&c, ':') && digits(&c, 2, &om)) || oh > 23 || om > 59) return -1;
        offset_s = sign * ((int64_t)oh * 3600 + (int64_t)om * 60);
    }
    if (!at_end(&c) || mon < 1 || mon > 12) return -1;
    int64_t t;
    if (!assemble(y, mon, d, h, mi, sec, -1, &t)) return -1;
    /* Local time = UTC + offset, so UTC = local - offset. */
    *out_ms = (t - offset_s) * 1000 + frac_ms;
    return 0;
}

static void put2(char *p, int v) {
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

int httpdate_format(int64_t epoch_s, char *buf, size_t bufsz) {
    /* 0000-01-01T00:00:00Z .. 9999-12-31T23:59:59Z */
    const int64_t lo = httpdate_days_from_civil(0, 1, 1) * 86400;
    const int64_t hi = httpdate_days_from_civil(10000, 1, 1) * 86400 - 1;
    if (buf == NULL || bufsz < HTTPDATE_BUFSZ || epoch_s < lo || epoch_s > hi) return -1;
    int64_t days = floor_div(epoch_s, 86400);
    int64_t secs = epoch_s - days * 86400;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    const char *wd = wkday_short[httpdate_weekday(days)];
    const char *mn = month_short[m - 1];
    char *p = buf;
    p[0] = wd[0];
    p[1] = wd[1];
    p[2] = wd[2];
    p[3] = ',';
    p[4] = ' ';
    put2(p + 5, d);
    p[7] = ' ';
    p[8] = mn[0];
    p[9] = mn[1];
    p[10] = mn[2];
    p[11] = ' ';
    put2(p + 12, (int)(y / 100));
    put2(p + 14, (int)(y % 100));
    p[16] = ' ';
    put2(p + 17, (int)(secs / 3600));
    p[19] = ':';
    put2(p + 20, (int)(secs / 60 % 60));
    p[22] = ':';
    put2(p + 23, (int)(secs % 60));
    p[25] = ' ';
    p[26] = 'G';
    p[27] = 'M';
    p[28] = 'T';
    p[29] = '\0';
    return HTTPDATE_IMF_LEN;
}
