/* test_mock: `sluice mock` as a user meets it.
 *
 * Each test starts the built binary ($SLUICE_BUILD_DIR/sluice mock --port 0)
 * as a child process, talks HTTP/1.1 to it over raw sockets (so malformed
 * and pipelined input can be sent on purpose), and stops it with SIGTERM:
 * the ledger it prints on exit is checked, and so is a clean exit status
 * (under ASan a leak would make it non-zero). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "classify.h"
#include "httpdate.h"
#include "mock_bucket.h"
#include "proc.h"
#include "ratelimit.h"
#include "replay.h"

#define IO_TIMEOUT_MS 15000
#define AZURE_PATH(d) "/openai/deployments/" d "/chat/completions?api-version=2024-06-01"

/* ---- the child process ------------------------------------------------ */

typedef struct mock_child {
    pid_t pid;
    int out; /* the child's stdout */
    int port;
    char *rest; /* stdout after the "listening" line, read at stop */
    size_t rest_len;
} mock_child;

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static const char *sluice_bin(void) {
    static char path[4096];
    const char *dir = getenv("SLUICE_BUILD_DIR");
    snprintf(path, sizeof(path), "%s/sluice", dir ? dir : ".");
    return path;
}

/* Reads one line (without the newline) from fd, waiting at most timeout. */
static int read_line(int fd, char *buf, size_t n, int timeout_ms) {
    size_t len = 0;
    while (len + 1 < n) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0) return -1;
        ssize_t r = read(fd, buf + len, 1);
        if (r <= 0) return -1;
        if (buf[len] == '\n') break;
        len++;
    }
    buf[len] = '\0';
    return 0;
}

/* Starts `sluice mock --port 0 ARGS...` (args NULL-terminated). */
static void child_start(mock_child *c, ...) {
    const char *argv[64];
    int argc = 0, pfd[2];
    va_list ap;
    argv[argc++] = sluice_bin();
    argv[argc++] = "mock";
    argv[argc++] = "--port";
    argv[argc++] = "0";
    va_start(ap, c);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 63;) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    memset(c, 0, sizeof(*c));
    assert_int_equal(pipe(pfd), 0);
    pid_t parent = getpid();
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    c->out = pfd[0];
    char line[256];
    assert_int_equal(read_line(c->out, line, sizeof(line), IO_TIMEOUT_MS), 0);
    assert_int_equal(sscanf(line, "listening on 127.0.0.1:%d", &c->port), 1);
    assert_true(c->port > 0);
}

/* Reads whatever the child printed so far (or until EOF when wait_eof). */
static void child_drain(mock_child *c, int wait_eof) {
    for (;;) {
        struct pollfd p = {c->out, POLLIN, 0};
        if (poll(&p, 1, wait_eof ? IO_TIMEOUT_MS : 200) <= 0) return;
        char buf[65536];
        ssize_t r = read(c->out, buf, sizeof(buf));
        if (r <= 0) return;
        c->rest = realloc(c->rest, c->rest_len + (size_t)r + 1);
        memcpy(c->rest + c->rest_len, buf, (size_t)r);
        c->rest_len += (size_t)r;
        c->rest[c->rest_len] = '\0';
    }
}

/* The last complete JSON line the child printed, parsed. */
static json_t *child_last_json(mock_child *c) {
    assert_non_null(c->rest);
    char *end = c->rest + c->rest_len;
    while (end > c->rest && end[-1] == '\n') *--end = '\0';
    char *line = strrchr(c->rest, '\n');
    line = line ? line + 1 : c->rest;
    json_error_t e;
    json_t *j = json_loads(line, 0, &e);
    if (!j) fail_msg("bad ledger line: %s (%s)", e.text, line);
    return j;
}

/* SIGTERM, wait for a clean exit, return the ledger printed on exit. */
static json_t *child_stop(mock_child *c) {
    int status;
    assert_int_equal(kill(c->pid, SIGTERM), 0);
    child_drain(c, 1);
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("sluice mock did not exit cleanly: status 0x%x", status);
    json_t *j = child_last_json(c);
    close(c->out);
    free(c->rest);
    c->rest = NULL;
    return j;
}

/* Runs the binary with args and returns its exit status; its stdout goes
 * to out (if not NULL). */
static int run_cli(char *out, size_t n, ...) {
    const char *argv[16];
    int argc = 0, pfd[2], status;
    va_list ap;
    argv[argc++] = sluice_bin();
    va_start(ap, n);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 15;) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(pfd[1], 1);
        if (devnull >= 0) dup2(devnull, 2);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0;
    char sink[4096];
    for (;;) {
        char *dst = out && len + 1 < n ? out + len : sink;
        size_t room = out && len + 1 < n ? n - len - 1 : sizeof(sink);
        ssize_t r = read(pfd[0], dst, room);
        if (r <= 0) break;
        if (dst != sink) len += (size_t)r;
    }
    if (out) out[len] = '\0';
    close(pfd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- a tiny HTTP/1.1 client ------------------------------------------- */

typedef struct client {
    int fd;
    char buf[1 << 17];
    size_t len;
} client;

typedef struct response {
    int status;
    char head[8192];
    char body[1 << 16];
    size_t body_len;
} response;

static void client_open(client *cl, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cl->len = 0;
    cl->buf[0] = '\0';
    cl->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(cl->fd >= 0);
    assert_int_equal(connect(cl->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    int one = 1;
    setsockopt(cl->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void client_close(client *cl) {
    if (cl->fd >= 0) close(cl->fd);
    cl->fd = -1;
}

static void client_send(client *cl, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = send(cl->fd, data, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        data += w;
        n -= (size_t)w;
    }
}

/* Reads more into the buffer; 0 on EOF, -1 on timeout or error. */
static int client_fill(client *cl) {
    struct pollfd p = {cl->fd, POLLIN, 0};
    if (poll(&p, 1, IO_TIMEOUT_MS) <= 0) return -1;
    ssize_t r = recv(cl->fd, cl->buf + cl->len, sizeof(cl->buf) - cl->len - 1, 0);
    if (r < 0) return -1;
    cl->len += (size_t)r;
    cl->buf[cl->len] = '\0';
    return r == 0 ? 0 : 1;
}

/* Reads one response (Content-Length framed, as the mock always sends).
 * Returns 0, or -1 when the connection ended first. */
static int client_read(client *cl, response *r) {
    char *eoh;
    while (!(eoh = strstr(cl->buf, "\r\n\r\n")))
        if (client_fill(cl) <= 0) return -1;
    size_t hlen = (size_t)(eoh - cl->buf) + 4;
    assert_true(hlen < sizeof(r->head));
    memcpy(r->head, cl->buf, hlen);
    r->head[hlen] = '\0';
    assert_int_equal(sscanf(r->head, "HTTP/1.1 %d", &r->status), 1);
    const char *cl_h = strcasestr(r->head, "\r\nContent-Length:");
    assert_non_null(cl_h);
    r->body_len = strtoul(cl_h + 17, NULL, 10);
    assert_true(r->body_len < sizeof(r->body));
    while (cl->len < hlen + r->body_len)
        if (client_fill(cl) <= 0) return -1;
    memcpy(r->body, cl->buf + hlen, r->body_len);
    r->body[r->body_len] = '\0';
    memmove(cl->buf, cl->buf + hlen + r->body_len, cl->len - hlen - r->body_len);
    cl->len -= hlen + r->body_len;
    cl->buf[cl->len] = '\0';
    return 0;
}

/* The value of a response header (case-insensitive name), or NULL. */
static const char *header(const response *r, const char *name, char *val, size_t n) {
    char pat[128];
    snprintf(pat, sizeof(pat), "\r\n%s:", name);
    const char *p = strcasestr(r->head, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    size_t len = strcspn(p, "\r\n");
    if (len >= n) len = n - 1;
    memcpy(val, p, len);
    val[len] = '\0';
    return val;
}

static long header_long(const response *r, const char *name) {
    char v[64];
    if (!header(r, name, v, sizeof(v))) fail_msg("missing header %s in:\n%s", name, r->head);
    return strtol(v, NULL, 10);
}

/* Parses a Go duration as the x-ratelimit-reset-* headers carry it
 * ("0s", "250ms", "1.5s", "1m0s", "2h3m4.005s"); -1 when malformed. */
static double go_duration_ms(const char *s) {
    double total = 0;
    if (strcmp(s, "0s") == 0) return 0;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s) return -1;
        if (strncmp(end, "ms", 2) == 0) total += v, s = end + 2;
        else if (*end == 'h') total += v * 3600000, s = end + 1;
        else if (*end == 'm') total += v * 60000, s = end + 1;
        else if (*end == 's') total += v * 1000, s = end + 1;
        else return -1;
    }
    return total;
}

static json_t *body_json(const response *r) {
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, 0, &e);
    if (!j) fail_msg("response body is not JSON: %s: %s", e.text, r->body);
    return j;
}

/* ---- streamed responses (chunked Server-Sent Events) ------------------ */

typedef struct sse_event {
    char name[64]; /* "event:" line, "" when absent */
    char *data;    /* "data:" line (malloc'd) */
    double at_ms;  /* when the test read it, on its own clock */
} sse_event;

typedef struct stream {
    int status;
    char head[8192];
    char *body; /* decoded body not yet split into events */
    size_t len, cap;
    int chunked, ended;
    sse_event ev[64];
    size_t n;
} stream;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void stream_append(stream *s, const char *p, size_t n) {
    if (s->len + n + 1 > s->cap) {
        s->cap = (s->len + n + 1) * 2;
        s->body = realloc(s->body, s->cap);
        assert_non_null(s->body);
    }
    memcpy(s->body + s->len, p, n);
    s->len += n;
    s->body[s->len] = '\0';
}

/* Reads the status line and headers of a streamed answer. */
static int stream_open(client *cl, stream *s) {
    char *eoh;
    memset(s, 0, sizeof(*s));
    while (!(eoh = strstr(cl->buf, "\r\n\r\n")))
        if (client_fill(cl) <= 0) return -1;
    size_t hlen = (size_t)(eoh - cl->buf) + 4;
    assert_true(hlen < sizeof(s->head));
    memcpy(s->head, cl->buf, hlen);
    s->head[hlen] = '\0';
    assert_int_equal(sscanf(s->head, "HTTP/1.1 %d", &s->status), 1);
    s->chunked = strcasestr(s->head, "\r\nTransfer-Encoding: chunked") != NULL;
    memmove(cl->buf, cl->buf + hlen, cl->len - hlen + 1);
    cl->len -= hlen;
    return 0;
}

/* Moves whole chunks from the client's buffer into the body. */
static void stream_decode(client *cl, stream *s) {
    if (!s->chunked) {
        stream_append(s, cl->buf, cl->len);
        cl->len = 0;
        cl->buf[0] = '\0';
        return;
    }
    while (!s->ended) {
        char *crlf = strstr(cl->buf, "\r\n");
        if (!crlf) return;
        size_t size = strtoul(cl->buf, NULL, 16), hl = (size_t)(crlf - cl->buf) + 2;
        if (cl->len < hl + size + 2) return;
        assert_memory_equal(cl->buf + hl + size, "\r\n", 2);
        stream_append(s, cl->buf + hl, size);
        if (size == 0) s->ended = 1;
        memmove(cl->buf, cl->buf + hl + size + 2, cl->len - hl - size - 2 + 1);
        cl->len -= hl + size + 2;
    }
}

/* The next event: 1, 0 at the end of the body, -1 when the connection
 * ended or went quiet first. */
static int stream_next(client *cl, stream *s) {
    for (;;) {
        char *end = s->body ? strstr(s->body, "\n\n") : NULL;
        if (end) {
            sse_event *e = &s->ev[s->n];
            assert_true(s->n < sizeof(s->ev) / sizeof(s->ev[0]));
            *end = '\0';
            e->name[0] = '\0';
            e->data = NULL;
            e->at_ms = now_ms();
            for (char *line = s->body, *next; line; line = next) {
                next = strchr(line, '\n');
                if (next) *next++ = '\0';
                if (strncmp(line, "event: ", 7) == 0) snprintf(e->name, sizeof(e->name), "%s", line + 7);
                else if (strncmp(line, "data: ", 6) == 0) e->data = strdup(line + 6);
                else fail_msg("unexpected SSE line '%s'", line);
            }
            assert_non_null(e->data);
            size_t used = (size_t)(end - s->body) + 2;
            memmove(s->body, s->body + used, s->len - used + 1);
            s->len -= used;
            s->n++;
            return 1;
        }
        if (s->ended) {
            assert_int_equal(s->len, 0);
            return 0;
        }
        stream_decode(cl, s);
        if (s->ended || (s->body && strstr(s->body, "\n\n"))) continue;
        int r = client_fill(cl);
        if (r == 0 && !s->chunked) {
            stream_decode(cl, s);
            s->ended = 1;
            continue;
        }
        if (r <= 0) return -1;
    }
}

/* Reads a whole streamed answer. */
static void stream_read_all(client *cl, stream *s) {
    assert_int_equal(stream_open(cl, s), 0);
    int r;
    while ((r = stream_next(cl, s)) == 1) {}
    assert_int_equal(r, 0);
}

/* Events written one by one over the service time, judged by lower bounds
 * that a loaded machine cannot break: the mock writes event i no earlier
 * than service * i / (n - 1) after it read the request (agent/mock/mock.c),
 * so it reaches the test no earlier than that after the test sent it,
 * however late the test gets to read it (5 ms for the loop's cached
 * clock). Spacing measured between two reads of the test instead failed
 * on CI's loaded machine when the first read came late. Not all written at
 * the end either: the first event is read half the service time before the
 * last (only a stall of the test of over half the service time breaks it). */
static void check_paced(const stream *s, double sent_ms, double service_ms) {
    assert_true(s->n >= 2);
    for (size_t i = 0; i < s->n; i++) {
        double due = service_ms * (double)i / (double)(s->n - 1);
        if (s->ev[i].at_ms - sent_ms < due - 5)
            fail_msg("event %zu of %zu read %.0f ms after the request, due no earlier than %.0f ms", i, s->n,
                     s->ev[i].at_ms - sent_ms, due);
    }
    if (s->ev[s->n - 1].at_ms - s->ev[0].at_ms < service_ms / 2)
        fail_msg("the first event was read %.0f ms before the last (service %.0f ms): written at once?",
                 s->ev[s->n - 1].at_ms - s->ev[0].at_ms, service_ms);
}

static void stream_free(stream *s) {
    for (size_t i = 0; i < s->n; i++) free(s->ev[i].data);
    free(s->body);
    memset(s, 0, sizeof(*s));
}

static json_t *event_json(const sse_event *e) {
    json_error_t err;
    json_t *j = json_loads(e->data, 0, &err);
    if (!j) fail_msg("event data is not JSON: %s: %s", err.text, e->data);
    return j;
}

static const char *stream_header(const stream *s, const char *name, char *val, size_t n) {
    static response r;
    snprintf(r.head, sizeof(r.head), "%s", s->head);
    return header(&r, name, val, n);
}

static long stream_header_long(const stream *s, const char *name) {
    char v[64];
    if (!stream_header(s, name, v, sizeof(v))) fail_msg("missing header %s in:\n%s", name, s->head);
    return strtol(v, NULL, 10);
}

/* Formats a POST with a JSON body. client may be NULL (no x-client-id). */
static size_t post(char *out, size_t n, const char *path, const char *client_id, int close, const char *body) {
    char idh[160] = "";
    if (client_id) snprintf(idh, sizeof(idh), "x-client-id: %s\r\n", client_id);
    int len = snprintf(out, n,
                       "POST %s HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n"
                       "%s%sContent-Length: %zu\r\n\r\n%s",
                       path, idh, close ? "Connection: close\r\n" : "", strlen(body), body);
    assert_true(len > 0 && (size_t)len < n);
    return (size_t)len;
}

static const char *simple_body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* One request on a fresh connection. */
static void call(int port, const char *path, const char *client_id, const char *body, response *r) {
    static client cl;
    char req[1 << 14];
    client_open(&cl, port);
    client_send(&cl, req, post(req, sizeof(req), path, client_id, 1, body));
    assert_int_equal(client_read(&cl, r), 0);
    client_close(&cl);
}

static json_t *get_stats(int port, const char *query) {
    static client cl;
    char req[256];
    response *r = malloc(sizeof(*r));
    client_open(&cl, port);
    int n = snprintf(req, sizeof(req), "GET /stats%s HTTP/1.1\r\nHost: mock\r\n\r\n", query);
    client_send(&cl, req, (size_t)n);
    assert_int_equal(client_read(&cl, r), 0);
    assert_int_equal(r->status, 200);
    client_close(&cl);
    json_t *j = body_json(r);
    free(r);
    return j;
}

static long long jint(json_t *root, const char *path) {
    /* path like "deployments/gpt-4o/accepted" */
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *j = root;
    for (char *k = strtok_r(buf, "/", &save); k; k = strtok_r(NULL, "/", &save)) {
        j = json_object_get(j, k);
        if (!j) fail_msg("no %s in the ledger (at %s)", path, k);
    }
    if (!json_is_integer(j)) fail_msg("%s is not an integer", path);
    return json_integer_value(j);
}

/* ---- tests ------------------------------------------------------------ */

static void test_cli(void **state) {
    char out[8192];
    (void)state;
    assert_int_equal(run_cli(out, sizeof(out), "--help", NULL), 0);
    for (const char *const *c = (const char *const[]){"mock", "demo", "run", "status", "top", NULL}; *c; c++)
        assert_non_null(strstr(out, *c));
    assert_int_equal(run_cli(out, sizeof(out), "--version", NULL), 0);
    assert_true(strncmp(out, "sluice ", 7) == 0);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--help", NULL), 0);
    assert_non_null(strstr(out, "--rpm"));
    assert_non_null(strstr(out, "--neighbour-rpm"));
    assert_non_null(strstr(out, "--quota-exhausted"));
    assert_int_equal(run_cli(NULL, 0, "mock", "--no-such-flag", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "mock", "--rpm", "fast", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "mock", "--rpm", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "mock", "--service-ms", "900-300", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "mock", "--fail-503", "1.5", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "mock", "--deployment", "bad/name", "--port", "0", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "demo", "--no-such-flag", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, "frobnicate", NULL), 2);
    assert_int_equal(run_cli(NULL, 0, NULL), 2);
}

/* At rpm 60 / burst 5, 20 simultaneous calls: exactly 5 accepted, 15 told
 * to come back with Retry-After >= 1 and retry-after-ms > 0; waiting what
 * the headers say is enough for the next call; the ledger agrees with the
 * clients, and its accept times pass a replay through the same bucket. */
static void test_burst_then_refill(void **state) {
    enum { N = 20, BURST = 5, RPM = 60 };
    static client cl[N];
    static response r;
    char req[4096], cid[32];
    long accepted[3] = {0}, limited[3] = {0};
    int remaining_seen[BURST] = {0};
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "60", "--burst", "5", "--service-ms", "20-80", NULL);
    for (int i = 0; i < N; i++) client_open(&cl[i], c.port);
    for (int i = 0; i < N; i++) {
        snprintf(cid, sizeof(cid), "worker-%d", i % 3);
        client_send(&cl[i], req, post(req, sizeof(req), AZURE_PATH("gpt-4o"), cid, 1, simple_body));
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(client_read(&cl[i], &r), 0);
        client_close(&cl[i]);
        if (r.status == 200) {
            accepted[i % 3]++;
            long rem = header_long(&r, "x-ratelimit-remaining-requests");
            assert_true(rem >= 0 && rem < BURST);
            remaining_seen[rem]++;
            assert_int_equal(header_long(&r, "x-ratelimit-limit-requests"), RPM);
            char reset[32];
            assert_non_null(header(&r, "x-ratelimit-reset-requests", reset, sizeof(reset)));
            double reset_ms = go_duration_ms(reset);
            /* the bucket refills one request a second */
            assert_true(reset_ms > (BURST - rem - 1) * 1000.0 && reset_ms <= (BURST - rem) * 1000.0);
            json_t *j = body_json(&r);
            assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
            json_t *u = json_object_get(j, "usage");
            long long comp = json_integer_value(json_object_get(u, "completion_tokens"));
            assert_true(comp >= 1 && comp <= 16); /* max_tokens absent: 16 */
            assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")),
                             json_integer_value(json_object_get(u, "prompt_tokens")) + comp);
            json_decref(j);
            continue;
        }
        assert_int_equal(r.status, 429);
        limited[i % 3]++;
        long ra = header_long(&r, "Retry-After"), ms = header_long(&r, "retry-after-ms");
        assert_true(ra >= 1);
        assert_true(ms > 0 && ms <= 1000);
        assert_int_equal(ra, (ms + 999) / 1000);
        assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 0);
        json_t *j = body_json(&r);
        json_t *e = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(e, "code")), "429");
        assert_non_null(strstr(json_string_value(json_object_get(e, "message")),
                               "Requests to the ChatCompletions_Create Operation"));
        assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "call rate limit"));
        json_decref(j);
    }
    assert_int_equal(accepted[0] + accepted[1] + accepted[2], BURST);
    assert_int_equal(limited[0] + limited[1] + limited[2], N - BURST);
    for (int i = 0; i < BURST; i++) assert_int_equal(remaining_seen[i], 1);

    /* Right now the bucket is empty: one more call is refused and told how
     * long to wait. Waiting exactly that is enough. */
    call(c.port, AZURE_PATH("gpt-4o"), "worker-0", simple_body, &r);
    assert_int_equal(r.status, 429);
    limited[0]++;
    long wait = header_long(&r, "retry-after-ms");
    assert_true(wait > 0 && wait <= 1000);
    /* A fixed wait, and what is tested: exactly the Retry-After given is
     * enough (a shorter one would be refused again). */
    sleep_ms((double)wait);
    call(c.port, AZURE_PATH("gpt-4o"), "worker-0", simple_body, &r);
    assert_int_equal(r.status, 200);
    accepted[0]++;

    /* The provider's ledger matches what the clients saw, exactly. */
    json_t *s = get_stats(c.port, "");
    assert_int_equal(jint(s, "deployments/gpt-4o/requests"), N + 2);
    assert_int_equal(jint(s, "deployments/gpt-4o/accepted"), BURST + 1);
    assert_int_equal(jint(s, "deployments/gpt-4o/status_429"), N - BURST + 1);
    assert_int_equal(jint(s, "totals/requests"), N + 2);
    for (int i = 0; i < 3; i++) {
        char p[64];
        snprintf(p, sizeof(p), "clients/worker-%d/accepted", i);
        assert_int_equal(jint(s, p), accepted[i]);
        snprintf(p, sizeof(p), "clients/worker-%d/status_429", i);
        assert_int_equal(jint(s, p), limited[i]);
    }
    json_t *times = json_object_get(json_object_get(json_object_get(s, "deployments"), "gpt-4o"), "accept_ms");
    assert_int_equal(json_array_size(times), BURST + 1);
    replay rp;
    replay_init(&rp);
    size_t i;
    json_t *t;
    json_array_foreach(times, i, t) assert_int_equal(replay_add(&rp, json_real_value(t), 1), 0);
    assert_int_equal(replay_rejections(&rp, BURST, RPM / 60000.0, NULL), 0);
    /* and the schedule really was at the limit: one less burst rejects. */
    assert_true(replay_rejections(&rp, BURST - 1, RPM / 60000.0, NULL) > 0);
    replay_free(&rp);
    json_decref(s);

    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "totals/requests"), N + 2);
    assert_int_equal(jint(fin, "totals/accepted"), BURST + 1);
    json_decref(fin);
}

