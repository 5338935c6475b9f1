/* cmd_status: `sluice status` and `sluice top`, the live budget of each
 * deployment, and of each member of a group.
 *
 * The numbers come from Redis itself, with the read-only `status` script
 * (lua/status.lua, embedded in the binary: lib/core/scripts.h), over a
 * blocking hiredis connection made from the configuration's `redis`
 * section (one Redis, a Redis Cluster, whose MOVED and ASK redirections
 * are followed, or Sentinel, asked for the master). With --socket they
 * come from a sluiced's STATUS command instead, which adds the agent's
 * own view (mode, queue, local share).
 *
 * `top` samples every interval and shows rates from counter deltas over
 * the Redis clock (now_us): grants/s against the quota, sheds/s, 429s/s.
 *
 * A group named (or, by default, every group of the config) gets a table
 * of its members, one row each from the member's status: rate, backlog,
 * breaker state and quota out. Its members come from the config, or with
 * --socket alone from the daemon's INFO groups. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "cli_flags.h"
#include "cmd.h"
#include "config.h"
#include "run_args.h"
#include "scripts.h"

#define STATUS_MAX_REDIRECTS 5

typedef struct status_cli {
    const char *config, *socket;
    long long iterations, interval_ms;
    int json, help;
} status_cli;

#define OPT(f) offsetof(status_cli, f)

static const cli_flag status_flags[] = {
    {"--config", "-c", "FILE", CLI_STR, OPT(config), 0, 0,
     "sluiced configuration: its redis section and deployments (default $SLUICE_CONFIG)"},
    {"--socket", NULL, "PATH", CLI_STR, OPT(socket), 0, 0, "ask this sluiced (STATUS) instead of Redis"},
    {"--json", NULL, NULL, CLI_BOOL, OPT(json), 0, 0, "JSON instead of a table (top: one line per frame)"},
    {"--iterations", "-n", "N", CLI_INT, OPT(iterations), 0, 1e9, "top: frames to print, 0 = until Ctrl-C (default 0)"},
    {"--interval-ms", NULL, "MS", CLI_INT, OPT(interval_ms), 100, 3600000, "top: time between frames (default 1000)"},
    {"--help", NULL, NULL, CLI_BOOL, OPT(help), 0, 0, "show this help"},
};

#define STATUS_NFLAGS (sizeof(status_flags) / sizeof(status_flags[0]))

static void status_usage(FILE *f, const char *cmd) {
    if (strcmp(cmd, "top") == 0)
        fprintf(f, "usage: sluice top [--config FILE | --socket PATH] [OPTIONS] [DEPLOYMENT|GROUP...]\n\n"
                   "The live budget of each deployment, refreshed every interval, with rates from\n"
                   "the counters: grants/s against the quota, sheds/s and 429s/s. A group shows\n"
                   "its members side by side.\n\n");
    else
        fprintf(f, "usage: sluice status [--config FILE | --socket PATH] [--json] [DEPLOYMENT|GROUP...]\n\n"
                   "The live budget of each deployment (those of the config, or those named), read\n"
                   "from Redis with the `status` script, or from a sluiced's STATUS with --socket:\n"
                   "configured and effective rate, pause, backlog, grants outstanding, retry budget,\n"
                   "live agents, today's usage, the counters, the circuit breaker and the quota out.\n"
                   "A group (named, or every group of the config) shows one row per member: rate,\n"
                   "backlog, breaker state, quota out, grants and sheds.\n\n");
    fprintf(f, "options:\n");
    cli_print_flags(f, status_flags, STATUS_NFLAGS);
    fprintf(f, "\nexit: 0, 1 on an unknown deployment or group, or when Redis / sluiced cannot be read, 2 usage.\n"
               "See docs/cli.md.\n");
}

/* ---- where the numbers come from ------------------------------------------------------------ */

typedef struct status_src {
    const config *cfg; /* NULL with --socket and no --config */
    const char *sock;  /* sluiced socket, or NULL: Redis */
    redisContext *c;
    char window[24]; /* the liveness window of agents (3 heartbeats) */
} status_src;

