/* sluiced: the sluice agent daemon.
 *
 * main() parses the flags (a table), loads the configuration, and runs one
 * libuv loop holding the engine (engine.h), the socket server (server.h)
 * and the optional Prometheus endpoint (metrics.h). This file is the only
 * part of the agent that logs (stderr, timestamped, filtered by
 * agent.log_level) or exits. Signals are uv_signal_t handles:
 *   SIGHUP          reload the configuration; keep the old one if invalid
 *   SIGTERM/SIGINT  drain: stop accepting, answer waiting callers with an
 *                   error, close clients, remove the socket, exit 0; a
 *                   second signal during the drain exits 1 at once. */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/resource.h>
#endif
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <uv.h>

#include "config.h"
#include "engine.h"
#include "metrics.h"
#include "proxy.h"
#include "server.h"
#include "sluice.h"

#define WATCH_MS 500 /* how often the Redis state is checked for the log */

typedef struct daemon_ctx {
    uv_loop_t loop;
    const char *config_path;
    int log_level;
    engine *e;
    server *srv;
    metrics *met;
    proxy *px;         /* the HTTP proxy, NULL when agent.http.listen is off */
    int closing_parts; /* the socket server and the proxy still draining */
    uv_signal_t sig_hup, sig_term, sig_int;
    uv_timer_t watch;
    int handles_ready; /* signals and the watch timer are initialised */
    int draining;
    int redis_up_seen; /* last logged Redis state */
    int exit_code;
} daemon_ctx;

/* ---- logging ------------------------------------------------------------------------- */

static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};

static void vlog_at(int log_level, int level, const char *fmt, va_list ap) {
    if (level > log_level) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    time_t secs = tv.tv_sec;
    gmtime_r(&secs, &tm);
    char ts[32];
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    char msg[2048];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "%s.%03ldZ sluiced[%ld] %s: %s\n", ts, (long)(tv.tv_usec / 1000), (long)getpid(),
            level_tags[level < 0   ? 0
                       : level > 3 ? 3
                                   : level],
            msg);
    fflush(stderr);
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
log_at(daemon_ctx *d, int level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog_at(d ? d->log_level : CONFIG_LOG_INFO, level, fmt, ap);
    va_end(ap);
}

static void on_server_log(void *ud, int level, const char *msg) { log_at(ud, level, "%s", msg); }

/* ---- flags --------------------------------------------------------------------------- */

typedef struct options {
    const char *config;
    const char *check; /* --check-config FILE (or "" to check --config) */
    int help, version;
} options;

typedef enum { ARG_NONE, ARG_REQUIRED, ARG_OPTIONAL } arg_kind;

typedef struct flag {
    const char *name, *alias;
    arg_kind arg;
    const char *metavar;
    void (*apply)(options *o, const char *value);
    const char *help;
} flag;

static void set_config(options *o, const char *v) { o->config = v; }
static void set_check(options *o, const char *v) { o->check = v ? v : ""; }
static void set_help(options *o, const char *v) { o->help = 1; }
static void set_version(options *o, const char *v) { o->version = 1; }

static const flag flags[] = {
    {"--config", "-c", ARG_REQUIRED, "FILE", set_config, "run with the YAML configuration in FILE"},
    {"--check-config", NULL, ARG_OPTIONAL, "[FILE]", set_check,
     "validate FILE (or the --config file) and exit: 0 valid, 1 invalid (the message names file:line:key)"},
    {"--version", "-V", ARG_NONE, "", set_version, "print the version and exit"},
    {"--help", "-h", ARG_NONE, "", set_help, "print this help and exit"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: sluiced --config FILE\n"
               "       sluiced --check-config FILE\n"
               "\n"
               "sluiced is the sluice agent: it governs LLM API calls against a quota shared by\n"
               "a fleet through Redis, and serves callers on a UNIX socket that speaks the Redis\n"
               "protocol (try: redis-cli -s /run/sluice/agent.sock COMMAND HELP).\n"
               "\n"
               "flags:\n");
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s %s", flags[i].alias ? flags[i].alias : "", flags[i].alias ? ", " : "",
                 flags[i].name, flags[i].metavar);
        fprintf(f, "  %-28s %s\n", left, flags[i].help);
    }
    fprintf(f, "\n"
               "signals:\n"
               "  SIGHUP           reload the configuration file; an invalid file is logged and\n"
               "                   the running configuration is kept\n"
               "  SIGTERM, SIGINT  drain and exit 0: stop accepting, answer waiting callers with\n"
               "                   -CLOSING, close clients, remove the socket (a second signal\n"
               "                   exits 1 at once)\n"
               "\n"
               "logs go to stderr (level: agent.log_level). Documentation: docs/configuration.md\n"
               "(every key), docs/protocol.md (the commands), deploy/sluiced.example.yaml.\n");
}

