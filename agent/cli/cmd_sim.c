/* cmd_sim: `sluice sim`, the fleet simulator as a command (issue 22, item
 * 5). A sluiced configuration, a provider world, a traffic shape (demand
 * as a multiple of each deployment's quota split over lanes and tenants,
 * or a JSONL trace of past requests), a number of agents and a seed in;
 * per deployment the table of what the fleet would do out, in virtual
 * seconds (sim_report.h).
 *
 * The machinery is the simulator of tests/sim: the real engines (lib/core
 * built against uvsim, libuv on a virtual clock) and the real Lua scripts
 * with a simulated clock, on one private redis-server (redis_fixture)
 * through simredis, the callers of simfleet, and a provider world written
 * from the provider's documentation (world.h). Every random choice comes
 * from the seed, so the same seed prints the same bytes. Because uvsim
 * defines libuv's functions, this runs in its own executable, sluice-sim;
 * `sluice sim` executes it (sim_exec.c).
 *
 * The configuration is the production file, checked by the production
 * parser (errors name the file, the line and the key). Its redis section
 * is blanked out (line numbers stay) and replaced by the simulator's own
 * socket, so a password file that exists only in production is never
 * read. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>

#include "cli_flags.h"
#include "cmd.h"
#include "config.h"
#include "redis_fixture.h"
#include "sim_report.h"
#include "sim_traffic.h"
#include "simfleet.h"
#include "world.h"
#include "world_send.h"

typedef struct sim_opts {
    const char *config, *deployment, *trace, *provider;
    long long seed, agents, input, output, attempts;
    double seconds, demand;
    int json, help;
    const char *lane_, *tenant_; /* consumed by sim_shares_collect(); the rows exist for --help */
} sim_opts;

#define SOPT(f) offsetof(sim_opts, f)
static const cli_flag sim_flags[] = {
    {"--config", "-c", "FILE", CLI_STR, SOPT(config), 0, 0,
     "the sluiced configuration (default $SLUICE_CONFIG, else /etc/sluice/sluiced.yaml)"},
    {"--seed", NULL, "N", CLI_INT, SOPT(seed), 0, 1e15, "the seed of every random choice (default 1)"},
    {"--agents", "-a", "N", CLI_INT, SOPT(agents), 1, 64, "sluiced agents sharing the quota (default 3)"},
    {"--seconds", NULL, "S", CLI_DOUBLE, SOPT(seconds), 0.1, 86400, "virtual seconds of demand to offer (default 60)"},
    {"--deployment", "-d", "NAME", CLI_STR, SOPT(deployment), 0, 0, "simulate only this deployment (default: each)"},
    {"--demand", NULL, "X", CLI_DOUBLE, SOPT(demand), 0.01, 100,
     "demand as a multiple of the deployment's quota (default 1.5)"},
    {"--lane", NULL, "NAME=SHARE", CLI_STR, SOPT(lane_), 0, 0,
     "share of the demand in a lane; repeat for more (default: all in the default lane)"},
    {"--tenant", NULL, "NAME=SHARE", CLI_STR, SOPT(tenant_), 0, 0,
     "share of the demand of a tenant; repeat for more (default: all tenant default)"},
    {"--input", NULL, "N", CLI_INT, SOPT(input), 1, 1e7, "input tokens of a request (default 500)"},
    {"--output", NULL, "N", CLI_INT, SOPT(output), 1, 1e7, "max output tokens of a request (default 500)"},
    {"--attempts", NULL, "N", CLI_INT, SOPT(attempts), 1, 100,
     "tries per request (a shed after its retry-after hint, a 429 at once; default 5)"},
    {"--trace", NULL, "FILE", CLI_STR, SOPT(trace), 0, 0,
     "JSONL of past requests instead of --demand (t_ms, deployment, input_tokens, output_tokens, lane, tenant)"},
    {"--provider", NULL, "NAME", CLI_STR, SOPT(provider), 0, 0,
     "azure, openai, anthropic, bedrock or gemini (default: the deployment's style)"},
    {"--json", NULL, NULL, CLI_BOOL, SOPT(json), 0, 0, "print JSON instead of the tables"},
    {"--help", "-h", NULL, CLI_BOOL, SOPT(help), 0, 0, "show this help"},
};
#define SIM_NFLAGS (sizeof(sim_flags) / sizeof(sim_flags[0]))

