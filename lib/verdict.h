/* verdict: helpers shared by verdict.c and curl.c for the versioned
 * structs of sluice.h and the meaning of one provider response. */
#ifndef SLUICE_LIB_VERDICT_H
#define SLUICE_LIB_VERDICT_H

#include <stddef.h>

#include "sluice.h"
#include "usage_rec.h"

/* Copies the caller's versioned struct in (at most its size) over a full
 * one already holding the defaults, and a full one out (at most the
 * caller's size, keeping the caller's size field). */
void verdict_read(void *full, size_t full_size, const void *in);
void verdict_write(void *out, const void *full, size_t full_size);

/* The API edge of the usage record: the public sl_usage (a caller's
 * versioned struct, read and written within its size) to and from the
 * internal usage_rec (lib/core/usage_rec.h). Read: in NULL or unsized is
 * all unknown; a negative count is -1; cache_write, which sl_usage does
 * not carry, is -1. Write: cache_write is dropped. */
void verdict_usage_read(usage_rec *out, const sl_usage *in);
void verdict_usage_write(sl_usage *out, const usage_rec *in);

/* opts with every default applied (in may be NULL). */
void verdict_opts(sl_call_opts *full, const sl_call_opts *in);

/* The verdict for one response into a full struct. */
void verdict_compute(int status, int timed_out, const char *body, size_t body_len, const sl_header *h, size_t nh,
                     long long cap_ms, sl_verdict *v);

#endif
