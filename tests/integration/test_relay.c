/* test_relay: the TCP relay that cuts one client off from Redis
 * (tests/support/relay.h), against a real redis-server on a loopback port:
 *
 *   - pass: commands and replies go through, both counted in bytes;
 *   - cut: open connections are closed (the client reads EOF at once) and
 *     new connects are refused; pass again listens on the same port;
 *   - black hole: a command gets no reply and the connection stays open
 *     (the client's own timeout fires); a new connect is accepted and
 *     held; back to pass, what was sent meanwhile is delivered (the
 *     command ran in Redis) and the held connection gets its upstream;
 *   - Redis down: a connection through the relay is closed, counted as an
 *     upstream failure;
 *   - start and stop are bounded.
 *
 * The relay is what test_partition and the soak cut agents with; this
 * test is in the default run. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "proc.h"
#include "redis_fixture.h"
#include "relay.h"

static redis_fixture fx;

static int setup(void **state) { return redis_fixture_start_ex(&fx, "", 0); }

static int teardown(void **state) {
    redis_fixture_stop(&fx);
    return 0;
}

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) return fd;
    int e = errno;
    if (fd >= 0) close(fd);
    errno = e;
    return -1;
}

static void send_all(int fd, const char *s) {
    size_t n = strlen(s);
    assert_int_equal(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads until want is in the buffer, EOF, or timeout_ms. Returns 1 when
 * want was read, 0 on timeout (*eof 0), 0 with *eof 1 on EOF. */
static int one_held(void *arg) {
    relay_counts c;
    relay_get_counts(arg, &c);
    return c.held >= 1;
}

static int read_until(int fd, const char *want, int timeout_ms, int *eof) {
    char buf[4096];
    size_t n = 0;
    double deadline = proc_now_ms() + timeout_ms;
    *eof = 0;
    for (;;) {
        buf[n] = '\0';
        if (strstr(buf, want)) return 1;
        int left = (int)(deadline - proc_now_ms());
        if (left <= 0) return 0;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) continue;
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (r <= 0) {
            *eof = 1;
            return 0;
        }
        n += (size_t)r;
    }
}

static long long redis_int(const char *cmd) {
    redisContext *c = redis_fixture_connect(&fx);
    redisReply *r = c ? redisCommand(c, cmd) : NULL;
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r && r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return v;
}

