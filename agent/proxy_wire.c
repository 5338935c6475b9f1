/* proxy_wire: routes, request checks and error shapes of the providers'
 * APIs. See proxy_wire.h. */
#define _POSIX_C_SOURCE 200809L

#include "proxy_wire.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_server.h"

/* ---- names and the error table ------------------------------------------------------ */

const char *proxy_api_name(proxy_api api) {
    static const char *const names[] = {"openai", "azure", "anthropic"};
    return (unsigned)api < 3 ? names[api] : "?";
}

const char *proxy_op_name(proxy_op op) {
    static const char *const names[] = {"chat/completions", "completions", "embeddings", "responses", "messages"};
    return (unsigned)op < 5 ? names[op] : "?";
}

typedef struct error_row {
    int status;
    const char *otype, *ocode, *acode, *antype;
} error_row;

static const error_row error_rows[PROXY_ERR_KINDS] = {
#define PROXY_ERROR_ROW(name, status, otype, ocode, acode, antype) {status, otype, ocode, acode, antype},
    PROXY_ERROR_MAP(PROXY_ERROR_ROW)
#undef PROXY_ERROR_ROW
};

int proxy_error_status(proxy_error_kind kind) {
    return (unsigned)kind < PROXY_ERR_KINDS ? error_rows[kind].status : 500;
}