static struct timeval ms_tv(long long ms) {
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* Connects to a Redis node and authenticates as the config says. */
static redisContext *node_connect(const config_redis *rc, const char *host, int port, const char *unix_path,
                                  int data_node, char *err, size_t errlen) {
    struct timeval ct = ms_tv(rc->connect_timeout_ms);
    redisContext *c =
        unix_path && *unix_path ? redisConnectUnixWithTimeout(unix_path, ct) : redisConnectWithTimeout(host, port, ct);
    if (!c || c->err) {
        if (unix_path && *unix_path)
            snprintf(err, errlen, "Redis at %s: %s", unix_path, c ? c->errstr : "out of memory");
        else snprintf(err, errlen, "Redis at %s:%d: %s", host, port, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    /* A status call does more than a reserve; give it some room. */
    redisSetTimeout(c, ms_tv(rc->timeout_ms > 2000 ? rc->timeout_ms : 2000));
    if (!data_node) return c;
    redisReply *r = NULL;
    if (rc->password[0]) {
        r = rc->username[0] ? redisCommand(c, "AUTH %s %s", rc->username, rc->password)
                            : redisCommand(c, "AUTH %s", rc->password);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    if (rc->db != 0) {
        r = redisCommand(c, "SELECT %d", rc->db);
        if (!r || r->type == REDIS_REPLY_ERROR) goto fail;
        freeReplyObject(r);
    }
    return c;
fail:
    snprintf(err, errlen, "Redis: %s", r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    redisFree(c);
    return NULL;
}

static int split_host_port(const char *hp, char *host, size_t hn, int *port) {
    const char *colon = strrchr(hp, ':');
    if (!colon) return -1;
    size_t n = (size_t)(colon - hp);
    if (n && hp[0] == '[' && hp[n - 1] == ']') {
        hp++;
        n -= 2;
    }
    if (n == 0 || n >= hn) return -1;
    memcpy(host, hp, n);
    host[n] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 ? 0 : -1;
}

/* The data node to start from: the URL's, the first cluster seed that
 * answers, or the master the sentinels name. */
static redisContext *redis_open(const config_redis *rc, char *err, size_t errlen) {
    char host[256];
    int port;
    if (rc->ncluster > 0) {
        for (size_t i = 0; i < rc->ncluster; i++) {
            if (split_host_port(rc->cluster[i], host, sizeof(host), &port) != 0) continue;
            redisContext *c = node_connect(rc, host, port, NULL, 1, err, errlen);
            if (c) return c;
        }
        return NULL;
    }
    if (rc->sentinel_master && rc->nsentinels > 0) {
        for (size_t i = 0; i < rc->nsentinels; i++) {
            if (split_host_port(rc->sentinels[i], host, sizeof(host), &port) != 0) continue;
            redisContext *s = node_connect(rc, host, port, NULL, 0, err, errlen);
            if (!s) continue;
            redisReply *r = redisCommand(s, "SENTINEL get-master-addr-by-name %s", rc->sentinel_master);
            redisFree(s);
            if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
                char mhost[256];
                snprintf(mhost, sizeof(mhost), "%s", r->element[0]->str);
                int mport = atoi(r->element[1]->str);
                freeReplyObject(r);
                return node_connect(rc, mhost, mport, NULL, 1, err, errlen);
            }
            if (r) freeReplyObject(r);
            snprintf(err, errlen, "sentinel %s does not know master '%s'", rc->sentinels[i], rc->sentinel_master);
        }
        return NULL;
    }
    return node_connect(rc, rc->host, rc->port, rc->unix_path, 1, err, errlen);
}

/* EVALSHA status, with SCRIPT LOAD on NOSCRIPT and cluster redirections
 * followed. Returns the reply (caller frees) or NULL with err set. */
static redisReply *status_script(status_src *s, const char *dep, char *err, size_t errlen) {
    const script *sc = scripts_get(SCRIPT_STATUS);
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    if (scripts_keys(dep, keys) != 0) {
        snprintf(err, errlen, "'%s' is not a valid deployment name", dep);
        return NULL;
    }
    const char *av[SCRIPTS_EVALSHA_ARGC(1)];
    size_t al[SCRIPTS_EVALSHA_ARGC(1)];
    const char *argv[1] = {s->window};
    int n = scripts_evalsha_argv(SCRIPT_STATUS, keys, 1, argv, NULL, av, al);
    int asking = 0;
    for (int hop = 0; hop <= STATUS_MAX_REDIRECTS; hop++) {
        if (asking) {
            redisReply *a = redisCommand(s->c, "ASKING");
            if (a) freeReplyObject(a);
        }
        redisReply *r = redisCommandArgv(s->c, n, av, al);
        if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
            freeReplyObject(r);
            r = redisCommand(s->c, "SCRIPT LOAD %b", sc->source, sc->len);
            if (r) freeReplyObject(r);
            r = redisCommandArgv(s->c, n, av, al);
        }
        if (!r) {
            snprintf(err, errlen, "Redis: %s", s->c->errstr[0] ? s->c->errstr : "no reply");
            return NULL;
        }
        int moved = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0;
        asking = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0;
        if (!moved && !asking) return r;
        const char *addr = strchr(strchr(r->str, ' ') + 1, ' ');
        char host[256];
        int port;
        if (!addr || split_host_port(addr + 1, host, sizeof(host), &port) != 0) return r;
        freeReplyObject(r);
        redisContext *c = node_connect(&s->cfg->redis, host, port, NULL, 1, err, errlen);
        if (!c) return NULL;
        redisFree(s->c);
        s->c = c;
    }
    snprintf(err, errlen, "Redis Cluster: too many redirections for '%s'", dep);
    return NULL;
}

/* A reply's value as JSON: numbers as numbers. */
static json_t *value_json(const redisReply *v, int keep_string) {
    if (v->type == REDIS_REPLY_INTEGER) return json_integer((json_int_t)v->integer);
    if (v->type == REDIS_REPLY_NIL) return json_null();
    if (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS) return json_null();
    const char *s = v->str;
    if (!keep_string && *s) {
        char *end;
        errno = 0;
        long long i = strtoll(s, &end, 10);
        if (!*end && !errno) return json_integer((json_int_t)i);
        double d = strtod(s, &end);
        if (!*end && isfinite(d)) return json_real(d);
    }
    return json_stringn(s, v->len);
}

static json_t *pairs_json(const redisReply *r) {
    json_t *o = json_object();
    for (size_t i = 0; o && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        if (k->type != REDIS_REPLY_STRING && k->type != REDIS_REPLY_STATUS) continue;
        int text = strcmp(k->str, "deployment") == 0 || strcmp(k->str, "mode") == 0 || strcmp(k->str, "redis") == 0 ||
                   strcmp(k->str, "redis_error") == 0;
        json_object_set_new(o, k->str, value_json(r->element[i + 1], text));
    }
    return o;
}

/* One deployment's fields. Returns 0 and *out, 1 when the deployment is
 * unknown, -1 on a failure (err says which). */
static int fetch(status_src *s, const char *dep, json_t **out, char *err, size_t errlen) {
    *out = NULL;
    redisReply *r = s->sock ? redisCommand(s->c, "STATUS %s", dep) : status_script(s, dep, err, errlen);
    if (!r) {
        if (s->sock) snprintf(err, errlen, "sluiced at %s: %s", s->sock, s->c->errstr);
        return -1;
    }
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = strstr(r->str, "unknown deployment") ? 1 : -1;
        snprintf(err, errlen, "%s", r->str);
    } else if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "unexpected reply to STATUS");
        rc = -1;
    } else {
        *out = pairs_json(r);
        if (!*out) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    freeReplyObject(r);
    return rc;
}

/* Every deployment sluiced has, when neither names nor a config say. */
static int daemon_names(status_src *s, char ***names, int *n, char *err, size_t errlen) {
    redisReply *r = redisCommand(s->c, "STATUS");
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "sluiced at %s: %s", s->sock, r && r->type == REDIS_REPLY_ERROR ? r->str : s->c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    *names = calloc(r->elements + 1, sizeof(char *));
    *n = 0;
    for (size_t i = 0; *names && i < r->elements; i++) {
        const redisReply *d = r->element[i];
        if (d->type == REDIS_REPLY_ARRAY && d->elements >= 2 && d->element[1]->type == REDIS_REPLY_STRING)
            (*names)[(*n)++] = strdup(d->element[1]->str);
    }
    freeReplyObject(r);
    return *names ? 0 : -1;
}

/* ---- what to show: deployments and groups ------------------------------------------------ */

typedef struct status_group {
    char name[CONFIG_NAME_MAX + 1];
    int nmembers;
    char members[CONFIG_GROUP_MAX][CONFIG_NAME_MAX + 1];
} status_group;

/* The deployments to sample (names, each once; show: it has a row in the
 * deployments table, rather than only in its groups'), and the groups. */
typedef struct status_plan {
    char **names;
    int *show;
    int n, cap;
    status_group *groups;
    int ngroups;
} status_plan;

static int plan_add(status_plan *p, const char *name, int show) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->names[i], name)) {
            p->show[i] |= show;
            return 0;
        }
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        char **nn = realloc(p->names, (size_t)cap * sizeof(*nn));
        if (nn) p->names = nn;
        int *ns = nn ? realloc(p->show, (size_t)cap * sizeof(*ns)) : NULL;
        if (!ns) return -1;
        p->show = ns;
        p->cap = cap;
    }
    if (!(p->names[p->n] = strdup(name))) return -1;
    p->show[p->n++] = show;
    return 0;
}

