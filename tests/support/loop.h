/* loop: runs a test's libuv loop for a bounded time.
 *
 * loop_run_until() returns as soon as done(arg) holds (a bound, not a
 * sleep); loop_run_for() runs the loop for a fixed pacing step. Both close
 * their timer before returning, so a caller may call them back to back. */
#ifndef SLUICE_LOOP_H
#define SLUICE_LOOP_H

#include <stdint.h>
#include <uv.h>

/* Runs loop until done(arg) or ms pass; returns done(arg). */
int loop_run_until(uv_loop_t *loop, int (*done)(void *arg), void *arg, uint64_t ms);

/* Runs loop for ms. */
void loop_run_for(uv_loop_t *loop, uint64_t ms);

#endif
