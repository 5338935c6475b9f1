/* server: the UNIX socket listener and client lifecycle. See server.h.
 *
 * A client's life: accepted (or refused over agent.max_clients) -> reading
 * and dispatching commands, paused while too much is unfinished or unread
 * -> closing (no more input; unfinished slots cancelled or orphaned; the
 * replies that are ready flushed, for at most SERVER_CLOSE_GRACE_MS) ->
 * handle closed -> freed in the close callback. One periodic timer (the
 * cron) closes clients whose half-written command is too old, forces the
 * close of clients that do not take their last replies, and computes the
 * per-second rates: nothing on the hot path but counters. */
#define _POSIX_C_SOURCE 200809L

#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "commands.h"
#include "config.h"
#include "memory.h"
#include "sluice.h"
#include "timeutil.h"
#include "unixsock.h"

#define SERVER_CRON_MAX_MS 100     /* cron period, or a quarter of the idle timeout */
#define SERVER_CLOSE_GRACE_MS 1000 /* a closing client gets this long to read its replies */
#define SERVER_BACKLOG 511

struct server_reply {
    client *c; /* NULL once the client is gone */
    server_reply *next;
    resp_buf buf;
    int done, close_after;
    void (*cancel)(void *arg); /* abandon hook (server_reply_on_abandon) */
    void *cancel_arg;
};

struct client {
    uv_pipe_t pipe; /* first: the handle's memory is the client's */
    server *s;
    unsigned long long id;
    resp_parser *parser;
    server_reply *head, *tail; /* replies in request order */
    size_t unfinished;         /* slots not done yet */
    size_t held_bytes;         /* bytes of done replies not yet written (behind an unfinished one) */
    int resume_pending;        /* in s->resume: process_input on the next loop turn */
    client *resume_next;
    size_t writes_out;      /* uv_write requests in flight */
    int reading;            /* uv_read_start is in effect */
    int paused;             /* back-pressure: not reading */
    int quitting;           /* QUIT seen: dispatch nothing more */
    int closing;            /* no more input; close once flushed */
    int handle_closed;      /* uv_close called */
    int in_input;           /* inside process_input (no re-entry) */
    int peer_gone;          /* the peer closed while paused: read it to the end */
    int has_partial;        /* a half-written command is buffered */
    uint64_t partial_since; /* uv_now when it started */
    uint64_t closing_since;
    uint64_t connected_at;                          /* uv_now at accept (CLIENT LIST age) */
    uint64_t last_command_at;                       /* uv_now of the last command (idle) */
    int proto;                                      /* RESP_PROTO_2, or _3 after HELLO 3 */
    const char *last_command;                       /* its name in the command table, NULL before the first */
    char attrs[CLIENT_NATTRS][CLIENT_ATTR_MAX + 1]; /* name, lib-name, lib-ver */
    client *prev, *next;                            /* in s->clients */
};

typedef struct write_req {
    uv_write_t req;
    client *c;
    char *data;
} write_req;

struct server {
    uv_loop_t *loop;
    engine *e;
    char *config_path;
    server_log_fn log;
    void *log_ud;
    uv_pipe_t listener;
    int listener_open, listening;
    uv_timer_t cron;
    uint64_t cron_period;
    /* Paused clients whose replies finished, read again on the next loop
     * turn (server_reply_done runs inside the engine's callbacks: reading
     * there could cancel a call the engine is still handling). */
    uv_idle_t resume_idle;
    client *resume;
    unixsock sock;       /* agent.socket's file */
    struct proxy *proxy; /* the HTTP proxy beside it, for INFO (borrowed) */
    client *clients;
    size_t nclients;      /* open clients (handle not yet closed) */
    size_t clients_alloc; /* clients whose memory is not yet freed */
    unsigned long long next_id;
    /* limits from the configuration */
    size_t max_clients, max_buffer, max_pipeline;
    uint64_t idle_ms;
    resp_limits lim;
    server_stats st;
    char last_reload_error[512];
    /* rates */
    uint64_t rate_at;
    unsigned long long rate_grants, rate_commands, rate_sheds;
    memory_trimmer trimmer; /* gives the allocator's free pages back (memory.h) */
    /* closing */
    int closing, handles_open;
    char *close_why;
    void (*done)(void *);
    void *done_arg;
};