/* The provider world behind simfleet's send(); the response is kept until
 * the next send (simfleet reads its headers before send() returns). */
typedef struct world_prov {
    sim_world *w;
    sim_response last;
} world_prov;

static void usage(FILE *f) {
    fprintf(f, "usage: sluice sim --config FILE [--seed N] [--agents N] [--seconds S] [--demand X]\n"
               "                  [--lane NAME=SHARE]... [--tenant NAME=SHARE]... [--trace FILE.jsonl]\n"
               "                  [--deployment NAME] [--provider NAME] [--json]\n\n"
               "Simulates a fleet of sluiced agents on virtual time: the real engines and Lua scripts\n"
               "on a private redis-server, against a provider world written from the provider's\n"
               "documentation. Per deployment it prints what the fleet would do: completed requests,\n"
               "429s, sheds, makespan against the floor, utilisation of the binding limit, the largest\n"
               "10 s window and the waits per lane and tenant. The same seed prints the same table.\n"
               "By default each deployment gets demand at 1.5 x its quota for 60 virtual seconds.\n\n");
    cli_print_flags(f, sim_flags, SIM_NFLAGS);
}

/* ---- the configuration --------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 4096) {
            char *nb = realloc(buf, cap + 65536);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
            cap += 65536;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Blanks the top-level redis: block (its key line and every following
 * line that is indented, empty or a comment) with spaces, so the lines of
 * the rest keep their numbers. */
static void blank_redis(char *text) {
    int in = 0;
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (strncmp(line, "redis:", 6) == 0) in = 1;
        else if (in && len && line[0] != ' ' && line[0] != '\t' && line[0] != '#' && line[0] != '\r') in = 0;
        if (in) memset(line, ' ', len);
        line += len + (nl ? 1 : 0);
    }
}

/* Loads path with the production parser, its redis section replaced.
 * *yaml: the text simfleet gives each agent (its own redis: prepended). */
static int load_config(const char *path, char **yaml, config **cfg) {
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) {
        fprintf(stderr, "sluice sim: %s: %s\n", path, strerror(errno));
        return -1;
    }
    blank_redis(text);
    static const char tail[] = "\nredis:\n  url: unix:///nonexistent/sluice-sim.sock\n";
    char *full = malloc(len + sizeof(tail));
    if (!full) {
        free(text);
        fprintf(stderr, "sluice sim: out of memory\n");
        return -1;
    }
    memcpy(full, text, len);
    memcpy(full + len, tail, sizeof(tail));
    char err[1024];
    int rc = config_load_string_flags(path, full, strlen(full), CONFIG_LOAD_NO_PROXY_SECRETS, cfg, err, sizeof(err));
    free(full);
    if (rc != 0) {
        fprintf(stderr, "sluice sim: %s\n", err);
        free(text);
        return -1;
    }
    *yaml = text;
    return 0;
}

/* ---- traffic --------------------------------------------------------------------------------- */

/* ---- one deployment's run ------------------------------------------------------------------ */

