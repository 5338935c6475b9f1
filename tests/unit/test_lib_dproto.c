/* Unit tests for lib/dproto: the commands libsluice sends to sluiced (exact
 * bytes) and the meaning of every reply form of docs/protocol.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dproto.h"

static void expect_bytes(resp_buf *b, const char *want) {
    assert_int_equal(b->len, strlen(want));
    assert_memory_equal(b->data, want, b->len);
    resp_buf_reset(b);
}

static void test_commands(void **state) {
    resp_buf b;
    resp_buf_init(&b);
    assert_int_equal(dproto_acquire(&b, "gpt-4o", 1200, -1, "", NULL, NULL), 0);
    expect_bytes(&b, "*4\r\n$7\r\nACQUIRE\r\n$6\r\ngpt-4o\r\n$6\r\nTOKENS\r\n$4\r\n1200\r\n");
    assert_int_equal(dproto_acquire(&b, "d", 0, 250, "batch", "acme", ""), 0);
    expect_bytes(&b, "*10\r\n$7\r\nACQUIRE\r\n$1\r\nd\r\n$6\r\nTOKENS\r\n$1\r\n0\r\n$7\r\nMAXWAIT\r\n$3\r\n250\r\n"
                     "$4\r\nLANE\r\n$5\r\nbatch\r\n$6\r\nTENANT\r\n$4\r\nacme\r\n");
    /* A group with a tag. */
    assert_int_equal(dproto_acquire(&b, "g", 5, -1, NULL, NULL, "eu"), 0);
    expect_bytes(&b, "*6\r\n$7\r\nACQUIRE\r\n$1\r\ng\r\n$6\r\nTOKENS\r\n$1\r\n5\r\n$3\r\nTAG\r\n$2\r\neu\r\n");
    /* The estimate split as the provider counts it. */
    assert_int_equal(dproto_acquire_split(&b, "claude", 0, 300, 1000, -1, NULL, NULL, NULL, 0), 0);
    expect_bytes(&b,
                 "*6\r\n$7\r\nACQUIRE\r\n$6\r\nclaude\r\n$5\r\nINPUT\r\n$3\r\n300\r\n$6\r\nOUTPUT\r\n$4\r\n1000\r\n");
    /* Counted with the provider's tokenizer: the EXACT flag (sl_request.exact). */
    assert_int_equal(dproto_acquire_split(&b, "claude", 0, 300, 1000, 250, NULL, NULL, NULL, 1), 0);
    expect_bytes(&b, "*9\r\n$7\r\nACQUIRE\r\n$6\r\nclaude\r\n$5\r\nINPUT\r\n$3\r\n300\r\n$6\r\nOUTPUT\r\n"
                     "$4\r\n1000\r\n$7\r\nMAXWAIT\r\n$3\r\n250\r\n$5\r\nEXACT\r\n");
    assert_int_equal(dproto_estimate(&b, "d", 40, -1, -1, -1, NULL, NULL, NULL, DPROTO_EXACT), 0);
    expect_bytes(&b, "*5\r\n$8\r\nESTIMATE\r\n$1\r\nd\r\n$6\r\nTOKENS\r\n$2\r\n40\r\n$5\r\nEXACT\r\n");
    /* An estimate that guesses images: the PARTIAL flag (sl_request.partial). */
    assert_int_equal(dproto_acquire_split(&b, "claude", 0, 1900, 1000, -1, NULL, NULL, NULL, DPROTO_PARTIAL), 0);
    expect_bytes(&b, "*7\r\n$7\r\nACQUIRE\r\n$6\r\nclaude\r\n$5\r\nINPUT\r\n$4\r\n1900\r\n$6\r\nOUTPUT\r\n"
                     "$4\r\n1000\r\n$7\r\nPARTIAL\r\n");
    usage_rec u = {487, 300, 187, 120, -1};
    assert_int_equal(dproto_settle_usage(&b, "claude:7", &u, SL_OUTCOME_OK, NULL, 0), 0);
    expect_bytes(&b, "*10\r\n$6\r\nSETTLE\r\n$8\r\nclaude:7\r\n$5\r\nINPUT\r\n$3\r\n300\r\n$6\r\nOUTPUT\r\n"
                     "$3\r\n187\r\n$10\r\nCACHE_READ\r\n$3\r\n120\r\n$6\r\nSTATUS\r\n$2\r\nok\r\n");
    /* The whole record goes: the cache writes too (SETTLE's CACHE_WRITE);
     * known tokens without the split go as TOKENS; nothing known, neither. */
    u.cache_write = 80;
    assert_int_equal(dproto_settle_usage(&b, "claude:8", &u, SL_OUTCOME_OK, NULL, 0), 0);
    expect_bytes(&b, "*12\r\n$6\r\nSETTLE\r\n$8\r\nclaude:8\r\n$5\r\nINPUT\r\n$3\r\n300\r\n$6\r\nOUTPUT\r\n"
                     "$3\r\n187\r\n$10\r\nCACHE_READ\r\n$3\r\n120\r\n$11\r\nCACHE_WRITE\r\n$2\r\n80\r\n"
                     "$6\r\nSTATUS\r\n$2\r\nok\r\n");
    u = USAGE_REC_UNKNOWN;
    u.tokens = 9;
    assert_int_equal(dproto_settle_usage(&b, "d:9", &u, SL_OUTCOME_OK, NULL, 0), 0);
    expect_bytes(&b, "*6\r\n$6\r\nSETTLE\r\n$3\r\nd:9\r\n$6\r\nTOKENS\r\n$1\r\n9\r\n$6\r\nSTATUS\r\n$2\r\nok\r\n");
    assert_int_equal(dproto_settle_usage(&b, "d:9", NULL, SL_OUTCOME_OK, NULL, 0), 0);
    expect_bytes(&b, "*4\r\n$6\r\nSETTLE\r\n$3\r\nd:9\r\n$6\r\nSTATUS\r\n$2\r\nok\r\n");
    sl_header h[] = {{"retry-after", "2"}};
    assert_int_equal(dproto_settle(&b, "d:5", 37, SL_OUTCOME_THROTTLED, h, 1), 0);
    expect_bytes(&b, "*9\r\n$6\r\nSETTLE\r\n$3\r\nd:5\r\n$6\r\nTOKENS\r\n$2\r\n37\r\n$6\r\nSTATUS\r\n"
                     "$9\r\nthrottled\r\n$6\r\nHEADER\r\n$11\r\nretry-after\r\n$1\r\n2\r\n");
    assert_int_equal(dproto_settle(&b, "d:L2", -1, SL_OUTCOME_CANCELLED, NULL, 0), 0);
    expect_bytes(&b, "*4\r\n$6\r\nSETTLE\r\n$4\r\nd:L2\r\n$6\r\nSTATUS\r\n$9\r\ncancelled\r\n");
    assert_int_equal(dproto_settle(&b, "d:3", 0, SL_OUTCOME_QUOTA, NULL, 0), 0);
    expect_bytes(&b, "*6\r\n$6\r\nSETTLE\r\n$3\r\nd:3\r\n$6\r\nTOKENS\r\n$1\r\n0\r\n$6\r\nSTATUS\r\n"
                     "$5\r\nquota\r\n");
    assert_int_not_equal(dproto_settle(&b, "d:1", 1, (sl_outcome)9, NULL, 0), 0);
    assert_int_not_equal(dproto_settle(&b, "d:1", 1, (sl_outcome)(SL_OUTCOME_QUOTA + 1), NULL, 0), 0);
    assert_int_equal(dproto_retry(&b, "d"), 0);
    expect_bytes(&b, "*2\r\n$5\r\nRETRY\r\n$1\r\nd\r\n");
    assert_int_equal(dproto_ping(&b), 0);
    expect_bytes(&b, "*1\r\n$4\r\nPING\r\n");
    resp_buf_free(&b);
}

