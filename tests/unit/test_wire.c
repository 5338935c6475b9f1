/* Unit tests for lib/core/wire: each encoder's arguments, word for word,
 * as the scripts' headers document them, and each decoder on replies
 * written by hand in RESP (parsed by hiredis' own reader): the shapes the
 * scripts give, and the ones they do not (refused, never misread). The
 * script tests run the same layouts against the scripts themselves. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "wire.h"

/* A reply from RESP text (the caller frees). */
static redisReply *resp(const char *text) {
    redisReader *r = redisReaderCreate();
    assert_non_null(r);
    assert_int_equal(redisReaderFeed(r, text, strlen(text)), REDIS_OK);
    void *out = NULL;
    assert_int_equal(redisReaderGetReply(r, &out), REDIS_OK);
    assert_non_null(out);
    redisReaderFree(r);
    return out;
}

/* The arguments joined with '|'. */
static void joined(const wire_args *a, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < a->argc && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "|" : "", a->argv[i]);
}

static void test_estimate_format(void **state) {
    (void)state;
    char buf[64];
    wire_estimate x = {.tokens = 1200};
    wire_estimate_format(&x, buf, sizeof(buf));
    assert_string_equal(buf, "1200");
    x = (wire_estimate){.tokens = 1300, .input = 300, .output = 1000, .split = 1};
    wire_estimate_format(&x, buf, sizeof(buf));
    assert_string_equal(buf, "300+1000");
    x.exact = 1;
    wire_estimate_format(&x, buf, sizeof(buf));
    assert_string_equal(buf, "=300+1000");
}

static void test_reserve_args(void **state) {
    (void)state;
    char buf[512];
    wire_args a;
    wire_args_init(&a);
    wire_reserve_begin(&a, "@agent-1/250");
    wire_estimate x = {.tokens = 100};
    wire_reserve_item(&a, &x, 5000, -1, NULL, NULL);
    x = (wire_estimate){.input = 20, .output = 30, .split = 1, .exact = 1};
    wire_reserve_item(&a, &x, 0, -1, NULL, NULL);
    /* How long it waited, after its max wait. */
    x = (wire_estimate){.tokens = 40};
    wire_reserve_item(&a, &x, 4200, 800, NULL, NULL);
    assert_int_equal(wire_args_done(&a, WIRE_TIMED), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "@agent-1/250|3|100|5000|=20+30|0|40|4200:800|@timed");
    assert_int_equal(a.argc, 9);
    wire_args_free(&a);

    /* Quads (lanes or tenants), a dry run without the agent. */
    wire_args_init(&a);
    wire_reserve_begin(&a, NULL);
    x = (wire_estimate){.tokens = 7};
    wire_reserve_item(&a, &x, 10, 0, "interactive", "default");
    assert_int_equal(wire_args_done(&a, WIRE_DRY), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "1|7|10:0|interactive|default|@dry");
    wire_args_free(&a);

    /* The agent filled in last, into a place kept first. */
    wire_args_init(&a);
    size_t who = wire_slot(&a);
    wire_reserve_begin(&a, NULL);
    x = (wire_estimate){.tokens = 9};
    wire_reserve_item(&a, &x, 50, -1, NULL, NULL);
    wire_fill(&a, who, "@late/100");
    assert_int_equal(wire_args_done(&a, WIRE_TIMED), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "@late/100|1|9|50|@timed");
    wire_args_free(&a);

    /* Many items: the storage grows under the pointers already given. */
    wire_args_init(&a);
    wire_reserve_begin(&a, "@a");
    for (int i = 0; i < 300; i++) {
        x = (wire_estimate){.tokens = i};
        wire_reserve_item(&a, &x, 100000 + i, -1, "lane-with-a-long-name", "tenant-with-a-long-name");
    }
    assert_int_equal(wire_args_done(&a, WIRE_DRY | WIRE_TIMED), 0);
    assert_int_equal(a.argc, 2 + 4 * 300 + 2);
    assert_string_equal(a.argv[1], "300");
    assert_string_equal(a.argv[2 + 4 * 299], "299");
    assert_string_equal(a.argv[3 + 4 * 299], "100299");
    assert_string_equal(a.argv[a.argc - 2], "@dry");
    assert_string_equal(a.argv[a.argc - 1], "@timed");
    wire_args_free(&a);
}

