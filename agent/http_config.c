/* http_config: agent.http on an http_server. See http_config.h. */
#define _POSIX_C_SOURCE 200809L

#include "http_config.h"

#include <stdio.h>
#include <stdlib.h>

#include "sluice.h"
#include "unixsock.h"

#define HTTP_BACKLOG 511

/* http_server.h's codes and levels are the daemon's. */
_Static_assert(HTTP_EINVAL == SL_EINVAL && HTTP_ENOMEM == SL_ENOMEM && HTTP_ECANCELED == SL_ECANCELED &&
                   HTTP_EIO == SL_EIO,
               "HTTP_E* are SL_E*");
_Static_assert((int)HTTP_LOG_ERROR == (int)CONFIG_LOG_ERROR && (int)HTTP_LOG_WARN == (int)CONFIG_LOG_WARN &&
                   (int)HTTP_LOG_INFO == (int)CONFIG_LOG_INFO && (int)HTTP_LOG_DEBUG == (int)CONFIG_LOG_DEBUG,
               "HTTP_LOG_* are CONFIG_LOG_*");

void http_config_limits(const config *cfg, http_server_limits *out) {
    const config_http *h = &cfg->agent.http;
    out->max_header_bytes = (size_t)h->max_header_bytes;
    out->max_body_bytes = (size_t)h->max_body_bytes;
    out->max_connections = (size_t)h->max_connections;
    out->header_timeout_ms = (uint64_t)h->header_timeout_ms;
    out->body_timeout_ms = (uint64_t)h->body_timeout_ms;
    out->idle_timeout_ms = (uint64_t)h->idle_timeout_ms;
    out->drain_timeout_ms = (uint64_t)h->drain_timeout_ms;
}

int http_config_server(uv_loop_t *loop, const config *cfg, const http_server_hooks *hooks, http_server **out) {
    http_server_limits lim;
    http_config_limits(cfg, &lim);
    return http_server_new(loop, &lim, hooks, out);
}

void http_config_apply(http_server *s, const config *cfg) {
    http_server_limits lim;
    http_config_limits(cfg, &lim);
    http_server_configure(s, &lim);
}

/* A UNIX listener's file, and the settings it gets once bound. */
typedef struct unix_file {
    unixsock sock;
    const config *cfg; /* during the listen only */
} unix_file;

static int unix_secure(void *ud, const char *path, char *err, size_t errlen) {
    unix_file *u = ud;
    const config *cfg = u->cfg;
    return unixsock_secure(&u->sock, path, cfg->agent.socket_mode, cfg->agent.socket_owner, cfg->agent.socket_group,
                           err, errlen);
}

static void unix_release(void *ud) {
    unix_file *u = ud;
    unixsock_remove(&u->sock);
    free(u);
}

static int listen_one(http_server *s, const config_listen *cl, const config *cfg, char *err, size_t errlen) {
    char why[400];
    int rc;
    if (cl->kind == CONFIG_LISTEN_UNIX) {
        int removed = 0;
        if (unixsock_clear(cl->path, &removed, err, errlen) != 0) return SL_EIO;
        if (removed) {
            char msg[400];
            snprintf(msg, sizeof(msg), "removed a stale socket file at %s", cl->path);
            http_server_log(s, CONFIG_LOG_INFO, msg);
        }
        unix_file *u = calloc(1, sizeof(*u));
        if (!u) {
            snprintf(err, errlen, "out of memory");
            return SL_ENOMEM;
        }
        u->cfg = cfg;
        http_unix_hooks uh = {unix_secure, unix_release, u};
        why[0] = '\0';
        rc = http_server_listen_unix(s, cl->path, HTTP_BACKLOG, &uh, why, sizeof(why)); /* takes u */
        if (rc == UV_EPERM) {
            snprintf(err, errlen, "%s", why); /* unixsock's message names the path */
            return SL_EIO;
        }
    } else {
        rc = http_server_listen_tcp(s, cl->host, cl->port, HTTP_BACKLOG, why, sizeof(why));
    }
    if (rc == 0) return 0;
    snprintf(err, errlen, "agent.http.listen: %s", why);
    return rc == UV_ENOMEM ? SL_ENOMEM : SL_EIO;
}

int http_config_listen(http_server *s, const config *cfg, char *err, size_t errlen) {
    const config_http *h = &cfg->agent.http;
    for (size_t i = 0; i < h->nlisten; i++) {
        int rc = listen_one(s, &h->listeners[i], cfg, err, errlen);
        if (rc) return rc;
    }
    return 0;
}
