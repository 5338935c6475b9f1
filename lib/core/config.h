/* config: the sluiced configuration, read from a YAML file.
 *
 * config_load() parses a file into a fresh `config`, applies defaults,
 * validates every value and cross-field rule, resolves the Redis password
 * (from a file or an environment variable, never from the YAML itself) and
 * returns it, or fails with one message naming the file, the 1-based line
 * and the full key path:
 *   sluiced.yaml:12: key 'deployments.gpt-4o.rpm': must be a positive integer, got "abc"
 * Unknown and duplicate keys are errors. The schema is a table of rows
 * (key path, type, field offset, default, range, doc) in config.c; adding a
 * setting, or a section of named entries like `deployments`, is a few rows.
 * Swapping a new config in only when it loaded is the caller's job (SIGHUP).
 *
 * Depends on libyaml and POSIX (reading the password file). No globals,
 * never prints, aborts or exits; reentrant, though getenv() is only as
 * thread-safe as the process' use of setenv(). Ownership: a config and all
 * its strings belong to the config; config_free() releases it (NULL is a
 * no-op) and wipes the password. Every char * field is non-NULL ("" when
 * unset). Returned pointers into a config are borrowed from it. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stddef.h>

/* agent.fail */
enum { CONFIG_FAIL_OPEN = 0, CONFIG_FAIL_CLOSED = 1, CONFIG_FAIL_HOLD = 2 };
/* agent.log_level */
enum { CONFIG_LOG_ERROR = 0, CONFIG_LOG_WARN, CONFIG_LOG_INFO, CONFIG_LOG_DEBUG };
/* deployments.NAME.style: the provider profile (docs/providers.md). It says
 * which token dimensions the deployment has (azure, openai, bedrock: tpm;
 * anthropic: itpm and otpm; gemini: itpm; custom: any) and how each is
 * corrected at settle (bedrock: to input + output x output_burndown). */
enum {
    CONFIG_STYLE_AZURE = 0,
    CONFIG_STYLE_OPENAI = 1,
    CONFIG_STYLE_ANTHROPIC = 2,
    CONFIG_STYLE_CUSTOM = 3,
    CONFIG_STYLE_BEDROCK = 4,
    CONFIG_STYLE_GEMINI = 5
};
/* deployments.NAME.stream_usage: whether the HTTP proxy asks an OpenAI-
 * format stream for its usage chunk (stream_options.include_usage). */
enum { CONFIG_STREAM_USAGE_INJECT = 0, CONFIG_STREAM_USAGE_OFF = 1 };
/* deployments.NAME.tokens_rule: how the combined tokens dimension (tpm)
 * charges a request whose input and max output are known: their sum
 * (Azure OpenAI) or the larger of them (OpenAI's rate-limit guide). */
enum { CONFIG_TOKENS_SUM = 0, CONFIG_TOKENS_MAX = 1 };
/* deployments.NAME.estimate: whether the fleet calibrates the estimates
 * of this deployment by the ratio it learns from the provider's counts
 * (learn), or its callers count exactly (exact: charged as given). */
enum { CONFIG_ESTIMATE_LEARN = 0, CONFIG_ESTIMATE_EXACT = 1 };
/* deployments.NAME.output_charge: what otpm charges a request at
 * admission: its max output (max), or the output the deployment's recent
 * answers suggest (expected: a high quantile of actual / max output,
 * learned fleet-wide, corrected at the settle). */
enum { CONFIG_OUTPUT_MAX = 0, CONFIG_OUTPUT_EXPECTED = 1 };

/* Longest deployment name; names are [A-Za-z0-9._:-]{1,64}. */
#define CONFIG_NAME_MAX 64
/* Longest model alias (deployments.NAME.aliases, groups.NAME.aliases). */
#define CONFIG_ALIAS_MAX 128
/* Most members a group may have. */
#define CONFIG_GROUP_MAX 16

