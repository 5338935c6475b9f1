/* config: the sluiced configuration schema and the config_* API. See
 * config.h for the contract.
 *
 * The loading itself (YAML, the walk over the rows, value parsing,
 * defaults, messages with file:line:key) is cfgtab's; this file holds what
 * is sluiced's own: the rows of the root and of a deployment, the string
 * checkers, the cross-field rules (the finish hooks: the Redis URL, the
 * password from a file or the environment, Sentinel and Cluster, derived
 * bursts), and the lookup by deployment name. */
#define _POSIX_C_SOURCE 200809L

#include "config.h"

#include "cfgtab.h"
#include "tz.h"

#include <math.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#define CFG_SECRET_MAX 4096 /* refuse larger password files */

/* ---- string checkers ---- */

static int check_socket_path(const char *s, char *why, size_t n) {
    const size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    if (strlen(s) > max) {
        snprintf(why, n, "must be at most %zu bytes (a UNIX socket path)", max);
        return -1;
    }
    return 0;
}

/* host:port or [v6]:port with a port in 1..65535. On success *host and
 * *hostlen locate the host without brackets and *port is set. */
static int split_hostport(const char *s, const char **host, size_t *hostlen, int *port) {
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close == s + 1 || close[1] != ':') return -1;
        *host = s + 1;
        *hostlen = (size_t)(close - s - 1);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s) return -1;
        for (const char *p = s; p < colon; p++)
            if (*p == ':' || *p == ' ' || *p == '/') return -1;
        *host = s;
        *hostlen = (size_t)(colon - s);
    }
    /* (No control character or space in the host: a list item such as
     * redis.cluster's is not checked as a plain string is.) */
    for (size_t i = 0; i < *hostlen; i++)
        if ((unsigned char)(*host)[i] <= ' ' || (*host)[i] == 0x7f) return -1;
    long long v;
    if (cfg_parse_decimal(colon + 1, strlen(colon + 1), &v) != 1 || v < 1 || v > 65535) return -1;
    *port = (int)v;
    return 0;
}

static int check_hostport(const char *s, char *why, size_t whylen);

/* A Redis node address: host:port, never empty. */
static int check_node_addr(const char *s, char *why, size_t whylen) {
    if (!s[0] || check_hostport(s, why, whylen) != 0) {
        snprintf(why, whylen, "must be host:port with a port in 1..65535");
        return -1;
    }
    return 0;
}

static int check_hostport(const char *s, char *why, size_t n) {
    const char *h;
    size_t hl;
    int port;
    if (split_hostport(s, &h, &hl, &port) != 0) {
        snprintf(why, n, "must be HOST:PORT with a port in 1..65535 (like 127.0.0.1:9464), or empty to disable");
        return -1;
    }
    return 0;
}

/* A model name the proxy maps (an alias): 1 to CONFIG_ALIAS_MAX bytes of
 * printable ASCII without spaces, as model names are ("gpt-4o-2024-08-06",
 * "claude-sonnet-4-5", "openai/gpt-4o"). */
static int check_alias(const char *s, char *why, size_t n) {
    size_t len = strlen(s);
    int ok = len >= 1 && len <= CONFIG_ALIAS_MAX;
    for (size_t i = 0; i < len && ok; i++) ok = s[i] > ' ' && s[i] < 0x7f;
    if (!ok) {
        snprintf(why, n, "must be 1 to %d bytes of printable ASCII without spaces", CONFIG_ALIAS_MAX);
        return -1;
    }
    return 0;
}

/* One agent.http.listen entry: "unix:/abs/path", or a numeric IPv4
 * address or a bracketed IPv6 one with a port ("127.0.0.1:8790",
 * "[::1]:8790"). Host names are refused: the loopback rule is decided on
 * the address itself, never on what a resolver says. out may be NULL. */
static int parse_listen(const char *s, config_listen *out, char *why, size_t n) {
    config_listen l;
    memset(&l, 0, sizeof(l));
    if (!strncmp(s, "unix:", 5)) {
        const char *path = s + 5;
        if (path[0] != '/') {
            snprintf(why, n, "must be unix:/absolute/path for a UNIX socket");
            return -1;
        }
        if (strlen(path) >= sizeof(l.path) || check_socket_path(path, why, n) != 0) {
            snprintf(why, n, "must be a UNIX socket path of at most %zu bytes", sizeof(l.path) - 1);
            return -1;
        }
        l.kind = CONFIG_LISTEN_UNIX;
        snprintf(l.path, sizeof(l.path), "%s", path);
    } else {
        const char *h;
        size_t hl;
        unsigned char addr[16];
        if (split_hostport(s, &h, &hl, &l.port) != 0 || hl == 0 || hl >= sizeof(l.host)) {
            snprintf(why, n,
                     "must be ADDRESS:PORT (127.0.0.1:8790, [::1]:8790) or unix:/path, with a port in 1..65535");
            return -1;
        }
        memcpy(l.host, h, hl);
        l.host[hl] = '\0';
        int v6 = s[0] == '[';
        if (inet_pton(v6 ? AF_INET6 : AF_INET, l.host, addr) != 1) {
            snprintf(why, n, "must be a numeric IPv4 address or a bracketed IPv6 one (no host names), with a port");
            return -1;
        }
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!v6) l.loopback = addr[0] == 127;
        else
            l.loopback =
                (!memcmp(addr, in6addr_loopback.s6_addr, 16)) || (!memcmp(addr, v4mapped, 12) && addr[12] == 127);
        l.kind = CONFIG_LISTEN_TCP;
    }
    if (out) *out = l;
    return 0;
}

static int check_listen(const char *s, char *why, size_t n) { return parse_listen(s, NULL, why, n); }

