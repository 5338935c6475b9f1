#define _POSIX_C_SOURCE 200809L
#include "timeutil.h"

#include <time.h>

long long wall_clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
