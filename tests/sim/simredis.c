/* simredis: see simredis.h. Each connection an engine makes is a link (rlink): the
 * socket simredis accepted (peer) and its own connection to Redis (up). */
#define _GNU_SOURCE
#include "simredis.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "uvsim.h"

#define MAX_AGENTS 64

typedef struct rlink {
    int id, agent;
    uv_poll_t *h; /* NULL once the engine closed it */
    int peer, up; /* -1 when closed */
    char *in;
    size_t inlen, incap;
    uint64_t last_deliver;
    struct rlink *next;
} rlink;

typedef struct agent {
    uv_loop_t *loop;
    char path[300];
    int listener; /* -1: connects are refused */
    int cut, blackhole;
} agent;

struct simredis {
    char redis_sock[300], dir[256];
    uint64_t rng, redis_free_at;
    uint32_t rtt_min, rtt_max, service, cmd_us;
    int redis_down;
    agent agents[MAX_AGENTS];
    int nagents, next_id;
    rlink *links;
    struct delivery *pending; /* scheduled with uvsim_at, not yet run */
    simredis_stats st;
};

typedef struct delivery {
    simredis *r;
    int link_id;
    char *buf;
    size_t len;
    struct delivery *prev, *next;
} delivery;

static const uvsim_io simredis_io;

