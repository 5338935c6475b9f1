/* run_target: where the requests of `sluice run` go. The target is a
 * deployment, or a group (the governor picks a member per request and
 * the grant names it): run_target_open() resolves it against the
 * configuration into one run_member per deployment it may send to, each
 * with its chat-completions URL and request headers built from that
 * deployment's endpoint, style, api_version and api_key_env (read from
 * the environment once, at open, and kept only in the header list).
 *
 * URLs (lib/core/endpoint.h, shared with the proxy): azure style
 * <endpoint>/openai/deployments/<name>/chat/completions
 * [?api-version=V] with api-key; openai and custom style
 * <endpoint>[/v1]/chat/completions with Authorization: Bearer; anthropic
 * style <endpoint>[/v1]/messages with x-api-key and anthropic-version
 * (api_version, default 2023-06-01). A member other than azure style also
 * needs "model" in the body (and an anthropic one "max_tokens"):
 * run_target_body() adds them when the line gave none.
 *
 * Depends on config and libcurl (curl_slist). No globals; not
 * thread-safe (one owner). Ownership: the target owns its members, their
 * URLs and header lists; run_target_close() frees them. Members point
 * into the config, which must outlive the target. */
#ifndef SLUICE_RUN_TARGET_H
#define SLUICE_RUN_TARGET_H

#include <stddef.h>

#include <curl/curl.h>

#include "config.h"

typedef struct run_member {
    const struct config_deployment *dep;
    char *url;               /* malloc'd */
    struct curl_slist *hdrs; /* Content-Type, the API key, the --header lines */
} run_member;

typedef struct run_target {
    const char *name;                 /* as given: the deployment or the group */
    const struct config_group *group; /* NULL: a deployment */
    run_member *members;              /* a deployment: one; a group: its members in order */
    size_t n;
    long long rpm; /* the quota the progress line compares with (a group: the sum) */
} run_target;

/* Resolves name in cfg and builds every member's URL and headers, adding
 * headers[0..nheaders) ("NAME: VALUE") to each. Returns 0, or -1 with a
 * message in err naming what is missing (an unknown name; a member
 * without endpoint; an unset API key variable; a malformed header); t is
 * then safe to close. */
int run_target_open(run_target *t, const config *cfg, const char *name, char *const *headers, int nheaders, char *err,
                    size_t errlen);

/* The member called deployment (the grant's), or NULL. */
const run_member *run_target_member(const run_target *t, const char *deployment);

/* 1 when lane is "" or some member has it. A group's member without the
 * lane serves the request in its default lane. */
int run_target_has_lane(const run_target *t, const char *lane);

/* 1 when tag is "" or some member carries it. */
int run_target_has_tag(const run_target *t, const char *tag);

/* The names of the target's lanes (a group: of its members, each once),
 * comma-separated, "none" when none, into buf. */
void run_target_lane_names(const run_target *t, char *buf, size_t n);

/* The body to send to m: body itself when it names its model
 * (has_model) or m is azure style, and needs nothing else (*owned =
 * NULL); otherwise a copy with "model": "<m's name>" added, and for an
 * anthropic member that has none, "max_tokens": max_tokens (> 0; the
 * Messages API requires it; 0: the body has one) (*owned: the copy, the
 * caller frees it). Returns NULL when out of memory. body is a compact
 * JSON object. */
const char *run_target_body(const run_member *m, const char *body, size_t len, int has_model, long long max_tokens,
                            size_t *out_len, char **owned);

/* Frees the members. NULL or a target that failed to open is fine. */
void run_target_close(run_target *t);

#endif