static void test_group_args(void **state) {
    (void)state;
    char buf[512];
    wire_args a;
    wire_args_init(&a);
    wire_group_begin(&a, "@g", 3, 200, "priority");
    wire_estimate x = {.tokens = 50};
    wire_group_item(&a, &x, 1000, 35, "", "default", "2,1,3");
    x = (wire_estimate){.tokens = 60};
    wire_group_item(&a, &x, 900, -1, "", "default", "1");
    assert_int_equal(wire_args_done(&a, WIRE_TIMED), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "@g|group|3|200|priority|2|50|1000:35||default|2,1,3|60|900||default|1|@timed");
    wire_args_free(&a);
}

static void test_settle_args(void **state) {
    (void)state;
    char buf[512];
    wire_args a;
    wire_args_init(&a);
    wire_settle_begin(&a, "@s/100");
    usage_rec u = {.tokens = 130, .input = 100, .output = 30, .cache_read = 40, .cache_write = -1};
    engine_seen seen;
    engine_seen_init(&seen);
    seen.limit[ENGINE_DIM_REQUESTS] = 60;
    seen.remaining[ENGINE_DIM_REQUESTS] = 59;
    seen.remaining[ENGINE_DIM_OUTPUT] = 800;
    wire_settle_item(&a, "17", &u, ENGINE_OK, -1, &seen);
    usage_rec only = {.tokens = 90, .input = -1, .output = -1, .cache_read = -1, .cache_write = -1};
    wire_settle_item(&a, "18", &only, ENGINE_THROTTLED, 2500, NULL);
    wire_settle_item(&a, "19", NULL, ENGINE_CANCELLED, -7, NULL);
    assert_int_equal(wire_args_done(&a, WIRE_TIMED), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "@s/100|feedback|3|17|100+30+40|ok|-1|r=60/59,o=/800|18|90|throttled|2500|-|19|-1|"
                             "cancelled|-1|-|@timed");
    wire_args_free(&a);
}

static void test_read_reserve(void **state) {
    (void)state;
    /* {now_us, paused, backlogs, shift "total:log:at", grant, defer, shed,
     * script_us}. */
    redisReply *r = resp("*9\r\n:1700000000000000\r\n:0\r\n:1500\r\n:900\r\n$13\r\n12:0.25:17000\r\n"
                         "*4\r\n:1\r\n:41\r\n:120\r\n:300\r\n"
                         "*3\r\n:2\r\n$4\r\nlane\r\n:80\r\n"
                         "*3\r\n:0\r\n$3\r\nrpm\r\n:-1\r\n"
                         ":57\r\n");
    wire_reserve_reply rr;
    assert_int_equal(wire_read_reserve(r, 3, &rr), 0);
    assert_true(rr.now_us == 1700000000000000LL);
    assert_int_equal(rr.paused_ms, 0);
    assert_int_equal(rr.requests_backlog_ms, 1500);
    assert_int_equal(rr.tokens_backlog_ms, 900);
    assert_true(rr.shift.total_ms == 12 && rr.shift.retime_log == 0.25 && rr.shift.retime_at_ms == 17000);
    assert_int_equal(rr.script_us, 57);
    wire_verdict v;
    assert_int_equal(wire_read_verdict(rr.items, 0, 0, 0, &v), 0);
    assert_int_equal(v.kind, WIRE_GRANT);
    assert_int_equal(v.id, 41);
    assert_int_equal(v.wait_ms, 120);
    assert_int_equal(v.tokens, 300);
    assert_int_equal(v.member, -1);
    assert_int_equal(wire_read_verdict(rr.items, 1, 0, 0, &v), 0);
    assert_int_equal(v.kind, WIRE_DEFER);
    assert_string_equal(v.reason, "lane");
    assert_int_equal(v.after_ms, 80);
    assert_int_equal(wire_read_verdict(rr.items, 2, 0, 0, &v), 0);
    assert_int_equal(v.kind, WIRE_SHED);
    assert_string_equal(v.reason, "rpm");
    assert_int_equal(v.after_ms, -1);
    /* Read as the wrong call: refused, not misread. */
    assert_int_equal(wire_read_reserve(r, 2, &rr), -1);
    assert_int_equal(wire_read_reserve(r, 5, &rr), -1);
    assert_int_equal(wire_read_group(r, 3, &(wire_group_reply){0}), -1);
    freeReplyObject(r);

    /* Untimed, a plain number as the shift. */
    r = resp("*6\r\n:1\r\n:250\r\n:0\r\n:0\r\n:40\r\n*3\r\n:0\r\n$6\r\npaused\r\n:250\r\n");
    assert_int_equal(wire_read_reserve(r, 1, &rr), 0);
    assert_int_equal(rr.script_us, -1);
    assert_int_equal(rr.paused_ms, 250);
    assert_true(rr.shift.total_ms == 40 && rr.shift.retime_at_ms == 0);
    freeReplyObject(r);

    /* An error, or nothing, is no reply. */
    r = resp("-ERR sluice: unknown deployment\r\n");
    assert_int_equal(wire_read_reserve(r, 1, &rr), -1);
    freeReplyObject(r);
    assert_int_equal(wire_read_reserve(NULL, 1, &rr), -1);
}

