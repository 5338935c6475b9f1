/* libFuzzer target: the scripts as a fleet uses them (tests/support/
 * prop_sim.c), with the input bytes as every choice the simulated callers
 * make: what they reserve, when they send (up to the jitter late), cancel,
 * what they used, 429s, hard-quota errors, pauses. Invariants: replayed
 * through the provider's documented accounting (provider_model.c) the
 * fleet's calls are never refused, in any dimension, for Azure's profile
 * or Anthropic's (the first byte picks it); a shed never moves the
 * schedule. A redis-server is started once (LLVMFuzzerInitialize) on a
 * private socket and stopped at exit; every input runs on a deployment of
 * its own.
 *
 * Its corpus is kept in tests/fuzz/corpus/fuzz_prop (tests/fuzz.sh). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prop_sim.h"
#include "redis_fixture.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static redis_fixture fx;
static redisContext *rc;

static void stop_redis(void) {
    if (rc) redisFree(rc);
    redis_fixture_stop(&fx);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (redis_fixture_start(&fx, 0) != 0 || !(rc = redis_fixture_connect(&fx))) {
        fprintf(stderr, "fuzz_prop: cannot start redis-server\n");
        exit(1);
    }
    atexit(stop_redis);
    return 0;
}

typedef struct bytes {
    const uint8_t *p;
    size_t n, at;
} bytes;

/* Eight bytes a choice; past the end, zeros (the simulation still ends:
 * its steps are bounded). */
static uint64_t next(void *ud) {
    bytes *b = ud;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | (b->at < b->n ? b->p[b->at++] : 0);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static unsigned long long runs;
    if (size < 2) return 0;
    char dep[48];
    snprintf(dep, sizeof(dep), "fz%llu", runs++);
    prop_cfg cfg = {.dep = dep,
                    .profile = data[0] & 1 ? PM_ANTHROPIC : PM_AZURE,
                    .callers = 1 + data[1] % 8,
                    .events = 300,
                    .refund_tokens = -1,
                    .refund_input = -1,
                    .refund_output = -1,
                    .jitter_ms = -1,
                    .late_ms = -1};
    bytes b = {data + 2, size - 2, 0};
    prop_stats st;
    char err[256];
    if (prop_run(rc, &cfg, next, &b, &st, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_prop: %s\n", err);
        abort();
    }
    for (int d = 0; d < PM_DIMS; d++)
        if (st.rejections[d]) {
            fprintf(stderr, "fuzz_prop: the provider refuses %zu calls in %s (first at %.3f)\n", st.rejections[d],
                    pm_dim_name(d), st.first_rejection[d]);
            abort();
        }
    if (st.shed_changed) {
        fprintf(stderr, "fuzz_prop: %zu sheds moved the schedule\n", st.shed_changed);
        abort();
    }
    /* Keep the Redis of a long session small: this input's keys go. */
    redisReply *r = redisCommand(rc, "EVAL %s 0 %s",
                                 "for _, k in ipairs(redis.call('KEYS', 'sluice:{' .. ARGV[1] .. '}:*')) do "
                                 "redis.call('DEL', k) end return 1",
                                 dep);
    if (r) freeReplyObject(r);
    return 0;
}