static void test_pass_cut_blackhole(void **state) {
    char err[256];
    double t0 = proc_now_ms();
    relay *r = relay_start(fx.port, 0, err, sizeof(err));
    if (!r) fail_msg("relay_start: %s", err);
    print_message("  relay on 127.0.0.1:%d -> Redis on %d, started in %.1f ms\n", relay_port(r), fx.port,
                  proc_now_ms() - t0);
    int port = relay_port(r), eof;

    /* pass */
    int a = tcp_connect(port);
    assert_true(a >= 0);
    send_all(a, "PING\r\n");
    assert_true(read_until(a, "+PONG\r\n", 2000, &eof));
    relay_counts c;
    relay_get_counts(r, &c);
    assert_int_equal(c.accepted, 1);
    assert_int_equal(c.open, 1);
    assert_int_equal(c.bytes_up, 6);
    assert_int_equal(c.bytes_down, 7);

    /* cut: the open connection reads EOF, a new connect is refused */
    assert_int_equal(relay_set_mode(r, RELAY_CUT), 0);
    assert_int_equal(relay_get_mode(r), RELAY_CUT);
    double tc = proc_now_ms();
    assert_false(read_until(a, "x", 2000, &eof));
    assert_true(eof);
    print_message("  cut: the open connection read EOF %.1f ms after the cut\n", proc_now_ms() - tc);
    close(a);
    assert_int_equal(tcp_connect(port), -1);
    assert_int_equal(errno, ECONNREFUSED);
    relay_get_counts(r, &c);
    assert_int_equal(c.closed_by_cut, 1);
    assert_int_equal(c.open, 0);
    assert_int_equal(c.cuts, 1);

    /* pass again, same port */
    assert_int_equal(relay_set_mode(r, RELAY_PASS), 0);
    assert_int_equal(relay_port(r), port);
    a = tcp_connect(port);
    assert_true(a >= 0);
    send_all(a, "SET relay:k 1\r\n");
    assert_true(read_until(a, "+OK\r\n", 2000, &eof));

    /* black hole: no reply and no close; the command waits */
    assert_int_equal(relay_set_mode(r, RELAY_BLACKHOLE), 0);
    send_all(a, "INCR relay:k\r\n");
    assert_false(read_until(a, ":2\r\n", 500, &eof));
    assert_false(eof);
    assert_int_equal(redis_int("GET relay:k"), 1);
    /* a new connect is accepted and held */
    int b = tcp_connect(port);
    assert_true(b >= 0);
    send_all(b, "INCR relay:k\r\n");
    assert_false(read_until(b, ":", 300, &eof));
    assert_false(eof);
    /* The relay's thread accepts it on its next turn. */
    PROC_POLL_OR_FAIL(one_held, r, 2000, "the relay to hold the new connection");
    relay_get_counts(r, &c);
    assert_int_equal(c.held, 1);
    assert_int_equal(c.open, 2);
    assert_int_equal(redis_int("GET relay:k"), 1);

    /* healed: both commands are delivered and answered */
    assert_int_equal(relay_set_mode(r, RELAY_PASS), 0);
    assert_true(read_until(a, ":", 2000, &eof));
    assert_true(read_until(b, ":", 2000, &eof));
    assert_int_equal(redis_int("GET relay:k"), 3);
    print_message("  black hole: 2 commands held (one on a connection made meanwhile), both run once healed\n");

    /* black hole, then cut: everything held is dropped */
    assert_int_equal(relay_set_mode(r, RELAY_BLACKHOLE), 0);
    send_all(a, "INCR relay:k\r\n");
    assert_int_equal(relay_set_mode(r, RELAY_CUT), 0);
    assert_false(read_until(a, ":", 2000, &eof));
    assert_true(eof);
    assert_false(read_until(b, ":", 2000, &eof));
    assert_true(eof);
    close(a);
    close(b);
    assert_int_equal(redis_int("GET relay:k"), 3);
    assert_int_equal(relay_set_mode(r, RELAY_PASS), 0);

    relay_get_counts(r, &c);
    print_message("  counts: accepted %lld, held %lld, closed by cut %lld, upstream failed %lld, open %lld, "
                  "%lld bytes up, %lld down\n",
                  c.accepted, c.held, c.closed_by_cut, c.upstream_failed, c.open, c.bytes_up, c.bytes_down);
    t0 = proc_now_ms();
    relay_stop(r);
    double stop_ms = proc_now_ms() - t0;
    print_message("  stopped in %.1f ms\n", stop_ms);
    assert_true(stop_ms < 1000);
}

static void test_upstream_down(void **state) {
    char err[256];
    relay *r = relay_start(fx.port, 0, err, sizeof(err));
    if (!r) fail_msg("relay_start: %s", err);
    int a = tcp_connect(relay_port(r)), eof;
    assert_true(a >= 0);
    /* Relayed to Redis before it goes (the connect alone returns once the
     * kernel accepted it: the relay's thread might take it after the kill,
     * fail its upstream connect, and count it). */
    send_all(a, "PING\r\n");
    assert_true(read_until(a, "+PONG\r\n", 2000, &eof));
    redis_fixture_kill(&fx, 1);
    /* Redis is gone: the relayed connection is closed. */
    assert_false(read_until(a, "x", 2000, &eof));
    assert_true(eof);
    close(a);
    /* A new connection through the relay is accepted, then closed. */
    a = tcp_connect(relay_port(r));
    assert_true(a >= 0);
    assert_false(read_until(a, "x", 2000, &eof));
    assert_true(eof);
    close(a);
    relay_counts c;
    relay_get_counts(r, &c);
    assert_int_equal(c.upstream_failed, 1);
    assert_int_equal(c.open, 0);
    /* Redis back (same port): the relay forwards again. */
    assert_int_equal(redis_fixture_restart(&fx), 0);
    a = tcp_connect(relay_port(r));
    send_all(a, "PING\r\n");
    assert_true(read_until(a, "+PONG\r\n", 2000, &eof));
    close(a);
    relay_stop(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_cut_blackhole),
        cmocka_unit_test(test_upstream_down),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
