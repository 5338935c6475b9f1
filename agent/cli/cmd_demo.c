/* cmd_demo: `sluice demo`, the seed article's table measured against
 * sluice on this machine.
 *
 * The demo starts what it needs as child processes (demo_proc.h): an
 * ephemeral redis-server on a private UNIX socket (unless --redis-url), the
 * mock provider (`sluice mock --port 0`), and a sluiced whose generated
 * configuration points at them. Then, for each strategy in turn, it starts
 * a fleet of P worker processes (`sluice demo-worker`, demo_worker.c),
 * releases them at one instant, collects what they report and reads the
 * provider's ledger for the run's own fresh deployment (demo_report.h).
 * Everything it started is stopped on exit, on SIGINT/SIGTERM/SIGHUP, and,
 * through PR_SET_PDEATHSIG, when the demo itself is killed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "cli_flags.h"
#include "cmd.h"
#include "demo.h"
#include "demo_proc.h"
#include "demo_report.h"

#define MAX_PROCESSES 64
#define READY_TIMEOUT_MS 60000
#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS 5000
#define PROGRESS_EVERY_MS 200

/* The options as given; < 0 (or NULL) where the scenario decides. */
typedef struct demo_opts {
    long long processes, requests, rpm, burst, attempts, seed, jitter_ms;
    long long tpm, token_burst, agents;
    const char *scenario;
    double service[2]; /* < 0: derived from the time scale */
    double time_scale; /* 0: rpm / 60 */
    const char *strategies;
    const char *redis_url;
    const char *redis_password_env;
    const char *sluiced;
    const char *redis_server;
    const char *settle_headers;
    int json, keep, help;
} demo_opts;

#define DOPT(f) offsetof(demo_opts, f)

static const cli_flag demo_flags[] = {
    {"--scenario", NULL, "NAME", CLI_STR, DOPT(scenario), 0, 0,
     "requests (RPM binds, the default), tokens (TPM binds, sluice through its HTTP proxy) or all (both tables)"},
    {"--processes", "-P", "N", CLI_INT, DOPT(processes), 1, MAX_PROCESSES, "worker processes in the fleet (default 3)"},
    {"--requests", "-N", "N", CLI_INT, DOPT(requests), 1, 100000,
     "requests, all arriving at once (default 300; tokens scenario 150)"},
    {"--rpm", NULL, "N", CLI_INT, DOPT(rpm), 1, 1000000,
     "the deployment's quota, requests per minute (default 60 x time scale = 600)"},
    {"--burst", NULL, "N", CLI_INT, DOPT(burst), 1, 1000000, "the provider's burst, requests (default 10)"},
    {"--tpm", NULL, "N", CLI_INT, DOPT(tpm), 0, 1000000000000.0,
     "the deployment's token quota per minute, 0 = none (default 0; tokens scenario 120000)"},
    {"--token-burst", NULL, "N", CLI_INT, DOPT(token_burst), 1, 1000000000000.0,
     "the provider's token burst, and sluiced's burst.tokens (default tpm / 60: one second)"},
    {"--agents", NULL, "N", CLI_INT, DOPT(agents), 1, MAX_PROCESSES,
     "sluiced processes sharing the Redis; worker process i uses agent i mod N (default 1; tokens scenario: one "
     "per worker process)"},
    {"--service-ms", NULL, "LO-HI", CLI_RANGE, DOPT(service), 0, 3600000,
     "service time of an accepted call (default 300-900 / time scale = 30-90)"},
    {"--attempts", NULL, "N", CLI_INT, DOPT(attempts), 1, 100, "attempts per request before giving up (default 10)"},
    {"--time-scale", NULL, "S", CLI_DOUBLE, DOPT(time_scale), 0.01, 10000,
     "run the seed's scenario S times faster: client waits (backoff base 200 ms, Retry-After) are divided by S "
     "(default rpm / 60)"},
    {"--strategies", NULL, "LIST", CLI_STR, DOPT(strategies), 0, 0,
     "comma-separated, from A,B,C,D,E,F,sluice,proxy (default A,B,C,D,E,sluice; tokens scenario A,B,E,F,proxy)"},
    {"--json", NULL, NULL, CLI_BOOL, DOPT(json), 0, 0, "print one JSON document instead of the table"},
    {"--redis-url", NULL, "URL", CLI_STR, DOPT(redis_url), 0, 0,
     "use this Redis (redis://host:port/db or unix:///path) instead of starting one"},
    {"--redis-password-env", NULL, "VAR", CLI_STR, DOPT(redis_password_env), 0, 0,
     "environment variable holding the password of --redis-url"},
    {"--sluiced", NULL, "PATH", CLI_STR, DOPT(sluiced), 0, 0,
     "the sluiced binary (default: next to sluice, agent/sluiced, or PATH)"},
    {"--redis-server", NULL, "PATH", CLI_STR, DOPT(redis_server), 0, 0,
     "the redis-server binary (default: $SLUICE_REDIS_SERVER or PATH)"},
    {"--seed", NULL, "S", CLI_INT, DOPT(seed), 0, 9007199254740992.0, "seed of every random draw (default 1)"},
    {"--jitter-ms", NULL, "MS", CLI_INT, DOPT(jitter_ms), 0, 10000,
     "sluiced's jitter_ms: how late a released worker may start (default 25: a busy shared machine)"},
    {"--settle-headers", NULL, "all|none", CLI_STR, DOPT(settle_headers), 0, 0,
     "sluice strategy: forward the provider's rate-limit headers with SETTLE (default all)"},
    {"--keep", NULL, NULL, CLI_BOOL, DOPT(keep), 0, 0, "keep the temp dir (configs, logs) and print its path"},
    {"--help", NULL, NULL, CLI_BOOL, DOPT(help), 0, 0, "show this help"},
};
#define DEMO_NFLAGS (sizeof(demo_flags) / sizeof(demo_flags[0]))

typedef struct worker_proc {
    pid_t pid;
    int in, out; /* our ends of its stdin and stdout */
    char *buf;   /* unparsed stdout */
    size_t len, cap;
    int ready, eof, got_result;
} worker_proc;

