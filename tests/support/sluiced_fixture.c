/* sluiced_fixture: see sluiced_fixture.h. */
#define _GNU_SOURCE
#include "sluiced_fixture.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"

#define SF_MAX_RUNNING 64

/* The running daemons, by pid, so that a kill reaches them without their
 * fixture. A recorded pid is not reaped yet, so it cannot be reused. */
static struct {
    pid_t pid;
    char dir[300]; /* the owned directory, "" when the caller owns it */
} running[SF_MAX_RUNNING];
static pid_t registry_owner; /* the process that started them */

static void kill_all_at_exit(void) {
    if (getpid() == registry_owner) sluiced_fixture_kill_all();
}

static int record(const sluiced_fixture *f) {
    if (!registry_owner) {
        registry_owner = getpid();
        atexit(kill_all_at_exit);
    }
    for (int i = 0; i < SF_MAX_RUNNING; i++) {
        if (running[i].pid == 0) {
            running[i].pid = f->pid;
            snprintf(running[i].dir, sizeof(running[i].dir), "%s", f->own_dir ? f->dir : "");
            return 0;
        }
    }
    return -1;
}

static int find(pid_t pid) {
    for (int i = 0; pid > 0 && i < SF_MAX_RUNNING; i++)
        if (running[i].pid == pid) return i;
    return -1;
}

/* Is f's daemon still ours to signal and reap? Not after kill_all. */
static int is_running(const sluiced_fixture *f) { return f->pid > 0 && find(f->pid) >= 0; }

/* f's daemon was reaped: forget it. */
static void reaped(sluiced_fixture *f) {
    int i = find(f->pid);
    if (i >= 0) running[i].pid = 0;
    f->pid = 0;
}

static void remove_dir(const char *dir) {
    if (proc_rmtree(dir) != 0) fprintf(stderr, "sluiced_fixture: could not remove %s\n", dir);
}

void sluiced_fixture_kill_all(void) {
    for (int i = 0; i < SF_MAX_RUNNING; i++) {
        if (running[i].pid <= 0) continue;
        kill(running[i].pid, SIGKILL);
        proc_wait(running[i].pid, -1, NULL);
        running[i].pid = 0;
        if (running[i].dir[0]) remove_dir(running[i].dir);
    }
}

const char *sluiced_fixture_binary(void) {
    static char path[600];
    const char *dir = getenv("SLUICE_BUILD_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "SLUICE_BUILD_DIR is not set: run under ctest, or export "
                        "SLUICE_BUILD_DIR=<build dir> (the sluiced binary is <build dir>/agent/sluiced)\n");
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/agent/sluiced", dir);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "%s is missing or not executable (build the sluiced target)\n", path);
        return NULL;
    }
    return path;
}

int sluiced_fixture_init(sluiced_fixture *f, const char *base, const char *name) {
    memset(f, 0, sizeof(*f));
    if (!base) {
        if (proc_mkdtemp(f->dir, sizeof(f->dir), "sluiced-test") != 0) {
            fprintf(stderr, "sluiced_fixture: cannot make a temp dir: %s\n", strerror(errno));
            return -1;
        }
        f->own_dir = 1;
    } else {
        snprintf(f->dir, sizeof(f->dir), "%.200s/%.40s", base, name);
        if (mkdir(f->dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "sluiced_fixture: cannot make %s: %s\n", f->dir, strerror(errno));
            return -1;
        }
    }
    snprintf(f->sock, sizeof(f->sock), "%s/agent.sock", f->dir);
    snprintf(f->config, sizeof(f->config), "%s/sluiced.yaml", f->dir);
    snprintf(f->log, sizeof(f->log), "%s/sluiced.log", f->dir);
    snprintf(f->vglog, sizeof(f->vglog), "%s/valgrind.log", f->dir);
    return 0;
}

int sluiced_fixture_write_config(const sluiced_fixture *f, const char *yaml) {
    FILE *c = fopen(f->config, "w");
    if (!c) {
        fprintf(stderr, "sluiced_fixture: cannot write %s: %s\n", f->config, strerror(errno));
        return -1;
    }
    for (const char *p = yaml; *p;) {
        if (strncmp(p, "%SOCK%", 6) == 0) {
            fputs(f->sock, c);
            p += 6;
        } else {
            fputc(*p++, c);
        }
    }
    return fclose(c) == 0 ? 0 : -1;
}