static int plan_add_group(status_plan *p, const status_group *g) {
    status_group *ng = realloc(p->groups, (size_t)(p->ngroups + 1) * sizeof(*ng));
    if (!ng) return -1;
    p->groups = ng;
    p->groups[p->ngroups++] = *g;
    for (int i = 0; i < g->nmembers; i++)
        if (plan_add(p, g->members[i], 0) != 0) return -1;
    return 0;
}

static void plan_free(status_plan *p) {
    for (int i = 0; i < p->n; i++) free(p->names[i]);
    free(p->names);
    free(p->show);
    free(p->groups);
    memset(p, 0, sizeof(*p));
}

static void group_from_config(const struct config_group *cg, status_group *g) {
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "%s", cg->name);
    for (size_t i = 0; i < cg->nmembers && i < CONFIG_GROUP_MAX; i++)
        snprintf(g->members[g->nmembers++], sizeof(g->members[0]), "%s", cg->members[i]);
}

/* The value of key= in an INFO line's comma-separated fields into out. */
static int info_value(const char *line, size_t len, const char *key, char *out, size_t n) {
    size_t kl = strlen(key);
    for (const char *p = line; p < line + len;) {
        const char *end = memchr(p, ',', (size_t)(line + len - p));
        if (!end) end = line + len;
        if ((size_t)(end - p) > kl && !strncmp(p, key, kl) && p[kl] == '=') {
            snprintf(out, n, "%.*s", (int)(end - p - (long)kl - 1), p + kl + 1);
            return 0;
        }
        p = end + 1;
    }
    return -1;
}

/* The groups a sluiced has, from INFO groups (group_member<k> lines, in
 * member order). */
static int daemon_groups(status_src *s, status_group **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    redisReply *r = redisCommand(s->c, "INFO groups");
    if (!r || r->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "sluiced at %s: %s", s->sock, r && r->type == REDIS_REPLY_ERROR ? r->str : s->c->errstr);
        if (r) freeReplyObject(r);
        return -1;
    }
    int rc = 0;
    for (const char *p = r->str; *p && rc == 0;) {
        size_t len = strcspn(p, "\r\n");
        const char *colon = memchr(p, ':', len);
        char gname[CONFIG_NAME_MAX + 1], member[CONFIG_NAME_MAX + 1];
        if (!strncmp(p, "group_member", 12) && p[12] >= '0' && p[12] <= '9' && colon &&
            info_value(colon + 1, len - (size_t)(colon + 1 - p), "group", gname, sizeof(gname)) == 0 &&
            info_value(colon + 1, len - (size_t)(colon + 1 - p), "member", member, sizeof(member)) == 0) {
            status_group *g = NULL;
            for (int i = 0; i < *n && !g; i++)
                if (!strcmp((*out)[i].name, gname)) g = &(*out)[i];
            if (!g) {
                status_group *ng = realloc(*out, (size_t)(*n + 1) * sizeof(*ng));
                if (!ng) {
                    rc = -1;
                    break;
                }
                *out = ng;
                g = &ng[(*n)++];
                memset(g, 0, sizeof(*g));
                snprintf(g->name, sizeof(g->name), "%s", gname);
            }
            if (g->nmembers < CONFIG_GROUP_MAX)
                snprintf(g->members[g->nmembers++], sizeof(g->members[0]), "%s", member);
        }
        p += len;
        while (*p == '\r' || *p == '\n') p++;
    }
    freeReplyObject(r);
    if (rc != 0) snprintf(err, errlen, "out of memory");
    return rc;
}

/* ---- printing ------------------------------------------------------------------ */

static void fmt_ms(char *b, size_t n, double ms);

/* Budgets in money, below the deployments: from a sluiced's INFO budgets
 * (as its last look at Redis found them), or from Redis' budget hashes
 * (the periods as last written: a period that has rolled since shows its
 * old day until the next request). */