static const struct {
    const char *text;
    int code;
    const char *reason;
    long long ra;
} errors[] = {
    {"SHED rpm retry-after-ms=1500", SL_ESHED, "rpm", 1500},
    {"SHED too_large retry-after-ms=-1", SL_ESHED, "too_large", -1},
    {"SHED paused retry-after-ms=0", SL_ESHED, "paused", 0},
    {"NORETRY retry budget spent, retry-after-ms=900", SL_ENORETRY, "", 900},
    {"CLOSING the agent is shutting down", SL_ECLOSING, "", -1},
    {"UNAVAIL Redis is unreachable and agent.fail is closed", SL_EUNAVAIL, "", -1},
    {"ERR unknown deployment 'x'", SL_EUNKNOWN, "", -1},
    {"ERR unknown deployment 'x' (removed by a configuration reload)", SL_EUNKNOWN, "", -1},
    {"ERR unknown lane 'x' for deployment 'd' (its lanes: interactive, batch)", SL_EINVAL, "", -1},
    {"ERR unknown deployment or group 'x'", SL_EUNKNOWN, "", -1},
    {"ERR deployment 'd' does not carry tag 'eu' (TAG applies to groups and tagged deployments)", SL_EINVAL, "", -1},
    {"SHED tag retry-after-ms=-1", SL_ESHED, "tag", -1},
    {"SHED quota retry-after-ms=3600000", SL_ESHED, "quota", 3600000},
    {"SHED breaker retry-after-ms=30000", SL_ESHED, "breaker", 30000},
    {"ERR syntax error: unknown option 'FOO'", SL_EPROTO, "", -1},
    {"SHEDDING is not a word we know", SL_EPROTO, "", -1},
    {"", SL_EPROTO, "", -1},
};

static void test_errors(void **state) {
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        char reason[24];
        long long ra = 7;
        int code = dproto_error(errors[i].text, reason, sizeof(reason), &ra);
        if (code != errors[i].code || strcmp(reason, errors[i].reason) != 0 || ra != errors[i].ra)
            fail_msg("'%s': got %d '%s' %lld", errors[i].text, code, reason, ra);
    }
}