proxy_error_kind proxy_error_kind_of(int status) {
    /* The first kind of that status: BAD_REQUEST before the others of 400,
     * NOT_FOUND before MODEL_NOT_FOUND. */
    for (int k = 0; k < PROXY_ERR_KINDS; k++)
        if (error_rows[k].status == status) return (proxy_error_kind)k;
    return status >= 500 ? PROXY_ERR_INTERNAL : PROXY_ERR_BAD_REQUEST;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
fail(proxy_error *err, proxy_error_kind kind, const char *param, const char *fmt, ...) {
    err->kind = kind;
    err->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return -1;
}

/* A value quoted into a message: printable ASCII, at most 80 bytes. */
static const char *shown(const char *s, char *buf, size_t n) {
    size_t k = 0;
    for (; *s && k + 4 < n && k < 80; s++) buf[k++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
    if (*s && k + 4 < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* ---- errors in each shape ------------------------------------------------------------- */

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static int dump_into(json_t *j, resp_buf *out) {
    if (!j) return RESP_ENOMEM;
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text) return RESP_ENOMEM;
    int rc = resp_buf_append(out, text, strlen(text));
    free(text);
    return rc;
}

/* The error body with the OpenAI type given (a 429's "tokens"). */
static int error_body_typed(proxy_api api, proxy_error_kind kind, const char *otype, const char *message,
                            const char *param, resp_buf *out) {
    const error_row *row = &error_rows[(unsigned)kind < PROXY_ERR_KINDS ? kind : PROXY_ERR_INTERNAL];
    json_t *msg = json_string(message ? message : "");
    if (!msg) msg = json_string("(not valid UTF-8)");
    json_t *err = NULL;
    switch (api) {
    case PROXY_API_ANTHROPIC:
        err = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", row->antype, "message", msg);
        break;
    case PROXY_API_AZURE:
        err = json_pack("{s:{s:s,s:o}}", "error", "code", row->acode, "message", msg);
        if (err && param) json_object_set_new(json_object_get(err, "error"), "param", json_string(param));
        break;
    default:
        err = json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", msg, "type", otype ? otype : row->otype, "param",
                        str_or_null(param), "code", str_or_null(row->ocode));
        break;
    }
    return dump_into(err, out);
}

int proxy_error_body(proxy_api api, proxy_error_kind kind, const char *message, const char *param, resp_buf *out) {
    return error_body_typed(api, kind, NULL, message, param, out);
}

/* Retry-After in whole seconds, rounded up, and retry-after-ms; none for
 * a wait < 0 (never). Returns how many. */
static int retry_headers(long long retry_after_ms, http_header *h, proxy_retry_headers *storage) {
    if (retry_after_ms < 0) return 0;
    snprintf(storage->seconds, sizeof(storage->seconds), "%lld", (retry_after_ms + 999) / 1000);
    snprintf(storage->ms, sizeof(storage->ms), "%lld", retry_after_ms);
    h[0] = (http_header){"retry-after", storage->seconds};
    h[1] = (http_header){"retry-after-ms", storage->ms};
    return 2;
}

int proxy_shed_answer(proxy_api api, const char *reason, long long retry_after_ms, resp_buf *body, http_header *h,
                      proxy_retry_headers *storage) {
    char msg[256];
    const char *r = reason && *reason ? reason : "rpm";
    /* OpenAI says which limit: requests or tokens. */
    const char *otype = strstr(r, "tpm") || !strcmp(r, "daily") || !strcmp(r, "tenant_daily") ? "tokens" : "requests";
    if (retry_after_ms >= 0)
        snprintf(msg, sizeof(msg),
                 "sluice: the fleet's budget has no slot within this request's max wait (limit: %s); "
                 "retry after %lld ms",
                 r, retry_after_ms);
    else snprintf(msg, sizeof(msg), "sluice: this request can never fit the fleet's budget (limit: %s)", r);
    if (error_body_typed(api, PROXY_ERR_RATE_LIMITED, otype, msg, NULL, body) != 0) return -1;
    return retry_headers(retry_after_ms, h, storage);
}

int proxy_budget_answer(proxy_api api, const char *budget, const char *period, long long left_u, const char *currency,
                        long long retry_after_ms, resp_buf *body, http_header *h, proxy_retry_headers *storage) {
    char msg[384], when[96];
    const char *p = period && *period ? period : "total";
    if (retry_after_ms >= 0) snprintf(when, sizeof(when), "it renews in %lld s", (retry_after_ms + 999) / 1000);
    else
        snprintf(when, sizeof(when), "%s",
                 !strcmp(p, "total") ? "it never renews"
                                     : "this request costs more than "
                                       "the whole limit");
    snprintf(msg, sizeof(msg),
             "sluice: budget '%s' has %lld.%06lld %s left this %s, less than this request may cost; %s",
             budget ? budget : "", left_u / 1000000, left_u % 1000000, currency ? currency : "",
             !strcmp(p, "total") ? "budget" : p, when);
    if (error_body_typed(api, PROXY_ERR_RATE_LIMITED, "insufficient_quota", msg, NULL, body) != 0) return -1;
    return retry_headers(retry_after_ms, h, storage);
}

/* ---- routes ----------------------------------------------------------------------------- */

proxy_api proxy_api_of(const char *path, int has_anthropic_version) {
    if (!strncmp(path, "/openai/", 8) || !strcmp(path, "/openai")) return PROXY_API_AZURE;
    if (!strncmp(path, "/v1/messages", 12) || !strncmp(path, "/v1/complete", 12) ||
        (has_anthropic_version && strncmp(path, "/v1/chat/", 9)))
        return PROXY_API_ANTHROPIC;
    return PROXY_API_OPENAI;
}

/* A route: an exact path, or (Azure deployments) a prefix, a name and a
 * suffix. */
static const struct {
    const char *path;   /* exact, or the prefix before the name */
    const char *suffix; /* after the name; NULL: path is exact */
    proxy_api api;
    proxy_op op;
} routes[] = {
    {"/v1/chat/completions", NULL, PROXY_API_OPENAI, PROXY_OP_CHAT},
    {"/v1/completions", NULL, PROXY_API_OPENAI, PROXY_OP_COMPLETIONS},
    {"/v1/embeddings", NULL, PROXY_API_OPENAI, PROXY_OP_EMBEDDINGS},
    {"/v1/responses", NULL, PROXY_API_OPENAI, PROXY_OP_RESPONSES},
    {"/v1/messages", NULL, PROXY_API_ANTHROPIC, PROXY_OP_MESSAGES},
    {"/openai/v1/chat/completions", NULL, PROXY_API_AZURE, PROXY_OP_CHAT},
    {"/openai/v1/completions", NULL, PROXY_API_AZURE, PROXY_OP_COMPLETIONS},
    {"/openai/v1/embeddings", NULL, PROXY_API_AZURE, PROXY_OP_EMBEDDINGS},
    {"/openai/v1/responses", NULL, PROXY_API_AZURE, PROXY_OP_RESPONSES},
    {"/openai/deployments/", "/chat/completions", PROXY_API_AZURE, PROXY_OP_CHAT},
    {"/openai/deployments/", "/completions", PROXY_API_AZURE, PROXY_OP_COMPLETIONS},
    {"/openai/deployments/", "/embeddings", PROXY_API_AZURE, PROXY_OP_EMBEDDINGS},
    {"/openai/deployments/", "/responses", PROXY_API_AZURE, PROXY_OP_RESPONSES},
};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into out (size cap). -1 when malformed, too
 * long, or decoding to a control byte, a space or '/'. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n) return -1;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0) return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c <= ' ' || c == 0x7f || c == '/' || k + 1 >= cap) return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return k ? 0 : -1;
}