static void print_budgets(status_src *s) {
    if (s->sock) {
        redisReply *r = redisCommand(s->c, "INFO budgets");
        if (!r || r->type != REDIS_REPLY_STRING) {
            if (r) freeReplyObject(r);
            return;
        }
        int head = 0;
        for (const char *p = r->str; *p;) {
            size_t len = strcspn(p, "\r\n");
            const char *colon = memchr(p, ':', len);
            char v[8][64] = {{0}};
            static const char *const keys[8] = {"name",  "period",   "currency", "limit",
                                                "spent", "reserved", "left",     "renews_in_ms"};
            if (!strncmp(p, "budget", 6) && p[6] >= '0' && p[6] <= '9' && colon) {
                for (int k = 0; k < 8; k++)
                    info_value(colon + 1, len - (size_t)(colon + 1 - p), keys[k], v[k], sizeof(v[k]));
                if (!head++)
                    printf("\n%-20s %-6s %-4s %14s %14s %14s %14s %12s\n", "BUDGET", "PERIOD", "CUR", "LIMIT", "SPENT",
                           "RESERVED", "LEFT", "RENEWS IN");
                char when[32];
                long long ms = atoll(v[7]);
                if (ms < 0) snprintf(when, sizeof(when), "never");
                else fmt_ms(when, sizeof(when), (double)ms);
                printf("%-20s %-6s %-4s %14s %14s %14s %14s %12s\n", v[0], v[1], v[2], v[3], v[4], v[5], v[6], when);
            }
            p += len;
            while (*p == '\r' || *p == '\n') p++;
        }
        freeReplyObject(r);
        return;
    }
    for (size_t i = 0; s->cfg && i < s->cfg->nbudgets; i++) {
        const struct config_budget *b = &s->cfg->budgets[i];
        redisReply *r = redisCommand(s->c, "HGETALL sluice:{$budgets}:b:%s", b->name);
        if (i == 0)
            printf("\n%-20s %-10s %-4s %14s %14s %14s %14s\n", "BUDGET", "PERIOD", "CUR", "LIMIT", "SPENT", "RESERVED",
                   "LEFT");
        static const char *const per[3][4] = {{"day", "daily_limit", "day_spent", "day_reserved"},
                                              {"month", "monthly_limit", "month_spent", "month_reserved"},
                                              {"total", "total_limit", "total_spent", "total_reserved"}};
        long long lim[3] = {b->daily_u, b->monthly_u, b->total_u};
        for (int p = 0; p < 3; p++) {
            if (!lim[p]) continue;
            long long sp = 0, rs = 0;
            const char *when = p == 2 ? "total" : "-";
            for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k + 1 < r->elements; k += 2) {
                const char *f = r->element[k]->str;
                if (!strcmp(f, per[p][2])) sp = atoll(r->element[k + 1]->str);
                if (!strcmp(f, per[p][3])) rs = atoll(r->element[k + 1]->str);
                if (p < 2 && !strcmp(f, per[p][0])) when = r->element[k + 1]->str;
            }
            long long left = lim[p] - sp - rs;
            printf("%-20s %-10s %-4s %14.6f %14.6f %14.6f %14.6f\n", b->name, when, b->currency, (double)lim[p] / 1e6,
                   (double)sp / 1e6, (double)rs / 1e6, (double)(left > 0 ? left : 0) / 1e6);
        }
        if (r) freeReplyObject(r);
    }
}

static double num(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void fmt_num(char *b, size_t n, double v) {
    if (!isfinite(v)) snprintf(b, n, "-");
    else if (v == floor(v) && fabs(v) < 1e15) snprintf(b, n, "%.0f", v);
    else snprintf(b, n, "%.2f", v);
}

static void fmt_ms(char *b, size_t n, double ms) {
    if (!isfinite(ms) || ms <= 0) snprintf(b, n, "-");
    else if (ms < 1000) snprintf(b, n, "%.0fms", ms);
    else if (ms < 59950) snprintf(b, n, "%.1fs", ms / 1000);
    else {
        /* Round once, then split: 59.6 s past a minute is the next one. */
        long long s = llround(ms / 1000);
        if (snprintf(b, n, "%lldm%02ds", s / 60, (int)(s % 60)) >= (int)n) snprintf(b, n, "-");
    }
}

/* A counter's rate between two samples; unknown (printed "-") when it went
 * down: Redis lost its state (an empty restart, a FLUSHALL) between them. */
static double rate(const json_t *cur, const json_t *prev, const char *k, double dt) {
    double a = num(cur, k), b = num(prev, k);
    return prev && dt > 0 && isfinite(a) && isfinite(b) && a >= b ? (a - b) / dt : NAN;
}

/* Seconds between two samples, on the Redis clock when both have it. */
static double sample_dt(const json_t *cur, const json_t *prev, double local_dt) {
    double a = num(cur, "now_us"), b = num(prev, "now_us");
    return isfinite(a) && isfinite(b) && a > b ? (a - b) / 1e6 : local_dt;
}

/* ---- lanes and tenants ---------------------------------------------------------- */

/* STATUS gives lane.<name>.<field> and tenant.<name>.<field> (names may
 * hold dots; fields do not), each lane starting with `share` and each
 * tenant with `weight`, in name order. */

static double class_num(const json_t *o, const char *kind, const char *name, const char *field) {
    char key[200];
    snprintf(key, sizeof(key), "%s.%s.%s", kind, name, field);
    return num(o, key);
}

/* Calls fn for each lane or tenant name of o, in STATUS order. */
static void foreach_class(const json_t *o, const char *kind, const char *first,
                          void (*fn)(const json_t *o, const char *name, void *ud), void *ud) {
    size_t kl = strlen(kind), fl = strlen(first);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        size_t n = strlen(key);
        if (n <= kl + fl + 2 || strncmp(key, kind, kl) != 0 || key[kl] != '.' || key[n - fl - 1] != '.' ||
            strcmp(key + n - fl, first) != 0)
            continue;
        char name[CONFIG_NAME_MAX + 1];
        size_t nl = n - kl - fl - 2;
        if (nl > CONFIG_NAME_MAX) continue;
        memcpy(name, key + kl + 1, nl);
        name[nl] = '\0';
        fn(o, name, ud);
    }
}

static void fmt_pct(char *b, size_t n, double f) {
    if (!isfinite(f)) snprintf(b, n, "-");
    else snprintf(b, n, "%.1f%%", f * 100);
}

/* A limit where 0 means none. */
static void fmt_limit(char *b, size_t n, double v) { fmt_num(b, n, v > 0 ? v : NAN); }

typedef struct class_print {
    const json_t *prev; /* the previous sample of this deployment (top), or NULL */
    double dt;
    int top;
    int count;
} class_print;

