/* bench_reserve: what a reserve decision costs Redis, per item, against a
 * floor: a minimal dual-GCRA script shipped here.
 *
 * Redis runs one script at a time, so a script's time is every other
 * client's wait. This benchmark measures that time as Redis sees it: each
 * segment (one script, one workload, one batch size) starts with CONFIG
 * RESETSTAT and ends with INFO commandstats, and the segment's figure is
 * cmdstat_evalsha's usec / calls / items per call. Only the benchmark's
 * client talks to its private redis-server, so nothing else is counted.
 *
 * Rows (every deployment's budget is plentiful: each item is granted at
 * once, so the figure is the cost of the decision itself):
 *   - minimal: MINIMAL_LUA below, the floor: requests and tokens GCRA per
 *     item, one grant record per item (one HSET for the call), the state
 *     read and written once. No validation, no leases, no refund bound,
 *     no health, no daily or concurrency checks: what any dual-bucket
 *     reserve that records its grants pays.
 *   - plain: reserve, requests + combined tokens (rpm, tpm), items "100".
 *   - split: reserve, requests + input + output tokens (rpm, itpm, otpm:
 *     the anthropic profile), items "60+40".
 *   - lanes/tenants: reserve quads on a deployment with two lanes and two
 *     tenants (the fair-share path), lane batch, tenants a and b in turn.
 *   - group of 3: reserve's group mode over three plain members, policy
 *     priority, the items' orders rotating (1,2,3 / 2,3,1 / 3,1,2) so each
 *     member serves a third of the items.
 * each with batches of 1, 10 and 100 items per call. With --old DIR the
 * same rows also run the scripts in DIR (common.lua, configure.lua,
 * reserve.lua, e.g. from `git show <rev>:lua/...`), loaded beside the
 * built ones under their own SHA, on deployments of their own: before
 * and after in one run. A round runs, per workload and batch size (in an
 * order that rotates from round to round), the minimal script's segment
 * and then the built and the old scripts' back to back; the ratios are
 * taken within such a group (the shared machine drifts less in a second
 * than over a round) and the tables give medians over rounds.
 * Not a test: nothing is asserted (each reply is checked to be all grants,
 * so a figure is never that of an error or a shed).
 *
 * Usage: bench_reserve [--rounds R (5)] [--seconds S per segment (0.3)]
 *                      [--old DIR] */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_opts.h"
#include "redis_fixture.h"
#include "script_call.h"

/* The floor: a dual-GCRA reserve writing one grant record per item.
 * KEYS as sluice's (limits, state, grants); ARGV n, then n (tokens,
 * max_wait_ms). Reply: per item {1, id, wait_ms, tokens} or {0, 'rpm',
 * retry_after_ms}. */
static const char MINIMAL_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000\n"
    "local l = redis.call('HMGET', KEYS[1], 'rpm', 'tpm', 'burst_requests', 'burst_tokens')\n"
    "local rr, rt = tonumber(l[1]) / 60000, tonumber(l[2]) / 60000\n"
    "local br, bt = tonumber(l[3]), tonumber(l[4])\n"
    "local s = redis.call('HMGET', KEYS[2], 'requests_tat', 'tokens_tat', 'next_grant')\n"
    "local tr, tt, id = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0\n"
    "local n = tonumber(ARGV[1])\n"
    "local out, recs = {}, {}\n"
    "for i = 1, n do\n"
    "  local c, w = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])\n"
    "  local slot = now\n"
    "  local e = tr - (br - 1) / rr\n"
    "  if e > slot then slot = e end\n"
    "  e = tt - (bt - c) / rt\n"
    "  if e > slot then slot = e end\n"
    "  if slot - now > w then\n"
    "    out[i] = {0, 'rpm', math.ceil(slot - now - w)}\n"
    "  else\n"
    "    if slot > tr then tr = slot end\n"
    "    tr = tr + 1 / rr\n"
    "    if slot > tt then tt = slot end\n"
    "    tt = tt + c / rt\n"
    "    id = id + 1\n"
    "    recs[#recs + 1] = id\n"
    "    recs[#recs + 1] = c .. ',' .. string.format('%.3f', slot)\n"
    "    out[i] = {1, id, math.ceil(slot - now - 1e-6), c}\n"
    "  end\n"
    "end\n"
    "if #recs > 0 then redis.call('HSET', KEYS[3], unpack(recs)) end\n"
    "redis.call('HSET', KEYS[2], 'requests_tat', string.format('%.3f', tr), 'tokens_tat',\n"
    "           string.format('%.3f', tt), 'next_grant', id)\n"
    "return out\n";

