/* test_http_server: agent/http_server in-process, on its own loop thread,
 * with a test handler, against raw clients (support/http_client).
 *
 * The handler's side of the contract, as the proxy's second part will use
 * it: keep-alive and pipelined requests answered in order; fixed and
 * streamed responses; SSE events leave one by one (the first is read
 * before the second exists); back-pressure (a stream is told to pause only
 * above HTTP_WRITE_HIGH_WATER, resumed at HTTP_WRITE_LOW_WATER, and the 8
 * MiB it sends arrive intact); the abandon hook when the client leaves; an
 * orphaned request answered late gets SL_ECANCELED; a client that never
 * reads is closed by the idle timeout; 100-continue, HEAD, HTTP/1.0
 * streams, header injection refused; the UNIX transport; and the drain:
 * idle connections close at once, a response in progress finishes with
 * Connection: close, one that does not is abandoned at drain_timeout_ms.
 * Every wait is on a condition (a flag the handler sets, a socket read),
 * bounded. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "http_client.h"
#include "http_config.h"
#include "http_server.h"
#include "proc.h"
#include "sluice.h"

/* ---- the fixture: a server on a loop thread -------------------------------------- */

#define FLOOD_TOTAL (8u << 20)
#define FLOOD_CHUNK (16u << 10)

typedef struct fixture {
    uv_loop_t loop;
    pthread_t thread;
    uv_async_t cmd;
    uv_timer_t snap;
    http_server *srv;
    config *cfg;
    char dir[256], sock[300];
    int port;
    /* set by the loop thread, read under mu */
    pthread_mutex_t mu;
    http_stats st;
    int closed_done;
    int abandoned_hold, orphan_rc, orphan_answered;
    int sse_sent[4];
    int flood_paused, flood_resumes, flood_done, flood_violation;
    size_t flood_sent, flood_queued_at_pause;
    int last_transport;
    /* commands to the loop thread */
    int want_close;
} fixture;

static fixture fx;

static void lock(void) { pthread_mutex_lock(&fx.mu); }
static void unlock(void) { pthread_mutex_unlock(&fx.mu); }

static int get_int(const int *p) {
    lock();
    int v = *p;
    unlock();
    return v;
}

/* Handler state for a request that outlives on_request. */
typedef struct held {
    http_request *r;
    uv_timer_t t;
    int step, answer_ms, timer_live;
    int late_end; /* /stream?late: the end comes a tick after the last event */
    size_t sent;
} held;

static void held_timer_closed(uv_handle_t *h) { free(h->data); }

static void held_free(held *h) {
    if (h->timer_live) {
        h->timer_live = 0;
        uv_close((uv_handle_t *)&h->t, held_timer_closed);
    } else {
        free(h);
    }
}

static void held_abandoned(void *ud) {
    held *h = ud;
    lock();
    fx.abandoned_hold++;
    unlock();
    held_free(h);
}

/* /hold?answer=ms: answered 200 after ms (never when absent). */
static void hold_answer(uv_timer_t *t) {
    held *h = t->data;
    http_respond(h->r, 200, NULL, 0, "text/plain", "held\n", 5);
    held_free(h);
}

/* /orphan: no abandon hook; answered once the client is gone. */
static void orphan_poll(uv_timer_t *t) {
    held *h = t->data;
    if (!http_request_gone(h->r)) return;
    int rc = http_respond(h->r, 200, NULL, 0, "text/plain", "late\n", 5);
    lock();
    fx.orphan_rc = rc;
    fx.orphan_answered = 1;
    unlock();
    uv_timer_stop(t);
    held_free(h);
}

/* /stream: three SSE events 400 ms apart. */
static void sse_next(uv_timer_t *t) {
    held *h = t->data;
    if (h->step == 3) { /* late_end: its last event has long been written */
        http_stream_end(h->r);
        uv_timer_stop(t);
        held_free(h);
        return;
    }
    char ev[64];
    int n = snprintf(ev, sizeof(ev), "event: tick\ndata: {\"n\":%d}\n\n", h->step + 1);
    lock();
    fx.sse_sent[h->step] = 1; /* produced: set before the client can read it */
    unlock();
    http_stream_write(h->r, ev, (size_t)n);
    if (++h->step == 3 && !h->late_end) {
        http_stream_end(h->r);
        uv_timer_stop(t);
        held_free(h);
    }
}