typedef struct config_redis {
    char *url;            /* as written; never log it whole */
    char *host;           /* TCP host, "" for a UNIX socket */
    int port;             /* TCP port, 0 for a UNIX socket */
    char *unix_path;      /* socket path, "" for TCP */
    int db;               /* database index (SELECT) */
    char *username;       /* ACL user from the URL or username key */
    char *password_file;  /* as configured */
    char *password_env;   /* as configured */
    char *password;       /* the resolved secret, "" if none */
    long long timeout_ms; /* per Redis call */
    long long connect_timeout_ms;
    double max_script_ms; /* bound on one reserve or settle call's time in Redis; 0 = none */
    char **cluster;       /* Redis Cluster seed nodes "host:port"; NULL = one Redis */
    size_t ncluster;
    char *sentinel_master; /* Sentinel: the monitored master's name; NULL = no Sentinel */
    char **sentinels;      /* Sentinel nodes "host:port" */
    size_t nsentinels;
} config_redis;

/* agent.http.listen entries, parsed: a TCP address or a UNIX socket. */
enum { CONFIG_LISTEN_TCP = 0, CONFIG_LISTEN_UNIX = 1 };
typedef struct config_listen {
    int kind;       /* CONFIG_LISTEN_* */
    char host[64];  /* TCP: the numeric address, without brackets */
    int port;       /* TCP: 1..65535 */
    int loopback;   /* TCP: 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 */
    char path[108]; /* UNIX: the socket path */
} config_listen;

/* agent.http.mode */
enum { CONFIG_HTTP_GOVERN = 0, CONFIG_HTTP_OBSERVE = 1 };

/* agent.http.clients.NAME: a client key of the HTTP proxy, which a caller
 * presents as its API key to spend a deployment's injected key
 * (deployments.NAME.inject_key), bound to a tenant and a lane. */
struct config_http_client {
    char *name; /* the YAML key: names the client in logs and STATUS */
    int line;
    char *key_env;  /* the environment variable holding the key, or "" */
    char *key_file; /* the file holding it, or "" (exactly one is given) */
    char *tenant;   /* the tenant its requests count as; "" = as the request says */
    char *lane;     /* the lane they take; "" = as the request says */
    char *key_;     /* private: the key, read at load; never logged */
    size_t keylen_;
};

/* agent.http: the HTTP proxy's listeners and limits (docs/configuration.md). */
typedef struct config_http {
    char **listen; /* as written; NULL = the proxy is off */
    size_t nlisten;
    config_listen *listeners; /* parsed, nlisten of them */
    int allow_remote;         /* TCP addresses other than loopback are allowed */
    long long max_connections;
    long long max_header_bytes; /* request line and headers, as sent */
    long long max_body_bytes;
    long long header_timeout_ms;        /* first byte of a request to the end of its headers */
    long long body_timeout_ms;          /* end of the headers to the end of the body */
    long long idle_timeout_ms;          /* keep-alive: between requests; also a client not reading a response */
    long long drain_timeout_ms;         /* SIGTERM: how long responses in progress may take */
    long long upstream_timeout_ms;      /* one attempt upstream, from the send to the last byte */
    long long connect_timeout_ms;       /* ... of which connecting (TCP and TLS) */
    long long max_attempts;             /* attempts per request, retries included */
    int mode;                           /* CONFIG_HTTP_*: govern, or observe (forward at once, record) */
    struct config_http_client *clients; /* in file order */
    size_t nclients;
} config_http;

typedef struct config_agent {
    char *id;           /* "" = hostname:pid, chosen at runtime */
    char *socket;       /* UNIX socket path served to clients */
    int socket_mode;    /* permission bits, <= 0777 */
    char *socket_owner; /* user name or uid to chown the socket to, "" = unchanged */
    char *socket_group; /* group name or gid, "" = unchanged */
    char *metrics;      /* "host:port" of the Prometheus endpoint, "" = off */
    char *metrics_host; /* parsed from metrics (brackets removed) */
    int metrics_port;   /* parsed from metrics, 0 = off */
    long long max_clients;
    long long max_client_buffer; /* bytes buffered per client */
    long long client_idle_timeout_ms;
    int fail;              /* CONFIG_FAIL_* */
    double fallback_share; /* (0, 1] */
    long long heartbeat_ms;
    long long silent_hold_ms;      /* 0 = 20 x heartbeat_ms */
    int log_level;                 /* CONFIG_LOG_* */
    long long max_client_pipeline; /* unfinished commands per client before reading pauses */
    config_http http;
} config_agent;

