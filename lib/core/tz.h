/* tz: a time zone's UTC offsets, read from the system's tz database (a
 * TZif file, RFC 8536, under /usr/share/zoneinfo), for the day boundaries
 * of daily limits (Gemini's requests per day reset at midnight Pacific
 * time) and budgets in a configured zone.
 *
 * Reads the version 2+ 64-bit data block (the version 1 block of a file
 * without one) and, past its last transition, the footer's POSIX TZ rule
 * ("PST8PDT,M3.2.0,M11.1.0"; the Mm.w.d form, which every current zone
 * uses). Never touches the process' TZ or calls tzset(): a library must
 * not change process-global state. No globals; a loaded zone is immutable
 * and may be shared between threads. */
#ifndef SLUICE_TZ_H
#define SLUICE_TZ_H

#include <stddef.h>

typedef struct tz_zone tz_zone;

/* Loads the zone called name ("UTC", "America/Los_Angeles": a relative
 * path of letters, digits and / _ - + only) from dir (NULL:
 * /usr/share/zoneinfo). Returns 0 and a new zone in *out, or -1 with
 * *out = NULL and a message in err (a missing file, a bad name, a file
 * that is not TZif). */
int tz_load(const char *dir, const char *name, tz_zone **out, char *err, size_t errlen);

/* Frees z; NULL is a no-op. */
void tz_free(tz_zone *z);

/* The zone's offset from UTC at t (ms since the epoch), in ms: local time
 * = t + offset. */
long long tz_offset_ms(const tz_zone *z, long long t_ms);

/* The first change of offset after t (ms), or -1 when there is none. */
long long tz_next_change_ms(const tz_zone *z, long long t_ms);

/* The offsets from from_ms to to_ms as "off0,t1,off1,t2,off2,...": off0
 * in force at from_ms, then each change at t_i (ms since the epoch) to
 * off_i (ms), ascending. The form lua/common.lua's sl_day reads. Returns
 * the length written (snprintf-style: >= n means it did not fit). */
int tz_changes(const tz_zone *z, long long from_ms, long long to_ms, char *buf, size_t n);

#endif