/* One sluiced of the fleet. */
typedef struct agent_proc {
    pid_t pid;
    int http_port; /* its HTTP proxy, with uses_proxy */
    char sock[400];
} agent_proc;

typedef struct demo_ctx {
    demo_opts user; /* as given */
    demo_opts o;    /* the scenario's, with every default filled in */
    const demo_scenario *scen;
    demo_setup setup;
    const demo_strategy *run[DEMO_NSTRATEGIES];
    int nrun, uses_sluice, uses_proxy;
    int nagents;
    agent_proc agents[MAX_PROCESSES];
    /* dir: the scenario's files; root: the temp dir (dir or its parent) */
    char self[4096], root[256], dir[320], redis_sock[400], redis_url[1024];
    char sluiced_bin[4096], redis_bin[4096], dep_prefix[64];
    char deployments[DEMO_NSTRATEGIES][80];
    pid_t redis_pid, mock_pid;
    int mock_port;
    int progress; /* stderr is a terminal */
    long long max_wait_ms;
    worker_proc w[MAX_PROCESSES];
} demo_ctx;

static void usage(FILE *f) {
    fprintf(f, "usage: sluice demo [OPTIONS]\n\n"
               "Measures the seed article's client strategies against a rate-limited provider, next to\n"
               "sluice, on this machine, and prints one table. With no options it starts everything it\n"
               "needs (an ephemeral redis-server on a private socket, `sluice mock`, and a sluiced),\n"
               "runs each strategy as the same fleet of P worker processes against a fresh deployment\n"
               "of the mock, and stops it all on exit or Ctrl-C.\n\n"
               "strategies (each process of the fleet runs it on its own):\n");
    for (int i = 0; i < DEMO_NSTRATEGIES; i++)
        fprintf(f, "  %-7s %s\n", demo_strategies[i].id, demo_strategies[i].describe);
    fprintf(f, "\nscenarios (--scenario; all runs each, one table after the other):\n");
    for (int i = 0; i < DEMO_NSCENARIOS; i++)
        fprintf(f, "  %-9s %s\n", demo_scenarios[i].name, demo_scenarios[i].describe);
    fprintf(f, "\noptions:\n");
    cli_print_flags(f, demo_flags, DEMO_NFLAGS);
    fprintf(f, "\nThe default is the seed's scenario 10 times faster (600 RPM, burst 10, 30-90 ms, 300\n"
               "requests, 3 processes): a few minutes for the whole table. The seed's own parameters,\n"
               "in real time:  sluice demo --rpm 60 -N 90\n"
               "TPM binding first, sluice through its HTTP proxy (about 2 minutes):  sluice demo --scenario tokens\n\n"
               "Reading the table: completed, 429s and attempts come from the provider's own ledger;\n"
               "util is the share of the deployment's rate used beyond the first burst (100 %% = all of\n"
               "it), counted in tokens when TPM binds. Exit status: 0, 1 if a run failed, 2 for a usage\n"
               "error, 130 when interrupted. See docs/demo.md.\n");
}

/* ---- options ------------------------------------------------------------------ */

static int parse_strategies(demo_ctx *d) {
    const char *list = d->o.strategies ? d->o.strategies : d->scen->strategies;
    char id[32];
    while (*list) {
        size_t n = strcspn(list, ",");
        if (n == 0 || n >= sizeof(id)) {
            fprintf(stderr, "sluice demo: --strategies: expected a list like A,E,sluice, got '%s'\n", d->o.strategies);
            return -1;
        }
        memcpy(id, list, n);
        id[n] = '\0';
        const demo_strategy *st = demo_strategy_find(id);
        if (!st) {
            fprintf(stderr, "sluice demo: --strategies: unknown strategy '%s' (A, B, C, D, E, F, sluice or proxy)\n",
                    id);
            return -1;
        }
        if (st->paced == DEMO_PACE_TOKENS && d->o.tpm <= 0) {
            fprintf(stderr, "sluice demo: strategy %s paces by tokens: the %s scenario needs a --tpm\n", id,
                    d->scen->name);
            return -1;
        }
        for (int i = 0; i < d->nrun; i++)
            if (d->run[i] == st) {
                fprintf(stderr, "sluice demo: --strategies: '%s' given twice\n", id);
                return -1;
            }
        d->run[d->nrun++] = st;
        if (st->wait == DEMO_WAIT_SLUICE || st->via_proxy) d->uses_sluice = 1;
        if (st->via_proxy) d->uses_proxy = 1;
        list += n + (list[n] == ',');
    }
    if (d->nrun == 0) {
        fprintf(stderr, "sluice demo: --strategies: empty list\n");
        return -1;
    }
    return 0;
}

/* Fills d->o from the options given and scenario sc's defaults, and
 * checks them. */