static void test_read_verdict_shapes(void **state) {
    (void)state;
    /* Items a plain call never gives: a grant short of its tokens, a kind
     * unknown, a kind as a string, a member where none is due. */
    redisReply *r = resp("*4\r\n"
                         "*3\r\n:1\r\n:41\r\n:120\r\n"
                         "*3\r\n:3\r\n$3\r\nrpm\r\n:1\r\n"
                         "*3\r\n$1\r\n1\r\n:41\r\n:120\r\n"
                         "*4\r\n:0\r\n$3\r\nrpm\r\n:5\r\n:2\r\n");
    const redisReply *const *items = (const redisReply *const *)r->element;
    wire_verdict v;
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(wire_read_verdict(items, i, 0, 0, &v), -1);
        assert_int_equal(v.kind, -1);
    }
    freeReplyObject(r);

    /* Group verdicts: the plain shape with the member (1-based) added. */
    r = resp("*5\r\n:99\r\n*5\r\n:1\r\n:7\r\n:0\r\n:12\r\n:2\r\n*4\r\n:2\r\n$3\r\ntpm\r\n:30\r\n:3\r\n"
             "*3\r\n:0\r\n$5\r\nquota\r\n:1000\r\n*4\r\n:1\r\n:7\r\n:0\r\n:12\r\n");
    wire_group_reply gr;
    assert_int_equal(wire_read_group(r, 4, &gr), 0);
    assert_int_equal(gr.now_us, 99);
    assert_int_equal(gr.script_us, -1);
    assert_int_equal(wire_read_verdict(gr.items, 0, 0, 1, &v), 0);
    assert_int_equal(v.kind, WIRE_GRANT);
    assert_int_equal(v.member, 1);
    assert_int_equal(v.id, 7);
    assert_int_equal(v.tokens, 12);
    assert_int_equal(wire_read_verdict(gr.items, 1, 0, 1, &v), 0);
    assert_int_equal(v.kind, WIRE_DEFER);
    assert_int_equal(v.member, 2);
    assert_string_equal(v.reason, "tpm");
    assert_int_equal(wire_read_verdict(gr.items, 2, 0, 1, &v), 0);
    assert_int_equal(v.kind, WIRE_SHED);
    assert_int_equal(v.member, -1);
    assert_int_equal(v.after_ms, 1000);
    /* A group grant without its member. */
    assert_int_equal(wire_read_verdict(gr.items, 3, 0, 1, &v), -1);
    freeReplyObject(r);

    /* A dry run: the wait to the slot last, after the member if any. */
    r = resp("*3\r\n*4\r\n:2\r\n$4\r\nlane\r\n:30\r\n:450\r\n*5\r\n:2\r\n$4\r\nlane\r\n:30\r\n:1\r\n:450\r\n"
             "*4\r\n:0\r\n$3\r\nrpm\r\n:9\r\n:-1\r\n");
    items = (const redisReply *const *)r->element;
    assert_int_equal(wire_read_verdict(items, 0, WIRE_DRY, 0, &v), 0);
    assert_int_equal(v.dry_wait_ms, 450);
    assert_int_equal(v.member, -1);
    assert_int_equal(wire_read_verdict(items, 1, WIRE_DRY, 1, &v), 0);
    assert_int_equal(v.dry_wait_ms, 450);
    assert_int_equal(v.member, 0);
    assert_int_equal(wire_read_verdict(items, 2, WIRE_DRY, 0, &v), 0);
    assert_int_equal(v.dry_wait_ms, -1);
    assert_int_equal(v.after_ms, 9);
    assert_int_equal(wire_read_verdict(items, 0, 0, 0, &v), -1);
    freeReplyObject(r);
}