/* A lane of a deployment: a latency class with its own priority. */
struct config_lane {
    char *name; /* the YAML key */
    int line;
    long long priority;    /* 0 = served first; equal priorities share a band */
    long long max_wait_ms; /* -1 = the deployment's max_wait_ms */
    long long horizon_ms;  /* how far ahead it may reserve; -1 = derived */
    double headroom;       /* [0, 1): share of the rate lower lanes cannot use */
};

/* A tenant of a deployment ("default" is the class of unknown tenants). */
struct config_tenant {
    char *name;
    int line;
    double weight;          /* > 0 */
    long long ceiling_rpm;  /* 0 = none */
    long long ceiling_tpm;  /* 0 = none */
    long long daily_tokens; /* 0 = none */
};

/* One deployment. A struct tag without a typedef, because the lookup
 * function below has the name `config_deployment`. */
struct config_deployment {
    char *name;     /* the YAML key */
    int line;       /* where it is defined (1-based) */
    long long rpm;  /* > 0 */
    long long tpm;  /* combined tokens; 0 = none */
    long long itpm; /* input tokens (anthropic, custom); 0 = none */
    long long otpm; /* output tokens (anthropic, custom); 0 = none */
    struct {
        long long requests;      /* default max(1, rpm / 60) */
        long long tokens;        /* default max(1, tpm / 60) */
        long long input_tokens;  /* default max(1, itpm / 60) */
        long long output_tokens; /* default max(1, otpm / 60) */
    } burst;
    long long max_concurrency; /* 0 = no cap */
    long long lease_s;
    long long rpd; /* 0 = unlimited */
    long long tpd; /* 0 = unlimited */
    long long max_wait_ms;
    int refund; /* the `refund: bool` override of every token dimension, as given */
    /* Whether a settle corrects each token dimension to the actual usage:
     * from refund.<dim>, else `refund`, else the profile's default (only
     * Anthropic's output tokens). */
    struct {
        int tokens, input_tokens, output_tokens;
    } refunds;
    struct {
        long long ttl_s;
        long long min_per_s;
        double percent;
    } retry_budget;
    struct {
        double decrease;  /* (0, 1) */
        double min_scale; /* (0, 1] */
        double increase;  /* (0, 1] */
        long long interval_s;
        long long min_throttles; /* 429s without header evidence before a decrease */
        long long window_s;      /* ... within this window */
    } aimd;
    struct {
        int limits;  /* adopt a lower limit the headers report */
        int outside; /* follow others' use of the key seen in the headers */
    } adapt;
    char *endpoint;                 /* "" = none */
    char *api_key_env;              /* "" = none */
    int inject_key;                 /* the HTTP proxy sends this deployment's key, not the caller's */
    char *api_key_;                 /* private: the key of api_key_env, read at load when inject_key; never logged */
    int style;                      /* CONFIG_STYLE_* */
    char *api_version;              /* "" = none */
    int stream_usage;               /* CONFIG_STREAM_USAGE_* */
    int tokens_rule;                /* CONFIG_TOKENS_* */
    double output_burndown;         /* tokens one output token counts as in tpm (Bedrock's burndown rate) */
    char *daily_reset;              /* the time zone whose midnight starts the day of rpd/tpd; "" = UTC */
    long long jitter_ms;            /* release jitter the schedule tolerates (configure's jitter_ms) */
    long long refund_lag_ms;        /* a settle may reach Redis this long after the provider's give-back */
    long long horizon_ms;           /* how far ahead a slot may be granted; -1 = up to the max wait */
    long long requests_window_ms;   /* the provider counts requests per window of this many ms; 0 = a bucket */
    long long pause_max_ms;         /* 429s in a row double the fleet's pause up to this; 0 = as each says */
    int estimate;                   /* CONFIG_ESTIMATE_* */
    int output_charge;              /* CONFIG_OUTPUT_* */
    long long estimate_half_life_s; /* the learned ratio's half-life without news */
    long long estimate_learn_horizon_ms; /* while learning: how far ahead a teaching item may be granted */
    struct config_lane *lanes;           /* in file order; none = one implicit lane */
    size_t nlanes;
    char *default_lane;            /* "" = the highest-priority lane */
    struct config_tenant *tenants; /* in file order */
    size_t ntenants;
    long long tenant_idle_ms;
    long long lane_step_ms;
    /* What a million tokens cost (budgets in money): per input token not
     * read from the cache, per cache read, per cache write, per output
     * token. cache_read and cache_write default to input. */
    struct {
        double input, output, cache_read, cache_write; /* per million tokens, >= 0 */
        char *currency;                                /* ISO 4217; "" = no price */
        /* The same per token in 1e-12 of the currency (exact integers):
         * what lib/core/budget.c multiplies usage by. */
        long long input_p, output_p, cache_read_p, cache_write_p;
    } price;
    char **tags; /* e.g. "eu": which group requests may use it */
    size_t ntags;
    char **aliases; /* other model names the proxy maps to it */
    size_t naliases;
    /* The breaker settings written to Redis: those of the first group (in
     * file order) that has this deployment as a member; off otherwise. */
    const struct config_group *group_;
};

