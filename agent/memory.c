/* memory: see memory.h. */
#define _GNU_SOURCE

#include "memory.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif

static long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = -1;
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (long long)sysconf(_SC_PAGESIZE);
}

static void heap(memory_stats *out) {
#ifdef HAVE_MALLINFO2
    struct mallinfo2 mi = mallinfo2();
    out->heap_in_use = (long long)(mi.uordblks + mi.hblkhd);
    out->heap_free = (long long)mi.fordblks;
    out->heap_mmapped = (long long)mi.hblkhd;
#else
    out->heap_in_use = out->heap_free = out->heap_mmapped = -1;
#endif
}

void memory_sample(memory_stats *out) {
    memset(out, 0, sizeof(*out));
    out->rss_bytes = rss_bytes();
    heap(out);
}

int memory_maybe_trim(memory_trimmer *st, uint64_t now_ms) {
    if (st->last_ms && now_ms - st->last_ms < MEMORY_TRIM_INTERVAL_MS) return 0;
    st->last_ms = now_ms;
#ifdef HAVE_MALLINFO2
    memory_stats m;
    heap(&m);
    long long before = rss_bytes();
    if (m.heap_free < MEMORY_TRIM_MIN_FREE || before < 0) return 0;
    /* The first time: a quarter of the heap free. Then: the resident set
     * beyond the heap in use grew by the minimum since the last trim (the
     * free chunks a trim gave back stay in the free count, not resident). */
    long long slack = before - m.heap_in_use;
    if (st->trims == 0 ? m.heap_free * 4 < m.heap_in_use + m.heap_free : slack - st->slack_after < MEMORY_TRIM_MIN_FREE)
        return 0;
    malloc_trim(0);
    long long after = rss_bytes();
    st->trims++;
    if (after > 0 && before > after) st->trimmed_bytes += before - after;
    st->slack_after = (after > 0 ? after : before) - m.heap_in_use;
    return 1;
#else
    return 0;
#endif
}
