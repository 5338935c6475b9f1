/* A refused connect is reported at once, not after the connect timeout.
 * hiredis 0.14's own libuv adapter dropped the poll error a refused connect
 * arrives as, so each reconnect to a Redis that is down (or a relay that
 * refuses) waited the whole connect timeout (lib/core/redis_uv.h). Here the
 * connect timeout is 10 s: the down event must come within 1 s, naming the
 * refusal. No Redis needed: the port is one that was just free. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "rconn.h"

typedef struct seen {
    int downs, ups;
    uint64_t first_down_ms;
    char why[256];
    uv_timer_t guard;
} seen;

static void on_up(void *ud) { ((seen *)ud)->ups++; }

static void on_down(void *ud, const char *why) {
    seen *s = ud;
    if (s->downs++ == 0) {
        s->first_down_ms = uv_now(s->guard.loop);
        snprintf(s->why, sizeof(s->why), "%s", why ? why : "");
        uv_stop(s->guard.loop);
    }
}

static void on_guard(uv_timer_t *t) { uv_stop(t->loop); }

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t n = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd); /* nobody listens there now: connects are refused */
    return ntohs(a.sin_port);
}

static void on_closed(void *arg) { (void)arg; }

static void test_refused_connect_is_reported_at_once(void **state) {
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    seen s = {0};
    uv_timer_init(&loop, &s.guard);
    uv_timer_start(&s.guard, on_guard, 5000, 0);
    config_redis cfg = {0};
    cfg.host = "127.0.0.1";
    cfg.port = free_port();
    cfg.unix_path = "";
    cfg.url = "redis://127.0.0.1";
    cfg.username = "";
    cfg.password = "";
    cfg.timeout_ms = 1000;
    cfg.connect_timeout_ms = 10000;
    rconn *c = NULL;
    rconn_events ev = {on_up, on_down};
    assert_int_equal(rconn_new(&loop, &cfg, ev, &s, &c), 0);
    uv_update_time(&loop);
    uint64_t t0 = uv_now(&loop);
    rconn_start(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (s.downs) printf("  down after %llu ms: %s\n", (unsigned long long)(s.first_down_ms - t0), s.why);
    else printf("  no down event within 5 s (the connect timeout is 10 s)\n");
    assert_int_equal(s.ups, 0);
    assert_int_equal(s.downs >= 1, 1);
    assert_true(s.first_down_ms - t0 < 1000);
    assert_non_null(strstr(s.why, "refused"));
    rconn_close(c, on_closed, NULL);
    uv_close((uv_handle_t *)&s.guard, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_connect_is_reported_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