static void class_rate(char *b, size_t n, const class_print *cp, const json_t *o, const char *kind, const char *name) {
    double a = class_num(o, kind, name, "granted_total");
    double p = cp->prev ? class_num(cp->prev, kind, name, "granted_total") : NAN;
    if (cp->dt > 0 && isfinite(a) && isfinite(p) && a >= p) snprintf(b, n, "%.1f", (a - p) / cp->dt);
    else snprintf(b, n, "-");
}

static const char *dep_name(const json_t *o) {
    const char *d = json_string_value(json_object_get(o, "deployment"));
    return d ? d : "?";
}

static void count_class(const json_t *o, const char *name, void *ud) { ((class_print *)ud)->count++; }

static void print_lane(const json_t *o, const char *name, void *ud) {
    const class_print *cp = ud;
    char share[24], horizon[24], granted[24], deferred[24], shed[24];
    fmt_pct(share, sizeof(share), class_num(o, "lane", name, "share"));
    double h = class_num(o, "lane", name, "horizon_ms");
    if (h < 0) snprintf(horizon, sizeof(horizon), "max-wait"); /* up to each request's max wait */
    else if (h == 0) snprintf(horizon, sizeof(horizon), "0");
    else fmt_ms(horizon, sizeof(horizon), h);
    fmt_num(granted, sizeof(granted), class_num(o, "lane", name, "granted_total"));
    fmt_num(deferred, sizeof(deferred), class_num(o, "lane", name, "deferred_total"));
    fmt_num(shed, sizeof(shed), class_num(o, "lane", name, "shed_total"));
    printf("%-20s %-16s %7s %8s %9s %9s %6s", dep_name(o), name, share, horizon, granted, deferred, shed);
    if (cp->top) {
        char gr[24];
        class_rate(gr, sizeof(gr), cp, o, "lane", name);
        printf(" %8s", gr);
    }
    printf("\n");
}

static void print_tenant(const json_t *o, const char *name, void *ud) {
    const class_print *cp = ud;
    char weight[24], share[24], crpm[24], ctpm[24], daily[24], today[24], granted[24], tokens[24], excess[24], shed[24];
    fmt_num(weight, sizeof(weight), class_num(o, "tenant", name, "weight"));
    double active = class_num(o, "tenant", name, "active");
    fmt_pct(share, sizeof(share), class_num(o, "tenant", name, "share"));
    fmt_limit(crpm, sizeof(crpm), class_num(o, "tenant", name, "ceiling_rpm"));
    fmt_limit(ctpm, sizeof(ctpm), class_num(o, "tenant", name, "ceiling_tpm"));
    fmt_limit(daily, sizeof(daily), class_num(o, "tenant", name, "daily_tokens"));
    fmt_num(today, sizeof(today), class_num(o, "tenant", name, "today_tokens"));
    fmt_num(granted, sizeof(granted), class_num(o, "tenant", name, "granted_total"));
    fmt_num(tokens, sizeof(tokens), class_num(o, "tenant", name, "tokens_total"));
    fmt_num(excess, sizeof(excess), class_num(o, "tenant", name, "excess_total"));
    fmt_num(shed, sizeof(shed), class_num(o, "tenant", name, "shed_total"));
    printf("%-20s %-16s %6s %6s %6s %8s %9s %10s %10s %9s %10s %7s %6s", dep_name(o), name, weight,
           active > 0 ? "yes" : "no", share, crpm, ctpm, daily, today, granted, tokens, excess, shed);
    if (cp->top) {
        char gr[24];
        class_rate(gr, sizeof(gr), cp, o, "tenant", name);
        printf(" %8s", gr);
    }
    printf("\n");
}

/* The lanes and tenants tables, each only when some deployment shown has
 * them. */
static void print_classes(json_t *const *rows, json_t *const *prev, const int *show, int n, double local_dt, int top) {
    static const struct {
        const char *kind, *first;
        void (*fn)(const json_t *o, const char *name, void *ud);
    } kinds[] = {{"lane", "share", print_lane}, {"tenant", "weight", print_tenant}};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        class_print cp = {0};
        for (int i = 0; i < n; i++)
            if (rows[i] && show[i]) foreach_class(rows[i], kinds[k].kind, kinds[k].first, count_class, &cp);
        if (cp.count == 0) continue;
        printf("\n");
        if (k == 0)
            printf("%-20s %-16s %7s %8s %9s %9s %6s", "DEPLOYMENT", "LANE", "SHARE", "HORIZON", "GRANTED", "DEFERRED",
                   "SHED");
        else
            printf("%-20s %-16s %6s %6s %6s %8s %9s %10s %10s %9s %10s %7s %6s", "DEPLOYMENT", "TENANT", "WEIGHT",
                   "ACTIVE", "SHARE", "CEIL.RPM", "CEIL.TPM", "DAILY.TOK", "TODAY.TOK", "GRANTED", "TOKENS", "EXCESS",
                   "SHED");
        if (top) printf(" %8s", "GRANTS/S");
        printf("\n");
        for (int i = 0; i < n; i++) {
            if (!rows[i] || !show[i]) continue;
            cp.top = top;
            cp.prev = prev ? prev[i] : NULL;
            cp.dt = sample_dt(rows[i], cp.prev, local_dt);
            foreach_class(rows[i], kinds[k].kind, kinds[k].first, kinds[k].fn, &cp);
        }
    }
}

/* The breaker as a word, with the time left when open: "open 12s". "-"
 * when the status has no breaker fields (an older sluiced). */
static void fmt_breaker(char *b, size_t n, const json_t *o) {
    const char *st = json_string_value(json_object_get(o, "breaker_state"));
    if (!st) {
        snprintf(b, n, "-");
        return;
    }
    double left = num(o, "breaker_open_ms");
    if (!strcmp(st, "open") && isfinite(left) && left > 0) {
        char t[24];
        fmt_ms(t, sizeof(t), left);
        snprintf(b, n, "open %s", t);
    } else {
        snprintf(b, n, "%s", st);
    }
}

