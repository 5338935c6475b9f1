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

#include "proc.h"
#include "replay.h"

#define IO_TIMEOUT_MS 15000
#define AZURE_PATH(d) "/openai/deployments/" d "/chat/completions?api-version=2024-06-01"

/* ---- the child process ------------------------------------------------ */

typedef struct mock_child {
    pid_t pid;
    int out;       /* the child's stdout */
    int port;
    char *rest;    /* stdout after the "listening" line, read at stop */
    size_t rest_len;
} mock_child;

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
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

/* Formats a POST with a JSON body. client may be NULL (no x-client-id). */
static size_t post(char *out, size_t n, const char *path, const char *client_id, int close,
                   const char *body) {
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
static void call(int port, const char *path, const char *client_id, const char *body,
                 response *r) {
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
    for (const char *const *c = (const char *const[]){"mock", "demo", "run", "status", "top", NULL};
         *c; c++)
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
        assert_non_null(strstr(json_string_value(json_object_get(e, "message")),
                               "call rate limit"));
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
    json_t *times = json_object_get(json_object_get(json_object_get(s, "deployments"), "gpt-4o"),
                                    "accept_ms");
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
    child_start(&c, "--rpm", "6000", "--burst", "100", "--tpm", "600", "--token-burst", "300",
                "--completion-tokens", "100000", "--service-ms", "1-5", NULL);

    char *text = content_of("abcd", 100); /* 400 chars: 100 tokens */
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"system\",\"content\":\"%s\"}],\"max_tokens\":50}", text);
    free(text);
    call(c.port, AZURE_PATH("tok"), "t", body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-limit-tokens"), 600);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-tokens"), 300 - 150);
    json_t *j = body_json(&r), *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 100);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 50);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 150);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "choices"), 0), "finish_reason")),
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
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":50}", text);
    free(text);
    call(c.port, AZURE_PATH("tok"), "t", body, &r);
    assert_int_equal(r.status, 429);
    long ms = header_long(&r, "retry-after-ms");
    /* (200 - ~133) tokens at 0.01 token/ms */
    assert_true(ms > 6000 && ms <= 6800);
    assert_int_equal(header_long(&r, "Retry-After"), (ms + 999) / 1000);
    assert_non_null(strstr(r.body, "token rate limit"));
    assert_true(header_long(&r, "x-ratelimit-remaining-requests") >= 97);

    json_t *fin = child_stop(&c);
    assert_int_equal(jint(fin, "deployments/tok/accepted"), 2);
    assert_int_equal(jint(fin, "deployments/tok/status_429"), 1);
    assert_int_equal(jint(fin, "deployments/tok/tokens_charged"), 150 + 17);
    assert_int_equal(jint(fin, "deployments/tok/tokens_reported"), 150 + 17);
    json_t *toks = json_object_get(json_object_get(json_object_get(fin, "deployments"), "tok"),
                                   "accept_tokens");
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
    assert_true(strncmp(json_string_value(json_object_get(e, "message")),
                        "You exceeded your current quota", 31) == 0);
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
    call(c.port, "/openai/deployments/gpt-4o/embeddings", "n", simple_body, &r);
    assert_int_equal(r.status, 404);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "404");
    json_decref(j);
    call(c.port, AZURE_PATH("other"), "n", simple_body, &r);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "DeploymentNotFound"));
    call(c.port, AZURE_PATH("gpt-4o"), "n", "{\"messages\": [", &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "invalid_request_error"));
    call(c.port, AZURE_PATH("gpt-4o"), "n",
         "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
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
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":%d}", i);
        n += post(req + n, sizeof(req) - n, AZURE_PATH("pipe"), "p", i == 6, body);
    }
    client_send(&a, req, n);
    for (int i = 1; i <= 6; i++) {
        assert_int_equal(client_read(&a, &r), 0);
        assert_int_equal(r.status, 200);
        json_t *j = body_json(&r);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                            "completion_tokens")),
                         i);
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
    int n = snprintf(req, sizeof(req),
                     "POST " AZURE_PATH("old") " HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(simple_body), simple_body);
    client_send(&a, req, (size_t)n);
    assert_true(client_fill(&a) > 0);
    while (!strstr(a.buf, "}}")) assert_true(client_fill(&a) > 0);
    assert_true(strncmp(a.buf, "HTTP/1.1 200", 12) == 0);
    while (client_fill(&a) > 0) {
    }
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
    int n = snprintf(req, sizeof(req),
                     "POST /control%s HTTP/1.1\r\nHost: mock\r\nContent-Length: 0\r\n\r\n", query);
    client_send(&cl, req, (size_t)n);
    assert_int_equal(client_read(&cl, r), 0);
    client_close(&cl);
    return r->status;
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
    assert_string_equal(r.body, "{\"fail_503\":0,\"quota_exhausted\":false}");
    assert_int_equal(control(c.port, "?fail_503=1", &r), 200);
    assert_string_equal(r.body, "{\"fail_503\":1,\"quota_exhausted\":false}");
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
    assert_string_equal(r.body, "{\"fail_503\":0,\"quota_exhausted\":false}");
    call(c.port, AZURE_PATH("gpt-4o"), "w", simple_body, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(header_long(&r, "x-ratelimit-remaining-requests"), 3);
    assert_int_equal(control(c.port, "?fail_503=0.25", &r), 200);
    assert_string_equal(r.body, "{\"fail_503\":0.25,\"quota_exhausted\":false}");
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
    child_start(&c, "--deployment", "shared", "--rpm", "60", "--burst", "5", "--neighbour-rpm",
                "6000", NULL);
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
    json_t *times = json_object_get(json_object_get(json_object_get(s, "deployments"), "shared"),
                                    "accept_ms");
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
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100000}",
                 &r);
            assert_int_equal(r.status, 200);
            json_t *j = body_json(&r);
            seq[k][i] = json_integer_value(
                json_object_get(json_object_get(j, "usage"), "completion_tokens"));
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_burst_then_refill),
        cmocka_unit_test(test_tpm_charges_the_estimate),
        cmocka_unit_test(test_quota_exhausted),
        cmocka_unit_test(test_not_found_and_bad_requests),
        cmocka_unit_test(test_malformed_http),
        cmocka_unit_test(test_pipelining),
        cmocka_unit_test(test_abandoned_and_shutdown),
        cmocka_unit_test(test_http10_and_expect),
        cmocka_unit_test(test_injected_503),
        cmocka_unit_test(test_control_at_run_time),
        cmocka_unit_test(test_noisy_neighbour),
        cmocka_unit_test(test_seed_and_sigusr1),
        cmocka_unit_test(test_port_file),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
