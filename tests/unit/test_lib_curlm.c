/* Unit tests for lib/curlm: libcurl multi driven by a libuv loop (the
 * driver of libsluice's caller and of sluiced's proxy), against a tiny
 * HTTP server on the same loop (127.0.0.1, a port the kernel picks) that
 * answers "hello" to every request, or never answers one whose path
 * holds "silent". Checked: a transfer's end reaches its hook once, with
 * the easy handle's CURLOPT_PRIVATE given back; transfers started from a
 * hook, on a reused connection; many at once; a removal in flight (no
 * hook), a second add refused, libcurl's timeout (the timer path), a
 * file:// transfer, and the driver freed from a hook while another
 * transfer runs. Every test ends with the loop closed: the driver's
 * handles are all closed and freed (AddressSanitizer checks the rest). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <uv.h>

#include "curlm.h"
#include "sluice.h"

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

typedef struct fixture fixture;

typedef struct conn {
    uv_tcp_t h;
    fixture *fx;
    char buf[8192];
    size_t len;
    struct conn *prev, *next;
} conn;

struct fixture {
    uv_loop_t loop;
    uv_tcp_t srv;
    uv_timer_t tick; /* wakes the loop while a test waits */
    int port;
    int accepted, requests;
    conn *conns;
    curlm *m;
};

/* ---- the server -------------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h) {
    conn *c = h->data;
    fixture *fx = c->fx;
    if (c->prev) c->prev->next = c->next;
    else fx->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    (void)hint;
    conn *c = h->data;
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void on_written(uv_write_t *w, int status) {
    (void)status;
    free(w);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
    (void)b;
    conn *c = s->data;
    if (n < 0) {
        if (!uv_is_closing((uv_handle_t *)s)) uv_close((uv_handle_t *)s, on_conn_closed);
        return;
    }
    c->len += (size_t)n;
    char *end;
    while ((end = memmem(c->buf, c->len, "\r\n\r\n", 4)) != NULL) {
        size_t req = (size_t)(end + 4 - c->buf);
        int silent = memmem(c->buf, req, "silent", 6) != NULL;
        memmove(c->buf, c->buf + req, c->len - req);
        c->len -= req;
        c->fx->requests++;
        if (silent) continue;
        uv_write_t *w = malloc(sizeof(*w));
        assert_non_null(w);
        uv_buf_t out = uv_buf_init((char *)RESPONSE, sizeof(RESPONSE) - 1);
        assert_int_equal(uv_write(w, s, &out, 1, on_written), 0);
    }
}

static void on_connection(uv_stream_t *srv, int status) {
    assert_int_equal(status, 0);
    fixture *fx = srv->data;
    conn *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->fx = fx;
    uv_tcp_init(&fx->loop, &c->h);
    c->h.data = c;
    c->next = fx->conns;
    if (fx->conns) fx->conns->prev = c;
    fx->conns = c;
    assert_int_equal(uv_accept(srv, (uv_stream_t *)&c->h), 0);
    fx->accepted++;
    uv_read_start((uv_stream_t *)&c->h, on_alloc, on_read);
}

static void on_tick(uv_timer_t *t) { (void)t; }

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    uv_tcp_init(&fx->loop, &fx->srv);
    fx->srv.data = fx;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&fx->srv, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&fx->srv, 64, on_connection), 0);
    struct sockaddr_in got;
    int len = sizeof(got);
    uv_tcp_getsockname(&fx->srv, (struct sockaddr *)&got, &len);
    fx->port = ntohs(got.sin_port);
    uv_timer_init(&fx->loop, &fx->tick);
    assert_int_equal(curlm_new_uv(&fx->loop, &fx->m), 0);
    *state = fx;
    return 0;
}

/* The driver (unless a test freed it), the server and the loop close;
 * the loop must then have no handle left. */
static int teardown(void **state) {
    fixture *fx = *state;
    curlm_free(fx->m);
    uv_close((uv_handle_t *)&fx->srv, NULL);
    uv_close((uv_handle_t *)&fx->tick, NULL);
    for (conn *c = fx->conns; c; c = c->next)
        if (!uv_is_closing((uv_handle_t *)&c->h)) uv_close((uv_handle_t *)&c->h, on_conn_closed);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_null(fx->conns);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    free(fx);
    return 0;
}

/* Runs the loop until *flag or ms pass; returns *flag. */
static int run_until(fixture *fx, const int *flag, uint64_t ms) {
    uv_update_time(&fx->loop);
    uint64_t end = uv_now(&fx->loop) + ms;
    uv_timer_start(&fx->tick, on_tick, 10, 10);
    while (!*flag && uv_now(&fx->loop) < end) uv_run(&fx->loop, UV_RUN_ONCE);
    uv_timer_stop(&fx->tick);
    return *flag;
}

