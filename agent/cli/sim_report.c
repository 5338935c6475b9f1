/* sim_report: see sim_report.h. */
#include "sim_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int sim_wait_add(sim_wait_class **classes, size_t *n, const char *name, double ms) {
    sim_wait_class *c = NULL;
    for (size_t i = 0; i < *n && !c; i++)
        if (strcmp((*classes)[i].name, name) == 0) c = &(*classes)[i];
    if (!c) {
        sim_wait_class *nc = realloc(*classes, (*n + 1) * sizeof(*nc));
        if (!nc) return -1;
        *classes = nc;
        c = &nc[(*n)++];
        memset(c, 0, sizeof(*c));
        snprintf(c->name, sizeof(c->name), "%s", name);
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        double *m = realloc(c->ms, cap * sizeof(*m));
        if (!m) return -1;
        c->ms = m;
        c->cap = cap;
    }
    c->ms[c->n++] = ms;
    return 0;
}

static void classes_free(sim_wait_class *c, size_t n) {
    for (size_t i = 0; i < n; i++) free(c[i].ms);
    free(c);
}

void sim_result_clear(sim_result *r) {
    if (!r) return;
    classes_free(r->lanes, r->nlanes);
    classes_free(r->tenants, r->ntenants);
    r->lanes = r->tenants = NULL;
    r->nlanes = r->ntenants = 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile p (0..1) of c's waits, sorting them; 0 when
 * there are none. */
static double percentile(sim_wait_class *c, double p) {
    if (!c->n) return 0;
    qsort(c->ms, c->n, sizeof(double), cmp_double);
    size_t k = (size_t)ceil(p * (double)c->n);
    return c->ms[k > 0 ? k - 1 : 0];
}

static double pct(size_t part, size_t whole) { return whole ? 100.0 * (double)part / (double)whole : 0; }

static void print_limits(FILE *out, const sim_result *r) {
    fprintf(out, "rpm %lld", r->rpm);
    if (r->tpm) fprintf(out, ", tpm %lld", r->tpm);
    if (r->itpm) fprintf(out, ", itpm %lld", r->itpm);
    if (r->otpm) fprintf(out, ", otpm %lld", r->otpm);
}

static void print_waits(FILE *out, const char *kind, sim_wait_class *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        fprintf(out, "    %-6s %-18s %8.1f %8.1f %8zu\n", kind, c[i].name, percentile(&c[i], 0.50) / 1000,
                percentile(&c[i], 0.99) / 1000, c[i].n);
}

void sim_report_text(FILE *out, const sim_result *r) {
    fprintf(out, "%s: %s world, ", r->deployment, r->provider);
    print_limits(out, r);
    fprintf(out, "; binding: %s\n", r->binding);
    fprintf(out, "  %-28s %10d\n", "agents", r->agents);
    fprintf(out, "  %-28s %10zu requests\n", "offered", r->offered);
    fprintf(out, "  %-28s %10zu (%.1f %%)\n", "completed", r->completed, pct(r->completed, r->offered));
    fprintf(out, "  %-28s %10zu (%.2f %% of %zu sends)\n", "429s", r->throttled, pct(r->throttled, r->sends), r->sends);
    fprintf(out, "  %-28s %10zu\n", "sheds (retried)", r->shed);
    if (r->given_up || r->unfinished)
        fprintf(out, "  %-28s %10zu given up, %zu unfinished\n", "not completed", r->given_up, r->unfinished);
    fprintf(out, "  %-28s %10.1f s (floor %.1f s)\n", "makespan", r->makespan_ms / 1000, r->floor_ms / 1000);
    fprintf(out, "  %-28s %10.1f %% of %s\n", "utilisation", 100 * r->utilisation, r->binding);
    fprintf(out, "  %-28s %10.1f %% of quota\n", "largest 10 s window", 100 * r->max10_ratio);
    fprintf(out, "  %-25s %8s %8s %8s\n", "wait (s)", "p50", "p99", "n");
    /* percentile() sorts in place: the classes are the caller's, sorting
     * them changes nothing a second print would show. */
    print_waits(out, "lane", r->lanes, r->nlanes);
    print_waits(out, "tenant", r->tenants, r->ntenants);
}

static json_t *waits_json(sim_wait_class *c, size_t n) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++) {
        json_t *w = json_pack("{s:f,s:f,s:I}", "p50_s", percentile(&c[i], 0.50) / 1000, "p99_s",
                              percentile(&c[i], 0.99) / 1000, "n", (json_int_t)c[i].n);
        if (!w || json_object_set_new(o, c[i].name, w) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

json_t *sim_report_json(const sim_result *r) {
    json_t *limits = json_pack("{s:I,s:I,s:I,s:I}", "rpm", (json_int_t)r->rpm, "tpm", (json_int_t)r->tpm, "itpm",
                               (json_int_t)r->itpm, "otpm", (json_int_t)r->otpm);
    json_t *o = json_pack("{s:s,s:s,s:o*,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:s,s:f,s:f,s:o*,s:o*}", "deployment",
                          r->deployment, "provider", r->provider, "limits", limits, "agents", r->agents, "offered",
                          (json_int_t)r->offered, "completed", (json_int_t)r->completed, "sends", (json_int_t)r->sends,
                          "throttled", (json_int_t)r->throttled, "shed", (json_int_t)r->shed, "given_up",
                          (json_int_t)r->given_up, "unfinished", (json_int_t)r->unfinished, "makespan_s",
                          r->makespan_ms / 1000, "floor_s", r->floor_ms / 1000, "binding", r->binding, "utilisation",
                          r->utilisation, "max_10s_window_ratio", r->max10_ratio, "lanes",
                          waits_json(r->lanes, r->nlanes), "tenants", waits_json(r->tenants, r->ntenants));
    return o;
}