/* The members' table of each group: one row per member, from its status
 * (rows[] by names[]; a member whose status failed shows "?"). */
static void print_groups(const status_plan *pl, json_t *const *rows, json_t *const *prev, const config *cfg,
                         double local_dt, int top, int below) {
    if (pl->ngroups == 0) return;
    if (below) printf("\n");
    printf("%-20s %-20s %2s %-10s %9s %8s %-12s %8s %9s %6s %6s", "GROUP", "MEMBER", "#", "TAGS", "EFF.RPM", "BACKLOG",
           "BREAKER", "QUOTA.OUT", "GRANTED", "SHED", "429s");
    if (top) printf(" %8s", "GRANTS/S");
    printf("\n");
    for (int g = 0; g < pl->ngroups; g++) {
        const status_group *sg = &pl->groups[g];
        for (int m = 0; m < sg->nmembers; m++) {
            int i = 0;
            while (i < pl->n && strcmp(pl->names[i], sg->members[m]) != 0) i++;
            const json_t *o = i < pl->n ? rows[i] : NULL;
            char tags[64] = "-", eff[24], backlog[24], breaker[32], qout[24], granted[24], shed[24], thr[24];
            const struct config_deployment *d = cfg ? config_deployment(cfg, sg->members[m]) : NULL;
            for (size_t t = 0, used = 0; d && t < d->ntags; t++) {
                int w = snprintf(tags + used, sizeof(tags) - used, "%s%s", t ? "," : "", d->tags[t]);
                if (w < 0 || (size_t)w >= sizeof(tags) - used) break;
                used += (size_t)w;
            }
            if (!o) {
                printf("%-20s %-20s %2d %-10s %9s\n", m ? "" : sg->name, sg->members[m], m, tags, "?");
                continue;
            }
            fmt_num(eff, sizeof(eff), num(o, "effective_rpm"));
            fmt_ms(backlog, sizeof(backlog), fmax(num(o, "requests_backlog_ms"), num(o, "tokens_backlog_ms")));
            fmt_breaker(breaker, sizeof(breaker), o);
            fmt_ms(qout, sizeof(qout), num(o, "quota_out_ms"));
            fmt_num(granted, sizeof(granted), num(o, "granted_total"));
            fmt_num(shed, sizeof(shed), num(o, "shed_total"));
            fmt_num(thr, sizeof(thr), num(o, "settled_throttled"));
            printf("%-20s %-20s %2d %-10s %9s %8s %-12s %8s %9s %6s %6s", m ? "" : sg->name, sg->members[m], m, tags,
                   eff, backlog, breaker, qout, granted, shed, thr);
            if (top) {
                const json_t *p = prev ? prev[i] : NULL;
                double v = rate(o, p, "granted_total", sample_dt(o, p, local_dt));
                char gr[24];
                if (isfinite(v)) snprintf(gr, sizeof(gr), "%.1f", v);
                else snprintf(gr, sizeof(gr), "-");
                printf(" %8s", gr);
            }
            printf("\n");
        }
    }
}

/* The deployments table (rows shown only), then their lanes and tenants.
 * Returns 1 when it printed anything. */
static int print_table(json_t *const *rows, json_t *const *prev, const int *show, int n, double local_dt, int daemon,
                       int top) {
    int any = 0, health = 0;
    for (int i = 0; i < n; i++) {
        any |= rows[i] != NULL && show[i];
        health |= rows[i] != NULL && show[i] && json_object_get(rows[i], "breaker_state") != NULL;
    }
    if (!any) return 0;
    if (daemon) printf("%-7s ", "MODE");
    printf("%-20s %8s %9s %9s %7s %8s %5s %5s %6s %10s %9s %6s %6s", "DEPLOYMENT", "RPM", "EFF.RPM", "TPM", "PAUSED",
           "BACKLOG", "OUT", "RETRY", "AGENTS", "TODAY.REQ", "GRANTED", "SHED", "429s");
    if (health) printf(" %-12s %9s", "BREAKER", "QUOTA.OUT");
    if (top) printf(" %14s %8s %7s", "GRANTS/S:QUOTA", "SHEDS/S", "429s/S");
    printf("\n");
    for (int i = 0; i < n; i++) {
        const json_t *o = rows[i];
        if (!o || !show[i]) continue;
        char rpm[24], eff[24], tpm[24], paused[24], backlog[24], out[24], retry[24], agents[24], today[24], granted[24],
            shed[24], thr[24];
        fmt_num(rpm, sizeof(rpm), num(o, "rpm"));
        fmt_num(eff, sizeof(eff), num(o, "effective_rpm"));
        double t = num(o, "tpm");
        fmt_num(tpm, sizeof(tpm), t > 0 ? t : NAN);
        fmt_ms(paused, sizeof(paused), num(o, "paused_ms"));
        double bl = fmax(num(o, "requests_backlog_ms"), num(o, "tokens_backlog_ms"));
        fmt_ms(backlog, sizeof(backlog), bl);
        fmt_num(out, sizeof(out), num(o, "outstanding_grants"));
        fmt_num(retry, sizeof(retry), num(o, "retry_balance"));
        fmt_num(agents, sizeof(agents), num(o, "live_agents"));
        /* Today's requests are counted only with a daily limit: "-"
         * rather than a 0 that reads as "nothing sent". */
        int daily = num(o, "rpd") > 0 || num(o, "tpd") > 0;
        fmt_num(today, sizeof(today), daily ? num(o, "today_requests") : NAN);
        fmt_num(granted, sizeof(granted), num(o, "granted_total"));
        fmt_num(shed, sizeof(shed), num(o, "shed_total"));
        fmt_num(thr, sizeof(thr), num(o, "settled_throttled"));
        if (daemon)
            printf("%-7s ",
                   json_string_value(json_object_get(o, "mode")) ? json_string_value(json_object_get(o, "mode")) : "?");
        printf("%-20s %8s %9s %9s %7s %8s %5s %5s %6s %10s %9s %6s %6s",
               json_string_value(json_object_get(o, "deployment")) ? json_string_value(json_object_get(o, "deployment"))
                                                                   : "?",
               rpm, eff, tpm, paused, backlog, out, retry, agents, today, granted, shed, thr);
        if (health) {
            char breaker[32], qout[24];
            fmt_breaker(breaker, sizeof(breaker), o);
            fmt_ms(qout, sizeof(qout), num(o, "quota_out_ms"));
            printf(" %-12s %9s", breaker, qout);
        }
        if (top) {
            const json_t *p = prev ? prev[i] : NULL;
            double dt = sample_dt(o, p, local_dt);
            double g = rate(o, p, "granted_total", dt), q = num(o, "effective_rpm") / 60.0;
            char gq[40], sr[24], tr[24];
            if (isfinite(g)) snprintf(gq, sizeof(gq), "%.1f:%.1f", g, q);
            else snprintf(gq, sizeof(gq), "-");
            double sv = rate(o, p, "shed_total", dt), tv = rate(o, p, "settled_throttled", dt);
            if (isfinite(sv)) snprintf(sr, sizeof(sr), "%.1f", sv);
            else snprintf(sr, sizeof(sr), "-");
            if (isfinite(tv)) snprintf(tr, sizeof(tr), "%.1f", tv);
            else snprintf(tr, sizeof(tr), "-");
            printf(" %14s %8s %7s", gq, sr, tr);
        }
        if (daemon && json_object_get(o, "redis") &&
            strcmp(json_string_value(json_object_get(o, "redis")), "connected") != 0)
            printf("  (Redis unreachable: %s)", json_string_value(json_object_get(o, "redis_error")));
        printf("\n");
    }
    print_classes(rows, prev, show, n, local_dt, top);
    return 1;
}

