#define _POSIX_C_SOURCE 200809L
#include "rrouter.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define NSLOTS 16384
#define MAX_NODES 64
#define MAX_REDIRECTS 3
#define REFRESH_FAST_MS 1000
#define REFRESH_SLOW_MS 30000

typedef struct rnode {
    rrouter *r;
    char host[256];
    int port;
    rconn *conn;
    int ready;
    int sentinel; /* a Sentinel, not a data node */
} rnode;

struct rrouter {
    uv_loop_t *loop;
    config_redis cfg; /* a copy: the strings node_add() reads are the router's own (user, password), the
                       * rest cleared; the caller's config may be freed (a reload) while the router lives */
    rconn_events ev;
    void *ud;
    int cluster;
    int sentinel; /* Sentinel mode */
    char master_name[128];
    int master;           /* Sentinel mode: index of the current master, -1 none */
    int asking_sentinels; /* a get-master-addr call is in flight */
    rnode nodes[MAX_NODES];
    size_t nnodes;
    short slots[NSLOTS]; /* node index per slot, -1 unknown */
    uv_timer_t refresh;
    int refreshing; /* a CLUSTER SLOTS call is in flight */
    int closing, open, started;
    void (*done)(void *);
    void *done_arg;
    char last_error[256];
    unsigned long long redirects, refreshes;
    size_t rotate; /* where the next refresh starts asking: moves on every attempt */
    size_t asked;  /* the node the refresh in flight asked (its endpoint stands for an unknown one) */
};

/* ---- CRC16 (XMODEM, polynomial 0x1021), as Redis Cluster ---------------- */

static unsigned crc16(const char *buf, size_t len) {
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

unsigned rrouter_key_slot(const char *key, size_t len) {
    /* The hash tag: the part between the first { and the next } if not
     * empty; otherwise the whole key. */
    size_t s, e;
    for (s = 0; s < len && key[s] != '{'; s++) {}
    if (s < len) {
        for (e = s + 1; e < len && key[e] != '}'; e++) {}
        if (e < len && e != s + 1) return crc16(key + s + 1, e - s - 1) & (NSLOTS - 1);
    }
    return crc16(key, len) & (NSLOTS - 1);
}

int rrouter_is_redirect(const char *err) {
    return err && (strncmp(err, "MOVED ", 6) == 0 || strncmp(err, "ASK ", 4) == 0 || strncmp(err, "TRYAGAIN", 8) == 0 ||
                   strncmp(err, "CLUSTERDOWN", 11) == 0 || strncmp(err, "READONLY", 8) == 0);
}

/* ---- nodes ------------------------------------------------------------------ */

static void refresh_soon(rrouter *r, uint64_t ms);

static void on_node_up(void *ud) {
    rnode *n = ud;
    rrouter *r = n->r;
    n->ready = 1;
    if (n->sentinel) {
        refresh_soon(r, 0);
        return;
    }
    if (r->cluster) refresh_soon(r, 0);
    if (r->ev.up) r->ev.up(r->ud);
}

/* Sentinel mode without a master to use: why (INFO's redis_last_error,
 * STATUS' redis_error, the log's "Redis unreachable"), reported once per
 * distinct reason. Nothing while a master serves. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
sentinel_fail(rrouter *r, const char *fmt, ...) {
    if (r->master >= 0 && r->nodes[r->master].ready) return;
    char why[sizeof(r->last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (!strcmp(why, r->last_error)) return;
    memcpy(r->last_error, why, sizeof(why));
    if (r->ev.down) r->ev.down(r->ud, r->last_error);
}

static void on_node_down(void *ud, const char *why) {
    rnode *n = ud;
    rrouter *r = n->r;
    n->ready = 0;
    if (n->sentinel) {
        sentinel_fail(r, "sentinel %.100s:%d: %.120s", n->host, n->port, why ? why : "down");
        return;
    }
    if (r->sentinel) refresh_soon(r, 0); /* ask the sentinels where the master went */
    snprintf(r->last_error, sizeof(r->last_error), "%.100s:%d: %.120s", n->host[0] ? n->host : "redis", n->port,
             why ? why : "down");
    if (r->cluster) refresh_soon(r, REFRESH_FAST_MS);
    if (r->ev.down) r->ev.down(r->ud, r->last_error);
}