static int check_env_name(const char *s, char *why, size_t n) {
    int ok = (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_';
    for (const char *p = s; *p && ok; p++)
        ok = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
    if (!ok) {
        snprintf(why, n, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
        return -1;
    }
    return 0;
}

static int check_token(const char *s, char *why, size_t n) {
    if (strlen(s) > 128 || strpbrk(s, " ")) {
        snprintf(why, n, "must be at most 128 bytes without spaces");
        return -1;
    }
    return 0;
}

static int check_http_url(const char *s, char *why, size_t n) {
    const char *rest = NULL;
    if (!strncmp(s, "https://", 8)) rest = s + 8;
    else if (!strncmp(s, "http://", 7)) rest = s + 7;
    if (!rest || !*rest || *rest == '/' || strchr(s, ' ')) {
        snprintf(why, n, "must be an http:// or https:// URL with a host");
        return -1;
    }
    return 0;
}

int config_name_ok(const char *s, size_t len) {
    int ok = len >= 1 && len <= CONFIG_NAME_MAX;
    for (size_t i = 0; i < len && ok; i++) {
        char c = s[i];
        ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == ':' || c == '-';
    }
    return ok;
}

/* [A-Za-z0-9._:-]{1,64}: the name becomes a Redis hash tag, so no braces. */
static int check_deployment_name(const char *s, size_t len, char *why, size_t n) {
    if (!config_name_ok(s, len)) {
        snprintf(why, n, "invalid deployment name: use 1 to %d of A-Z a-z 0-9 . _ : -", CONFIG_NAME_MAX);
        return -1;
    }
    return 0;
}

/* ---- the schema ---- */

static const char *const fail_names[] = {"open", "closed", "hold", NULL};
static const char *const level_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const style_names[] = {"azure", "openai", "anthropic", "custom", "bedrock", "gemini", NULL};
static const char *const stream_usage_names[] = {"inject", "off", NULL};
static const char *const tokens_rule_names[] = {"sum", "max", NULL};
static const char *const estimate_names[] = {"learn", "exact", NULL};
static const char *const output_charge_names[] = {"max", "expected", NULL};

typedef struct config_deployment cfg_deployment;
typedef struct config_lane cfg_lane;
typedef struct config_tenant cfg_tenant;
typedef struct config_group cfg_group;
typedef struct config_group_tenant cfg_group_tenant;

static int deployment_finish(cfg_ctx *ctx, cfg_entity *ent);
static int client_finish(cfg_ctx *ctx, cfg_entity *ent);
static int read_secret(cfg_ctx *ctx, cfg_entity *ent, const char *env_key, const char *env, const char *file_key,
                       const char *file, char **out);
static void wipe_free(char *s);
static int root_finish(cfg_ctx *ctx, cfg_entity *ent);
static int root_init(void *base, const char *name);
static void root_destroy(void *base);

/* [A-Za-z0-9._:-]{1,64}, like the names on the wire (LANE, TENANT). */
static int check_class_name(const char *s, size_t len, char *why, size_t n) {
    if (check_deployment_name(s, len, why, n) != 0) {
        snprintf(why, n, "invalid name: use 1 to %d of A-Z a-z 0-9 . _ : -", CONFIG_NAME_MAX);
        return -1;
    }
    return 0;
}

static const cfg_row lane_rows[] = {
    CFG_INT("priority", cfg_lane, priority, "0", 0, 1000, 0,
            "0 is served first; a lane never reserves ahead of a higher one's next request."),
    CFG_INT("max_wait_ms", cfg_lane, max_wait_ms, "-1", -1, 604800000, 0,
            "Longest wait of the lane's requests without MAXWAIT; -1 = the deployment's max_wait_ms (up to a week)."),
    CFG_INT("horizon_ms", cfg_lane, horizon_ms, "-1", -1, 86400000, 0,
            "How far ahead of now the lane may reserve; -1 = derived (the top lane: its max wait; others: lane_step_ms "
            "bands)."),
    CFG_NUM("headroom", cfg_lane, headroom, "0", 0, 1, CFG_MAX_OPEN,
            "Share of the rate kept for this lane (and those above it) that lower lanes cannot take."),
};

static const cfg_schema lane_schema = {
    .what = "lane",
    .rows = lane_rows,
    .nrows = sizeof(lane_rows) / sizeof(lane_rows[0]),
    .size = sizeof(cfg_lane),
    .name_off = offsetof(cfg_lane, name),
    .line_off = offsetof(cfg_lane, line),
    .check_name = check_class_name,
};

static const cfg_row tenant_rows[] = {
    CFG_NUM("weight", cfg_tenant, weight, "1", 0, 1000000, CFG_MIN_OPEN,
            "Share of the rate relative to the other tenants with demand."),
    CFG_INT("ceiling_rpm", cfg_tenant, ceiling_rpm, "0", 0, 1e9, 0,
            "Hard cap on the tenant's requests per minute, fleet-wide; 0 = none."),
    CFG_INT("ceiling_tpm", cfg_tenant, ceiling_tpm, "0", 0, 1e12, 0,
            "Hard cap on the tenant's tokens per minute, fleet-wide; 0 = none."),
    CFG_INT("daily_tokens", cfg_tenant, daily_tokens, "0", 0, 1e15, 0,
            "Tokens the tenant may reserve per UTC day (chargeback); 0 = unlimited."),
};

static const cfg_schema tenant_schema = {
    .what = "tenant",
    .rows = tenant_rows,
    .nrows = sizeof(tenant_rows) / sizeof(tenant_rows[0]),
    .size = sizeof(cfg_tenant),
    .name_off = offsetof(cfg_tenant, name),
    .line_off = offsetof(cfg_tenant, line),
    .check_name = check_class_name,
};

static const char *const policy_names[] = {"priority", "weighted", NULL};

static const cfg_row group_tenant_rows[] = {
    CFG_STR("tag", cfg_group_tenant, tag, NULL, check_token,
            "Only members with this tag serve the tenant (e.g. eu, for data residency)."),
};

static const cfg_schema group_tenant_schema = {
    .what = "tenant",
    .rows = group_tenant_rows,
    .nrows = sizeof(group_tenant_rows) / sizeof(group_tenant_rows[0]),
    .size = sizeof(cfg_group_tenant),
    .name_off = offsetof(cfg_group_tenant, name),
    .line_off = offsetof(cfg_group_tenant, line),
    .check_name = check_class_name,
};

static int check_member(const char *s, char *why, size_t n) { return check_deployment_name(s, strlen(s), why, n); }

static const cfg_row group_rows[] = {
    CFG_STRS("members", cfg_group, members, nmembers, check_member,
             "Deployments of the group, in priority order (the first is the primary)."),
    CFG_ENUM("policy", cfg_group, policy, "priority", policy_names,
             "How a member is chosen: priority = the first member whose slot is within spill_ms, else the soonest; "
             "weighted = members take turns in proportion to their rpm, then the same spill."),
    CFG_INT("spill_ms", cfg_group, spill_ms, "1000", 0, 3600000, 0,
            "A member is used while its slot is at most this far away; beyond it requests spill to the next member."),
    CFG_INT("max_wait_ms", cfg_group, max_wait_ms, "60000", 0, 86400000, 0,
            "Longest wait for ACQUIRE <group> without MAXWAIT."),
    CFG_NUM("breaker.failure_ratio", cfg_group, breaker.failure_ratio, "0.5", 0, 1, 0,
            "Server errors and timeouts over settled requests in the window that open a member's breaker; 0 = off."),
    CFG_INT("breaker.min_requests", cfg_group, breaker.min_requests, "20", 1, 1000000, 0,
            "Settled requests in the window before the breaker may open."),
    CFG_INT("breaker.window_s", cfg_group, breaker.window_s, "30", 1, 3600, 0, "Sampling window of the breaker."),
    CFG_INT("breaker.break_s", cfg_group, breaker.break_s, "30", 1, 3600, 0,
            "How long an open breaker keeps traffic away before one probe is let through."),
    CFG_LIST("tenants", cfg_group, tenants, ntenants, &group_tenant_schema, 0,
             "Per-tenant restrictions within the group (tag)."),
    CFG_STRS("aliases", cfg_group, aliases, naliases, check_alias,
             "Other model names the HTTP proxy maps to this group (the request body's model)."),
};

static const cfg_schema group_schema = {
    .what = "group",
    .rows = group_rows,
    .nrows = sizeof(group_rows) / sizeof(group_rows[0]),
    .size = sizeof(cfg_group),
    .name_off = offsetof(cfg_group, name),
    .line_off = offsetof(cfg_group, line),
    .check_name = check_deployment_name,
};

static int check_tag(const char *s, char *why, size_t n) { return check_class_name(s, strlen(s), why, n); }

/* ISO 4217's active codes (the list of 2024), sorted. */
static const char *const currencies[] = {
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BHD", "BIF",
    "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF", "CLP", "CNY", "COP", "CRC",
    "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS",
    "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD",
    "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL",
    "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MYR", "MZN", "NAD",
    "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD",
    "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP",
    "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VES",
    "VND", "VUV", "WST", "XAF", "XCD", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG"};

static int currency_cmp(const void *a, const void *b) { return strcmp(a, *(const char *const *)b); }

int config_currency_ok(const char *code) {
    return code && strlen(code) == 3 &&
           bsearch(code, currencies, sizeof(currencies) / sizeof(currencies[0]), sizeof(currencies[0]), currency_cmp) !=
               NULL;
}

static int check_currency(const char *s, char *why, size_t n) {
    if (!s[0] || config_currency_ok(s)) return 0;
    snprintf(why, n, "must be an ISO 4217 currency code in capitals (USD, EUR, GBP, JPY, ...)");
    return -1;
}

/* A budget's currency: required, so "" is what the file said. */
static int check_currency_given(const char *s, char *why, size_t n) {
    if (!s[0]) {
        snprintf(why, n, "must be an ISO 4217 currency code in capitals (USD, EUR, GBP, JPY, ...)");
        return -1;
    }
    return check_currency(s, why, n);
}

static int check_zone(const char *s, char *why, size_t n) {
    if (!s[0]) return 0;
    tz_zone *z = NULL;
    if (tz_load(NULL, s, &z, why, n) != 0) return -1;
    tz_free(z);
    return 0;
}

typedef struct config_budget cfg_budget;

static int budget_finish(cfg_ctx *ctx, cfg_entity *ent);

static const cfg_row budget_rows[] = {
    CFG_STR("tenant", cfg_budget, tenant, NULL, check_tag, "Only requests of this tenant draw from it; empty = any."),
    CFG_STR("client", cfg_budget, client, NULL, check_tag,
            "Only requests of this client key of the HTTP proxy (agent.http.clients) draw from it; empty = any."),
    CFG_STR("deployment", cfg_budget, deployment, NULL, check_tag,
            "Only requests to this deployment or group draw from it; empty = any."),
    CFG_STRF("currency", cfg_budget, currency, NULL, check_currency_given, CFG_REQUIRED,
             "ISO 4217 code: the prices of every deployment it draws from must be in it."),
    CFG_NUM("daily", cfg_budget, daily, "0", 0, 1e9, 0, "What may be spent per day (time_zone's); 0 = no daily limit."),
    CFG_NUM("monthly", cfg_budget, monthly, "0", 0, 1e9, 0,
            "What may be spent per calendar month (time_zone's); 0 = no monthly limit."),
    CFG_NUM("total", cfg_budget, total, "0", 0, 1e9, 0, "What may be spent in all; 0 = no total limit."),
    CFG_STR("time_zone", cfg_budget, time_zone, NULL, check_zone,
            "Time zone (tz database name) whose midnight starts a day and whose first of the month a month; empty = "
            "UTC."),
    CFG_NUM("warn_at", cfg_budget, warn_at, "0.8", 0, 1, CFG_MIN_OPEN,
            "The soft limit: the share of a limit spent or reserved that warns (log, metrics, STATUS)."),
};

static const cfg_schema budget_schema = {
    .what = "budget",
    .rows = budget_rows,
    .nrows = sizeof(budget_rows) / sizeof(budget_rows[0]),
    .size = sizeof(cfg_budget),
    .name_off = offsetof(cfg_budget, name),
    .line_off = offsetof(cfg_budget, line),
    .check_name = check_class_name,
    .finish = budget_finish,
};

static const cfg_row deployment_rows[] = {
    CFG_INT("rpm", cfg_deployment, rpm, NULL, 1, 1e9, CFG_REQUIRED, "Requests per minute the provider allows."),
    CFG_INT("tpm", cfg_deployment, tpm, "0", 0, 1e12, 0,
            "Combined tokens (input + max output) per minute (styles azure, openai, custom); 0 = no limit."),
    CFG_INT("itpm", cfg_deployment, itpm, "0", 0, 1e12, 0,
            "Input tokens per minute (styles anthropic, custom); 0 = no limit."),
    CFG_INT("otpm", cfg_deployment, otpm, "0", 0, 1e12, 0,
            "Output tokens per minute, charged as max output and corrected to the actual (anthropic, custom); 0 = no "
            "limit."),
    CFG_INT("burst.requests", cfg_deployment, burst.requests, NULL, 1, 1e9, CFG_DERIVED,
            "Requests that may go at once on a full bucket; default max(1, rpm/60), one second of rate."),
    CFG_INT("burst.tokens", cfg_deployment, burst.tokens, NULL, 1, 1e12, CFG_DERIVED,
            "Tokens that may go at once on a full bucket; default max(1, tpm/60)."),
    CFG_INT("burst.input_tokens", cfg_deployment, burst.input_tokens, NULL, 1, 1e12, CFG_DERIVED,
            "Input tokens that may go at once on a full bucket; default max(1, itpm/60)."),
    CFG_INT("burst.output_tokens", cfg_deployment, burst.output_tokens, NULL, 1, 1e12, CFG_DERIVED,
            "Output tokens that may go at once on a full bucket; default max(1, otpm/60)."),
    CFG_INT("max_concurrency", cfg_deployment, max_concurrency, "0", 0, 1000000, 0,
            "Fleet-wide cap on requests in flight; 0 = no cap."),
    CFG_INT("lease_s", cfg_deployment, lease_s, "120", 1, 86400, 0,
            "Seconds a concurrency lease or an unsettled grant lives after its slot."),
    CFG_INT("rpd", cfg_deployment, rpd, "0", 0, 1e12, 0, "Requests per day (see daily_reset); 0 = unlimited."),
    CFG_INT("tpd", cfg_deployment, tpd, "0", 0, 1e15, 0, "Tokens per day (see daily_reset); 0 = unlimited."),
    CFG_STR("daily_reset", cfg_deployment, daily_reset, NULL, NULL,
            "Time zone (tz database name) whose midnight starts the day of rpd, tpd and tenants' daily_tokens; "
            "default America/Los_Angeles for style gemini, else UTC."),
    CFG_INT("max_wait_ms", cfg_deployment, max_wait_ms, "60000", 0, 86400000, 0,
            "Longest wait for ACQUIRE without MAXWAIT; a longer wait is shed at once."),
    CFG_BOOL("refund", cfg_deployment, refund, "false",
             "Override for every token dimension: settle corrects it to the actual usage (see refund.<dim>)."),
    CFG_BOOL("refund.tokens", cfg_deployment, refunds.tokens, "false",
             "Settle gives back combined tokens estimated but unused; Azure and OpenAI never do, so default false."),
    CFG_BOOL("refund.input_tokens", cfg_deployment, refunds.input_tokens, "false",
             "Settle gives back input tokens estimated but unused; default false (charged at admission)."),
    CFG_BOOL("refund.output_tokens", cfg_deployment, refunds.output_tokens, "true",
             "Settle corrects output tokens to the actual output, as Anthropic does; default true."),
    CFG_INT("retry_budget.ttl_s", cfg_deployment, retry_budget.ttl_s, "10", 1, 3600, 0,
            "Window in seconds over which successes earn retries."),
    CFG_INT("retry_budget.min_per_s", cfg_deployment, retry_budget.min_per_s, "1", 0, 1000000, 0,
            "Retries per second always allowed, whatever the successes."),
    CFG_NUM("retry_budget.percent", cfg_deployment, retry_budget.percent, "10", 0, 1000, 0,
            "Retries allowed as a percentage of successes in the window."),
    CFG_NUM("aimd.decrease", cfg_deployment, aimd.decrease, "0.7", 0, 1, CFG_MIN_OPEN | CFG_MAX_OPEN,
            "Factor applied to the effective rate on an unexpected 429."),
    CFG_NUM("aimd.min_scale", cfg_deployment, aimd.min_scale, "0.1", 0, 1, CFG_MIN_OPEN,
            "Lowest effective rate, as a share of the configured rate."),
    CFG_NUM("aimd.increase", cfg_deployment, aimd.increase, "0.05", 0, 1, CFG_MIN_OPEN,
            "Share of the configured rate given back after each quiet interval."),
    CFG_INT("aimd.interval_s", cfg_deployment, aimd.interval_s, "5", 1, 3600, 0,
            "Seconds without a 429 before the effective rate is raised."),
    CFG_INT("aimd.min_throttles", cfg_deployment, aimd.min_throttles, "3", 1, 1000, 0,
            "429s whose headers explain nothing, within aimd.window_s, before the rate is cut; one alone only pauses."),
    CFG_INT("aimd.window_s", cfg_deployment, aimd.window_s, "10", 1, 3600, 0,
            "Window in which aimd.min_throttles unexplained 429s cut the rate."),
    CFG_BOOL("adapt.limits", cfg_deployment, adapt.limits, "true",
             "Adopt a limit the provider's headers report below the configured one, fleet-wide."),
    CFG_BOOL("adapt.outside", cfg_deployment, adapt.outside, "true",
             "Take others' use of the key, seen in the provider's remaining counts, off the effective rate."),
    CFG_STR("endpoint", cfg_deployment, endpoint, NULL, check_http_url, "Provider base URL, for `sluice run`."),
    CFG_STR(
        "api_key_env", cfg_deployment, api_key_env, NULL, check_env_name,
        "Environment variable holding the provider API key, for `sluice run` (and the HTTP proxy with inject_key)."),
    CFG_BOOL("inject_key", cfg_deployment, inject_key, "false",
             "The HTTP proxy sends the key of api_key_env upstream instead of the caller's credentials; TCP callers "
             "must then present a client key (agent.http.clients)."),
    CFG_ENUM("style", cfg_deployment, style, "azure", style_names,
             "Provider profile: azure, openai, anthropic, bedrock, gemini or custom; the API style and how tokens "
             "are counted."),
    CFG_STR("api_version", cfg_deployment, api_version, NULL, check_token,
            "api-version query parameter (style azure), or the anthropic-version header (style anthropic)."),
    CFG_ENUM("stream_usage", cfg_deployment, stream_usage, "inject", stream_usage_names,
             "HTTP proxy: inject asks an OpenAI-format stream for its usage chunk (stream_options.include_usage); "
             "off forwards the body as sent."),
    CFG_ENUM("tokens_rule", cfg_deployment, tokens_rule, "sum", tokens_rule_names,
             "How tpm charges a request at admission: sum (prompt + max output, Azure OpenAI) or max (the larger "
             "of them, OpenAI); default max for style openai, else sum."),
    CFG_NUM("output_burndown", cfg_deployment, output_burndown, NULL, 0, 100, CFG_MIN_OPEN | CFG_DERIVED,
            "Quota tokens one output token counts as in tpm (Bedrock's burndown rate; styles bedrock, custom); "
            "default 5 for style bedrock when the name or an alias is one of the 5x Claude models, else 1."),
    CFG_INT("jitter_ms", cfg_deployment, jitter_ms, "10", 0, 10000, 0,
            "Release jitter in ms the schedule tolerates: callers may start this late without exceeding the burst."),
    CFG_INT("horizon_ms", cfg_deployment, horizon_ms, NULL, -1, 86400000, CFG_DERIVED,
            "How far ahead of now a slot may be granted (later: asked again when near); -1 = up to the max wait; "
            "default 250 when a token dimension is corrected at the end (refund), else -1."),
    CFG_INT("requests_window_ms", cfg_deployment, requests_window_ms, "0", 0, 60000, 0,
            "The provider counts requests per window of this many ms, not in a bucket (Azure OpenAI: \"evaluated "
            "over 1 s or 10 s\"): the fleet sends them one at a time, spaced so that any window holds at most its "
            "share of rpm even when a send starts jitter_ms late (burst.requests is then 1); 0 = a bucket. "
            "Recommended 1000 for Azure OpenAI."),
    CFG_INT("pause_max_ms", cfg_deployment, pause_max_ms, "20000", 0, 3600000, 0,
            "429s in a row double the fleet's pause: one arriving after the last pause ended, while that pause was "
            "recent, pauses twice as long as it says, up to this many ms; after a quiet spell the count starts "
            "again. 0 = each 429 pauses as it says."),
    CFG_ENUM("estimate", cfg_deployment, estimate, "learn", estimate_names,
             "learn: estimates (the proxy's, callers' TOKENS/INPUT) are multiplied by the ratio of the provider's "
             "prompt count to them, learned fleet-wide from settles; exact: callers count exactly, charged as given."),
    CFG_ENUM("output_charge", cfg_deployment, output_charge, "max", output_charge_names,
             "What otpm charges a request at admission: max (its max output; Anthropic's 2025 rule: max_tokens at "
             "admission, corrected at the end) or expected (a 90th percentile of recent answers' actual / max "
             "output, learned fleet-wide, corrected at the settle; Anthropic's current rule: OTPM counts the "
             "tokens generated); default expected for style anthropic, else max."),
    CFG_INT("estimate_half_life_s", cfg_deployment, estimate_half_life_s, "600", 1, 86400 * 30, 0,
            "Half-life in seconds of the learned estimate ratio without news: it decays toward 1."),
    CFG_INT("estimate_learn_horizon_ms", cfg_deployment, estimate_learn_horizon_ms, "-1", -1, 86400000, 0,
            "While the ratio is learned (fewer than 4 fresh ratios), how far ahead a request that teaches it may be "
            "granted, so the first settles reach the rest; -1 = reserve ahead as usual."),
    CFG_INT("refund_lag_ms", cfg_deployment, refund_lag_ms, "250", 0, 60000, 0,
            "How long after a response ends its settle may reach Redis; a give-back counts the sends of that time."),
    CFG_LIST("lanes", cfg_deployment, lanes, nlanes, &lane_schema, 0,
             "Latency classes by name (e.g. interactive, batch); none = one lane."),
    CFG_STR("default_lane", cfg_deployment, default_lane, NULL, check_token,
            "Lane of requests that name none; empty = the highest-priority lane."),
    CFG_LIST("tenants", cfg_deployment, tenants, ntenants, &tenant_schema, 0,
             "Tenants by name with weights, ceilings and daily budgets; `default` is the class of every other tenant."),
    CFG_INT("tenant_idle_ms", cfg_deployment, tenant_idle_ms, "2000", 100, 3600000, 0,
            "A tenant without requests for this long gives its share to the others."),
    CFG_INT("lane_step_ms", cfg_deployment, lane_step_ms, "10", 1, 10000, 0,
            "Width of the horizon bands that order lanes (and over-share requests) across agents."),
    CFG_STRS("tags", cfg_deployment, tags, ntags, check_tag,
             "Labels a group request or tenant may be restricted to (e.g. eu for data residency)."),
    CFG_STRS("aliases", cfg_deployment, aliases, naliases, check_alias,
             "Other model names the HTTP proxy maps to this deployment (the request body's model)."),
    CFG_NUM("price.input", cfg_deployment, price.input, "0", 0, 1e6, 0,
            "Price of a million input tokens (not read from the prompt cache), in price.currency."),
    CFG_NUM("price.output", cfg_deployment, price.output, "0", 0, 1e6, 0, "Price of a million output tokens."),
    CFG_NUM("price.cache_read", cfg_deployment, price.cache_read, NULL, 0, 1e6, CFG_DERIVED,
            "Price of a million input tokens read from the prompt cache; default price.input."),
    CFG_NUM("price.cache_write", cfg_deployment, price.cache_write, NULL, 0, 1e6, CFG_DERIVED,
            "Price of a million input tokens written to the prompt cache; default price.input."),
    CFG_STR("price.currency", cfg_deployment, price.currency, NULL, check_currency,
            "ISO 4217 code of the prices (USD, EUR, ...); required with any price."),
};
_Static_assert(sizeof(deployment_rows) / sizeof(deployment_rows[0]) <= CFG_MAX_ROWS, "too many rows");

static const cfg_schema deployment_schema = {
    .what = "deployment",
    .rows = deployment_rows,
    .nrows = sizeof(deployment_rows) / sizeof(deployment_rows[0]),
    .size = sizeof(cfg_deployment),
    .name_off = offsetof(cfg_deployment, name),
    .line_off = offsetof(cfg_deployment, line),
    .check_name = check_deployment_name,
    .finish = deployment_finish,
};

typedef struct config_http_client cfg_http_client;

static const cfg_row http_client_rows[] = {
    CFG_STR("key_env", cfg_http_client, key_env, NULL, check_env_name,
            "Environment variable holding the client's key (give this or key_file)."),
    CFG_STR("key_file", cfg_http_client, key_file, NULL, NULL,
            "File holding the client's key on one line, read at load and on reload (give this or key_env)."),
    CFG_STR("tenant", cfg_http_client, tenant, NULL, check_tag,
            "Tenant the client's requests count as, whatever x-sluice-tenant says; empty = as the request says."),
    CFG_STR("lane", cfg_http_client, lane, NULL, check_tag,
            "Lane the client's requests take, whatever x-sluice-lane says; empty = as the request says."),
};

static const cfg_schema http_client_schema = {
    .what = "client",
    .rows = http_client_rows,
    .nrows = sizeof(http_client_rows) / sizeof(http_client_rows[0]),
    .size = sizeof(cfg_http_client),
    .name_off = offsetof(cfg_http_client, name),
    .line_off = offsetof(cfg_http_client, line),
    .check_name = check_class_name,
    .finish = client_finish,
};

static const char *const http_mode_names[] = {"govern", "observe", NULL};

static const cfg_row root_rows[] = {
    CFG_STRF("redis.url", config, redis.url, "redis://127.0.0.1:6379", NULL, CFG_NONEMPTY | CFG_NOECHO,
             "Redis to share the budget in: redis://[user@]host[:port][/db] or unix:///path/to/redis.sock."),
    CFG_STR("redis.username", config, redis.username, NULL, check_token,
            "ACL user (also possible as user@ in the URL)."),
    CFG_STR("redis.password_file", config, redis.password_file, NULL, NULL,
            "File holding the Redis password, read at load; one trailing newline is stripped."),
    CFG_STR("redis.password_env", config, redis.password_env, NULL, check_env_name,
            "Environment variable holding the Redis password."),
    CFG_INT("redis.timeout_ms", config, redis.timeout_ms, "250", 1, 60000, 0, "Timeout of each Redis call."),
    CFG_INT("redis.connect_timeout_ms", config, redis.connect_timeout_ms, "1000", 1, 60000, 0,
            "Timeout of connecting to Redis."),
    CFG_NUM("redis.max_script_ms", config, redis.max_script_ms, "1", 0, 1000, 0,
            "Bound on one reserve or settle call's time in Redis: the agent sizes its batches to stay under it; 0 = no "
            "bound."),
    CFG_STRS("redis.cluster", config, redis.cluster, redis.ncluster, check_node_addr,
             "Redis Cluster seed nodes (host:port); the agent routes by hash slot. Replaces redis.url's address."),
    CFG_STR("redis.sentinel.master", config, redis.sentinel_master, NULL, check_token,
            "Sentinel: name of the monitored master; with redis.sentinel.nodes."),
    CFG_STRS("redis.sentinel.nodes", config, redis.sentinels, redis.nsentinels, check_node_addr,
             "Sentinel nodes (host:port) asked for the master's address."),
    CFG_STR("agent.id", config, agent.id, NULL, check_token, "Name of this agent in the fleet; empty = hostname:pid."),
    CFG_STRF("agent.socket", config, agent.socket, "/run/sluice/agent.sock", check_socket_path, CFG_NONEMPTY,
             "UNIX socket the agent serves (RESP2)."),
    CFG_MODE("agent.socket_mode", config, agent.socket_mode, "0660", "Permission bits of the socket, in octal."),
    CFG_STR("agent.socket_owner", config, agent.socket_owner, NULL, check_token,
            "User (name or uid) that owns the socket; empty = the user sluiced runs as."),
    CFG_STR("agent.socket_group", config, agent.socket_group, NULL, check_token,
            "Group (name or gid) of the socket, whose members may acquire; empty = sluiced's group."),
    CFG_STR("agent.metrics", config, agent.metrics, NULL, check_hostport,
            "host:port of the Prometheus endpoint; empty = off."),
    CFG_INT("agent.max_clients", config, agent.max_clients, "1024", 1, 1000000, 0, "Most clients connected at once."),
    CFG_BYTES("agent.max_client_buffer", config, agent.max_client_buffer, "1048576", 1024, 1 << 30,
              "Bytes buffered per client before it is closed."),
    CFG_INT("agent.client_idle_timeout_ms", config, agent.client_idle_timeout_ms, "30000", 100, 86400000, 0,
            "A half-written command older than this closes its client."),
    CFG_ENUM("agent.fail", config, agent.fail, "open", fail_names,
             "While Redis is unreachable: open = pace locally at a share of the rate, closed = refuse, hold = pace "
             "locally while the others hold this agent's share back (agent.silent_hold_ms), then refuse."),
    CFG_NUM("agent.fallback_share", config, agent.fallback_share, "0.25", 0, 1, CFG_MIN_OPEN,
            "Share of each deployment's rate used in fallback before the live agents are known."),
    CFG_INT("agent.heartbeat_ms", config, agent.heartbeat_ms, "1000", 100, 60000, 0,
            "How often the agent announces itself in Redis."),
    CFG_INT(
        "agent.silent_hold_ms", config, agent.silent_hold_ms, "0", 0, 86400000, 0,
        "How long the agents on Redis keep a silent agent's share out of the shared schedule; 0 = 20 x heartbeat_ms."),
    CFG_ENUM("agent.log_level", config, agent.log_level, "info", level_names, "How much the agent logs."),
    CFG_INT("agent.max_client_pipeline", config, agent.max_client_pipeline, "1024", 1, 1000000, 0,
            "Unfinished commands (waiting ACQUIREs) one client may have before the agent stops reading from it."),
    CFG_STRS(
        "agent.http.listen", config, agent.http.listen, agent.http.nlisten, check_listen,
        "Where the HTTP proxy listens (one address, or a list): 127.0.0.1:8790, [::1]:8790 or unix:/path; none = off."),
    CFG_BOOL("agent.http.allow_remote", config, agent.http.allow_remote, "false",
             "Allow TCP addresses other than loopback in agent.http.listen."),
    CFG_INT("agent.http.max_connections", config, agent.http.max_connections, "1024", 1, 1000000, 0,
            "Most HTTP connections open at once; more are refused."),
    CFG_BYTES("agent.http.max_header_bytes", config, agent.http.max_header_bytes, "32kb", 1024, 65536,
              "Bytes of a request line and headers; more is answered 431 and the connection closed."),
    CFG_BYTES("agent.http.max_body_bytes", config, agent.http.max_body_bytes, "8mb", 1024, 1 << 30,
              "Bytes of a request body; more is answered 413 and the connection closed."),
    CFG_INT("agent.http.header_timeout_ms", config, agent.http.header_timeout_ms, "10000", 100, 3600000, 0,
            "A request whose headers are not complete this long after its first byte is answered 408 and closed."),
    CFG_INT("agent.http.body_timeout_ms", config, agent.http.body_timeout_ms, "30000", 100, 3600000, 0,
            "A request whose body is not complete this long after its headers is answered 408 and closed."),
    CFG_INT("agent.http.idle_timeout_ms", config, agent.http.idle_timeout_ms, "60000", 100, 86400000, 0,
            "A keep-alive connection idle this long between requests, or not reading a response, is closed."),
    CFG_INT("agent.http.drain_timeout_ms", config, agent.http.drain_timeout_ms, "10000", 0, 3600000, 0,
            "On SIGTERM, how long responses in progress may take before their connections are closed."),
    CFG_ENUM("agent.http.mode", config, agent.http.mode, "govern", http_mode_names,
             "govern = every request waits for its slot; observe = forward at once and record what governing would "
             "have done."),
    CFG_LIST("agent.http.clients", config, agent.http.clients, agent.http.nclients, &http_client_schema, 0,
             "Client keys by name, each bound to a tenant and a lane: what a TCP caller presents to spend a key the "
             "proxy injects (deployments.<name>.inject_key)."),
    CFG_INT("agent.http.upstream_timeout_ms", config, agent.http.upstream_timeout_ms, "600000", 100, 86400000, 0,
            "HTTP proxy: the longest one attempt upstream may take, from the send to the last byte (a stream too)."),
    CFG_INT("agent.http.connect_timeout_ms", config, agent.http.connect_timeout_ms, "10000", 10, 600000, 0,
            "HTTP proxy: the longest connecting upstream (TCP and TLS) may take."),
    CFG_INT("agent.http.max_attempts", config, agent.http.max_attempts, "3", 1, 20, 0,
            "HTTP proxy: attempts per request upstream, the first included (retries: 429 not quota, 5xx, "
            "connect errors, within the fleet's retry budget and the request's deadline)."),
    CFG_LIST("deployments", config, deployments, ndeployments, &deployment_schema, CFG_REQUIRED,
             "The governed deployments, by name."),
    CFG_LIST("groups", config, groups, ngroups, &group_schema, 0,
             "Groups of deployments that serve one model: ACQUIRE <group> picks the member."),
    CFG_LIST("budgets", config, budgets, nbudgets, &budget_schema, 0,
             "Budgets in money by name: per day, month and in all, for a tenant, a client key, a deployment or the "
             "fleet."),
};
_Static_assert(sizeof(root_rows) / sizeof(root_rows[0]) <= CFG_MAX_ROWS, "too many rows");

static const cfg_hint root_hints[] = {
    {"redis.", "password",
     "unknown key: a password is never written in the configuration, use password_file or password_env"},
    {NULL, NULL, NULL},
};

static const cfg_schema root_schema = {
    .what = "configuration",
    .rows = root_rows,
    .nrows = sizeof(root_rows) / sizeof(root_rows[0]),
    .size = sizeof(config),
    .finish = root_finish,
    .hints = root_hints,
    .if_empty = "the configuration is empty (at least one deployment is required)",
    .init = root_init,
    .destroy = root_destroy,
};

/* ---- cross-field rules ---- */

/* The token dimensions of each profile (docs/providers.md): a key of a
 * dimension the profile does not have is an error at that key. */
static int profile_check(cfg_ctx *ctx, cfg_entity *ent, const cfg_deployment *d) {
    static const char *const combined[] = {"tpm", "burst.tokens", "refund.tokens", "tokens_rule", NULL};
    static const char *const split[] = {
        "itpm", "otpm", "burst.input_tokens", "burst.output_tokens", "refund.input_tokens", "refund.output_tokens",
        NULL};
    const char *const *bad = NULL;
    const char *has = "";
    if (d->style == CONFIG_STYLE_AZURE || d->style == CONFIG_STYLE_OPENAI || d->style == CONFIG_STYLE_BEDROCK) {
        bad = split;
        has = "combined tokens (tpm): input and output are not limited apart";
    } else if (d->style == CONFIG_STYLE_ANTHROPIC) {
        bad = combined;
        has = "input and output tokens apart (itpm, otpm), no combined tpm";
    } else if (d->style == CONFIG_STYLE_GEMINI) {
        static const char *const gemini_bad[] = {"tpm",  "burst.tokens",        "refund.tokens",        "tokens_rule",
                                                 "otpm", "burst.output_tokens", "refund.output_tokens", NULL};
        bad = gemini_bad;
        has = "input tokens only (itpm: its \"Tokens per minute (input)\")";
    }
    for (int i = 0; bad && bad[i]; i++)
        if (cfg_entity_seen(ent, bad[i]))
            return cfg_entity_fail(ctx, ent, bad[i],
                                   "style %s has %s; use style custom to configure any dimension (docs/providers.md)",
                                   config_style_name(d->style), has);
    if (cfg_entity_seen(ent, "output_burndown") && d->style != CONFIG_STYLE_BEDROCK && d->style != CONFIG_STYLE_CUSTOM)
        return cfg_entity_fail(ctx, ent, "output_burndown", "applies to styles bedrock and custom only (style is %s)",
                               config_style_name(d->style));
    if (cfg_entity_seen(ent, "output_burndown") && d->tpm <= 0)
        return cfg_entity_fail(ctx, ent, "output_burndown",
                               "counts output tokens in the combined tokens (tpm), which this deployment does not "
                               "limit");
    /* Bedrock's count is input + output x burndown; OpenAI's max rule
     * would charge something else at admission than the settle counts. */
    if (d->tokens_rule == CONFIG_TOKENS_MAX &&
        (cfg_entity_seen(ent, "output_burndown") || d->style == CONFIG_STYLE_BEDROCK))
        return cfg_entity_fail(ctx, ent, "tokens_rule",
                               "max cannot go with an output burndown (input + output x burndown is a sum)");
    return 0;
}

/* Bedrock's models whose output tokens burn down the tokens-per-minute
 * quota at 5x ("The burndown rate for the following models is 5x for
 * output tokens", docs.aws.amazon.com/bedrock/latest/userguide/
 * quotas-token-burndown.html), as parts of their model IDs
 * (anthropic.claude-sonnet-4-20250514-v1:0, us.anthropic.claude-opus-4-1-...). */
static const char *const burndown_5x_models[] = {"claude-3-7-sonnet", "claude-sonnet-4", "claude-opus-4", NULL};

static int name_has(const char *name, const char *part) {
    size_t n = strlen(part);
    for (const char *p = name; *p; p++)
        if (!strncasecmp(p, part, n)) return 1;
    return 0;
}

/* Bedrock's burndown rate for d: 5 when its name or an alias names one of
 * the 5x models, else 1 (AWS: "all other models" burn down at 1). */
static double default_burndown(const cfg_deployment *d) {
    for (size_t k = 0; burndown_5x_models[k]; k++) {
        if (name_has(d->name, burndown_5x_models[k])) return 5;
        for (size_t i = 0; i < d->naliases; i++)
            if (name_has(d->aliases[i], burndown_5x_models[k])) return 5;
    }
    return 1;
}

/* A price per million tokens as 1e-12 of the currency per token: exact
 * for prices of up to six decimals (what providers publish has four). */
static int price_units(cfg_ctx *ctx, cfg_entity *ent, const char *key, double per_million, long long *out) {
    double p = per_million * 1e6;
    *out = llround(p);
    if (fabs(p - (double)*out) > 1e-6 * (p > 1 ? p : 1))
        return cfg_entity_fail(ctx, ent, key, "at most six decimals, got %.10g", per_million);
    return 0;
}

static int price_finish(cfg_ctx *ctx, cfg_entity *ent, cfg_deployment *d) {
    static const char *const keys[] = {"price.input", "price.output", "price.cache_read", "price.cache_write"};
    int any = 0;
    for (size_t i = 0; i < 4; i++) any |= cfg_entity_seen(ent, keys[i]);
    if (any && !d->price.currency[0])
        return cfg_entity_fail(ctx, ent, "price", "needs price.currency (an ISO 4217 code: USD, EUR, ...)");
    if (!any && d->price.currency[0])
        return cfg_entity_fail(ctx, ent, "price.currency",
                               "a currency without a price: give price.input and "
                               "price.output");
    if (!cfg_entity_seen(ent, "price.cache_read")) d->price.cache_read = d->price.input;
    if (!cfg_entity_seen(ent, "price.cache_write")) d->price.cache_write = d->price.input;
    if (price_units(ctx, ent, keys[0], d->price.input, &d->price.input_p) != 0 ||
        price_units(ctx, ent, keys[1], d->price.output, &d->price.output_p) != 0 ||
        price_units(ctx, ent, keys[2], d->price.cache_read, &d->price.cache_read_p) != 0 ||
        price_units(ctx, ent, keys[3], d->price.cache_write, &d->price.cache_write_p) != 0)
        return -1;
    return 0;
}

/* A budget in the currency as 1e-6 of it, exact to the micro-unit. */
static int budget_units(cfg_ctx *ctx, cfg_entity *ent, const char *key, double v, long long *out) {
    double u = v * 1e6;
    *out = llround(u);
    if (fabs(u - (double)*out) > 1e-6 * (u > 1 ? u : 1))
        return cfg_entity_fail(ctx, ent, key, "at most six decimals, got %.10g", v);
    return 0;
}

static int budget_finish(cfg_ctx *ctx, cfg_entity *ent) {
    cfg_budget *b = ent->base;
    if (b->daily <= 0 && b->monthly <= 0 && b->total <= 0)
        return cfg_entity_fail(ctx, ent, "daily", "a budget needs at least one of daily, monthly and total above 0");
    if (budget_units(ctx, ent, "daily", b->daily, &b->daily_u) != 0 ||
        budget_units(ctx, ent, "monthly", b->monthly, &b->monthly_u) != 0 ||
        budget_units(ctx, ent, "total", b->total, &b->total_u) != 0)
        return -1;
    return 0;
}

/* 1 when a request to d may draw from budget b (its deployment scope):
 * none, d's own name, or a group d is a member of. */
static int budget_covers(const config *cfg, const cfg_budget *b, const cfg_deployment *d) {
    if (!b->deployment[0] || !strcmp(b->deployment, d->name)) return 1;
    const struct config_group *g = config_group(cfg, b->deployment);
    for (size_t i = 0; g && i < g->nmembers; i++)
        if (!strcmp(g->members[i], d->name)) return 1;
    return 0;
}

static int budgets_finish(cfg_ctx *ctx, config *cfg) {
    for (size_t i = 0; i < cfg->nbudgets; i++) {
        cfg_budget *b = &cfg->budgets[i];
        if (b->deployment[0] && !config_deployment(cfg, b->deployment) && !config_group(cfg, b->deployment))
            return cfg_fail_plain(ctx, b->line, "key 'budgets.%s.deployment': '%s' is not a deployment or a group",
                                  b->name, b->deployment);
        if (b->client[0]) {
            size_t k = 0;
            while (k < cfg->agent.http.nclients && strcmp(cfg->agent.http.clients[k].name, b->client)) k++;
            if (k == cfg->agent.http.nclients)
                return cfg_fail_plain(ctx, b->line,
                                      "key 'budgets.%s.client': '%s' is not a client key "
                                      "(agent.http.clients)",
                                      b->name, b->client);
        }
        for (size_t j = 0; j < cfg->ndeployments; j++) {
            const cfg_deployment *d = &cfg->deployments[j];
            if (!budget_covers(cfg, b, d)) continue;
            if (!d->price.currency[0])
                return cfg_fail_plain(ctx, b->line,
                                      "key 'budgets.%s': it applies to deployment '%s', which has no price (give "
                                      "deployments.%s.price, or scope the budget with deployment:)",
                                      b->name, d->name, d->name);
            if (strcmp(d->price.currency, b->currency))
                return cfg_fail_plain(ctx, b->line,
                                      "key 'budgets.%s.currency': %s, but deployment '%s' is priced in %s", b->name,
                                      b->currency, d->name, d->price.currency);
        }
        /* A request to a group with a member the budget covers is reserved
         * at the group's dearest member's price (engine_budget.c,
         * price_for): every member needs one, in the budget's currency, or
         * every such request would be refused. */
        for (size_t k = 0; k < cfg->ngroups; k++) {
            const struct config_group *g = &cfg->groups[k];
            const char *via = NULL;
            for (size_t m = 0; m < g->nmembers && !via; m++) {
                const cfg_deployment *d = config_deployment(cfg, g->members[m]);
                if (d && budget_covers(cfg, b, d)) via = d->name;
            }
            for (size_t m = 0; via && m < g->nmembers; m++) {
                const cfg_deployment *d = config_deployment(cfg, g->members[m]);
                if (!d) continue;
                if (!d->price.currency[0] || strcmp(d->price.currency, b->currency))
                    return cfg_fail_plain(ctx, b->line,
                                          "key 'budgets.%s': it applies to group '%s' through member '%s', so a "
                                          "request to the group is reserved at its dearest member's price; member "
                                          "'%s' %s%s (give deployments.%s.price in %s)",
                                          b->name, g->name, via, d->name,
                                          d->price.currency[0] ? "is priced in " : "has no price", d->price.currency,
                                          d->name, b->currency);
            }
        }
    }
    return 0;
}

/* Set by config_load_flags() for the one load of this thread: the HTTP
 * proxy's secrets (inject_key's provider key, the client keys) are not
 * read, for tools that never serve the proxy (sluice status, top, run,
 * sim): an operator's shell need not hold the provider's key. */
static _Thread_local int load_skip_proxy_secrets;

static int deployment_finish(cfg_ctx *ctx, cfg_entity *ent) {
    cfg_deployment *d = ent->base;
    if (profile_check(ctx, ent, d) != 0) return -1;
    if (d->inject_key) {
        if (!d->api_key_env[0])
            return cfg_entity_fail(ctx, ent, "inject_key", "needs api_key_env: the variable holding the key to inject");
        if (!load_skip_proxy_secrets &&
            read_secret(ctx, ent, "api_key_env", d->api_key_env, NULL, "", &d->api_key_) != 0)
            return -1;
    }
    if (!cfg_entity_seen(ent, "tokens_rule") && d->style == CONFIG_STYLE_OPENAI) d->tokens_rule = CONFIG_TOKENS_MAX;
    /* Anthropic: "OTPM is calculated based on the number of output tokens
     * generated ... max_tokens does not factor into OTPM"
     * (docs.claude.com rate limits, docs/providers.md). */
    if (!cfg_entity_seen(ent, "output_charge") && d->style == CONFIG_STYLE_ANTHROPIC)
        d->output_charge = CONFIG_OUTPUT_EXPECTED;
    if (!cfg_entity_seen(ent, "daily_reset") && d->style == CONFIG_STYLE_GEMINI) {
        /* Gemini: "Requests per day (RPD) quotas reset at midnight Pacific
         * time" (ai.google.dev/gemini-api/docs/rate-limits). */
        char *la = cfg_strndup("America/Los_Angeles", 19);
        if (!la) return cfg_entity_fail(ctx, ent, "daily_reset", "out of memory");
        free(d->daily_reset);
        d->daily_reset = la;
    }
    if (d->daily_reset[0]) {
        tz_zone *z = NULL;
        char why[256];
        if (tz_load(NULL, d->daily_reset, &z, why, sizeof(why)) != 0)
            return cfg_entity_fail(ctx, ent, "daily_reset", "%s", why);
        tz_free(z);
    }
    if (price_finish(ctx, ent, d) != 0) return -1;
    if (!cfg_entity_seen(ent, "output_burndown"))
        d->output_burndown = d->style == CONFIG_STYLE_BEDROCK ? default_burndown(d) : 1;
    /* Bedrock reserves input + max_tokens and settles to what the request
     * used, up or down: its tokens are corrected at the end. */
    if (d->style == CONFIG_STYLE_BEDROCK && !cfg_entity_seen(ent, "refund") && !cfg_entity_seen(ent, "refund.tokens"))
        d->refunds.tokens = 1;
    if (!cfg_entity_seen(ent, "burst.requests")) d->burst.requests = d->rpm / 60 > 1 ? d->rpm / 60 : 1;
    if (!cfg_entity_seen(ent, "burst.tokens")) d->burst.tokens = d->tpm / 60 > 1 ? d->tpm / 60 : 1;
    if (!cfg_entity_seen(ent, "burst.input_tokens")) d->burst.input_tokens = d->itpm / 60 > 1 ? d->itpm / 60 : 1;
    if (!cfg_entity_seen(ent, "burst.output_tokens")) d->burst.output_tokens = d->otpm / 60 > 1 ? d->otpm / 60 : 1;
    /* refund: true|false overrides every token dimension; refund.<dim> wins
     * over it. */
    if (cfg_entity_seen(ent, "refund")) {
        if (!cfg_entity_seen(ent, "refund.tokens")) d->refunds.tokens = d->refund;
        if (!cfg_entity_seen(ent, "refund.input_tokens")) d->refunds.input_tokens = d->refund;
        if (!cfg_entity_seen(ent, "refund.output_tokens")) d->refunds.output_tokens = d->refund;
    }
    /* A dimension corrected at the end gives back what a request did not
     * use when it ends; a slot granted seconds ahead was priced at the
     * full estimate before that news, and the provider's bucket refills to
     * its cap meanwhile: grant just in time. */
    if (!cfg_entity_seen(ent, "horizon_ms")) {
        int corrected = (d->tpm > 0 && d->refunds.tokens) || (d->itpm > 0 && d->refunds.input_tokens) ||
                        (d->otpm > 0 && d->refunds.output_tokens);
        d->horizon_ms = corrected ? 250 : -1;
    }
    for (size_t i = 0; i < d->nlanes; i++) {
        const cfg_lane *l = &d->lanes[i];
        double sum = 0;
        for (size_t j = 0; j < d->nlanes; j++)
            if (d->lanes[j].priority < l->priority) sum += d->lanes[j].headroom;
        if (sum >= 1)
            return cfg_fail_plain(ctx, l->line,
                                  "key 'deployments.%s.lanes.%s': the headroom of the lanes above it adds up to %g: "
                                  "it must stay below 1",
                                  d->name, l->name, sum);
    }
    if (d->default_lane[0] && !config_lane(d, d->default_lane))
        return cfg_entity_fail(ctx, ent, "default_lane",
                               d->nlanes ? "names no lane of this deployment: '%s'"
                                         : "'%s' given but the deployment has no lanes",
                               d->default_lane);
    if (d->api_version[0] && d->style != CONFIG_STYLE_AZURE && d->style != CONFIG_STYLE_ANTHROPIC)
        return cfg_entity_fail(ctx, ent, "api_version", "applies to styles azure and anthropic only (style is %s)",
                               config_style_name(d->style));
    return 0;
}

static void replace_str(char **dst, char *src) {
    free(*dst);
    *dst = src;
}

/* Never echoes the URL: it might hold a password. */
static int parse_redis_url(cfg_ctx *ctx, cfg_entity *ent, config *cfg, char **user) {
    const char *url = cfg->redis.url;
    config_redis *r = &cfg->redis;
    *user = NULL;
    if (strpbrk(url, " \t")) return cfg_entity_fail(ctx, ent, "redis.url", "must not contain spaces");
    if (!strncmp(url, "unix://", 7)) {
        const char *path = url + 7;
        if (path[0] != '/')
            return cfg_entity_fail(ctx, ent, "redis.url",
                                   "a unix:// URL needs an absolute path (unix:///path/to/redis.sock)");
        if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return cfg_entity_fail(ctx, ent, "redis.url", "the socket path is too long for a UNIX socket");
        if (strchr(path, '?')) return cfg_entity_fail(ctx, ent, "redis.url", "query parameters are not supported");
        char *p = cfg_strndup(path, strlen(path)), *h = cfg_strndup("", 0);
        if (!p || !h) {
            free(p);
            free(h);
            return cfg_entity_fail(ctx, ent, "redis.url", "out of memory");
        }
        replace_str(&r->unix_path, p);
        replace_str(&r->host, h);
        r->port = 0;
        r->db = 0;
        return 0;
    }
    if (!strncmp(url, "rediss://", 9))
        return cfg_entity_fail(ctx, ent, "redis.url", "TLS (rediss://) is not supported by this build");
    if (strncmp(url, "redis://", 8))
        return cfg_entity_fail(ctx, ent, "redis.url", "must start with redis:// or unix://");
    const char *auth = url + 8;
    const char *slash = strchr(auth, '/');
    const char *end = slash ? slash : auth + strlen(auth);
    const char *at = NULL;
    for (const char *p = auth; p < end; p++)
        if (*p == '@') at = p;
    const char *hostport = auth;
    if (at) {
        if (memchr(auth, ':', (size_t)(at - auth)))
            return cfg_entity_fail(
                ctx, ent, "redis.url",
                "a password in the URL is not allowed: use redis.password_file or redis.password_env");
        if (at == auth) return cfg_entity_fail(ctx, ent, "redis.url", "the user name before '@' is empty");
        *user = cfg_strndup(auth, (size_t)(at - auth));
        if (!*user) return cfg_entity_fail(ctx, ent, "redis.url", "out of memory");
        hostport = at + 1;
    }
    if (strchr(url, '?')) return cfg_entity_fail(ctx, ent, "redis.url", "query parameters are not supported");
    const char *hs, *he, *portp = NULL;
    if (hostport[0] == '[') {
        const char *close = memchr(hostport, ']', (size_t)(end - hostport));
        if (!close) return cfg_entity_fail(ctx, ent, "redis.url", "unterminated '[' in the host");
        hs = hostport + 1;
        he = close;
        if (close + 1 < end) {
            if (close[1] != ':') return cfg_entity_fail(ctx, ent, "redis.url", "junk after ']' in the host");
            portp = close + 2;
        }
    } else {
        hs = hostport;
        he = memchr(hostport, ':', (size_t)(end - hostport));
        if (he) portp = he + 1;
        else he = end;
    }
    if (he == hs) return cfg_entity_fail(ctx, ent, "redis.url", "the host is empty");
    long long port = 6379, db = 0;
    if (portp && (cfg_parse_decimal(portp, (size_t)(end - portp), &port) != 1 || port < 1 || port > 65535))
        return cfg_entity_fail(ctx, ent, "redis.url", "the port must be a number in 1..65535");
    if (slash && slash[1] && (cfg_parse_decimal(slash + 1, strlen(slash + 1), &db) != 1 || db < 0 || db > INT_MAX))
        return cfg_entity_fail(ctx, ent, "redis.url", "the database after '/' must be a non-negative integer");
    char *h = cfg_strndup(hs, (size_t)(he - hs)), *u = cfg_strndup("", 0);
    if (!h || !u) {
        free(h);
        free(u);
        return cfg_entity_fail(ctx, ent, "redis.url", "out of memory");
    }
    replace_str(&r->host, h);
    replace_str(&r->unix_path, u);
    r->port = (int)port;
    r->db = (int)db;
    return 0;
}

/* Reads the password file: a regular file of at most CFG_SECRET_MAX bytes,
 * opened without blocking so that a FIFO or device cannot hang a load. */
static int read_secret_file(cfg_ctx *ctx, cfg_entity *ent, const char *key, const char *file, char **out) {
    char full[PATH_MAX];
    *out = NULL;
    if (file[0] != '/' && cfg_basedir(ctx)) {
        if ((size_t)snprintf(full, sizeof(full), "%s/%s", cfg_basedir(ctx), file) >= sizeof(full))
            return cfg_entity_fail(ctx, ent, key, "the path is too long");
        file = full;
    }
    char msg[128];
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        cfg_errno_text(errno, msg, sizeof(msg));
        return cfg_entity_fail(ctx, ent, key, "cannot read \"%s\": %s", file, msg);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cfg_entity_fail(ctx, ent, key, "\"%s\" is not a regular file", file);
    }
    char *buf = malloc(CFG_SECRET_MAX + 1);
    if (!buf) {
        close(fd);
        return cfg_entity_fail(ctx, ent, key, "out of memory");
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, CFG_SECRET_MAX + 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            cfg_errno_text(errno, msg, sizeof(msg));
            close(fd);
            free(buf);
            return cfg_entity_fail(ctx, ent, key, "cannot read \"%s\": %s", file, msg);
        }
        if (n == 0) break;
        len += (size_t)n;
        if (len > CFG_SECRET_MAX) break;
    }
    close(fd);
    const char *problem = NULL;
    if (len > CFG_SECRET_MAX) problem = "is larger than 4096 bytes";
    while (!problem && len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) len--;
    if (!problem && len == 0) problem = "is empty";
    if (!problem && (memchr(buf, '\n', len) || memchr(buf, '\r', len) || memchr(buf, '\0', len)))
        problem = "must hold the secret on one line";
    if (problem) {
        memset(buf, 0, CFG_SECRET_MAX + 1);
        free(buf);
        return cfg_entity_fail(ctx, ent, key, "\"%s\" %s", file, problem);
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

static void wipe_free(char *s) {
    if (!s) return;
    volatile char *v = s;
    while (*v) *v++ = '\0';
    free(s);
}

/* A secret from the environment variable env or the file file (exactly
 * one is non-empty), failing at env_key or file_key. */
static int read_secret(cfg_ctx *ctx, cfg_entity *ent, const char *env_key, const char *env, const char *file_key,
                       const char *file, char **out) {
    *out = NULL;
    if (file && file[0]) return read_secret_file(ctx, ent, file_key, file, out);
    const char *v = getenv(env);
    if (!v) return cfg_entity_fail(ctx, ent, env_key, "environment variable %s is not set", env);
    if (!v[0]) return cfg_entity_fail(ctx, ent, env_key, "environment variable %s is empty", env);
    if (strlen(v) > CFG_SECRET_MAX)
        return cfg_entity_fail(ctx, ent, env_key, "environment variable %s is larger than %d bytes", env,
                               CFG_SECRET_MAX);
    if (strchr(v, '\n') || strchr(v, '\r'))
        return cfg_entity_fail(ctx, ent, env_key, "environment variable %s must hold the secret on one line", env);
    *out = cfg_strndup(v, strlen(v));
    return *out ? 0 : cfg_entity_fail(ctx, ent, env_key, "out of memory");
}

/* The shortest client key: a key anyone could guess gates nothing. */
#define CONFIG_CLIENT_KEY_MIN 16

static int client_finish(cfg_ctx *ctx, cfg_entity *ent) {
    cfg_http_client *c = ent->base;
    if (!c->key_env[0] == !c->key_file[0])
        return cfg_entity_fail(ctx, ent, c->key_env[0] ? "key_file" : "key_env",
                               "give either key_env or key_file (exactly one)");
    if (load_skip_proxy_secrets) return 0;
    if (read_secret(ctx, ent, "key_env", c->key_env, "key_file", c->key_file, &c->key_) != 0) return -1;
    c->keylen_ = strlen(c->key_);
    if (c->keylen_ < CONFIG_CLIENT_KEY_MIN)
        return cfg_entity_fail(ctx, ent, c->key_env[0] ? "key_env" : "key_file",
                               "the key has %zu bytes; a client key needs at least %d", c->keylen_,
                               CONFIG_CLIENT_KEY_MIN);
    return 0;
}

static int by_name_cmp(const void *a, const void *b) {
    const struct config_deployment *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int by_name_key(const void *key, const void *elem) {
    const struct config_deployment *const *d = elem;
    return strcmp(key, (*d)->name);
}

/* One entry of the model index: a deployment's or a group's name or alias. */
struct config_model_entry {
    const char *name;
    const struct config_deployment *d;
    const struct config_group *g;
    int alias;
};

static int model_cmp(const void *a, const void *b) {
    const struct config_model_entry *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static int model_key(const void *key, const void *elem) {
    return strcmp(key, ((const struct config_model_entry *)elem)->name);
}

static const char *model_owner(const struct config_model_entry *m, char *buf, size_t n) {
    snprintf(buf, n, "%s '%s'", m->d ? "deployment" : "group", m->d ? m->d->name : m->g->name);
    return buf;
}

/* The index config_model() searches: every deployment's and group's name
 * and aliases, each name at most once (an alias may not repeat a name or
 * another alias). */
static int build_models(cfg_ctx *ctx, config *cfg) {
    size_t n = cfg->ndeployments + cfg->ngroups;
    for (size_t i = 0; i < cfg->ndeployments; i++) n += cfg->deployments[i].naliases;
    for (size_t i = 0; i < cfg->ngroups; i++) n += cfg->groups[i].naliases;
    struct config_model_entry *m = calloc(n, sizeof(*m));
    if (!m) return cfg_fail_plain(ctx, 1, "out of memory");
    cfg->models_ = m;
    size_t k = 0;
    for (size_t i = 0; i < cfg->ndeployments; i++) {
        const struct config_deployment *d = &cfg->deployments[i];
        m[k++] = (struct config_model_entry){d->name, d, NULL, 0};
        for (size_t j = 0; j < d->naliases; j++) m[k++] = (struct config_model_entry){d->aliases[j], d, NULL, 1};
    }
    for (size_t i = 0; i < cfg->ngroups; i++) {
        const struct config_group *g = &cfg->groups[i];
        m[k++] = (struct config_model_entry){g->name, NULL, g, 0};
        for (size_t j = 0; j < g->naliases; j++) m[k++] = (struct config_model_entry){g->aliases[j], NULL, g, 1};
    }
    cfg->nmodels_ = k;
    qsort(m, k, sizeof(*m), model_cmp);
    for (size_t i = 1; i < k; i++) {
        if (strcmp(m[i - 1].name, m[i].name)) continue;
        /* Report it on the alias (a name clash between a deployment and a
         * group is reported before this), the later one of two aliases. */
        const struct config_model_entry *a = &m[i], *b = &m[i - 1];
        int la = a->d ? a->d->line : a->g->line, lb = b->d ? b->d->line : b->g->line;
        if (!a->alias || (b->alias && lb > la)) {
            a = &m[i - 1];
            b = &m[i];
            la = lb;
        }
        char other[CONFIG_NAME_MAX + 32];
        int line = la;
        return cfg_fail_plain(ctx, line, "key '%s.%s.aliases': '%s' already names %s", a->d ? "deployments" : "groups",
                              a->d ? a->d->name : a->g->name, a->name, model_owner(b, other, sizeof(other)));
    }
    return 0;
}

/* Parses agent.http.listen: each entry once, loopback unless allow_remote,
 * a UNIX socket path not the RESP socket's. */
static int http_finish(cfg_ctx *ctx, cfg_entity *ent, config *cfg) {
    config_http *h = &cfg->agent.http;
    if (!h->nlisten) return 0;
    h->listeners = calloc(h->nlisten, sizeof(*h->listeners));
    if (!h->listeners) return cfg_fail_plain(ctx, 1, "out of memory");
    for (size_t i = 0; i < h->nlisten; i++) {
        char why[160];
        config_listen *l = &h->listeners[i];
        if (parse_listen(h->listen[i], l, why, sizeof(why)) != 0)
            return cfg_entity_fail(ctx, ent, "agent.http.listen", "item %zu %s", i + 1, why);
        if (l->kind == CONFIG_LISTEN_TCP && !l->loopback && !h->allow_remote)
            return cfg_entity_fail(ctx, ent, "agent.http.listen",
                                   "item %zu (%s) is not a loopback address: any host that can reach it could "
                                   "spend the quota; set agent.http.allow_remote: true to serve other hosts "
                                   "(docs/security.md)",
                                   i + 1, h->listen[i]);
        if (l->kind == CONFIG_LISTEN_UNIX && !strcmp(l->path, cfg->agent.socket))
            return cfg_entity_fail(ctx, ent, "agent.http.listen", "item %zu (%s) is agent.socket, the RESP socket",
                                   i + 1, h->listen[i]);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(h->listen[j], h->listen[i]))
                return cfg_entity_fail(ctx, ent, "agent.http.listen", "item %zu (%s) is given twice", i + 1,
                                       h->listen[i]);
    }
    return 0;
}

static int root_finish(cfg_ctx *ctx, cfg_entity *ent) {
    config *cfg = ent->base;
    config_redis *r = &cfg->redis;
    char *user = NULL;
    if (parse_redis_url(ctx, ent, cfg, &user) != 0) {
        free(user); /* set before a later part of the URL failed */
        return -1;
    }
    if (user) {
        if (r->username[0]) {
            free(user);
            return cfg_entity_fail(ctx, ent, "redis.username", "the user is already given in redis.url");
        }
        replace_str(&r->username, user);
    }
    if (r->ncluster && r->db != 0)
        return cfg_entity_fail(ctx, ent, "redis.url",
                               "Redis Cluster has database 0 only: remove the database after '/' (redis.cluster)");
    if (r->ncluster && (r->sentinel_master[0] || r->nsentinels))
        return cfg_entity_fail(ctx, ent, "redis.sentinel", "give either redis.cluster or redis.sentinel, not both");
    if (!r->sentinel_master[0] != !r->nsentinels)
        return cfg_entity_fail(ctx, ent, r->nsentinels ? "redis.sentinel.master" : "redis.sentinel.nodes",
                               "Sentinel needs both redis.sentinel.master and redis.sentinel.nodes");
    if (r->password_file[0] && r->password_env[0])
        return cfg_entity_fail(ctx, ent, "redis.password_env",
                               "give either redis.password_file or redis.password_env, not both");
    char *secret = NULL;
    if (r->password_file[0]) {
        if (read_secret_file(ctx, ent, "redis.password_file", r->password_file, &secret) != 0) return -1;
    } else if (r->password_env[0]) {
        const char *v = getenv(r->password_env);
        if (!v)
            return cfg_entity_fail(ctx, ent, "redis.password_env", "environment variable %s is not set",
                                   r->password_env);
        if (!v[0])
            return cfg_entity_fail(ctx, ent, "redis.password_env", "environment variable %s is empty", r->password_env);
        secret = cfg_strndup(v, strlen(v));
        if (!secret) return cfg_entity_fail(ctx, ent, "redis.password_env", "out of memory");
    }
    if (secret) {
        wipe_free(r->password);
        r->password = secret;
    }
    if (r->username[0] && !r->password[0])
        return cfg_entity_fail(ctx, ent, "redis.username",
                               "a user needs a password: set redis.password_file or redis.password_env");

    config_agent *a = &cfg->agent;
    if (a->metrics[0]) {
        const char *h;
        size_t hl;
        if (split_hostport(a->metrics, &h, &hl, &a->metrics_port) == 0) {
            char *mh = cfg_strndup(h, hl);
            if (!mh) return cfg_entity_fail(ctx, ent, "agent.metrics", "out of memory");
            replace_str(&a->metrics_host, mh);
        }
    }
    if (http_finish(ctx, ent, cfg) != 0) return -1;
    for (size_t i = 0; i < a->http.nclients; i++)
        for (size_t j = 0; j < i; j++)
            if (a->http.clients[i].keylen_ > 0 && a->http.clients[i].keylen_ == a->http.clients[j].keylen_ &&
                !memcmp(a->http.clients[i].key_, a->http.clients[j].key_, a->http.clients[i].keylen_))
                return cfg_fail_plain(ctx, a->http.clients[i].line,
                                      "key 'agent.http.clients.%s': the same key as client '%s' (each client needs "
                                      "its own key, or the tenant it counts as is ambiguous)",
                                      a->http.clients[i].name, a->http.clients[j].name);
    if (cfg->ndeployments == 0) return cfg_entity_fail(ctx, ent, "deployments", "at least one deployment is required");
    /* The index config_deployment() searches. */
    cfg->by_name_ = malloc(cfg->ndeployments * sizeof(*cfg->by_name_));
    if (!cfg->by_name_) return cfg_fail_plain(ctx, 1, "out of memory");
    for (size_t i = 0; i < cfg->ndeployments; i++) cfg->by_name_[i] = &cfg->deployments[i];
    qsort(cfg->by_name_, cfg->ndeployments, sizeof(*cfg->by_name_), by_name_cmp);
    for (size_t i = 0; i < cfg->ngroups; i++) {
        cfg_group *g = &cfg->groups[i];
        char key[CONFIG_NAME_MAX + 32];
        snprintf(key, sizeof(key), "groups.%s.members", g->name);
        if (config_deployment(cfg, g->name))
            return cfg_fail_plain(ctx, g->line, "key 'groups.%s': a deployment has the same name", g->name);
        if (!g->nmembers) return cfg_fail_plain(ctx, g->line, "key '%s': at least one member is required", key);
        if (g->nmembers > CONFIG_GROUP_MAX)
            return cfg_fail_plain(ctx, g->line, "key '%s': at most %d members", key, CONFIG_GROUP_MAX);
        g->members_ = calloc(g->nmembers, sizeof(*g->members_));
        if (!g->members_) return cfg_fail_plain(ctx, g->line, "out of memory");
        for (size_t j = 0; j < g->nmembers; j++) {
            const struct config_deployment *m = config_deployment(cfg, g->members[j]);
            if (!m) return cfg_fail_plain(ctx, g->line, "key '%s': '%s' is not a deployment", key, g->members[j]);
            for (size_t k = 0; k < j; k++)
                if (g->members_[k] == m)
                    return cfg_fail_plain(ctx, g->line, "key '%s': '%s' is listed twice", key, g->members[j]);
            g->members_[j] = m;
            if (!m->group_) ((struct config_deployment *)m)->group_ = g;
            if (m->inject_key != g->members_[0]->inject_key)
                return cfg_fail_plain(ctx, g->line,
                                      "key '%s': '%s' has inject_key %s but '%s' has %s: the HTTP proxy must treat "
                                      "a caller's credentials alike for every member",
                                      key, m->name, m->inject_key ? "true" : "false", g->members_[0]->name,
                                      g->members_[0]->inject_key ? "true" : "false");
        }
        for (size_t j = 0; j < g->ntenants; j++) {
            const char *tag = g->tenants[j].tag;
            size_t k = 0;
            while (tag[0] && k < g->nmembers && !config_has_tag(g->members_[k], tag)) k++;
            if (tag[0] && k == g->nmembers)
                return cfg_fail_plain(ctx, g->tenants[j].line,
                                      "key 'groups.%s.tenants.%s.tag': no member of the group has tag '%s'", g->name,
                                      g->tenants[j].name, tag);
        }
    }
    if (budgets_finish(ctx, cfg) != 0) return -1;
    return build_models(ctx, cfg);
}

const struct config_group *config_group(const config *cfg, const char *name) {
    for (size_t i = 0; cfg && name && i < cfg->ngroups; i++)
        if (!strcmp(cfg->groups[i].name, name)) return &cfg->groups[i];
    return NULL;
}

int config_has_tag(const struct config_deployment *d, const char *tag) {
    if (!tag || !tag[0]) return 1;
    for (size_t i = 0; d && i < d->ntags; i++)
        if (!strcmp(d->tags[i], tag)) return 1;
    return 0;
}

const char *config_group_tenant_tag(const struct config_group *g, const char *tenant) {
    for (size_t i = 0; g && tenant && i < g->ntenants; i++)
        if (!strcmp(g->tenants[i].name, tenant)) return g->tenants[i].tag;
    return "";
}

/* Allocates empty strings for the fields that are not rows, so that every
 * char * of a config is non-NULL, and names the source. */
static int root_init(void *base, const char *name) {
    config *cfg = base;
    char **fields[] = {&cfg->redis.host, &cfg->redis.unix_path, &cfg->redis.password, &cfg->agent.metrics_host};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        *fields[i] = calloc(1, 1);
        if (!*fields[i]) return -1;
    }
    cfg->source = cfg_strndup(name, strlen(name));
    return cfg->source ? 0 : -1;
}

static void root_destroy(void *base) { config_free(base); }

/* ---- the API ---- */

int config_load_string(const char *name, const char *text, size_t len, config **out, char *err, size_t errlen) {
    void *cfg;
    int rc = cfg_load(&root_schema, name ? name : "<string>", NULL, text, len, &cfg, err, errlen);
    *out = cfg;
    return rc;
}

int config_load(const char *path, config **out, char *err, size_t errlen) {
    void *cfg;
    int rc = cfg_load_file(&root_schema, path, &cfg, err, errlen);
    *out = cfg;
    return rc;
}

int config_load_flags(const char *path, unsigned flags, config **out, char *err, size_t errlen) {
    load_skip_proxy_secrets = (flags & CONFIG_LOAD_NO_PROXY_SECRETS) != 0;
    int rc = config_load(path, out, err, errlen);
    load_skip_proxy_secrets = 0;
    return rc;
}

int config_load_string_flags(const char *name, const char *text, size_t len, unsigned flags, config **out, char *err,
                             size_t errlen) {
    load_skip_proxy_secrets = (flags & CONFIG_LOAD_NO_PROXY_SECRETS) != 0;
    int rc = config_load_string(name, text, len, out, err, errlen);
    load_skip_proxy_secrets = 0;
    return rc;
}

void config_free(config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->ngroups; i++) free(cfg->groups[i].members_);
    for (size_t i = 0; i < cfg->ndeployments; i++) wipe_free(cfg->deployments[i].api_key_);
    for (size_t i = 0; i < cfg->agent.http.nclients; i++) wipe_free(cfg->agent.http.clients[i].key_);
    cfg_free_rows(&root_schema, cfg);
    wipe_free(cfg->redis.password);
    free(cfg->redis.host);
    free(cfg->redis.unix_path);
    free(cfg->agent.metrics_host);
    free(cfg->agent.http.listeners);
    free(cfg->models_);
    free(cfg->by_name_);
    free(cfg->source);
    free(cfg);
}

const struct config_http_client *config_http_client_by_key(const config *cfg, const char *key, size_t len) {
    const struct config_http_client *hit = NULL;
    for (size_t i = 0; cfg && key && i < cfg->agent.http.nclients; i++) {
        const struct config_http_client *c = &cfg->agent.http.clients[i];
        /* Every byte of every key is compared, whatever matched. */
        unsigned char diff = (unsigned char)(c->keylen_ != len);
        for (size_t k = 0; k < c->keylen_; k++) diff |= (unsigned char)(c->key_[k] ^ (k < len ? key[k] : 0));
        if (!diff && !hit) hit = c;
    }
    return hit;
}

const struct config_deployment *config_deployment(const config *cfg, const char *name) {
    if (!cfg || !name || !cfg->ndeployments) return NULL;
    const struct config_deployment *const *hit =
        bsearch(name, cfg->by_name_, cfg->ndeployments, sizeof(*cfg->by_name_), by_name_key);
    return hit ? *hit : NULL;
}

int config_model(const config *cfg, const char *model, config_target *out) {
    *out = (config_target){NULL, NULL};
    if (!cfg || !model || !cfg->nmodels_) return -1;
    const struct config_model_entry *m = bsearch(model, cfg->models_, cfg->nmodels_, sizeof(*m), model_key);
    if (!m) return -1;
    out->deployment = m->d;
    out->group = m->g;
    return 0;
}

int config_counts_apart(const struct config_deployment *d) { return d && (d->itpm > 0 || d->otpm > 0); }

const struct config_lane *config_lane(const struct config_deployment *d, const char *name) {
    if (!d || !d->nlanes) return NULL;
    if (!name || !name[0]) {
        if (d->default_lane && d->default_lane[0]) name = d->default_lane;
        else {
            const struct config_lane *top = &d->lanes[0];
            for (size_t i = 1; i < d->nlanes; i++)
                if (d->lanes[i].priority < top->priority) top = &d->lanes[i];
            return top;
        }
    }
    for (size_t i = 0; i < d->nlanes; i++)
        if (!strcmp(d->lanes[i].name, name)) return &d->lanes[i];
    return NULL;
}

void config_lane_names(const struct config_deployment *d, char *buf, size_t n) {
    size_t used = 0;
    if (!n) return;
    buf[0] = '\0';
    for (size_t i = 0; d && i < d->nlanes && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", d->lanes[i].name);
    if (!buf[0]) snprintf(buf, n, "none");
}

const struct config_tenant *config_tenant(const struct config_deployment *d, const char *name) {
    if (!d) return NULL;
    const struct config_tenant *def = NULL;
    for (size_t i = 0; i < d->ntenants; i++) {
        if (name && !strcmp(d->tenants[i].name, name)) return &d->tenants[i];
        if (!strcmp(d->tenants[i].name, "default")) def = &d->tenants[i];
    }
    return def;
}

static const char *enum_name(const char *const *names, size_t n, int v) {
    return v >= 0 && (size_t)v < n && names[v] ? names[v] : "?";
}

const char *config_fail_name(int fail) { return enum_name(fail_names, 3, fail); }
const char *config_log_level_name(int level) { return enum_name(level_names, 4, level); }
const char *config_style_name(int style) {
    return enum_name(style_names, sizeof(style_names) / sizeof(style_names[0]) - 1, style);
}

/* ---- schema listing ---- */

struct key_visit {
    void (*fn)(const config_key_info *info, void *ud);
    void *ud;
};

static void visit_key(const cfg_key_info *k, void *ud) {
    const struct key_visit *v = ud;
    config_key_info info = {
        .path = k->path,
        .type = k->type,
        .def = k->def,
        .range = k->range,
        .required = k->required,
        .doc = k->doc,
    };
    v->fn(&info, v->ud);
}

void config_foreach_key(void (*fn)(const config_key_info *info, void *ud), void *ud) {
    struct key_visit v = {fn, ud};
    cfg_foreach_key(&root_schema, visit_key, &v);
}