static int provider_of(const struct config_deployment *d, const char *flag, sim_provider *p) {
    if (flag) {
        for (int i = 0; i < SIM_PROVIDERS; i++)
            if (strcmp(flag, sim_provider_name((sim_provider)i)) == 0) {
                *p = (sim_provider)i;
                return 0;
            }
        fprintf(stderr, "sluice sim: --provider: expected azure, openai, anthropic, bedrock or gemini, got '%s'\n",
                flag);
        return -1;
    }
    switch (d->style) {
    case CONFIG_STYLE_AZURE: *p = SIM_AZURE; return 0;
    case CONFIG_STYLE_OPENAI: *p = SIM_OPENAI; return 0;
    case CONFIG_STYLE_ANTHROPIC: *p = SIM_ANTHROPIC; return 0;
    case CONFIG_STYLE_BEDROCK: *p = SIM_BEDROCK; return 0;
    case CONFIG_STYLE_GEMINI: *p = SIM_GEMINI; return 0;
    default:
        fprintf(stderr, "sluice sim: deployment '%s' has style custom: say which provider it is with --provider\n",
                d->name);
        return -1;
    }
}

static int world_send(void *ud, double t_ms, const sim_call *c, sim_outcome *out) {
    world_prov *p = ud;
    /* The prompt as the provider sees it: 4 English characters a token of
     * the estimate (the world counts it its own way). */
    sim_request rq = {.t_ms = t_ms,
                      .chars = c->input * 4,
                      .lang = SIM_LANG_EN,
                      .max_tokens = c->output,
                      .cached = 0,
                      .tag = (uint64_t)c->caller};
    sim_world_answer(p->w, &rq, &p->last, out);
    return 0;
}

/* A configured dimension and the world's dimension that counts it. */
typedef struct sim_dimmap {
    int world_dim;
    const char *name;
    double per_min, burst;
} sim_dimmap;

static size_t dims_of(const struct config_deployment *d, sim_provider p, sim_dimmap *m) {
    size_t n = 0;
    m[n++] = (sim_dimmap){SIM_DIM_REQUESTS, "requests", (double)d->rpm, (double)d->burst.requests};
    if (d->tpm > 0)
        m[n++] = (sim_dimmap){p == SIM_GEMINI ? SIM_DIM_INPUT : SIM_DIM_TOKENS, "tokens", (double)d->tpm,
                              (double)d->burst.tokens};
    if (d->itpm > 0)
        m[n++] = (sim_dimmap){SIM_DIM_INPUT, "input tokens", (double)d->itpm, (double)d->burst.input_tokens};
    if (d->otpm > 0)
        m[n++] = (sim_dimmap){SIM_DIM_OUTPUT, "output tokens", (double)d->otpm, (double)d->burst.output_tokens};
    return n;
}

static const char *lane_name(const struct config_deployment *d, const char *lane) {
    if (lane[0]) return lane;
    const struct config_lane *l = config_lane(d, NULL);
    return l ? l->name : "default";
}

typedef struct sim_ctx {
    sim_opts o;
    config *cfg;
    char *yaml;
    redis_fixture redis;
    sim_shares lanes, tenants;
    sim_reqs trace;
} sim_ctx;

/* Per request, from the fleet's records. */
typedef struct req_state {
    int attempts, done;
    double sent_ms;
} req_state;