/* A content of n copies of s, JSON-ready. */
static char *content_of(const char *s, int n) {
    size_t l = strlen(s);
    char *out = malloc(l * (size_t)n + 1);
    for (int i = 0; i < n; i++) memcpy(out + l * (size_t)i, s, l);
    out[l * (size_t)n] = '\0';
    return out;
}

/* TPM admission charges ceil(chars/4) + max_tokens (16 when absent), in
 * code points, before the call is served. */
static void test_tpm_charges_the_estimate(void **state) {
    static response r;
    char body[8192];
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "6000", "--burst", "100", "--tpm", "600", "--token-burst", "300", "--completion-tokens",
                "100000", "--service-ms", "1-5", NULL);

    char *text = content_of("abcd", 100); /* 400 chars: 100 tokens */
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"}],\"max_tokens\":50}", text);
    free(text);
    call(c.port, AZURE_PATH("tok"), "t", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-tokens"), 600);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 300 - 150);
    json_t *j = body_json(&r), *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 100);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 50);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 150);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason")),
        "length");
    json_decref(j);

    /* Four code points in eight bytes are one token; no max_tokens is 16.
     * Content parts count too. */
    call(c.port, AZURE_PATH("tok"), "t",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
         "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}]}]}",
         &r);
    assert_int_equal(r.status, 200);
    long rem = header_long(&r, "x-ratelimit-remaining-tokens");
    assert_true(rem >= 150 - 17 && rem <= 150 - 17 + 2); /* refill is 0.01 token/ms */
    j = body_json(&r);
    u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 1);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 16);
    json_decref(j);

    /* 200 estimated tokens do not fit in the ~133 left: 429 on tokens. */
    text = content_of("abcd", 150);
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":50}", text);
    free(text);
    call(c.port, AZURE_PATH("tok"), "t", body, &r);
    assert_int_equal(r.status, 429);
    long ms = header_long(&r, "retry-after-ms");
    /* (200 - ~133) tokens at 0.01 token/ms */
    assert_true(ms > 6000 && ms <= 6800);
    assert_int_equal(header_long(&r, "Retry-After"), (ms + 999) / 1000);
    assert_non_null(strstr(r.body, "token rate limit"));
    assert_true(header_long(&r, "x-ratelimit-remaining-requests") >= 97);

    /* Every content part counts: 100 parts of 4 code points, 100 tokens
     * (the mock once stopped at 64 parts). */
    char *parts = malloc(100 * 32 + 256);
    strcpy(parts, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[");
    for (int i = 0; i < 100; i++)
        strcat(parts, i ? ",{\"type\":\"text\",\"text\":\"abcd\"}" : "{\"type\":\"text\",\"text\":\"abcd\"}");
    strcat(parts, "]}]}");
    call(c.port, AZURE_PATH("parts"), "t", parts, &r);
    free(parts);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 100);
    json_decref(j);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 300 - 101);

    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/tok/accepted"), 2);
    assert_int_equal(jint(fin, "deployments/tok/status_429"), 1);
    assert_int_equal(jint(fin, "deployments/tok/tokens_charged"), 150 + 17);
    assert_int_equal(jint(fin, "deployments/tok/tokens_reported"), 150 + 17);
    json_t *toks = json_object_get(json_object_get(json_object_get(fin, "deployments"), "tok"), "accept_tokens");
    assert_int_equal(json_integer_value(json_array_get(toks, 0)), 150);
    assert_int_equal(json_integer_value(json_array_get(toks, 1)), 17);
    json_decref(fin);
}

static void test_quota_exhausted(void **state) {
    static response r;
    char v[64];
    mock_child c;
    (void)state;
    child_start(&c, "--quota-exhausted", NULL);
    call(c.port, "/v1/chat/completions", "q",
         "{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
    assert_int_equal(r.status, 429);
    assert_null(header(&r, "Retry-After", v, sizeof(v)));
    json_t *j = body_json(&r), *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "insufficient_quota");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "insufficient_quota");
    assert_true(strncmp(json_string_value(json_object_get(e, "message")), "You exceeded your current quota", 31) == 0);
    json_decref(j);
    call(c.port, AZURE_PATH("gpt-4o"), "q", simple_body, &r);
    assert_int_equal(r.status, 429);
    assert_non_null(strstr(r.body, "\"insufficient_quota\""));
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/q/status_429"), 2);
    assert_int_equal(jint(fin, "clients/q/insufficient_quota"), 2);
    assert_int_equal(jint(fin, "totals/accepted"), 0);
    json_decref(fin);
}

static void test_not_found_and_bad_requests(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--deployment", "gpt-4o", "--service-ms", "1", NULL);
    /* Legacy completions are not served. */
    call(c.port, "/openai/deployments/gpt-4o/completions", "n", simple_body, &r);
    assert_int_equal(r.status, 404);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "404");
    json_decref(j);
    call(c.port, AZURE_PATH("other"), "n", simple_body, &r);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "DeploymentNotFound"));
    call(c.port, AZURE_PATH("gpt-4o"), "n", "{\"messages\": [", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "invalid_request_error"));
    call(c.port, AZURE_PATH("gpt-4o"), "n",
         "{\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "stream"));
    call(c.port, "/v1/chat/completions", "n", simple_body, &r); /* no model */
    assert_int_equal(r.status, 400);
    call(c.port, "/v1/chat/completions", "n",
         "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
    assert_int_equal(r.status, 200);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/n/status_404"), 2);
    assert_int_equal(jint(fin, "clients/n/status_400"), 3);
    assert_int_equal(jint(fin, "clients/n/accepted"), 1);
    assert_int_equal(jint(fin, "deployments/gpt-4o/status_400"), 2);
    json_decref(fin);
}

/* One chat call carrying the header lines extra (each ending in "\r\n"). */
static void call_with(int port, const char *path, const char *extra, const char *body, response *r) {
    static client cl;
    char req[4096];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n%s"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     path, extra, strlen(body), body);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    client_open(&cl, port);
    client_send(&cl, req, (size_t)n);
    assert_int_equal(client_read(&cl, r), 0);
    client_close(&cl);
}

/* The ledger counts each request under a fingerprint of its credentials:
 * the header's name and the key's last 4 characters, never the key. */
static void test_credentials(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "1", NULL);
    const char *chat = "{\"model\":\"gpt\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    const char *msg = "{\"model\":\"claude\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    call_with(c.port, "/v1/chat/completions", "Authorization: Bearer sk-secret-0123456789-AB12\r\n", chat, &r);
    assert_int_equal(r.status, 200);
    call_with(c.port, "/v1/chat/completions", "Authorization: Bearer sk-secret-0123456789-AB12\r\n", chat, &r);
    call_with(c.port, AZURE_PATH("gpt"), "api-key: azure-secret-0123456789-cd34\r\n", simple_body, &r);
    assert_int_equal(r.status, 200);
    call_with(c.port, "/v1/messages", "x-api-key: sk-ant-secret-0123456789-EF56\r\nanthropic-version: 2023-06-01\r\n",
              msg, &r);
    assert_int_equal(r.status, 200);
    call_with(c.port, "/v1/chat/completions", "api-key: short\r\nAuthorization: Bearer sk-0123456789-both\r\n", chat,
              &r);
    call_with(c.port, "/v1/chat/completions", "", chat, &r);
    call_with(c.port, "/v1/chat/completions", "Authorization: Bearer sk-0123456789-nope\r\n", "{", &r);
    assert_int_equal(r.status, 400);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "credentials/authorization:AB12/accepted"), 2);
    assert_int_equal(jint(fin, "credentials/api-key:cd34/accepted"), 1);
    assert_int_equal(jint(fin, "credentials/x-api-key:EF56/accepted"), 1);
    assert_int_equal(jint(fin, "credentials/authorization:both api-key:short/accepted"), 1);
    assert_int_equal(jint(fin, "credentials/(none)/accepted"), 1);
    assert_int_equal(jint(fin, "credentials/authorization:nope/status_400"), 1);
    assert_int_equal(jint(fin, "credentials/authorization:nope/accepted"), 0);
    /* No secret is kept whole. */
    char *text = json_dumps(fin, 0);
    assert_null(strstr(text, "secret"));
    assert_null(strstr(text, "0123456789"));
    free(text);
    json_decref(fin);
}

/* Garbage on one connection gets a 400 and that connection closed; other
 * connections, even one in the middle of a request, are unaffected. */
static void test_malformed_http(void **state) {
    static client a, b, d;
    static response r;
    char req[4096];
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "1-10", "--max-body", "1000", NULL);
    client_open(&b, c.port);
    client_open(&d, c.port);
    size_t n = post(req, sizeof(req), AZURE_PATH("gpt-4o"), "ok", 0, simple_body);
    client_send(&d, req, n / 2); /* half a request, finished later */

    client_open(&a, c.port);
    static const char garbage[] = "\x16\x03\x01 NOT HTTP AT ALL\r\n\r\n";
    client_send(&a, garbage, sizeof(garbage) - 1);
    assert_int_equal(client_read(&a, &r), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.head, "Connection: close"));
    json_t *j = body_json(&r);
    assert_non_null(json_object_get(j, "error"));
    json_decref(j);
    assert_int_equal(client_fill(&a), 0); /* closed by the server */
    client_close(&a);

    /* A header line without a colon, then a bad chunk size. */
    client_open(&a, c.port);
    static const char bad2[] = "POST /v1/chat/completions HTTP/1.1\r\nHost x\r\n\r\n";
    client_send(&a, bad2, sizeof(bad2) - 1);
    assert_int_equal(client_read(&a, &r), 0);
    assert_int_equal(r.status, 400);
    client_close(&a);
    client_open(&a, c.port);
    static const char bad3[] = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                               "Transfer-Encoding: chunked\r\n\r\nZZ\r\n";
    client_send(&a, bad3, sizeof(bad3) - 1);
    assert_int_equal(client_read(&a, &r), 0);
    assert_int_equal(r.status, 400);
    client_close(&a);

    /* Too large a body: 413 before it is even sent. */
    client_open(&a, c.port);
    static const char big[] = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: 5000\r\n\r\n";
    client_send(&a, big, sizeof(big) - 1);
    assert_int_equal(client_read(&a, &r), 0);
    assert_int_equal(r.status, 413);
    client_close(&a);

    client_send(&b, req, n);
    assert_int_equal(client_read(&b, &r), 0);
    assert_int_equal(r.status, 200);
    client_send(&d, req + n / 2, n - n / 2);
    assert_int_equal(client_read(&d, &r), 0);
    assert_int_equal(r.status, 200);
    /* keep-alive: the same connection serves again */
    client_send(&b, req, n);
    assert_int_equal(client_read(&b, &r), 0);
    assert_int_equal(r.status, 200);
    client_close(&b);
    client_close(&d);

    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "totals/status_400"), 3);
    assert_int_equal(jint(fin, "totals/other_errors"), 1);
    assert_int_equal(jint(fin, "clients/ok/accepted"), 3);
    json_decref(fin);
}

/* Three requests in one write come back in order although their service
 * times differ; Connection: close on the last ends the connection after
 * its response. */
static void test_pipelining(void **state) {
    static client a;
    static response r;
    char req[8192], body[256];
    size_t n = 0;
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "1-300", "--completion-tokens", "1000", "--seed", "3", NULL);
    client_open(&a, c.port);
    for (int i = 1; i <= 6; i++) {
        snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":%d}", i);
        n += post(req + n, sizeof(req) - n, AZURE_PATH("pipe"), "p", i == 6, body);
    }
    client_send(&a, req, n);
    for (int i = 1; i <= 6; i++) {
        assert_int_equal(client_read(&a, &r), 0);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), i);
        json_decref(j);
    }
    assert_int_equal(client_fill(&a), 0);
    client_close(&a);
    json_decref(child_stop(&c));
}

/* A client that leaves before its answer, and an exit with answers still
 * pending: both are counted as abandoned in the final ledger, and the
 * mock still exits cleanly (no leak under ASan). */
/* A ledger count (GET /stats) at least want. */
typedef struct ledger_wait {
    int port;
    const char *path;
    long long want;
} ledger_wait;

static int ledger_reached(void *arg) {
    ledger_wait *w = arg;
    json_t *s = get_stats(w->port, "");
    /* Like jint(), but a count not in the ledger yet is 0. */
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", w->path);
    json_t *j = s;
    for (char *k = strtok_r(buf, "/", &save); j && k; k = strtok_r(NULL, "/", &save)) j = json_object_get(j, k);
    long long v = json_is_integer(j) ? json_integer_value(j) : 0;
    json_decref(s);
    return v >= w->want;
}

static void test_abandoned_and_shutdown(void **state) {
    static client a, b;
    char req[4096];
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "3000", NULL);
    client_open(&a, c.port);
    client_send(&a, req, post(req, sizeof(req), AZURE_PATH("gpt-4o"), "gone", 0, simple_body));
    client_open(&b, c.port);
    client_send(&b, req, post(req, sizeof(req), AZURE_PATH("gpt-4o"), "cut", 0, simple_body));
    /* both admitted (the ledger says so) before a leaves */
    ledger_wait w = {c.port, "totals/accepted", 2};
    PROC_POLL_OR_FAIL(ledger_reached, &w, 5000, "both requests admitted on the ledger");
    client_close(&a);
    /* a's hang-up is seen while its answer is still being served. */
    w = (ledger_wait){c.port, "clients/gone/abandoned", 1};
    PROC_POLL_OR_FAIL(ledger_reached, &w, 5000, "the mock to count the hang-up");
    json_t *fin = child_stop(&c);
    client_close(&b);
    assert_int_equal(jint(fin, "clients/gone/accepted"), 1);
    assert_int_equal(jint(fin, "clients/gone/abandoned"), 1);
    assert_int_equal(jint(fin, "clients/cut/abandoned"), 1);
    assert_int_equal(jint(fin, "deployments/gpt-4o/abandoned"), 2);
    json_decref(fin);
}

