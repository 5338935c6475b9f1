/* proxy: the HTTP proxy's handler. See proxy.h. */
#define _POSIX_C_SOURCE 200809L

#include "proxy.h"

#include "http_config.h"
#include "proxy_auth.h"

#include "proxy_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

struct proxy {
    uv_loop_t *loop;
    engine *e;
    http_server *srv;
    proxy_calls *calls;
    proxy_stats st;
    void (*closed)(void *arg);
    void *closed_arg;
};

static const char json_ctype[] = "application/json";

static void on_request(http_request *r, void *arg) {
    proxy *p = arg;
    const http_msg *m = http_request_msg(r);
    proxy_request pr;
    proxy_error err;
    if (proxy_parse(engine_config(p->e), m, &pr, &err) != 0) {
        static const http_header allow[] = {{"Allow", "POST"}};
        int method = err.kind == PROXY_ERR_METHOD;
        proxy_answer_error(&p->st, r, pr.route.api, err.kind, err.message, err.param, method ? allow : NULL,
                           method ? 1 : 0);
        proxy_request_free(&pr);
        return;
    }
    /* Who may spend which key (docs/security.md): decided before a slot
     * is asked for, so a refused caller costs the fleet nothing. */
    proxy_auth auth;
    if (proxy_auth_check(engine_config(p->e), &pr.target, http_request_transport(r) == HTTP_TRANSPORT_UNIX, m, &auth,
                         &err) != 0) {
        p->st.unauthorized++;
        proxy_answer_error(&p->st, r, pr.route.api, err.kind, err.message, err.param, NULL, 0);
        proxy_request_free(&pr);
        return;
    }
    proxy_call_start(p->calls, r, &pr, &auth);
    proxy_request_free(&pr);
}

/* The server's own refusals, in the shape of the request's API. */
static int error_body(void *arg, http_refusal *rf) {
    proxy *p = arg;
    const http_msg *partial = rf->partial;
    const char *path = partial ? http_msg_path(partial) : "";
    if (!*path && partial) path = http_msg_target(partial);
    proxy_api api = proxy_api_of(path, partial && http_msg_header(partial, "anthropic-version"));
    proxy_error_kind kind = proxy_error_kind_of(rf->status);
    p->st.errors[kind]++;
    char msg[200];
    snprintf(msg, sizeof(msg), "sluice: %s", rf->reason);
    resp_buf body;
    resp_buf_init(&body);
    int rc = proxy_error_body(api, kind, msg, NULL, &body) == 0 && http_buf_append(&rf->body, body.data, body.len) == 0
                 ? 0
                 : -1;
    resp_buf_free(&body);
    rf->content_type = json_ctype;
    return rc;
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
    int rc = proxy_calls_new(loop, e, &p->st, &p->calls);
    if (rc == 0) rc = http_config_server(loop, engine_config(e), &hooks, &p->srv);
    if (rc != 0) {
        proxy_calls_free(p->calls);
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int proxy_listen(proxy *p, char *err, size_t errlen) {
    return http_config_listen(p->srv, engine_config(p->e), err, errlen);
}

void proxy_apply_config(proxy *p) { http_config_apply(p->srv, engine_config(p->e)); }

void proxy_stop_accepting(proxy *p) { http_server_stop_accepting(p->srv); }

/* The server drained: the calls still in progress end, the upstream
 * transfers stop. */
static void on_server_closed(void *arg) {
    proxy *p = arg;
    proxy_calls_close(p->calls);
    if (p->closed) p->closed(p->closed_arg);
}

void proxy_close(proxy *p, void (*done)(void *arg), void *arg) {
    p->closed = done;
    p->closed_arg = arg;
    http_server_close(p->srv, on_server_closed, p);
}

void proxy_free(proxy *p) {
    if (!p) return;
    http_server_free(p->srv);
    proxy_calls_free(p->calls);
    free(p);
}

void proxy_get_stats(const proxy *p, proxy_stats *ps, http_stats *hs) {
    if (ps) *ps = p->st;
    if (hs) http_server_get_stats(p->srv, hs);
}

const http_server *proxy_server(const proxy *p) { return p->srv; }
