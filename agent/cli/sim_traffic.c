/* sim_traffic: see sim_traffic.h. */
#define _GNU_SOURCE
#include "sim_traffic.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

static uint64_t mix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rand01(uint64_t *s) { return (double)(mix64(s) >> 11) / 9007199254740992.0; }

uint64_t sim_traffic_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return seed ^ h;
}
static int parse_share(const char *flag, const char *arg, sim_shares *s) {
    const char *eq = strchr(arg, '=');
    char *end = NULL;
    double v = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || !config_name_ok(arg, (size_t)(eq - arg)) || end == eq + 1 || *end || !(v > 0) || !isfinite(v)) {
        fprintf(stderr, "sluice sim: %s: expected NAME=SHARE with a share > 0, got '%s'\n", flag, arg);
        return -1;
    }
    if (s->n == SIM_MAX_SHARES) {
        fprintf(stderr, "sluice sim: %s: at most %d of them\n", flag, SIM_MAX_SHARES);
        return -1;
    }
    snprintf(s->v[s->n].name, sizeof(s->v[s->n].name), "%.*s", (int)(eq - arg), arg);
    s->v[s->n++].share = v;
    s->total += v;
    return 0;
}

/* cli_flags keeps one value per flag: repeated flags are taken here. */
int sim_shares_collect(int *argc, char **argv, sim_shares *lanes, sim_shares *tenants) {
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        sim_shares *s = NULL;
        const char *flag = NULL, *val = NULL;
        if (strncmp(a, "--lane", 6) == 0 && (a[6] == '\0' || a[6] == '=')) s = lanes, flag = "--lane";
        else if (strncmp(a, "--tenant", 8) == 0 && (a[8] == '\0' || a[8] == '=')) s = tenants, flag = "--tenant";
        if (!s) {
            argv[out++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        if (eq) val = eq + 1;
        else if (i + 1 < *argc) val = argv[++i];
        else {
            fprintf(stderr, "sluice sim: %s needs NAME=SHARE (see sluice sim --help)\n", flag);
            return -1;
        }
        if (parse_share(flag, val, s) != 0) return -1;
    }
    *argc = out;
    return 0;
}

static const char *pick(const sim_shares *s, uint64_t *rng) {
    if (!s->n) return "";
    double u = rand01(rng) * s->total;
    for (size_t i = 0; i < s->n; i++) {
        if (u < s->v[i].share) return s->v[i].name;
        u -= s->v[i].share;
    }
    return s->v[s->n - 1].name;
}
sim_req *sim_reqs_push(sim_reqs *r) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        sim_req *nv = realloc(r->v, cap * sizeof(*nv));
        if (!nv) return NULL;
        r->v = nv;
        r->cap = cap;
    }
    sim_req *q = &r->v[r->n++];
    memset(q, 0, sizeof(*q));
    return q;
}

static int cmp_req(const void *a, const void *b) {
    double x = ((const sim_req *)a)->t_ms, y = ((const sim_req *)b)->t_ms;
    return x < y ? -1 : x > y;
}

static int json_name(json_t *o, const char *key, char *out, const char *path, size_t line) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    const char *s = json_string_value(v);
    if (!s || !config_name_ok(s, strlen(s))) {
        fprintf(stderr, "sluice sim: %s:%zu: \"%s\" must be a name ([A-Za-z0-9._:-], 1 to 64)\n", path, line, key);
        return -1;
    }
    snprintf(out, SIM_TRAFFIC_NAME_MAX, "%s", s);
    return 0;
}

/* The first of keys that o has, as a count > 0; def when none. */
static int json_count(json_t *o, const char *const *keys, long long def, long long *out, const char *path,
                      size_t line) {
    *out = def;
    for (; *keys; keys++) {
        json_t *v = json_object_get(o, *keys);
        if (!v) continue;
        if (!json_is_integer(v) || json_integer_value(v) <= 0) {
            fprintf(stderr, "sluice sim: %s:%zu: \"%s\" must be an integer > 0\n", path, line, *keys);
            return -1;
        }
        *out = json_integer_value(v);
        return 0;
    }
    return 0;
}

/* Reads a trace: one JSON object a line (blank lines and lines starting
 * with # skipped), sorted by time after. */