/* The value of key in a query string (raw, not decoded), into out. */
static int query_param(const char *query, const char *key, char *out, size_t cap) {
    size_t kl = strlen(key);
    for (const char *p = query; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > kl && !strncmp(p, key, kl) && p[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl + 1 > cap) return -1;
            memcpy(out, p + kl + 1, vl);
            out[vl] = '\0';
            return vl ? 0 : -1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return -1;
}

int proxy_route_match(const char *method, const char *path, const char *query, proxy_route *out, proxy_error *err) {
    memset(out, 0, sizeof(*out));
    char v[96];
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        size_t pl = strlen(routes[i].path);
        if (!routes[i].suffix) {
            if (strcmp(path, routes[i].path)) continue;
        } else {
            size_t total = strlen(path), sl = strlen(routes[i].suffix);
            if (strncmp(path, routes[i].path, pl) || total <= pl + sl || strcmp(path + total - sl, routes[i].suffix))
                continue;
            const char *name = path + pl;
            size_t nl = total - pl - sl;
            if (memchr(name, '/', nl)) continue; /* .../deployments/a/b/chat/completions */
            out->api = routes[i].api;
            if (pct_decode(name, nl, out->deployment, sizeof(out->deployment)) != 0) {
                char raw[96];
                snprintf(raw, sizeof(raw), "%.*s", (int)(nl < 80 ? nl : 80), name);
                return fail(err, PROXY_ERR_MODEL_NOT_FOUND, NULL,
                            "The API deployment for this resource does not exist (not a deployment name: '%s').",
                            shown(raw, v, sizeof(v)));
            }
            out->model_in_path = 1;
        }
        out->api = routes[i].api;
        out->op = routes[i].op;
        if (strcmp(method, "POST") != 0)
            return fail(err, PROXY_ERR_METHOD, NULL, "%s %s is not supported: use POST", shown(method, v, sizeof(v)),
                        path);
        if (out->model_in_path && query_param(query, "api-version", out->api_version, sizeof(out->api_version)) != 0)
            return fail(err, PROXY_ERR_BAD_REQUEST, "api-version",
                        "Missing or invalid api-version query parameter (an Azure OpenAI deployment route needs "
                        "?api-version=...).");
        return 0;
    }
    char p[96];
    return fail(err, PROXY_ERR_NOT_FOUND, NULL, "Invalid URL (%s %s): sluice's proxy serves %s",
                shown(method, v, sizeof(v)), shown(path, p, sizeof(p)),
                proxy_api_of(path, 0) == PROXY_API_AZURE
                    ? "/openai/deployments/{deployment}/{chat/completions,completions,embeddings,responses} and "
                      "/openai/v1/..."
                    : "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and /v1/messages");
}

/* ---- the request ------------------------------------------------------------------------ */

/* The body format family of a style: 0 OpenAI (azure, openai, custom),
 * 1 Anthropic. */
static int style_family(int style) { return style == CONFIG_STYLE_ANTHROPIC; }

static int target_family_ok(const config_target *t, int family) {
    if (t->deployment) return style_family(t->deployment->style) == family;
    for (size_t i = 0; i < t->group->nmembers; i++)
        if (style_family(t->group->members_[i]->style) != family) return 0;
    return 1;
}

static estimate_api estimate_api_of(proxy_op op) {
    switch (op) {
    case PROXY_OP_COMPLETIONS: return ESTIMATE_COMPLETIONS;
    case PROXY_OP_EMBEDDINGS: return ESTIMATE_EMBEDDINGS;
    case PROXY_OP_RESPONSES: return ESTIMATE_RESPONSES;
    case PROXY_OP_MESSAGES: return ESTIMATE_MESSAGES;
    default: return ESTIMATE_CHAT;
    }
}

/* One x-sluice-* header, at most once. NULL (no error) when absent. */
static int one_header(const http_msg *m, const char *name, const char **value, proxy_error *err) {
    *value = NULL;
    size_t n = http_msg_header_count(m, name);
    if (n > 1) return fail(err, PROXY_ERR_BAD_REQUEST, name, "%s is given %zu times; give it once", name, n);
    *value = http_msg_header(m, name);
    return 0;
}

