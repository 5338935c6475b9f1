/* options: the configuration of an embedded governor, from sl_options.
 * See options.h. */
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* YAML double-quoted scalar of s into buf. Returns -1 on control chars. */
static int yaml_quote(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    if (cap < 3) return -1;
    buf[n++] = '"';
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return -1;
        if (n + 3 >= cap) return -1;
        if (*p == '"' || *p == '\\') buf[n++] = '\\';
        buf[n++] = *p;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return 0;
}

/* The YAML for redis_url + deployments. Caller frees. */
char *options_compose_config(const char *url, const char *deployments) {
    char qurl[1100];
    if (strlen(url) > 1000 || yaml_quote(url, qurl, sizeof(qurl)) != 0) return NULL;
    size_t dl = strlen(deployments);
    size_t cap = strlen(qurl) + 2 * dl + 64;
    for (const char *p = deployments; *p; p++)
        if (*p == '\n') cap += 2;
    char *text = malloc(cap);
    if (!text) return NULL;
    int n = snprintf(text, cap, "redis:\n  url: %s\ndeployments:", qurl);
    if (!strchr(deployments, '\n')) {
        snprintf(text + n, cap - (size_t)n, " %s\n", deployments);
        return text;
    }
    /* Block style: indent every line under the key. */
    char *w = text + n;
    *w++ = '\n';
    const char *p = deployments;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        *w++ = ' ';
        *w++ = ' ';
        memcpy(w, p, len);
        w += len;
        *w++ = '\n';
        p += len + (nl ? 1 : 0);
    }
    *w = '\0';
    return text;
}

int options_load_config(const sl_options *o, config **cfg, char *err, size_t errlen) {
    int n = (o->config_path != NULL) + (o->config_text != NULL) + (o->redis_url != NULL);
    if (n != 1) {
        snprintf(err, errlen, "embedded mode needs exactly one of config_path, config_text, redis_url");
        return SL_EINVAL;
    }
    if (o->redis_url && !o->deployments) {
        snprintf(err, errlen, "redis_url needs deployments (the YAML of the deployments mapping)");
        return SL_EINVAL;
    }
    if (!o->redis_url && o->deployments) {
        snprintf(err, errlen, "deployments is only used with redis_url");
        return SL_EINVAL;
    }
    int rc;
    if (o->config_path) {
        rc = config_load_flags(o->config_path, CONFIG_LOAD_NO_PROXY_SECRETS, cfg, err, errlen);
    } else if (o->config_text) {
        rc = config_load_string_flags("<config_text>", o->config_text, strlen(o->config_text),
                                      CONFIG_LOAD_NO_PROXY_SECRETS, cfg, err, errlen);
    } else {
        char *text = options_compose_config(o->redis_url, o->deployments);
        if (!text) {
            snprintf(err, errlen, "redis_url is too long or has control characters");
            return SL_EINVAL;
        }
        rc = config_load_string("<redis_url + deployments>", text, strlen(text), cfg, err, errlen);
        free(text);
    }
    return rc == 0 ? 0 : SL_EINVAL;
}