static int node_find(rrouter *r, const char *host, int port) {
    for (size_t i = 0; i < r->nnodes; i++)
        if (r->nodes[i].port == port && strcmp(r->nodes[i].host, host) == 0) return (int)i;
    return -1;
}

/* The node for host:port, connecting to it if new. -1 when full. */
static int node_add(rrouter *r, const char *host, int port, int sentinel) {
    int i = node_find(r, host, port);
    if (i >= 0 || r->nnodes >= MAX_NODES) return i;
    rnode *n = &r->nodes[r->nnodes];
    memset(n, 0, sizeof(*n));
    n->r = r;
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    config_redis c = r->cfg;
    c.host = n->host;
    c.port = port;
    c.unix_path = "";
    /* Cluster nodes have database 0 only; a Sentinel master is the
     * redis.url's Redis moved: the database of the URL applies. */
    c.db = r->sentinel && !sentinel ? r->cfg.db : 0;
    n->sentinel = sentinel;
    rconn_events ev = {on_node_up, on_node_down};
    if (rconn_new_ex(r->loop, &c, sentinel ? RCONN_PLAIN : 0, ev, n, &n->conn) != 0) return -1;
    r->open++;
    r->nnodes++;
    if (!r->closing && r->started) rconn_start(n->conn);
    return (int)(r->nnodes - 1);
}

static int node_get(rrouter *r, const char *host, int port) { return node_add(r, host, port, 0); }

static int parse_hostport(const char *s, char *host, size_t hostlen, int *port) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= hostlen) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    if (host[0] == '[') { /* [::1]:7000 */
        size_t l = strlen(host);
        if (l < 2 || host[l - 1] != ']') return -1;
        memmove(host, host + 1, l - 2);
        host[l - 2] = '\0';
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

/* ---- the slot map ---------------------------------------------------------------- */

static void on_slots(void *arg, redisReply *reply, const char *err) {
    rrouter *r = arg;
    r->refreshing = 0;
    if (r->closing) return;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        refresh_soon(r, REFRESH_FAST_MS);
        return;
    }
    /* CLUSTER SLOTS: [[start, end, [ip, port, id], replicas...], ...] */
    int changed = 0;
    for (size_t i = 0; i < reply->elements; i++) {
        redisReply *e = reply->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
        redisReply *m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2) continue;
        /* The preferred endpoint: NULL when unknown (Redis 7's
         * cluster-preferred-endpoint-type unknown-endpoint), "?" when a
         * hostname is preferred but not set, "" from older servers: the
         * node that answered, with the port given (the CLUSTER SLOTS
         * documentation). */
        redisReply *h = m->element[0];
        if (h->type != REDIS_REPLY_STRING && h->type != REDIS_REPLY_NIL) continue;
        const char *host = h->type == REDIS_REPLY_STRING ? h->str : "";
        if (!host[0] || !strcmp(host, "?")) host = r->nodes[r->asked].host;
        int idx = node_get(r, host, (int)m->element[1]->integer);
        if (idx < 0) continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        for (long long s = lo; s <= hi && s < NSLOTS; s++) {
            if (s < 0) continue;
            if (r->slots[s] != idx) changed = 1;
            r->slots[s] = (short)idx;
        }
    }
    r->refreshes++;
    int complete = 1;
    for (int s = 0; s < NSLOTS && complete; s++)
        if (r->slots[s] < 0 || !r->nodes[r->slots[s]].ready) complete = 0;
    refresh_soon(r, complete ? REFRESH_SLOW_MS : REFRESH_FAST_MS);
    if (changed && r->ev.up) r->ev.up(r->ud);
}

/* SENTINEL get-master-addr-by-name -> [host, port]. */
static void on_master_addr(void *arg, redisReply *reply, const char *err) {
    rrouter *r = arg;
    r->asking_sentinels = 0;
    if (r->closing) return;
    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING && reply->element[1]->type == REDIS_REPLY_STRING) {
        int idx = node_get(r, reply->element[0]->str, atoi(reply->element[1]->str));
        if (idx >= 0 && idx != r->master) {
            r->master = idx; /* a failover moved the master: use the new one */
            r->refreshes++;
            if (r->nodes[idx].ready && r->ev.up) r->ev.up(r->ud);
        }
    } else {
        const rnode *s = &r->nodes[r->asked];
        const char *why = reply && reply->type == REDIS_REPLY_ERROR ? reply->str : err;
        if (why) sentinel_fail(r, "sentinel %.100s:%d: %.120s", s->host, s->port, why);
        else
            sentinel_fail(r, "sentinel %.100s:%d does not know master '%.100s' (redis.sentinel.master)", s->host,
                          s->port, r->master_name);
    }
    int ok = r->master >= 0 && r->nodes[r->master].ready;
    refresh_soon(r, ok ? 5000 : REFRESH_FAST_MS);
}

