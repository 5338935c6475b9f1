/* test_memory: the daemon's memory figures and trimmer (agent/memory.c).
 *
 * Built without the sanitizers even in the sanitized build
 * (tests/CMakeLists.txt): AddressSanitizer brings its own allocator, and
 * what is tested here is glibc's. The property: after a burst of small
 * allocations mostly freed (a queue of callers that drained), the freed
 * memory stays resident, the heap figures say it is free, and one trim
 * gives it back; the trimmer keeps to its interval and leaves a heap with
 * little free alone. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"

enum { BLOCKS = 40000, BLOCK = 512, KEEP_EVERY = 50 };

static void test_figures(void **state) {
    (void)state;
    memory_stats m;
    memory_sample(&m);
    assert_true(m.rss_bytes > 0);
    assert_true(m.heap_in_use > 0);
    assert_true(m.heap_free >= 0);
    /* An allocation shows in the heap in use. */
    char *p = malloc(1 << 20);
    assert_non_null(p);
    memset(p, 1, 1 << 20);
    memory_stats n;
    memory_sample(&n);
    assert_true(n.heap_in_use >= m.heap_in_use + (1 << 20));
    free(p);
}

/* A burst: every empty place of blocks gets a block, touched. */
static void burst(char **blocks) {
    for (int i = 0; i < BLOCKS; i++)
        if (!blocks[i]) {
            blocks[i] = malloc(BLOCK);
            assert_non_null(blocks[i]);
            memset(blocks[i], i & 0xff, BLOCK);
        }
}

/* The burst drains, but one block in 50 lives on: the arena's top cannot
 * shrink past them, so free() gives nothing back. */
static void drain(char **blocks) {
    for (int i = 0; i < BLOCKS; i++)
        if (i % KEEP_EVERY) {
            free(blocks[i]);
            blocks[i] = NULL;
        }
}

static void test_trim_gives_back_a_drained_burst(void **state) {
    (void)state;
    static char *blocks[BLOCKS];
    memory_stats before;
    memory_sample(&before);
    burst(blocks);
    memory_stats peak;
    memory_sample(&peak);
    drain(blocks);
    memory_stats drained;
    memory_sample(&drained);
    long long bytes = (long long)BLOCKS * BLOCK;
    print_message("  RSS: %lld kB before, %lld kB at the peak, %lld kB drained; heap in use %lld kB, free %lld kB\n",
                  before.rss_bytes / 1024, peak.rss_bytes / 1024, drained.rss_bytes / 1024, drained.heap_in_use / 1024,
                  drained.heap_free / 1024);
    assert_true(peak.rss_bytes - before.rss_bytes >= bytes * 8 / 10);
    assert_true(drained.rss_bytes >= peak.rss_bytes - bytes / 10); /* still resident */
    assert_true(drained.heap_free >= bytes * 8 / 10);              /* though free */

    memory_trimmer t = {0};
    assert_int_equal(memory_maybe_trim(&t, 1000000), 1);
    memory_stats trimmed;
    memory_sample(&trimmed);
    print_message("  after one trim: RSS %lld kB, %lld kB given back\n", trimmed.rss_bytes / 1024,
                  t.trimmed_bytes / 1024);
    assert_int_equal(t.trims, 1);
    assert_true(t.trimmed_bytes >= bytes * 7 / 10);
    assert_true(trimmed.rss_bytes <= drained.rss_bytes - bytes * 7 / 10);
    /* Within the interval: not again, whatever is free. */
    assert_int_equal(memory_maybe_trim(&t, 1000000 + MEMORY_TRIM_INTERVAL_MS - 1), 0);
    assert_int_equal(t.trims, 1);
    /* After it, with nothing new resident: left alone. */
    assert_int_equal(memory_maybe_trim(&t, 1000000 + MEMORY_TRIM_INTERVAL_MS), 0);
    assert_int_equal(t.trims, 1);
    /* A second burst drains: resident again, trimmed again. */
    burst(blocks);
    drain(blocks);
    memory_stats again;
    memory_sample(&again);
    assert_true(again.rss_bytes >= trimmed.rss_bytes + bytes * 7 / 10);
    assert_int_equal(memory_maybe_trim(&t, 1000000 + 2 * MEMORY_TRIM_INTERVAL_MS), 1);
    memory_stats trimmed2;
    memory_sample(&trimmed2);
    print_message("  a second burst: RSS %lld kB drained, %lld kB after the second trim\n", again.rss_bytes / 1024,
                  trimmed2.rss_bytes / 1024);
    assert_int_equal(t.trims, 2);
    assert_true(trimmed2.rss_bytes <= again.rss_bytes - bytes * 7 / 10);
    for (int i = 0; i < BLOCKS; i++) free(blocks[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_trim_gives_back_a_drained_burst),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
