/* unixsock: UNIX socket files of the daemon. See unixsock.h. */
#define _POSIX_C_SOURCE 200809L

#include "unixsock.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Is something accepting connections on path? 1 yes, 0 no (stale or
 * absent), -1 unknown (errno set). */
static int socket_is_live(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    int e = errno;
    close(fd);
    if (rc == 0) return 1;
    if (e == ECONNREFUSED || e == ENOENT) return 0;
    errno = e;
    return -1;
}

int unixsock_clear(const char *path, int *removed, char *err, size_t errlen) {
    struct stat st;
    *removed = 0;
    if (lstat(path, &st) != 0) return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
        return -1;
    }
    int live = socket_is_live(path);
    if (live == 1) {
        snprintf(err, errlen, "another process (a running sluiced?) is listening on %s", path);
        return -1;
    }
    if (live < 0) {
        snprintf(err, errlen, "cannot probe the existing socket %s: %s", path, strerror(errno));
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove the stale socket %s: %s", path, strerror(errno));
        return -1;
    }
    *removed = 1;
    return 0;
}

/* A user or group: a number, or a name to look up; "" leaves it. */
static int resolve_ids(const char *o, const char *g, uid_t *uid, gid_t *gid, char *err, size_t errlen) {
    char buf[4096], *end;
    if (o[0]) {
        unsigned long n = strtoul(o, &end, 10);
        struct passwd pw, *res = NULL;
        if (*end == '\0') {
            *uid = (uid_t)n;
        } else if (getpwnam_r(o, &pw, buf, sizeof(buf), &res) == 0 && res) {
            *uid = res->pw_uid;
        } else {
            snprintf(err, errlen, "agent.socket_owner: no such user '%s'", o);
            return -1;
        }
    }
    if (g[0]) {
        unsigned long n = strtoul(g, &end, 10);
        struct group gr, *res = NULL;
        if (*end == '\0') {
            *gid = (gid_t)n;
        } else if (getgrnam_r(g, &gr, buf, sizeof(buf), &res) == 0 && res) {
            *gid = res->gr_gid;
        } else {
            snprintf(err, errlen, "agent.socket_group: no such group '%s'", g);
            return -1;
        }
    }
    return 0;
}

int unixsock_secure(unixsock *u, const char *path, int mode, const char *owner, const char *group, char *err,
                    size_t errlen) {
    struct stat st;
    snprintf(u->path, sizeof(u->path), "%s", path);
    u->created = 1;
    if (stat(path, &st) == 0) {
        u->dev = st.st_dev;
        u->ino = st.st_ino;
    }
    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    if (resolve_ids(owner, group, &uid, &gid, err, errlen) != 0) return -1;
    if ((uid != (uid_t)-1 || gid != (gid_t)-1) && chown(path, uid, gid) != 0) {
        snprintf(err, errlen, "cannot chown %s to %s:%s: %s", path, owner, group, strerror(errno));
        return -1;
    }
    if (chmod(path, (mode_t)mode) != 0) {
        snprintf(err, errlen, "cannot chmod %s to %04o: %s", path, (unsigned)mode, strerror(errno));
        return -1;
    }
    return 0;
}

void unixsock_remove(unixsock *u) {
    if (!u->created) return;
    u->created = 0;
    struct stat st;
    /* Only our own socket: another process may have replaced it. */
    if (stat(u->path, &st) == 0 && st.st_dev == u->dev && st.st_ino == u->ino) unlink(u->path);
}