static void test_read_settle_and_rates(void **state) {
    (void)state;
    /* {now, paused, scale, shift, 2 items, rates, script_us}. */
    redisReply *r = resp("*8\r\n:5\r\n:0\r\n$3\r\n0.5\r\n:0\r\n:1\r\n:1\r\n"
                         "*10\r\n$8\r\nrequests\r\n$2\r\n60\r\n$2\r\n55\r\n$1\r\n3\r\n$1\r\n0\r\n"
                         "$8\r\nestimate\r\n$4\r\n1.25\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\n0\r\n"
                         ":812\r\n");
    wire_settle_reply s;
    assert_int_equal(wire_read_settle(r, 2, &s), 0);
    assert_true(s.rate_scale == 0.5);
    assert_int_equal(s.has_shift, 1);
    assert_int_equal(s.script_us, 812);
    wire_rate rt;
    size_t pos = 0;
    assert_int_equal(wire_rate_next(&s, &pos, &rt), 1);
    assert_string_equal(rt.name, "requests");
    assert_true(rt.limit == 60 && rt.effective == 55 && rt.outside == 3 && rt.held == 0);
    assert_int_equal(wire_rate_next(&s, &pos, &rt), 1);
    assert_string_equal(rt.name, "estimate");
    assert_true(rt.limit == 1.25);
    assert_int_equal(wire_rate_next(&s, &pos, &rt), 0);
    freeReplyObject(r);

    /* An older script's short head: no shift, no rates. */
    r = resp("*3\r\n:5\r\n:300\r\n:1\r\n");
    assert_int_equal(wire_read_settle(r, 2, &s), 0);
    assert_int_equal(s.paused_ms, 300);
    assert_int_equal(s.has_shift, 0);
    assert_true(s.rate_scale < 0);
    assert_null(s.rates);
    pos = 0;
    assert_int_equal(wire_rate_next(&s, &pos, &rt), 0);
    freeReplyObject(r);
}

static void test_read_heartbeat(void **state) {
    (void)state;
    wire_heartbeat_reply h;
    redisReply *r = resp(":3\r\n");
    assert_int_equal(wire_read_heartbeat(r, &h), 0);
    assert_int_equal(h.live, 3);
    assert_int_equal(h.has_shift, 0);
    freeReplyObject(r);
    r = resp("*5\r\n:2\r\n:10\r\n:777\r\n:1200\r\n:0\r\n");
    assert_int_equal(wire_read_heartbeat(r, &h), 0);
    assert_int_equal(h.live, 2);
    assert_true(h.shift.total_ms == 10);
    assert_int_equal(h.now_us, 777);
    assert_int_equal(h.requests_backlog_ms, 1200);
    assert_int_equal(h.tokens_backlog_ms, 0);
    freeReplyObject(r);
    r = resp("*3\r\n:2\r\n:10\r\n:777\r\n");
    assert_int_equal(wire_read_heartbeat(r, &h), 0);
    assert_int_equal(h.requests_backlog_ms, -1);
    freeReplyObject(r);
    r = resp("*2\r\n$1\r\nx\r\n:1\r\n");
    assert_int_equal(wire_read_heartbeat(r, &h), -1);
    freeReplyObject(r);
}