static int setup_options(demo_ctx *d, const demo_scenario *sc) {
    demo_opts *o = &d->o;
    *o = d->user;
    d->scen = sc;
    d->nrun = d->uses_sluice = d->uses_proxy = 0;
    if (o->requests <= 0) o->requests = sc->requests;
    if (o->burst <= 0) o->burst = sc->burst;
    if (o->tpm < 0) o->tpm = sc->tpm;
    if (o->token_burst <= 0) o->token_burst = o->tpm / 60; /* one second, sluiced's default */
    if (o->tpm > 0 && o->token_burst < 1) o->token_burst = 1;
    if (o->requests < o->processes) {
        fprintf(stderr, "sluice demo: -N (%lld) must be at least -P (%lld)\n", o->requests, o->processes);
        return -1;
    }
    if (strcmp(o->settle_headers, "all") != 0 && strcmp(o->settle_headers, "none") != 0) {
        fprintf(stderr, "sluice demo: --settle-headers: expected all or none, got '%s'\n", o->settle_headers);
        return -1;
    }
    if (o->redis_password_env && !o->redis_url) {
        fprintf(stderr, "sluice demo: --redis-password-env needs --redis-url\n");
        return -1;
    }
    if (o->redis_url && strpbrk(o->redis_url, "\"\\\n")) {
        fprintf(stderr, "sluice demo: --redis-url: unexpected characters in '%s'\n", o->redis_url);
        return -1;
    }
    if (parse_strategies(d) != 0) return -1;
    /* Time scale and rate: either gives the other, relative to the seed's 60 RPM. */
    if (o->time_scale <= 0) {
        if (o->rpm <= 0) o->rpm = 600;
        o->time_scale = (double)o->rpm / DEMO_SEED_RPM;
    } else if (o->rpm <= 0) {
        o->rpm = (long long)llround(DEMO_SEED_RPM * o->time_scale);
        if (o->rpm < 1) o->rpm = 1;
    }
    if (o->service[0] < 0) {
        o->service[0] = round(DEMO_SEED_SERVICE_MIN_MS / o->time_scale);
        o->service[1] = round(DEMO_SEED_SERVICE_MAX_MS / o->time_scale);
    }
    if (o->service[0] != floor(o->service[0]) || o->service[1] != floor(o->service[1])) {
        fprintf(stderr, "sluice demo: --service-ms: whole milliseconds, please\n");
        return -1;
    }
    d->nagents = 0;
    if (d->uses_sluice) {
        long long n = o->agents > 0 ? o->agents : sc->agents > 0 ? sc->agents : o->processes;
        d->nagents = (int)(n < o->processes ? n : o->processes);
    }
    d->setup.scenario = sc->name;
    d->setup.processes = (int)o->processes;
    d->setup.requests = o->requests;
    d->setup.rpm = (double)o->rpm;
    d->setup.burst = (double)o->burst;
    d->setup.tpm = (double)o->tpm;
    d->setup.token_burst = (double)o->token_burst;
    d->setup.prompt_chars = sc->prompt_chars;
    d->setup.max_tokens = sc->max_tokens;
    d->setup.tokens = 0;
    for (long long i = 0; i < o->requests; i++)
        d->setup.tokens += (double)demo_estimate(sc->prompt_chars, sc->max_tokens, i);
    d->setup.agents = d->nagents;
    d->setup.service_min_ms = o->service[0];
    d->setup.service_max_ms = o->service[1];
    d->setup.attempts = (int)o->attempts;
    d->setup.time_scale = o->time_scale;
    d->setup.jitter_ms = o->jitter_ms;
    d->setup.redis = o->redis_url ? o->redis_url : (d->uses_sluice ? "ephemeral redis-server" : "not used");
    /* A generous MAXWAIT: three times the whole batch at the quota, at least a minute. */
    double batch = (double)o->requests * 60000.0 / (double)o->rpm;
    if (o->tpm > 0 && d->setup.tokens * 60000.0 / (double)o->tpm > batch)
        batch = d->setup.tokens * 60000.0 / (double)o->tpm;
    double mw = 3.0 * batch + 10000.0;
    d->max_wait_ms = mw < 60000 ? 60000 : mw > 86400000 ? 86400000 : (long long)mw;
    return 0;
}

/* ---- helpers ------------------------------------------------------------------ */

static void echo_file(const char *path, const char *who) {
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f) return;
    while (fgets(line, sizeof(line), f)) fprintf(stderr, "  %s: %s", who, line);
    fclose(f);
}

