/* run_target: see run_target.h. */
#define _GNU_SOURCE
#include "run_target.h"

#include "endpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Builds m's URL and headers from its deployment d. group: the group d is
 * a member of, for messages (NULL: d is the target). */
static int member_build(run_member *m, const config *cfg, const struct config_deployment *d,
                        const struct config_group *group, char *const *headers, int nheaders, char *err,
                        size_t errlen) {
    char why[160] = "";
    if (group) snprintf(why, sizeof(why), "; '%s' is a member of group '%s'", d->name, group->name);
    m->dep = d;
    if (!d->endpoint[0]) {
        snprintf(err, errlen, "%s: deployments.%s.endpoint is not set (the provider's base URL%s)", cfg->source,
                 d->name, why);
        return -1;
    }
    size_t n = strlen(d->endpoint) + strlen(d->name) + strlen(d->api_version) + 80;
    m->url = malloc(n);
    if (!m->url) return snprintf(err, errlen, "out of memory"), -1;
    const char *op = d->style == CONFIG_STYLE_ANTHROPIC ? "messages" : "chat/completions";
    if (endpoint_url(d, op, NULL, m->url, n) != 0) return snprintf(err, errlen, "out of memory"), -1;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *t = h ? curl_slist_append(h, "Expect:") : NULL;
    if (t && d->style == CONFIG_STYLE_ANTHROPIC) {
        /* The Messages API wants its version in a header; api_version
         * names it (Anthropic's current one by default). */
        char v[160];
        snprintf(v, sizeof(v), "anthropic-version: %s", endpoint_anthropic_version(d));
        t = curl_slist_append(h, v);
    }
    if (!t) {
        curl_slist_free_all(h);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    if (d->api_key_env[0]) {
        const char *key = getenv(d->api_key_env);
        if (!key) {
            curl_slist_free_all(h);
            snprintf(err, errlen, "the environment variable %s (deployments.%s.api_key_env) is not set%s",
                     d->api_key_env, d->name, why);
            return -1;
        }
        size_t kn = strlen(key) + 32;
        char *line = malloc(kn);
        t = NULL;
        if (line) {
            snprintf(line, kn, "%s: %s%s", endpoint_key_header(d->style), endpoint_key_prefix(d->style), key);
            t = curl_slist_append(h, line);
            explicit_bzero(line, kn);
            free(line);
        }
        if (!t) {
            curl_slist_free_all(h);
            return snprintf(err, errlen, "out of memory"), -1;
        }
    }
    for (int i = 0; i < nheaders; i++) {
        if (!strchr(headers[i], ':')) {
            curl_slist_free_all(h);
            snprintf(err, errlen, "--header '%s': expected 'NAME: VALUE'", headers[i]);
            return -1;
        }
        if (!(t = curl_slist_append(h, headers[i]))) {
            curl_slist_free_all(h);
            return snprintf(err, errlen, "out of memory"), -1;
        }
    }
    m->hdrs = h;
    return 0;
}

int run_target_open(run_target *t, const config *cfg, const char *name, char *const *headers, int nheaders, char *err,
                    size_t errlen) {
    memset(t, 0, sizeof(*t));
    t->name = name;
    const struct config_deployment *d = config_deployment(cfg, name);
    const struct config_group *g = d ? NULL : config_group(cfg, name);
    if (!d && !g) {
        snprintf(err, errlen, "deployment%s '%s' is not in %s", cfg->ngroups ? " or group" : "", name, cfg->source);
        return -1;
    }
    size_t n = g ? g->nmembers : 1;
    t->members = calloc(n, sizeof(*t->members));
    if (!t->members) return snprintf(err, errlen, "out of memory"), -1;
    t->group = g;
    for (size_t i = 0; i < n; i++) {
        const struct config_deployment *m = g ? g->members_[i] : d;
        t->n++;
        if (member_build(&t->members[i], cfg, m, g, headers, nheaders, err, errlen) != 0) return -1;
        t->rpm += m->rpm;
    }
    return 0;
}

const run_member *run_target_member(const run_target *t, const char *deployment) {
    for (size_t i = 0; i < t->n; i++)
        if (t->members[i].dep && !strcmp(t->members[i].dep->name, deployment)) return &t->members[i];
    return NULL;
}

int run_target_has_lane(const run_target *t, const char *lane) {
    if (!lane || !*lane) return 1;
    for (size_t i = 0; i < t->n; i++)
        if (config_lane(t->members[i].dep, lane)) return 1;
    return 0;
}

int run_target_has_tag(const run_target *t, const char *tag) {
    if (!tag || !*tag) return 1;
    for (size_t i = 0; i < t->n; i++)
        if (config_has_tag(t->members[i].dep, tag)) return 1;
    return 0;
}

void run_target_lane_names(const run_target *t, char *buf, size_t n) {
    if (!t->group) {
        config_lane_names(t->members[0].dep, buf, n);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < t->n; i++) {
        const struct config_deployment *d = t->members[i].dep;
        for (size_t k = 0; k < d->nlanes; k++) {
            const char *lane = d->lanes[k].name;
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++) seen = config_lane(t->members[j].dep, lane) != NULL;
            if (seen) continue;
            int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", lane);
            if (w < 0 || (size_t)w >= n - used) return;
            used += (size_t)w;
        }
    }
    if (!used) snprintf(buf, n, "none");
}

const char *run_target_body(const run_member *m, const char *body, size_t len, int has_model, long long max_tokens,
                            size_t *out_len, char **owned) {
    *owned = NULL;
    *out_len = len;
    int azure = m->dep->style == CONFIG_STYLE_AZURE;
    int add_max = m->dep->style == CONFIG_STYLE_ANTHROPIC && max_tokens > 0;
    if ((has_model || azure) && !add_max) return body;
    /* A compact JSON object: "{" then its members, or "{}". Names are
     * [A-Za-z0-9._:-], so the model needs no escaping. */
    const char *name = m->dep->name;
    size_t cap = len + strlen(name) + 64;
    char *b = malloc(cap);
    if (!b) return NULL;
    int empty = len <= 2, w = 0;
    w += snprintf(b + w, cap - (size_t)w, "{");
    if (!has_model && !azure) w += snprintf(b + w, cap - (size_t)w, "\"model\":\"%s\",", name);
    if (add_max) w += snprintf(b + w, cap - (size_t)w, "\"max_tokens\":%lld,", max_tokens);
    if (empty) b[w - 1] = '}';
    else w += snprintf(b + w, cap - (size_t)w, "%.*s", (int)(len - 1), body + 1);
    *out_len = (size_t)w;
    *owned = b;
    return b;
}

void run_target_close(run_target *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->members[i].url);
        curl_slist_free_all(t->members[i].hdrs);
    }
    free(t->members);
    memset(t, 0, sizeof(*t));
}
