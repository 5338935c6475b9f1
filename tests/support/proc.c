/* proc: see proc.h. */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double proc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void proc_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

int proc_poll(int (*pred)(void *arg), void *arg, int timeout_ms) {
    double deadline = proc_now_ms() + timeout_ms;
    while (!pred(arg)) {
        if (proc_now_ms() >= deadline) return pred(arg) != 0;
        proc_sleep_ms(PROC_POLL_STEP_MS);
    }
    return 1;
}

pid_t proc_spawn(char *const argv[], const char *out, int also_stderr) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid < 0 ? -1 : pid;
    /* The child: die with the parent, even when it died before prctl. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (out) {
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            if (also_stderr) dup2(fd, 2);
        }
    }
    execvp(argv[0], argv);
    _exit(127);
}

int proc_ping(const char *unix_path, int port, int timeout_ms) {
    /* A server that exits between the connect and the PING (a daemon that
     * could not bind its port, slow under valgrind) must fail the ping with
     * EPIPE, not kill the test with SIGPIPE (seen in test_daemon_http's
     * test_config_rules under tests/valgrind.sh). */
    signal(SIGPIPE, SIG_IGN);
    struct timeval tv = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000L};
    redisContext *c =
        port > 0 ? redisConnectWithTimeout("127.0.0.1", port, tv) : redisConnectUnixWithTimeout(unix_path, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return 0;
    }
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

int proc_wait_ping(pid_t pid, const char *unix_path, int port, int timeout_ms, int *status) {
    double deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - proc_now_ms());
        if (left <= 0) return -2;
        if (proc_ping(unix_path, port, left)) return 0;
        if (proc_wait(pid, 0, status)) return -1;
        proc_sleep_ms(10);
    }
}

int proc_wait(pid_t pid, int timeout_ms, int *status) {
    int st = 0;
    if (timeout_ms < 0) {
        pid_t r;
        while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
        if (r != pid) return 0;
        if (status) *status = st;
        return 1;
    }
    double deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            if (status) *status = st;
            return 1;
        }
        if (proc_now_ms() >= deadline) return 0;
        proc_sleep_ms(5);
    }
}

int proc_mkdtemp(char *buf, size_t n, const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    if ((size_t)snprintf(buf, n, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix) >= n) return -1;
    return mkdtemp(buf) ? 0 : -1;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int proc_rmtree(const char *dir) {
    struct stat st;
    if (lstat(dir, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}
