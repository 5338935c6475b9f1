/* proxy_auth: credentials through the HTTP proxy. See proxy_auth.h. */
#define _POSIX_C_SOURCE 200809L

#include "proxy_auth.h"

#include "endpoint.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The credential a request presents: a Bearer token, api-key or x-api-key
 * (the first given, in that order), as a pointer into m and its length. */
static const char *presented_key(const http_msg *m, size_t *len) {
    const char *v = http_msg_header(m, "authorization");
    if (v && !strncasecmp(v, "Bearer ", 7)) {
        v += 7;
        while (*v == ' ') v++;
    } else {
        v = http_msg_header(m, "api-key");
        if (!v) v = http_msg_header(m, "x-api-key");
    }
    if (!v) return NULL;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    *len = n;
    return n ? v : NULL;
}

/* The client key any credential header of m carries, whichever header,
 * however many of them and with or without an auth scheme ("Bearer ",
 * "Basic ", none): the check that keeps a client key from going
 * upstream. presented_key() picks the one credential that names the
 * client; this looks at every one that would be forwarded. */
static const struct config_http_client *any_client_key(const config *cfg, const http_msg *m) {
    const struct config_http_client *hit = NULL;
    for (size_t i = 0; i < http_msg_nheaders(m); i++) {
        const char *name, *v;
        http_msg_header_at(m, i, &name, &v);
        if (!proxy_auth_is_credential(name)) continue;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strlen(v);
        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
        const struct config_http_client *c = n ? config_http_client_by_key(cfg, v, n) : NULL;
        /* After a scheme: "<scheme> <token>". */
        size_t sp = strcspn(v, " \t");
        if (!c && sp < n) {
            const char *t = v + sp;
            while (*t == ' ' || *t == '\t') t++;
            size_t tn = n - (size_t)(t - v);
            if (tn) c = config_http_client_by_key(cfg, t, tn);
        }
        if (c && !hit) hit = c;
    }
    return hit;
}

static int target_injects(const config_target *t) {
    if (t->deployment) return t->deployment->inject_key;
    /* config.c makes every member of a group agree. */
    return t->group && t->group->nmembers && t->group->members_[0]->inject_key;
}

int proxy_auth_check(const config *cfg, const config_target *t, int unix_socket, const http_msg *m, proxy_auth *out,
                     proxy_error *err) {
    memset(out, 0, sizeof(*out));
    size_t len = 0;
    const char *key = presented_key(m, &len);
    out->client = key ? config_http_client_by_key(cfg, key, len) : NULL;
    out->inject = target_injects(t);
    err->kind = PROXY_ERR_UNAUTHORIZED;
    err->param = NULL;
    if (out->inject) {
        if (out->client || unix_socket) return 0;
        snprintf(err->message, sizeof(err->message),
                 "sluice: this model is served with the proxy's own provider key; present a client key "
                 "(agent.http.clients) as your API key%s",
                 key ? " (the one given is not one)" : " (none was given)");
        return -1;
    }
    /* Pass-through forwards every credential header as it came: a client
     * key in any of them (a second api-key, an Authorization without
     * "Bearer ") would reach the provider. */
    const struct config_http_client *leaked = out->client ? out->client : any_client_key(cfg, m);
    if (leaked) {
        out->client = NULL;
        snprintf(err->message, sizeof(err->message),
                 "sluice: this model passes the caller's own provider credentials through, and the key given is "
                 "a sluice client key (client '%s'), which is never sent to the provider",
                 leaked->name);
        return -1;
    }
    return 0;
}

int proxy_auth_is_credential(const char *name) {
    return !strcasecmp(name, "authorization") || !strcasecmp(name, "api-key") || !strcasecmp(name, "x-api-key");
}

int proxy_auth_upstream_header(const struct config_deployment *d, char *buf, size_t n) {
    if (!d->api_key_ || !d->api_key_[0]) return -1;
    int w = snprintf(buf, n, "%s: %s%s", endpoint_key_header(d->style), endpoint_key_prefix(d->style), d->api_key_);
    if (w < 0 || (size_t)w >= n) {
        if (n) memset(buf, 0, n);
        return -1;
    }
    return w;
}