/* ---- transfers --------------------------------------------------------------------- */

typedef struct xf {
    fixture *fx;
    CURL *easy;
    curlm_xfer x;
    int done; /* hooks run */
    CURLcode cc;
    char body[64];
    size_t blen;
    void (*then)(struct xf *t); /* runs in the hook */
    int chain;                  /* transfers left to start from the hook */
    int chained;                /* ... none left */
} xf;

static size_t on_body(char *d, size_t size, size_t n, void *ud) {
    xf *t = ud;
    size_t k = size * n;
    if (k > sizeof(t->body) - 1 - t->blen) k = sizeof(t->body) - 1 - t->blen;
    memcpy(t->body + t->blen, d, k);
    t->blen += k;
    return size * n;
}

static void xf_init(xf *t, fixture *fx, const char *path) {
    memset(t, 0, sizeof(*t));
    t->fx = fx;
    t->easy = curl_easy_init();
    assert_non_null(t->easy);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", fx->port, path);
    curl_easy_setopt(t->easy, CURLOPT_URL, url);
    curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(t->easy, CURLOPT_PRIVATE, (void *)t); /* the owner's: must come back */
}

static void xf_clean(xf *t) {
    assert_false(curlm_xfer_running(&t->x));
    curl_easy_cleanup(t->easy);
}

static void on_done(void *arg, CURLcode cc) {
    xf *t = arg;
    t->done++;
    t->cc = cc;
    char *priv = NULL;
    curl_easy_getinfo(t->easy, CURLINFO_PRIVATE, &priv);
    assert_ptr_equal(priv, t); /* given back before the hook */
    assert_false(curlm_xfer_running(&t->x));
    if (t->then) t->then(t);
}

static void assert_private(const xf *t) {
    char *priv = NULL;
    curl_easy_getinfo(t->easy, CURLINFO_PRIVATE, &priv);
    assert_ptr_equal(priv, t);
}

static void test_one_transfer(void **state) {
    fixture *fx = *state;
    xf t;
    xf_init(&t, fx, "/one");
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    assert_true(curlm_xfer_running(&t.x));
    assert_int_equal(curlm_running(fx->m), 1);
    assert_true(run_until(fx, &t.done, 5000));
    assert_int_equal(t.done, 1);
    assert_int_equal(t.cc, CURLE_OK);
    assert_string_equal(t.body, "hello");
    assert_int_equal(curlm_running(fx->m), 0);
    assert_private(&t);
    /* Nothing more comes. */
    int never = 0;
    run_until(fx, &never, 50);
    assert_int_equal(t.done, 1);
    xf_clean(&t);
}

/* The hook starts the same transfer again: the connection is reused. */
static void again(xf *t) {
    if (t->chain-- <= 0) {
        t->chained = 1;
        return;
    }
    t->blen = 0;
    memset(t->body, 0, sizeof(t->body));
    assert_int_equal(curlm_add(t->fx->m, &t->x, t->easy, on_done, t), 0);
}

static void test_start_from_hook(void **state) {
    fixture *fx = *state;
    xf t;
    xf_init(&t, fx, "/chain");
    t.then = again;
    t.chain = 2;
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    assert_true(run_until(fx, &t.chained, 5000));
    assert_int_equal(t.done, 3);
    assert_int_equal(t.cc, CURLE_OK);
    assert_string_equal(t.body, "hello");
    assert_int_equal(fx->requests, 3);
    assert_int_equal(fx->accepted, 1);
    xf_clean(&t);
}

static void test_many(void **state) {
    fixture *fx = *state;
    enum { N = 24 };
    xf t[N];
    for (int i = 0; i < N; i++) {
        xf_init(&t[i], fx, "/many");
        assert_int_equal(curlm_add(fx->m, &t[i].x, t[i].easy, on_done, &t[i]), 0);
    }
    assert_int_equal(curlm_running(fx->m), N);
    for (int i = 0; i < N; i++) {
        assert_true(run_until(fx, &t[i].done, 5000));
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(t[i].done, 1);
        assert_int_equal(t[i].cc, CURLE_OK);
        assert_string_equal(t[i].body, "hello");
        xf_clean(&t[i]);
    }
    assert_int_equal(curlm_running(fx->m), 0);
}