/* /flood: 8 MiB in 16 KiB chunks as fast as the client takes them. */
static void flood_more(void *ud) {
    held *h = ud;
    static char chunk[FLOOD_CHUNK];
    lock();
    if (h->step) {
        fx.flood_resumes++;
        if (http_request_queued(h->r) > HTTP_WRITE_LOW_WATER) fx.flood_violation = 1;
    }
    unlock();
    while (h->sent < FLOOD_TOTAL) {
        for (size_t i = 0; i < FLOOD_CHUNK; i++) chunk[i] = (char)('a' + (h->sent + i) % 26);
        int rc = http_stream_write(h->r, chunk, FLOOD_CHUNK);
        h->sent += FLOOD_CHUNK;
        lock();
        fx.flood_sent = h->sent;
        unlock();
        if (rc < 0) return; /* gone: the abandon hook frees h */
        if (rc == 1) {
            lock();
            if (http_request_queued(h->r) <= HTTP_WRITE_HIGH_WATER) fx.flood_violation = 1;
            if (!fx.flood_paused) fx.flood_queued_at_pause = http_request_queued(h->r);
            fx.flood_paused++;
            unlock();
            h->step = 1;
            return; /* resumed by the writable hook */
        }
    }
    http_stream_end(h->r);
    lock();
    fx.flood_done = 1;
    unlock();
    free(h);
}

static void flood_abandoned(void *ud) { held_abandoned(ud); }

static held *held_new(http_request *r) {
    held *h = calloc(1, sizeof(*h));
    h->r = r;
    return h;
}

static void held_arm(held *h, uv_timer_cb cb, uint64_t first, uint64_t repeat) {
    uv_timer_init(&fx.loop, &h->t);
    h->t.data = h;
    h->timer_live = 1;
    uv_timer_start(&h->t, cb, first, repeat);
}

static void on_request(http_request *r, void *arg) {
    const http_msg *m = http_request_msg(r);
    const char *path = http_msg_path(m);
    lock();
    fx.last_transport = (int)http_request_transport(r);
    unlock();
    if (!strcmp(path, "/echo")) {
        size_t len;
        const char *body = http_msg_body(m, &len);
        http_header h[] = {{"X-Transport", http_request_transport(r) == HTTP_TRANSPORT_UNIX ? "unix" : "tcp"},
                           {"X-Peer", http_request_peer(r)}};
        http_respond(r, 200, h, 2, "application/octet-stream", body, len);
    } else if (!strcmp(path, "/hold")) {
        held *h = held_new(r);
        http_request_on_abandon(r, held_abandoned, h);
        const char *q = http_msg_query(m);
        if (!strncmp(q, "answer=", 7)) held_arm(h, hold_answer, (uint64_t)atoi(q + 7), 0);
    } else if (!strcmp(path, "/orphan")) {
        held_arm(held_new(r), orphan_poll, 5, 5);
    } else if (!strcmp(path, "/stream")) {
        held *h = held_new(r);
        http_request_on_abandon(r, held_abandoned, h);
        h->late_end = !strcmp(http_msg_query(m), "late");
        http_stream_begin(r, 200, NULL, 0, "text/event-stream");
        held_arm(h, sse_next, 0, 400);
    } else if (!strcmp(path, "/flood")) {
        held *h = held_new(r);
        http_request_on_abandon(r, flood_abandoned, h);
        http_request_on_writable(r, flood_more, h);
        http_stream_begin(r, 200, NULL, 0, "application/octet-stream");
        flood_more(h);
    } else if (!strcmp(path, "/inject")) {
        /* Header injection and reserved headers are refused; r stays ours. */
        http_header bad1[] = {{"X-A", "1\r\nX-Evil: 1"}};
        http_header bad2[] = {{"Bad Name", "1"}};
        http_header bad3[] = {{"Content-Length", "5"}};
        int a = http_respond(r, 200, bad1, 1, NULL, "", 0), b = http_respond(r, 200, bad2, 1, NULL, "", 0),
            c = http_respond(r, 200, bad3, 1, NULL, "", 0), d = http_respond(r, 99, NULL, 0, NULL, "", 0),
            e = http_stream_write(r, "x", 1);
        char out[64];
        snprintf(out, sizeof(out), "%d %d %d %d %d", a, b, c, d, e);
        http_respond(r, 200, NULL, 0, "text/plain", out, strlen(out));
    } else {
        http_respond(r, 404, NULL, 0, "text/plain", "no\n", 3);
    }
}