/* Returns 0, or 2 after printing a usage error. */
static int parse_flags(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const flag *f = NULL;
        for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]) && !f; k++) {
            if ((strlen(flags[k].name) == nlen && !strncmp(flags[k].name, a, nlen)) ||
                (!eq && flags[k].alias && !strcmp(flags[k].alias, a)))
                f = &flags[k];
        }
        if (!f) {
            fprintf(stderr, "sluiced: unknown flag '%s' (see sluiced --help)\n", a);
            return 2;
        }
        const char *value = NULL;
        if (eq) {
            if (f->arg == ARG_NONE) {
                fprintf(stderr, "sluiced: %s takes no value\n", f->name);
                return 2;
            }
            value = eq + 1;
        } else if (f->arg == ARG_REQUIRED) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sluiced: %s needs a value: %s %s\n", f->name, f->name, f->metavar);
                return 2;
            }
            value = argv[++i];
        } else if (f->arg == ARG_OPTIONAL && i + 1 < argc && argv[i + 1][0] != '-') {
            value = argv[++i];
        }
        if (f->arg != ARG_NONE && value && !*value) {
            fprintf(stderr, "sluiced: %s needs a non-empty value\n", f->name);
            return 2;
        }
        f->apply(o, value);
    }
    return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void close_own_handles(daemon_ctx *d) {
    if (!d->handles_ready) return;
    d->handles_ready = 0;
    uv_close((uv_handle_t *)&d->sig_hup, on_handle_closed);
    uv_close((uv_handle_t *)&d->sig_term, on_handle_closed);
    uv_close((uv_handle_t *)&d->sig_int, on_handle_closed);
    uv_close((uv_handle_t *)&d->watch, on_handle_closed);
}

/* The socket server or the proxy has closed; the last one ends the loop's
 * own handles. */
static void on_part_closed(void *arg) {
    daemon_ctx *d = arg;
    if (--d->closing_parts > 0) return;
    close_own_handles(d);
    log_at(d, CONFIG_LOG_INFO, "stopped");
}

static void close_parts(daemon_ctx *d, const char *why) {
    d->closing_parts = (d->srv != NULL) + (d->px != NULL);
    if (!d->closing_parts) {
        close_own_handles(d);
        return;
    }
    if (d->px) proxy_close(d->px, on_part_closed, d);
    if (d->srv) server_close(d->srv, why, on_part_closed, d);
}

static void on_engine_stopped(void *arg) {
    daemon_ctx *d = arg;
    log_at(d, CONFIG_LOG_DEBUG, "engine stopped; closing clients");
    close_parts(d, SLUICE_REPLY_CLOSING);
}

/* Starts the drain; safe in any start-up state. */
static void begin_shutdown(daemon_ctx *d) {
    if (d->draining) return;
    d->draining = 1;
    if (d->srv) server_stop_accepting(d->srv);
    if (d->px) proxy_stop_accepting(d->px);
    if (d->met) metrics_close(d->met, NULL, NULL);
    if (d->e) engine_stop(d->e, on_engine_stopped, d);
    else close_parts(d, NULL);
}

static void on_term(uv_signal_t *h, int signum) {
    daemon_ctx *d = h->data;
    if (d->draining) {
        log_at(d, CONFIG_LOG_WARN, "signal %d during the drain: exiting now", signum);
        exit(1);
    }
    log_at(d, CONFIG_LOG_INFO, "signal %d: draining (no new clients; waiting callers get -CLOSING)", signum);
    begin_shutdown(d);
}

static int same_strings(char **a, size_t na, char **b, size_t nb) {
    if (na != nb) return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0) return 0;
    return 1;
}