static void process_input(client *c);
static void flush_client(client *c);
static void close_handle(client *c);
static void update_reading(client *c);
static void process_input(client *c);

/* ---- reading again, on the next loop turn ---- */

static void on_resume(uv_idle_t *h) {
    server *s = h->data;
    uv_idle_stop(h);
    client *c;
    while ((c = s->resume) != NULL) {
        s->resume = c->resume_next;
        c->resume_next = NULL;
        c->resume_pending = 0;
        process_input(c);
    }
}

static void resume_later(client *c) {
    server *s = c->s;
    if (c->resume_pending || s->closing) return;
    c->resume_pending = 1;
    c->resume_next = s->resume;
    s->resume = c;
    uv_idle_start(&s->resume_idle, on_resume);
}

static void resume_forget(client *c) {
    if (!c->resume_pending) return;
    client **pp = &c->s->resume;
    while (*pp && *pp != c) pp = &(*pp)->resume_next;
    if (*pp) *pp = c->resume_next;
    c->resume_next = NULL;
    c->resume_pending = 0;
}

/* Runs the done callback of server_close() once the server's handles and
 * every client's memory are gone. */
static void maybe_done(server *s) {
    if (!s->closing || s->handles_open > 0 || s->clients_alloc > 0 || !s->done) return;
    void (*done)(void *) = s->done;
    s->done = NULL;
    done(s->done_arg);
}

void server_log(server *s, int level, const char *fmt, ...) {
    if (!s->log) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s->log(s->log_ud, level, msg);
}

/* ---- configuration -------------------------------------------------------- */

static void take_limits(server *s) {
    const config *cfg = engine_config(s->e);
    s->max_clients = (size_t)cfg->agent.max_clients;
    s->max_buffer = (size_t)cfg->agent.max_client_buffer;
    s->max_pipeline = (size_t)cfg->agent.max_client_pipeline;
    s->idle_ms = (uint64_t)cfg->agent.client_idle_timeout_ms;
    resp_limits_init(&s->lim);
    s->lim.max_buffer = s->max_buffer;
    if (s->lim.max_bulk > s->max_buffer) s->lim.max_bulk = s->max_buffer;
    if (s->lim.max_inline > s->max_buffer) s->lim.max_inline = s->max_buffer;
    uint64_t period = s->idle_ms / 4;
    if (period > SERVER_CRON_MAX_MS) period = SERVER_CRON_MAX_MS;
    if (period < 10) period = 10;
    s->cron_period = period;
}

static void on_cron(uv_timer_t *t);

void server_apply_config(server *s) {
    take_limits(s);
    if (uv_is_active((uv_handle_t *)&s->cron)) uv_timer_start(&s->cron, on_cron, s->cron_period, s->cron_period);
}

void server_note_reload(server *s, const char *error) {
    s->st.last_reload_ms = wall_clock_ms();
    if (error && *error) {
        s->st.reloads_failed++;
        snprintf(s->last_reload_error, sizeof(s->last_reload_error), "%s", error);
    } else {
        s->st.reloads_ok++;
        s->last_reload_error[0] = '\0';
    }
}

/* ---- creation -------------------------------------------------------------- */