static int name_header(const http_msg *m, const char *name, char *dst, size_t cap, proxy_error *err) {
    const char *v;
    char shownv[96];
    if (one_header(m, name, &v, err) != 0) return -1;
    dst[0] = '\0';
    if (!v) return 0;
    if (!config_name_ok(v, strlen(v)) || strlen(v) >= cap)
        return fail(err, PROXY_ERR_BAD_REQUEST, name, "%s must be 1 to %d of A-Z a-z 0-9 . _ : -, got '%s'", name,
                    CONFIG_NAME_MAX, shown(v, shownv, sizeof(shownv)));
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* One x-sluice-* header holding an integer in [min, max] (unit: what it
 * counts, for the message), at most once. *dst is -1 when absent. */
static int int_header(const http_msg *m, const char *name, long long min, long long max, const char *unit,
                      long long *dst, proxy_error *err) {
    const char *v;
    char shownv[96];
    if (one_header(m, name, &v, err) != 0) return -1;
    *dst = -1;
    if (!v) return 0;
    long long x = 0;
    size_t n = strlen(v);
    int ok = n >= 1 && n <= 10;
    for (size_t i = 0; i < n && ok; i++) {
        ok = v[i] >= '0' && v[i] <= '9';
        x = x * 10 + (v[i] - '0');
    }
    if (!ok || x < min || x > max)
        return fail(err, PROXY_ERR_BAD_REQUEST, name, "%s must be an integer from %lld to %lld (%s), got '%s'", name,
                    min, max, unit, shown(v, shownv, sizeof(shownv)));
    *dst = x;
    return 0;
}

static int ms_header(const http_msg *m, const char *name, long long min, long long *dst, proxy_error *err) {
    return int_header(m, name, min, PROXY_WAIT_MAX_MS, "milliseconds", dst, err);
}

static int model_not_found(const proxy_request *r, proxy_error *err) {
    char v[96];
    shown(r->model, v, sizeof(v));
    switch (r->route.api) {
    case PROXY_API_ANTHROPIC: return fail(err, PROXY_ERR_MODEL_NOT_FOUND, "model", "model: %s", v);
    case PROXY_API_AZURE:
        if (r->route.model_in_path)
            return fail(err, PROXY_ERR_MODEL_NOT_FOUND, NULL,
                        "The API deployment for this resource does not exist (no deployment or group '%s' in "
                        "sluice's configuration).",
                        v);
        break;
    default: break;
    }
    return fail(err, PROXY_ERR_MODEL_NOT_FOUND, "model",
                "The model `%s` does not exist or you do not have access to it (no deployment, group or alias of "
                "that name in sluice's configuration).",
                v);
}

/* The body's model, stream and stream_options, checked. */
static int read_body(proxy_request *r, const http_msg *m, proxy_error *err) {
    size_t len;
    const char *text = http_msg_body(m, &len);
    json_error_t je;
    if (!len) return fail(err, PROXY_ERR_BAD_REQUEST, NULL, "The request has no body: it must be a JSON object.");
    r->body = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!r->body)
        return fail(err, PROXY_ERR_BAD_REQUEST, NULL,
                    "We could not parse the JSON body of your request: %s (line %d, column %d)", je.text, je.line,
                    je.column);
    if (!json_is_object(r->body))
        return fail(err, PROXY_ERR_BAD_REQUEST, NULL, "The request body must be a JSON object.");
    if (r->route.model_in_path) {
        snprintf(r->model, sizeof(r->model), "%s", r->route.deployment);
    } else {
        json_t *model = json_object_get(r->body, "model");
        const char *s = json_string_value(model);
        if (!s || !*s)
            return fail(err, PROXY_ERR_BAD_REQUEST, "model",
                        model ? "model must be a non-empty string" : "you must provide a model parameter");
        if (strlen(s) != json_string_length(model) || strlen(s) > PROXY_MODEL_MAX) {
            snprintf(r->model, sizeof(r->model), "%.*s...", 80, s);
            return model_not_found(r, err);
        }
        snprintf(r->model, sizeof(r->model), "%s", s);
    }
    json_t *stream = json_object_get(r->body, "stream");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        return fail(err, PROXY_ERR_BAD_REQUEST, "stream", "'stream' must be a boolean");
    r->stream = json_is_true(stream);
    json_t *so = json_object_get(r->body, "stream_options");
    if (so && !json_is_null(so)) {
        json_t *iu = json_object_get(so, "include_usage");
        if (!json_is_object(so) || (iu && !json_is_null(iu) && !json_is_boolean(iu)))
            return fail(err, PROXY_ERR_BAD_REQUEST, "stream_options",
                        "'stream_options' must be an object whose 'include_usage' is a boolean");
        r->include_usage = json_is_true(iu);
    }
    return 0;
}