typedef struct opts {
    double rounds, seconds;
    const char *old, *rows;
    int help, timed;
} opts;

static const opt_row rows[] = {
    {"--rounds", OPT_NUM, offsetof(opts, rounds), 1, 50, "rounds (default 5)"},
    {"--seconds", OPT_NUM, offsetof(opts, seconds), 0.01, 60, "seconds per segment (default 0.3)"},
    {"--old", OPT_STR, offsetof(opts, old), 0, 0,
     "a directory with common.lua, configure.lua and reserve.lua to run beside the built scripts"},
    {"--rows", OPT_STR, offsetof(opts, rows), 0, 0,
     "comma-separated rows to run beside minimal: plain,split,lt,group (default all)"},
    {"--timed", OPT_FLAG, offsetof(opts, timed), 0, 0,
     "ask the built reserve for its own time (@timed, as the agent does) and print it against Redis' usec"},
    {"--help", OPT_FLAG, offsetof(opts, help), 0, 0, "this text"},
};

enum { V_NEW, V_OLD, NVER };
enum { W_MIN, W_PLAIN, W_SPLIT, W_LT, W_GROUP, NWORK };
static const char *const work_key[NWORK] = {"minimal", "plain", "split", "lt", "group"};
static const char *const work_name[NWORK] = {"minimal (floor)", "plain (requests + tokens)",
                                             "split (requests + input + output)", "lanes + tenants", "group of 3"};
static const int batches[] = {1, 10, 100};
#define NBATCH 3
#define MAXB 100
#define MAXROUNDS 50
#define KEYS_MAX (3 * SCRIPTS_NKEYS)

typedef struct version {
    int on;
    char reserve[41], configure[41]; /* SHAs */
} version;

static redisContext *c;
static version ver[NVER];
static char minimal_sha[41];
/* --timed: the built reserve's calls end with @timed; segment() sums the
 * times the script reports and leaves their share of Redis' usec here. */
static int timed_on;
static double last_self_share;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, redisReply *r) {
    fprintf(stderr, "bench_reserve: %s: %s\n", what, r && r->str ? r->str : "no reply");
    exit(1);
}

/* SCRIPT LOAD of a text; the SHA in sha. */
static void load(const char *src, size_t len, char sha[41]) {
    redisReply *r = redisCommand(c, "SCRIPT LOAD %b", src, len);
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) die("SCRIPT LOAD", r);
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
}

/* A file's text (malloc'd) appended to *buf. */
static void append_file(char **buf, size_t *len, const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_reserve: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        *buf = realloc(*buf, *len + n + 1);
        if (!*buf) exit(1);
        memcpy(*buf + *len, chunk, n);
        *len += n;
        (*buf)[*len] = 0;
    }
    fclose(f);
}

/* common.lua + name from dir, loaded; the SHA in sha. */
static void load_old(const char *dir, const char *name, char sha[41]) {
    char *buf = NULL;
    size_t len = 0;
    append_file(&buf, &len, dir, "common.lua");
    append_file(&buf, &len, dir, name);
    load(buf, len, sha);
    free(buf);
}

static redisReply *evalsha(const char *sha, int nkeys, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv) {
    const char *av[3 + KEYS_MAX + 5 + 5 * MAXB];
    char nk[12];
    snprintf(nk, sizeof(nk), "%d", nkeys);
    int n = 0;
    av[n++] = "EVALSHA";
    av[n++] = sha;
    av[n++] = nk;
    for (int i = 0; i < nkeys; i++) av[n++] = keys[i];
    for (int i = 0; i < argc; i++) av[n++] = argv[i];
    return redisCommandArgv(c, n, av, NULL);
}

/* The deployments of a version: <prefix>-<what>. */
static void dep_name(int v, const char *what, char *out, size_t len) {
    snprintf(out, len, "%s-%s", v == V_OLD ? "old" : "new", what);
}

