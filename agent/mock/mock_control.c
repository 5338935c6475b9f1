/* mock_control: POST /control, the run-time switches of the mock provider
 * (docs/mock.md, "Changes at run time"): injected failures, the noisy
 * neighbour, injected 429s, the rate-limit headers and the limits of the
 * deployments. Every pair of the query is checked before any applies, so
 * a bad request changes nothing. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

typedef enum control_key {
    K_FAIL_503,
    K_QUOTA,
    K_NEIGHBOUR_RPM,
    K_NEIGHBOUR_TOKENS,
    K_NEIGHBOUR_BURST,
    K_NEIGHBOUR_GREEDY,
    K_INJECT_429,
    K_HEADERS,
    K_RPM,
    K_TPM,
    K_ITPM,
    K_OTPM,
    K_DEPLOYMENT,
    K_COUNT
} control_key;

/* A number in [min, max] (above min when open), whole when integer. */
static const struct {
    const char *name;
    double min, max;
    int integer, open;
} keys[K_COUNT] = {
    [K_FAIL_503] = {"fail_503", 0, 1, 0, 0},
    [K_QUOTA] = {"quota_exhausted", 0, 1, 1, 0},
    [K_NEIGHBOUR_RPM] = {"neighbour_rpm", 0, 600000, 0, 0},
    [K_NEIGHBOUR_TOKENS] = {"neighbour_tokens", 0, 1e9, 1, 0},
    [K_NEIGHBOUR_BURST] = {"neighbour_burst", 0, 1e6, 1, 0},
    [K_NEIGHBOUR_GREEDY] = {"neighbour_greedy", 0, 1, 1, 0},
    [K_INJECT_429] = {"inject_429", 0, 1e9, 1, 0},
    [K_HEADERS] = {"headers", 0, 1, 1, 0},
    [K_RPM] = {"rpm", 0, 1e9, 0, 1},
    [K_TPM] = {"tpm", 0, 1e12, 0, 0},
    [K_ITPM] = {"itpm", 0, 1e12, 0, 0},
    [K_OTPM] = {"otpm", 0, 1e12, 0, 0},
    [K_DEPLOYMENT] = {"deployment", 0, 0, 0, 0},
};

static const mock_dim limit_dim[K_COUNT] = {
    [K_RPM] = MOCK_REQUESTS, [K_TPM] = MOCK_TOKENS, [K_ITPM] = MOCK_INPUT, [K_OTPM] = MOCK_OUTPUT};

/* What a query asks for: has[k] for each key given. */
typedef struct control_req {
    int has[K_COUNT];
    double v[K_COUNT];
    char deployment[MOCK_NAME_MAX + 1];
} control_req;

/* Parses one value of key k. 0, or -1 when it is not such a number. */
static int parse_value(control_key k, const char *v, size_t n, double *out) {
    char buf[32], *end;
    if (n == 0 || n >= sizeof(buf)) return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    double d = strtod(buf, &end);
    if (*end || !isfinite(d) || d < keys[k].min || d > keys[k].max) return -1;
    if ((keys[k].open && d <= keys[k].min) || (keys[k].integer && d != floor(d))) return -1;
    *out = d;
    return 0;
}

static int fail_msg(char **answer, const char *fmt, const char *what, size_t n) {
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, (int)(n < 64 ? n : 64), what);
    json_t *err = mock_azure_error("400", msg);
    *answer = err ? json_dumps(err, MOCK_JSON_FLAGS) : NULL;
    json_decref(err);
    return 400;
}

/* Parses and checks the whole query into r, changing nothing. 0, or an
 * HTTP status with *answer set. */
static int control_parse(mock *m, const char *q, control_req *r, char **answer) {
    memset(r, 0, sizeof(*r));
    for (const char *p = q; *p;) {
        size_t len = strcspn(p, "&"), klen = strcspn(p, "=");
        const char *v = p + klen + 1;
        int k = K_COUNT;
        if (len == 0) { /* an empty pair ("a=1&&b=0") */
            p++;
            continue;
        }
        if (klen < len)
            for (k = 0; k < K_COUNT; k++)
                if (strlen(keys[k].name) == klen && strncmp(p, keys[k].name, klen) == 0) break;
        if (k == K_COUNT)
            return fail_msg(answer,
                            "bad control '%.*s': expected KEY=VALUE with KEY one of fail_503, "
                            "quota_exhausted, neighbour_rpm, neighbour_tokens, neighbour_burst, neighbour_greedy, "
                            "inject_429, "
                            "headers, rpm, tpm, itpm, otpm, deployment",
                            p, len);
        if (k == K_DEPLOYMENT) {
            size_t vn = len - klen - 1;
            if (vn == 0 || vn > MOCK_NAME_MAX)
                return fail_msg(answer, "bad control '%.*s': not a deployment name", p, len);
            memcpy(r->deployment, v, vn);
            r->deployment[vn] = '\0';
            if (!mock_name_ok(r->deployment))
                return fail_msg(answer, "bad control '%.*s': not a deployment name", p, len);
            if (!mock_map_get(&m->deps, r->deployment) &&
                (m->opt.n_deployments > 0 || m->deps.count >= MOCK_MAX_DEPLOYMENTS))
                return fail_msg(answer, "bad control '%.*s': no such deployment", p, len);
        } else if (parse_value((control_key)k, v, len - klen - 1, &r->v[k]) != 0) {
            return fail_msg(answer, "bad control '%.*s': value out of range or malformed", p, len);
        }
        r->has[k] = 1;
        p += len;
        if (*p == '&') p++;
    }
    return 0;
}

