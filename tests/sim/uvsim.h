/* uvsim: a libuv stand-in on virtual time, for running lib/core (the real
 * engine, compiled a second time: tests/sim/CMakeLists.txt) many engines to
 * a process, deterministically.
 *
 * It implements exactly the libuv functions lib/core calls (uv_now,
 * uv_hrtime, uv_timer_*, uv_idle_*, uv_check_*, uv_poll_*, uv_close,
 * uv_is_active, uv_timer_get_due_in) plus uv_loop_init / uv_loop_close for
 * the simulator, on the real <uv.h> types, so the engine's sources compile
 * unchanged. A simulated executable must never link the real libuv (the
 * names would clash): tests/sim/CMakeLists.txt checks it.
 *
 * One virtual clock (microseconds) is shared by every loop. A loop turn
 * follows libuv's phases (src/unix/core.c, uv_run): update the loop's
 * cached time (uv_now, ms), run the due timers in (due time, start order),
 * run the idle handles, then poll (deliver the ready events), run the check
 * handles, then the close callbacks (last closed first, as libuv). A loop
 * turns only when it has something to do (a due timer, an active idle
 * handle, a ready poll event, a handle closing), as a real loop sleeps in
 * its poll otherwise. Loops due at the same instant turn in an order drawn
 * from the seed (uvsim_reset), as a network breaks the ties of processes
 * that act at the same moment: in creation order, the first agent won
 * every tie and, in the scoreboard's rows with give-backs, finished its
 * calls in a third of the time of the last.
 *
 * Poll handles stand on real sockets, but readiness is decided here:
 * WRITABLE is ready whenever it is asked for (the peer, an uvsim_io, drains
 * every write at once), READABLE when the io layer said so
 * (uvsim_poll_wake) and the socket really has bytes or an end. The io layer
 * (tests/sim/simredis.c) sees each socket opened, written and closed
 * through the uvsim_io hooks.
 *
 * Faults: a loop may be frozen until a time (a descheduled process: its
 * timers fire late, all at once) or halted for good (a killed process).
 *
 * Not thread-safe; one simulation per process at a time. */
#ifndef SLUICE_UVSIM_H
#define SLUICE_UVSIM_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <uv.h>

/* Sets the virtual clock to start_us (no loop may exist) and seeds the
 * sub-microsecond part of uvsim_clock_gettime. */
void uvsim_reset(uint64_t start_us, uint64_t seed);

/* The virtual clock. */
uint64_t uvsim_now_us(void);

/* Runs every loop and every scheduled function until the next thing to do
 * lies after t_us, then sets the clock to t_us. Returns 0, or -1 when a
 * loop keeps turning at one instant (a livelock: 1e6 turns). */
int uvsim_run_until(uint64_t t_us);

/* Calls fn(arg) at virtual time t_us (now if earlier), before the loops'
 * turns of that instant; functions of one instant run in the order they
 * were scheduled. */
typedef void (*uvsim_fn)(void *arg);
int uvsim_at(uint64_t t_us, uvsim_fn fn, void *arg);

/* Forgets every function scheduled and not yet run (their args are the
 * scheduler's to free). */
void uvsim_drop_scheduled(void);

/* The io layer under poll handles: open when a poll handle is initialised
 * on fd, wrote after a WRITABLE callback ran (the handle's owner may have
 * written), close when the handle is closed (its fd is still open then). */
typedef struct uvsim_io {
    void (*open)(void *ud, uv_poll_t *h, int fd);
    void (*wrote)(void *ud, uv_poll_t *h);
    void (*close)(void *ud, uv_poll_t *h);
} uvsim_io;
void uvsim_set_io(const uvsim_io *io, void *ud);

/* Tells h's loop that h's socket may be readable (bytes or an end were put
 * there): checked in the loop's next poll phase. */
void uvsim_poll_wake(uv_poll_t *h);

/* Freezes loop until until_us (its timers and events wait, then run in one
 * turn); UINT64_MAX halts it for good. 0 thaws it. */
void uvsim_loop_freeze(uv_loop_t *loop, uint64_t until_us);

/* A mutation knob for tests: every timer started from now on fires
 * skew_ms from its due time; negative (early) only for timers longer than
 * that (a release at its slot, not the engine's short retries, which
 * would spin at one instant). 0 is libuv's behaviour. */
void uvsim_set_timer_skew_ms(int64_t skew_ms);

/* The same for the timers of one loop only (added to the global skew). */
void uvsim_loop_timer_skew_ms(uv_loop_t *loop, int64_t skew_ms);

/* Handles of loop not yet closed (0 once everything was closed). */
int uvsim_loop_handles(uv_loop_t *loop);

/* Forgets loop and every handle still open on it, calling nothing (a
 * simulation's teardown when a loop could not be closed). */
void uvsim_loop_discard(uv_loop_t *loop);

/* Loop turns run since uvsim_reset (a figure for benchmarks). */
uint64_t uvsim_turns(void);

/* clock_gettime on the virtual clock: CLOCK_REALTIME is the virtual time
 * (start_us is an epoch time), every other clock the same; the
 * nanoseconds below the microsecond count the calls (seeded), so two
 * readings never coincide, as on a real clock. The simulated core is
 * compiled with -Dclock_gettime=uvsim_clock_gettime. */
int uvsim_clock_gettime(clockid_t id, struct timespec *ts);

/* getpid for the simulated core (-Dgetpid=uvsim_getpid): one fixed id, so
 * a seed taken from it is the same on every run. */
pid_t uvsim_getpid(void);

#endif