/* The server's own refusals: shaped for /shaped, the default elsewhere. */
static int error_body(void *arg, http_refusal *rf) {
    /* Before the headers, the path may not be taken out yet: the target is. */
    if (!rf->partial || strcmp(http_msg_target(rf->partial), "/shaped") != 0) return -1;
    char status[16], body[160];
    snprintf(status, sizeof(status), "%d", rf->status);
    int bad = http_refusal_header(rf, "Connection", "keep-alive"); /* the server's: refused */
    if (http_refusal_header(rf, "X-Refused", status) != 0) return -1;
    int n = snprintf(body, sizeof(body), "{\"refused\":%d,\"reserved\":%d,\"peer\":\"%s\"}", rf->status, bad, rf->peer);
    if (http_buf_append(&rf->body, body, (size_t)n) != 0) return -1;
    rf->content_type = "application/json";
    return 0;
}

static void on_snap(uv_timer_t *t) {
    lock();
    if (fx.srv) http_server_get_stats(fx.srv, &fx.st);
    unlock();
}

static void on_closed(void *arg) {
    uv_close((uv_handle_t *)&fx.cmd, NULL);
    uv_close((uv_handle_t *)&fx.snap, NULL);
    lock();
    fx.closed_done = 1;
    unlock();
}

static void on_cmd(uv_async_t *a) {
    lock();
    int close_it = fx.want_close;
    fx.want_close = 0;
    unlock();
    if (close_it == 1) http_server_close(fx.srv, on_closed, NULL);
}

static void *loop_main(void *arg) {
    uv_run(&fx.loop, UV_RUN_DEFAULT);
    return NULL;
}