/* HTTP/1.0 without keep-alive gets one answer and a close; a client that
 * sends Expect: 100-continue (curl does, for large bodies) gets the interim
 * response first. */
static void test_http10_and_expect(void **state) {
    static client a;
    static response r;
    char req[4096];
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "1", NULL);
    client_open(&a, c.port);
    int n = snprintf(req, sizeof(req), "POST " AZURE_PATH("old") " HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(simple_body), simple_body);
    client_send(&a, req, (size_t)n);
    assert_true(client_fill(&a) > 0);
    while (!strstr(a.buf, "}}")) assert_true(client_fill(&a) > 0);
    assert_true(strncmp(a.buf, "HTTP/1.1 200", 12) == 0);
    while (client_fill(&a) > 0) {}
    client_close(&a);

    client_open(&a, c.port);
    n = snprintf(req, sizeof(req),
                 "POST " AZURE_PATH("new") " HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                           "Content-Length: %zu\r\n\r\n",
                 strlen(simple_body));
    client_send(&a, req, (size_t)n);
    while (!strstr(a.buf, "\r\n\r\n")) assert_true(client_fill(&a) > 0);
    assert_string_equal(a.buf, "HTTP/1.1 100 Continue\r\n\r\n");
    a.len = 0;
    a.buf[0] = '\0';
    client_send(&a, simple_body, strlen(simple_body));
    assert_int_equal(client_read(&a, &r), 0);
    assert_int_equal(r.status, 200);
    client_close(&a);
    json_decref(child_stop(&c));
}

static void test_injected_503(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--fail-503", "1", "--retry-after-503", "2", NULL);
    call(c.port, AZURE_PATH("gpt-4o"), "f", simple_body, &r);
    assert_int_equal(r.status, 503);
    assert_int_equal(header_long(&r, "Retry-After"), 2);
    assert_non_null(strstr(r.body, "ServiceUnavailable"));
    /* a 503 charges nothing */
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 10);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/f/status_503"), 1);
    json_decref(fin);
}

/* POST /control with a query; returns the status, the body in r. */
static int control(int port, const char *query, response *r) {
    static client cl;
    char req[512];
    client_open(&cl, port);
    int n = snprintf(req, sizeof(req), "POST /control%s HTTP/1.1\r\nHost: mock\r\nContent-Length: 0\r\n\r\n", query);
    client_send(&cl, req, (size_t)n);
    assert_int_equal(client_read(&cl, r), 0);
    client_close(&cl);
    return r->status;
}

/* The answer of POST /control: fail_503 and quota_exhausted as given. */
static void assert_faults(const response *r, double fail_503, int quota) {
    json_t *j = body_json(r);
    assert_true(json_number_value(json_object_get(j, "fail_503")) == fail_503);
    assert_int_equal(json_is_true(json_object_get(j, "quota_exhausted")), quota);
    json_decref(j);
}

/* A running mock starts and stops failing on POST /control, keeping its
 * ledger and buckets: 200, then 503s, then insufficient_quota, then 200
 * again, all counted in one ledger. A bad control changes nothing; a GET
 * is a 405; the control calls themselves are not counted. */
static void test_control_at_run_time(void **state) {
    static response r;
    mock_child c;
    (void)state;
    /* 6 rpm: the bucket refills 0.1 a second, so its printed level stays put. */
    child_start(&c, "--rpm", "6", "--burst", "5", "--service-ms", "1", NULL);
    call(c.port, AZURE_PATH("gpt-4o"), "w", simple_body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(control(c.port, "", &r), 200); /* reads the settings */
    assert_faults(&r, 0, 0);
    assert_int_equal(control(c.port, "?fail_503=1", &r), 200);
    assert_faults(&r, 1, 0);
    for (int i = 0; i < 3; i++) {
        call(c.port, AZURE_PATH("gpt-4o"), "w", simple_body, &r);
        assert_int_equal(r.status, 503);
        assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 4); /* charges nothing */
    }
    /* The quota error comes first, as with the flags. */
    assert_int_equal(control(c.port, "?quota_exhausted=1", &r), 200);
    call(c.port, AZURE_PATH("gpt-4o"), "w", simple_body, &r);
    assert_int_equal(r.status, 429);
    assert_non_null(strstr(r.body, "\"insufficient_quota\""));
    /* Every pair is checked before any applies. */
    assert_int_equal(control(c.port, "?fail_503=0&quota_exhausted=2", &r), 400);
    assert_non_null(strstr(r.body, "quota_exhausted=2"));
    assert_int_equal(control(c.port, "?fail_503=0&nonsense=1", &r), 400);
    assert_int_equal(control(c.port, "?fail_503=1.5", &r), 400);
    assert_int_equal(control(c.port, "?fail_503", &r), 400);
    assert_int_equal(control(c.port, "?fail_503=", &r), 400);
    call(c.port, AZURE_PATH("gpt-4o"), "w", simple_body, &r);
    assert_int_equal(r.status, 429);
    assert_int_equal(control(c.port, "?fail_503=0&quota_exhausted=0", &r), 200);
    assert_faults(&r, 0, 0);
    call(c.port, AZURE_PATH("gpt-4o"), "w", simple_body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 3);
    assert_int_equal(control(c.port, "?fail_503=0.25", &r), 200);
    assert_faults(&r, 0.25, 0);
    json_t *s = get_stats(c.port, "");
    assert_true(json_real_value(json_object_get(json_object_get(s, "config"), "fail_503")) == 0.25);
    json_decref(s);
    /* Only POST changes anything. */
    static client cl;
    const char *get = "GET /control?fail_503=1 HTTP/1.1\r\nHost: mock\r\n\r\n";
    client_open(&cl, c.port);
    client_send(&cl, get, strlen(get));
    assert_int_equal(client_read(&cl, &r), 0);
    client_close(&cl);
    assert_int_equal(r.status, 405);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/w/requests"), 7);
    assert_int_equal(jint(fin, "clients/w/accepted"), 2);
    assert_int_equal(jint(fin, "clients/w/status_503"), 3);
    assert_int_equal(jint(fin, "clients/w/insufficient_quota"), 2);
    assert_int_equal(jint(fin, "totals/other_errors"), 1); /* the GET */
    assert_true(json_real_value(json_object_get(json_object_get(fin, "config"), "fail_503")) == 0.25);
    json_decref(fin);
}

/* The neighbour drains the same bucket from outside: our call is refused
 * although we sent nothing before, and the ledger tells who took it. */
static void test_noisy_neighbour(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--deployment", "shared", "--rpm", "60", "--burst", "5", "--neighbour-rpm", "6000", NULL);
    /* The neighbour (100/s) has taken the burst of 5 and met more than 10
     * refusals since: the bucket stays empty. */
    ledger_wait w = {c.port, "clients/(neighbour)/status_429", 11};
    PROC_POLL_OR_FAIL(ledger_reached, &w, 5000, "the neighbour to drain the bucket");
    call(c.port, AZURE_PATH("shared"), "me", simple_body, &r);
    assert_int_equal(r.status, 429);
    json_t *s = get_stats(c.port, "?reset=1");
    json_t *nb = json_object_get(json_object_get(s, "clients"), "(neighbour)");
    assert_non_null(nb);
    long long acc = json_integer_value(json_object_get(nb, "accepted"));
    assert_true(acc >= 5 && acc <= 6);
    assert_true(json_integer_value(json_object_get(nb, "status_429")) > 10);
    json_t *times = json_object_get(json_object_get(json_object_get(s, "deployments"), "shared"), "accept_ms");
    replay rp;
    replay_init(&rp);
    size_t i;
    json_t *t;
    json_array_foreach(times, i, t) replay_add(&rp, json_real_value(t), 1);
    assert_int_equal(replay_rejections(&rp, 5, 1 / 1000.0, NULL), 0);
    replay_free(&rp);
    json_decref(s);
    /* reset=1 zeroed the ledger */
    s = get_stats(c.port, "");
    assert_true(jint(s, "totals/requests") < 40);
    assert_null(json_object_get(json_object_get(s, "clients"), "me"));
    json_decref(s);
    json_decref(child_stop(&c));
}

/* Same seed, same answers; SIGUSR1 prints the ledger without stopping. */
static void test_seed_and_sigusr1(void **state) {
    static response r;
    long long seq[3][6];
    const char *seeds[3] = {"42", "42", "43"};
    (void)state;
    for (int k = 0; k < 3; k++) {
        mock_child c;
        child_start(&c, "--seed", seeds[k], "--service-ms", "1-3", "--rpm", "6000", NULL);
        for (int i = 0; i < 6; i++) {
            call(c.port, AZURE_PATH("s"), "s",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100000}", &r);
            assert_int_equal(r.status, 200);
            json_t *j = body_json(&r);
            seq[k][i] = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
            json_decref(j);
        }
        if (k == 0) {
            assert_int_equal(kill(c.pid, SIGUSR1), 0);
            child_drain(&c, 0);
            json_t *s = child_last_json(&c);
            assert_int_equal(jint(s, "deployments/s/accepted"), 6);
            json_decref(s);
            call(c.port, AZURE_PATH("s"), "s", simple_body, &r); /* still serving */
            assert_int_equal(r.status, 200);
        }
        json_decref(child_stop(&c));
    }
    assert_memory_equal(seq[0], seq[1], sizeof(seq[0]));
    assert_memory_not_equal(seq[0], seq[2], sizeof(seq[0]));
}

static void test_port_file(void **state) {
    char path[] = "/tmp/sluice-mock-port-XXXXXX", line[64];
    mock_child c;
    (void)state;
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    child_start(&c, "--port-file", path, NULL);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_int_equal(atoi(line), c.port);
    json_decref(child_stop(&c));
    struct stat st;
    assert_int_equal(stat(path, &st), -1); /* removed on exit */
}

/* The text of an answer of n tokens: the mock's words, one per token. */
static char *answer_text(int n) {
    static const char *w[] = {"The", "mock", "says", "ok", "and", "counts", "every", "token", "it", "sees"};
    char *t = calloc((size_t)n * 8 + 1, 1);
    for (int i = 0; i < n; i++) {
        if (i) strcat(t, " ");
        strcat(t, w[i % 10]);
    }
    return t;
}

/* Checks the chat.completion.chunk events of a streamed answer: the role
 * first, then `deltas` content deltas that add up to `tokens` words, the
 * finish reason, with include_usage the usage chunk (empty choices) and
 * "usage": null on every other chunk, and [DONE] last. */
static void check_chunks(const stream *st, int deltas, int tokens, const char *finish, int include_usage, long prompt) {
    size_t n = (size_t)deltas + 3 + (include_usage ? 1 : 0);
    char content[16384] = "";
    assert_int_equal(st->n, n);
    assert_string_equal(st->ev[n - 1].data, "[DONE]");
    json_t *first = event_json(&st->ev[0]);
    const char *id = json_string_value(json_object_get(first, "id"));
    assert_non_null(id);
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *j = event_json(&st->ev[i]);
        assert_string_equal(st->ev[i].name, "");
        assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
        assert_string_equal(json_string_value(json_object_get(j, "id")), id);
        json_t *choices = json_object_get(j, "choices"), *usage = json_object_get(j, "usage");
        if (include_usage && i == n - 2) {
            assert_int_equal(json_array_size(choices), 0);
            assert_int_equal(json_integer_value(json_object_get(usage, "prompt_tokens")), prompt);
            assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), tokens);
            assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")), prompt + tokens);
            json_decref(j);
            continue;
        }
        if (include_usage) assert_true(usage && json_is_null(usage));
        else assert_null(usage);
        assert_int_equal(json_array_size(choices), 1);
        json_t *ch = json_array_get(choices, 0), *delta = json_object_get(ch, "delta");
        json_t *fin = json_object_get(ch, "finish_reason");
        if (i == 0) {
            assert_string_equal(json_string_value(json_object_get(delta, "role")), "assistant");
            assert_true(json_is_null(fin));
        } else if (i <= (size_t)deltas) {
            strcat(content, json_string_value(json_object_get(delta, "content")));
            assert_true(json_is_null(fin));
        } else {
            assert_int_equal(json_object_size(delta), 0);
            assert_string_equal(json_string_value(fin), finish);
        }
        json_decref(j);
    }
    json_decref(first);
    char *want = answer_text(tokens);
    assert_string_equal(content, want);
    free(want);
}

/* "stream": true in the Azure and the OpenAI shape: Server-Sent Events in
 * chunked encoding, written one by one over the service time (the first
 * at once, [DONE] when the service time is over), the content split into
 * at most 16 deltas, the usage chunk only with include_usage. A stream is
 * charged and counted like a plain call, and the connection serves again
 * after it. Bad stream fields are 400s. */
static void test_stream_openai(void **state) {
    enum { SERVICE = 600 };
    static client cl;
    static response r;
    static stream st;
    char req[4096], v[64];
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "600", "--burst", "10", "--tpm", "600000", "--token-burst", "100000", "--service-ms",
                "600", "--completion-tokens", "20", NULL);
    client_open(&cl, c.port);
    double sent = now_ms();
    client_send(&cl, req,
                post(req, sizeof(req), AZURE_PATH("gpt-4o"), "s", 0,
                     "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"abcdefgh\"}],"
                     "\"max_tokens\":40}"));
    stream_read_all(&cl, &st);
    assert_int_equal(st.status, 200);
    assert_string_equal(stream_header(&st, "Content-Type", v, sizeof(v)), "text/event-stream");
    assert_true(st.chunked);
    assert_null(stream_header(&st, "Content-Length", v, sizeof(v)));
    assert_int_equal(stream_header_long(&st, "x-ratelimit-remaining-requests"), 9);
    assert_int_equal(stream_header_long(&st, "x-ratelimit-remaining-tokens"), 100000 - (2 + 40));
    check_chunks(&st, 16, 20, "stop", 0, 2);
    /* One write per event, over the service time: never all at once. */
    check_paced(&st, sent, SERVICE);
    stream_free(&st);
    /* The chunked body ended cleanly: the same connection serves again. */
    client_send(&cl, req, post(req, sizeof(req), AZURE_PATH("gpt-4o"), "s", 1, simple_body));
    assert_int_equal(client_read(&cl, &r), 0);
    assert_int_equal(r.status, 200);
    client_close(&cl);

    /* OpenAI style, include_usage; the completion uses all of max_tokens. */
    client_open(&cl, c.port);
    client_send(&cl, req,
                post(req, sizeof(req), "/v1/chat/completions", "s", 1,
                     "{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}],\"max_tokens\":20}"));
    stream_read_all(&cl, &st);
    assert_int_equal(st.status, 200);
    check_chunks(&st, 16, 20, "length", 1, 1);
    stream_free(&st);
    client_close(&cl);
    /* include_usage false: no usage chunk, no "usage" keys. Few tokens:
     * one delta per token. */
    client_open(&cl, c.port);
    client_send(&cl, req,
                post(req, sizeof(req), "/v1/chat/completions", "s", 1,
                     "{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":{\"include_usage\":false},"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}],\"max_tokens\":3}"));
    stream_read_all(&cl, &st);
    check_chunks(&st, 3, 3, "length", 0, 1);
    stream_free(&st);
    client_close(&cl);

    /* HTTP/1.0 has no chunked encoding: the body ends with the connection. */
    client_open(&cl, c.port);
    const char *b10 = "{\"model\":\"gpt-4o\",\"stream\":true,\"messages\":[{\"role\":\"user\","
                      "\"content\":\"abcd\"}],\"max_tokens\":2}";
    int n = snprintf(req, sizeof(req),
                     "POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\n"
                     "x-client-id: s\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(b10), b10);
    client_send(&cl, req, (size_t)n);
    stream_read_all(&cl, &st);
    assert_false(st.chunked);
    assert_non_null(strcasestr(st.head, "\r\nConnection: close"));
    check_chunks(&st, 2, 2, "length", 0, 1);
    stream_free(&st);
    client_close(&cl);

    static const char *const bad[] = {
        "{\"model\":\"gpt-4o\",\"stream\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"model\":\"gpt-4o\",\"stream_options\":{\"include_usage\":true},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":5,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
    };
    static const char *const param[] = {"stream", "stream_options", "stream_options", "stream_options"};
    for (size_t i = 0; i < 4; i++) {
        call(c.port, "/v1/chat/completions", "s", bad[i], &r);
        assert_int_equal(r.status, 400);
        json_t *j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "param")), param[i]);
        json_decref(j);
    }
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/gpt-4o/accepted"), 5);
    assert_int_equal(jint(fin, "deployments/gpt-4o/status_400"), 4);
    assert_int_equal(jint(fin, "deployments/gpt-4o/abandoned"), 0);
    /* Azure: 2+40 and 1+16 (the plain call); OpenAI style: max(1, 20),
     * max(1, 3), max(1, 2), OpenAI's documented rule; reported: the
     * usage */
    assert_int_equal(jint(fin, "deployments/gpt-4o/tokens_charged"), 42 + 17 + 20 + 3 + 2);
    assert_int_equal(jint(fin, "deployments/gpt-4o/tokens_reported"), 22 + 17 + 21 + 4 + 3);
    json_decref(fin);
}

/* A stream holds back the answers pipelined behind it, even one that is
 * ready at once (a 400), and they follow it in order. */
static void test_stream_pipelined(void **state) {
    static client cl;
    static response r;
    static stream st;
    char req[8192];
    size_t n = 0;
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "400", "--completion-tokens", "5", NULL);
    client_open(&cl, c.port);
    n += post(req + n, sizeof(req) - n, "/v1/chat/completions", "p", 0,
              "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    n += post(req + n, sizeof(req) - n, "/v1/chat/completions", "p", 1, "{\"model\":\"m\"}");
    client_send(&cl, req, n);
    stream_read_all(&cl, &st);
    assert_int_equal(st.status, 200);
    check_chunks(&st, 5, 5, "stop", 0, 1);
    stream_free(&st);
    assert_int_equal(client_read(&cl, &r), 0);
    assert_int_equal(r.status, 400);
    assert_int_equal(client_fill(&cl), 0); /* Connection: close on the last */
    client_close(&cl);
    json_decref(child_stop(&c));
}

/* Polls the ledger until path reaches want (exactly, or with at_least
 * want or more), for at most 10 s. */