static void echo_log(const sluiced_fixture *f) {
    FILE *l = fopen(f->log, "r");
    char line[512];
    if (!l) return;
    while (fgets(line, sizeof(line), l)) fprintf(stderr, "  sluiced: %s", line);
    fclose(l);
}

int sluiced_fixture_launch(sluiced_fixture *f, const char *const *args, int timeout_ms) {
    const char *bin = sluiced_fixture_binary();
    if (!bin) return -1;
    if (is_running(f)) {
        fprintf(stderr, "sluiced_fixture: %s already runs (pid %d)\n", f->dir, (int)f->pid);
        return -1;
    }
    char logopt[450];
    snprintf(logopt, sizeof(logopt), "--log-file=%s", f->vglog);
    const char *argv[48];
    size_t n = 0;
    if (f->valgrind) {
        const char *vg[] = {"valgrind",
                            "--leak-check=full",
                            "--show-leak-kinds=definite,indirect",
                            "--errors-for-leak-kinds=definite,indirect",
                            "--error-exitcode=99",
                            "--track-fds=no",
                            logopt};
        for (size_t i = 0; i < sizeof(vg) / sizeof(vg[0]); i++) argv[n++] = vg[i];
    }
    argv[n++] = bin;
    argv[n++] = "--config";
    argv[n++] = f->config;
    for (size_t i = 0; args && args[i]; i++) {
        if (n + 1 >= sizeof(argv) / sizeof(argv[0])) {
            fprintf(stderr, "sluiced_fixture: too many arguments\n");
            return -1;
        }
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    pid_t pid = proc_spawn((char *const *)argv, f->log, 1);
    if (pid < 0) {
        fprintf(stderr, "sluiced_fixture: fork: %s\n", strerror(errno));
        return -1;
    }
    f->pid = pid;
    if (record(f) != 0) {
        fprintf(stderr, "sluiced_fixture: more than %d daemons at once\n", SF_MAX_RUNNING);
        kill(pid, SIGKILL);
        proc_wait(pid, -1, NULL);
        f->pid = 0;
        return -1;
    }
    int st = 0;
    int rc = proc_wait_ping(pid, f->sock, 0, timeout_ms, &st);
    if (rc == 0) return 0;
    if (rc == -1) {
        reaped(f);
        fprintf(stderr, "sluiced_fixture: sluiced exited during start (wait status %d); its log:\n", st);
    } else {
        sluiced_fixture_wait(f, 0);
        fprintf(stderr, "sluiced_fixture: sluiced did not answer PING on %s within %d ms; its log:\n", f->sock,
                timeout_ms);
    }
    echo_log(f);
    return -1;
}

int sluiced_fixture_start(sluiced_fixture *f, const char *yaml) {
    if (sluiced_fixture_init(f, NULL, NULL) != 0) return -1;
    if (sluiced_fixture_write_config(f, yaml) != 0 || sluiced_fixture_launch(f, NULL, 10000) != 0) {
        sluiced_fixture_stop(f, 1);
        return -1;
    }
    return 0;
}

redisContext *sluiced_fixture_connect(const sluiced_fixture *f, int timeout_ms) {
    struct timeval tv = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000L};
    redisContext *c = redisConnectUnixWithTimeout(f->sock, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

int sluiced_fixture_ping(const sluiced_fixture *f, int timeout_ms) { return proc_ping(f->sock, 0, timeout_ms); }

int sluiced_fixture_signal(const sluiced_fixture *f, int sig) {
    return is_running(f) && kill(f->pid, sig) == 0 ? 0 : -1;
}

int sluiced_fixture_wait(sluiced_fixture *f, int timeout_ms) {
    if (!is_running(f)) {
        f->pid = 0;
        return -1;
    }
    int st = 0;
    if (proc_wait(f->pid, timeout_ms, &st)) {
        reaped(f);
        return st;
    }
    kill(f->pid, SIGKILL);
    proc_wait(f->pid, -1, NULL);
    reaped(f);
    return -1;
}

int sluiced_fixture_stop(sluiced_fixture *f, int hard) {
    int st = -1;
    if (sluiced_fixture_signal(f, hard ? SIGKILL : SIGTERM) == 0)
        st = sluiced_fixture_wait(f, f->valgrind ? 60000 : 15000);
    else f->pid = 0;
    if (f->own_dir && f->dir[0]) {
        remove_dir(f->dir);
        f->dir[0] = '\0';
    }
    return st;
}