/* A server with agent.http settings extra (YAML lines under http:). */
static int start(const char *extra) {
    memset(&fx, 0, sizeof(fx));
    pthread_mutex_init(&fx.mu, NULL);
    if (proc_mkdtemp(fx.dir, sizeof(fx.dir), "sluice-http") != 0) return -1;
    snprintf(fx.sock, sizeof(fx.sock), "%s/http.sock", fx.dir);
    char yaml[2048], err[512];
    /* Port 1 stands for "any": the test binds port 0 below. */
    snprintf(yaml, sizeof(yaml),
             "agent:\n  socket_mode: \"0600\"\n  http:\n    listen: [127.0.0.1:1, unix:%s]\n"
             "    idle_timeout_ms: 2000\n    header_timeout_ms: 2000\n%s"
             "deployments:\n  d:\n    rpm: 60\n",
             fx.sock, extra ? extra : "");
    if (config_load_string("t.yaml", yaml, strlen(yaml), &fx.cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    fx.cfg->agent.http.listeners[0].port = 0;
    uv_loop_init(&fx.loop);
    http_server_hooks hooks = {.on_request = on_request, .error_body = error_body};
    if (http_config_server(&fx.loop, fx.cfg, &hooks, &fx.srv) != 0) return -1;
    if (http_config_listen(fx.srv, fx.cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    const char *addr = http_server_address(fx.srv, 0);
    fx.port = atoi(strrchr(addr, ':') + 1);
    uv_async_init(&fx.loop, &fx.cmd, on_cmd);
    uv_timer_init(&fx.loop, &fx.snap);
    uv_timer_start(&fx.snap, on_snap, 5, 5);
    return pthread_create(&fx.thread, NULL, loop_main, NULL) == 0 ? 0 : -1;
}

static int is_closed(void *arg) { return get_int(&fx.closed_done); }

static void server_close_now(void) {
    lock();
    fx.want_close = 1;
    unlock();
    uv_async_send(&fx.cmd);
}

static int setup(void **state) { return start(NULL); }

static int setup_short_drain(void **state) { return start("    drain_timeout_ms: 300\n"); }

static int teardown(void **state) {
    if (!get_int(&fx.closed_done)) server_close_now();
    if (!proc_poll(is_closed, NULL, 20000)) fprintf(stderr, "the server did not close\n");
    pthread_join(fx.thread, NULL);
    http_server_free(fx.srv);
    int rc = uv_loop_close(&fx.loop);
    config_free(fx.cfg);
    proc_rmtree(fx.dir);
    pthread_mutex_destroy(&fx.mu);
    return rc == 0 ? 0 : -1;
}

static http_stats stats(void) {
    lock();
    http_stats s = fx.st;
    unlock();
    return s;
}

/* ---- tests ---------------------------------------------------------------------- */

static int nine_on_one(void *arg) {
    http_stats s = stats();
    return s.requests == 9 && s.connections_total == 1 && s.responses[2] == 8 && s.responses[4] == 1;
}

static void connect_tcp(hc_conn *c) { assert_int_equal(hc_connect_tcp(c, fx.port), 0); }

static void test_keepalive_pipelined(void **state) {
    hc_conn c;
    connect_tcp(&c);
    /* Three requests in one write, one of them chunked: three answers in
     * order on one connection. */
    assert_int_equal(hc_send_str(&c, "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\none"
                                     "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n"
                                     "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nthree"),
                     0);
    const char *want[] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) {
        hc_response r;
        assert_int_equal(hc_read_response(&c, &r, 5000), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, want[i]);
        char v[32];
        assert_string_equal(hc_header(&r, "connection", v, sizeof(v)), "keep-alive");
        assert_string_equal(hc_header(&r, "x-transport", v, sizeof(v)), "tcp");
        assert_true(!strncmp(hc_header(&r, "x-peer", v, sizeof(v)), "127.0.0.1:", 10));
        hc_response_free(&r);
    }
    /* And later ones on the same connection. */
    for (int i = 0; i < 5; i++) {
        hc_response r;
        assert_int_equal(hc_post(&c, "/echo", NULL, "again", &r, 5000), 0);
        assert_string_equal(r.body, "again");
        hc_response_free(&r);
    }
    hc_response r;
    assert_int_equal(hc_post(&c, "/nope", "Connection: close\r\n", "{}", &r, 5000), 0);
    char v[32];
    assert_string_equal(hc_header(&r, "connection", v, sizeof(v)), "close");
    hc_response_free(&r);
    assert_true(hc_wait_closed(&c, 5000));
    hc_close(&c);
    /* Nine requests, one connection. */
    PROC_POLL_OR_FAIL(nine_on_one, NULL, 5000, "the server's counts");
}

static int sse_first_sent(void *arg) { return get_int(&fx.sse_sent[0]); }

static void test_sse_unbuffered(void **state) {
    hc_conn c;
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /stream HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    /* The first event is on the wire before the second exists. */
    double deadline = proc_now_ms() + 5000;
    while (!strstr(c.buf ? c.buf : "", "{\"n\":1}") && proc_now_ms() < deadline) hc_read_some(&c, 100);
    assert_non_null(strstr(c.buf, "event: tick\ndata: {\"n\":1}\n\n"));
    assert_int_equal(get_int(&fx.sse_sent[1]), 0);
    assert_true(sse_first_sent(NULL));
    hc_response r;
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_true(r.chunked);
    assert_int_equal(r.chunks, 3); /* one chunk per event */
    assert_string_equal(r.body, "event: tick\ndata: {\"n\":1}\n\nevent: tick\ndata: {\"n\":2}\n\n"
                                "event: tick\ndata: {\"n\":3}\n\n");
    char v[64];
    assert_string_equal(hc_header(&r, "content-type", v, sizeof(v)), "text/event-stream");
    hc_response_free(&r);
    /* The connection carries on. */
    assert_int_equal(hc_post(&c, "/echo", NULL, "after", &r, 5000), 0);
    assert_string_equal(r.body, "after");
    hc_response_free(&r);
    hc_close(&c);
}

static int flood_paused(void *arg) { return get_int(&fx.flood_paused) > 0; }
static int flood_done(void *arg) { return get_int(&fx.flood_done); }

static void test_backpressure(void **state) {
    hc_conn c;
    /* Over the UNIX listener: its kernel buffer is fixed (the sender's
     * SO_SNDBUF, net.core.wmem_default), so once nobody reads nothing more
     * drains. Over TCP loopback the kernel's autotuning keeps growing the
     * buffers after the pause (4 MiB and more here, 32 MiB allowed by
     * tcp_rmem), which resumed the producer on a loaded CI machine without
     * the client reading a byte. The write queue and its bounds are the
     * same code for both transports (http_server.c). */
    assert_int_equal(hc_connect_unix(&c, fx.sock), 0);
    assert_int_equal(hc_send_str(&c, "POST /flood HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    /* Not reading: the kernel's buffer fills, then libuv's queue passes the
     * bound and the producer is told to pause. */
    PROC_POLL_OR_FAIL(flood_paused, NULL, 10000, "the stream to be paused");
    lock();
    size_t at_pause = fx.flood_queued_at_pause, sent = fx.flood_sent;
    unlock();
    print_message("  paused after %zu bytes with %zu queued (bound %d)\n", sent, at_pause, HTTP_WRITE_HIGH_WATER);
    assert_true(at_pause > HTTP_WRITE_HIGH_WATER);
    assert_true(sent < FLOOD_TOTAL);
    /* Still paused while nobody reads. */
    assert_int_equal(get_int(&fx.flood_resumes), 0);
    /* Reading lets it resume, and everything arrives, in order. */
    hc_response r;
    assert_int_equal(hc_read_response(&c, &r, 30000), 0);
    assert_int_equal(r.body_len, FLOOD_TOTAL);
    for (size_t i = 0; i < r.body_len; i += 4099)
        if (r.body[i] != (char)('a' + i % 26)) fail_msg("byte %zu is %c", i, r.body[i]);
    hc_response_free(&r);
    PROC_POLL_OR_FAIL(flood_done, NULL, 5000, "the stream to end");
    assert_true(get_int(&fx.flood_resumes) >= 1);
    assert_int_equal(get_int(&fx.flood_violation), 0);
    print_message("  paused %d times, resumed %d times\n", get_int(&fx.flood_paused), get_int(&fx.flood_resumes));
    hc_close(&c);
}

static int hold_abandoned(void *arg) { return get_int(&fx.abandoned_hold) >= *(int *)arg; }

static int three_abandoned(void *arg) { return stats().abandoned == 3; }

static int orphan_answered(void *arg) { return get_int(&fx.orphan_answered); }

static int requests_at_least(void *arg) { return stats().requests >= *(unsigned long long *)arg; }

static void test_abandon_and_orphan(void **state) {
    hc_conn c;
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /hold HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    unsigned long long one = 1;
    PROC_POLL_OR_FAIL(requests_at_least, &one, 5000, "the request to reach the handler");
    hc_close(&c);
    int want = 1;
    PROC_POLL_OR_FAIL(hold_abandoned, &want, 5000, "the abandon hook");
    /* Mid-stream too. */
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /stream HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    PROC_POLL_OR_FAIL(sse_first_sent, NULL, 5000, "the first event");
    hc_close(&c);
    want = 2;
    PROC_POLL_OR_FAIL(hold_abandoned, &want, 5000, "the abandon hook of the stream");
    /* Without a hook the handler learns it when it answers. */
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /orphan HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    unsigned long long three = 3;
    PROC_POLL_OR_FAIL(requests_at_least, &three, 5000, "the third request");
    hc_close(&c);
    PROC_POLL_OR_FAIL(orphan_answered, NULL, 5000, "the late answer");
    assert_int_equal(get_int(&fx.orphan_rc), SL_ECANCELED);
    PROC_POLL_OR_FAIL(three_abandoned, NULL, 5000, "the server's count of abandoned requests");
    assert_true(stats().closed_client_gone >= 2);
}

static int write_timed_out(void *arg) { return stats().closed_write_timeout >= 1; }

static void test_client_not_reading(void **state) {
    hc_conn c;
    /* UNIX for the reason test_backpressure gives: TCP's autotuned buffers
     * could swallow the whole flood, and nothing would pause. */
    assert_int_equal(hc_connect_unix(&c, fx.sock), 0);
    assert_int_equal(hc_send_str(&c, "POST /flood HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    PROC_POLL_OR_FAIL(flood_paused, NULL, 10000, "the stream to be paused");
    /* idle_timeout_ms (2 s) without the client taking anything: closed,
     * and the handler told. */
    PROC_POLL_OR_FAIL(write_timed_out, NULL, 10000, "the write timeout");
    int want = 1;
    PROC_POLL_OR_FAIL(hold_abandoned, &want, 5000, "the abandon hook");
    hc_close(&c);
}

static void test_forms(void **state) {
    hc_conn c;
    connect_tcp(&c);
    hc_response r;
    /* Expect: 100-continue gets its interim answer before the body is sent. */
    assert_int_equal(hc_send_str(&c, "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_int_equal(r.status, 100);
    hc_response_free(&r);
    assert_int_equal(hc_send_str(&c, "body"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_string_equal(r.body, "body");
    hc_response_free(&r);
    /* HEAD: the length, no body. */
    assert_int_equal(hc_send_str(&c, "HEAD /echo HTTP/1.1\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    char v[32];
    assert_string_equal(hc_header(&r, "content-length", v, sizeof(v)), "0");
    hc_response_free(&r);
    /* Refused headers. */
    assert_int_equal(hc_post(&c, "/inject", NULL, "", &r, 5000), 0);
    char want[64];
    snprintf(want, sizeof(want), "%d %d %d %d %d", SL_EINVAL, SL_EINVAL, SL_EINVAL, SL_EINVAL, SL_EINVAL);
    assert_string_equal(r.body, want);
    assert_null(strstr(r.head, "X-Evil"));
    hc_response_free(&r);
    hc_close(&c);
    /* A client that shuts its sending side after its request still gets
     * the answer. */
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\nhalf"), 0);
    shutdown(c.fd, SHUT_WR);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_string_equal(r.body, "half");
    hc_response_free(&r);
    assert_true(hc_wait_closed(&c, 5000));
    hc_close(&c);
    /* An HTTP/1.0 client gets its stream delimited by the close. */
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /stream HTTP/1.0\r\nContent-Length: 0\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_false(r.chunked);
    assert_non_null(strstr(r.body, "{\"n\":3}"));
    assert_string_equal(hc_header(&r, "connection", v, sizeof(v)), "close");
    hc_response_free(&r);
    hc_close(&c);
    /* ... also when the stream ends after its last bytes went out (the
     * proxy's case: the upstream's end comes after its last event). */
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /stream?late HTTP/1.0\r\nContent-Length: 0\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_non_null(strstr(r.body, "{\"n\":3}"));
    hc_response_free(&r);
    hc_close(&c);
    /* The UNIX socket, with the RESP socket's mode. */
    assert_int_equal(hc_connect_unix(&c, fx.sock), 0);
    assert_int_equal(hc_post(&c, "/echo", NULL, "u", &r, 5000), 0);
    assert_string_equal(hc_header(&r, "x-transport", v, sizeof(v)), "unix");
    assert_string_equal(hc_header(&r, "x-peer", v, sizeof(v)), "unix");
    hc_response_free(&r);
    hc_close(&c);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "test \"$(stat -c %%a %s)\" = 600", fx.sock);
    assert_int_equal(system(cmd), 0);
}

/* A refusal in the handler's shape, with its headers; the default shape
 * elsewhere; and where the listeners are. */
static void test_refusals(void **state) {
    hc_conn c;
    hc_response r;
    char v[64], want[128];
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /shaped HTTP/1.1\r\nBad Header\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_int_equal(r.status, 400);
    assert_string_equal(hc_header(&r, "content-type", v, sizeof(v)), "application/json");
    assert_string_equal(hc_header(&r, "x-refused", v, sizeof(v)), "400");
    assert_string_equal(hc_header(&r, "connection", v, sizeof(v)), "close");
    snprintf(want, sizeof(want), "{\"refused\":400,\"reserved\":%d,\"peer\":\"127.0.0.1:", HTTP_EINVAL);
    assert_true(!strncmp(r.body, want, strlen(want)));
    hc_response_free(&r);
    assert_true(hc_wait_closed(&c, 5000));
    hc_close(&c);
    connect_tcp(&c);
    assert_int_equal(hc_send_str(&c, "POST /plain HTTP/1.1\r\nBad Header\r\n\r\n"), 0);
    assert_int_equal(hc_read_response(&c, &r, 5000), 0);
    assert_int_equal(r.status, 400);
    assert_string_equal(hc_header(&r, "content-type", v, sizeof(v)), "text/plain; charset=utf-8");
    assert_null(hc_header(&r, "x-refused", v, sizeof(v)));
    hc_response_free(&r);
    hc_close(&c);
    assert_int_equal(http_server_port(fx.srv, 0), fx.port);
    assert_int_equal(http_server_port(fx.srv, 1), 0); /* the UNIX socket */
    assert_int_equal(http_server_port(fx.srv, 2), 0);
}

static void test_drain(void **state) {
    hc_conn idle, busy;
    connect_tcp(&idle);
    hc_response r;
    assert_int_equal(hc_post(&idle, "/echo", NULL, "x", &r, 5000), 0);
    hc_response_free(&r);
    connect_tcp(&busy);
    assert_int_equal(hc_send_str(&busy, "POST /hold?answer=500 HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    unsigned long long two = 2;
    PROC_POLL_OR_FAIL(requests_at_least, &two, 5000, "the held request");
    server_close_now();
    /* The idle one closes at once, the other gets its answer and then the
     * close; the listener is gone. */
    assert_true(hc_wait_closed(&idle, 2000));
    assert_int_equal(hc_read_response(&busy, &r, 5000), 0);
    assert_string_equal(r.body, "held\n");
    char v[32];
    assert_string_equal(hc_header(&r, "connection", v, sizeof(v)), "close");
    hc_response_free(&r);
    assert_true(hc_wait_closed(&busy, 5000));
    PROC_POLL_OR_FAIL(is_closed, NULL, 5000, "the server to close");
    hc_conn late;
    assert_int_equal(hc_connect_tcp(&late, fx.port), -1);
    assert_int_equal(access(fx.sock, F_OK), -1);
    hc_close(&idle);
    hc_close(&busy);
    assert_int_equal(get_int(&fx.abandoned_hold), 0);
}

static void test_drain_timeout(void **state) {
    hc_conn busy;
    connect_tcp(&busy);
    assert_int_equal(hc_send_str(&busy, "POST /hold HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    unsigned long long one = 1;
    PROC_POLL_OR_FAIL(requests_at_least, &one, 5000, "the held request");
    double t0 = proc_now_ms();
    server_close_now();
    /* Never answered: abandoned at drain_timeout_ms (300). */
    PROC_POLL_OR_FAIL(is_closed, NULL, 5000, "the server to close");
    double took = proc_now_ms() - t0;
    print_message("  drained in %.0f ms (drain_timeout_ms 300)\n", took);
    assert_true(took >= 250);
    assert_int_equal(get_int(&fx.abandoned_hold), 1);
    assert_true(hc_wait_closed(&busy, 2000));
    hc_close(&busy);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keepalive_pipelined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sse_unbuffered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backpressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandon_and_orphan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_not_reading, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_timeout, setup_short_drain, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