int server_new(uv_loop_t *loop, engine *e, const server_options *opt, server **out) {
    *out = NULL;
    server *s = calloc(1, sizeof(*s));
    if (!s) return SL_ENOMEM;
    s->loop = loop;
    s->e = e;
    const char *path = opt && opt->config_path ? opt->config_path : "";
    s->config_path = malloc(strlen(path) + 1);
    if (!s->config_path) {
        free(s);
        return SL_ENOMEM;
    }
    memcpy(s->config_path, path, strlen(path) + 1);
    if (opt) {
        s->log = opt->log;
        s->log_ud = opt->log_ud;
    }
    take_limits(s);
    uv_timer_init(loop, &s->cron);
    s->cron.data = s;
    uv_idle_init(loop, &s->resume_idle);
    s->resume_idle.data = s;
    s->handles_open = 2;
    s->st.started_ms = wall_clock_ms();
    s->rate_at = uv_now(loop);
    *out = s;
    return 0;
}

engine *server_engine(server *s) { return s->e; }
uv_loop_t *server_loop(server *s) { return s->loop; }
server_stats *server_counters(server *s) { return &s->st; }
server *client_server(const client *c) { return c->s; }
unsigned long long client_id(const client *c) { return c->id; }

/* ---- connection attributes -------------------------------------------------------- */

int client_proto(const client *c) { return c->proto; }

void client_set_proto(client *c, server_reply *r, int proto) {
    c->proto = proto;
    if (r) r->buf.proto = proto;
}

const char *client_attr_get(const client *c, client_attr a) { return c->attrs[a]; }

int client_attr_set(client *c, client_attr a, const char *value, size_t len) {
    if (len > CLIENT_ATTR_MAX) return SL_EINVAL;
    memcpy(c->attrs[a], value, len);
    c->attrs[a][len] = '\0';
    return 0;
}