static void wait_for(int port, const char *path, long long want, int at_least) {
    double deadline = now_ms() + 10000;
    for (;;) {
        json_t *s = get_stats(port, "");
        json_t *j = s;
        char buf[256], *save = NULL;
        snprintf(buf, sizeof(buf), "%s", path);
        for (char *k = strtok_r(buf, "/", &save); k && j; k = strtok_r(NULL, "/", &save)) j = json_object_get(j, k);
        long long v = json_is_integer(j) ? json_integer_value(j) : 0;
        json_decref(s);
        if (v == want || (at_least && v > want)) return;
        if (now_ms() > deadline) fail_msg("%s stayed %lld, expected %lld", path, v, want);
        sleep_ms(10);
    }
}

static void wait_count(int port, const char *path, long long want) { wait_for(port, path, want, 0); }

/* A client that leaves in the middle of a stream: the answer was admitted
 * and charged (accepted), and is counted abandoned as soon as the mock
 * sees the connection go, long before the stream would have ended. */
static void test_stream_disconnect(void **state) {
    static client cl;
    static stream st;
    char req[4096];
    mock_child c;
    (void)state;
    child_start(&c, "--service-ms", "6000", "--completion-tokens", "4", NULL);
    client_open(&cl, c.port);
    client_send(&cl, req,
                post(req, sizeof(req), "/v1/chat/completions", "gone", 0,
                     "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}"));
    assert_int_equal(stream_open(&cl, &st), 0);
    assert_int_equal(stream_next(&cl, &st), 1); /* the role */
    assert_int_equal(stream_next(&cl, &st), 1); /* the first delta, 1 s later */
    double left = now_ms();
    client_close(&cl);
    stream_free(&st);
    wait_count(c.port, "deployments/m/abandoned", 1);
    assert_true(now_ms() - left < 4000);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/m/accepted"), 1);
    assert_int_equal(jint(fin, "deployments/m/abandoned"), 1);
    assert_int_equal(jint(fin, "clients/gone/abandoned"), 1);
    json_decref(fin);
}

/* ---- Anthropic style -------------------------------------------------- */

/* A POST /v1/messages the way the Anthropic SDK sends it. */
static size_t anth_post(char *out, size_t n, const char *client_id, int close, const char *body) {
    int len = snprintf(out, n,
                       "POST /v1/messages HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n"
                       "x-api-key: sk-ant-test\r\nanthropic-version: 2023-06-01\r\n"
                       "x-client-id: %s\r\n%sContent-Length: %zu\r\n\r\n%s",
                       client_id, close ? "Connection: close\r\n" : "", strlen(body), body);
    assert_true(len > 0 && (size_t)len < n);
    return (size_t)len;
}

static void anth_call(int port, const char *client_id, const char *body, response *r) {
    static client cl;
    static char req[1 << 14];
    client_open(&cl, port);
    client_send(&cl, req, anth_post(req, sizeof(req), client_id, 1, body));
    assert_int_equal(client_read(&cl, r), 0);
    client_close(&cl);
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* An anthropic-ratelimit-*-reset header as Unix ms, read with sluice's own
 * RFC 3339 parser. */
static double anth_reset(const response *r, const char *what) {
    char name[96], v[64];
    int64_t ms;
    snprintf(name, sizeof(name), "anthropic-ratelimit-%s-reset", what);
    if (!header(r, name, v, sizeof(v))) fail_msg("missing %s in:\n%s", name, r->head);
    assert_int_equal(strlen(v), 24); /* 2025-01-02T03:04:05.678Z */
    assert_int_equal(v[23], 'Z');
    assert_int_equal(httpdate_parse_rfc3339(v, strlen(v), &ms), 0);
    return (double)ms;
}

static long anth_header(const response *r, const char *what, const char *field) {
    char name[96];
    snprintf(name, sizeof(name), "anthropic-ratelimit-%s-%s", what, field);
    return header_long(r, name);
}

/* The reset of a bucket `deficit_ms` short of full at the decision, which
 * happened between wall times sent and got: full again that much later
 * (rounded up to the ms). */
static void assert_reset(const response *r, const char *what, double sent, double got, double deficit_ms) {
    double reset = anth_reset(r, what);
    if (reset < sent + deficit_ms - 2 || reset > got + deficit_ms + 2)
        fail_msg("%s reset %.0f is not %.0f ms after [%.0f, %.0f]", what, reset, deficit_ms, sent, got);
}

static json_t *ledger_list(json_t *ledger, const char *dep, const char *list) {
    json_t *l = json_object_get(json_object_get(json_object_get(ledger, "deployments"), dep), list);
    if (!json_is_array(l)) fail_msg("no list %s for %s", list, dep);
    return l;
}

static long long list_int(json_t *ledger, const char *dep, const char *list, size_t i) {
    json_t *l = ledger_list(ledger, dep, list);
    if (i >= json_array_size(l)) fail_msg("%s of %s has %zu entries", list, dep, json_array_size(l));
    return json_integer_value(json_array_get(l, i));
}

static double dep_real(json_t *ledger, const char *dep, const char *field) {
    json_t *v = json_object_get(json_object_get(json_object_get(ledger, "deployments"), dep), field);
    if (!json_is_number(v)) fail_msg("no %s for %s", field, dep);
    return json_number_value(v);
}

/* Limits that refill 0.0001 a ms (6 a minute): over a test of a few
 * seconds the buckets gain less than one unit, so every level a header or
 * the ledger shows is the exact sum of what was charged and given back. */
/* The tests of Anthropic's 2025 OTPM rule (max_tokens at admission, the
 * rest given back) ask for it; test_anthropic_generated checks today's. */
#define SLOW_LIMITS                                                                                                    \
    "--rpm", "6", "--burst", "10", "--itpm", "6", "--input-burst", "1000", "--otpm", "6", "--output-burst", "1000",    \
        "--anthropic-otpm", "max"

/* A plain Messages call and the accounting Anthropic documents: the input
 * tokens (ceil(chars / 4) over system and messages) charged to the input
 * bucket and never given back; max_tokens charged to the output bucket and
 * max_tokens - output_tokens given back when the answer is sent, which the
 * next answer's headers and the ledger both show. */
static void test_anthropic_messages(void **state) {
    static response r;
    char v[64];
    mock_child c;
    (void)state;
    child_start(&c, SLOW_LIMITS, "--completion-tokens", "30", "--service-ms", "20", NULL);
    /* 14 + 8 + 4 + 4 code points: 8 input tokens; the image block has no text */
    const char *b1 = "{\"model\":\"claude-x\",\"max_tokens\":100,\"system\":\"You are terse.\","
                     "\"messages\":[{\"role\":\"user\",\"content\":\"abcdefgh\"},"
                     "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ijkl\"}]},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}},"
                     "{\"type\":\"text\",\"text\":\"mnop\"}]}]}";
    double sent = wall_ms();
    anth_call(c.port, "a", b1, &r);
    double got = wall_ms();
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_true(strncmp(json_string_value(json_object_get(j, "id")), "msg_mock_", 9) == 0);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(j, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "claude-x");
    json_t *content = json_object_get(j, "content");
    assert_int_equal(json_array_size(content), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "type")), "text");
    char *want = answer_text(30);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "text")), want);
    free(want);
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "end_turn");
    assert_true(json_is_null(json_object_get(j, "stop_sequence")));
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 8);
    assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), 30);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 0);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_creation_input_tokens")), 0);
    json_decref(j);
    assert_true(strncmp(header(&r, "request-id", v, sizeof(v)), "req_mock_", 9) == 0);
    /* After admission: 1 request, 8 input and 100 output tokens gone. */
    assert_int_equal(anth_header(&r, "requests", "limit"), 6);
    assert_int_equal(anth_header(&r, "requests", "remaining"), 9);
    assert_int_equal(anth_header(&r, "input-tokens", "limit"), 6);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 992);
    assert_int_equal(anth_header(&r, "output-tokens", "limit"), 6);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 900);
    /* tokens-*: the most restrictive of the two, output here */
    assert_int_equal(anth_header(&r, "tokens", "remaining"), 900);
    assert_reset(&r, "requests", sent, got, 1 / 0.0001);
    assert_reset(&r, "input-tokens", sent, got, 8 / 0.0001);
    assert_reset(&r, "output-tokens", sent, got, 100 / 0.0001);
    assert_reset(&r, "tokens", sent, got, 100 / 0.0001);
    assert_null(header(&r, "x-ratelimit-remaining-requests", v, sizeof(v)));

    /* sluice's own header reader sees the four dimensions. */
    ratelimit_feedback fb;
    ratelimit_value rv;
    ratelimit_init(&fb, -1);
    for (char *line = strstr(r.head, "\r\n"); line && line[2] != '\r'; line = strstr(line + 2, "\r\n")) {
        char *colon = strchr(line + 2, ':'), *eol = strstr(line + 2, "\r\n");
        if (colon && colon < eol)
            ratelimit_add_header(&fb, line + 2, (size_t)(colon - line - 2), colon + 1, (size_t)(eol - colon - 1),
                                 (int64_t)got);
    }
    assert_int_equal(fb.invalid, 0);
    assert_int_equal(ratelimit_get(&fb, RATELIMIT_INPUT_TOKENS, &rv), RATELIMIT_SRC_PROVIDER);
    assert_int_equal(rv.remaining, 992);
    assert_int_equal(ratelimit_get(&fb, RATELIMIT_OUTPUT_TOKENS, &rv), RATELIMIT_SRC_PROVIDER);
    assert_int_equal(rv.remaining, 900);
    assert_true(rv.reset_ms > 1000000 - 100 && rv.reset_ms <= 1000000 + 2);

    /* The answer went out: 70 of the 100 came back. This call uses all of
     * its max_tokens, so it gives nothing back. */
    anth_call(c.port, "a",
              "{\"model\":\"claude-x\",\"max_tokens\":30,\"messages\":[{\"role\":\"user\","
              "\"content\":\"abcd\"}]}",
              &r);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "max_tokens");
    json_decref(j);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 900 + 70 - 30);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 992 - 1); /* never refunded */
    assert_int_equal(anth_header(&r, "tokens", "remaining"), 940);
    assert_int_equal(anth_header(&r, "requests", "remaining"), 8);
    /* A system given as text blocks counts too: 4 + 4 code points. */
    anth_call(c.port, "a",
              "{\"model\":\"claude-x\",\"max_tokens\":30,\"system\":[{\"type\":\"text\",\"text\":\"wxyz\"}],"
              "\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}]}",
              &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 991 - 2);

    json_t *s = get_stats(c.port, "");
    assert_int_equal(jint(s, "deployments/claude-x/accepted"), 3);
    assert_int_equal(list_int(s, "claude-x", "accept_input", 0), 8);
    assert_int_equal(list_int(s, "claude-x", "accept_input", 1), 1);
    assert_int_equal(list_int(s, "claude-x", "accept_input", 2), 2);
    assert_int_equal(list_int(s, "claude-x", "accept_output", 0), 100);
    assert_int_equal(list_int(s, "claude-x", "accept_output", 1), 30);
    assert_int_equal(list_int(s, "claude-x", "accept_tokens", 0), 0);
    assert_int_equal(json_array_size(ledger_list(s, "claude-x", "output_refund")), 1);
    assert_int_equal(list_int(s, "claude-x", "output_refund", 0), 70);
    double accept0 = json_real_value(json_array_get(ledger_list(s, "claude-x", "accept_ms"), 0));
    double refund0 = json_real_value(json_array_get(ledger_list(s, "claude-x", "output_refund_ms"), 0));
    /* When the answer was sent: the service time after the admission, less
     * what the loop's cached clock (the response timer's) may lag the
     * ledger's stamp on a loaded machine (refund0 - accept0 was under 19
     * ms once in CI; the order and the service time are what it proves). */
    assert_true(refund0 >= accept0 + 20 - 10);
    assert_int_equal((long long)floor(dep_real(s, "claude-x", "remaining_input")), 1000 - 8 - 1 - 2);
    assert_int_equal((long long)floor(dep_real(s, "claude-x", "remaining_output")), 1000 - 100 + 70 - 30 - 30);
    assert_int_equal(jint(s, "deployments/claude-x/tokens_charged"), 108 + 31 + 32);
    assert_int_equal(jint(s, "deployments/claude-x/tokens_reported"), 38 + 31 + 32);
    json_t *lim = json_object_get(json_object_get(json_object_get(s, "deployments"), "claude-x"), "limits");
    assert_true(json_real_value(json_object_get(lim, "rpm")) == 6);
    assert_true(json_real_value(json_object_get(lim, "itpm")) == 6);
    assert_true(json_real_value(json_object_get(lim, "input_burst")) == 1000);
    assert_true(json_real_value(json_object_get(lim, "otpm")) == 6);
    assert_true(json_real_value(json_object_get(lim, "output_burst")) == 1000);
    assert_true(json_real_value(json_object_get(lim, "tpm")) == 0);
    /* The ledger's own lists replay clean through the same buckets. */
    replay in, out;
    replay_init(&in);
    replay_init(&out);
    for (size_t i = 0; i < 3; i++) {
        double t = json_real_value(json_array_get(ledger_list(s, "claude-x", "accept_ms"), i));
        replay_add(&in, t, (double)list_int(s, "claude-x", "accept_input", i));
        replay_add(&out, t, (double)list_int(s, "claude-x", "accept_output", i));
    }
    replay_add(&out, refund0, -70);
    assert_int_equal(replay_rejections(&in, 1000, 0.0001, NULL), 0);
    assert_int_equal(replay_rejections(&out, 1000, 0.0001, NULL), 0);
    replay_free(&in);
    replay_free(&out);
    json_decref(s);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/a/accepted"), 3);
    json_decref(fin);
}

/* Cache reads (--cache-read-tokens) are reported and not charged to the
 * input bucket: input_tokens is the uncached rest. */
static void test_anthropic_cache_reads(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, SLOW_LIMITS, "--cache-read-tokens", "5", "--completion-tokens", "1", "--service-ms", "1", NULL);
    /* 30 code points: 8 input tokens, 5 of them from the cache */
    anth_call(c.port, "c",
              "{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":"
              "\"abcdefghijklmnopqrstuvwxyz0123\"}]}",
              &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r), *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 5);
    json_decref(j);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 1000 - 3);
    /* A prompt smaller than the cache read is read whole: nothing charged. */
    anth_call(c.port, "c", "{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"ab\"}]}",
              &r);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 0);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 1);
    json_decref(j);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 997);
    json_t *fin = child_stop(&c);
    assert_int_equal(list_int(fin, "m", "accept_input", 0), 3);
    assert_int_equal(list_int(fin, "m", "accept_input", 1), 0);
    assert_int_equal(jint(fin, "deployments/m/tokens_reported"), (3 + 5 + 1) + (0 + 1 + 1));
    json_decref(fin);
}

/* Refusals on each token bucket: an input cost above the capacity is
 * admitted only into a full bucket (and leaves it in debt); an output
 * bucket holding max_tokens of a call in flight refuses the next one until
 * that answer has given back what it did not use. 429 in Anthropic's
 * shape, retry-after in whole seconds from the bucket rules. */
/* --anthropic-round: the token remaining counts rounded to the nearest
 * N, as Anthropic's page says of its own ("rounded to the nearest
 * thousand"), halves up; the requests' count stays exact. And
 * --completion-tokens as a range. */
static void test_anthropic_rounded_counts(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--anthropic-otpm", "max", "--rpm", "6000", "--burst", "100", "--itpm", "60000", "--input-burst",
                "10000", "--otpm", "60000", "--output-burst", "10000", "--anthropic-round", "1000", NULL);
    /* 44 code points: 11 input tokens, 9 989 left; max_tokens 600: 9 400 */
    anth_call(c.port, "q",
              "{\"model\":\"m\",\"max_tokens\":600,\"messages\":[{\"role\":\"user\",\"content\":"
              "\"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqr\"}]}",
              &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 10000);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 9000);
    assert_int_equal(anth_header(&r, "tokens", "remaining"), 9000);
    assert_int_equal(anth_header(&r, "requests", "remaining"), 99);
    json_decref(child_stop(&c));
    /* --completion-tokens LO-HI: answers drawn from the range, capped by
     * max_tokens. */
    child_start(&c, "--completion-tokens", "5-9", "--rpm", "60000", "--burst", "100", "--seed", "3", NULL);
    int seen[10] = {0}, kinds = 0;
    for (int i = 0; i < 30; i++) {
        anth_call(c.port, "q",
                  "{\"model\":\"m\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        long long out = json_integer_value(json_object_get(json_object_get(j, "usage"), "output_tokens"));
        json_decref(j);
        assert_true(out >= 5 && out <= 9);
        kinds += !seen[out]++;
    }
    assert_true(kinds >= 3);
    anth_call(c.port, "q", "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
              &r);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "output_tokens")), 4);
    json_decref(j);
    json_decref(child_stop(&c));
}

static void test_anthropic_rate_limits(void **state) {
    static client slow;
    static response r;
    char req[4096], v[64];
    mock_child c;
    (void)state;
    child_start(&c, "--anthropic-otpm", "max", "--rpm", "6000", "--burst", "100", "--itpm", "6", "--input-burst", "10",
                "--otpm", "6", "--output-burst", "100", "--completion-tokens", "30", "--service-ms", "1500", NULL);
    /* 44 code points, 11 input tokens > 10: into the full bucket, to -1 */
    const char *big = "{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqr\"}]}";
    client_open(&slow, c.port);
    client_send(&slow, req, anth_post(req, sizeof(req), "r", 1, big));
    assert_int_equal(client_read(&slow, &r), 0);
    client_close(&slow);
    assert_int_equal(r.status, 200);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 0);
    /* 1 more input token, 1.5 s (the service time) after the bucket went
     * to -1: (1 - (-1 + 1500 * 0.0001)) / 0.0001 ms = 18.5 s, so 19 */
    anth_call(c.port, "r", "{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
              &r);
    assert_int_equal(r.status, 429);
    assert_int_equal(header_long(&r, "retry-after"), 19);
    assert_null(header(&r, "retry-after-ms", v, sizeof(v)));
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "rate_limit_error");
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "input tokens per minute"));
    assert_non_null(json_object_get(j, "request_id"));
    classify_result cr;
    assert_int_equal(classify_status_body(r.status, r.body, r.body_len, &cr), CLASSIFY_RATE_LIMITED);
    assert_true(cr.retryable);
    json_decref(j);
    /* nothing was charged by the refusal (the request bucket, 0.1 a ms,
     * is full again after the first call's 1.5 s) */
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 90);
    assert_int_equal(anth_header(&r, "requests", "remaining"), 100);
    json_decref(get_stats(c.port, "?reset=all"));

    /* Output: 80 of 100 held by a call in flight; a call wanting 50 waits
     * (50 - 20) / 0.0001 ms = 300 s ... */
    const char *want80 = "{\"model\":\"m\",\"max_tokens\":80,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    const char *want50 = "{\"model\":\"m\",\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    client_open(&slow, c.port);
    client_send(&slow, req, anth_post(req, sizeof(req), "r", 1, want80));
    wait_count(c.port, "deployments/m/accepted", 1);
    anth_call(c.port, "r", want50, &r);
    assert_int_equal(r.status, 429);
    assert_int_equal(header_long(&r, "retry-after"), 300);
    assert_non_null(strstr(r.body, "output tokens per minute"));
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 20);
    /* ... until that answer has gone out and given back 80 - 30 = 50. */
    assert_int_equal(client_read(&slow, &r), 0);
    client_close(&slow);
    assert_int_equal(r.status, 200);
    anth_call(c.port, "r", want50, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 20 + 50 - 50);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/m/status_429"), 1);
    assert_int_equal(jint(fin, "deployments/m/accepted"), 2);
    json_decref(fin);
}

