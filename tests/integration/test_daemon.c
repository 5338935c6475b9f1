/* test_daemon: the real sluiced process against a private redis-server.
 *
 * Proves that redis-cli and a Python client (the standard socket module)
 * can acquire, settle and retry; that replies to pipelined commands come
 * back in order and a client that disconnects gives its waiting slot back;
 * that bad input (garbage, huge headers and lengths, a stalled half
 * command, unknown commands, wrong arity, too many clients) hurts nobody
 * else; that a bad configuration is refused with file:line:key and a bad
 * reload keeps the old limits while a good one applies; that SIGTERM
 * answers waiting callers, removes the socket and exits 0; the metrics
 * endpoint; and, in a build without sanitizers, a valgrind-clean session
 * (tests/valgrind.sh), RESP3 and the connection commands included. The
 * fleet tests are in test_daemon_fleet.c; HELLO, CLIENT, SELECT and the
 * stock clients (redis-py, ioredis) in test_daemon_compat.c. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <hiredis/read.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <sys/resource.h>
#include <netinet/in.h>

static redis_fixture fx;

static int group_setup(void **state) {
    if (!sluiced_path()) return -1;
    return redis_fixture_start(&fx, 0);
}

static int group_teardown(void **state) {
    harness_kill_all();
    redis_fixture_stop(&fx);
    return 0;
}

/* After every test, even a failed one: no daemon survives it. */
static int test_teardown(void **state) {
    harness_kill_all();
    return 0;
}

static void start_daemon(daemon_proc *d, const char *name, const char *agent_extra, const char *deployments) {
    daemon_init(d, fx.dir, name);
    assert_int_equal(daemon_configure(d, &fx, agent_extra, deployments), 0);
    assert_int_equal(daemon_start(d), 0);
    /* Answering PING is not the same as having reached Redis: wait for
     * that too, so that the first ACQUIRE is decided by the fleet. */
    assert_true(daemon_wait_redis(d, 10000));
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) fail_msg("expected to find \"%s\" in:\n%s", needle, hay);
}

static void assert_alive(const daemon_proc *d) {
    if (!daemon_pings(d)) fail_msg("sluiced stopped answering PING");
}