int client_describe(const client *c, resp_buf *out) {
    server *s = c->s;
    uint64_t now = uv_now(s->loop);
    uv_os_fd_t fd = -1;
    if (uv_fileno((const uv_handle_t *)&c->pipe, &fd) != 0) fd = -1;
    size_t queued = 0;
    for (const server_reply *r = c->head; r; r = r->next) queued++;
    char cmd[32] = "NULL"; /* Redis' cmd= before the first command */
    if (c->last_command) {
        size_t i = 0;
        for (; c->last_command[i] && i + 1 < sizeof(cmd); i++)
            cmd[i] = (char)tolower((unsigned char)c->last_command[i]);
        cmd[i] = '\0';
    }
    /* Redis 7.2's fields in its order, so that libraries which parse the
     * line (redis-py's client_info() wants every integer field) work.
     * A UNIX socket client is the socket's path and port 0, as in Redis.
     * What sluiced has no use for (pub/sub, MULTI, users) is Redis' value
     * for "none". The names were validated (no spaces): the line splits. */
    char line[sizeof(s->sock.path) * 2 + 3 * CLIENT_ATTR_MAX + 512];
    int n = snprintf(line, sizeof(line),
                     "id=%llu addr=%s:0 laddr=%s:0 fd=%d name=%s age=%llu idle=%llu flags=N db=0 sub=0 psub=0 "
                     "ssub=0 multi=-1 qbuf=%zu qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=%zu "
                     "omem=%zu tot-mem=0 events=%s cmd=%s user=default redir=-1 resp=%d lib-name=%s lib-ver=%s",
                     c->id, s->sock.path, s->sock.path, (int)fd, c->attrs[CLIENT_ATTR_NAME],
                     (unsigned long long)(now - c->connected_at) / 1000,
                     (unsigned long long)(now - c->last_command_at) / 1000, resp_parser_pending(c->parser), queued,
                     uv_stream_get_write_queue_size((const uv_stream_t *)&c->pipe), c->reading ? "r" : "", cmd,
                     c->proto, c->attrs[CLIENT_ATTR_LIB_NAME], c->attrs[CLIENT_ATTR_LIB_VER]);
    if (n < 0) return RESP_ENOMEM;
    return resp_buf_append(out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void client_note_command(client *c, const char *name) { c->last_command = name; }

int server_describe_clients(server *s, resp_buf *out) {
    /* s->clients is newest first: walk to the oldest, then back. */
    client *c = s->clients;
    while (c && c->next) c = c->next;
    for (; c; c = c->prev) {
        if (c->closing) continue; /* on its way out */
        if (client_describe(c, out) != 0 || resp_buf_append(out, "\n", 1) != 0) return RESP_ENOMEM;
    }
    return 0;
}

void server_get_stats(const server *s, server_stats *out) {
    *out = s->st;
    out->connected = s->nclients;
    out->last_reload_error = s->last_reload_error;
    out->config_path = s->config_path;
    out->memory_trims = s->trimmer.trims;
    out->memory_trimmed_bytes = s->trimmer.trimmed_bytes;
}

/* ---- reply slots ----------------------------------------------------------------- */

server_reply *server_reply_new(client *c) {
    server_reply *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->c = c;
    r->buf.proto = c->proto; /* the reply is written in the protocol of now */
    if (c->tail) c->tail->next = r;
    else c->head = r;
    c->tail = r;
    c->unfinished++;
    c->s->st.pending_replies++;
    return r;
}

resp_buf *server_reply_buf(server_reply *r) { return &r->buf; }

client *server_reply_client(const server_reply *r) { return r->c; }

void server_reply_on_abandon(server_reply *r, void (*cancel)(void *arg), void *arg) {
    r->cancel = cancel;
    r->cancel_arg = arg;
}

static void reply_free(server_reply *r) {
    resp_buf_free(&r->buf);
    free(r);
}

void server_reply_done(server_reply *r, int close_after) {
    client *c = r->c;
    if (!c) {
        /* Orphaned: its client went away while the command ran. */
        reply_free(r);
        return;
    }
    r->done = 1;
    r->cancel = NULL;
    r->close_after = close_after;
    c->unfinished--;
    c->held_bytes += r->buf.len;
    c->s->st.pending_replies--;
    if (close_after) c->quitting = 1;
    if (c->in_input) return; /* process_input flushes once at its end */
    flush_client(c);
    if (c->paused && !c->closing) resume_later(c); /* a slot freed up */
}

/* ---- writing ------------------------------------------------------------------------ */

static void on_write(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    client *c = w->c;
    free(w->data);
    free(w);
    c->writes_out--;
    if (c->closing) {
        if (c->writes_out == 0) close_handle(c);
        return;
    }
    if (status < 0) {
        server_log(c->s, CONFIG_LOG_DEBUG, "client %llu: write failed: %s", c->id, uv_strerror(status));
        close_handle(c);
        return;
    }
    if (c->paused) process_input(c);
}

/* Sends the finished replies at the head of the queue, in order. */
static void flush_client(client *c) {
    if (c->handle_closed) return;
    resp_buf out;
    resp_buf_init(&out);
    int quit = 0;
    while (c->head && c->head->done) {
        server_reply *r = c->head;
        c->head = r->next;
        if (!c->head) c->tail = NULL;
        c->held_bytes -= r->buf.len;
        if (r->buf.len && resp_buf_append(&out, r->buf.data, r->buf.len) != 0) {
            reply_free(r);
            resp_buf_free(&out);
            close_handle(c); /* out of memory: the reply stream is broken */
            return;
        }
        quit = quit || r->close_after;
        reply_free(r);
        if (quit) break;
    }
    if (out.len) {
        write_req *w = malloc(sizeof(*w));
        size_t len = 0;
        char *data = resp_buf_detach(&out, &len);
        if (!w) {
            free(data);
            close_handle(c);
            return;
        }
        w->c = c;
        w->data = data;
        uv_buf_t b = uv_buf_init(data, (unsigned)len);
        int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write);
        if (rc < 0) {
            free(data);
            free(w);
            close_handle(c);
            return;
        }
        c->writes_out++;
    }
    if (quit && !c->closing) {
        c->closing = 1;
        c->closing_since = uv_now(c->s->loop);
        update_reading(c);
        if (c->writes_out == 0) close_handle(c);
    }
}

/* ---- closing ---------------------------------------------------------------------------- */

static void on_client_closed(uv_handle_t *h) {
    client *c = (client *)h;
    server *s = c->s;
    while (c->head) {
        server_reply *r = c->head;
        c->head = r->next;
        /* Unfinished slots were cancelled or orphaned by client_close(). */
        reply_free(r);
    }
    resp_parser_free(c->parser);
    free(c);
    s->clients_alloc--;
    maybe_done(s);
}

/* Closes the connection now (pending writes are cancelled). The client
 * must have gone through client_close() unless it never dispatched. */
static void close_handle(client *c) {
    if (c->handle_closed) return;
    server *s = c->s;
    c->handle_closed = 1;
    c->closing = 1;
    resume_forget(c);
    if (c->prev) c->prev->next = c->next;
    else s->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    s->nclients--;
    if (c->paused) s->st.paused_clients--;
    c->paused = 0;
    /* Anything still unfinished goes away with the client. */
    server_reply **pp = &c->head;
    while (*pp) {
        server_reply *r = *pp;
        if (r->done) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        s->st.pending_replies--;
        c->unfinished--;
        if (r->cancel) {
            r->cancel(r->cancel_arg);
            reply_free(r);
        } else {
            r->c = NULL; /* orphan: freed when its command completes */
            r->next = NULL;
        }
    }
    uv_close((uv_handle_t *)&c->pipe, on_client_closed);
}

/* Stops input and closes the client once its replies are out. Unfinished
 * slots are cancelled (or orphaned); with fail_pending each is answered
 * with that error in its place, otherwise it is dropped. final_error, if
 * any, is the last reply. */
static void client_close(client *c, const char *fail_pending, const char *final_error) {
    if (c->closing) return;
    server *s = c->s;
    c->closing = 1;
    c->closing_since = uv_now(s->loop);
    update_reading(c);
    server_reply **pp = &c->head;
    while (*pp) {
        server_reply *r = *pp;
        if (r->done) {
            pp = &r->next;
            continue;
        }
        s->st.pending_replies--;
        c->unfinished--;
        server_reply *keep = r;
        if (r->cancel) {
            r->cancel(r->cancel_arg);
            r->cancel = NULL;
            resp_buf_reset(&r->buf);
        } else {
            /* Orphan it and put a fresh slot in its place. */
            keep = calloc(1, sizeof(*keep));
            r->c = NULL;
            if (!keep) {
                *pp = r->next;
                r->next = NULL;
                continue;
            }
            keep->c = c;
            keep->next = r->next;
            *pp = keep;
            r->next = NULL;
        }
        keep->done = 1;
        if (fail_pending) resp_add_error(&keep->buf, fail_pending);
        pp = &keep->next;
    }
    c->tail = NULL;
    for (server_reply *r = c->head; r; r = r->next) c->tail = r;
    if (final_error) {
        server_reply *r = server_reply_new(c);
        if (r) {
            resp_add_error(&r->buf, final_error);
            r->done = 1;
            c->unfinished--;
            s->st.pending_replies--;
        }
    }
    flush_client(c);
    if (c->writes_out == 0) close_handle(c);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Back-pressure: too many commands unanswered, or more than max_buffer
 * bytes of replies unread: written and not yet taken by the client, or
 * done and held behind an unfinished one (an ACQUIRE waiting for its
 * slot with a stream of INFO behind it). */
static int should_pause(const client *c) {
    /* Nobody reads a hung-up client's replies: back-pressure protects
     * nothing, and reading on to its end of input is what cancels its
     * waiting calls (docs/protocol.md, "A caller that disconnects..."). */
    if (c->peer_gone) return 0;
    if (c->unfinished >= c->s->max_pipeline) return 1;
    return uv_stream_get_write_queue_size((const uv_stream_t *)&c->pipe) + c->held_bytes > c->s->max_buffer;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    client *c = (client *)h;
    char *p = NULL;
    size_t avail = 0;
    if (resp_parser_prepare(c->parser, suggested, &p, &avail) != 0) {
        *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
        return;
    }
    if (avail > 1u << 30) avail = 1u << 30;
    *buf = uv_buf_init(p, (unsigned)avail);
}

static void protocol_error(client *c, int rc) {
    server *s = c->s;
    const char *msg = resp_parser_error(c->parser);
    if (!msg || !*msg) msg = rc == RESP_ENOMEM ? "out of memory" : "Protocol error";
    s->st.closed_protocol_error++;
    if (rc == RESP_ETOOBIG) s->st.closed_buffer_limit++;
    server_log(s, CONFIG_LOG_DEBUG, "client %llu: %s; closing it", c->id, msg);
    client_close(c, NULL, msg);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
    client *c = (client *)st;
    if (c->closing) return;
    if (nread > 0 && c->quitting) return; /* after QUIT input is dropped (not committed) */
    if (nread > 0) {
        int rc = resp_parser_commit(c->parser, (size_t)nread);
        if (rc != 0) {
            protocol_error(c, rc);
            return;
        }
        process_input(c);
        return;
    }
    if (nread == 0) return;
    if (nread == UV_ENOBUFS) {
        resp_command cmd;
        int rc = resp_parser_next(c->parser, &cmd); /* the sticky error, if any */
        protocol_error(c, rc < 0 ? rc : RESP_ENOMEM);
        return;
    }
    /* EOF or a reset: the client is gone; its waiting calls are cancelled. */
    if (nread != UV_EOF)
        server_log(c->s, CONFIG_LOG_DEBUG, "client %llu: read error: %s", c->id, uv_strerror((int)nread));
    client_close(c, NULL, NULL);
}

static void update_reading(client *c) {
    if (c->handle_closed) return;
    int pause = !c->closing && should_pause(c);
    if (pause != c->paused) {
        c->paused = pause;
        if (pause) c->s->st.paused_clients++;
        else c->s->st.paused_clients--;
    }
    /* A quitting client is still read from (its input is dropped), so that
     * a hang-up while earlier commands wait still cancels them. */
    int want = !c->closing && !pause;
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0) c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->pipe);
        c->reading = 0;
    }
}

