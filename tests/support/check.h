/* check: a bound the reliability runs prove (test_partition's bounds of
 * issue 15, the soak's invariants): printed PASS or FAIL with its figures,
 * a failure counted in *nfail_ptr, so every bound of a run is reported
 * before the run fails. Header-only; needs <stdio.h>. */
#ifndef SLUICE_CHECK_H
#define SLUICE_CHECK_H

#include <stdio.h>

/* CHECK(&nfail, cond, printf-format, ...): one line "  PASS ..." or
 * "  FAIL ...", flushed. */
#define CHECK(nfail_ptr, cond, ...)                                                                                    \
    do {                                                                                                               \
        int ok_ = (cond);                                                                                              \
        if (!ok_) (*(nfail_ptr))++;                                                                                    \
        printf("  %s ", ok_ ? "PASS" : "FAIL");                                                                        \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        fflush(stdout);                                                                                                \
    } while (0)

#endif