static void configure(int v, const char *dep, const char *const *fv) {
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    if (scripts_keys(dep, keys) != 0) exit(1);
    int argc = 0;
    while (fv[argc]) argc++;
    redisReply *r = evalsha(ver[v].configure, SCRIPTS_NKEYS, keys, argc, (const char **)fv);
    if (!r || r->type != REDIS_REPLY_ARRAY) die("configure", r);
    freeReplyObject(r);
}

#define PLENTY "rpm", "100000000000", "burst_requests", "100000000", "lease_ms", "600000"
static const char *const cfg_plain[] = {PLENTY, "tpm", "100000000000000", "burst_tokens", "1000000000", NULL};
static const char *const cfg_split[] = {PLENTY,       "itpm", "100000000000000", "burst_input",
                                        "1000000000", "otpm", "100000000000000", "burst_output",
                                        "1000000000", NULL};
static const char *const cfg_lt[] = {
    PLENTY,       "tpm",    "100000000000000", "burst_tokens", "1000000000", "lane.interactive", "0,-1,0.2",
    "lane.batch", "1,-1,0", "tenant.a",        "3,0,0,0",      "tenant.b",   "1,0,0,0",          NULL};

/* Everything but the limits, so each segment starts from an empty ledger. */
static void reset_dep(const char *dep) {
    static const char *const what[] = {"state", "grants", "leases",     "refq:requests", "refq:tokens",
                                       "daily", "retry",  "refq:input", "refq:output"};
    const char *av[1 + 9];
    char k[9][SCRIPTS_KEY_MAX];
    av[0] = "DEL";
    for (int i = 0; i < 9; i++) {
        snprintf(k[i], sizeof(k[i]), "sluice:{%s}:%s", dep, what[i]);
        av[1 + i] = k[i];
    }
    freeReplyObject(redisCommandArgv(c, 10, av, NULL));
}

/* One segment's call: the script, its KEYS and ARGV. */
typedef struct call {
    const char *sha;
    int nkeys;
    char keys[KEYS_MAX][SCRIPTS_KEY_MAX];
    int argc;
    const char *argv[6 + 5 * MAXB];
    char deps[3][64];
    int ndeps;
    int items_at, item_kind_at; /* first item's index in the reply; 1 = grant */
} call;

static void build_call(call *k, int v, int w, int batch) {
    static const char *const orders[] = {"1,2,3", "2,3,1", "3,1,2"};
    static char nbuf[8];
    memset(k, 0, sizeof(*k));
    snprintf(nbuf, sizeof(nbuf), "%d", batch);
    k->ndeps = 1;
    k->items_at = 5;
    switch (w) {
    case W_MIN:
        k->sha = minimal_sha;
        snprintf(k->deps[0], sizeof(k->deps[0]), "minimal");
        k->items_at = 0;
        break;
    case W_PLAIN: dep_name(v, "plain", k->deps[0], sizeof(k->deps[0])); break;
    case W_SPLIT: dep_name(v, "split", k->deps[0], sizeof(k->deps[0])); break;
    case W_LT: dep_name(v, "lt", k->deps[0], sizeof(k->deps[0])); break;
    case W_GROUP:
        k->ndeps = 3;
        for (int j = 0; j < 3; j++) {
            char what[16];
            snprintf(what, sizeof(what), "m%d", j + 1);
            dep_name(v, what, k->deps[j], sizeof(k->deps[j]));
        }
        k->items_at = 1;
        break;
    }
    if (w != W_MIN) k->sha = ver[v].reserve;
    /* Each item's max wait as the agent sends it: with how long it waited
     * to the built scripts (wire.c), alone to older ones and the floor. */
    const char *wait = v == V_NEW && w != W_MIN ? "60000:1200" : "60000";
    for (int j = 0; j < k->ndeps; j++)
        if (scripts_keys(k->deps[j], k->keys + SCRIPTS_NKEYS * j) != 0) exit(1);
    k->nkeys = SCRIPTS_NKEYS * k->ndeps;
    if (w == W_GROUP) {
        static const char *const head[] = {"group", "3", "1000", "priority"};
        for (int i = 0; i < 4; i++) k->argv[k->argc++] = head[i];
        k->argv[k->argc++] = nbuf;
        for (int i = 0; i < batch; i++) {
            k->argv[k->argc++] = "100";
            k->argv[k->argc++] = wait;
            k->argv[k->argc++] = "";
            k->argv[k->argc++] = "";
            k->argv[k->argc++] = orders[i % 3];
        }
        if (timed_on && v == V_NEW) k->argv[k->argc++] = "@timed";
        return;
    }
    k->argv[k->argc++] = nbuf;
    for (int i = 0; i < batch; i++) {
        k->argv[k->argc++] = w == W_SPLIT ? "60+40" : "100";
        k->argv[k->argc++] = wait;
        if (w == W_LT) {
            k->argv[k->argc++] = "batch";
            k->argv[k->argc++] = i % 2 ? "a" : "b";
        }
    }
    if (timed_on && v == V_NEW && w != W_MIN) k->argv[k->argc++] = "@timed";
}