/* Dispatches every complete command buffered, until the client must wait
 * (back-pressure, QUIT) or closes. Never re-entered. */
static void process_input(client *c) {
    if (c->in_input || c->closing || c->handle_closed) return;
    server *s = c->s;
    c->in_input = 1;
    int need_more = 0;
    while (!c->closing && !c->quitting && !should_pause(c)) {
        resp_command cmd;
        int rc = resp_parser_next(c->parser, &cmd);
        if (rc == 1) {
            /* A command completed: what is left half-written is a newer
             * one, whose clock starts now (the idle timeout is for a
             * command that stalls, not for a client that keeps sending). */
            c->has_partial = 0;
            s->st.commands++;
            c->last_command_at = uv_now(s->loop);
            if (commands_dispatch(s, c, &cmd) != 0) {
                c->in_input = 0;
                server_log(s, CONFIG_LOG_WARN, "client %llu: out of memory; closing it", c->id);
                client_close(c, NULL, NULL);
                return;
            }
            continue;
        }
        if (rc == 0) {
            need_more = 1;
            break;
        }
        c->in_input = 0;
        protocol_error(c, rc);
        return;
    }
    c->in_input = 0;
    if (c->closing || c->handle_closed) return;
    /* A half-written command starts the idle clock; a paused client's
     * buffered bytes are complete commands waiting their turn. */
    if (need_more && resp_parser_pending(c->parser) > 0) {
        if (!c->has_partial) {
            c->has_partial = 1;
            c->partial_since = uv_now(s->loop);
        }
    } else {
        c->has_partial = 0;
    }
    flush_client(c);
    update_reading(c);
}