static void ask_sentinels(rrouter *r) {
    if (r->asking_sentinels) return;
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", r->master_name};
    size_t start = r->rotate++;
    for (size_t k = 0; k < r->nnodes; k++) {
        rnode *n = &r->nodes[(start + k) % r->nnodes];
        if (n->sentinel && n->ready && rconn_command(n->conn, 3, argv, on_master_addr, r) == 0) {
            r->asking_sentinels = 1;
            r->asked = (start + k) % r->nnodes;
            return;
        }
    }
    refresh_soon(r, REFRESH_FAST_MS);
}

static void on_refresh(uv_timer_t *t) {
    rrouter *r = t->data;
    if (r->sentinel) {
        if (!r->closing) ask_sentinels(r);
        return;
    }
    if (r->closing || r->refreshing) return;
    /* Ask any ready node; rotate so a node that lies does not stick. */
    static const char *argv[] = {"CLUSTER", "SLOTS"};
    size_t start = r->rotate++;
    for (size_t k = 0; k < r->nnodes; k++) {
        rnode *n = &r->nodes[(start + k) % r->nnodes];
        if (n->ready && rconn_command(n->conn, 2, argv, on_slots, r) == 0) {
            r->refreshing = 1;
            r->asked = (start + k) % r->nnodes;
            return;
        }
    }
    refresh_soon(r, REFRESH_FAST_MS);
}

static void refresh_soon(rrouter *r, uint64_t ms) {
    if ((!r->cluster && !r->sentinel) || r->closing) return;
    uint64_t due = uv_timer_get_due_in(&r->refresh);
    if (uv_is_active((uv_handle_t *)&r->refresh) && due <= ms) return;
    uv_timer_start(&r->refresh, on_refresh, ms, 0);
}

/* ---- calls ---------------------------------------------------------------------- */

typedef struct rcall_route {
    rrouter *r;
    script_id id;
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    int argc;
    char **argv;
    rconn_reply_cb cb;
    void *arg;
    int redirects;
} rcall_route;

static void route_free(rcall_route *c) {
    for (int i = 0; i < c->argc; i++) free(c->argv[i]);
    free(c->argv);
    free(c);
}

static void on_routed_reply(void *arg, redisReply *reply, const char *err);

static int route_send(rcall_route *c, int node, int flags) {
    rrouter *r = c->r;
    if (node < 0 || !r->nodes[node].ready) return SL_EUNAVAIL;
    return rconn_script_ex(r->nodes[node].conn, c->id, c->keys, c->argc, (const char **)c->argv, NULL, flags,
                           on_routed_reply, c);
}

static void on_routed_reply(void *arg, redisReply *reply, const char *err) {
    rcall_route *c = arg;
    rrouter *r = c->r;
    if (reply && reply->type == REDIS_REPLY_ERROR && c->redirects < MAX_REDIRECTS && !r->closing &&
        (strncmp(reply->str, "MOVED ", 6) == 0 || strncmp(reply->str, "ASK ", 4) == 0)) {
        /* "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" */
        int ask = reply->str[0] == 'A';
        char host[256];
        int port, slot;
        const char *sp = strchr(reply->str, ' ');
        const char *addr = sp ? strchr(sp + 1, ' ') : NULL;
        if (sp && addr && parse_hostport(addr + 1, host, sizeof(host), &port) == 0) {
            slot = atoi(sp + 1);
            int node = node_get(r, host, port);
            r->redirects++;
            c->redirects++;
            if (!ask && node >= 0 && slot >= 0 && slot < NSLOTS) {
                r->slots[slot] = (short)node;
                refresh_soon(r, 0);
            }
            if (route_send(c, node, ask ? RCONN_ASKING : 0) == 0) return;
        }
    }
    c->cb(c->arg, reply, err);
    route_free(c);
}

/* Sentinel: calls go straight to the master's rconn; a READONLY reply (the
 * master was demoted while the connection stayed up) asks the sentinels
 * again at once. */
typedef struct rcall_watch {
    rrouter *r;
    rconn_reply_cb cb;
    void *arg;
} rcall_watch;

