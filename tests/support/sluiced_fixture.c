#define _GNU_SOURCE
#include "sluiced_fixture.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *sluiced_fixture_binary(void) {
    static char path[512];
    const char *dir = getenv("SLUICE_BUILD_DIR");
    if (!dir) {
        fprintf(stderr, "sluiced_fixture: SLUICE_BUILD_DIR is not set (run under ctest)\n");
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/agent/sluiced", dir);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "sluiced_fixture: %s is not built\n", path);
        return NULL;
    }
    return path;
}

static void echo_log(const sluiced_fixture *f) {
    FILE *l = fopen(f->log, "r");
    char line[512];
    if (!l) return;
    while (fgets(line, sizeof(line), l)) fprintf(stderr, "  sluiced: %s", line);
    fclose(l);
}

int sluiced_fixture_start(sluiced_fixture *f, const char *yaml) {
    memset(f, 0, sizeof(*f));
    const char *bin = sluiced_fixture_binary();
    if (!bin) return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/sluiced-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->config, sizeof(f->config), "%s/sluiced.yaml", f->dir);
    snprintf(f->sock, sizeof(f->sock), "%s/agent.sock", f->dir);
    snprintf(f->log, sizeof(f->log), "%s/sluiced.log", f->dir);
    FILE *c = fopen(f->config, "w");
    if (!c) return -1;
    for (const char *p = yaml; *p;) {
        if (strncmp(p, "%SOCK%", 6) == 0) {
            fputs(f->sock, c);
            p += 6;
        } else {
            fputc(*p++, c);
        }
    }
    fclose(c);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        int fd = open(f->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, bin, "--config", f->config, (char *)NULL);
        _exit(127);
    }
    f->pid = pid;
    for (int i = 0; i < 1000; i++) {
        redisContext *rc = redisConnectUnix(f->sock);
        if (rc && !rc->err) {
            redisReply *r = redisCommand(rc, "PING");
            int ok = r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING);
            if (r) freeReplyObject(r);
            redisFree(rc);
            if (ok) return 0;
        } else if (rc) {
            redisFree(rc);
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "sluiced_fixture: sluiced exited during start:\n");
            echo_log(f);
            f->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "sluiced_fixture: no PING answer on %s within 10 s\n", f->sock);
    echo_log(f);
    return -1;
}

int sluiced_fixture_stop(sluiced_fixture *f, int hard) {
    int st = -1;
    if (f->pid > 0) {
        kill(f->pid, hard ? SIGKILL : SIGTERM);
        waitpid(f->pid, &st, 0);
        f->pid = 0;
    }
    if (f->dir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
        if (system(cmd) != 0) fprintf(stderr, "sluiced_fixture: could not remove %s\n", f->dir);
        f->dir[0] = '\0';
    }
    return st;
}