static int judge(const struct config_deployment *d, sim_provider prov, const sim_reqs *rq, const simfleet *f,
                 sim_world *w, int finished, int max_attempts, sim_result *res) {
    size_t nrec;
    const sim_record *rec = simfleet_records(f, &nrec);
    req_state *st = calloc(rq->n ? rq->n : 1, sizeof(*st));
    if (!st) return -1;
    for (size_t i = 0; i < nrec; i++) {
        const sim_record *r = &rec[i];
        if (r->caller < 0 || (size_t)r->caller >= rq->n) continue;
        req_state *s = &st[r->caller];
        s->attempts = r->attempt;
        if (r->status == 0) res->shed++;
        if (r->status > 0) res->sends++;
        if (r->status == 429) res->throttled++;
        if (r->status == 200) {
            s->done = 1;
            s->sent_ms = r->send_ms;
        }
    }
    double last_sent = 0;
    int rc = 0;
    for (size_t i = 0; i < rq->n && rc == 0; i++) {
        if (!st[i].done) {
            if (finished || st[i].attempts >= max_attempts) res->given_up++;
            else res->unfinished++;
            continue;
        }
        res->completed++;
        if (st[i].sent_ms > last_sent) last_sent = st[i].sent_ms;
        double wait = st[i].sent_ms - rq->v[i].t_ms;
        const char *tenant = rq->v[i].tenant[0] ? rq->v[i].tenant : "default";
        if (sim_wait_add(&res->lanes, &res->nlanes, lane_name(d, rq->v[i].lane), wait) != 0 ||
            sim_wait_add(&res->tenants, &res->ntenants, tenant, wait) != 0)
            rc = -1;
    }
    free(st);
    if (rc != 0) return -1;
    /* What the provider charged the fleet's admitted requests, per
     * dimension, by its own count (admission and later charges). */
    double amount[SIM_DIMS] = {0};
    for (size_t i = 0; i < sim_world_ledger_len(w); i++) {
        const sim_entry *e = sim_world_ledger_at(w, i);
        if (e->who != SIM_WHO_FLEET || e->status != 200) continue;
        for (int k = 0; k < SIM_DIMS; k++)
            amount[k] += (double)e->charge[k] + (e->correction[k] > 0 ? (double)e->correction[k] : 0);
    }
    sim_dimmap m[4];
    size_t nm = dims_of(d, prov, m);
    res->first_ms = rq->n ? rq->v[0].t_ms : 0;
    double span = rq->n ? rq->v[rq->n - 1].t_ms - rq->v[0].t_ms : 0;
    res->makespan_ms = res->completed ? last_sent - res->first_ms : 0;
    size_t bind = 0;
    double best = -1;
    for (size_t k = 0; k < nm; k++) {
        double need = fmax(0, amount[m[k].world_dim] - m[k].burst) / (m[k].per_min / 60000.0);
        if (need > best) best = need, bind = k;
    }
    res->floor_ms = fmax(span, best);
    res->binding = m[bind].name;
    double rate = m[bind].per_min / 60000.0;
    double allowed = rate * res->makespan_ms + m[bind].burst;
    res->utilisation = allowed > 0 ? amount[m[bind].world_dim] / allowed : 0;
    res->max10_ratio = sim_world_max_window(w, m[bind].world_dim, 10000, NULL) / (m[bind].per_min / 6.0);
    return 0;
}

/* A deployment's traffic: its requests of the trace (none: *rq empty), or
 * the demand. Returns 0, or 2 (said why). */
static int traffic_of(const sim_ctx *x, const struct config_deployment *d, sim_reqs *rq) {
    if (!x->o.trace) {
        sim_demand dm = {(uint64_t)x->o.seed, x->o.demand, x->o.seconds, x->o.input, x->o.output};
        return sim_traffic_demand(d, &dm, &x->lanes, &x->tenants, rq) == 0 ? 0 : 2;
    }
    for (size_t i = 0; i < x->trace.n; i++) {
        const sim_req *t = &x->trace.v[i];
        if (t->deployment[0] && strcmp(t->deployment, d->name) != 0) continue;
        sim_req *q = sim_reqs_push(rq);
        if (!q) {
            fprintf(stderr, "sluice sim: out of memory\n");
            return 2;
        }
        *q = *t;
    }
    return 0;
}

/* The world of provider prov with d's configured limits (the world
 * counts by the provider's rules; its limits are the configured ones). */
static void world_cfg_of(const struct config_deployment *d, sim_provider prov, sim_world_cfg *wc) {
    sim_world_cfg_init(wc, prov);
    wc->rpm = (double)d->rpm;
    wc->rpd = (double)d->rpd;
    /* Gemini's TPM counts input only: its world keeps it as INPUT. */
    if (prov == SIM_GEMINI) wc->itpm = (double)(d->itpm ? d->itpm : d->tpm);
    else wc->tpm = (double)d->tpm, wc->itpm = (double)d->itpm;
    wc->otpm = (double)d->otpm;
    wc->epoch_ms = SIMFLEET_EPOCH_MS;
}