static void print_json(const status_plan *pl, json_t *const *rows, json_t *const *prev, double local_dt,
                       const char *source, int top) {
    int n = pl->n;
    json_t *doc = json_pack("{sss[]}", "source", source, "deployments");
    json_t *arr = json_object_get(doc, "deployments");
    /* Groups: their members, whose rows are among the deployments. */
    json_t *groups = doc && pl->ngroups ? json_array() : NULL;
    for (int g = 0; groups && g < pl->ngroups; g++) {
        json_t *ms = json_array();
        for (int m = 0; ms && m < pl->groups[g].nmembers; m++)
            json_array_append_new(ms, json_string(pl->groups[g].members[m]));
        json_array_append_new(groups,
                              json_pack("{ssso}", "group", pl->groups[g].name, "members", ms ? ms : json_null()));
    }
    if (groups) json_object_set_new(doc, "groups", groups);
    for (int i = 0; doc && i < n; i++) {
        if (!rows[i]) continue;
        if (top) {
            const json_t *p = prev ? prev[i] : NULL;
            double dt = sample_dt(rows[i], p, local_dt);
            json_t *rates = json_object();
            const char *ks[][2] = {{"granted_total", "grants_per_s"},
                                   {"shed_total", "sheds_per_s"},
                                   {"settled_throttled", "throttled_per_s"},
                                   {"settled_ok", "ok_per_s"}};
            for (size_t k = 0; rates && k < sizeof(ks) / sizeof(ks[0]); k++) {
                double v = rate(rows[i], p, ks[k][0], dt);
                json_object_set_new(rates, ks[k][1], isfinite(v) ? json_real(v) : json_null());
            }
            json_object_set_new(rates, "quota_per_s", json_real(num(rows[i], "effective_rpm") / 60.0));
            json_object_set_new(rows[i], "rates", rates);
        }
        json_array_append(arr, rows[i]);
    }
    char *text = doc ? json_dumps(doc, top ? JSON_COMPACT : JSON_INDENT(2)) : NULL;
    if (text) printf("%s\n", text);
    free(text);
    json_decref(doc);
}

/* ---- the command ------------------------------------------------------------------ */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Samples every name into rows. Returns 0, or 1 after reporting an unknown
 * deployment or an error (*fatal: the source failed, stop). */
static int sample(status_src *s, const char *cmd, char **names, int n, json_t **rows, int *fatal) {
    int rc = 0;
    *fatal = 0;
    for (int i = 0; i < n; i++) {
        char err[512] = "";
        json_decref(rows[i]);
        rows[i] = NULL;
        int r = fetch(s, names[i], &rows[i], err, sizeof(err));
        if (r == 1) {
            int in_cfg = s->cfg && config_deployment(s->cfg, names[i]);
            fprintf(stderr, "sluice %s: unknown deployment '%s' (%s)\n", cmd, names[i],
                    s->sock  ? "sluiced does not have it"
                    : in_cfg ? "in the config, but no limits in Redis yet: start sluiced or a run with it"
                             : "not a deployment or group of the config, and no limits in Redis");
            rc = 1;
        } else if (r < 0) {
            fprintf(stderr, "sluice %s: %s: %s\n", cmd, names[i], err);
            rc = 1;
            *fatal = 1;
            break;
        }
    }
    return rc;
}