/* ---- accepting ------------------------------------------------------------------------------ */

static void on_rejected_closed(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *listener, int status) {
    server *s = listener->data;
    if (status < 0) {
        server_log(s, CONFIG_LOG_WARN, "accept failed: %s", uv_strerror(status));
        return;
    }
    if (s->nclients >= s->max_clients) {
        uv_pipe_t *p = malloc(sizeof(*p));
        if (!p) return;
        uv_pipe_init(s->loop, p, 0);
        if (uv_accept(listener, (uv_stream_t *)p) == 0) {
            static const char msg[] = "-ERR max clients reached\r\n";
            uv_buf_t b = uv_buf_init((char *)msg, sizeof(msg) - 1);
            uv_try_write((uv_stream_t *)p, &b, 1);
            s->st.rejected_max_clients++;
            server_log(s, CONFIG_LOG_WARN, "refused a client: max clients (%zu) reached", s->max_clients);
        }
        uv_close((uv_handle_t *)p, on_rejected_closed);
        return;
    }
    client *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->s = s;
    c->parser = resp_parser_new(&s->lim);
    uv_pipe_init(s->loop, &c->pipe, 0);
    s->clients_alloc++;
    if (!c->parser || uv_accept(listener, (uv_stream_t *)&c->pipe) != 0) {
        c->handle_closed = 1;
        uv_close((uv_handle_t *)&c->pipe, on_client_closed);
        return;
    }
    c->id = ++s->next_id;
    c->proto = RESP_PROTO_2;
    c->connected_at = c->last_command_at = uv_now(s->loop);
    c->next = s->clients;
    if (s->clients) s->clients->prev = c;
    s->clients = c;
    s->nclients++;
    s->st.connections_received++;
    update_reading(c);
}