/* Every way a Messages request can be malformed, and an unknown model: the
 * status and Anthropic's error shape, nothing charged, and the ledger's
 * counts (a 400 before the model is known counts for no deployment). */
static void test_anthropic_bad_requests(void **state) {
    static client cl;
    static response r;
    char req[4096], v[64];
    mock_child c;
    (void)state;
    child_start(&c, "--deployment", "claude", "--service-ms", "1", NULL);
    /* no anthropic-version */
    call(c.port, "/v1/messages", "b",
         "{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "\"invalid_request_error\""));
    assert_non_null(strstr(r.body, "anthropic-version"));
    assert_null(header(&r, "anthropic-ratelimit-requests-remaining", v, sizeof(v)));
    static const struct {
        const char *body;
        int status;
        const char *prefix; /* of error.message */
        int resolved;       /* the model was known: counted for it */
    } cases[] = {
        {"{\"model\":", 400, "The request body is not a JSON object", 0},
        {"[1,2]", 400, "The request body is not a JSON object", 0},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "model: Field required", 0},
        {"{\"model\":7,\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "model: Input should be a valid string", 0},
        {"{\"model\":\"gpt-9\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404,
         "model: gpt-9", 0},
        {"{\"model\":\"a/b\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404, "model: a/b",
         0},
        {"{\"model\":\"claude\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "max_tokens: Field required", 1},
        {"{\"model\":\"claude\",\"max_tokens\":\"5\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "max_tokens: Input should be a valid integer", 1},
        {"{\"model\":\"claude\",\"max_tokens\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "max_tokens: Input should be a valid integer", 1},
        {"{\"model\":\"claude\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "max_tokens: Input should be greater than or equal to 1", 1},
        {"{\"model\":\"claude\",\"max_tokens\":1000001,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         "max_tokens: 1000001 > 1000000", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5}", 400, "messages: Field required", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":{}}", 400, "messages: Input should be a valid list", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[]}", 400, "messages: at least one message is required",
         1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[\"hi\"]}", 400,
         "messages.0: Input should be a valid dictionary", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
         "\"system\",\"content\":\"x\"}]}",
         400, "messages.1.role: Input should be 'user' or 'assistant'", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", 400,
         "messages.0.content: Field required", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":3}]}", 400,
         "messages.0.content: Input should be a valid string or a list of content blocks", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}",
         400, "messages.0.content.0.type: Field required", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
         400, "messages.0.content.0.text: Field required", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[5]}]}", 400,
         "messages.0.content.0: Input should be a valid dictionary", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         400, "system: Input should be a valid string or a list of text blocks", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}",
         400, "system.0.type: Input should be 'text'", 1},
        {"{\"model\":\"claude\",\"max_tokens\":5,\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}"
         "]}",
         400, "stream: Input should be a valid boolean", 1},
    };
    int n400 = 1, n400_dep = 0, n404 = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        anth_call(c.port, "b", cases[i].body, &r);
        if (r.status != cases[i].status) fail_msg("case %zu: status %d: %s", i, r.status, r.body);
        json_t *j = body_json(&r);
        json_t *e = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
        assert_string_equal(json_string_value(json_object_get(e, "type")),
                            cases[i].status == 404 ? "not_found_error" : "invalid_request_error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        if (strncmp(msg, cases[i].prefix, strlen(cases[i].prefix)) != 0)
            fail_msg("case %zu: message '%s', expected '%s...'", i, msg, cases[i].prefix);
        assert_string_equal(json_string_value(json_object_get(j, "request_id")),
                            header(&r, "request-id", v, sizeof(v)));
        json_decref(j);
        if (cases[i].resolved) {
            /* the buckets' headers, full: nothing was charged */
            assert_int_equal(anth_header(&r, "requests", "remaining"), 10);
            n400_dep++;
        } else {
            assert_null(header(&r, "anthropic-ratelimit-requests-remaining", v, sizeof(v)));
        }
        if (cases[i].status == 400) n400++;
        else n404++;
    }
    /* x-api-key is accepted and ignored; the same connection serves again */
    client_open(&cl, c.port);
    const char *ok = "{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    client_send(&cl, req, anth_post(req, sizeof(req), "b", 0, ok));
    assert_int_equal(client_read(&cl, &r), 0);
    assert_int_equal(r.status, 200);
    client_send(&cl, req, anth_post(req, sizeof(req), "b", 1, ok));
    assert_int_equal(client_read(&cl, &r), 0);
    assert_int_equal(r.status, 200);
    client_close(&cl);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/b/status_400"), n400);
    assert_int_equal(jint(fin, "clients/b/status_404"), n404);
    assert_int_equal(jint(fin, "clients/b/accepted"), 2);
    assert_int_equal(jint(fin, "deployments/claude/status_400"), n400_dep);
    assert_int_equal(jint(fin, "deployments/claude/requests"), n400_dep + 2);
    assert_int_equal(jint(fin, "totals/requests"), n400 + n404 + 2);
    json_decref(fin);
}

/* --quota-exhausted and --fail-503 in Anthropic style: what a spent credit
 * balance gets (400 invalid_request_error, no retry-after), and 529
 * overloaded_error; what sluice's classifier makes of them. */
static void test_anthropic_faults(void **state) {
    static response r;
    char v[64];
    classify_result cr;
    mock_child c;
    const char *ok = "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    (void)state;
    child_start(&c, "--quota-exhausted", NULL);
    anth_call(c.port, "q", ok, &r);
    assert_int_equal(r.status, 400);
    assert_null(header(&r, "retry-after", v, sizeof(v)));
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                        "invalid_request_error");
    assert_true(strncmp(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                        "Your credit balance is too low", 30) == 0);
    json_decref(j);
    assert_int_equal(anth_header(&r, "requests", "remaining"), 10);
    assert_int_equal(classify_status_body(r.status, r.body, r.body_len, &cr), CLASSIFY_QUOTA_EXHAUSTED);
    assert_false(cr.retryable);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/q/insufficient_quota"), 1);
    assert_int_equal(jint(fin, "clients/q/status_400"), 1);
    assert_int_equal(jint(fin, "clients/q/status_429"), 0);
    json_decref(fin);

    child_start(&c, "--fail-503", "1", "--retry-after-503", "3", NULL);
    anth_call(c.port, "f", ok, &r);
    assert_int_equal(r.status, 529);
    assert_int_equal(header_long(&r, "retry-after"), 3);
    assert_non_null(strstr(r.body, "\"overloaded_error\""));
    assert_int_equal(anth_header(&r, "requests", "remaining"), 10);
    assert_int_equal(classify_status_body(r.status, r.body, r.body_len, &cr), CLASSIFY_OVERLOADED);
    assert_true(cr.retryable);
    fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/f/status_503"), 1);
    json_decref(fin);
}

/* "stream": true in Anthropic style: message_start with the input usage and
 * 1 output token, one text block in deltas, message_delta with the
 * cumulative output and the stop reason, message_stop; charged like a
 * plain call, and the output given back when the stream ends. */
static void test_anthropic_stream(void **state) {
    static client cl;
    static response r;
    static stream st;
    char req[4096];
    mock_child c;
    (void)state;
    child_start(&c, SLOW_LIMITS, "--cache-read-tokens", "2", "--completion-tokens", "20", "--service-ms", "500", NULL);
    client_open(&cl, c.port);
    /* 24 code points: 6 input tokens, 2 cached */
    double sent = now_ms();
    client_send(&cl, req,
                anth_post(req, sizeof(req), "s", 0,
                          "{\"model\":\"m\",\"max_tokens\":64,\"stream\":true,\"system\":\"abcdefgh\","
                          "\"messages\":[{\"role\":\"user\",\"content\":\"abcdefghijklmnop\"}]}"));
    stream_read_all(&cl, &st);
    assert_int_equal(st.status, 200);
    assert_true(st.chunked);
    assert_int_equal(stream_header_long(&st, "anthropic-ratelimit-input-tokens-remaining"), 1000 - 4);
    assert_int_equal(stream_header_long(&st, "anthropic-ratelimit-output-tokens-remaining"), 1000 - 64);
    static const char *names[] = {"message_start", "content_block_start"};
    assert_int_equal(st.n, 16 + 5);
    char text[4096] = "";
    for (size_t i = 0; i < st.n; i++) {
        json_t *j = event_json(&st.ev[i]);
        const char *want = i < 2     ? names[i]
                           : i < 18  ? "content_block_delta"
                           : i == 18 ? "content_block_stop"
                           : i == 19 ? "message_delta"
                                     : "message_stop";
        assert_string_equal(st.ev[i].name, want);
        assert_string_equal(json_string_value(json_object_get(j, "type")), want);
        if (i == 0) {
            json_t *msg = json_object_get(j, "message"), *u = json_object_get(msg, "usage");
            assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
            assert_int_equal(json_array_size(json_object_get(msg, "content")), 0);
            assert_true(json_is_null(json_object_get(msg, "stop_reason")));
            assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 4);
            assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 2);
            assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), 1);
        } else if (i >= 2 && i < 18) {
            json_t *d = json_object_get(j, "delta");
            assert_string_equal(json_string_value(json_object_get(d, "type")), "text_delta");
            strcat(text, json_string_value(json_object_get(d, "text")));
        } else if (i == 19) {
            assert_string_equal(json_string_value(json_object_get(json_object_get(j, "delta"), "stop_reason")),
                                "end_turn");
            assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "output_tokens")), 20);
        }
        json_decref(j);
    }
    char *want = answer_text(20);
    assert_string_equal(text, want);
    free(want);
    check_paced(&st, sent, 500);
    stream_free(&st);
    /* The stream ended: 64 - 20 came back, which the next answer shows. */
    client_send(
        &cl, req,
        anth_post(req, sizeof(req), "s", 1,
                  "{\"model\":\"m\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}]}"));
    assert_int_equal(client_read(&cl, &r), 0);
    client_close(&cl);
    assert_int_equal(r.status, 200);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 1000 - 64 + 44 - 10);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 1000 - 4 - 0);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/m/accepted"), 2);
    assert_int_equal(list_int(fin, "m", "output_refund", 0), 44);
    /* the second used all of its max_tokens: nothing to give back */
    assert_int_equal(json_array_size(ledger_list(fin, "m", "output_refund")), 1);
    json_decref(fin);
}

/* A client gone in the middle of an Anthropic stream: counted abandoned,
 * and the output bucket gets back, at that moment, what had not been
 * generated: max_tokens less the deltas already sent. A plain call cut
 * short settles as the whole answer would, when the client leaves. */
static void test_anthropic_disconnect(void **state) {
    static client cl;
    static stream st;
    char req[4096];
    mock_child c;
    (void)state;
    /* 4 tokens, one delta each: 9 events 750 ms apart */
    child_start(&c, SLOW_LIMITS, "--completion-tokens", "4", "--service-ms", "6000", NULL);
    client_open(&cl, c.port);
    client_send(&cl, req,
                anth_post(req, sizeof(req), "gone", 0,
                          "{\"model\":\"m\",\"max_tokens\":50,\"stream\":true,\"messages\":"
                          "[{\"role\":\"user\",\"content\":\"x\"}]}"));
    assert_int_equal(stream_open(&cl, &st), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(stream_next(&cl, &st), 1);
    assert_string_equal(st.ev[2].name, "content_block_delta"); /* 1 token sent, at 1.5 s */
    client_close(&cl);
    stream_free(&st);
    wait_count(c.port, "deployments/m/abandoned", 1);
    json_t *s1 = get_stats(c.port, "");
    assert_int_equal(jint(s1, "deployments/m/accepted"), 1);
    assert_int_equal(json_array_size(ledger_list(s1, "m", "output_refund")), 1);
    assert_int_equal(list_int(s1, "m", "output_refund", 0), 50 - 1);
    double at = json_real_value(json_array_get(ledger_list(s1, "m", "accept_ms"), 0));
    double back = json_real_value(json_array_get(ledger_list(s1, "m", "output_refund_ms"), 0));
    assert_true(back - at >= 1500 - 1 && back - at < 2250); /* before the next delta was due */
    assert_int_equal((long long)floor(dep_real(s1, "m", "remaining_output")), 1000 - 50 + 49);
    json_decref(s1);

    client_open(&cl, c.port);
    client_send(&cl, req,
                anth_post(req, sizeof(req), "cut", 0,
                          "{\"model\":\"m\",\"max_tokens\":50,\"messages\":[{\"role\":\"user\","
                          "\"content\":\"x\"}]}"));
    wait_count(c.port, "deployments/m/accepted", 2);
    client_close(&cl);
    wait_count(c.port, "deployments/m/abandoned", 2);
    json_t *fin = child_stop(&c);
    assert_int_equal(list_int(fin, "m", "output_refund", 1), 50 - 4);
    assert_int_equal((long long)floor(dep_real(fin, "m", "remaining_output")), 999 - 50 + 46);
    assert_int_equal(jint(fin, "clients/gone/abandoned"), 1);
    assert_int_equal(jint(fin, "clients/cut/abandoned"), 1);
    assert_int_equal((long long)floor(dep_real(fin, "m", "remaining_input")), 1000 - 1 - 1);
    json_decref(fin);
}

/* ---- changes at run time (POST /control) ------------------------------ */

/* A value of the /control answer. */
static double answer_num(const response *r, const char *path) {
    json_t *j = body_json(r), *v = j;
    char buf[128], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok_r(buf, "/", &save); k && v; k = strtok_r(NULL, "/", &save)) v = json_object_get(v, k);
    if (!v) fail_msg("no %s in %s", path, r->body);
    double d = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
    json_decref(j);
    return d;
}

/* The noisy neighbour started, changed and stopped at run time: it takes
 * from every deployment's buckets on its new schedule, charges its new
 * token count, and stops taking. */
static void test_control_neighbour(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--deployment", "shared", "--rpm", "6000", "--burst", "1000", "--tpm", "6000000", NULL);
    /* The clock starts before the request that starts the neighbour: a test
     * descheduled after the answer would otherwise start it late and see
     * the neighbour faster than it is (CI, a loaded machine). */
    double t0 = now_ms();
    assert_int_equal(control(c.port, "?neighbour_rpm=1200&neighbour_tokens=7", &r), 200);
    assert_true(answer_num(&r, "neighbour_rpm") == 1200);
    assert_true(answer_num(&r, "neighbour_tokens") == 7);
    /* 20 a second from the control request: 5 take at least 250 ms */
    wait_for(c.port, "clients/(neighbour)/accepted", 5, 1);
    assert_true(now_ms() - t0 >= 250 - 5);
    json_t *s = get_stats(c.port, "");
    assert_int_equal(list_int(s, "shared", "accept_tokens", 0), 7);
    assert_true(json_real_value(json_object_get(json_object_get(s, "config"), "neighbour_rpm")) == 1200);
    json_decref(s);
    /* faster, and heavier */
    assert_int_equal(control(c.port, "?neighbour_rpm=6000&neighbour_tokens=9", &r), 200);
    t0 = now_ms();
    json_decref(get_stats(c.port, "?reset=1"));
    /* 100 a second: the 10th after the reset comes at least 9 intervals
     * after it */
    wait_for(c.port, "clients/(neighbour)/accepted", 10, 1);
    assert_true(now_ms() - t0 >= 90 - 5);
    s = get_stats(c.port, "");
    assert_int_equal(list_int(s, "shared", "accept_tokens", 0), 9);
    json_decref(s);
    /* stopped: nothing more is taken, however long one looks */
    assert_int_equal(control(c.port, "?neighbour_rpm=0", &r), 200);
    s = get_stats(c.port, "");
    long long n = jint(s, "clients/(neighbour)/requests");
    json_decref(s);
    sleep_ms(200); /* 20 requests' worth at the old rate */
    s = get_stats(c.port, "");
    assert_int_equal(jint(s, "clients/(neighbour)/requests"), n);
    json_decref(s);
    /* a one-off burst: 1200 at once into the full bucket of 1000 (the
     * neighbour stopped, the reset refilled it: a full bucket stays full
     * however long the control takes); what does not fit is the
     * neighbour's 429s, and nothing more follows */
    json_decref(get_stats(c.port, "?reset=all"));
    assert_int_equal(control(c.port, "?neighbour_burst=1200", &r), 200);
    s = get_stats(c.port, "");
    assert_int_equal(jint(s, "clients/(neighbour)/requests"), 1200);
    long long took = jint(s, "clients/(neighbour)/accepted");
    assert_int_equal(took, 1000);
    assert_int_equal(jint(s, "clients/(neighbour)/status_429"), 1200 - took);
    json_decref(s);
    sleep_ms(100);
    s = get_stats(c.port, "");
    assert_int_equal(jint(s, "clients/(neighbour)/requests"), 1200);
    json_decref(s);
    assert_int_equal(control(c.port, "?neighbour_burst=-3", &r), 400);
    /* bad values change nothing */
    assert_int_equal(control(c.port, "?neighbour_rpm=600001", &r), 400);
    assert_int_equal(control(c.port, "?neighbour_rpm=60&neighbour_tokens=1.5", &r), 400);
    assert_int_equal(control(c.port, "?neighbour_tokens=-1", &r), 400);
    assert_int_equal(control(c.port, "", &r), 200);
    assert_true(answer_num(&r, "neighbour_rpm") == 0);
    assert_true(answer_num(&r, "neighbour_tokens") == 9);
    json_decref(child_stop(&c));
}

/* neighbour_greedy=1: the neighbour takes every token it can as it
 * refills, up to its rate: it looks every 100 ms, sends what its rate
 * allowed since it started less what it took, and stops at a refusal.
 * The provider here refills 10 tokens a second (one of its 10-token
 * requests) where its rate asks 100 a second: it gets the full bucket (10
 * requests) and then one a second, and at most one refusal per look. */