static int status_main(const char *cmd, int top, int argc, char **argv) {
    status_cli cli = {0};
    cli.interval_ms = 1000;
    run_args a;
    if (run_args_split(cmd, status_flags, STATUS_NFLAGS, NULL, argc, argv, &a) != 0) return 2;
    if (cli_parse(cmd, status_flags, STATUS_NFLAGS, &cli, a.nflags, a.flags) != 0) {
        run_args_free(&a);
        return 2;
    }
    if (cli.help) {
        status_usage(stdout, cmd);
        run_args_free(&a);
        return 0;
    }
    if (!cli.config && !cli.socket) {
        cli.config = cli_default_config();
        if (!cli.config) {
            fprintf(stderr, "sluice %s: --config FILE (or SLUICE_CONFIG) or --socket PATH is required\n", cmd);
            run_args_free(&a);
            return 2;
        }
    }
    int code = 0;
    config *cfg = NULL;
    char err[1024];
    status_src s = {0};
    char **names = NULL, **owned = NULL;
    int n = 0, nowned = 0;
    json_t **rows = NULL, **prev = NULL;
    status_plan pl = {0};
    status_group *dgroups = NULL; /* --socket without a config: the daemon's groups */
    int ndgroups = 0;
    if (cli.config && config_load_flags(cli.config, CONFIG_LOAD_NO_PROXY_SECRETS, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice %s: %s\n", cmd, err);
        code = 1;
        goto out;
    }
    s.cfg = cfg;
    s.sock = cli.socket;
    snprintf(s.window, sizeof(s.window), "%lld", cfg ? cfg->agent.heartbeat_ms * 3 : 3000LL);
    if (s.sock) {
        s.c = redisConnectUnixWithTimeout(s.sock, ms_tv(1000));
        if (!s.c || s.c->err) {
            fprintf(stderr, "sluice %s: sluiced at %s: %s\n", cmd, s.sock, s.c ? s.c->errstr : "out of memory");
            code = 1;
            goto out;
        }
        redisSetTimeout(s.c, ms_tv(5000));
    } else {
        s.c = redis_open(&cfg->redis, err, sizeof(err));
        if (!s.c) {
            fprintf(stderr, "sluice %s: %s\n", cmd, err);
            code = 1;
            goto out;
        }
    }
    /* The groups known: the config's, or the daemon's. */
    if (!cfg && daemon_groups(&s, &dgroups, &ndgroups, err, sizeof(err)) != 0) {
        fprintf(stderr, "sluice %s: %s\n", cmd, err);
        code = 1;
        goto out;
    }
    int oom = 0;
    if (a.npos > 0) {
        /* A group named shows its members' table; a deployment its row. */
        for (int i = 0; i < a.npos && !oom; i++) {
            status_group g;
            const struct config_group *cg = cfg ? config_group(cfg, a.pos[i]) : NULL;
            const status_group *dg = NULL;
            for (int k = 0; !cfg && k < ndgroups && !dg; k++)
                if (!strcmp(dgroups[k].name, a.pos[i])) dg = &dgroups[k];
            if (cg) group_from_config(cg, &g);
            if (cg || dg) oom = plan_add_group(&pl, cg ? &g : dg) != 0;
            else oom = plan_add(&pl, a.pos[i], 1) != 0;
        }
    } else if (cfg) {
        for (size_t i = 0; i < cfg->ndeployments && !oom; i++) oom = plan_add(&pl, cfg->deployments[i].name, 1) != 0;
        for (size_t i = 0; i < cfg->ngroups && !oom; i++) {
            status_group g;
            group_from_config(&cfg->groups[i], &g);
            oom = plan_add_group(&pl, &g) != 0;
        }
    } else if (daemon_names(&s, &owned, &nowned, err, sizeof(err)) == 0) {
        for (int i = 0; i < nowned && !oom; i++) oom = !owned[i] || plan_add(&pl, owned[i], 1) != 0;
        for (int i = 0; i < ndgroups && !oom; i++) oom = plan_add_group(&pl, &dgroups[i]) != 0;
    } else {
        fprintf(stderr, "sluice %s: %s\n", cmd, err);
        code = 1;
        goto out;
    }
    names = pl.names;
    n = pl.n;
    rows = calloc((size_t)n + 1, sizeof(json_t *));
    prev = calloc((size_t)n + 1, sizeof(json_t *));
    if (oom || !rows || !prev || (n > 0 && !names)) {
        fprintf(stderr, "sluice %s: out of memory\n", cmd);
        code = 1;
        goto out;
    }
    const char *source = s.sock ? "sluiced" : "redis";
    int fatal = 0;
    if (!top) {
        code = sample(&s, cmd, names, n, rows, &fatal);
        if (!fatal) {
            if (cli.json) {
                print_json(&pl, rows, NULL, 0, source, 0);
            } else {
                int below = print_table(rows, NULL, pl.show, n, 0, s.sock != NULL, 0);
                print_groups(&pl, rows, NULL, cfg, 0, 0, below);
                /* Names asked for that are all unknown: the error alone. */
                int found = a.npos == 0;
                for (int i = 0; i < n && !found; i++) found = rows[i] != NULL;
                if (found) print_budgets(&s);
            }
        }
        goto out;
    }
    int tty = isatty(1);
    code = sample(&s, cmd, names, n, prev, &fatal);
    double t_prev = mono_s();
    for (long long frame = 0; !fatal && (cli.iterations == 0 || frame < cli.iterations); frame++) {
        struct timespec ts = {(time_t)(cli.interval_ms / 1000), (long)(cli.interval_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
        code = sample(&s, cmd, names, n, rows, &fatal);
        if (fatal) break;
        double t_now = mono_s();
        if (cli.json) {
            print_json(&pl, rows, prev, t_now - t_prev, source, 1);
        } else {
            time_t now = time(NULL);
            struct tm tm;
            char when[32];
            gmtime_r(&now, &tm);
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
            if (tty) printf("\033[H\033[2J");
            else if (frame > 0) printf("\n");
            printf("sluice top  %s  from %s%s%s  every %lld ms  (Ctrl-C to quit)\n\n", when, source, s.sock ? " " : "",
                   s.sock ? s.sock : "", cli.interval_ms);
            int below = print_table(rows, prev, pl.show, n, t_now - t_prev, s.sock != NULL, 1);
            print_groups(&pl, rows, prev, cfg, t_now - t_prev, 1, below);
            print_budgets(&s);
        }
        fflush(stdout);
        json_t **swap = prev;
        prev = rows;
        rows = swap;
        t_prev = t_now;
    }
out:
    for (int i = 0; i < n; i++) {
        if (rows) json_decref(rows[i]);
        if (prev) json_decref(prev[i]);
    }
    free(rows);
    free(prev);
    for (int i = 0; i < nowned; i++) free(owned[i]);
    free(owned);
    plan_free(&pl);
    free(dgroups);
    if (s.c) redisFree(s.c);
    config_free(cfg);
    run_args_free(&a);
    return code;
}

int cmd_status(int argc, char **argv) { return status_main("status", 0, argc, argv); }

int cmd_top(int argc, char **argv) { return status_main("top", 1, argc, argv); }