static void test_other_forms_args(void **state) {
    (void)state;
    char buf[512];
    wire_args a;
    wire_args_init(&a);
    wire_configure_field(&a, "rpm", "600");
    wire_configure_field(&a, "lane.batch", "1,0,0.2");
    assert_int_equal(wire_args_done(&a, 0), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "rpm|600|lane.batch|1,0,0.2");
    wire_args_free(&a);

    wire_args_init(&a);
    wire_heartbeat(&a, "@a1/3000", "a1", 6000, 1);
    assert_int_equal(wire_args_done(&a, 0), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "@a1/3000|a1|6000|leave");
    wire_args_free(&a);

    wire_args_init(&a);
    wire_busy busy = {.fleet_requests_ms = 1500,
                      .fleet_tokens_ms = 20,
                      .sent = {12, 3400, 3000, 400},
                      .local_requests_ms = 900,
                      .local_tokens_ms = 0,
                      .share = 1.0 / 3};
    wire_heartbeat_busy(&a, "@a1/3000", "a1", 6000, &busy);
    assert_int_equal(wire_args_done(&a, 0), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "@a1/3000|a1|6000|busy|1500|20|12|3400|3000|400|900|0|0.333333");
    wire_args_free(&a);

    wire_args_init(&a);
    wire_retry_withdraw(&a);
    assert_int_equal(wire_args_done(&a, 0), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "withdraw");
    wire_args_free(&a);

    /* Budgets: reserve over two budgets, two items; a settle. */
    wire_args_init(&a);
    wire_budget_begin(&a, "reserve", 2);
    wire_budget w = {.name = "team", .currency = "USD", .daily_u = 50000000, .zone = "0", .warn_at = 0.8};
    wire_budget_one(&a, &w);
    w = (wire_budget){.name = "all", .currency = "USD", .monthly_u = 7, .total_u = 9, .zone = "3600", .warn_at = 1};
    wire_budget_one(&a, &w);
    wire_budget_items(&a);
    const unsigned char both[2] = {1, 2}, second[1] = {2};
    wire_budget_reserve_item(&a, "r1", 1234, 65000, 2, both);
    wire_budget_reserve_item(&a, "r2", 5, 1000, 1, second);
    assert_int_equal(wire_args_done(&a, 0), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "reserve|2|team|USD|50000000|0|0|0|0.8|all|USD|0|7|9|3600|1|2|r1|1234|65000|2|1|2|r2|5|"
                             "1000|1|2");
    wire_args_free(&a);
    wire_args_init(&a);
    wire_budget_settle_begin(&a);
    wire_budget_settle_item(&a, "r1", 1000, "");
    wire_budget_settle_item(&a, "r2", -3, "all");
    assert_int_equal(wire_args_done(&a, 0), 0);
    joined(&a, buf, sizeof(buf));
    assert_string_equal(buf, "settle|2|r1|1000||r2|0|all");
    wire_args_free(&a);
}

