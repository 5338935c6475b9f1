/* demo_report: see demo_report.h. */
#include "demo_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static long long get_int(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

static double get_num(const json_t *o, const char *key, double absent) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : absent;
}

int demo_row_add_worker(demo_row *row, const json_t *r) {
    const json_t *lat = json_object_get(r, "latency_ms");
    if (!json_is_object(r) || !json_is_array(lat)) return -1;
    row->c_completed += get_int(r, "completed");
    row->c_gave_up += get_int(r, "gave_up");
    row->c_attempts += get_int(r, "attempts");
    row->c_429 += get_int(r, "status_429");
    row->c_http_errors += get_int(r, "http_errors");
    row->c_transport_errors += get_int(r, "transport_errors");
    row->c_sheds += get_int(r, "sheds");
    row->c_retry_denied += get_int(r, "retry_denied");
    row->c_sluice_errors += get_int(r, "sluice_errors");
    row->c_settle_errors += get_int(r, "settle_errors");
    double end = get_num(r, "end_ms", 0);
    if (end > row->wall_ms) row->wall_ms = end;
    size_t n = json_array_size(lat);
    if (row->nlat + n > row->caplat) {
        size_t cap = (row->nlat + n) * 2;
        double *p = realloc(row->latency_ms, cap * sizeof(double));
        if (!p) return -1;
        row->latency_ms = p;
        row->caplat = cap;
    }
    for (size_t i = 0; i < n; i++) row->latency_ms[row->nlat++] = json_number_value(json_array_get(lat, i));
    return 0;
}