/* The provider's world takes d's limits (a world refuses a limit its
 * provider does not have: Anthropic has no combined tpm). Returns 0, or 2
 * after naming the limit. */
static int check_world(const struct config_deployment *d, sim_provider prov) {
    sim_world_cfg wc;
    world_cfg_of(d, prov, &wc);
    sim_world *w = sim_world_new(&wc, 1);
    if (w) {
        sim_world_free(w);
        return 0;
    }
    static const char *const names[] = {"rpm", "tpm", "itpm", "otpm", "rpd"};
    const char *bad = "its limits";
    for (int k = 0; k < 5; k++) {
        sim_world_cfg one;
        sim_world_cfg_init(&one, prov);
        double v[5] = {wc.rpm, wc.tpm, wc.itpm, wc.otpm, wc.rpd};
        if (v[k] <= 0) continue;
        double *f[5] = {&one.rpm, &one.tpm, &one.itpm, &one.otpm, &one.rpd};
        *f[k] = v[k];
        if (k) one.rpm = 1;
        sim_world *t = sim_world_new(&one, 1);
        if (!t) {
            bad = names[k];
            break;
        }
        sim_world_free(t);
    }
    fprintf(stderr, "sluice sim: deployment '%s' has %s, a limit the %s world does not have (pick --provider to fit)\n",
            d->name, bad, sim_provider_name(prov));
    return 2;
}

/* What can be said wrong about a deployment before anything runs: its
 * provider and its limits there, the lanes of --lane and of the trace.
 * Returns 0 or 2 (said why). */
static int check_deployment(const sim_ctx *x, const struct config_deployment *d) {
    sim_provider prov;
    if (provider_of(d, x->o.provider, &prov) != 0 || check_world(d, prov) != 0) return 2;
    for (size_t i = 0; i < x->lanes.n; i++)
        if (!config_lane(d, x->lanes.v[i].name)) {
            char names[512];
            config_lane_names(d, names, sizeof(names));
            fprintf(stderr, "sluice sim: --lane %s: deployment '%s' has no such lane (lanes: %s)\n", x->lanes.v[i].name,
                    d->name, names);
            return 2;
        }
    for (size_t i = 0; i < x->trace.n; i++) {
        const sim_req *t = &x->trace.v[i];
        if ((!t->deployment[0] || strcmp(t->deployment, d->name) == 0) && t->lane[0] && !config_lane(d, t->lane)) {
            fprintf(stderr, "sluice sim: %s: deployment '%s' has no lane '%s'\n", x->o.trace, d->name, t->lane);
            return 2;
        }
    }
    return 0;
}