/* groups.NAME.policy */
enum { CONFIG_POLICY_PRIORITY = 0, CONFIG_POLICY_WEIGHTED = 1 };

/* A tenant's restriction within a group. */
struct config_group_tenant {
    char *name;
    int line;
    char *tag; /* only members with this tag; "" = any */
};

/* A group of deployments that serve the same model (regions, PTU and
 * pay-as-you-go, two providers). */
struct config_group {
    char *name;
    int line;
    char **members; /* deployment names, in priority order */
    size_t nmembers;
    int policy;            /* CONFIG_POLICY_* */
    long long spill_ms;    /* the primary is used while its slot is this close */
    long long max_wait_ms; /* ACQUIRE without MAXWAIT */
    struct {
        double failure_ratio; /* 0 = no breaker */
        long long min_requests;
        long long window_s;
        long long break_s;
    } breaker;
    struct config_group_tenant *tenants;
    size_t ntenants;
    char **aliases; /* other model names the proxy maps to it */
    size_t naliases;
    const struct config_deployment **members_; /* resolved, nmembers of them */
};

/* budgets.NAME: a budget in money (docs/configuration.md "Budgets"). A
 * request draws from every budget whose scope it matches: each of tenant,
 * client and deployment that is given must match ("" = any; all three
 * empty = the whole fleet). */
struct config_budget {
    char *name;
    int line;
    char *tenant;                          /* the tenant the request names (or its client is bound to) */
    char *client;                          /* agent.http.clients.NAME */
    char *deployment;                      /* a deployment or a group, as the request names it */
    char *currency;                        /* ISO 4217, the deployments' prices' */
    double daily, monthly, total;          /* in the currency; 0 = none */
    char *time_zone;                       /* whose midnight starts a day and a month; "" = UTC */
    double warn_at;                        /* the share spent that warns (the soft limit), (0, 1] */
    long long daily_u, monthly_u, total_u; /* the same in 1e-6 of the currency */
};

typedef struct config {
    char *source; /* the name used in messages (file path) */
    config_redis redis;
    config_agent agent;
    struct config_deployment *deployments; /* in file order */
    size_t ndeployments;                   /* >= 1 */
    struct config_group *groups;           /* in file order */
    size_t ngroups;
    struct config_budget *budgets; /* in file order */
    size_t nbudgets;
    const struct config_deployment **by_name_; /* private: sorted index */
    struct config_model_entry *models_;        /* private: names and aliases, sorted */
    size_t nmodels_;
} config;

/* 1 when code is an ISO 4217 currency code ("USD", "EUR", ...). */
int config_currency_ok(const char *code);

/* Loads and validates the YAML file at path. Returns 0 and a new config in
 * *out, or -1 with *out = NULL and a message in err (always NUL-terminated
 * when errlen > 0; err may be NULL). A relative redis.password_file is
 * resolved against the directory of path. */
int config_load(const char *path, config **out, char *err, size_t errlen);