int sim_traffic_load_trace(const char *path, const config *cfg, const char *cfg_name, long long input, long long output,
                           sim_reqs *out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "sluice sim: %s: %s\n", path, strerror(errno));
        return -1;
    }
    static const char *const in_keys[] = {"input_tokens", "input", NULL};
    static const char *const out_keys[] = {"output_tokens", "max_tokens", "output", NULL};
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t k;
    int rc = 0;
    while (rc == 0 && (k = getline(&line, &cap, f)) >= 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || *p == '\0' || *p == '#') continue;
        json_error_t je;
        json_t *obj = json_loads(p, JSON_DECODE_ANY, &je);
        json_t *t = obj ? json_object_get(obj, "t_ms") : NULL;
        sim_req *q = NULL;
        if (!json_is_object(obj)) {
            fprintf(stderr, "sluice sim: %s:%zu: not a JSON object%s%s\n", path, lineno, obj ? "" : ": ",
                    obj ? "" : je.text);
            rc = -1;
        } else if (!json_is_number(t) || json_number_value(t) < 0) {
            fprintf(stderr, "sluice sim: %s:%zu: \"t_ms\" must be a number >= 0\n", path, lineno);
            rc = -1;
        } else if (!(q = sim_reqs_push(out))) {
            fprintf(stderr, "sluice sim: out of memory\n");
            rc = -1;
        } else {
            q->t_ms = json_number_value(t);
            if (json_name(obj, "deployment", q->deployment, path, lineno) != 0 ||
                json_name(obj, "lane", q->lane, path, lineno) != 0 ||
                json_name(obj, "tenant", q->tenant, path, lineno) != 0 ||
                json_count(obj, in_keys, input, &q->input, path, lineno) != 0 ||
                json_count(obj, out_keys, output, &q->output, path, lineno) != 0)
                rc = -1;
            else if (q->deployment[0] && !config_deployment(cfg, q->deployment)) {
                fprintf(stderr, "sluice sim: %s:%zu: no deployment '%s' in %s\n", path, lineno, q->deployment,
                        cfg_name);
                rc = -1;
            }
        }
        json_decref(obj);
    }
    free(line);
    fclose(f);
    if (rc == 0 && out->n == 0) {
        fprintf(stderr, "sluice sim: %s: no requests in the trace\n", path);
        rc = -1;
    }
    if (rc == 0) qsort(out->v, out->n, sizeof(*out->v), cmp_req);
    return rc;
}

/* A request's charge per minute of each configured dimension, as the
 * governor counts its estimate; the quota in requests a minute is the
 * least of rate / charge. */
double sim_traffic_quota_per_min(const struct config_deployment *d, long long in, long long out) {
    double q = (double)d->rpm;
    double tokens = d->tokens_rule == CONFIG_TOKENS_MAX ? (double)(in > out ? in : out) : (double)(in + out);
    if (d->tpm > 0) q = fmin(q, (double)d->tpm / tokens);
    if (d->itpm > 0) q = fmin(q, (double)d->itpm / (double)in);
    if (d->otpm > 0) q = fmin(q, (double)d->otpm / (double)out);
    return q;
}

/* Demand of o->demand x the quota for o->seconds: arrivals stratified
 * (one in each equal slice of the span, at a seeded point in it), lanes
 * and tenants drawn by their shares. */
int sim_traffic_demand(const struct config_deployment *d, const sim_demand *o, const sim_shares *lanes,
                       const sim_shares *tenants, sim_reqs *out) {
    double q = sim_traffic_quota_per_min(d, o->input, o->output);
    long long n = llround(o->demand * q * o->seconds / 60.0);
    if (n < 1) n = 1;
    if (n > 2000000) {
        fprintf(stderr, "sluice sim: %s: %lld requests is more than the simulator takes (2000000)\n", d->name, n);
        return -1;
    }
    uint64_t rng = sim_traffic_seed(o->seed, d->name);
    double span = o->seconds * 1000.0;
    for (long long i = 0; i < n; i++) {
        sim_req *r = sim_reqs_push(out);
        if (!r) {
            fprintf(stderr, "sluice sim: out of memory\n");
            return -1;
        }
        r->t_ms = ((double)i + rand01(&rng)) * span / (double)n;
        r->input = o->input;
        r->output = o->output;
        snprintf(r->lane, sizeof(r->lane), "%s", pick(lanes, &rng));
        snprintf(r->tenant, sizeof(r->tenant), "%s", pick(tenants, &rng));
    }
    return 0;
}

void sim_reqs_free(sim_reqs *r) {
    if (!r) return;
    free(r->v);
    r->v = NULL;
    r->n = r->cap = 0;
}