/* cmdstat_evalsha's calls and usec since the last CONFIG RESETSTAT. */
static void evalsha_stats(long long *calls, long long *usec) {
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) die("INFO commandstats", r);
    *calls = *usec = 0;
    const char *p = strstr(r->str, "cmdstat_evalsha:");
    if (p) sscanf(p, "cmdstat_evalsha:calls=%lld,usec=%lld", calls, usec);
    freeReplyObject(r);
}

/* Runs one segment; returns Redis µs per item, and client calls/s. */
static double segment(int v, int w, int bi, double secs, double *calls_s) {
    int batch = batches[bi];
    call *k = malloc(sizeof(*k));
    if (!k) exit(1);
    build_call(k, v, w, batch);
    for (int j = 0; j < k->ndeps; j++) reset_dep(k->deps[j]);
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    long n = 0;
    double t0 = now_s(), t, self = 0;
    int timed = timed_on && v == V_NEW && w != W_MIN;
    do {
        redisReply *r = evalsha(k->sha, k->nkeys, k->keys, k->argc, k->argv);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)(k->items_at + batch + timed))
            die("reserve", r);
        if (timed) self += (double)r->element[k->items_at + batch]->integer;
        for (int i = 0; i < batch; i++) {
            redisReply *it = r->element[k->items_at + i];
            if (it->type != REDIS_REPLY_ARRAY || it->element[0]->integer != 1) {
                fprintf(stderr, "bench_reserve: %s: item %d not granted\n", work_name[w], i + 1);
                exit(1);
            }
        }
        freeReplyObject(r);
        n++;
    } while ((t = now_s()) - t0 < secs);
    long long calls, usec;
    evalsha_stats(&calls, &usec);
    if (calls != n) {
        fprintf(stderr, "bench_reserve: commandstats counted %lld calls, the client made %ld\n", calls, n);
        exit(1);
    }
    *calls_s = (double)n / (t - t0);
    last_self_share = usec > 0 ? self / (double)usec : 0;
    free(k);
    return (double)usec / (double)calls / batch;
}