int proxy_azure_stream_options(const char *v) {
    if (!v) return 1;
    for (int i = 0; i < 10; i++)
        if (i == 4 || i == 7 ? v[i] != '-' : !isdigit((unsigned char)v[i])) return 1;
    return strncmp(v, "2024-09-01", 10) >= 0;
}

int proxy_parse(const config *cfg, const http_msg *m, proxy_request *out, proxy_error *err) {
    memset(out, 0, sizeof(*out));
    out->max_wait_ms = out->deadline_ms = -1;
    if (proxy_route_match(http_msg_method(m), http_msg_path(m), http_msg_query(m), &out->route, err) != 0) {
        if (err->kind == PROXY_ERR_NOT_FOUND)
            out->route.api = proxy_api_of(http_msg_path(m), http_msg_header(m, "anthropic-version") != NULL);
        return -1;
    }
    if (read_body(out, m, err) != 0) return -1;
    if (config_model(cfg, out->model, &out->target) != 0) return model_not_found(out, err);
    out->name = out->target.deployment ? out->target.deployment->name : out->target.group->name;
    int family = out->route.api == PROXY_API_ANTHROPIC;
    if (!target_family_ok(&out->target, family)) {
        char v[96];
        return fail(err, PROXY_ERR_BAD_REQUEST, "model",
                    family ? "%s '%s' does not speak the Anthropic Messages API (its style is azure, openai or "
                             "custom): send this model to /v1/chat/completions"
                           : "%s '%s' speaks the Anthropic Messages API (style anthropic): send this model to "
                             "/v1/messages",
                    out->target.deployment ? "deployment" : "a member of group", shown(out->model, v, sizeof(v)));
    }
    if (name_header(m, "x-sluice-lane", out->lane, sizeof(out->lane), err) != 0 ||
        name_header(m, "x-sluice-tenant", out->tenant, sizeof(out->tenant), err) != 0 ||
        name_header(m, "x-sluice-tag", out->tag, sizeof(out->tag), err) != 0 ||
        ms_header(m, "x-sluice-max-wait-ms", 0, &out->max_wait_ms, err) != 0 ||
        ms_header(m, "x-sluice-deadline-ms", 1, &out->deadline_ms, err) != 0)
        return -1;
    long long counted;
    if (int_header(m, "x-sluice-input-tokens", 0, PROXY_INPUT_TOKENS_MAX, "tokens", &counted, err) != 0) return -1;
    const struct config_deployment *d = out->target.deployment;
    if (d && out->lane[0] && !config_lane(d, out->lane)) {
        char lanes[256];
        config_lane_names(d, lanes, sizeof(lanes));
        return fail(err, PROXY_ERR_BAD_REQUEST, "x-sluice-lane",
                    "unknown lane '%s' for deployment '%s' (its lanes: %s)", out->lane, d->name, lanes);
    }
    if (d && out->tag[0] && !config_has_tag(d, out->tag))
        return fail(err, PROXY_ERR_BAD_REQUEST, "x-sluice-tag",
                    "deployment '%s' does not carry tag '%s' (x-sluice-tag applies to groups and tagged deployments)",
                    d->name, out->tag);
    estimate_request(out->body, estimate_api_of(out->route.op), &out->est);
    /* The caller counted the prompt itself (the provider's tokenizer): its
     * count is the input estimate, exact, never calibrated. */
    if (counted >= 0) {
        out->est.input = counted;
        out->exact = 1;
    }
    /* The proxy knows both parts of its estimate: it books them apart, so
     * that each dimension is charged as its provider counts (a combined
     * figure would be compared at settle with usage it cannot be split
     * against). */
    out->split = 1;
    return 0;
}

void proxy_request_free(proxy_request *r) {
    json_decref(r->body);
    r->body = NULL;
}