/* config_load() on text in memory (len bytes, need not be NUL-terminated);
 * name stands for the file in messages (NULL: "<string>"). A relative
 * redis.password_file is resolved against the working directory. */
int config_load_string(const char *name, const char *text, size_t len, config **out, char *err, size_t errlen);

/* config_load() / config_load_string() with flags.
 * CONFIG_LOAD_NO_PROXY_SECRETS: the HTTP proxy's secrets are not read
 * (deployments.<name>.inject_key's api_key_env, agent.http.clients' key_env
 * and key_file; their keys stay NULL), for the tools that never serve the
 * proxy: sluice status, top, run and sim. Everything else is checked as
 * config_load() checks it. */
#define CONFIG_LOAD_NO_PROXY_SECRETS 1u
int config_load_flags(const char *path, unsigned flags, config **out, char *err, size_t errlen);
int config_load_string_flags(const char *name, const char *text, size_t len, unsigned flags, config **out, char *err,
                             size_t errlen);

/* Frees cfg and everything it owns, wiping the password first. NULL is a
 * no-op. */
void config_free(config *cfg);

/* The deployment called name, or NULL. O(log n). Borrowed from cfg. */
const struct config_deployment *config_deployment(const config *cfg, const char *name);

/* The lane called name of d (NULL or "": d's default lane, NULL when d
 * has no lanes), or NULL when d has no such lane. */
const struct config_lane *config_lane(const struct config_deployment *d, const char *name);

/* The group called name, or NULL. O(n). Borrowed from cfg. */
const struct config_group *config_group(const config *cfg, const char *name);

/* 1 when deployment d carries tag (NULL or "": any deployment). */
int config_has_tag(const struct config_deployment *d, const char *tag);

/* The tag a tenant of group g is restricted to, "" when none. */
const char *config_group_tenant_tag(const struct config_group *g, const char *tenant);

/* What a model name maps to: a deployment or a group (exactly one is set). */
typedef struct config_target {
    const struct config_deployment *deployment;
    const struct config_group *group;
} config_target;

/* The deployment or group that model names, by its name or one of its
 * aliases (case-sensitive). Returns 0 and fills *out, or -1 when nothing
 * is called so. O(log n). Borrowed from cfg. */
int config_model(const config *cfg, const char *model, config_target *out);

/* 1 when s[0..len) is a name as deployments, groups, lanes, tenants and
 * tags are named, in the file and on the wire: 1 to CONFIG_NAME_MAX of
 * A-Z a-z 0-9 . _ : - (case-sensitive). */
int config_name_ok(const char *s, size_t len);

/* 1 when d counts input and output tokens apart (itpm or otpm), so an
 * acquire must give the estimate split. */
int config_counts_apart(const struct config_deployment *d);

/* The names of d's lanes, comma-separated, or "none", into buf. */
void config_lane_names(const struct config_deployment *d, char *buf, size_t n);

/* The tenant class a request of tenant `name` falls in: the configured
 * tenant of that name, else "default" (configured or not: NULL then). */
const struct config_tenant *config_tenant(const struct config_deployment *d, const char *name);

/* The client of agent.http.clients whose key is key[0..len), or NULL.
 * Compares against every client's key in time independent of where they
 * differ. */
const struct config_http_client *config_http_client_by_key(const config *cfg, const char *key, size_t len);

/* Names of enum values ("open", "debug", "azure"); "?" when out of range. */
const char *config_fail_name(int fail);
const char *config_log_level_name(int level);
const char *config_style_name(int style);

/* One row of the schema, for documentation and `--help`-style listings. */
typedef struct config_key_info {
    const char *path;  /* full key, named entries as <name>: "deployments.<name>.rpm" */
    const char *type;  /* "integer", "number", "boolean", "string", "size", "mode", "one of ..." */
    const char *def;   /* default as YAML text; "" when none or derived */
    const char *range; /* e.g. "1..60000", "(0, 1]", "" when free */
    int required;
    const char *doc; /* one sentence */
} config_key_info;

/* Calls fn for every key of the schema, in table order. The info and its
 * strings are valid during the call only. */
void config_foreach_key(void (*fn)(const config_key_info *info, void *ud), void *ud);

#endif