int main(int argc, char **argv) {
    opts o = {.rounds = 5, .seconds = 0.3};
    if (bench_opts_parse("bench_reserve", rows, sizeof(rows) / sizeof(*rows), &o, argc, argv) != 0) return 2;
    if (o.help) {
        printf("usage: bench_reserve [options]\n");
        for (size_t i = 0; i < sizeof(rows) / sizeof(*rows); i++) printf("  %-10s %s\n", rows[i].name, rows[i].help);
        return 0;
    }
    int rounds = (int)o.rounds;
    timed_on = o.timed;
    redis_fixture fx;
    if (redis_fixture_start(&fx, 0) != 0) return 1;
    c = redis_fixture_connect(&fx);
    if (!c) return 1;
    load(MINIMAL_LUA, strlen(MINIMAL_LUA), minimal_sha);
    const script *res = scripts_get(SCRIPT_RESERVE), *conf = scripts_get(SCRIPT_CONFIGURE);
    load(res->source, res->len, ver[V_NEW].reserve);
    load(conf->source, conf->len, ver[V_NEW].configure);
    ver[V_NEW].on = 1;
    if (o.old) {
        load_old(o.old, "reserve.lua", ver[V_OLD].reserve);
        load_old(o.old, "configure.lua", ver[V_OLD].configure);
        ver[V_OLD].on = 1;
    }
    configure(V_NEW, "minimal", cfg_plain);
    for (int v = 0; v < NVER; v++) {
        if (!ver[v].on) continue;
        char d[64];
        dep_name(v, "plain", d, sizeof(d));
        configure(v, d, cfg_plain);
        dep_name(v, "split", d, sizeof(d));
        configure(v, d, cfg_split);
        dep_name(v, "lt", d, sizeof(d));
        configure(v, d, cfg_lt);
        for (int j = 1; j <= 3; j++) {
            char what[8];
            snprintf(what, sizeof(what), "m%d", j);
            dep_name(v, what, d, sizeof(d));
            configure(v, d, cfg_plain);
        }
    }

    int run[NWORK] = {1, 1, 1, 1, 1};
    if (o.rows) {
        for (int w = W_PLAIN; w < NWORK; w++) {
            char pat[16];
            snprintf(pat, sizeof(pat), ",%s,", work_key[w]);
            char list[256];
            snprintf(list, sizeof(list), ",%s,", o.rows);
            run[w] = strstr(list, pat) != NULL;
        }
    }
    /* A round runs, for each workload and batch size in a rotating order,
     * a group of segments back to back: the minimal script, the built
     * scripts and (--old) the old ones, the last two in alternating order.
     * The ratios are taken within a group and their medians reported, so
     * the machine's drift (shared cores) cancels out of them. */
    typedef struct grp {
        int w, b;
    } grp;
    grp grps[NWORK * NBATCH];
    int ngrp = 0;
    for (int w = W_PLAIN; w < NWORK; w++)
        for (int b = 0; b < NBATCH; b++)
            if (run[w]) grps[ngrp++] = (grp){w, b};
    static double us[NVER][NWORK][NBATCH][MAXROUNDS], cps[NVER][NWORK][NBATCH][MAXROUNDS];
    static double rmin[NVER][NWORK][NBATCH][MAXROUNDS], rold[NWORK][NBATCH][MAXROUNDS];
    static double share[NWORK][NBATCH][MAXROUNDS];
    static double umin[NBATCH][MAXROUNDS * NWORK], cmin[NBATCH][MAXROUNDS * NWORK];
    int nmin[NBATCH] = {0};
    for (int k = 0; k < rounds; k++) {
        for (int i = 0; i < ngrp; i++) {
            grp g = grps[(i + k * 5) % ngrp];
            double cm, mu = segment(V_NEW, W_MIN, g.b, o.seconds, &cm);
            umin[g.b][nmin[g.b]] = mu;
            cmin[g.b][nmin[g.b]++] = cm;
            for (int t = 0; t < NVER; t++) {
                int v = (t + k) % NVER;
                if (!ver[v].on) continue;
                us[v][g.w][g.b][k] = segment(v, g.w, g.b, o.seconds, &cps[v][g.w][g.b][k]);
                if (v == V_NEW) share[g.w][g.b][k] = last_self_share;
                rmin[v][g.w][g.b][k] = us[v][g.w][g.b][k] / mu;
            }
            if (o.old) rold[g.w][g.b][k] = us[V_NEW][g.w][g.b][k] / us[V_OLD][g.w][g.b][k];
        }
        fprintf(stderr, "bench_reserve: round %d of %d done\n", k + 1, rounds);
    }
    double m[NVER][NWORK][NBATCH], mc[NVER][NWORK][NBATCH], mr[NVER][NWORK][NBATCH], mo[NWORK][NBATCH];
    for (int b = 0; b < NBATCH; b++) {
        m[V_NEW][W_MIN][b] = median(umin[b], nmin[b]);
        mc[V_NEW][W_MIN][b] = median(cmin[b], nmin[b]);
        mr[V_NEW][W_MIN][b] = 1;
    }
    for (int i = 0; i < ngrp; i++) {
        grp g = grps[i];
        for (int v = 0; v < NVER; v++) {
            if (!ver[v].on) continue;
            m[v][g.w][g.b] = median(us[v][g.w][g.b], rounds);
            mc[v][g.w][g.b] = median(cps[v][g.w][g.b], rounds);
            mr[v][g.w][g.b] = median(rmin[v][g.w][g.b], rounds);
        }
        if (o.old) mo[g.w][g.b] = median(rold[g.w][g.b], rounds);
    }

    redisReply *vr = redisCommand(c, "INFO server");
    const char *vs = vr && vr->type == REDIS_REPLY_STRING ? strstr(vr->str, "redis_version:") : NULL;
    char version_s[32] = "?";
    if (vs) sscanf(vs, "redis_version:%31[^\r\n]", version_s);
    freeReplyObject(vr);
    printf("Redis time per reserve item (cmdstat_evalsha usec / calls / items), redis-server %s,\n"
           "median of %d rounds of %.2f s per segment, one run; x min: the median of the ratios to the\n"
           "minimal script's segment run just before, at the same batch\n\n",
           version_s, rounds, o.seconds);
    printf("| script | batch 1 µs | batch 10 µs/item | batch 100 µs/item | x min (1 / 10 / 100) |\n");
    printf("|---|---:|---:|---:|---:|\n");
    for (int v = 0; v < NVER; v++) {
        if (!ver[v].on) continue;
        for (int w = 0; w < NWORK; w++) {
            if ((w == W_MIN && v != V_NEW) || !run[w]) continue;
            const char *tag = w == W_MIN ? "" : v == V_OLD ? ", old" : o.old ? ", new" : "";
            printf("| %s%s | %.2f | %.2f | %.2f | %.2f / %.2f / %.2f |\n", work_name[w], tag, m[v][w][0], m[v][w][1],
                   m[v][w][2], mr[v][w][0], mr[v][w][1], mr[v][w][2]);
        }
    }
    if (run[W_PLAIN] && (run[W_LT] || run[W_GROUP])) {
        printf("\nper item against plain (medians):");
        for (int w = W_LT; w < NWORK; w++)
            if (run[w])
                printf(" %s %.2f / %.2f / %.2f;", work_name[w], m[V_NEW][w][0] / m[V_NEW][W_PLAIN][0],
                       m[V_NEW][w][1] / m[V_NEW][W_PLAIN][1], m[V_NEW][w][2] / m[V_NEW][W_PLAIN][2]);
        printf("\n");
    }
    if (o.old) {
        printf("\nnew / old, Redis time per item (median of the ratios of segments run back to back):\n\n");
        printf("| script | batch 1 | batch 10 | batch 100 |\n|---|---:|---:|---:|\n");
        for (int w = W_PLAIN; w < NWORK; w++)
            if (run[w]) printf("| %s | %.2f | %.2f | %.2f |\n", work_name[w], mo[w][0], mo[w][1], mo[w][2]);
    }
    printf("\nclient side, one blocking client on a UNIX socket (round trip included), decisions/s:\n\n");
    printf("| script | batch 1 | batch 10 | batch 100 |\n|---|---:|---:|---:|\n");
    for (int v = 0; v < NVER; v++) {
        if (!ver[v].on) continue;
        for (int w = 0; w < NWORK; w++) {
            if ((w == W_MIN && v != V_NEW) || !run[w]) continue;
            const char *tag = w == W_MIN ? "" : v == V_OLD ? ", old" : o.old ? ", new" : "";
            printf("| %s%s | %.0f | %.0f | %.0f |\n", work_name[w], tag, mc[v][w][0], mc[v][w][1] * 10,
                   mc[v][w][2] * 100);
        }
    }
    if (timed_on) {
        printf("\n--timed: the reserve's own time (TIME at its start and end, what the agent sizes batches by)\n"
               "as a share of Redis' usec for the same calls (medians):\n\n");
        printf("| script | batch 1 | batch 10 | batch 100 |\n|---|---:|---:|---:|\n");
        for (int w = W_PLAIN; w < NWORK; w++)
            if (run[w])
                printf("| %s | %.2f | %.2f | %.2f |\n", work_name[w], median(share[w][0], rounds),
                       median(share[w][1], rounds), median(share[w][2], rounds));
    }
    redisFree(c);
    redis_fixture_stop(&fx);
    return 0;
}
