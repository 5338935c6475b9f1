/* rrouter: routes the engine's script calls to the right Redis node.
 *
 * With one Redis (redis.url) it is a thin wrapper around one rconn. With
 * Redis Cluster (redis.cluster: seed nodes) it routes itself, because
 * hiredis 0.14 has no cluster client: the CRC16 hash slot of the
 * deployment's {tag} picks the master from a slot map read with CLUSTER
 * SLOTS; a MOVED reply updates the map and resends; an ASK reply resends
 * once to the target with ASKING; when a slot has no reachable master the
 * map is rediscovered from the seeds and the known nodes every second
 * until a master (a promoted replica) serves it again. Scripts are loaded
 * on each node when it connects (rconn). One rconn per master.
 *
 * Readiness is per slot: rrouter_ready(key) says whether the node serving
 * that key is connected, so a dead node sends only its deployments to
 * local fallback. Single-threaded, on the loop's thread. */
#ifndef SLUICE_RROUTER_H
#define SLUICE_RROUTER_H

#include "rconn.h"

typedef struct rrouter rrouter;

/* CRC16 (XMODEM) hash slot of a key, honouring {hash tags}: 0..16383. */
unsigned rrouter_key_slot(const char *key, size_t len);

/* up: a node became ready or the slot map changed (the engine then writes
 * limits where needed). down: a node was lost (why: the reason). */
/* The topology comes from cfg: cfg->cluster seeds (Redis Cluster), or
 * cfg->sentinel_master with cfg->sentinels (Sentinel), else one Redis at
 * cfg's address. cfg supplies auth and timeouts; strings are copied. With
 * Sentinel the router asks the sentinels for the master's address (no AUTH
 * on sentinel connections), connects to it, and asks again whenever the
 * master is lost or answers READONLY (it was demoted), so it follows a
 * failover. */
int rrouter_new(uv_loop_t *loop, const config_redis *cfg, rconn_events ev, void *ud, rrouter **out);
void rrouter_start(rrouter *r);

/* Like rconn_script, routed by keys[0]. Returns SL_EUNAVAIL (without
 * calling cb) when no connected node serves the slot. A redirection the
 * router cannot follow reaches cb as an error reply starting with MOVED,
 * ASK, TRYAGAIN or CLUSTERDOWN: the caller should retry shortly. */
int rrouter_script(rrouter *r, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                   rconn_reply_cb cb, void *arg);

/* A script over nkeys keys of several deployments (a group's members):
 * one Redis or Sentinel only, where every key lives on one server;
 * SL_EINVAL with Redis Cluster unless every key is in one slot (the
 * budgets'); a redirect is not followed (it reaches cb as an error). */
int rrouter_script_n(rrouter *r, script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                     rconn_reply_cb cb, void *arg);

/* 1 when the node serving key is connected and ready. */
int rrouter_ready(const rrouter *r, const char *key);

/* 1 when any node is connected. */
int rrouter_any_ready(const rrouter *r);

/* "single", "cluster" or "sentinel". */
const char *rrouter_mode(const rrouter *r);

/* 1 when an error reply is a cluster redirection or transient cluster
 * state (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), or a demoted master (READONLY):
 * retry, do not fall back. */
int rrouter_is_redirect(const char *err);

const char *rrouter_last_error(const rrouter *r);

/* Counters summed over all nodes, plus redirects followed. */
void rrouter_get_stats(const rrouter *r, rconn_stats *out, unsigned long long *redirects,
                       unsigned long long *map_refreshes, size_t *nodes);

/* Closes every node; done (optional) runs when all are closed. */
void rrouter_close(rrouter *r, void (*done)(void *arg), void *arg);

#endif