static void test_control_neighbour_greedy(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--deployment", "g", "--rpm", "600000", "--burst", "100000", "--tpm", "600", "--token-burst", "100",
                NULL);
    double t0 = now_ms();
    assert_int_equal(control(c.port, "?neighbour_rpm=6000&neighbour_tokens=10&neighbour_greedy=1", &r), 200);
    assert_true(answer_num(&r, "neighbour_greedy") == 1);
    wait_for(c.port, "clients/(neighbour)/accepted", 11, 1);
    json_t *s = get_stats(c.port, "");
    double el = now_ms() - t0;
    long long took = jint(s, "clients/(neighbour)/accepted"), refused = jint(s, "clients/(neighbour)/status_429");
    json_decref(s);
    /* the 11th needed a refill of 10 tokens: at least a second */
    assert_true(el >= 1000 - 5);
    assert_true(took <= 10 + (long long)(el / 1000) + 1);
    assert_true(refused >= 1);
    assert_true(refused <= (long long)(el / 100) + 1);
    /* Capped by its own rate: 600 a minute of 1 token into a bucket that
     * refills 100 a millisecond: never more than the rate allowed since it
     * was set, however late a look comes. */
    assert_int_equal(control(c.port, "?neighbour_rpm=0", &r), 200);
    json_decref(get_stats(c.port, "?reset=all"));
    assert_int_equal(control(c.port, "?tpm=6000000", &r), 200);
    t0 = now_ms();
    assert_int_equal(control(c.port, "?neighbour_rpm=600&neighbour_tokens=1&neighbour_greedy=1", &r), 200);
    wait_for(c.port, "clients/(neighbour)/accepted", 5, 1);
    s = get_stats(c.port, "");
    el = now_ms() - t0;
    took = jint(s, "clients/(neighbour)/accepted");
    assert_true(took <= (long long)(el * 600 / 60000) + 1);
    assert_int_equal(jint(s, "clients/(neighbour)/status_429"), 0);
    json_decref(s);
    assert_int_equal(control(c.port, "?neighbour_greedy=2", &r), 400);
    assert_int_equal(control(c.port, "?neighbour_greedy=0&neighbour_rpm=0", &r), 200);
    assert_true(answer_num(&r, "neighbour_greedy") == 0);
    json_decref(child_stop(&c));
}

/* inject_429=N: the next N calls (either style) are refused as a release
 * slightly ahead of the bucket would be: the true headers, retry-after-ms
 * the time one request takes to refill (Azure / OpenAI), Retry-After its
 * ceiling in seconds, nothing charged, counted as injected_429. */
static void test_control_inject_429(void **state) {
    static response r;
    char v[64];
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "40", "--burst", "10", "--itpm", "6", "--input-burst", "1000", "--service-ms", "1", NULL);
    assert_int_equal(control(c.port, "?inject_429=3", &r), 200);
    assert_true(answer_num(&r, "inject_429") == 3);
    for (int i = 0; i < 2; i++) {
        call(c.port, AZURE_PATH("gpt-4o"), "i", simple_body, &r);
        assert_int_equal(r.status, 429);
        assert_int_equal(header_long(&r, "retry-after-ms"), 1500); /* 60000 / 40 */
        assert_int_equal(header_long(&r, "Retry-After"), 2);
        assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 10); /* true, untouched */
        assert_non_null(strstr(r.body, "call rate limit"));
    }
    const char *ok = "{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    anth_call(c.port, "i", ok, &r);
    assert_int_equal(r.status, 429);
    assert_int_equal(header_long(&r, "retry-after"), 2);
    assert_null(header(&r, "retry-after-ms", v, sizeof(v)));
    assert_non_null(strstr(r.body, "\"rate_limit_error\""));
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 1000);
    /* used up: served again */
    call(c.port, AZURE_PATH("gpt-4o"), "i", simple_body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 9);
    assert_int_equal(control(c.port, "?inject_429=x", &r), 400);
    assert_int_equal(control(c.port, "?inject_429=1.5", &r), 400);
    assert_int_equal(control(c.port, "?inject_429=-1", &r), 400);
    assert_int_equal(control(c.port, "?inject_429=1&fail_503=2", &r), 400);
    call(c.port, AZURE_PATH("gpt-4o"), "i", simple_body, &r);
    assert_int_equal(r.status, 200);
    /* a bad call is not a chat call that reaches admission: not consumed */
    assert_int_equal(control(c.port, "?inject_429=1", &r), 200);
    call(c.port, AZURE_PATH("gpt-4o"), "i", "{\"messages\":[]}", &r);
    assert_int_equal(r.status, 400);
    json_t *s = get_stats(c.port, "");
    assert_int_equal(jint(s, "config/inject_429"), 1);
    json_decref(s);
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "clients/i/injected_429"), 3);
    assert_int_equal(jint(fin, "clients/i/status_429"), 3);
    assert_int_equal(jint(fin, "deployments/gpt-4o/injected_429"), 2);
    assert_int_equal(jint(fin, "deployments/claude/injected_429"), 1);
    assert_int_equal(jint(fin, "deployments/gpt-4o/accepted"), 2);
    assert_int_equal(jint(fin, "deployments/claude/accepted"), 0);
    json_decref(fin);
}

/* headers=0|1 and --no-headers: a provider that sends no rate-limit
 * headers; Retry-After on a 429 stays. */
static void test_control_headers(void **state) {
    static response r;
    char v[64];
    mock_child c;
    const char *ok = "{\"model\":\"claude\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    (void)state;
    child_start(&c, "--tpm", "60000", "--otpm", "600", "--service-ms", "1", NULL);
    call(c.port, AZURE_PATH("gpt-4o"), "h", simple_body, &r);
    assert_non_null(header(&r, "x-ratelimit-remaining-tokens", v, sizeof(v)));
    assert_int_equal(control(c.port, "?headers=0", &r), 200);
    assert_true(answer_num(&r, "headers") == 0);
    call(c.port, AZURE_PATH("gpt-4o"), "h", simple_body, &r);
    assert_int_equal(r.status, 200);
    assert_null(strcasestr(r.head, "ratelimit"));
    anth_call(c.port, "h", ok, &r);
    assert_int_equal(r.status, 200);
    assert_null(strcasestr(r.head, "ratelimit"));
    assert_int_equal(control(c.port, "?inject_429=1", &r), 200);
    call(c.port, AZURE_PATH("gpt-4o"), "h", simple_body, &r);
    assert_int_equal(r.status, 429);
    assert_null(strcasestr(r.head, "ratelimit"));
    assert_int_equal(header_long(&r, "Retry-After"), 1);
    assert_int_equal(control(c.port, "?headers=2", &r), 400);
    assert_int_equal(control(c.port, "?headers=", &r), 400);
    assert_int_equal(control(c.port, "?headers=1", &r), 200);
    anth_call(c.port, "h", ok, &r);
    assert_int_equal(anth_header(&r, "output-tokens", "limit"), 600);
    json_decref(child_stop(&c));

    child_start(&c, "--no-headers", NULL);
    call(c.port, AZURE_PATH("gpt-4o"), "h", simple_body, &r);
    assert_int_equal(r.status, 200);
    assert_null(strcasestr(r.head, "ratelimit"));
    assert_non_null(header(&r, "x-request-id", v, sizeof(v)));
    json_t *s = get_stats(c.port, "");
    assert_false(json_is_true(json_object_get(json_object_get(s, "config"), "headers")));
    json_decref(s);
    assert_int_equal(control(c.port, "?headers=1", &r), 200);
    call(c.port, AZURE_PATH("gpt-4o"), "h", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-requests"), 60);
    json_decref(child_stop(&c));
}

/* rpm=, tpm=, itpm=, otpm= change the real limits while running: every
 * deployment and the defaults, or one deployment=NAME. Buckets keep their
 * level, capped at the new capacity; a limit switched on starts full; the
 * headers and the ledger report the new limits. Bad values change
 * nothing. */
static void test_control_limits(void **state) {
    static response r;
    char v[64];
    mock_child c;
    const char *anth = "{\"model\":\"claude\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"abcd\"}]}";
    (void)state;
    /* rpm 60: 0.001 a ms, so the levels below stay put for the test's ~ms */
    child_start(&c, "--anthropic-otpm", "max", "--rpm", "60", "--itpm", "6", "--input-burst", "1000", "--otpm", "6",
                "--output-burst", "1000", "--completion-tokens", "100", "--service-ms", "1", NULL);
    call(c.port, AZURE_PATH("gpt-4o"), "l", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 9);
    /* every deployment: capacity rpm/6 = 5, the level 9 capped at it */
    assert_int_equal(control(c.port, "?rpm=30", &r), 200);
    assert_true(answer_num(&r, "limits/rpm") == 30);
    assert_true(answer_num(&r, "limits/burst") == 5);
    call(c.port, AZURE_PATH("gpt-4o"), "l", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-requests"), 30);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 4);
    /* a bigger limit keeps the level */
    assert_int_equal(control(c.port, "?rpm=120", &r), 200);
    call(c.port, AZURE_PATH("gpt-4o"), "l", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-requests"), 120);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 3);
    /* a deployment created later gets the new defaults */
    call(c.port, AZURE_PATH("fresh"), "l", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-requests"), 120);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 19);
    /* one deployment: TPM switched on, starting full (100000 / 6) */
    assert_int_equal(control(c.port, "?deployment=gpt-4o&tpm=100000", &r), 200);
    assert_true(answer_num(&r, "deployment/limits/tpm") == 100000);
    assert_true(answer_num(&r, "deployment/limits/token_burst") == 16666);
    assert_true(answer_num(&r, "limits/tpm") == 0);
    call(c.port, AZURE_PATH("gpt-4o"), "l", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-tokens"), 100000);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 16666 - 17);
    call(c.port, AZURE_PATH("fresh"), "l", simple_body, &r);
    assert_null(header(&r, "x-ratelimit-limit-tokens", v, sizeof(v)));

    /* Anthropic: input and output limits of one deployment */
    anth_call(c.port, "l", anth, &r);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 999);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 900);
    assert_int_equal(control(c.port, "?deployment=claude&itpm=0&otpm=12", &r), 200);
    anth_call(c.port, "l", anth, &r);
    assert_null(header(&r, "anthropic-ratelimit-input-tokens-limit", v, sizeof(v)));
    assert_int_equal(anth_header(&r, "output-tokens", "limit"), 12);
    /* --output-burst stays the capacity; the level was kept */
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 800);
    assert_int_equal(control(c.port, "?deployment=claude&itpm=60", &r), 200);
    anth_call(c.port, "l", anth, &r);
    assert_int_equal(anth_header(&r, "input-tokens", "limit"), 60);
    assert_int_equal(anth_header(&r, "input-tokens", "remaining"), 999); /* started full */

    /* bad values and names: 400, nothing changed */
    static const char *const bad[] = {"?rpm=0",
                                      "?rpm=-5",
                                      "?rpm=abc",
                                      "?tpm=1e13",
                                      "?itpm=",
                                      "?otpm",
                                      "?rpm=45&tpm=x",
                                      "?deployment=a/b&rpm=45",
                                      "?deployment=&rpm=45",
                                      "?rpm=45&bogus=1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (control(c.port, bad[i], &r) != 400) fail_msg("%s: %d %s", bad[i], r.status, r.body);
    json_t *s = get_stats(c.port, "");
    assert_true(json_real_value(json_object_get(json_object_get(s, "config"), "rpm")) == 120);
    json_t *lim = json_object_get(json_object_get(json_object_get(s, "deployments"), "gpt-4o"), "limits");
    assert_true(json_real_value(json_object_get(lim, "rpm")) == 120);
    assert_true(json_real_value(json_object_get(lim, "burst")) == 20);
    assert_true(json_real_value(json_object_get(lim, "tpm")) == 100000);
    lim = json_object_get(json_object_get(json_object_get(s, "deployments"), "claude"), "limits");
    assert_true(json_real_value(json_object_get(lim, "itpm")) == 60);
    assert_true(json_real_value(json_object_get(lim, "otpm")) == 12);
    assert_true(json_real_value(json_object_get(lim, "output_burst")) == 1000);
    json_decref(s);
    json_decref(child_stop(&c));

    /* With a fixed set of deployments an unknown name is a bad value. */
    child_start(&c, "--deployment", "only", NULL);
    assert_int_equal(control(c.port, "?deployment=other&rpm=5", &r), 400);
    assert_int_equal(control(c.port, "?deployment=only&rpm=5", &r), 200);
    call(c.port, AZURE_PATH("only"), "l", simple_body, &r);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-requests"), 5);
    json_decref(child_stop(&c));
}

/* ---- the mock's bucket against the replay ----------------------------- */

/* splitmix64: the traces' own random sequence, fixed by the seed. */
static uint64_t trace_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double trace_unit(uint64_t *s) { return (double)(trace_next(s) >> 11) * 0x1.0p-53; }

typedef struct trace_send {
    double t, cost;
    int admitted; /* by mock_bucket */
} trace_send;

typedef struct trace_refund {
    double t, amount;
} trace_refund;

typedef struct trace {
    trace_send *sends;
    size_t n_sends;
    trace_refund *refunds; /* of admitted sends, in time order */
    size_t n_refunds, cap_refunds;
    size_t rejected, near_boundary;
} trace;

/* Replays the admitted sends and refunds before t (and, when with is not
 * NULL, that one send too) through replay.c. */
static size_t trace_replay(const trace *tr, double capacity, double rate, double before, const trace_send *with,
                           int all_sends, double *first) {
    replay rp;
    replay_init(&rp);
    for (size_t i = 0; i < tr->n_sends; i++) {
        const trace_send *s = &tr->sends[i];
        if (s->t >= before) break;
        if (s->admitted || all_sends) assert_int_equal(replay_add(&rp, s->t, s->cost), 0);
    }
    for (size_t i = 0; i < tr->n_refunds && tr->refunds[i].t < before; i++)
        assert_int_equal(replay_add(&rp, tr->refunds[i].t, -tr->refunds[i].amount), 0);
    if (with) assert_int_equal(replay_add(&rp, with->t, with->cost), 0);
    size_t n = replay_rejections(&rp, capacity, rate, first);
    replay_free(&rp);
    return n;
}

/* One random trace decided by mock_bucket: sends at random real times
 * (offered at about 1.3 times the rate, so the bucket is often short),
 * costs up to 60 % of the capacity and now and then above it, and for
 * some admitted sends a refund of part of their cost a little later (the
 * Anthropic output bucket's give-back). */
static void trace_run(trace *tr, uint64_t seed, double capacity, double rate, size_t n) {
    mock_bucket b;
    uint64_t rs = seed;
    trace_refund *pending = calloc(n, sizeof(*pending));
    size_t n_pending = 0;
    double t = 0, mean_cost = capacity * 0.3;
    memset(tr, 0, sizeof(*tr));
    tr->sends = calloc(n, sizeof(*tr->sends));
    tr->refunds = calloc(n, sizeof(*tr->refunds));
    assert_non_null(pending);
    assert_non_null(tr->sends);
    assert_non_null(tr->refunds);
    mock_bucket_init(&b, capacity, rate, 0);
    for (size_t i = 0; i < n; i++) {
        trace_send *s = &tr->sends[i];
        t += -log(1 - trace_unit(&rs)) * mean_cost / (rate * 1.3);
        s->t = t;
        s->cost = trace_unit(&rs) < 0.04 ? capacity * (1 + trace_unit(&rs)) : 0.5 + trace_unit(&rs) * capacity * 0.6;
        /* Refunds that fall due first, in time order (pending is sorted). */
        while (n_pending > 0 && pending[0].t < t) {
            mock_bucket_refill(&b, pending[0].t);
            mock_bucket_give(&b, pending[0].amount);
            tr->refunds[tr->n_refunds++] = pending[0];
            memmove(pending, pending + 1, --n_pending * sizeof(*pending));
        }
        mock_bucket_refill(&b, t);
        double need = s->cost < capacity ? s->cost : capacity;
        /* Short by less than the replay forgives: the two would differ. */
        if (b.level < need && b.level + 2e-6 * (need > 1 ? need : 1) >= need) tr->near_boundary++;
        s->admitted = mock_bucket_wait_ms(&b, s->cost) == 0;
        if (!s->admitted) {
            tr->rejected++;
            continue;
        }
        mock_bucket_take(&b, s->cost);
        if (trace_unit(&rs) < 0.5) {
            trace_refund r = {t + trace_unit(&rs) * 3 * mean_cost / rate, s->cost * trace_unit(&rs)};
            size_t k = n_pending;
            while (k > 0 && pending[k - 1].t > r.t) k--;
            memmove(pending + k + 1, pending + k, (n_pending - k) * sizeof(*pending));
            pending[k] = r;
            n_pending++;
        }
    }
    tr->n_sends = n;
    free(pending);
}

/* ---- embeddings, the Responses API, OpenAI's TPM rule ----------------- */

/* The N of an answer's x-request-id "mock-N", which the ledger's accept_id
 * lists. */
static long long request_id(const response *r) {
    char v[64];
    if (!header(r, "x-request-id", v, sizeof(v)) || strncmp(v, "mock-", 5) != 0)
        fail_msg("no x-request-id mock-N in:\n%s", r->head);
    return strtoll(v + 5, NULL, 10);
}

/* A 400 in OpenAI's shape naming param. */
static void assert_bad(const response *r, const char *param) {
    if (r->status != 400) fail_msg("expected 400 (%s), got %d: %s", param ? param : "-", r->status, r->body);
    json_t *j = body_json(r), *p = json_object_get(json_object_get(j, "error"), "param");
    if (param) assert_string_equal(json_string_value(p), param);
    else assert_true(json_is_null(p));
    json_decref(j);
}

/* Embeddings: every input form, ceil(code points / 4) per string and one
 * token per token integer, reported as prompt_tokens = total_tokens and
 * charged to the token bucket at admission (no output, so both providers'
 * rules give the same); the answer in OpenAI's list shape. Bad bodies are
 * 400 naming the field and charge nothing. */
static void test_embeddings(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "6000", "--burst", "100", "--tpm", "6", "--token-burst", "1000", "--service-ms", "1-5",
                NULL);
    static const struct {
        const char *path, *body;
        long long tokens;
        size_t count;
    } ok[] = {
        /* 2 + 1 + 2 (five 2-byte code points) */
        {"/openai/deployments/emb-a/embeddings?api-version=2024-06-01",
         "{\"input\":[\"abcde\",\"fg\",\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"]}", 5, 3},
        {"/openai/deployments/emb-a/embeddings?api-version=2024-06-01", "{\"input\":\"abcdabcdabcdabcdabcdabcdabcd\"}",
         7, 1},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":[[1,2,3],[4,5]]}", 5, 2},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":[7,8,9],\"encoding_format\":\"float\"}", 3, 1},
        {"/openai/v1/embeddings",
         "{\"model\":\"emb-o\",\"input\":\"abc\",\"encoding_format\":\"base64\",\"dimensions\":2}", 1, 1},
    };
    long long ids[5], spent_a = 0, spent_o = 0;
    for (size_t i = 0; i < 5; i++) {
        call(c.port, ok[i].path, "e", ok[i].body, &r);
        if (r.status != 200) fail_msg("%s %s: %d %s", ok[i].path, ok[i].body, r.status, r.body);
        ids[i] = request_id(&r);
        int azure = i < 2;
        if (azure) spent_a += ok[i].tokens;
        else spent_o += ok[i].tokens;
        /* 0.0001 token/ms: the bucket gains nothing in a test this short */
        assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 1000 - (azure ? spent_a : spent_o));
        json_t *j = body_json(&r), *data = json_object_get(j, "data"), *u = json_object_get(j, "usage");
        assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
        assert_string_equal(json_string_value(json_object_get(j, "model")), azure ? "emb-a" : "emb-o");
        assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), ok[i].tokens);
        assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), ok[i].tokens);
        assert_int_equal(json_array_size(data), ok[i].count);
        for (size_t k = 0; k < ok[i].count; k++) {
            json_t *e = json_array_get(data, k), *v = json_object_get(e, "embedding");
            assert_string_equal(json_string_value(json_object_get(e, "object")), "embedding");
            assert_int_equal(json_integer_value(json_object_get(e, "index")), k);
            if (i == 4) assert_int_equal(strlen(json_string_value(v)), 12); /* 2 float32, base64 */
            else assert_int_equal(json_array_size(v), 8);
        }
        json_decref(j);
    }
    static const struct {
        const char *path, *body, *param;
    } bad[] = {
        {"/v1/embeddings", "{\"model\":\"emb-o\"}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":[]}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":\"\"}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":[\"a\",\"\"]}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":[\"a\",1]}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":[[1],[]]}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":{\"text\":\"a\"}}", "input"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":\"a\",\"encoding_format\":\"hex\"}", "encoding_format"},
        {"/v1/embeddings", "{\"model\":\"emb-o\",\"input\":\"a\",\"dimensions\":0}", "dimensions"},
        {"/v1/embeddings", "{\"input\":\"a\"}", "model"},
        {"/openai/deployments/emb-a/embeddings?api-version=1", "[1]", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        call(c.port, bad[i].path, "e", bad[i].body, &r);
        assert_bad(&r, bad[i].param);
    }
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/emb-a/accepted"), 2);
    assert_int_equal(jint(fin, "deployments/emb-a/status_400"), 1);
    assert_int_equal(jint(fin, "deployments/emb-o/accepted"), 3);
    assert_int_equal(jint(fin, "deployments/emb-o/status_400"), 9);
    assert_int_equal(jint(fin, "deployments/emb-a/tokens_charged"), spent_a);
    assert_int_equal(jint(fin, "deployments/emb-o/tokens_charged"), spent_o);
    assert_int_equal(jint(fin, "deployments/emb-o/tokens_reported"), spent_o);
    for (size_t i = 0; i < 5; i++) {
        const char *d = i < 2 ? "emb-a" : "emb-o";
        size_t k = i < 2 ? i : i - 2;
        assert_int_equal(list_int(fin, d, "accept_id", k), ids[i]);
        assert_int_equal(list_int(fin, d, "accept_tokens", k), ok[i].tokens);
        assert_int_equal(list_int(fin, d, "accept_input", k), 0);
        assert_int_equal(list_int(fin, d, "accept_output", k), 0);
    }
    json_decref(fin);
}