static void test_read_other_replies(void **state) {
    (void)state;
    long long allowed, balance, after;
    redisReply *r = resp("*3\r\n:0\r\n:4\r\n:250\r\n");
    assert_int_equal(wire_read_retry(r, &allowed, &balance, &after), 0);
    assert_int_equal(allowed, 0);
    assert_int_equal(balance, 4);
    assert_int_equal(after, 250);
    freeReplyObject(r);
    r = resp("*2\r\n:1\r\n:4\r\n");
    assert_int_equal(wire_read_retry(r, &allowed, &balance, &after), -1);
    freeReplyObject(r);

    /* STATUS: pairs; an integer value comes back as text; a field that is
     * not a word is skipped. */
    r = resp("*6\r\n$3\r\nrpm\r\n:600\r\n$4\r\nmode\r\n$5\r\nredis\r\n:7\r\n$1\r\nx\r\n");
    assert_int_equal(wire_status_fields(r), 3);
    const char *f, *v;
    char num[24];
    size_t pos = 0;
    assert_int_equal(wire_status_field_next(r, &pos, &f, &v, num), 1);
    assert_string_equal(f, "rpm");
    assert_string_equal(v, "600");
    assert_int_equal(wire_status_field_next(r, &pos, &f, &v, num), 1);
    assert_string_equal(f, "mode");
    assert_string_equal(v, "redis");
    assert_int_equal(wire_status_field_next(r, &pos, &f, &v, num), 0);
    freeReplyObject(r);

    /* One heartbeat call for two deployments. */
    r = resp("*2\r\n:3\r\n*5\r\n:2\r\n:0\r\n:9\r\n:100\r\n:200\r\n");
    wire_heartbeat_reply h;
    assert_int_equal(wire_read_heartbeat_of(r, 2, 0, &h), 0);
    assert_int_equal(h.live, 3);
    assert_int_equal(wire_read_heartbeat_of(r, 2, 1, &h), 0);
    assert_int_equal(h.tokens_backlog_ms, 200);
    assert_int_equal(wire_read_heartbeat_of(r, 3, 1, &h), -1);
    freeReplyObject(r);

    /* Budget verdicts: granted with a warning, shed, not now, malformed. */
    r = resp("*4\r\n*3\r\n:1\r\n:400\r\n$9\r\nteam date\r\n*6\r\n:0\r\n$4\r\nteam\r\n$3\r\nday\r\n:12\r\n:3600000\r\n"
             ":50000000\r\n*6\r\n:2\r\n$3\r\nall\r\n$5\r\nmonth\r\n:1\r\n:9\r\n:7\r\n*3\r\n:0\r\n$4\r\nteam\r\n:1\r\n");
    wire_budget_verdict bv;
    assert_int_equal(wire_read_budget_verdict(r, 4, 0, &bv), 0);
    assert_int_equal(bv.kind, WIRE_GRANT);
    assert_int_equal(bv.left_u, 400);
    assert_string_equal(bv.warn, "team date");
    assert_int_equal(wire_read_budget_verdict(r, 4, 1, &bv), 0);
    assert_int_equal(bv.kind, WIRE_SHED);
    assert_string_equal(bv.name, "team");
    assert_string_equal(bv.period, "day");
    assert_int_equal(bv.left_u, 12);
    assert_int_equal(bv.renew_ms, 3600000);
    assert_int_equal(bv.limit_u, 50000000);
    assert_int_equal(wire_read_budget_verdict(r, 4, 2, &bv), 0);
    assert_int_equal(bv.kind, WIRE_DEFER);
    assert_string_equal(bv.period, "month");
    assert_int_equal(wire_read_budget_verdict(r, 4, 3, &bv), -1);
    assert_int_equal(wire_read_budget_verdict(r, 3, 0, &bv), -1);
    freeReplyObject(r);

    /* A budget status: one hash per budget, maybe empty. */
    r = resp("*2\r\n*4\r\n$9\r\nday_spent\r\n$3\r\n120\r\n$3\r\nday\r\n$10\r\n2026-12-04\r\n*0\r\n");
    pos = 0;
    assert_int_equal(wire_budget_listed(r, 0), 1);
    assert_int_equal(wire_budget_field_next(r, 0, &pos, &f, &v), 1);
    assert_string_equal(f, "day_spent");
    assert_string_equal(v, "120");
    assert_int_equal(wire_budget_field_next(r, 0, &pos, &f, &v), 1);
    assert_string_equal(v, "2026-12-04");
    assert_int_equal(wire_budget_field_next(r, 0, &pos, &f, &v), 0);
    assert_int_equal(wire_budget_listed(r, 1), 1);
    pos = 0;
    assert_int_equal(wire_budget_field_next(r, 1, &pos, &f, &v), 0);
    assert_int_equal(wire_budget_listed(r, 2), 0);
    freeReplyObject(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_format),
        cmocka_unit_test(test_reserve_args),
        cmocka_unit_test(test_group_args),
        cmocka_unit_test(test_settle_args),
        cmocka_unit_test(test_read_reserve),
        cmocka_unit_test(test_read_verdict_shapes),
        cmocka_unit_test(test_read_settle_and_rates),
        cmocka_unit_test(test_read_heartbeat),
        cmocka_unit_test(test_other_forms_args),
        cmocka_unit_test(test_read_other_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
