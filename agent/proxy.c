/* proxy: the HTTP proxy's handler. See proxy.h. */
#define _POSIX_C_SOURCE 200809L

#include "proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

struct proxy {
    uv_loop_t *loop;
    engine *e;
    http_server *srv;
    proxy_stats st;
};

static const char json_ctype[] = "application/json";

/* Answers r with an error of kind in api's shape. */
static void answer_error(proxy *p, http_request *r, proxy_api api, proxy_error_kind kind, const char *message,
                         const char *param, const http_header *h, size_t nh) {
    resp_buf body;
    resp_buf_init(&body);
    p->st.errors[(unsigned)kind < PROXY_ERR_KINDS ? kind : PROXY_ERR_INTERNAL]++;
    if (proxy_error_body(api, kind, message, param, &body) != 0) {
        resp_buf_free(&body);
        http_respond(r, 500, NULL, 0, "text/plain", "out of memory\n", 14);
        return;
    }
    http_respond(r, proxy_error_status(kind), h, nh, json_ctype, body.data, body.len);
    resp_buf_free(&body);
}

/* A checked request that maps to a deployment or group. Part 1 of issue
 * 16 stops here: the proxy does not govern yet, so the answer is 501 in
 * the provider's shape, saying what the request was recognised as. Part
 * 2 acquires, forwards, streams and settles from here. */
static void proxy_govern(proxy *p, http_request *r, proxy_request *pr) {
    char msg[400], in[24], out[24];
    snprintf(msg, sizeof(msg),
             "sluice's HTTP proxy recognised this request (%s %s, %s '%s', estimate %lld input + %lld output tokens%s) "
             "but does not govern or forward requests yet (issue 16, part 2): nothing was sent upstream",
             proxy_api_name(pr->route.api), proxy_op_name(pr->route.op), pr->target.deployment ? "deployment" : "group",
             pr->name, pr->est.input, pr->est.output, pr->stream ? ", streamed" : "");
    snprintf(in, sizeof(in), "%lld", pr->est.input);
    snprintf(out, sizeof(out), "%lld", pr->est.output);
    http_header h[] = {
        {"x-sluice-target", pr->name},
        {"x-sluice-estimate-input", in},
        {"x-sluice-estimate-output", out},
        {"x-sluice-stream", pr->stream ? (pr->include_usage ? "usage" : "yes") : "no"},
    };
    p->st.by_api[pr->route.api]++;
    answer_error(p, r, pr->route.api, PROXY_ERR_NOT_GOVERNING, msg, NULL, h, sizeof(h) / sizeof(h[0]));
}

static void on_request(http_request *r, void *arg) {
    proxy *p = arg;
    const http_msg *m = http_request_msg(r);
    proxy_request pr;
    proxy_error err;
    if (proxy_parse(engine_config(p->e), m, &pr, &err) != 0) {
        static const http_header allow[] = {{"Allow", "POST"}};
        int method = err.kind == PROXY_ERR_METHOD;
        answer_error(p, r, pr.route.api, err.kind, err.message, err.param, method ? allow : NULL, method ? 1 : 0);
        proxy_request_free(&pr);
        return;
    }
    proxy_govern(p, r, &pr);
    proxy_request_free(&pr);
}

/* The server's own refusals, in the shape of the request's API. */
static int error_body(void *arg, const http_msg *partial, int status, const char *reason, resp_buf *body,
                      const char **content_type) {
    proxy *p = arg;
    const char *path = partial ? http_msg_path(partial) : "";
    if (!*path && partial) path = http_msg_target(partial);
    proxy_api api = proxy_api_of(path, partial && http_msg_header(partial, "anthropic-version"));
    proxy_error_kind kind = proxy_error_kind_of(status);
    p->st.errors[kind]++;
    char msg[200];
    snprintf(msg, sizeof(msg), "sluice: %s", reason);
    if (proxy_error_body(api, kind, msg, NULL, body) != 0) return -1;
    *content_type = json_ctype;
    return 0;
}

int proxy_new(uv_loop_t *loop, engine *e, void (*log)(void *ud, int level, const char *msg), void *log_ud,
              proxy **out) {
    *out = NULL;
    proxy *p = calloc(1, sizeof(*p));
    if (!p) return SL_ENOMEM;
    p->loop = loop;
    p->e = e;
    http_server_hooks hooks = {
        .on_request = on_request,
        .error_body = error_body,
        .arg = p,
        .log = log,
        .log_ud = log_ud,
    };
    int rc = http_server_new(loop, engine_config(e), &hooks, &p->srv);
    if (rc != 0) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int proxy_listen(proxy *p, char *err, size_t errlen) {
    return http_server_listen(p->srv, engine_config(p->e), err, errlen);
}

void proxy_apply_config(proxy *p) { http_server_configure(p->srv, engine_config(p->e)); }

void proxy_stop_accepting(proxy *p) { http_server_stop_accepting(p->srv); }

void proxy_close(proxy *p, void (*done)(void *arg), void *arg) { http_server_close(p->srv, done, arg); }

void proxy_free(proxy *p) {
    if (!p) return;
    http_server_free(p->srv);
    free(p);
}

void proxy_get_stats(const proxy *p, proxy_stats *ps, http_stats *hs) {
    if (ps) *ps = p->st;
    if (hs) http_server_get_stats(p->srv, hs);
}

const http_server *proxy_server(const proxy *p) { return p->srv; }