/* A Response body: the answer's status, text and usage. */
static void check_response(json_t *j, const char *model, long long input, long long output, int incomplete) {
    json_t *u = json_object_get(j, "usage"), *out = json_object_get(j, "output");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "response");
    assert_true(strncmp(json_string_value(json_object_get(j, "id")), "resp_", 5) == 0);
    assert_string_equal(json_string_value(json_object_get(j, "model")), model);
    assert_string_equal(json_string_value(json_object_get(j, "status")), incomplete ? "incomplete" : "completed");
    if (incomplete)
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "incomplete_details"), "reason")),
                            "max_output_tokens");
    assert_int_equal(json_array_size(out), 1);
    json_t *msg = json_array_get(out, 0), *part = json_array_get(json_object_get(msg, "content"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(part, "type")), "output_text");
    char *want = answer_text((int)output);
    assert_string_equal(json_string_value(json_object_get(part, "text")), want);
    free(want);
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), input);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")),
                     0);
    assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), output);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens")), 0);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), input + output);
}

/* The Responses API: instructions and every form of input counted
 * (ceil(code points / 4) over all of them), the output drawn as for chat,
 * the charge per provider (Azure: input + max_output_tokens; OpenAI:
 * the larger), status incomplete when the output used all of
 * max_output_tokens; bad bodies are 400 naming the field. */
static void test_responses(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "6000", "--burst", "100", "--tpm", "6", "--token-burst", "1000", "--completion-tokens",
                "7", "--service-ms", "1-5", NULL);
    /* 4 + 8 + 4 (the image part counts nothing) + 4 (a tool's output) = 20
     * code points: 5 tokens */
    const char *items = "\"instructions\":\"abcd\",\"input\":[{\"role\":\"user\",\"content\":\"abcdefgh\"},"
                        "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"abcd\"},"
                        "{\"type\":\"input_image\",\"image_url\":\"https://x/y.png\"}]},"
                        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"abcd\"}]";
    char body[1024];
    snprintf(body, sizeof(body), "{\"model\":\"resp-o\",%s,\"max_output_tokens\":50}", items);
    call(c.port, "/v1/responses", "r", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 1000 - 50); /* max(5, 50) */
    long long id_o = request_id(&r);
    json_t *j = body_json(&r);
    check_response(j, "resp-o", 5, 7, 0);
    assert_string_equal(json_string_value(json_object_get(j, "instructions")), "abcd");
    json_decref(j);

    snprintf(body, sizeof(body), "{%s,\"max_output_tokens\":50}", items);
    call(c.port, "/openai/deployments/resp-a/responses?api-version=2025-04-01-preview", "r", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 1000 - 55); /* 5 + 50 */
    long long id_a = request_id(&r);
    j = body_json(&r);
    check_response(j, "resp-a", 5, 7, 0);
    json_decref(j);

    /* Azure, the model in the body; no max_output_tokens: 16 */
    call(c.port, "/openai/responses?api-version=2025-04-01-preview", "r",
         "{\"model\":\"resp-v\",\"input\":\"abcdefghi\"}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 1000 - (3 + 16));
    j = body_json(&r);
    check_response(j, "resp-v", 3, 7, 0);
    assert_true(json_is_null(json_object_get(j, "max_output_tokens")));
    json_decref(j);

    /* OpenAI style, the prompt the larger: max(100, 20); then an answer
     * cut at max_output_tokens: max(1, 5) */
    char *long_input = content_of("abcd", 100);
    snprintf(body, sizeof(body), "{\"model\":\"resp-v1\",\"input\":\"%s\",\"max_output_tokens\":20}", long_input);
    free(long_input);
    call(c.port, "/openai/v1/responses", "r", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 1000 - 100);
    call(c.port, "/openai/v1/responses", "r", "{\"model\":\"resp-v1\",\"input\":\"x\",\"max_output_tokens\":5}", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 1000 - 100 - 5);
    j = body_json(&r);
    check_response(j, "resp-v1", 1, 5, 1);
    json_decref(j);

    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"model\":\"resp-o\"}", "input"},
        {"{\"model\":\"resp-o\",\"input\":5}", "input"},
        {"{\"model\":\"resp-o\",\"input\":[5]}", "input"},
        {"{\"model\":\"resp-o\",\"input\":[{\"role\":\"user\",\"content\":5}]}", "input"},
        {"{\"model\":\"resp-o\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":1}]}]}",
         "input"},
        {"{\"model\":\"resp-o\",\"input\":\"x\",\"instructions\":5}", "instructions"},
        {"{\"model\":\"resp-o\",\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens"},
        {"{\"model\":\"resp-o\",\"input\":\"x\",\"max_output_tokens\":\"9\"}", "max_output_tokens"},
        {"{\"model\":\"resp-o\",\"input\":\"x\",\"stream\":\"yes\"}", "stream"},
        {"{\"input\":\"x\"}", "model"},
        {"{\"model\":", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        call(c.port, "/v1/responses", "r", bad[i].body, &r);
        assert_bad(&r, bad[i].param);
    }
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/resp-o/accepted"), 1);
    assert_int_equal(jint(fin, "deployments/resp-o/status_400"), 9);
    assert_int_equal(list_int(fin, "resp-o", "accept_id", 0), id_o);
    assert_int_equal(list_int(fin, "resp-o", "accept_tokens", 0), 50);
    assert_int_equal(list_int(fin, "resp-a", "accept_id", 0), id_a);
    assert_int_equal(list_int(fin, "resp-a", "accept_tokens", 0), 55);
    assert_int_equal(list_int(fin, "resp-v", "accept_tokens", 0), 19);
    assert_int_equal(list_int(fin, "resp-v1", "accept_tokens", 0), 100);
    assert_int_equal(list_int(fin, "resp-v1", "accept_tokens", 1), 5);
    assert_int_equal(list_int(fin, "resp-v1", "accept_input", 1), 0);
    assert_int_equal(list_int(fin, "resp-v1", "accept_output", 1), 0);
    assert_int_equal(jint(fin, "deployments/resp-v1/tokens_charged"), 105);
    assert_int_equal(jint(fin, "deployments/resp-v1/tokens_reported"), (100 + 7) + (1 + 5));
    json_decref(fin);
}

/* A streamed Response: the events OpenAI documents, each "event: NAME"
 * with data {"type": NAME, "sequence_number": i, ...}; the deltas make the
 * text; response.completed (or response.incomplete) carries the whole
 * Response with its usage, which is what sluice reads from a stream. */
static void test_responses_stream(void **state) {
    static client cl;
    static stream st;
    char req[4096];
    mock_child c;
    (void)state;
    child_start(&c, "--tpm", "6", "--token-burst", "1000", "--completion-tokens", "20", "--cache-read-tokens", "1",
                "--service-ms", "300", NULL);
    for (int round = 0; round < 2; round++) {
        /* 20 tokens in 16 deltas, completed; then 3 in 3, incomplete */
        int max_out = round ? 3 : 30, out = round ? 3 : 20, deltas = round ? 3 : 16;
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"model\":\"rs\",\"stream\":true,\"input\":\"abcdefgh\",\"max_output_tokens\":%d}", max_out);
        client_open(&cl, c.port);
        double sent = now_ms();
        client_send(&cl, req, post(req, sizeof(req), "/v1/responses", "rs", 1, body));
        stream_read_all(&cl, &st);
        assert_int_equal(st.status, 200);
        static const char *const head[] = {"response.created", "response.in_progress", "response.output_item.added",
                                           "response.content_part.added"};
        static const char *const tail[] = {"response.output_text.done", "response.content_part.done",
                                           "response.output_item.done"};
        assert_int_equal(st.n, 4 + (size_t)deltas + 4);
        char text[4096] = "";
        for (size_t i = 0; i < st.n; i++) {
            json_t *e = event_json(&st.ev[i]);
            const char *want = i < 4                    ? head[i]
                               : i < 4 + (size_t)deltas ? "response.output_text.delta"
                               : i + 1 < st.n           ? tail[i - 4 - (size_t)deltas]
                               : round                  ? "response.incomplete"
                                                        : "response.completed";
            assert_string_equal(st.ev[i].name, want);
            assert_string_equal(json_string_value(json_object_get(e, "type")), want);
            assert_int_equal(json_integer_value(json_object_get(e, "sequence_number")), i);
            json_t *resp = json_object_get(e, "response");
            if (i < 2) {
                assert_string_equal(json_string_value(json_object_get(resp, "status")), "in_progress");
                assert_true(json_is_null(json_object_get(resp, "usage")));
            }
            if (i >= 4 && i < 4 + (size_t)deltas) strcat(text, json_string_value(json_object_get(e, "delta")));
            if (i == 4 + (size_t)deltas) assert_string_equal(json_string_value(json_object_get(e, "text")), text);
            if (i + 1 == st.n) {
                json_t *u = json_object_get(resp, "usage");
                assert_string_equal(json_string_value(json_object_get(resp, "status")),
                                    round ? "incomplete" : "completed");
                assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 2);
                assert_int_equal(
                    json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")),
                    1);
                assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), out);
                assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 2 + out);
            }
            json_decref(e);
        }
        char *want = answer_text(out);
        assert_string_equal(text, want);
        free(want);
        check_paced(&st, sent, 300);
        stream_free(&st);
        client_close(&cl);
    }
    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/rs/accepted"), 2);
    assert_int_equal(jint(fin, "deployments/rs/abandoned"), 0);
    /* OpenAI style: max(2, 30), max(2, 3) */
    assert_int_equal(list_int(fin, "rs", "accept_tokens", 0), 30);
    assert_int_equal(list_int(fin, "rs", "accept_tokens", 1), 3);
    assert_int_equal(jint(fin, "deployments/rs/tokens_reported"), 22 + 5);
    json_decref(fin);
}

/* OpenAI documents its TPM charge as "the maximum of max_tokens and the
 * estimated number of tokens based on the character count of your
 * request"; Azure as the prompt estimate plus max_tokens. The same chat
 * bodies on both styles' paths, then --openai-tpm sum. The ledger lists
 * each charge under the request id of its answer, and an Anthropic
 * give-back under its call's. */
static void test_openai_tpm_rule(void **state) {
    static response r;
    char body[1024], out[8192];
    mock_child c;
    (void)state;
    char *text = content_of("abcd", 100); /* 100 tokens */
    for (int sum = 0; sum < 2; sum++) {
        if (sum)
            child_start(&c, "--anthropic-otpm", "max", "--tpm", "6", "--token-burst", "1000", "--otpm", "6",
                        "--output-burst", "1000", "--completion-tokens", "10", "--service-ms", "1", "--openai-tpm",
                        "sum", NULL);
        else
            child_start(&c, "--anthropic-otpm", "max", "--tpm", "6", "--token-burst", "1000", "--otpm", "6",
                        "--output-burst", "1000", "--completion-tokens", "10", "--service-ms", "1", NULL);
        static const long long mt[] = {50, 300};
        long long ids[4], want[4];
        for (int k = 0; k < 2; k++) {
            snprintf(body, sizeof(body),
                     "{\"model\":\"o\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%lld}",
                     text, mt[k]);
            call(c.port, AZURE_PATH("a"), "t", body, &r);
            assert_int_equal(r.status, 200);
            ids[k * 2] = request_id(&r);
            want[k * 2] = 100 + mt[k];
            call(c.port, k ? "/openai/v1/chat/completions" : "/v1/chat/completions", "t", body, &r);
            assert_int_equal(r.status, 200);
            ids[k * 2 + 1] = request_id(&r);
            want[k * 2 + 1] = sum ? 100 + mt[k] : (mt[k] > 100 ? mt[k] : 100);
        }
        /* What is left of "o": 1000 less both charges; a call of 800 does
         * not fit, and the 429 names its charge. */
        long long left = 1000 - want[1] - want[3];
        assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), left);
        snprintf(body, sizeof(body),
                 "{\"model\":\"o\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":800}", text);
        call(c.port, "/v1/chat/completions", "t", body, &r);
        assert_int_equal(r.status, 429);
        char need[64];
        snprintf(need, sizeof(need), "Requested %d.", sum ? 900 : 800);
        if (!strstr(r.body, need)) fail_msg("no '%s' in %s", need, r.body);
        /* an Anthropic give-back: 40 - 10, listed under the call's id */
        anth_call(c.port, "t",
                  "{\"model\":\"claude\",\"max_tokens\":40,\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}]}",
                  &r);
        assert_int_equal(r.status, 200);
        char rid[64];
        assert_non_null(header(&r, "request-id", rid, sizeof(rid)));
        long long anth_id = strtoll(rid + strlen("req_mock_"), NULL, 10);
        sleep_ms(50);
        json_t *s = get_stats(c.port, "");
        assert_string_equal(json_string_value(json_object_get(json_object_get(s, "config"), "openai_tpm")),
                            sum ? "sum" : "max");
        for (int k = 0; k < 2; k++) {
            assert_int_equal(list_int(s, "a", "accept_id", (size_t)k), ids[k * 2]);
            assert_int_equal(list_int(s, "a", "accept_tokens", (size_t)k), want[k * 2]);
            assert_int_equal(list_int(s, "o", "accept_id", (size_t)k), ids[k * 2 + 1]);
            assert_int_equal(list_int(s, "o", "accept_tokens", (size_t)k), want[k * 2 + 1]);
        }
        assert_int_equal(jint(s, "deployments/o/tokens_charged"), want[1] + want[3]);
        assert_int_equal(list_int(s, "claude", "accept_id", 0), anth_id);
        assert_int_equal(list_int(s, "claude", "accept_output", 0), 40);
        assert_int_equal(list_int(s, "claude", "output_refund", 0), 30);
        assert_int_equal(list_int(s, "claude", "output_refund_id", 0), anth_id);
        json_decref(s);
        json_decref(child_stop(&c));
    }
    free(text);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--openai-tpm", "both", NULL), 2);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--help", NULL), 0);
    assert_non_null(strstr(out, "--openai-tpm max|sum"));
}

/* Entries of a deployment's ledger list, 0 while it has none. */
typedef struct list_wait {
    int port;
    const char *dep, *list;
    size_t want;
} list_wait;

static int list_reached(void *arg) {
    list_wait *w = arg;
    json_t *s = get_stats(w->port, "");
    json_t *l = json_object_get(json_object_get(json_object_get(s, "deployments"), w->dep), w->list);
    size_t n = json_array_size(l);
    json_decref(s);
    return n >= w->want;
}

/* --compat bedrock: input + max_tokens at admission on the TPM bucket,
 * corrected at the end to input + output x burndown (5 for the Claude
 * models AWS lists, 1 for the others), up or down, in the ledger's
 * tokens_adjust; no rate-limit headers; a ThrottlingException 429. */
/* An OpenAI-style chat body for model: one user message of text. */
static void chat_body(char *buf, size_t n, const char *model, const char *text, int max_tokens) {
    int len =
        snprintf(buf, n, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d}",
                 model, text, max_tokens);
    assert_true(len > 0 && (size_t)len < n);
}