static int open_log(const demo_ctx *d, const char *name) {
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", d->dir, name);
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

static void progress_clear(const demo_ctx *d) {
    if (d->progress) fprintf(stderr, "\r\033[K");
}

/* PING over a UNIX socket with hiredis: 1 when it answers. */
static int pings(const char *sock) {
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectUnixWithTimeout(sock, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING);
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ok;
}

/* Waits until test(arg) or the child exits or the time is up. Returns 0
 * when ready, -1 otherwise (with a message). */
static int wait_ready(pid_t pid, const char *what, int (*test)(const void *), const void *arg) {
    double until = demo_proc_now_ms() + START_TIMEOUT_MS;
    while (demo_proc_now_ms() < until) {
        if (demo_proc_interrupted()) return -1;
        if (test(arg)) return 0;
        int st;
        if (demo_proc_exited(pid, &st)) {
            fprintf(stderr, "sluice demo: %s exited during start (status %d)\n", what,
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            return -1;
        }
        demo_proc_sleep_ms(20);
    }
    fprintf(stderr, "sluice demo: %s did not start within %d s\n", what, START_TIMEOUT_MS / 1000);
    return -1;
}

static int test_ping(const void *sock) { return pings(sock); }

static int test_port_file(const void *arg) {
    const char *path = arg;
    FILE *f = fopen(path, "r");
    int port = 0;
    if (!f) return 0;
    int ok = fscanf(f, "%d", &port) == 1 && port > 0;
    fclose(f);
    return ok;
}

/* ---- the services ----------------------------------------------------------------- */

static int start_redis(demo_ctx *d) {
    const char *env = getenv("SLUICE_REDIS_SERVER");
    if (demo_proc_find_exe(d->o.redis_server ? d->o.redis_server : env, NULL, "redis-server", d->redis_bin,
                           sizeof(d->redis_bin)) != 0) {
        fprintf(stderr,
                "sluice demo: redis-server not found%s%s; install it (apt-get install redis-server), pass "
                "--redis-server PATH, or use an existing Redis with --redis-url\n",
                d->o.redis_server || env ? " at " : " in PATH",
                d->o.redis_server ? d->o.redis_server
                : env             ? env
                                  : "");
        return -1;
    }
    char logfile[400];
    snprintf(d->redis_sock, sizeof(d->redis_sock), "%s/redis.sock", d->dir);
    snprintf(logfile, sizeof(logfile), "%s/redis.log", d->dir);
    char *argv[] = {d->redis_bin, "--port",      "0",  "--unixsocket", d->redis_sock, "--unixsocketperm",
                    "700",        "--save",      "",   "--appendonly", "no",          "--dir",
                    d->dir,       "--daemonize", "no", "--loglevel",   "warning",     "--logfile",
                    logfile,      NULL};
    d->redis_pid = demo_proc_spawn(argv, -1, -1, 2);
    if (d->redis_pid < 0) {
        fprintf(stderr, "sluice demo: cannot start redis-server: %s\n", strerror(errno));
        return -1;
    }
    if (wait_ready(d->redis_pid, "redis-server", test_ping, d->redis_sock) != 0) {
        echo_file(logfile, "redis-server");
        return -1;
    }
    snprintf(d->redis_url, sizeof(d->redis_url), "unix://%s", d->redis_sock);
    return 0;
}

static int start_mock(demo_ctx *d) {
    char portfile[400], rpm[32], burst[32], service[64], seed[32], tpm[32], tburst[32];
    snprintf(portfile, sizeof(portfile), "%s/mock.port", d->dir);
    snprintf(rpm, sizeof(rpm), "%lld", d->o.rpm);
    snprintf(burst, sizeof(burst), "%lld", d->o.burst);
    snprintf(service, sizeof(service), "%.0f-%.0f", d->o.service[0], d->o.service[1]);
    snprintf(seed, sizeof(seed), "%lld", d->o.seed);
    snprintf(tpm, sizeof(tpm), "%lld", d->o.tpm);
    snprintf(tburst, sizeof(tburst), "%lld", d->o.token_burst);
    /* Without a TPM, the argument list ends before the token flags. */
    char *argv[] = {d->self,
                    "mock",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--port-file",
                    portfile,
                    "--rpm",
                    rpm,
                    "--burst",
                    burst,
                    "--service-ms",
                    service,
                    "--seed",
                    seed,
                    d->o.tpm > 0 ? "--tpm" : NULL,
                    tpm,
                    "--token-burst",
                    tburst,
                    NULL};
    int log = open_log(d, "mock.log");
    d->mock_pid = demo_proc_spawn(argv, -1, -1, log);
    if (log >= 0) close(log);
    if (d->mock_pid < 0) {
        fprintf(stderr, "sluice demo: cannot start the mock: %s\n", strerror(errno));
        return -1;
    }
    if (wait_ready(d->mock_pid, "sluice mock", test_port_file, portfile) != 0) {
        char path[400];
        snprintf(path, sizeof(path), "%s/mock.log", d->dir);
        echo_file(path, "sluice mock");
        return -1;
    }
    FILE *f = fopen(portfile, "r");
    int ok = f && fscanf(f, "%d", &d->mock_port) == 1;
    if (f) fclose(f);
    return ok ? 0 : -1;
}

static int find_sluiced(demo_ctx *d) {
    char dir[4096], c1[4200], c2[4200], c3[4200];
    snprintf(dir, sizeof(dir), "%s", d->self);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    snprintf(c1, sizeof(c1), "%s/sluiced", dir);
    snprintf(c2, sizeof(c2), "%s/agent/sluiced", dir);
    snprintf(c3, sizeof(c3), "%s/../agent/sluiced", dir);
    const char *cands[] = {c1, c2, c3, NULL};
    if (demo_proc_find_exe(d->o.sluiced, cands, "sluiced", d->sluiced_bin, sizeof(d->sluiced_bin)) == 0) return 0;
    if (d->o.sluiced) fprintf(stderr, "sluice demo: --sluiced %s is not an executable file\n", d->o.sluiced);
    else
        fprintf(stderr,
                "sluice demo: sluiced not found (looked in %s, %s and PATH). Build it (cmake --build BUILD "
                "--target sluiced), pass --sluiced PATH, or leave sluice out: --strategies A,B,C,D,E\n",
                c1, c2);
    return -1;
}

/* A loopback TCP port that was free a moment ago (sluiced's listen takes
 * no port 0), or -1. */
static int free_loopback_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int port = -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* Whether sluiced's HTTP proxy governs: not when its INFO says
 * http_governing:0 (it recognises requests and answers 501, sending
 * nothing upstream). 1, 0, or -1 when INFO could not be read. */
static int proxy_governs(const demo_ctx *d) {
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectUnixWithTimeout(d->agents[0].sock, tv);
    int rc = -1;
    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK) {
        redisReply *r = redisCommand(c, "INFO http");
        if (r && r->type == REDIS_REPLY_STRING) rc = strstr(r->str, "\nhttp_governing:0") ? 0 : 1;
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return rc;
}

/* Starts agent k of the fleet: sluiced.yaml, agent.sock and sluiced.log for
 * the first, with "-<k+1>" in the names for the others. */
static int start_sluiced(demo_ctx *d, int k) {
    agent_proc *a = &d->agents[k];
    char cfg[400], sfx[16] = "";
    if (k > 0) snprintf(sfx, sizeof(sfx), "-%d", k + 1);
    snprintf(cfg, sizeof(cfg), "%s/sluiced%s.yaml", d->dir, sfx);
    snprintf(a->sock, sizeof(a->sock), "%s/agent%s.sock", d->dir, sfx);
    long long per = d->o.requests / d->o.processes + 1;
    long long max_clients = d->o.processes * (per < DEMO_MAX_THREADS ? per : DEMO_MAX_THREADS) + 64;
    if (max_clients < 1024) max_clients = 1024;
    FILE *f = fopen(cfg, "w");
    if (!f) {
        fprintf(stderr, "sluice demo: cannot write %s: %s\n", cfg, strerror(errno));
        return -1;
    }
    fprintf(f,
            "# Generated by sluice demo.\n"
            "redis:\n"
            "  url: \"%s\"\n",
            d->redis_url);
    if (d->o.redis_password_env) fprintf(f, "  password_env: \"%s\"\n", d->o.redis_password_env);
    fprintf(f,
            "agent:\n"
            "  id: \"sluice-demo-%ld-%d\"\n"
            "  socket: \"%s\"\n"
            "  socket_mode: \"0600\"\n"
            "  metrics: \"\"\n"
            "  max_clients: %lld\n"
            "  log_level: warn\n",
            (long)getpid(), k + 1, a->sock, max_clients);
    if (d->uses_proxy) {
        if ((a->http_port = free_loopback_port()) <= 0) {
            fprintf(stderr, "sluice demo: no free loopback port for sluiced's HTTP proxy\n");
            fclose(f);
            return -1;
        }
        fprintf(f, "  http:\n    listen: [\"127.0.0.1:%d\"]\n", a->http_port);
    }
    fprintf(f, "deployments:\n");
    for (int i = 0; i < d->nrun; i++) {
        if (d->run[i]->wait != DEMO_WAIT_SLUICE && !d->run[i]->via_proxy) continue;
        fprintf(f,
                "  %s:\n"
                "    rpm: %lld\n"
                "    max_wait_ms: %lld\n"
                "    jitter_ms: %lld\n",
                d->deployments[i], d->o.rpm, d->max_wait_ms, d->o.jitter_ms);
        if (d->o.tpm > 0)
            fprintf(f, "    tpm: %lld\n    burst: { requests: %lld, tokens: %lld }\n", d->o.tpm, d->o.burst,
                    d->o.token_burst);
        else fprintf(f, "    burst: { requests: %lld }\n", d->o.burst);
        /* The proxy forwards to the deployment's endpoint: the mock. */
        if (d->run[i]->via_proxy) fprintf(f, "    endpoint: \"http://127.0.0.1:%d\"\n", d->mock_port);
    }
    if (fclose(f) != 0) return -1;
    char *argv[] = {d->sluiced_bin, "--config", cfg, NULL};
    char logname[32];
    snprintf(logname, sizeof(logname), "sluiced%s.log", sfx);
    int log = open_log(d, logname);
    a->pid = demo_proc_spawn(argv, -1, log, log);
    if (log >= 0) close(log);
    if (a->pid < 0) {
        a->pid = 0;
        fprintf(stderr, "sluice demo: cannot start sluiced: %s\n", strerror(errno));
        return -1;
    }
    if (wait_ready(a->pid, "sluiced", test_ping, a->sock) != 0) {
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", d->dir, logname);
        echo_file(path, "sluiced");
        return -1;
    }
    return 0;
}

/* With --redis-url, removes the keys of the demo's deployments (best effort:
 * unix:///path and redis://[user@]host[:port][/db] are understood). */
static void cleanup_redis_keys(demo_ctx *d) {
    if (!d->o.redis_url || !d->uses_sluice || d->agents[0].pid == 0) return;
    const char *u = d->o.redis_url;
    redisContext *c = NULL;
    struct timeval tv = {2, 0};
    int db = 0;
    char user[128] = "", host[256] = "";
    if (strncmp(u, "unix://", 7) == 0) {
        c = redisConnectUnixWithTimeout(u + 7, tv);
    } else if (strncmp(u, "redis://", 8) == 0) {
        const char *p = u + 8, *at = strchr(p, '@');
        int port = 6379;
        if (at) {
            snprintf(user, sizeof(user), "%.*s", (int)(at - p), p);
            p = at + 1;
        }
        const char *end = *p == '[' ? strchr(p, ']') : p + strcspn(p, ":/");
        if (!end) return;
        if (*p == '[') snprintf(host, sizeof(host), "%.*s", (int)(end - p - 1), p + 1), end++;
        else snprintf(host, sizeof(host), "%.*s", (int)(end - p), p);
        if (*end == ':') port = atoi(end + 1);
        const char *slash = strchr(end, '/');
        if (slash) db = atoi(slash + 1);
        c = redisConnectWithTimeout(host, port, tv);
    }
    if (!c || c->err) {
        if (c) redisFree(c);
        fprintf(stderr, "sluice demo: could not remove the demo's keys (sluice:{%s*}:*) from %s\n", d->dep_prefix, u);
        return;
    }
    redisSetTimeout(c, tv);
    const char *pw = d->o.redis_password_env ? getenv(d->o.redis_password_env) : NULL;
    redisReply *r = NULL;
    if (pw && *user) r = redisCommand(c, "AUTH %s %s", user, pw);
    else if (pw) r = redisCommand(c, "AUTH %s", pw);
    if (r) freeReplyObject(r);
    r = db ? redisCommand(c, "SELECT %d", db) : NULL;
    if (r) freeReplyObject(r);
    static const char *const what[] = {"limits",      "state", "grants", "leases", "refq:requests",
                                       "refq:tokens", "daily", "retry",  "agents"};
    for (int i = 0; i < d->nrun; i++) {
        if (d->run[i]->wait != DEMO_WAIT_SLUICE && !d->run[i]->via_proxy) continue;
        for (size_t k = 0; k < sizeof(what) / sizeof(what[0]); k++) {
            char key[200];
            snprintf(key, sizeof(key), "sluice:{%s}:%s", d->deployments[i], what[k]);
            r = redisCommand(c, "DEL %s", key);
            if (r) freeReplyObject(r);
        }
    }
    redisFree(c);
}

/* ---- the provider's ledger ---------------------------------------------------------- */

typedef struct membuf {
    char *p;
    size_t len, cap;
} membuf;

static size_t on_data(char *p, size_t sz, size_t n, void *ud) {
    membuf *b = ud;
    size_t len = sz * n;
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) return 0;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
    b->p[b->len] = '\0';
    return len;
}

/* GET /stats?reset=1: this run's ledger, zeroed for the next. */
static json_t *fetch_ledger(demo_ctx *d, char *err, size_t errlen) {
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/stats?reset=1", d->mock_port);
    CURL *c = curl_easy_init();
    membuf b = {0};
    json_t *doc = NULL;
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status != 200 || !b.p) {
        snprintf(err, errlen, "reading the mock's ledger: %s", rc != CURLE_OK ? curl_easy_strerror(rc) : "bad answer");
    } else {
        json_error_t je;
        doc = json_loadb(b.p, b.len, 0, &je);
        if (!doc) snprintf(err, errlen, "the mock's ledger is not JSON: %.80s", je.text);
    }
    curl_easy_cleanup(c);
    free(b.p);
    return doc;
}