int demo_row_add_ledger(demo_row *row, const json_t *stats) {
    const json_t *deps = json_object_get(stats, "deployments");
    if (!json_is_object(stats) || !json_is_object(deps)) return -1;
    const json_t *d = json_object_get(deps, row->deployment);
    row->p_first_accept_ms = row->p_last_accept_ms = -1;
    if (!d) return 0;
    row->p_requests = get_int(d, "requests");
    row->p_accepted = get_int(d, "accepted");
    row->p_429 = get_int(d, "status_429");
    row->p_abandoned = get_int(d, "abandoned");
    row->p_tokens = get_int(d, "tokens_charged");
    row->p_other =
        get_int(d, "status_503") + get_int(d, "status_400") + get_int(d, "status_404") + get_int(d, "other_errors");
    row->p_first_accept_ms = get_num(d, "first_accept_ms", -1);
    row->p_last_accept_ms = get_num(d, "last_accept_ms", -1);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The seed harness' percentile: lat[min(n - 1, int(q * n))]. */
static double percentile(const double *v, size_t n, double q) {
    if (n == 0) return 0;
    size_t i = (size_t)(q * (double)n);
    return v[i < n ? i : n - 1];
}

static double request_floor_ms(const demo_setup *s) {
    double f = ((double)s->requests - s->burst) * 60000.0 / s->rpm;
    return f > 0 ? f : 0;
}

static double token_floor_ms(const demo_setup *s) {
    double f = s->tpm > 0 ? (s->tokens - s->token_burst) * 60000.0 / s->tpm : 0;
    return f > 0 ? f : 0;
}

int demo_tokens_bind(const demo_setup *s) { return token_floor_ms(s) > request_floor_ms(s); }

double demo_floor_ms(const demo_setup *s) { return demo_tokens_bind(s) ? token_floor_ms(s) : request_floor_ms(s); }

void demo_row_finish(demo_row *row, const demo_setup *s) {
    qsort(row->latency_ms, row->nlat, sizeof(double), cmp_double);
    row->p50_ms = percentile(row->latency_ms, row->nlat, 0.5);
    row->p99_ms = percentile(row->latency_ms, row->nlat, 0.99);
    row->eff_rpm = row->wall_ms > 0 ? (double)row->p_accepted / row->wall_ms * 60000.0 : 0;
    double span = row->p_last_accept_ms - row->p_first_accept_ms;
    int tokens = demo_tokens_bind(s);
    double beyond = tokens ? (double)row->p_tokens - s->token_burst : (double)row->p_accepted - s->burst;
    double rate = tokens ? s->tpm : s->rpm;
    row->util = row->p_first_accept_ms >= 0 && span > 0 && beyond > 0 ? beyond * 60000.0 / rate / span : -1;
}

void demo_row_free(demo_row *row) {
    free(row->latency_ms);
    row->latency_ms = NULL;
    row->nlat = row->caplat = 0;
}

/* ---- text ----------------------------------------------------------------------- */

static const char *secs(double ms, char *buf, size_t n) {
    if (ms < 10000) snprintf(buf, n, "%.2f s", ms / 1000);
    else snprintf(buf, n, "%.1f s", ms / 1000);
    return buf;
}

void demo_report_header(FILE *f, const demo_setup *s) {
    char fl[32];
    fprintf(f, "sluice demo, scenario %s: %d worker processes share one deployment: %g RPM, burst %g", s->scenario,
            s->processes, s->rpm, s->burst);
    if (s->tpm > 0) fprintf(f, ", %g TPM, token burst %g", s->tpm, s->token_burst);
    fprintf(f, ", service %g-%g ms;\n%lld requests arrive at once, each allowed %d attempts", s->service_min_ms,
            s->service_max_ms, s->requests, s->attempts);
    if (s->prompt_chars > 0)
        fprintf(f, ", a %lld-character prompt and max_tokens %lld (%.0f tokens charged in all)", s->prompt_chars,
                s->max_tokens, s->tokens);
    fprintf(f, ". Time scale %g", s->time_scale);
    if (s->time_scale == 1) fprintf(f, " (real time).\n");
    else fprintf(f, " (client waits divided by %g).\n", s->time_scale);
    fprintf(f, "Redis: %s", s->redis);
    if (s->agents > 1)
        fprintf(f, ", %d sluiced agents%s", s->agents, s->agents == s->processes ? " (one per worker process)" : "");
    if (demo_tokens_bind(s))
        fprintf(f, ". Floor (tokens - token burst) / token rate = %s (TPM binds).\n\n",
                secs(demo_floor_ms(s), fl, sizeof(fl)));
    else fprintf(f, ". Floor (N - burst) / rate = %s.\n\n", secs(demo_floor_ms(s), fl, sizeof(fl)));
}

void demo_report_columns(FILE *f) {
    fprintf(f, "%-24s %13s %7s %6s %8s %8s %8s %8s %8s %6s\n", "strategy", "completed", "gave up", "429s", "attempts",
            "p50", "p99", "wall", "eff RPM", "util");
}

void demo_report_row(FILE *f, const demo_row *r) {
    if (!r->ok) {
        fprintf(f, "%-24s  failed: %s\n", r->st->name, r->error);
        return;
    }
    char done[40], p50[24], p99[24], wall[24], util[16];
    snprintf(done, sizeof(done), "%lld / %lld", r->p_accepted, r->c_completed + r->c_gave_up);
    if (r->util >= 0) snprintf(util, sizeof(util), "%.0f %%", r->util * 100);
    else snprintf(util, sizeof(util), "-");
    fprintf(f, "%-24s %13s %7lld %6lld %8lld %8s %8s %8s %8.1f %6s\n", r->st->name, done, r->c_gave_up, r->p_429,
            r->p_requests, r->nlat ? secs(r->p50_ms, p50, sizeof(p50)) : "-",
            r->nlat ? secs(r->p99_ms, p99, sizeof(p99)) : "-", secs(r->wall_ms, wall, sizeof(wall)), r->eff_rpm, util);
}

void demo_report_footer(FILE *f, const demo_setup *s) {
    fprintf(f,
            "\ncompleted, 429s, attempts: the provider's own ledger (sluice mock). gave up, p50, p99, wall:\n"
            "the clients'. eff RPM: completed per minute of wall. util: %s over the\n"
            "time between the provider's first and last accept; 100 %% is the deployment's full %s.\n"
            "Each strategy starts from a fresh deployment (full bucket). See docs/demo.md.\n",
            demo_tokens_bind(s) ? "((tokens charged - token burst) / token rate)" : "((completed - burst) / rate)",
            demo_tokens_bind(s) ? "token rate" : "rate");
}

/* ---- JSON ----------------------------------------------------------------------- */

static json_t *num_or_null(double v, int defined) { return defined ? json_real(v) : json_null(); }

static json_t *row_json(const demo_row *r) {
    json_t *o = json_pack("{s:s, s:s, s:s, s:b}", "id", r->st->id, "name", r->st->name, "deployment",
                          r->deployment ? r->deployment : "", "ok", r->ok);
    if (!o) return NULL;
    if (!r->ok) {
        json_object_set_new(o, "error", json_string(r->error));
        return o;
    }
    json_object_set_new(o, "requests", json_integer(r->c_completed + r->c_gave_up));
    json_object_set_new(o, "completed", json_integer(r->p_accepted));
    json_object_set_new(o, "gave_up", json_integer(r->c_gave_up));
    json_object_set_new(o, "status_429", json_integer(r->p_429));
    json_object_set_new(o, "attempts", json_integer(r->p_requests));
    json_object_set_new(o, "p50_ms", num_or_null(r->p50_ms, r->nlat > 0));
    json_object_set_new(o, "p99_ms", num_or_null(r->p99_ms, r->nlat > 0));
    json_object_set_new(o, "wall_ms", json_real(r->wall_ms));
    json_object_set_new(o, "effective_rpm", json_real(r->eff_rpm));
    json_object_set_new(o, "utilisation", num_or_null(r->util, r->util >= 0));
    json_object_set_new(o, "provider",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "requests", (json_int_t)r->p_requests,
                                  "accepted", (json_int_t)r->p_accepted, "status_429", (json_int_t)r->p_429,
                                  "tokens_charged", (json_int_t)r->p_tokens, "other_errors", (json_int_t)r->p_other,
                                  "abandoned", (json_int_t)r->p_abandoned, "first_accept_ms",
                                  num_or_null(r->p_first_accept_ms, r->p_first_accept_ms >= 0), "last_accept_ms",
                                  num_or_null(r->p_last_accept_ms, r->p_last_accept_ms >= 0)));
    json_object_set_new(o, "clients",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "completed",
                                  (json_int_t)r->c_completed, "gave_up", (json_int_t)r->c_gave_up, "attempts",
                                  (json_int_t)r->c_attempts, "status_429", (json_int_t)r->c_429, "http_errors",
                                  (json_int_t)r->c_http_errors, "transport_errors", (json_int_t)r->c_transport_errors,
                                  "sheds", (json_int_t)r->c_sheds, "retry_denied", (json_int_t)r->c_retry_denied,
                                  "sluice_errors", (json_int_t)r->c_sluice_errors, "settle_errors",
                                  (json_int_t)r->c_settle_errors));
    return o;
}

json_t *demo_report_json(const demo_setup *s, const demo_row *rows, int nrows) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < nrows; i++) {
        json_t *r = row_json(&rows[i]);
        if (!r || json_array_append_new(arr, r) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    if (!arr) return NULL;
    return json_pack("{s:{s:s, s:i, s:I, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:[f,f], s:i, s:f, s:I, s:s, s:i}, "
                     "s:f, s:s, s:o}",
                     "setup", "scenario", s->scenario, "processes", s->processes, "requests", (json_int_t)s->requests,
                     "rpm", s->rpm, "burst", s->burst, "tpm", s->tpm, "token_burst", s->token_burst, "prompt_chars",
                     (json_int_t)s->prompt_chars, "max_tokens", (json_int_t)s->max_tokens, "tokens", s->tokens,
                     "service_ms", s->service_min_ms, s->service_max_ms, "attempts", s->attempts, "time_scale",
                     s->time_scale, "jitter_ms", (json_int_t)s->jitter_ms, "redis", s->redis, "agents", s->agents,
                     "floor_ms", demo_floor_ms(s), "binding", demo_tokens_bind(s) ? "tokens" : "requests", "strategies",
                     arr);
}
