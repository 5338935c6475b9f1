/* simredis: one real redis-server on virtual time, shared by many simulated
 * engines, in a deterministic order.
 *
 * Each agent's configuration names a UNIX socket of its own
 * (simredis_agent); simredis listens there and, for each connection the
 * agent's hiredis makes, opens one of its own to the real server. Through
 * uvsim's io hooks it sees every write the engine makes at the virtual
 * time it makes it: it cuts the bytes into complete commands, sends them
 * to Redis preceded by `MSET sluice:sim:now_us <arrival> sluice:sim:cmd_us
 * <cost>` (the scripts' simulated clock, tests/sim/sim_preamble.lua), reads
 * every reply at once (blocking: one batch at Redis at a time, so Redis
 * runs the calls in the simulator's order) and hands the replies to the
 * engine's socket at the virtual time they arrive.
 *
 * Timing of a batch written at t: it reaches Redis at
 * max(t + rtt/2, when Redis finished the previous batch), Redis is busy
 * for the service time, the reply arrives rtt/2 later (never before an
 * earlier reply on the same connection). rtt is drawn per batch, uniform in
 * [rtt_min_us, rtt_max_us], from the seed.
 *
 * Faults: Redis down (every connection ends, connects are refused) and up
 * again; an agent cut (its connections end, its connects are refused) or
 * black-holed (what it writes vanishes: its calls time out).
 *
 * What is not virtual: Redis' own key expiry (PEXPIRE) runs on real time,
 * which is harmless while a run is shorter than the TTLs the scripts set
 * (10 s and more). A write larger than the socket's buffer (the connect's
 * SCRIPT LOADs) arrives in pieces the kernel's buffer size decides; they
 * are gathered into one batch (a batch is forwarded only when it ends on a
 * complete command), so neither the kernel nor the scripts' length
 * changes a run. */
#ifndef SLUICE_SIMREDIS_H
#define SLUICE_SIMREDIS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct simredis simredis;

typedef struct simredis_opts {
    const char *redis_sock; /* the real server's UNIX socket */
    const char *dir;        /* where the agents' sockets go */
    uint64_t seed;
    uint32_t rtt_min_us, rtt_max_us; /* 0, 0: 200, 1000 */
    uint32_t service_us;             /* Redis' time per batch, 0: 20 */
    uint32_t cmd_us;                 /* a script command's modelled time, 0: 2 */
} simredis_opts;

/* Installs itself as uvsim's io layer. Returns 0 or -1. */
int simredis_new(const simredis_opts *o, simredis **out);

/* Adds an agent whose loop is loop: writes the socket path its
 * configuration must name (redis.url unix://<path>) into path. Returns the
 * agent's index, or -1. */
int simredis_agent(simredis *r, uv_loop_t *loop, char *path, size_t n);

/* Redis' time per batch from now on (a slow Redis), and a script
 * command's modelled time. */
void simredis_set_service(simredis *r, uint32_t service_us, uint32_t cmd_us);
/* The round trip of every batch from now on (a slow path to Redis). */
void simredis_set_rtt(simredis *r, uint32_t rtt_min_us, uint32_t rtt_max_us);

/* Redis stopped: every connection ends, connects are refused until
 * simredis_redis_up (call it once the server answers again). */
void simredis_redis_down(simredis *r);
void simredis_redis_up(simredis *r);

/* An agent cut off (on 1) or back (on 0). */
void simredis_cut(simredis *r, int agent, int on);

/* An agent black-holed (on 1: its writes vanish) or back (0). */
void simredis_blackhole(simredis *r, int agent, int on);

typedef struct simredis_stats {
    unsigned long long batches, commands, connects, dropped;
} simredis_stats;
void simredis_get_stats(const simredis *r, simredis_stats *out);

/* Closes every socket; replies not yet delivered are dropped. NULL is a
 * no-op. */
void simredis_free(simredis *r);

#endif