/* ---- one strategy ------------------------------------------------------------------- */

static void workers_close(demo_ctx *d, int sig) {
    for (int i = 0; i < d->o.processes; i++) {
        worker_proc *w = &d->w[i];
        if (w->pid > 0) demo_proc_stop(w->pid, sig, STOP_TIMEOUT_MS);
        if (w->in >= 0) close(w->in);
        if (w->out >= 0) close(w->out);
        free(w->buf);
        memset(w, 0, sizeof(*w));
        w->in = w->out = -1;
    }
}

static int spawn_workers(demo_ctx *d, int idx, demo_row *row) {
    const demo_strategy *st = d->run[idx];
    char rpm[32], attempts[32], scale[32], maxwait[32], tpm[32], chars[32], maxtok[32];
    snprintf(rpm, sizeof(rpm), "%lld", d->o.rpm);
    snprintf(tpm, sizeof(tpm), "%lld", d->o.tpm);
    snprintf(chars, sizeof(chars), "%d", d->scen->prompt_chars);
    snprintf(maxtok, sizeof(maxtok), "%d", d->scen->max_tokens);
    snprintf(attempts, sizeof(attempts), "%lld", d->o.attempts);
    snprintf(scale, sizeof(scale), "%.17g", d->o.time_scale);
    snprintf(maxwait, sizeof(maxwait), "%lld", d->max_wait_ms);
    long long first = 0;
    for (int i = 0; i < d->o.processes; i++) {
        long long n = d->o.requests / d->o.processes + (i < d->o.requests % d->o.processes);
        char id[64], nreq[32], first_s[32], seed[32], url[512];
        /* Worker process i's agent: its socket, and its HTTP proxy, which the
         * proxy row's workers call in the provider's own wire format, as they
         * would call the provider. */
        const agent_proc *a = d->nagents > 0 ? &d->agents[i % d->nagents] : NULL;
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/openai/deployments/%s/chat/completions?api-version=2024-06-01",
                 st->via_proxy && a ? a->http_port : d->mock_port, d->deployments[idx]);
        snprintf(id, sizeof(id), "%s-w%d", st->id, i + 1);
        snprintf(nreq, sizeof(nreq), "%lld", n);
        snprintf(first_s, sizeof(first_s), "%lld", first);
        snprintf(seed, sizeof(seed), "%lld", d->o.seed * 1000 + i);
        first += n;
        char *argv[] = {d->self,
                        "demo-worker",
                        "--strategy",
                        (char *)st->id,
                        "--worker-id",
                        id,
                        "--url",
                        url,
                        "--deployment",
                        d->deployments[idx],
                        "--socket",
                        a ? (char *)a->sock : "-",
                        "--requests",
                        nreq,
                        "--first",
                        first_s,
                        "--attempts",
                        attempts,
                        "--time-scale",
                        scale,
                        "--rpm",
                        rpm,
                        "--tpm",
                        tpm,
                        "--prompt-chars",
                        chars,
                        "--max-tokens",
                        maxtok,
                        "--max-wait-ms",
                        maxwait,
                        "--seed",
                        seed,
                        "--settle-headers",
                        (char *)d->o.settle_headers,
                        NULL};
        int pin[2], pout[2];
        if (pipe2(pin, O_CLOEXEC) != 0) goto fail;
        if (pipe2(pout, O_CLOEXEC) != 0) {
            close(pin[0]);
            close(pin[1]);
            goto fail;
        }
        pid_t pid = demo_proc_spawn(argv, pin[0], pout[1], 2);
        close(pin[0]);
        close(pout[1]);
        d->w[i].in = pin[1];
        d->w[i].out = pout[0];
        if (pid < 0) goto fail;
        d->w[i].pid = pid;
    }
    return 0;
