/* bench_proxy: what the HTTP proxy adds to a call, and what one proxy serves.
 *
 * Starts a private redis-server, `sluice mock` with no service time and a
 * quota nothing reaches, and a real sluiced with its HTTP proxy on a
 * loopback port in front of the mock (a plentiful deployment, style
 * openai, callers' credentials passed through), then measures in one run:
 *  1. added latency: one keep-alive client sends the same chat request
 *     alternately to the mock directly and through the proxy (so noise hits
 *     both alike), non-streamed and streamed (stream_options.include_usage,
 *     the usage read and settled by the proxy); p50 and p99 of each in
 *     microseconds and the difference;
 *  2. throughput: N keep-alive clients (threads) looping requests through
 *     the proxy for S seconds, non-streamed and streamed: requests per
 *     second, and requests per second of sluiced's own CPU time (from
 *     /proc/PID/stat: utime + stime), which is what one core of proxy
 *     serves whatever else the machine runs (the mock and the clients share
 *     the same two cores here). The same load straight at the mock gives
 *     the ceiling of the clients and the mock.
 * Every answer must be 200 (counted otherwise and printed: a bench of
 * errors would measure the wrong thing). Prints figures only.
 *
 * Usage: bench_proxy [seconds per throughput run (3)] [latency rounds (2000)]
 * Needs SLUICE_BUILD_DIR (the build directory) to find sluiced and sluice. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "http_client.h"
#include "mock_fixture.h"
#include "redis_fixture.h"
#include "sluiced_fixture.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* utime + stime of pid, in seconds. */
static double cpu_seconds(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long long ut = 0, st = 0;
    /* After the comm: state, then fields 4..13; utime and stime are 14 and 15. */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p) {
    if (!n) return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static const char body_plain[] = "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello in "
                                 "one word.\"}],\"max_tokens\":16}";
static const char body_stream[] =
    "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hello in one word.\"}],\"max_tokens\":16,"
    "\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
static const char auth[] = "Authorization: Bearer sk-bench\r\n";

/* One request on c; 0 when it was answered 200. */
static int one(hc_conn *c, const char *body) {
    hc_response r;
    if (hc_post(c, "/v1/chat/completions", auth, body, &r, 30000) != 0) return -1;
    int ok = r.status == 200;
    static atomic_int shown;
    if (!ok && atomic_fetch_add(&shown, 1) < 3)
        fprintf(stderr, "bench_proxy: HTTP %d: %.200s\n", r.status, r.body ? r.body : "");
    hc_response_free(&r);
    return ok ? 0 : -1;
}

typedef struct load {
    int port;
    const char *body;
    atomic_int stop;
    atomic_long done, failed;
} load;

static void *load_thread(void *arg) {
    load *l = arg;
    hc_conn c;
    if (hc_connect_tcp(&c, l->port) != 0) {
        atomic_fetch_add(&l->failed, 1);
        return NULL;
    }
    while (!atomic_load(&l->stop)) {
        if (one(&c, l->body) == 0) atomic_fetch_add(&l->done, 1);
        else {
            atomic_fetch_add(&l->failed, 1);
            hc_close(&c);
            if (hc_connect_tcp(&c, l->port) != 0) return NULL;
        }
    }
    hc_close(&c);
    return NULL;
}

/* nthreads clients on port for seconds: requests/s, and per CPU-second of pid
 * (when pid > 0). */
static void throughput(const char *what, int port, const char *body, int nthreads, double seconds, pid_t pid) {
    load l = {.port = port, .body = body};
    pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
    double c0 = pid > 0 ? cpu_seconds(pid) : 0, t0 = now_us();
    for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, load_thread, &l);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&l.stop, 1);
    for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    double el = (now_us() - t0) / 1e6, cpu = pid > 0 ? cpu_seconds(pid) - c0 : 0;
    long done = atomic_load(&l.done), failed = atomic_load(&l.failed);
    printf("  %-28s %3d clients: %8.0f req/s", what, nthreads, (double)done / el);
    if (pid > 0 && cpu > 0)
        printf(", sluiced CPU %.2f s = %3.0f %% of a core, %7.0f req per CPU-second", cpu, 100 * cpu / el,
               (double)done / cpu);
    printf("%s\n", failed ? " (FAILED requests below)" : "");
    if (failed) printf("    %ld requests failed\n", failed);
    free(t);
}

