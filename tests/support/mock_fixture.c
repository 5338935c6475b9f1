#define _GNU_SOURCE
#include "mock_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc.h"

#define MOCK_FIXTURE_IO_MS 15000
#define MOCK_FIXTURE_MAX_ARGS 64

const char *mock_fixture_binary(void) {
    static char path[600];
    const char *dir = getenv("SLUICE_BUILD_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "SLUICE_BUILD_DIR is not set: run under ctest, or export "
                        "SLUICE_BUILD_DIR=<build dir> (the sluice binary is <build dir>/sluice)\n");
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/sluice", dir);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "%s is missing or not executable (build the sluice target)\n", path);
        return NULL;
    }
    return path;
}

static int read_port(const char *file) {
    FILE *f = fopen(file, "r");
    int port = 0;
    if (!f) return 0;
    if (fscanf(f, "%d", &port) != 1) port = 0;
    fclose(f);
    return port;
}

int mock_fixture_start(mock_fixture *m, const char *const *args, int timeout_ms) {
    const char *bin = mock_fixture_binary();
    char portfile[300];
    char *argv[MOCK_FIXTURE_MAX_ARGS + 8];
    int n = 0;
    memset(m, 0, sizeof(*m));
    if (!bin) return -1;
    if (proc_mkdtemp(m->dir, sizeof(m->dir), "mock-test") != 0) {
        fprintf(stderr, "mock_fixture: cannot make a temp dir: %s\n", strerror(errno));
        return -1;
    }
    snprintf(portfile, sizeof(portfile), "%s/port", m->dir);
    snprintf(m->log, sizeof(m->log), "%s/out.log", m->dir);
    argv[n++] = (char *)bin;
    argv[n++] = "mock";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--port-file";
    argv[n++] = portfile;
    for (; args && *args; args++) {
        if (n >= MOCK_FIXTURE_MAX_ARGS) {
            fprintf(stderr, "mock_fixture: more than %d arguments\n", MOCK_FIXTURE_MAX_ARGS);
            proc_rmtree(m->dir);
            return -1;
        }
        argv[n++] = (char *)*args;
    }
    argv[n] = NULL;
    m->pid = proc_spawn(argv, m->log, 1);
    if (m->pid < 0) {
        fprintf(stderr, "mock_fixture: cannot start %s\n", bin);
        m->pid = 0;
        proc_rmtree(m->dir);
        return -1;
    }
    /* The port file is written atomically before the mock serves. */
    double deadline = proc_now_ms() + timeout_ms;
    while ((m->port = read_port(portfile)) <= 0) {
        int st;
        if (proc_wait(m->pid, 0, &st)) {
            char line[512];
            FILE *f = fopen(m->log, "r");
            fprintf(stderr, "mock_fixture: sluice mock exited (status 0x%x) before listening:\n", st);
            while (f && fgets(line, sizeof(line), f)) fputs(line, stderr);
            if (f) fclose(f);
            m->pid = 0;
            mock_fixture_stop(m);
            return -1;
        }
        if (proc_now_ms() > deadline) {
            fprintf(stderr, "mock_fixture: sluice mock did not listen within %d ms\n", timeout_ms);
            mock_fixture_stop(m);
            return -1;
        }
        proc_sleep_ms(5);
    }
    return 0;
}

/* One request on a fresh connection (Connection: close); the answer's
 * status and body (malloc'd, NUL-terminated) go to *status and *body.
 * Returns 0 or -1. */
static int http_once(int port, const char *method, const char *target, int *status, char **body) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char req[512];
    size_t cap = 1 << 16, len = 0;
    char *buf = NULL;
    int fd = -1, rc = -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: mock\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                     method, target);
    if (n <= 0 || (size_t)n >= sizeof(req)) return -1;
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) goto out;
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w <= 0) goto out;
        off += (size_t)w;
    }
    if (!(buf = malloc(cap))) goto out;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, MOCK_FIXTURE_IO_MS) <= 0) goto out;
        if (len + 1 >= cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) goto out;
            buf = b;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) goto out;
        if (r == 0) break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    char *eoh = strstr(buf, "\r\n\r\n");
    if (!eoh || sscanf(buf, "HTTP/1.1 %d", status) != 1) goto out;
    memmove(buf, eoh + 4, len - (size_t)(eoh + 4 - buf) + 1);
    *body = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

json_t *mock_fixture_stats(const mock_fixture *m, const char *query) {
    char target[256], *body = NULL;
    int status = 0;
    snprintf(target, sizeof(target), "/stats%s", query ? query : "");
    if (http_once(m->port, "GET", target, &status, &body) != 0 || status != 200) {
        fprintf(stderr, "mock_fixture: GET %s on port %d failed (status %d)\n", target, m->port, status);
        free(body);
        return NULL;
    }
    json_error_t e;
    json_t *j = json_loads(body, 0, &e);
    if (!j) fprintf(stderr, "mock_fixture: the ledger is not JSON: %s\n", e.text);
    free(body);
    return j;
}

int mock_fixture_control(const mock_fixture *m, const char *query) {
    char target[256], *body = NULL;
    int status = 0;
    snprintf(target, sizeof(target), "/control%s", query ? query : "");
    if (http_once(m->port, "POST", target, &status, &body) != 0) {
        fprintf(stderr, "mock_fixture: POST %s on port %d: no answer\n", target, m->port);
        return -1;
    }
    if (status != 200) fprintf(stderr, "mock_fixture: POST %s: %d %s\n", target, status, body);
    free(body);
    return status;
}

long long mock_fixture_count(const json_t *ledger, const char *path) {
    char buf[512], *save = NULL;
    const json_t *j = ledger;
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok_r(buf, "/", &save); k && j; k = strtok_r(NULL, "/", &save)) j = json_object_get(j, k);
    return json_is_integer(j) ? (long long)json_integer_value(j) : 0;
}

int mock_fixture_stop(mock_fixture *m) {
    int st = -1;
    if (m->pid > 0) {
        kill(m->pid, SIGTERM);
        if (!proc_wait(m->pid, 15000, &st)) {
            kill(m->pid, SIGKILL);
            proc_wait(m->pid, -1, NULL);
            st = -1;
        }
        m->pid = 0;
    }
    if (m->dir[0]) proc_rmtree(m->dir);
    m->dir[0] = '\0';
    return st;
}