static void test_compat_bedrock(void **state) {
    static response r;
    char body[1024], out[8192];
    mock_child c;
    (void)state;
    char *text = content_of("abcd", 100); /* 100 tokens */
    child_start(&c, "--compat", "bedrock", "--tpm", "6", "--token-burst", "1000", "--completion-tokens", "10",
                "--service-ms", "1", NULL);
    static const char *const model[] = {"us.anthropic.claude-sonnet-4-20250514-v1", "amazon.nova-pro-v1"};
    long long ids[2];
    for (int k = 0; k < 2; k++) {
        chat_body(body, sizeof(body), model[k], text, 40);
        call(c.port, "/v1/chat/completions", "t", body, &r);
        assert_int_equal(r.status, 200);
        char none[64];
        assert_null(header(&r, "x-ratelimit-remaining-tokens", none, sizeof(none))); /* Bedrock sends none */
        ids[k] = request_id(&r);
    }
    for (int k = 0; k < 2; k++) {
        list_wait w = {c.port, model[k], "tokens_adjust", 1};
        PROC_POLL_OR_FAIL(list_reached, &w, 5000, "the end-of-call correction on the ledger");
    }
    json_t *s = get_stats(c.port, "");
    assert_string_equal(json_string_value(json_object_get(json_object_get(s, "config"), "compat")), "bedrock");
    for (int k = 0; k < 2; k++) {
        assert_int_equal(list_int(s, model[k], "accept_tokens", 0), 140);
        /* 10 output tokens: 50 quota tokens (5x) or 10, against the 40 held */
        assert_int_equal(list_int(s, model[k], "tokens_adjust", 0), k ? -30 : 10);
        assert_int_equal(list_int(s, model[k], "tokens_adjust_id", 0), ids[k]);
    }
    assert_int_equal(jint(s, "deployments/amazon.nova-pro-v1/tokens_charged"), 110);
    assert_int_equal(jint(s, "totals/tokens_charged"), 150 + 110);
    json_decref(s);
    /* What is left of the Nova deployment: 1000 - 110 = 890; a call of
     * 100 + 800 does not fit, one of 100 + 700 does. */
    chat_body(body, sizeof(body), model[1], text, 800);
    call(c.port, "/v1/chat/completions", "t", body, &r);
    assert_int_equal(r.status, 429);
    char et[64];
    assert_non_null(header(&r, "x-amzn-ErrorType", et, sizeof(et)));
    assert_string_equal(et, "ThrottlingException");
    assert_null(header(&r, "retry-after", et, sizeof(et)));
    assert_non_null(strstr(r.body, "Too many tokens"));
    chat_body(body, sizeof(body), model[1], text, 700);
    call(c.port, "/v1/chat/completions", "t", body, &r);
    assert_int_equal(r.status, 200);
    json_decref(child_stop(&c));
    /* --burndown overrides the model's rate; it and --rpd belong to their
     * compat only. */
    child_start(&c, "--compat", "bedrock", "--burndown", "2", "--tpm", "6", "--token-burst", "1000",
                "--completion-tokens", "10", "--service-ms", "1", NULL);
    chat_body(body, sizeof(body), model[0], text, 40);
    call(c.port, "/v1/chat/completions", "t", body, &r);
    assert_int_equal(r.status, 200);
    list_wait w = {c.port, model[0], "tokens_adjust", 1};
    PROC_POLL_OR_FAIL(list_reached, &w, 5000, "the end-of-call correction on the ledger");
    s = get_stats(c.port, "");
    assert_int_equal(list_int(s, model[0], "tokens_adjust", 0), 20 - 40);
    json_decref(s);
    /* the Azure route keeps Azure's rule and headers */
    call(c.port, AZURE_PATH("az"), "t", body, &r);
    assert_int_equal(r.status, 200);
    assert_true(header_long(&r, "x-ratelimit-remaining-tokens") >= 0);
    json_decref(child_stop(&c));
    free(text);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--rpd", "5", NULL), 2);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--compat", "vertex", NULL), 2);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--help", NULL), 0);
    assert_non_null(strstr(out, "--compat openai|bedrock|gemini"));
}

/* --compat gemini: TPM counts the input only; --rpd requests a day, the
 * day from midnight Pacific time (PST or PDT as the date says): the one
 * past the limit is refused RESOURCE_EXHAUSTED with a retryDelay to that
 * midnight, and the first after it is admitted. The mock's wall clock
 * starts 4 s before a midnight (--wall-start); the test computes each
 * midnight from the calendar, apart from the mock's code. */
static void test_compat_gemini(void **state) {
    static response r;
    char out[8192], start[32];
    (void)state;
    /* 2026-01-15 00:00 PST = 08:00 UTC; 2026-03-09 00:00 PDT = 07:00 UTC
     * (the day after the change, 23 h long); 2026-11-02 00:00 PST = 08:00
     * UTC (the day after the change back, 25 h). */
    static const long long midnight[] = {1768464000000LL, 1773039600000LL, 1793606400000LL};
    const char *b = "{\"model\":\"gemini-2.5-flash\",\"messages\":[{\"role\":\"user\",\"content\":\"abcdefgh\"}],"
                    "\"max_tokens\":50}";
    for (int k = 0; k < 3; k++) {
        mock_child c;
        /* 4 s before the midnight: room for three calls on a loaded machine */
        snprintf(start, sizeof(start), "%lld", midnight[k] - 4000);
        child_start(&c, "--compat", "gemini", "--rpd", "2", "--tpm", "6", "--token-burst", "1000", "--service-ms", "1",
                    "--completion-tokens", "10", "--wall-start", start, NULL);
        for (int i = 0; i < 2; i++) {
            call(c.port, "/v1/chat/completions", "t", b, &r);
            assert_int_equal(r.status, 200);
            char none[64];
            assert_null(header(&r, "x-ratelimit-remaining-requests", none, sizeof(none))); /* Gemini sends none */
        }
        call(c.port, "/v1/chat/completions", "t", b, &r);
        assert_int_equal(r.status, 429);
        assert_non_null(strstr(r.body, "RESOURCE_EXHAUSTED"));
        /* the retry delay: to the midnight at most 4 s after the start,
         * whole seconds rounded up; an hour off when the day is wrong */
        const char *rd = strstr(r.body, "\"retryDelay\":\"");
        long delay = rd ? strtol(rd + strlen("\"retryDelay\":\""), NULL, 10) : -1;
        if (delay < 1 || delay > 4) fail_msg("the retry delay is not to the midnight 4 s away: %s", r.body);
        /* past the midnight: the delay the mock gave, whole seconds
         * rounded up on its own clock, from the moment its 429 was read
         * (a loaded machine only makes that later; waiting longer changes
         * nothing). Timed from this test's start instead, a mock slow to
         * start its clock was still before its midnight. */
        sleep_ms((double)delay * 1000 + 50);
        call(c.port, "/v1/chat/completions", "t", b, &r);
        assert_int_equal(r.status, 200);
        json_t *s = get_stats(c.port, "");
        assert_int_equal(list_int(s, "gemini-2.5-flash", "accept_tokens", 0), 2); /* 8 characters: input only */
        assert_int_equal(jint(s, "deployments/gemini-2.5-flash/status_429"), 1);
        json_decref(s);
        json_decref(child_stop(&c));
    }
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--compat", "gemini", "--burndown", "5", NULL), 2);
}

/* The tokenizer (docs/mock.md): a quarter token a character, a token a
 * CJK character (kana, Han, Hangul) by default, each rate a flag; the
 * sum over the request's text is rounded up once, on every route. */
static void test_tokenizer(void **state) {
    static response r;
    char out[4096];
    mock_child c;
    (void)state;
    static const struct {
        const char *path, *body, *field;
        long long def, cjk08, plain8; /* defaults; --cjk 0.8; --tokens-per-char 0.125 */
    } row[] = {
        /* 7 CJK + 4 plain: 7 + 1; 5.6 + 1 = 6.6; 7 + 0.5 */
        {AZURE_PATH("t"),
         "{\"messages\":[{\"role\":\"user\",\"content\":\"\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab"
         "\xe3\x81\xa1\xe3\x81\xaf\xe4\xb8\x96\xe7\x95\x8c"
         "abcd\"}],\"max_tokens\":5}",
         "usage/prompt_tokens", 8, 7, 8},
        /* Hangul 3 (한국어) + an ideographic comma: 4; 3.2; 4 */
        {"/v1/responses",
         "{\"model\":\"t\",\"input\":\"\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4\xe3\x80\x81\","
         "\"max_output_tokens\":5}",
         "usage/input_tokens", 4, 4, 4},
        /* 中文 + 8 plain: 2 + 2; 1.6 + 2 = 3.6; 2 + 1 */
        {"/v1/embeddings",
         "{\"model\":\"t\",\"input\":\"\xe4\xb8\xad\xe6\x96\x87"
         "abcdefgh\"}",
         "usage/prompt_tokens", 4, 4, 3},
        /* é x 4 is not CJK: 1; 1; 0.5 */
        {AZURE_PATH("t"),
         "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}],"
         "\"max_tokens\":5}",
         "usage/prompt_tokens", 1, 1, 1},
    };
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 0) child_start(&c, "--rpm", "6000", "--service-ms", "1-2", NULL);
        else if (mode == 1)
            child_start(&c, "--rpm", "6000", "--service-ms", "1-2", "--cjk-tokens-per-char", "0.8", NULL);
        else child_start(&c, "--rpm", "6000", "--service-ms", "1-2", "--tokens-per-char", "0.125", NULL);
        for (size_t i = 0; i < sizeof(row) / sizeof(row[0]); i++) {
            call(c.port, row[i].path, "t", row[i].body, &r);
            if (r.status != 200) fail_msg("%s: %d %s", row[i].path, r.status, r.body);
            json_t *j = body_json(&r);
            long long want = mode == 0 ? row[i].def : mode == 1 ? row[i].cjk08 : row[i].plain8;
            if (jint(j, row[i].field) != want)
                fail_msg("mode %d, %s: %s %lld, want %lld", mode, row[i].path, row[i].field, jint(j, row[i].field),
                         want);
            json_decref(j);
        }
        /* Anthropic: 日本語 in the messages, 8 plain in system: 3 + 2; 2.4 + 2; 3 + 1 */
        anth_call(c.port, "t",
                  "{\"model\":\"t\",\"max_tokens\":5,\"system\":\"abcdefgh\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\"}]}",
                  &r);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_int_equal(jint(j, "usage/input_tokens"), mode == 0 ? 5 : mode == 1 ? 5 : 4);
        json_decref(j);
        json_decref(child_stop(&c));
    }
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--tokens-per-char", "0", NULL), 2);
    assert_int_equal(run_cli(out, sizeof(out), "mock", "--cjk-tokens-per-char", "11", NULL), 2);
}

/* Anthropic's current OTPM rule, the default: "OTPM is calculated based on
 * the number of output tokens generated ... max_tokens does not factor
 * into OTPM". Admission needs 1 output token in the bucket and takes it;
 * the answer's output is charged at its end, into debt if need be
 * (output_adjust); max_tokens above the bucket's size is no obstacle. */
static void test_anthropic_generated(void **state) {
    static response r;
    mock_child c;
    (void)state;
    child_start(&c, "--rpm", "6000", "--burst", "100", "--itpm", "6", "--input-burst", "100000", "--otpm", "6",
                "--output-burst", "1000", "--completion-tokens", "300", "--service-ms", "1", NULL);
    const char *b =
        "{\"model\":\"claude\",\"max_tokens\":4000,\"messages\":[{\"role\":\"user\",\"content\":\"abcd\"}]}";
    /* the bucket before each: 1000, 700, 400, 100; after the 4th -200 */
    for (int i = 0; i < 4; i++) {
        anth_call(c.port, "t", b, &r);
        assert_int_equal(r.status, 200);
        list_wait w = {c.port, "claude", "output_adjust", (size_t)i + 1};
        PROC_POLL_OR_FAIL(list_reached, &w, 5000, "the output charged at the end on the ledger");
    }
    anth_call(c.port, "t", b, &r);
    assert_int_equal(r.status, 429);
    assert_int_equal(anth_header(&r, "output-tokens", "remaining"), 0);
    json_t *s = get_stats(c.port, "");
    assert_string_equal(json_string_value(json_object_get(json_object_get(s, "config"), "anthropic_otpm")),
                        "generated");
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(list_int(s, "claude", "accept_output", i), 1);
        assert_int_equal(list_int(s, "claude", "output_adjust", i), 299);
        assert_int_equal(list_int(s, "claude", "output_adjust_id", i), list_int(s, "claude", "accept_id", i));
    }
    assert_int_equal(json_array_size(ledger_list(s, "claude", "output_refund")), 0);
    /* input 1 + output 300, four times */
    assert_int_equal(jint(s, "deployments/claude/tokens_charged"), 4 * 301);
    json_decref(s);
    json_decref(child_stop(&c));
}

/* The mock's bucket (agent/mock/mock_bucket.c) and the replay that judges
 * schedules (tests/support/replay.c) are two implementations of the
 * provider's rule, not one: on the same random traces of sends, oversize
 * sends and refunds they must admit exactly the same sends. For every
 * send the mock refused, replaying what the mock admitted before it plus
 * that send rejects exactly it; replaying what the mock admitted rejects
 * nothing; and the whole trace rejects as many, the first at the same
 * time. */
static void test_bucket_matches_replay(void **state) {
    static const struct {
        double capacity, rate_per_ms;
    } cfg[] = {
        {1, 1 / 1000.0},          /* 60 rpm, burst 1 */
        {10, 60 / 60000.0},       /* the seed article's deployment */
        {37.5, 0.0123},           /* fractional limits */
        {1000, 6000 / 60000.0},   /* an output bucket: otpm 6000, burst 1000 */
        {66666, 400000 / 60000.0} /* an input bucket: itpm 400k */
    };
    (void)state;
    for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            trace tr;
            double cap = cfg[k].capacity, rate = cfg[k].rate_per_ms, first = -1, mock_first = -1;
            trace_run(&tr, seed * 7919 + k, cap, rate, 1500);
            /* The trace must exercise the rule, and never sit so close to a
             * boundary that the replay's rounding allowance decides. */
            assert_true(tr.rejected > 100);
            assert_true(tr.n_refunds > 100);
            assert_int_equal(tr.near_boundary, 0);
            for (size_t i = 0; i < tr.n_sends; i++)
                if (!tr.sends[i].admitted) {
                    mock_first = tr.sends[i].t;
                    break;
                }
            assert_int_equal(trace_replay(&tr, cap, rate, INFINITY, NULL, 0, NULL), 0);
            assert_int_equal(trace_replay(&tr, cap, rate, INFINITY, NULL, 1, &first), tr.rejected);
            assert_true(first == mock_first);
            for (size_t i = 0; i < tr.n_sends; i++) {
                const trace_send *s = &tr.sends[i];
                if (s->admitted) continue;
                first = -1;
                assert_int_equal(trace_replay(&tr, cap, rate, s->t, s, 0, &first), 1);
                assert_true(first == s->t);
            }
            free(tr.sends);
            free(tr.refunds);
        }
    }
}

/* Worked by hand: an output bucket of 1000 tokens refilled at 0.01/ms
 * (otpm 600). Both implementations must refuse sends 2, 3 and 5. */
static void test_bucket_and_replay_reject_alike(void **state) {
    static const struct {
        double t, amount; /* < 0: a refund */
        int admit;
    } ev[] = {
        {0, 800, 1},         /* 1000 -> 200 */
        {100, -300, 1},      /* 200 + 1 + 300 = 501 */
        {150, 600, 0},       /* 501.5 < 600: refused */
        {1000, 1500, 0},     /* 510 and not full: an oversize send is refused */
        {60000, 1500, 1},    /* full again: admitted into debt, -500 */
        {60400, 1, 0},       /* -496 < 1: refused */
        {60400.5, -2000, 1}, /* -495.995 + 2000, capped at 1000 */
        {60401, 1000, 1},    /* exactly full: admitted, 0 */
    };
    mock_bucket b;
    replay rp;
    double first = -1;
    (void)state;
    mock_bucket_init(&b, 1000, 0.01, 0);
    replay_init(&rp);
    for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++) {
        mock_bucket_refill(&b, ev[i].t);
        if (ev[i].amount < 0) {
            mock_bucket_give(&b, -ev[i].amount);
        } else {
            int ok = mock_bucket_wait_ms(&b, ev[i].amount) == 0;
            assert_int_equal(ok, ev[i].admit);
            if (ok) mock_bucket_take(&b, ev[i].amount);
        }
        assert_int_equal(replay_add(&rp, ev[i].t, ev[i].amount), 0);
    }
    assert_true(fabs(b.level) < 1e-9);
    assert_int_equal(replay_rejections(&rp, 1000, 0.01, &first), 3);
    assert_true(first == 150);
    replay_free(&rp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_burst_then_refill),
        cmocka_unit_test(test_tpm_charges_the_estimate),
        cmocka_unit_test(test_quota_exhausted),
        cmocka_unit_test(test_not_found_and_bad_requests),
        cmocka_unit_test(test_credentials),
        cmocka_unit_test(test_malformed_http),
        cmocka_unit_test(test_pipelining),
        cmocka_unit_test(test_abandoned_and_shutdown),
        cmocka_unit_test(test_http10_and_expect),
        cmocka_unit_test(test_injected_503),
        cmocka_unit_test(test_control_at_run_time),
        cmocka_unit_test(test_noisy_neighbour),
        cmocka_unit_test(test_control_neighbour),
        cmocka_unit_test(test_control_neighbour_greedy),
        cmocka_unit_test(test_control_inject_429),
        cmocka_unit_test(test_control_headers),
        cmocka_unit_test(test_control_limits),
        cmocka_unit_test(test_seed_and_sigusr1),
        cmocka_unit_test(test_port_file),
        cmocka_unit_test(test_stream_openai),
        cmocka_unit_test(test_stream_pipelined),
        cmocka_unit_test(test_stream_disconnect),
        cmocka_unit_test(test_anthropic_messages),
        cmocka_unit_test(test_anthropic_cache_reads),
        cmocka_unit_test(test_anthropic_rate_limits),
        cmocka_unit_test(test_anthropic_rounded_counts),
        cmocka_unit_test(test_anthropic_bad_requests),
        cmocka_unit_test(test_anthropic_faults),
        cmocka_unit_test(test_anthropic_stream),
        cmocka_unit_test(test_anthropic_disconnect),
        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_responses_stream),
        cmocka_unit_test(test_openai_tpm_rule),
        cmocka_unit_test(test_compat_bedrock),
        cmocka_unit_test(test_compat_gemini),
        cmocka_unit_test(test_anthropic_generated),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_bucket_matches_replay),
        cmocka_unit_test(test_bucket_and_replay_reject_alike),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