static void on_watched_reply(void *arg, redisReply *reply, const char *err) {
    rcall_watch *w = arg;
    if (reply && reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "READONLY", 8) == 0) refresh_soon(w->r, 0);
    w->cb(w->arg, reply, err);
    free(w);
}

static int direct_send(rrouter *r, int node, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc,
                       const char **argv, rconn_reply_cb cb, void *arg) {
    if (node < 0 || !r->nodes[node].ready) return SL_EUNAVAIL;
    rconn *conn = r->nodes[node].conn;
    if (!r->sentinel) return rconn_script_n(conn, id, keys, nkeys, argc, argv, NULL, cb, arg);
    rcall_watch *w = malloc(sizeof(*w));
    if (!w) return SL_ENOMEM;
    *w = (rcall_watch){r, cb, arg};
    int rc = rconn_script_n(conn, id, keys, nkeys, argc, argv, NULL, on_watched_reply, w);
    if (rc != 0) free(w);
    return rc;
}

/* The data node serving key, or -1. */
static int node_for(const rrouter *r, const char *key) {
    if (r->sentinel) return r->master;
    if (!r->cluster) return 0;
    return r->slots[rrouter_key_slot(key, strlen(key))];
}

int rrouter_script(rrouter *r, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                   rconn_reply_cb cb, void *arg) {
    if (r->closing) return SL_EUNAVAIL;
    if (!r->cluster) return direct_send(r, node_for(r, keys[0]), id, keys, SCRIPTS_NKEYS, argc, argv, cb, arg);
    int node = r->slots[rrouter_key_slot(keys[0], strlen(keys[0]))];
    if (node < 0 || !r->nodes[node].ready) return SL_EUNAVAIL;
    rcall_route *c = calloc(1, sizeof(*c));
    if (!c) return SL_ENOMEM;
    c->argv = calloc((size_t)(argc > 0 ? argc : 1), sizeof(char *));
    if (!c->argv) {
        free(c);
        return SL_ENOMEM;
    }
    for (int i = 0; i < argc; i++) {
        c->argv[i] = strdup(argv[i]);
        c->argc = i + 1;
        if (!c->argv[i]) {
            route_free(c);
            return SL_ENOMEM;
        }
    }
    c->r = r;
    c->id = id;
    memcpy(c->keys, keys, sizeof(c->keys)); /* SCRIPTS_NKEYS rows */
    c->cb = cb;
    c->arg = arg;
    int rc = route_send(c, node, 0);
    if (rc != 0) route_free(c);
    return rc;
}

int rrouter_script_n(rrouter *r, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                     rconn_reply_cb cb, void *arg) {
    if (r->closing) return SL_EUNAVAIL;
    /* Under Cluster only keys of one slot (the budgets' {$budgets}). */
    for (int i = 1; r->cluster && i < nkeys; i++)
        if (rrouter_key_slot(keys[i], strlen(keys[i])) != rrouter_key_slot(keys[0], strlen(keys[0]))) return SL_EINVAL;
    return direct_send(r, node_for(r, keys[0]), id, keys, nkeys, argc, argv, cb, arg);
}

int rrouter_ready(const rrouter *r, const char *key) {
    int node = node_for(r, key);
    return node >= 0 && r->nodes[node].ready;
}

int rrouter_any_ready(const rrouter *r) {
    if (r->sentinel) return r->master >= 0 && r->nodes[r->master].ready;
    for (size_t i = 0; i < r->nnodes; i++)
        if (r->nodes[i].ready && !r->nodes[i].sentinel) return 1;
    return 0;
}

const char *rrouter_mode(const rrouter *r) { return r->cluster ? "cluster" : r->sentinel ? "sentinel" : "single"; }

const char *rrouter_last_error(const rrouter *r) {
    if (!r->cluster && !r->sentinel && r->nodes[0].conn) return rconn_last_error(r->nodes[0].conn);
    return r->last_error;
}

void rrouter_get_stats(const rrouter *r, rconn_stats *out, unsigned long long *redirects,
                       unsigned long long *map_refreshes, size_t *nodes) {
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < r->nnodes; i++) {
        rconn_stats s;
        rconn_get_stats(r->nodes[i].conn, &s);
        out->calls += s.calls;
        out->errors += s.errors;
        out->timeouts += s.timeouts;
        out->noscript_reloads += s.noscript_reloads;
        out->connects += s.connects;
        out->disconnects += s.disconnects;
    }
    if (redirects) *redirects = r->redirects;
    if (map_refreshes) *map_refreshes = r->refreshes;
    if (nodes) *nodes = r->nnodes;
}

