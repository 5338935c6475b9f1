/* script_test: the shared session of the tests that call the Lua scripts
 * directly (test_scripts, test_breaker, test_group_script, test_lanes_sim).
 *
 * Header-only because its helpers fail through cmocka: include it after
 * <cmocka.h>. It defines the file's fixture (`fx`, a private redis-server)
 * and blocking connection (`rc`), the group setup and teardown, and
 * configure / clock helpers. By default the server is a one-node Redis
 * Cluster that owns every slot, so a script touching keys of two slots
 * fails here as in production; define SCRIPT_TEST_CLUSTER 0 before
 * including it for a plain Redis (scripts over several deployments). */
#ifndef SLUICE_SCRIPT_TEST_H
#define SLUICE_SCRIPT_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>

#include "redis_fixture.h"
#include "script_call.h"

#ifndef SCRIPT_TEST_CLUSTER
#define SCRIPT_TEST_CLUSTER 1
#endif

static redis_fixture fx;
static redisContext *rc;

static inline int group_setup(void **state) {
    (void)state;
    if (redis_fixture_start(&fx, SCRIPT_TEST_CLUSTER) != 0) return -1;
    rc = redis_fixture_connect(&fx);
    return rc ? 0 : -1;
}

static inline int group_teardown(void **state) {
    (void)state;
    if (rc) redisFree(rc);
    redis_fixture_stop(&fx);
    return 0;
}

/* Runs configure on dep over connection c with the NULL-terminated
 * field/value pairs; fails the test on an error reply. */
static inline void configure_on(redisContext *c, const char *dep, ...) {
    const char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, dep);
    const char *a;
    while (argc < 64 && (a = va_arg(ap, const char *)) != NULL) argv[argc++] = a;
    va_end(ap);
    redisReply *r = script_call(c, SCRIPT_CONFIGURE, dep, argc, argv);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("configure %s: %s", dep, r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
}

/* Moves the scripts' clock of one deployment forward by ms (the test-only
 * limits field test_clock_offset_ms): the offset from Redis' TIME, or a
 * frozen clock's time ("=<ms>", clock_freeze), which stays frozen. */
static inline void advance_on(redisContext *c, const char *dep, double ms) {
    static const char move[] = "local v = redis.call('HGET', KEYS[1], 'test_clock_offset_ms') "
                               "if v and string.sub(v, 1, 1) == '=' then "
                               "local at = string.format('=%.3f', tonumber(string.sub(v, 2)) + tonumber(ARGV[1])) "
                               "redis.call('HSET', KEYS[1], 'test_clock_offset_ms', at) return at end "
                               "return redis.call('HINCRBYFLOAT', KEYS[1], 'test_clock_offset_ms', ARGV[1])";
    char key[160], d[48];
    snprintf(key, sizeof(key), "sluice:{%s}:limits", dep);
    snprintf(d, sizeof(d), "%f", ms);
    redisReply *r = redisCommand(c, "EVAL %s 1 %s %s", move, key, d);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("advance_on: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
}

/* Freezes the scripts' clock of one deployment at ms (test_clock_offset_ms
 * "=<ms>", lua/common.lua sl_now): a verdict that real time passing
 * between the calls, on a loaded machine, cannot change. */
static inline void clock_freeze(redisContext *c, const char *dep, double ms) {
    redisReply *r = redisCommand(c, "HSET sluice:{%s}:limits test_clock_offset_ms =%.3f", dep, ms);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    freeReplyObject(r);
}

/* A field of one of dep's hashes ("state", "limits", ...) as a number, 0
 * when absent. */
static inline double hash_num(redisContext *c, const char *dep, const char *key, const char *field) {
    redisReply *r = redisCommand(c, "HGET sluice:{%s}:%s %s", dep, key, field);
    assert_non_null(r);
    double v = r->type == REDIS_REPLY_STRING ? atof(r->str) : 0;
    freeReplyObject(r);
    return v;
}

/* A field of the status script's answer as text, in the caller's buffer;
 * fails the test when the field is missing. */
static inline const char *status_text(redisContext *c, const char *dep, const char *field, char *buf, size_t len) {
    redisReply *r = script_callv(c, SCRIPT_STATUS, dep, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("status: %s", r->str);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, field) == 0) {
            redisReply *v = r->element[i + 1];
            if (v->type == REDIS_REPLY_INTEGER) snprintf(buf, len, "%lld", v->integer);
            else snprintf(buf, len, "%s", v->str);
            freeReplyObject(r);
            return buf;
        }
    }
    freeReplyObject(r);
    fail_msg("status has no field %s", field);
    return NULL;
}

static inline double status_num(redisContext *c, const char *dep, const char *field) {
    char buf[64];
    return atof(status_text(c, dep, field, buf, sizeof(buf)));
}

static inline int dump_cmp_field(const void *a, const void *b) {
    const redisReply *x = *(redisReply *const *)a, *y = *(redisReply *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->str, y->str, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static inline void dump_hex(char *out, size_t cap, size_t *len, const char *s, size_t n) {
    for (size_t j = 0; j < n && *len + 3 < cap; j++)
        *len += (size_t)snprintf(out + *len, cap - *len, "%02x", (unsigned char)s[j]);
}

/* The contents of the keys of dep with the given suffixes, as one text
 * (the caller frees it), to prove a call changed nothing in them: a hash
 * as its field/value pairs sorted by field, any other key as its DUMP. (A
 * hash's DUMP is no fingerprint of its contents: once Redis holds it as a
 * hash table, a lookup moves its incremental rehashing on, and the DUMP
 * of unchanged contents changes with it. The limits hash is one: its
 * packed field is longer than hash-max-listpack-value.) */
static inline char *dump_keys(redisContext *c, const char *dep, const char *const *what, size_t n) {
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(out + len, cap - len, "%s=", what[i]);
        redisReply *t = redisCommand(c, "TYPE sluice:{%s}:%s", dep, what[i]);
        assert_non_null(t);
        int hash = t->type == REDIS_REPLY_STATUS && strcmp(t->str, "hash") == 0;
        freeReplyObject(t);
        if (hash) {
            redisReply *r = redisCommand(c, "HGETALL sluice:{%s}:%s", dep, what[i]);
            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_ARRAY);
            size_t np = r->elements / 2;
            redisReply **f = calloc(np ? np : 1, sizeof(*f));
            assert_non_null(f);
            /* Sorted by field; each field's value is the element after it. */
            for (size_t k = 0; k < np; k++) f[k] = r->element[2 * k];
            qsort(f, np, sizeof(*f), dump_cmp_field);
            for (size_t k = 0; k < np; k++) {
                size_t at = 0;
                while (r->element[at] != f[k]) at += 2;
                dump_hex(out, cap, &len, f[k]->str, f[k]->len);
                len += (size_t)snprintf(out + len, cap - len, ":");
                dump_hex(out, cap, &len, r->element[at + 1]->str, r->element[at + 1]->len);
                len += (size_t)snprintf(out + len, cap - len, ",");
            }
            free(f);
            freeReplyObject(r);
        } else {
            redisReply *r = redisCommand(c, "DUMP sluice:{%s}:%s", dep, what[i]);
            assert_non_null(r);
            if (r->type == REDIS_REPLY_STRING) dump_hex(out, cap, &len, r->str, r->len);
            freeReplyObject(r);
        }
        len += (size_t)snprintf(out + len, cap - len, ";");
    }
    return out;
}

#endif
