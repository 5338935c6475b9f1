/* engine_status: a test's view of one engine's STATUS (engine_status(),
 * the same fields as sluiced's STATUS <deployment>: this agent's mode and
 * share merged with Redis' status script), read on the engine's loop.
 *
 * engine_status_field() runs the loop until the answer arrives (bounded);
 * engine_status_wait() polls a field until it has a value, running the
 * loop meanwhile, so a test waits on the condition, never on a sleep.
 * Functions must be called on the loop's thread, outside a callback. */
#ifndef SLUICE_TEST_ENGINE_STATUS_H
#define SLUICE_TEST_ENGINE_STATUS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "engine.h"

/* Copies the value of STATUS field of dep into out ("" when absent, or
 * when no answer came within 3 s). Returns 1 when the field was there. */
int engine_status_field(uv_loop_t *loop, engine *e, const char *dep, const char *field, char *out, size_t n);

/* Reads field every 10 ms until it equals want (returns 1) or ms pass
 * (returns 0; the last value read is in last, when given). */
int engine_status_wait(uv_loop_t *loop, engine *e, const char *dep, const char *field, const char *want, uint64_t ms,
                       char *last, size_t n);

#endif