/* INFO's connected_clients:2, asked on the open raw connection *fd. */
static int two_clients_left(void *fd) {
    int c = *(int *)fd;
    if (raw_send(c, "INFO\r\n", 6) != 0) return 0;
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;
    double deadline = now_ms() + 2000;
    while (!reply && now_ms() < deadline) {
        struct pollfd p = {c, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        char buf[8192];
        ssize_t r = recv(c, buf, sizeof(buf), 0);
        if (r <= 0) break;
        redisReaderFeed(rd, buf, (size_t)r);
        if (redisReaderGetReply(rd, &reply) != REDIS_OK) break;
    }
    redisReaderFree(rd);
    redisReply *rr = reply;
    int two = rr && rr->type == REDIS_REPLY_STRING && info_field(rr->str, "connected_clients") == 2;
    if (rr) freeReplyObject(rr);
    return two;
}

/* redis-cli -s SOCK args... into out; returns the exit code. */
static int cli(const daemon_proc *d, char *out, size_t outlen, ...) {
    char *argv[32];
    int n = 0;
    argv[n++] = "redis-cli";
    argv[n++] = "-s";
    argv[n++] = (char *)d->sock;
    va_list ap;
    va_start(ap, outlen);
    for (char *a; n < 31 && (a = va_arg(ap, char *)) != NULL;) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return run_capture(argv, NULL, out, outlen);
}

/* ---- 1. redis-cli -------------------------------------------------------------- */

static void test_redis_cli_session(void **state) {
    daemon_proc d;
    start_daemon(&d, "cli", NULL, "  d:\n    rpm: 600\n    tpm: 60000\n    burst: { requests: 5, tokens: 10000 }\n");
    char out[65536], cmd[256];

    assert_int_equal(cli(&d, out, sizeof(out), "PING", NULL), 0);
    assert_string_equal(out, "PONG\n");

    /* ACQUIRE: grant id, waited ms, reserved tokens, one per line. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "d", "TOKENS", "10", NULL), 0);
    char id[128];
    long long waited = -1, tokens = -1;
    assert_int_equal(sscanf(out, "%127s\n%lld\n%lld\n", id, &waited, &tokens), 3);
    print_message("  redis-cli ACQUIRE d TOKENS 10 -> %s waited %lld ms, %lld tokens\n", id, waited, tokens);
    assert_true(!strncmp(id, "d:", 2));
    assert_true(waited >= 0 && waited < 1000);
    assert_int_equal(tokens, 10);
    /* EXACT, a flag anywhere among the options: charged as given. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "d", "EXACT", "INPUT", "6", "OUTPUT", "4", NULL), 0);
    assert_int_equal(sscanf(out, "%127s\n%lld\n%lld\n", id, &waited, &tokens), 3);
    assert_int_equal(tokens, 10);
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "d", "TOKENS", "10", "EXACT", NULL), 0);
    assert_int_equal(sscanf(out, "%127s\n%lld\n%lld\n", id, &waited, &tokens), 3);
    /* PARTIAL, a flag too: charged at the ratio (1 here), teaches nothing. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "d", "PARTIAL", "INPUT", "6", "OUTPUT", "4", NULL), 0);
    char pid_[128];
    assert_int_equal(sscanf(out, "%127s\n%lld\n%lld\n", pid_, &waited, &tokens), 3);
    assert_int_equal(tokens, 10);

    /* SETTLE with a forwarded Retry-After (delay-seconds): +OK, and the
     * deployment is paused for about a second, fleet-wide. */
    assert_int_equal(
        cli(&d, out, sizeof(out), "SETTLE", id, "TOKENS", "5", "STATUS", "ok", "HEADER", "retry-after", "1", NULL), 0);
    assert_string_equal(out, "OK\n");
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "d", "MAXWAIT", "0", NULL), 0);
    assert_contains(out, "SHED paused retry-after-ms=");
    print_message("  while paused: %s", out);

    assert_int_equal(cli(&d, out, sizeof(out), "RETRY", "d", NULL), 0);
    assert_string_equal(out, "1\n");

    /* STATUS d: field/value pairs, one per line in redis-cli. */
    assert_int_equal(cli(&d, out, sizeof(out), "STATUS", "d", NULL), 0);
    assert_true(!strncmp(out, "deployment\nd\n", 13));
    assert_contains(out, "\nmode\nredis\n");
    assert_contains(out, "\nredis\nconnected\n");
    assert_contains(out, "\nrpm\n600\n");
    assert_contains(out, "\nretry_balance\n");
    assert_contains(out, "\nagent_paused_ms\n");
    assert_contains(out, "\nestimate_ratio\n1.0000\n");

    assert_int_equal(cli(&d, out, sizeof(out), "INFO", NULL), 0);
    for (const char *sec = "# Server\0# Clients\0# Deployments\0# Redis\0# Stats\0"; *sec; sec += strlen(sec) + 1)
        assert_contains(out, sec);
    assert_contains(out, "deployment0:name=d,rpm=600,tpm=60000,burst_requests=5,burst_tokens=10000");
    assert_contains(out, "mode:redis");
    assert_true(info_field(out, "grants") == 4); /* TOKENS 10, the two EXACT, the PARTIAL */
    /* Each redis-cli is a connection of its own: the five that asked
     * (four granted, one shed) are known callers, for the turns. */
    assert_true(info_field(out, "callers") == 5);
    assert_true(info_field(out, "settle_pauses") == 1);
    assert_true(info_field(out, "sheds_paused") == 1);
    assert_true(info_field(out, "retries_allowed") == 1);
    assert_int_equal(cli(&d, out, sizeof(out), "INFO", "clients", NULL), 0);
    assert_contains(out, "# Clients");
    assert_true(strstr(out, "# Server") == NULL);
    /* The daemon's own memory (sanitized here, so only the resident set
     * is glibc's to say; test_memory checks the heap figures and trim). */
    assert_int_equal(cli(&d, out, sizeof(out), "INFO", "memory", NULL), 0);
    assert_contains(out, "# Memory");
    assert_true(info_field(out, "used_memory_rss") > 1024 * 1024);
    assert_true(info_field(out, "memory_trims") >= 0);

    /* Errors, as redis-cli prints them. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "nope", NULL), 0);
    assert_contains(out, "ERR unknown deployment 'nope'");
    assert_int_equal(cli(&d, out, sizeof(out), "SETTLE", "garbage", NULL), 0);
    assert_contains(out, "ERR invalid grant id 'garbage'");
    assert_int_equal(cli(&d, out, sizeof(out), "FROB", NULL), 0);
    assert_contains(out, "ERR unknown command 'FROB'");
    assert_int_equal(cli(&d, out, sizeof(out), "COMMAND", "DOCS", NULL), 0);
    assert_int_equal(cli(&d, out, sizeof(out), "COMMAND", "COUNT", NULL), 0);
    assert_string_equal(out, "14\n");
    /* redis-cli answers HELP itself; COMMAND HELP (as in Redis) reaches the
     * daemon, so `redis-cli -s SOCKET COMMAND HELP` shows its commands. */
    assert_int_equal(cli(&d, out, sizeof(out), "COMMAND", "HELP", NULL), 0);
    assert_contains(out, "sluiced commands (see docs/protocol.md):");
    assert_contains(out, "ACQUIRE <deployment|group> [TOKENS n | INPUT n OUTPUT m]");
    assert_contains(out, "SETTLE <grant-id>");
    redisContext *c = daemon_connect(&d);
    redisReply *r = redisCommand(c, "HELP");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(
        r->element[1]->str,
        "ACQUIRE <deployment|group> [TOKENS n | INPUT n OUTPUT m] [MAXWAIT ms] [LANE name] [TENANT name] [TAG tag] "
        "[EXACT] [PARTIAL]");
    freeReplyObject(r);
    redisFree(c);
    /* Interactive-style use through stdin (redis-cli probes COMMAND). */
    char *argv[] = {"redis-cli", "-s", d.sock, NULL};
    snprintf(cmd, sizeof(cmd), "PING\nPING hello\n");
    assert_int_equal(run_capture(argv, cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "PONG\nhello\n");
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- 2. Python --------------------------------------------------------------------- */

static void test_python_client(void **state) {
    char out[4096], script[600];
    char *probe[] = {"python3", "-c", "import socket", NULL};
    if (run_capture(probe, NULL, out, sizeof(out)) != 0) {
        print_message("  SKIPPED: python3 is not available\n");
        skip();
    }
    const char *src = getenv("SLUICE_SOURCE_DIR");
    snprintf(script, sizeof(script), "%s/tests/integration/client.py", src ? src : ".");
    daemon_proc d;
    start_daemon(&d, "py", NULL, "  py:\n    rpm: 600\n    tpm: 60000\n");
    char *argv[] = {"python3", script, d.sock, "py", NULL};
    int rc = run_capture(argv, NULL, out, sizeof(out));
    print_message("  %s", out);
    assert_int_equal(rc, 0);
    assert_contains(out, "python client ok: grant=py:");
    assert_contains(out, "retry=allowed mode=redis");
    char *info = daemon_info(&d);
    assert_non_null(info);
    assert_true(info_field(info, "settles") == 1);
    assert_true(info_field(info, "settle_headers_recognised") == 2);
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- pipelining, cancellation ------------------------------------------------------- */

static void test_pipelined_replies_in_order(void **state) {
    daemon_proc d;
    start_daemon(&d, "pipe", NULL, "  slow1:\n    rpm: 60\n    burst: { requests: 1 }\n  fast1:\n    rpm: 60000\n");
    redisContext *c = daemon_connect(&d);
    assert_non_null(c);
    /* The second ACQUIRE waits ~1 s; PING and the fast ACQUIRE behind it
     * still answer after it, in request order. */
    redisAppendCommand(c, "ACQUIRE slow1");
    redisAppendCommand(c, "ACQUIRE slow1");
    redisAppendCommand(c, "PING");
    redisAppendCommand(c, "ACQUIRE fast1");
    redisAppendCommand(c, "STATUS");
    redisAppendCommand(c, "COMMAND COUNT");
    double t0 = now_ms();
    redisReply *r[6];
    for (int i = 0; i < 6; i++) assert_int_equal(redisGetReply(c, (void **)&r[i]), REDIS_OK);
    double took = now_ms() - t0;
    assert_int_equal(r[0]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r[1]->type, REDIS_REPLY_ARRAY);
    assert_true(!strncmp(r[1]->element[0]->str, "slow1:", 6));
    assert_true(r[1]->element[1]->integer >= 900);
    assert_int_equal(r[2]->type, REDIS_REPLY_STATUS);
    assert_string_equal(r[2]->str, "PONG");
    assert_int_equal(r[3]->type, REDIS_REPLY_ARRAY);
    assert_true(!strncmp(r[3]->element[0]->str, "fast1:", 6));
    /* STATUS without a deployment: one field/value array per deployment. */
    assert_int_equal(r[4]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r[4]->elements, 2);
    assert_string_equal(r[4]->element[0]->element[0]->str, "deployment");
    assert_string_equal(r[4]->element[0]->element[1]->str, "slow1");
    assert_string_equal(r[4]->element[1]->element[1]->str, "fast1");
    assert_int_equal(r[5]->type, REDIS_REPLY_INTEGER);
    print_message("  6 pipelined commands answered in order in %.0f ms (second ACQUIRE waited %lld ms)\n", took,
                  r[1]->element[1]->integer);
    for (int i = 0; i < 6; i++) freeReplyObject(r[i]);
    redisFree(c);
    /* QUIT answers after what came before it, then closes; what follows
     * it is ignored. */
    int fd = raw_connect(d.sock);
    const char quit[] = "ACQUIRE slow1\r\nQUIT\r\nPING\r\n";
    assert_int_equal(raw_send(fd, quit, sizeof(quit) - 1), 0);
    char buf[512];
    int closed;
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    close(fd);
    assert_true(closed);
    assert_true(!strncmp(buf, "*3\r\n", 4));
    assert_true(strstr(buf, "+OK\r\n") != NULL);
    assert_true(strstr(buf, "PONG") == NULL);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_disconnect_cancels_waiting_acquire(void **state) {
    daemon_proc d;
    start_daemon(&d, "cancel", NULL, "  slow2:\n    rpm: 60\n    burst: { requests: 1 }\n");
    redisContext *a = daemon_connect(&d);
    assert_non_null(a);
    redisReply *r = redisCommand(a, "ACQUIRE slow2");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    /* b waits for the ~1 s and ~2 s slots, then hangs up. */
    int b = raw_connect(d.sock);
    assert_true(b >= 0);
    const char two[] = "ACQUIRE slow2\r\nACQUIRE slow2\r\n";
    assert_int_equal(raw_send(b, two, sizeof(two) - 1), 0);
    assert_true(daemon_wait_info(&d, "waiting", 2, 5000)); /* both hold their slots */
    close(b);
    assert_true(daemon_wait_info(&d, "cancels", 2, 5000)); /* the hang-up gave them back */
    /* The reservations went back: the next caller takes the ~2 s slot, not
     * the ~3 s one behind the abandoned calls. */
    double t0 = now_ms();
    r = redisCommand(a, "ACQUIRE slow2");
    double took = now_ms() - t0;
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    char *info = daemon_info(&d);
    print_message("  after a waiting client hung up, the next ACQUIRE waited %.0f ms; cancels %.0f\n", took,
                  info_field(info, "cancels"));
    assert_true(took < 2500);
    assert_true(info_field(info, "cancels") == 2);
    free(info);
    redisFree(a);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- 5. bad input ----------------------------------------------------------------- */

/* Sends bytes on a fresh connection, returns what came back and whether
 * the daemon closed the connection; then proves another client is served. */
static void bad_bytes(const daemon_proc *d, const char *what, const void *bytes, size_t len, const char *expect,
                      int expect_close) {
    int fd = raw_connect(d->sock);
    assert_true(fd >= 0);
    assert_int_equal(raw_send(fd, bytes, len), 0);
    char buf[4096];
    int closed;
    raw_read(fd, buf, sizeof(buf), expect_close ? 3000 : 300, &closed);
    close(fd);
    print_message("  %-28s -> %s%s", what, buf[0] ? buf : "(nothing)\r\n", closed ? "     (closed)\n" : "");
    assert_contains(buf, expect);
    assert_int_equal(closed, expect_close);
    assert_alive(d);
}

static void test_bad_input_never_hurts_others(void **state) {
    daemon_proc d;
    start_daemon(&d, "bad", "  client_idle_timeout_ms: 500\n  max_client_buffer: 1mb\n", "  bad:\n    rpm: 600\n");
    /* A client that stays connected throughout, served between each. */
    redisContext *other = daemon_connect(&d);
    assert_non_null(other);

    const char garbage[] = "\x01\x02\xff garbage \x7f\r\n";
    bad_bytes(&d, "garbage bytes", garbage, sizeof(garbage) - 1, "-ERR unknown command", 0);
    const char bad_frame[] = "*2\r\n+PING\r\n";
    bad_bytes(&d, "malformed frame", bad_frame, sizeof(bad_frame) - 1, "-ERR Protocol error", 1);
    const char huge_array[] = "*999999999\r\n";
    bad_bytes(&d, "*999999999", huge_array, sizeof(huge_array) - 1, "-ERR Protocol error: invalid multibulk length", 1);
    const char huge_bulk[] = "*1\r\n$536870912\r\n";
    bad_bytes(&d, "$536870912 bulk length", huge_bulk, sizeof(huge_bulk) - 1,
              "-ERR Protocol error: invalid bulk length", 1);
    const char unknown[] = "*1\r\n$5\r\nFROBS\r\n";
    bad_bytes(&d, "unknown command", unknown, sizeof(unknown) - 1, "-ERR unknown command 'FROBS'", 0);
    const char arity[] = "*1\r\n$7\r\nACQUIRE\r\n";
    bad_bytes(&d, "wrong arity", arity, sizeof(arity) - 1, "-ERR wrong number of arguments for 'acquire' command", 0);
    const char badopt[] = "ACQUIRE bad TOKENS -5\r\n";
    bad_bytes(&d, "bad option value", badopt, sizeof(badopt) - 1, "-ERR TOKENS must be a non-negative integer", 0);
    /* Over 10^15, however many digits (no overflow on the way). */
    const char over[] = "ACQUIRE bad MAXWAIT 99999999999999999999999999\r\n";
    bad_bytes(&d, "amount over 10^15", over, sizeof(over) - 1,
              "-ERR TOKENS, INPUT, OUTPUT and MAXWAIT must be at most 10^15 (MAXWAIT 99999999999999999999999999)", 0);
    const char bound[] = "ACQUIRE bad TOKENS 1000000000000001\r\n";
    bad_bytes(&d, "10^15 + 1", bound, sizeof(bound) - 1, "-ERR TOKENS, INPUT, OUTPUT and MAXWAIT must be at most", 0);

    /* A client that sends half a command and stalls: closed after the
     * idle timeout (500 ms), while another client is served meanwhile. An
     * idle client with nothing pending stays. */
    int idle = raw_connect(d.sock);
    int half = raw_connect(d.sock);
    assert_true(idle >= 0 && half >= 0);
    const char part[] = "*2\r\n$4\r\nPING\r\n$5\r\nhel";
    assert_int_equal(raw_send(half, part, sizeof(part) - 1), 0);
    double t0 = now_ms();
    /* Until the stalled client is answered, the other one is served: a
     * PING every time 20 ms pass without news on the stalled socket. */
    int pings = 0;
    for (struct pollfd p = {half, POLLIN, 0}; poll(&p, 1, 20) == 0 && now_ms() - t0 < 5000; pings++) {
        redisReply *r = redisCommand(other, "PING");
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    assert_true(pings >= 5);
    char buf[1024];
    int closed;
    raw_read(half, buf, sizeof(buf), 5000, &closed);
    double after = now_ms() - t0;
    print_message("  %-28s -> %s     (closed after %.0f ms)\n", "half a command, stalled", buf, after);
    assert_true(closed);
    assert_contains(buf, "-ERR idle timeout");
    assert_true(after >= 450 && after < 3000);
    close(half);
    const char ping[] = "PING\r\n";
    assert_int_equal(raw_send(idle, ping, sizeof(ping) - 1), 0);
    raw_read(idle, buf, sizeof(buf), 300, &closed);
    assert_string_equal(buf, "+PONG\r\n");
    assert_false(closed);
    close(idle);

    /* Over the buffer cap without a header to reject: an inline line of
     * 2 MB is cut off at max_client_buffer. */
    size_t big = 2u << 20;
    char *line = malloc(big);
    memset(line, 'A', big);
    int fd = raw_connect(d.sock);
    raw_send(fd, line, big); /* may fail midway: the daemon closes early */
    raw_read(fd, buf, sizeof(buf), 3000, &closed);
    close(fd);
    free(line);
    print_message("  %-28s -> %s     (closed)\n", "2 MB inline line", buf);
    assert_contains(buf, "-ERR Protocol error");
    assert_true(closed);
    assert_alive(&d);

    char *info = daemon_info(&d);
    assert_non_null(info);
    print_message("  INFO: closed_protocol_error %.0f, closed_buffer_limit %.0f, closed_idle_timeout %.0f, "
                  "unknown_commands %.0f, arity_errors %.0f\n",
                  info_field(info, "closed_protocol_error"), info_field(info, "closed_buffer_limit"),
                  info_field(info, "closed_idle_timeout"), info_field(info, "unknown_commands"),
                  info_field(info, "arity_errors"));
    assert_true(info_field(info, "closed_protocol_error") == 4);
    assert_true(info_field(info, "closed_idle_timeout") == 1);
    assert_true(info_field(info, "unknown_commands") == 2);
    assert_true(info_field(info, "arity_errors") == 1);
    free(info);
    redisFree(other);
    assert_int_equal(daemon_stop(&d), 0);
}

/* agent.socket_owner / socket_group / socket_mode decide who may acquire. */
/* A client that never reads its replies is paused once more than
 * max_client_buffer bytes of them wait, counting the replies done but
 * held behind an unfinished one: an ACQUIRE waiting for its slot with a
 * stream of INFO behind it. Before, only the bytes already written
 * counted, so the daemon read on and kept every reply (one connection
 * grew it by 950 MB in 8 s from 700 KB of INFO). */
/* 10^15 is the largest amount the socket accepts ("at most 10^15",
 * docs/protocol.md): at the bound itself an ACQUIRE is the fleet's, and a
 * SETTLE is counted. The scripts took at most 15 digits: the reserve call
 * that carried it failed, its items (others' calls batched with it
 * included) were paced locally (a grant id with L, the fleet's budget
 * bypassed), a settle batch that carried it was lost whole, and a
 * deployment configured with tpd 10^15 was never configured in Redis (its
 * ACQUIREs were held, past any MAXWAIT). */
static void test_amount_at_the_bound(void **state) {
    daemon_proc d;
    /* A tpd at the top of its documented range (0..10^15) is configured in
     * Redis too: start_daemon waits for every deployment's mode redis. */
    start_daemon(&d, "bound", "", "  bnd:\n    rpm: 6000\n  bndtpd:\n    rpm: 6000\n    tpd: 1000000000000000\n");
    char tpd_out[4096];
    assert_int_equal(cli(&d, tpd_out, sizeof(tpd_out), "ACQUIRE", "bndtpd", "MAXWAIT", "1000", NULL), 0);
    print_message("  ACQUIRE on a deployment with tpd 10^15 -> %s", tpd_out);
    assert_contains(tpd_out, "bndtpd:");
    assert_null(strstr(tpd_out, "bndtpd:L"));
    const char *acquires[] = {"ACQUIRE bnd TOKENS 1000000000000000\r\n", "ACQUIRE bnd MAXWAIT 1000000000000000\r\n",
                              "ACQUIRE bnd INPUT 1000000000000000 OUTPUT 1000000000000000\r\n"};
    char grant[3][64];
    for (int i = 0; i < 3; i++) {
        int fd = raw_connect(d.sock);
        assert_true(fd >= 0);
        assert_int_equal(raw_send(fd, acquires[i], strlen(acquires[i])), 0);
        char buf[512];
        int closed;
        raw_read(fd, buf, sizeof(buf), 3000, &closed);
        close(fd);
        print_message("  %-60.*s -> %s", (int)strlen(acquires[i]) - 2, acquires[i], buf);
        assert_contains(buf, "*3\r\n$");
        assert_contains(buf, "bnd:");
        assert_null(strstr(buf, "bnd:L")); /* from Redis, not paced locally */
        assert_int_equal(sscanf(strstr(buf, "bnd:"), "%63[^\r]", grant[i]), 1);
    }
    /* Three settles pipelined (one script call), the first at the bound. */
    redisContext *c = daemon_connect(&d);
    assert_non_null(c);
    redisAppendCommand(c, "SETTLE %s TOKENS 1000000000000000", grant[0]);
    redisAppendCommand(c, "SETTLE %s TOKENS 7", grant[1]);
    redisAppendCommand(c, "SETTLE %s INPUT 1000000000000000 OUTPUT 1000000000000000", grant[2]);
    for (int i = 0; i < 3; i++) {
        redisReply *r = NULL;
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    redisFree(c);
    assert_true(daemon_wait_status(&d, "bnd", "settled_ok", "3", 5000));
    char out[64];
    daemon_status_field(&d, "bnd", "outstanding_grants", out, sizeof(out));
    print_message("  three settles at the bound: settled_ok 3, outstanding_grants %s\n", out);
    assert_string_equal(out, "0");
    assert_alive(&d);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_unread_replies_pause_the_client(void **state) {
    daemon_proc d;
    start_daemon(&d, "unread", "  max_client_buffer: 65536\n", "  slow:\n    rpm: 1\n    max_wait_ms: 600000\n");
    char out[4096];
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "slow", NULL), 0); /* the burst */
    int fd = raw_connect(d.sock);
    assert_true(fd >= 0);
    enum { N = 400 }; /* about 2 MB of INFO replies */
    size_t len = 0;
    char *in = malloc(64 + N * 6);
    assert_non_null(in);
    len += (size_t)sprintf(in, "ACQUIRE slow MAXWAIT 600000\r\n");
    for (int i = 0; i < N; i++) len += (size_t)sprintf(in + len, "INFO\r\n");
    assert_int_equal(raw_send(fd, in, len), 0);
    free(in);
    int paused = daemon_wait_info(&d, "paused_clients", 1, 5000);
    double pending = info_num(&d, "blocked_commands");
    print_message("  ACQUIRE waiting, %d INFO behind it: paused_clients %.0f, blocked_commands %.0f\n", N,
                  info_num(&d, "paused_clients"), pending);
    assert_true(paused);
    close(fd);
    assert_alive(&d);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A paused client whose buffered bytes hold a malformed command, resumed
 * by a grant inside the engine's reply to two of its ACQUIREs: one granted
 * (tenant t2), one deferred (t1 is at its ceiling). Reading on inside that
 * callback closed the client there and cancelled the deferred call while
 * the reply still held it (a use after free; the daemon died under ASan).
 * The client is read again on the next loop turn now, and the engine keeps
 * a deferred call in flight until the reply is done with it. The client is
 * closed for its protocol error; the daemon and the others go on. */
static void test_paused_client_closed_inside_a_grant(void **state) {
    daemon_proc d;
    daemon_init(&d, fx.dir, "reent");
    /* redis.max_script_ms 0: the two ACQUIREs go in one reserve call. */
    char text[2048];
    snprintf(text, sizeof(text),
             "redis:\n  url: unix://%s\n  timeout_ms: 500\n  connect_timeout_ms: 500\n  max_script_ms: 0\n"
             "agent:\n  socket: %s\n  socket_mode: \"0600\"\n  log_level: debug\n  max_client_pipeline: 2\n"
             "deployments:\n  dt:\n    rpm: 600\n    horizon_ms: 0\n    max_wait_ms: 600000\n    tenants:\n"
             "      t1: { ceiling_rpm: 1 }\n      t2: { weight: 1 }\n",
             fx.sock, d.sock);
    assert_int_equal(sluiced_fixture_write_config(&d, text), 0);
    assert_int_equal(daemon_start(&d), 0);
    assert_true(daemon_wait_redis(&d, 10000));
    char out[4096];
    /* t1's ceiling taken; then t2, so that t1's class goes first in the
     * next reserve call (the tenants take turns going first) and is
     * deferred before t2's grant runs its callback. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "dt", "TENANT", "t1", NULL), 0);
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "dt", "TENANT", "t2", NULL), 0);
    int fd = raw_connect(d.sock);
    assert_true(fd >= 0);
    const char in[] = "ACQUIRE dt TENANT t1\r\nACQUIRE dt TENANT t2\r\n\"unbalanced\r\n";
    assert_int_equal(raw_send(fd, in, sizeof(in) - 1), 0);
    char buf[1024];
    int closed = 0;
    raw_read(fd, buf, sizeof(buf), 5000, &closed);
    print_message("  paused client with a malformed command behind two ACQUIREs -> %s (closed %d)\n", buf, closed);
    assert_true(closed);
    close(fd);
    assert_alive(&d);
    assert_true(info_num(&d, "closed_protocol_error") == 1);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A client paused by back-pressure (max_client_pipeline ACQUIREs waiting)
 * that hangs up gives its waiting slots back, as any caller that
 * disconnects while waiting does (docs/protocol.md). A paused client is
 * not read, so its EOF went unseen: the next grant was written into the
 * closed socket and stayed outstanding until its lease (120 s). */
static void test_paused_client_hangup_gives_back(void **state) {
    daemon_proc d;
    start_daemon(&d, "hup", "  max_client_pipeline: 2\n",
                 "  hup:\n    rpm: 60\n    burst: {requests: 1}\n    max_wait_ms: 60000\n");
    int fd = raw_connect(d.sock);
    assert_true(fd >= 0);
    const char in[] = "ACQUIRE hup\r\nACQUIRE hup\r\nACQUIRE hup\r\nACQUIRE hup\r\n";
    assert_int_equal(raw_send(fd, in, sizeof(in) - 1), 0);
    char buf[512];
    int closed;
    raw_read(fd, buf, sizeof(buf), 500, &closed); /* the first grant, at once; the next ~1 s away */
    assert_contains(buf, "hup:");
    assert_true(daemon_wait_info(&d, "paused_clients", 1, 3000));
    close(fd);      /* the caller leaves: it will read nothing more */
    sleep_ms(2500); /* past the second and third slots */
    char out[64];
    daemon_status_field(&d, "hup", "outstanding_grants", out, sizeof(out));
    double cancels = info_num(&d, "cancels");
    print_message("  paused client hung up: outstanding_grants %s (the one it read), cancels %.0f\n", out, cancels);
    assert_string_equal(out, "1");
    assert_true(info_num(&d, "paused_clients") == 0);
    assert_alive(&d);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_socket_owner_group_mode(void **state) {
    daemon_proc d;
    start_daemon(&d, "own", "  socket_owner: \"1\"\n  socket_group: \"2\"\n", "  own:\n    rpm: 600\n");
    struct stat st;
    assert_int_equal(stat(d.sock, &st), 0);
    print_message("  socket %s: uid %u gid %u mode %04o\n", d.sock, (unsigned)st.st_uid, (unsigned)st.st_gid,
                  (unsigned)(st.st_mode & 0777));
    assert_int_equal(st.st_uid, 1);
    assert_int_equal(st.st_gid, 2);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A crash writes no core file: the core would hold the Redis password
 * and the HTTP proxy's keys (docs/security.md, "Secrets"). Skipped where
 * this host writes no core dumps at all (the control child's SIGSEGV). */
static void test_secrets_not_in_core_dump(void **state) {
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_CORE, &rl), 0);
    if (rl.rlim_max == 0) {
        print_message("  SKIPPED: RLIMIT_CORE hard limit is 0\n");
        skip();
    }
    struct rlimit saved = rl;
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_CORE, &rl), 0);
    char cwd[1024], dir[400];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(dir, sizeof(dir), "%s/cores", fx.dir);
    mkdir(dir, 0700);
    assert_int_equal(chdir(dir), 0); /* a core file (core_pattern "core") lands here, not in the build tree */
    pid_t probe = fork();
    if (probe == 0) {
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
        _exit(0);
    }
    int st = 0;
    waitpid(probe, &st, 0);
    if (!(WIFSIGNALED(st) && WCOREDUMP(st))) {
        assert_int_equal(chdir(cwd), 0);
        setrlimit(RLIMIT_CORE, &saved);
        print_message("  SKIPPED: this host writes no core dumps (core_pattern)\n");
        skip();
    }
    daemon_proc d;
    daemon_init(&d, fx.dir, "core");
    assert_int_equal(daemon_configure(&d, &fx, NULL, "  core:\n    rpm: 600\n"), 0);
    int started = daemon_start(&d);
    assert_int_equal(chdir(cwd), 0);
    setrlimit(RLIMIT_CORE, &saved);
    assert_int_equal(started, 0);
    assert_int_equal(sluiced_fixture_signal(&d, SIGSEGV), 0);
    st = sluiced_fixture_wait(&d, 10000);
    print_message("  control child dumped core; sluiced on SIGSEGV: signalled %d, core dumped %d\n", WIFSIGNALED(st),
                  st != -1 && WCOREDUMP(st));
    assert_true(st != -1 && WIFSIGNALED(st));
    assert_false(WCOREDUMP(st));
}

static void test_max_clients(void **state) {
    daemon_proc d;
    start_daemon(&d, "maxc", "  max_clients: 3\n", "  maxc:\n    rpm: 600\n");
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = raw_connect(d.sock);
        assert_true(fds[i] >= 0);
        assert_int_equal(raw_send(fds[i], "PING\r\n", 6), 0);
        char buf[64];
        int closed;
        raw_read(fds[i], buf, sizeof(buf), 200, &closed);
        assert_string_equal(buf, "+PONG\r\n");
    }
    int extra = raw_connect(d.sock);
    assert_true(extra >= 0);
    char buf[256];
    int closed;
    raw_read(extra, buf, sizeof(buf), 3000, &closed);
    close(extra);
    print_message("  4th client of max 3 -> %s", buf);
    assert_string_equal(buf, "-ERR max clients reached\r\n");
    assert_true(closed);
    close(fds[0]);
    /* A slot is free again once the daemon has seen the close: asked over
     * a connection it already has (a new one would be refused meanwhile
     * and counted), it says 2 clients. */
    PROC_POLL_OR_FAIL(two_clients_left, &fds[1], 5000, "the daemon to see the client close");
    assert_alive(&d);
    for (int i = 1; i < 3; i++) close(fds[i]);
    char *info = daemon_info(&d);
    assert_true(info_field(info, "rejected_connections") == 1);
    assert_true(info_field(info, "max_clients") == 3);
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_socket_stale_and_live(void **state) {
    daemon_proc d, twin;
    daemon_init(&d, fx.dir, "stale");
    assert_int_equal(daemon_configure(&d, &fx, NULL, "  st:\n    rpm: 600\n"), 0);
    /* A socket file nobody listens on (a crashed daemon's) is replaced. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%.*s", (int)sizeof(a.sun_path) - 1, d.sock);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    close(fd);
    assert_int_equal(daemon_start(&d), 0);
    struct stat st;
    assert_int_equal(stat(d.sock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* agent.socket_mode */
    /* A second daemon on the same live socket refuses to start. */
    daemon_init(&twin, fx.dir, "stale-twin");
    char *text = read_file_all(d.config);
    assert_int_equal(write_file(twin.config, text), 0);
    free(text);
    char *bin = (char *)sluiced_path();
    char *argv[] = {bin, "--config", twin.config, NULL};
    char out[2048];
    int rc = run_capture(argv, NULL, out, sizeof(out));
    print_message("  second daemon on a live socket: exit %d: %s", rc, strchr(out, ' ') ? strchr(out, ' ') + 1 : out);
    assert_int_equal(rc, 1);
    assert_contains(out, "is listening on");
    assert_alive(&d);
    /* A regular file in the way is never removed. */
    daemon_proc reg;
    daemon_init(&reg, fx.dir, "regular");
    assert_int_equal(daemon_configure(&reg, &fx, NULL, "  st:\n    rpm: 600\n"), 0);
    assert_int_equal(write_file(reg.sock, "precious\n"), 0);
    char *argv2[] = {bin, "--config", reg.config, NULL};
    assert_int_equal(run_capture(argv2, NULL, out, sizeof(out)), 1);
    assert_contains(out, "is not a socket");
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- configuration ------------------------------------------------------------------- */

static void test_bad_config_refused(void **state) {
    char path[400], out[4096];
    snprintf(path, sizeof(path), "%s/bad.yaml", fx.dir);
    assert_int_equal(write_file(path, "agent:\n  socket: /tmp/never.sock\ndeployments:\n  d:\n    rpm: abc\n"), 0);
    char *bin = (char *)sluiced_path();
    char *check[] = {bin, "--check-config", path, NULL};
    int rc = run_capture(check, NULL, out, sizeof(out));
    print_message("  --check-config: exit %d: %s", rc, out);
    assert_int_equal(rc, 1);
    char want[512];
    snprintf(want, sizeof(want), "%s:5: key 'deployments.d.rpm': must be a positive integer, got \"abc\"", path);
    assert_contains(out, want);
    char *run[] = {bin, "--config", path, NULL};
    assert_int_equal(run_capture(run, NULL, out, sizeof(out)), 1);
    assert_contains(out, want);
    assert_int_equal(access("/tmp/never.sock", F_OK), -1);

    /* A good file checks clean; bad flags are usage errors (exit 2). */
    assert_int_equal(write_file(path, "deployments:\n  d:\n    rpm: 60\n"), 0);
    assert_int_equal(run_capture(check, NULL, out, sizeof(out)), 0);
    assert_contains(out, "configuration OK");
    char *bad_flag[] = {bin, "--frobnicate", NULL};
    assert_int_equal(run_capture(bad_flag, NULL, out, sizeof(out)), 2);
    assert_contains(out, "unknown flag '--frobnicate'");
    char *no_value[] = {bin, "--config", NULL};
    assert_int_equal(run_capture(no_value, NULL, out, sizeof(out)), 2);
    char *nothing[] = {bin, NULL};
    assert_int_equal(run_capture(nothing, NULL, out, sizeof(out)), 2);
    char *help[] = {bin, "--help", NULL};
    assert_int_equal(run_capture(help, NULL, out, sizeof(out)), 0);
    assert_contains(out, "SIGHUP");
    assert_contains(out, "docs/protocol.md");
    char *version[] = {bin, "--version", NULL};
    assert_int_equal(run_capture(version, NULL, out, sizeof(out)), 0);
    assert_contains(out, "sluiced " SLUICE_VERSION);
}

/* Writes text as d's configuration, sends SIGHUP and returns the log
 * (free it) once it says until, or after 5 s. */
static char *reload_log(daemon_proc *d, const char *text, const char *until) {
    assert_int_equal(write_file(d->config, text), 0);
    kill(d->pid, SIGHUP);
    double deadline = now_ms() + 5000;
    char *log = NULL;
    while (now_ms() < deadline) {
        free(log);
        log = read_file_all(d->log);
        if (strstr(log, until)) break;
        sleep_ms(20);
    }
    return log;
}

/* d's configuration (good) with its redis.url replaced by url and a
 * Sentinel section after it, into out. */
static void with_sentinel(const char *good, const char *url, const char *sentinel, char *out, size_t n) {
    const char *p = strstr(good, "unix://");
    assert_non_null(p);
    snprintf(out, n, "%.*s%s\n  sentinel: %s%s", (int)(p - good), good, url, sentinel, strchr(p, '\n'));
}

/* A reload as soon as the socket exists (systemd's ExecStartPost waits
 * for it, then `systemctl reload` may come): the daemon must not be
 * killed by a SIGHUP that arrives before its handler is installed. */
static void test_sighup_during_start(void **state) {
    (void)state;
    for (int i = 0; i < 5; i++) {
        daemon_proc d;
        char name[32];
        snprintf(name, sizeof(name), "earlyhup%d", i);
        daemon_init(&d, fx.dir, name);
        assert_int_equal(
            daemon_configure(&d, &fx, "  http: {listen: [\"unix:%SOCK%.http\"]}\n", "  eh:\n    rpm: 600\n"), 0);
        const char *argv[] = {sluiced_fixture_binary(), "--config", d.config, NULL};
        pid_t pid = proc_spawn((char *const *)argv, d.log, 1);
        assert_true(pid > 0);
        struct stat st;
        double deadline = now_ms() + 10000;
        while (stat(d.sock, &st) != 0 && now_ms() < deadline) {}
        kill(pid, SIGHUP);
        int status = 0;
        if (proc_wait(pid, 300, &status) == 1)
            fail_msg("sluiced ended by a SIGHUP during its start (wait status %d)", status);
        int pings = daemon_pings(&d);
        kill(pid, SIGTERM);
        assert_int_equal(proc_wait(pid, 10000, &status), 1);
        assert_true(pings);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

static void test_reload_bad_then_good(void **state) {
    daemon_proc d;
    start_daemon(&d, "reload", NULL, "  m.claude-v2:1:\n    rpm: 60\n  rl:\n    rpm: 600\n");
    char v[64];
    assert_true(daemon_wait_status(&d, "rl", "rpm", "600", 5000)); /* the limits reached Redis */
    char *good = read_file_all(d.config);
    /* A broken file: logged with file:line:key, the old limits stay. */
    char broken[8192];
    snprintf(broken, sizeof(broken), "%s    burst: { requests: -3 }\n", good);
    char want[600];
    snprintf(want, sizeof(want), "%s:", d.config);
    char *log = reload_log(&d, broken, "reload failed");
    assert_contains(log, "reload failed, keeping the running configuration: ");
    assert_contains(log, "key 'deployments.rl.burst.requests': must be a positive integer");
    assert_contains(log, want);
    free(log);
    assert_alive(&d);
    daemon_status_field(&d, "rl", "rpm", v, sizeof(v));
    assert_string_equal(v, "600");
    /* A good file with new limits: visible in STATUS. */
    char *p = strstr(good, "rpm: 600");
    assert_non_null(p);
    memcpy(p, "rpm: 900", 8);
    assert_int_equal(write_file(d.config, good), 0);
    kill(d.pid, SIGHUP);
    assert_true(daemon_wait_status(&d, "rl", "rpm", "900", 5000));
    char *info = daemon_info(&d);
    assert_true(info_field(info, "config_reloads_failed") == 1);
    assert_true(info_field(info, "config_reloads_ok") == 1);
    assert_contains(info, "\ndeployment1:name=rl,rpm=900,");
    /* A name with ':' is a value, not part of the key. */
    assert_contains(info, "\ndeployment0:name=m.claude-v2:1,rpm=60,");
    print_message("  bad reload kept rpm 600; good reload applied rpm 900\n");
    free(info);
    free(good);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A reload that changes the redis section: it takes effect at the next
 * start (docs/configuration.md), so the log says so for every key,
 * Sentinel's and Cluster's too, and INFO keeps naming the Redis the
 * agent is connected to. */
static void test_reload_redis_is_restart_only(void **state) {
    (void)state;
    daemon_proc d;
    start_daemon(&d, "reloadredis", NULL, "  rr:\n    rpm: 600\n");
    char *info = daemon_info(&d);
    char want[600];
    snprintf(want, sizeof(want), "redis_endpoint:unix:%s\r\n", fx.sock);
    assert_contains(info, want);
    free(info);
    char *good = read_file_all(d.config);
    char moved[8192];
    with_sentinel(good, "unix:///nonexistent/redis.sock", "{master: m, nodes: [127.0.0.1:1]}", moved, sizeof(moved));
    char *sock = strstr(moved, "  socket: ");
    assert_non_null(sock);
    memcpy(sock, "  socket: /nonexistent/", 23); /* agent.socket moves too */
    char *log = reload_log(&d, moved, "configuration reloaded");
    assert_contains(log, "reload: redis.url changed; it takes effect at the next restart");
    assert_contains(log, "reload: redis.sentinel.master changed; it takes effect at the next restart");
    assert_contains(log, "reload: redis.sentinel.nodes changed; it takes effect at the next restart");
    free(log);
    info = daemon_info(&d);
    assert_contains(info, want);
    snprintf(want, sizeof(want), "socket:%s\r\n", d.sock);
    assert_contains(info, want);
    free(info);
    free(good);
    assert_int_equal(daemon_stop(&d), 0);
}

/* Under Sentinel INFO names the master the agent asks the sentinels
 * for, not the url's unused address (here no sentinel answers: local). */
static void test_info_endpoint_sentinel(void **state) {
    (void)state;
    daemon_proc d;
    daemon_init(&d, fx.dir, "infosent");
    assert_int_equal(daemon_configure(&d, &fx, NULL, "  is:\n    rpm: 600\n"), 0);
    char *good = read_file_all(d.config);
    char moved[8192];
    with_sentinel(good, "redis://127.0.0.1:1/3", "{master: mymaster, nodes: [127.0.0.1:1]}", moved, sizeof(moved));
    assert_int_equal(write_file(d.config, moved), 0);
    free(good);
    assert_int_equal(daemon_start(&d), 0);
    char *info = daemon_info(&d);
    assert_contains(info, "redis_endpoint:sentinel:mymaster/3\r\n");
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

/* Budgets in money over the socket: the shed's fields; a bad reload
 * keeps the budgets and what they spent, a good one applies a new limit
 * to the next reservation, the spend carried over. */
static void test_budget_reload(void **state) {
    (void)state;
    daemon_proc d;
    /* 1000 in + 1000 out at 2.50 / 10.00 per million: USD 0.0125 each,
     * 4 fit a day of 0.05. */
    start_daemon(&d, "budget", NULL,
                 "  bd:\n    rpm: 6000\n    tpm: 1000000\n    price: { input: 2.5, output: 10, currency: USD }\n"
                 "budgets:\n  team:\n    tenant: a\n    currency: USD\n    daily: 0.05\n");
    char out[4096], first[64] = "";
    for (int i = 0; i < 2; i++) {
        assert_int_equal(
            cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "1000", "TENANT", "a", NULL), 0);
        assert_contains(out, "bd:");
        /* (Grant ids follow Redis' clock: the first one's, to settle.) */
        if (!i) sscanf(strstr(out, "bd:"), "%63[^ \t\r\n]", first);
    }
    char *good = read_file_all(d.config);
    char broken[8192];
    snprintf(broken, sizeof(broken), "%s    monthly: -1\n", good);
    char *log = reload_log(&d, broken, "reload failed");
    assert_contains(log, "key 'budgets.team.monthly': must be a number in [0, 1000000000], got \"-1\"");
    free(log);
    /* The old budget holds: 2 more fit (50 000 micro held); a 5th would
     * fit only if those in flight cost less: it waits its max wait (0
     * here) for room, then is shed with a 1 s hint. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(
            cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "1000", "TENANT", "a", NULL), 0);
        assert_contains(out, "bd:");
    }
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "1000", "TENANT", "a",
                         "MAXWAIT", "0", NULL),
                     0);
    assert_contains(out, "SHED budget retry-after-ms=1000 budget=team period=day left=0.000000 currency=USD");
    /* One settled in full (12 500 spent): 40 000 more can never fit the
     * day, shed at once until midnight UTC. */
    assert_int_equal(cli(&d, out, sizeof(out), "SETTLE", first, "INPUT", "1000", "OUTPUT", "1000", NULL), 0);
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "3750", "TENANT", "a", NULL),
                     0);
    assert_contains(out, "SHED budget retry-after-ms=");
    assert_contains(out, "budget=team period=day left=0.000000 currency=USD");
    assert_true(strstr(out, "retry-after-ms=1000 ") == NULL && strstr(out, "retry-after-ms=-1") == NULL);
    /* Another tenant draws from no budget. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "1000", "TENANT", "b", NULL),
                     0);
    assert_contains(out, "bd:");
    /* A good reload: 0.07 a day; what was spent and held stays (12 500
     * spent, 37 500 held: one more fits in 70 000). */
    char *p = strstr(good, "daily: 0.05");
    assert_non_null(p);
    memcpy(p, "daily: 0.07", 11);
    assert_int_equal(write_file(d.config, good), 0);
    kill(d.pid, SIGHUP);
    double deadline = now_ms() + 5000;
    int granted = 0;
    while (!granted && now_ms() < deadline) {
        /* MAXWAIT 0: until the reload applies, it would wait for room. */
        int rc = cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "1000", "TENANT", "a", "MAXWAIT",
                     "0", NULL);
        granted = rc == 0 && strstr(out, "bd:") != NULL;
        if (!granted) sleep_ms(20);
    }
    if (!granted) fail_msg("no grant after the reload: %s", out);
    redisContext *c = redis_fixture_connect(&fx);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "HGET sluice:{$budgets}:b:team day_spent");
    assert_string_equal(r->str, "12500");
    freeReplyObject(r);
    r = redisCommand(c, "HGET sluice:{$budgets}:b:team day_reserved");
    assert_string_equal(r->str, "50000");
    freeReplyObject(r);
    r = redisCommand(c, "HGET sluice:{$budgets}:b:team daily_limit");
    assert_string_equal(r->str, "70000");
    freeReplyObject(r);
    redisFree(c);
    /* The next one does not fit: 12 500 + 50 000 + 12 500 > 70 000, and
     * would were the held ones to come back: it waits its max wait, then is
     * shed. */
    assert_int_equal(cli(&d, out, sizeof(out), "ACQUIRE", "bd", "INPUT", "1000", "OUTPUT", "1000", "TENANT", "a",
                         "MAXWAIT", "100", NULL),
                     0);
    assert_contains(out, "SHED budget retry-after-ms=1000 budget=team period=day");
    char *info = daemon_info(&d);
    assert_contains(info, "budget0:name=team,period=day,currency=USD,limit=0.070000");
    free(info);
    /* STATUS of the deployment shows the budgets it draws from (the
     * agent's look at Redis, every 2 s: wait for the reload's). */
    char v[64] = "";
    deadline = now_ms() + 5000;
    while (now_ms() < deadline) {
        daemon_status_field(&d, "bd", "budget.team.day.spent", v, sizeof(v));
        if (!strcmp(v, "0.012500")) break;
        sleep_ms(50);
    }
    assert_string_equal(v, "0.012500");
    daemon_status_field(&d, "bd", "budget.team.day.reserved", v, sizeof(v));
    assert_string_equal(v, "0.050000");
    daemon_status_field(&d, "bd", "budget.team.day.left", v, sizeof(v));
    assert_string_equal(v, "0.007500");
    free(good);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- 6. SIGTERM -------------------------------------------------------------------------- */

static void test_sigterm_answers_waiting_callers(void **state) {
    daemon_proc d;
    start_daemon(&d, "term", NULL, "  term:\n    rpm: 60\n    burst: { requests: 1 }\n");
    redisContext *c = daemon_connect(&d);
    redisReply *r = redisCommand(c, "ACQUIRE term");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    /* Three callers now wait ~1, ~2 and ~3 s. */
    redisContext *w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = daemon_connect(&d);
        assert_non_null(w[i]);
        redisAppendCommand(w[i], "ACQUIRE term MAXWAIT 60000");
        int done = 0;
        redisBufferWrite(w[i], &done);
    }
    assert_true(daemon_wait_info(&d, "waiting", 3, 5000)); /* all three hold their slots */
    double t0 = now_ms();
    kill(d.pid, SIGTERM);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(redisGetReply(w[i], (void **)&r), REDIS_OK);
        if (i == 0) print_message("  waiting caller on SIGTERM got: -%s\n", r->str);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        assert_contains(r->str, "CLOSING");
        freeReplyObject(r);
        redisFree(w[i]);
    }
    redisFree(c);
    int st = daemon_wait(&d, 10000);
    print_message("  drained and exited in %.0f ms\n", now_ms() - t0);
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(access(d.sock, F_OK), -1); /* the socket file is gone */
    char *log = read_file_all(d.log);
    assert_contains(log, "draining");
    free(log);
}

/* ---- metrics ------------------------------------------------------------------------------ */

static void test_metrics_endpoint(void **state) {
    int port = free_tcp_port();
    assert_true(port > 0);
    char extra[128];
    snprintf(extra, sizeof(extra), "  metrics: 127.0.0.1:%d\n", port);
    daemon_proc d;
    start_daemon(&d, "metrics", extra, "  m:\n    rpm: 600\n");
    redisContext *c = daemon_connect(&d);
    redisReply *r = redisCommand(c, "ACQUIRE m TOKENS 7");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    char id[96];
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    freeReplyObject(r);
    r = redisCommand(c, "SETTLE %s STATUS throttled HEADER retry-after-ms 5", id);
    freeReplyObject(r);
    redisFree(c);
    static char body[65536];
    http_get(port, "GET /metrics HTTP/1.0\r\n\r\n", body, sizeof(body));
    assert_contains(body, "HTTP/1.0 200 OK");
    assert_contains(body, "text/plain; version=0.0.4");
    assert_contains(body, "sluice_grants_total{mode=\"redis\"} 1");
    assert_contains(body, "sluice_sheds_total{reason=\"rpm\"} 0");
    assert_contains(body, "sluice_wait_seconds_bucket{le=\"+Inf\"} 1");
    assert_contains(body, "sluice_wait_seconds_count 1");
    assert_contains(body, "sluice_provider_throttled_total 1");
    assert_contains(body, "sluice_retries_total{result=\"allowed\"} 0");
    assert_contains(body, "sluice_redis_calls_total ");
    assert_contains(body, "sluice_fallback_mode 0");
    assert_contains(body, "sluice_tokens_reserved_total 7");
    assert_contains(body, "sluice_clients ");
    http_get(port, "GET /nope HTTP/1.0\r\n\r\n", body, sizeof(body));
    assert_contains(body, "404");
    http_get(port, "POST /metrics HTTP/1.0\r\n\r\n", body, sizeof(body));
    assert_contains(body, "405");
    assert_alive(&d);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- valgrind ------------------------------------------------------------------------------ */

/* The idle timeout is for a half-written command followed by silence
 * (docs/protocol.md). A client that keeps sending, each read ending
 * inside a command (a buffered writer's flushes), completes a command
 * every 50 ms: no half-written command is ever older than that. It was
 * closed client_idle_timeout_ms after the first partial read, as if idle. */
static void test_streaming_client_is_not_idle(void **state) {
    daemon_proc d;
    start_daemon(&d, "stream", "  client_idle_timeout_ms: 300\n", "  stream:\n    rpm: 600\n");
    int fd = raw_connect(d.sock);
    assert_true(fd >= 0);
    assert_int_equal(raw_send(fd, "PI", 2), 0);
    int pongs = 0, closed = 0;
    char buf[4096];
    for (int i = 0; i < 30 && !closed; i++) { /* 1.5 s, five idle timeouts */
        if (raw_send(fd, "NG\r\nPI", 6) != 0) {
            closed = 1;
            break;
        }
        raw_read(fd, buf, sizeof(buf), 50, &closed);
        for (const char *p = buf; (p = strstr(p, "+PONG")) != NULL; p++) pongs++;
        if (strstr(buf, "-ERR")) print_message("  %s", buf);
    }
    close(fd);
    print_message("  a client completing a PING every 50 ms, idle timeout 300 ms: %d PONGs, closed %d\n", pongs,
                  closed);
    assert_false(closed);
    assert_int_equal(pongs, 30);
    assert_true(info_num(&d, "closed_idle_timeout") == 0);
    assert_alive(&d);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_valgrind_session(void **state) {
    if (!valgrind_usable()) skip();
    int port = free_tcp_port();
    char extra[160];
    snprintf(extra, sizeof(extra), "  metrics: 127.0.0.1:%d\n  client_idle_timeout_ms: 300\n", port);
    daemon_proc d;
    daemon_init(&d, fx.dir, "valgrind");
    d.valgrind = 1;
    assert_int_equal(daemon_configure(&d, &fx, extra, "  vg:\n    rpm: 60\n    burst: { requests: 1 }\n"), 0);
    assert_int_equal(daemon_start_args(&d, 60000), 0);
    assert_true(daemon_wait_redis(&d, 30000));
    /* A session touching every path: commands, a reload, bad input, an
     * abandoned waiter, a scrape, and a waiter answered by the drain. */
    redisContext *c = daemon_connect(&d);
    redisReply *r = redisCommand(c, "ACQUIRE vg TOKENS 3");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    char id[96];
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    freeReplyObject(r);
    const char *cmds[] = {"RETRY vg", "STATUS", "STATUS vg", "INFO", "COMMAND", "HELP", "PING", "NOPE"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) freeReplyObject(redisCommand(c, cmds[i]));
    freeReplyObject(redisCommand(c,
                                 "SETTLE %s TOKENS 2 HEADER x-ratelimit-remaining-requests 0 "
                                 "HEADER x-ratelimit-reset-requests 1ms",
                                 id));
    /* RESP3 and the connection commands (hiredis 0.14 cannot read RESP3:
     * raw bytes), with a reply answered after the HELLO 2 behind it. */
    int r3 = raw_connect(d.sock);
    const char resp3[] = "HELLO 3 SETNAME vg\r\nSTATUS\r\nHELLO 2\r\nCLIENT SETINFO LIB-NAME vg\r\n"
                         "CLIENT LIST\r\nCLIENT INFO\r\nHELLO 3\r\nINFO\r\nCOMMAND\r\nSELECT 0\r\nSELECT 1\r\n"
                         "HELLO 4\r\nAUTH x\r\nCLIENT KILL\r\nCLIENT GETNAME\r\nQUIT\r\n";
    raw_send(r3, resp3, sizeof(resp3) - 1);
    char r3buf[65536];
    int r3closed;
    raw_read(r3, r3buf, sizeof(r3buf), 30000, &r3closed); /* until QUIT closes it */
    close(r3);
    assert_true(r3closed);
    assert_contains(r3buf, "$2\r\nvg\r\n+OK\r\n"); /* CLIENT GETNAME, QUIT */
    kill(d.pid, SIGHUP);
    bad_bytes(&d, "valgrind: bad frame", "*1\r\n$-5\r\n", 9, "Protocol error", 1);
    int half = raw_connect(d.sock);
    raw_send(half, "*1\r\n$4\r\nPI", 10);
    int ab = raw_connect(d.sock);
    raw_send(ab, "ACQUIRE vg\r\nACQUIRE vg\r\n", 24);
    assert_true(daemon_wait_info(&d, "waiting", 2, 30000)); /* both wait for their slots */
    double cancels = info_num(&d, "cancels");
    close(ab);
    assert_true(daemon_wait_info(&d, "cancels", cancels + 2, 30000));
    char body[65536];
    http_get(port, "GET /metrics HTTP/1.0\r\n\r\n", body, sizeof(body));
    assert_contains(body, "sluice_grants_total");
    redisAppendCommand(c, "ACQUIRE vg MAXWAIT 60000");
    redisAppendCommand(c, "ACQUIRE vg MAXWAIT 60000");
    int done = 0;
    redisBufferWrite(c, &done);
    assert_true(daemon_wait_info(&d, "waiting", 2, 30000)); /* the drain answers them */
    assert_int_equal(daemon_stop(&d), 0);
    close(half);
    redisFree(c);
    char *vg = read_file_all(d.vglog);
    const char *sum = strstr(vg, "ERROR SUMMARY:");
    print_message("  valgrind: %.*s\n", sum ? (int)strcspn(sum, "\n") : 0, sum ? sum : "");
    assert_non_null(sum);
    assert_contains(vg, "ERROR SUMMARY: 0 errors");
    if (!strstr(vg, "All heap blocks were freed")) {
        assert_contains(vg, "definitely lost: 0 bytes");
        assert_contains(vg, "indirectly lost: 0 bytes");
    }
    const char *heap = strstr(vg, "total heap usage:");
    if (heap) print_message("  valgrind: %.*s\n", (int)strcspn(heap, "\n"), heap);
    free(vg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_redis_cli_session, test_teardown),
        cmocka_unit_test_teardown(test_python_client, test_teardown),
        cmocka_unit_test_teardown(test_pipelined_replies_in_order, test_teardown),
        cmocka_unit_test_teardown(test_disconnect_cancels_waiting_acquire, test_teardown),
        cmocka_unit_test_teardown(test_bad_input_never_hurts_others, test_teardown),
        cmocka_unit_test_teardown(test_amount_at_the_bound, test_teardown),
        cmocka_unit_test_teardown(test_unread_replies_pause_the_client, test_teardown),
        cmocka_unit_test_teardown(test_paused_client_closed_inside_a_grant, test_teardown),
        cmocka_unit_test_teardown(test_max_clients, test_teardown),
        cmocka_unit_test_teardown(test_socket_owner_group_mode, test_teardown),
        cmocka_unit_test_teardown(test_secrets_not_in_core_dump, test_teardown),
        cmocka_unit_test_teardown(test_socket_stale_and_live, test_teardown),
        cmocka_unit_test_teardown(test_paused_client_hangup_gives_back, test_teardown),
        cmocka_unit_test_teardown(test_bad_config_refused, test_teardown),
        cmocka_unit_test_teardown(test_sighup_during_start, test_teardown),
        cmocka_unit_test_teardown(test_reload_bad_then_good, test_teardown),
        cmocka_unit_test_teardown(test_reload_redis_is_restart_only, test_teardown),
        cmocka_unit_test_teardown(test_info_endpoint_sentinel, test_teardown),
        cmocka_unit_test_teardown(test_budget_reload, test_teardown),
        cmocka_unit_test_teardown(test_sigterm_answers_waiting_callers, test_teardown),
        cmocka_unit_test_teardown(test_metrics_endpoint, test_teardown),
        cmocka_unit_test_teardown(test_streaming_client_is_not_idle, test_teardown),
        cmocka_unit_test_teardown(test_valgrind_session, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