static rreply *parse(const char *s) {
    rreply *r = NULL;
    size_t used;
    assert_int_equal(rreply_parse(s, strlen(s), &r, &used, NULL, 0), 1);
    return r;
}

static void test_acquire_replies(void **state) {
    dproto_grant g;
    char reason[24], msg[256];
    long long ra;
    rreply *r = parse("*3\r\n$8\r\ngpt-4o:7\r\n:1250\r\n:400\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_OK);
    assert_string_equal(g.id, "gpt-4o:7");
    assert_int_equal(g.waited_ms, 1250);
    assert_int_equal(g.tokens, 400);
    assert_false(g.local);
    rreply_free(r);
    r = parse("*3\r\n$9\r\ngpt-4o:L3\r\n:0\r\n:0\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_OK);
    assert_true(g.local);
    assert_string_equal(g.member, "");
    assert_string_equal(g.endpoint, "");
    rreply_free(r);
    /* A group's grant names the member and its endpoint. */
    r = parse("*5\r\n$4\r\nse:9\r\n:30\r\n:100\r\n$2\r\nse\r\n$22\r\nhttps://se.example.com\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_OK);
    assert_string_equal(g.id, "se:9");
    assert_int_equal(g.waited_ms, 30);
    assert_int_equal(g.tokens, 100);
    assert_string_equal(g.member, "se");
    assert_string_equal(g.endpoint, "https://se.example.com");
    rreply_free(r);
    r = parse("*5\r\n$4\r\nse:9\r\n:30\r\n:100\r\n$2\r\nse\r\n$0\r\n\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_OK);
    assert_string_equal(g.member, "se");
    assert_string_equal(g.endpoint, "");
    rreply_free(r);
    /* A malformed group grant is a protocol error that still names the
     * grant, so it can be given back. */
    r = parse("*5\r\n$4\r\nse:9\r\n:30\r\n:100\r\n:7\r\n$0\r\n\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_EPROTO);
    assert_string_equal(g.id, "se:9");
    rreply_free(r);
    r = parse("*4\r\n$4\r\nse:9\r\n:30\r\n:100\r\n$2\r\nse\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_EPROTO);
    rreply_free(r);
    r = parse("-SHED tpm retry-after-ms=2500\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_ESHED);
    assert_string_equal(reason, "tpm");
    assert_int_equal(ra, 2500);
    rreply_free(r);
    r = parse("-ERR unknown deployment 'nope'\r\n");
    assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_EUNKNOWN);
    assert_non_null(strstr(msg, "unknown deployment 'nope'"));
    rreply_free(r);
    /* Wrong shapes are protocol errors, never a grant. */
    const char *odd[] = {"+OK\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "*3\r\n:1\r\n:1\r\n:1\r\n",
                         "*3\r\n$1\r\na\r\n$1\r\nx\r\n:1\r\n", "*3\r\n$0\r\n\r\n:1\r\n:1\r\n"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        r = parse(odd[i]);
        assert_int_equal(dproto_acquire_reply(r, &g, reason, sizeof(reason), &ra, msg, sizeof(msg)), SL_EPROTO);
        rreply_free(r);
    }
}

static void test_retry_and_ok_replies(void **state) {
    int allowed;
    long long ra;
    char msg[256];
    rreply *r = parse(":1\r\n");
    assert_int_equal(dproto_retry_reply(r, &allowed, &ra, msg, sizeof(msg)), SL_OK);
    assert_true(allowed);
    rreply_free(r);
    r = parse(":0\r\n");
    assert_int_equal(dproto_retry_reply(r, &allowed, &ra, msg, sizeof(msg)), SL_OK);
    assert_false(allowed);
    rreply_free(r);
    r = parse("-NORETRY retry budget spent, retry-after-ms=800\r\n");
    assert_int_equal(dproto_retry_reply(r, &allowed, &ra, msg, sizeof(msg)), SL_OK);
    assert_false(allowed);
    assert_int_equal(ra, 800);
    rreply_free(r);
    r = parse("-ERR unknown deployment 'x'\r\n");
    assert_int_equal(dproto_retry_reply(r, &allowed, &ra, msg, sizeof(msg)), SL_EUNKNOWN);
    rreply_free(r);
    r = parse("+PONG\r\n");
    assert_int_equal(dproto_ok_reply(r, msg, sizeof(msg)), SL_OK);
    rreply_free(r);
    r = parse("-CLOSING bye\r\n");
    assert_int_equal(dproto_ok_reply(r, msg, sizeof(msg)), SL_ECLOSING);
    rreply_free(r);
    r = parse(":3\r\n");
    assert_int_equal(dproto_ok_reply(r, msg, sizeof(msg)), SL_EPROTO);
    rreply_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_acquire_replies),
        cmocka_unit_test(test_retry_and_ok_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