fail:
    snprintf(row->error, sizeof(row->error), "cannot start the workers: %s", strerror(errno));
    return -1;
}

/* Handles one line from worker i. Returns -1 on a malformed result. */
static int worker_line(demo_ctx *d, int i, const char *line, demo_row *row, long long *done) {
    worker_proc *w = &d->w[i];
    if (strcmp(line, "ready") == 0) {
        w->ready = 1;
    } else if (strcmp(line, "done") == 0) {
        (*done)++;
    } else if (strncmp(line, "result ", 7) == 0) {
        json_error_t je;
        json_t *doc = json_loads(line + 7, 0, &je);
        int rc = doc ? demo_row_add_worker(row, doc) : -1;
        json_decref(doc);
        if (rc != 0) {
            snprintf(row->error, sizeof(row->error), "worker %d sent a malformed result", i + 1);
            return -1;
        }
        w->got_result = 1;
    }
    return 0;
}

/* Reads what is available from worker i. Returns -1 on a protocol error. */
static int worker_read(demo_ctx *d, int i, demo_row *row, long long *done) {
    worker_proc *w = &d->w[i];
    if (w->len + 65536 > w->cap) {
        size_t cap = (w->cap ? w->cap * 2 : 131072);
        char *p = realloc(w->buf, cap);
        if (!p) {
            snprintf(row->error, sizeof(row->error), "out of memory");
            return -1;
        }
        w->buf = p;
        w->cap = cap;
    }
    ssize_t k = read(w->out, w->buf + w->len, w->cap - w->len - 1);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (k <= 0) {
        w->eof = 1;
        return 0;
    }
    w->len += (size_t)k;
    char *start = w->buf, *nl;
    while ((nl = memchr(start, '\n', w->len - (size_t)(start - w->buf)))) {
        *nl = '\0';
        if (worker_line(d, i, start, row, done) != 0) return -1;
        start = nl + 1;
    }
    w->len -= (size_t)(start - w->buf);
    memmove(w->buf, start, w->len);
    return 0;
}

/* Polls every worker's stdout once (up to timeout_ms). */
static int workers_poll(demo_ctx *d, int timeout_ms, demo_row *row, long long *done) {
    struct pollfd p[MAX_PROCESSES + 1];
    int map[MAX_PROCESSES + 1], n = 0;
    for (int i = 0; i < d->o.processes; i++) {
        if (d->w[i].eof) continue;
        p[n] = (struct pollfd){d->w[i].out, POLLIN, 0};
        map[n++] = i;
    }
    p[n] = (struct pollfd){demo_proc_signal_fd(), POLLIN, 0};
    int r = poll(p, (nfds_t)n + 1, timeout_ms);
    if (r <= 0) return 0;
    for (int k = 0; k < n; k++)
        if (p[k].revents && worker_read(d, map[k], row, done) != 0) return -1;
    return 0;
}

