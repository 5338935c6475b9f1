/* relay: see relay.h. */
#define _GNU_SOURCE
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RELAY_BUF 65536
#define RELAY_TURN_MS 100
#define RELAY_APPLY_MS 5000

typedef enum rlink_state { LINK_CONNECTING, LINK_OPEN, LINK_HELD } rlink_state;

typedef struct rlink {
    int cfd, ufd; /* client side, upstream side (-1 while held) */
    rlink_state state;
    int c_eof, u_eof;        /* that side closed (or failed) */
    size_t up_len, down_len; /* pending bytes: client -> upstream, upstream -> client */
    char up[RELAY_BUF], down[RELAY_BUF];
} rlink;

struct relay {
    pthread_t tid;
    int started;
    int upstream_port, port;
    int lfd; /* listening socket, -1 while cut */
    int wake[2];
    pthread_mutex_t mu; /* held by the thread except while it polls */
    pthread_cond_t cv;
    relay_mode want, mode;
    unsigned long long want_seq, applied_seq;
    int stop;
    rlink **links;
    size_t nlinks, cap;
    relay_counts counts;
    char err[256];
};

static void set_err(relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(relay *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
}

const char *relay_mode_name(relay_mode m) {
    return m == RELAY_PASS ? "pass" : m == RELAY_CUT ? "cut" : m == RELAY_BLACKHOLE ? "blackhole" : "?";
}

/* Listens on 127.0.0.1:r->port (0: any free port, then remembered). */
static int listen_again(relay *r) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port)};
    socklen_t len = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) {
        set_err(r, "socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        set_err(r, "listen on 127.0.0.1:%d: %s", r->port, strerror(errno));
        close(fd);
        return -1;
    }
    r->port = ntohs(a.sin_port);
    r->lfd = fd;
    return 0;
}

static void link_close(relay *r, size_t i) {
    rlink *l = r->links[i];
    close(l->cfd);
    if (l->ufd >= 0) close(l->ufd);
    free(l);
    r->links[i] = r->links[--r->nlinks];
}

/* Starts the upstream connect of l. Returns 0, or -1 when it failed at once. */
static int link_connect(relay *r, rlink *l) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->upstream_port)};
    int one = 1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l->ufd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->ufd < 0) return -1;
    setsockopt(l->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(l->ufd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        l->state = LINK_OPEN;
        return 0;
    }
    if (errno == EINPROGRESS) {
        l->state = LINK_CONNECTING;
        return 0;
    }
    return -1;
}

/* Applies r->want. Returns 0, or -1 when it must be tried again. */
static int apply_mode(relay *r) {
    relay_mode m = r->want;
    if (m == RELAY_CUT) {
        r->counts.closed_by_cut += (long long)r->nlinks;
        while (r->nlinks) link_close(r, r->nlinks - 1);
        if (r->lfd >= 0) close(r->lfd);
        r->lfd = -1;
        r->counts.cuts++;
    } else {
        if (r->lfd < 0 && listen_again(r) != 0) return -1;
        if (m == RELAY_PASS) {
            for (size_t i = r->nlinks; i-- > 0;) {
                rlink *l = r->links[i];
                if (l->state == LINK_HELD && link_connect(r, l) != 0) {
                    r->counts.upstream_failed++;
                    link_close(r, i);
                }
            }
            r->counts.passes++;
        } else {
            r->counts.blackholes++;
        }
    }
    r->mode = m;
    r->err[0] = '\0';
    return 0;
}

static void accept_all(relay *r) {
    for (;;) {
        int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        rlink *l = calloc(1, sizeof(*l));
        if (!l || (r->nlinks == r->cap &&
                   !(r->links = realloc(r->links, (r->cap = r->cap ? 2 * r->cap : 16) * sizeof(*r->links))))) {
            free(l);
            close(fd);
            set_err(r, "out of memory");
            return;
        }
        l->cfd = fd;
        l->ufd = -1;
        r->counts.accepted++;
        r->links[r->nlinks++] = l;
        if (r->mode == RELAY_BLACKHOLE) {
            l->state = LINK_HELD;
            r->counts.held++;
        } else if (link_connect(r, l) != 0) {
            r->counts.upstream_failed++;
            link_close(r, r->nlinks - 1);
        }
    }
}

/* Reads what fd has into buf (up to RELAY_BUF). Sets *eof when the peer
 * closed or failed. */
