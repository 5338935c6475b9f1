/* realtime: a bound on a figure of real time (a makespan against its
 * floor, how long a call took), which a loaded machine can miss without
 * anything being wrong with the code. The commit gate (tests/run) judges
 * only what load cannot change (exact counts, replays of send times
 * through the provider's bucket, bytes on the wire): there such a bound
 * is printed, with its figure, and not asserted. The reliability run
 * (tests/reliability.sh realtime, docs/reliability.md) sets
 * SLUICE_REALTIME_BOUNDS=1, and then it fails the test.
 * Header-only; include after <cmocka.h>. */
#ifndef SLUICE_REALTIME_H
#define SLUICE_REALTIME_H

#include <stdlib.h>
#include <string.h>

static inline int realtime_bounds(void) {
    const char *v = getenv("SLUICE_REALTIME_BOUNDS");
    return v && strcmp(v, "1") == 0;
}

/* assert_realtime(cond, printf-format, ...): the format says the figure
 * and the bound. */
#define assert_realtime(cond, ...)                                                                                     \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            if (realtime_bounds()) fail_msg(__VA_ARGS__);                                                              \
            print_message("  real-time bound missed (not gated here; SLUICE_REALTIME_BOUNDS=1 asserts it): ");         \
            print_message(__VA_ARGS__);                                                                                \
            print_message("\n");                                                                                       \
        }                                                                                                              \
    } while (0)

#endif
