/* unixsock: the daemon's UNIX socket files (the RESP socket, the HTTP
 * proxy's socket listeners), made and removed the same way.
 *
 * Before binding, a file at the path is replaced only when it is a
 * socket nothing answers on (a daemon that crashed left it): a live
 * listener (another sluiced) or a file that is not a socket is an error.
 * After binding and before listening, the socket gets its owner, group
 * and mode (agent.socket_owner, socket_group, socket_mode), so nobody can
 * connect while it still has the defaults: who may open the socket may
 * acquire. At exit the file is removed only when it is still the one this
 * process made (same device and inode), never one another process put
 * there since.
 *
 * Depends on POSIX only. Never prints. Errors return -1 with a message in
 * err that names the path. */
#ifndef SLUICE_UNIXSOCK_H
#define SLUICE_UNIXSOCK_H

#include <stddef.h>
#include <sys/types.h>

typedef struct unixsock {
    char path[108];
    dev_t dev;
    ino_t ino;
    int created; /* bound by us: unixsock_remove() may unlink it */
} unixsock;

/* Makes path free to bind: nothing there, or a stale socket file (then
 * removed, and *removed set to 1). Returns 0 or -1. */
int unixsock_clear(const char *path, int *removed, char *err, size_t errlen);

/* After the bind of path: remembers the file as ours and sets its owner
 * and group (a name or a number each; "" leaves it) and mode. Returns 0,
 * or -1 (an unknown user or group, chown or chmod failed). */
int unixsock_secure(unixsock *u, const char *path, int mode, const char *owner, const char *group, char *err,
                    size_t errlen);

/* Removes the file when it is still the one bound. Idempotent. */
void unixsock_remove(unixsock *u);

#endif
