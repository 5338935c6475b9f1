/* memory: the daemon's own memory, for INFO, and giving back what the
 * allocator keeps.
 *
 * glibc's malloc keeps freed memory in its arenas and returns only the
 * top of the heap to the system, so after a burst (thousands of callers
 * queued while Redis was stopped, a cut, a slow provider) the resident set
 * stays at the burst's high-water mark though the heap in use fell back.
 * memory_maybe_trim() returns the free pages (malloc_trim) when the free
 * part of the heap is both large and a large part of it, at most once per
 * interval: the resident set then follows the heap in use. Elsewhere than
 * glibc the heap figures are -1 and nothing is trimmed. */
#ifndef SLUICE_MEMORY_H
#define SLUICE_MEMORY_H

#include <stdint.h>

typedef struct memory_stats {
    long long rss_bytes;      /* resident set (/proc/self/statm), -1 if unknown */
    long long heap_in_use;    /* bytes allocated and not freed (arenas and mmapped chunks) */
    long long heap_free;      /* bytes free in the arenas, kept by the allocator */
    long long heap_mmapped;   /* of heap_in_use, in chunks mmapped on their own */
    unsigned long long trims; /* malloc_trim calls made */
    long long trimmed_bytes;  /* resident bytes they gave back, in total */
} memory_stats;

/* The figures now (trims and trimmed_bytes from the trimmer's state). */
void memory_sample(memory_stats *out);

/* At most once per MEMORY_TRIM_INTERVAL_MS of now (ms, any monotonic
 * clock): trims when at least MEMORY_TRIM_MIN_FREE bytes are free and,
 * the first time, a quarter of the heap; after that, when the resident
 * set beyond the heap in use grew by MEMORY_TRIM_MIN_FREE since the last
 * trim. Keeps its count in *st. Returns 1 when it trimmed. */
#define MEMORY_TRIM_INTERVAL_MS 10000
#define MEMORY_TRIM_MIN_FREE (256 * 1024)
typedef struct memory_trimmer {
    uint64_t last_ms;
    unsigned long long trims;
    long long trimmed_bytes;
    long long slack_after; /* resident bytes beyond the heap in use after the last trim */
} memory_trimmer;
int memory_maybe_trim(memory_trimmer *st, uint64_t now_ms);

#endif