int server_listen(server *s, char *err, size_t errlen) {
    const config *cfg = engine_config(s->e);
    const char *path = cfg->agent.socket;
    int removed = 0;
    snprintf(s->sock.path, sizeof(s->sock.path), "%s", path); /* CLIENT LIST's addr */
    if (unixsock_clear(path, &removed, err, errlen) != 0) return SL_EIO;
    if (removed) server_log(s, CONFIG_LOG_INFO, "removed a stale socket file at %s", path);
    uv_pipe_init(s->loop, &s->listener, 0);
    s->listener.data = s;
    s->listener_open = 1;
    s->handles_open++;
    int rc = uv_pipe_bind(&s->listener, path);
    if (rc < 0) {
        snprintf(err, errlen, "cannot bind %s: %s", path, uv_strerror(rc));
        return SL_EIO;
    }
    /* Before listen(): nobody can connect while owner, group and mode are
     * still the defaults. Who may open the socket may acquire. */
    if (unixsock_secure(&s->sock, path, cfg->agent.socket_mode, cfg->agent.socket_owner, cfg->agent.socket_group, err,
                        errlen) != 0)
        return SL_EIO;
    rc = uv_listen((uv_stream_t *)&s->listener, SERVER_BACKLOG, on_connection);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", path, uv_strerror(rc));
        return SL_EIO;
    }
    s->listening = 1;
    uv_timer_start(&s->cron, on_cron, s->cron_period, s->cron_period);
    return 0;
}

static void on_server_handle_closed(uv_handle_t *h);

void server_stop_accepting(server *s) {
    if (s->listener_open) {
        s->listener_open = 0;
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    }
    unixsock_remove(&s->sock);
}

/* ---- cron ----------------------------------------------------------------------------------- */

static void sample_rates(server *s, uint64_t now) {
    uint64_t span = now - s->rate_at;
    if (span < 1000) return;
    engine_stats es;
    engine_get_stats(s->e, &es);
    double secs = (double)span / 1000.0;
    s->st.grants_per_sec = (double)(es.grants - s->rate_grants) / secs;
    s->st.sheds_per_sec = (double)(es.sheds - s->rate_sheds) / secs;
    s->st.commands_per_sec = (double)(s->st.commands - s->rate_commands) / secs;
    s->rate_grants = es.grants;
    s->rate_sheds = es.sheds;
    s->rate_commands = s->st.commands;
    s->rate_at = now;
}