static void pull(int fd, char *buf, size_t *len, int *eof) {
    while (!*eof && *len < RELAY_BUF) {
        ssize_t n = recv(fd, buf + *len, RELAY_BUF - *len, 0);
        if (n > 0) {
            *len += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        *eof = 1;
    }
}

/* Writes what buf holds to fd. Returns the bytes written, -1 on a failure. */
static long long push(int fd, char *buf, size_t *len) {
    long long sent = 0;
    while (*len) {
        ssize_t n = send(fd, buf, *len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) return -1;
        memmove(buf, buf + n, *len - (size_t)n);
        *len -= (size_t)n;
        sent += n;
    }
    return sent;
}

/* Moves l's bytes both ways. Returns 1 when the link is done. */
static int pump(relay *r, rlink *l) {
    if (l->state == LINK_HELD) return 0;
    pull(l->cfd, l->up, &l->up_len, &l->c_eof);
    if (l->state == LINK_CONNECTING) {
        int e = 0;
        socklen_t el = sizeof(e);
        struct pollfd p = {l->ufd, POLLOUT, 0};
        if (poll(&p, 1, 0) <= 0) return 0;
        if (getsockopt(l->ufd, SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
            r->counts.upstream_failed++;
            return 1;
        }
        l->state = LINK_OPEN;
    }
    pull(l->ufd, l->down, &l->down_len, &l->u_eof);
    long long up = push(l->ufd, l->up, &l->up_len);
    long long down = push(l->cfd, l->down, &l->down_len);
    if (up > 0) r->counts.bytes_up += up;
    if (down > 0) r->counts.bytes_down += down;
    if (up < 0 || down < 0) return 1;
    return (l->c_eof && l->up_len == 0) || (l->u_eof && l->down_len == 0);
}

static void *relay_main(void *arg) {
    relay *r = arg;
    struct pollfd *p = NULL;
    size_t pcap = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        if (r->applied_seq != r->want_seq) {
            unsigned long long seq = r->want_seq;
            if (apply_mode(r) == 0) {
                r->applied_seq = seq;
                pthread_cond_broadcast(&r->cv);
            }
        }
        size_t need = 2 + 2 * r->nlinks;
        if (need > pcap) {
            struct pollfd *np = realloc(p, need * sizeof(*p));
            if (!np) break;
            p = np;
            pcap = need;
        }
        nfds_t n = 0;
        p[n++] = (struct pollfd){r->wake[0], POLLIN, 0};
        if (r->lfd >= 0) p[n++] = (struct pollfd){r->lfd, POLLIN, 0};
        for (size_t i = 0; r->mode == RELAY_PASS && i < r->nlinks; i++) {
            rlink *l = r->links[i];
            short ce = (short)((!l->c_eof && l->up_len < RELAY_BUF ? POLLIN : 0) | (l->down_len ? POLLOUT : 0));
            short ue = l->state == LINK_CONNECTING
                           ? POLLOUT
                           : (short)((!l->u_eof && l->down_len < RELAY_BUF ? POLLIN : 0) | (l->up_len ? POLLOUT : 0));
            p[n++] = (struct pollfd){l->cfd, ce, 0};
            p[n++] = (struct pollfd){l->ufd, ue, 0};
        }
        pthread_mutex_unlock(&r->mu);
        poll(p, n, RELAY_TURN_MS);
        pthread_mutex_lock(&r->mu);
        char drain[64];
        while (read(r->wake[0], drain, sizeof(drain)) > 0) {}
        if (r->stop) break;
        if (r->lfd >= 0) accept_all(r);
        /* The black hole neither reads nor writes: bytes wait in the kernel. */
        for (size_t i = r->nlinks; r->mode == RELAY_PASS && i-- > 0;)
            if (pump(r, r->links[i])) link_close(r, i);
    }
    pthread_mutex_unlock(&r->mu);
    free(p);
    return NULL;
}

relay *relay_start(int upstream_port, int listen_port, char *err, size_t errlen) {
    relay *r = calloc(1, sizeof(*r));
    if (!r) {
        if (err) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->upstream_port = upstream_port;
    r->port = listen_port > 0 ? listen_port : 0;
    r->lfd = r->wake[0] = r->wake[1] = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pipe2(r->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        set_err(r, "pipe: %s", strerror(errno));
        goto fail;
    }
    if (listen_again(r) != 0) goto fail;
    r->mode = r->want = RELAY_PASS;
    if (pthread_create(&r->tid, NULL, relay_main, r) != 0) {
        set_err(r, "pthread_create failed");
        goto fail;
    }
    r->started = 1;
    return r;
fail:
    if (err) snprintf(err, errlen, "%s", r->err);
    relay_stop(r);
    return NULL;
}

int relay_port(const relay *r) { return r->port; }

int relay_set_mode(relay *r, relay_mode m) {
    pthread_mutex_lock(&r->mu);
    r->want = m;
    unsigned long long seq = ++r->want_seq;
    pthread_mutex_unlock(&r->mu);
    if (write(r->wake[1], "x", 1) < 0) {
        /* The pipe is full: the thread is awake anyway. */
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RELAY_APPLY_MS / 1000;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while (r->applied_seq < seq && rc == 0) rc = pthread_cond_timedwait(&r->cv, &r->mu, &until);
    int ok = r->applied_seq >= seq;
    if (!ok && !r->err[0])
        set_err(r, "the relay did not apply mode %s within %d ms", relay_mode_name(m), RELAY_APPLY_MS);
    pthread_mutex_unlock(&r->mu);
    return ok ? 0 : -1;
}

relay_mode relay_get_mode(relay *r) {
    pthread_mutex_lock(&r->mu);
    relay_mode m = r->mode;
    pthread_mutex_unlock(&r->mu);
    return m;
}

void relay_get_counts(relay *r, relay_counts *out) {
    pthread_mutex_lock(&r->mu);
    *out = r->counts;
    out->open = (long long)r->nlinks;
    pthread_mutex_unlock(&r->mu);
}

void relay_error(relay *r, char *buf, size_t n) {
    pthread_mutex_lock(&r->mu);
    snprintf(buf, n, "%s", r->err);
    pthread_mutex_unlock(&r->mu);
}

void relay_stop(relay *r) {
    if (!r) return;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_mutex_unlock(&r->mu);
        if (write(r->wake[1], "x", 1) < 0) {
            /* full: the thread wakes anyway within one turn */
        }
        pthread_join(r->tid, NULL);
    }
    while (r->nlinks) link_close(r, r->nlinks - 1);
    free(r->links);
    if (r->lfd >= 0) close(r->lfd);
    if (r->wake[0] >= 0) close(r->wake[0]);
    if (r->wake[1] >= 0) close(r->wake[1]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}