/* Settings that only take effect at start: say so when a reload changes them. */
static void warn_restart_only(daemon_ctx *d, const config *o, const config *n) {
    struct {
        const char *key;
        int differs;
    } rows[] = {
        {"agent.socket", strcmp(o->agent.socket, n->agent.socket) != 0},
        {"agent.socket_mode", o->agent.socket_mode != n->agent.socket_mode},
        {"agent.metrics", strcmp(o->agent.metrics, n->agent.metrics) != 0},
        {"agent.http.listen",
         !same_strings(o->agent.http.listen, o->agent.http.nlisten, n->agent.http.listen, n->agent.http.nlisten)},
        {"agent.http.allow_remote", o->agent.http.allow_remote != n->agent.http.allow_remote},
        {"agent.id", strcmp(o->agent.id, n->agent.id) != 0},
        {"agent.heartbeat_ms", o->agent.heartbeat_ms != n->agent.heartbeat_ms},
        {"agent.silent_hold_ms", o->agent.silent_hold_ms != n->agent.silent_hold_ms},
        {"redis.url", strcmp(o->redis.url, n->redis.url) != 0},
        {"redis.username", strcmp(o->redis.username, n->redis.username) != 0},
        {"redis password", strcmp(o->redis.password, n->redis.password) != 0},
        {"redis.timeout_ms", o->redis.timeout_ms != n->redis.timeout_ms},
        {"redis.connect_timeout_ms", o->redis.connect_timeout_ms != n->redis.connect_timeout_ms},
        {"redis.cluster", !same_strings(o->redis.cluster, o->redis.ncluster, n->redis.cluster, n->redis.ncluster)},
        {"redis.sentinel.master", strcmp(o->redis.sentinel_master, n->redis.sentinel_master) != 0},
        {"redis.sentinel.nodes",
         !same_strings(o->redis.sentinels, o->redis.nsentinels, n->redis.sentinels, n->redis.nsentinels)},
        {"agent.socket_owner", strcmp(o->agent.socket_owner, n->agent.socket_owner) != 0},
        {"agent.socket_group", strcmp(o->agent.socket_group, n->agent.socket_group) != 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (rows[i].differs)
            log_at(d, CONFIG_LOG_WARN, "reload: %s changed; it takes effect at the next restart", rows[i].key);
}

static void on_hup(uv_signal_t *h, int signum) {
    daemon_ctx *d = h->data;
    if (d->draining) return;
    config *n = NULL;
    char err[1024];
    if (config_load(d->config_path, &n, err, sizeof(err)) != 0) {
        log_at(d, CONFIG_LOG_ERROR, "reload failed, keeping the running configuration: %s", err);
        server_note_reload(d->srv, err);
        return;
    }
    warn_restart_only(d, engine_config(d->e), n);
    size_t ndep = n->ndeployments;
    int level = n->agent.log_level;
    engine_reload(d->e, n); /* takes n */
    server_apply_config(d->srv);
    if (d->px) proxy_apply_config(d->px);
    server_note_reload(d->srv, NULL);
    d->log_level = level;
    log_at(d, CONFIG_LOG_INFO, "configuration reloaded from %s (%zu deployments)", d->config_path, ndep);
}

/* Logs the transitions between Redis and local fallback. */
static void on_watch(uv_timer_t *t) {
    daemon_ctx *d = t->data;
    engine_stats st;
    engine_get_stats(d->e, &st);
    if (st.redis_up == d->redis_up_seen) return;
    d->redis_up_seen = st.redis_up;
    if (st.redis_up) log_at(d, CONFIG_LOG_INFO, "Redis connected: governing with the fleet");
    else
        log_at(d, CONFIG_LOG_WARN, "Redis unreachable (%s): %s", st.redis_error[0] ? st.redis_error : "not connected",
               engine_config(d->e)->agent.fail == CONFIG_FAIL_CLOSED ? "refusing acquires (agent.fail: closed)"
                                                                     : "governing locally at this agent's share");
}

static int run(daemon_ctx *d) {
    char err[1024];
    config *cfg = NULL;
    if (config_load(d->config_path, &cfg, err, sizeof(err)) != 0) {
        log_at(d, CONFIG_LOG_ERROR, "%s", err);
        return 1;
    }
    d->log_level = cfg->agent.log_level;
    if (uv_loop_init(&d->loop) != 0) {
        log_at(d, CONFIG_LOG_ERROR, "cannot create the event loop");
        config_free(cfg);
        return 1;
    }
    int rc = engine_new(&d->loop, cfg, NULL, &d->e);
    if (rc != 0) {
        log_at(d, CONFIG_LOG_ERROR, "cannot start the engine: %s", sl_strerror(rc));
        config_free(cfg);
        uv_loop_close(&d->loop);
        return 1;
    }
    cfg = NULL; /* the engine's now */
    engine_set_log(d->e, on_server_log, d);
    uv_signal_init(&d->loop, &d->sig_hup);
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    uv_timer_init(&d->loop, &d->watch);
    d->sig_hup.data = d->sig_term.data = d->sig_int.data = d->watch.data = d;
    d->handles_ready = 1;

    server_options so = {d->config_path, on_server_log, d};
    rc = server_new(&d->loop, d->e, &so, &d->srv);
    if (rc == 0) rc = server_listen(d->srv, err, sizeof(err)) == 0 ? 0 : 1;
    else snprintf(err, sizeof(err), "cannot create the server: %s", sl_strerror(rc));
    const config *c = engine_config(d->e);
    if (rc == 0 && c->agent.metrics_port > 0) {
        rc = metrics_new(&d->loop, d->srv, &d->met);
        if (rc == 0)
            rc = metrics_listen(d->met, c->agent.metrics_host, c->agent.metrics_port, err, sizeof(err)) == 0 ? 0 : 1;
        else snprintf(err, sizeof(err), "cannot create the metrics endpoint: %s", sl_strerror(rc));
    }
    if (rc == 0 && c->agent.http.nlisten > 0) {
        rc = proxy_new(&d->loop, d->e, on_server_log, d, &d->px);
        if (rc == 0) {
            server_set_proxy(d->srv, d->px);
            rc = proxy_listen(d->px, err, sizeof(err)) == 0 ? 0 : 1;
        } else {
            snprintf(err, sizeof(err), "cannot create the HTTP proxy: %s", sl_strerror(rc));
        }
    }
    if (rc != 0) {
        log_at(d, CONFIG_LOG_ERROR, "%s", err);
        d->exit_code = 1;
        begin_shutdown(d);
    } else {
        engine_start(d->e);
        uv_signal_start(&d->sig_hup, on_hup, SIGHUP);
        /* Blocked since main(): a SIGHUP that came during the start is
         * delivered now, as a reload, instead of killing the process. */
        sigset_t hup;
        sigemptyset(&hup);
        sigaddset(&hup, SIGHUP);
        sigprocmask(SIG_UNBLOCK, &hup, NULL);
        uv_signal_start(&d->sig_term, on_term, SIGTERM);
        uv_signal_start(&d->sig_int, on_term, SIGINT);
        uv_timer_start(&d->watch, on_watch, WATCH_MS, WATCH_MS);
        char http[512] = "off";
        size_t used = 0;
        for (size_t i = 0; d->px && http_server_address(proxy_server(d->px), i) && used < sizeof(http); i++)
            used += (size_t)snprintf(http + used, sizeof(http) - used, "%s%s", i ? ", " : "",
                                     http_server_address(proxy_server(d->px), i));
        log_at(d, CONFIG_LOG_INFO, "sluiced %s ready: agent %s on %s, %zu deployment%s, metrics %s, http proxy %s%s",
               SLUICE_VERSION, engine_agent_id(d->e), c->agent.socket, c->ndeployments, c->ndeployments == 1 ? "" : "s",
               c->agent.metrics[0] ? c->agent.metrics : "off", http, "");
    }
    uv_run(&d->loop, UV_RUN_DEFAULT);
    engine_free(d->e);
    server_free(d->srv);
    proxy_free(d->px);
    metrics_free(d->met);
    if (uv_loop_close(&d->loop) != 0) log_at(d, CONFIG_LOG_WARN, "event loop closed with handles still open");
    return d->exit_code;
}

/* The secrets this process holds (the Redis password, inject_key's
 * provider keys, the client keys: docs/security.md, "kept in memory
 * only") never go to disk in a core dump, and no other process of the
 * same user may read its memory or environment (/proc/PID/mem, environ,
 * ptrace). Before any secret is read. SLUICED_ALLOW_CORE_DUMP=1 keeps
 * core dumps for debugging a crash. */
static void protect_secrets(void) {
    const char *allow = getenv("SLUICED_ALLOW_CORE_DUMP");
    if (allow && !strcmp(allow, "1")) return;
#if defined(__linux__)
    struct rlimit none = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &none);
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
#endif
}

int main(int argc, char **argv) {
    protect_secrets();
    options o = {0};
    int rc = parse_flags(argc, argv, &o);
    if (rc != 0) return rc;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    if (o.version) {
        printf("sluiced %s (libuv %s)\n", SLUICE_VERSION, uv_version_string());
        return 0;
    }
    if (o.check) {
        const char *path = *o.check ? o.check : o.config;
        if (!path) {
            fprintf(stderr, "sluiced: --check-config needs a file: sluiced --check-config FILE\n");
            return 2;
        }
        config *cfg = NULL;
        char err[1024];
        if (config_load(path, &cfg, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        printf("%s: configuration OK (%zu deployment%s)\n", path, cfg->ndeployments, cfg->ndeployments == 1 ? "" : "s");
        config_free(cfg);
        return 0;
    }
    if (!o.config) {
        fprintf(stderr, "sluiced: no configuration: sluiced --config FILE (see sluiced --help)\n");
        return 2;
    }
    /* A client that vanishes mid-write must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    /* Nor a SIGHUP (a reload: systemctl reload once the socket exists)
     * before its handler is installed: its default action ends the
     * process. Blocked until run() installs the handler (threads made
     * meanwhile inherit the mask, so the main thread takes it). */
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    sigprocmask(SIG_BLOCK, &hup, NULL);
    daemon_ctx d;
    memset(&d, 0, sizeof(d));
    d.config_path = o.config;
    d.log_level = CONFIG_LOG_INFO;
    /* libcurl's global state (the HTTP proxy's upstream transfers), set
     * up once while the process has one thread. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "sluiced: libcurl could not be initialised\n");
        return 1;
    }
    rc = run(&d);
    curl_global_cleanup();
    return rc;
}
