/* ledger: figures from `sluice mock`'s ledger (docs/mock.md) over time
 * windows, for the tests that judge a fleet by what the provider accepted
 * and when (test_partition, the soak).
 *
 * The ledger's times are milliseconds since the mock started on
 * CLOCK_MONOTONIC, the clock of proc_now_ms(); ledger_clock_offset()
 * measures the difference once, so a test can place its own events (a
 * cut, a kill) on the ledger's time line.
 *
 * Depends on jansson and mock_fixture. Functions never print. */
#ifndef SLUICE_LEDGER_H
#define SLUICE_LEDGER_H

#include <stddef.h>

#include <jansson.h>

#include "mock_fixture.h"

/* deployments.<dep>.accept_ms of a ledger as a malloc'd array (in time
 * order, as the mock lists them) of *n times; NULL with *n = 0 when there
 * are none. */
double *ledger_accepts(const json_t *ledger, const char *dep, size_t *n);

/* Accepts in [from, to). t sorted. */
size_t ledger_count(const double *t, size_t n, double from, double to);

/* The most accepts in any window [s, s + w) that starts at an accept in
 * [from, to) (the maximum over all windows starting there is always at
 * one that starts at an accept). *at gets that window's start (-1 when
 * none). */
size_t ledger_max_window(const double *t, size_t n, double w, double from, double to, double *at);

/* The same as a multiple of a quota that may change over time: quota(s,
 * s + w, ud) is what the provider allowed in that window (the integral of
 * its rate). Returns the largest count / quota of the windows starting at
 * an accept in [from, to); *at, *count, *quota describe that window. */
double ledger_max_window_ratio(const double *t, size_t n, double w, double from, double to,
                               double (*quota)(double s, double e, void *ud), void *ud, double *at, size_t *count,
                               double *quota_out);

/* local = ledger + *offset, where local is proc_now_ms(): measured with
 * GET /stats (its now_ms against the local time halfway through the
 * request). Returns 0, or -1 when the mock did not answer. *err_ms gets
 * half the request's round trip, the bound of the error. */
int ledger_clock_offset(const mock_fixture *m, double *offset, double *err_ms);

#endif