/* ---- lifetime ------------------------------------------------------------------------ */

static void free_secrets(rrouter *r) {
    if (r->cfg.password) memset(r->cfg.password, 0, strlen(r->cfg.password));
    free(r->cfg.password);
    free(r->cfg.username);
}

int rrouter_new(uv_loop_t *loop, const config_redis *cfg, rconn_events ev, void *ud, rrouter **out) {
    *out = NULL;
    rrouter *r = calloc(1, sizeof(*r));
    if (!r) return SL_ENOMEM;
    r->loop = loop;
    r->cfg = *cfg;
    /* node_add() connects to nodes found later (a slot map, a failover),
     * long after the caller's config may have been replaced and freed. */
    r->cfg.url = r->cfg.host = r->cfg.unix_path = r->cfg.password_file = r->cfg.password_env = NULL;
    r->cfg.sentinel_master = NULL;
    r->cfg.cluster = r->cfg.sentinels = NULL;
    r->cfg.ncluster = r->cfg.nsentinels = 0;
    r->cfg.username = strdup(cfg->username ? cfg->username : "");
    r->cfg.password = strdup(cfg->password ? cfg->password : "");
    if (!r->cfg.username || !r->cfg.password) {
        free_secrets(r);
        free(r);
        return SL_ENOMEM;
    }
    r->ev = ev;
    r->ud = ud;
    r->cluster = cfg->ncluster > 0;
    r->sentinel = !r->cluster && cfg->sentinel_master && cfg->sentinel_master[0] && cfg->nsentinels > 0;
    r->master = -1;
    for (int s = 0; s < NSLOTS; s++) r->slots[s] = -1;
    if (!r->cluster && !r->sentinel) {
        rnode *n = &r->nodes[0];
        n->r = r;
        snprintf(n->host, sizeof(n->host), "%s", cfg->host);
        n->port = cfg->port;
        rconn_events nev = {on_node_up, on_node_down};
        int rc = rconn_new(loop, cfg, nev, n, &n->conn);
        if (rc != 0) {
            free_secrets(r);
            free(r);
            return rc;
        }
        r->nnodes = 1;
        r->open++;
    }
    uv_timer_init(loop, &r->refresh);
    r->refresh.data = r;
    r->open++; /* the refresh timer */
    char *const *addrs = r->cluster ? cfg->cluster : cfg->sentinels;
    size_t naddrs = r->cluster ? cfg->ncluster : (r->sentinel ? cfg->nsentinels : 0);
    if (r->sentinel) snprintf(r->master_name, sizeof(r->master_name), "%s", cfg->sentinel_master);
    for (size_t i = 0; i < naddrs; i++) {
        char host[256];
        int port;
        if (parse_hostport(addrs[i], host, sizeof(host), &port) != 0 || node_add(r, host, port, r->sentinel) < 0)
            snprintf(r->last_error, sizeof(r->last_error), "bad %s address '%.100s'",
                     r->cluster ? "cluster seed" : "sentinel", addrs[i]);
    }
    *out = r;
    return 0;
}

void rrouter_start(rrouter *r) {
    r->started = 1;
    for (size_t i = 0; i < r->nnodes; i++) rconn_start(r->nodes[i].conn);
    if (r->cluster || r->sentinel) refresh_soon(r, REFRESH_FAST_MS);
}

static void maybe_done(rrouter *r) {
    if (--r->open > 0) return;
    void (*done)(void *) = r->done;
    void *arg = r->done_arg;
    free_secrets(r);
    free(r);
    if (done) done(arg);
}

static void on_node_closed(void *arg) { maybe_done(arg); }

static void on_refresh_closed(uv_handle_t *h) { maybe_done(h->data); }

void rrouter_close(rrouter *r, void (*done)(void *arg), void *arg) {
    if (!r) {
        if (done) done(arg);
        return;
    }
    if (r->closing) return;
    r->closing = 1;
    r->done = done;
    r->done_arg = arg;
    uv_timer_stop(&r->refresh);
    uv_close((uv_handle_t *)&r->refresh, on_refresh_closed);
    for (size_t i = 0; i < r->nnodes; i++) rconn_close(r->nodes[i].conn, on_node_closed, r);
}