/* A paused client is not read, so its hang-up (EOF) is not seen: its
 * waiting ACQUIREs would be granted and written into the void, leaving
 * those grants outstanding until their lease. The socket says POLLHUP
 * once the peer has closed its end entirely (a half-close, SHUT_WR, is
 * not a hang-up: that client still reads its replies). */
static int peer_hung_up(const client *c) {
    uv_os_fd_t fd = -1;
    if (uv_fileno((const uv_handle_t *)&c->pipe, &fd) != 0 || fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = 0, .revents = 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLHUP);
}

static void on_cron(uv_timer_t *t) {
    server *s = t->data;
    uint64_t now = uv_now(s->loop);
    for (client *c = s->clients, *nx; c; c = nx) {
        nx = c->next;
        if (c->closing) {
            if (now - c->closing_since >= SERVER_CLOSE_GRACE_MS) close_handle(c);
            continue;
        }
        if (c->paused && peer_hung_up(c)) {
            /* Read on to its EOF: what it sent is dispatched, then the EOF
             * cancels what still waits, as for a client that was read. */
            server_log(s, CONFIG_LOG_DEBUG, "client %llu: hung up while paused", c->id);
            c->peer_gone = 1;
            update_reading(c);
            process_input(c);
            continue;
        }
        if (c->has_partial && !c->paused && now - c->partial_since >= s->idle_ms) {
            s->st.closed_idle_timeout++;
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "idle timeout: a half-written command waited more than %llu ms "
                     "(agent.client_idle_timeout_ms)",
                     (unsigned long long)s->idle_ms);
            server_log(s, CONFIG_LOG_DEBUG, "client %llu: %s; closing it", c->id, msg);
            client_close(c, NULL, msg);
        }
    }
    sample_rates(s, now);
    memory_maybe_trim(&s->trimmer, now);
    if (s->closing && s->nclients == 0 && uv_is_active((uv_handle_t *)&s->cron)) {
        uv_timer_stop(&s->cron);
        uv_close((uv_handle_t *)&s->cron, on_server_handle_closed);
    }
}

/* ---- shutdown ------------------------------------------------------------------------------- */

static void on_server_handle_closed(uv_handle_t *h) {
    server *s = h->data;
    s->handles_open--;
    maybe_done(s);
}

void server_close(server *s, const char *why, void (*done)(void *arg), void *arg) {
    if (s->closing) return;
    s->closing = 1;
    s->done = done;
    s->done_arg = arg;
    server_stop_accepting(s);
    uv_idle_stop(&s->resume_idle);
    uv_close((uv_handle_t *)&s->resume_idle, on_server_handle_closed);
    if (why) {
        s->close_why = malloc(strlen(why) + 1);
        if (s->close_why) memcpy(s->close_why, why, strlen(why) + 1);
    }
    for (client *c = s->clients, *nx; c; c = nx) {
        nx = c->next;
        client_close(c, s->close_why ? s->close_why : SLUICE_REPLY_CLOSING, NULL);
    }
    /* The cron keeps running until the last client is closed (forcing the
     * slow ones after the grace period), then closes itself. */
    if (!uv_is_active((uv_handle_t *)&s->cron)) uv_timer_start(&s->cron, on_cron, s->cron_period, s->cron_period);
    if (s->nclients == 0) {
        uv_timer_stop(&s->cron);
        uv_close((uv_handle_t *)&s->cron, on_server_handle_closed);
    }
}

void server_free(server *s) {
    if (!s) return;
    free(s->close_why);
    free(s->config_path);
    free(s);
}

void server_set_proxy(server *s, struct proxy *p) { s->proxy = p; }

struct proxy *server_proxy(const server *s) {
    return s->proxy;
}