static uint64_t next_rand(simredis *r) {
    uint64_t z = (r->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Bytes of the complete RESP message at p (RESP2, as hiredis 0.14 and
 * Redis speak here), 0 when incomplete, -1 when malformed. */
static long resp_msg_len(const char *p, size_t n) {
    if (n == 0) return 0;
    const char *e = memchr(p, '\n', n);
    if (!e) return 0;
    long line = (long)(e - p) + 1;
    long v = strtol(p + 1, NULL, 10);
    switch (p[0]) {
    case '+':
    case '-':
    case ':': return line;
    case '$':
        if (v < 0) return line;
        return (size_t)(line + v + 2) <= n ? line + v + 2 : 0;
    case '*': {
        if (v < 0) return line;
        long off = line;
        for (long i = 0; i < v; i++) {
            long m = resp_msg_len(p + off, n - (size_t)off);
            if (m <= 0) return m;
            off += m;
        }
        return off;
    }
    default: return -1;
    }
}

/* Complete messages at the start of p[0..n): their count, and their bytes
 * in *used. */
static int resp_count(const char *p, size_t n, size_t *used) {
    int k = 0;
    size_t off = 0;
    for (;;) {
        long m = resp_msg_len(p + off, n - off);
        if (m <= 0) break;
        off += (size_t)m;
        k++;
    }
    *used = off;
    return k;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int listen_on(agent *a) {
    if (a->listener >= 0) return 0;
    /* Non-blocking: an accept never waits (io_open expects the engine's
     * connect to be queued already). */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.107s", a->path);
    unlink(a->path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0) {
        close(fd);
        return -1;
    }
    a->listener = fd;
    return 0;
}

/* Stops listening; the path stays, so connects are refused (ECONNREFUSED). */
static void listen_off(agent *a) {
    if (a->listener >= 0) close(a->listener);
    a->listener = -1;
}

static rlink *link_of(simredis *r, const uv_poll_t *h) {
    for (rlink *l = r->links; l; l = l->next)
        if (l->h == h) return l;
    return NULL;
}

/* The connection ends for the engine: it reads an end of file. */
static void link_end(rlink *l) {
    if (l->peer >= 0) close(l->peer);
    if (l->up >= 0) close(l->up);
    l->peer = l->up = -1;
    l->inlen = 0;
    if (l->h) uvsim_poll_wake(l->h);
}

static void link_free(simredis *r, rlink *l) {
    for (rlink **p = &r->links; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    if (l->peer >= 0) close(l->peer);
    if (l->up >= 0) close(l->up);
    free(l->in);
    free(l);
}

static int connect_redis(const simredis *r) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.107s", r->redis_sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void io_open(void *ud, uv_poll_t *h, int fd) {
    simredis *r = ud;
    int ai = -1;
    for (int i = 0; i < r->nagents; i++)
        if (r->agents[i].loop == h->loop) ai = i;
    rlink *l = calloc(1, sizeof(*l));
    if (!l) return;
    l->id = ++r->next_id;
    l->agent = ai;
    l->h = h;
    l->peer = l->up = -1;
    l->next = r->links;
    r->links = l;
    if (ai < 0 || r->agents[ai].listener < 0) {
        link_end(l);
        return;
    }
    /* The engine's connect is already queued on the listener. */
    l->peer = accept4(r->agents[ai].listener, NULL, NULL, SOCK_CLOEXEC);
    l->up = r->redis_down ? -1 : connect_redis(r);
    if (l->peer < 0 || l->up < 0) {
        link_end(l);
        return;
    }
    r->st.connects++;
}

static void io_close(void *ud, uv_poll_t *h) {
    simredis *r = ud;
    rlink *l = link_of(r, h);
    if (l) link_free(r, l);
}

static void pending_unlink(delivery *d) {
    if (d->prev) d->prev->next = d->next;
    else d->r->pending = d->next;
    if (d->next) d->next->prev = d->prev;
}

static void deliver(void *arg) {
    delivery *d = arg;
    pending_unlink(d);
    rlink *l = NULL;
    for (rlink *x = d->r->links; x; x = x->next)
        if (x->id == d->link_id) l = x;
    if (l && l->peer >= 0) {
        if (write_all(l->peer, d->buf, d->len) != 0) link_end(l);
        else uvsim_poll_wake(l->h);
    }
    free(d->buf);
    free(d);
}

/* Sends n complete commands (bytes cmd[0..len)) to Redis with the clock
 * set to arrive_us; returns the replies (malloc'd, *rlen bytes), or NULL
 * when Redis is gone. */
static char *forward(simredis *r, rlink *l, const char *cmd, size_t len, int n, uint64_t arrive_us, size_t *rlen) {
    char now[32], cost[16], pre[160];
    int nl = snprintf(now, sizeof(now), "%llu", (unsigned long long)arrive_us);
    int cl = snprintf(cost, sizeof(cost), "%u", r->cmd_us);
    int pl = snprintf(
        pre, sizeof(pre),
        "*5\r\n$4\r\nMSET\r\n$17\r\nsluice:sim:now_us\r\n$%d\r\n%s\r\n$17\r\nsluice:sim:cmd_us\r\n$%d\r\n%s\r\n", nl,
        now, cl, cost);
    if (write_all(l->up, pre, (size_t)pl) != 0 || write_all(l->up, cmd, len) != 0) return NULL;
    size_t cap = 4096, got = 0, used = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (resp_count(buf, got, &used) >= n + 1) break;
        if (got == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t k = recv(l->up, buf + got, cap - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            free(buf);
            return NULL;
        }
        got += (size_t)k;
    }
    if (!buf) return NULL;
    size_t one = (size_t)resp_msg_len(buf, got); /* the MSET's +OK */
    memmove(buf, buf + one, got - one);
    *rlen = got - one;
    return buf;
}

static void io_wrote(void *ud, uv_poll_t *h) {
    simredis *r = ud;
    rlink *l = link_of(r, h);
    if (!l || l->peer < 0) return;
    for (;;) {
        if (l->incap - l->inlen < 65536) {
            size_t cap = l->incap ? l->incap * 2 : 131072;
            char *nb = realloc(l->in, cap);
            if (!nb) return;
            l->in = nb;
            l->incap = cap;
        }
        ssize_t k = recv(l->peer, l->in + l->inlen, l->incap - l->inlen, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        l->inlen += (size_t)k;
    }
    agent *a = &r->agents[l->agent];
    if (a->blackhole) {
        r->st.dropped += l->inlen ? 1 : 0;
        l->inlen = 0;
        return;
    }
    size_t used;
    int n = resp_count(l->in, l->inlen, &used);
    /* A write larger than the socket's buffer (the connect's SCRIPT LOADs)
     * arrives in pieces: they were written at one virtual time, so they
     * are one batch, whatever the kernel's buffer size (the pieces, each
     * its own batch and its own draw of the round trip, made the run
     * depend on the scripts' length). */
    if (n == 0 || used < l->inlen) return;
    uint64_t now = uvsim_now_us();
    uint32_t span = r->rtt_max > r->rtt_min ? r->rtt_max - r->rtt_min : 0;
    uint64_t rtt = r->rtt_min + (span ? next_rand(r) % (span + 1) : 0);
    uint64_t arrive = now + rtt / 2;
    if (arrive < r->redis_free_at) arrive = r->redis_free_at;
    r->redis_free_at = arrive + r->service;
    uint64_t at = arrive + r->service + (rtt - rtt / 2);
    if (at < l->last_deliver) at = l->last_deliver;
    l->last_deliver = at;
    size_t rlen = 0;
    char *rep = forward(r, l, l->in, used, n, arrive, &rlen);
    memmove(l->in, l->in + used, l->inlen - used);
    l->inlen -= used;
    r->st.batches++;
    r->st.commands += (unsigned long long)n;
    if (!rep) {
        link_end(l); /* Redis went away under the call */
        return;
    }
    delivery *d = malloc(sizeof(*d));
    if (!d) {
        free(rep);
        return;
    }
    *d = (delivery){r, l->id, rep, rlen, NULL, r->pending};
    if (r->pending) r->pending->prev = d;
    r->pending = d;
    uvsim_at(at, deliver, d);
}

static const uvsim_io simredis_io = {io_open, io_wrote, io_close};

int simredis_new(const simredis_opts *o, simredis **out) {
    simredis *r = calloc(1, sizeof(*r));
    if (!r) return -1;
    snprintf(r->redis_sock, sizeof(r->redis_sock), "%s", o->redis_sock);
    snprintf(r->dir, sizeof(r->dir), "%s", o->dir);
    r->rng = o->seed ^ 0x5151u;
    r->rtt_min = o->rtt_min_us || o->rtt_max_us ? o->rtt_min_us : 200;
    r->rtt_max = o->rtt_min_us || o->rtt_max_us ? o->rtt_max_us : 1000;
    r->service = o->service_us ? o->service_us : 20;
    r->cmd_us = o->cmd_us ? o->cmd_us : 2;
    uvsim_set_io(&simredis_io, r);
    *out = r;
    return 0;
}

int simredis_agent(simredis *r, uv_loop_t *loop, char *path, size_t n) {
    if (r->nagents == MAX_AGENTS) return -1;
    agent *a = &r->agents[r->nagents];
    memset(a, 0, sizeof(*a));
    a->loop = loop;
    a->listener = -1;
    snprintf(a->path, sizeof(a->path), "%s/agent%d.sock", r->dir, r->nagents);
    if (!r->redis_down && listen_on(a) != 0) return -1;
    snprintf(path, n, "%s", a->path);
    return r->nagents++;
}

void simredis_set_rtt(simredis *r, uint32_t rtt_min_us, uint32_t rtt_max_us) {
    r->rtt_min = rtt_min_us;
    r->rtt_max = rtt_max_us;
}

void simredis_set_service(simredis *r, uint32_t service_us, uint32_t cmd_us) {
    r->service = service_us;
    r->cmd_us = cmd_us;
}

void simredis_redis_down(simredis *r) {
    r->redis_down = 1;
    for (int i = 0; i < r->nagents; i++) listen_off(&r->agents[i]);
    for (rlink *l = r->links; l; l = l->next) link_end(l);
}

void simredis_redis_up(simredis *r) {
    r->redis_down = 0;
    r->redis_free_at = 0;
    for (int i = 0; i < r->nagents; i++)
        if (!r->agents[i].cut) listen_on(&r->agents[i]);
}

void simredis_cut(simredis *r, int ai, int on) {
    if (ai < 0 || ai >= r->nagents) return;
    agent *a = &r->agents[ai];
    a->cut = on;
    if (on) {
        listen_off(a);
        for (rlink *l = r->links; l; l = l->next)
            if (l->agent == ai) link_end(l);
    } else if (!r->redis_down) {
        listen_on(a);
    }
}

void simredis_blackhole(simredis *r, int ai, int on) {
    if (ai >= 0 && ai < r->nagents) r->agents[ai].blackhole = on;
}

void simredis_get_stats(const simredis *r, simredis_stats *out) { *out = r->st; }

void simredis_free(simredis *r) {
    if (!r) return;
    uvsim_set_io(NULL, NULL);
    uvsim_drop_scheduled();
    while (r->pending) {
        delivery *d = r->pending;
        pending_unlink(d);
        free(d->buf);
        free(d);
    }
    while (r->links) link_free(r, r->links);
    for (int i = 0; i < r->nagents; i++) {
        listen_off(&r->agents[i]);
        unlink(r->agents[i].path);
    }
    free(r);
}