static int run_deployment(sim_ctx *x, const struct config_deployment *d, const sim_reqs *traffic, sim_result *res) {
    sim_provider prov;
    if (provider_of(d, x->o.provider, &prov) != 0) return 2;
    const sim_reqs rq = *traffic;

    sim_world_cfg wc;
    world_cfg_of(d, prov, &wc);
    uint64_t seed = sim_traffic_seed((uint64_t)x->o.seed, d->name);
    world_prov wp = {sim_world_new(&wc, seed), {0}};
    if (!wp.w) {
        fprintf(stderr, "sluice sim: %s: the provider world could not be made\n", d->name);
        return 1;
    }
    simfleet_opts fo = {.seed = seed,
                        .agents = (int)x->o.agents,
                        .redis = &x->redis,
                        .yaml = x->yaml,
                        .send = world_send,
                        .send_ud = &wp};
    simfleet *f = NULL;
    int rc = 0;
    if (simfleet_new(&fo, &f) != 0) {
        fprintf(stderr, "sluice sim: %s: the simulated fleet did not start\n", d->name);
        rc = 1;
    }
    for (size_t i = 0; rc == 0 && i < rq.n; i++) {
        sim_caller_spec sp = {.agent = (int)(i % (size_t)x->o.agents),
                              .deployment = d->name,
                              .input = rq.v[i].input,
                              .output = rq.v[i].output,
                              .start_ms = rq.v[i].t_ms,
                              .calls = 1,
                              .max_wait_ms = -1,
                              .max_attempts = (int)x->o.attempts,
                              .lane = rq.v[i].lane[0] ? rq.v[i].lane : NULL,
                              .tenant = rq.v[i].tenant[0] ? rq.v[i].tenant : NULL};
        if (simfleet_add_callers(f, &sp, 1) != 0) rc = 1;
    }
    int finished = 0;
    if (rc == 0) {
        /* Long enough for the backlog of any sane demand, and bounded. */
        double bound = rq.v[rq.n - 1].t_ms + 3600000.0;
        finished = simfleet_run_done(f, bound);
        if (finished < 0) {
            fprintf(stderr, "sluice sim: %s: the simulation failed\n", d->name);
            rc = 1;
        }
    }
    if (rc == 0) {
        sim_world_advance(wp.w, simfleet_now_ms());
        snprintf(res->deployment, sizeof(res->deployment), "%s", d->name);
        res->provider = sim_provider_name(prov);
        res->rpm = d->rpm, res->tpm = d->tpm, res->itpm = d->itpm, res->otpm = d->otpm;
        res->agents = (int)x->o.agents;
        res->offered = rq.n;
        if (judge(d, prov, &rq, f, wp.w, finished, (int)x->o.attempts, res) != 0) {
            fprintf(stderr, "sluice sim: out of memory\n");
            rc = 1;
        }
    }
    simfleet_free(f);
    sim_world_free(wp.w);
    return rc;
}

/* ---- the command --------------------------------------------------------------------------- */

/* Ctrl-C or SIGTERM during a run: the private redis-server dies with us
 * (PR_SET_PDEATHSIG), its directory would stay. The handler removes it
 * with async-signal-safe calls only, so its paths are made beforehand;
 * the one piece of process-wide state, since a handler has nowhere else
 * to look. */
#define SIM_CLEAN_MAX (64 + 2)
static struct {
    pid_t redis;
    char path[SIM_CLEAN_MAX][320]; /* sockets first, the directory last */
    int n;
} sim_clean;

static void on_stop_signal(int sig) {
    if (sim_clean.redis > 0) kill(sim_clean.redis, SIGKILL);
    for (int i = 0; i + 1 < sim_clean.n; i++) unlink(sim_clean.path[i]);
    if (sim_clean.n > 0) rmdir(sim_clean.path[sim_clean.n - 1]);
    _exit(128 + sig);
}

