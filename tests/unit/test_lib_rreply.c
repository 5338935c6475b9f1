/* Unit tests for lib/core/rreply: the RESP2 reply parser of libsluice's daemon
 * client. Every reply type, replies split at every byte, trailing bytes
 * left for the next reply, and malformed or oversized input rejected
 * before allocation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rreply.h"

static rreply *parse_all(const char *s, size_t len, size_t *used) {
    rreply *r = NULL;
    char err[128];
    int rc = rreply_parse(s, len, &r, used, err, sizeof(err));
    if (rc != 1) fail_msg("parse of %zu bytes returned %d (%s)", len, rc, err);
    return r;
}

static void test_types(void **state) {
    size_t used;
    rreply *r = parse_all("+OK\r\n", 5, &used);
    assert_int_equal(r->type, RREPLY_STATUS);
    assert_string_equal(r->str, "OK");
    assert_int_equal(used, 5);
    rreply_free(r);

    r = parse_all("-SHED rpm retry-after-ms=1500\r\n", 31, &used);
    assert_int_equal(r->type, RREPLY_ERROR);
    assert_string_equal(r->str, "SHED rpm retry-after-ms=1500");
    rreply_free(r);

    r = parse_all(":-42\r\n", 6, &used);
    assert_int_equal(r->type, RREPLY_INTEGER);
    assert_int_equal(r->integer, -42);
    rreply_free(r);

    r = parse_all("$5\r\na\0b\r\n\r\n", 11, &used);
    assert_int_equal(r->type, RREPLY_BULK);
    assert_int_equal(r->len, 5);
    assert_memory_equal(r->str, "a\0b\r\n", 5);
    rreply_free(r);

    r = parse_all("$0\r\n\r\n", 6, &used);
    assert_int_equal(r->type, RREPLY_BULK);
    assert_int_equal(r->len, 0);
    assert_string_equal(r->str, "");
    rreply_free(r);

    r = parse_all("$-1\r\n", 5, &used);
    assert_int_equal(r->type, RREPLY_NIL);
    rreply_free(r);
    r = parse_all("*-1\r\n", 5, &used);
    assert_int_equal(r->type, RREPLY_NIL);
    rreply_free(r);
    r = parse_all("*0\r\n", 4, &used);
    assert_int_equal(r->type, RREPLY_ARRAY);
    assert_int_equal(r->elements, 0);
    rreply_free(r);
}

static const char grant[] = "*3\r\n$8\r\ngpt-4o:7\r\n:1250\r\n:400\r\n";

static void test_array_and_split(void **state) {
    size_t len = strlen(grant), used;
    rreply *r = parse_all(grant, len, &used);
    assert_int_equal(used, len);
    assert_int_equal(r->type, RREPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    assert_string_equal(r->element[0]->str, "gpt-4o:7");
    assert_int_equal(r->element[1]->integer, 1250);
    assert_int_equal(r->element[2]->integer, 400);
    rreply_free(r);
    /* Any prefix is "need more", consuming nothing. */
    for (size_t i = 0; i < len; i++) {
        rreply *p = (rreply *)1;
        size_t u = 99;
        assert_int_equal(rreply_parse(grant, i, &p, &u, NULL, 0), 0);
        assert_null(p);
        assert_int_equal(u, 0);
    }
}

static void test_pipelined(void **state) {
    const char two[] = "+OK\r\n:1\r\n+PON";
    size_t used;
    rreply *r = parse_all(two, sizeof(two) - 1, &used);
    assert_int_equal(used, 5);
    rreply_free(r);
    r = parse_all(two + used, sizeof(two) - 1 - used, &used);
    assert_int_equal(r->integer, 1);
    assert_int_equal(used, 4);
    rreply_free(r);
}

static void test_nested(void **state) {
    const char *s = "*2\r\n*2\r\n+a\r\n:1\r\n*1\r\n$1\r\nb\r\n";
    size_t used;
    rreply *r = parse_all(s, strlen(s), &used);
    assert_int_equal(r->elements, 2);
    assert_int_equal(r->element[0]->elements, 2);
    assert_string_equal(r->element[1]->element[0]->str, "b");
    rreply_free(r);
}

static void expect_bad(const char *s, size_t len) {
    rreply *r = NULL;
    size_t used = 0;
    char err[128] = "";
    int rc = rreply_parse(s, len, &r, &used, err, sizeof(err));
    if (rc != -1) fail_msg("'%.*s' returned %d, wanted -1", (int)len, s, rc);
    assert_null(r);
    assert_true(err[0] != '\0');
}

static void test_malformed(void **state) {
    expect_bad("?x\r\n", 4);
    expect_bad("+OK\rX", 5);
    expect_bad(":12a\r\n", 6);
    expect_bad(":\r\n", 3);
    expect_bad(":1234567890123456789\r\n", 22); /* more than 18 digits */
    expect_bad("$-2\r\n", 5);
    expect_bad("$3\r\nabcXY", 9);
    expect_bad("*-5\r\n", 5);
    expect_bad("$2000000\r\n", 10); /* over RREPLY_MAX_BULK, before any data */
    expect_bad("*100000\r\n", 9);   /* over RREPLY_MAX_ELEMENTS */
    expect_bad("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 40); /* depth */
    /* A bad element inside an array is found even after good ones. */
    expect_bad("*2\r\n:1\r\n!\r\n", 11);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),  cmocka_unit_test(test_array_and_split), cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_nested), cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
