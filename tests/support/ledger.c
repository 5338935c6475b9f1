/* ledger: see ledger.h. */
#include "ledger.h"

#include <stdlib.h>

#include "proc.h"

double *ledger_accepts(const json_t *ledger, const char *dep, size_t *n) {
    json_t *d = json_object_get(json_object_get(ledger, "deployments"), dep);
    json_t *a = json_object_get(d, "accept_ms");
    size_t k = json_is_array(a) ? json_array_size(a) : 0;
    double *t = k ? malloc(k * sizeof(*t)) : NULL;
    *n = 0;
    if (!t) return NULL;
    for (size_t i = 0; i < k; i++) t[i] = json_number_value(json_array_get(a, i));
    *n = k;
    return t;
}

/* The first index with t[i] >= x. */
static size_t lower_bound(const double *t, size_t n, double x) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

size_t ledger_count(const double *t, size_t n, double from, double to) {
    if (to <= from) return 0;
    return lower_bound(t, n, to) - lower_bound(t, n, from);
}

size_t ledger_max_window(const double *t, size_t n, double w, double from, double to, double *at) {
    size_t best = 0, j = 0;
    *at = -1;
    for (size_t i = lower_bound(t, n, from); i < n && t[i] < to; i++) {
        if (j < i) j = i;
        while (j < n && t[j] < t[i] + w) j++;
        if (j - i > best) {
            best = j - i;
            *at = t[i];
        }
    }
    return best;
}

double ledger_max_window_ratio(const double *t, size_t n, double w, double from, double to,
                               double (*quota)(double s, double e, void *ud), void *ud, double *at, size_t *count,
                               double *quota_out) {
    double best = 0;
    size_t j = 0;
    *at = -1;
    *count = 0;
    *quota_out = 0;
    for (size_t i = lower_bound(t, n, from); i < n && t[i] < to; i++) {
        if (j < i) j = i;
        while (j < n && t[j] < t[i] + w) j++;
        double q = quota(t[i], t[i] + w, ud);
        double ratio = q > 0 ? (double)(j - i) / q : 0;
        if (ratio > best) {
            best = ratio;
            *at = t[i];
            *count = j - i;
            *quota_out = q;
        }
    }
    return best;
}

int ledger_clock_offset(const mock_fixture *m, double *offset, double *err_ms) {
    double before = proc_now_ms();
    json_t *l = mock_fixture_stats(m, "");
    double after = proc_now_ms();
    if (!l) return -1;
    json_t *now = json_object_get(l, "now_ms");
    int ok = json_is_number(now);
    if (ok) {
        *offset = (before + after) / 2 - json_number_value(now);
        if (err_ms) *err_ms = (after - before) / 2;
    }
    json_decref(l);
    return ok ? 0 : -1;
}