static void clean_on_signals(const redis_fixture *fx, int agents) {
    sim_clean.n = 0;
    snprintf(sim_clean.path[sim_clean.n++], sizeof(sim_clean.path[0]), "%s", fx->sock);
    for (int i = 0; i < agents && sim_clean.n < SIM_CLEAN_MAX - 1; i++)
        snprintf(sim_clean.path[sim_clean.n++], sizeof(sim_clean.path[0]), "%s/agent%d.sock", fx->dir, i);
    snprintf(sim_clean.path[sim_clean.n++], sizeof(sim_clean.path[0]), "%s", fx->dir);
    sim_clean.redis = fx->pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void clean_off(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sim_clean.n = 0;
    sim_clean.redis = 0;
}

static void print_header(const sim_ctx *x) {
    printf("sluice sim: %s, seed %lld, %lld agent%s, ", x->o.config, x->o.seed, x->o.agents,
           x->o.agents == 1 ? "" : "s");
    if (x->o.trace) printf("trace %s of %zu requests", x->o.trace, x->trace.n);
    else
        printf("%.4g s of demand at %.4g x each quota, %lld + %lld tokens a request", x->o.seconds, x->o.demand,
               x->o.input, x->o.output);
    printf(" (virtual time)\n");
}

static int run_all(sim_ctx *x) {
    const struct config_deployment *only = NULL;
    if (x->o.deployment && !(only = config_deployment(x->cfg, x->o.deployment))) {
        fprintf(stderr, "sluice sim: --deployment: no deployment '%s' in %s\n", x->o.deployment, x->o.config);
        return 2;
    }
    for (size_t i = 0; i < x->cfg->ndeployments; i++)
        if ((!only || &x->cfg->deployments[i] == only) && check_deployment(x, &x->cfg->deployments[i]) != 0) return 2;
    if (redis_fixture_start(&x->redis, 0) != 0) {
        fprintf(stderr, "sluice sim: cannot start a private redis-server (install redis-server, or set "
                        "SLUICE_REDIS_SERVER to its path)\n");
        return 1;
    }
    /* The agents' sockets are simredis' (agent<i>.sock in the server's directory). */
    clean_on_signals(&x->redis, (int)x->o.agents);
    json_t *arr = x->o.json ? json_array() : NULL;
    if (!x->o.json) print_header(x);
    int rc = 0;
    for (size_t i = 0; i < x->cfg->ndeployments && rc == 0; i++) {
        const struct config_deployment *d = &x->cfg->deployments[i];
        if (only && d != only) continue;
        sim_result res;
        memset(&res, 0, sizeof(res));
        sim_reqs rq = {0};
        rc = traffic_of(x, d, &rq);
        if (rc == 0 && rq.n) rc = run_deployment(x, d, &rq, &res);
        sim_reqs_free(&rq);
        if (rc == 0 && res.offered) {
            if (arr) json_array_append_new(arr, sim_report_json(&res));
            else {
                putchar('\n');
                sim_report_text(stdout, &res);
            }
        }
        sim_result_clear(&res);
    }
    clean_off();
    redis_fixture_stop(&x->redis);
    if (rc == 0 && arr) {
        json_t *doc = json_pack("{s:s,s:I,s:I,s:s*,s:f,s:f,s:o}", "config", x->o.config, "seed", (json_int_t)x->o.seed,
                                "agents", (json_int_t)x->o.agents, "trace", x->o.trace, "seconds", x->o.seconds,
                                "demand", x->o.demand, "deployments", arr);
        arr = NULL;
        if (!doc) {
            fprintf(stderr, "sluice sim: out of memory building the JSON\n");
            rc = 1;
        } else {
            json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
            fputc('\n', stdout);
            json_decref(doc);
        }
    }
    json_decref(arr);
    fflush(stdout);
    return rc;
}

int cmd_sim(int argc, char **argv) {
    sim_ctx x;
    memset(&x, 0, sizeof(x));
    x.o = (sim_opts){.seed = 1, .agents = 3, .input = 500, .output = 500, .attempts = 5, .seconds = 60, .demand = 1.5};
    if (sim_shares_collect(&argc, argv, &x.lanes, &x.tenants) != 0) return 2;
    if (cli_parse("sim", sim_flags, SIM_NFLAGS, &x.o, argc, argv) != 0) return 2;
    if (x.o.help) {
        usage(stdout);
        return 0;
    }
    if (!x.o.config) x.o.config = cli_default_config();
    if (!x.o.config) {
        fprintf(stderr, "sluice sim: --config FILE (or SLUICE_CONFIG) is required (see sluice sim --help)\n");
        return 2;
    }
    if (load_config(x.o.config, &x.yaml, &x.cfg) != 0) return 2;
    int rc = 0;
    if (x.o.trace && sim_traffic_load_trace(x.o.trace, x.cfg, x.o.config, x.o.input, x.o.output, &x.trace) != 0) rc = 2;
    if (rc == 0) rc = run_all(&x);
    sim_reqs_free(&x.trace);
    free(x.yaml);
    config_free(x.cfg);
    return rc;
}