static void show_progress(const demo_ctx *d, int idx, long long done, double t0_ms) {
    if (!d->progress) return;
    fprintf(stderr, "\r\033[K  [%d/%d] %-24s %lld/%lld requests done  %.1f s", idx + 1, d->nrun, d->run[idx]->name,
            done, d->o.requests, t0_ms > 0 ? (demo_proc_now_ms() - t0_ms) / 1000 : 0.0);
    fflush(stderr);
}

/* Runs strategy idx. Returns 0 with row filled (row->ok says whether it
 * worked), or -1 when interrupted. */
static int run_strategy(demo_ctx *d, int idx, demo_row *row) {
    const demo_strategy *st = d->run[idx];
    row->st = st;
    row->deployment = d->deployments[idx];
    long long done = 0;
    for (int i = 0; i < d->o.processes; i++) d->w[i].in = d->w[i].out = -1;
    show_progress(d, idx, 0, 0);
    if (st->via_proxy) {
        int gov = proxy_governs(d);
        if (gov == 0) {
            snprintf(row->error, sizeof(row->error),
                     "sluiced's HTTP proxy does not govern yet (INFO http_governing:0): it answers 501 and sends "
                     "nothing to the provider (issue 16, part 2), so this row cannot run");
            goto out;
        }
        if (gov < 0) {
            snprintf(row->error, sizeof(row->error), "cannot read sluiced's INFO (INFO http) on its socket");
            goto out;
        }
    }
    if (spawn_workers(d, idx, row) != 0) goto out;

    /* Everyone ready, then one "go" for the whole fleet. */
    double until = demo_proc_now_ms() + READY_TIMEOUT_MS;
    for (;;) {
        int ready = 0, dead = -1;
        for (int i = 0; i < d->o.processes; i++) {
            ready += d->w[i].ready;
            if (d->w[i].eof && !d->w[i].ready) dead = i;
        }
        if (ready == d->o.processes) break;
        if (demo_proc_interrupted()) goto out;
        if (dead >= 0) {
            snprintf(row->error, sizeof(row->error), "worker %d exited before it was ready (see above)", dead + 1);
            goto out;
        }
        if (demo_proc_now_ms() > until) {
            snprintf(row->error, sizeof(row->error), "workers not ready within %d s", READY_TIMEOUT_MS / 1000);
            goto out;
        }
        if (workers_poll(d, 100, row, &done) != 0) goto out;
    }
    long long t0 = demo_proc_now_ns();
    double t0_ms = (double)t0 / 1e6, shown = 0;
    char go[64];
    int glen = snprintf(go, sizeof(go), "go %lld\n", t0);
    for (int i = 0; i < d->o.processes; i++)
        if (write(d->w[i].in, go, (size_t)glen) != glen) {
            snprintf(row->error, sizeof(row->error), "worker %d went away before the start", i + 1);
            goto out;
        }

    for (;;) {
        int open = 0;
        for (int i = 0; i < d->o.processes; i++) open += !d->w[i].eof;
        if (open == 0) break;
        if (demo_proc_interrupted()) goto out;
        if (workers_poll(d, PROGRESS_EVERY_MS, row, &done) != 0) goto out;
        if (demo_proc_now_ms() - shown >= PROGRESS_EVERY_MS) {
            show_progress(d, idx, done, t0_ms);
            shown = demo_proc_now_ms();
        }
    }
    for (int i = 0; i < d->o.processes; i++) {
        int status = demo_proc_stop(d->w[i].pid, SIGTERM, STOP_TIMEOUT_MS);
        d->w[i].pid = 0;
        if (!d->w[i].got_result || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            snprintf(row->error, sizeof(row->error), "worker %d failed (status %d, see above)", i + 1,
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            goto out;
        }
    }
    json_t *ledger = fetch_ledger(d, row->error, sizeof(row->error));
    if (ledger) {
        if (demo_row_add_ledger(row, ledger) == 0) {
            demo_row_finish(row, &d->setup);
            row->ok = 1;
        } else {
            snprintf(row->error, sizeof(row->error), "the mock's ledger has no deployments");
        }
        json_decref(ledger);
    }
out:
    progress_clear(d);
    workers_close(d, SIGKILL);
    return demo_proc_interrupted() ? -1 : 0;
}

/* ---- main ------------------------------------------------------------------------------- */

static void stop_services(demo_ctx *d) {
    for (int k = 0; k < d->nagents; k++)
        if (d->agents[k].pid > 0) demo_proc_stop(d->agents[k].pid, SIGTERM, STOP_TIMEOUT_MS);
    cleanup_redis_keys(d);
    if (d->mock_pid > 0) demo_proc_stop(d->mock_pid, SIGTERM, STOP_TIMEOUT_MS);
    if (d->redis_pid > 0) demo_proc_stop(d->redis_pid, SIGTERM, STOP_TIMEOUT_MS);
    memset(d->agents, 0, sizeof(d->agents));
    d->mock_pid = d->redis_pid = 0;
}

/* Lets every child inherit a descriptor limit that fits one connection per
 * request in flight. */
static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int start_services(demo_ctx *d) {
    if (d->uses_sluice && find_sluiced(d) != 0) return -1;
    if (d->uses_sluice) {
        if (d->o.redis_url) snprintf(d->redis_url, sizeof(d->redis_url), "%s", d->o.redis_url);
        else if (start_redis(d) != 0) return -1;
    }
    if (start_mock(d) != 0) return -1;
    for (int k = 0; d->uses_sluice && k < d->nagents; k++)
        if (start_sluiced(d, k) != 0) return -1;
    return 0;
}

/* Runs scenario sc: its services, its rows and its table, or its JSON
 * document into *doc. Returns 0, 1 when a service or a row failed, or
 * 128 + the signal when interrupted. */
static int run_scenario(demo_ctx *d, const demo_scenario *sc, int several, json_t **doc) {
    setup_options(d, sc); /* checked before the first scenario ran */
    for (int i = 0; i < d->nrun; i++)
        snprintf(d->deployments[i], sizeof(d->deployments[i]), "%.40s%.8s%.16s", d->dep_prefix, sc->dep_tag,
                 d->run[i]->id);
    /* Each scenario's files in its own folder when there are several. */
    if (several) {
        snprintf(d->dir, sizeof(d->dir), "%s/%s", d->root, sc->name);
        if (mkdir(d->dir, 0700) != 0) {
            fprintf(stderr, "sluice demo: cannot create %s: %s\n", d->dir, strerror(errno));
            return 1;
        }
    } else {
        snprintf(d->dir, sizeof(d->dir), "%s", d->root);
    }

    int rc = 0, nrows = 0;
    demo_row rows[DEMO_NSTRATEGIES];
    memset(rows, 0, sizeof(rows));
    if (d->progress)
        fprintf(stderr, "  starting %s...", d->uses_sluice ? "redis-server, the mock and sluiced" : "the mock");
    if (start_services(d) != 0) {
        rc = demo_proc_interrupted() ? 128 + demo_proc_interrupted() : 1;
        goto out;
    }
    progress_clear(d);
    if (!d->o.json) {
        demo_report_header(stdout, &d->setup);
        demo_report_columns(stdout);
        fflush(stdout);
    }
    for (int i = 0; i < d->nrun; i++) {
        if (run_strategy(d, i, &rows[i]) != 0) break;
        nrows++;
        if (!rows[i].ok) rc = 1;
        if (!d->o.json) {
            demo_report_row(stdout, &rows[i]);
            fflush(stdout);
        }
    }
    if (demo_proc_interrupted()) {
        rc = 128 + demo_proc_interrupted();
    } else if (d->o.json) {
        *doc = demo_report_json(&d->setup, rows, nrows);
        if (!*doc) {
            fprintf(stderr, "sluice demo: out of memory building the JSON\n");
            rc = 1;
        }
    } else {
        demo_report_footer(stdout, &d->setup);
    }
out:
    progress_clear(d);
    fflush(stdout);
    workers_close(d, SIGKILL);
    stop_services(d);
    for (int i = 0; i < DEMO_NSTRATEGIES; i++) demo_row_free(&rows[i]);
    return rc;
}

int cmd_demo(int argc, char **argv) {
    static demo_ctx ctx; /* large (paths); one per process */
    demo_ctx *d = &ctx;
    memset(d, 0, sizeof(*d));
    d->user = (demo_opts){.processes = 3,
                          .tpm = -1,
                          .attempts = 10,
                          .seed = 1,
                          .jitter_ms = 25,
                          .service = {-1, -1},
                          .settle_headers = "all"};
    for (int i = 0; i < MAX_PROCESSES; i++) d->w[i].in = d->w[i].out = -1;
    if (cli_parse("demo", demo_flags, DEMO_NFLAGS, &d->user, argc, argv) != 0) return 2;
    if (d->user.help) {
        usage(stdout);
        return 0;
    }
    /* The scenarios to run, each checked before anything starts. */
    const demo_scenario *scens[DEMO_NSCENARIOS];
    int nscen = 0;
    const char *sname = d->user.scenario ? d->user.scenario : "requests";
    if (strcasecmp(sname, "all") == 0) {
        for (int i = 0; i < DEMO_NSCENARIOS; i++) scens[nscen++] = &demo_scenarios[i];
    } else if ((scens[0] = demo_scenario_find(sname))) {
        nscen = 1;
    } else {
        fprintf(stderr, "sluice demo: --scenario: expected requests, tokens or all, got '%s'\n", sname);
        return 2;
    }
    for (int i = 0; i < nscen; i++)
        if (setup_options(d, scens[i]) != 0) return 2;
    if (demo_proc_self_exe(d->self, sizeof(d->self)) != 0) {
        fprintf(stderr, "sluice demo: cannot find my own executable (/proc/self/exe)\n");
        return 1;
    }
    if (demo_proc_signals_install() != 0) {
        fprintf(stderr, "sluice demo: cannot install signal handlers: %s\n", strerror(errno));
        return 1;
    }
    raise_nofile();
    d->progress = isatty(2);
    /* Fresh deployments per run: plain names in a private Redis, a run id in a shared one. */
    if (d->user.redis_url)
        snprintf(d->dep_prefix, sizeof(d->dep_prefix), "demo-%lx-",
                 (unsigned long)getpid() ^ (unsigned long)time(NULL));
    else snprintf(d->dep_prefix, sizeof(d->dep_prefix), "demo-");
    snprintf(d->root, sizeof(d->root), "%.200s/sluice-demo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (strlen(d->root) > 200 || !mkdtemp(d->root)) {
        fprintf(stderr, "sluice demo: cannot create a temp dir %s: %s\n", d->root, strerror(errno));
        return 1;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "sluice demo: curl_global_init failed\n");
        demo_proc_rmtree(d->root);
        return 1;
    }

    int rc = 0;
    json_t *docs[DEMO_NSCENARIOS] = {NULL};
    for (int i = 0; i < nscen; i++) {
        if (i > 0 && !d->user.json) fputc('\n', stdout);
        int r = run_scenario(d, scens[i], nscen > 1, &docs[i]);
        if (r > rc) rc = r;
        if (demo_proc_interrupted()) break;
    }
    if (demo_proc_interrupted()) {
        rc = 128 + demo_proc_interrupted();
        fprintf(stderr, "sluice demo: interrupted; stopping everything it started\n");
    } else if (d->user.json) {
        /* One scenario: its document; several: {"scenarios": [...]}. */
        json_t *doc = docs[0];
        if (nscen > 1) {
            json_t *arr = json_array();
            for (int i = 0; arr && i < nscen; i++)
                if (docs[i]) json_array_append(arr, docs[i]);
            doc = arr ? json_pack("{s:o}", "scenarios", arr) : NULL;
        } else {
            json_incref(doc);
        }
        if (doc) {
            json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
            fputc('\n', stdout);
            json_decref(doc);
        } else if (rc == 0) {
            fprintf(stderr, "sluice demo: out of memory building the JSON\n");
            rc = 1;
        }
    }
    fflush(stdout);
    for (int i = 0; i < nscen; i++) json_decref(docs[i]);
    curl_global_cleanup();
    if (d->user.keep) fprintf(stderr, "sluice demo: kept %s (configs and logs)\n", d->root);
    else demo_proc_rmtree(d->root);
    return rc;
}