static void latency(const char *what, int mock_port, int proxy_port, const char *body, int rounds) {
    hc_conn direct, proxied;
    if (hc_connect_tcp(&direct, mock_port) != 0 || hc_connect_tcp(&proxied, proxy_port) != 0) {
        printf("  %s: cannot connect\n", what);
        return;
    }
    double *d = calloc((size_t)rounds, sizeof(double)), *p = calloc((size_t)rounds, sizeof(double));
    int nd = 0, np = 0, failed = 0;
    for (int i = 0; i < 50; i++) failed += (one(&direct, body) != 0) + (one(&proxied, body) != 0); /* warm up */
    for (int i = 0; i < rounds; i++) {
        /* Alternate which goes first, so a slow moment hits both alike. */
        for (int k = 0; k < 2; k++) {
            int via = (i + k) % 2;
            double t0 = now_us();
            int rc = one(via ? &proxied : &direct, body);
            double dt = now_us() - t0;
            if (rc != 0) failed++;
            else if (via) p[np++] = dt;
            else d[nd++] = dt;
        }
    }
    double d50 = pct(d, (size_t)nd, 0.5), d99 = pct(d, (size_t)nd, 0.99);
    double p50 = pct(p, (size_t)np, 0.5), p99 = pct(p, (size_t)np, 0.99);
    printf(
        "  %-12s direct p50 %6.0f us p99 %6.0f us | proxied p50 %6.0f us p99 %6.0f us | added p50 %5.0f us p99 %5.0f "
        "us (%d+%d requests%s)\n",
        what, d50, d99, p50, p99, p50 - d50, p99 - d99, nd, np, failed ? ", FAILURES" : "");
    if (failed) printf("    %d requests failed\n", failed);
    free(d);
    free(p);
    hc_close(&direct);
    hc_close(&proxied);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    int rounds = argc > 2 ? atoi(argv[2]) : 2000;
    if (seconds <= 0 || rounds <= 0) {
        fprintf(stderr, "usage: bench_proxy [seconds per throughput run (3)] [latency rounds (2000)]\n");
        return 2;
    }
    redis_fixture rf;
    mock_fixture mf;
    sluiced_fixture sf;
    if (redis_fixture_start(&rf, 0) != 0) return 1;
    const char *margs[] = {"--rpm", "1000000000",   "--burst", "1000000000", "--service-ms", "0", "--completion-tokens",
                           "8",     "--deployment", "gpt-4o",  NULL};
    if (mock_fixture_start(&mf, margs, 10000) != 0) {
        redis_fixture_stop(&rf);
        return 1;
    }
    int port = free_port();
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "redis:\n  url: unix://%s\nagent:\n  socket: %%SOCK%%\n  http:\n    listen: [127.0.0.1:%d]\n"
             "deployments:\n  gpt-4o:\n    rpm: 1000000000\n    burst.requests: 1000000000\n    style: openai\n"
             "    endpoint: http://127.0.0.1:%d\n    max_wait_ms: 1000\n",
             rf.sock, port, mf.port);
    if (sluiced_fixture_start(&sf, yaml) != 0) {
        mock_fixture_stop(&mf);
        redis_fixture_stop(&rf);
        return 1;
    }
    printf("bench_proxy: sluice mock (no service time) on :%d, sluiced's proxy on :%d, %.0f s per throughput run\n",
           mf.port, port, seconds);
    printf("added latency (one keep-alive client, alternating direct and proxied, %d rounds):\n", rounds);
    latency("not streamed", mf.port, port, body_plain, rounds);
    latency("streamed", mf.port, port, body_stream, rounds);
    printf("throughput:\n");
    static const int clients[] = {1, 16, 64};
    for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]); i++) {
        throughput("mock directly", mf.port, body_plain, clients[i], seconds, 0);
        throughput("through the proxy", port, body_plain, clients[i], seconds, sf.pid);
        throughput("through the proxy, streamed", port, body_stream, clients[i], seconds, sf.pid);
    }
    sluiced_fixture_stop(&sf, 0);
    mock_fixture_stop(&mf);
    redis_fixture_stop(&rf);
    return 0;
}