static void test_remove_in_flight(void **state) {
    fixture *fx = *state;
    xf t;
    xf_init(&t, fx, "/silent");
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    assert_true(run_until(fx, &fx->requests, 5000));
    assert_int_equal(fx->requests, 1);
    curlm_remove(&t.x);
    assert_false(curlm_xfer_running(&t.x));
    assert_int_equal(curlm_running(fx->m), 0);
    assert_private(&t);
    curlm_remove(&t.x); /* again: nothing */
    int never = 0;
    run_until(fx, &never, 100);
    assert_int_equal(t.done, 0);
    /* The handle is its owner's again: it may run anew, and a driver
     * freed under it gives it back without a hook. */
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    run_until(fx, &never, 50);
    curlm_free(fx->m);
    fx->m = NULL;
    assert_false(curlm_xfer_running(&t.x));
    assert_private(&t);
    assert_int_equal(t.done, 0);
    xf_clean(&t);
}

static void test_refused(void **state) {
    fixture *fx = *state;
    xf t, u;
    xf_init(&t, fx, "/one");
    xf_init(&u, fx, "/one");
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    /* The same record twice, and the same handle in another record. */
    assert_int_equal(curlm_add(fx->m, &t.x, u.easy, on_done, &u), SL_EINVAL);
    assert_int_equal(curlm_add(fx->m, &u.x, t.easy, on_done, &u), SL_EINVAL);
    assert_false(curlm_xfer_running(&u.x));
    char *priv = NULL;
    curl_easy_getinfo(t.easy, CURLINFO_PRIVATE, &priv);
    assert_ptr_equal(priv, &t.x); /* the running transfer's, untouched */
    assert_int_equal(curlm_running(fx->m), 1);
    assert_true(run_until(fx, &t.done, 5000));
    assert_int_equal(t.cc, CURLE_OK);
    assert_int_equal(u.done, 0);
    xf_clean(&t);
    xf_clean(&u);

    curlm *m = NULL;
    curlm_io io = {NULL, NULL, NULL, NULL};
    assert_int_equal(curlm_new(&io, &m), SL_EINVAL);
    assert_null(m);
    curlm_free(NULL);
    curlm_remove(NULL);
    curlm_xfer zero = {0};
    curlm_remove(&zero);
}

static void test_timeout(void **state) {
    fixture *fx = *state;
    xf t;
    xf_init(&t, fx, "/silent");
    curl_easy_setopt(t.easy, CURLOPT_TIMEOUT_MS, 150L);
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    assert_true(run_until(fx, &t.done, 5000));
    assert_int_equal(t.done, 1);
    assert_int_equal(t.cc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(curlm_running(fx->m), 0);
    assert_private(&t);
    xf_clean(&t);
}

static void test_file_url(void **state) {
    fixture *fx = *state;
    char path[] = "/tmp/test_lib_curlm_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "from a file", 11), 11);
    close(fd);
    xf t;
    xf_init(&t, fx, "/");
    char url[128];
    snprintf(url, sizeof(url), "file://%s", path);
    curl_easy_setopt(t.easy, CURLOPT_URL, url);
    assert_int_equal(curlm_add(fx->m, &t.x, t.easy, on_done, &t), 0);
    assert_true(run_until(fx, &t.done, 5000));
    unlink(path);
    assert_int_equal(t.cc, CURLE_OK);
    assert_string_equal(t.body, "from a file");
    assert_int_equal(fx->accepted, 0);
    xf_clean(&t);
}

/* The hook frees the driver while another transfer runs: that one ends
 * without its hook, the driver refuses new ones until the hook returns,
 * and its memory goes afterwards. */
static xf *other;

static void free_driver(xf *t) {
    curlm *m = t->fx->m;
    curlm_free(m);
    t->fx->m = NULL;
    assert_false(curlm_xfer_running(&other->x));
    assert_private(other);
    xf u;
    xf_init(&u, t->fx, "/one");
    assert_int_equal(curlm_add(m, &u.x, u.easy, on_done, &u), SL_ECLOSING);
    xf_clean(&u);
}

static void test_free_from_hook(void **state) {
    fixture *fx = *state;
    xf a, b;
    xf_init(&a, fx, "/one");
    xf_init(&b, fx, "/silent");
    other = &b;
    a.then = free_driver;
    assert_int_equal(curlm_add(fx->m, &b.x, b.easy, on_done, &b), 0);
    assert_int_equal(curlm_add(fx->m, &a.x, a.easy, on_done, &a), 0);
    assert_true(run_until(fx, &a.done, 5000));
    assert_null(fx->m);
    int never = 0;
    run_until(fx, &never, 50);
    assert_int_equal(a.done, 1);
    assert_int_equal(b.done, 0);
    xf_clean(&a);
    xf_clean(&b);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_transfer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_from_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_from_hook, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