/* The settings in force, with the limits of deployment d when given. */
static char *control_answer(const mock *m, const char *name, const mock_deployment *d) {
    json_t *j =
        json_pack("{sfsbsfsIsbsIsbso}", "fail_503", m->opt.fail_503, "quota_exhausted", m->opt.quota_exhausted,
                  "neighbour_rpm", m->opt.neighbour_rpm, "neighbour_tokens", (json_int_t)m->opt.neighbour_tokens,
                  "neighbour_greedy", m->opt.neighbour_greedy, "inject_429", (json_int_t)m->inject_429, "headers",
                  m->headers, "limits", mock_limits_json(m, NULL));
    if (j && d)
        json_object_set_new(j, "deployment", json_pack("{ssso}", "name", name, "limits", mock_limits_json(m, d)));
    char *text = j ? json_dumps(j, MOCK_JSON_FLAGS) : NULL;
    json_decref(j);
    return text;
}

int mock_control(mock *m, const char *query, char **answer) {
    control_req r;
    mock_deployment *d = NULL;
    double now = mock_now_ms(m);
    *answer = NULL;
    int status = control_parse(m, query ? query : "", &r, answer);
    if (status) return status;
    /* The one step that can fail comes first, so a failure changes
     * nothing: a deployment named for the first time is created here. */
    if (r.has[K_DEPLOYMENT] && !(d = mock_dep_get(m, r.deployment, now))) return 500;
    if (r.has[K_FAIL_503] || r.has[K_QUOTA])
        mock_set_faults(m, r.has[K_FAIL_503] ? r.v[K_FAIL_503] : m->opt.fail_503,
                        r.has[K_QUOTA] ? (int)r.v[K_QUOTA] : m->opt.quota_exhausted);
    if (r.has[K_NEIGHBOUR_RPM] || r.has[K_NEIGHBOUR_TOKENS] || r.has[K_NEIGHBOUR_GREEDY])
        mock_set_neighbour(m, r.has[K_NEIGHBOUR_RPM] ? r.v[K_NEIGHBOUR_RPM] : m->opt.neighbour_rpm,
                           r.has[K_NEIGHBOUR_TOKENS] ? (unsigned)r.v[K_NEIGHBOUR_TOKENS] : m->opt.neighbour_tokens,
                           r.has[K_NEIGHBOUR_GREEDY] ? (int)r.v[K_NEIGHBOUR_GREEDY] : m->opt.neighbour_greedy);
    if (r.has[K_NEIGHBOUR_BURST]) mock_neighbour_burst(m, (uint64_t)r.v[K_NEIGHBOUR_BURST]);
    if (r.has[K_INJECT_429]) m->inject_429 = (uint64_t)r.v[K_INJECT_429];
    if (r.has[K_HEADERS]) m->headers = r.v[K_HEADERS] != 0;
    for (int k = K_RPM; k <= K_OTPM; k++) {
        if (!r.has[k]) continue;
        mock_dim dim = limit_dim[k];
        if (d) {
            mock_dep_set_limit(m, d, dim, r.v[k], now);
            continue;
        }
        /* No deployment named: every deployment, and those to come. */
        m->per_min[dim] = r.v[k];
        for (mock_map_entry *e = m->deps.first; e; e = e->next) mock_dep_set_limit(m, e->value, dim, r.v[k], now);
    }
    *answer = control_answer(m, r.deployment, d);
    return *answer ? 200 : 500;
}

/* Loopback peers only: the control changes what every client gets. */
static int peer_is_loopback(const char *peer) {
    return strncmp(peer, "127.", 4) == 0 || strcmp(peer, "::1") == 0 || strncmp(peer, "::ffff:127.", 11) == 0;
}

/* POST /control?KEY=VALUE&...: answers what mock_control() says. Not
 * counted in the ledger. */
void mock_route_control(mock_call *c, const char *name) {
    mock *m = c->m;
    char *answer = NULL;
    (void)name;
    if (!peer_is_loopback(mock_http_peer(c->req))) {
        static const char denied[] = "{\"error\":{\"code\":\"403\",\"message\":\"/control is "
                                     "served to loopback clients only\"}}";
        mock_http_respond(c->req, 403, NULL, denied, sizeof(denied) - 1, 0);
        return;
    }
    int status = mock_control(m, mock_http_query(c->req), &answer);
    if (m->opt.log)
        fprintf(m->opt.log, "%.3f %s - /control?%s %d\n", c->now_ms, c->client, mock_http_query(c->req), status);
    if (!answer) {
        static const char oom[] = "{\"error\":{\"code\":\"500\",\"message\":\"out of memory\"}}";
        mock_http_respond(c->req, 500, NULL, oom, sizeof(oom) - 1, 0);
        return;
    }
    mock_http_respond(c->req, status, status == 200 ? "Cache-Control: no-store\r\n" : NULL, answer, strlen(answer), 0);
    free(answer);
}
