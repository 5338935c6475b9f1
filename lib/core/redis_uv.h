/* redis_uv: hiredis' async context on a libuv loop, as hiredis'
 * adapters/libuv.h does, with the fix hiredis made after 0.14 (redis/hiredis
 * #624): a poll error is handed to hiredis instead of being dropped. With
 * Debian 12's hiredis 0.14.1 adapter, a connect to a closed port (ECONNREFUSED
 * arrives as a poll error) was never reported: the connection waited for its
 * connect timeout, so every reconnect during an outage cost a second.
 * (Found by the soak harness, docs/reliability.md.) */
#ifndef SLUICE_REDIS_UV_H
#define SLUICE_REDIS_UV_H

#include <hiredis/async.h>
#include <uv.h>

/* Attaches ac to loop. REDIS_OK, or REDIS_ERR (already attached, or out of
 * memory, or the socket cannot be polled). */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop);

#endif
