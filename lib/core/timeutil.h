/* timeutil: the wall clock and the time limits the engine, the daemon and
 * the library share. Scheduling runs on the loop's monotonic clock
 * (uv_now); the wall clock is only for what people read (started, last
 * reload, mode since) and what crosses machines. */
#ifndef SLUICE_TIMEUTIL_H
#define SLUICE_TIMEUTIL_H

/* The longest pause one settle may impose on a deployment (24 h): one bad
 * header must not stop a deployment for days, so a Retry-After or reset
 * beyond it is cut to this. */
#define SLUICE_PAUSE_MAX_MS 86400000LL

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
long long wall_clock_ms(void);

#endif
