/* demo_proc: see demo_proc.h. */
#define _GNU_SOURCE
#include "demo_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;
static int sigpipe_fds[2] = {-1, -1};

static void on_signal(int sig) {
    int saved = errno;
    if (!interrupted) interrupted = sig;
    if (sigpipe_fds[1] >= 0) {
        ssize_t k = write(sigpipe_fds[1], "x", 1);
        (void)k;
    }
    errno = saved;
}

int demo_proc_signals_install(void) {
    if (sigpipe_fds[0] < 0 && pipe2(sigpipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGHUP, &sa, NULL) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int demo_proc_interrupted(void) { return interrupted; }

int demo_proc_signal_fd(void) { return sigpipe_fds[0]; }

long long demo_proc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double demo_proc_now_ms(void) { return (double)demo_proc_now_ns() / 1e6; }

void demo_proc_sleep_ms(int ms) {
    if (ms <= 0 || interrupted) return;
    struct pollfd p = {sigpipe_fds[0], POLLIN, 0};
    poll(&p, sigpipe_fds[0] >= 0 ? 1 : 0, ms);
}

pid_t demo_proc_spawn(char *const argv[], int in, int out, int err) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* The child: die with the demo, leave its process group, restore the
     * signal state exec would otherwise inherit (ignored SIGPIPE). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int fds[3] = {in >= 0 ? in : devnull, out >= 0 ? out : devnull, err >= 0 ? err : devnull};
    for (int i = 0; i < 3; i++) {
        if (fds[i] < 0) continue;
        if (fds[i] == i) fcntl(i, F_SETFD, 0); /* keep it across exec */
        else dup2(fds[i], i);
    }
    if (strchr(argv[0], '/')) execv(argv[0], argv);
    else execvp(argv[0], argv);
    fprintf(stderr, "sluice demo: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int demo_proc_exited(pid_t pid, int *status) {
    if (pid <= 0) return 1;
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
        if (status) *status = st;
        return 1;
    }
    return r < 0 && errno == ECHILD;
}

int demo_proc_stop(pid_t pid, int sig, int timeout_ms) {
    if (pid <= 0) return -1;
    int st = 0;
    if (demo_proc_exited(pid, &st)) return st;
    kill(pid, sig);
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        if (demo_proc_exited(pid, &st)) return st;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return st;
}

int demo_proc_self_exe(char *out, size_t n) {
    ssize_t k = readlink("/proc/self/exe", out, n - 1);
    if (k <= 0 || (size_t)k >= n - 1) return -1;
    out[k] = '\0';
    return 0;
}

static int executable(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

int demo_proc_find_exe(const char *explicit_path, const char *const *candidates, const char *name, char *out,
                       size_t n) {
    if (explicit_path) {
        if (!executable(explicit_path)) return -1;
        snprintf(out, n, "%s", explicit_path);
        return 0;
    }
    for (size_t i = 0; candidates && candidates[i]; i++) {
        if (executable(candidates[i])) {
            snprintf(out, n, "%s", candidates[i]);
            return 0;
        }
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len > 0 && len + strlen(name) + 2 <= n) {
            snprintf(out, n, "%.*s/%s", (int)len, path, name);
            if (executable(out)) return 0;
        }
        path += len + (colon ? 1 : 0);
    }
    return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void demo_proc_rmtree(const char *dir) {
    if (dir && *dir) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
